"""Caffe's ``Net::FilterNet`` and ``Net::StateMeetsRule``, pure, with reasons.

A layer with no ``include`` rules is kept unless the NetState meets one of its
``exclude`` rules; a layer with ``include`` rules is kept only if the state
meets one of them. Rules are checked in Caffe's order (excludes while still
included, then includes while not included) and every failed check is logged
through :data:`engine.core.log.net_log` word for word as Caffe does (phases as
numbers: TRAIN is 0, TEST is 1), e.g.
``The NetState phase (0) differed from the phase (1) specified by a rule in layer mnist``.

:func:`filter_net` also returns one :class:`DroppedLayer` per removed layer,
saying which rule decided and why.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from google.protobuf import text_format

from engine.core.errors import NetError, mark_layer
from engine.core.log import net_log
from engine.proto import caffe_pb2

__all__ = ["RuleCheck", "DroppedLayer", "state_meets_rule", "filter_net", "rule_text"]


def rule_text(rule):
    """A NetStateRule as one line of prototxt, e.g. ``phase: TRAIN stage: "train"``."""
    return text_format.MessageToString(rule, as_one_line=True)


@dataclass(frozen=True)
class RuleCheck:
    """One rule of a layer checked against the NetState."""
    kind: str                 # "include" or "exclude"
    index: int                # position among the layer's include/exclude rules
    rule: str                 # the rule as one-line prototxt
    met: bool                 # whether the NetState meets the rule
    reason: Optional[str]     # Caffe's message when the rule is not met, else None


@dataclass(frozen=True)
class DroppedLayer:
    """A layer FilterNet removed.

    ``rule_kind``/``rule_index``/``rule`` name the deciding rule: for an
    exclude, the exclude rule the state met; for include rules, the last one
    checked (all of them failed). ``reason`` says why: for a single include
    rule, Caffe's message; for several, each rule's message; for an exclude,
    which rule was met. ``checks`` holds every rule checked, in Caffe's order.
    """
    index: int                # the layer's position in the unfiltered net
    name: str
    type: str
    rule_kind: str            # "include" or "exclude"
    rule_index: int
    rule: str
    reason: str
    checks: Tuple[RuleCheck, ...] = field(default_factory=tuple)
    bottoms: Tuple[str, ...] = ()  # as written, so a viewer can draw the dropped layer
    tops: Tuple[str, ...] = ()

    def describe(self):
        return "layer %d '%s' (%s) dropped by %s rule %d {%s}: %s" % (
            self.index, self.name, self.type, self.rule_kind, self.rule_index, self.rule,
            self.reason)


def state_meets_rule(state, rule, layer_name, log=True):
    """StateMeetsRule: ``(met, reason)``; ``reason`` is Caffe's message when the
    rule is broken (and is logged at INFO unless ``log`` is False), else None."""
    reason = None
    if rule.HasField("phase") and rule.phase != state.phase:
        reason = ("The NetState phase (%d) differed from the phase (%d) specified by a rule "
                  "in layer %s" % (state.phase, rule.phase, layer_name))
    elif rule.HasField("min_level") and state.level < rule.min_level:
        # Caffe's own wording ("above") for the min_level case.
        reason = ("The NetState level (%d) is above the min_level (%d) specified by a rule "
                  "in layer %s" % (state.level, rule.min_level, layer_name))
    elif rule.HasField("max_level") and state.level > rule.max_level:
        reason = ("The NetState level (%d) is above the max_level (%d) specified by a rule "
                  "in layer %s" % (state.level, rule.max_level, layer_name))
    else:
        stages = list(state.stage)
        for stage in rule.stage:
            if stage not in stages:
                reason = ("The NetState did not contain stage '%s' specified by a rule "
                          "in layer %s" % (stage, layer_name))
                break
        if reason is None:
            for stage in rule.not_stage:
                if stage in stages:
                    reason = ("The NetState contained a not_stage '%s' specified by a rule "
                              "in layer %s" % (stage, layer_name))
                    break
    if reason is None:
        return True, None
    if log:
        net_log.info("%s", reason)
    return False, reason


def filter_net(param, state=None, log=True):
    """FilterNet: ``(filtered NetParameter, [DroppedLayer, ...])``.

    The NetState is ``param.state`` (NetState's defaults when unset: phase
    TEST, level 0) unless ``state`` is given. The filtered net is a copy of
    ``param`` (state and all) holding only the kept layers; ``param`` is not
    changed. Raises NetError for a layer with both include and exclude rules.
    """
    if state is None:
        state = param.state
    net_state = caffe_pb2.NetState()
    net_state.CopyFrom(state)
    out = type(param)()
    out.CopyFrom(param)
    del out.layer[:]
    dropped: List[DroppedLayer] = []
    for i, layer in enumerate(param.layer):
        name = layer.name
        if len(layer.include) and len(layer.exclude):
            raise mark_layer(NetError("Specify either include rules or exclude rules; not both. "
                                      "(layer '%s')" % name, layer=name, field="exclude"), "upgraded", i)
        checks = []
        included = len(layer.include) == 0
        decider = None
        j = 0
        while included and j < len(layer.exclude):
            rule = layer.exclude[j]
            met, reason = state_meets_rule(net_state, rule, name, log)
            checks.append(RuleCheck("exclude", j, rule_text(rule), met, reason))
            if met:
                included = False
                decider = checks[-1]
            j += 1
        j = 0
        while not included and j < len(layer.include):
            rule = layer.include[j]
            met, reason = state_meets_rule(net_state, rule, name, log)
            checks.append(RuleCheck("include", j, rule_text(rule), met, reason))
            if met:
                included = True
            else:
                decider = checks[-1]
            j += 1
        if included:
            out.layer.add().CopyFrom(layer)
            continue
        if decider.kind == "exclude":
            why = "the NetState meets exclude rule %d {%s}" % (decider.index, decider.rule)
        elif len(layer.include) > 1:
            why = "the NetState meets none of the %d include rules; %s" % (
                len(layer.include), "; ".join("include %d: %s" % (c.index, c.reason)
                                              for c in checks if c.kind == "include"))
        else:
            why = decider.reason
        dropped.append(DroppedLayer(i, name, layer.type, decider.kind, decider.index,
                                    decider.rule, why, tuple(checks),
                                    tuple(layer.bottom), tuple(layer.top)))
    return out, dropped

"""Breakpoints and watchpoints: conditions that stop Forward, Backward or a solver run.

A condition is written as on the command line (``python -m engine debug MODEL
--break-when COND``) and in the inspector's Breakpoints panel:

=============================  ==================================================================
``nonfinite``                  a layer's output has NaN or Inf: a top's data (forward), a
                               propagated bottom diff or a param diff (backward), a param after
                               an update
``layer=NAME``                 layer NAME ran (forward or backward): stop after it
``BLOB.STAT OP NUMBER``        when a layer writes blob BLOB's data, STAT of it satisfies the
                               comparison; ``BLOB.diff.STAT``: its gradient (backward);
                               ``BLOB.data.STAT`` is the same as ``BLOB.STAT``.  STAT is one of
                               ``mean_abs`` (Caffe's mean |x|), ``max_abs``, ``std``,
                               ``zero_fraction``; OP one of ``>`` ``>=`` ``<`` ``<=``.  BLOB is a
                               blob name, a param as ``LAYER/K`` (K-th param blob of LAYER) or
                               the param's shared name
``LAYER.update_ratio OP NUMBER``  after a solver update, |Δw|₂/|w|₂ of a param of LAYER
                               (``LAYER/K.update_ratio``: that param only)
``loss.jump > FACTOR``         solver runs: the iteration's loss is more than FACTOR times the
                               previous iteration's
``loss.nonfinite``             solver runs: the loss is NaN or Inf
``loss OP NUMBER``             solver runs: the loss compared with a number
=============================  ==================================================================

A condition fires whenever it holds at the moment the value is written (a
conditional breakpoint): a blob statistic is tested right after the layer that
wrote the blob, so the hit names the layer that produced the value.  The
solver's conditions are tested after each iteration, against the loss Caffe
reports for it (and, for a jump, the previous iteration's).

    bps = Breakpoints(["nonfinite", "conv1.max_abs > 1e4"])
    res = run_forward(net, 0, len(net.layers) - 1, bps, recorder=rec)
    if res.hit: print(res.hit.message)          # break: conv1: conv1.max_abs > 10000

:func:`run_forward` / :func:`run_backward` run Net::ForwardFromTo /
BackwardFromTo and stop after the layer that fired (the rest of the range does
not run; the Recorder, when attached, has recorded the layers that ran).
:meth:`Breakpoints.watching` does the same around any code (a solver step).
Every hit is counted on its breakpoint and kept in :attr:`Breakpoints.hits`.

A :class:`TimeLimit` given to them (``time_limit=``) stops the run the same way after the
first layer that ends past it: a hit with ``breakpoint_id`` :data:`TIME_LIMIT_ID` (no
breakpoint of the list; nothing counted), so a caller that must answer within a bound (the
inspector's page) stops between layers and can go on later from where it stopped.
"""
import difflib
import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import numpy as np

from engine.core import backend
from engine.core.errors import CaffeError
from engine.core.layers.base import loss_weight
from engine.instruments.debug import array_stats, health_stats
from engine.instruments.observer import NetObserver

STATS = ("mean_abs", "max_abs", "std", "zero_fraction")
PARAM_STATS = ("update_ratio",)
OPS = (">=", "<=", ">", "<")
SOLVER_KINDS = ("loss_jump", "loss_nonfinite", "loss")
MAX_HITS = 1000
TIME_LIMIT_ID = 0         # a Hit's breakpoint_id when a TimeLimit stopped the run (breakpoints count from 1)

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf"
_STAT_RE = re.compile(r"^(?P<target>.+?)(?:\.(?P<which>data|diff))?\.(?P<stat>%s)\s*(?P<op>>=|<=|>|<)\s*"
                      r"(?P<num>%s)$" % ("|".join(STATS + PARAM_STATS), _NUMBER))
_LOSS_RE = re.compile(r"^loss(?:\.(?P<what>jump))?\s*(?P<op>>=|<=|>|<)\s*(?P<num>%s)$" % _NUMBER)


class ConditionError(CaffeError, ValueError):
    """A condition that cannot be parsed, or names a blob or layer the net lacks."""

    def __init__(self, message, text="", blob=None, layer=None):
        self.text, self.blob, self.layer = text, blob, layer
        super().__init__(message)


class BreakpointHit(Exception):
    """Raised by a watching observer to stop the range after the layer that fired."""

    def __init__(self, hit):
        self.hit = hit
        super().__init__(hit.message)


# ---------------------------------------------------------------------- conditions
@dataclass(frozen=True)
class Condition:
    """One parsed condition (see the module doc); ``str()`` gives its canonical text."""
    kind: str                 # "nonfinite", "layer", "stat", "loss_jump", "loss_nonfinite", "loss"
    target: str = ""          # layer (layer=), blob or param (stat)
    which: str = "data"       # "data" or "diff" (stat)
    stat: str = ""
    op: str = ""
    threshold: float = 0.0

    def __str__(self):
        if self.kind in ("nonfinite",):
            return "nonfinite"
        if self.kind == "loss_nonfinite":
            return "loss.nonfinite"
        if self.kind == "layer":
            return "layer=%s" % self.target
        num = _num_text(self.threshold)
        if self.kind == "loss_jump":
            return "loss.jump %s %s" % (self.op, num)
        if self.kind == "loss":
            return "loss %s %s" % (self.op, num)
        which = ".diff" if self.which == "diff" else ""
        return "%s%s.%s %s %s" % (self.target, which, self.stat, self.op, num)

    @property
    def solver_only(self):
        return self.kind in SOLVER_KINDS

    def holds(self, value):
        """The comparison on ``value`` (False for NaN and None)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        v, t = float(value), self.threshold
        return {">": v > t, ">=": v >= t, "<": v < t, "<=": v <= t}[self.op]


def _num_text(x):
    return "%g" % x


def parse_condition(text, net=None):
    """A :class:`Condition` from its text; with ``net``, the blobs and layers it
    names must exist there (else :class:`ConditionError` says which, with the
    closest names)."""
    if isinstance(text, Condition):
        cond = text
    else:
        cond = _parse(str(text))
    if net is not None:
        validate(cond, net)
    return cond


def _parse(text):
    t = " ".join(text.strip().split())
    if not t:
        raise ConditionError("empty condition: write nonfinite, layer=NAME, BLOB.STAT > NUMBER or "
                             "loss.jump > FACTOR", text)
    low = t.lower()
    if low in ("nonfinite", "nan", "inf"):
        return Condition("nonfinite")
    if low in ("loss.nonfinite", "loss.nan"):
        return Condition("loss_nonfinite")
    if low.startswith("layer="):
        name = t[len("layer="):].strip()
        if not name:
            raise ConditionError("layer= needs a layer name (layer=conv1)", text)
        return Condition("layer", target=name)
    m = _LOSS_RE.match(t)
    if m:
        thr = float(m.group("num"))
        if m.group("what") == "jump":
            if not thr > 0:
                raise ConditionError("loss.jump needs a positive factor (loss.jump > 10), not %s" % m.group("num"),
                                     text)
            return Condition("loss_jump", op=m.group("op"), threshold=thr)
        return Condition("loss", op=m.group("op"), threshold=thr)
    m = _STAT_RE.match(t)
    if m:
        target, which, stat = m.group("target").strip(), m.group("which") or "data", m.group("stat")
        if stat in PARAM_STATS and m.group("which"):
            raise ConditionError("%s is a statistic of a solver update, not of a blob's %s: write "
                                 "LAYER.update_ratio > NUMBER" % (stat, which), text)
        if target == "loss":
            raise ConditionError("loss conditions are loss.jump > FACTOR, loss.nonfinite or loss > NUMBER", text)
        return Condition("stat", target=target, which=which, stat=stat, op=m.group("op"),
                         threshold=float(m.group("num")))
    raise ConditionError(
        "cannot read the condition %r: write nonfinite, layer=NAME, BLOB.STAT OP NUMBER or BLOB.diff.STAT OP "
        "NUMBER (STAT: %s; OP: > >= < <=), LAYER.update_ratio OP NUMBER, loss.jump > FACTOR or loss.nonfinite"
        % (text, ", ".join(STATS)), text)


def validate(cond, net):
    """Raise :class:`ConditionError` when ``cond`` names something ``net`` lacks."""
    if cond.kind == "layer":
        if cond.target not in net.layer_names:
            raise ConditionError("layer=%s: the net has no layer '%s'%s" % (
                cond.target, cond.target, _close(cond.target, net.layer_names)), str(cond), layer=cond.target)
    elif cond.kind == "stat":
        ref = resolve(net, cond.target, params_first=cond.stat in PARAM_STATS)
        if ref is None:
            names = list(net.blob_names) + list(net.layer_names)
            raise ConditionError("%s: the net has no blob, param or layer '%s'%s" % (
                cond, cond.target, _close(cond.target, names)), str(cond), blob=cond.target)
        if cond.stat in PARAM_STATS and ref[0] == "layer" and not net.param_id_vecs[ref[1]]:
            raise ConditionError("%s: layer '%s' has no params, so no update ratio" % (cond, cond.target), str(cond),
                                 layer=cond.target)
        if cond.stat in PARAM_STATS and ref[0] == "blob":
            raise ConditionError("%s: '%s' is a blob; update_ratio is measured on a layer's params "
                                 "(LAYER.update_ratio or LAYER/K.update_ratio)" % (cond, cond.target), str(cond),
                                 blob=cond.target)
        if cond.stat not in PARAM_STATS and ref[0] == "layer":
            raise ConditionError("%s: '%s' is a layer, not a blob: name one of its tops (%s) or a param "
                                 "(%s/0)" % (cond, cond.target, ", ".join(net.top_names[cond.target]) or "none",
                                             cond.target), str(cond), layer=cond.target)


def _close(name, names):
    near = difflib.get_close_matches(name, list(dict.fromkeys(names)), n=3)
    return " (did you mean %s?)" % ", ".join(repr(n) for n in near) if near else ""


def resolve(net, target, params_first=False):
    """What ``target`` names in ``net``: ("blob", name), ("param", net param ids)
    or ("layer", layer index); None when nothing.  A name that is both a blob
    and a layer (conv1's top is conv1) is the blob, unless ``params_first``
    (update_ratio: the layer's params)."""
    if params_first and target in net.layer_names:
        return ("layer", net.layer_names.index(target))
    if target in net.blobs:
        return ("blob", target)
    if "/" in target:
        layer, _, k = target.rpartition("/")
        if layer in net.layer_names and k.isdigit():
            i = net.layer_names.index(layer)
            pids = net.param_id_vecs[i]
            if int(k) < len(pids):
                return ("param", (pids[int(k)],))
    names = net.param_display_names
    pids = tuple(p for p, n in enumerate(names) if n == target and not n.isdigit())
    if pids:
        return ("param", pids)
    if target in net.layer_names:
        i = net.layer_names.index(target)
        return ("layer", i)
    return None


# ---------------------------------------------------------------------- hits
@dataclass
class Hit:
    """Where and why a breakpoint stopped a run."""
    breakpoint_id: int
    condition: str
    layer: str                # the layer that produced the value ("" when unknown)
    layer_index: int
    direction: str            # "forward", "backward", "update" or "solver"
    blob: Optional[str] = None
    which: Optional[str] = None
    value: Optional[float] = None
    iteration: Optional[int] = None
    detail: str = ""

    @property
    def message(self):
        if self.breakpoint_id == TIME_LIMIT_ID:
            return "time limit reached: %s" % self.condition
        return "break: %s: %s" % (self.layer or "?", self.condition)

    @property
    def time_limit(self):
        """Whether a :class:`TimeLimit` stopped the run (not a breakpoint)."""
        return self.breakpoint_id == TIME_LIMIT_ID

    def describe(self):
        """The message with what was measured."""
        bits = [self.direction]
        if self.blob:
            bits.append("%s %s" % (self.blob, self.which or "data"))
        if self.value is not None:
            bits.append("value %s" % _num_text(self.value))
        if self.iteration is not None:
            bits.append("iteration %d" % self.iteration)
        if self.detail:
            bits.append(self.detail)
        return "%s (%s)" % (self.message, ", ".join(bits))

    def to_dict(self):
        d = asdict(self)
        d["message"] = self.message
        return d


@dataclass
class TimeLimit:
    """A run may go on until ``seconds`` have passed since ``started`` (time.monotonic()); the
    layer that ends past it is the last that runs.  ``flag``: what sets it, named in the hit
    ("--run-seconds 120")."""
    seconds: float
    flag: str = ""
    started: float = field(default_factory=time.monotonic)

    def elapsed(self):
        return time.monotonic() - self.started

    def passed(self):
        return self.elapsed() > self.seconds

    def hit(self, name, i, direction):
        what = "%g s" % self.seconds
        if self.flag:
            what += " (%s)" % self.flag
        return Hit(TIME_LIMIT_ID, what, name, i, direction, detail="ran %.1f s" % self.elapsed())


@dataclass
class Breakpoint:
    id: int
    condition: Condition
    enabled: bool = True
    hit_count: int = 0

    def to_dict(self):
        return {"id": self.id, "condition": str(self.condition), "enabled": self.enabled, "hits": self.hit_count}


@dataclass
class RunResult:
    """What a watched range did: the loss of the layers that ran, the hit (or None),
    the last layer that ran."""
    loss: Optional[float]
    hit: Optional[Hit]
    last: int


# ---------------------------------------------------------------------- the collection
class Breakpoints:
    """An editable list of breakpoints with hit counts, and their checks."""

    def __init__(self, conditions=(), net=None):
        self.items: List[Breakpoint] = []
        self.hits: List[Hit] = []
        self._next = 1
        self._prev_loss = None
        self._prev_losses = {}
        self._refs = {}
        for c in conditions:
            self.add(c, net=net)

    # ------------------------------------------------------------ editing
    def add(self, condition, enabled=True, net=None):
        """Add a condition (text or Condition); returns the new breakpoint's id."""
        cond = parse_condition(condition, net)
        bp = Breakpoint(self._next, cond, bool(enabled))
        self._next += 1
        self.items.append(bp)
        return bp.id

    def get(self, bp_id):
        for b in self.items:
            if b.id == bp_id:
                return b
        raise KeyError("no breakpoint #%s" % bp_id)

    def remove(self, bp_id):
        self.items.remove(self.get(bp_id))

    def enable(self, bp_id, enabled=True):
        self.get(bp_id).enabled = bool(enabled)

    def replace(self, bp_id, condition, net=None):
        """Give breakpoint ``bp_id`` a new condition (its hit count restarts)."""
        b = self.get(bp_id)
        b.condition = parse_condition(condition, net)
        b.hit_count = 0

    def clear_hits(self):
        self.hits.clear()
        for b in self.items:
            b.hit_count = 0

    @property
    def active(self):
        return any(b.enabled for b in self.items)

    def _enabled(self, solver):
        return [b for b in self.items if b.enabled and b.condition.solver_only == solver]

    def _fire(self, bp, hit):
        bp.hit_count += 1
        self.hits.append(hit)
        if len(self.hits) > MAX_HITS:
            del self.hits[: len(self.hits) - MAX_HITS]
        return hit

    def to_dict(self):
        return {"breakpoints": [b.to_dict() for b in self.items], "hits": [h.to_dict() for h in self.hits]}

    # ------------------------------------------------------------ checks
    def _ref(self, net, target, params_first=False):
        key = (id(net), target, params_first)
        if key not in self._refs:
            self._refs[key] = resolve(net, target, params_first)
        return self._refs[key]

    def check_layer(self, net, i, direction, recorder=None, time_limit=None):
        """After layer ``i`` ran in ``direction`` ("forward" or "backward"): the
        first enabled breakpoint whose condition holds, as a Hit (counted), or None;
        then ``time_limit`` (a :class:`TimeLimit`): its hit once it has passed."""
        hit = self._check_conditions(net, i, direction, recorder)
        if hit is None and time_limit is not None and time_limit.passed():
            hit = time_limit.hit(net.layer_names[i], i, direction)
            hit.iteration = getattr(recorder, "iteration", None)
            self.hits.append(hit)
            if len(self.hits) > MAX_HITS:
                del self.hits[: len(self.hits) - MAX_HITS]
        return hit

    def _check_conditions(self, net, i, direction, recorder):
        bps = self._enabled(False)
        if not bps:
            return None
        rec = recorder.current_layer(i, direction) if recorder is not None else None
        name = net.layer_names[i]
        for bp in bps:
            c = bp.condition
            hit = None
            if c.kind == "layer":
                if c.target == name:
                    hit = Hit(bp.id, str(c), name, i, direction)
            elif c.kind == "nonfinite":
                hit = self._nonfinite(bp, net, i, direction, rec)
            elif c.kind == "stat" and c.stat in STATS:
                hit = self._stat(bp, net, i, direction)
            if hit is not None:
                hit.iteration = getattr(recorder, "iteration", None)
                return self._fire(bp, hit)
        return None

    def _outputs(self, net, i, direction):
        """[(name, blob, which, role, index, net param id or None)] of what layer
        ``i`` writes in ``direction``."""
        lname = net.layer_names[i]
        if direction == "forward":
            return [(n, b, "data", "top", k, None) for k, (n, b) in enumerate(zip(net.top_names[lname],
                                                                                  net.top_vecs[i]))]
        out = []
        layer = net.layers[i]
        for k, (n, b) in enumerate(zip(net.bottom_names[lname], net.bottom_vecs[i])):
            if net.bottom_need_backward[i][k]:
                out.append((n, b, "diff", "bottom", k, None))
        for k, pid in enumerate(net.param_id_vecs[i]):
            if layer.get_param_propagate_down(k):
                out.append(("%s/%d" % (lname, k), net.all_params[pid], "diff", "param", k, pid))
        return out

    def _nonfinite(self, bp, net, i, direction, rec):
        name = net.layer_names[i]
        for bname, blob, which, role, k, _pid in self._outputs(net, i, direction):
            b = rec.blob(role, k) if rec is not None else None
            st = getattr(b, which, None) if b is not None else None
            if st is None:
                st = health_stats(_array(blob, which))
            if not st.finite:
                return Hit(bp.id, str(bp.condition), name, i, direction, bname, which,
                           float(st.nan + st.inf), detail="%d NaN, %d Inf of %d values" % (st.nan, st.inf, st.count))
        return None

    def _stat(self, bp, net, i, direction):
        c = bp.condition
        if (c.which == "diff") != (direction == "backward"):
            return None
        ref = self._ref(net, c.target)
        if ref is None:
            return None
        for bname, blob, which, _role, _k, pid in self._outputs(net, i, direction):
            if which != c.which or ref[0] == "layer":
                continue
            if ref[0] == "blob" and (pid is not None or bname != ref[1]):
                continue
            if ref[0] == "param" and pid not in ref[1]:
                continue
            value = stat_value(array_stats(_array(blob, which), bins=0), c.stat)
            if c.holds(value):
                return Hit(bp.id, str(c), net.layer_names[i], i, direction, bname, which, value)
        return None

    def check_update(self, net, step):
        """After a solver update (an "update" StepRecord of the Recorder): stat
        conditions on params' data or diff, update ratios, non-finite params."""
        bps = self._enabled(False)
        if not bps or step is None:
            return None
        for bp in bps:
            c = bp.condition
            for rec in step.layers:
                for b in rec.blobs:
                    if b.role != "param":
                        continue
                    pname = "%s/%d" % (rec.layer, b.index)
                    hit = None
                    if c.kind == "nonfinite" and b.data is not None and not b.data.finite:
                        hit = Hit(bp.id, str(c), rec.layer, rec.layer_index, "update", pname, "data",
                                  float(b.data.nan + b.data.inf))
                    elif c.kind == "stat" and self._names_param(net, c.target, rec, b):
                        if c.stat == "update_ratio":
                            value = b.ratio
                        else:
                            s = b.data if c.which == "data" else b.diff
                            value = stat_value(s, c.stat) if s is not None else None
                        if c.holds(value):
                            hit = Hit(bp.id, str(c), rec.layer, rec.layer_index, "update", pname,
                                      None if c.stat == "update_ratio" else c.which, value)
                    if hit is not None:
                        hit.iteration = step.iteration
                        return self._fire(bp, hit)
        return None

    def _names_param(self, net, target, rec, b):
        ref = self._ref(net, target, params_first=True)
        if ref is None:
            return False
        if ref[0] == "layer":
            return ref[1] == rec.layer_index
        if ref[0] == "param":
            pids = net.param_id_vecs[rec.layer_index]
            return b.index < len(pids) and pids[b.index] in ref[1]
        return False

    def check_solver(self, iteration, loss, net=None):
        """After a solver iteration with ``loss``: loss.jump, loss.nonfinite and
        loss comparisons.  The hit names the loss layer whose weighted loss moved
        most (with ``net``), else "loss"."""
        loss = None if loss is None else float(loss)
        prev = self._prev_loss
        layers = _loss_layers(net) if net is not None else {}
        prev_layers = self._prev_losses
        self._prev_loss, self._prev_losses = loss, layers
        for bp in self._enabled(True):
            c = bp.condition
            value = None
            fired = False
            if c.kind == "loss_nonfinite":
                fired = loss is not None and not math.isfinite(loss)
                value = loss
            elif c.kind == "loss":
                fired, value = c.holds(loss), loss
            elif c.kind == "loss_jump" and loss is not None and math.isfinite(loss) and prev is not None \
                    and math.isfinite(prev) and prev > 0:
                value = loss / prev             # a NaN/Inf loss is loss.nonfinite's
                fired = c.holds(value)
            if fired:
                layer = _culprit(layers, prev_layers) or "loss"
                li = net.layer_names.index(layer) if net is not None and layer in net.layer_names else -1
                detail = "loss %s" % _num_text(loss) if loss is not None else ""
                if c.kind == "loss_jump":
                    detail += " after %s" % _num_text(prev)
                return self._fire(bp, Hit(bp.id, str(c), layer, li, "solver", None, None, value, iteration, detail))
        return None

    # ------------------------------------------------------------ watching a net
    def watching(self, net, recorder=None, time_limit=None):
        """``with bps.watching(net, rec):`` layers run inside raise
        :class:`BreakpointHit` after the layer a condition fired on (or the first that
        ends past ``time_limit``)."""
        return _Watch(self, net, recorder, time_limit)


class _Watch(NetObserver):
    """A net debug observer (after the Recorder in ``net.debug_observers``)."""

    def __init__(self, bps, net, recorder, time_limit=None):
        super().__init__(net)
        self.bps, self.recorder, self.time_limit = bps, recorder, time_limit
        self._last = None

    def begin(self, kind, start, end):
        self._last = end          # the time limit does not stop a range after its last layer: it is done

    def after_layer(self, kind, i):
        limit = self.time_limit if i != self._last else None
        hit = self.bps.check_layer(self.net, i, kind, self.recorder, limit)
        if hit is not None:
            raise BreakpointHit(hit)


class SolverWatch:
    """Breakpoints over a solver run (``Solver.solve()`` or ``step(n)``).

    Layer conditions stop inside an iteration's forward or backward (before its
    update); after each iteration's update, the update conditions (on the "update"
    record of ``recorder``, which the caller attached to the solver with
    ``Recorder.attach_solver``) and the loss conditions (on the loss Caffe computes
    for the iteration) are checked.  A hit raises :class:`BreakpointHit` out of the
    solver, with the iteration it happened in: no snapshot, test or display after it.

        with SolverWatch(solver, bps, rec, action=handler.get_action_function()):
            solver.solve()

    The solver asks its action function after every iteration and before every test
    batch; the watch checks once per finished iteration, then answers with
    ``action`` (another action function, e.g. caffe train's signal handler), if any.
    """

    def __init__(self, solver, bps, recorder=None, action=None):
        self.solver, self.bps, self.recorder, self.action = solver, bps, recorder, action
        self._checked = None
        self._start = None
        self._watch = None

    def __enter__(self):
        self._checked = self.solver.iter
        self._start = self.solver.iter
        self._watch = self.bps.watching(self.solver.net, self.recorder).__enter__()
        self.solver.set_action_function(self._asked)
        return self

    def __exit__(self, exc_type, exc, tb):
        self.solver.set_action_function(self.action)
        self._watch.__exit__(exc_type, exc, tb)
        if isinstance(exc, BreakpointHit) and exc.hit.iteration is None:
            exc.hit.iteration = int(self.solver.iter)      # inside the iteration's forward or backward
        return False

    def _asked(self):
        it = int(self.solver.iter)
        if it != self._checked:          # an iteration finished (its update applied): check it once
            self._checked = it
            hit = self.check_iteration(it - 1)
            if hit is not None:
                raise BreakpointHit(hit)
        return int(self.action()) if self.action is not None else 0

    def check_iteration(self, iteration):
        """The update and loss conditions after iteration ``iteration``; the Hit or None."""
        net = self.solver.net
        update = self.recorder.last("update") if self.recorder is not None else None
        hit = self.bps.check_update(net, update) if update is not None and update.iteration == iteration else None
        return hit or self.bps.check_solver(iteration, self.iteration_loss(iteration), net)

    def iteration_loss(self, iteration):
        """The loss Solver::Step computed for ``iteration`` (before smoothing): the
        newest of its ``losses_``, a list each Step call restarts and that, once
        ``average_loss`` long, is overwritten in a ring from the Step's first iteration."""
        losses = list(getattr(self.solver, "losses_", None) or [])
        if not losses:
            return None
        if len(losses) == 1:
            self._start = iteration           # the first iteration of a Step call
        size = max(int(self.solver.param.average_loss), 1)
        if len(losses) < size:
            return float(losses[-1])
        return float(losses[(iteration - self._start) % size])


def run_forward(net, start, end, bps, recorder=None, time_limit=None):
    """Net::ForwardFromTo(start, end), stopping after the layer a breakpoint fired on (or
    the first layer that ends past ``time_limit``)."""
    with bps.watching(net, recorder, time_limit):
        try:
            loss = net.ForwardFromTo(start, end)
            return RunResult(float(loss), None, end)
        except BreakpointHit as e:
            return RunResult(partial_loss(net, start, e.hit.layer_index), e.hit, e.hit.layer_index)


def run_backward(net, start, end, bps, recorder=None, time_limit=None):
    """Net::BackwardFromTo(start, end) (start >= end), stopping after the layer a breakpoint
    fired on (or the first layer that ends past ``time_limit``)."""
    with bps.watching(net, recorder, time_limit):
        try:
            net.BackwardFromTo(start, end)
            return RunResult(None, None, end)
        except BreakpointHit as e:
            return RunResult(None, e.hit, e.hit.layer_index)


# ---------------------------------------------------------------------- helpers
def stat_value(st, stat):
    """A named statistic of BlobStats (None when the stats do not know it)."""
    if st is None:
        return None
    if stat == "mean_abs":
        return float(st.asum_mean)
    if st.partial:
        return None
    if stat == "max_abs":
        return max(abs(float(st.min)), abs(float(st.max)))
    if stat == "std":
        return float(st.std)
    if stat == "zero_fraction":
        return float(st.frac_zero)
    raise ConditionError("unknown statistic %r (one of %s)" % (stat, ", ".join(STATS)))


def partial_loss(net, start, last):
    """The weighted loss of layers start..last (what ForwardFromTo would have returned had it stopped there)."""
    total = 0.0
    for i in range(start, last + 1):
        layer = net.layers[i]
        for t, blob in enumerate(net.top_vecs[i]):
            w = loss_weight(layer, t)
            if w:
                total += float(w) * _sum(blob)
    return total


def _sum(blob):
    arr = _array(blob, "data")
    return float(backend.to_host(arr.reshape(-1).sum(dtype=backend.xp_of(arr).float64)))


def _array(blob, which):
    """The blob's data or diff where its current copy lives."""
    mem = blob.data_memory if which == "data" else blob.diff_memory
    if mem is None:           # no memory (count 0 since it was made): nothing in it
        return np.zeros(blob.shape, blob.dtype)
    gpu = mem.head == 2
    return blob.get_data(gpu) if which == "data" else blob.get_diff(gpu)


def _loss_layers(net):
    """{layer name: its weighted loss now} for the layers with a loss weight."""
    out = {}
    for i, layer in enumerate(net.layers):
        total = 0.0
        has = False
        for t, blob in enumerate(net.top_vecs[i]):
            w = loss_weight(layer, t)
            if w:
                has = True
                with np.errstate(all="ignore"):
                    total += float(w) * _sum(blob)
        if has:
            out[net.layer_names[i]] = total
    return out


def _culprit(now, before):
    """The loss layer that is non-finite, else the one whose loss grew most."""
    if not now:
        return None
    for name, v in now.items():
        if not math.isfinite(v):
            return name
    best, score = None, -math.inf
    for name, v in now.items():
        p = before.get(name)
        d = abs(v - p) if p is not None and math.isfinite(p) else abs(v)
        if d > score:
            best, score = name, d
    return best

"""Where NaN and Inf come from: every source in a recorded step, per branch.

A *source* is a layer whose output holds NaN or Inf while what it read was
finite: a top's data in forward (its bottoms and params finite), a bottom's or
param's diff in backward (its top diffs, bottoms and params finite), a param
after an update (its data before and its gradient finite).  Non-finite values
then travel downstream (forward) or upstream (backward); the layers that only
carry them are listed with the source(s) they came from, so two branches that
each make their own NaN give two sources.

    for src in sources(step, net):            # a StepRecord (forward, backward or update)
        print(src.message)

Each source summarises the offending layer's inputs as they were when it ran
(min, max, fraction of zeros and of negatives where known) and, for the layer
types where the cause can be read off those numbers, says what happened: Log
of a negative or of zero, Power of a negative base with a fractional exponent,
Exp overflowing float32, a division by zero in a normaliser (BatchNorm, LRN,
MVN with eps 0 on a constant input), a product overflowing float32.

Inputs of forward layers are taken from the record of the layer that wrote
them in the same step (for an in-place layer the Recorder's bottom statistics
are those after the layer ran, i.e. its output); a blob first written in an
earlier step is summarised from the layer's own bottom record.
"""
import math
from dataclasses import dataclass, field
from typing import List, Optional

F32_MAX = 3.4028234663852886e38
LOG_F32_MAX = math.log(F32_MAX)       # exp(x) overflows float32 above this (~88.72)


@dataclass
class InputSummary:
    """One input of the offending layer, as it was when the layer ran."""
    role: str                 # "bottom", "param", "top diff", "data before", "gradient"
    name: str
    count: int
    min: Optional[float]
    max: Optional[float]
    zero_fraction: Optional[float]
    mean_abs: float
    finite: bool
    nan: int = 0
    inf: int = 0

    def text(self):
        if not self.finite:
            return "%s '%s' (%d values): %d NaN, %d Inf" % (self.role, self.name, self.count, self.nan, self.inf)
        if self.min is None or self.max is None or self.min != self.min:
            return "%s '%s': mean |x| %s%s" % (self.role, self.name, _g(self.mean_abs),
                                               "" if self.finite else " (NOT finite)")
        bits = ["min %s" % _g(self.min), "max %s" % _g(self.max)]
        if self.zero_fraction:
            bits.append("%.3g%% zeros" % (100 * self.zero_fraction))
        return "%s '%s' (%d values): %s" % (self.role, self.name, self.count, ", ".join(bits))


@dataclass
class NonFiniteSource:
    """A layer that made NaN/Inf from finite inputs, and where its values went."""
    direction: str            # "forward", "backward" or "update"
    layer: str
    layer_index: int
    type: str
    blob: str                 # the output holding NaN/Inf (params: LAYER/K)
    which: str                # "data" or "diff"
    nan: int
    inf: int
    count: int
    inputs: List[InputSummary] = field(default_factory=list)
    cause: str = ""           # what the inputs say happened ("" when they do not tell)
    carried_by: List[str] = field(default_factory=list)   # layers that passed it on, in run order
    step_id: Optional[int] = None
    iteration: Optional[int] = None
    entered: bool = False     # True: the values were already non-finite in what the layer read

    @property
    def message(self):
        verb = "passes on" if self.entered else "makes"
        text = ("%s of layer '%s' (%s) %s %d NaN and %d Inf of %d values in %s '%s'"
                % (self.direction.capitalize(), self.layer, self.type, verb, self.nan, self.inf, self.count,
                   "diff of" if self.which == "diff" else "top", self.blob))
        if self.inputs:
            text += " from %s inputs (%s)" % ("non-finite" if self.entered else "finite",
                                              "; ".join(i.text() for i in self.inputs))
        if self.cause:
            text += ": " + self.cause
        if self.carried_by:
            shown = ", ".join(self.carried_by[:6]) + (" …" if len(self.carried_by) > 6 else "")
            text += ". Carried on by %d layer%s: %s" % (len(self.carried_by), "" if len(self.carried_by) == 1
                                                        else "s", shown)
        return text

    def to_dict(self):
        d = dict(self.__dict__)
        d["inputs"] = [dict(i.__dict__) for i in self.inputs]
        d["message"] = self.message
        return d


def _g(x):
    if x is None:
        return "-"
    return "%.4g" % x


def _summary(role, name, st):
    if st is None:
        return None
    partial = st.partial
    return InputSummary(role, name, int(st.count), None if partial else float(st.min),
                        None if partial else float(st.max), None if partial else float(st.frac_zero),
                        float(st.asum_mean), st.finite, int(st.nan), int(st.inf))


def sources(step, net=None):
    """Every :class:`NonFiniteSource` of a StepRecord, in run order."""
    if step.kind == "forward":
        found = _forward_sources(step, net)
    elif step.kind == "backward":
        found = _backward_sources(step, net)
    else:
        found = _update_sources(step)
    for s in found:
        s.step_id, s.iteration = step.id, step.iteration
    return found


def _forward_sources(step, net):
    latest = {}               # blob name -> stats of its data as last written in this step
    taint = {}                # blob name -> [sources it carries]
    out = []
    for rec in step.layers:
        bottoms = [b for b in rec.blobs if b.role == "bottom"]
        params = [b for b in rec.blobs if b.role == "param"]
        ins = []
        carried = []
        for b in bottoms:
            st = latest.get(b.name, b.data)
            ins.append(_summary("bottom", b.name, st))
            carried += taint.get(b.name, [])
        for b in params:
            ins.append(_summary("param", "%s/%d" % (rec.layer, b.index), b.data))
        ins = [i for i in ins if i is not None]
        inputs_ok = all(i.finite for i in ins)
        made = None
        for b in rec.blobs:
            if b.role != "top":
                continue
            if b.data is not None and not b.data.finite and made is None and (inputs_ok or not carried):
                given = not bottoms and not params        # a data layer: its tops are what the net was given
                made = NonFiniteSource("forward", rec.layer, rec.layer_index, rec.type, b.name, "data",
                                       b.data.nan, b.data.inf, b.data.count, ins, entered=given or not inputs_ok)
                if given:
                    made.cause = "the data given to the net holds NaN/Inf (blob '%s', as set or read by this %s " \
                                 "layer)" % (b.name, rec.type)
                else:
                    made.cause = _forward_cause(rec, ins, net) if inputs_ok else _entered(ins, "forward")
                out.append(made)
        for b in rec.blobs:
            if b.role != "top":
                continue
            if b.data is not None:
                latest[b.name] = b.data
            if b.data is not None and not b.data.finite:
                srcs = [made] if made is not None else _unique(carried)
                if made is None:
                    for s in srcs:
                        if rec.layer not in s.carried_by:
                            s.carried_by.append(rec.layer)
                taint[b.name] = srcs
            else:
                taint.pop(b.name, None)
    return out


def _backward_sources(step, net):
    taint = {}                # blob name -> sources carried in its diff
    out = []
    for rec in step.layers:
        tops = [b for b in rec.blobs if b.role == "top"]
        bottoms = [b for b in rec.blobs if b.role == "bottom"]
        params = [b for b in rec.blobs if b.role == "param"]
        ins = [_summary("top diff", b.name, b.diff) for b in tops]
        ins += [_summary("bottom", b.name, b.data) for b in bottoms]
        ins += [_summary("param", "%s/%d" % (rec.layer, b.index), b.data) for b in params]
        ins = [i for i in ins if i is not None]
        carried = []
        for b in tops:
            carried += taint.get(b.name, [])
        inputs_ok = all(i.finite for i in ins)
        made = None
        outs = [(b, b.name) for b in bottoms if b.propagate] + \
            [(b, "%s/%d" % (rec.layer, b.index)) for b in params if b.propagate]
        bad = [(b, n) for b, n in outs if b.diff is not None and not b.diff.finite]
        if bad and (inputs_ok or not carried):
            b, n = bad[0]
            made = NonFiniteSource("backward", rec.layer, rec.layer_index, rec.type, n, "diff", b.diff.nan,
                                   b.diff.inf, b.diff.count, ins, entered=not inputs_ok)
            made.cause = _backward_cause(rec, ins, net) if inputs_ok else _entered(ins, "backward")
            out.append(made)
        elif bad:
            for s in _unique(carried):
                if rec.layer not in s.carried_by:
                    s.carried_by.append(rec.layer)
        srcs = [made] if made is not None else _unique(carried)
        for b in bottoms:
            if b.propagate and b.diff is not None and not b.diff.finite:
                taint[b.name] = srcs
            elif b.propagate:
                taint.pop(b.name, None)
    return out


def _update_sources(step):
    out = []
    for rec in step.layers:
        for b in rec.blobs:
            if b.role != "param" or b.data is None or b.data.finite:
                continue
            ins = [i for i in (_summary("data before", "%s/%d" % (rec.layer, b.index), b.before),
                               _summary("gradient", "%s/%d" % (rec.layer, b.index), b.grad)) if i is not None]
            if not all(i.finite for i in ins):
                continue
            s = NonFiniteSource("update", rec.layer, rec.layer_index, rec.type, "%s/%d" % (rec.layer, b.index),
                                "data", b.data.nan, b.data.inf, b.data.count, ins)
            s.cause = "the update overflowed float32 (learning rate times gradient too large?)"
            out.append(s)
    return out


def _entered(ins, direction):
    bad = ["%s '%s'" % (i.role, i.name) for i in ins if not i.finite]
    if direction == "backward" and not any(i.role == "top diff" for i in ins if not i.finite):
        return "the NaN/Inf came in from the forward pass: %s held them when Backward began" % ", ".join(bad)
    return ("the NaN/Inf came in: %s already held them before this layer ran in this step (set from outside, "
            "loaded, or left by an earlier step)" % ", ".join(bad))


def _unique(items):
    seen, out = set(), []
    for s in items:
        if id(s) not in seen:
            seen.add(id(s))
            out.append(s)
    return out


# ---------------------------------------------------------------------- causes
def _param(net, rec, field_name):
    if net is None or not 0 <= rec.layer_index < len(net.layers):
        return None
    lp = net.layers[rec.layer_index].layer_param
    if lp.name != rec.layer:
        return None
    return getattr(lp, field_name)


def _affine(ins, scale, shift):
    """(lo, hi) of shift + scale * x over the first input's range."""
    x = ins[0] if ins else None
    if x is None or x.min is None:
        return None
    a, b = shift + scale * x.min, shift + scale * x.max
    return min(a, b), max(a, b)


def _forward_cause(rec, ins, net):
    t = rec.type
    x = ins[0] if ins else None
    if t == "Log":
        p = _param(net, rec, "log_param")
        scale, shift = (float(p.scale), float(p.shift)) if p is not None else (1.0, 0.0)
        r = _affine(ins, scale, shift)
        if r is not None:
            what = "shift + scale * x" if (scale, shift) != (1.0, 0.0) else "its input"
            if r[0] < 0:
                return "Log of a negative: %s goes down to %s (log of x < 0 is NaN)" % (what, _g(r[0]))
            if r[0] == 0:
                return "Log of zero: %s reaches 0 (log 0 = -inf)" % what
        return "Log of a value <= 0 (log x is NaN for x < 0, -inf at 0)"
    if t == "Power":
        p = _param(net, rec, "power_param")
        power = float(p.power) if p is not None else None
        r = _affine(ins, float(p.scale), float(p.shift)) if p is not None else None
        if r is not None and power is not None:
            if r[0] < 0 and power != int(power):
                return "Power of a negative base: (shift + scale * x) goes down to %s and power %s is not an " \
                       "integer (NaN)" % (_g(r[0]), _g(power))
            if r[0] <= 0 <= r[1] and power < 0:
                return "Power with a negative exponent (%s) of a zero base: division by zero (inf)" % _g(power)
            big = max(abs(r[0]), abs(r[1]))
            if big > 1 and power > 0 and power * math.log(big) > LOG_F32_MAX:
                return "Power overflowed float32: |base| up to %s to the power %s" % (_g(big), _g(power))
        return "Power of a negative base with a fractional exponent, or of zero with a negative one"
    if t == "Exp":
        p = _param(net, rec, "exp_param")
        scale, shift = (float(p.scale), float(p.shift)) if p is not None else (1.0, 0.0)
        base = float(p.base) if p is not None else -1.0
        r = _affine(ins, scale, shift)
        if r is not None:
            ln_base = 1.0 if base == -1 else math.log(base) if base > 0 else float("nan")
            top = r[1] * ln_base
            if top > LOG_F32_MAX:
                return "Exp overflowed float32: the exponent reaches %s (> %.2f)" % (_g(top), LOG_F32_MAX)
        return "Exp overflowed float32"
    if t in ("BatchNorm", "LRN", "MVN"):
        eps = None
        if t == "BatchNorm":
            p = _param(net, rec, "batch_norm_param")
            eps = float(p.eps) if p is not None else None
        elif t == "MVN":
            p = _param(net, rec, "mvn_param")
            eps = float(p.eps) if p is not None else None
        elif t == "LRN":
            p = _param(net, rec, "lrn_param")
            eps = float(p.k) if p is not None else None
        flat = x is not None and x.min is not None and x.min == x.max
        why = "its input is constant (min = max = %s), so the variance is 0" % _g(x.min) if flat and t != "LRN" \
            else ("its input is all zero" if flat else "a variance or sum of squares of 0")
        if eps is not None:
            why += ", and %s is %s" % ("k" if t == "LRN" else "eps", _g(eps))
        if t == "BatchNorm" and net is not None:
            blobs = net.layers[rec.layer_index].blobs
            if len(blobs) >= 3 and float(blobs[2].data.reshape(-1)[0]) == 0 and \
                    net.layers[rec.layer_index].layer_param.batch_norm_param.use_global_stats:
                why = "its moving-average factor (param 2) is 0 with use_global_stats: the stored mean and " \
                      "variance are divided by 0"
        return "division by zero in a normaliser (%s): %s" % (t, why)
    if _overflowing(ins):
        return "the result overflowed float32 (inputs up to %s; float32 ends at %.3g)" % (
            _g(max(max(abs(i.min), abs(i.max)) for i in ins if i.min is not None)), F32_MAX)
    if t in ("InnerProduct", "Convolution", "Deconvolution", "Eltwise", "Scale", "Bias", "Reduction"):
        return "sums or products of the inputs overflowed float32"
    return ""


def _overflowing(ins):
    vals = [max(abs(i.min), abs(i.max)) for i in ins if i.min is not None and i.min == i.min]
    return bool(vals) and max(vals) > 1e18


def _backward_cause(rec, ins, net):
    t = rec.type
    bottom = next((i for i in ins if i.role == "bottom"), None)
    if t == "Log" and bottom is not None and bottom.min is not None and bottom.min <= 0 <= bottom.max:
        return "Log's gradient 1/x at x = 0 is infinite"
    if t == "Power":
        p = _param(net, rec, "power_param")
        if p is not None and 0 < float(p.power) < 1:
            return "Power's gradient power * x^(power - 1) is infinite at a zero base (power %s < 1)" % _g(p.power)
    if t in ("BatchNorm", "MVN", "LRN"):
        return "division by zero in the normaliser's gradient (variance 0 with eps 0?)"
    if _overflowing(ins):
        return "the gradient overflowed float32"
    return ""

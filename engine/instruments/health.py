"""Health checks over debug records: pure functions, records in, findings out.

``check(steps, config)`` runs every check below over :class:`engine.instruments.debug.StepRecord`
lists (a Recorder's ``steps``) and returns a list of :class:`Finding` (severity,
check, layer, blob, message, the measured value and the threshold it crossed).
The sentinel itself (stop at the first non-finite value) lives in
:class:`engine.instruments.debug.Recorder` (``sentinel=True`` raises ``NonFiniteError``).

=====================  ===========================================================  ===========
check                  rule (per step, per layer)                                   default
=====================  ===========================================================  ===========
``nonfinite``          every *source* of NaN/Inf (engine.instruments.nonfinite): a   error
                       layer whose top (forward), bottom or param diff (backward)
                       or updated param holds NaN/Inf while what it read was
                       finite, one finding per source (per branch), with its
                       inputs summarised, the likely cause and the layers that
                       carried it on
``dead_relu``          ReLU top: fraction of exact zeros >= ``dead_fraction``        0.95
                       (all zero: "dead", else "mostly dead"); blob-level: a
                       ReLU whose units are all off for this batch
``vanishing_gradient`` param: |∇w|₂ / |w|₂ < ``vanishing_ratio``                     1e-7
                       (params with lr_mult 0 / no propagation and params whose
                       data is all zero are skipped)
``exploding_gradient`` param: |∇w|₂ / |w|₂ > ``exploding_ratio``                      10
``gradient_flow``      bottom diff |g|₂ relative to the first (closest to the       1e-4 / 1e4
                       loss) bottom diff of the same backward step, outside
                       [``flow_low``, ``flow_high``]: gradient shrinks or grows
                       by orders of magnitude on its way down
``update_ratio``       update step: |Δw|₂ / |w|₂ outside                            1e-4 / 1e-2
                       [``update_low``, ``update_high``]; the classic heuristic is
                       ~1e-3 (CS231n): much lower, the learning rate is likely
                       too small (or the layer frozen by accident); higher, it
                       is likely too large.  Params that did not move (Δw = 0,
                       e.g. lr_mult 0) and params with |w| = 0 are skipped
``weights_not_loaded``  with the net: every learnable param still holds what its     warning
                       filler made (constant fillers exactly, random ones by their
                       range and moments; a prototxt without fillers gives zeros):
                       one finding, which takes in the dead-ReLU findings it
                       explains instead of listing them one by one
``root_cause``         with the net, when a NaN/Inf source has upstream a degenerate  error
                       parameter that explains it (:func:`root_causes`): BatchNorm
                       statistics never filled (moving-average factor 0: Caffe
                       normalises with mean 0 and variance 0, a gain of
                       1/sqrt(eps) per layer), a BatchNorm variance near zero on
                       some channel, a Scale whose factors are all 0; listed
                       first, and the NaN/Inf finding says it follows from it
=====================  ===========================================================  ===========

Why these defaults: gradient-to-weight ratios of healthy nets at initialisation
sit around 1e-3..1 (LeNet: 0.1-0.3; a sigmoid CIFAR net: ~1e-2), so the
vanishing/exploding bounds are 4 orders of magnitude below and ~1.5 above; an
SGD step then moves weights by lr × that ratio, which the update band checks.
The thresholds are hints for a person, not proofs; change them in
:class:`HealthConfig`.

A check that finds the same thing in several steps (the same warning at every solver
iteration) gives one finding for that place, the latest step's, with ``steps`` saying how
many steps found it (:func:`latest_per_place`).
"""
import math
import weakref
from dataclasses import asdict, dataclass, replace
from typing import Optional

import numpy as np

from engine.core import backend
from engine.core.layers.registry import find_layer_class
from engine.instruments import nonfinite

SEVERITIES = ("error", "warning", "info")


@dataclass
class Finding:
    severity: str                 # "error", "warning" or "info"
    check: str                    # "nonfinite", "dead_relu", ...
    layer: str
    blob: Optional[str]
    message: str
    layer_index: int = -1
    step_id: Optional[int] = None
    direction: Optional[str] = None
    value: Optional[float] = None
    threshold: Optional[float] = None
    iteration: Optional[int] = None
    steps: int = 1                # how many of the checked steps found it (the latest one's is kept)
    explains: tuple = ()          # the layers whose findings follow from it (a cause: root_cause, weights_not_loaded)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class HealthConfig:
    dead_fraction: float = 0.95
    dead_types: tuple = ("ReLU",)
    vanishing_ratio: float = 1e-7
    exploding_ratio: float = 10.0
    flow_low: float = 1e-4
    flow_high: float = 1e4
    update_low: float = 1e-4
    update_high: float = 1e-2
    checks: tuple = ("nonfinite", "dead_relu", "vanishing_gradient", "exploding_gradient",
                     "gradient_flow", "update_ratio", "weights_not_loaded")

    def to_dict(self):
        return asdict(self)


def _g(x):
    return "%.3g" % x


def check(steps, config=None, net=None):
    """Every enabled check over ``steps`` (and, with ``net``, over its params);
    findings sorted by severity, then step order."""
    config = config or HealthConfig()
    out = []
    for step in steps:
        if "nonfinite" in config.checks:
            out += check_nonfinite(step, net)
        if "dead_relu" in config.checks:
            out += check_dead_relu(step, config)
        if step.kind == "backward":
            if "vanishing_gradient" in config.checks or "exploding_gradient" in config.checks:
                out += check_param_gradients(step, config)
            if "gradient_flow" in config.checks:
                out += check_gradient_flow(step, config)
        if step.kind == "update" and "update_ratio" in config.checks:
            out += check_update_ratio(step, config)
    out = latest_per_place(out)
    if net is not None and "weights_not_loaded" in config.checks and any(s.kind == "forward" for s in steps):
        out = fold_weights_not_loaded(check_weights_not_loaded(net), out)
    if net is not None and "nonfinite" in config.checks:
        out = fold_root_causes(net, out)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(out, key=lambda f: order.get(f.severity, 9))


def latest_per_place(findings):
    """One finding per place (check, direction, layer, blob): where several steps found the
    same thing (a NaN source stopped on and then run again, a warning every solver
    iteration), the latest step's finding is kept, at its place in the order, with
    ``steps`` the number of steps that found it."""
    last, seen = {}, {}
    for k, f in enumerate(findings):
        key = (f.check, f.direction, f.layer, f.blob)
        last[key] = k
        seen[key] = seen.get(key, 0) + f.steps
    out = []
    for k, f in enumerate(findings):
        key = (f.check, f.direction, f.layer, f.blob)
        if last[key] == k:
            if seen[key] != f.steps:
                f = replace(f, steps=seen[key])
            out.append(f)
    return out


def _finding(step, rec, severity, check_name, blob, message, value=None, threshold=None):
    return Finding(severity, check_name, rec.layer, blob, message, rec.layer_index, step.id, rec.direction,
                   value, threshold, step.iteration)


def check_nonfinite(step, net=None):
    """One finding per source of NaN/Inf in the step (every branch's), forward,
    backward or update (see :mod:`engine.instruments.nonfinite`)."""
    out = []
    for src in nonfinite.sources(step, net):
        f = Finding("error", "nonfinite", src.layer, src.blob, src.message, src.layer_index, step.id,
                    src.direction, float(src.nan + src.inf), 0.0, step.iteration)
        out.append(f)
    return out


def check_dead_relu(step, config):
    out = []
    if step.kind != "forward":
        return out
    for rec in step.layers:
        if rec.type not in config.dead_types:
            continue
        for b in rec.blobs:
            if b.role != "top" or b.data is None or not b.data.count:
                continue
            fz = b.data.frac_zero
            if fz != fz or fz < config.dead_fraction:
                continue
            if fz >= 1.0:
                msg = "%s '%s': every output of blob '%s' is zero (dead for this batch)" % (
                    rec.type, rec.layer, b.name)
            else:
                msg = "%s '%s': %.1f%% of blob '%s' is zero (>= %.0f%%: mostly dead)" % (
                    rec.type, rec.layer, 100 * fz, b.name, 100 * config.dead_fraction)
            out.append(_finding(step, rec, "warning", "dead_relu", b.name, msg, fz, config.dead_fraction))
    return out


def _params_are_statistics(layer_type):
    """True for a type whose param blobs are running statistics, not weights: its Backward
    never writes a param diff (Caffe's BatchNorm: mean, variance, moving-average factor)."""
    cls = find_layer_class(layer_type)
    return bool(cls is not None and cls.params_are_statistics)


def check_param_gradients(step, config):
    out = []
    for rec in step.layers:
        if _params_are_statistics(rec.type):
            continue
        for b in rec.blobs:
            if b.role != "param" or b.propagate is False or b.data is None or b.diff is None:
                continue
            w, g = b.data.l2, b.diff.l2
            if not (w == w and g == g) or w == 0 or w == float("inf") or g == float("inf"):
                continue
            r = g / w
            if "vanishing_gradient" in config.checks and r < config.vanishing_ratio:
                out.append(_finding(step, rec, "warning", "vanishing_gradient", b.name,
                                    "layer '%s' param %s: |grad|/|w| = %s < %s (vanishing gradient)"
                                    % (rec.layer, b.name, _g(r), _g(config.vanishing_ratio)),
                                    r, config.vanishing_ratio))
            elif "exploding_gradient" in config.checks and r > config.exploding_ratio:
                out.append(_finding(step, rec, "warning", "exploding_gradient", b.name,
                                    "layer '%s' param %s: |grad|/|w| = %s > %s (exploding gradient)"
                                    % (rec.layer, b.name, _g(r), _g(config.exploding_ratio)),
                                    r, config.exploding_ratio))
    return out


def check_gradient_flow(step, config):
    out = []
    ref = None
    for rec in step.layers:
        for b in rec.blobs:
            if b.role != "bottom" or not b.propagate or b.diff is None:
                continue
            g = b.diff.l2
            if not g == g or g == float("inf"):
                continue
            if ref is None:
                ref = (g, rec.layer, b.name)
                continue
            if ref[0] == 0:
                continue
            r = g / ref[0]
            if r < config.flow_low:
                out.append(_finding(step, rec, "warning", "gradient_flow", b.name,
                                    "gradient of blob '%s' below layer '%s' is %s of the one at '%s' "
                                    "(< %s: vanishing on the way down)"
                                    % (b.name, rec.layer, _g(r), ref[2], _g(config.flow_low)), r, config.flow_low))
            elif r > config.flow_high:
                out.append(_finding(step, rec, "warning", "gradient_flow", b.name,
                                    "gradient of blob '%s' below layer '%s' is %s times the one at '%s' "
                                    "(> %s: exploding on the way down)"
                                    % (b.name, rec.layer, _g(r), ref[2], _g(config.flow_high)), r, config.flow_high))
    return out


def check_update_ratio(step, config):
    out = []
    for rec in step.layers:
        for b in rec.blobs:
            r = b.ratio
            if b.role != "param" or r is None or r != r or r == float("inf") or r == 0:
                continue
            if r < config.update_low:
                out.append(_finding(step, rec, "warning", "update_ratio", b.name,
                                    "layer '%s' param %s: update/weight = %s < %s (learning rate too small?)"
                                    % (rec.layer, b.name, _g(r), _g(config.update_low)), r, config.update_low))
            elif r > config.update_high:
                out.append(_finding(step, rec, "warning", "update_ratio", b.name,
                                    "layer '%s' param %s: update/weight = %s > %s (learning rate too large?)"
                                    % (rec.layer, b.name, _g(r), _g(config.update_high)), r, config.update_high))
    return out


def findings_from_nonfinite(finding):
    """A Recorder's ``first_nonfinite`` (NonFiniteFinding) as a Finding."""
    if finding is None:
        return []
    return [Finding("error", "nonfinite", finding.layer, finding.blob, finding.message, finding.layer_index,
                    finding.step_id, finding.direction, float(finding.nan + finding.inf), 0.0)]


# ---------------------------------------------------------------------- root causes
#: a BatchNorm or Scale whose gain on some channel exceeds this is "degenerate": with
#: statistics never filled, BatchNorm's gain is 1/sqrt(eps) (316 at Caffe's default eps)
DEGENERATE_GAIN = 30.0


@dataclass
class RootCause:
    """A parameter that makes the net blow up (or go flat) whatever its input."""
    kind: str              # "bn_unfilled", "bn_zero_variance", "scale_zero"
    layers: tuple          # the layers concerned, in net order
    layer_index: int       # the first of them
    gain: float            # the largest per-channel gain (0 for a zero scale)
    message: str


def _ancestors(net, layer_index):
    """The indices of the layers whose output reaches ``layer_index`` (itself included)."""
    producers = {}
    for i in range(len(net.layers)):
        for bid in net._top_id_vecs[i]:
            producers.setdefault(bid, []).append(i)
    seen, todo = set(), [layer_index]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        for bid in net._bottom_id_vecs[i]:
            todo += [j for j in producers.get(bid, ()) if j < i]
    return seen


def _bn_gain(layer):
    """(kind, largest per-channel gain) of a BatchNorm that uses its stored statistics,
    as Caffe computes them: scale factor s = blobs[2]; mean and variance are the stored
    sums times 1/s (0 when s is 0); the output is (x - mean) / sqrt(var + eps)."""
    if not getattr(layer, "use_global_stats", False) or len(layer.blobs) < 3:
        return None, 0.0
    s = float(backend.to_host(layer.blobs[2].get_data()).reshape(-1)[0])
    factor = 0.0 if s == 0 else 1.0 / s
    var = backend.to_host(layer.blobs[1].get_data()).astype(np.float64) * factor
    eps = float(layer.eps)
    if not var.size:
        return None, 0.0
    gain = float(np.max(1.0 / np.sqrt(np.maximum(var, 0.0) + eps)))
    if gain <= DEGENERATE_GAIN:
        return None, gain
    return ("bn_unfilled" if s == 0 or not np.any(var) else "bn_zero_variance"), gain


def root_causes(net, layer_index=None):
    """Degenerate parameters upstream of ``layer_index`` (every layer when None), worst
    kinds first: BatchNorm statistics never filled (Caffe then normalises with mean 0 and
    variance 0: every such layer multiplies its input by 1/sqrt(eps)), BatchNorm
    variances near zero on some channel (the same gain there), a Scale whose factors are
    all zero (its output is its bias alone)."""
    if net is None:
        return []
    scope = _ancestors(net, layer_index) if layer_index is not None else set(range(len(net.layers)))
    groups = {}
    for i in sorted(scope):
        layer = net.layers[i]
        if layer.type == "BatchNorm":
            kind, gain = _bn_gain(layer)
        elif layer.type == "Scale" and layer.blobs:
            w = backend.to_host(layer.blobs[0].get_data())
            kind, gain = ("scale_zero", 0.0) if w.size and not np.any(w) else (None, 0.0)
        else:
            continue
        if kind:
            g = groups.setdefault(kind, [[], [], 0.0])
            g[0].append(net.layer_names[i])
            g[1].append(i)
            g[2] = max(g[2], gain)
    out = []
    for kind in ("bn_unfilled", "bn_zero_variance", "scale_zero"):
        if kind not in groups:
            continue
        names, idx, gain = groups[kind]
        out.append(RootCause(kind, tuple(names), idx[0], gain, _cause_text(kind, names, gain, net)))
    return out


def _cause_text(kind, names, gain, net):
    n = len(names)
    some = "%d %s layer%s (%s%s)" % (n, "Scale" if kind == "scale_zero" else "BatchNorm", "" if n == 1 else "s",
                                   ", ".join(names[:4]), ", …" if n > 4 else "")
    if kind == "bn_unfilled":
        eps = float(net.layer_dict[names[0]].eps)
        return ("BatchNorm statistics never filled in %s: their moving-average factor is 0, so Caffe "
                "normalises with mean 0 and variance 0 and each divides its input by sqrt(eps) = %s "
                "(a gain of %s); stacked, the activations grow until they overflow float32. Load the "
                "trained weights (a .caffemodel holds the statistics), or fill them with TRAIN-phase "
                "forward passes" % (some, _g(math.sqrt(eps)), _g(gain)))
    if kind == "bn_zero_variance":
        return ("BatchNorm variance near zero on some channel in %s: the channel is multiplied by up to "
                "%s (1/sqrt(variance + eps)); check the statistics in the weights" % (some, _g(gain)))
    return ("Scale factors all zero in %s: the output is the bias alone, whatever the input "
            "(a scale factor of 0 in the weights?)" % some)


def nonfinite_root_cause(net, finding):
    """(RootCause or None, weights-not-loaded text or ""): what explains a NaN/Inf source,
    if a degenerate parameter sits upstream of its layer."""
    if net is None or finding is None or getattr(finding, "layer_index", None) is None:
        return None, ""
    causes = root_causes(net, finding.layer_index)
    if not causes:
        return None, ""
    loaded = check_weights_not_loaded(net)
    return causes[0], ("weights not loaded" if loaded else "")


def fold_root_causes(net, findings):
    """Put a ``root_cause`` error first when the first forward NaN/Inf source has a
    degenerate parameter upstream; its nonfinite finding then says it follows from it."""
    first = next((f for f in findings if f.check == "nonfinite" and f.direction != "backward"), None)
    if first is None:
        first = next((f for f in findings if f.check == "nonfinite"), None)
    cause, weights = nonfinite_root_cause(net, first)
    if cause is None:
        return findings
    msg = "root cause of the NaN/Inf at '%s': %s" % (first.layer, cause.message)
    if weights:
        msg += " (the weights are not loaded: every param still holds its filler's values)"
    sources = tuple(dict.fromkeys(f.layer for f in findings if f.check == "nonfinite"))
    root = Finding("error", "root_cause", cause.layers[0], None, msg, cause.layer_index, first.step_id,
                   first.direction, cause.gain, DEGENERATE_GAIN, first.iteration, explains=sources)
    first.message += " — follows from the root cause: %s in %s" % (
        cause.kind.replace("_", " "), cause.layers[0])
    return [root] + findings


def summarize(findings):
    """{"error": n, "warning": n, "info": n}."""
    out = dict.fromkeys(SEVERITIES, 0)
    for f in findings:
        out[f.severity] = out.get(f.severity, 0) + 1
    return out


# ---------------------------------------------------------------------- weights not loaded
# Which filler fills which param blob: {type: (the layer's param field, [filler field per blob])};
# an unset filler is Caffe's default (constant 0), except where noted in _DEFAULT_VALUE.
FILLERS = {
    "Convolution": ("convolution_param", ["weight_filler", "bias_filler"]),
    "Deconvolution": ("convolution_param", ["weight_filler", "bias_filler"]),
    "InnerProduct": ("inner_product_param", ["weight_filler", "bias_filler"]),
    "Embed": ("embed_param", ["weight_filler", "bias_filler"]),
    "PReLU": ("prelu_param", ["filler"]),
    "Scale": ("scale_param", ["filler", "bias_filler"]),
    "Bias": ("bias_param", ["filler"]),
}
_DEFAULT_VALUE = {("PReLU", "filler"): 0.25, ("Scale", "filler"): 1.0}
_ZERO_AT_INIT = ("BatchNorm",)        # mean, variance and the moving-average factor start at 0


def _filler_of(layer, k):
    """(FillerParameter or None, default constant) for param ``k`` of ``layer``; (None, None): unknown."""
    t = layer.type
    if t in _ZERO_AT_INIT:
        return None, 0.0
    spec = FILLERS.get(t)
    if spec is None or k >= len(spec[1]):
        return None, None
    sub = getattr(layer.layer_param, spec[0])
    name = spec[1][k]
    if sub.HasField(name):
        return getattr(sub, name), None
    return None, _DEFAULT_VALUE.get((t, name), 0.0)


def _fans(shape, count):
    fan_in = count // shape[0] if len(shape) >= 1 and shape[0] else count
    fan_out = count // shape[1] if len(shape) > 1 and shape[1] else count
    return fan_in, fan_out


MOMENT_SAMPLE = 1 << 20     # the moments of a bigger blob are taken on an even stride through it


def _moments_match(x, mean, std):
    """Whether the sample's mean and std fit N-like draws with ``mean``, ``std``.  A filler
    draws its values independently, so an even stride through a big blob is as good a
    sample (FCN-8s' fc6 alone holds 103 M values: converting them all to float64 took
    seconds of the first Findings)."""
    if x.size > MOMENT_SAMPLE:
        x = x[::x.size // MOMENT_SAMPLE]
    n = x.size
    if n < 2:
        return abs(float(x.mean()) - mean) <= 6 * std + 1e-12
    m, s = float(x.mean(dtype=np.float64)), float(x.std(dtype=np.float64))
    if abs(m - mean) > 6 * std / math.sqrt(n) + 1e-7 * max(1.0, abs(mean)):
        return False
    return abs(s / std - 1.0) <= max(0.05, 6.0 / math.sqrt(2 * n)) if std > 0 else s == 0


def filler_made(data, filler=None, constant=None):
    """Whether the values in ``data`` look like what the filler produces
    (constant: exactly; random fillers: their range and moments)."""
    x = np.asarray(data).reshape(-1)           # float32 as stored: no float64 copy of a big blob
    if x.size == 0:
        return True
    if not np.isfinite(x).all():
        return False
    if filler is None:
        return bool((x == np.float32(constant)).all())
    t = filler.type
    shape = tuple(data.shape)
    if t == "constant":
        return bool((x == np.float32(filler.value)).all())
    if t == "uniform":
        lo, hi = float(filler.min), float(filler.max)
        if x.min() < lo - 1e-6 * abs(lo) or x.max() > hi + 1e-6 * abs(hi):
            return False
        return _moments_match(x, (lo + hi) / 2, (hi - lo) / math.sqrt(12)) if hi > lo else True
    if t == "gaussian":
        if filler.sparse >= 0:
            nz = x[x != 0]
            return nz.size == 0 or _moments_match(nz, float(filler.mean), float(filler.std))
        return _moments_match(x, float(filler.mean), float(filler.std))
    if t in ("xavier", "msra"):
        fan_in, fan_out = _fans(shape, x.size)
        vn = filler.variance_norm
        n = (fan_in + fan_out) / 2.0 if vn == 2 else float(fan_out if vn == 1 else fan_in)
        if t == "xavier":
            scale = math.sqrt(3.0 / n)
            if max(-float(x.min()), float(x.max())) > scale * (1 + 1e-6):
                return False
            return _moments_match(x, 0.0, scale / math.sqrt(3))
        return _moments_match(x, 0.0, math.sqrt(2.0 / n))
    if t == "positive_unitball":
        if x.min() < 0 or x.max() > 1:
            return False
        rows = x.reshape(shape[0] if shape else 1, -1)
        return bool(np.allclose(rows.sum(axis=1), 1.0, atol=1e-4))
    if t == "bilinear" and len(shape) == 4 and shape[2] == shape[3]:
        width = shape[3]
        f = math.ceil(width / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        i = np.arange(x.size)
        want = (1 - np.abs((i % width) / f - c)) * (1 - np.abs(((i // width) % shape[2]) / f - c))
        return bool(np.allclose(x, want.astype(np.float32), rtol=0, atol=1e-6))
    return False


@dataclass
class WeightsCheck:
    """What :func:`weights_state` found."""
    checked: int = 0          # learnable param blobs with a known filler
    at_filler: int = 0        # of them, still as the filler made them
    zero: int = 0             # of them, all zero
    unset: int = 0            # of them, with no filler in the prototxt (Caffe's default: constant 0)
    layers: tuple = ()        # layers with checked params


_weights_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def weights_state(net, stop_early=True):
    """Compare every owned param blob with its filler (see :func:`filler_made`);
    ``stop_early``: stop at the first one that is not as its filler made it (the
    finding needs them all).  Cached per net while no param's memory changed."""
    mems = [p.data_memory for p in net.all_params]
    key = (stop_early, tuple((id(m), m.version) for m in mems))
    hit = _weights_cache.get(net)
    if hit is not None and hit[0] == key:
        return hit[1]
    st = WeightsCheck()
    layers = []
    for pid, owner in enumerate(net.param_owners):
        if owner >= 0:
            continue
        li, k = net.param_layer_indices[pid]
        layer = net.layers[li]
        filler, constant = _filler_of(layer, k)
        if filler is None and constant is None:
            continue
        data = backend.to_host(net.all_params[pid].get_data())      # a read: no new memory version
        st.checked += 1
        if net.layer_names[li] not in layers:
            layers.append(net.layer_names[li])
        if filler_made(data, filler, constant):
            st.at_filler += 1
            if data.size and not np.any(data):
                st.zero += 1
            if filler is None and constant == 0.0 and layer.type not in _ZERO_AT_INIT:
                st.unset += 1
        elif stop_early:
            break
    st.layers = tuple(layers)
    _weights_cache[net] = (key, st)
    return st


def check_weights_not_loaded(net):
    """[one Finding] when every checked param still holds its filler's values, else [].
    A warning when every param is zero (a deploy prototxt without its weights), else
    information (a net about to be trained from its fillers)."""
    st = weights_state(net)
    if not st.checked or st.at_filler < st.checked:
        return []
    msg = ("weights not loaded: all %d param blobs of %d layers still hold what their fillers made" %
           (st.checked, len(st.layers)))
    if st.zero:
        msg += "; %d of them %s all zero" % (st.zero, "is" if st.zero == 1 else "are")
        if st.unset:
            msg += (" (%d have no filler in the prototxt, so Caffe filled them with 0: a deploy prototxt expects "
                    "a .caffemodel)" % st.unset)
    msg += (". Outputs are those of an untrained net: load the trained weights (--weights FILE.caffemodel, "
            "or Upload weights in the inspector) before reading activations")
    return [Finding("warning" if st.zero == st.checked else "info", "weights_not_loaded",
                    st.layers[0] if st.layers else "", None, msg, value=float(st.at_filler),
                    threshold=float(st.checked))]


def fold_weights_not_loaded(found, findings):
    """The weights finding takes in the dead-ReLU findings: they follow from it."""
    if not found:
        return findings
    w = found[0]
    dead = [f for f in findings if f.check == "dead_relu"]
    if dead:
        w.severity = "warning"
        names = list(dict.fromkeys(f.layer for f in dead))
        w.message += (". That is why %d ReLU layer%s output%s only or mostly zeros (%s%s): with zero or "
                      "random weights their inputs are not a trained net's, so these are not dead units to fix"
                      % (len(names), "" if len(names) == 1 else "s", "s" if len(names) == 1 else "",
                         ", ".join(names[:8]), ", …" if len(names) > 8 else ""))
        w.explains = tuple(names)
    return [w] + [f for f in findings if f.check != "dead_relu"]

"""Health checks over debug records: pure functions, records in, findings out.

``check(steps, config)`` runs every check below over :class:`engine.instruments.debug.StepRecord`
lists (a Recorder's ``steps``) and returns a list of :class:`Finding` (severity,
check, layer, blob, message, the measured value and the threshold it crossed).
The sentinel itself (stop at the first non-finite value) lives in
:class:`engine.instruments.debug.Recorder` (``sentinel=True`` raises ``NonFiniteError``).

=====================  ===========================================================  ===========
check                  rule (per step, per layer)                                   default
=====================  ===========================================================  ===========
``nonfinite``          a top's data (forward), a bottom's or param's diff           error
                       (backward) or a param after an update has NaN or Inf; only
                       the first layer per step and direction is reported (the
                       rest follow from it)
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
=====================  ===========================================================  ===========

Why these defaults: gradient-to-weight ratios of healthy nets at initialisation
sit around 1e-3..1 (LeNet: 0.1-0.3; a sigmoid CIFAR net: ~1e-2), so the
vanishing/exploding bounds are 4 orders of magnitude below and ~1.5 above; an
SGD step then moves weights by lr × that ratio, which the update band checks.
The thresholds are hints for a person, not proofs; change them in
:class:`HealthConfig`.
"""
from dataclasses import asdict, dataclass
from typing import Optional

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
                     "gradient_flow", "update_ratio")

    def to_dict(self):
        return asdict(self)


def _g(x):
    return "%.3g" % x


def check(steps, config=None):
    """Every enabled check over ``steps``; findings sorted by severity, then step order."""
    config = config or HealthConfig()
    out = []
    for step in steps:
        if "nonfinite" in config.checks:
            out += check_nonfinite(step)
        if "dead_relu" in config.checks:
            out += check_dead_relu(step, config)
        if step.kind == "backward":
            if "vanishing_gradient" in config.checks or "exploding_gradient" in config.checks:
                out += check_param_gradients(step, config)
            if "gradient_flow" in config.checks:
                out += check_gradient_flow(step, config)
        if step.kind == "update" and "update_ratio" in config.checks:
            out += check_update_ratio(step, config)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(out, key=lambda f: order.get(f.severity, 9))


def _finding(step, rec, severity, check_name, blob, message, value=None, threshold=None):
    return Finding(severity, check_name, rec.layer, blob, message, rec.layer_index, step.id, rec.direction,
                   value, threshold, step.iteration)


def check_nonfinite(step):
    """The first layer of the step whose output (forward), propagated gradient
    (backward) or updated param (update) holds NaN/Inf."""
    for rec in step.layers:
        if rec.direction == "forward":
            cands = [(b, b.data, "data") for b in rec.blobs if b.role == "top"]
        elif rec.direction == "backward":
            cands = [(b, b.diff, "diff") for b in rec.blobs
                     if (b.role == "bottom" or b.role == "param") and b.propagate is not False]
        else:
            cands = [(b, b.data, "data") for b in rec.blobs if b.role == "param"]
        for b, s, which in cands:
            if s is None or s.finite:
                continue
            if rec.direction == "forward":
                ins = [x.data for x in rec.blobs if x.role == "bottom"]
            elif rec.direction == "backward":
                ins = [x.diff for x in rec.blobs if x.role == "top"]
            else:
                ins = [b.grad]
            ins_ok = all(x is None or x.finite for x in ins)
            params_ok = all(x.data is None or x.data.finite for x in rec.blobs
                            if x.role == "param" and rec.direction != "update") and \
                (rec.direction != "update" or b.before is None or b.before.finite)
            origin = "they start here" if ins_ok and params_ok else \
                "they came in (inputs %s, params %s)" % ("finite" if ins_ok else "NOT finite",
                                                   "finite" if params_ok else "NOT finite")
            msg = ("%s %s of %s blob '%s' in layer '%s' (%s) has %d NaN and %d Inf of %d values; "
                   "%s" % (rec.direction, which, b.role, b.name, rec.layer, rec.type,
                                                 s.nan, s.inf, s.count, origin))
            return [_finding(step, rec, "error", "nonfinite", b.name, msg, float(s.nan + s.inf), 0.0)]
    return []


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


def check_param_gradients(step, config):
    out = []
    for rec in step.layers:
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


def summarize(findings):
    """{"error": n, "warning": n, "info": n}."""
    out = dict.fromkeys(SEVERITIES, 0)
    for f in findings:
        out[f.severity] = out.get(f.severity, 0) + 1
    return out

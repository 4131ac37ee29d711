"""The inspector's few calls into the engine that need shaping for the page: static
analysis as plain numbers per layer, health findings as rows, reports as a
(filename, text) download, and a solver built around the inspected model.
Everything here uses the engine's public API (``engine``, ``engine.instruments``);
errors propagate to the guarded callbacks, which show them."""
import math

import engine
from engine.instruments.analysis import analyze_net
from engine.instruments.health import check as health_check
from engine.instruments.report import render as render_report


# ------------------------------------------------------------------ blobs
def blob_values(blob, which="data"):
    """A blob's data (or diff) as a host array for looking at: empty for a blob without memory
    (its count has been 0 since it was made: asking the engine for it is Caffe's CHECK(data_),
    which a running layer gets, not the page)."""
    import numpy as np
    if not blob.has_memory:
        return np.zeros(blob.shape, blob.dtype)
    return np.asarray(blob.diff if which == "diff" else blob.data)


# ------------------------------------------------------------------ GPU
def gpu_available():
    return bool(engine.gpu_available())


# ------------------------------------------------------------------ analysis
def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def layer_analysis(net):
    """{layer name: {...}} from ``engine.instruments.analysis.analyze_net`` (FLOPs, MACC,
    params, bytes allocated for tops/diffs/params) and ``"__totals__"``."""
    result = analyze_net(net)
    out = {}
    for l in result.layers:
        counted = bool(l.counted)
        out[l.name] = {
            "flops": _num(l.flops) if counted else None,
            "macc": _num(l.macc) if counted else None,
            "formula": l.formula,
            "params": _num(l.params_owned),
            "memory": _num(l.memory_bytes),                 # Caffe's per-layer figure
            "top_bytes": _num(l.allocated_top_bytes),        # what is really allocated
            "diff_bytes": _num(l.allocated_diff_bytes),
            "param_bytes": _num(l.param_data_bytes + l.param_diff_bytes),
        }
    out["__totals__"] = dict(result.totals)
    return out


# ------------------------------------------------------------------ health checks
def health_findings(steps, net=None):
    """[{severity, check, layer, blob, steps, message, explains}] from ``engine.instruments.health.check``
    over the recorded steps (and, with ``net``, its params: weights not loaded); ``steps``:
    how many steps found it (one row per place: the latest step's message)."""
    if not steps:
        return []
    return [{"severity": f.severity, "check": f.check, "layer": f.layer, "blob": f.blob or "",
             "steps": f.steps, "message": f.message, "explains": list(f.explains)}
            for f in health_check(list(steps), net=net)]


def root_cause(net, nonfinite_finding):
    """The degenerate parameter upstream of a NaN/Inf source that explains it
    ({"kind", "layer", "layers", "message"}), or None."""
    from engine.instruments.health import nonfinite_root_cause
    cause, weights = nonfinite_root_cause(net, nonfinite_finding)
    if cause is None:
        return None
    msg = cause.message + (" (the weights are not loaded)" if weights else "")
    return {"kind": cause.kind, "layer": cause.layers[0], "layers": list(cause.layers), "message": msg}


# ------------------------------------------------------------------ reports
REPORT_FORMATS = ("json", "html", "markdown", "csv")
_EXT = {"json": "json", "html": "html", "markdown": "md", "csv": "csv"}


def make_report(net, recorder, fmt="json", name="net", **extra):
    """(filename, text) of ``engine.instruments.report``'s report on ``net`` and its records;
    ``extra``: build_report's breakpoints, timeline, model_label."""
    fmt = fmt if fmt in REPORT_FORMATS else "json"
    out = render_report(net, recorder=recorder, fmt=fmt, **extra)
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    return "%s_report.%s" % (name, _EXT[fmt]), out


# ------------------------------------------------------------------ solvers
def build_solver(solver_path, net_path, state=None, allow_python=False, weights=None):
    """A solver whose train net is ``net_path`` (the model being inspected) with
    the hyper-parameters of ``solver_path``; snapshots and test nets are turned
    off so that stepping never writes files.  ``state``: (phase, level, stages)."""
    param = engine.read_solver_params(solver_path)
    for f in ("net", "net_param", "train_net", "train_net_param"):
        param.ClearField(f)
    for f in ("test_net", "test_net_param", "test_iter", "test_state"):
        param.ClearField(f)
    param.net = str(net_path)
    param.test_interval = 0
    param.snapshot = 0
    param.display = 1       # the page's log shows every iteration's lines (Caffe prints them every `display`)
    param.ClearField("weights")
    if state is not None:
        _phase, level, stages = state
        param.train_state.level = int(level)
        del param.train_state.stage[:]
        param.train_state.stage.extend(stages)
    solver = engine.get_solver(param, allow_python=allow_python)
    if weights:
        solver.net.copy_from(weights)
    return solver

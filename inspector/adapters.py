"""Small adapters over engine modules that may not exist yet or whose API may
move: static analysis (``engine.instruments.analysis``), reports (``engine.instruments.report``),
solvers (``engine.core.solvers``) and the GPU.  The rest of the inspector calls only
these functions, so a change in one of those modules touches one place.
"""
import importlib
import importlib.util
import json
import math


def _module(name):
    try:
        if importlib.util.find_spec(name) is None:
            return None
        return importlib.import_module(name)
    except Exception:   # a half-written module must not take the inspector down
        return None


# ------------------------------------------------------------------ GPU
def gpu_available():
    try:
        from engine.core import backend
        return bool(backend.gpu_available())
    except Exception:
        return False


# ------------------------------------------------------------------ analysis
def analysis_available():
    return _module("engine.instruments.analysis") is not None


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def layer_analysis(net):
    """{layer name: {...}} from ``engine.instruments.analysis.analyze_net`` (FLOPs, MACC,
    params, bytes allocated for tops/diffs/params), or {} when the module is
    not there or fails on this net."""
    mod = _module("engine.instruments.analysis")
    fn = getattr(mod, "analyze_net", None) if mod is not None else None
    if not callable(fn):
        return {}
    try:
        result = fn(net)
    except Exception:
        return {}
    out = {}
    for l in getattr(result, "layers", ()):
        counted = bool(getattr(l, "counted", True))
        out[l.name] = {
            "flops": _num(l.flops) if counted else None,
            "macc": _num(l.macc) if counted else None,
            "formula": getattr(l, "formula", ""),
            "params": _num(getattr(l, "params_owned", None)),
            "memory": _num(getattr(l, "memory_bytes", None)),               # Caffe's per-layer figure
            "top_bytes": _num(getattr(l, "allocated_top_bytes", None)),     # what is really allocated
            "diff_bytes": _num(getattr(l, "allocated_diff_bytes", None)),
            "param_bytes": _num(getattr(l, "param_data_bytes", 0) + getattr(l, "param_diff_bytes", 0)),
        }
    totals = getattr(result, "totals", None)
    if isinstance(totals, dict):
        out["__totals__"] = dict(totals)
    return out


# ------------------------------------------------------------------ health checks
def health_findings(steps):
    """[{severity, check, layer, blob, message}] from ``engine.instruments.health.check``
    over the recorded steps ([] when the module is not there)."""
    mod = _module("engine.instruments.health")
    fn = getattr(mod, "check", None) if mod is not None else None
    if not callable(fn) or not steps:
        return []
    try:
        found = fn(list(steps))
    except Exception:
        return []
    return [{"severity": f.severity, "check": f.check, "layer": f.layer, "blob": f.blob or "",
             "message": f.message} for f in found]


# ------------------------------------------------------------------ reports
REPORT_FORMATS = ("json", "html", "markdown", "csv")
_EXT = {"json": "json", "html": "html", "markdown": "md", "csv": "csv"}


def report_available():
    return _module("engine.instruments.report") is not None


def make_report(net, recorder, fmt="json", name="net"):
    """(filename, text) of a report on ``net`` and its records.  Uses
    engine.instruments.report when present; otherwise a JSON document of the Init record
    and the debug records (every format falls back to that JSON)."""
    fmt = fmt if fmt in REPORT_FORMATS else "json"
    mod = _module("engine.instruments.report")
    if mod is not None:
        text = _engine_report(mod, net, recorder, fmt)
        if text is not None:
            return "%s_report.%s" % (name, _EXT[fmt]), text
    return "%s_report.json" % name, json.dumps(records_document(net, recorder), indent=1,
                                               default=_json_default)


def _engine_report(mod, net, recorder, fmt):
    """engine.instruments.report.render(net, recorder=..., fmt=...) as text (None if it fails)."""
    fn = getattr(mod, "render", None)
    if not callable(fn):
        return None
    try:
        out = fn(net, recorder=recorder, fmt=fmt)
    except Exception:
        return None
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    return out if isinstance(out, str) else None


def _json_default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict
        return asdict(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def records_document(net, recorder):
    """The fallback report: what Init decided and every recorded step."""
    rec = net.init_record
    layers = []
    for i, name in enumerate(net.layer_names):
        layers.append({
            "name": name, "type": net.layers[i].type,
            "bottoms": net.bottom_names[name], "tops": net.top_names[name],
            "need_backward": net.layer_need_backward[i],
            "backward_reason": rec.backward[i].detail if i < len(rec.backward) else None,
        })
    doc = {
        "schema": "inspector-records/1",
        "net": net.name, "phase": "TRAIN" if net.phase == 0 else "TEST",
        "memory_used_bytes": net.memory_used_bytes,
        "layers": layers,
        "blobs": {n: list(net.blobs[n].shape) for n in net.blob_names},
        "init": {
            "filtered": [d.__dict__ if not hasattr(d, "describe") else
                         {"name": d.name, "type": d.type, "rule_kind": d.rule_kind,
                          "rule": d.rule, "reason": d.reason} for d in rec.filtered],
            "splits": [{"name": s.name, "blob": s.blob, "producer": s.producer, "tops": list(s.tops)}
                       for s in rec.splits],
            "in_place": [list(x) for x in rec.in_place],
            "shared": [s.__dict__ for s in rec.shared],
            "transcript": [list(x) for x in rec.transcript],
        },
        "steps": [s.to_dict() for s in recorder.steps] if recorder is not None else [],
        "first_nonfinite": recorder.first_nonfinite.to_dict()
        if recorder is not None and recorder.first_nonfinite else None,
    }
    return doc


# ------------------------------------------------------------------ solvers
def solver_available():
    try:
        import engine
        return callable(getattr(engine, "get_solver"))
    except Exception:
        return False


def build_solver(solver_path, net_path, state=None, allow_python=False, weights=None):
    """A solver whose train net is ``net_path`` (the model being inspected) with
    the hyper-parameters of ``solver_path``; snapshots and test nets are turned
    off so that stepping never writes files.  ``state``: (phase, level, stages)."""
    import engine
    from engine.core.upgrade import read_solver_params
    param = read_solver_params(solver_path)
    for f in ("net", "net_param", "train_net", "train_net_param"):
        param.ClearField(f)
    for f in ("test_net", "test_net_param", "test_iter", "test_state"):
        param.ClearField(f)
    param.net = str(net_path)
    param.test_interval = 0
    param.snapshot = 0
    param.ClearField("weights") if hasattr(param, "weights") else None
    if state is not None:
        _phase, level, stages = state
        param.train_state.level = int(level)
        del param.train_state.stage[:]
        param.train_state.stage.extend(stages)
    solver = engine.get_solver(param, allow_python=allow_python)
    if weights:
        solver.net.copy_from(weights)
    return solver


def solver_iteration(solver):
    """One solver iteration (forward, backward, update); returns the iteration
    count and the smoothed loss when the solver exposes them."""
    solver.step(1)
    it = getattr(solver, "iter_", None)
    loss = getattr(solver, "smoothed_loss_", None)
    return it, (float(loss) if loss is not None else None)

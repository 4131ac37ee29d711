"""Loading: examples, a path under the model root, uploads, NetState and
device.  A failed load keeps the last good net and shows where it failed."""
import os
from dataclasses import replace

from dash import Input, Output, State, no_update

from inspector import ids, loading, runner
from ..inputs import InputSettings
from ..layout.header import load_error_box, load_status
from ..sessions import ModelSpec
from .common import guarded, triggered

UPLOAD_KINDS = {ids.UPLOAD_MODEL: "model", ids.UPLOAD_WEIGHTS: "weights", ids.UPLOAD_SOLVER: "solver",
                ids.UPLOAD_MEAN: "mean"}


def initial_spec(app):
    """The model the page opens with: the command line's, else the first example."""
    cfg = app.config
    if cfg.model:
        return ModelSpec(model=os.path.abspath(cfg.model), weights=cfg.weights, solver=cfg.solver,
                         phase=cfg.phase, level=cfg.level, stages=tuple(cfg.stages),
                         label=os.path.basename(cfg.model), trusted=True)
    if cfg.solver:
        from engine.core.upgrade import read_solver_params
        sp = read_solver_params(cfg.solver)
        net = sp.net or sp.train_net
        return ModelSpec(model=os.path.abspath(net), weights=cfg.weights, solver=cfg.solver, phase="TRAIN",
                         level=cfg.level, stages=tuple(cfg.stages), label=os.path.basename(net), trusted=True)
    if app.examples:
        label, path, phase = app.examples[0]
        return ModelSpec(model=path, phase=cfg.phase or phase, level=cfg.level, stages=tuple(cfg.stages),
                         label=label, trusted=True)
    return ModelSpec()


def next_spec(app, session, trigger, example=None, path=None, upload=None, phase=None, level=None,
              stages=None):
    """The spec the trigger asks for (raises PathRefused for bad paths/uploads)."""
    cur = session.spec if session.loaded is not None else initial_spec(app)
    state = dict(phase=phase or cur.phase, level=int(level or 0), stages=tuple(stages or ()))
    if trigger is None:
        return initial_spec(app) if session.loaded is None else None
    if trigger == ids.EXAMPLE:
        if example == "cli":
            return replace(initial_spec(app), **state)
        for label, p, _phase in app.examples:
            if p == example:
                return ModelSpec(model=p, label=label, trusted=True, **state)
        raise loading.PathRefused("unknown example %r" % (example,))
    if trigger == ids.MODEL_PATH_OPEN:
        real = loading.resolve_model_path(path, app.config.model_root)
        return ModelSpec(model=real, label=os.path.relpath(real, os.path.realpath(app.config.model_root)),
                         **state)
    if trigger in UPLOAD_KINDS:
        kind = UPLOAD_KINDS[trigger]
        contents, filename = upload
        saved = loading.save_upload(session, kind, filename, contents, app.config.max_upload_bytes)
        if kind == "model":
            return ModelSpec(model=saved, label="uploaded %s" % os.path.basename(str(filename)), uploaded=True,
                             mean=cur.mean, **state)
        return replace(cur, **{kind: saved})
    if trigger in (ids.PHASE, ids.LEVEL, ids.STAGES):
        return replace(cur, **state)
    return None


def load(app, session, spec, device=None):
    """Build ``spec`` into the session.  On failure, record the error and keep
    the last good net.  Returns True when a new net is in."""
    if device is not None and session.loaded is None:
        session.device = device if device == "CPU" or runner.adapters.gpu_available() else "CPU"
    try:
        loaded = loading.build(spec, allow_python=app.config.allow_python_layers, device=session.device,
                               model_root=app.config.model_root)
    except Exception as exc:  # noqa: BLE001 - every failure is shown in the page
        err = loading.load_error(exc, spec.model)
        if type(exc).__name__ == "PythonLayerRefused":
            err.message += " (start the server with --allow-python-layers to run them)"
        for saved in session.uploads.values():     # never show the server's temp folders
            err.message = err.message.replace(saved, os.path.basename(saved))
            if err.path == saved:
                err.path = os.path.basename(saved)
        session.error = err
        return False
    old = session.loaded
    if old is not None:
        old.recorder.detach()
    session.loaded = loaded
    session.spec = spec
    session.error = None
    session.net_version += 1
    session.cursor_forward = 0
    session.cursor_backward = -1
    try:
        settings = InputSettings(**session.input_settings) if session.input_settings else InputSettings()
        if settings.kind in ("npy", "image"):
            settings = InputSettings()
        if loaded.graph.inputs:
            session.message = runner.apply_inputs(session, settings)
        else:
            session.message = "net loaded (its data layers make their own inputs)"
    except Exception as exc:  # noqa: BLE001
        session.message = "net loaded; inputs not set: %s" % exc
    return True


def handle_load(app, sid, trigger, device=None, **kw):
    """The load callback as a plain function: (net version, error, status, stage options)."""
    with app.store.use(sid) as s:
        try:
            spec = next_spec(app, s, trigger, **kw)
        except loading.PathRefused as exc:
            s.error = loading.load_error(exc)
            spec = None
        except Exception as exc:  # noqa: BLE001 - e.g. unreadable solver on the command line
            s.error = loading.load_error(exc)
            spec = None
        if spec is not None:
            load(app, s, spec, device)
        elif trigger is None and s.loaded is None:
            pass
        stages = list(s.loaded.graph.rule_stages) if s.loaded is not None else []
        return s.net_version, s.error, s, stages


def register(dash_app, app):
    upload_ids = list(UPLOAD_KINDS)

    @dash_app.callback(
        Output(ids.NET_VERSION, "data"), Output(ids.LOAD_ERROR, "children"), Output(ids.LOAD_STATUS, "children"),
        Output(ids.STAGES, "options"),
        *[Output(u, "contents") for u in upload_ids],
        Input(ids.EXAMPLE, "value"), Input(ids.MODEL_PATH_OPEN, "n_clicks"),
        *[Input(u, "contents") for u in upload_ids],
        Input(ids.PHASE, "value"), Input(ids.LEVEL, "value"), Input(ids.STAGES, "value"),
        State(ids.MODEL_PATH, "value"), *[State(u, "filename") for u in upload_ids],
        State(ids.DEVICE, "value"), State(ids.SESSION, "data"))
    @guarded(4 + len(upload_ids), "loading")
    def load_cb(example, _open, c_model, c_weights, c_solver, c_mean, phase, level, stages, path,
                f_model, f_weights, f_solver, f_mean, device, sid):
        trigger = triggered()
        contents = dict(zip(upload_ids, (c_model, c_weights, c_solver, c_mean)))
        names = dict(zip(upload_ids, (f_model, f_weights, f_solver, f_mean)))
        upload = None
        if trigger in contents:
            if not contents[trigger]:
                return tuple([no_update] * (4 + len(upload_ids)))
            upload = (contents[trigger], names[trigger])
        version, err, session, stage_opts = handle_load(
            app, sid, trigger, device=device, example=example, path=path, upload=upload, phase=phase,
            level=level, stages=stages)
        opts = sorted(set(stage_opts) | set(stages or []))
        clear = [None if u == trigger else no_update for u in upload_ids]
        return (version, load_error_box(err), load_status(session),
                [{"label": s, "value": s} for s in opts], *clear)

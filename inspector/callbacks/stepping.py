"""Stepping: ranges, single steps, run to the selection, forward+backward,
reset, solver iterations, inputs and the device."""
from dash import Input, Output, State, no_update

from inspector import ids, inputs, loading, runner

from .common import error_text, guarded, log, triggered

ACTIONS = (ids.FORWARD, ids.BACKWARD, ids.STEP_FORWARD, ids.STEP_BACKWARD, ids.RUN_TO, ids.FORWARD_BACKWARD,
           ids.RESET, ids.SOLVER_STEP, ids.APPLY_INPUTS, ids.DEVICE)


def input_settings(kind, value, seed, classes, resize, crop, swap, raw_scale, mean):
    return inputs.InputSettings(
        kind=kind or "random", value=float(value if value is not None else 1.0), seed=int(seed or 0),
        classes=int(classes) if classes else None, resize=int(resize) if resize else None,
        crop="crop" in (crop or []), channel_swap=inputs.parse_ints(swap) if swap else (),
        raw_scale=float(raw_scale if raw_scale is not None else 255.0), mean=inputs.parse_floats(mean))


def act(app, sid, action, start=None, end=None, selection=None, settings=None, device=None):
    """Run one stepping action; returns (run version, message)."""
    with app.store.use(sid) as s:
        try:
            if action == ids.FORWARD:
                msg = runner.forward_range(s, start, end)
            elif action == ids.BACKWARD:
                msg = runner.backward_range(s, start, end)
            elif action == ids.STEP_FORWARD:
                msg = runner.step_forward(s)
            elif action == ids.STEP_BACKWARD:
                msg = runner.step_backward(s)
            elif action == ids.RUN_TO:
                if not selection or selection.get("kind") != "layer":
                    raise runner.RunRefused("select a layer in the graph first")
                msg = runner.run_to(s, selection["name"])
            elif action == ids.FORWARD_BACKWARD:
                msg = runner.forward_backward(s)
            elif action == ids.RESET:
                msg = runner.reset(s)
            elif action == ids.SOLVER_STEP:
                msg = runner.solver_step(s)
            elif action == ids.APPLY_INPUTS:
                msg = runner.apply_inputs(s, settings or inputs.InputSettings())
            elif action == ids.DEVICE:
                msg = runner.set_device(s, device)
            else:
                return s.run_version, no_update
        except runner.RunRefused as exc:
            msg = "⚠ " + str(exc)
        except Exception as exc:  # noqa: BLE001 - a layer failed: shown, the session goes on
            log.exception("%s failed", action)
            s.run_version += 1
            msg = "⚠ " + error_text(exc)
        s.message = msg
        return s.run_version, msg


def range_options(app, sid):
    with app.store.use(sid) as s:
        if s.loaded is None:
            return [], None, None, False
        names = s.loaded.graph.layer_names()
        opts = [{"label": "%d %s" % (i, n), "value": n} for i, n in enumerate(names)]
        return opts, names[0] if names else None, names[-1] if names else None, s.loaded.solver is not None


def save_input_file(app, sid, kind, contents, filename):
    with app.store.use(sid) as s:
        loading.save_upload(s, kind, filename, contents, app.config.max_upload_bytes)
        return "%s: %s (choose “%s” and Apply inputs)" % (kind, filename, ".npy file" if kind == "npy" else "image")


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.RUN_VERSION, "data"), Output(ids.RUN_MESSAGE, "children"),
        *[Input(a, "n_clicks") for a in ACTIONS[:-1]], Input(ids.DEVICE, "value"),
        State(ids.START, "value"), State(ids.END, "value"), State(ids.SELECTION, "data"),
        State(ids.INPUT_KIND, "value"), State(ids.INPUT_VALUE, "value"), State(ids.INPUT_SEED, "value"),
        State(ids.LABEL_CLASSES, "value"), State(ids.PRE_RESIZE, "value"), State(ids.PRE_CROP, "value"),
        State(ids.PRE_CHANNEL_SWAP, "value"), State(ids.PRE_RAW_SCALE, "value"), State(ids.PRE_MEAN, "value"),
        State(ids.SESSION, "data"), prevent_initial_call=True)
    @guarded(2, "running")
    def run_cb(*args):
        device = args[len(ACTIONS) - 1]
        start, end, selection = args[len(ACTIONS):len(ACTIONS) + 3]
        settings_args = args[len(ACTIONS) + 3:-1]
        sid = args[-1]
        action = triggered()
        settings = input_settings(*settings_args) if action == ids.APPLY_INPUTS else None
        return act(app, sid, action, start, end, selection, settings, device)

    @dash_app.callback(
        Output(ids.START, "options"), Output(ids.START, "value"), Output(ids.END, "options"),
        Output(ids.END, "value"), Output(ids.SOLVER_STEP, "disabled"),
        Input(ids.NET_VERSION, "data"), State(ids.SESSION, "data"))
    @guarded(5, "listing layers")
    def range_cb(_nv, sid):
        opts, first, last, solver = range_options(app, sid)
        return opts, first, opts, last, not solver

    @dash_app.callback(Output(ids.START, "value", allow_duplicate=True), Input(ids.SET_START, "n_clicks"),
                       State(ids.SELECTION, "data"), prevent_initial_call=True)
    def set_start_cb(_n, selection):
        return selection["name"] if selection and selection.get("kind") == "layer" else no_update

    @dash_app.callback(Output(ids.END, "value", allow_duplicate=True), Input(ids.SET_END, "n_clicks"),
                       State(ids.SELECTION, "data"), prevent_initial_call=True)
    def set_end_cb(_n, selection):
        return selection["name"] if selection and selection.get("kind") == "layer" else no_update

    @dash_app.callback(
        Output(ids.INPUT_FILE_STATUS, "children"), Output(ids.UPLOAD_NPY, "contents"),
        Output(ids.UPLOAD_IMAGE, "contents"), Output(ids.INPUT_KIND, "value"),
        Input(ids.UPLOAD_NPY, "contents"), Input(ids.UPLOAD_IMAGE, "contents"),
        State(ids.UPLOAD_NPY, "filename"), State(ids.UPLOAD_IMAGE, "filename"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(4, "receiving the file")
    def input_file_cb(npy, image, npy_name, image_name, sid):
        t = triggered()
        if t == ids.UPLOAD_NPY and npy:
            return save_input_file(app, sid, "npy", npy, npy_name), None, no_update, "npy"
        if t == ids.UPLOAD_IMAGE and image:
            return save_input_file(app, sid, "image", image, image_name), no_update, None, "image"
        return no_update, no_update, no_update, no_update

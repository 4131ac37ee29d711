"""Stepping: ranges, single steps, run to the selection, forward+backward,
reset, solver iterations, inputs and the device."""
from dash import Input, Output, State, no_update

from inspector import ids
from inspector.state import inputs, loading, runner

from .common import guarded, run_failed, triggered

ACTIONS = (ids.FORWARD, ids.BACKWARD, ids.STEP_FORWARD, ids.STEP_BACKWARD, ids.RUN_TO, ids.FORWARD_BACKWARD,
           ids.RESET, ids.SOLVER_STEP, ids.APPLY_INPUTS, ids.CONTINUE, ids.STEP_OVER, ids.DEVICE)
RESUME_JOB = object()      # act's answer when Continue goes on with a solver run: the job runner takes it


def input_settings(kind, value, seed, classes, resize, crop, swap, raw_scale, mean):
    return inputs.InputSettings(
        kind=kind or "random", value=float(value if value is not None else 1.0), seed=int(seed or 0),
        classes=int(classes) if classes else None, resize=int(resize) if resize else None,
        crop="crop" in (crop or []), channel_swap=inputs.parse_ints(swap) if swap else (),
        raw_scale=float(raw_scale if raw_scale is not None else 255.0), mean=inputs.parse_floats(mean))


def act(app, sid, action, start=None, end=None, selection=None, settings=None, device=None, expanded=None):
    """Run one stepping action; returns (run version, message).  Continue on a stopped
    solver run answers (run version, RESUME_JOB): the page's job runner goes on with it
    (progress, Cancel), see :func:`inspector.callbacks.training.run_job`."""
    with app.store.use(sid) as s, runner.bounded(s, app.config):
        try:
            if action == ids.CONTINUE and s.paused is not None and s.paused["kind"] == "solver":
                s.solver_resume += 1
                s.solver_resume_pending = s.solver_resume
                s.message = "continuing the solver run after %s…" % (s.paused.get("layer") or "the last iteration")
                return s.run_version, RESUME_JOB
            if action == ids.CONTINUE:
                msg = runner.continue_run(s)
            elif action == ids.STEP_OVER:
                msg = runner.step_over(s, expanded, selection)
            elif action == ids.FORWARD:
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
        except Exception as exc:  # noqa: BLE001 - refused, or a layer failed: shown, the session goes on
            msg = run_failed(s, action, exc)
        s.message = msg
        return s.run_version, msg


RANGE_SHOWN = 40       # Start/End list this many layers; typing searches all of them on the server


def layer_options(names, value=None, text=None, limit=RANGE_SHOWN):
    """Options of the Start/End dropdowns ("index name"): with ``text``, the layers
    whose option contains it; without, the layers around ``value``.  Never more than
    ``limit`` (ResNet-152's 721 options in two dropdowns were a quarter second of
    the page's opening), and always ``value``'s own option."""
    label = ["%d %s" % (i, n) for i, n in enumerate(names)]
    at = names.index(value) if value in names else 0
    needle = (text or "").strip().lower()
    if needle:
        picked = [i for i, t in enumerate(label) if needle in t.lower()][:limit]
        if at not in picked and value in names:
            picked.append(at)
    else:
        lo = max(0, min(at - limit // 2, len(names) - limit))
        picked = list(range(lo, min(len(names), lo + limit)))
    return [{"label": label[i], "value": names[i]} for i in sorted(picked)]


def range_options(app, sid):
    """(start options, end options, first layer, last layer, whether a solver steps the net)."""
    with app.store.use(sid) as s:
        if s.loaded is None:
            return [], [], None, None, False
        names = s.loaded.graph.layer_names()
        first, last = (names[0], names[-1]) if names else (None, None)
        return (layer_options(names, first), layer_options(names, last), first, last,
                s.loaded.solver is not None)


def searched_options(app, sid, text, value):
    """The Start/End options for the text typed into the dropdown."""
    with app.store.use(sid) as s:
        if s.loaded is None:
            return []
        return layer_options(s.loaded.graph.layer_names(), value, text)


def save_input_file(app, sid, kind, contents, filename):
    with app.store.use(sid) as s:
        loading.save_upload(s, kind, filename, contents, app.config.max_upload_bytes)
        return "%s: %s (choose “%s” and Apply inputs)" % (kind, filename, ".npy file" if kind == "npy" else "image")


def continue_state(app, sid):
    """(disabled, title) of the Continue button: what it would resume, or why it cannot."""
    with app.store.use(sid) as s:
        p = s.paused
        if s.loaded is None or p is None:
            return True, "Continue (F8): nothing is stopped — a breakpoint hit or a step leaves a run to resume"
        g = s.loaded.graph
        kind = p["kind"]

        def name(i):
            return g.layers[i].name if i is not None and 0 <= i < len(g.layers) else "the end"
        if kind == "forward":
            what = "forward from %s to %s" % (name(p["next"]), name(p["end"]))
        elif kind == "backward":
            what = "backward from %s down to %s" % (name(p["next"]), name(p["end"]))
        elif kind == "forward_backward":
            what = "Forward + Backward on from %s (%s)" % (name(p["next"]), p["phase"])
        else:
            what = "the solver run%s%s" % (" after %s (%s)" % (p["layer"], p["phase"]) if p.get("phase") else "",
                                            ", %d more iteration(s)" % p["remaining"] if p.get("remaining") else "")
        return False, "Continue (F8): %s, to the next breakpoint hit or the end" % what


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.RUN_VERSION, "data"), Output(ids.RUN_MESSAGE, "children"),
        Output(ids.INPUT_FILE_STATUS, "children", allow_duplicate=True), Output(ids.JOB_RESUME, "data"),
        *[Input(a, "n_clicks") for a in ACTIONS[:-1]], Input(ids.DEVICE, "value"),
        State(ids.START, "value"), State(ids.END, "value"), State(ids.SELECTION, "data"),
        State(ids.EXPANDED_BLOCKS, "data"),
        State(ids.INPUT_KIND, "value"), State(ids.INPUT_VALUE, "value"), State(ids.INPUT_SEED, "value"),
        State(ids.LABEL_CLASSES, "value"), State(ids.PRE_RESIZE, "value"), State(ids.PRE_CROP, "value"),
        State(ids.PRE_CHANNEL_SWAP, "value"), State(ids.PRE_RAW_SCALE, "value"), State(ids.PRE_MEAN, "value"),
        State(ids.SESSION, "data"), prevent_initial_call=True,
        running=[(Output(ids.RUN_BUSY, "style"), {"display": "inline-block"}, {"display": "none"})])
    @guarded(4, "running")
    def run_cb(*args):
        device = args[len(ACTIONS) - 1]
        start, end, selection, expanded = args[len(ACTIONS):len(ACTIONS) + 4]
        settings_args = args[len(ACTIONS) + 4:-1]
        sid = args[-1]
        action = triggered()
        settings = input_settings(*settings_args) if action == ids.APPLY_INPUTS else None
        version, msg = act(app, sid, action, start, end, selection, settings, device, expanded)
        if msg is RESUME_JOB:
            with app.store.use(sid) as s:
                return version, s.message, no_update, {"n": s.solver_resume}
        # Apply inputs answers beside its button too (the status line is far and cut short)
        return version, msg, (msg if action == ids.APPLY_INPUTS else no_update), no_update

    @dash_app.callback(
        Output(ids.CONTINUE, "disabled"), Output(ids.CONTINUE, "title"),
        Input(ids.RUN_VERSION, "data"), Input(ids.PANELS_NET, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(2, "checking what Continue resumes")
    def continue_cb(_rv, _nv, sid):
        return continue_state(app, sid)

    @dash_app.callback(
        Output(ids.START, "options"), Output(ids.START, "value"), Output(ids.END, "options"),
        Output(ids.END, "value"), Output(ids.SOLVER_STEP, "disabled"),
        Input(ids.PANELS_NET, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(5, "listing layers")
    def range_cb(_nv, sid):
        start_opts, end_opts, first, last, solver = range_options(app, sid)
        return start_opts, first, end_opts, last, not solver

    for dropdown, button in ((ids.START, ids.SET_START), (ids.END, ids.SET_END)):
        _register_range_end(dash_app, app, dropdown, button)


def _register_range_end(dash_app, app, dropdown, button):
    """Start or End: the layers matching what is typed (searched here, not in the
    browser), and "← selected"."""
    @dash_app.callback(Output(dropdown, "options", allow_duplicate=True), Input(dropdown, "search_value"),
                       State(dropdown, "value"), State(ids.SESSION, "data"), prevent_initial_call=True)
    @guarded(1, "listing layers")
    def search_cb(text, value, sid):
        return searched_options(app, sid, text, value)

    @dash_app.callback(Output(dropdown, "value", allow_duplicate=True),
                       Output(dropdown, "options", allow_duplicate=True), Input(button, "n_clicks"),
                       State(ids.SELECTION, "data"), State(ids.SESSION, "data"), prevent_initial_call=True)
    @guarded(2, "taking the selected layer")
    def set_cb(_n, selection, sid):
        if not selection or selection.get("kind") != "layer":
            return no_update, no_update
        return selection["name"], searched_options(app, sid, "", selection["name"])

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

"""Long actions and the training view.

``Run`` is a Dash background callback (inspector/state/jobs.py: a thread of the
server, progress and result in the on-disk cache): solver iterations (the
session's lock taken per iteration, so the page's other callbacks go on
between them) or a full-records Forward / Backward / Forward + Backward pass
(layer by layer progress).  ``Cancel`` stops it after the current iteration or
layer; what ran is kept (net, records, timeline, curves).  The curves redraw on
every progress report.
"""
import time

from dash import Input, Output, State, no_update

from inspector import ids
from inspector.state import jobs, runner
from inspector.views import debug_figures, debug_views
from inspector.views.figures import empty_figure

from .common import guarded, run_failed

JOB_LABELS = {"solver": "solver run", "forward_backward": "Forward + Backward",
              "forward": "Forward", "backward": "Backward"}


def pass_total(loaded, action):
    """Layers a full pass of ``action`` runs (the progress bar's length)."""
    g = loaded.graph
    fwd = len(g.layers)
    bwd = sum(1 for l in g.layers if l.need_backward)
    return {"forward": fwd, "backward": bwd, "forward_backward": fwd + bwd}[action]


def run_pass(app, sid, action, report=None, token=None):
    """A full-records pass with progress and cancel; returns the page message."""
    token = token or jobs.current_token()
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None:
            return "⚠ no net is loaded"
        n = len(ld.graph.layers)
        s.job = {"kind": action, "token": token, "started": time.time()}
        try:
            with jobs.ProgressObserver(ld.net, pass_total(ld, action), report, token):
                if action == "forward":
                    msg = runner.forward_range(s, 0, n - 1)
                elif action == "backward":
                    msg = runner.backward_range(s, n - 1, 0)
                else:
                    msg = runner.forward_backward(s)
        except jobs.Cancelled as exc:
            s.run_version += 1
            msg = "%s %s; what ran is kept" % (JOB_LABELS[action], exc)
        except Exception as exc:  # noqa: BLE001 - refused, or a layer failed: shown, the session goes on
            msg = run_failed(s, action, exc)
        finally:
            s.job = None
        s.message = msg
        return msg


def take_resume(app, sid, request):
    """(iterations, resume) when ``request`` ({"n"}) is Continue's fresh request to go on
    with the stopped solver run (taken once), else None: the stopped iteration (when it
    stopped inside one) and the run's remaining iterations."""
    if not isinstance(request, dict):
        return None
    with app.store.use(sid) as s:
        p = s.paused
        if request.get("n") != s.solver_resume_pending or p is None or p["kind"] != "solver":
            return None
        s.solver_resume_pending = None                  # taken
        inside = p.get("phase") is not None
        return int(p.get("remaining", 0)) + (1 if inside else 0), (p if inside else None)


def run_job(app, sid, action, iterations, set_progress=None, token=None, resume=None):
    """What the background callback does: (run version, message).  ``resume``:
    (iterations, pause) from :func:`take_resume` (Continue on a stopped solver run)."""
    counter = [0]

    def report(done, total, text):
        counter[0] += 1
        if set_progress is not None:
            set_progress((str(done), str(max(total, 1)), "%s: %d / %d — %s" % (
                JOB_LABELS.get(action, action), done, total, text), counter[0]))

    if resume is not None:
        with app.store.use(sid) as s:
            s.paused = None
        out = runner.run_solver(app.store, sid, resume[0], report, token, resume=resume[1])
        msg = "continue: " + out.message
    elif action == "solver":
        out = runner.run_solver(app.store, sid, int(iterations or 1), report, token)
        msg = out.message
    elif action in ("forward", "backward", "forward_backward"):
        msg = run_pass(app, sid, action, report, token)
    else:
        msg = "⚠ unknown action %r" % (action,)
    with app.store.use(sid) as s:
        return s.run_version, msg


def cancel(app, sid, timeout=20.0):
    """Cancel the session's running job and wait (without holding the session
    lock) until it stopped: (run version, message)."""
    with app.store.use(sid) as s:
        job = s.job
        if job is None:
            return s.run_version, no_update
        job["token"].cancel("cancelled")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with app.store.use(sid) as s:
            if s.job is None:
                return s.run_version, s.message
        time.sleep(0.05)
    with app.store.use(sid) as s:
        return s.run_version, "cancelling… (the current layer or iteration is still running)"


def curves(app, sid):
    """(training figure, ratios figure, summary)."""
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None:
            return no_update, no_update, no_update
        h = ld.training
        if ld.solver is None:
            note = ld.solver_note or "No solver: load a solver prototxt (Upload “solver”, or --solver) to train here."
            blank = empty_figure("no solver loaded: nothing to train (Upload “solver”, or --solver)")
            return blank, blank, note
        cur = debug_views.training_curves(h)
        ratios = dict(h.ratios) if h is not None else {}
        summary = debug_views.training_summary(h)
    return debug_figures.training_figure(cur), debug_figures.ratios_figure(ratios), summary


def _clicked_run():
    """Whether Run fired this job (not a Continue request)."""
    try:
        from dash import ctx
        return ctx.triggered_id == ids.JOB_RUN
    except Exception:  # noqa: BLE001 - no callback context (direct calls): a Run
        return True


def register(dash_app, app):
    manager = getattr(dash_app, "job_manager", None)

    def job_cb(set_progress, _n, resume_request, action, iterations, sid):
        resume = take_resume(app, sid, resume_request)
        if resume_request is not None and resume is None and not _clicked_run():
            return no_update, no_update, no_update      # a stale Continue request: nothing to run
        version, msg = run_job(app, sid, action, iterations, set_progress, resume=resume)
        return version, msg, msg        # the job's own status line ends on how it ended, not its last progress

    if manager is not None:
        manager.own(job_cb)
    dash_app.callback(
        Output(ids.RUN_VERSION, "data", allow_duplicate=True),
        Output(ids.RUN_MESSAGE, "children", allow_duplicate=True),
        Output(ids.JOB_STATUS, "children", allow_duplicate=True),
        Input(ids.JOB_RUN, "n_clicks"), Input(ids.JOB_RESUME, "data"),
        State(ids.JOB_ACTION, "value"), State(ids.JOB_ITERATIONS, "value"), State(ids.SESSION, "data"),
        background=True, manager=manager, prevent_initial_call=True, interval=400,
        progress=[Output(ids.JOB_PROGRESS, "value"), Output(ids.JOB_PROGRESS, "max"),
                  Output(ids.JOB_STATUS, "children"), Output(ids.JOB_DONE, "data")],
        running=[(Output(ids.JOB_RUN, "disabled"), True, False),
                 (Output(ids.JOB_CANCEL, "disabled"), False, True)],
        cancel=[Input(ids.JOB_CANCEL, "n_clicks")],
    )(job_cb)

    @dash_app.callback(
        Output(ids.RUN_VERSION, "data", allow_duplicate=True),
        Output(ids.RUN_MESSAGE, "children", allow_duplicate=True),
        Output(ids.JOB_STATUS, "children", allow_duplicate=True),
        Input(ids.JOB_CANCEL, "n_clicks"), State(ids.SESSION, "data"), prevent_initial_call=True)
    @guarded(3, "cancelling")
    def cancel_cb(_n, sid):
        version, msg = cancel(app, sid)
        return version, msg, msg

    @dash_app.callback(
        Output(ids.TRAIN_CURVES, "figure"), Output(ids.TRAIN_RATIOS, "figure"), Output(ids.TRAIN_SUMMARY, "children"),
        Input(ids.JOB_DONE, "data"), Input(ids.RUN_VERSION, "data"), Input(ids.PANELS_NET, "data"),
        Input(ids.TABS, "value"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(3, "drawing the training curves")
    def curves_cb(_done, _rv, _nv, tab, sid):
        if tab != "training":
            return no_update, no_update, no_update
        return curves(app, sid)

    @dash_app.callback(
        Output(ids.TRAIN_CURVES, "config"), Output(ids.TRAIN_RATIOS, "config"), Output(ids.COMPARE_CHART, "config"),
        Input(ids.IMAGE_FORMAT, "value"))
    def image_format_cb(fmt):
        """The camera button of every debugger chart saves PNG or SVG, as the graph's."""
        cfg = {"displaylogo": False, "showSendToCloud": False,
               "toImageButtonOptions": {"format": fmt or "png", "filename": "chart"}}
        return cfg, cfg, cfg

"""The timeline: the steps list and slider, scrubbing back (the graph and the
blob panels show a step as it was), pins, and the diff of two steps."""
from dash import Input, Output, State, no_update
from dash.exceptions import PreventUpdate

from inspector import ids
from inspector.state import debugger
from inspector.views import debug_views

from ..layout.common import table
from .common import guarded, triggered

TABLE_COLUMNS = ["step", "action", "label", "layers", "ms", "pinned", "shown"]
DIFF_COLUMNS = ["blob", "side", "stat", "before", "after", "relative change"]


def timeline_view(app, sid):
    """Everything the tab shows about the timeline."""
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None:
            return None
        tl = debugger.timeline(ld)
        idx = tl.indices
        n = len(idx)
        step = debugger.viewed_step(ld)
        viewing = step.index if step is not None else None
        last = tl.last
        if step is not None:
            info = "Showing %s — as it was (the live net is newer)." % debug_views.step_text(step, ld.graph)
        elif last is not None:
            info = "Live net (latest: %s)." % debug_views.step_text(last, ld.graph)
        else:
            info = "No steps yet: run Forward, Backward or a solver iteration."
        opts = debug_views.step_options(tl, ld.graph)
        marks = {}
        if n:
            every = max(1, n // 8)
            marks = {i: str(i) for i in idx[::every]}
            marks[idx[-1]] = str(idx[-1])
        return {
            "n": n, "min": idx[0] if idx else 0, "max": idx[-1] if idx else 0,
            "value": viewing if viewing is not None else (idx[-1] if idx else 0), "marks": marks, "info": info,
            "memory": debug_views.timeline_memory(tl),
            "rows": debug_views.timeline_rows(tl, ld.graph, viewing), "options": opts,
            "a": (opts[-2]["value"] if len(opts) > 1 else (opts[0]["value"] if opts else None)),
            "b": opts[-1]["value"] if opts else None,
        }


def scrub(app, sid, value, live=False):
    """Show timeline step ``value`` (the last step or ``live``: the live net).
    Returns the new run version (PreventUpdate when nothing changes)."""
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None or ld.timeline is None or not len(ld.timeline):
            raise PreventUpdate
        last = ld.timeline.last.index
        want = None if live or value is None or int(value) >= last else int(value)
        if want is not None and ld.timeline.get(want) is None:
            want = ld.timeline.indices[0] if want < ld.timeline.indices[0] else None
        if want == ld.view_step:
            raise PreventUpdate
        ld.view_step = want
        s.run_version += 1
        return s.run_version


def pin(app, sid, selection):
    """Pin the selected blob's data and diff: later steps keep the full arrays."""
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None:
            return "no net loaded", no_update
        if not selection or selection.get("kind") != "blob":
            return "select a blob in the graph first (a blob node or an edge's label)", no_update
        tl = debugger.timeline(ld)
        name = selection["name"]
        if (name, "data") in tl.pins:
            tl.unpin(name, "data")
            tl.unpin(name, "diff")
            return "unpinned %s" % name, debug_views.timeline_memory(tl)
        tl.pin(name, "data")
        tl.pin(name, "diff")
        return ("pinned %s: its data and diff arrays are kept with every later step, within the budget"
                % name, debug_views.timeline_memory(tl))


def diff(app, sid, a, b):
    with app.store.use(sid) as s:
        ld = s.loaded
        tl = debugger.timeline(ld) if ld is not None else None
        if tl is None or a is None or b is None:
            return "choose two steps"
        if tl.get(int(a)) is None or tl.get(int(b)) is None:
            return "step %s or %s is no longer kept (steps %s)" % (a, b, tl.span_text())
        deltas = tl.diff(int(a), int(b))
        rows = debug_views.diff_rows(deltas)
    if not rows:
        return "steps %s and %s recorded no common blob statistics that differ" % (a, b)
    return table(rows, DIFF_COLUMNS)


def _two_steps(view, a, b):
    """The steps chosen in a pair of dropdowns, or the last two steps while
    there is no real choice yet (empty, gone, or the same step twice)."""
    values = {o["value"] for o in view["options"]}
    if a not in values or b not in values or a == b:
        return view["a"], view["b"]
    return a, b


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.TIMELINE_SLIDER, "min"), Output(ids.TIMELINE_SLIDER, "max"), Output(ids.TIMELINE_SLIDER, "value"),
        Output(ids.TIMELINE_SLIDER, "marks"),
        Output(ids.TIMELINE_SLIDER, "disabled"), Output(ids.TIMELINE_INFO, "children"),
        Output(ids.TIMELINE_MEMORY, "children"), Output(ids.TIMELINE_TABLE, "children"),
        Output(ids.TIMELINE_DIFF_A, "options"), Output(ids.TIMELINE_DIFF_A, "value"),
        Output(ids.TIMELINE_DIFF_B, "options"), Output(ids.TIMELINE_DIFF_B, "value"),
        Output(ids.COMPARE_A, "options"), Output(ids.COMPARE_A, "value"),
        Output(ids.COMPARE_B, "options"), Output(ids.COMPARE_B, "value"),
        Input(ids.RUN_VERSION, "data"), Input(ids.PANELS_NET, "data"), Input(ids.TABS, "value"),
        State(ids.TIMELINE_DIFF_A, "value"), State(ids.TIMELINE_DIFF_B, "value"),
        State(ids.COMPARE_A, "value"), State(ids.COMPARE_B, "value"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(16, "showing the timeline")
    def timeline_cb(_rv, _nv, tab, cur_a, cur_b, cmp_a, cmp_b, sid):
        if tab not in ("timeline", "compare"):
            return (no_update,) * 16
        v = timeline_view(app, sid)
        if v is None:
            return (no_update,) * 16
        a, b = _two_steps(v, cur_a, cur_b)
        ca, cb = _two_steps(v, cmp_a, cmp_b)
        return (v["min"], v["max"], v["value"], v["marks"], v["n"] < 2, v["info"], v["memory"],
                table(v["rows"], TABLE_COLUMNS, empty="no steps yet"), v["options"], a, v["options"], b,
                v["options"], ca, v["options"], cb)

    @dash_app.callback(
        Output(ids.RUN_VERSION, "data", allow_duplicate=True),
        Input(ids.TIMELINE_SLIDER, "value"), Input(ids.TIMELINE_LIVE, "n_clicks"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(1, "scrubbing the timeline")
    def scrub_cb(value, _live, sid):
        return scrub(app, sid, value, live=triggered() == ids.TIMELINE_LIVE)

    @dash_app.callback(
        Output(ids.PIN_STATUS, "children"), Output(ids.TIMELINE_MEMORY, "children", allow_duplicate=True),
        Input(ids.PIN_BLOB, "n_clicks"), Input(ids.VALUE_PIN, "n_clicks"), State(ids.SELECTION, "data"),
        State(ids.SESSION, "data"), prevent_initial_call=True)
    @guarded(2, "pinning")
    def pin_cb(_n, _n_value, selection, sid):
        return pin(app, sid, selection)

    @dash_app.callback(
        Output(ids.TIMELINE_DIFF, "children"), Input(ids.TIMELINE_DIFF_BUTTON, "n_clicks"),
        State(ids.TIMELINE_DIFF_A, "value"), State(ids.TIMELINE_DIFF_B, "value"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(1, "diffing two steps")
    def diff_cb(_n, a, b, sid):
        return diff(app, sid, a, b)

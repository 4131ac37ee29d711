"""The breakpoints panel: add (the command line's condition text), enable or
disable, replace the condition, remove; hit counts; where and why the last run
stopped, and that layer selected, its blocks opened and centred in the graph (also
the first layer where a comparison parts)."""
from dash import Input, Output, State, html, no_update

from inspector import ids
from inspector.state import debugger
from inspector.views import debug_views

from ..layout.common import table
from .common import guarded, triggered

COLUMNS = ["id", "condition", "enabled", "hits"]


def _listing(bps):
    return (table(debug_views.breakpoint_rows(bps), COLUMNS, empty="no breakpoints"),
            debug_views.breakpoint_options(bps))


def change(app, sid, action, text=None, bp_id=None):
    """Apply one change; returns (status, table, options, chosen id)."""
    with app.store.use(sid) as s:
        bps = debugger.breakpoints(s)
        net = s.loaded.net if s.loaded is not None else None
        chosen = bp_id
        try:
            if action == "add":
                if not text or not text.strip():
                    raise ValueError("type a condition first, e.g. nonfinite or conv1.max_abs > 1e4")
                chosen = bps.add(text.strip(), net=net)
                status = "added #%s: %s" % (chosen, bps.get(chosen).condition)
            elif bp_id is None:
                raise ValueError("choose a breakpoint first")
            elif action == "toggle":
                item = bps.get(bp_id)
                bps.enable(bp_id, not item.enabled)
                status = "#%s %s" % (bp_id, "enabled" if item.enabled else "disabled")
            elif action == "edit":
                if not text or not text.strip():
                    raise ValueError("type the new condition in the box above")
                bps.replace(bp_id, text.strip(), net=net)
                status = "#%s is now: %s" % (bp_id, bps.get(bp_id).condition)
            elif action == "remove":
                bps.remove(bp_id)
                status = "removed #%s" % bp_id
                chosen = None
            else:
                return no_update, no_update, no_update, no_update
        except (ValueError, KeyError) as exc:       # ConditionError is a ValueError: it names the problem
            status = "⚠ %s" % (exc.args[0] if exc.args else exc)
        tbl, opts = _listing(bps)
    return status, tbl, opts, chosen


def hit_panel(app, sid):
    """(the table of hit counts, the last hit's text) after a run."""
    with app.store.use(sid) as s:
        bps = debugger.breakpoints(s, create=False)
        hit = s.last_hit
        cursor = s.last_hit_cursor
        tbl, opts = _listing(bps)
    if hit is None:
        return tbl, opts, None
    if cursor:
        return tbl, opts, html.Div([html.B("At the cursor: "), "%s (%s) — Continue (F8) goes on" % (
            hit.layer, hit.direction)], className="break-hit-box")
    return tbl, opts, html.Div([html.B("Stopped: "), debugger.hit_text(hit), " — Continue (F8) resumes after it"],
                               className="break-hit-box")


def reveal(app, sid, expanded):
    """(selection, expanded blocks, focus) that show the layer a breakpoint stopped on, or
    the first layer where a comparison parts (debugger.reveal), once; else no change."""
    from . import graph
    with app.store.use(sid) as s:
        want = debugger.take_reveal(s)
    if want is None:
        return no_update, no_update, no_update
    return graph.pick(app, sid, want, expanded)


def register(dash_app, app):
    actions = {ids.BREAK_ADD: "add", ids.BREAK_TOGGLE: "toggle", ids.BREAK_EDIT: "edit", ids.BREAK_REMOVE: "remove"}

    @dash_app.callback(
        Output(ids.BREAK_STATUS, "children"), Output(ids.BREAK_TABLE, "children"),
        Output(ids.BREAK_SELECT, "options"), Output(ids.BREAK_SELECT, "value"),
        *[Input(k, "n_clicks") for k in actions], Input(ids.BREAK_TEXT, "n_submit"),
        State(ids.BREAK_TEXT, "value"), State(ids.BREAK_SELECT, "value"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(4, "changing breakpoints")
    def change_cb(*args):
        text, bp_id, sid = args[-3:]
        t = triggered()
        action = "add" if t == ids.BREAK_TEXT else actions.get(t)
        return change(app, sid, action, text, bp_id)

    @dash_app.callback(
        Output(ids.BREAK_TABLE, "children", allow_duplicate=True),
        Output(ids.BREAK_SELECT, "options", allow_duplicate=True), Output(ids.BREAK_HIT, "children"),
        Input(ids.RUN_VERSION, "data"), Input(ids.PANELS_NET, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(3, "showing breakpoint hits")
    def hits_cb(_rv, _nv, sid):
        return hit_panel(app, sid)

    @dash_app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True), Output(ids.EXPANDED_BLOCKS, "data", allow_duplicate=True),
        Output(ids.FOCUS, "data", allow_duplicate=True),
        Input(ids.RUN_VERSION, "data"), State(ids.EXPANDED_BLOCKS, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(3, "showing where the run stopped")
    def reveal_cb(_rv, expanded, sid):
        return reveal(app, sid, expanded)

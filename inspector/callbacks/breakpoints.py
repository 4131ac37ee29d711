"""The breakpoints panel: add (the command line's condition text), enable or
disable, replace the condition, remove; hit counts; where and why the last run
stopped."""
from dash import Input, Output, State, html, no_update

from inspector import debug_views, debugger, ids

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
        if bps is None:
            return "breakpoints are not available (engine.instruments.breakpoints is missing)", no_update, \
                no_update, no_update
        mod = debugger.breakpoints_module()
        chosen = bp_id
        try:
            if action == "add":
                if not text or not text.strip():
                    raise ValueError("type a condition first, e.g. nonfinite or conv1.max_abs > 1e4")
                cond = mod.parse_condition(text.strip())
                chosen = bps.add(cond)
                status = "added #%s: %s" % (chosen, cond)
            elif bp_id is None:
                raise ValueError("choose a breakpoint first")
            elif action == "toggle":
                item = _item(bps, bp_id)
                bps.enable(bp_id, not item.enabled)
                status = "#%s %s" % (bp_id, "enabled" if not item.enabled else "disabled")
            elif action == "edit":
                if not text or not text.strip():
                    raise ValueError("type the new condition in the box above")
                cond = mod.parse_condition(text.strip())
                item = _item(bps, bp_id)
                enabled = item.enabled
                bps.remove(bp_id)
                chosen = bps.add(cond, enabled=enabled)
                status = "#%s replaced by #%s: %s" % (bp_id, chosen, cond)
            elif action == "remove":
                bps.remove(bp_id)
                status = "removed #%s" % bp_id
                chosen = None
            else:
                return no_update, no_update, no_update, no_update
        except (ValueError, KeyError) as exc:
            status = "⚠ %s" % (exc.args[0] if exc.args else exc)
        except Exception as exc:  # noqa: BLE001 - a parse error names its problem
            status = "⚠ %s: %s" % (type(exc).__name__, exc)
        tbl, opts = _listing(bps)
    return status, tbl, opts, chosen


def _item(bps, bp_id):
    for b in bps.items:
        if b.id == bp_id:
            return b
    raise KeyError("no breakpoint #%s" % bp_id)


def hit_panel(app, sid):
    """(the table of hit counts, the last hit's text) after a run."""
    with app.store.use(sid) as s:
        bps = debugger.breakpoints(s, create=False)
        hit = s.last_hit
        tbl, opts = _listing(bps)
    if hit is None:
        return tbl, opts, None
    return tbl, opts, html.Div([html.B("Stopped: "), debugger.hit_text(hit)], className="break-hit-box")


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
        Input(ids.RUN_VERSION, "data"), Input(ids.NET_VERSION, "data"), State(ids.SESSION, "data"),
        prevent_initial_call="initial_duplicate")
    @guarded(3, "showing breakpoint hits")
    def hits_cb(_rv, _nv, sid):
        return hit_panel(app, sid)

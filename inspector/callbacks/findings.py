"""Findings: filtered layers, splits, shared params, memory and time charts,
the Init transcript, debug_info lines, and the NaN/Inf alert."""
from dash import Input, Output, State, no_update

from inspector import ids
from inspector.state import presenter
from inspector.views import debug_views

from ..layout.common import table
from .common import guarded

HIDDEN = {"display": "none"}


def findings(app, sid, transcript_filter):
    with app.store.use(sid) as s:
        if s.loaded is None:
            return (no_update,) * 8
        f = presenter.findings(s.loaded, transcript_filter)
        ran = bool(s.loaded.recorder.steps)
    return (table(f["health"], ["severity", "check", "layer", "blob", "steps", "message"],
                  empty=("no finding: the health checks (engine.instruments.health) found nothing in the records"
                         if ran else "no finding (run forward/backward first; engine.instruments.health checks "
                                     "the records)")),
            table(f["filtered"], empty="no layer was filtered out"),
            table(f["splits"], empty="no split was inserted"),
            table(f["shared"], empty="no param is shared"),
            f["memory"], f["time"],
            "\n".join(f["transcript"]) or _no_lines(transcript_filter, "(no lines)"),
            "\n".join(f["debug"]) or _no_lines(transcript_filter,
                                               "(run forward or backward to see Caffe's debug_info lines)"))


def _no_lines(text, otherwise):
    """What an empty log box says: no line matches the filter, or ``otherwise``."""
    return "(no line contains %r)" % text if text else otherwise


def nan_alert(app, sid):
    """(alert style, text) — shown while the records hold a NaN/Inf; every
    source (per branch) is named when there are several."""
    with app.store.use(sid) as s:
        a = presenter.nan_alert(s.loaded)
        more = debug_views.sources_text(debug_views.nonfinite_sources(s.loaded.recorder.steps, s.loaded.net)) \
            if a is not None else ""
    if a is None:
        return HIDDEN, ""
    text = "First NaN/Inf at layer %s — %s%s" % (a["layer"], a["message"], more)
    cause = a.get("root_cause")
    if cause:
        text = "Root cause: %s. Then: %s" % (cause["message"], text)
    return {"display": "flex"}, text


def nan_selection(app, sid):
    """The layer "Select that layer" goes to: the root cause when one explains the NaN/Inf
    (the alert leads with it), else the first layer that produced NaN/Inf."""
    with app.store.use(sid) as s:
        a = presenter.nan_alert(s.loaded)
    if not a:
        return None
    cause = a.get("root_cause")
    return {"kind": "layer", "name": cause["layer"] if cause else a["layer"]}


def show_nan_layer(app, sid, n, expanded):
    """(selection, tab, expanded blocks, focus): the first NaN/Inf layer selected, the
    blocks around it opened and the graph centred on it, its details shown."""
    from . import graph
    sel = nan_selection(app, sid)
    if not sel:
        return no_update, no_update, no_update, no_update
    sel, opened, focus = graph.pick(app, sid, dict(sel, n="nan-%s" % n), expanded)
    return sel, "details", opened, focus


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.HEALTH_TABLE, "children"),
        Output(ids.FILTERED_TABLE, "children"), Output(ids.SPLITS_TABLE, "children"),
        Output(ids.SHARED_TABLE, "children"), Output(ids.MEMORY_CHART, "figure"), Output(ids.TIME_CHART, "figure"),
        Output(ids.TRANSCRIPT, "children"), Output(ids.DEBUG_LINES, "children"),
        Input(ids.PANELS_NET, "data"), Input(ids.RUN_VERSION, "data"), Input(ids.TRANSCRIPT_FILTER, "value"),
        Input(ids.TABS, "value"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(8, "building the findings")
    def findings_cb(_nv, _rv, text, tab, sid):
        if tab != "findings":
            return (no_update,) * 8
        return findings(app, sid, text)

    @dash_app.callback(
        Output(ids.NAN_ALERT, "style"), Output(ids.NAN_TEXT, "children"),
        Input(ids.PANELS_NET, "data"), Input(ids.RUN_VERSION, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(2, "checking for NaN")
    def nan_cb(_nv, _rv, sid):
        return nan_alert(app, sid)

    @dash_app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True), Output(ids.TABS, "value", allow_duplicate=True),
        Output(ids.EXPANDED_BLOCKS, "data", allow_duplicate=True), Output(ids.FOCUS, "data", allow_duplicate=True),
        Input(ids.NAN_SELECT, "n_clicks"), State(ids.EXPANDED_BLOCKS, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(4, "selecting the NaN layer")
    def nan_select_cb(n, expanded, sid):
        return show_nan_layer(app, sid, n, expanded)


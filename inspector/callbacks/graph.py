"""The graph: render on net/run/option changes (a selection change only
patches the selection ring), and click-to-select."""
from dash import Input, Output, Patch, State, no_update

from inspector import figures, ids, presenter

from .common import guarded, triggered_all


def render(app, sid, colour_by, blob_mode, options, selection):
    with app.store.use(sid) as s:
        if s.loaded is None:
            return figures.empty_figure("no net loaded")
        opts = presenter.display_options(blob_mode, options)
        return presenter.graph_figure(s.loaded, colour_by, opts, selection)


def selection_patch(app, sid, blob_mode, options, selection):
    """A Patch replacing only the selection ring (the figure's last trace)."""
    with app.store.use(sid) as s:
        if s.loaded is None:
            return no_update
        trace = presenter.selection_trace(s.loaded, presenter.display_options(blob_mode, options), selection)
    p = Patch()
    p["data"][-1] = trace
    return p


def selection_from_click(click):
    """{"kind", "name"} of a clicked point (None when it was not a node/blob)."""
    if not click or not click.get("points"):
        return None
    cd = click["points"][0].get("customdata")
    if not cd or len(cd) < 2:
        return None
    kind, name = cd[0], cd[1]
    if kind not in ("layer", "blob", "ghost"):
        return None
    return {"kind": kind, "name": name}


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.GRAPH, "figure"),
        Input(ids.NET_VERSION, "data"), Input(ids.RUN_VERSION, "data"), Input(ids.COLOUR_BY, "value"),
        Input(ids.BLOB_MODE, "value"), Input(ids.GRAPH_OPTIONS, "value"), Input(ids.SELECTION, "data"),
        State(ids.SESSION, "data"))
    @guarded(1, "drawing the graph")
    def graph_cb(_nv, _rv, colour_by, blob_mode, options, selection, sid):
        if triggered_all() == {ids.SELECTION}:
            return selection_patch(app, sid, blob_mode, options, selection)
        return render(app, sid, colour_by, blob_mode, options, selection)

    @dash_app.callback(
        Output(ids.SELECTION, "data"), Output(ids.TABS, "value"),
        Input(ids.GRAPH, "clickData"), prevent_initial_call=True)
    @guarded(2, "selecting")
    def click_cb(click):
        sel = selection_from_click(click)
        if sel is None:
            return no_update, no_update
        return sel, "details"

    @dash_app.callback(Output(ids.GRAPH, "config"), Input(ids.IMAGE_FORMAT, "value"), State(ids.GRAPH, "config"))
    def image_format_cb(fmt, config):
        config = dict(config or {})
        config["toImageButtonOptions"] = {"format": fmt or "png", "filename": "net"}
        return config

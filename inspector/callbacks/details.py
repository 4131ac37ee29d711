"""Details of the selected layer, ghost or blob; the blob's histogram,
feature maps and a value table."""
from dash import Input, Output, State, no_update

from inspector import ids
from inspector.state import debugger, inputs, presenter

from ..layout.side_panels import (
    blob_details_children,
    block_details_children,
    chart,
    ghost_details_children,
    layer_details_children,
    value_table,
)
from .common import guarded

HIDDEN = {"display": "none"}
SHOWN = {"display": "block"}


def details(app, sid, selection):
    """(children, blob view style) for the selection."""
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None or not selection:
            return "Click a layer or a blob in the graph.", HIDDEN
        kind, name = selection.get("kind"), selection.get("name")
        g = ld.graph
        if kind == "layer" and g.has_layer(name):
            d, filt = presenter.layer_panel(ld, name)
            return layer_details_children(d, filt), HIDDEN
        if kind == "ghost":
            from ..views.panel_models import ghost_details
            d = ghost_details(g, name)
            if d is not None:
                return ghost_details_children(d), HIDDEN
        if kind == "blob" and g.has_blob(name):
            return blob_details_children(presenter.blob_panel(ld, name)), SHOWN
        if kind == "block":
            d = presenter.block_panel(ld, name)
            if d is not None:
                return block_details_children(d), HIDDEN
        return "%s %r is not in this net." % (kind or "item", name), HIDDEN


def blob_view(app, sid, selection, which, item, page, index_text):
    """(histogram, feature maps, value table, Pin button style) of the selected blob."""
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None or not selection or selection.get("kind") != "blob" or \
                not ld.graph.has_blob(selection.get("name")):
            return no_update, no_update, no_update, no_update
        try:
            index = inputs.parse_ints(index_text)
        except ValueError:
            index = ()
        name = selection["name"]
        hist, fmap, (rows, idx, full) = presenter.blob_figures(ld, name, which or "data",
                                                               item or 0, page or 0, index)
        step = debugger.viewed_step(ld)
        if step is None or rows or full:
            return hist, fmap, value_table(rows, idx, full), HIDDEN
        # scrubbed back to a step that kept statistics only: offer to pin (the next steps keep the arrays)
        if (name, which or "data") in ld.timeline.pins:
            note = ("step %d kept statistics of %s only; it is pinned now: the steps that follow keep its "
                    "arrays (run one, then scrub to it)" % (step.index, name))
            return hist, fmap, value_table([], (), (), note), HIDDEN
        note = ("step %d kept statistics of %s only, not its values. Pin keeps its full arrays with every "
                "step that follows." % (step.index, name))
        return hist, fmap, value_table([], (), (), note), {"display": "inline-block"}


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.DETAILS, "children"), Output(ids.BLOB_VIEW, "style"),
        Input(ids.SELECTION, "data"), Input(ids.PANELS_NET, "data"), Input(ids.RUN_VERSION, "data"),
        State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(2, "showing details")
    def details_cb(selection, _nv, _rv, sid):
        return details(app, sid, selection)

    @dash_app.callback(
        Output(ids.HISTOGRAM, "children"), Output(ids.FEATURE_MAPS, "children"), Output(ids.VALUE_TABLE, "children"),
        Output(ids.VALUE_PIN, "style"),
        Input(ids.SELECTION, "data"), Input(ids.RUN_VERSION, "data"), Input(ids.BLOB_WHICH, "value"),
        Input(ids.FMAP_ITEM, "value"), Input(ids.FMAP_PAGE, "value"), Input(ids.VALUE_SLICE, "value"),
        Input(ids.PIN_STATUS, "children"), State(ids.SESSION, "data"),
        running=[(Output(ids.BLOB_BUSY, "style"), {"display": "inline-block"}, {"display": "none"})])
    @guarded(4, "showing the blob")
    def blob_cb(selection, _rv, which, item, page, index_text, _pinned, sid):
        hist, fmap, table, pin = blob_view(app, sid, selection, which, item, page, index_text)
        if hist is no_update:
            return hist, fmap, table, pin
        return chart(hist, "small-graph"), chart(fmap), table, pin


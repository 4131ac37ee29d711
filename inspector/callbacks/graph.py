"""The graph: elements on net/run/option/folding changes (a selection is
marked client-side: no redraw), click-to-select, folding (expand/collapse
one or all, double-click), search (matches listed, a pick selects, reveals
and centres), and the legend."""
from dash import ClientsideFunction, Input, Output, State, html, no_update
from dash.exceptions import PreventUpdate

from inspector import ids
from inspector.state import debugger, presenter
from inspector.views import search as search_mod

from .common import guarded, triggered


def render(app, sid, colour_by, blob_mode, options, expanded):
    """(elements, title, legend, meta) of the session's net; meta {"net", "n"}
    tells the page when a different net (or drawing) arrives."""
    with app.store.use(sid) as s:
        if s.loaded is None:
            return [], "no net loaded", [], {"net": "", "n": 0}
        opts = presenter.display_options(blob_mode, options)
        # ids scoped by what the drawing is made of: another net shares no element with the one before
        els, view = presenter.graph_elements(s.loaded, colour_by, opts, expanded,
                                             scope=presenter.drawing_scope(s.loaded))
        meta = {"net": "%s-%d" % (view.uirevision, s.net_version), "n": len(els), "version": s.net_version}
        title = graph_title(view.title, debugger.viewed_step(s.loaded))
    spares = getattr(app, "spares", None)
    if spares is not None:
        spares.hurry_tab(sid)       # the net is drawn: its other phase is built ahead from now
    return els, title, legend_children(view), meta


def first_graph(app, sid, run_version, args):
    """The graph of a fresh tab's first net (``first_load``), drawn into the page it is sent
    with: {(id, prop): value} of the graph callback's outputs for the view ``args``
    (colour_by, blob_mode, options, expanded: the page's own defaults) at the page's
    ``run_version``."""
    els, title, legend, meta = render(app, sid, *args)
    with app.store.use(sid) as s:
        if s.first_view is not None:
            s.first_view["graph"] = tuple(json_args((run_version, *args)))
    return {(ids.GRAPH, "elements"): els, (ids.GRAPH_TITLE, "children"): title,
            (ids.GRAPH_LEGEND, "children"): legend, (ids.GRAPH_META, "data"): meta}


def json_args(args):
    """The view's arguments as the page sends them back (lists for tuples)."""
    return [list(a) if isinstance(a, tuple) else a for a in args]


def first_graph_done(app, sid, args):
    """Whether the page's first graph callback asks for the drawing the page came with
    (first_graph: the same net version, run version and view ``args``); then it changes
    nothing.  Once.  (Dash names an input of the first call as its trigger when the load
    callback before it changed nothing, so the first call is told by what it asks for.)"""
    with app.store.use(sid) as s:
        fv = s.first_view
        if (not fv or fv.get("net_version") != s.net_version or fv.get("graph_done")
                or fv.get("graph") != tuple(json_args(args))):
            return False
        fv["graph_done"] = True
        return True


def graph_title(title, step):
    """The graph's caption; while the timeline is scrubbed back, a badge naming the step
    shown (the colours and panels are that step's, not the live net's)."""
    if step is None:
        return title
    return [title, html.Span(" · viewing step %d: %s (Timeline ▸ Live net returns)" % (step.index, step.label),
                             className="scrub-badge")]


def legend_children(view):
    """The legend: swatches of a categorical colouring, or the numeric scale's ends."""
    out = []
    for label, colour in view.legend:
        out.append(html.Span([html.Span(className="swatch", style={"background": colour}), label],
                             className="legend-item"))
    if view.scale is not None:
        sc = view.scale
        from inspector.views.view_models import _SCALE, _fmt
        grad = "linear-gradient(to right, %s)" % ", ".join(sc.palette or _SCALE)
        below = [html.Span(className="swatch", style={"background": sc.below}), sc.below_text + " · "] \
            if sc.below else []
        out.append(html.Span([html.Span(sc.title + (" (log)" if sc.log else "") + ": ")] + below + [
            _fmt(sc.lo), html.Span(className="scalebar", style={"background": grad}), _fmt(sc.hi),
            html.Span(" · grey: no record", className="muted")], className="legend-item legend-scale"))
    for cause in view.causes[:3]:
        out.append(html.Span([html.Span(className="swatch cause"), "⚠ %s: %s" % (cause.badge, cause.layer)],
                             className="legend-item legend-cause", title=cause.message))
    if any(c.symptoms for c in view.causes):
        out.append(html.Span([html.Span(className="swatch symptom"), "follows from it"], className="legend-item"))
    if view.marks is not None and view.marks.stopped is not None:
        out.append(html.Span([html.Span(className="swatch mark"), "last %s stopped here (▶); shaded: its range"
                              % view.marks.kind], className="legend-item"))
    return out


def selection_from_tap(data, edge=False):
    """{"kind", "name"} of a tapped node or edge (None for anything else)."""
    if not data:
        return None
    if edge:
        blob = data.get("blob")
        return {"kind": "blob", "name": blob} if blob else None
    kind, name = data.get("kind"), data.get("name")
    if kind in ("layer", "ghost"):
        members = [m for m in (data.get("members") or "").split("|") if m]
        return {"kind": kind, "name": members[0] if members else name}
    if kind in ("blob", "output"):
        return {"kind": "blob", "name": name}
    if kind in ("block", "group"):
        return {"kind": "block", "name": name}
    return None


def folded_around(loaded, selection, expanded):
    """The outermost folded block holding the selection (None: it is drawn on its own)."""
    if not selection:
        return None
    blks = presenter.blocks(loaded)
    opened = set(presenter.expanded_set(loaded, expanded))
    want = search_mod.blocks_to_open(loaded.graph, blks, selection.get("kind"), selection.get("name"))
    if selection.get("kind") == "block" and selection.get("name") not in opened:
        want = want + [selection["name"]]
    order = {b.id: len(b.layers) for b in blks}
    for bid in sorted(want, key=lambda b: -order.get(b, 0)):
        if bid not in opened:
            return bid
    return None


def fold(app, sid, action, selection, expanded, toggle=None):
    """The new list of expanded blocks after ``action`` (expand, collapse,
    expand_all, collapse_all, toggle)."""
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None:
            return no_update
        blks = presenter.blocks(ld)
        opened = list(presenter.expanded_set(ld, expanded))
        if action == "expand_all":
            return [b.id for b in blks]
        if action == "collapse_all":
            return []
        if action == "toggle":
            bid = (toggle or {}).get("id")
            if bid not in {b.id for b in blks}:
                return no_update
            return [b for b in opened if b != bid] if bid in opened else opened + [bid]
        if action == "expand":
            bid = folded_around(ld, selection, expanded)
            return opened + [bid] if bid else no_update
        if action == "collapse":
            bid = _open_block_of(ld, selection, opened)
            return [b for b in opened if b != bid] if bid else no_update
    return no_update


def _open_block_of(ld, selection, opened):
    """The selected block if open, else the innermost open block around the selected layer/blob."""
    if not selection:
        return None
    if selection.get("kind") == "block" and selection.get("name") in opened:
        return selection["name"]
    around = search_mod.blocks_to_open(ld.graph, presenter.blocks(ld), selection.get("kind"), selection.get("name"))
    sizes = {b.id: len(b.layers) for b in presenter.blocks(ld)}
    inner = [b for b in around if b in opened]
    return min(inner, key=lambda b: sizes[b]) if inner else None


def search_results(app, sid, text):
    with app.store.use(sid) as s:
        if s.loaded is None or not (text or "").strip():
            return []
        matches, total = search_mod.search(s.loaded.graph, text, presenter.blocks(s.loaded))
    if not matches:
        return [html.Li("no layer, blob or type matches %r" % text.strip(), className="search-none")]
    items = [html.Li([html.Span(m.name, className="hit-name"), html.Span(m.type, className="hit-type"),
                      html.Span(m.shape, className="hit-shape")] + (
                         [html.Span("in " + m.where, className="hit-where")] if m.where else []),
                     className="search-hit" + (" active" if k == 0 else ""), role="option",
                     **{"data-kind": m.kind, "data-name": m.name})
             for k, m in enumerate(matches)]
    if total > len(matches):
        items.append(html.Li("%d more: type more of the name" % (total - len(matches)), className="search-none"))
    return items


def opened_around(loaded, kind, name, expanded):
    """The expanded block ids with every block around ``kind`` ``name`` opened (so it is
    drawn on its own), or no_update when nothing changes."""
    opened = list(presenter.expanded_set(loaded, expanded))
    need = [b for b in search_mod.blocks_to_open(loaded.graph, presenter.blocks(loaded), kind, name)
            if b not in opened]
    if not need:
        return no_update
    new = opened + need
    return new


def pick(app, sid, choice, expanded):
    """(selection, expanded, focus) for a chosen search match."""
    if not isinstance(choice, dict) or choice.get("kind") not in ("layer", "blob", "block"):
        return no_update, no_update, no_update
    sel = {"kind": choice["kind"], "name": choice.get("name")}
    with app.store.use(sid) as s:
        if s.loaded is None:
            return no_update, no_update, no_update
        new = opened_around(s.loaded, sel["kind"], sel["name"], expanded)
    return sel, new, dict(sel, n=choice.get("n", 0))


FOLD_BUTTONS = {ids.EXPAND: "expand", ids.COLLAPSE: "collapse", ids.EXPAND_ALL: "expand_all",
                ids.COLLAPSE_ALL: "collapse_all", ids.BLOCK_TOGGLE: "toggle"}


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.GRAPH, "elements"), Output(ids.GRAPH_TITLE, "children"), Output(ids.GRAPH_LEGEND, "children"),
        Output(ids.GRAPH_META, "data"),
        Input(ids.NET_VERSION, "data"), Input(ids.RUN_VERSION, "data"), Input(ids.COLOUR_BY, "value"),
        Input(ids.BLOB_MODE, "value"), Input(ids.GRAPH_OPTIONS, "value"), Input(ids.EXPANDED_BLOCKS, "data"),
        State(ids.SESSION, "data"),
        running=[(Output(ids.GRAPH_BUSY, "style"), {"display": "inline-block"}, {"display": "none"})])
    @guarded(4, "drawing the graph")
    def graph_cb(_nv, _rv, colour_by, blob_mode, options, expanded, sid):
        if first_graph_done(app, sid, (_rv, colour_by, blob_mode, options, expanded)):
            raise PreventUpdate          # the page came with this drawing (first_graph)
        return render(app, sid, colour_by, blob_mode, options, expanded)

    dash_app.clientside_callback(
        ClientsideFunction("inspectorGraph", "sync"), Output(ids.GRAPH_CLIENT, "data"),
        Input(ids.GRAPH_META, "data"), Input(ids.SELECTION, "data"), Input(ids.FOCUS, "data"))
    dash_app.clientside_callback(      # the panels follow once the graph is drawn (assets/graph.js)
        ClientsideFunction("inspectorGraph", "panels"), Output(ids.PANELS_NET, "data"),
        Input(ids.NET_VERSION, "data"))
    # the buttons that act on the selection are off while nothing is selected (they did nothing)
    dash_app.clientside_callback(
        "function (sel) { var none = !(sel && sel.name); return [none, none, none]; }",
        Output(ids.EXPAND, "disabled"), Output(ids.COLLAPSE, "disabled"), Output(ids.FIT_SELECTION, "disabled"),
        Input(ids.SELECTION, "data"))
    dash_app.clientside_callback(
        ClientsideFunction("inspectorGraph", "fit"), Output(ids.GRAPH_CLIENT, "data", allow_duplicate=True),
        Input(ids.FIT_NET, "n_clicks"), Input(ids.FIT_SELECTION, "n_clicks"), prevent_initial_call=True)

    @dash_app.callback(
        Output(ids.SELECTION, "data"), Output(ids.TABS, "value"),
        Input(ids.GRAPH, "tapNodeData"), Input(ids.GRAPH, "tapEdgeData"), prevent_initial_call=True)
    @guarded(2, "selecting")
    def click_cb(node, edge):
        sel = selection_from_tap(edge, edge=True) if _edge_fired() else selection_from_tap(node)
        if sel is None:
            return no_update, no_update
        return sel, "details"

    @dash_app.callback(
        Output(ids.EXPANDED_BLOCKS, "data", allow_duplicate=True),
        Input(ids.EXPAND, "n_clicks"), Input(ids.COLLAPSE, "n_clicks"), Input(ids.EXPAND_ALL, "n_clicks"),
        Input(ids.COLLAPSE_ALL, "n_clicks"), Input(ids.BLOCK_TOGGLE, "data"),
        State(ids.SELECTION, "data"), State(ids.EXPANDED_BLOCKS, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(1, "folding blocks")
    def fold_cb(_e, _c, _ea, _ca, toggle, selection, expanded, sid):
        action = FOLD_BUTTONS.get(triggered())
        if action is None:
            return no_update
        return fold(app, sid, action, selection, expanded, toggle)

    @dash_app.callback(Output(ids.SEARCH_RESULTS, "children"), Input(ids.SEARCH, "value"),
                       Input(ids.NET_VERSION, "data"), State(ids.SESSION, "data"))
    @guarded(1, "searching")
    def search_cb(text, _nv, sid):
        return search_results(app, sid, text)

    @dash_app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True),
        Output(ids.EXPANDED_BLOCKS, "data", allow_duplicate=True), Output(ids.FOCUS, "data"),
        Output(ids.TABS, "value", allow_duplicate=True),
        Input(ids.SEARCH_PICK, "data"), State(ids.EXPANDED_BLOCKS, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(4, "choosing a search result")
    def pick_cb(choice, expanded, sid):
        sel, exp, focus = pick(app, sid, choice, expanded)
        return sel, exp, focus, ("details" if sel is not no_update else no_update)


def _edge_fired():
    from dash import ctx
    return any(k.endswith(".tapEdgeData") for k in (ctx.triggered_prop_ids or {}))

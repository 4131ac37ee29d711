"""A fresh tab's first view, sent with its page: the page's layout (``serve_layout`` in
inspector/app.py) carries what the load and graph callbacks would set for the default net
when that net is built ahead already, so the graph is drawn with the page's first render
instead of after two rounds of callbacks.  The page's first load and graph callbacks then
find the work done (``load.first_load_done``, ``graph.first_graph_done``) and change
nothing; the side panels follow once the graph is drawn (PANELS_NET, assets/graph.js).

A tab that comes back with its own session (a reload: assets/boot.inline.js marks it with
a cookie) or whose address names a net, a layer or a view gets the page as before: its
first view is not the default one."""
import logging
from urllib.parse import urlparse

from inspector import ids

from ..layout.common import prop_of, with_props
from .graph import first_graph
from .load import first_load

log = logging.getLogger("inspector")

RETURNING_COOKIE = "inspector-tab"      # "returning": the tab has a session of its own (assets/boot.inline.js)


def fresh_tab(request):
    """Whether the layout request ``request`` (a Flask request, or None outside one) comes
    from a new tab with a plain address: the tab that will show the default net."""
    if request is None or not request.path.endswith("_dash-layout"):
        return False
    if request.cookies.get(RETURNING_COOKIE) == "returning":
        return False
    page = urlparse(request.referrer or "")
    return not page.query and not page.fragment


def with_first_view(app, sid, tree):
    """``tree`` (the page for the new session ``sid``) with the default net's first view in
    it, when that net is ready; else ``tree`` as it was."""
    loaded = first_load(app, sid)
    if loaded is None:
        return tree
    try:
        expanded = loaded.get((ids.EXPANDED_BLOCKS, "data"), prop_of(tree, ids.EXPANDED_BLOCKS, "data"))
        args = (prop_of(tree, ids.COLOUR_BY, "value"), prop_of(tree, ids.BLOB_MODE, "value"),
                prop_of(tree, ids.GRAPH_OPTIONS, "value"), expanded)
        return with_props(tree, {**loaded, **first_graph(app, sid, prop_of(tree, ids.RUN_VERSION, "data"), args)})
    except Exception:  # noqa: BLE001 - the page then loads (and shows) its net itself
        log.exception("the first view could not be sent with the page; the page loads its net itself")
        with app.store.use(sid) as s:
            s.first_view = None
        return tree

"""The page's address (docs/inspector-urls.md).

- The server computes the query string of what the page shows (the net, its
  NetState, the selection, the expanded blocks) into ids.URL_STATE.
- A clientside callback writes it into the address bar: history.replaceState,
  or pushState when another net was opened (so Back returns to it), and
  listens to the browser's back/forward buttons (ids.URL_POP, which the load
  callback answers by loading the address).
- After a load from an address (page load, reload, back/forward), the load
  callback sets ids.SELECTION and ids.EXPANDED_BLOCKS from it, in the same
  update as ids.NET_VERSION.
"""
from dash import Input, Output, State, no_update

from inspector import ids
from inspector.state import urlstate

from .common import guarded

WRITE_JS = """
function (state) {
    const w = window, nu = w.dash_clientside.no_update;
    if (!w._inspectorPop) {
        w._inspectorPop = 0;
        w.addEventListener('popstate', function () {
            w._inspectorNet = undefined;            // the next write replaces the entry Back/Forward chose
            w._inspectorPop += 1;
            w.dash_clientside.set_props('%(pop)s', {data: {search: w.location.search, n: w._inspectorPop}});
        });
    }
    if (!state || typeof state.search !== 'string') { return nu; }
    const target = w.location.pathname + state.search + w.location.hash;
    const current = w.location.pathname + w.location.search + w.location.hash;
    if (target !== current) {
        if (w._inspectorNet !== undefined && w._inspectorNet !== state.net) {
            w.history.pushState(null, '', target);
        } else {
            w.history.replaceState(null, '', target);
        }
    }
    w._inspectorNet = state.net;
    return state.search;
}
""" % {"pop": ids.URL_POP}


def address(app, sid, selection, expanded):
    """{"search", "net"} for the page's address, or None while no net is loaded."""
    with app.store.use(sid) as s:
        if s.loaded is None:
            return None
        state = urlstate.state_of(app, s, selection, expanded)
    return {"search": urlstate.encode(state), "net": urlstate.encode(state.net_part)}


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.URL_STATE, "data"),
        Input(ids.NET_VERSION, "data"), Input(ids.SELECTION, "data"), Input(ids.EXPANDED_BLOCKS, "data"),
        Input(ids.LOAD_STATUS, "children"), State(ids.SESSION, "data"))
    @guarded(1, "updating the address")
    def address_cb(net_version, selection, expanded, _status, sid):
        if not net_version:
            return no_update
        value = address(app, sid, selection, expanded)
        return value if value is not None else no_update

    dash_app.clientside_callback(WRITE_JS, Output(ids.URL_WRITTEN, "data"), Input(ids.URL_STATE, "data"))

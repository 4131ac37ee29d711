"""Page and panel builders."""
from dash import dcc, html

from inspector import ids

from .common import apply_plot_config
from .graph_panel import graph_panel, step_buttons
from .graph_panel import shortcuts_overlay_html as shortcuts_overlay_html  # (the app writes it into its index page)
from .header import header
from .side_panels import side_panel


def page(config, session_id, examples, gpu, solver_ok):
    """The whole page for one browser tab.  A fresh session id each load,
    unless the tab already has one (sessionStorage: a reloaded tab goes on with
    its session while the server keeps it)."""
    return apply_plot_config(html.Div([
        dcc.Store(id=ids.SESSION, data=session_id, storage_type="session"),
        dcc.Store(id=ids.NET_VERSION, data=0),
        dcc.Store(id=ids.RUN_VERSION, data=0),
        dcc.Store(id=ids.PANELS_NET, data=0),
        dcc.Store(id=ids.SELECTION, data=None),
        dcc.Store(id=ids.EXPANDED_BLOCKS, data=None),
        *address_stores(),
        header(config, examples, gpu, step_buttons(solver_ok)),
        html.Div([graph_panel(), side_panel(config.max_upload_bytes)], className="main"),
    ], className="app"))


def address_stores():
    """The page's address (inspector/callbacks/urlstate.py)."""
    return [dcc.Location(id=ids.URL, refresh=False), dcc.Store(id=ids.URL_POP), dcc.Store(id=ids.URL_STATE),
            dcc.Store(id=ids.URL_WRITTEN), dcc.Store(id=ids.IMAGE_FORMAT_APPLIED)]

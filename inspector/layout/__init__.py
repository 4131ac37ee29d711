"""Page and panel builders."""
from dash import dcc, html

from inspector import ids
from .graph_panel import graph_panel
from .header import header
from .side_panels import side_panel


def page(config, session_id, examples, gpu, solver_ok):
    """The whole page for one browser tab (a fresh session id each load)."""
    return html.Div([
        dcc.Store(id=ids.SESSION, data=session_id, storage_type="memory"),
        dcc.Store(id=ids.NET_VERSION, data=0),
        dcc.Store(id=ids.RUN_VERSION, data=0),
        dcc.Store(id=ids.SELECTION, data=None),
        header(config, examples, gpu),
        html.Div([graph_panel(solver_ok), side_panel(config.max_upload_bytes)], className="main"),
    ], className="app")

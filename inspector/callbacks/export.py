"""Export: the report download (engine.instruments.report when present, else JSON of the
records); the banner's dismiss button.  (Graph images: the modebar's camera,
PNG or SVG, set in graph.py.)"""
import re

from dash import Input, Output, State, no_update

from inspector import adapters, ids

from .common import guarded


def report(app, sid, fmt):
    """dcc.Download data: {"content", "filename"}."""
    with app.store.use(sid) as s:
        if s.loaded is None:
            return None
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", s.loaded.graph.name or "net")
        filename, text = adapters.make_report(s.loaded.net, s.loaded.recorder, fmt or "json", name)
    return {"content": text, "filename": filename, "base64": False}


def register(dash_app, app):
    @dash_app.callback(Output(ids.DOWNLOAD, "data"), Input(ids.REPORT_BUTTON, "n_clicks"),
                       State(ids.REPORT_FORMAT, "value"), State(ids.SESSION, "data"), prevent_initial_call=True)
    @guarded(1, "exporting the report")
    def report_cb(_n, fmt, sid):
        data = report(app, sid, fmt)
        return data if data is not None else no_update

    @dash_app.callback(Output(ids.ERROR_BANNER, "style"), Input(ids.ERROR_DISMISS, "n_clicks"),
                       prevent_initial_call=True)
    def dismiss_cb(_n):
        return {"display": "none"}

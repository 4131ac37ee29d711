"""Export: the report download (engine.instruments.report when present, else JSON of the
records); the banner's dismiss button.  (Graph images: the modebar's camera,
PNG or SVG, set in graph.py.)"""
import os
import re

from dash import Input, Output, State, no_update

from inspector import adapters, ids

from .common import guarded
from .image_export import file_stem


def report(app, sid, fmt):
    """dcc.Download data: {"content", "filename"}."""
    with app.store.use(sid) as s:
        if s.loaded is None:
            return None
        ld = s.loaded
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", file_stem(ld.graph, ld.spec.model))
        filename, text = adapters.make_report(ld.net, ld.recorder, fmt or "json", name,
                                              breakpoints=s.breakpoints, timeline=ld.timeline,
                                              model_label=model_label(app, s))
    return {"content": text, "filename": filename, "base64": False}


def model_label(app, session):
    """How the report names the model: an upload by its file name (never the server's
    folder it was saved in), a file under the model root by its path relative to it."""
    spec = session.loaded.spec
    if spec.uploaded:
        return session.upload_names.get("model") or spec.label or os.path.basename(spec.model)
    root = os.path.realpath(app.config.model_root)
    path = os.path.realpath(spec.model)
    if path.startswith(root + os.sep):
        return os.path.relpath(path, root)
    return spec.label or os.path.basename(path)


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

"""Saving the graph as an image: PNG from the browser's drawing (cytoscape's
own export of the whole graph), SVG drawn by the server from the same view
(every node, frame and edge as vector shapes and text)."""
import base64
import os

from dash import Input, Output, State, no_update

from inspector import ids
from inspector.state import presenter

from .common import guarded

PNG_REQUEST = {"type": "png", "action": "download", "filename": "net",
               "options": {"full": True, "scale": 2, "bg": "#ffffff", "output": "base64uri"}}


def file_stem(graph, model=None):
    """A file's name for what the page saves of a net: the net's name, safe for a file
    system; a net without a name by its prototxt's ("lenet" for lenet.prototxt)."""
    name = graph.name or os.path.splitext(os.path.basename(model or ""))[0] or "net"
    return name.replace(" ", "_").replace("/", "_")


def svg_download(app, sid, colour_by, blob_mode, options, expanded):
    """dcc.Download data of the graph as SVG (None without a net)."""
    with app.store.use(sid) as s:
        if s.loaded is None:
            return None
        opts = presenter.display_options(blob_mode, options)
        text = presenter.graph_svg(s.loaded, colour_by, opts, expanded)
        name = file_stem(s.loaded.graph, s.loaded.spec.model)
    return {"content": text, "filename": "%s.svg" % name, "type": "image/svg+xml"}


def png_request(app, sid):
    """cytoscape's generateImage request: the whole graph as PNG, named after the net."""
    with app.store.use(sid) as s:
        name = file_stem(s.loaded.graph, s.loaded.spec.model) if s.loaded is not None else "net"
    return dict(PNG_REQUEST, filename=name)


def onnx_download(app, sid):
    """(dcc.Download data or None, status text): the loaded net as ONNX bytes, or why not
    (a layer with no faithful ONNX form is named; a missing extra says which to install)."""
    import engine.ports as ports
    with app.store.use(sid) as s:
        if s.loaded is None:
            return None, "no net is loaded"
        name = file_stem(s.loaded.graph)
        try:
            data = ports.export_onnx_bytes(s.loaded.net)
        except (ports.ExportError, ports.MissingExtraError) as exc:
            return None, "not saved: %s" % exc
    return ({"content": base64.b64encode(data).decode(), "base64": True, "filename": "%s.onnx" % name,
             "type": "application/octet-stream"},
            "saved %s.onnx (%d KiB; verify it: python -m engine export-onnx --help)" % (name, len(data) // 1024))


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.ONNX_DOWNLOAD, "data"), Output(ids.ONNX_STATUS, "children"),
        Input(ids.ONNX_SAVE, "n_clicks"), State(ids.SESSION, "data"), prevent_initial_call=True)
    @guarded(2, "saving the net as ONNX")
    def onnx_cb(_n, sid):
        data, status = onnx_download(app, sid)
        return (data if data is not None else no_update), status

    @dash_app.callback(
        Output(ids.GRAPH, "generateImage"), Output(ids.GRAPH_DOWNLOAD, "data"),
        Input(ids.IMAGE_SAVE, "n_clicks"), State(ids.IMAGE_FORMAT, "value"), State(ids.COLOUR_BY, "value"),
        State(ids.BLOB_MODE, "value"), State(ids.GRAPH_OPTIONS, "value"), State(ids.EXPANDED_BLOCKS, "data"),
        State(ids.SESSION, "data"), prevent_initial_call=True)
    @guarded(2, "saving the graph image")
    def save_cb(_n, fmt, colour_by, blob_mode, options, expanded, sid):
        if fmt == "svg":
            data = svg_download(app, sid, colour_by, blob_mode, options, expanded)
            return no_update, (data if data is not None else no_update)
        return png_request(app, sid), no_update

"""The upload boxes say which file they hold: the file just chosen (at once, while it
loads), and once a net is drawn the uploaded files it is built from (a box whose kind the
net does not use from an upload shows its plain label again)."""
from dash import Input, Output, State, html

from inspector import ids

from .common import guarded, triggered
from .load import UPLOAD_IDS, UPLOAD_KINDS

LABELS = {ids.UPLOAD_MODEL: "prototxt", ids.UPLOAD_WEIGHTS: "caffemodel", ids.UPLOAD_SOLVER: "solver",
          ids.UPLOAD_MEAN: "mean"}


def in_use(session):
    """{upload box id: the file name of the upload the loaded net uses from it}."""
    ld = session.loaded
    if ld is None:
        return {}
    spec, paths, names = ld.spec, session.uploads, session.upload_names
    used = {"model": spec.uploaded and spec.model == paths.get("model"),
            "weights": bool(spec.weights) and spec.weights == paths.get("weights"),
            "solver": bool(spec.solver) and spec.solver == paths.get("solver"),
            "mean": bool(spec.mean) and spec.mean == paths.get("mean")}
    return {u: names.get(kind, "") for u, kind in UPLOAD_KINDS.items() if used[kind] and names.get(kind)}


def box_label(upload_id, filename=""):
    """What an upload box shows: its kind, and the file it holds."""
    parts = [html.Span(LABELS[upload_id], className="upload-kind")]
    if filename:
        parts.append(html.Span(filename, className="upload-file", title=filename))
    return html.Div(parts, className="upload-label")


def labels(app, sid, trigger, filenames):
    """The children of the upload boxes: the box just used shows the file chosen, the others
    the uploaded files the loaded net uses."""
    with app.store.use(sid) as s:
        files = in_use(s)
    if trigger in UPLOAD_KINDS:
        files[trigger] = filenames[UPLOAD_IDS.index(trigger)] or files.get(trigger, "")
    return [box_label(u, files.get(u, "")) for u in UPLOAD_IDS]


def register(dash_app, app):
    @dash_app.callback(
        *[Output(u, "children") for u in UPLOAD_IDS],
        # a net loaded: after its graph is drawn (PANELS_NET), not beside it
        *[Input(u, "filename") for u in UPLOAD_IDS], Input(ids.PANELS_NET, "data"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(len(UPLOAD_IDS), "naming the uploaded files")
    def uploads_cb(*args):
        *filenames, _nv, sid = args
        return labels(app, sid, triggered(), filenames[:len(UPLOAD_IDS)])

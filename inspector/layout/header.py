"""The load bar: examples, a path under the model root, uploads, NetState,
device, report export, and where load errors appear."""
import os

from dash import dcc, html

from inspector import ids

from ..adapters import REPORT_FORMATS
from .common import busy, button, field, upload


def header(config, examples, gpu, steps=None):
    """The load bar, the NetState row (with ``steps``, the step buttons, beside the
    device they run on), the loaded net's status line with the last run's message,
    and where load errors appear."""
    example_opts = [{"label": label, "value": path} for label, path, _phase in examples]
    if config.model:
        example_opts.insert(0, {"label": "command line: %s" % config.model, "value": "cli"})
    default = example_opts[0]["value"] if example_opts else None
    limit = config.max_upload_bytes
    return html.Div([
        html.Div([
            html.H1(config.title, className="title"),
            field("Example", dcc.Dropdown(example_opts, default, id=ids.EXAMPLE, clearable=False,
                                          placeholder="(a net opened by path or upload)",
                                          className="example-dropdown")),
            field("Model path", html.Div([
                dcc.Input(id=ids.MODEL_PATH, type="text", debounce=False, placeholder="models/x/deploy.prototxt",
                          className="path-input"),
                button(ids.MODEL_PATH_OPEN, "Open")], className="inline"),
                  title="a prototxt under the model root (--model-root); Enter or Open loads it"),
            html.Div([
                upload(ids.UPLOAD_MODEL, "prototxt", ".prototxt,.pbtxt,.txt", limit),
                upload(ids.UPLOAD_WEIGHTS, "caffemodel", ".caffemodel,.h5", limit),
                upload(ids.UPLOAD_SOLVER, "solver", ".prototxt,.pbtxt,.txt", limit),
                upload(ids.UPLOAD_MEAN, "mean", ".binaryproto", limit),
            ], className="uploads", title="Upload files (max %d MiB each)" % (limit // 2 ** 20),
               **{"data-max-bytes": str(limit)}),         # assets/upload_limit.js: a file over it says so
            html.Div([
                dcc.Dropdown([{"label": f, "value": f} for f in REPORT_FORMATS], "json",
                             id=ids.REPORT_FORMAT, clearable=False, className="small-dropdown"),
                button(ids.REPORT_BUTTON, "Download report")], className="inline export"),
        ], className="bar"),
        html.Div([
            field("Phase", dcc.RadioItems(["TRAIN", "TEST"], config.phase, id=ids.PHASE, inline=True)),
            field("Level", dcc.Input(id=ids.LEVEL, type="number", value=config.level, step=1,
                                     debounce=True, className="num-input")),
            field("Stages", dcc.Dropdown(options=[{"label": s, "value": s} for s in config.stages],
                                         value=list(config.stages), id=ids.STAGES, multi=True,
                                         placeholder="none", className="stages-dropdown")),
            field("Device", dcc.RadioItems(
                options=[{"label": "CPU", "value": "CPU"},
                         {"label": "GPU", "value": "GPU", "disabled": not gpu}],
                value="GPU" if (config.gpu and gpu) else "CPU", id=ids.DEVICE, inline=True)),
            steps,
            dcc.Download(id=ids.DOWNLOAD),
        ], className="bar bar2"),
        html.Div([html.Div(id=ids.LOAD_STATUS, className="load-status"),
                  html.Div(id=ids.RUN_MESSAGE, className="run-message"),
                  busy(ids.LOAD_BUSY, "loading the net…"), busy(ids.RUN_BUSY, "running…"),
                  busy(ids.REPORT_BUSY, "making the report…")], className="status-row"),
        html.Div(id=ids.LOAD_ERROR, className="load-error-wrap"),
        standin_box(),
        html.Div([html.Span(id=ids.ERROR_TEXT), html.Button("×", id=ids.ERROR_DISMISS, n_clicks=0,
                                                            className="dismiss", title="dismiss")],
                 id=ids.ERROR_BANNER, className="error-banner", style={"display": "none"}),
    ], className="header")


def standin_box():
    """Where a structure-only net says which data sources are missing, what it assumed,
    and takes the shapes it could not know (hidden for other nets)."""
    return html.Div([
        html.Div(id=ids.STANDIN_TEXT),
        html.Div([html.Div(id=ids.STANDIN_FORM, className="inline wrap"),
                  html.Button("Apply shapes", id=ids.STANDIN_APPLY, n_clicks=0, className="btn",
                              title="rebuild the net with these per-item shapes for the stood-in data tops",
                              **{"aria-label": "Apply shapes"})], className="inline standin-form"),
    ], id=ids.STANDIN_BOX, className="standin-box", role="status", style={"display": "none"})


def shape_text(dims):
    return "×".join(str(int(d)) for d in dims)


def standin_children(stand_ins, hints=None, failed=False):
    """(text, form) of the structure-only notice for ``stand_ins`` (a NetGraph's, or, with
    ``failed``, those of a net that did not build in the shapes assumed for its data);
    ``hints``: {layer: where its relative source was looked for, and where it is}."""
    items = []
    form = []
    for s in stand_ins:
        where = " (looked for at %s)" % s.path if s.path and s.path != s.source else ""
        if s.source and not os.path.isabs(s.source) and s.path.endswith(s.source):
            where = (" (relative: looked for in the server's working directory, %s, where Caffe opens it, "
                     "then beside the prototxt and under the model root)" % (s.path[:-len(s.source)].rstrip("/")
                                                                             or "/"))
        items.append(html.Li([
            html.B("layer %s (%s): " % (s.layer, s.type)),
            html.Span("%s %s is %s%s" % (s.field, "'%s'" % s.source if s.source else "", s.reason, where),
                      className="standin-missing"),
            html.Div("stood in by an Input: " + "; ".join(t.text for t in s.tops), className="standin-shapes"),
            html.Details([html.Summary("where it was looked for, and where it is", className="standin-why"),
                          html.Pre(hints[s.layer], className="err-hint")])
            if hints and hints.get(s.layer) else None]))
        for t in s.tops:
            if len(t.shape) < 2:
                continue            # labels: one per item
            form.append(html.Label([
                html.Span("%s: %d ×" % (t.name, t.shape[0]), className="field-label"),
                html.Div(dcc.Input(id={"type": ids.STANDIN_SHAPE, "top": t.name}, type="text",
                                   value=shape_text(t.shape[1:]), debounce=False, className="short-input"),
                         **{"aria-label": "Shape of %s" % t.name})],
                className="field" + (" assumed" if t.assumed else "")))
    assumed = any(s.assumed for s in stand_ins)
    if failed:
        text = [html.Div([html.B("Structure only: "),
                          "the net that did not load has no data on the server, and it does not build with "
                          "%s in these shapes (the error above)." % (
                              "its data" if len(stand_ins) == 1 else "their data")]),
                html.Ul(items, className="standin-list"),
                html.Div("Give the real per-item shapes (C×H×W) and Apply shapes to open it.",
                         className="standin-assumed")]
        return text, form
    text = [html.Div([html.B("Structure only: "),
                      "this net's data is not on the server; %s. " % (
                          "its data layer is stood in by an Input layer shaped from its params"
                          if len(stand_ins) == 1 else
                          "its data layers are stood in by Input layers shaped from their params"),
                      "The inputs are synthetic (Inputs tab: random, constant, a .npy file or an image)."]),
            html.Ul(items, className="standin-list")]
    if assumed:
        text.append(html.Div("Some dimensions were assumed: give the real per-item shapes (C×H×W) and "
                             "Apply shapes.", className="standin-assumed"))
    return text, form


def load_error_box(err, shown=None):
    """The load error panel (or nothing): message, file:line:col, layer, blob,
    a hint, and what the page shows instead (``shown``: a description of the
    net still loaded, None when there is none)."""
    if err is None:
        return None
    where = []
    if err.where:
        where.append(html.Span(err.where, className="err-where"))
    if err.layer:
        where.append(html.Span("layer %s" % err.layer, className="err-layer"))
    if getattr(err, "field", None):
        where.append(html.Span("field %s" % err.field, className="err-field"))
    if err.blob:
        where.append(html.Span("blob %s" % err.blob, className="err-blob"))
    if err.kind == "not in this net":          # the net loaded; the address named something it lacks
        return html.Div([
            html.Div([html.B("Not in this net: "), html.Span("the address", className="err-kind")]),
            html.Pre(err.message, className="err-message"),
            html.Div("Shown: %s." % shown if shown else "", className="muted err-shown"),
        ], className="load-error address-miss", id="load-error-box")
    return html.Div([
        html.Div([html.B("Could not load: "), html.Span(err.kind or "error", className="err-kind")]),
        html.Div(where, className="err-loc") if where else None,
        html.Pre(err.message, className="err-message"),
        html.Pre(err.hint, className="err-hint") if getattr(err, "hint", "") else None,
        html.Div(("Shown instead: %s, the default net." if getattr(err, "fallback", False) else
                  "Still shown: %s, the last net that loaded; it stays usable.") % shown if shown
                 else "No net is loaded.", className="muted err-shown"),
    ], className="load-error", id="load-error-box")


def load_status(session):
    ld = session.loaded
    if ld is None:
        return "no net loaded"
    from ..views.panel_models import analysis_totals
    g = ld.graph
    bits = [g.shown_name, "%s" % g.phase_name, "%d layers" % len(g.layers),
            "%d blobs" % len(g.blobs), "%d filtered out" % len(g.ghosts), "%d splits" % len(g.splits),
            "memory %s" % _mib(g.memory_used_bytes)]
    totals = analysis_totals(ld.analysis)
    if totals:
        bits.append(totals)
    spec = ld.spec
    files = [spec.label or spec.model]
    if spec.weights:
        files.append("weights " + session.upload_names.get("weights", spec.weights))
    if spec.solver:
        files.append("solver " + session.upload_names.get("solver", spec.solver)
                     + ("" if ld.solver is not None else " (%s)" % ld.solver_note))
    if spec.mean:
        files.append("mean " + session.upload_names.get("mean", spec.mean))
    files.extend(ld.cache.get("sources_found", ()))
    return html.Div([html.Span(" · ".join(bits), className="status-net"),
                     html.Span(" — " + "; ".join(str(f) for f in files), className="status-files")])


def _mib(n):
    return "%.2f MiB" % (n / 2 ** 20)

"""The load bar: examples, a path under the model root, uploads, NetState,
device, report export, and where load errors appear."""
from dash import dcc, html

from inspector import ids

from ..adapters import REPORT_FORMATS
from .common import button, field, upload


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
            ], className="uploads", title="Upload files (max %d MiB each)" % (limit // 2 ** 20)),
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
            html.Div([
                dcc.Dropdown([{"label": f, "value": f} for f in REPORT_FORMATS], "json",
                             id=ids.REPORT_FORMAT, clearable=False, className="small-dropdown"),
                button(ids.REPORT_BUTTON, "Download report")], className="inline export"),
            dcc.Download(id=ids.DOWNLOAD),
        ], className="bar bar2"),
        html.Div([html.Div(id=ids.LOAD_STATUS, className="load-status"),
                  html.Div(id=ids.RUN_MESSAGE, className="run-message")], className="status-row"),
        html.Div(id=ids.LOAD_ERROR, className="load-error-wrap"),
        html.Div([html.Span(id=ids.ERROR_TEXT), html.Button("×", id=ids.ERROR_DISMISS, n_clicks=0,
                                                            className="dismiss", title="dismiss")],
                 id=ids.ERROR_BANNER, className="error-banner", style={"display": "none"}),
    ], className="header")


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
        html.Div("Still shown: %s, the last net that loaded; it stays usable." % shown if shown
                 else "No net is loaded.", className="muted err-shown"),
    ], className="load-error", id="load-error-box")


def load_status(session):
    ld = session.loaded
    if ld is None:
        return "no net loaded"
    from ..panel_models import analysis_totals
    g = ld.graph
    bits = ["%s" % (g.name or "net"), "%s" % g.phase_name, "%d layers" % len(g.layers),
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
    return html.Div([html.Span(" · ".join(bits), className="status-net"),
                     html.Span(" — " + "; ".join(str(f) for f in files), className="status-files")])


def _mib(n):
    return "%.2f MiB" % (n / 2 ** 20)

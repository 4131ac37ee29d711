"""The side tabs (details, inputs, findings) and the builders that turn panel
view data into components."""
from dash import dcc, html

from inspector import ids
from inspector.views import figures

from .common import busy, cell_table, field, kv_table, plot_config, section, table, upload
from .debugger_panels import compare_tab, npy_controls, timeline_tab, training_tab


def details_tab():
    return html.Div([
        # while the server builds a layer's or a blob's details (a first click, a search pick), the
        # panel says so at once, the details before it dimmed under the note
        dcc.Loading(html.Div("Click a layer or a blob in the graph.", id=ids.DETAILS, className="details",
                             role="region", **{"aria-label": "Details"}),
                    id=ids.DETAILS_LOADING, target_components={ids.DETAILS: "children"},
                    overlay_style={"visibility": "visible", "opacity": 0.55}, delay_show=150,
                    custom_spinner=html.Div("⟳ loading the details…", className="recomputing", role="status"),
                    parent_className="findings-loading"),
        html.Div([
            html.Div([
                busy(ids.BLOB_BUSY, "drawing the blob's charts…"),
                field("Show", dcc.RadioItems(["data", "diff"], "data", id=ids.BLOB_WHICH, inline=True)),
                field("Batch item", dcc.Input(id=ids.FMAP_ITEM, type="number", value=0, min=0, step=1,
                                              className="num-input")),
                field("Channel page", dcc.Input(id=ids.FMAP_PAGE, type="number", value=0, min=0, step=1,
                                                className="num-input")),
            ], className="inline"),
            # the charts are made when a blob is shown: no Plotly at page open (its bundle is 3.5 MB)
            html.Div(id=ids.HISTOGRAM, className="small-graph"),
            html.Div(id=ids.FEATURE_MAPS),
            field("Values at index (leading axes, e.g. 0,3)", dcc.Input(id=ids.VALUE_SLICE, type="text",
                                                                         value="0", debounce=True)),
            html.Div(id=ids.VALUE_TABLE, className="value-table"),
            html.Button("Pin", id=ids.VALUE_PIN, n_clicks=0, className="btn", style={"display": "none"},
                        title="keep this blob's full data and diff arrays with every later step (Timeline: pinned)",
                        **{"aria-label": "Pin"}),
            npy_controls(),
        ], id=ids.BLOB_VIEW, style={"display": "none"}),
    ])


def inputs_tab(limit):
    return html.Div([
        field("Fill inputs with", dcc.RadioItems(
            [{"label": "random", "value": "random"}, {"label": "constant", "value": "constant"},
             {"label": ".npy file", "value": "npy"}, {"label": "image", "value": "image"}],
            "random", id=ids.INPUT_KIND, inline=True)),
        html.Div([
            field("Value / std", dcc.Input(id=ids.INPUT_VALUE, type="number", value=1.0, className="num-input")),
            field("Seed", dcc.Input(id=ids.INPUT_SEED, type="number", value=0, step=1, className="num-input")),
            field("Label classes", dcc.Input(id=ids.LABEL_CLASSES, type="number", min=1, step=1,
                                             placeholder="auto", className="num-input")),
        ], className="inline"),
        html.Div([upload(ids.UPLOAD_NPY, ".npy", ".npy", limit), upload(ids.UPLOAD_IMAGE, "image",
                                                                         "image/*", limit)],
                 className="uploads"),
        html.Div(id=ids.INPUT_FILE_STATUS, className="muted"),
        section("Image preprocessing (caffe.io.Transformer)",
                html.Div([
                    field("Resize to (then centre-crop)", dcc.Input(id=ids.PRE_RESIZE, type="number", min=1,
                                                                    placeholder="blob size",
                                                                    className="num-input")),
                    dcc.Checklist([{"label": "centre crop", "value": "crop"}], ["crop"], id=ids.PRE_CROP,
                                  inline=True),
                    field("Channel swap", dcc.Input(id=ids.PRE_CHANNEL_SWAP, type="text", value="2,1,0",
                                                    className="short-input")),
                    field("Raw scale", dcc.Input(id=ids.PRE_RAW_SCALE, type="number", value=255,
                                                 className="num-input")),
                    field("Mean (per channel; empty: mean file)", dcc.Input(id=ids.PRE_MEAN, type="text",
                                                                            value="", className="short-input")),
                ], className="inline wrap")),
        html.Button("Apply inputs", id=ids.APPLY_INPUTS, n_clicks=0, className="btn primary"),
    ], className="inputs-tab")


def findings_tab():
    """The findings; while they are recomputed (after a step, a new net) the old ones stay
    shown, dimmed, under a "recomputing" note (dcc.Loading's overlay keeps its children)."""
    return dcc.Loading(findings_panels(), id=ids.FINDINGS_LOADING, target_components={ids.HEALTH_TABLE: "children"},
                       overlay_style={"visibility": "visible", "opacity": 0.55}, delay_show=150,
                       custom_spinner=html.Div("⟳ recomputing the findings…", className="recomputing",
                                               role="status"),
                       parent_className="findings-loading")


def findings_panels():
    return html.Div([
        section("Health checks (over the records)", html.Div(id=ids.HEALTH_TABLE)),
        section("Filtered-out layers (NetState rules)", html.Div(id=ids.FILTERED_TABLE)),
        section("Inserted splits", html.Div(id=ids.SPLITS_TABLE)),
        section("Shared params", html.Div(id=ids.SHARED_TABLE)),
        section("Memory by layer", dcc.Graph(id=ids.MEMORY_CHART, config=plot_config())),
        section("Time by layer (latest run of each)", dcc.Graph(id=ids.TIME_CHART, config=plot_config())),
        section("Init transcript and debug_info",
                dcc.Input(id=ids.TRANSCRIPT_FILTER, type="text", placeholder="filter lines…",
                          debounce=0.4, className="path-input"),
                html.Pre(id=ids.TRANSCRIPT, className="log")),
        section("debug_info (from the records)", html.Pre(id=ids.DEBUG_LINES, className="log")),
    ], className="findings")


def side_panel(limit):
    return html.Div(dcc.Tabs([
        dcc.Tab(details_tab(), label="Details", value="details"),
        dcc.Tab(inputs_tab(limit), label="Inputs", value="inputs"),
        dcc.Tab(findings_tab(), label="Findings", value="findings"),
        dcc.Tab(timeline_tab(), label="Timeline", value="timeline"),
        dcc.Tab(training_tab(), label="Training", value="training"),
        dcc.Tab(compare_tab(limit), label="Compare", value="compare"),
    ], id=ids.TABS, value="details"), className="side-col")


# ------------------------------------------------------------------ view data → components
def layer_details_children(d, filter_fig=None):
    parts = [html.H3(d["title"], className="details-title"), kv_table(d["summary"])]
    parts.append(section("Bottoms", table(d["bottoms"], ["name", "shape", "need_backward"])))
    parts.append(section("Tops", table(d["tops"], ["name", "shape", "in_place", "loss_weight"])))
    if d["params"]:
        parts.append(section("Params", table(d["params"], ["name", "shape", "count", "lr_mult", "decay_mult",
                                                           "learns", "sharing"])))
    if d["settings"]:
        parts.append(section("Settings (with defaults)", table(d["settings"], ["param", "setting", "value", "set"],
                                                               cls="grid settings")))
    parts.append(section("As written", html.Pre(d["written"], className="log written")))
    if filter_fig is not None:
        parts.append(section("Filters", dcc.Graph(figure=filter_fig, config=plot_config())))
    return html.Div(parts, className="layer-details")


def blob_details_children(d):
    parts = [html.H3(d["title"], className="details-title"), kv_table(d["summary"])]
    cols = []
    if d["data"]:
        cols.append(html.Div([html.H4("data"), kv_table(d["data"])], className="half"))
    if d["diff"]:
        cols.append(html.Div([html.H4("diff"), kv_table(d["diff"])], className="half"))
    if cols:
        parts.append(html.Div(cols, className="inline top"))
    return html.Div(parts, className="blob-details")


def ghost_details_children(d):
    return html.Div([html.H3(d["title"] + " (filtered out)", className="details-title"),
                     kv_table(d["summary"])], className="ghost-details")


def block_details_children(d):
    return html.Div([html.H3(d["title"], className="details-title"), kv_table(d["summary"]),
                     html.Div(d["hint"], className="muted"),
                     html.H4("layers"), html.Div(", ".join(d["layers"]), className="block-layers")],
                    className="block-details")


def chart(fig, cls=None):
    """A Plotly chart made on demand (the page loads Plotly only when one is shown)."""
    return dcc.Graph(figure=fig, config=plot_config(), className=cls)


def value_table(rows, index, full, note=None):
    """The values at ``index`` (rows of strings), or ``note`` when there are none to show
    (a scrubbed step that kept statistics only)."""
    if note is not None and not rows:
        return html.Div(note, className="muted value-note")
    head = html.Div("values at [%s] — showing %d×%d of %s" % (
        ", ".join(str(i) for i in index) + (", …" if index else "…"), len(rows), len(rows[0]) if rows else 0,
        "×".join(str(d) for d in full)), className="muted")
    return html.Div([head, cell_table(rows, cls="grid values")])


def empty_graph(message=""):
    return figures.empty_figure(message)

"""The debugger's tabs: Timeline (history, diff, pins, breakpoints), Training
(long actions with progress and cancel, live curves, update ratios) and
Compare (two runs side by side)."""
from dash import dcc, html

from inspector import ids
from inspector.views.figures import message_figure

from .common import button, field, section, upload

JOB_ACTIONS = (("solver", "solver iterations"), ("forward_backward", "Forward + Backward (full records)"),
               ("forward", "Forward (full records)"), ("backward", "Backward (full records)"))

COMPARE_KINDS = (("steps", "two timeline steps"), ("device", "CPU vs GPU (this net, these inputs)"),
                 ("weights", "these weights vs the fillers' (before loading weights)"),
                 ("file", "this run vs a Caffe log, a report (.json) or a snapshot (.caffemodel)"),
                 ("onnx", "this net vs an ONNX model (a port: each layer's own arithmetic)"),
                 ("torch", "this net vs a PyTorch module (.py + .pth: a port)"),
                 ("tensors", "this net vs a runtime's tensors (.npz dump: TensorRT, OpenVINO, NCNN, an NPU)"))


def _labelled(label, child, cls="aria-wrap"):
    """dcc components take no aria attributes: the label goes on a wrapper."""
    return html.Div(child, **{"aria-label": label}, className=cls)


def timeline_tab():
    return html.Div([
        section("Timeline",
                html.Div("Every action (forward range, backward range, forward + backward, solver iteration) "
                         "is a step. Scrub back to see the graph colours and the blob panels as they were.",
                         className="muted"),
                _labelled("Timeline step", dcc.Slider(id=ids.TIMELINE_SLIDER, min=0, max=0, step=1, value=0,
                                                      marks=None, disabled=True,
                                                      tooltip={"placement": "top", "always_visible": False})),
                html.Div([button(ids.TIMELINE_LIVE, "Live net", "show the live net again"),
                          html.Span(id=ids.TIMELINE_INFO, className="timeline-info")], className="inline"),
                html.Div(id=ids.TIMELINE_MEMORY, className="muted"),
                html.Div([button(ids.PIN_BLOB, "Pin selected blob", "keep the selected blob's full data and diff "
                                                                    "arrays in every later step (within the budget)"),
                          html.Span(id=ids.PIN_STATUS, className="muted")], className="inline"),
                html.Div(id=ids.TIMELINE_TABLE, className="timeline-table")),
        section("Diff two steps",
                html.Div([
                    field("A", _labelled("Diff step A", dcc.Dropdown(id=ids.TIMELINE_DIFF_A, clearable=False,
                                                                     className="step-dropdown"))),
                    field("B", _labelled("Diff step B", dcc.Dropdown(id=ids.TIMELINE_DIFF_B, clearable=False,
                                                                     className="step-dropdown"))),
                    button(ids.TIMELINE_DIFF_BUTTON, "Diff",
                           "which blobs changed from step A to step B, and by how much"),
                ], className="inline"),
                html.Div(id=ids.TIMELINE_DIFF)),
        breakpoints_section(),
    ], className="timeline-tab")


def breakpoints_section():
    return section(
        "Breakpoints",
        html.Div(["Conditions as on the command line (python -m engine debug --break-when): ",
                  html.Code("nonfinite"), ", ", html.Code("layer=NAME"), ", ", html.Code("BLOB.STAT > 1e3"), ", ",
                  html.Code("BLOB.diff.STAT < 1e-8"), " (STAT: mean_abs, max_abs, std, zero_fraction, update_ratio), ",
                  html.Code("loss.jump > 10"), ", ", html.Code("loss.nonfinite"),
                  ". Forward, Backward and solver runs stop on a hit."], className="muted"),
        html.Div([
            _labelled("Breakpoint condition", dcc.Input(id=ids.BREAK_TEXT, type="text", debounce=False,
                                                        placeholder="e.g. nonfinite or conv1.max_abs > 1e4",
                                                        className="path-input")),
            button(ids.BREAK_ADD, "Add", "add a breakpoint with this condition"),
        ], className="inline"),
        html.Div([
            field("Breakpoint", _labelled("Breakpoint to change", dcc.Dropdown(id=ids.BREAK_SELECT,
                                                                               className="small-dropdown wide"))),
            button(ids.BREAK_TOGGLE, "Enable / disable"),
            button(ids.BREAK_EDIT, "Replace condition", "give the chosen breakpoint the condition typed above"),
            button(ids.BREAK_REMOVE, "Remove"),
        ], className="inline"),
        html.Div(id=ids.BREAK_STATUS, className="muted"),
        html.Div(id=ids.BREAK_TABLE),
        html.Div(id=ids.BREAK_HIT, className="break-hit"))


def training_tab():
    return html.Div([
        section("Run (long actions: progress and cancel)",
                html.Div([
                    field("Action", _labelled("Long action", dcc.Dropdown(
                        [{"label": label, "value": key} for key, label in JOB_ACTIONS], "solver",
                        id=ids.JOB_ACTION, clearable=False, className="small-dropdown wide"))),
                    field("Iterations", dcc.Input(id=ids.JOB_ITERATIONS, type="number", min=1, step=1, value=20,
                                                  className="num-input")),
                    button(ids.JOB_RUN, "Run", "run in the background; the page stays usable", "btn primary"),
                    html.Button("Cancel", id=ids.JOB_CANCEL, n_clicks=0, className="btn danger", disabled=True,
                                title="stop after the current layer or iteration"),
                ], className="inline"),
                html.Div([html.Progress(id=ids.JOB_PROGRESS, value="0", max="1", className="job-progress",
                                        **{"aria-label": "Progress"}),
                          html.Span(id=ids.JOB_STATUS, className="job-status")], className="inline"),
                dcc.Store(id=ids.JOB_DONE, data=0)),
        section("Training curves", html.Div(id=ids.TRAIN_SUMMARY, className="muted"),
                dcc.Graph(id=ids.TRAIN_CURVES, config={"displaylogo": False}, className="train-graph")),
        section("Update ratios |Δw| / |w| per param",
                dcc.Graph(id=ids.TRAIN_RATIOS, config={"displaylogo": False}, className="train-graph")),
    ], className="training-tab")


def compare_tab(limit):
    return html.Div([
        section("Compare two runs",
                field("Compare", _labelled("Compare what", dcc.Dropdown(
                    [{"label": label, "value": key} for key, label in COMPARE_KINDS], "steps",
                    id=ids.COMPARE_KIND, clearable=False, className="small-dropdown wide"))),
                html.Div([
                    html.Div([
                        field("Step A", _labelled("Compare step A", dcc.Dropdown(id=ids.COMPARE_A,
                                                                                 className="step-dropdown"))),
                        field("Step B", _labelled("Compare step B", dcc.Dropdown(id=ids.COMPARE_B,
                                                                                 className="step-dropdown"))),
                    ], id=ids.COMPARE_STEPS, className="inline"),
                    field("rtol", dcc.Input(id=ids.COMPARE_RTOL, type="number", value=1e-3, min=0,
                                            className="num-input")),
                ], className="inline"),
                html.Div(field("Factory", _labelled("PyTorch factory: the class or function that makes the module",
                                                    dcc.Input(id=ids.COMPARE_FACTORY, type="text", debounce=False,
                                                              className="path-input",
                                                              placeholder="the class or function in the .py that "
                                                                          "makes the module (e.g. make)")),
                               title="the class or function of the uploaded .py that returns the nn.Module; empty: "
                                     "the file's only nn.Module class"),
                         id=ids.COMPARE_TORCH_BOX, style={"display": "none"}),
                _labelled("Compare with a file", upload(
                    ids.COMPARE_UPLOAD, "Caffe log / report .json / .caffemodel / port: .onnx, PyTorch .py + .pth, "
                    "tensors .npz", ".log,.txt,.json,.caffemodel,.onnx,.py,.pth,.pt,.npz", limit)),
                html.Div([button(ids.COMPARE_BUTTON, "Compare", cls="btn primary"),
                          button(ids.COMPARE_CLEAR, "Clear", "stop colouring the graph by the comparison")],
                         className="inline")),
        html.Div([
            html.Div(id=ids.COMPARE_WEIGHTS_TEXT),
            html.Div([
                _labelled("Load the net's .caffemodel",
                          upload(ids.COMPARE_LOAD_WEIGHTS, "Load the net's .caffemodel", ".caffemodel,.h5", limit),
                          cls="aria-wrap inline-upload"),
                button(ids.COMPARE_COPY_WEIGHTS, "Copy the port's weights into this net",
                       "give this net's layers the weights of the port's ops paired with them, then compare again"),
            ], className="inline"),
        ], id=ids.COMPARE_WEIGHTS_NOTICE, className="compare-weights-notice", style={"display": "none"}),
        html.Div(id=ids.COMPARE_SUMMARY, className="compare-summary"),
        dcc.Graph(id=ids.COMPARE_CHART, figure=message_figure("nothing compared yet"), config={"displaylogo": False}),
        html.Div(id=ids.COMPARE_TABLE),
    ], className="compare-tab")


def npy_controls():
    """The blob view's export row: data or diff as .npy (as it was, at a pinned step)."""
    return html.Div([
        field("Export", dcc.RadioItems(["data", "diff"], "data", id=ids.NPY_WHICH, inline=True)),
        button(ids.NPY_BUTTON, "Download .npy", "the selected blob's array as a NumPy .npy file"),
        dcc.Download(id=ids.NPY_DOWNLOAD),
    ], className="inline")

"""The stepping bar, the NaN alert, the graph toolbar and the graph."""
from dash import dcc, html

from inspector import ids

from ..view_models import COLOUR_MODES
from .common import button, field, plot_config

GRAPH_OPTIONS = (("fold_splits", "fold splits"), ("fold_inplace", "fold in-place"),
                 ("labels", "labels"), ("ghosts", "filtered-out"))
DEFAULT_OPTIONS = ["fold_splits", "labels", "ghosts"]


def stepping_bar(solver_ok):
    return html.Div([
        html.Div([
            field("Start", dcc.Dropdown(id=ids.START, clearable=False, className="layer-dropdown")),
            html.Button("← selected", id=ids.SET_START, n_clicks=0, className="btn small",
                        title="use the selected layer as start"),
            field("End", dcc.Dropdown(id=ids.END, clearable=False, className="layer-dropdown")),
            html.Button("← selected", id=ids.SET_END, n_clicks=0, className="btn small",
                        title="use the selected layer as end"),
            button(ids.FORWARD, "Forward range", "ForwardFromTo(start, end)", "btn primary"),
            button(ids.BACKWARD, "Backward range", "BackwardFromTo(end, start)", "btn primary"),
        ], className="inline range"),
        html.Div([
            button(ids.STEP_FORWARD, "Step ▶", "forward one layer (the step cursor)"),
            button(ids.STEP_BACKWARD, "◀ Step back", "backward one layer"),
            button(ids.RUN_TO, "Run to selected", "forward from the cursor to the selected layer"),
            button(ids.FORWARD_BACKWARD, "Forward + Backward", "the whole net, as Net::ForwardBackward"),
            button(ids.RESET, "Reset", "zero activations and gradients, clear the records"),
            html.Button("Solver step", id=ids.SOLVER_STEP, n_clicks=0, className="btn",
                        disabled=not solver_ok, title="one solver iteration (needs a solver prototxt)"),
            html.Div(id=ids.RUN_MESSAGE, className="run-message"),
        ], className="inline buttons"),
        html.Div([html.Span("⚠ ", className="warn-icon"), html.Span(id=ids.NAN_TEXT),
                  html.Button("Select that layer", id=ids.NAN_SELECT, n_clicks=0, className="btn small danger")],
                 id=ids.NAN_ALERT, className="nan-alert", style={"display": "none"}),
    ], className="stepping")


def graph_toolbar():
    return html.Div([
        field("Colour by", dcc.Dropdown([{"label": label, "value": key} for key, label in COLOUR_MODES],
                                        "category", id=ids.COLOUR_BY, clearable=False,
                                        className="small-dropdown wide")),
        field("Blobs", dcc.RadioItems([{"label": "as edges", "value": "edges"},
                                       {"label": "as nodes", "value": "nodes"}], "edges",
                                      id=ids.BLOB_MODE, inline=True)),
        dcc.Checklist([{"label": label, "value": key} for key, label in GRAPH_OPTIONS], DEFAULT_OPTIONS,
                      id=ids.GRAPH_OPTIONS, inline=True, className="options"),
        field("Image", dcc.RadioItems(["png", "svg"], "png", id=ids.IMAGE_FORMAT, inline=True),
              cls="field", title="format of the graph image the modebar's camera button saves"),
    ], className="inline toolbar")


def graph_panel(solver_ok):
    return html.Div([
        stepping_bar(solver_ok),
        graph_toolbar(),
        dcc.Graph(id=ids.GRAPH, className="net-graph", responsive=True, style={"height": "100%"},
                  config=plot_config(scrollZoom=True, toImageButtonOptions={"format": "png", "filename": "net"})),
    ], className="graph-col")

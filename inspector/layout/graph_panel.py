"""The graph's column: a layer range to run and the colouring, the NaN alert, search,
fitting, folding, view options and export, and the graph; the step buttons (in the header)."""
from html import escape as html_escape

import dash_cytoscape as cyto
from dash import dcc, html

from inspector import ids

from ..views.cyto import stylesheet
from ..views.view_models import COLOUR_MODES
from .common import busy, button, field

GRAPH_OPTIONS = (("fold_splits", "fold splits"), ("fold_inplace", "fold in-place"),
                 ("labels", "edge labels (blob shapes)"), ("ghosts", "filtered-out layers"))
DEFAULT_OPTIONS = ["fold_splits", "labels", "ghosts"]


SHORTCUTS = (("F8  or  c", "Continue: resume after the layer that stopped, to the next hit or the end"),
             ("F10  or  o", "Step over: the folded block at the step cursor as one step"),
             ("Ctrl+F10  or  r", "Run to cursor: run to the selected layer"),
             ("s", "Step ▶: forward one layer"),
             ("/", "search layers and blobs"),
             ("?", "this list (Esc closes it)"))


def _labelled_button(id_, label, aria, title, disabled=False):
    return html.Button(label, id=id_, n_clicks=0, className="btn", title=title, disabled=disabled,
                       **{"aria-label": aria})


def step_buttons(solver_ok):
    """Stepping by layers and whole passes (in the header's NetState row: what runs the net)."""
    return html.Div([
        _labelled_button(ids.CONTINUE, "Continue ▶▶", "Continue", "resume after the layer that stopped, to the "
                         "next breakpoint hit or the end (F8)", disabled=True),
        button(ids.STEP_FORWARD, "Step ▶", "forward one layer (the step cursor; s)"),
        _labelled_button(ids.STEP_OVER, "Step over", "Step over", "the folded block at the step cursor (or the "
                         "block selected) as one step (F10)"),
        button(ids.STEP_BACKWARD, "◀ Step back", "backward one layer"),
        _labelled_button(ids.RUN_TO, "Run to cursor", "Run to cursor", "run to the selected layer: forward from "
                         "the step cursor, or, stopped, on to it (Ctrl+F10)"),
        button(ids.FORWARD_BACKWARD, "Forward + Backward", "the whole net, as Net::ForwardBackward"),
        button(ids.RESET, "Reset", "zero activations and gradients, clear the records"),
        html.Button("Solver step", id=ids.SOLVER_STEP, n_clicks=0, className="btn",
                    disabled=not solver_ok, title="one solver iteration (needs a solver prototxt)"),
        _labelled_button(ids.HELP_BUTTON, "?", "Keyboard shortcuts", "keyboard shortcuts (?)"),
        dcc.Store(id=ids.JOB_RESUME),
    ], className="inline buttons")


def shortcuts_overlay_html():
    """The keyboard shortcuts, listed: static markup written into the page itself (the app's
    index page, beside Dash's root), not a Dash component tree: nothing in it changes, no
    callback reads or writes it, and React rendered its 32 components on every page open
    before the graph was drawn.  assets/shortcuts.js opens it with ? or the button."""
    esc = html_escape
    rows = "".join("<tr><td><kbd>%s</kbd></td><td>%s</td></tr>" % (esc(k), esc(v)) for k, v in SHORTCUTS)
    return (
        '<div id="%s" class="shortcuts-overlay" style="display: none;">'
        '<div class="shortcuts-box" role="dialog" aria-label="Keyboard shortcuts list">'
        '<div class="shortcuts-head"><b>Keyboard shortcuts</b>'
        '<button class="dismiss shortcuts-close" title="close (Esc)" aria-label="Close keyboard shortcuts">'
        '&times;</button></div>'
        '<table class="grid shortcuts"><tbody>%s</tbody></table>'
        '<div class="muted">The letter keys work while no text box has the focus; F8 and F10 work '
        'everywhere.</div></div></div>') % (esc(ids.HELP_OVERLAY), rows)


def stepping_bar():
    """A layer range to run, and the NaN alert."""
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
        html.Div([html.Span("⚠ ", className="warn-icon"), html.Span(id=ids.NAN_TEXT),
                  html.Button("Select that layer", id=ids.NAN_SELECT, n_clicks=0, className="btn small danger")],
                 id=ids.NAN_ALERT, className="nan-alert", style={"display": "none"}),
    ], className="stepping")


def search_box():
    """The search input in a labelled wrapper, and the list of matches under it."""
    return html.Div([
        html.Div(dcc.Input(id=ids.SEARCH, type="search", placeholder="Search layers, blobs  ( / )",
                           debounce=False, autoComplete="off", className="search-input"),
                 id=ids.SEARCH_BOX, className="search-box", role="search",
                 **{"aria-label": "Search layers and blobs"}),
        html.Ul(id=ids.SEARCH_RESULTS, className="search-results", role="listbox"),
    ], className="search")


def menu(id_, label, title, *children):
    """A small drop-down panel under a button (closes on a click elsewhere: assets/graph.js)."""
    return html.Details([html.Summary(label, className="btn small", title=title),
                         html.Div(list(children), className="menu-body")], id=id_, className="menu")


def navigation_bar():
    """Search, fitting, folding, the colouring, and the drawing's options and export (in
    menus: the graph keeps the height)."""
    return html.Div([
        search_box(),
        button(ids.FIT_NET, "Fit net", "show the whole net", "btn small"),
        button(ids.FIT_SELECTION, "Fit selection", "centre and zoom on the selected layer, blob or block",
               "btn small"),
        button(ids.EXPAND, "Expand", "open the selected block (or the folded block around the selection)",
               "btn small"),
        button(ids.COLLAPSE, "Collapse", "fold the selected block (or the block around the selected layer)",
               "btn small"),
        button(ids.EXPAND_ALL, "Expand all", "open every block", "btn small"),
        button(ids.COLLAPSE_ALL, "Collapse all", "fold every block", "btn small"),
        field("Colour", dcc.Dropdown([{"label": label, "value": key} for key, label in COLOUR_MODES],
                                     "category", id=ids.COLOUR_BY, clearable=False, className="colour-dropdown"),
              cls="field colour-field", title="colour the layers (and folded blocks) by"),
        menu(ids.VIEW_MENU, "View ▾", "blobs as edges or nodes, splits, in-place layers, edge labels, "
             "filtered-out layers",
             field("Blobs", dcc.RadioItems([{"label": "as edges", "value": "edges"},
                                            {"label": "as nodes", "value": "nodes"}], "edges",
                                           id=ids.BLOB_MODE, inline=True)),
             dcc.Checklist([{"label": label, "value": key} for key, label in GRAPH_OPTIONS], DEFAULT_OPTIONS,
                           id=ids.GRAPH_OPTIONS, className="options")),
        menu(ids.SAVE_MENU, "Save ▾", "save the whole graph as an image",
             field("Image", dcc.RadioItems([{"label": "PNG", "value": "png"}, {"label": "SVG", "value": "svg"}],
                                           "png", id=ids.IMAGE_FORMAT, inline=True),
                   title="format of the graph image Save image writes (and of the charts' camera button)"),
             button(ids.IMAGE_SAVE, "Save image", "save the whole graph as PNG or SVG", "btn small"),
             dcc.Download(id=ids.GRAPH_DOWNLOAD),
             button(ids.ONNX_SAVE, "Save ONNX", "the loaded net (its NetState, its weights) as an ONNX model "
                    "with Caffe's exact semantics (python -m engine export-onnx)", "btn small"),
             html.Div(id=ids.ONNX_STATUS, className="muted onnx-status", role="status"),
             dcc.Download(id=ids.ONNX_DOWNLOAD)),
    ], className="inline navbar")


def graph_head():
    """The graph's legend and caption, in a row of their own above it (over the graph, they
    covered its top: the first frame's title, the first nodes)."""
    return html.Div([html.Div(id=ids.GRAPH_LEGEND, className="graph-legend"), busy(ids.GRAPH_BUSY, "drawing…"),
                     html.Div(id=ids.GRAPH_TITLE, className="graph-title")], className="graph-head")


def graph_canvas():
    """The graph (dash-cytoscape: preset positions from our layout, pan/zoom and
    hit testing in the browser), the overview and the hover box."""
    return html.Div([
        cyto.Cytoscape(id=ids.GRAPH, className="net-graph", elements=[], stylesheet=stylesheet(),
                       layout={"name": "preset", "fit": False, "animate": False},
                       style={"width": "100%", "height": "100%"}, minZoom=0.005, maxZoom=3.0,
                       wheelSensitivity=0.4, boxSelectionEnabled=False, autoungrabify=True,
                       userPanningEnabled=True, userZoomingEnabled=True),
        html.Canvas(id=ids.MINIMAP, className="minimap", width=170, height=230, title="overview: click to go there"),
        html.Button("\u00d7", id=ids.MINIMAP_TOGGLE, className="minimap-toggle", title="hide the overview",
                    n_clicks=0, **{"aria-label": "Hide overview", "aria-pressed": "true"}),
        html.Div(className="graph-hover", id="graph-hover"),
    ], id=ids.GRAPH_HOLDER, className="graph-holder", role="application", **{"aria-label": "Network graph"})


def graph_panel():
    return html.Div([
        stepping_bar(),
        navigation_bar(),
        graph_head(),
        graph_canvas(),
        dcc.Store(id=ids.SEARCH_PICK), dcc.Store(id=ids.FOCUS), dcc.Store(id=ids.BLOCK_TOGGLE),
        dcc.Store(id=ids.GRAPH_META), dcc.Store(id=ids.GRAPH_CLIENT),
    ], className="graph-col")

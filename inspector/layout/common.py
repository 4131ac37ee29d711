"""Small component builders shared by the panels (view data → Dash components)."""
import numbers
from html import escape

from dash import dcc, html

# every Plotly figure's config: a local tool offers no cloud sharing ("Share chart...",
# plotly.js 3's default) nor "Edit in Chart Studio" (plotly.js 2), and no Plotly logo
PLOT_CONFIG = {"displaylogo": False, "showSendToCloud": False, "showEditInChartStudio": False}


def plot_config(**extra):
    """A dcc.Graph config: PLOT_CONFIG and ``extra``."""
    return {**PLOT_CONFIG, **extra}


def apply_plot_config(node):
    """Give every dcc.Graph under ``node`` PLOT_CONFIG (over its own config);
    returns ``node``."""
    for c in components(node):
        if isinstance(c, dcc.Graph):
            c.config = {**(getattr(c, "config", None) or {}), **PLOT_CONFIG}
    return node


def components(node):
    """Every component under ``node`` (itself first), depth first."""
    yield node
    children = getattr(node, "children", None)
    for c in children if isinstance(children, (list, tuple)) else [children]:
        if c is not None and hasattr(c, "to_plotly_json"):
            yield from components(c)


def with_props(node, props):
    """Set {(id, prop): value} on the components under ``node``; returns ``node``.
    Raises KeyError for an id the page does not have (a renamed component)."""
    by_id = {getattr(c, "id", None): c for c in components(node)}
    missing = [id_ for id_, _prop in props if id_ not in by_id]
    if missing:
        raise KeyError("no component %s in the page" % ", ".join(map(repr, missing)))
    for (id_, prop), value in props.items():
        setattr(by_id[id_], prop, value)
    return node


def prop_of(node, id_, prop):
    """The value of ``prop`` of the component ``id_`` under ``node``."""
    for c in components(node):
        if getattr(c, "id", None) == id_:
            return getattr(c, prop, None)
    raise KeyError(id_)


def kv_table(rows, cls="kv"):
    """A two-column table of (key, value) pairs."""
    return html.Table([html.Tbody([html.Tr([html.Th(k), html.Td(v)]) for k, v in rows])], className=cls)


# A table of more cells than this is sent as one component (its HTML in a dcc.Markdown) rather
# than a component per cell: Dash's renderer dispatches once per newly rendered component to
# every mounted one, so a table of html cells costs (cells x the page's components): 200 rows
# of 6 cells beside 1,000 components took 17.6 s to show in Chromium here, as one component 0.6 s.
BIG_TABLE_CELLS = 120


def table(rows, columns=None, cls="grid", empty="none"):
    """A table of dict rows (columns: their keys, in order)."""
    if not rows:
        return html.Div(empty, className="muted")
    columns = columns or list(rows[0].keys())
    return cell_table([[r.get(c, "") for c in columns] for r in rows], columns, cls)


def cell_table(cells, columns=None, cls="grid"):
    """A table of rows of cell values, with a header row of ``columns`` (None: no header):
    html components, or one component when it is big and its cells are plain values."""
    cells = [[_cell(v) for v in row] for row in cells]
    n = sum(len(row) for row in cells)
    if n > BIG_TABLE_CELLS and all(_plain(v) for row in cells for v in row):
        return _html_table(columns, cells, cls)
    body = html.Tbody([html.Tr([html.Td(v) for v in row]) for row in cells])
    if columns is None:
        return html.Table(body, className=cls)
    return html.Table([html.Thead(html.Tr([html.Th(c) for c in columns])), body], className=cls)


def _plain(v):
    return v is None or isinstance(v, (str, numbers.Real))     # (NumPy's scalars too)


def _html_table(columns, cells, cls):
    """The same table as one dcc.Markdown component holding its HTML (escaped text, on one
    line: no blank line ends the HTML block)."""
    def text(v):
        return escape("" if v is None else str(v)).replace("\n", "&#10;")
    head = "" if columns is None else "<thead><tr>%s</tr></thead>" % "".join("<th>%s</th>" % text(c) for c in columns)
    body = "".join("<tr>%s</tr>" % "".join("<td>%s</td>" % text(v) for v in row) for row in cells)
    return dcc.Markdown("<table class=\"%s\">%s<tbody>%s</tbody></table>" % (escape(cls), head, body),
                        dangerously_allow_html=True, className="big-table")


def _cell(v):
    if isinstance(v, bool):
        return "yes" if v else "no"
    return v


def section(title, *children, cls="section"):
    return html.Div([html.H4(title)] + list(children), className=cls)


def button(id_, label, title=None, cls="btn"):
    return html.Button(label, id=id_, n_clicks=0, title=title or label, className=cls)


def upload(id_, label, accept=None, max_size=-1):
    return dcc.Upload(html.Div(label, className="upload-label"), id=id_, accept=accept,
                      max_size=max_size, multiple=False, className="upload")


def field(label, control, cls="field", title=None):
    """A control with its label on the left."""
    return html.Label([html.Span(label, className="field-label"), control], className=cls, title=title)


def busy(id_, text):
    """A progress note shown while a callback runs on the server (Dash's ``running``), made
    visible after a moment (assets/inspector.css: a quick answer does not flash it)."""
    return html.Span("⟳ " + text, id=id_, className="busy", role="status", style={"display": "none"})

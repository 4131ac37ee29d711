"""View data → Plotly figures for the debugger's tabs (training curves,
update ratios, comparisons).  Pure: no Dash, no engine, no state."""
import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .figures import FONT, empty_figure

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")


def _finite(xs, ys):
    out_x, out_y = [], []
    for x, y in zip(xs, ys):
        if y is not None and isinstance(y, (int, float)) and math.isfinite(y):
            out_x.append(x)
            out_y.append(y)
    return out_x, out_y


def training_figure(curves):
    """``curves``: {"loss": (xs, ys), "smoothed": (xs, ys), "lr": (xs, ys),
    "outputs": {name: (xs, ys)}, "test": {name: (xs, ys)}} → three stacked
    panels: loss (raw and smoothed, train outputs that are losses), scores
    (train outputs and test scores), learning rate."""
    if not curves or not curves.get("loss", ([], []))[0]:
        return empty_figure("no solver iterations yet: run some (Run, or Solver step)")
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06, row_heights=[0.45, 0.35, 0.2],
                        subplot_titles=("loss", "outputs and test scores", "learning rate"))
    xs, ys = _finite(*curves["loss"])
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="loss", line=dict(color="#bab0ac", width=1)), 1, 1)
    xs, ys = _finite(*curves.get("smoothed", ([], [])))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="smoothed loss",
                             line=dict(color="#4e79a7", width=2)), 1, 1)
    k = 1
    for name, (x, y) in (curves.get("outputs") or {}).items():
        x, y = _finite(x, y)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name="train " + name,
                                 line=dict(color=PALETTE[k % len(PALETTE)], width=1.5)), 2, 1)
        k += 1
    for name, (x, y) in (curves.get("test") or {}).items():
        x, y = _finite(x, y)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name="test " + name,
                                 line=dict(color=PALETTE[k % len(PALETTE)], width=2, dash="dot")), 2, 1)
        k += 1
    xs, ys = _finite(*curves.get("lr", ([], [])))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="lr", line=dict(color="#59a14f", width=1.5)), 3, 1)
    fig.update_xaxes(title_text="iteration", row=3, col=1)
    fig.update_layout(height=520, margin=dict(l=50, r=10, t=30, b=40), font=FONT, plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.12), uirevision="training")
    for r in (1, 2, 3):
        fig.update_yaxes(gridcolor="#eee", row=r, col=1)
        fig.update_xaxes(gridcolor="#eee", row=r, col=1)
    return fig


def ratios_figure(ratios, top=12):
    """``ratios``: {"layer/param": [(iteration, ratio)]} → one line per param
    (the ``top`` with the largest latest ratio), log scale; Caffe's rule of
    thumb (about 1e-3) marked."""
    if not ratios:
        return empty_figure("no updates recorded yet (run solver iterations)")
    latest = sorted(ratios.items(), key=lambda kv: -(kv[1][-1][1] if kv[1] and math.isfinite(kv[1][-1][1]) else 0))
    fig = go.Figure()
    for k, (name, pts) in enumerate(latest[:top]):
        xs, ys = _finite([p[0] for p in pts], [p[1] for p in pts])
        ys = [max(y, 1e-12) for y in ys]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name,
                                 line=dict(color=PALETTE[k % len(PALETTE)], width=1.5)))
    fig.add_hline(y=1e-3, line=dict(color="#999", dash="dash", width=1), annotation_text="1e-3",
                  annotation_position="top left")
    fig.update_layout(height=320, margin=dict(l=50, r=10, t=20, b=40), font=FONT, plot_bgcolor="white",
                      yaxis=dict(type="log", title="|Δw|₂ / |w|₂", gridcolor="#eee"),
                      xaxis=dict(title="iteration", gridcolor="#eee"),
                      legend=dict(font=dict(size=9)), uirevision="ratios")
    return fig


TOOLBAR_PX = 40          # room for plotly's toolbar (its modebar, 24 px) at the top of a figure
TITLE_CHARS = 64         # the characters of a chart title's line that fit a side panel's chart


def title_lines(title, width=TITLE_CHARS):
    """A chart title in lines of at most ``width`` characters, broken between words (a long
    file name alone: cut in its middle, "…", so both its ends show)."""
    lines, line = [], ""
    for word in str(title or "").split(" "):
        if len(word) > width:
            word = word[:width // 2 - 1] + "…" + word[-(width // 2 - 1):]
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = (line + " " + word) if line else word
    return lines + [line] if line else lines


def compare_figure(rows, rtol, title=""):
    """``rows``: [(layer label, max rel, ok)] in step order → bars of the
    largest relative difference per layer record (log scale), the tolerance
    marked, the first layer out of tolerance in red."""
    if not rows:
        return empty_figure("nothing compared yet")
    labels = [r[0] for r in rows]
    vals = [min(max(r[1], 1e-12), 1e12) if r[1] == r[1] else 1e12 for r in rows]
    first_bad = next((k for k, r in enumerate(rows) if not r[2]), None)
    colours = ["#d62728" if k == first_bad else ("#f28e2b" if not r[2] else "#59a14f")
               for k, r in enumerate(rows)]
    fig = go.Figure(go.Bar(x=list(range(len(rows))), y=vals, marker_color=colours, customdata=labels,
                           hovertemplate="%{customdata}<br>max rel %{y:.3g}<extra></extra>"))
    fig.add_hline(y=max(rtol, 1e-12), line=dict(color="#333", dash="dash", width=1),
                  annotation_text="rtol %g" % rtol, annotation_position="top left")
    ticks = list(range(0, len(rows), max(1, len(rows) // 20)))
    lines = title_lines(title)
    fig.update_layout(height=300 + 15 * len(lines), margin=dict(l=50, r=10, t=TOOLBAR_PX + 15 * len(lines) + 6, b=80),
                      font=FONT, plot_bgcolor="white",
                      # the title below plotly's toolbar (the top TOOLBAR_PX of the figure), never under it
                      title=dict(text="<br>".join(lines), font=dict(size=12), x=0, xref="container", xanchor="left",
                                 y=1, yref="container", yanchor="top", pad=dict(l=8, t=TOOLBAR_PX)),
                      yaxis=dict(type="log", title="max relative difference", gridcolor="#eee"),
                      xaxis=dict(tickvals=ticks, ticktext=[labels[t] for t in ticks], tickangle=-45))
    return fig

"""View data → Plotly figures.  Pure functions: no Dash, no engine, no state.

- :func:`graph_figure`: the net's DAG from a :class:`view_models.GraphView`
  (one trace per kind of thing drawn; the selection ring is the last trace so a
  selection change can be patched in with :func:`selection_trace`).
- :func:`histogram_figure`, :func:`mosaic_figure` (feature maps, filters),
  :func:`rgb_mosaic_figure`, :func:`memory_figure`, :func:`time_figure`,
  :func:`empty_figure`.
"""
import math

import numpy as np
import plotly.graph_objects as go

from .run_state import FRESH, NA, NOT_RUN, STALE
from .view_models import _SCALE

FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=11)
EDGE_STYLE = {
    ("data", FRESH): dict(color="#4d4d4d", width=1.6, dash="solid"),
    ("data", STALE): dict(color="#ff7f0e", width=1.6, dash="dot"),
    ("data", NOT_RUN): dict(color="#a8a8a8", width=1.2, dash="solid"),
    ("data", NA): dict(color="#a8a8a8", width=1.2, dash="solid"),
    ("ghost", NA): dict(color="#c8c8c8", width=1.0, dash="dash"),
}
EDGE_NAMES = {FRESH: "blob: fresh", STALE: "blob: stale", NOT_RUN: "blob: not computed", NA: "blob"}
NODE_STYLE = {
    "layer": dict(symbol="square", size=15),
    "ghost": dict(symbol="square", size=13),
    "blob": dict(symbol="circle", size=8),
    "output": dict(symbol="diamond", size=10),
}
VISIBLE_RANKS = 18          # ranks shown at first on tall nets (pan / autoscale for the rest)
VISIBLE_WIDTH = 170         # x units (about label characters) shown at first


def empty_figure(message=""):
    fig = go.Figure()
    fig.update_layout(
        xaxis=dict(visible=False), yaxis=dict(visible=False), plot_bgcolor="white",
        paper_bgcolor="white", margin=dict(l=10, r=10, t=10, b=10), font=FONT,
        annotations=[dict(text=message, x=0.5, y=0.5, xref="paper", yref="paper",
                          showarrow=False, font=dict(size=13, color="#777"))] if message else [])
    return fig


def _polyline_xy(edges):
    xs, ys = [], []
    for e in edges:
        for x, y in e.points:
            xs.append(x)
            ys.append(y)
        xs.append(None)
        ys.append(None)
    return xs, ys


def _midpoint(points):
    if len(points) == 2:
        (x0, y0), (x1, y1) = points
        return (x0 + x1) / 2.0, (y0 + y1) / 2.0
    return points[len(points) // 2]


def _scatter(**kw):
    kw["type"] = "scatter"
    return kw


def selection_trace(view):
    """The ring drawn around the selected nodes (the figure's last trace), as a dict."""
    sel = [n for n in view.nodes if n.selected]
    blob_nodes = any(n.kind == "blob" for n in view.nodes)      # then blobs are ringed as nodes
    sel_edges = [] if blob_nodes else [e for e in view.edges if e.selected and e.kind == "data"]
    xs = [n.x for n in sel] + [_midpoint(e.points)[0] for e in sel_edges]
    ys = [n.y for n in sel] + [_midpoint(e.points)[1] for e in sel_edges]
    return _scatter(x=xs, y=ys, mode="markers", hoverinfo="skip", showlegend=False, name="selection",
                    marker=dict(symbol="square-open", size=26, color="#d62728",
                                line=dict(width=3, color="#d62728")))


def graph_figure(view, visible_ranks=VISIBLE_RANKS, visible_width=VISIBLE_WIDTH):
    """The DAG as a Plotly figure dict (``{"data", "layout"}``, valid for
    ``go.Figure``; built as plain dicts because validating hundreds of nodes
    costs more than the rest of a recolour): edges grouped by state, edge
    labels, nodes by kind, legend or colour bar, and the selection ring last."""
    traces = []
    groups = {}
    for e in view.edges:
        groups.setdefault((e.kind, e.state if e.kind == "data" else NA), []).append(e)
    for (kind, state), es in sorted(groups.items()):
        xs, ys = _polyline_xy(es)
        style = EDGE_STYLE.get((kind, state), EDGE_STYLE[("data", NA)])
        traces.append(_scatter(
            x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False, line=dict(style),
            name=EDGE_NAMES.get(state, kind) if kind == "data" else "filtered-out path"))
    has_blob_nodes = any(n.kind == "blob" for n in view.nodes)
    data_edges = [e for e in view.edges if e.kind == "data"]
    if data_edges and not has_blob_nodes:
        mids = [_midpoint(e.points) for e in data_edges]
        traces.append(_scatter(
            x=[m[0] for m in mids], y=[m[1] for m in mids],
            mode="markers+text" if view.labels else "markers",
            text=[e.label for e in data_edges], textposition="middle right",
            textfont=dict(size=9, color="#666"),
            marker=dict(size=7, color="rgba(255,255,255,0.9)", line=dict(width=1, color="#999"),
                        symbol="circle"),
            hovertext=[e.hover for e in data_edges], hoverinfo="text",
            customdata=[["blob", e.blob] for e in data_edges], showlegend=False, name="blobs"))
    for kind in ("ghost", "blob", "output", "layer"):
        ns = [n for n in view.nodes if n.kind == kind]
        if not ns:
            continue
        st = NODE_STYLE[kind]
        traces.append(_scatter(
            x=[n.x for n in ns], y=[n.y for n in ns],
            mode="markers+text" if view.labels or kind == "layer" else "markers",
            text=[n.label for n in ns], textposition="middle right",
            textfont=dict(size=10 if kind == "layer" else 9,
                          color="#999" if kind == "ghost" else "#222"),
            marker=dict(symbol=st["symbol"], size=st["size"], color=[n.fill for n in ns],
                        opacity=0.55 if kind == "ghost" else 1.0,
                        line=dict(color=[n.line for n in ns], width=[n.line_width for n in ns])),
            hovertext=[n.hover for n in ns], hoverinfo="text",
            customdata=[[("layer" if kind == "layer" else "ghost" if kind == "ghost" else "blob"), n.name]
                        for n in ns],
            showlegend=False, name=kind + "s"))
    # legend entries / colour bar
    for label, colour in view.legend:
        traces.append(_scatter(x=[None], y=[None], mode="markers", name=label, showlegend=True,
                               marker=dict(symbol="square", size=12, color=colour), hoverinfo="skip"))
    if view.scale is not None:
        sc = view.scale
        lo, hi = (math.log10(max(sc.lo, 1e-30)), math.log10(max(sc.hi, 1e-30))) if sc.log else (sc.lo, sc.hi)
        if hi <= lo:
            hi = lo + 1e-9
        traces.append(_scatter(
            x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip", name="colour scale",
            marker=dict(colorscale=[[i / (len(_SCALE) - 1), c] for i, c in enumerate(_SCALE)],
                        cmin=lo, cmax=hi, color=[lo], showscale=True,
                        colorbar=dict(title=dict(text=("log10 " if sc.log else "") + sc.title, side="right"),
                                      thickness=12, len=0.5, y=0.75))))
    traces.append(selection_trace(view))
    xs = [n.x for n in view.nodes] or [0.0]
    x0 = min(xs) - 3.0
    x1 = x0 + min(max(view.width + 6.0, 60.0), visible_width)
    ranks = max(view.height, 1)
    if any(n.kind == "blob" for n in view.nodes):
        visible_ranks = int(visible_ranks * 1.5)
    shown = min(ranks, visible_ranks)
    layout = dict(
        font=FONT, plot_bgcolor="white", paper_bgcolor="white",
        margin=dict(l=8, r=8, t=52, b=8), hovermode="closest", clickmode="event",
        dragmode="pan", uirevision=view.uirevision,
        title=dict(text=view.title, x=0.01, y=0.995, font=dict(size=13)),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0.0, bgcolor="rgba(255,255,255,0.8)",
                    font=dict(size=10), itemclick=False, itemdoubleclick=False),
        xaxis=dict(visible=False, range=[x0, x1], zeroline=False),
        yaxis=dict(visible=False, range=[-(shown - 1) - 0.6, 0.6], zeroline=False),
    )
    return {"data": traces, "layout": layout}


# ------------------------------------------------------------------ blob views
def histogram_figure(hist, lo, hi, title="", colour="#4e79a7"):
    """Bars of a histogram (``hist`` counts over [lo, hi])."""
    n = len(hist)
    if n == 0:
        return empty_figure("no values")
    w = (hi - lo) / n if hi > lo else 1.0
    centres = [lo + (i + 0.5) * w for i in range(n)]
    fig = go.Figure(go.Bar(x=centres, y=list(hist), width=[w] * n, marker_color=colour,
                           hovertemplate="%{x:.4g}: %{y}<extra></extra>"))
    fig.update_layout(font=FONT, title=dict(text=title, font=dict(size=12)), bargap=0.02,
                      margin=dict(l=40, r=10, t=30, b=30), height=220, plot_bgcolor="white",
                      xaxis=dict(showgrid=False), yaxis=dict(gridcolor="#eee"))
    return fig


def mosaic_figure(mosaic, title="", labels=None, diverging=False):
    """One heatmap of a tiled mosaic (NaN between tiles).  ``labels``:
    [(x, y, text)] tile captions in mosaic coordinates."""
    z = np.asarray(mosaic, dtype=np.float64)
    if z.size == 0:
        return empty_figure("nothing to show")
    finite = z[np.isfinite(z)]
    kw = {}
    if diverging and finite.size:
        m = float(np.max(np.abs(finite))) or 1.0
        kw = dict(zmin=-m, zmax=m, colorscale="RdBu", reversescale=True)
    else:
        kw = dict(colorscale="Viridis")
    fig = go.Figure(go.Heatmap(z=z, hovertemplate="(%{y}, %{x}): %{z:.4g}<extra></extra>",
                               colorbar=dict(thickness=10), **kw))
    ann = [dict(x=x, y=y, text=t, showarrow=False, font=dict(size=9, color="#333"),
                xanchor="left", yanchor="bottom") for x, y, t in (labels or [])]
    h = max(240, min(720, int(z.shape[0] * 520 / max(z.shape[1], 1)) + 60))
    fig.update_layout(font=FONT, title=dict(text=title, font=dict(size=12)), annotations=ann,
                      margin=dict(l=10, r=10, t=30, b=10), height=h, plot_bgcolor="white",
                      xaxis=dict(visible=False, constrain="domain"),
                      yaxis=dict(visible=False, autorange="reversed", scaleanchor="x"))
    return fig


def rgb_mosaic_figure(rgb, title=""):
    """An RGB mosaic (H x W x 3 floats in [0, 1]; NaN shown white)."""
    a = np.asarray(rgb, dtype=np.float64)
    a = np.where(np.isfinite(a), a, 1.0)
    img = (np.clip(a, 0, 1) * 255).astype(np.uint8)
    fig = go.Figure(go.Image(z=img))
    h = max(240, min(720, int(img.shape[0] * 520 / max(img.shape[1], 1)) + 60))
    fig.update_layout(font=FONT, title=dict(text=title, font=dict(size=12)), height=h,
                      margin=dict(l=10, r=10, t=30, b=10),
                      xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig


# ------------------------------------------------------------------ findings charts
def memory_figure(rows, title=""):
    """Stacked bars: ``rows`` = [(layer, activations, gradients, params)] in bytes."""
    if not rows:
        return empty_figure("no layers")
    names = [r[0] for r in rows]
    parts = (("activations (data)", 1, "#4e79a7"), ("gradients (diff)", 2, "#a0cbe8"),
             ("params (data + diff)", 3, "#f28e2b"))
    fig = go.Figure([go.Bar(x=names, y=[r[k] / 2 ** 20 for r in rows], name=label, marker_color=c,
                            hovertemplate="%{x}: %{y:.3f} MiB<extra>" + label + "</extra>")
                     for label, k, c in parts])
    fig.update_layout(barmode="stack", font=FONT, title=dict(text=title, font=dict(size=12)),
                      height=300, margin=dict(l=50, r=10, t=30 if title else 10, b=80), plot_bgcolor="white",
                      yaxis=dict(title="MiB", gridcolor="#eee"), xaxis=dict(tickangle=-60),
                      legend=dict(orientation="h", x=0.0, y=1.0, yanchor="bottom"))
    return fig


def time_figure(rows, title=""):
    """Stacked bars: ``rows`` = [(layer, forward ms, backward ms)]."""
    rows = [r for r in rows if r[1] is not None or r[2] is not None]
    if not rows:
        return empty_figure("no timings yet: run forward or backward")
    names = [r[0] for r in rows]
    fig = go.Figure([
        go.Bar(x=names, y=[r[1] or 0.0 for r in rows], name="forward", marker_color="#59a14f",
               hovertemplate="%{x}: %{y:.3f} ms<extra>forward</extra>"),
        go.Bar(x=names, y=[r[2] or 0.0 for r in rows], name="backward", marker_color="#e15759",
               hovertemplate="%{x}: %{y:.3f} ms<extra>backward</extra>")])
    fig.update_layout(barmode="stack", font=FONT, title=dict(text=title, font=dict(size=12)),
                      height=300, margin=dict(l=50, r=10, t=30 if title else 10, b=80), plot_bgcolor="white",
                      yaxis=dict(title="ms", gridcolor="#eee"), xaxis=dict(tickangle=-60),
                      legend=dict(orientation="h", x=0.0, y=1.0, yanchor="bottom"))
    return fig

"""View data → Plotly figures (the charts; the net's graph is drawn by
dash-cytoscape, see :mod:`inspector.views.cyto`).  Pure functions: no Dash, no
engine, no state.

- :func:`histogram_figure`, :func:`mosaic_figure` (feature maps, filters),
  :func:`rgb_mosaic_figure`, :func:`memory_figure`, :func:`time_figure`,
  :func:`empty_figure`, :func:`message_figure` (figure dicts where no plotly object is needed).
"""
import numpy as np
import plotly.graph_objects as go

FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=11)


def empty_figure(message=""):
    fig = go.Figure()
    fig.update_layout(
        xaxis=dict(visible=False), yaxis=dict(visible=False), plot_bgcolor="white",
        paper_bgcolor="white", margin=dict(l=10, r=10, t=10, b=10), font=FONT,
        annotations=[dict(text=message, x=0.5, y=0.5, xref="paper", yref="paper",
                          showarrow=False, font=dict(size=13, color="#777"))] if message else [])
    return fig


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
# Plain figure dicts, not plotly.graph_objects: building and validating go.Bar traces (and
# loading plotly's validators the first time) held the Findings tab up for seconds.
def _bars_figure(names, series, unit):
    """Stacked bars as a figure dict: ``series`` = [(label, values, colour)]."""
    data = [{"type": "bar", "x": list(names), "y": [float(v) for v in values], "name": label,
             "marker": {"color": colour}, "hovertemplate": "%{x}: %{y:.3f} " + unit + "<extra>" + label + "</extra>"}
            for label, values, colour in series]
    layout = {"barmode": "stack", "font": FONT, "height": 300, "margin": {"l": 50, "r": 10, "t": 10, "b": 80},
              "plot_bgcolor": "white", "yaxis": {"title": {"text": unit}, "gridcolor": "#eee"},
              "xaxis": {"tickangle": -60}, "legend": {"orientation": "h", "x": 0.0, "y": 1.0, "yanchor": "bottom"}}
    return {"data": data, "layout": layout}


def message_figure(message):
    """An empty chart saying ``message`` (a figure dict: no plotly template sent with it)."""
    return {"data": [], "layout": {
        "xaxis": {"visible": False}, "yaxis": {"visible": False}, "plot_bgcolor": "white", "paper_bgcolor": "white",
        "margin": {"l": 10, "r": 10, "t": 10, "b": 10}, "font": FONT, "height": 120,
        "annotations": [{"text": message, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper", "showarrow": False,
                         "font": {"size": 13, "color": "#777"}}]}}


def memory_figure(rows, title=""):
    """Stacked bars: ``rows`` = [(layer, activations, gradients, params)] in bytes (a figure dict)."""
    if not rows:
        return message_figure("no layers")
    parts = (("activations (data)", 1, "#4e79a7"), ("gradients (diff)", 2, "#a0cbe8"),
             ("params (data + diff)", 3, "#f28e2b"))
    fig = _bars_figure([r[0] for r in rows], [(label, [r[k] / 2 ** 20 for r in rows], c) for label, k, c in parts],
                       "MiB")
    if title:
        fig["layout"].update(title={"text": title, "font": {"size": 12}}, margin={"l": 50, "r": 10, "t": 30, "b": 80})
    return fig


def time_figure(rows, title=""):
    """Stacked bars: ``rows`` = [(layer, forward ms, backward ms)] (a figure dict)."""
    rows = [r for r in rows if r[1] is not None or r[2] is not None]
    if not rows:
        return message_figure("no timings yet: run forward or backward")
    fig = _bars_figure([r[0] for r in rows], [("forward", [r[1] or 0.0 for r in rows], "#59a14f"),
                                              ("backward", [r[2] or 0.0 for r in rows], "#e15759")], "ms")
    if title:
        fig["layout"].update(title={"text": title, "font": {"size": 12}}, margin={"l": 50, "r": 10, "t": 30, "b": 80})
    return fig

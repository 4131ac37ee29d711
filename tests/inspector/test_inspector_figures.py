"""figures: pure builders, view data in, Plotly figures out."""
import numpy as np
import plotly.graph_objects as go

from inspector import figures
from inspector import view_models as vm
from inspector.run_state import FRESH, STALE


def _view(colour_by="category", scale=None, legend=(("convolution", "#f28e2b"),), selected="b"):
    nodes = (
        vm.NodeView("L0", "layer", "a", 0.0, 0.0, "a", "#f28e2b", None, "#2ca02c", 3.0, FRESH, "A"),
        vm.NodeView("L1", "layer", "b", 0.0, -1.0, "b", "#59a14f", None, "#ff7f0e", 3.0, STALE, "B",
                    selected=selected == "b"),
        vm.NodeView("G0", "ghost", "g", 5.0, -1.0, "g", "#ddd", None, "#aaa", 1.0, "n/a", "G"),
    )
    edges = (
        vm.EdgeView(((0.0, 0.0), (0.0, -1.0)), "data", FRESH, "x", "x 1×2", "X"),
        vm.EdgeView(((0.0, 0.0), (5.0, -1.0)), "ghost", "n/a", "x", "x", "ghost"),
    )
    return vm.GraphView(nodes, edges, legend, scale, colour_by, "net — TRAIN", 2, 10.0, True, "k")


def test_graph_figure_traces():
    d = figures.graph_figure(_view())
    assert set(d) == {"data", "layout"}
    fig = go.Figure(d)                               # a valid Plotly figure
    names = [t.name for t in fig.data]
    assert "layers" in names and "ghosts" in names and "blobs" in names
    assert fig.data[-1].name == "selection" and list(fig.data[-1].x) == [0.0]
    layers = fig.data[names.index("layers")]
    assert [list(c) for c in layers.customdata] == [["layer", "a"], ["layer", "b"]]
    assert list(layers.marker.color) == ["#f28e2b", "#59a14f"]
    assert list(layers.marker.line.color) == ["#2ca02c", "#ff7f0e"]
    blobs = fig.data[names.index("blobs")]
    assert [list(c) for c in blobs.customdata] == [["blob", "x"]]
    assert any(t.showlegend and t.name == "convolution" for t in fig.data)
    assert fig.layout.uirevision == "k"
    edges = [t for t in fig.data if t.mode == "lines"]
    assert {t.line.dash for t in edges} == {"solid", "dash"}


def test_graph_figure_colour_bar():
    fig = go.Figure(figures.graph_figure(_view("data", vm.ColourScale("mean |data|", 1e-3, 10.0, True), ())))
    bars = [t for t in fig.data if t.marker is not None and t.marker.showscale]
    assert len(bars) == 1 and bars[0].marker.cmin < bars[0].marker.cmax


def test_selection_trace_alone():
    t = figures.selection_trace(_view(selected=None))
    assert t["x"] == [] and t["name"] == "selection"
    go.Scatter({k: v for k, v in t.items() if k != "type"})


def test_graph_figure_of_a_real_layout(lenet):
    from inspector import presenter
    fig = go.Figure(presenter.graph_figure(lenet))
    layer_trace = [t for t in fig.data if t.name == "layers"][0]
    assert len(layer_trace.x) == len(lenet.graph.layers)
    assert fig.layout.yaxis.range[1] > fig.layout.yaxis.range[0]


def test_histogram_figure():
    fig = figures.histogram_figure([1, 2, 3, 4], 0.0, 4.0, "h")
    bar = fig.data[0]
    assert list(bar.y) == [1, 2, 3, 4] and list(bar.x) == [0.5, 1.5, 2.5, 3.5]
    assert figures.histogram_figure([], 0, 1).layout.annotations


def test_mosaic_figures():
    z = np.arange(12, dtype=float).reshape(3, 4)
    fig = figures.mosaic_figure(z, "m", [(0, 0, "0")], diverging=True)
    assert fig.data[0].type == "heatmap" and fig.data[0].zmin == -fig.data[0].zmax
    rgb = figures.rgb_mosaic_figure(np.full((4, 4, 3), 0.5))
    assert rgb.data[0].type == "image"


def test_memory_and_time_figures():
    fig = figures.memory_figure([("a", 2 ** 20, 2 ** 20, 0), ("b", 0, 0, 2 ** 21)])
    assert [t.name for t in fig.data] == ["activations (data)", "gradients (diff)", "params (data + diff)"]
    assert list(fig.data[2].y) == [0, 2.0]
    t = figures.time_figure([("a", 1.0, None), ("b", None, None)])
    assert list(t.data[0].x) == ["a"]
    assert figures.time_figure([("a", None, None)]).layout.annotations

"""figures: pure builders, view data in, Plotly figures out."""
import numpy as np

from inspector.views import cyto, figures
from inspector.views import view_models as vm
from inspector.views.run_state import FRESH, STALE


def _view(colour_by="category", scale=None, legend=(("convolution", "#f28e2b"),), selected="b"):
    nodes = (
        vm.NodeView("L0", "layer", "a", 0.0, 0.0, "a", "#f28e2b", None, "#2ca02c", 3.0, FRESH, "<b>A</b><br>x"),
        vm.NodeView("L1", "layer", "b", 0.0, -1.0, "b", "#59a14f", None, "#ff7f0e", 3.0, STALE, "B",
                    selected=selected == "b", parent="F:blk", members=("b",), mark="stopped"),
        vm.NodeView("G0", "ghost", "g", 5.0, -1.0, "g", "#ddd", None, "#aaa", 1.0, "n/a", "G"),
        vm.NodeView("F:blk", "group", "blk", 0.0, -1.0, "blk · 1 layers", "#f5f7fb", None, "#9aa8bd", 1.0, "n/a",
                    "frame", members=("b",), width=6.0, height=1.5),
    )
    edges = (
        vm.EdgeView(((0.0, 0.0), (0.0, -1.0)), "data", FRESH, "x", "x 1×2", "X", src="L0", dst="L1"),
        vm.EdgeView(((0.0, 0.0), (-6.0, -0.5), (5.0, -1.0)), "ghost", "n/a", "x", "x", "ghost", src="L0", dst="G0"),
    )
    return vm.GraphView(nodes, edges, legend, scale, colour_by, "net — TRAIN", 2, 10.0, True, "k")


def test_cytoscape_elements():
    els = cyto.elements(_view())
    by_id = {e["data"]["id"]: e for e in els}
    assert els[0]["data"]["id"] == "F:blk"                                     # frames first (drawn behind)
    a, b = by_id["L0"], by_id["L1"]
    assert a["data"]["fill"] == "#f28e2b" and a["data"]["line"] == "#2ca02c" and "fresh" in a["classes"]
    assert b["data"]["frame"] == "F:blk" and b["data"]["members"] == "|b|"
    # no compound nodes (cytoscape restyles a compound node with everything inside it): the frame is
    # a plain node around its members
    assert not [e for e in els if "parent" in e["data"]]
    f = els[0]
    fx, fy, fw, fh = f["position"]["x"], f["position"]["y"], f["data"]["w"], f["data"]["h"]
    bx, by, bw, bh = b["position"]["x"], b["position"]["y"], b["data"]["w"], b["data"]["h"]
    assert fx - fw / 2 < bx - bw / 2 and bx + bw / 2 < fx + fw / 2
    assert fy - fh / 2 < by - bh / 2 and by + bh / 2 < fy + fh / 2
    assert "stopped" in b["classes"] and b["data"]["label"] == "▶ b"           # the last step's marker
    assert a["data"]["hover"] == ["A", "x"]                                     # plain text, no HTML
    assert b["position"]["y"] > a["position"]["y"]                             # ranks go down
    assert "ghost" in by_id["G0"]["classes"]
    edges = [e for e in els if "source" in e["data"]]
    assert {(e["data"]["source"], e["data"]["target"]) for e in edges} == {("L0", "L1"), ("L0", "G0")}
    assert any("seg" in e["classes"] for e in edges)                            # routed around a bend
    assert cyto.text_colour("#440154") == "#ffffff" and cyto.text_colour("#fde725") == "#1a1a1a"


def test_stylesheet_maps_data():
    sheet = cyto.stylesheet()
    sel = {r["selector"]: r["style"] for r in sheet}
    assert sel["node[lw]"]["background-color"] == "data(fill)"
    assert sel["node[lw]"]["min-zoomed-font-size"] > 0           # labels by level of detail
    edge_text = sel["edge.srclab, edge.midlab, edge.tgtlab"]
    assert edge_text["min-zoomed-font-size"] > sel["node[lw]"]["min-zoomed-font-size"]
    # frames' names hide with the nodes' (zoom <= 0.5, which cytoscape rounds to 0.5): nested frames'
    # names, a few pixels high and a few apart, ran into each other when zoomed out
    for key in ("node.group", "node[lw]"):
        assert sel[key].get("font-size", 11) * 0.5 < sel[key]["min-zoomed-font-size"] <= sel[key].get("font-size", 11)
    # frames behind edges behind nodes
    assert sel["node.group"]["z-index"] == "data(z)" and sel["edge"]["z-index"] < sel["node[lw]"]["z-index"]
    assert max(e["data"]["z"] for e in cyto.elements(_view()) if e["data"].get("kind") == "group") \
        < sel["edge"]["z-index"]
    assert ".sel" in sel and "node.stopped" in sel and "edge.seg" in sel


def test_graph_svg():
    svg = cyto.graph_svg(_view())
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert ">a<" in svg and ">▶ b<" in svg and "blk · 1 layers" in svg
    assert svg.count("<polyline") == 2
    assert ">x 1×2</text>" in svg                             # the edge labels as the page draws them
    bent = svg.split("<polyline")[2].split('points="')[1].split('"')[0].split()
    assert len(bent) == 3                                     # routed round a bend, as on the page


def test_edge_labels_once_per_blob_and_only_with_labels():
    v = _view()
    fork = vm.EdgeView(((0.0, 0.0), (5.0, -1.0)), "data", FRESH, "x", "x 1×2", "X", src="L0", dst="G0")
    both = vm.GraphView(v.nodes, (v.edges[0], fork), (), None, "category", "t", 2, 10.0, True, "k")
    els = [e for e in cyto.elements(both) if "source" in e["data"]]
    edges = [e["data"] for e in els]
    assert [e["label"] for e in edges] == ["x 1×2", ""]      # x read twice: labelled once, at its writer
    assert edges[0]["src_label"] == "x 1×2" and edges[0]["mid_label"] == ""
    # what shows a label is a class (the page replaces an element's classes whole, not its data)
    assert ["srclab" in e["classes"].split() for e in els] == [True, False]
    # a layer writing two labelled blobs: each label mid-edge, where the edges have parted
    other = vm.EdgeView(((0.0, 0.0), (5.0, -1.0)), "data", FRESH, "y", "y 3", "Y", src="L0", dst="G0")
    two = vm.GraphView(v.nodes, (v.edges[0], other), (), None, "category", "t", 2, 10.0, True, "k")
    els = [e for e in cyto.elements(two) if "source" in e["data"]]
    assert [e["data"]["mid_label"] for e in els] == ["x 1×2", "y 3"] and not [e for e in els
                                                                              if e["data"]["src_label"]]
    assert all("midlab" in e["classes"].split() and "srclab" not in e["classes"].split() for e in els)
    off = vm.GraphView(v.nodes, (v.edges[0], fork), (), None, "category", "t", 2, 10.0, False, "k")
    assert not [e for e in cyto.elements(off) if "source" in e["data"] and
                (e["data"]["label"] or set(e["classes"].split()) & {"srclab", "midlab"})]


def test_scoped_elements_name_every_element_and_reference_with_the_scope():
    els = cyto.elements(_view(), scope="n7")
    plain = cyto.elements(_view())
    assert [e["data"]["id"] for e in els] == ["n7/" + e["data"]["id"] for e in plain]
    for e, p in zip(els, plain):
        for k in ("source", "target", "frame"):
            assert e["data"].get(k) == (None if k not in p["data"] else "n7/" + p["data"][k])


def test_svg_escapes_names():
    v = _view()
    bad = vm.NodeView("L9", "layer", "<x&>", 1.0, -2.0, "<x&>", "#ffffff", None, "#888", 1.0, "n/a", "<b>h</b>")
    svg = cyto.graph_svg(vm.GraphView(v.nodes + (bad,), v.edges, (), None, "category", "t", 3, 10.0, True, "k"))
    assert "&lt;x&amp;&gt;" in svg and "<x&>" not in svg


def test_elements_of_a_real_layout(lenet):
    from inspector.state import presenter
    els, view = presenter.graph_elements(lenet)
    layers = [e for e in els if e["data"].get("kind") == "layer"]
    assert len(layers) == len(lenet.graph.layers)
    ys = [e["position"]["y"] for e in layers]
    assert max(ys) > min(ys)



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
    import plotly.graph_objects as go
    fig = figures.memory_figure([("a", 2 ** 20, 2 ** 20, 0), ("b", 0, 0, 2 ** 21)])
    assert [t["name"] for t in fig["data"]] == ["activations (data)", "gradients (diff)", "params (data + diff)"]
    assert list(fig["data"][2]["y"]) == [0, 2.0]
    go.Figure(fig)                          # plain dicts, and a valid figure (plotly checks every property)
    t = figures.time_figure([("a", 1.0, None), ("b", None, None)])
    assert list(t["data"][0]["x"]) == ["a"]
    go.Figure(t)
    empty = figures.time_figure([("a", None, None)])
    assert "no timings yet" in empty["layout"]["annotations"][0]["text"]
    go.Figure(empty)

"""engine.instruments.folded_graph: a net folded into blocks as the inspector opens it
(engine.instruments.blocks' detector and folding, graph_layout's layout), as SVG; and
the HTML report's graph built from it (no browser)."""
import os
import re

import numpy as np

import engine
from benchmarks import netgen
from engine.core import backend
from engine.instruments import blocks as B
from engine.instruments import folded_graph as F
from engine.instruments.breakpoints import Breakpoints, run_forward
from engine.instruments.debug import Recorder
from engine.instruments.report import render


def _resnet152():
    layers = B.param_layers(netgen.resnet(152, fillers=False))
    return layers, B.find_blocks(layers)


def _covered(fg):
    """Layer indices the drawing stands for (layer nodes and folded blocks)."""
    out = []
    for n in fg.nodes:
        out.extend(n.layers)
    return out


def test_resnet152_opens_with_its_stages_open_and_each_residual_block_one_node():
    layers, blks = _resnet152()
    fg = F.folded_graph(layers, blks)
    assert set(fg.groups) == {"res2", "res3", "res4", "res5"} and set(fg.groups.values()) == {None}
    folded = [n for n in fg.nodes if n.kind == "block"]
    assert len(folded) == 3 + 8 + 36 + 3 and {n.group for n in folded} == {"res2", "res3", "res4", "res5"}
    assert [n.name for n in fg.nodes if n.kind == "layer"] == ["data", "conv1", "bn_conv1", "scale_conv1",
                                                               "conv1_relu", "pool1", "pool5", "fc1000", "prob"]
    assert sorted(_covered(fg)) == list(range(len(layers)))          # every layer drawn exactly once
    # the blocks chain: res4b21 -> res4b22 -> res4b23, and the stage's first block takes pool1's output
    edges = {(s, d) for s, d, _b in fg.edges}
    assert ("K:res4b21", "K:res4b22") in edges and ("K:res4b22", "K:res4b23") in edges
    assert ("L5", "K:res2a") in edges and len(edges) == len(fg.edges)
    # laid out by the page's compound layout: stages top to bottom, their blocks in order inside
    lay = F.layout(fg)
    ys = [lay.positions["K:%s" % b][1] for b in ("res2a", "res3a", "res4b1", "res4b35", "res5c")]
    assert ys == sorted(ys, reverse=True)
    svg = F.to_svg(fg)
    assert svg.count('<g class="node block">') == 50 and "res4b22 · 13 layers" in svg
    assert svg.count('<g class="frame">') == 4 and "res4 · " in svg


def test_a_block_drawn_alone_reads_what_comes_from_outside_once():
    layers, blks = _resnet152()
    inner = F.block_view(layers, blks, "res4b22")
    assert inner.groups == {"res4b22": None}
    assert [n.name for n in inner.nodes if n.kind == "input"] == ["res4b21"]
    kinds = {n.kind for n in inner.nodes}
    assert kinds == {"layer", "input"} and len([n for n in inner.nodes if n.kind == "layer"]) == 13
    src = {d for s, d, _b in inner.edges if s == "I:res4b21"}
    names = {n.id: n.name for n in inner.nodes}
    assert {names[d] for d in src} == {"res4b22_branch2a", "res4b22"}    # the branch and the identity shortcut
    # a stage drawn alone: its blocks folded inside it
    stage = F.block_view(layers, blks, "res2")
    assert [n.name for n in stage.nodes if n.kind == "block"] == ["res2a", "res2b", "res2c"]


def test_inserted_splits_are_drawn_as_the_blob_they_copy(tmp_path):
    p = tmp_path / "r50.prototxt"
    p.write_text(netgen.resnet_prototxt(50, fillers=False))
    net = engine.Net(str(p), engine.TEST)
    layers = B.net_layers(net)
    assert any(t == "Split" for _n, t, _b, _t in layers)
    blks = B.find_blocks(layers)
    fg = F.folded_graph(layers, blks)
    assert not any(n.kind == "layer" and layers[n.layers[0]][1] == "Split" for n in fg.nodes)
    assert not any(n.kind == "input" for n in fg.nodes if n.name != "data")
    inner = F.block_view(layers, blks, "res3b")
    assert [n.name for n in inner.nodes if n.kind == "input"] == ["res3a"]     # not res3a_res3a_relu_0_split_*
    assert F.split_sources(layers)["res3a_res3a_relu_0_split_1"] == "res3a"


def _blocks_net(n_blocks=21):
    """Blocks b1..bN of InnerProduct -> Exp -> Power (more layers than a net opens with: they
    show folded); b2's weights make its Exp overflow."""
    text = ['name: "OverflowBlocks"',
            'layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 4 } } }']
    bottom = "data"
    for k in range(1, n_blocks + 1):
        w = {1: 0.1, 2: 30}.get(k, 0.01)
        text.append('layer { name: "b%d/fc" type: "InnerProduct" bottom: "%s" top: "b%d/fc" inner_product_param '
                    '{ num_output: 4 weight_filler { type: "constant" value: %g } } }' % (k, bottom, k, w))
        text.append('layer { name: "b%d/exp" type: "Exp" bottom: "b%d/fc" top: "b%d/exp" }' % (k, k, k))
        text.append('layer { name: "b%d/out" type: "Power" bottom: "b%d/exp" top: "b%d/out" }' % (k, k, k))
        bottom = "b%d/out" % k
    return "\n".join(text) + "\n"


def test_html_report_graph_is_folded_and_marks_nan_findings_and_hits(tmp_path):
    p = tmp_path / "ob.prototxt"
    p.write_text(_blocks_net())
    backend.set_random_seed(1)
    net = engine.Net(str(p), engine.TEST)
    net.blobs["data"].data[...] = np.ones((2, 4), np.float32)
    rec = Recorder(net)
    bps = Breakpoints(["layer=b3/fc"], net=net)
    run_forward(net, 0, len(net.layers) - 1, bps, rec)                  # stops after b3/fc
    net.forward()                                                       # then the whole net: b2/exp overflows
    html = render(net, rec, "html", breakpoints=bps, model_label="ob.prototxt")
    graph = html[html.index("<h2 id='graph'>"):html.index("<h2 id='blocks'>")]
    assert "21 shown folded" in graph and graph.count('<g class="node block">') == 21
    svg = graph[graph.index("<svg"):]
    nodes = re.findall(r'<g class="node block">(.*?)</g>', svg, re.S)
    by_name = {re.search(r">(?:▶ )?(b\d+) · 3 layers<", n).group(1): n for n in nodes}
    assert set(by_name) == {"b%d" % k for k in range(1, 22)}
    assert 'stroke="#d62728"' not in by_name["b1"] and "⚠" not in by_name["b1"]
    assert 'stroke="#d62728"' in by_name["b2"] and "2x4 ⚠ NaN" in by_name["b2"]       # where it overflowed
    assert "NaN/Inf first in b2/exp" in by_name["b2"]
    assert "▶ b3 · 3 layers" in by_name["b3"] and "break: b3/fc: layer=b3/fc" in by_name["b3"]
    # each block opens below, drawn alone
    assert html.count("<details id='block-") == 21 and "<details id='block-b2'><summary><b>b2</b> · 3 layers ⚠ NaN" \
        in html
    inner = html[html.index("<details id='block-b2'>"):html.index("<details id='block-b3'>")]
    assert inner.count('<g class="node layer">') == 3 and "b2/exp" in inner and 'class="node input"' in inner
    assert str(tmp_path) not in html and "ob.prototxt" in html


def test_report_graph_of_googlenet_as_the_page_opens_it(shared_dir, tmp_path):
    model = os.path.join(str(shared_dir), "zoo", "models", "bvlc_googlenet", "deploy.prototxt")
    net = engine.Net(model, engine.TEST)
    layers = B.net_layers(net)
    fg = F.folded_graph(layers, B.with_sections(layers, B.find_blocks(layers)))
    # the stem and the classifier are sections (input: conv2 folded inside it; head)
    assert set(fg.groups) == {"input", "inception_3", "inception_4", "inception_5", "head"}
    assert sorted(n.name for n in fg.nodes if n.kind == "block") == [
        "conv2", "inception_3a", "inception_3b", "inception_4a", "inception_4b", "inception_4c", "inception_4d",
        "inception_4e", "inception_5a", "inception_5b"]
    html = render(net, None, "html")
    assert "152 layers in 15 blocks" in html and html.count("<details id='block-") == 15

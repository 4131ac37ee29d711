"""caffe.draw: pydot graphs as pycaffe builds them (labels, colours, edges, rankdir,
phase), level/stages by Caffe's own NetState rules (Caffe issue 4365), rendering through
Graphviz, and a clear message without pydot."""
import json
import shutil
import sys

import pytest
from google.protobuf import text_format

from engine.core.errors import CaffeError
from engine.proto import caffe_pb2
from engine.pycaffe import draw

pydot = pytest.importorskip("pydot")

NET = """
name: "drawn"
layer { name: "data" type: "Data" top: "data" top: "label" data_param { source: "x" batch_size: 32 }
  include { phase: TRAIN } }
layer { name: "input" type: "Input" top: "data" top: "label" include { phase: TEST }
  input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } shape { dim: 1 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 16 kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool1" top: "fc" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" exclude { phase: TEST } }
"""


def _net(text=NET):
    return text_format.Parse(text, caffe_pb2.NetParameter())


def _nodes(graph):
    return {n.get_name().strip('"'): n for n in graph.get_nodes()}


def test_labels_colours_and_edges():
    g = draw.get_pydot_graph(_net(), "LR")
    assert g.get_name() == "drawn" and g.get("rankdir") == "LR"
    nodes = _nodes(g)
    conv = nodes[r"conv1\n(Convolution)\nkernel size: 3\nstride: 2\npad: 1"]
    assert conv.get("fillcolor") == "#FF5050" and conv.get("shape") == "record"
    assert nodes[r"pool1\n(Pooling AVE)\nkernel size: 2\nstride: 2\npad: 0"].get("fillcolor") == "#FF9900"
    assert nodes[r"fc\n(InnerProduct)"].get("fillcolor") == "#CC33FF"
    assert nodes[r"relu1\n(ReLU)"].get("fillcolor") == "#90EE90"       # in-place neuron layer
    assert nodes[r"loss\n(SoftmaxWithLoss)"].get("fillcolor") == "#6495ED"
    assert nodes["label"].get("shape") == "octagon"
    labels = {(e.get_source().strip('"'), e.get_destination().strip('"')): e.get("label") for e in g.get_edges()}
    assert labels[(r"fc\n(InnerProduct)", "fc")] == "10"
    assert labels[(r"data\n(Data)", "data")] == "Batch 32"
    assert labels[("pool1", r"fc\n(InnerProduct)")] == '""'
    unlabelled = draw.get_pydot_graph(_net(), "LR", label_edges=False)
    assert all(e.get("label") == '""' for e in unlabelled.get_edges())


def test_vertical_graphs_separate_with_spaces_and_lr_mults():
    g = draw.get_pydot_graph(_net(), "TB", display_lrm=True)
    names = set(_nodes(g))
    assert "conv1 (Convolution) kernel size: 3 stride: 2 pad: 1 lr mult: 1.0, 2.0" in names
    assert "fc (InnerProduct) lr mult: 1.0, 1.0" in names
    assert draw.get_layer_lr_mult(_net().layer[2]) == (1.0, 2.0)
    with pytest.raises(ValueError, match="ReLU layers do not have a learning rate multiplier"):
        draw.get_layer_lr_mult(_net().layer[3])
    assert draw.get_pooling_types_dict() == {0: "MAX", 1: "AVE", 2: "STOCHASTIC"}
    assert draw.get_edge_label(_net().layer[3]) == '""'


def _layer_names(graph):
    return sorted(n.split("\\n")[0].split(" ")[0] for n in _nodes(graph) if "(" in n)


def test_phase_keeps_pycaffes_rule():
    assert _layer_names(draw.get_pydot_graph(_net(), "LR")) == sorted(
        ["data", "input", "conv1", "relu1", "pool1", "fc", "loss"])
    assert _layer_names(draw.get_pydot_graph(_net(), "LR", phase=caffe_pb2.TRAIN)) == sorted(
        ["data", "conv1", "relu1", "pool1", "fc", "loss"])
    assert _layer_names(draw.get_pydot_graph(_net(), "LR", phase=caffe_pb2.TEST)) == sorted(
        ["input", "conv1", "relu1", "pool1", "fc"])
    both = _net('layer { name: "x" type: "ReLU" include { phase: TRAIN } exclude { phase: TEST } }')
    with pytest.raises(ValueError, match="layer x has both include and exclude specified."):
        draw.get_pydot_graph(both, "LR", phase=caffe_pb2.TRAIN)


STAGED = """
layer { name: "always" type: "Input" top: "a" input_param { shape { dim: 1 } } }
layer { name: "deploy" type: "ReLU" bottom: "a" top: "d" include { stage: "deploy" } }
layer { name: "deep" type: "ReLU" bottom: "a" top: "e" include { min_level: 2 } }
layer { name: "not_deploy" type: "ReLU" bottom: "a" top: "f" exclude { stage: "deploy" } }
layer { name: "train_deploy" type: "ReLU" bottom: "a" top: "g" include { phase: TRAIN stage: "deploy" } }
"""


def test_level_and_stages_select_layers_by_caffes_rules():
    """Caffe issue 4365: draw what Net(..., level=, stages=) builds."""
    net = _net(STAGED)
    assert _layer_names(draw.get_pydot_graph(net, "LR", stages=["deploy"])) == sorted(
        ["always", "deploy", "train_deploy"])          # no phase given: the rules' phases are not read
    assert _layer_names(draw.get_pydot_graph(net, "LR", phase=caffe_pb2.TEST, stages=["deploy"])) == sorted(
        ["always", "deploy"])
    assert _layer_names(draw.get_pydot_graph(net, "LR", level=2)) == sorted(["always", "deep", "not_deploy"])
    assert _layer_names(draw.get_pydot_graph(net, "LR", level=0)) == sorted(["always", "not_deploy"])


@pytest.mark.shared
def test_level_and_stages_agree_with_caffes_filter_cases(shared_dir):
    """Every FilterNet case of Caffe's test_net.cpp (../shared/caffe_tests): the drawn
    layers are the ones Caffe keeps for that NetState."""
    cases = sorted((shared_dir / "caffe_tests").glob("TestFilter*.state.json"))
    assert cases
    for case in cases:
        state = json.loads(case.read_text())
        net = _net((case.parent / case.name.replace(".state.json", ".input.prototxt")).read_text())
        phase = caffe_pb2.TRAIN if state["phase"] == "TRAIN" else caffe_pb2.TEST
        graph = draw.get_pydot_graph(net, "LR", phase=phase, level=state["level"], stages=state["stages"])
        kept = [name.split("[#")[0] for name in state["kept_layers"]]    # "mnist[#1 ...]": the 2nd mnist
        assert _layer_names(graph) == sorted(kept), case.name


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_draw_net_renders_with_graphviz(tmp_path):
    png = draw.draw_net(_net(), "LR")
    assert png.startswith(b"\x89PNG")
    out = tmp_path / "net.svg"
    draw.draw_net_to_file(_net(), str(out), rankdir="TB", phase=caffe_pb2.TEST)
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "pool1" in svg and "loss" not in svg


def test_without_graphviz_or_pydot_the_message_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(CaffeError, match="Graphviz's dot program is not on the PATH"):
        draw.draw_net(_net(), "LR")
    monkeypatch.setitem(sys.modules, "pydot", None)
    monkeypatch.setitem(sys.modules, "pydotplus", None)
    with pytest.raises(ImportError, match="caffe.draw needs pydot .*'draw' extra"):
        draw.get_pydot_graph(_net(), "LR")

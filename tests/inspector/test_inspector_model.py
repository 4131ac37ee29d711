"""inspector.views.model: the plain graph of the net the engine built."""
import pytest
from inspector_testlib import LENET, RESNET_TINY, SIAMESE

import engine
from engine.core.upgrade import read_net_params
from inspector.views.model import build_graph, setting_rows


def graph_of(path, phase=engine.TRAIN, **kw):
    net = engine.Net(str(path), phase, **kw)
    return net, build_graph(net, read_net_params(str(path)))


def test_lenet_layers_edges_and_in_place():
    net, g = graph_of(LENET)
    assert [l.name for l in g.layers] == net.layer_names
    relu = g.layer("relu1")
    assert relu.in_place == (True,) and relu.bottoms == ("ip1",) and relu.tops == ("ip1",)
    # ip2 reads ip1 from relu1 (the last writer), not from ip1
    e = [e for e in g.edges if g.layers[e.dst].name == "ip2"][0]
    assert e.blob == "ip1" and g.layers[e.src].name == "relu1"
    assert g.blob("ip1").writers == (g.layer("ip1").index, relu.index)
    assert g.inputs == ("data", "label") and "loss" in g.outputs
    assert g.phase_name == "TRAIN" and g.memory_used_bytes == net.memory_used_bytes


def test_lenet_ghosts_carry_their_rule():
    _net, g = graph_of(LENET)
    ghosts = {x.name: x for x in g.ghosts}
    assert set(ghosts) == {"digits", "accuracy"}
    acc = ghosts["accuracy"]
    assert acc.rule_kind == "include" and "phase: TEST" in acc.rule
    assert "differed from the phase" in acc.reason and acc.bottoms == ("ip2", "label")
    assert any(ge.dst == list(ghosts).index("accuracy") for ge in g.ghost_edges)


def test_settings_as_written_and_with_defaults():
    _net, g = graph_of(LENET)
    conv = g.layer("conv1")
    rows = dict(conv.settings)["convolution_param"]
    by_name = {r[0]: r for r in rows}
    assert by_name["num_output"][1:] == ("20", True)
    assert by_name["bias_term"][1:] == ("true", False)           # a default
    assert "weight_filler" in by_name and "xavier" in by_name["weight_filler"][1]
    assert 'name: "conv1"' in conv.written and "blobs" not in conv.written
    p0, p1 = conv.params
    assert p0.shape == (20, 1, 5, 5) and p0.lr_mult == 1 and p1.lr_mult == 2 and p0.owner is None


def test_shared_params_and_owners_siamese():
    _net, g = graph_of(SIAMESE)
    conv_p = g.layer("conv_p")
    assert conv_p.params[0].owner == ("conv", 0) and conv_p.params[0].display_name == "conv_w"
    assert ("conv_p", 0) in g.layer("conv").params[0].sharers
    assert {(s.layer, s.owner_layer) for s in g.shared} >= {("conv_p", "conv"), ("feat_p", "feat")}
    # owned params count once in memory
    assert conv_p.param_bytes == 0 and g.layer("conv").param_bytes > 0


@pytest.mark.parametrize("kw,present,absent", [
    (dict(), {"feat"}, {"deploy_prob", "probe", "loss"}),
    (dict(stages=["deploy"]), {"deploy_prob"}, {"probe"}),
    (dict(level=1), {"probe"}, {"deploy_prob"}),
    (dict(stages=["no-norm"]), {"conv"}, {"norm"}),
])
def test_siamese_netstate(kw, present, absent):
    _net, g = graph_of(SIAMESE, engine.TEST, **kw)
    names = {l.name for l in g.layers}
    assert present <= names and not (absent & names)
    assert set(g.rule_stages) == {"no-norm", "deploy"}


def test_resnet_splits_and_backward_reasons():
    net, g = graph_of(RESNET_TINY)
    splits = [l for l in g.layers if l.is_split]
    assert splits and len(splits) == len(g.splits)
    s = splits[0]
    assert s.split_blob and all(t.startswith(s.split_blob) for t in s.tops)
    for l in g.layers:
        assert l.need_backward == net.layer_need_backward[l.index]
        assert l.backward_rule
    assert g.layer("input").need_backward is False


def test_setting_rows_of_a_message():
    from engine.proto import caffe_pb2
    p = caffe_pb2.PoolingParameter()
    p.kernel_size = 2
    rows = {r[0]: r for r in setting_rows(p)}
    assert rows["kernel_size"] == ("kernel_size", "2", True)
    assert rows["pool"] == ("pool", "MAX", False)


def test_structure_key_depends_on_structure_only():
    _n1, g1 = graph_of(LENET)
    _n2, g2 = graph_of(LENET)
    _n3, g3 = graph_of(LENET, engine.TEST)
    assert g1.key == g2.key != g3.key

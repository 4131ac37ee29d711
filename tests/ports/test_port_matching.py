"""compare-port on ports as other converters make them: pairing by value and by chain, not
only by name (fused nodes carrying another layer's name, folded chains, names stripped),
inputs in another layout, and each layer's small error judged against its own float32
rounding."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import port_nets as pn  # noqa: E402

from engine.ports.compare import compare_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def resnet(tmp_path):
    return pn.resnet_tiny_deploy(ROOT, tmp_path)


BNS = ["stem_bn", "res1a_bn", "res1b_bn", "res2a_bn", "res2b_bn", "res2_proj_bn"]


def _no_own_far_above_end_to_end(r):
    """No row shows an own error far above its end-to-end error without a line saying why."""
    for row in r.rows:
        if row.own_rel is not None and row.rel is not None and row.own_rel > max(10 * row.rel, 1e-5):
            assert "own error" in row.note, (row.label, row.own_rel, row.rel)


# ---------------------------------------------------------------------- caffe2onnx's structure
@pytest.mark.parametrize("strip", [False, True])
def test_caffe2onnx_style_fused_batchnorm_scale_pairs_with_the_scale(resnet, strip):
    m = pn.caffe2onnx_style(resnet)
    r = compare_port(resnet, pn.rename_all(m) if strip else m)
    assert r.faithful, r.format()
    for bn in BNS:
        blob = bn[:-3]
        row = r.row("%s@%s_scale" % (blob, blob))
        assert row.tensor is not None and row.group == [bn, bn[:-3] + "_scale"], r.format()
        assert r.row("%s@%s" % (blob, bn)).tensor is None          # no tensor holds the BatchNorm alone
        if not strip:
            assert row.tensor == bn and "holds %s_scale's value" % blob in row.note and "fused" in row.note
    assert "covers stem_bn+stem_scale" in r.format()
    assert r.matching["covered"] == 6 and "6 not matched, all inside a fused node's check" in r.format()
    _no_own_far_above_end_to_end(r)
    assert r.matching["unmatched"] == 6


@pytest.mark.parametrize("strip", [False, True])
def test_caffe2onnx_variance_defect_is_one_line_with_the_count(resnet, strip):
    """caffe2onnx divides BatchNorm's variance by (scale factor + 1e-5): a small error at every
    BatchNorm, far above its rounding though under rtol; found at the first, named once."""
    m = pn.caffe2onnx_style(resnet, variance_bug=True)
    r = compare_port(resnet, pn.rename_all(m) if strip else m)
    assert not r.faithful
    assert r.first_departing == "stem_bn", r.format()
    assert "times its float32 rounding" in r.message
    flagged = [row for row in r.rows if row.status == "small"]
    assert [row.group[0] for row in flagged] == BNS
    assert all(1e-6 < row.own_rel < 1e-4 and row.over_rounding > 10 for row in flagged)
    bn_lines = [d for d in r.diagnosis if d.kind.startswith("batchnorm")]
    assert len(bn_lines) == 1, [d.text for d in r.diagnosis]
    d = bn_lines[0]
    assert "every BatchNorm (6 of 6)" in d.text and "scale factor + eps" in d.text, d.text
    assert d.evidence["layers"] == BNS
    assert "times its rounding" in d.text
    _no_own_far_above_end_to_end(r)
    assert r.format().count("scale factor + eps") == 1


# ---------------------------------------------------------------------- inputs in another layout
@pytest.mark.parametrize("strip", [False, True])
def test_nhwc_input_is_transposed_for_the_port(tmp_path, strip):
    net, _ = pn.make_net(tmp_path)
    m = pn.transposed_input(pn.build_port(net))
    r = compare_port(net, pn.rename_all(m) if strip else m)
    assert r.faithful, r.format()
    lay = r.input_layouts[0]
    assert lay["layout"] == "NHWC" and lay["axes"] == [0, 2, 3, 1] and lay["shape"] == [2, 16, 16, 3]
    assert "Input layout: the net's input 'data' (2x3x16x16) is fed to the port's" in r.format()
    assert "as 2x16x16x3 (NHWC: transposed 0,2,3,1)" in r.format()
    from engine.instruments.report import _port_summary
    assert any(line.startswith("input layout: the net's input 'data'") for line in _port_summary(r.to_dict()))
    # a bug planted behind the transposed input is still found at its layer
    m = pn.transposed_input(pn.build_port(net))
    pn.attr(pn.node(m, "bn1"), "epsilon", 1e-3)
    r = compare_port(net, m)
    assert r.first_departing == "bn1" and r.diagnosis[0].kind == "batchnorm_eps", r.format()


def test_hwc_input_without_batch_axis(tmp_path):
    """MMdnn's ONNX ports take H x W x C with no batch axis: the net runs at batch 1, the
    input is fed transposed, the header says so; the first layer's own check uses it."""
    net, _ = pn.make_net(tmp_path, pn.TWO_BN)
    m = pn.transposed_input(pn.build_port(net), perm=(1, 2, 0), drop_batch=True, name="input0")
    r = compare_port(net, pn.rename_all(m))
    assert r.faithful, r.format()
    assert r.input_layouts[0]["layout"] == "HWC" and r.input_layouts[0]["dropped_batch"]
    assert "batch axis dropped, transposed 1,2,0" in r.format()
    assert r.row("conv1").own_rel is not None and r.row("conv1").own_rel < 1e-5
    net2, _ = pn.make_net(tmp_path, pn.SMALL.replace("dim: 2 dim: 3", "dim: 1 dim: 3"), name="b1.prototxt")
    m = pn.build_port(net2)
    pn.set_init(m, "conv1_W", pn.init_array(m, "conv1_W")[:, ::-1])
    r = compare_port(net2, pn.transposed_input(m, perm=(1, 2, 0), drop_batch=True))
    assert r.first_departing == "conv1" and r.diagnosis[0].kind == "bgr_rgb", r.format()


def test_fixed_batch_and_other_input_name(tmp_path):
    net, _ = pn.make_net(tmp_path)
    m = pn.transposed_input(pn.build_port(net), name="images")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    r = compare_port(net, m)
    assert r.faithful, r.format()
    assert any("batch set to the port's 1" in n for n in r.notes)
    assert r.row("data").tensor == "images"


# ---------------------------------------------------------------------- rounding
def test_rounding_only_differences_are_never_findings(resnet, monkeypatch):
    """A faithful port differing from Caffe by float32 rounding only (another summation
    order in its convolutions and GEMMs) is faithful; measured even under the floor, every
    row's error is within a few times the layer's own float32 rounding."""
    from engine.ports import compare
    from engine.ports.onnx_export import build_onnx_model
    ports = (pn.build_port(resnet), build_onnx_model(resnet).model, pn.caffe2onnx_style(resnet))
    for m in ports:
        r = compare_port(resnet, pn.rename_all(m))
        assert r.faithful and r.diagnosis == [], r.format()
        assert all(row.status in ("ok", "input", "unmatched") for row in r.rows)
    monkeypatch.setattr(compare, "ROUNDING_FLOOR", 0.0)          # measure every row
    r = compare_port(resnet, pn.rename_all(ports[1]))
    measured = [row for row in r.rows if row.over_rounding is not None]
    assert len(measured) > 10 and all(row.over_rounding < 5 for row in measured), \
        [(row.label, row.over_rounding) for row in measured]
    assert {row.type for row in measured} >= {"Convolution", "InnerProduct", "BatchNorm"}
    assert r.faithful


# ---------------------------------------------------------------------- other lowerings
def _bn_stats(net, bn="bn1"):
    layer = net.layer_dict[bn]
    sf = float(layer.blobs[2].data[0])
    mean = np.asarray(layer.blobs[0].data, np.float64) / sf
    std = np.sqrt(np.asarray(layer.blobs[1].data, np.float64) / sf + layer.layer_param.batch_norm_param.eps)
    return mean, std


def _fold_into_conv(net, m):
    """BatchNorm and Scale folded into conv1's weights and bias (onnx-simplifier's and
    torch.onnx's fusion): one Conv, named conv1, computing conv1@scale1."""
    mean, std = _bn_stats(net)
    g = pn.init_array(m, "scale1_gamma").reshape(-1).astype(np.float64)
    beta = pn.init_array(m, "scale1_beta").reshape(-1).astype(np.float64)
    W = pn.init_array(m, "conv1_W").astype(np.float64)
    b = pn.init_array(m, "conv1_b").astype(np.float64)
    k = g / std
    pn.set_init(m, "conv1_W", W * k[:, None, None, None])
    pn.set_init(m, "conv1_b", (b - mean) * k + beta)
    relu = pn.node(m, "relu1")
    for name in ("bn1", "scale1_m", "scale1"):
        m.graph.node.remove(pn.node(m, name))
    relu.input[0] = "conv1"
    return m


def _decompose_bn(net, m):
    """BatchNormalization as Sub, Div (by sqrt(var + eps), a constant), as some converters do."""
    from onnx import helper, numpy_helper
    mean, std = _bn_stats(net)
    n = pn.node(m, "bn1")
    idx = list(m.graph.node).index(n)
    m.graph.node.remove(n)
    m.graph.initializer.extend([numpy_helper.from_array(mean.reshape(1, -1, 1, 1).astype(np.float32), "bn_m"),
                                numpy_helper.from_array(std.reshape(1, -1, 1, 1).astype(np.float32), "bn_s")])
    m.graph.node.insert(idx, helper.make_node("Sub", [n.input[0], "bn_m"], ["bn_centered"], name="bn_sub"))
    m.graph.node.insert(idx + 1, helper.make_node("Div", ["bn_centered", "bn_s"], [n.output[0]], name="bn_div"))
    return m


def _decompose_lrn(net, m):
    """LRN across channels as x², a banded 1x1 Conv summing the channel window, Mul, Add, Pow,
    Div (what converters without an LRN op emit)."""
    from onnx import helper, numpy_helper
    lp = net.layer_dict["norm1"].layer_param.lrn_param
    n = pn.node(m, "norm1")
    C = net.blobs["pool1"].shape[1]
    size, half = int(lp.local_size), int(lp.local_size) // 2
    band = np.zeros((C, C, 1, 1), np.float32)
    for i in range(C):
        band[i, max(0, i - half):min(C, i + half + 1)] = 1
    m.graph.initializer.extend([numpy_helper.from_array(band, "lrn_band"),
                                numpy_helper.from_array(np.float32(lp.alpha / size), "lrn_a"),
                                numpy_helper.from_array(np.float32(lp.k), "lrn_k"),
                                numpy_helper.from_array(np.float32(lp.beta), "lrn_b")])
    x, out = n.input[0], n.output[0]
    idx = list(m.graph.node).index(n)
    m.graph.node.remove(n)
    new = [helper.make_node("Mul", [x, x], ["lrn_sq"]), helper.make_node("Conv", ["lrn_sq", "lrn_band"], ["lrn_sum"]),
           helper.make_node("Mul", ["lrn_sum", "lrn_a"], ["lrn_scaled"]),
           helper.make_node("Add", ["lrn_scaled", "lrn_k"], ["lrn_base"]),
           helper.make_node("Pow", ["lrn_base", "lrn_b"], ["lrn_den"]), helper.make_node("Div", [x, "lrn_den"], [out])]
    for k, node in enumerate(new):
        m.graph.node.insert(idx + k, node)
    return m


def _matmul_add(net, m):
    from onnx import helper, numpy_helper
    n = pn.node(m, "ip1")
    W = pn.init_array(m, "ip1_W")
    m.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(W.T), "ip1_WT"))
    idx = list(m.graph.node).index(n)
    m.graph.node.remove(n)
    m.graph.node.insert(idx, helper.make_node("MatMul", [n.input[0], "ip1_WT"], ["ip1_mm"], name="ip1_mm"))
    m.graph.node.insert(idx + 1, helper.make_node("Add", ["ip1_mm", "ip1_b"], [n.output[0]], name="ip1_add"))
    return m


@pytest.mark.parametrize("strip", [False, True])
def test_lowerings_pair_by_value_and_chain(tmp_path, strip):
    net, _ = pn.make_net(tmp_path)
    for lower in (_fold_into_conv, _decompose_bn, _decompose_lrn, _matmul_add):
        m = lower(net, pn.build_port(net))
        r = compare_port(net, pn.rename_all(m) if strip else m)
        assert r.faithful, (lower.__name__, r.format())
        _no_own_far_above_end_to_end(r)
        if lower is _fold_into_conv:
            # the Conv holds the chain's last value; the convolution and BatchNorm alone have none
            row = r.row("conv1@scale1")
            assert row.tensor is not None and row.group == ["conv1", "bn1", "scale1"], r.format()
            assert r.row("conv1").tensor is None and r.row("conv1@bn1").tensor is None
            if not strip:
                assert row.tensor == "conv1" and "holds scale1's value" in row.note
        if lower is _decompose_lrn:
            assert r.row("norm1").matched in ("name", "topology") and r.row("norm1").group == ["norm1"]
        if lower is _matmul_add:
            assert r.row("ip1").group == ["ip1"]


def test_bug_in_a_decomposed_batchnorm_is_named(tmp_path):
    net, _ = pn.make_net(tmp_path)
    m = _decompose_bn(net, pn.build_port(net))
    mean, std = _bn_stats(net)
    var = np.asarray(net.layer_dict["bn1"].blobs[1].data, np.float64) / 2.0
    pn.set_init(m, "bn_s", np.sqrt(var + 1e-3).reshape(1, -1, 1, 1))
    r = compare_port(net, pn.rename_all(m))
    assert r.first_departing == "bn1", r.format()
    assert r.diagnosis_for("bn1").kind == "batchnorm_eps" and "eps 0.001" in r.diagnosis_for("bn1").text


# ---------------------------------------------------------------------- MMdnn's structure
@pytest.mark.parametrize("strip", [False, True])
def test_mmdnn_style_port_nhwc_and_old_opset(resnet, strip):
    """MMdnn's ONNX: opset 6 (upgraded to run, a note says so), NHWC input transposed inside
    (fed transposed, the header says so), BatchNorm+Scale fused under the BatchNorm's name."""
    m = pn.mmdnn_style(resnet)
    assert m.opset_import[0].version == 6
    r = compare_port(resnet, pn.rename_all(m) if strip else m)
    assert r.faithful, r.format()
    assert r.input_layouts and r.input_layouts[0]["layout"] == "NHWC"
    assert any("opset 6 is older than onnxruntime runs" in n for n in r.notes)
    assert all(r.row("%s@%s_scale" % (bn[:-3], bn[:-3])).group == [bn, bn[:-3] + "_scale"] for bn in BNS)
    assert r.matching["unmatched"] == 6


def test_a_small_systematic_error_is_a_finding_even_without_a_cause(tmp_path):
    """A Scale whose bias is off by ~3e-5 of the value's scale (each channel its own way):
    under rtol, far above the layer's rounding: the port departs there, no known cause, the
    first differing elements; its multipliers off as much: weights that differ slightly."""
    net, _ = pn.make_net(tmp_path)
    for blob, kind in (("scale1_beta", "unknown"), ("scale1_gamma", "weights_differ")):
        m = pn.build_port(net)
        v = pn.init_array(m, blob)
        off = 3e-5 * np.random.default_rng(0).uniform(0.5, 1.0, v.shape)
        pn.set_init(m, blob, v + off * 4 if blob == "scale1_beta" else v * (1 + off))
        r = compare_port(net, pn.rename_all(m))
        assert not r.faithful and r.first_departing == "scale1", r.format()
        row = r.row("conv1@scale1")
        assert row.status == "small" and row.own_rel < 1e-4 and row.over_rounding > 10, r.format()
        d = r.diagnosis_for("scale1")
        assert d.kind == kind, d.text
        assert ("first differing" in d.text) if kind == "unknown" else ("differ slightly" in d.text)

"""compare-port on ports as other converters make them: pairing by value and by chain, not
only by name (fused nodes carrying another layer's name, folded chains, names stripped),
inputs in another layout, and each layer's small error judged against its own float32
rounding."""
from pathlib import Path

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
def test_rounding_only_differences_are_never_findings(resnet):
    """A faithful port differing from Caffe by float32 rounding only (another summation
    order in its GEMMs) is faithful, every row within 10x its own rounding."""
    from engine.ports.onnx_export import build_onnx_model
    for m in (pn.build_port(resnet), build_onnx_model(resnet).model, pn.caffe2onnx_style(resnet)):
        r = compare_port(resnet, pn.rename_all(m))
        assert r.faithful and r.diagnosis == [], r.format()
        measured = [row for row in r.rows if row.over_rounding is not None]
        assert measured and all(row.over_rounding < 10 for row in measured)
        assert all(row.status in ("ok", "input", "unmatched") for row in r.rows)

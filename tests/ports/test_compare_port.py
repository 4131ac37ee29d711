"""compare-port: a Caffe net against ONNX ports of it, faithful ones and ones with a bug
planted by editing the ONNX file; the first departing layer and the cause are named."""
import io
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
import port_nets as pn  # noqa: E402

from engine.ports.activations import PortError  # noqa: E402
from engine.ports.compare import compare_port  # noqa: E402
from engine.tools.cli import main  # noqa: E402


@pytest.fixture
def small(tmp_path):
    net, _ = pn.make_net(tmp_path)
    return net


def _kinds(result):
    return [d.kind for d in result.diagnosis]


def _first_diag(result):
    return result.diagnosis_for(result.first_departing)


# ---------------------------------------------------------------------- faithful ports
def test_faithful_port_passes(small):
    r = compare_port(small, pn.build_port(small))
    assert r.faithful, r.format()
    assert r.first_departing is None and r.diagnosis == []
    assert r.matching["unmatched"] == 0 and r.matching["name"] == 8
    assert all(row.status in ("ok", "input") for row in r.rows)
    # every in-place value has its own row, checked on its own
    assert [row.label for row in r.rows][:5] == ["data", "conv1", "conv1@bn1", "conv1@scale1", "conv1@relu1"]
    assert all(row.own_rel is not None and row.own_rel < 1e-5 for row in r.rows[1:])


def test_port_with_every_tensor_renamed_is_matched_by_topology(small):
    r = compare_port(small, pn.rename_all(pn.build_port(small)))
    assert r.faithful, r.format()
    assert r.matching["topology"] == 8 and r.matching["name"] == 0 and r.matching["input"] == 1
    # the Scale's value is the Add after the Mul, not the Mul
    m = pn.rename_all(pn.build_port(small))
    producer = {o: n.op_type for n in m.graph.node for o in n.output}
    assert producer[r.row("conv1@scale1").tensor] == "Add"
    assert producer[r.row("conv1@bn1").tensor] == "BatchNormalization"
    assert producer[r.row("conv1@relu1").tensor] == "Relu"


def test_fused_batchnorm_scale_is_checked_as_one_group(small):
    for rename in (False, True):
        m = pn.fuse_bn_scale(pn.build_port(small))
        if rename:
            pn.rename_all(m)
        r = compare_port(small, m)
        assert r.faithful, r.format()
        assert r.row("conv1@bn1").matched is None           # no tensor holds BatchNorm alone
        assert r.row("conv1@scale1").group == ["bn1", "scale1"]


def test_port_given_as_bytes_and_plain_data(small):
    data = pn.build_port(small).SerializeToString()
    r = compare_port(small, data, {"data": np.ones((2, 3, 16, 16), np.float32)})
    d = r.to_dict()
    json.dumps(d)
    assert d["faithful"] is True and d["first_departing"] is None
    assert {row["label"] for row in d["rows"]} >= {"conv1", "conv1@bn1", "prob"}
    assert set(d["layers"]) == set(small.layer_names) and d["layers"]["bn1"]["status"] == "ok"
    m = pn.build_port(small)
    pn.attr(pn.node(m, "bn1"), "epsilon", 1e-3)
    layers = compare_port(small, m).to_dict()["layers"]
    assert layers["bn1"]["status"] == "departs" and layers["conv1"]["status"] == "ok"
    assert layers["bn1"]["own_rel"] > 1e-4 and layers["relu1"]["own_rel"] < 1e-6 < layers["relu1"]["rel"]


# ---------------------------------------------------------------------- planted bugs
@pytest.mark.parametrize("rename", [False, True])
def test_ceil_vs_floor_pooling_is_named(small, rename):
    m = pn.build_port(small)
    pn.attr(pn.node(m, "pool1"), "ceil_mode", 0)
    if rename:
        pn.rename_all(m)
    r = compare_port(small, m)
    assert not r.faithful
    assert r.first_departing == "pool1", r.format()
    d = _first_diag(r)
    assert d.kind == "pool_ceil_floor" and "floor" in d.text and "7x7 where Caffe's is 8x8" in d.text
    assert r.row("pool1").status == "shape"
    assert any("Gemm" in n for n in r.notes)       # the port cannot run past its InnerProduct


def test_lrn_alpha_scaling_is_named(small):
    m = pn.build_port(small)
    pn.attr(pn.node(m, "norm1"), "alpha", 0.02 / 5)          # alpha divided by size once more
    r = compare_port(small, m)
    assert r.first_departing == "norm1", r.format()
    d = _first_diag(r)
    assert d.kind == "lrn_alpha" and "alpha/size" in d.text
    assert r.row("norm1").status == "departs"
    assert all(r.row(v).status == "ok" for v in ("conv1", "pool1", "ip1", "prob"))   # their own arithmetic


def test_bgr_rgb_swap_is_named(small):
    m = pn.build_port(small)
    pn.set_init(m, "conv1_W", pn.init_array(m, "conv1_W")[:, ::-1])
    r = compare_port(small, pn.rename_all(m))
    assert r.first_departing == "conv1", r.format()
    assert _first_diag(r).kind == "bgr_rgb"
    assert "reversed" in _first_diag(r).text


def test_batchnorm_eps_difference_is_named(small):
    m = pn.build_port(small)
    pn.attr(pn.node(m, "bn1"), "epsilon", 1e-3)
    r = compare_port(small, m)
    assert r.first_departing == "bn1", r.format()
    d = _first_diag(r)
    assert d.kind == "batchnorm_eps" and "eps 0.001" in d.text and "1e-05" in d.text


def test_batchnorm_scale_factor_ignored_is_named(small):
    m = pn.build_port(small)                                   # the net's scale factor is 2
    for k in ("bn1_mean", "bn1_var"):
        pn.set_init(m, k, pn.init_array(m, k) * 2)
    r = compare_port(small, m)
    assert r.first_departing == "bn1"
    assert _first_diag(r).kind == "batchnorm_scale_factor"


def test_small_error_at_every_batchnorm_variance_over_scale_factor_plus_eps(tmp_path):
    """caffe2onnx's bug: variance divided by (scale factor + 1e-5); with a scale factor of 1
    every BatchNorm is off by ~5e-6 relative, under rtol, and still found at the first one."""
    net, _ = pn.make_net(tmp_path, pn.TWO_BN, scale_factor=1.0)
    m = pn.build_port(net)
    for bn in ("bn1", "bn2"):
        pn.set_init(m, bn + "_var", pn.init_array(m, bn + "_var") / (1 + 1e-5))
    r = compare_port(net, m)
    assert not r.faithful
    assert r.first_departing == "bn1", r.format()
    assert 1e-6 < r.row("conv1@bn1").own_rel < 1e-4
    assert _first_diag(r).kind == "batchnorm_scale_factor_eps"
    every = [d for d in r.diagnosis if d.layer == "(every BatchNorm)"]
    assert len(every) == 1 and "every BatchNorm (2 of 2)" in every[0].text and "scale factor + eps" in every[0].text
    assert len(r.diagnosis) == 1 and every[0].evidence["layers"] == ["bn1", "bn2"]
    # the correct port of the same net passes
    assert compare_port(net, pn.build_port(net)).faithful


def test_ave_pooling_border_is_named(tmp_path):
    net, _ = pn.make_net(tmp_path, pn.TWO_BN)
    m = pn.build_port(net)
    pn.attr(pn.node(m, "pool2"), "count_include_pad", 0)
    r = compare_port(net, m)
    assert r.first_departing == "pool2", r.format()
    d = _first_diag(r)
    assert d.kind == "ave_pool_border" and "border" in d.text
    assert d.evidence["interior_max_rel"] < 1e-5 < d.evidence["border_max_rel"]


def test_softmax_axis_is_named(small):
    m = pn.build_port(small)
    pn.attr(pn.node(m, "prob"), "axis", 0)
    r = compare_port(small, m)
    assert r.first_departing == "prob"
    assert _first_diag(r).kind == "softmax_axis" and "axis 0" in _first_diag(r).text


def test_constant_factor_is_named(small):
    m = pn.build_port(small)
    n = pn.node(m, "ip1")
    pn.set_init(m, "ip1_W", pn.init_array(m, "ip1_W") * 0.5)
    pn.set_init(m, "ip1_b", pn.init_array(m, "ip1_b") * 0.5)
    r = compare_port(small, m)
    assert r.first_departing == "ip1" and n.op_type == "Gemm"
    d = _first_diag(r)
    assert d.kind == "constant_factor" and abs(d.evidence["factor"] - 0.5) < 1e-4


def test_mean_applied_inside_the_port_is_named(small):
    mean = np.array([104.0, 117.0, 123.0], np.float32)
    m = pn.prepend_mean(pn.build_port(small), mean)
    r = compare_port(small, m, preprocess={"mean": mean})
    assert r.first_departing == "conv1", r.format()
    d = _first_diag(r)
    assert d.kind == "mean" and "104" in d.text and "added back" in d.text


# ---------------------------------------------------------------------- bad input
def test_bad_inputs_name_the_file_or_blob(small, tmp_path):
    with pytest.raises(PortError, match="no such ONNX file"):
        compare_port(small, tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(PortError, match="junk.onnx: not an ONNX model"):
        compare_port(small, tmp_path / "junk.onnx")
    with pytest.raises(PortError, match="input 'data'.*shape 5x5"):
        compare_port(small, pn.build_port(small), np.zeros((5, 5), np.float32))
    with pytest.raises(PortError, match="no input blob 'image'"):
        compare_port(small, pn.build_port(small), {"image": np.zeros((2, 3, 16, 16))})
    other = pn.build_port(small)
    other.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 17
    with pytest.raises(PortError, match="the port's input 'data' is 2x3x17x16, the net's input 'data' is 2x3x16x16: "
                       "not the same size in any layout"):
        compare_port(small, other)


# ---------------------------------------------------------------------- the command
def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out, err)
    return code, out.getvalue(), err.getvalue()


def test_command_exit_codes_table_json_and_report(tmp_path, small):
    small.save(str(tmp_path / "w.caffemodel"))
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    m = pn.build_port(small)
    onnx.save(m, str(good))
    pn.attr(pn.node(m, "bn1"), "epsilon", 1e-3)
    onnx.save(m, str(bad))
    model = str(tmp_path / "net.prototxt")
    code, out, err = _run(["compare-port", model, "--weights", str(tmp_path / "w.caffemodel"), "--onnx", str(good)])
    assert code == 0, err
    assert "Faithful" in out and "conv1@bn1" in out and "Matched 9 of 9 values" in out
    code, out, err = _run(["compare-port", model, "--weights", str(tmp_path / "w.caffemodel"), "--onnx", str(bad),
                           "--json", str(tmp_path / "c.json"), "-o", str(tmp_path / "r.md")])
    assert code == 3, err
    assert "First departing layer: bn1 (BatchNorm)" in out and "eps 0.001" in out
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["first_departing"] == "bn1" and doc["faithful"] is False
    md = (tmp_path / "r.md").read_text()
    assert "## Port comparison" in md and "| bn1 | BatchNorm | conv1@bn1 |" in md and "departs" in md
    code, out, err = _run(["compare-port", model, "--weights", str(tmp_path / "w.caffemodel"), "--onnx", str(bad),
                           "-o", str(tmp_path / "r.json")])
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["port_comparison"]["first_departing"] == "bn1"
    assert rep["port_comparison"]["diagnosis"][0]["kind"] == "batchnorm_eps"
    code, out, err = _run(["compare-port", model, "--onnx", str(tmp_path / "nope.onnx")])
    assert code == 1 and "nope.onnx" in err


def test_command_with_an_image_and_caffe_io_preprocessing(tmp_path, small):
    """An image preprocessed as caffe.io does (BGR, x255, minus the mean); a port that
    subtracts the mean itself is caught at its first layer."""
    cv2 = pytest.importorskip("cv2")
    small.save(str(tmp_path / "w.caffemodel"))
    img = (np.random.default_rng(0).uniform(0, 255, (20, 24, 3))).astype(np.uint8)
    cv2.imwrite(str(tmp_path / "x.png"), img)
    mean = [104.0, 117.0, 123.0]
    onnx.save(pn.build_port(small), str(tmp_path / "good.onnx"))
    onnx.save(pn.prepend_mean(pn.build_port(small), mean), str(tmp_path / "mean.onnx"))
    args = ["compare-port", str(tmp_path / "net.prototxt"), "--weights", str(tmp_path / "w.caffemodel"),
            "--input", str(tmp_path / "x.png"), "--mean-value", "104,117,123", "--raw-scale", "255",
            "--channel-swap", "2,1,0", "--onnx"]
    code, out, err = _run(args + [str(tmp_path / "good.onnx")])
    assert code == 0, out + err
    code, out, err = _run(args + [str(tmp_path / "mean.onnx")])
    assert code == 3
    assert "First departing layer: conv1" in out and "mean" in out and "added back" in out


# ---------------------------------------------------------------------- a zoo net, ported by other tools
@pytest.mark.shared
def test_googlenet_ported_through_torch_onnx(shared_dir, tmp_path):
    """GoogLeNet exported by export-torch then torch.onnx (tensor names of torch's own):
    every value matched by topology, faithful; a floor pooling planted is named."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    net = pn.zoo_net(shared_dir / "zoo" / "models" / "bvlc_googlenet" / "deploy.prototxt")
    try:
        path = pn.torch_onnx_port(net, tmp_path)
    except Exception as e:        # torch.onnx's TorchScript exporter gone in a later torch
        pytest.skip("torch.onnx cannot export here: %s" % e)
    r = compare_port(net, path)
    assert r.faithful, r.format(limit=0)
    assert r.matching["topology"] >= 140 and r.matching["name"] == 0
    m = onnx.load(str(path))
    pool = next(n for n in m.graph.node if n.op_type == "MaxPool")
    pn.attr(pool, "ceil_mode", 0)
    r = compare_port(net, m)
    assert r.first_departing == "pool1/3x3_s2", r.format(limit=0)
    assert _first_diag(r).kind == "pool_ceil_floor"


@pytest.fixture
def crop_net(tmp_path):
    net, _ = pn.make_net(tmp_path, pn.CROP)
    return net


@pytest.mark.parametrize("rename", [False, True])
def test_crop_offset_is_named(crop_net, rename):
    m = pn.build_port(crop_net)
    assert compare_port(crop_net, pn.rename_all(pn.build_port(crop_net)) if rename else m).faithful
    pn.set_init(m, "crop1_starts", [1, 3])
    pn.set_init(m, "crop1_ends", [9, 11])
    r = compare_port(crop_net, pn.rename_all(m) if rename else m)
    assert r.first_departing == "crop1", r.format()
    d = _first_diag(r)
    assert d.kind == "crop_offset" and d.evidence["port_offset"] == [1, 3] and d.evidence["caffe_offset"] == [2, 3]


def test_dropout_and_power_scales_are_named(crop_net):
    from onnx import numpy_helper
    m = pn.build_port(crop_net)
    n = pn.node(m, "drop")                        # the port scales by (1 - ratio) at test time
    n.op_type = "Mul"
    n.input.append("half")
    m.graph.initializer.append(numpy_helper.from_array(np.float32(0.5), "half"))
    r = compare_port(crop_net, m)
    assert r.first_departing == "drop" and _first_diag(r).kind == "dropout_scale", r.format()
    assert r.row("pw").status == "ok" and r.row("pw@drop").matched == "name"
    m = pn.build_port(crop_net)
    pn.set_init(m, "pw_Mul", 1.0)                  # Power's scale 2 lost
    r = compare_port(crop_net, m)
    assert r.first_departing == "pw" and _first_diag(r).kind == "power_scale", r.format()


# ---------------------------------------------------------------------- a residual net
def test_caffe2onnx_batchnorm_bug_is_found_at_the_first_batchnorm(tmp_path):
    """The issue's case: every BatchNorm's variance divided by (scale factor + 1e-5); the
    output drifts by ~1e-5 only, the port (renamed throughout) departs at stem_bn, the first."""
    root = Path(__file__).resolve().parents[2]
    net = pn.resnet_tiny_deploy(root, tmp_path)
    m = pn.build_port(net)
    assert compare_port(net, pn.rename_all(pn.build_port(net))).faithful
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            pn.set_init(m, n.input[4], pn.init_array(m, n.input[4]) * 1.5 / (1.5 + 1e-5))
    r = compare_port(net, pn.rename_all(m))
    assert r.first_departing == "stem_bn", r.format()
    assert r.matching["topology"] == 27
    assert [row.layer for row in r.rows if row.status == "small" and row.over_rounding > 10] == \
        ["stem_bn", "res1a_bn", "res1b_bn", "res2a_bn", "res2b_bn", "res2_proj_bn"]
    every = next(d for d in r.diagnosis if d.layer == "(every BatchNorm)")
    assert "every BatchNorm (6 of 6)" in every.text and every.kind == "batchnorm_scale_factor_eps"
    assert r.outputs[0]["rel"] < 1e-4                     # under rtol at the output, and still found


def test_port_with_batchnorm_folded_into_convolution(tmp_path):
    """torch.onnx folds BatchNorm into the convolution: the convolutions' own values have no
    tensor, the BatchNorms' do, and the port is faithful."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    root = Path(__file__).resolve().parents[2]
    net = pn.resnet_tiny_deploy(root, tmp_path)
    try:
        path = pn.torch_onnx_port(net, tmp_path)
    except Exception as e:
        pytest.skip("torch.onnx cannot export here: %s" % e)
    if any(n.op_type == "BatchNormalization" for n in onnx.load(str(path)).graph.node):
        pytest.skip("this torch.onnx keeps BatchNormalization")
    r = compare_port(net, path)
    assert r.faithful, r.format()
    assert r.row("stem").matched is None and r.row("stem@stem_bn").group == ["stem", "stem_bn"]


# ---------------------------------------------------------------------- ports made by editing export-onnx's files
def _exported(net):
    """engine.ports' own exact export (export-onnx), as an onnx.ModelProto."""
    ox = pytest.importorskip("engine.ports.onnx_export", reason="the ONNX exporter is not in this tree")
    return ox.build_onnx_model(net).model


def _bn_std(net, layer, eps=None, sf_plus=0.0):
    """sqrt(var / (scale factor + sf_plus) + eps) of a BatchNorm layer (its eps by default)."""
    lyr = net.layer_dict[layer]
    var, sf = np.asarray(lyr.blobs[1].data, np.float64), float(lyr.blobs[2].data[0])
    eps = float(lyr.layer_param.batch_norm_param.eps) if eps is None else eps
    return np.sqrt(var / (sf + sf_plus) + eps)


def test_exported_port_faithful_and_planted_bugs_named(small):
    m = _exported(small)
    r = compare_port(small, m)
    assert r.faithful and r.matching["name"] == 8, r.format()
    assert compare_port(small, pn.rename_all(_exported(small))).faithful
    pool = next(n for n in m.graph.node if n.op_type == "MaxPool")
    cases = []
    # ceil -> floor: the exporter's extra end padding removed
    m = _exported(small)
    pn.attr(next(n for n in m.graph.node if n.op_type == "MaxPool"), "pads", [0, 0, 0, 0])
    cases.append((m, "pool1", "pool_ceil_floor"))
    m = _exported(small)
    pn.attr(next(n for n in m.graph.node if n.op_type == "LRN"), "alpha", 0.02 / 5)
    cases.append((m, "norm1", "lrn_alpha"))
    m = _exported(small)
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    pn.set_init(m, conv.input[1], pn.init_array(m, conv.input[1])[:, ::-1])
    cases.append((m, "conv1", "bgr_rgb"))
    m = _exported(small)
    div = next(n for n in m.graph.node if n.op_type == "Div" and n.output[0] == "conv1@bn1")
    std = pn.init_array(m, div.input[1])
    pn.set_init(m, div.input[1], _bn_std(small, "bn1", eps=1e-3).reshape(std.shape))
    cases.append((m, "bn1", "batchnorm_eps"))
    m = _exported(small)
    pn.set_init(m, div.input[1], np.sqrt(np.asarray(small.layer_dict["bn1"].blobs[1].data, np.float64) + 1e-5)
                .reshape(std.shape))                       # the scale factor (2) ignored
    cases.append((m, "bn1", "batchnorm_scale_factor"))
    for model, layer, kind in cases:
        for rename in (False, True):
            r = compare_port(small, pn.rename_all(model) if rename else model)
            assert r.first_departing == layer, (kind, rename, r.format())
            assert _first_diag(r).kind == kind, (kind, rename, r.format())
    assert pool.op_type == "MaxPool"


def test_exported_resnet_with_caffe2onnx_batchnorm_bug(tmp_path):
    root = Path(__file__).resolve().parents[2]
    net = pn.resnet_tiny_deploy(root, tmp_path)
    m = _exported(net)
    assert compare_port(net, m).faithful
    bns = [n for n in net.layer_names if net.layer_dict[n].type == "BatchNorm"]
    for node in m.graph.node:
        if node.op_type == "Div" and "@" in node.output[0] and node.output[0].split("@")[1] in bns:
            layer = node.output[0].split("@")[1]
            shape = pn.init_array(m, node.input[1]).shape
            pn.set_init(m, node.input[1], _bn_std(net, layer, sf_plus=1e-5).reshape(shape))
    r = compare_port(net, m)
    assert r.first_departing == "stem_bn", r.format()
    every = next(d for d in r.diagnosis if d.layer == "(every BatchNorm)")
    assert "6 of 6" in every.text


@pytest.mark.shared
def test_exported_googlenet_floor_pooling_and_lrn(shared_dir):
    net = pn.zoo_net(shared_dir / "zoo" / "models" / "bvlc_googlenet" / "deploy.prototxt")
    m = _exported(net)
    pn.attr(next(n for n in m.graph.node if n.op_type == "LRN" and n.output[0] == "conv2/norm2"), "alpha",
            1e-4 * 5)
    r = compare_port(net, m)
    assert r.first_departing == "conv2/norm2", r.format(limit=0)
    assert _first_diag(r).kind == "lrn_alpha" and "alpha×size" in _first_diag(r).text
    assert r.matching["name"] >= 140
    m = _exported(net)
    pn.attr(next(n for n in m.graph.node if n.op_type == "MaxPool" and n.output[0] == "pool1/3x3_s2"), "pads",
            [0, 0, 0, 0])                                     # the exporter's ceil padding dropped
    r = compare_port(net, m)
    assert r.first_departing == "pool1/3x3_s2", r.format(limit=0)
    assert _first_diag(r).kind == "pool_ceil_floor"

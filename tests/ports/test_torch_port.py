"""compare-port --torch: a user's own PyTorch module (written by hand to load Caffe's weights)
against the Caffe net -- faithful as written, and with the classic mistakes planted in its
source or in the conversion of the weights, each found at its layer and named."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch_nets as tn  # noqa: E402
from torch_nets import one_thread  # noqa: E402,F401 - the fixture

from engine.ports.activations import PortError  # noqa: E402
from engine.ports.torch_port import TorchGraph, compare_torch, load_torch_module  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def net(tmp_path):
    return tn.make_net(tmp_path)[0]


def _compare(tmp_path, net, src=None, sd=None, **kw):
    py = tn.write_port(tmp_path, **(src or {}))
    state = tn.caffe_state_dict(net, **(sd or {}))
    return compare_torch(net, "%s:make" % py, state, **kw)


def _first_diag(r):
    return r.diagnosis_for(r.first_departing)       # its own line, or a line covering several layers


# ---------------------------------------------------------------------- faithful
@pytest.mark.parametrize("names", ["own", "caffe"])
def test_hand_written_port_is_faithful(tmp_path, net, names):
    # the module's attributes named as the user likes, or as Caffe's layers (bn_conv1 is then a
    # BatchNorm2d named as Caffe's BatchNorm, computing BatchNorm + Scale)
    r = _compare(tmp_path, net, dict(names=names), dict(names=names))
    assert r.faithful, r.format()
    assert r.first_departing is None and r.diagnosis == []
    assert r.port == "port.py:make"
    # BatchNorm2d is Caffe's BatchNorm + Scale: its tensor is the Scale's value, both layers checked together
    row = r.row("conv1@scale_conv1")
    assert row.tensor == ("bn1" if names == "own" else "bn_conv1") and row.status == "ok"
    assert row.group == ["bn_conv1", "scale_conv1"]
    assert r.row("pool1").tensor == "pool1" and r.row("fc").tensor == "fc"
    assert r.row("res2a").tensor == "add"                      # the functional residual add
    assert r.row("data").matched == "input" and r.row("data").tensor == "x"
    assert all(row.own_rel is not None and row.own_rel < 1e-5 for row in r.rows if row.tensor and
               row.matched != "input")


def test_a_module_that_does_not_trace_is_recorded_while_it_runs(tmp_path, net):
    # Python control flow on a tensor's value: torch.fx cannot trace it; forward hooks and the
    # functions between them record the path taken
    src = tn.module_source().replace("        x = F.relu(self.bn1(self.conv1(x)))",
                                      "        if float(x.abs().sum()) >= 0:\n"
                                      "            x = F.relu(self.bn1(self.conv1(x)))")
    py = tmp_path / "dyn.py"
    py.write_text(src)
    module, label = load_torch_module("%s:make" % py, tn.caffe_state_dict(net))
    g = TorchGraph(module, label)
    assert g.how == "hooks"
    r = compare_torch(net, module)
    assert r.faithful, r.format()
    assert r.row("conv1@scale_conv1").tensor == "bn1" and r.row("fc").tensor == "fc"
    assert any("does not trace with torch.fx" in n for n in r.notes)


def test_a_module_taking_nhwc_is_fed_the_input_transposed(tmp_path, net):
    r = _compare(tmp_path, net, dict(prologue="nhwc"))
    assert r.faithful, r.format()
    assert any("N x H x W x C" in n and "transposed" in n for n in r.notes)
    assert "N x H x W x C" in r.format()


# ---------------------------------------------------------------------- the classic mistakes
MISTAKES = [
    # (source changes, state_dict changes, the first departing layer, the cause named)
    (dict(prologue="bgr_rgb"), {}, "conv1", "bgr_rgb"),
    ({}, dict(bgr=True), "conv1", "bgr_rgb"),
    (dict(prologue="scale_255"), {}, "conv1", "scale"),
    (dict(prologue="mean"), {}, "conv1", "mean"),
    (dict(eps=1e-3), {}, "bn_conv1", "batchnorm_eps"),
    (dict(ceil=False), {}, "pool1", "pool_ceil_floor"),
    (dict(dim=0), {}, "prob", "softmax_axis"),
    (dict(dropout_scale=0.5), {}, "drop", "dropout_scale"),
    ({}, dict(kernel="flipped"), "conv1", "kernel_flipped"),
    ({}, dict(kernel="transposed"), "conv1", "kernel_transposed"),
    ({}, dict(fc="reshaped"), "fc", "ip_weight_reshaped"),
    (dict(flatten="nhwc"), {}, "fc", "ip_flatten_order"),
    ({}, dict(split="no_scale"), "scale_conv1", "scale_missing"),
    ({}, dict(split="swapped"), "scale_conv1", "scale_gamma_beta_swapped"),
]


@pytest.mark.parametrize("src,sd,layer,kind", MISTAKES, ids=[m[3] + ("_weights" if m[1] and m[3] == "bgr_rgb" else "")
                                                             for m in MISTAKES])
def test_classic_mistake_is_found_and_named(tmp_path, net, src, sd, layer, kind):
    r = _compare(tmp_path, net, src, sd)
    assert not r.faithful
    assert r.first_departing == layer, r.format()
    d = _first_diag(r)
    assert d is not None and d.kind == kind, r.format()


def test_floor_pooling_the_module_cannot_run_past_is_a_note_not_an_error(tmp_path, net):
    r = _compare(tmp_path, net, dict(ceil=False))
    assert r.row("pool1").status == "shape"
    assert any("cannot run whole" in n and "module 'fc' (Linear)" in n for n in r.notes), r.notes
    assert not any("onnxruntime" in n for n in r.notes)


@pytest.mark.parametrize("names", ["own", "caffe"])
def test_batchnorm_eps_at_every_batchnorm_is_one_finding(tmp_path, net, names):
    r = _compare(tmp_path, net, dict(eps=1e-3, names=names), dict(names=names))
    assert r.first_departing == "bn_conv1", r.format()
    every = [d for d in r.diagnosis if d.kind == "batchnorm_eps"]
    assert len(every) == 1 and "3 of 3" in every[0].text and "eps 0.001" in every[0].text, r.format()
    assert len(r.diagnosis) == 1, r.format()


@pytest.mark.parametrize("sd", [dict(bgr=True), dict(kernel="flipped")], ids=["bgr", "flipped"])
def test_a_mistake_upstream_leaves_the_fused_batchnorms_alone(tmp_path, net, sd):
    """BatchNorm2d modules named as Caffe's BatchNorm layers (each computing BatchNorm +
    Scale), downstream of a departing convolution: paired with the Scale's value all the same
    (judged on their own part), so the one finding is the convolution's."""
    r = _compare(tmp_path, net, dict(names="caffe"), dict(names="caffe", **sd))
    assert r.first_departing == "conv1", r.format()
    assert len(r.diagnosis) == 1, r.format()
    assert r.row("conv1@scale_conv1").tensor == "bn_conv1" and r.row("conv1@scale_conv1").status == "ok"


# ---------------------------------------------------------------------- bad input
def test_a_module_that_raises_names_the_module_and_the_exception(tmp_path, net):
    py = tmp_path / "bad.py"
    py.write_text(tn.module_source().replace("x = self.pool1(x)", "x = self.pool1(x)[:, :5]"))
    with pytest.raises(PortError, match=r"raised in module 'block_conv1' \(Conv2d\): RuntimeError: .*channels"):
        compare_torch(net, "%s:make" % py, tn.caffe_state_dict(net))


def test_bad_files_factories_and_state_dicts_are_clear_errors(tmp_path, net):
    py = tn.write_port(tmp_path)
    with pytest.raises(PortError, match="missing.py: no such Python file"):
        load_torch_module(str(tmp_path / "missing.py"))
    with pytest.raises(PortError, match="no class or function 'nope'"):
        load_torch_module("%s:nope" % py)
    (tmp_path / "syntax.py").write_text("import torch\n\ndef make(:\n    pass\n")
    with pytest.raises(PortError, match=r"syntax.py:3: cannot import the module: SyntaxError"):
        load_torch_module(str(tmp_path / "syntax.py"))
    (tmp_path / "boom.py").write_text("import torch\n\n\ndef make():\n    raise ValueError('no weights here')\n")
    with pytest.raises(PortError, match=r"boom.py:make\(\): raised ValueError: no weights here"):
        load_torch_module("%s:make" % (tmp_path / "boom.py"))
    sd = tn.caffe_state_dict(net)
    sd["fc.weight"] = sd["fc.weight"][:, :100]
    del sd["conv1.bias"]
    with pytest.raises(PortError, match=r"missing conv1.bias.*fc.weight is 10x100 in the file, 10x512 in the module"):
        load_torch_module("%s:make" % py, sd)
    (tmp_path / "junk.pth").write_bytes(b"not a state dict")
    with pytest.raises(PortError, match="junk.pth: cannot read it as a PyTorch state_dict"):
        load_torch_module("%s:make" % py, str(tmp_path / "junk.pth"))


# ---------------------------------------------------------------------- the command
def test_command_torch_port_exit_codes(tmp_path, net):
    net.save(str(tmp_path / "w.caffemodel"))
    good = tn.write_port(tmp_path, "good.py")
    bad = tn.write_port(tmp_path, "bad.py", ceil=False)
    pth = tn.save_state_dict(tmp_path, net)
    base = ["compare-port", str(tmp_path / "resnetish.prototxt"), "--weights", str(tmp_path / "w.caffemodel")]
    code, out, err = tn.run_cli(base + ["--torch", "%s:make" % good, "--state-dict", str(pth)])
    assert code == 0, out + err
    assert "Faithful" in out and "good.py:make" in out
    code, out, err = tn.run_cli(base + ["--torch", str(bad), "--state-dict", str(pth)])     # the file's only class
    assert code == 3, out + err
    assert "First departing layer: pool1" in out and "floor" in out
    raising = tmp_path / "raising.py"
    raising.write_text(tn.module_source().replace("x = self.pool1(x)", "x = self.pool1(x)[:, :5]"))
    code, out, err = tn.run_cli(base + ["--torch", str(raising), "--state-dict", str(pth)])
    assert code == 1 and "block_conv1" in err and "Traceback" not in err
    code, out, err = tn.run_cli(base + ["--onnx", "x.onnx", "--state-dict", str(pth)])
    assert code == 2 and "--state-dict goes with --torch" in err
    code, out, err = tn.run_cli(base + ["--onnx", "x.onnx", "--torch", str(good)])
    assert code == 2


def test_input_values_reach_the_module_unchanged(tmp_path, net):
    x = np.random.default_rng(3).uniform(0, 1, (2, 3, 16, 16)).astype(np.float32)
    r = _compare(tmp_path, net, inputs={"data": x})
    assert r.faithful, r.format()
    np.testing.assert_array_equal(net.blobs["data"].data, x)


# ---------------------------------------------------------------------- the other direction
def test_caffe_conversion_of_a_torch_model_checked_against_it(tmp_path):
    """--reference torch: the PyTorch module is the truth, the Caffe net (as a PyTorch-to-Caffe
    converter wrote it, for an NPU) is checked against it, each Caffe layer run on the module's
    values of its inputs."""
    module, _ = load_torch_module("%s:make" % tn.write_torch_model(tmp_path))
    net, _ = tn.caffe_of_torch(tmp_path, module)
    r = compare_torch(net, module, reference="torch")
    assert r.faithful, r.format()
    assert any(n.startswith("reference: the PyTorch module Small") for n in r.notes)
    assert r.row("bn1@bn1_scale").tensor == "bn1" and r.row("fc").tensor == "fc"
    # the converter left BatchNorm's eps at Caffe's default: found at bn1, and what to change said
    bad, _ = tn.caffe_of_torch(tmp_path, module, eps="1e-5", name="bad.prototxt")
    r = compare_torch(bad, module, reference="torch")
    assert not r.faithful and r.first_departing == "bn1", r.format()
    d = _first_diag(r)
    assert d.kind == "batchnorm_eps" and "0.001 in the PyTorch module" in d.text and "1e-05" in d.text
    assert all(r.row(v).status == "ok" for v in ("conv1", "conv2", "fc"))     # their own arithmetic
    # the converter flipped conv2's kernel
    flipped, _ = tn.caffe_of_torch(tmp_path, module, name="flipped.prototxt")
    w = flipped.layer_dict["conv2"].blobs[0]
    w.data[...] = w.data[:, :, ::-1, ::-1].copy()
    r = compare_torch(flipped, module, reference="torch")
    assert r.first_departing == "conv2" and _first_diag(r).kind == "kernel_flipped", r.format()


def test_command_reference_torch(tmp_path):
    py = tn.write_torch_model(tmp_path)
    module, _ = load_torch_module("%s:make" % py)
    net, proto = tn.caffe_of_torch(tmp_path, module, eps="1e-5")
    net.save(str(tmp_path / "conv.caffemodel"))
    code, out, err = tn.run_cli(["compare-port", str(proto), "--weights", str(tmp_path / "conv.caffemodel"),
                           "--torch", "%s:make" % py, "--reference", "torch"])
    assert code == 3, out + err
    assert "First departing layer: bn1 (BatchNorm)" in out and "reference: the PyTorch module" in out
    assert out.startswith("Net ") and "(converted) vs its reference " in out.splitlines()[0], out
    assert compare_torch(net, module).format().startswith("Port ")      # the other way: the usual header
    code, out, err = tn.run_cli(["compare-port", str(proto), "--onnx", "x.onnx", "--reference", "torch"])
    assert code == 2 and "--reference torch goes with --torch" in err


def test_a_fresh_net_with_a_loose_rtol_pairs_the_scale_with_its_bias(tmp_path):
    """A net without weights (BatchNorm statistics 0: values ~300x the input) against its own
    export-torch module at rtol 1e-3: the Scale's Mul, before its bias, is within rtol of the
    Scale's value too; the closer tensor, the Add, is the Scale's."""
    from engine.ports.torch_export import export_torch
    net, _ = tn.make_net(tmp_path)
    for layer in net.layers:
        if layer.type == "BatchNorm":
            for b in layer.blobs:
                b.data[...] = 0
    res = export_torch(net, tmp_path / "fresh.py")
    x = np.random.default_rng(0).uniform(0, 1, (2, 3, 16, 16)).astype(np.float32)
    r = compare_torch(net, str(res.path), str(res.state_dict_path), inputs={"data": x}, rtol=1e-3)
    assert r.faithful, r.format()
    assert r.row("conv1@scale_conv1").tensor.startswith("add")


def test_graph_names_a_module_by_its_path_once_and_every_tensor_once(tmp_path):
    py = tmp_path / "twice.py"
    py.write_text("""
import torch.nn as nn
import torch.nn.functional as F


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.relu = nn.ReLU()
        self.block = nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU())

    def forward(self, x):
        x = self.relu(self.conv(x))
        x = F.relu(self.conv(x)) + self.relu(x)
        return self.block(x)
""")
    module, label = load_torch_module(str(py))
    for how in ("fx", "hooks"):
        g = TorchGraph(module, label)
        if how == "hooks":                    # as if it did not trace
            g.calls, g.how, g.inputs = {}, "hooks", ["x"]
        vals = g.run_all({"x": np.ones((1, 3, 4, 4), np.float32)})
        assert len(set(g.order)) == len(g.order) == len([t for t in g.order if t in vals]), (how, g.order)
        assert {"conv", "relu", "block.0", "block.1"} <= set(g.order), (how, g.order)
        assert sum(1 for t in g.order if g.op(t) == "Relu") == 4 and sum(1 for t in g.order if g.op(t) == "Conv") == 3


def test_a_module_in_float64_is_fed_float64(tmp_path, net):
    module, _ = load_torch_module("%s:make" % tn.write_port(tmp_path), tn.caffe_state_dict(net))
    r = compare_torch(net, module.double())
    assert r.faithful, r.format()

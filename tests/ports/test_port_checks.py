"""What a port comparison proves: nothing when every value compared is constant; and the
weights: a net without weights against a port with its own, the port's weights copied into
the net through the comparison's pairing, then faithful."""
import re

import numpy as np
import pytest

import engine
from engine.ports import port_checks as pc


def _no_fillers(text):
    return re.sub(r"(bias_)?(weight_)?filler \{[^}]*\}", "", text)


def test_a_net_of_zeros_proves_nothing(tmp_path):
    """A deploy file without fillers and no weights, against a PyTorch port of zeros: faithful
    as far as the arithmetic goes, and it says it proves nothing (the CLI too)."""
    torch = pytest.importorskip("torch")
    import io

    import torch_nets as tn

    from engine.ports.torch_port import compare_torch, load_torch_module
    from engine.tools.cli import main
    p = tmp_path / "zeros.prototxt"
    p.write_text(_no_fillers(tn.RESNETISH))             # every weight 0
    net = engine.Net(str(p), engine.TEST)
    assert all(not np.any(b.data) for layer in net.layers for b in layer.blobs if layer.type != "Scale")
    py = tn.write_port(tmp_path)
    sd = {k: torch.zeros_like(v) + (1 if k.endswith("running_var") else 0)
          for k, v in tn.caffe_state_dict(tn.make_net(tmp_path, name="w.prototxt")[0]).items()}
    module, _ = load_torch_module("%s:make" % py, sd)
    r = compare_torch(net, module)
    assert r.proves_nothing and r.message.startswith("Proves nothing"), r.format()
    torch.save(sd, str(tmp_path / "zeros.pth"))
    out, err = io.StringIO(), io.StringIO()
    code = main(["compare-port", str(p), "--torch", "%s:make" % py, "--state-dict", str(tmp_path / "zeros.pth")],
                out, err)
    assert code == 0 and "Proves nothing" in out.getvalue() and "Faithful" not in out.getvalue(), out.getvalue()
    # the same port against the net with its weights proves something
    full, _ = tn.make_net(tmp_path, name="full.prototxt")
    module, _ = load_torch_module("%s:make" % py, tn.caffe_state_dict(full))
    r = compare_torch(full, module)
    assert r.faithful and not r.proves_nothing


@pytest.mark.parametrize("names", ["own", "caffe"])
def test_torch_port_weights_copied_into_a_net_without_weights(tmp_path, names):
    torch = pytest.importorskip("torch")
    import torch_nets as tn

    from engine.ports.compare import compare_port
    from engine.ports.torch_port import TorchGraph, load_torch_module
    torch.set_num_threads(1)
    other, _ = tn.make_net(tmp_path, seed=9, name="other.prototxt")
    py = tn.write_port(tmp_path, names=names)
    module, label = load_torch_module("%s:make" % py, tn.caffe_state_dict(other, names=names))
    graph = TorchGraph(module, label)
    net, _ = tn.make_net(tmp_path, seed=5)                  # fillers' weights: not the port's
    first = compare_port(net, graph)
    assert not first.faithful
    assert first.diagnosis and first.diagnosis[0].kind == "weights_differ", first.format()   # TorchGraph.constants
    why = pc.weights_differ(net, graph)
    assert "the weights differ" in why and "state_dict" in why and "conv1" in why
    copy = pc.copy_port_weights(net, graph)
    result = compare_port(net, graph)
    assert copy.copied == [n for n in net.layer_names if net.layer_dict[n].blobs], copy.summary()
    L, O = net.layer_dict, other.layer_dict
    np.testing.assert_array_equal(L["fc"].blobs[0].data, O["fc"].blobs[0].data)
    np.testing.assert_allclose(L["bn_conv1"].blobs[1].data, O["bn_conv1"].blobs[1].data / O["bn_conv1"].blobs[2].data,
                               rtol=1e-6)
    assert result.faithful, result.format()
    assert pc.weights_differ(net, graph) is None


def test_onnx_port_weights_copied_into_a_net_without_weights(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import port_nets as pn

    from engine.ports.compare import compare_port
    from engine.ports.onnx_port import OnnxPort
    other, _ = pn.make_net(tmp_path, seed=8, name="other.prototxt")
    port = OnnxPort(pn.rename_all(pn.build_port(other)), "port")
    net, _ = pn.make_net(tmp_path, seed=3)
    assert not compare_port(net, port).faithful
    assert "initializers" in pc.weights_differ(net, port)
    assert pc.weights_differ(other, port) is None       # the port's own net: the same weights
    copy = pc.copy_port_weights(net, port)
    result = compare_port(net, port)
    assert result.faithful, result.format()
    assert set(copy.copied) == {"conv1", "bn1", "scale1", "ip1"}
    np.testing.assert_array_equal(net.layer_dict["scale1"].blobs[1].data, other.layer_dict["scale1"].blobs[1].data)


def test_export_torch_module_weights_copied(tmp_path):
    """export-torch's module: its Scale and InnerProduct are modules of its own (CaffeScale,
    an nn.Linear subclass), their weights found all the same."""
    torch = pytest.importorskip("torch")
    import port_nets as pn

    from engine.ports import export_torch
    from engine.ports.compare import compare_port
    from engine.ports.torch_port import TorchGraph, load_torch_module
    torch.set_num_threads(1)
    other, _ = pn.make_net(tmp_path, seed=8, name="other.prototxt")
    res = export_torch(other, tmp_path / "other.py")
    module, label = load_torch_module(str(res.path), str(res.state_dict_path))
    graph = TorchGraph(module, label)
    net, _ = pn.make_net(tmp_path, seed=3)
    assert "the weights differ" in pc.weights_differ(net, graph)
    copy = pc.copy_port_weights(net, graph)
    assert copy.copied == ["conv1", "bn1", "scale1", "ip1"], copy.summary()
    assert compare_port(net, graph).faithful


def test_without_torch_the_torch_port_says_which_extra(tmp_path, monkeypatch):
    """torch is an extra: without it, --torch stops with a message naming the extra (exit 1),
    and --tensors, which needs neither torch nor onnx, still works."""
    import builtins
    import io
    import sys

    import port_nets as pn

    from engine.ports.activations import MissingDependency
    from engine.ports.tensors_port import compare_tensors
    from engine.ports.torch_port import compare_torch
    from engine.tools.cli import main
    real = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real(name, *a, **k)
    for mod in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    net, proto = pn.make_net(tmp_path)
    (tmp_path / "m.py").write_text("def make():\n    return None\n")
    with pytest.raises(MissingDependency, match=r"needs the Python package 'torch'.*caffe-inspector\[torch\]"):
        compare_torch(net, "%s:make" % (tmp_path / "m.py"))
    out, err = io.StringIO(), io.StringIO()
    assert main(["compare-port", str(proto), "--torch", str(tmp_path / "m.py")], out, err) == 1
    assert "caffe-inspector[torch]" in err.getvalue() and "Traceback" not in err.getvalue()
    # a dump made by the engine itself (names as Caffe's blobs), compared without torch
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    net.blobs["data"].data[...] = x
    net.Forward()
    np.savez(tmp_path / "dump.npz", data=x, **{b: np.array(net.blobs[b].data) for b in ("pool1", "norm1", "prob")})
    r = compare_tensors(net, tmp_path / "dump.npz")
    assert r.faithful, r.format()
    assert r.row("norm1").tensor == "norm1" and r.row("norm1").matched == "name"

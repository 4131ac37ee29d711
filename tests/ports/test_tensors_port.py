"""compare-port --tensors: any runtime's tensors (a .npz of name -> array, as dumped from
TensorRT, OpenVINO, NCNN or an NPU simulator) against the Caffe net: paired by name, then by
shape and order; own errors from the engine's layers run on the dump's values."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch_nets as tn  # noqa: E402
from torch_nets import one_thread  # noqa: E402,F401 - the fixture

from engine.ports.activations import PortError  # noqa: E402
from engine.ports.tensors_port import TensorDump, compare_tensors  # noqa: E402
from engine.ports.torch_port import TorchGraph, load_torch_module  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def net(tmp_path):
    return tn.make_net(tmp_path)[0]


def _dump(tmp_path, net, src=None, sd=None, strip=False, nhwc=False, name="dump.npz"):
    """What a runtime running the hand-written port dumps: every tensor in the order computed,
    the input first (a runtime of our own here: the port run by torch)."""
    module, label = load_torch_module("%s:make" % tn.write_port(tmp_path, **(src or {})),
                                      tn.caffe_state_dict(net, **(sd or {})))
    g = TorchGraph(module, label)
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    vals = g.run_all({"x": x})
    d = {k: vals[k] for k in g.order if k in vals}
    if nhwc:
        d = {k: (v.transpose(0, 2, 3, 1) if v.ndim == 4 else v) for k, v in d.items()}
    path = tmp_path / name
    if strip:
        np.savez(path, *d.values())             # arr_0, arr_1, ...: no names at all
    else:
        np.savez(path, **d)
    return path, x


@pytest.mark.parametrize("strip", [False, True], ids=["names", "stripped"])
def test_a_faithful_runtime_dump_by_name_and_without_names(tmp_path, net, strip):
    path, x = _dump(tmp_path, net, strip=strip)
    r = compare_tensors(net, path)
    assert r.faithful, r.format()
    np.testing.assert_array_equal(net.blobs["data"].data, x)          # the dump's input fed the net
    assert r.row("data").tensor == ("arr_0" if strip else "x")
    row = r.row("conv1@scale_conv1")
    assert row.tensor == ("arr_2" if strip else "bn1") and row.group == ["bn_conv1", "scale_conv1"]
    assert r.row("pool1").tensor == ("arr_4" if strip else "pool1")
    assert r.row("pool1").matched == ("topology" if strip else "name")
    assert r.row("prob").matched == "topology"                         # "softmax": by shape and order
    assert r.outputs[0]["tensor"] == ("arr_14" if strip else "softmax")


@pytest.mark.parametrize("strip", [False, True], ids=["names", "stripped"])
@pytest.mark.parametrize("src,sd,layer,kind", [
    (dict(eps=1e-3), {}, "bn_conv1", "batchnorm_eps"),
    ({}, dict(bgr=True), "conv1", "kernel_channels_reversed"),
    (dict(ceil=False), {}, "pool1", "pool_ceil_floor"),
    ({}, dict(split="no_scale"), "scale_conv1", "scale_missing"),
], ids=["eps", "bgr_weights", "floor", "scale_missing"])
def test_a_bug_in_the_runtime_is_found_at_its_layer(tmp_path, net, strip, src, sd, layer, kind):
    path, _ = _dump(tmp_path, net, src, sd, strip=strip)
    r = compare_tensors(net, path)
    assert not r.faithful
    assert r.first_departing == layer, r.format()
    assert r.diagnosis and r.diagnosis[0].kind == kind, r.format()
    assert len(r.diagnosis) == 1, r.format()          # no false alarm downstream


def test_a_dump_in_nhwc_is_transposed(tmp_path, net):
    path, _ = _dump(tmp_path, net, nhwc=True)
    r = compare_tensors(net, path)
    assert r.faithful, r.format()
    assert any("N x H x W x C" in n for n in r.notes)


def test_a_dump_without_its_input(tmp_path, net):
    path, x = _dump(tmp_path, net)
    with np.load(path) as z:
        d = {k: z[k] for k in z.files if k != "x"}
    np.savez(tmp_path / "noinput.npz", **d)
    with pytest.raises(PortError, match="noinput.npz: no tensor is the net's input 'data'.*give it"):
        compare_tensors(net, tmp_path / "noinput.npz")
    r = compare_tensors(net, tmp_path / "noinput.npz", {"data": x})
    assert r.faithful, r.format()
    with pytest.raises(PortError, match="not the input given"):
        compare_tensors(net, path, {"data": x + 1})


def test_bad_dumps_are_clear_errors(tmp_path, net):
    with pytest.raises(PortError, match="nope.npz: no such tensor dump"):
        TensorDump.load(tmp_path / "nope.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(PortError, match="junk.npz: not a NumPy .npz of named arrays"):
        TensorDump.load(tmp_path / "junk.npz")
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(PortError, match="one.npy: not a NumPy .npz"):
        TensorDump.load(tmp_path / "one.npy")


def test_command_tensors(tmp_path, net):
    net.save(str(tmp_path / "w.caffemodel"))
    good, _ = _dump(tmp_path, net, name="good.npz")
    bad, _ = _dump(tmp_path, net, dict(eps=1e-3), strip=True, name="bad.npz")
    base = ["compare-port", str(tmp_path / "resnetish.prototxt"), "--weights", str(tmp_path / "w.caffemodel")]
    code, out, err = tn.run_cli(base + ["--tensors", str(good)])
    assert code == 0, out + err
    assert "Faithful" in out
    code, out, err = tn.run_cli(base + ["--tensors", str(bad)])
    assert code == 3, out + err
    assert "First departing layer: bn_conv1 (BatchNorm)" in out and "eps 0.001" in out and "arr_2" in out
    code, out, err = tn.run_cli(base + ["--tensors", str(tmp_path / "w.caffemodel")])
    assert code == 1 and "not a NumPy .npz" in err


def test_the_input_given_as_a_file_is_checked_against_the_dumps(tmp_path, net):
    path, x = _dump(tmp_path, net)
    np.save(tmp_path / "x.npy", x)
    assert compare_tensors(net, path, {"data": str(tmp_path / "x.npy")}).faithful
    np.save(tmp_path / "other.npy", x * 2)
    with pytest.raises(PortError, match="the dump was made from another input"):
        compare_tensors(net, path, {"data": str(tmp_path / "other.npy")})

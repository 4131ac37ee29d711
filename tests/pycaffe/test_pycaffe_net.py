"""pycaffe's Net methods: forward/backward over a layer range (what they return), their
input checks, and save_hdf5/load_hdf5 in Caffe's HDF5 layout."""
import h5py
import numpy as np
import pytest

import engine
from engine.core.errors import CaffeError, ShapeError

NET = """
name: "steps"
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "out"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.5 }
                        bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "act" type: "TanH" bottom: "out" top: "act" }
layer { name: "ip2" type: "InnerProduct" bottom: "act" top: "score"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
"""


@pytest.fixture
def net(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(NET)
    engine.set_random_seed(3)
    n = engine.Net(str(path), engine.TEST)
    n.blobs["data"].data[...] = np.random.default_rng(0).standard_normal((4, 3))
    return n


def test_forward_to_a_layer_returns_its_tops_not_its_name(net):
    """The layer ``ip`` writes top ``out``: forward(end='ip') returns {'out': ...}."""
    out = net.forward(end="ip")
    assert list(out) == ["out"]
    w, b = net.params["ip"][0].data, net.params["ip"][1].data
    np.testing.assert_allclose(out["out"], net.blobs["data"].data @ w.T + b, rtol=1e-5)
    assert out["out"] is not None and np.shares_memory(out["out"], net.blobs["out"].data)


def test_forward_range_with_extra_blobs(net):
    net.forward(end="act")
    out = net.forward(start="ip2", end="ip2", blobs=["act", "score"])
    assert sorted(out) == ["act", "score"]
    np.testing.assert_allclose(out["score"], net.blobs["act"].data @ net.params["ip2"][0].data.T
                               + net.params["ip2"][1].data, rtol=1e-5)
    assert list(net.forward()) == ["score"]                # no end: the net's outputs


def test_backward_to_a_layer_returns_its_bottoms_diffs(net):
    net.forward()
    net.blobs["out"].diff[...] = 1.0
    diffs = net.backward(start="ip", end="ip")
    assert list(diffs) == ["data"]
    np.testing.assert_allclose(diffs["data"], np.ones((4, 5)) @ net.params["ip"][0].data, rtol=1e-5)
    diffs = net.backward(start="ip2", end="act", diffs=["score"])
    assert sorted(diffs) == ["out", "score"]
    assert list(net.backward()) == ["data"]                # no end: the net's inputs


def test_forward_and_backward_kwargs_set_inputs_and_output_diffs(net):
    x = np.full((4, 3), 0.5, np.float32)
    out = net.forward(data=x)
    assert (net.blobs["data"].data == 0.5).all() and out["score"].shape == (4, 2)
    diffs = net.backward(score=np.ones((4, 2), np.float32))
    assert (net.blobs["score"].diff == 1).all() and diffs["data"].shape == (4, 3)


def test_kwargs_checks_carry_pycaffes_messages(net):
    with pytest.raises(Exception, match="^Input blob arguments do not match net inputs."):
        net.forward(score=np.zeros((4, 2)))
    with pytest.raises(Exception, match="^Input is not batch sized"):
        net.forward(data=np.zeros((3, 3)))
    with pytest.raises(Exception, match="^Top diff arguments do not match net outputs."):
        net.backward(data=np.zeros((4, 3)))
    with pytest.raises(Exception, match="^Diff is not batch sized"):
        net.backward(score=np.zeros((2, 2)))
    with pytest.raises(CaffeError, match="Unknown layer name 'nope'"):
        net.forward(end="nope")


SHARED = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "data" top: "a" param { name: "w" } param { name: "b" }
  inner_product_param { num_output: 3 weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } } }
layer { name: "b" type: "InnerProduct" bottom: "a" top: "b" param { name: "w" } param { name: "b" }
  inner_product_param { num_output: 3 } }
layer { name: "c" type: "InnerProduct" bottom: "b" top: "c"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
"""


def _shared_net(tmp_path, seed):
    path = tmp_path / "shared.prototxt"
    path.write_text(SHARED)
    engine.set_random_seed(seed)
    return engine.Net(str(path), engine.TRAIN)


def test_save_hdf5_writes_caffes_layout(tmp_path):
    """Net::ToHDF5: data/<layer>/<param index>, only the params a layer owns."""
    net = _shared_net(tmp_path, 1)
    net.save_hdf5(str(tmp_path / "w.h5"))
    with h5py.File(tmp_path / "w.h5", "r") as f:
        assert list(f) == ["data"]
        assert sorted(f["data"]) == ["a", "b", "c", "data"]
        assert sorted(f["data/a"]) == ["0", "1"] and len(f["data/b"]) == 0 and len(f["data/data"]) == 0
        assert f["data/c/0"].dtype == np.float32 and f["data/c/0"].shape == (2, 3)
        np.testing.assert_array_equal(f["data/a/0"][...], net.params["a"][0].data)


def test_load_hdf5_restores_owned_and_shared_params(tmp_path):
    net = _shared_net(tmp_path, 1)
    net.save_hdf5(str(tmp_path / "w.h5"))
    other = _shared_net(tmp_path, 2)
    assert not np.array_equal(other.params["c"][0].data, net.params["c"][0].data)
    other.load_hdf5(str(tmp_path / "w.h5"))
    for name in ("a", "b", "c"):
        for x, y in zip(net.params[name], other.params[name]):
            np.testing.assert_array_equal(x.data, y.data)
    third = _shared_net(tmp_path, 3)
    third.copy_from(str(tmp_path / "w.h5"))                  # the .h5 extension picks HDF5
    np.testing.assert_array_equal(third.params["c"][0].data, net.params["c"][0].data)


def test_hdf5_diff_and_mismatches(tmp_path):
    net = _shared_net(tmp_path, 1)
    net.ToHDF5(str(tmp_path / "d.h5"), write_diff=True)
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert sorted(f["diff/b"]) == ["0", "1"]             # diffs of every param, shared ones too
    with h5py.File(tmp_path / "bad.h5", "w") as f:
        f.create_dataset("data/c/0", data=np.zeros((3, 3), np.float32))
    with pytest.raises(ShapeError, match="Cannot load blob from hdf5; shape mismatch. Source shape is 3 3 "):
        net.load_hdf5(str(tmp_path / "bad.h5"))
    with h5py.File(tmp_path / "many.h5", "w") as f:
        for i in range(3):
            f.create_dataset("data/c/%d" % i, data=np.zeros((2, 3), np.float32))
    with pytest.raises(ShapeError, match="Incompatible number of blobs for layer c"):
        net.load_hdf5(str(tmp_path / "many.h5"))
    with h5py.File(tmp_path / "few.h5", "w") as f:
        f.create_dataset("data/a/0", data=np.zeros((3, 3), np.float32))
    with pytest.raises(ShapeError, match="Incompatible number of blobs for layer a"):
        net.load_hdf5(str(tmp_path / "few.h5"))          # 'a' owns its bias: it must be there


def test_legacy_constructor_warns_as_pycaffe(tmp_path, net, caplog):
    net.save(str(tmp_path / "w.caffemodel"))
    with caplog.at_level("WARNING", logger="engine"):
        legacy = engine.Net(str(tmp_path / "net.prototxt"), str(tmp_path / "w.caffemodel"), engine.TEST)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings[:3] == ["DEPRECATION WARNING - deprecated use of Python interface",
                            'Use this instead (with the named "weights" parameter):',
                            "Net('%s', 1, weights='%s')" % (tmp_path / "net.prototxt", tmp_path / "w.caffemodel")]
    np.testing.assert_array_equal(legacy.params["ip"][0].data, net.params["ip"][0].data)


def test_a_layers_setup_and_reshape_as_pycaffe_exposes_them(net):
    layer = net.layer_dict["ip"]
    assert layer.type == "InnerProduct" and len(layer.blobs) == 2
    bottom, top = net.bottom_vecs[1], net.top_vecs[1]
    net.blobs["data"].reshape(6, 3)
    layer.reshape(bottom, top)
    assert net.blobs["out"].shape == (6, 5)
    layer.setup(bottom, top)                 # LayerSetUp: keeps the params it has
    assert net.params["ip"][0].shape == (5, 3)


@pytest.mark.gpu
def test_gpu_pointers_and_timer(net):
    from engine.core import backend
    from engine.pycaffe import Timer
    backend.set_mode_gpu()
    try:
        blob = net.blobs["data"]
        ptr = blob._gpu_data_ptr
        assert ptr == int(blob.get_data(gpu=True).data.ptr) and blob._gpu_diff_ptr != ptr
        t = Timer()
        t.start()
        net.forward()
        assert t.ms >= 0.0
    finally:
        backend.set_mode_cpu()

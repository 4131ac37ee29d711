"""pycaffe's vector classes (``caffe._caffe.BlobVec``, ``RawBlobVec``, ``LayerVec``,
``StringVec``, ``IntVec``, ``DtypeVec``, ``NetVec``, ``BoolVec``: boost.python's
vector_indexing_suite in ``_caffe.cpp``), returned where pycaffe returns them, and
``caffe._caffe.Layer`` as the class of every layer."""
import copy
import os
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import engine
import engine.pycaffe as caffe
from engine.proto import caffe_pb2
from engine.pycaffe import _caffe as C

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"

NET = """name: "small"
layer { name: "data" type: "Input" top: "data" top: "target"
  input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } shape { dim: 2 dim: 3 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "ip" type: "InnerProduct" bottom: "conv1" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "target" top: "loss" loss_weight: 0.1 }
"""


@pytest.fixture
def net(tmp_path):
    path = tmp_path / "small.prototxt"
    path.write_text(NET)
    return engine.Net(str(path), engine.TRAIN)


# ------------------------------------------------------------------ where pycaffe returns them
def test_the_net_hands_out_pycaffes_vector_classes(net):
    assert type(net.params) is OrderedDict and list(net.params) == ["conv1", "ip"]
    for name, blobs in net.params.items():
        assert type(blobs) is C.BlobVec and type(blobs) is caffe._caffe.BlobVec
        assert blobs is net.layer_dict[name].blobs            # the layer's own vector
    assert net.params["conv1"] is net.params["conv1"]          # made once, as pycaffe caches it
    assert type(net.layers) is C.LayerVec and len(net.layers) == 5
    assert all(type(layer.blobs) is C.BlobVec for layer in net.layers)
    assert type(net._blobs) is C.BlobVec and list(net._blobs) == list(net.blobs.values())
    assert type(net._blob_names) is C.StringVec and list(net._blob_names) == list(net.blobs)
    assert type(net._layer_names) is C.StringVec
    assert list(net._layer_names) == ["data", "conv1", "relu1", "ip", "loss"]
    assert type(net._inputs) is C.IntVec and list(net._inputs) == [0, 1]
    assert type(net._outputs) is C.IntVec and [net._blob_names[i] for i in net._outputs] == ["loss"]
    assert type(net._bottom_ids(3)) is C.IntVec and list(net._bottom_ids(3)) == [2]
    assert type(net._top_ids(0)) is C.IntVec and list(net._top_ids(0)) == [0, 1]
    assert type(net._blob_loss_weights) is C.DtypeVec
    assert list(net._blob_loss_weights) == [0.0, 0.0, 0.0, 0.0, float(np.float32(0.1))]
    assert net.blob_loss_weights["loss"] == float(np.float32(0.1))
    # pycaffe.py makes inputs and outputs Python lists (of names), top/bottom_names lists too
    assert type(net.inputs) is list and net.inputs == ["data", "target"] and net.inputs is net.inputs
    assert type(net.outputs) is list and net.outputs == ["loss"]
    assert type(net.top_names["data"]) is list and net.top_names["data"] == ["data", "target"]
    assert not isinstance(net.layers, list) and not isinstance(net.params["ip"], list)


def test_the_type_idioms_of_merge_and_pruning_scripts(net):
    kept = [k for k in net.params if type(net.params[k]) is caffe._caffe.BlobVec]
    assert kept == ["conv1", "ip"]
    assert not [k for k in net.params if type(net.params[k]) is not caffe._caffe.BlobVec]
    assert repr(type(net.params["ip"])) == "<class 'caffe._caffe.BlobVec'>"
    assert repr(net.params["ip"]).startswith("<caffe._caffe.BlobVec object at 0x")


def test_every_layer_is_a_caffe_layer(net, tmp_path):
    for layer in net.layers:
        assert isinstance(layer, caffe.Layer) and isinstance(layer, C.Layer) and isinstance(layer, engine.Layer)
        assert issubclass(type(layer), caffe.Layer)
    assert caffe.Layer is C.Layer is engine.Layer
    assert repr(caffe.Layer) == "<class 'caffe._caffe.Layer'>"
    assert not isinstance(net, caffe.Layer) and not isinstance(net.params["ip"][0], caffe.Layer)
    assert not issubclass(int, caffe.Layer)


def test_a_solvers_test_nets_is_a_netvec(tmp_path):
    (tmp_path / "net.prototxt").write_text(textwrap.dedent("""
        layer { name: "d" type: "DummyData" top: "x" top: "y"
          dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
            data_filler { type: "gaussian" } data_filler { type: "gaussian" } } }
        layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z" inner_product_param { num_output: 2 } }
        layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
        """))
    (tmp_path / "solver.prototxt").write_text('net: "%s"\ntest_iter: 1\ntest_iter: 1\ntest_interval: 100\n'
                                              'test_net: "%s"\ntest_net: "%s"\nbase_lr: 0.1\nmax_iter: 1\n'
                                              % ((tmp_path / "net.prototxt",) * 3))
    solver = caffe.SGDSolver(str(tmp_path / "solver.prototxt"))
    nets = solver.test_nets
    assert type(nets) is C.NetVec and len(nets) == 2
    assert all(isinstance(n, caffe.Net) for n in nets) and nets[-1] is nets[1]
    nets[0].share_with(solver.net)
    assert nets[0].params["ip"][0].data is not None


# ------------------------------------------------------------------ the suite's behaviour
def test_indexing_as_the_suite_does_it(net):
    names = net._layer_names
    assert names[0] == "data" and names[-1] == "loss" and names[-5] == "data"
    with pytest.raises(IndexError, match="^Index out of range$"):
        names[5]
    with pytest.raises(IndexError, match="^Index out of range$"):
        names[-6]
    for bad in ("0", 1.0, None):
        with pytest.raises(TypeError, match="^Invalid index type$"):
            names[bad]
    assert names[np.int64(1)] == "conv1"               # a NumPy integer too (boost takes only int)
    layers = net.layers
    assert layers[True] is layers[1]


def test_slicing_as_the_suite_does_it(net):
    names = net._layer_names
    part = names[1:3]
    assert type(part) is C.StringVec and list(part) == ["conv1", "relu1"]
    assert list(names[-2:]) == ["ip", "loss"] and list(names[:-4]) == ["data"]
    assert list(names[3:1]) == [] and list(names[-100:100]) == list(names)
    with pytest.raises(IndexError, match="^slice step size not supported.$"):
        names[::2]
    with pytest.raises(IndexError, match="^slice step size not supported.$"):
        names[::1]
    blobs = net.params["conv1"][:]
    assert type(blobs) is C.BlobVec and blobs is not net.params["conv1"]
    assert blobs[0] is net.params["conv1"][0]             # a new vector of the same blobs


def test_membership_iteration_and_length(net):
    names = net._layer_names
    assert "conv1" in names and "nope" not in names and 1 not in names and None not in names
    assert b"conv1" in names                               # bytes convert to std::string
    w = net.params["ip"][0]
    assert w in net.params["ip"] and w not in net.params["conv1"]
    assert net.layers[1] in net.layers and "conv1" not in net.layers
    assert 1 in net._inputs and 1.0 not in net._inputs and "1" not in net._inputs
    assert [b.shape for b in net.params["ip"]] == [(3, 64), (3,)]
    assert len(net.params["ip"]) == 2 and bool(net.params["ip"]) and not bool(C.IntVec())
    assert list(reversed(net._layer_names))[0] == "loss"
    assert [name for name, _ in zip(net._layer_names, net.layers)] == list(net._layer_names)


def test_append_extend_assign_and_delete(net):
    ids = C.IntVec()
    ids.append(3)
    ids.extend([4, 5])
    ids.extend(range(6, 8))
    assert list(ids) == [3, 4, 5, 6, 7]
    ids[0] = 9
    ids[-1] = 8
    assert list(ids) == [9, 4, 5, 6, 8]
    ids[1:3] = [1, 1, 1]
    assert list(ids) == [9, 1, 1, 1, 6, 8]
    ids[0:2] = 0                                       # one element replaces the slice
    assert list(ids) == [0, 1, 1, 6, 8]
    ids[4:2] = [7]                                     # an empty range: inserted at its start
    assert list(ids) == [0, 1, 1, 6, 7, 8]
    del ids[0]
    del ids[-1]
    del ids[1:3]
    del ids[3:1]
    assert list(ids) == [1, 7]
    with pytest.raises(TypeError, match="^Attempting to append an invalid type$"):
        ids.append("x")
    with pytest.raises(TypeError, match="^Attempting to append an invalid type$"):
        ids.append(1.5)
    with pytest.raises(TypeError, match="^Incompatible Data Type$"):
        ids.extend([2, "x"])
    assert list(ids) == [1, 7]                         # extend converts all before adding any
    with pytest.raises(TypeError, match="^Invalid assignment$"):
        ids[0] = "x"
    with pytest.raises(TypeError, match="^Invalid sequence element$"):
        ids[0:1] = [1, "x"]
    with pytest.raises(IndexError, match="^Index out of range$"):
        del ids[2]
    with pytest.raises(OverflowError):
        ids.append(1 << 40)
    strings = C.StringVec()
    strings.append("a")
    strings[0:1] = "bc"                                # a string is one element
    assert list(strings) == ["bc"]
    weights = C.DtypeVec()
    weights.extend([1, 0.1, True])
    assert list(weights) == [1.0, float(np.float32(0.1)), 1.0]
    with pytest.raises(TypeError):
        weights.append(np.float32(1))                  # boost takes int and float only
    flags = C.BoolVec()
    flags.extend([1, 0, None, True])
    assert list(flags) == [True, False, False, True]


def test_what_the_suite_does_not_have(net):
    names = net._layer_names
    for method in ("index", "count", "pop", "insert", "sort", "reverse", "remove", "copy", "clear"):
        assert not hasattr(names, method), method
    with pytest.raises(TypeError):
        names + names
    assert names != list(names) and net._layer_names != net._layer_names   # no ==: identity
    assert names == names
    with pytest.raises(TypeError, match="did not match C\\+\\+ signature"):
        C.IntVec([1, 2])
    assert len(C.BlobVec()) == 0 and len(C.LayerVec()) == 0 and len(C.NetVec()) == 0


def test_copies_and_views_as_pycaffe_hands_them_out(net):
    names = net._layer_names
    names[0] = "renamed"                                # a copy (copy_const_reference)
    assert net._layer_names[0] == "data"
    ids = net._inputs
    ids.append(4)
    assert list(net._inputs) == [0, 1]
    weights = net._blob_loss_weights                    # the net's own (return_internal_reference)
    assert weights[4] == float(np.float32(0.1)) and 0.1 in weights and 0.2 not in weights
    weights[4] = 0.25
    assert net._blob_loss_weights[4] == 0.25 and net.blob_loss_weights["loss"] == 0.25
    assert net.layers[3] is net.layers[3] and len(net._blobs) == 5
    c = copy.copy(net.params["ip"])
    c.append(None)
    assert len(c) == 3 and len(net.params["ip"]) == 2


def test_add_blob_as_caffe_defines_it(net):
    vec = net.params["ip"]
    assert vec.add_blob(2, 3) is None
    assert len(vec) == 3 and len(net.layer_dict["ip"].blobs) == 3
    assert vec[2].shape == (2, 3) and vec[2].data.dtype == np.float32 and not vec[2].data.any()
    vec.add_blob()
    assert vec[3].shape == ()
    with pytest.raises(RuntimeError, match="^BlobVec.add_blob takes no kwargs$"):
        vec.add_blob(2, shape=3)
    with pytest.raises(TypeError, match="rvalue of type int from this Python object of type tuple"):
        vec.add_blob((2, 3))
    with pytest.raises(TypeError, match="of type float"):
        vec.add_blob(2.0)
    fresh = C.BlobVec()
    fresh.add_blob(4)
    assert type(fresh[0]) is engine.Blob and fresh[0].shape == (4,)


# ------------------------------------------------------------------ Python layers' arguments
PYLAYER = """
import caffe

SEEN = {}


class Probe(caffe.Layer):
    def setup(self, bottom, top):
        SEEN["setup"] = (type(bottom).__name__, type(top).__name__, len(bottom), isinstance(self, caffe.Layer))
        SEEN["blobs"] = type(self.blobs).__name__
        self.blobs.add_blob(3)

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        SEEN["forward"] = (type(bottom).__name__, bottom[-1] is bottom[0] or bottom[0].data.shape)
        top[0].data[...] = bottom[0].data * 2

    def backward(self, top, propagate_down, bottom):
        SEEN["backward"] = (type(top).__name__, type(propagate_down).__name__, list(propagate_down))
        bottom[0].diff[...] = top[0].diff * 2
"""


def test_a_python_layer_gets_rawblobvecs_and_a_boolvec(tmp_path):
    (tmp_path / "probe_layer.py").write_text(PYLAYER)
    (tmp_path / "net.prototxt").write_text(textwrap.dedent("""
        force_backward: true
        layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
        layer { name: "probe" type: "Python" bottom: "data" top: "out"
          python_param { module: "probe_layer" layer: "Probe" } }
        """))
    saved = {k: v for k, v in sys.modules.items() if k == "caffe" or k.startswith("caffe.")}
    engine.install_as_caffe()
    try:
        n = engine.Net(str(tmp_path / "net.prototxt"), engine.TRAIN)
        n.forward(data=np.ones((2, 3), np.float32))
        n.backward(out=np.ones((2, 3), np.float32))
        seen = sys.modules["probe_layer"].SEEN
        assert seen["setup"] == ("RawBlobVec", "RawBlobVec", 1, True)
        assert seen["blobs"] == "BlobVec" and type(n.params["probe"]) is C.BlobVec
        assert seen["forward"][0] == "RawBlobVec"
        assert seen["backward"] == ("RawBlobVec", "BoolVec", [True])
        assert isinstance(n.layers[1], caffe.Layer) and type(n.layers[1]).__name__ == "Probe"
    finally:
        sys.modules.pop("probe_layer", None)
        for k in [k for k in sys.modules if k == "caffe" or k.startswith("caffe.")]:
            del sys.modules[k]
        sys.modules.update(saved)


# ------------------------------------------------------------------ a BatchNorm-merging script
MERGE_NET = """name: "bn_net"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 9 dim: 9 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 5 kernel_size: 3 bias_term: false } }
layer { name: "conv1/bn" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "conv1/scale" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
  convolution_param { num_output: 4 kernel_size: 3 stride: 2 } }
layer { name: "conv2/bn" type: "BatchNorm" bottom: "conv2" top: "conv2" }
layer { name: "conv2/scale" type: "Scale" bottom: "conv2" top: "conv2" scale_param { bias_term: true } }
layer { name: "relu2" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "fc" type: "InnerProduct" bottom: "conv2" top: "fc" inner_product_param { num_output: 6 } }
"""

MERGED_NET = """name: "bn_net_merged"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 9 dim: 9 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 5 kernel_size: 3 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
  convolution_param { num_output: 4 kernel_size: 3 stride: 2 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "relu2" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "fc" type: "InnerProduct" bottom: "conv2" top: "fc"
  inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 1 } } }
"""


def _trained_weights(tmp_path):
    """The BN net with random weights and BatchNorm statistics as training leaves them
    (sums scaled by a moving-average factor), saved as a caffemodel."""
    model = tmp_path / "bn_net.prototxt"
    model.write_text(MERGE_NET)
    net = engine.Net(str(model), engine.TEST)
    rs = np.random.RandomState(7)
    for name, blobs in net.params.items():
        if name.endswith("/bn"):
            c = blobs[0].data.shape[0]
            factor = np.float32(3.75)
            blobs[0].data[...] = rs.normal(0, 0.5, c) * factor
            blobs[1].data[...] = rs.uniform(0.2, 2.0, c) * factor
            blobs[2].data[...] = factor
        else:
            for b in blobs:
                b.data[...] = rs.normal(0, 0.5, b.data.shape)
    weights = tmp_path / "bn_net.caffemodel"
    net.save(str(weights))
    return model, weights


def _blobs_of(path):
    """{layer name: [float32 arrays]} read from a caffemodel with the protobuf alone."""
    p = caffe_pb2.NetParameter()
    p.ParseFromString(Path(path).read_bytes())
    return {l.name: [np.array(b.data, dtype=np.float32).reshape(tuple(b.shape.dim)) for b in l.blobs]
            for l in p.layer if len(l.blobs)}


def _fold_by_hand(conv, bn, scale):
    """The same arithmetic as the script, written out with NumPy."""
    w = conv[0]
    b = conv[1] if len(conv) > 1 else np.zeros(w.shape[0])
    sf = bn[2]
    sf = 1. / sf if sf != 0 else sf
    mean, var = bn[0] * sf, bn[1] * sf
    rstd = 1. / np.sqrt(var + 1e-5)
    w_out = w * rstd.reshape((-1, 1, 1, 1)) * scale[0].reshape((-1, 1, 1, 1))
    b_out = (b - mean) * rstd * scale[0] + scale[1]
    return w_out.astype(np.float32), b_out.astype(np.float32)


def test_a_batchnorm_merging_script_folds_every_layer(tmp_path):
    model, weights = _trained_weights(tmp_path)
    merged_model = tmp_path / "merged.prototxt"
    merged_model.write_text(MERGED_NET)
    merged_weights = tmp_path / "merged.caffemodel"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GLOG_minloglevel="2")
    r = subprocess.run([sys.executable, "-m", "engine", "run", str(PROGRAMS / "merge_bn.py"), str(model),
                        str(weights), str(merged_model), str(merged_weights)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert out[:4] == ["merged conv1 conv2", "copied fc", "skipped 0", "batchnorm conv1/bn conv2/bn"]

    original, saved = _blobs_of(weights), _blobs_of(merged_weights)
    assert sorted(saved) == ["conv1", "conv2", "fc"]
    for name in ("conv1", "conv2"):
        w, b = _fold_by_hand(original[name], original[name + "/bn"], original[name + "/scale"])
        assert np.array_equal(saved[name][0], w), name
        assert np.array_equal(saved[name][1], b), name
    assert all(np.array_equal(s, o) for s, o in zip(saved["fc"], original["fc"]))

    # the merged net computes what the BN net computes, up to float32 rounding
    diff, scale = (float(v) for v in out[4].split()[2::2])
    assert diff <= 1e-5 * scale
    a = engine.Net(str(model), engine.TEST, weights=str(weights))
    b = engine.Net(str(merged_model), engine.TEST, weights=str(merged_weights))
    x = np.random.RandomState(1).uniform(-1, 1, (2, 3, 9, 9)).astype(np.float32)
    ya, yb = a.forward(data=x)["fc"], b.forward(data=x)["fc"]
    np.testing.assert_allclose(yb, ya, rtol=1e-4, atol=1e-5 * np.abs(ya).max())

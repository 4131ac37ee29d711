"""NaN, Inf and float overflow travel through every layer as in Caffe.

Caffe does not check numbers: NaN and Inf in inputs or weights flow through Forward
and Backward, and overflow gives Inf.  The engine must do the same — no exception and
no Python warning from the middle of a layer (Layer.Forward/Backward run under
``np.errstate(all="ignore")``) — except where Caffe itself stops, such as a label
that is not a valid class index (a NaN label included).

``engine.instruments.debug.Recorder`` then says where the first non-finite value appeared:
``first_nonfinite`` names the layer, the direction and the blob; with
``sentinel=True`` it raises there.
"""
import math
import warnings

import numpy as np
import pytest
from google.protobuf import text_format

from engine import TRAIN, Net
from engine.core.blob import Blob
from engine.core.errors import LayerError
from engine.core.layers.registry import create_layer, layer_types
from engine.instruments.debug import NonFiniteError, Recorder
from engine.proto import caffe_pb2

# type -> (param text, bottom shapes, indices of integer-valued bottoms (labels, indices))
SPECS = {
    "AbsVal": ("", [(2, 3, 4)], ()),
    "Accuracy": ("accuracy_param { top_k: 2 }", [(4, 5), (4,)], (1,)),
    "ArgMax": ("argmax_param { top_k: 2 out_max_val: true }", [(3, 6)], ()),
    "BNLL": ("", [(2, 3, 4)], ()),
    "BatchNorm": ("", [(4, 3, 2, 2)], ()),
    "BatchReindex": ("", [(4, 3), (5,)], (1,)),
    "Bias": ("bias_param { axis: 1 num_axes: 1 }", [(2, 3, 4)], ()),
    "Clip": ("clip_param { min: -1 max: 1 }", [(2, 3, 4)], ()),
    "Concat": ("concat_param { axis: 1 }", [(2, 3, 4), (2, 2, 4)], ()),
    "ContrastiveLoss": ("", [(4, 3), (4, 3), (4,)], (2,)),
    "Convolution": ("convolution_param { num_output: 2 kernel_size: 3 pad: 1 weight_filler { type: "
                    "\"gaussian\" } }", [(2, 3, 5, 5)], ()),
    "Crop": ("crop_param { axis: 2 offset: 1 }", [(2, 3, 6, 6), (2, 3, 4, 4)], ()),
    "Deconvolution": ("convolution_param { num_output: 2 kernel_size: 3 stride: 2 weight_filler { "
                      "type: \"gaussian\" } }", [(2, 3, 4, 4)], ()),
    "Dropout": ("dropout_param { dropout_ratio: 0.5 }", [(2, 3, 4)], ()),
    "ELU": ("elu_param { alpha: 0.5 }", [(2, 3, 4)], ()),
    "Eltwise": ("eltwise_param { operation: PROD }", [(2, 3, 4), (2, 3, 4)], ()),
    "Embed": ("embed_param { num_output: 3 input_dim: 5 weight_filler { type: \"gaussian\" } }",
              [(4,)], (0,)),
    "EuclideanLoss": ("", [(4, 3), (4, 3)], ()),
    "Exp": ("exp_param { base: 2 scale: 3 }", [(2, 3, 4)], ()),
    "Filter": ("", [(4, 3), (4,)], (1,)),
    "Flatten": ("", [(2, 3, 4)], ()),
    "HingeLoss": ("hinge_loss_param { norm: L2 }", [(4, 5), (4,)], (1,)),
    "Im2col": ("convolution_param { kernel_size: 2 }", [(2, 3, 4, 4)], ()),
    "InfogainLoss": ("", [(4, 3), (4,), (1, 1, 3, 3)], (1,)),
    "InnerProduct": ("inner_product_param { num_output: 3 weight_filler { type: \"gaussian\" } }",
                     [(2, 3, 4)], ()),
    "LRN": ("lrn_param { local_size: 3 }", [(2, 5, 3, 3)], ()),
    "LSTM": ("recurrent_param { num_output: 3 weight_filler { type: \"gaussian\" } }",
             [(3, 2, 4), (3, 2)], (1,)),
    "LSTMUnit": ("", [(1, 2, 3), (1, 2, 12), (1, 2)], (2,)),
    "Log": ("log_param { base: 10 shift: 1 }", [(2, 3, 4)], ()),
    "MVN": ("", [(2, 3, 4, 4)], ()),
    "MultinomialLogisticLoss": ("", [(4, 5), (4,)], (1,)),
    "PReLU": ("", [(2, 3, 4)], ()),
    "Pooling": ("pooling_param { pool: MAX kernel_size: 2 stride: 2 }", [(2, 3, 4, 4)], ()),
    "Power": ("power_param { power: 2 scale: 3 shift: 1 }", [(2, 3, 4)], ()),
    "RNN": ("recurrent_param { num_output: 3 weight_filler { type: \"gaussian\" } }",
            [(3, 2, 4), (3, 2)], (1,)),
    "ReLU": ("relu_param { negative_slope: 0.1 }", [(2, 3, 4)], ()),
    "Reduction": ("reduction_param { operation: SUMSQ axis: 1 }", [(2, 3, 4)], ()),
    "Reshape": ("reshape_param { shape { dim: 0 dim: -1 } }", [(2, 3, 4)], ()),
    "SPP": ("spp_param { pyramid_height: 2 }", [(2, 3, 4, 4)], ()),
    "Scale": ("scale_param { axis: 1 num_axes: 1 bias_term: true }", [(2, 3, 4)], ()),
    "Sigmoid": ("", [(2, 3, 4)], ()),
    "SigmoidCrossEntropyLoss": ("", [(4, 3), (4, 3)], (1,)),
    "Silence": ("", [(2, 3, 4)], ()),
    "Slice": ("slice_param { axis: 1 slice_point: 1 }", [(2, 3, 4)], ()),
    "Softmax": ("", [(2, 3, 4)], ()),
    "SoftmaxWithLoss": ("", [(4, 5), (4,)], (1,)),
    "Split": ("", [(2, 3, 4)], ()),
    "Swish": ("swish_param { beta: 2 }", [(2, 3, 4)], ()),
    "TanH": ("", [(2, 3, 4)], ()),
    "Threshold": ("threshold_param { threshold: 0.5 }", [(2, 3, 4)], ()),
    "Tile": ("tile_param { axis: 1 tiles: 2 }", [(2, 3, 4)], ()),
    # no bottoms: only their params (or nothing) can be non-finite
    "Parameter": ("parameter_param { shape { dim: 2 dim: 3 } }", [], ()),
    "DummyData": ("dummy_data_param { shape { dim: 2 dim: 3 } data_filler { type: \"gaussian\" } }", [], ()),
    "Input": ("input_param { shape { dim: 2 dim: 3 } }", [], ()),
}
TOPS = {"Slice": 2, "Split": 2, "Silence": 0, "Concat": 1, "LSTMUnit": 2, "Accuracy": 1, "ArgMax": 1}
# Layers that read files, caller-given arrays or modules: covered by their own tests.
NOT_HERE = {"Data", "ImageData", "WindowData", "HDF5Data", "HDF5Output", "MemoryData", "Python"}

# Integer-valued bottoms: valid values per layer (labels, indices, selectors, flags).
INT_VALUES = {"Accuracy": 5, "BatchReindex": 4, "ContrastiveLoss": 2, "Embed": 5, "Filter": 2,
              "HingeLoss": 5, "InfogainLoss": 3, "LSTM": 2, "LSTMUnit": 2, "MultinomialLogisticLoss": 5,
              "RNN": 2, "SigmoidCrossEntropyLoss": 2, "SoftmaxWithLoss": 5}

# Caffe has no Backward for these (NOT_IMPLEMENTED or no gradient): only Forward is asked.
NO_BACKWARD = {"Accuracy", "ArgMax", "Silence", "Parameter", "DummyData", "Input", "Threshold"}

POISONS = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "huge": 3e38}


def test_specs_cover_every_layer_type():
    assert set(layer_types()) - NOT_HERE == set(SPECS)


def _layer(ltype, dtype, phase=TRAIN):
    text, shapes, ints = SPECS[ltype]
    lp = caffe_pb2.LayerParameter(name="t_" + ltype.lower(), type=ltype, phase=phase)
    text_format.Merge(text, lp)
    bottom = [Blob(s, dtype=dtype) for s in shapes]
    ntop = TOPS.get(ltype, 1)
    top = [Blob(dtype=dtype) for _ in range(ntop)]
    return create_layer(lp, dtype=dtype), bottom, top, ints


def _fill(ltype, bottom, ints, poison, where, rng):
    for i, b in enumerate(bottom):
        if i in ints:
            hi = INT_VALUES.get(ltype, 2)
            if ltype == "LSTM" or ltype == "RNN":
                b.data[...] = (np.arange(b.count).reshape(b.shape) >= b.shape[1]).astype(b.dtype)
            else:
                b.data[...] = rng.integers(0, hi, b.shape)
            continue
        a = rng.normal(size=b.shape)
        if ltype in ("Log",):
            a = np.abs(a)
        if poison is not None and where == "input":
            a.reshape(-1)[:: max(1, b.count // 3)] = POISONS[poison]
        with np.errstate(all="ignore"):
            b.data[...] = a


def _run(ltype, poison, where, dtype=np.float32, phase=TRAIN):
    rng = np.random.default_rng(0)
    layer, bottom, top, ints = _layer(ltype, dtype, phase)
    _fill(ltype, bottom, ints, poison, where, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no warning may leave a layer
        layer.SetUp(bottom, top)
        if poison is not None and where == "weights":
            for b in layer.blobs:
                b.data.reshape(-1)[::2] = POISONS[poison]
        layer.Forward(bottom, top)
        for t in top:
            if t.count:
                t.diff[...] = rng.normal(size=t.shape)
                if poison is not None and where == "top-diff":
                    t.diff.reshape(-1)[0] = POISONS[poison]
        if ltype in NO_BACKWARD:
            return layer, bottom, top
        pd = [i not in ints for i in range(len(bottom))]
        if ltype == "InfogainLoss":
            pd[2] = False                       # Caffe: cannot backpropagate to infogain inputs
        layer.Backward(top, pd, bottom)
    return layer, bottom, top


NAMES = sorted(SPECS)


@pytest.mark.parametrize("poison", sorted(POISONS))
@pytest.mark.parametrize("ltype", NAMES)
def test_nonfinite_inputs_travel(ltype, poison):
    _run(ltype, poison, "input")


@pytest.mark.parametrize("poison", ["nan", "inf"])
@pytest.mark.parametrize("ltype", [t for t in NAMES if t not in ("Input", "DummyData")])
def test_nonfinite_weights_and_gradients_travel(ltype, poison):
    _run(ltype, poison, "weights")
    _run(ltype, poison, "top-diff")


@pytest.mark.parametrize("ltype", ["InnerProduct", "Convolution", "ReLU", "Softmax", "Power", "LRN",
                                   "BatchNorm", "SoftmaxWithLoss", "EuclideanLoss"])
def test_nan_goes_where_caffe_puts_it(ltype):
    """Not only no exception: the NaN actually reaches the output, as in Caffe's loops."""
    layer, bottom, top = _run(ltype, "nan", "input", dtype=np.float64)
    assert any(np.isnan(t.data).any() for t in top if t.count)


def test_max_pooling_skips_nan_as_caffe():
    """Caffe's max pooling keeps a value only when ``x > max`` — never true for NaN — so a
    NaN in a window is passed over (an all-NaN window gives -FLT_MAX)."""
    layer, bottom, top = _run("Pooling", "nan", "input", dtype=np.float64)
    assert not np.isnan(top[0].data).any()


def test_overflow_gives_inf_without_warning():
    layer, bottom, top = _run("Power", None, None)
    bottom[0].data[...] = 1e30                       # (3 * 1e30 + 1)^2 overflows float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer.Forward(bottom, top)
    assert np.isinf(top[0].data).all()


@pytest.mark.parametrize("ltype", ["SoftmaxWithLoss", "Accuracy", "MultinomialLogisticLoss", "HingeLoss",
                                   "InfogainLoss", "Embed", "BatchReindex"])
@pytest.mark.parametrize("bad", [np.nan, 1e9, -3])
def test_bad_integer_bottoms_are_caffe_errors(ltype, bad):
    """Where Caffe reads out of bounds (labels/indices that are NaN or out of range) the
    engine raises a LayerError, not an IndexError or a warning."""
    rng = np.random.default_rng(0)
    layer, bottom, top, ints = _layer(ltype, np.float32)
    _fill(ltype, bottom, ints, None, None, rng)
    layer.SetUp(bottom, top)
    bottom[ints[0]].data.reshape(-1)[0] = bad
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(LayerError):
            layer.Forward(bottom, top)


# --------------------------------------------------------------------------- Recorder
OVERFLOW_NET = '''
name: "overflow"
force_backward: true
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } shape { dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "square" type: "Power" bottom: "conv" top: "square" power_param { power: 2 scale: 1e20 } }
layer { name: "ip" type: "InnerProduct" bottom: "square" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
'''


def _overflow_net(tmp_path, text=OVERFLOW_NET):
    p = tmp_path / "overflow.prototxt"
    p.write_text(text)
    net = Net(str(p), TRAIN)
    rng = np.random.default_rng(1)
    net.blobs["data"].data[...] = np.abs(rng.normal(size=net.blobs["data"].shape)) + 1
    net.blobs["label"].data[...] = [0, 2]
    net.params["conv"][0].data[...] = np.abs(net.params["conv"][0].data) + 0.1
    return net


def test_recorder_localises_the_first_overflow(tmp_path):
    net = _overflow_net(tmp_path)
    rec = Recorder(net)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net.forward()
        net.backward()
    f = rec.first_nonfinite
    assert f is not None
    assert (f.layer, f.type, f.direction, f.role, f.which) == ("square", "Power", "forward", "top", "data")
    assert f.inf > 0 and f.inputs_finite and f.params_finite
    assert "square" in f.message and "NOT finite" not in f.message.split("inputs were")[1].split(" and")[0]
    # Everything after it is non-finite too, and was recorded without raising.
    fwd = rec.last("forward")
    assert [l.layer for l in fwd.layers if l.nonfinite][0] == "square"


def test_recorder_sentinel_stops_at_the_first_overflow(tmp_path):
    net = _overflow_net(tmp_path)
    Recorder(net, sentinel=True)
    with pytest.raises(NonFiniteError) as ei:
        net.forward()
    assert ei.value.finding.layer == "square"
    assert ei.value.finding.direction == "forward"


BACKWARD_OVERFLOW_NET = '''
name: "backward_overflow"
layer { name: "data" type: "Input" top: "data" top: "target"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "target" top: "loss" loss_weight: 3e38 }
'''


def test_recorder_localises_a_backward_overflow(tmp_path):
    """Finite forward, overflow in backward: with a loss weight of 3e38 the loss layer's
    gradient, weight * (ip - target) / num, overflows where |ip - target| > 2."""
    p = tmp_path / "bw.prototxt"
    p.write_text(BACKWARD_OVERFLOW_NET)
    net = Net(str(p), TRAIN)
    net.blobs["data"].data[...] = 0.5
    net.blobs["target"].data[...] = 10.0
    rec = Recorder(net)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net.forward()
        assert rec.first_nonfinite is None
        assert all(l.loss is None or np.isfinite(l.loss) for l in rec.last("forward").layers)
        net.backward()
    f = rec.first_nonfinite
    assert f is not None and f.direction == "backward"
    assert (f.layer, f.role, f.blob, f.which) == ("loss", "bottom", "ip", "diff")
    assert f.inf > 0 and f.inputs_finite


def test_nan_input_flows_through_a_whole_net(tmp_path):
    net = _overflow_net(tmp_path, OVERFLOW_NET.replace("scale: 1e20", "scale: 1"))
    net.blobs["data"].data[0, 0, 0, 0] = np.nan
    rec = Recorder(net)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = net.forward()
        net.backward()
    assert math.isnan(float(out["loss"]))
    f = rec.first_nonfinite
    assert (f.layer, f.type, f.role, f.blob, f.nan) == ("data", "Input", "top", "data", 1)
    conv = rec.last("forward").layers[1]
    assert conv.layer == "conv" and conv.nonfinite

"""Empty blobs: a batch of 0, as Caffe has it (issue 21).

Caffe's Blob gets memory the first time its count is above 0 (``Blob::Reshape`` makes
``data_``/``diff_`` only when the count passes the capacity), so:

- a blob whose count has been 0 since it was made holds no memory: Init takes it (an Input
  with ``dim: 0`` logs ``Top shape: 0 ...``) and the first ``cpu_data()``/``mutable_cpu_diff()``
  aborts with ``Check failed: data_`` (``diff_``).  The engine raises EmptyBlobError there,
  naming the blob, its shape and the layer; layers that only share or reshape (Flatten,
  Split's Forward, Silence's Forward, Input, Parameter) run, as Caffe's do.
- a blob that held memory and is reshaped to 0 keeps it: every layer runs over the empty
  batch as Caffe's loops do, except where Caffe divides by the batch (SIGFPE there: the
  engine raises a LayerError).

Every registered layer type (the specs of tests/test_nonfinite.py, plus cases for the other
code paths: the implicit-GEMM convolution, 1x1, grouped and N-D convolutions, every pooling
method, LRN within channels, large InnerProducts through the compiled GEMM ...) runs both
ways, on the NumPy and the compiled (Numba/llvmlite) kernels: the outcome is Caffe's, and
nothing but a CaffeError ever leaves a layer (no IndexError, no ValueError, no warning).
The CuPy path runs the same layer bodies (kernels skip empty launches: ``kernels.launch``);
the ``gpu`` twins run it where a device is present.
"""
import math
import warnings

import numpy as np
import pytest
from google.protobuf import text_format

from engine import TEST, TRAIN, Net
from engine.core.blob import Blob
from engine.core.errors import CaffeError, EmptyBlobError, LayerError
from engine.core.kernels import gemm, jit
from engine.core.layers.registry import create_layer, layer_types
from engine.proto import caffe_pb2
from tests.nets import lenet_deploy
from tests.test_nonfinite import NO_BACKWARD, NOT_HERE, SPECS, TOPS

NO_BACKWARD = NO_BACKWARD - {"Silence"}        # Caffe's Silence has a Backward: it zeroes the bottom diffs

G = 'weight_filler { type: "gaussian" }'
# name -> (type, param text, bottom shapes, integer bottoms): more code paths of the same types
EXTRA = {
    "conv_implicit": ("Convolution", "convolution_param { num_output: 4 kernel_size: 3 pad: 1 %s }" % G,
                      [(2, 3, 12, 12)], ()),
    "conv_1x1": ("Convolution", "convolution_param { num_output: 4 kernel_size: 1 %s }" % G, [(2, 3, 12, 12)], ()),
    "conv_group_stride": ("Convolution", "convolution_param { num_output: 4 kernel_size: 3 stride: 2 group: 2 "
                          "%s }" % G, [(2, 4, 12, 12)], ()),
    "conv_nd": ("Convolution", "convolution_param { num_output: 2 kernel_size: 2 %s }" % G, [(2, 2, 4, 4, 4)], ()),
    "conv_no_bias": ("Convolution", "convolution_param { num_output: 4 kernel_size: 3 bias_term: false %s }"
                     % G, [(2, 3, 12, 12)], ()),
    "deconv_1x1": ("Deconvolution", "convolution_param { num_output: 4 kernel_size: 1 %s }" % G,
                   [(2, 3, 12, 12)], ()),
    "pool_ave": ("Pooling", "pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }", [(2, 3, 9, 9)], ()),
    "pool_stochastic": ("Pooling", "pooling_param { pool: STOCHASTIC kernel_size: 2 stride: 2 }",
                        [(2, 3, 8, 8)], ()),
    "pool_global": ("Pooling", "pooling_param { pool: MAX global_pooling: true }", [(2, 3, 8, 8)], ()),
    "pool_max_overlap": ("Pooling", "pooling_param { pool: MAX kernel_size: 3 stride: 2 }", [(2, 3, 9, 9)], ()),
    "lrn_within": ("LRN", "lrn_param { local_size: 3 norm_region: WITHIN_CHANNEL }", [(2, 3, 5, 5)], ()),
    "ip_gemm": ("InnerProduct", "inner_product_param { num_output: 64 %s }" % G, [(2, 300)], ()),
    "ip_transpose": ("InnerProduct", "inner_product_param { num_output: 64 transpose: true %s }" % G,
                     [(2, 300)], ()),
    "softmax_loss_spatial": ("SoftmaxWithLoss", "loss_param { normalization: FULL }", [(4, 5, 3), (4, 3)], (1,)),
    "softmax_loss_ignore": ("SoftmaxWithLoss", "loss_param { ignore_label: 1 }", [(4, 5), (4,)], (1,)),
    "eltwise_max": ("Eltwise", "eltwise_param { operation: MAX }", [(2, 3, 4), (2, 3, 4)], ()),
    "eltwise_sum": ("Eltwise", "eltwise_param { operation: SUM coeff: 1 coeff: -1 }", [(2, 3, 4), (2, 3, 4)], ()),
    "scale_two_bottoms": ("Scale", "scale_param { axis: 0 }", [(2, 3, 4), (2, 3)], ()),
    "reduction_mean": ("Reduction", "reduction_param { operation: MEAN axis: 0 }", [(2, 3, 4)], ()),
    "reduction_asum": ("Reduction", "reduction_param { operation: ASUM axis: 1 }", [(2, 3, 4)], ()),
    "concat_axis0": ("Concat", "concat_param { axis: 0 }", [(2, 3, 4), (2, 3, 4)], ()),
    "slice_axis0": ("Slice", "slice_param { axis: 0 }", [(4, 3)], ()),
    "argmax_axis": ("ArgMax", "argmax_param { axis: 1 }", [(3, 6, 2)], ()),
    "mvn_across": ("MVN", "mvn_param { across_channels: true normalize_variance: false }", [(2, 3, 4, 4)], ()),
    "tile_axis0": ("Tile", "tile_param { axis: 0 tiles: 2 }", [(2, 3, 4)], ()),
    "embed_bias": ("Embed", "embed_param { num_output: 3 input_dim: 5 bias_term: true %s }" % G, [(4, 2)], (0,)),
    "prelu_shared": ("PReLU", "prelu_param { channel_shared: true }", [(2, 3, 4)], ()),
    "sigmoid_ce_batch": ("SigmoidCrossEntropyLoss", "loss_param { normalization: BATCH_SIZE }",
                         [(4, 3), (4, 3)], (1,)),
}
CASES = {t: (t,) + SPECS[t] for t in SPECS}
CASES.update(EXTRA)

# The batch axis where it is not 0 (recurrent layers: T x N x ...); bottoms that are not
# batches (InfogainLoss's H) keep their shape.
BATCH_AXIS = {"LSTM": 1, "RNN": 1, "LSTMUnit": 1}
NOT_A_BATCH = {("InfogainLoss", 2)}
NO_BOTTOMS = {"Input", "Parameter", "DummyData"}

# Caffe, blobs that never held memory: where it stops (default: Check failed: data_ at Forward,
# DummyData's included: its gaussian filler fills at Forward and asks for the data first)
NEVER_HELD = {
    "Flatten": "ok", "Input": "ok", "Parameter": "ok",           # ShareData / nothing asked
    "Split": "EmptyBlobError@Backward",                          # Forward shares; Backward sums the diffs
    "Silence": "EmptyBlobError@Backward",                        # Backward zeroes the bottom diff
    "Filter": "EmptyBlobError@SetUp",                            # Reshape reads the selector
    # LayerSetUp zeroes the diffs of the unrolled net's last hidden state (1 x 0 x num_output)
    "LSTM": "EmptyBlobError@SetUp", "RNN": "EmptyBlobError@SetUp",
    # Caffe divides by the batch (or by a count of 0) before asking for any data: SIGFPE
    "Accuracy": "LayerError@SetUp", "BatchNorm": "LayerError@SetUp", "Reshape": "LayerError@SetUp",
}
# Caffe, blobs that held memory and were reshaped to a batch of 0 (default: runs)
HELD = {
    "Accuracy": "LayerError@Forward", "BatchNorm": "LayerError@Forward", "Reshape": "LayerError@Forward",
    "HingeLoss": "LayerError@Forward", "MultinomialLogisticLoss": "LayerError@Forward",
    # SPPLayer::Reshape makes new PoolingLayers for a new bottom shape: the MAX pooling's own
    # max_idx_ (shape 0 x C x 1 x 1) has never held memory, and Forward's mutable_cpu_data() aborts
    "SPP": "EmptyBlobError@Forward",
}
# the loss (top 0) Caffe computes over an empty batch: sum / normalizer
EMPTY_LOSS = {
    "SoftmaxWithLoss": 0.0,            # VALID: max(1, 0 valid labels)
    "softmax_loss_spatial": 0.0, "softmax_loss_ignore": 0.0,
    "SigmoidCrossEntropyLoss": 0.0, "sigmoid_ce_batch": 0.0,     # max(1, 0)
    "InfogainLoss": 0.0,
    "EuclideanLoss": math.nan,         # dot / num / 2 = 0 / 0
    "ContrastiveLoss": math.nan,       # loss / num / 2
    "reduction_mean": math.nan,        # (sum of nothing) * (1 / 0)
}


def test_cases_cover_every_layer_type():
    assert set(layer_types()) - NOT_HERE == {c[0] for c in CASES.values()}


def _zero_batch(ltype, k, shape):
    if (ltype, k) in NOT_A_BATCH:
        return tuple(shape)
    ax = BATCH_AXIS.get(ltype, 0)
    return tuple(0 if i == ax else d for i, d in enumerate(shape))


def _param(ltype, text, phase):
    lp = caffe_pb2.LayerParameter(name="t_" + ltype.lower(), type=ltype, phase=phase)
    text_format.Merge(text, lp)
    shapes = {"Input": lambda: lp.input_param.shape, "DummyData": lambda: lp.dummy_data_param.shape,
              "Parameter": lambda: [lp.parameter_param.shape]}
    if ltype in shapes:
        for sp in shapes[ltype]():
            sp.dim[0] = 0
    return lp


def _values(ltype, k, ints, shape, rng):
    if k in ints:
        hi = 2 if ltype in ("LSTM", "RNN", "LSTMUnit", "ContrastiveLoss", "SigmoidCrossEntropyLoss") else 3
        return rng.integers(0, hi, shape)
    return rng.normal(size=shape)


def _run(name, held, phase):
    """(outcome, loss, tops): outcome "ok" or "<CaffeError type>@<stage>"."""
    ltype, text, shapes, ints = CASES[name]
    rng = np.random.default_rng(0)
    lp = _param(ltype, text, phase)
    if held:    # full batches first (memory held), then a batch of 0
        bottom = [Blob(s) for s in shapes]
        for k, b in enumerate(bottom):
            b.data[...] = _values(ltype, k, ints, b.shape, rng)
    else:
        bottom = [Blob(_zero_batch(ltype, k, s)) for k, s in enumerate(shapes)]
        for k, b in enumerate(bottom):
            if b.count:                                  # InfogainLoss's H: not a batch
                b.data[...] = _values(ltype, k, ints, b.shape, rng)
    top = [Blob() for _ in range(TOPS.get(ltype, 1))]
    layer = create_layer(lp)
    stage = "SetUp"
    loss = None
    try:
        layer.SetUp(bottom, top)
        if held:
            layer.Forward(bottom, top)
            for k, b in enumerate(bottom):
                b.reshape(_zero_batch(ltype, k, b.shape))
        stage = "Forward"
        layer.Forward(bottom, top)
        if top and top[0].shape == () and top[0].has_memory:
            loss = float(top[0].data)
        if ltype not in NO_BACKWARD:
            stage = "Backward"
            pd = [k not in ints for k in range(len(bottom))]
            if ltype == "InfogainLoss":
                pd[2] = False
            layer.Backward(top, pd, bottom)
        return "ok", loss, top
    except CaffeError as e:
        return "%s@%s" % (type(e).__name__, stage), e, top
    finally:
        close = getattr(layer, "close", None)
        if close is not None:
            close()


@pytest.fixture(params=["compiled", "numpy", pytest.param("gpu", marks=pytest.mark.gpu)])
def kernels(request, monkeypatch):
    """The compiled kernels (Numba GEMM, implicit-GEMM convolution, pooling loops), the NumPy
    twins, or the GPU (CuPy and the CUDA kernels; skipped without a device)."""
    from engine.core import backend
    if request.param == "compiled" and not gemm.AVAILABLE:
        pytest.skip("Numba is not installed: no compiled kernels")
    on = request.param == "compiled"
    monkeypatch.setattr(gemm, "ENABLED", on)
    monkeypatch.setattr(gemm, "WIDE_ONLY", False)      # the compiled GEMM on any host
    monkeypatch.setattr(jit, "ENABLED", on)
    if request.param == "gpu":
        backend.set_mode_gpu()
    yield request.param
    backend.set_mode_cpu()


def _checked(name, held, phase):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no RuntimeWarning from an empty reduction either
        return _run(name, held, phase)


@pytest.mark.parametrize("phase", [TRAIN, TEST], ids=["TRAIN", "TEST"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_batch_that_never_held_memory_stops_where_caffe_does(name, phase, kernels):
    ltype = CASES[name][0]
    outcome, err, top = _checked(name, False, phase)
    expected = NEVER_HELD.get(ltype, "EmptyBlobError@Forward")
    assert outcome == expected, (outcome, err)
    if isinstance(err, EmptyBlobError):
        msg = str(err)
        assert msg.startswith(("Check failed: data_ (", "Check failed: diff_ (")), msg
        assert "count has been 0 since it was made" in msg and err.shape is not None and 0 in err.shape
    if outcome == "ok":
        assert all(t.count == 0 for t in top)


@pytest.mark.parametrize("phase", [TRAIN, TEST], ids=["TRAIN", "TEST"])
@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c[0] not in NO_BOTTOMS))
def test_a_batch_reshaped_to_zero_runs_as_caffes_loops(name, phase, kernels):
    ltype = CASES[name][0]
    outcome, loss, top = _checked(name, True, phase)
    expected = HELD.get(ltype, "ok")
    assert outcome == expected, (outcome, loss)
    if outcome != "ok":
        if isinstance(loss, EmptyBlobError):        # an inner blob of the layer's own (SPP's pooling)
            assert str(loss).startswith("Check failed: data_ (") and 0 in loss.shape, loss
        else:
            assert isinstance(loss, LayerError) and "(layer 't_" in str(loss)
        return
    for t in top:
        assert t.shape == () or t.count == 0, (t.shape, ltype)       # a loss, or an empty batch
    want = EMPTY_LOSS.get(name)
    if want is not None:
        if math.isnan(want):
            assert math.isnan(loss), loss
        else:
            assert loss == want and math.copysign(1.0, loss) == 1.0, loss     # +0, as Caffe's sum from 0


# ------------------------------------------------------------------ whole nets


def _lenet(tmp_path, n):
    p = tmp_path / "lenet.prototxt"
    p.write_text(lenet_deploy(n))
    return Net(str(p), TEST)


def test_lenet_with_dim_0_inits_and_stops_at_conv1_as_caffe(tmp_path, kernels, caplog):
    """The reported case: LeNet's Input with ``dim: 0``.  Caffe's Init logs the empty shapes;
    Forward stops at conv1, the first layer to read ``data`` (before: a bare IndexError from
    the compiled convolution)."""
    import logging
    with caplog.at_level(logging.INFO):
        net = _lenet(tmp_path, 0)
    assert "Top shape: 0 1 28 28 (0)" in caplog.text and "Top shape: 0 10 (0)" in caplog.text
    assert net.blobs["prob"].shape == (0, 10) and net.memory_used == 0
    with pytest.raises(EmptyBlobError) as ei:
        net.forward()
    e = ei.value
    assert (e.layer, e.blob, e.shape) == ("conv1", "data", (0, 1, 28, 28))
    assert str(e).startswith("Forward: Check failed: data_ (blob 'data' has shape 0 1 28 28 (0)")
    assert str(e).endswith("(layer 'conv1', type Convolution)")
    # pycaffe's view of a blob without memory is Caffe's CHECK too (pycaffe aborts there)
    with pytest.raises(EmptyBlobError):
        net.blobs["data"].data[...] = 0


def test_lenet_reshaped_to_a_batch_of_0_runs_and_back(tmp_path, kernels):
    """A net that ran with a batch keeps its memory: reshaped to 0 it runs (an empty output,
    as Caffe's loops over no image), reshaped back it gives the same numbers as before."""
    net = _lenet(tmp_path, 3)
    x = np.random.default_rng(0).normal(size=(3, 1, 28, 28)).astype(np.float32)
    net.blobs["data"].data[...] = x
    before = net.forward()["prob"].copy()
    net.blobs["data"].reshape(0, 1, 28, 28)
    net.reshape()
    out = net.forward()["prob"]
    assert out.shape == (0, 10)
    net.blobs["prob"].diff[...] = 0
    net.backward()                                   # no image: nothing to propagate, no error
    net.blobs["data"].reshape(3, 1, 28, 28)
    net.reshape()
    net.blobs["data"].data[...] = x
    np.testing.assert_array_equal(net.forward()["prob"], before)


def test_debug_info_and_records_look_at_a_blob_without_memory(tmp_path):
    """Looking is not using: Caffe's debug_info asks asum_data(), which is 0 without memory;
    the Recorder's statistics of such a blob are those of an empty array."""
    from engine.instruments.debug import Recorder
    net = _lenet(tmp_path, 0)
    rec = Recorder(net, stats=True)
    net.ForwardFromTo(0, 0)                          # Input: nothing asked
    step = rec.steps[-1]
    data = [b for b in step.layers[0].blobs if b.name == "data"][0]
    assert data.data.count == 0
    assert net.blobs["data"].asum_data() == 0.0 and net.blobs["data"].sumsq_diff() == 0.0
    with pytest.raises(EmptyBlobError):
        net.ForwardFromTo(1, 1)


def test_an_empty_buffer_of_a_layer_is_named_once(tmp_path):
    """A PReLU over 0 channels (found by fuzz campaign 21024): its own blobs never hold
    memory; the error names the layer's buffer, quoted once, with the prototxt line."""
    path = tmp_path / "prelu.prototxt"
    path.write_text('layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 0 dim: 4 } } }\n'
                    'layer { name: "prelu" type: "PReLU" bottom: "x" top: "y" }\n'
                    'layer { name: "loss" type: "Reduction" bottom: "y" top: "loss" loss_weight: 1\n'
                    '  reduction_param { operation: SUMSQ } }\n')
    with pytest.raises(EmptyBlobError) as ei:
        net = Net(str(path), TRAIN)
        net.forward()
        net.backward()
    msg = str(ei.value)
    assert "Check failed: data_ (" in msg and "of layer 'prelu'" in msg, msg
    assert "''" not in msg and "blob 'param" not in msg and "blob 'an internal" not in msg, msg
    assert "(layer 'prelu', type PReLU)" in msg, msg

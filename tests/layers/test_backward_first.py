"""Backward before any Forward (the inspector lets users step BackwardFromTo first).

In Caffe a layer's internal buffers (EuclideanLoss diff_, BatchNorm x_norm_, MVN
variance_, Eltwise/Pooling max_idx_, Dropout rand_vec_, ...) are Blobs shaped in
LayerSetUp/Reshape and zero-initialized on first allocation, so Backward before
Forward computes with zeros and never crashes.  For every registered layer type:

- SetUp, then Backward (propagate_down True wherever the layer takes a gradient)
  without Forward: nothing but :class:`engine.core.errors.CaffeError` may escape (and
  for the layers whose Caffe Backward is NOT_IMPLEMENTED, a LayerError must);
- then Forward + Backward give exactly what a fresh layer's Forward + Backward give;
- the buffers are Blobs of the layer's dtype (or an integer index type).

A few layers are checked against the numbers Caffe's zero buffers give; and every
golden-case net (``../shared``) runs Backward with force_backward before any Forward.
"""
import glob
import json
import os

import numpy as np
import pytest

from engine.core.blob import Blob
from engine.core.errors import CaffeError, LayerError
from engine.core.layers import layer_types
from tests.layers.helpers import empty_blobs, make_layer, seed


# --------------------------------------------------------------------------- bottoms
def g(*shape):
    """Gaussian bottom."""
    return ("g", shape)


def u(lo, hi, *shape):
    """Uniform [lo, hi) bottom."""
    return ("u", shape, lo, hi)


def ints(n, *shape):
    """Integer values in [0, n) (labels, indices)."""
    return ("i", shape, n)


def vals(values, *shape):
    """Explicit values."""
    return ("v", shape, values)


def _make_bottom(spec, k, dtype):
    kind, shape = spec[0], spec[1]
    b = Blob(shape, dtype=dtype)
    rng = np.random.default_rng(1000 + k)
    if kind == "g":
        a = rng.normal(0.0, 1.0, b.count)
    elif kind == "u":
        a = rng.uniform(spec[2], spec[3], b.count)
    elif kind == "i":
        a = rng.integers(0, spec[2], b.count)
    else:
        a = np.asarray(spec[2], dtype=np.float64)
    b.data[...] = np.asarray(a, dtype=np.float64).reshape(b.shape)
    return b


# --------------------------------------------------------------------------- data-layer sources
class Ctx:
    """Per-test files for the layers that read sources (made on demand in tmp_path)."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.n = 0

    def fresh(self, suffix):
        self.n += 1
        return str(self.tmp / ("f%d%s" % (self.n, suffix)))

    def lmdb(self):
        lmdb = pytest.importorskip("lmdb")
        from engine.core.io import array_to_datum
        path = str(self.tmp / "db")
        if not os.path.exists(path):
            imgs = np.random.default_rng(0).integers(0, 256, (6, 3, 5, 4), dtype=np.uint8)
            env = lmdb.open(path, map_size=1 << 24)
            with env.begin(write=True) as txn:
                for i, a in enumerate(imgs):
                    txn.put(b"%08d" % i, array_to_datum(a, i).SerializeToString())
            env.close()
        return path

    def image_list(self):
        Image = pytest.importorskip("PIL.Image")
        src = self.tmp / "list.txt"
        if not src.exists():
            rng = np.random.default_rng(4)
            lines = []
            for i in range(3):
                Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).save(
                    self.tmp / ("im%d.png" % i))
                lines.append("im%d.png %d" % (i, i))
            src.write_text("\n".join(lines) + "\n")
        return str(src), str(self.tmp) + "/"

    def hdf5_list(self):
        h5py = pytest.importorskip("h5py")
        src = self.tmp / "h5list.txt"
        if not src.exists():
            path = self.tmp / "d.h5"
            with h5py.File(path, "w") as h:
                h["data"] = np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3)
                h["label"] = np.arange(4, dtype=np.float32)
            src.write_text(str(path) + "\n")
        return str(src)

    def windows(self):
        Image = pytest.importorskip("PIL.Image")
        wf = self.tmp / "windows.txt"
        if not wf.exists():
            rgb = np.random.default_rng(9).integers(0, 256, (20, 24, 3), dtype=np.uint8)
            Image.fromarray(rgb).save(self.tmp / "w.png")
            wf.write_text("# 0\n%s\n3\n20\n24\n3\n1 0.9 2 3 10 12\n2 0.8 0 0 23 19\n"
                          "0 0.1 5 5 15 15\n" % (self.tmp / "w.png"))
        return str(wf)


PY_MODULE = '''
from engine.core.layers.python_layer import PyLayer


class Twice(PyLayer):
    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = 2 * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = 2 * top[0].diff
'''


def _memory_data(layer):
    data = np.random.default_rng(3).normal(size=(4, 2, 3, 2)).astype(np.float32)
    layer.set_input_arrays(data, np.arange(4, dtype=np.float32))


# --------------------------------------------------------------------------- configurations
GF = 'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.2 }'
RF = ('recurrent_param { num_output: 3 weight_filler { type: "uniform" min: -0.3 max: 0.3 } '
      'bias_filler { type: "uniform" min: -0.2 max: 0.2 } }')
CONT = vals([0, 0, 1, 1, 1, 0], 3, 2)


def case(text, bottoms=(), tops=1, pd=None, phase="TRAIN", inplace=False, notimpl=False,
         prepare=None, id=None, ltype=None):
    """One configuration.  ``text``: LayerParameter text, or a function of the test's
    :class:`Ctx` returning it (then ``ltype`` names the type)."""
    if ltype is None:
        ltype = text.split('type: "', 1)[1].split('"', 1)[0]
    return dict(text=text, bottoms=list(bottoms), tops=tops, pd=pd, phase=phase, inplace=inplace,
                notimpl=notimpl, prepare=prepare, id=id, type=ltype)


CASES = [
    case('type: "AbsVal"', [g(2, 3, 4)]),
    case('type: "Accuracy" accuracy_param { top_k: 2 }', [g(4, 5), ints(5, 4)], tops=2,
         notimpl=True),
    case('type: "ArgMax" argmax_param { top_k: 2 out_max_val: true }', [g(3, 6)], notimpl=True),
    case('type: "BNLL"', [g(2, 3, 4)]),
    case('type: "BatchNorm"', [g(3, 2, 4, 2)]),
    case('type: "BatchNorm"', [g(3, 2, 4, 2)], inplace=True, id="inplace"),
    case('type: "BatchNorm"', [g(3, 2, 4, 2)], phase="TEST", id="global_stats"),
    case('type: "BatchNorm" batch_norm_param { use_global_stats: false }', [g(5, 3)], phase="TEST",
         id="2d"),
    case('type: "BatchReindex"', [g(5, 3, 2), vals([4, 0, 4, 2], 4)], pd=[True, False]),
    case('type: "Bias" bias_param { axis: 1 num_axes: 1 filler { type: "gaussian" } }', [g(2, 3, 4)]),
    case('type: "Bias" bias_param { axis: 1 }', [g(2, 3, 4), g(3, 4)], id="two_bottoms"),
    case('type: "Clip" clip_param { min: -0.5 max: 0.6 }', [g(2, 3, 4)]),
    case('type: "Concat" concat_param { axis: 1 }', [g(2, 3, 4), g(2, 5, 4)]),
    case('type: "ContrastiveLoss" contrastive_loss_param { margin: 2 }',
         [g(5, 3), g(5, 3), vals([1, 0, 0, 1, 0], 5)], pd=[True, True, False]),
    case('type: "ContrastiveLoss" contrastive_loss_param { margin: 2 legacy_version: true }',
         [g(5, 3, 1, 1), g(5, 3, 1, 1), vals([1, 0, 0, 1, 0], 5, 1, 1, 1)], pd=[True, True, False],
         id="legacy"),
    case('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 stride: 2 pad: 1 %s }'
         % GF, [g(2, 3, 6, 5)]),
    case('type: "Convolution" convolution_param { num_output: 4 kernel_size: 1 group: 2 %s }' % GF,
         [g(2, 4, 3, 3), g(2, 4, 3, 3)], tops=2, id="1x1_group_two_bottoms"),
    case('type: "Crop" crop_param { axis: 2 offset: 1 offset: 2 }', [g(2, 3, 6, 6), g(2, 3, 4, 3)],
         pd=[True, False]),
    case(lambda c: 'name: "d" type: "Data" data_param { source: "%s" batch_size: 4 backend: LMDB } '
         'transform_param { crop_size: 3 mirror: true }' % c.lmdb(), tops=2, ltype="Data"),
    case('type: "Deconvolution" convolution_param { num_output: 4 kernel_size: 3 stride: 2 %s }' % GF,
         [g(2, 3, 3, 4)]),
    case('type: "Dropout" dropout_param { dropout_ratio: 0.4 }', [g(4, 5)]),
    case('type: "Dropout" dropout_param { dropout_ratio: 0.4 }', [g(4, 5)], inplace=True,
         id="inplace"),
    case('type: "Dropout"', [g(4, 5)], phase="TEST", id="test"),
    case('type: "DummyData" dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 4 } '
         'data_filler { type: "gaussian" } data_filler { type: "constant" value: 2 } }', tops=2),
    case('type: "ELU" elu_param { alpha: 0.5 }', [g(2, 3, 4)]),
    case('type: "Eltwise" eltwise_param { operation: PROD }', [g(2, 3), g(2, 3), g(2, 3)]),
    case('type: "Eltwise" eltwise_param { operation: PROD stable_prod_grad: false }',
         [g(2, 3), g(2, 3)], id="prod_unstable"),
    case('type: "Eltwise" eltwise_param { operation: SUM coeff: 1 coeff: -2 coeff: 0.5 }',
         [g(2, 3), g(2, 3), g(2, 3)], id="sum"),
    case('type: "Eltwise" eltwise_param { operation: MAX }', [g(2, 3, 2), g(2, 3, 2), g(2, 3, 2)],
         id="max"),
    case('type: "Embed" embed_param { num_output: 3 input_dim: 5 %s }' % GF, [ints(5, 2, 3)],
         pd=[False]),
    case('type: "EuclideanLoss"', [g(4, 3), g(4, 3)], pd=[True, True]),
    case('type: "EuclideanLoss"', [g(4, 3, 2), g(4, 6)], pd=[True, True], id="shapes_differ"),
    case('type: "Exp" exp_param { base: 2 scale: 0.5 shift: 0.1 }', [g(2, 3, 4)]),
    case('type: "Filter"', [g(4, 3), g(4, 2), vals([1, 0, 1, 1], 4, 1)], tops=2,
         pd=[True, True, False]),
    case('type: "Flatten"', [g(2, 3, 4)]),
    case(lambda c: 'type: "HDF5Data" top: "data" top: "label" '
         'hdf5_data_param { source: "%s" batch_size: 3 }' % c.hdf5_list(), tops=2, ltype="HDF5Data"),
    case(lambda c: (pytest.importorskip("h5py") and
                    'type: "HDF5Output" hdf5_output_param { file_name: "%s" }' % c.fresh(".h5")),
         [g(2, 3, 2, 2), g(2, 1)], tops=0, pd=[True, True], ltype="HDF5Output"),
    case('type: "HingeLoss"', [g(4, 5), ints(5, 4)], pd=[True, False]),
    case('type: "HingeLoss" hinge_loss_param { norm: L2 }', [g(4, 5), ints(5, 4)], pd=[True, False],
         id="l2"),
    case('type: "Im2col" convolution_param { kernel_size: 3 stride: 2 pad: 1 }', [g(2, 3, 5, 4)]),
    case(lambda c: 'type: "ImageData" image_data_param { source: "%s" root_folder: "%s" '
         'batch_size: 2 shuffle: true } transform_param { crop_size: 4 }' % c.image_list(), tops=2,
         ltype="ImageData"),
    case('type: "InfogainLoss"', [g(4, 5), ints(5, 4), u(0, 1, 1, 1, 5, 5)], pd=[True, False, False]),
    case('type: "InfogainLoss" infogain_loss_param { axis: 2 } loss_param { ignore_label: 1 } '
         'loss_weight: 1 loss_weight: 0',
         [g(2, 3, 4), ints(4, 2, 3), u(0, 1, 4, 4)], tops=2, pd=[True, False, False],
         id="axis_two_tops"),
    case('type: "InnerProduct" inner_product_param { num_output: 5 %s }' % GF, [g(2, 3, 4)]),
    case('type: "InnerProduct" inner_product_param { num_output: 5 axis: 2 transpose: true %s }'
         % GF, [g(2, 3, 4)], id="transpose"),
    case('type: "Input" input_param { shape { dim: 2 dim: 3 } }', tops=2),
    case('type: "LRN" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 }', [g(2, 5, 3, 3)]),
    case('type: "LRN" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL }',
         [g(2, 5, 3, 3)], id="within"),
    case('type: "LSTM" ' + RF, [g(3, 2, 4), CONT], pd=[True, False]),
    case('type: "LSTM" ' + RF, [g(3, 2, 4), CONT, g(2, 5)], pd=[True, False, True],
         id="static_input"),
    case('type: "LSTMUnit"', [g(1, 2, 3), g(1, 2, 12), vals([0, 1], 1, 2)], tops=2,
         pd=[True, True, False]),
    case('type: "Log" log_param { base: 2 scale: 0.5 shift: 1 }', [u(0.1, 2, 2, 3, 4)]),
    case('type: "MVN"', [g(2, 3, 4, 2)]),
    case('type: "MVN" mvn_param { normalize_variance: false }', [g(2, 3, 4, 2)], id="mean_only"),
    case('type: "MVN" mvn_param { across_channels: true }', [g(2, 3, 4, 2)], id="across"),
    case('type: "MemoryData" memory_data_param { batch_size: 2 channels: 2 height: 3 width: 2 }',
         tops=2, prepare=_memory_data),
    case('type: "MultinomialLogisticLoss"', [u(0.05, 1, 4, 5), ints(5, 4)], pd=[True, False]),
    case('type: "PReLU"', [g(2, 3, 4)]),
    case('type: "PReLU" prelu_param { channel_shared: true }', [g(2, 3, 4)], inplace=True,
         id="inplace"),
    case('type: "Parameter" parameter_param { shape { dim: 2 dim: 3 } }'),
    case('type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 }', [g(2, 3, 5, 6)]),
    case('type: "Pooling" pooling_param { pool: MAX kernel_size: 2 stride: 2 pad: 1 }',
         [g(2, 3, 5, 6)], tops=2, id="max_mask_top"),
    case('type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }',
         [g(2, 3, 5, 6)], id="ave"),
    case('type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 3 stride: 2 }',
         [u(0, 1, 2, 3, 5, 6)], id="stochastic"),
    case('type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 3 stride: 2 }',
         [u(0, 1, 2, 3, 5, 6)], phase="TEST", id="stochastic_test"),
    case('type: "Pooling" pooling_param { pool: MAX global_pooling: true }', [g(2, 3, 4, 3)],
         id="global"),
    case('type: "Power" power_param { power: 2 scale: 0.5 shift: 1 }', [g(2, 3, 4)]),
    case('type: "Power" power_param { power: 1.5 scale: 0.5 shift: 0.2 }', [u(0.1, 2, 2, 3, 4)],
         id="general"),
    case('name: "py" type: "Python" python_param { module: "bwd_first_pylayer" layer: "Twice" }',
         [g(2, 3)]),
    case('type: "RNN" ' + RF, [g(3, 2, 4), CONT], pd=[True, False]),
    case('type: "ReLU" relu_param { negative_slope: 0.1 }', [g(2, 3, 4)]),
    case('type: "ReLU"', [g(2, 3, 4)], inplace=True, id="inplace"),
    case('type: "Reduction" reduction_param { operation: SUMSQ axis: 1 coeff: 2 }', [g(2, 3, 4)]),
    case('type: "Reduction" reduction_param { operation: ASUM }', [g(2, 3, 4)], id="asum"),
    case('type: "Reduction" reduction_param { operation: MEAN axis: 2 }', [g(2, 3, 4)], id="mean"),
    case('type: "Reshape" reshape_param { shape { dim: 0 dim: -1 } }', [g(2, 3, 4)]),
    case('type: "SPP" spp_param { pyramid_height: 2 pool: MAX }', [g(2, 3, 5, 4)]),
    case('type: "SPP" spp_param { pyramid_height: 1 pool: AVE }', [g(2, 3, 5, 4)], id="one_level"),
    case('type: "Scale" scale_param { axis: 1 num_axes: 1 bias_term: true '
         'filler { type: "gaussian" } bias_filler { type: "gaussian" } }', [g(2, 3, 4)]),
    case('type: "Scale" scale_param { axis: 1 num_axes: 1 bias_term: true '
         'filler { type: "gaussian" } bias_filler { type: "gaussian" } }', [g(2, 3, 4)],
         inplace=True, id="inplace"),
    case('type: "Scale" scale_param { filler { type: "gaussian" } }', [g(2, 3)], inplace=True,
         id="inplace_eltwise"),
    case('type: "Scale" scale_param { axis: 0 }', [g(2, 3, 4), g(2, 3)], id="two_bottoms"),
    case('type: "Sigmoid"', [g(2, 3, 4)]),
    case('type: "SigmoidCrossEntropyLoss"', [g(4, 3), u(0, 1, 4, 3)], pd=[True, False]),
    case('type: "SigmoidCrossEntropyLoss" loss_param { ignore_label: 1 }',
         [g(4, 3), ints(2, 4, 3, 1)], pd=[True, False], id="label_shape_differs"),
    case('type: "Silence"', [g(2, 3), g(4)], tops=0, pd=[True, True]),
    case('type: "Slice" slice_param { axis: 1 slice_point: 2 slice_point: 5 }', [g(2, 6, 3)], tops=3),
    case('type: "Softmax" softmax_param { axis: 1 }', [g(2, 4, 3)]),
    case('type: "SoftmaxWithLoss"', [g(4, 5), ints(5, 4)], pd=[True, False]),
    case('type: "SoftmaxWithLoss" loss_param { ignore_label: 2 normalization: FULL } loss_weight: 2 '
         'loss_weight: 0', [g(2, 4, 3), ints(4, 2, 3)], tops=2, pd=[True, False], id="two_tops"),
    case('type: "Split"', [g(2, 3)], tops=3),
    case('type: "Swish" swish_param { beta: 1.5 }', [g(2, 3, 4)]),
    case('type: "TanH"', [g(2, 3, 4)]),
    case('type: "Threshold" threshold_param { threshold: 0.2 }', [g(2, 3, 4)], notimpl=True),
    case('type: "Tile" tile_param { axis: 1 tiles: 3 }', [g(2, 3, 2)]),
    case(lambda c: 'type: "WindowData" window_data_param { source: "%s" batch_size: 4 '
         'fg_fraction: 0.5 context_pad: 1 } transform_param { crop_size: 4 mirror: true }'
         % c.windows(), tops=2, ltype="WindowData"),
]


def _id(cfg):
    return cfg["type"] + ("-" + cfg["id"] if cfg["id"] else "")


# --------------------------------------------------------------------------- harness
@pytest.fixture
def ctx(tmp_path, monkeypatch):
    (tmp_path / "bwd_first_pylayer.py").write_text(PY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return Ctx(tmp_path)


def _build(cfg, ctx, dtype):
    """SetUp a new layer on new bottoms (same weights and inputs every time)."""
    text = cfg["text"](ctx) if callable(cfg["text"]) else cfg["text"]
    seed(1701)
    layer = make_layer(text, phase=cfg["phase"], dtype=dtype)
    bottom = [_make_bottom(s, k, dtype) for k, s in enumerate(cfg["bottoms"])]
    top = [bottom[0]] if cfg["inplace"] else empty_blobs(cfg["tops"], dtype)
    layer.SetUp(bottom, top)
    if cfg["prepare"]:
        cfg["prepare"](layer)
    return layer, bottom, top


def _propagate_down(cfg, layer):
    if cfg["notimpl"]:
        return [True] * len(cfg["bottoms"])
    if cfg["pd"] is not None:
        return list(cfg["pd"])
    return [layer.allow_force_backward(i) for i in range(len(cfg["bottoms"]))]


def _set_top_diffs(layer, top):
    """Random top diffs, except on loss tops (SetUp put the loss weight there)."""
    rng = np.random.default_rng(5)
    for i, t in enumerate(top):
        if layer.loss(i) == 0 and t.count:
            t.diff[...] = rng.normal(size=t.shape)


def _forward_backward(cfg, layer, bottom, top):
    """Forward then Backward; returns every number they produce."""
    seed(77)
    loss = layer.Forward(bottom, top)
    out = {"loss": np.asarray(loss, dtype=np.float64)}
    for i, t in enumerate(top):
        out["top%d" % i] = t.data.copy()
    _set_top_diffs(layer, top)
    pd = _propagate_down(cfg, layer)
    if not cfg["notimpl"]:
        layer.Backward(top, pd, bottom)
        for i, b in enumerate(bottom):
            if pd[i]:
                out["bottom_diff%d" % i] = b.diff.copy()
    for i, p in enumerate(layer.blobs):
        out["param%d" % i] = p.data.copy()
        out["param_diff%d" % i] = p.diff.copy()
    return out


def _close(layer):
    close = getattr(layer, "close", None)
    if close is not None:
        close()


def test_every_layer_type_has_a_case():
    assert sorted({c["type"] for c in CASES}) == layer_types()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("cfg", CASES, ids=[_id(c) for c in CASES])
def test_backward_before_forward(cfg, dtype, ctx, mode):
    layer, bottom, top = _build(cfg, ctx, dtype)
    try:
        _set_top_diffs(layer, top)
        pd = _propagate_down(cfg, layer)
        if cfg["notimpl"]:
            # Caffe's Backward is NOT_IMPLEMENTED: a LayerError, whatever Forward did.
            with pytest.raises(LayerError):
                layer.Backward(top, pd, bottom)
        else:
            try:
                layer.Backward(top, pd, bottom)
            except CaffeError as e:
                pytest.fail("Backward before Forward raised %s: %s (Caffe computes with zeros)"
                            % (type(e).__name__, e))
            except Exception as e:   # AttributeError, broadcasting ValueError, ...
                pytest.fail("Backward before Forward escaped with %s: %s" % (type(e).__name__, e))

        # Internal buffers: Blobs of the layer's dtype (integer ones hold indices).
        for name, value in vars(layer).items():
            if isinstance(value, Blob) and value.dtype.kind == "f":
                assert value.dtype == layer.dtype, "buffer %s is %s" % (name, value.dtype)

        # Then Forward + Backward as if nothing had happened (the net clears the param diffs).
        inputs = [_make_bottom(s, k, dtype) for k, s in enumerate(cfg["bottoms"])]
        for b, fresh in zip(bottom, inputs):
            b.data[...] = fresh.data
            b.diff[...] = 0
        for p in layer.blobs:
            p.diff[...] = 0
        got = _forward_backward(cfg, layer, bottom, top)
    finally:
        _close(layer)

    ref_layer, ref_bottom, ref_top = _build(cfg, ctx, dtype)
    try:
        want = _forward_backward(cfg, ref_layer, ref_bottom, ref_top)
    finally:
        _close(ref_layer)
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


# --------------------------------------------------------------------------- Caffe's numbers
def _backward_first(text, bottoms, tops=1, pd=None, phase="TRAIN", inplace=False):
    cfg = case(text, bottoms, tops=tops, pd=pd, phase=phase, inplace=inplace)
    layer, bottom, top = _build(cfg, None, np.float64)
    _set_top_diffs(layer, top)
    layer.Backward(top, _propagate_down(cfg, layer), bottom)
    return layer, bottom, top


def test_zero_buffers_give_caffes_numbers(mode):
    # EuclideanLoss / ContrastiveLoss: diff_ = 0 -> zero gradients.
    _, bottom, _ = _backward_first('type: "EuclideanLoss"', [g(4, 3), g(4, 3)], pd=[True, True])
    assert not bottom[0].diff.any() and not bottom[1].diff.any()
    _, bottom, _ = _backward_first('type: "ContrastiveLoss"',
                                   [g(5, 3), g(5, 3), vals([1, 0, 0, 1, 0], 5)], pd=[True, True, False])
    assert not bottom[0].diff.any() and not bottom[1].diff.any()
    # Eltwise MAX: max_idx_ = 0 -> bottom 0 takes the whole top diff.
    _, bottom, top = _backward_first('type: "Eltwise" eltwise_param { operation: MAX }',
                                     [g(2, 3), g(2, 3)])
    np.testing.assert_array_equal(bottom[0].diff, top[0].diff)
    assert not bottom[1].diff.any()
    # Pooling MAX: max_idx_ = 0.  The CPU scatters: every top diff of a plane lands on its
    # first element.  The GPU gathers (MaxPoolBackward: a bottom element takes the diffs of
    # the windows covering it whose mask names it): element 0 only gets window (0, 0)'s.
    _, bottom, top = _backward_first('type: "Pooling" pooling_param { pool: MAX kernel_size: 2 }',
                                     [g(2, 3, 4, 4)])
    want = np.zeros((2, 3, 16))
    if mode == "gpu":
        want[:, :, 0] = top[0].diff[:, :, 0, 0]
    else:
        want[:, :, 0] = top[0].diff.reshape(2, 3, -1).sum(axis=2)
    np.testing.assert_allclose(bottom[0].diff.reshape(2, 3, 16), want, rtol=1e-12)
    # Dropout (TRAIN): rand_vec_ = 0 -> no gradient gets through.
    _, bottom, _ = _backward_first('type: "Dropout"', [g(3, 4)])
    assert not bottom[0].diff.any()
    # LRN WITHIN_CHANNEL: the inner blobs are 0 -> zero gradient.
    _, bottom, _ = _backward_first('type: "LRN" lrn_param { norm_region: WITHIN_CHANNEL }',
                                   [g(2, 3, 3, 3)])
    assert not bottom[0].diff.any()
    # In-place Scale: temp_ = 0 -> zero scale gradient.
    layer, _, _ = _backward_first('type: "Scale" scale_param { axis: 1 num_axes: 1 }', [g(2, 3, 4)],
                                  inplace=True)
    assert not layer.blobs[0].diff.any()
    # SoftmaxWithLoss: prob_ = 0 -> -1 at each label, scaled by weight / normalizer.
    _, bottom, _ = _backward_first('type: "SoftmaxWithLoss"', [g(4, 5), vals([0, 3, 4, 3], 4)],
                                   pd=[True, False])
    want = np.zeros((4, 5))
    want[np.arange(4), [0, 3, 4, 3]] = -1.0 / 4
    np.testing.assert_array_equal(bottom[0].diff, want)
    # BatchNorm / MVN: they divide by the zero variance_ / temp_ -> non-finite, no exception.
    for text in ('type: "BatchNorm"', 'type: "MVN"'):
        _, bottom, _ = _backward_first(text, [g(3, 2, 2, 2)])
        assert not np.isfinite(bottom[0].diff).any()


# --------------------------------------------------------------------------- nets
# The training nets of CaffeNet/GoogLeNet and the siamese deploy net (10^8 elements and
# more) take most of a minute on the CPU; their layer types are all in smaller nets here.
MAX_NET_ELEMENTS = 20_000_000


def test_golden_nets_backward_before_forward(shared_dir):
    """Every golden-case net with force_backward: Backward with no Forward before it."""
    from engine.core.net import TEST, TRAIN, Net
    from engine.core.upgrade import read_net_params
    bad = []
    ran = skipped = 0
    for path in sorted(glob.glob(str(shared_dir / "golden" / "cases" / "*.json"))):
        with open(path) as f:
            spec = json.load(f)
        if "solver" in spec:
            continue
        proto = os.path.join(str(shared_dir / "zoo"), spec["prototxt"])
        try:
            param = read_net_params(proto)
            param.force_backward = True
            net = Net.from_param(param, TRAIN if spec.get("phase") == "TRAIN" else TEST,
                                 level=spec.get("level", 0), stages=spec.get("stages", []),
                                 model_dir=os.path.dirname(os.path.abspath(proto)))
        except Exception:
            continue    # nets that do not build are the error catalogue's business
        if sum(b.count for b in net.blobs.values()) > MAX_NET_ELEMENTS:
            skipped += 1
            continue
        try:
            net.Backward()
            ran += 1
        except CaffeError:
            ran += 1
        except Exception as e:
            bad.append("%s: %s: %s" % (os.path.basename(path), type(e).__name__, str(e)[:200]))
        finally:
            for layer in net.layers:
                _close(layer)
    assert ran > 0 and skipped < ran
    assert not bad, "\n".join(bad)

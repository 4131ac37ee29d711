"""Vision layers: Convolution, Deconvolution, Pooling, LRN, Im2col, SPP, Crop.

Forward passes are checked against direct loop-based NumPy references (written
from the definitions, not from the engine's code), gradients with Caffe's
GradientChecker settings from test_{convolution,deconvolution,pooling,lrn,
im2col,spp,crop}_layer.cpp (on smaller blobs, so the exhaustive checks stay
fast).  Tests taking the ``mode`` fixture also run on the GPU when one is there.
"""
import itertools
import subprocess
import sys

import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import LayerError
from engine.instruments.gradient_check import GradientChecker
from tests.layers.helpers import empty_blobs, gaussian_blob, make_layer, uniform_blob


# ====================================================================== references
def ref_conv(x, w, b, stride, pad, dil, group):
    """Direct N-D convolution: x (N, C, *S), w (O, C/g, *K)."""
    N, C = x.shape[:2]
    S = x.shape[2:]
    O = w.shape[0]
    K = w.shape[2:]
    nd = len(S)
    out = tuple((S[i] + 2 * pad[i] - (dil[i] * (K[i] - 1) + 1)) // stride[i] + 1 for i in range(nd))
    y = np.zeros((N, O) + out)
    cg, og = C // group, O // group
    for n in range(N):
        for o in range(O):
            g = o // og
            for pos in itertools.product(*[range(v) for v in out]):
                s = 0.0
                for c in range(cg):
                    for k in itertools.product(*[range(v) for v in K]):
                        idx = [pos[i] * stride[i] - pad[i] + k[i] * dil[i] for i in range(nd)]
                        if all(0 <= idx[i] < S[i] for i in range(nd)):
                            s += x[(n, g * cg + c) + tuple(idx)] * w[(o, c) + k]
                y[(n, o) + pos] = s + (b[o] if b is not None else 0.0)
    return y


def ref_deconv(x, w, b, stride, pad, dil, group):
    """Direct transposed convolution: x (N, C, *S), w (C, O/g, *K)."""
    N, C = x.shape[:2]
    S = x.shape[2:]
    og = w.shape[1]
    O = og * group
    K = w.shape[2:]
    nd = len(S)
    out = tuple(stride[i] * (S[i] - 1) + dil[i] * (K[i] - 1) + 1 - 2 * pad[i] for i in range(nd))
    y = np.zeros((N, O) + out)
    cg = C // group
    for n in range(N):
        for c in range(C):
            g = c // cg
            for pos in itertools.product(*[range(v) for v in S]):
                for o in range(og):
                    for k in itertools.product(*[range(v) for v in K]):
                        idx = [pos[i] * stride[i] - pad[i] + k[i] * dil[i] for i in range(nd)]
                        if all(0 <= idx[i] < out[i] for i in range(nd)):
                            y[(n, g * og + o) + tuple(idx)] += x[(n, c) + pos] * w[(c, o) + k]
    if b is not None:
        y += b.reshape((1, O) + (1,) * nd)
    return y


def pooled_size(H, k, s, p, ceil=True):
    f = np.ceil if ceil else np.floor
    ph = int(f((H + 2 * p - k) / s)) + 1
    if p and (ph - 1) * s >= H + p:
        ph -= 1
    return ph


def ref_pool(x, kh, kw, sh, sw, ph, pw, method, ceil=True):
    N, C, H, W = x.shape
    PH = pooled_size(H, kh, sh, ph, ceil)
    PW = pooled_size(W, kw, sw, pw, ceil)
    y = np.zeros((N, C, PH, PW))
    mask = np.full((N, C, PH, PW), -1)
    for n, c, i, j in itertools.product(range(N), range(C), range(PH), range(PW)):
        h0, w0 = i * sh - ph, j * sw - pw
        if method == "MAX":
            best, arg = -np.inf, -1
            for h in range(max(h0, 0), min(h0 + kh, H)):
                for w in range(max(w0, 0), min(w0 + kw, W)):
                    if x[n, c, h, w] > best:
                        best, arg = x[n, c, h, w], h * W + w
            y[n, c, i, j], mask[n, c, i, j] = best, arg
        else:
            size = (min(h0 + kh, H + ph) - h0) * (min(w0 + kw, W + pw) - w0)
            s = x[n, c, max(h0, 0):min(h0 + kh, H), max(w0, 0):min(w0 + kw, W)].sum()
            y[n, c, i, j] = s / size
    return y, mask


def ref_lrn(x, size, alpha, beta, k, within=False):
    N, C, H, W = x.shape
    y = np.empty_like(x)
    pre = (size - 1) // 2
    for n, c, h, w in itertools.product(range(N), range(C), range(H), range(W)):
        if within:
            win = x[n, c, max(h - pre, 0):min(h - pre + size, H), max(w - pre, 0):min(w - pre + size, W)]
            scale = 1.0 + (win ** 2).sum() * alpha / (size * size)
        else:
            win = x[n, max(c - pre, 0):min(c - pre + size, C), h, w]
            scale = k + (win ** 2).sum() * alpha / size
        y[n, c, h, w] = x[n, c, h, w] / scale ** beta
    return y


def ref_im2col(x, K, stride, pad, dil):
    """x (N, C, *S) -> (N, C*prod(K), *O)."""
    N, C = x.shape[:2]
    S = x.shape[2:]
    nd = len(S)
    out = tuple((S[i] + 2 * pad[i] - (dil[i] * (K[i] - 1) + 1)) // stride[i] + 1 for i in range(nd))
    y = np.zeros((N, C * int(np.prod(K))) + out)
    for n in range(N):
        row = 0
        for c in range(C):
            for k in itertools.product(*[range(v) for v in K]):
                for pos in itertools.product(*[range(v) for v in out]):
                    idx = [pos[i] * stride[i] - pad[i] + k[i] * dil[i] for i in range(nd)]
                    if all(0 <= idx[i] < S[i] for i in range(nd)):
                        y[(n, row) + pos] = x[(n, c) + tuple(idx)]
                row += 1
    return y


# ====================================================================== helpers
def run(layer, bottoms, ntop=1, dtype=np.float64):
    top = empty_blobs(ntop, dtype=dtype)
    layer.SetUp(bottoms, top)
    layer.Forward(bottoms, top)
    return top


def fwd_bwd_arrays(text, shapes, mode, phase="TRAIN", ntop=1, seed=7):
    """Forward+backward a freshly built layer in ``mode``; host copies of everything."""
    backend.set_mode_gpu() if mode == "gpu" else backend.set_mode_cpu()
    backend.set_random_seed(5)
    bottoms = [gaussian_blob(s, seed=seed + i) for i, s in enumerate(shapes)]
    layer = make_layer(text, phase=phase)
    top = empty_blobs(ntop)
    layer.SetUp(bottoms, top)
    if layer.blobs:
        rng = np.random.default_rng(11)
        for b in layer.blobs:
            b.data[...] = rng.normal(size=b.shape)
    layer.Forward(bottoms, top)
    rng = np.random.default_rng(13)
    for t in top:
        t.diff[...] = rng.normal(size=t.shape)
    for b in layer.blobs:
        b.diff[...] = 0
    layer.Backward(top, [True] * len(bottoms), bottoms)
    out = [t.data.copy() for t in top] + [b.diff.copy() for b in bottoms] + \
        [p.diff.copy() for p in layer.blobs]
    backend.set_mode_cpu()
    return out


CONV = ('type: "Convolution" convolution_param { %s weight_filler { type: "gaussian" } '
        'bias_filler { type: "gaussian" } }')
DECONV = ('type: "Deconvolution" convolution_param { %s weight_filler { type: "gaussian" } '
          'bias_filler { type: "gaussian" } }')


@pytest.fixture(params=["batch_last", "standard"])
def col_layout(request, monkeypatch):
    """Run a convolution test with each CPU column layout."""
    from engine.core.layers import vision
    monkeypatch.setattr(vision, "CPU_COL_LAYOUT", request.param)
    return request.param


# ====================================================================== convolution
def test_conv_setup_shapes():
    # test_convolution_layer.cpp TestSetup
    b1, b2 = gaussian_blob((2, 3, 6, 4)), gaussian_blob((2, 3, 6, 4), seed=2)
    layer = make_layer(CONV % "kernel_size: 3 stride: 2 num_output: 4")
    top = empty_blobs(2)
    layer.SetUp([b1, b2], top)
    assert top[0].shape == (2, 4, 2, 1) and top[1].shape == (2, 4, 2, 1)
    assert layer.blobs[0].shape == (4, 3, 3, 3) and layer.blobs[1].shape == (4,)
    layer = make_layer(CONV % "kernel_size: 3 stride: 2 num_output: 3 group: 3")
    layer.SetUp([b1, b2], top)
    assert top[0].shape == (2, 3, 2, 1)
    assert layer.blobs[0].shape == (3, 1, 3, 3)


@pytest.mark.parametrize("params,shape,stride,pad,dil,group,bias", [
    ("kernel_size: 3 stride: 2 num_output: 4", (2, 3, 6, 4), (2, 2), (0, 0), (1, 1), 1, True),
    ("kernel_size: 3 stride: 2 num_output: 3 group: 3", (2, 3, 6, 4), (2, 2), (0, 0), (1, 1), 3, True),
    ("kernel_size: 3 num_output: 4 dilation: 2 pad: 1", (2, 3, 7, 6), (1, 1), (1, 1), (2, 2), 1, True),
    ("kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 0 num_output: 5 bias_term: false",
     (2, 4, 7, 6), (2, 1), (1, 0), (1, 1), 1, False),
    ("kernel_size: 3 num_output: 6 group: 2 dilation: 2 pad: 1 stride: 2", (2, 4, 9, 9), (2, 2), (1, 1),
     (2, 2), 2, True),
    ("kernel_size: 1 num_output: 5", (3, 4, 3, 5), (1, 1), (0, 0), (1, 1), 1, True),
    ("kernel_size: 1 num_output: 4 group: 2", (1, 4, 3, 3), (1, 1), (0, 0), (1, 1), 2, True),
])
def test_conv_forward_matches_reference(mode, col_layout, params, shape, stride, pad, dil, group, bias):
    x = gaussian_blob(shape)
    layer = make_layer(CONV % params)
    top = run(layer, [x])
    ref = ref_conv(x.data, layer.blobs[0].data, layer.blobs[1].data if bias else None, stride, pad, dil,
                   group)
    assert top[0].shape == ref.shape
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-10)
    assert len(layer.blobs) == (2 if bias else 1)


def test_conv_float32_matches_reference(mode):
    x = gaussian_blob((2, 3, 6, 5), dtype=np.float32)
    layer = make_layer(CONV % "kernel_size: 3 num_output: 4 pad: 1", dtype=np.float32)
    top = run(layer, [x], dtype=np.float32)
    assert top[0].data.dtype == np.float32
    ref = ref_conv(x.data.astype(np.float64), layer.blobs[0].data.astype(np.float64),
                   layer.blobs[1].data.astype(np.float64), (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-5, atol=1e-5)


def test_conv_3d_forward(mode, col_layout):
    # TestSimple3DConvolution-like: 3 spatial axes, N-D im2col path.
    x = gaussian_blob((2, 3, 5, 4, 3))
    layer = make_layer(CONV % "kernel_size: 3 stride: 2 pad: 1 num_output: 4")
    top = run(layer, [x])
    assert layer.blobs[0].shape == (4, 3, 3, 3, 3)
    ref = ref_conv(x.data, layer.blobs[0].data, layer.blobs[1].data, (2, 2, 2), (1, 1, 1), (1, 1, 1), 1)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-10)


def test_conv_3d_dilated_force_nd(mode):
    x = gaussian_blob((1, 2, 6, 5, 5))
    layer = make_layer(CONV % "kernel_size: 2 kernel_size: 3 kernel_size: 2 dilation: 2 stride: 1 "
                              "num_output: 3 force_nd_im2col: true")
    top = run(layer, [x])
    ref = ref_conv(x.data, layer.blobs[0].data, layer.blobs[1].data, (1, 1, 1), (0, 0, 0), (2, 2, 2), 1)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-10)


def test_conv_0d_is_inner_product():
    # Test0DConvolution: axis 3 of a 4-D blob -> no spatial axes.
    x = gaussian_blob((2, 3, 6, 4))
    layer = make_layer(CONV % "num_output: 3 axis: 3")
    top = run(layer, [x])
    assert top[0].shape == (2, 3, 6, 3)
    w, b = layer.blobs[0].data, layer.blobs[1].data
    assert w.shape == (3, 4)
    np.testing.assert_allclose(top[0].data, x.data @ w.T + b, rtol=1e-12)


def test_conv_sobel_separable():
    # TestSobelConvolution: the 3x3 Sobel filter equals [1 2 1]^T then [-1 0 1].
    x = gaussian_blob((2, 3, 6, 4))
    full = make_layer(CONV % "kernel_size: 3 stride: 2 num_output: 1 bias_term: false")
    full.blobs = [Blob((1, 3, 3, 3), dtype=np.float64)]
    full.blobs[0].data[...] = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]])
    t_full = run(full, [x])
    col = make_layer(CONV % "kernel_h: 3 kernel_w: 1 stride_h: 2 stride_w: 1 num_output: 1 bias_term: false")
    col.blobs = [Blob((1, 3, 3, 1), dtype=np.float64)]
    col.blobs[0].data[...] = np.array([1, 2, 1]).reshape(3, 1)
    mid = run(col, [x])[0]
    row = make_layer(CONV % "kernel_h: 1 kernel_w: 3 stride_h: 1 stride_w: 2 num_output: 1 bias_term: false")
    row.blobs = [Blob((1, 1, 1, 3), dtype=np.float64)]
    row.blobs[0].data[...] = np.array([-1, 0, 1])
    t_sep = run(row, [mid])
    np.testing.assert_allclose(t_full[0].data, t_sep[0].data, atol=1e-10)


def test_conv_gradient(col_layout):
    # TestGradient: GradientChecker(1e-2, 1e-3), exhaustive, two bottoms.
    layer = make_layer(CONV % "kernel_size: 3 stride: 2 num_output: 2")
    bottoms = [gaussian_blob((2, 3, 5, 4)), gaussian_blob((2, 3, 5, 4), seed=3)]
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottoms, empty_blobs(2))


def test_conv_gradient_group_dilation_pad(col_layout):
    layer = make_layer(CONV % "kernel_size: 2 stride: 1 pad: 1 dilation: 2 num_output: 2 group: 2")
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [gaussian_blob((1, 4, 3, 3))],
                                                          empty_blobs(1))


@pytest.mark.parametrize("min_pixels", [1, 10 ** 9], ids=["per_image", "batched"])
def test_conv_1x1_per_image_and_batched(monkeypatch, min_pixels):
    """A 1x1 convolution over big maps runs a GEMM per image between the blobs; both forms
    give the reference's outputs and pass Caffe's gradient check."""
    from engine.core.layers import vision
    monkeypatch.setattr(vision.ConvolutionLayer, "PER_IMAGE_MIN_PIXELS", min_pixels)
    x = gaussian_blob((3, 4, 3, 5))
    layer = make_layer(CONV % "kernel_size: 1 num_output: 5")
    top = run(layer, [x])
    assert layer._per_image_1x1(3) == (min_pixels == 1)
    ref = ref_conv(x.data, layer.blobs[0].data, layer.blobs[1].data, (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-10)
    layer = make_layer(CONV % "kernel_size: 1 num_output: 3")
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [gaussian_blob((2, 4, 3, 3))], empty_blobs(1))


DEPTHWISE = [
    ("kernel_size: 3 pad: 1 num_output: 6 group: 6", (2, 6, 9, 8), (1, 1), (1, 1), (1, 1)),
    ("kernel_size: 3 pad: 1 stride: 2 num_output: 5 group: 5 bias_term: false", (2, 5, 10, 9), (2, 2), (1, 1),
     (1, 1)),
    ("kernel_size: 5 pad: 1 stride: 3 dilation: 2 num_output: 4 group: 4", (3, 4, 17, 16), (3, 3), (1, 1),
     (2, 2)),
    ("kernel_h: 2 kernel_w: 4 pad_h: 0 pad_w: 3 stride_h: 1 stride_w: 2 num_output: 3 group: 3",
     (1, 3, 7, 9), (1, 2), (0, 3), (1, 1)),
    ("kernel_size: 3 pad: 2 num_output: 2 group: 2", (1, 2, 2, 3), (1, 1), (2, 2), (1, 1)),
    # 3x3 at stride 1 (the one-pass forms), with a dilation and without padding
    ("kernel_size: 3 pad: 2 dilation: 2 num_output: 3 group: 3", (2, 3, 8, 7), (1, 1), (2, 2), (2, 2)),
    ("kernel_size: 3 num_output: 4 group: 4 bias_term: false", (3, 4, 5, 6), (1, 1), (0, 0), (1, 1)),
]


@pytest.mark.parametrize("stride,pad,dil", [(1, 1, 1), (2, 1, 1), (1, 2, 2), (1, 0, 1)])
def test_depthwise_3x3_forward_adds_the_taps_in_caffes_order(stride, pad, dil):
    # y = ((0 + w00 x00) + w01 x01) + ...: Caffe's column order, float32, the same bits
    from engine.core.kernels import depthwise, jit
    if not jit.AVAILABLE:
        pytest.skip("no Numba: the direct depthwise loops are not compiled")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 11, 9)).astype(np.float32)
    w = rng.standard_normal((5, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    H, W = x.shape[2:]
    OH = (H + 2 * pad - 2 * dil - 1) // stride + 1
    OW = (W + 2 * pad - 2 * dil - 1) // stride + 1
    y = np.empty((2, 5, OH, OW), np.float32)
    depthwise.forward(x, w, b, (stride, stride), (pad, pad), (dil, dil), y, lambda name, n: np.empty(n, np.float32))
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ref = np.zeros_like(y)
    for i in range(3):
        for j in range(3):
            rows = slice(i * dil, i * dil + stride * (OH - 1) + 1, stride)
            cols = slice(j * dil, j * dil + stride * (OW - 1) + 1, stride)
            tap = xp[:, :, rows, cols]
            ref += w[:, 0, i, j][None, :, None, None] * tap
    ref += b[None, :, None, None]
    np.testing.assert_array_equal(y, ref)


def _fwd_bwd32(params, shape, use_direct, monkeypatch):
    """Forward + backward of a float32 convolution on the host, with the direct depthwise
    loops or Caffe's grouped im2col + GEMM; (layer, top, bottom diff, param diffs)."""
    from engine.core.kernels import depthwise, jit
    if use_direct and not jit.AVAILABLE:
        pytest.skip("no Numba: the direct depthwise loops are not compiled")
    monkeypatch.setattr(depthwise, "ENABLED", use_direct)
    backend.set_mode_cpu()
    backend.set_random_seed(5)          # the same weights both ways
    x = gaussian_blob(shape, dtype=np.float32)
    layer = make_layer(CONV % params, dtype=np.float32)
    top = run(layer, [x], dtype=np.float32)
    assert layer._depthwise(x.data, top[0].data) == use_direct
    top[0].diff[...] = np.random.default_rng(3).normal(size=top[0].shape)
    for b in layer.blobs:
        b.diff[...] = 0.5          # the weight gradient is added to what is there
    layer.Backward(top, [True], [x])
    return layer, top[0].data.copy(), x.diff.copy(), [b.diff.copy() for b in layer.blobs]


@pytest.mark.parametrize("params,shape,stride,pad,dil", DEPTHWISE)
def test_conv_depthwise_direct_matches_caffes_grouped_gemm(monkeypatch, params, shape, stride, pad, dil):
    layer, y, dx, dps = _fwd_bwd32(params, shape, True, monkeypatch)
    w = layer.blobs[0].data
    bias = layer.blobs[1].data if len(layer.blobs) > 1 else None
    ref = ref_conv(gaussian_blob(shape).data, w.astype(np.float64), None if bias is None else
                   bias.astype(np.float64), stride, pad, dil, shape[1])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    _, y2, dx2, dps2 = _fwd_bwd32(params, shape, False, monkeypatch)
    np.testing.assert_allclose(y, y2, rtol=1e-6, atol=1e-6)
    # the input gradient is col2im's sum in col2im's order: the same bits
    np.testing.assert_array_equal(dx, dx2)
    for a, b in zip(dps, dps2):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert not np.array_equal(dps[0], np.full_like(dps[0], 0.5))


@pytest.mark.parametrize("params,shape", [(DEPTHWISE[0][0], DEPTHWISE[0][1]), (DEPTHWISE[1][0], DEPTHWISE[1][1])])
def test_conv_depthwise_direct_non_finite_as_caffe(monkeypatch, params, shape):
    """A NaN or inf in the image or the top diff, or a NaN weight, reaches the same outputs
    and gradients as through Caffe's columns (the stride-1 form's columns that are no output
    never meet them)."""
    def arrays(use_direct):
        from engine.core.kernels import depthwise, jit
        if use_direct and not jit.AVAILABLE:
            pytest.skip("no Numba: the direct depthwise loops are not compiled")
        monkeypatch.setattr(depthwise, "ENABLED", use_direct)
        backend.set_random_seed(5)
        x = gaussian_blob(shape, dtype=np.float32)
        x.data[0, 1, 2, 3] = np.nan
        x.data[1, 0, 4, 0] = np.inf
        layer = make_layer(CONV % params, dtype=np.float32)
        top = empty_blobs(1, dtype=np.float32)
        layer.SetUp([x], top)
        layer.blobs[0].data[2, 0, 1, 1] = np.nan
        layer.Forward([x], top)
        top[0].diff[...] = np.random.default_rng(3).normal(size=top[0].shape)
        top[0].diff[1, 3, 1, 1] = -np.inf
        layer.Backward(top, [True], [x])
        return [top[0].data.copy(), x.diff.copy()] + [b.diff.copy() for b in layer.blobs]

    for a, b in zip(arrays(True), arrays(False)):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(np.isinf(a), np.isinf(b))
        ok = np.isfinite(b)
        np.testing.assert_allclose(a[ok], b[ok], rtol=1e-5, atol=1e-5)


def test_conv_depthwise_direct_gradient(monkeypatch):
    from engine.core.kernels import depthwise
    monkeypatch.setattr(depthwise, "ENABLED", True)
    layer = make_layer(CONV % "kernel_size: 3 stride: 2 pad: 1 num_output: 3 group: 3", dtype=np.float32)
    x = gaussian_blob((2, 3, 5, 4), dtype=np.float32)
    top = empty_blobs(1, dtype=np.float32)
    layer.SetUp([x], top)
    if not layer._depthwise(x.data, layer.blobs[0].data):
        pytest.skip("no Numba: the direct depthwise loops are not compiled")
    GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(layer, [x], top)


def test_conv_gradient_rect_nobias():
    layer = make_layer(CONV % "kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 1 num_output: 2 "
                              "bias_term: false")
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [gaussian_blob((2, 2, 4, 3))],
                                                          empty_blobs(1))


def test_conv_gradient_1x1():
    layer = make_layer(CONV % "kernel_size: 1 num_output: 3")
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [gaussian_blob((2, 2, 2, 3))],
                                                          empty_blobs(1))


def test_conv_gradient_3d():
    # TestGradient3D (smaller blob).
    layer = make_layer(CONV % "kernel_size: 2 stride: 2 pad: 1 num_output: 2")
    GradientChecker(1e-2, 1e-3).check_gradient(layer, [gaussian_blob((1, 2, 3, 3, 2))], empty_blobs(1))


def test_conv_param_diffs_accumulate_and_respect_propagate_down():
    x = gaussian_blob((2, 3, 5, 5))
    layer = make_layer(CONV % "kernel_size: 3 num_output: 2")
    top = run(layer, [x])
    top[0].diff[...] = 1.0
    layer.Backward(top, [True], [x])
    once_w, once_b, once_x = layer.blobs[0].diff.copy(), layer.blobs[1].diff.copy(), x.diff.copy()
    np.testing.assert_allclose(once_b, np.full(2, 2 * 3 * 3))
    layer.Backward(top, [True], [x])
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * once_w)
    np.testing.assert_allclose(layer.blobs[1].diff, 2 * once_b)
    np.testing.assert_allclose(x.diff, once_x)           # bottom diff is overwritten
    x.diff[...] = 7
    layer.set_param_propagate_down(0, False)
    layer.Backward(top, [False], [x])
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * once_w)
    np.testing.assert_allclose(x.diff, 7)


def test_conv_errors():
    x = gaussian_blob((2, 4, 5, 5))
    with pytest.raises(LayerError, match="Number of output should be multiples of group"):
        make_layer(CONV % "kernel_size: 3 num_output: 3 group: 2").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match=r"Check failed: channels_ % group_ == 0 \(1 vs. 0\)"):
        make_layer(CONV % "kernel_size: 3 num_output: 3 group: 3").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match="Either kernel_size or kernel_h/w should be specified; not both."):
        make_layer(CONV % "kernel_size: 3 kernel_h: 2 kernel_w: 2 num_output: 2").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match=r"kernel_size must be specified once, or once per spatial dimension "
                                         r"\(kernel_size specified 3 times; 2 spatial dims\)\."):
        make_layer(CONV % "kernel_size: 3 kernel_size: 3 kernel_size: 3 num_output: 2").SetUp(
            [x], empty_blobs(1))
    with pytest.raises(LayerError, match=r"kernel_size specified 0 times; 2 spatial dims\)\."):
        make_layer(CONV % "num_output: 2").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match=r"Check failed: kernel_shape_data\[i\] > 0 \(0 vs. 0\) "
                                         r"Filter dimensions must be nonzero."):
        make_layer(CONV % "kernel_size: 0 num_output: 2").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match=r"Check failed: num_output_ > 0 \(0 vs. 0\)"):
        make_layer(CONV % "kernel_size: 3").SetUp([x], empty_blobs(1))
    layer = make_layer(CONV % "kernel_size: 3 num_output: 2")
    layer.blobs = [Blob((2, 4, 2, 2), dtype=np.float64), Blob((2,), dtype=np.float64)]
    with pytest.raises(LayerError, match=r"Incorrect weight shape: expected shape 2 4 3 3 \(72\); "
                                         r"instead, shape was 2 4 2 2 \(32\)"):
        layer.SetUp([x], empty_blobs(1))
    layer = make_layer(CONV % "kernel_size: 3 num_output: 2")
    top = empty_blobs(1)
    layer.SetUp([x], top)
    with pytest.raises(LayerError, match="Input size incompatible with convolution kernel."):
        layer.Forward([gaussian_blob((2, 3, 5, 5))], top)


def test_conv_large_batch_is_chunked(monkeypatch, col_layout):
    from engine.core.layers import vision
    x = gaussian_blob((5, 2, 4, 4))
    layer = make_layer(CONV % "kernel_size: 3 pad: 1 num_output: 3")
    full = run(layer, [x])[0].data.copy()
    top = empty_blobs(1)
    layer.SetUp([x], top)
    top_diff = np.random.default_rng(1).normal(size=(5, 3, 4, 4))
    top[0].diff[...] = top_diff
    layer.Backward(top, [True], [x])
    dx, dw = x.diff.copy(), layer.blobs[0].diff.copy()
    monkeypatch.setattr(vision, "COL_BUFFER_LIMIT", 2 * 18 * 16)   # two images per chunk
    layer.blobs[0].diff[...] = 0
    layer.blobs[1].diff[...] = 0
    layer.Forward([x], top)
    np.testing.assert_allclose(top[0].data, full, rtol=1e-12)
    top[0].diff[...] = top_diff
    layer.Backward(top, [True], [x])
    np.testing.assert_allclose(x.diff, dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(layer.blobs[0].diff, dw, rtol=1e-12)


# ====================================================================== deconvolution
def test_deconv_setup_shapes():
    # test_deconvolution_layer.cpp TestSetup
    b1, b2 = gaussian_blob((2, 3, 6, 4)), gaussian_blob((2, 3, 6, 4), seed=2)
    layer = make_layer(DECONV % "kernel_size: 3 stride: 2 num_output: 4")
    top = empty_blobs(2)
    layer.SetUp([b1, b2], top)
    assert top[0].shape == (2, 4, 13, 9) and top[1].shape == (2, 4, 13, 9)
    assert layer.blobs[0].shape == (3, 4, 3, 3)
    layer = make_layer(DECONV % "kernel_size: 3 stride: 2 num_output: 3 group: 3")
    layer.SetUp([b1, b2], top)
    assert top[0].shape == (2, 3, 13, 9)
    assert layer.blobs[0].shape == (3, 1, 3, 3)


@pytest.mark.parametrize("params,shape,stride,pad,dil,group", [
    ("kernel_size: 3 stride: 2 num_output: 4", (2, 3, 4, 3), (2, 2), (0, 0), (1, 1), 1),
    ("kernel_size: 4 stride: 2 pad: 1 num_output: 3", (2, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1),
    ("kernel_size: 3 stride: 2 num_output: 4 group: 2 dilation: 2", (1, 4, 3, 2), (2, 2), (0, 0), (2, 2), 2),
    ("kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 2 pad_h: 0 pad_w: 1 num_output: 2", (2, 3, 3, 4),
     (1, 2), (0, 1), (1, 1), 1),
    ("kernel_size: 1 num_output: 2", (2, 3, 2, 3), (1, 1), (0, 0), (1, 1), 1),
])
def test_deconv_forward_matches_reference(mode, col_layout, params, shape, stride, pad, dil, group):
    x = gaussian_blob(shape)
    layer = make_layer(DECONV % params)
    top = run(layer, [x])
    ref = ref_deconv(x.data, layer.blobs[0].data, layer.blobs[1].data, stride, pad, dil, group)
    assert top[0].shape == ref.shape
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-10)


def test_deconv_3d_forward(mode, col_layout):
    x = gaussian_blob((1, 2, 3, 2, 3))
    layer = make_layer(DECONV % "kernel_size: 2 stride: 2 pad: 1 num_output: 2")
    top = run(layer, [x])
    ref = ref_deconv(x.data, layer.blobs[0].data, layer.blobs[1].data, (2,) * 3, (1,) * 3, (1,) * 3, 1)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-10)


def test_deconv_gradient():
    # TestGradient: kernel 2, stride 1, GradientChecker(1e-2, 1e-3), exhaustive.
    layer = make_layer(DECONV % "kernel_size: 2 stride: 1 num_output: 1")
    bottoms = [gaussian_blob((2, 3, 2, 2)), gaussian_blob((2, 3, 2, 2), seed=3)]
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottoms, empty_blobs(2))


def test_deconv_gradient_stride_pad(col_layout):
    layer = make_layer(DECONV % "kernel_size: 3 stride: 2 pad: 1 num_output: 2 group: 2")
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [gaussian_blob((1, 2, 2, 2))],
                                                          empty_blobs(1))


def test_deconv_gradient_3d():
    layer = make_layer(DECONV % "kernel_size: 2 stride: 2 num_output: 2")
    GradientChecker(1e-2, 1e-3).check_gradient(layer, [gaussian_blob((1, 2, 2, 2, 2))], empty_blobs(1))


# ====================================================================== pooling
POOL = 'type: "Pooling" pooling_param { %s }'


def test_pool_setup_shapes():
    # test_pooling_layer.cpp TestSetup / TestSetupPadded / TestSetupGlobalPooling
    x = gaussian_blob((2, 3, 6, 5))
    top = run(make_layer(POOL % "kernel_size: 3 stride: 2"), [x])
    assert top[0].shape == (2, 3, 3, 2)
    top = run(make_layer(POOL % "kernel_size: 3 stride: 2 pad: 1 pool: AVE"), [x])
    assert top[0].shape == (2, 3, 4, 3)
    top = run(make_layer(POOL % "global_pooling: true pool: AVE"), [x])
    assert top[0].shape == (2, 3, 1, 1)
    top = run(make_layer(POOL % "kernel_size: 3 stride: 2"), [x], ntop=2)
    assert top[1].shape == (2, 3, 3, 2)


def test_pool_forward_max_caffe_example(mode):
    # TestForwardMax (top mask variant): 3x5 input, 2x2 kernel, stride 1.
    plane = np.array([[1, 2, 5, 2, 3], [9, 4, 1, 4, 8], [1, 2, 5, 2, 3]], dtype=np.float64)
    x = Blob((2, 2, 3, 5), dtype=np.float64)
    x.data[...] = plane
    top = run(make_layer(POOL % "kernel_size: 2 stride: 1 pool: MAX"), [x], ntop=2)
    np.testing.assert_array_equal(top[0].data[1, 1], [[9, 5, 5, 8], [9, 5, 5, 8]])
    np.testing.assert_array_equal(top[1].data[0, 1], [[5, 2, 2, 9], [5, 12, 12, 9]])


@pytest.mark.parametrize("params,k,s,p,method", [
    ("kernel_size: 3 stride: 2 pool: MAX", (3, 3), (2, 2), (0, 0), "MAX"),
    ("kernel_size: 3 stride: 2 pad: 1 pool: MAX", (3, 3), (2, 2), (1, 1), "MAX"),      # ceil + pad clip
    ("kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 3 pool: MAX", (3, 2), (2, 3), (0, 0), "MAX"),
    ("kernel_size: 2 stride: 3 pool: MAX", (2, 2), (3, 3), (0, 0), "MAX"),
    ("kernel_size: 3 stride: 2 pad: 1 pool: AVE", (3, 3), (2, 2), (1, 1), "AVE"),
    ("kernel_size: 3 stride: 2 pad: 2 pool: AVE", (3, 3), (2, 2), (2, 2), "AVE"),
    ("kernel_h: 2 kernel_w: 4 stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 2 pool: AVE", (2, 4), (2, 1), (1, 2),
     "AVE"),
    ("kernel_size: 4 stride: 3 pool: AVE", (4, 4), (3, 3), (0, 0), "AVE"),
])
def test_pool_forward_matches_reference(mode, params, k, s, p, method):
    x = gaussian_blob((2, 3, 8, 7))
    ntop = 2 if method == "MAX" else 1
    top = run(make_layer(POOL % params), [x], ntop=ntop)
    ref, mask = ref_pool(x.data, k[0], k[1], s[0], s[1], p[0], p[1], method)
    assert top[0].shape == ref.shape
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-12, atol=1e-12)
    if method == "MAX":
        np.testing.assert_array_equal(top[1].data, mask)


def test_pool_max_ties_first_wins_and_mask_internal(mode):
    x = Blob((1, 1, 4, 4), dtype=np.float64)
    x.data[...] = 1.0
    layer = make_layer(POOL % "kernel_size: 2 stride: 2 pool: MAX")
    top = run(layer, [x], ntop=2)
    np.testing.assert_array_equal(top[1].data[0, 0], [[0, 2], [8, 10]])
    # One top: the mask stays internal and backward routes through it.
    layer = make_layer(POOL % "kernel_size: 3 stride: 1 pad: 1 pool: MAX")
    y = gaussian_blob((2, 2, 4, 5))
    top = run(layer, [y])
    _, mask = ref_pool(y.data, 3, 3, 1, 1, 1, 1, "MAX")
    top[0].diff[...] = 1.0
    layer.Backward(top, [True], [y])
    expect = np.zeros((2, 2, 20))
    for n, c in itertools.product(range(2), range(2)):
        np.add.at(expect[n, c], mask[n, c].ravel(), 1.0)
    np.testing.assert_allclose(y.diff.reshape(2, 2, 20), expect)


def test_pool_max_nan_and_neg_inf_follow_caffe():
    x = Blob((1, 1, 2, 4), dtype=np.float64)
    x.data[...] = [[np.nan, 1.0, -np.inf, -np.inf], [2.0, np.nan, -np.inf, -np.inf]]
    top = run(make_layer(POOL % "kernel_size: 2 stride: 2 pool: MAX"), [x], ntop=2)
    # Caffe's loop: strict '>' from -FLT_MAX never takes NaN or -inf.
    assert top[0].data[0, 0, 0, 0] == 2.0 and top[1].data[0, 0, 0, 0] == 4
    assert top[0].data[0, 0, 0, 1] == -np.finfo(np.float32).max and top[1].data[0, 0, 0, 1] == -1


def test_pool_max_global_nan_and_large_kernel(mode):
    x = gaussian_blob((2, 2, 3, 4))
    x.data[0, 1, 0, 0] = np.nan
    top = run(make_layer(POOL % "global_pooling: true pool: MAX"), [x], ntop=2)
    ref, mask = ref_pool(x.data, 3, 4, 1, 1, 0, 0, "MAX")
    np.testing.assert_array_equal(top[0].data, ref)
    np.testing.assert_array_equal(top[1].data, mask)
    # More than 255 kernel offsets (wider argmax bookkeeping).
    y = gaussian_blob((1, 2, 20, 19))
    top = run(make_layer(POOL % "kernel_size: 17 stride: 2 pool: MAX"), [y], ntop=2)
    ref, mask = ref_pool(y.data, 17, 17, 2, 2, 0, 0, "MAX")
    np.testing.assert_array_equal(top[0].data, ref)
    np.testing.assert_array_equal(top[1].data, mask)


def test_pool_ceil_and_floor_rounding(mode):
    x = gaussian_blob((1, 2, 6, 6))
    top = run(make_layer(POOL % "kernel_size: 3 stride: 2 pool: MAX"), [x])
    assert top[0].shape == (1, 2, 3, 3)     # ceil((6-3)/2)+1 = 3
    top = run(make_layer(POOL % "kernel_size: 3 stride: 2 pool: MAX round_mode: FLOOR"), [x])
    assert top[0].shape == (1, 2, 2, 2)
    ref, _ = ref_pool(x.data, 3, 3, 2, 2, 0, 0, "MAX", ceil=False)
    np.testing.assert_allclose(top[0].data, ref)
    # Padding: the last window must start inside the image (8 + 2 - 3)/2 -> 5 -> 4 windows? no:
    # ceil(7/2)+1 = 5, and (5-1)*2 = 8 >= 8+1? no -> 5 stays; with 7: ceil(6/2)+1 = 4, 6 >= 8 no.
    y = gaussian_blob((1, 1, 5, 5))
    top = run(make_layer(POOL % "kernel_size: 2 stride: 2 pad: 1 pool: AVE"), [y])
    # ceil((5+2-2)/2)+1 = 4, (4-1)*2 = 6 >= 5+1 -> clipped to 3.
    assert top[0].shape == (1, 1, 3, 3)
    ref, _ = ref_pool(y.data, 2, 2, 2, 2, 1, 1, "AVE")
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-12)


def test_pool_global(mode):
    x = gaussian_blob((2, 3, 5, 4))
    top = run(make_layer(POOL % "global_pooling: true pool: AVE"), [x])
    np.testing.assert_allclose(top[0].data[:, :, 0, 0], x.data.mean(axis=(2, 3)), rtol=1e-12)
    top = run(make_layer(POOL % "global_pooling: true pool: MAX"), [x], ntop=2)
    np.testing.assert_allclose(top[0].data[:, :, 0, 0], x.data.max(axis=(2, 3)))
    np.testing.assert_array_equal(top[1].data[:, :, 0, 0], x.data.reshape(2, 3, -1).argmax(axis=2))


def test_pool_stochastic_train_and_test(mode):
    x = uniform_blob((2, 3, 6, 5), lo=0.1, hi=1.0)
    layer = make_layer(POOL % "kernel_size: 3 stride: 2 pool: STOCHASTIC", phase="TRAIN")
    backend.set_random_seed(1701)
    top = run(layer, [x])
    y = top[0].data
    assert y.shape == (2, 3, 3, 2)
    for n, c, i, j in itertools.product(range(2), range(3), range(3), range(2)):
        win = x.data[n, c, 2 * i:min(2 * i + 3, 6), 2 * j:min(2 * j + 3, 5)]
        assert y[n, c, i, j] in win          # a sampled element of its window
    top[0].diff[...] = 1.0
    layer.Backward(top, [True], [x])
    assert x.diff.sum() == pytest.approx(top[0].count)
    assert set(np.unique(x.diff)) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    # TEST phase: the probability-weighted average sum(x^2)/sum(x).
    layer = make_layer(POOL % "kernel_size: 3 stride: 2 pool: STOCHASTIC", phase="TEST")
    top = run(layer, [x])
    for n, c, i, j in itertools.product(range(2), range(3), range(3), range(2)):
        win = x.data[n, c, 2 * i:min(2 * i + 3, 6), 2 * j:min(2 * j + 3, 5)]
        assert top[0].data[n, c, i, j] == pytest.approx((win ** 2).sum() / win.sum(), rel=1e-12)


def test_pool_gradient_max():
    # TestGradientMax: kernel 3..4 x 3..4, stride 2, pad 1, GradientChecker(1e-4, 1e-2).
    for kh, kw in [(3, 3), (3, 4)]:
        layer = make_layer(POOL % ("kernel_h: %d kernel_w: %d stride: 2 pad: 1 pool: MAX" % (kh, kw)))
        GradientChecker(1e-4, 1e-2).check_gradient_exhaustive(layer, [gaussian_blob((1, 2, 5, 4))],
                                                              empty_blobs(1))


def test_pool_gradient_max_top_mask():
    layer = make_layer(POOL % "kernel_size: 3 stride: 2 pool: MAX")
    checker = GradientChecker(1e-4, 1e-2)
    bottom, top = [gaussian_blob((1, 2, 5, 5))], empty_blobs(2)
    layer.SetUp(bottom, top)
    for j in range(top[0].count):       # check the pooled top only, as Caffe's test does
        checker.check_single(layer, bottom, top, -1, 0, j)


def test_pool_gradient_ave():
    # TestGradientAve (stride 2) and TestGradientAvePadded (pad 2), GradientChecker(1e-2, 1e-2).
    for params in ["kernel_h: 3 kernel_w: 4 stride: 2 pool: AVE",
                   "kernel_size: 3 stride: 2 pad: 2 pool: AVE"]:
        layer = make_layer(POOL % params)
        GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(layer, [gaussian_blob((1, 2, 5, 4))],
                                                              empty_blobs(1))


def test_pool_gradient_stochastic():
    layer = make_layer(POOL % "kernel_size: 3 stride: 2 pool: STOCHASTIC", phase="TRAIN")
    GradientChecker(1e-4, 1e-2).check_gradient(layer, [uniform_blob((1, 2, 5, 5), lo=0.1)],
                                               empty_blobs(1))


def test_pool_errors():
    x = gaussian_blob((2, 3, 6, 5))
    with pytest.raises(LayerError, match=r"Check failed: pad_h_ < kernel_h_ \(3 vs. 3\)"):
        make_layer(POOL % "kernel_size: 3 pad: 3").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match="With Global_pooling: true Filter size cannot specified"):
        make_layer(POOL % "global_pooling: true kernel_size: 2").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match="Filter size is kernel_size OR kernel_h and kernel_w; not both"):
        make_layer(POOL % "stride: 2").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match=r"Check failed: kernel_w_ > 0 \(0 vs. 0\) Filter dimensions cannot "
                                         r"be zero."):
        make_layer(POOL % "kernel_h: 2 kernel_w: 0").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match="Padding implemented only for average and max pooling."):
        make_layer(POOL % "kernel_size: 3 pad: 1 pool: STOCHASTIC").SetUp([x], empty_blobs(1))
    with pytest.raises(LayerError, match="Input must have 4 axes"):
        make_layer(POOL % "kernel_size: 2").SetUp([gaussian_blob((2, 3, 4))], empty_blobs(1))
    with pytest.raises(LayerError, match="Pooling Layer produces at most 1 top blob"):
        make_layer(POOL % "kernel_size: 2 pool: AVE").SetUp([x], empty_blobs(2))


# ====================================================================== LRN
LRN = 'type: "LRN" lrn_param { %s }'


def test_lrn_setup():
    x = gaussian_blob((2, 7, 3, 3))
    for region in ["ACROSS_CHANNELS", "WITHIN_CHANNEL"]:
        top = run(make_layer(LRN % ("norm_region: %s" % region)), [x])
        assert top[0].shape == (2, 7, 3, 3)
    with pytest.raises(LayerError, match="LRN only supports odd values for local_size"):
        make_layer(LRN % "local_size: 4").SetUp([x], empty_blobs(1))


@pytest.mark.parametrize("params,size,alpha,beta,k,within", [
    ("", 5, 1.0, 0.75, 1.0, False),
    ("local_size: 3 alpha: 0.1 beta: 0.5 k: 2", 3, 0.1, 0.5, 2.0, False),
    ("local_size: 9 alpha: 2 beta: 0.75", 9, 2.0, 0.75, 1.0, False),    # window wider than C
    ("norm_region: WITHIN_CHANNEL local_size: 3", 3, 1.0, 0.75, 1.0, True),
    ("norm_region: WITHIN_CHANNEL local_size: 5 alpha: 0.5 beta: 0.6 k: 3", 5, 0.5, 0.6, 3.0, True),
])
def test_lrn_forward_matches_reference(mode, params, size, alpha, beta, k, within):
    x = gaussian_blob((2, 7, 4, 3))
    top = run(make_layer(LRN % params), [x])
    ref = ref_lrn(x.data, size, np.float32(alpha), np.float32(beta), np.float32(k), within)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_lrn_gradient_across():
    # TestGradientAcrossChannels: GradientChecker(1e-2, 1e-2), exhaustive.
    GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(make_layer(LRN % ""), [gaussian_blob((1, 6, 2, 2))],
                                                          empty_blobs(1))


def test_lrn_gradient_across_large_region():
    GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(make_layer(LRN % "local_size: 15 k: 2"),
                                                          [gaussian_blob((1, 5, 2, 1))], empty_blobs(1))


def test_lrn_gradient_within():
    # TestGradientWithinChannel: local_size 3, GradientChecker(1e-2, 1e-2), exhaustive.
    layer = make_layer(LRN % "norm_region: WITHIN_CHANNEL local_size: 3")
    GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(layer, [gaussian_blob((1, 2, 3, 3))],
                                                          empty_blobs(1))


# ====================================================================== Im2col
IM2COL = 'type: "Im2col" convolution_param { %s }'


def test_im2col_setup():
    # test_im2col_layer.cpp TestSetup: 2x3x6x5, kernel 3, stride 2, dilation 3 -> 2x27x2x2... (no dilation
    # here: 2x27x2x2).
    top = run(make_layer(IM2COL % "kernel_size: 3 stride: 2"), [gaussian_blob((2, 3, 6, 5))])
    assert top[0].shape == (2, 27, 2, 2)
    top = run(make_layer(IM2COL % "kernel_size: 3 stride: 2 dilation: 3"), [gaussian_blob((2, 3, 10, 9))])
    assert top[0].shape == (2, 27, 2, 2)


@pytest.mark.parametrize("params,shape,K,stride,pad,dil", [
    ("kernel_size: 3 stride: 2 pad: 1", (2, 3, 8, 8), (3, 3), (2, 2), (1, 1), (1, 1)),
    ("kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 0 pad_w: 1", (2, 2, 5, 6), (3, 2), (1, 2), (0, 1),
     (1, 1)),
    ("kernel_size: 2 dilation: 2", (1, 2, 5, 5), (2, 2), (1, 1), (0, 0), (2, 2)),
    ("kernel_size: 2 stride: 2 pad: 1", (1, 2, 3, 4, 3), (2, 2, 2), (2, 2, 2), (1, 1, 1), (1, 1, 1)),
])
def test_im2col_forward_matches_reference(mode, params, shape, K, stride, pad, dil):
    x = gaussian_blob(shape)
    top = run(make_layer(IM2COL % params), [x])
    ref = ref_im2col(x.data, K, stride, pad, dil)
    assert top[0].shape == ref.shape
    np.testing.assert_array_equal(top[0].data, ref)


def test_im2col_gradient():
    # TestGradient: kernel 3, stride 2, GradientChecker(1e-2, 1e-2), exhaustive.
    GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(make_layer(IM2COL % "kernel_size: 3 stride: 2"),
                                                          [gaussian_blob((1, 2, 5, 5))], empty_blobs(1))


def test_im2col_gradient_rect_pad_dilation():
    layer = make_layer(IM2COL % "kernel_h: 2 kernel_w: 3 pad_h: 1 pad_w: 1 stride_h: 2 stride_w: 1 dilation: 2")
    GradientChecker(1e-2, 1e-2).check_gradient(layer, [gaussian_blob((1, 2, 5, 5))], empty_blobs(1))


def test_im2col_errors():
    with pytest.raises(LayerError, match=r"stride must be specified once, or once per spatial dimension "
                                         r"\(stride specified 3 times; 2 spatial dims\);"):
        make_layer(IM2COL % "kernel_size: 3 stride: 1 stride: 1 stride: 1").SetUp(
            [gaussian_blob((1, 2, 5, 5))], empty_blobs(1))


# ====================================================================== SPP
SPP = 'type: "SPP" spp_param { %s }'


def test_spp_setup():
    # test_spp_layer.cpp TestSetup / TestEqualOutputDims2
    top = run(make_layer(SPP % "pyramid_height: 3"), [gaussian_blob((2, 3, 9, 8))])
    assert top[0].shape == (2, 3 * (1 + 4 + 16))
    top = run(make_layer(SPP % "pyramid_height: 3"), [gaussian_blob((10, 3, 7, 7))])
    assert top[0].shape == (10, 63)
    x = gaussian_blob((2, 3, 9, 8))
    top = run(make_layer(SPP % "pyramid_height: 1"), [x])
    assert top[0].shape == (2, 3, 1, 1)        # a lone pooling layer: no flatten
    np.testing.assert_allclose(top[0].data[:, :, 0, 0], x.data.max(axis=(2, 3)))
    with pytest.raises(LayerError, match="pyramid_height must be at least 1"):
        make_layer(SPP % "pyramid_height: 0").SetUp([x], empty_blobs(1))


def _spp_ref(x, height, method):
    N, C, H, W = x.shape
    parts = []
    for level in range(height):
        bins = 2 ** level
        kh, kw = -(-H // bins), -(-W // bins)
        ph, pw = (kh * bins - H + 1) // 2, (kw * bins - W + 1) // 2
        y, _ = ref_pool(x, kh, kw, kh, kw, ph, pw, method)
        parts.append(y.reshape(N, -1))
    return np.concatenate(parts, axis=1)


@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_spp_forward_matches_reference(mode, method):
    x = gaussian_blob((2, 3, 9, 8))
    top = run(make_layer(SPP % ("pyramid_height: 3 pool: %s" % method)), [x])
    np.testing.assert_allclose(top[0].data, _spp_ref(x.data, 3, method), rtol=1e-12)


def test_spp_forward_backward_reshape():
    x = gaussian_blob((2, 3, 9, 8))
    layer = make_layer(SPP % "pyramid_height: 3 pool: AVE")
    top = run(layer, [x])
    top[0].diff[...] = 1.0
    layer.Backward(top, [True], [x])
    # Each AVE level spreads a unit gradient over its windows: the total is the number of outputs
    # weighted by the fraction of each window inside the image.
    assert np.isfinite(x.diff).all() and x.diff.sum() > 0
    y = gaussian_blob((1, 3, 6, 7), seed=4)
    layer.Forward([y], top)
    assert top[0].shape == (1, 63)
    np.testing.assert_allclose(top[0].data, _spp_ref(y.data, 3, "AVE"), rtol=1e-12)


def test_spp_gradient():
    # TestGradient: pyramid_height 3, MAX, GradientChecker(1e-4, 1e-2), CheckGradient.
    layer = make_layer(SPP % "pyramid_height: 3")
    GradientChecker(1e-4, 1e-2).check_gradient(layer, [gaussian_blob((1, 2, 6, 4))], empty_blobs(1))


def test_spp_gradient_ave():
    layer = make_layer(SPP % "pyramid_height: 2 pool: AVE")
    GradientChecker(1e-2, 1e-2).check_gradient(layer, [gaussian_blob((1, 2, 4, 3))], empty_blobs(1))


# ====================================================================== Crop
CROP = 'type: "Crop" crop_param { %s }'


def test_crop_setup_shapes():
    # test_crop_layer.cpp TestSetupShapeAll / Default / NegativeIndexing
    a, b = gaussian_blob((2, 4, 5, 4)), gaussian_blob((2, 3, 4, 2))
    top = run(make_layer(CROP % "axis: 0"), [a, b])
    assert top[0].shape == (2, 3, 4, 2)
    top = run(make_layer(CROP % ""), [a, b])
    assert top[0].shape == (2, 4, 4, 2)
    top = run(make_layer(CROP % "axis: -1"), [a, b])
    assert top[0].shape == (2, 4, 5, 2)


@pytest.mark.parametrize("params,expect", [
    ("axis: 1 offset: 0 offset: 1 offset: 2", lambda a: a[:, 0:3, 1:5, 2:4]),
    ("axis: 2 offset: 1", lambda a: a[:, :, 1:5, 1:3]),
    ("axis: 0 offset: 0 offset: 1 offset: 1 offset: 2", lambda a: a[0:2, 1:4, 1:5, 2:4]),
])
def test_crop_forward_backward(mode, params, expect):
    a, b = gaussian_blob((2, 4, 5, 4)), gaussian_blob((2, 3, 4, 2))
    layer = make_layer(CROP % params)
    top = run(layer, [a, b])
    np.testing.assert_array_equal(top[0].data, expect(a.data))
    top[0].diff[...] = np.arange(top[0].count).reshape(top[0].shape) + 1.0
    layer.Backward(top, [True, False], [a, b])
    want = np.zeros(a.shape)
    expect(want)[...] = top[0].diff
    np.testing.assert_array_equal(a.diff, want)


def test_crop_5d():
    # TestCrop5D: offsets on the trailing axes of a 5-D blob.
    a, b = gaussian_blob((2, 3, 4, 5, 6)), gaussian_blob((2, 3, 2, 3, 4))
    top = run(make_layer(CROP % "axis: 2 offset: 1 offset: 2 offset: 0"), [a, b])
    np.testing.assert_array_equal(top[0].data, a.data[:, :, 1:3, 2:5, 0:4])


def test_crop_gradient():
    # TestCropAllGradient etc.: GradientChecker(1e-2, 1e-3), exhaustive, bottom 0 only.
    layer = make_layer(CROP % "axis: 1 offset: 1")
    bottoms = [gaussian_blob((2, 3, 3, 2)), gaussian_blob((2, 2, 2, 1))]
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottoms, empty_blobs(1), check_bottom=0)


def test_crop_out_of_bounds_error():
    a, b = gaussian_blob((2, 3, 9, 9)), gaussian_blob((2, 3, 5, 5))
    with pytest.raises(LayerError) as e:
        make_layer(CROP % "axis: 2 offset: 6").SetUp([a, b], empty_blobs(1))
    assert "the crop for dimension 2 is out-of-bounds with size 5 and offset 6" in str(e.value)
    assert "(3 vs. 5)" in str(e.value)
    with pytest.raises(LayerError, match="number of offset values specified must be equal to the number of "
                                         "dimensions following axis."):
        make_layer(CROP % "axis: 2 offset: 1 offset: 1 offset: 1").SetUp([a, b], empty_blobs(1))


# ====================================================================== GPU vs CPU
GPU_CASES = [
    (CONV % "kernel_size: 3 stride: 2 pad: 1 num_output: 4 group: 2 dilation: 2", [(2, 4, 9, 8)], 1),
    (CONV % "kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 num_output: 3 bias_term: false", [(2, 3, 7, 6)], 1),
    (CONV % "kernel_size: 1 num_output: 3", [(2, 4, 3, 3), (2, 4, 3, 3)], 2),
    (CONV % "kernel_size: 2 stride: 2 pad: 1 num_output: 2", [(2, 2, 4, 3, 4)], 1),
    (DECONV % "kernel_size: 4 stride: 2 pad: 1 num_output: 3", [(2, 4, 5, 5)], 1),
    (DECONV % "kernel_size: 3 stride: 2 num_output: 4 group: 2", [(2, 2, 3, 4)], 1),
    (POOL % "kernel_size: 3 stride: 2 pad: 1 pool: MAX", [(2, 3, 8, 7)], 2),
    (POOL % "kernel_size: 3 stride: 2 pool: MAX", [(2, 3, 8, 7)], 1),
    (POOL % "kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 3 pad: 1 pool: AVE", [(2, 3, 8, 7)], 1),
    (POOL % "global_pooling: true pool: AVE", [(2, 3, 5, 6)], 1),
    (LRN % "local_size: 5 alpha: 0.1 beta: 0.75 k: 2", [(2, 7, 4, 3)], 1),
    (LRN % "norm_region: WITHIN_CHANNEL local_size: 3", [(2, 3, 4, 5)], 1),
    (IM2COL % "kernel_size: 3 stride: 2 pad: 1", [(2, 3, 8, 8)], 1),
    (SPP % "pyramid_height: 3", [(2, 3, 9, 8)], 1),
    (CROP % "axis: 1 offset: 1", [(2, 4, 5, 4), (2, 2, 3, 3)], 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("text,shapes,ntop", GPU_CASES)
def test_gpu_matches_cpu(text, shapes, ntop):
    cpu = fwd_bwd_arrays(text, shapes, "cpu", ntop=ntop)
    gpu = fwd_bwd_arrays(text, shapes, "gpu", ntop=ntop)
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-8)


@pytest.mark.gpu
def test_gpu_stochastic_pool_test_phase_matches_cpu():
    text = POOL % "kernel_size: 3 stride: 2 pool: STOCHASTIC"
    cpu = fwd_bwd_arrays(text, [(2, 3, 7, 6)], "cpu", phase="TEST")
    gpu = fwd_bwd_arrays(text, [(2, 3, 7, 6)], "gpu", phase="TEST")
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-5)


# ====================================================================== misc
def test_kernels_import_without_cupy():
    code = ("import sys; import engine.core.kernels.im2col, engine.core.kernels.pooling, engine.core.kernels.lrn, "
            "engine.core.layers.vision; assert 'cupy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__)
                                                                     .resolve().parents[2]))


def test_registered_types():
    from engine.core.layers import layer_types
    for t in ["Convolution", "Deconvolution", "Pooling", "LRN", "Im2col", "SPP", "Crop"]:
        assert t in layer_types()

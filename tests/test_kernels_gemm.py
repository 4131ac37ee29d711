"""engine.core.kernels.gemm: the compiled float32 GEMM against float64 products, and the
convolution layer with it against the same layer on NumPy's matmul."""
import numpy as np
import pytest

from engine.core.kernels import gemm
from tests.layers.helpers import empty_blobs, gaussian_blob, make_layer, seed

needs_gemm = pytest.mark.skipif(not gemm.AVAILABLE, reason="Numba is not importable")


@pytest.fixture(autouse=True)
def _compiled_on_any_host(monkeypatch):
    """The compiled GEMM serves only on AVX-512 hosts by default (gemm.WIDE_ONLY); these
    tests check it on any host, as ENGINE_NUMBA_GEMM=1 would."""
    monkeypatch.setattr(gemm, "WIDE_ONLY", False)


@needs_gemm
def test_default_serves_only_on_avx512_hosts(monkeypatch):
    a = np.ones((4, 4), np.float32)
    monkeypatch.setattr(gemm, "WIDE_ONLY", True)
    assert gemm.usable(a, a, a) == gemm.wide_host()
    monkeypatch.setattr(gemm, "wide_host", lambda: False)     # an AVX2 host: NumPy's matmul
    assert not gemm.usable(a, a, a)
    from engine.core.kernels import conv2d  # the implicit GEMM (no columns) serves on any host
    x = np.ones((1, 2, 8, 8), np.float32)
    assert conv2d.applies((3, 3), (1, 1), (1, 1), (1, 1), 1, x)
    out = np.empty((4, 4), np.float32)
    gemm.matmul(a, a * 2, out)
    np.testing.assert_array_equal(out, np.full((4, 4), 8, np.float32))
    monkeypatch.setattr(gemm, "wide_host", lambda: True)
    assert gemm.usable(a, a, a)
    monkeypatch.setattr(gemm, "WIDE_ONLY", False)              # ENGINE_NUMBA_GEMM=1
    monkeypatch.setattr(gemm, "wide_host", lambda: False)
    assert gemm.usable(a, a, a)

SHAPES = [(1, 1, 1), (3, 5, 7), (8, 32, 32), (9, 300, 65), (16, 1100, 33), (33, 7, 100), (64, 576, 200),
          (17, 0, 5)]


def _ref(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def _close(got, ref, k):
    scale = max(1.0, float(np.abs(ref).max()))
    assert np.abs(got - ref).max() <= 4e-7 * max(k, 1) ** 0.5 * scale + 1e-30


@needs_gemm
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_matches_float64_for_every_layout(m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ref = _ref(a, b)
    for aa in (a, np.asfortranarray(a)):                 # A in place, any strides
        for bb in (b, np.ascontiguousarray(b.T).T):      # B read in place / packed (transposed)
            out = np.full((m, n), np.nan, np.float32)
            assert gemm.matmul(aa, bb, out) is out
            _close(out, ref, k)
            acc = np.ones((m, n), np.float32)
            gemm.matmul(aa, bb, acc, accumulate=True)
            _close(acc, ref + 1.0, k)


@needs_gemm
def test_matmul_writes_into_a_strided_output_and_splits_over_threads(monkeypatch):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 70)).astype(np.float32)
    b = rng.standard_normal((70, 300)).astype(np.float32)
    big = np.zeros((40, 400), np.float32)
    out = big[:, 50:350]                                  # rows contiguous, row stride 400
    monkeypatch.setattr(gemm, "MIN_THREAD_MACS", 1000)
    monkeypatch.setattr(gemm, "blas_threads", lambda: 3)
    gemm.matmul(a, b, out)
    _close(out, _ref(a, b), 70)
    assert not big[:, :50].any() and not big[:, 350:].any()


def test_matmul_falls_back_to_numpy_for_float64_and_checks_shapes():
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(12.0).reshape(3, 4)
    out = np.empty((2, 4))
    assert not gemm.usable(a, b, out)
    np.testing.assert_array_equal(gemm.matmul(a, b, out), a @ b)
    with pytest.raises(ValueError, match="shapes"):
        gemm.matmul(a, b, np.empty((2, 5)))


@needs_gemm
@pytest.mark.parametrize("spec", ["kernel_size:3 pad:1 stride:1", "kernel_size:5 pad:2 stride:2",
                                  "kernel_size:1 stride:1", "kernel_size:3 pad:1 group:2"])
def test_convolution_float32_agrees_with_numpy_matmul(spec, monkeypatch):
    def run(enabled):
        monkeypatch.setattr(gemm, "ENABLED", enabled)
        seed(1701)                                        # the same filled weights in both runs
        layer = make_layer('name:"c" type:"Convolution" convolution_param{num_output:6 %s '
                           'weight_filler{type:"gaussian" std:0.1} bias_filler{type:"gaussian" std:0.1}}' % spec,
                           dtype=np.float32)
        bottom = [gaussian_blob((3, 4, 9, 11), dtype=np.float32)]
        top = empty_blobs(1, dtype=np.float32)
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        top[0].diff[...] = np.random.default_rng(3).standard_normal(top[0].shape)
        layer.Backward(top, [True], bottom)
        return [np.array(a) for a in (top[0].data, bottom[0].diff, layer.blobs[0].diff, layer.blobs[1].diff)]

    for got, ref in zip(run(True), run(False)):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


@needs_gemm
def test_implicit_convolution_split_over_threads_agrees(monkeypatch):
    from engine.core.kernels import conv2d

    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 3, 7, 9)).astype(np.float32)
    w = rng.standard_normal((10, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(10).astype(np.float32)
    dy = rng.standard_normal((5, 10, 7, 9)).astype(np.float32)
    assert conv2d.applies((3, 3), (1, 1), (1, 1), (1, 1), 1, x, w, dy)
    assert conv2d.applies((3, 3), (2, 2), (1, 1), (1, 1), 1, x, w, dy)
    assert not conv2d.applies((3, 3), (3, 3), (1, 1), (1, 1), 1, x, w, dy)
    assert not conv2d.applies((3, 3), (1, 1), (1, 1), (2, 2), 1, x, w, dy)

    def run(threads):
        bufs = {}

        def work(name, n):                  # per-thread scratch, as the layers' workspace
            import threading
            key = (name, threading.get_ident())
            if key not in bufs or bufs[key].size < n:
                bufs[key] = np.empty(n, np.float32)
            return bufs[key]

        monkeypatch.setattr(gemm, "MIN_THREAD_MACS", 10)
        monkeypatch.setattr(gemm, "blas_threads", lambda: threads)
        y = np.empty((5, 10, 7, 9), np.float32)
        dx = np.empty_like(x)
        dw = np.ones_like(w)
        conv2d.forward(x, w, bias, (1, 1), y, work)
        conv2d.backward_data(dy, w, (1, 1), dx, work)
        conv2d.backward_weights(x, dy, (1, 1), dw, work)
        return y, dx, dw

    x64, w64, dy64 = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    xp = np.pad(x64, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + 7, j:j + 9] for i in range(3) for j in range(3)], axis=2)  # n c k h w
    y_ref = np.einsum("nckhw,ock->nohw", cols, w64.reshape(10, 3, 9)) + bias[None, :, None, None]
    dw_ref = 1.0 + np.einsum("nckhw,nohw->ock", cols, dy64).reshape(w.shape)
    dcols = np.einsum("ock,nohw->nckhw", w64.reshape(10, 3, 9), dy64)
    dxp = np.zeros_like(xp)
    for k, (i, j) in enumerate((i, j) for i in range(3) for j in range(3)):
        dxp[:, :, i:i + 7, j:j + 9] += dcols[:, :, k]
    dx_ref = dxp[:, :, 1:-1, 1:-1]
    for threads in (1, 3):
        for got, ref in zip(run(threads), (y_ref, dx_ref, dw_ref)):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    # Spans that no pool thread starts (its workers gone, e.g. ended by an asynchronous
    # SystemExit) run on the caller's thread: same numbers, bit for bit, and no hang.
    threaded = run(3)

    class NeverStarts:
        def submit(self, fn, *args):
            from concurrent.futures import Future
            return Future()

    monkeypatch.setattr(gemm, "_pool", lambda n: NeverStarts())
    for got, want in zip(run(3), threaded):
        np.testing.assert_array_equal(got, want)


@needs_gemm
@pytest.mark.parametrize("spec,hw,implicit", [("kernel_size:3 pad:1", (9, 11), True),
                                              ("kernel_size:3 pad:1", (7, 7), False),    # 49 pixels
                                              ("kernel_size:1", (16, 16), False),        # plain GEMM
                                              ("kernel_size:3 pad:1 stride:2", (16, 16), True),
                                              ("kernel_size:3 pad:1 stride:3", (32, 32), False),
                                              ("kernel_size:1 stride:2", (16, 16), True),
                                              ("kernel_size:1 stride:2", (16, 16), False)])   # 80 channels
def test_which_convolutions_take_the_implicit_gemm(spec, hw, implicit):
    layer = make_layer('name:"c" type:"Convolution" convolution_param{num_output:6 %s}' % spec, dtype=np.float32)
    channels = 4 if implicit or "kernel_size:1 stride:2" not in spec else 80
    bottom = [gaussian_blob((2, channels) + hw, dtype=np.float32)]
    top = empty_blobs(1, dtype=np.float32)
    layer.SetUp(bottom, top)
    assert layer._implicit(layer.blobs[0].data, bottom[0].data) is implicit


def test_many_groups_use_one_batched_matmul():
    from engine.core.layers import vision
    a = np.ones((vision.MAX_COMPILED_GROUPS + 1, 1, 9), np.float32)
    b = np.ones((vision.MAX_COMPILED_GROUPS + 1, 9, 5), np.float32)
    assert not vision._compiled(a, b)
    assert vision._compiled(a[:2], b[:2]) is gemm.AVAILABLE


def _conv_reference(x, w, b, pad, stride, dy):
    """float64 forward, input gradient and weight gradient of a 2-D convolution (im2col
    written out with strided slices)."""
    N, C, H, W = x.shape
    O, _, kh, kw = w.shape
    (ph, pw), (sh, sw) = pad, stride
    OH, OW = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    win = [(slice(i, i + sh * (OH - 1) + 1, sh), slice(j, j + sw * (OW - 1) + 1, sw)) for i, j in taps]
    cols = np.stack([xp[:, :, r, c] for r, c in win], axis=2)                     # n c k oh ow
    w3 = w.reshape(O, C, -1).astype(np.float64)
    y = np.einsum("nckhw,ock->nohw", cols, w3) + b[None, :, None, None]
    dw = np.einsum("nckhw,nohw->ock", cols, dy.astype(np.float64)).reshape(w.shape)
    dcols = np.einsum("ock,nohw->nckhw", w3, dy.astype(np.float64))
    dxp = np.zeros_like(xp)
    for k, (r, c) in enumerate(win):
        dxp[:, :, r, c] += dcols[:, :, k]
    return y, dxp[:, :, ph:ph + H, pw:pw + W], dw


@needs_gemm
@pytest.mark.parametrize("geom", [
    # N, C, H, W, O, kh, kw, ph, pw, sh, sw
    (3, 4, 16, 16, 8, 3, 3, 1, 1, 2, 2),       # the tiny ResNet's res2a
    (2, 3, 9, 11, 6, 5, 5, 2, 2, 2, 2),        # odd sizes
    (2, 3, 9, 11, 6, 3, 3, 0, 0, 2, 2),        # no padding: the last row and column unread
    (2, 5, 10, 7, 7, 3, 3, 1, 1, 2, 1),        # stride 2 down, 1 across
    (2, 3, 8, 8, 4, 1, 1, 0, 0, 2, 2),         # strided 1x1: three phases without a tap
    (2, 3, 13, 12, 5, 4, 4, 1, 2, 2, 2),       # even kernel
    (1, 2, 7, 7, 3, 2, 3, 1, 0, 2, 2),
    (2, 3, 9, 11, 6, 3, 3, 1, 1, 1, 1),        # stride 1 through the same entry points
    # stride 1: a padded row is W + pw wide, its right padding the next row's left one
    (2, 3, 9, 11, 6, 5, 5, 2, 2, 1, 1),        # 5x5, pad 2 (CIFAR-10 quick)
    (2, 3, 8, 6, 4, 5, 5, 4, 4, 1, 1),         # pad = kernel - 1 (what backward_data pads dy by)
    (2, 3, 7, 9, 4, 3, 3, 0, 0, 1, 1),         # no padding
    (1, 2, 6, 7, 3, 4, 2, 3, 1, 1, 1),         # even kernels, pad rows and columns differ
    (2, 3, 5, 3, 4, 3, 5, 1, 4, 1, 1),         # padding wider than the image
    (1, 1, 1, 1, 2, 3, 3, 2, 2, 1, 1),         # one pixel
])
def test_implicit_convolution_with_stride_agrees_with_float64(geom):
    from engine.core.kernels import conv2d

    N, C, H, W, O, kh, kw, ph, pw, sh, sw = geom
    rng = np.random.default_rng(sum(geom))
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((O, C, kh, kw)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    OH, OW = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    dy = rng.standard_normal((N, O, OH, OW)).astype(np.float32)
    assert conv2d.applies((kh, kw), (sh, sw), (ph, pw), (1, 1), 1, x, w, dy)
    bufs = {}

    def work(name, n):
        if name not in bufs or bufs[name].size < n:
            bufs[name] = np.full(n, np.nan, np.float32)     # stale scratch must not leak in
        return bufs[name]

    y = np.full((N, O, OH, OW), np.nan, np.float32)
    dx = np.full_like(x, np.nan)                             # every element written, zeros too
    dw = np.ones_like(w)                                     # accumulated into
    conv2d.forward(x, w, b, (ph, pw), y, work, (sh, sw))
    conv2d.backward_data(dy, w, (ph, pw), dx, work, (sh, sw))
    conv2d.backward_weights(x, dy, (ph, pw), dw, work, (sh, sw))
    y_ref, dx_ref, dw_ref = _conv_reference(x, w, b, (ph, pw), (sh, sw), dy)
    for got, ref in ((y, y_ref), (dx, dx_ref), (dw, 1.0 + dw_ref)):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


@needs_gemm
@pytest.mark.parametrize("spec,channels", [("kernel_size:3 pad:1 stride:2", 16), ("kernel_size:1 stride:2", 16),
                                           ("kernel_size:7 pad:3 stride:2", 3)])
def test_strided_convolution_layer_implicit_agrees_with_im2col(spec, channels, monkeypatch):
    """The layer on the strided implicit GEMM against the same layer on im2col + GEMM."""
    from engine.core.kernels import conv2d

    def run(max_stride):
        monkeypatch.setattr(conv2d, "MAX_STRIDE", max_stride)
        seed(1701)
        layer = make_layer('name:"c" type:"Convolution" convolution_param{num_output:8 %s '
                           'weight_filler{type:"gaussian" std:0.1} bias_filler{type:"gaussian" std:0.1}}' % spec,
                           dtype=np.float32)
        bottom = [gaussian_blob((3, channels, 20, 18), dtype=np.float32)]
        top = empty_blobs(1, dtype=np.float32)
        layer.SetUp(bottom, top)
        assert layer._implicit(layer.blobs[0].data, bottom[0].data) is (max_stride == 2)
        layer.Forward(bottom, top)
        top[0].diff[...] = np.random.default_rng(3).standard_normal(top[0].shape)
        layer.Backward(top, [True], bottom)
        return [np.array(a) for a in (top[0].data, bottom[0].diff, layer.blobs[0].diff, layer.blobs[1].diff)]

    for got, ref in zip(run(2), run(1)):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


@needs_gemm
@pytest.mark.parametrize("channels,implicit_weights", [(1, False), (3, True)])
def test_a_first_convolution_with_a_short_kernel_takes_im2col_for_its_weight_gradient(channels, implicit_weights,
                                                                                      monkeypatch):
    """LeNet's conv1 (1 x 5 x 5 = 25 < IMPLICIT_WEIGHTS_MIN_KERNEL_DIM, no bottom diff): the
    weight gradient from im2col + OpenBLAS, the forward still implicit; with 3 channels (75)
    both implicit; and the same gradient either way, to float32 rounding."""
    from engine.core.kernels import conv2d

    calls = []
    real = conv2d.backward_weights
    monkeypatch.setattr(conv2d, "backward_weights", lambda *a, **k: calls.append(1) or real(*a, **k))

    def run():
        seed(1701)
        layer = make_layer('name:"c" type:"Convolution" convolution_param{num_output:20 kernel_size:5 '
                           'weight_filler{type:"gaussian" std:0.1}}', dtype=np.float32)
        bottom = [gaussian_blob((4, channels, 28, 28), dtype=np.float32)]
        top = empty_blobs(1, dtype=np.float32)
        layer.SetUp(bottom, top)
        assert layer._implicit(layer.blobs[0].data, bottom[0].data)
        layer.Forward(bottom, top)
        top[0].diff[...] = np.random.default_rng(3).standard_normal(top[0].shape)
        layer.Backward(top, [False], bottom)
        return np.array(layer.blobs[0].diff), layer

    dw, layer = run()
    assert (layer.kernel_dim < layer.IMPLICIT_WEIGHTS_MIN_KERNEL_DIM) is not implicit_weights
    assert bool(calls) is implicit_weights
    monkeypatch.setattr(type(layer), "IMPLICIT_WEIGHTS_MIN_KERNEL_DIM", 0 if not implicit_weights else 10 ** 6)
    calls.clear()
    other, _ = run()
    assert bool(calls) is not implicit_weights
    np.testing.assert_allclose(dw, other, rtol=1e-5, atol=1e-5 * float(np.abs(other).max()))

"""The compiled BatchNorm / Scale / ReLU passes (engine.core.kernels.channel) against the
NumPy passes they replace: the same float32 values bit for bit (tops, Caffe's x_norm_ and
temp_, running statistics, bottom and param diffs), NumPy's pairwise row sums, and Caffe's
gradient checks in float32 with the compiled path on."""
import numpy as np
import pytest

from engine.core.blob import Blob
from engine.core.kernels import channel
from engine.core.kernels import jit as _jit
from engine.instruments.gradient_check import GradientChecker
from tests.layers.helpers import empty_blobs, gaussian_blob, make_layer

pytestmark = pytest.mark.skipif(not _jit.available(), reason="Numba is not installed")


def same(a, b):
    """Equal value for value with the same bits (NaN where NaN)."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("kind", [0, 1, 2])
def test_pairwise_row_sums_are_numpys(kind):
    """The compiled row sums add as this NumPy's float32 sum does, rows past NumPy 1.x's
    8192-value buffer included (one tree over the row on NumPy 2, one per buffer on 1.x)."""
    rng = np.random.default_rng(kind)
    sizes = list(range(300)) + [1023, 1024, 1025, 3136, 8192, 8200, 12544, 50176]
    stk = np.empty(3 * 64, np.int64)
    vals = np.empty(64, np.float32)
    pw = _jit.materialize(channel._pw)
    for n in sizes:
        a = (rng.standard_normal(n) * 7 + 1).astype(np.float32)
        b = (rng.standard_normal(n) * 3).astype(np.float32)
        ref = (a if kind == 0 else a * a if kind == 1 else a * b).sum()
        got = pw(kind, a, b, 0, n, stk, vals, channel.numpy_sum_chunk())
        assert np.float32(got).view(np.uint32) == np.float32(ref).view(np.uint32), n


@pytest.mark.parametrize("chunk", [0, 8192, 1000])
def test_pairwise_row_sums_by_chunks_add_each_chunks_tree_in_order(chunk):
    """Either NumPy's way of adding a long row: one tree (chunk 0), or a tree per chunk added
    from zero in order (NumPy 1.x's buffered reduction), checked against that sum written
    out with NumPy's own sum of each chunk."""
    rng = np.random.default_rng(7)
    stk = np.empty(3 * 64, np.int64)
    vals = np.empty(64, np.float32)
    pw = _jit.materialize(channel._pw)
    tree = _jit.materialize(channel._pw_tree)
    for n in (100, 1000, 8192, 8200, 12544, 50176):
        a = (rng.standard_normal(n) * 7 + 1).astype(np.float32)
        if chunk == 0 or n <= chunk:
            want = tree(0, a, a, 0, n, stk, vals)
        else:
            want = np.float32(0)
            for s in range(0, n, chunk):
                want = np.float32(want + tree(0, a, a, s, min(chunk, n - s), stk, vals))
        got = pw(0, a, a, 0, n, stk, vals, chunk)
        assert np.float32(got).view(np.uint32) == np.float32(want).view(np.uint32), (n, chunk)


def test_numpy_sum_chunk_follows_this_numpys_reduction():
    """numpy_sum_chunk() says how this NumPy adds a 20000-value float32 row: a tree per buffer
    on NumPy 1.x, the whole row as one tree on NumPy 2."""
    rng = np.random.default_rng(11)
    stk = np.empty(3 * 64, np.int64)
    vals = np.empty(64, np.float32)
    pw = _jit.materialize(channel._pw)
    chunk = channel.numpy_sum_chunk()
    assert chunk == (np.getbufsize() if int(np.__version__.split(".")[0]) < 2 else 0)
    hits = 0
    for _ in range(20):
        a = (rng.standard_normal(20000) * 7 + 1).astype(np.float32)
        hits += np.float32(pw(0, a, a, 0, a.size, stk, vals, chunk)) == a.sum()
    assert hits == 20


def _run_bn(fused, shape, in_place, global_stats=False, steps=2):
    channel.ENABLED = fused
    try:
        text = 'type: "BatchNorm" batch_norm_param { moving_average_fraction: 0.9 eps: 1e-4 }'
        layer = make_layer(text, phase="TEST" if global_stats else "TRAIN", dtype=np.float32)
        x = gaussian_blob(shape, std=2.0, mean=0.3, dtype=np.float32)
        top = [x] if in_place else empty_blobs(1, dtype=np.float32)
        layer.SetUp([x], top)
        if global_stats:
            rng = np.random.default_rng(3)
            layer.blobs[0].data[...] = rng.standard_normal(layer.blobs[0].shape)
            layer.blobs[1].data[...] = rng.uniform(0.5, 2, layer.blobs[1].shape)
            layer.blobs[2].data[...] = 1.7
        out = []
        for step in range(steps):
            x.data[...] = gaussian_blob(shape, std=2.0, mean=0.3 * step, seed=10 + step, dtype=np.float32).data
            layer.Forward([x], top)
            top[0].diff[...] = gaussian_blob(shape, seed=20 + step, dtype=np.float32).data
            layer.Backward(top, [True], [x])
            out += [top[0].data.copy(), x.diff.copy(), layer.std.data.copy(), layer.x_norm.data.copy()]
            out += [b.data.copy() for b in layer.blobs]
        return out
    finally:
        channel.ENABLED = True


@pytest.mark.parametrize("shape", [(8, 16, 32, 32), (2, 3, 5, 7), (3, 4, 300), (5, 3), (1, 2, 129), (2, 2, 96, 96)])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("global_stats", [False, True])
def test_batchnorm_compiled_equals_numpy(shape, in_place, global_stats):
    ref = _run_bn(False, shape, in_place, global_stats)
    got = _run_bn(True, shape, in_place, global_stats)
    assert len(ref) == len(got)
    for a, b in zip(ref, got):
        same(a, b)


def test_batchnorm_compiled_path_is_taken(monkeypatch):
    calls = []
    for name in ("bn_center", "bn_divide", "bn_backward_sums", "bn_backward_out"):
        fn = getattr(channel, name)
        monkeypatch.setattr(channel, name, lambda *a, _fn=fn, _n=name: (calls.append(_n), _fn(*a))[1])
    _run_bn(True, (2, 3, 4, 4), True, steps=1)
    assert calls == ["bn_center", "bn_divide", "bn_backward_sums", "bn_backward_out"]


def _run_scale(fused, shape, text, in_place, propagate, param_prop=(True, True), steps=2):
    channel.ENABLED = fused
    try:
        layer = make_layer('type: "Scale" scale_param { %s filler { type: "gaussian" } '
                           'bias_filler { type: "gaussian" } }' % text, dtype=np.float32)
        x = gaussian_blob(shape, seed=1, dtype=np.float32)
        top = [x] if in_place else empty_blobs(1, dtype=np.float32)
        layer.SetUp([x], top)
        rng = np.random.default_rng(5)
        for b in layer.blobs:
            b.data[...] = rng.standard_normal(b.shape)
            b.diff[...] = rng.standard_normal(b.shape)
        for i, p in enumerate(param_prop[:len(layer.blobs)]):
            layer.set_param_propagate_down(i, p)
        out = []
        for step in range(steps):
            x.data[...] = gaussian_blob(shape, seed=10 + step, dtype=np.float32).data
            x.diff[...] = 0.5
            layer.Forward([x], top)
            out.append(top[0].data.copy())
            top[0].diff[...] = gaussian_blob(shape, seed=20 + step, dtype=np.float32).data
            layer.Backward(top, [propagate], [x])
            out += [x.diff.copy()] + ([layer.temp.data.copy()] if in_place else [])
            out += [b.diff.copy() for b in layer.blobs]
        return out
    finally:
        channel.ENABLED = True


@pytest.mark.parametrize("shape,text", [
    ((8, 16, 16, 16), "axis: 1 bias_term: true"),
    ((8, 16, 16, 16), "axis: 1"),
    ((2, 3, 4, 5), "axis: 1 num_axes: 2 bias_term: true"),   # scale (3, 4), inner 5
    ((1, 6, 200), "axis: 1 bias_term: true"),                 # outer 1: the scale diff is overwritten
    ((2, 3, 4, 5), "axis: 0 num_axes: 2 bias_term: true"),    # outer 1, (2, 3) scale
    ((4, 7), "axis: 1 bias_term: true"),                      # inner 1
])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("propagate", [False, True])
@pytest.mark.parametrize("param_prop", [(True, True), (False, True), (True, False)])
def test_scale_compiled_equals_numpy(shape, text, in_place, propagate, param_prop):
    ref = _run_scale(False, shape, text, in_place, propagate, param_prop)
    got = _run_scale(True, shape, text, in_place, propagate, param_prop)
    assert len(ref) == len(got)
    for a, b in zip(ref, got):
        same(a, b)


def test_scale_compiled_path_is_taken(monkeypatch):
    calls = []
    for name in ("scale_forward", "scale_backward"):
        fn = getattr(channel, name)
        monkeypatch.setattr(channel, name, lambda *a, _fn=fn, _n=name: (calls.append(_n), _fn(*a))[1])
    _run_scale(True, (2, 3, 4), "axis: 1 bias_term: true", True, True, steps=1)
    assert calls == ["scale_forward", "scale_backward"]


@pytest.mark.parametrize("in_place", [False, True])
def test_relu_compiled_equals_numpy(in_place):
    outs = []
    for fused in (False, True):
        channel.ENABLED = fused
        try:
            layer = make_layer('type: "ReLU"', dtype=np.float32)
            x = gaussian_blob((4, 5, 6, 7), seed=3, dtype=np.float32)
            x.data[0, 0, 0, :5] = [0.0, -0.0, np.nan, -np.nan, -np.inf]
            top = [x] if in_place else empty_blobs(1, dtype=np.float32)
            layer.SetUp([x], top)
            layer.Forward([x], top)
            top[0].diff[...] = gaussian_blob((4, 5, 6, 7), seed=4, dtype=np.float32).data
            top[0].diff[0, 0, 1, :2] = [np.inf, -np.inf]
            layer.Backward(top, [True], [x])
            outs.append((top[0].data.copy(), x.diff.copy()))
        finally:
            channel.ENABLED = True
    for a, b in zip(*outs):
        same(a, b)


# Caffe's gradient checks (test_batch_norm_layer.cpp, test_scale_layer.cpp run them in
# float too), here with the compiled float32 path.
def test_batchnorm_gradient_float32_compiled():
    layer = make_layer('type: "BatchNorm"', dtype=np.float32)
    x = gaussian_blob((2, 3, 2, 2), dtype=np.float32)
    assert channel.usable(x.data)
    GradientChecker(1e-2, 1e-4).check_gradient_exhaustive(layer, [x], empty_blobs(1, dtype=np.float32))


def test_scale_bias_gradient_float32_compiled():
    layer = make_layer('type: "Scale" scale_param { axis: 1 bias_term: true '
                       'filler { type: "gaussian" } bias_filler { type: "gaussian" } }', dtype=np.float32)
    x = gaussian_blob((2, 3, 2, 2), seed=1, dtype=np.float32)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [x], empty_blobs(1, dtype=np.float32))


def test_usable_refuses_other_arrays():
    assert channel.usable(np.zeros(4, np.float32))
    assert not channel.usable(np.zeros(4, np.float64))
    assert not channel.usable(np.zeros((4, 4), np.float32)[:, ::2])
    assert not channel.usable(Blob((2,), dtype=np.float32))


@pytest.mark.parametrize("global_stats", [False, True])
def test_batchnorm_division_by_zero_as_numpy(global_stats):
    # Backward before any Forward divides by the zero std (Caffe computes with its zero
    # buffers): inf / NaN as NumPy's, not Python's ZeroDivisionError; a zero variance
    # with eps 0 in forward likewise.
    outs = []
    for fused in (False, True):
        channel.ENABLED = fused
        try:
            text = 'type: "BatchNorm" batch_norm_param { eps: 0 %s }' % (
                "use_global_stats: true" if global_stats else "")
            layer = make_layer(text, dtype=np.float32)
            x = gaussian_blob((3, 2, 4, 2), dtype=np.float32)
            top = empty_blobs(1, dtype=np.float32)
            layer.SetUp([x], top)
            top[0].diff[...] = gaussian_blob((3, 2, 4, 2), seed=5, dtype=np.float32).data
            with np.errstate(all="ignore"):
                layer.Backward(top, [True], [x])
                got = [x.diff.copy()]
                x.data[...] = 1.5                   # constant: variance 0
                layer.Forward([x], top)
                got += [top[0].data.copy(), layer.std.data.copy()]
            outs.append(got)
        finally:
            channel.ENABLED = True
    assert not np.isfinite(outs[0][0]).all()      # the zero std divided: inf / NaN
    for a, b in zip(*outs):
        same(a, b)

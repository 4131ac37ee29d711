"""BatchNorm, Scale, Bias, MVN: forward against NumPy references, running
statistics, gradient checks as Caffe's test_{batch_norm,scale,bias,mvn}_layer.cpp,
and Caffe's CHECK messages."""
import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import LayerError, ShapeError
from engine.instruments.gradient_check import GradientChecker
from tests.layers.helpers import empty_blobs, gaussian_blob, make_layer


def scalar_blob(value):
    b = Blob(dtype=np.float64)
    b.reshape(())
    b.data[...] = value
    return b


def setup_forward(layer, bottom, top=None):
    top = top if top is not None else empty_blobs(1, dtype=bottom[0].dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return top


def assert_matches_cpu(fn):
    mode = backend.mode()
    with backend.using_mode(backend.CPU):
        ref = fn()
    with backend.using_mode(mode):
        got = fn()
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


# ============================================================================ BatchNorm
def bn_ref(x, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + float(np.float32(eps))), mean.reshape(-1), var.reshape(-1)


def test_batchnorm_forward_normalizes(mode):
    # Caffe's TestForward: each channel has mean 0 and variance 1 afterwards.
    x = gaussian_blob((5, 2, 3, 4), std=3.0, mean=1.5)
    layer = make_layer('type: "BatchNorm"')
    top = setup_forward(layer, [x])
    y = top[0].data
    for c in range(2):
        v = y[:, c]
        assert abs(v.mean()) < 1e-3
        assert abs(v.var() - 1) < 1e-3
    ref, _, _ = bn_ref(x.data)
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)


def test_batchnorm_running_statistics(mode):
    x1 = gaussian_blob((4, 3, 5, 5), seed=1)
    x2 = gaussian_blob((4, 3, 5, 5), seed=2, mean=0.5)
    layer = make_layer('type: "BatchNorm" batch_norm_param { moving_average_fraction: 0.9 }')
    top = empty_blobs(1)
    layer.SetUp([x1], top)
    assert [b.shape for b in layer.blobs] == [(3,), (3,), (1,)]
    assert all(not b.data.any() for b in layer.blobs)
    layer.Forward([x1], top)
    _, m1, v1 = bn_ref(x1.data)
    layer.Forward([x2], top)
    _, m2, v2 = bn_ref(x2.data)
    m = 4 * 25
    maf = float(np.float32(0.9))  # the float param, widened
    np.testing.assert_allclose(layer.blobs[2].data, [1 * maf + 1], rtol=1e-12)
    np.testing.assert_allclose(layer.blobs[0].data, maf * m1 + m2, rtol=1e-10)
    np.testing.assert_allclose(layer.blobs[1].data, (maf * v1 + v2) * m / (m - 1), rtol=1e-10)


def test_batchnorm_global_stats(mode):
    x = gaussian_blob((4, 3, 2, 2), seed=1)
    layer = make_layer('type: "BatchNorm" batch_norm_param { eps: 1e-3 }', phase="TEST")
    top = empty_blobs(1)
    layer.SetUp([x], top)
    assert layer.use_global_stats
    layer.blobs[0].data[...] = [0.2, -0.4, 1.0]
    layer.blobs[1].data[...] = [1.0, 2.0, 4.0]
    layer.blobs[2].data[...] = 2.0
    layer.Forward([x], top)
    mean = np.array([0.1, -0.2, 0.5]).reshape(1, 3, 1, 1)
    var = np.array([0.5, 1.0, 2.0]).reshape(1, 3, 1, 1)
    std = np.sqrt(var + float(np.float32(1e-3)))
    np.testing.assert_allclose(top[0].data, (x.data - mean) / std, rtol=1e-10)
    np.testing.assert_allclose(layer.blobs[2].data, [2.0])  # untouched
    top[0].diff[...] = gaussian_blob((4, 3, 2, 2), seed=9).data
    layer.Backward(top, [True], [x])
    np.testing.assert_allclose(x.diff, top[0].diff / std, rtol=1e-12)
    # A zero scale factor gives a zero mean and variance.
    layer.blobs[2].data[...] = 0
    layer.Forward([x], top)
    np.testing.assert_allclose(top[0].data, x.data / np.sqrt(float(np.float32(1e-3))), rtol=1e-10)


def test_batchnorm_use_global_stats_override():
    x = gaussian_blob((4, 3))
    for phase, param, expected in (("TRAIN", "", False), ("TEST", "", True),
                                   ("TEST", "use_global_stats: false", False),
                                   ("TRAIN", "use_global_stats: true", True)):
        layer = make_layer('type: "BatchNorm" batch_norm_param { %s }' % param, phase=phase)
        layer.SetUp([x], empty_blobs(1))
        assert layer.use_global_stats is expected


def test_batchnorm_masks_statistics_with_lr_mult_zero():
    x = gaussian_blob((4, 3))
    layer = make_layer('type: "BatchNorm"')
    layer.SetUp([x], empty_blobs(1))
    assert [p.lr_mult for p in layer.layer_param.param] == [0, 0, 0]
    assert layer.param_propagate_down == [False, False, False]
    layer = make_layer('type: "BatchNorm" param { lr_mult: 0 }')
    layer.SetUp([x], empty_blobs(1))
    assert len(layer.layer_param.param) == 3
    with pytest.raises(LayerError, match="Cannot configure batch normalization statistics as layer parameters."):
        make_layer('type: "BatchNorm" param { lr_mult: 0 } param { lr_mult: 1 }').SetUp([x], empty_blobs(1))


def test_batchnorm_channel_check():
    layer = make_layer('type: "BatchNorm"')
    top = empty_blobs(1)
    layer.SetUp([gaussian_blob((4, 3, 2))], top)
    with pytest.raises(LayerError, match=r"Check failed: bottom\[0\]->shape\(1\) == channels_ \(5 vs\. 3\)"):
        layer.Forward([gaussian_blob((4, 5, 2))], top)


def test_batchnorm_2d_input(mode):
    x = gaussian_blob((6, 4), std=2.0)
    top = setup_forward(make_layer('type: "BatchNorm"'), [x])
    np.testing.assert_allclose(top[0].data, bn_ref(x.data)[0], rtol=1e-10, atol=1e-12)


def test_batchnorm_in_place(mode):
    x = gaussian_blob((5, 2, 3, 4), std=2.0)
    ref, _, _ = bn_ref(x.data)
    layer = make_layer('type: "BatchNorm"')
    setup_forward(layer, [x], top=[x])
    np.testing.assert_allclose(x.data, ref, rtol=1e-10, atol=1e-12)


def test_batchnorm_gradient(mode):
    layer = make_layer('type: "BatchNorm"')
    x = gaussian_blob((2, 3, 2, 2))
    GradientChecker(1e-2, 1e-4).check_gradient_exhaustive(layer, [x], empty_blobs(1))


def test_batchnorm_gradient_eps(mode):
    layer = make_layer('type: "BatchNorm" batch_norm_param { eps: 1e-1 }')
    x = gaussian_blob((3, 2, 2))
    GradientChecker(1e-2, 1e-4).check_gradient_exhaustive(layer, [x], empty_blobs(1))


def test_batchnorm_float32_matches_cpu(mode):
    def run():
        x = gaussian_blob((4, 3, 5, 5), std=2.0, mean=0.3, dtype=np.float32)
        layer = make_layer('type: "BatchNorm" batch_norm_param { moving_average_fraction: 0.9 eps: 1e-4 }',
                           dtype=np.float32)
        top = setup_forward(layer, [x])
        top[0].diff[...] = gaussian_blob((4, 3, 5, 5), seed=3, dtype=np.float32).data
        layer.Backward(top, [True], [x])
        return top[0].data.copy(), x.diff.copy(), layer.blobs[0].data.copy(), layer.blobs[1].data.copy()
    assert_matches_cpu(run)
    y, dx, m, v = run()
    x = gaussian_blob((4, 3, 5, 5), std=2.0, mean=0.3, dtype=np.float32).data.astype(np.float64)
    ref, mr, vr = bn_ref(x, 1e-4)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m, mr, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(v, vr * 100 / 99, rtol=1e-5)


# ============================================================================ Scale
def scale_ref(x, s, axis):
    shape = (1,) * axis + s.shape + (1,) * (x.ndim - axis - s.ndim)
    return x * s.reshape(shape)


SCALE_CASES = [
    # (prototxt param, bottom shape, scale shape, axis for the reference)
    ("axis: 0", (2, 3, 4, 5), (2, 3, 4, 5), 0),      # eltwise
    ("axis: 1", (2, 3, 4, 5), (3, 4), 1),            # broadcast middle
    ("axis: 0", (2, 3, 4, 5), (2, 3), 0),            # broadcast begin
    ("axis: -2", (2, 3, 4, 5), (4, 5), 2),           # broadcast end
    ("axis: 1", (2, 3, 4, 5), (), 0),                # scalar
    ("axis: 1", (2, 3, 4, 5), (3, 4, 5), 1),         # 1 x eltwise
]


@pytest.mark.parametrize("param,xshape,sshape,axis", SCALE_CASES)
def test_scale_forward_second_bottom(mode, param, xshape, sshape, axis):
    x = gaussian_blob(xshape, seed=1)
    s = gaussian_blob(sshape, seed=2) if sshape else scalar_blob(1.7)
    top = setup_forward(make_layer('type: "Scale" scale_param { %s }' % param), [x, s])
    np.testing.assert_allclose(top[0].data, scale_ref(x.data, s.data, axis), rtol=1e-12)


@pytest.mark.parametrize("param,xshape,sshape,axis", SCALE_CASES[1:4])
def test_scale_gradient_second_bottom(mode, param, xshape, sshape, axis):
    layer = make_layer('type: "Scale" scale_param { %s }' % param)
    bottom = [gaussian_blob((2, 3, 2, 2), seed=1), gaussian_blob(
        {(3, 4): (3, 2), (2, 3): (2, 3), (4, 5): (2, 2)}[sshape], seed=2)]
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottom, empty_blobs(1))


def test_scale_gradient_eltwise(mode):
    layer = make_layer('type: "Scale" scale_param { axis: 0 }')
    bottom = [gaussian_blob((2, 3, 2, 2), seed=1), gaussian_blob((2, 3, 2, 2), seed=2)]
    GradientChecker(1e-2, 1e-3).check_gradient_eltwise(layer, bottom, empty_blobs(1))


def test_scale_gradient_scalar(mode):
    layer = make_layer('type: "Scale" scale_param { axis: 1 num_axes: 0 }')
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [gaussian_blob((2, 3, 2))], empty_blobs(1))


@pytest.mark.parametrize("param,shape", [
    ("axis: 1", (3,)),
    ("axis: 1 num_axes: 2", (3, 2)),
    ("axis: 0 num_axes: -1", (2, 3, 2)),
    ("axis: -1", (2,)),
])
def test_scale_learned_param_gradient(mode, param, shape):
    layer = make_layer('type: "Scale" scale_param { %s filler { type: "gaussian" } }' % param)
    x = gaussian_blob((2, 3, 2), seed=1)
    top = empty_blobs(1)
    layer.SetUp([x], top)
    assert layer.blobs[0].shape == shape
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [x], top)


def test_scale_bias_term_forward_and_gradient(mode):
    layer = make_layer('type: "Scale" scale_param { axis: 1 bias_term: true '
                       'filler { type: "gaussian" } bias_filler { type: "gaussian" } }')
    x = gaussian_blob((2, 3, 2, 2), seed=1)
    top = setup_forward(layer, [x])
    assert len(layer.blobs) == 2 and layer.blobs[1].shape == (3,)
    s, b = layer.blobs[0].data, layer.blobs[1].data
    np.testing.assert_allclose(top[0].data, x.data * s.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1), rtol=1e-12)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [x], empty_blobs(1))


def test_scale_bias_term_with_second_bottom(mode):
    layer = make_layer('type: "Scale" scale_param { axis: 1 bias_term: true bias_filler { type: "gaussian" } }')
    bottom = [gaussian_blob((2, 3, 4), seed=1), gaussian_blob((3, 4), seed=2)]
    top = setup_forward(layer, bottom)
    assert len(layer.blobs) == 1 and layer.blobs[0].shape == (3, 4)
    ref = bottom[0].data * bottom[1].data[None] + layer.blobs[0].data[None]
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-12)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottom, empty_blobs(1))


def test_scale_default_filler_is_one_and_in_place(mode):
    x = gaussian_blob((2, 3, 4), seed=1)
    x0 = x.data.copy()
    layer = make_layer('type: "Scale"')
    setup_forward(layer, [x], top=[x])
    assert np.all(layer.blobs[0].data == 1)
    np.testing.assert_allclose(x.data, x0)
    layer.blobs[0].data[...] = [1.0, 2.0, 3.0]
    layer.Forward([x], [x])
    np.testing.assert_allclose(x.data, x0 * np.array([1, 2, 3.0]).reshape(1, 3, 1))
    x.diff[...] = 1.0
    layer.blobs[0].diff[...] = 0
    layer.Backward([x], [True], [x])
    np.testing.assert_allclose(layer.blobs[0].diff, x0.sum(axis=(0, 2)), rtol=1e-12)
    np.testing.assert_allclose(x.diff, np.broadcast_to(np.array([1, 2, 3.0]).reshape(1, 3, 1), x0.shape))


def test_scale_param_diff_accumulates_like_caffe():
    # outer > 1: a learned scale's diff accumulates (gemv with beta = 1) ...
    layer = make_layer('type: "Scale" scale_param { axis: 1 }')
    x = gaussian_blob((2, 3, 2), seed=1)
    top = setup_forward(layer, [x])
    top[0].diff[...] = 1.0
    layer.blobs[0].diff[...] = 10.0
    layer.Backward(top, [False], [x])
    np.testing.assert_allclose(layer.blobs[0].diff, 10 + x.data.sum(axis=(0, 2)), rtol=1e-12)
    # ... while outer == 1 with several scales overwrites (gemv with beta = 0).
    layer = make_layer('type: "Scale" scale_param { axis: 0 }')
    top = setup_forward(layer, [x])
    top[0].diff[...] = 1.0
    layer.blobs[0].diff[...] = 10.0
    layer.Backward(top, [False], [x])
    np.testing.assert_allclose(layer.blobs[0].diff, x.data.sum(axis=(1, 2)), rtol=1e-12)


def test_scale_checks():
    with pytest.raises(LayerError, match=r"dimension mismatch between bottom\[0\]->shape\(1\) and scale->shape\(0\)"):
        setup_forward(make_layer('type: "Scale"'), [gaussian_blob((2, 3, 4)), gaussian_blob((4,))])
    with pytest.raises(LayerError, match="scale blob's shape extends past bottom\\[0\\]'s shape when applied "
                                         "starting with bottom\\[0\\] axis = 2"):
        setup_forward(make_layer('type: "Scale" scale_param { axis: 2 num_axes: 2 }'), [gaussian_blob((2, 3, 4))])
    with pytest.raises(LayerError, match="num_axes must be non-negative, or -1 to extend to the end of bottom"):
        setup_forward(make_layer('type: "Scale" scale_param { num_axes: -2 }'), [gaussian_blob((2, 3, 4))])
    with pytest.raises(ShapeError, match="axis 3 out of range"):
        setup_forward(make_layer('type: "Scale" scale_param { axis: 3 }'), [gaussian_blob((2, 3, 4))])


def test_scale_float32_matches_cpu(mode):
    def run():
        backend.set_random_seed(5)
        layer = make_layer('type: "Scale" scale_param { axis: 1 bias_term: true filler { type: "gaussian" } '
                           'bias_filler { type: "gaussian" } }', dtype=np.float32)
        x = gaussian_blob((2, 3, 4, 5), dtype=np.float32)
        top = setup_forward(layer, [x])
        top[0].diff[...] = gaussian_blob((2, 3, 4, 5), seed=4, dtype=np.float32).data
        layer.Backward(top, [True], [x])
        return top[0].data.copy(), x.diff.copy(), layer.blobs[0].diff.copy(), layer.blobs[1].diff.copy()
    assert_matches_cpu(run)


# ============================================================================ Bias
@pytest.mark.parametrize("param,xshape,bshape,axis", [
    ("axis: 0", (2, 3, 4, 5), (2, 3, 4, 5), 0),
    ("axis: 1", (2, 3, 4, 5), (3, 4), 1),
    ("axis: 0", (2, 3, 4, 5), (2, 3), 0),
    ("axis: -2", (2, 3, 4, 5), (4, 5), 2),
    ("axis: 1", (2, 3, 4, 5), (), 0),
])
def test_bias_forward_second_bottom(mode, param, xshape, bshape, axis):
    x = gaussian_blob(xshape, seed=1)
    b = gaussian_blob(bshape, seed=2) if bshape else scalar_blob(-0.3)
    top = setup_forward(make_layer('type: "Bias" bias_param { %s }' % param), [x, b])
    shape = (1,) * axis + b.data.shape + (1,) * (x.data.ndim - axis - b.data.ndim)
    np.testing.assert_allclose(top[0].data, x.data + b.data.reshape(shape), rtol=1e-12)


@pytest.mark.parametrize("param,bshape", [("axis: 0", (2, 3, 2)), ("axis: 1", (3,)), ("axis: -1", (2,)),
                                          ("axis: 1", ())])
def test_bias_gradient_second_bottom(mode, param, bshape):
    layer = make_layer('type: "Bias" bias_param { %s }' % param)
    b = gaussian_blob(bshape, seed=2) if bshape else scalar_blob(0.4)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [gaussian_blob((2, 3, 2), seed=1), b],
                                                          empty_blobs(1))


@pytest.mark.parametrize("param,shape", [("axis: 1", (3,)), ("axis: 1 num_axes: 2", (3, 2)),
                                         ("num_axes: 0", ()), ("axis: 0 num_axes: -1", (2, 3, 2))])
def test_bias_learned_param(mode, param, shape):
    layer = make_layer('type: "Bias" bias_param { %s filler { type: "gaussian" } }' % param)
    x = gaussian_blob((2, 3, 2), seed=1)
    setup_forward(layer, [x])
    assert layer.blobs[0].shape == shape
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [x], empty_blobs(1))


def test_bias_default_filler_zero_in_place_and_accumulation(mode):
    x = gaussian_blob((2, 3, 4), seed=1)
    x0 = x.data.copy()
    layer = make_layer('type: "Bias"')
    setup_forward(layer, [x], top=[x])
    assert layer.blobs[0].shape == (3,) and not layer.blobs[0].data.any()
    np.testing.assert_allclose(x.data, x0)
    x.diff[...] = 2.0
    layer.blobs[0].diff[...] = 1.0
    layer.Backward([x], [True], [x])
    np.testing.assert_allclose(layer.blobs[0].diff, 1 + 2.0 * 8)  # a learned bias accumulates
    np.testing.assert_allclose(x.diff, 2.0)


def test_bias_checks():
    with pytest.raises(LayerError, match=r"dimension mismatch between bottom\[0\]->shape\(1\) and bias->shape\(0\)"):
        setup_forward(make_layer('type: "Bias"'), [gaussian_blob((2, 3, 4)), gaussian_blob((4,))])
    with pytest.raises(LayerError, match="bias blob's shape extends past bottom\\[0\\]'s shape"):
        setup_forward(make_layer('type: "Bias" bias_param { axis: 1 num_axes: 3 }'), [gaussian_blob((2, 3, 4))])
    with pytest.raises(LayerError, match=r"Bias Layer takes at most 2 bottom blob\(s\) as input\."):
        setup_forward(make_layer('type: "Bias"'), [gaussian_blob((2, 3))] * 3)


# ============================================================================ MVN
def mvn_ref(x, across=False, normalize_variance=True, eps=1e-9):
    n = x.shape[0] if across else x.shape[0] * x.shape[1]
    r = x.reshape(n, -1)
    y = r - r.mean(axis=1, keepdims=True)
    if normalize_variance:
        y = y / (np.sqrt((y * y).mean(axis=1, keepdims=True)) + float(np.float32(eps)))
    return y.reshape(x.shape)


MVN_PARAMS = [
    ("", False, True),
    ("mvn_param { normalize_variance: false }", False, False),
    ("mvn_param { across_channels: true }", True, True),
    ("mvn_param { across_channels: true normalize_variance: false }", True, False),
]


@pytest.mark.parametrize("param,across,nv", MVN_PARAMS)
def test_mvn_forward(mode, param, across, nv):
    x = gaussian_blob((2, 3, 4, 5), std=2.0, mean=1.0)
    top = setup_forward(make_layer('type: "MVN" %s' % param), [x])
    np.testing.assert_allclose(top[0].data, mvn_ref(x.data, across, nv), rtol=1e-10, atol=1e-12)
    rows = top[0].data.reshape(2 if across else 6, -1)
    assert np.all(np.abs(rows.mean(axis=1)) < 1e-3)
    if nv:
        assert np.all(np.abs(rows.var(axis=1) - 1) < 1e-3)


@pytest.mark.parametrize("param,across,nv", MVN_PARAMS)
def test_mvn_gradient(mode, param, across, nv):
    layer = make_layer('type: "MVN" %s' % param)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [gaussian_blob((2, 3, 2, 2))], empty_blobs(1))


def test_mvn_eps_added_to_std():
    x = gaussian_blob((1, 2, 3, 3))
    top = setup_forward(make_layer('type: "MVN" mvn_param { eps: 0.5 }'), [x])
    np.testing.assert_allclose(top[0].data, mvn_ref(x.data, eps=0.5), rtol=1e-12)


def test_mvn_legacy_top_shape():
    # Caffe's MVN reshapes its top through the legacy 4-D accessors.
    top = setup_forward(make_layer('type: "MVN"'), [gaussian_blob((3, 4))])
    assert top[0].shape == (3, 4, 1, 1)


def test_mvn_float32_matches_cpu(mode):
    def run():
        x = gaussian_blob((2, 3, 4, 5), std=2.0, dtype=np.float32)
        layer = make_layer('type: "MVN"', dtype=np.float32)
        top = setup_forward(layer, [x])
        top[0].diff[...] = gaussian_blob((2, 3, 4, 5), seed=3, dtype=np.float32).data
        layer.Backward(top, [True], [x])
        return top[0].data.copy(), x.diff.copy()
    assert_matches_cpu(run)

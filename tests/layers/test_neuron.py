"""Neuron layers, after Caffe's test_neuron_layer.cpp, test_power_layer.cpp and
test_threshold_layer.cpp: forward values against NumPy versions of Caffe's
formulas, numeric gradients with Caffe's checker settings, in-place use and
Caffe's error messages."""
import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import LayerError
from engine.instruments.gradient_check import GradientChecker
from tests.layers.helpers import gaussian_blob, make_layer, seed

SHAPE = (2, 3, 4, 5)


# ------------------------------------------------------------------ helpers
def _blob_like(arr, dtype=np.float64):
    b = Blob(arr.shape, dtype=dtype)
    b.data[...] = arr
    return b


def forward(text, x, phase="TRAIN", dtype=np.float64, in_place=False):
    """Set up and run the layer on a copy of ``x``; returns (layer, bottom, top)."""
    bottom = _blob_like(x, dtype)
    top = bottom if in_place else Blob(dtype=dtype)
    layer = make_layer(text, phase=phase, dtype=dtype)
    layer.SetUp([bottom], [top])
    layer.Forward([bottom], [top])
    return layer, bottom, top


def assert_in_place_same(text, x, dy_seed=5):
    """The layer computes in place the top and the bottom diff it computes out of place;
    returns them (the top's data, the bottom's diff)."""
    dy = gaussian_blob(SHAPE, seed=dy_seed).data.copy()
    layer, b, t = forward(text, x)
    y, dx = t.data.copy(), run_backward(layer, b, t, dy)
    layer, b, t = forward(text, x, in_place=True)
    assert t is b
    np.testing.assert_array_equal(t.data, y)
    np.testing.assert_array_equal(run_backward(layer, b, t, dy), dx)
    return y, dx


def run_forward(mode, text, x, phase="TRAIN", dtype=np.float64):
    """Top data of one forward in ``mode``; on the GPU also checked against the CPU."""
    _, _, top = forward(text, x, phase, dtype)
    y = top.data.copy()
    if mode == "gpu":
        with backend.using_mode(backend.CPU):
            _, _, top_cpu = forward(text, x, phase, dtype)
            y_cpu = top_cpu.data.copy()
        np.testing.assert_allclose(y, y_cpu, rtol=1e-5, atol=1e-12, equal_nan=True)
    return y


def run_backward(layer, bottom, top, top_diff):
    top.diff[...] = top_diff
    layer.Backward([top], [True], [bottom])
    return bottom.diff.copy()


def check_eltwise(text, bottom, kink=0.0, kink_range=-1.0, stepsize=1e-2, threshold=1e-3,
                  phase="TRAIN"):
    layer = make_layer(text, phase=phase)
    checker = GradientChecker(stepsize, threshold, 1701, kink, kink_range)
    checker.check_gradient_eltwise(layer, [bottom], [Blob(dtype=np.float64)])


@pytest.fixture
def x():
    return gaussian_blob(SHAPE).data.copy()


@pytest.fixture
def bottom():
    return gaussian_blob(SHAPE)


def _positive(b):
    """Caffe's LogBottomInit: a gaussian blob, exponentiated."""
    b.data[...] = np.exp(b.data)
    return b


# ------------------------------------------------------------------ AbsVal
def test_absval(mode, x):
    y = run_forward(mode, 'type: "AbsVal"', x)
    np.testing.assert_array_equal(y, np.abs(x))


def test_absval_gradient(mode, bottom):
    check_eltwise('type: "AbsVal"', bottom, 0.0, 0.01)


def test_absval_in_place_is_refused(x):
    with pytest.raises(LayerError, match="AbsVal Layer does not allow in-place computation."):
        forward('type: "AbsVal"', x, in_place=True)


# ------------------------------------------------------------------ ReLU
def test_relu(mode, x):
    y = run_forward(mode, 'type: "ReLU"', x)
    assert (y >= 0).all()
    assert ((y == 0) | (y == x)).all()
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_relu_gradient(mode, bottom):
    check_eltwise('type: "ReLU"', bottom, 0.0, 0.01)


def test_relu_with_negative_slope(mode, x):
    y = run_forward(mode, 'type: "ReLU" relu_param { negative_slope: 0.01 }', x)
    slope = np.float64(np.float32(0.01))
    np.testing.assert_allclose(y, np.where(x >= 0, x, x * slope), rtol=1e-6)


def test_relu_gradient_with_negative_slope(mode, bottom):
    check_eltwise('type: "ReLU" relu_param { negative_slope: 0.01 }', bottom, 0.0, 0.01)


@pytest.mark.parametrize("slope", [0.0, 0.1])
def test_relu_in_place_matches(mode, x, slope):
    assert_in_place_same('type: "ReLU" relu_param { negative_slope: %g }' % slope, x, dy_seed=7)


def test_relu_backward_formula(x):
    # Caffe: top_diff * ((x > 0) + negative_slope * (x <= 0)).
    layer, b, t = forward('type: "ReLU" relu_param { negative_slope: 0.3 }', x)
    dy = gaussian_blob(SHAPE, seed=3).data.copy()
    s = np.float64(np.float32(0.3))
    np.testing.assert_array_equal(run_backward(layer, b, t, dy),
                                  dy * ((x > 0) + s * (x <= 0)))


# ------------------------------------------------------------------ Sigmoid
def test_sigmoid(mode, x):
    y = run_forward(mode, 'type: "Sigmoid"', x)
    np.testing.assert_allclose(y, 1.0 / (1.0 + np.exp(-x)), rtol=1e-12)
    assert ((y >= 0) & (y <= 1)).all()


def test_sigmoid_gradient(mode, bottom):
    check_eltwise('type: "Sigmoid"', bottom, 0.0, 0.01)


def test_sigmoid_float32_keeps_small_values(mode):
    # Caffe evaluates 0.5 * tanh(0.5 * x) + 0.5 in double and rounds to float:
    # far-negative inputs give tiny positive outputs, not 0.
    x = np.array([[-30.0, -20.0, -5.0, 0.0, 5.0, 20.0]])
    y = run_forward(mode, 'type: "Sigmoid"', x, dtype=np.float32)
    expect = (0.5 * np.tanh(0.5 * x.astype(np.float32).astype(np.float64)) + 0.5).astype(np.float32)
    np.testing.assert_array_equal(y, expect)
    assert y[0, 0] > 0


def test_sigmoid_in_place(x):
    assert_in_place_same('type: "Sigmoid"', x)


# ------------------------------------------------------------------ TanH
def test_tanh(mode, x):
    y = run_forward(mode, 'type: "TanH"', x)
    e = np.exp(2 * x)
    np.testing.assert_allclose(y, (e - 1) / (e + 1), atol=1e-4)


def test_tanh_gradient(mode, bottom):
    check_eltwise('type: "TanH"', bottom)


def test_tanh_in_place(x):
    assert_in_place_same('type: "TanH"', x)


# ------------------------------------------------------------------ Exp
EXP_CASES = [(-1, 1, 0), (2, 1, 0), (2, 1, 1), (2, 3, 0), (2, 3, 1)]


def _exp_text(base, scale, shift):
    return 'type: "Exp" exp_param { base: %g scale: %g shift: %g }' % (base, scale, shift)


@pytest.mark.parametrize("base,scale,shift", EXP_CASES)
def test_exp(mode, x, base, scale, shift):
    y = run_forward(mode, _exp_text(base, scale, shift), x)
    expect = np.exp(shift + scale * x) if base == -1 else np.power(base, shift + scale * x)
    np.testing.assert_allclose(y, expect, atol=2e-4)


@pytest.mark.parametrize("base,scale,shift", EXP_CASES)
def test_exp_gradient(mode, bottom, base, scale, shift):
    check_eltwise(_exp_text(base, scale, shift), bottom)


def test_exp_default_is_e(x):
    _, _, t = forward('type: "Exp"', x)
    np.testing.assert_allclose(t.data, np.exp(x), rtol=1e-12)


@pytest.mark.parametrize("base", [-2, 0])
def test_exp_base_must_be_positive(x, base):
    with pytest.raises(LayerError, match="base must be strictly positive."):
        forward('type: "Exp" exp_param { base: %g }' % base, x)


# ------------------------------------------------------------------ Log
LOG_CASES = EXP_CASES


def _log_text(base, scale, shift):
    return 'type: "Log" log_param { base: %g scale: %g shift: %g }' % (base, scale, shift)


@pytest.mark.parametrize("base,scale,shift", LOG_CASES)
def test_log(mode, base, scale, shift):
    x = _positive(gaussian_blob(SHAPE)).data.copy()
    y = run_forward(mode, _log_text(base, scale, shift), x)
    expect = np.log(shift + scale * x)
    if base != -1:
        expect = expect / np.log(base)
    np.testing.assert_allclose(y, expect, atol=2e-4)


@pytest.mark.parametrize("base,scale,shift", LOG_CASES)
def test_log_gradient(mode, base, scale, shift):
    # Caffe's LogBottomInit data (exp of a gaussian), with the exponent kept
    # above -2: at x = exp(-2.9) the central difference itself is 1% off
    # (error ~ h^2 / 3x^2), which fails Caffe's 1e-2 threshold with any layer.
    b = gaussian_blob(SHAPE)
    b.data[...] = np.maximum(b.data, -2.0)
    check_eltwise(_log_text(base, scale, shift), _positive(b), threshold=1e-2)


def test_log_errors(x):
    with pytest.raises(LayerError, match="base must be strictly positive."):
        forward('type: "Log" log_param { base: -3 }', x)
    with pytest.raises(LayerError, match=r"Inf result: 1/log\(base\) = 1/log\(1\) = inf"):
        forward('type: "Log" log_param { base: 1 }', x)


def test_log_negative_input_is_nan_without_warning():
    _, _, t = forward('type: "Log"', np.array([[-1.0, 0.0, 1.0]]))
    assert np.isnan(t.data[0, 0]) and np.isneginf(t.data[0, 1]) and t.data[0, 2] == 0


# ------------------------------------------------------------------ Power
POWER_CASES = [
    (0.37, 0.83, -2.4),   # TestPower
    (0.37, 0.83, 0.0),    # TestPowerGradientShiftZero
    (0.0, 0.83, -2.4),    # TestPowerZero
    (1.0, 0.83, -2.4),    # TestPowerOne
    (2.0, 0.34, -2.4),    # TestPowerTwo
    (2.0, 0.5, -2.4),     # TestPowerTwoScaleHalf
    (2.0, 1.0, 0.0),
    (3.0, 0.0, 1.5),      # scale 0: the input is ignored
]


def _power_text(power, scale, shift):
    return 'type: "Power" power_param { power: %g scale: %g shift: %g }' % (power, scale, shift)


@pytest.mark.parametrize("power,scale,shift", POWER_CASES)
def test_power(mode, x, power, scale, shift):
    y = run_forward(mode, _power_text(power, scale, shift), x)
    with np.errstate(invalid="ignore"):
        expect = np.power(shift + scale * x, power)
    if power in (0, 1, 2):
        assert not np.isnan(y).any()
    nan = np.isnan(expect)
    assert np.isnan(y[nan]).all()
    tol = np.maximum(np.abs(expect[~nan] * 1e-4), 1e-5)
    assert (np.abs(y[~nan] - expect[~nan]) <= tol).all()


@pytest.mark.parametrize("power,scale,shift", POWER_CASES)
def test_power_gradient(mode, bottom, power, scale, shift):
    if power not in (0, 1, 2) and scale != 0:
        # As Caffe's TestBackward: mirror inputs so that shift + scale * x >= 0.
        d = bottom.data
        m = -shift / scale
        d[...] = np.where(d < m, m + (m - d), d)
    check_eltwise(_power_text(power, scale, shift), bottom, 0.0, 0.01,
                  stepsize=1e-3, threshold=1e-2)


def test_power_backward_special_cases(x):
    dy = gaussian_blob(SHAPE, seed=9).data.copy()
    # power 1: the diff is diff_scale (= power * scale) times top_diff.
    layer, b, t = forward(_power_text(1.0, 0.5, 2.0), x)
    np.testing.assert_array_equal(run_backward(layer, b, t, dy), dy * 0.5)
    # diff_scale 0: the bottom diff is 0 whatever the top diff.
    layer, b, t = forward(_power_text(0.0, 0.5, 2.0), x)
    np.testing.assert_array_equal(t.data, np.ones(SHAPE))
    np.testing.assert_array_equal(run_backward(layer, b, t, dy), np.zeros(SHAPE))
    layer, b, t = forward(_power_text(3.0, 0.0, 2.0), x)
    np.testing.assert_array_equal(t.data, np.full(SHAPE, 8.0))
    np.testing.assert_array_equal(run_backward(layer, b, t, dy), np.zeros(SHAPE))


# ------------------------------------------------------------------ ELU
def test_elu(mode, x):
    y = run_forward(mode, 'type: "ELU" elu_param { alpha: 0.5 }', x)
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.5 * (np.exp(x) - 1)), rtol=1e-12)


def test_elu_as_relu(mode, x):
    y = run_forward(mode, 'type: "ELU" elu_param { alpha: 0 }', x)
    assert (y >= 0).all()
    assert ((y == 0) | (y == x)).all()


def test_elu_gradient(mode, bottom):
    check_eltwise('type: "ELU" elu_param { alpha: 0.5 }', bottom, 0.0, 0.01)


def test_elu_as_relu_gradient(mode, bottom):
    check_eltwise('type: "ELU" elu_param { alpha: 0 }', bottom, 0.0, 0.01)


def test_elu_default_alpha_and_in_place(x):
    y, _ = assert_in_place_same('type: "ELU"', x)
    np.testing.assert_allclose(y, np.where(x > 0, x, np.exp(x) - 1), rtol=1e-12)


# ------------------------------------------------------------------ BNLL
def test_bnll(mode, x):
    y = run_forward(mode, 'type: "BNLL"', x)
    assert (y >= 0).all() and (y >= x).all()
    np.testing.assert_allclose(y, np.log1p(np.exp(x)), rtol=1e-12)


def test_bnll_gradient(mode, bottom):
    check_eltwise('type: "BNLL"', bottom)


def test_bnll_extremes():
    # Caffe: x > 0 ? x + log(1. + exp(-x)) : log(1. + exp(x)) with a float
    # exp and a double log: exp(x) under double's epsilon adds nothing.
    x = np.array([[-200.0, -40.0, -30.0, 0.0, 30.0, 10000.0]])
    layer, b, t = forward('type: "BNLL"', x, dtype=np.float32)
    y = t.data
    x32 = x.astype(np.float32)
    e = np.exp(-np.abs(x32).astype(np.float64)).astype(np.float32).astype(np.float64)
    expect = (np.maximum(x32, 0) + np.log(1.0 + e)).astype(np.float32)
    np.testing.assert_array_equal(y, expect)
    assert y[0, 0] == 0 and y[0, 1] == 0 and y[0, 2] > 0
    np.testing.assert_allclose(y[0, 2], np.exp(-30.0), rtol=1e-2)
    np.testing.assert_allclose(y[0, 3], np.log(2.0), rtol=1e-7)
    assert y[0, 5] == 10000.0
    dx = run_backward(layer, b, t, np.ones((1, 6)))
    assert np.isfinite(dx).all()
    np.testing.assert_allclose(dx[0], [0.0, np.exp(-40.0), np.exp(-30.0), 0.5, 1.0, 1.0],
                               rtol=1e-6, atol=1e-40)


def test_exp_log_float32_round_once(mode):
    # exp/log of float data are correctly rounded (glibc's expf/logf).
    x = gaussian_blob((1000,), std=3.0).data.astype(np.float32)
    _, _, t = forward('type: "Exp"', x, dtype=np.float32)
    np.testing.assert_array_equal(t.data, np.exp(x.astype(np.float64)).astype(np.float32))
    ax = np.abs(x) + np.float32(1e-3)
    _, _, t = forward('type: "Log"', ax, dtype=np.float32)
    np.testing.assert_array_equal(t.data, np.log(ax.astype(np.float64)).astype(np.float32))


# ------------------------------------------------------------------ Clip
CLIP = 'type: "Clip" clip_param { min: -1 max: 2 }'


def test_clip(mode, x):
    y = run_forward(mode, CLIP, x)
    assert ((y >= -1) & (y <= 2)).all()
    np.testing.assert_array_equal(y, np.clip(x, -1, 2))


def test_clip_gradient(mode, bottom):
    # As Caffe's TestClipGradient, move inputs out of the kinks at min and
    # max, but away from the kink on either side (Caffe's test shifts all
    # of them down at min, which leaves [min, min + eps] inputs in the kink).
    eps = 1e-2
    d = bottom.data
    for kink in (-1.0, 2.0):
        below = (d >= kink - eps) & (d < kink)
        above = (d >= kink) & (d <= kink + eps)
        d[below] -= eps
        d[above] += eps
    check_eltwise(CLIP, bottom, stepsize=eps, threshold=1e-3)


def test_clip_nan_and_inverted_range():
    # std::max(min, std::min(x, max)): NaN gives min; min > max gives min.
    _, _, t = forward(CLIP, np.array([[np.nan, -5.0, 5.0]]))
    np.testing.assert_array_equal(t.data, [[-1.0, -1.0, 2.0]])
    _, _, t = forward('type: "Clip" clip_param { min: 1 max: -1 }', np.array([[0.0, 3.0]]))
    np.testing.assert_array_equal(t.data, [[1.0, 1.0]])


# ------------------------------------------------------------------ Dropout
def _dropout_forward(ratio, x):
    text = 'type: "Dropout"'
    if ratio != 0.5:  # 0.5 is the default
        text += ' dropout_param { dropout_ratio: %g }' % ratio
    seed(1701)
    _, _, t = forward(text, x, phase="TRAIN")
    y = t.data
    scale = 1.0 / (1.0 - np.float64(np.float32(ratio)))
    kept = y != 0
    np.testing.assert_array_equal(y[kept], x[kept] * scale)
    count = x.size
    std_error = np.sqrt(ratio * (1 - ratio) / count)
    empirical = 1 - kept.sum() / count
    # 4 standard errors: a seeded draw (cuRAND's on the GPU) fails this by chance 6e-5 of the time
    assert abs(empirical - ratio) <= 4 * std_error


@pytest.mark.parametrize("ratio", [0.5, 0.75])
def test_dropout_forward(mode, ratio):
    # A larger blob than Caffe's so the bound is tight.
    x = gaussian_blob((20, 30, 4, 5)).data.copy()
    _dropout_forward(ratio, x)


def test_dropout_test_phase(mode, x):
    y = run_forward(mode, 'type: "Dropout"', x, phase="TEST")
    np.testing.assert_array_equal(y, x)


def test_dropout_gradient(mode, bottom):
    check_eltwise('type: "Dropout"', bottom, phase="TRAIN")


def test_dropout_gradient_test_phase(mode, bottom):
    check_eltwise('type: "Dropout"', bottom, phase="TEST")


def test_dropout_backward_uses_forward_mask(x):
    seed(3)
    layer, b, t = forward('type: "Dropout" dropout_param { dropout_ratio: 0.3 }', x)
    kept = t.data != 0
    scale = 1.0 / (1.0 - np.float64(np.float32(0.3)))
    dx = run_backward(layer, b, t, np.ones(SHAPE))
    np.testing.assert_array_equal(dx, np.where(kept, scale, 0.0))


def test_dropout_in_place(x):
    seed(11)
    layer, b, t = forward('type: "Dropout"', x)
    y, dx = t.data.copy(), run_backward(layer, b, t, np.full(SHAPE, 3.0))
    seed(11)
    layer, b, t = forward('type: "Dropout"', x, in_place=True)
    np.testing.assert_array_equal(t.data, y)
    np.testing.assert_array_equal(run_backward(layer, b, t, np.full(SHAPE, 3.0)), dx)
    _, _, t = forward('type: "Dropout"', x, phase="TEST", in_place=True)
    np.testing.assert_array_equal(t.data, x)


def test_dropout_scale_train_false(x):
    from engine.proto import caffe_pb2
    if "scale_train" not in caffe_pb2.DropoutParameter.DESCRIPTOR.fields_by_name:
        pytest.skip("this caffe.proto (BVLC master) has no DropoutParameter.scale_train")
    text = 'type: "Dropout" dropout_param { dropout_ratio: 0.25 scale_train: false }'
    seed(5)
    _, _, t = forward(text, x, phase="TRAIN")
    kept = t.data != 0
    np.testing.assert_array_equal(t.data[kept], x[kept])
    _, _, t = forward(text, x, phase="TEST")
    np.testing.assert_allclose(t.data, x * (1 - np.float32(0.25)), rtol=1e-7)


# ------------------------------------------------------------------ PReLU
def _prelu_reference(x, slope, shared):
    s = slope.reshape(()) if shared else slope.reshape(1, -1, 1, 1)
    return np.maximum(x, 0) + s * np.minimum(x, 0)


def test_prelu_param():
    seed()
    layer = make_layer('type: "PReLU"')
    b, t = gaussian_blob(SHAPE), Blob(dtype=np.float64)
    layer.SetUp([b], [t])
    assert len(layer.blobs) == 1 and layer.blobs[0].shape == (3,)
    np.testing.assert_array_equal(layer.blobs[0].data, 0.25)
    assert layer.param_propagate_down == [True]
    layer = make_layer('type: "PReLU" prelu_param { channel_shared: true }')
    layer.SetUp([b], [t])
    assert layer.blobs[0].shape == () and layer.blobs[0].count == 1
    assert float(layer.blobs[0].data) == 0.25


@pytest.mark.parametrize("shared", [False, True])
def test_prelu_forward(mode, x, shared):
    text = 'type: "PReLU" prelu_param { filler { type: "gaussian" } channel_shared: %s }' \
        % ("true" if shared else "false")
    seed()
    layer, b, t = forward(text, x)
    slope = layer.blobs[0].data.copy()
    np.testing.assert_array_equal(t.data, _prelu_reference(x, slope, shared))
    if mode == "gpu":
        with backend.using_mode(backend.CPU):
            seed()
            _, _, tc = forward(text, x)
        np.testing.assert_allclose(t.data, tc.data, rtol=1e-5)


@pytest.mark.parametrize("shared", [False, True])
def test_prelu_gradient(mode, bottom, shared):
    text = 'type: "PReLU" prelu_param { filler { type: "gaussian" } channel_shared: %s }' \
        % ("true" if shared else "false")
    seed()
    layer = make_layer(text)
    checker = GradientChecker(1e-2, 1e-3, 1701, 0.0, 0.01)
    checker.check_gradient_exhaustive(layer, [bottom], [Blob(dtype=np.float64)])


def test_prelu_consistency_relu(mode, x):
    prelu, pb, pt = forward('type: "PReLU"', x)
    relu, rb, rt = forward('type: "ReLU" relu_param { negative_slope: 0.25 }', x)
    np.testing.assert_array_equal(pt.data, rt.data)
    dy = gaussian_blob(SHAPE, seed=21).data.copy()
    np.testing.assert_array_equal(run_backward(prelu, pb, pt, dy), run_backward(relu, rb, rt, dy))


@pytest.mark.parametrize("shared", [False, True])
def test_prelu_in_place(mode, x, shared):
    text = 'type: "PReLU" prelu_param { filler { type: "gaussian" } channel_shared: %s }' \
        % ("true" if shared else "false")
    dy = gaussian_blob(SHAPE, seed=13).data.copy()
    seed()
    l1, b1, t1 = forward(text, x)
    seed()
    l2, b2, t2 = forward(text, x, in_place=True)
    assert t2 is b2
    np.testing.assert_array_equal(t2.data, t1.data)
    dx1 = run_backward(l1, b1, t1, dy)
    dx2 = run_backward(l2, b2, t2, dy)
    np.testing.assert_allclose(dx2, dx1, rtol=1e-12)
    np.testing.assert_allclose(l2.blobs[0].diff, l1.blobs[0].diff, rtol=1e-12)


def test_prelu_param_diff_accumulates(x):
    # Caffe master adds to the slope diff (the Net clears param diffs).
    layer, b, t = forward('type: "PReLU"', x)
    dy = gaussian_blob(SHAPE, seed=2).data.copy()
    run_backward(layer, b, t, dy)
    once = layer.blobs[0].diff.copy()
    expect = (dy * x * (x <= 0)).sum(axis=(0, 2, 3))
    np.testing.assert_allclose(once, expect, rtol=1e-12)
    run_backward(layer, b, t, dy)
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * once, rtol=1e-12)


@pytest.mark.parametrize("shared", [False, True])
def test_prelu_param_diff_float32_order(shared):
    # Caffe's CPU loop: slope_diff[c] += top_diff[i] * x[i] * (x[i] <= 0), in
    # index order and in float; the engine's CPU result is the same float.
    text = 'type: "PReLU" prelu_param { channel_shared: %s }' % ("true" if shared else "false")
    x = gaussian_blob((3, 4, 5, 6)).data.astype(np.float32)
    dy = gaussian_blob((3, 4, 5, 6), seed=8).data.astype(np.float32)
    layer, b, t = forward(text, x, dtype=np.float32)
    layer.blobs[0].diff[...] = np.float32(0.125)
    t.diff[...] = dy
    layer.Backward([t], [True], [b])
    acc = np.full(1 if shared else 4, np.float32(0.125), dtype=np.float32)
    xf, df = x.reshape(-1), dy.reshape(-1)
    for i in range(x.size):
        c = 0 if shared else (i // 30) % 4
        acc[c] = np.float32(acc[c] + np.float32(df[i] * xf[i]) * np.float32(xf[i] <= 0))
    np.testing.assert_array_equal(layer.blobs[0].diff.reshape(-1), acc)


def test_prelu_two_axes(mode):
    x = gaussian_blob((4, 3)).data.copy()
    seed()
    text = 'type: "PReLU" prelu_param { filler { type: "gaussian" } }'
    layer, b, t = forward(text, x)
    slope = layer.blobs[0].data.copy()
    np.testing.assert_array_equal(t.data, np.maximum(x, 0) + slope[None, :] * np.minimum(x, 0))


def test_prelu_errors(x):
    with pytest.raises(LayerError, match="Number of axes of bottom blob must be >=2."):
        forward('type: "PReLU"', np.zeros(5))
    from google.protobuf import text_format

    from engine.proto import caffe_pb2
    p = caffe_pb2.LayerParameter()
    text_format.Merge('name: "p" type: "PReLU" blobs { shape { dim: 2 } data: 0.1 data: 0.2 }', p)
    from engine.core.layers import create_layer
    layer = create_layer(p, dtype=np.float64)
    with pytest.raises(LayerError, match="Negative slope size is inconsistent with prototxt config"):
        layer.SetUp([_blob_like(x)], [Blob(dtype=np.float64)])


def test_prelu_keeps_given_blobs(x):
    from google.protobuf import text_format

    from engine.core.layers import create_layer
    from engine.proto import caffe_pb2
    p = caffe_pb2.LayerParameter()
    text_format.Merge('name: "p" type: "PReLU" '
                      'blobs { shape { dim: 3 } data: 0.1 data: 0.2 data: 0.3 }', p)
    layer = create_layer(p, dtype=np.float64)
    b, t = _blob_like(x), Blob(dtype=np.float64)
    layer.SetUp([b], [t])
    layer.Forward([b], [t])
    slope = np.array([0.1, 0.2, 0.3], dtype=np.float32).astype(np.float64)
    np.testing.assert_array_equal(t.data, _prelu_reference(x, slope, False))


# ------------------------------------------------------------------ Swish
def _swish_reference(x, beta):
    return x / (1.0 + np.exp(-beta * x))


@pytest.mark.parametrize("beta", [None, 1.5, 0.0])
def test_swish(mode, x, beta):
    text = 'type: "Swish"' + ('' if beta is None else ' swish_param { beta: %g }' % beta)
    y = run_forward(mode, text, x)
    np.testing.assert_allclose(y, _swish_reference(x, 1.0 if beta is None else beta),
                               rtol=1e-10, atol=1e-14)
    if beta == 0.0:
        np.testing.assert_array_equal(y, x / 2)


@pytest.mark.parametrize("beta", [None, 1.5, 0.0])
def test_swish_gradient(mode, bottom, beta):
    text = 'type: "Swish"' + ('' if beta is None else ' swish_param { beta: %g }' % beta)
    check_eltwise(text, bottom, 0.0, 0.01)


def test_swish_in_place(x):
    assert_in_place_same('type: "Swish" swish_param { beta: 1.5 }', x)


# ------------------------------------------------------------------ Threshold
@pytest.mark.parametrize("threshold", [None, 0.5])
def test_threshold(mode, x, threshold):
    text = 'type: "Threshold"'
    if threshold is not None:
        text += ' threshold_param { threshold: %g }' % threshold
    y = run_forward(mode, text, x)
    th = 0.0 if threshold is None else threshold
    assert set(np.unique(y)) <= {0.0, 1.0}
    np.testing.assert_array_equal(y, (x > th).astype(np.float64))


def test_threshold_setup_shape(x):
    _, b, t = forward('type: "Threshold"', x)
    assert t.shape == b.shape == SHAPE


def test_threshold_backward_not_implemented(x):
    layer, b, t = forward('type: "Threshold"', x)
    with pytest.raises(LayerError, match="Not Implemented Yet"):
        layer.Backward([t], [True], [b])


# ------------------------------------------------------------------ common
@pytest.mark.parametrize("type_", ["AbsVal", "BNLL", "Dropout", "ELU", "Exp", "Log", "Power",
                                   "PReLU", "ReLU", "Sigmoid", "Swish", "TanH", "Threshold"])
def test_blob_counts(type_, x):
    layer = make_layer('type: "%s"' % type_)
    b1, b2 = _blob_like(x), _blob_like(x)
    with pytest.raises(LayerError, match="%s Layer takes 1 bottom blob\\(s\\) as input." % type_):
        layer.SetUp([b1, b2], [Blob(dtype=np.float64)])
    layer = make_layer('type: "%s"' % type_)
    with pytest.raises(LayerError, match="%s Layer produces 1 top blob\\(s\\) as output." % type_):
        layer.SetUp([b1], [Blob(dtype=np.float64), Blob(dtype=np.float64)])


@pytest.mark.parametrize("text", [
    'type: "AbsVal"', 'type: "BNLL"', CLIP, 'type: "ELU"', 'type: "Exp"', 'type: "Power"',
    'type: "PReLU"', 'type: "ReLU" relu_param { negative_slope: 0.1 }', 'type: "Sigmoid"',
    'type: "Swish"', 'type: "TanH"', 'type: "Threshold"'])
def test_float32_dtype_kept(text, x):
    _, _, t = forward(text, x, dtype=np.float32)
    assert t.data.dtype == np.float32
    assert np.isfinite(t.data).all()


def test_reshape_follows_bottom(x):
    layer, b, t = forward('type: "ReLU"', x)
    b.reshape((3, 2, 5))
    b.data[...] = -1.0
    layer.Forward([b], [t])
    assert t.shape == (3, 2, 5)
    assert (t.data == 0).all()

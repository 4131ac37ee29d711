"""Loss layers and Accuracy: forward against NumPy references (Caffe's loops),
gradient checks as Caffe's test_*_loss_layer.cpp, normalization modes, loss
weights, ignore_label and Caffe's CHECK messages."""
import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import LayerError
from engine.instruments.gradient_check import GradientChecker
from tests.layers.helpers import empty_blobs, gaussian_blob, make_layer, uniform_blob

FLT_MIN = np.finfo(np.float32).tiny


def label_blob(shape, classes, seed=1701, dtype=np.float64):
    b = Blob(shape, dtype=dtype)
    rng = np.random.default_rng(seed)
    b.data[...] = rng.integers(0, classes, b.count).reshape(b.shape)
    return b


def forward(layer, bottom, n_top=1):
    top = empty_blobs(n_top, dtype=bottom[0].dtype)
    layer.SetUp(bottom, top)
    loss = layer.Forward(bottom, top)
    return top, loss


def forward_backward(layer, bottom, n_top=1, prop=None):
    top, loss = forward(layer, bottom, n_top)
    layer.Backward(top, prop or [True] + [False] * (len(bottom) - 1), bottom)
    return top, loss


def on_cpu_and_current(fn):
    """fn() run in CPU mode and in the current mode; both results as host arrays."""
    mode = backend.mode()
    with backend.using_mode(backend.CPU):
        ref = fn()
    with backend.using_mode(mode):
        got = fn()
    return ref, got


def assert_matches_cpu(fn):
    ref, got = on_cpu_and_current(fn)
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


# ============================================================================ SoftmaxWithLoss
def softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_by_label(x, labels, axis):
    """The reference softmax of ``x`` over ``axis`` (as ``x``, and as outer x C x inner) and
    the labels as outer x inner ints."""
    p = softmax_ref(x, axis)
    outer = int(np.prod(x.shape[:axis]))
    inner = int(np.prod(x.shape[axis + 1:]))
    return p, p.reshape(outer, x.shape[axis], inner), labels.reshape(outer, inner).astype(int)


def normalizer(mode, count, outer, inner):
    """LossLayer::GetNormalizer, at least 1."""
    return max(1.0, {"VALID": count, "FULL": outer * inner, "BATCH_SIZE": outer, "NONE": 1}[mode])


def softmax_loss_ref(x, labels, axis=1, ignore=None, mode="VALID"):
    p, p3, lab = softmax_by_label(x, labels, axis)
    outer, _, inner = p3.shape
    loss, count = 0.0, 0
    grad = p3.copy()
    for i in range(outer):
        for j in range(inner):
            v = lab[i, j]
            if ignore is not None and v == ignore:
                grad[i, :, j] = 0
                continue
            loss -= np.log(max(p3[i, v, j], FLT_MIN))
            grad[i, v, j] -= 1
            count += 1
    norm = normalizer(mode, count, outer, inner)
    return loss / norm, grad.reshape(x.shape) / norm, p


SOFTMAX_SHAPE = (10, 5, 2, 3)


def softmax_bottoms(dtype=np.float64):
    return [gaussian_blob(SOFTMAX_SHAPE, std=1.0, dtype=dtype),
            label_blob((10, 1, 2, 3), 5, seed=7, dtype=dtype)]


@pytest.mark.parametrize("lp,mode,ignore", [
    ("", "VALID", None),
    ("loss_param { normalization: VALID ignore_label: 2 }", "VALID", 2),
    ("loss_param { normalization: FULL ignore_label: 2 }", "FULL", 2),
    ("loss_param { normalization: BATCH_SIZE }", "BATCH_SIZE", None),
    ("loss_param { normalization: NONE }", "NONE", None),
    ("loss_param { normalize: true ignore_label: 1 }", "VALID", 1),
    ("loss_param { normalize: false }", "BATCH_SIZE", None),
])
def test_softmax_loss_forward_backward(mode, lp, ignore):
    bottom = softmax_bottoms()
    layer = make_layer('type: "SoftmaxWithLoss" loss_weight: 1 loss_weight: 0 %s' % lp)
    top, loss = forward_backward(layer, bottom, n_top=2)
    ref_loss, ref_grad, ref_p = softmax_loss_ref(bottom[0].data, bottom[1].data, 1, ignore, mode)
    np.testing.assert_allclose(float(top[0].data), ref_loss, rtol=1e-10)
    assert loss == pytest.approx(ref_loss, rel=1e-10)
    np.testing.assert_allclose(top[1].data, ref_p, rtol=1e-10)
    np.testing.assert_allclose(bottom[0].diff, ref_grad, rtol=1e-9, atol=1e-12)
    assert_matches_cpu(lambda: [x.copy() for x in _softmax_run(lp)])


def _softmax_run(lp, dtype=np.float32):
    bottom = softmax_bottoms(dtype)
    layer = make_layer('type: "SoftmaxWithLoss" loss_weight: 1 loss_weight: 0 %s' % lp, dtype=dtype)
    top, _ = forward_backward(layer, bottom, n_top=2)
    return top[0].data, top[1].data, bottom[0].diff


def test_softmax_loss_float32_matches_reference(mode):
    loss, prob, diff = _softmax_run("")
    bottom = softmax_bottoms(np.float32)
    ref_loss, ref_grad, ref_p = softmax_loss_ref(bottom[0].data.astype(np.float64), bottom[1].data)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=2e-6)
    np.testing.assert_allclose(prob, ref_p, rtol=2e-6, atol=1e-8)
    np.testing.assert_allclose(diff, ref_grad, rtol=2e-5, atol=1e-7)
    assert loss.dtype == np.float32 and diff.dtype == np.float32


def test_softmax_loss_axis(mode):
    x = gaussian_blob((2, 3, 4))
    lab = label_blob((2, 3), 4, seed=3)
    layer = make_layer('type: "SoftmaxWithLoss" softmax_param { axis: -1 }')
    top, _ = forward_backward(layer, [x, lab])
    ref_loss, ref_grad, _ = softmax_loss_ref(x.data, lab.data, axis=2)
    np.testing.assert_allclose(float(top[0].data), ref_loss, rtol=1e-10)
    np.testing.assert_allclose(x.diff, ref_grad, rtol=1e-9, atol=1e-12)


def test_softmax_loss_gradient(mode):
    layer = make_layer('type: "SoftmaxWithLoss"')
    GradientChecker(1e-2, 1e-2, 1701).check_gradient_exhaustive(layer, softmax_bottoms(), empty_blobs(1), 0)


def test_softmax_loss_gradient_ignore_label(mode):
    layer = make_layer('type: "SoftmaxWithLoss" loss_param { ignore_label: 0 }')
    GradientChecker(1e-2, 1e-2, 1701).check_gradient_exhaustive(layer, softmax_bottoms(), empty_blobs(1), 0)


def test_softmax_loss_gradient_unnormalized(mode):
    layer = make_layer('type: "SoftmaxWithLoss" loss_param { normalize: false }')
    GradientChecker(1e-2, 1e-2, 1701).check_gradient_exhaustive(layer, softmax_bottoms(), empty_blobs(1), 0)


def test_softmax_loss_ignore_label_forward():
    # Caffe's TestForwardIgnoreLabel: the sum over each ignored label equals the full loss.
    bottom = softmax_bottoms()
    full, _ = forward(make_layer('type: "SoftmaxWithLoss" loss_param { normalize: false }'), bottom)
    total = 0.0
    for lab in range(5):
        top, _ = forward(make_layer('type: "SoftmaxWithLoss" loss_param { normalize: false '
                                    'ignore_label: %d }' % lab), bottom)
        total += float(top[0].data)
    # Each label ignored once -> 4 copies of the full loss.
    np.testing.assert_allclose(total, 4 * float(full[0].data), rtol=1e-10)


def test_softmax_loss_weight_scales_gradient():
    b1, b2 = softmax_bottoms(), softmax_bottoms()
    top1, l1 = forward_backward(make_layer('type: "SoftmaxWithLoss"'), b1)
    top2, l2 = forward_backward(make_layer('type: "SoftmaxWithLoss" loss_weight: 3'), b2)
    np.testing.assert_allclose(float(top1[0].data), float(top2[0].data))
    assert l2 == pytest.approx(3 * l1)
    np.testing.assert_allclose(b2[0].diff, 3 * b1[0].diff, rtol=1e-12)


def test_softmax_loss_top_diff_is_the_weight():
    # Backward reads the weight from top[0].diff[0], as Caffe does.
    b = softmax_bottoms()
    layer = make_layer('type: "SoftmaxWithLoss"')
    top, _ = forward(layer, b)
    top[0].diff[...] = -0.5
    layer.Backward(top, [True, False], b)
    _, ref_grad, _ = softmax_loss_ref(b[0].data, b[1].data)
    np.testing.assert_allclose(b[0].diff, -0.5 * ref_grad, rtol=1e-9, atol=1e-12)


def test_softmax_loss_label_values_truncate():
    b = softmax_bottoms()
    b2 = softmax_bottoms()
    b2[1].data[...] = b2[1].data + 0.7  # static_cast<int> truncates
    t1, _ = forward(make_layer('type: "SoftmaxWithLoss"'), b)
    t2, _ = forward(make_layer('type: "SoftmaxWithLoss"'), b2)
    assert float(t1[0].data) == float(t2[0].data)


def test_softmax_loss_errors():
    x = gaussian_blob((4, 6))
    with pytest.raises(LayerError, match=r"The data and label should have the same first dimension\. \(4 vs\. 3\)"):
        forward(make_layer('type: "SoftmaxWithLoss"'), [x, label_blob((3,), 6)])
    with pytest.raises(LayerError, match="Number of labels must match number of predictions; e.g., if "
                                         "softmax axis == 1"):
        forward(make_layer('type: "SoftmaxWithLoss"'), [gaussian_blob((4, 6, 2)), label_blob((4, 3), 6)])
    with pytest.raises(LayerError, match=r"SoftmaxWithLoss Layer takes 2 bottom blob\(s\) as input\."):
        forward(make_layer('type: "SoftmaxWithLoss"'), [x])
    with pytest.raises(LayerError, match=r"SoftmaxWithLoss Layer produces at most 2 top blob\(s\) as output\."):
        forward(make_layer('type: "SoftmaxWithLoss"'), [x, label_blob((4,), 6)], n_top=3)
    # As in Caffe, the default single loss weight does not cover a second top.
    with pytest.raises(LayerError, match="loss_weight must be unspecified or specified once per top blob."):
        forward(make_layer('type: "SoftmaxWithLoss"'), [x, label_blob((4,), 6)], n_top=2)
    layer = make_layer('type: "SoftmaxWithLoss"')
    b = [x, label_blob((4,), 6)]
    top, _ = forward(layer, b)
    with pytest.raises(LayerError, match="SoftmaxWithLoss Layer cannot backpropagate to label inputs."):
        layer.Backward(top, [True, True], b)
    assert not layer.allow_force_backward(1) and layer.allow_force_backward(0)


def test_softmax_loss_all_ignored_gives_zero():
    b = [gaussian_blob((3, 4)), Blob((3,), dtype=np.float64)]
    b[1].data[...] = 1
    top, _ = forward_backward(make_layer('type: "SoftmaxWithLoss" loss_param { ignore_label: 1 }'), b)
    assert float(top[0].data) == 0.0
    assert not b[0].diff.any()


# ============================================================================ SigmoidCrossEntropyLoss
def sigmoid_ce_ref(x, t, ignore=None, mode="BATCH_SIZE"):
    n = x.shape[0]
    valid = np.ones(x.shape, bool) if ignore is None else (t.astype(int) != ignore)
    p = 1 / (1 + np.exp(-x))
    terms = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    loss = (terms * valid).sum()
    norm = {"VALID": valid.sum(), "FULL": x.size, "BATCH_SIZE": n, "NONE": 1}[mode]
    norm = max(1.0, norm)
    grad = (p - t) * valid / norm
    return loss / norm, grad


@pytest.mark.parametrize("lp,mode,ignore", [
    ("", "BATCH_SIZE", None),
    ("loss_param { normalization: VALID ignore_label: -1 }", "VALID", -1),
    ("loss_param { normalization: FULL ignore_label: -1 }", "FULL", -1),
    ("loss_param { normalization: NONE }", "NONE", None),
    ("loss_param { normalize: true }", "VALID", None),
])
def test_sigmoid_ce_forward_backward(mode, lp, ignore):
    x = gaussian_blob((10, 5, 1, 1), std=3.0)
    t = uniform_blob((10, 5, 1, 1), seed=3)
    if ignore is not None:
        t.data.reshape(-1)[::3] = ignore
    layer = make_layer('type: "SigmoidCrossEntropyLoss" %s' % lp)
    top, _ = forward_backward(layer, [x, t])
    ref_loss, ref_grad = sigmoid_ce_ref(x.data, t.data, ignore, mode)
    np.testing.assert_allclose(float(top[0].data), ref_loss, rtol=1e-9)
    np.testing.assert_allclose(x.diff, ref_grad, rtol=1e-9, atol=1e-12)


def test_sigmoid_ce_stable_for_large_inputs():
    x = Blob((2, 2), dtype=np.float32)
    x.data[...] = [[100.0, -100.0], [50.0, -80.0]]
    t = Blob((2, 2), dtype=np.float32)
    t.data[...] = [[0, 1], [1, 0]]
    top, _ = forward(make_layer('type: "SigmoidCrossEntropyLoss"', dtype=np.float32), [x, t])
    np.testing.assert_allclose(float(top[0].data), (100 + 100 + 0 + 0) / 2, rtol=1e-6)


def test_sigmoid_ce_gradient(mode):
    layer = make_layer('type: "SigmoidCrossEntropyLoss"')
    bottom = [gaussian_blob((10, 5, 1, 1), std=1.0), uniform_blob((10, 5, 1, 1), seed=3)]
    GradientChecker(1e-2, 1e-2, 1701).check_gradient_exhaustive(layer, bottom, empty_blobs(1), 0)


def test_sigmoid_ce_ignore_gradient():
    # Caffe's TestIgnoreGradient: ignored targets get zero gradient.
    x = gaussian_blob((10, 5, 1, 1))
    t = uniform_blob((10, 5, 1, 1), seed=3)
    t.data[:5] = -1
    layer = make_layer('type: "SigmoidCrossEntropyLoss" loss_param { ignore_label: -1 }')
    forward_backward(layer, [x, t])
    assert not x.diff[:5].any()
    assert x.diff[5:].all()


def test_sigmoid_ce_matches_cpu(mode):
    def run():
        x = gaussian_blob((4, 6), std=2.0, dtype=np.float32)
        t = uniform_blob((4, 6), seed=3, dtype=np.float32)
        top, _ = forward_backward(make_layer('type: "SigmoidCrossEntropyLoss" loss_weight: 2',
                                             dtype=np.float32), [x, t])
        return top[0].data.copy(), x.diff.copy()
    assert_matches_cpu(run)


def test_sigmoid_ce_count_error():
    with pytest.raises(LayerError, match="SIGMOID_CROSS_ENTROPY_LOSS layer inputs must have the same count."):
        forward(make_layer('type: "SigmoidCrossEntropyLoss"'), [gaussian_blob((4, 6)), gaussian_blob((4, 5))])
    layer = make_layer('type: "SigmoidCrossEntropyLoss"')
    b = [gaussian_blob((4, 6)), uniform_blob((4, 6))]
    top, _ = forward(layer, b)
    with pytest.raises(LayerError, match="SigmoidCrossEntropyLoss Layer cannot backpropagate to label inputs."):
        layer.Backward(top, [True, True], b)


# ============================================================================ EuclideanLoss
def test_euclidean_forward_and_weight(mode):
    a, b = gaussian_blob((10, 5, 1, 1), seed=1), gaussian_blob((10, 5, 1, 1), seed=2)
    top, loss = forward(make_layer('type: "EuclideanLoss"'), [a, b])
    ref = ((a.data - b.data) ** 2).sum() / 10 / 2
    np.testing.assert_allclose(float(top[0].data), ref, rtol=1e-12)
    top3, loss3 = forward(make_layer('type: "EuclideanLoss" loss_weight: 3'), [a, b])
    assert loss3 == pytest.approx(3 * loss, rel=1e-12)


def test_euclidean_backward_both(mode):
    a, b = gaussian_blob((4, 6), seed=1), gaussian_blob((4, 6), seed=2)
    layer = make_layer('type: "EuclideanLoss" loss_weight: 2')
    top, _ = forward(layer, [a, b])
    layer.Backward(top, [True, True], [a, b])
    d = a.data - b.data
    np.testing.assert_allclose(a.diff, 2 * d / 4, rtol=1e-12)
    np.testing.assert_allclose(b.diff, -2 * d / 4, rtol=1e-12)
    assert layer.allow_force_backward(1)


def test_euclidean_gradient(mode):
    layer = make_layer('type: "EuclideanLoss"')
    bottom = [gaussian_blob((10, 5, 1, 1), seed=1), gaussian_blob((10, 5, 1, 1), seed=2)]
    GradientChecker(1e-2, 1e-2, 1701).check_gradient_exhaustive(layer, bottom, empty_blobs(1))


def test_euclidean_dimension_error():
    with pytest.raises(LayerError, match=r"Inputs must have the same dimension\."):
        forward(make_layer('type: "EuclideanLoss"'), [gaussian_blob((4, 6)), gaussian_blob((4, 5))])


# ============================================================================ ContrastiveLoss
def contrastive_bottoms(n=16, c=5, dtype=np.float64):
    a = uniform_blob((n, c, 1, 1), -1, 1, seed=1, dtype=dtype)
    b = uniform_blob((n, c, 1, 1), -1, 1, seed=2, dtype=dtype)
    y = Blob((n, 1, 1, 1), dtype=dtype)
    y.data[...] = (np.random.default_rng(3).uniform(0, 1, n) > 0.5).reshape(n, 1, 1, 1)
    return [a, b, y]


def contrastive_ref(a, b, y, margin, legacy):
    n = a.shape[0]
    d = (a - b).reshape(n, -1)
    dsq = (d * d).sum(1)
    loss = 0.0
    for i in range(n):
        if int(y.reshape(-1)[i]):
            loss += dsq[i]
        elif legacy:
            loss += max(margin - dsq[i], 0.0)
        else:
            loss += max(margin - np.sqrt(dsq[i]), 0.0) ** 2
    return loss / n / 2


@pytest.mark.parametrize("legacy", [False, True])
def test_contrastive_forward(mode, legacy):
    bottom = contrastive_bottoms()
    lp = 'type: "ContrastiveLoss" contrastive_loss_param { margin: 2 legacy_version: %s }' % (
        "true" if legacy else "false")
    top, _ = forward(make_layer(lp), bottom)
    ref = contrastive_ref(bottom[0].data, bottom[1].data, bottom[2].data, 2.0, legacy)
    np.testing.assert_allclose(float(top[0].data), ref, rtol=1e-12)


@pytest.mark.parametrize("legacy", [False, True])
def test_contrastive_gradient(mode, legacy):
    lp = 'type: "ContrastiveLoss" contrastive_loss_param { legacy_version: %s }' % (
        "true" if legacy else "false")
    checker = GradientChecker(1e-2, 1e-2, 1701)
    layer = make_layer(lp)
    bottom = contrastive_bottoms()
    checker.check_gradient_exhaustive(layer, bottom, empty_blobs(1), 0)
    checker.check_gradient_exhaustive(layer, bottom, empty_blobs(1), 1)
    assert not layer.allow_force_backward(2) and layer.allow_force_backward(1)


def test_contrastive_checks():
    a, b = gaussian_blob((4, 5)), gaussian_blob((4, 6))
    y = label_blob((4,), 2)
    with pytest.raises(LayerError, match=r"Check failed: bottom\[0\]->channels\(\) == bottom\[1\]->channels\(\) "
                                         r"\(5 vs\. 6\)"):
        forward(make_layer('type: "ContrastiveLoss"'), [a, b, y])
    with pytest.raises(LayerError, match=r"Check failed: bottom\[0\]->height\(\) == 1 \(2 vs\. 1\)"):
        forward(make_layer('type: "ContrastiveLoss"'),
                [gaussian_blob((4, 5, 2)), gaussian_blob((4, 5, 2)), y])
    with pytest.raises(LayerError, match=r"ContrastiveLoss Layer takes 3 bottom blob\(s\) as input\."):
        forward(make_layer('type: "ContrastiveLoss"'), [a, a])


# ============================================================================ HingeLoss
def hinge_ref(x, labels, norm):
    n = x.shape[0]
    d = x.reshape(n, -1).copy()
    idx = labels.reshape(-1).astype(int)
    d[np.arange(n), idx] *= -1
    m = np.maximum(0, 1 + d)
    loss = (np.abs(m).sum() if norm == "L1" else (m * m).sum()) / n
    m[np.arange(n), idx] *= -1
    grad = np.sign(m) / n if norm == "L1" else 2 * m / n
    return loss, grad.reshape(x.shape)


def hinge_bottoms(dtype=np.float64):
    return [gaussian_blob((10, 5, 1, 1), std=10.0, dtype=dtype), label_blob((10,), 5, seed=4, dtype=dtype)]


@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_hinge_forward_backward(mode, norm):
    bottom = hinge_bottoms()
    layer = make_layer('type: "HingeLoss" hinge_loss_param { norm: %s }' % norm)
    top, _ = forward(layer, bottom)
    ref_loss, ref_grad = hinge_ref(bottom[0].data, bottom[1].data, norm)
    np.testing.assert_allclose(float(top[0].data), ref_loss, rtol=1e-12)
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, ref_grad, rtol=1e-12)


def test_hinge_l1_gradient(mode):
    layer = make_layer('type: "HingeLoss"')
    GradientChecker(1e-2, 2e-3, 1701, 1, 0.01).check_gradient_exhaustive(
        layer, hinge_bottoms(), empty_blobs(1), 0)


def test_hinge_l2_gradient(mode):
    layer = make_layer('type: "HingeLoss" hinge_loss_param { norm: L2 }')
    GradientChecker(1e-2, 2e-2, 1701).check_gradient_exhaustive(layer, hinge_bottoms(), empty_blobs(1), 0)


def test_hinge_forward_uses_bottom_diff_as_scratch():
    bottom = hinge_bottoms()
    forward(make_layer('type: "HingeLoss"'), bottom)
    d = bottom[0].data.reshape(10, -1).copy()
    idx = bottom[1].data.astype(int)
    d[np.arange(10), idx] *= -1
    np.testing.assert_allclose(bottom[0].diff.reshape(10, -1), np.maximum(0, 1 + d))


# ============================================================================ InfogainLoss
def infogain_bottoms(dtype=np.float64):
    data = uniform_blob((4, 2, 5, 2), seed=1, dtype=dtype)
    label = label_blob((4, 2, 1, 2), 5, seed=2, dtype=dtype)
    H = uniform_blob((1, 1, 5, 5), seed=3, dtype=dtype)
    return [data, label, H]


def infogain_ref(x, labels, H, axis, ignore=None, mode="VALID"):
    p, p3, lab = softmax_by_label(x, labels, axis)
    outer, L, inner = p3.shape
    Hm = H.reshape(L, L)
    loss, count = 0.0, 0
    grad = np.zeros_like(p3)
    for i in range(outer):
        for j in range(inner):
            v = lab[i, j]
            if ignore is not None and v == ignore:
                continue
            for l in range(L):
                loss -= Hm[v, l] * np.log(max(p3[i, l, j], 1e-20))
                grad[i, l, j] = p3[i, l, j] * Hm[v].sum() - Hm[v, l]
            count += 1
    norm = normalizer(mode, count, outer, inner)
    return loss / norm, grad.reshape(x.shape) / norm, p


@pytest.mark.parametrize("lp,mode,ignore", [
    ("", "VALID", None),
    ("loss_param { ignore_label: 1 }", "VALID", 1),
    ("loss_param { normalization: FULL ignore_label: 1 }", "FULL", 1),
    ("loss_param { normalization: BATCH_SIZE }", "BATCH_SIZE", None),
    ("loss_param { normalization: NONE }", "NONE", None),
])
def test_infogain_forward_backward(mode, lp, ignore):
    bottom = infogain_bottoms()
    layer = make_layer('type: "InfogainLoss" loss_weight: 1 loss_weight: 0 '
                       'infogain_loss_param { axis: 2 } %s' % lp)
    top, _ = forward_backward(layer, bottom, n_top=2, prop=[True, False, False])
    ref_loss, ref_grad, ref_p = infogain_ref(bottom[0].data, bottom[1].data, bottom[2].data, 2, ignore, mode)
    np.testing.assert_allclose(float(top[0].data), ref_loss, rtol=1e-10)
    np.testing.assert_allclose(top[1].data, ref_p, rtol=1e-10)
    np.testing.assert_allclose(bottom[0].diff, ref_grad, rtol=1e-9, atol=1e-12)


def test_infogain_gradient(mode):
    layer = make_layer('type: "InfogainLoss" infogain_loss_param { axis: 2 }')
    GradientChecker(1e-4, 2e-2, 1701).check_gradient_exhaustive(layer, infogain_bottoms(), empty_blobs(1), 0)


def test_infogain_from_source(tmp_path):
    from engine.core import io
    bottom = infogain_bottoms()
    path = tmp_path / "H.binaryproto"
    io.write_binary(str(path), io.array_to_blobproto(bottom[2].data.astype(np.float32)))
    layer = make_layer('type: "InfogainLoss" infogain_loss_param { axis: 2 source: "%s" }' % path)
    top, _ = forward_backward(layer, bottom[:2])
    ref_loss, ref_grad, _ = infogain_ref(bottom[0].data, bottom[1].data,
                                         bottom[2].data.astype(np.float32).astype(np.float64), 2)
    np.testing.assert_allclose(float(top[0].data), ref_loss, rtol=1e-7)
    np.testing.assert_allclose(bottom[0].diff, ref_grad, rtol=1e-6, atol=1e-9)


def test_infogain_errors():
    bottom = infogain_bottoms()
    with pytest.raises(LayerError, match="Infogain matrix source must be specified."):
        forward(make_layer('type: "InfogainLoss" infogain_loss_param { axis: 2 }'), bottom[:2])
    with pytest.raises(LayerError, match='normalize is deprecated. use "normalization"'):
        forward(make_layer('type: "InfogainLoss" loss_param { normalize: true }'), bottom)
    with pytest.raises(LayerError, match=r"Check failed: infogain->count\(\) == num_labels_\*num_labels_ "
                                         r"\(16 vs\. 25\)"):
        forward(make_layer('type: "InfogainLoss" infogain_loss_param { axis: 2 }'),
                bottom[:2] + [uniform_blob((1, 1, 4, 4))])
    layer = make_layer('type: "InfogainLoss" infogain_loss_param { axis: 2 }')
    top, _ = forward(layer, bottom)
    with pytest.raises(LayerError, match="InfogainLoss Layer cannot backpropagate to infogain inputs."):
        layer.Backward(top, [True, False, True], bottom)
    with pytest.raises(LayerError, match="InfogainLoss Layer cannot backpropagate to label inputs."):
        layer.Backward(top, [True, True, False], bottom)


def test_infogain_matches_cpu(mode):
    def run():
        bottom = infogain_bottoms(np.float32)
        layer = make_layer('type: "InfogainLoss" infogain_loss_param { axis: 2 }', dtype=np.float32)
        top, _ = forward_backward(layer, bottom, prop=[True, False, False])
        return top[0].data.copy(), bottom[0].diff.copy()
    assert_matches_cpu(run)


# ============================================================================ MultinomialLogisticLoss
def mlogistic_bottoms():
    x = uniform_blob((10, 5, 1, 1), seed=1)
    x.data[...] = x.data / x.data.sum(axis=1, keepdims=True)  # positive unit ball
    return [x, label_blob((10, 1, 1, 1), 5, seed=2)]


def test_multinomial_logistic_forward_backward(mode):
    bottom = mlogistic_bottoms()
    bottom[0].data[0, int(bottom[1].data[0, 0, 0, 0])] = 0  # hits the 1e-20 floor
    layer = make_layer('type: "MultinomialLogisticLoss"')
    top, _ = forward_backward(layer, bottom)
    x, lab = bottom[0].data.reshape(10, 5), bottom[1].data.reshape(-1).astype(int)
    p = np.maximum(x[np.arange(10), lab], 1e-20)
    np.testing.assert_allclose(float(top[0].data), -np.log(p).sum() / 10, rtol=1e-12)
    g = np.zeros((10, 5))
    g[np.arange(10), lab] = -1.0 / 10 / p
    np.testing.assert_allclose(bottom[0].diff.reshape(10, 5), g, rtol=1e-12)


def test_multinomial_logistic_gradient(mode):
    layer = make_layer('type: "MultinomialLogisticLoss"')
    GradientChecker(1e-2, 2 * 1e-2, 1701, 0, 0.05).check_gradient_exhaustive(
        layer, mlogistic_bottoms(), empty_blobs(1), 0)


def test_multinomial_logistic_label_shape_check():
    with pytest.raises(LayerError, match=r"Check failed: bottom\[1\]->channels\(\) == 1 \(2 vs\. 1\)"):
        forward(make_layer('type: "MultinomialLogisticLoss"'), [gaussian_blob((4, 5)), label_blob((4, 2), 5)])


def test_loss_layer_label_count_error_shared():
    x = gaussian_blob((4, 6))
    for t in ("MultinomialLogisticLoss", "HingeLoss", "EuclideanLoss", "SigmoidCrossEntropyLoss"):
        other = label_blob((3,), 6) if t in ("MultinomialLogisticLoss", "HingeLoss") else gaussian_blob((3, 6))
        with pytest.raises(LayerError, match=r"The data and label should have the same first dimension\."):
            forward(make_layer('type: "%s"' % t), [x, other])


# ============================================================================ Accuracy
def accuracy_ref(x, labels, top_k, axis=1, ignore=None):
    outer = int(np.prod(x.shape[:axis]))
    C = x.shape[axis]
    inner = int(np.prod(x.shape[axis + 1:]))
    d = x.reshape(outer, C, inner)
    lab = labels.reshape(outer, inner).astype(int)
    correct, count = 0, 0
    per_hit, per_num = np.zeros(C), np.zeros(C)
    for i in range(outer):
        for j in range(inner):
            v = lab[i, j]
            if ignore is not None and v == ignore:
                continue
            per_num[v] += 1
            better = sum(d[i, k, j] >= d[i, v, j] for k in range(C)) - 1
            if better < top_k:
                correct += 1
                per_hit[v] += 1
            count += 1
    per = np.where(per_num == 0, 0, per_hit / np.maximum(per_num, 1))
    return (correct / count if count else 0.0), per


@pytest.mark.parametrize("lp,top_k,ignore", [
    ("", 1, None),
    ("accuracy_param { top_k: 3 }", 3, None),
    ("accuracy_param { top_k: 2 ignore_label: 3 }", 2, 3),
])
def test_accuracy_forward(mode, lp, top_k, ignore):
    x = gaussian_blob((100, 10))
    lab = label_blob((100,), 10, seed=5)
    top, loss = forward(make_layer('type: "Accuracy" %s' % lp, phase="TEST"), [x, lab], n_top=2)
    acc, per = accuracy_ref(x.data, lab.data, top_k, ignore=ignore)
    np.testing.assert_allclose(float(top[0].data), acc, rtol=1e-12)
    np.testing.assert_allclose(top[1].data, per, rtol=1e-12)
    assert top[0].shape == () and top[1].shape == (10,)
    assert loss == 0


def test_accuracy_axis_and_ties():
    x = gaussian_blob((2, 3, 4))
    x.data[0, :, 0] = 1.0  # all tied: the true class is beaten by the ties
    lab = label_blob((2, 3), 4, seed=6)
    top, _ = forward(make_layer('type: "Accuracy" accuracy_param { axis: 2 }'), [x, lab], n_top=1)
    acc, _ = accuracy_ref(x.data, lab.data, 1, axis=2)
    np.testing.assert_allclose(float(top[0].data), acc, rtol=1e-12)


def test_accuracy_float32_matches_cpu(mode):
    def run():
        x = gaussian_blob((20, 4, 3), dtype=np.float32)
        lab = label_blob((20, 3), 4, seed=5, dtype=np.float32)
        top, _ = forward(make_layer('type: "Accuracy" accuracy_param { top_k: 2 ignore_label: 0 }',
                                    dtype=np.float32), [x, lab], n_top=2)
        return top[0].data.copy(), top[1].data.copy()
    assert_matches_cpu(run)


def test_accuracy_errors():
    x = gaussian_blob((4, 3))
    lab = label_blob((4,), 3)
    with pytest.raises(LayerError, match="top_k must be less than or equal to the number of classes."):
        forward(make_layer('type: "Accuracy" accuracy_param { top_k: 4 }'), [x, lab])
    with pytest.raises(LayerError, match="Number of labels must match number of predictions; e.g., if label axis"):
        forward(make_layer('type: "Accuracy"'), [gaussian_blob((4, 3, 2)), label_blob((4, 1), 3)])
    layer = make_layer('type: "Accuracy"')
    top, _ = forward(layer, [x, lab])
    with pytest.raises(LayerError, match="Not Implemented Yet"):
        layer.Backward(top, [True, False], [x, lab])
    layer.Backward(top, [False, False], [x, lab])
    assert layer.loss(0) == 0


def test_accuracy_all_ignored():
    x = gaussian_blob((4, 3))
    lab = Blob((4,), dtype=np.float64)
    lab.data[...] = 2
    top, _ = forward(make_layer('type: "Accuracy" accuracy_param { ignore_label: 2 }'), [x, lab], n_top=2)
    assert float(top[0].data) == 0 and not top[1].data.any()

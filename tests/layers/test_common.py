"""Tests of engine/core/layers/common.py, after Caffe's test_*_layer.cpp: forward
against NumPy references, Caffe's gradient checks (float64 blobs), and the CHECK
messages.  Forward tests run on the CPU and, where a GPU is present, on the GPU
(compared with the CPU within 1e-5 relative)."""
import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import LayerError, ShapeError
from engine.core.layers.common import softmax_backward, softmax_forward
from engine.instruments.gradient_check import GradientChecker
from tests.layers.helpers import empty_blobs, gaussian_blob, make_layer, seed, uniform_blob


# --------------------------------------------------------------------------- helpers
def blob_of(a, dtype=np.float64):
    a = np.asarray(a, dtype=dtype)
    b = Blob(a.shape, dtype=dtype)
    b.data[...] = a
    return b


def _run(text, arrays, ntop, params=None):
    """Build, set up and forward a layer in the current mode; return (layer, bottoms, tops)."""
    layer = make_layer(text)
    bottom = [blob_of(a) for a in arrays]
    top = empty_blobs(ntop)
    layer.SetUp(bottom, top)
    if params is not None:
        for b, p in zip(layer.blobs, params):
            b.data[...] = p
    layer.Forward(bottom, top)
    return layer, bottom, top


def run_forward(text, arrays, ntop=1, mode="cpu"):
    """Forward in the current mode; on the GPU also on the CPU, compared within 1e-5."""
    layer, bottom, top = _run(text, arrays, ntop)
    outs = [t.data.copy() for t in top]
    if mode == "gpu":
        params = [b.data.copy() for b in layer.blobs]
        with backend.using_mode(backend.CPU):
            _, _, ctop = _run(text, arrays, ntop, params)
            for o, c in zip(outs, ctop):
                np.testing.assert_allclose(o, c.data, rtol=1e-5, atol=1e-6)
    return layer, bottom, top, outs


def close(a, b, mode="cpu"):
    tol = 1e-5 if mode == "gpu" else 1e-12
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def rnd(shape, seed_=1701, lo=None, hi=None):
    rng = np.random.default_rng(seed_)
    if lo is None:
        return rng.standard_normal(shape)
    return rng.uniform(lo, hi, shape)


def setup_for_check(text, bottoms, ntop=1):
    layer = make_layer(text)
    return layer, bottoms, empty_blobs(ntop)


# --------------------------------------------------------------------------- InnerProduct
IP = ('type: "InnerProduct" inner_product_param { num_output: %d %s '
      'weight_filler { type: "gaussian" std: 0.5 } '
      'bias_filler { type: "gaussian" mean: 1 std: 0.5 } }')


def test_ip_setup_shapes():
    seed()
    layer, _, top, _ = run_forward(IP % (10, ""), [rnd((2, 3, 4, 5))])
    assert top[0].shape == (2, 10)
    assert layer.blobs[0].shape == (10, 60) and layer.blobs[1].shape == (10,)
    layer, _, top, _ = run_forward(IP % (10, "transpose: true"), [rnd((2, 3, 4, 5))])
    assert layer.blobs[0].shape == (60, 10)
    layer, _, top, _ = run_forward(IP % (6, "axis: 2"), [rnd((2, 3, 4, 5))])
    assert top[0].shape == (2, 3, 6) and layer.blobs[0].shape == (6, 20)
    layer, _, top, _ = run_forward(IP % (6, "axis: -1 bias_term: false"), [rnd((2, 3, 4, 5))])
    assert top[0].shape == (2, 3, 4, 6) and len(layer.blobs) == 1


@pytest.mark.parametrize("extra", ["", "transpose: true", "axis: 2", "axis: 2 transpose: true",
                                   "bias_term: false"])
def test_ip_forward(mode, extra):
    seed()
    x = rnd((2, 3, 4, 5))
    layer, _, top, outs = run_forward(IP % (7, extra), [x], mode=mode)
    axis = 2 if "axis: 2" in extra else 1
    m = int(np.prod(x.shape[:axis]))
    w = layer.blobs[0].data
    w_nk = w.T if "transpose" in extra else w
    ref = x.reshape(m, -1) @ w_nk.T
    if "bias_term: false" not in extra:
        ref = ref + layer.blobs[1].data
    close(outs[0], ref.reshape(x.shape[:axis] + (7,)), mode)


def test_ip_input_size_check():
    seed()
    layer = make_layer(IP % (4, ""))
    top = empty_blobs(1)
    layer.SetUp([blob_of(rnd((2, 3, 4)))], top)
    with pytest.raises(LayerError, match="Input size incompatible with inner product parameters"):
        layer.Forward([blob_of(rnd((2, 3, 5)))], top)


@pytest.mark.parametrize("extra", ["", "transpose: true", "axis: 2 transpose: true"])
def test_ip_gradient(mode, extra):
    seed()
    layer = make_layer(IP % (3, extra))
    bottom = [uniform_blob((2, 2, 3, 2))]
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottom, empty_blobs(1))


def test_ip_transpose_matches_plain():
    """Caffe's TestForwardTranspose: the transposed weights give the same output."""
    seed()
    x = rnd((2, 3, 4, 5))
    layer, _, _, outs = run_forward(IP % (10, ""), [x])
    w, b = layer.blobs[0].data.copy(), layer.blobs[1].data.copy()
    lt = make_layer(IP % (10, "transpose: true"))
    bottom, top = [blob_of(x)], empty_blobs(1)
    lt.SetUp(bottom, top)
    lt.blobs[0].data[...] = w.T
    lt.blobs[1].data[...] = b
    lt.Forward(bottom, top)
    close(top[0].data, outs[0])


def test_ip_param_diff_accumulates():
    seed()
    layer, bottom, top, _ = run_forward(IP % (3, ""), [rnd((2, 4))])
    top[0].diff[...] = 1.0
    layer.Backward(top, [False], bottom)
    w1 = layer.blobs[0].diff.copy()
    layer.Backward(top, [False], bottom)
    close(layer.blobs[0].diff, 2 * w1)
    close(layer.blobs[1].diff, np.full(3, 4.0))


# --------------------------------------------------------------------------- Concat
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat_forward(mode, axis):
    shapes = {0: [(2, 3, 4, 5), (1, 3, 4, 5)], 1: [(2, 3, 4, 5), (2, 5, 4, 5)],
              2: [(2, 3, 4, 5), (2, 3, 2, 5)], -1: [(2, 3, 4, 5), (2, 3, 4, 1)]}[axis]
    xs = [rnd(s, 10 + i) for i, s in enumerate(shapes)] + [rnd(shapes[1], 20)]
    _, _, top, outs = run_forward('type: "Concat" concat_param { axis: %d }' % axis, xs, mode=mode)
    close(outs[0], np.concatenate(xs, axis=axis), mode)


def test_concat_legacy_concat_dim_and_single_bottom():
    xs = [rnd((2, 3, 4)), rnd((3, 3, 4), 3)]
    _, _, top, outs = run_forward('type: "Concat" concat_param { concat_dim: 0 }', xs)
    close(outs[0], np.concatenate(xs, 0))
    layer, bottom, top, _ = run_forward('type: "Concat"', [xs[0]])
    assert top[0].shares_data_with(bottom[0])


def test_concat_errors():
    with pytest.raises(LayerError, match="All inputs must have the same shape, except at "
                                         "concat_axis.") as e:
        run_forward('type: "Concat" concat_param { axis: 1 }', [rnd((2, 3, 4)), rnd((2, 3, 5))])
    assert "(4 vs. 5)" in str(e.value)
    with pytest.raises(LayerError, match="All inputs must have the same #axes."):
        run_forward('type: "Concat"', [rnd((2, 3, 4)), rnd((2, 3))])
    with pytest.raises(LayerError, match="Either axis or concat_dim should be specified; not both."):
        run_forward('type: "Concat" concat_param { axis: 1 concat_dim: 1 }',
                    [rnd((2, 3)), rnd((2, 3))])
    with pytest.raises(LayerError, match="concat_dim out of range."):
        run_forward('type: "Concat" concat_param { concat_dim: 2 }', [rnd((2, 3)), rnd((2, 3))])


@pytest.mark.parametrize("axis", [0, 1])
def test_concat_gradient(mode, axis):
    layer = make_layer('type: "Concat" concat_param { axis: %d }' % axis)
    bottom = [gaussian_blob((2, 3, 2, 3), seed=1), gaussian_blob((2, 3, 2, 3), seed=2)]
    GradientChecker(1e-2, 1e-2).check_gradient(layer, bottom, empty_blobs(1))


def test_concat_gradient_one_bottom_only():
    layer = make_layer('type: "Concat"')
    bottom = [gaussian_blob((2, 3, 2, 3), seed=1), gaussian_blob((2, 2, 2, 3), seed=2)]
    GradientChecker(1e-2, 1e-2).check_gradient(layer, bottom, empty_blobs(1), 1)


# --------------------------------------------------------------------------- Slice
def test_slice_points_forward(mode):
    x = rnd((6, 5, 4, 3))
    _, _, top, outs = run_forward('type: "Slice" slice_param { axis: 1 slice_point: 1 '
                                  'slice_point: 3 }', [x], 3, mode)
    for o, r in zip(outs, np.split(x, [1, 3], axis=1)):
        close(o, r, mode)
    assert [t.shape for t in top] == [(6, 1, 4, 3), (6, 2, 4, 3), (6, 2, 4, 3)]


@pytest.mark.parametrize("axis,ntop", [(0, 2), (1, 5), (-1, 3)])
def test_slice_even_forward(mode, axis, ntop):
    x = rnd((6, 5, 4, 3))
    _, _, top, outs = run_forward('type: "Slice" slice_param { axis: %d }' % axis, [x], ntop, mode)
    for o, r in zip(outs, np.split(x, ntop, axis=axis)):
        close(o, r, mode)


def test_slice_legacy_slice_dim():
    x = rnd((6, 4, 2))
    _, _, top, outs = run_forward('type: "Slice" slice_param { slice_dim: 0 slice_point: 2 }',
                                  [x], 2)
    close(outs[0], x[:2])
    close(outs[1], x[2:])


def test_slice_errors():
    with pytest.raises(LayerError, match=r"Number of top blobs \(2\) should evenly divide input "
                                         r"slice axis \(5\)"):
        run_forward('type: "Slice"', [rnd((2, 5))], 2)
    with pytest.raises(LayerError, match=r"slice_point_.size\(\) == top.size\(\) - 1"):
        run_forward('type: "Slice" slice_param { slice_point: 1 }', [rnd((2, 5))], 3)
    with pytest.raises(LayerError, match=r"slice_point_\[i\] > prev \(1 vs. 1\)"):
        run_forward('type: "Slice" slice_param { slice_point: 1 slice_point: 1 }',
                    [rnd((2, 5))], 3)
    with pytest.raises(LayerError, match="Either axis or slice_dim should be specified; not both."):
        run_forward('type: "Slice" slice_param { axis: 1 slice_dim: 1 }', [rnd((2, 4))], 2)


@pytest.mark.parametrize("param", ["axis: 0", "axis: 1 slice_point: 1 slice_point: 3"])
def test_slice_gradient(mode, param):
    ntop = 2 if param == "axis: 0" else 3
    layer = make_layer('type: "Slice" slice_param { %s }' % param)
    bottom = [gaussian_blob((2, 4, 2, 2))]
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottom, empty_blobs(ntop))


# --------------------------------------------------------------------------- Split
def test_split_shares_data_and_sums_diffs(mode):
    x = rnd((2, 3, 4))
    layer, bottom, top, outs = run_forward('type: "Split"', [x], 3, mode)
    for t in top:
        assert t.shape == x.shape and t.shares_data_with(bottom[0])
        close(t.data, x, mode)
    d = [rnd(x.shape, 30 + i) for i in range(3)]
    for t, di in zip(top, d):
        t.diff[...] = di
    layer.Backward(top, [True], bottom)
    close(bottom[0].diff, d[0] + d[1] + d[2], mode)


def test_split_in_place_refused():
    layer = make_layer('type: "Split"')
    b = blob_of(rnd((2, 3)))
    with pytest.raises(LayerError, match="Split Layer does not allow in-place computation."):
        layer.SetUp([b], [Blob(dtype=np.float64), b])


@pytest.mark.parametrize("ntop", [1, 2, 3])
def test_split_gradient(mode, ntop):
    layer = make_layer('type: "Split"')
    GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(
        layer, [gaussian_blob((2, 3, 2))], empty_blobs(ntop))


# --------------------------------------------------------------------------- Eltwise
def _three(shape=(2, 3, 4, 5), lo=None, hi=None):
    return [rnd(shape, 40 + i, lo, hi) for i in range(3)]


def test_eltwise_prod(mode):
    xs = _three()
    _, _, _, outs = run_forward('type: "Eltwise" eltwise_param { operation: PROD }', xs, mode=mode)
    close(outs[0], xs[0] * xs[1] * xs[2], mode)


def test_eltwise_sum(mode):
    xs = _three()
    _, _, _, outs = run_forward('type: "Eltwise" eltwise_param { operation: SUM }', xs, mode=mode)
    close(outs[0], xs[0] + xs[1] + xs[2], mode)


def test_eltwise_sum_coeff(mode):
    xs = _three()
    _, _, _, outs = run_forward('type: "Eltwise" eltwise_param { operation: SUM coeff: 1 '
                                'coeff: -0.5 coeff: 2 }', xs, mode=mode)
    close(outs[0], xs[0] - 0.5 * xs[1] + 2 * xs[2], mode)


def test_eltwise_max(mode):
    xs = _three()
    layer, bottom, top, outs = run_forward('type: "Eltwise" eltwise_param { operation: MAX }',
                                           xs, mode=mode)
    close(outs[0], np.maximum(np.maximum(xs[0], xs[1]), xs[2]), mode)
    top[0].diff[...] = 1.0
    layer.Backward(top, [True] * 3, bottom)
    arg = np.argmax(np.stack(xs), axis=0)
    for i, b in enumerate(bottom):
        close(b.diff, (arg == i).astype(float), mode)


def test_eltwise_max_ties_go_to_later_of_first_two():
    a = np.array([1.0, 2.0, 3.0])
    layer, bottom, top, _ = run_forward('type: "Eltwise" eltwise_param { operation: MAX }',
                                        [a, a.copy()])
    top[0].diff[...] = 1.0
    layer.Backward(top, [True, True], bottom)
    close(bottom[0].diff, np.zeros(3))
    close(bottom[1].diff, np.ones(3))


def test_eltwise_errors():
    with pytest.raises(LayerError, match="Eltwise Layer takes one coefficient per bottom blob."):
        run_forward('type: "Eltwise" eltwise_param { coeff: 1 }', _three((2, 3)))
    with pytest.raises(LayerError, match="Eltwise layer only takes coefficients for summation."):
        run_forward('type: "Eltwise" eltwise_param { operation: PROD coeff: 1 coeff: 1 }',
                    _three((2, 3))[:2])
    with pytest.raises(LayerError, match=r"bottom\[0\]: 2 3 \(6\), bottom\[1\]: 3 2 \(6\)"):
        run_forward('type: "Eltwise"', [rnd((2, 3)), rnd((3, 2))])


@pytest.mark.parametrize("stable", ["true", "false"])
def test_eltwise_prod_gradient(mode, stable):
    layer = make_layer('type: "Eltwise" eltwise_param { operation: PROD stable_prod_grad: %s }'
                       % stable)
    bottom = [uniform_blob((2, 3, 2, 2), 0.5, 1.5, seed=s) for s in (1, 2, 3)]
    GradientChecker(1e-2, 1e-3).check_gradient_eltwise(layer, bottom, empty_blobs(1))


@pytest.mark.parametrize("coeff", ["", "coeff: 1 coeff: -0.5 coeff: 2"])
def test_eltwise_sum_gradient(mode, coeff):
    layer = make_layer('type: "Eltwise" eltwise_param { operation: SUM %s }' % coeff)
    bottom = [gaussian_blob((2, 3, 2, 2), seed=s) for s in (1, 2, 3)]
    GradientChecker(1e-2, 1e-3).check_gradient_eltwise(layer, bottom, empty_blobs(1))


def test_eltwise_max_gradient(mode):
    layer = make_layer('type: "Eltwise" eltwise_param { operation: MAX }')
    bottom = [uniform_blob((2, 3, 2, 2), -1, 1, seed=s) for s in (1, 2, 3)]
    GradientChecker(1e-4, 1e-3).check_gradient_exhaustive(layer, bottom, empty_blobs(1))


# --------------------------------------------------------------------------- Flatten
@pytest.mark.parametrize("param,shape", [("", (2, 60)), ("axis: 2", (2, 3, 20)),
                                         ("end_axis: -2", (2, 12, 5)),
                                         ("axis: 0 end_axis: 1", (6, 4, 5)),
                                         ("axis: 1 end_axis: 1", (2, 3, 4, 5))])
def test_flatten(mode, param, shape):
    x = rnd((2, 3, 4, 5))
    layer, bottom, top, outs = run_forward('type: "Flatten" flatten_param { %s }' % param, [x],
                                           mode=mode)
    assert top[0].shape == shape
    close(outs[0], x.reshape(shape), mode)
    assert top[0].shares_data_with(bottom[0])
    top[0].diff[...] = rnd(shape, 3)
    layer.Backward(top, [True], bottom)
    close(bottom[0].diff, top[0].diff.reshape(x.shape), mode)


def test_flatten_in_place_refused():
    b = blob_of(rnd((2, 3, 4)))
    with pytest.raises(LayerError, match="Flatten Layer does not allow in-place computation."):
        make_layer('type: "Flatten"').SetUp([b], [b])


def test_flatten_gradient(mode):
    layer = make_layer('type: "Flatten"')
    GradientChecker(1e-2, 1e-2).check_gradient_eltwise(layer, [gaussian_blob((2, 3, 2, 2))],
                                                       empty_blobs(1))


# --------------------------------------------------------------------------- Reshape
@pytest.mark.parametrize("param,shape", [
    ("shape { dim: 0 dim: -1 dim: 2 } axis: 1", (2, 3, 10, 2)),
    ("shape { dim: 6 dim: 2 dim: 10 }", (6, 2, 10)),
    ("shape { dim: 0 dim: 0 dim: -1 }", (2, 3, 20)),
    ("shape { dim: -1 }", (120,)),
    ("shape { dim: 2 dim: 2 } axis: 2 num_axes: 1", (2, 3, 2, 2, 5)),
    ("shape { dim: 1 dim: 1 } axis: 0 num_axes: 0", (1, 1, 2, 3, 4, 5)),
    ("shape { dim: 1 } axis: -1 num_axes: 0", (2, 3, 4, 5, 1)),
    ("shape { dim: -1 dim: 4 } axis: -3 num_axes: 2", (2, 3, 5, 4)),
    ("shape { } axis: 1 num_axes: 0", (2, 3, 4, 5)),
])
def test_reshape(mode, param, shape):
    x = rnd((2, 3, 4, 5))
    layer, bottom, top, outs = run_forward('type: "Reshape" reshape_param { %s }' % param, [x],
                                           mode=mode)
    assert top[0].shape == shape
    close(outs[0], x.reshape(shape), mode)
    assert top[0].shares_data_with(bottom[0])
    assert top[0].diff_memory is bottom[0].diff_memory


def test_reshape_divisibility_error():
    with pytest.raises(LayerError) as e:
        run_forward('type: "Reshape" reshape_param { shape { dim: 7 dim: -1 } }',
                    [rnd((2, 3, 4, 5))])
    assert ("bottom count (120) must be divisible by the product of the specified "
            "dimensions (7)") in str(e.value)


def test_reshape_other_errors():
    x = [rnd((2, 3, 4, 5))]
    with pytest.raises(LayerError, match="new shape contains multiple -1 dims; at most a single "
                                         r"\(1\) value of -1 may be specified"):
        run_forward('type: "Reshape" reshape_param { shape { dim: -1 dim: -1 } }', x)
    with pytest.raises(LayerError, match="new shape contains a 0, but there was no corresponding "
                                         "bottom axis to copy"):
        run_forward('type: "Reshape" reshape_param { shape { dim: 0 dim: 0 } axis: 3 }', x)
    with pytest.raises(LayerError, match="output count must match input count"):
        run_forward('type: "Reshape" reshape_param { shape { dim: 7 } }', x)
    with pytest.raises(LayerError, match="end_axis = axis \\+ num_axes is out of range"):
        run_forward('type: "Reshape" reshape_param { shape { dim: 1 } axis: 2 num_axes: 3 }', x)
    with pytest.raises(LayerError, match="axis 5 out of range for 4-D input blob"):
        run_forward('type: "Reshape" reshape_param { shape { dim: 1 } axis: 5 }', x)
    with pytest.raises(LayerError, match="num_axes must be >= 0, or -1 for all"):
        run_forward('type: "Reshape" reshape_param { shape { dim: 1 } num_axes: -2 }', x)
    b = blob_of(x[0])
    with pytest.raises(LayerError, match="Reshape Layer does not allow in-place computation."):
        make_layer('type: "Reshape" reshape_param { shape { dim: -1 } }').SetUp([b], [b])


def test_reshape_gradient(mode):
    layer = make_layer('type: "Reshape" reshape_param { shape { dim: 0 dim: -1 } }')
    GradientChecker(1e-2, 1e-2).check_gradient_eltwise(layer, [gaussian_blob((2, 3, 2, 2))],
                                                       empty_blobs(1))


# --------------------------------------------------------------------------- Tile
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_tile_forward(mode, axis):
    x = rnd((2, 3, 4, 5))
    _, _, top, outs = run_forward('type: "Tile" tile_param { axis: %d tiles: 3 }' % axis, [x],
                                  mode=mode)
    reps = [1, 1, 1, 1]
    reps[axis] = 3
    close(outs[0], np.tile(x, reps), mode)


def test_tile_errors():
    with pytest.raises(LayerError, match="Number of tiles must be specified"):
        run_forward('type: "Tile"', [rnd((2, 3))])
    with pytest.raises(LayerError, match="Number of tiles must be positive."):
        run_forward('type: "Tile" tile_param { tiles: 0 }', [rnd((2, 3))])


@pytest.mark.parametrize("axis", [0, 1])
def test_tile_gradient(mode, axis):
    layer = make_layer('type: "Tile" tile_param { axis: %d tiles: 3 }' % axis)
    GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(
        layer, [gaussian_blob((2, 2, 2, 2))], empty_blobs(1))


# --------------------------------------------------------------------------- Reduction
def _reduce_ref(x, op, axis, coeff):
    m = x.reshape(int(np.prod(x.shape[:axis])), -1)
    r = {"SUM": m.sum(1), "ASUM": np.abs(m).sum(1), "SUMSQ": (m * m).sum(1),
         "MEAN": m.mean(1)}[op]
    return (r * coeff).reshape(x.shape[:axis])


@pytest.mark.parametrize("op", ["SUM", "ASUM", "SUMSQ", "MEAN"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("coeff", [1.0, 2.3])
def test_reduction_forward(mode, op, axis, coeff):
    x = rnd((2, 3, 4, 5))
    _, _, top, outs = run_forward('type: "Reduction" reduction_param { operation: %s axis: %d '
                                  'coeff: %g }' % (op, axis, coeff), [x], mode=mode)
    assert top[0].shape == x.shape[:axis]
    close(outs[0], _reduce_ref(x, op, axis, np.float32(coeff)), mode)


def test_reduction_negative_axis():
    x = rnd((2, 3, 4))
    _, _, top, outs = run_forward('type: "Reduction" reduction_param { axis: -1 }', [x])
    assert top[0].shape == (2, 3)
    close(outs[0], x.sum(-1))


@pytest.mark.parametrize("op", ["SUM", "ASUM", "SUMSQ", "MEAN"])
@pytest.mark.parametrize("axis,coeff", [(0, 1.0), (1, 2.3), (2, -1.0)])
def test_reduction_gradient(mode, op, axis, coeff):
    layer = make_layer('type: "Reduction" reduction_param { operation: %s axis: %d coeff: %g }'
                       % (op, axis, coeff))
    GradientChecker(1e-2, 2e-3).check_gradient_exhaustive(
        layer, [gaussian_blob((2, 3, 2, 2))], empty_blobs(1))


# --------------------------------------------------------------------------- Embed
EMBED = ('type: "Embed" embed_param { input_dim: %d num_output: %d %s '
         'weight_filler { type: "uniform" min: -10 max: 10 } '
         'bias_filler { type: "uniform" min: -10 max: 10 } }')


@pytest.mark.parametrize("bias", ["", "bias_term: false"])
def test_embed_forward(mode, bias):
    seed()
    idx = np.array([[0, 3, 9], [4, 4, 1]], dtype=float)
    layer, _, top, outs = run_forward(EMBED % (10, 6, bias), [idx], mode=mode)
    assert top[0].shape == (2, 3, 6)
    assert layer.blobs[0].shape == (10, 6)
    ref = layer.blobs[0].data[idx.astype(int)]
    if not bias:
        ref = ref + layer.blobs[1].data
    close(outs[0], ref, mode)


@pytest.mark.parametrize("bias", ["", "bias_term: false"])
def test_embed_gradient(mode, bias):
    seed()
    layer = make_layer(EMBED % (10, 3, bias))
    bottom = [blob_of([[2.0, 5.0], [2.0, 9.0], [0.0, 7.0]])]
    # Only the parameters: the indices get no gradient (check_bottom -2, as Caffe's test).
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottom, empty_blobs(1), -2)


def test_embed_errors():
    layer, bottom, top, _ = run_forward(EMBED % (5, 2, ""), [np.array([1.0, 2.0])])
    with pytest.raises(LayerError, match="Can't backpropagate to EmbedLayer input."):
        layer.Backward(top, [True], bottom)
    with pytest.raises(LayerError, match="EmbedLayer input_dim must be positive."):
        run_forward('type: "Embed" embed_param { num_output: 2 }', [np.array([1.0])])
    with pytest.raises(LayerError, match="out of range"):
        run_forward(EMBED % (5, 2, ""), [np.array([5.0])])


# --------------------------------------------------------------------------- BatchReindex
def test_batch_reindex_forward(mode):
    x = rnd((5, 4, 3, 2))
    perm = np.array([4, 0, 4, 0, 1, 2], dtype=float)
    layer, bottom, top, outs = run_forward('type: "BatchReindex"', [x, perm], mode=mode)
    assert top[0].shape == (6, 4, 3, 2)
    close(outs[0], x[perm.astype(int)], mode)
    top[0].diff[...] = rnd(top[0].shape, 9)
    layer.Backward(top, [True, False], bottom)
    ref = np.zeros_like(x)
    np.add.at(ref, perm.astype(int), top[0].diff)
    close(bottom[0].diff, ref, mode)


def test_batch_reindex_errors():
    x = rnd((3, 2))
    with pytest.raises(LayerError, match="Index specified for reindex layer was negative."):
        run_forward('type: "BatchReindex"', [x, np.array([0.0, -1.0])])
    with pytest.raises(LayerError, match="Index specified for reindex layer was greater than "
                                         "batch size."):
        run_forward('type: "BatchReindex"', [x, np.array([0.0, 3.0])])
    layer, bottom, top, _ = run_forward('type: "BatchReindex"', [x, np.array([1.0])])
    with pytest.raises(LayerError, match="Cannot backprop to index."):
        layer.Backward(top, [True, True], bottom)


def test_batch_reindex_gradient(mode):
    layer = make_layer('type: "BatchReindex"')
    bottom = [gaussian_blob((5, 2, 2)), blob_of([4.0, 0.0, 4.0, 0.0, 1.0, 2.0])]
    GradientChecker(1e-4, 1e-2).check_gradient_exhaustive(layer, bottom, empty_blobs(1), 0)


# --------------------------------------------------------------------------- Filter
def _filter_bottoms():
    data = gaussian_blob((4, 3, 2, 2))
    labels = blob_of(np.arange(4.0).reshape(4, 1, 1, 1) + 10)
    selector = blob_of(np.array([0, 1, 1, 0], dtype=float).reshape(4, 1, 1, 1))
    return [data, labels, selector]


def test_filter_forward(mode):
    layer = make_layer('type: "Filter"')
    bottom, top = _filter_bottoms(), empty_blobs(2)
    layer.SetUp(bottom, top)
    assert top[0].shape == (4, 3, 2, 2) and top[1].shape == (4, 1, 1, 1)  # first reshape
    layer.Forward(bottom, top)
    assert top[0].shape == (2, 3, 2, 2) and top[1].shape == (2, 1, 1, 1)
    close(top[0].data, bottom[0].data[[1, 2]], mode)
    close(top[1].data.ravel(), [11.0, 12.0], mode)
    top[0].diff[...] = 1.0
    layer.Backward(top, [True, False, False], bottom)
    ref = np.zeros((4, 3, 2, 2))
    ref[[1, 2]] = 1.0
    close(bottom[0].diff, ref, mode)
    with pytest.raises(LayerError, match="FilterLayer cannot backpropagate to filter index "
                                         "inputs"):
        layer.Backward(top, [True, False, True], bottom)


def test_filter_errors():
    data, labels, _ = _filter_bottoms()
    with pytest.raises(LayerError, match="Selector blob dimensions must be singletons"):
        make_layer('type: "Filter"').SetUp([data, blob_of(np.ones((4, 2)))], empty_blobs(1))
    with pytest.raises(LayerError, match="Each bottom should have the same 0th dimension as the "
                                         "selector blob"):
        make_layer('type: "Filter"').SetUp([data, blob_of(np.ones(3))], empty_blobs(1))
    with pytest.raises(LayerError, match=r"top.size\(\) == bottom.size\(\) - 1"):
        make_layer('type: "Filter"').SetUp([data, labels, blob_of(np.ones(4))], empty_blobs(1))


def test_filter_gradient(mode):
    # Caffe's CheckGradientExhaustive re-reads top->count() on every loop step,
    # so after the first Forward it walks the filtered tops (2 items, not the
    # 4 of the first reshape); the same loop, written out.
    layer = make_layer('type: "Filter"')
    bottom, top = _filter_bottoms(), empty_blobs(2)
    checker = GradientChecker(1e-2, 1e-3)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    for i, t in enumerate(top):
        for j in range(t.count):
            checker.check_single(layer, bottom, top, 0, i, j)


# --------------------------------------------------------------------------- ArgMax
def _topk_ref(v, k):
    """Caffe's order: larger value first; equal values: larger index first."""
    idx = np.empty(v.shape[:-1] + (k,), dtype=np.int64)
    for pos in np.ndindex(v.shape[:-1]):
        pairs = sorted(((float(x), j) for j, x in enumerate(v[pos])), reverse=True)
        idx[pos] = [j for _, j in pairs[:k]]
    return idx


@pytest.mark.parametrize("param", ["", "top_k: 3", "out_max_val: true",
                                   "out_max_val: true top_k: 4"])
def test_argmax_no_axis(mode, param):
    x = rnd((5, 3, 2, 2))
    _, _, top, outs = run_forward('type: "ArgMax" argmax_param { %s }' % param, [x], mode=mode)
    k = 4 if "top_k: 4" in param else 3 if "top_k: 3" in param else 1
    omv = "out_max_val" in param
    assert top[0].shape == (5, 2 if omv else 1, k, 1)
    v = x.reshape(5, -1)
    idx = _topk_ref(v, k)
    o = outs[0].reshape(5, -1)
    close(o[:, :k], idx, mode)
    if omv:
        close(o[:, k:], np.take_along_axis(v, idx, -1), mode)


@pytest.mark.parametrize("axis", [0, 1, 3, -1])
@pytest.mark.parametrize("omv", [False, True])
def test_argmax_axis(mode, axis, omv):
    x = rnd((3, 5, 2, 4))
    k = 2
    _, _, top, outs = run_forward('type: "ArgMax" argmax_param { axis: %d top_k: %d '
                                  'out_max_val: %s }' % (axis, k, "true" if omv else "false"),
                                  [x], mode=mode)
    shape = list(x.shape)
    shape[axis] = k
    assert top[0].shape == tuple(shape)
    v = np.moveaxis(x, axis, -1)
    idx = _topk_ref(v, k)
    ref = np.take_along_axis(v, idx, -1) if omv else idx
    close(outs[0], np.moveaxis(ref, -1, axis), mode)


def test_argmax_ties_prefer_larger_index(mode):
    x = np.array([[1.0, 3.0, 3.0, 0.0, 3.0]])
    _, _, _, outs = run_forward('type: "ArgMax" argmax_param { top_k: 3 }', [x], mode=mode)
    close(outs[0].ravel(), [4, 2, 1], mode)


def test_argmax_small_bottom_gets_3_axes():
    _, _, top, _ = run_forward('type: "ArgMax"', [rnd((4, 6))])
    assert top[0].shape == (4, 1, 1)


def test_argmax_errors():
    with pytest.raises(LayerError, match="top_k must be less than or equal to the dimension of "
                                         "the flattened bottom blob per instance."):
        run_forward('type: "ArgMax" argmax_param { top_k: 7 }', [rnd((2, 3, 2))])
    with pytest.raises(LayerError, match="top_k must be less than or equal to the dimension of "
                                         "the axis."):
        run_forward('type: "ArgMax" argmax_param { top_k: 4 axis: 1 }', [rnd((2, 3, 2))])
    with pytest.raises(LayerError, match="top k must not be less than 1."):
        run_forward('type: "ArgMax" argmax_param { top_k: 0 }', [rnd((2, 3, 2))])


# --------------------------------------------------------------------------- Silence / Parameter
def test_silence_zeros_bottom_diffs(mode):
    layer = make_layer('type: "Silence"')
    bottom = [blob_of(rnd((2, 3))), blob_of(rnd((4,)))]
    for b in bottom:
        b.diff[...] = 5.0
    layer.SetUp(bottom, [])
    layer.Forward(bottom, [])
    layer.Backward([], [True, False], bottom)
    close(bottom[0].diff, np.zeros((2, 3)), mode)
    close(bottom[1].diff, np.full(4, 5.0), mode)


def test_parameter_layer(mode):
    layer = make_layer('type: "Parameter" parameter_param { shape { dim: 3 dim: 4 } }')
    top = empty_blobs(1)
    layer.SetUp([], top)
    assert len(layer.blobs) == 1 and layer.blobs[0].shape == (3, 4)
    assert top[0].shape == (3, 4)
    layer.blobs[0].data[...] = rnd((3, 4))
    layer.Forward([], top)
    close(top[0].data, layer.blobs[0].data, mode)
    top[0].diff[...] = 2.0
    close(layer.blobs[0].diff, np.full((3, 4), 2.0), mode)


# --------------------------------------------------------------------------- Softmax
def _softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [1, 0, 2, -1])
def test_softmax_forward(mode, axis):
    x = rnd((2, 10, 2, 3)) * 3
    text = 'type: "Softmax"' + ("" if axis == 1 else " softmax_param { axis: %d }" % axis)
    _, _, top, outs = run_forward(text, [x], mode=mode)
    close(outs[0], _softmax_ref(x, axis), mode)
    close(outs[0].sum(axis=axis), np.ones_like(x.sum(axis=axis)), mode)


def test_softmax_large_inputs_are_stable():
    x = np.array([[1000.0, 1001.0, 999.0]])
    _, _, _, outs = run_forward('type: "Softmax"', [x])
    close(outs[0], _softmax_ref(x - 1000, 1))


@pytest.mark.parametrize("axis", [1, 2])
def test_softmax_gradient(mode, axis):
    layer = make_layer('type: "Softmax" softmax_param { axis: %d }' % axis)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(
        layer, [gaussian_blob((2, 4, 2, 2))], empty_blobs(1))


def test_softmax_functions_float32():
    x = rnd((3, 4, 5)).astype(np.float32)
    p = softmax_forward(np, x, 1)
    assert p.dtype == np.float32 and p.shape == x.shape
    np.testing.assert_allclose(p, _softmax_ref(x.astype(np.float64), 1), rtol=1e-6)
    d = rnd((3, 4, 5), 2).astype(np.float32)
    g = softmax_backward(np, p, d, 1)
    ref = (d - (d * p).sum(1, keepdims=True)) * p
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-7)


def test_blob_counts():
    with pytest.raises(LayerError, match="Eltwise Layer takes at least 2 bottom blob"):
        make_layer('type: "Eltwise"').SetUp([blob_of(rnd(3))], empty_blobs(1))
    with pytest.raises(LayerError, match="Silence Layer produces 0 top blob"):
        make_layer('type: "Silence"').SetUp([blob_of(rnd(3))], empty_blobs(1))
    with pytest.raises((LayerError, ShapeError)):
        make_layer('type: "Softmax" softmax_param { axis: 3 }').SetUp([blob_of(rnd((2, 3)))],
                                                                      empty_blobs(1))


def test_float32_layers_keep_dtype():
    layer = make_layer('type: "Softmax"', dtype=np.float32)
    b = Blob((2, 3), dtype=np.float32)
    b.data[...] = rnd((2, 3))
    top = [Blob(dtype=np.float32)]
    layer.SetUp([b], top)
    layer.Forward([b], top)
    assert top[0].data.dtype == np.float32
    red = make_layer('type: "Reduction" reduction_param { operation: MEAN coeff: 3 }',
                     dtype=np.float32)
    top = [Blob(dtype=np.float32)]
    red.SetUp([b], top)
    red.Forward([b], top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(float(top[0].data), 0.5 * b.data.astype(np.float64).sum(),
                               rtol=1e-6)

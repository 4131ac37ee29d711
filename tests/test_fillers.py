"""Caffe's fillers: each distribution's defining properties."""
import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import LayerError
from engine.core.fillers import fill
from engine.proto import caffe_pb2


def filled(shape, **kw):
    backend.set_random_seed(1701)
    b = Blob(shape)
    fill(b, caffe_pb2.FillerParameter(**kw))
    return b.data


def test_constant_uniform_gaussian():
    assert np.all(filled((2, 3), type="constant", value=2.5) == 2.5)
    u = filled((200, 50), type="uniform", min=-2, max=3)
    assert u.min() >= -2 and u.max() <= 3 and abs(u.mean() - 0.5) < 0.05
    g = filled((200, 50), type="gaussian", mean=1, std=2)
    assert abs(g.mean() - 1) < 0.05 and abs(g.std() - 2) < 0.05


def test_sparse_gaussian_keeps_about_sparse_outputs_per_input():
    g = filled((100, 200), type="gaussian", std=1, sparse=10)
    nonzero = (g != 0).sum(axis=0).mean()
    assert 9 < nonzero < 11       # about `sparse` non-zero output weights per input


def test_positive_unitball_rows_sum_to_one():
    p = filled((10, 3, 2, 2), type="positive_unitball")
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.reshape(10, -1).sum(axis=1), 1, rtol=1e-5)


@pytest.mark.parametrize("norm,n", [("FAN_IN", 3 * 4 * 5), ("FAN_OUT", 50 * 4 * 5), ("AVERAGE", (60 + 1000) / 2)])
def test_xavier_and_msra_scales(norm, n):
    vn = caffe_pb2.FillerParameter.VarianceNorm.Value(norm)
    x = filled((50, 3, 4, 5), type="xavier", variance_norm=vn)
    scale = np.sqrt(3.0 / n)
    assert np.abs(x).max() <= scale + 1e-6 and np.abs(x).max() > 0.9 * scale
    m = filled((50, 3, 4, 5), type="msra", variance_norm=vn)
    assert abs(m.std() - np.sqrt(2.0 / n)) < 0.1 * np.sqrt(2.0 / n)


def test_bilinear_is_the_upsampling_kernel():
    k = filled((1, 1, 4, 4), type="bilinear")[0, 0]
    # factor 2 upsampling kernel: outer product of [0.25, 0.75, 0.75, 0.25]
    v = np.array([0.25, 0.75, 0.75, 0.25])
    np.testing.assert_allclose(k, np.outer(v, v), rtol=1e-6)
    with pytest.raises(LayerError, match="Filter must be square"):
        filled((1, 1, 3, 4), type="bilinear")


def test_unknown_filler_and_sparse_misuse():
    with pytest.raises(LayerError, match="Unknown filler name: nope"):
        filled((2, 2), type="nope")
    with pytest.raises(LayerError, match="Sparsity not supported"):
        filled((2, 2), type="xavier", sparse=1)


def test_bilinear_odd_kernel_is_symmetric_as_in_caffe_master():
    # master's c = (width - 1) / (2f): for width 3 (f = 2) the taps are [0.5, 1, 0.5].
    k = filled((2, 1, 3, 3), type="bilinear")[1, 0]
    v = np.array([0.5, 1.0, 0.5])
    np.testing.assert_array_equal(k, np.outer(v, v).astype(np.float32))


def test_filler_draws_in_the_blobs_dtype():
    from engine.core import rng
    for dtype in (np.float32, np.float64):
        backend.set_random_seed(8)
        b = Blob((4, 5), dtype=dtype)
        fill(b, caffe_pb2.FillerParameter(type="uniform", min=-1, max=2))
        s = rng.Stream(8)
        want = rng.uniform(s, 20, dtype(-1), rng.next_up(2, dtype), dtype)
        np.testing.assert_array_equal(b.data.ravel(), want)
        assert b.data.dtype == dtype


def test_constant_filler_rejects_sparse_as_caffe():
    with pytest.raises(LayerError, match="Sparsity not supported"):
        filled((2, 2), type="constant", sparse=1)

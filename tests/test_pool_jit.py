"""The compiled pooling loops (engine.core.kernels.jit, Numba) give the NumPy twins'
results: max (value and first argmax, NaN, padding, ceil-rounded windows), average
(Caffe's clipped divisor) and both backwards; the NumPy twins stay the fallback."""
import numpy as np
import pytest

from engine.core.kernels import jit as _jit
from engine.core.kernels import pooling as P

pytestmark = pytest.mark.skipif(not _jit.AVAILABLE, reason="numba is not installed")

GEOMS = [  # N, C, H, W, kh, kw, sh, sw, ph, pw
    (2, 3, 7, 9, 3, 3, 2, 2, 0, 0),
    (2, 2, 8, 8, 2, 2, 2, 2, 0, 0),
    (1, 4, 6, 5, 3, 2, 1, 1, 1, 0),
    (3, 2, 13, 13, 3, 3, 2, 2, 1, 1),
    (2, 2, 5, 5, 5, 5, 1, 1, 0, 0),      # global
]


def _geom(N, C, H, W, kh, kw, sh, sw, ph, pw):
    PH = -(-(H + 2 * ph - kh) // sh) + 1          # Caffe's ceil rounding
    PW = -(-(W + 2 * pw - kw) // sw) + 1
    if ph and (PH - 1) * sh >= H + ph:
        PH -= 1
    if pw and (PW - 1) * sw >= W + pw:
        PW -= 1
    return P.PoolGeom(N, C, H, W, kh, kw, sh, sw, ph, pw, PH, PW)


def _both(fn):
    _jit.ENABLED = False
    try:
        ref = fn()
    finally:
        _jit.ENABLED = True
    return ref, fn()


@pytest.mark.parametrize("geom", GEOMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_compiled_equals_numpy(geom, dtype):
    g = _geom(*geom)
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, size=(g.N, g.C, g.H, g.W)).astype(dtype)   # ties: the first argmax wins
    x[0, 0, 1, 1] = np.nan
    dtop = rng.standard_normal((g.N, g.C, g.PH, g.PW)).astype(dtype)

    def run():
        top = np.empty((g.N, g.C, g.PH, g.PW), dtype)
        mask = np.empty(top.shape, np.int32)
        P.max_forward(x, g, top, mask)
        dx = np.full(x.shape, 7, dtype)
        P.max_backward(dtop, mask, g, dx)
        return top, mask, dx

    (t0, m0, d0), (t1, m1, d1) = _both(run)
    np.testing.assert_array_equal(m0, m1)
    np.testing.assert_array_equal(t0, t1)
    np.testing.assert_allclose(d1, d0, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("geom", GEOMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ave_pool_compiled_equals_numpy(geom, dtype):
    g = _geom(*geom)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((g.N, g.C, g.H, g.W)).astype(dtype)
    dtop = rng.standard_normal((g.N, g.C, g.PH, g.PW)).astype(dtype)

    def run():
        top = np.empty((g.N, g.C, g.PH, g.PW), dtype)
        P.ave_forward(x, g, top)
        dx = np.full(x.shape, 7, dtype)
        P.ave_backward(dtop, g, dx)
        return top, dx

    (t0, d0), (t1, d1) = _both(run)
    np.testing.assert_array_equal(t0, t1)          # same additions in the same order
    np.testing.assert_array_equal(d0, d1)


def test_compiled_path_is_taken_and_skipped_for_views():
    assert _jit.use(P._max_fwd_jit, np.zeros(4, np.float32))
    assert not _jit.use(P._max_fwd_jit, np.zeros((4, 4), np.float32)[:, ::2])
    _jit.ENABLED = False
    try:
        assert not _jit.use(P._max_fwd_jit, np.zeros(4, np.float32))
    finally:
        _jit.ENABLED = True

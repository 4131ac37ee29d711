"""engine.core.kernels.blas.gemm_acc: c += a @ b on both of its paths (SciPy's gemm with
beta = 1 for big outputs and short inner dimensions, else NumPy into a buffer)."""
import numpy as np
import pytest

from engine.core.kernels import blas


@pytest.mark.parametrize("beta1", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_acc_adds_the_product(monkeypatch, beta1, dtype, ta, tb):
    if beta1:
        if blas._scipy_gemm(np.dtype(dtype)) is None:
            pytest.skip("SciPy's BLAS is not importable")
        monkeypatch.setattr(blas, "BETA1_MIN_SIZE", 1)
        monkeypatch.setattr(blas, "BETA1_MAX_INNER", 1 << 30)
    rng = np.random.default_rng(0)
    m, k, n = 7, 5, 9
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    a = a.T if ta else a
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    b = b.T if tb else b
    c = rng.standard_normal((m, n)).astype(dtype)
    want = c + a @ b
    ptr = c.ctypes.data
    out = blas.gemm_acc(a, b, c)
    assert out is c and c.ctypes.data == ptr          # in place
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_gemm_acc_strided_operand_and_work_buffer():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 8)).astype(np.float32)[:, ::2]        # neither C nor F contiguous
    b = rng.standard_normal((4, 3)).astype(np.float32)
    c = np.zeros((6, 3), np.float32)
    work = np.empty((6, 3), np.float32)
    blas.gemm_acc(a, b, c, lambda shape, dtype: work)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)

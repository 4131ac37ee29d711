"""GEMM that accumulates into its output, as Caffe's ``caffe_cpu_gemm(..., beta=1, C)``.

``gemm_acc(a, b, c)`` does ``c += a @ b`` for 2-D arrays.  The product goes to a
reused work buffer and is added -- except on the host for a big ``c`` and a
short inner dimension (an InnerProduct's weight gradient at a small batch: the
product is as big as the weights and cheap to compute, so making it and adding
it cost three passes over the weights).  There, when SciPy's BLAS wrappers are
importable (SciPy comes with scikit-learn, a dependency of the project), it is
added inside ``?gemm`` with ``beta = 1``: one pass, 2.5x faster for CaffeNet's
fc6.  Only there: SciPy's BLAS is a second OpenBLAS with its own threads, and
switching between two thread pools costs when several threads are used.
Results agree with the two-step form to rounding (the additions happen in a
different order, as in Caffe's own gemm).  SciPy is imported the first time a
product takes that path (importing it costs a process 0.2-0.3 s).

``matmul(a, b, out)`` is ``xp.matmul`` for the layers' products: on the host, OpenBLAS runs
it on the threads its size pays for (``threads.blas_threads``: one for a small product, so
that OpenBLAS's idle workers are never woken to spin), as ``gemm_acc`` does.
"""
import threading

import numpy as np

from engine.core.kernels.threads import blas_threads

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_GEMM = None          # {dtype: SciPy's ?gemm} once loaded ({} without SciPy)
_GEMM_LOCK = threading.Lock()


def _scipy_gemm(dtype):
    """SciPy's ``?gemm`` for ``dtype`` (float32/64), or None without SciPy."""
    global _GEMM
    if _GEMM is None:
        with _GEMM_LOCK:
            if _GEMM is None:
                try:  # optional: SciPy's BLAS (Fortran order; views passed without copies below)
                    from scipy.linalg import blas as _blas
                    _GEMM = {_F32: _blas.sgemm, _F64: _blas.dgemm}
                except Exception:  # pragma: no cover - SciPy missing or broken
                    _GEMM = {}
    return _GEMM.get(dtype)


# gemm with beta = 1 (SciPy) when c has at least this many elements and the inner
# dimension is at most this long.
BETA1_MIN_SIZE = 1 << 20
BETA1_MAX_INNER = 32


def _fortran_op(m):
    """(array, trans) with op(array) == m.T and array Fortran-contiguous (no copy when
    ``m`` is C- or F-contiguous)."""
    if m.flags.c_contiguous:
        return m.T, 0
    if m.flags.f_contiguous:
        return m, 1
    return np.ascontiguousarray(m).T, 0


def gemm_acc(a, b, c, work=None):
    """c += a @ b (2-D).  ``work(shape, dtype)`` gives a scratch array for the
    fallback path (else a temporary is made)."""
    if isinstance(c, np.ndarray) and (c.dtype == _F32 or c.dtype == _F64) and a.dtype == c.dtype \
            and b.dtype == c.dtype and c.flags.c_contiguous and c.size >= BETA1_MIN_SIZE \
            and 0 < a.shape[1] <= BETA1_MAX_INNER and _scipy_gemm(c.dtype) is not None:
        # C = A B  <=>  C^T = B^T A^T in Fortran order: C^T is C viewed as F-contiguous.
        b1, tb = _fortran_op(b)
        a1, ta = _fortran_op(a)
        ct = c.T
        with blas_threads(c.size * a.shape[1], "scipy"):
            r = _scipy_gemm(c.dtype)(1.0, b1, a1, beta=1.0, c=ct, trans_a=tb, trans_b=ta, overwrite_c=1)
        if r is not ct and not np.shares_memory(r, c):   # the wrapper copied: write back
            c[...] = r.T
        return c
    shape = (a.shape[0], b.shape[1])
    out = work(shape, c.dtype) if work is not None else None
    out = matmul(a, b, out)
    c += out
    return c


def matmul(a, b, out=None):
    """``a @ b`` (into ``out`` when given): NumPy's matmul on the OpenBLAS threads the size
    of one of its products pays for, or CuPy's."""
    if isinstance(a, np.ndarray):
        macs = a.shape[-2] * a.shape[-1] * b.shape[-1] if a.ndim >= 2 and b.ndim >= 2 else a.size
        with blas_threads(macs):
            return np.matmul(a, b, out=out)
    return __import__("cupy").matmul(a, b, out=out)

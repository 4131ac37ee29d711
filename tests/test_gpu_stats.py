"""The GPU statistics kernel (engine.core.kernels.stats: one reduction per blob) against
the array-operation reference (debug._device_summary) and the host statistics.
The comparisons are marked gpu (they run where CuPy sees a device); tests/test_cuda_compile.py
compiles the kernels everywhere."""
import math

import numpy as np
import pytest

from engine.core.kernels import cuda_sources
from engine.instruments import debug


def _arrays():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(100_003).astype(np.float32)
    a[::97] = 0
    b = a.copy()
    b[5], b[77] = np.inf, -np.inf
    c = b.copy()
    c[11] = np.nan
    yield "finite", a
    yield "inf", b
    yield "nan", c
    yield "constant", np.full(1000, 2.5, np.float64)
    yield "all nan", np.full(300, np.nan, np.float32)
    yield "tiny", np.array([1.0, -2.0], np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("name,host", list(_arrays()))
def test_kernel_summary_matches_the_reference(name, host):
    import cupy

    from engine.core.kernels import stats
    got = cupy.asnumpy(stats.summary(cupy.asarray(host), 32))
    ref = debug._device_summary(host, np, 32)
    assert got.shape == ref.shape
    for k, (g, r) in enumerate(zip(got, ref)):
        if math.isnan(r):
            assert math.isnan(g), (name, k)
        else:
            assert g == pytest.approx(r, rel=1e-6, abs=1e-9), (name, k, g, r)


@pytest.mark.gpu
def test_array_stats_on_the_gpu_equal_the_hosts():
    import cupy
    host = next(a for n, a in _arrays() if n == "inf")
    g = debug.array_stats(cupy.asarray(host))
    h = debug.array_stats(host)
    assert (g.nan, g.inf, g.count) == (h.nan, h.inf, h.count)
    assert g.hist == h.hist
    for f in ("min", "max", "mean", "std", "l2", "frac_zero", "hist_lo", "hist_hi"):
        assert getattr(g, f) == pytest.approx(getattr(h, f), rel=1e-5, nan_ok=True), f


def test_the_kernels_are_registered():
    assert {"blob_summary_partial", "blob_summary_final", "blob_histogram"} <= set(cuda_sources())

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


def test_the_gpu_histogram_sample_is_the_hosts():
    # The GPU path bins the values at debug.sample_indices; the host path bins fast_stats'
    # runs: binned by the same rule, the two give the same counts (runs, not every value)
    from engine.instruments import fast_stats
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1_000_003).astype(np.float32)
    idx = debug.sample_indices(x.size, 1 << 15)
    assert idx.dtype == np.int64 and idx.size == fast_stats.sample_size(x.size, 1 << 15) < x.size
    assert np.all(np.diff(idx) > 0) and idx[-1] < x.size
    lo, hi, bins = float(x.min()), float(x.max()), 32
    counts, binned = fast_stats.histogram(x, lo, hi, bins, 1 << 15)
    b = np.clip(((x[idx].astype(np.float64) - lo) * (bins / (hi - lo))).astype(np.int64), 0, bins - 1)
    assert binned == idx.size and np.array_equal(np.bincount(b, minlength=bins), counts)
    # a sample as big as the array is the whole array
    assert np.array_equal(debug.sample_indices(1000, 1000), np.arange(1000))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["finite", "inf", "nan"])
def test_sampled_histograms_on_the_gpu_equal_the_hosts(name):
    # the Recorder's histograms of big blobs bin a sample, on the GPU the host's sample
    import cupy
    host = np.tile(dict(_arrays())[name], 5)
    g = debug.array_stats(cupy.asarray(host), 32, hist_sample=1 << 12)
    h = debug.array_stats(host, 32, hist_sample=1 << 12)
    assert 0 < g.hist_sample == h.hist_sample < host.size
    assert g.hist == h.hist and sum(g.hist) <= g.hist_sample
    assert (g.nan, g.inf, g.count) == (h.nan, h.inf, h.count)
    for f in ("min", "max", "mean", "l2", "hist_lo", "hist_hi"):
        assert getattr(g, f) == pytest.approx(getattr(h, f), rel=1e-5, nan_ok=True), f


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["finite", "inf", "nan", "constant", "tiny"])
def test_health_stats_on_the_gpu_equal_the_hosts(name):
    import cupy
    host = dict(_arrays())[name]
    g = debug.health_stats(cupy.asarray(host))
    h = debug.health_stats(host)
    assert (g.nan, g.inf, g.count) == (h.nan, h.inf, h.count)
    assert g.asum_mean == pytest.approx(h.asum_mean, rel=1e-6, nan_ok=True)

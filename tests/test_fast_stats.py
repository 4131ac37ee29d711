"""engine.instruments.fast_stats (one compiled pass per blob) and the Recorder's reuse of
statistics: the same numbers as the NumPy path, Caffe's |x| sum bit for bit, statistics
recomputed exactly when a blob changed."""
import math

import numpy as np
import pytest

from engine.core.blob import caffe_asum
from engine.instruments import debug, fast_stats
from engine.instruments.debug import Recorder, array_stats, health_stats
from tests.nets import lenet_with_inputs

pytestmark = pytest.mark.skipif(not fast_stats.AVAILABLE, reason="numba is not installed")


def _numpy_path(monkeypatch):
    monkeypatch.setattr(fast_stats, "AVAILABLE", False)


@pytest.mark.parametrize("n", [64, 65, 79, 1000, 4099, 65536 * 3 + 5, 1_000_003])
def test_asum_is_caffe_asum_bit_for_bit(n):
    x = (np.random.default_rng(n).standard_normal(n) * 10 ** np.random.default_rng(1).uniform(-3, 3, n)
         ).astype(np.float32)
    assert fast_stats.usable(x)
    assert fast_stats.asum(x) == caffe_asum(x)
    assert fast_stats.summary(x)[0] == caffe_asum(x)
    assert health_stats(x).asum_mean == float(np.float32(caffe_asum(x)) / np.float32(n))


@pytest.mark.parametrize("n", [0, 15, 16, 17, 4099, 1_000_003])
def test_vector_lanes_are_the_scalar_loop_lanes(n):
    """The health level's |x| lanes come from one <16 x float> accumulator: each lane is the
    same sequential float32 sum as the scalar loop's, bit for bit (Inf and NaN included)."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 30, n)).astype(np.float32)
    if n > 100:
        x[7], x[40] = np.inf, np.nan
    got, want = np.zeros(16, np.float32), np.zeros(16, np.float32)
    assert fast_stats._lanes is not fast_stats._lanes_loop
    fast_stats._lanes(x, got)
    fast_stats._lanes_loop(x, want)
    np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("n", [64, 100, 100003])
def test_summary_matches_the_numpy_path(n, monkeypatch):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3 + 0.5).astype(np.float32)
    x[::11] = 0
    fast = fast_stats.summary(x)
    counts, binned = fast_stats.histogram(x, fast[8], fast[9], 32)
    _numpy_path(monkeypatch)
    ref, ref_counts = debug._host_summary(x, 32)
    assert fast[0] == ref[0]                                  # Caffe's number: identical
    assert fast[1:3] == ref[1:3] and fast[5:] == ref[5:]      # min, max, zeros, NaN/Inf, range
    assert fast[3] == pytest.approx(ref[3], rel=1e-12, abs=1e-9)
    assert fast[4] == pytest.approx(ref[4], rel=1e-12)
    assert binned == n and counts.sum() == n
    assert np.abs(counts - ref_counts).sum() <= 2 + 1e-4 * n  # values on a bin edge may move


def test_nonfinite_values():
    x = np.tile(np.array([1, np.nan, 2, -np.inf, 0, 5, np.inf, -3], np.float32), 40)
    s = fast_stats.summary(x)
    assert math.isnan(s[0]) and math.isnan(s[1]) and math.isnan(s[2])
    assert s[5:] == [40, 40, 80, -3.0, 5.0]        # zeros, NaN, Inf, finite range
    st = array_stats(x)
    assert (st.nan, st.inf, st.hist_lo, st.hist_hi, sum(st.hist)) == (40, 80, -3.0, 5.0, 200)
    y = np.tile(np.array([1, np.inf, 2, -1], np.float32), 20)        # Inf without NaN
    s = fast_stats.summary(y)
    assert (s[1], s[2], s[6], s[7], s[8], s[9]) == (-1.0, math.inf, 0, 20, -1.0, 2.0)
    z = np.full(100, np.nan, np.float32)
    s = fast_stats.summary(z)
    assert s[6] == 100 and (s[8], s[9]) == (math.inf, -math.inf)
    st = array_stats(z)
    assert sum(st.hist) == 0 and (st.hist_lo, st.hist_hi) == (0.0, 0.0)


def test_histogram_sample_is_spread_and_marked():
    n = 1 << 20
    x = np.repeat(np.arange(16, dtype=np.float32), n // 16)      # 16 equal blocks along the array
    full = array_stats(x)
    assert full.hist_sample == 0 and sum(full.hist) == n
    st = array_stats(x, hist_sample=4096)
    assert 0 < st.hist_sample <= 4096 and sum(st.hist) == st.hist_sample
    nonzero = [c for c in st.hist if c]
    assert len(nonzero) == 16                                     # every block is in the sample
    assert max(nonzero) < 2 * min(nonzero)
    for k in ("asum_mean", "min", "max", "mean", "std", "l2", "frac_zero"):
        assert getattr(st, k) == getattr(full, k)                 # only the histogram is sampled
    d = st.to_dict()
    assert d["hist_sample"] == st.hist_sample and debug.BlobStats.from_dict(d) == st


_lenet = lenet_with_inputs


def _count_stats(monkeypatch):
    calls = []
    real = debug.array_stats

    def counting(a, *args, **kw):
        calls.append(a.size)
        return real(a, *args, **kw)
    monkeypatch.setattr(debug, "array_stats", counting)
    real_flat = debug._flat_stats      # the Recorder's own path for flat float32 host arrays

    def counting_flat(x, shape, full, *args):
        if full:
            calls.append(x.size)
        return real_flat(x, shape, full, *args)
    monkeypatch.setattr(debug, "_flat_stats", counting_flat)
    return calls


def test_param_stats_reused_until_the_params_change(monkeypatch):
    net = _lenet()
    rec = Recorder(net)
    net.forward()
    net.backward()
    w = net.params["ip1"][0]
    calls = _count_stats(monkeypatch)
    net.forward()
    # The forward step summarised only what it wrote: tops (no param data).
    assert w.count not in calls
    calls.clear()
    net.backward()
    # Backward: diffs only (data of params and activations kept from the forward step).
    assert calls.count(w.count) == 1
    last = rec.steps[-1].layer("ip1").blob("param", 0)
    np.testing.assert_allclose(last.data.l2, np.linalg.norm(w.data.astype(np.float64)), rtol=1e-9)
    # Written through the API: the version moves; recomputed.
    w.data[...] *= 0.5
    calls.clear()
    net.forward()
    assert calls.count(w.count) == 1
    st = rec.steps[-1].layer("ip1").blob("param", 0).data
    np.testing.assert_allclose(st.l2, np.linalg.norm(w.data.astype(np.float64)), rtol=1e-9)
    # Written through an array held from an earlier access: the fingerprint tells.
    held = w.data
    net.forward()
    held *= 2.0
    calls.clear()
    net.forward()
    assert calls.count(w.count) == 1
    st = rec.steps[-1].layer("ip1").blob("param", 0).data
    np.testing.assert_allclose(st.l2, np.linalg.norm(w.data.astype(np.float64)), rtol=1e-9)


def test_input_rewritten_through_a_held_array_is_seen():
    net = _lenet()
    rec = Recorder(net)
    data = net.blobs["data"].data
    net.forward()
    first = rec.steps[-1].layer("conv1").blob("bottom", 0).data
    data[...] = 0.0
    net.forward()
    again = rec.steps[-1].layer("conv1").blob("bottom", 0).data
    assert first.frac_zero < 1 and again.frac_zero == 1.0


def test_focus_keeps_full_statistics_for_the_layers_on_screen():
    net = _lenet()
    rec = Recorder(net, focus={"conv1"})
    net.forward()
    step = rec.steps[-1]
    assert not step.layer("conv1").blob("top", 0).data.partial
    assert step.layer("ip1").blob("top", 0).data.partial          # health level elsewhere
    rec.focus = None
    net.forward()
    assert not rec.steps[-1].layer("ip1").blob("top", 0).data.partial


def test_records_equal_with_and_without_numba(monkeypatch):
    """Caffe's numbers identical, the rest to rounding, with and without the compiled path."""
    def run():
        net = _lenet()
        rec = Recorder(net, hist_sample=0)
        net.forward()
        net.backward()
        return [s.to_dict() for s in rec.steps]
    fast = run()
    _numpy_path(monkeypatch)
    slow = run()
    for sf, ss in zip(fast, slow):
        for lf, ls in zip(sf["layers"], ss["layers"]):
            for bf, bs in zip(lf["blobs"], ls["blobs"]):
                for which in ("data", "diff"):
                    a, b = bf[which], bs[which]
                    assert (a is None) == (b is None)
                    if a is None:
                        continue
                    assert a["asum_mean"] == b["asum_mean"]
                    for k in ("min", "max", "nan", "inf", "frac_zero"):
                        assert a[k] == b[k]
                    for k in ("mean", "std", "l2"):
                        assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("n", [1, 5, 16, 33, 1000, 131075])
def test_vector_summary_is_the_scalar_loop_bit_for_bit(n):
    """The full level's one pass runs its sixteen lanes as vectors: every lane (|x| in
    float32, sum and sum of squares in float64, min, max, zeros) the scalar loop's bits."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 30, n)).astype(np.float32)
    x[::7] = 0
    for special in (False, True):
        if special and n > 40:
            x[3], x[20], x[33] = np.inf, np.nan, -np.inf
        got_lanes, want_lanes = np.zeros(16, np.float32), np.zeros(16, np.float32)
        assert fast_stats._summary is not fast_stats._summary_loop
        got = fast_stats._summary(x, got_lanes)
        want = fast_stats._summary_loop(x, want_lanes)
        np.testing.assert_array_equal(np.array(got, np.float64), np.array(want, np.float64))
        np.testing.assert_array_equal(got_lanes, want_lanes)


@pytest.mark.parametrize("n", [1, 7, 15, 63])
def test_small_arrays_take_the_compiled_path_with_caffes_number(n, monkeypatch):
    """Arrays below the sixteen-lane size (BatchNorm's and Scale's params, biases) are
    summarised compiled too; Caffe's |x| sum stays the plain float32 one."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[::3] = 0
    assert fast_stats.usable(x, small=True) and not fast_stats.usable(x)
    fast = array_stats(x)
    assert fast.asum_mean == float(np.float32(caffe_asum(x)) / np.float32(n))
    _numpy_path(monkeypatch)
    ref = array_stats(x)
    assert fast.asum_mean == ref.asum_mean
    for k in ("min", "max", "nan", "inf", "frac_zero", "hist_lo", "hist_hi"):
        assert getattr(fast, k) == getattr(ref, k)
    for k in ("mean", "std", "l2"):
        assert getattr(fast, k) == pytest.approx(getattr(ref, k), rel=1e-9, abs=1e-12)
    assert sum(fast.hist) == sum(ref.hist) == n


def test_histogram_partial_counts_equal_the_checked_loop():
    """The unchecked histogram (four partial counts) bins every value as the checked one."""
    for n in (1000, 1 << 17, 100003):
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        for sample in (0, 1 << 15):
            fast, k1 = fast_stats.histogram(x, -2.5, 3.0, 32, sample, finite=True)
            checked, k2 = fast_stats.histogram(x, -2.5, 3.0, 32, sample, finite=False)
            np.testing.assert_array_equal(fast, checked)
            assert k1 == k2 == fast.sum()
            assert fast_stats.sample_starts(n, sample or n)[0] is fast_stats.sample_starts(n, sample or n)[0] \
                or sample == 0 or sample >= n

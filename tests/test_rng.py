"""Caffe's CPU random numbers (engine.core.rng) against a scalar reference written
from boost's algorithms (tests/rng_reference.py), and values pinned for known seeds.

Tests taking the ``path`` fixture run twice: on the compiled loops (Numba,
engine.core._rng_kernels) and on the NumPy code the engine keeps for when Numba
is missing; both must give boost's bits and consume boost's count of outputs."""
import numpy as np
import pytest

from engine.core import _ziggurat, rng
from tests import rng_reference as ref

F32, F64 = np.float32, np.float64
SEEDS = (0, 1, 42, 1701, 2 ** 31 + 5)


@pytest.fixture(params=ref.PATHS)
def path(request, monkeypatch):
    return ref.use_path(request.param, monkeypatch)


def bits(a, dtype):
    """Bit patterns, so that -0.0 and 0.0 (or any rounding) tell apart."""
    return np.asarray(a, dtype).view(np.uint32 if dtype is F32 else np.uint64)


def scripted(values, seed):
    """A Stream that yields ``values`` first, then mt19937(seed)'s outputs."""
    s = rng.Stream(seed)
    s._buf = np.array(values, np.uint32)
    return s


# --------------------------------------------------------------- mt19937
@pytest.mark.parametrize("seed", SEEDS)
def test_raw_outputs_equal_boosts_mt19937(seed, path):
    eng = ref.MT19937(seed)
    want = [eng() for _ in range(1500)]       # past the first twist of 624 words
    s = rng.Stream(seed)
    got = s.take(1000).tolist() + [s() for _ in range(500)]
    assert got == want
    assert s.position == 1500


def test_the_standards_10000th_output_of_the_default_seed(path):
    # [rand.predef]: mt19937's 10000th output from the default seed 5489 is 4123659995.
    s = rng.Stream(5489)
    s.skip(len(s.peek(9999)))
    assert s() == 4123659995


def test_init_genrand_is_numpys_legacy_seeding():
    for seed in SEEDS:
        np.testing.assert_array_equal(rng.init_genrand(seed), np.random.RandomState(seed).get_state()[1])


def test_unseeded_streams_draw_fresh_entropy():
    assert len({rng.Stream().seed for _ in range(4)}) > 1


def test_pinned_raw_values(path):
    rng.set_random_seed(1)
    assert [rng.caffe_rng_rand() for _ in range(3)] == [1791095845, 4282876139, 3093770124]


# --------------------------------------------------------------- uniform_real
@pytest.mark.parametrize("dtype,R,up", [(F32, ref.f32, ref.next_up_f32), (F64, ref.f64, ref.next_up_f64)])
@pytest.mark.parametrize("a,b", [(0, 1), (-3, 5), (-0.25, 0.25), (2, 2)])
def test_uniform_matches_the_reference(dtype, R, up, a, b, path):
    for seed in (1, 42):
        eng = ref.Counted(ref.MT19937(seed))
        hi = up(R(b))
        want = [ref.uniform_real(eng, R(a), hi, R) for _ in range(700)]
        s = rng.Stream(seed)
        got = rng.uniform(s, 700, dtype(a), rng.next_up(b, dtype), dtype)
        np.testing.assert_array_equal(bits(got, dtype), bits(want, dtype))
        assert s.position == eng.count


def test_uniform_draws_again_at_the_top_of_the_range(path):
    # 0xFFFFFFFF rounds to 2**32 in float: the result reaches b' and boost draws again.
    values = [0xFFFFFFFF, 0xFFFFFFC0, 12345, 0xFFFFFF80, 7]
    eng = ref.Counted(ref.Scripted(values, 3))
    hi = ref.next_up_f32(1.0)
    want = [ref.uniform_real(eng, 0.0, hi, ref.f32) for _ in range(6)]
    s = scripted(values, 3)
    got = rng.uniform(s, 6, F32(0), rng.next_up(1, F32), F32)
    np.testing.assert_array_equal(bits(got, F32), bits(want, F32))
    assert s.position == eng.count > 6


def test_pinned_uniform_values(path):
    # uniform_real<float>(0, nextafter(1)) from seed 1: float(u) / 2**32 * (1 + 2**-23).
    rng.set_random_seed(1)
    got = rng.caffe_rng_uniform(3, 0, 1, F32)
    assert [v.hex() for v in got.astype(F64)] == ["0x1.ab07d40000000p-2", "0x1.fe8f060000000p-1",
                                                 "0x1.70ce620000000p-1"]


def test_uniform_range_wider_than_the_type_is_halved(path):
    big = F32(3e38)
    s = rng.Stream(9)
    got = rng.uniform(s, 500, -big, rng.next_up(big, F32), F32)
    eng = ref.MT19937(9)
    half_lo, half_hi = ref.f32(-big / 2), ref.f32(ref.next_up_f32(float(big)) / 2)
    want = [ref.f32(2 * ref.uniform_real(eng, half_lo, half_hi, ref.f32)) for _ in range(500)]
    np.testing.assert_array_equal(bits(got, F32), bits(want, F32))


def test_uniform_checks_like_caffe():
    with pytest.raises(ValueError, match=r"Check failed: a <= b \(2 vs. 1\)"):
        rng.caffe_rng_uniform(3, 2, 1)


# --------------------------------------------------------------- normal (ziggurat)
@pytest.mark.parametrize("dtype,R", [(F32, ref.f32), (F64, ref.f64)])
def test_gaussian_matches_the_reference(dtype, R, path):
    events = {"tail": 0, "wedge": 0}
    for seed in (1, 42, 7):
        eng = ref.Counted(ref.MT19937(seed))
        want = [ref.normal(eng, R(-2), R(0.5), R, events) for _ in range(6000)]
        s = rng.Stream(seed)
        got = rng.gaussian(s, 6000, -2, 0.5, dtype)
        np.testing.assert_array_equal(bits(got, dtype), bits(want, dtype))
        assert s.position == eng.count
    assert events["tail"] > 0 and events["wedge"] > 50      # every path was taken


@pytest.mark.parametrize("dtype,R", [(F32, ref.f32), (F64, ref.f64)])
def test_gaussian_across_block_edges(dtype, R, monkeypatch, path):
    monkeypatch.setattr(rng, "_CHUNK", 37)
    eng = ref.Counted(ref.MT19937(11))
    want = [ref.normal(eng, R(0), R(1), R) for _ in range(3000)]
    s = rng.Stream(11)
    got = np.concatenate([rng.gaussian(s, k, 0, 1, dtype) for k in (1, 2, 997, 2000)])
    np.testing.assert_array_equal(bits(got, dtype), bits(want, dtype))
    assert s.position == eng.count


def _edge(bucket, top24=0xFFFFFF):
    return (top24 << 8) | bucket


@pytest.mark.parametrize("dtype,R", [(F32, ref.f32), (F64, ref.f64)])
def test_gaussian_rare_paths(dtype, R, path):
    # The tail (layer 0 beyond r), a wedge whose uniform_01 is drawn again (0xFFFFFFFF
    # rounds to 1 in float), wedges at convex and concave layers, back to back.
    values = [_edge(1), 5, 0x80000000, 0xFFFFFF00, _edge(10), 0xFFFFFFFF, 0x40000000,
              _edge(200), 0x7FFFFFFF, _edge(9, 0xFFFF00), 0xFFFFFFFF, 3, _edge(0), _edge(255)]
    eng = ref.Counted(ref.Scripted(values, 5))
    want = [ref.normal(eng, R(0), R(1), R) for _ in range(40)]
    s = scripted(values, 5)
    got = rng.gaussian(s, 40, 0, 1, dtype)
    np.testing.assert_array_equal(bits(got, dtype), bits(want, dtype))
    assert s.position == eng.count


def test_pinned_gaussian_values(path):
    # normal_distribution<float>(0, 1) from seed 1 (boost >= 1.64's ziggurat).
    rng.set_random_seed(1)
    got = rng.caffe_rng_gaussian(3, 0, 1, F32)
    assert [v.hex() for v in got.astype(F64)] == ["0x1.f31ba40000000p-1", "-0x1.d223f00000000p+0",
                                                 "0x1.0527dc0000000p-15"]


def test_gaussian_checks_like_caffe():
    with pytest.raises(ValueError, match=r"Check failed: sigma > 0 \(0 vs. 0\)"):
        rng.caffe_rng_gaussian(3, 0, 0)


def test_ziggurat_tables_follow_their_definition():
    pytest.importorskip("mpmath")
    nx, ny, ex, ey = _ziggurat.derive()
    assert nx == list(_ziggurat.NORMAL_X) and ny == list(_ziggurat.NORMAL_Y)
    assert ex == list(_ziggurat.EXPONENTIAL_X) and ey == list(_ziggurat.EXPONENTIAL_Y)
    # r, the base layer's edge, as Marsaglia and Tsang give it for 128 and 256 layers
    assert _ziggurat.NORMAL_X[1] == 3.4426198558966521214
    assert _ziggurat.EXPONENTIAL_X[1] == 7.6971174701310497140


# --------------------------------------------------------------- bernoulli
@pytest.mark.parametrize("dtype,R", [(F32, ref.f32), (F64, ref.f64)])
@pytest.mark.parametrize("p", [0.5, 0.8, 0.024, 1.0])
def test_bernoulli_matches_the_reference(dtype, R, p, path):
    eng = ref.Counted(ref.MT19937(3))
    want = [ref.bernoulli(eng, R(p), R) for _ in range(900)]
    s = rng.Stream(3)
    np.testing.assert_array_equal(rng.bernoulli(s, 900, p, dtype), want)
    assert s.position == eng.count == 900


def test_bernoulli_of_zero_draws_nothing(path):
    s = rng.Stream(3)
    assert not rng.bernoulli(s, 50, 0.0, F64).any()
    assert s.position == 0


def test_pinned_bernoulli_values(path):
    rng.set_random_seed(1)      # u <= 0.5 * (2**32 - 1) for 1791095845, 4282876139, ...
    assert rng.caffe_rng_bernoulli(6, 0.5, F64).tolist() == [True, False, False, False, True, True]


def test_bernoulli_checks_like_caffe():
    with pytest.raises(ValueError, match=r"Check failed: p <= 1 \(1.5 vs. 1\)"):
        rng.caffe_rng_bernoulli(3, 1.5)


# --------------------------------------------------------------- integers, shuffles
@pytest.mark.parametrize("span", [1, 2, 9, 1000, 2 ** 31 + 3])
def test_uniform_int_matches_the_reference(span):
    eng = ref.Counted(ref.MT19937(8))
    want = [ref.uniform_int(eng, 0, span) for _ in range(300)]
    s = rng.Stream(8)
    assert [rng.uniform_int(s, 0, span) for _ in range(300)] == want
    assert s.position == eng.count


def test_uniform_int_wider_than_the_engine_composes_outputs():
    s = rng.Stream(4)
    values = [rng.uniform_int(s, 0, 2 ** 40) for _ in range(200)]
    assert all(0 <= v <= 2 ** 40 for v in values) and max(values) > 2 ** 33
    assert s.position >= 400            # two outputs (or more) per draw


@pytest.mark.parametrize("length", [0, 1, 2, 10, 3001])
def test_shuffle_matches_caffes_fisher_yates(length, path):
    eng = ref.Counted(ref.MT19937(21))
    want = ref.shuffle(range(length), eng)
    s = rng.Stream(21)
    items = list(range(length))
    rng.shuffle(items, s)
    assert items == want
    assert s.position == eng.count


def test_shuffle_draws_again_past_the_last_bucket(path):
    # For i = 2 the bucket is (2**32 - 1) // 3; 0xFFFFFFFF // bucket = 3 > 2: drawn again (twice).
    values = [0xFFFFFFFF, 0xFFFFFFFF, 0x10, 0x80000000]
    eng = ref.Counted(ref.Scripted(values, 2))
    want = ref.shuffle("abc", eng)
    s = scripted(values, 2)
    items = list("abc")
    rng.shuffle(items, s)
    assert items == want and s.position == eng.count == 4


def test_pinned_shuffle(path):
    s = rng.Stream(1)
    items = list(range(10))
    rng.shuffle(items, s)
    assert items == [3, 9, 2, 1, 7, 0, 6, 5, 8, 4]


# --------------------------------------------------------------- Caffe's stream
def test_set_random_seed_restarts_the_stream(path):
    rng.set_random_seed(77)
    first = rng.caffe_rng_gaussian(10, 0, 1)
    rng.set_random_seed(77)
    np.testing.assert_array_equal(rng.caffe_rng_gaussian(10, 0, 1), first)
    assert rng.seeded()
    rng.set_random_seed(77 + 2 ** 32)      # the solver's int64 reaches unsigned int
    np.testing.assert_array_equal(rng.caffe_rng_gaussian(10, 0, 1), first)


def test_engine_set_random_seed_is_caffes():
    import engine
    engine.set_random_seed(1)
    assert rng.caffe_rng().seed == 1 and rng.caffe_rng_rand() == 1791095845


def test_warn_unmatched_logs_once_per_seed(caplog):
    rng.set_random_seed(1)
    with caplog.at_level("WARNING", logger="engine.core.rng"):
        rng.warn_unmatched("k", "thing 'x'")
        rng.warn_unmatched("k", "thing 'x'")
    lines = [r.getMessage() for r in caplog.records if r.name == "engine.core.rng"]
    assert lines == ["thing 'x': a seeded run cannot reproduce Caffe's draws here (docs/rng.md)."]


@pytest.mark.parametrize("dtype", [F32, F64])
def test_rectangle_test_in_the_dtype_equals_boosts_double_comparison(dtype):
    # boost compares x (RealType) with the double edge; the engine with next_edge (RealType).
    tab = rng._tables(dtype, "normal")
    below = np.nextafter(tab.next_edge, dtype(-np.inf))
    assert (below.astype(F64) < tab.x64[1:]).all()
    assert not (tab.next_edge.astype(F64) < tab.x64[1:]).any()


# --------------------------------------------------------------- the compiled loops
@pytest.mark.parametrize("dtype,R", [(F32, ref.f32), (F64, ref.f64)])
def test_gaussian_scaled_in_two_roundings(dtype, R, path):
    # z * sigma + mean rounds twice in RealType (no fused multiply-add): sigma and mean
    # that are not powers of two tell them apart.
    eng = ref.Counted(ref.MT19937(13))
    want = [ref.normal(eng, R(0.1), R(0.37), R) for _ in range(5000)]
    s = rng.Stream(13)
    got = rng.gaussian(s, 5000, 0.1, 0.37, dtype)
    np.testing.assert_array_equal(bits(got, dtype), bits(want, dtype))
    assert s.position == eng.count


RARE = [_edge(1), 5, 0x80000000, 0xFFFFFF00, _edge(10), 0xFFFFFFFF, 0x40000000, _edge(200),
        0x7FFFFFFF, _edge(9, 0xFFFF00), 0xFFFFFFFF, 3, _edge(0), _edge(255), _edge(1), _edge(1, 0x10)]


@pytest.mark.parametrize("dtype,R", [(F32, ref.f32), (F64, ref.f64)])
def test_compiled_ziggurat_stops_before_an_attempt_the_block_cuts(dtype, R):
    # On every prefix of a block (tails, wedges, draws again of uniform_01 inside), the
    # loop returns the values whose attempts fit whole, and where the next attempt begins.
    kernels = rng.compiled(1 << 62)
    if kernels is None:
        pytest.skip("numba is not installed")
    eng = ref.Counted(ref.Scripted(RARE, 5))
    want, ends = [], []
    for _ in range(30):
        want.append(ref.normal(eng, R(0), R(1), R))
        ends.append(eng.count)
    u = scripted(RARE, 5).peek(ends[-1] + 4).copy()
    w = 2 if dtype is F64 else 1
    for length in range(len(u) + 1):
        out = np.zeros(30, dtype)
        k, used = kernels.normal_fill(u[:length], out, 0, dtype, w - 1, True, dtype(1), dtype(0),
                                      *rng._kernel_tables(dtype))
        assert k == sum(e <= length for e in ends), length
        assert used <= length and (k == 0 or used >= ends[k - 1]) and (k == 30 or used < ends[k])
        np.testing.assert_array_equal(bits(out[:k], dtype), bits(want[:k], dtype))


def _draw_everything(seed):
    """A run of large and small draws of every kind on one stream, and the positions after each."""
    s = rng.Stream(seed)
    draws = [rng.gaussian(s, 200_000, 0.1, 0.37, F32), rng.uniform(s, 50_000, -2, rng.next_up(3, F64), F64),
             rng.bernoulli(s, 70_001, 0.3, F32), rng.gaussian(s, 90_000, 0, 1, F64),
             rng.unit_normal(s, 30_000, F32), rng.shuffle_indices(s, 50_000),
             rng.uniform(s, 100, 0, rng.next_up(1, F32), F32), rng.gaussian(s, 77, 0, 1, F32),
             s.take(3), rng.bernoulli(s, 20_000, 0.999, F64)]
    positions = [s.position]
    return draws, positions + [s() for _ in range(5)]


@pytest.mark.parametrize("seed", (1, 42))
def test_compiled_and_numpy_paths_draw_the_same(seed, monkeypatch):
    # By default large draws are compiled and small ones stay in NumPy, on one stream.
    if rng.compiled(1 << 62) is None:
        pytest.skip("numba is not installed")
    fast, fast_tail = _draw_everything(seed)
    monkeypatch.setattr(rng, "COMPILED", False)
    slow, slow_tail = _draw_everything(seed)
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    assert fast_tail == slow_tail


def test_raw_outputs_across_paths(monkeypatch):
    # Blocks generated by the compiled mt19937 and by NumPy's MT19937, alternately.
    if rng.compiled(1 << 62) is None:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(rng, "COMPILED_FROM", 5000)
    s = rng.Stream(99)
    got = np.concatenate([s.take(k) for k in (1, 4096, 6000, 30, 5000, 4999, 700, 20000)])
    monkeypatch.setattr(rng, "COMPILED", False)
    np.testing.assert_array_equal(got, rng.Stream(99).take(len(got)))
    eng = ref.MT19937(99)
    assert [eng() for _ in range(1500)] == got[:1500].tolist()


def test_small_draws_stay_in_numpy(monkeypatch):
    assert rng.compiled(rng.COMPILED_FROM - 1) is None
    monkeypatch.setattr(rng, "COMPILED", False)
    assert rng.compiled(1 << 62) is None


@pytest.mark.parametrize("dtype", [F32, F64])
def test_draws_into_a_given_array(dtype, path):
    want_g = rng.gaussian(rng.Stream(6), 3000, 0.5, 0.02, dtype)
    want_u = rng.uniform(rng.Stream(6), 3000, -1, 2, dtype)
    out = np.full(3000, 7, dtype)
    assert rng.gaussian(rng.Stream(6), 3000, 0.5, 0.02, dtype, out=out) is out
    np.testing.assert_array_equal(bits(out, dtype), bits(want_g, dtype))
    assert rng.uniform(rng.Stream(6), 3000, -1, 2, dtype, out=out) is out
    np.testing.assert_array_equal(bits(out, dtype), bits(want_u, dtype))
    with pytest.raises(ValueError, match="out must be a contiguous 1-D array of 3000"):
        rng.gaussian(rng.Stream(6), 3000, 0, 1, dtype, out=np.empty(3000, np.float16))
    with pytest.raises(ValueError, match="out must be"):
        rng.uniform(rng.Stream(6), 1500, 0, 1, dtype, out=out[::2])


def test_without_numba_the_numpy_code_draws(monkeypatch, caplog):
    import sys
    monkeypatch.setattr(rng, "_kernels", None)
    monkeypatch.setitem(sys.modules, "engine.core._rng_kernels", None)     # import fails
    with caplog.at_level("INFO", logger="engine.core.rng"):
        assert rng.compiled(1 << 62) is None
    assert any("Numba is not available" in r.getMessage() for r in caplog.records)
    rng.set_random_seed(1)
    got = rng.caffe_rng_gaussian(rng.COMPILED_FROM + 5, 0, 1, F32)
    assert [v.hex() for v in got[:3].astype(F64)] == ["0x1.f31ba40000000p-1", "-0x1.d223f00000000p+0",
                                                     "0x1.0527dc0000000p-15"]
    monkeypatch.setattr(rng, "_kernels", None)          # found again once it loads


@pytest.mark.parametrize("dtype,R", [(F32, ref.f32), (F64, ref.f64)])
def test_gaussian_attempt_longer_than_the_block(dtype, R, path, monkeypatch):
    # A tail whose exponentials keep landing in their base layer (low byte 0, high bits
    # set: shifted again and again, then rejected) reads more outputs than a block holds.
    monkeypatch.setattr(rng, "_CHUNK", 1)
    values = [_edge(1)] + [_edge(0)] * 150 + [_edge(3, 0x10)] * 4
    eng = ref.Counted(ref.Scripted(values, 17))
    want = [ref.normal(eng, R(0), R(1), R) for _ in range(5)]
    s = scripted(values, 17)
    got = np.concatenate([rng.gaussian(s, 1, 0, 1, dtype) for _ in range(5)])
    np.testing.assert_array_equal(bits(got, dtype), bits(want, dtype))
    assert s.position == eng.count > 150


def test_numba_is_loaded_once_a_process_draws_enough(monkeypatch):
    if rng.compiled(1 << 62) is None:
        pytest.skip("numba is not installed")
    kernels = rng._kernels
    monkeypatch.setattr(rng, "_kernels", None)
    monkeypatch.setattr(rng, "_drawn", 0)
    big = rng.COMPILED_FROM
    assert rng.compiled(big - 1) is None and rng._drawn == 0       # small draws do not count
    for _ in range(rng.COMPILED_AFTER // big - 1):                 # large draws, not yet enough
        assert rng.compiled(big) is None
    assert rng._loaded(1 << 30) is None
    assert rng.compiled(big) is kernels and rng._loaded(big) is kernels
    monkeypatch.setattr(rng, "_kernels", None)
    monkeypatch.setattr(rng, "_drawn", 0)
    assert rng.compiled(rng.COMPILED_AFTER) is kernels              # one draw that large


def test_normal_draws_load_the_compiled_loops_sooner(monkeypatch):
    """A normal value counts NORMAL_COST towards COMPILED_AFTER (the NumPy ziggurat costs
    several uniform values): a normal draw of COMPILED_AFTER / NORMAL_COST values loads the
    compiled loops, a uniform draw of as many does not."""
    if rng.compiled(1 << 62) is None:
        pytest.skip("numba is not installed")
    n = rng.COMPILED_AFTER // rng.NORMAL_COST
    assert rng.NORMAL_COST > 1 and n >= rng.COMPILED_FROM
    monkeypatch.setattr(rng, "_kernels", None)
    monkeypatch.setattr(rng, "_drawn", 0)
    assert rng.compiled(n) is None                        # uniform: n of COMPILED_AFTER counted
    monkeypatch.setattr(rng, "_drawn", 0)
    assert rng.compiled(n, rng.NORMAL_COST) is not None   # normal: the whole threshold
    monkeypatch.setattr(rng, "_kernels", None)
    monkeypatch.setattr(rng, "_drawn", 0)
    calls = []
    monkeypatch.setattr(rng, "compiled", lambda k, cost=1: calls.append((k, cost)))
    rng.gaussian(rng.Stream(1), rng.COMPILED_FROM, 0, 1)
    rng.unit_normal(rng.Stream(1), rng.COMPILED_FROM)
    rng.uniform(rng.Stream(1), rng.COMPILED_FROM, 0, 1)
    assert calls == [(rng.COMPILED_FROM, rng.NORMAL_COST)] * 2 + [(rng.COMPILED_FROM, 1)]

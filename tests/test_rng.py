"""Caffe's CPU random numbers (engine.core.rng) against a scalar reference written
from boost's algorithms (tests/rng_reference.py), and values pinned for known seeds."""
import numpy as np
import pytest

from engine.core import _ziggurat, rng
from tests import rng_reference as ref

F32, F64 = np.float32, np.float64
SEEDS = (0, 1, 42, 1701, 2 ** 31 + 5)


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
def test_raw_outputs_equal_boosts_mt19937(seed):
    eng = ref.MT19937(seed)
    want = [eng() for _ in range(1500)]       # past the first twist of 624 words
    s = rng.Stream(seed)
    got = s.take(1000).tolist() + [s() for _ in range(500)]
    assert got == want
    assert s.position == 1500


def test_the_standards_10000th_output_of_the_default_seed():
    # [rand.predef]: mt19937's 10000th output from the default seed 5489 is 4123659995.
    s = rng.Stream(5489)
    s.skip(len(s.peek(9999)))
    assert s() == 4123659995


def test_init_genrand_is_numpys_legacy_seeding():
    for seed in SEEDS:
        np.testing.assert_array_equal(rng.init_genrand(seed), np.random.RandomState(seed).get_state()[1])


def test_unseeded_streams_draw_fresh_entropy():
    assert len({rng.Stream().seed for _ in range(4)}) > 1


def test_pinned_raw_values():
    rng.set_random_seed(1)
    assert [rng.caffe_rng_rand() for _ in range(3)] == [1791095845, 4282876139, 3093770124]


# --------------------------------------------------------------- uniform_real
@pytest.mark.parametrize("dtype,R,up", [(F32, ref.f32, ref.next_up_f32), (F64, ref.f64, ref.next_up_f64)])
@pytest.mark.parametrize("a,b", [(0, 1), (-3, 5), (-0.25, 0.25), (2, 2)])
def test_uniform_matches_the_reference(dtype, R, up, a, b):
    for seed in (1, 42):
        eng = ref.Counted(ref.MT19937(seed))
        hi = up(R(b))
        want = [ref.uniform_real(eng, R(a), hi, R) for _ in range(700)]
        s = rng.Stream(seed)
        got = rng.uniform(s, 700, dtype(a), rng.next_up(b, dtype), dtype)
        np.testing.assert_array_equal(bits(got, dtype), bits(want, dtype))
        assert s.position == eng.count


def test_uniform_draws_again_at_the_top_of_the_range():
    # 0xFFFFFFFF rounds to 2**32 in float: the result reaches b' and boost draws again.
    values = [0xFFFFFFFF, 0xFFFFFFC0, 12345, 0xFFFFFF80, 7]
    eng = ref.Counted(ref.Scripted(values, 3))
    hi = ref.next_up_f32(1.0)
    want = [ref.uniform_real(eng, 0.0, hi, ref.f32) for _ in range(6)]
    s = scripted(values, 3)
    got = rng.uniform(s, 6, F32(0), rng.next_up(1, F32), F32)
    np.testing.assert_array_equal(bits(got, F32), bits(want, F32))
    assert s.position == eng.count > 6


def test_pinned_uniform_values():
    # uniform_real<float>(0, nextafter(1)) from seed 1: float(u) / 2**32 * (1 + 2**-23).
    rng.set_random_seed(1)
    got = rng.caffe_rng_uniform(3, 0, 1, F32)
    assert [v.hex() for v in got.astype(F64)] == ["0x1.ab07d40000000p-2", "0x1.fe8f060000000p-1",
                                                 "0x1.70ce620000000p-1"]


def test_uniform_range_wider_than_the_type_is_halved():
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
def test_gaussian_matches_the_reference(dtype, R):
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
def test_gaussian_across_block_edges(dtype, R, monkeypatch):
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
def test_gaussian_rare_paths(dtype, R):
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


def test_pinned_gaussian_values():
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
def test_bernoulli_matches_the_reference(dtype, R, p):
    eng = ref.Counted(ref.MT19937(3))
    want = [ref.bernoulli(eng, R(p), R) for _ in range(900)]
    s = rng.Stream(3)
    np.testing.assert_array_equal(rng.bernoulli(s, 900, p, dtype), want)
    assert s.position == eng.count == 900


def test_bernoulli_of_zero_draws_nothing():
    s = rng.Stream(3)
    assert not rng.bernoulli(s, 50, 0.0, F64).any()
    assert s.position == 0


def test_pinned_bernoulli_values():
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
def test_shuffle_matches_caffes_fisher_yates(length):
    eng = ref.Counted(ref.MT19937(21))
    want = ref.shuffle(range(length), eng)
    s = rng.Stream(21)
    items = list(range(length))
    rng.shuffle(items, s)
    assert items == want
    assert s.position == eng.count


def test_shuffle_draws_again_past_the_last_bucket():
    # For i = 2 the bucket is (2**32 - 1) // 3; 0xFFFFFFFF // bucket = 3 > 2: drawn again (twice).
    values = [0xFFFFFFFF, 0xFFFFFFFF, 0x10, 0x80000000]
    eng = ref.Counted(ref.Scripted(values, 2))
    want = ref.shuffle("abc", eng)
    s = scripted(values, 2)
    items = list("abc")
    rng.shuffle(items, s)
    assert items == want and s.position == eng.count == 4


def test_pinned_shuffle():
    s = rng.Stream(1)
    items = list(range(10))
    rng.shuffle(items, s)
    assert items == [3, 9, 2, 1, 7, 0, 6, 5, 8, 4]


# --------------------------------------------------------------- Caffe's stream
def test_set_random_seed_restarts_the_stream():
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

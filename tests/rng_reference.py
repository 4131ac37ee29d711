"""A scalar reference of boost's mt19937 and the boost.random distributions Caffe
uses, written in plain Python from boost's algorithms (1.64 and later) to check
the engine's vectorised ``engine.core.rng`` against, one value at a time.

Float arithmetic: ``RealType`` float is emulated by rounding every operation's
double result to float32 (exact for + - * / of float32 operands); double is
Python's float.  Only the ziggurat tables are shared with the engine (they are
checked on their own against their definition).
"""
import math
import struct

from engine.core import _ziggurat

MASK = 0xFFFFFFFF
N, M = 624, 397
MATRIX_A = 0x9908B0DF
UPPER, LOWER = 0x80000000, 0x7FFFFFFF


def f32(x):
    """Round a double to the nearest float32 (ties to even)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f64(x):
    return float(x)


class MT19937:
    """boost::random::mt19937, seeded with ``seed(value)`` (incl. boost's normalize_state)."""

    def __init__(self, seed):
        x = [seed & MASK]
        for i in range(1, N):
            x.append((1812433253 * (x[-1] ^ (x[-1] >> 30)) + i) & MASK)
        y0 = x[M - 1] ^ x[N - 1]
        y0 = (((y0 ^ MATRIX_A) << 1) | 1) & MASK if y0 & UPPER else (y0 << 1) & MASK
        x[0] = (x[0] & UPPER) | (y0 & LOWER)
        self.x, self.i = x, N

    def _twist(self):
        x = self.x
        for j in range(N):
            y = (x[j] & UPPER) | (x[(j + 1) % N] & LOWER)
            x[j] = x[(j + M) % N] ^ (y >> 1) ^ ((x[(j + 1) % N] & 1) * MATRIX_A)
        self.i = 0

    def __call__(self):
        if self.i == N:
            self._twist()
        z = self.x[self.i]
        self.i += 1
        z ^= z >> 11
        z ^= (z << 7) & 0x9D2C5680
        z ^= (z << 15) & 0xEFC60000
        z ^= z >> 18
        return z


class Scripted:
    """Given outputs first, then an mt19937's."""

    def __init__(self, values, seed):
        self.values, self.k, self.rest = list(values), 0, MT19937(seed)

    def __call__(self):
        if self.k < len(self.values):
            self.k += 1
            return self.values[self.k - 1]
        return self.rest()


class Counted:
    """Counts the outputs a distribution consumes."""

    def __init__(self, eng):
        self.eng, self.count = eng, 0

    def __call__(self):
        self.count += 1
        return self.eng()


def next_up_f32(b):
    """boost::math::nextafter(b, FLT_MAX) for a float32 b (finite, below the max)."""
    bits = struct.unpack("<I", struct.pack("<f", b))[0]
    if b == 0:
        bits = 1
    elif b > 0:
        bits += 1
    else:
        bits -= 1
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def next_up_f64(b):
    return math.nextafter(b, math.inf)


# --------------------------------------------------------------- distributions
def uniform_real(eng, a, b, R):
    """detail::generate_uniform_real for an integral engine: [a, b)."""
    divisor = R(R(4294967295) + 1)
    while True:
        numerator = R(eng())
        result = R(R(R(numerator / divisor) * R(b - a)) + a)
        if result < b:
            return result


def uniform_01(eng, R):
    factor = R(1 / R(R(4294967295) + 1))
    while True:
        result = R(R(eng()) * factor)
        if result < 1:
            return result


def bernoulli(eng, p, R):
    if p == 0:
        return False
    return R(eng()) <= R(p * R(4294967295))


def int_float_pair(eng, R):
    """generate_int_float_pair<RealType, 8> on a 32-bit engine: (r in [0, 1), 8-bit bucket)."""
    u = eng()
    bucket = u & 0xFF
    r = R(R(u >> 8) * R(1 / (1 << 24)))
    if R is f64:        # 53 digits: 29 more bits from a second output, then scaled down
        r = R(r + (eng() & ((2 << 28) - 1)))
        r = R(r * R(0.5 / (1 << 28)))
    return r, bucket


def unit_exponential(eng, R):
    tx, ty = _ziggurat.EXPONENTIAL_X, _ziggurat.EXPONENTIAL_Y
    shift = R(0)
    while True:
        r, i = int_float_pair(eng, R)
        x = R(r * R(tx[i]))
        if x < R(tx[i + 1]):
            return R(shift + x)
        if i == 0:
            shift = R(shift + R(tx[1]))
            continue
        y01 = uniform_01(eng, R)
        y = R(R(ty[i]) + R(y01 * R(ty[i + 1] - ty[i])))
        above_upper = R(R(R(tx[i] - tx[i + 1]) * y01) - R(R(tx[i]) - x))
        above_lower = R(y - R(R(ty[i + 1]) + R(R(R(tx[i + 1]) - x) * R(ty[i + 1]))))
        if above_upper < 0 and (above_lower < 0 or y < R(math.exp(-x))):
            return R(x + shift)


def unit_normal(eng, R, events=None):
    tx, ty = _ziggurat.NORMAL_X, _ziggurat.NORMAL_Y
    while True:
        r, bucket = int_float_pair(eng, R)
        sign = (bucket & 1) * 2 - 1
        i = bucket >> 1
        x = R(r * R(tx[i]))
        if x < tx[i + 1]:
            return R(x * sign)
        if i == 0:
            if events is not None:
                events["tail"] += 1
            return R(normal_tail(eng, R) * sign)
        if events is not None:
            events["wedge"] += 1
        y01 = uniform_01(eng, R)
        y = R(R(ty[i]) + R(y01 * R(ty[i + 1] - ty[i])))
        line = R(R(R(tx[i] - tx[i + 1]) * y01) - R(R(tx[i]) - x))
        tangent = R(y - R(R(ty[i]) + R(R(R(R(tx[i]) - x) * R(ty[i])) * R(tx[i]))))
        above_upper, above_lower = (line, tangent) if tx[i] >= 1 else (tangent, line)
        if above_upper < 0 and (above_lower < 0 or y < R(math.exp(-R(R(x * x) / 2)))):
            return R(x * sign)


def normal_tail(eng, R):
    start = R(_ziggurat.NORMAL_X[1])
    while True:
        x = R(unit_exponential(eng, R) / start)
        y = R(unit_exponential(eng, R) / R(1))
        if R(2 * y) > R(x * x):
            return R(x + start)


def normal(eng, mean, sigma, R, events=None):
    return R(R(unit_normal(eng, R, events) * R(sigma)) + R(mean))


def uniform_int(eng, lo, hi):
    """boost::uniform_int<ptrdiff_t>(lo, hi) for spans below the engine's range."""
    span = hi - lo
    if span == 0:
        return lo
    brange = 0xFFFFFFFF
    bucket = brange // (span + 1)
    if brange % (span + 1) == span:
        bucket += 1
    while True:
        v = eng() // bucket
        if v <= span:
            return v + lo


def shuffle(items, eng):
    """caffe::shuffle: Fisher-Yates from the back."""
    items = list(items)
    for i in range(len(items) - 1, 0, -1):
        j = uniform_int(eng, 0, i)
        items[i], items[j] = items[j], items[i]
    return items


# --------------------------------------------------------------- the engine's two paths
PATHS = ("compiled", "numpy")


def use_path(path, monkeypatch):
    """Make engine.core.rng draw on ``path``: "compiled" (the Numba loops, for every draw
    however small; skips without Numba) or "numpy" (its NumPy code)."""
    import pytest

    from engine.core import rng
    if path == "compiled":
        monkeypatch.setattr(rng, "COMPILED", True)
        if rng.compiled(1 << 62) is None:
            pytest.skip("numba is not installed")
        monkeypatch.setattr(rng, "COMPILED_FROM", 0)
    else:
        monkeypatch.setattr(rng, "COMPILED", False)
    return path

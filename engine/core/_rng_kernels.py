"""Compiled loops (Numba) behind ``engine.core.rng``: boost's mt19937 and the
boost.random distributions Caffe draws, one value at a time as boost draws them.

Each loop works on a block of raw outputs ``u`` (uint32) that a
:class:`engine.core.rng.Stream` has looked ahead, from position ``p``; it
returns where it stopped, so the stream consumes exactly the outputs boost
would have.  An attempt that would read past the block is not started or is
abandoned whole (the ``p`` returned is where it began): the stream looks
further ahead and the loop goes on from there, with the same outcome, since an
attempt depends only on the outputs it reads.

``T`` is the distribution's RealType (``np.float32`` or ``np.float64``), passed
as a function: every operation is done in it, constants included, as boost's
code does in ``RealType``.  ``wide`` is 1 where one ``generate_int_float_pair``
reads two outputs (double) and 0 where it reads one (float).

This module imports Numba: ``engine.core.rng`` imports it on first use and
keeps its NumPy code when Numba is missing (the two give the same bits; the
tests compare them).  Compiled functions are cached on disk (``cache=True``).
"""
import math

import numpy as np
from numba import njit

from engine.core.kernels.jit import fast_cache_load

_N, _M = 624, 397
_UPPER, _LOWER, _MATRIX_A = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)
_BRANGE = np.uint32(0xFFFFFFFF)


def _jit(fn):
    return fast_cache_load(njit(cache=True, nogil=True, boundscheck=False)(fn))


# ---------------------------------------------------------------- mt19937
@_jit
def _twist(key):
    for j in range(_N):
        y = (key[j] & _UPPER) | (key[(j + 1) % _N] & _LOWER)
        v = key[(j + _M) % _N] ^ (y >> np.uint32(1))
        if y & np.uint32(1):
            v ^= _MATRIX_A
        key[j] = v


@_jit
def mt_fill(key, idx, out):
    """The next ``len(out)`` outputs of the mt19937 whose 624 words are ``key`` and
    whose next word is ``key[idx]`` (624: twist first); returns the new ``idx``."""
    n = out.size
    k = 0
    while k < n:
        if idx >= _N:
            _twist(key)
            idx = 0
        m = min(_N - idx, n - k)
        for j in range(m):
            z = key[idx + j]
            z ^= z >> np.uint32(11)
            z ^= (z << np.uint32(7)) & np.uint32(0x9D2C5680)
            z ^= (z << np.uint32(15)) & np.uint32(0xEFC60000)
            z ^= z >> np.uint32(18)
            out[k + j] = z
        k += m
        idx += m
    return idx


# ---------------------------------------------------------------- uniform, bernoulli
@_jit
def uniform_fill(u, out, k, T, lo, hi):
    """``uniform_real<T>(lo, hi)`` into ``out[k:]``: ``T(v) / 2**32 * (hi - lo) + lo``,
    drawn again while not below ``hi``.  Returns (values filled, outputs used)."""
    n, m = out.size, u.size
    divisor = T(4294967296.0)
    p = 0
    while k < n and p < m:
        v = T(u[p]) / divisor * (hi - lo) + lo
        p += 1
        if v < hi:
            out[k] = v
            k += 1
    return k, p


@_jit
def bernoulli_fill(u, out, T, threshold):
    """``bernoulli_distribution<T>``: ``T(v) <= p * T(2**32 - 1)`` (``threshold``), one
    output per value."""
    for j in range(out.size):
        out[j] = T(u[j]) <= threshold


# ---------------------------------------------------------------- the ziggurats
@_jit
def _uniform01(u, p, T):
    """``uniform_01<T>``: ``T(v) * 2**-32``, again while not below 1; p is -1 past the block."""
    factor = T(1.0 / 4294967296.0)
    while p < u.size:
        v = T(u[p]) * factor
        p += 1
        if v < T(1):
            return v, p
    return T(0), -1


@_jit
def _int_float_pair(u, p, T, wide):
    """``generate_int_float_pair<T, 8>``: (r in [0, 1), the low 8 bits, next p); p is -1
    past the block."""
    if p + wide >= u.size:
        return T(0), 0, -1
    v = u[p]
    r = T(v >> np.uint32(8)) * T(1.0 / 16777216.0)
    if wide:
        r = (r + T(u[p + 1] & np.uint32(0x1FFFFFFF))) * T(1.0 / 536870912.0)
    return r, np.intp(v & np.uint32(0xFF)), p + 1 + wide


@_jit
def _unit_exponential(u, p, T, wide, ex, ey, edx, edy):
    """``unit_exponential_distribution<T>`` (256 layers); p is -1 past the block."""
    shift = T(0)
    while True:
        r, i, p = _int_float_pair(u, p, T, wide)
        if p < 0:
            return T(0), -1
        x = r * ex[i]
        if x < ex[i + 1]:
            return shift + x, p
        if i == 0:
            shift = shift + ex[1]
            continue
        y01, p = _uniform01(u, p, T)
        if p < 0:
            return T(0), -1
        y = ey[i] + y01 * edy[i]
        above_upper = edx[i] * y01 - (ex[i] - x)
        above_lower = y - (ey[i + 1] + (ex[i + 1] - x) * ey[i + 1])
        if above_upper < 0 and (above_lower < 0 or y < T(math.exp(np.float64(-x)))):
            return x + shift, p


@_jit
def _normal_tail(u, p, T, wide, start, ex, ey, edx, edy):
    """Beyond the base layer's edge ``start``: exponential(start) proposals, exponential(1) test."""
    while True:
        a, p = _unit_exponential(u, p, T, wide, ex, ey, edx, edy)
        if p < 0:
            return T(0), -1
        x = a / start
        b, p = _unit_exponential(u, p, T, wide, ex, ey, edx, edy)
        if p < 0:
            return T(0), -1
        y = b / T(1)
        if T(2) * y > x * x:
            return x + start, p


@_jit
def _normal_wedge(u, p, T, i, x, nx64, nx, ny, ndx, ndy):
    """The rest of an attempt whose ``x`` fell outside layer ``i``'s rectangle (i > 0):
    a ``uniform_01``, the bounds, then ``exp(-x²/2)``.  Returns (0 accepted / 1 rejected
    / 2 past the block, next p)."""
    y01, p = _uniform01(u, p, T)
    if p < 0:
        return 2, p
    y = ny[i] + y01 * ndy[i]
    d = nx[i] - x
    line = ndx[i] * y01 - d
    tangent = y - (ny[i] + d * ny[i] * nx[i])
    if nx64[i] >= 1:                           # convex above x = 1, concave below
        above_upper, above_lower = line, tangent
    else:
        above_upper, above_lower = tangent, line
    if above_upper < 0 and (above_lower < 0 or y < T(math.exp(np.float64(-(x * x / T(2)))))):
        return 0, p
    return 1, p


@_jit
def normal_fill(u, out, k, T, wide, scaled, sigma, mean, nx64, nx, ny, ndx, ndy, ex, ey, edx, edy):
    """``unit_normal_distribution<T>`` into ``out[k:]`` (with ``scaled``: ``z * sigma + mean``,
    as ``normal_distribution`` returns).  Returns (values filled, outputs used).

    Each attempt: ``generate_int_float_pair`` (written out here: the hot path), the
    rectangle test against the double edge, and for the few percent outside it the
    wedge (:func:`_normal_wedge`) or, in layer 0, the tail (:func:`_normal_tail`)."""
    n, m = out.size, u.size
    scale24, scale29 = T(1.0 / 16777216.0), T(1.0 / 536870912.0)
    p = 0
    while k < n and p + wide < m:
        v = u[p]
        r = T(v >> np.uint32(8)) * scale24
        if wide:
            r = (r + T(u[p + 1] & np.uint32(0x1FFFFFFF))) * scale29
        q = p + 1 + wide
        bucket = np.intp(v & np.uint32(0xFF))
        i = bucket >> 1
        x = r * nx[i]
        if np.float64(x) >= nx64[i + 1]:       # boost compares with the double edge
            if i == 0:
                x, q = _normal_tail(u, q, T, wide, nx[1], ex, ey, edx, edy)
                status = 2 if q < 0 else 0
            else:
                status, q = _normal_wedge(u, q, T, i, x, nx64, nx, ny, ndx, ndy)
            if status == 2:
                break
            if status == 1:
                p = q
                continue
        p = q
        if (bucket & 1) == 0:
            x = -x
        out[k] = x * sigma + mean if scaled else x
        k += 1
    return k, p


# ---------------------------------------------------------------- shuffles
@_jit
def shuffle_fill(u, order, i):
    """``caffe::shuffle``'s Fisher–Yates on ``order`` from index ``i`` down to 1, each swap
    partner a ``uniform_int(0, i)`` (``v // bucket``, drawn again past i; i < 2**32 - 1).
    Returns (the index it stopped at, outputs used)."""
    m = u.size
    p = 0
    while i > 0:
        span = np.uint32(i)
        bucket = _BRANGE // (span + np.uint32(1))
        if _BRANGE % (span + np.uint32(1)) == span:
            bucket += np.uint32(1)
        while True:
            if p >= m:
                return i, p
            v = u[p] // bucket
            p += 1
            if v <= span:
                break
        j = np.intp(v)
        order[i], order[j] = order[j], order[i]
        i -= 1
    return i, p

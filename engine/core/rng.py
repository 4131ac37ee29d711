"""Caffe's CPU random numbers: boost::mt19937 streams and the boost.random
distributions behind ``caffe_rng_rand``, ``caffe_rng_uniform``,
``caffe_rng_gaussian``, ``caffe_rng_bernoulli``, ``DataTransformer::Rand`` and
``caffe::shuffle``, reproduced draw for draw.

A :class:`Stream` is one ``boost::mt19937`` (a ``Caffe::RNG``): its 624 state
words, seeded here with mt19937's ``init_genrand`` (boost's ``seed(value)``
computes the same words; its extra ``normalize_state`` only touches bits of
``x[0]`` the first twist never reads).  Its raw 32-bit outputs come in blocks,
from a compiled mt19937 (``_rng_kernels.mt_fill``) or from NumPy's ``MT19937``
bit generator, which runs the same recurrence and tempering.  The stream keeps
a buffer, so a distribution can look ahead over a block, decide what boost
decides one value at a time, and then consume exactly as many outputs as boost
would have.

Two paths draw the same bits: compiled loops (Numba, ``engine.core._rng_kernels``:
boost's algorithms written out value by value over the block) for draws of
``COMPILED_FROM`` values and more, and NumPy code (vectorised over the block:
the ziggurat classifies every position at once and walks the rare ones) for
small draws and whenever Numba is missing.

The distributions follow boost.random 1.64 and later (Ubuntu 18.04's 1.65.1,
20.04's 1.71, Debian 10's 1.67, 11's 1.74: one algorithm throughout), computed
in the blob's dtype (``Dtype``) as boost computes them in ``RealType``:

- ``uniform_real(a, nextafter(b))``: ``float(u) / 2**32 * (b' - a) + a``,
  drawn again while the result is not below ``b'``;
- ``normal_distribution``: the 128-layer ziggurat (tables in ``_ziggurat``),
  its tail from two ziggurat exponentials; ``x * sigma + mean``;
- ``bernoulli_distribution(p)``: ``float(u) <= p * float(2**32 - 1)``, and no
  draw at all when ``p == 0``;
- ``uniform_int(0, i)`` (shuffles): ``u // bucket`` with boost's bucket size,
  drawn again when the quotient is past ``i``.

docs/rng.md lists where Caffe draws and what cannot match (cuRAND on the GPU,
HDF5Data's ``std::random_shuffle``).
"""
import importlib
import logging
import math
import os
import threading

import numpy as np

from engine.core import _ziggurat

rng_log = logging.getLogger("engine.core.rng")

_U32 = float(1 << 32)
_CHUNK = 1 << 20          # values handled per block

# Which path draws.  The compiled loops (Numba) take draws of COMPILED_FROM values and
# more; smaller ones, which NumPy handles in a fraction of a millisecond, stay in NumPy.
# The first compiled call costs a process about 0.3 s once (Numba's import, then 0.01-0.05 s
# per loop loaded compiled from the on-disk cache: engine.core.kernels.jit), so
# the loops are loaded once the process has drawn COMPILED_AFTER values in large draws
# (a single draw that large counts), a normal value counting NORMAL_COST (the NumPy
# ziggurat costs about 10x a uniform value there, 6x the compiled loop: 0.07-0.1 us against
# 0.005-0.009 us for a uniform one, 0.012-0.014 us compiled, on the 2-core EPYC): a LeNet
# (0.4 M uniform weights) or a GoogLeNet (7 M) stays in NumPy, a CaffeNet loads them for
# fc6 (38 M), a ResNet-50 (normal: MSRA) after its first 2 M.
# COMPILED = False forces NumPy throughout (the tests run both paths; same bits); so does
# ENGINE_NUMBA=0 (engine.core.kernels.jit).
COMPILED = os.environ.get("ENGINE_NUMBA", "1") != "0"
COMPILED_FROM = 1 << 14
COMPILED_AFTER = 1 << 23
NORMAL_COST = 4
_kernels = None
_drawn = 0


def compiled(n, cost=1):
    """The compiled loops (``engine.core._rng_kernels``) for a draw of ``n`` values, or None:
    below ``COMPILED_FROM``, before the process has drawn ``COMPILED_AFTER`` values (each
    counting ``cost``: NORMAL_COST for the ziggurat's), with ``COMPILED`` off, or without
    Numba."""
    global _kernels, _drawn
    if not COMPILED or n < COMPILED_FROM:
        return None
    if _kernels is None:
        _drawn += n * cost
        if _drawn < COMPILED_AFTER:
            return None
        try:
            kernels = importlib.import_module("engine.core._rng_kernels")
        except Exception as e:  # ImportError, or a Numba that does not load beside this NumPy
            rng_log.info("Numba is not available (%s): random draws use the NumPy code.", e)
            kernels = False
        _kernels = kernels
    return _kernels or None


def _loaded(n):
    """The compiled loops for ``n`` raw outputs when a draw has loaded them (no counting)."""
    return _kernels if COMPILED and _kernels and n >= COMPILED_FROM else None


# ---------------------------------------------------------------- the engine
def init_genrand(seed):
    """mt19937's 624 state words for a 32-bit ``seed`` (Knuth's multiplier 1812433253)."""
    words = [int(seed) & 0xFFFFFFFF]
    for i in range(1, 624):
        prev = words[-1]
        words.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return np.array(words, dtype=np.uint32)


def fresh_seed():
    """A seed from the OS's entropy, as Caffe's ``cluster_seedgen`` reads /dev/urandom."""
    return int.from_bytes(os.urandom(4), "little")


class Stream:
    """One ``boost::mt19937`` seeded with a 32-bit ``seed`` (fresh entropy when None)."""

    _BLOCK = 4096

    def __init__(self, seed=None):
        self.seed = (fresh_seed() if seed is None else int(seed)) & 0xFFFFFFFF
        self._key = init_genrand(self.seed)      # mt19937's words; the next output tempers _key[_idx]
        self._idx = 624
        self._numpy_bits = None
        self._buf = np.empty(0, np.uint32)
        self._pos = 0
        self._base = 0
        self.lock = threading.RLock()

    def __repr__(self):
        return "Stream(seed=%d, position=%d)" % (self.seed, self.position)

    @property
    def position(self):
        """How many raw outputs have been consumed since seeding."""
        return self._base + self._pos

    def _generate(self, out):
        """Fill ``out`` with the engine's next outputs (compiled, or NumPy's ``MT19937``)."""
        kernels = _loaded(len(out))
        if kernels is not None:
            self._idx = kernels.mt_fill(self._key, self._idx, out)
            return
        if self._numpy_bits is None:
            self._numpy_bits = np.random.MT19937(0)
        bits = self._numpy_bits
        bits.state = {"bit_generator": "MT19937", "state": {"key": self._key, "pos": self._idx}}
        out[:] = bits.random_raw(len(out))
        state = bits.state["state"]
        self._key, self._idx = state["key"].astype(np.uint32), int(state["pos"])

    def peek(self, n):
        """The next ``n`` raw outputs (uint32), not consumed."""
        avail = len(self._buf) - self._pos
        if avail < n:
            buf = np.empty(avail + max(n - avail, self._BLOCK), np.uint32)
            buf[:avail] = self._buf[self._pos:]
            self._generate(buf[avail:])
            self._base += self._pos
            self._buf, self._pos = buf, 0
        return self._buf[self._pos:self._pos + n]

    def skip(self, n):
        """Consume ``n`` outputs already looked at with :meth:`peek`."""
        if n > len(self._buf) - self._pos:
            raise ValueError("skip(%d) past the outputs looked at" % n)
        self._pos += n

    def take(self, n):
        """Consume and return the next ``n`` raw outputs."""
        out = self.peek(n).copy()
        self._pos += n
        return out

    def __call__(self):
        """One raw output (``(*rng)()``) as a Python int."""
        if self._pos >= len(self._buf):
            self.peek(1)
        v = int(self._buf[self._pos])
        self._pos += 1
        return v


# ---------------------------------------------------------------- uniform_real
def _real(dtype):
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError("Caffe's random numbers are float32 or float64, not %s" % dt)
    return dt.type


def _output(out, n, t):
    """``out`` when given (checked: ``n`` contiguous values of ``t``), else a new array."""
    if out is None:
        return np.empty(n, t)
    if out.shape != (n,) or out.dtype != t or not out.flags.c_contiguous:
        raise ValueError("out must be a contiguous 1-D array of %d %s, not %s %s"
                         % (n, np.dtype(t).name, out.shape, out.dtype))
    return out


def next_up(value, dtype=np.float32):
    """``caffe_nextafter``: the next representable number toward the type's max."""
    t = _real(dtype)
    return np.nextafter(t(value), t(np.finfo(t).max))


def uniform(stream, n, a, b, dtype=np.float32, out=None):
    """``n`` draws of ``boost::uniform_real<Dtype>(a, b)`` (b excluded), in ``dtype``
    (into ``out`` when given)."""
    t = _real(dtype)
    out = _output(out, n, t)
    lo, hi = t(a), t(b)
    if not lo < hi:
        raise ValueError("uniform_real needs a < b (%r vs. %r)" % (lo, hi))
    doubled = hi / t(2) - lo / t(2) > t(np.finfo(t).max) / t(2)
    if doubled:             # boost halves a range wider than the type's max
        lo, hi = t(lo / t(2)), t(hi / t(2))
    kernels = compiled(n)
    with stream.lock:
        if kernels is not None:
            _uniform_compiled(kernels, stream, out, t, lo, hi)
        else:
            _uniform_numpy(stream, out, t, lo, hi)
    if doubled:
        out *= t(2)
    return out


def _uniform_compiled(kernels, stream, out, t, lo, hi):
    n = len(out)
    filled = 0
    while filled < n:
        u = stream.peek(min(n - filled, _CHUNK) + 8)
        filled, used = kernels.uniform_fill(u, out, filled, t, lo, hi)
        stream.skip(used)


def _uniform_numpy(stream, out, t, lo, hi):
    n = len(out)
    filled = 0
    while filled < n:
        want = min(n - filled, _CHUNK)
        u = stream.peek(want + 8)
        v = u.astype(t)
        v /= t(_U32)
        v *= hi - lo
        v += lo
        below = v[:want] < hi
        if below.all():     # nothing redrawn (nearly always): the first ``want`` values
            out[filled:filled + want] = v[:want]
            stream.skip(want)
            filled += want
            continue
        good = np.flatnonzero(v < hi)[:want]
        out[filled:filled + len(good)] = v[good]
        stream.skip(int(good[-1]) + 1 if len(good) == want else len(u))
        filled += len(good)


def uniform01(stream, dtype=np.float32):
    """One ``uniform_01<Dtype>`` draw (scalar): ``float(u) / 2**32``, again while not below 1."""
    t = _real(dtype)
    while True:
        v = t(stream()) * t(1.0 / _U32)
        if v < t(1):
            return v


# ---------------------------------------------------------------- bernoulli
def bernoulli(stream, n, p, dtype=np.float32):
    """``n`` draws of ``boost::bernoulli_distribution<Dtype>(p)`` as a bool array."""
    t = _real(dtype)
    p = t(p)
    if p == t(0):
        return np.zeros(n, bool)    # boost returns false without drawing
    threshold = p * t(4294967295.0)
    kernels = compiled(n)
    out = np.empty(n, bool)
    with stream.lock:
        for start in range(0, n, _CHUNK):
            part = out[start:start + _CHUNK]
            u = stream.peek(len(part))
            if kernels is not None:
                kernels.bernoulli_fill(u, part, t, threshold)
            else:
                np.less_equal(u.astype(t), threshold, out=part)
            stream.skip(len(part))
    return out


# ---------------------------------------------------------------- normal (ziggurat)
class _Tables:
    """The ziggurat tables, as boost reads them for one RealType."""

    def __init__(self, t, x, y):
        x = np.array(x, np.float64)
        y = np.array(y, np.float64)
        self.x64 = x                              # double edges (the fast test compares in double)
        self.x = x.astype(t)                      # RealType(table_x[i])
        self.y = y.astype(t)
        self.dx = (x[:-1] - x[1:]).astype(t)      # RealType(table_x[i] - table_x[i+1])
        self.dy = (y[1:] - y[:-1]).astype(t)      # RealType(table_y[i+1] - table_y[i])
        self.convex = x[:-1] >= 1
        # x < table_x[i+1] (x in RealType, compared in double) is x < next_edge[i] in
        # RealType: the smallest RealType value not below the double edge.
        edge = x[1:].astype(t)
        edge = np.where(edge.astype(np.float64) < x[1:], np.nextafter(edge, t(np.inf)), edge)
        self.next_edge = edge


_TABLES = {}


def _tables(t, kind):
    key = (t, kind)
    if key not in _TABLES:
        if kind == "normal":
            _TABLES[key] = _Tables(t, _ziggurat.NORMAL_X, _ziggurat.NORMAL_Y)
        else:
            _TABLES[key] = _Tables(t, _ziggurat.EXPONENTIAL_X, _ziggurat.EXPONENTIAL_Y)
    return _TABLES[key]


def _exp(t, v):
    """``std::exp`` in RealType: the exact exponential rounded to the type."""
    return t(math.exp(float(v)))


def _pair_width(t):
    """Raw outputs behind one ``generate_int_float_pair<RealType, 8>``: 1 for float, 2 for double."""
    return 1 if t is np.float32 else 2


def _int_float_pair(stream, t):
    """boost's ``generate_int_float_pair<RealType, 8>`` on a 32-bit engine (scalar)."""
    u = stream()
    r = t(u >> 8) * t(2.0 ** -24)
    if t is np.float64:
        r = (r + t(stream() & 0x1FFFFFFF)) * t(2.0 ** -29)
    return r, u & 0xFF


def _pairs(u, t, count):
    """Vectorised :func:`_int_float_pair` for attempts starting at each of ``count`` positions."""
    head = u[:count]
    r = (head >> 8).astype(t) * t(2.0 ** -24)
    if t is np.float64:
        r = (r + (u[1:count + 1] & 0x1FFFFFFF).astype(t)) * t(2.0 ** -29)
    return r, (head & 0xFF).astype(np.intp)


def _unit_exponential(stream, t):
    """boost's ``unit_exponential_distribution<RealType>`` (256-layer ziggurat), scalar."""
    tab = _tables(t, "exponential")
    shift = t(0)
    while True:
        r, i = _int_float_pair(stream, t)
        x = r * tab.x[i]
        if x < tab.x[i + 1]:
            return shift + x
        if i == 0:
            shift = shift + tab.x[1]
            continue
        y01 = uniform01(stream, t)
        y = tab.y[i] + y01 * tab.dy[i]
        above_upper = tab.dx[i] * y01 - (tab.x[i] - x)
        above_lower = y - (tab.y[i + 1] + (tab.x[i + 1] - x) * tab.y[i + 1])
        if above_upper < 0 and (above_lower < 0 or y < _exp(t, -x)):
            return x + shift


def _normal_tail(stream, t):
    """The normal ziggurat's base strip beyond r: exponential(r) proposals, exponential(1) test."""
    start = _tables(t, "normal").x[1]
    while True:
        x = _unit_exponential(stream, t) / start
        y = _unit_exponential(stream, t) / t(1)
        if t(2) * y > x * x:
            return x + start


def _normal_attempt(stream, t):
    """One attempt of boost's ``unit_normal_distribution`` (scalar); None when rejected."""
    tab = _tables(t, "normal")
    r, bucket = _int_float_pair(stream, t)
    sign = t((bucket & 1) * 2 - 1)
    i = bucket >> 1
    x = r * tab.x[i]
    if float(x) < tab.x64[i + 1]:
        return x * sign
    if i == 0:
        return _normal_tail(stream, t) * sign
    y01 = uniform01(stream, t)
    y = tab.y[i] + y01 * tab.dy[i]
    line = tab.dx[i] * y01 - (tab.x[i] - x)
    tangent = y - (tab.y[i] + (tab.x[i] - x) * tab.y[i] * tab.x[i])
    above_upper, above_lower = (line, tangent) if tab.convex[i] else (tangent, line)
    if above_upper < 0 and (above_lower < 0 or y < _exp(t, -(x * x / t(2)))):
        return x * sign
    return None


# What an attempt starting at a position does, decided for a whole block at once.
_FAST, _WEDGE_IN, _WEDGE_OUT, _SLOW = 0, 1, 2, 3


def _classify(u, t, count):
    """For attempts starting at each of ``count`` positions of ``u``: the kind and the value.

    FAST: accepted by the rectangle test (one pair); WEDGE_IN / WEDGE_OUT: decided
    in the wedge with the next output as ``uniform_01`` (one pair and one more);
    SLOW: the tail, or a ``uniform_01`` that boost would draw again (run one by
    one by :func:`_normal_attempt`).  The wedge is worked out only where the
    rectangle test fails (a few percent of the positions)."""
    tab = _tables(t, "normal")
    w = _pair_width(t)
    r, bucket = _pairs(u, t, count)
    i = bucket >> 1
    x = r * tab.x[i]
    value = np.where(bucket & 1, x, -x)
    kind = np.full(count, _FAST, np.int8)
    at = np.flatnonzero(x >= tab.next_edge[i])
    i, x = i[at], x[at]
    y01 = u[at + w].astype(t) * t(1.0 / _U32)
    y = tab.y[i] + y01 * tab.dy[i]
    d = tab.x[i] - x
    line = tab.dx[i] * y01 - d
    tangent = y - (tab.y[i] + d * tab.y[i] * tab.x[i])
    convex = tab.convex[i]
    above_upper = np.where(convex, line, tangent)
    above_lower = np.where(convex, tangent, line)
    with np.errstate(over="ignore", under="ignore"):
        fx = np.exp((-(x * x / t(2))).astype(np.float64)).astype(t)
    accept = (above_upper < 0) & ((above_lower < 0) | (y < fx))
    kinds = np.where(accept, _WEDGE_IN, _WEDGE_OUT).astype(np.int8)
    kinds[(i == 0) | ~(y01 < t(1))] = _SLOW
    kind[at] = kinds
    return kind, value


def _walk(kind, value, count, w, out, filled, stream):
    """Follow boost's attempts over a classified block from the stream's position
    (any pair width; double draws use it).

    Returns (filled, position reached in the block, outputs of the block already
    consumed by scalar attempts).  Between non-FAST positions the attempts are a
    run of FAST ones ``w`` apart, copied in one slice."""
    n = len(out)
    lanes = [np.flatnonzero(kind[lane::w] != _FAST) * w + lane for lane in range(w)]
    lanes = [lane.tolist() for lane in lanes]
    ptr = [0] * w
    j = consumed = 0
    while filled < n and j < count:
        lane, k = lanes[j % w], ptr[j % w]
        while k < len(lane) and lane[k] < j:
            k += 1
        ptr[j % w] = k
        q = lane[k] if k < len(lane) else j + w * -(-(count - j) // w)
        q = min(q, j + w * (n - filled))
        if q > j:
            run = value[j:q:w]
            out[filled:filled + len(run)] = run
            filled += len(run)
            j = q
        if filled == n or j >= count:
            break
        kq = kind[q]
        if kq == _WEDGE_IN:
            out[filled] = value[q]
            filled += 1
            j = q + w + 1
        elif kq == _WEDGE_OUT:
            j = q + w + 1
        else:
            stream.skip(q - consumed)
            start = stream.position
            v = _normal_attempt(stream, value.dtype.type)
            if v is not None:
                out[filled] = v
                filled += 1
            j = consumed = q + stream.position - start
    return filled, j, consumed


class _Cursor:
    """Raw outputs read from a block, from ``position`` on, as a stream would give them."""

    def __init__(self, u, position):
        self.u, self.position = u, position

    def __call__(self):
        if self.position >= len(self.u):
            raise IndexError("past the block")
        v = int(self.u[self.position])
        self.position += 1
        return v


def _run_firsts(nonfast):
    """For each sorted non-FAST position: the first position of its run of consecutive ones."""
    first = np.zeros(len(nonfast), np.intp)
    breaks = np.flatnonzero(np.diff(nonfast) != 1) + 1
    first[breaks] = breaks
    np.maximum.accumulate(first, out=first)
    return nonfast[first]


def _slow_attempts(u, t, kind, nonfast, firsts):
    """The SLOW positions that begin attempts, each run on the block (a scalar attempt).

    A run of consecutive non-FAST positions begins with an attempt (a FAST attempt
    or a wedge's uniform_01 precedes it) and every other position after that is
    one: a wedge reads the next output.  A SLOW attempt's end is the next anchor
    (an attempt begins there).  Returns the block's usable end, the anchors, and
    per SLOW attempt its position, length and value (None when rejected)."""
    anchors, starts, lengths, values = [0], [], [], []
    anchor = 0
    for k in np.flatnonzero(kind[nonfast] == _SLOW).tolist():
        c = int(nonfast[k])
        if c < anchor or (c - max(int(firsts[k]), anchor)) % 2:
            continue                  # inside the last SLOW attempt, or a wedge's uniform_01
        cursor = _Cursor(u, c)
        try:
            v = _normal_attempt(cursor, t)
        except IndexError:
            return c, anchors, starts, lengths, values
        anchor = cursor.position
        anchors.append(anchor)
        starts.append(c)
        lengths.append(anchor - c)
        values.append(v)
    return len(kind), anchors, starts, lengths, values


def _walk_float(kind, value, u, out, filled, stream):
    """:func:`_walk` for float, vectorised: which positions begin attempts follows from
    the runs of non-FAST positions (a wedge's uniform_01 is the next output), anchored
    after each SLOW attempt (run on the block, one by one: a few in ten thousand)."""
    t = value.dtype.type
    nonfast = np.flatnonzero(kind != _FAST)
    firsts = _run_firsts(nonfast)
    end, anchors, slow, lengths, slow_values = _slow_attempts(u, t, kind, nonfast, firsts)
    if end == 0:                      # a SLOW attempt longer than the block: on the stream
        v = _normal_attempt(stream, t)
        if v is not None:
            out[filled] = v
            filled += 1
        return filled, 0, 0
    length = np.where(kind[:end] == _FAST, 1, 2)
    begins = np.ones(end, bool)
    cover = np.zeros(end + 1, np.intp)
    for c, n_used in zip(slow, lengths):
        length[c] = n_used
        cover[c + 1] += 1
        cover[min(c + n_used, end)] -= 1
    inside = np.cumsum(cover[:end]) > 0
    keep = nonfast < end
    nf, firsts = nonfast[keep], firsts[keep]
    anchor = np.asarray(anchors)[np.searchsorted(anchors, nf, "right") - 1]
    begins[nf] = (nf - np.maximum(firsts, anchor)) % 2 == 0
    begins &= ~inside
    wedges = nf[begins[nf] & (kind[nf] != _SLOW)]
    after = wedges + 1
    begins[after[after < end]] = False
    emit = begins & ((kind[:end] == _FAST) | (kind[:end] == _WEDGE_IN))
    for c, v in zip(slow, slow_values):
        if v is not None and begins[c]:
            emit[c] = True
            value[c] = v
    emitted = np.flatnonzero(emit)
    take = min(len(emitted), len(out) - filled)
    out[filled:filled + take] = value[emitted[:take]]
    filled += take
    if filled == len(out):
        p = int(emitted[take - 1])
    else:
        p = int(np.flatnonzero(begins)[-1])
    return filled, p + int(length[p]), 0


def unit_normal(stream, n, dtype=np.float32):
    """``n`` draws of boost's ``unit_normal_distribution<Dtype>`` (the ziggurat)."""
    t = _real(dtype)
    kernels = compiled(n, NORMAL_COST)
    with stream.lock:
        if kernels is not None:
            return _normal_compiled(kernels, stream, np.empty(n, t), t, False, t(1), t(0))
        return _unit_normal_numpy(stream, np.empty(n, t), t)


def _normal_compiled(kernels, stream, out, t, scaled, sigma, mean):
    """The ziggurat compiled, over blocks looked ahead a little past the expected use
    (float: ~1.02 outputs a value; double twice that); further when an attempt (a tail)
    did not fit in what was looked at."""
    tables = _kernel_tables(t)
    w = _pair_width(t)
    n = len(out)
    filled = extra = 0
    while filled < n:
        m = min(n - filled, _CHUNK)
        u = stream.peek(w * (m + m // 32 + 64) + extra)
        filled, used = kernels.normal_fill(u, out, filled, t, w - 1, scaled, sigma, mean, *tables)
        stream.skip(used)
        extra = 0 if used else 2 * extra + len(u)
    return out


def _kernel_tables(t):
    """The tables ``_rng_kernels.normal_fill`` reads: the normal ziggurat's double edges,
    its x, y, x[i] - x[i+1] and y[i+1] - y[i] in RealType, then the exponential's four."""
    tab, exp_tab = _tables(t, "normal"), _tables(t, "exponential")
    return (tab.x64, tab.x, tab.y, tab.dx, tab.dy, exp_tab.x, exp_tab.y, exp_tab.dx, exp_tab.dy)


def _unit_normal_numpy(stream, out, t):
    w = _pair_width(t)
    n = len(out)
    filled = 0
    while filled < n:
        m = min(n - filled, _CHUNK)
        block = w * (m + m // 32 + 64)
        u = stream.peek(block)
        count = block - w                 # an attempt also reads the next output (the wedge's)
        kind, value = _classify(u, t, count)
        if w == 1:
            filled, j, consumed = _walk_float(kind, value, u, out, filled, stream)
        else:
            filled, j, consumed = _walk(kind, value, count, w, out, filled, stream)
        stream.skip(j - consumed)
    return out


def gaussian(stream, n, mu, sigma, dtype=np.float32, out=None):
    """``n`` draws of ``boost::normal_distribution<Dtype>(mu, sigma)``: ``z * sigma + mu``
    (into ``out`` when given)."""
    t = _real(dtype)
    out = _output(out, n, t)
    kernels = compiled(n, NORMAL_COST)
    with stream.lock:
        if kernels is not None:
            return _normal_compiled(kernels, stream, out, t, True, t(sigma), t(mu))
        _unit_normal_numpy(stream, out, t)
    out *= t(sigma)         # two roundings in Dtype, as boost's z * sigma + mean
    out += t(mu)
    return out


# ---------------------------------------------------------------- integers
_BRANGE = 0xFFFFFFFF
_MAX64 = (1 << 64) - 1


def uniform_int(stream, lo, hi):
    """One draw of ``boost::uniform_int<ptrdiff_t>(lo, hi)`` on a 32-bit engine."""
    span = int(hi) - int(lo)
    if span < 0:
        raise ValueError("uniform_int needs lo <= hi (%d vs. %d)" % (lo, hi))
    if span == 0:
        return int(lo)
    if span == _BRANGE:
        return stream() + int(lo)
    if span < _BRANGE:
        bucket = _BRANGE // (span + 1) + (_BRANGE % (span + 1) == span)
        while True:
            v = stream() // bucket
            if v <= span:
                return v + int(lo)
    return _wide_uniform_int(stream, span) + int(lo)


def _wide_uniform_int(stream, span):
    """boost's composition of several outputs for a range wider than the engine's (64-bit ptrdiff_t)."""
    while True:
        limit = (span + 1) // (_BRANGE + 1)
        result, mult = 0, 1
        while mult <= limit:
            result = (result + stream() * mult) & _MAX64
            if mult * _BRANGE == span - mult + 1:
                return result
            mult *= _BRANGE + 1
        increment = uniform_int(stream, 0, span // mult)
        if _MAX64 // mult < increment:
            continue
        increment *= mult
        result = (result + increment) & _MAX64
        if result < increment or result > span:
            continue
        return result


def shuffle_indices(stream, length):
    """The order ``caffe::shuffle`` (Fisher–Yates from the back, ``uniform_int(0, i)``)
    leaves ``range(length)`` in, as an int64 array."""
    if length < 2:
        return np.arange(length, dtype=np.int64)
    kernels = compiled(length)
    with stream.lock:
        if kernels is not None:
            return _shuffle_compiled(kernels, stream, length)
        return _shuffle_numpy(stream, length)


def _shuffle_compiled(kernels, stream, length):
    order = np.arange(length, dtype=np.int64)
    i = length - 1
    while i >= _BRANGE:         # spans the engine's range cannot cover: boost composes outputs
        j = uniform_int(stream, 0, i)
        order[i], order[j] = order[j], order[i]
        i -= 1
    while i > 0:
        u = stream.peek(min(i, _CHUNK) + 16)
        i, used = kernels.shuffle_fill(u, order, i)
        stream.skip(used)
    return order


def _shuffle_numpy(stream, length):
    order = list(range(length))
    tops = np.arange(length - 1, 0, -1, dtype=np.int64)       # i = length-1 ... 1
    bucket = _BRANGE // (tops + 1) + (_BRANGE % (tops + 1) == tops)
    picks = np.empty(len(tops), np.int64)
    done = 0
    while done < len(tops):
        u = stream.peek(len(tops) - done).astype(np.int64)
        v = u // bucket[done:]
        bad = np.flatnonzero(v > tops[done:])
        good = len(v) if len(bad) == 0 else int(bad[0])
        picks[done:done + good] = v[:good]
        stream.skip(good)
        done += good
        if done < len(tops):
            picks[done] = uniform_int(stream, 0, int(tops[done]))
            done += 1
    for i, j in zip(tops.tolist(), picks.tolist()):
        order[i], order[j] = order[j], order[i]
    return np.array(order, np.int64)


def shuffle(items, stream):
    """``caffe::shuffle(begin, end, stream)`` on a list, in place."""
    order = shuffle_indices(stream, len(items)).tolist()
    items[:] = [items[k] for k in order]


# ---------------------------------------------------------------- Caffe's stream
class _State:
    def __init__(self):
        self.stream = Stream()
        self.seeded = False
        self.aux = np.random.default_rng()
        self.warned = set()


_state = _State()
_state_lock = threading.Lock()


def set_random_seed(seed):
    """``Caffe::set_random_seed``: a new mt19937 seeded with ``seed`` (taken mod 2**32,
    as the solver's int64 ``random_seed`` reaches ``unsigned int``)."""
    seed = int(seed) & 0xFFFFFFFF
    with _state_lock:
        _state.stream = Stream(seed)
        _state.seeded = True
        _state.aux = np.random.default_rng(seed)
        _state.warned = set()


def seeded():
    """Whether ``set_random_seed`` has been called in this process."""
    return _state.seeded


def caffe_rng():
    """The Caffe stream (``caffe_rng()``): fillers, Dropout, DummyData, data layers' seeds."""
    return _state.stream


def aux():
    """A NumPy Generator for draws Caffe does not take from its stream (HDF5Data's
    shuffles, stochastic pooling on the CPU); reseeded by :func:`set_random_seed`."""
    return _state.aux


def caffe_rng_rand():
    """``caffe_rng_rand()``: one raw 32-bit output of the Caffe stream."""
    stream = caffe_rng()
    with stream.lock:
        return stream()


def caffe_rng_uniform(n, a, b, dtype=np.float32, out=None):
    """``caffe_rng_uniform<Dtype>``: uniform on [a, b] (boost's upper bound is nextafter(b)),
    into ``out`` when given."""
    t = _real(dtype)
    a, b = t(a), t(b)
    if not a <= b:
        raise ValueError("Check failed: a <= b (%s vs. %s) " % (_num(a), _num(b)))
    return uniform(caffe_rng(), n, a, next_up(b, t), t, out)


def caffe_rng_gaussian(n, mu, sigma, dtype=np.float32, out=None):
    """``caffe_rng_gaussian<Dtype>``, into ``out`` when given."""
    t = _real(dtype)
    if not t(sigma) > 0:
        raise ValueError("Check failed: sigma > 0 (%s vs. 0) " % _num(t(sigma)))
    return gaussian(caffe_rng(), n, mu, sigma, t, out)


def caffe_rng_bernoulli(n, p, dtype=np.float32):
    """``caffe_rng_bernoulli<Dtype>`` (``dtype`` is the type of ``p`` at the call)."""
    t = _real(dtype)
    p = t(p)
    if not p >= 0:
        raise ValueError("Check failed: p >= 0 (%s vs. 0) " % _num(p))
    if not p <= 1:
        raise ValueError("Check failed: p <= 1 (%s vs. 1) " % _num(p))
    return bernoulli(caffe_rng(), n, p, t)


def _num(x):
    from engine.core.log import num
    return num(x)


def warn_unmatched(key, message):
    """Log once per seed (only when seeded) that a draw cannot follow Caffe's."""
    if not _state.seeded or key in _state.warned:
        return
    _state.warned.add(key)
    rng_log.warning("%s: a seeded run cannot reproduce Caffe's draws here (docs/rng.md).", message)

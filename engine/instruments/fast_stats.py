"""One-pass blob statistics on the host, compiled with Numba.

:func:`summary` visits a float32 array once and returns everything
:func:`engine.instruments.debug.array_stats` needs but the histogram: Caffe's
sum of |x| (``cblas_sasum``'s sixteen float32 lanes, added as
:func:`engine.core.blob.caffe_asum` adds them, so debug_info numbers stay
bit-identical), the min and max, the float64 sum and sum of squares and the
count of exact zeros.  NaN and Inf are counted by a second pass only when the
float64 sum says there are some (a finite sum of finite float32 values cannot
overflow float64).  :func:`histogram` bins all values, or a fixed-size sample of
them spread over the whole array, into the finite range.  :func:`asum` is the
sixteen-lane sum alone (the "health" level).

Numba is optional: without it (``AVAILABLE`` is False) the callers keep their
NumPy code paths, which give the same numbers (the |x| sum bit for bit; the
float64 sums to rounding).  Numba is imported, and the compiled functions made,
the first time :func:`usable` (or ``AVAILABLE``) is asked (engine.core.kernels.jit);
they are cached on disk (``cache=True``), so only the first process pays the
compilation (about a second per dtype signature).
"""
import math

import numpy as np

from engine.core.kernels import jit as _kjit

_F32 = np.dtype(np.float32)
LANES = 16            # cblas_sasum's accumulators (see engine.core.blob.caffe_asum)
MIN_SIZE = 4 * LANES  # below this caffe_asum adds plainly; callers use NumPy


def _jit(fn):
    return _kjit.jit(fn)


def _summary_kernel(x, lanes):
    """Lanes of |x| (float32, sequential per lane) and, over all values, the float64
    sum and sum of squares, min and max ignoring NaN, and the count of zeros."""
    n = x.size
    m = (n // 16) * 16
    a = np.zeros(16, np.float32)
    s = np.zeros(16, np.float64)
    q = np.zeros(16, np.float64)
    mn = np.full(16, np.inf, np.float32)
    mx = np.full(16, -np.inf, np.float32)
    z = np.zeros(16, np.int64)
    for i in range(0, m, 16):
        for j in range(16):
            v = x[i + j]
            a[j] += abs(v)
            d = np.float64(v)
            s[j] += d
            q[j] += d * d
            mn[j] = min(mn[j], v)
            mx[j] = max(mx[j], v)
            z[j] += v == 0
    for i in range(m, n):
        v = x[i]
        d = np.float64(v)
        s[0] += d
        q[0] += d * d
        if v < mn[0]:
            mn[0] = v
        if v > mx[0]:
            mx[0] = v
        if v == 0:
            z[0] += 1
    for j in range(16):
        lanes[j] = a[j]
    return s.sum(), q.sum(), mn.min(), mx.max(), z.sum()


def _make_lanes_intrinsic():
    """Numba intrinsic lanes16(ptr, groups, out): ``out`` (16 float32 at address ``out``) =
    the sum of |x| over ``groups`` consecutive groups of 16 float32 at ``ptr``, lane j
    adding x[16 g + j] for g = 0, 1, ... in order: one <16 x float> accumulator, so each lane
    is exactly the sequential float32 sum of :func:`_lanes_kernel` (no reassociation), at
    the speed of one vector add per 64 bytes."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    from engine.core.kernels.jit import accumulate_loop, declare

    def codegen(context, builder, signature, args):
        ptr, groups, out = args
        vec = ir.VectorType(ir.FloatType(), LANES)
        vptr = vec.as_pointer()
        base = builder.inttoptr(ptr, vptr)
        fabs = declare(builder, "llvm.fabs.v%df32" % LANES, vec, [vec])

        def body(g, accs):      # one group of sixteen: the lanes += |x[16 g : 16 g + 16]|
            v = builder.load(builder.gep(base, [g]), align=4)
            return [builder.fadd(accs[0], builder.call(fabs, [v]))]

        res, = accumulate_loop(builder, groups, [ir.Constant(vec, None)], body, "lanes")
        builder.store(res, builder.inttoptr(out, vptr), align=4)
        return context.get_dummy_value()

    def lanes16(typingctx, ptr, groups, out):
        return types.void(types.intp, types.intp, types.intp), codegen

    return intrinsic(lanes16)


def _make_summary_intrinsic(part):
    """Numba intrinsic summary16(ptr, groups, lanes, sums, sqs, mins, maxs, zeros): over
    ``groups`` consecutive groups of 16 float32 at ``ptr``, lane j (value x[16 g + j])
    accumulates in order, as :func:`_summary_kernel`'s lane j does: |x| in float32, x and
    x * x (rounded, then added) in float64, the min and max ignoring NaN (a value replaces
    the lane's when it is smaller / larger) and the count of zeros.  The eight arguments
    after ``groups`` are addresses of 16-element arrays (float32, float32, float64, float64,
    float32, float32, int64) read as the starting values and written with the results:
    the same bits as the scalar loop, at vector speed.  The zeros are counted in 32-bit
    lanes (no widening in the loop) and added to the 64-bit ones at the end: callers pass
    fewer than 2**31 groups.

    ``part``: which accumulators this pass keeps -- "amz" (|x|, min, max, zeros) or "sq"
    (the float64 sums): all sixteen lanes of all six need the sixteen vector registers of an
    AVX2 core and more, and one pass keeping them all spilled them to the stack on every
    step (2.5x slower than the two passes, each lane's additions the same)."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    from engine.core.kernels.jit import accumulate_loop, declare

    keep = (0, 3, 4, 5) if part == "amz" else (1, 2)

    def codegen(context, builder, signature, args):
        ptr, groups, p_a, p_s, p_q, p_mn, p_mx, p_z = args
        f32v = ir.VectorType(ir.FloatType(), LANES)
        f64v = ir.VectorType(ir.DoubleType(), LANES)
        i64v = ir.VectorType(ir.IntType(64), LANES)
        base = builder.inttoptr(ptr, f32v.as_pointer())
        fabs = declare(builder, "llvm.fabs.v%df32" % LANES, f32v, [f32v])
        ptrs = [builder.inttoptr(p, t.as_pointer())
                for p, t in zip((p_a, p_s, p_q, p_mn, p_mx, p_z), (f32v, f64v, f64v, f32v, f32v, i64v))]
        zero = ir.Constant(f32v, None)
        i32v = ir.VectorType(ir.IntType(32), LANES)
        inits = [builder.load(ptrs[k], align=4) if k != 5 else ir.Constant(i32v, None) for k in keep]
        # (zeros counted in 32-bit lanes (groups < 2**31), added to the 64-bit ones after)

        def body(g, accs):
            v = builder.load(builder.gep(base, [g]), align=4)
            if part == "amz":
                a, mn, mx, z = accs
                a = builder.fadd(a, builder.call(fabs, [v]))
                mn = builder.select(builder.fcmp_ordered("<", v, mn), v, mn)
                mx = builder.select(builder.fcmp_ordered(">", v, mx), v, mx)
                z = builder.add(z, builder.zext(builder.fcmp_ordered("==", v, zero), i32v))
                return [a, mn, mx, z]
            sm, sq = accs
            d = builder.fpext(v, f64v)
            sm = builder.fadd(sm, d)
            sq = builder.fadd(sq, builder.fmul(d, d))
            return [sm, sq]

        outs = accumulate_loop(builder, groups, inits, body, "summary_" + part)
        for k, v in zip(keep, outs):
            if k == 5:
                v = builder.add(builder.load(ptrs[5], align=4), builder.zext(v, i64v))
            builder.store(v, ptrs[k], align=4)
        return context.get_dummy_value()

    def summary16(typingctx, ptr, groups, a, s, q, mn, mx, z):
        return types.void(*([types.intp] * 8)), codegen

    return intrinsic(summary16)


def _summary_vector_kernel(x, lanes):
    """:func:`_summary_kernel` with its sixteen lanes through the vector intrinsic (the
    same bits)."""
    n = x.size
    m = (n // 16) * 16
    a = np.zeros(16, np.float32)
    s = np.zeros(16, np.float64)
    q = np.zeros(16, np.float64)
    mn = np.full(16, np.inf, np.float32)
    mx = np.full(16, -np.inf, np.float32)
    z = np.zeros(16, np.int64)
    groups = n // 16
    chunk = 1 << 30                  # groups per call: the zero counts' 32-bit lanes cannot overflow
    for g0 in range(0, groups, chunk):
        _SUMMARY16(x.ctypes.data + 64 * g0, min(chunk, groups - g0), a.ctypes.data, s.ctypes.data,
                   q.ctypes.data, mn.ctypes.data, mx.ctypes.data, z.ctypes.data)
        _SUMMARY16_SQ(x.ctypes.data + 64 * g0, min(chunk, groups - g0), a.ctypes.data, s.ctypes.data,
                      q.ctypes.data, mn.ctypes.data, mx.ctypes.data, z.ctypes.data)
    for i in range(m, n):
        v = x[i]
        d = np.float64(v)
        s[0] += d
        q[0] += d * d
        if v < mn[0]:
            mn[0] = v
        if v > mx[0]:
            mx[0] = v
        if v == 0:
            z[0] += 1
    for j in range(16):
        lanes[j] = a[j]
    return s.sum(), q.sum(), mn.min(), mx.max(), z.sum()


def _lanes_vector_kernel(x, lanes):
    """:func:`_lanes_kernel` through the vector intrinsic (the same bits)."""
    _LANES16(x.ctypes.data, x.size // 16, lanes.ctypes.data)


def _lanes_kernel(x, lanes):
    n = x.size
    m = (n // 16) * 16
    a = np.zeros(16, np.float32)
    for i in range(0, m, 16):
        for j in range(16):
            a[j] += abs(x[i + j])
    for j in range(16):
        lanes[j] = a[j]


def _nonfinite_kernel(x):
    """(NaN count, Inf count, finite min, finite max); min > max when none is finite."""
    nan = 0
    inf = 0
    lo = np.inf
    hi = -np.inf
    for i in range(x.size):
        v = x[i]
        if v != v:
            nan += 1
        elif v == np.inf or v == -np.inf:
            inf += 1
        else:
            d = np.float64(v)
            if d < lo:
                lo = d
            if d > hi:
                hi = d
    return nan, inf, lo, hi


def _hist_kernel(x, starts, length, lo, scale, bins, check, counts, idx):
    """Bin x[s:s + length] for every s in ``starts`` into ``counts``; NaN/Inf are
    skipped when ``check``.  Without the check, the bins of a run are computed
    first (a loop the compiler vectorises) and counted after."""
    top = bins - 1
    ftop = np.float64(top)
    parts = 8
    part = np.zeros(parts * bins, np.int64)
    ubins = np.uint64(bins)
    for s in starts:
        if check:
            for i in range(s, s + length):
                v = np.float64(x[i])
                if v - v == 0:                   # finite
                    b = int((v - lo) * scale)
                    if b > top:
                        b = top
                    elif b < 0:
                        b = 0
                    counts[np.uint64(b)] += 1
        else:
            xs = x[s:s + length]
            for i in range(length):
                y = (np.float64(xs[i]) - lo) * scale
                y = y if y > 0.0 else 0.0
                idx[i] = np.int32(y if y < ftop else ftop)
            # eight partial histograms, so that runs of one bin do not wait on each other;
            # the bins indexed as unsigned (they are in [0, bins)): no negative-index
            # wrap-around test per count (half the histogram's time)
            m = length - length % parts
            for i in range(0, m, parts):
                for j in range(parts):
                    part[np.uint64(j) * ubins + np.uint64(idx[i + j])] += 1
            for i in range(m, length):
                counts[np.uint64(idx[i])] += 1
    if not check:
        for b in range(bins):
            t = 0
            for j in range(parts):
                t += part[j * bins + b]
            counts[b] += t


def _same_sample_kernel(x, step, fp):
    """Whether x[::step] equals ``fp`` value for value (a NaN equals nothing)."""
    m = fp.size
    if (x.size + step - 1) // step != m:
        return False
    for i in range(m):
        if x[i * step] != fp[i]:
            return False
    return True


def _abs_sum_kernel(a, start, n):
    """NumPy's float32 sum of |a[start:start + n]| for n <= 128 (PW_BLOCKSIZE): below
    eight values added in order, else eight accumulators along the values, added as a
    tree, then the values past the last full eight in order (its pairwise sum's one
    block; tests/test_fast_stats.py checks the bits against NumPy's)."""
    if n < 8:
        res = np.float32(0)
        for i in range(n):
            res += abs(a[start + i])
        return res
    r0 = abs(a[start])
    r1 = abs(a[start + 1])
    r2 = abs(a[start + 2])
    r3 = abs(a[start + 3])
    r4 = abs(a[start + 4])
    r5 = abs(a[start + 5])
    r6 = abs(a[start + 6])
    r7 = abs(a[start + 7])
    i = 8
    m = n - n % 8
    while i < m:
        j = start + i
        r0 += abs(a[j])
        r1 += abs(a[j + 1])
        r2 += abs(a[j + 2])
        r3 += abs(a[j + 3])
        r4 += abs(a[j + 4])
        r5 += abs(a[j + 5])
        r6 += abs(a[j + 6])
        r7 += abs(a[j + 7])
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += abs(a[start + i])
        i += 1
    return res


def _asum_of_lanes_kernel(x, lanes):
    """caffe_asum(x) (float32) from the sixteen |x| lanes of its full groups of sixteen:
    the lanes added as NumPy adds them plus the tail's |x| sum (:func:`_finish_asum`), or
    below MIN_SIZE values NumPy's plain |x| sum."""
    n = x.size
    if n < 64:
        return _abs_sum(x, 0, n)
    m = (n // 16) * 16
    return _abs_sum(lanes, 0, 16) + _abs_sum(x, m, n - m)


def _health_kernel(x):
    """(caffe_asum(x), that sum / count in float32): the health level's numbers."""
    lanes = np.zeros(16, np.float32)
    if x.size >= 64:
        _lanes(x, lanes)
    a = _asum_of_lanes(x, lanes)
    return a, a / np.float32(x.size)


def _full_kernel(x, starts, length, out, counts):
    """Every number of debug.BlobStats of x in one call (what :func:`summary`, :func:`histogram`
    and ``debug._finish`` compute, in the same float64 and float32 operations): ``out`` =
    [asum_mean, min, max, mean, std, l2, frac_zero, nan, inf, hist_lo, hist_hi]; into
    ``counts`` (zeros, one per bin) the histogram of the finite range (none when no value is
    finite), binning x[s:s + length] for every s in ``starts``."""
    n = x.size
    bins = counts.size
    lanes = np.empty(16, np.float32)
    tot, sq, mn, mx, z = _summary(x, lanes)
    a = _asum_of_lanes(x, lanes)
    nan = 0
    inf = 0
    mn64 = np.float64(mn)
    mx64 = np.float64(mx)
    lo = mn64
    hi = mx64
    if not np.isfinite(tot):
        nan, inf, lo, hi = _nonfinite(x)
        if nan:
            mn64 = np.nan
            mx64 = np.nan
        if nan == n:
            lo = np.inf
            hi = -np.inf
    if bins > 0 and lo <= hi:
        width = hi - lo
        if not width > 0:
            width = 1.0
        finite = nan == 0 and inf == 0
        idx = np.empty(length if finite else 0, np.int32)
        _hist(x, starts, length, lo, bins / width, bins, not finite, counts, idx)
    # debug._finish's arithmetic
    if not (np.isfinite(lo) and np.isfinite(hi)):
        lo = 0.0
        hi = 0.0
        counts[:] = 0
    elif not hi > lo:
        hi = lo + 1.0
    mean = tot / n
    if np.isfinite(sq) and np.isfinite(mean):
        var = sq / n - mean * mean
        if 0.0 > var:                   # Python's max(var, 0.0)
            var = 0.0
        std = np.sqrt(var)
    elif nan or np.isnan(sq) or np.isnan(mean):
        std = np.nan
    else:
        std = np.inf
    l2 = np.sqrt(sq) if sq >= 0 else np.nan
    if np.isnan(sq):
        l2 = np.nan
    out[0] = a / np.float32(n)
    out[1] = mn64
    out[2] = mx64
    out[3] = mean
    out[4] = std
    out[5] = l2
    out[6] = z / n
    out[7] = nan
    out[8] = inf
    out[9] = lo
    out[10] = hi


_summary_loop = _jit(_summary_kernel)
_summary = _jit(_summary_vector_kernel)
_lanes_loop = _jit(_lanes_kernel)
_lanes = _jit(_lanes_vector_kernel)
_nonfinite = _jit(_nonfinite_kernel)
_hist = _jit(_hist_kernel)
_same_sample = _jit(_same_sample_kernel)
_abs_sum = _jit(_abs_sum_kernel)
_asum_of_lanes = _jit(_asum_of_lanes_kernel)
_health = _jit(_health_kernel)
_full = _jit(_full_kernel)
_LANES16 = _SUMMARY16 = _SUMMARY16_SQ = None


def _make_lanes16():
    """The vector intrinsics, made before the loops are compiled (Numba imported); without
    llvmlite's IR builder (Numba's own dependency) :func:`asum` and :func:`summary` use the
    plain loops."""
    global _LANES16, _SUMMARY16, _SUMMARY16_SQ, _lanes, _summary
    try:
        _LANES16 = _make_lanes_intrinsic()
        _SUMMARY16 = _make_summary_intrinsic("amz")
        _SUMMARY16_SQ = _make_summary_intrinsic("sq")
    except Exception:  # pragma: no cover - an llvmlite without the IR API
        _lanes = _lanes_loop
        _summary = _summary_loop


_kjit.before_compiling(__name__, _make_lanes16)


def compiled():
    """True when the compiled functions exist: Numba imports (the first call imports it and
    makes them)."""
    return _kjit.materialize(_summary) is not None


def __getattr__(name):
    if name == "AVAILABLE":     # whether the compiled functions exist (imports Numba)
        return compiled()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def _finish_asum(x, lanes):
    """caffe_asum's last steps: the lanes added in float32 as NumPy adds them, plus
    the tail beyond the last full group of sixteen."""
    m = (x.size // LANES) * LANES
    tail = np.abs(x[m:]).sum(dtype=np.float32)
    return float(np.float32(lanes.sum(dtype=np.float32) + tail))


def usable(x, small=False):
    """True when the compiled path handles ``x`` (a flat contiguous float32 NumPy array
    of at least MIN_SIZE values; ``small``: of any nonzero size, for :func:`summary` with
    ``small=True``)."""
    return (type(x) is np.ndarray and x.dtype == _F32 and x.ndim == 1
            and (x.size >= MIN_SIZE or (small and x.size > 0)) and x.flags.c_contiguous and compiled())


def asum(x):
    """caffe_asum(x), bit for bit, in one compiled pass (``usable(x)`` must hold)."""
    lanes = np.empty(LANES, np.float32)
    _lanes(x, lanes)
    return _finish_asum(x, lanes)


def health(x):
    """(caffe_asum(x), its mean in float32 as Caffe divides it) of a flat float32 array
    (``usable(x, small=True)`` must hold), in one compiled call."""
    return _health(x)


def full(x, bins, sample=0):
    """([asum_mean, min, max, mean, std, l2, frac_zero, nan, inf, hist_lo, hist_hi], histogram
    counts, values binned or to be binned): debug.BlobStats's numbers of a flat float32 array
    (``usable(x, small=True)``), as :func:`summary`, :func:`histogram` and ``debug._finish``
    give them, in one compiled call."""
    n = x.size
    starts, length = sample_starts(n, n if not sample or sample >= n else int(sample))
    out = np.empty(11)
    counts = np.zeros(bins, np.int64)
    _full(x, starts, length, out, counts)
    v = out.tolist()
    v[7] = int(v[7])
    v[8] = int(v[8])
    return v, counts.tolist(), int(starts.size * length)


def same_sample(x, step, fp):
    """``(x[::step] == fp).all()`` with the shapes equal, in one compiled loop (``usable(x,
    small=True)`` must hold, ``fp`` flat and of x's dtype): the Recorder's fingerprint check."""
    return bool(_same_sample(x, step, fp))


def nonfinite(x):
    """(NaN count, Inf count, finite min, finite max) of a flat float array."""
    nan, inf, lo, hi = _nonfinite(x)
    return int(nan), int(inf), float(lo), float(hi)


def summary(x):
    """[asum, min, max, sum, sumsq, zeros, nan, inf, finite lo, finite hi] of a flat
    float32 array (``usable(x, small=True)`` must hold), as ``debug._host_summary`` orders them:
    min/max are NaN when a NaN is present (NumPy's rule); lo/hi are inf/-inf when no
    value is finite."""
    lanes = np.empty(LANES, np.float32)
    tot, sq, mn, mx, zeros = _summary(x, lanes)
    # Below MIN_SIZE caffe_asum adds |x| plainly (NumPy's float32 sum): that number, so
    # that debug_info's stays Caffe's bit for bit.
    a = _finish_asum(x, lanes) if x.size >= MIN_SIZE else float(np.abs(x).sum())
    mn, mx = float(mn), float(mx)
    nans = infs = 0
    lo, hi = mn, mx
    if not math.isfinite(tot):
        nans, infs, lo, hi = nonfinite(x)
        if nans:
            mn = mx = float("nan")
        if nans == x.size:
            lo, hi = math.inf, -math.inf
    return [a, mn, mx, float(tot), float(sq), int(zeros), nans, infs, lo, hi]


SAMPLE_RUN = 256     # a sample is made of runs of this many consecutive values


_STARTS = {}          # (n, k) -> sample_starts(n, k): a net asks for the same few
_ONE_RUN = np.zeros(1, np.int64)
_ONE_RUN.flags.writeable = False


def sample_starts(n, k):
    """Starts of the ``k // SAMPLE_RUN`` runs of a ``k``-value sample of an ``n``-value
    array: spread over the whole array at the golden ratio's quasi-random offsets
    (so that they do not follow its strides: channels, rows), sorted, not
    overlapping.  One run over everything when k >= n."""
    if k >= n or n <= SAMPLE_RUN:
        return _ONE_RUN, n
    got = _STARTS.get((n, k))
    if got is not None:
        return got
    runs = max(k // SAMPLE_RUN, 1)
    slots = n // SAMPLE_RUN                       # run-aligned positions
    runs = min(runs, slots)
    pos = np.floor(np.modf(np.arange(1, runs + 1) * 0.6180339887498949)[0] * slots).astype(np.int64)
    starts = np.unique(pos) * SAMPLE_RUN
    starts.flags.writeable = False
    if len(_STARTS) >= 256:
        _STARTS.clear()
    _STARTS[(n, k)] = starts, SAMPLE_RUN
    return starts, SAMPLE_RUN


def sample_size(n, k):
    """How many values :func:`histogram` bins for an ``n``-value array and sample ``k``."""
    if not k or k >= n:
        return n
    starts, length = sample_starts(n, k)
    return int(starts.size * length)


def histogram(x, lo, hi, bins, sample=0, finite=False):
    """Counts of the finite values of a flat float array in ``bins`` equal bins over
    [lo, hi] (the last bin closed); all values, or a sample of about ``sample`` of
    them (0: all) in runs of SAMPLE_RUN spread over the array.  ``finite``: the
    caller knows every value is finite.  Returns (counts, values binned or skipped)."""
    counts = np.zeros(bins, np.int64)
    n = x.size
    if not bins or not n:
        return counts, 0
    width = hi - lo
    if not width > 0:
        width = 1.0
    k = n if not sample or sample >= n else int(sample)
    starts, length = sample_starts(n, k)
    idx = np.empty(0 if not finite else length, np.int32)
    _hist(x, starts, length, float(lo), bins / width, bins, not finite, counts, idx)
    return counts, int(starts.size * length)

"""Single-precision GEMM for the host, compiled with Numba around a vector micro-kernel.

    gemm.usable(a, b, out)            # float32 host arrays, Numba present, not disabled
    gemm.matmul(a, b, out)            # out = a @ b      (2-D; out's rows contiguous)
    gemm.matmul(a, b, out, True)      # out += a @ b     (Caffe's gemm with beta = 1)

Why: NumPy's OpenBLAS picks its kernels by CPU model and falls back to its AVX2 (Haswell)
kernels on CPUs it does not know (AMD Zen 5 here: ~100 GFLOP/s a core on a convolution's
shapes), while the core runs AVX-512 FMAs at about twice that.  This GEMM is the classic
blocked algorithm (Goto / BLIS): ``a`` is packed into panels of MR rows, ``b`` is read in
place when its rows are contiguous (else packed into NR-column panels), and an MR x NR
micro-kernel keeps its tile of ``out`` in vector registers over a KC-long slice of the inner
dimension.  The micro-kernel is written in LLVM IR (``llvm.fma`` on ``<VL x float>``) through
a Numba intrinsic, so the host's widest vectors are used: VL = 16 with AVX-512, else 8 (MR is
smaller there, so that the tile still fits in 16 registers).  Results agree with any other
float32 GEMM to rounding (each element is a float32 FMA chain in k order within a KC slice,
slices added in order).

Threads: the column range is split over as many Python threads (the compiled code releases
the GIL) as NumPy's BLAS is allowed (threadpoolctl's view of it, so ``threadpool_limits`` and
OPENBLAS_NUM_THREADS apply), for products big enough to pay for it.

Numba (and llvmlite, for the host's vector width) is imported on first use, not with this
module (engine.core.kernels.jit): :func:`usable` (or ``AVAILABLE``) makes the compiled
functions, and :func:`micro_tile` reads the tile, the first time one is asked for.
"""
import os
import threading

import numpy as np

from engine.core.kernels import jit as _jit
from engine.core.kernels import threads as _threads

_MODE = os.environ.get("ENGINE_NUMBA_GEMM", "auto")
ENABLED = _MODE != "0"      # set False to use NumPy's matmul
#: "auto" (ENGINE_NUMBA_GEMM unset): :func:`matmul` runs compiled only on hosts with
#: AVX-512, where the wide tile beats OpenBLAS's AVX2 kernels; on an AVX2 host OpenBLAS's own
#: kernels are 10-60% faster on the convolutions' plain products (benchmarks/README.md,
#: issue 24) and NumPy's matmul serves them.  The implicit-GEMM convolution (conv2d.py, no
#: column matrix) asks with ``any_host=True`` and serves on any host.
#: ENGINE_NUMBA_GEMM=1 forces the compiled GEMM on any host.
WIDE_ONLY = _MODE not in ("0", "1")
KC = 512           # inner-dimension slice per micro-kernel call
MIN_THREAD_MACS = 1 << 22   # split over threads only above this many multiply-adds

_F32 = np.dtype(np.float32)


def _host_vector_width():
    try:
        from llvmlite import binding
        feats = binding.get_host_cpu_features()
        return 16 if feats.get("avx512f", False) else 8
    except Exception:  # pragma: no cover - llvmlite always comes with Numba
        return 8


NV = 2                                  # vectors per tile row
# The micro-kernel's tile: VL floats a vector (the host's widest), MR x NR; read once by
# micro_tile() (0 until then).
VL = MR = NR = 0


def micro_tile():
    """(MR, NR): MR = 8 rows of NR = 32 columns with AVX-512 (VL = 16), else 6 x 16
    (16 / 12 accumulators); the host's vector width is read once, here."""
    global VL, MR, NR
    if not NR:
        vl = _host_vector_width()
        VL, MR, NR = vl, (8 if vl == 16 else 6), NV * vl      # NR last: it says "read"
    return MR, NR


def _make_microkernel(accumulate, tables=False):
    """Numba intrinsic uk(kc, a, sai, sak, b, ldb, c, ldc): the MR x NR tile at address
    ``c`` (row stride ``ldc`` elements) = (``accumulate``: +=) sum over k < kc of
    a[r*sai + k*sak] * b[k*ldb + j] (strides in elements; ``b``'s rows: NR floats).

    ``tables``: ukt(kc, a, aoff, sak, b, boff, c, ldc), the same with row r of ``a`` at
    a + aoff[r] (+ k*sak) and row k of ``b`` at b + boff[k]: ``aoff`` (MR int64) and ``boff``
    (kc int64) are addresses of offset tables (elements).  Convolutions use it to read
    shifted rows of one zero-padded image in place (implicit GEMM, no column matrix)."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    def codegen(context, builder, signature, args):
        kc, a, a_rows_arg, sak, b, b_rows_arg, c, ldc = args
        i64, i32 = ir.IntType(64), ir.IntType(32)
        f32 = ir.FloatType()
        vec = ir.VectorType(f32, VL)
        fptr, vptr, iptr = f32.as_pointer(), vec.as_pointer(), i64.as_pointer()
        a0, b0, c0 = (builder.inttoptr(v, fptr) for v in (a, b, c))
        fma = _jit.declare(builder, "llvm.fma.v%df32" % VL, vec, [vec, vec, vec])
        zero = ir.Constant(vec, None)
        undef = ir.Constant(vec, ir.Undefined)
        splat_mask = ir.Constant(ir.VectorType(i32, VL), None)
        if tables:      # row r of a: a + aoff[r]
            ao, bo = builder.inttoptr(a_rows_arg, iptr), builder.inttoptr(b_rows_arg, iptr)
            a_rows = [builder.gep(a0, [builder.load(builder.gep(ao, [ir.Constant(i64, r)]), align=8)])
                      for r in range(MR)]
        else:           # row r of a: a + r*sai
            a_rows = [builder.gep(a0, [builder.mul(a_rows_arg, ir.Constant(i64, r))]) for r in range(MR)]

        def body(k, acc):           # one k: the MR x NR tile += a[:, k] (splat) * b[k, :]
            ka = builder.mul(k, sak)
            b_row = builder.load(builder.gep(bo, [k]), align=8) if tables else builder.mul(k, b_rows_arg)
            bp = builder.gep(b0, [b_row])
            bv = [builder.load(builder.bitcast(builder.gep(bp, [ir.Constant(i64, v * VL)]), vptr), align=4)
                  for v in range(NV)]
            new = []
            for r in range(MR):
                s = builder.load(builder.gep(a_rows[r], [ka]), align=4)
                sv = builder.shuffle_vector(builder.insert_element(undef, s, ir.Constant(i32, 0)), undef,
                                            splat_mask)
                for v in range(NV):
                    new.append(builder.call(fma, [sv, bv[v], acc[r * NV + v]]))
            return new

        outs = _jit.accumulate_loop(builder, kc, [zero] * (MR * NV), body, "uk")
        for r in range(MR):
            row = builder.gep(c0, [builder.mul(ldc, ir.Constant(i64, r))])
            for v in range(NV):
                q = builder.bitcast(builder.gep(row, [ir.Constant(i64, v * VL)]), vptr)
                val = outs[r * NV + v]
                if accumulate:
                    val = builder.fadd(builder.load(q, align=4), val)
                builder.store(val, q, align=4)
        return context.get_dummy_value()

    def uk(typingctx, kc, a, a_rows, sak, b, b_rows, c, ldc):
        return types.void(*([types.intp] * 8)), codegen

    return intrinsic(uk)


def _pack_b_loop(B, pc, kc, j0, w, bp):
    """Rows pc..pc+kc, columns j0..j0+w of B into one NR-wide panel, zero-padded."""
    if B.strides[0] == 4 and w == NR:          # B is a transposed C-contiguous array
        for j in range(w):
            for kk in range(kc):
                bp[kk * NR + j] = B[pc + kk, j0 + j]
        return
    for kk in range(kc):
        o = kk * NR
        for j in range(w):
            bp[o + j] = B[pc + kk, j0 + j]
        for j in range(w, NR):
            bp[o + j] = 0.0


def _sgemm_loop(A, B, C, accumulate, bp, tile):
    """C (+)= A @ B over float32 arrays; C's rows contiguous; ``bp``, ``tile`` scratch.

    A is read in place (any strides); B in place where its rows are contiguous, else (and
    for the last, partial column panel) packed into ``bp``."""
    M, K = A.shape
    N = B.shape[1]
    direct = B.strides[1] == 4 and B.strides[0] % 4 == 0
    ldc = C.strides[0] // 4
    sai = A.strides[0] // 4
    sak = A.strides[1] // 4
    if K == 0:
        if not accumulate:
            C[:, :] = 0.0
        return
    for pc in range(0, K, KC):
        kc = min(KC, K - pc)
        acc = accumulate or pc > 0
        for jr in range(0, N, NR):
            w = min(NR, N - jr)
            if direct and w == NR:
                bptr = B[pc:, jr:].ctypes.data
                ldb = B.strides[0] // 4
            else:
                _pack_b(B, pc, kc, jr, w, bp)
                bptr = bp.ctypes.data
                ldb = NR
            for ir in range(0, M, MR):
                h = min(MR, M - ir)
                if h == MR:
                    aptr = A[ir:, pc:].ctypes.data
                    if w == NR:
                        cptr = C[ir:, jr:].ctypes.data
                        if acc:
                            _UK_ADD(kc, aptr, sai, sak, bptr, ldb, cptr, ldc)
                        else:
                            _UK_SET(kc, aptr, sai, sak, bptr, ldb, cptr, ldc)
                        continue
                    _UK_SET(kc, aptr, sai, sak, bptr, ldb, tile.ctypes.data, NR)
                else:           # the last rows: through a zero-padded copy of A's slice
                    ap = tile[MR * NR:]
                    for i in range(MR):
                        for kk in range(kc):
                            ap[kk * MR + i] = A[ir + i, pc + kk] if i < h else 0.0
                    _UK_SET(kc, ap.ctypes.data, 1, MR, bptr, ldb, tile.ctypes.data, NR)
                for i in range(h):
                    for j in range(w):
                        if acc:
                            C[ir + i, jr + j] += tile[i * NR + j]
                        else:
                            C[ir + i, jr + j] = tile[i * NR + j]


# The micro-kernels (Numba intrinsics), made with the compiled loops below.
_UK_SET = _UK_ADD = UKT_SET = UKT_ADD = None


def _make_microkernels():
    global _UK_SET, _UK_ADD, UKT_SET, UKT_ADD
    micro_tile()
    _UK_SET = _make_microkernel(False)
    _UK_ADD = _make_microkernel(True)
    UKT_SET = _make_microkernel(False, tables=True)
    UKT_ADD = _make_microkernel(True, tables=True)


_jit.before_compiling(__name__, _make_microkernels)
_pack_b = _jit.jit(_pack_b_loop)
_sgemm = _jit.jit(_sgemm_loop)


def compiled():
    """True when the compiled GEMM exists: Numba imports (the first call imports it and
    makes the micro-kernels and the compiled loops)."""
    return _jit.materialize(_sgemm) is not None


def __getattr__(name):
    if name == "AVAILABLE":     # whether the compiled GEMM exists (imports Numba)
        return compiled()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ------------------------------------------------------------------ host side
_LOCAL = threading.local()
_POOL = None
_POOL_LOCK = threading.Lock()


def _scratch():
    """Per-thread packing buffers (grown once)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = (np.empty(KC * NR, _F32), np.empty(MR * NR + MR * KC, _F32))
    return bufs


def blas_threads():
    """Threads NumPy's BLAS may use now (threadpoolctl), 1 when that cannot be read."""
    return _threads.allowed("numpy")


def _pool(n):
    global _POOL
    with _POOL_LOCK:
        dead = _POOL is not None and any(not t.is_alive() for t in getattr(_POOL, "_threads", ()))
        if _POOL is None or _POOL._max_workers < n or dead:     # a new pool, all threads alive
            if dead:
                _POOL.shutdown(wait=False)
            from concurrent.futures import ThreadPoolExecutor
            _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="engine-gemm")
        return _POOL


def split_run(fn, count, macs, unit=1):
    """Run ``fn(i0, i1)`` over [0, count) split into as many spans (multiples of ``unit``)
    as :func:`blas_threads` allows for ``macs`` multiply-adds (one span, on this thread,
    below 2 x MIN_THREAD_MACS); returns the results in span order."""
    threads = _threads.choose_threads(macs, blas_threads(), MIN_THREAD_MACS) if macs >= 2 * MIN_THREAD_MACS else 1
    threads = min(threads, max(1, count // unit))
    if threads <= 1:
        return [fn(0, count)]
    step = -(-count // threads)
    step = -(-step // unit) * unit
    spans = [(i, min(count, i + step)) for i in range(0, count, step)]
    futs = [_pool(threads).submit(fn, i0, i1) for i0, i1 in spans[1:]]
    out = [fn(*spans[0])]
    for f, span in zip(futs, spans[1:]):
        # A span no worker has started yet runs here: the caller never waits on a queue
        # that a dead worker (e.g. one ended by an asynchronous SystemExit) would leave.
        out.append(fn(*span) if f.cancel() else f.result())
    return out


def usable(*arrays, any_host=False):
    """True where :func:`matmul` runs compiled: float32 host arrays, enabled, Numba present
    (imported by the first such question), and (unless forced, see WIDE_ONLY, or
    ``any_host``) a host with AVX-512."""
    if not ENABLED:
        return False
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype != _F32:
            return False
    if not compiled():
        return False
    return any_host or not WIDE_ONLY or wide_host()


def wide_host():
    """True on a host with AVX-512 (the micro-kernel's 16-float vectors)."""
    micro_tile()
    return VL == 16


def _one(a, b, out, accumulate):
    bp, tile = _scratch()
    _sgemm(a, b, out, accumulate, bp, tile)


def matmul(a, b, out, accumulate=False):
    """``out = a @ b`` (``accumulate``: ``out += a @ b``) for 2-D arrays; returns ``out``.

    Compiled where :func:`usable` (``out``'s rows contiguous), else NumPy's matmul."""
    m, k = a.shape
    n = b.shape[1]
    if out.shape != (m, n) or b.shape[0] != k:
        raise ValueError("gemm: shapes %s @ %s -> %s" % (a.shape, b.shape, out.shape))
    if not usable(a, b, out) or (m and out.strides[1] != 4) or out.strides[0] % 4:
        if accumulate:
            out += np.matmul(a, b)
        else:
            np.matmul(a, b, out=out)
        return out
    if m == 0 or n == 0:
        return out
    split_run(lambda j0, j1: _one(a, b[:, j0:j1], out[:, j0:j1], accumulate), n, m * n * k, NR)
    return out

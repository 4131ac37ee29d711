"""Per-channel passes of BatchNorm and Scale (and ReLU's) on the host, as few compiled loops.

BatchNorm (batch statistics) and Scale are written as chains of NumPy passes over the
blob: subtract the mean, square, sum, divide, copy; multiply, add the bias, copy the input
aside; multiply by the top diff, sum, ...  Each pass reads (and most write) the whole
blob.  The loops here make the same float32 operations, each rounded to float32 as the
NumPy pass rounds it, with one read of each input per (image, channel) row:

- elementwise chains are the same operations in the same order (no fused multiply-add:
  Numba compiles without fast-math, so LLVM contracts nothing);
- a sum over a row is NumPy's float32 ``sum`` over the contiguous last axis (its pairwise
  sum: :func:`_pw`, its eight accumulators in one vector register), returned per (outer,
  channel) row; the callers add the rows over the outer axis with NumPy, as before.

ReLU (negative_slope 0): NumPy's ``maximum(x, 0)``, which is not vectorised on this
NumPy for AVX2 (100 us for 131,072 values against 20 us here), and the backward's
``dy * (x > 0)`` without the mask array.

So the results are the NumPy passes', bit for bit (tests/layers/test_norm_fused.py
compares tops, Caffe's x_norm_ and temp_, running statistics and every diff).
``usable(*arrays)``: float32 C-contiguous host arrays and Numba present (imported by the
first such question).
"""
import numpy as np

from engine.core.kernels import jit as _jit
from engine.core.kernels.jit import jit, jit_with

ENABLED = True          # set False to keep the NumPy passes (tests compare both)

_BLOCK = 128            # NumPy's PW_BLOCKSIZE
_NUMPY_1 = int(np.__version__.split(".")[0]) < 2


def numpy_sum_chunk():
    """How many values of a row NumPy's float32 sum adds as one pairwise tree: on NumPy 1.x
    a reduction goes through the iterator's buffer (``np.getbufsize()`` values, 8192 unless
    a program set it), each chunk's tree added to the sum in turn; NumPy 2 adds the whole
    row as one tree (0)."""
    return int(np.getbufsize()) if _NUMPY_1 else 0


def usable(*arrays):
    """True where the compiled loops serve these arrays: float32, C-contiguous, on the host."""
    if not ENABLED:
        return False
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype != np.float32:
            return False
    return _jit.use(_bn_center_jit, *arrays) and ENABLED      # (the first use makes the intrinsics)


# ------------------------------------------------------------------ NumPy's pairwise sums
# NumPy's float32 add.reduce over a contiguous row: below eight values added in order from
# 0; up to 128 values eight accumulators (the first eight values), the later full eights
# added lane by lane, the lanes added as a tree, then the tail in order; above 128 the row
# is split at half (rounded down to a multiple of eight) and the halves' sums added.  The
# split is walked with an explicit stack (:func:`_pw`): Numba's on-disk cache does not
# load recursive functions back.
def _make_lanes8(kind):
    """Numba intrinsic lanes8(pa, pb, groups) -> float32: over ``groups`` (>= 1) consecutive
    groups of eight float32 at address ``pa`` (and ``pb``), eight accumulators starting at
    the first group's values (kind 0: a; 1: a * a; 2: a * b, each product rounded), lane j
    adding the value j of each later group in order, then the lanes added as
    ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)): NumPy's pairwise block, with its eight
    accumulators in one <8 x float> register (the same bits: no reassociation, no FMA)."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    from engine.core.kernels.jit import accumulate_loop

    def codegen(context, builder, signature, args):
        pa, pb, groups = args
        i64 = ir.IntType(64)
        vec = ir.VectorType(ir.FloatType(), 8)
        base_a = builder.inttoptr(pa, vec.as_pointer())
        base_b = builder.inttoptr(pb, vec.as_pointer())

        def value(g):
            v = builder.load(builder.gep(base_a, [g]), align=4)
            if kind == 1:
                return builder.fmul(v, v)
            if kind == 2:
                return builder.fmul(v, builder.load(builder.gep(base_b, [g]), align=4))
            return v

        def body(k, accs):
            return [builder.fadd(accs[0], value(builder.add(k, ir.Constant(i64, 1))))]

        acc, = accumulate_loop(builder, builder.sub(groups, ir.Constant(i64, 1)), [value(ir.Constant(i64, 0))],
                               body, "lanes8_%d" % kind)
        e = [builder.extract_element(acc, ir.Constant(ir.IntType(32), j)) for j in range(8)]
        return builder.fadd(builder.fadd(builder.fadd(e[0], e[1]), builder.fadd(e[2], e[3])),
                            builder.fadd(builder.fadd(e[4], e[5]), builder.fadd(e[6], e[7])))

    def lanes8(typingctx, pa, pb, groups):
        return types.float32(types.intp, types.intp, types.intp), codegen

    return intrinsic(lanes8)


_SUM8 = _SUMSQ8 = _DOT8 = None


def _make_intrinsics():
    """The vector intrinsics, made before the loops are compiled (Numba imported); without
    llvmlite's IR builder the NumPy passes stay (``usable`` says False)."""
    global _SUM8, _SUMSQ8, _DOT8, ENABLED
    try:
        _SUM8, _SUMSQ8, _DOT8 = (_make_lanes8(k) for k in range(3))
    except Exception:  # pragma: no cover - an llvmlite without the IR API
        ENABLED = False


_jit.before_compiling(__name__, _make_intrinsics)


def _val(kind, a, b, i):
    """a[i] (kind 0), a[i] * a[i] (1) or a[i] * b[i] (2), rounded to float32."""
    v = a[i]
    if kind == 1:
        return v * v
    if kind == 2:
        return v * b[i]
    return v


def _leaf(kind, a, b, s, n):
    """NumPy's float32 sum of a (kind 0), a * a (1) or a * b (2) over [s, s + n), n <= 128:
    below eight values in order from 0, else the eight lanes (:func:`_make_lanes8`) and
    then the values past the last full eight in order."""
    if n < 8:
        res = np.float32(0)
        for i in range(s, s + n):
            res += _val(kind, a, b, i)
        return res
    g = n // 8
    pa = a.ctypes.data + 4 * s
    pb = b.ctypes.data + 4 * s
    if kind == 0:
        res = _SUM8(pa, pb, g)
    elif kind == 1:
        res = _SUMSQ8(pa, pb, g)
    else:
        res = _DOT8(pa, pb, g)
    for i in range(s + 8 * g, s + n):
        res += _val(kind, a, b, i)
    return res


def _pw(kind, a, b, s, n, stk, vals, chunk):
    """NumPy's float32 sum of a row as this NumPy adds it: one pairwise tree
    (:func:`_pw_tree`) over the row, or with ``chunk`` > 0 (NumPy 1.x: its reductions go
    through the iterator's buffer, ``numpy_sum_chunk()`` values at a time) one tree per chunk,
    the chunks' sums added in order from zero."""
    if chunk <= 0 or n <= chunk:
        return _pw_tree(kind, a, b, s, n, stk, vals)
    acc = np.float32(0.0)
    done = 0
    while done < n:
        m = min(chunk, n - done)
        acc = acc + _pw_tree(kind, a, b, s + done, m, stk, vals)
        done += m
    return acc


def _pw_tree(kind, a, b, s, n, stk, vals):
    """NumPy's float32 sum (as :func:`_leaf`) of a row of any length: the halves' tree
    walked in post-order; ``stk`` (int64, 3 x 64) and ``vals`` (float32, 64) are scratch."""
    if n <= _BLOCK:
        return _leaf(kind, a, b, s, n)
    stk[0] = s
    stk[1] = n
    stk[2] = 0
    top = 1
    nv = 0
    while top > 0:
        f = (top - 1) * 3
        st = stk[f]
        ln = stk[f + 1]
        if ln <= _BLOCK:
            vals[nv] = _leaf(kind, a, b, st, ln)
            nv += 1
            top -= 1
            continue
        n2 = ln // 2
        n2 -= n2 % 8
        stage = stk[f + 2]
        if stage == 2:
            vals[nv - 2] = vals[nv - 2] + vals[nv - 1]
            nv -= 1
            top -= 1
            continue
        stk[f + 2] = stage + 1
        g = top * 3
        stk[g] = st if stage == 0 else st + n2
        stk[g + 1] = n2 if stage == 0 else ln - n2
        stk[g + 2] = 0
        top += 1
    return vals[0]


def _scratch():
    return np.empty(3 * 64, np.int64), np.empty(64, np.float32)


# ------------------------------------------------------------------ BatchNorm
def _bn_center(x, mean, xn, sq_rows, chunk):
    """xn = x - mean[c] (x, xn: (outer, C, inner)); sq_rows[o, c] = NumPy's sum of
    (xn * xn) over the row."""
    stk, vals = _scratch()
    O, C, S = x.shape
    for o in range(O):
        for c in range(C):
            xr = x[o, c]
            dr = xn[o, c]
            m = mean[c]
            for i in range(S):
                dr[i] = xr[i] - m
            sq_rows[o, c] = _pw(1, dr, dr, 0, S, stk, vals, chunk)


def _bn_divide(xn, std, y):
    """xn = xn / std[c]; y = xn (y may be the blob xn was computed from)."""
    O, C, S = xn.shape
    for o in range(O):
        for c in range(C):
            dr = xn[o, c]
            yr = y[o, c]
            d = std[c]
            for i in range(S):
                v = dr[i] / d
                dr[i] = v
                yr[i] = v


def _bn_global(x, mean, std, y):
    """y = (x - mean[c]) / std[c]; where y is x, written through x (so that the compiler
    sees one array and vectorises)."""
    inplace = x.ctypes.data == y.ctypes.data
    O, C, S = x.shape
    for o in range(O):
        for c in range(C):
            xr = x[o, c]
            m = mean[c]
            d = std[c]
            if inplace:
                for i in range(S):
                    xr[i] = (xr[i] - m) / d
            else:
                yr = y[o, c]
                for i in range(S):
                    yr[i] = (xr[i] - m) / d


def _bn_backward_sums(y, dy, dyy_rows, dy_rows, chunk):
    """NumPy's row sums of y * dy and of dy, per (outer, channel)."""
    stk, vals = _scratch()
    O, C, S = y.shape
    for o in range(O):
        for c in range(C):
            dyy_rows[o, c] = _pw(2, y[o, c], dy[o, c], 0, S, stk, vals, chunk)
            dy_rows[o, c] = _pw(0, dy[o, c], dy[o, c], 0, S, stk, vals, chunk)


def _bn_backward_out(y, dy, s_dyy, s_dy, k, std, out):
    """out = (dy + ((y * s_dyy[c] + s_dy[c]) * k)) / std[c], each step rounded (out may be dy)."""
    inplace = dy.ctypes.data == out.ctypes.data
    O, C, S = y.shape
    for o in range(O):
        for c in range(C):
            yr = y[o, c]
            gr = dy[o, c]
            a = s_dyy[c]
            b = s_dy[c]
            d = std[c]
            if inplace:
                for i in range(S):
                    g = yr[i] * a
                    g = g + b
                    g = g * k
                    gr[i] = (gr[i] + g) / d
            else:
                orow = out[o, c]
                for i in range(S):
                    g = yr[i] * a
                    g = g + b
                    g = g * k
                    orow[i] = (gr[i] + g) / d


# ------------------------------------------------------------------ Scale
def _scale_forward(x, s, b, with_bias, temp, keep, y):
    """y = x * s[c] (+ b[c]); temp = x first where ``keep`` (y may be x)."""
    inplace = x.ctypes.data == y.ctypes.data
    O, C, S = x.shape
    for o in range(O):
        for c in range(C):
            xr = x[o, c]
            sv = s[c]
            bv = b[c] if with_bias else np.float32(0)
            if keep:
                tr = temp[o, c]
                for i in range(S):
                    tr[i] = xr[i]
            yr = xr if inplace else y[o, c]
            if inplace and with_bias:
                for i in range(S):
                    xr[i] = xr[i] * sv + bv
            elif inplace:
                for i in range(S):
                    xr[i] = xr[i] * sv
            elif with_bias:
                for i in range(S):
                    yr[i] = xr[i] * sv + bv
            else:
                for i in range(S):
                    yr[i] = xr[i] * sv


def _scale_backward(dy, x, product, s, want_bias, bias_rows, want_scale, scale_rows, want_bottom, bd, chunk,
                    relu_x, with_relu):
    """Per (outer, channel) row, in this order: where ``with_relu``, first dy = dy * (relu_x >
    0) (the Backward of a ReLU in place on the Scale's top, relu_x its data, run on the row);
    bias_rows = NumPy's sum of dy; product = dy * x and scale_rows = its sum; bd = dy * s[c].
    ``product`` may be x (Caffe's temp_, in place) and ``bd`` may be dy (in place)."""
    product_is_x = product.ctypes.data == x.ctypes.data
    bd_is_dy = bd.ctypes.data == dy.ctypes.data
    stk, vals = _scratch()
    O, C, S = dy.shape
    for o in range(O):
        for c in range(C):
            gr = dy[o, c]
            if with_relu:
                rx = relu_x[o, c]
                for i in range(S):
                    gr[i] = gr[i] * (np.float32(1) if rx[i] > 0 else np.float32(0))
            if want_bias:
                bias_rows[o, c] = _pw(0, gr, gr, 0, S, stk, vals, chunk)
            if want_scale:
                xr = x[o, c]
                if product_is_x:
                    for i in range(S):
                        xr[i] = gr[i] * xr[i]
                    scale_rows[o, c] = _pw(0, xr, xr, 0, S, stk, vals, chunk)
                else:
                    pr = product[o, c]
                    for i in range(S):
                        pr[i] = gr[i] * xr[i]
                    scale_rows[o, c] = _pw(0, pr, pr, 0, S, stk, vals, chunk)
            if want_bottom:
                sv = s[c]
                if bd_is_dy:
                    for i in range(S):
                        gr[i] = gr[i] * sv
                else:
                    br = bd[o, c]
                    for i in range(S):
                        br[i] = gr[i] * sv


# ------------------------------------------------------------------ ReLU
def _relu_forward(x, y):
    """y = NumPy's maximum(x, 0): x where x > 0 or NaN, else +0 (-0 too, as NumPy's vector
    loop gives); y may be x."""
    z = np.float32(0)
    inplace = x.ctypes.data == y.ctypes.data
    if inplace:
        # through a small buffer: written back in place, the select became a conditional
        # store that the compiler does not vectorise (3-4x slower)
        tmp = np.empty(1024, np.float32)
        n = x.size
        for k in range(0, n, 1024):
            m = min(1024, n - k)
            u = x[k:k + m]
            for j in range(m):
                v = u[j]
                tmp[j] = v if (v > z or v != v) else z
            for j in range(m):
                u[j] = tmp[j]
    else:
        for i in range(x.size):
            v = x[i]
            y[i] = v if (v > z or v != v) else z


def _bn_scale_relu(train, a, mean, std, s, b, with_bias, temp, keep, relu, y):
    """BatchNorm's last pass, then a Scale's and a ReLU's, run in place after it, in one:
    v = x_norm / std[c] (``train``: written back to x_norm, a = x_norm) or (x - mean[c]) /
    std[c] (a = x); temp = v where ``keep`` (the Scale's copy of its input); y = v * s[c]
    (+ b[c]) and, where ``relu``, NumPy's maximum(y, 0).  Each value goes through the same
    float32 steps as _bn_divide / _bn_global, _scale_forward and _relu_forward give it."""
    z = np.float32(0)
    O, C, S = a.shape
    for o in range(O):
        for c in range(C):
            ar = a[o, c]
            yr = y[o, c]
            tr = temp[o, c]
            m = mean[c]
            d = std[c]
            sv = s[c]
            bv = b[c] if with_bias else z
            for i in range(S):
                v = ar[i] / d if train else (ar[i] - m) / d
                if train:
                    ar[i] = v
                if keep:
                    tr[i] = v
                w = v * sv + bv if with_bias else v * sv
                if relu:
                    w = w if (w > z or w != w) else z
                yr[i] = w


def _relu_backward(x, dy, bd):
    """bd = dy * (x > 0) (as float32 0 / 1: NumPy's multiply by the boolean mask); bd may
    be dy."""
    inplace = dy.ctypes.data == bd.ctypes.data
    if inplace:
        for i in range(x.size):
            dy[i] = dy[i] * (np.float32(1) if x[i] > 0 else np.float32(0))
    else:
        for i in range(x.size):
            bd[i] = dy[i] * (np.float32(1) if x[i] > 0 else np.float32(0))


_val = jit(_val)
_leaf = jit(_leaf)
_pw_tree = jit(_pw_tree)
_pw = jit(_pw)
_scratch = jit(_scratch)
_bn_center_jit = jit(_bn_center)
_bn_divide_jit = jit_with(error_model="numpy")(_bn_divide)
_bn_global_jit = jit_with(error_model="numpy")(_bn_global)
_bn_backward_sums_jit = jit(_bn_backward_sums)
_bn_backward_out_jit = jit_with(error_model="numpy")(_bn_backward_out)
_scale_forward_jit = jit(_scale_forward)
_bn_scale_relu_jit = jit_with(error_model="numpy")(_bn_scale_relu)
_scale_backward_jit = jit(_scale_backward)
_relu_forward_jit = jit(_relu_forward)
_relu_backward_jit = jit(_relu_backward)


# ------------------------------------------------------------------ callers
def bn_center(x, mean, xn):
    """xn = x - mean[c]; returns the (outer, C) row sums of xn * xn (NumPy's)."""
    rows = np.empty(x.shape[:2], np.float32)
    _bn_center_jit(x, mean, xn, rows, numpy_sum_chunk())
    return rows


def bn_divide(xn, std, y):
    """xn = xn / std[c]; y = xn."""
    _bn_divide_jit(xn, std, y)


def bn_global(x, mean, std, y):
    """y = (x - mean[c]) / std[c]."""
    _bn_global_jit(x, mean, std, y)


def bn_backward_sums(y, dy):
    """(row sums of y * dy, row sums of dy), each (outer, C)."""
    a = np.empty(y.shape[:2], np.float32)
    b = np.empty(y.shape[:2], np.float32)
    _bn_backward_sums_jit(y, dy, a, b, numpy_sum_chunk())
    return a, b


def bn_backward_out(y, dy, s_dyy, s_dy, k, std, out):
    """out = (dy + ((y * s_dyy[c] + s_dy[c]) * k)) / std[c]."""
    _bn_backward_out_jit(y, dy, s_dyy, s_dy, np.float32(k), std, out)


def scale_forward(x, s, b, temp, y):
    """y = x * s[c] (+ b[c] when b is not None); temp = x first when temp is not None."""
    _scale_forward_jit(x, s, s if b is None else b, b is not None, x if temp is None else temp, temp is not None, y)


def scale_backward(dy, x, product, s, bd, want_bias, want_scale, relu_x=None):
    """Row sums of dy (or None) and of the product dy * x written to ``product`` (or None);
    bd = dy * s[c] when bd is not None.  ``relu_x``: the data of a ReLU in place on the
    Scale's top, whose Backward (dy = dy * (relu_x > 0)) runs first, row by row."""
    shape = dy.shape[:2]
    bias_rows = np.empty(shape if want_bias else (1, 1), np.float32)
    scale_rows = np.empty(shape if want_scale else (1, 1), np.float32)
    x = dy if x is None else x
    _scale_backward_jit(dy, x, x if product is None else product, s, want_bias, bias_rows, want_scale, scale_rows,
                        bd is not None, dy if bd is None else bd, numpy_sum_chunk(),
                        dy if relu_x is None else relu_x, relu_x is not None)
    return (bias_rows if want_bias else None), (scale_rows if want_scale else None)


def bn_scale_relu(kind, a, mean, std, s, b, temp, relu, y):
    """BatchNorm's last pass (``kind`` "train": a = x_norm /= std; "global": a = x, its
    (x - mean) / std), a Scale's (y = v * s[c] (+ b[c]); temp = v first when temp is not
    None) and, where ``relu``, a ReLU's, in one pass: the values the three passes give."""
    train = kind == "train"
    _bn_scale_relu_jit(train, a, s if mean is None else mean, std, s, s if b is None else b, b is not None,
                       a if temp is None else temp, temp is not None, bool(relu), y)


def relu_forward(x, y):
    """y = maximum(x, 0) (NumPy's: NaN stays NaN)."""
    _relu_forward_jit(x.reshape(-1), y.reshape(-1))


def relu_backward(x, dy, bd):
    """bd = dy * (x > 0)."""
    _relu_backward_jit(x.reshape(-1), dy.reshape(-1), bd.reshape(-1))

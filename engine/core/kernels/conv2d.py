"""Stride-1 2-D convolution on the host as implicit GEMM: no column matrix.

For a stride-1, undilated convolution, Caffe's column matrix row (c, i, j) over the output
pixels is the zero-padded image plane c shifted by (i, j) -- if the output is laid out with
the padded image's row width Wq (``OH x Wq`` columns, of which the last Wq - OW of each row
are not outputs).  So ``out = W @ cols`` reads the padded image in place: the GEMM's B rows
start at ``c*Hq*Wq + i*Wq + j`` (:func:`engine.core.kernels.gemm.UKT_SET`, a micro-kernel
with offset tables), and the valid columns are copied out with the bias.  A padded row is
W + pw wide, not W + 2 pw: its right padding is the next row's left padding (:func:`_planes`),
so fewer columns are computed and dropped (3x3, pad 1: W + 1 per W outputs).  Per image, all in
one compiled call (no per-image Python):

- ``forward``: y = conv(x, W) + bias;
- ``backward_data``: dx = the same implicit GEMM on dy zero-padded by (k - 1 - pad) with the
  weights flipped and transposed (Caffe's col2im of W^T dy, summed in another order);
- ``backward_weights``: dW += sum over pixels of dy x shifted, as dW^T = shifted rows @ dy^T
  with dy packed (zeros in the columns that are not outputs).

``applies(layer geometry)`` says where it serves: 2-D, stride 1, dilation 1, group 1,
0 <= pad < kernel, float32 host arrays, Numba present (imported by the first such
question; engine.core.kernels.jit).  Results agree with im2col + GEMM to float32 rounding.
"""
import numpy as np

from engine.core.kernels import gemm
from engine.core.kernels import jit as _jit
from engine.core.kernels.jit import jit

KC = gemm.KC
MAX_STRIDE = 2      # strides served (phase planes: stride^2 of them per channel)
MR = NR = 0         # the GEMM's tile (gemm.micro_tile), bound before the loops are compiled


def _bind():
    global MR, NR
    gemm.compiled()                     # the micro-kernels the loops call
    MR, NR = gemm.micro_tile()


_jit.before_compiling(__name__, _bind)


def applies(kernel, stride, pad, dilation, group, *arrays):
    """True where these layer settings and arrays can use the implicit GEMM."""
    if not gemm.ENABLED or len(kernel) != 2 or group != 1:
        return False
    if any(not 1 <= s <= MAX_STRIDE for s in stride) or any(d != 1 for d in dilation):
        return False
    if any(not 0 <= p < k for p, k in zip(pad, kernel)):
        return False
    return gemm.usable(*arrays, any_host=True) and all(a.flags.c_contiguous for a in arrays) and compiled()


def compiled():
    """True when the compiled loops exist (the first call makes them: Numba imported)."""
    return _jit.materialize(_forward_jit) is not None


def _ceil(a, b):
    return -(-a // b) * b


def _planes(H, W, ph, pw, sh, sw):
    """(Hq, Wq): rows and row width of one plane of the zero-padded image.

    Stride 1: one plane per channel, H + 2 ph rows of W + pw: each row is its pw columns of
    left padding and its W values, and its right padding is the next row's left padding
    (zeros too), so an output row spans W + pw GEMM columns, of which kw - 1 - pw are not
    outputs (a 3x3 kernel with pad 1: one; rows of W + 2 pw: two).  The last row's right
    padding is the zeroed slack after the planes (:func:`sizes`).
    Stride (sh, sw): sh x sw phase planes per channel (plane (a, b) holds rows a, a + sh, ...
    and columns b, b + sw, ... of the image padded on both sides), so that an output row
    reads contiguous elements of one plane for every kernel tap."""
    if sh == 1 and sw == 1:
        return H + 2 * ph, W + pw
    return (H + 2 * ph + sh - 1) // sh, (W + 2 * pw + sw - 1) // sw


def sizes(C, H, W, O, kh, kw, ph, pw, sh=1, sw=1):
    """(padded image elements, rows x columns of the output buffer, padded A rows); the
    padded image's planes: :func:`_planes`."""
    Hq, Wq = _planes(H, W, ph, pw, sh, sw)
    OH = (H + 2 * ph - kh) // sh + 1
    Q = OH * Wq
    Qp = _ceil(max(Q, 1), NR)
    pad_elems = C * sh * sw * Hq * Wq + (Qp - Q) + Wq + kw + NR
    return pad_elems, _ceil(O, MR) * Qp, _ceil(O, MR)


# ------------------------------------------------------------------ compiled loops
def _pad_image_loop(x, n, ph, pw, xpad):
    """Image n of x (N, C, H, W) into the interior of the zero-padded planes in ``xpad``
    (C planes of (H + 2 ph) rows of W + pw, :func:`_planes`; the padding stays as it is:
    zero)."""
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    Hq, Wq = _planes_jit(H, W, ph, pw, 1, 1)
    for c in range(C):
        for h in range(H):
            d = c * Hq * Wq + (h + ph) * Wq + pw
            dst = xpad[d:d + W]
            src = x[n, c, h]
            for t in range(W):
                dst[t] = src[t]


_planes_jit = jit(_planes)
_pad_image = jit(_pad_image_loop)


def _pad_phases_loop(x, n, ph, pw, sh, sw, xpad):
    """Image n of x (N, C, H, W) zero-padded into sh x sw phase planes per channel (see
    :func:`sizes`): padded element (h, t) of channel c at plane (c, h % sh, t % sw), row
    h // sh, column t // sw (the rest stays as it is: zero)."""
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    Hq, Wq = _planes_jit(H, W, ph, pw, sh, sw)
    plane = Hq * Wq
    for c in range(C):
        for h in range(H):
            hh = h + ph
            row = ((c * sh + hh % sh) * sw) * plane + (hh // sh) * Wq
            src = x[n, c, h]
            for b in range(sw):
                t0 = (b - pw) % sw          # the first column of phase b
                d = row + b * plane + (t0 + pw) // sw
                for t in range(t0, W, sw):
                    xpad[np.uint64(d)] = src[np.uint64(t)]
                    d += 1


_pad_phases = jit(_pad_phases_loop)


def _tap_offsets(koff, C, kh, kw, Hq, Wq, sh, sw):
    """koff[(c, i, j)] = where tap (i, j) of channel c starts in the phase planes."""
    plane = Hq * Wq
    for c in range(C):
        for i in range(kh):
            for j in range(kw):
                koff[(c * kh + i) * kw + j] = ((c * sh + i % sh) * sw + j % sw) * plane + (i // sh) * Wq + j // sw


_tap_offsets_jit = jit(_tap_offsets)


def _forward_loop(x, w, bias, has_bias, kh, kw, ph, pw, sh, sw, y, xpad, outw, koff, aoff):
    """y (N, O, OH, OW) = conv(x (N, C, H, W), w (Op, C*kh*kw), zero rows past O)
    (+ bias), stride (sh, sw); xpad, outw: scratch (see sizes); koff (K), aoff (MR):
    int64 scratch."""
    N, C, H, W = x.shape
    O, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    Op, K = w.shape
    Hq, Wq = _planes_jit(H, W, ph, pw, sh, sw)
    Q = OH * Wq
    Qp = (Q + NR - 1) // NR * NR
    _tap_offsets_jit(koff, C, kh, kw, Hq, Wq, sh, sw)
    for r in range(MR):
        aoff[r] = r * K
    xpad[:] = 0.0
    wbase = w.ctypes.data
    strided = sh != 1 or sw != 1
    for n in range(N):
        if strided:
            _pad_phases(x, n, ph, pw, sh, sw, xpad)
        else:
            _pad_image(x, n, ph, pw, xpad)
        xb = xpad.ctypes.data
        ob = outw.ctypes.data
        for pc in range(0, K, KC):
            kc = min(KC, K - pc)
            kb = koff[pc:].ctypes.data
            for jr in range(0, Qp, NR):
                for ir in range(0, Op, MR):
                    a = wbase + (ir * K + pc) * 4
                    cp = ob + (ir * Qp + jr) * 4
                    if pc == 0:
                        gemm.UKT_SET(kc, a, aoff.ctypes.data, 1, xb + jr * 4, kb, cp, Qp)
                    else:
                        gemm.UKT_ADD(kc, a, aoff.ctypes.data, 1, xb + jr * 4, kb, cp, Qp)
        for o in range(O):
            bv = bias[o] if has_bias else np.float32(0.0)
            for oh in range(OH):
                s = o * Qp + oh * Wq
                src = outw[s:s + OW]
                dst = y[n, o, oh]
                for t in range(OW):
                    dst[t] = src[t] + bv


def _weights_loop(x, dy, kh, kw, ph, pw, sh, sw, dwt, xpad, bp, koff, aoff, bofs):
    """dwt (Kp, Op) += sum over images and output pixels of x shifted (row k) times
    dy (column o), stride (sh, sw): the weight gradient transposed, rows past K and
    columns past O junk.  ``bofs``: KC int64 of scratch (the packed rows' offsets),
    from the caller: an array made in here would have the cached loop's loading import
    Numba's array implementation (numba.np.arrayobj, ~0.06 s of a process's start)."""
    N, C, H, W = x.shape
    O, OH, OW = dy.shape[1], dy.shape[2], dy.shape[3]
    Kp, Op = dwt.shape
    K = C * kh * kw
    Hq, Wq = _planes_jit(H, W, ph, pw, sh, sw)
    Q = OH * Wq
    _tap_offsets_jit(koff, C, kh, kw, Hq, Wq, sh, sw)
    for k in range(K, Kp):
        koff[k] = 0
    for kk in range(KC):
        bofs[kk] = kk * NR
    xpad[:] = 0.0
    npanel = Op // NR
    strided = sh != 1 or sw != 1
    for n in range(N):
        if strided:
            _pad_phases(x, n, ph, pw, sh, sw, xpad)
        else:
            _pad_image(x, n, ph, pw, xpad)
        xb = xpad.ctypes.data
        for pc in range(0, Q, KC):
            kc = min(KC, Q - pc)
            # dy^T for pixels pc..pc+kc, NR columns (o) per panel, zeros off the outputs;
            # each o's pixels read in order (indices unsigned: no wrap-around tests)
            oh0 = pc // Wq
            ow0 = pc - oh0 * Wq
            for pn in range(npanel):
                base = pn * KC * NR
                for jo in range(NR):
                    o = pn * NR + jo
                    if o >= O:
                        for kk in range(kc):
                            bp[np.uint64(base + kk * NR + jo)] = np.float32(0.0)
                        continue
                    dyo = dy[n, o]
                    oh = oh0
                    ow = ow0
                    for kk in range(kc):
                        v = np.float32(0.0)
                        if ow < OW:
                            v = dyo[np.uint64(oh), np.uint64(ow)]
                        bp[np.uint64(base + kk * NR + jo)] = v
                        ow += 1
                        if ow == Wq:
                            ow = 0
                            oh += 1
            for ir in range(0, Kp, MR):
                for r in range(MR):
                    aoff[r] = koff[ir + r]
                for pn in range(npanel):
                    gemm.UKT_ADD(kc, xb + pc * 4, aoff.ctypes.data, 1, bp.ctypes.data + pn * KC * NR * 4,
                                 bofs.ctypes.data, dwt.ctypes.data + (ir * Op + pn * NR) * 4, Op)


_forward_jit = jit(_forward_loop)
_weights_jit = jit(_weights_loop)


# ------------------------------------------------------------------ host side
def _padded_weights(w2, rows, work):
    """w2 (O, K) in a (rows, K) array with zero rows past O."""
    O, K = w2.shape
    out = work(rows * K)[: rows * K].reshape(rows, K)
    out[:O] = w2
    out[O:] = 0
    return out


def _macs(x, y, w):
    return x.shape[0] * (y.size // max(y.shape[0], 1)) * (w.size // max(w.shape[0], 1))


def _need_compiled():
    if not compiled():
        raise RuntimeError("the implicit-GEMM convolution needs Numba (applies() says where it serves)")


def _empty(*arrays):
    """Nothing to compute: a batch of 0 (or any empty operand), as Caffe's loops over 0 images."""
    return any(a.size == 0 for a in arrays)


def forward(x, w, bias, pad, y, work, stride=(1, 1)):
    """y = conv(x, w) (+ bias) for a convolution of this ``stride``; ``work(name, n)`` gives a
    flat float32 scratch array of at least n elements (per thread), ``bias`` None for none.
    The images are split over threads as NumPy's BLAS threads allow."""
    N, C, H, W = x.shape
    O, _, kh, kw = w.shape
    ph, pw = pad
    sh, sw = stride
    if _empty(x, w, y):
        return
    _need_compiled()
    pad_elems, out_elems, rows = sizes(C, H, W, O, kh, kw, ph, pw, sh, sw)
    wp = _padded_weights(w.reshape(O, -1), rows, lambda n: work("cv.w", n))
    b = bias if bias is not None else wp[0, :1]

    def part(n0, n1):
        _forward_jit(x[n0:n1], wp, b, bias is not None, kh, kw, ph, pw, sh, sw, y[n0:n1],
                     work("cv.pad", pad_elems)[:pad_elems], work("cv.out", out_elems)[:out_elems],
                     _ints(work, "cv.koff", C * kh * kw), _ints(work, "cv.aoff", MR))

    gemm.split_run(part, N, _macs(x, y, w))


def backward_data(dy, w, pad, dx, work, stride=(1, 1)):
    """dx = the input gradient of a convolution: the implicit GEMM on dy padded by
    kernel - 1 - pad, with w flipped and its in/out channels swapped.  Stride (sh, sw) > 1:
    per phase (a, b) of the padded input (rows a, a + sh, ...; columns b, b + sw, ...), the
    same on the taps (a + sh m, b + sw n) of w, its result put in place in dx (rows and
    columns that no tap reaches: zero)."""
    N, O, OH, OW = dy.shape
    _, C, H, W = dx.shape
    kh, kw = w.shape[2:]
    sh, sw = stride
    if _empty(dy, w, dx):
        return
    if sh == 1 and sw == 1:
        wf = work("cv.wflip", w.size)[: w.size].reshape(C, O, kh, kw)
        wf[...] = w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
        forward(dy, wf, None, (kh - 1 - pad[0], kw - 1 - pad[1]), dx, work)
        return
    ph, pw = pad
    for a in range(sh):
        r0 = (a - ph) % sh          # first dx row of this phase; padded row r0 + ph
        u0 = (r0 + ph - a) // sh    # its row in the phase's (full) result
        ma = len(range(a, kh, sh))  # the taps of this phase: rows a, a + sh, ...
        for b in range(sw):
            c0 = (b - pw) % sw
            v0 = (c0 + pw - b) // sw
            nb = len(range(b, kw, sw))
            dst = dx[:, :, r0::sh, c0::sw]
            if ma == 0 or nb == 0 or dst.size == 0:
                dst[...] = 0
                continue
            fh, fw = OH + ma - 1, OW + nb - 1       # the full correlation's extent
            nu, nv = max(0, min(dst.shape[2], fh - u0)), max(0, min(dst.shape[3], fw - v0))
            n_w = C * O * ma * nb
            wf = work("cv.wflip", n_w)[:n_w].reshape(C, O, ma, nb)
            wf[...] = w[:, :, a::sh, b::sw][:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
            n_out = N * C * fh * fw
            full = work("cv.phase", n_out)[:n_out].reshape(N, C, fh, fw)
            forward(dy, wf, None, (ma - 1, nb - 1), full, work)
            if nu < dst.shape[2] or nv < dst.shape[3]:
                dst[...] = 0
            dst[:, :, :nu, :nv] = full[:, :, u0:u0 + nu, v0:v0 + nv]


def backward_weights(x, dy, pad, dw, work, stride=(1, 1)):
    """dw (O, C, kh, kw) += the weight gradient of a convolution of this ``stride``."""
    N, C, H, W = x.shape
    O, _, kh, kw = dw.shape
    K = C * kh * kw
    if _empty(x, dy, dw):       # no image: dW gets nothing added
        return
    _need_compiled()
    Kp, Op = -(-K // MR) * MR, -(-O // NR) * NR
    sh, sw = stride
    pad_elems = sizes(C, H, W, O, kh, kw, pad[0], pad[1], sh, sw)[0]

    def part(n0, n1):           # each thread sums its images into its own dW^T
        dwt = work("cv.dwt", Kp * Op)[: Kp * Op].reshape(Kp, Op)
        dwt[...] = 0
        _weights_jit(x[n0:n1], dy[n0:n1], kh, kw, pad[0], pad[1], sh, sw, dwt, work("cv.pad", pad_elems)[:pad_elems],
                     work("cv.bpack", KC * Op)[: KC * Op], _ints(work, "cv.koff", Kp), _ints(work, "cv.aoff", MR),
                     _ints(work, "cv.bofs", KC))
        if n0 == 0:             # the first span (this thread): added at once, so that a
            dw.reshape(O, K)[...] += dwt[:K, :O].T   # later span run here may reuse the buffer
            return None
        return dwt[:K, :O].copy()   # a thread may run two spans in turn: copied out

    for dwt in gemm.split_run(part, N, _macs(x, dy, dw)):
        if dwt is not None:     # the other spans, in span order after the first
            dw.reshape(O, K)[...] += dwt.T


def _ints(work, name, n):
    """An int64 scratch array of n elements (viewed from a float32 workspace)."""
    return work(name, 2 * n)[: 2 * n].view(np.int64)

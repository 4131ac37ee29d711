"""Depthwise 2-D convolution on the host (group = channels = num_output): direct loops.

Caffe runs a depthwise convolution as its grouped im2col + GEMM: per image and channel, a
1 x K (K = kh*kw) row of weights times the channel's K x P column matrix.  With one
output per group those products are tiny (1 x 9 @ 9 x P), and a GEMM call per channel,
plus the column matrix itself (9x the image), is most of the time.  These loops compute
the same sums from the image in place:

- ``forward``: y[n, c, oh, ow] = sum over (i, j) in Caffe's column order (kernel row, then
  column) of w[c, i, j] * x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] (taps in the padding
  are zeros: adding 0 changes nothing), then + bias[c], as Caffe's bias GEMM adds it;
- ``backward_data``: dx = Caffe's col2im of (w^T dy): every input pixel receives
  w[c, i, j] * dy[...] for each tap in the same (i, j, oh, ow) order as col2im adds them;
- ``backward_weights``: dw[c, i, j] += sum over images and output pixels of
  dy * x shifted, each image's sum added to dw in image order (Caffe's GEMM with beta = 1
  per image); within an image the pixels are summed along the output rows in vector lanes
  (as a vectorised GEMM does: equal to rounding).

Forward and input gradient give Caffe's sums in Caffe's order; the weight gradient agrees
to float32 rounding.  ``applies(...)``: 2-D, group = channels = num_output, float32 host
arrays, Numba present (imported by the first such question).
"""
import numpy as np

from engine.core.kernels import gemm
from engine.core.kernels import jit as _jit
from engine.core.kernels.jit import jit

ENABLED = True          # set False to keep Caffe's grouped im2col + GEMM (tests compare both)


def applies(group, channels, num_output, num_spatial, *arrays):
    """True where these layer settings and arrays can use the direct depthwise loops."""
    if not ENABLED or num_spatial != 2 or group <= 1 or not (group == channels == num_output):
        return False
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype != np.float32:
            return False
    return _jit.use(_forward_jit, *arrays)      # compiled (jit.ENABLED), C-contiguous


# ------------------------------------------------------------------ compiled loops
# Two forms.  Flat: the plane is copied into a zero-padded buffer of row width Wp = W + 2 pw,
# and the output is computed Wp columns a row (the last Wp - OW of each row are not
# outputs), so that every tap is one long run over the flat plane (as the implicit GEMM in
# conv2d.py reads it); with a stride (sh, sw) the padded plane is kept as sh x sw phase
# planes (rows a, a + sh, ...; columns b, b + sw, ...) of Hq x Wq, so that a tap's inputs for
# consecutive outputs are again consecutive (forward and weight gradient).  Otherwise (the
# input gradient with a stride, and planes holding a non-finite value, where a column that
# is not an output could meet it): per output row, over the row's valid span.  The inner
# loops run over 1-D views from index 0 (or unsigned indices), so that the compiler sees
# non-negative indices and vectorises them.  A 3x3 kernel (MobileNet's) takes its nine taps
# in one pass over the output instead of nine (_sum9: the forward, and the input gradient at
# stride 1 with the scatter turned into a gather): the same terms added in the same order, the
# image read once per tap and the output written once; on MobileNet v2's planes (7x7 to
# 56x56) about 1.2-1.6x faster.  The weight gradient's per-tap sums: on small planes eight
# partial sums in registers (_dot8), else 64 lanes folded in halves (_fold_lanes), not
# added one by one, which on a 7x7 plane had cost more than the products.
def _span(off, sw, OW, W):
    """Output columns [t0, t1) whose tap column t*sw + off falls inside [0, W)."""
    t0 = 0
    if off < 0:
        t0 = (-off + sw - 1) // sw
    t1 = OW
    if (OW - 1) * sw + off >= W:
        t1 = (W - 1 - off) // sw + 1
    return t0, max(t0, t1)


def _pad_plane(src, ph, pw, Wp, dst):
    """src (H, W) into the interior of the zero-bordered flat buffer ``dst`` (row width Wp);
    True when every value is finite."""
    H, W = src.shape
    ok = True
    for h in range(H):
        d = dst[(h + ph) * Wp + pw:(h + ph) * Wp + pw + W]
        r = src[h]
        for t in range(W):
            v = r[t]
            ok &= (v - v) == 0
            d[t] = v
    return ok


def _phase_dims(H, W, ph, pw, sh, sw):
    """(Hq, Wq): rows and row width of one phase plane of the zero-padded plane."""
    return (H + 2 * ph + sh - 1) // sh, (W + 2 * pw + sw - 1) // sw


def _pad_phase_planes(src, ph, pw, sh, sw, Hq, Wq, dst):
    """src (H, W) zero-padded into sh x sw phase planes in ``dst`` (phase (a, b) at
    (a * sw + b) * Hq * Wq: padded rows a, a + sh, ..., columns b, b + sw, ...; the padding
    stays as it is: zero); True when every value is finite.  Stride 1: :func:`_pad_plane`."""
    if sh == 1 and sw == 1:
        return _pad_plane(src, ph, pw, Wq, dst)
    H, W = src.shape
    plane = Hq * Wq
    ok = True
    for h in range(H):
        hh = h + ph
        r = src[h]
        row = (hh % sh) * sw * plane + (hh // sh) * Wq
        for b in range(sw):
            t0 = (b - pw) % sw          # the first column of phase b
            d = row + b * plane + (t0 + pw) // sw
            for t in range(t0, W, sw):
                v = r[np.uint64(t)]
                ok &= (v - v) == 0
                dst[np.uint64(d)] = v
                d += 1
    return ok


def _unpad_phase_planes(src, ph, pw, sh, sw, Hq, Wq, dst):
    """dst (H, W) = the interior of the phase planes in ``src`` (the inverse of
    :func:`_pad_phase_planes`)."""
    H, W = dst.shape
    plane = Hq * Wq
    for h in range(H):
        hh = h + ph
        d = dst[h]
        row = (hh % sh) * sw * plane + (hh // sh) * Wq
        if sh == 1 and sw == 1:
            s = src[row + pw:row + pw + W]
            for t in range(W):
                d[t] = s[t]
            continue
        for b in range(sw):
            t0 = (b - pw) % sw
            k = row + b * plane + (t0 + pw) // sw
            for t in range(t0, W, sw):
                d[np.uint64(t)] = src[np.uint64(k)]
                k += 1


def _tap_base(i, j, sh, sw, dh, dw, Hq, Wq):
    """Where tap (i, j)'s input for output (0, 0) sits in the phase planes."""
    a = i * dh
    b = j * dw
    return ((a % sh) * sw + b % sw) * Hq * Wq + (a // sh) * Wq + b // sw


def _taps9(w, c, sh, sw, dh, dw, Hq, Wq, wt, bt):
    """wt[k], bt[k] = tap k's weight and phase-plane base (k = 3 i + j, Caffe's column
    order) of channel ``c`` of a 3x3 kernel."""
    for i in range(3):
        for j in range(3):
            wt[3 * i + j] = w[c, i, j]
            bt[3 * i + j] = _tap_base(i, j, sh, sw, dh, dw, Hq, Wq)


def _sum9(src, st, wt, n, out):
    """out[r] (r < n) = the sum over the nine taps k of wt[k] * src[st[k] + r], added in tap
    order from 0, in one pass: ``src`` read nine times, ``out`` written once.

    Forward (st = the taps' bases in the padded image): the sum the tap loop makes one tap
    at a time.  Input gradient at stride 1 (src = dy's padded rows placed M into zeros,
    M >= every base; st = M - base): the gather form of the tap-by-tap scatter, each
    pixel's terms in the same order, a tap whose dy falls outside adding 0."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = wt[0], wt[1], wt[2], wt[3], wt[4], wt[5], wt[6], wt[7], wt[8]
    s0 = src[st[0]:st[0] + n]
    s1 = src[st[1]:st[1] + n]
    s2 = src[st[2]:st[2] + n]
    s3 = src[st[3]:st[3] + n]
    s4 = src[st[4]:st[4] + n]
    s5 = src[st[5]:st[5] + n]
    s6 = src[st[6]:st[6] + n]
    s7 = src[st[7]:st[7] + n]
    s8 = src[st[8]:st[8] + n]
    for r in range(n):
        v = np.float32(0.0)
        v += w0 * s0[r]
        v += w1 * s1[r]
        v += w2 * s2[r]
        v += w3 * s3[r]
        v += w4 * s4[r]
        v += w5 * s5[r]
        v += w6 * s6[r]
        v += w7 * s7[r]
        v += w8 * s8[r]
        out[r] = v


def _dot8(g, xs, n):
    """The float32 dot product of g[:n] and xs[:n] in eight interleaved partial sums (lane k
    takes r = k, k + 8, ...; the remainder goes to lane 0), added pairwise at the end: the
    sum a vectorised GEMM's inner product makes, kept in registers."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.float32(0.0)
    m = n - n % 8
    for r in range(0, m, 8):
        a0 += g[r] * xs[r]
        a1 += g[r + 1] * xs[r + 1]
        a2 += g[r + 2] * xs[r + 2]
        a3 += g[r + 3] * xs[r + 3]
        a4 += g[r + 4] * xs[r + 4]
        a5 += g[r + 5] * xs[r + 5]
        a6 += g[r + 6] * xs[r + 6]
        a7 += g[r + 7] * xs[r + 7]
    for r in range(m, n):
        a0 += g[r] * xs[r]
    return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))


def _bww_short(xpad, dypad, R, sh, sw, dh, dw, Hq, Wq, dwc):
    """dwc (kh, kw) += each tap's dot product of dy's R padded-row values with the image's
    run from the tap's base (:func:`_dot8`)."""
    kh, kw = dwc.shape
    g = dypad[:R]
    for i in range(kh):
        for j in range(kw):
            base = _tap_base(i, j, sh, sw, dh, dw, Hq, Wq)
            dwc[i, j] += _dot8(g, xpad[base:base + R], R)


def _bww_lanes(xpad, dypad, R, sh, sw, dh, dw, Hq, Wq, dwc, lanes):
    """:func:`_bww_short` for long runs: LANES partial sums a tap (lane t takes r = t,
    t + LANES, ...), folded (:func:`_fold_lanes`)."""
    kh, kw = dwc.shape
    for i in range(kh):
        for j in range(kw):
            base = _tap_base(i, j, sh, sw, dh, dw, Hq, Wq)
            a = lanes[:LANES]
            a[:] = 0.0
            for r0 in range(0, R, LANES):
                m = min(LANES, R - r0)
                xs = xpad[base + r0:base + r0 + m]
                gs = dypad[r0:r0 + m]
                for t in range(m):
                    a[t] += gs[t] * xs[t]
            dwc[i, j] += _fold_lanes(a)


def _fold_lanes(a):
    """The sum of the LANES partial sums in ``a`` (changed), halved in place down to eight
    (vector adds) and those eight added in order: a float32 sum of the lanes, as a
    vectorised GEMM's reduction makes it."""
    h = LANES // 2
    while h >= 8:
        for t in range(h):
            a[t] += a[t + h]
        h //= 2
    s = np.float32(0.0)
    for t in range(8):
        s += a[t]
    return s


def _forward_loop(x, w, bias, has_bias, sh, sw, ph, pw, dh, dw, y, acc, xpad, c0, c1):
    """y (N, C, OH, OW) = depthwise conv of x (N, C, H, W) with w (C, kh, kw) (+ bias), for
    channels c0..c1; ``acc``: max(OW, OH * Wp) floats, ``xpad``: the padded plane (stride 1)."""
    N, C, H, W = x.shape
    OH, OW = y.shape[2], y.shape[3]
    kh, kw = w.shape[1], w.shape[2]
    Hq, Wq = _phase_dims(H, W, ph, pw, sh, sw)
    R = OH * Wq
    xpad[:] = 0.0
    nine = kh == 3 and kw == 3
    wt = np.empty(9, np.float32)
    bt = np.empty(9, np.int64)
    for n in range(N):
        for c in range(c0, c1):
            bv = bias[c] if has_bias else np.float32(0.0)
            _pad_phase_planes(x[n, c], ph, pw, sh, sw, Hq, Wq, xpad)
            out = acc[:R]
            if nine:
                _taps9(w, c, sh, sw, dh, dw, Hq, Wq, wt, bt)
                _sum9(xpad, bt, wt, R, out)
            else:
                out[:] = 0.0
                for i in range(kh):
                    for j in range(kw):
                        wv = w[c, i, j]
                        base = _tap_base(i, j, sh, sw, dh, dw, Hq, Wq)
                        xs = xpad[base:base + R]
                        for r in range(R):
                            out[r] += wv * xs[r]
            for oh in range(OH):
                o = out[oh * Wq:oh * Wq + OW]
                yr = y[n, c, oh]
                for t in range(OW):
                    yr[t] = o[t] + bv


def _bwd_data_rows(dyp, wc, sh, sw, ph, pw, dh, dw, dxp):
    """One plane: dxp (H, W) = col2im of wc^T dyp, in col2im's order."""
    H, W = dxp.shape
    OH, OW = dyp.shape
    kh, kw = wc.shape
    dxp[:, :] = 0.0
    for i in range(kh):
        for j in range(kw):
            wv = wc[i, j]
            off = j * dw - pw
            t0, t1 = _span(off, sw, OW, W)
            if t1 == t0:
                continue
            for oh in range(OH):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= H:
                    continue
                d = dxp[ih, t0 * sw + off:(t1 - 1) * sw + off + 1:sw]
                g = dyp[oh, t0:t1]
                for t in range(t1 - t0):
                    d[t] += wv * g[t]


def _backward_data_loop(dy, w, sh, sw, ph, pw, dh, dw, dx, dypad, dxpad, c0, c1):
    """dx (N, C, H, W) = col2im of w^T dy for a depthwise convolution: every input pixel
    gets its taps' terms in col2im's order (taps (i, j), then output rows and columns);
    channels c0..c1; ``dypad`` (OH * Wq), ``dxpad`` (the padded phase planes): scratch.
    With a stride the taps add into the phase planes (:func:`_pad_phase_planes`), each
    pixel still receiving its taps' terms in tap order."""
    N, C, H, W = dx.shape
    OH, OW = dy.shape[2], dy.shape[3]
    kh, kw = w.shape[1], w.shape[2]
    Hq, Wq = _phase_dims(H, W, ph, pw, sh, sw)
    R = OH * Wq
    # 3x3, stride 1: the one-pass gather (_sum9) over the padded plane of P pixels, dy's rows
    # placed M into ``dypad`` (M + P long: see _flat_sizes' third figure)
    nine = kh == 3 and kw == 3 and sh == 1 and sw == 1
    P = Hq * Wq
    M = 2 * dh * Wq + 2 * dw
    wt = np.empty(9, np.float32)
    bt = np.empty(9, np.int64)
    dypad[:] = 0.0
    for c in range(c0, c1):
        finite = True
        for i in range(kh):
            for j in range(kw):
                finite &= (w[c, i, j] - w[c, i, j]) == 0
        if nine:
            _taps9(w, c, sh, sw, dh, dw, Hq, Wq, wt, bt)
            for k in range(9):
                bt[k] = M - bt[k]           # where each tap's dy starts for pixel 0
        for n in range(N):
            if not finite:     # a non-finite weight times a column that is no output
                _bwd_data_rows(dy[n, c], w[c], sh, sw, ph, pw, dh, dw, dx[n, c])
                continue
            if nine:
                for oh in range(OH):
                    d = dypad[M + oh * Wq:M + oh * Wq + OW]
                    g = dy[n, c, oh]
                    for t in range(OW):
                        d[t] = g[t]
                _sum9(dypad, bt, wt, P, dxpad)
                _unpad_phase_planes(dxpad, ph, pw, sh, sw, Hq, Wq, dx[n, c])
                continue
            for oh in range(OH):
                d = dypad[oh * Wq:oh * Wq + OW]
                g = dy[n, c, oh]
                for t in range(OW):
                    d[t] = g[t]
            dxpad[:] = 0.0
            for i in range(kh):
                for j in range(kw):
                    wv = w[c, i, j]
                    base = _tap_base(i, j, sh, sw, dh, dw, Hq, Wq)
                    ds = dxpad[base:base + R]
                    for r in range(R):
                        ds[r] += wv * dypad[r]
            _unpad_phase_planes(dxpad, ph, pw, sh, sw, Hq, Wq, dx[n, c])


def _bwd_weights_rows(xp, dyp, sh, sw, ph, pw, dh, dw, dwc, lanes):
    """One plane, per output row: dwc (kh, kw) += the sum over output pixels of dyp * xp
    shifted (partial sums per output column, then added)."""
    H, W = xp.shape
    OH, OW = dyp.shape
    kh, kw = dwc.shape
    for i in range(kh):
        for j in range(kw):
            off = j * dw - pw
            t0, t1 = _span(off, sw, OW, W)
            lanes[:OW] = 0.0
            if t1 > t0:
                a = lanes[t0:t1]
                for oh in range(OH):
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= H:
                        continue
                    g = dyp[oh, t0:t1]
                    xr = xp[ih, t0 * sw + off:(t1 - 1) * sw + off + 1:sw]
                    for t in range(t1 - t0):
                        a[t] += g[t] * xr[t]
            s = np.float32(0.0)
            for t in range(OW):
                s += lanes[t]
            dwc[i, j] += s


LANES = 64      # partial sums of the flat weight-gradient dot products
SHORT_DOT = 128  # up to this many products (7x7 planes; 14x14 at stride 2) a tap's sum is _dot8's


def _backward_weights_loop(x, dy, sh, sw, ph, pw, dh, dw, dwt, lanes, xpad, dypad, c0, c1):
    """dwt (C, kh, kw) += per image, the sum over output pixels of dy * x shifted, for
    channels c0..c1 (each image's sum added in image order, as Caffe's GEMM with beta = 1
    per image); ``lanes``: max(OW, LANES) floats; ``xpad``, ``dypad``: stride-1 scratch."""
    N, C, H, W = x.shape
    OH, OW = dy.shape[2], dy.shape[3]
    Hq, Wq = _phase_dims(H, W, ph, pw, sh, sw)
    R = OH * Wq
    xpad[:] = 0.0
    dypad[:] = 0.0
    for n in range(N):
        for c in range(c0, c1):
            # a column that is no output (dy 0 there) meets interior pixels: exact only
            # where those are finite
            if not _pad_phase_planes(x[n, c], ph, pw, sh, sw, Hq, Wq, xpad):
                _bwd_weights_rows(x[n, c], dy[n, c], sh, sw, ph, pw, dh, dw, dwt[c], lanes)
                continue
            for oh in range(OH):
                d = dypad[oh * Wq:oh * Wq + OW]
                g = dy[n, c, oh]
                for t in range(OW):
                    d[t] = g[t]
            if R <= SHORT_DOT:          # a small plane: each tap's sum in registers
                _bww_short(xpad, dypad, R, sh, sw, dh, dw, Hq, Wq, dwt[c])
            else:
                _bww_lanes(xpad, dypad, R, sh, sw, dh, dw, Hq, Wq, dwt[c], lanes)


_span = jit(_span)
_pad_plane = jit(_pad_plane)
_phase_dims = jit(_phase_dims)
_pad_phase_planes = jit(_pad_phase_planes)
_tap_base = jit(_tap_base)
_taps9 = jit(_taps9)
_sum9 = jit(_sum9)
_fold_lanes = jit(_fold_lanes)
_dot8 = jit(_dot8)
_bww_short = jit(_bww_short)
_bww_lanes = jit(_bww_lanes)
_unpad_phase_planes = jit(_unpad_phase_planes)
_bwd_data_rows = jit(_bwd_data_rows)
_bwd_weights_rows = jit(_bwd_weights_rows)
_forward_jit = jit(_forward_loop)
_backward_data_jit = jit(_backward_data_loop)
_backward_weights_jit = jit(_backward_weights_loop)


# ------------------------------------------------------------------ host side
def _split(fn, C, macs):
    """fn(c0, c1) over channel spans, on as many threads as NumPy's BLAS may use (the
    channels are independent: each span writes its own)."""
    gemm.split_run(fn, C, macs)


def _scratch(work, name, n):
    n = max(int(n), 1)
    return work(name, n)[:n]


def _flat_sizes(H, W, OH, kh, kw, ph, pw, dh, dw, sh=1, sw=1):
    """(padded plane elements, output rows x row width) of the flat form: the phase planes
    and what a tap's run reads past them (the last row's columns that are no outputs)."""
    Hq, Wq = (H + 2 * ph + sh - 1) // sh, (W + 2 * pw + sw - 1) // sw
    R = OH * Wq
    return max(sh * sw * Hq * Wq + (kw - 1) * dw // sw + 1, (kh - 1) * dh * Wq + (kw - 1) * dw + R), R


def forward(x, w, bias, stride, pad, dilation, y, work):
    """y = depthwise conv(x, w) (+ bias; None for none); x (N, C, H, W), w (C, 1, kh, kw);
    ``work(name, n)`` gives a flat float32 scratch array of at least n elements (per thread)."""
    if x.size == 0 or y.size == 0:
        return
    N, C, H, W = x.shape
    OH, OW = y.shape[2:]
    kh, kw = w.shape[-2:]
    w3 = w.reshape(C, kh, kw)
    b = bias if bias is not None else w3[:, 0, 0]
    L, R = _flat_sizes(H, W, OH, kh, kw, pad[0], pad[1], dilation[0], dilation[1], stride[0], stride[1])

    def part(c0, c1):
        _forward_jit(x, w3, b, bias is not None, stride[0], stride[1], pad[0], pad[1], dilation[0],
                     dilation[1], y, _scratch(work, "dw.acc", max(OW, R)), _scratch(work, "dw.xpad", L), c0, c1)
    _split(part, C, y.size * kh * kw)


def backward_data(dy, w, stride, pad, dilation, dx, work):
    """dx = the input gradient (overwritten) of a depthwise convolution."""
    if dx.size == 0:
        return
    if dy.size == 0:
        dx[...] = 0
        return
    N, C, H, W = dx.shape
    OH = dy.shape[2]
    kh, kw = w.shape[-2:]
    w3 = w.reshape(C, kh, kw)
    L, R = _flat_sizes(H, W, OH, kh, kw, pad[0], pad[1], dilation[0], dilation[1], stride[0], stride[1])

    if kh == 3 and kw == 3 and stride[0] == 1 and stride[1] == 1:      # the gather's dy, M into zeros
        Wq = W + 2 * pad[1]
        R = max(R, 2 * dilation[0] * Wq + 2 * dilation[1] + (H + 2 * pad[0]) * Wq)

    def part(c0, c1):
        _backward_data_jit(dy, w3, stride[0], stride[1], pad[0], pad[1], dilation[0], dilation[1], dx,
                           _scratch(work, "dw.dypad", R), _scratch(work, "dw.xpad", L), c0, c1)
    _split(part, C, dy.size * kh * kw)


def backward_weights(x, dy, stride, pad, dilation, dw, work):
    """dw (C, 1, kh, kw) += the weight gradient of a depthwise convolution."""
    if x.size == 0 or dy.size == 0:
        return
    N, C, H, W = x.shape
    OH, OW = dy.shape[2:]
    kh, kw = dw.shape[-2:]
    dw3 = dw.reshape(C, kh, kw)
    L, R = _flat_sizes(H, W, OH, kh, kw, pad[0], pad[1], dilation[0], dilation[1], stride[0], stride[1])

    def part(c0, c1):
        _backward_weights_jit(x, dy, stride[0], stride[1], pad[0], pad[1], dilation[0], dilation[1], dw3,
                              _scratch(work, "dw.lanes", max(OW, LANES)), _scratch(work, "dw.xpad", L),
                              _scratch(work, "dw.dypad", R), c0, c1)
    _split(part, C, dy.size * kh * kw)

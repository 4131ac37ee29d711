"""2-D pooling kernels (pooling_layer.cpp / .cu semantics).

``g`` is a :class:`PoolGeom`.  Windows start at ``p*stride - pad``; MAX and
STOCHASTIC windows are clipped to the image, AVE windows are clipped to the
padded image for the divisor and to the image for the sum, as Caffe does.
The MAX mask holds the flat index ``h * W + w`` in the bottom plane of the
first maximum in row-major window order (strict ``>``), -1 for an empty
window.  STOCHASTIC indices are global flat indices into the bottom.

CPU twins are vectorised over the kernel offsets (one pass per offset);
CuPy arrays go to CUDA kernels written after Caffe's.
"""
from collections import namedtuple

import numpy as np

from engine.core.kernels import cuda_source, is_gpu, launch, raw_kernel
from engine.core.kernels.jit import jit, use

_I = np.int32
FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)

PoolGeom = namedtuple("PoolGeom", "N C H W kh kw sh sw ph pw PH PW")


def _placement(g, window_end):
    """Where the image goes in the padded array: (rows, columns) of the image read, (rows,
    columns) they fill, and the padded array's (Hp, Wp).

    A negative pad (Caffe keeps a pad of 2^31 and up, read from its uint32 field, in an int)
    starts every window ``-pad`` inside the image: the rows before are dropped.  The rows after
    are read up to ``window_end`` (``"image"``: MAX's windows end at the image's end; ``"padded"``:
    AVE's at ``H + pad``, before it)."""
    src, dst, ext = [], [], []
    for size, pad, P, stride, k in ((g.H, g.ph, g.PH, g.sh, g.kh), (g.W, g.pw, g.PW, g.sw, g.kw)):
        start = max(-pad, 0)
        end = size + min(pad, 0) if window_end == "padded" else size
        end = max(end, start)
        at = max(pad, 0)
        src.append(slice(start, end))
        dst.append(slice(at, at + end - start))
        ext.append(max(at + end - start, (P - 1) * stride + k))
    return src, dst, ext


def _padded(x, g, fill, window_end="image"):
    """x (N, C, H, W) padded so every window (including ceil-rounded ones) fits."""
    src, dst, (Hp, Wp) = _placement(g, window_end)
    if g.ph == 0 and g.pw == 0 and Hp == g.H and Wp == g.W:
        return x
    xp = np.full((g.N, g.C, Hp, Wp), fill, dtype=x.dtype)
    xp[:, :, dst[0], dst[1]] = x[:, :, src[0], src[1]]
    return xp


def _win(a, g, i, j):
    """Offset (i, j) of every window: (N, C, PH, PW) strided slice of padded ``a``."""
    return a[:, :, i:i + (g.PH - 1) * g.sh + 1:g.sh, j:j + (g.PW - 1) * g.sw + 1:g.sw]


class _Phases:
    """Window offsets of a padded batch read from its stride phases.

    With stride s, offset (i, j) of every window lies in the phase plane
    a[..., i % s_h :: s_h, j % s_w :: s_w], shifted by (i // s_h, j // s_w).
    Copying each phase once makes every offset a slice with contiguous rows,
    which the elementwise passes run over much faster than stride-s gathers."""

    def __init__(self, a, g):
        self.a, self.g, self.cache = a, g, {}

    def phase(self, ri, rj):
        p = self.cache.get((ri, rj))
        if p is None:
            p = np.ascontiguousarray(self.a[:, :, ri::self.g.sh, rj::self.g.sw])
            self.cache[(ri, rj)] = p
        return p

    def win(self, i, j):
        g = self.g
        if g.sh == 1 and g.sw == 1:
            return self.a[:, :, i:i + g.PH, j:j + g.PW]
        qi, qj = i // g.sh, j // g.sw
        return self.phase(i % g.sh, j % g.sw)[:, :, qi:qi + g.PH, qj:qj + g.PW]


def ave_pool_size(g):
    """(PH, PW) divisors: the window clipped to the padded image (Caffe's pool_size)."""
    hs = np.arange(g.PH) * g.sh - g.ph
    ws = np.arange(g.PW) * g.sw - g.pw
    he = np.minimum(hs + g.kh, g.H + g.ph)
    we = np.minimum(ws + g.kw, g.W + g.pw)
    return ((he - hs)[:, None] * (we - ws)[None, :])


# ------------------------------------------------------------------ CPU twins
def _is_global(g):
    return (g.PH == 1 and g.PW == 1 and g.kh == g.H and g.kw == g.W and g.ph == 0 and g.pw == 0)


def _score_dtype(K):
    return np.uint8 if K < 256 else (np.uint16 if K < 65536 else np.uint32)


def _max_fwd_cpu(x, g, top, mask):
    """Max and first argmax: the max by ``maximum`` over the kernel offsets, then
    the first offset (row-major) holding it.  NaNs, maxima <= -FLT_MAX and empty
    windows take the exact scan below, which mirrors Caffe's loop (strict ``>``
    from -FLT_MAX)."""
    if _is_global(g) and g.H * g.W > 0:
        flat = x.reshape(g.N, g.C, -1)
        top[..., 0, 0] = flat.max(axis=-1)
        if top.min() > -FLT_MAX:
            mask[..., 0, 0] = flat.argmax(axis=-1)      # first occurrence, as Caffe
            return
    a = _padded(x, g, -np.inf)
    ph = _Phases(a, g)
    for i in range(g.kh):
        for j in range(g.kw):
            v = ph.win(i, j)
            if i == 0 and j == 0:
                np.copyto(top, v)
            else:
                np.maximum(top, v, out=top)
    if not top.min() > -FLT_MAX:
        return _max_fwd_scan(a, g, top, mask)
    # score = max over offsets t of (K - t) where the window value equals the max:
    # the first such t wins; branch-free passes instead of masked copies.
    K = g.kh * g.kw
    sdt = _score_dtype(K)
    score = np.zeros(top.shape, dtype=sdt)
    tmp = np.empty(top.shape, dtype=sdt)
    eq = np.empty(top.shape, dtype=bool)
    lut = np.zeros(K + 1, dtype=np.int32)
    t = 0
    for i in range(g.kh):
        for j in range(g.kw):
            np.equal(ph.win(i, j), top, out=eq)
            np.multiply(eq, sdt(K - t), out=tmp)
            np.maximum(score, tmp, out=score)
            lut[K - t] = i * g.W + j
            t += 1
    np.take(lut, score, out=mask)
    hs = np.arange(g.PH, dtype=np.int32) * np.int32(g.sh) - np.int32(g.ph)
    ws = np.arange(g.PW, dtype=np.int32) * np.int32(g.sw) - np.int32(g.pw)
    mask += hs[:, None] * np.int32(g.W) + ws[None, :]


def _max_fwd_scan(a, g, top, mask):
    top[...] = -FLT_MAX
    mask[...] = -1
    hs = np.arange(g.PH, dtype=np.int64) * g.sh - g.ph
    ws = np.arange(g.PW, dtype=np.int64) * g.sw - g.pw
    better = np.empty(top.shape, dtype=bool)
    for i in range(g.kh):
        for j in range(g.kw):
            v = _win(a, g, i, j)
            np.greater(v, top, out=better)
            np.copyto(top, v, where=better)
            idx = ((hs + i)[:, None] * g.W + (ws + j)[None, :]).astype(np.int32)
            np.copyto(mask, idx, where=better)


def _max_bwd_cpu(dtop, mask, g, dx):
    """dx (N, C, H, W) = scatter-add of dtop at the mask positions."""
    N, C, HW = g.N, g.C, g.H * g.W
    m = mask.reshape(N * C, -1).astype(np.int64)
    flat = m + (np.arange(N * C, dtype=np.int64) * HW)[:, None]
    d = dtop.reshape(N * C, -1)
    valid = m >= 0
    if not valid.all():
        flat, d = flat[valid], d[valid]
    else:
        flat, d = flat.reshape(-1), d.reshape(-1)
    out = dx.reshape(-1)
    if g.sh >= g.kh and g.sw >= g.kw:
        # Windows do not overlap: every bottom element gets at most one gradient.
        out[...] = 0
        out[flat] = d
    else:
        out[...] = np.bincount(flat, weights=d, minlength=N * C * HW).astype(dx.dtype, copy=False)


def _ave_fwd_cpu(x, g, top):
    if _is_global(g) and g.H * g.W > 0:
        # One window over the whole plane: a running sum in row-major order, as Caffe adds.
        sums = np.cumsum(x.reshape(g.N, g.C, -1), axis=-1)[..., -1]
        np.divide(sums, x.dtype.type(g.H * g.W), out=top[..., 0, 0])
        return
    ph = _Phases(_padded(x, g, 0, "padded"), g)
    acc = np.zeros(top.shape, dtype=x.dtype)
    for i in range(g.kh):
        for j in range(g.kw):
            acc += ph.win(i, j)
    size = ave_pool_size(g).astype(x.dtype)
    np.divide(acc, size, out=top)


def _ave_bwd_cpu(dtop, g, dx):
    src, dst, (Hp, Wp) = _placement(g, "padded")
    grad = dtop / ave_pool_size(g).astype(dtop.dtype)
    if g.ph == 0 and g.pw == 0 and Hp == g.H and Wp == g.W:
        acc = dx
    else:
        acc = np.empty((g.N, g.C, Hp, Wp), dtype=dtop.dtype)
    # Accumulate per stride phase (contiguous rows), in reverse offset order: that
    # is Caffe's (ph, pw) ascending order for each bottom element.
    phases = {}
    for i in reversed(range(g.kh)):
        for j in reversed(range(g.kw)):
            key = (i % g.sh, j % g.sw)
            p = phases.get(key)
            if p is None:
                p = phases[key] = np.zeros(acc[:, :, key[0]::g.sh, key[1]::g.sw].shape, dtype=acc.dtype)
            qi, qj = i // g.sh, j // g.sw
            p[:, :, qi:qi + g.PH, qj:qj + g.PW] += grad
    if len(phases) < g.sh * g.sw:
        acc[...] = 0
    for (ri, rj), p in phases.items():
        acc[:, :, ri::g.sh, rj::g.sw] = p
    if acc is not dx:
        if src[0].stop - src[0].start != g.H or src[1].stop - src[1].start != g.W:
            dx[...] = 0                 # a negative pad: no window reads the border
        dx[:, :, src[0], src[1]] = acc[:, :, dst[0], dst[1]]


def _sto_windows(x, g):
    """(N, C, PH, PW, kh*kw) window values (0 outside the image) and validity."""
    a = _padded(x, g, 0)
    K = g.kh * g.kw
    win = np.empty((g.N, g.C, g.PH, g.PW, K), dtype=x.dtype)
    hs = np.arange(g.PH) * g.sh
    ws = np.arange(g.PW) * g.sw
    valid = np.empty((g.PH, g.PW, K), dtype=bool)
    for i in range(g.kh):
        for j in range(g.kw):
            win[..., i * g.kw + j] = _win(a, g, i, j)
            valid[..., i * g.kw + j] = (hs + i < g.H)[:, None] & (ws + j < g.W)[None, :]
    return win, valid


def _sto_train_cpu(x, g, u, top, idx):
    win, valid = _sto_windows(x, g)
    cums = np.cumsum(win, axis=-1)
    thres = (u * cums[..., -1]).astype(np.float32)
    hit = (cums >= thres[..., None]) & valid
    k = np.argmax(hit, axis=-1)
    top[...] = np.take_along_axis(win, k[..., None], axis=-1)[..., 0]
    hs = np.arange(g.PH)[:, None] * g.sh
    ws = np.arange(g.PW)[None, :] * g.sw
    h = hs + k // g.kw
    w = ws + k % g.kw
    nc = np.arange(g.N * g.C).reshape(g.N, g.C, 1, 1)
    idx[...] = (nc * g.H + h) * g.W + w


def _sto_test_cpu(x, g, top):
    a = _padded(x, g, 0)
    s = np.full(top.shape, FLT_MIN, dtype=x.dtype)
    v = np.zeros(top.shape, dtype=x.dtype)
    for i in range(g.kh):
        for j in range(g.kw):
            w = _win(a, g, i, j)
            s += w
            v += w * w
    np.divide(v, s, out=top)


def _sto_bwd_cpu(dtop, idx, g, dx):
    out = dx.reshape(-1)
    out[...] = np.bincount(idx.reshape(-1).astype(np.int64), weights=dtop.reshape(-1),
                           minlength=out.size).astype(dx.dtype, copy=False)


# ------------------------------------------------------------------ compiled CPU loops
# Caffe's pooling_layer.cpp loops, compiled (engine.core.kernels.jit): no temporaries,
# the same order of additions as Caffe (float32 accumulation in the output).  Flat indices,
# never negative, go in as unsigned (np.uint64): Numba then emits no negative-index
# wrap-around per access, which kept the loops from being compiled tight (MAX forward on
# CIFAR-10 quick's pool1: 19 -> 9 ms; engine.core.kernels.jit says more).
def _max_fwd_loop(x, N, C, H, W, kh, kw, sh, sw, ph, pw, PH, PW, top, mask):
    neg = np.float32(-FLT_MAX)
    for nc in range(N * C):
        xo = nc * H * W
        to = nc * PH * PW
        for i in range(PH):
            hs = i * sh - ph
            he = min(hs + kh, H)
            hs = max(hs, 0)
            for j in range(PW):
                ws = j * sw - pw
                we = min(ws + kw, W)
                ws = max(ws, 0)
                m = neg
                idx = -1
                for h in range(hs, he):
                    for w in range(ws, we):
                        v = x[np.uint64(xo + h * W + w)]
                        if v > m:
                            m = v
                            idx = h * W + w
                top[np.uint64(to + i * PW + j)] = m
                mask[np.uint64(to + i * PW + j)] = idx


def _max_bwd_loop(dtop, mask, N, C, HW, PHW, dx):
    for k in range(N * C * HW):
        dx[k] = 0
    for nc in range(N * C):
        for t in range(PHW):
            m = mask[np.uint64(nc * PHW + t)]
            if m >= 0:
                dx[np.uint64(nc * HW + m)] += dtop[np.uint64(nc * PHW + t)]


def _ave_window_loop(i, j, H, W, kh, kw, sh, sw, ph, pw):
    """Output (i, j)'s window of AVE pooling: its rows h0..h1 and columns w0..w1 inside the
    image, and Caffe's divisor (the window clipped to the padded image, padding counted)."""
    hs = i * sh - ph
    he = min(hs + kh, H + ph)
    ws = j * sw - pw
    we = min(ws + kw, W + pw)
    return max(hs, 0), min(he, H), max(ws, 0), min(we, W), (he - hs) * (we - ws)


_ave_window = jit(_ave_window_loop)


def _ave_fwd_loop(x, N, C, H, W, kh, kw, sh, sw, ph, pw, PH, PW, top, size_t):
    # size_t: one element of the blob's type, the window size converted (Caffe: Dtype / int).
    # The caller allocates it: an array made in here would have the cached loop's loading
    # import Numba's array implementation (numba.np.arrayobj, ~0.06 s of a process's start).
    for nc in range(N * C):
        xo = nc * H * W
        to = nc * PH * PW
        for i in range(PH):
            for j in range(PW):
                h0, h1, w0, w1, size = _ave_window(i, j, H, W, kh, kw, sh, sw, ph, pw)
                k = np.uint64(to + i * PW + j)
                top[k] = 0
                acc = top[k]            # the output's type: its float32 sums, in a register
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        acc += x[np.uint64(xo + h * W + w)]
                size_t[0] = size
                top[k] = acc / size_t[0]


def _ave_bwd_loop(dtop, N, C, H, W, kh, kw, sh, sw, ph, pw, PH, PW, dx, size_t):
    # size_t: one element of dx's type (the caller's: see _ave_fwd_loop)
    for k in range(N * C * H * W):
        dx[k] = 0
    for nc in range(N * C):
        xo = nc * H * W
        to = nc * PH * PW
        for i in range(PH):
            for j in range(PW):
                h0, h1, w0, w1, size = _ave_window(i, j, H, W, kh, kw, sh, sw, ph, pw)
                size_t[0] = size
                g = dtop[np.uint64(to + i * PW + j)] / size_t[0]
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        dx[np.uint64(xo + h * W + w)] += g


_max_fwd_jit = jit(_max_fwd_loop)
_max_bwd_jit = jit(_max_bwd_loop)
_ave_fwd_jit = jit(_ave_fwd_loop)
_ave_bwd_jit = jit(_ave_bwd_loop)


def _gi(g):
    return (g.N, g.C, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.PH, g.PW)


# ------------------------------------------------------------------ CUDA
_GEOM_ARGS = ("const int C, const int H, const int W, const int PH, const int PW, "
              "const int kh, const int kw, const int sh, const int sw, const int ph, const int pw")

_LOOP = ("for (int index = blockIdx.x * blockDim.x + threadIdx.x; index < total; "
         "index += blockDim.x * gridDim.x)")

_MAX_FWD = cuda_source("max_pool_fwd", r"""
extern "C" __global__ void max_pool_fwd(const int total, const T* x, %(g)s, T* top, int* mask) {
  %(loop)s {
    const int pw_ = index %% PW;
    const int ph_ = (index / PW) %% PH;
    const int nc = index / PW / PH;
    int hstart = ph_ * sh - ph;
    int wstart = pw_ * sw - pw;
    const int hend = min(hstart + kh, H);
    const int wend = min(wstart + kw, W);
    hstart = max(hstart, 0);
    wstart = max(wstart, 0);
    T maxval = -3.402823466e+38;
    int maxidx = -1;
    const T* xs = x + (long long)nc * H * W;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) {
        if (xs[h * W + w] > maxval) {
          maxidx = h * W + w;
          maxval = xs[maxidx];
        }
      }
    }
    top[index] = maxval;
    mask[index] = maxidx;
  }
}
""" % {"g": _GEOM_ARGS, "loop": _LOOP})

_MAX_BWD = cuda_source("max_pool_bwd", r"""
extern "C" __global__ void max_pool_bwd(const int total, const T* dtop, const int* mask, %(g)s,
    T* dx) {
  %(loop)s {
    const int w = index %% W;
    const int h = (index / W) %% H;
    const int nc = index / W / H;
    const int phstart = (h + ph < kh) ? 0 : (h + ph - kh) / sh + 1;
    const int phend = min((h + ph) / sh + 1, PH);
    const int pwstart = (w + pw < kw) ? 0 : (w + pw - kw) / sw + 1;
    const int pwend = min((w + pw) / sw + 1, PW);
    T gradient = 0;
    const long long off = (long long)nc * PH * PW;
    for (int i = phstart; i < phend; ++i) {
      for (int j = pwstart; j < pwend; ++j) {
        if (mask[off + i * PW + j] == h * W + w) {
          gradient += dtop[off + i * PW + j];
        }
      }
    }
    dx[index] = gradient;
  }
}
""" % {"g": _GEOM_ARGS, "loop": _LOOP})

_AVE_FWD = cuda_source("ave_pool_fwd", r"""
extern "C" __global__ void ave_pool_fwd(const int total, const T* x, %(g)s, T* top) {
  %(loop)s {
    const int pw_ = index %% PW;
    const int ph_ = (index / PW) %% PH;
    const int nc = index / PW / PH;
    int hstart = ph_ * sh - ph;
    int wstart = pw_ * sw - pw;
    int hend = min(hstart + kh, H + ph);
    int wend = min(wstart + kw, W + pw);
    const int pool_size = (hend - hstart) * (wend - wstart);
    hstart = max(hstart, 0);
    wstart = max(wstart, 0);
    hend = min(hend, H);
    wend = min(wend, W);
    T aveval = 0;
    const T* xs = x + (long long)nc * H * W;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) {
        aveval += xs[h * W + w];
      }
    }
    top[index] = aveval / pool_size;
  }
}
""" % {"g": _GEOM_ARGS, "loop": _LOOP})

_AVE_BWD = cuda_source("ave_pool_bwd", r"""
extern "C" __global__ void ave_pool_bwd(const int total, const T* dtop, %(g)s, T* dx) {
  %(loop)s {
    const int w = index %% W + pw;
    const int h = (index / W) %% H + ph;
    const int nc = index / W / H;
    const int phstart = (h < kh) ? 0 : (h - kh) / sh + 1;
    const int phend = min(h / sh + 1, PH);
    const int pwstart = (w < kw) ? 0 : (w - kw) / sw + 1;
    const int pwend = min(w / sw + 1, PW);
    T gradient = 0;
    const T* ds = dtop + (long long)nc * PH * PW;
    for (int i = phstart; i < phend; ++i) {
      for (int j = pwstart; j < pwend; ++j) {
        const int hstart = i * sh - ph;
        const int wstart = j * sw - pw;
        const int hend = min(hstart + kh, H + ph);
        const int wend = min(wstart + kw, W + pw);
        // a negative pad: the window may not reach this element (it starts inside the image,
        // AVE's ends at H + pad); Caffe's CPU loop adds only over the window's own elements
        if (h - ph < hstart || h - ph >= hend || w - pw < wstart || w - pw >= wend) continue;
        const int pool_size = (hend - hstart) * (wend - wstart);
        gradient += ds[i * PW + j] / pool_size;
      }
    }
    dx[index] = gradient;
  }
}
""" % {"g": _GEOM_ARGS, "loop": _LOOP})

_STO_TRAIN = cuda_source("sto_pool_train", r"""
extern "C" __global__ void sto_pool_train(const int total, const T* x, %(g)s, const T* u,
    T* top, long long* idx) {
  %(loop)s {
    const int pw_ = index %% PW;
    const int ph_ = (index / PW) %% PH;
    const int nc = index / PW / PH;
    const int hstart = ph_ * sh;
    const int hend = min(hstart + kh, H);
    const int wstart = pw_ * sw;
    const int wend = min(wstart + kw, W);
    const T* xs = x + (long long)nc * H * W;
    T cumsum = 0.;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) {
        cumsum += xs[h * W + w];
      }
    }
    const float thres = u[index] * cumsum;
    cumsum = 0;
    bool done = false;
    for (int h = hstart; h < hend && !done; ++h) {
      for (int w = wstart; w < wend; ++w) {
        cumsum += xs[h * W + w];
        if (cumsum >= thres) {
          idx[index] = ((long long)nc * H + h) * W + w;
          top[index] = xs[h * W + w];
          done = true;
          break;
        }
      }
    }
    if (!done) {
      idx[index] = ((long long)nc * H + hstart) * W + wstart;
      top[index] = xs[hstart * W + wstart];
    }
  }
}
""" % {"g": _GEOM_ARGS, "loop": _LOOP})

_STO_TEST = cuda_source("sto_pool_test", r"""
extern "C" __global__ void sto_pool_test(const int total, const T* x, %(g)s, T* top) {
  %(loop)s {
    const int pw_ = index %% PW;
    const int ph_ = (index / PW) %% PH;
    const int nc = index / PW / PH;
    const int hstart = ph_ * sh;
    const int hend = min(hstart + kh, H);
    const int wstart = pw_ * sw;
    const int wend = min(wstart + kw, W);
    const T* xs = x + (long long)nc * H * W;
    T cumsum = 1.175494351e-38;
    T cumvalues = 0.;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) {
        cumsum += xs[h * W + w];
        cumvalues += xs[h * W + w] * xs[h * W + w];
      }
    }
    top[index] = cumvalues / cumsum;
  }
}
""" % {"g": _GEOM_ARGS, "loop": _LOOP})

_STO_BWD = cuda_source("sto_pool_bwd", r"""
extern "C" __global__ void sto_pool_bwd(const int total, const T* dtop, const long long* idx,
    %(g)s, T* dx) {
  %(loop)s {
    const int w = index %% W;
    const int h = (index / W) %% H;
    const int nc = index / W / H;
    const int phstart = (h < kh) ? 0 : (h - kh) / sh + 1;
    const int phend = min(h / sh + 1, PH);
    const int pwstart = (w < kw) ? 0 : (w - kw) / sw + 1;
    const int pwend = min(w / sw + 1, PW);
    T gradient = 0;
    const long long off = (long long)nc * PH * PW;
    for (int i = phstart; i < phend; ++i) {
      for (int j = pwstart; j < pwend; ++j) {
        if (idx[off + i * PW + j] == (long long)index) {
          gradient += dtop[off + i * PW + j];
        }
      }
    }
    dx[index] = gradient;
  }
}
""" % {"g": _GEOM_ARGS, "loop": _LOOP})


def _gargs(g):
    return (_I(g.C), _I(g.H), _I(g.W), _I(g.PH), _I(g.PW), _I(g.kh), _I(g.kw), _I(g.sh),
            _I(g.sw), _I(g.ph), _I(g.pw))


def _contig(a):
    import cupy
    return cupy.ascontiguousarray(a)


def _run(name, src, dtype, total, args):
    launch(raw_kernel(name, src, dtype), total, (_I(total),) + args)


# ------------------------------------------------------------------ public
def max_forward(x, g, top, mask):
    """MAX pooling of x (N, C, H, W) into ``top``; int32 ``mask`` gets the argmax."""
    if is_gpu(x):
        _run("max_pool_fwd", _MAX_FWD, x.dtype, top.size, (_contig(x),) + _gargs(g) + (top, mask))
    elif use(_max_fwd_jit, x, top, mask) and mask.dtype == np.int32:
        _max_fwd_jit(x.reshape(-1), *_gi(g), top.reshape(-1), mask.reshape(-1))
    else:
        _max_fwd_cpu(x, g, top, mask)


def max_backward(dtop, mask, g, dx):
    """dx (N, C, H, W) = the top diff routed to each window's argmax."""
    if is_gpu(dtop):
        _run("max_pool_bwd", _MAX_BWD, dtop.dtype, dx.size,
             (_contig(dtop), _contig(mask)) + _gargs(g) + (dx,))
    elif use(_max_bwd_jit, dtop, mask, dx):
        _max_bwd_jit(dtop.reshape(-1), mask.reshape(-1), g.N, g.C, g.H * g.W, g.PH * g.PW, dx.reshape(-1))
    else:
        _max_bwd_cpu(dtop, mask, g, dx)


def ave_forward(x, g, top):
    if is_gpu(x):
        _run("ave_pool_fwd", _AVE_FWD, x.dtype, top.size, (_contig(x),) + _gargs(g) + (top,))
    elif use(_ave_fwd_jit, x, top):
        _ave_fwd_jit(x.reshape(-1), *_gi(g), top.reshape(-1), np.empty(1, top.dtype))
    else:
        _ave_fwd_cpu(x, g, top)


def ave_backward(dtop, g, dx):
    if is_gpu(dtop):
        _run("ave_pool_bwd", _AVE_BWD, dtop.dtype, dx.size, (_contig(dtop),) + _gargs(g) + (dx,))
    elif use(_ave_bwd_jit, dtop, dx):
        _ave_bwd_jit(dtop.reshape(-1), *_gi(g), dx.reshape(-1), np.empty(1, dx.dtype))
    else:
        _ave_bwd_cpu(dtop, g, dx)


def sto_forward_train(x, g, u, top, idx):
    """STOCHASTIC pooling, TRAIN: sample by value with uniforms ``u``; ``idx`` (int64) global."""
    if is_gpu(x):
        _run("sto_pool_train", _STO_TRAIN, x.dtype, top.size,
             (_contig(x),) + _gargs(g) + (_contig(u), top, idx))
    else:
        _sto_train_cpu(x, g, u, top, idx)


def sto_forward_test(x, g, top):
    """STOCHASTIC pooling, TEST: sum(x^2) / (FLT_MIN + sum(x)) over each window."""
    if is_gpu(x):
        _run("sto_pool_test", _STO_TEST, x.dtype, top.size, (_contig(x),) + _gargs(g) + (top,))
    else:
        _sto_test_cpu(x, g, top)


def sto_backward(dtop, idx, g, dx):
    if is_gpu(dtop):
        _run("sto_pool_bwd", _STO_BWD, dtop.dtype, dx.size,
             (_contig(dtop), _contig(idx)) + _gargs(g) + (dx,))
    else:
        _sto_bwd_cpu(dtop, idx, g, dx)

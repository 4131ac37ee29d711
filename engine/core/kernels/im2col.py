"""im2col / col2im over a whole batch (util/im2col.cpp semantics, N-D).

Layout: an image batch ``x`` is ``(nb, C, *S)``; its column matrix is
``(C * prod(K), nb * prod(O))`` with rows ordered ``(c, k_0, k_1, ...)`` (as
Caffe's column buffer) and columns ``(n, o_0, o_1, ...)``, so one GEMM per
group covers the whole batch.  Element ``(c, k, n, o)`` is
``x[n, c, o*stride - pad + k*dilation]`` or 0 outside the image.

On the CPU the columns may instead be ordered ``(o_0, o_1, ..., n)``
(``batch_last``): the batch then sits innermost, so the copies and adds below
run over long contiguous stretches even for small images or strides > 1.

CPU: a strided view of the zero-padded batch, copied once (im2col), and one
vectorised add per kernel offset (col2im, accumulating in Caffe's order).
GPU: CUDA kernels for 2-D; other ranks run the same array code on CuPy.
"""
import itertools

import numpy as np

from engine.core.kernels import cuda_source, is_gpu, launch, raw_kernel

_I = np.int32


def _xp(a):
    if is_gpu(a):
        import cupy
        return cupy
    return np


def _as_strided(xp, a, shape, strides):
    if xp is np:
        return np.lib.stride_tricks.as_strided(a, shape=shape, strides=strides, writeable=False)
    return xp.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def _padded_extent(S, kernel, pad, stride, dilation, O):
    """Per spatial dim: size of the zero-padded image that every window fits in."""
    ext = []
    for s, k, p, st, d, o in zip(S, kernel, pad, stride, dilation, O):
        need = (o - 1) * st + d * (k - 1) + 1 if o > 0 else 0
        ext.append(max(s + 2 * p, need, p + s))
    return tuple(ext)


def _buffer(xp, work, shape, dtype):
    """An array of ``shape`` backed by ``work`` (a flat scratch array) when it is big enough."""
    n = int(np.prod(shape, dtype=np.int64))
    if work is not None and work.size >= n and work.dtype == dtype and _xp(work) is xp:
        return work[:n].reshape(shape)
    return xp.empty(shape, dtype=dtype)


def _zeros(xp, shape, dtype, pad_work):
    """A zero array of ``shape`` (in ``pad_work``, a flat scratch array, when big enough)."""
    a = _buffer(xp, pad_work, shape, dtype)
    a[...] = 0
    return a


def _window_view(xp, x, kernel, pad, stride, dilation, O, batch_last, pad_work=None):
    """Strided window view of ``x`` (nb, C, *S), zero-padded when needed (into
    ``pad_work`` when given and big enough): (C, *K, nb, *O), or (C, *K, *O, nb) when
    ``batch_last``."""
    nb, C = x.shape[:2]
    S = tuple(x.shape[2:])
    P = _padded_extent(S, kernel, pad, stride, dilation, O)
    nd = len(S)
    inner = tuple(slice(p, p + s) for p, s in zip(pad, S))
    if batch_last:
        src = xp.moveaxis(x, 0, -1)                       # (C, *S, nb)
        if any(pad) or P != S:
            xt = _zeros(xp, (C,) + P + (nb,), x.dtype, pad_work)
            xt[(slice(None),) + inner + (slice(None),)] = src
        else:
            xt = xp.ascontiguousarray(src)
        st = xt.strides
        sp, sn = st[1:1 + nd], st[-1]
        shape = (C,) + tuple(kernel) + tuple(O) + (nb,)
        strides = ((st[0],) + tuple(d * s for d, s in zip(dilation, sp))
                   + tuple(t * s for t, s in zip(stride, sp)) + (sn,))
    else:
        if any(pad) or P != S:
            xt = _zeros(xp, (C, nb) + P, x.dtype, pad_work)
            xt[(slice(None), slice(None)) + inner] = x.swapaxes(0, 1)
        else:
            xt = x.swapaxes(0, 1)
        st = xt.strides
        sp = st[2:]
        shape = (C,) + tuple(kernel) + (nb,) + tuple(O)
        strides = ((st[0],) + tuple(d * s for d, s in zip(dilation, sp)) + (st[1],)
                   + tuple(t * s for t, s in zip(stride, sp)))
    return _as_strided(xp, xt, shape, strides)


def im2col_generic(x, kernel, pad, stride, dilation, O, out=None, batch_last=False, pad_work=None):
    xp = _xp(x)
    nb, C = x.shape[:2]
    view = _window_view(xp, x, kernel, pad, stride, dilation, O, batch_last, pad_work)
    K = int(np.prod(kernel, dtype=np.int64))
    P = int(np.prod(O, dtype=np.int64))
    out = _buffer(xp, out, (C * K, nb * P), x.dtype)
    out.reshape(view.shape)[...] = view
    return out


def col2im_generic(cols, nb, C, S, kernel, pad, stride, dilation, O, work=None, batch_last=False):
    """(C*K, nb*P) -> (nb, C, *S) view, summing every window's columns back.

    For each image element the contributions are added in kernel-offset order,
    as Caffe's col2im_cpu adds them."""
    xp = _xp(cols)
    P = _padded_extent(S, kernel, pad, stride, dilation, O)
    if batch_last:
        acc = _buffer(xp, work, (C,) + P + (nb,), cols.dtype)
        cv = cols.reshape((C,) + tuple(kernel) + tuple(O) + (nb,))
        head, tail = (slice(None),), (slice(None),)
    else:
        acc = _buffer(xp, work, (C, nb) + P, cols.dtype)
        cv = cols.reshape((C,) + tuple(kernel) + (nb,) + tuple(O))
        head, tail = (slice(None), slice(None)), ()
    acc[...] = 0
    if all(o > 0 for o in O):
        for kidx in itertools.product(*[range(k) for k in kernel]):
            sl = tuple(slice(k * d, k * d + (o - 1) * s + 1, s)
                       for k, d, o, s in zip(kidx, dilation, O, stride))
            acc[head + sl + tail] += cv[(slice(None),) + kidx]
    inner = tuple(slice(p, p + s) for p, s in zip(pad, S))
    if batch_last:
        return xp.moveaxis(acc[head + inner + tail], -1, 0)
    return acc[head + inner].swapaxes(0, 1)


# ------------------------------------------------------------------ CUDA (2-D)
_IM2COL_SRC = cuda_source("im2col_batch", r"""
extern "C" __global__ void im2col_batch(const int total, const T* x, const int nb, const int C,
    const int H, const int W, const int kh, const int kw, const int ph, const int pw,
    const int sh, const int sw, const int dh, const int dw, const int OH, const int OW, T* col) {
  const long long plane = (long long)nb * OH * OW;
  for (int index = blockIdx.x * blockDim.x + threadIdx.x; index < total;
       index += blockDim.x * gridDim.x) {
    const int ow = index % OW;
    int t = index / OW;
    const int oh = t % OH;
    t /= OH;
    const int n = t % nb;
    const int c = t / nb;
    const T* xs = x + ((long long)n * C + c) * H * W;
    const int h0 = oh * sh - ph;
    const int w0 = ow * sw - pw;
    T* cp = col + (long long)c * kh * kw * plane + ((long long)n * OH + oh) * OW + ow;
    for (int i = 0; i < kh; ++i) {
      const int h = h0 + i * dh;
      for (int j = 0; j < kw; ++j) {
        const int w = w0 + j * dw;
        *cp = (h >= 0 && w >= 0 && h < H && w < W) ? xs[h * W + w] : T(0);
        cp += plane;
      }
    }
  }
}
""")

_COL2IM_SRC = cuda_source("col2im_batch", r"""
extern "C" __global__ void col2im_batch(const int total, const T* col, const int nb, const int C,
    const int H, const int W, const int kh, const int kw, const int ph, const int pw,
    const int sh, const int sw, const int dh, const int dw, const int OH, const int OW, T* x) {
  for (int index = blockIdx.x * blockDim.x + threadIdx.x; index < total;
       index += blockDim.x * gridDim.x) {
    const int w_im = index % W + pw;
    const int h_im = (index / W) % H + ph;
    const int c = (index / W / H) % C;
    const int n = index / W / H / C;
    const int ext_w = (kw - 1) * dw + 1;
    const int ext_h = (kh - 1) * dh + 1;
    const int w_col_start = (w_im < ext_w) ? 0 : (w_im - ext_w) / sw + 1;
    const int w_col_end = min(w_im / sw + 1, OW);
    const int h_col_start = (h_im < ext_h) ? 0 : (h_im - ext_h) / sh + 1;
    const int h_col_end = min(h_im / sh + 1, OH);
    T val = 0;
    for (int h_col = h_col_start; h_col < h_col_end; ++h_col) {
      for (int w_col = w_col_start; w_col < w_col_end; ++w_col) {
        int h_k = h_im - h_col * sh;
        int w_k = w_im - w_col * sw;
        if (h_k % dh == 0 && w_k % dw == 0) {
          h_k /= dh;
          w_k /= dw;
          const long long row = ((long long)c * kh + h_k) * kw + w_k;
          val += col[((row * nb + n) * OH + h_col) * OW + w_col];
        }
      }
    }
    x[index] = val;
  }
}
""")


def _geom_args(nb, C, S, kernel, pad, stride, dilation, O):
    return (_I(nb), _I(C), _I(S[0]), _I(S[1]), _I(kernel[0]), _I(kernel[1]), _I(pad[0]),
            _I(pad[1]), _I(stride[0]), _I(stride[1]), _I(dilation[0]), _I(dilation[1]),
            _I(O[0]), _I(O[1]))


def _im2col_gpu(x, kernel, pad, stride, dilation, O, out=None):
    import cupy
    nb, C = x.shape[:2]
    x = cupy.ascontiguousarray(x)
    K = kernel[0] * kernel[1]
    P = O[0] * O[1]
    out = _buffer(cupy, out, (C * K, nb * P), x.dtype)
    total = C * nb * P
    k = raw_kernel("im2col_batch", _IM2COL_SRC, x.dtype)
    launch(k, total, (_I(total), x) + _geom_args(nb, C, x.shape[2:], kernel, pad, stride,
                                                   dilation, O) + (out,))
    return out


def _col2im_gpu(cols, nb, C, S, kernel, pad, stride, dilation, O):
    import cupy
    cols = cupy.ascontiguousarray(cols)
    x = cupy.empty((nb, C) + tuple(S), dtype=cols.dtype)
    total = x.size
    k = raw_kernel("col2im_batch", _COL2IM_SRC, cols.dtype)
    launch(k, total, (_I(total), cols) + _geom_args(nb, C, S, kernel, pad, stride, dilation, O)
           + (x,))
    return x


# ------------------------------------------------------------------ public
def _negative_pads(S, pad):
    """A negative pad (Caffe keeps a pad of 2^31 and up, read from its uint32 field, in an int)
    makes Caffe's im2col start every window inside the image: the same columns as cropping
    ``-pad`` from both ends and padding nothing.  The crop of each spatial dim, and the pads
    that go with it."""
    crop = tuple(slice(-p, s + p) if p < 0 else slice(None) for p, s in zip(pad, S))
    return crop, tuple(max(p, 0) for p in pad)


def _gpu_2d(a, kernel, n_elems):
    return is_gpu(a) and len(kernel) == 2 and n_elems < 2 ** 31


def im2col(x, kernel, pad, stride, dilation, O, out=None, batch_last=False, pad_work=None):
    """Column matrix (C*prod(kernel), nb*prod(O)) of the batch ``x`` (nb, C, *S).

    Columns are ordered (n, o...) or, with ``batch_last`` (CPU only), (o..., n).
    ``out`` may be a flat scratch array to write into when it is big enough;
    ``pad_work`` one for the zero-padded copy of the batch (CPU)."""
    kernel, pad, stride, dilation, O = (tuple(int(v) for v in t)
                                        for t in (kernel, pad, stride, dilation, O))
    if min(pad, default=0) < 0:
        crop, pad = _negative_pads(x.shape[2:], pad)
        x = x[(slice(None), slice(None)) + crop]
    n = x.shape[0] * x.shape[1] * int(np.prod(O, dtype=np.int64)) * int(np.prod(kernel, dtype=np.int64))
    if _gpu_2d(x, kernel, max(n, x.size)) and not batch_last:
        return _im2col_gpu(x, kernel, pad, stride, dilation, O, out)
    return im2col_generic(x, kernel, pad, stride, dilation, O, out, batch_last, pad_work)


def col2im(cols, nb, C, S, kernel, pad, stride, dilation, O, work=None, batch_last=False):
    """The batch (nb, C, *S) whose im2col is summed back from ``cols`` (a view
    into ``work`` when a scratch array is given and big enough)."""
    kernel, pad, stride, dilation, O, S = (tuple(int(v) for v in t)
                                           for t in (kernel, pad, stride, dilation, O, S))
    if min(pad, default=0) < 0:
        # the cropped image's columns summed back, and 0 where no window reads (the border)
        crop, inner_pad = _negative_pads(S, pad)
        inner_S = tuple(len(range(s)[c]) for s, c in zip(S, crop))
        inner = col2im(cols, nb, C, inner_S, kernel, inner_pad, stride, dilation, O, work, batch_last)
        xp = _xp(cols)
        full = xp.zeros((nb, C) + S, dtype=cols.dtype)
        full[(slice(None), slice(None)) + crop] = inner
        return full
    if _gpu_2d(cols, kernel, max(cols.size, nb * C * int(np.prod(S, dtype=np.int64)))) and not batch_last:
        return _col2im_gpu(cols, nb, C, S, kernel, pad, stride, dilation, O)
    return col2im_generic(cols, nb, C, S, kernel, pad, stride, dilation, O, work, batch_last)

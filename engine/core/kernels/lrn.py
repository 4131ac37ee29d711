"""Cross-channel LRN (lrn_layer.cpp / .cu semantics).

scale = k + alpha/size * sum of x^2 over the ``size`` channels centred on c
(zero beyond the edges); top = x * scale^-beta;
dx = dtop * scale^-beta - 2*alpha*beta/size * x * sum over the same window of
dtop * top / scale.

CPU twin: ``size`` vectorised slice-adds along the channel axis.  CUDA:
Caffe's per-pixel running sums over the channels.
"""
import numpy as np

from engine.core.kernels import cuda_source, is_gpu, launch, raw_kernel

_I = np.int32


def _window_sum(a, size):
    """Sum of ``a`` (N, C, ...) over the channel window [c - pre, c + pre]."""
    pre = (size - 1) // 2
    C = a.shape[1]
    acc = a.copy()
    for o in range(1, pre + 1):
        if o >= C:
            break
        acc[:, :C - o] += a[:, o:]
        acc[:, o:] += a[:, :C - o]
    return acc


_FILL_SCALE = cuda_source("lrn_fill_scale", r"""
extern "C" __global__ void lrn_fill_scale(const int total, const T* in, const int C, const int HW,
    const int size, const T alpha_over_size, const T k, T* scale) {
  for (int index = blockIdx.x * blockDim.x + threadIdx.x; index < total;
       index += blockDim.x * gridDim.x) {
    const int s = index % HW;
    const int n = index / HW;
    const long long offset = (long long)n * C * HW + s;
    const T* x = in + offset;
    T* sc = scale + offset;
    int head = 0;
    const int pre_pad = (size - 1) / 2;
    const int post_pad = size - pre_pad - 1;
    T accum_scale = 0;
    while (head < post_pad && head < C) {
      accum_scale += x[(long long)head * HW] * x[(long long)head * HW];
      ++head;
    }
    while (head < C) {
      accum_scale += x[(long long)head * HW] * x[(long long)head * HW];
      if (head - size >= 0) {
        accum_scale -= x[(long long)(head - size) * HW] * x[(long long)(head - size) * HW];
      }
      sc[(long long)(head - post_pad) * HW] = k + accum_scale * alpha_over_size;
      ++head;
    }
    while (head < C + post_pad) {
      if (head - size >= 0) {
        accum_scale -= x[(long long)(head - size) * HW] * x[(long long)(head - size) * HW];
      }
      sc[(long long)(head - post_pad) * HW] = k + accum_scale * alpha_over_size;
      ++head;
    }
  }
}
""")

_COMPUTE_DIFF = cuda_source("lrn_compute_diff", r"""
extern "C" __global__ void lrn_compute_diff(const int total, const T* bottom, const T* top,
    const T* scale, const T* top_diff, const int C, const int HW, const int size,
    const T negative_beta, const T cache_ratio, T* bottom_diff) {
  for (int index = blockIdx.x * blockDim.x + threadIdx.x; index < total;
       index += blockDim.x * gridDim.x) {
    const int s = index % HW;
    const int n = index / HW;
    const long long offset = (long long)n * C * HW + s;
    const T* b = bottom + offset;
    const T* t = top + offset;
    const T* sc = scale + offset;
    const T* td = top_diff + offset;
    T* bd = bottom_diff + offset;
    int head = 0;
    const int pre_pad = size - (size + 1) / 2;
    const int post_pad = size - pre_pad - 1;
    T accum_ratio = 0;
    while (head < post_pad && head < C) {
      const long long h = (long long)head * HW;
      accum_ratio += td[h] * t[h] / sc[h];
      ++head;
    }
    while (head < C) {
      const long long h = (long long)head * HW;
      accum_ratio += td[h] * t[h] / sc[h];
      if (head - size >= 0) {
        const long long q = (long long)(head - size) * HW;
        accum_ratio -= td[q] * t[q] / sc[q];
      }
      const long long o = (long long)(head - post_pad) * HW;
      bd[o] = td[o] * pow(sc[o], negative_beta) - cache_ratio * b[o] * accum_ratio;
      ++head;
    }
    while (head < C + post_pad) {
      if (head - size >= 0) {
        const long long q = (long long)(head - size) * HW;
        accum_ratio -= td[q] * t[q] / sc[q];
      }
      const long long o = (long long)(head - post_pad) * HW;
      bd[o] = td[o] * pow(sc[o], negative_beta) - cache_ratio * b[o] * accum_ratio;
      ++head;
    }
  }
}
""")


def across_forward(x, size, alpha, beta, k, top, scale):
    """Fill ``scale`` and ``top`` (both shaped like x, (N, C, H, W))."""
    dt = x.dtype.type
    a_over_n = dt(alpha) / dt(size)
    if is_gpu(x):
        import cupy
        N, C = x.shape[:2]
        HW = x.size // max(N * C, 1)
        total = N * HW
        kern = raw_kernel("lrn_fill_scale", _FILL_SCALE, x.dtype)
        launch(kern, total, (_I(total), cupy.ascontiguousarray(x), _I(C), _I(HW), _I(size),
                             a_over_n, dt(k), scale))
        cupy.power(scale, dt(-beta), out=top)
        top *= x
        return
    acc = _window_sum(x * x, size)
    np.multiply(acc, a_over_n, out=scale)
    scale += dt(k)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        np.power(scale, dt(-beta), out=top)
    top *= x


def across_backward(x, top, scale, dtop, size, alpha, beta, dx):
    dt = x.dtype.type
    cache_ratio = dt(2.0) * dt(alpha) * dt(beta) / dt(size)
    if is_gpu(x):
        import cupy
        N, C = x.shape[:2]
        HW = x.size // max(N * C, 1)
        total = N * HW
        c = cupy.ascontiguousarray
        kern = raw_kernel("lrn_compute_diff", _COMPUTE_DIFF, x.dtype)
        launch(kern, total, (_I(total), c(x), c(top), c(scale), c(dtop), _I(C), _I(HW),
                             _I(size), dt(-beta), cache_ratio, dx))
        return
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = dtop * top
        ratio /= scale
        acc = _window_sum(ratio, size)
        np.power(scale, dt(-beta), out=dx)
    dx *= dtop
    acc *= x
    acc *= cache_ratio
    dx -= acc

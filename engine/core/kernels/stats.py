"""Blob statistics on the GPU: one reduction kernel per blob, one small vector back.

:func:`summary` returns, on the device, one float64 vector: the ten numbers of
``engine.instruments.debug``'s summary (sum |x|, min, max, sum, sum of squares, zeros,
NaN count, Inf count, finite min, finite max) followed by the histogram counts of the
finite values in ``bins`` equal bins over [finite min, finite max].  Three launches
(the per-block reduction, the fold of the blocks' partials, the histogram, which reads
its range from the fold's output on the device), no host synchronisation in between:
the caller copies the vector to the host once.  Sums are accumulated in double; with a
NaN present, the sums, min and max are NaN (NumPy's rule).
"""
import numpy as np

from engine.core.kernels import cuda_source, raw_kernel

N_SUMMARY = 10
THREADS = 256
MAX_BLOCKS = 1024

_REDUCE = r"""
#define NT 256
#define NF 10
__device__ __forceinline__ double fold(const int k, const double a, const double b) {
  if (k == 1 || k == 8) return fmin(a, b);
  if (k == 2 || k == 9) return fmax(a, b);
  return a + b;
}
__device__ void block_reduce(double acc[NF], double* out) {
  __shared__ double sh[NF][NT];
  for (int k = 0; k < NF; ++k) sh[k][threadIdx.x] = acc[k];
  __syncthreads();
  for (int s = NT / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      for (int k = 0; k < NF; ++k) sh[k][threadIdx.x] = fold(k, sh[k][threadIdx.x], sh[k][threadIdx.x + s]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    for (int k = 0; k < NF; ++k) out[k] = sh[k][0];
  }
}
__device__ void init_acc(double acc[NF]) {
  const double inf = __longlong_as_double(0x7ff0000000000000LL);
  for (int k = 0; k < NF; ++k) acc[k] = 0.0;
  acc[1] = inf; acc[2] = -inf; acc[8] = inf; acc[9] = -inf;
}
"""

_PARTIAL = cuda_source("blob_summary_partial", _REDUCE + r"""
extern "C" __global__ void blob_summary_partial(const long long n, const T* x, double* part) {
  double acc[NF];
  init_acc(acc);
  for (long long i = (long long)blockIdx.x * NT + threadIdx.x; i < n; i += (long long)NT * gridDim.x) {
    const double v = (double)x[i];
    if (isnan(v)) { acc[6] += 1.0; continue; }
    acc[0] += fabs(v);
    acc[3] += v;
    acc[4] += v * v;
    acc[1] = fmin(acc[1], v);
    acc[2] = fmax(acc[2], v);
    if (v == 0.0) acc[5] += 1.0;
    if (isinf(v)) {
      acc[7] += 1.0;
    } else {
      acc[8] = fmin(acc[8], v);
      acc[9] = fmax(acc[9], v);
    }
  }
  block_reduce(acc, part + (long long)blockIdx.x * NF);
}
""")

_FINAL = cuda_source("blob_summary_final", _REDUCE + r"""
extern "C" __global__ void blob_summary_final(const int nblocks, const double* part, double* out) {
  double acc[NF];
  init_acc(acc);
  for (int b = threadIdx.x; b < nblocks; b += NT) {
    for (int k = 0; k < NF; ++k) acc[k] = fold(k, acc[k], part[b * NF + k]);
  }
  block_reduce(acc, out);
  if (threadIdx.x == 0 && out[6] > 0) {           // a NaN: NumPy's sums, min and max are NaN
    const double nan = __longlong_as_double(0x7ff8000000000000LL);
    out[0] = nan; out[1] = nan; out[2] = nan; out[3] = nan; out[4] = nan;
  }
  (void)sizeof(T);
}
""")

_HIST = cuda_source("blob_histogram", r"""
extern "C" __global__ void blob_histogram(const long long n, const T* x, const int bins, double* out) {
  const double lo = out[8], hi = out[9];
  if (!(lo <= hi)) return;                          // no finite value
  double width = hi - lo;
  if (!(width > 0.0)) width = 1.0;
  const double scale = bins / width;
  double* counts = out + 10;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x) {
    const double v = (double)x[i];
    if (isnan(v) || isinf(v)) continue;
    int b = (int)((v - lo) * scale);
    b = b < 0 ? 0 : (b >= bins ? bins - 1 : b);
    atomicAdd(counts + b, 1.0);
  }
}
""")


def summary(x, bins, sample=None):
    """The float64 device vector (ten summary numbers, then ``bins`` counts) of the flat
    CuPy array ``x`` (float32 or float64).  ``sample``: device indices of the values the
    histogram bins (the summary numbers always cover every value); None bins them all.
    Binning all of a big blob is millions of atomic adds on a few counters."""
    import cupy
    n = int(x.size)
    x = cupy.ascontiguousarray(x)
    blocks = max(1, min((n + THREADS - 1) // THREADS, MAX_BLOCKS))
    part = cupy.empty(blocks * N_SUMMARY, dtype=np.float64)
    out = cupy.zeros(N_SUMMARY + max(int(bins), 0), dtype=np.float64)
    raw_kernel("blob_summary_partial", _PARTIAL, x.dtype)((blocks,), (THREADS,), (np.int64(n), x, part))
    raw_kernel("blob_summary_final", _FINAL, x.dtype)((1,), (THREADS,), (np.int32(blocks), part, out))
    if bins:
        xs = x if sample is None else x[sample]
        hb = max(1, min((int(xs.size) + THREADS - 1) // THREADS, MAX_BLOCKS))
        raw_kernel("blob_histogram", _HIST, x.dtype)((hb,), (THREADS,), (np.int64(xs.size), xs, np.int32(bins), out))
    return out

"""Hand-written compute kernels for the vision layers.

Each public function takes arrays of either module and dispatches on the
array type: NumPy arrays go to a vectorised CPU twin, CuPy arrays to a CUDA
kernel (``cupy.RawKernel``) that is compiled on first use and cached.
Importing this package (or any module in it) never imports CuPy.
"""
import numpy as np

from engine.core import backend

_CACHE = {}

# Threads per block for the grid-stride kernels (Caffe's CAFFE_CUDA_NUM_THREADS).
THREADS = 512


def is_gpu(a):
    return backend.is_gpu_array(a)


def ctype(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return "float"
    if dtype == np.float64:
        return "double"
    raise TypeError("no CUDA kernel for dtype %s" % dtype)


def raw_kernel(name, source, dtype):
    """The RawKernel ``name`` of ``source`` with ``T`` bound to ``dtype``, cached."""
    key = (name, source, np.dtype(dtype).str)
    k = _CACHE.get(key)
    if k is None:
        cp = backend.cupy()
        code = "typedef %s T;\n%s" % (ctype(dtype), source)
        k = cp.RawKernel(code, name)
        _CACHE[key] = k
    return k


def launch(kernel, n, args):
    """Run a grid-stride kernel over ``n`` items."""
    if n <= 0:
        return
    blocks = min((n + THREADS - 1) // THREADS, 65535 * 4)
    kernel((blocks,), (THREADS,), args)

"""Hand-written compute kernels for the vision layers.

Each public function takes arrays of either module and dispatches on the
array type: NumPy arrays go to a vectorised CPU twin, CuPy arrays to a CUDA
kernel (``cupy.RawKernel``) that is compiled on first use and cached.
Importing this package (or any module in it) never imports CuPy.

Every CUDA source the engine compiles is registered here with
:func:`cuda_source` when its module is imported, and :func:`raw_kernel` builds
only registered sources: :func:`cuda_sources` is therefore the complete list,
which ``tests/test_cuda_compile.py`` compiles with NVRTC for every architecture
the GPU extra supports (CI runs it without a GPU).
"""
import importlib

import numpy as np

from engine.core import backend

_CACHE = {}
_SOURCES = {}     # kernel name -> (CUDA source with T unbound, module that registered it)

# The modules that register CUDA sources (imported by cuda_sources()).
KERNEL_MODULES = ("engine.core.kernels.im2col", "engine.core.kernels.lrn", "engine.core.kernels.pooling",
                  "engine.core.kernels.stats")
# Architectures the GPU extra (cupy-cuda12x) is checked for: Volta to Hopper.
CUDA_ARCHS = (70, 75, 80, 86, 89, 90)

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


def cuda_source(name, source):
    """Register the CUDA source of the ``extern "C"`` kernel ``name`` (at module level,
    where the source is defined); returns ``source``.  Its element type is ``T``."""
    old = _SOURCES.get(name)
    if old is not None and old[0] != source:
        raise ValueError("two different CUDA sources registered as %r" % name)
    import inspect
    frame = inspect.currentframe()
    caller = frame.f_back.f_globals.get("__name__", "?") if frame and frame.f_back else "?"
    _SOURCES[name] = (source, caller)
    return source


def cuda_sources():
    """{kernel name: (source, registering module)} of every CUDA kernel the engine
    can build (the kernel modules are imported first)."""
    for mod in KERNEL_MODULES:
        importlib.import_module(mod)
    return dict(_SOURCES)


def cuda_code(source, dtype):
    """The code compiled for ``source`` with ``T`` bound to ``dtype``."""
    return "typedef %s T;\n%s" % (ctype(dtype), source)


def raw_kernel(name, source, dtype):
    """The RawKernel ``name`` of ``source`` with ``T`` bound to ``dtype``, cached.
    ``source`` must have been registered with :func:`cuda_source`."""
    key = (name, source, np.dtype(dtype).str)
    k = _CACHE.get(key)
    if k is None:
        if _SOURCES.get(name, (None,))[0] != source:
            raise ValueError("CUDA kernel %r is not registered with engine.core.kernels.cuda_source "
                             "(so the compile check would not see it)" % name)
        cp = backend.cupy()
        k = cp.RawKernel(cuda_code(source, dtype), name)
        _CACHE[key] = k
    return k


def launch(kernel, n, args):
    """Run a grid-stride kernel over ``n`` items."""
    if n <= 0:
        return
    blocks = min((n + THREADS - 1) // THREADS, 65535 * 4)
    kernel((blocks,), (THREADS,), args)

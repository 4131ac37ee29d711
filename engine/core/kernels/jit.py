"""Compiled CPU loops (Numba) for kernels whose NumPy form needs big temporaries.

``AVAILABLE`` is False without Numba (or with a Numba that does not load beside this
NumPy); callers then keep their vectorised NumPy twins, which give the same results.
Compiled functions are cached on disk (``cache=True``): only the first process
compiles them.
"""
try:  # pragma: no cover - depends on the environment
    from numba import njit as _njit
    AVAILABLE = True
except Exception:  # ImportError, or a Numba that does not support this NumPy
    _njit = None
    AVAILABLE = False

# Set False to force the NumPy twins (tests compare both).
ENABLED = True


def jit(fn):
    """``fn`` compiled (nopython, cached, GIL released), or None without Numba."""
    return _njit(cache=True, nogil=True, boundscheck=False)(fn) if AVAILABLE else None


def use(kernel, *arrays):
    """True when the compiled ``kernel`` exists and every array is a C-contiguous host array."""
    if kernel is None or not ENABLED:
        return False
    for a in arrays:
        if type(a).__module__ != "numpy" or not a.flags.c_contiguous:
            return False
    return True

"""NumPy on the CPU or CuPy on the GPU, chosen at run time.

Like Caffe's ``Caffe::mode()``, the mode is per thread: a thread that never set
one uses the process default, which ``set_mode_cpu``/``set_mode_gpu`` called
from the main thread also set.  CuPy is imported lazily, so the package imports
and runs on a machine without CuPy or a GPU.
"""
import contextlib
import logging
import os
import re
import threading

import numpy as np

from engine.core import rng as _rng
from engine.core.errors import CaffeError, DeviceError
from engine.core.log import human_bytes

backend_log = logging.getLogger("engine.core.backend")

CPU, GPU = "CPU", "GPU"

_default = {"mode": CPU, "device": 0}
_local = threading.local()
_cupy = None
_cupy_error = None
_seed = None


def _import_cupy():
    global _cupy, _cupy_error
    if _cupy is None and _cupy_error is None:
        try:
            import cupy  # noqa: F401
            cupy.cuda.runtime.getDeviceCount()
            _cupy = cupy
        except Exception as e:  # ImportError, CUDARuntimeError, ...
            _cupy_error = e
    return _cupy


def gpu_available():
    """True when CuPy imports and sees at least one CUDA device."""
    cp = _import_cupy()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def cupy():
    """The CuPy module; raises DeviceError with the reason if it is unusable."""
    cp = _import_cupy()
    if cp is None:
        raise DeviceError("GPU mode needs CuPy and a CUDA device: %s (install the GPU extra: "
                          "pip install -r requirements-gpu.txt)" % (_cupy_error,))
    return cp


def mode():
    # (the thread's own dict, not getattr with a default: a missing attribute of a
    # threading.local raises and catches an AttributeError, ten times slower, and this is
    # asked several times per layer and blob access)
    return _local.__dict__.get("mode", _default["mode"])


def device_id():
    return _local.__dict__.get("device", _default["device"])


def _set(key, value):
    setattr(_local, key, value)
    if threading.current_thread() is threading.main_thread():
        _default[key] = value


def set_mode_cpu():
    _set("mode", CPU)


def set_mode_gpu(fallback=False):
    """Caffe::set_mode(GPU) on the current device.

    Raises DeviceError when CuPy is missing or the device cannot be used (no
    device, driver mismatch, device lost).  With ``fallback=True`` it logs a
    warning with the reason and stays in (or returns to) CPU mode instead;
    the return value says which mode is now in use.
    """
    try:
        cp = cupy()
        dev = device_id()
        try:
            cp.cuda.Device(dev).use()
            cp.cuda.runtime.memGetInfo()     # makes the context: a lost device fails here
        except Exception as e:
            raise DeviceError("GPU %d is not usable: %s: %s" % (dev, type(e).__name__, e)) from None
    except DeviceError as e:
        if not fallback:
            raise
        backend_log.warning("GPU mode was asked for but is not available (%s); running on the "
                            "CPU instead", e)
        _set("mode", CPU)
        return CPU
    _set("mode", GPU)
    return GPU


def set_device(device):
    if mode() == GPU or gpu_available():
        cp = cupy()
        n = cp.cuda.runtime.getDeviceCount()
        if not 0 <= device < n:
            raise DeviceError("GPU device %d does not exist (%d visible)" % (device, n))
        cp.cuda.Device(device).use()
    _set("device", int(device))


class using_mode:
    """Context manager: run a block in the given mode ("CPU" or "GPU") on this thread."""

    def __init__(self, m):
        self.m, self.prev = m, None

    def __enter__(self):
        self.prev = mode()
        set_mode_gpu() if self.m == GPU else set_mode_cpu()
        return self

    def __exit__(self, *exc):
        _local.mode = self.prev


def xp():
    """The array module of the current mode."""
    return cupy() if mode() == GPU else np


def is_gpu_array(a):
    return _cupy is not None and isinstance(a, _cupy.ndarray)


def xp_of(a):
    return _cupy if is_gpu_array(a) else np


def to_host(a):
    """A NumPy array (copying from the GPU when needed)."""
    if is_gpu_array(a):
        return _cupy.asnumpy(a)
    return np.asarray(a)


def to_device(a):
    return cupy().asarray(a)


def synchronize():
    """Wait for the GPU to finish queued work (no-op on the CPU)."""
    if _cupy is not None and mode() == GPU:
        _cupy.cuda.Device().synchronize()


# ---------------------------------------------------------------- random numbers
def set_random_seed(seed):
    """Caffe::set_random_seed: reseed Caffe's CPU stream (``engine.core.rng``: boost's
    mt19937, drawn as Caffe draws), the engine's own NumPy generator and CuPy's."""
    global _seed
    _seed = int(seed)
    _rng.set_random_seed(_seed)
    if _cupy is not None:
        _cupy.random.seed(_seed & 0xFFFFFFFF)


def rng():
    """The engine's NumPy Generator, for draws Caffe does not take from its own stream
    (Caffe's draws go through ``engine.core.rng``)."""
    return _rng.aux()


def random_module():
    """Random numbers for the current mode: cupy.random, or :func:`rng` on the CPU."""
    if mode() == GPU:
        return cupy().random
    return _rng.aux()


# ---------------------------------------------------------------- memory and CUDA errors
# CuPy's CUDA-level exception classes (matched by name, so that CuPy is never imported
# here): whatever they say, the device failed, not the model.
_CUDA_ERROR_NAMES = frozenset((
    "CUDARuntimeError", "CUDADriverError", "CUBLASError", "CURANDError", "CUSOLVERError",
    "CUSPARSEError", "CUFFTError", "CUDNNError", "CUTENSORError", "NVRTCError",
    "CompileException"))
_OOM_WORDS = ("out of memory", "memoryallocation", "alloc_failed", "memory_allocation")


def _class_names(exc):
    return {k.__name__ for k in type(exc).__mro__}


def _is_gpu_exception(exc):
    mod = type(exc).__module__ or ""
    return mod.startswith(("cupy", "cupy_backends")) or bool(_class_names(exc) & _CUDA_ERROR_NAMES)


def is_gpu_oom(exc):
    """True for CuPy's OutOfMemoryError and CUDA/cuBLAS/cuDNN allocation failures."""
    if not _is_gpu_exception(exc):
        return False
    if "OutOfMemoryError" in _class_names(exc):
        return True
    text = str(exc).lower().replace(" ", "")
    return any(w.replace(" ", "") in text for w in _OOM_WORDS)


def _bytes(n):
    return human_bytes(n, unit_b="bytes")


def _asked_bytes(exc):
    m = re.search(r"allocat\w*\s+([\d,]+)\s*bytes", str(exc))
    return int(m.group(1).replace(",", "")) if m else None


def gpu_oom_message(exc, cp=None):
    """A sentence for a GPU out-of-memory exception: the device, the bytes asked
    (when the exception says), the bytes free and total on the device and what
    the engine's memory pool holds (when they can be read), and what to do."""
    if cp is None:
        cp = _cupy
    parts = ["Out of memory on GPU %d" % device_id()]
    asked = _asked_bytes(exc)
    if asked is not None:
        parts.append("asked for %s (%d bytes)" % (_bytes(asked), asked))
    if cp is not None:
        try:
            free, total = cp.cuda.runtime.memGetInfo()
            parts.append("%s free of %s on the device (%d of %d bytes)"
                         % (_bytes(free), _bytes(total), free, total))
        except Exception:
            pass
        try:
            pool = cp.get_default_memory_pool()
            parts.append("the engine's memory pool holds %s (%s in use)"
                         % (_bytes(pool.total_bytes()), _bytes(pool.used_bytes())))
        except Exception:
            pass
    return "%s: %s. (%s) Use a smaller batch or input, or run on the CPU." % (
        parts[0], "; ".join(parts[1:]) if len(parts) > 1 else "the device is full", exc)


def _host_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def host_oom_message(exc):
    """A sentence for a host MemoryError: what NumPy asked for and what is available."""
    avail = _host_available()
    return "Out of memory on the host (CPU): %s%s. Use a smaller batch or input." % (
        exc or "allocation failed",
        "; %s (%d bytes) available" % (_bytes(avail), avail) if avail is not None else "")


@contextlib.contextmanager
def translate_gpu_errors(what=None):
    """Run a block; GPU out-of-memory and CUDA failures, and host MemoryErrors,
    leave it as :class:`DeviceError` (with the sizes asked and free), chained to
    the original.  ``what`` (e.g. "Forward of layer 'conv1'") prefixes the message.
    Errors of the engine's own types pass through unchanged."""
    try:
        yield
    except CaffeError:
        raise
    except Exception as e:
        err = translated_error(e, what)
        if err is None:
            raise
        raise err from e


def translated_error(e, what=None):
    """The :class:`DeviceError` that :func:`translate_gpu_errors` turns ``e`` (not a
    CaffeError) into, or None for an error it lets pass (for hot loops that catch
    errors themselves instead of entering a context manager per call)."""
    prefix = ("%s: " % what) if what else ""
    if _is_gpu_exception(e):
        if is_gpu_oom(e):
            err = DeviceError(prefix + gpu_oom_message(e))
        else:
            err = DeviceError("%sCUDA error on GPU %d: %s: %s" % (prefix, device_id(),
                                                                   type(e).__name__, e))
        err.oom = is_gpu_oom(e)
        return err
    if isinstance(e, MemoryError):
        err = DeviceError(prefix + host_oom_message(e))
        err.oom = True
        return err
    return None


# ------------------------------------------------------------------ solver count and rank
# Caffe::solver_count / solver_rank / multiprocess: set by multi-GPU training (pycaffe's
# set_solver_count, set_solver_rank, set_multiprocess); a Python layer refuses to train
# under several solvers of one process, as Caffe's does.
_solvers = {"count": 1, "rank": 0, "multiprocess": False}


def solver_count():
    return _solvers["count"]


def set_solver_count(count):
    _solvers["count"] = int(count)


def solver_rank():
    return _solvers["rank"]


def set_solver_rank(rank):
    _solvers["rank"] = int(rank)


def multiprocess():
    return _solvers["multiprocess"]


def set_multiprocess(flag):
    _solvers["multiprocess"] = bool(flag)


def root_solver():
    return _solvers["rank"] == 0

"""NumPy on the CPU or CuPy on the GPU, chosen at run time.

Like Caffe's ``Caffe::mode()``, the mode is per thread: a thread that never set
one uses the process default, which ``set_mode_cpu``/``set_mode_gpu`` called
from the main thread also set.  CuPy is imported lazily, so the package imports
and runs on a machine without CuPy or a GPU.
"""
import threading

import numpy as np

from .errors import DeviceError

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
    return getattr(_local, "mode", _default["mode"])


def device_id():
    return getattr(_local, "device", _default["device"])


def _set(key, value):
    setattr(_local, key, value)
    if threading.current_thread() is threading.main_thread():
        _default[key] = value


def set_mode_cpu():
    _set("mode", CPU)


def set_mode_gpu():
    cp = cupy()
    cp.cuda.Device(device_id()).use()
    _set("mode", GPU)


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
        setattr(_local, "mode", self.prev)


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
_rng = {"cpu": np.random.default_rng(), "gpu": None}


def set_random_seed(seed):
    """Caffe::set_random_seed: reseed the engine's generators (CPU and GPU)."""
    global _seed
    _seed = int(seed)
    _rng["cpu"] = np.random.default_rng(_seed)
    _rng["gpu"] = None
    if _cupy is not None:
        _cupy.random.seed(_seed)


def rng():
    """The engine's NumPy Generator (fillers, dropout on CPU, data shuffling)."""
    return _rng["cpu"]


def random_module():
    """Random numbers for the current mode: a NumPy Generator or cupy.random."""
    if mode() == GPU:
        return cupy().random
    return _rng["cpu"]

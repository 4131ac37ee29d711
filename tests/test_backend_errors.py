"""GPU errors without a GPU: fake CuPy objects stand in for the device.

- asking for the GPU without CuPy/CUDA raises DeviceError with the reason;
- a device that is lost at start-up raises DeviceError, or with
  ``set_mode_gpu(fallback=True)`` logs the reason and stays on the CPU;
- CuPy's OutOfMemoryError (and cuBLAS/CUDA allocation failures, other CUDA
  errors, host MemoryErrors) leave ``translate_gpu_errors()`` as DeviceError
  with the bytes asked and free.
"""
import logging
import types

import numpy as np
import pytest

from engine.core import backend
from engine.core.errors import CaffeError, DeviceError, LayerError


# --------------------------------------------------------------------------- fake CuPy
def _cupy_class(name, base=Exception, module="cupy.cuda.memory"):
    return type(name, (base,), {"__module__": module})


class FakeOutOfMemoryError(MemoryError):
    """cupy.cuda.memory.OutOfMemoryError(size, total, limit=0), message as CuPy's."""

    def __init__(self, size, total, limit=0):
        msg = "Out of memory allocating {:,} bytes (allocated so far: {:,} bytes).".format(size, total)
        if limit:
            msg = msg[:-2] + ", limit set to: {:,} bytes).".format(limit)
        super().__init__(msg)


FakeOutOfMemoryError.__name__ = "OutOfMemoryError"
FakeOutOfMemoryError.__module__ = "cupy.cuda.memory"
FakeCUDARuntimeError = _cupy_class("CUDARuntimeError", RuntimeError, "cupy_backends.cuda.api.runtime")
FakeCUBLASError = _cupy_class("CUBLASError", RuntimeError, "cupy_backends.cuda.libs.cublas")

GiB = 1 << 30


def fake_cupy(free=512 * 1024 ** 2, total=16 * GiB, use_error=None, meminfo_error=None):
    """A module-like object with the few CuPy entry points the backend touches."""
    state = {"used": None}

    class Device:
        def __init__(self, i=0):
            self.id = i

        def use(self):
            if use_error is not None:
                raise use_error
            state["used"] = self.id

        def synchronize(self):
            pass

    def mem_get_info():
        if meminfo_error is not None:
            raise meminfo_error
        return free, total

    class Pool:
        def total_bytes(self):
            return 3 * GiB

        def used_bytes(self):
            return 2 * GiB

    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, memGetInfo=mem_get_info)
    cuda = types.SimpleNamespace(Device=Device, runtime=runtime)
    cp = types.SimpleNamespace(cuda=cuda, get_default_memory_pool=lambda: Pool(), ndarray=type(None),
                               _state=state)
    return cp


@pytest.fixture
def restore_backend():
    saved = (backend._cupy, backend._cupy_error, dict(backend._default), getattr(backend._local, "mode", None))
    yield
    backend._cupy, backend._cupy_error = saved[0], saved[1]
    backend._default.clear()
    backend._default.update(saved[2])
    if saved[3] is None:
        if hasattr(backend._local, "mode"):
            del backend._local.mode
    else:
        backend._local.mode = saved[3]


def _install(cp=None, error=None):
    backend._cupy, backend._cupy_error = cp, error


# --------------------------------------------------------------------------- start-up
def test_gpu_without_cupy_raises_device_error(restore_backend):
    _install(None, ImportError("No module named 'cupy'"))
    with pytest.raises(DeviceError) as ei:
        backend.set_mode_gpu()
    assert "CuPy" in str(ei.value) and "No module named 'cupy'" in str(ei.value)
    assert backend.mode() == backend.CPU


def test_gpu_without_cupy_falls_back_when_asked(restore_backend, caplog):
    _install(None, ImportError("No module named 'cupy'"))
    with caplog.at_level(logging.WARNING, logger="engine.core.backend"):
        assert backend.set_mode_gpu(fallback=True) == backend.CPU
    assert backend.mode() == backend.CPU
    assert any("running on the CPU instead" in r.getMessage() and "CuPy" in r.getMessage()
               for r in caplog.records)


def test_no_device_at_import_is_a_device_error(restore_backend):
    _install(None, FakeCUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"))
    with pytest.raises(DeviceError, match="cudaErrorNoDevice"):
        backend.set_mode_gpu()


@pytest.mark.parametrize("where", ["use", "meminfo"])
def test_lost_gpu_at_start_up(restore_backend, where, caplog):
    lost = FakeCUDARuntimeError("cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy "
                                "or unavailable")
    cp = fake_cupy(use_error=lost if where == "use" else None,
                   meminfo_error=lost if where == "meminfo" else None)
    _install(cp)
    with pytest.raises(DeviceError) as ei:
        backend.set_mode_gpu()
    msg = str(ei.value)
    assert "GPU 0 is not usable" in msg and "cudaErrorDevicesUnavailable" in msg
    assert backend.mode() == backend.CPU
    with caplog.at_level(logging.WARNING, logger="engine.core.backend"):
        assert backend.set_mode_gpu(fallback=True) == backend.CPU
    assert backend.mode() == backend.CPU
    assert any("cudaErrorDevicesUnavailable" in r.getMessage() for r in caplog.records)


def test_working_fake_gpu_sets_gpu_mode(restore_backend):
    cp = fake_cupy()
    _install(cp)
    assert backend.set_mode_gpu(fallback=True) == backend.GPU
    assert backend.mode() == backend.GPU and cp._state["used"] == 0


# --------------------------------------------------------------------------- out of memory
def test_gpu_oom_becomes_device_error_with_sizes(restore_backend):
    _install(fake_cupy(free=512 * 1024 ** 2, total=16 * GiB))
    original = FakeOutOfMemoryError(3 * GiB, 2 * GiB)
    with pytest.raises(DeviceError) as ei:
        with backend.translate_gpu_errors("Forward of layer 'conv1'"):
            raise original
    msg = str(ei.value)
    assert msg.startswith("Forward of layer 'conv1': Out of memory on GPU 0")
    assert "asked for 3.0 GiB (%d bytes)" % (3 * GiB) in msg
    assert "512.0 MiB free of 16.0 GiB" in msg and "(%d of %d bytes)" % (512 * 1024 ** 2, 16 * GiB) in msg
    assert "memory pool holds 3.0 GiB (2.0 GiB in use)" in msg
    assert ei.value.oom is True and ei.value.__cause__ is original


def test_gpu_oom_message_without_device_info():
    msg = backend.gpu_oom_message(FakeOutOfMemoryError(1024, 0), cp=None)
    assert "asked for 1.0 KiB (1024 bytes)" in msg


def test_cublas_alloc_failure_is_an_oom(restore_backend):
    _install(fake_cupy())
    with pytest.raises(DeviceError, match="Out of memory on GPU 0") as ei:
        with backend.translate_gpu_errors():
            raise FakeCUBLASError("CUBLAS_STATUS_ALLOC_FAILED")
    assert ei.value.oom


def test_other_cuda_error_is_a_device_error(restore_backend):
    _install(fake_cupy())
    with pytest.raises(DeviceError, match="CUDA error on GPU 0: CUDARuntimeError: cudaErrorLaunchFailure") as ei:
        with backend.translate_gpu_errors():
            raise FakeCUDARuntimeError("cudaErrorLaunchFailure: unspecified launch failure")
    assert ei.value.oom is False


def test_host_memory_error_becomes_device_error():
    with pytest.raises(DeviceError, match="Out of memory on the host") as ei:
        with backend.translate_gpu_errors():
            np.empty(1 << 62, np.uint8)     # far more than any machine has
    assert "Unable to allocate" in str(ei.value) and ei.value.oom


def test_engine_and_programming_errors_pass_through():
    e = LayerError("bad", layer="x")
    with pytest.raises(LayerError) as ei:
        with backend.translate_gpu_errors():
            raise e
    assert ei.value is e
    with pytest.raises(KeyError):
        with backend.translate_gpu_errors():
            raise KeyError("not a device problem")


def test_oom_inside_a_net_range(restore_backend, tmp_path):
    """What the one-line call in Net's ranges gives: the layer's OOM as a DeviceError."""
    from engine import TEST, Net
    p = tmp_path / "n.prototxt"
    p.write_text('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
                 'layer { name: "r" type: "ReLU" bottom: "x" top: "y" }\n')
    net = Net(str(p), TEST)
    _install(fake_cupy())

    def boom(bottom, top):
        raise FakeOutOfMemoryError(1 << 20, 0)

    net.layers[1].forward = boom
    with pytest.raises(DeviceError, match=r"asked for 1\.0 MiB") as ei:
        with backend.translate_gpu_errors("Forward"):
            net.forward()
    assert isinstance(ei.value, CaffeError)


def test_net_ranges_translate_a_layers_memory_error_and_name_the_layer(restore_backend, tmp_path):
    """ForwardFromTo and BackwardFromTo turn a layer's host MemoryError into a DeviceError
    (as translate_gpu_errors does) that names the layer, and let other errors through
    unchanged."""
    from engine import TRAIN, Net
    p = tmp_path / "n.prototxt"
    p.write_text('force_backward: true\n'
                 'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
                 'layer { name: "r" type: "ReLU" bottom: "x" top: "y" }\n')
    net = Net(str(p), TRAIN)
    relu = net.layers[1]

    def no_memory(*args):
        raise MemoryError("Unable to allocate 8.00 EiB for an array")

    relu.forward = no_memory
    with pytest.raises(DeviceError, match="Out of memory on the host") as ei:
        net.ForwardFromTo(0, 1)
    assert ei.value.oom and "'r'" in str(ei.value) and isinstance(ei.value.__cause__, MemoryError)
    relu.forward = lambda bottom, top: (_ for _ in ()).throw(KeyError("mine"))
    with pytest.raises(KeyError, match="mine"):
        net.ForwardFromTo(0, 1)
    del relu.forward
    net.ForwardFromTo(0, 1)
    relu.backward = no_memory
    with pytest.raises(DeviceError, match="Out of memory on the host") as ei:
        net.BackwardFromTo(1, 0)
    assert "'r'" in str(ei.value)

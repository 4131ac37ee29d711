"""Blob and SyncedMemory semantics (host side; the GPU side is marked gpu)."""
import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob, caffe_asum
from engine.core.errors import ShapeError
from engine.proto import caffe_pb2


def test_shape_count_and_legacy_accessors():
    b = Blob((2, 3, 4, 5))
    assert b.count == 120 and b.num_axes == 4 and b.count_range(1) == 60 and b.count_range(1, 3) == 12
    assert (b.num, b.channels, b.height, b.width) == (2, 3, 4, 5)
    assert b.shape_string() == "2 3 4 5 (120)"
    assert b.canonical_axis(-1) == 3
    with pytest.raises(ShapeError, match="axis 4 out of range for 4-D Blob"):
        b.canonical_axis(4)
    s = Blob()
    assert s.count == 0
    s.reshape(())
    assert s.count == 1 and s.shape_string() == "(1)"
    assert Blob((7,)).legacy_shape(-4) == 1


def test_memory_is_zero_initialised_and_kept_until_capacity_grows():
    b = Blob((2, 3))
    assert np.all(b.data == 0) and np.all(b.diff == 0)
    b.data[...] = 1
    mem = b.data_memory
    b.reshape(3, 2)                  # same count: same memory, data kept
    assert b.data_memory is mem and np.all(b.data == 1)
    b.reshape(1, 2)                  # smaller: same memory
    assert b.data_memory is mem
    b.reshape(4, 4)                  # larger than capacity: new memory
    assert b.data_memory is not mem and np.all(b.data == 0)


def test_data_view_is_writable_and_shared():
    a = Blob((2, 2))
    b = Blob((4,))
    b.share_data(a)
    a.data[...] = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(b.data, [1, 2, 3, 4])
    assert b.diff_memory is not a.diff_memory
    b.share_diff(a)
    b.diff[...] = 5
    assert np.all(a.diff == 5)
    with pytest.raises(ShapeError):
        Blob((3,)).share_data(a)


def test_update_asum_sumsq_scale():
    b = Blob((3,))
    b.data[...] = [1, -2, 3]
    b.diff[...] = [0.5, 0.5, -1]
    assert b.asum_data() == 6 and b.sumsq_data() == 14 and b.asum_diff() == 2
    b.update()
    np.testing.assert_array_equal(b.data, [0.5, -2.5, 4])
    b.scale_diff(2)
    np.testing.assert_array_equal(b.diff, [1, 1, -2])


def test_caffe_asum_accumulates_like_sasum():
    # 16 float32 lanes, each summed in order: large blobs round as Caffe's do.
    x = np.full(2 ** 25 + 3, 0.7, np.float32)
    got = caffe_asum(x)
    exact = 0.7 * x.size
    assert got != pytest.approx(exact, rel=1e-7)          # float32 accumulation error shows
    assert got == pytest.approx(exact, rel=2e-2)
    small = np.array([1, -2, 3], np.float32)
    assert caffe_asum(small) == 6


def test_proto_roundtrip_and_legacy_shapes():
    b = Blob((2, 3))
    b.data[...] = np.arange(6).reshape(2, 3)
    p = b.to_proto(caffe_pb2.BlobProto(), write_diff=True)
    assert list(p.shape.dim) == [2, 3] and len(p.diff) == 6
    c = Blob()
    c.from_proto(p)
    np.testing.assert_array_equal(c.data, b.data)
    legacy = caffe_pb2.BlobProto(num=1, channels=1, height=2, width=3, data=range(6))
    d = Blob((2, 3))
    d.from_proto(legacy, reshape=False)        # legacy 4-D equals (2, 3) padded with ones
    np.testing.assert_array_equal(d.data.ravel(), np.arange(6))
    with pytest.raises(ShapeError, match="shape mismatch"):
        Blob((3, 2)).from_proto(p, reshape=False)
    with pytest.raises(ShapeError, match="data values"):
        Blob((2, 3)).from_proto(caffe_pb2.BlobProto(shape=caffe_pb2.BlobShape(dim=[2, 3]), data=[1]),
                                reshape=False)


def test_float64_blob_keeps_double_data():
    b = Blob((2,), dtype=np.float64)
    b.data[...] = [1e-300, 2]
    p = b.to_proto(caffe_pb2.BlobProto())
    assert len(p.double_data) == 2 and p.double_data[0] == 1e-300


def test_gpu_mode_without_cupy_is_a_clear_error(monkeypatch):
    if backend.gpu_available():
        pytest.skip("a GPU is present")
    with pytest.raises(Exception, match="GPU mode needs CuPy and a CUDA device"):
        backend.set_mode_gpu()
    assert backend.mode() == backend.CPU


def test_mode_is_per_thread():
    import threading
    seen = {}

    def worker():
        seen["mode"] = backend.mode()
    backend.set_mode_cpu()
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["mode"] == backend.CPU


@pytest.mark.gpu
def test_synced_memory_moves_only_when_stale():
    backend.set_mode_gpu()
    try:
        b = Blob((4,))
        b.data[...] = [1, 2, 3, 4]                 # host is current
        assert b.data_memory.where == "host"
        d = b.get_data()                            # copies to the device
        assert b.data_memory.where == "synced"
        b.mut_data()[...] = d * 2                   # device is current
        assert b.data_memory.where == "device"
        np.testing.assert_array_equal(b.data, [2, 4, 6, 8])
        assert b.data_memory.where == "host"        # .data marks the host copy current
    finally:
        backend.set_mode_cpu()

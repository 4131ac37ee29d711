"""Blob: Caffe's N-D array of data and diff, with SyncedMemory semantics.

Each of data and diff is a :class:`SyncedMemory`: a flat buffer that lives on
the host (NumPy) and/or the device (CuPy) and is copied only when the other
side asks for it and the side asked for is stale.  ``Blob.data``/``Blob.diff``
are pycaffe's writable NumPy views (asking for them makes the host copy the
current one); layers use ``get_data``/``mut_data`` (and the ``diff`` twins),
which return arrays on the device of the current mode.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np

from engine.core import backend
from engine.core.errors import EmptyBlobError, MemoryBudgetExceeded, NetError, ShapeError
from engine.core.limits import LAYER_OVERHEAD, MAX_BLOB_AXES
from engine.core.log import check_failed, human_bytes, shape_string
from engine.core.types import Array
from engine.proto import caffe_pb2

INT_MAX = 0x7fffffff
_ASUM_LANES = 16
_ASUM_ROWS = 1 << 12            # rows of 16 per block (256 KiB)
_asum_local = threading.local()


def caffe_asum(a):
    """Sum of |a| as Caffe's CPU build computes it (cblas_sasum: 16 float32
    accumulators run along the array, then added), so that debug_info numbers of
    very large blobs round as Caffe's do.  On the GPU (cublasSasum), and for
    other dtypes, a plain reduction."""
    xp = backend.xp_of(a)
    x = a.reshape(-1)
    if xp is not np or x.dtype != np.float32 or x.size < 4 * _ASUM_LANES:
        return float(xp.abs(x).sum())
    m = (x.size // _ASUM_LANES) * _ASUM_LANES
    rows = m // _ASUM_LANES
    x2 = x[:m].reshape(rows, _ASUM_LANES)
    if rows <= _ASUM_ROWS:
        lanes = np.abs(x2).sum(axis=0, dtype=np.float32)
    else:
        # The same sums in blocks of rows through a small buffer (no |x| temporary as
        # big as the blob): row 0 of the buffer carries the lanes so far, and the
        # reduction down the rows adds in the same order as over the whole array.
        buf = getattr(_asum_local, "buf", None)
        if buf is None:
            buf = _asum_local.buf = np.empty((_ASUM_ROWS + 1, _ASUM_LANES), np.float32)
        lanes = np.zeros(_ASUM_LANES, np.float32)
        for r0 in range(0, rows, _ASUM_ROWS):
            k = min(rows, r0 + _ASUM_ROWS) - r0
            buf[0] = lanes
            np.abs(x2[r0:r0 + k], out=buf[1:k + 1])
            lanes = buf[:k + 1].sum(axis=0, dtype=np.float32)
    tail = np.abs(x[m:]).sum(dtype=np.float32)
    return float(np.float32(lanes.sum(dtype=np.float32) + tail))
_UNINIT, _HOST, _DEV, _SYNCED = 0, 1, 2, 3


# ------------------------------------------------------------------ memory ledger
class MemoryLedger:
    """The memory Blobs declare while the ledger is active (on this thread): every time a
    Blob's capacity grows, its data and diff (both, as a Blob holds them once it has run
    forward and backward), and the largest work buffer a layer declares (Caffe's
    ``col_buffer_``; the engine shares one such scratch between layers).  Declared, not
    allocated: memory is asked for lazily, at the first use, so a net's total is known at
    the end of Init before its blobs hold any.  With a ``budget`` (bytes) the ledger raises
    MemoryBudgetExceeded at the declaration that passes it."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = None if budget is None else int(budget)
        self.blob_bytes = 0
        self.buffer_bytes = 0
        self.overhead_bytes = 0     # the layers' own (limits.LAYER_OVERHEAD each): budgeted, not in total
        self.layers = 0

    @property
    def total(self) -> int:
        return self.blob_bytes + self.buffer_bytes

    def _check(self, what: str) -> None:
        needed = self.total + self.overhead_bytes
        if self.budget is not None and needed > self.budget:
            raise MemoryBudgetExceeded(
                "the net needs at least %s of memory, more than the budget of %s (its blobs' data and "
                "diff, its work buffers and %s for its %d layer%s themselves, counted at Init up to %s, which "
                "passed the budget): refused before that memory is allocated"
                % (human_bytes(needed), human_bytes(self.budget), human_bytes(self.overhead_bytes), self.layers,
                   "" if self.layers == 1 else "s", what), needed=needed, budget=self.budget)


_LEDGERS = threading.local()


def _ledgers() -> list:
    stack = getattr(_LEDGERS, "stack", None)
    if stack is None:
        stack = _LEDGERS.stack = []
    return stack


@contextmanager
def memory_ledger(budget: int | None = None) -> Iterator[MemoryLedger]:
    """Count (and with ``budget`` bytes, limit) the memory Blobs declare on this thread inside
    the block; nested ledgers each count what is declared inside them."""
    ledger = MemoryLedger(budget)
    stack = _ledgers()
    stack.append(ledger)
    try:
        yield ledger
    finally:
        stack.remove(ledger)


def memory_budget(max_bytes: int | None) -> Any:
    """``with engine.memory_budget(n):`` nets built inside may declare at most ``n`` bytes (all
    of them together): the first Blob or buffer past it raises MemoryBudgetExceeded before its
    memory is asked for (``None``: no limit)."""
    return memory_ledger(max_bytes)


def declare_bytes(nbytes: int, what: str) -> None:
    """``nbytes`` of memory a layer will hold besides its Blobs (e.g. prefetched batches),
    declared to the active ledgers before it is allocated."""
    for ledger in _ledgers():
        ledger.blob_bytes += nbytes
        ledger._check(what)


def declare_layer(name: str) -> None:
    """Layer ``name`` about to be made: its own memory (limits.LAYER_OVERHEAD) counted against the
    active ledgers' budgets (not in their ``total``, the blobs' memory Caffe reports)."""
    for ledger in _ledgers():
        ledger.overhead_bytes += LAYER_OVERHEAD
        ledger.layers += 1
        if ledger.budget is not None and ledger.total + ledger.overhead_bytes > ledger.budget:
            try:
                ledger._check("layer %s" % name)
            except MemoryBudgetExceeded as e:
                e.layer = name
                raise


def declare_buffer(shape: Sequence[int], what: str, dtype: Any = np.float32) -> int:
    """A layer's work buffer that Caffe keeps as a Blob (e.g. ``col_buffer_``): Blob::Reshape's
    INT_MAX check on ``shape`` (:func:`blob_count`), and its bytes declared to the active
    ledgers as the largest buffer.  Returns its count.  Allocates nothing."""
    count = blob_count(shape, what)
    nbytes = count * np.dtype(dtype).itemsize
    for ledger in _ledgers():
        if nbytes > ledger.buffer_bytes:
            ledger.buffer_bytes = nbytes
            ledger._check("%s of shape %s" % (what, " ".join(str(int(d)) for d in shape)))
    return count


def blob_count(shape, what=None):
    """The element count of a Blob of ``shape``, checked as Blob::Reshape checks it: at most
    MAX_BLOB_AXES axes, no negative dimension, and dimension by dimension
    ``shape[i] <= INT_MAX / count_`` (glog's text: ``Check failed: shape[i] <= 0x7fffffff /
    count_ (d vs. q) blob size exceeds INT_MAX``).  Nothing is allocated: layers call it for
    the buffers Caffe keeps as Blobs (``what`` names the buffer in the message) before they
    make them, so that a net Caffe refuses is refused before its memory is asked for."""
    shape = tuple(int(d) for d in shape)

    def where():        # (the message's tail, made only for an error; a long shape is cut short)
        dims = " ".join(str(d) for d in shape[:MAX_BLOB_AXES])
        if len(shape) > MAX_BLOB_AXES:
            dims += " ... (%d axes)" % len(shape)
        return "" if what is None else " (%s of shape %s)" % (what, dims)
    if len(shape) > MAX_BLOB_AXES:
        raise ShapeError(check_failed("shape.size() <= kMaxBlobAxes", len(shape), MAX_BLOB_AXES).rstrip() + where())
    count = 1
    for d in shape:
        if d < 0:
            raise ShapeError("Blob shape %s has a negative dimension%s" % (shape, where()))
        if count != 0 and d > INT_MAX // count:
            raise ShapeError(check_failed("shape[i] <= 0x7fffffff / count_", d, INT_MAX // count,
                                          "blob size exceeds INT_MAX") + where())
        count *= d
    return count


class SyncedMemory:
    """A flat buffer of ``size`` elements held on the host, the device or both.

    ``version`` counts the times a writable copy was handed out (``mutable_*``,
    hence ``Blob.mut_data``, ``Blob.data`` ...): statistics taken at one version
    (engine.instruments.debug.Recorder) are stale once it moves."""

    __slots__ = ("size", "dtype", "_host", "_dev", "head", "version")

    def __init__(self, size, dtype):
        self.size, self.dtype = int(size), np.dtype(dtype)
        self._host = self._dev = None
        self.head = _UNINIT
        self.version = 0

    def host(self):
        """Host buffer, current (copied from the device if that is newer)."""
        if self.head == _UNINIT:
            self._host = np.zeros(self.size, self.dtype)
            self.head = _HOST
        elif self.head == _DEV:
            if self._host is None:
                self._host = np.empty(self.size, self.dtype)
            self._dev.get(out=self._host)
            self.head = _SYNCED
        return self._host

    def dev(self):
        """Device buffer, current (copied from the host if that is newer)."""
        cp = backend.cupy()
        if self.head == _UNINIT:
            self._dev = cp.zeros(self.size, self.dtype)
            self.head = _DEV
        elif self.head == _HOST:
            if self._dev is None:
                self._dev = cp.empty(self.size, self.dtype)
            self._dev.set(self._host)
            self.head = _SYNCED
        return self._dev

    def mutable_host(self):
        h = self.host()
        self.head = _HOST
        self.version += 1
        return h

    def mutable_dev(self):
        d = self.dev()
        self.head = _DEV
        self.version += 1
        return d

    def get(self, gpu):
        return self.dev() if gpu else self.host()

    def mutable(self, gpu):
        return self.mutable_dev() if gpu else self.mutable_host()

    @property
    def where(self):
        return ("uninitialized", "host", "device", "synced")[self.head]

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize


class Blob:
    """An N-D blob: shape, data and diff.  ``Blob(shape, dtype=float32)``."""

    def __init__(self, shape=(), dtype=np.float32):
        self.dtype = np.dtype(dtype)
        self._shape = ()
        self._count = 0
        self._capacity = 0
        self._data = None
        self._diff = None
        # Caffe's default Blob() has count 0; a shape given here reshapes.
        if shape is not None and len(tuple(shape)):
            self.reshape(shape)

    # ------------------------------------------------------------------ shape
    def reshape(self, *shape: int | Sequence[int]) -> None:
        """Blob::Reshape: new shape; memory grows only past the capacity."""
        if len(shape) == 1 and type(shape[0]) is tuple and shape[0] and shape[0] == self._shape:
            return          # the shape it has (every layer's Reshape before its Forward, mostly)
        given = shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        dims: tuple[int, ...] = tuple(int(d) for d in given)  # type: ignore[arg-type]
        shape = dims
        count = blob_count(shape, "blob")
        if count > self._capacity:
            if _ledgers():
                declare_bytes(2 * (count - self._capacity) * self.dtype.itemsize,
                              "a blob of shape %s" % shape_string(shape, count))
            self._shape, self._count = shape, count
            self._capacity = count
            self._data = SyncedMemory(count, self.dtype)
            self._diff = SyncedMemory(count, self.dtype)
        else:
            self._shape, self._count = shape, count
        # A count of 0 that never grew leaves the blob without memory (data_ and diff_ NULL
        # in Caffe): asking for its data or diff is Caffe's CHECK(data_) (EmptyBlobError).

    Reshape = reshape

    def reshape_like(self, other: Blob) -> None:
        self.reshape(other.shape)

    ReshapeLike = reshape_like

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def count(self) -> int:
        return self._count

    def count_range(self, start: int, end: int | None = None) -> int:
        """Blob::count(start, end): product of dims in [start, end)."""
        end = self.num_axes if end is None else end
        c = 1
        for d in self._shape[start:end]:
            c *= d
        return c

    @property
    def num_axes(self) -> int:
        return len(self._shape)

    def canonical_axis(self, axis_index: int) -> int:
        """Blob::CanonicalAxisIndex: negative axes count from the end."""
        n = self.num_axes
        if not -n <= axis_index < n:
            raise ShapeError("axis %d out of range for %d-D Blob with shape %s"
                             % (axis_index, n, shape_string(self._shape, self._count)))
        return axis_index + n if axis_index < 0 else axis_index

    CanonicalAxisIndex = canonical_axis

    def shape_at(self, index: int) -> int:
        return self._shape[self.canonical_axis(index)]

    def legacy_shape(self, index: int) -> int:
        if self.num_axes > 4:
            raise ShapeError("Cannot use legacy accessors on Blobs with > 4 axes.")
        if index >= self.num_axes or index < -self.num_axes:
            return 1
        return self.shape_at(index)

    @property
    def num(self) -> int:
        return self.legacy_shape(0)

    @property
    def channels(self) -> int:
        return self.legacy_shape(1)

    @property
    def height(self) -> int:
        return self.legacy_shape(2)

    @property
    def width(self) -> int:
        return self.legacy_shape(3)

    def shape_string(self) -> str:
        return shape_string(self._shape, self._count)

    # ------------------------------------------------------------------ memory
    def _view(self, flat):
        return flat[: self._count].reshape(self._shape)

    def _gpu(self, gpu):
        return backend.mode() == backend.GPU if gpu is None else gpu

    def _mem(self, mem, which="data_"):
        if mem is None:   # no memory: Caffe's CHECK(data_) / CHECK(diff_) in cpu_data() & co.
            raise self.empty_error(which)
        return mem

    @property
    def has_memory(self) -> bool:
        """Whether the blob holds memory (Caffe's data_ is not NULL): False for a blob whose
        count has been 0 since it was made, whose data and diff cannot be asked for."""
        return self._data is not None

    def empty_error(self, which: str = "data_", name: str | None = None) -> EmptyBlobError:
        """The error of asking for the data (``which`` "data_") or diff ("diff_") of a blob
        without memory; ``name``: how the net calls the blob, when known."""
        # a net's blob by its name; a param or a layer's own buffer as described ("param 0 of
        # layer 'x'", "an internal buffer of layer 'x'")
        blob = ("the blob" if name is None else name if name.startswith(("param ", "an internal buffer "))
                else "blob '%s'" % name)
        if not self._shape and self._count == 0:
            why = ("%s was never given a shape, so it holds no memory: reshape it first, e.g. "
                   "with input_param { shape {...} } or blob.reshape(...)" % blob)
        else:
            why = ("%s has shape %s: its count has been 0 since it was made, so it holds no "
                   "memory, and Caffe aborts at the first use of its %s"
                   % (blob, self.shape_string(), "data" if which == "data_" else "diff"))
        e = EmptyBlobError("Check failed: %s (%s)" % (which, why), blob=name, shape=self._shape, source=self)
        e.which = which
        return e

    def get_data(self, gpu: bool | None = None) -> Array:
        """Data on the device of the current mode (read-only by convention)."""
        return self._view(self._mem(self._data).get(self._gpu(gpu)))

    def mut_data(self, gpu: bool | None = None) -> Array:
        """Data on the device of the current mode, marked as the current copy."""
        return self._view(self._mem(self._data).mutable(self._gpu(gpu)))

    def get_diff(self, gpu: bool | None = None) -> Array:
        return self._view(self._mem(self._diff, "diff_").get(self._gpu(gpu)))

    def mut_diff(self, gpu: bool | None = None) -> Array:
        return self._view(self._mem(self._diff, "diff_").mutable(self._gpu(gpu)))

    def set_data(self, value: Any) -> None:
        self.mut_data()[...] = value

    def set_diff(self, value: Any) -> None:
        self.mut_diff()[...] = value

    @property
    def data(self) -> np.ndarray:
        """pycaffe's ``blob.data``: a writable NumPy view of the host data."""
        return self._view(self._mem(self._data).mutable_host())

    @data.setter
    def data(self, value: Any) -> None:
        self.data[...] = value

    @property
    def diff(self) -> np.ndarray:
        """pycaffe's ``blob.diff``: a writable NumPy view of the host diff."""
        return self._view(self._mem(self._diff, "diff_").mutable_host())

    @diff.setter
    def diff(self, value: Any) -> None:
        self.diff[...] = value

    @property
    def _gpu_data_ptr(self) -> int:
        """pycaffe's (GPU build) device address of the data: mutable_gpu_data()."""
        return int(self.mut_data(gpu=True).data.ptr)

    @property
    def _gpu_diff_ptr(self) -> int:
        """pycaffe's (GPU build) device address of the diff: mutable_gpu_diff()."""
        return int(self.mut_diff(gpu=True).data.ptr)

    @property
    def data_memory(self) -> SyncedMemory | None:
        return self._data

    @property
    def diff_memory(self) -> SyncedMemory | None:
        return self._diff

    def share_data(self, other: Blob) -> None:
        """Blob::ShareData: use ``other``'s data memory (counts must agree)."""
        if self._count != other.count:
            raise ShapeError("ShareData: count %d vs %d" % (self._count, other.count))
        self._data = other._data

    def share_diff(self, other: Blob) -> None:
        if self._count != other.count:
            raise ShapeError("ShareDiff: count %d vs %d" % (self._count, other.count))
        self._diff = other._diff

    ShareData, ShareDiff = share_data, share_diff

    def shares_data_with(self, other: Blob) -> bool:
        return self._data is other._data

    # ------------------------------------------------------------------ math
    def _reduce(self, mem, fn):
        if self._count == 0:
            return 0.0
        gpu = mem.head == _DEV  # compute where the current copy lives
        a = mem.get(gpu)[: self._count]
        return float(fn(a))

    def asum_data(self) -> float:
        return self._reduce(self._data, caffe_asum)

    def asum_diff(self) -> float:
        return self._reduce(self._diff, caffe_asum)

    def sumsq_data(self) -> float:
        return self._reduce(self._data, lambda a: backend.xp_of(a).dot(a, a))

    def sumsq_diff(self) -> float:
        return self._reduce(self._diff, lambda a: backend.xp_of(a).dot(a, a))

    def scale_data(self, s: float) -> None:
        if self._data is None:      # Caffe's scale_data: nothing to scale without memory
            return
        d = self.mut_data()
        d *= d.dtype.type(s)

    def scale_diff(self, s: float) -> None:
        if self._diff is None:
            return
        d = self.mut_diff()
        d *= d.dtype.type(s)

    def update(self) -> None:
        """Blob::Update: data -= diff, where the data currently lives."""
        if self._count == 0:
            return
        gpu = self._data.head == _DEV
        data = self._view(self._data.mutable(gpu))
        data -= self._view(self._diff.get(gpu))

    Update = update

    # ------------------------------------------------------------------ protos
    def shape_equals(self, proto: caffe_pb2.BlobProto) -> bool:
        """Blob::ShapeEquals, including the legacy num/channels/height/width form."""
        if proto.HasField("num") or proto.HasField("channels") or proto.HasField("height") \
                or proto.HasField("width"):
            if self.num_axes > 4:
                return False
            return (self.legacy_shape(-4), self.legacy_shape(-3), self.legacy_shape(-2),
                    self.legacy_shape(-1)) == (proto.num, proto.channels, proto.height, proto.width)
        return tuple(proto.shape.dim) == self._shape

    @staticmethod
    def proto_shape(proto: caffe_pb2.BlobProto) -> tuple[int, ...]:
        if proto.HasField("num") or proto.HasField("channels") or proto.HasField("height") \
                or proto.HasField("width"):
            return (proto.num, proto.channels, proto.height, proto.width)
        return tuple(int(d) for d in proto.shape.dim)

    def from_proto(self, proto: caffe_pb2.BlobProto, reshape: bool = True) -> None:
        """Blob::FromProto: copy data (and diff, if present) from a BlobProto."""
        if reshape:
            self.reshape(self.proto_shape(proto))
        elif not self.shape_equals(proto):
            raise ShapeError("shape mismatch (reshape not set)")
        count = self._count
        data_field = "double_data" if len(proto.double_data) > 0 else "data"
        diff_field = "double_diff" if len(proto.double_diff) > 0 else "diff"
        for field in (data_field, diff_field):
            n = len(getattr(proto, field))
            if n != count and (field == data_field or n > 0):
                raise ShapeError("BlobProto has %d %s values for a blob of count %d" % (n, field, count))
        with np.errstate(all="ignore"):   # doubles beyond float range become inf, as in Caffe
            if len(proto.double_data) > 0:
                self.data.reshape(-1)[:] = np.asarray(proto.double_data, dtype=np.float64)
            else:
                self.data.reshape(-1)[:] = np.asarray(proto.data, dtype=np.float32)
            if len(proto.double_diff) > 0:
                self.diff.reshape(-1)[:] = np.asarray(proto.double_diff, dtype=np.float64)
            elif len(proto.diff) > 0:
                self.diff.reshape(-1)[:] = np.asarray(proto.diff, dtype=np.float32)

    FromProto = from_proto

    def to_proto(self, proto: caffe_pb2.BlobProto, write_diff: bool = False) -> caffe_pb2.BlobProto:
        """Blob::ToProto: shape, float data and optionally diff."""
        proto.Clear()
        proto.shape.dim.extend(self._shape)
        if self.dtype == np.float64:
            proto.double_data.extend(self.data.reshape(-1).tolist())
            if write_diff:
                proto.double_diff.extend(self.diff.reshape(-1).tolist())
        else:
            proto.data.extend(self.data.reshape(-1).tolist())
            if write_diff:
                proto.diff.extend(self.diff.reshape(-1).tolist())
        return proto

    ToProto = to_proto

    def copy_from(self, other: Blob, copy_diff: bool = False, reshape: bool = False) -> None:
        """Blob::CopyFrom."""
        if other.count != self._count or other.shape != self._shape:
            if reshape:
                self.reshape_like(other)
            else:
                raise ShapeError("Trying to copy blobs of different sizes.")
        if copy_diff:
            self.set_diff(other.get_diff())
        else:
            self.set_data(other.get_data())

    CopyFrom = copy_from

    @property
    def nbytes(self) -> int:
        return self._count * self.dtype.itemsize

    def __repr__(self):
        return "<Blob %s %s>" % (self.shape_string(), self.dtype.name)


class BlobPayload:
    """A BlobProto's shape fields and values, with the values as NumPy arrays.

    Quacks like the BlobProto it was made from for ``Blob.from_proto``,
    ``shape_equals`` and ``proto_shape`` (``HasField``, ``num``..``width``,
    ``shape``, ``data``/``double_data``/``diff``/``double_diff``), so weights can be
    taken out of a parsed caffemodel once and the message dropped or upgraded
    without copying them (``Net.CopyTrainedLayersFrom``)."""

    __slots__ = ("_shape", "data", "double_data", "diff", "double_diff")
    _LEGACY = ("num", "channels", "height", "width")

    def __init__(self, proto, data=None):
        sp = type(proto)()
        for f in self._LEGACY:
            if proto.HasField(f):
                setattr(sp, f, getattr(proto, f))
        if proto.HasField("shape"):
            sp.shape.CopyFrom(proto.shape)
        self._shape = sp
        # ``data``: the values when the caller has them already (e.g. a view of
        # the serialized bytes); converting a big repeated field costs more.
        self.data = np.asarray(proto.data, dtype=np.float32) if data is None else data
        self.double_data = np.asarray(proto.double_data, dtype=np.float64)
        self.diff = np.asarray(proto.diff, dtype=np.float32)
        self.double_diff = np.asarray(proto.double_diff, dtype=np.float64)

    def HasField(self, name):
        return self._shape.HasField(name)

    num = property(lambda self: self._shape.num)
    channels = property(lambda self: self._shape.channels)
    height = property(lambda self: self._shape.height)
    width = property(lambda self: self._shape.width)
    shape = property(lambda self: self._shape.shape)


def check_same_count(a, b, what, layer=None):
    if a.count != b.count:
        raise NetError("%s: count %d vs %d" % (what, a.count, b.count), layer=layer)

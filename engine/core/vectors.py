"""pycaffe's vector wrappers: ``caffe._caffe.BlobVec``, ``RawBlobVec``, ``LayerVec``,
``StringVec``, ``IntVec``, ``DtypeVec``, ``NetVec`` and ``BoolVec``.

``_caffe.cpp`` wraps each ``std::vector`` it hands to Python in a class of its own made
by boost.python's ``vector_indexing_suite``; these classes behave as those do:

- ``len(v)``, ``v[i]`` (negative ``i`` counts from the end; out of range: IndexError
  "Index out of range"; not an integer: TypeError "Invalid index type"), ``v[i] = x``,
  ``del v[i]``, iteration, ``x in v``, ``v.append(x)``, ``v.extend(iterable)``;
- slices ``v[a:b]`` give a new vector of the same class (a copy: the elements are the same
  objects); a step is refused (IndexError "slice step size not supported."); bounds are
  clipped; ``v[a:b] = x`` takes one element or a sequence (``len`` and indexing),
  ``del v[a:b]``;
- nothing else: no ``index``, ``count``, ``pop``, ``insert``, ``sort``, ``+``, and no
  ``==`` (two vectors are equal only when they are the same object, as boost.python's);
  ``isinstance(v, list)`` is False;
- elements are converted as boost.python converts them to the C++ type: a Blob, Layer or
  Net (or None, a null pointer) for the pointer vectors, ``str`` (or ``bytes``) for
  StringVec, an integer for IntVec, an int or float (kept as float32) for DtypeVec, and
  anything boost takes for ``bool`` (an int or None) for BoolVec.  An element that does
  not convert raises TypeError with the suite's message ("Attempting to append an invalid
  type", "Invalid assignment", "Incompatible Data Type", "Invalid sequence element"); ``x in
  v`` is False for such an ``x``.  Pointer elements compare by identity.
- ``BlobVec.add_blob(*shape)`` appends a new zero-filled blob of that shape (no keyword
  arguments: RuntimeError "BlobVec.add_blob takes no kwargs"), and returns None.
- The constructor takes no argument (``caffe._caffe.IntVec()``), as boost's default one.

Where pycaffe returns a vector by ``return_internal_reference`` (``net.layers``,
``net._blobs``, ``layer.blobs``, ``net._blob_loss_weights``, ``solver.test_nets``), the
engine returns a view over the owner's own list: changing it changes the owner, as in
pycaffe.  Where it copies (``copy_const_reference``: ``net._blob_names``,
``net._layer_names``, ``net._inputs``, ``net._outputs``, ``net._bottom_ids(i)``,
``net._top_ids(i)``), a new vector.

One leniency: an index (and an IntVec element, a shape in ``add_blob``) may be a NumPy
integer as well as a Python ``int`` (boost.python takes only the latter); nothing a
program that runs on pycaffe does behaves otherwise.

``repr`` shows pycaffe's names (``<class 'caffe._caffe.BlobVec'>``, ``<caffe._caffe.BlobVec
object at 0x...>``).
"""
from __future__ import annotations

import operator
from typing import Any, Iterable, Iterator

import numpy as np

_NOT_CONVERTIBLE = object()


class _BoostClass(type):
    """The classes' metaclass: ``repr`` as boost.python names the class in pycaffe."""

    def __repr__(cls):
        return "<class 'caffe._caffe.%s'>" % cls.__name__


def _index_of(i: Any) -> int:
    """An index as boost's ``extract<long>`` takes it (plus NumPy integers)."""
    if isinstance(i, (float, complex, str, bytes)):
        raise TypeError("Invalid index type")
    try:
        return operator.index(i)
    except TypeError:
        raise TypeError("Invalid index type") from None


def _slice_bound(value: Any) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("No registered converter was able to produce a C++ rvalue of type long from this "
                        "Python object of type %s" % type(value).__name__) from None


class _Vector(metaclass=_BoostClass):
    """The behaviour shared by every wrapper (vector_indexing_suite)."""

    _items: list

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            given = ", ".join([type(self).__name__] + [type(a).__name__ for a in args]
                              + ["%s=%s" % (k, type(v).__name__) for k, v in kwargs.items()])
            raise TypeError("Python argument types in\n    %s.__init__(%s)\ndid not match C++ signature:\n"
                            "    __init__(_object*)" % (type(self).__name__, given))
        self._items = []

    # ------------------------------------------------------------ the engine's constructors
    @classmethod
    def _view(cls, items: list) -> Any:
        """A vector over ``items`` itself (pycaffe's return_internal_reference)."""
        v = cls.__new__(cls)
        v._items = items
        return v

    @classmethod
    def _of(cls, items: Iterable = ()) -> Any:
        """A vector holding a copy of ``items`` (pycaffe's copy_const_reference)."""
        v = cls.__new__(cls)
        v._items = [v._stored(x) for x in items]
        return v

    # ------------------------------------------------------------ element conversion
    def _convert(self, value: Any) -> Any:
        """The element boost.python makes of ``value``, or _NOT_CONVERTIBLE."""
        return value

    def _stored(self, value: Any) -> Any:
        """An element the engine puts in (already the right type)."""
        return value

    def _read(self, value: Any) -> Any:
        return value

    def _same(self, a: Any, b: Any) -> bool:
        return bool(a == b)

    # ------------------------------------------------------------ the suite
    def __len__(self) -> int:
        return len(self._items)

    def _bounds(self, s: slice) -> tuple[int, int]:
        if s.step is not None:
            raise IndexError("slice step size not supported.")
        n = len(self._items)

        def clip(bound, default):
            if bound is None:
                return default
            b = _slice_bound(bound)
            if b < 0:
                b += n
            return min(max(b, 0), n)
        return clip(s.start, 0), clip(s.stop, n)

    def _position(self, i: Any) -> int:
        k = _index_of(i)
        n = len(self._items)
        if k < 0:
            k += n
        if k < 0 or k >= n:
            raise IndexError("Index out of range")
        return k

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start, stop = self._bounds(i)
            out = type(self).__new__(type(self))
            out.__dict__.update(self._copied_state())
            out._items = self._items[start:stop] if start <= stop else []
            return out
        return self._read(self._items[self._position(i)])

    def _copied_state(self) -> dict:
        """Attributes besides the items a slice carries over (BlobVec's dtype)."""
        return {}

    def __setitem__(self, i: Any, value: Any) -> None:
        if isinstance(i, slice):
            self._set_slice(i, value)
            return
        x = self._convert(value)
        if x is _NOT_CONVERTIBLE:
            raise TypeError("Invalid assignment")
        self._items[self._position(i)] = x

    def _set_slice(self, s: slice, value: Any) -> None:
        start, stop = self._bounds(s)
        x = self._convert(value)
        if x is not _NOT_CONVERTIBLE:
            if start <= stop:
                self._items[start:stop] = [x]
            return
        new = []
        for k in range(len(value)):
            e = self._convert(value[k])
            if e is _NOT_CONVERTIBLE:
                raise TypeError("Invalid sequence element")
            new.append(e)
        if start > stop:
            self._items[start:start] = new
        else:
            self._items[start:stop] = new

    def __delitem__(self, i: Any) -> None:
        if isinstance(i, slice):
            start, stop = self._bounds(i)
            if start < stop:
                del self._items[start:stop]
            return
        del self._items[self._position(i)]

    def __iter__(self) -> Iterator[Any]:
        if type(self)._read is _Vector._read:
            return iter(self._items)
        return (self._read(x) for x in self._items)

    def __contains__(self, value: Any) -> bool:
        x = self._convert(value)
        if x is _NOT_CONVERTIBLE:
            return False
        return any(self._same(self._read(e), x) for e in self._items)

    def append(self, value: Any) -> None:
        x = self._convert(value)
        if x is _NOT_CONVERTIBLE:
            raise TypeError("Attempting to append an invalid type")
        self._items.append(x)

    def extend(self, iterable: Iterable) -> None:
        new = []
        for value in iterable:
            x = self._convert(value)
            if x is _NOT_CONVERTIBLE:
                raise TypeError("Incompatible Data Type")
            new.append(x)
        self._items.extend(new)

    # ------------------------------------------------------------ Python's side
    def __repr__(self) -> str:
        return "<caffe._caffe.%s object at 0x%x>" % (type(self).__name__, id(self))

    def __copy__(self) -> Any:
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out._items = list(self._items)
        return out

    __hash__ = object.__hash__


class _PointerVector(_Vector):
    """A vector of shared or raw pointers: an instance of the class, or None (null)."""

    def _element_class(self) -> type:
        raise NotImplementedError

    def _convert(self, value: Any) -> Any:
        if value is None or isinstance(value, self._element_class()):
            return value
        return _NOT_CONVERTIBLE

    def _same(self, a: Any, b: Any) -> bool:
        return a is b


class _BlobVector(_PointerVector):
    def _element_class(self) -> type:
        from engine.core.blob import Blob
        return Blob


class BlobVec(_BlobVector):
    """``vector<shared_ptr<Blob> >``: ``layer.blobs``, ``net.params[name]``, ``net._blobs``."""

    _dtype = np.dtype(np.float32)

    @classmethod
    def _of(cls, items: Iterable = (), dtype: Any = np.float32) -> Any:
        v = super()._of(items)
        v._dtype = np.dtype(dtype)
        return v

    def _copied_state(self) -> dict:
        return {"_dtype": self._dtype} if "_dtype" in self.__dict__ else {}

    def add_blob(self, *shape: Any, **kwargs: Any) -> None:
        """``_caffe.cpp``'s BlobVec_add_blob: a new Blob of ``shape`` at the end."""
        from engine.core.blob import Blob
        if kwargs:
            raise RuntimeError("BlobVec.add_blob takes no kwargs")
        dims = []
        for d in shape:
            x = _int_element(d)
            if x is _NOT_CONVERTIBLE:
                raise TypeError("No registered converter was able to produce a C++ rvalue of type int "
                                "from this Python object of type %s" % type(d).__name__)
            dims.append(x)
        self._items.append(Blob(tuple(dims), dtype=self._dtype))


class RawBlobVec(_BlobVector):
    """``vector<Blob*>``: a Python layer's ``bottom`` and ``top``."""


class LayerVec(_PointerVector):
    """``vector<shared_ptr<Layer> >``: ``net.layers``."""

    def _element_class(self) -> type:
        from engine.core.layers.base import Layer
        return Layer


class NetVec(_PointerVector):
    """``vector<shared_ptr<Net> >``: ``solver.test_nets``."""

    def _element_class(self) -> type:
        from engine.core.net import Net
        return Net


class StringVec(_Vector):
    """``vector<string>``: ``net._blob_names``, ``net._layer_names``."""

    def _convert(self, value: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8", "surrogateescape")
        return _NOT_CONVERTIBLE


def _int_element(value: Any) -> Any:
    if isinstance(value, (float, complex, str, bytes, np.floating)):
        return _NOT_CONVERTIBLE
    try:
        v = operator.index(value)
    except TypeError:
        return _NOT_CONVERTIBLE
    if not -(1 << 31) <= v < (1 << 31):
        raise OverflowError("bad numeric conversion: %s overflow" % ("positive" if v > 0 else "negative"))
    return int(v)


class IntVec(_Vector):
    """``vector<int>``: ``net._inputs``, ``net._outputs``, ``net._bottom_ids(i)``,
    ``net._top_ids(i)``."""

    def _convert(self, value: Any) -> Any:
        return _int_element(value)

    def _stored(self, value: Any) -> Any:
        return int(value)


def _float32(value: Any) -> float:
    return float(np.float32(value))


class DtypeVec(_Vector):
    """``vector<float>``: ``net._blob_loss_weights``; elements read as Python floats of
    float32 values."""

    def _convert(self, value: Any) -> Any:
        if isinstance(value, (int, float)):         # bool is an int; np.float64 is a float
            return _float32(value)
        return _NOT_CONVERTIBLE

    def _stored(self, value: Any) -> Any:
        return _float32(value)

    def _read(self, value: Any) -> Any:
        return _float32(value)


class BoolVec(_Vector):
    """``vector<bool>`` (boost takes an int or None for a bool)."""

    def _convert(self, value: Any) -> Any:
        if value is None:
            return False
        if isinstance(value, int):
            return bool(value)
        return _NOT_CONVERTIBLE

    def _stored(self, value: Any) -> Any:
        return bool(value)


__all__ = ["BlobVec", "RawBlobVec", "LayerVec", "StringVec", "IntVec", "DtypeVec", "NetVec", "BoolVec"]

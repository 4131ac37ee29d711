"""Caffe's data layers: Input, DummyData, Data (LMDB, LevelDB), ImageData, HDF5Data,
HDF5Output, MemoryData and WindowData.

Each follows its counterpart in Caffe 1.0 (src/caffe/layers/*_layer.cpp):
the same top shapes, CHECK messages and record order.  Data, ImageData and
WindowData load batches on a background thread, as Caffe's
BasePrefetchingDataLayer does: ``data_param.prefetch`` (default 4) batches
circulate between a free and a full queue; Forward takes the next full batch
and copies it into the tops (to the GPU in GPU mode).

Paths are opened as Caffe opens them (relative to the working directory); a
relative path that does not exist there is also looked up beside the model
file when the net passes ``model_dir``.
"""
import atexit
import math
import os
import queue
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from engine.core import backend, db, rng
from engine.core.blob import declare_bytes
from engine.core.data_transformer import (
    DataTransformer,
    ImageError,
    decode_image,
    read_image,
    resize_linear,
    resolve_path,
)
from engine.core.errors import LayerError, ShapeError
from engine.core.fillers import fill
from engine.core.images import MissingOpenCV
from engine.core.layers.base import Layer, no_flops
from engine.core.layers.registry import register_layer
from engine.core.log import check_failed as _check_failed
from engine.core.log import layer_log
from engine.proto import caffe_pb2


def _engine_seed():
    """caffe_rng_rand(): the next raw output of Caffe's stream (seeds of the layers' own streams)."""
    return rng.caffe_rng_rand()


def _to_top(blob, array):
    """Copy a host array into ``blob`` (reshaped to it) on the current device."""
    blob.reshape(array.shape)
    dst = blob.mut_data()
    if backend.mode() == backend.GPU:
        dst[...] = backend.to_device(np.ascontiguousarray(array, dtype=blob.dtype))
    else:
        dst[...] = array


# =========================================================================== Input
@register_layer
class InputLayer(Layer):
    """Input: tops shaped by input_param (one shape for all tops, or one per top)."""
    type = "Input"
    category = "input"
    summary = "Net input of a given shape; filled from outside."
    param_fields = ("input_param",)
    flops = no_flops
    exact_num_bottom = 0
    min_top = 1

    def __init__(self, param, dtype=np.float32, model_dir=None):
        super().__init__(param, dtype)

    def layer_setup(self, bottom, top):
        p = self.layer_param.input_param
        num_top, num_shape = len(top), len(p.shape)
        if not (num_shape == 0 or num_shape == 1 or num_shape == num_top):
            raise self.error("Must specify 'shape' once, once per top blob, or not at all: "
                             "%d tops vs. %d shapes." % (num_top, num_shape))
        if num_shape:
            for i, t in enumerate(top):
                t.reshape(tuple(p.shape[0 if num_shape == 1 else i].dim))

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass


# =========================================================================== DummyData
@register_layer
class DummyDataLayer(Layer):
    """DummyData: tops filled by fillers; only non-constant fillers refill each Forward."""
    type = "DummyData"
    category = "input"
    summary = "Constant or filled blobs (fillers)."
    param_fields = ("dummy_data_param",)
    flops = no_flops
    exact_num_bottom = 0
    min_top = 1

    def __init__(self, param, dtype=np.float32, model_dir=None):
        super().__init__(param, dtype)

    def layer_setup(self, bottom, top):
        p = self.layer_param.dummy_data_param
        num_top = len(top)
        num_fill = len(p.data_filler)
        if not (num_fill == 0 or num_fill == 1 or num_fill == num_top):
            raise self.error("Number of data fillers must be 0, 1 or equal to the number of tops: "
                             "%d; you specified %d data fillers." % (num_top, num_fill))
        legacy = bool(len(p.num) or len(p.channels) or len(p.height) or len(p.width))
        if legacy:
            if len(p.shape):
                raise self.error(_check_failed("0 == param.shape_size()", 0, len(p.shape),
                                               "Both shape and legacy fields were specified"))
            for field in ("num", "channels", "height", "width"):
                n = len(getattr(p, field))
                if not (n == 1 or n == num_top):
                    raise self.error("Must specify '%s' once, or once per top blob (%d); specified %d."
                                     % (field, num_top, n))
        elif not (len(p.shape) == 1 or len(p.shape) == num_top):
            raise self.error("Must specify 'shape' once, or once per top blob (%d); specified %d."
                             % (num_top, len(p.shape)))
        # refill[i]: whether Forward refills top i; constant fillers fill once, here.
        if num_fill <= 1:
            fp = caffe_pb2.FillerParameter()
            if num_fill == 0:
                fp.type = "constant"
                fp.value = 0
            else:
                fp.CopyFrom(p.data_filler[0])
            self.fillers = [fp]
        else:
            self.fillers = [p.data_filler[i] for i in range(num_top)]
        self.refill = [f.type != "constant" for f in self.fillers]

        def pick(field, i):
            vals = getattr(p, field)
            return vals[0] if len(vals) == 1 else vals[i]

        for i, t in enumerate(top):
            if legacy:
                t.reshape((pick("num", i), pick("channels", i), pick("height", i), pick("width", i)))
            else:
                t.reshape(tuple(p.shape[0 if len(p.shape) == 1 else i].dim))
        # Constant tops are filled once, here; the others at every Forward.
        self._fill(top, constant=True)

    def _fill(self, top, constant=False):
        for i, t in enumerate(top):
            fid = i if len(self.fillers) > 1 else 0
            if self.refill[fid] != constant:
                fill(t, self.fillers[fid])

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        self._fill(top, constant=False)

    def backward(self, top, propagate_down, bottom):
        pass


# =========================================================================== prefetching
class _Failure:
    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


class _Batch:
    __slots__ = ("data", "label")

    def __init__(self):
        self.data = None
        self.label = None


class _Stopped(BaseException):
    """The layer was closed while its thread loaded a batch: the thread ends."""


_thread_state = threading.local()


def stopping():
    """Called by a loader between records: ends the prefetch thread's batch when the layer
    was closed meanwhile (a big batch would otherwise keep reading a database that closing
    the layer closes under it)."""
    stop = getattr(_thread_state, "stop", None)
    if stop is not None and stop.is_set():
        raise _Stopped()


class _Resource:
    """What a prefetch thread reads (a database cursor): closed once, by whichever of the
    thread (when it ends) and the closing layer comes last."""

    def __init__(self, resource):
        self.resource = resource
        self.lock = threading.Lock()

    def close(self):
        with self.lock:
            r, self.resource = self.resource, None
        if r is not None:
            r.close()


_PREFETCHERS = weakref.WeakSet()


def _prefetch_loop(load_batch, free, full, stop, resource=None):
    _thread_state.stop = stop
    try:
        while not stop.is_set():
            try:
                batch = free.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                load_batch(batch)
            except _Stopped:
                return
            except BaseException as e:  # handed to the main thread by Forward
                full.put(_Failure(e))
                return
            full.put(batch)
    finally:
        if resource is not None and stop.is_set():
            resource.close()            # the layer was closed while this thread still read


class Prefetcher:
    """BasePrefetchingDataLayer's thread and its free/full queues of batches.

    ``load_batch(batch)`` runs on the thread; it must not reference the layer
    (so that an unused layer can be collected, which stops the thread)."""

    def __init__(self, name, load_batch, count, resource=None):
        self.free, self.full = queue.Queue(), queue.Queue()
        for _ in range(max(1, int(count))):
            self.free.put(_Batch())
        self._stop = threading.Event()
        self.resource = _Resource(resource) if resource is not None else None
        self.thread = threading.Thread(target=_prefetch_loop, name="prefetch-%s" % name,
                                       args=(load_batch, self.free, self.full, self._stop, self.resource),
                                       daemon=True)
        self.thread.start()
        _PREFETCHERS.add(self)

    def pop(self):
        """The next full batch ("Waiting for data"); re-raises a loader's exception."""
        while True:
            try:
                item = self.full.get(timeout=0.5)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.full.empty():
                    raise LayerError("prefetch thread '%s' stopped (the layer was closed?)"
                                     % self.thread.name) from None
        if isinstance(item, _Failure):
            self.full.put(item)   # every later Forward fails the same way
            raise item.error
        return item

    def push_free(self, batch):
        self.free.put(batch)

    def stop(self):
        """Stop the thread (it ends after the record it reads) and close what it reads --
        here when it has ended, else by the thread itself as it ends: never under it."""
        self._stop.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=60)
        if self.resource is not None and not self.thread.is_alive():
            self.resource.close()


@atexit.register
def _stop_all_prefetchers():
    for p in list(_PREFETCHERS):
        try:
            p.stop()
        except Exception:
            pass


class _BaseDataLayer(Layer):
    """BaseDataLayer: a DataTransformer; the label top is optional (top 1)."""
    exact_num_bottom = 0
    min_top = 1
    max_top = 2

    def __init__(self, param, dtype=np.float32, model_dir=None):
        super().__init__(param, dtype)
        self.model_dir = model_dir
        self.transformer = None
        self.prefetcher = None

    def _path(self, path):
        return resolve_path(path, self.model_dir)

    def layer_setup(self, bottom, top):
        self.output_labels = len(top) > 1
        self.transformer = DataTransformer(self.layer_param.transform_param, self.phase,
                                           self.dtype, self.name)
        self.transformer.init_rand()
        self.data_layer_setup(bottom, top)

    def data_layer_setup(self, bottom, top):
        raise NotImplementedError

    def reshape(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass

    # prefetching layers ----------------------------------------------------
    def _start_prefetch(self, load_batch, resource=None, top=None):
        """Start the thread; ``resource.close()`` runs after it stops (at collection or close()).

        As BasePrefetchingDataLayer::LayerSetUp: the transformer's InitRand runs again, then
        StartInternalThread draws the thread's seed from Caffe's stream (the thread's own
        stream, which no standard layer draws from)."""
        self.transformer.init_rand()
        _engine_seed()
        count = self.layer_param.data_param.prefetch
        if top is not None:     # Caffe's prefetch_ batches (Blobs shaped as the tops), before the thread fills them
            declare_bytes(count * sum(t.count for t in top) * self.dtype.itemsize,
                          "%d prefetched batches of layer '%s'" % (count, self.name))
        self.prefetcher = Prefetcher(self.name, load_batch, count, resource)
        self._finalizer = weakref.finalize(self, _shutdown, self.prefetcher)

    def forward(self, bottom, top):
        batch = self.prefetcher.pop()
        try:
            _to_top(top[0], batch.data)
            if self.output_labels:
                _to_top(top[1], batch.label)
        finally:
            self.prefetcher.push_free(batch)

    def close(self):
        """Stop the prefetch thread (it also stops when the layer is collected)."""
        if self.prefetcher is not None:
            self._finalizer()


def _shutdown(prefetcher):
    prefetcher.stop()


def _layer_error(layer_type, name, message, cls=LayerError):
    return cls("%s layer '%s': %s" % (layer_type, name, message), layer=name)


def _read_text(layer, path, cannot_open, not_text):
    """The text of a list file a data layer reads; ``cannot_open(OSError)`` and ``not_text``
    (a decoding error's detail follows it) are the messages of the layer's errors."""
    try:
        with open(path, "r") as f:
            return f.read()
    except OSError as e:
        raise _layer_error(layer.type, layer.name, cannot_open(e)) from None
    except UnicodeDecodeError as e:
        raise _layer_error(layer.type, layer.name, "%s: %s" % (not_text, e)) from None


# =========================================================================== Data (LMDB, LevelDB)
_DB_LABEL = {"lmdb": "LMDB", "leveldb": "LevelDB"}


class _DBCursor:
    """DataLayer's cursor over an LMDB or a LevelDB opened read-only (engine.core.db)."""

    def __init__(self, path, backend, layer_name):
        self.path, self.layer_name = path, layer_name
        self.kind = _DB_LABEL[backend]
        try:
            self.db = db.open_db(path, backend, db.READ)
        except db.DBError as e:
            raise _layer_error("Data", layer_name, str(e)) from None
        self.cursor = self.db.cursor()
        if not self.cursor.valid():
            self.close()
            raise _layer_error("Data", layer_name, "cannot open %s at %s: the database is empty "
                               "(no records to read)" % (self.kind, path))

    def value(self):
        return self.cursor.value()

    def next(self):
        """DataLayer::Next: advance, wrapping to the first record at the end."""
        self.cursor.next()
        if not self.cursor.valid():
            layer_log.info("Restarting data prefetching from start.")
            self.cursor.seek_to_first()

    def close(self):
        try:
            self.cursor.close()
        finally:
            self.db.close()


def _data_backend(layer_name, declared, source):
    """The backend to read ``source`` with: the declared one, as Caffe (its default LEVELDB).
    A store of the other kind on disk is refused as Caffe's db refuses it, with a hint
    naming the backend the folder holds."""
    name = db.backend_name(int(declared))
    found = db.detect_backend(source)
    if found is not None and found != name:
        hint = "(%s is an %s: set data_param.backend: %s)" % (source, _DB_LABEL[found], found.upper())
        try:
            db.open_db(source, name, db.READ).close()
        except db.MissingLevelDB:
            raise _layer_error("Data", layer_name, "Check failed: status.ok() Failed to open leveldb %s %s"
                               % (source, hint)) from None
        except db.DBError as e:
            raise _layer_error("Data", layer_name, "%s %s" % (e, hint)) from None
    return name


class _DatumLoader:
    """DataLayer::load_batch, run on the prefetch thread."""

    def __init__(self, cursor, transformer, batch_size, output_labels, dtype, layer_name):
        self.cursor, self.transformer = cursor, transformer
        self.batch_size, self.output_labels = batch_size, output_labels
        self.dtype, self.layer_name = dtype, layer_name

    def parse(self):
        datum = caffe_pb2.Datum()
        try:
            datum.ParseFromString(self.cursor.value())
        except Exception as e:
            raise _layer_error("Data", self.layer_name, "record is not a Datum in %s %s: %s"
                               % (self.cursor.kind, self.cursor.path, e)) from None
        return datum

    def __call__(self, batch):
        n = self.batch_size
        for item in range(n):
            stopping()
            datum = self.parse()
            if item == 0:
                shape = self.transformer.infer_blob_shape(datum)
                shape[0] = n
                shape = tuple(shape)
                if batch.data is None or batch.data.shape != shape:
                    batch.data = np.empty(shape, self.dtype)
                if self.output_labels and (batch.label is None or batch.label.shape != (n,)):
                    batch.label = np.empty((n,), self.dtype)
            x = self.transformer.transform_datum(datum)
            if x.shape != batch.data.shape[1:]:
                raise _layer_error("Data", self.layer_name, "record shape %s differs from the batch's "
                                   "first record %s" % (x.shape, batch.data.shape[1:]), ShapeError)
            batch.data[item] = x
            if self.output_labels:
                batch.label[item] = datum.label
            self.cursor.next()


@register_layer
class DataLayer(_BaseDataLayer):
    """Data: Datum records from an LMDB or a LevelDB (data_param.source and backend;
    Caffe's default backend is LEVELDB)."""
    type = "Data"
    category = "input"
    summary = "Reads Datums from LMDB/LevelDB, transformed."
    param_fields = ("data_param", "transform_param",)
    flops = no_flops

    def data_layer_setup(self, bottom, top):
        p = self.layer_param.data_param
        source = self._path(p.source)
        backend_name = _data_backend(self.name, p.backend, source)
        batch_size = int(p.batch_size)
        if batch_size <= 0:
            raise self.error(_check_failed("batch->data_.count()", message="(data_param.batch_size "
                                                                           "must be positive)"))
        # Caffe 1.0's DataLayer reads from the first record: it ignores data_param.rand_skip.
        self.cursor = cursor = _DBCursor(source, backend_name, self.name)
        loader = _DatumLoader(cursor, self.transformer, batch_size, self.output_labels,
                              self.dtype, self.name)
        shape = self.transformer.infer_blob_shape(loader.parse())
        shape[0] = batch_size
        top[0].reshape(shape)
        layer_log.info("output data size: %d,%d,%d,%d", *top[0].shape[:4])
        if self.output_labels:
            top[1].reshape((batch_size,))
        self._start_prefetch(loader, cursor, top)


# =========================================================================== ImageData
class _ImageLoader:
    """ImageDataLayer::load_batch, run on the prefetch thread."""

    def __init__(self, lines, lines_id, root, new_h, new_w, is_color, shuffle, shuffle_rng,
                 transformer, batch_size, dtype, layer_name, resolve):
        self.lines, self.lines_id = lines, lines_id
        self.root, self.new_h, self.new_w, self.is_color = root, new_h, new_w, is_color
        self.shuffle, self.rng = shuffle, shuffle_rng
        self.transformer, self.batch_size, self.dtype = transformer, batch_size, dtype
        self.layer_name, self.resolve = layer_name, resolve

    def read(self, idx):
        name = self.lines[idx][0]
        path = self.resolve(self.root + name)
        try:
            return read_image(path, self.new_h, self.new_w, self.is_color)
        except MissingOpenCV:
            raise
        except ImageError as e:
            raise _layer_error("ImageData", self.layer_name, "Could not load %s (%s)" % (path, e)) \
                from None

    def shuffle_lines(self):
        """ShuffleImages: caffe::shuffle with the layer's prefetch_rng_."""
        rng.shuffle(self.lines, self.rng)

    def __call__(self, batch):
        n = self.batch_size
        shape = self.transformer.infer_blob_shape(self.read(self.lines_id))
        shape[0] = n
        shape = tuple(shape)
        if batch.data is None or batch.data.shape != shape:
            batch.data = np.empty(shape, self.dtype)
        if batch.label is None:
            batch.label = np.empty((n,), self.dtype)
        size = len(self.lines)
        for item in range(n):
            stopping()
            img = self.read(self.lines_id)
            x = self.transformer.transform_image(img)
            if x.shape != shape[1:]:
                raise _layer_error("ImageData", self.layer_name, "image %s has shape %s after "
                                   "transformation; the batch's first image has %s"
                                   % (self.lines[self.lines_id][0], x.shape, shape[1:]), ShapeError)
            batch.data[item] = x
            batch.label[item] = self.lines[self.lines_id][1]
            self.lines_id += 1
            if self.lines_id >= size:
                layer_log.debug("Restarting data prefetching from start.")
                self.lines_id = 0
                if self.shuffle:
                    self.shuffle_lines()


def _atoi(text):
    """C's atoi: optional sign and leading digits; 0 when there are none."""
    s = text.lstrip()
    i = 0
    if i < len(s) and s[i] in "+-":
        i += 1
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    if j == i:
        return 0
    return int(s[:j])


@register_layer
class ImageDataLayer(_BaseDataLayer):
    """ImageData: an image list file of "<path> <label>" lines."""
    type = "ImageData"
    category = "input"
    summary = "Reads images listed in a text file."
    param_fields = ("image_data_param", "transform_param",)
    flops = no_flops
    min_top = -1
    max_top = -1
    exact_num_top = 2

    def data_layer_setup(self, bottom, top):
        p = self.layer_param.image_data_param
        new_h, new_w, is_color = int(p.new_height), int(p.new_width), bool(p.is_color)
        root = p.root_folder
        if not ((new_h == 0 and new_w == 0) or (new_h > 0 and new_w > 0)):
            raise self.error("Current implementation requires new_height and new_width to be set "
                             "at the same time.")
        source = self._path(p.source)
        layer_log.info("Opening file %s", source)
        raw = _read_text(self, source, lambda e: "cannot open image list %s: %s" % (source, e.strerror or e),
                         "image list %s is not text" % source).split("\n")
        lines = []
        for line in raw:
            line = line.rstrip("\r")
            if not line.strip():
                continue
            pos = line.rfind(" ")
            if pos < 0:
                lines.append((line, _atoi(line)))
            else:
                lines.append((line[:pos], _atoi(line[pos + 1:])))
        if not lines:
            raise _layer_error("ImageData", self.name, "File is empty: %s" % source)
        shuffle_rng = None
        if p.shuffle:
            layer_log.info("Shuffling data")
            shuffle_rng = rng.Stream(_engine_seed())
        layer_log.info("A total of %d images.", len(lines))
        lines_id = 0
        if p.rand_skip:
            skip = _engine_seed() % p.rand_skip
            layer_log.info("Skipping first %d data points.", skip)
            if not len(lines) > skip:
                raise self.error(_check_failed("lines_.size() > skip", len(lines), skip,
                                               "Not enough points to skip"))
            lines_id = skip
        batch_size = int(p.batch_size)
        if batch_size <= 0:
            raise self.error(_check_failed("batch_size > 0", batch_size, 0, "Positive batch size required"))
        model_dir = self.model_dir
        loader = _ImageLoader(lines, lines_id, root, new_h, new_w, is_color, bool(p.shuffle),
                              shuffle_rng, self.transformer, batch_size, self.dtype, self.name,
                              lambda path: resolve_path(path, model_dir))
        if p.shuffle:
            loader.shuffle_lines()
        self.lines = loader.lines
        shape = self.transformer.infer_blob_shape(loader.read(loader.lines_id))
        shape[0] = batch_size
        top[0].reshape(shape)
        layer_log.info("output data size: %d,%d,%d,%d", *top[0].shape[:4])
        top[1].reshape((batch_size,))
        self.output_labels = True
        self._start_prefetch(loader, top=top)


# =========================================================================== HDF5Data
def _h5py(layer_type, name):
    try:
        import h5py
    except ImportError as e:  # pragma: no cover - h5py is a dependency
        raise _layer_error(layer_type, name, "HDF5 needs h5py (pip install h5py): %s" % e) from None
    return h5py


@register_layer
class HDF5DataLayer(Layer):
    """HDF5Data: rows of the datasets named by the tops, from the .h5 files listed in source."""
    type = "HDF5Data"
    category = "input"
    summary = "Reads arrays from HDF5 files."
    param_fields = ("hdf5_data_param",)
    flops = no_flops
    exact_num_bottom = 0
    min_top = 1

    def __init__(self, param, dtype=np.float32, model_dir=None):
        super().__init__(param, dtype)
        self.model_dir = model_dir

    def _load_file(self, filename):
        h5py = _h5py("HDF5Data", self.name)
        layer_log.debug("Loading HDF5 file: %s", filename)
        path = resolve_path(filename, self.model_dir)
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise _layer_error("HDF5Data", self.name, "Failed opening HDF5 file: %s (%s)" % (path, e)) \
                from None
        arrays = []
        try:
            with f:
                for name in self.layer_param.top:
                    if name not in f or not isinstance(f[name], h5py.Dataset):
                        raise _layer_error("HDF5Data", self.name, "Failed to find HDF5 dataset %s in %s"
                                           % (name, path))
                    ds = f[name]
                    kind = ds.dtype.kind
                    if kind not in "fiub":
                        raise _layer_error("HDF5Data", self.name, "Unsupported datatype class of dataset %s "
                                           "in %s: %s" % (name, path, ds.dtype))
                    if ds.ndim < 1:
                        raise _layer_error("HDF5Data", self.name, _check_failed(
                            "ndims >= min_dim", ds.ndim, 1) + " (dataset %s in %s)" % (name, path))
                    arrays.append(np.asarray(ds[()], dtype=self.dtype))
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:   # a corrupt file
            raise _layer_error("HDF5Data", self.name, "cannot read HDF5 file %s: %s: %s"
                               % (path, type(e).__name__, e)) from None
        num = arrays[0].shape[0]
        for name, a in zip(self.layer_param.top, arrays):
            if a.shape[0] != num:
                raise _layer_error("HDF5Data", self.name, _check_failed(
                    "hdf_blobs_[i]->shape(0) == num", a.shape[0], num)
                    + " (dataset %s in %s)" % (name, path))
        self.hdf_blobs = arrays
        self.data_permutation = np.arange(num)
        if self.layer_param.hdf5_data_param.shuffle:
            self.rng.shuffle(self.data_permutation)
            layer_log.debug("Successfully loaded %d rows (shuffled)", num)
        else:
            layer_log.debug("Successfully loaded %d rows", num)

    def layer_setup(self, bottom, top):
        if self.layer_param.HasField("transform_param"):
            raise self.error(_check_failed("!this->layer_param_.has_transform_param()",
                                           message="HDF5Data does not transform data."))
        p = self.layer_param.hdf5_data_param
        source = resolve_path(p.source, self.model_dir)
        layer_log.info("Loading list of HDF5 filenames from: %s", source)
        names = _read_text(self, source, lambda e: "Failed to open source file: %s" % source,
                           "source file %s is not a text list of HDF5 file names" % source).split()
        self.source_dir = os.path.dirname(os.path.abspath(source))
        self.filenames = [n if os.path.isabs(n) or os.path.exists(n) or not os.path.exists(
            os.path.join(self.source_dir, n)) else os.path.join(self.source_dir, n) for n in names]
        self.num_files = len(self.filenames)
        layer_log.info("Number of HDF5 files: %d", self.num_files)
        if self.num_files < 1:
            raise _layer_error("HDF5Data", self.name, "Must have at least 1 HDF5 filename listed in %s"
                               % source)
        # Caffe shuffles with std::random_shuffle (C's rand()), not from its stream: the
        # engine's own generator does, and Caffe's stream is left as Caffe leaves it.
        self.rng = np.random.default_rng(int(rng.aux().integers(2 ** 63)))
        if p.shuffle:
            rng.warn_unmatched(("HDF5Data", self.name), "HDF5Data layer '%s' shuffles (Caffe uses "
                                                        "std::random_shuffle)" % self.name)
        self.file_permutation = np.arange(self.num_files)
        if p.shuffle:
            self.rng.shuffle(self.file_permutation)
        self.current_file = 0
        self._load_file(self.filenames[self.file_permutation[0]])
        self.current_row = 0
        batch_size = int(p.batch_size)
        for t, a in zip(top, self.hdf_blobs):
            t.reshape((batch_size,) + a.shape[1:])

    def _next(self):
        p = self.layer_param.hdf5_data_param
        self.current_row += 1
        if self.current_row == self.hdf_blobs[0].shape[0]:
            if self.num_files > 1:
                self.current_file += 1
                if self.current_file == self.num_files:
                    self.current_file = 0
                    if p.shuffle:
                        self.rng.shuffle(self.file_permutation)
                    layer_log.debug("Looping around to first file.")
                self._load_file(self.filenames[self.file_permutation[self.current_file]])
            self.current_row = 0
            if p.shuffle:
                self.rng.shuffle(self.data_permutation)

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        batch_size = int(self.layer_param.hdf5_data_param.batch_size)
        out = [np.empty(t.shape, self.dtype) for t in top]
        for i in range(batch_size):
            row = self.data_permutation[self.current_row]
            for j in range(len(top)):
                out[j][i] = self.hdf_blobs[j][row]
            self._next()
        for t, a in zip(top, out):
            _to_top(t, a)

    def backward(self, top, propagate_down, bottom):
        pass


# =========================================================================== HDF5Output
@register_layer
class HDF5OutputLayer(Layer):
    """HDF5Output: writes bottom 0 as dataset "data" and bottom 1 as "label" to file_name."""
    type = "HDF5Output"
    category = "output"
    summary = "Writes its bottoms to an HDF5 file."
    param_fields = ("hdf5_output_param",)
    flops = no_flops
    exact_num_bottom = 2
    exact_num_top = 0

    def __init__(self, param, dtype=np.float32, model_dir=None):
        super().__init__(param, dtype)
        self.file = None

    def layer_setup(self, bottom, top):
        h5py = _h5py("HDF5Output", self.name)
        self.file_name = self.layer_param.hdf5_output_param.file_name
        try:
            self.file = h5py.File(self.file_name, "w")
        except OSError as e:
            raise _layer_error("HDF5Output", self.name, "Failed to open HDF5 file %s (%s)"
                               % (self.file_name, e)) from None
        weakref.finalize(self, _close_h5, self.file)

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        if bottom[0].num != bottom[1].num:
            raise self.error(_check_failed("bottom[0]->num() == bottom[1]->num()",
                                           bottom[0].num, bottom[1].num))
        shapes = [(b.num, b.channels, b.height, b.width) for b in bottom[:2]]
        data = np.asarray(backend.to_host(bottom[0].get_data())).reshape(shapes[0])
        label = np.asarray(backend.to_host(bottom[1].get_data())).reshape(shapes[1])
        layer_log.info("Saving HDF5 file %s", self.file_name)
        for name, arr in (("data", data), ("label", label)):
            if name in self.file:
                del self.file[name]   # Caffe would fail on a second Forward; the engine overwrites
            self.file.create_dataset(name, data=arr)
        self.file.flush()
        layer_log.info("Successfully saved %d rows", shapes[0][0])

    def backward(self, top, propagate_down, bottom):
        pass

    def close(self):
        if self.file is not None:
            _close_h5(self.file)


def _close_h5(f):
    try:
        f.close()
    except Exception:
        pass


# =========================================================================== MemoryData
@register_layer
class MemoryDataLayer(_BaseDataLayer):
    """MemoryData: batches from arrays given with set_input_arrays / reset / add_*_vector."""
    type = "MemoryData"
    category = "input"
    summary = "Arrays handed in from Python (set_input_arrays)."
    param_fields = ("memory_data_param", "transform_param",)
    flops = no_flops
    min_top = -1
    max_top = -1
    exact_num_top = 2

    def data_layer_setup(self, bottom, top):
        p = self.layer_param.memory_data_param
        self.batch_size = int(p.batch_size)
        self.channels_ = int(p.channels)
        self.height_ = int(p.height)
        self.width_ = int(p.width)
        self.size = self.channels_ * self.height_ * self.width_
        if not self.batch_size * self.size > 0:
            raise self.error(_check_failed("batch_size_ * size_ > 0", self.batch_size * self.size, 0,
                                           "batch_size, channels, height, and width must be specified "
                                           "and positive in memory_data_param"))
        top[0].reshape((self.batch_size, self.channels_, self.height_, self.width_))
        top[1].reshape((self.batch_size,))
        self._data = None
        self._labels = None
        self.n = 0
        self.pos = 0
        self.has_new_data = False
        self._arrays = None

    # pycaffe's MemoryDataLayer accessors
    @property
    def channels(self):
        return self.channels_

    @property
    def height(self):
        return self.height_

    @property
    def width(self):
        return self.width_

    def reset(self, data, labels, n=None):
        """MemoryDataLayer::Reset(data, labels, n): use the arrays as they are (no transform)."""
        if data is None or labels is None:
            raise self.error(_check_failed("data" if data is None else "labels"))
        data = np.asarray(data)
        labels = np.asarray(labels)
        n = int(data.shape[0]) if n is None else int(n)
        if n % self.batch_size != 0:
            raise self.error(_check_failed("n % batch_size_ == 0", n % self.batch_size, 0,
                                           "n must be a multiple of batch size"))
        if self.layer_param.HasField("transform_param"):
            layer_log.warning("MemoryData does not transform array data on Reset()")
        self._data = data.reshape(-1)[: n * self.size].reshape(n, self.size)
        self._labels = labels.reshape(-1)[:n]
        self._arrays = (data, labels)   # keep the caller's memory alive, as pycaffe does
        self.n = n
        self.pos = 0

    Reset = reset

    def set_input_arrays(self, data, labels):
        """pycaffe's Net.set_input_arrays checks, then Reset (arrays used without copying)."""
        labels = np.asarray(labels)
        if labels.ndim == 1:
            labels = np.ascontiguousarray(labels[:, None, None, None])
        data = np.asarray(data)
        for arr, what, dims in ((data, "data array", (self.channels_, self.height_, self.width_)),
                                (labels, "labels array", (1, 1, 1))):
            if not arr.flags["C_CONTIGUOUS"]:
                raise self.error("%s must be C contiguous" % what)
            if arr.ndim != 4:
                raise self.error("%s must be 4-d" % what)
            if arr.dtype != np.float32 and arr.dtype != self.dtype:
                raise self.error("%s must be float32" % what)
            if arr.shape[1] != dims[0]:
                raise self.error("%s has wrong number of channels" % what)
            if arr.shape[2] != dims[1]:
                raise self.error("%s has wrong height" % what)
            if arr.shape[3] != dims[2]:
                raise self.error("%s has wrong width" % what)
        if data.shape[0] != labels.shape[0]:
            raise self.error("data and labels must have the same first dimension")
        if data.shape[0] % self.batch_size != 0:
            raise self.error("first dimensions of input arrays must be a multiple of batch size")
        self.reset(data, labels, data.shape[0])

    def _add(self, data, labels):
        if self.has_new_data:
            raise self.error(_check_failed("!has_new_data_",
                                           message="Can't add data until current data has been consumed."))
        self.reset(data, labels, data.shape[0])
        self.has_new_data = True

    def add_datum_vector(self, datums):
        """AddDatumVector: transform the Datums (mirror, scale, crop, mean) and use them."""
        num = len(datums)
        if num <= 0:
            raise self.error(_check_failed("num > 0", num, 0, "There is no datum to add."))
        if num % self.batch_size != 0:
            raise self.error(_check_failed("num % batch_size_ == 0", num % self.batch_size, 0,
                                           "The added data must be a multiple of the batch size."))
        data = np.stack([self.transformer.transform_datum(d) for d in datums])
        labels = np.asarray([d.label for d in datums], dtype=self.dtype)
        self._add(data, labels)

    def add_mat_vector(self, images, labels):
        """AddMatVector: transform H x W x C uint8 images (BGR) and use them."""
        num = len(images)
        if num != len(labels):
            raise self.error(_check_failed("num == labels.size()", num, len(labels),
                                           "Number of images and labels must match"))
        if num <= 0:
            raise self.error(_check_failed("num > 0", num, 0, "There is no mat to add"))
        if num % self.batch_size != 0:
            raise self.error(_check_failed("num % batch_size_ == 0", num % self.batch_size, 0,
                                           "The added data must be a multiple of the batch size."))
        data = np.stack([self.transformer.transform_image(im) for im in images])
        self._add(data, np.asarray(labels, dtype=self.dtype))

    def set_batch_size(self, new_size):
        if self.has_new_data:
            raise self.error(_check_failed("!has_new_data_", message="Can't change batch_size until "
                                                                     "current data has been consumed."))
        self.batch_size = int(new_size)

    def forward(self, bottom, top):
        if self._data is None:
            raise self.error(_check_failed("data_", message="MemoryDataLayer needs to be initialized "
                                                            "by calling Reset"))
        b = self.batch_size
        data = self._data[self.pos:self.pos + b].reshape(b, self.channels_, self.height_, self.width_)
        _to_top(top[0], np.asarray(data, dtype=self.dtype))
        _to_top(top[1], np.asarray(self._labels[self.pos:self.pos + b], dtype=self.dtype).reshape(b, 1, 1, 1))
        self.pos = (self.pos + b) % self.n
        self.has_new_data = False


# =========================================================================== WindowData
def _cround(x):
    """C's round(): halves away from zero."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


class _WindowLoader:
    """WindowDataLayer::load_batch, run on the prefetch thread."""
    IMAGE_INDEX, LABEL, OVERLAP, X1, Y1, X2, Y2 = range(7)

    def __init__(self, layer_name, wparam, crop_size, mirror, fg_windows, bg_windows, image_db,
                 image_cache, mean, mean_values, channels, dtype, seed):
        self.layer_name = layer_name
        self.scale = float(wparam.scale)
        self.batch_size = int(wparam.batch_size)
        self.context_pad = int(wparam.context_pad)
        self.use_square = wparam.crop_mode == "square"
        self.fg_fraction = float(wparam.fg_fraction)
        self.crop_size, self.mirror = crop_size, mirror
        self.fg, self.bg = fg_windows, bg_windows
        self.image_db, self.image_cache = image_db, image_cache
        self.mean, self.mean_values = mean, mean_values
        self.channels, self.dtype = channels, dtype
        self.stream = rng.Stream(seed)

    def rand(self):
        """PrefetchRand(): the next raw output of the layer's prefetch_rng_."""
        return self.stream()

    def image(self, index):
        path = self.image_db[index][0]
        if self.image_cache is not None:
            return decode_image(self.image_cache[index], True, path)
        try:
            return read_image(path, 0, 0, True)
        except MissingOpenCV:
            raise
        except ImageError as e:
            raise _layer_error("WindowData", self.layer_name, "Could not open or find file %s (%s)"
                               % (path, e)) from None

    def __call__(self, batch):
        crop = self.crop_size
        n = self.batch_size
        if batch.data is None or batch.data.shape != (n, self.channels, crop, crop):
            batch.data = np.empty((n, self.channels, crop, crop), self.dtype)
        if batch.label is None:
            batch.label = np.empty((n,), self.dtype)
        batch.data[...] = 0
        num_fg = int(float(n) * self.fg_fraction)
        item = 0
        for is_fg, count in ((0, n - num_fg), (1, num_fg)):
            for _ in range(count):
                stopping()
                r = self.rand()
                windows = self.fg if is_fg else self.bg
                if not windows:
                    raise _layer_error("WindowData", self.layer_name, "no %s windows to sample from"
                                       % ("foreground" if is_fg else "background"))
                window = windows[r % len(windows)]
                do_mirror = bool(self.mirror) and self.rand() % 2 != 0
                self._fill(batch.data[item], window, do_mirror)
                batch.label[item] = window[self.LABEL]
                item += 1

    def _fill(self, out, window, do_mirror):
        """One sample: the window's region of its image, with context and square crop as
        asked, warped to its place in the crop_size x crop_size ``out`` (C x H x W, zeros
        where the context padding fell outside the image), mirrored, less the mean, scaled."""
        img = self.image(int(window[self.IMAGE_INDEX]))
        channels = img.shape[2]
        (x1, y1, x2, y2), (pad_h, pad_w, out_h, out_w) = self._geometry(window, img.shape[0], img.shape[1],
                                                                        do_mirror)
        warped = resize_linear(img[y1:y2 + 1, x1:x2 + 1], out_h, out_w)
        if do_mirror:
            warped = warped[:, ::-1]
        x = np.transpose(warped, (2, 0, 1)).astype(self.dtype)
        if self.mean is not None:
            off = (self.mean.shape[2] - self.crop_size) // 2
            x = x - self.mean[:channels, off + pad_h:off + pad_h + out_h,
                              off + pad_w:off + pad_w + out_w].astype(self.dtype)
        elif self.mean_values:
            x = x - np.asarray(self.mean_values[:channels], self.dtype).reshape(-1, 1, 1)
        out[:channels, pad_h:pad_h + out_h, pad_w:pad_w + out_w] = x * self.dtype.type(self.scale)

    def _geometry(self, window, rows, cols, do_mirror):
        """``((x1, y1, x2, y2), (pad_h, pad_w, out_h, out_w))``: the image region to crop and
        where its warp lands in the output. With context_pad or square crop mode the box
        grows (to a square first), is clipped to the image, and the clipped part becomes
        padding; otherwise the window fills the output."""
        crop = self.crop_size
        x1, y1 = int(window[self.X1]), int(window[self.Y1])
        x2, y2 = int(window[self.X2]), int(window[self.Y2])
        if not (self.context_pad > 0 or self.use_square):
            return (x1, y1, x2, y2), (0, 0, crop, crop)
        context_scale = crop / float(crop - 2 * self.context_pad)
        half_h = (y2 - y1 + 1) / 2.0
        half_w = (x2 - x1 + 1) / 2.0
        cx, cy = x1 + half_w, y1 + half_h
        if self.use_square:
            if half_h > half_w:
                half_w = half_h
            else:
                half_h = half_w
        x1 = _cround(cx - half_w * context_scale)
        x2 = _cround(cx + half_w * context_scale)
        y1 = _cround(cy - half_h * context_scale)
        y2 = _cround(cy + half_h * context_scale)
        unclipped_h, unclipped_w = y2 - y1 + 1, x2 - x1 + 1
        pad_x1, pad_y1 = max(0, -x1), max(0, -y1)
        pad_x2, pad_y2 = max(0, x2 - cols + 1), max(0, y2 - rows + 1)
        x1 += pad_x1
        x2 -= pad_x2
        y1 += pad_y1
        y2 -= pad_y2
        if not (x1 > -1 and y1 > -1 and x2 < cols and y2 < rows):
            raise _layer_error("WindowData", self.layer_name, "window (%d, %d, %d, %d) lies "
                               "outside its %d x %d image" % (x1, y1, x2, y2, cols, rows))
        sx = crop / float(unclipped_w)
        sy = crop / float(unclipped_h)
        out_w = _cround((x2 - x1 + 1) * sx)
        out_h = _cround((y2 - y1 + 1) * sy)
        pad_h = _cround(pad_y1 * sy)
        pad_w = _cround(pad_x2 * sx) if do_mirror else _cround(pad_x1 * sx)
        return (x1, y1, x2, y2), (pad_h, pad_w, min(out_h, crop - pad_h), min(out_w, crop - pad_w))


@register_layer
class WindowDataLayer(_BaseDataLayer):
    """WindowData: windows (boxes) of images listed in a window file, warped to crop_size."""
    type = "WindowData"
    category = "input"
    summary = "Windows of images for R-CNN."
    param_fields = ("window_data_param", "transform_param",)
    flops = no_flops
    min_top = -1
    max_top = -1
    exact_num_top = 2

    def data_layer_setup(self, bottom, top):
        wp = self.layer_param.window_data_param
        tp = self.layer_param.transform_param
        layer_log.info("Window data layer:\n  foreground (object) overlap threshold: %g\n"
                       "  background (non-object) overlap threshold: %g\n"
                       "  foreground sampling fraction: %g\n  cache_images: %d\n  root_folder: %s",
                       wp.fg_threshold, wp.bg_threshold, wp.fg_fraction, wp.cache_images, wp.root_folder)
        windows = self._read_window_file(wp)
        layer_log.info("Amount of context padding: %d", wp.context_pad)
        layer_log.info("Crop mode: %s", wp.crop_mode)
        crop = int(tp.crop_size)
        if not crop > 0:
            raise self.error(_check_failed("crop_size > 0", crop, 0))
        batch_size = int(wp.batch_size)
        channels = windows.channels
        top[0].reshape((batch_size, channels, crop, crop))
        layer_log.info("output data size: %d,%d,%d,%d", batch_size, channels, crop, crop)
        top[1].reshape((batch_size,))
        self.output_labels = True
        mean, mean_values = self._means(tp, channels)
        self.fg_windows, self.bg_windows, self.image_database = windows.fg, windows.bg, windows.image_db
        loader = _WindowLoader(self.name, wp, crop, bool(tp.mirror), windows.fg, windows.bg, windows.image_db,
                               windows.image_cache, mean, mean_values, channels, self.dtype, _engine_seed())
        self._start_prefetch(loader, top=top)

    def _read_window_file(self, wp):
        """The window file: for each image "# index path channels height width count" and
        count windows "label overlap x1 y1 x2 y2"; windows with overlap >= fg_threshold are
        foreground, < bg_threshold background (label 0), the rest unused. Logs as Caffe."""
        source = self._path(wp.source)
        tokens = _read_text(self, source, lambda e: "Failed to open window file %s" % source,
                            "window file %s is not text" % source).split()
        if len(tokens) < 2:
            raise _layer_error("WindowData", self.name, "Window file is empty: %s" % source)
        w = _WindowFile(fg=[], bg=[], image_db=[], image_cache=[] if wp.cache_images else None)
        label_hist = {0: 0}
        pos = 0
        image_index = 0

        def take(kind=int):
            nonlocal pos
            if pos >= len(tokens):
                raise _layer_error("WindowData", self.name, "window file %s ends early" % source)
            v = tokens[pos]
            pos += 1
            return kind(v)

        try:
            while pos < len(tokens):
                hashtag = take(str)
                image_index = take(int)
                if hashtag != "#":
                    raise _layer_error("WindowData", self.name, _check_failed(
                        "hashtag == \"#\"", hashtag, "#") + " in window file %s" % source)
                image_path = resolve_path(wp.root_folder + take(str), self.model_dir)
                size = [take(int), take(int), take(int)]
                w.channels = size[0]
                w.image_db.append((image_path, size))
                if w.image_cache is not None:
                    w.image_cache.append(self._image_bytes(image_path))
                num_windows = take(int)
                for _ in range(num_windows):
                    label, overlap = take(int), take(float)
                    x1, y1, x2, y2 = take(int), take(int), take(int), take(int)
                    window = [image_index, label, overlap, x1, y1, x2, y2]
                    if overlap >= wp.fg_threshold:
                        if not label > 0:
                            raise self.error(_check_failed("label > 0", label, 0))
                        w.fg.append(window)
                        label_hist[label] = label_hist.get(label, 0) + 1
                    elif overlap < wp.bg_threshold:
                        window[1] = 0
                        window[2] = 0
                        w.bg.append(window)
                        label_hist[0] += 1
                if image_index % 100 == 0:
                    layer_log.info("num: %d %s %d %d %d windows to process: %d", image_index,
                                   image_path, size[0], size[1], size[2], num_windows)
        except ValueError as e:
            raise _layer_error("WindowData", self.name, "malformed window file %s: %s" % (source, e)) \
                from None
        layer_log.info("Number of images: %d", image_index + 1)
        for k in sorted(label_hist):
            layer_log.info("class %d has %d samples", k, label_hist[k])
        return w

    def _image_bytes(self, image_path):
        """cache_images: the encoded bytes of an image the window file lists."""
        try:
            with open(image_path, "rb") as imf:
                return imf.read()
        except OSError:
            raise _layer_error("WindowData", self.name, "Could not open or find file %s"
                               % image_path) from None

    def _means(self, tp, channels):
        """``(mean image or None, mean values)`` of transform_param, checked as Caffe checks
        them; a single mean_value serves every channel."""
        mean = self.transformer.mean if tp.HasField("mean_file") else None
        mean_values = [float(v) for v in tp.mean_value]
        if mean_values:
            if tp.HasField("mean_file"):
                raise self.error("Cannot specify mean_file and mean_value at the same time")
            if not (len(mean_values) == 1 or len(mean_values) == channels):
                raise self.error("Specify either 1 mean_value or as many as channels: %d" % channels)
            if channels > 1 and len(mean_values) == 1:
                mean_values = mean_values * channels
        return mean, mean_values


@dataclass
class _WindowFile:
    """What WindowData reads from its window file."""
    fg: list
    bg: list
    image_db: list                  # (path, [channels, height, width]) per image
    image_cache: list | None        # the encoded images (cache_images), else None
    channels: int = 0               # of the last image listed

"""pycaffe's compiled module ``caffe._caffe`` (``_caffe.cpp``), on the engine.

The classes are the engine's own (Net, Blob, Layer, the solvers); this module adds
the process-wide functions of ``_caffe.cpp`` and its two small classes:

- ``init_log()``, ``init_log(level)``, ``init_log(level, stderr)``: glog's set-up.  Caffe's
  messages go to stderr in glog's format from ``level`` on (0 INFO, 1 WARNING, 2 ERROR,
  3 FATAL; without ``level``, GLOG_minloglevel's as glog read it at start-up); without
  ``stderr=True`` (or GLOG_logtostderr) glog keeps INFO and WARNING for its log files and
  prints from ERROR on, and so does this (the engine writes no log files).
  ``log(message)`` logs a line at INFO (``LOG(INFO) << message``).
- ``Timer``: ``start()``, ``stop()``, ``ms`` as Caffe's Timer: on the CPU whole
  milliseconds (boost's ``total_milliseconds``), on the GPU CUDA events' float time; reading
  ``ms`` stops a running timer, and a timer never started reads 0 with a warning.
- ``solver_count``/``set_solver_count``, ``solver_rank``/``set_solver_rank``,
  ``set_multiprocess``: Caffe's globals for multi-GPU training.
- ``has_nccl()`` is False and ``NCCL`` is Caffe's class as built without USE_NCCL: it can
  be constructed, but ``NCCL.new_uid``, ``bcast`` and using it as a callback raise
  :class:`NCCLUnavailable` (an AttributeError, like the missing methods of such a build).
- ``layer_type_list()``: the registered layer types, sorted as Caffe's registry lists them.
- ``set_mode_gpu()`` without a usable GPU warns and keeps the CPU (a CPU-only Caffe
  accepts the call and aborts at the first GPU computation).
- ``__version__``: the Caffe version the engine follows, "1.0.0".
"""
import logging
import sys
import time

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import CaffeError
from engine.core.layers.base import Layer as EngineLayer
from engine.core.layers.python_layer import PyLayer
from engine.core.layers.registry import layer_types
from engine.core.log import GlogFormatter, glog_flags, glog_level
from engine.core.net import Net
from engine.core.solvers import (
    AdaDeltaSolver,
    AdaGradSolver,
    AdamSolver,
    NesterovSolver,
    RMSPropSolver,
    SGDSolver,
    Solver,
    get_solver,
)
from engine.core.vectors import BlobVec, BoolVec, DtypeVec, IntVec, LayerVec, NetVec, RawBlobVec, StringVec

__all__ = ["Net", "Blob", "Layer", "BlobVec", "RawBlobVec", "LayerVec", "StringVec", "IntVec", "DtypeVec",
           "NetVec", "BoolVec", "Solver", "SGDSolver", "NesterovSolver", "AdaGradSolver",
           "RMSPropSolver", "AdaDeltaSolver", "AdamSolver", "get_solver", "NCCL", "NCCLUnavailable", "Timer",
           "init_log", "log", "has_nccl", "layer_type_list", "set_mode_cpu", "set_mode_gpu",
           "set_random_seed", "set_device", "solver_count", "set_solver_count", "solver_rank",
           "set_solver_rank", "set_multiprocess", "__version__"]

__version__ = "1.0.0"

set_mode_cpu = backend.set_mode_cpu
set_random_seed = backend.set_random_seed
set_device = backend.set_device
solver_count = backend.solver_count
set_solver_count = backend.set_solver_count
solver_rank = backend.solver_rank
set_solver_rank = backend.set_solver_rank
set_multiprocess = backend.set_multiprocess

pycaffe_log = logging.getLogger("engine.pycaffe")


layer_type_list = layer_types      # LayerRegistry::LayerTypeList: every registered type, sorted


# ---------------------------------------------------------------------- Layer
class _LayerClass(type):
    """``caffe._caffe.Layer``'s metaclass: every layer of the engine is a ``caffe.Layer``,
    as every layer pycaffe hands out is one (a built-in layer's Python object is of
    class ``caffe._caffe.Layer`` itself there); Python layers subclass it."""

    def __instancecheck__(cls, obj):
        if cls is Layer:
            return isinstance(obj, EngineLayer)
        return type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub):
        if cls is Layer:
            return isinstance(sub, type) and issubclass(sub, EngineLayer)
        return type.__subclasscheck__(cls, sub)

    def __repr__(cls):
        if cls is Layer:
            return "<class 'caffe._caffe.Layer'>"
        return type.__repr__(cls)


class Layer(PyLayer, metaclass=_LayerClass):
    """pycaffe's ``caffe.Layer`` (``caffe._caffe.Layer``): the class a Python layer
    subclasses (``setup``, ``reshape``, ``forward``, ``backward``; ``blobs``,
    ``param_str``, ``phase``), and of which every layer of a net is an instance
    (``isinstance(net.layers[i], caffe.Layer)``, as in pycaffe)."""


def set_mode_gpu():
    """Caffe::set_mode(GPU), on the current device (``set_device``).

    Without CuPy or a usable CUDA device the engine stays on the CPU and logs a warning
    saying why: a CPU-only build of Caffe accepts this call too (it only aborts later, at
    the first computation in GPU mode), so a script that runs there runs here, and one
    written for a GPU still runs, on the CPU, with the CPU's numbers."""
    backend.set_mode_gpu(fallback=True)


# ---------------------------------------------------------------------- logging
def init_log(level=None, stderr=None):
    """glog's InitGoogleLogging, after setting FLAGS_minloglevel = ``level`` and
    FLAGS_logtostderr = ``stderr`` when given.  Otherwise the flags are what glog read
    from the environment once, at start-up (GLOG_minloglevel, GLOG_logtostderr,
    GLOG_alsologtostderr, GLOG_stderrthreshold; :func:`engine.core.log.read_glog_flags`):
    changing ``os.environ`` after ``import caffe`` changes nothing, as in Caffe.  From then
    on the engine's messages from that level on go to stderr in glog's format when
    logging to stderr, else only from GLOG_stderrthreshold (ERROR) on (glog keeps the rest
    for its log files; the engine writes none).  This routing replaces the engine logger's
    other handlers that print to stderr (``python -m engine run``'s), as glog's set-up
    ends its logging to stderr before InitGoogleLogging."""
    flags = glog_flags()
    if level is not None:
        level = int(level)
        if not 0 <= level <= 3:
            raise ValueError("init_log: level must be 0 (INFO), 1 (WARNING), 2 (ERROR) or 3 (FATAL), not %d"
                             % level)
        flags.minloglevel = level
    if stderr is not None:
        flags.logtostderr = bool(stderr)
    least = glog_level(flags.minloglevel)
    if flags.logtostderr or flags.alsologtostderr:
        threshold = least
    else:
        threshold = max(least, glog_level(flags.stderrthreshold))
    engine_log = logging.getLogger("engine")
    for old in list(engine_log.handlers):
        if _writes_to_stderr(old):
            engine_log.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(GlogFormatter())
    handler.setLevel(threshold)
    engine_log.addHandler(handler)
    engine_log.setLevel(least)
    engine_log.propagate = False


def _writes_to_stderr(handler):
    """A handler printing to stderr (``python -m engine run``'s, an earlier init_log's);
    handlers that capture the log elsewhere (the inspector's, files) are left alone."""
    return (isinstance(handler, logging.StreamHandler)
            and getattr(handler, "stream", None) in (sys.stderr, sys.__stderr__))


def log(message):
    """``LOG(INFO) << message``."""
    pycaffe_log.info("%s", message)


# ---------------------------------------------------------------------- Timer
class Timer(object):
    """Caffe's Timer (util/benchmark.cpp): ``start()``, ``stop()``, ``ms``."""

    def __init__(self):
        self._running = False
        self._has_run = False
        self._start = self._stop = 0
        self._events = None

    def _gpu(self):
        return backend.mode() == backend.GPU

    def _record(self, index):
        if self._events is None:
            cp = backend.cupy()
            self._events = (cp.cuda.Event(), cp.cuda.Event())
        self._events[index].record()

    def start(self):
        if not self._running:
            if self._gpu():
                self._record(0)
            else:
                self._start = time.perf_counter_ns()
            self._running = True
            self._has_run = True

    def stop(self):
        if self._running:
            if self._gpu():
                self._record(1)
            else:
                self._stop = time.perf_counter_ns()
            self._running = False

    @property
    def ms(self):
        if not self._has_run:
            pycaffe_log.warning("Timer has never been run before reading time.")
            return 0.0
        if self._running:
            self.stop()
        if self._gpu():
            cp = backend.cupy()
            self._events[1].synchronize()
            return float(cp.cuda.get_elapsed_time(self._events[0], self._events[1]))
        return float((self._stop - self._start) // 1000000)   # boost's total_milliseconds()


# ---------------------------------------------------------------------- NCCL
_NO_NCCL = ("Multi-GPU execution not available - rebuild with USE_NCCL: the engine has no NCCL, as "
            "Caffe built without USE_NCCL (caffe.has_nccl() is False)")


class NCCLUnavailable(CaffeError, AttributeError):
    """NCCL is not built in (an AttributeError, as the missing methods of such a Caffe)."""


class _NotBuilt(object):
    """A method Caffe only has with USE_NCCL: reading it raises NCCLUnavailable."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        raise NCCLUnavailable("NCCL.%s: %s" % (self.name, _NO_NCCL))


class NCCL(object):
    """pycaffe's NCCL(solver, uid) as Caffe builds it without USE_NCCL: constructing it
    works, its methods and its use as a solver or net callback raise NCCLUnavailable."""

    new_uid = _NotBuilt()
    bcast = _NotBuilt()
    on_start = _NotBuilt()
    on_gradients_ready = _NotBuilt()

    def __init__(self, solver, uid):
        self.solver = solver
        self.uid = uid

    def __call__(self, *args):
        raise NCCLUnavailable("NCCL used as a callback: %s" % _NO_NCCL)


def has_nccl():
    """False: the engine has no NCCL (Caffe built without USE_NCCL)."""
    return False

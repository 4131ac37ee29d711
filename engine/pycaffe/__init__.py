"""pycaffe's ``python/caffe`` surface on the engine: this package is what ``import
caffe`` gives once :func:`install_as_caffe` has run (or a script runs under ``python -m
engine run``), name for name as BVLC Caffe 1.0's ``caffe/__init__.py``:

    Net, SGDSolver, NesterovSolver, AdaGradSolver, RMSPropSolver, AdaDeltaSolver, AdamSolver,
    NCCL, Timer, init_log, log, set_mode_cpu, set_mode_gpu, set_device, Layer, get_solver,
    layer_type_list, set_random_seed, solver_count, set_solver_count, solver_rank,
    set_solver_rank, set_multiprocess, has_nccl, __version__, TRAIN, TEST, Classifier,
    Detector, io, layers, params, NetSpec, to_proto

and the submodules ``caffe.proto`` (``caffe.proto.caffe_pb2``), ``caffe.io``,
``caffe.net_spec``, ``caffe.coord_map``, ``caffe.draw``, ``caffe.classifier``,
``caffe.detector``, ``caffe.pycaffe`` and ``caffe._caffe``.  docs/pycaffe.md lists them
with their status.
"""
import sys

from engine import proto
from engine.proto import caffe_pb2
from engine.pycaffe import io
from engine.pycaffe._caffe import (
    Layer,
    __version__,
    get_solver,
    has_nccl,
    init_log,
    layer_type_list,
    log,
    set_device,
    set_mode_cpu,
    set_mode_gpu,
    set_multiprocess,
    set_random_seed,
    set_solver_count,
    set_solver_rank,
    solver_count,
    solver_rank,
)
from engine.pycaffe.classifier import Classifier
from engine.pycaffe.detector import Detector
from engine.pycaffe.net_spec import NetSpec, layers, params, to_proto
from engine.pycaffe.pycaffe import (
    NCCL,
    AdaDeltaSolver,
    AdaGradSolver,
    AdamSolver,
    NesterovSolver,
    Net,
    RMSPropSolver,
    SGDSolver,
    Timer,
)

TRAIN = caffe_pb2.TRAIN
TEST = caffe_pb2.TEST

__all__ = ["Net", "SGDSolver", "NesterovSolver", "AdaGradSolver", "RMSPropSolver", "AdaDeltaSolver",
           "AdamSolver", "NCCL", "Timer", "init_log", "log", "set_mode_cpu", "set_mode_gpu", "set_device",
           "Layer", "get_solver", "layer_type_list", "set_random_seed", "solver_count", "set_solver_count",
           "solver_rank", "set_solver_rank", "set_multiprocess", "has_nccl", "__version__", "TRAIN", "TEST",
           "Classifier", "Detector", "io", "layers", "params", "NetSpec", "to_proto", "proto",
           "install_as_caffe"]

# The modules ``import caffe...`` finds once installed: pycaffe's name -> the engine's module.
CAFFE_MODULES = (
    ("caffe", "engine.pycaffe"),
    ("caffe._caffe", "engine.pycaffe._caffe"),
    ("caffe.pycaffe", "engine.pycaffe.pycaffe"),
    ("caffe.io", "engine.pycaffe.io"),
    ("caffe.proto", "engine.proto"),
    ("caffe.proto.caffe_pb2", "engine.proto.caffe_pb2"),
    ("caffe.net_spec", "engine.pycaffe.net_spec"),
    ("caffe.coord_map", "engine.pycaffe.coord_map"),
    ("caffe.draw", "engine.pycaffe.draw"),
    ("caffe.classifier", "engine.pycaffe.classifier"),
    ("caffe.detector", "engine.pycaffe.detector"),
)


def install_as_caffe():
    """Make ``import caffe`` (and ``import caffe.proto.caffe_pb2``, ``from caffe import
    layers as L``, ``import caffe.draw``, ...) give the engine's own modules, as PyMySQL's
    ``install_as_MySQLdb`` does for MySQLdb: each name in ``sys.modules`` is the engine's
    module object itself, so classes and protobuf messages are the same everywhere.
    ``str()`` of caffe_pb2 messages then prints fields in declaration order, as the
    reference pycaffe did (:mod:`engine.pycaffe.proto_text`).  Returns the ``caffe``
    module.  Raises ImportError when a different ``caffe`` (a real pycaffe) is already
    imported in this process."""
    import importlib

    from engine.pycaffe.proto_text import use_declaration_order
    modules = [(alias, importlib.import_module(name)) for alias, name in CAFFE_MODULES]
    for alias, module in modules:
        present = sys.modules.get(alias)
        if present is not None and present is not module:
            raise ImportError("install_as_caffe: a different module '%s' (%s) is already imported; install "
                              "the engine as caffe before anything imports caffe"
                              % (alias, getattr(present, "__file__", present)))
    for alias, module in modules:
        sys.modules[alias] = module
    use_declaration_order()
    return sys.modules["caffe"]

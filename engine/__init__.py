"""engine: BVLC Caffe 1.0's Net re-implemented on NumPy (CPU) and CuPy (GPU),
with pycaffe's API, so that ``import engine as caffe`` runs pycaffe scripts, and
``engine.install_as_caffe()`` (or ``python -m engine run SCRIPT``) makes ``import caffe``
give the engine's pycaffe (engine.pycaffe; docs/pycaffe.md)."""
from engine.core.gcpause import long_lived_imports as _long_lived_imports

# These imports (NumPy, protobuf, the core) make only long-lived objects (engine.core.gcpause)
with _long_lived_imports():
    from engine import _blas_kernels  # first: OpenBLAS reads OPENBLAS_CORETYPE when NumPy loads it
    from engine.core.backend import gpu_available, set_device, set_mode_cpu, set_random_seed
    from engine.core.blob import Blob  # noqa: F401
    from engine.core.errors import (
        CaffeError,
        DeviceError,
        LayerError,
        NetError,
        ParseError,
        ShapeError,
        SolverError,
        UnknownLayerTypeError,
    )
    from engine.core.net import TEST, TRAIN, Net  # noqa: F401

__version__ = "0.1.0"

_LAZY = {
    "caffe_pb2": ("engine.proto.caffe_pb2", None),
    "io": ("engine.pycaffe.io", None),
    "upgrade_net": ("engine.core.upgrade", "upgrade_net"),
    "read_net_params": ("engine.core.upgrade", "read_net_params"),
    "read_solver_params": ("engine.core.upgrade", "read_solver_params"),
    "filter_net": ("engine.core.filter", "filter_net"),
    "insert_splits": ("engine.core.splits", "insert_splits"),
    "stand_in_data": ("engine.core.standins", "stand_in_data"),          # structure-only nets
    "missing_data_source": ("engine.core.standins", "missing_source"),
    "parse_data_shapes": ("engine.core.standins", "parse_shapes"),
    "layer_type_list": ("engine.core.layers.registry", "layer_types"),
    "layer_class": ("engine.core.layers.registry", "find_layer_class"),
    "layer_categories": ("engine.core.layers.registry", "layer_categories"),
    "Layer": ("engine.pycaffe._caffe", "Layer"),
    "get_solver": ("engine.core.solvers", "get_solver"),
    "SGDSolver": ("engine.core.solvers", "SGDSolver"),
    "NesterovSolver": ("engine.core.solvers", "NesterovSolver"),
    "AdaGradSolver": ("engine.core.solvers", "AdaGradSolver"),
    "RMSPropSolver": ("engine.core.solvers", "RMSPropSolver"),
    "AdaDeltaSolver": ("engine.core.solvers", "AdaDeltaSolver"),
    "AdamSolver": ("engine.core.solvers", "AdamSolver"),
    # the rest of pycaffe's surface (engine.pycaffe), for ``import engine as caffe``
    "install_as_caffe": ("engine.pycaffe", "install_as_caffe"),
    "pycaffe": ("engine.pycaffe", None),
    "NetSpec": ("engine.pycaffe.net_spec", "NetSpec"),
    "layers": ("engine.pycaffe.net_spec", "layers"),
    "params": ("engine.pycaffe.net_spec", "params"),
    "to_proto": ("engine.pycaffe.net_spec", "to_proto"),
    "net_spec": ("engine.pycaffe.net_spec", None),
    "coord_map": ("engine.pycaffe.coord_map", None),
    "draw": ("engine.pycaffe.draw", None),
    "classifier": ("engine.pycaffe.classifier", None),
    "detector": ("engine.pycaffe.detector", None),
    "Classifier": ("engine.pycaffe.classifier", "Classifier"),
    "Detector": ("engine.pycaffe.detector", "Detector"),
    "set_mode_gpu": ("engine.pycaffe._caffe", "set_mode_gpu"),     # no GPU: a warning, the CPU
    "Timer": ("engine.pycaffe._caffe", "Timer"),
    "NCCL": ("engine.pycaffe._caffe", "NCCL"),
    "has_nccl": ("engine.pycaffe._caffe", "has_nccl"),
    "init_log": ("engine.pycaffe._caffe", "init_log"),
    "log": ("engine.pycaffe._caffe", "log"),
    "solver_count": ("engine.core.backend", "solver_count"),
    "set_solver_count": ("engine.core.backend", "set_solver_count"),
    "solver_rank": ("engine.core.backend", "solver_rank"),
    "set_solver_rank": ("engine.core.backend", "set_solver_rank"),
    "set_multiprocess": ("engine.core.backend", "set_multiprocess"),
    # what tools and the inspector use beside pycaffe's surface (they import no engine.core module)
    "using_mode": ("engine.core.backend", "using_mode"),
    "read_blobproto": ("engine.core.io", "read_blobproto"),
    "human_bytes": ("engine.core.log", "human_bytes"),
    "loss_weight": ("engine.core.layers.base", "loss_weight"),
    "memory_budget": ("engine.core.blob", "memory_budget"),
    "MemoryBudgetExceeded": ("engine.core.errors", "MemoryBudgetExceeded"),
    "EmptyBlobError": ("engine.core.errors", "EmptyBlobError"),
    "LimitExceeded": ("engine.core.errors", "LimitExceeded"),
    "NetLimits": ("engine.core.limits", "NetLimits"),           # the limits every net is read under
    "net_limits": ("engine.core.limits", "using"),
    "half_the_memory": ("engine.core.limits", "half_the_memory"),
}


def __getattr__(name):
    """Lazy attributes: the proto module, transforms, solvers, pycaffe's Layer."""
    if name in _LAZY:
        import importlib
        mod_name, attr = _LAZY[name]
        mod = importlib.import_module(mod_name)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError("module 'engine' has no attribute %r" % name)

"""engine: BVLC Caffe 1.0's Net re-implemented on NumPy (CPU) and CuPy (GPU),
with pycaffe's API, so that ``import engine as caffe`` runs pycaffe scripts."""
from engine.core.backend import gpu_available, set_device, set_mode_cpu, set_mode_gpu, set_random_seed
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
    "io": ("engine.core.io", None),
    "upgrade_net": ("engine.core.upgrade", "upgrade_net"),
    "read_net_params": ("engine.core.upgrade", "read_net_params"),
    "read_solver_params": ("engine.core.upgrade", "read_solver_params"),
    "filter_net": ("engine.core.filter", "filter_net"),
    "insert_splits": ("engine.core.splits", "insert_splits"),
    "layer_type_list": ("engine.core.layers.registry", "layer_types"),
    "layer_class": ("engine.core.layers.registry", "find_layer_class"),
    "layer_categories": ("engine.core.layers.registry", "layer_categories"),
    "Layer": ("engine.core.layers.python_layer", "PyLayer"),
    "get_solver": ("engine.core.solvers", "get_solver"),
    "SGDSolver": ("engine.core.solvers", "SGDSolver"),
    "NesterovSolver": ("engine.core.solvers", "NesterovSolver"),
    "AdaGradSolver": ("engine.core.solvers", "AdaGradSolver"),
    "RMSPropSolver": ("engine.core.solvers", "RMSPropSolver"),
    "AdaDeltaSolver": ("engine.core.solvers", "AdaDeltaSolver"),
    "AdamSolver": ("engine.core.solvers", "AdamSolver"),
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

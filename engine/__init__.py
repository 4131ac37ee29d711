"""engine: BVLC Caffe 1.0's Net re-implemented on NumPy (CPU) and CuPy (GPU),
with pycaffe's API, so that ``import engine as caffe`` runs pycaffe scripts."""
from .backend import (set_mode_cpu, set_mode_gpu, set_device, set_random_seed,  # noqa: F401
                      gpu_available)
from .errors import (CaffeError, ParseError, NetError, LayerError, ShapeError,  # noqa: F401
                     UnknownLayerTypeError, SolverError, DeviceError)
from .blob import Blob  # noqa: F401
from .net import Net, TRAIN, TEST  # noqa: F401

__version__ = "0.1.0"

_LAZY = {
    "caffe_pb2": ("engine.caffe_pb2", None),
    "io": ("engine.io", None),
    "upgrade_net": ("engine.upgrade", "upgrade_net"),
    "filter_net": ("engine.filter", "filter_net"),
    "insert_splits": ("engine.splits", "insert_splits"),
    "layer_type_list": ("engine.layers.registry", "layer_types"),
    "Layer": ("engine.layers.python_layer", "PyLayer"),
    "get_solver": ("engine.solvers", "get_solver"),
    "SGDSolver": ("engine.solvers", "SGDSolver"),
    "NesterovSolver": ("engine.solvers", "NesterovSolver"),
    "AdaGradSolver": ("engine.solvers", "AdaGradSolver"),
    "RMSPropSolver": ("engine.solvers", "RMSPropSolver"),
    "AdaDeltaSolver": ("engine.solvers", "AdaDeltaSolver"),
    "AdamSolver": ("engine.solvers", "AdamSolver"),
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

"""engine: BVLC Caffe 1.0's Net re-implemented on NumPy (CPU) and CuPy (GPU),
with pycaffe's API, so that ``import engine as caffe`` runs pycaffe scripts."""
from .backend import (set_mode_cpu, set_mode_gpu, set_device, set_random_seed,  # noqa: F401
                      gpu_available)
from .errors import (CaffeError, ParseError, NetError, LayerError, ShapeError,  # noqa: F401
                     UnknownLayerTypeError, SolverError, DeviceError)
from .blob import Blob  # noqa: F401

TRAIN, TEST = 0, 1

__version__ = "0.1.0"

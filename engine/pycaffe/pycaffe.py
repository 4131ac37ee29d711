"""pycaffe's ``caffe.pycaffe``: the Net and solver classes with pycaffe's Python
interface.

pycaffe attaches ``blobs``, ``params``, ``layer_dict``, ``inputs``, ``outputs``,
``top_names``, ``bottom_names``, ``blob_loss_weights``, ``forward``, ``backward``,
``forward_all``, ``forward_backward_all``, ``set_input_arrays`` and ``_batch`` to the
compiled Net here; the engine's :class:`~engine.core.net.Net` has them as its own methods,
with pycaffe's semantics, so this module only re-exports the classes.
"""
from engine.pycaffe._caffe import (
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

__all__ = ["Net", "SGDSolver", "NesterovSolver", "AdaGradSolver", "RMSPropSolver", "AdaDeltaSolver",
           "AdamSolver", "NCCL", "Timer"]

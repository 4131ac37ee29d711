"""Solvers: Caffe's Solver, SGDSolver and its family, with pycaffe's API.

    solver = engine.get_solver("solver.prototxt")   # the class named by ``type``
    solver = engine.SGDSolver("solver.prototxt")    # that class, whatever ``type`` says
    solver.step(100); solver.solve(); solver.snapshot(); solver.restore(path)

``SOLVERS`` maps Caffe's type names ("SGD", "Nesterov", "AdaGrad", "RMSProp",
"AdaDelta", "Adam") to the classes (Caffe's SolverRegistry).
"""
from engine.core.solvers.base import _REGISTRY as SOLVERS  # noqa: F401
from engine.core.solvers.base import (
    Callback,
    SignalHandler,
    Solver,
    SolverAction,
    create_solver,
    debug_string,
    register_solver,
    solver_class,
    solver_types,
)
from engine.core.solvers.policies import POLICIES, learning_rate  # noqa: F401
from engine.core.solvers.updates import (
    AdaDeltaSolver,
    AdaGradSolver,
    AdamSolver,
    NesterovSolver,
    RMSPropSolver,
    SGDSolver,
)
from engine.proto import caffe_pb2

__all__ = ["get_solver", "Solver", "SGDSolver", "NesterovSolver", "AdaGradSolver",
           "RMSPropSolver", "AdaDeltaSolver", "AdamSolver", "SOLVERS", "SolverAction",
           "SignalHandler", "Callback", "register_solver", "solver_types", "create_solver",
           "solver_class", "debug_string", "learning_rate"]


def get_solver(source, **kwargs):
    """pycaffe's ``get_solver(filename)``: read the solver prototxt (or take a
    SolverParameter) and build the solver its ``type`` names."""
    if isinstance(source, caffe_pb2.SolverParameter):
        param = source
    else:
        from engine.core.upgrade import read_solver_params
        param = read_solver_params(source)
    return create_solver(param, **kwargs)

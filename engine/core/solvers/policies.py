"""Learning rate policies: SGDSolver::GetLearningRate (sgd_solver.cpp, Caffe 1.0 master).

    fixed      base_lr
    step       base_lr * gamma ^ floor(iter / stepsize)
    exp        base_lr * gamma ^ iter
    inv        base_lr * (1 + gamma * iter) ^ (-power)
    multistep  base_lr * gamma ^ (number of stepvalues reached)
    poly       base_lr * (1 - iter / max_iter) ^ power
    sigmoid    base_lr / (1 + exp(-gamma * (iter - stepsize)))

The arithmetic follows the C++ types: the SolverParameter fields are floats,
the sub-expressions Caffe writes as ``Dtype`` are rounded to float32, ``pow``
and ``exp`` run in double, and the result is cast to the solver's Dtype.
"""
import numpy as np

from engine.core.errors import SolverError
from engine.core.log import check_failed as log_check_failed
from engine.core.log import num
from engine.core.log import solver_log as log

POLICIES = ("fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid")


def check_failed(expr, a=None, b=None, message=""):
    """A SolverError with glog's CHECK text: ``Check failed: expr (a vs. b) message``."""
    if a is not None or b is not None:
        a, b = num(a), num(b)
    return SolverError(log_check_failed(expr, a, b, message))


def learning_rate(param, iter_, current_step, dtype=np.float32):
    """The rate for iteration ``iter_``: returns ``(rate, current_step)``.

    ``current_step`` is the solver's step counter (Solver::current_step_): "step"
    recomputes it, "multistep" advances it by at most one per call and logs
    "MultiStep Status: ..." when it does, as Caffe does.
    """
    f = np.dtype(dtype).type
    policy = param.lr_policy
    base_lr = float(param.base_lr)
    gamma = float(param.gamma)
    iter_ = int(iter_)
    if policy == "fixed":
        rate = base_lr
    elif policy == "step":
        if not param.stepsize > 0:
            raise check_failed("this->param_.stepsize() > 0", param.stepsize, 0)
        current_step = iter_ // param.stepsize
        if not gamma >= 0:
            raise check_failed("this->param_.gamma() >= 0", param.gamma, 0)
        rate = base_lr * _pow(gamma, current_step)
    elif policy == "exp":
        if not gamma >= 0:
            raise check_failed("this->param_.gamma() >= 0", param.gamma, 0)
        rate = base_lr * _pow(gamma, iter_)
    elif policy == "inv":
        if not gamma >= 0:
            raise check_failed("this->param_.gamma() >= 0", param.gamma, 0)
        base = f(1) + f(param.gamma) * f(iter_)
        rate = base_lr * _pow(float(base), -float(param.power))
    elif policy == "multistep":
        if current_step < len(param.stepvalue) and iter_ >= param.stepvalue[current_step]:
            current_step += 1
            log.info("MultiStep Status: Iteration %d, step = %d", iter_, current_step)
        rate = base_lr * _pow(gamma, current_step)
    elif policy == "poly":
        with np.errstate(all="ignore"):
            base = f(1) - f(iter_) / f(param.max_iter)
        rate = base_lr * _pow(float(base), float(param.power))
    elif policy == "sigmoid":
        with np.errstate(all="ignore"):
            arg = f(-f(param.gamma)) * (f(iter_) - f(param.stepsize))
        rate = base_lr * (1.0 / (1.0 + _exp(float(arg))))
    else:
        raise SolverError("Unknown learning rate policy: %s" % policy)
    with np.errstate(all="ignore"):
        return f(rate), current_step


def _pow(x, y):
    """C's pow in double: nan/inf where Python's math.pow would raise."""
    with np.errstate(all="ignore"):
        return float(np.power(np.float64(x), np.float64(y)))


def _exp(x):
    with np.errstate(all="ignore"):
        return float(np.exp(np.float64(x)))

"""The update rules: SGDSolver and its family (sgd_solver.cpp, nesterov_solver.cpp,
adagrad_solver.cpp, rmsprop_solver.cpp, adadelta_solver.cpp, adam_solver.cpp;
BVLC Caffe 1.0 master).

ApplyUpdate: the learning rate (with "Iteration N, lr = R" on display
iterations), ClipGradients over all learnable params, then per param Normalize
(1/iter_size), Regularize (L2 or L1 weight decay scaled by decay_mult),
ComputeUpdateValue (the rule; the update lands in the param's diff), then
Net::Update (data -= diff) and ++iter.

The arithmetic is Caffe's CPU code, one float32 operation at a time in the
same order (axpby is scal then axpy; powx(x, 0.5) is pow), written once for
NumPy and CuPy: the arrays are those of the current mode, so GPU mode runs on
the device.  The histories are Blobs shaped like the learnable params; the
solver state (iter, current_step, learned_net, history) is saved and restored
as Caffe's SolverState binary proto or its HDF5 layout.
"""
import numpy as np

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import SolverError
from engine.core.log import num
from engine.core.log import solver_log as log
from engine.core.solvers.base import Solver, register_solver
from engine.core.solvers.policies import check_failed, learning_rate
from engine.proto import caffe_pb2


@register_solver
class SGDSolver(Solver):
    """Stochastic gradient descent with momentum: h = lr * g + momentum * h; diff = h."""

    type = "SGD"

    def __init__(self, param, dtype=np.float32, allow_python=True):
        super().__init__(param, dtype=dtype, allow_python=allow_python)
        self._pre_solve()

    # -------------------------------------------------------------- history
    def _new_history_blob(self, like):
        b = Blob(dtype=self._dtype)
        b.reshape(like.shape)
        return b

    def _pre_solve(self):
        """SGDSolver::PreSolve: one zero history blob per learnable param."""
        self.history = [self._new_history_blob(p) for p in self.net.learnable_params]

    def _add_history_set(self):
        """AdaDelta/Adam PreSolve: a second set of history blobs after the first."""
        self.history.extend(self._new_history_blob(p) for p in self.net.learnable_params)

    # -------------------------------------------------------------- the update
    def get_learning_rate(self):
        """SGDSolver::GetLearningRate for the current iteration (may advance current_step)."""
        rate, self.current_step_ = learning_rate(self._param, self.iter_, self.current_step_,
                                                 self._dtype)
        return rate

    GetLearningRate = get_learning_rate

    @property
    def lr(self):
        """pycaffe's ``solver.lr``: GetLearningRate() at the current iteration."""
        return self.get_learning_rate()

    def apply_update(self):
        """SGDSolver::ApplyUpdate (pycaffe's ``apply_update``): uses the gradients in the
        params' diffs, updates the weights and increments ``iter``."""
        p = self._param
        rate = self.get_learning_rate()
        if p.display and self.iter_ % p.display == 0:
            log.info("Iteration %d, lr = %s", self.iter_, num(rate))
        self.clip_gradients()
        net = self.net
        self._lists = (net.learnable_params, net.params_lr, net.params_weight_decay)
        try:
            for param_id in range(len(self._lists[0])):
                self.normalize(param_id)
                self.regularize(param_id)
                self.compute_update_value(param_id, rate)
        finally:
            self._lists = None
        net.Update()
        # iter_ counts the weight updates done.
        self.iter_ += 1

    _lists = None

    def _net_lists(self):
        """(learnable params, their lr_mults, their decay_mults), fetched once per update."""
        if self._lists is not None:
            return self._lists
        net = self.net
        return net.learnable_params, net.params_lr, net.params_weight_decay

    ApplyUpdate = apply_update

    def clip_gradients(self):
        """SGDSolver::ClipGradients: scale all diffs down when their global L2 norm
        exceeds clip_gradients."""
        f = self._f
        clip = f(self._param.clip_gradients)
        if clip < 0:
            return
        params = self.net.learnable_params
        sumsq_diff = f(0)
        for b in params:
            sumsq_diff = f(sumsq_diff + f(b.sumsq_diff()))
        l2norm_diff = f(np.sqrt(sumsq_diff))
        if l2norm_diff > clip:
            scale_factor = f(clip / l2norm_diff)
            log.info("Gradient clipping: scaling down gradients (L2 norm %s > %s) by scale factor %s",
                     num(l2norm_diff), num(clip), num(scale_factor))
            for b in params:
                b.scale_diff(scale_factor)

    ClipGradients = clip_gradients

    def normalize(self, param_id):
        """SGDSolver::Normalize: diff *= 1 / iter_size (accumulated gradients)."""
        iter_size = self._param.iter_size
        if iter_size == 1:
            return
        params = self._net_lists()[0]
        with np.errstate(divide="ignore"):
            params[param_id].scale_diff(self._f(1) / self._f(iter_size))

    Normalize = normalize

    def regularize(self, param_id):
        """SGDSolver::Regularize: diff += local_decay * data (L2) or * sign(data) (L1),
        local_decay = weight_decay * decay_mult."""
        f = self._f
        p = self._param
        params, _, decay_mults = self._net_lists()
        local_decay = f(f(p.weight_decay) * f(decay_mults[param_id]))
        if not local_decay:
            return
        blob = params[param_id]
        reg = p.regularization_type
        if reg == "L2":
            data = blob.get_data()
            diff = blob.mut_diff()
            diff += data * local_decay
        elif reg == "L1":
            data = blob.get_data()
            diff = blob.mut_diff()
            xp = backend.xp_of(data)
            diff += xp.sign(data) * local_decay
        else:
            raise SolverError("Unknown regularization type: %s" % reg)

    Regularize = regularize

    def _local_rate(self, rate, param_id):
        return self._f(rate * self._f(self._net_lists()[1][param_id]))

    def _operands(self, param_id, rate):
        """What every rule starts from: the local rate, the param's diff (where the update
        lands) and its history, as arrays of the current mode."""
        g = self._net_lists()[0][param_id].mut_diff()
        return self._local_rate(rate, param_id), g, self.history[param_id].mut_data()

    def _second_history(self, param_id):
        """AdaDelta's and Adam's second history of the param (after the first set)."""
        return self.history[len(self._net_lists()[0]) + param_id].mut_data()

    def compute_update_value(self, param_id, rate):
        """SGD: history = local_rate * diff + momentum * history; diff = history."""
        momentum = self._f(self._param.momentum)
        local_rate, g, h = self._operands(param_id, rate)
        h *= momentum
        h += g * local_rate
        g[...] = h

    ComputeUpdateValue = compute_update_value

    # -------------------------------------------------------------- solver state
    def snapshot_solver_state(self, model_filename):
        fmt = self._param.snapshot_format
        if fmt == caffe_pb2.SolverParameter.BINARYPROTO:
            self._snapshot_state_to_binary_proto(model_filename)
        elif fmt == caffe_pb2.SolverParameter.HDF5:
            self._snapshot_state_to_hdf5(model_filename)
        else:
            raise SolverError("Unsupported snapshot format.")

    def solver_state(self, model_filename=None):
        """The SolverState message of the current state (iter, learned_net, current_step,
        history)."""
        state = caffe_pb2.SolverState()
        state.iter = self.iter_
        if model_filename is not None:
            state.learned_net = model_filename
        state.current_step = self.current_step_
        for h in self.history:
            h.to_proto(state.history.add())
        return state

    def _snapshot_state_to_binary_proto(self, model_filename):
        from engine.core.io import write_binary
        state = self.solver_state(model_filename)
        filename = self.snapshot_filename(".solverstate")
        log.info("Snapshotting solver state to binary proto file %s", filename)
        write_binary(filename, state)

    def _snapshot_state_to_hdf5(self, model_filename):
        import h5py
        filename = self.snapshot_filename(".solverstate.h5")
        log.info("Snapshotting solver state to HDF5 file %s", filename)
        try:
            f = h5py.File(filename, "w")
        except OSError:
            raise check_failed("file_hid >= 0", -1, 0, "Couldn't open %s to save solver state."
                               % filename) from None
        with f:
            f.create_dataset("iter", data=np.array([self.iter_], dtype=np.int32))
            _save_string(f, "learned_net", model_filename)
            f.create_dataset("current_step", data=np.array([self.current_step_], dtype=np.int32))
            group = f.create_group("history")
            for i, h in enumerate(self.history):
                group.create_dataset(str(i), data=np.asarray(h.get_data(gpu=False)))

    def restore_solver_state(self, state):
        """SGDSolver::RestoreSolverState from a SolverState message (the weights are
        loaded from ``learned_net`` when the state names one)."""
        from engine.core.upgrade import read_net_params_binary
        self.iter_ = state.iter
        if state.HasField("learned_net"):
            self.net.CopyTrainedLayersFrom(read_net_params_binary(state.learned_net))
        self.current_step_ = state.current_step
        if len(state.history) != len(self.history):
            raise check_failed("state.history_size() == history_.size()", len(state.history),
                               len(self.history), "Incorrect length of history blobs.")
        log.info("SGDSolver: restoring history")
        for i, h in enumerate(self.history):
            h.from_proto(state.history[i])
            self._check_history_shape(i)

    def restore_solver_state_from_binary_proto(self, state_file):
        from engine.core.io import read_binary
        self.restore_solver_state(read_binary(state_file, caffe_pb2.SolverState))

    def restore_solver_state_from_hdf5(self, state_file):
        import h5py
        try:
            f = h5py.File(state_file, "r")
        except OSError:
            raise check_failed("file_hid >= 0", -1, 0, "Couldn't open solver state file %s"
                               % state_file) from None
        with f:
            self.iter_ = _load_int(f, "iter", state_file)
            if "learned_net" in f:
                self.net.CopyTrainedLayersFrom(_load_string(f, "learned_net"))
            self.current_step_ = _load_int(f, "current_step", state_file)
            if "history" not in f or not isinstance(f["history"], h5py.Group):
                raise check_failed("history_hid >= 0", -1, 0, "Error reading history from %s"
                                   % state_file)
            group = f["history"]
            if len(group) != len(self.history):
                raise check_failed("state_history_size == history_.size()", len(group),
                                   len(self.history), "Incorrect length of history blobs.")
            for i, h in enumerate(self.history):
                if str(i) not in group:
                    raise SolverError("Failed to find HDF5 dataset %s" % i)
                arr = np.asarray(group[str(i)])
                if arr.dtype.kind != "f":
                    raise SolverError("Expected float or double data")
                h.reshape(arr.shape)
                h.data[...] = arr
                self._check_history_shape(i)

    def _check_history_shape(self, i):
        params = self.net.learnable_params
        param = params[i % len(params)]
        if self.history[i].count != param.count:
            raise SolverError("Solver state history blob %d has shape %s but its param has shape %s"
                              % (i, self.history[i].shape_string(), param.shape_string()))


def _save_string(f, name, value):
    """hdf5_save_string (H5LTmake_dataset_string): a scalar NUL-terminated string."""
    import h5py
    raw = value.encode("utf-8")
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(len(raw) + 1)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    space = h5py.h5s.create(h5py.h5s.SCALAR)
    dset = h5py.h5d.create(f.id, name.encode(), tid, space)
    dset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(raw, dtype="S%d" % (len(raw) + 1)))


def _load_string(f, name):
    v = f[name][()]
    if isinstance(v, np.ndarray):
        v = v.reshape(-1)[0]
    if isinstance(v, bytes):
        v = v.split(b"\0", 1)[0].decode("utf-8")
    return str(v)


def _load_int(f, name, path):
    if name not in f:
        raise SolverError("Failed to load int dataset %s" % name)
    return int(np.asarray(f[name]).reshape(-1)[0])


def _divide_by_root(g, h, f, delta, local_rate):
    """AdaGrad's and RMSProp's last step: diff = local_rate * g / (sqrt(h) + delta), in
    Caffe's order (powx, add_scalar, div, scale)."""
    update = backend.xp_of(g).power(h, f(0.5))
    update += f(delta)
    update = g / update
    g[...] = update * local_rate


@register_solver
class NesterovSolver(SGDSolver):
    """Nesterov's accelerated gradient: h' = lr * g + m * h; diff = (1 + m) h' - m h."""

    type = "Nesterov"

    def compute_update_value(self, param_id, rate):
        f = self._f
        momentum = f(self._param.momentum)
        local_rate, g, h = self._operands(param_id, rate)
        update = h.copy()                 # the previous history, to step back
        h *= momentum
        h += g * local_rate
        update *= -momentum               # step back, then over-step
        update += h * (f(1) + momentum)
        g[...] = update

    ComputeUpdateValue = compute_update_value


@register_solver
class AdaGradSolver(SGDSolver):
    """AdaGrad: h += g^2; diff = lr * g / (sqrt(h) + delta)."""

    type = "AdaGrad"

    def __init__(self, param, dtype=np.float32, allow_python=True):
        super().__init__(param, dtype=dtype, allow_python=allow_python)
        if self._param.momentum != 0:
            raise check_failed("0 == this->param_.momentum()", 0, self._param.momentum,
                               "Momentum cannot be used with AdaGrad.")

    def compute_update_value(self, param_id, rate):
        local_rate, g, h = self._operands(param_id, rate)
        h += g * g
        _divide_by_root(g, h, self._f, self._param.delta, local_rate)

    ComputeUpdateValue = compute_update_value


@register_solver
class RMSPropSolver(SGDSolver):
    """RMSProp: h = rms_decay * h + (1 - rms_decay) g^2; diff = lr * g / (sqrt(h) + delta)."""

    type = "RMSProp"

    def __init__(self, param, dtype=np.float32, allow_python=True):
        super().__init__(param, dtype=dtype, allow_python=allow_python)
        p = self._param
        if p.momentum != 0:
            raise check_failed("0 == this->param_.momentum()", 0, p.momentum,
                               "Momentum cannot be used with RMSProp.")
        if not p.rms_decay >= 0:
            raise check_failed("this->param_.rms_decay() >= 0", p.rms_decay, 0,
                               "rms_decay should lie between 0 and 1.")
        if not p.rms_decay < 1:
            raise check_failed("this->param_.rms_decay() < 1", p.rms_decay, 1,
                               "rms_decay should lie between 0 and 1.")

    def compute_update_value(self, param_id, rate):
        f = self._f
        rms_decay = f(self._param.rms_decay)
        local_rate, g, h = self._operands(param_id, rate)
        update = g * g
        h *= rms_decay
        h += update * (f(1) - rms_decay)
        _divide_by_root(g, h, f, self._param.delta, local_rate)

    ComputeUpdateValue = compute_update_value


@register_solver
class AdaDeltaSolver(SGDSolver):
    """AdaDelta: h = m h + (1-m) g^2; u = g * sqrt((h2 + delta) / (h + delta));
    h2 = m h2 + (1-m) u^2; diff = lr * u."""

    type = "AdaDelta"

    def __init__(self, param, dtype=np.float32, allow_python=True):
        super().__init__(param, dtype=dtype, allow_python=allow_python)
        self._add_history_set()

    def compute_update_value(self, param_id, rate):
        f = self._f
        delta = f(self._param.delta)
        momentum = f(self._param.momentum)
        local_rate, g, h = self._operands(param_id, rate)
        h2 = self._second_history(param_id)
        xp = backend.xp_of(g)
        one_minus = f(1) - momentum
        update = g * g
        h *= momentum
        h += update * one_minus           # history of squared gradients
        update = h2 + delta               # (delta guards the division)
        temp = h + delta
        update /= temp
        update = xp.power(update, f(0.5))
        g *= update                       # the update, before the learning rate
        update = g * g
        h2 *= momentum
        h2 += update * one_minus          # history of squared updates
        g *= local_rate

    ComputeUpdateValue = compute_update_value


@register_solver
class AdamSolver(SGDSolver):
    """Adam (beta1 = momentum, beta2 = momentum2, eps = delta):
    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    diff = lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps), t = iter + 1."""

    type = "Adam"

    def __init__(self, param, dtype=np.float32, allow_python=True):
        super().__init__(param, dtype=dtype, allow_python=allow_python)
        self._add_history_set()

    def compute_update_value(self, param_id, rate):
        f = self._f
        beta1 = f(self._param.momentum)
        beta2 = f(self._param.momentum2)
        t = self.iter_ + 1
        with np.errstate(all="ignore"):
            correction = f(np.sqrt(1.0 - np.power(np.float64(beta2), t))
                           / (1.0 - np.power(np.float64(beta1), t)))
        eps_hat = f(self._param.delta)
        local_rate, g, m = self._operands(param_id, rate)
        v = self._second_history(param_id)
        xp = backend.xp_of(g)
        m *= beta1
        m += g * (f(1) - beta1)
        temp = g * g
        v *= beta2
        v += temp * (f(1) - beta2)
        temp = xp.power(v, f(0.5))
        temp += eps_hat
        temp = m / temp
        g[...] = temp * f(local_rate * correction)

    ComputeUpdateValue = compute_update_value

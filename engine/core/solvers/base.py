"""Solver: Caffe's Solver (solver.cpp, BVLC Caffe 1.0 master), with pycaffe's API.

Init, Step, Solve, Test, Snapshot and Restore run in solver.cpp's order and log
its messages word for word ("Iteration N (X iter/s, Ys/Z iters), loss = L",
"    Train net output #k: ...", "Iteration N, Testing net (#k)", ...).  The
update rules themselves (ApplyUpdate and the solver state) live in
``engine.core.solvers.updates``; the learning rate policies in
``engine.core.solvers.policies``.

pycaffe's Solver API: ``net``, ``test_nets``, ``iter``, ``max_iter``, ``param``,
``step(n)``, ``solve(resume_file=None)``, ``snapshot()``, ``restore(path)``,
``apply_update()``, ``share_weights(net)``, ``add_callback(on_start,
on_gradients_ready)``.  Beyond it: ``test(k)``, ``test_all()``, ``set_action_function``,
``request_stop()``/``request_snapshot()`` (Caffe's SolverAction requests), and
:class:`SignalHandler` (caffe.cpp's SIGINT/SIGHUP handling).
"""
from __future__ import annotations

import collections
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from google.protobuf import descriptor as _descriptor
from google.protobuf import text_encoding

from engine.core import backend
from engine.core.errors import SolverError
from engine.core.log import num
from engine.core.log import solver_log as log
from engine.core.solvers.policies import check_failed
from engine.core.vectors import NetVec
from engine.proto import caffe_pb2

if TYPE_CHECKING:
    from engine.core.net import Net

TRAIN, TEST = 0, 1


class SolverAction:
    """Caffe's SolverAction::Enum: what a requested action asks the solver to do."""
    NONE = 0
    STOP = 1
    SNAPSHOT = 2

    @staticmethod
    def from_effect(effect):
        """caffe.cpp's GetRequestedAction(flag value): "stop", "snapshot" or "none"."""
        table = {"stop": SolverAction.STOP, "snapshot": SolverAction.SNAPSHOT,
                 "none": SolverAction.NONE}
        if effect not in table:
            raise SolverError('Invalid signal effect "%s" was specified' % effect)
        return table[effect]


# ---------------------------------------------------------------------------
# Registry (SolverRegistry)
# ---------------------------------------------------------------------------
_REGISTRY: dict = {}


def register_solver(cls):
    """Class decorator: register ``cls`` under ``cls.type`` (REGISTER_SOLVER_CLASS)."""
    name = cls.type
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise SolverError("Solver type %s already registered." % name)
    _REGISTRY[name] = cls
    return cls


def solver_types():
    """The registered solver type names, sorted (SolverRegistry::SolverTypeList)."""
    return sorted(_REGISTRY)


def solver_class(type_name):
    if type_name not in _REGISTRY:
        raise check_failed("registry.count(type) == 1", 0, 1,
                           "Unknown solver type: %s (known types: %s)"
                           % (type_name, ", ".join(solver_types())))
    return _REGISTRY[type_name]


def create_solver(param, **kwargs):
    """SolverRegistry::CreateSolver: a solver of ``param.type`` for a SolverParameter."""
    return solver_class(param.type)(param, **kwargs)


# ---------------------------------------------------------------------------
# Callbacks and signals
# ---------------------------------------------------------------------------
class Callback:
    """Solver::Callback: ``on_start()`` before each iteration's forward/backward,
    ``on_gradients_ready()`` after it, before ApplyUpdate."""

    def on_start(self):
        pass

    def on_gradients_ready(self):
        pass


class _FunctionCallback(Callback):
    """pycaffe's PythonCallback: two Python callables."""

    def __init__(self, on_start, on_gradients_ready):
        self._on_start, self._on_gradients_ready = on_start, on_gradients_ready

    def on_start(self):
        if self._on_start is not None:
            self._on_start()

    def on_gradients_ready(self):
        if self._on_gradients_ready is not None:
            self._on_gradients_ready()


class SignalHandler:
    """caffe::SignalHandler: SIGINT and SIGHUP set flags; the action function
    (``get_action_function()``, for ``Solver.set_action_function``) turns a
    received signal into its effect ("stop", "snapshot" or "none"), SIGHUP
    first.  Use as a context manager, or ``install()``/``uninstall()``; it only
    installs from the main thread (Python's rule), elsewhere it stays inert.
    """

    def __init__(self, sigint_effect="stop", sighup_effect="snapshot"):
        self.sigint_action = sigint_effect if isinstance(sigint_effect, int) \
            else SolverAction.from_effect(sigint_effect)
        self.sighup_action = sighup_effect if isinstance(sighup_effect, int) \
            else SolverAction.from_effect(sighup_effect)
        self._got = {"INT": False, "HUP": False}
        self._previous = {}

    def _handle(self, signum, frame):
        if signum == signal.SIGINT:
            self._got["INT"] = True
        elif signum == getattr(signal, "SIGHUP", None):
            self._got["HUP"] = True

    def install(self):
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return self
        for name in ("SIGINT", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except (ValueError, OSError) as e:
                raise SolverError("Cannot install %s handler. (%s)" % (name, e)) from None
        return self

    def uninstall(self):
        for signum, previous in self._previous.items():
            try:
                signal.signal(signum, previous)
            except (ValueError, OSError, TypeError):
                pass
        self._previous = {}

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()

    def got(self, which):
        """True iff the signal ("INT" or "HUP") came since the last call."""
        result = self._got[which]
        self._got[which] = False
        return result

    def check_for_signals(self):
        if self.got("HUP"):
            return self.sighup_action
        if self.got("INT"):
            return self.sigint_action
        return SolverAction.NONE

    def get_action_function(self):
        return self.check_for_signals


# ---------------------------------------------------------------------------
# DebugString: protobuf's C++ text printer (floats as SimpleFtoa prints them)
# ---------------------------------------------------------------------------
_FD = _descriptor.FieldDescriptor


def _float_text(v, double=False):
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    if double:
        s = "%.15g" % v
        return s if float(s) == v else "%.17g" % v
    s = "%.6g" % v
    return s if np.float32(float(s)) == np.float32(v) else "%.9g" % v


def _scalar_text(field, v):
    t = field.type
    if t == _FD.TYPE_FLOAT:
        return _float_text(v)
    if t == _FD.TYPE_DOUBLE:
        return _float_text(v, True)
    if t == _FD.TYPE_BOOL:
        return "true" if v else "false"
    if t == _FD.TYPE_ENUM:
        ev = field.enum_type.values_by_number.get(v)
        return ev.name if ev is not None else str(v)
    if t == _FD.TYPE_STRING:
        return '"%s"' % text_encoding.CEscape(v.encode("utf-8"), False)
    if t == _FD.TYPE_BYTES:
        return '"%s"' % text_encoding.CEscape(v, False)
    return str(v)


def _is_repeated(field):
    rep = getattr(field, "is_repeated", None)
    if rep is not None:
        return rep
    return field.label == _FD.LABEL_REPEATED


def debug_string(msg, indent=0):
    """Message::DebugString: fields in field-number order, nested messages in braces."""
    pad = "  " * indent
    out = []
    for field, value in msg.ListFields():
        values = value if _is_repeated(field) else [value]
        for v in values:
            if field.type in (_FD.TYPE_MESSAGE, _FD.TYPE_GROUP):
                out.append("%s%s {\n%s%s}\n" % (pad, field.name, debug_string(v, indent + 1), pad))
            else:
                out.append("%s%s: %s\n" % (pad, field.name, _scalar_text(field, v)))
    return "".join(out)


# ---------------------------------------------------------------------------
# Solver
# ---------------------------------------------------------------------------
def _read_solver_param(source):
    if isinstance(source, caffe_pb2.SolverParameter):
        p = caffe_pb2.SolverParameter()
        p.CopyFrom(source)
        return p, None
    from engine.core.upgrade import read_solver_params
    path = os.fspath(source)
    return read_solver_params(path), path


class Solver:
    """Caffe's Solver: ``Solver(path or SolverParameter)``.

    A path is read as ReadSolverParamsFromTextFileOrDie does (with the solver
    upgrades and the snapshot_prefix default); a SolverParameter is used as given.
    Keyword arguments: ``dtype`` of the nets (float32), ``allow_python`` (Python
    layers run the model author's code, as in Caffe; default True).
    """

    type = None

    def __init__(self, param, dtype=np.float32, allow_python=True):
        p, self.param_file = _read_solver_param(param)
        self._dtype = np.dtype(dtype)
        self._f = self._dtype.type
        self._allow_python = allow_python
        self.net = None
        self.test_nets = []
        self._callbacks = []
        self._requested_early_exit = False
        self._action_function = None
        self._pending_actions = collections.deque()
        self.iter_ = 0
        self.current_step_ = 0
        self.iterations_last_ = 0
        self.losses_ = []
        self.smoothed_loss_ = self._f(0)
        self._iteration_timer = time.perf_counter()
        self._init(p)

    # -------------------------------------------------------------- Init
    def _init(self, param):
        # glog adds no newline after a message that ends with one: drop DebugString's last.
        log.info("Initializing solver from parameters: \n%s", debug_string(param).rstrip("\n"))
        self._param = param
        if not param.average_loss >= 1:
            raise check_failed("param_.average_loss() >= 1", param.average_loss, 1,
                               "average_loss should be non-negative.")
        self._check_snapshot_write_permissions()
        if param.random_seed >= 0:
            backend.set_random_seed(param.random_seed)
        self._init_train_net()
        self._init_test_nets()
        log.info("Solver scaffolding done.")
        self.iter_ = 0
        self.current_step_ = 0

    def _new_net(self, net_param, model_dir=None, source_file=None):
        from engine.core.net import Net
        return Net.from_param(net_param, allow_python=self._allow_python, dtype=self._dtype,
                              model_dir=model_dir, source_file=source_file)

    @staticmethod
    def _read_net(path):
        from engine.core.upgrade import read_net_params
        return read_net_params(path)

    def _net_and_dir(self, source, is_file):
        """``(NetParameter, model_dir)`` of a net given as a prototxt file (read and
        upgraded; its folder) or as a NetParameter (copied; no folder)."""
        if is_file:
            return self._read_net(source), os.path.dirname(os.path.abspath(source))
        q = caffe_pb2.NetParameter()
        q.CopyFrom(source)
        return q, None

    def _load_net_weights(self, net, model_list):
        """LoadNetWeights: a comma-separated list of caffemodels, each trimmed."""
        for name in model_list.split(","):
            name = name.strip()
            log.info("Finetuning from %s", name)
            net.CopyTrainedLayersFrom(name)

    def _init_train_net(self):
        p = self._param
        num_train_nets = (p.HasField("net") + p.HasField("net_param") + p.HasField("train_net")
                          + p.HasField("train_net_param"))
        field_names = "net, net_param, train_net, train_net_param"
        if num_train_nets < 1:
            raise check_failed("num_train_nets >= 1", num_train_nets, 1,
                               "SolverParameter must specify a train net using one of these "
                               "fields: " + field_names)
        if num_train_nets > 1:
            raise check_failed("num_train_nets <= 1", num_train_nets, 1,
                               "SolverParameter must not contain more than one of these fields "
                               "specifying a train_net: " + field_names)
        # exactly one of them is set (checked above)
        field = next(f for f in ("train_net_param", "train_net", "net_param", "net") if p.HasField(f))
        is_file = not field.endswith("_param")
        if is_file:
            log.info("Creating training net from %s file: %s", field, getattr(p, field))
        else:
            log.info("Creating training net specified in %s.", field)
        net_param, model_dir = self._net_and_dir(getattr(p, field), is_file)
        # NetState: the solver default (TRAIN), then the net's own, then train_state.
        state = caffe_pb2.NetState()
        state.phase = TRAIN
        state.MergeFrom(net_param.state)
        state.MergeFrom(p.train_state)
        net_param.state.CopyFrom(state)
        self.net = self._new_net(net_param, model_dir, getattr(p, field) if is_file else None)
        for w in p.weights:
            self._load_net_weights(self.net, w)

    def _init_test_nets(self):
        p = self._param
        has_net_param, has_net_file = p.HasField("net_param"), p.HasField("net")
        num_generic_nets = has_net_param + has_net_file
        if num_generic_nets > 1:
            raise check_failed("num_generic_nets <= 1", num_generic_nets, 1,
                               "Both net_param and net_file may not be specified.")
        num_test_net_params = len(p.test_net_param)
        num_test_net_files = len(p.test_net)
        num_test_nets = num_test_net_params + num_test_net_files
        if num_generic_nets:
            if not len(p.test_iter) >= num_test_nets:
                raise check_failed("param_.test_iter_size() >= num_test_nets", len(p.test_iter),
                                   num_test_nets, "test_iter must be specified for each test network.")
        elif len(p.test_iter) != num_test_nets:
            raise check_failed("param_.test_iter_size() == num_test_nets", len(p.test_iter),
                               num_test_nets, "test_iter must be specified for each test network.")
        num_generic_net_instances = len(p.test_iter) - num_test_nets
        num_instances = num_test_nets + num_generic_net_instances
        if len(p.test_state) and len(p.test_state) != num_instances:
            raise check_failed("param_.test_state_size() == num_test_net_instances", len(p.test_state),
                               num_instances, "test_state must be unspecified or specified once per "
                               "test net.")
        if num_instances and not p.test_interval > 0:
            raise check_failed("param_.test_interval() > 0", p.test_interval, 0)
        # (how the log names it, the NetParameter or the file, is it a file): the test nets,
        # then the generic net once per test_iter left over
        specs = [("test_net_param", q, False) for q in p.test_net_param]
        specs += [("test_net file: " + f, f, True) for f in p.test_net]
        remaining = len(p.test_iter) - len(specs)
        if has_net_param:
            specs += [("net_param", p.net_param, False)] * remaining
        if has_net_file:
            specs += [("net file: " + p.net, p.net, True)] * remaining
        built = [self._net_and_dir(src, is_file) for _, src, is_file in specs]
        self.test_nets = []
        for i in range(num_instances):
            net_param, model_dir = built[i]
            state = caffe_pb2.NetState()
            state.phase = TEST
            state.MergeFrom(net_param.state)
            if len(p.test_state):
                state.MergeFrom(p.test_state[i])
            net_param.state.CopyFrom(state)
            log.info("Creating test net (#%d) specified by %s", i, specs[i][0])
            net = self._new_net(net_param, model_dir, specs[i][1] if specs[i][2] else None)
            net.debug_info = bool(p.debug_info)
            self.test_nets.append(net)
            for w in p.weights:
                self._load_net_weights(net, w)

    # -------------------------------------------------------------- requests
    def set_action_function(self, func: Callable[[], int] | None) -> None:
        """Solver::SetActionFunction: ``func()`` returns a SolverAction, asked after
        every iteration and before every test batch."""
        self._action_function = func

    SetActionFunction = set_action_function

    def request_action(self, action: int) -> None:
        """Queue a one-shot SolverAction (STOP or SNAPSHOT), seen at the next check."""
        self._pending_actions.append(int(action))

    def request_stop(self) -> None:
        self.request_action(SolverAction.STOP)

    def request_snapshot(self) -> None:
        self.request_action(SolverAction.SNAPSHOT)

    def get_requested_action(self) -> int:
        if self._pending_actions:
            return self._pending_actions.popleft()
        if self._action_function is not None:
            return int(self._action_function())
        return SolverAction.NONE

    @property
    def requested_early_exit(self) -> bool:
        return self._requested_early_exit

    # -------------------------------------------------------------- callbacks
    def add_callback(self, on_start: Any, on_gradients_ready: Callable[[], None] | None = None) -> None:
        """pycaffe's ``add_callback(on_start, on_gradients_ready)``; one argument with
        ``on_start``/``on_gradients_ready`` methods is a Caffe Solver::Callback."""
        if on_gradients_ready is None and (hasattr(on_start, "on_start")
                                           or hasattr(on_start, "on_gradients_ready")):
            self._callbacks.append(on_start)
        else:
            self._callbacks.append(_FunctionCallback(on_start, on_gradients_ready))

    @property
    def callbacks(self) -> list[Callback]:
        return list(self._callbacks)

    # -------------------------------------------------------------- training
    def step(self, iters: int) -> None:
        """Solver::Step: ``iters`` iterations of forward/backward, display, update,
        snapshot."""
        p, f = self._param, self._f
        start_iter = self.iter_
        stop_iter = self.iter_ + int(iters)
        average_loss = p.average_loss
        self.losses_ = []
        self.smoothed_loss_ = f(0)
        self._iteration_timer = time.perf_counter()
        while self.iter_ < stop_iter:
            self.net.ClearParamDiffs()
            if (p.test_interval and self.iter_ % p.test_interval == 0
                    and (self.iter_ > 0 or p.test_initialization)):
                self.test_all()
                if self._requested_early_exit:
                    break
            for cb in self._callbacks:
                cb.on_start()
            display = bool(p.display) and self.iter_ % p.display == 0
            self.net.debug_info = display and bool(p.debug_info)
            loss = f(0)
            for _ in range(p.iter_size):
                loss = f(loss + f(self.net.ForwardBackward()))
            with np.errstate(divide="ignore", invalid="ignore"):
                loss = f(loss / f(p.iter_size))
            self._update_smoothed_loss(loss, start_iter, average_loss)
            if display:
                self._display()
            for cb in self._callbacks:
                cb.on_gradients_ready()
            self.apply_update()
            request = self.get_requested_action()
            if (p.snapshot and self.iter_ % p.snapshot == 0) or request == SolverAction.SNAPSHOT:
                self.snapshot()
            if request == SolverAction.STOP:
                self._requested_early_exit = True
                break

    Step = step

    def _display(self):
        p, f = self._param, self._f
        now = time.perf_counter()
        lapse = np.float32(now - self._iteration_timer)
        per_s = np.float32((self.iter_ - self.iterations_last_) / (lapse if lapse else np.float32(1)))
        log.info("Iteration %d (%s iter/s, %ss/%d iters), loss = %s", self.iter_, num(per_s),
                 num(lapse), p.display, num(self.smoothed_loss_))
        self._iteration_timer = time.perf_counter()
        self.iterations_last_ = self.iter_
        net = self.net
        weights = net.blob_loss_weights
        names = net.blob_names
        score_index = 0
        for bid in net.output_blob_indices:
            name = names[bid]
            loss_weight = f(weights[name])
            values = np.asarray(net._blob_list[bid].get_data(gpu=False)).reshape(-1)
            for v in values:
                msg = "    Train net output #%d: %s = %s" % (score_index, name, num(v))
                if loss_weight:
                    msg += " (* %s = %s loss)" % (num(loss_weight), num(f(loss_weight * v)))
                log.info("%s", msg)
                score_index += 1

    def _update_smoothed_loss(self, loss, start_iter, average_loss):
        """Solver::UpdateSmoothedLoss: running mean over the last ``average_loss`` losses."""
        f = self._f
        if len(self.losses_) < average_loss:
            self.losses_.append(loss)
            size = len(self.losses_)
            self.smoothed_loss_ = f((self.smoothed_loss_ * f(size - 1) + loss) / f(size))
        else:
            idx = (self.iter_ - start_iter) % average_loss
            self.smoothed_loss_ = f(self.smoothed_loss_ + (loss - self.losses_[idx]) / f(average_loss))
            self.losses_[idx] = loss

    def solve(self, resume_file: str | None = None) -> None:
        """Solver::Solve: Step up to max_iter, snapshot, a last display and test."""
        p = self._param
        log.info("Solving %s", self.net.param.name)
        log.info("Learning Rate Policy: %s", p.lr_policy)
        self._requested_early_exit = False
        if resume_file:
            resume_file = os.fspath(resume_file)
            log.info("Restoring previous solver status from %s", resume_file)
            self.restore(resume_file)
        start_iter = self.iter_
        self.step(p.max_iter - self.iter_)
        if p.snapshot_after_train and (not p.snapshot or self.iter_ % p.snapshot != 0):
            self.snapshot()
        if self._requested_early_exit:
            log.info("Optimization stopped early.")
            return
        if p.display and self.iter_ % p.display == 0:
            _, loss = self.net.Forward()
            self._update_smoothed_loss(self._f(loss), start_iter, p.average_loss)
            log.info("Iteration %d, loss = %s", self.iter_, num(self.smoothed_loss_))
        if p.test_interval and self.iter_ % p.test_interval == 0:
            self.test_all()
        log.info("Optimization Done.")

    Solve = solve

    # -------------------------------------------------------------- testing
    def test_all(self) -> None:
        for test_net_id in range(len(self.test_nets)):
            if self._requested_early_exit:
                break
            self.test(test_net_id)

    TestAll = test_all

    def test(self, test_net_id: int = 0) -> None:
        """Solver::Test: ``test_iter`` forward passes of a test net sharing the train
        net's weights; logs the mean of every output element."""
        p, f = self._param, self._f
        log.info("Iteration %d, Testing net (#%d)", self.iter_, test_net_id)
        test_net = self.test_nets[test_net_id]
        test_net.ShareTrainedLayersWith(self.net)
        test_iter = p.test_iter[test_net_id]
        scores, score_ids = None, []
        loss = f(0)
        for i in range(test_iter):
            request = self.get_requested_action()
            while request != SolverAction.NONE:
                if request == SolverAction.SNAPSHOT:
                    self.snapshot()
                elif request == SolverAction.STOP:
                    self._requested_early_exit = True
                request = self.get_requested_action()
            if self._requested_early_exit:
                break
            outputs, iter_loss = test_net.Forward()
            if p.test_compute_loss:
                loss = f(loss + f(iter_loss))
            values = [np.asarray(b.get_data(gpu=False), dtype=self._dtype).reshape(-1) for b in outputs]
            flat = np.concatenate(values) if values else np.zeros(0, self._dtype)
            if i == 0:
                scores = flat.copy()
                score_ids = [j for j, v in enumerate(values) for _ in range(v.size)]
            else:
                scores += flat
        if self._requested_early_exit:
            log.info("Test interrupted.")
            return
        if p.test_compute_loss:
            with np.errstate(divide="ignore", invalid="ignore"):
                loss = f(loss / f(test_iter))
            log.info("Test loss: %s", num(loss))
        if scores is None:
            return
        names, weights = test_net.blob_names, test_net.blob_loss_weights
        out_ids = test_net.output_blob_indices
        with np.errstate(divide="ignore", invalid="ignore"):
            means = scores / f(test_iter)
        for i, mean_score in enumerate(means):
            name = names[out_ids[score_ids[i]]]
            loss_weight = f(weights[name])
            msg = "    Test net output #%d: %s = %s" % (i, name, num(mean_score))
            if loss_weight:
                msg += " (* %s = %s loss)" % (num(loss_weight), num(f(loss_weight * mean_score)))
            log.info("%s", msg)

    Test = test

    # -------------------------------------------------------------- snapshots
    def _check_snapshot_write_permissions(self):
        p = self._param
        if not p.snapshot:
            return
        if not p.HasField("snapshot_prefix"):
            raise check_failed("param_.has_snapshot_prefix()", message="In solver params, snapshot "
                               "is specified but snapshot_prefix is not")
        probe = self.snapshot_filename(".tempfile")
        try:
            with open(probe, "w"):
                pass
            os.remove(probe)
        except OSError:
            raise SolverError("Cannot write to snapshot prefix '%s'.  Make sure that the directory "
                              "exists and is writeable." % p.snapshot_prefix) from None

    def snapshot_filename(self, extension: str) -> str:
        """Solver::SnapshotFilename: ``<snapshot_prefix>_iter_<iter><extension>``."""
        return "%s_iter_%d%s" % (self._param.snapshot_prefix, self.iter_, extension)

    def snapshot(self) -> None:
        """Solver::Snapshot: the weights (binary proto or HDF5), then the solver state."""
        fmt = self._param.snapshot_format
        if fmt == caffe_pb2.SolverParameter.BINARYPROTO:
            model_filename = self._snapshot_to_binary_proto()
        elif fmt == caffe_pb2.SolverParameter.HDF5:
            model_filename = self._snapshot_to_hdf5()
        else:
            raise SolverError("Unsupported snapshot format.")
        self.snapshot_solver_state(model_filename)

    Snapshot = snapshot

    def _snapshot_to_binary_proto(self):
        from engine.core.io import write_binary
        model_filename = self.snapshot_filename(".caffemodel")
        log.info("Snapshotting to binary proto file %s", model_filename)
        write_binary(model_filename, self.net.ToProto(self._param.snapshot_diff))
        return model_filename

    def _snapshot_to_hdf5(self):
        model_filename = self.snapshot_filename(".caffemodel.h5")
        log.info("Snapshotting to HDF5 file %s", model_filename)
        self.net.ToHDF5(model_filename, self._param.snapshot_diff)
        return model_filename

    def restore(self, state_file: str) -> None:
        """Solver::Restore: a ``.h5`` solver state or a binary proto one."""
        state_file = os.fspath(state_file)
        if state_file.endswith(".h5"):
            self.restore_solver_state_from_hdf5(state_file)
        else:
            self.restore_solver_state_from_binary_proto(state_file)

    Restore = restore

    # Hooks of the concrete solvers (SGDSolver and its family).
    def apply_update(self) -> None:
        raise NotImplementedError

    def snapshot_solver_state(self, model_filename: str) -> None:
        raise NotImplementedError

    def restore_solver_state_from_binary_proto(self, state_file: str) -> None:
        raise NotImplementedError

    def restore_solver_state_from_hdf5(self, state_file: str) -> None:
        raise NotImplementedError

    # -------------------------------------------------------------- pycaffe API
    @property
    def param(self) -> caffe_pb2.SolverParameter:
        """The live SolverParameter (pycaffe: ``solver.param``; changes take effect)."""
        return self._param

    @property
    def test_nets(self) -> NetVec:
        """pycaffe's ``solver.test_nets``: a ``caffe._caffe.NetVec`` over the solver's test nets."""
        return NetVec._view(self._test_net_list)

    @test_nets.setter
    def test_nets(self, nets: Any) -> None:
        self._test_net_list = list(nets)

    @property
    def iter(self) -> int:
        return self.iter_

    @property
    def max_iter(self) -> int:
        return self._param.max_iter

    @property
    def smoothed_loss(self) -> float:
        return self.smoothed_loss_

    def share_weights(self, net: Net) -> None:
        """pycaffe's ``share_weights(net)``: ``net`` uses the train net's weights."""
        net.ShareTrainedLayersWith(self.net)

    def __repr__(self):
        return "<%s '%s' iter %d>" % (type(self).__name__, self.net.name if self.net else "?", self.iter_)

"""Training in the page: what each solver iteration did, kept per loaded net.

:class:`TrainingHistory` holds, per iteration, the loss (and Caffe's smoothed
loss over ``average_loss`` iterations), the learning rate the update used, the
train net's outputs (loss, accuracy ... whatever the net outputs), the
update-to-weight ratio |Δw|₂/|w|₂ of every learnable param (from the
Recorder's update records), the test net's scores every ``test_interval``
iterations, and the solver's log lines (Caffe's ``Iteration N ..., loss = X``,
``Iteration N, lr = R``, ``Train net output #k`` ...).

:func:`solver_iteration` runs one iteration on a loaded net (the caller holds
its session's lock) and records all of that; :func:`maybe_test` runs the test
net when ``test_interval`` says so.  Running many iterations is the stepping
controls' (:func:`inspector.state.runner.run_solver`).
"""
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np


@dataclass
class TrainPoint:
    iteration: int                 # the iteration the update completed (solver.iter after it, minus 1)
    loss: float
    smoothed: float
    lr: Optional[float]
    outputs: Dict[str, float]
    wall_ms: float


@dataclass
class TestPoint:
    iteration: int
    outputs: Dict[str, float]
    loss: Optional[float] = None


@dataclass
class SolverSettings:
    """What the page's solver run takes from the solver file (the inspector's
    solver itself has its test nets turned off)."""
    test_iter: int = 0
    test_interval: int = 0
    average_loss: int = 1
    max_iter: int = 0
    display: int = 0

    @classmethod
    def from_file(cls, path):
        if not path:
            return cls()
        import engine
        p = engine.read_solver_params(path)      # it built the page's solver already: readable
        return cls(test_iter=int(p.test_iter[0]) if len(p.test_iter) else 0,
                   test_interval=int(p.test_interval), average_loss=max(int(p.average_loss), 1),
                   max_iter=int(p.max_iter), display=int(p.display))


@dataclass
class TrainingHistory:
    settings: SolverSettings = field(default_factory=SolverSettings)
    train: List[TrainPoint] = field(default_factory=list)
    test: List[TestPoint] = field(default_factory=list)
    ratios: Dict[str, List[Tuple[int, float]]] = field(default_factory=dict)   # "layer/param" -> [(it, ratio)]
    log: List[Tuple[str, str]] = field(default_factory=list)                   # (level, message)
    version: int = 0
    max_log: int = 5000
    _window: List[float] = field(default_factory=list, repr=False)

    def add_train(self, iteration, loss, lr, outputs, wall_ms):
        w = self._window
        w.append(float(loss))
        if len(w) > self.settings.average_loss:
            del w[0]
        smoothed = sum(w) / len(w)
        self.train.append(TrainPoint(int(iteration), float(loss), float(smoothed),
                                     None if lr is None else float(lr), dict(outputs), float(wall_ms)))
        self.version += 1

    def add_update(self, step):
        """Update ratios of an "update" StepRecord."""
        if step is None:
            return
        it = step.iteration if step.iteration is not None else (self.train[-1].iteration if self.train else 0)
        for lr in step.layers:
            for b in lr.blobs:
                if b.ratio is None:
                    continue
                self.ratios.setdefault("%s/%s" % (lr.layer, b.index), []).append((int(it), float(b.ratio)))
        self.version += 1

    def add_test(self, iteration, outputs, loss=None):
        self.test.append(TestPoint(int(iteration), dict(outputs), loss))
        self.version += 1

    def add_log(self, lines):
        self.log.extend(lines)
        if len(self.log) > self.max_log:
            del self.log[:len(self.log) - self.max_log]

    def series(self, name):
        """(iterations, values) of "loss", "smoothed", "lr" or a train output name."""
        xs, ys = [], []
        for p in self.train:
            if name == "loss":
                v = p.loss
            elif name == "smoothed":
                v = p.smoothed
            elif name == "lr":
                v = p.lr
            else:
                v = p.outputs.get(name)
            if v is not None:
                xs.append(p.iteration)
                ys.append(v)
        return xs, ys

    def test_series(self, name):
        xs, ys = [], []
        for p in self.test:
            if name in p.outputs:
                xs.append(p.iteration)
                ys.append(p.outputs[name])
        return xs, ys

    def output_names(self):
        return _output_names(self.train)

    def test_names(self):
        return _output_names(self.test)


def _output_names(points):
    """The output names of ``points``, in the order they first appear."""
    names = []
    for p in points:
        for k in p.outputs:
            if k not in names:
                names.append(k)
    return names


def history(loaded):
    """The loaded net's TrainingHistory (created on first use)."""
    h = getattr(loaded, "training", None)
    if h is None:
        h = TrainingHistory(SolverSettings.from_file(loaded.spec.solver))
        loaded.training = h
    return h


# ------------------------------------------------------------------ log capture
class _ThreadLog(logging.Handler):
    """Collects the engine's log records emitted by one thread."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.thread = threading.get_ident()
        self.lines = []

    def emit(self, record):
        if record.thread != self.thread:
            return
        try:
            self.lines.append((record.levelname, record.getMessage()))
        except (TypeError, ValueError):     # a message whose %-arguments do not fit it
            self.handleError(record)


class capture_log:
    """``with capture_log() as lines:`` the engine's INFO lines of this thread."""

    def __init__(self, logger="engine"):
        self.logger = logging.getLogger(logger)
        self.handler = _ThreadLog()

    def __enter__(self):
        self._level = self.logger.level
        if self.logger.getEffectiveLevel() > logging.INFO:
            self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self.handler)
        return self.handler.lines

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self._level)
        return False


# ------------------------------------------------------------------ one iteration
def _scalar_outputs(net):
    out = {}
    for name in net.outputs:
        a = np.asarray(net.blobs[name].data)
        if a.size == 1:
            out[name] = float(a.reshape(-1)[0])
        elif a.size:
            out[name] = float(a.mean())
    return out


def solver_iteration(loaded, resume=None):
    """One solver iteration on ``loaded`` (its solver must exist; the caller
    holds the session lock and the device mode).  Returns (TrainPoint, the
    update StepRecord or None).  ``resume``: a function run in place of the net's
    ForwardBackward, with the param diffs kept (an iteration a breakpoint stopped,
    going on after the layer that stopped: inspector.state.runner.continue_run)."""
    solver = loaded.solver
    h = history(loaded)
    rec = loaded.recorder
    rec.attach_solver(solver)
    rates = []
    original = solver.__dict__.get("get_learning_rate")
    bound = solver.get_learning_rate

    def get_learning_rate():
        r = bound()
        rates.append(float(r))
        return r

    solver.get_learning_rate = get_learning_rate
    net = solver.net
    if resume is not None:          # the stopped iteration's diffs so far stay; its passes go on
        net.ForwardBackward = resume
        net.ClearParamDiffs = lambda: None
    last_id = rec.steps[-1].id if rec.steps else 0
    t0 = time.perf_counter()
    cap = capture_log()
    try:
        with cap:
            solver.step(1)
    finally:
        if original is None:
            solver.__dict__.pop("get_learning_rate", None)
        else:
            solver.get_learning_rate = original
        net.__dict__.pop("ForwardBackward", None)
        net.__dict__.pop("ClearParamDiffs", None)
        h.add_log(cap.handler.lines)
    wall = (time.perf_counter() - t0) * 1000.0
    losses = getattr(solver, "losses_", None) or []
    loss = float(losses[-1]) if losses else float(getattr(solver, "smoothed_loss_", float("nan")))
    it = int(solver.iter) - 1
    h.add_train(it, loss, rates[-1] if rates else None, _scalar_outputs(solver.net), wall)
    update = None
    for s in rec.steps:
        if s.id > last_id and s.kind == "update":
            update = s
    h.add_update(update)
    return h.train[-1], update


@dataclass
class StoppedTestPass:
    """A test pass the page's run limit (``--run-seconds``) ended before its last iteration: its
    partial means are not Caffe's, so nothing is recorded."""
    done: int
    of: int
    limit: str

    def text(self):
        return "test pass stopped after %d of %d test iterations: time limit reached: %s; not recorded" % (
            self.done, self.of, self.limit)


def maybe_test(session, loaded, force=False):
    """Run the test net when the solver file asks for it at this iteration
    (Solver::Test: test_iter forward passes, the mean of every output).  Under a run limit
    (``session.run_limit``: the page's --run-seconds) a pass that reaches it stops between two
    of its iterations: a :class:`StoppedTestPass`, nothing recorded."""
    h = history(loaded)
    st = h.settings
    it = int(loaded.solver.iter)
    if not force and not (st.test_iter and st.test_interval and it % st.test_interval == 0):
        return None
    net = _test_net(session, loaded)
    net.ShareTrainedLayersWith(loaded.solver.net)
    sums = {}
    n = max(st.test_iter, 1)
    limit = getattr(session, "run_limit", None)
    for k in range(n):
        if k and limit is not None and limit.passed():
            stopped = StoppedTestPass(k, n, "%g s (%s)" % (limit.seconds, limit.flag) if limit.flag
                                  else "%g s" % limit.seconds)
            h.add_log([("WARNING", "Iteration %d, Testing net (#0): %s" % (it, stopped.text()))])
            return stopped
        _outs, _loss = net.Forward()
        for k, v in _scalar_outputs(net).items():
            sums[k] = sums.get(k, 0.0) + v
    outputs = {k: v / n for k, v in sums.items()}
    h.add_test(it, outputs)
    h.add_log([("INFO", "Iteration %d, Testing net (#0)" % it)] +
              [("INFO", "    Test net output #%d: %s = %g" % (k, name, v))
               for k, (name, v) in enumerate(outputs.items())])
    return outputs


def _test_net(session, loaded):
    net = getattr(loaded, "_test_net", None)
    if net is not None:
        return net
    import engine
    from inspector.state import inputs as inp
    from inspector.views.model import build_graph
    spec = loaded.spec
    with engine.memory_budget(getattr(loaded, "max_bytes", None)):     # the TEST net may have its own batch
        net = engine.Net(spec.model, 1, level=spec.level, stages=list(spec.stages) or None)
    g = build_graph(net)
    if g.inputs:
        shapes = {n: tuple(net.blobs[n].shape) for n in g.inputs}
        settings = session.input_settings or {}
        arrays = inp.random_inputs(shapes, inp.label_blobs(g), float(settings.get("value", 1.0)),
                                   int(settings.get("seed", 0)) + 1, settings.get("classes"))
        for name, a in arrays.items():
            net.blobs[name].data[...] = a
    loaded._test_net = net
    return net

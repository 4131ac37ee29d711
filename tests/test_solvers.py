"""Solvers: the six update rules against NumPy references, the learning rate
policies, snapshots and restore, display and test lines, smoothing, callbacks,
requested actions, the CHECK messages, and caffe.cpp's train/test commands."""
import logging
import re

import numpy as np
import pytest

import engine
from engine.core import backend
from engine.core.errors import SolverError
from engine.core.log import num
from engine.core.solvers import (
    AdaDeltaSolver,
    AdaGradSolver,
    AdamSolver,
    NesterovSolver,
    RMSPropSolver,
    SGDSolver,
    SolverAction,
    debug_string,
    get_solver,
    learning_rate,
)
from engine.proto import caffe_pb2
from engine.tools import solver_commands as commands

# Input data (4, 3) -> InnerProduct 2 -> EuclideanLoss against an Input label.
# The bias learns twice as fast and has no weight decay (lr_mult 2, decay_mult 0).
NET = """
name: "tiny"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 2 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "loss" }
"""

# The same with a test phase: an extra zero-weight output and one weighted 2.
NET_TT = """
name: "tiny_tt"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "loss" }
layer { name: "err" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "err"
        loss_weight: 0 include { phase: TEST } }
layer { name: "twice" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "twice"
        loss_weight: 2 include { phase: TEST } }
"""


def write_solver(tmp_path, text, net=NET, name="solver.prototxt"):
    (tmp_path / "net.prototxt").write_text(net)
    path = tmp_path / name
    path.write_text('net: "%s"\nsolver_mode: CPU\n%s\n' % (tmp_path / "net.prototxt", text))
    return str(path)


def make_solver(tmp_path, text, net=NET, **kwargs):
    return get_solver(write_solver(tmp_path, text, net), **kwargs)


def batches(n=5, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((4, 3)), rng.standard_normal((4, 2))) for _ in range(n)]


class Feeder:
    """Sets the Input blobs from ``data`` before every forward pass of ``net``."""

    def __init__(self, net, data, start=0):
        self.net, self.data, self.k = net, data, start
        net.before_forward(self)

    def __call__(self, layer_id):
        if layer_id == 0:
            d, lab = self.data[self.k % len(self.data)]
            self.net.blobs["data"].data[...] = d
            self.net.blobs["label"].data[...] = lab
            self.k += 1


def init_params(net, seed=1):
    rng = np.random.default_rng(seed)
    w, b = net.params["ip"]
    w.data[...] = rng.standard_normal(w.data.shape) * 0.5
    b.data[...] = rng.standard_normal(b.data.shape) * 0.1
    return w.data.astype(np.float64).copy(), b.data.astype(np.float64).copy()


def params_of(net):
    return [np.array(b.data, dtype=np.float64) for b in net.params["ip"]]


# ----------------------------------------------------------------------------- reference
def grads(params, data, label):
    w, b = params
    ip = data @ w.T + b
    dip = (ip - label) / data.shape[0]
    return [dip.T @ data, dip.sum(0)]


def f32(x):
    return float(np.float32(x))


def reference(cfg, params, data, steps, dtype=np.float32):
    """Caffe's update in float64: iter_size accumulation, clipping (of the sums),
    normalization, weight decay, the rule, data -= update."""
    typ = cfg.get("type", "SGD")
    base_lr = f32(cfg["base_lr"])
    m = f32(cfg.get("momentum", 0))
    wd = f32(cfg.get("weight_decay", 0))
    delta = f32(cfg.get("delta", 1e-8))
    iter_size = cfg.get("iter_size", 1)
    clip = f32(cfg.get("clip_gradients", -1))
    lr_mult, decay_mult = [1.0, 2.0], [1.0, 0.0]
    params = [p.copy() for p in params]
    h = [np.zeros_like(p) for p in params]
    h2 = [np.zeros_like(p) for p in params]
    k = 0
    for it in range(steps):
        g = [np.zeros_like(p) for p in params]
        for _ in range(iter_size):
            d, lab = data[k % len(data)]
            k += 1
            d, lab = (a.astype(dtype).astype(np.float64) for a in (d, lab))
            for acc, gi in zip(g, grads(params, d, lab)):
                acc += gi
        policy = cfg.get("lr_policy", "fixed")
        if policy == "fixed":
            rate = base_lr
        elif policy == "step":
            rate = base_lr * f32(cfg["gamma"]) ** (it // cfg["stepsize"])
        elif policy == "poly":
            rate = base_lr * (1 - it / cfg["max_iter"]) ** f32(cfg["power"])
        else:
            raise AssertionError(policy)
        if clip >= 0:
            norm = np.sqrt(sum((gi ** 2).sum() for gi in g))
            if norm > clip:
                g = [gi * (clip / norm) for gi in g]
        for i, p in enumerate(params):
            gi = g[i] / iter_size
            decay = wd * decay_mult[i]
            if decay:
                gi = gi + decay * (np.sign(p) if cfg.get("regularization_type") == "L1" else p)
            lr = rate * lr_mult[i]
            if typ == "SGD":
                h[i] = lr * gi + m * h[i]
                upd = h[i]
            elif typ == "Nesterov":
                old = h[i].copy()
                h[i] = lr * gi + m * h[i]
                upd = (1 + m) * h[i] - m * old
            elif typ == "AdaGrad":
                h[i] = h[i] + gi * gi
                upd = lr * gi / (np.sqrt(h[i]) + delta)
            elif typ == "RMSProp":
                d_ = f32(cfg["rms_decay"])
                h[i] = d_ * h[i] + (1 - d_) * gi * gi
                upd = lr * gi / (np.sqrt(h[i]) + delta)
            elif typ == "AdaDelta":
                h[i] = m * h[i] + (1 - m) * gi * gi
                u = gi * np.sqrt((h2[i] + delta) / (h[i] + delta))
                h2[i] = m * h2[i] + (1 - m) * u * u
                upd = lr * u
            elif typ == "Adam":
                b1, b2, t = m, f32(cfg.get("momentum2", 0.999)), it + 1
                h[i] = b1 * h[i] + (1 - b1) * gi
                h2[i] = b2 * h2[i] + (1 - b2) * gi * gi
                corr = np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                upd = lr * corr * h[i] / (np.sqrt(h2[i]) + delta)
            else:
                raise AssertionError(typ)
            params[i] = p - upd
    return params


def solver_text(cfg):
    lines = []
    for k, v in cfg.items():
        lines.append('%s: "%s"' % (k, v) if isinstance(v, str) else "%s: %r" % (k, v))
    return "\n".join(lines)


RULES = {
    "sgd_momentum_l2": dict(type="SGD", base_lr=0.1, momentum=0.9, weight_decay=0.01,
                            lr_policy="step", gamma=0.5, stepsize=2),
    "sgd_l1": dict(type="SGD", base_lr=0.1, momentum=0.5, weight_decay=0.05,
                   regularization_type="L1"),
    "sgd_clip": dict(type="SGD", base_lr=0.1, momentum=0.9, clip_gradients=0.2),
    "sgd_iter_size": dict(type="SGD", base_lr=0.1, momentum=0.9, weight_decay=0.01, iter_size=2),
    "sgd_iter_size_clip": dict(type="SGD", base_lr=0.1, momentum=0.9, iter_size=2,
                               clip_gradients=0.3),
    "nesterov": dict(type="Nesterov", base_lr=0.05, momentum=0.95, weight_decay=0.01),
    "nesterov_l1_clip": dict(type="Nesterov", base_lr=0.05, momentum=0.95, weight_decay=0.01,
                             regularization_type="L1", clip_gradients=0.5),
    "adagrad": dict(type="AdaGrad", base_lr=0.1, weight_decay=0.01, delta=1e-8),
    "rmsprop": dict(type="RMSProp", base_lr=0.01, rms_decay=0.98, weight_decay=0.0005,
                    delta=1e-8),
    "adadelta": dict(type="AdaDelta", base_lr=1.0, momentum=0.95, delta=1e-6, weight_decay=0.01),
    "adam": dict(type="Adam", base_lr=0.01, momentum=0.9, momentum2=0.999, delta=1e-8),
    "adam_poly_iter_size": dict(type="Adam", base_lr=0.01, momentum=0.9, momentum2=0.999,
                                delta=1e-8, iter_size=2, lr_policy="poly", power=2.0,
                                max_iter=10, weight_decay=0.001),
}
STEPS = 5


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 2e-5), (np.float64, 1e-10)],
                         ids=["float32", "float64"])
@pytest.mark.parametrize("rule", sorted(RULES))
def test_update_rule_matches_reference(tmp_path, rule, dtype, rtol):
    cfg = dict(RULES[rule])
    cfg.setdefault("lr_policy", "fixed")
    cfg.setdefault("max_iter", 100)
    s = make_solver(tmp_path, solver_text(cfg) + "\ndisplay: 0", dtype=dtype)
    assert type(s).type == cfg["type"]
    start = init_params(s.net)
    data = batches()
    Feeder(s.net, data)
    s.step(STEPS)
    assert s.iter == STEPS
    want = reference(cfg, list(start), data, STEPS, dtype)
    for got, ref in zip(params_of(s.net), want):
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * 1e-2)


def test_history_blobs_shaped_like_params(tmp_path):
    s = make_solver(tmp_path, 'type: "Adam" base_lr: 0.01 lr_policy: "fixed"')
    shapes = [b.shape for b in s.net.learnable_params]
    assert [h.shape for h in s.history] == shapes * 2
    s2 = make_solver(tmp_path, 'type: "SGD" base_lr: 0.01 lr_policy: "fixed"')
    assert [h.shape for h in s2.history] == shapes


def test_apply_update_by_hand(tmp_path):
    # pycaffe's test_solver.py: zero weights, unit diffs, apply_update -> -lr.
    s = make_solver(tmp_path, 'base_lr: 0.01 lr_policy: "fixed" display: 0')
    w = s.net.params["ip"][0]
    w.data[...] = 0
    w.diff[...] = 1
    s.net.params["ip"][1].diff[...] = 0
    s.apply_update()
    assert s.iter == 1
    np.testing.assert_allclose(w.data, -0.01 * np.ones(w.data.shape), atol=1e-7)


# ----------------------------------------------------------------------------- policies
def policy(**kw):
    p = caffe_pb2.SolverParameter()
    for k, v in kw.items():
        if isinstance(v, list):
            getattr(p, k).extend(v)
        else:
            setattr(p, k, v)
    return p


@pytest.mark.parametrize("kw,it,expected", [
    (dict(lr_policy="fixed", base_lr=0.01), 1000, 0.01),
    (dict(lr_policy="step", base_lr=0.01, gamma=0.1, stepsize=10), 9, 0.01),
    (dict(lr_policy="step", base_lr=0.01, gamma=0.1, stepsize=10), 10, 0.001),
    (dict(lr_policy="step", base_lr=0.01, gamma=0.1, stepsize=10), 25, 0.0001),
    (dict(lr_policy="exp", base_lr=0.01, gamma=0.9), 3, 0.00729),
    (dict(lr_policy="inv", base_lr=0.01, gamma=1e-4, power=0.75), 100, 0.01 * 1.01 ** -0.75),
    (dict(lr_policy="poly", base_lr=0.01, power=2.0, max_iter=10), 5, 0.0025),
    (dict(lr_policy="poly", base_lr=0.01, power=1.0, max_iter=10), 10, 0.0),
    (dict(lr_policy="sigmoid", base_lr=0.01, gamma=0.5, stepsize=4), 4, 0.005),
    (dict(lr_policy="sigmoid", base_lr=0.01, gamma=0.5, stepsize=4), 6, 0.01 / (1 + np.exp(-1))),
])
def test_policy_values(kw, it, expected):
    rate, _ = learning_rate(policy(**kw), it, 0)
    assert isinstance(rate, np.float32)
    assert rate == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_policy_float_math_matches_caffe_logs():
    # "Iteration 1, lr = 0.00999925" (inv) and "lr = 0.0009801" (poly) in Caffe's logs.
    inv = policy(lr_policy="inv", base_lr=0.01, gamma=0.0001, power=0.75)
    assert [num(learning_rate(inv, i, 0)[0]) for i in range(4)] == \
        ["0.01", "0.00999925", "0.0099985", "0.00999775"]
    poly = policy(lr_policy="poly", base_lr=0.001, power=2, max_iter=100)
    assert [num(learning_rate(poly, i, 0)[0]) for i in range(4)] == \
        ["0.001", "0.0009801", "0.0009604", "0.0009409"]
    # The base (1 + gamma * iter) is a float; pow runs in double; the rate is cast.
    base = np.float32(1) + np.float32(0.0001) * np.float32(7)
    assert learning_rate(inv, 7, 0)[0] == np.float32(float(np.float32(0.01)) * float(base) ** -0.75)


def test_multistep_advances_and_logs(caplog):
    p = policy(lr_policy="multistep", base_lr=0.01, gamma=0.5, stepvalue=[2, 5])
    step, rates = 0, []
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        for it in range(7):
            rate, step = learning_rate(p, it, step)
            rates.append(float(rate))
    assert rates == pytest.approx([0.01, 0.01, 0.005, 0.005, 0.005, 0.0025, 0.0025])
    assert [r.getMessage() for r in caplog.records] == [
        "MultiStep Status: Iteration 2, step = 1", "MultiStep Status: Iteration 5, step = 2"]


def test_policy_errors():
    with pytest.raises(SolverError, match=r"Check failed: this->param_.stepsize\(\) > 0 \(0 vs. 0\)"):
        learning_rate(policy(lr_policy="step", base_lr=0.1, gamma=0.1), 1, 0)
    with pytest.raises(SolverError, match=r"this->param_.gamma\(\) >= 0 \(-1 vs. 0\)"):
        learning_rate(policy(lr_policy="exp", base_lr=0.1, gamma=-1), 1, 0)
    with pytest.raises(SolverError, match="Unknown learning rate policy: cosine"):
        learning_rate(policy(lr_policy="cosine", base_lr=0.1), 1, 0)


# ----------------------------------------------------------------------------- snapshots
ROUNDTRIP = {
    "SGD": 'type: "SGD" base_lr: 0.1 momentum: 0.9 weight_decay: 0.01 lr_policy: "multistep" '
           'gamma: 0.5 stepvalue: 1 stepvalue: 3',
    "Nesterov": 'type: "Nesterov" base_lr: 0.05 momentum: 0.9 lr_policy: "step" gamma: 0.5 '
                'stepsize: 3',
    "AdaGrad": 'type: "AdaGrad" base_lr: 0.1 lr_policy: "fixed"',
    "RMSProp": 'type: "RMSProp" base_lr: 0.01 rms_decay: 0.9 lr_policy: "fixed"',
    "AdaDelta": 'type: "AdaDelta" base_lr: 1 momentum: 0.9 delta: 1e-6 lr_policy: "fixed"',
    "Adam": 'type: "Adam" base_lr: 0.01 momentum: 0.9 lr_policy: "inv" gamma: 0.1 power: 0.5 '
            'iter_size: 2',
}


@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
@pytest.mark.parametrize("typ", sorted(ROUNDTRIP))
def test_snapshot_restore_roundtrip(tmp_path, typ, fmt):
    text = ROUNDTRIP[typ] + " display: 0 max_iter: 100 snapshot_format: %s" % fmt
    data = batches(7)
    per_iter = 2 if "iter_size: 2" in text else 1
    for sub in "abc":
        (tmp_path / sub).mkdir()
    straight = make_solver(tmp_path / "a", text)
    init_params(straight.net)
    Feeder(straight.net, data)
    straight.step(4)

    first = make_solver(tmp_path / "b", text)
    init_params(first.net)
    Feeder(first.net, data)
    first.step(2)
    first.snapshot()
    ext = ".h5" if fmt == "HDF5" else ""
    prefix = str(tmp_path / "b" / "solver")
    assert (tmp_path / "b" / ("solver_iter_2.caffemodel" + ext)).exists()
    state = prefix + "_iter_2.solverstate" + ext
    assert (tmp_path / "b" / ("solver_iter_2.solverstate" + ext)).exists()

    resumed = make_solver(tmp_path / "c", text)
    init_params(resumed.net, seed=99)       # overwritten by the learned net
    Feeder(resumed.net, data, start=2 * per_iter)
    resumed.restore(state)
    assert resumed.iter == 2
    assert resumed.current_step_ == first.current_step_
    for h_got, h_want in zip(resumed.history, first.history):
        np.testing.assert_array_equal(h_got.data, h_want.data)
    resumed.step(2)
    assert resumed.iter == 4
    for got, want in zip(params_of(resumed.net), params_of(straight.net)):
        np.testing.assert_array_equal(got, want)


def test_snapshot_files_and_logs(tmp_path, caplog):
    text = 'type: "Adam" base_lr: 0.01 lr_policy: "fixed" display: 0 max_iter: 3 snapshot: 2 ' \
           'snapshot_prefix: "%s/snap/run"' % tmp_path
    (tmp_path / "snap").mkdir()
    s = make_solver(tmp_path, text)
    init_params(s.net)
    Feeder(s.net, batches())
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        s.solve()
    msgs = [r.getMessage() for r in caplog.records if r.name == "engine.solver"]
    model2, state2 = tmp_path / "snap/run_iter_2.caffemodel", tmp_path / "snap/run_iter_2.solverstate"
    model3 = tmp_path / "snap/run_iter_3.caffemodel"
    assert "Snapshotting to binary proto file %s" % model2 in msgs
    assert "Snapshotting solver state to binary proto file %s" % state2 in msgs
    # snapshot_after_train: iter 3 is not a multiple of 2, so a last snapshot
    assert "Snapshotting to binary proto file %s" % model3 in msgs
    assert msgs[:2] == ["Solving tiny", "Learning Rate Policy: fixed"]
    assert msgs[-1] == "Optimization Done."
    st = engine.core.io.read_binary(str(state2), caffe_pb2.SolverState)
    assert st.iter == 2 and st.learned_net == str(model2) and st.current_step == 0
    assert len(st.history) == 4 and list(st.history[0].shape.dim) == [2, 3]
    assert len(st.history[3].data) == 2
    net = engine.core.io.read_caffemodel(str(model3))
    np.testing.assert_array_equal(np.asarray(net.layer[1].blobs[0].data).reshape(2, 3),
                                  s.net.params["ip"][0].data)


def test_hdf5_snapshot_layout(tmp_path):
    import h5py
    text = 'type: "AdaDelta" base_lr: 1 momentum: 0.9 lr_policy: "fixed" display: 0 ' \
           'snapshot_format: HDF5 snapshot_diff: true'
    s = make_solver(tmp_path, text)
    init_params(s.net)
    Feeder(s.net, batches())
    s.step(3)
    s.snapshot()
    model = tmp_path / "solver_iter_3.caffemodel.h5"
    with h5py.File(tmp_path / "solver_iter_3.solverstate.h5", "r") as f:
        assert int(f["iter"][0]) == 3 and f["iter"].shape == (1,)
        assert int(f["current_step"][0]) == 0
        assert f["learned_net"][()].rstrip(b"\0").decode() == str(model)
        assert sorted(f["history"]) == ["0", "1", "2", "3"]
        np.testing.assert_array_equal(f["history/2"][()], s.history[2].data)
    with h5py.File(model, "r") as f:
        np.testing.assert_array_equal(f["data/ip/0"][()], s.net.params["ip"][0].data)
        assert "diff" in f


def test_restore_wrong_history_length(tmp_path):
    (tmp_path / "a").mkdir()
    sgd = make_solver(tmp_path / "a", 'type: "SGD" base_lr: 0.1 lr_policy: "fixed" display: 0')
    sgd.snapshot()
    (tmp_path / "b").mkdir()
    adam = make_solver(tmp_path / "b", 'type: "Adam" base_lr: 0.1 lr_policy: "fixed" display: 0')
    with pytest.raises(SolverError, match=r"\(2 vs. 4\) Incorrect length of history blobs."):
        adam.restore(str(tmp_path / "a" / "solver_iter_0.solverstate"))


def test_solve_resume_file(tmp_path, caplog):
    text = 'type: "SGD" base_lr: 0.1 momentum: 0.9 lr_policy: "fixed" display: 0 max_iter: 4 ' \
           'snapshot: 2 snapshot_after_train: false'
    s = make_solver(tmp_path, text)
    init_params(s.net)
    Feeder(s.net, batches())
    s.solve()
    want = params_of(s.net)
    s2 = make_solver(tmp_path, text)
    Feeder(s2.net, batches(), start=2)
    state = str(tmp_path / "solver_iter_2.solverstate")
    with caplog.at_level(logging.INFO):
        s2.solve(state)
    assert "Restoring previous solver status from %s" % state in caplog.messages
    assert "SGDSolver: restoring history" in caplog.messages
    for got, w in zip(params_of(s2.net), want):
        np.testing.assert_array_equal(got, w)


# ----------------------------------------------------------------------------- display
def loss_of(params, data, label):
    w, b = params
    d = (data @ w.T + b) - label
    return (d * d).sum() / data.shape[0] / 2


def test_display_lines(tmp_path, caplog):
    net = NET.replace('top: "loss" }', 'top: "loss" loss_weight: 2 }') + \
        'layer { name: "l0" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "l0" ' \
        'loss_weight: 0 }\n'
    s = make_solver(tmp_path, 'base_lr: 0.1 lr_policy: "fixed" display: 2', net=net)
    start = init_params(s.net)
    data = batches()
    Feeder(s.net, data)
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        s.step(3)
    msgs = caplog.messages
    raw = np.float32(loss_of(start, *data[0]))
    assert re.fullmatch(r"Iteration 0 \(\S+ iter/s, \S+s/2 iters\), loss = (\S+)", msgs[0])
    assert float(msgs[0].rsplit(" ", 1)[1]) == pytest.approx(2 * raw, rel=1e-5)
    assert re.fullmatch(r"    Train net output #0: l0 = \S+", msgs[1])
    m = re.fullmatch(r"    Train net output #1: loss = (\S+) \(\* 2 = (\S+) loss\)", msgs[2])
    assert m and float(m.group(1)) == pytest.approx(raw, rel=1e-5)
    assert float(m.group(2)) == pytest.approx(2 * float(m.group(1)), rel=1e-5)
    assert msgs[3] == "Iteration 0, lr = 0.1"
    assert msgs[4].startswith("Iteration 2 (")
    assert msgs[-1] == "Iteration 2, lr = 0.1"
    assert len(msgs) == 8


def test_display_lines_match_caffe_format(tmp_path, caplog):
    # The display line's shape as the golden records show it.
    s = make_solver(tmp_path, 'base_lr: 0.01 lr_policy: "inv" gamma: 0.0001 power: 0.75 display: 1')
    init_params(s.net)
    Feeder(s.net, batches())
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        s.step(2)
    lr_lines = [m for m in caplog.messages if ", lr = " in m]
    assert lr_lines == ["Iteration 0, lr = 0.01", "Iteration 1, lr = 0.00999925"]


def test_average_loss_smoothing(tmp_path, caplog):
    s = make_solver(tmp_path, 'base_lr: 0.05 lr_policy: "fixed" display: 1 average_loss: 3')
    init_params(s.net)
    Feeder(s.net, batches(6))
    losses = []
    s.add_callback(lambda: None, lambda: losses.append(float(s.net.blobs["loss"].data)))
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        s.step(6)
    shown = [float(m.rsplit(" ", 1)[1]) for m in caplog.messages if "iters), loss = " in m]
    want = [np.mean(losses[max(0, i - 2):i + 1]) for i in range(6)]
    assert shown == pytest.approx(want, rel=1e-5)
    assert float(s.smoothed_loss) == pytest.approx(want[-1], rel=1e-5)


def test_debug_info_only_on_display_iterations(tmp_path, caplog):
    s = make_solver(tmp_path, 'base_lr: 0.05 lr_policy: "fixed" display: 2 debug_info: true')
    init_params(s.net)
    Feeder(s.net, batches())
    with caplog.at_level(logging.INFO):
        s.step(3)
    all_params = [m for m in caplog.messages if m.startswith("    [Backward] All net params")]
    assert len(all_params) == 2   # iterations 0 and 2


# ----------------------------------------------------------------------------- test nets
def test_test_nets_and_output_lines(tmp_path, caplog):
    text = 'base_lr: 0.1 lr_policy: "fixed" display: 0 test_iter: 2 test_interval: 2 ' \
           'test_compute_loss: true'
    s = make_solver(tmp_path, text, net=NET_TT)
    assert len(s.test_nets) == 1 and s.test_nets[0].phase == engine.TEST
    assert s.net.outputs == ["loss"]
    start = init_params(s.net)
    Feeder(s.net, batches())
    test_data = batches(2, seed=5)
    Feeder(s.test_nets[0], test_data)
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        s.step(1)
    msgs = caplog.messages
    assert msgs[0] == "Iteration 0, Testing net (#0)"
    per = [np.float32(loss_of(start, *b)) for b in test_data]
    mean = (per[0] + per[1]) / np.float32(2)
    assert msgs[1].startswith("Test loss: ")
    assert float(msgs[1].split(": ")[1]) == pytest.approx(3 * mean, rel=1e-5)   # 1 + 0 + 2
    m0 = re.fullmatch(r"    Test net output #0: err = (\S+)", msgs[2])
    assert m0 and float(m0.group(1)) == pytest.approx(mean, rel=1e-5)
    m1 = re.fullmatch(r"    Test net output #1: loss = (\S+) \(\* 1 = (\S+) loss\)", msgs[3])
    assert m1 and m1.group(1) == m1.group(2) == m0.group(1)
    m2 = re.fullmatch(r"    Test net output #2: twice = (\S+) \(\* 2 = (\S+) loss\)", msgs[4])
    assert m2 and float(m2.group(2)) == pytest.approx(2 * mean, rel=1e-5)
    # The test net shares the train net's weights.
    assert s.test_nets[0].params["ip"][0].data is not None
    s.net.params["ip"][0].data[...] = 7
    assert (s.test_nets[0].params["ip"][0].data == 7).all()


def test_test_initialization_and_interval(tmp_path, caplog):
    text = 'base_lr: 0.1 lr_policy: "fixed" display: 0 test_iter: 1 test_interval: 2 ' \
           'test_initialization: false max_iter: 4'
    s = make_solver(tmp_path, text, net=NET_TT)
    init_params(s.net)
    Feeder(s.net, batches())
    Feeder(s.test_nets[0], batches(1, seed=3))
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        s.solve()
    tests = [m for m in caplog.messages if "Testing net" in m]
    assert tests == ["Iteration 2, Testing net (#0)", "Iteration 4, Testing net (#0)"]


def test_share_weights(tmp_path):
    s = make_solver(tmp_path, 'base_lr: 0.1 lr_policy: "fixed"')
    other = engine.Net(str(tmp_path / "net.prototxt"), engine.TEST)
    s.share_weights(other)
    s.net.params["ip"][0].data[...] = 3
    assert (other.params["ip"][0].data == 3).all()


# ----------------------------------------------------------------------------- callbacks
def test_add_callback_ordering(tmp_path):
    s = make_solver(tmp_path, 'base_lr: 0.1 lr_policy: "fixed" display: 0')
    init_params(s.net)
    Feeder(s.net, batches())
    events = []
    s.net.before_forward(lambda i: events.append(("forward", s.iter)) if i == 0 else None)
    w = s.net.params["ip"][0]

    def on_start():
        events.append(("start", s.iter))
        assert not w.diff.any()        # diffs were cleared before on_start

    def on_grads():
        events.append(("grads", s.iter))
        assert w.diff.any()

    s.add_callback(on_start, on_grads)

    class Obj:
        def on_start(self):
            events.append(("obj_start", s.iter))

        def on_gradients_ready(self):
            events.append(("obj_grads", s.iter))

    s.add_callback(Obj())
    s.step(2)
    assert events == [("start", 0), ("obj_start", 0), ("forward", 0), ("grads", 0),
                      ("obj_grads", 0), ("start", 1), ("obj_start", 1), ("forward", 1),
                      ("grads", 1), ("obj_grads", 1)]


def test_callback_can_edit_gradients(tmp_path):
    s = make_solver(tmp_path, 'base_lr: 0.1 lr_policy: "fixed" display: 0')
    before = init_params(s.net)
    Feeder(s.net, batches())

    def zero():
        for b in s.net.params["ip"]:
            b.diff[...] = 0
    s.add_callback(lambda: None, zero)
    s.step(2)
    for got, want in zip(params_of(s.net), before):
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- actions
def test_requested_stop_and_snapshot(tmp_path, caplog):
    s = make_solver(tmp_path, 'base_lr: 0.1 lr_policy: "fixed" display: 0 max_iter: 10')
    init_params(s.net)
    Feeder(s.net, batches())
    calls = []

    def action():
        calls.append(s.iter)
        return {2: SolverAction.SNAPSHOT, 3: SolverAction.STOP}.get(s.iter, SolverAction.NONE)
    s.set_action_function(action)
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        s.solve()
    assert s.iter == 3 and s.requested_early_exit
    assert (tmp_path / "solver_iter_2.caffemodel").exists()
    assert (tmp_path / "solver_iter_3.caffemodel").exists()   # snapshot_after_train
    assert caplog.messages[-1] == "Optimization stopped early."
    s.set_action_function(None)
    s.request_stop()
    s.step(5)                     # a queued request is seen after the next iteration
    assert s.iter == 4


def test_signal_handler_effects():
    import signal

    from engine.core.solvers import SignalHandler
    h = SignalHandler("snapshot", "stop")
    h._handle(signal.SIGINT, None)
    assert h.check_for_signals() == SolverAction.SNAPSHOT
    assert h.check_for_signals() == SolverAction.NONE
    with pytest.raises(SolverError, match='Invalid signal effect "pause" was specified'):
        SignalHandler("pause")
    with h:
        pass


# ----------------------------------------------------------------------------- Init
def test_get_solver_and_classes(tmp_path):
    path = write_solver(tmp_path, 'type: "Nesterov" base_lr: 0.1 lr_policy: "fixed"')
    assert isinstance(get_solver(path), NesterovSolver)
    assert type(SGDSolver(path)) is SGDSolver                  # the class named, not the type
    assert engine.get_solver is get_solver and engine.AdamSolver is AdamSolver
    for cls in (AdaGradSolver, RMSPropSolver, AdaDeltaSolver, AdamSolver):
        assert cls(path).net.name == "tiny"
    p = write_solver(tmp_path, 'solver_type: ADAM base_lr: 0.1 lr_policy: "fixed"', name="old.prototxt")
    assert isinstance(get_solver(p), AdamSolver)


def test_solver_from_parameter_message(tmp_path):
    (tmp_path / "net.prototxt").write_text(NET)
    p = caffe_pb2.SolverParameter()
    p.net = str(tmp_path / "net.prototxt")
    p.base_lr, p.lr_policy, p.type = 0.1, "fixed", "RMSProp"
    s = get_solver(p)
    assert isinstance(s, RMSPropSolver) and s.param.rms_decay == pytest.approx(0.99)
    s.param.base_lr = 0.5                     # the live param, as pycaffe's
    assert s.get_learning_rate() == np.float32(0.5)


def test_train_state_and_net_param(tmp_path):
    net = NET + 'layer { name: "extra" type: "EuclideanLoss" bottom: "ip" bottom: "label" ' \
                'top: "extra" include { stage: "deep" } }\n'
    text = 'base_lr: 0.1 lr_policy: "fixed" train_state { stage: "deep" }'
    s = make_solver(tmp_path, text, net=net)
    assert "extra" in s.net.layer_dict and s.net.phase == engine.TRAIN
    from google.protobuf import text_format
    p = caffe_pb2.SolverParameter()
    text_format.Merge(net, p.net_param)
    p.base_lr, p.lr_policy = 0.1, "fixed"
    p.test_iter.append(1)
    p.test_interval = 1
    s2 = get_solver(p)
    assert "extra" not in s2.net.layer_dict and len(s2.test_nets) == 1


def test_init_logs(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        make_solver(tmp_path, 'base_lr: 1 lr_policy: "fixed" delta: 1e-06 test_iter: 1 test_interval: 5')
    msgs = caplog.messages
    assert msgs[0].startswith("Initializing solver from parameters: \ntest_iter: 1\n"
                              "test_interval: 5\nbase_lr: 1\n")
    assert msgs[0].endswith("\ndelta: 1e-06")   # no trailing newline (glog drops it)
    assert msgs[1] == "Creating training net from net file: %s" % (tmp_path / "net.prototxt")
    assert msgs[2] == "Creating test net (#0) specified by net file: %s" % (tmp_path / "net.prototxt")
    assert msgs[3] == "Solver scaffolding done."


def test_debug_string_floats():
    p = caffe_pb2.SolverParameter()
    p.base_lr, p.gamma, p.momentum, p.delta, p.power = 1.0, 0.0001, 0.9, 1e-8, 100000.0
    p.type, p.debug_info = 'a"b', True
    p.train_state.stage.append("x")
    assert debug_string(p) == ('base_lr: 1\ngamma: 0.0001\npower: 100000\nmomentum: 0.9\n'
                               'debug_info: true\ntrain_state {\n  stage: "x"\n}\ndelta: 1e-08\n'
                               'type: "a\\"b"\n')


@pytest.mark.parametrize("text,message", [
    ('base_lr: 0.1', None),
    ('base_lr: 0.1 average_loss: 0', r"Check failed: param_.average_loss\(\) >= 1 \(0 vs. 1\) "
                                      "average_loss should be non-negative."),
    ('base_lr: 0.1 test_net: "x.prototxt"', r"Check failed: param_.test_iter_size\(\) >= "
                                             r"num_test_nets \(0 vs. 1\) test_iter must be"),
    ('base_lr: 0.1 test_iter: 1', r"Check failed: param_.test_interval\(\) > 0 \(0 vs. 0\) "),
    ('base_lr: 0.1 test_iter: 1 test_interval: 1 test_state { } test_state { }',
     r"\(2 vs. 1\) test_state must be unspecified or specified once per test net."),
    ('type: "AdaGrad" momentum: 0.9', r"Check failed: 0 == this->param_.momentum\(\) \(0 vs. 0.9\) "
                                      "Momentum cannot be used with AdaGrad."),
    ('type: "RMSProp" momentum: 0.5', "Momentum cannot be used with RMSProp."),
    ('type: "RMSProp" rms_decay: 1', r"this->param_.rms_decay\(\) < 1 \(1 vs. 1\) rms_decay should "
                                     "lie between 0 and 1."),
    ('type: "Foo"', r"Unknown solver type: Foo \(known types: AdaDelta, AdaGrad, Adam, Nesterov, "
                    r"RMSProp, SGD\)"),
    ('snapshot: 1 snapshot_prefix: "/nonexistent/dir/x"', "Cannot write to snapshot prefix "
                                                          "'/nonexistent/dir/x'.  Make sure"),
])
def test_init_checks(tmp_path, text, message):
    if message is None:   # no train net at all
        path = tmp_path / "s.prototxt"
        path.write_text(text)
        with pytest.raises(SolverError, match=r"Check failed: num_train_nets >= 1 \(0 vs. 1\) "
                           "SolverParameter must specify a train net using one of these fields: "
                           "net, net_param, train_net, train_net_param"):
            get_solver(str(path))
        return
    with pytest.raises(SolverError, match=message):
        make_solver(tmp_path, text)


def test_two_train_nets_rejected(tmp_path):
    path = write_solver(tmp_path, 'train_net: "%s"' % (tmp_path / "net.prototxt"))
    with pytest.raises(SolverError, match=r"num_train_nets <= 1 \(2 vs. 1\) SolverParameter must "
                                          "not contain more than one"):
        get_solver(path)


def test_unknown_regularization(tmp_path):
    s = make_solver(tmp_path, 'base_lr: 0.1 lr_policy: "fixed" weight_decay: 0.1 '
                              'regularization_type: "L3"')
    Feeder(s.net, batches())
    with pytest.raises(SolverError, match="Unknown regularization type: L3"):
        s.step(1)


def test_weights_field_finetunes_train_and_test_nets(tmp_path, caplog):
    (tmp_path / "a").mkdir()
    src = make_solver(tmp_path / "a", 'base_lr: 0.1 lr_policy: "fixed"', net=NET_TT)
    init_params(src.net)
    src.snapshot()
    model = str(tmp_path / "a" / "solver_iter_0.caffemodel")
    text = 'base_lr: 0.1 lr_policy: "fixed" test_iter: 1 test_interval: 1 weights: " %s "' % model
    with caplog.at_level(logging.INFO, logger="engine.solver"):
        s = make_solver(tmp_path, text, net=NET_TT)
    assert caplog.messages.count("Finetuning from %s" % model) == 2
    np.testing.assert_array_equal(s.net.params["ip"][0].data, src.net.params["ip"][0].data)
    np.testing.assert_array_equal(s.test_nets[0].params["ip"][0].data, src.net.params["ip"][0].data)


# ----------------------------------------------------------------------------- commands
DUMMY_NET = """
name: "dummy"
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                           data_filler { type: "gaussian" std: 1 }
                           data_filler { type: "constant" value: 0.5 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "loss" }
layer { name: "err" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "err" loss_weight: 0
        include { phase: TEST } }
"""


def test_command_train_and_test(tmp_path, caplog):
    (tmp_path / "net.prototxt").write_text(DUMMY_NET)
    solver = tmp_path / "solver.prototxt"
    solver.write_text('net: "%s" base_lr: 0.01 lr_policy: "fixed" max_iter: 2 display: 1 '
                      'test_iter: 1 test_interval: 2 solver_mode: CPU random_seed: 3'
                      % (tmp_path / "net.prototxt"))
    with caplog.at_level(logging.INFO):
        assert commands.train(str(solver)) == 0
    msgs = [r.getMessage() for r in caplog.records if r.name == "engine.caffe"]
    assert msgs == ["Use CPU.", "Starting Optimization", "Optimization Done."]
    model = tmp_path / "solver_iter_2.caffemodel"
    assert model.exists()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert commands.train(str(solver), snapshot=str(tmp_path / "solver_iter_2.solverstate")) == 0
    assert "Resuming from %s" % (tmp_path / "solver_iter_2.solverstate") in caplog.messages
    with pytest.raises(SolverError, match="Give a snapshot to resume training or weights to "
                                          "finetune but not both."):
        commands.train(str(solver), weights=str(model), snapshot="x")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        commands.train(str(solver), weights=str(model))
    assert caplog.messages.count("Finetuning from %s" % model) == 2

    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert commands.test(str(tmp_path / "net.prototxt"), str(model), iterations=3) == 0
    msgs = [r.getMessage() for r in caplog.records if r.name == "engine.caffe"]
    assert msgs[0] == "Use CPU." and msgs[1] == "Running for 3 iterations."
    batch = [m for m in msgs if m.startswith("Batch ")]
    assert [b.split(" = ")[0] for b in batch] == ["Batch 0, err", "Batch 0, loss", "Batch 1, err",
                                                 "Batch 1, loss", "Batch 2, err", "Batch 2, loss"]
    losses = np.array([np.float32(b.split(" = ")[1]) for b in batch[1::2]])
    assert msgs[-3].startswith("Loss: ")
    assert float(msgs[-3][6:]) == pytest.approx(losses.mean(), rel=1e-5)
    assert re.fullmatch(r"err = \S+", msgs[-2])
    assert re.fullmatch(r"loss = (\S+) \(\* 1 = \1 loss\)", msgs[-1])
    with pytest.raises(SolverError, match="Need model weights to score."):
        commands.test(str(tmp_path / "net.prototxt"), "", iterations=1)


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("rule", ["sgd_momentum_l2", "nesterov_l1_clip", "adagrad", "rmsprop",
                                  "adadelta", "adam_poly_iter_size"])
def test_gpu_matches_cpu(tmp_path, rule):
    cfg = dict(RULES[rule])
    cfg.setdefault("lr_policy", "fixed")
    cfg.setdefault("max_iter", 100)
    text = solver_text(cfg) + "\ndisplay: 1"
    results = []
    for mode in ("CPU", "GPU"):
        d = tmp_path / mode
        d.mkdir()
        with backend.using_mode(mode):
            s = make_solver(d, text)
            init_params(s.net)
            Feeder(s.net, batches())
            s.step(STEPS)
            results.append(params_of(s.net) + [np.array(h.data) for h in s.history])
    for c, g in zip(*results):
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-7)

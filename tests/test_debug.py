"""engine.instruments.debug: statistics against NumPy, per-layer records, the NaN sentinel, update records."""
import json
import logging
import math
import os

import numpy as np
import pytest

import engine
from engine.core.blob import caffe_asum
from engine.instruments.debug import (
    HIST_BINS,
    BlobStats,
    NonFiniteError,
    Recorder,
    StepRecord,
    UpdateHook,
    _device_summary,
    _host_summary,
    all_params_line,
    array_stats,
    caffe_debug_lines,
    update_ratio,
)
from tests.nets import OVERFLOW, lenet_with_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")


def _net_from_text(tmp_path, text, phase=engine.TRAIN, name="net.prototxt"):
    p = tmp_path / name
    p.write_text(text)
    return engine.Net(str(p), phase)


_lenet = lenet_with_inputs


# ---------------------------------------------------------------------- statistics
def _check_against_numpy(x, st, bins=HIST_BINS):
    x64 = np.asarray(x, np.float64).ravel()
    fin = x64[np.isfinite(x64)]
    assert st.count == x64.size
    assert st.shape == tuple(np.shape(x))
    assert st.nan == int(np.isnan(x64).sum())
    assert st.inf == int(np.isinf(x64).sum())
    assert st.frac_zero == pytest.approx(float((x64 == 0).mean()))
    with np.errstate(all="ignore"):
        if st.nan:
            assert math.isnan(st.min) and math.isnan(st.max) and math.isnan(st.mean)
        else:
            assert st.min == pytest.approx(float(x64.min()))
            assert st.max == pytest.approx(float(x64.max()))
        if st.finite:
            assert st.asum_mean == pytest.approx(float(np.abs(x64).mean()), rel=1e-5)
            assert st.mean == pytest.approx(float(x64.mean()), rel=1e-9, abs=1e-12)
            assert st.std == pytest.approx(float(x64.std()), rel=1e-6, abs=1e-9)
            assert st.l2 == pytest.approx(float(np.sqrt((x64 * x64).sum())), rel=1e-9)
    assert sum(st.hist) == fin.size
    assert len(st.hist) == bins
    if fin.size:
        assert st.hist_lo == pytest.approx(float(fin.min()))
        hi = float(fin.max()) if fin.max() > fin.min() else float(fin.min()) + 1.0
        assert st.hist_hi == pytest.approx(hi)
        ref, _ = np.histogram(fin, bins=bins, range=(st.hist_lo, st.hist_hi))
        # Bin edges are computed in float32 (and the scale shrunk by 2^-20): a value within a
        # rounding of an edge may land in the neighbouring bin.
        assert np.abs(np.asarray(st.hist) - ref).sum() <= 2 + 1e-4 * fin.size


@pytest.mark.parametrize("n", [1, 7, 100, 1000, 100003])
def test_stats_random_float32(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 3 + 0.5
    _check_against_numpy(x, array_stats(x))


def test_stats_known_values():
    x = np.array([[0, 1, -2], [3, 0, -4]], np.float32)
    st = array_stats(x)
    assert st.shape == (2, 3) and st.count == 6
    assert st.asum_mean == pytest.approx(10 / 6)
    assert (st.min, st.max) == (-4.0, 3.0)
    assert st.mean == pytest.approx(-2 / 6)
    assert st.l2 == pytest.approx(math.sqrt(30))
    assert st.std == pytest.approx(float(np.std(x.astype(np.float64))))
    assert st.frac_zero == pytest.approx(2 / 6)
    assert st.nan == st.inf == 0 and st.finite
    assert sum(st.hist) == 6 and st.hist[0] == 1 and st.hist[-1] == 1
    _check_against_numpy(x, st)


def test_stats_nan_inf():
    x = np.array([1.0, np.nan, -np.inf, 2.0, np.inf, 0.0, np.nan, -3.0], np.float32)
    st = array_stats(x)
    assert (st.nan, st.inf) == (2, 2)
    assert not st.finite
    assert math.isnan(st.min) and math.isnan(st.max) and math.isnan(st.asum_mean)
    assert (st.hist_lo, st.hist_hi) == (-3.0, 2.0)
    assert sum(st.hist) == 4
    _check_against_numpy(x, st)


def test_stats_inf_only_no_nan():
    x = np.array([1.0, np.inf, 2.0], np.float32)
    st = array_stats(x)
    assert (st.nan, st.inf) == (0, 1)
    assert st.max == math.inf and st.min == 1.0
    assert st.asum_mean == math.inf
    assert sum(st.hist) == 2 and (st.hist_lo, st.hist_hi) == (1.0, 2.0)


def test_stats_all_nan_and_empty_and_constant():
    st = array_stats(np.full((3, 2), np.nan, np.float32))
    assert st.nan == 6 and sum(st.hist) == 0 and (st.hist_lo, st.hist_hi) == (0.0, 0.0)
    st = array_stats(np.zeros((0, 4), np.float32))
    assert st.count == 0 and st.shape == (0, 4) and math.isnan(st.asum_mean) and st.hist == [0] * HIST_BINS
    st = array_stats(np.full(10, 2.5, np.float32))
    assert st.std == 0 and st.hist[0] == 10 and (st.hist_lo, st.hist_hi) == (2.5, 3.5)
    st = array_stats(np.zeros(5, np.float32))
    assert st.frac_zero == 1.0 and st.l2 == 0 and st.asum_mean == 0


def test_stats_float64_ints_and_huge_values():
    x = np.random.default_rng(3).standard_normal((4, 5))
    _check_against_numpy(x, array_stats(x))
    xi = np.arange(-5, 6)
    _check_against_numpy(xi, array_stats(xi))
    big = np.array([3e38, -3e38, 1e30, 0], np.float32)       # float32 sums overflow; no warnings
    st = array_stats(big)
    assert st.l2 == pytest.approx(math.sqrt(2 * 3e38 ** 2 + 1e60), rel=1e-6)
    assert sum(st.hist) == 4


def test_stats_bins_and_asum_is_caffes():
    x = np.random.default_rng(5).standard_normal(5000).astype(np.float32)
    assert len(array_stats(x, bins=8).hist) == 8
    assert array_stats(x, bins=0).hist == []
    st = array_stats(x)
    assert st.asum_mean == float(np.float32(caffe_asum(x)) / np.float32(x.size))


def test_device_summary_matches_host_path():
    """The GPU path, run with NumPy as its array module, agrees with the host path."""
    rng = np.random.default_rng(7)
    for x in (rng.standard_normal(3001).astype(np.float32),
              np.array([1, np.nan, 2, -np.inf, 0, 5], np.float32),
              np.full(9, np.nan, np.float32)):
        host, counts = _host_summary(x, HIST_BINS)
        dev = _device_summary(x, np, HIST_BINS)
        assert dev.shape == (10 + HIST_BINS,)
        for k in range(10):
            a, b = host[k], float(dev[k])
            if k in (8, 9) and not math.isfinite(a):      # no finite value: reported as inf/-inf
                assert not math.isfinite(b)
            elif math.isnan(a):
                assert math.isnan(b)
            else:
                assert b == pytest.approx(a, rel=1e-5), k
        assert np.abs(dev[10:] - counts).sum() <= 2


# ---------------------------------------------------------------------- records
def test_records_forward_backward_ranges():
    net = _lenet()
    rec = Recorder(net)
    net.ForwardFromTo(0, 4)
    net.ForwardFromTo(5, len(net.layers) - 1)
    net.BackwardFromTo(len(net.layers) - 1, 3)
    assert [(s.kind, s.start, s.end) for s in rec.steps] == [("forward", 0, 4), ("forward", 5, 8),
                                                             ("backward", 8, 3)]
    f1, f2, b = rec.steps
    assert [l.layer for l in f1.layers] == net.layer_names[:5]
    assert [l.layer_index for l in f2.layers] == [5, 6, 7, 8]
    assert [l.layer for l in b.layers] == ["loss", "ip2", "relu1", "ip1", "pool2", "conv2"]
    conv1 = f1.layer("conv1")
    assert [(x.role, x.name) for x in conv1.blobs] == [("bottom", "data"), ("top", "conv1"), ("param", "0"),
                                                       ("param", "1")]
    assert all(x.diff is None and x.data is not None for x in conv1.blobs)
    assert conv1.time_ms >= 0
    np.testing.assert_allclose(conv1.blob("top", 0).data.l2, np.linalg.norm(net.blobs["conv1"].data.astype(np.float64)),
                               rtol=1e-6)
    # The in-place ReLU: its top is a new version of ip1.
    ip1_top = f2.layer("ip1").blob("top", 0).data
    relu_top = f2.layer("relu1").blob("top", 0).data
    assert relu_top.frac_zero > ip1_top.frac_zero
    assert relu_top.min >= 0 > ip1_top.min
    # Backward: diffs, propagate flags, loss.
    loss_b = b.layer("loss")
    assert loss_b.blob("bottom", 0).propagate is True and loss_b.blob("bottom", 1).propagate is False
    ip2 = b.layer("ip2")
    g = ip2.blob("param", 0).diff
    np.testing.assert_allclose(g.asum_mean, np.abs(net.params["ip2"][0].diff).mean(), rtol=1e-5)
    assert f2.layer("loss").loss == pytest.approx(float(net.blobs["loss"].data))
    assert rec.last("backward") is b and rec.latest_layer_records()[(8, "backward")] is loss_b


def test_records_round_trip_json():
    net = _lenet()
    rec = Recorder(net)
    net.forward()
    net.backward()
    text = json.dumps([s.to_dict() for s in rec.steps])
    back = [StepRecord.from_dict(d) for d in json.loads(text)]
    assert [s.to_dict() for s in back] == [s.to_dict() for s in rec.steps]
    d = rec.to_dict()
    assert d["schema_version"] >= 2 and len(d["steps"]) == 2


def test_debug_info_lines_from_records_match_caffes(caplog):
    net = _lenet()
    net.debug_info = True
    rec = Recorder(net)
    with caplog.at_level(logging.INFO, logger="engine.core.net"):
        net.Forward()
        net.Backward()
    logged = [r.getMessage() for r in caplog.records if "[Forward]" in r.getMessage() or "[Backward]" in
              r.getMessage()]
    ours = caffe_debug_lines(rec.steps[0]) + caffe_debug_lines(rec.steps[1]) + [all_params_line(net)]
    assert ours == logged


def test_recorder_detach_and_max_steps():
    net = _lenet()
    rec = Recorder(net, max_steps=3)
    for _ in range(3):
        net.forward()
        net.backward()
    assert len(rec.steps) == 3
    rec.detach()
    net.forward()
    assert len(rec.steps) == 3 and rec not in net.debug_observers
    assert rec.asum_mean(net.blobs["data"], "data") is None     # nothing under way


def _overflow_net(tmp_path):
    net = _net_from_text(tmp_path, OVERFLOW, engine.TEST)
    x = np.zeros((4, 25), np.float32)
    x[1, 3] = 2.0        # exp(exp(exp(2))) = exp(1618): overflows at exp3 only
    x[2, 7] = 1.0        # exp(exp(e)) = 3.8e6: finite
    net.blobs["data"].data[...] = x
    return net


def test_sentinel_stops_at_the_first_overflowing_layer(tmp_path):
    net = _overflow_net(tmp_path)
    rec = Recorder(net, sentinel=True)
    with pytest.raises(NonFiniteError) as ei:
        net.forward()
    f = ei.value.finding
    assert (f.layer, f.type, f.blob, f.role, f.which, f.direction) == ("exp3", "Exp", "e3", "top", "data", "forward")
    assert (f.nan, f.inf, f.count) == (0, 1, 100)
    assert f.inputs_finite and f.params_finite
    msg = str(ei.value)
    assert "exp3" in msg and "'e3'" in msg and "1 Inf of 100" in msg and "inputs were finite" in msg
    # The step is kept up to the failing layer, and the next layer never ran.
    assert [l.layer for l in rec.steps[-1].layers] == ["in", "exp1", "exp2", "exp3"]


def test_without_sentinel_the_first_nonfinite_is_remembered(tmp_path):
    net = _overflow_net(tmp_path)
    rec = Recorder(net)
    net.forward()
    assert rec.first_nonfinite.layer == "exp3"
    half = rec.steps[-1].layer("half")
    assert half.nonfinite and not half.blob("bottom", 0).data.finite


SQRT_NET = """
name: "SqrtGrad"
force_backward: true
layer { name: "in" type: "Input" top: "data" top: "target"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 3 } } }
layer { name: "sqrt" type: "Power" bottom: "data" top: "root" power_param { power: 0.5 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "root" bottom: "target" }
"""


def test_sentinel_in_backward_names_the_layer_and_blob(tmp_path):
    net = _net_from_text(tmp_path, SQRT_NET)
    net.blobs["data"].data[...] = np.array([[0, 1, 4], [9, 16, 25]], np.float32)   # d sqrt(x)/dx = inf at 0
    net.blobs["target"].data[...] = 1.0
    rec = Recorder(net, sentinel=True)
    net.forward()
    assert rec.first_nonfinite is None
    with pytest.raises(NonFiniteError) as ei:
        net.backward()
    f = ei.value.finding
    assert (f.direction, f.layer, f.blob, f.role, f.which) == ("backward", "sqrt", "data", "bottom", "diff")
    assert f.inputs_finite                 # the top diff coming in was finite


# ---------------------------------------------------------------------- updates
def _solver(tmp_path, extra=""):
    from engine.core.solvers import get_solver
    p = tmp_path / "solver.prototxt"
    p.write_text('net: "%s"\nbase_lr: 0.01\nmomentum: 0.9\nweight_decay: 0.0005\nlr_policy: "fixed"\n'
                 'max_iter: 10\nsnapshot: 0\nsnapshot_prefix: "%s"\nrandom_seed: 1\n%s'
                 % (LENET, tmp_path / "snap", extra))
    solver = get_solver(str(p))
    rng = np.random.default_rng(0)
    solver.net.blobs["data"].data[...] = rng.random(solver.net.blobs["data"].shape)
    solver.net.blobs["label"].data[...] = rng.integers(0, 10, 64)
    return solver


def test_update_records_via_attach_solver(tmp_path):
    solver = _solver(tmp_path)
    net = solver.net
    rec = Recorder(net)
    rec.attach_solver(solver)
    before = [p.data.copy() for p in net.learnable_params]
    solver.step(1)
    after = [p.data.copy() for p in net.learnable_params]
    kinds = [s.kind for s in rec.steps]
    assert kinds == ["forward", "backward", "update"]
    upd = rec.steps[-1]
    assert upd.iteration == 0 and rec.iteration == 1
    assert [l.layer for l in upd.layers] == ["conv1", "conv2", "ip1", "ip2"]
    k = 0
    for l in upd.layers:
        for b in l.blobs:
            w0, w1 = before[k].astype(np.float64), after[k].astype(np.float64)
            assert b.delta.l2 == pytest.approx(np.linalg.norm(w1 - w0), rel=1e-5)
            assert b.before.l2 == pytest.approx(np.linalg.norm(w0), rel=1e-6)
            assert b.data.l2 == pytest.approx(np.linalg.norm(w1), rel=1e-6)
            ratio = np.linalg.norm(w1 - w0) / np.linalg.norm(w0) if np.linalg.norm(w0) else math.inf
            assert b.ratio == pytest.approx(ratio, rel=1e-5)
            # Caffe leaves the update value in the diff: data_after = data_before - diff.
            assert b.diff.l2 == pytest.approx(b.delta.l2, rel=1e-4)
            assert b.grad is not None and b.propagate is True
            k += 1
    solver.step(1)
    assert [s.kind for s in rec.steps][-1] == "update" and rec.steps[-1].iteration == 1
    rec.detach_solver(solver)
    solver.step(1)
    assert sum(s.kind == "update" for s in rec.steps) == 2


def test_record_update_around_step_and_with_callbacks(tmp_path):
    solver = _solver(tmp_path)
    net = solver.net
    rec = Recorder(net)
    before = rec.snapshot_params(net)
    solver.step(1)
    upd = rec.record_update(net, before)
    assert upd.kind == "update" and all(b.ratio is None or b.ratio > 0 for l in upd.layers for b in l.blobs)
    # The same from a list of arrays.
    arrays = [p.data.copy() for p in net.learnable_params]
    solver.step(1)
    upd2 = rec.record_update(net, arrays)
    w = net.learnable_params[0]
    assert upd2.layers[0].blobs[0].delta.l2 == pytest.approx(
        np.linalg.norm(w.data.astype(np.float64) - arrays[0]), rel=1e-5)
    # And from the solver's callbacks.
    hook = UpdateHook(rec, solver)
    solver.add_callback(hook)
    n0 = sum(s.kind == "update" for s in rec.steps)
    solver.step(2)
    hook.flush()
    ups = [s for s in rec.steps if s.kind == "update"][n0:]
    assert len(ups) == 2 and [u.iteration for u in ups] == [2, 3]
    assert all(b.grad is not None and b.delta is not None for u in ups for l in u.layers for b in l.blobs)


def test_update_ratio():
    assert update_ratio(1.0, 100.0) == 0.01
    assert update_ratio(0.0, 0.0) is None
    assert update_ratio(1.0, 0.0) == math.inf


def test_partial_stats_from_logs():
    st = BlobStats.only_asum(0.5, (2, 3), 6)
    assert st.partial and st.asum_mean == 0.5 and st.count == 6 and st.finite
    d = json.loads(json.dumps(st.to_dict(), allow_nan=True))
    assert BlobStats.from_dict(d).partial


# ---------------------------------------------------------------- the "health" level
def test_health_stats_one_pass_numbers():
    import math

    from engine.instruments.debug import health_stats
    x = np.array([1, -2, 3, 0], np.float32)
    st = health_stats(x)
    assert st.asum_mean == pytest.approx(1.5) and st.nan == 0 and st.inf == 0 and st.finite
    assert st.partial and math.isnan(st.min)
    y = np.array([1, np.nan, np.inf, -np.inf, 2], np.float32)
    st = health_stats(y)
    assert st.nan == 1 and st.inf == 2 and not st.finite
    big = np.full(8, 3e38, np.float32)            # finite values whose |x| sum overflows
    st = health_stats(big)
    assert st.nan == 0 and st.inf == 0


def test_health_level_recorder_matches_full_numbers_and_finds_nan(tmp_path):
    from engine.instruments.debug import Recorder
    path = tmp_path / "n.prototxt"
    path.write_text('layer { name: "d" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
                    'layer { name: "e" type: "Exp" bottom: "x" top: "e" }\n'
                    'layer { name: "p" type: "Power" bottom: "e" top: "p" power_param { power: 40 } }\n')
    net = engine.Net(str(path), engine.TEST)
    net.blobs["x"].data[...] = [[1, 2, 3], [4, 5, 60]]
    full = Recorder(net)
    net.Forward()
    full.detach()
    cheap = Recorder(net, level="health")
    net.Forward()
    a, b = full.last("forward"), cheap.last("forward")
    for la, lb in zip(a.layers, b.layers):
        for ba, bb in zip(la.blobs, lb.blobs):
            assert bb.data.asum_mean == ba.data.asum_mean or (np.isnan(ba.data.asum_mean)
                                                               and np.isnan(bb.data.asum_mean))
            assert (bb.data.nan, bb.data.inf) == (ba.data.nan, ba.data.inf)
    assert cheap.first_nonfinite.layer == full.first_nonfinite.layer == "p"   # e**40 overflows
    with pytest.raises(ValueError, match="level"):
        Recorder(net, level="everything")

"""engine.instruments.breakpoints: conditions, where they stop Forward/Backward and
solver runs, hit counts (no browser)."""
import math

import numpy as np
import pytest

import engine
from engine.core import backend
from engine.instruments import breakpoints as bp
from engine.instruments.debug import Recorder
from tests import nets
from tests.nets import DUMMY_SOFTMAX, LENET, lenet_with_inputs

# exp(exp(exp(x))) overflows float32 at exp3 for x = 2 (exp(exp(7.39)) = inf)
OVERFLOW = nets.overflow((2, 5))


@pytest.fixture
def lenet():
    return lenet_with_inputs()


@pytest.fixture
def overflow(tmp_path):
    p = tmp_path / "overflow.prototxt"
    p.write_text(OVERFLOW)
    net = engine.Net(str(p), engine.TEST)
    net.blobs["data"].data[...] = np.array([[0, 0, 2, 0, 0], [0, 0, 0, 0, 0]], np.float32)
    return net


@pytest.mark.parametrize("text,kind,canonical", [
    ("nonfinite", "nonfinite", "nonfinite"),
    ("  layer=conv2 ", "layer", "layer=conv2"),
    ("conv1.max_abs > 1e4", "stat", "conv1.max_abs > 10000"),
    ("conv1.data.mean_abs>=0.5", "stat", "conv1.mean_abs >= 0.5"),
    ("ip1.diff.std < 1e-8", "stat", "ip1.diff.std < 1e-08"),
    ("inception_3a/1x1.zero_fraction <= 0.99", "stat", "inception_3a/1x1.zero_fraction <= 0.99"),
    ("conv1.update_ratio > 1e-2", "stat", "conv1.update_ratio > 0.01"),
    ("loss.jump > 10", "loss_jump", "loss.jump > 10"),
    ("loss.nonfinite", "loss_nonfinite", "loss.nonfinite"),
    ("loss > 5", "loss", "loss > 5"),
])
def test_conditions_parse_and_print_back(text, kind, canonical):
    c = bp.parse_condition(text)
    assert c.kind == kind and str(c) == canonical
    assert bp.parse_condition(str(c)) == c


@pytest.mark.parametrize("text,msg", [
    ("", "empty condition"),
    ("conv1.maxabs > 1", "cannot read the condition"),
    ("conv1.max_abs >> 1", "cannot read the condition"),
    ("layer=", "needs a layer name"),
    ("loss.jump > 0", "positive factor"),
    ("conv1.diff.update_ratio > 1", "statistic of a solver update"),
])
def test_bad_conditions_say_why(text, msg):
    with pytest.raises(bp.ConditionError, match=msg):
        bp.parse_condition(text)


def test_conditions_checked_against_the_net(lenet):
    with pytest.raises(bp.ConditionError, match=r"no blob, param or layer 'conv9' \(did you mean 'conv2'"):
        bp.parse_condition("conv9.max_abs > 1", lenet)
    with pytest.raises(bp.ConditionError, match="no layer 'cnv1'"):
        bp.parse_condition("layer=cnv1", lenet)
    with pytest.raises(bp.ConditionError, match="'relu1' is a layer, not a blob: name one of its tops \\(ip1\\)"):
        bp.parse_condition("relu1.max_abs > 1", lenet)
    with pytest.raises(bp.ConditionError, match="layer 'pool1' has no params"):
        bp.Breakpoints(["pool1.update_ratio > 1"], net=lenet)
    with pytest.raises(bp.ConditionError, match="'label' is a blob; update_ratio"):
        bp.Breakpoints(["label.update_ratio > 1"], net=lenet)
    # conv1 is a blob and a layer: update_ratio means the layer's params
    assert str(bp.parse_condition("conv1.update_ratio > 1", lenet)) == "conv1.update_ratio > 1"
    assert bp.resolve(lenet, "conv1/1")[0] == "param" and bp.resolve(lenet, "relu1") == ("layer", 6)
    assert isinstance(bp.ConditionError("x"), ValueError)


def test_watching_a_net_with_debug_info_without_a_recorder(lenet, caplog):
    # the net asks every observer for Caffe's debug_info number of a blob: a watch has none (NetObserver's
    # asum_mean is None) and the net reduces the blob itself; the watch used to raise AttributeError here
    lenet.debug_info = True
    bps = bp.Breakpoints(["layer=ip2"], net=lenet)
    n = len(lenet.layers)
    with caplog.at_level("INFO"):
        res = bp.run_forward(lenet, 0, n - 1, bps)
        assert res.hit.layer == "ip2"
        bp.run_backward(lenet, res.last, 0, bp.Breakpoints(["nonfinite"], net=lenet))
    assert "[Forward] Layer conv1, top blob conv1 data:" in caplog.text
    assert "[Backward] Layer conv1, bottom blob" not in caplog.text and "[Backward] Layer ip1" in caplog.text
    assert lenet.debug_observers == []


def test_layer_breakpoint_stops_forward_after_that_layer(lenet):
    rec = Recorder(lenet)
    bps = bp.Breakpoints(["layer=pool1"], net=lenet)
    n = len(lenet.layers)
    res = bp.run_forward(lenet, 0, n - 1, bps, recorder=rec)
    assert res.hit.message == "break: pool1: layer=pool1" and res.last == 2 and res.hit.direction == "forward"
    assert [l.layer for l in rec.steps[-1].layers] == ["digits", "conv1", "pool1"]     # the rest did not run
    assert res.loss == 0.0 and bps.items[0].hit_count == 1 and bps.hits == [res.hit]
    assert lenet.debug_observers == [rec]                     # the watcher is gone
    # it fires in backward too
    lenet.Forward()
    res = bp.run_backward(lenet, n - 1, 0, bps, recorder=rec)
    assert res.hit.layer == "pool1" and res.hit.direction == "backward"
    assert [l.layer for l in rec.steps[-1].layers][-1] == "pool1"
    assert bps.items[0].hit_count == 2
    # disabled: the whole range runs, and returns Caffe's loss
    bps.enable(1, False)
    res = bp.run_forward(lenet, 0, n - 1, bps, recorder=rec)
    assert res.hit is None and res.loss == pytest.approx(float(lenet.blobs["loss"].data), rel=1e-6)


def test_stat_breakpoint_names_the_layer_that_wrote_the_value(lenet):
    rec = Recorder(lenet)
    n = len(lenet.layers)
    lenet.ForwardTo(lenet.layer_names.index("ip1"))         # ip1 before relu1 rewrites it in place
    big = float(np.abs(lenet.blobs["ip1"].data).max())
    # ip1 is written by ip1 (forward) and then, in place, by relu1
    bps = bp.Breakpoints(["ip1.max_abs > %g" % (big * 0.9)], net=lenet)
    res = bp.run_forward(lenet, 0, n - 1, bps, recorder=rec)
    assert res.hit.layer == "ip1" and res.hit.blob == "ip1" and res.hit.value == pytest.approx(big, rel=1e-6)
    # zero_fraction crosses only after relu1 zeroed the negatives
    bps = bp.Breakpoints(["ip1.zero_fraction > 0.2"], net=lenet)
    res = bp.run_forward(lenet, 0, n - 1, bps, recorder=rec)
    assert res.hit.layer == "relu1" and 0.2 < res.hit.value < 1
    # a gradient: ip1's diff is written by the backward of ip2 (ip1 -> relu1 in place -> ip2)
    lenet.Forward()
    bps = bp.Breakpoints(["ip1.diff.mean_abs > 0"], net=lenet)
    res = bp.run_backward(lenet, n - 1, 0, bps, recorder=rec)
    assert res.hit.message == "break: ip2: ip1.diff.mean_abs > 0" and res.hit.which == "diff"
    # a param's gradient by LAYER/K
    bps = bp.Breakpoints(["conv2/0.diff.max_abs > 0"], net=lenet)
    res = bp.run_backward(lenet, n - 1, 0, bps, recorder=rec)
    assert res.hit.layer == "conv2" and res.hit.blob == "conv2/0"
    # a data condition never fires in backward, a diff condition never in forward
    bps = bp.Breakpoints(["ip1.mean_abs > 0", "conv1.diff.mean_abs > 0"], net=lenet)
    assert bp.run_backward(lenet, n - 1, 3, bps, recorder=rec).hit is None
    assert bp.run_forward(lenet, 0, 1, bps, recorder=rec).hit is None


def test_nonfinite_breakpoint_on_a_net_built_to_overflow(overflow):
    rec = Recorder(overflow)
    bps = bp.Breakpoints(["nonfinite"])
    res = bp.run_forward(overflow, 0, len(overflow.layers) - 1, bps, recorder=rec)
    assert res.hit.message == "break: exp3: nonfinite"
    assert res.hit.blob == "e3" and res.hit.value == 1.0 and "1 Inf of 10" in res.hit.detail
    assert [l.layer for l in rec.steps[-1].layers] == ["in", "exp1", "exp2", "exp3"]    # 'half' did not run
    # without a Recorder the check measures the arrays itself
    res = bp.run_forward(overflow, 0, len(overflow.layers) - 1, bps)
    assert res.hit.layer == "exp3"
    assert bps.items[0].hit_count == 2


def test_solver_conditions_loss_jump_and_nonfinite(lenet):
    bps = bp.Breakpoints(["loss.jump > 3", "loss.nonfinite", "loss < 0.01"])
    assert bps.check_solver(0, 2.3, lenet) is None          # no previous loss: no jump yet
    assert bps.check_solver(1, 2.0, lenet) is None
    hit = bps.check_solver(2, 7.0, lenet)
    assert hit.condition == "loss.jump > 3" and hit.value == pytest.approx(3.5) and hit.iteration == 2
    assert hit.layer == "loss" and hit.direction == "solver" and "after 2" in hit.detail
    hit = bps.check_solver(3, float("nan"), lenet)
    assert hit.condition == "loss.nonfinite" and math.isnan(hit.value)
    assert bps.check_solver(4, 0.005, lenet).condition == "loss < 0.01"
    assert [b.hit_count for b in bps.items] == [1, 1, 1]
    d = bps.to_dict()
    assert [b["hits"] for b in d["breakpoints"]] == [1, 1, 1]
    assert d["hits"][0]["message"] == "break: loss: loss.jump > 3"


def test_update_ratio_and_param_conditions_after_a_solver_update(tmp_path):
    sp = tmp_path / "solver.prototxt"
    sp.write_text('net: "%s"\nbase_lr: 0.5\nlr_policy: "fixed"\nmax_iter: 10\n' % LENET)
    backend.set_random_seed(1)
    solver = engine.get_solver(str(sp))
    net = solver.net
    net.blobs["data"].data[...] = np.random.default_rng(0).random(net.blobs["data"].shape)
    net.blobs["label"].data[...] = 1
    rec = Recorder(net)
    rec.attach_solver(solver)
    solver.step(1)
    upd = rec.last("update")
    ratios = {("%s/%d" % (l.layer, b.index)): b.ratio for l in upd.layers for b in l.blobs
              if b.ratio is not None and math.isfinite(b.ratio)}       # (zero biases: no ratio, or inf)
    worst = max(ratios, key=ratios.get)
    assert ratios[worst] > 0
    bps = bp.Breakpoints(["%s.update_ratio > %g" % (worst.split("/")[0], ratios[worst] * 0.99), "nonfinite"],
                         net=net)
    hit = bps.check_update(net, upd)
    assert hit.layer == worst.split("/")[0] and hit.blob == worst and hit.direction == "update"
    assert hit.value == pytest.approx(ratios[worst])
    bps2 = bp.Breakpoints(["ip1/0.update_ratio > 1e9", "ip1/0.max_abs > 1e9"], net=net)
    assert bp.Breakpoints(["ip2/1.update_ratio > 1e9"], net=net).check_update(net, upd).value == math.inf
    assert bps2.check_update(net, upd) is None


def test_partial_loss_is_what_forward_returns_up_to_there(lenet):
    n = len(lenet.layers)
    full = float(lenet.ForwardFromTo(0, n - 1))
    assert bp.partial_loss(lenet, 0, n - 1) == pytest.approx(full, rel=1e-6)
    assert bp.partial_loss(lenet, 0, n - 2) == 0.0


def test_editing_keeps_ids_and_counts(lenet):
    bps = bp.Breakpoints()
    a = bps.add("layer=conv1", net=lenet)
    b = bps.add("nonfinite", enabled=False)
    assert (a, b) == (1, 2) and bps.active
    bps.enable(a, False)
    assert not bps.active
    bps.replace(b, "layer=ip2", net=lenet)
    assert str(bps.get(b).condition) == "layer=ip2" and bps.get(b).hit_count == 0
    bps.remove(a)
    assert [x.id for x in bps.items] == [2]
    with pytest.raises(KeyError, match="no breakpoint #1"):
        bps.get(1)
    with pytest.raises(bp.ConditionError):
        bps.add("layer=nope", net=lenet)


# ---------------------------------------------------------------------- whole solver runs (SolverWatch)
def _dummy_solver(tmp_path, average_loss=1, base_lr=0.1, max_iter=20):
    net = tmp_path / "dummy.prototxt"
    net.write_text(DUMMY_SOFTMAX)
    sp = tmp_path / ("solver_%d.prototxt" % average_loss)
    sp.write_text('net: "%s"\nbase_lr: %g\nlr_policy: "fixed"\nmax_iter: %d\naverage_loss: %d\n'
                  'random_seed: 3\nsnapshot_after_train: false\n' % (net, base_lr, max_iter, average_loss))
    return engine.get_solver(str(sp))


def _watched_losses(solver, steps):
    """(iteration, loss) as SolverWatch hands them to check_solver, over ``steps`` Step calls."""
    seen = []
    bps = bp.Breakpoints(["loss.nonfinite"])
    real = bps.check_solver
    bps.check_solver = lambda it, loss, net=None: seen.append((it, loss)) or real(it, loss, net)
    for n in steps:
        with bp.SolverWatch(solver, bps):
            solver.step(n)
    return seen


def test_solver_watch_sees_each_iterations_own_loss(tmp_path):
    # average_loss 1: the smoothed loss is the iteration's; with 3 (a ring, over two Step calls) the watch
    # must still hand each iteration its own loss, not the ring's last slot
    s1 = _dummy_solver(tmp_path, average_loss=1)
    truth = []
    for _ in range(7):
        s1.step(1)
        truth.append((s1.iter - 1, float(s1.smoothed_loss_)))
    s3 = _dummy_solver(tmp_path, average_loss=3)
    seen = _watched_losses(s3, [5, 2])
    assert [it for it, _ in seen] == list(range(7))
    np.testing.assert_allclose([v for _, v in seen], [v for _, v in truth], rtol=0, atol=0)
    assert len({v for _, v in seen}) == 7            # the loss moves: a stale slot would repeat a value


def test_solver_watch_stops_a_solve_on_loss_jump_update_ratio_and_layers(tmp_path):
    # loss.jump: a huge learning rate; the hit carries Caffe's loss of that iteration and the previous one
    s = _dummy_solver(tmp_path, base_lr=1e3)
    bps = bp.Breakpoints(["loss.jump > 2"], net=s.net)
    with pytest.raises(bp.BreakpointHit) as e, bp.SolverWatch(s, bps):
        s.solve()
    h = e.value.hit
    assert h.message == "break: loss: loss.jump > 2" and h.direction == "solver" and h.value > 2
    assert s.iter == h.iteration + 1 < 20 and bps.items[0].hit_count == 1       # stopped after that update
    # an update ratio (a Recorder attached to the solver records the update)
    s = _dummy_solver(tmp_path)
    rec = Recorder(s.net, bins=0, level="health")
    rec.attach_solver(s)
    bps = bp.Breakpoints(["ip/0.update_ratio > 0"], net=s.net)
    with pytest.raises(bp.BreakpointHit) as e, bp.SolverWatch(s, bps, rec):
        s.solve()
    assert e.value.hit.layer == "ip" and e.value.hit.iteration == 0 and s.iter == 1
    # a layer breakpoint stops inside the iteration's backward, before its update
    s = _dummy_solver(tmp_path)
    w0 = s.net.params["ip"][0].data.copy()
    bps = bp.Breakpoints(["ip.diff.max_abs > 0"], net=s.net)
    with pytest.raises(bp.BreakpointHit) as e, bp.SolverWatch(s, bps):
        s.solve()
    assert (e.value.hit.layer, e.value.hit.direction, e.value.hit.iteration) == ("loss", "backward", 0)
    assert s.iter == 0 and np.array_equal(s.net.params["ip"][0].data, w0)
    # the watch leaves the solver as it found it: the action function it was given, no observer
    s = _dummy_solver(tmp_path, max_iter=3)
    asked = []
    with bp.SolverWatch(s, bp.Breakpoints(["loss.nonfinite"]), action=lambda: asked.append(1) or 0):
        s.solve()
    assert s.iter == 3 and len(asked) == 3 and s.net.debug_observers == []


def test_a_time_limit_stops_a_range_between_layers_not_after_its_last(lenet):
    rec = Recorder(lenet)
    bps = bp.Breakpoints()                            # no breakpoint at all: the limit alone stops it
    n = len(lenet.layers)
    limit = bp.TimeLimit(0.0, "--run-seconds 0")      # already past when the first layer ends
    res = bp.run_forward(lenet, 0, n - 1, bps, recorder=rec, time_limit=limit)
    assert res.hit.time_limit and res.hit.breakpoint_id == bp.TIME_LIMIT_ID and res.last == 0
    assert res.hit.message == "time limit reached: 0 s (--run-seconds 0)" and res.hit.layer == "digits"
    assert res.hit.describe().startswith("time limit reached: 0 s (--run-seconds 0) (forward, ran ")
    assert [l.layer for l in rec.steps[-1].layers] == ["digits"] and bps.hits == [res.hit]
    assert lenet.debug_observers == [rec]
    # from there on, a layer a request: the range's last layer is not a stop (nothing is left)
    res = bp.run_forward(lenet, n - 1, n - 1, bps, recorder=rec, time_limit=limit)
    assert res.hit is None and res.last == n - 1
    res = bp.run_backward(lenet, n - 1, 0, bps, recorder=rec, time_limit=limit)
    assert res.hit.time_limit and res.hit.direction == "backward" and res.last == n - 1
    # a limit not reached changes nothing: Caffe's loss
    res = bp.run_forward(lenet, 0, n - 1, bps, recorder=rec, time_limit=bp.TimeLimit(3600.0))
    assert res.hit is None and res.loss == pytest.approx(float(lenet.blobs["loss"].data), rel=1e-6)

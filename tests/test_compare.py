"""engine.instruments.compare: two runs side by side, the first layer where they part."""
import json
import math
import os

import numpy as np
import pytest

import engine
from engine.core import backend
from engine.instruments.compare import as_steps, compare_runs, rel_diff
from engine.instruments.debug import Recorder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")


def _run(edit=None, iterations=1):
    backend.set_random_seed(1)
    net = engine.Net(LENET, engine.TRAIN)
    rng = np.random.default_rng(0)
    net.blobs["data"].data[...] = rng.random(net.blobs["data"].shape)
    net.blobs["label"].data[...] = rng.integers(0, 10, 64)
    if edit:
        edit(net)
    rec = Recorder(net)
    for _ in range(iterations):
        net.forward()
        net.backward()
    return net, rec


def test_identical_runs_agree():
    _, a = _run()
    _, b = _run()
    cmp = compare_runs(a, b, rtol=1e-6)
    assert cmp.ok and cmp.first_divergence is None
    assert len(cmp.layers) == 9 + 8               # every forward layer, every backward layer
    assert all(l.time_a is not None and l.time_b is not None for l in cmp.layers)
    assert "agree" in cmp.format()


def test_first_divergence_is_the_edited_layer():
    def edit(net):
        net.params["conv2"][0].data[0, 0, 0, 0] += 0.5
    _, a = _run()
    _, b = _run(edit)
    cmp = compare_runs(a, b, rtol=1e-4, label_a="before", label_b="after")
    fd = cmp.first_divergence
    assert (fd.kind, fd.layer, fd.type, fd.step) == ("forward", "conv2", "Convolution", 0)
    assert all(l.ok for l in cmp.layers[:3])       # digits, conv1, pool1 agree
    w = fd.worst
    assert w.role in ("top", "param") and w.rel > 1e-4
    text = cmp.format(only_bad=True)
    assert "runs part at step 0 (forward), layer 'conv2'" in text and "before vs after" in text
    what = fd.worst_text("before", "after")
    assert what == "%s %s %s %s: %.6g vs %.6g" % (w.role, w.name, w.which, w.stat, w.a, w.b) and what in text
    assert fd.worst_text("before", "after", lambda v: "<%.2f>" % v).endswith("<%.2f> vs <%.2f>" % (w.a, w.b))
    assert cmp.layers[0].worst_text("before", "after") == ""         # digits agrees
    # A loose tolerance hides a small edit.
    def tiny(net):
        net.params["conv2"][0].data[0, 0, 0, 0] *= 1 + 1e-7
    _, c = _run(tiny)
    assert compare_runs(a, c, rtol=1e-3).ok


def test_reports_and_dicts_as_runs(tmp_path):
    net, a = _run()
    from engine.instruments.report import write_report
    path = tmp_path / "run.json"
    write_report(str(path), net, a)
    cmp = compare_runs(a, str(path), rtol=1e-9)
    assert cmp.ok and cmp.label_b == "run.json"
    d = json.loads(path.read_text())
    assert len(as_steps(d)) == 2 and len(as_steps(d["steps"])) == 2
    assert compare_runs(d, a).ok


def test_layers_in_one_run_only_and_step_counts(tmp_path):
    _, a = _run(iterations=2)
    _, b = _run(iterations=1)
    cmp = compare_runs(a, b)
    assert cmp.ok and any("2 forward steps" in n for n in cmp.notes)
    p = tmp_path / "other.prototxt"
    p.write_text(open(LENET).read().replace('name: "relu1"', 'name: "relu_renamed"'))
    backend.set_random_seed(1)
    net2 = engine.Net(str(p), engine.TRAIN)
    rng = np.random.default_rng(0)
    net2.blobs["data"].data[...] = rng.random(net2.blobs["data"].shape)
    net2.blobs["label"].data[...] = rng.integers(0, 10, 64)
    r2 = Recorder(net2)
    net2.forward()
    cmp = compare_runs(b, r2, kinds=("forward",))
    fd = cmp.first_divergence
    assert fd.layer == "relu1" and fd.only_in == "a" and fd.worst_text("A", "B") == "only in A"
    assert any(l.only_in == "b" and l.layer == "relu_renamed" for l in cmp.layers)


def test_rel_diff():
    assert rel_diff(1.0, 1.0) == 0
    assert rel_diff(1.0, 1.1) == pytest.approx(0.1 / 1.1)
    assert rel_diff(float("nan"), float("nan")) == 0
    assert rel_diff(float("nan"), 1.0) == math.inf
    assert rel_diff(float("inf"), float("inf")) == 0 and rel_diff(float("inf"), 1.0) == math.inf
    assert rel_diff(0.0, 1e-30) == 0                # both below atol
    assert rel_diff(None, 1.0) == math.inf


@pytest.mark.gpu
def test_cpu_vs_gpu():
    net_c, a = _run()
    backend.set_mode_gpu()
    try:
        net_g = engine.Net(LENET, engine.TRAIN)
        net_g.CopyTrainedLayersFrom(net_c.ToProto())
        rng = np.random.default_rng(0)
        net_g.blobs["data"].data[...] = rng.random(net_g.blobs["data"].shape)
        net_g.blobs["label"].data[...] = rng.integers(0, 10, 64)
        b = Recorder(net_g)
        net_g.forward()
        net_g.backward()
    finally:
        backend.set_mode_cpu()
    assert b.steps[0].device == "GPU"
    cmp = compare_runs(a, b, rtol=1e-4, stats=("asum_mean", "l2", "min", "max"))
    assert cmp.ok, cmp.format(only_bad=True)


def test_a_tiny_bias_against_zero_is_not_the_worst_difference():
    """Issue 22: Compare cited conv1's bias, 1.2e-08 against 0 (a relative difference of 1
    between two tiny numbers), as the layer's worst; differences are measured against the
    layer's scale (weights, outputs near 1e-1 .. 1), so the weights that really differ are."""
    def edit(net):
        net.params["conv1"][1].data[...] = 1.2e-8          # the bias: zero in run A
        net.params["conv1"][0].data[0, 0, 0, 0] += 0.05     # and one weight moved
    _, a = _run()
    _, b = _run(edit)
    cmp = compare_runs(a, b, rtol=1e-4)
    conv1 = next(l for l in cmp.layers if l.kind == "forward" and l.layer == "conv1")
    assert not conv1.ok
    w = conv1.worst
    assert (w.role, w.index) == ("param", 0) or w.role == "top", (w.role, w.name, w.stat, w.a, w.b)
    bias = [d for d in conv1.blobs if d.role == "param" and d.index == 1 and d.which == "data"]
    assert bias and all(d.rel < 1e-4 and d.ok for d in bias)
    # alone (no weight moved), the bias's 1e-8 is float noise for a layer of that scale: the runs agree
    _, c = _run(lambda net: net.params["conv1"][1].data.__setitem__(Ellipsis, 1.2e-8))
    assert all(l.ok for l in compare_runs(a, c, rtol=1e-4).layers if l.kind == "forward" and l.layer == "conv1")

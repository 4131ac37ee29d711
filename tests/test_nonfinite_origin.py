"""engine.instruments.nonfinite: every source of NaN/Inf per branch, forward and
backward, with the offending layer's inputs and the cause."""
import numpy as np
import pytest

import engine
from engine.core import backend
from engine.instruments import health, nonfinite
from engine.instruments.debug import Recorder

# h feeds three branches: Log (NaN for h < 0), Power 0.5 (NaN for h < 0), Exp x100 (overflow);
# a and b meet in an Eltwise sum and go on to a loss, c goes nowhere.
BRANCHES = """
name: "Branches"
layer { name: "in" type: "Input" top: "x" top: "target"
        input_param { shape { dim: 2 dim: 8 } shape { dim: 2 dim: 2 } } }
layer { name: "fc" type: "InnerProduct" bottom: "x" top: "h"
        inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "log" type: "Log" bottom: "h" top: "a" }
layer { name: "pow" type: "Power" bottom: "h" top: "b" power_param { power: 0.5 } }
layer { name: "exp" type: "Exp" bottom: "h" top: "c" exp_param { scale: 100 } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "ab" }
layer { name: "ip" type: "InnerProduct" bottom: "ab" top: "y"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "target" top: "loss" }
"""

NORM = """
name: "Norm"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 dim: 2 dim: 2 } } }
layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" batch_norm_param { use_global_stats: false eps: 0 } }
"""

BACKWARD_LOG = """
name: "LogGrad"
force_backward: true
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 3 } } }
layer { name: "log" type: "Log" bottom: "x" top: "y" }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
"""


def _net(tmp_path, text, phase=engine.TRAIN):
    p = tmp_path / "net.prototxt"
    p.write_text(text)
    backend.set_random_seed(3)
    return engine.Net(str(p), phase)


@pytest.fixture
def branches(tmp_path):
    net = _net(tmp_path, BRANCHES)
    net.blobs["x"].data[...] = np.random.default_rng(0).standard_normal((2, 8))
    rec = Recorder(net)
    net.Forward()
    net.Backward()
    return net, rec


def test_every_forward_source_per_branch(branches):
    net, rec = branches
    fwd = nonfinite.sources(rec.steps[0], net)
    assert [(s.layer, s.blob, s.direction) for s in fwd] == [("log", "a", "forward"), ("pow", "b", "forward"),
                                                           ("exp", "c", "forward")]
    log, pw, ex = fwd
    h = net.blobs["h"].data
    assert log.nan == int((h < 0).sum()) and not log.entered
    assert "Log of a negative" in log.cause and "%.4g" % h.min() in log.cause
    assert "Power of a negative base" in pw.cause and "power 0.5 is not an integer" in pw.cause
    assert "Exp overflowed float32" in ex.cause and ex.inf == int((100 * h > 88.72).sum())
    # the inputs as they were when the layer ran: h through its split
    assert log.inputs[0].role == "bottom" and log.inputs[0].min == pytest.approx(float(h.min()))
    # a and b both reach sum, ip and loss: each source names the layers that carried it; c is carried by none
    assert log.carried_by == ["sum", "ip", "loss"] and pw.carried_by == ["sum", "ip", "loss"]
    assert ex.carried_by == []
    assert "Carried on by 3 layers: sum, ip, loss" in log.message


def test_backward_from_non_finite_forward_values_is_one_source(branches):
    net, rec = branches
    bwd = nonfinite.sources(rec.steps[1], net)
    assert len(bwd) == 1 and bwd[0].layer == "loss" and bwd[0].entered
    assert "came in from the forward pass" in bwd[0].cause and "bottom 'y'" in bwd[0].cause
    assert bwd[0].carried_by[:2] == ["ip", "sum"]


def test_health_reports_each_source_as_an_error(branches):
    net, rec = branches
    f = [x for x in health.check(rec.steps, net=net) if x.check == "nonfinite"]
    assert [(x.layer, x.direction) for x in f] == [("log", "forward"), ("pow", "forward"), ("exp", "forward"),
                                                  ("loss", "backward")]
    assert all(x.severity == "error" for x in f)


def test_division_by_zero_in_a_normaliser(tmp_path):
    net = _net(tmp_path, NORM)
    net.blobs["x"].data[...] = 1.5                       # constant: the batch variance is 0, eps is 0
    rec = Recorder(net)
    net.Forward()
    (src,) = nonfinite.sources(rec.steps[0], net)
    assert src.layer == "bn" and "division by zero in a normaliser (BatchNorm)" in src.cause
    assert "constant (min = max = 1.5)" in src.cause and "eps is 0" in src.cause


def test_log_gradient_at_zero(tmp_path):
    net = _net(tmp_path, BACKWARD_LOG)
    net.blobs["x"].data[...] = np.array([[1, 2, 3], [0.5, 1, 4]], np.float32)
    rec = Recorder(net)
    net.Forward()
    net.blobs["x"].data[0, 0] = 0                        # changed after forward: Log's backward divides by it
    net.Backward()
    (src,) = nonfinite.sources(rec.steps[1], net)
    assert src.direction == "backward" and src.layer == "log" and src.blob == "x" and not src.entered
    assert "1/x at x = 0 is infinite" in src.cause


def test_nan_set_from_outside_is_a_source_where_it_enters(tmp_path):
    net = _net(tmp_path, BRANCHES)
    x = np.ones((2, 8), np.float32)
    x[1, 3] = np.nan
    net.blobs["x"].data[...] = x
    rec = Recorder(net)
    net.Forward()
    srcs = nonfinite.sources(rec.steps[0], net)
    # it enters at the Input layer: the data the net was given
    assert [s.layer for s in srcs] == ["in"] and srcs[0].entered and srcs[0].blob == "x"
    assert "the data given to the net" in srcs[0].cause
    assert set(srcs[0].carried_by) >= {"fc", "log", "pow", "exp", "sum", "ip", "loss"}   # the rest carry it
    # the same NaN written into an activation between two ranges enters at the layer that reads it
    net.ForwardFromTo(0, 1)
    net.blobs["h"].data[0, 0] = np.nan
    net.ForwardFromTo(2, len(net.layers) - 1)
    srcs = nonfinite.sources(rec.steps[-1], net)
    assert srcs[0].entered and "already held them before this layer ran" in srcs[0].cause
    assert srcs[0].layer == net.layer_names[2]            # the split of h, the first to read it

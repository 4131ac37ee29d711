"""engine.instruments.health: checks over records -> findings."""
import math
import os

import numpy as np
import pytest

import engine
from engine.instruments import health
from engine.instruments.debug import BlobRecord, LayerRecord, Recorder, StepRecord, array_stats
from tests.nets import RELU, overflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stats(x):
    return array_stats(np.asarray(x, np.float32))


def _step(kind, layers, sid=1):
    return StepRecord(sid, kind, 0, len(layers), "CPU", layers)


def _net(tmp_path, text, phase=engine.TRAIN):
    p = tmp_path / "net.prototxt"
    p.write_text(text)
    return engine.Net(str(p), phase)


RELU_NET = """
name: "ReluNet"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 4 dim: 50 } } }
layer { name: "relu" type: "ReLU" bottom: "data" top: "data" }
"""


def test_dead_relu(tmp_path):
    net = _net(tmp_path, RELU_NET, engine.TEST)
    rec = Recorder(net)
    net.blobs["data"].data[...] = -np.abs(np.random.default_rng(0).standard_normal((4, 50))) - 0.1
    net.forward()
    f = health.check(rec.steps)
    assert [(x.check, x.layer, x.blob, x.severity) for x in f] == [("dead_relu", "relu", "data", "warning")]
    assert f[0].value == 1.0 and "dead" in f[0].message
    net.blobs["data"].data[...] = np.random.default_rng(1).standard_normal((4, 50))
    net.forward()
    assert health.check(rec.steps[-1:]) == []          # about half positive: healthy
    x = -np.ones((4, 50), np.float32)
    x[0, :6] = 1                                        # 97% zeros
    net.blobs["data"].data[...] = x
    net.forward()
    f = health.check(rec.steps[-1:])
    assert len(f) == 1 and "mostly dead" in f[0].message and f[0].value == pytest.approx(0.97)
    assert health.check(rec.steps[-1:], health.HealthConfig(dead_fraction=0.99)) == []


def _param_rec(name, w, g, propagate=True, layer="ip", type_="InnerProduct"):
    b = BlobRecord(name, "param", 0, _stats(w), _stats(g), propagate)
    return LayerRecord(0, layer, type_, "backward", 0.1, [b])


def test_vanishing_and_exploding_gradients():
    w = np.ones(100)
    steps = [_step("backward", [_param_rec("0", w, w * 1e-9)])]
    f = health.check(steps)
    assert [x.check for x in f] == ["vanishing_gradient"] and f[0].value == pytest.approx(1e-9, rel=1e-3)
    f = health.check([_step("backward", [_param_rec("0", w, w * 100)])])
    assert [x.check for x in f] == ["exploding_gradient"] and f[0].threshold == 10
    assert health.check([_step("backward", [_param_rec("0", w, w * 1e-2)])]) == []
    # Frozen params and all-zero weights (fresh biases) are not judged.
    assert health.check([_step("backward", [_param_rec("0", w, w * 0, propagate=False)])]) == []
    assert health.check([_step("backward", [_param_rec("1", w * 0, w)])]) == []
    # BatchNorm's blobs are statistics: Backward never writes their diff (no finding per BN layer)
    assert health.check([_step("backward", [_param_rec(k, w, w * 0, layer="bn", type_="BatchNorm")
                                            for k in "012"])]) == []


def test_gradient_flow():
    def bottom(name, g):
        return BlobRecord(name, "bottom", 0, _stats(np.ones(10)), _stats(g), True)
    layers = [LayerRecord(3, "loss", "SoftmaxWithLoss", "backward", 0, [bottom("fc", np.ones(10))]),
              LayerRecord(2, "fc", "InnerProduct", "backward", 0, [bottom("h2", np.ones(10) * 0.5)]),
              LayerRecord(1, "h", "Sigmoid", "backward", 0, [bottom("h1", np.ones(10) * 1e-6)])]
    f = health.check([_step("backward", layers)])
    assert [(x.check, x.layer, x.blob) for x in f] == [("gradient_flow", "h", "h1")]
    assert f[0].value == pytest.approx(1e-6, rel=1e-3)
    layers[2] = LayerRecord(1, "h", "Sigmoid", "backward", 0, [bottom("h1", np.ones(10) * 1e6)])
    f = health.check([_step("backward", layers)])
    assert f[0].check == "gradient_flow" and "exploding" in f[0].message


def _update(ratio_pairs):
    blobs = []
    for k, (w, d) in enumerate(ratio_pairs):
        b = BlobRecord(str(k), "param", k)
        b.before, b.delta = _stats(w), _stats(d)
        b.data = _stats(np.asarray(w) + np.asarray(d))
        from engine.instruments.debug import update_ratio
        b.ratio = update_ratio(b.delta.l2, b.before.l2)
        blobs.append(b)
    return _step("update", [LayerRecord(0, "conv", "Convolution", "update", 0.0, blobs)])


def test_update_ratio_band():
    w = np.ones(100)
    f = health.check([_update([(w, w * 1e-3)])])
    assert f == []
    f = health.check([_update([(w, w * 0.5), (w, w * 1e-6), (w * 0, w), (w, w * 0)])])
    assert [(x.check, x.blob) for x in f] == [("update_ratio", "0"), ("update_ratio", "1")]
    assert "too large" in f[0].message and "too small" in f[1].message
    cfg = health.HealthConfig(update_low=1e-7, update_high=1.0)
    assert health.check([_update([(w, w * 0.5), (w, w * 1e-6)])], cfg) == []


def test_a_warning_found_at_every_iteration_is_one_finding_with_its_count():
    """A learning rate too large warns at every solver iteration: the findings list the place
    once, with the latest iteration's message and how many steps found it (a 2000-iteration
    run's Findings tab and report do not repeat the same warning 2000 times)."""
    w = np.ones(100)
    steps = []
    for k, scale in enumerate((0.5, 0.4, 0.3)):
        s = _update([(w, w * scale), (w, w * 1e-3)])
        s.id = k + 1
        steps.append(s)
    steps.append(_update([(w, w * 1e-3), (w, w * 1e-6)]))      # blob 1 too small, once, blob 0 fine
    steps[-1].id = 4
    f = health.check(steps)
    assert [(x.check, x.blob, x.steps, x.step_id) for x in f] == [("update_ratio", "0", 3, 3),
                                                                  ("update_ratio", "1", 1, 4)]
    assert "0.3 > 0.01" in f[0].message           # the latest step's value
    assert f[0].to_dict()["steps"] == 3
    assert [x.steps for x in health.check(steps[:1])] == [1]


OVERFLOW = overflow((2, 5), RELU)


def test_nonfinite_reported_once_where_it_starts(tmp_path):
    net = _net(tmp_path, OVERFLOW, engine.TEST)
    net.blobs["data"].data[...] = np.array([[0, 0, 2, 0, 0], [0, 0, 0, 0, 0]], np.float32)
    rec = Recorder(net)
    net.forward()
    f = health.check(rec.steps)
    nf = [x for x in f if x.check == "nonfinite"]
    assert len(nf) == 1 and nf[0].layer == "exp3" and nf[0].severity == "error"
    assert "from finite inputs" in nf[0].message and "Exp overflowed float32" in nf[0].message
    assert f[0] is nf[0]                       # errors come first
    g = health.findings_from_nonfinite(rec.first_nonfinite)
    assert g[0].layer == "exp3" and g[0].check == "nonfinite"
    assert health.summarize(f)["error"] == 1


def test_checks_can_be_switched_off_and_findings_serialise(tmp_path):
    net = _net(tmp_path, RELU_NET, engine.TEST)
    rec = Recorder(net)
    net.blobs["data"].data[...] = -1
    net.forward()
    assert health.check(rec.steps, health.HealthConfig(checks=("nonfinite",))) == []
    f = health.check(rec.steps)[0]
    d = f.to_dict()
    assert d["check"] == "dead_relu" and health.Finding.from_dict(d) == f
    assert math.isfinite(d["value"])


# ---------------------------------------------------------------------- weights not loaded
DEPLOY = """
name: "Deploy"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "c1" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" }
layer { name: "conv2" type: "Convolution" bottom: "c1" top: "c2" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu2" type: "ReLU" bottom: "c2" top: "c2" }
layer { name: "fc" type: "InnerProduct" bottom: "c2" top: "fc" inner_product_param { num_output: 5 } }
layer { name: "relu3" type: "ReLU" bottom: "fc" top: "fc" }
"""


def test_weights_not_loaded_is_one_finding_that_explains_the_dead_relus(tmp_path):
    net = _net(tmp_path, DEPLOY, engine.TEST)            # no fillers: every param is constant 0, as in a deploy file
    rec = Recorder(net)
    net.blobs["data"].data[...] = np.random.default_rng(0).standard_normal((2, 3, 8, 8))
    net.forward()
    assert [f.check for f in health.check(rec.steps)] == ["dead_relu"] * 3        # without the net: 3 warnings
    f = health.check(rec.steps, net=net)
    assert [(x.check, x.severity) for x in f] == [("weights_not_loaded", "warning")]
    msg = f[0].message
    assert "all 6 param blobs of 3 layers still hold what their fillers made" in msg
    assert "6 of them are all zero (6 have no filler in the prototxt" in msg
    assert "3 ReLU layers" in msg and "relu1, relu2, relu3" in msg
    assert f[0].explains == ("relu1", "relu2", "relu3")      # the layers whose findings it took in
    assert "--weights" in msg
    # with trained-looking weights the finding goes and the ReLUs speak for themselves
    for name in ("conv1", "conv2", "fc"):
        for b in net.params[name]:
            b.data[...] = np.random.default_rng(1).standard_normal(b.data.shape) * 0.1
    net.forward()
    assert "weights_not_loaded" not in {x.check for x in health.check(rec.steps[-1:], net=net)}
    # nothing ran forward: no finding (it is about reading activations)
    assert health.check([], net=engine.Net(str(tmp_path / "net.prototxt"), engine.TEST)) == []


def test_weights_from_random_fillers_are_information_until_trained(tmp_path):
    sp = tmp_path / "solver.prototxt"
    lenet = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")
    sp.write_text('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 10\n' % lenet)
    solver = engine.get_solver(str(sp))
    net = solver.net
    net.blobs["data"].data[...] = np.random.default_rng(0).random(net.blobs["data"].shape)
    rec = Recorder(net)
    net.forward()
    f = [x for x in health.check(rec.steps, net=net) if x.check == "weights_not_loaded"]
    assert len(f) == 1 and f[0].severity == "info"
    assert "4 of them are all zero." in f[0].message          # the biases, by their constant 0 filler
    solver.step(1)
    assert "weights_not_loaded" not in {x.check for x in health.check(rec.steps, net=net)}


@pytest.mark.parametrize("text,shape", [
    ('type: "constant" value: 0.2', (4, 3)),
    ('type: "gaussian" std: 0.01', (64, 3, 5, 5)),
    ('type: "gaussian" mean: 1 std: 0.5 sparse: 3', (50, 40)),
    ('type: "uniform" min: -2 max: 1', (300,)),
    ('type: "xavier"', (32, 16, 3, 3)),
    ('type: "xavier" variance_norm: AVERAGE', (32, 16, 3, 3)),
    ('type: "msra" variance_norm: FAN_OUT', (32, 16, 3, 3)),
    ('type: "positive_unitball"', (10, 20)),
    ('type: "bilinear"', (3, 1, 4, 4)),
])
def test_filler_made_recognises_each_filler_and_not_a_changed_blob(text, shape):
    from google.protobuf import text_format

    from engine.core.blob import Blob
    from engine.core.fillers import fill
    from engine.proto import caffe_pb2
    fp = text_format.Parse(text, caffe_pb2.FillerParameter())
    b = Blob(shape)
    fill(b, fp)
    assert health.filler_made(b.data, fp)
    changed = b.data * 1.5 + 0.01
    assert not health.filler_made(changed, fp)


# ---------------------------------------------------------------------- root causes
def _bn_stack(depth, eps=1e-5):
    """Input -> depth x (Convolution -> BatchNorm -> Scale -> ReLU) -> InnerProduct, a
    deploy net (TEST: BatchNorm uses its stored statistics)."""
    layers = ['layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 4 dim: 6 dim: 6 } } }']
    prev = "data"
    for i in range(depth):
        layers.append('layer { name: "conv%d" type: "Convolution" bottom: "%s" top: "conv%d" convolution_param '
                      '{ num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "msra" } } }' % (i, prev, i))
        layers.append('layer { name: "bn%d" type: "BatchNorm" bottom: "conv%d" top: "conv%d" '
                      'batch_norm_param { eps: %g } }' % (i, i, i, eps))
        layers.append('layer { name: "scale%d" type: "Scale" bottom: "conv%d" top: "conv%d" '
                      'scale_param { bias_term: true } }' % (i, i, i))
        layers.append('layer { name: "relu%d" type: "ReLU" bottom: "conv%d" top: "conv%d" }' % (i, i, i))
        prev = "conv%d" % i
    layers.append('layer { name: "fc" type: "InnerProduct" bottom: "%s" top: "fc" inner_product_param '
                  '{ num_output: 3 weight_filler { type: "xavier" } } }' % prev)
    return "name: \"BNStack\"\n" + "\n".join(layers) + "\n"


def test_unfilled_batchnorm_statistics_are_named_as_the_root_cause_of_an_overflow(tmp_path):
    # each unfilled BatchNorm divides by sqrt(eps) (a gain of 316): 20 of them overflow float32
    engine.set_random_seed(3)
    net = _net(tmp_path, _bn_stack(20), engine.TEST)
    rec = Recorder(net)
    net.blobs["data"].data[...] = np.random.default_rng(0).standard_normal((2, 4, 6, 6))
    net.forward()
    f = health.check(rec.steps, net=net)
    assert f[0].check == "root_cause" and f[0].severity == "error" and f[0].layer == "bn0"
    assert "BatchNorm statistics never filled" in f[0].message and "a gain of 316" in f[0].message
    nan = next(x for x in f if x.check == "nonfinite")
    assert nan.layer != "bn0" and "root cause of the NaN/Inf at '%s'" % nan.layer in f[0].message
    assert "follows from the root cause: bn unfilled in bn0" in nan.message
    assert nan.layer in f[0].explains                          # the NaN/Inf sources it explains
    # the layer is in place (BatchNorm conv -> conv): what it read was finite, though the
    # blob holds Inf after it ran; the recorder's first NaN/Inf says so
    first = rec.first_nonfinite
    assert first.layer == nan.layer and first.inputs_finite and "its inputs were finite" in first.message
    causes = health.root_causes(net, net.layer_names.index(nan.layer))
    assert [c.kind for c in causes] == ["bn_unfilled"] and causes[0].layers[0] == "bn0"
    assert all(n.startswith("bn") for n in causes[0].layers)


def test_filled_statistics_and_real_blowups_have_no_false_root_cause(tmp_path):
    engine.set_random_seed(3)
    net = _net(tmp_path, _bn_stack(3), engine.TEST)
    assert [c.kind for c in health.root_causes(net)] == ["bn_unfilled"]
    for i in range(3):
        bn = net.params["bn%d" % i]
        bn[0].data[...] = 0.1
        bn[1].data[...] = 4.0          # stored sum of variances, times 1/factor
        bn[2].data[...] = 2.0          # the moving-average factor: variance = 2
    assert health.root_causes(net) == []
    # a channel whose variance is ~0 is still a gain of 1/sqrt(eps) there
    net.params["bn1"][1].data[2] = 0.0
    causes = health.root_causes(net)
    assert [c.kind for c in causes] == ["bn_zero_variance"] and causes[0].layers == ("bn1",)
    # a Scale whose factors are all 0: its output is the bias alone
    net.params["bn1"][1].data[2] = 4.0
    net.params["scale2"][0].data[...] = 0.0
    assert [(c.kind, c.layers) for c in health.root_causes(net)] == [("scale_zero", ("scale2",))]
    # upstream only: conv0's subtree does not see scale2
    assert health.root_causes(net, net.layer_names.index("conv1")) == []

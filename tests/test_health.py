"""engine.instruments.health: checks over records -> findings."""
import math

import numpy as np
import pytest

import engine
from engine.instruments import health
from engine.instruments.debug import BlobRecord, LayerRecord, Recorder, StepRecord, array_stats


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


def _param_rec(name, w, g, propagate=True, layer="ip"):
    b = BlobRecord(name, "param", 0, _stats(w), _stats(g), propagate)
    return LayerRecord(0, layer, "InnerProduct", "backward", 0.1, [b])


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


OVERFLOW = """
name: "Overflow"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 5 } } }
layer { name: "exp1" type: "Exp" bottom: "data" top: "e1" }
layer { name: "exp2" type: "Exp" bottom: "e1" top: "e2" }
layer { name: "exp3" type: "Exp" bottom: "e2" top: "e3" }
layer { name: "relu" type: "ReLU" bottom: "e3" top: "e3" }
"""


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

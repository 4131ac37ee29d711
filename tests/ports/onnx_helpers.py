"""Helpers of the ONNX port tests: build a net from prototxt text, give it random weights and
inputs, export it (every blob an output), run onnxruntime and compare every blob."""
import numpy as np
import pytest

import engine

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from engine import ports  # noqa: E402

#: the opsets every case runs at: the default and the newest onnxruntime runs
OPSETS = [13, "latest"]


def input_layers(inputs):
    """Input layers text for {name: shape}."""
    out = []
    for name, shape in inputs.items():
        dims = " ".join("dim: %d" % d for d in shape)
        out.append('layer { name: "%s" type: "Input" top: "%s" input_param { shape { %s } } }' % (name, name, dims))
    return "\n".join(out)


def make_net(text, tmp_path, phase=engine.TEST, stages=(), name="case"):
    path = tmp_path / ("%s.prototxt" % name)
    path.write_text(text)
    return engine.Net(str(path), phase, stages=list(stages))


def reshape_batch(net, batch):
    """Every input blob's first axis set to ``batch``, the net reshaped."""
    for name in net.inputs:
        b = net.blobs[name]
        if len(b.shape):
            b.reshape((batch,) + tuple(b.shape[1:]))
    net.reshape()
    return net


def export_and_verify(net, opset=13, seed=0, inputs=None, bn_scale_factor=None, all_blobs=True, params=True,
                      rtol=1e-5):
    """Random params (unless ``params`` is False) and inputs (unless given), export, check,
    verify; returns (ExportResult, VerifyResult)."""
    if params:
        ports.randomize_params(net, seed, bn_scale_factor=bn_scale_factor)
    if inputs is None:
        ports.random_inputs(net, seed)
    else:
        for k, v in inputs.items():
            net.blobs[k].data[...] = np.asarray(v, dtype=np.float32).reshape(net.blobs[k].shape)
    res = ports.export_onnx(net, opset=opset, all_blobs=all_blobs)
    assert res.opset == (13 if opset == 13 else ports.newest_opset())
    onnx.checker.check_model(res.model, full_check=True)
    result = ports.verify(net, res.model, rtol=rtol)
    return res, result


def assert_verified(result):
    assert result.rows, "no blob compared"
    assert result.ok, "\n" + str(result)
    missing = [r.blob for r in result.rows if r.note == "not in the ONNX model"]
    assert not missing, missing

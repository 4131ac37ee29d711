"""benchmarks/netgen.py's MobileNet v2 (shicai's deploy layout) and its rows in
benchmarks/run.py: the net builds with the published layer names and shapes, and the
PyTorch peer computes what the engine computes on it (skipped without PyTorch)."""
import collections

import numpy as np
import pytest

import engine
from benchmarks import netgen
from benchmarks import run as bench_run
from engine.proto import caffe_pb2


def test_mobilenet_v2_layers_and_shapes():
    p = netgen.mobilenet_v2(batch=2)
    assert len(p.layer) == 209
    types = collections.Counter(lp.type for lp in p.layer)
    assert types == {"Input": 1, "Convolution": 54, "BatchNorm": 53, "Scale": 53, "ReLU": 36,
                     "Eltwise": 10, "Pooling": 1, "Softmax": 1}
    by_name = {lp.name: lp for lp in p.layer}
    # 17 inverted residual blocks: expand (1x1), depthwise 3x3 (group = channels), linear 1x1
    dw = [lp for lp in p.layer if lp.type == "Convolution" and lp.convolution_param.group > 1]
    assert len(dw) == 17
    for lp in dw:
        cp = lp.convolution_param
        assert cp.group == cp.num_output and list(cp.kernel_size) == [3] and list(cp.pad) == [1]
        assert cp.engine == caffe_pb2.ConvolutionParameter.CAFFE
    assert [lp.name for lp in p.layer if lp.type == "Eltwise"] == [
        "block_3_1", "block_4_1", "block_4_2", "block_4_4", "block_4_5", "block_4_6",
        "block_5_1", "block_5_2", "block_6_1", "block_6_2"]
    assert list(by_name["block_4_2"].bottom) == ["block_4_1", "conv4_2/linear/bn"]
    # BatchNorm writes its own blob; Scale and ReLU work in place on it; linear has no ReLU
    assert list(by_name["conv3_1/dwise/bn"].top) == ["conv3_1/dwise/bn"]
    assert list(by_name["conv3_1/dwise/scale"].bottom) == list(by_name["conv3_1/dwise/scale"].top)
    assert "relu3_1/linear" not in by_name and "relu3_1/dwise" in by_name
    assert by_name["conv1/bn"].batch_norm_param.use_global_stats
    assert by_name["fc7"].convolution_param.bias_term and not by_name["conv6_4"].convolution_param.bias_term

    net = engine.Net.from_param(p, phase=engine.TEST)
    shapes = {"conv1/bn": (2, 32, 112, 112), "conv2_1/linear/bn": (2, 16, 112, 112),
              "conv2_2/dwise/bn": (2, 96, 56, 56), "block_3_1": (2, 24, 56, 56),
              "block_4_2": (2, 32, 28, 28), "conv4_7/linear/bn": (2, 96, 14, 14),
              "conv5_3/linear/bn": (2, 160, 7, 7), "conv6_3/linear/bn": (2, 320, 7, 7),
              "conv6_4/bn": (2, 1280, 7, 7), "pool6": (2, 1280, 1, 1), "prob": (2, 1000, 1, 1)}
    for name, shape in shapes.items():
        assert net.blobs[name].shape == shape, name
    # the published count: 3,504,872 weights in torchvision's MobileNet v2 (convolutions,
    # classifier, BatchNorm's scale and shift), plus shicai's 1x1 expand in conv2_1
    # (32 x 32 weights, 32 channels of BatchNorm + Scale)
    convs = sum(l.blobs[0].count + (l.blobs[1].count if len(l.blobs) > 1 else 0)
                for l in net.layers if l.type == "Convolution")
    scale_shift = sum(2 * l.blobs[0].count for l in net.layers if l.type == "Scale")
    assert convs + scale_shift == 3_504_872 + 32 * 32 + 2 * 32


def test_run_rows_and_targets():
    spec = bench_run.NETS["mobilenet_v2"]
    assert tuple(spec["batches"]) == (1, 8) and tuple(bench_run.NETS["resnet50_deploy"]["batches"]) == (1, 8)
    p = bench_run.net_param(spec, 8)
    assert p.force_backward and p.layer[0].input_param.shape[0].dim[0] == 8
    row = dict(net="mobilenet_v2", device="cpu", batch=8, ratio=dict(forward_backward=1.02),
               debug_overhead=0.1, memory=dict(ratio=1.0, ratio_caffe=1.0))
    t = bench_run.targets([row])[0]
    assert t["target"] == "mobilenet_v2 b8 cpu fwd+bwd <= 1.0x torch" and not t["met"]
    row["ratio"]["forward_backward"] = 0.97
    assert bench_run.targets([row])[0]["met"]
    caffenet = dict(row, net="caffenet", batch=4)
    assert bench_run.targets([caffenet])[0]["target"] == "caffenet cpu fwd+bwd <= 1.0x torch"


def test_torch_peer_matches_the_engine_on_mobilenet_v2():
    torch = pytest.importorskip("torch")
    from benchmarks import torch_ref
    p = netgen.mobilenet_v2(batch=1, image=32, num_classes=10)
    p.force_backward = True
    net = engine.Net.from_param(p, phase=engine.TEST)
    rng = np.random.default_rng(5)
    bench_run.randomize_weights(net, rng)
    x = rng.standard_normal(net.blobs["data"].shape).astype(np.float32)
    g = (rng.standard_normal(net.blobs["prob"].shape) * 1e-2).astype(np.float32)
    net.blobs["data"].data[...] = x
    net.ClearParamDiffs()
    net.ForwardFromTo(0, len(net.layers) - 1)
    net.blobs["prob"].diff[...] = g
    net.BackwardFromTo(len(net.layers) - 1, 0)

    tnet = torch_ref.TorchNet(net)
    env = tnet.forward(tnet.feed({"data": x}), ["data"])
    tnet.backward(env, {"prob": torch.tensor(g)})
    fails, worst, ill = torch_ref.compare(net, tnet, env, ["data"], rtol=1e-4, grad_rtol=1e-3)
    assert not fails, fails
    assert worst[1] < 1e-3
    # the depthwise weights' gradients were among the arrays compared
    assert "param diff conv3_1/dwise/0" in torch_ref._arrays(net, tnet, env, ["data"])

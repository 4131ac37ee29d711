"""BatchNorm -> Scale -> ReLU in one pass (engine.core.fusion): the Net takes it only where
nothing watches between the layers, and every number is the one the three layers give
(the blobs after Forward, the buffers Backward reads, and so the gradients), bit for bit."""
import numpy as np
import pytest

import engine
from engine.core import fusion
from engine.core.kernels import channel

pytestmark = pytest.mark.skipif(not channel.usable(np.zeros(1, np.float32)),
                                reason="the compiled loops (Numba) are not available")

NET = """name: "chain"
input: "data" input_shape { dim: %(n)d dim: 3 dim: 9 dim: 7 }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 5 kernel_size: 3 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "%(bn_top)s" %(bn_param)s }
layer { name: "scale" type: "Scale" bottom: "%(bn_top)s" top: "%(bn_top)s"
        scale_param { bias_term: %(bias)s filler { type: "gaussian" std: 1 } bias_filler { type: "gaussian" std: 1 } } }
%(relu)s
layer { name: "ip" type: "InnerProduct" bottom: "%(bn_top)s" top: "ip"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "target" top: "loss" }
input: "target" input_shape { dim: %(n)d dim: 4 }
"""
RELU = 'layer { name: "relu" type: "ReLU" bottom: "%s" top: "%s" }'


def _nets(tmp_path, n=2, bias="true", relu=True, global_stats=False, in_place=True):
    bn_top = "conv" if in_place else "bnout"
    text = NET % {"n": n, "bias": bias, "bn_top": bn_top,
                  "bn_param": "batch_norm_param { use_global_stats: true }" if global_stats else "",
                  "relu": RELU % (bn_top, bn_top) if relu else ""}
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    nets = []
    for _ in range(2):
        engine.set_random_seed(7)
        nets.append(engine.Net(str(path), engine.TRAIN))
    rng = np.random.default_rng(3)
    data = (rng.standard_normal(nets[0].blobs["data"].shape) * 2).astype(np.float32)
    target = rng.standard_normal(nets[0].blobs["target"].shape).astype(np.float32)
    for net in nets:
        net.blobs["data"].data[...] = data
        net.blobs["target"].data[...] = target
    if global_stats:        # trained statistics, the same in both
        mean = rng.standard_normal(5).astype(np.float32)
        var = np.abs(rng.standard_normal(5)).astype(np.float32) + 0.5
        for net in nets:
            bn = net.params["bn"]
            bn[0].data[...], bn[1].data[...], bn[2].data[...] = mean, var, 1.0
    return nets


def _state(net):
    out = {("blob", k): (b.data.copy(), b.diff.copy()) for k, b in net.blobs.items()}
    for name, ps in net.params.items():
        for j, p in enumerate(ps):
            out[("param", name, j)] = (p.data.copy(), p.diff.copy())
    for layer, name in zip(net.layers, net._layer_names):
        for attr in ("x_norm", "std", "temp"):
            buf = getattr(layer, attr, None)
            if buf is not None and buf.count:
                out[("buffer", name, attr)] = (buf.data.copy(),)
    return out


@pytest.mark.parametrize("bias, relu, global_stats, n", [("true", True, False, 2), ("false", True, False, 3),
                                                          ("true", False, False, 2), ("true", True, True, 2),
                                                          ("false", False, True, 1)])
def test_one_pass_gives_the_three_layers_numbers_bit_for_bit(tmp_path, bias, relu, global_stats, n):
    fused, plain = _nets(tmp_path, n=n, bias=bias, relu=relu, global_stats=global_stats)
    (chain,) = fusion.chains(fused).values()
    assert (fused._layer_names[chain.start], chain.length) == ("bn", 3 if relu else 2)
    plain.after_forward(lambda i: None)       # callbacks: the Net runs each layer (no chain)
    plain.after_backward(lambda i: None)
    calls, back = [], []
    real, real_back = fusion.forward, fusion.backward_relu_scale
    fusion.forward = lambda *a: (calls.append(a[0].start), real(*a))[1]
    fusion.backward_relu_scale = lambda *a: (back.append(a[0].start), real_back(*a))[1]
    try:
        for _ in range(2):          # twice: the running statistics move, the buffers are reused
            lf, lp = fused.forward()["loss"], plain.forward()["loss"]
            fused.backward()
            plain.backward()
            assert np.array_equal(lf, lp)
            sf, sp = _state(fused), _state(plain)
            assert sf.keys() == sp.keys()
            for k in sf:
                for a, b in zip(sf[k], sp[k]):
                    assert np.array_equal(a, b, equal_nan=True), k
    finally:
        fusion.forward, fusion.backward_relu_scale = real, real_back
    assert calls == [chain.start] * 2      # the fused net took the chain, the watched one did not
    assert back == ([chain.start] * 2 if relu else [])


def test_a_chain_is_not_taken_where_someone_could_look_between(tmp_path):
    (net, _) = _nets(tmp_path)
    assert fusion.chains(net)
    from engine.instruments.debug import Recorder
    seen = []
    rec = Recorder(net, level="health")
    bn = list(net._layer_names).index("bn")
    real = fusion.forward
    fusion.forward = lambda *a: (seen.append(a[0].start), real(*a))[1]
    try:
        net.forward()
        assert not seen and [l.layer for l in rec.steps[-1].layers][bn:bn + 3] == ["bn", "scale", "relu"]
        rec.detach()
        net.ForwardFromTo(0, bn + 1)        # a range that ends inside the chain: layer by layer
        assert not seen
        net.ForwardFromTo(0, bn + 2)
        assert seen == [bn]
    finally:
        fusion.forward = real


def test_no_chain_where_the_blob_is_not_shared_in_place(tmp_path):
    (net, _) = _nets(tmp_path, in_place=False)      # the BatchNorm writes bnout, Scale and ReLU in place on it
    assert [net._layer_names[i] for i in fusion.chains(net)] == ["bn"]
    text = NET % {"n": 2, "bias": "true", "bn_top": "conv", "bn_param": "", "relu": ""}
    text = text.replace('layer { name: "scale" type: "Scale" bottom: "conv" top: "conv"',
                        'layer { name: "scale" type: "Scale" bottom: "conv" top: "scaled"')
    text = text.replace('bottom: "conv" top: "ip"', 'bottom: "scaled" top: "ip"')
    path = tmp_path / "other.prototxt"
    path.write_text(text)
    assert fusion.chains(engine.Net(str(path), engine.TRAIN)) == {}


def test_where_the_one_pass_does_not_serve_the_layers_run_their_own_passes(tmp_path, monkeypatch):
    fused, plain = _nets(tmp_path)
    plain.after_forward(lambda i: None)
    plain.after_backward(lambda i: None)
    taken = []
    monkeypatch.setattr(fusion, "_one_pass", lambda *a: taken.append(1) and False)
    for _ in range(2):
        assert np.array_equal(fused.forward()["loss"], plain.forward()["loss"])
        fused.backward()
        plain.backward()
    assert len(taken) == 2            # the chain was run, its one pass declined
    sf, sp = _state(fused), _state(plain)
    for k in sf:
        for a, b in zip(sf[k], sp[k]):
            assert np.array_equal(a, b, equal_nan=True), k

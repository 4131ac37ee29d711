"""engine.instruments.analysis: FLOPs/MACC against hand-computed values, memory reconciling with Caffe."""
import glob
import json
import os

import pytest

import engine
from engine.instruments.analysis import analyze_net, human_bytes, human_count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = sorted(p for p in glob.glob(os.path.join(ROOT, "examples", "*", "*.prototxt"))
                  if "solver" not in p and "lmdb" not in p)


def _net(tmp_path, body, shape=(2, 4, 9, 9), phase=engine.TRAIN, extra_inputs=""):
    text = ('name: "t"\nlayer { name: "in" type: "Input" top: "data" %s input_param { shape { %s } %s } }\n%s'
            % ('top: "data2" top: "data3"' if extra_inputs else "", " ".join("dim: %d" % d for d in shape),
               extra_inputs, body))
    p = tmp_path / "net.prototxt"
    p.write_text(text)
    return engine.Net(str(p), phase)


def _layer(tmp_path, body, name, **kw):
    a = analyze_net(_net(tmp_path, body, **kw))
    return a.layer(name)


def test_convolution_with_groups_and_dilation(tmp_path):
    l = _layer(tmp_path, 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param '
                         '{ num_output: 6 kernel_size: 3 group: 2 dilation: 2 } }', "c")
    # out 2x6x5x5 (9 - 5 + 1 = 5); each output: C_in/group * 3 * 3 = 2 * 9 = 18 MACs.
    assert l.top_shapes == [[2, 6, 5, 5]]
    assert l.macc == 300 * 18
    assert l.flops == 2 * 300 * 18 + 300
    assert l.params == 6 * 2 * 9 + 6
    l = _layer(tmp_path, 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param '
                         '{ num_output: 4 kernel_h: 3 kernel_w: 1 stride: 2 pad: 1 bias_term: false } }', "c")
    # out 2x4x5x6: h (9 + 2 - 3)/2 + 1 = 5, w (9 + 2 - 1)/2 + 1 = 6; K = 4 * 3 * 1 = 12.
    assert l.top_shapes == [[2, 4, 5, 6]]
    assert (l.macc, l.flops) == (240 * 12, 2 * 240 * 12)


def test_deconvolution(tmp_path):
    l = _layer(tmp_path, 'layer { name: "d" type: "Deconvolution" bottom: "data" top: "d" convolution_param '
                         '{ num_output: 6 kernel_size: 3 stride: 2 group: 2 } }', "d", shape=(2, 4, 3, 3))
    # in 2x4x3x3 = 72 values, each scattered to C_out/group * 3 * 3 = 27 outputs; out 2x6x7x7 = 588.
    assert l.top_shapes == [[2, 6, 7, 7]]
    assert l.macc == 72 * 27
    assert l.flops == 2 * 72 * 27 + 588


def test_inner_product_axis_and_transpose(tmp_path):
    for transpose in ("false", "true"):
        l = _layer(tmp_path, 'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param '
                             '{ num_output: 7 axis: 2 transpose: %s } }' % transpose, "ip", shape=(2, 3, 4, 5))
        # M = 2 * 3, K = 4 * 5, N = 7.
        assert l.top_shapes == [[2, 3, 7]]
        assert l.macc == 6 * 20 * 7
        assert l.flops == 2 * 6 * 20 * 7 + 6 * 7
        assert l.params == 20 * 7 + 7
    l = _layer(tmp_path, 'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param '
                         '{ num_output: 3 bias_term: false } }', "ip", shape=(5, 8))
    assert (l.macc, l.flops) == (5 * 8 * 3, 2 * 5 * 8 * 3)


def test_pooling(tmp_path):
    for pool in ("MAX", "AVE"):
        l = _layer(tmp_path, 'layer { name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param '
                             '{ pool: %s kernel_size: 3 stride: 2 } }' % pool, "p", shape=(1, 2, 7, 7))
        assert l.top_shapes == [[1, 2, 3, 3]]
        assert (l.macc, l.flops) == (0, 18 * 9)
    l = _layer(tmp_path, 'layer { name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param '
                         '{ pool: AVE global_pooling: true } }', "p", shape=(1, 2, 7, 7))
    assert l.flops == 2 * 49
    l = _layer(tmp_path, 'layer { name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param '
                         '{ pool: MAX kernel_h: 2 kernel_w: 3 stride: 1 } }', "p", shape=(1, 1, 4, 4))
    assert l.top_shapes == [[1, 1, 3, 2]] and l.flops == 6 * 6


def test_eltwise(tmp_path):
    three = 'shape { dim: 2 dim: 3 dim: 4 } shape { dim: 2 dim: 3 dim: 4 }'
    body = ('layer { name: "e" type: "Eltwise" bottom: "data" bottom: "data2" bottom: "data3" top: "e" '
            'eltwise_param { operation: %s %s } }')
    l = _layer(tmp_path, body % ("SUM", ""), "e", shape=(2, 3, 4), extra_inputs=three)
    assert (l.macc, l.flops) == (0, 24 * 2)
    l = _layer(tmp_path, body % ("SUM", "coeff: 1 coeff: 2 coeff: 1"), "e", shape=(2, 3, 4), extra_inputs=three)
    assert (l.macc, l.flops) == (72, 48 + 72)
    for op in ("PROD", "MAX"):
        l = _layer(tmp_path, body % (op, ""), "e", shape=(2, 3, 4), extra_inputs=three)
        assert (l.macc, l.flops) == (0, 48)


def test_lrn(tmp_path):
    n = 2 * 4 * 9 * 9
    l = _layer(tmp_path, 'layer { name: "n" type: "LRN" bottom: "data" top: "n" lrn_param { local_size: 5 } }', "n")
    assert (l.macc, l.flops) == (n * 5, n * 13)
    l = _layer(tmp_path, 'layer { name: "n" type: "LRN" bottom: "data" top: "n" lrn_param { local_size: 3 '
                         'norm_region: WITHIN_CHANNEL } }', "n")
    assert (l.macc, l.flops) == (n * 9, n * 21)


def test_batchnorm_scale_bias_neurons_softmax(tmp_path):
    n = 2 * 4 * 9 * 9
    bn = 'layer { name: "bn" type: "BatchNorm" bottom: "data" top: "bn" }'
    assert _layer(tmp_path, bn, "bn", phase=engine.TRAIN).flops == 5 * n
    assert _layer(tmp_path, bn, "bn", phase=engine.TEST).flops == 2 * n
    bn_g = ('layer { name: "bn" type: "BatchNorm" bottom: "data" top: "bn" '
            'batch_norm_param { use_global_stats: true } }')
    assert _layer(tmp_path, bn_g, "bn", phase=engine.TRAIN).flops == 2 * n
    scale = 'layer { name: "s" type: "Scale" bottom: "data" top: "s" scale_param { bias_term: true } }'
    l = _layer(tmp_path, scale, "s")
    assert (l.macc, l.flops, l.params) == (n, 2 * n, 8)
    l = _layer(tmp_path, 'layer { name: "s" type: "Scale" bottom: "data" top: "s" }', "s")
    assert (l.macc, l.flops) == (0, n)
    assert _layer(tmp_path, 'layer { name: "b" type: "Bias" bottom: "data" top: "b" }', "b").flops == n
    for t in ("ReLU", "Sigmoid", "TanH", "AbsVal", "ELU", "PReLU"):
        assert _layer(tmp_path, 'layer { name: "r" type: "%s" bottom: "data" top: "r" }' % t, "r").flops == n
    assert _layer(tmp_path, 'layer { name: "r" type: "ReLU" bottom: "data" top: "data" }', "r").flops == n
    assert _layer(tmp_path, 'layer { name: "sm" type: "Softmax" bottom: "data" top: "sm" }', "sm").flops == 5 * n
    l = _layer(tmp_path, 'layer { name: "c" type: "Concat" bottom: "data" bottom: "data" top: "c" }', "c")
    assert (l.macc, l.flops, l.counted) == (0, 0, True)
    l = _layer(tmp_path, 'layer { name: "f" type: "Flatten" bottom: "data" top: "f" }', "f")
    assert (l.flops, l.shared_top_bytes, l.allocated_top_bytes) == (0, n * 4, 0)


def test_softmax_with_loss(tmp_path):
    body = ('layer { name: "l" type: "Input" top: "label" input_param { shape { dim: 6 } } }\n'
            'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "data" bottom: "label" top: "loss" }')
    l = _layer(tmp_path, body, "loss", shape=(6, 10))
    assert l.flops == 60 * 5 + 6


def test_other_counted_types(tmp_path):
    n = 2 * 4 * 9 * 9
    l = _layer(tmp_path, 'layer { name: "m" type: "MVN" bottom: "data" top: "m" }', "m")
    assert l.flops == 5 * n
    l = _layer(tmp_path, 'layer { name: "m" type: "MVN" bottom: "data" top: "m" mvn_param { normalize_variance: '
                         'false } }', "m")
    assert l.flops == 2 * n
    l = _layer(tmp_path, 'layer { name: "r" type: "Reduction" bottom: "data" top: "r" reduction_param '
                         '{ operation: SUMSQ } }', "r")
    assert l.flops == 2 * n
    assert _layer(tmp_path, 'layer { name: "r" type: "Reduction" bottom: "data" top: "r" }', "r").flops == n
    assert _layer(tmp_path, 'layer { name: "a" type: "ArgMax" bottom: "data" top: "a" }', "a").flops == n
    l = _layer(tmp_path, 'layer { name: "l" type: "EuclideanLoss" bottom: "data" bottom: "data" top: "l" }', "l")
    assert l.flops == 3 * n
    # SPP, 2 levels on 7x7: level 0 one 7x7 window, level 1 four 4x4 windows, per channel.
    l = _layer(tmp_path, 'layer { name: "s" type: "SPP" bottom: "data" top: "s" spp_param { pyramid_height: 2 } }',
               "s", shape=(1, 2, 7, 7))
    assert l.flops == 2 * 49 + 2 * 4 * 16
    l = _layer(tmp_path, 'layer { name: "e" type: "Embed" bottom: "data" top: "e" embed_param { num_output: 4 '
                         'input_dim: 10 } }', "e", shape=(3,))
    assert (l.macc, l.flops, l.params) == (0, 12, 44)
    lstm = ('layer { name: "in2" type: "Input" top: "x" top: "cont" input_param { shape { dim: 1 dim: 3 dim: 20 } '
            'shape { dim: 1 dim: 3 } } }\n'
            'layer { name: "u" type: "LSTMUnit" bottom: "data" bottom: "x" bottom: "cont" top: "c" top: "h" }')
    assert _layer(tmp_path, lstm, "u", shape=(1, 3, 5)).flops == 9 * 15
    l = _layer(tmp_path, 'layer { name: "i" type: "Im2col" bottom: "data" top: "i" convolution_param '
                         '{ kernel_size: 3 } }', "i")
    assert (l.flops, l.counted) == (0, True)


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
@pytest.mark.parametrize("phase", [engine.TRAIN, engine.TEST])
def test_memory_totals_equal_caffes_on_the_examples(path, phase):
    net = engine.Net(path, phase)
    a = analyze_net(net)
    t = a.totals
    assert t["caffe_data_bytes"] == net.memory_used_bytes
    assert t["caffe_data_bytes"] == t["allocated_top_bytes"] + t["inplace_bytes"] + t["shared_top_bytes"]
    assert t["reconciles"] and t["uncounted_layers"] == 0
    assert sum(l.memory_bytes for l in a.layers) == net.memory_used_bytes
    assert t["params_all"] == sum(b.count for l in net.layers for b in l.blobs)
    assert t["params"] == sum(p.count for p in net.learnable_params)
    json.dumps(a.to_dict())


def test_lenet_numbers():
    net = engine.Net(os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt"), engine.TRAIN)
    a = analyze_net(net)
    # conv1: 64 x 20 x 24 x 24 outputs x 25 taps; conv2: 64 x 50 x 8 x 8 x (20 x 25); ip1: 64 x 800 x 500.
    assert a.layer("conv1").macc == 64 * 20 * 24 * 24 * 25
    assert a.layer("conv2").macc == 64 * 50 * 8 * 8 * 500
    assert a.layer("ip1").macc == 64 * 800 * 500
    assert a.layer("relu1").inplace_bytes == 64 * 500 * 4 and a.layer("relu1").inplace_tops == ["ip1"]
    assert a.totals["inplace_bytes"] == 64 * 500 * 4
    assert a.totals["params"] == 431080


def test_shared_params_and_splits():
    net = engine.Net(os.path.join(ROOT, "examples", "shared_stages", "siamese_stages.prototxt"), engine.TRAIN)
    a = analyze_net(net)
    shared = [l for l in a.layers if l.shared_params]
    assert shared and all(l.params_owned == 0 for l in shared)
    assert a.totals["shared_param_bytes"] == sum(2 * 4 * l.params for l in shared)
    assert a.totals["params"] < a.totals["params_all"]
    net = engine.Net(os.path.join(ROOT, "examples", "resnet_tiny", "resnet_tiny.prototxt"), engine.TRAIN)
    a = analyze_net(net)
    splits = [l for l in a.layers if l.type == "Split"]
    assert splits and a.totals["shared_top_bytes"] == sum(l.top_data_bytes for l in splits)
    assert all(l.allocated_top_bytes == 0 and l.allocated_diff_bytes == l.top_diff_bytes for l in splits)


ZOO = ["models/bvlc_googlenet/deploy.prototxt", "models/bvlc_googlenet/train_val.input.prototxt",
       "models/bvlc_reference_caffenet/deploy.prototxt", "models/bvlc_reference_rcnn_ilsvrc13/deploy.prototxt",
       "examples/cifar10/cifar10_full_sigmoid_train_test_bn.input.prototxt", "examples/mnist/lenet.prototxt",
       "examples/siamese/mnist_siamese_train_test.input.prototxt",
       "examples/net_surgery/bvlc_caffenet_full_conv.prototxt"]


@pytest.mark.shared
@pytest.mark.parametrize("rel", ZOO)
def test_memory_totals_on_zoo_nets(shared_dir, rel):
    for phase in (engine.TRAIN, engine.TEST):
        net = engine.Net(str(shared_dir / "zoo" / rel), phase)
        a = analyze_net(net)
        assert a.totals["reconciles"], rel
        assert a.totals["uncounted_layers"] == 0


@pytest.mark.shared
@pytest.mark.parametrize("case", ["googlenet_deploy", "caffenet_train_init", "cifar10_bn_train", "lenet_test",
                                  "siamese_train", "layer_conv_group_dilation", "layer_deconv"])
def test_memory_equals_real_caffes_log(shared_dir, case):
    spec = json.loads((shared_dir / "golden" / "cases" / (case + ".json")).read_text())
    ref = json.loads((shared_dir / "golden" / "caffe" / (case + ".json")).read_text())
    caffe_bytes = [int(m.split(": ")[1]) for f, m in ref["log"]["init"] if m.startswith("Memory required for data")][-1]
    phase = engine.TRAIN if spec.get("phase", "TEST") == "TRAIN" else engine.TEST
    net = engine.Net(str(shared_dir / "zoo" / spec["prototxt"]), phase, level=spec.get("level", 0),
                     stages=list(spec.get("stages", [])))
    assert analyze_net(net).totals["caffe_data_bytes"] == caffe_bytes


def test_googlenet_flops_order_of_magnitude(shared_dir):
    net = engine.Net(str(shared_dir / "zoo" / "models/bvlc_googlenet/deploy.prototxt"), engine.TEST)
    a = analyze_net(net)
    batch = net.blobs["data"].shape[0]
    # GoogLeNet: about 1.5 G multiply-adds and 7 M params per image.
    assert 1.4e9 < a.totals["macc"] / batch < 1.7e9
    assert 6.5e6 < a.totals["params"] < 7.1e6


def test_recurrent_layers_count_their_unrolled_net(shared_dir):
    net = engine.Net(str(shared_dir / "zoo" / "layers" / "rnn.prototxt"), engine.TRAIN)
    a = analyze_net(net)
    rnn = [l for l in a.layers if l.type in ("RNN", "LSTM")]
    assert rnn and all(l.counted and l.macc > 0 for l in rnn)


def test_human_units():
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(12) == "12 B"
    assert human_count(1234567) == "1.2M" and human_count(999) == "999"

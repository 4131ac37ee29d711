"""The table of docs/ports.md: nets x (exported?, verified max difference).

Each net is built in TEST with random weights (engine.ports.randomize_params: BatchNorm
statistics stored with a scale factor other than 1) and random inputs, exported to ONNX at
the opsets asked for, and verified blob by blob by onnxruntime against the engine
(engine.ports.verify).  The differences are relative to each blob's scale (max |engine|):
"worst blob" is the blob with the largest one, "output" the net's last output.

    python benchmarks/ports_table.py                    # every net, opsets 13 and latest
    python benchmarks/ports_table.py --quick            # the nets under 20M parameters
    python benchmarks/ports_table.py --nets resnet50,googlenet --opsets 13
"""
import argparse
import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import engine  # noqa: E402
from benchmarks import netgen, ports_nets  # noqa: E402

SHARED = os.environ.get("CAFFE_SHARED", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                     "..", "shared"))


def _zoo(rel, stages=(), batch=1):
    def build():
        path = os.path.join(SHARED, "zoo", rel)
        net = engine.Net(path, engine.TEST, stages=list(stages))
        for name in net.inputs:
            b = net.blobs[name]
            if len(b.shape):
                b.reshape((batch,) + tuple(b.shape[1:]))
        net.reshape()
        return net
    return build


def _param(builder):
    return lambda: engine.Net.from_param(builder(), phase=engine.TEST)


LSTM_NET = """name: "LSTM-LM"
layer { name: "data" type: "Input" top: "x" top: "cont" input_param { shape { dim: 10 dim: 2 dim: 32 }
        shape { dim: 10 dim: 2 } } }
layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "lstm1"
        recurrent_param { num_output: 64 weight_filler { type: "uniform" min: -0.08 max: 0.08 } } }
layer { name: "lstm2" type: "LSTM" bottom: "lstm1" bottom: "cont" top: "lstm2"
        recurrent_param { num_output: 64 weight_filler { type: "uniform" min: -0.08 max: 0.08 } } }
layer { name: "predict" type: "InnerProduct" bottom: "lstm2" top: "predict"
        inner_product_param { num_output: 100 axis: 2 } }
layer { name: "probs" type: "Softmax" bottom: "predict" top: "probs" softmax_param { axis: 2 } }
"""


def _text(text):
    def build():
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as f:
            f.write(text)
        try:
            return engine.Net(f.name, engine.TEST)
        finally:
            os.unlink(f.name)
    return build


NETS = [
    # (key, label, input, builder, big)
    ("resnet50", "ResNet-50 (KaimingHe's layout)", "1x3x224x224", _param(lambda: netgen.resnet(50, fillers=False)),
     True),
    ("googlenet", "GoogLeNet (zoo deploy)", "1x3x224x224", _zoo("models/bvlc_googlenet/deploy.prototxt"), False),
    ("caffenet", "CaffeNet (zoo deploy)", "1x3x227x227", _zoo("models/bvlc_reference_caffenet/deploy.prototxt"),
     True),
    ("rcnn", "R-CNN ILSVRC13 (zoo deploy)", "1x3x227x227",
     _zoo("models/bvlc_reference_rcnn_ilsvrc13/deploy.prototxt"), True),
    ("caffenet_conv", "CaffeNet fully convolutional (zoo)", "1x3x451x451",
     _zoo("examples/net_surgery/bvlc_caffenet_full_conv.prototxt"), True),
    ("squeezenet10", "SqueezeNet 1.0", "1x3x227x227", _param(lambda: ports_nets.squeezenet("1.0")), False),
    ("squeezenet11", "SqueezeNet 1.1", "1x3x227x227", _param(lambda: ports_nets.squeezenet("1.1")), False),
    ("mobilenet", "MobileNet v1", "1x3x224x224", _param(lambda: netgen.mobilenet()), False),
    ("mobilenet_v2", "MobileNet v2", "1x3x224x224", _param(lambda: ports_nets.mobilenet_v2()), False),
    ("fcn8s", "FCN-8s (VGG-16, pad 100, Crop)", "1x3x64x64", _param(lambda: netgen.fcn8s(image=64)), True),
    ("mobilenet_b2", "MobileNet v1, batch 2", "2x3x224x224", _param(lambda: netgen.mobilenet(batch=2)), False),
    ("squeezenet11_b2", "SqueezeNet 1.1, batch 2", "2x3x227x227",
     _param(lambda: ports_nets.squeezenet("1.1", batch=2)), False),
    ("lstm", "2-layer LSTM, 10 timesteps (unrolled, state as I/O)", "10x2x32", _text(LSTM_NET), False),
    ("lenet", "LeNet (zoo deploy)", "64x1x28x28", _zoo("examples/mnist/lenet.prototxt", batch=64), False),
    ("lenet_tt", "LeNet train/test, TEST (loss, accuracy)", "100x1x28x28",
     _zoo("examples/mnist/lenet_train_test.input.prototxt", batch=100), False),
    ("cifar10_quick", "CIFAR-10 quick (zoo deploy)", "1x3x32x32", _zoo("examples/cifar10/cifar10_quick.prototxt"),
     False),
    ("cifar10_full", "CIFAR-10 full (zoo deploy; LRN WITHIN_CHANNEL)", "1x3x32x32",
     _zoo("examples/cifar10/cifar10_full.prototxt"), False),
    ("cifar10_bn", "CIFAR-10 sigmoid + BatchNorm, TEST", "100x3x32x32",
     _zoo("examples/cifar10/cifar10_full_sigmoid_train_test_bn.input.prototxt", batch=100), False),
    ("siamese", "Siamese MNIST train/test, TEST (ContrastiveLoss)", "64x2x28x28",
     _zoo("examples/siamese/mnist_siamese_train_test.input.prototxt", batch=64), False),
    ("autoencoder", "MNIST autoencoder, TEST (sigmoid CE + Euclidean)", "100x1x28x28",
     _zoo("examples/mnist/mnist_autoencoder.input.prototxt", stages=("test-on-test",), batch=100), False),
]


def run(keys=None, opsets=(13, "latest"), quick=False, seed=0, out=sys.stdout):
    from engine import ports
    rows = []
    for key, label, shape, build, big in NETS:
        if keys and key not in keys:
            continue
        if quick and big:
            continue
        for opset in opsets:
            t0 = time.perf_counter()
            try:
                net = build()
                ports.randomize_params(net, seed)
                ports.random_inputs(net, seed)
                res = ports.export_onnx(net, opset=opset)
                result = ports.verify(net, res.model)
            except Exception as e:          # a refusal or a failure is a row of the table too
                rows.append((label, shape, str(opset), "no: %s" % " ".join(str(e).split())[:80], "", "", "", "",
                             "%.0f" % (time.perf_counter() - t0)))
                continue
            params = sum(b.count for blobs in net.params.values() for b in blobs)
            worst = result.worst
            last = [r for r in result.rows if r.blob == net.outputs[-1]][0] if net.outputs else worst
            rows.append((label, shape, str(res.opset), "yes (%d nodes, %.1fM params)" % (res.nodes, params / 1e6),
                         "%d/%d" % (sum(r.ok for r in result.rows), len(result.rows)),
                         "%s %.1e" % (worst.blob, worst.max_rel_diff), "%.1e" % result.max_abs_diff,
                         "%s %.1e" % (last.blob, last.max_rel_diff), "%.0f" % (time.perf_counter() - t0)))
            out.write("  %s, opset %s: %s\n" % (label, res.opset, result.summary()))
            out.flush()
    head = ("net", "input", "opset", "exported", "blobs equal", "worst blob (rel)", "max abs diff", "output (rel)",
            "s")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nets", help="comma separated keys: %s" % ",".join(k for k, *_ in NETS))
    p.add_argument("--opsets", default="13,latest", help="comma separated (default 13,latest)")
    p.add_argument("--quick", action="store_true", help="skip the nets over 20M parameters")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    opsets = [o if o == "latest" else int(o) for o in a.opsets.split(",")]
    keys = set(a.nets.split(",")) if a.nets else None
    table = run(keys, opsets, a.quick, a.seed, out=sys.stderr)
    print(table)


if __name__ == "__main__":
    main()

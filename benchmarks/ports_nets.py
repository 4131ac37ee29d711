"""Deploy nets for the ONNX port's tests and table (beside benchmarks/netgen.py's ResNet,
MobileNet v1 and FCN-8s): SqueezeNet 1.0 / 1.1 as DeepScale's deploy files name them and
MobileNet v2 as shicai's MobileNet-Caffe names it, as NetParameters with fillers.

    python benchmarks/ports_nets.py squeezenet1.1 --image 227 > squeezenet.prototxt
"""
import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from google.protobuf import text_format  # noqa: E402

from benchmarks.netgen import _Builder  # noqa: E402


def _relu(b, name, blob):
    b.layer(name, "ReLU", [blob], [blob])


def _fill(layer):
    p = layer.convolution_param
    p.weight_filler.type = "xavier"
    p.bias_filler.type = "constant"
    p.bias_filler.value = 0.0


def squeezenet(version="1.1", batch=1, image=227, num_classes=1000):
    """SqueezeNet (DeepScale/SqueezeNet deploy.prototxt): fire modules (squeeze 1x1, expand
    1x1 + 3x3, Concat), ceil-mode max pooling, conv10 + global average pooling + Softmax."""
    b = _Builder("SqueezeNet%s" % version)
    b.input([batch, 3, image, image])

    def conv(name, bottom, out, k, stride=1, pad=0):
        b.conv(name, bottom, out, k, stride, pad)
        _fill(b.net.layer[-1])
        return name

    def pool(name, bottom):
        p = b.layer(name, "Pooling", [bottom], [name]).pooling_param
        p.pool, p.kernel_size, p.stride = b.pb.PoolingParameter.MAX, 3, 2
        return name

    def fire(n, bottom, s, e):
        f = "fire%d" % n
        sq = conv(f + "/squeeze1x1", bottom, s, 1)
        _relu(b, f + "/relu_squeeze1x1", sq)
        e1 = conv(f + "/expand1x1", sq, e, 1)
        _relu(b, f + "/relu_expand1x1", e1)
        e3 = conv(f + "/expand3x3", sq, e, 3, pad=1)
        _relu(b, f + "/relu_expand3x3", e3)
        b.layer(f + "/concat", "Concat", [e1, e3], [f + "/concat"])
        return f + "/concat"

    if version == "1.0":
        x = conv("conv1", "data", 96, 7, stride=2)
        _relu(b, "relu_conv1", x)
        x = pool("pool1", x)
        x = fire(2, x, 16, 64)
        x = fire(3, x, 16, 64)
        x = fire(4, x, 32, 128)
        x = pool("pool4", x)
        x = fire(5, x, 32, 128)
        x = fire(6, x, 48, 192)
        x = fire(7, x, 48, 192)
        x = fire(8, x, 64, 256)
        x = pool("pool8", x)
        x = fire(9, x, 64, 256)
    else:
        x = conv("conv1", "data", 64, 3, stride=2)
        _relu(b, "relu_conv1", x)
        x = pool("pool1", x)
        x = fire(2, x, 16, 64)
        x = fire(3, x, 16, 64)
        x = pool("pool3", x)
        x = fire(4, x, 32, 128)
        x = fire(5, x, 32, 128)
        x = pool("pool5", x)
        x = fire(6, x, 48, 192)
        x = fire(7, x, 48, 192)
        x = fire(8, x, 64, 256)
        x = fire(9, x, 64, 256)
    b.layer("drop9", "Dropout", [x], [x]).dropout_param.dropout_ratio = 0.5
    x = conv("conv10", x, num_classes, 1)
    _relu(b, "relu_conv10", x)
    p = b.layer("pool10", "Pooling", [x], ["pool10"]).pooling_param
    p.pool, p.global_pooling = b.pb.PoolingParameter.AVE, True
    b.layer("prob", "Softmax", ["pool10"], ["prob"])
    return b.net


def mobilenet_v2(batch=1, image=224, num_classes=1000, width=1.0):
    """MobileNet v2 (shicai/MobileNet-Caffe's names: ``conv1``, ``conv2_1/expand``,
    ``conv2_1/dwise``, ``conv2_1/linear`` with ``/bn`` + ``/scale`` in place and ReLU,
    ``block_3_2`` residual Eltwise sums, ``conv6_4``, ``pool6``, ``fc7``, ``prob``)."""
    b = _Builder("MobileNetV2")
    b.input([batch, 3, image, image])

    def cbr(name, bottom, out, k, stride=1, pad=0, group=1, relu=True):
        b.conv(name, bottom, out, k, stride, pad, group, bias=False)
        b.net.layer[-1].convolution_param.weight_filler.type = "msra"
        b.layer(name + "/bn", "BatchNorm", [name], [name]).batch_norm_param.use_global_stats = True
        b.layer(name + "/scale", "Scale", [name], [name]).scale_param.bias_term = True
        if relu:
            _relu(b, "relu" + name[4:], name)
        return name

    def ch(c):
        return max(8, int(c * width))

    x = cbr("conv1", "data", ch(32), 3, 2, 1)
    cin = ch(32)
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    for stage, (t, c, n, s) in enumerate(settings, start=2):
        for i in range(1, n + 1):
            tag = "conv%d_%d" % (stage, i)
            stride = s if i == 1 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = cbr(tag + "/expand", y, hidden, 1)
            y = cbr(tag + "/dwise", y, hidden, 3, stride, 1, group=hidden)
            y = cbr(tag + "/linear", y, ch(c), 1, relu=False)
            if stride == 1 and cin == ch(c):
                name = "block_%d_%d" % (stage, i)
                b.layer(name, "Eltwise", [x, y], [name])
                y = name
            x, cin = y, ch(c)
    x = cbr("conv6_4", x, 1280, 1)
    p = b.layer("pool6", "Pooling", [x], ["pool6"]).pooling_param
    p.pool, p.global_pooling = b.pb.PoolingParameter.AVE, True
    b.conv("fc7", "pool6", num_classes, 1)
    _fill(b.net.layer[-1])
    b.layer("prob", "Softmax", ["fc7"], ["prob"])
    return b.net


def fcn8s_narrow(image=64):
    """FCN-8s (benchmarks/netgen.py: VGG-16 with pad 100, Deconvolution, Crop) with every VGG
    width divided by 8 and fc6/fc7 at 256: the same layers and geometry, a small caffemodel."""
    from benchmarks.netgen import fcn8s
    net = fcn8s(image=image)
    for layer in net.layer:
        p = layer.convolution_param
        if layer.type == "Convolution" and p.num_output in (64, 128, 256, 512):
            p.num_output //= 8
        elif layer.type == "Convolution" and p.num_output == 4096:
            p.num_output = 256
    return net


def prototxt(net):
    return text_format.MessageToString(net)


def main(argv=None):
    p = argparse.ArgumentParser(description="Write SqueezeNet 1.0/1.1 or MobileNet v2 deploy prototxts.")
    p.add_argument("net", choices=["squeezenet1.0", "squeezenet1.1", "mobilenet_v2"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--image", type=int, default=None)
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    a = p.parse_args(argv)
    if a.net.startswith("squeezenet"):
        net = squeezenet(a.net[len("squeezenet"):], batch=a.batch, image=a.image or 227)
    else:
        net = mobilenet_v2(batch=a.batch, image=a.image or 224)
    text = prototxt(net)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()

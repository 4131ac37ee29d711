"""ResNet-50/101/152 as Caffe NetParameters (prototxt text), after KaimingHe's
deep-residual-networks deploy prototxts: the bottleneck architecture (1x1,
3x3, 1x1 with a 1x1 projection on the first block of each stage, the stride
on the first 1x1), every convolution followed by in-place BatchNorm + Scale
(+ ReLU), Eltwise sums, 7x7 average pooling and a 1000-way classifier.

Layer and blob names are KaimingHe's: ``conv1``, ``bn_conv1``, ``scale_conv1``,
``res2a_branch1``, ``bn2a_branch2a``, ``res4b22`` (ResNet-101/152 number the
``b`` blocks of the long stages), ``pool5``, ``fc1000``, ``prob``.

- deploy (``train=False``): an Input layer ``data``, BatchNorm with
  ``use_global_stats: true``, Softmax ``prob``;
- train (``train=True``): Input ``data`` + ``label``, BatchNorm in batch mode,
  SoftmaxWithLoss ``loss`` and Accuracy in TEST;
- :func:`deploy_prototxt`: the deploy file as KaimingHe published it, for
  benchmarks of opening a real deploy net: the input as the old ``input`` /
  ``input_dim`` fields (Caffe upgrades them to an Input layer), no weight
  fillers (the weights come from a caffemodel), no bias on ``conv1``,
  BatchNorm with ``use_global_stats``; it is opened in TEST, as Caffe's tools
  and the inspector open a deploy net.

    python benchmarks/netgen.py 152 > resnet152_deploy.prototxt
    python benchmarks/netgen.py 50 --train --batch 8 -o resnet50_train.prototxt
    python benchmarks/netgen.py 152 --deploy-file -o ResNet-152-deploy.prototxt
    python benchmarks/netgen.py mobilenet_v2 --batch 8 -o mobilenet_v2_deploy.prototxt
"""
import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from google.protobuf import text_format  # noqa: E402

STAGES = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
WIDTHS = (64, 128, 256, 512)          # bottleneck width per stage; outputs are 4x


def _block_names(depth, stage, count):
    """KaimingHe's block suffixes: a, b, c, ... (ResNet-50 and the short stages)
    or a, b1, b2, ... (the long stages of ResNet-101/152)."""
    if depth == 50 or count <= 3:
        return [chr(ord("a") + i) for i in range(count)]
    return ["a"] + ["b%d" % i for i in range(1, count)]


def _layer_adder(net):
    """``layer(name, type, bottoms, tops)``: a new LayerParameter at the end of ``net``."""
    def layer(name, type_, bottoms, tops):
        l = net.layer.add()
        l.name, l.type = name, type_
        l.bottom.extend(bottoms)
        l.top.extend(tops)
        return l
    return layer


def _conv_geometry(l, num_output, kernel, stride=1, pad=0):
    """A Convolution layer's outputs, kernel, stride and pad (the last two only when not the
    defaults); returns its convolution_param."""
    p = l.convolution_param
    p.num_output = num_output
    p.kernel_size.append(kernel)
    if stride != 1:
        p.stride.append(stride)
    if pad:
        p.pad.append(pad)
    return p


def resnet(depth=50, batch=1, train=False, image=224, num_classes=1000, fillers=True, conv1_bias=True):
    """A ResNet NetParameter (``depth`` 50, 101 or 152)."""
    from engine.proto import caffe_pb2
    if depth not in STAGES:
        raise ValueError("depth must be one of %s" % sorted(STAGES))
    net = caffe_pb2.NetParameter()
    net.name = "ResNet-%d" % depth
    layer = _layer_adder(net)

    def conv(name, bottom, num_output, kernel, stride=1, pad=0, bias=False):
        l = layer(name, "Convolution", [bottom], [name])
        p = _conv_geometry(l, num_output, kernel, stride, pad)
        p.bias_term = bias
        if fillers:
            p.weight_filler.type = "msra"
            if bias:
                p.bias_filler.type = "constant"
        return name

    def bn_scale(blob, bn_name, scale_name):
        l = layer(bn_name, "BatchNorm", [blob], [blob])
        if not train:
            l.batch_norm_param.use_global_stats = True
        s = layer(scale_name, "Scale", [blob], [blob])
        s.scale_param.bias_term = True

    def relu(blob, name):
        layer(name, "ReLU", [blob], [blob])

    inp = layer("data", "Input", [], ["data", "label"] if train else ["data"])
    shape = inp.input_param.shape.add()
    shape.dim.extend([batch, 3, image, image])
    if train:
        inp.input_param.shape.add().dim.extend([batch])

    conv("conv1", "data", 64, 7, 2, 3, bias=conv1_bias)
    bn_scale("conv1", "bn_conv1", "scale_conv1")
    relu("conv1", "conv1_relu")
    pool = layer("pool1", "Pooling", ["conv1"], ["pool1"])
    pool.pooling_param.kernel_size, pool.pooling_param.stride = 3, 2
    pool.pooling_param.pool = caffe_pb2.PoolingParameter.MAX
    x = "pool1"
    for s, (count, width) in enumerate(zip(STAGES[depth], WIDTHS)):
        stage = s + 2
        for k, suffix in enumerate(_block_names(depth, stage, count)):
            tag = "%d%s" % (stage, suffix)
            stride = 2 if (k == 0 and stage > 2) else 1
            if k == 0:
                shortcut = conv("res%s_branch1" % tag, x, 4 * width, 1, stride)
                bn_scale(shortcut, "bn%s_branch1" % tag, "scale%s_branch1" % tag)
            else:
                shortcut = x
            a = conv("res%s_branch2a" % tag, x, width, 1, stride)
            bn_scale(a, "bn%s_branch2a" % tag, "scale%s_branch2a" % tag)
            relu(a, "res%s_branch2a_relu" % tag)
            b = conv("res%s_branch2b" % tag, a, width, 3, 1, 1)
            bn_scale(b, "bn%s_branch2b" % tag, "scale%s_branch2b" % tag)
            relu(b, "res%s_branch2b_relu" % tag)
            c = conv("res%s_branch2c" % tag, b, 4 * width, 1)
            bn_scale(c, "bn%s_branch2c" % tag, "scale%s_branch2c" % tag)
            out = "res%s" % tag
            layer(out, "Eltwise", [shortcut, c], [out])
            relu(out, "res%s_relu" % tag)
            x = out
    pool5 = layer("pool5", "Pooling", [x], ["pool5"])
    pool5.pooling_param.kernel_size, pool5.pooling_param.stride = image // 32, 1
    pool5.pooling_param.pool = caffe_pb2.PoolingParameter.AVE
    fc = layer("fc1000", "InnerProduct", ["pool5"], ["fc1000"])
    fc.inner_product_param.num_output = num_classes
    if fillers:
        fc.inner_product_param.weight_filler.type = "msra"
        fc.inner_product_param.bias_filler.type = "constant"
    if train:
        layer("loss", "SoftmaxWithLoss", ["fc1000", "label"], ["loss"])
        acc = layer("accuracy", "Accuracy", ["fc1000", "label"], ["accuracy"])
        acc.include.add().phase = caffe_pb2.TEST
    else:
        layer("prob", "Softmax", ["fc1000"], ["prob"])
    return net


def resnet_preact(depth=1001, batch=64, train=True, image=32, num_classes=10):
    """He et al.'s pre-activation ResNet for CIFAR ("Identity Mappings in Deep Residual
    Networks", 2016) as a Caffe train_val NetParameter: ResNet-1001 by default, the
    deepest ResNet published, and its prototxt the largest real one we know of (4,342
    layers, 0.96 MB; the limits of engine.core.limits must take it untouched).
    ``depth`` = 9n + 2: three stages of n bottleneck blocks (widths 16, 32, 64; outputs
    4x), each BatchNorm + Scale + ReLU -> 1x1 -> BN/Scale/ReLU -> 3x3 -> BN/Scale/ReLU ->
    1x1, summed (Eltwise) with the input (a 1x1 projection on each stage's first block);
    Data layers on CIFAR-10 LMDBs (TRAIN and TEST, mean file, mirror), every param's
    lr_mult/decay_mult written out, msra fillers, SoftmaxWithLoss and Accuracy."""
    from engine.proto import caffe_pb2
    if (depth - 2) % 9:
        raise ValueError("depth must be 9n + 2 (1001, 164, ...)")
    n = (depth - 2) // 9
    net = caffe_pb2.NetParameter()
    net.name = "ResNet-%d-preact-cifar10" % depth
    layer = _layer_adder(net)

    def conv(name, bottom, num_output, kernel, stride=1, pad=0):
        l = layer(name, "Convolution", [bottom], [name])
        for mult in (1, 2):
            ps = l.param.add()
            ps.lr_mult, ps.decay_mult = mult, 2 - mult
        p = _conv_geometry(l, num_output, kernel, stride, pad)
        p.weight_filler.type = "msra"
        p.bias_filler.type = "constant"
        return name

    def bn_relu(bottom, tag):
        top = "%s_bn" % tag
        bn = layer("%s_bn" % tag, "BatchNorm", [bottom], [top])
        for _ in range(3):
            bn.param.add().lr_mult = 0
        sc = layer("%s_scale" % tag, "Scale", [top], [top])
        sc.scale_param.bias_term = True
        layer("%s_relu" % tag, "ReLU", [top], [top])
        return top

    for phase, batch_size, source in ((caffe_pb2.TRAIN, batch, "examples/cifar10/cifar10_train_lmdb"),
                                      (caffe_pb2.TEST, 100, "examples/cifar10/cifar10_test_lmdb")):
        d = layer("cifar", "Data", [], ["data", "label"])
        d.include.add().phase = phase
        d.transform_param.mean_file = "examples/cifar10/mean.binaryproto"
        d.transform_param.mirror = phase == caffe_pb2.TRAIN
        d.data_param.source, d.data_param.batch_size = source, batch_size
        d.data_param.backend = caffe_pb2.DataParameter.LMDB
    x = conv("conv1", "data", 16, 3, 1, 1)
    for s, width in enumerate((16, 32, 64)):
        for k in range(n):
            tag = "stage%d_block%d" % (s + 1, k + 1)
            stride = 2 if (k == 0 and s > 0) else 1
            pre = bn_relu(x, "%s_pre" % tag)
            shortcut = conv("%s_proj" % tag, pre, 4 * width, 1, stride) if k == 0 else x
            a = bn_relu(conv("%s_conv1" % tag, pre, width, 1, stride), "%s_conv1" % tag)
            b = bn_relu(conv("%s_conv2" % tag, a, width, 3, 1, 1), "%s_conv2" % tag)
            c = conv("%s_conv3" % tag, b, 4 * width, 1)
            x = "%s_sum" % tag
            layer(x, "Eltwise", [shortcut, c], [x])
    x = bn_relu(x, "final")
    pool = layer("global_pool", "Pooling", [x], ["global_pool"])
    pool.pooling_param.pool = caffe_pb2.PoolingParameter.AVE
    pool.pooling_param.global_pooling = True
    fc = layer("fc10", "InnerProduct", ["global_pool"], ["fc10"])
    fc.inner_product_param.num_output = num_classes
    fc.inner_product_param.weight_filler.type = "msra"
    fc.inner_product_param.bias_filler.type = "constant"
    layer("loss", "SoftmaxWithLoss", ["fc10", "label"], ["loss"])
    acc = layer("accuracy", "Accuracy", ["fc10", "label"], ["accuracy"])
    acc.include.add().phase = caffe_pb2.TEST
    return net


def resnet_preact_prototxt(depth=1001, **kw):
    return text_format.MessageToString(resnet_preact(depth, **kw))


def resnet_prototxt(depth=50, **kw):
    return text_format.MessageToString(resnet(depth, **kw))


def deploy(depth=152, batch=1, image=224):
    """KaimingHe's ResNet-``depth``-deploy.prototxt as a NetParameter (see the module's docstring)."""
    net = resnet(depth, batch=batch, train=False, image=image, fillers=False, conv1_bias=False)
    first = net.layer[0]
    assert first.type == "Input"
    net.input.append(first.top[0])
    net.input_dim.extend(first.input_param.shape[0].dim)
    del net.layer[0]
    return net


def deploy_prototxt(depth=152, **kw):
    return text_format.MessageToString(deploy(depth, **kw))


class _Builder:
    """Appends layers to a NetParameter (the helpers MobileNet and FCN-8s share)."""

    def __init__(self, name):
        from engine.proto import caffe_pb2
        self.pb = caffe_pb2
        self.net = caffe_pb2.NetParameter()
        self.net.name = name

    def layer(self, name, type_, bottoms, tops):
        l = self.net.layer.add()
        l.name, l.type = name, type_
        l.bottom.extend(bottoms)
        l.top.extend(tops)
        return l

    def input(self, shape):
        self.layer("data", "Input", [], ["data"]).input_param.shape.add().dim.extend(shape)

    def conv(self, name, bottom, num_output, kernel, stride=1, pad=0, group=1, bias=True, top=None):
        l = self.layer(name, "Convolution", [bottom], [top or name])
        p = l.convolution_param
        p.num_output = num_output
        p.kernel_size.append(kernel)
        if stride != 1:
            p.stride.append(stride)
        if pad:
            p.pad.append(pad)
        if group != 1:
            p.group = group
        p.bias_term = bias
        return top or name


def mobilenet(batch=1, image=224, num_classes=1000):
    """MobileNet v1 as shicai's MobileNet-Caffe deploy file names it: ``conv1``,
    ``conv2_1/dw`` + ``conv2_1/dw/bn`` + ``conv2_1/dw/scale`` + ``relu2_1/dw``,
    ``conv2_1/sep`` ..., ``pool6``, ``fc7``, ``prob`` (in-place BatchNorm/Scale/ReLU)."""
    b = _Builder("MobileNet")
    b.input([batch, 3, image, image])

    def conv_bn(name, bottom, out, kernel, stride, pad, group, relu_name):
        b.conv(name, bottom, out, kernel, stride, pad, group, bias=False)
        b.layer(name + "/bn", "BatchNorm", [name], [name]).batch_norm_param.use_global_stats = True
        b.layer(name + "/scale", "Scale", [name], [name]).scale_param.bias_term = True
        b.layer(relu_name, "ReLU", [name], [name])
        return name

    x = conv_bn("conv1", "data", 32, 3, 2, 1, 1, "relu1")
    plan = [("2_1", 32, 64, 1), ("2_2", 64, 128, 2), ("3_1", 128, 128, 1), ("3_2", 128, 256, 2),
            ("4_1", 256, 256, 1), ("4_2", 256, 512, 2)] + [("5_%d" % k, 512, 512, 1) for k in range(1, 6)] + \
        [("5_6", 512, 1024, 2), ("6", 1024, 1024, 1)]
    for tag, cin, cout, stride in plan:
        x = conv_bn("conv%s/dw" % tag, x, cin, 3, stride, 1, cin, "relu%s/dw" % tag)
        x = conv_bn("conv%s/sep" % tag, x, cout, 1, 1, 0, 1, "relu%s/sep" % tag)
    pool = b.layer("pool6", "Pooling", [x], ["pool6"]).pooling_param
    pool.pool = b.pb.PoolingParameter.AVE
    pool.global_pooling = True
    b.conv("fc7", "pool6", num_classes, 1)
    b.layer("prob", "Softmax", ["fc7"], ["prob"])
    return b.net


#: MobileNet v2's inverted residual blocks as shicai's deploy file numbers them:
#: (name, expanded channels, output channels, depthwise stride); a block adds its input
#: (an Eltwise ``block_<name>``) where the stride is 1 and the channels stay.
MOBILENET_V2_BLOCKS = (
    ("2_1", 32, 16, 1), ("2_2", 96, 24, 2), ("3_1", 144, 24, 1), ("3_2", 144, 32, 2),
    ("4_1", 192, 32, 1), ("4_2", 192, 32, 1), ("4_3", 192, 64, 2), ("4_4", 384, 64, 1),
    ("4_5", 384, 64, 1), ("4_6", 384, 64, 1), ("4_7", 384, 96, 1), ("5_1", 576, 96, 1),
    ("5_2", 576, 96, 1), ("5_3", 576, 160, 2), ("6_1", 960, 160, 1), ("6_2", 960, 160, 1),
    ("6_3", 960, 320, 1))


def mobilenet_v2(batch=1, image=224, num_classes=1000):
    """MobileNet v2 as shicai's MobileNet-Caffe ``mobilenet_v2_deploy.prototxt`` lays it out:
    ``conv1`` (3x3/2, 32) + ``conv1/bn`` (BatchNorm into its own blob, global statistics,
    eps 1e-5) + ``conv1/scale`` and ``relu1`` in place; 17 inverted residual blocks
    (:data:`MOBILENET_V2_BLOCKS`), each ``convX_Y/expand`` (1x1) + bn/scale/ReLU,
    ``convX_Y/dwise`` (3x3 depthwise: group = channels) + bn/scale/ReLU, ``convX_Y/linear``
    (1x1, no ReLU) + bn/scale, and ``block_X_Y`` (Eltwise SUM with the block's input) where
    the shapes allow; ``conv6_4`` (1x1, 1280) + bn/scale/ReLU, ``pool6`` (global AVE),
    ``fc7`` (1x1 convolution with bias), ``prob`` (Softmax).  No bias on the other
    convolutions.  An Input layer ``data`` stands for the file's ``input_dim`` lines (Caffe
    upgrades them to one); 209 layers.  ``image`` other than 224 gives the same net on
    smaller maps (the global pooling takes what is left)."""
    b = _Builder("MOBILENET_V2")
    b.input([batch, 3, image, image])

    def conv_bn(name, bottom, out, kernel, stride=1, pad=0, group=1, relu=None):
        b.conv(name, bottom, out, kernel, stride, pad, group, bias=False)
        if group > 1:       # the file asks for Caffe's own engine on the depthwise ones
            b.net.layer[-1].convolution_param.engine = b.pb.ConvolutionParameter.CAFFE
        bn = name + "/bn"
        p = b.layer(bn, "BatchNorm", [name], [bn]).batch_norm_param
        p.use_global_stats, p.eps = True, 1e-5
        b.layer(name + "/scale", "Scale", [bn], [bn]).scale_param.bias_term = True
        if relu:
            b.layer(relu, "ReLU", [bn], [bn])
        return bn

    x = conv_bn("conv1", "data", 32, 3, 2, 1, relu="relu1")
    cin = 32
    for tag, mid, cout, stride in MOBILENET_V2_BLOCKS:
        y = conv_bn("conv%s/expand" % tag, x, mid, 1, relu="relu%s/expand" % tag)
        y = conv_bn("conv%s/dwise" % tag, y, mid, 3, stride, 1, group=mid, relu="relu%s/dwise" % tag)
        y = conv_bn("conv%s/linear" % tag, y, cout, 1)
        if stride == 1 and cin == cout:
            y = b.layer("block_" + tag, "Eltwise", [x, y], ["block_" + tag]).top[0]
        x, cin = y, cout
    x = conv_bn("conv6_4", x, 1280, 1, relu="relu6_4")
    pool = b.layer("pool6", "Pooling", [x], ["pool6"]).pooling_param
    pool.pool = b.pb.PoolingParameter.AVE
    pool.global_pooling = True
    b.conv("fc7", "pool6", num_classes, 1)
    b.layer("prob", "Softmax", ["fc7"], ["prob"])
    return b.net


def fcn8s(image=64, num_classes=21):
    """FCN-8s as shelhamer's fcn.berkeleyvision.org voc-fcn8s deploy file names it:
    VGG-16 (``conv1_1`` + ``relu1_1`` ... ``pool5``), ``fc6``/``relu6``/``drop6``,
    ``fc7``, ``score_fr``, ``upscore2``, ``score_pool4`` + ``score_pool4c`` (Crop),
    ``fuse_pool4``, ``upscore_pool4``, ``score_pool3``, ``fuse_pool3``, ``upscore8``,
    ``score`` (Crop).  ``image`` is the input's side (the original pads by 100)."""
    b = _Builder("FCN-8s")
    b.input([1, 3, image, image])
    x = "data"
    widths = (64, 128, 256, 512, 512)
    for s, (w, n) in enumerate(zip(widths, (2, 2, 3, 3, 3))):
        for k in range(1, n + 1):
            name = "conv%d_%d" % (s + 1, k)
            x = b.conv(name, x, w, 3, pad=100 if name == "conv1_1" else 1)
            b.layer("relu%d_%d" % (s + 1, k), "ReLU", [x], [x])
        pool = b.layer("pool%d" % (s + 1), "Pooling", [x], ["pool%d" % (s + 1)]).pooling_param
        pool.pool, pool.kernel_size, pool.stride = b.pb.PoolingParameter.MAX, 2, 2
        x = "pool%d" % (s + 1)
    for k, kernel in ((6, 7), (7, 1)):
        x = b.conv("fc%d" % k, x, 4096, kernel)
        b.layer("relu%d" % k, "ReLU", [x], [x])
        b.layer("drop%d" % k, "Dropout", [x], [x]).dropout_param.dropout_ratio = 0.5
    b.conv("score_fr", x, num_classes, 1)

    def up(name, bottom, factor):
        l = b.layer(name, "Deconvolution", [bottom], [name])
        p = l.convolution_param
        p.num_output, p.group, p.bias_term = num_classes, num_classes, False
        p.kernel_size.append(2 * factor)
        p.stride.append(factor)
        return name

    def crop(name, bottom, like, offset):
        l = b.layer(name, "Crop", [bottom, like], [name])
        l.crop_param.axis = 2
        l.crop_param.offset.append(offset)
        return name

    up("upscore2", "score_fr", 2)
    b.conv("score_pool4", "pool4", num_classes, 1)
    crop("score_pool4c", "score_pool4", "upscore2", 5)
    b.layer("fuse_pool4", "Eltwise", ["upscore2", "score_pool4c"], ["fuse_pool4"])
    up("upscore_pool4", "fuse_pool4", 2)
    b.conv("score_pool3", "pool3", num_classes, 1)
    crop("score_pool3c", "score_pool3", "upscore_pool4", 9)
    b.layer("fuse_pool3", "Eltwise", ["upscore_pool4", "score_pool3c"], ["fuse_pool3"])
    up("upscore8", "fuse_pool3", 8)
    crop("score", "upscore8", "data", 31)
    return b.net


def mobilenet_prototxt(**kw):
    return text_format.MessageToString(mobilenet(**kw))


def mobilenet_v2_prototxt(**kw):
    return text_format.MessageToString(mobilenet_v2(**kw))


def fcn8s_prototxt(**kw):
    return text_format.MessageToString(fcn8s(**kw))


def main(argv=None):
    p = argparse.ArgumentParser(description="Write a ResNet-50/101/152 prototxt (KaimingHe's layout), "
                                            "or MobileNet v1 / v2, FCN-8s deploy files.")
    p.add_argument("depth", choices=[str(d) for d in sorted(STAGES)] + ["mobilenet", "mobilenet_v2", "fcn8s"])
    p.add_argument("--train", action="store_true", help="train net (labels, SoftmaxWithLoss)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--no-fillers", action="store_true", help="no weight fillers (as KaimingHe's deploy files)")
    p.add_argument("--deploy-file", action="store_true", help="the deploy file as KaimingHe published it "
                   "(old-style input fields, no fillers, no conv1 bias)")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    a = p.parse_args(argv)
    if a.depth == "mobilenet":
        text = mobilenet_prototxt(batch=a.batch, image=a.image)
    elif a.depth == "mobilenet_v2":
        text = mobilenet_v2_prototxt(batch=a.batch, image=a.image)
    elif a.depth == "fcn8s":
        text = fcn8s_prototxt(image=a.image)
    elif a.deploy_file:
        text = deploy_prototxt(int(a.depth), batch=a.batch, image=a.image)
    else:
        text = resnet_prototxt(int(a.depth), batch=a.batch, train=a.train, image=a.image,
                               fillers=not a.no_fillers)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()

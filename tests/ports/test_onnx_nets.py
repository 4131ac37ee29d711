"""Whole nets exported to ONNX and verified blob by blob by onnxruntime against the engine:
every zoo net of ../shared/zoo that has a deploy or an Input-layer (``*.input.prototxt``)
version, and the deploy nets the issue names (ResNet-50, MobileNet v1/v2, SqueezeNet 1.0/1.1,
FCN-8s), with random weights (BatchNorm statistics with a scale factor other than 1), at
batch 1 and, where cheap, batch 2.

Cost: the nets with 60M+ parameters (CaffeNet-sized fc6/fc7, FCN-8s' fc6) run full size once
(CaffeNet, marked slow); R-CNN's, the fully convolutional CaffeNet's and FCN-8s' fc6/fc7 are
narrowed to 256 channels (their geometry, where the traps are, is unchanged).  The marker
``slow`` does not skip anything (CI runs everything); ``-m "not slow"`` does, locally.
"""
import numpy as np
import pytest

import engine
from benchmarks import netgen, ports_nets
from tests.ports.onnx_helpers import OPSETS, assert_verified, export_and_verify, reshape_batch

ZOO = "zoo"


def _zoo_param(shared_dir, rel, narrow=None, fc_width=256):
    """The zoo prototxt ``rel`` as a NetParameter; ``narrow``: layer names whose num_output
    becomes ``fc_width`` (and the layers reading them keep working: their inputs shrink)."""
    from engine.core.upgrade import read_net_params
    param = read_net_params(str(shared_dir / ZOO / rel))
    for lp in param.layer:
        if narrow and lp.name in narrow:
            if lp.type == "InnerProduct":
                lp.inner_product_param.num_output = fc_width
            else:
                lp.convolution_param.num_output = fc_width
    return param


def _net(param, shared_dir=None, rel=None, stages=(), batch=None):
    import os
    model_dir = os.path.dirname(str(shared_dir / ZOO / rel)) if rel else None
    net = engine.Net.from_param(param, phase=engine.TEST, stages=list(stages), model_dir=model_dir)
    if batch is not None:
        reshape_batch(net, batch)
    return net


def _check(net, opset=13, rtol=1e-5):
    res, result = export_and_verify(net, opset=opset, all_blobs=False, rtol=rtol)
    assert_verified(result)
    assert {r.blob for r in result.rows} == set(net.blob_names)
    # the model's outputs are Caffe's outputs, under Caffe's names
    assert [o.name for o in res.model.graph.output] == list(net.outputs)
    return result


# ------------------------------------------------------------------ ../shared/zoo
ZOO_NETS = [
    # (id, prototxt, stages, batch, layers narrowed, opsets)
    ("googlenet_deploy", "models/bvlc_googlenet/deploy.prototxt", (), 1, None, OPSETS),
    ("rcnn_ilsvrc13_deploy", "models/bvlc_reference_rcnn_ilsvrc13/deploy.prototxt", (), 1, ("fc6", "fc7"), [13]),
    ("caffenet_full_conv", "examples/net_surgery/bvlc_caffenet_full_conv.prototxt", (), 1, ("fc6-conv", "fc7-conv"),
     [13]),
    ("lenet_deploy", "examples/mnist/lenet.prototxt", (), 2, None, OPSETS),
    ("lenet_train_test_input", "examples/mnist/lenet_train_test.input.prototxt", (), 2, None, [13]),
    ("mnist_autoencoder_input", "examples/mnist/mnist_autoencoder.input.prototxt", ("test-on-test",), 2, None, [13]),
    ("cifar10_quick_deploy", "examples/cifar10/cifar10_quick.prototxt", (), 2, None, OPSETS),
    ("cifar10_full_deploy", "examples/cifar10/cifar10_full.prototxt", (), 1, None, [13]),
    ("cifar10_quick_input", "examples/cifar10/cifar10_quick_train_test.input.prototxt", (), 2, None, [13]),
    ("cifar10_full_input", "examples/cifar10/cifar10_full_train_test.input.prototxt", (), 2, None, [13]),
    ("cifar10_sigmoid_bn_input", "examples/cifar10/cifar10_full_sigmoid_train_test_bn.input.prototxt", (), 2, None,
     [13]),
    ("hdf5_nonlinear_input", "examples/hdf5_classification/nonlinear_train_val.input.prototxt", (), 2, None, [13]),
    ("siamese_deploy", "examples/siamese/mnist_siamese.prototxt", (), 2, None, [13]),
    ("siamese_train_test_input", "examples/siamese/mnist_siamese_train_test.input.prototxt", (), 2, None, [13]),
]


@pytest.mark.shared
@pytest.mark.parametrize("case", [pytest.param((c, op), id="%s-%s" % (c[0], op)) for c in ZOO_NETS for op in c[5]])
def test_zoo_net(case, shared_dir):
    (name, rel, stages, batch, narrow, _), opset = case
    net = _net(_zoo_param(shared_dir, rel, narrow), shared_dir, rel, stages, batch)
    _check(net, opset)


@pytest.mark.shared
@pytest.mark.slow
def test_zoo_caffenet_full_size(shared_dir):
    """CaffeNet (AlexNet's layout: grouped convolutions, LRN, ceil pooling, 60M parameters) at
    full size, batch 1."""
    rel = "models/bvlc_reference_caffenet/deploy.prototxt"
    net = _net(_zoo_param(shared_dir, rel), shared_dir, rel, batch=1)
    _check(net)


@pytest.mark.shared
def test_zoo_nets_all_covered(shared_dir):
    """Every zoo prototxt with a deploy or Input-layer version is exported above, or refused
    with a reason the test knows."""
    known = {c[1] for c in ZOO_NETS} | {"models/bvlc_reference_caffenet/deploy.prototxt"}
    refused = {}
    zoo = shared_dir / ZOO
    found = set()
    for p in sorted(list(zoo.glob("models/*/*.prototxt")) + list(zoo.glob("examples/*/*.prototxt"))):
        rel = str(p.relative_to(zoo))
        if "solver" in p.name:
            continue
        if p.name == "deploy.prototxt" or p.name.endswith(".input.prototxt") or "Input" in p.read_text() \
                or "input_dim" in p.read_text():
            found.add(rel)
    # train_val.input nets of the ImageNet models: the same as their deploy nets plus a loss
    # and Accuracy; their TEST phase uses batch 50 at 227/224: the deploy nets stand for them.
    found -= {"models/bvlc_googlenet/train_val.input.prototxt",
              "models/bvlc_reference_caffenet/train_val.input.prototxt"}
    assert found - known - set(refused) == set(), "zoo nets not exported by a test"


# ------------------------------------------------------------------ the deploy nets
def _resnet50(image=224):
    return netgen.resnet(50, image=image, fillers=False)


def _fcn8s_narrow(image=64):
    """FCN-8s with its VGG widths divided by 8 and fc6/fc7 at 64 channels (the 100-pixel pad,
    the pooling, the grouped Deconvolutions and the Crops, where the traps are, unchanged)."""
    param = netgen.fcn8s(image=image)
    for lp in param.layer:
        if lp.name in ("fc6", "fc7"):
            lp.convolution_param.num_output = 64
        elif lp.type == "Convolution" and lp.name.startswith("conv"):
            lp.convolution_param.num_output //= 8
    return param


GENERATED = [
    # (id, builder, batch, opsets)
    ("mobilenet_v1_224", lambda: netgen.mobilenet(image=224), 1, [13]),
    ("mobilenet_v1_b2", lambda: netgen.mobilenet(batch=2, image=96), 2, OPSETS),
    ("mobilenet_v2_224", lambda: ports_nets.mobilenet_v2(image=224), 1, OPSETS),
    ("mobilenet_v2_b2", lambda: ports_nets.mobilenet_v2(batch=2, image=96), 2, [13]),
    ("squeezenet_1_0", lambda: ports_nets.squeezenet("1.0", image=227), 1, OPSETS),
    ("squeezenet_1_1_b2", lambda: ports_nets.squeezenet("1.1", batch=2, image=227), 2, OPSETS),
    ("fcn8s_b2", lambda: _fcn8s_narrow(48), 2, [13]),
]


@pytest.mark.parametrize("case", [pytest.param((c, op), id="%s-%s" % (c[0], op)) for c in GENERATED for op in c[3]])
def test_deploy_net(case):
    (name, build, batch, _), opset = case
    net = _net(build(), batch=batch)
    _check(net, opset)


@pytest.mark.slow
def test_resnet50_224():
    """ResNet-50 (KaimingHe's deploy layout: in-place BatchNorm + Scale + ReLU chains,
    Eltwise sums, 7x7 average pooling) at 224, batch 1: every blob, and the final layers'
    names are Caffe's."""
    net = _net(_resnet50(224))
    result = _check(net)
    rows = {r.blob: r for r in result.rows}
    assert rows["prob"].ok and rows["res5c"].ok and rows["res2a_branch2a"].ok


def test_resnet50_small_batch2():
    """ResNet-50 at 64x64, batch 2 (the same layers; the pooling sizes where they meet the
    7x7 average pool differ: 2x2 -> a pool of 7 with ceil rounding and no pad)."""
    param = _resnet50(64)
    for lp in param.layer:
        if lp.name == "pool5":
            lp.pooling_param.kernel_size = 2
    net = _net(param, batch=2)
    _check(net, "latest")


def test_fcn8s_crop_offsets_are_caffes():
    """FCN-8s (newest opset, every blob an output): the Crop layers take Caffe's offsets (axis
    2, offsets 5, 9, 31): the score blob is 1x21xHxW, cropped at (31, 31) of upscore8, and
    every blob equals the engine's."""
    net = _net(_fcn8s_narrow(64))
    res, result = export_and_verify(net, opset="latest", all_blobs=True)
    assert_verified(result)
    assert tuple(net.blobs["score"].shape) == (1, 21, 64, 64)
    from onnx import numpy_helper
    inits = {i.name: numpy_helper.to_array(i) for i in res.model.graph.initializer}
    crops = [n for n in res.model.graph.node if n.op_type == "Slice" and n.name.startswith("score")]
    starts = {n.name: list(inits[n.input[1]]) for n in crops}
    assert starts["score/crop"] == [31, 31]
    assert np.asarray(starts["score_pool4c/crop"]).tolist() == [5, 5]

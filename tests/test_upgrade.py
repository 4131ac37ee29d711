"""engine.core.upgrade against Caffe's test_upgrade_proto.cpp cases and small nets of our own."""
import logging
import os

import pytest

from engine.core import upgrade as up
from engine.core.errors import NetError, ParseError, SolverError
from engine.proto import caffe_pb2
from tests.proto_helpers import parse, same

NetParameter = caffe_pb2.NetParameter
SolverParameter = caffe_pb2.SolverParameter


def load(shared_dir, name, cls=NetParameter):
    path = shared_dir / "caffe_tests" / name
    return parse(path.read_text(), cls)


def messages(caplog, name="engine.core.upgrade"):
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == name]


# ---------------------------------------------------------------------------
# Caffe's own cases (../shared/caffe_tests/upgrade_*)
# ---------------------------------------------------------------------------

PADDING_CASES = ["TestSimple", "TestTwoTops", "TestImageNet"]
V0_CASES = ["TestSimple", "TestAllParams", "TestImageNet"]
V1_CASES = ["TestSimple", "TestImageNet"]
SOLVER_CASES = ["SGD", "ADAGRAD", "NESTEROV", "RMSPROP", "ADADELTA", "ADAM"]


@pytest.mark.parametrize("case", PADDING_CASES)
def test_caffe_padding_layer_upgrade(shared_dir, case):
    inp = load(shared_dir, "upgrade_PaddingLayer_%s.input.prototxt" % case)
    exp = load(shared_dir, "upgrade_PaddingLayer_%s.expected.prototxt" % case)
    before = inp.SerializeToString()
    out = up.upgrade_v0_padding_layers(inp)
    same(out, exp)
    assert inp.SerializeToString() == before          # pure
    same(up.upgrade_v0_padding_layers(out), exp)      # idempotent, as Caffe's test checks


@pytest.mark.parametrize("step,upgrade,case", [("V0toV1", up.upgrade_v0_net, c) for c in V0_CASES]
                         + [("V1toV2", up.upgrade_v1_net, c) for c in V1_CASES])
def test_caffe_version_upgrade(shared_dir, step, upgrade, case):
    """UpgradeV0Net and UpgradeV1Net on Caffe's TestSimple/TestImageNet/... nets."""
    inp = load(shared_dir, "upgrade_%s_%s.input.prototxt" % (step, case))
    exp = load(shared_dir, "upgrade_%s_%s.expected.prototxt" % (step, case))
    out, ok = upgrade(inp)
    assert ok
    same(out, exp)


@pytest.mark.parametrize("case", V0_CASES)
def test_caffe_v0_nets_upgrade_all_the_way(shared_dir, case):
    """UpgradeNetAsNeeded on a V0 net ends in a V2 net that needs nothing more."""
    inp = load(shared_dir, "upgrade_V0toV1_%s.input.prototxt" % case)
    out, ok = up.upgrade_net_as_needed(inp, "net.prototxt")
    assert ok
    assert len(out.layers) == 0 and len(out.layer) > 0
    assert not up.net_needs_upgrade(out)
    assert len(out.input) == 0 and len(out.input_dim) == 0


def test_caffe_v0_to_v2_matches_the_two_steps(shared_dir):
    v0 = load(shared_dir, "upgrade_V0toV1_TestImageNet.input.prototxt")
    v2 = load(shared_dir, "upgrade_V1toV2_TestImageNet.expected.prototxt")
    same(up.upgrade_net(v0), v2)


@pytest.mark.parametrize("case", SOLVER_CASES)
def test_caffe_solver_type_upgrade(shared_dir, case):
    inp = load(shared_dir, "upgrade_SolverType_TestSimple__%s.input.prototxt" % case,
               SolverParameter)
    exp = load(shared_dir, "upgrade_SolverType_TestSimple__%s.expected.prototxt" % case,
               SolverParameter)
    assert up.solver_needs_upgrade(inp)
    out, ok = up.upgrade_solver_type(inp)
    assert ok
    same(out, exp)
    assert inp.HasField("solver_type")                # pure
    assert not up.solver_needs_upgrade(out)


def test_caffe_upgrade_cases_all_covered(shared_dir):
    names = sorted(p.name for p in (shared_dir / "caffe_tests").glob("upgrade_*.input.prototxt"))
    covered = (["upgrade_PaddingLayer_%s.input.prototxt" % c for c in PADDING_CASES]
               + ["upgrade_V0toV1_%s.input.prototxt" % c for c in V0_CASES]
               + ["upgrade_V1toV2_%s.input.prototxt" % c for c in V1_CASES]
               + ["upgrade_SolverType_TestSimple__%s.input.prototxt" % c for c in SOLVER_CASES])
    assert names == sorted(covered)


# ---------------------------------------------------------------------------
# V1 -> V2
# ---------------------------------------------------------------------------

V1_NET = """
name: "v1"
layers {
  name: "data" type: DATA top: "data" top: "label"
  data_param { source: "db" batch_size: 4 }
  include { phase: TRAIN }
}
layers {
  name: "conv" type: CONVOLUTION bottom: "data" top: "conv"
  blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
  param: "w" param: "b" blob_share_mode: PERMISSIVE
  convolution_param { num_output: 3 kernel_size: 1 }
}
layers {
  name: "ip" type: INNER_PRODUCT bottom: "conv" top: "ip"
  weight_decay: 0.5
  inner_product_param { num_output: 2 }
  exclude { stage: "deploy" }
}
layers { name: "loss" type: SOFTMAX_LOSS bottom: "ip" bottom: "label" loss_weight: 2 }
"""

V2_NET = """
name: "v1"
layer {
  name: "data" type: "Data" top: "data" top: "label"
  include { phase: TRAIN }
  data_param { source: "db" batch_size: 4 }
}
layer {
  name: "conv" type: "Convolution" bottom: "data" top: "conv"
  param { name: "w" share_mode: PERMISSIVE lr_mult: 1 decay_mult: 1 }
  param { name: "b" lr_mult: 2 decay_mult: 0 }
  convolution_param { num_output: 3 kernel_size: 1 }
}
layer {
  name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
  param { decay_mult: 0.5 }
  exclude { stage: "deploy" }
  inner_product_param { num_output: 2 }
}
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" loss_weight: 2 }
"""


def test_v1_layers_with_blobs_lr_and_weight_decay():
    v1 = parse(V1_NET)
    assert up.net_needs_upgrade(v1) and up.net_needs_v1_to_v2_upgrade(v1)
    assert not up.net_needs_v0_to_v1_upgrade(v1)
    out = up.upgrade_net(v1)
    same(out, parse(V2_NET))
    assert len(v1.layers) == 4 and len(v1.layer) == 0      # input untouched
    conv = out.layer[1]
    assert [p.lr_mult for p in conv.param] == [1, 2]
    assert [p.decay_mult for p in conv.param] == [1, 0]
    assert not out.layer[2].param[0].HasField("lr_mult")


def test_v1_upgrade_logs(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    up.upgrade_net(parse(V1_NET), "/nets/v1.prototxt")
    assert messages(caplog) == [
        ("INFO", "Attempting to upgrade input file specified using deprecated "
                 "V1LayerParameter: /nets/v1.prototxt"),
        ("INFO", "Successfully upgraded file specified using deprecated V1LayerParameter"),
    ]


def test_v1_upgrade_with_layer_fields_too(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    net = parse(V1_NET + 'layer { name: "extra" type: "ReLU" bottom: "ip" top: "ip" }')
    out, ok = up.upgrade_net_as_needed(net, "x")
    assert not ok
    assert [l.name for l in out.layer] == ["data", "conv", "ip", "loss"]   # 'layer' dropped
    msgs = messages(caplog)
    assert ("ERROR", "Input NetParameter to be upgraded already specifies 'layer' fields; "
                     "these will be ignored for the upgrade.") in msgs
    assert msgs[-1] == ("ERROR", "Warning: had one or more problems upgrading "
                                 "V1LayerParameter (see above); continuing anyway.")


def test_v1_layer_type_names():
    V1 = caffe_pb2.V1LayerParameter
    assert up.upgrade_v1_layer_type(V1.NONE) == ""
    assert up.upgrade_v1_layer_type(V1.SOFTMAX_LOSS) == "SoftmaxWithLoss"
    assert up.upgrade_v1_layer_type(V1.IM2COL) == "Im2col"
    assert up.upgrade_v1_layer_type(V1.TANH) == "TanH"
    assert up.upgrade_v1_layer_type(V1.SIGMOID_CROSS_ENTROPY_LOSS) == "SigmoidCrossEntropyLoss"
    # every V1 enum value has a name (Caffe's TestUpgradeV1LayerType loops over them)
    for value in V1.LayerType.values():
        assert isinstance(up.upgrade_v1_layer_type(value), str)
    with pytest.raises(NetError, match="Unknown V1LayerParameter layer type: 99"):
        up.upgrade_v1_layer_type(99)


def test_v1_layer_keeping_a_v0_layer_is_reported(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    v1 = parse('layers { name: "a" type: RELU layer { name: "a" type: "relu" } }')
    out, ok = up.upgrade_v1_net(v1)
    assert not ok
    assert messages(caplog) == [("ERROR", "Input NetParameter has V0 layer -- ignoring."),
                                ("ERROR", "Upgrade of input layer 0 failed.")]
    assert out.layer[0].type == "ReLU"


# ---------------------------------------------------------------------------
# V0 -> V1
# ---------------------------------------------------------------------------

V0_NET = """
name: "v0"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
layers {
  layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 3 stride: 2 group: 1
          biasterm: false blobs_lr: 1 weight_decay: 1
          weight_filler { type: "gaussian" std: 0.01 } }
  bottom: "pad1" top: "conv1"
}
layers { layer { name: "pool1" type: "pool" pool: AVE kernelsize: 2 stride: 2 }
         bottom: "conv1" top: "pool1" }
layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.25 }
         bottom: "pool1" top: "pool1" }
"""


def test_v0_upgrade_fields_and_padding():
    out, ok = up.upgrade_v0_net(parse(V0_NET))
    assert ok
    same(out, parse("""
name: "v0"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1"
         blobs_lr: 1 weight_decay: 1
         convolution_param { num_output: 4 bias_term: false pad: 2 kernel_size: 3 group: 1
                             stride: 2 weight_filler { type: "gaussian" std: 0.01 } } }
layers { name: "pool1" type: POOLING bottom: "conv1" top: "pool1"
         pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layers { name: "drop" type: DROPOUT bottom: "pool1" top: "pool1"
         dropout_param { dropout_ratio: 0.25 } }
"""))


def test_v0_full_upgrade_logs_and_result(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    out = up.upgrade_net(parse(V0_NET), "old.prototxt")
    assert messages(caplog) == [
        ("INFO", "Attempting to upgrade input file specified using deprecated "
                 "V0LayerParameter: old.prototxt"),
        ("INFO", "Successfully upgraded file specified using deprecated V0LayerParameter"),
        ("WARNING", "Note that future Caffe releases will not support V0NetParameter; use "
                    "./build/tools/upgrade_net_proto_text for prototxt and "
                    "./build/tools/upgrade_net_proto_binary for model weights upgrade this "
                    "and any other net protos to the new format."),
        ("INFO", "Attempting to upgrade input file specified using deprecated "
                 "V1LayerParameter: old.prototxt"),
        ("INFO", "Successfully upgraded file specified using deprecated V1LayerParameter"),
        ("INFO", "Attempting to upgrade input file specified using deprecated "
                 "input fields: old.prototxt"),
        ("INFO", "Successfully upgraded file specified using deprecated input fields."),
        ("WARNING", "Note that future Caffe releases will only support input layers and not "
                    "input fields."),
    ]
    assert [(l.name, l.type) for l in out.layer] == [
        ("input", "Input"), ("conv1", "Convolution"), ("pool1", "Pooling"), ("drop", "Dropout")]
    assert (out.layer[1].param[0].lr_mult, out.layer[1].param[0].decay_mult) == (1, 1)


def test_v0_unknown_parameter_is_logged_and_dropped(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    net = parse('layers { layer { name: "r" type: "relu" num_output: 3 shuffle_images: true } '
                'bottom: "x" top: "x" }')
    layer, ok = up.upgrade_v0_layer_parameter(net.layers[0])
    assert not ok
    assert messages(caplog) == [("ERROR", "Unknown parameter num_output for layer type relu"),
                                ("ERROR", "Unknown parameter shuffle for layer type relu")]
    same(layer, parse('name: "r" type: RELU bottom: "x" top: "x"', caffe_pb2.V1LayerParameter))
    caplog.clear()
    out, ok = up.upgrade_net_as_needed(parse('input: "x" ' + str(net)), "f")
    assert not ok
    assert ("ERROR", "Warning: had one or more problems upgrading V0NetParameter to "
                     "NetParameter (see above); continuing anyway.") in messages(caplog)


def test_v0_transform_fields_and_data_params():
    net = parse('layers { layer { name: "d" type: "data" source: "db" batchsize: 8 '
                'scale: 0.5 meanfile: "m.binaryproto" cropsize: 4 mirror: true rand_skip: 3 } '
                'top: "data" top: "label" }')
    layer, ok = up.upgrade_v0_layer_parameter(net.layers[0])
    assert ok
    same(layer, parse('name: "d" type: DATA top: "data" top: "label" '
                      'data_param { source: "db" batch_size: 8 rand_skip: 3 } '
                      'transform_param { scale: 0.5 mean_file: "m.binaryproto" crop_size: 4 '
                      'mirror: true }', caffe_pb2.V1LayerParameter))


def test_v0_errors():
    with pytest.raises(NetError, match="Unknown layer name: fancy"):
        up.upgrade_v0_layer_type("fancy")
    with pytest.raises(NetError, match="Unknown blob input nope to layer 0"):
        up.upgrade_v0_padding_layers(parse('layers { layer { name: "c" type: "conv" } '
                                           'bottom: "nope" top: "c" }'))
    bad = parse('input: "data" '
                'layers { layer { name: "p" type: "padding" pad: 1 } bottom: "data" top: "p" } '
                'layers { layer { name: "r" type: "relu" } bottom: "p" top: "r" }')
    with pytest.raises(NetError, match="Padding layer input to non-convolutional / "
                                       "non-pooling layer type relu"):
        up.upgrade_v0_padding_layers(bad)


# ---------------------------------------------------------------------------
# Data transformation fields
# ---------------------------------------------------------------------------

def test_data_transformation_upgrade(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    net = parse('layers { name: "d" type: DATA top: "data" '
                'data_param { source: "db" scale: 0.25 mirror: true } } '
                'layers { name: "i" type: IMAGE_DATA top: "img" image_data_param { source: "l" } }')
    assert up.net_needs_data_upgrade(net)
    moved = up.upgrade_net_data_transformation(net)
    same(moved.layers[0], parse('name: "d" type: DATA top: "data" data_param { source: "db" } '
                                'transform_param { scale: 0.25 mirror: true }',
                                caffe_pb2.V1LayerParameter))
    # as in Caffe, the other data layers get an (empty) transform_param too
    assert moved.layers[1].HasField("transform_param")
    assert net.layers[0].data_param.HasField("scale")        # pure
    up.upgrade_net(net, "d.prototxt")
    assert messages(caplog)[:3] == [
        ("INFO", "Attempting to upgrade input file specified using deprecated transformation "
                 "parameters: d.prototxt"),
        ("INFO", "Successfully upgraded file specified using deprecated data transformation "
                 "parameters."),
        ("WARNING", "Note that future Caffe releases will only support transform_param "
                    "messages for transformation fields."),
    ]


# ---------------------------------------------------------------------------
# Input fields -> Input layer
# ---------------------------------------------------------------------------

def test_input_dim_becomes_input_layer(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    net = parse('name: "n" input: "data" input: "label" '
                'input_dim: 10 input_dim: 3 input_dim: 4 input_dim: 5 '
                'input_dim: 10 input_dim: 1 input_dim: 1 input_dim: 1 '
                'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" }')
    assert up.net_needs_input_upgrade(net) and up.net_needs_upgrade(net)
    out = up.upgrade_net(net, "deploy.prototxt")
    same(out, parse('name: "n" '
                    'layer { name: "input" type: "Input" top: "data" top: "label" '
                    'input_param { shape { dim: 10 dim: 3 dim: 4 dim: 5 } '
                    'shape { dim: 10 dim: 1 dim: 1 dim: 1 } } } '
                    'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" }'))
    assert list(net.input) == ["data", "label"]              # pure
    assert messages(caplog) == [
        ("INFO", "Attempting to upgrade input file specified using deprecated input fields: "
                 "deploy.prototxt"),
        ("INFO", "Successfully upgraded file specified using deprecated input fields."),
        ("WARNING", "Note that future Caffe releases will only support input layers and not "
                    "input fields."),
    ]


def test_input_shape_becomes_input_layer():
    net = parse('input: "data" input_shape { dim: 2 dim: 7 } '
                'layer { name: "a" type: "ReLU" bottom: "data" top: "a" } '
                'layer { name: "b" type: "ReLU" bottom: "a" top: "b" }')
    out = up.upgrade_net_input(net)
    assert [l.name for l in out.layer] == ["input", "a", "b"]
    same(out.layer[0], parse('name: "input" type: "Input" top: "data" '
                             'input_param { shape { dim: 2 dim: 7 } }', caffe_pb2.LayerParameter))
    assert not out.input and not out.input_shape and not out.input_dim


def test_bare_input_without_shape_is_dropped():
    """Old caffemodels list ``input`` without shapes: the field is just cleared."""
    net = parse('input: "data" layer { name: "a" type: "ReLU" bottom: "data" top: "a" }')
    out = up.upgrade_net_input(net)
    assert [l.name for l in out.layer] == ["a"]
    assert not out.input


def test_input_dims_short_is_an_error():
    with pytest.raises(NetError):
        up.upgrade_net_input(parse('input: "a" input: "b" input_dim: 1 input_dim: 2 '
                                   'input_dim: 3 input_dim: 4'))


# ---------------------------------------------------------------------------
# BatchNorm
# ---------------------------------------------------------------------------

BN_NET = """
layer { name: "bn1" type: "BatchNorm" bottom: "x" top: "y"
        param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 0 name: "keep" }
        batch_norm_param { use_global_stats: false } }
layer { name: "bn2" type: "BatchNorm" bottom: "y" top: "z" param { lr_mult: 0 } }
layer { name: "conv" type: "Convolution" bottom: "z" top: "c"
        param { lr_mult: 1 } param { lr_mult: 2 } param { lr_mult: 3 } }
layer { name: "bn3" type: "BatchNorm" bottom: "c" top: "c" }
"""


def test_batch_norm_three_params_get_zero_lr_and_decay(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    net = parse(BN_NET)
    assert up.net_needs_batch_norm_upgrade(net) and up.net_needs_upgrade(net)
    out = up.upgrade_net(net, "bn.prototxt")
    bn1 = out.layer[0]
    assert [(p.lr_mult, p.decay_mult, p.HasField("decay_mult")) for p in bn1.param] == \
        [(0, 0, True)] * 3
    assert bn1.param[2].name == "keep"                             # other fields kept
    assert bn1.batch_norm_param.HasField("use_global_stats")
    same(out.layer[1], net.layer[1])                               # only 3 params count
    same(out.layer[2], net.layer[2])                               # only BatchNorm
    same(out.layer[3], net.layer[3])
    assert not net.layer[0].param[0].HasField("decay_mult")         # pure
    assert not up.net_needs_batch_norm_upgrade(parse('layer { type: "BatchNorm" param {} }'))
    assert messages(caplog) == [
        ("INFO", "Attempting to upgrade batch norm layers using deprecated params: bn.prototxt"),
        ("INFO", "Successfully upgraded batch norm layers using deprecated params."),
    ]


def test_modern_net_needs_nothing(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    net = parse('layer { name: "a" type: "Input" top: "x" input_param { shape { dim: 1 } } }')
    assert not up.net_needs_upgrade(net)
    out, ok = up.upgrade_net_as_needed(net, "x")
    assert ok
    same(out, net)
    assert out is not net
    assert messages(caplog) == []


# ---------------------------------------------------------------------------
# Solver
# ---------------------------------------------------------------------------

def test_solver_type_upgrade_logs(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    out = up.upgrade_solver(parse("base_lr: 0.1 solver_type: NESTEROV", SolverParameter),
                            "solver.prototxt")
    assert out.type == "Nesterov" and not out.HasField("solver_type")
    assert messages(caplog) == [
        ("INFO", "Attempting to upgrade input file specified using deprecated 'solver_type' "
                 "field (enum)': solver.prototxt"),
        ("INFO", "Successfully upgraded file specified using deprecated 'solver_type' field "
                 "(enum) to 'type' field (string)."),
        ("WARNING", "Note that future Caffe releases will only support 'type' field (string) "
                    "for a solver's type."),
    ]


def test_solver_type_and_type_both_given():
    s = parse('solver_type: ADAM type: "Adam"', SolverParameter)
    with pytest.raises(SolverError, match="Failed to upgrade solver: old solver_type field "
                                          r"\(enum\) and new type field \(string\) cannot be "
                                          "both specified in solver proto text."):
        up.upgrade_solver(s)


def test_solver_type_already_up_to_date(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    out, ok = up.upgrade_solver_type(parse('type: "Adam"', SolverParameter))
    assert not ok and out.type == "Adam"
    assert messages(caplog) == [("ERROR", "Warning: solver type already up to date. ")]
    assert not up.solver_needs_upgrade(out)


def test_read_solver_params_snapshot_prefix(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    path = tmp_path / "my_solver.prototxt"
    path.write_text('net: "n.prototxt" solver_type: SGD')
    s = up.read_solver_params(path)
    assert s.type == "SGD"
    assert s.snapshot_prefix == str(tmp_path / "my_solver")
    assert messages(caplog)[-1] == (
        "INFO", "snapshot_prefix was not specified and is set to %s" % (tmp_path / "my_solver"))
    caplog.clear()
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    path.write_text('net: "n.prototxt" snapshot_prefix: "%s"' % snaps)
    s = up.read_solver_params(str(path))
    assert s.snapshot_prefix == os.path.join(str(snaps), "my_solver")
    assert messages(caplog) == [("INFO", "snapshot_prefix was a directory and is replaced to %s"
                                 % os.path.join(str(snaps), "my_solver"))]
    caplog.clear()
    path.write_text('net: "n.prototxt" snapshot_prefix: "runs/lenet"')
    assert up.read_solver_params(path).snapshot_prefix == "runs/lenet"
    assert messages(caplog) == []


# ---------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------

def test_read_net_params_text(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="engine.core.upgrade")
    path = tmp_path / "v1.prototxt"
    path.write_text(V1_NET)
    same(up.read_net_params(path), parse(V2_NET))
    assert messages(caplog)[0][1].endswith("V1LayerParameter: %s" % path)


def test_read_net_params_binary_v1_caffemodel(tmp_path):
    v1 = parse(V1_NET)
    blob = v1.layers[1].blobs.add()
    blob.num, blob.channels, blob.height, blob.width = 3, 1, 1, 1
    blob.data.extend([1.0, 2.0, 3.0])
    path = tmp_path / "old.caffemodel"
    path.write_bytes(v1.SerializeToString())
    out = up.read_net_params_binary(path)
    assert len(out.layers) == 0
    assert out.layer[1].name == "conv" and list(out.layer[1].blobs[0].data) == [1.0, 2.0, 3.0]


def test_read_net_params_parse_error(tmp_path):
    path = tmp_path / "bad.prototxt"
    path.write_text('name: "x"\nlayer { nme: "a" }\n')
    with pytest.raises(ParseError) as info:
        up.read_net_params(path)
    assert "Failed to parse NetParameter file: %s" % path in str(info.value)
    assert info.value.line == 2
    with pytest.raises(ParseError, match="File not found"):
        up.read_net_params(tmp_path / "missing.prototxt")

"""proto/caffe.proto: the generated module is current and wire-compatible with Caffe's."""
import filecmp
import os
from pathlib import Path

import pytest
from google.protobuf import descriptor as _d
from google.protobuf import text_format

from engine.proto import caffe_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CAFFE_SHARED", ROOT.parent / "shared"))


def field(message, name):
    return getattr(pb, message).DESCRIPTOR.fields_by_name[name]


def numbers(message):
    return {f.name: f.number for f in getattr(pb, message).DESCRIPTOR.fields}


# ---------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------

def test_generated_module_is_current(tmp_path):
    pytest.importorskip("grpc_tools")
    import importlib.util
    spec = importlib.util.spec_from_file_location("proto_generate", ROOT / "proto" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    generate.generate(str(tmp_path))
    for name in generate.OUTPUTS:
        assert filecmp.cmp(tmp_path / name, ROOT / "engine" / "proto" / name, shallow=False), (
            "engine/proto/%s is stale: run python proto/generate.py" % name)


def test_engine_shim_is_the_generated_module():
    import engine.proto.caffe_pb2 as via_import
    from engine.proto import caffe_pb2 as via_from
    assert via_import is pb and via_from is pb
    assert via_from.NetParameter is pb.NetParameter


def test_schema_header():
    text = (ROOT / "proto" / "caffe.proto").read_text(encoding="utf-8")
    assert 'syntax = "proto2";' in text and "package caffe;" in text
    assert pb.DESCRIPTOR.package == "caffe" and pb.DESCRIPTOR.name == "caffe.proto"


# ---------------------------------------------------------------------------
# Messages and field numbers
# ---------------------------------------------------------------------------

MESSAGES = """BlobShape BlobProto BlobProtoVector Datum FillerParameter NetParameter
SolverParameter SolverState NetState NetStateRule ParamSpec LayerParameter
TransformationParameter LossParameter AccuracyParameter ArgMaxParameter ClipParameter
ConcatParameter BatchNormParameter BiasParameter ContrastiveLossParameter
ConvolutionParameter CropParameter DataParameter DropoutParameter DummyDataParameter
EltwiseParameter ELUParameter EmbedParameter ExpParameter FlattenParameter
HDF5DataParameter HDF5OutputParameter HingeLossParameter ImageDataParameter
InfogainLossParameter InnerProductParameter InputParameter LogParameter LRNParameter
MemoryDataParameter MVNParameter ParameterParameter PoolingParameter PowerParameter
PythonParameter RecurrentParameter ReductionParameter ReLUParameter ReshapeParameter
ScaleParameter SigmoidParameter SliceParameter SoftmaxParameter SwishParameter
TanHParameter TileParameter ThresholdParameter WindowDataParameter SPPParameter
V1LayerParameter V0LayerParameter PReLUParameter""".split()


def test_every_caffe_message_is_declared():
    assert sorted(pb.DESCRIPTOR.message_types_by_name) == sorted(MESSAGES)
    assert list(pb.DESCRIPTOR.enum_types_by_name) == ["Phase"]
    assert pb.TRAIN == 0 and pb.TEST == 1


def test_layer_parameter_numbers():
    assert numbers("LayerParameter") == {
        "name": 1, "type": 2, "bottom": 3, "top": 4, "phase": 10, "loss_weight": 5,
        "param": 6, "blobs": 7, "propagate_down": 11, "include": 8, "exclude": 9,
        "transform_param": 100, "loss_param": 101, "accuracy_param": 102,
        "argmax_param": 103, "batch_norm_param": 139, "bias_param": 141, "clip_param": 148,
        "concat_param": 104, "contrastive_loss_param": 105, "convolution_param": 106,
        "crop_param": 144, "data_param": 107, "dropout_param": 108, "dummy_data_param": 109,
        "eltwise_param": 110, "elu_param": 140, "embed_param": 137, "exp_param": 111,
        "flatten_param": 135, "hdf5_data_param": 112, "hdf5_output_param": 113,
        "hinge_loss_param": 114, "image_data_param": 115, "infogain_loss_param": 116,
        "inner_product_param": 117, "input_param": 143, "log_param": 134, "lrn_param": 118,
        "memory_data_param": 119, "mvn_param": 120, "parameter_param": 145,
        "pooling_param": 121, "power_param": 122, "prelu_param": 131, "python_param": 130,
        "recurrent_param": 146, "reduction_param": 136, "relu_param": 123,
        "reshape_param": 133, "scale_param": 142, "sigmoid_param": 124,
        "softmax_param": 125, "spp_param": 132, "slice_param": 126, "swish_param": 147,
        "tanh_param": 127, "threshold_param": 128, "tile_param": 138,
        "window_data_param": 129,
    }


def test_net_parameter_numbers():
    assert numbers("NetParameter") == {
        "name": 1, "input": 3, "input_shape": 8, "input_dim": 4, "force_backward": 5,
        "state": 6, "debug_info": 7, "layer": 100, "layers": 2}


def test_solver_parameter_numbers():
    assert numbers("SolverParameter") == {
        "net": 24, "net_param": 25, "train_net": 1, "test_net": 2, "train_net_param": 21,
        "test_net_param": 22, "train_state": 26, "test_state": 27, "test_iter": 3,
        "test_interval": 4, "test_compute_loss": 19, "test_initialization": 32,
        "base_lr": 5, "display": 6, "average_loss": 33, "max_iter": 7, "iter_size": 36,
        "lr_policy": 8, "gamma": 9, "power": 10, "momentum": 11, "weight_decay": 12,
        "regularization_type": 29, "stepsize": 13, "stepvalue": 34, "clip_gradients": 35,
        "snapshot": 14, "snapshot_prefix": 15, "snapshot_diff": 16, "snapshot_format": 37,
        "solver_mode": 17, "device_id": 18, "random_seed": 20, "type": 40, "delta": 31,
        "momentum2": 39, "rms_decay": 38, "debug_info": 23, "snapshot_after_train": 28,
        "solver_type": 30, "layer_wise_reduce": 41, "weights": 42}
    S = pb.SolverParameter
    assert (S.HDF5, S.BINARYPROTO, S.CPU, S.GPU) == (0, 1, 0, 1)
    assert [S.SGD, S.NESTEROV, S.ADAGRAD, S.RMSPROP, S.ADADELTA, S.ADAM] == list(range(6))


def test_small_message_numbers():
    assert numbers("BlobProto") == {"shape": 7, "data": 5, "diff": 6, "double_data": 8,
                                     "double_diff": 9, "num": 1, "channels": 2,
                                     "height": 3, "width": 4}
    assert numbers("Datum") == {"channels": 1, "height": 2, "width": 3, "data": 4,
                                 "label": 5, "float_data": 6, "encoded": 7}
    assert numbers("SolverState") == {"iter": 1, "learned_net": 2, "history": 3,
                                       "current_step": 4}
    assert numbers("NetState") == {"phase": 1, "level": 2, "stage": 3}
    assert numbers("NetStateRule") == {"phase": 1, "min_level": 2, "max_level": 3,
                                        "stage": 4, "not_stage": 5}
    assert numbers("ParamSpec") == {"name": 1, "share_mode": 2, "lr_mult": 3,
                                     "decay_mult": 4}
    assert numbers("ConvolutionParameter") == {
        "num_output": 1, "bias_term": 2, "pad": 3, "kernel_size": 4, "stride": 6,
        "dilation": 18, "pad_h": 9, "pad_w": 10, "kernel_h": 11, "kernel_w": 12,
        "stride_h": 13, "stride_w": 14, "group": 5, "weight_filler": 7, "bias_filler": 8,
        "engine": 15, "axis": 16, "force_nd_im2col": 17}
    assert numbers("PoolingParameter") == {
        "pool": 1, "pad": 4, "pad_h": 9, "pad_w": 10, "kernel_size": 2, "kernel_h": 5,
        "kernel_w": 6, "stride": 3, "stride_h": 7, "stride_w": 8, "engine": 11,
        "global_pooling": 12, "round_mode": 13}
    assert numbers("DataParameter") == {
        "source": 1, "batch_size": 4, "rand_skip": 7, "backend": 8, "scale": 2,
        "mean_file": 3, "crop_size": 5, "mirror": 6, "force_encoded_color": 9,
        "prefetch": 10}
    assert numbers("ClipParameter") == {"min": 1, "max": 2}
    assert numbers("SwishParameter") == {"beta": 1}
    assert numbers("ConcatParameter") == {"axis": 2, "concat_dim": 1}
    assert numbers("SliceParameter") == {"axis": 3, "slice_point": 2, "slice_dim": 1}
    assert numbers("SPPParameter") == {"pyramid_height": 1, "pool": 2, "engine": 6}


V1_TYPES = {
    "NONE": 0, "ABSVAL": 35, "ACCURACY": 1, "ARGMAX": 30, "BNLL": 2, "CONCAT": 3,
    "CONTRASTIVE_LOSS": 37, "CONVOLUTION": 4, "DATA": 5, "DECONVOLUTION": 39, "DROPOUT": 6,
    "DUMMY_DATA": 32, "EUCLIDEAN_LOSS": 7, "ELTWISE": 25, "EXP": 38, "FLATTEN": 8,
    "HDF5_DATA": 9, "HDF5_OUTPUT": 10, "HINGE_LOSS": 28, "IM2COL": 11, "IMAGE_DATA": 12,
    "INFOGAIN_LOSS": 13, "INNER_PRODUCT": 14, "LRN": 15, "MEMORY_DATA": 29,
    "MULTINOMIAL_LOGISTIC_LOSS": 16, "MVN": 34, "POOLING": 17, "POWER": 26, "RELU": 18,
    "SIGMOID": 19, "SIGMOID_CROSS_ENTROPY_LOSS": 27, "SILENCE": 36, "SOFTMAX": 20,
    "SOFTMAX_LOSS": 21, "SPLIT": 22, "SLICE": 33, "TANH": 23, "WINDOW_DATA": 24,
    "THRESHOLD": 31,
}


def test_v1_layer_parameter():
    enum = pb.V1LayerParameter.LayerType.DESCRIPTOR
    assert {v.name: v.number for v in enum.values} == V1_TYPES
    assert numbers("V1LayerParameter") == {
        "bottom": 2, "top": 3, "name": 4, "include": 32, "exclude": 33, "type": 5,
        "blobs": 6, "param": 1001, "blob_share_mode": 1002, "blobs_lr": 7,
        "weight_decay": 8, "loss_weight": 35, "accuracy_param": 27, "argmax_param": 23,
        "concat_param": 9, "contrastive_loss_param": 40, "convolution_param": 10,
        "data_param": 11, "dropout_param": 12, "dummy_data_param": 26, "eltwise_param": 24,
        "exp_param": 41, "hdf5_data_param": 13, "hdf5_output_param": 14,
        "hinge_loss_param": 29, "image_data_param": 15, "infogain_loss_param": 16,
        "inner_product_param": 17, "lrn_param": 18, "memory_data_param": 22,
        "mvn_param": 34, "pooling_param": 19, "power_param": 21, "relu_param": 30,
        "sigmoid_param": 38, "softmax_param": 39, "slice_param": 31, "tanh_param": 37,
        "threshold_param": 25, "window_data_param": 20, "transform_param": 36,
        "loss_param": 42, "layer": 1}
    assert field("V1LayerParameter", "blob_share_mode").enum_type.full_name == \
        "caffe.V1LayerParameter.DimCheckMode"
    assert field("V1LayerParameter", "layer").message_type.name == "V0LayerParameter"


def test_v0_layer_parameter():
    assert numbers("V0LayerParameter") == {
        "name": 1, "type": 2, "num_output": 3, "biasterm": 4, "weight_filler": 5,
        "bias_filler": 6, "pad": 7, "kernelsize": 8, "group": 9, "stride": 10, "pool": 11,
        "dropout_ratio": 12, "local_size": 13, "alpha": 14, "beta": 15, "k": 22,
        "source": 16, "scale": 17, "meanfile": 18, "batchsize": 19, "cropsize": 20,
        "mirror": 21, "blobs": 50, "blobs_lr": 51, "weight_decay": 52, "rand_skip": 53,
        "det_fg_threshold": 54, "det_bg_threshold": 55, "det_fg_fraction": 56,
        "det_context_pad": 58, "det_crop_mode": 59, "new_num": 60, "new_channels": 61,
        "new_height": 62, "new_width": 63, "shuffle_images": 64, "concat_dim": 65,
        "hdf5_output_param": 1001}


# ---------------------------------------------------------------------------
# Types, labels, packing
# ---------------------------------------------------------------------------

FD = _d.FieldDescriptor


@pytest.mark.parametrize("message,name,ftype,repeated", [
    ("BlobShape", "dim", FD.TYPE_INT64, True),
    ("BlobProto", "num", FD.TYPE_INT32, False),
    ("BlobProto", "double_data", FD.TYPE_DOUBLE, True),
    ("Datum", "data", FD.TYPE_BYTES, False),
    ("Datum", "float_data", FD.TYPE_FLOAT, True),
    ("NetParameter", "input_dim", FD.TYPE_INT32, True),
    ("SolverParameter", "random_seed", FD.TYPE_INT64, False),
    ("SolverParameter", "test_iter", FD.TYPE_INT32, True),
    ("SolverParameter", "max_iter", FD.TYPE_INT32, False),
    ("SolverParameter", "weights", FD.TYPE_STRING, True),
    ("LayerParameter", "propagate_down", FD.TYPE_BOOL, True),
    ("LayerParameter", "loss_weight", FD.TYPE_FLOAT, True),
    ("ConvolutionParameter", "kernel_size", FD.TYPE_UINT32, True),
    ("ConvolutionParameter", "num_output", FD.TYPE_UINT32, False),
    ("CropParameter", "offset", FD.TYPE_UINT32, True),
    ("TileParameter", "tiles", FD.TYPE_INT32, False),
    ("FillerParameter", "sparse", FD.TYPE_INT32, False),
    ("DummyDataParameter", "num", FD.TYPE_UINT32, True),
    ("V1LayerParameter", "param", FD.TYPE_STRING, True),
])
def test_field_types(message, name, ftype, repeated):
    f = field(message, name)
    assert f.type == ftype
    assert f.is_repeated == repeated


def test_packed_fields_are_exactly_caffes():
    packed = set()
    for m in pb.DESCRIPTOR.message_types_by_name.values():
        for f in m.fields:
            if f.GetOptions().packed:
                packed.add("%s.%s" % (m.name, f.name))
    assert packed == {"BlobShape.dim", "BlobProto.data", "BlobProto.diff",
                      "BlobProto.double_data", "BlobProto.double_diff"}


def test_required_fields_are_exactly_caffes():
    required = set()
    for m in pb.DESCRIPTOR.message_types_by_name.values():
        for f in m.fields:
            if f.is_required:
                required.add("%s.%s" % (m.name, f.name))
    assert required == {"ClipParameter.min", "ClipParameter.max"}


def test_wire_bytes():
    # BlobShape {dim: 2 dim: 3}: packed field 1 -> 0x0a, length 2, varints.
    assert pb.BlobShape(dim=[2, 3]).SerializeToString() == b"\x0a\x02\x02\x03"
    # LayerParameter field 106 (convolution_param): tag varint (106 << 3 | 2) = 0xd2 0x06.
    lp = pb.LayerParameter()
    lp.convolution_param.num_output = 5
    assert lp.SerializeToString() == b"\xd2\x06\x02\x08\x05"
    # NetParameter.layer = 100: tag 0xa2 0x06; layers = 2: tag 0x12.
    net = pb.NetParameter()
    net.layer.add(name="a")
    net.layers.add(type=pb.V1LayerParameter.RELU)
    assert net.SerializeToString() == b"\x12\x02\x28\x12\xa2\x06\x03\x0a\x01a"
    # Datum.float_data is not packed: one tag per value.
    assert pb.Datum(float_data=[1, 2]).SerializeToString() == \
        b"\x35\x00\x00\x80\x3f\x35\x00\x00\x00\x40"


# ---------------------------------------------------------------------------
# Defaults
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("message,name,value", [
    ("ConvolutionParameter", "bias_term", True),
    ("ConvolutionParameter", "group", 1),
    ("ConvolutionParameter", "axis", 1),
    ("ConvolutionParameter", "engine", 0),
    ("PoolingParameter", "pool", pb.PoolingParameter.MAX),
    ("PoolingParameter", "stride", 1),
    ("PoolingParameter", "round_mode", pb.PoolingParameter.CEIL),
    ("LRNParameter", "local_size", 5),
    ("LRNParameter", "alpha", 1.0),
    ("LRNParameter", "beta", 0.75),
    ("LRNParameter", "k", 1.0),
    ("LRNParameter", "norm_region", pb.LRNParameter.ACROSS_CHANNELS),
    ("SolverParameter", "momentum2", pytest.approx(0.999)),
    ("SolverParameter", "delta", pytest.approx(1e-8)),
    ("SolverParameter", "rms_decay", pytest.approx(0.99)),
    ("SolverParameter", "clip_gradients", -1.0),
    ("SolverParameter", "snapshot_format", pb.SolverParameter.BINARYPROTO),
    ("SolverParameter", "solver_mode", pb.SolverParameter.GPU),
    ("SolverParameter", "solver_type", pb.SolverParameter.SGD),
    ("SolverParameter", "type", "SGD"),
    ("SolverParameter", "regularization_type", "L2"),
    ("SolverParameter", "random_seed", -1),
    ("SolverParameter", "average_loss", 1),
    ("SolverParameter", "iter_size", 1),
    ("SolverParameter", "test_initialization", True),
    ("SolverParameter", "snapshot_after_train", True),
    ("SolverParameter", "layer_wise_reduce", True),
    ("FillerParameter", "type", "constant"),
    ("FillerParameter", "std", 1.0),
    ("FillerParameter", "max", 1.0),
    ("FillerParameter", "sparse", -1),
    ("FillerParameter", "variance_norm", pb.FillerParameter.FAN_IN),
    ("ParamSpec", "lr_mult", 1.0),
    ("ParamSpec", "decay_mult", 1.0),
    ("NetState", "phase", pb.TEST),
    ("LossParameter", "normalization", pb.LossParameter.VALID),
    ("DropoutParameter", "dropout_ratio", 0.5),
    ("EltwiseParameter", "operation", pb.EltwiseParameter.SUM),
    ("EltwiseParameter", "stable_prod_grad", True),
    ("HingeLossParameter", "norm", pb.HingeLossParameter.L1),
    ("ReductionParameter", "operation", pb.ReductionParameter.SUM),
    ("BatchNormParameter", "moving_average_fraction", pytest.approx(0.999)),
    ("BatchNormParameter", "eps", pytest.approx(1e-5)),
    ("MVNParameter", "eps", pytest.approx(1e-9)),
    ("MVNParameter", "normalize_variance", True),
    ("FlattenParameter", "end_axis", -1),
    ("ReshapeParameter", "num_axes", -1),
    ("CropParameter", "axis", 2),
    ("ExpParameter", "base", -1.0),
    ("LogParameter", "base", -1.0),
    ("ImageDataParameter", "batch_size", 1),
    ("ImageDataParameter", "is_color", True),
    ("DataParameter", "prefetch", 4),
    ("DataParameter", "backend", pb.DataParameter.LEVELDB),
    ("WindowDataParameter", "crop_mode", "warp"),
    ("WindowDataParameter", "fg_fraction", 0.25),
    ("AccuracyParameter", "top_k", 1),
    ("ScaleParameter", "bias_term", False),
    ("BiasParameter", "num_axes", 1),
    ("SwishParameter", "beta", 1.0),
    ("ELUParameter", "alpha", 1.0),
    ("ContrastiveLossParameter", "margin", 1.0),
    ("V0LayerParameter", "biasterm", True),
    ("V0LayerParameter", "det_crop_mode", "warp"),
    ("V0LayerParameter", "concat_dim", 1),
])
def test_defaults(message, name, value):
    assert getattr(getattr(pb, message)(), name) == value


def test_fields_without_defaults():
    s = pb.SolverParameter()
    assert not s.HasField("base_lr") and s.base_lr == 0.0
    assert s.momentum == 0.0 and s.lr_policy == ""
    assert not field("SolverParameter", "base_lr").has_default_value
    assert not field("ConvolutionParameter", "num_output").has_default_value


# ---------------------------------------------------------------------------
# Caffe's nets parse (../shared)
# ---------------------------------------------------------------------------

def _shared_prototxts():
    roots = [SHARED / "zoo", SHARED / "caffe_tests"]
    files = sorted(p for r in roots if r.is_dir() for p in r.rglob("*.prototxt"))
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason="../shared (Caffe's reference nets) is not beside the repo"))]
    return [pytest.param(p, id=str(p.relative_to(SHARED))) for p in files]


@pytest.mark.shared
@pytest.mark.parametrize("path", _shared_prototxts())
def test_shared_prototxt_parses(path):
    # Solvers by name (including caffe_tests/upgrade_SolverType_*); everything else,
    # zoo/errors included (those fail at Net Init, not at parsing), is a NetParameter.
    cls = pb.SolverParameter if "solver" in path.name.lower() else pb.NetParameter
    msg = cls()
    text_format.Parse(path.read_text(encoding="utf-8"), msg)
    assert msg.IsInitialized()
    assert msg.ListFields(), "%s parsed to an empty %s" % (path, cls.__name__)
    again = cls.FromString(msg.SerializeToString())
    assert again == msg

"""Caffe's proto upgrades (``util/upgrade_proto.cpp``), as pure functions.

Every function takes a message and returns a new one: the argument is never
changed. Messages go through :data:`engine.core.log.upgrade_log` with Caffe's words
and levels (INFO / WARNING / ERROR), in Caffe's order.

Net upgrades, in the order ``UpgradeNetAsNeeded`` applies them:

1. V0 -> V1 (``layers { layer { type: "conv" ... } }``): padding layers are
   folded into the convolution / pooling layer they feed, the flat V0 fields
   move into the ``*_param`` messages and the type string becomes the V1 enum.
2. Data transformation: ``scale``/``mean_file``/``crop_size``/``mirror`` in the
   ``data_param``/``image_data_param``/``window_data_param`` of V1 layers move
   to ``transform_param``.
3. V1 -> V2 (``layers`` -> ``layer``): enum types become strings; ``blobs_lr``,
   ``weight_decay``, ``blob_share_mode`` and the ``param`` names become
   ``param { name share_mode lr_mult decay_mult }``.
4. Input fields: ``input`` + ``input_shape``/``input_dim`` become one layer
   named ``"input"`` of type ``Input`` put first in the net; the fields are
   cleared (a bare ``input`` without shapes, as in old caffemodels, is simply
   dropped).
5. BatchNorm: a BatchNorm layer with exactly three ``param`` specs gets
   ``lr_mult: 0`` and ``decay_mult: 0`` on all three (other fields kept).

Solver: the ``solver_type`` enum becomes the ``type`` string; reading a solver
file also fills in ``snapshot_prefix`` as Caffe does.

Where Caffe CHECK-fails or LOG(FATAL)s, a :class:`~engine.core.errors.NetError`
(nets), :class:`~engine.core.errors.SolverError` (solvers) or
:class:`~engine.core.errors.ParseError` (unreadable files) carries Caffe's text.
"""
import os

from engine.core.errors import LimitExceeded, NetError, ParseError, SolverError
from engine.core.log import check_failed, upgrade_log
from engine.proto import caffe_pb2

__all__ = [
    "net_needs_upgrade", "upgrade_net", "upgrade_net_as_needed",
    "net_needs_v0_to_v1_upgrade", "upgrade_v0_net", "upgrade_v0_padding_layers",
    "upgrade_v0_layer_parameter", "upgrade_v0_layer_type",
    "net_needs_data_upgrade", "upgrade_net_data_transformation",
    "net_needs_v1_to_v2_upgrade", "upgrade_v1_net", "upgrade_v1_layer_parameter",
    "upgrade_v1_layer_type",
    "net_needs_input_upgrade", "upgrade_net_input",
    "net_needs_batch_norm_upgrade", "upgrade_net_batch_norm",
    "solver_needs_upgrade", "solver_needs_type_upgrade", "upgrade_solver_type",
    "upgrade_solver", "upgrade_solver_as_needed", "upgrade_snapshot_prefix",
    "read_net_params", "read_net_params_binary", "read_solver_params",
]

V1 = caffe_pb2.V1LayerParameter


def _copy(msg):
    out = type(msg)()
    out.CopyFrom(msg)
    return out


# ---------------------------------------------------------------------------
# UpgradeNetAsNeeded
# ---------------------------------------------------------------------------

def net_needs_upgrade(net_param):
    """NetNeedsUpgrade: any of the five net upgrades applies."""
    return (net_needs_v0_to_v1_upgrade(net_param) or net_needs_v1_to_v2_upgrade(net_param)
            or net_needs_data_upgrade(net_param) or net_needs_input_upgrade(net_param)
            or net_needs_batch_norm_upgrade(net_param))


def upgrade_net_as_needed(net_param, path=""):
    """UpgradeNetAsNeeded: ``(upgraded NetParameter, success)``.

    ``success`` is False when the V0 or V1 upgrade reported problems (Caffe
    logs them and carries on, and so does this).
    """
    param = _copy(net_param)
    success = True
    if net_needs_v0_to_v1_upgrade(param):
        param, ok = _attempt_upgrade(
            upgrade_v0_net, param, "V0LayerParameter", path,
            "Warning: had one or more problems upgrading V0NetParameter to NetParameter (see above); "
            "continuing anyway.",
            "Successfully upgraded file specified using deprecated V0LayerParameter")
        success = success and ok
        upgrade_log.warning("Note that future Caffe releases will not support "
                            "V0NetParameter; use ./build/tools/upgrade_net_proto_text for "
                            "prototxt and ./build/tools/upgrade_net_proto_binary for model "
                            "weights upgrade this and any other net protos to the new format.")
    if net_needs_data_upgrade(param):
        upgrade_log.info("Attempting to upgrade input file specified using deprecated "
                         "transformation parameters: %s", path)
        param = upgrade_net_data_transformation(param)
        upgrade_log.info("Successfully upgraded file specified using deprecated "
                         "data transformation parameters.")
        upgrade_log.warning("Note that future Caffe releases will only support "
                            "transform_param messages for transformation fields.")
    if net_needs_v1_to_v2_upgrade(param):
        param, ok = _attempt_upgrade(
            upgrade_v1_net, param, "V1LayerParameter", path,
            "Warning: had one or more problems upgrading V1LayerParameter (see above); continuing anyway.",
            "Successfully upgraded file specified using deprecated V1LayerParameter")
        success = success and ok
    if net_needs_input_upgrade(param):
        upgrade_log.info("Attempting to upgrade input file specified using deprecated "
                         "input fields: %s", path)
        param = upgrade_net_input(param)
        upgrade_log.info("Successfully upgraded file specified using deprecated input fields.")
        upgrade_log.warning("Note that future Caffe releases will only support "
                            "input layers and not input fields.")
    if net_needs_batch_norm_upgrade(param):
        upgrade_log.info("Attempting to upgrade batch norm layers using deprecated "
                         "params: %s", path)
        param = upgrade_net_batch_norm(param)
        upgrade_log.info("Successfully upgraded batch norm layers using deprecated params.")
    return param, success


def _attempt_upgrade(upgrade, param, deprecated, path, failed, succeeded):
    """One step of Upgrade{Net,Solver}AsNeeded: "Attempting ...", the upgrade, then the
    error (``failed``) or the info (``succeeded``) line. ``(upgraded param, ok)``."""
    upgrade_log.info("Attempting to upgrade input file specified using deprecated %s: %s",
                     deprecated, path)
    param, ok = upgrade(param)
    if ok:
        upgrade_log.info(succeeded)
    else:
        upgrade_log.error(failed)
    return param, ok


def upgrade_net(net_param, path=""):
    """UpgradeNetAsNeeded, returning only the upgraded NetParameter.

    ``path`` is the file named in the log messages.
    """
    return upgrade_net_as_needed(net_param, path)[0]


# ---------------------------------------------------------------------------
# V0 -> V1
# ---------------------------------------------------------------------------

def net_needs_v0_to_v1_upgrade(net_param):
    """True when a ``layers`` entry holds a V0 ``layer`` message."""
    return any(l.HasField("layer") for l in net_param.layers)


def upgrade_v0_net(net_param):
    """UpgradeV0Net: ``(V1 NetParameter, fully_compatible)``.

    Only the name, the layers, ``input``, ``input_dim`` and ``force_backward``
    are carried over, as in Caffe.
    """
    v0 = upgrade_v0_padding_layers(net_param)
    out = caffe_pb2.NetParameter()
    compatible = True
    if v0.HasField("name"):
        out.name = v0.name
    for connection in v0.layers:
        layer, ok = upgrade_v0_layer_parameter(connection)
        out.layers.add().CopyFrom(layer)
        compatible = compatible and ok
    out.input.extend(v0.input)
    out.input_dim.extend(v0.input_dim)
    if v0.HasField("force_backward"):
        out.force_backward = v0.force_backward
    return out, compatible


def _check_failed(condition, message):
    return NetError(check_failed(condition, message=message))


def upgrade_v0_padding_layers(net_param):
    """UpgradeV0PaddingLayers: drop V0 ``padding`` layers, moving their pad
    into the conv/pool layer that reads them (still a V0 net)."""
    out = _copy(net_param)
    del out.layers[:]
    last_top = dict.fromkeys(net_param.input, -1)
    for i, connection in enumerate(net_param.layers):
        v0 = connection.layer
        if v0.type != "padding":
            out.layers.add().CopyFrom(connection)
        for j, blob in enumerate(connection.bottom):
            if blob not in last_top:
                raise NetError("Unknown blob input %s to layer %d" % (blob, j), blob=blob,
                               layer=v0.name or None)
            top_idx = last_top[blob]
            if top_idx == -1:
                continue
            source = net_param.layers[top_idx]
            if source.layer.type != "padding":
                continue
            if v0.type not in ("conv", "pool"):
                raise _check_failed('(layer_param.type() == "conv") || '
                                    '(layer_param.type() == "pool")',
                                    "Padding layer input to non-convolutional / non-pooling "
                                    "layer type %s" % v0.type)
            if len(connection.bottom) != 1:
                raise _check_failed("layer_connection.bottom_size() == 1 (%d vs. 1)"
                                    % len(connection.bottom),
                                    "Conv Layer takes a single blob as input.")
            if len(source.bottom) != 1:
                raise _check_failed("source_layer.bottom_size() == 1 (%d vs. 1)"
                                    % len(source.bottom),
                                    "Padding Layer takes a single blob as input.")
            if len(source.top) != 1:
                raise _check_failed("source_layer.top_size() == 1 (%d vs. 1)" % len(source.top),
                                    "Padding Layer produces a single blob as output.")
            target = out.layers[len(out.layers) - 1]
            target.layer.pad = source.layer.pad
            target.bottom[j] = source.bottom[0]
        for blob in connection.top:
            last_top[blob] = i
    return out


# V0 flat field -> {V0 type: (V1 sub-message, its field)}, in the order Caffe
# checks them. ``None`` as the type key: any type (the transformation fields).
_V0_FIELDS = [
    ("num_output", {"conv": ("convolution_param", "num_output"),
                    "innerproduct": ("inner_product_param", "num_output")}),
    ("biasterm", {"conv": ("convolution_param", "bias_term"),
                  "innerproduct": ("inner_product_param", "bias_term")}),
    ("weight_filler", {"conv": ("convolution_param", "weight_filler"),
                       "innerproduct": ("inner_product_param", "weight_filler")}),
    ("bias_filler", {"conv": ("convolution_param", "bias_filler"),
                     "innerproduct": ("inner_product_param", "bias_filler")}),
    ("pad", {"conv": ("convolution_param", "pad"), "pool": ("pooling_param", "pad")}),
    ("kernelsize", {"conv": ("convolution_param", "kernel_size"),
                    "pool": ("pooling_param", "kernel_size")}),
    ("group", {"conv": ("convolution_param", "group")}),
    ("stride", {"conv": ("convolution_param", "stride"), "pool": ("pooling_param", "stride")}),
    ("pool", {"pool": ("pooling_param", "pool")}),
    ("dropout_ratio", {"dropout": ("dropout_param", "dropout_ratio")}),
    ("local_size", {"lrn": ("lrn_param", "local_size")}),
    ("alpha", {"lrn": ("lrn_param", "alpha")}),
    ("beta", {"lrn": ("lrn_param", "beta")}),
    ("k", {"lrn": ("lrn_param", "k")}),
    ("source", {"data": ("data_param", "source"),
                "hdf5_data": ("hdf5_data_param", "source"),
                "images": ("image_data_param", "source"),
                "window_data": ("window_data_param", "source"),
                "infogain_loss": ("infogain_loss_param", "source")}),
    ("scale", {None: ("transform_param", "scale")}),
    ("meanfile", {None: ("transform_param", "mean_file")}),
    ("batchsize", {"data": ("data_param", "batch_size"),
                   "hdf5_data": ("hdf5_data_param", "batch_size"),
                   "images": ("image_data_param", "batch_size"),
                   "window_data": ("window_data_param", "batch_size")}),
    ("cropsize", {None: ("transform_param", "crop_size")}),
    ("mirror", {None: ("transform_param", "mirror")}),
    ("rand_skip", {"data": ("data_param", "rand_skip"),
                   "images": ("image_data_param", "rand_skip")}),
    ("shuffle_images", {"images": ("image_data_param", "shuffle")}),
    ("new_height", {"images": ("image_data_param", "new_height")}),
    ("new_width", {"images": ("image_data_param", "new_width")}),
    ("concat_dim", {"concat": ("concat_param", "concat_dim")}),
    ("det_fg_threshold", {"window_data": ("window_data_param", "fg_threshold")}),
    ("det_bg_threshold", {"window_data": ("window_data_param", "bg_threshold")}),
    ("det_fg_fraction", {"window_data": ("window_data_param", "fg_fraction")}),
    ("det_context_pad", {"window_data": ("window_data_param", "context_pad")}),
    ("det_crop_mode", {"window_data": ("window_data_param", "crop_mode")}),
    ("hdf5_output_param", {"hdf5_output": (None, "hdf5_output_param")}),
]
# The name Caffe's error message uses where it is not the field's own.
_V0_ERROR_NAMES = {"shuffle_images": "shuffle"}


def _assign(target, field, value):
    """Set ``target.field`` whether it is a scalar, a repeated scalar or a message."""
    descriptor = target.DESCRIPTOR.fields_by_name[field]
    if descriptor.message_type is not None:
        getattr(target, field).CopyFrom(value)
    elif descriptor.is_repeated:
        getattr(target, field).append(value)
    else:
        setattr(target, field, value)


def upgrade_v0_layer_parameter(v0_connection):
    """UpgradeV0LayerParameter: ``(V1LayerParameter, fully_compatible)``.

    A V0 field that does not belong to the layer's type is logged
    ("Unknown parameter ... for layer type ...") and dropped.
    """
    out = V1()
    compatible = True
    out.bottom.extend(v0_connection.bottom)
    out.top.extend(v0_connection.top)
    if not v0_connection.HasField("layer"):
        return out, compatible
    v0 = v0_connection.layer
    if v0.HasField("name"):
        out.name = v0.name
    ltype = v0.type
    if v0.HasField("type"):
        out.type = upgrade_v0_layer_type(ltype)
    for blob in v0.blobs:
        out.blobs.add().CopyFrom(blob)
    out.blobs_lr.extend(v0.blobs_lr)
    out.weight_decay.extend(v0.weight_decay)
    for field, targets in _V0_FIELDS:
        if not v0.HasField(field):
            continue
        target = targets.get(None) or targets.get(ltype)
        if target is None:
            upgrade_log.error("Unknown parameter %s for layer type %s",
                              _V0_ERROR_NAMES.get(field, field), ltype)
            compatible = False
            continue
        sub, dest = target
        value = getattr(v0, field)
        if field == "pool":
            name = caffe_pb2.V0LayerParameter.PoolMethod.Name(value)
            value = caffe_pb2.PoolingParameter.PoolMethod.Value(name)
        _assign(out if sub is None else getattr(out, sub), dest, value)
    return out, compatible


_V0_TYPES = {
    "accuracy": V1.ACCURACY, "bnll": V1.BNLL, "concat": V1.CONCAT, "conv": V1.CONVOLUTION,
    "data": V1.DATA, "dropout": V1.DROPOUT, "euclidean_loss": V1.EUCLIDEAN_LOSS,
    "flatten": V1.FLATTEN, "hdf5_data": V1.HDF5_DATA, "hdf5_output": V1.HDF5_OUTPUT,
    "im2col": V1.IM2COL, "images": V1.IMAGE_DATA, "infogain_loss": V1.INFOGAIN_LOSS,
    "innerproduct": V1.INNER_PRODUCT, "lrn": V1.LRN,
    "multinomial_logistic_loss": V1.MULTINOMIAL_LOGISTIC_LOSS, "pool": V1.POOLING,
    "relu": V1.RELU, "sigmoid": V1.SIGMOID, "softmax": V1.SOFTMAX,
    "softmax_loss": V1.SOFTMAX_LOSS, "split": V1.SPLIT, "tanh": V1.TANH,
    "window_data": V1.WINDOW_DATA,
}


def upgrade_v0_layer_type(type_name):
    """UpgradeV0LayerType: V0 type string -> V1 LayerType enum value."""
    try:
        return _V0_TYPES[type_name]
    except KeyError:
        raise NetError("Unknown layer name: %s" % type_name) from None


# ---------------------------------------------------------------------------
# Data transformation fields
# ---------------------------------------------------------------------------

_TRANSFORM_FIELDS = ("scale", "mean_file", "crop_size", "mirror")
_DATA_LAYERS = ((V1.DATA, "data_param"), (V1.IMAGE_DATA, "image_data_param"),
                (V1.WINDOW_DATA, "window_data_param"))


def net_needs_data_upgrade(net_param):
    """True when a V1 data layer keeps transformation fields in its own param."""
    for layer in net_param.layers:
        for ltype, sub in _DATA_LAYERS:
            if layer.type == ltype:
                param = getattr(layer, sub)
                if any(param.HasField(f) for f in _TRANSFORM_FIELDS):
                    return True
    return False


def upgrade_net_data_transformation(net_param):
    """UpgradeNetDataTransformation: move the fields into ``transform_param``.

    As in Caffe, every DATA / IMAGE_DATA / WINDOW_DATA layer ends up with its
    data param and a ``transform_param`` present (empty if nothing moved).
    """
    out = _copy(net_param)
    for layer in out.layers:
        for ltype, sub in _DATA_LAYERS:
            if layer.type != ltype:
                continue
            param = getattr(layer, sub)
            param.SetInParent()
            layer.transform_param.SetInParent()
            for f in _TRANSFORM_FIELDS:
                if param.HasField(f):
                    setattr(layer.transform_param, f, getattr(param, f))
                    param.ClearField(f)
    return out


# ---------------------------------------------------------------------------
# V1 -> V2
# ---------------------------------------------------------------------------

def net_needs_v1_to_v2_upgrade(net_param):
    """True when the net uses ``layers`` (V1) at all."""
    return len(net_param.layers) > 0


def upgrade_v1_net(net_param):
    """UpgradeV1Net: ``(NetParameter with 'layer', fully_compatible)``.

    Existing ``layer`` entries are dropped (and reported), as in Caffe.
    """
    compatible = True
    if len(net_param.layer) > 0:
        upgrade_log.error("Input NetParameter to be upgraded already specifies 'layer' "
                          "fields; these will be ignored for the upgrade.")
        compatible = False
    out = _copy(net_param)
    del out.layers[:]
    del out.layer[:]
    for i, v1_layer in enumerate(net_param.layers):
        layer, ok = upgrade_v1_layer_parameter(v1_layer)
        out.layer.add().CopyFrom(layer)
        if not ok:
            upgrade_log.error("Upgrade of input layer %d failed.", i)
            compatible = False
    return out, compatible


# The V1 layer's sub-messages that UpgradeV1LayerParameter copies verbatim.
_V1_PARAMS = (
    "accuracy_param", "argmax_param", "concat_param", "contrastive_loss_param",
    "convolution_param", "data_param", "dropout_param", "dummy_data_param",
    "eltwise_param", "exp_param", "hdf5_data_param", "hdf5_output_param",
    "hinge_loss_param", "image_data_param", "infogain_loss_param", "inner_product_param",
    "lrn_param", "memory_data_param", "mvn_param", "pooling_param", "power_param",
    "relu_param", "sigmoid_param", "softmax_param", "slice_param", "tanh_param",
    "threshold_param", "window_data_param", "transform_param", "loss_param",
)


def _param_spec(layer, i):
    while len(layer.param) <= i:
        layer.param.add()
    return layer.param[i]


def upgrade_v1_layer_parameter(v1_layer):
    """UpgradeV1LayerParameter: ``(LayerParameter, fully_compatible)``."""
    out = caffe_pb2.LayerParameter()
    compatible = True
    out.bottom.extend(v1_layer.bottom)
    out.top.extend(v1_layer.top)
    if v1_layer.HasField("name"):
        out.name = v1_layer.name
    for rule in v1_layer.include:
        out.include.add().CopyFrom(rule)
    for rule in v1_layer.exclude:
        out.exclude.add().CopyFrom(rule)
    if v1_layer.HasField("type"):
        out.type = upgrade_v1_layer_type(v1_layer.type)
    for blob in v1_layer.blobs:
        out.blobs.add().CopyFrom(blob)
    for i, name in enumerate(v1_layer.param):
        _param_spec(out, i).name = name
    for i, mode in enumerate(v1_layer.blob_share_mode):
        try:
            name = V1.DimCheckMode.Name(mode)
        except ValueError:
            raise NetError("Unknown blob_share_mode: %d" % mode, layer=v1_layer.name) from None
        _param_spec(out, i).share_mode = caffe_pb2.ParamSpec.DimCheckMode.Value(name)
    for i, lr in enumerate(v1_layer.blobs_lr):
        _param_spec(out, i).lr_mult = lr
    for i, decay in enumerate(v1_layer.weight_decay):
        _param_spec(out, i).decay_mult = decay
    out.loss_weight.extend(v1_layer.loss_weight)
    for sub in _V1_PARAMS:
        if v1_layer.HasField(sub):
            getattr(out, sub).CopyFrom(getattr(v1_layer, sub))
    if v1_layer.HasField("layer"):
        upgrade_log.error("Input NetParameter has V0 layer -- ignoring.")
        compatible = False
    return out, compatible


_V1_TYPES = {
    V1.NONE: "", V1.ABSVAL: "AbsVal", V1.ACCURACY: "Accuracy", V1.ARGMAX: "ArgMax",
    V1.BNLL: "BNLL", V1.CONCAT: "Concat", V1.CONTRASTIVE_LOSS: "ContrastiveLoss",
    V1.CONVOLUTION: "Convolution", V1.DECONVOLUTION: "Deconvolution", V1.DATA: "Data",
    V1.DROPOUT: "Dropout", V1.DUMMY_DATA: "DummyData", V1.EUCLIDEAN_LOSS: "EuclideanLoss",
    V1.ELTWISE: "Eltwise", V1.EXP: "Exp", V1.FLATTEN: "Flatten", V1.HDF5_DATA: "HDF5Data",
    V1.HDF5_OUTPUT: "HDF5Output", V1.HINGE_LOSS: "HingeLoss", V1.IM2COL: "Im2col",
    V1.IMAGE_DATA: "ImageData", V1.INFOGAIN_LOSS: "InfogainLoss",
    V1.INNER_PRODUCT: "InnerProduct", V1.LRN: "LRN", V1.MEMORY_DATA: "MemoryData",
    V1.MULTINOMIAL_LOGISTIC_LOSS: "MultinomialLogisticLoss", V1.MVN: "MVN",
    V1.POOLING: "Pooling", V1.POWER: "Power", V1.RELU: "ReLU", V1.SIGMOID: "Sigmoid",
    V1.SIGMOID_CROSS_ENTROPY_LOSS: "SigmoidCrossEntropyLoss", V1.SILENCE: "Silence",
    V1.SOFTMAX: "Softmax", V1.SOFTMAX_LOSS: "SoftmaxWithLoss", V1.SPLIT: "Split",
    V1.SLICE: "Slice", V1.TANH: "TanH", V1.WINDOW_DATA: "WindowData",
    V1.THRESHOLD: "Threshold",
}


def upgrade_v1_layer_type(v1_type):
    """UpgradeV1LayerType: V1 LayerType enum value -> layer type string."""
    try:
        return _V1_TYPES[v1_type]
    except KeyError:
        raise NetError("Unknown V1LayerParameter layer type: %d" % v1_type) from None


# ---------------------------------------------------------------------------
# Input fields -> Input layer
# ---------------------------------------------------------------------------

def net_needs_input_upgrade(net_param):
    """True when the net declares ``input`` fields."""
    return len(net_param.input) > 0


def upgrade_net_input(net_param):
    """UpgradeNetInput: the ``input`` fields become a first layer
    ``{name: "input" type: "Input"}`` with one top and one shape per input."""
    out = _copy(net_param)
    has_shape = len(net_param.input_shape) > 0
    has_dim = len(net_param.input_dim) > 0
    if has_shape or has_dim:
        layer = caffe_pb2.LayerParameter(name="input", type="Input")
        layer.input_param.SetInParent()
        for i, blob in enumerate(net_param.input):
            layer.top.append(blob)
            shape = layer.input_param.shape.add()
            if has_shape:
                if i >= len(net_param.input_shape):
                    raise NetError("input '%s' (index %d) has no input_shape: %d input_shape "
                                   "for %d inputs" % (blob, i, len(net_param.input_shape),
                                                      len(net_param.input)), blob=blob,
                                   field="input", field_index=i)
                shape.CopyFrom(net_param.input_shape[i])
            else:
                dims = net_param.input_dim[4 * i:4 * i + 4]
                if len(dims) != 4:
                    raise NetError("input '%s' (index %d) needs 4 input_dim values: %d "
                                   "input_dim for %d inputs" % (blob, i, len(net_param.input_dim),
                                                                len(net_param.input)), blob=blob,
                                   field="input", field_index=i)
                shape.dim.extend(dims)
        layers = [layer] + [_copy(l) for l in out.layer]
        del out.layer[:]
        out.layer.extend(layers)
    out.ClearField("input")
    out.ClearField("input_shape")
    out.ClearField("input_dim")
    return out


# ---------------------------------------------------------------------------
# BatchNorm params
# ---------------------------------------------------------------------------

def _old_batch_norm(layer):
    return layer.type == "BatchNorm" and len(layer.param) == 3


def net_needs_batch_norm_upgrade(net_param):
    """True when a BatchNorm layer declares three ``param`` specs (the old way
    of freezing its statistics)."""
    return any(_old_batch_norm(l) for l in net_param.layer)


def upgrade_net_batch_norm(net_param):
    """UpgradeNetBatchNorm: ``lr_mult: 0`` and ``decay_mult: 0`` on each of the
    three param specs of such BatchNorm layers; everything else is kept."""
    out = _copy(net_param)
    for layer in out.layer:
        if _old_batch_norm(layer):
            for spec in layer.param:
                spec.lr_mult = 0.0
                spec.decay_mult = 0.0
    return out


# ---------------------------------------------------------------------------
# Solver
# ---------------------------------------------------------------------------

_SOLVER_TYPES = {"SGD": "SGD", "NESTEROV": "Nesterov", "ADAGRAD": "AdaGrad",
                 "RMSPROP": "RMSProp", "ADADELTA": "AdaDelta", "ADAM": "Adam"}


def solver_needs_type_upgrade(solver_param):
    """SolverNeedsTypeUpgrade: the old ``solver_type`` enum is set."""
    return solver_param.HasField("solver_type")


def solver_needs_upgrade(solver_param):
    """True when UpgradeSolverAsNeeded would change something."""
    return solver_needs_type_upgrade(solver_param)


def upgrade_solver_type(solver_param):
    """UpgradeSolverType: ``(SolverParameter, ok)``; ``solver_type`` -> ``type``.

    Raises SolverError when both fields are given (Caffe's CHECK).
    """
    if solver_param.HasField("solver_type") and solver_param.HasField("type"):
        raise SolverError("Check failed: !solver_param->has_solver_type() || "
                          "!solver_param->has_type() Failed to upgrade solver: old solver_type "
                          "field (enum) and new type field (string) cannot be both specified in "
                          "solver proto text.")
    out = _copy(solver_param)
    if not solver_param.HasField("solver_type"):
        upgrade_log.error("Warning: solver type already up to date. ")
        return out, False
    value = solver_param.solver_type
    try:
        out.type = _SOLVER_TYPES[caffe_pb2.SolverParameter.SolverType.Name(value)]
    except (KeyError, ValueError):
        raise SolverError("Unknown SolverParameter solver_type: %d" % value) from None
    out.ClearField("solver_type")
    return out, True


def upgrade_solver_as_needed(solver_param, path=""):
    """UpgradeSolverAsNeeded: ``(upgraded SolverParameter, success)``."""
    out = _copy(solver_param)
    success = True
    if solver_needs_type_upgrade(out):
        out, ok = _attempt_upgrade(
            upgrade_solver_type, out, "'solver_type' field (enum)'", path,
            "Warning: had one or more problems upgrading SolverType (see above).",
            "Successfully upgraded file specified using deprecated 'solver_type' field (enum) to "
            "'type' field (string).")
        success = success and ok
        if ok:
            upgrade_log.warning("Note that future Caffe releases will only support "
                                "'type' field (string) for a solver's type.")
    return out, success


def upgrade_solver(solver_param, path=""):
    """UpgradeSolverAsNeeded, returning only the upgraded SolverParameter."""
    return upgrade_solver_as_needed(solver_param, path)[0]


def _split_extension(path):
    """boost::filesystem (v3) stem/extension split of the last path element."""
    head, name = os.path.split(path)
    if name in ("", ".", ".."):
        return path, ""
    dot = name.rfind(".")
    if dot < 0:
        return path, ""
    return os.path.join(head, name[:dot]) if head else name[:dot], name[dot:]


def upgrade_snapshot_prefix(solver_param, path):
    """UpgradeSnapshotPrefixProperty: with no ``snapshot_prefix``, use the solver
    file's path without its extension; when it names a directory, append the
    solver file's stem. Looks at the file system (the directory test)."""
    out = _copy(solver_param)
    path = os.fspath(path)
    if not out.HasField("snapshot_prefix"):
        out.snapshot_prefix = _split_extension(path)[0]
        upgrade_log.info("snapshot_prefix was not specified and is set to %s",
                         out.snapshot_prefix)
    elif out.snapshot_prefix and os.path.isdir(out.snapshot_prefix):
        stem = _split_extension(os.path.basename(path))[0]
        out.snapshot_prefix = os.path.join(out.snapshot_prefix, stem)
        upgrade_log.info("snapshot_prefix was a directory and is replaced to %s",
                         out.snapshot_prefix)
    return out


# ---------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------

def _read_or_die(reader, what, path):
    """``reader(path)`` (an ``engine.core.io`` reader's name) with Caffe's "Failed to parse
    ... file" CHECK on a text/binary parse failure; a missing file keeps its own error."""
    from engine.core import io
    try:
        return getattr(io, reader)(path)
    except LimitExceeded:
        raise
    except ParseError as exc:
        if exc.detail.startswith("File not found"):
            raise
        raise ParseError("Failed to parse %s file: %s: %s" % (what, path, exc.detail),
                         exc.path, exc.line, exc.column, layer=exc.layer, field=exc.field,
                         layer_line=exc.layer_line) from None


def read_net_params(path):
    """ReadNetParamsFromTextFileOrDie: read a net prototxt and upgrade it (an upgrade's
    error about a legacy ``input:`` field names that field's line)."""
    path = os.fspath(path)
    param = _read_or_die("read_net_prototxt", "NetParameter", path)
    try:
        return upgrade_net(param, path)
    except NetError as e:
        if e.field == "input":
            from engine.core.source_map import NetSource
            src = NetSource.read(path)
            if src is not None and e.field_index < len(src.inputs):
                node = src.inputs[e.field_index]
                e.locate(path, node.line, node.column)
        raise


def read_net_params_binary(path):
    """ReadNetParamsFromBinaryFileOrDie: read a caffemodel (V0/V1 ones too)
    and upgrade it."""
    path = os.fspath(path)
    return upgrade_net(_read_or_die("read_caffemodel", "NetParameter", path), path)


def read_solver_params(path):
    """ReadSolverParamsFromTextFileOrDie: read a solver prototxt, upgrade it
    and settle ``snapshot_prefix``."""
    path = os.fspath(path)
    param = upgrade_solver(_read_or_die("read_solver_prototxt", "SolverParameter", path), path)
    return upgrade_snapshot_prefix(param, path)

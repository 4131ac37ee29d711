from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRAIN: _ClassVar[Phase]
    TEST: _ClassVar[Phase]
TRAIN: Phase
TEST: Phase

class BlobShape(_message.Message):
    __slots__ = ("dim",)
    DIM_FIELD_NUMBER: _ClassVar[int]
    dim: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dim: _Optional[_Iterable[int]] = ...) -> None: ...

class BlobProto(_message.Message):
    __slots__ = ("shape", "data", "diff", "double_data", "double_diff", "num", "channels", "height", "width")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_DATA_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_DIFF_FIELD_NUMBER: _ClassVar[int]
    NUM_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    shape: BlobShape
    data: _containers.RepeatedScalarFieldContainer[float]
    diff: _containers.RepeatedScalarFieldContainer[float]
    double_data: _containers.RepeatedScalarFieldContainer[float]
    double_diff: _containers.RepeatedScalarFieldContainer[float]
    num: int
    channels: int
    height: int
    width: int
    def __init__(self, shape: _Optional[_Union[BlobShape, _Mapping]] = ..., data: _Optional[_Iterable[float]] = ..., diff: _Optional[_Iterable[float]] = ..., double_data: _Optional[_Iterable[float]] = ..., double_diff: _Optional[_Iterable[float]] = ..., num: _Optional[int] = ..., channels: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ...) -> None: ...

class BlobProtoVector(_message.Message):
    __slots__ = ("blobs",)
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    def __init__(self, blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ...) -> None: ...

class Datum(_message.Message):
    __slots__ = ("channels", "height", "width", "data", "label", "float_data", "encoded")
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    FLOAT_DATA_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    channels: int
    height: int
    width: int
    data: bytes
    label: int
    float_data: _containers.RepeatedScalarFieldContainer[float]
    encoded: bool
    def __init__(self, channels: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., data: _Optional[bytes] = ..., label: _Optional[int] = ..., float_data: _Optional[_Iterable[float]] = ..., encoded: _Optional[bool] = ...) -> None: ...

class FillerParameter(_message.Message):
    __slots__ = ("type", "value", "min", "max", "mean", "std", "sparse", "variance_norm")
    class VarianceNorm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FAN_IN: _ClassVar[FillerParameter.VarianceNorm]
        FAN_OUT: _ClassVar[FillerParameter.VarianceNorm]
        AVERAGE: _ClassVar[FillerParameter.VarianceNorm]
    FAN_IN: FillerParameter.VarianceNorm
    FAN_OUT: FillerParameter.VarianceNorm
    AVERAGE: FillerParameter.VarianceNorm
    TYPE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FIELD_NUMBER: _ClassVar[int]
    VARIANCE_NORM_FIELD_NUMBER: _ClassVar[int]
    type: str
    value: float
    min: float
    max: float
    mean: float
    std: float
    sparse: int
    variance_norm: FillerParameter.VarianceNorm
    def __init__(self, type: _Optional[str] = ..., value: _Optional[float] = ..., min: _Optional[float] = ..., max: _Optional[float] = ..., mean: _Optional[float] = ..., std: _Optional[float] = ..., sparse: _Optional[int] = ..., variance_norm: _Optional[_Union[FillerParameter.VarianceNorm, str]] = ...) -> None: ...

class NetParameter(_message.Message):
    __slots__ = ("name", "input", "input_shape", "input_dim", "force_backward", "state", "debug_info", "layer", "layers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    INPUT_DIM_FIELD_NUMBER: _ClassVar[int]
    FORCE_BACKWARD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DEBUG_INFO_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    input: _containers.RepeatedScalarFieldContainer[str]
    input_shape: _containers.RepeatedCompositeFieldContainer[BlobShape]
    input_dim: _containers.RepeatedScalarFieldContainer[int]
    force_backward: bool
    state: NetState
    debug_info: bool
    layer: _containers.RepeatedCompositeFieldContainer[LayerParameter]
    layers: _containers.RepeatedCompositeFieldContainer[V1LayerParameter]
    def __init__(self, name: _Optional[str] = ..., input: _Optional[_Iterable[str]] = ..., input_shape: _Optional[_Iterable[_Union[BlobShape, _Mapping]]] = ..., input_dim: _Optional[_Iterable[int]] = ..., force_backward: _Optional[bool] = ..., state: _Optional[_Union[NetState, _Mapping]] = ..., debug_info: _Optional[bool] = ..., layer: _Optional[_Iterable[_Union[LayerParameter, _Mapping]]] = ..., layers: _Optional[_Iterable[_Union[V1LayerParameter, _Mapping]]] = ...) -> None: ...

class SolverParameter(_message.Message):
    __slots__ = ("net", "net_param", "train_net", "test_net", "train_net_param", "test_net_param", "train_state", "test_state", "test_iter", "test_interval", "test_compute_loss", "test_initialization", "base_lr", "display", "average_loss", "max_iter", "iter_size", "lr_policy", "gamma", "power", "momentum", "weight_decay", "regularization_type", "stepsize", "stepvalue", "clip_gradients", "snapshot", "snapshot_prefix", "snapshot_diff", "snapshot_format", "solver_mode", "device_id", "random_seed", "type", "delta", "momentum2", "rms_decay", "debug_info", "snapshot_after_train", "solver_type", "layer_wise_reduce", "weights")
    class SnapshotFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        HDF5: _ClassVar[SolverParameter.SnapshotFormat]
        BINARYPROTO: _ClassVar[SolverParameter.SnapshotFormat]
    HDF5: SolverParameter.SnapshotFormat
    BINARYPROTO: SolverParameter.SnapshotFormat
    class SolverMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CPU: _ClassVar[SolverParameter.SolverMode]
        GPU: _ClassVar[SolverParameter.SolverMode]
    CPU: SolverParameter.SolverMode
    GPU: SolverParameter.SolverMode
    class SolverType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SGD: _ClassVar[SolverParameter.SolverType]
        NESTEROV: _ClassVar[SolverParameter.SolverType]
        ADAGRAD: _ClassVar[SolverParameter.SolverType]
        RMSPROP: _ClassVar[SolverParameter.SolverType]
        ADADELTA: _ClassVar[SolverParameter.SolverType]
        ADAM: _ClassVar[SolverParameter.SolverType]
    SGD: SolverParameter.SolverType
    NESTEROV: SolverParameter.SolverType
    ADAGRAD: SolverParameter.SolverType
    RMSPROP: SolverParameter.SolverType
    ADADELTA: SolverParameter.SolverType
    ADAM: SolverParameter.SolverType
    NET_FIELD_NUMBER: _ClassVar[int]
    NET_PARAM_FIELD_NUMBER: _ClassVar[int]
    TRAIN_NET_FIELD_NUMBER: _ClassVar[int]
    TEST_NET_FIELD_NUMBER: _ClassVar[int]
    TRAIN_NET_PARAM_FIELD_NUMBER: _ClassVar[int]
    TEST_NET_PARAM_FIELD_NUMBER: _ClassVar[int]
    TRAIN_STATE_FIELD_NUMBER: _ClassVar[int]
    TEST_STATE_FIELD_NUMBER: _ClassVar[int]
    TEST_ITER_FIELD_NUMBER: _ClassVar[int]
    TEST_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    TEST_COMPUTE_LOSS_FIELD_NUMBER: _ClassVar[int]
    TEST_INITIALIZATION_FIELD_NUMBER: _ClassVar[int]
    BASE_LR_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    AVERAGE_LOSS_FIELD_NUMBER: _ClassVar[int]
    MAX_ITER_FIELD_NUMBER: _ClassVar[int]
    ITER_SIZE_FIELD_NUMBER: _ClassVar[int]
    LR_POLICY_FIELD_NUMBER: _ClassVar[int]
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    POWER_FIELD_NUMBER: _ClassVar[int]
    MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    REGULARIZATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    STEPSIZE_FIELD_NUMBER: _ClassVar[int]
    STEPVALUE_FIELD_NUMBER: _ClassVar[int]
    CLIP_GRADIENTS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_PREFIX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_DIFF_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SOLVER_MODE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    RANDOM_SEED_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    MOMENTUM2_FIELD_NUMBER: _ClassVar[int]
    RMS_DECAY_FIELD_NUMBER: _ClassVar[int]
    DEBUG_INFO_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_AFTER_TRAIN_FIELD_NUMBER: _ClassVar[int]
    SOLVER_TYPE_FIELD_NUMBER: _ClassVar[int]
    LAYER_WISE_REDUCE_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    net: str
    net_param: NetParameter
    train_net: str
    test_net: _containers.RepeatedScalarFieldContainer[str]
    train_net_param: NetParameter
    test_net_param: _containers.RepeatedCompositeFieldContainer[NetParameter]
    train_state: NetState
    test_state: _containers.RepeatedCompositeFieldContainer[NetState]
    test_iter: _containers.RepeatedScalarFieldContainer[int]
    test_interval: int
    test_compute_loss: bool
    test_initialization: bool
    base_lr: float
    display: int
    average_loss: int
    max_iter: int
    iter_size: int
    lr_policy: str
    gamma: float
    power: float
    momentum: float
    weight_decay: float
    regularization_type: str
    stepsize: int
    stepvalue: _containers.RepeatedScalarFieldContainer[int]
    clip_gradients: float
    snapshot: int
    snapshot_prefix: str
    snapshot_diff: bool
    snapshot_format: SolverParameter.SnapshotFormat
    solver_mode: SolverParameter.SolverMode
    device_id: int
    random_seed: int
    type: str
    delta: float
    momentum2: float
    rms_decay: float
    debug_info: bool
    snapshot_after_train: bool
    solver_type: SolverParameter.SolverType
    layer_wise_reduce: bool
    weights: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, net: _Optional[str] = ..., net_param: _Optional[_Union[NetParameter, _Mapping]] = ..., train_net: _Optional[str] = ..., test_net: _Optional[_Iterable[str]] = ..., train_net_param: _Optional[_Union[NetParameter, _Mapping]] = ..., test_net_param: _Optional[_Iterable[_Union[NetParameter, _Mapping]]] = ..., train_state: _Optional[_Union[NetState, _Mapping]] = ..., test_state: _Optional[_Iterable[_Union[NetState, _Mapping]]] = ..., test_iter: _Optional[_Iterable[int]] = ..., test_interval: _Optional[int] = ..., test_compute_loss: _Optional[bool] = ..., test_initialization: _Optional[bool] = ..., base_lr: _Optional[float] = ..., display: _Optional[int] = ..., average_loss: _Optional[int] = ..., max_iter: _Optional[int] = ..., iter_size: _Optional[int] = ..., lr_policy: _Optional[str] = ..., gamma: _Optional[float] = ..., power: _Optional[float] = ..., momentum: _Optional[float] = ..., weight_decay: _Optional[float] = ..., regularization_type: _Optional[str] = ..., stepsize: _Optional[int] = ..., stepvalue: _Optional[_Iterable[int]] = ..., clip_gradients: _Optional[float] = ..., snapshot: _Optional[int] = ..., snapshot_prefix: _Optional[str] = ..., snapshot_diff: _Optional[bool] = ..., snapshot_format: _Optional[_Union[SolverParameter.SnapshotFormat, str]] = ..., solver_mode: _Optional[_Union[SolverParameter.SolverMode, str]] = ..., device_id: _Optional[int] = ..., random_seed: _Optional[int] = ..., type: _Optional[str] = ..., delta: _Optional[float] = ..., momentum2: _Optional[float] = ..., rms_decay: _Optional[float] = ..., debug_info: _Optional[bool] = ..., snapshot_after_train: _Optional[bool] = ..., solver_type: _Optional[_Union[SolverParameter.SolverType, str]] = ..., layer_wise_reduce: _Optional[bool] = ..., weights: _Optional[_Iterable[str]] = ...) -> None: ...

class SolverState(_message.Message):
    __slots__ = ("iter", "learned_net", "history", "current_step")
    ITER_FIELD_NUMBER: _ClassVar[int]
    LEARNED_NET_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    CURRENT_STEP_FIELD_NUMBER: _ClassVar[int]
    iter: int
    learned_net: str
    history: _containers.RepeatedCompositeFieldContainer[BlobProto]
    current_step: int
    def __init__(self, iter: _Optional[int] = ..., learned_net: _Optional[str] = ..., history: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ..., current_step: _Optional[int] = ...) -> None: ...

class NetState(_message.Message):
    __slots__ = ("phase", "level", "stage")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    level: int
    stage: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., level: _Optional[int] = ..., stage: _Optional[_Iterable[str]] = ...) -> None: ...

class NetStateRule(_message.Message):
    __slots__ = ("phase", "min_level", "max_level", "stage", "not_stage")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    MIN_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_LEVEL_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    NOT_STAGE_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    min_level: int
    max_level: int
    stage: _containers.RepeatedScalarFieldContainer[str]
    not_stage: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., min_level: _Optional[int] = ..., max_level: _Optional[int] = ..., stage: _Optional[_Iterable[str]] = ..., not_stage: _Optional[_Iterable[str]] = ...) -> None: ...

class ParamSpec(_message.Message):
    __slots__ = ("name", "share_mode", "lr_mult", "decay_mult")
    class DimCheckMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STRICT: _ClassVar[ParamSpec.DimCheckMode]
        PERMISSIVE: _ClassVar[ParamSpec.DimCheckMode]
    STRICT: ParamSpec.DimCheckMode
    PERMISSIVE: ParamSpec.DimCheckMode
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHARE_MODE_FIELD_NUMBER: _ClassVar[int]
    LR_MULT_FIELD_NUMBER: _ClassVar[int]
    DECAY_MULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    share_mode: ParamSpec.DimCheckMode
    lr_mult: float
    decay_mult: float
    def __init__(self, name: _Optional[str] = ..., share_mode: _Optional[_Union[ParamSpec.DimCheckMode, str]] = ..., lr_mult: _Optional[float] = ..., decay_mult: _Optional[float] = ...) -> None: ...

class LayerParameter(_message.Message):
    __slots__ = ("name", "type", "bottom", "top", "phase", "loss_weight", "param", "blobs", "propagate_down", "include", "exclude", "transform_param", "loss_param", "accuracy_param", "argmax_param", "batch_norm_param", "bias_param", "clip_param", "concat_param", "contrastive_loss_param", "convolution_param", "crop_param", "data_param", "dropout_param", "dummy_data_param", "eltwise_param", "elu_param", "embed_param", "exp_param", "flatten_param", "hdf5_data_param", "hdf5_output_param", "hinge_loss_param", "image_data_param", "infogain_loss_param", "inner_product_param", "input_param", "log_param", "lrn_param", "memory_data_param", "mvn_param", "parameter_param", "pooling_param", "power_param", "prelu_param", "python_param", "recurrent_param", "reduction_param", "relu_param", "reshape_param", "scale_param", "sigmoid_param", "softmax_param", "spp_param", "slice_param", "swish_param", "tanh_param", "threshold_param", "tile_param", "window_data_param")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    LOSS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    PROPAGATE_DOWN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_PARAM_FIELD_NUMBER: _ClassVar[int]
    LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_PARAM_FIELD_NUMBER: _ClassVar[int]
    ARGMAX_PARAM_FIELD_NUMBER: _ClassVar[int]
    BATCH_NORM_PARAM_FIELD_NUMBER: _ClassVar[int]
    BIAS_PARAM_FIELD_NUMBER: _ClassVar[int]
    CLIP_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONCAT_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONTRASTIVE_LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_PARAM_FIELD_NUMBER: _ClassVar[int]
    CROP_PARAM_FIELD_NUMBER: _ClassVar[int]
    DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    DUMMY_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    ELTWISE_PARAM_FIELD_NUMBER: _ClassVar[int]
    ELU_PARAM_FIELD_NUMBER: _ClassVar[int]
    EMBED_PARAM_FIELD_NUMBER: _ClassVar[int]
    EXP_PARAM_FIELD_NUMBER: _ClassVar[int]
    FLATTEN_PARAM_FIELD_NUMBER: _ClassVar[int]
    HDF5_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    HDF5_OUTPUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    HINGE_LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    INFOGAIN_LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    INNER_PRODUCT_PARAM_FIELD_NUMBER: _ClassVar[int]
    INPUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    LOG_PARAM_FIELD_NUMBER: _ClassVar[int]
    LRN_PARAM_FIELD_NUMBER: _ClassVar[int]
    MEMORY_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    MVN_PARAM_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_PARAM_FIELD_NUMBER: _ClassVar[int]
    POOLING_PARAM_FIELD_NUMBER: _ClassVar[int]
    POWER_PARAM_FIELD_NUMBER: _ClassVar[int]
    PRELU_PARAM_FIELD_NUMBER: _ClassVar[int]
    PYTHON_PARAM_FIELD_NUMBER: _ClassVar[int]
    RECURRENT_PARAM_FIELD_NUMBER: _ClassVar[int]
    REDUCTION_PARAM_FIELD_NUMBER: _ClassVar[int]
    RELU_PARAM_FIELD_NUMBER: _ClassVar[int]
    RESHAPE_PARAM_FIELD_NUMBER: _ClassVar[int]
    SCALE_PARAM_FIELD_NUMBER: _ClassVar[int]
    SIGMOID_PARAM_FIELD_NUMBER: _ClassVar[int]
    SOFTMAX_PARAM_FIELD_NUMBER: _ClassVar[int]
    SPP_PARAM_FIELD_NUMBER: _ClassVar[int]
    SLICE_PARAM_FIELD_NUMBER: _ClassVar[int]
    SWISH_PARAM_FIELD_NUMBER: _ClassVar[int]
    TANH_PARAM_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_PARAM_FIELD_NUMBER: _ClassVar[int]
    TILE_PARAM_FIELD_NUMBER: _ClassVar[int]
    WINDOW_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    bottom: _containers.RepeatedScalarFieldContainer[str]
    top: _containers.RepeatedScalarFieldContainer[str]
    phase: Phase
    loss_weight: _containers.RepeatedScalarFieldContainer[float]
    param: _containers.RepeatedCompositeFieldContainer[ParamSpec]
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    propagate_down: _containers.RepeatedScalarFieldContainer[bool]
    include: _containers.RepeatedCompositeFieldContainer[NetStateRule]
    exclude: _containers.RepeatedCompositeFieldContainer[NetStateRule]
    transform_param: TransformationParameter
    loss_param: LossParameter
    accuracy_param: AccuracyParameter
    argmax_param: ArgMaxParameter
    batch_norm_param: BatchNormParameter
    bias_param: BiasParameter
    clip_param: ClipParameter
    concat_param: ConcatParameter
    contrastive_loss_param: ContrastiveLossParameter
    convolution_param: ConvolutionParameter
    crop_param: CropParameter
    data_param: DataParameter
    dropout_param: DropoutParameter
    dummy_data_param: DummyDataParameter
    eltwise_param: EltwiseParameter
    elu_param: ELUParameter
    embed_param: EmbedParameter
    exp_param: ExpParameter
    flatten_param: FlattenParameter
    hdf5_data_param: HDF5DataParameter
    hdf5_output_param: HDF5OutputParameter
    hinge_loss_param: HingeLossParameter
    image_data_param: ImageDataParameter
    infogain_loss_param: InfogainLossParameter
    inner_product_param: InnerProductParameter
    input_param: InputParameter
    log_param: LogParameter
    lrn_param: LRNParameter
    memory_data_param: MemoryDataParameter
    mvn_param: MVNParameter
    parameter_param: ParameterParameter
    pooling_param: PoolingParameter
    power_param: PowerParameter
    prelu_param: PReLUParameter
    python_param: PythonParameter
    recurrent_param: RecurrentParameter
    reduction_param: ReductionParameter
    relu_param: ReLUParameter
    reshape_param: ReshapeParameter
    scale_param: ScaleParameter
    sigmoid_param: SigmoidParameter
    softmax_param: SoftmaxParameter
    spp_param: SPPParameter
    slice_param: SliceParameter
    swish_param: SwishParameter
    tanh_param: TanHParameter
    threshold_param: ThresholdParameter
    tile_param: TileParameter
    window_data_param: WindowDataParameter
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., bottom: _Optional[_Iterable[str]] = ..., top: _Optional[_Iterable[str]] = ..., phase: _Optional[_Union[Phase, str]] = ..., loss_weight: _Optional[_Iterable[float]] = ..., param: _Optional[_Iterable[_Union[ParamSpec, _Mapping]]] = ..., blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ..., propagate_down: _Optional[_Iterable[bool]] = ..., include: _Optional[_Iterable[_Union[NetStateRule, _Mapping]]] = ..., exclude: _Optional[_Iterable[_Union[NetStateRule, _Mapping]]] = ..., transform_param: _Optional[_Union[TransformationParameter, _Mapping]] = ..., loss_param: _Optional[_Union[LossParameter, _Mapping]] = ..., accuracy_param: _Optional[_Union[AccuracyParameter, _Mapping]] = ..., argmax_param: _Optional[_Union[ArgMaxParameter, _Mapping]] = ..., batch_norm_param: _Optional[_Union[BatchNormParameter, _Mapping]] = ..., bias_param: _Optional[_Union[BiasParameter, _Mapping]] = ..., clip_param: _Optional[_Union[ClipParameter, _Mapping]] = ..., concat_param: _Optional[_Union[ConcatParameter, _Mapping]] = ..., contrastive_loss_param: _Optional[_Union[ContrastiveLossParameter, _Mapping]] = ..., convolution_param: _Optional[_Union[ConvolutionParameter, _Mapping]] = ..., crop_param: _Optional[_Union[CropParameter, _Mapping]] = ..., data_param: _Optional[_Union[DataParameter, _Mapping]] = ..., dropout_param: _Optional[_Union[DropoutParameter, _Mapping]] = ..., dummy_data_param: _Optional[_Union[DummyDataParameter, _Mapping]] = ..., eltwise_param: _Optional[_Union[EltwiseParameter, _Mapping]] = ..., elu_param: _Optional[_Union[ELUParameter, _Mapping]] = ..., embed_param: _Optional[_Union[EmbedParameter, _Mapping]] = ..., exp_param: _Optional[_Union[ExpParameter, _Mapping]] = ..., flatten_param: _Optional[_Union[FlattenParameter, _Mapping]] = ..., hdf5_data_param: _Optional[_Union[HDF5DataParameter, _Mapping]] = ..., hdf5_output_param: _Optional[_Union[HDF5OutputParameter, _Mapping]] = ..., hinge_loss_param: _Optional[_Union[HingeLossParameter, _Mapping]] = ..., image_data_param: _Optional[_Union[ImageDataParameter, _Mapping]] = ..., infogain_loss_param: _Optional[_Union[InfogainLossParameter, _Mapping]] = ..., inner_product_param: _Optional[_Union[InnerProductParameter, _Mapping]] = ..., input_param: _Optional[_Union[InputParameter, _Mapping]] = ..., log_param: _Optional[_Union[LogParameter, _Mapping]] = ..., lrn_param: _Optional[_Union[LRNParameter, _Mapping]] = ..., memory_data_param: _Optional[_Union[MemoryDataParameter, _Mapping]] = ..., mvn_param: _Optional[_Union[MVNParameter, _Mapping]] = ..., parameter_param: _Optional[_Union[ParameterParameter, _Mapping]] = ..., pooling_param: _Optional[_Union[PoolingParameter, _Mapping]] = ..., power_param: _Optional[_Union[PowerParameter, _Mapping]] = ..., prelu_param: _Optional[_Union[PReLUParameter, _Mapping]] = ..., python_param: _Optional[_Union[PythonParameter, _Mapping]] = ..., recurrent_param: _Optional[_Union[RecurrentParameter, _Mapping]] = ..., reduction_param: _Optional[_Union[ReductionParameter, _Mapping]] = ..., relu_param: _Optional[_Union[ReLUParameter, _Mapping]] = ..., reshape_param: _Optional[_Union[ReshapeParameter, _Mapping]] = ..., scale_param: _Optional[_Union[ScaleParameter, _Mapping]] = ..., sigmoid_param: _Optional[_Union[SigmoidParameter, _Mapping]] = ..., softmax_param: _Optional[_Union[SoftmaxParameter, _Mapping]] = ..., spp_param: _Optional[_Union[SPPParameter, _Mapping]] = ..., slice_param: _Optional[_Union[SliceParameter, _Mapping]] = ..., swish_param: _Optional[_Union[SwishParameter, _Mapping]] = ..., tanh_param: _Optional[_Union[TanHParameter, _Mapping]] = ..., threshold_param: _Optional[_Union[ThresholdParameter, _Mapping]] = ..., tile_param: _Optional[_Union[TileParameter, _Mapping]] = ..., window_data_param: _Optional[_Union[WindowDataParameter, _Mapping]] = ...) -> None: ...

class TransformationParameter(_message.Message):
    __slots__ = ("scale", "mirror", "crop_size", "mean_file", "mean_value", "force_color", "force_gray")
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    CROP_SIZE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FILE_FIELD_NUMBER: _ClassVar[int]
    MEAN_VALUE_FIELD_NUMBER: _ClassVar[int]
    FORCE_COLOR_FIELD_NUMBER: _ClassVar[int]
    FORCE_GRAY_FIELD_NUMBER: _ClassVar[int]
    scale: float
    mirror: bool
    crop_size: int
    mean_file: str
    mean_value: _containers.RepeatedScalarFieldContainer[float]
    force_color: bool
    force_gray: bool
    def __init__(self, scale: _Optional[float] = ..., mirror: _Optional[bool] = ..., crop_size: _Optional[int] = ..., mean_file: _Optional[str] = ..., mean_value: _Optional[_Iterable[float]] = ..., force_color: _Optional[bool] = ..., force_gray: _Optional[bool] = ...) -> None: ...

class LossParameter(_message.Message):
    __slots__ = ("ignore_label", "normalization", "normalize")
    class NormalizationMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FULL: _ClassVar[LossParameter.NormalizationMode]
        VALID: _ClassVar[LossParameter.NormalizationMode]
        BATCH_SIZE: _ClassVar[LossParameter.NormalizationMode]
        NONE: _ClassVar[LossParameter.NormalizationMode]
    FULL: LossParameter.NormalizationMode
    VALID: LossParameter.NormalizationMode
    BATCH_SIZE: LossParameter.NormalizationMode
    NONE: LossParameter.NormalizationMode
    IGNORE_LABEL_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    ignore_label: int
    normalization: LossParameter.NormalizationMode
    normalize: bool
    def __init__(self, ignore_label: _Optional[int] = ..., normalization: _Optional[_Union[LossParameter.NormalizationMode, str]] = ..., normalize: _Optional[bool] = ...) -> None: ...

class AccuracyParameter(_message.Message):
    __slots__ = ("top_k", "axis", "ignore_label")
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_LABEL_FIELD_NUMBER: _ClassVar[int]
    top_k: int
    axis: int
    ignore_label: int
    def __init__(self, top_k: _Optional[int] = ..., axis: _Optional[int] = ..., ignore_label: _Optional[int] = ...) -> None: ...

class ArgMaxParameter(_message.Message):
    __slots__ = ("out_max_val", "top_k", "axis")
    OUT_MAX_VAL_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    out_max_val: bool
    top_k: int
    axis: int
    def __init__(self, out_max_val: _Optional[bool] = ..., top_k: _Optional[int] = ..., axis: _Optional[int] = ...) -> None: ...

class ClipParameter(_message.Message):
    __slots__ = ("min", "max")
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    min: float
    max: float
    def __init__(self, min: _Optional[float] = ..., max: _Optional[float] = ...) -> None: ...

class ConcatParameter(_message.Message):
    __slots__ = ("axis", "concat_dim")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    CONCAT_DIM_FIELD_NUMBER: _ClassVar[int]
    axis: int
    concat_dim: int
    def __init__(self, axis: _Optional[int] = ..., concat_dim: _Optional[int] = ...) -> None: ...

class BatchNormParameter(_message.Message):
    __slots__ = ("use_global_stats", "moving_average_fraction", "eps")
    USE_GLOBAL_STATS_FIELD_NUMBER: _ClassVar[int]
    MOVING_AVERAGE_FRACTION_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    use_global_stats: bool
    moving_average_fraction: float
    eps: float
    def __init__(self, use_global_stats: _Optional[bool] = ..., moving_average_fraction: _Optional[float] = ..., eps: _Optional[float] = ...) -> None: ...

class BiasParameter(_message.Message):
    __slots__ = ("axis", "num_axes", "filler")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    NUM_AXES_FIELD_NUMBER: _ClassVar[int]
    FILLER_FIELD_NUMBER: _ClassVar[int]
    axis: int
    num_axes: int
    filler: FillerParameter
    def __init__(self, axis: _Optional[int] = ..., num_axes: _Optional[int] = ..., filler: _Optional[_Union[FillerParameter, _Mapping]] = ...) -> None: ...

class ContrastiveLossParameter(_message.Message):
    __slots__ = ("margin", "legacy_version")
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    LEGACY_VERSION_FIELD_NUMBER: _ClassVar[int]
    margin: float
    legacy_version: bool
    def __init__(self, margin: _Optional[float] = ..., legacy_version: _Optional[bool] = ...) -> None: ...

class ConvolutionParameter(_message.Message):
    __slots__ = ("num_output", "bias_term", "pad", "kernel_size", "stride", "dilation", "pad_h", "pad_w", "kernel_h", "kernel_w", "stride_h", "stride_w", "group", "weight_filler", "bias_filler", "engine", "axis", "force_nd_im2col")
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[ConvolutionParameter.Engine]
        CAFFE: _ClassVar[ConvolutionParameter.Engine]
        CUDNN: _ClassVar[ConvolutionParameter.Engine]
    DEFAULT: ConvolutionParameter.Engine
    CAFFE: ConvolutionParameter.Engine
    CUDNN: ConvolutionParameter.Engine
    NUM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    PAD_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    DILATION_FIELD_NUMBER: _ClassVar[int]
    PAD_H_FIELD_NUMBER: _ClassVar[int]
    PAD_W_FIELD_NUMBER: _ClassVar[int]
    KERNEL_H_FIELD_NUMBER: _ClassVar[int]
    KERNEL_W_FIELD_NUMBER: _ClassVar[int]
    STRIDE_H_FIELD_NUMBER: _ClassVar[int]
    STRIDE_W_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    FORCE_ND_IM2COL_FIELD_NUMBER: _ClassVar[int]
    num_output: int
    bias_term: bool
    pad: _containers.RepeatedScalarFieldContainer[int]
    kernel_size: _containers.RepeatedScalarFieldContainer[int]
    stride: _containers.RepeatedScalarFieldContainer[int]
    dilation: _containers.RepeatedScalarFieldContainer[int]
    pad_h: int
    pad_w: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    group: int
    weight_filler: FillerParameter
    bias_filler: FillerParameter
    engine: ConvolutionParameter.Engine
    axis: int
    force_nd_im2col: bool
    def __init__(self, num_output: _Optional[int] = ..., bias_term: _Optional[bool] = ..., pad: _Optional[_Iterable[int]] = ..., kernel_size: _Optional[_Iterable[int]] = ..., stride: _Optional[_Iterable[int]] = ..., dilation: _Optional[_Iterable[int]] = ..., pad_h: _Optional[int] = ..., pad_w: _Optional[int] = ..., kernel_h: _Optional[int] = ..., kernel_w: _Optional[int] = ..., stride_h: _Optional[int] = ..., stride_w: _Optional[int] = ..., group: _Optional[int] = ..., weight_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., engine: _Optional[_Union[ConvolutionParameter.Engine, str]] = ..., axis: _Optional[int] = ..., force_nd_im2col: _Optional[bool] = ...) -> None: ...

class CropParameter(_message.Message):
    __slots__ = ("axis", "offset")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    axis: int
    offset: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, axis: _Optional[int] = ..., offset: _Optional[_Iterable[int]] = ...) -> None: ...

class DataParameter(_message.Message):
    __slots__ = ("source", "batch_size", "rand_skip", "backend", "scale", "mean_file", "crop_size", "mirror", "force_encoded_color", "prefetch")
    class DB(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        LEVELDB: _ClassVar[DataParameter.DB]
        LMDB: _ClassVar[DataParameter.DB]
    LEVELDB: DataParameter.DB
    LMDB: DataParameter.DB
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    RAND_SKIP_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FILE_FIELD_NUMBER: _ClassVar[int]
    CROP_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    FORCE_ENCODED_COLOR_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_FIELD_NUMBER: _ClassVar[int]
    source: str
    batch_size: int
    rand_skip: int
    backend: DataParameter.DB
    scale: float
    mean_file: str
    crop_size: int
    mirror: bool
    force_encoded_color: bool
    prefetch: int
    def __init__(self, source: _Optional[str] = ..., batch_size: _Optional[int] = ..., rand_skip: _Optional[int] = ..., backend: _Optional[_Union[DataParameter.DB, str]] = ..., scale: _Optional[float] = ..., mean_file: _Optional[str] = ..., crop_size: _Optional[int] = ..., mirror: _Optional[bool] = ..., force_encoded_color: _Optional[bool] = ..., prefetch: _Optional[int] = ...) -> None: ...

class DropoutParameter(_message.Message):
    __slots__ = ("dropout_ratio",)
    DROPOUT_RATIO_FIELD_NUMBER: _ClassVar[int]
    dropout_ratio: float
    def __init__(self, dropout_ratio: _Optional[float] = ...) -> None: ...

class DummyDataParameter(_message.Message):
    __slots__ = ("data_filler", "shape", "num", "channels", "height", "width")
    DATA_FILLER_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    NUM_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    data_filler: _containers.RepeatedCompositeFieldContainer[FillerParameter]
    shape: _containers.RepeatedCompositeFieldContainer[BlobShape]
    num: _containers.RepeatedScalarFieldContainer[int]
    channels: _containers.RepeatedScalarFieldContainer[int]
    height: _containers.RepeatedScalarFieldContainer[int]
    width: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, data_filler: _Optional[_Iterable[_Union[FillerParameter, _Mapping]]] = ..., shape: _Optional[_Iterable[_Union[BlobShape, _Mapping]]] = ..., num: _Optional[_Iterable[int]] = ..., channels: _Optional[_Iterable[int]] = ..., height: _Optional[_Iterable[int]] = ..., width: _Optional[_Iterable[int]] = ...) -> None: ...

class EltwiseParameter(_message.Message):
    __slots__ = ("operation", "coeff", "stable_prod_grad")
    class EltwiseOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PROD: _ClassVar[EltwiseParameter.EltwiseOp]
        SUM: _ClassVar[EltwiseParameter.EltwiseOp]
        MAX: _ClassVar[EltwiseParameter.EltwiseOp]
    PROD: EltwiseParameter.EltwiseOp
    SUM: EltwiseParameter.EltwiseOp
    MAX: EltwiseParameter.EltwiseOp
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    COEFF_FIELD_NUMBER: _ClassVar[int]
    STABLE_PROD_GRAD_FIELD_NUMBER: _ClassVar[int]
    operation: EltwiseParameter.EltwiseOp
    coeff: _containers.RepeatedScalarFieldContainer[float]
    stable_prod_grad: bool
    def __init__(self, operation: _Optional[_Union[EltwiseParameter.EltwiseOp, str]] = ..., coeff: _Optional[_Iterable[float]] = ..., stable_prod_grad: _Optional[bool] = ...) -> None: ...

class ELUParameter(_message.Message):
    __slots__ = ("alpha",)
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    def __init__(self, alpha: _Optional[float] = ...) -> None: ...

class EmbedParameter(_message.Message):
    __slots__ = ("num_output", "input_dim", "bias_term", "weight_filler", "bias_filler")
    NUM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    INPUT_DIM_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    num_output: int
    input_dim: int
    bias_term: bool
    weight_filler: FillerParameter
    bias_filler: FillerParameter
    def __init__(self, num_output: _Optional[int] = ..., input_dim: _Optional[int] = ..., bias_term: _Optional[bool] = ..., weight_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ...) -> None: ...

class ExpParameter(_message.Message):
    __slots__ = ("base", "scale", "shift")
    BASE_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    base: float
    scale: float
    shift: float
    def __init__(self, base: _Optional[float] = ..., scale: _Optional[float] = ..., shift: _Optional[float] = ...) -> None: ...

class FlattenParameter(_message.Message):
    __slots__ = ("axis", "end_axis")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    END_AXIS_FIELD_NUMBER: _ClassVar[int]
    axis: int
    end_axis: int
    def __init__(self, axis: _Optional[int] = ..., end_axis: _Optional[int] = ...) -> None: ...

class HDF5DataParameter(_message.Message):
    __slots__ = ("source", "batch_size", "shuffle")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_FIELD_NUMBER: _ClassVar[int]
    source: str
    batch_size: int
    shuffle: bool
    def __init__(self, source: _Optional[str] = ..., batch_size: _Optional[int] = ..., shuffle: _Optional[bool] = ...) -> None: ...

class HDF5OutputParameter(_message.Message):
    __slots__ = ("file_name",)
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    file_name: str
    def __init__(self, file_name: _Optional[str] = ...) -> None: ...

class HingeLossParameter(_message.Message):
    __slots__ = ("norm",)
    class Norm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        L1: _ClassVar[HingeLossParameter.Norm]
        L2: _ClassVar[HingeLossParameter.Norm]
    L1: HingeLossParameter.Norm
    L2: HingeLossParameter.Norm
    NORM_FIELD_NUMBER: _ClassVar[int]
    norm: HingeLossParameter.Norm
    def __init__(self, norm: _Optional[_Union[HingeLossParameter.Norm, str]] = ...) -> None: ...

class ImageDataParameter(_message.Message):
    __slots__ = ("source", "batch_size", "rand_skip", "shuffle", "new_height", "new_width", "is_color", "scale", "mean_file", "crop_size", "mirror", "root_folder")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    RAND_SKIP_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_FIELD_NUMBER: _ClassVar[int]
    NEW_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    NEW_WIDTH_FIELD_NUMBER: _ClassVar[int]
    IS_COLOR_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FILE_FIELD_NUMBER: _ClassVar[int]
    CROP_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    ROOT_FOLDER_FIELD_NUMBER: _ClassVar[int]
    source: str
    batch_size: int
    rand_skip: int
    shuffle: bool
    new_height: int
    new_width: int
    is_color: bool
    scale: float
    mean_file: str
    crop_size: int
    mirror: bool
    root_folder: str
    def __init__(self, source: _Optional[str] = ..., batch_size: _Optional[int] = ..., rand_skip: _Optional[int] = ..., shuffle: _Optional[bool] = ..., new_height: _Optional[int] = ..., new_width: _Optional[int] = ..., is_color: _Optional[bool] = ..., scale: _Optional[float] = ..., mean_file: _Optional[str] = ..., crop_size: _Optional[int] = ..., mirror: _Optional[bool] = ..., root_folder: _Optional[str] = ...) -> None: ...

class InfogainLossParameter(_message.Message):
    __slots__ = ("source", "axis")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    source: str
    axis: int
    def __init__(self, source: _Optional[str] = ..., axis: _Optional[int] = ...) -> None: ...

class InnerProductParameter(_message.Message):
    __slots__ = ("num_output", "bias_term", "weight_filler", "bias_filler", "axis", "transpose")
    NUM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    TRANSPOSE_FIELD_NUMBER: _ClassVar[int]
    num_output: int
    bias_term: bool
    weight_filler: FillerParameter
    bias_filler: FillerParameter
    axis: int
    transpose: bool
    def __init__(self, num_output: _Optional[int] = ..., bias_term: _Optional[bool] = ..., weight_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., axis: _Optional[int] = ..., transpose: _Optional[bool] = ...) -> None: ...

class InputParameter(_message.Message):
    __slots__ = ("shape",)
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedCompositeFieldContainer[BlobShape]
    def __init__(self, shape: _Optional[_Iterable[_Union[BlobShape, _Mapping]]] = ...) -> None: ...

class LogParameter(_message.Message):
    __slots__ = ("base", "scale", "shift")
    BASE_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    base: float
    scale: float
    shift: float
    def __init__(self, base: _Optional[float] = ..., scale: _Optional[float] = ..., shift: _Optional[float] = ...) -> None: ...

class LRNParameter(_message.Message):
    __slots__ = ("local_size", "alpha", "beta", "norm_region", "k", "engine")
    class NormRegion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACROSS_CHANNELS: _ClassVar[LRNParameter.NormRegion]
        WITHIN_CHANNEL: _ClassVar[LRNParameter.NormRegion]
    ACROSS_CHANNELS: LRNParameter.NormRegion
    WITHIN_CHANNEL: LRNParameter.NormRegion
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[LRNParameter.Engine]
        CAFFE: _ClassVar[LRNParameter.Engine]
        CUDNN: _ClassVar[LRNParameter.Engine]
    DEFAULT: LRNParameter.Engine
    CAFFE: LRNParameter.Engine
    CUDNN: LRNParameter.Engine
    LOCAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    NORM_REGION_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    local_size: int
    alpha: float
    beta: float
    norm_region: LRNParameter.NormRegion
    k: float
    engine: LRNParameter.Engine
    def __init__(self, local_size: _Optional[int] = ..., alpha: _Optional[float] = ..., beta: _Optional[float] = ..., norm_region: _Optional[_Union[LRNParameter.NormRegion, str]] = ..., k: _Optional[float] = ..., engine: _Optional[_Union[LRNParameter.Engine, str]] = ...) -> None: ...

class MemoryDataParameter(_message.Message):
    __slots__ = ("batch_size", "channels", "height", "width")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    channels: int
    height: int
    width: int
    def __init__(self, batch_size: _Optional[int] = ..., channels: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ...) -> None: ...

class MVNParameter(_message.Message):
    __slots__ = ("normalize_variance", "across_channels", "eps")
    NORMALIZE_VARIANCE_FIELD_NUMBER: _ClassVar[int]
    ACROSS_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    normalize_variance: bool
    across_channels: bool
    eps: float
    def __init__(self, normalize_variance: _Optional[bool] = ..., across_channels: _Optional[bool] = ..., eps: _Optional[float] = ...) -> None: ...

class ParameterParameter(_message.Message):
    __slots__ = ("shape",)
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    shape: BlobShape
    def __init__(self, shape: _Optional[_Union[BlobShape, _Mapping]] = ...) -> None: ...

class PoolingParameter(_message.Message):
    __slots__ = ("pool", "pad", "pad_h", "pad_w", "kernel_size", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w", "engine", "global_pooling", "round_mode")
    class PoolMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MAX: _ClassVar[PoolingParameter.PoolMethod]
        AVE: _ClassVar[PoolingParameter.PoolMethod]
        STOCHASTIC: _ClassVar[PoolingParameter.PoolMethod]
    MAX: PoolingParameter.PoolMethod
    AVE: PoolingParameter.PoolMethod
    STOCHASTIC: PoolingParameter.PoolMethod
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[PoolingParameter.Engine]
        CAFFE: _ClassVar[PoolingParameter.Engine]
        CUDNN: _ClassVar[PoolingParameter.Engine]
    DEFAULT: PoolingParameter.Engine
    CAFFE: PoolingParameter.Engine
    CUDNN: PoolingParameter.Engine
    class RoundMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CEIL: _ClassVar[PoolingParameter.RoundMode]
        FLOOR: _ClassVar[PoolingParameter.RoundMode]
    CEIL: PoolingParameter.RoundMode
    FLOOR: PoolingParameter.RoundMode
    POOL_FIELD_NUMBER: _ClassVar[int]
    PAD_FIELD_NUMBER: _ClassVar[int]
    PAD_H_FIELD_NUMBER: _ClassVar[int]
    PAD_W_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_H_FIELD_NUMBER: _ClassVar[int]
    KERNEL_W_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_H_FIELD_NUMBER: _ClassVar[int]
    STRIDE_W_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_POOLING_FIELD_NUMBER: _ClassVar[int]
    ROUND_MODE_FIELD_NUMBER: _ClassVar[int]
    pool: PoolingParameter.PoolMethod
    pad: int
    pad_h: int
    pad_w: int
    kernel_size: int
    kernel_h: int
    kernel_w: int
    stride: int
    stride_h: int
    stride_w: int
    engine: PoolingParameter.Engine
    global_pooling: bool
    round_mode: PoolingParameter.RoundMode
    def __init__(self, pool: _Optional[_Union[PoolingParameter.PoolMethod, str]] = ..., pad: _Optional[int] = ..., pad_h: _Optional[int] = ..., pad_w: _Optional[int] = ..., kernel_size: _Optional[int] = ..., kernel_h: _Optional[int] = ..., kernel_w: _Optional[int] = ..., stride: _Optional[int] = ..., stride_h: _Optional[int] = ..., stride_w: _Optional[int] = ..., engine: _Optional[_Union[PoolingParameter.Engine, str]] = ..., global_pooling: _Optional[bool] = ..., round_mode: _Optional[_Union[PoolingParameter.RoundMode, str]] = ...) -> None: ...

class PowerParameter(_message.Message):
    __slots__ = ("power", "scale", "shift")
    POWER_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    power: float
    scale: float
    shift: float
    def __init__(self, power: _Optional[float] = ..., scale: _Optional[float] = ..., shift: _Optional[float] = ...) -> None: ...

class PythonParameter(_message.Message):
    __slots__ = ("module", "layer", "param_str", "share_in_parallel")
    MODULE_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    PARAM_STR_FIELD_NUMBER: _ClassVar[int]
    SHARE_IN_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    module: str
    layer: str
    param_str: str
    share_in_parallel: bool
    def __init__(self, module: _Optional[str] = ..., layer: _Optional[str] = ..., param_str: _Optional[str] = ..., share_in_parallel: _Optional[bool] = ...) -> None: ...

class RecurrentParameter(_message.Message):
    __slots__ = ("num_output", "weight_filler", "bias_filler", "debug_info", "expose_hidden")
    NUM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    DEBUG_INFO_FIELD_NUMBER: _ClassVar[int]
    EXPOSE_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    num_output: int
    weight_filler: FillerParameter
    bias_filler: FillerParameter
    debug_info: bool
    expose_hidden: bool
    def __init__(self, num_output: _Optional[int] = ..., weight_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., debug_info: _Optional[bool] = ..., expose_hidden: _Optional[bool] = ...) -> None: ...

class ReductionParameter(_message.Message):
    __slots__ = ("operation", "axis", "coeff")
    class ReductionOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUM: _ClassVar[ReductionParameter.ReductionOp]
        ASUM: _ClassVar[ReductionParameter.ReductionOp]
        SUMSQ: _ClassVar[ReductionParameter.ReductionOp]
        MEAN: _ClassVar[ReductionParameter.ReductionOp]
    SUM: ReductionParameter.ReductionOp
    ASUM: ReductionParameter.ReductionOp
    SUMSQ: ReductionParameter.ReductionOp
    MEAN: ReductionParameter.ReductionOp
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    COEFF_FIELD_NUMBER: _ClassVar[int]
    operation: ReductionParameter.ReductionOp
    axis: int
    coeff: float
    def __init__(self, operation: _Optional[_Union[ReductionParameter.ReductionOp, str]] = ..., axis: _Optional[int] = ..., coeff: _Optional[float] = ...) -> None: ...

class ReLUParameter(_message.Message):
    __slots__ = ("negative_slope", "engine")
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[ReLUParameter.Engine]
        CAFFE: _ClassVar[ReLUParameter.Engine]
        CUDNN: _ClassVar[ReLUParameter.Engine]
    DEFAULT: ReLUParameter.Engine
    CAFFE: ReLUParameter.Engine
    CUDNN: ReLUParameter.Engine
    NEGATIVE_SLOPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    negative_slope: float
    engine: ReLUParameter.Engine
    def __init__(self, negative_slope: _Optional[float] = ..., engine: _Optional[_Union[ReLUParameter.Engine, str]] = ...) -> None: ...

class ReshapeParameter(_message.Message):
    __slots__ = ("shape", "axis", "num_axes")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    NUM_AXES_FIELD_NUMBER: _ClassVar[int]
    shape: BlobShape
    axis: int
    num_axes: int
    def __init__(self, shape: _Optional[_Union[BlobShape, _Mapping]] = ..., axis: _Optional[int] = ..., num_axes: _Optional[int] = ...) -> None: ...

class ScaleParameter(_message.Message):
    __slots__ = ("axis", "num_axes", "filler", "bias_term", "bias_filler")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    NUM_AXES_FIELD_NUMBER: _ClassVar[int]
    FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    axis: int
    num_axes: int
    filler: FillerParameter
    bias_term: bool
    bias_filler: FillerParameter
    def __init__(self, axis: _Optional[int] = ..., num_axes: _Optional[int] = ..., filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_term: _Optional[bool] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ...) -> None: ...

class SigmoidParameter(_message.Message):
    __slots__ = ("engine",)
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[SigmoidParameter.Engine]
        CAFFE: _ClassVar[SigmoidParameter.Engine]
        CUDNN: _ClassVar[SigmoidParameter.Engine]
    DEFAULT: SigmoidParameter.Engine
    CAFFE: SigmoidParameter.Engine
    CUDNN: SigmoidParameter.Engine
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    engine: SigmoidParameter.Engine
    def __init__(self, engine: _Optional[_Union[SigmoidParameter.Engine, str]] = ...) -> None: ...

class SliceParameter(_message.Message):
    __slots__ = ("axis", "slice_point", "slice_dim")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    SLICE_POINT_FIELD_NUMBER: _ClassVar[int]
    SLICE_DIM_FIELD_NUMBER: _ClassVar[int]
    axis: int
    slice_point: _containers.RepeatedScalarFieldContainer[int]
    slice_dim: int
    def __init__(self, axis: _Optional[int] = ..., slice_point: _Optional[_Iterable[int]] = ..., slice_dim: _Optional[int] = ...) -> None: ...

class SoftmaxParameter(_message.Message):
    __slots__ = ("engine", "axis")
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[SoftmaxParameter.Engine]
        CAFFE: _ClassVar[SoftmaxParameter.Engine]
        CUDNN: _ClassVar[SoftmaxParameter.Engine]
    DEFAULT: SoftmaxParameter.Engine
    CAFFE: SoftmaxParameter.Engine
    CUDNN: SoftmaxParameter.Engine
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    engine: SoftmaxParameter.Engine
    axis: int
    def __init__(self, engine: _Optional[_Union[SoftmaxParameter.Engine, str]] = ..., axis: _Optional[int] = ...) -> None: ...

class SwishParameter(_message.Message):
    __slots__ = ("beta",)
    BETA_FIELD_NUMBER: _ClassVar[int]
    beta: float
    def __init__(self, beta: _Optional[float] = ...) -> None: ...

class TanHParameter(_message.Message):
    __slots__ = ("engine",)
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[TanHParameter.Engine]
        CAFFE: _ClassVar[TanHParameter.Engine]
        CUDNN: _ClassVar[TanHParameter.Engine]
    DEFAULT: TanHParameter.Engine
    CAFFE: TanHParameter.Engine
    CUDNN: TanHParameter.Engine
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    engine: TanHParameter.Engine
    def __init__(self, engine: _Optional[_Union[TanHParameter.Engine, str]] = ...) -> None: ...

class TileParameter(_message.Message):
    __slots__ = ("axis", "tiles")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    TILES_FIELD_NUMBER: _ClassVar[int]
    axis: int
    tiles: int
    def __init__(self, axis: _Optional[int] = ..., tiles: _Optional[int] = ...) -> None: ...

class ThresholdParameter(_message.Message):
    __slots__ = ("threshold",)
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    threshold: float
    def __init__(self, threshold: _Optional[float] = ...) -> None: ...

class WindowDataParameter(_message.Message):
    __slots__ = ("source", "scale", "mean_file", "batch_size", "crop_size", "mirror", "fg_threshold", "bg_threshold", "fg_fraction", "context_pad", "crop_mode", "cache_images", "root_folder")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FILE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CROP_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    FG_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    BG_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    FG_FRACTION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_PAD_FIELD_NUMBER: _ClassVar[int]
    CROP_MODE_FIELD_NUMBER: _ClassVar[int]
    CACHE_IMAGES_FIELD_NUMBER: _ClassVar[int]
    ROOT_FOLDER_FIELD_NUMBER: _ClassVar[int]
    source: str
    scale: float
    mean_file: str
    batch_size: int
    crop_size: int
    mirror: bool
    fg_threshold: float
    bg_threshold: float
    fg_fraction: float
    context_pad: int
    crop_mode: str
    cache_images: bool
    root_folder: str
    def __init__(self, source: _Optional[str] = ..., scale: _Optional[float] = ..., mean_file: _Optional[str] = ..., batch_size: _Optional[int] = ..., crop_size: _Optional[int] = ..., mirror: _Optional[bool] = ..., fg_threshold: _Optional[float] = ..., bg_threshold: _Optional[float] = ..., fg_fraction: _Optional[float] = ..., context_pad: _Optional[int] = ..., crop_mode: _Optional[str] = ..., cache_images: _Optional[bool] = ..., root_folder: _Optional[str] = ...) -> None: ...

class SPPParameter(_message.Message):
    __slots__ = ("pyramid_height", "pool", "engine")
    class PoolMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MAX: _ClassVar[SPPParameter.PoolMethod]
        AVE: _ClassVar[SPPParameter.PoolMethod]
        STOCHASTIC: _ClassVar[SPPParameter.PoolMethod]
    MAX: SPPParameter.PoolMethod
    AVE: SPPParameter.PoolMethod
    STOCHASTIC: SPPParameter.PoolMethod
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[SPPParameter.Engine]
        CAFFE: _ClassVar[SPPParameter.Engine]
        CUDNN: _ClassVar[SPPParameter.Engine]
    DEFAULT: SPPParameter.Engine
    CAFFE: SPPParameter.Engine
    CUDNN: SPPParameter.Engine
    PYRAMID_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    pyramid_height: int
    pool: SPPParameter.PoolMethod
    engine: SPPParameter.Engine
    def __init__(self, pyramid_height: _Optional[int] = ..., pool: _Optional[_Union[SPPParameter.PoolMethod, str]] = ..., engine: _Optional[_Union[SPPParameter.Engine, str]] = ...) -> None: ...

class V1LayerParameter(_message.Message):
    __slots__ = ("bottom", "top", "name", "include", "exclude", "type", "blobs", "param", "blob_share_mode", "blobs_lr", "weight_decay", "loss_weight", "accuracy_param", "argmax_param", "concat_param", "contrastive_loss_param", "convolution_param", "data_param", "dropout_param", "dummy_data_param", "eltwise_param", "exp_param", "hdf5_data_param", "hdf5_output_param", "hinge_loss_param", "image_data_param", "infogain_loss_param", "inner_product_param", "lrn_param", "memory_data_param", "mvn_param", "pooling_param", "power_param", "relu_param", "sigmoid_param", "softmax_param", "slice_param", "tanh_param", "threshold_param", "window_data_param", "transform_param", "loss_param", "layer")
    class LayerType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NONE: _ClassVar[V1LayerParameter.LayerType]
        ABSVAL: _ClassVar[V1LayerParameter.LayerType]
        ACCURACY: _ClassVar[V1LayerParameter.LayerType]
        ARGMAX: _ClassVar[V1LayerParameter.LayerType]
        BNLL: _ClassVar[V1LayerParameter.LayerType]
        CONCAT: _ClassVar[V1LayerParameter.LayerType]
        CONTRASTIVE_LOSS: _ClassVar[V1LayerParameter.LayerType]
        CONVOLUTION: _ClassVar[V1LayerParameter.LayerType]
        DATA: _ClassVar[V1LayerParameter.LayerType]
        DECONVOLUTION: _ClassVar[V1LayerParameter.LayerType]
        DROPOUT: _ClassVar[V1LayerParameter.LayerType]
        DUMMY_DATA: _ClassVar[V1LayerParameter.LayerType]
        EUCLIDEAN_LOSS: _ClassVar[V1LayerParameter.LayerType]
        ELTWISE: _ClassVar[V1LayerParameter.LayerType]
        EXP: _ClassVar[V1LayerParameter.LayerType]
        FLATTEN: _ClassVar[V1LayerParameter.LayerType]
        HDF5_DATA: _ClassVar[V1LayerParameter.LayerType]
        HDF5_OUTPUT: _ClassVar[V1LayerParameter.LayerType]
        HINGE_LOSS: _ClassVar[V1LayerParameter.LayerType]
        IM2COL: _ClassVar[V1LayerParameter.LayerType]
        IMAGE_DATA: _ClassVar[V1LayerParameter.LayerType]
        INFOGAIN_LOSS: _ClassVar[V1LayerParameter.LayerType]
        INNER_PRODUCT: _ClassVar[V1LayerParameter.LayerType]
        LRN: _ClassVar[V1LayerParameter.LayerType]
        MEMORY_DATA: _ClassVar[V1LayerParameter.LayerType]
        MULTINOMIAL_LOGISTIC_LOSS: _ClassVar[V1LayerParameter.LayerType]
        MVN: _ClassVar[V1LayerParameter.LayerType]
        POOLING: _ClassVar[V1LayerParameter.LayerType]
        POWER: _ClassVar[V1LayerParameter.LayerType]
        RELU: _ClassVar[V1LayerParameter.LayerType]
        SIGMOID: _ClassVar[V1LayerParameter.LayerType]
        SIGMOID_CROSS_ENTROPY_LOSS: _ClassVar[V1LayerParameter.LayerType]
        SILENCE: _ClassVar[V1LayerParameter.LayerType]
        SOFTMAX: _ClassVar[V1LayerParameter.LayerType]
        SOFTMAX_LOSS: _ClassVar[V1LayerParameter.LayerType]
        SPLIT: _ClassVar[V1LayerParameter.LayerType]
        SLICE: _ClassVar[V1LayerParameter.LayerType]
        TANH: _ClassVar[V1LayerParameter.LayerType]
        WINDOW_DATA: _ClassVar[V1LayerParameter.LayerType]
        THRESHOLD: _ClassVar[V1LayerParameter.LayerType]
    NONE: V1LayerParameter.LayerType
    ABSVAL: V1LayerParameter.LayerType
    ACCURACY: V1LayerParameter.LayerType
    ARGMAX: V1LayerParameter.LayerType
    BNLL: V1LayerParameter.LayerType
    CONCAT: V1LayerParameter.LayerType
    CONTRASTIVE_LOSS: V1LayerParameter.LayerType
    CONVOLUTION: V1LayerParameter.LayerType
    DATA: V1LayerParameter.LayerType
    DECONVOLUTION: V1LayerParameter.LayerType
    DROPOUT: V1LayerParameter.LayerType
    DUMMY_DATA: V1LayerParameter.LayerType
    EUCLIDEAN_LOSS: V1LayerParameter.LayerType
    ELTWISE: V1LayerParameter.LayerType
    EXP: V1LayerParameter.LayerType
    FLATTEN: V1LayerParameter.LayerType
    HDF5_DATA: V1LayerParameter.LayerType
    HDF5_OUTPUT: V1LayerParameter.LayerType
    HINGE_LOSS: V1LayerParameter.LayerType
    IM2COL: V1LayerParameter.LayerType
    IMAGE_DATA: V1LayerParameter.LayerType
    INFOGAIN_LOSS: V1LayerParameter.LayerType
    INNER_PRODUCT: V1LayerParameter.LayerType
    LRN: V1LayerParameter.LayerType
    MEMORY_DATA: V1LayerParameter.LayerType
    MULTINOMIAL_LOGISTIC_LOSS: V1LayerParameter.LayerType
    MVN: V1LayerParameter.LayerType
    POOLING: V1LayerParameter.LayerType
    POWER: V1LayerParameter.LayerType
    RELU: V1LayerParameter.LayerType
    SIGMOID: V1LayerParameter.LayerType
    SIGMOID_CROSS_ENTROPY_LOSS: V1LayerParameter.LayerType
    SILENCE: V1LayerParameter.LayerType
    SOFTMAX: V1LayerParameter.LayerType
    SOFTMAX_LOSS: V1LayerParameter.LayerType
    SPLIT: V1LayerParameter.LayerType
    SLICE: V1LayerParameter.LayerType
    TANH: V1LayerParameter.LayerType
    WINDOW_DATA: V1LayerParameter.LayerType
    THRESHOLD: V1LayerParameter.LayerType
    class DimCheckMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STRICT: _ClassVar[V1LayerParameter.DimCheckMode]
        PERMISSIVE: _ClassVar[V1LayerParameter.DimCheckMode]
    STRICT: V1LayerParameter.DimCheckMode
    PERMISSIVE: V1LayerParameter.DimCheckMode
    BOTTOM_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    BLOB_SHARE_MODE_FIELD_NUMBER: _ClassVar[int]
    BLOBS_LR_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    LOSS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_PARAM_FIELD_NUMBER: _ClassVar[int]
    ARGMAX_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONCAT_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONTRASTIVE_LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_PARAM_FIELD_NUMBER: _ClassVar[int]
    DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    DUMMY_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    ELTWISE_PARAM_FIELD_NUMBER: _ClassVar[int]
    EXP_PARAM_FIELD_NUMBER: _ClassVar[int]
    HDF5_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    HDF5_OUTPUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    HINGE_LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    INFOGAIN_LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    INNER_PRODUCT_PARAM_FIELD_NUMBER: _ClassVar[int]
    LRN_PARAM_FIELD_NUMBER: _ClassVar[int]
    MEMORY_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    MVN_PARAM_FIELD_NUMBER: _ClassVar[int]
    POOLING_PARAM_FIELD_NUMBER: _ClassVar[int]
    POWER_PARAM_FIELD_NUMBER: _ClassVar[int]
    RELU_PARAM_FIELD_NUMBER: _ClassVar[int]
    SIGMOID_PARAM_FIELD_NUMBER: _ClassVar[int]
    SOFTMAX_PARAM_FIELD_NUMBER: _ClassVar[int]
    SLICE_PARAM_FIELD_NUMBER: _ClassVar[int]
    TANH_PARAM_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_PARAM_FIELD_NUMBER: _ClassVar[int]
    WINDOW_DATA_PARAM_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_PARAM_FIELD_NUMBER: _ClassVar[int]
    LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    bottom: _containers.RepeatedScalarFieldContainer[str]
    top: _containers.RepeatedScalarFieldContainer[str]
    name: str
    include: _containers.RepeatedCompositeFieldContainer[NetStateRule]
    exclude: _containers.RepeatedCompositeFieldContainer[NetStateRule]
    type: V1LayerParameter.LayerType
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    param: _containers.RepeatedScalarFieldContainer[str]
    blob_share_mode: _containers.RepeatedScalarFieldContainer[V1LayerParameter.DimCheckMode]
    blobs_lr: _containers.RepeatedScalarFieldContainer[float]
    weight_decay: _containers.RepeatedScalarFieldContainer[float]
    loss_weight: _containers.RepeatedScalarFieldContainer[float]
    accuracy_param: AccuracyParameter
    argmax_param: ArgMaxParameter
    concat_param: ConcatParameter
    contrastive_loss_param: ContrastiveLossParameter
    convolution_param: ConvolutionParameter
    data_param: DataParameter
    dropout_param: DropoutParameter
    dummy_data_param: DummyDataParameter
    eltwise_param: EltwiseParameter
    exp_param: ExpParameter
    hdf5_data_param: HDF5DataParameter
    hdf5_output_param: HDF5OutputParameter
    hinge_loss_param: HingeLossParameter
    image_data_param: ImageDataParameter
    infogain_loss_param: InfogainLossParameter
    inner_product_param: InnerProductParameter
    lrn_param: LRNParameter
    memory_data_param: MemoryDataParameter
    mvn_param: MVNParameter
    pooling_param: PoolingParameter
    power_param: PowerParameter
    relu_param: ReLUParameter
    sigmoid_param: SigmoidParameter
    softmax_param: SoftmaxParameter
    slice_param: SliceParameter
    tanh_param: TanHParameter
    threshold_param: ThresholdParameter
    window_data_param: WindowDataParameter
    transform_param: TransformationParameter
    loss_param: LossParameter
    layer: V0LayerParameter
    def __init__(self, bottom: _Optional[_Iterable[str]] = ..., top: _Optional[_Iterable[str]] = ..., name: _Optional[str] = ..., include: _Optional[_Iterable[_Union[NetStateRule, _Mapping]]] = ..., exclude: _Optional[_Iterable[_Union[NetStateRule, _Mapping]]] = ..., type: _Optional[_Union[V1LayerParameter.LayerType, str]] = ..., blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ..., param: _Optional[_Iterable[str]] = ..., blob_share_mode: _Optional[_Iterable[_Union[V1LayerParameter.DimCheckMode, str]]] = ..., blobs_lr: _Optional[_Iterable[float]] = ..., weight_decay: _Optional[_Iterable[float]] = ..., loss_weight: _Optional[_Iterable[float]] = ..., accuracy_param: _Optional[_Union[AccuracyParameter, _Mapping]] = ..., argmax_param: _Optional[_Union[ArgMaxParameter, _Mapping]] = ..., concat_param: _Optional[_Union[ConcatParameter, _Mapping]] = ..., contrastive_loss_param: _Optional[_Union[ContrastiveLossParameter, _Mapping]] = ..., convolution_param: _Optional[_Union[ConvolutionParameter, _Mapping]] = ..., data_param: _Optional[_Union[DataParameter, _Mapping]] = ..., dropout_param: _Optional[_Union[DropoutParameter, _Mapping]] = ..., dummy_data_param: _Optional[_Union[DummyDataParameter, _Mapping]] = ..., eltwise_param: _Optional[_Union[EltwiseParameter, _Mapping]] = ..., exp_param: _Optional[_Union[ExpParameter, _Mapping]] = ..., hdf5_data_param: _Optional[_Union[HDF5DataParameter, _Mapping]] = ..., hdf5_output_param: _Optional[_Union[HDF5OutputParameter, _Mapping]] = ..., hinge_loss_param: _Optional[_Union[HingeLossParameter, _Mapping]] = ..., image_data_param: _Optional[_Union[ImageDataParameter, _Mapping]] = ..., infogain_loss_param: _Optional[_Union[InfogainLossParameter, _Mapping]] = ..., inner_product_param: _Optional[_Union[InnerProductParameter, _Mapping]] = ..., lrn_param: _Optional[_Union[LRNParameter, _Mapping]] = ..., memory_data_param: _Optional[_Union[MemoryDataParameter, _Mapping]] = ..., mvn_param: _Optional[_Union[MVNParameter, _Mapping]] = ..., pooling_param: _Optional[_Union[PoolingParameter, _Mapping]] = ..., power_param: _Optional[_Union[PowerParameter, _Mapping]] = ..., relu_param: _Optional[_Union[ReLUParameter, _Mapping]] = ..., sigmoid_param: _Optional[_Union[SigmoidParameter, _Mapping]] = ..., softmax_param: _Optional[_Union[SoftmaxParameter, _Mapping]] = ..., slice_param: _Optional[_Union[SliceParameter, _Mapping]] = ..., tanh_param: _Optional[_Union[TanHParameter, _Mapping]] = ..., threshold_param: _Optional[_Union[ThresholdParameter, _Mapping]] = ..., window_data_param: _Optional[_Union[WindowDataParameter, _Mapping]] = ..., transform_param: _Optional[_Union[TransformationParameter, _Mapping]] = ..., loss_param: _Optional[_Union[LossParameter, _Mapping]] = ..., layer: _Optional[_Union[V0LayerParameter, _Mapping]] = ...) -> None: ...

class V0LayerParameter(_message.Message):
    __slots__ = ("name", "type", "num_output", "biasterm", "weight_filler", "bias_filler", "pad", "kernelsize", "group", "stride", "pool", "dropout_ratio", "local_size", "alpha", "beta", "k", "source", "scale", "meanfile", "batchsize", "cropsize", "mirror", "blobs", "blobs_lr", "weight_decay", "rand_skip", "det_fg_threshold", "det_bg_threshold", "det_fg_fraction", "det_context_pad", "det_crop_mode", "new_num", "new_channels", "new_height", "new_width", "shuffle_images", "concat_dim", "hdf5_output_param")
    class PoolMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MAX: _ClassVar[V0LayerParameter.PoolMethod]
        AVE: _ClassVar[V0LayerParameter.PoolMethod]
        STOCHASTIC: _ClassVar[V0LayerParameter.PoolMethod]
    MAX: V0LayerParameter.PoolMethod
    AVE: V0LayerParameter.PoolMethod
    STOCHASTIC: V0LayerParameter.PoolMethod
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BIASTERM_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    PAD_FIELD_NUMBER: _ClassVar[int]
    KERNELSIZE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_RATIO_FIELD_NUMBER: _ClassVar[int]
    LOCAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MEANFILE_FIELD_NUMBER: _ClassVar[int]
    BATCHSIZE_FIELD_NUMBER: _ClassVar[int]
    CROPSIZE_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    BLOBS_LR_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    RAND_SKIP_FIELD_NUMBER: _ClassVar[int]
    DET_FG_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    DET_BG_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    DET_FG_FRACTION_FIELD_NUMBER: _ClassVar[int]
    DET_CONTEXT_PAD_FIELD_NUMBER: _ClassVar[int]
    DET_CROP_MODE_FIELD_NUMBER: _ClassVar[int]
    NEW_NUM_FIELD_NUMBER: _ClassVar[int]
    NEW_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    NEW_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    NEW_WIDTH_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_IMAGES_FIELD_NUMBER: _ClassVar[int]
    CONCAT_DIM_FIELD_NUMBER: _ClassVar[int]
    HDF5_OUTPUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    num_output: int
    biasterm: bool
    weight_filler: FillerParameter
    bias_filler: FillerParameter
    pad: int
    kernelsize: int
    group: int
    stride: int
    pool: V0LayerParameter.PoolMethod
    dropout_ratio: float
    local_size: int
    alpha: float
    beta: float
    k: float
    source: str
    scale: float
    meanfile: str
    batchsize: int
    cropsize: int
    mirror: bool
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    blobs_lr: _containers.RepeatedScalarFieldContainer[float]
    weight_decay: _containers.RepeatedScalarFieldContainer[float]
    rand_skip: int
    det_fg_threshold: float
    det_bg_threshold: float
    det_fg_fraction: float
    det_context_pad: int
    det_crop_mode: str
    new_num: int
    new_channels: int
    new_height: int
    new_width: int
    shuffle_images: bool
    concat_dim: int
    hdf5_output_param: HDF5OutputParameter
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., num_output: _Optional[int] = ..., biasterm: _Optional[bool] = ..., weight_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., pad: _Optional[int] = ..., kernelsize: _Optional[int] = ..., group: _Optional[int] = ..., stride: _Optional[int] = ..., pool: _Optional[_Union[V0LayerParameter.PoolMethod, str]] = ..., dropout_ratio: _Optional[float] = ..., local_size: _Optional[int] = ..., alpha: _Optional[float] = ..., beta: _Optional[float] = ..., k: _Optional[float] = ..., source: _Optional[str] = ..., scale: _Optional[float] = ..., meanfile: _Optional[str] = ..., batchsize: _Optional[int] = ..., cropsize: _Optional[int] = ..., mirror: _Optional[bool] = ..., blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ..., blobs_lr: _Optional[_Iterable[float]] = ..., weight_decay: _Optional[_Iterable[float]] = ..., rand_skip: _Optional[int] = ..., det_fg_threshold: _Optional[float] = ..., det_bg_threshold: _Optional[float] = ..., det_fg_fraction: _Optional[float] = ..., det_context_pad: _Optional[int] = ..., det_crop_mode: _Optional[str] = ..., new_num: _Optional[int] = ..., new_channels: _Optional[int] = ..., new_height: _Optional[int] = ..., new_width: _Optional[int] = ..., shuffle_images: _Optional[bool] = ..., concat_dim: _Optional[int] = ..., hdf5_output_param: _Optional[_Union[HDF5OutputParameter, _Mapping]] = ...) -> None: ...

class PReLUParameter(_message.Message):
    __slots__ = ("filler", "channel_shared")
    FILLER_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_SHARED_FIELD_NUMBER: _ClassVar[int]
    filler: FillerParameter
    channel_shared: bool
    def __init__(self, filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., channel_shared: _Optional[bool] = ...) -> None: ...

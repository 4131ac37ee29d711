"""What the inspector knows about each Caffe layer type: a table.

``TABLE`` maps a layer type to its category, a one-line description and the
LayerParameter fields that hold its type-specific settings.  ``CATEGORIES``
maps a category to its colour (Tableau 10, readable by most colour-blind
people).  Unknown types fall back to ``OTHER``.
"""
from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class LayerMeta:
    category: str
    description: str
    param_fields: Tuple[str, ...] = ()


CATEGORIES = {
    # category: (colour, label)
    "input": ("#4e79a7", "input / data"),
    "conv": ("#f28e2b", "convolution"),
    "pool": ("#59a14f", "pooling"),
    "fc": ("#e15759", "inner product / embed"),
    "activation": ("#b07aa1", "activation"),
    "norm": ("#edc948", "normalisation / scale"),
    "structure": ("#9c9c9c", "blob plumbing"),
    "split": ("#cfcfcf", "split (inserted)"),
    "recurrent": ("#76b7b2", "recurrent"),
    "loss": ("#ff9da7", "loss"),
    "output": ("#17becf", "output / metric"),
    "python": ("#9c755f", "python"),
    "other": ("#bab0ac", "other"),
}

_T = LayerMeta
TABLE = {
    # inputs
    "Input": _T("input", "Net input of a given shape; filled from outside.", ("input_param",)),
    "Data": _T("input", "Reads Datums from LMDB/LevelDB, transformed.", ("data_param", "transform_param")),
    "ImageData": _T("input", "Reads images listed in a text file.", ("image_data_param", "transform_param")),
    "HDF5Data": _T("input", "Reads arrays from HDF5 files.", ("hdf5_data_param",)),
    "MemoryData": _T("input", "Arrays handed in from Python (set_input_arrays).",
                     ("memory_data_param", "transform_param")),
    "DummyData": _T("input", "Constant or filled blobs (fillers).", ("dummy_data_param",)),
    "WindowData": _T("input", "Windows of images for R-CNN.", ("window_data_param", "transform_param")),
    "HDF5Output": _T("output", "Writes its bottoms to an HDF5 file.", ("hdf5_output_param",)),
    # vision
    "Convolution": _T("conv", "2-D (N-D) convolution: im2col + GEMM.", ("convolution_param",)),
    "Deconvolution": _T("conv", "Transposed convolution.", ("convolution_param",)),
    "Im2col": _T("conv", "Unfolds patches into columns.", ("convolution_param",)),
    "Pooling": _T("pool", "Max / average / stochastic pooling.", ("pooling_param",)),
    "SPP": _T("pool", "Spatial pyramid pooling.", ("spp_param",)),
    "LRN": _T("norm", "Local response normalisation.", ("lrn_param",)),
    "Crop": _T("structure", "Crops a bottom to another's shape.", ("crop_param",)),
    # inner product family
    "InnerProduct": _T("fc", "Fully connected layer (GEMM).", ("inner_product_param",)),
    "Embed": _T("fc", "Lookup table of learned vectors.", ("embed_param",)),
    # neurons
    "ReLU": _T("activation", "max(0, x) (leaky with negative_slope).", ("relu_param",)),
    "PReLU": _T("activation", "ReLU with a learned negative slope.", ("prelu_param",)),
    "ELU": _T("activation", "Exponential linear unit.", ("elu_param",)),
    "Sigmoid": _T("activation", "Logistic sigmoid.", ("sigmoid_param",)),
    "TanH": _T("activation", "Hyperbolic tangent.", ("tanh_param",)),
    "AbsVal": _T("activation", "|x|.", ()),
    "BNLL": _T("activation", "log(1 + exp(x)).", ()),
    "Power": _T("activation", "(shift + scale * x) ^ power.", ("power_param",)),
    "Exp": _T("activation", "base ^ (shift + scale * x).", ("exp_param",)),
    "Log": _T("activation", "log_base(shift + scale * x).", ("log_param",)),
    "Threshold": _T("activation", "1 if x > threshold else 0.", ("threshold_param",)),
    "Clip": _T("activation", "Clamps to [min, max].", ("clip_param",)),
    "Swish": _T("activation", "x * sigmoid(beta * x).", ("swish_param",)),
    "Dropout": _T("activation", "Zeroes inputs at random while training.", ("dropout_param",)),
    # normalisation
    "BatchNorm": _T("norm", "Normalises by batch (or stored) mean and variance.", ("batch_norm_param",)),
    "Scale": _T("norm", "Per-channel scale (and bias).", ("scale_param",)),
    "Bias": _T("norm", "Per-channel bias.", ("bias_param",)),
    "MVN": _T("norm", "Mean-variance normalisation.", ("mvn_param",)),
    # plumbing
    "Split": _T("split", "Copies a blob to several consumers (inserted by InsertSplits).", ()),
    "Concat": _T("structure", "Concatenates bottoms along an axis.", ("concat_param",)),
    "Slice": _T("structure", "Slices a bottom along an axis.", ("slice_param",)),
    "Eltwise": _T("structure", "Element-wise sum / product / max.", ("eltwise_param",)),
    "Flatten": _T("structure", "Flattens axes into one.", ("flatten_param",)),
    "Reshape": _T("structure", "Changes the shape, keeps the data.", ("reshape_param",)),
    "Tile": _T("structure", "Repeats a bottom along an axis.", ("tile_param",)),
    "Reduction": _T("structure", "Sum / mean / asum / sumsq over trailing axes.", ("reduction_param",)),
    "BatchReindex": _T("structure", "Picks batch items by index.", ()),
    "Filter": _T("structure", "Keeps batch items whose selector is non-zero.", ()),
    "ArgMax": _T("output", "Index (and value) of the top-k maxima.", ("argmax_param",)),
    "Silence": _T("structure", "Consumes bottoms, produces nothing.", ()),
    "Parameter": _T("structure", "A learned blob as a top.", ("parameter_param",)),
    # outputs and losses
    "Softmax": _T("output", "Softmax over an axis.", ("softmax_param",)),
    "Accuracy": _T("output", "Top-k accuracy (no gradient).", ("accuracy_param",)),
    "SoftmaxWithLoss": _T("loss", "Softmax + multinomial logistic loss.", ("softmax_param", "loss_param")),
    "SigmoidCrossEntropyLoss": _T("loss", "Sigmoid + cross-entropy loss.", ("loss_param",)),
    "EuclideanLoss": _T("loss", "Sum of squared differences / 2N.", ("loss_param",)),
    "ContrastiveLoss": _T("loss", "Siamese contrastive loss.", ("contrastive_loss_param", "loss_param")),
    "HingeLoss": _T("loss", "One-vs-all hinge loss (L1 / L2).", ("hinge_loss_param", "loss_param")),
    "InfogainLoss": _T("loss", "Loss weighted by an infogain matrix.", ("infogain_loss_param", "loss_param")),
    "MultinomialLogisticLoss": _T("loss", "-log p(label) of given probabilities.", ("loss_param",)),
    # recurrent
    "RNN": _T("recurrent", "Vanilla recurrent layer (unrolled net inside).", ("recurrent_param",)),
    "LSTM": _T("recurrent", "Long short-term memory (unrolled net inside).", ("recurrent_param",)),
    "LSTMUnit": _T("recurrent", "One LSTM time step.", ()),
    # python
    "Python": _T("python", "A layer written in Python (runs the model author's code).", ("python_param",)),
}

OTHER = LayerMeta("other", "Layer type unknown to the inspector's table.", ())


def meta(layer_type):
    """The LayerMeta of a type (``OTHER`` for unknown types)."""
    return TABLE.get(layer_type, OTHER)


def category(layer_type):
    return meta(layer_type).category


def colour(layer_type):
    return CATEGORIES[meta(layer_type).category][0]


def category_colour(cat):
    return CATEGORIES.get(cat, CATEGORIES["other"])[0]

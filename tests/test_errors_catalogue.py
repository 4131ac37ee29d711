"""The catalogue of bad inputs (docs/errors.md): one test per row.

Each row builds a small bad model inline (files under ``tmp_path``), runs the
engine on it and checks the exact exception type (a subclass of
:class:`engine.core.errors.CaffeError`, except for the exceptions a Python layer's
own code raises, which keep their type as in pycaffe and name the layer in a note)
and that the message (with its notes) names what it must:
the file with line and column for text that does not parse (and, for a net read
from a file, the line of the layer or field at fault of every Init error), the layer, the
blob, the shapes, Caffe's own CHECK text.  Rows whose exception is ``None``
are inputs Caffe accepts; the engine must accept them too.

``test_docs_list_every_row`` keeps docs/errors.md and this file in step.
"""
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Tuple

import numpy as np
import pytest

from engine import TEST, Net
from engine.core.errors import (
    CaffeError,
    DBError,
    DeviceError,
    EmptyBlobError,
    LayerError,
    NetError,
    ParseError,
    PythonLayerClassMissing,
    PythonLayerNotFound,
    PythonLayerRefused,
    ShapeError,
    SolverError,
    UnknownLayerTypeError,
)
from engine.proto import caffe_pb2

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Row:
    id: str
    exc: Optional[type]
    needles: Tuple[str, ...]
    attrs: dict
    fn: Callable = field(repr=False)


ROWS = []


def row(id, exc, *needles, **attrs):
    """Register a catalogue row.  ``needles`` must appear in ``str(error)``
    (``{tmp}`` stands for the test's tmp_path); ``attrs`` are checked on the error."""
    def deco(fn):
        ROWS.append(Row(id, exc, needles, attrs, fn))
        return fn
    return deco


# --------------------------------------------------------------------------- helpers
INPUT = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } } }\n'
TWO_INPUTS = ('layer { name: "data" type: "Input" top: "a" top: "b" input_param { '
              'shape { dim: 2 dim: 3 dim: 4 } shape { dim: 2 dim: 3 dim: 5 } } }\n')
IP_NET = (INPUT
          + 'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
            'inner_product_param { num_output: 4 weight_filler { type: "gaussian" } } }\n'
          + 'layer { name: "ip2" type: "InnerProduct" bottom: "ip" top: "ip2" '
            'inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }\n')


def write(tmp, name, content):
    p = Path(tmp) / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    return str(p)


def net(tmp, text, phase=TEST, name="net.prototxt", **kw):
    return Net(write(tmp, name, text), phase, **kw)


def saved_model(tmp, text=IP_NET, name="good.caffemodel"):
    n = net(tmp, text, name="source.prototxt")
    rng = np.random.default_rng(0)
    for blobs in n.params.values():
        for b in blobs:
            b.data[...] = rng.normal(size=b.shape)
    path = str(Path(tmp) / name)
    n.save(path)
    return path


# =========================================================================== text that does not parse
@row("parse-missing-quote", ParseError, "{tmp}/net.prototxt:3:9:", "String missing ending quote",
     line=3, column=9)
def _(tmp):
    net(tmp, 'layer {\n  name: "a"\n  type: "ReLU\n}\n')


@row("parse-unclosed-brace", ParseError, "{tmp}/net.prototxt:3:", 'Expected "}"', line=3)
def _(tmp):
    net(tmp, 'layer {\n  name: "a"\n  type: "ReLU"\n')


@row("parse-unknown-field", ParseError, "{tmp}/net.prototxt:3:3:",
     'Message type "caffe.LayerParameter" has no field named "typo"', line=3, column=3)
def _(tmp):
    net(tmp, 'layer {\n  name: "a"\n  typo: "ReLU"\n}\n')


@row("parse-unknown-enum", ParseError, "{tmp}/net.prototxt:3:",
     'Enum type "caffe.PoolingParameter.PoolMethod" has no value named MEDIAN', line=3)
def _(tmp):
    net(tmp, INPUT + 'layer { name: "p" type: "Pooling" bottom: "data" top: "p"\n'
                     '  pooling_param { pool: MEDIAN kernel_size: 2 } }\n')


@row("parse-field-twice", ParseError, "{tmp}/net.prototxt:3:",
     'should not have multiple "name" fields', line=3)
def _(tmp):
    net(tmp, 'layer {\n  name: "a"\n  name: "b"\n}\n')


@row("parse-wrong-value-type", ParseError, "{tmp}/net.prototxt:3:37:", "Couldn't parse integer: \"ten\"",
     line=3, column=37)
def _(tmp):
    net(tmp, INPUT + 'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "o"\n'
                     '  inner_product_param { num_output: "ten" } }\n')


@row("parse-value-out-of-range", ParseError, "{tmp}/net.prototxt:3:", "Value out of range: 99999999999",
     line=3)
def _(tmp):
    net(tmp, INPUT + 'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "o"\n'
                     '  inner_product_param { num_output: 99999999999 } }\n')


@row("parse-invalid-utf8", ParseError, "{tmp}/net.prototxt:3:10:", "invalid UTF-8 byte 0xff",
     line=3, column=10)
def _(tmp):
    net(tmp, b'name: "ab"\nlayer {\n  name: "\xff"\n}\n')


@row("parse-file-not-found", ParseError, "File not found: {tmp}/missing.prototxt")
def _(tmp):
    Net(str(Path(tmp) / "missing.prototxt"), TEST)


@row("parse-directory", ParseError, "{tmp}", "is a directory, not a file")
def _(tmp):
    Net(str(tmp), TEST)


@row("parse-nul-in-file-name", ParseError, "invalid file name", "embedded null byte")
def _(tmp):
    Net(str(Path(tmp) / "a\x00b.prototxt"), TEST)


# =========================================================================== net structure
@row("unknown-layer-type", UnknownLayerTypeError, "Unknown layer type: Convolutoin", "layer 'c'",
     "known types: AbsVal", "Convolution", layer="c")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "c" type: "Convolutoin" bottom: "data" top: "c" }\n')


@row("unknown-bottom", NetError, "{tmp}/net.prototxt:2:32: Unknown bottom blob 'dta' (layer 'r', bottom index 0)",
     layer="r", blob="dta", line=2, column=32, layer_line=2, field="bottom")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "ReLU" bottom: "dta" top: "o" }\n')


@row("bottom-before-top", NetError, "Unknown bottom blob 'a' (layer 'r2', bottom index 0)", layer="r2")
def _(tmp):
    # The consumer comes before its producer: blobs must be produced before use.
    net(tmp, INPUT + 'layer { name: "r2" type: "ReLU" bottom: "a" top: "b" }\n'
                     'layer { name: "r1" type: "ReLU" bottom: "data" top: "a" }\n')


@row("cycle-two-layers", NetError, "Unknown bottom blob 'y' (layer 'a', bottom index 1)", layer="a",
     blob="y")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "a" type: "Eltwise" bottom: "data" bottom: "y" top: "x" }\n'
                     'layer { name: "b" type: "ReLU" bottom: "x" top: "y" }\n')


@row("cycle-self", NetError, "Unknown bottom blob 'x' (layer 'a', bottom index 1)", layer="a")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "a" type: "Eltwise" bottom: "data" bottom: "x" top: "x" }\n')


@row("in-place-is-not-a-cycle", None)
def _(tmp):
    n = net(tmp, INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" top: "data" }\n')
    n.forward()


@row("produced-by-multiple-sources", NetError, "{tmp}/net.prototxt:3:47: Top blob 'o' produced by multiple sources.",
     "layer 'b', top index 0", layer="b", blob="o", line=3, column=47, field="top")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "a" type: "ReLU" bottom: "data" top: "o" }\n'
                     'layer { name: "b" type: "ReLU" bottom: "data" top: "o" }\n')


@row("duplicate-top-in-one-layer", NetError, "Top blob 'a' produced by multiple sources.",
     "layer 's', top index 1", layer="s", blob="a")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "s" type: "Split" bottom: "data" top: "a" top: "a" }\n')


@row("duplicate-bottom-in-one-layer", None)
def _(tmp):
    # One blob read twice by a layer: InsertSplits gives each read its own copy, as in Caffe.
    n = net(tmp, INPUT + 'layer { name: "e" type: "Eltwise" bottom: "data" bottom: "data" top: "o" }\n')
    n.forward()
    assert "data_data_0_split" in n.layer_names


@row("duplicate-layer-name", None)
def _(tmp):
    # Caffe does not check layer names; by name, the later layer is found (layer_names_index_).
    n = net(tmp, INPUT + 'layer { name: "data" type: "ReLU" bottom: "data" top: "o" }\n')
    assert n.layer_names == ["data", "data"]


@row("missing-top", LayerError, "ReLU Layer produces 1 top blob(s) as output.", "layer 'r'", layer="r")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" }\n')


@row("missing-bottom", LayerError, "ReLU Layer takes 1 bottom blob(s) as input.", "layer 'r'", layer="r")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "ReLU" top: "x" }\n')


@row("bottom-count-exact", LayerError, "SoftmaxWithLoss Layer takes 2 bottom blob(s) as input.",
     "layer 'l'", layer="l")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "l" type: "SoftmaxWithLoss" bottom: "data" top: "l" }\n')


@row("bottom-count-min", LayerError, "Concat Layer takes at least 1 bottom blob(s) as input.", "layer 'c'")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "c" type: "Concat" top: "o" }\n')


@row("top-count-exact", LayerError, "ReLU Layer produces 1 top blob(s) as output.", "layer 'r'", layer="r")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" top: "a" top: "b" }\n')


@row("propagate-down-count", NetError, "propagate_down param must be specified either 0 or bottom_size "
     "times", "layer 'r': 2 vs. 1", layer="r")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" top: "o" propagate_down: true '
                     'propagate_down: false }\n')


@row("include-and-exclude", NetError, "Specify either include rules or exclude rules; not both.",
     "layer 'r'", layer="r")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" top: "o" include { phase: TEST } '
                     'exclude { phase: TRAIN } }\n')


@row("too-many-param-specs", NetError, "Too many params specified for layer r", layer="r")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" top: "o" param { lr_mult: 1 } }\n')


@row("loss-weight-count", LayerError, "loss_weight must be unspecified or specified once per top blob.",
     "layer 'r'")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" top: "o" loss_weight: 1 '
                     'loss_weight: 2 }\n')


@row("input-shape-count", LayerError, "Must specify 'shape' once, once per top blob, or not at all: "
     "3 tops vs. 2 shapes.", "layer 'data'")
def _(tmp):
    net(tmp, 'layer { name: "data" type: "Input" top: "a" top: "b" top: "c" '
             'input_param { shape { dim: 1 } shape { dim: 2 } } }\n')


@row("input-dim-count", NetError, "{tmp}/net.prototxt:1:1: input 'data' (index 0) needs 4 input_dim values: "
     "3 input_dim for 1 inputs", blob="data", line=1)
def _(tmp):
    net(tmp, 'input: "data"\ninput_dim: 1\ninput_dim: 2\ninput_dim: 3\n'
             'layer { name: "r" type: "ReLU" bottom: "data" top: "o" }\n')


@row("blob-never-shaped", EmptyBlobError, "Check failed: data_", "blob 'data' was never given a shape",
     "layer 'r', type ReLU", layer="r", blob="data")
def _(tmp):
    net(tmp, 'layer { name: "data" type: "Input" top: "data" }\n'
             'layer { name: "r" type: "ReLU" bottom: "data" top: "o" }\n').forward()


@row("zero-batch-init", None)
def _(tmp):
    # Caffe's Init takes a batch of 0 (Top shape: 0 1 8 8 (0)); nothing asks for the data yet
    n = net(tmp, 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 0 dim: 1 '
                 'dim: 8 dim: 8 } } }\n'
                 'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" '
                 'convolution_param { num_output: 2 kernel_size: 3 } }\n')
    assert n.blobs["conv"].shape == (0, 2, 6, 6)


@row("zero-batch-forward", EmptyBlobError, "Forward: Check failed: data_ (blob 'data' has shape 0 1 8 8 (0): "
     "its count has been 0 since it was made, so it holds no memory", "(layer 'conv', type Convolution)",
     layer="conv", blob="data")
def _(tmp):
    net(tmp, 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 0 dim: 1 dim: 8 '
             'dim: 8 } } }\n'
             'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" '
             'convolution_param { num_output: 2 kernel_size: 3 } }\n').forward()


@row("blob-exceeds-int-max", ShapeError, "Check failed: shape[i] <= 0x7fffffff / count_ (65536 vs. 32767) "
     "blob size exceeds INT_MAX (blob of shape 65536 65536)", "(layer 'data', type Input)", layer="data")
def _(tmp):
    net(tmp, 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 65536 dim: 65536 '
             '} } }\n')


@row("memory-budget", "MemoryBudgetExceeded", "the net needs at least 2.0 MiB of memory, more than the budget of "
     "1.0 MiB", "up to a blob of shape 256 1024 (262144), which passed the budget): refused before that memory "
     "is allocated", "(layer 'data', type Input)", layer="data")
def _(tmp):
    import engine
    with engine.memory_budget(1 << 20):
        net(tmp, 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 256 dim: 1024 } } }\n')


@row("buffer-exceeds-int-max", ShapeError, "Check failed: shape[i] <= 0x7fffffff / count_ (64 vs. 33) blob "
     "size exceeds INT_MAX (col_buffer_ of shape 1016064 64 64)", "(layer 'conv', type Convolution)",
     layer="conv")
def _(tmp):
    # every blob of the net is far below INT_MAX; Caffe's column buffer (C x 63 x 63 rows, one
    # column per output pixel) is not, and Caffe's Blob::Reshape refuses it at Init
    net(tmp, 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 256 '
             'dim: 64 dim: 64 } } }\n'
             'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" '
             'convolution_param { num_output: 2 kernel_size: 63 pad: 31 } }\n')


# =========================================================================== shapes
@row("concat-shapes", LayerError, "{tmp}/net.prototxt:2:1: Check failed: top_shape[j] == bottom[i]->shape(j) (4 vs. 5) "
     "All inputs must have the same shape, except at concat_axis.", "layer 'cat'", layer="cat", line=2, column=1)
def _(tmp):
    net(tmp, TWO_INPUTS + 'layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "o" '
                          'concat_param { axis: 1 } }\n')


@row("concat-axis-out-of-range", ShapeError, "{tmp}/net.prototxt:2:73: axis 5 out of range for 4-D Blob with "
     "shape 2 3 4 5 (120)", "layer 'c'", layer="c", line=2, column=73)
def _(tmp):
    net(tmp, INPUT + 'layer { name: "c" type: "Concat" bottom: "data" top: "o" concat_param { axis: 5 } }\n')


@row("eltwise-shapes", LayerError, "{tmp}/net.prototxt:2:1: Check failed: bottom[0]->shape() == bottom[i]->shape()",
     "bottom[0]: 2 3 4 (24), bottom[1]: 2 3 5 (30)", "layer 'e'", layer="e", line=2)
def _(tmp):
    net(tmp, TWO_INPUTS + 'layer { name: "e" type: "Eltwise" bottom: "a" bottom: "b" top: "o" }\n')


@row("crop-offset", LayerError, "the crop for dimension 2 is out-of-bounds with size 5 and offset 6",
     "(3 vs. 5)", "layer 'crop'", layer="crop")
def _(tmp):
    net(tmp, 'layer { name: "data" type: "Input" top: "data" top: "ref" input_param { '
             'shape { dim: 2 dim: 3 dim: 9 dim: 9 } shape { dim: 2 dim: 3 dim: 5 dim: 5 } } }\n'
             'layer { name: "crop" type: "Crop" bottom: "data" bottom: "ref" top: "out" '
             'crop_param { axis: 2 offset: 6 } }\n')


@row("reshape-count", LayerError, "{tmp}/net.prototxt:2:1: ", "bottom count (120) must be divisible by the "
     "product of the specified dimensions (7)", "layer 'r'", layer="r", line=2)
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "Reshape" bottom: "data" top: "o" '
                     'reshape_param { shape { dim: 7 dim: -1 } } }\n')


@row("reshape-two-inferred", LayerError, "new shape contains multiple -1 dims", "layer 'r'")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "r" type: "Reshape" bottom: "data" top: "o" '
                     'reshape_param { shape { dim: -1 dim: -1 } } }\n')


@row("innerproduct-input-reshaped", LayerError, "Check failed: K_ == new_K (60 vs. 72) Input size "
     "incompatible with inner product parameters.", "layer 'ip'", layer="ip")
def _(tmp):
    n = net(tmp, IP_NET)
    n.blobs["data"].reshape(2, 3, 4, 6)
    n.forward()


@row("slice-point-beyond-axis", ShapeError, "negative dimension", "layer 's'", layer="s")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "s" type: "Slice" bottom: "data" top: "a" top: "b" '
                     'slice_param { axis: 1 slice_point: 5 } }\n')


@row("conv-kernel-larger-than-input", ShapeError, "negative dimension", "layer 'c', type Convolution")
def _(tmp):
    net(tmp, INPUT + 'layer { name: "c" type: "Convolution" bottom: "data" top: "o" '
                     'convolution_param { num_output: 2 kernel_size: 9 } }\n')


@row("conv-no-kernel-size", LayerError, "{tmp}/net.prototxt:2:1: ", "kernel_size must be specified once, or once "
     "per spatial dimension", "layer 'c'", line=2, column=1)
def _(tmp):
    net(tmp, INPUT + 'layer { name: "c" type: "Convolution" bottom: "data" top: "o" '
                     'convolution_param { num_output: 2 } }\n')


@row("label-count", LayerError, "The data and label should have the same first dimension. (4 vs. 3)",
     "layer 'loss'", layer="loss")
def _(tmp):
    net(tmp, 'layer { name: "data" type: "Input" top: "a" top: "b" input_param { '
             'shape { dim: 4 dim: 3 } shape { dim: 3 } } }\n'
             'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "a" bottom: "b" top: "l" }\n')


@row("label-out-of-range", LayerError, "label value 7 outside [0, 3)", "layer 'loss'", layer="loss")
def _(tmp):
    n = net(tmp, 'layer { name: "data" type: "Input" top: "a" top: "b" input_param { '
                 'shape { dim: 4 dim: 3 } shape { dim: 4 } } }\n'
                 'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "a" bottom: "b" top: "l" }\n')
    n.blobs["b"].data[...] = 7
    n.forward()


# =========================================================================== shared params
SHARED = INPUT + ('layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "a" param { name: "w" %s } '
                  'inner_product_param { num_output: 10 bias_term: false } }\n'
                  'layer { name: "ip2" type: "InnerProduct" bottom: "data" top: "b" param { name: "w" %s } '
                  'inner_product_param { num_output: %d bias_term: false } }\n')
SHARED_RESHAPED = INPUT + ('layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "a" '
                           'param { name: "w" } inner_product_param { num_output: 10 bias_term: false } }\n'
                           'layer { name: "ip2" type: "InnerProduct" bottom: "a" top: "b" '
                           'param { name: "w" %s } inner_product_param { num_output: %d bias_term: false } }\n')


@row("share-strict-shape", NetError, "Cannot share param 'w' owned by layer 'ip1' with layer 'ip2'; shape "
     "mismatch.", "Owner layer param shape is 10 60 (600); sharing layer expects shape 6 10 (60)",
     layer="ip2", blob="w")
def _(tmp):
    net(tmp, SHARED_RESHAPED % ("", 6))


@row("share-permissive-count", NetError, "Shared parameter blobs must have the same count.",
     "Cannot share param 'w' owned by layer 'ip1' with layer 'ip2'; count mismatch.",
     "Owner layer param shape is 10 60 (600); sharing layer shape is 7 10 (70)", layer="ip2")
def _(tmp):
    net(tmp, SHARED_RESHAPED % ("share_mode: PERMISSIVE", 7))


@row("share-permissive-same-count", None)
def _(tmp):
    n = net(tmp, SHARED_RESHAPED % ("share_mode: PERMISSIVE", 60))   # 60 x 10 vs 10 x 60
    assert n.params["ip2"][0].shape == (60, 10)


@row("share-lr-mult-mismatch", NetError, "Shared param 'w' has mismatched lr_mult.",
     "layer 'ip2' gives 2, owner layer 'ip1' 1", layer="ip2", blob="w")
def _(tmp):
    net(tmp, SHARED % ("lr_mult: 1", "lr_mult: 2", 10))


@row("share-decay-mult-mismatch", NetError, "Shared param 'w' has mismatched decay_mult.",
     "layer 'ip2' gives 0, owner layer 'ip1' 1", layer="ip2", blob="w")
def _(tmp):
    net(tmp, SHARED % ("decay_mult: 1", "decay_mult: 0", 10))


# =========================================================================== weights (caffemodel)
@row("caffemodel-truncated", ParseError, "{tmp}/trunc.caffemodel", "Failed to parse NetParameter file",
     "truncated or not a NetParameter")
def _(tmp):
    data = Path(saved_model(tmp)).read_bytes()
    net(tmp, IP_NET).copy_from(write(tmp, "trunc.caffemodel", data[:len(data) // 2]))


@row("caffemodel-not-a-netparameter", ParseError, "{tmp}/blob.caffemodel",
     "truncated or not a NetParameter", "decode to no known caffe.NetParameter field")
def _(tmp):
    bp = caffe_pb2.BlobProto()
    bp.shape.dim.extend([2, 2])
    bp.data.extend([1, 2, 3, 4])
    net(tmp, IP_NET).copy_from(write(tmp, "blob.caffemodel", bp.SerializeToString()))


@row("caffemodel-is-text", ParseError, "{tmp}/text.caffemodel", "truncated or not a NetParameter")
def _(tmp):
    net(tmp, IP_NET).copy_from(write(tmp, "text.caffemodel", IP_NET))


@row("caffemodel-missing", ParseError, "File not found: {tmp}/nope.caffemodel")
def _(tmp):
    net(tmp, IP_NET).copy_from(str(Path(tmp) / "nope.caffemodel"))


@row("caffemodel-empty", None)
def _(tmp):
    # An empty file is an empty NetParameter for Caffe too: nothing to copy.
    net(tmp, IP_NET).copy_from(write(tmp, "empty.caffemodel", b""))


@row("caffemodel-blob-shape", ShapeError, "{tmp}/net.prototxt:2:1: Cannot copy param 0 weights from layer 'ip'; "
     "shape mismatch.",
     "Source param shape is 4 60 (240); target param shape is 4 72 (288)",
     "rename the layer", layer="ip", line=2, column=1)
def _(tmp):
    # The same InnerProduct on a wider input: its weights no longer fit.
    model = saved_model(tmp)
    net(tmp, IP_NET.replace("dim: 5", "dim: 6")).copy_from(model)


@row("caffemodel-blob-count", ShapeError, "Incompatible number of blobs for layer ip2",
     "source has 2, target 1", layer="ip2")
def _(tmp):
    model = saved_model(tmp)
    net(tmp, IP_NET.replace("num_output: 3", "num_output: 3 bias_term: false")).copy_from(model)


@row("caffemodel-value-count", ShapeError, "Check failed: count_ == proto.data_size() (240 vs. 239)",
     "param 0 of layer 'ip'", "4 60 (240)", layer="ip")
def _(tmp):
    param = caffe_pb2.NetParameter()
    param.ParseFromString(Path(saved_model(tmp)).read_bytes())
    del param.layer[1].blobs[0].data[-1]
    net(tmp, IP_NET).copy_from(write(tmp, "short.caffemodel", param.SerializeToString()))


@row("caffemodel-diff-count", ShapeError, "Check failed: count_ == proto.diff_size() (4 vs. 1)",
     "param 1 of layer 'ip'", layer="ip")
def _(tmp):
    param = caffe_pb2.NetParameter()
    param.ParseFromString(Path(saved_model(tmp)).read_bytes())
    param.layer[1].blobs[1].diff.append(1.0)
    net(tmp, IP_NET).copy_from(write(tmp, "diff.caffemodel", param.SerializeToString()))


@row("caffemodel-as-weights-argument", ParseError, "{tmp}/trunc.caffemodel", "truncated or not a NetParameter")
def _(tmp):
    data = Path(saved_model(tmp)).read_bytes()
    trunc = write(tmp, "trunc.caffemodel", data[:len(data) // 3])
    Net(write(tmp, "net.prototxt", IP_NET), TEST, weights=trunc)


@row("hdf5-weights-not-hdf5", ParseError, "{tmp}/garbage.h5", "cannot read weights from HDF5 file")
def _(tmp):
    pytest.importorskip("h5py")
    net(tmp, IP_NET).copy_from(write(tmp, "garbage.h5", "not an HDF5 file"))


# =========================================================================== mean file
def _lmdb(tmp, name="db", records=4, shape=(3, 4, 4)):
    lmdb = pytest.importorskip("lmdb")
    from engine.core.io import array_to_datum
    path = str(Path(tmp) / name)
    env = lmdb.open(path, map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(records):
            txn.put(b"%08d" % i, array_to_datum(np.zeros(shape, np.uint8), i).SerializeToString())
    env.close()
    return path


DATA = ('layer { name: "d" type: "Data" top: "data" top: "label" '
        'data_param { source: "%s" batch_size: 2 backend: LMDB } %s }\n')


def _mean(tmp, c=3, h=2, w=2):
    bp = caffe_pb2.BlobProto(num=1, channels=c, height=h, width=w)
    bp.data.extend([0.0] * (c * h * w))
    return write(tmp, "mean.binaryproto", bp.SerializeToString())


@row("mean-file-shape", ShapeError, "Check failed: datum_height == data_mean_.height() (4 vs. 2)",
     "the mean file {tmp}/mean.binaryproto has shape 3 x 2 x 2", "the datum is 3 x 4 x 4", "layer 'd'",
     layer="d")
def _(tmp):
    n = net(tmp, DATA % (_lmdb(tmp), 'transform_param { mean_file: "%s" }' % _mean(tmp)))
    n.forward()


@row("mean-file-missing", LayerError, "cannot read mean file {tmp}/nomean.binaryproto", "File not found",
     "layer 'd'", layer="d")
def _(tmp):
    net(tmp, DATA % (_lmdb(tmp), 'transform_param { mean_file: "%s/nomean.binaryproto" }' % tmp))


@row("mean-file-not-a-blobproto", LayerError, "cannot read mean file {tmp}/mean.txt",
     "truncated or not a BlobProto", "layer 'd'")
def _(tmp):
    path = write(tmp, "mean.txt", "this is not a binaryproto\n")
    net(tmp, DATA % (_lmdb(tmp), 'transform_param { mean_file: "%s" }' % path))


@row("mean-file-and-mean-value", LayerError, "Cannot specify mean_file and mean_value at the same time",
     "layer 'd'")
def _(tmp):
    net(tmp, DATA % (_lmdb(tmp), 'transform_param { mean_file: "%s" mean_value: 1 }' % _mean(tmp)))


# =========================================================================== data sources
@row("lmdb-missing", LayerError, "Data layer 'd': cannot open LMDB at {tmp}/nolmdb", "No such file",
     layer="d")
def _(tmp):
    pytest.importorskip("lmdb")
    net(tmp, DATA % ("%s/nolmdb" % tmp, ""))


@row("lmdb-empty", LayerError, "Data layer 'd': cannot open LMDB at {tmp}/empty", "the database is empty",
     layer="d")
def _(tmp):
    lmdb = pytest.importorskip("lmdb")
    lmdb.open(str(Path(tmp) / "empty"), map_size=1 << 20).close()
    net(tmp, DATA % ("%s/empty" % tmp, ""))


@row("lmdb-not-an-lmdb", LayerError, "Data layer 'd': cannot open LMDB at {tmp}/afile", layer="d")
def _(tmp):
    pytest.importorskip("lmdb")
    net(tmp, DATA % (write(tmp, "afile", "hello"), ""))


@row("lmdb-record-not-a-datum", LayerError, "Data layer 'd': record is not a Datum in LMDB {tmp}/bad",
     layer="d")
def _(tmp):
    lmdb = pytest.importorskip("lmdb")
    env = lmdb.open(str(Path(tmp) / "bad"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"1", b"\xff\xff\xff not a datum")
    env.close()
    net(tmp, DATA % ("%s/bad" % tmp, "")).forward()


@row("data-batch-size-zero", LayerError, "data_param.batch_size must be positive", "layer 'd'")
def _(tmp):
    net(tmp, DATA.replace("batch_size: 2", "batch_size: 0") % (_lmdb(tmp), ""))


@row("hdf5data-source-missing", LayerError, "HDF5Data layer 'h': Failed to open source file: "
     "{tmp}/nolist.txt", layer="h")
def _(tmp):
    net(tmp, 'layer { name: "h" type: "HDF5Data" top: "data" hdf5_data_param { source: "%s/nolist.txt" '
             'batch_size: 1 } }\n' % tmp)


@row("hdf5data-source-not-text", LayerError, "HDF5Data layer 'h': source file {tmp}/list.bin is not a "
     "text list", layer="h")
def _(tmp):
    src = write(tmp, "list.bin", b"\x89HDF\r\n\x1a\n\xff\xfe")
    net(tmp, 'layer { name: "h" type: "HDF5Data" top: "data" hdf5_data_param { source: "%s" '
             'batch_size: 1 } }\n' % src)


@row("imagedata-source-missing", LayerError, "ImageData layer 'i': cannot open image list "
     "{tmp}/nolist.txt", layer="i")
def _(tmp):
    net(tmp, 'layer { name: "i" type: "ImageData" top: "data" top: "label" image_data_param { '
             'source: "%s/nolist.txt" batch_size: 1 } }\n' % tmp)


# =========================================================================== Python layers
PY = INPUT + ('layer { name: "py" type: "Python" bottom: "data" top: "o" %s '
              'python_param { module: "%s" layer: "%s" } }\n')
PY_MODULE = '''
import engine as caffe
class Setup(caffe.Layer):
    def setup(self, bottom, top): raise ValueError("bad param_str")
    def reshape(self, bottom, top): top[0].reshape(*bottom[0].shape)
    def forward(self, bottom, top): pass
class Fails(caffe.Layer):
    def setup(self, bottom, top): pass
    def reshape(self, bottom, top): top[0].reshape(*bottom[0].shape)
    def forward(self, bottom, top): 1 / 0
    def backward(self, top, propagate_down, bottom): raise KeyError("x")
class Fine(caffe.Layer):
    def setup(self, bottom, top): pass
    def reshape(self, bottom, top): top[0].reshape(*bottom[0].shape)
    def forward(self, bottom, top): top[0].data[...] = bottom[0].data
    def backward(self, top, propagate_down, bottom): raise KeyError("x")
'''


def _pymodule(tmp, request_name):
    """A module beside the model, with a name unique to the test (no sys.modules reuse)."""
    name = "catalogue_%s_%d" % (re.sub(r"\W", "_", request_name), os.getpid())
    write(tmp, name + ".py", PY_MODULE)
    sys.modules.pop(name, None)
    return name


@row("python-module-missing", PythonLayerNotFound, "Python layer 'py': cannot import module 'no_such_module_xyz'",
     "No module named", layer="py")
def _(tmp):
    net(tmp, PY % ("", "no_such_module_xyz", "L"))


@row("python-module-raises-on-import", RuntimeError, "boom at import",
     "raised while importing module 'catalogue_boom_", "for Python layer 'py'", layer="py")
def _(tmp):
    name = "catalogue_boom_%d" % os.getpid()
    write(tmp, name + ".py", "raise RuntimeError('boom at import')\n")
    sys.modules.pop(name, None)
    net(tmp, PY % ("", name, "L"))


@row("python-class-missing", PythonLayerClassMissing, "Python layer 'py': module", "has no attribute 'Nope'",
     layer="py")
def _(tmp):
    net(tmp, PY % ("", _pymodule(tmp, "class"), "Nope"))


@row("python-setup-raises", ValueError, "bad param_str", "raised by setup() of Python layer 'py' (",
     ".Setup)", layer="py")
def _(tmp):
    net(tmp, PY % ("", _pymodule(tmp, "setup"), "Setup"))


@row("python-forward-raises", ZeroDivisionError, "division by zero",
     "raised by forward() of Python layer 'py' (", ".Fails)", layer="py")
def _(tmp):
    net(tmp, PY % ("", _pymodule(tmp, "forward"), "Fails")).forward()


@row("python-backward-raises", KeyError, "'x'", "raised by backward() of Python layer 'py' (", ".Fine)",
     layer="py")
def _(tmp):
    n = net(tmp, "force_backward: true\n" + PY % ("loss_weight: 1", _pymodule(tmp, "backward"), "Fine"))
    n.forward()
    n.backward()


@row("python-layers-disallowed", PythonLayerRefused, "Layer 'py' is a Python layer",
     "Python layers are disabled for this model", layer="py")
def _(tmp):
    net(tmp, PY % ("", "anything", "L"), allow_python=False)


# =========================================================================== solvers
SOLVER_NET = (INPUT + 'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
              'inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }\n'
              'layer { name: "l" type: "Reduction" bottom: "ip" top: "l" loss_weight: 1 }\n')


def solver(tmp, text, step=False):
    from engine import get_solver
    netp = write(tmp, "solver_net.prototxt", SOLVER_NET)
    s = get_solver(write(tmp, "solver.prototxt", text.replace("NET", netp)))
    if step:
        s.step(1)
    return s


@row("solver-no-net", SolverError, "Check failed: num_train_nets >= 1 (0 vs. 1)",
     "SolverParameter must specify a train net")
def _(tmp):
    solver(tmp, 'base_lr: 0.1\nlr_policy: "fixed"\n')


@row("solver-two-nets", SolverError, "Check failed: num_train_nets <= 1 (2 vs. 1)")
def _(tmp):
    solver(tmp, 'net: "NET"\nnet_param { name: "x" }\nbase_lr: 0.1\nlr_policy: "fixed"\n')


@row("solver-net-file-missing", ParseError, "File not found: {tmp}/nonet.prototxt")
def _(tmp):
    solver(tmp, 'net: "%s/nonet.prototxt"\nbase_lr: 0.1\nlr_policy: "fixed"\n' % tmp)


@row("solver-syntax-error", ParseError, "{tmp}/solver.prototxt:2:", "Failed to parse SolverParameter file",
     line=2)
def _(tmp):
    solver(tmp, 'net: "NET"\nbase_lr: 0.1 0.2\n')


@row("solver-bad-lr-policy", SolverError, "Unknown learning rate policy: bogus")
def _(tmp):
    solver(tmp, 'net: "NET"\nbase_lr: 0.1\nlr_policy: "bogus"\n', step=True)


@row("solver-no-lr-policy", SolverError, "Unknown learning rate policy: ")
def _(tmp):
    solver(tmp, 'net: "NET"\nbase_lr: 0.1\n', step=True)


@row("solver-step-without-stepsize", SolverError, "Check failed: this->param_.stepsize() > 0 (0 vs. 0)")
def _(tmp):
    solver(tmp, 'net: "NET"\nbase_lr: 0.1\nlr_policy: "step"\n', step=True)


@row("solver-unknown-type", SolverError, "Unknown solver type: Bogus", "known types: AdaDelta")
def _(tmp):
    solver(tmp, 'net: "NET"\nbase_lr: 0.1\nlr_policy: "fixed"\ntype: "Bogus"\n')


@row("solver-type-and-solver-type", SolverError, "old solver_type field (enum) and new type field "
     "(string) cannot be both specified")
def _(tmp):
    solver(tmp, 'net: "NET"\nbase_lr: 0.1\nlr_policy: "fixed"\nsolver_type: ADAM\ntype: "Adam"\n')


@row("solver-unknown-regularization", SolverError, "Unknown regularization type: L3")
def _(tmp):
    solver(tmp, 'net: "NET"\nbase_lr: 0.1\nlr_policy: "fixed"\nweight_decay: 0.1\n'
                'regularization_type: "L3"\n', step=True)


# =========================================================================== LevelDB, OpenCV, Caffe's tools
LEVELDB = DATA.replace("backend: LMDB", "backend: LEVELDB")


def _leveldb(tmp, name="ldb", records=0):
    plyvel = pytest.importorskip("plyvel")
    from engine.core.io import array_to_datum
    d = plyvel.DB(str(Path(tmp) / name), create_if_missing=True)
    for i in range(records):
        d.put(b"%08d" % i, array_to_datum(np.zeros((3, 4, 4), np.uint8), i).SerializeToString())
    d.close()
    return str(Path(tmp) / name)


@row("leveldb-missing", LayerError, "Data layer 'd': Check failed: status.ok() Failed to open leveldb "
     "{tmp}/noldb: Invalid argument: {tmp}/noldb: does not exist (create_if_missing is false)", layer="d")
def _(tmp):
    pytest.importorskip("plyvel")
    net(tmp, LEVELDB % ("%s/noldb" % tmp, ""))


@row("leveldb-empty", LayerError, "Data layer 'd': cannot open LevelDB at {tmp}/ldb: the database is empty",
     layer="d")
def _(tmp):
    net(tmp, LEVELDB % (_leveldb(tmp), ""))


@row("leveldb-without-plyvel", LayerError, "Data layer 'd': LevelDB needs plyvel",
     "pip install 'caffe-inspector[leveldb]' (or: pip install plyvel)", layer="d")
def _(tmp):
    import builtins
    real = builtins.__import__

    def no_plyvel(name, *args, **kw):
        if name == "plyvel":
            raise ImportError("No module named 'plyvel'")
        return real(name, *args, **kw)
    builtins.__import__ = no_plyvel
    try:
        net(tmp, LEVELDB % ("%s/any" % tmp, ""))
    finally:
        builtins.__import__ = real


@row("db-unknown-backend", DBError, "Unknown database backend: rocksdb (known: lmdb, leveldb)")
def _(tmp):
    from engine.core import db
    db.open_db(str(Path(tmp) / "x"), "rocksdb", db.NEW)


@row("db-new-lmdb-exists", DBError, "Check failed: mkdir(source.c_str(), 0744) == 0 (-1 vs. 0) mkdir {tmp} "
     "failed (File exists)")
def _(tmp):
    from engine.core import db
    db.open_db(str(tmp), "lmdb", db.NEW)


@row("db-new-leveldb-exists", DBError, "Failed to open leveldb {tmp}/ldb: Invalid argument: {tmp}/ldb: exists "
     "(error_if_exists is true)")
def _(tmp):
    from engine.core import db
    db.open_db(_leveldb(tmp), "leveldb", db.NEW)


@row("images-without-opencv", "MissingOpenCV", "reading and resizing images as Caffe does needs OpenCV",
     "pip install opencv-python-headless")
def _(tmp):
    from engine.core import images
    real, saved = sys.modules.get("cv2"), images._cv2
    sys.modules["cv2"], images._cv2 = None, None
    try:
        write(tmp, "list.txt", "a.png 0\n")
        net(tmp, 'layer { name: "i" type: "ImageData" top: "data" top: "label" image_data_param { '
                 'source: "%s/list.txt" root_folder: "%s/" batch_size: 1 } }\n' % (tmp, tmp))
    finally:
        images._cv2 = saved
        if real is None:
            sys.modules.pop("cv2", None)
        else:
            sys.modules["cv2"] = real


def _tools():
    from engine.tools import caffe_tools
    return caffe_tools


@row("convert-imageset-check-size", "ToolError", "Check failed: data.size() == data_size (16 vs. 12) Incorrect "
     "data field size 16 (image {tmp}/b.png)")
def _(tmp):
    cv2 = pytest.importorskip("cv2")
    cv2.imwrite(str(Path(tmp) / "a.png"), np.zeros((3, 4), np.uint8))
    cv2.imwrite(str(Path(tmp) / "b.png"), np.zeros((4, 4), np.uint8))
    _tools().convert_imageset(str(tmp) + "/", write(tmp, "list.txt", "a.png 0\nb.png 1\n"),
                              str(Path(tmp) / "db"), gray=True, check_size=True)


@row("compute-image-mean-sizes-differ", "ToolError", "Check failed: size_in_datum == data_size (12 vs. 48) "
     "Incorrect data field size 12 (record 00000001)")
def _(tmp):
    lmdb = pytest.importorskip("lmdb")
    from engine.core.io import array_to_datum
    env = lmdb.open(str(Path(tmp) / "db"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"00000000", array_to_datum(np.zeros((3, 4, 4), np.uint8), 0).SerializeToString())
        txn.put(b"00000001", array_to_datum(np.zeros((3, 2, 2), np.uint8), 0).SerializeToString())
    env.close()
    _tools().compute_image_mean(str(Path(tmp) / "db"))


def _idx_pair(tmp, image_magic=2051, items=3, label_items=3, cut=0):
    """Two small IDX files (images 2 x 2, labels) in ``tmp``: (images path, labels path)."""
    img = np.array([image_magic, items, 2, 2], ">u4").tobytes() + bytes(4 * items)
    lab = np.array([2049, label_items], ">u4").tobytes() + bytes(label_items)
    (Path(tmp) / "i").write_bytes(img[:len(img) - cut])
    (Path(tmp) / "l").write_bytes(lab)
    return str(Path(tmp) / "i"), str(Path(tmp) / "l")


def _converters():
    from engine.tools import converters
    return converters


@row("convert-mnist-image-magic", "ToolError", "Check failed: magic == 2051 (2049 vs. 2051) Incorrect image file "
     "magic. ({tmp}/i)")
def _(tmp):
    _converters().convert_mnist_data(*_idx_pair(tmp, image_magic=2049), str(Path(tmp) / "db"))


@row("convert-mnist-counts-differ", "ToolError", "Check failed: num_items == num_labels (3 vs. 4) ({tmp}/i, {tmp}/l)")
def _(tmp):
    _converters().convert_mnist_data(*_idx_pair(tmp, label_items=4), str(Path(tmp) / "db"))


@row("convert-mnist-cut-short", "ToolError", "{tmp}/i: its header counts 3 images of 2 x 2 (12 bytes after the "
     "header) but the file holds 11: it is cut short")
def _(tmp):
    _converters().convert_mnist_siamese_data(*_idx_pair(tmp, cut=1), str(Path(tmp) / "db"))


@row("convert-cifar-batch-missing", "ToolError", "Check failed: data_file Unable to open train file #1 "
     "({tmp}/data_batch_1.bin: No such file or directory)")
def _(tmp):
    _converters().convert_cifar_data(str(tmp), str(tmp), "lmdb")


@row("extract-features-unknown-blob", "ToolError", "Unknown feature blob name fc7 in the network {tmp}/net.prototxt")
def _(tmp):
    model = saved_model(tmp)
    _tools().extract_features(model, write(tmp, "net.prototxt", IP_NET), "fc7", str(Path(tmp) / "f"), 1, "lmdb")


@row("caffe-train-no-solver", SolverError, "Check failed: FLAGS_solver.size() > 0 (0 vs. 0) Need a solver "
     "definition to train.")
def _(tmp):
    from engine.tools.solver_commands import train
    train("")


@row("caffe-train-snapshot-and-weights", SolverError, "Give a snapshot to resume training or weights to "
     "finetune but not both.")
def _(tmp):
    from engine.tools.solver_commands import train
    train("solver.prototxt", weights="w.caffemodel", snapshot="s.solverstate")


@row("caffe-test-no-weights", SolverError, "Check failed: FLAGS_weights.size() > 0 (0 vs. 0) Need model weights "
     "to score.")
def _(tmp):
    from engine.tools.solver_commands import test
    test("net.prototxt", "")


@row("caffe-device-query-without-cuda", DeviceError, "Cannot use GPU in CPU-only Caffe: check mode.")
def _(tmp):
    from engine.core import backend
    if backend.gpu_available():
        pytest.skip("a GPU is present")
    _tools().device_query("0")


# =========================================================================== running and devices
@row("forward-unknown-start-layer", NetError, "Unknown layer name 'nope'", layer="nope")
def _(tmp):
    net(tmp, INPUT).forward(start="nope")


@row("forward-wrong-input-names", NetError, "Input blob arguments do not match net inputs.",
     "given: other; net inputs: data")
def _(tmp):
    net(tmp, INPUT).forward(other=np.zeros(1))


@row("forward-not-batch-sized", ShapeError, "Input is not batch sized", "blob 'data': 3 given for a batch "
     "of 2", blob="data")
def _(tmp):
    net(tmp, INPUT).forward(data=np.zeros((3, 3, 4, 5)))


@row("gpu-without-cuda", DeviceError, "GPU mode needs CuPy and a CUDA device")
def _(tmp):
    from engine.core import backend
    if backend.gpu_available():
        pytest.skip("a GPU is present")
    try:
        backend.set_mode_gpu()
    finally:
        backend.set_mode_cpu()


# =========================================================================== the tests
@pytest.mark.parametrize("r", ROWS, ids=lambda r: r.id)
def test_catalogue(r, tmp_path):
    if r.exc is None:
        r.fn(tmp_path)           # accepted, as Caffe accepts it
        return
    # The engine's own errors are CaffeErrors; a Python layer's own exception keeps its type
    # (as in pycaffe) and carries the layer in a note.
    own = isinstance(r.exc, str) or issubclass(r.exc, CaffeError)
    with pytest.raises(CaffeError if own else r.exc) as ei:
        r.fn(tmp_path)
    e = ei.value
    if isinstance(r.exc, str):       # an error class defined beside the code that raises it
        assert type(e).__name__ == r.exc, "%s: expected %s, got %s: %s" % (r.id, r.exc, type(e).__name__, e)
    else:
        assert type(e) is r.exc, "%s: expected %s, got %s: %s" % (r.id, r.exc.__name__, type(e).__name__, e)
    msg = "\n".join([str(e)] + list(getattr(e, "__notes__", ())))
    for needle in r.needles:
        needle = needle.replace("{tmp}", str(tmp_path))
        assert needle in msg, "%s: %r not in message %r" % (r.id, needle, msg)
    for attr, value in r.attrs.items():
        assert getattr(e, attr) == value, "%s: %s is %r, not %r" % (r.id, attr, getattr(e, attr), value)


def test_catalogue_ids_are_unique():
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids))


def test_docs_list_every_row():
    doc = (ROOT / "docs" / "errors.md").read_text()
    listed = set(re.findall(r"^\|\s*`([a-z0-9-]+)`\s*\|", doc, re.M))
    ids = {r.id for r in ROWS}
    assert ids - listed == set(), "rows missing from docs/errors.md: %s" % sorted(ids - listed)
    assert listed - ids == set(), "docs/errors.md lists rows with no test: %s" % sorted(listed - ids)

"""Fuzz at scale: N mutants of real nets through parse, Init, Forward and Backward.

A benchmark-style campaign (not in CI; ``tests/test_fuzz.py`` is CI's): every net of the
zoo (``../shared/zoo``: the ``*.input.prototxt`` nets and all the others), the bundled
examples, and one small net per registered layer type, each shrunk to a batch of 1-2 (and,
where the net still builds, a smaller image), are mutated -- the CI fuzzer's text edits
plus structured ones: dimensions (0, 1, huge), kernel / stride / pad / dilation / group,
bottoms and tops removed / duplicated / renamed, layer types changed, numeric parameters to
their extremes, enums, fields deleted (required ones included), layers deleted /
duplicated / swapped, rules and shared params added -- and each mutant runs in a worker
process: ``Net(path, phase, level, stages, allow_python=False)``, then random inputs,
``forward()`` and, where a layer needs it, ``backward()``.

Outcomes:

- ``ok``: it ran (``ok (Init only)``: it built but is too big to run here);
- engine error: an ``engine.errors.CaffeError`` (by type; one whose message names neither
  layer, blob nor file is counted apart as ``unplaced``, and listed);
- ``escape``: any other exception, or the worker crashed or was killed;
- ``hang``: the mutant ran past ``--timeout`` seconds (the worker is killed and replaced).

Every escape and hang is printed with its mutant (index, seed net, mutations) and written
to ``--out`` (the mutated prototxt and a JSON with what ran and the traceback); ``--repro
INDEX`` runs one mutant again in this process, ``--seed`` and ``--mutants`` alike.

    python benchmarks/fuzz.py                          # 10 000 mutants, a random seed, 1 worker
    python benchmarks/fuzz.py --mutants 500 --seed 7 --out /tmp/fuzz-7
    python benchmarks/fuzz.py --seed 7 --repro 123     # mutant 123 of seed 7, traceback here

docs/fuzzing.md ("At scale") has the options and the campaigns run so far.
"""
import argparse
import collections
import json
import multiprocessing as mp
import os
import random
import re
import resource
import sys
import tempfile
import time
import traceback
import warnings
from multiprocessing.connection import wait as wait_conns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SHARED = os.environ.get("CAFFE_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))

MAX_RUN_ELEMENTS = 30_000_000      # blob elements (memory_used) above which a mutant is only built
MAX_RUN_PARAMS = 40_000_000        # param elements, likewise
MAX_RUN_RECORDS = 4096             # a data layer's batch (records or windows read one by one), likewise
RECYCLE_EVERY = 300                # mutants per worker before a fresh one (no slow leak decides anything)

# ---------------------------------------------------------------------------------------------- seeds
# One small net per layer type: (inputs, layer text).  Inputs: (top, dims); tops whose name
# starts with "label" get integers in [0, 2), the others normal values.  {tmp}: the fixtures.
GF = 'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.2 }'
RF = ('recurrent_param { num_output: 3 weight_filler { type: "uniform" min: -0.3 max: 0.3 } '
      'bias_filler { type: "uniform" min: -0.2 max: 0.2 } }')
LAYER_NETS = {
    "AbsVal": ([("x", (2, 3, 4))], 'bottom: "x" top: "y"'),
    "Accuracy": ([("x", (2, 5)), ("label", (2,))], 'bottom: "x" bottom: "label" top: "y" '
                                                    'accuracy_param { top_k: 2 }'),
    "ArgMax": ([("x", (2, 6))], 'bottom: "x" top: "y" argmax_param { top_k: 2 out_max_val: true }'),
    "BNLL": ([("x", (2, 3, 4))], 'bottom: "x" top: "y"'),
    "BatchNorm": ([("x", (2, 3, 4, 2))], 'bottom: "x" top: "y"'),
    "BatchReindex": ([("x", (2, 3, 2)), ("label", (3,))], 'bottom: "x" bottom: "label" top: "y"'),
    "Bias": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" bias_param { axis: 1 num_axes: 1 '
                                 'filler { type: "gaussian" } }'),
    "Clip": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" clip_param { min: -0.5 max: 0.6 }'),
    "Concat": ([("x", (2, 3, 4)), ("z", (2, 5, 4))], 'bottom: "x" bottom: "z" top: "y" concat_param { axis: 1 }'),
    "ContrastiveLoss": ([("x", (2, 3)), ("z", (2, 3)), ("label", (2,))],
                        'bottom: "x" bottom: "z" bottom: "label" top: "y" '
                        'contrastive_loss_param { margin: 2 }'),
    "Convolution": ([("x", (2, 3, 6, 5))], 'bottom: "x" top: "y" convolution_param { num_output: 4 '
                                           'kernel_size: 3 stride: 2 pad: 1 %s }' % GF),
    "Crop": ([("x", (2, 3, 6, 6)), ("z", (2, 3, 4, 3))], 'bottom: "x" bottom: "z" top: "y" '
                                                         'crop_param { axis: 2 offset: 1 offset: 2 }'),
    "Data": ([], 'top: "y" top: "label" data_param { source: "{tmp}/lmdb" batch_size: 2 backend: LMDB } '
                 'transform_param { crop_size: 3 mirror: true }'),
    "Deconvolution": ([("x", (2, 3, 3, 4))], 'bottom: "x" top: "y" convolution_param { num_output: 4 '
                                             'kernel_size: 3 stride: 2 %s }' % GF),
    "Dropout": ([("x", (2, 5))], 'bottom: "x" top: "y" dropout_param { dropout_ratio: 0.4 }'),
    "DummyData": ([], 'top: "y" top: "z" dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 4 } '
                      'data_filler { type: "gaussian" } data_filler { type: "constant" value: 2 } }'),
    "ELU": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" elu_param { alpha: 0.5 }'),
    "Eltwise": ([("x", (2, 3)), ("z", (2, 3))], 'bottom: "x" bottom: "z" top: "y" '
                                                'eltwise_param { operation: SUM coeff: 1 coeff: -2 }'),
    "Embed": ([("label", (2, 3))], 'bottom: "label" top: "y" embed_param { num_output: 3 input_dim: 5 %s }'
              % GF),
    "EuclideanLoss": ([("x", (2, 3)), ("z", (2, 3))], 'bottom: "x" bottom: "z" top: "y"'),
    "Exp": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" exp_param { base: 2 scale: 0.5 shift: 0.1 }'),
    "Filter": ([("x", (2, 3)), ("label", (2, 1))], 'bottom: "x" bottom: "label" top: "y"'),
    "Flatten": ([("x", (2, 3, 4))], 'bottom: "x" top: "y"'),
    "HDF5Data": ([], 'top: "data" top: "label" hdf5_data_param { source: "{tmp}/h5list.txt" batch_size: 2 }'),
    "HDF5Output": ([("x", (2, 3, 2, 2)), ("label", (2, 1))],
                   'bottom: "x" bottom: "label" hdf5_output_param { file_name: "{tmp}/out.h5" }'),
    "HingeLoss": ([("x", (2, 5)), ("label", (2,))], 'bottom: "x" bottom: "label" top: "y"'),
    "Im2col": ([("x", (2, 3, 5, 4))], 'bottom: "x" top: "y" convolution_param { kernel_size: 3 stride: 2 pad: 1 }'),
    "ImageData": ([], 'top: "y" top: "label" image_data_param { source: "{tmp}/list.txt" root_folder: "{tmp}/" '
                      'batch_size: 2 } transform_param { crop_size: 4 }'),
    "InfogainLoss": ([("x", (2, 5)), ("label", (2,)), ("h", (1, 1, 5, 5))],
                     'bottom: "x" bottom: "label" bottom: "h" top: "y"'),
    "InnerProduct": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" inner_product_param { num_output: 5 %s }' % GF),
    "Input": ([], 'top: "y" input_param { shape { dim: 2 dim: 3 } }'),
    "LRN": ([("x", (2, 5, 3, 3))], 'bottom: "x" top: "y" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 }'),
    "LSTM": ([("x", (3, 2, 4)), ("label", (3, 2))], 'bottom: "x" bottom: "label" top: "y" ' + RF),
    "LSTMUnit": ([("x", (1, 2, 3)), ("z", (1, 2, 12)), ("label", (1, 2))],
                 'bottom: "x" bottom: "z" bottom: "label" top: "y" top: "w"'),
    "Log": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" log_param { base: 2 scale: 0.5 shift: 1 }'),
    "MVN": ([("x", (2, 3, 4, 2))], 'bottom: "x" top: "y" mvn_param { across_channels: true }'),
    "MemoryData": ([], 'top: "y" top: "label" memory_data_param { batch_size: 2 channels: 2 height: 3 width: 2 }'),
    "MultinomialLogisticLoss": ([("x", (2, 5)), ("label", (2,))], 'bottom: "x" bottom: "label" top: "y"'),
    "PReLU": ([("x", (2, 3, 4))], 'bottom: "x" top: "y"'),
    "Parameter": ([], 'top: "y" parameter_param { shape { dim: 2 dim: 3 } }'),
    "Pooling": ([("x", (2, 3, 5, 6))], 'bottom: "x" top: "y" pooling_param { pool: MAX kernel_size: 3 stride: 2 }'),
    "Power": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" power_param { power: 2 scale: 0.5 shift: 1 }'),
    "Python": ([("x", (2, 3))], 'bottom: "x" top: "y" python_param { module: "fuzz_layer" layer: "L" }'),
    "RNN": ([("x", (3, 2, 4)), ("label", (3, 2))], 'bottom: "x" bottom: "label" top: "y" ' + RF),
    "ReLU": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" relu_param { negative_slope: 0.1 }'),
    "Reduction": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" reduction_param { operation: SUMSQ axis: 1 coeff: 2 }'),
    "Reshape": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" reshape_param { shape { dim: 0 dim: -1 } }'),
    "SPP": ([("x", (2, 3, 5, 4))], 'bottom: "x" top: "y" spp_param { pyramid_height: 2 pool: MAX }'),
    "Scale": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" scale_param { axis: 1 num_axes: 1 bias_term: true '
                                  'filler { type: "gaussian" } bias_filler { type: "gaussian" } }'),
    "Sigmoid": ([("x", (2, 3, 4))], 'bottom: "x" top: "y"'),
    "SigmoidCrossEntropyLoss": ([("x", (2, 3)), ("label", (2, 3))], 'bottom: "x" bottom: "label" top: "y"'),
    "Silence": ([("x", (2, 3)), ("z", (4,))], 'bottom: "x" bottom: "z"'),
    "Slice": ([("x", (2, 6, 3))], 'bottom: "x" top: "y" top: "z" top: "w" '
                                  'slice_param { axis: 1 slice_point: 2 slice_point: 5 }'),
    "Softmax": ([("x", (2, 4, 3))], 'bottom: "x" top: "y" softmax_param { axis: 1 }'),
    "SoftmaxWithLoss": ([("x", (2, 5)), ("label", (2,))], 'bottom: "x" bottom: "label" top: "y"'),
    "Split": ([("x", (2, 3))], 'bottom: "x" top: "y" top: "z"'),
    "Swish": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" swish_param { beta: 1.5 }'),
    "TanH": ([("x", (2, 3, 4))], 'bottom: "x" top: "y"'),
    "Threshold": ([("x", (2, 3, 4))], 'bottom: "x" top: "y" threshold_param { threshold: 0.2 }'),
    "Tile": ([("x", (2, 3, 2))], 'bottom: "x" top: "y" tile_param { axis: 1 tiles: 3 }'),
    "WindowData": ([], 'top: "y" top: "label" window_data_param { source: "{tmp}/windows.txt" batch_size: 2 '
                       'fg_fraction: 0.5 context_pad: 1 } transform_param { crop_size: 4 mirror: true }'),
}


def layer_net(type_name, tmp):
    """The small net for one layer type (an Input layer for its bottoms, the layer, and a
    loss over its first top where one is made, so that Backward runs)."""
    inputs, body = LAYER_NETS[type_name]
    lines = ['name: "%s_net"' % type_name]
    if inputs:
        tops = " ".join('top: "%s"' % t for t, _ in inputs)
        shapes = " ".join("shape { %s }" % " ".join("dim: %d" % d for d in dims) for _, dims in inputs)
        lines.append('layer { name: "input" type: "Input" %s input_param { %s } }' % (tops, shapes))
    lines.append('layer { name: "%s" type: "%s" %s }' % (type_name.lower(), type_name, body.replace("{tmp}", tmp)))
    tops = re.findall(r'\btop: "(\w+)"', body)
    if tops and not type_name.endswith("Loss") and type_name not in ("Accuracy", "ArgMax"):
        lines.append('layer { name: "loss" type: "Reduction" bottom: "%s" top: "loss" loss_weight: 1 '
                     'reduction_param { operation: SUMSQ } }' % tops[0])
    return "\n".join(lines) + "\n"


def make_fixtures(tmp):
    """The files the data layers' nets read: an LMDB, an image list, an HDF5 list, a window file."""
    import numpy as np
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(0)
    try:
        import lmdb

        from engine.core.io import array_to_datum
        path = os.path.join(tmp, "lmdb")
        if not os.path.exists(path):
            env = lmdb.open(path, map_size=1 << 24)
            with env.begin(write=True) as txn:
                for i, a in enumerate(rng.integers(0, 256, (6, 3, 5, 4), dtype=np.uint8)):
                    txn.put(b"%08d" % i, array_to_datum(a, i % 2).SerializeToString())
            env.close()
    except ImportError:
        pass
    try:
        from PIL import Image
        lines = []
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).save(os.path.join(tmp, "im%d.png" % i))
            lines.append("im%d.png %d" % (i, i % 2))
        with open(os.path.join(tmp, "list.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(os.path.join(tmp, "w.png"))
        with open(os.path.join(tmp, "windows.txt"), "w") as f:
            f.write("# 0\n%s\n3\n20\n24\n3\n1 0.9 2 3 10 12\n2 0.8 0 0 23 19\n0 0.1 5 5 15 15\n"
                    % os.path.join(tmp, "w.png"))
    except ImportError:
        pass
    try:
        import h5py
        path = os.path.join(tmp, "d.h5")
        with h5py.File(path, "w") as h:
            h["data"] = np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3)
            h["label"] = np.arange(4, dtype=np.float32) % 2
        with open(os.path.join(tmp, "h5list.txt"), "w") as f:
            f.write(path + "\n")
    except ImportError:
        pass


def _absolutise(text, folder):
    """Data sources and mean files that exist (beside the repo root or the net) -> absolute."""
    def fix(m):
        key, path = m.group(1), m.group(2)
        for base in (ROOT, folder):
            cand = os.path.join(base, path)
            if os.path.exists(cand):
                return '%s: "%s"' % (key, cand)
        return m.group(0)
    return re.sub(r'\b(source|mean_file)\s*:\s*"([^"]*)"', fix, text)


def _layers_of(p):
    return p.layers if len(p.layers) else p.layer


_BATCH_FIELDS = ("data_param", "image_data_param", "hdf5_data_param", "memory_data_param",
                 "window_data_param")


def shrink(p, batch, scale=1):
    """Batch ``batch`` and images ``scale`` times smaller (4-D inputs of at least 32x32), in
    place, wherever the net says them: input fields, Input / DummyData shapes, data layers."""
    def shape(dims, is_input=True):
        if len(dims) and dims[0] > batch:
            dims[0] = batch
        if scale > 1 and is_input and len(dims) == 4 and dims[2] >= 32 and dims[3] >= 32:
            dims[2], dims[3] = max(dims[2] // scale, 8), max(dims[3] // scale, 8)
    for i in range(0, len(p.input_dim), 4):
        dims = list(p.input_dim[i:i + 4])
        shape(dims)
        p.input_dim[i:i + 4] = dims
    for s in p.input_shape:
        dims = list(s.dim)
        shape(dims)
        s.dim[:] = dims
    for layer in _layers_of(p):
        if layer.HasField("input_param"):
            for s in layer.input_param.shape:
                dims = list(s.dim)
                shape(dims)
                s.dim[:] = dims
        if layer.HasField("dummy_data_param"):
            d = layer.dummy_data_param
            for s in d.shape:
                dims = list(s.dim)
                shape(dims, is_input=False)
                s.dim[:] = dims
            for k in range(len(d.num)):
                d.num[k] = min(d.num[k], batch)
        for f in _BATCH_FIELDS:
            if layer.HasField(f) and getattr(layer, f).batch_size > batch:
                getattr(layer, f).batch_size = batch
    return p


def _has_big_images(p):
    dims = [list(p.input_dim[i:i + 4]) for i in range(0, len(p.input_dim), 4)]
    dims += [list(s.dim) for s in p.input_shape]
    for layer in _layers_of(p):
        if layer.HasField("input_param"):
            dims += [list(s.dim) for s in layer.input_param.shape]
    return any(len(d) == 4 and d[2] >= 32 and d[3] >= 32 for d in dims)


def collect_seeds(tmp, zoo=True, examples=True, layers=True):
    """[(name, NetParameter text)] of every seed net (not yet shrunk)."""
    from engine.core.errors import CaffeError
    from engine.core.io import parse_prototxt
    from engine.proto import caffe_pb2
    files = []
    if zoo and os.path.isdir(os.path.join(SHARED, "zoo")):
        for dirpath, _dirs, names in sorted(os.walk(os.path.join(SHARED, "zoo"))):
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".prototxt")]
    if examples:
        for dirpath, _dirs, names in sorted(os.walk(os.path.join(ROOT, "examples"))):
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".prototxt")]
    seeds = []
    for f in files:
        if "solver" in os.path.basename(f).lower():
            continue
        with open(f, encoding="utf-8", errors="replace") as fh:
            text = _absolutise(fh.read(), os.path.dirname(f))
        try:
            parse_prototxt(text, caffe_pb2.NetParameter)
        except CaffeError:
            continue                    # not a NetParameter
        inside = f.startswith(ROOT + os.sep)
        seeds.append((os.path.relpath(f, ROOT if inside else SHARED), text))
    if layers:
        import engine
        for t in engine.layer_type_list():
            if t in LAYER_NETS:
                seeds.append(("layer:" + t, layer_net(t, tmp)))
    return seeds


# ---------------------------------------------------------------------------------------------- mutations
NUMBERS = ["0", "1", "-1", "2", "3", "5", "7", "64", "-3", "255", "1000", "65536", "2147483647",
           "-2147483648", "4294967296", "99999999999999999999", "0.5", "-0.5", "1.5", "1e-30",
           "1e30", "3.4e38", "1e39", "nan", "inf", "-inf", "0x10", "1e", ""]
WORDS = ["data", "label", "loss", "conv1", "ip1", "pool1", "x", "", "TRAIN", "TEST", "MAX", "AVE",
         "STOCHASTIC", "SUM", "PROD", "LMDB", "LEVELDB", "CAFFE", "CUDNN", "DEFAULT", "PERMISSIVE",
         "STRICT", "gaussian", "xavier", "constant", "msra", "bilinear", "FULL", "VALID", "NONE",
         "BATCH_SIZE", "ASUM", "SUMSQ", "MEAN", "ACROSS_CHANNELS", "WITHIN_CHANNEL", "deploy",
         "Convolution", "InnerProduct", "Pooling", "Python", "ReLU", "Reshape", "Bogus", "data\\0", "\u00e9"]
SNIPPETS = ['propagate_down: true', 'propagate_down: false', 'loss_weight: 1', 'loss_weight: -2.5',
            'include { phase: TRAIN }', 'exclude { phase: TEST }', 'include { stage: "deploy" }',
            'include { min_level: 1 }', 'exclude { not_stage: "x" }', 'param { name: "shared_w" }',
            'param { lr_mult: 0 decay_mult: 3 }', 'param { name: "shared_w" share_mode: PERMISSIVE }',
            'bottom: "data"', 'top: "data"', 'bottom: "label"', 'top: "extra"', 'force_backward: true',
            'debug_info: true', 'blobs { shape { dim: 2 } data: 1 data: 2 }', 'phase: TRAIN',
            'layer { name: "r" type: "ReLU" bottom: "data" top: "data" }',
            'layer { name: "s" type: "Silence" bottom: "data" }',
            'input: "data" input_dim: 1 input_dim: 2 input_dim: 3 input_dim: 4',
            'input_shape { dim: 2 }', 'state { phase: TRAIN }', 'engine: CUDNN',
            'layers { name: "v1" type: RELU bottom: "data" top: "data" }',
            '}', '{', 'layer {', '"', '#', 'name: "dup"', 'type: "Bogus"']

DIMS = [0, 1, 2, 3, 7, 64, 1000, 65536, 2 ** 31 - 1, 2 ** 31, 2 ** 40, -1, -2]
CONV_FIELDS = {"kernel_size", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w", "pad", "pad_h",
               "pad_w", "dilation", "group", "num_output", "axis", "pyramid_height", "local_size", "tiles",
               "top_k", "slice_point", "offset", "num_axes", "input_dim", "channels", "height", "width",
               "new_height", "new_width", "crop_size", "batch_size"}
CONV_VALUES = [0, 1, 2, 3, 5, 11, 100, 1000, 65535, 2 ** 31 - 1, 2 ** 32 - 1, -1, -2, -(2 ** 31)]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-45, 1e-30, 1e30, 3.4e38, -3.4e38, float("inf"),
          float("-inf"), float("nan"), 100.0, -100.0]

_INT_RANGES = {  # FieldDescriptor cpp types
    1: (-(2 ** 31), 2 ** 31 - 1), 2: (-(2 ** 63), 2 ** 63 - 1), 3: (0, 2 ** 32 - 1), 4: (0, 2 ** 64 - 1)}


def _walk_fields(msg, path=()):
    """Every (message, field descriptor, index or None) set in ``msg``, depth first."""
    out = []
    for fd, value in msg.ListFields():
        repeated = fd.is_repeated
        items = list(enumerate(value)) if repeated else [(None, value)]
        for idx, v in items:
            out.append((msg, fd, idx))
            if fd.type == fd.TYPE_MESSAGE:
                out.extend(_walk_fields(v, path + (fd.name,)))
    return out


def _all_fields(msg):
    """Every (message, field descriptor) that could be set in ``msg``'s set submessages."""
    out = []
    for fd in msg.DESCRIPTOR.fields:
        out.append((msg, fd))
    for fd, value in msg.ListFields():
        if fd.type == fd.TYPE_MESSAGE:
            for v in (value if fd.is_repeated else [value]):
                out.extend(_all_fields(v))
    return out


def _set(msg, fd, idx, value):
    if idx is None:
        setattr(msg, fd.name, value)
    else:
        getattr(msg, fd.name)[idx] = value


def _numeric_value(rng, fd, pool=None):
    if fd.cpp_type in _INT_RANGES:
        lo, hi = _INT_RANGES[fd.cpp_type]
        choices = [v for v in (pool or CONV_VALUES + DIMS + [lo, hi]) if lo <= v <= hi]
        return rng.choice(choices)
    if fd.cpp_type in (5, 6):       # double, float
        return rng.choice(FLOATS)
    if fd.cpp_type == 7:            # bool
        return rng.random() < 0.5
    if fd.cpp_type == 8:            # enum
        return rng.choice([v.number for v in fd.enum_type.values])
    return None


def _blob_names(layers):
    names = set()
    for layer in layers:
        names.update(layer.bottom)
        names.update(layer.top)
    return sorted(names) or ["data"]


class Mutator:
    """Structured and text mutations of one seed, driven by ``rng`` (random.Random)."""

    # weights: the ops that mostly break the wiring (bottom, top, layer) would otherwise keep
    # most mutants from reaching Forward and Backward
    OPS = ["dim"] * 3 + ["kernel"] * 3 + ["numeric"] * 3 + ["enum", "bottom", "top", "type"] + \
        ["delete_field"] * 2 + ["layer", "rule", "text"]

    def __init__(self, rng, types):
        self.rng = rng
        self.types = types

    def mutate(self, param):
        """(mutated text, [op descriptions])."""
        from google.protobuf import text_format
        rng = self.rng
        ops = []
        text_ops = []
        for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
            op = rng.choice(self.OPS)
            if op == "text":
                text_ops.append(op)
                continue
            try:
                done = getattr(self, "_" + op)(param)
            except (ValueError, TypeError, IndexError, OverflowError) as e:   # a value protobuf refuses
                done = "%s: not applied (%s)" % (op, e)
            if done:
                ops.append(done)
        text = text_format.MessageToString(param)
        for _ in text_ops:
            text, what = self._text(text)
            ops.append("text " + what)
        return text, ops

    # ------------------------------------------------------------------ structured
    def _layer(self, p):
        layers = _layers_of(p)
        if not len(layers):
            return None
        rng = self.rng
        i = rng.randrange(len(layers))
        kind = rng.choice(["delete", "duplicate", "swap", "move_first"])
        name = layers[i].name
        if kind == "delete":
            del layers[i]
        elif kind == "duplicate":
            layers.add().CopyFrom(layers[i])
            if rng.random() < 0.5:          # next to the original, as a copy-paste would
                items = list(layers)
                items.insert(i + 1, items.pop())
                self._replace(layers, items)
        elif kind == "swap":
            j = rng.randrange(len(layers))
            items = list(layers)
            items[i], items[j] = items[j], items[i]
            self._replace(layers, items)
            return "swap layers %d and %d" % (i, j)
        else:
            items = list(layers)
            items.insert(0, items.pop(i))
            self._replace(layers, items)
        return "%s layer %d (%s)" % (kind, i, name)

    @staticmethod
    def _replace(layers, items):
        copies = []
        for m in items:
            c = type(m)()
            c.CopyFrom(m)
            copies.append(c)
        del layers[:]
        for c in copies:
            layers.add().CopyFrom(c)

    def _pick_layer(self, p, want=None):
        layers = [l for l in _layers_of(p) if want is None or want(l)]
        return self.rng.choice(layers) if layers else None

    def _dim(self, p):
        rng = self.rng
        cands = [(m, fd, i) for m, fd, i in _walk_fields(p)
                 if fd.name in ("dim", "input_dim", "num", "channels", "height", "width", "batch_size",
                                "num_output", "input_dim")]
        if not cands:
            return None
        m, fd, i = rng.choice(cands)
        v = _numeric_value(rng, fd, DIMS)
        _set(m, fd, i, v)
        return "%s%s = %s" % (fd.name, "[%d]" % i if i is not None else "", v)

    def _kernel(self, p):
        rng = self.rng
        layer = self._pick_layer(p)
        if layer is None:
            return None
        cands = [(m, fd) for m, fd in _all_fields(layer) if fd.name in CONV_FIELDS
                 and fd.cpp_type in _INT_RANGES]
        if not cands:
            return None
        m, fd = rng.choice(cands)
        v = _numeric_value(rng, fd, CONV_VALUES)
        if fd.is_repeated:
            field = getattr(m, fd.name)
            if len(field) and rng.random() < 0.7:
                field[rng.randrange(len(field))] = v
            else:
                field.append(v)
        else:
            setattr(m, fd.name, v)
        return "layer %s: %s = %s" % (layer.name, fd.name, v)

    def _numeric(self, p):
        rng = self.rng
        layer = self._pick_layer(p)
        if layer is None:
            return None
        cands = [(m, fd) for m, fd in _all_fields(layer) if fd.cpp_type in (1, 2, 3, 4, 5, 6, 7)
                 and fd.containing_type.name != "NetStateRule"]
        if not cands:
            return None
        m, fd = rng.choice(cands)
        v = _numeric_value(rng, fd)
        if fd.is_repeated:
            field = getattr(m, fd.name)
            if len(field) and rng.random() < 0.7:
                field[rng.randrange(len(field))] = v
            else:
                field.append(v)
        else:
            setattr(m, fd.name, v)
        return "layer %s: %s.%s = %r" % (layer.name, fd.containing_type.name, fd.name, v)

    def _enum(self, p):
        rng = self.rng
        layer = self._pick_layer(p)
        if layer is None:
            return None
        cands = [(m, fd) for m, fd in _all_fields(layer) if fd.cpp_type == 8 and not fd.is_repeated]
        if not cands:
            return None
        m, fd = rng.choice(cands)
        v = _numeric_value(rng, fd)
        setattr(m, fd.name, v)
        return "layer %s: %s = %s" % (layer.name, fd.name, fd.enum_type.values_by_number[v].name)

    def _blob_op(self, p, field):
        rng = self.rng
        layer = self._pick_layer(p)
        if layer is None:
            return None
        blobs = getattr(layer, field)
        names = _blob_names(_layers_of(p))
        kind = rng.choice(["remove", "duplicate", "rename", "rename", "add"])
        if kind in ("remove", "duplicate", "rename") and not len(blobs):
            kind = "add"
        if kind == "remove":
            i = rng.randrange(len(blobs))
            del blobs[i]
            return "layer %s: remove %s %d" % (layer.name, field, i)
        if kind == "duplicate":
            i = rng.randrange(len(blobs))
            blobs.append(blobs[i])
            return "layer %s: duplicate %s %d" % (layer.name, field, i)
        new = rng.choice(names + ["nope", layer.name, ""])
        if kind == "rename":
            i = rng.randrange(len(blobs))
            blobs[i] = new
            return "layer %s: %s %d renamed %r" % (layer.name, field, i, new)
        blobs.append(new)
        return "layer %s: add %s %r" % (layer.name, field, new)

    def _bottom(self, p):
        return self._blob_op(p, "bottom")

    def _top(self, p):
        return self._blob_op(p, "top")

    def _type(self, p):
        layer = self._pick_layer(p, lambda l: hasattr(l, "input_param"))    # V2 layers: a string type
        if layer is None:
            return None
        new = self.rng.choice(self.types + ["Bogus", ""])
        old, layer.type = layer.type, new
        return "layer %s: type %s -> %s" % (layer.name, old, new)

    def _delete_field(self, p):
        rng = self.rng
        layer = self._pick_layer(p)
        if layer is None:
            return None
        cands = [(m, fd, i) for m, fd, i in _walk_fields(layer)]
        if not cands:
            return None
        m, fd, i = rng.choice(cands)
        if i is not None and rng.random() < 0.5:
            del getattr(m, fd.name)[i]
            return "layer %s: delete %s[%d]" % (layer.name, fd.name, i)
        m.ClearField(fd.name)
        return "layer %s: clear %s.%s" % (layer.name, m.DESCRIPTOR.name, fd.name)

    def _rule(self, p):
        rng = self.rng
        layer = self._pick_layer(p, lambda l: hasattr(l, "input_param"))
        if layer is None:
            return None
        kind = rng.choice(["include", "exclude", "propagate_down", "loss_weight", "param", "share", "blobs",
                           "force_backward"])
        if kind == "include":
            r = layer.include.add()
            r.phase = rng.choice([0, 1])
        elif kind == "exclude":
            r = layer.exclude.add()
            if rng.random() < 0.5:
                r.stage.append("deploy")
            else:
                r.min_level = 1
        elif kind == "propagate_down":
            layer.propagate_down.append(rng.random() < 0.5)
        elif kind == "loss_weight":
            layer.loss_weight.append(rng.choice([0.0, 1.0, -2.5, 1e30, float("nan")]))
        elif kind == "param":
            s = layer.param.add()
            s.lr_mult = rng.choice([0.0, 1.0, -1.0])
        elif kind == "share":
            s = layer.param.add()
            s.name = "shared_w"
            if rng.random() < 0.3:
                s.share_mode = 1
        elif kind == "blobs":
            b = layer.blobs.add()
            b.shape.dim.extend([rng.choice([0, 1, 2, 3])] * rng.randrange(1, 3))
            b.data.extend([1.0] * rng.randrange(0, 5))
        else:
            p.force_backward = True
        return "layer %s: add %s" % (layer.name, kind)

    # ------------------------------------------------------------------ text (tests/test_fuzz.py's)
    def _text(self, text):
        rng = self.rng
        lines = text.split("\n")
        op = rng.choice(["delete", "duplicate", "swap", "string", "number", "ident", "insert", "truncate",
                         "char"])
        pick = lambda: rng.randrange(max(1, len(lines)))  # noqa: E731
        if op == "delete" and lines:
            del lines[pick()]
        elif op == "duplicate" and lines:
            i = pick()
            lines.insert(i, lines[i])
        elif op == "swap" and lines:
            i, j = pick(), pick()
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "string":
            idx = [k for k, l in enumerate(lines) if '"' in l]
            if idx:
                k = rng.choice(idx)
                word = rng.choice(WORDS + re.findall(r'"([^"]*)"', text)[:50])
                lines[k] = re.sub(r'"[^"]*"', lambda m: '"%s"' % word, lines[k], count=1)
        elif op == "number":
            idx = [k for k, l in enumerate(lines) if re.search(r":\s*-?[\d.]", l)]
            if idx:
                k = rng.choice(idx)
                n = rng.choice(NUMBERS)
                lines[k] = re.sub(r"(:\s*)-?[\d.][\w.+-]*", lambda m: m.group(1) + n, lines[k], count=1)
        elif op == "ident":
            idx = [k for k, l in enumerate(lines) if re.search(r":\s*[A-Za-z_]", l)]
            if idx:
                k = rng.choice(idx)
                w = rng.choice(WORDS)
                lines[k] = re.sub(r"(:\s*)[A-Za-z_]\w*", lambda m: m.group(1) + w, lines[k], count=1)
        elif op == "insert":
            lines.insert(pick(), rng.choice(SNIPPETS))
        elif op == "truncate":
            return text[:rng.randrange(len(text) + 1)], op
        elif op == "char" and text:
            i = rng.randrange(len(text))
            return text[:i] + rng.choice(list('{}":#\n\\ -0aZ\x00\u00ff')) + text[i + 1:], op
        return "\n".join(lines), op


_PARSED = {}


def make_mutant(seed, index, seeds, types):
    """Mutant ``index`` of campaign ``seed``: a dict with everything needed to run it again."""
    from engine.core.io import parse_prototxt
    from engine.proto import caffe_pb2
    rng = random.Random("%s:%d" % (seed, index))
    name, text = seeds[rng.randrange(len(seeds))]
    if name not in _PARSED:
        _PARSED[name] = parse_prototxt(text, caffe_pb2.NetParameter)
    param = caffe_pb2.NetParameter()
    param.CopyFrom(_PARSED[name])
    mutated, ops = Mutator(rng, types).mutate(param)
    return {"index": index, "seed_net": name, "ops": ops, "text": mutated,
            "phase": rng.choice([0, 1]), "level": rng.choice([0, 0, 1]),
            "stages": rng.choice([[], [], ["deploy"], ["no-norm"]]),
            "inputs": rng.choice(["normal", "normal", "normal", "nan", "huge"]), "rng": rng.randrange(2 ** 31)}


# ---------------------------------------------------------------------------------------------- running one
def _engine_frame(tb):
    where = ("?", "?", 0, "")
    while tb is not None:
        code = tb.tb_frame.f_code
        fname = code.co_filename.replace(os.sep, "/")
        if "/engine/" in fname:
            obj = tb.tb_frame.f_locals.get("self")
            where = (fname.split("/engine/")[-1], code.co_name, tb.tb_lineno,
                     type(obj).__name__ if obj is not None else "")
        tb = tb.tb_next
    return where


def _fill_inputs(net, rng, mode):
    import numpy as np
    for name in net.inputs:
        blob = net.blobs[name]
        if blob.count == 0:
            continue
        if name.startswith("label") or name in ("sim", "y", "cont"):
            blob.data[...] = rng.integers(0, 2, blob.shape)
        elif mode == "nan":
            a = rng.normal(size=blob.shape)
            a.reshape(-1)[rng.integers(0, blob.count)] = np.nan
            blob.data[...] = a
        elif mode == "huge":
            blob.data[...] = rng.normal(size=blob.shape) * 1e37
        else:
            blob.data[...] = rng.normal(size=blob.shape)


def _batch_records(lp):
    """The records a data layer reads one by one for a batch (0 for other layers)."""
    return max([int(getattr(lp, f).batch_size) for f in _BATCH_FIELDS if lp.HasField(f)] or [0])


def _placed(e, path):
    """Whether an engine error's message says where: a layer, a blob or the file."""
    text = str(e)
    if any(getattr(e, a, None) is not None for a in ("layer", "blob", "line")):
        return True
    return bool(path and path in text) or re.search(r"'[^']+'", text) is not None


def run_mutant(m, folder):
    """Parse, Init, Forward (+ Backward) mutant ``m`` in this process: an outcome dict."""
    import numpy as np

    from engine.core.errors import CaffeError
    from engine.core.net import Net
    path = os.path.join(folder, "mutant.prototxt")
    with open(path, "wb") as f:
        f.write(m["text"].encode("utf-8", "surrogatepass"))
    out = {"outcome": "ok"}
    net = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            net = Net(path, m["phase"], level=m["level"], stages=m["stages"], allow_python=False)
            params = sum(b.count for l in net.layers for b in l.blobs)
            records = max([_batch_records(l.layer_param) for l in net.layers] or [0])
            if net.memory_used > MAX_RUN_ELEMENTS or params > MAX_RUN_PARAMS or records > MAX_RUN_RECORDS:
                out["outcome"] = "ok (Init only)"
            else:
                _fill_inputs(net, np.random.default_rng(m["rng"]), m["inputs"])
                net.forward()
                if any(net.layer_need_backward):
                    net.backward()
        except CaffeError as e:
            out["outcome"] = "engine " + type(e).__name__
            out["placed"] = _placed(e, path)
            out["message"] = str(e)[:500]
        except Exception as e:  # noqa: BLE001 - this is the point of the campaign
            f, fn, line, cls = _engine_frame(e.__traceback__)
            out.update(outcome="escape", type=type(e).__name__, message=str(e)[:500],
                       key="%s in %s:%s (line %d%s)" % (type(e).__name__, f, fn, line, ", " + cls if cls else ""),
                       traceback="".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:])
        finally:
            for layer in (net.layers if net is not None else []):
                close = getattr(layer, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:  # noqa: BLE001
                        pass
    warns = sorted({"%s (%s:%d)" % (w.message, os.path.basename(w.filename), w.lineno) for w in caught
                    if issubclass(w.category, RuntimeWarning)})
    if warns:
        out["warnings"] = warns[:5]
    return out


def _worker(conn, memory_gb, folder):
    """A worker process: mutants in, outcomes out, until the pipe closes."""
    import logging
    logging.disable(logging.CRITICAL)
    os.makedirs(folder, exist_ok=True)
    sys.path.insert(0, folder)
    if memory_gb:
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            with open("/proc/self/status") as f:
                vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
            cap = vm + int(memory_gb * (1 << 30))
            resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
        except (OSError, ValueError, StopIteration):
            pass
    while True:
        try:
            m = conn.recv()
        except EOFError:
            return
        if m is None:
            return
        conn.send(run_mutant(m, folder))


class Worker:
    def __init__(self, ctx, memory_gb, folder):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, memory_gb, folder), daemon=True)
        self.proc.start()
        child.close()
        self.job = None
        self.started = 0.0
        self.done = 0

    def send(self, m):
        self.job, self.started = m, time.monotonic()
        self.conn.send(m)

    def kill(self):
        try:
            self.proc.kill()
        except Exception:  # noqa: BLE001
            pass
        self.proc.join(10)
        self.conn.close()

    def stop(self):
        """End the worker; its exit code (not 0: it did not end cleanly)."""
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(60)
        if self.proc.is_alive():
            self.kill()
        return self.proc.exitcode


# ---------------------------------------------------------------------------------------------- a campaign
def prepare_seeds(raw, batch_small, batch_big, say):
    """Shrink every seed (batch; images where the net still builds) -> [(name, text)]."""
    from google.protobuf import text_format

    from engine.core.errors import CaffeError
    from engine.core.io import parse_prototxt
    from engine.core.net import Net
    from engine.proto import caffe_pb2
    out = []
    tmp = tempfile.mkdtemp(prefix="fuzz-seeds-")
    for name, text in raw:
        p = parse_prototxt(text, caffe_pb2.NetParameter)
        batch = batch_big if "/models/" in name else batch_small
        chosen = None
        for scale in ((4, 2, 1) if _has_big_images(p) else (1,)):
            q = caffe_pb2.NetParameter()
            q.CopyFrom(p)
            shrink(q, batch, scale)
            t = text_format.MessageToString(q)
            if scale == 1:
                chosen = t
                break
            path = os.path.join(tmp, "seed.prototxt")
            with open(path, "w") as f:
                f.write(t)
            try:
                Net(path, 1, allow_python=False)
                chosen = t
                say("seed %s: batch %d, images 1/%d" % (name, batch, scale))
                break
            except (CaffeError, MemoryError, ValueError, TypeError, IndexError, ZeroDivisionError):
                continue                # not at this size (an escape shows again in the campaign)
        out.append((name, chosen))
    return out


def campaign(args):
    import logging
    logging.disable(logging.CRITICAL)
    import engine
    seed = args.seed if args.seed is not None else random.randrange(2 ** 31)
    out_dir = args.out or os.path.join(tempfile.gettempdir(), "fuzz-%d" % seed)
    os.makedirs(out_dir, exist_ok=True)
    fixtures = os.path.join(out_dir, "fixtures")
    make_fixtures(fixtures)
    t0 = time.monotonic()

    def say(msg):
        print("[%7.0f s] %s" % (time.monotonic() - t0, msg), flush=True)

    raw = collect_seeds(fixtures, zoo=not args.no_zoo)
    say("seed %d: %d seed nets (%s), %d mutants, %d worker(s), timeout %.0f s, findings in %s"
        % (seed, len(raw), ", ".join(sorted({n.split("/")[0].split(":")[0] for n, _ in raw})),
           args.mutants, args.workers, args.timeout, out_dir))
    seeds = prepare_seeds(raw, args.batch, 1, say)
    types = engine.layer_type_list()
    if args.repro is not None:
        m = make_mutant(seed, args.repro, seeds, types)
        print("mutant %d of seed %d: net %s, ops %s, phase %d level %d stages %s inputs %s"
              % (m["index"], seed, m["seed_net"], m["ops"], m["phase"], m["level"], m["stages"], m["inputs"]))
        print(m["text"])
        path = os.path.join(out_dir, "repro-%d.prototxt" % args.repro)
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(m["text"])
        res = run_mutant(m, tempfile.mkdtemp(prefix="fuzz-run-"))
        print(res.pop("traceback", ""))
        print(json.dumps(res, indent=1))
        print("(written to %s)" % path)
        return 0 if res["outcome"] not in ("escape", "hang") else 1

    ctx = mp.get_context("spawn")       # a fresh interpreter: no BLAS threads or locks inherited
    workers = [Worker(ctx, args.memory_gb, os.path.join(out_dir, "w%d" % k)) for k in range(args.workers)]
    counts = collections.Counter()
    unplaced, escapes, hangs = [], [], []
    warn_keys = collections.Counter()
    next_index, finished = 0, 0
    last_report = time.monotonic()

    def record(w, res):
        m = w.job
        outcome = res["outcome"]
        counts[outcome] += 1
        for wk in res.get("warnings", []):
            warn_keys[wk] += 1
        if outcome.startswith("engine ") and not res.get("placed", True):
            counts["  of them unplaced"] += 1
            if len(unplaced) < 50:
                unplaced.append((m["index"], m["seed_net"], res["message"][:200]))
        if outcome in ("escape", "hang"):
            stem = os.path.join(out_dir, "%s-%05d" % (outcome, m["index"]))
            with open(stem + ".prototxt", "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(m["text"])
            info = {k: v for k, v in m.items() if k != "text"}
            info.update(res, campaign_seed=seed,
                        repro="python benchmarks/fuzz.py --seed %d --repro %d" % (seed, m["index"]))
            with open(stem + ".json", "w") as f:
                json.dump(info, f, indent=1)
            (escapes if outcome == "escape" else hangs).append((m, res, stem + ".prototxt"))
            say("%s: mutant %d (%s; %s): %s" % (outcome.upper(), m["index"], m["seed_net"], "; ".join(m["ops"]),
                                               res.get("key") or res.get("message", "")))

    try:
        while finished < args.mutants:
            for k, w in enumerate(workers):
                if w.job is None and next_index < args.mutants:
                    if w.done >= RECYCLE_EVERY:
                        code = w.stop()
                        if code != 0:
                            counts["unclean worker exits"] += 1
                            say("a worker ended with exit code %s after %d mutants (the last: %d)"
                                % (code, w.done, next_index - 1))
                        w = workers[k] = Worker(ctx, args.memory_gb, os.path.join(out_dir, "w%d" % k))
                    w.send(make_mutant(seed, next_index, seeds, types))
                    next_index += 1
            busy = [w for w in workers if w.job is not None]
            ready = wait_conns([w.conn for w in busy], timeout=1.0)
            now = time.monotonic()
            for k, w in enumerate(workers):
                if w.job is None:
                    continue
                if w.conn in ready:
                    try:
                        res = w.conn.recv()
                    except (EOFError, OSError):
                        w.proc.join(5)
                        res = {"outcome": "escape", "type": "crash",
                               "key": "worker died (exit code %s)" % w.proc.exitcode,
                               "message": "the worker process died (exit code %s, a negative one is the "
                                          "signal) while running the mutant" % w.proc.exitcode}
                        record(w, res)
                        finished += 1
                        w.kill()
                        workers[k] = Worker(ctx, args.memory_gb, os.path.join(out_dir, "w%d" % k))
                        continue
                    record(w, res)
                    w.job = None
                    w.done += 1
                    finished += 1
                elif now - w.started > args.timeout:
                    record(w, {"outcome": "hang", "message": "ran past %.0f s (killed)" % args.timeout,
                               "key": "hang"})
                    finished += 1
                    w.kill()
                    workers[k] = Worker(ctx, args.memory_gb, os.path.join(out_dir, "w%d" % k))
            if time.monotonic() - last_report > args.report_every:
                last_report = time.monotonic()
                say("%d/%d mutants: %s" % (finished, args.mutants, _counts_text(counts)))
    finally:
        for w in workers:
            w.stop()
    secs = time.monotonic() - t0
    lines = ["", "fuzz campaign: seed %d, %d mutants of %d seed nets in %.0f s (%d worker(s), timeout %.0f s)"
             % (seed, finished, len(seeds), secs, args.workers, args.timeout),
             "outcomes: " + _counts_text(counts),
             "escapes: %d, hangs: %d" % (len(escapes), len(hangs))]
    by_key = collections.Counter(res.get("key", "?") for _m, res, _p in escapes)
    for key, n in by_key.most_common():
        lines.append("  escape x%d: %s" % (n, key))
    for m, res, path in escapes + hangs:
        lines.append("  %s mutant %d (net %s; %s) -> %s" % (res["outcome"], m["index"], m["seed_net"],
                                                           "; ".join(m["ops"]), path))
    for idx, name, msg in unplaced:
        lines.append("  unplaced engine error: mutant %d (%s): %s" % (idx, name, msg))
    for wk, n in warn_keys.most_common(20):
        lines.append("  RuntimeWarning x%d: %s" % (n, wk))
    lines.append("findings in %s" % out_dir)
    print("\n".join(lines), flush=True)
    summary = {"seed": seed, "mutants": finished, "seed_nets": len(seeds), "seconds": secs,
               "outcomes": dict(counts), "escapes": len(escapes), "hangs": len(hangs),
               "escape_keys": dict(by_key), "out": out_dir}
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0 if not escapes and not hangs else 1


def run_saved(json_path):
    """Run the mutant an escape or hang left (``escape-NNNNN.json`` and ``.prototxt``) here,
    with the engine's log and the traceback shown."""
    with open(json_path) as f:
        m = json.load(f)
    with open(os.path.splitext(json_path)[0] + ".prototxt", encoding="utf-8", errors="surrogateescape") as f:
        m["text"] = f.read()
    print("mutant %s: net %s, ops %s" % (m.get("index"), m.get("seed_net"), m.get("ops")))
    res = run_mutant(m, tempfile.mkdtemp(prefix="fuzz-run-"))
    print(res.pop("traceback", ""))
    print(json.dumps(res, indent=1))
    return 0 if res["outcome"] not in ("escape", "hang") else 1


def _counts_text(counts):
    return ", ".join("%s %d" % kv for kv in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mutants", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=None, help="campaign seed (default: random, printed)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1: leave the CPU to others)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant before it counts as a hang")
    p.add_argument("--memory-gb", type=float, default=3.0,
                   help="address space a worker may add (a bigger ask is a MemoryError, not the OOM killer)")
    p.add_argument("--batch", type=int, default=2, help="batch of the small seed nets (the zoo's models: 1)")
    p.add_argument("--out", help="where escapes and hangs are written (default: $TMPDIR/fuzz-SEED)")
    p.add_argument("--json", help="write the summary here too")
    p.add_argument("--report-every", type=float, default=300.0, help="seconds between progress lines")
    p.add_argument("--no-zoo", action="store_true", help="without ../shared/zoo (examples and layer nets only)")
    p.add_argument("--repro", type=int, help="run mutant INDEX of --seed in this process and print it")
    p.add_argument("--run", help="run a saved mutant again (the .json an escape or hang left; its .prototxt "
                                 "beside it), in this process")
    args = p.parse_args(argv)
    if args.run:
        return run_saved(args.run)
    if args.repro is not None and args.seed is None:
        p.error("--repro needs the campaign's --seed")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")        # one core per worker
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())

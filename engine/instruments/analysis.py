"""Static analysis of a Net: params, FLOPs and MACCs, memory, per layer and in total.

``analyze_net(net)`` -> :class:`NetAnalysis` (plain dataclasses; ``to_dict()``
is JSON-serialisable).  Shapes are the blobs' current shapes (those of Init
unless the net was reshaped since).

FLOPs and MACCs (forward pass, one batch)
-----------------------------------------
A MACC is one multiply-accumulate; for the linear layers FLOPs = 2 × MACC plus
one add per output for the bias.  Element-wise work counts one FLOP per
element whatever the function (exp, tanh, pow: one each).  ``out`` is the
count of top 0, ``in`` the count of bottom 0, N × ... the blob dimensions.

==========================  =======================================  =========================================
type                        MACC                                     FLOPs
==========================  =======================================  =========================================
Convolution                 out × (C_in / group) × ∏kernel            2 × MACC (+ out with bias)
                            (= out × weight.count / C_out; dilation
                            changes where taps land, not how many)
Deconvolution               in × (C_out / group) × ∏kernel            2 × MACC (+ out with bias)
                            (= in × weight.count / C_in)
InnerProduct                M × K × N_out (M = count before axis,     2 × MACC (+ M × N_out with bias)
                            K = count from axis; transpose: same)
Embed                       0 (a lookup)                              M × N_out with bias, else 0
Pooling MAX / AVE / STOCH   0                                         out × kh × kw (global: kh × kw = H × W)
SPP                         0                                         Σ levels N × C × bins² × kh × kw
LRN ACROSS_CHANNELS         out × local_size                          out × (2 × local_size + 3)
LRN WITHIN_CHANNEL          out × local_size²                         out × (2 × local_size² + 3)
BatchNorm                   0                                         out × 2 (global stats) or × 5 (batch
                                                                      mean and variance too)
MVN                         0                                         out × 2 (mean only) or × 5 (variance)
Scale                       out with bias, else 0                     out (+ out with bias)
Bias                        0                                         out
Eltwise SUM                 out × K with coefficients, else 0         out × (K - 1) (+ out × K coefficients)
Eltwise PROD / MAX          0                                         out × (K - 1)
ReLU, PReLU, ELU, Sigmoid,  0                                         out (1 per element)
TanH, AbsVal, BNLL, Power,
Exp, Log, Threshold, Clip,
Swish, Dropout
Softmax                     0                                         in × 5 (max, subtract, exp, sum, divide)
SoftmaxWithLoss             0                                         in × 5 + outer count (the logs)
Euclidean / Hinge / Sigmoid 0                                         in × 3
CrossEntropy / Contrastive /
Infogain / MultinomialLog.
Accuracy, ArgMax            0                                         in (one comparison per element)
Reduction                   0                                         in (SUM, MEAN), in × 2 (ASUM, SUMSQ)
LSTMUnit                    0                                         out × 9 (3 sigmoids, 2 tanh, 3 mul, 1 add)
RNN / LSTM                  Σ of the unrolled net                    Σ of the unrolled net
Concat, Slice, Split,       0                                         0 (copies or views)
Flatten, Reshape, Crop,
Tile, Silence, Input, data
layers, BatchReindex,
Filter, Parameter, Im2col
Python and unknown types    0, ``counted = False``                   0
==========================  =======================================  =========================================

Memory
------
``top_data_bytes``: count × itemsize of every top, as net.cpp adds them up for
"Memory required for data" — in-place tops and tops that share their bottom's
data (Split, Flatten, Reshape) included — so ``Σ top_data_bytes ==
net.memory_used_bytes`` (checked: ``totals.reconciles``).  Of that,
``inplace_bytes`` are in-place tops and ``shared_top_bytes`` tops sharing a
bottom's data (Split and Flatten, which share when they run as in Caffe master,
and Reshape): what Caffe's number counts but never allocates;
``allocated_top_bytes`` is the rest.  Diffs: the same for top diffs (Split tops
have their own diff; in-place, Flatten and Reshape tops share it).  Params:
``param_data_bytes``/``param_diff_bytes`` of the blobs a layer owns;
``shared_param_bytes`` (data + diff) is what sharing a param by name saves.
Sizes are what the blobs need, not what is resident (memory is allocated when
first touched).  ``memory_bytes`` = ``top_data_bytes`` (Caffe's per-layer figure).
"""
import json
from dataclasses import asdict, dataclass, field
from typing import List

from engine.core.log import human_bytes, human_count  # noqa: F401  (the reports and the CLI use them from here)


@dataclass
class LayerAnalysis:
    index: int
    name: str
    type: str
    bottoms: List[str]
    tops: List[str]
    bottom_shapes: List[List[int]]
    top_shapes: List[List[int]]
    param_shapes: List[List[int]]
    params: int                  # elements of the layer's param blobs (shared ones included)
    params_owned: int            # ... not shared from another layer
    macc: int
    flops: int
    counted: bool                # False: FLOPs of this type are not modelled (0 given)
    formula: str
    top_data_bytes: int
    top_diff_bytes: int
    allocated_top_bytes: int
    inplace_bytes: int
    shared_top_bytes: int
    allocated_diff_bytes: int
    param_data_bytes: int
    param_diff_bytes: int
    shared_param_bytes: int
    memory_bytes: int
    need_backward: bool
    backward_reason: str = ""
    inplace_tops: List[str] = field(default_factory=list)
    shared_params: List[str] = field(default_factory=list)

    def to_dict(self):
        return asdict(self)


@dataclass
class NetAnalysis:
    name: str
    phase: str
    dtype: str
    itemsize: int
    layers: List[LayerAnalysis]
    totals: dict

    def layer(self, name):
        for l in self.layers:
            if l.name == name:
                return l
        return None

    def to_dict(self):
        return {"name": self.name, "phase": self.phase, "dtype": self.dtype, "itemsize": self.itemsize,
                "layers": [l.to_dict() for l in self.layers], "totals": dict(self.totals)}

    def to_json(self, **kw):
        return json.dumps(self.to_dict(), **kw)


# ---------------------------------------------------------------------- FLOPs
def layer_flops(layer, bottoms, tops, phase=None):
    """(macc, flops, counted, formula) of one layer with its bottom/top blobs: the layer
    class's own formula (``Layer.flops``)."""
    return layer.flops(bottoms, tops)


# ---------------------------------------------------------------------- the analysis
# totals[key] = Σ over the layers of LayerAnalysis.<field> (uncounted_layers: of not counted)
_SUMS = {"params": "params_owned", "params_all": "params", "macc": "macc", "flops": "flops",
         "uncounted_layers": None, "caffe_data_bytes": "top_data_bytes",
         "allocated_top_bytes": "allocated_top_bytes", "inplace_bytes": "inplace_bytes",
         "shared_top_bytes": "shared_top_bytes", "top_diff_bytes": "top_diff_bytes",
         "allocated_diff_bytes": "allocated_diff_bytes", "param_data_bytes": "param_data_bytes",
         "param_diff_bytes": "param_diff_bytes", "shared_param_bytes": "shared_param_bytes"}


def analyze_net(net):
    """Per-layer and total params, MACC/FLOPs and memory of ``net``."""
    names = net.blob_names
    rec = getattr(net, "init_record", None)
    seen = (set(), set())           # data and diff memories met so far (net inputs never count)
    layers = []
    bottom_vecs, top_vecs = net.bottom_vecs, net.top_vecs            # each property builds a list: once
    bottom_id_vecs, top_id_vecs = net.bottom_id_vecs, net.top_id_vecs
    layer_names, need_backward = net.layer_names, net.layer_need_backward
    params = (net.param_id_vecs, net.param_owners, net.param_display_names)
    for i, layer in enumerate(net.layers):
        bottoms, tops = bottom_vecs[i], top_vecs[i]
        top_names = [names[t] for t in top_id_vecs[i]]
        macc, flops, counted, formula = layer_flops(layer, bottoms, tops, net.phase)
        top_mem, inplace_tops = _top_memory(layer, bottoms, tops, top_names, net.dtype.itemsize, seen)
        param_mem, shared_names = _param_memory(net, i, layer, params)
        layers.append(LayerAnalysis(
            index=i, name=layer_names[i], type=layer.type, bottoms=[names[b] for b in bottom_id_vecs[i]],
            tops=top_names, bottom_shapes=[list(b.shape) for b in bottoms], top_shapes=[list(t.shape) for t in tops],
            param_shapes=[list(p.shape) for p in layer.blobs], macc=int(macc), flops=int(flops),
            counted=bool(counted), formula=formula, memory_bytes=top_mem["top_data_bytes"],
            need_backward=bool(need_backward[i]),
            backward_reason=rec.backward[i].detail if rec is not None and i < len(rec.backward) else "",
            inplace_tops=inplace_tops, shared_params=shared_names, **top_mem, **param_mem))
    return NetAnalysis(net.name, "TRAIN" if net.phase == 0 else "TEST", str(net.dtype),
                       int(net.dtype.itemsize), layers, _totals(net, layers))


def _top_memory(layer, bottoms, tops, top_names, itemsize, seen):
    """The top_* / allocated_* / inplace / shared_top byte counts of a layer's tops (as
    LayerAnalysis fields) and the names of its in-place tops. ``seen``: the (data, diff)
    memories counted so far, updated."""
    seen_data, seen_diff = seen
    top_bytes = alloc = inplace = shared_top = alloc_diff = 0
    inplace_tops = []
    bottom_objs = {id(b) for b in bottoms}
    # Split (data) and Flatten (data and diff) share their bottom's memory when they
    # run (Caffe master's Forward / Backward); Reshape from Reshape on: identity tells.
    shares = layer.shares_data_on_run and bool(bottoms)
    shares_diff = layer.shares_diff_on_run and bool(bottoms)
    for top, name in zip(tops, top_names):
        nb = top.count * itemsize
        top_bytes += nb
        if id(top) in bottom_objs:
            inplace += nb
            inplace_tops.append(name)
        elif shares or id(top.data_memory) in seen_data:
            shared_top += nb
        else:
            alloc += nb
            seen_data.add(id(top.data_memory))
        if not shares_diff and id(top.diff_memory) not in seen_diff:
            alloc_diff += nb
            seen_diff.add(id(top.diff_memory))
    sizes = dict(top_data_bytes=top_bytes, top_diff_bytes=top_bytes, allocated_top_bytes=alloc,
                 inplace_bytes=inplace, shared_top_bytes=shared_top, allocated_diff_bytes=alloc_diff)
    return {k: int(v) for k, v in sizes.items()}, inplace_tops


def _param_memory(net, i, layer, params=None):
    """The params / params_owned counts and param_* byte counts of layer ``i``'s param
    blobs (as LayerAnalysis fields), and the display names of those it shares from
    another layer (they count in shared_param_bytes, data and diff).  ``params``: the
    net's (param_id_vecs, param_owners, param_display_names), taken once per net (each
    property copies its lists: per layer, ResNet-152's analysis spent a second on them)."""
    itemsize = net.dtype.itemsize
    id_vecs, owners, display_names = params or (net.param_id_vecs, net.param_owners, net.param_display_names)
    pids = id_vecs[i]
    params = owned = shared = 0
    shared_names = []
    for k, blob in enumerate(layer.blobs):
        params += blob.count
        pid = pids[k] if k < len(pids) else -1
        if pid >= 0 and owners[pid] >= 0:
            shared += 2 * blob.count * itemsize
            shared_names.append(display_names[pid])
        else:
            owned += blob.count
    counts = dict(params=params, params_owned=owned, param_data_bytes=owned * itemsize,
                  param_diff_bytes=owned * itemsize, shared_param_bytes=shared)
    return {k: int(v) for k, v in counts.items()}, shared_names


def _totals(net, layers):
    """The sums over the layers, the net's own "Memory required for data", whether they
    reconcile, and the bytes allocated in all."""
    totals = {key: sum((getattr(la, field) if field else not la.counted) for la in layers)
              for key, field in _SUMS.items()}
    totals["memory_used_bytes"] = int(net.memory_used_bytes)
    totals["reconciles"] = (totals["caffe_data_bytes"] == totals["memory_used_bytes"] and
                            totals["caffe_data_bytes"] == totals["allocated_top_bytes"] +
                            totals["inplace_bytes"] + totals["shared_top_bytes"])
    totals["total_allocated_bytes"] = (totals["allocated_top_bytes"] + totals["allocated_diff_bytes"] +
                                       totals["param_data_bytes"] + totals["param_diff_bytes"])
    return totals


analyse_net = analyze_net


# ---------------------------------------------------------------------- Caffe's own buffers
def _prod(xs):
    n = 1
    for x in xs:
        n *= int(x)
    return n


def _conv_workspace(layer, bottoms, tops, item):
    """BaseConvolutionLayer: col_buffer_ (one image's columns; untouched for 1x1, which
    Caffe runs without im2col) and bias_multiplier_ (the output's spatial size)."""
    if not bottoms or not tops or not layer.blobs:
        return 0
    col_spatial = _prod(layer.bottom_spatial if layer.reverse_dimensions else layer.output_shape)
    out_spatial = _prod(layer.output_shape)
    cols = 0 if layer.is_1x1 else layer.kernel_dim * layer.group * col_spatial
    return (cols + (out_spatial if layer.bias_term else 0)) * item


def _layer_workspace(layer, bottoms, tops, phase, item):
    t = layer.type
    b = bottoms[0].count if bottoms else 0
    top = tops[0].count if tops else 0
    if t in ("Convolution", "Deconvolution"):
        return _conv_workspace(layer, bottoms, tops, item)
    if t == "InnerProduct":
        return (bottoms[0].count_range(0, getattr(layer, "axis", 1)) if layer.bias_term else 0) * item
    if t == "Pooling":
        from engine.proto import caffe_pb2
        pp = layer.layer_param.pooling_param
        if pp.pool == caffe_pb2.PoolingParameter.MAX and len(tops) == 1:
            return top * 4                                   # max_idx_ (int)
        if pp.pool == caffe_pb2.PoolingParameter.STOCHASTIC and phase == 0:
            return top * item                                # rand_idx_
        return 0
    if t == "LRN":
        from engine.proto import caffe_pb2
        if layer.layer_param.lrn_param.norm_region == caffe_pb2.LRNParameter.ACROSS_CHANNELS:
            return b * item                                  # scale_
        return 6 * b * item          # WITHIN_CHANNEL: square, pool and power outputs, data and diff
    if t == "BatchNorm":
        return 2 * b * item          # x_norm_ and temp_ (mean_, variance_, multipliers: small)
    if t == "Scale":
        return b * item if bottoms and tops and bottoms[0] is tops[0] else 0   # temp_ (in-place)
    if t == "SoftmaxWithLoss":
        return b * item                                      # prob_
    if t in ("EuclideanLoss", "SigmoidCrossEntropyLoss"):
        return b * item                                      # diff_ / sigmoid_output_
    if t == "Dropout":
        return b * 4 if phase == 0 else 0                    # rand_vec_ (unsigned int)
    if t == "Eltwise":
        from engine.proto import caffe_pb2
        return top * 4 if layer.layer_param.eltwise_param.operation == caffe_pb2.EltwiseParameter.MAX else 0
    if t == "ContrastiveLoss":
        return 2 * b * item                                  # diff_, diff_sq_
    return 0


def caffe_workspace_bytes(net):
    """{layer name: bytes} of the buffers BVLC Caffe 1.0's layers keep besides their
    tops and params on the CPU (col_buffer_, max_idx_, BatchNorm's x_norm_ and temp_,
    an in-place Scale's temp_, prob_, rand_vec_, ...), as allocated by a forward and
    backward pass: what "Caffe's memory" adds to the blobs'.  Small vectors
    (multipliers, per-channel means) are left out."""
    item = net.dtype.itemsize
    out = {}
    names, bottom_vecs, top_vecs = net.layer_names, net.bottom_vecs, net.top_vecs
    for i, layer in enumerate(net.layers):
        n = _layer_workspace(layer, bottom_vecs[i], top_vecs[i], net.phase, item)
        if n:
            out[names[i]] = int(n)
    return out

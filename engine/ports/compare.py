"""The port debugger: a Caffe net against anyone's port of it, blob by blob.

A port is an ONNX model (:class:`engine.ports.onnx_port.OnnxPort`) or any
:class:`engine.ports.port_graph.PortGraph` (a torch graph, a runtime's tensor dump).

    result = compare_port(net, "port.onnx")                 # seeded normal inputs
    result = compare_port(net, onnx_bytes, {"data": x})     # the inspector: bytes or a path
    result.faithful, result.first_departing, result.diagnosis
    print(result.format())

1. **Matching.** Every value the net computes (a layer's top as that layer wrote it; an
   in-place chain gives a blob several values) is paired with a tensor of the port: by
   name first (an ONNX tensor named as the blob; within an in-place chain, the value whose
   layer type fits the ONNX node that made the tensor; or named as the in-place layer),
   then by topology and shape: walking from the inputs, a tensor computed from the tensors
   paired with the value's nearest paired ancestors, feeding no tensor paired with a value
   that does not depend on it, of the value's shape, made by a node that fits the layer type
   (among several, one equal to the engine's value, else the first in the port's order).
   A name is a hint, the value decides: a name-paired tensor holding a later value of its
   chain (a BatchNorm+Scale fused under the BatchNorm's name) goes to that value.  An input
   the port takes in another layout (NHWC, H x W x C without batch) is fed transposed.
   Each row says how it was paired (``input``, ``name``, ``topology``) or that it was not.
2. **Both run on the same input**: the engine's Forward one layer at a time (each top kept
   as its layer left it) and onnxruntime (CPU, graph optimisations off: the port's
   arithmetic as its graph states it) with every intermediate tensor exposed as an output.
   The end-to-end divergence of a value is ``max |port - engine|`` and that relative to the
   value's scale (``max |engine|``).
3. **First departing layer.** For each paired value, the port's sub-graph between the
   tensors paired with its nearest paired ancestors and its own tensor is cut out and run
   on the *engine's* values of those ancestors: the layer's own arithmetic, fed Caffe's own
   inputs (the layers of a value the port fused away are checked together with the next
   paired one).  The first layer, in Caffe's order, whose own result departs by more than
   ``rtol`` relative (or whose output shape differs) is the first departing layer: a
   BatchNorm bug is found at the first BatchNorm, not where the drift adds up.  An own
   error under ``rtol`` is judged against the layer's own float32 rounding (Caffe's layers
   rebuilt in float64 on the same inputs): far above it, it is a finding (``small``).
4. **Diagnosis.** Known causes are tested, each by recomputing Caffe's layer the way the
   suspected bug would and checking it reproduces the port (the engine's own layer code
   with the parameter changed, on the same inputs): BatchNorm's variance divided by
   (scale factor + eps), the scale factor ignored, another eps; pooling output off by one
   (ceil vs floor, Caffe's last-window rule); AVE pooling differing only on the border
   (the divisor counts padding differently); LRN's alpha off by local_size; Crop offsets;
   channels BGR vs RGB, a mean or scale not applied (the first layer is rerun on the input
   transformed); Softmax on another axis; a constant factor (Dropout's or Power's scale);
   kernels flipped, transposed or in another layout; weights reshaped instead of
   transposed; the BatchNorm+Scale split; ... (the table in docs/port-debugging.md); else
   "no known cause" with the first differing elements.  A cause at several layers of a type
   is one line: "every BatchNorm (53 of 53): ...".

The result is plain data (:meth:`PortComparison.to_dict`), the ``port_comparison``
section of a report (docs/report-schema.md).
"""
import io
import os
from collections import ChainMap
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from engine.ports.activations import PortError, relative, run, set_inputs, trace
from engine.ports.onnx_port import OnnxPort, load_onnx, one_line
from engine.ports.port_graph import PortGraph

DEFAULT_RTOL = 1e-4

# A layer's own error (under rtol) is a finding when the port's result is off Caffe's layer
# evaluated in float64 by ROUNDING_FACTOR times Caffe's own float32 result is, and by at least
# ROUNDING_FLOOR relative: a systematic error, not another order of float32 rounding.
# Layers computing exp, log or pow round differently in every library (a few ulps, more on
# large inputs): for them the factor and the floor are TRANSCENDENTAL_FACTOR and _FLOOR.
ROUNDING_FACTOR = 10.0
ROUNDING_FLOOR = 1e-6
TRANSCENDENTAL = {"LRN", "Softmax", "ELU", "Sigmoid", "TanH", "Power", "Exp", "Log", "BNLL", "Swish"}
TRANSCENDENTAL_FACTOR = 50.0
TRANSCENDENTAL_FLOOR = 1e-5
F32_EPS = float(np.finfo(np.float32).eps) / 2

# float32 rounding of a layer's own arithmetic, relative to its output's scale: an error
# over this (and under rtol) is "small"; it departs only when a known cause reproduces it.
ROUNDING = {
    "BatchNorm": 2e-6, "Scale": 2e-6, "Bias": 2e-6, "ReLU": 1e-6, "PReLU": 1e-6, "Dropout": 1e-6,
    "Split": 1e-6, "Concat": 1e-6, "Slice": 1e-6, "Flatten": 1e-6, "Reshape": 1e-6, "Crop": 1e-6,
    "Eltwise": 2e-6, "Power": 1e-5, "Softmax": 1e-5, "LRN": 1e-5, "Pooling": 1e-5, "ELU": 1e-5,
    "Sigmoid": 1e-5, "TanH": 1e-5,
}

# ONNX ops whose output can be a Caffe layer type's top (the last op of its lowering).
ANY = None
COMPAT: Dict[str, Optional[set]] = {
    "Convolution": {"Conv", "Add", "ConvInteger", "QLinearConv", "Reshape", "Identity", "Cast"},
    "Deconvolution": {"ConvTranspose", "Add", "Slice", "Pad", "Identity"},
    "Pooling": {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "LpPool", "Mul", "Div", "Slice",
                "ReduceMean", "ReduceMax", "Identity", "Pad"},
    "LRN": {"LRN", "Div", "Mul", "Pow"},
    "ReLU": {"Relu", "LeakyRelu", "Max", "PRelu", "Clip", "Where", "Mul", "Add"},
    "PReLU": {"PRelu", "LeakyRelu", "Where", "Add", "Max"},
    "ELU": {"Elu", "Where", "Add"}, "Sigmoid": {"Sigmoid", "HardSigmoid"}, "TanH": {"Tanh"},
    "BatchNorm": {"BatchNormalization", "Mul", "Add", "Div", "Sub", "InstanceNormalization"},
    "Scale": {"Mul", "Add", "BatchNormalization"}, "Bias": {"Add"},
    "Eltwise": {"Add", "Mul", "Max", "Sum", "Sub"},
    "Concat": {"Concat"}, "Slice": {"Slice", "Split"}, "Flatten": {"Flatten", "Reshape", "Identity"},
    "Reshape": {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"},
    "InnerProduct": {"Gemm", "MatMul", "Add", "Reshape", "Flatten"},
    "Softmax": {"Softmax", "Transpose", "Reshape", "Div", "Exp"},
    "Dropout": {"Dropout", "Identity", "Mul"}, "Crop": {"Slice", "Crop"},
    "Power": {"Pow", "Mul", "Add", "Identity", "Sub", "Div"}, "AbsVal": {"Abs"}, "Exp": {"Exp", "Pow", "Mul"},
    "Log": {"Log", "Mul", "Div"}, "BNLL": {"Softplus", "Log", "Add", "Where"},
}

# the ops a layer type is usually lowered to, its top made by the last of them
PRIMARY = {
    "Convolution": {"Conv", "Add"}, "Deconvolution": {"ConvTranspose", "Add"},
    "Pooling": {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"}, "LRN": {"LRN", "Div"},
    "ReLU": {"Relu", "LeakyRelu"}, "PReLU": {"PRelu"}, "ELU": {"Elu"}, "Sigmoid": {"Sigmoid"}, "TanH": {"Tanh"},
    "BatchNorm": {"BatchNormalization", "Div"}, "Scale": {"Mul", "Add"}, "Bias": {"Add"},
    "Eltwise": {"Add", "Mul", "Max", "Sum"}, "Concat": {"Concat"}, "Slice": {"Slice", "Split"},
    "Flatten": {"Flatten", "Reshape"}, "Reshape": {"Reshape"}, "InnerProduct": {"Gemm", "MatMul", "Add"},
    "Softmax": {"Softmax"}, "Dropout": {"Dropout", "Identity"}, "Crop": {"Slice", "Crop"},
    "Power": {"Pow", "Mul", "Add"}, "AbsVal": {"Abs"}, "Exp": {"Exp"}, "Log": {"Log"}, "BNLL": {"Softplus"},
}

# ops that only these layer types are lowered to: a port's part for a value computed by none
# of them cannot contain one
WEIGHTY_OPS = {
    "Conv": {"Convolution", "Pooling", "LRN", "InnerProduct"}, "ConvTranspose": {"Deconvolution"},
    "Gemm": {"InnerProduct", "Convolution"}, "MatMul": {"InnerProduct", "Convolution"}, "MaxPool": {"Pooling"},
    "AveragePool": {"Pooling", "LRN"},
    "GlobalMaxPool": {"Pooling"}, "GlobalAveragePool": {"Pooling"}, "LRN": {"LRN"}, "Softmax": {"Softmax"},
}

# bottoms a layer reads only the shape of (a port need not depend on them)
SHAPE_ONLY_BOTTOMS = {"Crop": (1,)}


# ---------------------------------------------------------------------- result
@dataclass
class PortRow:
    """One value the net computes, and the port's tensor paired with it."""
    label: str                 # blob, or blob@layer for a value a later in-place layer overwrote
    blob: str
    layer: str
    layer_index: int
    type: str
    shape: List[int]
    tensor: Optional[str] = None
    tensor_shape: Optional[List[int]] = None
    matched: Optional[str] = None          # "input", "name", "topology" or None
    max_abs: Optional[float] = None        # end to end: port vs engine on the same input
    rel: Optional[float] = None
    own_max_abs: Optional[float] = None    # the layer's own arithmetic, fed the engine's inputs
    own_rel: Optional[float] = None
    group: List[str] = field(default_factory=list)   # the layers that own check covers
    note: str = ""                         # how the pairing or the check was made, where unusual
    rounding: Optional[float] = None       # Caffe's own float32 rounding of the layer (vs float64), relative
    over_rounding: Optional[float] = None  # the port's own error vs float64, in units of that rounding
    status: str = "unmatched"              # input, ok, small, departs, shape, unchecked, unmatched


@dataclass
class Diagnosis:
    layer: str
    kind: str                  # e.g. "batchnorm_scale_factor_eps", "pool_ceil_floor", "bgr_rgb"
    text: str                  # one line: what the fingerprint is and what it means
    evidence: Dict[str, Any] = field(default_factory=dict)

    def line(self):
        """"layer: text", or the text alone for a line covering several layers (it says which:
        "every BatchNorm (53 of 53): ...")."""
        return self.text if self.layer.startswith("(") else "%s: %s" % (self.layer, self.text)


@dataclass
class PortComparison:
    net: str
    port: str
    rtol: float
    rows: List[PortRow]
    faithful: bool
    first_departing: Optional[str]            # a layer name
    first_departing_label: Optional[str]      # the value (row label) where it was seen
    diagnosis: List[Diagnosis]
    matching: Dict[str, int]
    unmatched_tensors: List[str]
    outputs: List[Dict[str, Any]]
    notes: List[str] = field(default_factory=list)
    message: str = ""
    input_layouts: List[Dict[str, Any]] = field(default_factory=list)   # inputs transposed for the port
    proves_nothing: bool = False     # every compared value constant (a net without weights): no evidence
    reference: str = "net"           # which side is right: the Caffe net ("net") or the port ("port":
                                     # a Caffe net converted from it, compare-port --reference torch)

    def row(self, label):
        for r in self.rows:
            if r.label == label or (r.blob == label and r.label == r.blob):
                return r
        raise KeyError(label)

    def diagnosis_for(self, layer):
        """The diagnosis naming ``layer`` (itself, or a line covering several layers), or None."""
        for d in self.diagnosis:
            if d.layer == layer or layer in (d.evidence.get("layers") or ()):
                return d
        return None

    def by_layer(self):
        """{layer: {"rel", "own_rel", "status"}}: the largest end-to-end and own divergence of
        the values each layer wrote, and its worst status -- what colours a graph of the net."""
        rank = {s: k for k, s in enumerate(("input", "ok", "unmatched", "unchecked", "small", "not run", "shape",
                                            "departs"))}
        out: Dict[str, Dict[str, Any]] = {}
        for r in self.rows:
            d = out.setdefault(r.layer, {"rel": None, "own_rel": None, "status": r.status})
            for k in ("rel", "own_rel"):
                v = getattr(r, k)
                if v is not None and (d[k] is None or v > d[k]):
                    d[k] = v
            if rank.get(r.status, 0) > rank.get(d["status"], 0):
                d["status"] = r.status
        return out

    def to_dict(self):
        d = asdict(self)
        d["schema"] = "engine-port-comparison"
        d["layers"] = self.by_layer()
        return d

    def format(self, limit=None):
        """The table, the matching summary, the first departing layer and the diagnosis."""
        out = io.StringIO()
        w = out.write
        if self.reference == "port":
            w("Net %s (converted) vs its reference %s (rtol %g)\n" % (self.net, self.port, self.rtol))
        else:
            w("Port %s vs net %s (rtol %g)\n" % (self.port, self.net, self.rtol))
        for lay in self.input_layouts:
            w("Input layout: %s\n" % lay["text"])
        head = ("layer", "type", "value", "shape", "port tensor (how)", "own rel", "end-to-end rel", "status")
        rows = self.rows
        shown = rows
        if limit is not None and len(rows) > limit:
            bad = [r for r in rows if r.status in ("departs", "shape", "small")]
            shown = rows[:limit] + [r for r in bad if r not in rows[:limit]]
        cells = [head]
        for r in shown:
            how = "-" if r.tensor is None else "%s (%s%s)" % (r.tensor, r.matched, "; covers " + "+".join(r.group)
                                                              if len(r.group) > 1 else "")
            if r.tensor_shape is not None and list(r.tensor_shape) != list(r.shape):
                how += " shape %s" % _shape(r.tensor_shape)
            cells.append((r.layer, r.type, r.label, _shape(r.shape), how, _num(r.own_rel), _num(r.rel), r.status))
        widths = [min(max(len(c[k]) for c in cells), 48) for k in range(len(head))]
        for c in cells:
            w("  ".join(str(x)[:48].ljust(widths[k]) for k, x in enumerate(c)).rstrip() + "\n")
        if len(shown) < len(rows):
            w("... %d more rows (--all shows every row)\n" % (len(rows) - len(shown)))
        m = self.matching
        covered = m.get("covered", 0)
        w("\nMatched %d of %d values: %d input, %d by name, %d by topology and shape; %d not matched%s%s\n" % (
            m["input"] + m["name"] + m["topology"], m["values"], m["input"], m["name"], m["topology"], m["unmatched"],
            (", %s inside a fused node's check (the port has no tensor for them)" % (
                "all" if covered == m["unmatched"] else covered)) if covered else "",
            (" (%s)" % ", ".join(r.label for r in rows if r.matched is None)[:300]) if m["unmatched"] else ""))
        noted = [r for r in rows if r.note]
        for r in noted[:12]:
            w("  %s: %s\n" % (r.label, r.note))
        if len(noted) > 12:
            w("  ... %d more rows with a note (--json has them all)\n" % (len(noted) - 12))
        if self.unmatched_tensors:
            w("Port tensors matched to no value: %d (%s)\n" % (len(self.unmatched_tensors),
                                                              ", ".join(self.unmatched_tensors[:12]) +
                                                              (", ..." if len(self.unmatched_tensors) > 12 else "")))
        for o in self.outputs:
            w("Output %s: %s\n" % (o["blob"], "not matched" if o.get("tensor") is None else
                                   "port tensor %s, max abs %s, rel %s" % (o["tensor"], _num(o["max_abs"]),
                                                                         _num(o["rel"]))))
        for n in self.notes:
            w("Note: %s\n" % n)
        w("\n%s\n" % self.message)
        if self.diagnosis:
            w("Diagnosis:\n")
            for d in self.diagnosis:
                w("  %s\n" % d.line())
        return out.getvalue()


def _shape(s):
    return "x".join(str(int(d)) for d in s) if s is not None else "-"


def _num(v):
    if v is None:
        return "-"
    if v == 0:
        return "0"
    return "%.3g" % v


# ---------------------------------------------------------------------- preprocessing
@dataclass
class Preprocess:
    """caffe.io-style preprocessing of the input (what ``--mean-value`` etc. say): ``transform``
    turns a raw input (an image path or array) into the net's input; the rest are hints the
    diagnosis uses (a port that applies the mean or scale itself, or not at all)."""
    mean: Optional[Any] = None            # per channel (C,) or (C, H, W), in the net's channel order
    raw_scale: Optional[float] = None
    input_scale: Optional[float] = None
    channel_swap: Optional[Sequence[int]] = None
    input_size: Optional[Tuple[int, int]] = None
    transform: Optional[Callable[[Any], np.ndarray]] = None


# ---------------------------------------------------------------------- the comparison
def compare_port(net, port, inputs=None, preprocess=None, rtol=DEFAULT_RTOL, seed=0):
    """Compare ``net`` (an engine Net, TEST phase for a deploy net) with a port of it.

    ``port``: an ONNX model (a path, the file's bytes, or an ``onnx.ModelProto``) or any
    :class:`~engine.ports.port_graph.PortGraph` (a torch graph, a tensor dump).  ``inputs``: None
    (seeded normal values), an array (the first input), or {input blob: array, .npy path,
    or -- with ``preprocess.transform`` -- an image path}.  ``preprocess``: a
    :class:`Preprocess` (or a dict of its fields, or a callable raw -> array).
    Returns a :class:`PortComparison`."""
    if preprocess is not None and not isinstance(preprocess, Preprocess):
        preprocess = Preprocess(transform=preprocess) if callable(preprocess) else Preprocess(**dict(preprocess))
    if not isinstance(port, PortGraph):
        port = OnnxPort(*load_onnx(port))
    return _Comparer(net, port, inputs, preprocess, float(rtol), seed).run()


class _Comparer:
    def __init__(self, net, port, inputs, preprocess, rtol, seed):
        self.net, self.port, self.rtol, self.seed = net, port, rtol, seed
        self.pre = preprocess
        self.raw_inputs = inputs
        self.notes: List[str] = []
        self._own_cache: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}

    # -------------------------------------------------------------- inputs
    def _input_pairs(self):
        """{net input blob: port input name}: by name, then in order."""
        net_in = list(self.net.inputs)
        if not net_in:
            raise PortError("the net has no inputs (Input layers) to feed; compare-port needs a deploy net")
        pairs = {n: n for n in net_in if n in self.port.inputs}
        rest = [p for p in self.port.inputs if p not in pairs.values()]
        for n in net_in:
            if n not in pairs and rest:
                pairs[n] = rest.pop(0)
        return pairs

    def _feeds(self, pairs):
        raw = self.raw_inputs
        if raw is not None and not isinstance(raw, dict):
            raw = {self.net.inputs[0]: raw}
        raw = dict(raw or {})
        for k in raw:
            if k not in self.net.inputs:
                raise PortError("no input blob '%s' in the net (its inputs: %s)" % (k, ", ".join(self.net.inputs)),
                                blob=k)
        rng = np.random.default_rng(self.seed)
        feeds = {}
        for name in self.net.inputs:
            shape = tuple(self.net.blobs[name].shape)
            pshape = self.port.input_shape(pairs[name]) if name in pairs else None
            if pshape is not None and len(pshape) == len(shape) and pshape[0] is not None and pshape[0] != shape[0] \
                    and _layout(pshape[1:], shape[1:]) is not False:
                shape = (pshape[0],) + shape[1:]
                self.notes.append("input '%s' batch set to the port's %d" % (name, pshape[0]))
            elif pshape is not None and len(pshape) == len(shape) - 1 and shape[0] != 1 and len(shape) > 1 \
                    and _layout(pshape, shape[1:]) is not False:
                shape = (1,) + shape[1:]
                self.notes.append("input '%s' batch set to 1: the port's input '%s' has no batch axis" % (
                    name, pairs[name]))
            if name in raw:
                feeds[name] = self._load_input(name, raw[name], shape)
            else:
                feeds[name] = rng.standard_normal(shape).astype(np.float32)
        return feeds

    def _load_input(self, name, value, shape):
        if isinstance(value, (str, os.PathLike)):
            path = os.fspath(value)
            if path.lower().endswith(".npy"):
                try:
                    value = np.load(path)
                except (OSError, ValueError) as e:
                    raise PortError("%s: cannot read the input array: %s" % (path, one_line(e)), blob=name) from None
            elif self.pre is not None and self.pre.transform is not None:
                value = self.pre.transform(path)
            else:
                raise PortError("%s: an image input needs preprocessing options (caffe.io-style: mean, scale, "
                                "channel swap, input size)" % path, blob=name)
        elif self.pre is not None and self.pre.transform is not None and np.asarray(value).ndim == 3 \
                and np.asarray(value).shape[-1] in (1, 3, 4):
            value = self.pre.transform(value)
        arr = np.asarray(value, dtype=np.float32)
        if arr.ndim == len(shape) - 1:
            arr = arr[None]
        if arr.ndim != len(shape) or tuple(arr.shape[1:]) != tuple(shape[1:]):
            raise PortError("input '%s': got an array of shape %s, the net takes %s" % (
                name, _shape(arr.shape), _shape(shape)), blob=name)
        return arr

    # -------------------------------------------------------------- run
    def run(self):
        net, port = self.net, self.port
        pairs = self._input_pairs()
        feeds = self._feeds(pairs)
        set_inputs(net, feeds)
        self.tr = tr = trace(net)
        self.values = run(net, tr)
        self.cafanc = tr.ancestors()
        self.data_anc = tr.ancestors(SHAPE_ONLY_BOTTOMS)
        port_feeds = {}
        self.layout: Dict[int, Tuple[str, Optional[Tuple[int, ...]], bool]] = {}
        self.input_layouts: List[Dict[str, Any]] = []
        for name, pname in pairs.items():
            a = tr.inputs[name]
            v = self.values[a]
            want = port.input_shape(pname)
            lay = _layout(want, v.shape)
            if lay is False:
                raise PortError("the port's input '%s' is %s, the net's input '%s' is %s: not the same size in "
                                "any layout (give --input-size, or a port of this net)" % (
                                    pname, "x".join("?" if d is None else str(d) for d in want), name,
                                    _shape(v.shape)), blob=name)
            if lay is not None:
                self.layout[a] = lay
                pv = self._to_port(a, v)
                self.input_layouts.append({
                    "blob": name, "tensor": pname, "layout": lay[0], "axes": list(lay[1]) if lay[1] is not None
                    else None, "dropped_batch": lay[2], "shape": list(pv.shape),
                    "text": "the net's input '%s' (%s) is fed to the port's '%s' as %s (%s)" % (
                        name, _shape(v.shape), pname, _shape(pv.shape), _layout_text(lay))})
            port_feeds[pname] = self._to_port(a, v).astype(port.input_dtype(pname))
        if net.phase == 0 and any(l.type == "Dropout" for l in net.layers):
            self.notes.append("the net is in TRAIN: its Dropout layers draw random masks (compare a deploy net in "
                              "TEST)")
        missing = [p for p in port.inputs if p not in port_feeds]
        if missing:
            raise PortError("the port %s has inputs the net does not: %s" % (port.label, ", ".join(missing)))
        self.notes.extend(port.notes)
        self.pvals = port.run_all(port_feeds)
        if port.failure and port.failure_note():
            self.notes.append(port.failure_note())
        self.match: Dict[int, str] = {}
        self.how: Dict[int, str] = {}
        self.owner: Dict[str, int] = {}
        for name, pname in pairs.items():
            self._pair(tr.inputs[name], pname, "input")
        self._match_by_name()
        self._recheck_name_pairs()
        self._match_by_topology()
        self._refuse_another_nets_port()
        self._check_own()
        return self._result()

    # -------------------------------------------------------------- matching
    def _pair(self, a, tensor, how):
        self.match[a] = tensor
        self.how[a] = how
        self.owner[tensor] = a

    def _shape_ok(self, a):
        t = self.match.get(a)
        if t is None:
            return False
        v = self.pvals.get(t)
        return v is not None and tuple(v.shape) == self._port_shape(a)

    def _port_shape(self, a):
        """The shape the port holds value ``a`` in (another layout for a transposed input)."""
        shape = tuple(self.tr.acts[a].shape)
        lay = self.layout.get(a)
        if lay is None:
            return shape
        if lay[2]:
            shape = shape[1:]
        return tuple(shape[k] for k in lay[1]) if lay[1] is not None else shape

    def _to_port(self, a, arr):
        """The engine's value ``a`` as the port holds it (a transposed input: transposed)."""
        lay = self.layout.get(a)
        if lay is None:
            return arr
        arr = np.asarray(arr)
        if lay[2]:
            arr = arr[0]
        return np.ascontiguousarray(np.transpose(arr, lay[1])) if lay[1] is not None else arr

    def _values_to_match(self):
        return [a for a in self.tr.acts if a.alias_of is None and a.id not in self.match
                and not (a.type == "Input" or a.id in self.tr.inputs.values())]

    def _match_by_name(self):
        tr, port = self.tr, self.port
        blobs = {a.blob for a in tr.acts}
        # the exporter's own map (engine.ports' export-onnx writes caffe.blob_tensors: each blob's
        # tensor after Forward)
        for blob, t in self._blob_tensors().items():
            a = tr.final.get(blob)
            if a is not None and tr.acts[a].alias_of is None and a not in self.match and t in port.bit \
                    and t not in self.owner and t not in port.inputs:
                self._pair(a, t, "name")
        # blob@layer (a value an in-place layer later overwrote), or an in-place layer's name
        for act in self._values_to_match():
            cands = ["%s@%s" % (act.blob, act.layer)]
            if act.in_place:
                cands += [act.layer, "%s/%s" % (act.layer, act.blob)]
            for cand in cands:
                if cand in port.bit and cand not in self.owner and cand not in port.inputs and cand not in blobs:
                    self._pair(act.id, cand, "name")
                    break
        by_blob: Dict[str, List[int]] = {}
        for a in self._values_to_match():
            by_blob.setdefault(a.blob, []).append(a.id)
        for t in port.order:
            if t in self.owner or t in port.inputs or t not in by_blob:
                continue
            versions = [a for a in by_blob[t] if a not in self.match]
            if versions:
                self._pair(self._version_for(t, versions), t, "name")

    def _recheck_name_pairs(self):
        """Pair by value, not only by name: a tensor paired by name that holds a later value of
        the same chain (a node named as a BatchNorm computing BatchNorm+Scale, a convolution
        with its BatchNorm folded in) goes to that value, the row saying so."""
        self.name_notes: Dict[int, str] = {}
        for a in sorted(self.match):
            t = self.match[a]
            act = self.tr.acts[a]
            v = self.pvals.get(t)
            if self.how[a] != "name" or v is None or tuple(v.shape) != tuple(act.shape):
                continue
            # judged on the tensor's own part fed Caffe's values where the port re-runs parts: a
            # departure upstream (BGR, a kernel) must not leave a fused BatchNorm+Scale on the BatchNorm
            v = self._own_value(a, t, v)
            r = relative(v, self.values[a])[1]
            if r <= self.rtol:
                continue
            best = None
            for y in self._chain_after(act):
                ry = relative(v, self.values[y])[1]
                if ry < 0.1 * r and (best is None or ry < best[0]):
                    best = (ry, y)
            if best is None:
                continue
            y = best[1]
            del self.match[a], self.how[a], self.owner[t]
            self._pair(y, t, "name")
            yact = self.tr.acts[y]
            self.name_notes[y] = "'%s' (named for %s '%s') holds %s's value: %s fused into one node" % (
                t, act.type, act.layer, yact.layer, "+".join(
                    self.net.layers[i].type for i in range(act.layer_index, yact.layer_index + 1)
                    if any(self.tr.acts[z].layer_index == i and (self.cafanc[y] >> z & 1 or z == y)
                           for z in self.tr.layer_tops[i])))

    def _own_value(self, a, t, v):
        """Tensor ``t``'s value computed by its own part from Caffe's values of the frontier of
        value ``a`` (``v``, its end-to-end value, where the port cannot re-run parts)."""
        fr = self._frontier(a) if self.port.can_rerun else None
        if not fr or not fr[0]:
            return v
        try:
            return self._run_part(fr[0], t)
        except PortError:
            return v

    def _blob_tensors(self):
        return self.port.name_hints()

    def _version_for(self, t, versions):
        """Which value of an in-place chain a tensor named as the blob is: the one equal to it,
        else the last whose layer type the op that made it is the usual lowering of (else
        merely fits, else the last)."""
        op = self.port.op(t)
        v = self.pvals.get(t)
        types = [self.tr.acts[a].type for a in versions]
        classes = [[a for a, ty in zip(versions, types) if op in PRIMARY.get(ty, ())],
                   [a for a, ty in zip(versions, types) if _fits(ty, op)], versions]
        for cls in classes:
            if not cls:
                continue
            if v is not None:
                for a in cls:
                    if tuple(v.shape) == tuple(self.tr.acts[a].shape) and \
                            relative(v, self.values[a])[1] <= self.rtol:
                        return a
            return cls[-1]
        return versions[-1]

    def _frontier(self, a, memo=None):
        """(paired ancestor values nearest to ``a``, the layers between them and ``a``) or None
        when a path leads to an input the port does not take."""
        memo = {} if memo is None else memo
        if a in memo:
            return memo[a]
        act = self.tr.acts[a]
        front: List[int] = []
        layers: List[int] = [act.layer_index]
        shape_only = SHAPE_ONLY_BOTTOMS.get(act.type, ())
        for k, b in enumerate(act.bottoms):
            b = self.tr.real(b)
            if b in self.match and self._shape_ok(b):
                front.append(b)
                continue
            bact = self.tr.acts[b]
            sub = self._frontier(b, memo) if bact.bottoms else None
            if sub is None:
                if k in shape_only:        # a port need not read what gives only a shape
                    continue
                memo[a] = None
                return None
            front.extend(sub[0])
            layers.extend(sub[1])
        res = (list(dict.fromkeys(front)), sorted(set(layers)))
        memo[a] = res
        return res

    def _match_by_topology(self):
        # first the values the port reproduces exactly (end to end, or its part fed the
        # engine's values); then, in Caffe's order, the rest, each under the tensors of the
        # paired values that depend on it
        for exact in (True, False):
            for act in self._values_to_match():
                if act.id in self.match:
                    continue
                fr = self._frontier(act.id)
                if fr is None or not fr[0]:
                    continue
                if exact and len(fr[1]) > 4:           # far from anything paired: later
                    continue
                cands = self._candidates(act, fr[0], same_shape=True, under_paired=not exact)
                pick = self._choose(act, fr[0], cands, exact_only=exact)
                if pick is not None:
                    self._pair(act.id, pick, "topology")

    def _data_front(self, act):
        """The frontier through the bottoms whose values (not only shapes) the layer reads."""
        out: List[int] = []
        for k, b in enumerate(act.bottoms):
            if k in SHAPE_ONLY_BOTTOMS.get(act.type, ()):
                continue
            b = self.tr.real(b)
            if b in self.match and self._shape_ok(b):
                out.append(b)
            else:
                sub = self._frontier(b) if self.tr.acts[b].bottoms else None
                out.extend(sub[0] if sub else [])
        return out

    def _candidates(self, act, front, same_shape=True, under_paired=False):
        """Port tensors that can hold ``act``: computed from the tensors of ``front`` (all those
        the layer reads values of), from no other paired tensor, feeding no tensor paired with
        a value that does not depend on ``act`` (``under_paired``: feeding every tensor paired
        with one that does), floating point, of ``act``'s shape (``same_shape``)."""
        port = self.port
        need = 0
        allowed = 0
        for t in [self.match[f] for f in front]:
            allowed |= port.anc[t] | (1 << port.bit[t])
        for t in [self.match[f] for f in (self._data_front(act) or front)]:
            need |= 1 << port.bit[t]
        matched_bits = 0
        blocked = 0
        feeds = []
        for a, t in self.match.items():
            if t not in port.bit:
                continue
            bt = 1 << port.bit[t]
            matched_bits |= bt
            if not (self.cafanc[a] >> act.id) & 1:       # a value that does not depend on act
                blocked |= port.anc[t] | bt
            elif under_paired and (self.data_anc[a] >> act.id) & 1:
                # (a value that takes only act's shape -- a Crop's reference -- need not read it)
                feeds.append(port.anc[t])
        foreign = self._foreign_ops(act, front)
        # tensors made by a node reading a paired tensor upstream of the frontier that is not
        # in it (a residual Add reading the block's input): a part holding one reads a value
        # the layer does not (its Shape aside)
        front_t = {self.match[f] for f in front}
        readers = 0
        rm = port.reader_masks()
        for t in self.owner:
            if t not in front_t and t in port.bit and allowed >> port.bit[t] & 1:
                readers |= rm.get(t, 0)
        out = []
        for t in port.order:
            if t in self.owner or t in port.inputs:
                continue
            bt = 1 << port.bit[t]
            anc = port.anc[t]
            if anc & need != need or blocked & bt or (anc & matched_bits) & ~allowed:
                continue
            if any(not f & bt for f in feeds):
                continue
            v = self.pvals.get(t)
            if v is None or not np.issubdtype(v.dtype, np.floating):
                continue
            if same_shape and tuple(v.shape) != tuple(act.shape):
                continue
            if (anc | bt) & ~allowed & (foreign | readers):
                continue
            out.append(t)
        return out

    def _foreign_ops(self, act, front):
        """A bitmask of the port's tensors made by a weighty op (a convolution, a GEMM, a
        pooling, an LRN, a Softmax) that none of the layers between ``front`` and ``act`` is
        lowered to: a tensor whose part contains one is a later layer's (a port missing a
        Scale would otherwise pair the Scale with the next block's, a convolution away)."""
        fr = self._frontier(act.id)
        if fr is None or set(fr[0]) != set(front):
            return 0
        types = {self.net.layers[li].type for li in fr[1]}
        if not types <= set(COMPAT) | {"Split"}:
            return 0                      # a layer type whose lowering is not known here
        masks = self.port.op_masks()
        out = 0
        for op, owners in WEIGHTY_OPS.items():
            if op in masks and not types & owners:
                out |= masks[op]
        return out

    def _choose(self, act, front, cands, exact_only=False):
        """Among structurally possible tensors: one equal to the engine's value; else one whose
        own part (fed the engine's values of the frontier) gives it; else (not ``exact_only``)
        the first type-fitting one in the port's order whose own error is near the least
        (skipping one closer to a later value of the same chain)."""
        if not cands:
            return None
        ref = self.values[act.id]
        close = [(relative(self.pvals[t], ref)[1], k, t) for k, t in enumerate(cands)]
        close = [c for c in close if c[0] <= self.rtol]
        if close:                   # the closest: with a loose rtol a Scale's Mul, before its bias, is within it
            return min(close)[2]
        fit = [t for t in cands if _fits(act.type, self.port.op(t))]
        later = self._chain_after(act)
        scored = []
        later_tensors = []          # tensors that are a later value of the chain: what they feed is not act
        for t in fit[:3 if exact_only else 8]:
            if any(self.port.depends(t, s) for s in later_tensors):
                continue
            r = relative(self.pvals[t], ref)[1]
            if any(relative(self.pvals[t], self.values[y])[1] < 0.1 * r for y in later):
                later_tensors.append(t)
                continue
            if not exact_only and later and self._belongs_later(act, t, self.tr.acts[later[0]]):
                later_tensors.append(t)
                continue
            try:
                own = self._part_rel(act, front, t)
            except PortError:
                continue
            if own <= self.rtol:
                return t
            scored.append((own, t))
        if exact_only or not scored:
            return None
        # the tensor after which the next layer's own arithmetic is exact is this layer's output
        nxt = self._consumer(act)
        if nxt is not None and len(scored) > 1:
            for _, t in scored:
                if self._next_exact(act, t, nxt):
                    return t
        primary = [(own, t) for own, t in scored if self.port.op(t) in PRIMARY.get(act.type, ())] or scored
        least = min(own for own, _ in primary)
        return next(t for own, t in primary if own <= 3 * least)

    def _belongs_later(self, act, t, y):
        """Whether tensor ``t`` is the chain's later value ``y`` rather than ``act``'s: with
        ``t`` as ``y`` the value after ``y`` is reproduced exactly, with ``t`` as ``act`` the
        value after ``act`` is not (a fused BatchNorm+Scale whose arithmetic departs: the
        ReLU after it is exact on the Scale's value)."""
        nxt_y = self._consumer(y)
        if nxt_y is None:
            return False
        nxt_a = self._consumer(act)
        if nxt_a is not None and nxt_a.id != y.id and self._next_exact(act, t, nxt_a):
            return False
        if nxt_a is not None and nxt_a.id == y.id and self._next_exact(act, t, y):
            return False
        return self._next_exact(y, t, nxt_y)

    def _consumer(self, act):
        """The first value computed from ``act`` (through Split copies)."""
        for other in self.tr.acts[act.id + 1:]:
            if other.alias_of is None and other.id not in self.match and \
                    any(self.tr.real(b) == act.id for b in other.bottoms):
                return other
        return None

    def _next_exact(self, act, t, nxt):
        """Whether, with ``act`` paired with ``t``, a tensor reproduces ``nxt`` exactly from it."""
        self._pair(act.id, t, "topology")
        try:
            fr = self._frontier(nxt.id)
            if fr is None or act.id not in fr[0]:
                return False
            for t2 in [c for c in self._candidates(nxt, fr[0]) if _fits(nxt.type, self.port.op(c))][:4]:
                try:
                    if self._part_rel(nxt, fr[0], t2) <= self.rtol:
                        return True
                except PortError:
                    continue
            return False
        finally:
            del self.match[act.id], self.how[act.id], self.owner[t]

    def _chain_after(self, act, depth=4):
        """Unpaired values of the same shape within ``depth`` layers after ``act`` that depend on it."""
        out = []
        for other in self.tr.acts[act.id + 1:]:
            if other.layer_index > act.layer_index + depth:
                break
            if other.alias_of is None and other.id not in self.match and (self.cafanc[other.id] >> act.id) & 1 \
                    and other.shape == act.shape:
                out.append(other.id)
        return out

    def _refuse_another_nets_port(self):
        """A port of another net (its input fits, little else does) is an error, not a table of
        departures: fewer than half of the net's convolution and InnerProduct weight blobs
        have a weight of their size in the port (a mistake in a port keeps its weights'
        sizes; folding a BatchNorm into a convolution too)."""
        sizes = self.port.constant_sizes()
        blobs = [(name, l.blobs[0].data.size) for name, l in zip(self.net.layer_names, self.net.layers)
                 if l.type in ("Convolution", "Deconvolution", "InnerProduct") and l.blobs]
        if sizes is None or not blobs:
            return
        missing = [name for name, n in blobs if n not in sizes]
        if 2 * len(missing) <= len(blobs):
            return
        first = next((a for a in self.tr.acts if a.alias_of is None and a.type != "Input"
                      and a.id not in self.tr.inputs.values()), None)
        where = ""
        if first is not None and not self._shape_ok(first.id):
            t = self.match.get(first.id)
            where = "; the net's first layer '%s' gives %s, the port has %s" % (
                first.layer, _shape(first.shape), "no tensor of that shape" if t is None or self.pvals.get(t) is None
                else "'%s' of shape %s" % (t, _shape(self.pvals[t].shape)))
        raise PortError("%s is not a port of this net%s: %d of its %d convolution/InnerProduct weight blobs have "
                        "no weight of their size in the port (%s)%s; compare the port with the net it was made from"
                        % (self.port.label, " (%s)" % self.net.name if self.net.name else "", len(missing), len(blobs),
                           ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else ""), where))

    # -------------------------------------------------------------- own arithmetic
    def _check_own(self):
        self.own: Dict[int, Tuple[float, float]] = {}
        self.groups: Dict[int, List[int]] = {}
        self.fronts: Dict[int, List[int]] = {}
        for a in sorted(self.match):
            if self.how[a] == "input" or not self._shape_ok(a):
                continue
            fr = self._frontier(a)
            if fr is None or not fr[0]:
                continue
            self.fronts[a], self.groups[a] = fr
            self.own[a] = relative(*self.own_pair(a))
        # each small own error against the layer's own float32 rounding (under the floor it
        # cannot be a finding: not measured)
        self.rounding: Dict[int, Tuple[float, float]] = {}
        for a, (_, rel) in self.own.items():
            if self._rounding_limits(a)[1] <= rel <= self.rtol:
                rd = self._rounding(a)
                if rd is not None:
                    self.rounding[a] = rd

    def own_inputs(self, a):
        """{frontier value: array} the port's part for ``a`` is checked on: the engine's values
        (a port that re-runs parts), or the port's own (one that cannot: a tensor dump)."""
        if self.port.can_rerun:
            return {f: self.values[f] for f in self.fronts[a]}
        return {f: self._from_port(f, self.pvals[self.match[f]]) for f in self.fronts[a]}

    def own_pair(self, a):
        """(the port's output for value ``a``, Caffe's) on the same inputs: the port's part fed
        the engine's values of the frontier, against the engine's value; for a port that
        cannot re-run a part, the port's value against Caffe's layers run on the port's values
        of the frontier."""
        if a not in self._own_cache:
            if self.port.can_rerun:
                self._own_cache[a] = (self._run_sub(a), self.values[a])
            else:
                from engine.ports import diagnose
                ref = diagnose.reenact(self, a, inputs=self.own_inputs(a))
                pv = self._from_port(a, self.pvals[self.match[a]])
                self._own_cache[a] = (pv, ref if ref is not None else self.values[a])
        return self._own_cache[a]

    def _rounding(self, a):
        """(Caffe's float32 rounding, the port's error) of value ``a``'s own arithmetic: each
        relative to Caffe's layers evaluated in float64 on the same inputs; None when the
        layers cannot be rebuilt in float64."""
        from engine.ports import diagnose
        ins = {f: np.asarray(v, np.float64) for f, v in self.own_inputs(a).items()}
        ref64 = diagnose.reenact(self, a, dtype=np.float64, inputs=ins)
        if ref64 is None:
            return None
        port_out, ref = self.own_pair(a)
        return relative(ref, ref64)[1], relative(port_out, ref64)[1]

    def _above_rounding(self, a):
        """The factor by which the port's own error exceeds Caffe's own float32 rounding of the
        layer, when it is a finding (over ROUNDING_FACTOR and ROUNDING_FLOOR), else None."""
        rd = self.rounding.get(a)
        if rd is None:
            return None
        caffe_err, port_err = rd
        factor, floor = self._rounding_limits(a)
        if port_err < floor or self.own[a][1] < floor:
            return None
        x = port_err / max(caffe_err, F32_EPS)
        return x if x >= factor else None

    def _rounding_limits(self, a):
        """(factor, floor) a small own error of value ``a`` must pass to be a finding."""
        if any(self.net.layers[li].type in TRANSCENDENTAL for li in self.groups.get(a, ())):
            return TRANSCENDENTAL_FACTOR, TRANSCENDENTAL_FLOOR
        return ROUNDING_FACTOR, ROUNDING_FLOOR

    def _from_port(self, a, arr):
        """The inverse of :meth:`_to_port`: a port's tensor in the net's layout."""
        lay = self.layout.get(a)
        arr = np.asarray(arr)
        if lay is None:
            return arr
        if lay[1] is not None:
            arr = np.transpose(arr, np.argsort(lay[1]))
        return np.ascontiguousarray(arr[None] if lay[2] else arr)

    def _run_sub(self, a, replace=None):
        """The port's part for value ``a`` run on the engine's values of its frontier
        (``replace``: {frontier value: array} fed instead)."""
        return self._run_part(self.fronts[a], self.match[a], replace, label=self.tr.acts[a].label)

    def _part_rel(self, act, front, t):
        """The own error of ``act`` were it paired with tensor ``t`` (its frontier ``front``):
        the port's part fed the engine's values against the engine's value; for a port that
        cannot re-run parts, ``t``'s value against Caffe's layers run on the port's values."""
        if self.port.can_rerun:
            return relative(self._run_part(front, t), self.values[act.id])[1]
        from engine.ports import diagnose
        fr = self._frontier(act.id)
        if fr is None or list(fr[0]) != list(front):
            return float("inf")
        ref = diagnose.reenact(self, act.id, group=fr[1], front=front,
                               inputs={f: self._from_port(f, self.pvals[self.match[f]]) for f in front})
        return float("inf") if ref is None else relative(self._from_port(act.id, self.pvals[t]), ref)[1]

    def _run_part(self, front, out, replace=None, label=None):
        """The port's sub-graph from the tensors paired with the values ``front`` to the tensor
        ``out``, fed the engine's values of ``front``."""
        ftens = [self.match[f] for f in front]
        feeds = {}
        for f, n in zip(front, ftens):
            v = self._to_port(f, (replace or {}).get(f, self.values[f]))
            feeds[n] = np.asarray(v).astype(self.pvals[n].dtype, copy=False)
        try:
            return self.port.run_part(ftens, out, ChainMap(feeds, self.pvals))
        except PortError as e:
            raise PortError("%s (the port's part for '%s')" % (e, label or out)) from None

    def _constant_values(self):
        """'' or what every value the net computes (paired or not, inputs aside) holds when all
        are constant: "all zero", "each constant"."""
        vals = [self.values[a.id] for a in self.tr.acts if a.alias_of is None and a.id not in self.tr.inputs.values()]
        if not vals:
            return ""
        if all(not np.any(v) for v in vals):
            return "all zero"
        if all(v.size == 0 or np.all(v == v.flat[0]) for v in vals):
            return "each one a constant"
        return ""

    def _explain_own_over_end_to_end(self):
        """A row whose own error is far above its end-to-end error gets a line saying why:
        its part was fed Caffe's values of tensors the port itself holds otherwise."""
        for a, r in self.by_act.items():
            if r.own_rel is None or r.rel is None or r.own_rel <= max(10 * r.rel, self._tolerance(a)):
                continue
            off = [(f, self.by_act[f].rel) for f in self.fronts.get(a, ()) if f in self.by_act
                   and self.by_act[f].rel is not None and self.by_act[f].rel > max(r.rel, self.rtol)]
            why = ", ".join("'%s' (the port's '%s' is off it by %s end to end)" % (
                self.tr.acts[f].label, self.match[f], _num(rel)) for f, rel in off) or \
                ", ".join("'%s'" % self.tr.acts[f].label for f in self.fronts.get(a, ()))
            r.note = (r.note + "; " if r.note else "") + \
                "own error %s above the end-to-end %s: the port's part was fed Caffe's values of %s, which the " \
                "port's own tensors do not hold; its own ops undo the difference" % (_num(r.own_rel), _num(r.rel), why)

    # -------------------------------------------------------------- the result
    def _tolerance(self, a):
        types = []
        for li in self.groups.get(a, [self.tr.acts[a].layer_index]):
            layer = self.net.layers[li]
            t = layer.type
            if t == "Pooling" and layer.layer_param.pooling_param.pool == 0:
                types.append(1e-6)
            else:
                types.append(ROUNDING.get(t, self.rtol))
        return min(self.rtol, max(types) if types else self.rtol)

    def _first_not_reached(self, rows, before=None):
        """Where a port that stopped part way has no tensor to pair by name (names stripped, or
        the failing node's output not named as a blob): the first value, in Caffe's order and
        ``before`` the first row paired with a tensor the port did not compute, paired with
        nothing and inside no paired value's check, whose nearest paired ancestors the port did
        compute -- the tensors after the node that failed have no values to pair by.  Its row
        becomes "not run"."""
        # inside a paired value's check: a value it computes from (not one giving a Crop a shape)
        covered = set()
        for r in rows:
            if r.tensor is not None and len(r.group) > 1:
                a = self.row_act[id(r)]
                inner = set(r.group[:-1])
                covered |= {x.id for x in self.tr.acts if x.layer in inner and (self.data_anc[a] >> x.id) & 1}
        for r in rows:
            if r is before:
                break
            a = self.row_act[id(r)]
            if r.matched is None and a not in covered and self._frontier(a) is not None:
                r.status = "not run"
                r.note = (r.note + "; " if r.note else "") + "the port stopped before this value (%s)" % \
                    self.port.failure.split(":")[0]
                return r
        return None

    def _result(self):
        from engine.ports import diagnose
        tr, net = self.tr, self.net
        rows: List[PortRow] = []
        by_act: Dict[int, PortRow] = {}
        for act in tr.acts:
            if act.alias_of is not None:
                continue
            t = self.match.get(act.id)
            row = PortRow(label=act.label, blob=act.blob, layer=act.layer, layer_index=act.layer_index, type=act.type,
                          shape=list(act.shape), tensor=t, matched=self.how.get(act.id),
                          note=self.name_notes.get(act.id, ""))
            if t is not None:
                pv = self.pvals.get(t)
                row.tensor_shape = list(pv.shape) if pv is not None else None
                if pv is not None:
                    row.max_abs, row.rel = relative(pv, self._to_port(act.id, self.values[act.id]))
                if pv is None:
                    row.status = "not run"
                elif row.matched == "input":
                    row.status = "input"
                elif not self._shape_ok(act.id):
                    row.status = "shape"
                elif act.id in self.own:
                    row.own_max_abs, row.own_rel = self.own[act.id]
                    row.group = [net.layer_names[i] for i in self.groups[act.id]]
                    rd = self.rounding.get(act.id)
                    if rd is not None:
                        row.rounding = rd[0]
                        row.over_rounding = rd[1] / max(rd[0], F32_EPS)
                    if row.own_rel > self.rtol:
                        row.status = "departs"
                    elif rd is not None:
                        row.status = "small" if self._above_rounding(act.id) is not None else "ok"
                    elif row.own_rel > self._tolerance(act.id):
                        row.status = "small"
                    else:
                        row.status = "ok"
                else:
                    row.status = "unchecked"
            rows.append(row)
            by_act[act.id] = row
        self.rows, self.by_act = rows, by_act
        self.row_act = {id(r): a for a, r in by_act.items()}
        self._explain_own_over_end_to_end()
        diags = diagnose.diagnose(self)
        # a small error a known cause reproduces departs
        explained = {v for d in diags if d.evidence.get("reproduced")
                     for v in [d.evidence.get("value")] + list(d.evidence.get("values") or [])}
        for r in rows:
            if r.status == "small" and r.label in explained and r.over_rounding is None:
                r.status = "departs"
        first = None
        for r in sorted(rows, key=lambda r: (r.layer_index if not r.group else
                                             min(net.layer_names.index(g) for g in r.group), r.layer_index)):
            if _departing(r):
                first = r
                break
        if first is None:
            dropped = [d for d in diags if d.kind == "softmax_dropped"]
            if dropped:
                first = by_act[tr.real(tr.final[dropped[0].evidence["value"]])] \
                    if dropped[0].evidence["value"] in tr.final else None
        if first is None:
            shape_diag = [d for d in diags if d.kind.startswith("pool_") or d.kind == "shape"]
            if shape_diag:
                first = next((r for r in rows if r.layer == shape_diag[0].layer), None)
        if first is None and self.port.failure:
            first = next((r for r in rows if r.status == "not run"), None)
            first = self._first_not_reached(rows, first) or first
        outputs = []
        e2e_ok = True
        for name in net.outputs:
            a = tr.final[name]
            a = tr.real(a)
            r = by_act[a]
            outputs.append({"blob": name, "tensor": r.tensor, "max_abs": r.max_abs, "rel": r.rel})
            if r.tensor is None or r.rel is None or r.rel > self.rtol:
                e2e_ok = False
        faithful = first is None and e2e_ok
        if first is None and not e2e_ok:
            small = [r for r in rows if r.status == "small"]
            if small:
                first = small[0]
        counts = {"values": len(rows), "input": 0, "name": 0, "topology": 0, "unmatched": 0}
        for r in rows:
            counts[r.matched or "unmatched"] += 1
        in_groups = {g for r in rows if r.tensor is not None for g in r.group[:-1]}
        counts["covered"] = sum(1 for r in rows if r.matched is None and r.layer in in_groups)
        unmatched = [t for t in self.port.order if t not in self.owner and t not in self.port.inputs
                     and self.pvals.get(t) is not None and np.issubdtype(self.pvals[t].dtype, np.floating)]
        first_layer = None
        if first is not None:
            first_layer = _group_layer_named(diags, first.group or [first.layer]) or first.layer
        constant = self._constant_values()
        if constant:
            self.notes.append("every value compared is constant (%s): the comparison proves nothing about the "
                              "port's arithmetic (a net without weights? load its caffemodel)" % constant)
        if faithful:
            worst = max((r.rel for r in rows if r.rel is not None and r.matched != "input"), default=0.0)
            msg = "Faithful: every checked layer's own arithmetic within rounding, outputs within rtol %g " \
                  "(largest end-to-end rel %s)." % (self.rtol, _num(worst))
            if constant:
                msg = "Proves nothing: every value compared is constant (%s); the port agrees with it, as " \
                      "anything would." % constant
        elif first is not None:
            what = "the port cannot run here: %s" % self.port.failure if first.status == "not run" \
                else "the port has no Softmax here" if first.tensor is None and first.type == "Softmax" \
                else "own error %s relative, %s times its float32 rounding (%s)" % (
                _num(first.own_rel), _num(first.over_rounding), _num(first.rounding)) \
                if first.status == "small" and first.over_rounding is not None \
                else "own result departs by %s relative" % _num(first.own_rel) if first.status in ("departs", "small") \
                else "output shape %s where Caffe's is %s" % (_shape(first.tensor_shape), _shape(first.shape)) \
                if first.tensor_shape is not None else "no port tensor of Caffe's shape %s" % _shape(first.shape)
            msg = "First departing layer: %s (%s) at %s: %s." % (first_layer, net.layers[net.layer_names.index(
                first_layer)].type if first_layer in net.layer_names else first.type, first.label, what)
        else:
            msg = "Departs: the outputs %s differ (or are not matched) though no layer's own check departs." % (
                ", ".join(o["blob"] for o in outputs if o["rel"] is None or o["rel"] > self.rtol))
        return PortComparison(net=net.name, port=self.port.label, rtol=self.rtol, rows=rows, faithful=faithful,
                              first_departing=None if faithful else first_layer,
                              first_departing_label=None if (faithful or first is None) else first.label,
                              diagnosis=diags, matching=counts, unmatched_tensors=unmatched, outputs=outputs,
                              notes=self.notes, message=msg, input_layouts=self.input_layouts,
                              proves_nothing=bool(constant))


def _departing(r):
    """A row that makes the port depart: its own result off by more than rtol, another shape,
    or a small error far above the layer's float32 rounding."""
    return r.status in ("departs", "shape") or (r.status == "small" and r.over_rounding is not None)


def _fits_shape(want, shape):
    return want is not None and len(want) == len(shape) and all(d is None or d == s for d, s in zip(want, shape))


_LAYOUT_NAMES = {(0, 2, 3, 1): "NHWC", (0, 2, 3, 4, 1): "NDHWC", (0, 2, 1): "NWC", (1, 2, 0): "HWC", (1, 0): "WC"}


def _layout(want, shape):
    """How a port's input of declared shape ``want`` holds a net input of ``shape``: None (as
    the net does, or unknown), (name, axes, dropped batch) -- a transpose of the net's axes
    (after dropping a batch of 1) -- or False when no layout fits."""
    import itertools
    shape = tuple(int(d) for d in shape)
    if want is None or _fits_shape(want, shape):
        return None
    tries = []
    for drop in (False, True):
        s = shape[1:] if drop else shape
        if drop and (not shape or shape[0] != 1):
            continue
        if len(want) != len(s):
            continue
        if drop and _fits_shape(want, s):
            tries.append(("no batch axis", None, True))
        known = [p for p in _LAYOUT_NAMES if len(p) == len(s)]
        for perm in known + [p for p in itertools.permutations(range(len(s))) if p not in known]:
            if list(perm) != sorted(perm) and _fits_shape(want, tuple(s[k] for k in perm)):
                name = _LAYOUT_NAMES.get(perm, "axes " + ",".join(str(k) for k in perm))
                tries.append((name + (" without the batch axis" if drop and name not in ("HWC", "WC") else ""),
                              perm, drop))
    return tries[0] if tries else False


def _layout_text(lay):
    name, perm, drop = lay
    what = ("batch axis dropped" if drop else "") + (", " if drop and perm else "") + \
        ("transposed %s" % ",".join(str(k) for k in perm) if perm else "")
    return "%s: %s" % (name, what)


def _group_layer_named(diags, group):
    """The layer of ``group`` a diagnosis names (a line covering several layers lists them)."""
    for d in diags:
        if d.layer in group:
            return d.layer
        for layer in d.evidence.get("layers") or ():
            if layer in group:
                return layer
    return None


def _fits(caffe_type, op):
    ops = COMPAT.get(caffe_type, ANY)
    return ops is None or op in ops


# the ONNX port under its former name
_Port = OnnxPort

__all__ = ["compare_port", "PortComparison", "PortRow", "Diagnosis", "Preprocess", "load_onnx", "DEFAULT_RTOL",
           "PortGraph", "OnnxPort"]

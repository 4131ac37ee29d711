"""The proof of a port: onnxruntime and the engine on the same inputs, every blob compared.

:func:`verify` runs the engine's Forward and the ONNX model (every Caffe blob made a graph
output, found through the model's ``caffe.blob_tensors`` map or by name) on the same input
arrays, and compares each blob within float32 rounding, relative to the blob's scale:

    ok  <=>  max |engine - onnx| <= rtol * max |engine| + atol      (NaN/Inf where both are)

The result lists one row per blob (max abs/rel difference, tolerance), the worst blob and an
``ok`` flag; ``print(result)`` shows the table.

:func:`randomize_params` and :func:`random_inputs` give a net meaningful random weights
(BatchNorm statistics with a scale factor other than 1, PReLU slopes, ...) and inputs (class
labels for blobs read as labels) for tests and for checking an export without a caffemodel.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

import numpy as np

from engine.ports.errors import ExportError, require

RTOL = 1e-5
ATOL = 1e-6


@dataclass
class BlobRow:
    """One blob: its tensor in the model, shape, differences and verdict."""
    blob: str
    tensor: str
    shape: tuple
    max_abs_diff: float
    scale: float
    max_rel_diff: float
    tolerance: float
    ok: bool
    note: str = ""


@dataclass
class VerifyResult:
    """Per-blob comparison of the engine's Forward and onnxruntime on the same inputs."""
    rows: list = field(default_factory=list)
    rtol: float = RTOL
    atol: float = ATOL
    inputs: dict = field(default_factory=dict)       # name -> shape
    providers: tuple = ()

    @property
    def ok(self):
        return bool(self.rows) and all(r.ok for r in self.rows)

    @property
    def failures(self):
        return [r for r in self.rows if not r.ok]

    @property
    def worst(self):
        """The blob with the largest difference relative to its tolerance (None if no rows)."""
        if not self.rows:
            return None
        return max(self.rows, key=lambda r: (not r.ok, r.max_abs_diff / r.tolerance if r.tolerance else np.inf))

    @property
    def max_abs_diff(self):
        return max((r.max_abs_diff for r in self.rows), default=0.0)

    @property
    def max_rel_diff(self):
        return max((r.max_rel_diff for r in self.rows), default=0.0)

    def table(self, only_failures=False):
        rows = self.failures if only_failures else self.rows
        w = max([len(r.blob) for r in rows] + [4])
        lines = ["%-*s  %-20s  %12s  %12s  %12s  %s" % (w, "blob", "shape", "max|diff|", "max|engine|", "rel", "ok")]
        for r in rows:
            lines.append("%-*s  %-20s  %12.4g  %12.4g  %12.4g  %s%s"
                         % (w, r.blob, "x".join(str(d) for d in r.shape) or "()", r.max_abs_diff, r.scale,
                            r.max_rel_diff, "ok" if r.ok else "DIFFERS", (" (%s)" % r.note) if r.note else ""))
        return "\n".join(lines)

    def summary(self):
        w = self.worst
        if w is None:
            return "no blobs compared"
        verdict = "every blob equal within float32 rounding" if self.ok else \
            "%d of %d blobs differ" % (len(self.failures), len(self.rows))
        return ("%s (%d blobs; tolerance %.0e x max|blob| + %.0e); worst: %s, max|diff| %.3g, relative %.3g"
                % (verdict, len(self.rows), self.rtol, self.atol, w.blob, w.max_abs_diff, w.max_rel_diff))

    def __str__(self):
        return self.table() + "\n" + self.summary()

    def to_dict(self):
        return {"ok": self.ok, "rtol": self.rtol, "atol": self.atol,
                "worst": self.worst.blob if self.worst else None,
                "max_abs_diff": self.max_abs_diff, "max_rel_diff": self.max_rel_diff,
                "rows": [dict(r.__dict__, shape=list(r.shape)) for r in self.rows]}


def _load_model(onnx, model):
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if hasattr(model, "graph"):
        return model
    if hasattr(model, "model") and hasattr(model.model, "graph"):      # an ExportResult
        return model.model
    return onnx.load(str(model))


def blob_tensors(model, net=None):
    """{Caffe blob: tensor} from the model's ``caffe.blob_tensors`` metadata, or else the
    blobs of ``net`` whose name is a tensor of the model."""
    for p in model.metadata_props:
        if p.key == "caffe.blob_tensors":
            return json.loads(p.value)
    if net is None:
        return {}
    names = {i.name for i in model.graph.input}
    for n in model.graph.node:
        names.update(n.output)
    return {b: b for b in net.blob_names if b in names}


def compare_arrays(a, b, rtol=RTOL, atol=ATOL):
    """(max |a - b|, max |a|, relative, tolerance, ok, note) for two arrays of one blob; NaN
    and Inf count as equal where both hold the same."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        if a.size == b.size:
            b = b.reshape(a.shape)
        else:
            return np.inf, 0.0, np.inf, 0.0, False, "shape %s vs %s" % (a.shape, b.shape)
    same_special = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
    special_a = ~np.isfinite(a)
    special_b = ~np.isfinite(b)
    note = ""
    if np.any((special_a | special_b) & ~same_special):
        bad = int(np.sum((special_a | special_b) & ~same_special))
        return np.inf, 0.0, np.inf, 0.0, False, "%d NaN/Inf differ" % bad
    fin = np.isfinite(a) & np.isfinite(b)
    if not np.any(fin):
        return 0.0, 0.0, 0.0, atol, True, "no finite values" if a.size else ""
    diff = float(np.max(np.abs(a[fin] - b[fin]))) if a.size else 0.0
    scale = float(np.max(np.abs(a[fin]))) if a.size else 0.0
    tol = rtol * scale + atol
    rel = diff / scale if scale > 0 else (0.0 if diff == 0 else np.inf)
    return diff, scale, rel, tol, diff <= tol, note


def verify(net, onnx_model, inputs=None, rtol=RTOL, atol=ATOL, blobs=None, providers=None):
    """Run the engine's Forward and onnxruntime on the same inputs; compare every blob.

    ``net``: the engine Net the model was exported from (its weights as exported).
    ``onnx_model``: a path, bytes, a ModelProto or an ExportResult.  ``inputs``: {input blob:
    array}; None uses what the net's input blobs hold now (``random_inputs(net)`` fills
    them).  ``blobs``: the blobs to compare (default: every blob the model holds).
    Returns a :class:`VerifyResult`; nothing is raised for a difference (see ``.ok``)."""
    onnx = require("onnx", "verifying an ONNX export")
    ort = require("onnxruntime", "verifying an ONNX export")
    model = onnx.ModelProto()
    model.CopyFrom(_load_model(onnx, onnx_model))
    mapping = blob_tensors(model, net)
    meta = {p.key: p.value for p in model.metadata_props}
    state = json.loads(meta.get("caffe.state", "{}"))
    graph_inputs = [i.name for i in model.graph.input]
    init_names = {i.name for i in model.graph.initializer}
    graph_inputs = [n for n in graph_inputs if n not in init_names]
    feeds = {}
    for name in graph_inputs:
        if name in state:
            # a recurrent layer's carried state: what the engine's Forward starts from (the
            # last Forward's h_T, which it copies to h_0 first)
            s = state[name]
            layer = net.layer_dict[s["layer"]]
            feeds[name] = np.array(layer.recur_output_blobs[int(s["index"])].data, dtype=np.float32, copy=True)
            continue
        if inputs is not None and name in inputs:
            arr = np.asarray(inputs[name], dtype=np.float32)
        elif net.has_blob(name):
            arr = np.array(net.blobs[name].data, dtype=np.float32, copy=True)
        else:
            raise ExportError("the ONNX model's input '%s' is no blob of the net '%s'" % (name, net.name), blob=name)
        if net.has_blob(name):
            want = tuple(net.blobs[name].shape)
            if arr.shape != want:
                if arr.size != int(np.prod(want, dtype=np.int64)):
                    raise ExportError("input '%s' has shape %s; the net's blob is %s" % (name, arr.shape, want),
                                      blob=name)
                arr = arr.reshape(want)
            net.blobs[name].data[...] = arr
        feeds[name] = arr
    # The engine: Forward on those inputs, every blob kept.
    net.Forward()
    engine_blobs = {b: np.array(net.blobs[b].data, copy=True) for b in net.blob_names}
    state_rows = []                 # (label, output tensor, the engine's carried state after Forward)
    for s in state.values():
        layer = net.layer_dict[s["layer"]]
        state_rows.append(("%s (state %s)" % (s["output"], s["layer"]), s["output"],
                           np.array(layer.recur_output_blobs[int(s["index"])].data, copy=True)))
    # onnxruntime: every mapped tensor as an output.
    wanted = [b for b in (blobs or net.blob_names) if b in mapping]
    outputs = {o.name for o in model.graph.output}
    f32 = onnx.TensorProto.FLOAT
    for b in wanted:
        t = mapping[b]
        if t in outputs or t in feeds:
            continue
        model.graph.output.append(onnx.helper.make_tensor_value_info(t, f32, list(net.blobs[b].shape)))
        outputs.add(t)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=list(providers or ["CPUExecutionProvider"]))
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(names, feeds)))
    got.update(feeds)
    res = VerifyResult(rtol=rtol, atol=atol, inputs={k: tuple(v.shape) for k, v in feeds.items()},
                       providers=tuple(sess.get_providers()))
    for b in (blobs or net.blob_names):
        ref = engine_blobs.get(b)
        if ref is None:
            continue
        t = mapping.get(b)
        if t is None or t not in got:
            res.rows.append(BlobRow(b, t or "", tuple(ref.shape), np.inf, 0.0, np.inf, 0.0, False,
                                    "not in the ONNX model"))
            continue
        d, s, r, tol, ok, note = compare_arrays(ref, got[t], rtol, atol)
        res.rows.append(BlobRow(b, t, tuple(ref.shape), d, s, r, tol, ok, note))
    if blobs is None:
        for label, t, ref in state_rows:
            if t not in got:
                res.rows.append(BlobRow(label, t, tuple(ref.shape), np.inf, 0.0, np.inf, 0.0, False,
                                        "not in the ONNX model"))
                continue
            d, s, r, tol, ok, note = compare_arrays(ref, got[t], rtol, atol)
            res.rows.append(BlobRow(label, t, tuple(ref.shape), d, s, r, tol, ok, note))
    return res


# ====================================================================== test data
def _label_blobs(net):
    """Blobs read as integer labels/indices: bottom 1 of the losses and Accuracy, Embed's
    bottom, BatchReindex's indices."""
    labels = {}
    source = {}                 # a Split top -> the blob it copies
    for i, layer in enumerate(net.layers):
        names = [net.blob_names[b] for b in net.bottom_id_vecs[i]]
        if layer.type == "Split":
            for tb in net.top_id_vecs[i]:
                source[net.blob_names[tb]] = source.get(names[0], names[0])
        names = [source.get(n, n) for n in names]
        t = layer.type
        if t in ("SoftmaxWithLoss", "Accuracy", "InfogainLoss") and len(names) > 1:
            lp = layer.layer_param
            axis_param = {"Accuracy": lp.accuracy_param.axis, "InfogainLoss": lp.infogain_loss_param.axis}.get(
                t, lp.softmax_param.axis)
            shape = net.bottom_vecs[i][0].shape
            axis = axis_param + len(shape) if axis_param < 0 else axis_param
            labels[names[1]] = ("class", int(shape[axis]) if shape else 1)
        elif t in ("HingeLoss", "MultinomialLogisticLoss") and len(names) > 1:
            shape = net.bottom_vecs[i][0].shape
            labels[names[1]] = ("class", int(np.prod(shape[1:], dtype=np.int64)) if shape else 1)
        elif t == "Embed":
            labels[names[0]] = ("class", int(layer.K))
        elif t == "BatchReindex" and len(names) > 1:
            labels[names[1]] = ("class", int(net.bottom_vecs[i][0].shape[0]))
        elif t in ("SigmoidCrossEntropyLoss",) and len(names) > 1:
            labels[names[1]] = ("unit", 1)
        elif t == "ContrastiveLoss" and len(names) > 2:
            labels[names[2]] = ("class", 2)
        elif t == "LSTMUnit" and len(names) > 2:
            labels[names[2]] = ("class", 2)
        elif t in ("RNN", "LSTM") and len(names) > 1:
            labels[names[1]] = ("class", 2)          # sequence continuation indicators
    return labels


def random_inputs(net, seed=0, scale=1.0):
    """Fill the net's input blobs: standard normal (times ``scale``), integer class labels
    for blobs read as labels or indices; returns {name: array}."""
    rng = np.random.default_rng(seed)
    labels = _label_blobs(net)
    out = {}
    for name in net.inputs:
        shape = tuple(net.blobs[name].shape)
        kind = labels.get(name)
        if kind and kind[0] == "class":
            v = rng.integers(0, max(1, kind[1]), size=shape)
        elif kind and kind[0] == "unit":
            v = rng.uniform(0, 1, size=shape)
        else:
            v = rng.standard_normal(shape) * scale
        arr = np.asarray(v, dtype=np.float32).reshape(shape)
        net.blobs[name].data[...] = arr
        out[name] = arr
    return out


def randomize_params(net, seed=0, bn_scale_factor=None):
    """Random weights a test can see through: convolution/inner-product weights ~ N(0, 1/fan_in),
    biases ~ N(0, 0.1), Scale ~ U(0.5, 1.5), PReLU slopes ~ U(0, 0.5), BatchNorm statistics
    stored as Caffe stores them: mean and variance sums times a scale factor (``bn_scale_factor``,
    default a random one in [0.5, 1000]; with 0, which Caffe reads as "no statistics: use
    zeros", the sums are left random and non-zero)."""
    rng = np.random.default_rng(seed)
    for lname, blobs in net.params.items():
        ltype = net.layer_dict[lname].type
        sf = None
        if ltype == "BatchNorm":
            sf = float(rng.uniform(0.5, 1000.0)) if bn_scale_factor is None else float(bn_scale_factor)
        for j, b in enumerate(blobs):
            shape = tuple(b.data.shape)
            n = int(np.prod(shape)) if shape else 1
            if ltype == "BatchNorm":
                # sums times the factor; with a factor of 0 Caffe ignores the sums (zeros are used),
                # so they are left random and non-zero there
                times = sf if sf != 0 else 1.0
                if j == 0:
                    v = rng.standard_normal(n) * (0.1 * times)
                elif j == 1:
                    v = rng.uniform(0.5, 1.5, n) * times
                else:
                    v = np.full(n, sf)
            elif ltype == "Scale" and j == 0:
                v = rng.uniform(0.5, 1.5, n)
            elif ltype == "PReLU":
                v = rng.uniform(0.0, 0.5, n)
            elif j == 0 and len(shape) >= 2:
                fan_in = n // shape[0] if ltype != "Deconvolution" else n // shape[1]
                if ltype == "InnerProduct" and net.layer_dict[lname].layer_param.inner_product_param.transpose:
                    fan_in = shape[0]
                v = rng.standard_normal(n, dtype=np.float32) * np.float32(1.0 / np.sqrt(max(fan_in, 1)))
            else:
                v = rng.standard_normal(n, dtype=np.float32) * np.float32(0.1)
            b.data[...] = v.reshape(shape).astype(np.float32)


# ``engine.ports.verify`` names both this module and its function: once the module is
# imported, Python binds the package attribute to the module, so the module calls the function.
class _CallableModule(sys.modules[__name__].__class__):
    def __call__(self, *args, **kwargs):
        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

"""What a port comparison can and cannot show, and the two things to do about it.

- :func:`proves_nothing`: a comparison in which every value compared is constant (a deploy
  net without weights or fillers: every weight and activation 0) passes any port; it
  proves nothing and must not be called faithful.
- :func:`port_weight_count` and :func:`copy_port_weights`: a net without weights compared
  with a port that carries its own (ONNX initializers, a PyTorch state_dict) compares two
  different nets.  The port's weights can be copied into the net -- through the comparison's
  pairing: the parameters of the op paired with a layer's value go to that layer (a Conv's
  or nn.Conv2d's to the Convolution, a Gemm's or nn.Linear's to the InnerProduct, a
  BatchNormalization's or nn.BatchNorm2d's statistics to the BatchNorm and its gamma/beta to
  the Scale checked with it) -- and the two compared again.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np


# ---------------------------------------------------------------------- proving nothing
def proves_nothing(net, result):
    """A line saying why ``result`` (the comparison just made on ``net``) proves nothing --
    every value it compared is constant (all 0, say) -- or None.  Reads the values the
    comparison left in the net, and only when they are all constant runs it once more to see
    the values an in-place layer overwrote."""
    from engine.ports.activations import run, trace
    compared = {r.blob for r in result.rows if r.tensor is not None and r.matched != "input"}
    if not compared:
        return "no value of the net was compared with the port"
    for b in compared:
        if b in net.blobs and not _constant(net.blobs[b].data):
            return None
    tr = trace(net)
    values = run(net, tr)
    labels = {r.label for r in result.rows if r.tensor is not None and r.matched != "input"}
    seen = [values[a.id] for a in tr.acts if a.label in labels and values[a.id] is not None]
    if any(not _constant(v) for v in seen):
        return None
    zero = all(not np.any(v) for v in seen)
    return ("every value compared is %s in the net (and the port agrees): a port that computes anything of these "
            "shapes would pass. The net has no weights%s; load its .caffemodel or give an input that varies"
            % ("0" if zero else "constant", " (a deploy file without fillers)" if zero else " or its input is "
               "constant"))


def _constant(a):
    a = np.asarray(a)
    return a.size == 0 or bool(np.all(a == a.flat[0]) or np.all(np.isnan(a)))


# ---------------------------------------------------------------------- the port's weights
def port_weight_count(port):
    """How many weight arrays ``port`` carries: an ONNX model's float initializers of more
    than one element, a PyTorch module's parameters and float buffers; 0 for a tensor dump."""
    kind = getattr(port, "kind", None)
    if hasattr(port, "onnx_nodes"):
        return sum(1 for t in port.model.graph.initializer
                   if t.data_type in (1, 10, 11, 16) and int(np.prod(list(t.dims) or [1])) > 1)
    if kind in ("torch", "torch-reference"):
        module = port.module if kind == "torch" else port.graph.module
        return sum(1 for v in module.state_dict().values() if v.is_floating_point() and v.numel() > 1)
    return 0


@dataclass
class WeightCopy:
    """What :func:`copy_port_weights` did: the layers given the port's weights, and those
    it could not fill (with why)."""
    copied: List[str] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)

    def summary(self):
        text = "copied the port's weights into %d layer%s (%s)" % (
            len(self.copied), "" if len(self.copied) == 1 else "s", ", ".join(self.copied[:8]) +
            (", ..." if len(self.copied) > 8 else ""))
        if self.skipped:
            text += "; not copied: %s" % "; ".join("%s (%s)" % s for s in self.skipped[:6])
        return text


_FITS = {"Convolution": ("conv",), "Deconvolution": ("conv",), "InnerProduct": ("linear",),
         "BatchNorm": ("batchnorm",), "Scale": ("batchnorm", "scale"), "Bias": ("bias", "scale"), "PReLU": ("prelu",)}


def copy_port_weights(net, result, port):
    """Copy the weights of ``port``'s ops into the layers of ``net`` their values were paired
    with in ``result`` (see the module docstring); a BatchNorm op's gamma and beta go to the
    Scale right after the BatchNorm when no op with weights for a Scale was paired with it.
    Returns a :class:`WeightCopy`."""
    out = WeightCopy()
    plans = []
    for row in result.rows:
        if row.tensor is None or row.matched == "input" or row.tensor_shape is None:
            continue
        params = _op_params(port, row.tensor)
        if params is not None:
            plans.append((list(row.group or [row.layer]), params[0], params[1]))
    covered = {g for group, op, _ in plans for g in group if op in _FITS.get(_type(net, g), ())}
    done = set()
    for group, op, arrays in plans:
        if op == "batchnorm" and not any(_type(net, g) == "Scale" for g in group):
            group = group + [s for s in (_scale_after(net, g) for g in group if _type(net, g) == "BatchNorm")
                             if s and s not in covered]
        for name in group:
            if name in done or name not in net.layer_names:
                continue
            layer = net.layers[net.layer_names.index(name)]
            if not layer.blobs:
                continue
            why = _fill(layer, op, arrays, group, net)
            if why is None:
                out.copied.append(name)
                done.add(name)
            elif why:
                out.skipped.append((name, why))
    return out


def adopt_port_weights(net, port, compare, rounds=3):
    """Copy ``port``'s weights into ``net`` and compare again (``compare()``: the comparison
    of the two as they are now), up to ``rounds`` times while the pairing -- better with each
    round, as more values agree -- reaches more layers.  Returns (the last comparison, the
    :class:`WeightCopy` of every layer filled)."""
    total = WeightCopy()
    result = compare()
    for _ in range(rounds):
        step = copy_port_weights(net, result, port)
        new = [n for n in step.copied if n not in total.copied]
        total.copied += new
        total.skipped = [s for s in step.skipped if s[0] not in total.copied]
        if not step.copied:
            break
        result = compare()
        if result.faithful or not new:
            break
    return result, total


def _type(net, name):
    return net.layers[net.layer_names.index(name)].type if name in net.layer_names else None


def _scale_after(net, name):
    """The Scale layer reading the top of BatchNorm ``name`` right after it, if any."""
    i = net.layer_names.index(name)
    tops = set(net.top_id_vecs[i])
    for j in range(i + 1, len(net.layers)):
        if tops & set(net.bottom_id_vecs[j]):
            return net.layer_names[j] if net.layers[j].type == "Scale" else None
    return None


def _op_params(port, tensor):
    """(op kind, {role: array}) of the op making ``tensor``: its weights by role (weight,
    bias, mean, var, gamma, beta, slope), or None."""
    if hasattr(port, "onnx_nodes"):
        return _onnx_params(port, tensor)
    graph = port.graph if getattr(port, "kind", None) == "torch-reference" else port
    if getattr(graph, "kind", None) == "torch":
        return _torch_params(graph, tensor)
    return None


def _onnx_params(port, tensor):
    k = port.producer.get(tensor)
    if k is None:
        return None
    node = port.onnx_nodes[k]
    ins = list(node.input)

    def init(i):
        return port.initializer(ins[i]) if i < len(ins) and ins[i] else None
    attrs = {a.name: a for a in node.attribute}
    if node.op_type in ("Conv", "ConvTranspose"):
        return "conv", {"weight": init(1), "bias": init(2)}
    if node.op_type == "Gemm":
        w = init(1)
        if w is not None and not (attrs.get("transB") is not None and attrs["transB"].i):
            w = w.T
        return "linear", {"weight": w, "bias": init(2)}
    if node.op_type == "BatchNormalization":
        return "batchnorm", {"gamma": init(1), "beta": init(2), "mean": init(3), "var": init(4)}
    if node.op_type == "PRelu":
        return "prelu", {"slope": init(1)}
    if node.op_type in ("Add", "Mul") and len(ins) == 2:    # MatMul + Add, Conv + Add, a Scale's Mul (+ Add)
        for a, b in ((0, 1), (1, 0)):
            const = init(b)
            if const is None:
                continue
            if node.op_type == "Mul":
                return "scale", {"gamma": const}
            inner = _onnx_params(port, ins[a])
            if inner is not None and inner[0] in ("conv", "linear") and inner[1].get("bias") is None:
                return inner[0], dict(inner[1], bias=const)
            if inner is not None and inner[0] == "scale":
                return "scale", dict(inner[1], beta=const)
            return "bias", {"beta": const}
    if node.op_type == "MatMul":
        w = init(1)
        return ("linear", {"weight": w.T, "bias": None}) if w is not None and w.ndim == 2 else None
    return None


def _torch_params(graph, tensor):
    call = graph.calls.get(tensor)
    if call is None or call.kind != "call":
        return None
    m = call.fn
    torch = graph.torch
    if not isinstance(m, torch.nn.Module):
        return None

    def arr(t):
        return None if t is None else t.detach().cpu().numpy().copy()
    if isinstance(m, (torch.nn.modules.conv._ConvNd,)):
        return "conv", {"weight": arr(m.weight), "bias": arr(m.bias)}
    if isinstance(m, torch.nn.Linear):
        return "linear", {"weight": arr(m.weight), "bias": arr(m.bias)}
    if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
        return "batchnorm", {"gamma": arr(m.weight), "beta": arr(m.bias), "mean": arr(m.running_mean),
                             "var": arr(m.running_var)}
    if isinstance(m, torch.nn.PReLU):
        return "prelu", {"slope": arr(m.weight)}
    return None


def _put(blob, arr):
    if arr is None:
        return False
    arr = np.asarray(arr, np.float32)
    if arr.size != blob.count:
        return False
    blob.data[...] = arr.reshape(blob.shape)
    return True


def _fill(layer, op, a, group, net):
    """Fill ``layer``'s blobs from the op's arrays ``a``: None when done, a reason when it
    cannot, "" when the op has nothing for this layer."""
    t = layer.type
    types = [net.layers[net.layer_names.index(g)].type for g in group if g in net.layer_names]
    if op == "conv" and t in ("Convolution", "Deconvolution"):
        if any(x in types for x in ("BatchNorm", "Scale")):
            return "the port folds a BatchNorm or Scale into this convolution; its weights cannot be split back"
        if not _put(layer.blobs[0], a.get("weight")):
            return "the port's kernel has %s values, the layer's %d" % (_size(a.get("weight")), layer.blobs[0].count)
        if len(layer.blobs) > 1:
            if a.get("bias") is None:
                layer.blobs[1].data[...] = 0
            elif not _put(layer.blobs[1], a["bias"]):
                return "the port's bias has %s values" % _size(a["bias"])
        return None
    if op == "linear" and t == "InnerProduct":
        w = a.get("weight")
        if w is not None and layer.layer_param.inner_product_param.transpose:
            w = w.T
        if w is None or w.size != layer.blobs[0].count:
            return "the port's weight has %s values, the layer's %d" % (_size(w), layer.blobs[0].count)
        layer.blobs[0].data[...] = np.asarray(w, np.float32).reshape(layer.blobs[0].shape)
        if len(layer.blobs) > 1:
            if a.get("bias") is None:
                layer.blobs[1].data[...] = 0
            elif not _put(layer.blobs[1], a["bias"]):
                return "the port's bias has %s values" % _size(a["bias"])
        return None
    if op == "batchnorm" and t == "BatchNorm":
        if not (_put(layer.blobs[0], a.get("mean")) and _put(layer.blobs[1], a.get("var"))):
            return "the port's statistics do not fit"
        layer.blobs[2].data[...] = 1.0
        return None
    if op == "batchnorm" and t == "Scale":
        if not _put(layer.blobs[0], a.get("gamma")):
            return "the port's gamma does not fit"
        if len(layer.blobs) > 1 and not _put(layer.blobs[1], a.get("beta")):
            return "the port's beta does not fit"
        return None
    if op in ("scale", "bias") and t in ("Scale", "Bias"):
        if t == "Scale" and not _put(layer.blobs[0], a.get("gamma")):
            return "the port's multiplier does not fit" if op == "scale" else ""
        bias = layer.blobs[1] if t == "Scale" and len(layer.blobs) > 1 else layer.blobs[0] if t == "Bias" else None
        if bias is not None and a.get("beta") is not None and not _put(bias, a["beta"]):
            return "the port's bias does not fit"
        return None
    if op == "prelu" and t == "PReLU":
        return None if _put(layer.blobs[0], a.get("slope")) else "the port's slope does not fit"
    return ""


def _size(a):
    return "no" if a is None else str(np.asarray(a).size)


def weights_differ(net_has_weights, port) -> Optional[str]:
    """A line saying the net's weights are not the port's, when the net has none of its own
    (``net_has_weights`` False: its params are the fillers') and the port carries weights."""
    if net_has_weights:
        return None
    n = port_weight_count(port)
    if not n:
        return None
    what = "a state_dict" if getattr(port, "kind", "").startswith("torch") else "initializers"
    return ("the weights differ: this net has no weights loaded (its params are its fillers', drawn anew for each "
            "net), the port carries its own (%d arrays of %s), so the two compute different things. Load the net's "
            ".caffemodel, or copy the port's weights into the net, and compare again" % (n, what))


__all__ = ["proves_nothing", "port_weight_count", "copy_port_weights", "adopt_port_weights", "weights_differ",
           "WeightCopy"]

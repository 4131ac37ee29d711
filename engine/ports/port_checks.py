"""A net without weights against a port with its own, and what to do about it.

- :func:`weights_differ` and :func:`copy_port_weights`: a net without weights compared with
  a port that carries its own (ONNX initializers, a PyTorch state_dict) compares two
  different nets.  The port's weights can be copied into the net: its weighted ops, in the
  port's order, are aligned with the net's weighted layers, in Caffe's order, by kind and
  shape (the values cannot guide it: they differ where the weights do) -- a Conv or
  nn.Conv2d to a Convolution, a Gemm, MatMul(+Add) or nn.Linear to an InnerProduct, a
  BatchNormalization or nn.BatchNorm2d to a BatchNorm and the Scale right after it, a Mul(+Add)
  by constants to a Scale, a PRelu to a PReLU -- and the two compared again.
"""
from dataclasses import dataclass, field
from typing import List, Tuple

import numpy as np


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
    differing: List[str] = field(default_factory=list)      # layers whose weights were not the port's

    def summary(self):
        text = "copied the port's weights into %d layer%s (%s)" % (
            len(self.copied), "" if len(self.copied) == 1 else "s", ", ".join(self.copied[:8]) +
            (", ..." if len(self.copied) > 8 else ""))
        if self.skipped:
            text += "; not copied: %s" % "; ".join("%s (%s)" % s for s in self.skipped[:6])
        return text


def _caffe_units(net):
    """(layer name, layer) of the layers with weights a port's op can fill, in Caffe's order."""
    return [(n, l) for n, l in zip(net.layer_names, net.layers)
            if l.blobs and l.type in ("Convolution", "Deconvolution", "InnerProduct", "BatchNorm", "Scale", "Bias",
                                      "PReLU")]


def _fits(layer, op, a):
    """Whether the port op's arrays ``a`` (of kind ``op``) have this layer's weight shapes."""
    t = layer.type
    shape = tuple(layer.blobs[0].shape)
    if op == "conv" and t in ("Convolution", "Deconvolution"):
        return a.get("weight") is not None and tuple(a["weight"].shape) == shape
    if op == "linear" and t == "InnerProduct":
        w = a.get("weight")
        want = shape[::-1] if layer.layer_param.inner_product_param.transpose else shape
        return w is not None and tuple(w.shape) == tuple(want)
    if op == "batchnorm" and t == "BatchNorm":
        return a.get("mean") is not None and a["mean"].size == layer.blobs[0].count
    if op in ("batchnorm", "scale") and t == "Scale":
        return a.get("gamma") is not None and a["gamma"].size == layer.blobs[0].count
    if op in ("bias", "scale") and t == "Bias":
        return a.get("beta") is not None and a["beta"].size == layer.blobs[0].count
    if op == "prelu" and t == "PReLU":
        return a.get("slope") is not None and a["slope"].size == layer.blobs[0].count
    return False


def plan_port_weights(net, port):
    """[(op, arrays, [layer names])]: the port's weighted ops (in its order) aligned with the
    net's weighted layers (in Caffe's order) by kind and shape -- independent of the values,
    which differ when the weights do: a BatchNorm op fills a BatchNorm and the Scale right
    after it (nn.BatchNorm2d, a fused BatchNormalization) or the BatchNorm alone."""
    units = _caffe_units(net)
    ops = _port_units(port)
    n, m = len(units), len(ops)
    score = np.zeros((n + 2, m + 1))
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best = max(score[i + 1, j], score[i, j + 1])
            op, arrays = ops[j]
            layer = units[i][1]
            if _fits(layer, op, arrays):
                best = max(best, 1.1 + score[i + 1, j + 1])
            if op == "batchnorm" and layer.type == "BatchNorm" and i + 1 < n and \
                    _scale_after(net, units[i][0]) == units[i + 1][0] and _fits(layer, op, arrays) and \
                    _fits(units[i + 1][1], op, arrays):
                best = max(best, 2.1 + score[i + 2, j + 1])
            score[i, j] = best
    plan = []
    i = j = 0
    while i < n and j < m:
        op, arrays = ops[j]
        layer = units[i][1]
        pair = op == "batchnorm" and layer.type == "BatchNorm" and i + 1 < n and \
            _scale_after(net, units[i][0]) == units[i + 1][0] and _fits(layer, op, arrays) and \
            _fits(units[i + 1][1], op, arrays)
        if pair and abs(score[i, j] - (2.1 + score[i + 2, j + 1])) < 1e-9:
            plan.append((op, arrays, [units[i][0], units[i + 1][0]]))
            i, j = i + 2, j + 1
        elif _fits(layer, op, arrays) and abs(score[i, j] - (1.1 + score[i + 1, j + 1])) < 1e-9:
            plan.append((op, arrays, [units[i][0]]))
            i, j = i + 1, j + 1
        elif score[i, j] == score[i + 1, j]:
            i += 1
        else:
            j += 1
    return plan


def copy_port_weights(net, port, write=True):
    """Copy the weights of ``port``'s ops into the layers of ``net`` they align with
    (:func:`plan_port_weights`).  ``write=False`` only looks: which layers' weights differ
    from the port's.  Returns a :class:`WeightCopy`."""
    out = WeightCopy()
    for op, arrays, group in plan_port_weights(net, port):
        for name in group:
            layer = net.layers[net.layer_names.index(name)]
            before = [np.array(b.data, copy=True) for b in layer.blobs]
            why = _fill(layer, op, arrays, group, net)
            if why is None:
                out.copied.append(name)
                if not _same_weights(layer, before, [np.array(b.data) for b in layer.blobs]):
                    out.differing.append(name)
            elif why:
                out.skipped.append((name, why))
            if not write:
                for x, b in zip(before, layer.blobs):
                    b.data[...] = x
    return out


def _same_weights(layer, a, b):
    """Whether blob arrays ``a`` and ``b`` of ``layer`` compute the same (a BatchNorm's
    statistics compared as divided by their scale factors)."""
    if layer.type == "BatchNorm" and len(a) == 3:
        def eff(x):
            f = float(np.ravel(x[2])[0]) if np.size(x[2]) else 1.0
            f = 0.0 if f == 0 else 1.0 / f
            return [x[0] * f, x[1] * f]
        a, b = eff(a), eff(b)
    return all(np.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(a, b))


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


def _port_units(port):
    """[(op kind, {role: array})] of the port's ops that carry weights, in the port's order."""
    out = []
    if hasattr(port, "onnx_nodes"):
        used: set = set()
        for k in range(len(port.onnx_nodes)):
            if k not in used:
                p = _onnx_unit(port, k, used)
                if p is not None:
                    out.append(p)
        return out
    graph = port.graph if getattr(port, "kind", None) == "torch-reference" else port
    if getattr(graph, "kind", None) == "torch":
        for m in graph.module.modules():          # in the order the module registered them
            p = _torch_unit(graph.torch, m)
            if p is not None:
                out.append(p)
    return out


def _onnx_unit(port, k, used):
    """(op kind, {role: array}) of ONNX node ``k`` when it carries weights (a bias in the Add
    right after it taken too, and that Add marked ``used``), else None."""
    node = port.onnx_nodes[k]
    ins = list(node.input)

    def init(i):
        return port.initializer(ins[i]) if i < len(ins) and ins[i] else None

    def const_of(n):
        for i in n.input:
            v = port.initializer(i) if i else None
            if v is not None:
                return v
        return None

    def bias_after():
        """The constant of the one Add reading this node's output (marked used)."""
        readers = [(j, n) for j, n in enumerate(port.onnx_nodes) if node.output[0] in n.input]
        if len(readers) == 1 and readers[0][1].op_type == "Add":
            c = const_of(readers[0][1])
            if c is not None:
                used.add(readers[0][0])
                return c
        return None
    attrs = {x.name: x for x in node.attribute}
    op = node.op_type
    if op in ("Conv", "ConvTranspose") and init(1) is not None:
        b = init(2)
        return "conv", {"weight": init(1), "bias": b if b is not None else bias_after()}
    if op == "Gemm" and init(1) is not None:
        w = init(1)
        if not (attrs.get("transB") is not None and attrs["transB"].i):
            w = w.T
        return "linear", {"weight": w, "bias": init(2)}
    if op == "MatMul" and init(1) is not None and init(1).ndim == 2:
        return "linear", {"weight": init(1).T, "bias": bias_after()}
    if op == "BatchNormalization":
        return "batchnorm", {"gamma": init(1), "beta": init(2), "mean": init(3), "var": init(4)}
    if op == "PRelu" and init(1) is not None:
        return "prelu", {"slope": init(1)}
    if op == "Mul" and const_of(node) is not None:
        return "scale", {"gamma": const_of(node), "beta": bias_after()}
    if op == "Add" and const_of(node) is not None:
        return "bias", {"beta": const_of(node)}
    return None


def _torch_unit(torch, m):
    """(op kind, {role: array}) of a torch module that owns weights: convolutions, Linear (and
    subclasses), BatchNorm, PReLU, and any other module owning a 1-d ``weight`` (a scale)
    and/or ``bias`` of one size (a Caffe Scale or Bias written by hand)."""
    def arr(t):
        return None if t is None else t.detach().cpu().numpy().copy()
    nn = torch.nn
    if isinstance(m, nn.modules.conv._ConvNd):
        return "conv", {"weight": arr(m.weight), "bias": arr(m.bias)}
    if isinstance(m, nn.Linear):
        return "linear", {"weight": arr(m.weight), "bias": arr(m.bias)}
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return "batchnorm", {"gamma": arr(m.weight), "beta": arr(m.bias), "mean": arr(m.running_mean),
                             "var": arr(m.running_var)}
    if isinstance(m, nn.PReLU):
        return "prelu", {"slope": arr(m.weight)}
    own = dict(m.named_parameters(recurse=False))
    w, b = own.get("weight"), own.get("bias")
    if w is not None and w.dim() == 1 and (b is None or b.shape == w.shape):
        return "scale", {"gamma": arr(w), "beta": arr(b)}
    if w is None and b is not None and b.dim() == 1:
        return "bias", {"beta": arr(b)}
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
    if op == "conv" and t in ("Convolution", "Deconvolution"):
        if not _put(layer.blobs[0], a.get("weight")):
            return "the port's kernel has %s values, the layer's %d" % (_size(a.get("weight")), layer.blobs[0].count)
        return _fill_bias(layer, a.get("bias"))
    if op == "linear" and t == "InnerProduct":
        w = a.get("weight")
        if w is not None and layer.layer_param.inner_product_param.transpose:
            w = w.T
        if w is None or w.size != layer.blobs[0].count:
            return "the port's weight has %s values, the layer's %d" % (_size(w), layer.blobs[0].count)
        layer.blobs[0].data[...] = np.asarray(w, np.float32).reshape(layer.blobs[0].shape)
        return _fill_bias(layer, a.get("bias"))
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


def _fill_bias(layer, bias):
    """A Convolution's or InnerProduct's bias term from the port's (0 when the op has none)."""
    if len(layer.blobs) < 2:
        return None
    if bias is None:
        layer.blobs[1].data[...] = 0
        return None
    return None if _put(layer.blobs[1], bias) else "the port's bias has %s values" % _size(bias)


def _size(a):
    return "no" if a is None else str(np.asarray(a).size)


def weights_differ(net, port):
    """A line saying the net's weights are not the port's (the weights of the port's ops
    differ from those of the layers they align with), or None when they agree or the port
    carries none.  Ask it of a net without weights of its own: for one with, a difference is
    what the comparison is about."""
    if not port_weight_count(port):
        return None
    look = copy_port_weights(net, port, write=False)
    if not look.differing:
        return None
    what = "its state_dict" if str(getattr(port, "kind", "")).startswith("torch") else "its initializers"
    return ("the weights differ: %d of the %d layers matching the port's weighted ops (%s) have weights other "
            "than %s. This net has no weights loaded (its params are its fillers'), so the two compute different "
            "things: load the net's .caffemodel, or copy the port's weights into the net, and compare again" % (
                len(look.differing), len(look.copied), ", ".join(look.differing[:5]) +
                (", ..." if len(look.differing) > 5 else ""), what))


__all__ = ["port_weight_count", "plan_port_weights", "copy_port_weights", "weights_differ",
           "WeightCopy"]

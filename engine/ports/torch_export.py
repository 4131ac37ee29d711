"""export-torch: a Caffe net as a plain, readable PyTorch ``nn.Module`` source file and its state_dict.

    res = export_torch(net, "model.py")            # also writes model.pth beside it
    v = verify_torch(net, "model.py", "model.pth")  # torch against the engine, per blob
    v.ok, v.max_rel; print(v.format())

The file imports torch only (never the engine): one attribute per Caffe layer, named as the
layer (made an identifier; ``CAFFE_LAYERS`` maps Caffe's names to the attributes), and a
``forward`` in Caffe's order, one line per layer.  Caffe's semantics are kept where PyTorch's
own differ: pooling's output size (rounded up, the last window starting inside the padded
image -- nn.MaxPool2d(ceil_mode=True) has that rule; where it or its padding limit differs,
a helper pads with -FLT_MAX), AVE pooling's divisor (padding counted up to the padded border,
not beyond: a helper sums and divides by Caffe's count), LRN within channel (k fixed to 1),
BatchNorm's stored scale factor (divided out into running_mean/var), Scale/Bias on an axis,
InnerProduct on an axis and transposed, Crop offsets, Dropout at test time.

Layer types: Input, Convolution, Deconvolution, Pooling (MAX, AVE; global), LRN, ReLU
(leaky), PReLU, ELU, Sigmoid, TanH, AbsVal, BNLL, Power, Exp, Log, BatchNorm, Scale, Bias,
Eltwise (SUM with coefficients, PROD, MAX), Concat, Slice, Split, Flatten, Reshape,
InnerProduct, Softmax, Dropout, Crop.  Others are refused by name (:class:`PortError`).
"""
import builtins
import importlib.util
import io
import keyword
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from engine.ports.activations import PortError, relative, require, run, set_inputs, trace

# nn.Module's own attribute names: a layer may not take them.
_MODULE_NAMES = {
    "training", "forward", "train", "eval", "parameters", "named_parameters", "buffers", "named_buffers",
    "children", "named_children", "modules", "named_modules", "state_dict", "load_state_dict", "to", "cuda",
    "cpu", "type", "float", "double", "half", "bfloat16", "apply", "zero_grad", "requires_grad_",
    "register_buffer", "register_parameter", "register_module", "add_module", "get_submodule",
    "get_parameter", "get_buffer", "extra_repr", "dump_patches", "call_super_init", "share_memory",
    "compile", "ipu", "xpu", "mtia", "to_empty", "get_extra_state", "set_extra_state", "set_submodule",
}
_RESERVED_VARS = {"self", "torch", "nn", "F", "math", "x", "out"} | set(dir(builtins))

SUPPORTED = ("Input", "Convolution", "Deconvolution", "Pooling", "LRN", "ReLU", "PReLU", "ELU", "Sigmoid", "TanH",
             "AbsVal", "BNLL", "Power", "Exp", "Log", "BatchNorm", "Scale", "Bias", "Eltwise", "Concat", "Slice",
             "Split", "Flatten", "Reshape", "InnerProduct", "Softmax", "Dropout", "Crop")

_WHY = {
    "Data": "a data layer (export the deploy net, whose inputs are Input layers)",
    "ImageData": "a data layer (export the deploy net, whose inputs are Input layers)",
    "HDF5Data": "a data layer (export the deploy net, whose inputs are Input layers)",
    "MemoryData": "a data layer (export the deploy net, whose inputs are Input layers)",
    "WindowData": "a data layer (export the deploy net, whose inputs are Input layers)",
    "DummyData": "a data layer (export the deploy net, whose inputs are Input layers)",
    "Python": "a Python layer runs the model author's code, which has no PyTorch form here",
    "SoftmaxWithLoss": "a loss layer (export the deploy net)",
    "Accuracy": "an accuracy layer (export the deploy net)",
}


# ---------------------------------------------------------------------- helpers written into the file
_HELPERS = {
    "pool_size": '''
def caffe_pooled_size(size, kernel, stride, pad, ceil, any_pad):
    """Caffe's pooled output size: (size + 2 pad - kernel) / stride rounded up (ceil) or down,
    plus one; with padding, a last window that would start in the padding is dropped."""
    span = size + 2 * pad - kernel
    # rounded up without dividing a negative number: traced by torch.onnx, a size is a tensor
    # and its floor division of a negative one truncates (8 would become 7)
    out = ((span + stride - 1) // stride if ceil else span // stride) + 1
    if any_pad and (out - 1) * stride >= size + pad:
        out -= 1
    return out
''',
    "max_pool": '''
class CaffeMaxPool2d(nn.Module):
    """Caffe's MAX pooling where nn.MaxPool2d's rules differ (padding over half the kernel,
    or no padding with a window past the image): pad with -FLT_MAX, pool, keep Caffe's size."""

    def __init__(self, kernel_size, stride, padding, ceil_mode=True):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode

    def forward(self, x):
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        any_pad = bool(ph or pw)
        oh = caffe_pooled_size(x.shape[2], kh, sh, ph, self.ceil_mode, any_pad)
        ow = caffe_pooled_size(x.shape[3], kw, sw, pw, self.ceil_mode, any_pad)
        eh = max((oh - 1) * sh + kh - ph - x.shape[2], 0)
        ew = max((ow - 1) * sw + kw - pw - x.shape[3], 0)
        x = F.pad(x, (pw, ew, ph, eh), value=-3.4028234663852886e38)
        return F.max_pool2d(x, (kh, kw), (sh, sw))[:, :, :oh, :ow]
''',
    "ave_pool": '''
class CaffeAvgPool2d(nn.Module):
    """Caffe's AVE pooling: the window sum divided by the window's size counted up to the
    padded border (padding included, what lies beyond the padded image not)."""

    def __init__(self, kernel_size, stride, padding, ceil_mode=True):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode

    def forward(self, x):
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        H, W = x.shape[2], x.shape[3]
        any_pad = bool(ph or pw)
        oh = caffe_pooled_size(H, kh, sh, ph, self.ceil_mode, any_pad)
        ow = caffe_pooled_size(W, kw, sw, pw, self.ceil_mode, any_pad)
        if ph < 0 or pw < 0:
            # a negative pad (Caffe's int): the windows, sum and divisor, end at H + pad; the
            # start is cut by F.pad below
            x = x[:, :, :H + min(ph, 0), :W + min(pw, 0)]
        eh = max((oh - 1) * sh + kh - ph - x.shape[2], 0)
        ew = max((ow - 1) * sw + kw - pw - x.shape[3], 0)
        # every window of the padded input is whole: its mean times kh*kw is its sum (to an ulp;
        # avg_pool2d's divisor_override has no ONNX form: torch.onnx drops it and averages)
        sums = F.avg_pool2d(F.pad(x, (pw, ew, ph, eh)), (kh, kw), (sh, sw))[:, :, :oh, :ow] * float(kh * kw)
        hs = torch.arange(oh, device=x.device) * sh - ph
        ws = torch.arange(ow, device=x.device) * sw - pw
        count_h = torch.clamp(hs + kh, max=H + ph) - hs
        count_w = torch.clamp(ws + kw, max=W + pw) - ws
        return sums / (count_h[:, None] * count_w[None, :]).to(x.dtype)
''',
    "negative_pad_conv": '''
class CaffeNegativePadConv(nn.Module):
    """Caffe's convolution with a negative pad (caffe.proto's uint32 pad of 2^31 and up, held
    in Caffe's int): a Convolution reads its input cropped by -pad at both ends; a
    Deconvolution's output grows by -pad at both ends, where only its bias lands."""

    def __init__(self, conv, pad):
        super().__init__()
        self.conv, self.pad = conv, tuple(pad)

    def forward(self, x):
        c = self.conv
        cut = [max(-p, 0) for p in self.pad]
        if not isinstance(c, nn.modules.conv._ConvTransposeNd):
            for axis, n in enumerate(cut, start=2):
                if n:
                    x = x.narrow(axis, n, x.shape[axis] - 2 * n)
            return c(x)
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[len(cut) - 1]
        y = fn(x, c.weight, None, c.stride, c.padding, 0, c.groups, c.dilation)
        y = F.pad(y, [n for n in reversed(cut) for _ in (0, 1)])
        if c.bias is not None:
            y = y + c.bias.view((1, -1) + (1,) * len(cut))
        return y
''',
    "lrn_within": '''
class CaffeLRNWithinChannel(nn.Module):
    """Caffe's LRN WITHIN_CHANNEL: x / (1 + alpha * mean of x^2 over a size x size window)^beta
    (the window's padding counted; Caffe's k is not used in this mode)."""

    def __init__(self, size, alpha, beta):
        super().__init__()
        self.size, self.alpha, self.beta = size, alpha, beta

    def forward(self, x):
        pad = (self.size - 1) // 2
        mean_sq = F.avg_pool2d(x * x, self.size, 1, pad, count_include_pad=True)
        return x * torch.pow(1 + self.alpha * mean_sq, -self.beta)
''',
    "scale": '''
def caffe_broadcast(param, x, axis):
    """``param`` (shaped as x's axes axis .. axis + param.dim()) viewed to broadcast over x."""
    return param.reshape((1,) * axis + tuple(param.shape) + (1,) * (x.dim() - axis - param.dim()))


class CaffeScale(nn.Module):
    """Caffe's Scale: x times a learned scale (or the second input) on axes [axis, axis + its
    dims), plus a learned bias when bias_term."""

    def __init__(self, shape, axis, learned=True, bias=False):
        super().__init__()
        self.axis = axis
        self.weight = nn.Parameter(torch.ones(shape)) if learned else None
        self.bias = nn.Parameter(torch.zeros(shape)) if bias else None

    def forward(self, x, scale=None):
        scale = self.weight if scale is None else scale
        axis = 0 if scale.dim() == 0 else self.axis
        y = x * caffe_broadcast(scale, x, axis)
        if self.bias is not None:
            y = y + caffe_broadcast(self.bias, x, axis)
        return y


class CaffeBias(nn.Module):
    """Caffe's Bias: x plus a learned bias (or the second input) on axes [axis, axis + its dims)."""

    def __init__(self, shape, axis, learned=True):
        super().__init__()
        self.axis = axis
        self.bias = nn.Parameter(torch.zeros(shape)) if learned else None

    def forward(self, x, bias=None):
        bias = self.bias if bias is None else bias
        return x + caffe_broadcast(bias, x, 0 if bias.dim() == 0 else self.axis)
''',
    "eltwise": '''
class CaffeEltwise(nn.Module):
    """Caffe's Eltwise: SUM (with coefficients), PROD or MAX of its inputs."""

    def __init__(self, operation, coeffs=None):
        super().__init__()
        self.operation, self.coeffs = operation, coeffs

    def forward(self, *xs):
        if self.operation == "PROD":
            y = xs[0]
            for x in xs[1:]:
                y = y * x
            return y
        if self.operation == "MAX":
            y = xs[0]
            for x in xs[1:]:
                y = torch.maximum(y, x)
            return y
        if self.coeffs is None:
            y = xs[0]
            for x in xs[1:]:
                y = y + x
            return y
        y = self.coeffs[0] * xs[0]
        for c, x in zip(self.coeffs[1:], xs[1:]):
            y = y + c * x
        return y
''',
    "concat": '''
class Concat(nn.Module):
    """Caffe's Concat along ``axis``."""

    def __init__(self, axis):
        super().__init__()
        self.axis = axis

    def forward(self, *xs):
        return torch.cat(xs, self.axis)
''',
    "slice": '''
class Slice(nn.Module):
    """Caffe's Slice along ``axis``: at ``points``, or into ``parts`` equal parts."""

    def __init__(self, axis, points=None, parts=2):
        super().__init__()
        self.axis, self.points, self.parts = axis, points, parts

    def forward(self, x):
        n = x.shape[self.axis]
        edges = [0] + list(self.points or [n // self.parts * k for k in range(1, self.parts)]) + [n]
        return tuple(x.narrow(self.axis, a, b - a) for a, b in zip(edges[:-1], edges[1:]))
''',
    "reshape": '''
class CaffeReshape(nn.Module):
    """Caffe's Reshape: axes [axis, axis + num_axes) replaced by ``dims`` (0 copies the input's
    dimension, -1 is inferred)."""

    def __init__(self, dims, axis=0, num_axes=-1):
        super().__init__()
        self.dims, self.axis, self.num_axes = dims, axis, num_axes

    def forward(self, x):
        shape = list(x.shape)
        start = self.axis if self.axis >= 0 else len(shape) + 1 + self.axis
        end = len(shape) if self.num_axes == -1 else start + self.num_axes
        new = [shape[start + k] if d == 0 else d for k, d in enumerate(self.dims)]
        return x.reshape(shape[:start] + new + shape[end:])
''',
    "inner_product": '''
class InnerProduct(nn.Linear):
    """Caffe's InnerProduct: the input flattened from ``axis`` on, times the weights, plus bias."""

    def __init__(self, in_features, out_features, bias=True, axis=1):
        super().__init__(in_features, out_features, bias)
        self.axis = axis

    def forward(self, x):
        return super().forward(x.flatten(self.axis))
''',
    "crop": '''
class Crop(nn.Module):
    """Caffe's Crop: the first input cut to the second's shape from ``axis`` on, at ``offsets``."""

    def __init__(self, axis, offsets):
        super().__init__()
        self.axis, self.offsets = axis, offsets

    def forward(self, x, like):
        for k, off in enumerate(self.offsets):
            d = self.axis + k
            x = x.narrow(d, off, like.shape[d])
        return x
''',
    "power": '''
class Power(nn.Module):
    """Caffe's Power: (shift + scale * x) ** power."""

    def __init__(self, power=1.0, scale=1.0, shift=0.0):
        super().__init__()
        self.power, self.scale, self.shift = power, scale, shift

    def forward(self, x):
        if self.power == 0 or self.scale == 0:
            return torch.full_like(x, 1.0 if self.power == 0 else self.shift ** self.power)
        y = x
        if self.scale != 1:
            y = y * self.scale
        if self.shift != 0:
            y = y + self.shift
        if self.power != 1:
            y = torch.pow(y, self.power)
        return y
''',
    "exp": '''
class CaffeExp(nn.Module):
    """Caffe's Exp: base ** (shift + scale * x) (base -1: e)."""

    def __init__(self, inner_scale, outer_scale):
        super().__init__()
        self.inner_scale, self.outer_scale = inner_scale, outer_scale

    def forward(self, x):
        y = torch.exp(x * self.inner_scale if self.inner_scale != 1 else x)
        return y * self.outer_scale if self.outer_scale != 1 else y
''',
    "log": '''
class CaffeLog(nn.Module):
    """Caffe's Log: log_base(shift + scale * x) (base -1: e)."""

    def __init__(self, scale, shift, base_scale):
        super().__init__()
        self.scale, self.shift, self.base_scale = scale, shift, base_scale

    def forward(self, x):
        y = x
        if self.scale != 1:
            y = y * self.scale
        if self.shift != 0:
            y = y + self.shift
        y = torch.log(y)
        return y * self.base_scale if self.base_scale != 1 else y
''',
    "absval": '''
class AbsVal(nn.Module):
    """Caffe's AbsVal: |x|."""

    def forward(self, x):
        return torch.abs(x)
''',
    "scaled_identity": '''
class TestDropout(nn.Module):
    """Caffe's Dropout at test time with scale_train false: x * (1 - ratio)."""

    def __init__(self, keep):
        super().__init__()
        self.keep = keep

    def forward(self, x):
        return x * self.keep
''',
}
_HELPER_NEEDS = {"max_pool": ["pool_size"], "ave_pool": ["pool_size"]}


# ---------------------------------------------------------------------- names
def _identifier(name, used, reserved, prefix):
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit():
        s = prefix + s
    if keyword.iskeyword(s) or s in reserved or s.startswith("__"):
        s = s + "_"
    base, k = s, 2
    while s in used:
        s = "%s_%d" % (base, k)
        k += 1
    used.add(s)
    return s


def _class_name(name):
    parts = re.split(r"\W+|_", name or "")
    s = "".join(p[:1].upper() + p[1:] for p in parts if p)
    if not s or s[0].isdigit():
        s = "CaffeNet" + s
    return s if not keyword.iskeyword(s) else s + "_"


def _tuple(v):
    return "(%s%s)" % (", ".join(str(int(x)) for x in v), "," if len(v) == 1 else "")


def _f(v):
    """A float32 value as the shortest literal that gives it back."""
    s = str(np.float32(v))
    return s if float(np.float32(float(s))) == float(np.float32(v)) else repr(float(np.float32(v)))


# ---------------------------------------------------------------------- the generator
@dataclass
class _Layer:
    index: int
    name: str
    type: str
    attr: str
    ctor: str
    call: str                 # the forward line
    comment: str = ""
    state: Dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ExportResult:
    path: Optional[str]
    state_dict_path: Optional[str]
    class_name: str
    attributes: Dict[str, str]          # Caffe layer name -> attribute
    source: str
    state: Dict[str, np.ndarray]


def torch_source(net, class_name=None, model_file=None, weights_file=None, state_dict_name="model.pth"):
    """(source, state {key: array}, {Caffe layer: attribute}) of the PyTorch port of ``net``."""
    from engine.proto import caffe_pb2
    refused = []
    for i, layer in enumerate(net.layers):
        if layer.type not in SUPPORTED:
            why = _WHY.get(layer.type) or ("a loss layer (export the deploy net)" if "Loss" in layer.type else
                                           "no PyTorch form in export-torch")
            refused.append("layer '%s' (type %s): %s" % (net.layer_names[i], layer.type, why))
    if refused:
        raise PortError("export-torch cannot export %d layer%s: %s" % (len(refused), "s" * (len(refused) > 1),
                                                                    "; ".join(refused)),
                        layer=None if len(refused) > 1 else refused[0].split("'")[1])
    if net.phase != caffe_pb2.TEST and any(l.type == "Dropout" for l in net.layers):
        raise PortError("export-torch writes the TEST-phase net: Dropout in TRAIN is random (build the net in TEST)")
    used_attrs: set = set()
    used_vars: set = set()
    var_of: Dict[str, str] = {}          # blob -> the Python variable holding its current value
    args: List[str] = []
    layers: List[_Layer] = []
    helpers: List[str] = []
    names = net.blob_names
    for i, layer in enumerate(net.layers):
        lname = net.layer_names[i]
        bots = [names[b] for b in net.bottom_id_vecs[i]]
        tops = [names[t] for t in net.top_id_vecs[i]]
        if layer.type == "Input":
            for t in tops:
                v = _identifier(t, used_vars, _RESERVED_VARS, "b_")
                var_of[t] = v
                args.append(v)
            continue
        if layer.type == "Split":                 # Caffe's inserted copies: the same tensor
            for t in tops:
                var_of[t] = var_of[bots[0]]
            continue
        attr = _identifier(lname, used_attrs, _MODULE_NAMES | {"CAFFE_LAYERS"}, "l_")
        ctor, state, need, call_args = _lower(net, i, layer, [var_of[b] for b in bots])
        for h in need:
            for dep in _HELPER_NEEDS.get(h, []) + [h]:
                if dep not in helpers:
                    helpers.append(dep)
        out_vars = []
        for t in tops:
            if t in bots:
                out_vars.append(var_of[t])        # in place: the variable is rebound
            else:
                v = _identifier(t, used_vars, _RESERVED_VARS | set(args), "b_")
                var_of[t] = v
                out_vars.append(v)
        for t, v in zip(tops, out_vars):
            var_of[t] = v
        lhs = ", ".join(out_vars) + ("," if len(out_vars) == 1 and layer.type == "Slice" else "")
        call = "%s = self.%s(%s)" % (lhs, attr, call_args)
        comment = "%s (%s)%s" % (lname, layer.type, ", in place" if any(t in bots for t in tops) else "")
        layers.append(_Layer(i, lname, layer.type, attr, ctor, call, comment,
                             {"%s.%s" % (attr, k): v for k, v in state.items()}))
    cls = class_name or _class_name(net.name)
    mapping = {l.name: l.attr for l in layers}
    outs = [var_of[o] for o in net.outputs]
    src = io.StringIO()
    w = src.write
    w('"""%s as a PyTorch nn.Module, written by caffe-inspector\'s export-torch.\n\n' % (net.name or "The net"))
    w("Source: %s%s.  The forward pass computes Caffe 1.0's TEST-phase net, layer by\n" % (
        model_file or "(a NetParameter)", "; weights: %s" % weights_file if weights_file else ""))
    w("layer, in Caffe's order (Caffe's pooling sizes and AVE divisor, BatchNorm's scale factor\n"
      "and Scale/Bias axes kept exactly).  This file needs torch only.  Load the weights with:\n\n")
    w("    model = %s()\n    model.load_state_dict(torch.load(%r))\n    model.eval()\n\n" % (cls, state_dict_name))
    w("Caffe layer -> attribute (CAFFE_LAYERS):\n")
    width = max([len(n) for n in mapping] + [1])
    for n, a in mapping.items():
        w("    %s -> self.%s\n" % (n.ljust(width), a))
    w('"""\n')
    w("import torch\nimport torch.nn as nn\n")
    if any(h in helpers for h in ("max_pool", "ave_pool", "lrn_within", "negative_pad_conv")):
        w("import torch.nn.functional as F\n")
    w("\n__all__ = [%r, \"CAFFE_LAYERS\"]\n" % cls)
    for h in helpers:
        w("\n" + _HELPERS[h].strip("\n") + "\n\n")
    w("\nclass %s(nn.Module):\n" % cls)
    w('    """%s: inputs %s; returns %s."""\n\n' % (
        net.name or cls, ", ".join("%s %s" % (a, "x".join(str(d) for d in net.blobs[n].shape))
                                   for a, n in zip(args, net.inputs)),
        outs[0] if len(outs) == 1 else "{%s}" % ", ".join("%r: %s" % (o, v) for o, v in zip(net.outputs, outs))))
    w("    def __init__(self):\n        super().__init__()\n")
    for l in layers:
        w("        self.%s = %s  # %s\n" % (l.attr, l.ctor, l.comment))
    w("\n    def forward(self, %s):\n" % ", ".join(args))
    for l in layers:
        w("        %s\n" % l.call)
    if len(outs) == 1:
        w("        return %s\n" % outs[0])
    else:
        w("        return {%s}\n" % ", ".join("%r: %s" % (o, v) for o, v in zip(net.outputs, outs)))
    w("\n\nCAFFE_LAYERS = {\n")
    for n, a in mapping.items():
        w("    %r: %r,\n" % (n, a))
    w("}\n")
    state: Dict[str, np.ndarray] = {}
    for l in layers:
        state.update(l.state)
    return src.getvalue(), state, mapping, cls


def _arr(blob):
    return np.array(blob.data, dtype=np.float32, copy=True)


def _lower(net, i, layer, bots):
    """(constructor text, {param: array}, helpers needed, call arguments) for layer ``i``."""
    from engine.proto import caffe_pb2
    lp = layer.layer_param
    t = layer.type
    name = net.layer_names[i]
    x = bots[0] if bots else ""
    bshape = tuple(net.bottom_vecs[i][0].shape) if bots else ()

    def refuse(why):
        return PortError("layer '%s' (type %s): %s" % (name, t, why), layer=name)
    if t in ("Convolution", "Deconvolution"):
        if layer.channel_axis != 1:
            raise refuse("convolution on axis %d (PyTorch convolves on axis 1)" % layer.channel_axis)
        nd = layer.num_spatial_axes
        if nd not in (1, 2, 3):
            raise refuse("%d spatial axes (PyTorch has 1-, 2- and 3-d convolutions)" % nd)
        cls = ("nn.Conv%dd" if t == "Convolution" else "nn.ConvTranspose%dd") % nd
        state = {"weight": _arr(layer.blobs[0])}
        if layer.bias_term:
            state["bias"] = _arr(layer.blobs[1])
        opts = ["kernel_size=%s" % _tuple(layer.kernel_shape)]
        if any(v != 1 for v in layer.stride):
            opts.append("stride=%s" % _tuple(layer.stride))
        if any(v > 0 for v in layer.pad):
            opts.append("padding=%s" % _tuple([max(v, 0) for v in layer.pad]))
        if any(v != 1 for v in layer.dilation):
            opts.append("dilation=%s" % _tuple(layer.dilation))
        if layer.group != 1:
            opts.append("groups=%d" % layer.group)
        if not layer.bias_term:
            opts.append("bias=False")
        ctor = "%s(%d, %d, %s)" % (cls, layer.channels, layer.num_output, ", ".join(opts))
        if min(layer.pad) < 0:
            return ("CaffeNegativePadConv(%s, pad=%s)" % (ctor, _tuple(layer.pad)),
                    {"conv." + k: v for k, v in state.items()}, ["negative_pad_conv"], x)
        return ctor, state, [], x
    if t == "Pooling":
        PP = caffe_pb2.PoolingParameter
        pp = lp.pooling_param
        if layer.pool == PP.STOCHASTIC:
            raise refuse("STOCHASTIC pooling has no export-torch form")
        ceil = pp.round_mode != PP.FLOOR
        H, W = bshape[2], bshape[3]
        if pp.global_pooling:
            if layer.pool == PP.MAX:
                return "nn.AdaptiveMaxPool2d(1)", {}, [], x
            return "nn.AdaptiveAvgPool2d(1)", {}, [], x
        k, s, p = (layer.kernel_h, layer.kernel_w), (layer.stride_h, layer.stride_w), (layer.pad_h, layer.pad_w)
        args = "kernel_size=%s, stride=%s, padding=%s, ceil_mode=%s" % (_tuple(k), _tuple(s), _tuple(p), ceil)
        if layer.pool == PP.MAX:
            if 0 <= p[0] <= k[0] // 2 and 0 <= p[1] <= k[1] // 2 and _torch_pool_size(H, k[0], s[0], p[0], ceil) == \
                    layer.pooled_height and _torch_pool_size(W, k[1], s[1], p[1], ceil) == layer.pooled_width:
                return "nn.MaxPool2d(%s)" % args, {}, [], x
            return "CaffeMaxPool2d(%s)" % args.replace("ceil_mode=", "ceil_mode="), {}, ["max_pool"], x
        full = p == (0, 0) and (H - k[0]) % s[0] == 0 and (W - k[1]) % s[1] == 0
        if full:               # every window inside the image: the divisor is kh*kw everywhere
            return "nn.AvgPool2d(kernel_size=%s, stride=%s)" % (_tuple(k), _tuple(s)), {}, [], x
        return "CaffeAvgPool2d(%s)" % args, {}, ["ave_pool"], x
    if t == "LRN":
        r = lp.lrn_param
        if r.norm_region == caffe_pb2.LRNParameter.WITHIN_CHANNEL:
            return "CaffeLRNWithinChannel(%d, %s, %s)" % (r.local_size, _f(r.alpha), _f(r.beta)), {}, \
                ["lrn_within"], x
        return "nn.LocalResponseNorm(%d, alpha=%s, beta=%s, k=%s)" % (r.local_size, _f(r.alpha), _f(r.beta),
                                                                      _f(r.k)), {}, [], x
    if t == "ReLU":
        slope = float(lp.relu_param.negative_slope)
        return ("nn.LeakyReLU(%s)" % _f(slope) if slope else "nn.ReLU()"), {}, [], x
    if t == "PReLU":
        w = _arr(layer.blobs[0]).reshape(-1)
        return "nn.PReLU(%d)" % w.size, {"weight": w}, [], x
    if t == "ELU":
        return "nn.ELU(alpha=%s)" % _f(lp.elu_param.alpha), {}, [], x
    if t == "Sigmoid":
        return "nn.Sigmoid()", {}, [], x
    if t == "TanH":
        return "nn.Tanh()", {}, [], x
    if t == "AbsVal":
        return "AbsVal()", {}, ["absval"], x
    if t == "BNLL":
        return "nn.Softplus()", {}, [], x
    if t == "Power":
        pp = lp.power_param
        return "Power(power=%s, scale=%s, shift=%s)" % (_f(pp.power), _f(pp.scale), _f(pp.shift)), {}, ["power"], x
    if t == "Exp":
        ep = lp.exp_param
        log_base = 1.0 if ep.base == -1 else float(np.log(np.float32(ep.base)))
        inner = float(np.float32(log_base) * np.float32(ep.scale))
        outer = 1.0 if ep.shift == 0 else float(np.float32(np.exp(np.float32(log_base) * np.float32(ep.shift))))
        return "CaffeExp(inner_scale=%r, outer_scale=%r)" % (inner, outer), {}, ["exp"], x
    if t == "Log":
        gp = lp.log_param
        base_scale = 1.0 if gp.base == -1 else float(np.float32(1) / np.log(np.float32(gp.base)))
        return "CaffeLog(scale=%s, shift=%s, base_scale=%r)" % (_f(gp.scale), _f(gp.shift), base_scale), {}, \
            ["log"], x
    if t == "BatchNorm":
        if len(bshape) < 2 or len(bshape) > 5:
            raise refuse("BatchNorm on a %d-d blob (PyTorch's BatchNorm takes 2- to 5-d)" % len(bshape))
        nd = {2: 1, 3: 1, 4: 2, 5: 3}[len(bshape)]
        C = bshape[1]
        eps = _f(layer.eps)
        if not layer.use_global_stats:
            return "nn.BatchNorm%dd(%d, eps=%s, affine=False, track_running_stats=False)" % (nd, C, eps), {}, [], x
        m, v, sf = (np.array(b.data, np.float32) for b in layer.blobs)
        f = np.float32(0) if sf.ravel()[0] == 0 else np.float32(1) / sf.ravel()[0]
        state = {"running_mean": (m * f).astype(np.float32), "running_var": (v * f).astype(np.float32),
                 "num_batches_tracked": np.array(0, np.int64)}
        return "nn.BatchNorm%dd(%d, eps=%s, affine=False)" % (nd, C, eps), state, [], x
    if t in ("Scale", "Bias"):
        two = len(bots) > 1
        pp = lp.scale_param if t == "Scale" else lp.bias_param
        axis = _canonical(pp.axis, len(bshape))
        if t == "Scale":
            bias = bool(lp.scale_param.bias_term)
            state = {}
            if two:
                shape = tuple(net.bottom_vecs[i][1].shape)
                if bias:
                    state["bias"] = _arr(layer.blobs[0]).reshape(shape)
            else:
                shape = tuple(layer.blobs[0].shape)
                state["weight"] = _arr(layer.blobs[0])
                if bias:
                    state["bias"] = _arr(layer.blobs[1]).reshape(shape)
            ctor = "CaffeScale(%s, axis=%d, learned=%s, bias=%s)" % (_tuple(shape), axis, not two, bias)
        else:
            shape = tuple(net.bottom_vecs[i][1].shape) if two else tuple(layer.blobs[0].shape)
            state = {} if two else {"bias": _arr(layer.blobs[0])}
            ctor = "CaffeBias(%s, axis=%d, learned=%s)" % (_tuple(shape), axis, not two)
        return ctor, state, ["scale"], ", ".join(bots)
    if t == "Eltwise":
        ep = lp.eltwise_param
        op = caffe_pb2.EltwiseParameter.EltwiseOp.Name(ep.operation)
        coeffs = [float(c) for c in ep.coeff]
        if op == "SUM" and coeffs and any(c != 1 for c in coeffs):
            ctor = "CaffeEltwise(\"SUM\", coeffs=[%s])" % ", ".join(_f(c) for c in coeffs)
        else:
            ctor = "CaffeEltwise(%r)" % op
        return ctor, {}, ["eltwise"], ", ".join(bots)
    if t == "Concat":
        return "Concat(axis=%d)" % layer.axis, {}, ["concat"], ", ".join(bots)
    if t == "Slice":
        sp = lp.slice_param
        axis = _canonical(sp.axis if not sp.HasField("slice_dim") else sp.slice_dim, len(bshape))
        points = [int(p) for p in sp.slice_point]
        ntop = len(net.top_id_vecs[i])
        ctor = "Slice(axis=%d, %s)" % (axis, "points=%r" % points if points else "parts=%d" % ntop)
        return ctor, {}, ["slice"], x
    if t == "Flatten":
        fp = lp.flatten_param
        return "nn.Flatten(%d, %d)" % (fp.axis, fp.end_axis), {}, [], x
    if t == "Reshape":
        rp = lp.reshape_param
        return "CaffeReshape(%r, axis=%d, num_axes=%d)" % ([int(d) for d in rp.shape.dim], rp.axis, rp.num_axes), \
            {}, ["reshape"], x
    if t == "InnerProduct":
        ip = lp.inner_product_param
        axis = _canonical(ip.axis, len(bshape))
        W = _arr(layer.blobs[0])
        if ip.transpose:
            W = np.ascontiguousarray(W.T)
        state = {"weight": W}
        if ip.bias_term:
            state["bias"] = _arr(layer.blobs[1]).reshape(-1)
        K = int(np.prod(bshape[axis:]))
        return "InnerProduct(%d, %d, bias=%s, axis=%d)" % (K, int(ip.num_output), bool(ip.bias_term), axis), state, \
            ["inner_product"], x
    if t == "Softmax":
        return "nn.Softmax(dim=%d)" % _canonical(lp.softmax_param.axis, len(bshape)), {}, [], x
    if t == "Dropout":
        dp = lp.dropout_param
        if "scale_train" in dp.DESCRIPTOR.fields_by_name and dp.HasField("scale_train") and not dp.scale_train:
            return "TestDropout(%s)" % _f(1 - dp.dropout_ratio), {}, ["scaled_identity"], x
        return "nn.Identity()", {}, [], x
    if t == "Crop":
        cp = lp.crop_param
        axis = _canonical(cp.axis, len(bshape))
        offs = list(layer.offsets[axis:])
        return "Crop(axis=%d, offsets=%r)" % (axis, [int(o) for o in offs]), {}, ["crop"], ", ".join(bots)
    raise refuse("no PyTorch form in export-torch")


def _canonical(axis, ndim):
    return int(axis) + ndim if axis < 0 else int(axis)


def _torch_pool_size(n, k, s, p, ceil):
    span = n + 2 * p - k
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def export_torch(net, path, state_dict_path=None, class_name=None, model_file=None, weights_file=None):
    """Write the module source to ``path`` and its state_dict to ``state_dict_path``
    (default: ``path`` with ``.pth``).  Needs torch (the ``torch`` extra) for the state_dict."""
    torch = require("torch", "torch", "export-torch")
    path = os.fspath(path)
    sd_path = os.fspath(state_dict_path) if state_dict_path else os.path.splitext(path)[0] + ".pth"
    src, state, mapping, cls = torch_source(net, class_name, model_file, weights_file,
                                            state_dict_name=os.path.basename(sd_path))
    with open(path, "w", encoding="utf-8") as f:
        f.write(src)
    from collections import OrderedDict
    sd = OrderedDict((k, torch.from_numpy(np.ascontiguousarray(v))) for k, v in state.items())
    torch.save(sd, sd_path)
    return ExportResult(path, sd_path, cls, mapping, src, state)


# ---------------------------------------------------------------------- verification
@dataclass
class TorchRow:
    layer: str
    type: str
    value: str
    shape: List[int]
    torch_shape: Optional[List[int]]
    max_abs: float
    rel: float
    ok: bool


@dataclass
class TorchVerification:
    rows: List[TorchRow]
    rtol: float
    ok: bool
    max_rel: float

    def format(self):
        out = io.StringIO()
        bad = [r for r in self.rows if not r.ok]
        out.write("PyTorch port vs the engine, per blob: %d values, %s (largest rel %.3g, rtol %g)\n" % (
            len(self.rows), "all within rtol" if self.ok else "%d differ" % len(bad), self.max_rel, self.rtol))
        for r in bad[:40]:
            out.write("  %s (%s) %s: rel %.3g, max abs %.3g%s\n" % (
                r.layer, r.type, r.value, r.rel, r.max_abs,
                "" if r.torch_shape == r.shape else " (shape %s vs %s)" % (r.torch_shape, r.shape)))
        return out.getvalue()


def load_module(model_py):
    """A Python module imported from its file (export-torch's, or a user's own PyTorch port);
    a file that does not import is a PortError naming the file, the line and the exception."""
    path = os.fspath(model_py)
    name = "caffe_port_%s_%d" % (re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0]), abs(hash(path)))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PortError("%s: not a Python file" % path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        sys.modules.pop(name, None)
        raise PortError("%s%s: cannot import the module: %s: %s" % (path, _error_line(e, path), type(e).__name__,
                                                                     " ".join(str(e).split())[:300])) from None
    return mod


def _error_line(e, path):
    """':LINE' of the deepest frame of ``e`` in the file ``path`` (or of a SyntaxError there)."""
    if isinstance(e, SyntaxError) and e.lineno:
        return ":%d" % e.lineno
    line = ""
    tb = e.__traceback__
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(path):
            line = ":%d" % tb.tb_lineno
        tb = tb.tb_next
    return line


def verify_torch(net, model_py, state_dict, inputs=None, rtol=1e-4, seed=0):
    """Run the exported module (torch) and the engine on the same inputs; compare every
    layer's tops (forward hooks on the module's layer attributes) with the engine's values."""
    torch = require("torch", "torch", "verify_torch")
    mod = load_module(model_py)
    cls = getattr(mod, mod.__all__[0]) if getattr(mod, "__all__", None) else None
    mapping = getattr(mod, "CAFFE_LAYERS", None)
    if cls is None or mapping is None:
        raise PortError("%s: not a module written by export-torch (no __all__ / CAFFE_LAYERS)" % model_py)
    model = cls()
    sd = torch.load(os.fspath(state_dict), weights_only=True) if isinstance(state_dict, (str, os.PathLike)) \
        else state_dict
    model.load_state_dict(sd)
    model.eval()
    rng = np.random.default_rng(seed)
    feeds = {}
    given = inputs if isinstance(inputs, dict) else ({net.inputs[0]: inputs} if inputs is not None else {})
    for name in net.inputs:
        feeds[name] = np.asarray(given[name], np.float32) if name in given else \
            rng.standard_normal(net.blobs[name].shape).astype(np.float32)
    set_inputs(net, feeds)
    tr = trace(net)
    values = run(net, tr)
    captured: Dict[str, Tuple] = {}
    hooks = []
    for lname, attr in mapping.items():
        m = getattr(model, attr)

        def hook(_m, _in, out, lname=lname):
            captured[lname] = out if isinstance(out, tuple) else (out,)
        hooks.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(*[torch.from_numpy(feeds[n].copy()) for n in net.inputs])
    finally:
        for h in hooks:
            h.remove()
    rows = []
    for i, lname in enumerate(net.layer_names):
        if lname not in mapping:
            continue
        outs = captured.get(lname)
        for j, a in enumerate(tr.layer_tops[i]):
            act = tr.acts[a]
            ref = values[a]
            got = outs[j].detach().cpu().numpy() if outs is not None and j < len(outs) else None
            if got is None:
                rows.append(TorchRow(lname, act.type, act.label, list(act.shape), None, float("inf"), float("inf"),
                                     False))
                continue
            max_abs, rel = relative(got, ref) if got.shape == ref.shape else (float("inf"), float("inf"))
            rows.append(TorchRow(lname, act.type, act.label, list(act.shape), list(got.shape), max_abs, rel,
                                 rel <= rtol))
    max_rel = max((r.rel for r in rows), default=0.0)
    return TorchVerification(rows, rtol, all(r.ok for r in rows), max_rel)

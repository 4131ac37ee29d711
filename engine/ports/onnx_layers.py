"""One converter per Caffe layer type: the ONNX nodes that compute exactly what the engine's
layer (Caffe 1.0's) computes in Forward, for the shapes the Net was built with.

Each converter takes a :class:`engine.ports.onnx_export.LayerContext` and returns the ONNX
tensors of the layer's tops, in order.  Geometry is read from the engine's layer after its
SetUp/Reshape (pooled sizes, crop offsets, inferred reshape dims), so the export computes
what the engine computes by construction; weights are the layer's param blobs.

:data:`CONVERTERS` maps a type to its converter; :data:`REFUSED` maps the types with no
faithful ONNX form to the reason; :func:`check_net` lists every refusal of a net before
anything is built (docs/ports.md has the table).
"""
from __future__ import annotations

import numpy as np

from engine.proto import caffe_pb2

FLT_MIN = float(np.finfo(np.float32).tiny)
INT64_MIN = -(2 ** 63)
TRAIN, TEST = 0, 1

CONVERTERS = {}
# Types with no faithful ONNX form, and why (checked before anything is built).
REFUSED = {
    "Python": "a Python layer runs the model author's Python code; ONNX has no equivalent (rewrite it as standard "
              "layers, or add a custom op by hand)",
    "Data": "a data layer reads a database (LMDB/LevelDB) and transforms its records; an ONNX graph takes its "
            "input as a tensor: export the deploy net (an Input layer in its place)",
    "ImageData": "a data layer reads image files listed in a text file; ONNX takes tensors as inputs: export "
                 "the deploy net (an Input layer in its place)",
    "HDF5Data": "a data layer reads HDF5 files; ONNX takes tensors as inputs: export the deploy net (an Input "
                "layer in its place)",
    "MemoryData": "a data layer fed from Python arrays between steps; use an Input layer for ONNX",
    "WindowData": "a data layer that crops windows out of image files at random; ONNX takes tensors as inputs",
    "HDF5Output": "HDF5Output writes its bottoms to a file during Forward (a side effect with no ONNX form)",
    "Filter": "Filter's output batch size depends on the data (the selector), while the export writes the static "
              "shapes Caffe computed at Init for every later layer",
}


def register(*types):
    def deco(fn):
        for t in types:
            CONVERTERS[t] = fn
        return fn
    return deco


def exportable_types():
    """The Caffe layer types the exporter maps (some refuse particular settings: see check_net)."""
    return sorted(CONVERTERS)


def refused_types():
    """{type: reason} for the types that are never exported."""
    return dict(REFUSED)


def _conditional_refusal(layer):
    """Why this particular layer (type mapped in general) has no faithful form, or None."""
    t = layer.type
    phase = int(layer.phase)
    if t == "Dropout" and phase == TRAIN:
        return ("Dropout in TRAIN draws a random mask at every Forward; export the TEST phase (there it is the "
                "identity, or x * (1 - ratio) without scale_train)")
    if t == "Pooling" and layer.layer_param.pooling_param.pool == caffe_pb2.PoolingParameter.STOCHASTIC \
            and phase == TRAIN:
        return ("STOCHASTIC pooling in TRAIN samples a random element of each window; export the TEST phase "
                "(there it is a weighted average, which is exported)")
    if t == "SPP" and layer.layer_param.spp_param.pool == caffe_pb2.SPPParameter.STOCHASTIC and phase == TRAIN:
        return "STOCHASTIC pooling in TRAIN samples at random; export the TEST phase"
    if t == "DummyData":
        fillers = list(layer.layer_param.dummy_data_param.data_filler)
        if any(f.type != "constant" for f in fillers):
            kinds = ", ".join(sorted({f.type for f in fillers if f.type != "constant"}))
            return ("DummyData with a random filler (%s) draws new values at every Forward; only constant fillers "
                    "are exported (as constants)" % kinds)
    return None


def check_net(net):
    """[(layer, type, reason)] for every layer of ``net`` that cannot be exported."""
    out = []
    for name, layer in zip(net.layer_names, net.layers):
        t = layer.type
        if t in REFUSED:
            out.append((name, t, REFUSED[t]))
        elif t not in CONVERTERS:
            out.append((name, t, "no ONNX converter for the layer type '%s'" % t))
        else:
            why = _conditional_refusal(layer)
            if why:
                out.append((name, t, why))
    return out


def _f32(v):
    return np.float32(v)


def _tp(ctx):
    return ctx.graph.onnx.TensorProto


# ====================================================================== inputs and constants
@register("Input")
def _input(c):
    return [c.exporter.add_input(name, shape) for name, shape in zip(c.top_names, c.top_shapes)]


@register("Parameter")
def _parameter(c):
    w = c.const(c.param_blob(0).reshape(c.top_shapes[0]), "value")
    return [c.node("Identity", [w], "out")]


@register("DummyData")
def _dummy_data(c):
    # Constant fillers only (_conditional_refusal): Caffe refills each top at every Forward
    # with the same constant, so the top is a constant.
    outs = []
    for j, shape in enumerate(c.top_shapes):
        data = np.array(c.top_blobs[j].data, dtype=np.float32, copy=True).reshape(shape)
        fillers = list(c.param.dummy_data_param.data_filler)
        f = fillers[0] if len(fillers) == 1 else (fillers[j] if fillers else None)
        value = np.float32(f.value) if f is not None else np.float32(0)
        data[...] = value
        outs.append(c.node("Identity", [c.const(data, "value%d" % j)], "out%d" % j))
    return outs


@register("Silence")
def _silence(c):
    return []


@register("Split")
def _split(c):
    # Caffe's Split tops share the bottom's data: the same tensor.
    return [c.x(0)] * len(c.top_names)


# ====================================================================== vision
def _spatial_reshape(c, x, shape, channel_axis):
    """(prefix..., C, spatial...) -> (prod(prefix), C, spatial...) when the channel axis is not 1."""
    if channel_axis == 1:
        return x
    n = int(np.prod(shape[:channel_axis], dtype=np.int64))
    return c.reshape(x, (n,) + tuple(shape[channel_axis:]), "batch_view")


def crop_negative_pads(c, x, spatial, pad, what="crop"):
    """``x`` (N, C, *spatial) cropped by ``-p`` at both ends of each dim whose pad ``p`` is
    negative (caffe.proto's uint32 pad of 2^31 and up, held in Caffe's int: its im2col reads
    from inside the image); the pads left (0 there)."""
    dims = [i for i, p in enumerate(pad) if p < 0]
    if dims:
        x = c.slice(x, [-pad[i] for i in dims], [spatial[i] + pad[i] for i in dims], [2 + i for i in dims], what)
    return x, [max(p, 0) for p in pad]


def _conv_nodes(c, op, name, what):
    """One ``op`` (Conv or ConvTranspose) node per bottom with the layer's geometry; a
    channel axis other than 1 is viewed as (batch, C, spatial...) and the output reshaped.
    A negative pad crops a Conv's input, and grows a ConvTranspose's output by zeros (where
    Caffe's deconvolution writes only its bias)."""
    L = c.layer
    if L.num_spatial_axes < 1:
        c.refuse("a %s with no spatial axis (channel axis last)" % what)
    grow = [max(-p, 0) for p in L.pad] if op == "ConvTranspose" else [0] * len(L.pad)
    ins = [c.param_const(0, "weight")]
    bias = c.param_const(1, "bias") if L.bias_term else None
    if bias is not None and not any(grow):
        ins.append(bias)
    outs = []
    for i, shape in enumerate(c.bottom_shapes):
        tag = "" if len(c.bottom_shapes) == 1 else str(i)
        x = _spatial_reshape(c, c.x(i), shape, L.channel_axis)
        pads = [max(p, 0) for p in L.pad]
        if op == "Conv":
            x, pads = crop_negative_pads(c, x, shape[L.channel_axis + 1:], L.pad, "crop" + tag)
        y = c.node(op, [x] + ins, name + tag, kernel_shape=list(L.kernel_shape), strides=list(L.stride),
                   pads=pads * 2, dilations=list(L.dilation), group=int(L.group))
        if any(grow):
            y = c.pad(y, [0, 0] + grow + [0, 0] + grow, "grow" + tag)
            if bias is not None:
                b = c.reshape(bias, (1, L.num_output) + (1,) * L.num_spatial_axes, "bias_view" + tag)
                y = c.node("Add", [y, b], "bias" + tag)
        outs.append(c.reshape(y, c.top_shapes[i], "out%d" % i) if L.channel_axis != 1 else y)
    return outs


@register("Convolution")
def _convolution(c):
    return _conv_nodes(c, "Conv", "conv", "convolution")


@register("Deconvolution")
def _deconvolution(c):
    # Caffe's deconvolution weight (C_in, C_out/group, k...) is ConvTranspose's layout; the
    # output size stride*(in-1) + dilation*(k-1)+1 - 2*pad is ConvTranspose's with these pads.
    return _conv_nodes(c, "ConvTranspose", "deconv", "deconvolution")


@register("Im2col")
def _im2col(c):
    L = c.layer
    shape = c.bottom_shapes[0]
    ca = L.channel_axis
    x = _spatial_reshape(c, c.x(0), shape, ca)
    ns = L.num_spatial_axes
    if ns < 1:
        c.refuse("Im2col with no spatial axis")
    out_sp = list(L.out_spatial)
    x, pad = crop_negative_pads(c, x, shape[ca + 1:], list(L.pad))
    if any(pad):
        x = c.pad(x, [0, 0] + pad + [0, 0] + pad)
    # Each kernel offset is a strided slice of the padded image (an exact copy); Caffe's
    # column order is channel-major, then kernel offset: (N, C, K, out...) -> (N, C*K, out...).
    parts = []
    for k, offs in enumerate(np.ndindex(*L.kernel_shape)):
        starts = [o * d for o, d in zip(offs, L.dilation)]
        ends = [s + (n - 1) * st + 1 for s, n, st in zip(starts, out_sp, L.stride)]
        sl = c.slice(x, starts, ends, list(range(2, 2 + ns)), "tap%d" % k, steps=list(L.stride))
        parts.append(c.unsqueeze(sl, [2], "tap%d/unsqueeze" % k))
    stacked = parts[0] if len(parts) == 1 else c.node("Concat", parts, "taps", axis=2)
    return [c.reshape(stacked, c.top_shapes[0], "out")]


def _pool_extents(H, k, s, p, P):
    """End padding (beyond Caffe's ``p``) that makes a floor-mode window count equal Caffe's
    pooled size ``P``: every window of Caffe's then lies inside [-p, H + p + e)."""
    return max(0, (P - 1) * s + k - H - 2 * p)


def pooling_nodes(c, x, geom, method, n_tops=1, global_pooling=False, what="pool"):
    """The ONNX form of one Caffe pooling (MAX, AVE or TEST-phase STOCHASTIC) over ``x``
    (N, C, H, W) with Caffe's geometry ``geom`` (kernel, stride, pad, pooled size).  Returns
    [top] or, for MAX with a mask top, [top, mask]."""
    PP = caffe_pb2.PoolingParameter
    if geom.ph < 0 or geom.pw < 0:
        # A negative pad (caffe.proto's uint32 of 2^31 and up, held in Caffe's int): every window
        # starts -pad inside the image.  MAX's windows end at the image's end, AVE's (sum and
        # divisor) at H + pad: the same as Caffe's pooling with no pad of the image cropped
        # at the start (MAX) or at both ends (AVE), keeping Caffe's pooled size.
        if method == PP.MAX and n_tops > 1:
            c.refuse("a MAX pooling's mask top with a negative pad (its indices count in the uncropped image)")
        cut = [max(-geom.ph, 0), max(-geom.pw, 0)]
        end = [geom.H, geom.W] if method == PP.MAX else [geom.H - cut[0], geom.W - cut[1]]
        x = c.slice(x, cut, end, [2, 3], what + "/crop")
        geom = geom._replace(H=end[0] - cut[0], W=end[1] - cut[1], ph=max(geom.ph, 0), pw=max(geom.pw, 0))
    C, H, W = geom.C, geom.H, geom.W
    kh, kw, sh, sw, ph, pw, PH, PW = geom.kh, geom.kw, geom.sh, geom.sw, geom.ph, geom.pw, geom.PH, geom.PW
    # Caffe's rule: the last window starts inside the padded image ((PH-1)*sh < H + ph when
    # padded).  Without padding Caffe does not check: a window starting past the image there
    # has no element (MAX gives -FLT_MAX, AVE divides 0 by a non-positive count).
    if (PH - 1) * sh - ph >= H or (PW - 1) * sw - pw >= W:
        c.refuse("pooled size %dx%d with kernel %dx%d, stride %dx%d over %dx%d: the last window starts past the "
                 "image, where Caffe's output (-FLT_MAX or 0/0) has no ONNX form" % (PH, PW, kh, kw, sh, sw, H, W))
    eh = _pool_extents(H, kh, sh, ph, PH)
    ew = _pool_extents(W, kw, sw, pw, PW)
    if method == PP.MAX:
        if global_pooling and n_tops == 1:
            return [c.node("GlobalMaxPool", [x], what)]
        attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=[ph, pw, ph + eh, pw + ew])
        if n_tops == 1:
            return [c.node("MaxPool", [x], what, **attrs)]
        y, idx = c.node("MaxPool", [x], what, n_out=2, **attrs)
        # ONNX's index counts over the whole (N, C, H, W) tensor; Caffe's mask within the plane.
        plane = c.const(np.int64(H * W), what + "/plane", dtype=np.int64)
        m = c.node("Mod", [idx, plane], what + "/mask_index")
        return [y, c.cast(m, _tp(c).FLOAT, what + "/mask")]
    if method == PP.AVE:
        if global_pooling:
            return [c.node("GlobalAveragePool", [x], what)]
        # Caffe's divisor counts the padding up to the padded border (H + 2p), never beyond:
        # pad explicitly with zeros, then average with the extra end padding excluded.
        if ph or pw:
            x = c.pad(x, [0, 0, ph, pw, 0, 0, ph, pw], what + "/pad")
        return [c.node("AveragePool", [x], what, kernel_shape=[kh, kw], strides=[sh, sw],
                       pads=[0, 0, eh, ew], count_include_pad=0)]
    if method == PP.STOCHASTIC:
        # TEST phase: sum(x^2) / (FLT_MIN + sum(x)) over each window (clipped to the image).
        ones = c.const(np.ones((C, 1, kh, kw), np.float32), what + "/ones")
        attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=[0, 0, eh, ew], group=int(C))
        sq = c.node("Mul", [x, x], what + "/square")
        num = c.node("Conv", [sq, ones], what + "/sum_sq", **attrs)
        den = c.node("Conv", [x, ones], what + "/sum", **attrs)
        den = c.node("Add", [den, c.scalar(FLT_MIN, what + "/flt_min")], what + "/sum_flt_min")
        return [c.node("Div", [num, den], what)]
    c.refuse("unknown pooling method %s" % method)


@register("Pooling")
def _pooling(c):
    L = c.layer
    return pooling_nodes(c, c.x(0), L.geom, L.pool, n_tops=len(c.top_names), global_pooling=L.global_pooling)


@register("SPP")
def _spp(c):
    L = c.layer
    if L.pyramid_height == 1:
        inner = L.pool_layers[0]
        return pooling_nodes(c, c.x(0), inner.geom, inner.pool, what="pool0")
    N = c.bottom_shapes[0][0]
    parts = []
    for i, inner in enumerate(L.pool_layers):
        (y,) = pooling_nodes(c, c.x(0), inner.geom, inner.pool, what="pool%d" % i)
        g = inner.geom
        parts.append(c.reshape(y, (N, g.C * g.PH * g.PW), "flat%d" % i))
    return [c.node("Concat", parts, "concat", axis=1)]


@register("LRN")
def _lrn(c):
    L = c.layer
    LP = caffe_pb2.LRNParameter
    x = c.x(0)
    if L.norm_region == LP.ACROSS_CHANNELS:
        # ONNX LRN: x / (bias + alpha/size * sum of x^2 over the size channels centred on c)^beta,
        # Caffe's scale k + alpha/size * sum, to the power -beta.
        return [c.node("LRN", [x], "lrn", size=int(L.size), alpha=float(L.alpha), beta=float(L.beta),
                       bias=float(L.k))]
    # WITHIN_CHANNEL: x * (1 + alpha * avg(x^2 over size x size, zero padded))^-beta; the
    # windows never pass the padded border, so the divisor is always size^2 (k is unused).
    p = int(L.pre_pad)
    sq = c.node("Mul", [x, x], "square")
    sq = c.pad(sq, [0, 0, p, p, 0, 0, p, p], "square/pad")
    avg = c.node("AveragePool", [sq], "avg", kernel_shape=[L.size, L.size], strides=[1, 1])
    base = c.node("Mul", [avg, c.scalar(L.alpha, "alpha")], "scaled")
    base = c.node("Add", [base, c.scalar(1.0, "one")], "base")
    power = c.node("Pow", [base, c.scalar(-float(L.beta), "neg_beta")], "power")
    return [c.node("Mul", [x, power], "lrn")]


@register("Crop")
def _crop(c):
    L = c.layer
    shape = c.top_shapes[0]
    axes = [i for i in range(len(shape)) if L.offsets[i] != 0 or shape[i] != c.bottom_shapes[0][i]]
    if not axes:
        return [c.node("Identity", [c.x(0)], "crop")]
    return [c.slice(c.x(0), [L.offsets[i] for i in axes], [L.offsets[i] + shape[i] for i in axes], axes, "crop")]


# ====================================================================== common
@register("InnerProduct")
def _inner_product(c):
    L = c.layer
    x = c.reshape(c.x(0), (L.M, L.K), "rows")
    ins = [x, c.param_const(0, "weight")]
    if L.bias_term:
        ins.append(c.param_const(1, "bias"))
    # weight (N, K): y = x W^T; with transpose the weight is stored (K, N): y = x W.
    y = c.node("Gemm", ins, "gemm", transB=0 if L.transpose else 1)
    if tuple(c.top_shapes[0]) == (L.M, L.N):
        return [y]
    return [c.reshape(y, c.top_shapes[0], "out")]


@register("Concat")
def _concat(c):
    if len(c.bottom_names) == 1:
        return [c.x(0)]              # Caffe's top shares the single bottom's data
    return [c.node("Concat", c.bottoms, "concat", axis=int(c.layer.axis))]


@register("Slice")
def _slice(c):
    L = c.layer
    if len(c.top_names) == 1:
        return [c.x(0)]
    outs = c.split(c.x(0), L.sizes, L.axis, "split")
    return list(outs)


@register("Eltwise")
def _eltwise(c):
    L = c.layer
    xs = c.bottoms
    if L.op == L.PROD:
        y = c.node("Mul", [xs[0], xs[1]], "prod1")
        for k, b in enumerate(xs[2:], start=2):
            y = c.node("Mul", [y, b], "prod%d" % k)
        return [y]
    if L.op == L.MAX:
        return [c.node("Max", xs, "max")]
    # SUM: ((c0 x0 + c1 x1) + c2 x2) ..., the products rounded first, as Caffe adds them.
    terms = []
    for k, (coef, b) in enumerate(zip(L.coeffs, xs)):
        terms.append(b if coef == 1 else c.node("Mul", [b, c.scalar(coef, "coeff%d" % k)], "term%d" % k))
    y = c.node("Add", [terms[0], terms[1]], "sum1")
    for k, t in enumerate(terms[2:], start=2):
        y = c.node("Add", [y, t], "sum%d" % k)
    return [y]


@register("Flatten", "Reshape")
def _reshape(c):
    # The engine computed the top shape (axis/end_axis, 0 and -1, axis/num_axes).
    return [c.reshape(c.x(0), c.top_shapes[0], "reshape")]


@register("Tile")
def _tile(c):
    L = c.layer
    reps = [1] * len(c.bottom_shapes[0])
    reps[L.axis] = int(L.tiles)
    return [c.node("Tile", [c.x(0), c.ints(reps, "repeats")], "tile")]


@register("Reduction")
def _reduction(c):
    L = c.layer
    x = c.reshape(c.x(0), (L.num, L.dim), "rows")
    op = {L.SUM: "ReduceSum", L.MEAN: "ReduceSum", L.ASUM: "ReduceL1", L.SUMSQ: "ReduceSumSquare"}[L.op]
    y = c.reduce(op, x, [1], "reduce", keepdims=0)
    if L.coeff != 1:
        y = c.node("Mul", [y, c.scalar(L.coeff, "coeff")], "scaled")
    return [c.reshape(y, c.top_shapes[0], "out")]


@register("Embed")
def _embed(c):
    L = c.layer
    idx = c.cast(c.x(0), _tp(c).INT64, "index")       # static_cast<int>: truncation, as Cast
    y = c.node("Gather", [c.param_const(0, "weight"), idx], "gather", axis=0)
    if L.bias_term:
        y = c.node("Add", [y, c.param_const(1, "bias")], "embed")
    return [y]


@register("BatchReindex")
def _batch_reindex(c):
    idx = c.cast(c.x(1), _tp(c).INT64, "index")
    return [c.node("Gather", [c.x(0), idx], "gather", axis=0)]


@register("ArgMax")
def _argmax(c):
    L = c.layer
    k = int(L.top_k)
    shape = c.bottom_shapes[0]
    if L.has_axis:
        x, axis = c.x(0), int(L.axis)
        dim = shape[axis]
    else:
        dim = int(np.prod(shape[1:], dtype=np.int64))
        x, axis = c.reshape(c.x(0), (shape[0], dim), "rows"), 1
    # Caffe sorts (value, index) pairs descending: among equal values the larger index first.
    # TopK puts the smaller index first, so it runs on the reversed axis: index dim-1-i.
    rev = c.slice(x, [-1], [INT64_MIN], [axis], "reversed", steps=[-1])
    vals, ridx = c.node("TopK", [rev, c.ints([k], "k")], "topk", n_out=2, axis=axis, largest=1, sorted=1)
    idx = c.node("Sub", [c.const(np.int64(dim - 1), "last", dtype=np.int64), ridx], "index")
    idx = c.cast(idx, _tp(c).FLOAT, "index_f")
    if L.has_axis:
        return [vals if L.out_max_val else idx]
    if L.out_max_val:
        both = c.node("Concat", [idx, vals], "index_value", axis=1)
        return [c.reshape(both, c.top_shapes[0], "out")]
    return [c.reshape(idx, c.top_shapes[0], "out")]


@register("Softmax")
def _softmax(c):
    return [c.node("Softmax", [c.x(0)], "softmax", axis=int(c.layer.axis))]


# ====================================================================== neurons
@register("ReLU")
def _relu(c):
    s = float(c.layer.negative_slope)
    if s == 0:
        return [c.node("Relu", [c.x(0)], "relu")]
    return [c.node("LeakyRelu", [c.x(0)], "relu", alpha=s)]


@register("PReLU")
def _prelu(c):
    L = c.layer
    shape = c.bottom_shapes[0]
    slope = c.param_blob(0)
    if L.channel_shared:
        slope = slope.reshape(1)
    else:
        slope = slope.reshape((shape[1],) + (1,) * (len(shape) - 2))
    return [c.node("PRelu", [c.x(0), c.const(slope, "slope")], "prelu")]


@register("ELU")
def _elu(c):
    return [c.node("Elu", [c.x(0)], "elu", alpha=float(c.layer.alpha))]


@register("Sigmoid")
def _sigmoid(c):
    return [c.node("Sigmoid", [c.x(0)], "sigmoid")]


@register("TanH")
def _tanh(c):
    return [c.node("Tanh", [c.x(0)], "tanh")]


@register("AbsVal")
def _absval(c):
    return [c.node("Abs", [c.x(0)], "abs")]


@register("BNLL")
def _bnll(c):
    # Caffe: x > 0 ? x + log(1 + exp(-x)) : log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)).
    x = c.x(0)
    e = c.node("Exp", [c.node("Neg", [c.node("Abs", [x], "abs")], "neg_abs")], "exp")
    lg = c.node("Log", [c.node("Add", [e, c.scalar(1.0, "one")], "one_plus")], "log")
    return [c.node("Add", [c.node("Relu", [x], "pos"), lg], "bnll")]


@register("Threshold")
def _threshold(c):
    gt = c.node("Greater", [c.x(0), c.scalar(c.layer.threshold, "threshold")], "above")
    return [c.cast(gt, _tp(c).FLOAT, "threshold")]


@register("Clip")
def _clip(c):
    # Caffe: max(min, min(x, max)) (min wins when min > max; ONNX Clip gives max there).
    y = c.node("Min", [c.x(0), c.scalar(c.layer.max, "max")], "upper")
    return [c.node("Max", [y, c.scalar(c.layer.min, "min")], "clip")]


@register("Dropout")
def _dropout(c):
    L = c.layer           # TEST only (_conditional_refusal): the identity, or x * (1 - ratio)
    if L.scale_train:
        return [c.node("Identity", [c.x(0)], "dropout")]
    keep = np.float32(1.0 - float(L.threshold))
    return [c.node("Mul", [c.x(0), c.scalar(keep, "keep")], "dropout")]


@register("Power")
def _power(c):
    L = c.layer
    if L.diff_scale == 0:
        value = np.float32(1) if L.power == 0 else np.float32(np.power(L.shift, L.power))
        shape = c.top_shapes[0]
        return [c.node("Expand", [c.scalar(value, "value"), c.ints(shape, "shape")], "power")]
    y = c.x(0)
    if L.scale_ != 1:
        y = c.node("Mul", [y, c.scalar(L.scale_, "scale")], "scaled")
    if L.shift != 0:
        y = c.node("Add", [y, c.scalar(L.shift, "shift")], "shifted")
    if L.power != 1:
        y = c.node("Pow", [y, c.scalar(L.power, "exponent")], "power")
    if y == c.x(0):
        y = c.node("Identity", [y], "power")
    return [y]


@register("Exp")
def _exp(c):
    L = c.layer
    y = c.x(0)
    if L.inner_scale != 1:
        y = c.node("Mul", [y, c.scalar(L.inner_scale, "inner_scale")], "scaled")
    y = c.node("Exp", [y], "exp")
    if L.outer_scale != 1:
        y = c.node("Mul", [y, c.scalar(L.outer_scale, "outer_scale")], "out")
    return [y]


@register("Log")
def _log(c):
    L = c.layer
    y = c.x(0)
    if L.input_scale != 1:
        y = c.node("Mul", [y, c.scalar(L.input_scale, "scale")], "scaled")
    if L.input_shift != 0:
        y = c.node("Add", [y, c.scalar(L.input_shift, "shift")], "shifted")
    y = c.node("Log", [y], "log")
    if L.base_scale != 1:
        y = c.node("Mul", [y, c.scalar(L.base_scale, "base_scale")], "out")
    return [y]


@register("Swish")
def _swish(c):
    x = c.x(0)
    bx = c.node("Mul", [x, c.scalar(c.layer.beta, "beta")], "beta_x")
    return [c.node("Mul", [x, c.node("Sigmoid", [bx], "sigmoid")], "swish")]


# ====================================================================== normalization
def _broadcast_shape(rank, axis, operand_shape):
    """The shape that broadcasts a Scale/Bias operand along x's axes [axis, axis + ndim)."""
    if len(operand_shape) == 0:
        return ()
    return tuple(operand_shape) + (1,) * (rank - axis - len(operand_shape))


@register("BatchNorm")
def _batch_norm(c):
    L = c.layer
    shape = c.bottom_shapes[0]
    rank = len(shape)
    C = int(L.channels)
    bshape = (C,) + (1,) * (rank - 2) if rank >= 2 else (1,)
    x = c.x(0)
    if L.use_global_stats:
        # As the engine (Caffe) computes them, in float32: scale = 1/factor (0 when the
        # factor is 0), mean = scale*m, std = sqrt(scale*v + eps); y = (x - mean) / std.
        sf = np.float32(np.asarray(L.blobs[2].data).reshape(-1)[0])
        scale = np.float32(0) if sf == 0 else np.float32(1) / sf
        mean = (scale * c.param_blob(0)).astype(np.float32)
        var = (scale * c.param_blob(1)).astype(np.float32)
        std = np.sqrt(var + np.float32(L.eps)).astype(np.float32)
        y = c.node("Sub", [x, c.const(mean.reshape(bshape), "mean")], "centered")
        return [c.node("Div", [y, c.const(std.reshape(bshape), "std")], "bn")]
    # Batch statistics (TRAIN, or use_global_stats false): mean and biased variance over
    # every axis but the channels (the running averages Caffe updates are not outputs).
    if rank < 2:
        axes = [0]
    else:
        n = shape[0]
        x = c.reshape(x, (n, C, int(np.prod(shape[2:], dtype=np.int64))), "view")
        axes = [0, 2]
    mean = c.reduce("ReduceMean", x, axes, "mean", keepdims=1)
    d = c.node("Sub", [x, mean], "centered")
    var = c.reduce("ReduceMean", c.node("Mul", [d, d], "square"), axes, "var", keepdims=1)
    std = c.node("Sqrt", [c.node("Add", [var, c.scalar(L.eps, "eps")], "var_eps")], "std")
    y = c.node("Div", [d, std], "bn")
    return [c.reshape(y, c.top_shapes[0], "out")]


def _operand(c, k_bottom, blob_index, axis, what):
    """Scale's/Bias's operand (bottom[1] or a param blob) shaped to broadcast along x."""
    rank = len(c.bottom_shapes[0])
    if len(c.bottom_names) > 1 and k_bottom is not None:
        oshape = c.bottom_shapes[1]
        target = _broadcast_shape(rank, axis, oshape)
        return c.reshape(c.x(1), target, what + "_view") if tuple(target) != tuple(oshape) else c.x(1)
    a = c.param_blob(blob_index)
    target = _broadcast_shape(rank, axis, a.shape)
    return c.const(a.reshape(target), what)


@register("Scale")
def _scale(c):
    L = c.layer
    s = _operand(c, 1, 0, L.axis, "scale")
    y = c.node("Mul", [c.x(0), s], "scaled")
    if L.bias_layer is not None:
        bias = c.param_blob(L.bias_param_id)
        b_axis = 0 if bias.ndim == 0 else L.axis
        b = c.const(bias.reshape(_broadcast_shape(len(c.bottom_shapes[0]), b_axis, bias.shape)), "bias")
        y = c.node("Add", [y, b], "scale")
    return [y]


@register("Bias")
def _bias(c):
    L = c.layer
    bias_axis = c.param.bias_param.axis
    operand_shape = c.bottom_shapes[1] if len(c.bottom_names) > 1 else tuple(L.blobs[0].shape)
    axis = 0 if len(operand_shape) == 0 else (bias_axis + len(c.bottom_shapes[0]) if bias_axis < 0 else bias_axis)
    b = _operand(c, 1, 0, axis, "bias")
    return [c.node("Add", [c.x(0), b], "bias")]


@register("MVN")
def _mvn(c):
    L = c.layer
    num, dim = L._rows(c.bottom_blobs)
    x = c.reshape(c.x(0), (num, dim), "rows")
    inv = np.float32(1.0 / dim if dim else float("inf"))
    s = c.reduce("ReduceSum", x, [1], "sum", keepdims=1)
    mean = c.node("Mul", [s, c.scalar(inv, "inv_dim")], "mean")
    y = c.node("Sub", [x, mean], "centered")
    if c.param.mvn_param.normalize_variance:
        sq = c.reduce("ReduceSum", c.node("Mul", [y, y], "square"), [1], "sum_sq", keepdims=1)
        var = c.node("Mul", [sq, c.scalar(inv, "inv_dim2")], "var")
        std = c.node("Add", [c.node("Sqrt", [var], "sqrt"), c.scalar(L.eps, "eps")], "std")
        y = c.node("Div", [y, std], "normalized")
    return [c.reshape(y, c.top_shapes[0], "out")]


# ====================================================================== recurrent
@register("RNN", "LSTM")
def _recurrent(c):
    """Caffe's unrolled net itself (every timestep's InnerProduct, Eltwise, TanH or LSTMUnit,
    with the weights shared across timesteps), not ONNX's RNN/LSTM ops (no cont input, other
    gate order).  The state Caffe carries inside the layer from one Forward to the next
    (h_0 := the last Forward's h_T; zeros at first) becomes explicit: without expose_hidden
    the model takes ``<layer>/h_0`` (and ``<layer>/c_0``) as inputs and gives ``<layer>/h_T``
    (``<layer>/c_T``) as outputs, to be fed back (model metadata ``caffe.state``)."""
    L = c.layer
    in_map = {"x": c.x(0), "cont": c.x(1)}
    if L.static_input:
        in_map["x_static"] = c.x(2)
    recur_in = list(L.recurrent_input_blob_names())
    recur_out = list(L.recurrent_output_blob_names())
    offset = 2 + int(L.static_input)
    states = []
    for j, name in enumerate(recur_in):
        if L.expose_hidden:
            in_map[name] = c.x(offset + j)
        else:
            shape = tuple(L.recur_input_blobs[j].shape)
            in_map[name] = c.exporter.add_state(c.name, j, name, shape)
            states.append((in_map[name], j, shape))
    outs = c.exporter.inline(c.name, L.unrolled_net, L.last_layer_index, in_map)
    tops = [outs[n] for n in L.output_blob_names()]
    if L.expose_hidden:
        tops += [outs[n] for n in recur_out]
    else:
        for (state_input, j, shape), name in zip(states, recur_out):
            c.exporter.add_state_output(state_input, outs[name], c.name, j, shape)
    return tops


# ====================================================================== recurrent (one step)
@register("LSTMUnit")
def _lstm_unit(c):
    L = c.layer
    n = c.bottom_shapes[0][1]
    d = int(L.hidden_dim)
    c_prev = c.reshape(c.x(0), (n, d), "c_prev")
    X = c.reshape(c.x(1), (n, 4 * d), "gates")
    cont = c.reshape(c.x(2), (n, 1), "cont")
    one = c.scalar(1.0, "one")

    def sigmoid(v, what):
        # lstm_unit_layer.cpp: 1 / (1 + exp(-x))
        e = c.node("Exp", [c.node("Neg", [v], what + "/neg")], what + "/exp")
        return c.node("Reciprocal", [c.node("Add", [one, e], what + "/den")], what)

    def tanh(v, what):
        # 2 * sigmoid(2x) - 1
        two = c.scalar(2.0, what + "/two")
        s = sigmoid(c.node("Mul", [v, two], what + "/2x"), what + "/sigmoid")
        return c.node("Sub", [c.node("Mul", [s, two], what + "/2s"), one], what)

    gi, gf, go, gg = c.split(X, [d, d, d, d], 1, "gate")
    i = sigmoid(gi, "i")
    f = sigmoid(gf, "f")
    zero = c.node("Equal", [cont, c.scalar(0.0, "zero")], "reset")
    f = c.node("Where", [zero, c.scalar(0.0, "zero_f"), c.node("Mul", [cont, f], "cont_f")], "f_cont")
    o = sigmoid(go, "o")
    g = tanh(gg, "g")
    cell = c.node("Add", [c.node("Mul", [f, c_prev], "f_c"), c.node("Mul", [i, g], "i_g")], "c")
    h = c.node("Mul", [o, tanh(cell, "tanh_c")], "h")
    return [c.reshape(cell, c.top_shapes[0], "c_out"), c.reshape(h, c.top_shapes[1], "h_out")]


# ====================================================================== losses and Accuracy
def _labels(c, k, shape, what="label"):
    """Bottom ``k`` as int64 labels of ``shape`` (static_cast<int>: truncation)."""
    lab = c.reshape(c.x(k), shape, what + "_view")
    return c.cast(lab, _tp(c).INT64, what)


def _normalizer(L, mode, outer, inner, valid_count):
    """Caffe's LossLayer normalizer as a float32 number (None: VALID with an ignore label,
    counted in the graph)."""
    LP = caffe_pb2.LossParameter
    if mode == LP.FULL:
        n = outer * inner
    elif mode == LP.VALID:
        if valid_count is not None:
            return None
        n = outer * inner
    elif mode == LP.BATCH_SIZE:
        n = outer
    elif mode == LP.NONE:
        n = 1
    else:
        raise ValueError("Unknown normalization mode")
    return np.float32(max(1.0, float(n)))


@register("SoftmaxWithLoss")
def _softmax_loss(c):
    L = c.layer
    shape = c.bottom_shapes[0]
    axis = int(L.axis)
    outer, inner, C = int(L.outer_num), int(L.inner_num), int(shape[axis])
    prob = c.node("Softmax", [c.x(0)], "prob", axis=axis)
    p3 = c.reshape(prob, (outer, C, inner), "prob3")
    lab = _labels(c, 1, (outer, 1, inner))
    if L.has_ignore_label:
        valid = c.node("Not", [c.node("Equal", [lab, c.const(np.int64(L.ignore_label), "ignore", dtype=np.int64)],
                                      "ignored")], "valid")
        safe = c.node("Where", [valid, lab, c.const(np.int64(0), "zero_label", dtype=np.int64)], "safe_label")
    else:
        valid, safe = None, lab
    picked = c.node("GatherElements", [p3, safe], "picked", axis=1)              # (outer, 1, inner)
    logp = c.node("Log", [c.node("Max", [picked, c.scalar(FLT_MIN, "flt_min")], "floored")], "logp")
    if valid is not None:
        logp = c.node("Where", [valid, logp, c.scalar(0.0, "zero")], "logp_valid")
    total = c.reduce("ReduceSum", logp, [0, 1, 2], "sum", keepdims=0)
    loss = c.node("Neg", [total], "neg_sum")
    norm = _normalizer(L, L.normalization, outer, inner, 1 if L.has_ignore_label else None)
    if norm is None:
        count = c.reduce("ReduceSum", c.cast(valid, _tp(c).FLOAT, "valid_f"), [0, 1, 2], "count", keepdims=0)
        den = c.node("Max", [count, c.scalar(1.0, "one")], "normalizer")
    else:
        den = c.scalar(norm, "normalizer")
    loss = c.node("Div", [loss, den], "loss")
    tops = [c.reshape(loss, c.top_shapes[0], "loss_out")]
    if len(c.top_names) > 1:
        tops.append(c.node("Identity", [prob], "prob_out"))
    return tops


@register("EuclideanLoss")
def _euclidean_loss(c):
    n = c.bottom_shapes[0][0] if c.bottom_shapes[0] else 1
    d = c.node("Sub", [c.x(0), c.reshape(c.x(1), c.bottom_shapes[0], "b_view")], "diff")
    dot = c.reduce("ReduceSumSquare", d, list(range(len(c.bottom_shapes[0]))), "dot", keepdims=0)
    loss = c.node("Div", [dot, c.scalar(np.float32(n) * np.float32(2), "two_n")], "loss")
    return [c.reshape(loss, c.top_shapes[0], "loss_out")]


@register("SigmoidCrossEntropyLoss")
def _sigmoid_ce_loss(c):
    L = c.layer
    shape = c.bottom_shapes[0]
    x = c.x(0)
    t = c.reshape(c.x(1), shape, "target")
    pos = c.cast(c.node("GreaterOrEqual", [x, c.scalar(0.0, "zero")], "nonneg"), _tp(c).FLOAT, "pos")
    # x * (t - pos) - log(1 + exp(x - 2 * x * pos))
    a = c.node("Mul", [x, c.node("Sub", [t, pos], "t_pos")], "x_t")
    two_x_pos = c.node("Mul", [c.node("Mul", [c.scalar(2.0, "two"), x], "two_x"), pos], "two_x_pos")
    e = c.node("Exp", [c.node("Sub", [x, two_x_pos], "arg")], "exp")
    lg = c.node("Log", [c.node("Add", [c.scalar(1.0, "one"), e], "one_plus")], "log")
    terms = c.node("Sub", [a, lg], "terms")
    axes = list(range(len(shape)))
    count = None
    if L.has_ignore_label:
        valid = c.node("Not", [c.node("Equal", [c.cast(t, _tp(c).INT64, "t_int"),
                                                c.const(np.int64(L.ignore_label), "ignore", dtype=np.int64)],
                                      "ignored")], "valid")
        terms = c.node("Where", [valid, terms, c.scalar(0.0, "zero_t")], "terms_valid")
        count = c.reduce("ReduceSum", c.cast(valid, _tp(c).FLOAT, "valid_f"), axes, "count", keepdims=0)
    total = c.reduce("ReduceSum", terms, axes, "sum", keepdims=0)
    loss = c.node("Neg", [total], "neg_sum")
    norm = _normalizer(L, L.normalization, int(L.outer_num), int(L.inner_num), count)
    den = c.node("Max", [count, c.scalar(1.0, "one_n")], "normalizer") if norm is None else \
        c.scalar(norm, "normalizer")
    loss = c.node("Div", [loss, den], "loss")
    return [c.reshape(loss, c.top_shapes[0], "loss_out")]


@register("Accuracy")
def _accuracy(c):
    L = c.layer
    shape = c.bottom_shapes[0]
    axis = int(L.label_axis)
    outer, inner, C = int(L.outer_num), int(L.inner_num), int(shape[axis])
    k = int(L.top_k)
    x3 = c.reshape(c.x(0), (outer, C, inner), "scores")
    lab = _labels(c, 1, (outer, 1, inner))
    valid = None
    if L.has_ignore_label:
        valid = c.node("Not", [c.node("Equal", [lab, c.const(np.int64(L.ignore_label), "ignore", dtype=np.int64)],
                                      "ignored")], "valid")
        lab = c.node("Where", [valid, lab, c.const(np.int64(0), "zero_label", dtype=np.int64)], "safe_label")
    v = c.node("GatherElements", [x3, lab], "label_score", axis=1)               # (outer, 1, inner)
    # Caffe (master) counts the classes scoring >= the label's, the label itself included:
    # a hit when that count minus one is below top_k.
    ge = c.cast(c.node("GreaterOrEqual", [x3, v], "not_below"), _tp(c).FLOAT, "not_below_f")
    n_ge = c.reduce("ReduceSum", ge, [1], "n_not_below", keepdims=1)
    hit = c.node("Less", [n_ge, c.scalar(float(k) + 1.0, "top_k_plus_1")], "hit")
    if valid is not None:
        hit = c.node("And", [hit, valid], "hit_valid")
        count = c.reduce("ReduceSum", c.cast(valid, _tp(c).FLOAT, "valid_f"), [0, 1, 2], "count", keepdims=0)
    else:
        count = c.scalar(np.float32(outer * inner), "count")
    hit_f = c.cast(hit, _tp(c).FLOAT, "hit_f")
    hits = c.reduce("ReduceSum", hit_f, [0, 1, 2], "hits", keepdims=0)
    # count == 0 gives 0 (hits is 0 then: dividing by max(count, 1) gives it)
    acc = c.node("Div", [hits, c.node("Max", [count, c.scalar(1.0, "one")], "den")], "accuracy")
    tops = [c.reshape(acc, c.top_shapes[0], "accuracy_out")]
    if len(c.top_names) > 1:
        # per class: hits / examples of that class (0 for a class with none)
        cls = c.const(np.arange(C, dtype=np.int64).reshape(1, C, 1), "classes", dtype=np.int64)
        onehot = c.node("Equal", [lab, cls], "onehot")                            # (outer, C, inner)
        if valid is not None:
            onehot = c.node("And", [onehot, valid], "onehot_valid")
        onehot_f = c.cast(onehot, _tp(c).FLOAT, "onehot_f")
        nums = c.reduce("ReduceSum", onehot_f, [0, 2], "class_count", keepdims=0)
        class_hits = c.reduce("ReduceSum", c.node("Mul", [onehot_f, hit_f], "class_hit"), [0, 2], "class_hits",
                              keepdims=0)
        per = c.node("Div", [class_hits, c.node("Max", [nums, c.scalar(1.0, "one_c")], "class_den")],
                     "per_class")
        tops.append(c.reshape(per, c.top_shapes[1], "per_class_out"))
    return tops


def _first_labels(c, k, num, what="label"):
    """The first ``num`` values of bottom ``k`` as int64 labels (Caffe reads label[i], i < num)."""
    flat = c.reshape(c.x(k), (int(np.prod(c.bottom_shapes[k], dtype=np.int64)),), what + "_flat")
    if int(np.prod(c.bottom_shapes[k], dtype=np.int64)) != num:
        flat = c.slice(flat, [0], [num], [0], what + "_first")
    return c.cast(flat, _tp(c).INT64, what)


@register("ContrastiveLoss")
def _contrastive_loss(c):
    L = c.layer
    num, channels = c.bottom_shapes[0][0], int(np.prod(c.bottom_shapes[0][1:], dtype=np.int64))
    margin, legacy = L._params()
    a = c.reshape(c.x(0), (num, channels), "a")
    b = c.reshape(c.x(1), (num, channels), "b")
    d = c.node("Sub", [a, b], "diff")
    dist_sq = c.reduce("ReduceSum", c.node("Mul", [d, d], "diff_sq"), [1], "dist_sq", keepdims=0)
    similar = c.node("Not", [c.node("Equal", [_first_labels(c, 2, num, "similar_label"),
                                              c.const(np.int64(0), "zero_label", dtype=np.int64)], "dissimilar")],
                     "similar")
    zero = c.scalar(0.0, "zero")
    if legacy:
        dissim = c.node("Max", [c.node("Sub", [c.scalar(margin, "margin"), dist_sq], "margin_gap"), zero], "dissim")
    else:
        dist = c.node("Max", [c.node("Sub", [c.scalar(margin, "margin"), c.node("Sqrt", [dist_sq], "dist")],
                                     "margin_gap"), zero], "margin_dist")
        dissim = c.node("Mul", [dist, dist], "dissim")
    terms = c.node("Where", [similar, dist_sq, dissim], "terms")
    total = c.reduce("ReduceSum", terms, [0], "sum", keepdims=0)
    per_pair = c.node("Div", [total, c.scalar(np.float32(num), "num")], "per_pair")
    loss = c.node("Div", [per_pair, c.scalar(2.0, "two")], "loss")
    return [c.reshape(loss, c.top_shapes[0], "loss_out")]


@register("HingeLoss")
def _hinge_loss(c):
    L = c.layer
    shape = c.bottom_shapes[0]
    num = int(shape[0])
    dim = int(np.prod(shape, dtype=np.int64)) // num
    a = c.reshape(c.x(0), (num, dim), "scores")
    lab = c.unsqueeze(_first_labels(c, 1, num), [1], "label_col")                 # (num, 1)
    onehot = c.node("Equal", [lab, c.const(np.arange(dim, dtype=np.int64).reshape(1, dim), "classes",
                                           dtype=np.int64)], "onehot")
    flipped = c.node("Where", [onehot, c.node("Neg", [a], "neg"), a], "flipped")
    m = c.node("Max", [c.scalar(0.0, "zero"), c.node("Add", [c.scalar(1.0, "one"), flipped], "margin")], "hinge")
    if L._norm() == "L1":
        total = c.reduce("ReduceL1", m, [0, 1], "sum", keepdims=0)
    else:
        total = c.reduce("ReduceSumSquare", m, [0, 1], "sum", keepdims=0)
    loss = c.node("Div", [total, c.scalar(np.float32(num), "num")], "loss")
    return [c.reshape(loss, c.top_shapes[0], "loss_out")]


@register("MultinomialLogisticLoss")
def _multinomial_logistic_loss(c):
    shape = c.bottom_shapes[0]
    num = int(shape[0])
    dim = int(np.prod(shape, dtype=np.int64)) // num
    p = c.reshape(c.x(0), (num, dim), "probs")
    lab = c.unsqueeze(_first_labels(c, 1, num), [1], "label_col")
    picked = c.node("GatherElements", [p, lab], "picked", axis=1)
    floored = c.node("Max", [picked, c.scalar(np.float32(1e-20), "log_threshold")], "floored")
    total = c.reduce("ReduceSum", c.node("Log", [floored], "log"), [0, 1], "sum", keepdims=0)
    loss = c.node("Div", [c.node("Neg", [total], "neg_sum"), c.scalar(np.float32(num), "num")], "loss")
    return [c.reshape(loss, c.top_shapes[0], "loss_out")]


@register("InfogainLoss")
def _infogain_loss(c):
    L = c.layer
    axis = int(L.axis)
    outer, inner, C = int(L.outer_num), int(L.inner_num), int(L.num_labels)
    prob = c.node("Softmax", [c.x(0)], "prob", axis=axis)
    logp = c.node("Log", [c.node("Max", [prob, c.scalar(np.float32(1e-20), "log_threshold")], "floored")], "logp")
    logp = c.node("Transpose", [c.reshape(logp, (outer, C, inner), "logp3")], "logp_t", perm=[0, 2, 1])
    if len(c.bottom_names) > 2:
        H = c.reshape(c.x(2), (C, C), "H")
    else:
        H = c.const(np.asarray(L.infogain.data, dtype=np.float32).reshape(C, C), "H")
    lab = _labels(c, 1, (outer, inner))
    if L.has_ignore_label:
        valid = c.node("Not", [c.node("Equal", [lab, c.const(np.int64(L.ignore_label), "ignore", dtype=np.int64)],
                                      "ignored")], "valid")
        lab = c.node("Where", [valid, lab, c.const(np.int64(0), "zero_label", dtype=np.int64)], "safe_label")
    else:
        valid = None
    rows = c.node("Gather", [H, lab], "H_rows", axis=0)                          # (outer, inner, C)
    per = c.reduce("ReduceSum", c.node("Mul", [rows, logp], "weighted"), [2], "per", keepdims=0)
    if valid is not None:
        per = c.node("Where", [valid, per, c.scalar(0.0, "zero")], "per_valid")
    loss = c.node("Neg", [c.reduce("ReduceSum", per, [0, 1], "sum", keepdims=0)], "neg_sum")
    norm = _normalizer(L, L.normalization, outer, inner, 1 if L.has_ignore_label else None)
    if norm is None:
        count = c.reduce("ReduceSum", c.cast(valid, _tp(c).FLOAT, "valid_f"), [0, 1], "count", keepdims=0)
        den = c.node("Max", [count, c.scalar(1.0, "one")], "normalizer")
    else:
        den = c.scalar(norm, "normalizer")
    tops = [c.reshape(c.node("Div", [loss, den], "loss"), c.top_shapes[0], "loss_out")]
    if len(c.top_names) > 1:
        tops.append(c.node("Identity", [prob], "prob_out"))
    return tops

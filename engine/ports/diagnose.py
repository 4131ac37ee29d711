"""Fingerprints of the usual port bugs, each tested by reproducing it.

For a layer whose own arithmetic departs (:mod:`engine.ports.compare`), the suspected bug
is re-enacted on the same inputs -- Caffe's layer recomputed by the engine with the
parameter the bug would use (a small net of the layer and its Input, so Caffe's own code
does the arithmetic), or the port's part rerun on a transformed input -- and the cause is
named only when that reproduces the port's output (much closer than Caffe's formula, and
within rounding or a twentieth of the departure).
"""
import math
from typing import List

import numpy as np

from engine.ports.activations import relative

BN_EPS_CANDIDATES = (1e-5, 1e-3, 1e-4, 1e-6, 0.0, 2e-5, 1e-2, 1e-1, 1.001e-5)


class _D:
    """A finding before it becomes a compare.Diagnosis."""

    def __init__(self, layer, kind, text, **evidence):
        self.layer, self.kind, self.text, self.evidence = layer, kind, text, evidence


def diagnose(c):
    """Diagnoses for the comparer ``c`` (engine.ports.compare._Comparer), departing layers first."""
    from engine.ports.compare import Diagnosis
    found: List[_D] = []
    net = c.net
    _unmatched_pooling(c)
    for row in c.rows:
        a = _act_of(c, row)
        if a is None:
            continue
        if row.status == "shape" and _bottoms_fit(c, a):
            d = _shape_diag(c, a, row)
            if d is not None:
                found.append(d)
        elif row.status in ("departs", "small") and a in c.groups:
            d = _own_diag(c, a, row)
            if d is not None:
                found.append(d)
    found.sort(key=lambda d: net.layer_names.index(d.layer) if d.layer in net.layer_names else 1 << 30)
    return [Diagnosis(d.layer, d.kind, d.text, d.evidence) for d in _collapse(c, found)]


def _bottoms_fit(c, a):
    """The value's bottoms are matched with Caffe's shapes (its own shape error is not theirs)."""
    return all(c._shape_ok(c.tr.real(b)) or not c.tr.acts[c.tr.real(b)].bottoms and c.tr.real(b) in c.match
               for b in c.tr.acts[a].bottoms)


def _act_of(c, row):
    return c.row_act.get(id(row))


# ---------------------------------------------------------------------- shapes
def _pool_sizes(layer, H, W):
    """{rule: (PH, PW)} of Caffe's pooling geometry for an H x W bottom."""
    pp = layer.layer_param.pooling_param
    kh, kw = (H, W) if pp.global_pooling else (layer.kernel_h, layer.kernel_w)
    sh, sw, ph, pw = layer.stride_h, layer.stride_w, layer.pad_h, layer.pad_w

    def size(n, k, s, p, rnd, clip):
        o = int(rnd((n + 2 * p - k) / s)) + 1
        if clip and (ph or pw) and (o - 1) * s >= n + p:
            o -= 1
        return o
    return {
        "ceil": (size(H, kh, sh, ph, math.ceil, True), size(W, kw, sw, pw, math.ceil, True)),
        "floor": (size(H, kh, sh, ph, math.floor, True), size(W, kw, sw, pw, math.floor, True)),
        "ceil_noclip": (size(H, kh, sh, ph, math.ceil, False), size(W, kw, sw, pw, math.ceil, False)),
    }


def _pool_shape_text(c, a, port_shape):
    act = c.tr.acts[a]
    layer = c.net.layers[act.layer_index]
    if act.type != "Pooling" or len(act.shape) != 4 or port_shape is None or len(port_shape) != 4:
        return None
    bshape = c.tr.acts[act.bottoms[0]].shape
    sizes = _pool_sizes(layer, bshape[2], bshape[3])
    caffe_mode = "floor" if layer.layer_param.pooling_param.round_mode == 1 else "ceil"
    got = tuple(port_shape[2:])
    want = tuple(act.shape[2:])
    dims = "%dx%d where Caffe's is %dx%d" % (got + want)
    if got == sizes["floor"] and caffe_mode == "ceil":
        return "pool_ceil_floor", ("pooling output %s: the port rounds the output size down (floor) where Caffe "
                                   "rounds up (ceil); use ceil_mode, with Caffe's rule that the last window starts "
                                   "inside the padded image" % dims)
    if got == sizes["ceil_noclip"] and got != want:
        return "pool_ceil_clip", ("pooling output %s: the port rounds up but keeps a last window that starts in "
                                  "the padding (Caffe drops it: the last window must start inside the image + pad)"
                                  % dims)
    if got == sizes["ceil"] and caffe_mode == "floor":
        return "pool_ceil_floor", ("pooling output %s: the port rounds up (ceil) where this layer's round_mode is "
                                   "FLOOR" % dims)
    return "pool_shape", "pooling output %s (kernel, stride or padding differ)" % dims


def _shape_diag(c, a, row):
    act = c.tr.acts[a]
    t = _pool_shape_text(c, a, row.tensor_shape)
    if t is not None:
        return _D(act.layer, t[0], t[1], value=row.label, reproduced=True, port_shape=row.tensor_shape,
                  caffe_shape=row.shape)
    if act.type == "Crop":
        ref = c.tr.acts[c.tr.real(act.bottoms[1])].shape
        if list(row.tensor_shape) == list(ref):
            return _D(act.layer, "crop_axes", "Crop output %s where Caffe's is %s: the port crops the axes before "
                      "crop_param.axis too (Caffe keeps them)" % (_shape(row.tensor_shape), _shape(row.shape)),
                      value=row.label, reproduced=True)
    return _D(act.layer, "shape", "%s output shape %s where Caffe's is %s" % (
        act.type, _shape(row.tensor_shape), _shape(row.shape)), value=row.label, reproduced=True)


def _unmatched_pooling(c):
    """A Pooling value no tensor of its shape matched: the port's pooling right after the
    value's matched bottom, if its shape is off by a row or column, is that value."""
    for row in c.rows:
        if row.matched is not None or row.type != "Pooling":
            continue
        a = _act_of(c, row)
        fr = c._frontier(a)
        if fr is None or not fr[0] or len(fr[1]) != 1:
            continue
        act = c.tr.acts[a]
        for t in c._candidates(act, fr[0], same_shape=False):
            op = c.port.op(t)
            v = c.pvals[t]
            if op not in ("MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool") or v.ndim != 4:
                continue
            if tuple(v.shape[:2]) == tuple(act.shape[:2]) and max(abs(x - y) for x, y in
                                                                  zip(v.shape[2:], act.shape[2:])) <= 2:
                c._pair(a, t, "topology")
                row.tensor, row.matched, row.tensor_shape, row.status = t, "topology", list(v.shape), "shape"
                row.max_abs = row.rel = float("inf")
            break


# ---------------------------------------------------------------------- own arithmetic
def _own_diag(c, a, row):
    group = c.groups[a]
    types = [c.net.layers[i].type for i in group]
    tol = c._tolerance(a)
    port_out = c._run_sub(a)
    caffe = c.values[a]
    base = row.own_rel
    tests = []
    if any(c.tr.acts[f].id in c.tr.inputs.values() for f in c.fronts[a]):
        tests.append(_input_transforms)
    if "BatchNorm" in types:
        tests.append(_batchnorm)
    if "LRN" in types:
        tests.append(_lrn)
    if types == ["Softmax"]:
        tests.append(_softmax)
    if "Pooling" in types:
        tests.append(_ave_border)
    if "Crop" in types:
        tests.append(_crop)
    tests.append(_constant_factor)
    for test in tests:
        d = test(c, a, row, group, port_out, caffe, base, tol)
        if d is not None:
            d.evidence.setdefault("value", row.label)
            d.evidence.setdefault("own_rel", base)
            return d
    return None


def _reproduces(alt_rel, base, tol):
    return alt_rel * 5 <= base and alt_rel <= max(2 * tol, 0.05 * base)


def _best(c, a, port_out, base, tol, variants):
    """The variant (label, arrays) closest to the port's output when it reproduces it."""
    best = None
    for v in variants:
        arr = v[-1]
        if arr is None:
            continue
        r = relative(port_out, arr)[1]
        if best is None or r < best[0]:
            best = (r, v)
    if best is not None and _reproduces(best[0], base, tol):
        return best
    return None


def _caffe_variant(c, a, edits):
    """Caffe's own layers of ``a``'s group recomputed by the engine, ``edits`` {layer index:
    fn(layer_param, blob arrays) -> blob arrays or None} applied, on the inputs the port's
    part was fed; None when it cannot be built."""
    return reenact(c, a, edits, inputs=c.own_inputs(a))


def reenact(c, a, edits=None, dtype=np.float32, inputs=None, group=None, front=None):
    """Caffe's layers ``group`` (default: ``a``'s group) recomputed by the engine from the
    values ``front`` (default: ``a``'s frontier) -- a small net of those layers and an Input,
    so Caffe's own code does the arithmetic -- in ``dtype``, with ``edits`` {layer index:
    fn(layer_param, blob arrays) -> blob arrays or None} applied; ``inputs`` {front value:
    array} (default: the engine's values).  Returns value ``a``, or None when the small net
    cannot be built."""
    from engine.core.errors import CaffeError
    from engine.core.net import TEST, Net
    from engine.proto import caffe_pb2
    tr, net = c.tr, c.net
    edits = edits or {}
    group = c.groups[a] if group is None else group
    front = c.fronts[a] if front is None else front
    inputs = inputs or {}
    p = caffe_pb2.NetParameter(name="variant")
    inp = p.layer.add(name="variant_input", type="Input")
    for f in front:
        inp.top.append("v%d" % f)
        inp.input_param.shape.add().dim.extend(tr.acts[f].shape)
    blobs = {}
    for li in group:
        lp = p.layer.add()
        lp.CopyFrom(net.layers[li].layer_param)
        del lp.include[:]
        del lp.exclude[:]
        del lp.param[:]
        del lp.blobs[:]
        del lp.loss_weight[:]
        lp.propagate_down[:] = []
        del lp.bottom[:]
        del lp.top[:]
        lp.bottom.extend("v%d" % tr.real(b) for b in tr.layer_bottoms[li])
        lp.top.extend("v%d" % t for t in tr.layer_tops[li])
        arrays = [np.array(b.data, dtype=dtype, copy=True) for b in net.layers[li].blobs]
        if li in edits:
            got = edits[li](lp, arrays)
            if got is not None:
                arrays = got
        blobs[lp.name] = arrays
    try:
        mini = Net.from_param(p, phase=TEST, dtype=dtype)
        for layer, name in zip(mini.layers, mini.layer_names):
            for blob, arr in zip(layer.blobs, blobs.get(name, [])):
                blob.data[...] = arr
        for f in front:
            mini.blobs["v%d" % f].data[...] = inputs.get(f, c.values[f])
        mini.Forward()
        return np.array(mini.blobs["v%d" % a].data, copy=True)
    except (CaffeError, ValueError, KeyError):
        return None


def _batchnorm(c, a, row, group, port_out, caffe, base, tol):
    net = c.net
    bns = [li for li in group if net.layers[li].type == "BatchNorm"]
    li = bns[0]
    layer = net.layers[li]
    if len(layer.blobs) < 3:
        return None
    eps = float(layer.layer_param.batch_norm_param.eps)
    sf = float(np.asarray(layer.blobs[2].data).ravel()[0])
    name = net.layer_names[li]
    variants = []

    def with_stats(mean_div, var_div):
        def edit(lp, arrays):
            m, v, _ = arrays
            return [m / np.float32(mean_div), v / np.float32(var_div), np.ones_like(arrays[2])]
        return edit
    if sf != 0:
        for e in sorted({eps, 1e-5}):
            variants.append(("batchnorm_scale_factor_eps",
                             "BatchNorm's variance divided by (scale factor + eps) = (%g + %g) instead of by the "
                             "scale factor %g" % (sf, e, sf), _caffe_variant(c, a, {li: with_stats(sf, sf + e)})))
            variants.append(("batchnorm_scale_factor_eps",
                             "BatchNorm's mean and variance divided by (scale factor + eps) = (%g + %g) instead of "
                             "by the scale factor %g" % (sf, e, sf),
                             _caffe_variant(c, a, {li: with_stats(sf + e, sf + e)})))
        if sf != 1:
            variants.append(("batchnorm_scale_factor",
                             "BatchNorm's stored scale factor (%g) not applied: the port uses the mean and variance "
                             "blobs undivided" % sf, _caffe_variant(c, a, {li: with_stats(1.0, 1.0)})))
            variants.append(("batchnorm_scale_factor",
                             "BatchNorm's mean and variance multiplied by the scale factor (%g) instead of divided"
                             % sf, _caffe_variant(c, a, {li: with_stats(1.0 / sf ** 2, 1.0 / sf ** 2)})))
            variants.append(("batchnorm_scale_factor",
                             "BatchNorm's variance not divided by the stored scale factor (%g); the mean is" % sf,
                             _caffe_variant(c, a, {li: with_stats(sf, 1.0)})))
            variants.append(("batchnorm_scale_factor",
                             "BatchNorm's mean not divided by the stored scale factor (%g); the variance is" % sf,
                             _caffe_variant(c, a, {li: with_stats(1.0, sf)})))
    cands = list(BN_EPS_CANDIDATES)
    est = _estimate_eps(c, a, li, group)
    if est is not None:
        cands.insert(0, est)
    for e in dict.fromkeys(cands):
        if abs(e - eps) <= 1e-12 + 1e-3 * eps:
            continue

        def edit(lp, arrays, e=e):
            lp.batch_norm_param.eps = e
            return None
        variants.append(("batchnorm_eps", "BatchNorm eps %g in the port where Caffe's is %g" % (e, eps),
                         _caffe_variant(c, a, {li: edit})))
    best = _best(c, a, port_out, base, tol, variants)
    if best is None:
        return None
    r, (kind, text, _) = best
    return _D(name, kind, text + " (reproduces the port's output to %s; Caffe's formula is off by %s)" % (
        _num(r), _num(base)), reproduced=True, alt_rel=r, eps=eps, scale_factor=sf)


def _estimate_eps(c, a, li, group):
    """The eps that makes Caffe's BatchNorm give the port's output, per channel least squares
    (only when the group is that BatchNorm alone)."""
    if group != [li]:
        return None
    layer = c.net.layers[li]
    x = c.values[c.tr.real(c.tr.layer_bottoms[li][0])].astype(np.float64)
    y = c._run_sub(a).astype(np.float64)
    sf = float(np.asarray(layer.blobs[2].data).ravel()[0])
    f = 0.0 if sf == 0 else 1.0 / sf
    mean = np.asarray(layer.blobs[0].data, np.float64) * f
    var = np.asarray(layer.blobs[1].data, np.float64) * f
    if x.ndim < 2 or x.shape != y.shape:
        return None
    C = x.shape[1]
    xc = np.moveaxis(x, 1, 0).reshape(C, -1) - mean[:, None]
    yc = np.moveaxis(y, 1, 0).reshape(C, -1)
    den = (yc * yc).sum(1)
    ok = den > 0
    if not ok.any():
        return None
    s = (xc * yc).sum(1)[ok] / den[ok]
    e = float(np.median(s * s - var[ok]))
    if not np.isfinite(e) or e < 0:
        return None
    return float("%.2g" % e)


def _lrn(c, a, row, group, port_out, caffe, base, tol):
    net = c.net
    li = next(li for li in group if net.layers[li].type == "LRN")
    lp0 = net.layers[li].layer_param.lrn_param
    n, alpha, k = int(lp0.local_size), float(lp0.alpha), float(lp0.k)
    within = lp0.norm_region == 1
    nn_ = n * n if within else n
    variants = []
    for factor, what in ((1.0 / nn_, "alpha/%s" % ("size²" if within else "size")),
                         (float(nn_), "alpha×%s" % ("size²" if within else "size")),
                         (1.0 / n if within else 1.0 / (n * n), "alpha/size" if within else "alpha/size²"),
                         (float(n) if within else float(n * n), "alpha×size" if within else "alpha×size²")):
        def edit(lp, arrays, f=factor):
            lp.lrn_param.alpha = alpha * f
            return None
        variants.append(("lrn_alpha", "LRN off by a constant factor in alpha: the port computes with %s where Caffe "
                         "uses alpha (alpha %g, local_size %d; Caffe divides alpha by %s itself)" % (
                             what, alpha, n, "size²" if within else "size"), _caffe_variant(c, a, {li: edit})))
    for kk in (1.0, 0.0, 2.0):
        if kk == k:
            continue

        def edit_k(lp, arrays, kk=kk):
            lp.lrn_param.k = kk
            return None
        variants.append(("lrn_k", "LRN's k is %g in the port where Caffe's is %g" % (kk, k),
                         _caffe_variant(c, a, {li: edit_k})))
    best = _best(c, a, port_out, base, tol, variants)
    if best is None:
        return None
    r, (kind, text, _) = best
    return _D(net.layer_names[li], kind, text + " (reproduces the port to %s)" % _num(r), reproduced=True, alt_rel=r)


def _softmax(c, a, row, group, port_out, caffe, base, tol):
    li = group[0]
    net = c.net
    x = c.values[c.tr.real(c.tr.layer_bottoms[li][0])].astype(np.float64)
    axis = net.layers[li].layer_param.softmax_param.axis % x.ndim
    variants = []
    for ax in range(x.ndim):
        if ax != axis:
            variants.append(("softmax_axis", "Softmax over axis %d in the port where Caffe's axis is %d" % (ax, axis),
                             _softmax_np(x, ax)))
    for ax in range(x.ndim):
        if ax != x.ndim - 1 or ax != axis:
            flat = x.reshape(x.shape[:ax] + (-1,))
            variants.append(("softmax_axis", "Softmax over the axes %d..%d flattened (ONNX Softmax before opset 13) "
                             "where Caffe normalises axis %d only" % (ax, x.ndim - 1, axis),
                             _softmax_np(flat, ax).reshape(x.shape)))
    best = _best(c, a, port_out, base, tol, variants)
    if best is None:
        return None
    r, (kind, text, _) = best
    return _D(net.layer_names[li], kind, text + " (reproduces the port to %s)" % _num(r), reproduced=True, alt_rel=r)


def _softmax_np(x, ax):
    e = np.exp(x - x.max(axis=ax, keepdims=True))
    return e / e.sum(axis=ax, keepdims=True)


def _ave_border(c, a, row, group, port_out, caffe, base, tol):
    net = c.net
    if len(group) != 1 or net.layers[group[0]].type != "Pooling":
        return None
    li = group[0]
    layer = net.layers[li]
    if layer.layer_param.pooling_param.pool != 1:        # AVE
        return None
    x = c.values[c.tr.real(c.tr.layer_bottoms[li][0])]
    H, W = x.shape[2], x.shape[3]
    PH, PW = caffe.shape[2], caffe.shape[3]
    kh, kw = (H, W) if layer.layer_param.pooling_param.global_pooling else (layer.kernel_h, layer.kernel_w)
    sh, sw, ph, pw = layer.stride_h, layer.stride_w, layer.pad_h, layer.pad_w
    inner_h = np.array([i * sh - ph >= 0 and i * sh - ph + kh <= H for i in range(PH)])
    inner_w = np.array([j * sw - pw >= 0 and j * sw - pw + kw <= W for j in range(PW)])
    inner = inner_h[:, None] & inner_w[None, :]
    if inner.all() or not inner.any():
        return None
    scale = max(float(np.abs(caffe).max()), 1e-30)
    d = np.abs(port_out.astype(np.float64) - caffe) / scale
    if float(d[..., inner].max()) > max(tol, 1e-6) or float(d[..., ~inner].max()) <= tol:
        return None
    # which divisor the port uses at the border
    variants = [("ave_pool_border", "AVE pooling differs only on the border: the port divides by the number of "
                 "pixels inside the image (count_include_pad=False) where Caffe counts the padding (up to the padded "
                 "border)", _ave_np(x, kh, kw, sh, sw, ph, pw, PH, PW, "exclude_pad")),
                ("ave_pool_border", "AVE pooling differs only on the border: the port divides by the full kernel "
                 "size kh×kw everywhere, where Caffe stops counting at the padded border",
                 _ave_np(x, kh, kw, sh, sw, ph, pw, PH, PW, "kernel"))]
    best = _best(c, a, port_out, base, tol, variants)
    text = best[1][1] if best is not None else ("AVE pooling differs only on the border: the padding is counted "
                                                "differently in the divisor (Caffe counts padded pixels up to the "
                                                "padded border, not beyond it)")
    return _D(net.layer_names[li], "ave_pool_border", text, reproduced=True,
              border_max_rel=float(d[..., ~inner].max()), interior_max_rel=float(d[..., inner].max()))


def _ave_np(x, kh, kw, sh, sw, ph, pw, PH, PW, mode):
    H, W = x.shape[2], x.shape[3]
    out = np.zeros(x.shape[:2] + (PH, PW), np.float64)
    for i in range(PH):
        h0 = i * sh - ph
        h1 = min(h0 + kh, H + ph)
        for j in range(PW):
            w0 = j * sw - pw
            w1 = min(w0 + kw, W + pw)
            a0, a1, b0, b1 = max(h0, 0), min(h1, H), max(w0, 0), min(w1, W)
            s = x[:, :, a0:a1, b0:b1].astype(np.float64).sum(axis=(2, 3))
            n = {"exclude_pad": (a1 - a0) * (b1 - b0), "kernel": kh * kw}[mode]
            out[:, :, i, j] = s / max(n, 1)
    return out


def _crop(c, a, row, group, port_out, caffe, base, tol):
    net = c.net
    if len(group) != 1 or net.layers[group[0]].type != "Crop":
        return None
    li = group[0]
    x = c.values[c.tr.real(c.tr.layer_bottoms[li][0])]
    axis = net.layers[li].layer_param.crop_param.axis % x.ndim
    want = caffe.shape
    ranges = [range(x.shape[d] - want[d] + 1) if d >= axis else [0] for d in range(x.ndim)]
    total = int(np.prod([len(r) for r in ranges]))
    if total > 20000:
        return None
    caffe_off = list(net.layers[li].offsets[axis:]) if hasattr(net.layers[li], "offsets") else None
    for off in np.ndindex(*[len(r) for r in ranges]):
        sl = tuple(slice(o, o + w) for o, w in zip(off, want))
        if relative(port_out, x[sl])[1] <= tol:
            got = list(off[axis:])
            if got == caffe_off:
                return None
            return _D(net.layer_names[li], "crop_offset", "Crop offset %s in the port where Caffe's is %s: its "
                      "output is the engine's bottom shifted" % (tuple(got), tuple(caffe_off or
                                                                                                  ())),
                      reproduced=True, port_offset=got, caffe_offset=caffe_off)
    return None


def _input_transforms(c, a, row, group, port_out, caffe, base, tol):
    inputs = [f for f in c.fronts[a] if f in c.tr.inputs.values()]
    f = inputs[0]
    x = c.values[f].astype(np.float32)
    if x.ndim < 2:
        return None
    C = x.shape[1]
    layer = c.net.layer_names[c.tr.acts[a].layer_index] if len(group) == 1 else c.net.layer_names[group[0]]
    blob = c.tr.acts[f].blob
    tests = []
    if C > 1:
        tests.append(("bgr_rgb", "channels BGR vs RGB: the port's first layer matches the engine when the input's "
                      "channels are reversed (the port expects the other channel order; reverse its first "
                      "layer's input channels or swap the input)", x[:, ::-1]))
    pre = c.pre
    means = []
    if pre is not None and pre.mean is not None:
        m = np.asarray(pre.mean, np.float32)
        means.append((m.reshape(-1, *m.shape[-2:]).mean(axis=(1, 2)) if m.ndim == 3 else m.ravel(), "the given mean"))
    means += [(np.array(_IMAGENET_BGR, np.float32), "ImageNet's mean (BGR)"),
              (np.array(_IMAGENET_BGR[::-1], np.float32), "ImageNet's mean (RGB)")]
    bshape = (1, C) + (1,) * (x.ndim - 2)
    for m, what in means:
        if m.size != C:
            continue
        mm = m.reshape(bshape)
        tests.append(("mean", "mean not applied as Caffe's pipeline does: the port's first layer matches when its "
                      "input has %s %s added back: the port subtracts the mean itself (feed it the input before "
                      "mean subtraction, or drop its Sub)" % (what, _vec(m)), x + mm))
        tests.append(("mean", "mean not applied: the port's first layer matches when %s %s is subtracted from the "
                      "input once more: the port expects a mean-subtracted input it is not given (or the net's "
                      "input was not mean-subtracted)" % (what, _vec(m)), x - mm))
    scales = []
    if pre is not None:
        for s in (pre.input_scale, pre.raw_scale):
            if s and s != 1:
                scales.append(float(s))
    scales += [255.0, 1.0 / 255.0, 0.017, 1.0 / 0.017]
    for s in dict.fromkeys(scales):
        tests.append(("scale", "scale not applied as Caffe's pipeline does: the port's first layer matches when "
                      "the input is multiplied by %g (the port's input scale differs from the net's by %g)" % (s, s),
                      x * np.float32(s)))
    best = None
    for kind, text, xx in tests:
        out = c._run_sub(a, replace={f: xx})
        r = relative(out, caffe)[1]
        if best is None or r < best[0]:
            best = (r, kind, text)
    if best is not None and _reproduces(best[0], base, max(tol, 1e-5)):
        return _D(layer, best[1], best[2] + " (then within %s)" % _num(best[0]), reproduced=True, alt_rel=best[0],
                  input=blob)
    return None


_IMAGENET_BGR = (104.0, 117.0, 123.0)


def _constant_factor(c, a, row, group, port_out, caffe, base, tol):
    p = port_out.astype(np.float64).ravel()
    q = caffe.astype(np.float64).ravel()
    qq = float(q @ q)
    if qq == 0 or p.shape != q.shape:
        return None
    k = float(p @ q) / qq
    r = relative(p, k * q)[1]
    if not _reproduces(r, base, tol) or abs(k - 1) <= 10 * tol:
        return None
    net = c.net
    types = {net.layers[li].type: li for li in group}
    if "Dropout" in types:
        li = types["Dropout"]
        ratio = float(net.layers[li].layer_param.dropout_param.dropout_ratio)
        for f, what in ((1 - ratio, "× (1 - ratio)"), (1 / (1 - ratio) if ratio < 1 else 0, "× 1/(1 - ratio)")):
            if f and abs(k - f) <= 1e-3 * abs(f):
                return _D(net.layer_names[li], "dropout_scale", "Dropout's scale: the port multiplies by %.6g (%s, "
                          "ratio %g) where Caffe's TEST-phase Dropout passes values through unchanged" % (k, what,
                                                                                                         ratio),
                          reproduced=True, factor=k, alt_rel=r)
    if "Power" in types:
        li = types["Power"]
        pp = net.layers[li].layer_param.power_param
        if pp.scale != 1 and abs(k * pp.scale - 1) <= 1e-3:
            return _D(net.layer_names[li], "power_scale", "Power's scale %g not applied in the port (its output is "
                      "Caffe's divided by the scale)" % pp.scale, reproduced=True, factor=k, alt_rel=r)
    li = group[-1] if len(group) == 1 else group[0]
    return _D(net.layer_names[li], "constant_factor", "off by a constant factor %.6g: a scale missing or applied "
              "twice (a Dropout/Power/Scale multiplier?)" % k, reproduced=True, factor=k, alt_rel=r)


# ---------------------------------------------------------------------- summary
def _collapse(c, found):
    """One line for a finding that holds at several layers of a type (the same kind): "every
    BatchNorm (53 of 53): own error ..., N times its rounding: <the cause>", at the place of
    the first; the layers and values it covers in its evidence."""
    net = c.net
    groups: dict = {}
    for d in found:
        t = net.layers[net.layer_names.index(d.layer)].type if d.layer in net.layer_names else None
        groups.setdefault((d.kind, t), []).append(d)
    out = []
    done = set()
    for d in found:
        t = net.layers[net.layer_names.index(d.layer)].type if d.layer in net.layer_names else None
        key = (d.kind, t)
        ds = groups[key]
        if len(ds) < 2 or t is None:
            out.append(d)
            continue
        if key in done:
            continue
        done.add(key)
        total = sum(1 for l in net.layers if l.type == t)
        rows = [r for r in c.rows if r.label in {x.evidence.get("value") for x in ds}]
        own = [r.own_rel for r in rows if r.own_rel is not None]
        over = [r.over_rounding for r in rows if r.status == "small" and r.over_rounding is not None]
        who = ("every %s (%d of %d)" % (t, len(ds), total)) if len(ds) == total else \
            "%d of %d %s layers (%s)" % (len(ds), total, t, ", ".join(x.layer for x in ds[:6]) +
                                          (", ..." if len(ds) > 6 else ""))
        facts = []
        if own:
            facts.append("own error %s" % _range(own))
        if over and len(over) == len(ds):
            facts.append("%s times its rounding" % _range(over, "%.0f"))
        core = ds[0].text.split(" (reproduces")[0].split(" (then within")[0]
        ev = {"layers": [x.layer for x in ds], "values": [x.evidence.get("value") for x in ds], "count": len(ds),
              "of": total, "reproduced": all(x.evidence.get("reproduced") for x in ds),
              "per_layer": [dict(x.evidence, layer=x.layer, text=x.text) for x in ds]}
        out.append(_D("(every %s)" % t if len(ds) == total else "(%d %s layers)" % (len(ds), t), d.kind,
                      "%s%s: %s" % (who, (": " + ", ".join(facts)) if facts else "", core), **ev))
    return out


def _range(vals, fmt=None):
    lo, hi = min(vals), max(vals)
    f = (lambda v: fmt % v) if fmt else _num
    return f(lo) if f(lo) == f(hi) else "%s to %s" % (f(lo), f(hi))


def _shape(s):
    return "x".join(str(int(d)) for d in s) if s is not None else "-"


def _num(v):
    return "-" if v is None else ("0" if v == 0 else "%.3g" % v)


def _vec(m):
    return "(" + ", ".join("%g" % v for v in np.asarray(m).ravel()[:4]) + (", ..." if np.asarray(m).size > 4 else "") \
        + ")"

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
    found.extend(_softmax_dropped_or_added(c))
    found.sort(key=lambda d: net.layer_names.index(d.layer) if d.layer in net.layer_names else 1 << 30)
    return [Diagnosis(d.layer, d.kind, d.text, d.evidence) for d in _collapse(c, found)]


def _softmax_dropped_or_added(c):
    """A net output made by a Softmax the port does not have (its result is the Softmax's
    input), or a Softmax the port adds after a net output."""
    out = []
    net, tr, port = c.net, c.tr, c.port
    leaves = set(port.leaves())
    for name in net.outputs:
        a = tr.real(tr.final[name])
        act = tr.acts[a]
        if act.type == "Softmax" and a not in c.match:
            b = tr.real(act.bottoms[0])
            t = c.match.get(b)
            if t is not None and t in leaves and c._shape_ok(b):
                row = c.by_act[a]
                row.note = "the port has no Softmax here: its result '%s' is Caffe's '%s'" % (t, tr.acts[b].label)
                out.append(_D(act.layer, "softmax_dropped", "the port drops Caffe's Softmax '%s': its result '%s' is "
                              "Caffe's '%s' (the scores before the Softmax; apply softmax to it, or add the node)" % (
                                  act.layer, t, tr.acts[b].label), reproduced=True, value=act.label, tensor=t))
        elif act.type != "Softmax" and a in c.match:
            t = c.match[a]
            for t2 in port.consumers(t):
                if port.op(t2) == "Softmax" and t2 in leaves and t2 not in c.owner:
                    out.append(_D(act.layer, "softmax_added", "the port adds a Softmax after Caffe's output '%s': its "
                                  "result '%s' is softmax of it (the net's own output is the scores before)" % (
                                      name, t2), reproduced=True, value=None, tensor=t2, informational=True))
    return out


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
        x = c.tr.acts[c.tr.real(act.bottoms[0])].shape
        axis = c.net.layers[act.layer_index].layer_param.crop_param.axis % len(x)
        if list(row.tensor_shape) == list(ref):
            return _D(act.layer, "crop_axes", "Crop output %s where Caffe's is %s: the port crops the axes before "
                      "crop_param.axis too (Caffe keeps them)" % (_shape(row.tensor_shape), _shape(row.shape)),
                      value=row.label, reproduced=True)
        for ax in range(len(x)):
            if ax != axis and list(row.tensor_shape) == [ref[d] if d >= ax else x[d] for d in range(len(x))]:
                return _D(act.layer, "crop_axis", "Crop output %s where Caffe's is %s: the port crops from axis %d, "
                          "Caffe from crop_param.axis %d" % (_shape(row.tensor_shape), _shape(row.shape), ax, axis),
                          value=row.label, reproduced=True)
    return _D(act.layer, "shape", "%s output shape %s where Caffe's is %s" % (
        act.type, _shape(row.tensor_shape), _shape(row.shape)), value=row.label, reproduced=True)


def _unmatched_pooling(c):
    """A value no tensor of its shape matched (a Pooling, a Crop): the port's op of that kind
    right after the value's matched bottom, of the same rank, is that value, with another
    shape (a pooling off by a row or column, a Crop on other axes)."""
    from engine.ports.compare import _fits
    for row in c.rows:
        if row.matched is not None or row.type not in ("Pooling", "Crop"):
            continue
        a = _act_of(c, row)
        fr = c._frontier(a)
        if fr is None or not fr[0] or len(fr[1]) != 1:
            continue
        act = c.tr.acts[a]
        for t in c._candidates(act, fr[0], same_shape=False):
            op = c.port.op(t)
            v = c.pvals[t]
            if not _fits(act.type, op) or v.ndim != len(act.shape) or op in ("Identity", "Pad"):
                continue
            if act.type == "Pooling" and (op not in ("MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool")
                                          or tuple(v.shape[:2]) != tuple(act.shape[:2])
                                          or max(abs(x - y) for x, y in zip(v.shape[2:], act.shape[2:])) > 2):
                break
            c._pair(a, t, "topology")
            row.tensor, row.matched, row.tensor_shape, row.status = t, "topology", list(v.shape), "shape"
            row.max_abs = row.rel = float("inf")
            break


# ---------------------------------------------------------------------- own arithmetic
def _own_diag(c, a, row):
    """The known cause that reproduces the port's own result for value ``a``, else a line
    saying none fits, with the first differing elements."""
    group = c.groups[a]
    types = [c.net.layers[i].type for i in group]
    tol = c._tolerance(a)
    port_out, caffe = c.own_pair(a)
    base = row.own_rel
    tests = []
    if c.port.can_rerun and any(c.tr.acts[f].id in c.tr.inputs.values() for f in c.fronts[a]):
        tests.append(_input_transforms)
    for t, fns in _BY_TYPE:
        if t in types or (t == "Softmax" and types == ["Softmax"]):
            tests.extend(f for f in fns if f not in tests)
    tests.append(_constant_factor)
    tests.append(_weights_differ)
    for test in tests:
        d = test(c, a, row, group, port_out, caffe, base, tol)
        if d is not None:
            d.evidence.setdefault("value", row.label)
            d.evidence.setdefault("own_rel", base)
            return d
    return _no_known_cause(c, a, row, group, port_out, caffe, base)


def _weights_differ(c, a, row, group, port_out, caffe, base, tol):
    """The port's weights are not the net's: a constant of the port's part with as many
    values as a weight blob of the group, that differs from it even as a set of values
    (any layout, flip or transpose keeps the set); none equal to it as a set."""
    if not c.port.can_rerun:
        return None
    consts = c.port.constants([c.match[f] for f in c.fronts[a]], c.match[a])
    if not consts:
        return None
    folded = any(c.net.layers[li].type in ("BatchNorm", "Scale") for li in group)
    for li in group:
        layer = c.net.layers[li]
        if layer.type not in ("Convolution", "Deconvolution", "InnerProduct", "Scale", "Bias", "PReLU") \
                or not layer.blobs:
            continue
        if folded and layer.type in ("Convolution", "Deconvolution", "InnerProduct") and len(group) > 1:
            continue                      # a BatchNorm/Scale folded into its weights changes them rightly
        w = np.sort(np.asarray(layer.blobs[0].data, np.float64).ravel())
        same = [k for k, v in consts.items() if v.size == w.size and v.dtype.kind == "f"]
        if not same:
            continue
        diffs = [(float(np.abs(np.sort(np.asarray(consts[k], np.float64).ravel()) - w).max()), k) for k in same]
        scale = max(float(np.abs(w).max()), 1e-30)
        if min(d for d, _ in diffs) <= 1e-5 * scale:
            continue                      # the same values, arranged otherwise: not this cause
        d, k = min(diffs)
        name = c.net.layer_names[li]
        if d / scale < 1e-2:
            return _D(name, "weights_differ", "the port's weights differ slightly from the net's: its %s (%d values) "
                      "is off %s's weights by up to %.3g of their scale, even as a set of values: recomputed or "
                      "stored at a lower precision; use the caffemodel's values" % (k, w.size, name, d / scale),
                      reproduced=True, constant=k, sorted_max_diff=d, slight=True)
        return _D(name, "weights_differ", "the port's weights are not the net's: its %s (%d values) differs from "
                  "%s's weights even as a set of values (sorted, max |diff| %s, %.3g of their scale): the port "
                  "was made from other weights (another caffemodel, or random fillers): load the same weights in "
                  "both" % (k, w.size, name, _num(d), d / scale), reproduced=True, constant=k, sorted_max_diff=d)
    return None


def _no_known_cause(c, a, row, group, port_out, caffe, base):
    """"no known cause": the size of the departure and the first elements that differ."""
    p = np.asarray(port_out, np.float64).reshape(np.shape(caffe))
    q = np.asarray(caffe, np.float64)
    scale = max(float(np.abs(q).max()) if q.size else 0.0, 1e-30)
    diff = np.abs(p - q)
    thr = min(max(c._tolerance(a), 1e-7) * scale, 0.1 * float(diff.max()) if diff.size else 0.0)
    bad = np.argwhere(diff > thr)
    first = [{"index": [int(i) for i in idx], "port": float(p[tuple(idx)]), "caffe": float(q[tuple(idx)])}
             for idx in bad[:5]]
    where = "; ".join("[%s] port %.6g, Caffe %.6g" % (",".join(str(i) for i in e["index"]), e["port"], e["caffe"])
                      for e in first[:3])
    layer = c.net.layer_names[group[-1]] if len(group) == 1 else next(
        (c.net.layer_names[li] for li in group if c.net.layers[li].type not in ("ReLU", "Dropout", "Split")),
        c.net.layer_names[group[0]])
    frac = float(len(bad)) / max(q.size, 1)
    return _D(layer, "unknown", "no known cause: the layer's own arithmetic departs by %s relative (%d of %d "
              "elements, %.3g%%, off by more than %s)%s" % (_num(base), len(bad), q.size, 100 * frac, _num(thr),
                                                           ("; first differing: " + where) if where else ""),
              reproduced=False, first_differing=first, differing=int(len(bad)), elements=int(q.size))


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
    # variance conventions: the standard deviation where the variance belongs, no square root
    f = 0.0 if sf == 0 else 1.0 / sf

    def var_as(fn):
        def edit(lp, arrays):
            m, v, s_ = arrays
            vv = np.maximum(fn(np.asarray(v, np.float64) * f), 0.0)
            return [m * np.asarray(f, m.dtype), vv.astype(v.dtype), np.ones_like(s_)]
        return edit
    variants.append(("batchnorm_variance", "BatchNorm's variance taken as a standard deviation: the port divides by "
                     "sqrt(sqrt(var) + eps) (it was given sqrt(var), or it squares nothing): give it the variance",
                     _caffe_variant(c, a, {li: var_as(np.sqrt)})))
    variants.append(("batchnorm_variance", "BatchNorm's standard deviation squared once more: the port divides by "
                     "sqrt(var² + eps) (given the variance where it expects a standard deviation, or squaring it)",
                     _caffe_variant(c, a, {li: var_as(np.square)})))
    variants.append(("batchnorm_variance", "BatchNorm divides by (var + eps) with no square root (the variance used "
                     "as the standard deviation)", _caffe_variant(c, a, {li: var_as(lambda v: (v + eps) ** 2 - eps)})))
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
    x = _own_bottom(c, a, li).astype(np.float64)
    y = np.asarray(c.own_pair(a)[0], np.float64)
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
    for region, rname in ((0, "ACROSS_CHANNELS"), (1, "WITHIN_CHANNEL")):
        if region == lp0.norm_region:
            continue
        for f_, what in ((1.0, ""), (float(n), " and alpha×size"), (1.0 / n, " and alpha/size")):
            def edit_r(lp, arrays, region=region, f_=f_):
                lp.lrn_param.norm_region = region
                lp.lrn_param.alpha = alpha * f_
                return None
            variants.append(("lrn_region", "LRN normalises %s in the port%s where Caffe's layer is %s" % (
                rname, what, "WITHIN_CHANNEL" if within else "ACROSS_CHANNELS"), _caffe_variant(c, a, {li: edit_r})))
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
    x = _own_bottom(c, a, li).astype(np.float64)
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
    x = _own_bottom(c, a, li)
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
    return _pool_np(x, 1, kh, kw, sh, sw, ph, pw, ph, pw, PH, PW, divisor=mode)


def _crop(c, a, row, group, port_out, caffe, base, tol):
    net = c.net
    if len(group) != 1 or net.layers[group[0]].type != "Crop":
        return None
    li = group[0]
    x = _own_bottom(c, a, li)
    cp = net.layers[li].layer_param.crop_param
    axis = cp.axis % x.ndim
    want = caffe.shape
    ranges = [range(x.shape[d] - want[d] + 1) for d in range(x.ndim)]
    total = int(np.prod([len(r) for r in ranges]))
    if total > 20000:
        return None
    caffe_off = list(net.layers[li].offsets[axis:]) if hasattr(net.layers[li], "offsets") else None
    given = [int(o) for o in cp.offset]

    def from_axis(ax):
        """Caffe's rule for the offsets with crop_param.axis = ax: one offset for every axis
        from ax, or one each."""
        return [0] * ax + [(given[0] if len(given) == 1 else given[d - ax] if d - ax < len(given) else 0)
                           if given else 0 for d in range(ax, x.ndim)]
    for off in np.ndindex(*[len(r) for r in ranges]):
        sl = tuple(slice(o, o + w) for o, w in zip(off, want))
        if relative(port_out, x[sl])[1] <= tol:
            full = [int(o) for o in off]
            if full[axis:] == caffe_off and not any(full[:axis]):
                return None
            other = [ax for ax in range(x.ndim) if ax != axis and from_axis(ax) == full]
            if other:
                return _D(net.layer_names[li], "crop_axis", "Crop from axis %d in the port where Caffe's "
                          "crop_param.axis is %d (offsets %s applied from another axis)" % (
                              other[0], axis, tuple(given)), reproduced=True, port_offset=full,
                          caffe_offset=[0] * axis + list(caffe_off or []))
            return _D(net.layer_names[li], "crop_offset", "Crop offset %s in the port where Caffe's is %s: its "
                      "output is the engine's bottom shifted" % (tuple(full[axis:]) if not any(full[:axis])
                                                                 else tuple(full), tuple(caffe_off or ())),
                      reproduced=True, port_offset=full[axis:] if not any(full[:axis]) else full,
                      caffe_offset=caffe_off)
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
        if m.ndim == 3 and tuple(m.shape) == tuple(x.shape[1:]):
            mc = m.mean(axis=(1, 2))
            tests.append(("mean", "mean not applied as Caffe's pipeline does: the port's first layer matches when its "
                          "input has the mean image added back: the port subtracts the mean image itself (feed it "
                          "the input before mean subtraction, or drop its Sub)", x + m[None]))
            tests.append(("mean_image_vs_channel", "a mean image vs per-channel means: the port subtracts per-channel "
                          "means %s itself where the net's pipeline subtracts a mean image (the port's first layer "
                          "matches when they are added back; fed the raw input it would be off by the image's "
                          "departure from its channel means): subtract the same mean in both" % _vec(mc),
                          x + mc.reshape((1, -1) + (1,) * (x.ndim - 2))))
        else:
            means.append((m.reshape(-1, *m.shape[-2:]).mean(axis=(1, 2)) if m.ndim == 3 else m.ravel(),
                          "the given mean"))
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


# ---------------------------------------------------------------------- more layer types
def _own_bottom(c, a, li, k=0):
    """The value layer ``li`` of ``a``'s group reads as its bottom ``k``: what the port's
    part was fed when it is on the frontier, else the engine's."""
    b = c.tr.real(c.tr.layer_bottoms[li][k])
    ins = c.own_inputs(a)
    return np.asarray(ins.get(b, c.values[b]))


def _found(c, li, variants, port_out, base, tol, a, suffix=" (reproduces the port to %s)"):
    best = _best(c, a, port_out, base, tol, variants)
    if best is None:
        return None
    r, v = best
    return _D(c.net.layer_names[li], v[0], v[1] + suffix % _num(r), reproduced=True, alt_rel=r)


def _weights_variant(c, a, li, fn):
    """Caffe's group with layer ``li``'s weight blob replaced by ``fn(weights)`` (None: skip)."""
    w = np.asarray(c.net.layers[li].blobs[0].data)
    try:
        new = fn(np.array(w, copy=True))
    except ValueError:
        return None
    if new is None or new.size != w.size or np.array_equal(new.reshape(w.shape), w):
        return None

    def edit(lp, arrays):
        return [new.reshape(w.shape).astype(arrays[0].dtype)] + arrays[1:]
    return _caffe_variant(c, a, {li: edit})


def _first_of(c, group, type_):
    return next(li for li in group if c.net.layers[li].type == type_)


def _weighted(c, group, type_, ndim):
    """(layer index, layer, its weight blob) of the group's first ``type_`` layer, or None
    when the weight is not ``ndim``-d."""
    li = _first_of(c, group, type_)
    layer = c.net.layers[li]
    w = np.asarray(layer.blobs[0].data) if layer.blobs else None
    return None if w is None or w.ndim != ndim else (li, layer, w)


def _convolution(c, a, row, group, port_out, caffe, base, tol):
    found = _weighted(c, group, "Convolution", 4)
    if found is None:
        return None
    li, layer, w = found
    O, I, kh, kw = w.shape
    v = [("kernel_flipped", "the kernel is flipped in H and W (a true convolution where Caffe, like every deep "
          "learning framework, correlates): flip the weights [:, :, ::-1, ::-1]",
          _weights_variant(c, a, li, lambda x: x[:, :, ::-1, ::-1]))]
    if kh > 1 and kw > 1:
        v.append(("kernel_flipped", "the kernel is flipped in H only: flip the weights [:, :, ::-1, :]",
                  _weights_variant(c, a, li, lambda x: x[:, :, ::-1, :])))
        v.append(("kernel_flipped", "the kernel is flipped in W only: flip the weights [:, :, :, ::-1]",
                  _weights_variant(c, a, li, lambda x: x[:, :, :, ::-1])))
    if kh == kw and kh > 1:
        v.append(("kernel_transposed", "the kernel is transposed (kh and kw swapped): the port's weights are "
                  "Caffe's with the last two axes swapped; transpose them back",
                  _weights_variant(c, a, li, lambda x: x.transpose(0, 1, 3, 2))))
    if kh * kw > 1 and I > 1:
        v.append(("kernel_layout", "the weights in OHWI order read as OIHW (Caffe's O x I x H x W): the port's "
                  "kernel is Caffe's reordered through O x H x W x I; convert with transpose(0, 3, 1, 2) from OHWI",
                  _weights_variant(c, a, li, lambda x: x.transpose(0, 2, 3, 1).reshape(x.shape))))
        v.append(("kernel_layout", "Caffe's OIHW weights read as OHWI: the port's kernel is Caffe's buffer taken as "
                  "O x H x W x I; convert with transpose(0, 2, 3, 1) from OIHW",
                  _weights_variant(c, a, li, lambda x: x.reshape(O, kh, kw, I).transpose(0, 3, 1, 2))))
        v.append(("kernel_layout", "the weights in HWIO order (TensorFlow's) read as OIHW: convert with "
                  "transpose(3, 2, 0, 1) from HWIO",
                  _weights_variant(c, a, li, lambda x: x.transpose(2, 3, 1, 0).reshape(x.shape))))
        v.append(("kernel_layout", "Caffe's OIHW weights read as HWIO (TensorFlow's): convert with "
                  "transpose(2, 3, 1, 0) from OIHW",
                  _weights_variant(c, a, li, lambda x: x.reshape(kh, kw, I, O).transpose(3, 2, 0, 1))))
    if I > 1:
        v.append(("kernel_channels_reversed", "the weights' input channels are reversed (channel order BGR vs "
                  "RGB at this layer): reverse axis 1 of the weights",
                  _weights_variant(c, a, li, lambda x: x[:, ::-1])))
    return _found(c, li, v, port_out, base, tol, a)


def _deconvolution(c, a, row, group, port_out, caffe, base, tol):
    found = _weighted(c, group, "Deconvolution", 4)
    if found is None:
        return None
    li, layer, w = found
    I, Og, kh, kw = w.shape
    g = int(layer.layer_param.convolution_param.group or 1)
    v = [("deconv_kernel_flipped", "the Deconvolution kernel is flipped in H and W: flip the weights "
          "[:, :, ::-1, ::-1]", _weights_variant(c, a, li, lambda x: x[:, :, ::-1, ::-1])),
         ("deconv_weight_layout", "the Deconvolution weights read as (output, input) where Caffe's are (input, "
          "output / group, kh, kw) (ConvTranspose's layout too): keep Caffe's axes, do not swap them",
          _weights_variant(c, a, li, lambda x: x.transpose(1, 0, 2, 3).reshape(x.shape)))]
    if g > 1 and I % g == 0:
        v.append(("deconv_groups", "the Deconvolution weights' input and output axes swapped within each of the %d "
                  "groups: Caffe's are (input, output / group, kh, kw), per group in order" % g,
                  _weights_variant(c, a, li, lambda x: x.reshape(g, I // g, Og, kh, kw)
                                   .transpose(0, 2, 1, 3, 4).reshape(x.shape))))
        v.append(("deconv_groups", "the Deconvolution's %d groups taken in another order: the weights of the "
                  "groups are permuted" % g, _weights_variant(c, a, li, lambda x: x.reshape(g, I // g, Og, kh, kw)
                                                              [::-1].reshape(x.shape))))
    return _found(c, li, v, port_out, base, tol, a)


def _inner_product(c, a, row, group, port_out, caffe, base, tol):
    found = _weighted(c, group, "InnerProduct", 2)
    if found is None or found[1].layer_param.inner_product_param.transpose:
        return None
    li, layer, w = found
    N, K = w.shape
    v = [("ip_weight_reshaped", "the InnerProduct weight (%d x %d, output x input) reshaped to %d x %d instead of "
          "transposed: use W.T (or Gemm's transB=1)" % (N, K, K, N),
          _weights_variant(c, a, li, lambda x: x.reshape(K, N).T))]
    x = _own_bottom(c, a, li)
    axis = layer.layer_param.inner_product_param.axis % max(x.ndim, 1)
    rest = x.shape[axis:]
    if len(rest) == 3 and rest[0] > 1 and rest[1] * rest[2] > 1:
        C, H, W = rest
        v.append(("ip_flatten_order", "the input flattened in H x W x C order (NHWC) before the InnerProduct, where "
                  "Caffe flattens C x H x W: flatten NCHW (or permute the weight's input axis accordingly)",
                  _weights_variant(c, a, li, lambda z: z.reshape(N, H, W, C).transpose(0, 3, 1, 2).reshape(N, K))))
        v.append(("ip_flatten_order", "the InnerProduct's weight input axis taken in H x W x C order where the "
                  "input is flattened C x H x W: reorder the weights from NHWC to NCHW flattening",
                  _weights_variant(c, a, li, lambda z: z.reshape(N, C, H, W).transpose(0, 2, 3, 1).reshape(N, K))))
    return _found(c, li, v, port_out, base, tol, a)


def _scale(c, a, row, group, port_out, caffe, base, tol):
    """The BatchNorm+Scale split: the Scale missing, applied twice, gamma and beta swapped;
    Scale's axis (the multiplier broadcast on another axis)."""
    li = _first_of(c, group, "Scale")
    layer = c.net.layers[li]
    if not layer.blobs:
        return None
    name = c.net.layer_names[li]
    has_bias = len(layer.blobs) > 1
    bn = any(c.net.layers[k].type == "BatchNorm" for k in group if k < li) or \
        (li > 0 and c.net.layers[li - 1].type == "BatchNorm")
    after = " after the BatchNorm" if bn else ""

    def arrays_edit(fn):
        def edit(lp, arrays):
            return fn(arrays)
        return edit
    v = [("scale_missing", "the Scale%s is missing in the port (its gamma%s never applied): the port's value is "
          "Caffe's before '%s'" % (after, " and beta" if has_bias else "", name),
          _caffe_variant(c, a, {li: arrays_edit(lambda ar: [np.ones_like(ar[0])] + [np.zeros_like(x)
                                                                                     for x in ar[1:]])})),
         ("scale_twice", "the Scale%s applied twice (gamma%s applied again on top of a node that already has "
          "them, e.g. folded into the BatchNorm and kept as a Scale)" % (after, " and beta" if has_bias else ""),
          _caffe_variant(c, a, {li: arrays_edit(lambda ar: [ar[0] * ar[0]] + ([ar[1] * ar[0] + ar[1]]
                                                                             if len(ar) > 1 else []))}))]
    if has_bias and layer.blobs[0].count == layer.blobs[1].count:
        v.append(("scale_gamma_beta_swapped", "the Scale's gamma and beta swapped (the multiplier used as the bias "
                  "and the bias as the multiplier)", _caffe_variant(c, a, {li: arrays_edit(
                      lambda ar: [ar[1].reshape(ar[0].shape), ar[0].reshape(ar[1].shape)] + ar[2:])})))
    # Scale's axis: the multiplier broadcast along another axis of the same length
    x = _own_bottom(c, a, li)
    sp = layer.layer_param.scale_param
    axis = sp.axis % max(x.ndim, 1)
    gshape = tuple(layer.blobs[0].shape)
    if len(gshape) == 1 and len(layer.layer_param.bottom) == 1:
        for d in range(x.ndim):
            if d != axis and x.shape[d] == gshape[0]:
                def edit(lp, arrays, d=d):
                    lp.scale_param.axis = d
                    return None
                v.append(("scale_axis", "the Scale's multiplier broadcast along axis %d where Caffe's axis is %d "
                          "(NumPy-style broadcasting from the last axis, or another layout)" % (d, axis),
                          _caffe_variant(c, a, {li: edit})))
    return _found(c, li, v, port_out, base, tol, a)


def _eltwise(c, a, row, group, port_out, caffe, base, tol):
    """Eltwise's coefficients (fitted by least squares) and its operation."""
    li = _first_of(c, group, "Eltwise")
    layer = c.net.layers[li]
    ep = layer.layer_param.eltwise_param
    nb = len(c.tr.layer_bottoms[li])
    xs = [_own_bottom(c, a, li, k).astype(np.float64).ravel() for k in range(nb)]
    name = c.net.layer_names[li]
    op = ep.operation      # 0 PROD, 1 SUM, 2 MAX
    ops = {0: "PROD", 1: "SUM", 2: "MAX"}
    v = []
    for other in (0, 1, 2):
        if other == op:
            continue

        def edit(lp, arrays, other=other):
            lp.eltwise_param.operation = other
            del lp.eltwise_param.coeff[:]
            return None
        v.append(("eltwise_operation", "Eltwise computes %s in the port where Caffe's is %s" % (ops[other], ops[op]),
                  _caffe_variant(c, a, {li: edit})))
    found = _found(c, li, v, port_out, base, tol, a)
    if found is not None or op != 1 or len(group) != 1:
        return found
    y = np.asarray(port_out, np.float64).ravel()
    A = np.stack(xs, axis=1)
    k, *_ = np.linalg.lstsq(A, y, rcond=None)
    fit = A @ k
    r = relative(fit, y)[1]
    caffe_k = list(ep.coeff) or [1.0] * nb
    if not _reproduces(r, base, tol) or np.allclose(k, caffe_k, rtol=1e-3, atol=1e-4):
        return None
    ks = [float("%.4g" % v_) for v_ in k]
    return _D(name, "eltwise_coeff", "Eltwise SUM with coefficients %s in the port where Caffe's are %s (fitted; "
              "reproduces the port to %s)" % (_vec(ks), _vec(caffe_k), _num(r)), reproduced=True, port_coeff=ks,
              caffe_coeff=[float(x) for x in caffe_k], alt_rel=r)


def _prelu(c, a, row, group, port_out, caffe, base, tol):
    li = _first_of(c, group, "PReLU")
    layer = c.net.layers[li]
    slopes = np.asarray(layer.blobs[0].data)
    shared = layer.layer_param.prelu_param.channel_shared
    v = []
    if not shared and slopes.size > 1:
        v.append(("prelu_channel_shared", "PReLU with one slope for every channel (the first channel's, %g) where "
                  "Caffe's has one per channel (channel_shared false)" % float(slopes.ravel()[0]),
                  _weights_variant(c, a, li, lambda x: np.full_like(x, x.ravel()[0]))))
        v.append(("prelu_channel_shared", "PReLU with one slope for every channel (their mean, %g) where Caffe's "
                  "has one per channel (channel_shared false)" % float(slopes.mean()),
                  _weights_variant(c, a, li, lambda x: np.full_like(x, x.mean()))))
    x = _own_bottom(c, a, li).astype(np.float64)
    if shared and x.ndim >= 2:
        # the port has one slope per channel: fit each channel's slope on the negative side
        y = np.asarray(port_out, np.float64).reshape(x.shape)
        neg = x < 0
        C = x.shape[1]
        got = []
        for ch in range(C):
            m = neg[:, ch]
            xv, yv = x[:, ch][m], y[:, ch][m]
            got.append(float(xv @ yv / (xv @ xv)) if xv.size and (xv @ xv) > 0 else float("nan"))
        got_arr = np.array(got)
        ok = np.isfinite(got_arr)
        if ok.sum() > 1 and np.ptp(got_arr[ok]) > 1e-3 * max(abs(float(slopes.ravel()[0])), 1e-6):
            alt = np.where(x > 0, x, x * np.where(ok, got_arr, 0).reshape((1, C) + (1,) * (x.ndim - 2)))
            r = relative(alt, y)[1]
            if _reproduces(r, base, tol):
                return _D(c.net.layer_names[li], "prelu_channel_shared", "PReLU with a slope per channel (%s) "
                          "where Caffe's layer is channel_shared (one slope, %g)" % (
                              _vec(got_arr), float(slopes.ravel()[0])), reproduced=True, alt_rel=r)
    return _found(c, li, v, port_out, base, tol, a)


def _pool_pads(c, a, row, group, port_out, caffe, base, tol):
    """Pooling with the same output size but the windows shifted: the padding put on one side."""
    if len(group) != 1:
        return None
    li = group[0]
    layer = c.net.layers[li]
    pp = layer.layer_param.pooling_param
    if pp.global_pooling or pp.pool not in (0, 1):
        return None
    x = _own_bottom(c, a, li).astype(np.float64)
    if x.ndim != 4:
        return None
    PH, PW = caffe.shape[2], caffe.shape[3]
    kh, kw, sh, sw, ph, pw = layer.kernel_h, layer.kernel_w, layer.stride_h, layer.stride_w, layer.pad_h, layer.pad_w
    if not ph and not pw:
        return None
    v = []
    for bh in range(2 * ph + 1):
        for bw in range(2 * pw + 1):
            if (bh, bw) == (ph, pw) or (bh != ph and bw != pw and (bh, bw) not in ((0, 0), (2 * ph, 2 * pw))):
                continue
            out = _pool_np(x, pp.pool, kh, kw, sh, sw, bh, bw, 2 * ph - bh, 2 * pw - bw, PH, PW)
            v.append(("pool_pads", "the pooling's padding is asymmetric in the port: %d before and %d after in H, "
                      "%d before and %d after in W, where Caffe pads %d and %d on both sides (windows shifted)" % (
                          bh, 2 * ph - bh, bw, 2 * pw - bw, ph, pw), out))
    return _found(c, li, v, port_out, base, tol, a)


def _pool_np(x, pool, kh, kw, sh, sw, bh, bw, eh, ew, PH, PW, divisor="padded"):
    """MAX (``pool`` 0) or AVE (1) pooling in float64 with begin pads (bh, bw) and end pads
    (eh, ew); AVE divides by the window clipped to the padded image (``divisor`` "padded",
    Caffe's), by the pixels inside the image ("exclude_pad") or by kh x kw ("kernel")."""
    H, W = x.shape[2], x.shape[3]
    out = np.zeros(x.shape[:2] + (PH, PW), np.float64)
    for i in range(PH):
        h0 = i * sh - bh
        h1 = min(h0 + kh, H + eh)
        for j in range(PW):
            w0 = j * sw - bw
            w1 = min(w0 + kw, W + ew)
            a0, a1, b0, b1 = max(h0, 0), min(h1, H), max(w0, 0), min(w1, W)
            if a1 <= a0 or b1 <= b0:
                out[:, :, i, j] = 0 if pool == 1 else -np.inf
                continue
            win = x[:, :, a0:a1, b0:b1].astype(np.float64)
            n = {"padded": (h1 - h0) * (w1 - w0), "exclude_pad": (a1 - a0) * (b1 - b0), "kernel": kh * kw}[divisor]
            out[:, :, i, j] = win.max(axis=(2, 3)) if pool == 0 else win.sum(axis=(2, 3)) / max(n, 1)
    return out


_BY_TYPE = [
    ("BatchNorm", [_batchnorm]),
    ("Scale", [_scale]),
    ("Convolution", [_convolution]),
    ("Deconvolution", [_deconvolution]),
    ("InnerProduct", [_inner_product]),
    ("LRN", [_lrn]),
    ("Softmax", [_softmax]),
    ("Pooling", [_ave_border, _pool_pads]),
    ("Crop", [_crop]),
    ("Eltwise", [_eltwise]),
    ("PReLU", [_prelu]),
]


# ---------------------------------------------------------------------- summary
def _collapse(c, found):
    """One line for a finding that holds at several layers of a type (the same kind): "every
    BatchNorm (53 of 53): own error ..., N times its rounding: <the cause>", at the place of
    the first; the layers and values it covers in its evidence."""
    net = c.net

    def type_of(d):
        if d.layer not in net.layer_names:
            return None
        return "layer with weights" if d.kind in _ACROSS_TYPES else net.layers[net.layer_names.index(d.layer)].type
    groups: dict = {}
    for d in found:
        groups.setdefault((d.kind, type_of(d)), []).append(d)
    out = []
    done = set()
    for d in found:
        t = type_of(d)
        key = (d.kind, t)
        ds = groups[key]
        if len(ds) < 2 or t is None:
            out.append(d)
            continue
        if key in done:
            continue
        done.add(key)
        total = sum(1 for l in net.layers if (l.type == t or (t == "layer with weights" and l.blobs)))
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
        core = _ACROSS_TYPES.get(d.kind) or ds[0].text.split(" (reproduces")[0].split(" (then within")[0]
        ev = {"layers": [x.layer for x in ds], "values": [x.evidence.get("value") for x in ds], "count": len(ds),
              "of": total, "reproduced": all(x.evidence.get("reproduced") for x in ds),
              "per_layer": [dict(x.evidence, layer=x.layer, text=x.text) for x in ds]}
        out.append(_D("(every %s)" % t if len(ds) == total else "(%d %s layers)" % (len(ds), t), d.kind,
                      "%s%s: %s" % (who, (": " + ", ".join(facts)) if facts else "", core), **ev))
    return out


# kinds one line covers whatever the layers' types, with the line's cause
_ACROSS_TYPES = {"weights_differ": "the port's weights are not the net's (another caffemodel, or random fillers): "
                                   "load the same weights in both"}


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

"""compare-port on planted port mistakes in held-out nets, tensor names stripped: the checks
the issue-33 QA campaign ran (benchmarks/README.md, "Issue 33: held-out nets").

For each net (none of them the issue's builder tried: SqueezeNet 1.0/1.1, MobileNet v1/v2,
CIFAR-10 full, LeNet, R-CNN ILSVRC13 (AlexNet-like), a narrow FCN-8s): seeded random weights
(engine.ports.randomize_params, a random BatchNorm scale factor), our own export-onnx, and

- the export as it is, with and without tensor names, and export-torch's module exported by
  torch.onnx (another converter: torch's own tensor names, constants folded): faithful, no
  diagnosis;
- each classic mistake of issue 33 planted at a layer in the middle of the net (the median
  layer of the kinds it applies to), names stripped: the first departing layer must be that
  layer, the cause named must be the planted one, and no other cause may be named;
- two mistakes at once (the earlier must be the first departing layer, the later one named
  or departing after it).

    python benchmarks/ports_planted.py                       # every net, every mistake
    python benchmarks/ports_planted.py --nets squeezenet11,cifar10_full --mistakes kernel_flipped
    python benchmarks/ports_planted.py --json out.json --verbose
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import engine  # noqa: E402
from benchmarks import onnx_edit, ports_converters  # noqa: E402


# ---------------------------------------------------------------------- nets
def nets():
    return ports_converters._held_out()


def build(proto, seed=0):
    """The net in TEST at batch 1, seeded weights (a random BatchNorm scale factor)."""
    from engine.ports import randomize_params
    net = engine.Net(proto, engine.TEST)
    for blob in net.inputs:
        s = net.blobs[blob].shape
        net.blobs[blob].reshape(1, *s[1:])
    net.reshape()
    randomize_params(net, seed)
    return net


# ---------------------------------------------------------------------- the port's parts
_init, _set, _add_init = onnx_edit.init_array, onnx_edit.set_init, onnx_edit.add_init
_node, _attr, _get_attr = onnx_edit.node, onnx_edit.attr, onnx_edit.get_attr
_rewire, _insert_before = onnx_edit.rewire, onnx_edit.insert_before


def _layer(net, name):
    return net.layers[list(net.layer_names).index(name)]


def _weight(net, name):
    return "%s/weight" % name


# ---------------------------------------------------------------------- the mistakes
def _conv_k(net, name, need_in=1, square=False, kmin=2):
    L = _layer(net, name)
    W = L.blobs[0].data
    if W.ndim != 4 or W.shape[1] < need_in or min(W.shape[2:]) < kmin and max(W.shape[2:]) < kmin:
        return False
    return not square or W.shape[2] == W.shape[3]


def _bn_parts(m, net, name):
    L = _layer(net, name)
    eps = float(L.layer_param.batch_norm_param.eps)
    sf = float(np.asarray(L.blobs[2].data).reshape(-1)[0])
    std = _init(m, name + "/std").astype(np.float64)
    var = std ** 2 - eps
    return eps, sf, var


def _bn_eps(m, net, name):
    eps, sf, var = _bn_parts(m, net, name)
    _set(m, name + "/std", np.sqrt(var + 1e-3))


def _bn_scale_factor(m, net, name):
    eps, sf, var = _bn_parts(m, net, name)
    _set(m, name + "/mean", _init(m, name + "/mean") * sf)
    _set(m, name + "/std", np.sqrt(var * sf + eps))


def _bn_var_as_std(m, net, name):
    eps, sf, var = _bn_parts(m, net, name)
    _set(m, name + "/std", np.sqrt(np.sqrt(var) + eps))


def _scale_missing(m, net, name):
    mul, add = _node(m, name + "/scaled"), _node(m, name + "/scale")
    _rewire(m, add.output[0], mul.input[0])
    m.graph.node.remove(add)
    m.graph.node.remove(mul)


def _scale_twice(m, net, name):
    g, b = _init(m, name + "/scale"), _init(m, name + "/bias")
    _set(m, name + "/scale", g * g)
    _set(m, name + "/bias", b * (1 + g))


def _scale_swapped(m, net, name):
    g, b = _init(m, name + "/scale"), _init(m, name + "/bias")
    _set(m, name + "/scale", b)
    _set(m, name + "/bias", g)


def _pool_node(m, name):
    return _node(m, name + "/pool")


def _has_ceil_extra(net, name):
    L = _layer(net, name)
    g = getattr(L, "geom", None)
    if g is None or L.layer_param.pooling_param.global_pooling:
        return False
    return (g.PH - 1) * g.sh + g.kh > g.H + 2 * g.ph or (g.PW - 1) * g.sw + g.kw > g.W + 2 * g.pw


def _is_pool(net, name, method):
    L = _layer(net, name)
    return L.layer_param.pooling_param.pool == method and _has_ceil_extra(net, name)


def _pool_floor(m, net, name):
    n = _pool_node(m, name)
    p = list(_get_attr(n, "pads"))
    _attr(n, "pads", p[:2] + p[:2])                            # no end padding beyond Caffe's pad


def _pool_pads_one_side(m, net, name):
    n = _pool_node(m, name)
    p = list(_get_attr(n, "pads"))
    _attr(n, "pads", [p[0] + p[2], p[1] + p[3], 0, 0])         # the padding before, not after


def _ave_counts_pad(m, net, name):
    _attr(_pool_node(m, name), "count_include_pad", 1)


def _lrn_alpha(m, net, name):
    L = _layer(net, name)
    if L.layer_param.lrn_param.norm_region == 0:
        n = _node(m, name + "/lrn")
        _attr(n, "alpha", float(_get_attr(n, "alpha")) / int(_get_attr(n, "size")))
    else:
        _set(m, name + "/alpha", _init(m, name + "/alpha") / float(L.size) ** 2)


def _lrn_across(m, net, name):
    """WITHIN_CHANNEL done as ONNX's LRN (across channels), as converters do."""
    from onnx import helper
    L = _layer(net, name)
    last = _node(m, name + "/lrn")
    sq = _node(m, name + "/square")
    x = sq.input[0]
    for n in [n for n in m.graph.node if n.name.startswith(name + "/")]:
        m.graph.node.remove(n)
    idx = next(k for k, n in enumerate(m.graph.node) if any(i == last.output[0] for i in n.input))
    m.graph.node.insert(idx, helper.make_node("LRN", [x], [last.output[0]], size=int(L.size), alpha=float(L.alpha),
                                              beta=float(L.beta), bias=1.0))


def _ip_reshaped(m, net, name):
    W = _init(m, _weight(net, name))
    _set(m, _weight(net, name), W.reshape(W.shape[1], W.shape[0]))
    _attr(_node(m, name + "/gemm"), "transB", 0)


def _ip_flatten_nhwc(m, net, name):
    from onnx import helper
    rows = _node(m, name + "/rows")
    src = rows.input[0]
    rows.input[0] = name + "/nhwc"
    _insert_before(m, rows, [helper.make_node("Transpose", [src], [name + "/nhwc"], perm=[0, 2, 3, 1],
                                              name=name + "/to_nhwc")])


def _ip_on_4d(net, name):
    L = _layer(net, name)
    shape = net.blobs[net.bottom_names[name][0]].shape
    return len(shape) == 4 and shape[2] * shape[3] > 1 and L.blobs[0].data.shape[0] != L.blobs[0].data.shape[1]


def _softmax_axis(m, net, name):
    _attr(_node(m, name + "/softmax"), "axis", 0)


def _softmax_dropped(m, net, name):
    n = _node(m, name + "/softmax")
    _rewire(m, n.output[0], n.input[0])
    m.graph.node.remove(n)


def _eltwise_coeff(m, net, name):
    from onnx import helper
    add = _node(m, name + "/sum1")
    src = add.input[1]
    add.input[1] = name + "/half"
    _insert_before(m, add, [helper.make_node("Mul", [src, _add_init(m, name + "/c_half", np.float32(0.5))],
                                             [name + "/half"], name=name + "/coeff_planted")])


def _eltwise_max(m, net, name):
    _node(m, name + "/sum1").op_type = "Max"


def _dropout_scaled(m, net, name):
    n = _node(m, name + "/dropout")
    n.op_type = "Mul"
    n.input.append(_add_init(m, name + "/keep_planted", np.float32(0.5)))


def _input_op(op, value):
    def plant(m, net, name):
        from onnx import helper
        g = m.graph
        x = g.input[0].name
        _rewire(m, x, "planted_input")
        c = _add_init(m, "planted_c", np.asarray(value))
        g.node.insert(0, helper.make_node(op, [x, c], ["planted_input"], name="planted_in",
                                          **({"axis": 1} if op == "Gather" else {})))
    return plant


def _deconv_flipped(m, net, name):
    W = _init(m, _weight(net, name))
    _set(m, _weight(net, name), W[:, :, ::-1, ::-1])


def _deconv_groups_permuted(m, net, name):
    W = _init(m, _weight(net, name))
    _set(m, _weight(net, name), np.roll(W, 1, axis=0))


def _crop_offset(m, net, name):
    n = _node(m, name + "/crop")
    starts, ends = n.input[1], n.input[2]
    _set(m, starts, _init(m, starts) + 1)
    _set(m, ends, _init(m, ends) + 1)


def _w(fn):
    def plant(m, net, name):
        _set(m, _weight(net, name), fn(_init(m, _weight(net, name))))
    return plant


def _first_conv(net, name):
    return name == next(n for n, l in zip(net.layer_names, net.layers) if l.type == "Convolution")


def _cropped_by_offset(net, name):
    L = _layer(net, name)
    return any(L.layer_param.crop_param.offset)


IMAGENET_MEAN = np.array([104.0, 117.0, 123.0], np.float32).reshape(1, 3, 1, 1)

#: name: (Caffe layer type, whether it applies to a layer (net, name), plant(model, net, layer), kind expected)
MISTAKES = {
    "kernel_flipped": ("Convolution", lambda n, l: _conv_k(n, l), _w(lambda w: w[:, :, ::-1, ::-1]),
                       "kernel_flipped"),
    "kernel_transposed": ("Convolution", lambda n, l: _conv_k(n, l, square=True),
                          _w(lambda w: w.transpose(0, 1, 3, 2)), "kernel_transposed"),
    "kernel_ohwi": ("Convolution", lambda n, l: _conv_k(n, l, need_in=2),
                    _w(lambda w: w.transpose(0, 2, 3, 1).reshape(w.shape)), "kernel_layout"),
    "kernel_hwio": ("Convolution", lambda n, l: _conv_k(n, l, need_in=2),
                    _w(lambda w: w.transpose(2, 3, 1, 0).reshape(w.shape)), "kernel_layout"),
    "kernel_channels_reversed": ("Convolution", lambda n, l: _conv_k(n, l, need_in=2, kmin=1) and
                                 not _first_conv(n, l), _w(lambda w: w[:, ::-1]), "kernel_channels_reversed"),
    "bn_eps": ("BatchNorm", None, _bn_eps, "batchnorm_eps"),
    "bn_scale_factor": ("BatchNorm", None, _bn_scale_factor, "batchnorm_scale_factor"),
    "bn_variance_as_std": ("BatchNorm", None, _bn_var_as_std, "batchnorm_variance"),
    "scale_missing": ("Scale", None, _scale_missing, "scale_missing"),
    "scale_twice": ("Scale", None, _scale_twice, "scale_twice"),
    "scale_gamma_beta_swapped": ("Scale", None, _scale_swapped, "scale_gamma_beta_swapped"),
    "pool_floor": ("Pooling", lambda n, l: _has_ceil_extra(n, l), _pool_floor, "pool_ceil_floor"),
    "pool_pads_one_side": ("Pooling", lambda n, l: _is_pool(n, l, 0), _pool_pads_one_side, "pool_pads"),
    "ave_pool_counts_pad": ("Pooling", lambda n, l: _is_pool(n, l, 1), _ave_counts_pad, "ave_pool_border"),
    "lrn_alpha": ("LRN", None, _lrn_alpha, "lrn_alpha"),
    "lrn_within_as_across": ("LRN", lambda n, l: _layer(n, l).layer_param.lrn_param.norm_region == 1, _lrn_across,
                             "lrn_region"),
    "ip_weight_reshaped": ("InnerProduct", None, _ip_reshaped, "ip_weight_reshaped"),
    "ip_flatten_nhwc": ("InnerProduct", _ip_on_4d, _ip_flatten_nhwc, "ip_flatten_order"),
    "softmax_axis": ("Softmax", None, _softmax_axis, "softmax_axis"),
    "softmax_dropped": ("Softmax", None, _softmax_dropped, "softmax_dropped"),
    "eltwise_coeff": ("Eltwise", None, _eltwise_coeff, "eltwise_coeff"),
    "eltwise_max": ("Eltwise", None, _eltwise_max, "eltwise_operation"),
    "dropout_scale": ("Dropout", None, _dropout_scaled, "dropout_scale"),
    "input_bgr_rgb": ("Convolution", lambda n, l: _first_conv(n, l) and n.blobs[n.inputs[0]].shape[1] == 3,
                      _input_op("Gather", np.array([2, 1, 0], np.int64)), "bgr_rgb"),
    "input_0_255": ("Convolution", _first_conv, _input_op("Mul", np.float32(255)), "scale"),
    "input_mean": ("Convolution", lambda n, l: _first_conv(n, l) and n.blobs[n.inputs[0]].shape[1] == 3,
                   _input_op("Sub", IMAGENET_MEAN), "mean"),
    "deconv_flipped": ("Deconvolution", None, _deconv_flipped, "deconv_kernel_flipped"),
    "deconv_groups_permuted": ("Deconvolution", lambda n, l: _layer(n, l).layer_param.convolution_param.group > 1,
                               _deconv_groups_permuted, "deconv_groups"),
    "crop_offset": ("Crop", _cropped_by_offset, _crop_offset, "crop_offset"),
}

#: the second mistake of a pair is planted at a later layer than the first
PAIRS = [("bn_eps", "kernel_flipped"), ("kernel_transposed", "dropout_scale"), ("kernel_flipped", "pool_floor"),
         ("lrn_alpha", "ip_flatten_nhwc"), ("scale_missing", "eltwise_coeff"), ("kernel_ohwi", "crop_offset")]


def candidates(net, mistake):
    type_, applies, _, _ = MISTAKES[mistake]
    return [name for name, layer in zip(net.layer_names, net.layers)
            if layer.type == type_ and (applies is None or applies(net, name))]


def middle(names):
    return names[len(names) // 2] if names else None


# ---------------------------------------------------------------------- running
def _port(net):
    from engine.ports import build_onnx_model
    return build_onnx_model(net).model


def _copy(model):
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def _stripped(model):
    from engine.ports.onnx_port import strip_tensor_names
    return strip_tensor_names(_copy(model))


def torch_onnx_port(net, d):
    """Another converter's port: export-torch's module exported by torch.onnx (opset 13,
    constants folded, torch's own tensor names), or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    import warnings

    from engine.ports.torch_export import export_torch, load_module
    res = export_torch(net, os.path.join(d, "port_model.py"))
    mod = load_module(res.path)
    model = getattr(mod, mod.__all__[0])()
    model.load_state_dict(torch.load(res.state_dict_path, weights_only=True))
    model.eval()
    args = tuple(torch.zeros(tuple(net.blobs[n].shape)) for n in net.inputs)
    path = os.path.join(d, "torch_port.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, path, dynamo=False, opset_version=13, input_names=list(net.inputs),
                          do_constant_folding=True)
    return path


def judge(r, plants):
    """{first, cause, false_causes, second}: ``plants`` [(layer, kind)] in the net's order."""
    layer, kind = plants[0]
    d = r.diagnosis_for(layer)
    others = [x for x in r.diagnosis if x.kind not in {k for _, k in plants} and x.kind != "softmax_added"]
    out = {"first_ok": r.first_departing == layer, "cause_ok": d is not None and d.kind == kind,
           "false_causes": ["%s: %s" % (x.layer, x.kind) for x in others], "first_departing": r.first_departing,
           "diagnosis": [{"layer": x.layer, "kind": x.kind, "text": x.text[:300]} for x in r.diagnosis],
           "message": r.message}
    if len(plants) > 1:
        l2, k2 = plants[1]
        d2 = r.diagnosis_for(l2)
        row2 = [row for row in r.rows if row.layer == l2 or l2 in row.group]
        out["second_named"] = d2 is not None and d2.kind == k2
        out["second_departs"] = any(row.status in ("departs", "shape", "small", "not run") for row in row2)
    return out


def run_net(name, proto, mistakes, verbose=False, out=sys.stdout):
    from engine.ports.compare import compare_port
    net = build(proto)
    model = _port(net)
    res = {"controls": {}, "planted": {}, "pairs": {}}
    ports = [("export", model), ("export stripped", _stripped(model))]
    tp = torch_onnx_port(net, tempfile.mkdtemp(prefix="ports_planted_torch_"))
    if tp is not None:
        ports.append(("torch.onnx of export-torch", tp))
    for label, m in ports:
        t0 = time.perf_counter()
        r = compare_port(net, m)
        res["controls"][label] = {"faithful": r.faithful, "diagnosis": [d.kind for d in r.diagnosis],
                                  "message": r.message, "seconds": round(time.perf_counter() - t0, 1)}
        if label.startswith("torch.onnx"):         # another converter's port: its verdict, right or wrong
            res["controls"][label]["diagnosis_text"] = ["%s: %s" % (d.layer, d.text) for d in r.diagnosis]
            out.write("%-14s %-28s %s\n" % (name, label, r.message if r.faithful else "%s %s" % (
                r.message, " | ".join(res["controls"][label]["diagnosis_text"]))))
            continue
        out.write("%-14s %-28s %s\n" % (name, label, "ok" if r.faithful and not r.diagnosis else
                                        "FAIL " + r.message))
    for mk in mistakes:
        layer = middle(candidates(net, mk))
        if layer is None:
            continue
        m = _copy(model)
        MISTAKES[mk][2](m, net, layer)
        t0 = time.perf_counter()
        try:
            r = compare_port(net, _stripped(m))
        except Exception as e:               # the checker's own failure: recorded, not hidden
            res["planted"][mk] = {"layer": layer, "error": "%s: %s" % (type(e).__name__, e)}
            out.write("%-14s %-28s ERROR %s\n" % (name, mk, res["planted"][mk]["error"][:200]))
            continue
        j = judge(r, [(layer, MISTAKES[mk][3])])
        j.update(layer=layer, seconds=round(time.perf_counter() - t0, 1))
        res["planted"][mk] = j
        ok = j["first_ok"] and j["cause_ok"] and not j["false_causes"]
        out.write("%-14s %-28s %-22s %s\n" % (name, mk, layer, "ok" if ok else "FAIL first=%s kinds=%s" % (
            j["first_departing"], [d["kind"] for d in j["diagnosis"]])))
        if verbose and not ok:
            out.write(r.format(limit=0))
    for a, b in PAIRS:
        if a not in mistakes or b not in mistakes:
            continue
        la, lb = middle(candidates(net, a)), candidates(net, b)
        if la is None:
            continue
        ia = list(net.layer_names).index(la)
        later = [x for x in lb if list(net.layer_names).index(x) > ia and x != la]
        if not later:
            continue
        lb = middle(later)
        m = _copy(model)
        MISTAKES[a][2](m, net, la)
        MISTAKES[b][2](m, net, lb)
        r = compare_port(net, _stripped(m))
        j = judge(r, [(la, MISTAKES[a][3]), (lb, MISTAKES[b][3])])
        j.update(layers=[la, lb])
        res["pairs"]["%s+%s" % (a, b)] = j
        ok = j["first_ok"] and j["cause_ok"] and (j["second_named"] or j["second_departs"]) and not j["false_causes"]
        out.write("%-14s %-28s %-22s %s\n" % (name, a + "+" + b, la + "," + lb, "ok" if ok else
                                              "FAIL first=%s kinds=%s second named %s departs %s" % (
                                                  j["first_departing"], [d["kind"] for d in j["diagnosis"]],
                                                  j["second_named"], j["second_departs"])))
        if verbose and not ok:
            out.write(r.format(limit=0))
    return res


# ---------------------------------------------------------------------- converters' ports
def _foreign_conv_flip(m, node):
    w = node.input[1]
    _set(m, w, _init(m, w)[:, :, ::-1, ::-1])


def _foreign_bn_eps(m, node):
    _attr(node, "epsilon", 1e-3)


def _foreign_bn_swap(m, node):
    node.input[1], node.input[2] = node.input[2], node.input[1]


def _foreign_pool_floor(m, node):
    p = list(_get_attr(node, "pads"))
    _attr(node, "pads", p[:2] + p[:2])
    _attr(node, "ceil_mode", 0)


def _foreign_gemm_reshaped(m, node):
    w = node.input[1]
    W = _init(m, w)
    _set(m, w, W.reshape(W.shape[1], W.shape[0]))
    _attr(node, "transB", 0 if _get_attr(node, "transB", 0) else 1)


def _kernel_over_1(m, node):
    try:
        return min(_init(m, node.input[1]).shape[2:]) > 1
    except KeyError:
        return False


def _pads_past(m, node):
    p = _get_attr(node, "pads")
    return p is not None and len(p) == 4 and (p[2] > p[0] or p[3] > p[1])


#: name: (ONNX op, whether it applies to a node (model, node), plant(model, node), kind expected)
FOREIGN = {
    "kernel_flipped": ("Conv", _kernel_over_1, _foreign_conv_flip, "kernel_flipped"),
    "bn_eps": ("BatchNormalization", None, _foreign_bn_eps, "batchnorm_eps"),
    "bn_gamma_beta_swapped": ("BatchNormalization", None, _foreign_bn_swap, "scale_gamma_beta_swapped"),
    "pool_floor": ("MaxPool", _pads_past, _foreign_pool_floor, "pool_ceil_floor"),
    "ip_weight_reshaped": ("Gemm", lambda m, n: len(_init(m, n.input[1]).shape) == 2 and
                           len(set(_init(m, n.input[1]).shape)) == 2, _foreign_gemm_reshaped, "ip_weight_reshaped"),
}


def run_foreign(name, proto, weights, port_path, out=sys.stdout):
    """Each FOREIGN mistake planted in a converter's port (at the median node of its op type),
    names stripped; the expected layers are those the unplanted port's named comparison
    pairs the node's output with (a fused BatchNorm+Scale: either)."""
    import onnx

    from engine.ports.compare import compare_port
    net = engine.Net(proto, engine.TEST, weights=weights)
    model = onnx.load(port_path)
    base = compare_port(net, _copy(model))
    where = {row.tensor: row.group or [row.layer] for row in base.rows if row.tensor}
    res = {"baseline": {"faithful": base.faithful, "message": base.message}}
    out.write("%-14s %-28s %s\n" % (name, "converter's port", base.message[:120]))
    if not base.faithful:                 # its own defect departs first: nothing to plant on
        return res
    for mk, (op, applies, plant, kind) in FOREIGN.items():
        nodes = [n for n in model.graph.node if n.op_type == op and n.output[0] in where and
                 (applies is None or applies(model, n)) and
                 (op != "MaxPool" or _has_ceil_extra(net, where[n.output[0]][-1]))]   # floor must change it
        if not nodes:
            continue
        k = list(model.graph.node).index(nodes[len(nodes) // 2])
        m = _copy(model)
        node = m.graph.node[k]
        layers = where[node.output[0]]
        plant(m, node)
        r = compare_port(net, _stripped(m))
        d = next((x for x in r.diagnosis if x.layer in layers or set(layers) & set(x.evidence.get("layers") or ())),
                 None)
        j = {"layers": layers, "first_ok": r.first_departing in layers, "cause_ok": d is not None and d.kind == kind,
             "false_causes": ["%s: %s" % (x.layer, x.kind) for x in r.diagnosis if x.kind != kind],
             "first_departing": r.first_departing, "message": r.message,
             "diagnosis": [{"layer": x.layer, "kind": x.kind, "text": x.text[:300]} for x in r.diagnosis]}
        res[mk] = j
        ok = j["first_ok"] and j["cause_ok"] and not j["false_causes"]
        out.write("%-14s %-28s %-22s %s\n" % (name, "foreign " + mk, "+".join(layers)[:22], "ok" if ok else
                                              "FAIL first=%s kinds=%s" % (r.first_departing,
                                                                          [x["kind"] for x in j["diagnosis"]])))
    return res


def tally(results):
    """(cases, right layer, right cause, cases with a false cause, pairs ok, controls ok)."""
    cases = [p for res in results.values() for p in res["planted"].values() if "error" not in p]
    errors = sum(1 for res in results.values() for p in res["planted"].values() if "error" in p)
    pairs = [p for res in results.values() for p in res["pairs"].values()]
    controls = [c for res in results.values() for k, c in res["controls"].items() if k.startswith("export")]
    return {"nets": len(results), "cases": len(cases) + errors, "errors": errors,
            "right_layer": sum(p["first_ok"] for p in cases), "right_cause": sum(p["cause_ok"] for p in cases),
            "false_alarm_cases": sum(bool(p["false_causes"]) for p in cases),
            "pairs": len(pairs), "pairs_ok": sum(p["first_ok"] and p["cause_ok"] and (p["second_named"] or
                                                                                     p["second_departs"])
                                                 for p in pairs),
            "controls": len(controls), "controls_ok": sum(c["faithful"] and not c["diagnosis"] for c in controls)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    all_nets = nets()
    ap.add_argument("--nets", default=",".join(all_nets), help="of: %s" % ", ".join(all_nets))
    ap.add_argument("--mistakes", default=",".join(MISTAKES), help="of: %s" % ", ".join(MISTAKES))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--verbose", action="store_true", help="print the comparison of every failing case")
    ap.add_argument("--converted", metavar="DIR", help="also plant mistakes in the converters' ports there "
                    "(benchmarks/ports_converters.py --dir DIR: <net>.prototxt or the zoo's, <net>.caffemodel, "
                    "<net>_<tool>.onnx)")
    ap.add_argument("--tools", default="mmdnn", help="whose ports --converted takes (default: mmdnn)")
    args = ap.parse_args(argv)
    d = tempfile.mkdtemp(prefix="ports_planted_")
    mistakes = [m for m in args.mistakes.split(",") if m]
    results = {}
    for name in args.nets.split(","):
        proto = all_nets[name](d)
        if not os.path.isfile(proto):
            print("%s: %s missing, skipped" % (name, proto))
            continue
        results[name] = run_net(name, proto, mistakes, verbose=args.verbose)
    foreign = {}
    if args.converted:
        for name in args.nets.split(","):
            for tool in args.tools.split(","):
                port = os.path.join(args.converted, "%s_%s.onnx" % (name, tool))
                weights = os.path.join(args.converted, name + ".caffemodel")
                if os.path.isfile(port) and os.path.isfile(weights):
                    foreign["%s/%s" % (name, tool)] = run_foreign(name, all_nets[name](args.converted), weights, port)
    t = tally(results)
    if foreign:
        cases = [j for f in foreign.values() for k, j in f.items() if k != "baseline"]
        t["foreign"] = {"ports": len(foreign), "cases": len(cases), "right_layer": sum(j["first_ok"] for j in cases),
                        "right_cause": sum(j["cause_ok"] for j in cases),
                        "false_alarm_cases": sum(bool(j["false_causes"]) for j in cases)}
        print("converters' ports: %(ports)d ports, %(cases)d planted cases: right layer %(right_layer)d, right cause "
              "%(right_cause)d, cases with a false cause %(false_alarm_cases)d" % t["foreign"])
    print("%(nets)d nets, %(cases)d planted cases: right layer %(right_layer)d, right cause %(right_cause)d, "
          "cases with a false cause %(false_alarm_cases)d, errors %(errors)d; pairs %(pairs_ok)d/%(pairs)d; "
          "correct ports faithful %(controls_ok)d/%(controls)d" % t)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "converters": foreign, "tally": t}, f, indent=1)
    return results


if __name__ == "__main__":
    main()

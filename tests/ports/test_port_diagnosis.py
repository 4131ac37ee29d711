"""Every classic port mistake, planted in an ONNX port of a small net, found at its layer and
named -- each cause checked by re-running Caffe's layer the way the mistake would (the cause
table of docs/port-debugging.md); and a departure no known cause explains said so, with the
first differing elements."""
import json

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import port_nets as pn  # noqa: E402

from engine.ports.compare import compare_port  # noqa: E402


def _w(m, name, fn):
    pn.set_init(m, name, fn(pn.init_array(m, name)))
    return m


def _remove_scale(net, m, scale="scale1"):
    """The port without its Scale (mul and add): what read the Scale reads the BatchNorm."""
    add = pn.node(m, scale)
    mul = pn.node(m, scale + "_m")
    src = mul.input[0]
    pn._rewire(m, add.output[0], src)
    m.graph.node.remove(add)
    m.graph.node.remove(mul)
    return m


def _fused_swapped(net, m):
    pn.fuse_bn_scale(m, named="bn")
    g, b = pn.init_array(m, "bn1_gamma"), pn.init_array(m, "bn1_beta")
    pn.set_init(m, "bn1_gamma", b)
    pn.set_init(m, "bn1_beta", g)
    return m


def _ip_reshaped(net, m):
    n = pn.node(m, "ip1")
    W = pn.init_array(m, "ip1_W")                       # 10 x 512
    pn.set_init(m, "ip1_W", W.reshape(W.shape[1], W.shape[0]))
    for a in list(n.attribute):
        if a.name == "transB":
            n.attribute.remove(a)
    return m


def _ip_nhwc_flatten(net, m):
    from onnx import helper
    flat = pn.node(m, "ip1_flatten")
    src = flat.input[0]
    flat.input[0] = "nhwc"
    idx = list(m.graph.node).index(flat)
    m.graph.node.insert(idx, helper.make_node("Transpose", [src], ["nhwc"], perm=[0, 2, 3, 1], name="to_nhwc"))
    return m


def _ip_matmul(net, m):
    """InnerProduct as MatMul + Add (W transposed): a faithful lowering, then the bug on it."""
    from onnx import helper, numpy_helper
    n = pn.node(m, "ip1")
    W, b = pn.init_array(m, "ip1_W"), pn.init_array(m, "ip1_b")
    m.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(W.T), "ip1_WT"))
    idx = list(m.graph.node).index(n)
    m.graph.node.remove(n)
    m.graph.node.insert(idx, helper.make_node("MatMul", [n.input[0], "ip1_WT"], ["ip1_mm"], name="ip1_mm"))
    m.graph.node.insert(idx + 1, helper.make_node("Add", ["ip1_mm", "ip1_b"], [n.output[0]], name="ip1"))
    pn.set_init(m, "ip1_b", b)
    return m


def _prepend(op, const_value, name="pre"):
    def plant(net, m):
        from onnx import helper, numpy_helper
        g = m.graph
        g.initializer.append(numpy_helper.from_array(np.asarray(const_value, np.float32), name + "_c"))
        inp = g.input[0].name
        for n in g.node:
            n.input[:] = [name + "_out" if i == inp else i for i in n.input]
        g.node.insert(0, helper.make_node(op, [inp, name + "_c"], [name + "_out"], name=name))
        return m
    return plant


def _crop_one_axis(net, m):
    pn.set_init(m, "crop1_starts", [3])
    pn.set_init(m, "crop1_ends", [11])
    pn.set_init(m, "crop1_axes", [3])
    return m


def _eltwise_plain_add(net, m):
    pn.set_init(m, "sum_c0", np.float32(1))
    pn.set_init(m, "sum_c1", np.float32(1))
    return m


def _prelu_shared(net, m):
    return _w(m, "prelu1_slope", lambda s: np.full_like(s, s.ravel()[0]))


def _scale_axis(net, m):
    _w(m, "scale1_beta", lambda b: b.reshape(-1))
    return _w(m, "scale1_gamma", lambda g: g.reshape(-1))           # broadcast on the last axis (W = C = 6)


def _deconv_swapped(net, m):
    return _w(m, "deconv_W", lambda w: w.reshape(2, 3, 3, 4, 4).transpose(0, 2, 1, 3, 4).reshape(w.shape))


def _pool_pads(net, m):
    pn.attr(pn.node(m, "pool"), "pads", [2, 2, 0, 0])
    return m


def _node_attr(node, key, value):
    def plant(net, m):
        pn.attr(pn.node(m, node), key, value)
        return m
    return plant


# (net, plant, first departing layer, kind, words in the text)
CASES = {
    "bn_variance_as_std": ("SMALL", lambda n, m: _w(m, "bn1_var", np.sqrt), "bn1", "batchnorm_variance",
                           "standard deviation"),
    "bn_eps": ("SMALL", _node_attr("bn1", "epsilon", 1e-3), "bn1", "batchnorm_eps", "eps 0.001"),
    "bn_scale_factor": ("SMALL", lambda n, m: _w(m, "bn1_var", lambda v: v * 2) and _w(m, "bn1_mean", lambda v: v * 2),
                        "bn1", "batchnorm_scale_factor", "scale factor"),
    "scale_missing": ("SMALL", _remove_scale, "scale1", "scale_missing", "missing"),
    "scale_twice": ("SMALL", lambda n, m: _w(m, "scale1_beta", lambda b: b * (1 + pn.init_array(m, "scale1_gamma")))
                    and _w(m, "scale1_gamma", np.square), "scale1", "scale_twice", "twice"),
    "scale_swapped_fused": ("SMALL", _fused_swapped, "scale1", "scale_gamma_beta_swapped", "swapped"),
    "scale_axis": ("MIX", _scale_axis, "scale1", "scale_axis", "axis 3"),
    "pool_asymmetric_pads": ("MIX", _pool_pads, "pool", "pool_pads", "asymmetric"),
    "lrn_within_across": ("WITHIN", lambda n, m: m, "norm1", "lrn_region", "ACROSS_CHANNELS"),
    "kernel_flipped": ("MIX", lambda n, m: _w(m, "conv2_W", lambda w: w[:, :, ::-1, ::-1]), "conv2",
                       "kernel_flipped", "flipped in H and W"),
    "kernel_transposed": ("MIX", lambda n, m: _w(m, "conv2_W", lambda w: w.transpose(0, 1, 3, 2)), "conv2",
                          "kernel_transposed", "transposed"),
    "kernel_ohwi": ("MIX", lambda n, m: _w(m, "conv2_W", lambda w: w.transpose(0, 2, 3, 1).reshape(w.shape)),
                    "conv2", "kernel_layout", "OHWI"),
    "kernel_hwio": ("MIX", lambda n, m: _w(m, "conv2_W", lambda w: w.transpose(2, 3, 1, 0).reshape(w.shape)),
                    "conv2", "kernel_layout", "HWIO"),
    "deconv_groups": ("MIX", _deconv_swapped, "deconv", "deconv_groups", "groups"),
    "deconv_layout": ("MIX", lambda n, m: _w(m, "deconv_W", lambda w: w[:, :, ::-1, ::-1]), "deconv",
                      "deconv_kernel_flipped", "flipped"),
    "ip_reshaped": ("SMALL", _ip_reshaped, "ip1", "ip_weight_reshaped", "reshaped"),
    "ip_flatten_nhwc": ("SMALL", _ip_nhwc_flatten, "ip1", "ip_flatten_order", "H x W x C"),
    "ip_flatten_nhwc_matmul": ("SMALL", lambda n, m: _ip_nhwc_flatten(n, _ip_matmul(n, m)), "ip1",
                               "ip_flatten_order", "NHWC"),
    "input_scale_255": ("SMALL", _prepend("Mul", 255.0), "conv1", "scale", "0.00392"),
    "softmax_axis": ("SMALL", _node_attr("prob", "axis", 0), "prob", "softmax_axis", "axis 0"),
    "crop_axis": ("CROP", _crop_one_axis, "crop1", "crop_axis", "axis 3"),
    "eltwise_coeff": ("MIX", _eltwise_plain_add, "sum", "eltwise_coeff", "(1, 1)"),
    "prelu_channel_shared": ("MIX", _prelu_shared, "prelu1", "prelu_channel_shared", "one slope"),
    "dropout_scale": ("CROP", lambda n, m: _dropout_scaled(m), "drop", "dropout_scale", "TEST-phase"),
    "deconv_in_out_swapped": ("MIX", lambda n, m: _w(m, "deconv_W", lambda w: w.transpose(1, 0, 2, 3).reshape(w.shape)),
                              "deconv", "deconv_weight_layout", "(output, input)"),
    "kernel_channels_reversed": ("MIX", lambda n, m: _w(m, "conv2_W", lambda w: w[:, ::-1]), "conv2",
                                 "kernel_channels_reversed", "reversed"),
    "eltwise_operation": ("MIX", lambda n, m: _eltwise_plain_add(n, m) and _op(m, "sum", "Max"), "sum",
                          "eltwise_operation", "MAX"),
    "lrn_k": ("SMALL", _node_attr("norm1", "bias", 2.0), "norm1", "lrn_k", "k is 2"),
}


def _op(m, name, op_type):
    pn.node(m, name).op_type = op_type
    return m


def _dropout_scaled(m):
    from onnx import numpy_helper
    n = pn.node(m, "drop")
    n.op_type = "Mul"
    n.input.append("half")
    m.graph.initializer.append(numpy_helper.from_array(np.float32(0.5), "half"))
    return m


_NETS = {}


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    d = tmp_path_factory.mktemp("nets")
    for key in ("SMALL", "MIX", "WITHIN", "CROP"):
        _NETS[key] = pn.make_net(d, getattr(pn, key), name=key + ".prototxt")[0]
    return _NETS


@pytest.mark.parametrize("case", sorted(CASES))
def test_planted_mistake_is_found_and_named(nets, case):
    key, plant, layer, kind, words = CASES[case]
    net = nets[key]
    m = plant(net, pn.build_port(net))
    r = compare_port(net, pn.rename_all(m))           # names stripped: by value and topology alone
    assert not r.faithful
    assert r.first_departing == layer, r.format()
    d = r.diagnosis_for(layer)
    assert d is not None and d.kind == kind, r.format()
    assert words in d.text, d.text
    assert d.evidence.get("reproduced") is True
    doc = json.loads(json.dumps(r.to_dict()))                  # plain data, as the page and --json take it
    assert doc["first_departing"] == layer and any(x["kind"] == kind for x in doc["diagnosis"])


@pytest.mark.parametrize("key", ["SMALL", "MIX", "CROP"])
def test_the_correct_ports_are_faithful(nets, key):
    net = nets[key]
    for m in (pn.build_port(net), pn.rename_all(pn.build_port(net))):
        r = compare_port(net, m)
        assert r.faithful and r.diagnosis == [], r.format()


def test_mean_image_vs_per_channel_means(nets):
    net = nets["SMALL"]
    rng = np.random.default_rng(1)
    image = rng.uniform(90, 130, (3, 16, 16)).astype(np.float32)
    per_channel = image.mean(axis=(1, 2))
    m = pn.prepend_mean(pn.build_port(net), per_channel)
    r = compare_port(net, m, preprocess={"mean": image})
    assert r.first_departing == "conv1", r.format()
    d = r.diagnosis_for("conv1")
    assert d.kind == "mean_image_vs_channel" and "mean image" in d.text, d.text
    m = _prepend("Sub", image[None])(net, pn.build_port(net))
    d = compare_port(net, m, preprocess={"mean": image}).diagnosis_for("conv1")
    assert d.kind == "mean" and "mean image added back" in d.text, d.text


def test_no_known_cause_gives_the_first_differing_elements(nets):
    net = nets["MIX"]
    m = pn.build_port(net)
    b = pn.init_array(m, "conv2_b").copy()         # one channel's bias off: no known cause fits
    b[2] += 0.7
    pn.set_init(m, "conv2_b", b)
    r = compare_port(net, m)
    assert r.first_departing == "conv2", r.format()
    d = r.diagnosis_for("conv2")
    assert d.kind == "unknown" and d.text.startswith("no known cause: the layer's own arithmetic departs by")
    assert "first differing: [0,2,0,0]" in d.text and d.evidence["first_differing"][0]["index"] == [0, 2, 0, 0]
    assert d.evidence["differing"] == 36 and "36 of 216 elements" in d.text
    first = d.evidence["first_differing"][0]
    assert abs(first["port"] - first["caffe"]) > 1e-3


def test_softmax_dropped_or_added(nets):
    from onnx import helper
    net = nets["SMALL"]
    m = pn.build_port(net)
    sm = pn.node(m, "prob")
    m.graph.node.remove(sm)
    m.graph.output[0].name = "ip1"
    r = compare_port(net, pn.rename_all(m))
    assert not r.faithful and r.first_departing == "prob", r.format()
    d = r.diagnosis_for("prob")
    assert d.kind == "softmax_dropped" and "drops Caffe's Softmax 'prob'" in d.text
    assert "no Softmax" in r.message
    # a port adding a Softmax after a net whose output is the scores
    net2 = nets["MIX"]
    m = pn.build_port(net2)
    m.graph.node.append(helper.make_node("Softmax", ["pool"], ["probs"], axis=1, name="extra"))
    m.graph.output[0].name = "probs"
    r = compare_port(net2, m)
    assert r.faithful, r.format()
    assert [d.kind for d in r.diagnosis] == ["softmax_added"] and "adds a Softmax" in r.diagnosis[0].text


def test_a_node_onnxruntime_cannot_run_is_the_first_departure(nets):
    """caffe2onnx writes Dropout with a 'ratio' attribute at opset 19 (gone since opset 12):
    onnxruntime refuses that node; the comparison says the port cannot run there."""
    from onnx import helper
    net = nets["CROP"]
    m = pn.build_port(net)
    n = pn.node(m, "drop")
    n.op_type = "Dropout"
    n.attribute.append(helper.make_attribute("ratio", 0.0))
    r = compare_port(net, m)
    assert not r.faithful and r.first_departing == "drop", r.format()
    assert "the port cannot run here: node drop (Dropout)" in r.message and "ratio" in r.message
    assert r.row("pw").status == "ok"                      # what runs before it is still checked
    assert any(n.startswith("onnxruntime cannot run the whole port; run node by node it stops at node drop "
                            "(Dropout)") for n in r.notes), r.notes


def test_a_port_made_from_other_weights_is_said_so(nets, tmp_path):
    """The page's case: a net without a caffemodel gets other random weights in each tab; a
    port saved from one and compared in the other departs at the first convolution, and
    the cause is that the weights differ, at every layer that has them (one line)."""
    net = nets["MIX"]
    other, _ = pn.make_net(tmp_path, pn.MIX, seed=11, name="other.prototxt")
    r = compare_port(net, pn.rename_all(pn.build_port(other)))
    assert r.first_departing == "conv0", r.format()
    d = r.diagnosis_for("conv0")
    assert d.kind == "weights_differ" and "not the net's" in d.text, d.text
    assert [x.kind for x in r.diagnosis] == ["weights_differ"]                  # one line
    assert d.text.startswith("every layer with weights (6 of 6)") and d.evidence["layers"][0] == "conv0"
    # a port of the same weights laid out otherwise is not this cause
    m = pn.build_port(net)
    pn.set_init(m, "conv1_W", pn.init_array(m, "conv1_W")[:, :, ::-1, ::-1])
    assert compare_port(net, m).diagnosis_for("conv1").kind == "kernel_flipped"


SHARED_PRELU = """
name: "shared_prelu"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 6 dim: 6 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "prelu1" type: "PReLU" bottom: "conv1" top: "conv1"
        prelu_param { channel_shared: true filler { type: "constant" value: 0.2 } } }
"""


def test_prelu_per_channel_where_caffe_shares_one_slope(tmp_path):
    net, _ = pn.make_net(tmp_path, SHARED_PRELU, name="sp.prototxt")
    m = pn.build_port(net)
    pn.set_init(m, "prelu1_slope", np.array([0.2, 0.3, 0.1, 0.25], np.float32).reshape(4, 1, 1))
    r = compare_port(net, pn.rename_all(m))
    assert r.first_departing == "prelu1", r.format()
    d = r.diagnosis_for("prelu1")
    assert d.kind == "prelu_channel_shared" and "a slope per channel" in d.text and "(0.2, 0.3, 0.1, 0.25)" in d.text


def test_ave_pooling_dividing_by_the_full_kernel(nets, tmp_path):
    """A port padding with zeros and then averaging over the whole kernel everywhere: the
    border windows Caffe clips to the padded image differ; the divisor is named."""
    from onnx import helper, numpy_helper
    net, _ = pn.make_net(tmp_path, pn.TWO_BN, name="two.prototxt")
    m = pn.build_port(net)
    pool = pn.node(m, "pool2")
    src = pool.input[0]
    m.graph.initializer.append(numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 2, 2], np.int64), "pool2_pads"))
    idx = list(m.graph.node).index(pool)
    m.graph.node.insert(idx, helper.make_node("Pad", [src, "pool2_pads"], ["pool2_padded"], name="pool2_pad"))
    pool.input[0] = "pool2_padded"
    pn.attr(pool, "pads", [0, 0, 0, 0])
    pn.attr(pool, "ceil_mode", 0)
    r = compare_port(net, pn.rename_all(m))
    assert r.first_departing == "pool2", r.format()
    d = r.diagnosis_for("pool2")
    assert d.kind == "ave_pool_border" and "full kernel size" in d.text, d.text

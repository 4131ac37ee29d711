"""Regressions found by planting port mistakes in held-out nets (benchmarks/ports_planted.py),
each reduced to a tiny net: export-onnx's port with the mistake planted at a layer past the
first, tensor names stripped (matched by value and topology alone)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper  # noqa: E402

import engine  # noqa: E402
from benchmarks import onnx_edit  # noqa: E402
from engine.ports import build_onnx_model, randomize_params  # noqa: E402
from engine.ports.compare import compare_port  # noqa: E402
from engine.ports.onnx_port import strip_tensor_names  # noqa: E402

HEAD = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: %d dim: %d dim: %d } } }\n'


def _conv(name, bottom, out, k=3, pad=1, extra=""):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" convolution_param { num_output: %d '
            'kernel_size: %d pad: %d %s } }\n' % (name, bottom, name, out, k, pad, extra))


# conv1 -> pool1 (MAX 3/2, no padding: Caffe's ceil adds a row and a column at the end) -> conv2
# -> pool2 (global AVE) -> drop2 -> prob
POOLED = HEAD % (3, 8, 8) + _conv("conv1", "data", 4) + """
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
""" + _conv("conv2", "pool1", 5) + """
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: AVE global_pooling: true } }
layer { name: "drop2" type: "Dropout" bottom: "pool2" top: "pool2" }
layer { name: "prob" type: "Softmax" bottom: "pool2" top: "prob" }
"""

# FCN-8s's fuse: a Dropout before a Deconvolution whose output is the reference (shape only) of
# a Crop of another branch, the two added
FUSE = HEAD % (3, 6, 6) + _conv("conv1", "data", 4) + """
layer { name: "drop1" type: "Dropout" bottom: "conv1" top: "conv1" }
""" + _conv("score", "conv1", 4, k=1, pad=0) + """
layer { name: "up" type: "Deconvolution" bottom: "score" top: "up"
        convolution_param { num_output: 4 group: 4 kernel_size: 4 stride: 2 bias_term: false } }
""" + _conv("side", "data", 4, k=1, pad=5) + """
layer { name: "side_c" type: "Crop" bottom: "side" bottom: "up" top: "side_c" crop_param { axis: 2 offset: 1 } }
layer { name: "fuse" type: "Eltwise" bottom: "up" bottom: "side_c" top: "fuse" }
"""


def _net(tmp_path, text, name):
    p = tmp_path / (name + ".prototxt")
    p.write_text(text)
    net = engine.Net(str(p), engine.TEST)
    randomize_params(net, 0)
    return net


def _port(net):
    return build_onnx_model(net).model


_node, _set_attr = onnx_edit.node, onnx_edit.attr


def _dropout_as_caffe2onnx(m, name):
    """Node ``name`` made a Dropout keeping ``ratio`` at opset 13, as caffe2onnx writes it
    (onnxruntime refuses such a node)."""
    n = _node(m, name)
    n.op_type = "Dropout"
    _set_attr(n, "ratio", 0.5)
    return n


def _init(m, name):
    return next(t for t in m.graph.initializer if t.name == name)


def _copy(m):
    import onnx
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def test_a_port_stopping_part_way_without_names_departs_where_it_stops(tmp_path):
    """caffe2onnx's Dropout keeps `ratio` at opset 13: onnxruntime refuses that node. With the
    tensor names stripped nothing after it can be paired, yet the first departing layer is
    still the Dropout (not "the outputs differ though no layer's check departs")."""
    net = _net(tmp_path, POOLED, "pooled")
    m = _port(net)
    _dropout_as_caffe2onnx(m, "drop2/dropout")
    r = compare_port(net, strip_tensor_names(m))
    assert not r.faithful and r.first_departing == "drop2", r.format()
    assert "the port cannot run here: node" in r.message and "ratio" in r.message
    assert r.row(r.first_departing_label).status == "not run"
    assert r.row("conv2").status == "ok"                      # what ran before it is still checked
    assert r.diagnosis == []
    # FCN-8s's fuse: the Dropout is upstream of a Crop's reference (the Crop's check covers
    # it, but only for a shape): still where the port stops
    net = _net(tmp_path, FUSE, "fuse")
    m = _port(net)
    _dropout_as_caffe2onnx(m, "drop1/dropout")
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "drop1" and "the port cannot run here" in r.message, r.format()


def test_pool_padding_put_before_where_caffe_rounds_up(tmp_path):
    """A pooling without padding whose ceil rounding adds a row and a column at the end; the
    port pads them at the start instead (same size, windows shifted): named, not "unknown"."""
    net = _net(tmp_path, POOLED, "pooled")
    m = _port(net)
    _set_attr(_node(m, "pool1/pool"), "pads", [1, 1, 0, 0])
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "pool1", r.format()
    assert [d.kind for d in r.diagnosis] == ["pool_pads"], r.format()
    assert "1 before and 0 after in H" in r.diagnosis[0].text and "rounding up adds 1" in r.diagnosis[0].text


def test_floor_pooling_before_a_global_pooling_is_one_cause(tmp_path):
    """A pooling one row short (floor) is a shape departure; the global pooling after it is
    back to Caffe's shape and its check, which covers the short pooling, departs too: that is
    the pooling's doing, not a second, unknown cause."""
    net = _net(tmp_path, POOLED, "pooled")
    m = _port(net)
    _set_attr(_node(m, "pool1/pool"), "pads", [0, 0, 0, 0])
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "pool1", r.format()
    assert [d.kind for d in r.diagnosis] == ["pool_ceil_floor"], r.format()
    covering = [row for row in r.rows if "pool1" in row.group and row.layer != "pool1"]
    assert covering and all("whose output shape differs" in row.note for row in covering if row.status == "departs")


def test_a_mistake_before_a_crop_reference_is_found_at_its_layer(tmp_path):
    """A Crop takes only the shape of its reference: a value the Crop's reference depends on
    is not required to feed the Crop's tensor, so a Dropout scaled by 0.5 upstream of it is
    still paired and found at its layer (it was hidden in a check covering four layers)."""
    net = _net(tmp_path, FUSE, "fuse")
    m = _port(net)
    n = _node(m, "drop1/dropout")
    n.op_type = "Mul"
    m.graph.initializer.append(numpy_helper.from_array(np.float32(0.5), "planted_keep"))
    n.input.append("planted_keep")
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "drop1", r.format()
    assert [d.kind for d in r.diagnosis] == ["dropout_scale"], r.format()
    assert r.row("score").matched == "topology" and r.row("up").matched == "topology"


def test_deconvolution_groups_in_another_order(tmp_path):
    """The port's grouped Deconvolution weights with the groups rolled by one (not reversed):
    the order is read off the port's weights and checked by re-running Caffe's layer."""
    net = _net(tmp_path, FUSE, "fuse")
    m = _port(net)
    t = _init(m, "up/weight")
    w = numpy_helper.to_array(t)
    t.CopyFrom(numpy_helper.from_array(np.roll(w, 1, axis=0), "up/weight"))
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "up", r.format()
    d = r.diagnosis_for("up")
    assert d.kind == "deconv_groups" and "group 0 holds Caffe's group 3" in d.text, r.format()
    assert d.evidence.get("reproduced") is True


def _block(k, bottom):
    name = "conv%d" % k
    return _conv(name, bottom, 4, k=3, pad=1, extra="bias_term: false") + """
layer { name: "bn%d" type: "BatchNorm" bottom: "%s" top: "%s" }
layer { name: "scale%d" type: "Scale" bottom: "%s" top: "%s" scale_param { bias_term: true } }
layer { name: "relu%d" type: "ReLU" bottom: "%s" top: "%s" }
""" % (k, name, name, k, name, name, k, name, name)


# MobileNet's run of blocks of one shape: conv -> BatchNorm -> Scale -> ReLU, three times
BLOCKS = HEAD % (4, 6, 6) + _block(1, "data") + _block(2, "conv1") + _block(3, "conv2")


def test_a_missing_scale_is_not_paired_with_the_next_blocks(tmp_path):
    """The port without scale1 (its ReLU reads the BatchNorm): every tensor of the next blocks
    has the Scale's shape, and the next block's Scale (an Add, a convolution further on)
    reproduced the ReLU after it exactly; a part holding a convolution is no Scale's, so
    scale1 has no tensor, relu1 checks both, and the cause is named at scale1 alone."""
    net = _net(tmp_path, BLOCKS, "blocks")
    m = _port(net)
    mul, add = _node(m, "scale1/scaled"), _node(m, "scale1/scale")
    for n in m.graph.node:
        n.input[:] = [mul.input[0] if i == add.output[0] else i for i in n.input]
    m.graph.node.remove(add)
    m.graph.node.remove(mul)
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "scale1", r.format()
    assert [d.kind for d in r.diagnosis] == ["scale_missing"], r.format()
    assert r.row("conv1@scale1").tensor is None and r.row("conv2").status == "ok"
    assert all(row.status in ("ok", "input") for row in r.rows if row.layer_index > 6), r.format()


def _cli(argv):
    import io

    from engine.tools.cli import main
    out, err = io.StringIO(), io.StringIO()
    return main(argv, out, err), out.getvalue(), err.getvalue()


def test_command_errors_are_one_line_exit_1(tmp_path):
    """A port of another net whose input fits (the blocks net's port against the pooled net
    at the same input), a .caffemodel given as the port, a corrupt .onnx: one line, exit 1."""
    import onnx
    pooled = HEAD % (4, 6, 6) + _conv("conv1", "data", 6, k=1, pad=0) + _conv("conv2", "conv1", 3, k=1, pad=0) + \
        _conv("conv3", "conv2", 2, k=1, pad=0)
    net = _net(tmp_path, pooled, "other")
    net.save(str(tmp_path / "other.caffemodel"))
    port = tmp_path / "blocks.onnx"
    onnx.save(_port(_net(tmp_path, BLOCKS, "blocks")), str(port))
    (tmp_path / "cut.onnx").write_bytes(port.read_bytes()[:300])
    base = ["compare-port", str(tmp_path / "other.prototxt"), "--weights", str(tmp_path / "other.caffemodel")]
    for onnx_file, words in ((port, "is not a port of this net: 3 of its 3 convolution/InnerProduct weight "
                                     "blobs have no weight of their size in the port (conv1, conv2, conv3)"),
                             (tmp_path / "other.caffemodel", "not an ONNX model: no graph in it (a .caffemodel?"),
                             (tmp_path / "cut.onnx", "cut.onnx: not an ONNX model")):
        code, out, err = _cli(base + ["--onnx", str(onnx_file)])
        assert code == 1 and out == "", (out, err)
        assert len(err.strip().splitlines()) == 1 and words in err, err


def test_a_line_covering_several_layers_reads_once(tmp_path):
    """The diagnosis line of a cause at several layers is printed once, saying which itself
    ("every BatchNorm (3 of 3): ...", not "(every BatchNorm): every BatchNorm ...")."""
    net = _net(tmp_path, BLOCKS, "blocks")
    m = _port(net)
    for k in (1, 2, 3):
        t = _init(m, "bn%d/std" % k)
        std = numpy_helper.to_array(t).astype(np.float64)
        t.CopyFrom(numpy_helper.from_array(np.sqrt(std ** 2 - 1e-5 + 1e-3).astype(np.float32), t.name))
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "bn1" and [d.kind for d in r.diagnosis] == ["batchnorm_eps"], r.format()
    text = r.format()
    assert "\n  every BatchNorm (3 of 3): own error" in text and "(every BatchNorm):" not in text, text


AVE_CEIL = HEAD % (3, 16, 16) + _conv("conv1", "data", 4) + """
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
""" + _conv("conv2", "pool1", 4) + """
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
"""


def test_export_torch_module_through_torch_onnx_keeps_caffe_ceil_pooling(tmp_path):
    """export-torch's AVE pooling (CIFAR-10 full's: 16 -> 8, rounded up; then 8 -> 4 with
    padding) exported by torch.onnx: traced, its output size was computed by a floor division
    of a negative size, which the trace truncates (7, not 8), and its window sums by
    avg_pool2d's divisor_override, which torch.onnx drops. The port is now faithful."""
    torch = pytest.importorskip("torch")
    import warnings

    from engine.ports.torch_export import export_torch, load_module
    net = _net(tmp_path, AVE_CEIL, "ave")
    res = export_torch(net, tmp_path / "ave_model.py")
    mod = load_module(res.path)
    model = getattr(mod, mod.__all__[0])()
    model.load_state_dict(torch.load(res.state_dict_path, weights_only=True))
    model.eval()
    path = tmp_path / "ave_torch.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 3, 16, 16),), str(path), dynamo=False, opset_version=13,
                          input_names=["data"])
    r = compare_port(net, str(path))
    assert r.faithful, r.format()


def test_a_failing_node_not_named_as_a_blob_is_where_the_port_stops(tmp_path):
    """MMdnn names a Gemm's output 'ip1_1' and the ReLU after it 'relu1': when the Gemm cannot
    run, the first value the port did not reach is ip1's, not the ReLU's the name pairs."""
    net = _net(tmp_path, POOLED, "pooled")
    m = _port(net)
    conv = _node(m, "conv2/conv")
    out = conv.output[0]
    for n in m.graph.node:
        n.input[:] = ["conv2_1" if i == out else i for i in n.input]
    conv.output[0] = "conv2_1"
    conv.attribute.append(helper.make_attribute("ratio", 0.5))        # onnxruntime refuses the node
    r = compare_port(net, m)
    assert r.first_departing == "conv2" and "the port cannot run here: node conv2/conv" in r.message, r.format()


def test_an_old_opset_the_converter_cannot_upgrade_is_said_so():
    """An opset-6 port (MMdnn's) that onnx.version_converter refuses: the note says why,
    before onnxruntime's own complaint about the old ops."""
    from onnx import TensorProto

    from engine.ports.onnx_port import OnnxPort
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [5, 2])],   # not the weight's shape
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    m.ir_version = 3
    port = OnnxPort(m, "old.onnx")
    assert port.upgraded[:2] == (6, None)
    assert any("onnx.version_converter cannot upgrade it: " in n for n in port.notes), port.notes


IP_NET = HEAD % (3, 4, 4) + _conv("conv1", "data", 4) + """
layer { name: "ip1" type: "InnerProduct" bottom: "conv1" top: "ip1" inner_product_param { num_output: 5 } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param { num_output: 3 } }
"""


def test_a_transposed_inner_product_weight_reshaped_back(tmp_path):
    """MMdnn stores an InnerProduct weight input x output (a Gemm without transB); reshaping it
    back to output x input instead of transposing it is the reshape mistake too, named."""
    net = _net(tmp_path, IP_NET, "ip")
    m = _port(net)
    t = _init(m, "ip2/weight")
    w = numpy_helper.to_array(t)                                       # 3 x 5, Gemm transB=1
    t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w.T).reshape(w.shape), t.name))
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "ip2", r.format()
    d = r.diagnosis_for("ip2")
    assert d.kind == "ip_weight_reshaped" and "stored transposed (5 x 3" in d.text, r.format()
    assert [x.kind for x in r.diagnosis] == ["ip_weight_reshaped"]


# MobileNet v2's residual block as netgen lays it out: BatchNorm into its own blob, the Scale in
# place on it, the block's input added back
RESIDUAL = HEAD % (4, 6, 6) + _conv("conv1", "data", 4) + _conv("conv2", "conv1", 4) + """
layer { name: "bn2" type: "BatchNorm" bottom: "conv2" top: "bn2" }
layer { name: "scale2" type: "Scale" bottom: "bn2" top: "bn2" scale_param { bias_term: true } }
layer { name: "block" type: "Eltwise" bottom: "conv1" bottom: "bn2" top: "block" }
"""


def test_a_residual_add_is_not_the_batchnorm_before_it(tmp_path):
    """MMdnn's MobileNet v2: BatchNorm+Scale one BatchNormalization, then the residual Add. With
    a kernel flipped in the block the values downstream differ end to end; the Add (reading
    the block's input, which no BatchNorm reads) was paired with the BatchNorm, with an
    'unknown' cause at it: now the kernel is the one finding."""
    net = _net(tmp_path, RESIDUAL, "residual")
    m = _port(net)
    eps = 1e-5
    mean, std = (numpy_helper.to_array(_init(m, "bn2/" + k)) for k in ("mean", "std"))
    g, b = (numpy_helper.to_array(_init(m, "scale2/" + k)) for k in ("scale", "bias"))
    sub, add = _node(m, "bn2/centered"), _node(m, "scale2/scale")
    for name, arr in (("f_gamma", g), ("f_beta", b), ("f_mean", mean), ("f_var", std.astype(np.float64) ** 2 - eps)):
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(arr, np.float32).reshape(-1), name))
    fused = helper.make_node("BatchNormalization", [sub.input[0], "f_gamma", "f_beta", "f_mean", "f_var"],
                             [add.output[0]], epsilon=eps, name="bn2_fused")
    idx = list(m.graph.node).index(sub)
    for n in [n for n in m.graph.node if n.name.startswith(("bn2/", "scale2/"))]:
        m.graph.node.remove(n)
    m.graph.node.insert(idx, fused)
    assert compare_port(net, strip_tensor_names(_copy(m))).faithful
    t = _init(m, "conv2/weight")
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t)[:, :, ::-1, ::-1].copy(), t.name))
    r = compare_port(net, strip_tensor_names(m))
    assert r.first_departing == "conv2", r.format()
    assert [d.kind for d in r.diagnosis] == ["kernel_flipped"], r.format()
    assert r.row("block").tensor is not None and r.row("block").status == "ok", r.format()

"""Small Caffe nets and ONNX ports of them built by hand with onnx.helper from the engine's
weights (a faithful port, then bugs planted by editing it), for the port debugger's tests."""
import numpy as np

import engine
from benchmarks import onnx_edit

SMALL = """
name: "small"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 16 dim: 16 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1
                            weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" batch_norm_param { eps: 1e-5 } }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true
        filler { type: "uniform" min: 0.5 max: 1.5 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "norm1" type: "LRN" bottom: "pool1" top: "norm1" lrn_param { local_size: 5 alpha: 0.02 beta: 0.75 } }
layer { name: "ip1" type: "InnerProduct" bottom: "norm1" top: "ip1"
        inner_product_param { num_output: 10 weight_filler { type: "gaussian" std: 0.1 }
                              bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "prob" type: "Softmax" bottom: "ip1" top: "prob" }
"""

# Crop (its second bottom gives a shape only), Power, Dropout
CROP = """
name: "crop_net"
layer { name: "data" type: "Input" top: "data" top: "ref"
        input_param { shape { dim: 1 dim: 3 dim: 12 dim: 12 } shape { dim: 1 dim: 4 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "crop1" type: "Crop" bottom: "conv1" bottom: "ref" top: "crop1"
        crop_param { axis: 2 offset: 2 offset: 3 } }
layer { name: "pw" type: "Power" bottom: "crop1" top: "pw" power_param { scale: 2 } }
layer { name: "drop" type: "Dropout" bottom: "pw" top: "pw" dropout_param { dropout_ratio: 0.5 } }
"""

# the same with a second BatchNorm (for "every BatchNorm") and an AVE pooling with padding
TWO_BN = """
name: "two_bn"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 12 dim: 12 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "bn2" type: "BatchNorm" bottom: "conv2" top: "conv2" }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
"""


# a non-first convolution, Scale on a blob whose W equals its C (6), PReLU per channel,
# Eltwise SUM with coefficients, a grouped Deconvolution, MAX pooling with padding
MIX = """
name: "mix"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 6 dim: 6 } } }
layer { name: "conv0" type: "Convolution" bottom: "data" top: "conv0"
        convolution_param { num_output: 4 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "conv1" type: "Convolution" bottom: "conv0" top: "conv1"
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 }
                            bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true
        filler { type: "uniform" min: 0.5 max: 1.5 } bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "prelu1" type: "PReLU" bottom: "conv1" top: "conv1"
        prelu_param { filler { type: "uniform" min: 0.05 max: 0.5 } } }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "sum" type: "Eltwise" bottom: "conv2" bottom: "conv1" top: "sum"
        eltwise_param { operation: SUM coeff: 0.5 coeff: -2 } }
layer { name: "deconv" type: "Deconvolution" bottom: "sum" top: "deconv"
        convolution_param { num_output: 6 kernel_size: 4 stride: 2 pad: 1 group: 2
                            weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "pool" type: "Pooling" bottom: "deconv" top: "pool"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 } }
"""

# LRN within the channel (ONNX's LRN is across channels only)
WITHIN = """
name: "within"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "norm1" type: "LRN" bottom: "conv1" top: "norm1"
        lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL } }
"""


def make_net(tmp_path, text=SMALL, seed=3, name="net.prototxt", scale_factor=2.0):
    """A TEST net with seeded filler weights and BatchNorm statistics that are not trivial."""
    p = tmp_path / name
    p.write_text(text)
    engine.set_random_seed(seed)
    net = engine.Net(str(p), engine.TEST)
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        if layer.type == "BatchNorm":
            C = layer.blobs[0].shape[0]
            layer.blobs[0].data[...] = rng.normal(0.3, 0.5, C) * scale_factor
            layer.blobs[1].data[...] = rng.uniform(0.5, 2.0, C) * scale_factor
            layer.blobs[2].data[...] = scale_factor
    return net, p


def _arr(blob):
    return np.array(blob.data, dtype=np.float32, copy=True)


def build_port(net, opset=13, in_place_names="layer"):
    """A faithful ONNX port of ``net`` (the layer types of SMALL/TWO_BN), tensors named as
    Caffe's blobs; an in-place layer's value is named after the layer."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits = [], []
    current = {}
    shapes = {}

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name))
        return name

    def const_i64(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.int64), name))
        return name

    inputs = []
    for i, layer in enumerate(net.layers):
        name = net.layer_names[i]
        bots = [current[net.blob_names[b]] for b in net.bottom_id_vecs[i]]
        tops = [net.blob_names[t] for t in net.top_id_vecs[i]]
        in_place = tops and tops[0] in [net.blob_names[b] for b in net.bottom_id_vecs[i]]
        out = name if (in_place and in_place_names == "layer") else tops[0] if tops else name
        lp = layer.layer_param
        t = layer.type
        if t == "Input":
            for top in tops:
                shape = list(net.blobs[top].shape)
                inputs.append(helper.make_tensor_value_info(top, TensorProto.FLOAT, shape))
                current[top] = top
            continue
        if t == "Convolution":
            cp = lp.convolution_param
            k, pad, stride = layer.kernel_shape, layer.pad, layer.stride
            ins = [bots[0], const(name + "_W", _arr(layer.blobs[0]))]
            if cp.bias_term:
                ins.append(const(name + "_b", _arr(layer.blobs[1])))
            nodes.append(helper.make_node("Conv", ins, [out], name=name, kernel_shape=list(k),
                                          pads=list(pad) + list(pad), strides=list(stride), group=int(cp.group)))
        elif t == "BatchNorm":
            m, v, sf = (_arr(b) for b in layer.blobs)
            f = 0.0 if sf[0] == 0 else 1.0 / sf[0]
            C = m.shape[0]
            nodes.append(helper.make_node("BatchNormalization", [bots[0], const(name + "_gamma", np.ones(C)),
                                                                 const(name + "_beta", np.zeros(C)),
                                                                 const(name + "_mean", m * f),
                                                                 const(name + "_var", v * f)], [out], name=name,
                                          epsilon=float(lp.batch_norm_param.eps)))
        elif t == "Scale":
            g = _arr(layer.blobs[0]).reshape(1, -1, 1, 1)
            nodes.append(helper.make_node("Mul", [bots[0], const(name + "_gamma", g)], [name + "_mul"],
                                          name=name + "_m"))
            if len(layer.blobs) > 1:
                nodes.append(helper.make_node("Add", [name + "_mul", const(name + "_beta",
                                                                           _arr(layer.blobs[1]).reshape(1, -1, 1, 1))],
                                              [out], name=name))
            else:
                nodes[-1].output[0] = out
        elif t == "ReLU":
            nodes.append(helper.make_node("Relu", [bots[0]], [out], name=name))
        elif t == "Split":
            for top in tops:
                current[top] = bots[0]
            continue
        elif t == "Eltwise":
            ep = lp.eltwise_param
            coeff = list(ep.coeff)
            op = {0: "Mul", 1: "Add", 2: "Max"}[ep.operation]
            ins = list(bots)
            if op == "Add" and coeff and any(k != 1 for k in coeff):
                for k, (b, cf) in enumerate(zip(bots, coeff)):
                    nodes.append(helper.make_node("Mul", [b, const("%s_c%d" % (name, k), np.float32(cf))],
                                                  ["%s_x%d" % (name, k)], name="%s_x%d" % (name, k)))
                ins = ["%s_x%d" % (name, k) for k in range(len(bots))]
            cur = ins[0]
            for k, b in enumerate(ins[1:]):
                o = out if k == len(ins) - 2 else "%s_%d" % (name, k)
                nodes.append(helper.make_node(op, [cur, b], [o], name=name if o == out else o))
                cur = o
        elif t == "PReLU":
            slope = _arr(layer.blobs[0])
            if not lp.prelu_param.channel_shared:
                slope = slope.reshape(-1, 1, 1)
            nodes.append(helper.make_node("PRelu", [bots[0], const(name + "_slope", slope)], [out], name=name))
        elif t == "Deconvolution":
            cp = lp.convolution_param
            ins = [bots[0], const(name + "_W", _arr(layer.blobs[0]))]
            if cp.bias_term:
                ins.append(const(name + "_b", _arr(layer.blobs[1])))
            nodes.append(helper.make_node("ConvTranspose", ins, [out], name=name, kernel_shape=list(layer.kernel_shape),
                                          pads=list(layer.pad) + list(layer.pad), strides=list(layer.stride),
                                          group=int(cp.group)))
        elif t == "Pooling" and lp.pooling_param.global_pooling:
            op = "GlobalMaxPool" if lp.pooling_param.pool == 0 else "GlobalAveragePool"
            nodes.append(helper.make_node(op, [bots[0]], [out], name=name))
        elif t == "Pooling":
            pp = lp.pooling_param
            op = "MaxPool" if pp.pool == 0 else "AveragePool"
            kw = dict(kernel_shape=[layer.kernel_h, layer.kernel_w], strides=[layer.stride_h, layer.stride_w],
                      pads=[layer.pad_h, layer.pad_w, layer.pad_h, layer.pad_w], ceil_mode=1)
            if op == "AveragePool":
                kw["count_include_pad"] = 1
            nodes.append(helper.make_node(op, [bots[0]], [out], name=name, **kw))
        elif t == "LRN":
            r = lp.lrn_param
            nodes.append(helper.make_node("LRN", [bots[0]], [out], name=name, size=int(r.local_size),
                                          alpha=float(r.alpha), beta=float(r.beta), bias=float(r.k)))
        elif t == "InnerProduct":
            nodes.append(helper.make_node("Flatten", [bots[0]], [name + "_flat"], name=name + "_flatten", axis=1))
            nodes.append(helper.make_node("Gemm", [name + "_flat", const(name + "_W", _arr(layer.blobs[0])),
                                                   const(name + "_b", _arr(layer.blobs[1]))], [out], name=name,
                                          transB=1))
        elif t == "Softmax":
            nodes.append(helper.make_node("Softmax", [bots[0]], [out], name=name, axis=1))
        elif t == "Crop":
            axis = lp.crop_param.axis
            offs = list(layer.offsets[axis:])
            ref = net.bottom_vecs[i][1].shape
            axes = list(range(axis, axis + len(offs)))
            nodes.append(helper.make_node("Slice", [bots[0], const_i64(name + "_starts", offs),
                                                    const_i64(name + "_ends", [o + ref[a] for o, a in zip(offs, axes)]),
                                                    const_i64(name + "_axes", axes)], [out], name=name))
        elif t == "Dropout":
            nodes.append(helper.make_node("Identity", [bots[0]], [out], name=name))
        elif t == "Power":
            pp = lp.power_param
            cur = bots[0]
            steps = [("Mul", pp.scale != 1, pp.scale), ("Add", pp.shift != 0, pp.shift), ("Pow", pp.power != 1,
                                                                                          pp.power)]
            todo = [st for st in steps if st[1]] or [("Identity", True, None)]
            for k, (op, _, v) in enumerate(todo):
                o = out if k == len(todo) - 1 else "%s_%d" % (name, k)
                ins = [cur] if v is None else [cur, const("%s_%s" % (name, op), np.float32(v))]
                nodes.append(helper.make_node(op, ins, [o], name=name if o == out else o))
                cur = o
        else:
            raise ValueError("build_port: no lowering for %s" % t)
        for top in tops:
            current[top] = out
            shapes[out] = list(net.blobs[top].shape)
    outputs = [helper.make_tensor_value_info(current[o], TensorProto.FLOAT, list(net.blobs[o].shape))
               for o in net.outputs]
    graph = helper.make_graph(nodes, net.name, inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------- planting bugs
node, attr, init_array, set_init = onnx_edit.node, onnx_edit.attr, onnx_edit.init_array, onnx_edit.set_init


def rename_all(model, prefix="t"):
    """Every tensor (inputs, outputs, intermediates) renamed, initializers too."""
    from engine.ports.onnx_port import strip_tensor_names
    return strip_tensor_names(model, prefix)


def randomize(net, seed=0):
    """Seeded weights that keep activations in range (He-style normal weights, small biases;
    BatchNorm statistics and scale factors not trivial) -- deploy files have no fillers."""
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        if not layer.blobs:
            continue
        if layer.type == "BatchNorm":
            C = layer.blobs[0].shape[0]
            sf = 1.5
            layer.blobs[0].data[...] = rng.normal(0.1, 0.3, C) * sf
            layer.blobs[1].data[...] = rng.uniform(0.5, 1.5, C) * sf
            layer.blobs[2].data[...] = sf
            continue
        for k, b in enumerate(layer.blobs):
            shape = b.shape
            if k == 0 and len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                if layer.type == "Deconvolution":
                    fan_in = int(shape[0] * np.prod(shape[2:]))
                b.data[...] = rng.normal(0, np.sqrt(2.0 / max(fan_in, 1)), shape)
            elif layer.type in ("Scale", "PReLU") and k == 0:
                b.data[...] = rng.uniform(0.5, 1.5, shape)
            else:
                b.data[...] = rng.normal(0, 0.1, shape)


def zoo_net(path, batch=1, seed=0):
    """A zoo deploy net in TEST, batch ``batch``, with randomized weights."""
    engine.set_random_seed(seed)
    net = engine.Net(str(path), engine.TEST)
    for name in net.inputs:
        s = net.blobs[name].shape
        net.blobs[name].reshape(batch, *s[1:])
    net.reshape()
    randomize(net, seed)
    return net


def torch_onnx_port(net, tmp_path, opset=13):
    """A port made by other tools: export-torch's module, exported by torch.onnx (tensor
    names of torch's own, no Caffe names but the inputs)."""
    import torch

    from engine.ports.torch_export import export_torch, load_module
    res = export_torch(net, tmp_path / "port_model.py")
    mod = load_module(res.path)
    model = getattr(mod, mod.__all__[0])()
    model.load_state_dict(torch.load(res.state_dict_path, weights_only=True))
    model.eval()
    args = tuple(torch.zeros(tuple(net.blobs[n].shape)) for n in net.inputs)
    path = tmp_path / "port.onnx"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset,
                          input_names=list(net.inputs), do_constant_folding=True)
    return path


def fuse_bn_scale(model, bn="bn1", scale="scale1", named="scale"):
    """The port with BatchNorm and the Scale after it folded into one BatchNormalization
    (as converters do): gamma and beta from the Scale, its output named as the Scale's
    (``named="bn"``: as the BatchNorm's, as caffe2onnx does)."""
    n = node(model, bn)
    gamma = init_array(model, scale + "_gamma").reshape(-1)
    beta = init_array(model, scale + "_beta").reshape(-1)
    set_init(model, bn + "_gamma", gamma)
    set_init(model, bn + "_beta", beta)
    out = node(model, scale).output[0]
    for k in (scale + "_m", scale):
        model.graph.node.remove(node(model, k))
    if named == "bn":
        _rewire(model, out, n.output[0])
    else:
        n.output[0] = out
    return model


_rewire = onnx_edit.rewire


def caffe2onnx_style(net, variance_bug=False):
    """A port shaped as caffe2onnx makes them: the input renamed ``<blob>_input``, each
    in-place value named as its layer, every BatchNorm+Scale one BatchNormalization named as
    the BatchNorm; ``variance_bug``: the variance divided by (scale factor + 1e-5) (its
    defect), not by the scale factor."""
    m = build_port(net)
    for i, layer in enumerate(net.layers):
        if layer.type == "BatchNorm" and i + 1 < len(net.layers) and net.layers[i + 1].type == "Scale":
            bn, sc = net.layer_names[i], net.layer_names[i + 1]
            fuse_bn_scale(m, bn, sc, named="bn")
            if variance_bug:
                sf = float(layer.blobs[2].data[0])
                set_init(m, bn + "_var", init_array(m, bn + "_var") * sf / (sf + 1e-5))
    for vi in m.graph.input:
        old = vi.name
        vi.name = old + "_input"
        for n in m.graph.node:
            n.input[:] = [vi.name if i == old else i for i in n.input]
    return m


def mmdnn_style(net):
    """A port shaped as MMdnn's ONNX emitter makes them: opset 6 (BatchNormalization with
    is_test, older than onnxruntime runs), an NHWC input ``input_orig`` transposed inside to
    ``input``, every BatchNorm+Scale one BatchNormalization named as the BatchNorm."""
    from onnx import helper
    m = build_port(net)
    for i, layer in enumerate(net.layers):
        if layer.type == "BatchNorm" and i + 1 < len(net.layers) and net.layers[i + 1].type == "Scale":
            fuse_bn_scale(m, net.layer_names[i], net.layer_names[i + 1], named="bn")
    transposed_input(m, name="input_orig")
    t = node(m, "to_nchw")
    _rewire(m, t.output[0], "input")
    t.output[0] = "input"
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            n.attribute.append(helper.make_attribute("is_test", 1))
        if n.op_type == "Gemm":
            n.attribute.append(helper.make_attribute("broadcast", 1))
    for t in m.graph.initializer:              # IR 3: every initializer is a graph input too
        m.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    m.opset_import[0].version = 6
    m.ir_version = 3
    return m


def transposed_input(model, perm=(0, 2, 3, 1), drop_batch=False, name="input_nhwc"):
    """The port taking its input in another layout (NHWC by default; ``drop_batch``: with no
    batch axis, as MMdnn's HWC ports): the graph input renamed and re-shaped, a Transpose
    (and an Unsqueeze) in front giving the old input."""
    from onnx import helper, numpy_helper
    g = model.graph
    vi = g.input[0]
    old = vi.name
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    src = dims[1:] if drop_batch else dims
    new_dims = [src[k] for k in perm]
    back = [int(k) for k in np.argsort(perm)]
    vi.name = name
    del vi.type.tensor_type.shape.dim[:]
    for d in new_dims:
        vi.type.tensor_type.shape.dim.add().dim_value = d
    nodes = [helper.make_node("Transpose", [name], [old + "_t" if drop_batch else old], perm=back, name="to_nchw")]
    if drop_batch:
        g.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "batch_axis"))
        nodes.append(helper.make_node("Unsqueeze", [old + "_t", "batch_axis"], [old], name="add_batch"))
    for k, n in enumerate(nodes):
        g.node.insert(k, n)
    return model


def prepend_mean(model, mean, input_name="data"):
    """The port subtracting a per-channel mean from its input itself (it expects raw input)."""
    from onnx import helper, numpy_helper
    g = model.graph
    g.initializer.append(numpy_helper.from_array(np.asarray(mean, np.float32).reshape(1, -1, 1, 1), "port_mean"))
    for n in g.node:
        n.input[:] = ["data_minus_mean" if i == input_name else i for i in n.input]
    g.node.insert(0, helper.make_node("Sub", [input_name, "port_mean"], ["data_minus_mean"], name="sub_mean"))
    return model


# Every trap of export-torch in one net: pooling's ceil/clip rules and AVE divisors, padding
# over half the kernel, grouped/dilated convolution, grouped Deconvolution, Crop offsets,
# Eltwise coefficients/PROD/MAX, LRN both regions, Power/Exp/Log with base/scale/shift,
# Scale/Bias on axes and from a second bottom, BatchNorm 4-d and 2-d, Flatten, Reshape with
# 0 and -1, InnerProduct on an axis and transposed, Softmax on an axis, Slice by points and
# equal parts, Concat on two axes, PReLU shared and not, names that are not identifiers.
TRAPS = """
name: "traps-net"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 4 dim: 9 dim: 10 } } }
layer { name: "conv/g" type: "Convolution" bottom: "data" top: "conv/g"
        convolution_param { num_output: 6 kernel_size: 3 group: 2 dilation: 2 pad: 2 bias_term: false
                            weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "prelu_c" type: "PReLU" bottom: "conv/g" top: "conv/g" }
layer { name: "deconv" type: "Deconvolution" bottom: "conv/g" top: "deconv"
        convolution_param { num_output: 4 kernel_size: 4 stride: 2 pad: 1 group: 2
                            weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "crop" type: "Crop" bottom: "deconv" bottom: "data" top: "crop"
        crop_param { axis: 2 offset: 3 offset: 5 } }
layer { name: "elt_sum" type: "Eltwise" bottom: "crop" bottom: "data" top: "elt_sum"
        eltwise_param { operation: SUM coeff: 0.5 coeff: -2 } }
layer { name: "elt_prod" type: "Eltwise" bottom: "elt_sum" bottom: "data" top: "elt_prod"
        eltwise_param { operation: PROD } }
layer { name: "elt_max" type: "Eltwise" bottom: "elt_prod" bottom: "crop" top: "elt_max"
        eltwise_param { operation: MAX } }
layer { name: "abs" type: "AbsVal" bottom: "elt_max" top: "abs" }
layer { name: "bnll" type: "BNLL" bottom: "abs" top: "bnll" }
layer { name: "power" type: "Power" bottom: "bnll" top: "power" power_param { power: 2 scale: 0.5 shift: 1 } }
layer { name: "log" type: "Log" bottom: "power" top: "log" log_param { base: 10 scale: 2 shift: 3 } }
layer { name: "exp" type: "Exp" bottom: "log" top: "exp" exp_param { base: 2 scale: 0.5 shift: 0.1 } }
layer { name: "lrn_w" type: "LRN" bottom: "exp" top: "lrn_w"
        lrn_param { norm_region: WITHIN_CHANNEL local_size: 3 alpha: 0.5 beta: 0.75 } }
layer { name: "lrn_a" type: "LRN" bottom: "lrn_w" top: "lrn_a" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 k: 2 } }
layer { name: "elu" type: "ELU" bottom: "lrn_a" top: "elu" elu_param { alpha: 0.7 } }
layer { name: "p1" type: "Pooling" bottom: "elu" top: "p1" pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "p2" type: "Pooling" bottom: "elu" top: "p2" pooling_param { pool: MAX kernel_size: 2 stride: 2 pad: 1 } }
layer { name: "p3" type: "Pooling" bottom: "elu" top: "p3" pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 2 } }
layer { name: "p4" type: "Pooling" bottom: "elu" top: "p4" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "p5" type: "Pooling" bottom: "elu" top: "p5" pooling_param { pool: AVE kernel_size: 2 stride: 2 pad: 1 } }
layer { name: "p6" type: "Pooling" bottom: "elu" top: "p6" pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "p7" type: "Pooling" bottom: "elu" top: "p7" pooling_param { pool: AVE global_pooling: true } }
layer { name: "p8" type: "Pooling" bottom: "elu" top: "p8" pooling_param { pool: MAX global_pooling: true } }
layer { name: "p9" type: "Pooling" bottom: "elu" top: "p9"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 round_mode: FLOOR } }
layer { name: "concat1" type: "Concat" bottom: "p1" bottom: "p2" bottom: "p4" bottom: "p5" top: "concat1" }
layer { name: "concat2" type: "Concat" bottom: "p1" bottom: "p3" top: "concat2" concat_param { axis: 2 } }
layer { name: "slice1" type: "Slice" bottom: "concat1" top: "s_a" top: "s_b" top: "s_c"
        slice_param { axis: 1 slice_point: 4 slice_point: 10 } }
layer { name: "slice2" type: "Slice" bottom: "concat2" top: "s_d" top: "s_e" slice_param { axis: 3 } }
layer { name: "bn" type: "BatchNorm" bottom: "s_b" top: "s_b" }
layer { name: "sc" type: "Scale" bottom: "s_b" top: "s_b" scale_param { bias_term: true
        filler { type: "uniform" min: 0.5 max: 1.5 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "sc2" type: "Scale" bottom: "s_c" bottom: "s_b" top: "sc2" scale_param { axis: 0 } }
layer { name: "bias" type: "Bias" bottom: "sc2" top: "bias" bias_param { axis: 1 num_axes: 2
        filler { type: "gaussian" std: 0.3 } } }
layer { name: "flat" type: "Flatten" bottom: "bias" top: "flat" }
layer { name: "rs" type: "Reshape" bottom: "flat" top: "rs" reshape_param { shape { dim: 0 dim: -1 dim: 9 } } }
layer { name: "ip_ax" type: "InnerProduct" bottom: "rs" top: "ip_ax" inner_product_param { num_output: 5 axis: 2
        weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "ip_t" type: "InnerProduct" bottom: "ip_ax" top: "ip_t" inner_product_param { num_output: 7
        transpose: true weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "bn2d" type: "BatchNorm" bottom: "ip_t" top: "bn2d" }
layer { name: "tanh" type: "TanH" bottom: "bn2d" top: "tanh" }
layer { name: "sig" type: "Sigmoid" bottom: "tanh" top: "sig" }
layer { name: "drop" type: "Dropout" bottom: "sig" top: "sig" dropout_param { dropout_ratio: 0.3 } }
layer { name: "sm" type: "Softmax" bottom: "ip_ax" top: "sm" softmax_param { axis: 2 } }
layer { name: "prelu_s" type: "PReLU" bottom: "s_a" top: "prelu_s" prelu_param { channel_shared: true
        filler { type: "constant" value: 0.2 } } }
layer { name: "relu_l" type: "ReLU" bottom: "s_d" top: "relu_l" relu_param { negative_slope: 0.1 } }
layer { name: "3x3/forward" type: "ReLU" bottom: "s_e" top: "3x3/forward" }
"""


def resnet_tiny_deploy(root, tmp_path, batch=2):
    """examples/resnet_tiny as a deploy net (no label, no loss), batch ``batch``."""
    text = (root / "examples" / "resnet_tiny" / "resnet_tiny.prototxt").read_text()
    text = text[:text.index('layer {\n  name: "loss"')]
    text = text.replace('  top: "label"\n', "").replace(" shape { dim: 8 }", "")
    text = text.replace("shape { dim: 8 dim: 3", "shape { dim: %d dim: 3" % batch)
    p = tmp_path / "resnet_tiny_deploy.prototxt"
    p.write_text(text)
    return zoo_net(p)

"""Which ONNX opsets the exporter writes: 13 by default (the oldest with per-axis Softmax and
axes as inputs, read by every current runtime), up to the newest that both the installed onnx
and onnxruntime know."""
from engine.ports.errors import ExportError, require

DEFAULT_OPSET = 13
MIN_OPSET = 13
_NEWEST = {}


def _probe_model(onnx, opset):
    """A tiny model of ops whose schemas change between opsets (shapes, pads, reductions)."""
    from onnx import TensorProto, helper
    f = TensorProto.FLOAT
    i64 = TensorProto.INT64
    inits = [helper.make_tensor("shape", i64, [2], [1, -1]),
             helper.make_tensor("pads", i64, [8], [0, 0, 1, 1, 0, 0, 1, 1]),
             helper.make_tensor("axes", i64, [1], [1]),
             helper.make_tensor("starts", i64, [1], [0]),
             helper.make_tensor("ends", i64, [1], [1])]
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"]),
             helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2]),
             helper.make_node("MaxPool", ["a"], ["m"], kernel_shape=[1, 1]),
             helper.make_node("ReduceMean", ["m", "axes"] if opset >= 18 else ["m"], ["r"], keepdims=1,
                              **({} if opset >= 18 else {"axes": [1]})),
             helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["s"]),
             helper.make_node("Reshape", ["s", "shape"], ["y0"]),
             helper.make_node("Cast", ["y0"], ["y1"], to=f),
             helper.make_node("Identity", ["y1"], ["y"])]
    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", f, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("y", f, None)], initializer=inits)
    opsetid = helper.make_opsetid("", opset)
    model = helper.make_model(graph, opset_imports=[opsetid])
    model.ir_version = helper.find_min_ir_version_for([opsetid])
    return model


def newest_opset():
    """The newest opset that the installed onnx defines and onnxruntime runs (probed once;
    without onnxruntime, onnx's newest)."""
    if "value" in _NEWEST:
        return _NEWEST["value"]
    onnx = require("onnx", "ONNX export")
    top = int(onnx.defs.onnx_opset_version())
    try:
        import onnxruntime as ort
    except ImportError:        # export alone needs only onnx: its newest opset, then
        _NEWEST["value"] = top
        return top
    found = MIN_OPSET
    for opset in range(top, MIN_OPSET - 1, -1):
        try:
            ort.InferenceSession(_probe_model(onnx, opset).SerializeToString(),
                                 providers=["CPUExecutionProvider"])
        except Exception:
            continue
        found = opset
        break
    _NEWEST["value"] = found
    return found


def resolve_opset(opset=None):
    """``opset`` as an int: None -> DEFAULT_OPSET; "latest"/"newest"/"max" -> newest_opset();
    a number above the newest is clamped to it; below MIN_OPSET is an error."""
    if opset is None:
        return DEFAULT_OPSET
    if isinstance(opset, str):
        if opset.strip().lower() in ("latest", "newest", "max"):
            return newest_opset()
        try:
            opset = int(opset)
        except ValueError:
            raise ExportError("opset must be a number or 'latest' (got %r)" % opset) from None
    opset = int(opset)
    if opset == DEFAULT_OPSET:
        return opset
    if opset < MIN_OPSET:
        raise ExportError("opset %d is not supported: the exporter writes opset %d or newer (Softmax on one "
                          "axis, axes as inputs); ask for --opset %d" % (opset, MIN_OPSET, MIN_OPSET))
    return min(opset, newest_opset())

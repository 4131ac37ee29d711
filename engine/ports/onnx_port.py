"""An ONNX model as a :class:`~engine.ports.port_graph.PortGraph`: run by onnxruntime (CPU,
graph optimisations off: the port's arithmetic as its graph states it), whole with every
intermediate tensor exposed, or a part cut out between given tensors."""
import json
import os
from typing import Any, Dict, List, Tuple

import numpy as np

from engine.ports.activations import PortError, require
from engine.ports.port_graph import PortGraph, PortNode


class OnnxPort(PortGraph):
    """An ONNX model's graph: its tensors in order, who makes them, what each depends on."""

    def failure_note(self):
        return "onnxruntime cannot run the whole port; run node by node it stops at %s" % self.failure

    def __init__(self, model, label):
        self.onnx = require("onnx", "onnx", "compare-port")
        self.ort = require("onnxruntime", "onnx", "compare-port")
        model, self.upgraded = _runnable_opset(self.onnx, model)
        self.model = model
        g = model.graph
        self.const = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
        self.input_info = {vi.name: vi for vi in g.input}
        self.onnx_nodes = list(g.node)
        nodes = [PortNode(n.op_type, [i for i in n.input if i] + _implicit_inputs(n), list(n.output),
                          n.name) for n in self.onnx_nodes]
        super().__init__(label, [vi.name for vi in g.input if vi.name not in self.const], nodes)
        self._sessions: Dict[Tuple[Tuple[str, ...], str], Any] = {}
        if self.upgraded and self.upgraded[1] is None:
            self.notes.append("the port's opset %d is older than onnxruntime runs (7 and later), and "
                              "onnx.version_converter cannot upgrade it: %s" % (self.upgraded[0], self.upgraded[2]))
        elif self.upgraded:
            self.notes.append("the port's opset %d is older than onnxruntime runs (7 and later): it was upgraded to "
                              "opset %d with onnx.version_converter (the same ops, the tensor names kept)"
                              % self.upgraded)

    def input_shape(self, name):
        t = self.input_info[name].type.tensor_type
        if not t.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]

    def input_dtype(self, name):
        elem = self.input_info[name].type.tensor_type.elem_type
        try:
            return np.dtype(self.onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else np.dtype(np.float32)
        except Exception:
            return np.dtype(np.float32)

    def name_hints(self):
        """export-onnx's map (``caffe.blob_tensors`` in the model's metadata)."""
        for p in self.model.metadata_props:
            if p.key == "caffe.blob_tensors":
                try:
                    d = json.loads(p.value)
                except ValueError:
                    return {}
                return {str(k): str(v) for k, v in d.items()} if isinstance(d, dict) else {}
        return {}

    def constants(self, inputs, output):
        """The initializers the part from ``inputs`` to ``output`` reads."""
        stop, out, seen, stack = set(inputs), {}, set(), [output]
        while stack:
            t = stack.pop()
            if t in seen or t in stop:
                continue
            seen.add(t)
            if t in self.const:
                v = self.initializer(t)
                if v is not None:
                    out[t] = v
                continue
            k = self.producer.get(t)
            if k is not None:
                stack.extend(self.nodes[k].inputs)
        return out

    def constant_sizes(self):
        out = {int(np.prod(t.dims, dtype=np.int64)) for t in self.model.graph.initializer}
        out |= {int(np.prod(t.dims, dtype=np.int64)) for t in self.model.graph.sparse_initializer}
        for n in self.onnx_nodes:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        out.add(int(np.prod(a.t.dims, dtype=np.int64)))
        return out

    def initializer(self, name):
        """An initializer's value (a weight), or None."""
        if not hasattr(self, "_inits"):
            self._inits = {t.name: t for t in self.model.graph.initializer}
        t = self._inits.get(name)
        return None if t is None else self.onnx.numpy_helper.to_array(t)

    # ------------------------------------------------------------------ running
    def session(self, model):
        so = self.ort.SessionOptions()
        so.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 4
        try:
            return self.ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise PortError("onnxruntime cannot run the port %s: %s" % (self.label, one_line(e))) from None

    def run_options(self):
        ro = self.ort.RunOptions()
        ro.log_severity_level = 4
        return ro

    def run_all(self, feeds):
        """Every tensor the inputs reach, by name.  A port onnxruntime cannot run whole (a
        shape that no longer fits downstream of a bug) is run node by node, as far as it goes;
        ``self.failure`` then says where it stopped."""
        self.failure = None
        m = self.onnx.ModelProto()
        m.CopyFrom(self.model)
        have = {o.name for o in m.graph.output}
        for name in self.order:
            if name not in have and name not in self.inputs:
                m.graph.output.append(self.onnx.ValueInfoProto(name=name))
        try:
            sess = self.session(m)
            names = [o.name for o in sess.get_outputs()]
            vals = sess.run(names, dict(feeds), self.run_options())
        except Exception as e:
            return self._run_nodewise(feeds, one_line(e))
        out = dict(feeds)
        out.update({n: np.asarray(v) for n, v in zip(names, vals)})
        return out

    def _run_nodewise(self, feeds, why):
        helper = self.onnx.helper
        g = self.model.graph
        values = {k: np.asarray(v) for k, v in feeds.items()}
        inits = {t.name: t for t in g.initializer}
        for node in self.onnx_nodes:
            ins = [i for i in list(node.input) + _implicit_inputs(node) if i]
            if any(i not in values and i not in self.const for i in ins):
                continue                           # after a node that failed
            graph_in = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(values[i].dtype),
                                                      list(values[i].shape)) for i in dict.fromkeys(ins) if i in values]
            graph = helper.make_graph([node], "node", graph_in, [self.onnx.ValueInfoProto(name=o) for o in node.output
                                                                 if o],
                                      initializer=[inits[i] for i in dict.fromkeys(ins) if i in inits],
                                      sparse_initializer=[t for t in g.sparse_initializer if t.values.name in ins])
            m = helper.make_model(graph, opset_imports=list(self.model.opset_import))
            m.ir_version = self.model.ir_version
            m.functions.extend(self.model.functions)
            try:
                sess = self.session(m)
                outs = [o for o in node.output if o]
                got = sess.run(outs, {i: values[i] for i in dict.fromkeys(ins) if i in values}, self.run_options())
            except Exception as e:
                if self.failure is None:
                    self.failure = "node %s (%s): %s" % (node.name or node.output[0], node.op_type, one_line(e))
                continue
            values.update({o: np.asarray(v) for o, v in zip(outs, got)})
        if self.failure is None:
            prefix = "onnxruntime cannot run the port %s: " % self.label
            raise PortError(why if why.startswith(prefix) else prefix + why)
        return values

    def run_part(self, inputs, output, values):
        key = (tuple(inputs), output)
        if key not in self._sessions:
            model, names = self.sub_model(list(inputs), output, values)
            self._sessions[key] = (self.session(model), names)
        sess, names = self._sessions[key]
        try:
            return sess.run([output], {n: values[n] for n in names}, self.run_options())[0]
        except Exception as e:
            raise PortError("onnxruntime failed running the port's part for '%s': %s" % (output, one_line(e))) \
                from None

    def sub_model(self, inputs, output, values):
        """The port's sub-graph computing ``output`` from the tensors ``inputs`` (other graph
        inputs it still reaches are kept as inputs); ``values`` give their types and shapes."""
        helper = self.onnx.helper
        inputs = list(dict.fromkeys(inputs))
        stop = set(inputs)
        need_nodes, need_const, extra = set(), set(), []
        stack = [output]
        seen = set()
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in stop:
                continue
            if t in self.const:
                need_const.add(t)
                continue
            k = self.producer.get(t)
            if k is None:
                if t in self.input_info:
                    extra.append(t)
                continue
            if k in need_nodes:
                continue
            need_nodes.add(k)
            stack.extend(self.nodes[k].inputs)
        g = self.model.graph
        ins = []
        for name in inputs + extra:
            v = values[name]
            ins.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
        graph = helper.make_graph([self.onnx_nodes[k] for k in sorted(need_nodes)], "port_part", ins,
                                  [self.onnx.ValueInfoProto(name=output)],
                                  initializer=[t for t in g.initializer if t.name in need_const],
                                  sparse_initializer=[t for t in g.sparse_initializer if t.values.name in need_const])
        m = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        m.ir_version = self.model.ir_version
        m.functions.extend(self.model.functions)
        return m, inputs + extra


MIN_ORT_OPSET = 7


def _runnable_opset(onnx, model):
    """(model, None), or -- for a model older than onnxruntime runs (opset < 7: MMdnn's) --
    (the model upgraded by onnx.version_converter, (old opset, new opset)), or -- when it cannot
    be upgraded -- (the model as it is, (old opset, None, the converter's error))."""
    old = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if old is None or old >= MIN_ORT_OPSET:
        return model, None
    from onnx import version_converter
    why = ""
    for target in (13, 9, MIN_ORT_OPSET):
        try:
            return version_converter.convert_version(model, target), (old, target)
        except Exception as e:
            why = why or one_line(e)
    return model, (old, None, why)


def _implicit_inputs(node):
    """Names a node's sub-graphs (If, Loop, Scan) read from the outer scope."""
    out: List[str] = []
    for a in node.attribute:
        graphs = list(a.graphs) + ([a.g] if a.HasField("g") else [])
        for sg in graphs:
            made = {i.name for i in sg.input} | {t.name for t in sg.initializer}
            for n in sg.node:
                for i in list(n.input) + _implicit_inputs(n):
                    if i and i not in made:
                        out.append(i)
                made.update(n.output)
    return out


def one_line(e):
    return " ".join(str(e).split())[:400]


def strip_tensor_names(model, prefix="t"):
    """``model`` (an onnx.ModelProto, changed in place and returned) with every tensor --
    inputs, outputs, weights, intermediates -- renamed ``t0``, ``t1``, ... and no node names:
    a port as held-out checks compare it, paired by value and topology alone."""
    names: Dict[str, str] = {}

    def new(n):
        if n and n not in names:
            names[n] = "%s%d" % (prefix, len(names))
        return names.get(n, n)
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = new(vi.name)
    for t in g.initializer:
        t.name = new(t.name)
    for n in g.node:
        n.input[:] = [new(i) for i in n.input]
        n.output[:] = [new(o) for o in n.output]
        n.name = ""
    return model


def load_onnx(onnx_model):
    """An ``onnx.ModelProto`` from a path, bytes or a ModelProto; and a label for it."""
    onnx = require("onnx", "onnx", "compare-port")
    if isinstance(onnx_model, onnx.ModelProto):
        return onnx_model, onnx_model.graph.name or "<ONNX model>"
    if isinstance(onnx_model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_model_from_string(bytes(onnx_model)), "<ONNX bytes>"
        except Exception as e:
            raise PortError("<ONNX bytes>: not an ONNX model: %s" % one_line(e)) from None
    path = os.fspath(onnx_model)
    if not os.path.isfile(path):
        raise PortError("%s: no such ONNX file" % path)
    try:
        model = onnx.load(path)
    except Exception as e:
        raise PortError("%s: not an ONNX model: %s" % (path, one_line(e))) from None
    if not model.graph.node and not model.graph.input:
        # protobuf parses many files (a .caffemodel, a .pb of another kind) as an empty ModelProto
        raise PortError("%s: not an ONNX model: no graph in it (a .caffemodel? compare-port takes the port's "
                        ".onnx file)" % path)
    return model, path


__all__ = ["OnnxPort", "load_onnx", "strip_tensor_names"]

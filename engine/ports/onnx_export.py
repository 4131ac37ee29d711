"""Caffe net -> ONNX model, exact by construction.

The exporter walks the engine's Net (after Init: filtered, Split layers inserted, every
shape known) layer by layer, in Caffe's order, and asks the converter of each layer type
(:mod:`engine.ports.onnx_layers`, one function per type in a table) for the ONNX nodes that
compute what Caffe computes.  Shapes are the engine's: every blob's shape is written into
the model (graph inputs, outputs and value_info) and ONNX's own shape inference must agree
with it (``onnx.checker.check_model(full_check=True)`` runs before anything is written).

Names (docs/ports.md):

- graph inputs are the Caffe input blobs, by name and shape;
- a tensor holding a Caffe blob is named after the blob when it is the blob's last state
  (what ``net.blobs[name]`` holds after Forward); an earlier state in an in-place chain is
  ``<blob>@<layer that wrote it>`` (``conv1 -> bn_conv1 -> scale_conv1 -> conv1_relu``, all
  in place: ``conv1@conv1``, ``conv1@bn_conv1``, ``conv1@scale_conv1``, then ``conv1``);
  a graph input modified in place keeps its name as the input, its last state is
  ``<blob>@<layer>``;
- tensors inside one layer's computation are ``<layer>/<what>``; weights are
  ``<layer>/weight``, ``<layer>/bias``, ...; node names are the layer's name (one node) or
  ``<layer>/<op>``;
- the model's metadata ``caffe.blob_tensors`` (JSON) maps every Caffe blob to the tensor
  holding its last state, so tools need not guess.

Memory Caffe shares between blobs is followed: Split, Flatten, Reshape (and one-bottom
Concat / one-top Slice) tops share their bottom's data, so a later in-place layer on one of
them changes the others too; the exporter re-reads such a blob from the newest state of the
shared memory, exactly as Caffe's next reader sees it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from engine.ports.errors import ExportError, require

PRODUCER = "caffe-inspector engine.ports"
# Weights above this many bytes go to an external data file beside the .onnx (protobuf's
# 2 GB limit on one message); the checker then reads the model from its path.
EXTERNAL_DATA_BYTES = 1_800_000_000
# Layer types whose top shares the bottom's data memory (Caffe's ShareData), besides in place.
_SHARING = {"Split", "Flatten", "Reshape"}


# ====================================================================== graph builder
class Graph:
    """Nodes, initializers and names of the model under construction."""

    def __init__(self, onnx, opset, reserved=()):
        self.onnx = onnx
        self.helper = onnx.helper
        self.opset = int(opset)
        self.nodes = []
        self.initializers = []
        self.inputs = []            # (name, shape)
        self._used = set(reserved)  # every tensor name handed out (and the Caffe blob names)
        self._node_names = set()
        self._counter = 0

    # ------------------------------------------------------------ names
    def fresh(self, hint):
        """A tensor name not used yet, ``hint`` itself when free (``hint#2``... otherwise)."""
        hint = str(hint) or "t"
        name, k = hint, 1
        while name in self._used:
            k += 1
            name = "%s#%d" % (hint, k)
        self._used.add(name)
        return name

    def _node_name(self, hint):
        name, k = hint, 1
        while name in self._node_names:
            k += 1
            name = "%s#%d" % (hint, k)
        self._node_names.add(name)
        return name

    # ------------------------------------------------------------ nodes and constants
    def node(self, op, inputs, hint, n_out=1, name=None, doc=None, **attrs):
        """One node; returns its output name (or the list of them for ``n_out > 1``)."""
        outs = [self.fresh(hint if n_out == 1 else "%s:%d" % (hint, i)) for i in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node = self.helper.make_node(op, list(inputs), outs, name=self._node_name(name or hint), **attrs)
        if doc:
            node.doc_string = doc
        self.nodes.append(node)
        return outs[0] if n_out == 1 else outs

    def const(self, array, hint, dtype=None):
        """An initializer holding ``array`` (float32 unless ``dtype``); returns its name."""
        a = np.asarray(array, dtype=dtype or np.float32)
        name = self.fresh(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def ints(self, values, hint):
        return self.const(np.asarray(values, dtype=np.int64).reshape(-1), hint, dtype=np.int64)

    def scalar(self, value, hint):
        return self.const(np.float32(value), hint)

    # ------------------------------------------------------------ ops whose form changes with the opset
    def reshape(self, x, shape, hint, **kw):
        shape = [int(d) for d in shape]
        attrs = {}
        if 0 in shape:
            if self.opset < 14:
                raise ExportError("a blob of shape %s has an axis of size 0: Reshape keeps a 0 as 'copy this "
                                  "axis' before opset 14; export with --opset 14 or newer" % (shape,))
            attrs["allowzero"] = 1
        return self.node("Reshape", [x, self.ints(shape, hint + "/shape")], hint, **attrs, **kw)

    def reduce(self, op, x, axes, hint, keepdims=1, **kw):
        """ReduceSum (axes an input from opset 13) and the other Reduce* (input from 18)."""
        axes = [int(a) for a in axes]
        if op == "ReduceSum" or self.opset >= 18:
            return self.node(op, [x, self.ints(axes, hint + "/axes")], hint, keepdims=keepdims, **kw)
        return self.node(op, [x], hint, axes=axes, keepdims=keepdims, **kw)

    def slice(self, x, starts, ends, axes, hint, steps=None, **kw):
        ins = [x, self.ints(starts, hint + "/starts"), self.ints(ends, hint + "/ends"), self.ints(axes, hint + "/axes")]
        if steps is not None:
            ins.append(self.ints(steps, hint + "/steps"))
        return self.node("Slice", ins, hint, **kw)

    def split(self, x, sizes, axis, hint, **kw):
        return self.node("Split", [x, self.ints(sizes, hint + "/split")], hint, n_out=len(sizes), axis=int(axis),
                         **kw)

    def pad(self, x, pads, hint, value=0.0, **kw):
        """Constant padding; ``pads`` as ONNX orders them (all begins, then all ends)."""
        return self.node("Pad", [x, self.ints(pads, hint + "/pads"), self.scalar(value, hint + "/value")], hint,
                         mode="constant", **kw)

    def unsqueeze(self, x, axes, hint, **kw):
        return self.node("Unsqueeze", [x, self.ints(axes, hint + "/axes")], hint, **kw)

    def cast(self, x, to, hint, **kw):
        return self.node("Cast", [x], hint, to=int(to), **kw)


# ====================================================================== per-layer context
class LayerContext:
    """What a converter sees of one layer: its engine object, bottoms (as ONNX tensors and
    engine shapes), tops (shapes) and the graph helpers, each node tagged with the layer."""

    def __init__(self, exporter, index):
        net = exporter.net
        self.exporter = exporter
        self.graph = exporter.graph
        self.opset = exporter.graph.opset
        self.index = index
        self.layer = net.layers[index]
        self.name = net.layer_names[index]
        self.type = self.layer.type
        self.param = self.layer.layer_param
        self.phase = int(self.layer.phase)
        self.bottom_names = [net.blob_names[b] for b in net.bottom_id_vecs[index]]
        self.top_names = [net.blob_names[t] for t in net.top_id_vecs[index]]
        self.bottom_shapes = [tuple(b.shape) for b in net.bottom_vecs[index]]
        self.top_shapes = [tuple(t.shape) for t in net.top_vecs[index]]
        self.bottom_blobs = net.bottom_vecs[index]
        self.top_blobs = net.top_vecs[index]
        self._inputs = None
        self.doc = "caffe layer '%s' (%s)" % (self.name, self.type)
        self._nodes = 0

    # ------------------------------------------------------------ tensors
    def x(self, i=0):
        """The ONNX tensor holding bottom ``i`` as this layer reads it."""
        if self._inputs is None:
            self._inputs = [self.exporter.read(b) for b in self.bottom_names]
        return self._inputs[i]

    @property
    def bottoms(self):
        return [self.x(i) for i in range(len(self.bottom_names))]

    def in_place(self, j=0):
        return j < len(self.bottom_names) and self.top_names[j] == self.bottom_names[j]

    def hint(self, what=None):
        return self.name if what is None else "%s/%s" % (self.name, what)

    # ------------------------------------------------------------ nodes
    def node(self, op, inputs, what=None, **kw):
        """A node of this layer; ``what`` names its output(s) ``<layer>/<what>``."""
        self._nodes += 1
        hint = self.hint(what or op)
        return self.graph.node(op, inputs, hint, name=kw.pop("name", hint), doc=self.doc, **kw)

    def const(self, array, what, dtype=None):
        return self.graph.const(array, self.hint(what), dtype=dtype)

    def ints(self, values, what):
        return self.graph.ints(values, self.hint(what))

    def scalar(self, value, what):
        return self.graph.scalar(value, self.hint(what))

    def param_blob(self, i):
        """Param blob ``i`` of the layer as a float32 array (a copy)."""
        return np.array(self.layer.blobs[i].data, dtype=np.float32, copy=True)

    def param_const(self, i, what, shape=None):
        """Param blob ``i`` as an initializer (``shape``: reshaped); a param shared between
        layers (Caffe's ``param { name: ... }``) is one initializer, named after its owner."""
        blob = self.layer.blobs[i]
        shape = tuple(blob.shape) if shape is None else tuple(int(d) for d in shape)
        key = (id(blob.data_memory), shape) if blob.data_memory is not None else None
        cache = self.exporter.param_consts
        if key is not None and key in cache:
            return cache[key][1]
        name = self.const(self.param_blob(i).reshape(shape), what)
        if key is not None:
            cache[key] = (blob.data_memory, name)     # the memory kept alive: its id stays unique
        return name

    def reshape(self, x, shape, what="reshape"):
        if tuple(int(d) for d in shape) == tuple(self.exporter.shape_of(x) or ()) and \
                self.exporter.shape_of(x) is not None:
            return x
        out = self.graph.reshape(x, shape, self.hint(what), doc=self.doc)
        self.exporter.shapes[out] = tuple(int(d) for d in shape)
        return out

    def reduce(self, op, x, axes, what=None, keepdims=1):
        return self.graph.reduce(op, x, axes, self.hint(what or op), keepdims=keepdims, doc=self.doc)

    def slice(self, x, starts, ends, axes, what="slice", steps=None):
        return self.graph.slice(x, starts, ends, axes, self.hint(what), steps=steps, doc=self.doc)

    def split(self, x, sizes, axis, what="split"):
        return self.graph.split(x, sizes, axis, self.hint(what), doc=self.doc)

    def pad(self, x, pads, what="pad", value=0.0):
        return self.graph.pad(x, pads, self.hint(what), value=value, doc=self.doc)

    def unsqueeze(self, x, axes, what="unsqueeze"):
        return self.graph.unsqueeze(x, axes, self.hint(what), doc=self.doc)

    def cast(self, x, to, what="cast"):
        return self.graph.cast(x, to, self.hint(what), doc=self.doc)

    def refuse(self, reason):
        raise Refused(reason)

    def error(self, message):
        return ExportError("layer '%s' (%s): %s" % (self.name, self.type, message), layer=self.name)


class Refused(Exception):
    """Raised by a converter: this layer, as configured, has no faithful ONNX form."""


# ====================================================================== result
@dataclass
class ExportResult:
    """What :func:`export_onnx` wrote: the model, its opset, where every Caffe blob lives."""
    model: object
    opset: int
    path: str | None
    blob_tensors: dict = field(default_factory=dict)    # Caffe blob -> tensor holding its last state
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    layers: int = 0
    nodes: int = 0

    def summary(self):
        return ("ONNX opset %d: %d layers -> %d nodes; inputs %s; outputs %s"
                % (self.opset, self.layers, self.nodes, ", ".join(self.inputs) or "-",
                   ", ".join(self.outputs) or "-"))


# ====================================================================== the exporter
class _Exporter:
    def __init__(self, net, opset, all_blobs=False, progress=None):
        from engine.ports import onnx_layers
        self.progress = progress
        self.onnx = require("onnx", "ONNX export")
        self.net = net
        self.layers_mod = onnx_layers
        self.all_blobs = bool(all_blobs)
        self.graph = Graph(self.onnx, opset, reserved=set(net.blob_names))
        self.shapes = {}               # tensor -> shape (where known)
        # Blob state: which tensor holds each blob, and of which version of its memory.
        self.storage = {}              # blob -> storage id
        self.storage_head = {}         # storage id -> (tensor, shape, version, writer layer)
        self.state = {}                # blob -> (tensor, version)
        self.owner = {}                # tensor -> (blob, layer) that first held it
        self.versions = {}             # blob -> [tensor, ...] in order
        self.graph_inputs = []
        self.param_consts = {}         # (param memory, shape) -> initializer
        self.extra_names = {}          # tensor -> name, for the tensors of inlined inner nets
        self.state_io = []             # (state input, internal tensor of the state output, layer, index, shape)
        self._next_storage = 0

    # ------------------------------------------------------------ blob state
    def shape_of(self, tensor):
        return self.shapes.get(tensor)

    def _new_storage(self):
        self._next_storage += 1
        return self._next_storage

    def _claim(self, blob, tensor, layer, shape):
        self.shapes.setdefault(tensor, tuple(shape))
        if tensor not in self.owner:
            self.owner[tensor] = (blob, layer)
        self.versions.setdefault(blob, []).append(tensor)

    def write(self, blob, tensor, layer, shape, shares_with=None, in_place=False):
        """Layer ``layer`` leaves blob ``blob`` holding ``tensor``."""
        if in_place:
            sid = self.storage[blob]
            _, _, version, _ = self.storage_head[sid]
            version += 1
            self.storage_head[sid] = (tensor, tuple(shape), version, layer)
        elif shares_with is not None:
            sid = self.storage[shares_with]
            self.storage[blob] = sid
            version = self.storage_head[sid][2]
        else:
            sid = self._new_storage()
            self.storage[blob] = sid
            version = 0
            self.storage_head[sid] = (tensor, tuple(shape), version, layer)
        self.state[blob] = (tensor, version)
        self._claim(blob, tensor, layer, shape)

    def read(self, blob):
        """The tensor holding ``blob`` now: a stale one (its shared memory was written in place
        through another blob since) is re-read from the newest state, reshaped."""
        tensor, version = self.state[blob]
        sid = self.storage[blob]
        head, head_shape, head_version, writer = self.storage_head[sid]
        if version == head_version:
            return tensor
        shape = self.net.blobs[blob].shape
        if tuple(head_shape) == tuple(shape):
            fresh = head
        else:
            fresh = self.graph.reshape(head, shape, "%s@%s/reshape" % (blob, writer),
                                       doc="caffe blob '%s' shares its data with the blob layer '%s' wrote in "
                                           "place" % (blob, writer))
        self.state[blob] = (fresh, head_version)
        self._claim(blob, fresh, writer, shape)
        return fresh

    # ------------------------------------------------------------ the walk
    def run(self):
        net = self.net
        if np.dtype(net.dtype) != np.float32:
            raise ExportError("the net computes in %s; the ONNX export is float32 only (build the Net with "
                              "dtype float32)" % np.dtype(net.dtype).name)
        refusals = self.layers_mod.check_net(net)
        if refusals:
            lines = ["layer '%s' (%s): %s" % r for r in refusals]
            raise ExportError("cannot export %s to ONNX faithfully: %s" % (net.name or "the net", "; ".join(lines)),
                              layer=refusals[0][0], refusals=refusals)
        for i in range(len(net.layers)):
            self._layer(i)
            if self.progress is not None:
                self.progress(i + 1, len(net.layers))
        return self._finish()

    def _layer(self, i):
        ctx = LayerContext(self, i)
        convert = self.layers_mod.CONVERTERS[ctx.type]
        try:
            tops = convert(ctx)
        except Refused as r:
            raise ExportError("cannot export %s to ONNX faithfully: layer '%s' (%s): %s"
                              % (self.net.name or "the net", ctx.name, ctx.type, r), layer=ctx.name,
                              refusals=[(ctx.name, ctx.type, str(r))]) from None
        tops = list(tops or [])
        if len(tops) != len(ctx.top_names):
            raise ctx.error("the converter gave %d tops for %d" % (len(tops), len(ctx.top_names)))
        shares = ctx.type in _SHARING or (ctx.type == "Concat" and len(ctx.bottom_names) == 1) or \
            (ctx.type == "Slice" and len(ctx.top_names) == 1)
        for j, (blob, tensor) in enumerate(zip(ctx.top_names, tops)):
            in_place = j < len(ctx.bottom_names) and blob in ctx.bottom_names
            if in_place and ctx.bottom_names[j] != blob:
                raise ctx.error("top '%s' is bottom %d, not bottom %d: in place on another index is not supported"
                                % (blob, ctx.bottom_names.index(blob), j))
            shape = ctx.top_shapes[j]
            got = self.shapes.get(tensor)
            if got is not None and tuple(got) != tuple(shape):
                raise ctx.error("internal: top '%s' is %s in the export, %s in the engine" % (blob, got, shape))
            self.write(blob, tensor, ctx.name, shape, in_place=in_place,
                       shares_with=ctx.bottom_names[0] if (shares and not in_place) else None)

    def add_input(self, blob, shape):
        """A graph input for Caffe input blob ``blob`` (the Input layer's converter)."""
        self.graph.inputs.append((blob, tuple(shape)))
        self.graph_inputs.append(blob)
        self.shapes[blob] = tuple(shape)
        self.graph._used.add(blob)
        return blob

    # ------------------------------------------------------------ inner nets (RNN, LSTM)
    def add_state(self, layer, index, name, shape):
        """A graph input for a recurrent layer's carried state (Caffe keeps it in the layer:
        h_0 of this Forward is h_T of the last one, zeros at first)."""
        owner = getattr(self, "outer", self)
        tensor = owner.graph.fresh("%s/%s" % (layer, name))
        owner.graph.inputs.append((tensor, tuple(shape)))
        owner.shapes[tensor] = tuple(shape)
        return tensor

    def add_state_output(self, state_input, tensor, layer, index, shape):
        owner = getattr(self, "outer", self)
        owner.state_io.append((state_input, tensor, layer, index, tuple(shape)))

    def inline(self, prefix, net, last_layer, input_map):
        """Walk ``net`` (a recurrent layer's unrolled net) up to ``last_layer`` into this graph,
        its input blobs bound to ``input_map``'s tensors; returns {inner blob: tensor}.  Inner
        tensors are named ``<prefix>/<blob>`` (their last state) or ``<prefix>/<blob>@<layer>``."""
        inner = _Inner(self, prefix, net, input_map)
        refusals = self.layers_mod.check_net(net)
        if refusals:
            raise ExportError("the unrolled net of '%s' cannot be exported: %s"
                              % (prefix, "; ".join("layer '%s' (%s): %s" % r for r in refusals)), layer=prefix)
        for i in range(int(last_layer) + 1):
            inner._layer(i)
        for blob in list(inner.state):
            inner.read(blob)
        mapped = set(input_map.values())
        owner = getattr(self, "outer", self)
        for tensor, (blob, layer) in inner.owner.items():
            if tensor in mapped or tensor in owner.extra_names:
                continue
            last = inner.state.get(blob, (None,))[0] == tensor
            owner.extra_names[tensor] = owner.graph.fresh("%s/%s" % (prefix, blob) if last else
                                                          "%s/%s@%s" % (prefix, blob, layer))
        return {blob: inner.state[blob][0] for blob in inner.state}

    # ------------------------------------------------------------ names, outputs, the model
    def _finish(self):
        onnx, helper, net = self.onnx, self.onnx.helper, self.net
        for blob in list(self.state):
            self.read(blob)                 # every blob at its last state
        final = {blob: self.state[blob][0] for blob in self.state}
        inputs = set(self.graph_inputs)
        rename = {}
        taken = set(inputs)
        # The last state of a blob takes the blob's name; earlier ones <blob>@<layer>.
        for blob, tensor in final.items():
            own_blob, _ = self.owner[tensor]
            if own_blob == blob and tensor not in inputs and blob not in taken:
                rename[tensor] = blob
                taken.add(blob)
        for tensor, (blob, layer) in self.owner.items():
            if tensor in rename or tensor in inputs:
                continue
            rename[tensor] = self.graph.fresh("%s@%s" % (blob, layer))
        extra = self.extra_names
        names = lambda t: rename.get(t, extra.get(t, t))   # noqa: E731
        blob_tensors = {blob: names(final[blob]) for blob in net.blob_names if blob in final}
        # Outputs: Caffe's net outputs (or every blob); a blob whose last state is another
        # blob's tensor (Split tops, ...) or a graph input gets an Identity of its own name.
        wanted = list(net.blob_names) if self.all_blobs else list(net.outputs)
        outputs = []
        named_shapes = {}
        for tensor, shape in self.shapes.items():
            named_shapes.setdefault(names(tensor), tuple(shape))
        for blob in wanted:
            t = blob_tensors.get(blob)
            if t is None:
                continue
            if t == blob:
                if blob not in inputs or (not self.all_blobs and blob in net.outputs):
                    outputs.append(blob)       # (an input nothing reads is one of Caffe's outputs)
                continue
            name = self.graph.fresh("%s/out" % blob) if blob in taken else blob
            taken.add(name)
            self.graph.nodes.append(helper.make_node("Identity", [final[blob]], [name],
                                                     name=self.graph._node_name("%s/output" % blob),
                                                     doc_string="caffe blob '%s' as an output" % blob))
            named_shapes[name] = tuple(net.blobs[blob].shape)
            outputs.append(name)
        state = {}
        for state_input, tensor, layer, index, shape in self.state_io:
            out = names(tensor)
            if out in outputs:
                out = self.graph.fresh("%s/out" % out)
                self.graph.nodes.append(helper.make_node("Identity", [tensor], [out],
                                                         name=self.graph._node_name("%s/output" % out)))
            outputs.append(out)
            named_shapes[out] = shape
            state[state_input] = {"layer": layer, "index": index, "output": out}
        for node in self.graph.nodes:
            for k, n in enumerate(node.input):
                node.input[k] = names(n)
            for k, n in enumerate(node.output):
                node.output[k] = names(n)
        f32 = onnx.TensorProto.FLOAT
        g_inputs = [helper.make_tensor_value_info(n, f32, list(s)) for n, s in self.graph.inputs]
        g_outputs = [helper.make_tensor_value_info(n, f32, list(named_shapes[n])) for n in outputs]
        io = {n for n, _ in self.graph.inputs} | set(outputs)
        value_info = [helper.make_tensor_value_info(n, f32, list(shape)) for n, shape in named_shapes.items()
                      if n not in io]
        graph = helper.make_graph(self.graph.nodes, net.name or "caffe_net", g_inputs, g_outputs,
                                  initializer=self.graph.initializers, value_info=value_info,
                                  doc_string="Exported from Caffe net '%s' by %s" % (net.name, PRODUCER))
        opsetid = helper.make_opsetid("", self.graph.opset)
        model = helper.make_model(graph, opset_imports=[opsetid], producer_name=PRODUCER,
                                  producer_version=_version())
        model.ir_version = helper.find_min_ir_version_for([opsetid])
        helper.set_model_props(model, {
            "caffe.blob_tensors": json.dumps(blob_tensors),
            "caffe.net": net.name or "",
            "caffe.phase": "TEST" if int(net.phase) == 1 else "TRAIN",
            "caffe.layers": json.dumps([[n, l.type] for n, l in zip(net.layer_names, net.layers)]),
            "caffe.state": json.dumps(state),
        })
        return model, blob_tensors, [n for n, _ in self.graph.inputs], outputs


class _Inner(_Exporter):
    """The exporter of a recurrent layer's unrolled net, writing into the outer graph."""

    def __init__(self, outer, prefix, net, input_map):
        self.outer = outer
        self.onnx = outer.onnx
        self.net = net
        self.layers_mod = outer.layers_mod
        self.all_blobs = False
        self.graph = outer.graph
        self.shapes = outer.shapes
        self.param_consts = outer.param_consts
        self.extra_names = outer.extra_names
        self.prefix = prefix
        self.input_map = dict(input_map)
        self.storage, self.storage_head, self.state, self.owner, self.versions = {}, {}, {}, {}, {}
        self.graph_inputs = []
        self._next_storage = 0

    def add_input(self, blob, shape):
        if blob not in self.input_map:
            raise ExportError("the unrolled net of '%s' has an input '%s' the exporter does not bind"
                              % (self.prefix, blob), layer=self.prefix)
        return self.input_map[blob]


def _version():
    try:
        import engine
        return str(engine.__version__)
    except Exception:  # pragma: no cover
        return ""


# ====================================================================== public API
def _as_net(net_or_model, weights=None, phase=None, level=0, stages=(), seed=None):
    """A Net: ``net_or_model`` itself, or built from a prototxt path (TEST unless ``phase``),
    ``weights`` (a caffemodel) copied in."""
    from engine.core import backend
    from engine.core.net import TEST, Net
    if isinstance(net_or_model, Net):
        if weights is not None:
            net_or_model.copy_from(weights)
        return net_or_model
    if not isinstance(net_or_model, (str, os.PathLike)):
        raise TypeError("export_onnx needs an engine Net or a prototxt path, not %s" % type(net_or_model).__name__)
    if seed is not None:
        backend.set_random_seed(int(seed))
    p = TEST if phase is None else _phase(phase)
    net = Net(os.fspath(net_or_model), p, level=int(level), stages=list(stages or ()))
    if weights is not None:
        net.copy_from(weights)
    return net


def _phase(phase):
    from engine.core.net import TEST, TRAIN
    if isinstance(phase, str):
        p = phase.strip().upper()
        if p not in ("TRAIN", "TEST"):
            raise ExportError('phase must be "TRAIN" or "TEST" (got %r)' % phase)
        return TRAIN if p == "TRAIN" else TEST
    return int(phase)


def _weight_bytes(model):
    return sum(len(t.raw_data) for t in model.graph.initializer)


def build_onnx_model(net_or_model, opset=None, all_blobs=False, check=True, progress=None, **net_kw):
    """The ONNX ModelProto of a net (see :func:`export_onnx`), checked, not written.
    ``progress``: called as ``progress(layers done, layers)`` after each layer."""
    from engine.ports.opsets import resolve_opset
    net = _as_net(net_or_model, **net_kw)
    op = resolve_opset(opset)
    ex = _Exporter(net, op, all_blobs=all_blobs, progress=progress)
    model, blob_tensors, inputs, outputs = ex.run()
    if check and _weight_bytes(model) <= EXTERNAL_DATA_BYTES:
        check_model(model)
    res = ExportResult(model=model, opset=op, path=None, blob_tensors=blob_tensors, inputs=inputs, outputs=outputs,
                       layers=len(net.layers), nodes=len(model.graph.node))
    return res


def check_model(model):
    """onnx.checker with the full check (types and shapes inferred against the declared ones)
    of a ModelProto or a path; a failure is the exporter's bug, said so."""
    onnx = require("onnx", "ONNX export")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        raise ExportError("the exported model fails onnx.checker (an exporter bug; please report it with the "
                          "prototxt): %s" % " ".join(str(e).split())) from e


def export_onnx(net_or_model, path=None, *, weights=None, phase=None, level=0, stages=(), opset=None,
                all_blobs=False, seed=None, progress=None):
    """Export a Caffe net to ONNX.

    ``net_or_model``: an :class:`engine.Net` (exported as built: its phase, its weights) or
    a prototxt path (built in ``phase``, TEST by default, with ``level``/``stages``; weights
    from ``weights`` (a .caffemodel) or else the engine's fillers, seeded by ``seed``).
    ``opset``: 13 by default; a number (clamped to the newest the installed onnxruntime runs)
    or ``"latest"``.  ``all_blobs``: every Caffe blob (its state after Forward) is a graph
    output, not just the net's outputs.  ``path``: the .onnx file to write (None: not
    written).  ``progress``: called as ``progress(layers done, layers)``.  Raises
    :class:`engine.ports.ExportError` naming each layer that has no faithful ONNX form.
    Returns an :class:`ExportResult`.
    """
    res = build_onnx_model(net_or_model, opset=opset, all_blobs=all_blobs, weights=weights, phase=phase,
                           level=level, stages=stages, seed=seed, progress=progress)
    if path is None:
        if _weight_bytes(res.model) > EXTERNAL_DATA_BYTES:
            raise ExportError("the weights take %.2f GB: an ONNX model over 2 GB must be written to a file (its "
                              "weights beside it); give a path" % (_weight_bytes(res.model) / 1e9))
        return res
    path = os.fspath(path)
    if _weight_bytes(res.model) > EXTERNAL_DATA_BYTES:
        onnx = require("onnx", "ONNX export")
        model = onnx.ModelProto()
        model.CopyFrom(res.model)          # saving moves the weights out of the message
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(path) + ".data", size_threshold=1024)
        check_model(path)
    else:
        with open(path, "wb") as f:
            f.write(res.model.SerializeToString())
    res.path = path
    return res


def export_onnx_bytes(net, opset=None, all_blobs=False):
    """The ONNX model of ``net`` as bytes (for the inspector's Save menu); an
    :class:`engine.ports.ExportError` (a CaffeError) when a layer cannot be exported or the
    weights pass protobuf's 2 GB (write those with :func:`export_onnx` and a path)."""
    model = build_onnx_model(net, opset=opset, all_blobs=all_blobs).model
    if _weight_bytes(model) > EXTERNAL_DATA_BYTES:
        raise ExportError("the weights take %.2f GB: an ONNX model over 2 GB cannot be one file; export it with "
                          "python -m engine export-onnx (the weights go beside it)" % (_weight_bytes(model) / 1e9))
    return model.SerializeToString()

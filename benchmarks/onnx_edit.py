"""Editing an ONNX model in place, to plant a mistake in a port: its nodes by name, their
attributes, its initializers (kept consistent with an IR-3 model's graph inputs), and the
tensors nodes read.  Used by benchmarks/ports_planted.py and the port debugger's tests
(tests/ports/port_nets.py)."""
import numpy as np


def node(model, name):
    """The node named ``name``."""
    for n in model.graph.node:
        if n.name == name:
            return n
    raise KeyError(name)


def attr(n, key, value):
    """Set attribute ``key`` of node ``n`` (replacing it when present)."""
    from onnx import helper
    for a in n.attribute:
        if a.name == key:
            n.attribute.remove(a)
            break
    n.attribute.append(helper.make_attribute(key, value))


def get_attr(n, key, default=None):
    from onnx import helper
    for a in n.attribute:
        if a.name == key:
            return helper.get_attribute_value(a)
    return default


def init_array(model, name):
    """Initializer ``name`` as a NumPy array."""
    from onnx import numpy_helper
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    raise KeyError(name)


def set_init(model, name, arr):
    """Replace an initializer's value (keeping its dtype); in an IR-3 model (MMdnn's), where
    initializers are graph inputs too, that input's shape follows."""
    from onnx import numpy_helper
    for k, t in enumerate(model.graph.initializer):
        if t.name == name:
            dtype = numpy_helper.to_array(t).dtype
            model.graph.initializer[k].CopyFrom(numpy_helper.from_array(np.asarray(arr, dtype=dtype), name))
            for vi in model.graph.input:
                if vi.name == name:
                    del vi.type.tensor_type.shape.dim[:]
                    for d in np.shape(arr):
                        vi.type.tensor_type.shape.dim.add().dim_value = int(d)
            return
    raise KeyError(name)


def add_init(model, name, arr):
    from onnx import numpy_helper
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
    return name


def rewire(model, old, new):
    """Every read of tensor ``old`` (and a graph output named so) reads ``new``."""
    for n in model.graph.node:
        n.input[:] = [new if i == old else i for i in n.input]
    for o in model.graph.output:
        if o.name == old:
            o.name = new


def insert_before(model, n, new_nodes):
    """Insert ``new_nodes`` in order before node ``n``."""
    idx = list(model.graph.node).index(n)
    for k, m in enumerate(new_nodes):
        model.graph.node.insert(idx + k, m)

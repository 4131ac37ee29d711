"""pycaffe's ``caffe.net_spec``: nets written as Python calls.

    from caffe import layers as L, params as P
    n = caffe.NetSpec()
    n.data, n.label = L.Data(source="train_lmdb", backend=P.Data.LMDB, batch_size=64, ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=5, num_output=20)
    n.relu1 = L.ReLU(n.conv1, in_place=True)
    print(n.to_proto())                     # a caffe_pb2.NetParameter

``L.<Type>(*bottoms, **kwargs)`` is a :class:`Function` (a layer); it returns its
:class:`Top` (``ntop`` tops as a tuple, the Function itself for ``ntop=0``).  Keyword
arguments go into ``<type>_param`` when that message has the field, else into the
LayerParameter itself; names ending in ``param`` always go to the LayerParameter
(``param=[dict(lr_mult=1)]``, ``transform_param=dict(...)``).  Lists fill repeated
fields (a list of dicts adds messages), dicts fill messages, a single value given
to a repeated field is a one-element list.  ``in_place=True`` makes the tops the
bottoms.  Tops not named through a NetSpec get pycaffe's automatic names: the layer
type and a counter per type (``Convolution1``, ``ReLU1``), a layer taking the name of
its first top.  ``P.<Type>.<CONSTANT>`` reads ``caffe_pb2.<Type>Parameter.<CONSTANT>``.

The output is the NetParameter pycaffe builds for the same calls, layer for layer and
field for field (checked against real pycaffe's output in tests).  One leniency: an
empty list for a repeated field leaves it empty (pycaffe fails with an IndexError).
"""
from collections import Counter, OrderedDict

from engine.proto import caffe_pb2

__all__ = ["param_name_dict", "to_proto", "assign_proto", "Top", "Function", "NetSpec", "Layers",
           "Parameters", "layers", "params"]


def param_name_dict():
    """{layer type: its ``*_param`` field prefix}, from the LayerParameter's ``*_param``
    fields and their message types (``ConvolutionParameter`` -> ``convolution``)."""
    out = {}
    for f in caffe_pb2.LayerParameter.DESCRIPTOR.fields:
        if f.name.endswith("_param") and f.message_type is not None:
            out[f.message_type.name[:-len("Parameter")]] = f.name[:-len("_param")]
    return out


def to_proto(*tops):
    """A NetParameter with every layer needed to compute ``tops`` (automatic names)."""
    layers_ = OrderedDict()
    autonames = Counter()
    for top in tops:
        top.fn._to_proto(layers_, {}, autonames)
    net = caffe_pb2.NetParameter()
    net.layer.extend(layers_.values())
    return net


def _is_repeated(proto, name):
    return hasattr(getattr(proto, name), "extend")


def assign_proto(proto, name, val):
    """Put a Python value into field ``name`` of ``proto``: lists into repeated fields
    (dicts in a list become added messages), dicts into messages (recursively), other
    values assigned; a non-list given to a repeated field is a one-element list."""
    if _is_repeated(proto, name) and not isinstance(val, list):
        val = [val]
    if isinstance(val, list):
        if val and isinstance(val[0], dict):
            for item in val:
                message = getattr(proto, name).add()
                for k, v in item.items():
                    assign_proto(message, k, v)
        else:
            getattr(proto, name).extend(val)
    elif isinstance(val, dict):
        for k, v in val.items():
            assign_proto(getattr(proto, name), k, v)
    else:
        setattr(proto, name, val)


class Top(object):
    """One output blob of a layer (a Function): ``fn`` and its index ``n``."""

    def __init__(self, fn, n):
        self.fn = fn
        self.n = n

    def to_proto(self):
        """A NetParameter with every layer needed to compute this top."""
        return to_proto(self)

    def _to_proto(self, layers_, names, autonames):
        return self.fn._to_proto(layers_, names, autonames)


class Function(object):
    """A layer: its type, its bottoms (Tops) and its parameters."""

    def __init__(self, type_name, inputs, params):
        self.type_name = type_name
        for index, inp in enumerate(inputs):
            if not isinstance(inp, Top):
                raise TypeError("%s input %d is not a Top (type is %s)" % (type_name, index, type(inp)))
        self.inputs = inputs
        self.params = params
        self.ntop = self.params.pop("ntop", 1)
        self.in_place = self.params.pop("in_place", False)
        self.tops = tuple(Top(self, n) for n in range(self.ntop))

    def _get_name(self, names, autonames):
        if self not in names:
            if self.ntop > 0:
                names[self] = self._get_top_name(self.tops[0], names, autonames)
            else:
                autonames[self.type_name] += 1
                names[self] = self.type_name + str(autonames[self.type_name])
        return names[self]

    def _get_top_name(self, top, names, autonames):
        if top not in names:
            autonames[top.fn.type_name] += 1
            names[top] = top.fn.type_name + str(autonames[top.fn.type_name])
        return names[top]

    def _assign_param(self, layer, key, value):
        if key.endswith("param"):             # param, transform_param, loss_param, ...
            assign_proto(layer, key, value)
            return
        try:
            assign_proto(getattr(layer, _param_names[self.type_name] + "_param"), key, value)
        except (AttributeError, KeyError):    # not a field of <type>_param: the layer's own
            assign_proto(layer, key, value)

    def _to_proto(self, layers_, names, autonames):
        if self in layers_:
            return
        bottom_names = []
        for inp in self.inputs:
            inp._to_proto(layers_, names, autonames)
            bottom_names.append(layers_[inp.fn].top[inp.n])
        layer = caffe_pb2.LayerParameter()
        layer.type = self.type_name
        layer.bottom.extend(bottom_names)
        if self.in_place:
            layer.top.extend(layer.bottom)
        else:
            for top in self.tops:
                layer.top.append(self._get_top_name(top, names, autonames))
        layer.name = self._get_name(names, autonames)
        for key, value in self.params.items():
            self._assign_param(layer, key, value)
        layers_[self] = layer


class NetSpec(object):
    """Named tops: assign ``n.name = top``; :meth:`to_proto` builds every layer needed
    for them, the assigned names naming their tops (and layers)."""

    def __init__(self):
        super(NetSpec, self).__setattr__("tops", OrderedDict())

    def __setattr__(self, name, value):
        self.tops[name] = value

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):   # copy, pickle, repr probes
            raise AttributeError(name)
        return self.tops[name]             # a KeyError for an unknown name, as pycaffe

    def __setitem__(self, key, value):
        self.__setattr__(key, value)

    def __getitem__(self, item):
        return self.__getattr__(item)

    def to_proto(self):
        names = {v: k for k, v in self.tops.items()}
        autonames = Counter()
        layers_ = OrderedDict()
        for top in self.tops.values():
            top._to_proto(layers_, names, autonames)
        net = caffe_pb2.NetParameter()
        net.layer.extend(layers_.values())
        return net


class Layers(object):
    """``L.<Type>(*bottoms, **params)``: a layer of that type (see the module doc)."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)

        def layer_fn(*args, **kwargs):
            fn = Function(name, args, kwargs)
            if fn.ntop == 0:
                return fn
            if fn.ntop == 1:
                return fn.tops[0]
            return fn.tops
        layer_fn.__name__ = name
        return layer_fn


class Parameters(object):
    """``P.<Type>.<CONSTANT>``: the enum value ``caffe_pb2.<Type>Parameter.<CONSTANT>``."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        message = name + "Parameter"

        class Param:
            def __getattr__(self, param_name):
                return getattr(getattr(caffe_pb2, message), param_name)
        return Param()


_param_names = param_name_dict()
layers = Layers()
params = Parameters()

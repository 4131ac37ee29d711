"""Layer type registry (Caffe's LayerRegistry).

Layer classes register with ``@register_layer``; ``create_layer`` builds one
from a LayerParameter, and an unknown type is reported with the known ones, as
Caffe's layer_factory does.
"""
import threading

from engine.core.errors import PythonLayerRefused, UnknownLayerTypeError
from engine.core.log import layer_log

_REGISTRY = {}

# The categories a layer class declares (``Layer.category``), with their labels.
CATEGORIES = {
    "input": "input / data",
    "conv": "convolution",
    "pool": "pooling",
    "fc": "inner product / embed",
    "activation": "activation",
    "norm": "normalisation / scale",
    "structure": "blob plumbing",
    "split": "split (inserted)",
    "recurrent": "recurrent",
    "loss": "loss",
    "output": "output / metric",
    "python": "python",
    "other": "other",
}


def register_layer(cls):
    """Class decorator: register ``cls`` under ``cls.type``."""
    name = cls.type
    if not name:
        raise ValueError("layer class %s has no type" % cls.__name__)
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError("Layer type %s already registered." % name)
    _REGISTRY[name] = cls
    return cls


def layer_types():
    """The registered type names, sorted as Caffe's std::map sorts them."""
    _load_all()
    return sorted(_REGISTRY)


def layer_class(type_name):
    """The registered class of ``type_name`` (UnknownLayerTypeError listing the known ones)."""
    _load_all()
    try:
        return _REGISTRY[type_name]
    except KeyError:
        raise UnknownLayerTypeError(
            "Unknown layer type: %s (known types: %s)" % (type_name, ", ".join(layer_types()))) from None


def find_layer_class(type_name):
    """The registered class of ``type_name``, or None."""
    _load_all()
    return _REGISTRY.get(type_name)


def layer_categories():
    """{category: label} of the categories layer classes declare."""
    return dict(CATEGORIES)


def create_layer(param, allow_python=True, **kwargs):
    """LayerRegistry::CreateLayer: a new, not yet set up, layer for ``param``."""
    try:
        cls = layer_class(param.type)
    except UnknownLayerTypeError as e:
        known = str(e).split(" (known types: ", 1)
        raise UnknownLayerTypeError("%s (layer '%s'; known types: %s" % (known[0], param.name, known[1])
                                    if len(known) == 2 else "%s (layer '%s')" % (e, param.name),
                                    layer=param.name) from None
    if param.type == "Python" and not allow_python:
        raise PythonLayerRefused(
            "Layer '%s' is a Python layer (module %r); Python layers are disabled for this model "
            "because they run the model author's code" % (param.name, param.python_param.module),
            layer=param.name)
    layer_log.info("Creating layer %s", param.name)
    return cls(param, **kwargs)


_loaded = False
_load_lock = threading.Lock()


def _load_all():
    """Import every layer family once; threads arriving meanwhile wait for it."""
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if not _loaded:
            from engine.core.layers import _all  # noqa: F401  (imports every family module)
            _loaded = True

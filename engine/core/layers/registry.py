"""Layer type registry (Caffe's LayerRegistry).

Layer classes register with ``@register_layer``; ``create_layer`` builds one
from a LayerParameter, and an unknown type is reported with the known ones, as
Caffe's layer_factory does.

The family modules are imported lazily: ``MODULES`` says which module registers
each of Caffe's types, and a module is imported when one of its types is first
looked up (a LeNet imports the data, vision, common, neuron and loss families,
not the recurrent or normalisation ones, nor what they import).  Listing every
type (``layer_types``) or looking up an unknown one imports them all.
``tests/test_registry.py`` checks the table against what the modules register.
"""
import importlib
import threading

from engine.core.errors import PythonLayerRefused, UnknownLayerTypeError
from engine.core.log import layer_log

_REGISTRY = {}

_FAMILIES = {
    "engine.core.layers.common": (
        "ArgMax BatchReindex Concat Eltwise Embed Filter Flatten InnerProduct Parameter Reduction Reshape "
        "Silence Slice Softmax Split Tile"),
    "engine.core.layers.data": "Data DummyData HDF5Data HDF5Output ImageData Input MemoryData WindowData",
    "engine.core.layers.loss": (
        "Accuracy ContrastiveLoss EuclideanLoss HingeLoss InfogainLoss MultinomialLogisticLoss "
        "SigmoidCrossEntropyLoss SoftmaxWithLoss"),
    "engine.core.layers.neuron": "AbsVal BNLL Clip Dropout ELU Exp Log PReLU Power ReLU Sigmoid Swish TanH Threshold",
    "engine.core.layers.norm": "BatchNorm Bias MVN Scale",
    "engine.core.layers.python_layer": "Python",
    "engine.core.layers.recurrent": "LSTM LSTMUnit RNN",
    "engine.core.layers.vision": "Convolution Crop Deconvolution Im2col LRN Pooling SPP",
}
# type name -> the module whose import registers it (tests/test_registry.py keeps it true)
MODULES = {t: mod for mod, names in _FAMILIES.items() for t in names.split()}

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
    if (name in _REGISTRY and _REGISTRY[name] is not cls) or MODULES.get(name, cls.__module__) != cls.__module__:
        raise ValueError("Layer type %s already registered." % name)
    _REGISTRY[name] = cls
    return cls


def layer_types():
    """The registered type names, sorted as Caffe's std::map sorts them."""
    _load_all()
    return sorted(_REGISTRY)


def layer_class(type_name):
    """The registered class of ``type_name`` (UnknownLayerTypeError listing the known ones)."""
    cls = find_layer_class(type_name)
    if cls is None:
        raise UnknownLayerTypeError(
            "Unknown layer type: %s (known types: %s)" % (type_name, ", ".join(layer_types())))
    return cls


def find_layer_class(type_name):
    """The registered class of ``type_name``, or None.  A type of ``MODULES`` is looked up
    once its module has been imported in full (by this call, the first time); a type that
    no table entry names (one a program registered) in what is registered, then, if it is
    not there, after importing every family."""
    module = MODULES.get(type_name)
    if module is not None:
        if module not in _loaded:
            _load(module)
        return _REGISTRY.get(type_name)
    cls = _REGISTRY.get(type_name)
    if cls is None and None not in _loaded:
        _load_all()
        cls = _REGISTRY.get(type_name)
    return cls


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


_loaded = set()
_load_lock = threading.RLock()


def _load(module):
    """Import the family ``module`` (None: every family) once; threads arriving
    meanwhile wait for it."""
    if module in _loaded:
        return
    with _load_lock:
        if module not in _loaded:
            names = (module,) if module else tuple(_FAMILIES)
            for name in names:
                importlib.import_module(name)
            _loaded.update(names)
            _loaded.add(module)


def _load_all():
    """Import every layer family once."""
    _load(None)

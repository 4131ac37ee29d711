"""Caffe's Python layer (python_layer.hpp) and pycaffe's ``caffe.Layer``.

A layer of type "Python" names a module and a class in ``python_param``; the
class subclasses :class:`PyLayer` (through pycaffe's ``caffe.Layer``,
``engine.pycaffe._caffe.Layer``, also ``engine.Layer``) and implements::

    setup(self, bottom, top)
    reshape(self, bottom, top)
    forward(self, bottom, top)
    backward(self, top, propagate_down, bottom)

on vectors of Blobs (``caffe._caffe.RawBlobVec``, ``propagate_down`` a ``BoolVec``, as
python_layer.hpp passes them; ``blob.data`` / ``blob.diff`` are NumPy arrays, as in
pycaffe).  ``self.param_str``, ``self.phase`` (0 TRAIN, 1 TEST) and
``self.blobs`` (with ``add_blob(*shape)``) are available from ``setup`` on;
the class is constructed as pycaffe constructs it, ``cls(layer_param)``.

The module is imported from ``sys.path``; a module that sits beside the model
file (the net passes ``model_dir``) is imported from there.  The net refuses
Python layers altogether when built with ``allow_python=False``.

As in pycaffe, an exception raised by the layer's own code (its module's body,
its constructor, ``setup``, ``reshape``, ``forward``, ``backward``) reaches the
caller with its own type; the engine only adds a note naming the layer (and sets
``.layer`` on it where it can).  A module that cannot be found, a missing class
and a class that is not a ``caffe.Layer`` raise LayerError subclasses that are
also the ModuleNotFoundError, AttributeError and TypeError pycaffe raises.
"""
import importlib
import importlib.util
import os
import sys
import threading

import numpy as np

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import (
    CaffeError,
    LayerError,
    PythonLayerClassMissing,
    PythonLayerNotALayer,
    PythonLayerNotFound,
)
from engine.core.layers.base import Layer, weighted_loss
from engine.core.layers.registry import register_layer
from engine.core.vectors import BoolVec, RawBlobVec

_import_lock = threading.RLock()


class _OwnValue:
    """A property of the engine's Layer that a Python layer may also use as an attribute
    of its own, as it may in pycaffe, whose ``caffe.Layer`` has no such member: once the
    layer sets a value, reading gives that value back; until then, the engine's."""

    def __init__(self, fget):
        self.fget = fget
        self.__doc__ = fget.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if self.name in obj.__dict__:
            return obj.__dict__[self.name]
        return self.fget(obj)

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value

    def __delete__(self, obj):
        obj.__dict__.pop(self.name, None)


class PyLayer(Layer):
    """pycaffe's ``caffe.Layer``: subclass it and implement setup/reshape/forward/backward.

    pycaffe's Layer has only ``blobs``, ``type``, ``setup``, ``reshape`` (and the
    ``param_str`` and ``phase`` Caffe sets), so a Python layer is free to keep state under
    any other name: ``self.name``, ``self.loss``, ``self.dtype``, ``self.xp`` ... are its
    own here too.  The engine reads what it needs past them: the layer's name from its
    LayerParameter, its loss weights through :func:`loss_weight`, its dtype and array
    module from its own private fields."""
    type = "Python"
    category = "python"
    summary = "A layer written in Python (runs the model author's code)."
    param_fields = ("python_param",)

    def flops(self, bottoms, tops):
        return 0, 0, False, "the model author's Python code: not modelled"

    def __init__(self, param, dtype=np.float32, model_dir=None):
        super().__init__(param, dtype)
        self.__dtype = self.dtype
        self.model_dir = model_dir
        self.param_str = self.layer_param.python_param.param_str
        self.phase = int(self.layer_param.phase)

    @_OwnValue
    def name(self):
        return self.layer_param.name

    @_OwnValue
    def xp(self):
        return backend.xp()

    @_OwnValue
    def on_gpu(self):
        return backend.mode() == backend.GPU

    def _configure(self, dtype, model_dir):
        """Engine settings for an instance built as ``cls(param)`` by pycaffe's rule."""
        if not hasattr(self, "layer_param"):
            raise LayerError("Python layer class %s.__init__ must call the base class "
                             "__init__(param)" % type(self).__name__)
        dtype = np.dtype(dtype)
        if dtype != self.__dtype:
            self.dtype = self.__dtype = dtype
            fresh = []
            for b in self.blobs:
                nb = Blob(b.shape, dtype=dtype)
                nb.data[...] = b.data
                fresh.append(nb)
            self.blobs = fresh
        self.blobs._dtype = dtype       # add_blob makes blobs of the net's dtype
        self.model_dir = model_dir

    # ----------------------------------------------------------- the pycaffe contract
    def setup(self, bottom, top):
        """Called once, before the first reshape."""

    def reshape(self, bottom, top):
        raise NotImplementedError("Python layer class %s must implement reshape(bottom, top)"
                                  % type(self).__name__)

    def forward(self, bottom, top):
        raise NotImplementedError("Python layer class %s must implement forward(bottom, top)"
                                  % type(self).__name__)

    def backward(self, top, propagate_down, bottom):
        """Default: no gradient."""

    # ----------------------------------------------------------- engine hooks
    def _call(self, method, *args):
        try:
            return getattr(self, method)(*args)
        except CaffeError:
            raise
        except Exception as e:
            pp = self.layer_param.python_param
            name = self.layer_param.name
            add_layer_context(e, name, "raised by %s() of Python layer '%s' (%s.%s)"
                              % (method, name, pp.module, pp.layer))
            raise

    def layer_setup(self, bottom, top):
        self.param_str = self.layer_param.python_param.param_str
        self.phase = int(self.layer_param.phase)
        if self.phase == 0 and backend.solver_count() > 1 and not backend.multiprocess():
            # python_layer.hpp: the GIL rules out several solver threads in one process
            raise LayerError("PythonLayer does not support CLI Multi-GPU, use train.py",
                             layer=self.layer_param.name)
        self._call("setup", RawBlobVec._of(bottom), RawBlobVec._of(top))

    def SetUp(self, bottom, top):
        self.check_blob_counts(bottom, top)
        self.layer_setup(bottom, top)
        self._call("reshape", RawBlobVec._of(bottom), RawBlobVec._of(top))
        self.set_loss_weights(top)

    # The layer's own methods get what python_layer.hpp passes them: copies of the
    # vectors (RawBlobVec, and a BoolVec for propagate_down) holding the net's blobs.
    def Forward(self, bottom, top):
        # The layer's own code runs under the caller's NumPy error settings, as in pycaffe.
        b, t = RawBlobVec._of(bottom), RawBlobVec._of(top)
        self._call("reshape", b, t)
        self._call("forward", b, t)
        with np.errstate(all="ignore"):
            return weighted_loss(self, top, self.__dtype, backend.xp())

    def Backward(self, top, propagate_down, bottom):
        self._call("backward", RawBlobVec._of(top), BoolVec._of(propagate_down), RawBlobVec._of(bottom))

    def __repr__(self):
        pp = self.layer_param.python_param
        return "<Python layer '%s' (%s.%s)>" % (self.layer_param.name, pp.module, pp.layer)


def add_layer_context(exc, layer_name, note):
    """Name the layer on an exception raised by a Python layer's own code, keeping its
    type (pycaffe lets it through): a note (Python 3.11+) and ``.layer`` where settable."""
    if not any(layer_name in n for n in getattr(exc, "__notes__", ()) or ()):
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:   # Python 3.10: keep the text where tracebacks cannot show it
            try:
                exc.__notes__ = list(getattr(exc, "__notes__", ())) + [note]
            except (AttributeError, TypeError):
                pass
    if getattr(exc, "layer", None) is None:
        try:
            exc.layer = layer_name
        except (AttributeError, TypeError):
            pass


def _is_the_module(exc, module):
    """Whether a ModuleNotFoundError is about ``module`` itself (or a package above it),
    not about something the module imports."""
    missing = getattr(exc, "name", None)
    return missing is not None and (missing == module or module.startswith(missing + "."))


def _module_file_in(directory, module):
    top = module.split(".")[0]
    for cand in (os.path.join(directory, top + ".py"), os.path.join(directory, top, "__init__.py")):
        if os.path.isfile(cand):
            return cand
    return None


def _import_module(module, model_dir):
    """Import ``module``; one beside the model file wins over a same-named one elsewhere."""
    with _import_lock:
        local = _module_file_in(model_dir, module) if model_dir else None
        if local is None:
            return importlib.import_module(module)
        top = module.split(".")[0]
        cached = sys.modules.get(top)
        cached_file = getattr(cached, "__file__", None) if cached is not None else None
        if cached is not None and cached_file and os.path.abspath(cached_file) == os.path.abspath(local):
            return importlib.import_module(module)
        # A different module of that name is loaded (or none is): load the model's own,
        # with its folder on sys.path so that its own imports resolve.
        for name in list(sys.modules):
            if name == top or name.startswith(top + "."):
                del sys.modules[name]
        if model_dir not in sys.path:
            sys.path.insert(0, model_dir)
            added = True
        else:
            added = False
        try:
            importlib.invalidate_caches()
            return importlib.import_module(module)
        finally:
            if added:
                try:
                    sys.path.remove(model_dir)
                except ValueError:
                    pass
                # keep the folder reachable for imports the module makes later
                sys.path.append(model_dir)


@register_layer
class PythonLayer(Layer):
    """Registered under type "Python": builds the user's class (a PyLayer subclass)."""
    # the facts of the class it builds
    type = PyLayer.type
    category = PyLayer.category
    summary = PyLayer.summary
    param_fields = PyLayer.param_fields
    flops = PyLayer.flops

    def __new__(cls, param, dtype=np.float32, model_dir=None, **kwargs):
        pp = param.python_param
        name = param.name
        if not pp.module:
            raise LayerError("Python layer '%s': python_param.module is not set" % name, layer=name)
        if not pp.layer:
            raise LayerError("Python layer '%s': python_param.layer is not set" % name, layer=name)
        try:
            mod = _import_module(pp.module, model_dir)
        except ModuleNotFoundError as e:
            if not _is_the_module(e, pp.module):
                add_layer_context(e, name, "raised while importing module '%s' for Python layer '%s'"
                                  % (pp.module, name))
                raise
            where = " (looked in sys.path%s)" % (" and %s" % model_dir if model_dir else "")
            raise PythonLayerNotFound("Python layer '%s': cannot import module '%s': %s%s"
                                      % (name, pp.module, e, where), layer=name) from e
        except CaffeError:
            raise
        except Exception as e:
            add_layer_context(e, name, "raised while importing module '%s' for Python layer '%s'"
                              % (pp.module, name))
            raise
        user_cls = getattr(mod, pp.layer, None)
        if user_cls is None:
            raise PythonLayerClassMissing("Python layer '%s': module '%s' (%s) has no attribute '%s'"
                                          % (name, pp.module, getattr(mod, "__file__", "?"), pp.layer),
                                          layer=name)
        if not (isinstance(user_cls, type) and issubclass(user_cls, PyLayer)):
            raise PythonLayerNotALayer("Python layer '%s': %s.%s is not a subclass of caffe.Layer "
                                       "(engine.Layer)" % (name, pp.module, pp.layer), layer=name)
        try:
            obj = user_cls(param)
        except CaffeError:
            raise
        except Exception as e:
            add_layer_context(e, name, "raised by the constructor of Python layer '%s' (%s.%s)"
                              % (name, pp.module, pp.layer))
            raise
        obj._configure(dtype, model_dir)
        return obj

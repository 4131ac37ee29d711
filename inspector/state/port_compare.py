"""The Compare tab's port comparisons: this tab's net against a port it was given -- an ONNX
model (.onnx), a PyTorch module (a .py, the name of the class or function in it that makes
the module, and its .pth state_dict) or a runtime's tensors (.npz) -- with engine.ports doing
the work.  Around the comparison itself:

- a net without weights compared with a port that carries its own: the weights differ, and
  the tab offers to load the net's .caffemodel or to copy the port's weights into the net
  (then it compares again);
- a comparison whose values are all constant (all 0: a deploy file without fillers) proves
  nothing (engine.ports.compare says so): the tab warns instead of calling it faithful;
- a PyTorch .py is the uploader's code: it is run only when the server was started with
  ``--allow-python-layers`` (the gate Python layers have: both run code that comes with a
  model).
"""
import os

import numpy as np

from . import loading

# upload slot and comparison kind per file type
SLOTS = {".onnx": ("compare", "onnx"), ".py": ("compare_torch", "torch"), ".pth": ("compare_state_dict", "torch"),
         ".pt": ("compare_state_dict", "torch"), ".npz": ("compare_tensors", "tensors")}
PORT_KINDS = ("onnx", "torch", "tensors")


class PortRefused(ValueError):
    """A port comparison that cannot be made (says why)."""


class _PortLayer:
    def __init__(self, layer, kind, max_rel, ok):
        self.layer, self.kind, self.max_rel, self.ok = layer, kind, max_rel, ok


class _PortDivergence:
    def __init__(self, layer):
        self.layer = layer


class PortView:
    """engine.ports' comparison seen as the tab's comparisons are (``layers`` with each
    layer's largest own divergence, ``first_divergence``), so the graph colours by it and
    selects the first departing layer; ``result`` keeps the whole comparison, ``port`` the
    port (its weights can be copied into the net), ``kind`` which port it is, and the two
    notices: ``proves_nothing`` (why the comparison shows nothing) and ``weights_differ``."""

    def __init__(self, result, label, port=None, kind="onnx", proves_nothing=None, weights_differ=None, note=None):
        self.result = result
        self.port = port
        self.kind = kind
        self.label_a, self.label_b = "this net", label
        self.rtol = result.rtol
        self.proves_nothing = proves_nothing
        self.weights_differ = weights_differ
        self.note = note                       # what the tab did before comparing (weights copied or loaded)
        self.ok = result.faithful and proves_nothing is None
        self.layers = []
        for name, d in result.by_layer().items():
            v = d["own_rel"] if d["own_rel"] is not None else d["rel"]
            if v is None:
                continue
            self.layers.append(_PortLayer(name, "forward", float(v), d["status"] not in ("departs", "shape")))
        self.first_divergence = _PortDivergence(result.first_departing) if result.first_departing else None


def slot_of(filename):
    """(upload slot, comparison kind) of a Compare upload's file name, or None (a log, a report...)."""
    return SLOTS.get(os.path.splitext(str(filename or ""))[1].lower())


def received(session, filename, allow_code):
    """What the tab says when a port file arrives."""
    ext = os.path.splitext(str(filename or ""))[1].lower()
    if ext == ".onnx":
        return "%s received: choose “this net vs an ONNX model” and Compare" % filename
    if ext == ".npz":
        return "%s received: choose “this net vs a runtime's tensors” and Compare" % filename
    if ext == ".py":
        if not allow_code:
            return ("%s received, but this server does not run uploaded code: start it with --allow-python-layers "
                    "to compare a PyTorch module" % filename)
        sd = session.upload_names.get("compare_state_dict")
        return "%s received%s: give the class or function that makes the module, then Compare" % (
            filename, " (with the state_dict %s)" % sd if sd else "; add its .pth state_dict if it has one")
    py = session.upload_names.get("compare_torch")
    return "%s received as the PyTorch module's state_dict%s" % (
        filename, " (for %s)" % py if py else ": upload the module's .py too")


def net_has_weights(ld):
    """Whether the loaded net's params are more than its fillers': a .caffemodel loaded (at
    load time or here), weights copied from a port, or solver iterations run."""
    return bool(ld.spec.weights or getattr(ld, "weights_from", None) or (ld.training and ld.training.train))


def _inputs(ld):
    return {n: np.asarray(ld.net.blobs[n].data) for n in ld.graph.inputs if n in ld.net.blobs}


_MISSING = {"onnx": "upload the ONNX model (.onnx) to compare this net with first",
            "torch": "upload the PyTorch module's .py (and its .pth state_dict) to compare this net with first",
            "tensors": "upload the runtime's tensors (.npz: name -> array, with the input it was given) first"}
_SLOT = {"onnx": "compare", "torch": "compare_torch", "tensors": "compare_tensors"}


def _port(session, kind, factory, allow_code):
    """(the port object, its label) of the tab's upload of ``kind``."""
    if kind not in _SLOT:
        raise PortRefused("unknown port kind %r" % (kind,))
    path = session.uploads.get(_SLOT[kind])
    if not path or (kind == "onnx" and not path.endswith(".onnx")):
        raise PortRefused(_MISSING[kind])
    name = session.upload_names.get(_SLOT[kind], os.path.basename(path))
    if kind == "onnx":
        from engine.ports.compare import load_onnx
        from engine.ports.onnx_port import OnnxPort
        return OnnxPort(load_onnx(path)[0], name), name
    if kind == "torch":
        if not allow_code:
            raise PortRefused("%s is Python code from the page: this server runs uploaded code only when started with "
                              "--allow-python-layers" % name)
        from engine.ports.torch_port import TorchGraph, load_torch_module
        factory = (factory or "").strip()
        module, label = load_torch_module("%s:%s" % (path, factory) if factory else path,
                                          session.uploads.get("compare_state_dict"))
        label = "%s:%s" % (name, label.split(":", 1)[1]) if ":" in label else name
        return TorchGraph(module, label), label
    from engine.ports.tensors_port import TensorDump
    dump = TensorDump.load(path)
    dump.label = name
    return dump, name


def _compare_with(ld, port, kind, rtol):
    if kind == "torch":
        from engine.ports.torch_port import compare_torch
        return compare_torch(ld.net, port, inputs=_inputs(ld), rtol=rtol)
    if kind == "tensors":
        from engine.ports.tensors_port import compare_tensors
        return compare_tensors(ld.net, port, rtol=rtol)
    from engine.ports.compare import compare_port
    return compare_port(ld.net, port, inputs=_inputs(ld), rtol=rtol)


def compare(session, kind, rtol, factory=None, allow_code=False, note=None, port=None):
    """Compare the tab's net with its port of ``kind``; returns the :class:`PortView`.
    Errors of the port (a file that is not one, a module that raises) are a PortRefused
    naming the file."""
    from engine.ports import port_checks
    from engine.ports.activations import PortError
    from engine.ports.errors import MissingExtraError
    ld = session.loaded
    label = None
    try:
        if port is None:
            port, label = _port(session, kind, factory, allow_code)
        label = label or port.label
        result = _compare_with(ld, port, kind, rtol)
    except (PortError, MissingExtraError) as exc:
        raise PortRefused(str(exc)) from None
    nothing = result.message if result.proves_nothing else None
    differ = None if result.faithful or net_has_weights(ld) else port_checks.weights_differ(ld.net, port)
    return PortView(result, label, port=port, kind=kind, proves_nothing=nothing, weights_differ=differ, note=note)


def copy_weights(session, rtol, allow_code=False):
    """Copy the port of the tab's comparison's weights into the net, and compare again."""
    from engine.ports import port_checks
    ld = session.loaded
    view = ld.comparison
    if not isinstance(view, PortView) or view.port is None:
        raise PortRefused("compare this net with a port first")
    port = view.port
    copy = port_checks.copy_port_weights(ld.net, port)
    if not copy.copied:
        raise PortRefused("no weights of %s could be copied into this net: %s" % (
            view.label_b, "; ".join("%s (%s)" % s for s in copy.skipped) or "no paired op carries weights"))
    ld.weights_from = "the weights of %s" % view.label_b
    return compare(session, view.kind, rtol, allow_code=allow_code, port=port, note=copy.summary())


def load_weights(session, filename, contents, max_bytes, rtol, allow_code=False):
    """Load a .caffemodel uploaded in the weights notice into the net, and compare again."""
    ld = session.loaded
    view = ld.comparison
    path = loading.save_upload(session, "compare_weights", filename, contents, max_bytes)
    try:
        ld.net.copy_from(path)
    except Exception as exc:            # noqa: BLE001 - the engine's error, said on the page
        raise PortRefused("%s: %s" % (filename, exc)) from None
    ld.weights_from = os.path.basename(path)
    if not isinstance(view, PortView):
        return None
    return compare(session, view.kind, rtol, allow_code=allow_code, port=view.port,
                   note="loaded %s into this net" % filename)

"""Ports: a Caffe net out of the engine, and a debugger for anyone's port.

- :func:`compare_port`: a Caffe net against an ONNX port, blob by blob, the first layer whose
  own arithmetic departs and why (``python -m engine compare-port``; docs/port-debugging.md);
- :func:`export_torch` / :func:`verify_torch`: a plain PyTorch ``nn.Module`` source file and
  its state_dict, checked against the engine per blob (``python -m engine export-torch``).

Everything here is imported lazily: ``import engine.ports`` needs neither onnx, onnxruntime
nor torch; a call without them says which extra to install.
"""
import importlib

_LAZY = {
    # the port debugger (engine/ports/compare.py, fingerprints in diagnose.py)
    "compare_port": ("engine.ports.compare", "compare_port"),
    "PortComparison": ("engine.ports.compare", "PortComparison"),
    "Preprocess": ("engine.ports.compare", "Preprocess"),
    # the PyTorch export (engine/ports/torch_export.py)
    "export_torch": ("engine.ports.torch_export", "export_torch"),
    "verify_torch": ("engine.ports.torch_export", "verify_torch"),
    "torch_source": ("engine.ports.torch_export", "torch_source"),
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        mod_name, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod_name), attr)
        globals()[name] = value
        return value
    raise AttributeError("module 'engine.ports' has no attribute %r" % name)

"""Ports: a Caffe net out of the engine, exact by construction and proven blob by blob.

- :func:`export_onnx` / :func:`export_onnx_bytes`: the net (a :class:`engine.Net` or a
  prototxt path) as an ONNX model of standard ops with Caffe 1.0's exact semantics
  (``python -m engine export-onnx``; docs/ports.md lists every layer type, its ONNX form,
  the refused types and the tensor naming scheme);
- :func:`verify`: onnxruntime and the engine on the same inputs, every blob compared.

Everything here is imported lazily: ``import engine`` and ``import engine.ports`` need
neither onnx nor onnxruntime.  Without them, a call says which extra to install
(``pip install .[onnx]``).
"""
import importlib

_LAZY = {
    # the ONNX exporter (engine/ports/onnx_export.py, converters in onnx_layers.py)
    "export_onnx": ("engine.ports.onnx_export", "export_onnx"),
    "export_onnx_bytes": ("engine.ports.onnx_export", "export_onnx_bytes"),
    "build_onnx_model": ("engine.ports.onnx_export", "build_onnx_model"),
    "ExportError": ("engine.ports.errors", "ExportError"),
    "MissingExtraError": ("engine.ports.errors", "MissingExtraError"),
    "DEFAULT_OPSET": ("engine.ports.opsets", "DEFAULT_OPSET"),
    "newest_opset": ("engine.ports.opsets", "newest_opset"),
    "resolve_opset": ("engine.ports.opsets", "resolve_opset"),
    "exportable_types": ("engine.ports.onnx_layers", "exportable_types"),
    "refused_types": ("engine.ports.onnx_layers", "refused_types"),
    # the proof (engine/ports/verify.py)
    "verify": ("engine.ports.verify", "verify"),
    "VerifyResult": ("engine.ports.verify", "VerifyResult"),
    "random_inputs": ("engine.ports.verify", "random_inputs"),
    "randomize_params": ("engine.ports.verify", "randomize_params"),
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        mod_name, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod_name), attr)
        globals()[name] = value
        return value
    raise AttributeError("module 'engine.ports' has no attribute %r" % name)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

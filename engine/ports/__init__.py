"""Ports: a Caffe net out of the engine, exact by construction and proven blob by blob.

- :func:`export_onnx` / :func:`export_onnx_bytes`: the net (a :class:`engine.Net` or a
  prototxt path) as an ONNX model of standard ops with Caffe 1.0's exact semantics
  (``python -m engine export-onnx``; docs/ports.md lists every layer type, its ONNX form,
  the refused types and the tensor naming scheme);
- :func:`verify`: onnxruntime and the engine on the same inputs, every blob compared;
- :func:`compare_port`: a Caffe net against anyone's port (an ONNX model, or any
  :class:`PortGraph`), blob by blob, the first layer whose own arithmetic departs and why
  (``python -m engine compare-port``; docs/port-debugging.md);
- :func:`export_torch` / :func:`verify_torch`: a plain PyTorch ``nn.Module`` source file and its
  state_dict, checked against the engine per blob (``python -m engine export-torch``).

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
    # the port debugger (engine/ports/compare.py, fingerprints in diagnose.py)
    "compare_port": ("engine.ports.compare", "compare_port"),
    "PortComparison": ("engine.ports.compare", "PortComparison"),
    "Preprocess": ("engine.ports.compare", "Preprocess"),
    "PortGraph": ("engine.ports.port_graph", "PortGraph"),
    "PortNode": ("engine.ports.port_graph", "PortNode"),
    "OnnxPort": ("engine.ports.onnx_port", "OnnxPort"),
    # other ports: a user's PyTorch module, either way round (torch_port.py), a runtime's tensors
    # (tensors_port.py); a port's weights into a net without (port_checks.py)
    "compare_torch": ("engine.ports.torch_port", "compare_torch"),
    "TorchGraph": ("engine.ports.torch_port", "TorchGraph"),
    "compare_tensors": ("engine.ports.tensors_port", "compare_tensors"),
    "TensorDump": ("engine.ports.tensors_port", "TensorDump"),
    "copy_port_weights": ("engine.ports.port_checks", "copy_port_weights"),
    # the PyTorch export (engine/ports/torch_export.py)
    "export_torch": ("engine.ports.torch_export", "export_torch"),
    "verify_torch": ("engine.ports.torch_export", "verify_torch"),
    "torch_source": ("engine.ports.torch_export", "torch_source"),
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

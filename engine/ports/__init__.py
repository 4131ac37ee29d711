"""Ports out of Caffe: exports that are exact by construction, and a debugger for anyone's port.

- :func:`engine.ports.compare.compare_port`: a Caffe net against an ONNX port, blob by blob,
  and the first layer whose own arithmetic departs (docs/port-debugging.md);
- :func:`engine.ports.torch_export.export_torch` / :func:`verify_torch`: a plain PyTorch
  ``nn.Module`` source file and its state_dict, checked against the engine per blob.

onnx/onnxruntime and torch are optional (the ``onnx`` and ``torch`` extras); importing this
package needs neither.
"""
from engine.ports.compare import compare_port  # noqa: F401
from engine.ports.torch_export import export_torch, verify_torch  # noqa: F401

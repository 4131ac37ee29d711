"""Ports: a Caffe net out of the engine, exact by construction and proven blob by blob.

- :func:`export_onnx` / :func:`export_onnx_bytes`: the net (a :class:`engine.Net` or a
  prototxt path) as an ONNX model of standard ops with Caffe 1.0's exact semantics
  (``python -m engine export-onnx``; docs/ports.md lists every layer type, its ONNX form,
  the refused types and the tensor naming scheme);
- :func:`verify`: onnxruntime and the engine on the same inputs, every blob compared;
- :func:`compare_port`: a Caffe net against anyone's ONNX port, blob by blob, the first layer
  whose own arithmetic departs and why (``python -m engine compare-port``; docs/port-debugging.md);
- :func:`export_torch` / :func:`verify_torch`: a plain PyTorch ``nn.Module`` source file and its
  state_dict, checked against the engine per blob (``python -m engine export-torch``).

Everything here is imported lazily: ``import engine`` and ``import engine.ports`` need
neither onnx nor onnxruntime.  Without them, a call says which extra to install
(``pip install .[onnx]``).

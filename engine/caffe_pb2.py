"""``engine.caffe_pb2`` is the generated ``proto.caffe_pb2`` module itself.

The module object is replaced in ``sys.modules`` (not re-exported with ``*``), so
message classes and descriptors are identical whichever name imports them.
Regenerate with ``python proto/generate.py``.
"""
import sys

from proto import caffe_pb2 as _caffe_pb2

sys.modules[__name__] = _caffe_pb2

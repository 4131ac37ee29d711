"""Helpers shared by the tests of the NetParameter passes (filter, splits, upgrade): parse
prototxt text into a message and compare messages as Caffe's tests do."""
from google.protobuf import text_format

from engine.proto import caffe_pb2


def parse(text, cls=caffe_pb2.NetParameter):
    """``text`` (prototxt) as a new ``cls`` message."""
    msg = cls()
    text_format.Parse(text, msg)
    return msg


def same(a, b):
    """Compare as Caffe's tests do (DebugString), with a readable diff on failure."""
    assert text_format.MessageToString(a) == text_format.MessageToString(b)
    assert a == b

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


def pure_and_idempotent(fn, inp, exp):
    """``fn(inp)`` -> ``(out, records)``: ``out`` is ``exp``, ``inp`` is left as it was, and
    ``fn(out)`` gives ``out`` again with no records. Returns ``(out, records)``."""
    before = inp.SerializeToString()
    out, records = fn(inp)
    same(out, exp)
    assert inp.SerializeToString() == before                      # pure
    again, more = fn(out)                                         # idempotent
    same(again, out)
    assert more == []
    return out, records

"""``str()`` of caffe_pb2 messages as pycaffe printed them: fields in the order the
.proto declares them.

pycaffe scripts write nets with ``str(net_param)`` / ``print(net_param)``, so the text is
whatever the protobuf runtime's ``__str__`` prints.  The pycaffe that wrote the reference
files (../shared/golden/pycaffe) ran on a protobuf whose upb text encoder walked a
message's fields in declaration order (``stride`` before ``group`` in a
``convolution_param``); today's upb walks them in field-number order, as C++ Caffe's
TextFormat does.  :func:`use_declaration_order` makes ``str()`` of every caffe_pb2 message
print in declaration order again, each value still formatted by the runtime itself (its
own ``str()`` of a message holding just that field), so numbers and strings read exactly
as before.  ``install_as_caffe`` applies it; the engine's own writers
(``text_format.MessageToString``, :func:`engine.core.io.write_prototxt`) keep field-number
order, as C++ Caffe writes.
"""
from engine.proto import caffe_pb2

__all__ = ["declaration_order_text", "use_declaration_order", "message_classes"]

_ORIGINAL_STR = {}


def message_classes():
    """Every message class of caffe_pb2, nested ones included."""
    out = []

    def walk(cls):
        out.append(cls)
        for nested in cls.DESCRIPTOR.nested_types:
            walk(getattr(cls, nested.name))
    for name in caffe_pb2.DESCRIPTOR.message_types_by_name:
        walk(getattr(caffe_pb2, name))
    return out


def _runtime_str(msg):
    cls = type(msg)
    return _ORIGINAL_STR.get(cls, cls.__str__)(msg)


def _repeated(field):
    if hasattr(field, "is_repeated"):          # protobuf >= 5.28 (label is gone in 7)
        return field.is_repeated
    return field.label == field.LABEL_REPEATED


def _is_set(msg, field):
    if _repeated(field):
        return len(getattr(msg, field.name)) > 0
    return msg.HasField(field.name)


def _scalar_lines(msg, field):
    """The runtime's own lines for one scalar field (all its values when repeated)."""
    alone = type(msg)()
    value = getattr(msg, field.name)
    if _repeated(field):
        getattr(alone, field.name).extend(value)
    else:
        setattr(alone, field.name, value)
    return _runtime_str(alone).splitlines()


def _lines(msg, indent):
    out = []
    for field in msg.DESCRIPTOR.fields:
        if not _is_set(msg, field):
            continue
        if field.message_type is not None:
            values = getattr(msg, field.name)
            for value in (values if _repeated(field) else [values]):
                out.append("%s%s {" % (indent, field.name))
                out.extend(_lines(value, indent + "  "))
                out.append("%s}" % indent)
        else:
            out.extend(indent + line for line in _scalar_lines(msg, field))
    return out


def declaration_order_text(msg):
    """``msg`` in text format, fields in declaration order (see the module doc)."""
    lines = _lines(msg, "")
    return "".join(line + "\n" for line in lines)


def use_declaration_order():
    """Make ``str()`` of every caffe_pb2 message print in declaration order (idempotent)."""
    for cls in message_classes():
        if cls not in _ORIGINAL_STR:
            _ORIGINAL_STR[cls] = cls.__str__
            cls.__str__ = declaration_order_text

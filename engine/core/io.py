"""Reading and writing Caffe's files: prototxt, caffemodel, binaryproto.

Text files are parsed like Caffe's ``ReadProtoFromTextFile`` (protobuf's
``TextFormat::Parse``): unknown fields, unknown enum values, a non-repeated
field given twice and missing required fields are errors. Binary files are
parsed like ``ReadProtoFromBinaryFile`` (no size limit here). Every failure
raises :class:`engine.core.errors.ParseError` naming the file and, for text, the
1-based line and column.

The array helpers follow pycaffe's ``caffe.io`` (``blobproto_to_array``,
``array_to_blobproto``, ``array_to_datum``, ``datum_to_array``).
"""
import os
import re

import numpy as np
from google.protobuf import message as _pb_message
from google.protobuf import text_format

from engine.core import source_map
from engine.core.errors import ParseError, ShapeError
from engine.proto import caffe_pb2

__all__ = [
    "parse_prototxt", "read_prototxt", "read_net_prototxt", "read_solver_prototxt",
    "parse_binary", "read_binary", "read_caffemodel", "read_blobproto",
    "read_text_or_binary", "write_prototxt", "write_binary",
    "blobproto_to_array", "array_to_blobproto",
    "arraylist_to_blobprotovector_str", "blobprotovector_str_to_arraylist",
    "array_to_datum", "datum_to_array",
]

# What a message read from a binary file is usually called, for error messages.
_BINARY_KINDS = {
    "NetParameter": "caffemodel",
    "BlobProto": "binaryproto",
    "BlobProtoVector": "binaryproto",
    "SolverState": "solverstate",
}
_TEXT_EXTENSIONS = (".prototxt", ".pbtxt", ".txt")
_BINARY_EXTENSIONS = (".caffemodel", ".binaryproto", ".solverstate", ".pb")


def _type_name(message_cls):
    return message_cls.DESCRIPTOR.full_name


def _read_bytes(path):
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ParseError("File not found: %s" % path, path) from None
    except IsADirectoryError:
        raise ParseError("is a directory, not a file", path) from None
    except OSError as exc:
        raise ParseError("cannot read file: %s" % (exc.strerror or exc), path) from None
    except ValueError as exc:   # e.g. an embedded NUL byte in the name
        raise ParseError("invalid file name: %s" % exc, repr(path)) from None


def _line_col(data, offset):
    """1-based line and column of byte ``offset`` in ``data``."""
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


def _strip_location(text, line, column):
    """Drop the ``"L:C : "`` prefix protobuf puts before its message."""
    if line is not None and column is not None:
        prefix = "%d:%d : " % (line, column)
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _check_required(msg, path, what):
    if not msg.IsInitialized():
        missing = ", ".join(msg.FindInitializationErrors())
        raise ParseError("%s: Message missing required fields: %s" % (what, missing), path)


# ---------------------------------------------------------------------------
# Text format
# ---------------------------------------------------------------------------

def parse_prototxt(text, message_cls, path=None):
    """Parse prototxt ``text`` (str or bytes) into a new ``message_cls``.

    ``path`` only names the source in errors. Raises ParseError with the
    1-based line and column of the first problem.
    """
    if isinstance(text, (bytes, bytearray)):
        data = bytes(text)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line, column = _line_col(data, exc.start)
            raise ParseError("invalid UTF-8 byte 0x%02x in text-format %s"
                             % (data[exc.start], _type_name(message_cls)),
                             path, line, column) from None
    root_kind = _NET_KINDS.get(message_cls.DESCRIPTOR.name)
    if root_kind is not None:       # a net's layers, tops, axes and text: refused before any parsing
        source_map.check_limits(text, path, root_kind=root_kind)
    msg = message_cls()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        detail = _shorten_echo(_strip_location(str(exc), line, column))
        where = source_map.context_at(text, line, column, root_kind=root_kind or "other") if line else None
        raise ParseError("Error parsing text-format %s: %s" % (_type_name(message_cls), detail),
                         path, line, column, layer=where.layer if where else None,
                         field=where.field if where else None,
                         layer_line=where.layer_line if where else None) from None
    _check_required(msg, path, "Error parsing text-format %s" % _type_name(message_cls))
    return msg


# messages whose text holds nets: the limits of engine.core.limits apply to them
_NET_KINDS = {"NetParameter": "net", "SolverParameter": "solver"}
_ECHO = re.compile(r"^'(.*)': ", re.S)
_ECHO_MAX = 160


def _shorten_echo(detail):
    """protobuf's message echoes the whole line it failed on (``'<line>': <what>``): a line of
    megabytes is cut to its first characters."""
    m = _ECHO.match(detail)
    if m is None or len(m.group(1)) <= _ECHO_MAX:
        return detail
    return "'%s...' (%s characters): %s" % (m.group(1)[:_ECHO_MAX], "{:,}".format(len(m.group(1))),
                                            detail[m.end():])


def read_prototxt(path, message_cls):
    """Read a text-format file into a new ``message_cls``."""
    path = os.fspath(path)
    return parse_prototxt(_read_bytes(path), message_cls, path)


def read_net_prototxt(path):
    """Read a net prototxt as a NetParameter, as written (no upgrade)."""
    return read_prototxt(path, caffe_pb2.NetParameter)


def read_solver_prototxt(path):
    """Read a solver prototxt as a SolverParameter, as written (no upgrade)."""
    return read_prototxt(path, caffe_pb2.SolverParameter)


# ---------------------------------------------------------------------------
# Binary format
# ---------------------------------------------------------------------------

def parse_binary(data, message_cls, path=None):
    """Parse serialized ``data`` into a new ``message_cls``.

    Raises ParseError when the bytes are truncated or corrupt, when required
    fields are missing, or when a non-empty input sets no known field (bytes
    that happen to decode but are not this message).
    """
    kind = _BINARY_KINDS.get(message_cls.DESCRIPTOR.name, "binary proto")
    what = "truncated or not a %s (%s)" % (message_cls.DESCRIPTOR.name, kind)
    msg = message_cls()
    try:
        msg.ParseFromString(bytes(data))
    except (_pb_message.DecodeError, ValueError, TypeError, RecursionError) as exc:
        raise ParseError("%s: %s" % (what, exc), path) from None
    if data and not msg.ListFields():
        raise ParseError("%s: %d bytes decode to no known %s field"
                         % (what, len(data), _type_name(message_cls)), path)
    if message_cls.DESCRIPTOR.name == "NetParameter":
        _check_layer_count(msg, path)
    _check_required(msg, path, "not a valid %s (%s)" % (message_cls.DESCRIPTOR.name, kind))
    return msg


def _check_layer_count(msg, path):
    """A caffemodel's layers against the limit on a net's layers (engine.core.limits)."""
    from engine.core import limits
    from engine.core.errors import LimitExceeded
    lim = limits.current().max_layers
    n = len(msg.layer) + len(msg.layers)
    if lim is not None and n > lim:
        flag = limits.NetLimits.FLAGS["layers"]
        raise LimitExceeded("the caffemodel has {:,} layers, more than the limit of {:,}; this limit is there for "
                            "nets no real net comes near (raise it with {})".format(n, lim, flag), path,
                            limit="layers", value=n, maximum=lim, flag=flag)


def read_binary(path, message_cls):
    """Read a binary protobuf file into a new ``message_cls``."""
    path = os.fspath(path)
    return parse_binary(_read_bytes(path), message_cls, path)


def read_caffemodel(path):
    """Read a binary .caffemodel as a NetParameter (no upgrade)."""
    return read_binary(path, caffe_pb2.NetParameter)


def read_blobproto(path):
    """Read a binary .binaryproto (e.g. a mean file) as a BlobProto."""
    return read_binary(path, caffe_pb2.BlobProto)


def _looks_binary(data):
    if b"\0" in data[:4096]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def read_text_or_binary(path, message_cls):
    """Read ``path`` as text or binary, whichever it is.

    The extension decides when it is a known one (.prototxt/.pbtxt/.txt: text;
    .caffemodel/.binaryproto/.solverstate/.pb: binary); otherwise the content
    does (NUL bytes or invalid UTF-8 mean binary), and the error reported is
    the one for the format the file looks like.
    """
    path = os.fspath(path)
    data = _read_bytes(path)
    lower = path.lower()
    if lower.endswith(_TEXT_EXTENSIONS):
        return parse_prototxt(data, message_cls, path)
    if lower.endswith(_BINARY_EXTENSIONS):
        return parse_binary(data, message_cls, path)
    if _looks_binary(data):
        return parse_binary(data, message_cls, path)
    try:
        return parse_prototxt(data, message_cls, path)
    except ParseError as text_error:
        try:
            return parse_binary(data, message_cls, path)
        except ParseError:
            raise text_error from None


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------

def write_prototxt(path, msg):
    """Write ``msg`` in text format (as Caffe's WriteProtoToTextFile)."""
    with open(os.fspath(path), "w", encoding="utf-8") as f:
        f.write(text_format.MessageToString(msg))


def write_binary(path, msg):
    """Write ``msg`` serialized (as Caffe's WriteProtoToBinaryFile)."""
    with open(os.fspath(path), "wb") as f:
        f.write(msg.SerializeToString())


# ---------------------------------------------------------------------------
# Arrays (pycaffe's caffe.io)
# ---------------------------------------------------------------------------

def _blob_shape(bp):
    # Blob::FromProto: the legacy 4-D fields win when any of them is set.
    if bp.HasField("num") or bp.HasField("channels") or bp.HasField("height") \
            or bp.HasField("width"):
        return (bp.num, bp.channels, bp.height, bp.width)
    return tuple(bp.shape.dim)


def blobproto_to_array(bp, return_diff=False, dtype=np.float32):
    """BlobProto -> array of its shape (data, or diff with ``return_diff``).

    The shape is the legacy num/channels/height/width when any of those is set
    (as Caffe's Blob::FromProto), else ``shape.dim``. Values come from
    ``double_data``/``double_diff`` when present, else ``data``/``diff``.
    """
    if return_diff:
        values = bp.double_diff if len(bp.double_diff) else bp.diff
    else:
        values = bp.double_data if len(bp.double_data) else bp.data
    shape = _blob_shape(bp)
    with np.errstate(all="ignore"):   # doubles beyond float range become inf, as in Caffe
        arr = np.array(values, dtype=dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if arr.size != count:
        raise ShapeError("Check failed: count_ == proto.%s_size() (%d vs. %d): BlobProto "
                         "shape %s" % ("diff" if return_diff else "data", count, arr.size,
                                       "(" + ", ".join(str(d) for d in shape) + ")"))
    return arr.reshape(shape)


def array_to_blobproto(arr, diff=None):
    """Array (and optional diff of the same size) -> BlobProto with ``shape.dim``."""
    arr = np.asarray(arr)
    bp = caffe_pb2.BlobProto()
    bp.shape.dim.extend(int(d) for d in arr.shape)
    bp.data.extend(arr.astype(np.float32).ravel().tolist())
    if diff is not None:
        diff = np.asarray(diff)
        if diff.size != arr.size:
            raise ShapeError("diff has %d values, data has %d" % (diff.size, arr.size))
        bp.diff.extend(diff.astype(np.float32).ravel().tolist())
    return bp


def arraylist_to_blobprotovector_str(arraylist):
    """Arrays -> serialized BlobProtoVector."""
    vec = caffe_pb2.BlobProtoVector()
    vec.blobs.extend([array_to_blobproto(arr) for arr in arraylist])
    return vec.SerializeToString()


def blobprotovector_str_to_arraylist(data, dtype=np.float32):
    """Serialized BlobProtoVector -> list of arrays."""
    vec = parse_binary(data, caffe_pb2.BlobProtoVector)
    return [blobproto_to_array(bp, dtype=dtype) for bp in vec.blobs]


def array_to_datum(arr, label=None):
    """C x H x W array -> Datum: uint8 arrays go to ``data`` bytes, others to ``float_data``."""
    arr = np.asarray(arr)
    if arr.ndim != 3:
        raise ValueError("Incorrect array shape.")
    datum = caffe_pb2.Datum()
    datum.channels, datum.height, datum.width = (int(d) for d in arr.shape)
    if arr.dtype == np.uint8:
        datum.data = np.ascontiguousarray(arr).tobytes()
    else:
        datum.float_data.extend(arr.astype(np.float32).ravel().tolist())
    if label is not None:
        datum.label = int(label)
    return datum


def datum_to_array(datum):
    """Datum -> C x H x W array: uint8 from ``data`` bytes, else float64 from ``float_data``."""
    shape = (datum.channels, datum.height, datum.width)
    if datum.encoded:
        raise ValueError("Datum holds an encoded image (encoded: true); decode its data "
                         "bytes with an image library first")
    if len(datum.data):
        arr = np.frombuffer(datum.data, dtype=np.uint8).copy()
    else:
        arr = np.array(datum.float_data, dtype=np.float64)
    if arr.size != int(np.prod(shape)):
        raise ShapeError("Datum has %d values for shape %s" % (arr.size, shape))
    return arr.reshape(shape)

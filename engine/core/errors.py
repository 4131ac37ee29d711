"""The engine's exception types.

Caffe stops the process with ``CHECK`` failures; the engine raises one of these
instead, with a message that carries Caffe's own text (so scripts and the
conformance checks can match it) plus where the problem is: the file and line,
the layer, or the blob.
"""


class CaffeError(Exception):
    """Base of every error the engine raises on purpose."""


class ParseError(CaffeError):
    """A prototxt, caffemodel or binaryproto could not be read.

    ``path``, ``line`` and ``column`` (1-based; ``None`` when unknown) say where.
    """

    def __init__(self, message, path=None, line=None, column=None, layer=None, field=None, layer_line=None):
        self.path, self.line, self.column = path, line, column
        self.layer, self.field, self.layer_line = layer, field, layer_line
        self.blob = None
        where = path or "<string>"
        if line is not None:
            where += ":%d" % line
            if column is not None:
                where += ":%d" % column
        super().__init__("%s: %s%s" % (where, message, self.where_in_net()))
        self.detail = message

    def where_in_net(self):
        """`` [layer NAME, field a.b; the layer begins at line N]`` (what is known of it), or ""."""
        bits = []
        if self.layer:
            bits.append("layer %s" % _short(self.layer))
        if self.field:
            bits.append("field %s" % _short(self.field))
        if not bits:
            return ""
        tail = ", ".join(bits)
        if self.layer and self.layer_line is not None and self.layer_line != self.line:
            tail += "; the layer begins at line %d" % self.layer_line
        return " [%s]" % tail


def _short(text, most=200):
    """``text`` cut to its first ``most`` characters (a name in a message: a layer's name may be
    megabytes long in a hostile file)."""
    text = str(text)
    return text if len(text) <= most else "%s... (%s characters)" % (text[:most], "{:,}".format(len(text)))


class LimitExceeded(ParseError):
    """A net over one of the limits every net is read under (``engine.core.limits``: its text,
    its layers, its tops, the axes of a shape), refused while its text is scanned, before any
    of it is parsed or built.  ``limit``: which one (``"text"``, ``"layers"``, ``"tops"``,
    ``"axes"``), ``value``: what the net has (at least), ``maximum``: the limit, ``flag``: the
    command-line flag that raises it (None for Caffe's own axes limit)."""

    def __init__(self, message, path=None, line=None, column=None, layer=None, field=None, layer_line=None,
                 limit="", value=0, maximum=0, flag=None):
        super().__init__(message, path, line, column, layer=layer, field=field, layer_line=layer_line)
        self.limit, self.value, self.maximum, self.flag = limit, int(value), int(maximum), flag


class NetError(CaffeError):
    """The net is inconsistent (Init would CHECK-fail in Caffe).

    ``layer`` and ``blob`` name the culprit when known; ``field`` (with
    ``field_index`` for a repeated one) the layer's prototxt field at fault, when
    the raiser knows it (``bottom``, ``top``, ``kernel_size``, ...).

    When the net came from a prototxt file, the Net adds where in it:
    ``path``, ``line``, ``column`` (1-based: the field's position when there is
    one, else the layer's) and ``layer_line``/``layer_column`` (where the layer's
    ``layer {`` is written); the message then starts with ``path:line:column:``
    as a ParseError's does, and ``detail`` is the message without it.  All are
    ``None`` for a net built from a NetParameter alone.
    """

    def __init__(self, message, layer=None, blob=None, field=None, field_index=0):
        self.layer, self.blob = layer, blob
        self.field, self.field_index = field, field_index
        self.path = self.line = self.column = None
        self.layer_line = self.layer_column = None
        super().__init__(message)

    @property
    def detail(self):
        d = self.__dict__.get("_detail")
        return d if d is not None else (str(self.args[0]) if self.args else "")

    def locate(self, path, line, column, layer_line=None, layer_column=None):
        """Say where in ``path`` the problem is (once; later calls change nothing)."""
        if self.line is not None or line is None:
            return
        self._detail = self.detail
        self.path, self.line, self.column = path, line, column
        self.layer_line, self.layer_column = layer_line, layer_column
        message = "%s:%d:%d: %s" % (path, line, column, self._detail)
        if layer_line is not None and layer_line != line:
            message += " [layer %sbegins at line %d]" % ("'%s' " % self.layer if self.layer else "", layer_line)
        self.args = (message,) + tuple(self.args[1:])
        if isinstance(self, ImportError):     # ImportError's str() is its .msg
            self.msg = message


def mark_layer(err, stage, index, field=None, field_index=0):
    """Note on ``err`` which layer raised it: its ``index`` in the NetParameter of
    Init's ``stage`` (``"upgraded"``: as read and upgraded; ``"filtered"``: after
    FilterNet; ``"split"``: after InsertSplits, i.e. the Net's own layer index), and
    the field at fault when known.  The Net turns it into a file position; the
    first mark wins."""
    if getattr(err, "_net_ref", None) is None:
        if field is None and isinstance(err, NetError):
            field, field_index = err.field, err.field_index
        err._net_ref = (stage, index, field, field_index)
    return err


class LayerError(NetError):
    """A layer rejected its parameters or bottom shapes."""


class UnknownLayerTypeError(LayerError):
    """No layer of that type is registered."""


class ShapeError(LayerError):
    """Blob shapes do not fit (Reshape, CopyTrainedLayersFrom, ...)."""


class EmptyBlobError(ShapeError):
    """Data or diff of a blob that holds no memory was asked for: Caffe's ``Check failed:
    data_`` (or ``diff_``).  A Blob gets memory the first time its count is above 0, so a
    blob that has had count 0 since it was made (a batch of 0, a ``dim: 0``, an Input with
    no shape) has none, and Caffe aborts at the first access to it.  ``blob`` names the
    blob and ``shape`` is its shape once the net knows them (None before)."""

    def __init__(self, message, layer=None, blob=None, shape=None, source=None):
        super().__init__(message, layer=layer, blob=blob)
        self.shape = shape
        self.source = source        # the Blob object asked (the net finds its name)
        self.which = "data_"        # or "diff_"


class MemoryBudgetExceeded(NetError):
    """A net being built declared more memory than the budget it was built under
    (``engine.memory_budget``): raised at the Blob (or buffer) that passes it, before that
    memory is asked for.  ``needed``: the bytes declared so far (a lower bound of the net's
    total), ``budget``: the limit, both in bytes."""

    def __init__(self, message, needed=0, budget=0, layer=None, blob=None):
        super().__init__(message, layer=layer, blob=blob)
        self.needed, self.budget = int(needed), int(budget)


class SolverError(CaffeError):
    """A solver could not be built or stepped."""


class DeviceError(CaffeError):
    """The GPU was asked for and is not usable, or ran out of memory."""


class PythonLayerRefused(LayerError):
    """A Python layer was found while Python layers are disallowed."""


class DBError(CaffeError):
    """An LMDB or LevelDB could not be opened, read or written (engine.core.db)."""


class PythonLayerNotFound(LayerError, ModuleNotFoundError):
    """A Python layer's module cannot be found (also a ModuleNotFoundError, as pycaffe raises)."""


class PythonLayerClassMissing(LayerError, AttributeError):
    """A Python layer's module has no class of that name (also an AttributeError, as in pycaffe)."""


class PythonLayerNotALayer(LayerError, TypeError):
    """A Python layer's class is not a ``caffe.Layer`` subclass (also a TypeError, as in pycaffe)."""

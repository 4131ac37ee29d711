"""Where each layer and field of a net prototxt is written, and the limits its text is read under.

protobuf's Python text parser keeps no positions (C++'s ``ParseInfoTree`` has no Python
counterpart), so this module scans the text itself: one regular expression splits it into
protobuf's text-format tokens (names, numbers, strings, punctuation; comments and blanks
skipped, columns counted in characters as protobuf counts them) and one pass over them
follows the fields and messages.  Every step is linear in the text: no field is looked for
by scanning the text again.  Three things use the pass:

- :func:`check_limits`, before protobuf parses a net (``engine.core.io``): the layers, tops
  and shape axes of :mod:`engine.core.limits`, refused (LimitExceeded) naming the limit, the
  line and the layer, before any per-layer work;
- :func:`context_at`, when protobuf refused the text: the layer (its ``name``, wherever it is
  written in the layer) and the field (``convolution_param.kernel_size``) that a line and
  column fall in, so that a parse error names them as an Init error does;
- :func:`locate_fields` and :class:`NetSource`, after an Init error: the tree of fields with
  their 1-based lines and columns, and the ``layer {`` (or V1 ``layers {``, or ``input:``)
  each layer of the net the engine built came from: the upgrades (V0/V1 layers, ``input``
  fields, which add a first layer), FilterNet (which drops layers) and InsertSplits (which
  adds them) change the layer indices, and the Net's ``_layer_source`` undoes each step.

Nothing here raises but :func:`check_limits`: a text it cannot follow gives no positions,
and the error keeps its message without them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple

from engine.core.limits import MAX_BLOB_AXES

__all__ = ["FieldNode", "locate_fields", "NetSource", "layer_signature", "guess_field", "check_limits",
           "context_at", "ErrorContext"]


@dataclass
class FieldNode:
    """One field as written: its name, where its name starts, for a message field the
    fields inside it (in order), for a scalar its value as written (strings unquoted)."""
    name: str
    line: int
    column: int
    children: List["FieldNode"] = field(default_factory=list)
    value: Optional[str] = None

    def find_all(self, name: str) -> List["FieldNode"]:
        """Every field called ``name`` inside this one, depth first in text order."""
        return [c for c in self.walk() if c.name == name]

    def find(self, name: str, index: int = 0) -> Optional["FieldNode"]:
        """The ``index``-th field called ``name`` (direct children first, then deeper)."""
        direct = [c for c in self.children if c.name == name]
        if index < len(direct):
            return direct[index]
        deep = self.find_all(name)
        return deep[index] if index < len(deep) else None

    def walk(self) -> Iterator["FieldNode"]:
        """Every field inside this one, depth first in text order (no recursion)."""
        todo = [iter(self.children)]
        while todo:
            for c in todo[-1]:
                yield c
                if c.children:
                    todo.append(iter(c.children))
                    break
            else:
                todo.pop()

    def layer_name(self) -> Optional[str]:
        """A layer's ``name`` (a V0 ``layers`` entry's is in its inner ``layer``)."""
        for c in self.children:
            if c.name == "name" and c.value is not None:
                return c.value
        for c in self.children:
            if c.name == "layer" and c.children:
                return c.layer_name()
        return None


# protobuf's text-format tokens: one match per token, blanks before it skipped
_TOKEN = re.compile(r"""[ \t\r\f\v]*(?:
      (?P<nl>\n)
    | (?P<c>\#[^\n]*)
    | (?P<s>"(?:[^"\\\n]|\\.)*(?:"|(?=\n)|\Z)|'(?:[^'\\\n]|\\.)*(?:'|(?=\n)|\Z))
    | (?P<p>[{}<>\[\]:;,])
    | (?P<w>[^\s{}<>\[\]:;,"'\#]+)
    )""", re.X)

_OPEN = {"{": "}", "<": ">"}
_LAYER_FIELDS = ("layer", "layers")
_NET_FIELDS = ("net_param", "train_net_param", "test_net_param")     # a SolverParameter's nets
_SHAPE_FIELDS = ("shape", "input_shape")


def _tokens(text: str) -> Iterator[Tuple[str, str, int, int]]:
    """(kind, text, line, column) of each token: kind ``w`` (a name, number or identifier), ``s``
    (a string, quotes included), ``p`` (punctuation)."""
    line, start = 1, 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "nl":
            line += 1
            start = m.end()
        elif kind != "c" and kind is not None:
            at = m.start(kind)
            yield kind, m.group(kind), line, at - start + 1


def _unquote(parts: List[str]) -> str:
    """The value of adjacent string tokens (quotes removed, C escapes undone)."""
    out = []
    for p in parts:
        body = p[1:-1] if len(p) >= 2 and p[-1] == p[0] else p[1:]
        if "\\" in body:
            from google.protobuf import text_encoding
            try:
                body = text_encoding.CUnescape(body).decode("utf-8", "replace")
            except Exception:   # noqa: BLE001 - a value as written is good enough for positions
                pass
        out.append(body)
    return "".join(out)


class _Frame:
    """A message (or a ``[...]`` list) being read."""
    __slots__ = ("name", "line", "column", "close", "kind", "children", "last", "dims", "is_list", "layer_name")

    def __init__(self, name, line, column, close, kind, children, is_list=False):
        self.name, self.line, self.column, self.close, self.kind = name, line, column, close, kind
        self.children, self.is_list = children, is_list
        self.last = None            # the last field started in it
        self.dims = 0               # its ``dim`` entries (a shape), or the fields written in it (a layer)
        self.layer_name = None      # a layer's: its ``name`` (a V0 entry's: its inner layer's)


@dataclass
class ErrorContext:
    """Where a position of a net's text is: the layer it is in (``layer``: its name; ``layer_line``:
    where it begins) and the field (``convolution_param.kernel_size``; ``None`` outside any)."""
    layer: Optional[str]
    layer_line: Optional[int]
    field: Optional[str]


class _Breach(Exception):
    pass


class _Scan:
    """One pass over a text's tokens: the tree of fields (``keep``), the limits (``limits``),
    the context of a position (``target``)."""

    def __init__(self, text: str, root_kind: str = "net", keep: bool = False, limits=None,
                 target: Optional[Tuple[int, int]] = None):
        self.text, self.keep, self.limits, self.target = text, keep, limits, target
        self.roots: List[FieldNode] = []
        self.stack = [_Frame(None, 0, 0, None, root_kind, self.roots)]
        self.ok = True
        self.layers = self.tops = self.bottoms = 0
        self.captured: Optional[Tuple[list, Optional[str]]] = None
        self.breach: Optional[tuple] = None    # (limit, value, maximum, line, column, field, message, shape)
        self.breach_frame = None    # the layer the breach is in: scanned to its end, for its name

    # ---------------------------------------------------------------- frames
    @staticmethod
    def _layer_frame(stack):
        for f in stack:
            if f.kind == "layer":
                return f
        return None

    def _open(self, name, line, column, close, parent):
        kind = "other"
        if parent.kind == "net" and name in _LAYER_FIELDS:
            kind = "layer"
        elif parent.kind == "solver" and name in _NET_FIELDS:
            kind = "net"
        elif parent.kind == "layer" and name == "layer":
            kind = "v0"
        children: list = []
        if self.keep:
            parent.children.append(FieldNode(name, line, column, children))
        self._field_in(parent, name, line, column)
        frame = _Frame(name, line, column, close, kind, children)
        self.stack.append(frame)
        if kind == "layer":
            self.layers += 1
            lim = self.limits.max_layers if self.limits is not None else None
            if lim is not None and self.layers > lim and self.breach is None:
                self._breached(("layers", self.layers, lim, line, column, None,
                                "the net has more than {:,} layers (the {} is at line {})"
                                .format(lim, _ordinal(lim + 1), line), None))

    def _field_in(self, parent, name, line, column):
        """A field written directly in ``parent``: a layer's are counted against its limit."""
        if parent.kind != "layer" or self.limits is None or self.breach is not None:
            return
        parent.dims += 1            # (a layer frame's own count of fields)
        lim = self.limits.max_layer_fields
        if lim is not None and parent.dims > lim:
            self._breached(("fields", parent.dims, lim, line, column, name,
                            "a layer has more than {:,} fields written in it (the {}, {}, is at line {})"
                            .format(lim, _ordinal(lim + 1), name, line), None))

    def _scalar(self, name, line, column, value, parent):
        if self.keep:
            parent.children.append(FieldNode(name, line, column, value=value))
        self._field_in(parent, name, line, column)
        if name == "name" and value is not None:
            if parent.kind == "layer":
                parent.layer_name = parent.layer_name or value
            elif parent.kind == "v0":
                owner = self._layer_frame(self.stack)
                if owner is not None:
                    owner.layer_name = owner.layer_name or value
        lim = self.limits
        if lim is None:
            return
        if name == "dim" and parent.name in _SHAPE_FIELDS:
            parent.dims += 1            # (a shape past the limit: counted to its end, for the message)
            if parent.dims > MAX_BLOB_AXES and self.breach is None:
                self._breached(("axes", 0, MAX_BLOB_AXES, parent.line, parent.column, parent.name, None, parent),
                               parent)
        elif self.breach is None and ((name == "top" and parent.kind in ("layer", "v0"))
                                      or (name == "input" and parent.kind == "net")):
            self.tops += 1
            if lim.max_tops is not None and self.tops > lim.max_tops:
                self._breached(("tops", self.tops, lim.max_tops, line, column, name,
                                "the net has more than {:,} tops (the {} is at line {})"
                                .format(lim.max_tops, _ordinal(lim.max_tops + 1), line), None))
        elif self.breach is None and name == "bottom" and parent.kind in ("layer", "v0"):
            self.bottoms += 1           # bottoms: the same limit as tops (a layer of a million bottoms)
            if lim.max_tops is not None and self.bottoms > lim.max_tops:
                self._breached(("tops", self.bottoms, lim.max_tops, line, column, name,
                                "the net has more than {:,} bottoms (the {} is at line {}; bottoms have the limit "
                                "of tops)".format(lim.max_tops, _ordinal(lim.max_tops + 1), line), None))

    def _breached(self, breach, outside=None):
        """Note the first limit passed; the scan goes on to the end of the layer it is in (to
        learn its name, and a shape's full count of axes), or of ``outside`` when it is in no
        layer, or stops here."""
        self.breach = breach
        self.breach_frame = self._layer_frame(self.stack) or outside
        if self.breach_frame is None:
            raise _Breach()

    # ---------------------------------------------------------------- the pass
    def run(self) -> "_Scan":
        toks = _tokens(self.text)
        tok = next(toks, None)
        stack = self.stack
        target = self.target
        try:
            while tok is not None:
                kind, val, line, col = tok
                frame = stack[-1]
                if target is not None and self.captured is None and (line, col) >= target:
                    self._capture(frame, kind, val)
                if frame.is_list:
                    if kind == "p" and val == "]":
                        stack.pop()
                        tok = next(toks, None)
                        if tok is not None and tok[0] == "p" and tok[1] in ",;":
                            tok = next(toks, None)
                    elif kind == "p" and val == ",":
                        tok = next(toks, None)
                    elif kind == "p" and val in _OPEN:
                        self._open(frame.name, line, col, _OPEN[val], stack[-2])
                        tok = next(toks, None)
                    else:
                        value, tok = self._value(tok, toks)
                        self._scalar(frame.name, line, col, value, stack[-2])
                    continue
                if kind == "p":
                    if val == frame.close:
                        if stack.pop() is self.breach_frame:
                            raise _Breach()
                        tok = next(toks, None)
                        if not stack[-1].is_list and tok is not None and tok[0] == "p" and tok[1] in ",;":
                            tok = next(toks, None)
                        continue
                    if val in ",;":
                        tok = next(toks, None)
                        continue
                    if val != "[":
                        self.ok = False     # a stray close or colon
                        tok = next(toks, None)
                        continue
                    parts = []              # an extension or Any type URL: [a.b.c]
                    tok = next(toks, None)
                    while tok is not None and tok[1] != "]":
                        parts.append(tok[1])
                        tok = next(toks, None)
                    name = "[" + "".join(parts) + "]"
                else:
                    name = val
                    if kind == "s":
                        self.ok = False     # a string where a field name belongs
                frame.last = name
                tok = next(toks, None)
                had_colon = tok is not None and tok[0] == "p" and tok[1] == ":"
                if had_colon:
                    tok = next(toks, None)
                if tok is not None and tok[0] == "p" and tok[1] in _OPEN:
                    self._open(name, line, col, _OPEN[tok[1]], frame)
                    tok = next(toks, None)
                elif had_colon and tok is not None and tok[0] == "p" and tok[1] == "[":
                    stack.append(_Frame(name, line, col, "]", frame.kind, frame.children, is_list=True))
                    tok = next(toks, None)
                else:
                    value, tok = self._value(tok, toks)
                    self._scalar(name, line, col, value, frame)
                    if target is not None and self.captured is None and (tok is None or tok[2:] > target):
                        self.captured = (list(stack), name)       # the position is in this field's value
                    if tok is not None and tok[0] == "p" and tok[1] in ",;":
                        tok = next(toks, None)
        except _Breach:
            return self
        if target is not None and self.captured is None:
            self._capture(stack[-1], "p", "")
        if len(stack) != 1:
            self.ok = False
        return self

    def _value(self, tok, toks):
        """The scalar at ``tok`` (its value as written; strings unquoted) and the token after it."""
        if tok is None:
            self.ok = False
            return None, None
        kind, val = tok[0], tok[1]
        if kind == "p":
            self.ok = False
            return None, tok
        nxt = next(toks, None)
        if kind == "w" and val == "-" and nxt is not None and nxt[0] == "w":
            return "-" + nxt[1], next(toks, None)
        if kind == "s":
            parts = [val]
            while nxt is not None and nxt[0] == "s":
                parts.append(nxt[1])
                nxt = next(toks, None)
            return _unquote(parts), nxt
        return val, nxt

    def _capture(self, frame, kind, val):
        if not frame.is_list and kind in ("w", "s"):
            fname: Optional[str] = val            # the position is at a field's name
        elif frame.is_list:
            fname = frame.name
        else:
            fname = frame.last
        self.captured = (list(self.stack), fname)

    def context(self) -> Optional[ErrorContext]:
        if self.captured is None:
            return None
        stack, fname = self.captured
        layer = self._layer_frame(stack)
        inner = stack[stack.index(layer) + 1:] if layer is not None else stack[1:]
        path = [f.name for f in inner if not f.is_list]
        if fname is not None:
            path.append(fname)
        return ErrorContext(layer=layer.layer_name if layer is not None else None,
                            layer_line=layer.line if layer is not None else None,
                            field=".".join(path) or None)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return "{:,}{}".format(n, suffix)


def _decode(text) -> Optional[str]:
    if isinstance(text, (bytes, bytearray)):
        try:
            return bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return text


def _below_limits(text, lim) -> bool:
    """Whether ``text`` cannot pass any limit, by counting words in C (no scan): each layer
    needs a ``layer``, each top a ``top`` or ``input``, each axis a ``dim``, each field a ``{``
    or a ``:``."""
    b = isinstance(text, (bytes, bytearray))

    def count(word):
        return text.count(word.encode() if b else word)
    return ((lim.max_layer_fields is None or count("{") + count(":") <= lim.max_layer_fields)
            and (lim.max_layers is None or count("layer") <= lim.max_layers)
            and (lim.max_tops is None or (count("top") + count("input") <= lim.max_tops
                                          and count("bottom") <= lim.max_tops))
            and count("dim") <= MAX_BLOB_AXES)


def check_limits(text, path=None, limits=None, root_kind: str = "net") -> None:
    """Refuse (LimitExceeded) a net's text (str or UTF-8 bytes) over ``limits`` (those in force
    by default): its size, its layers, its tops, the axes of a shape (Caffe's 32).  One pass
    over the text; ``root_kind``: ``"net"`` (a NetParameter) or ``"solver"`` (its nets)."""
    from engine.core import limits as limits_mod  # noqa: F811 - its current()
    from engine.core.errors import LimitExceeded
    lim = limits if limits is not None else limits_mod.current()
    size = len(text)
    if lim.max_text_bytes is not None and size > lim.max_text_bytes:
        raise LimitExceeded("the text is %s bytes, more than the limit of %s bytes for a net's text; refused "
                            "before it is parsed (raise the limit with %s)"
                            % ("{:,}".format(size), "{:,}".format(lim.max_text_bytes), lim.FLAGS["text"]),
                            path, limit="text", value=size, maximum=lim.max_text_bytes, flag=lim.FLAGS["text"])
    if _below_limits(text, lim):
        return
    decoded = _decode(text)
    if decoded is None:
        return                  # not UTF-8: the parser says so
    scan = _Scan(decoded, root_kind=root_kind, limits=lim).run()
    if scan.breach is None:
        return
    limit, value, maximum, line, column, fname, message, shape = scan.breach
    frame = scan.breach_frame
    layer = None
    layer_line = None
    if frame is not None:
        layer, layer_line = frame.layer_name, frame.line
    if limit == "axes":
        value = shape.dims
        message = ("Check failed: shape.dim_size() <= kMaxBlobAxes ({} vs. {}): the {} at line {} has {:,} axes, "
                   "more than the {} a blob may have; refused before it is parsed"
                   .format(value, maximum, shape.name, line, value, maximum))
        flag = None
    else:
        flag = lim.FLAGS[limit]
        message = "%s; this limit is there for nets no real net comes near (raise it with %s)" % (message, flag)
    raise LimitExceeded(message, path, line, column, layer=layer, field=fname, layer_line=layer_line,
                        limit=limit, value=value, maximum=maximum, flag=flag)


def context_at(text, line: int, column: int, root_kind: str = "net") -> Optional[ErrorContext]:
    """The layer and field that ``line``:``column`` (1-based) of a net's text falls in (the text
    need not parse: a parse error's position), or None."""
    decoded = _decode(text)
    if decoded is None or line is None:
        return None
    try:
        scan = _Scan(decoded, root_kind=root_kind, target=(int(line), int(column or 1))).run()
        return scan.context()
    except Exception:   # noqa: BLE001 - where an error is, is a nicety: never fail the report
        return None


def locate_fields(text) -> Optional[List[FieldNode]]:
    """The top-level fields of prototxt ``text`` (str or UTF-8 bytes) with their
    positions, or None when the text cannot be followed."""
    try:
        decoded = _decode(text)
        if decoded is None:
            return None
        scan = _Scan(decoded, keep=True).run()
        return scan.roots if scan.ok else None
    except Exception:   # noqa: BLE001 - positions are a nicety: never fail the error report
        return None


def layer_signature(layers) -> List[Tuple[str, Tuple[str, ...], Tuple[str, ...]]]:
    """``(name, bottoms, tops)`` of each LayerParameter: what tells two versions of a net apart."""
    return [(l.name, tuple(l.bottom), tuple(l.top)) for l in layers]


# Fields a message may name by accident (every layer has them); never guessed from a message.
_NOT_GUESSED = {"name", "type", "bottom", "top", "phase", "include", "exclude", "param", "blobs",
                "propagate_down", "lr_mult", "decay_mult"}
_WORD = re.compile(r"(?<![\w.'\"])([A-Za-z_]\w*)(?![\w('\"])")


def guess_field(node: FieldNode, message: str) -> Optional[Tuple[str, int]]:
    """The field of layer ``node`` that ``message`` names (a parameter written in the
    layer whose name the message spells as a word), earliest in the message; or None.
    Linear: the layer's field names are collected once, the message read once."""
    names = {f.name for f in node.walk() if f.name not in _NOT_GUESSED and not f.name.startswith("[")}
    if not names:
        return None
    for m in _WORD.finditer(message):
        if m.group(1) in names:
            return m.group(1), 0
    return None


class NetSource:
    """A net prototxt's layers as written, with their positions.

    ``layers``: the ``layer {`` entries, or for a V0/V1 file the ``layers {`` ones
    (UpgradeV1Net keeps only those); ``inputs``: the net-level ``input:`` fields;
    ``signature``: :func:`layer_signature` of those layers as written.
    """

    def __init__(self, path: str, nodes: List[FieldNode]):
        self.path = path
        self.nodes = nodes
        v1 = [n for n in nodes if n.name == "layers"]
        self.layers = v1 if v1 else [n for n in nodes if n.name == "layer"]
        self.inputs = [n for n in nodes if n.name == "input"]
        # UpgradeNetInput adds a first layer when the inputs have shapes
        self.input_layer = bool(self.inputs) and any(n.name in ("input_shape", "input_dim") for n in nodes)
        self.signature = [(n.layer_name() or "",
                           tuple(c.value or "" for c in n.children if c.name == "bottom"),
                           tuple(c.value or "" for c in n.children if c.name == "top")) for n in self.layers]

    @classmethod
    def read(cls, path) -> Optional["NetSource"]:
        """The positions of ``path``'s fields, or None (unreadable, not text, cannot be followed)."""
        try:
            path = os.fspath(path)
            with open(path, "rb") as f:
                data = f.read()
        except (OSError, TypeError, ValueError):
            return None
        nodes = locate_fields(data)
        if nodes is None:
            return None
        return cls(path, nodes)

    def written_for(self, upgraded: Sequence[Tuple[str, tuple, tuple]]) -> Optional[List[Optional[FieldNode]]]:
        """For each layer of the upgraded net (its :func:`layer_signature`), the node it was
        written as (the first ``input:`` for the Input layer the input upgrade adds); None
        when ``upgraded`` is not this file's net (the file changed since, another net, or
        V0 padding layers folded into the convolutions)."""
        lead = 1 if self.input_layer else 0
        if list(upgraded[lead:]) != self.signature:
            return None
        out: List[Optional[FieldNode]] = [self.inputs[0]] if lead else []
        out.extend(self.layers)
        return out

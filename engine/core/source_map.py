"""Where each layer and field of a net prototxt is written, for error messages.

protobuf's Python text parser keeps no positions (C++'s ``ParseInfoTree`` has no
Python counterpart), so :func:`locate_fields` walks the text again with protobuf's own
tokenizer (the same tokens, comments and columns as the parse that produced the
message) and records, for every field, its 1-based line and column and, for message
fields, the fields inside.  Only text that already parsed is walked.

:class:`NetSource` holds that tree for a NetParameter file and maps a layer of the
net the engine built back to the ``layer {`` (or V1 ``layers {``, or ``input:``)
that it came from: the upgrades (V0/V1 layers, ``input`` fields, which add a first
layer), FilterNet (which drops layers) and InsertSplits (which adds them) change the
layer indices, and :meth:`NetSource.node_for` undoes each step.

Nothing here raises: a text it cannot walk gives no positions, and the error keeps
its message without them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple

from google.protobuf import text_format

__all__ = ["FieldNode", "locate_fields", "NetSource", "layer_signature", "guess_field"]


@dataclass
class FieldNode:
    """One field as written: its name, where its name starts, and for a message
    field the fields inside it (in order)."""
    name: str
    line: int
    column: int
    children: List["FieldNode"] = field(default_factory=list)

    def find_all(self, name: str) -> List["FieldNode"]:
        """Every field called ``name`` inside this one, depth first in text order."""
        out = []
        for c in self.children:
            if c.name == name:
                out.append(c)
            out.extend(c.find_all(name))
        return out

    def find(self, name: str, index: int = 0) -> Optional["FieldNode"]:
        """The ``index``-th field called ``name`` (direct children first, then deeper)."""
        direct = [c for c in self.children if c.name == name]
        if index < len(direct):
            return direct[index]
        deep = self.find_all(name)
        return deep[index] if index < len(deep) else None

    def walk(self) -> Iterator["FieldNode"]:
        for c in self.children:
            yield c
            yield from c.walk()


def _is_string(token: str) -> bool:
    return token[:1] in ("'", '"')


def _fields(tok, close: Optional[str], depth: int = 0) -> List[FieldNode]:
    if depth > 200:
        raise ValueError("nested too deep")
    nodes: List[FieldNode] = []
    while not tok.AtEnd() and tok.token != close:
        line, column = tok._line + 1, tok._column + 1
        if tok.token == "[":                   # an extension or Any type URL: [a.b.c]
            parts = []
            tok.NextToken()
            while not tok.AtEnd() and tok.token != "]":
                parts.append(tok.token)
                tok.NextToken()
            tok.NextToken()
            name = "[" + "".join(parts) + "]"
        else:
            name = tok.token
            tok.NextToken()
        had_colon = tok.TryConsume(":")
        if tok.token in ("{", "<"):
            nodes.append(FieldNode(name, line, column, _message(tok, depth)))
        elif had_colon and tok.token == "[":    # a list: one node per element, at the element
            tok.NextToken()
            while not tok.AtEnd() and tok.token != "]":
                el_line, el_col = tok._line + 1, tok._column + 1
                if tok.token in ("{", "<"):
                    nodes.append(FieldNode(name, el_line, el_col, _message(tok, depth)))
                else:
                    _scalar(tok)
                    nodes.append(FieldNode(name, el_line, el_col))
                tok.TryConsume(",")
            tok.NextToken()
        else:
            _scalar(tok)
            nodes.append(FieldNode(name, line, column))
        if not tok.TryConsume(","):
            tok.TryConsume(";")
    return nodes


def _message(tok, depth: int) -> List[FieldNode]:
    close = "}" if tok.token == "{" else ">"
    tok.NextToken()
    children = _fields(tok, close, depth + 1)
    if tok.token != close:
        raise ValueError("unclosed message")
    tok.NextToken()                            # the closing brace
    return children


def _scalar(tok) -> None:
    if tok.AtEnd():
        raise ValueError("a value is missing")
    if tok.token == "-":
        tok.NextToken()
    was_string = _is_string(tok.token)
    tok.NextToken()
    while was_string and _is_string(tok.token):   # "a" "b": adjacent strings are one value
        tok.NextToken()


def locate_fields(text) -> Optional[List[FieldNode]]:
    """The top-level fields of prototxt ``text`` (str or UTF-8 bytes) with their
    positions, or None when the text cannot be walked."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        tok = text_format.Tokenizer(text.split("\n"))
        nodes = _fields(tok, None)
        return nodes if tok.AtEnd() else None
    except Exception:   # noqa: BLE001 - positions are a nicety: never fail the error report
        return None


def layer_signature(layers) -> List[Tuple[str, Tuple[str, ...], Tuple[str, ...]]]:
    """``(name, bottoms, tops)`` of each LayerParameter: what tells two versions of a net apart."""
    return [(l.name, tuple(l.bottom), tuple(l.top)) for l in layers]


# Fields a message may name by accident (every layer has them); never guessed from a message.
_NOT_GUESSED = {"name", "type", "bottom", "top", "phase", "include", "exclude", "param", "blobs",
                "propagate_down", "lr_mult", "decay_mult"}


def guess_field(node: FieldNode, message: str) -> Optional[Tuple[str, int]]:
    """The field of layer ``node`` that ``message`` names (a parameter written in the
    layer whose name the message spells as a word), earliest in the message; or None."""
    best = None
    for f in node.walk():
        if f.name in _NOT_GUESSED or f.name.startswith("["):
            continue
        m = re.search(r"(?<![\w.'\"])%s(?![\w('\"])" % re.escape(f.name), message)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), f.name)
    return (best[1], 0) if best else None


class NetSource:
    """A net prototxt's layers as written, with their positions.

    ``layers``: the ``layer {`` entries, or for a V0/V1 file the ``layers {`` ones
    (UpgradeV1Net keeps only those); ``inputs``: the net-level ``input:`` fields;
    ``signature``: :func:`layer_signature` of those layers as parsed.
    """

    def __init__(self, path: str, nodes: List[FieldNode], param):
        self.path = path
        self.nodes = nodes
        v1 = [n for n in nodes if n.name == "layers"]
        self.layers = v1 if v1 else [n for n in nodes if n.name == "layer"]
        self.inputs = [n for n in nodes if n.name == "input"]
        # UpgradeNetInput adds a first layer when the inputs have shapes
        self.input_layer = bool(self.inputs) and (len(param.input_shape) > 0 or len(param.input_dim) > 0)
        if v1:
            self.signature = [((l.layer.name if l.HasField("layer") else l.name),
                               tuple(l.bottom), tuple(l.top)) for l in param.layers]
        else:
            self.signature = layer_signature(param.layer)

    @classmethod
    def read(cls, path) -> Optional["NetSource"]:
        """The positions of ``path``'s fields, or None (unreadable, not text, does not parse)."""
        from engine.core.errors import CaffeError
        from engine.core.io import parse_prototxt
        from engine.proto import caffe_pb2
        try:
            path = os.fspath(path)
            with open(path, "rb") as f:
                data = f.read()
            param = parse_prototxt(data, caffe_pb2.NetParameter, path)
        except (OSError, TypeError, ValueError, CaffeError):
            return None
        nodes = locate_fields(data)
        if nodes is None:
            return None
        src = cls(path, nodes, param)
        return src if len(src.layers) == len(src.signature) else None

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

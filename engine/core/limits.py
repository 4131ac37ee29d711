"""The limits every net is read under: its text, its layers, its tops.

No real net comes near them (ResNet-1001's train_val prototxt, the largest we know of, has
4,342 layers in 0.96 MB; ``tests/test_limits.py``); a generated or hostile one can,
and would otherwise tie up whatever reads it (a 50 MB upload of 796,000 ReLUs took a
server's memory without end).  They are checked while the text is scanned, before any of
it is parsed or built (:func:`engine.core.source_map.check_limits`: one pass, linear in
the text), and a net over one is refused with :class:`engine.core.errors.LimitExceeded`
naming the limit, what the net has, where, and the flag that raises it.

Caffe's own limit on a shape's axes (``kMaxBlobAxes``, 32) is checked in the same scan, with
Caffe's message (``Check failed: shape.dim_size() <= kMaxBlobAxes (N vs. 32)``), so that a
shape of 300,000 ``dim`` entries is refused before protobuf's parser walks it.

The limits in force are the defaults below, those of :func:`set_defaults` (the command
line's flags), or inside ``with using(NetLimits(...)):`` (this thread only) another set.
``None`` for a limit: none.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import ClassVar, Dict, Iterator, Optional

__all__ = ["NetLimits", "DEFAULT", "current", "using", "set_defaults", "MAX_BLOB_AXES", "LAYER_OVERHEAD",
           "half_the_memory"]

MAX_BLOB_AXES = 32          # Caffe's kMaxBlobAxes (blob.hpp)
# What a layer costs besides its blobs, counted against a net's memory budget as each layer is
# made: its Layer, LayerParameter, blob vectors and records (7.5 KiB per in-place ReLU in the
# engine's Net, measured; about as much again in the inspector's graph and records).  A net of
# 796,000 such layers declares no blob memory worth the name and took a server's memory all the same.
LAYER_OVERHEAD = 16 << 10


def half_the_memory() -> int:
    """Half of this machine's memory (psutil; 4 GiB where it cannot be read): the default memory
    budget of one net on the command line and in the inspector (``--max-net-mb``)."""
    try:
        import psutil
        return int(psutil.virtual_memory().total // 2)
    except Exception:  # pragma: no cover - psutil is a requirement
        return 4 << 30


@dataclass(frozen=True)
class NetLimits:
    """``max_text_bytes``: size of a prototxt; ``max_layers``: ``layer``/``layers`` entries of
    a net as written (every phase's); ``max_tops``: ``top`` entries of all its layers (and
    ``input`` fields), and ``bottom`` entries likewise; ``max_layer_fields``: the fields written
    directly in one layer (a hundred thousand ``include`` rules made FilterNet crawl).  Each
    ``None``: no limit."""
    max_text_bytes: Optional[int] = 16 << 20      # 16 MB: protobuf parses garbage at some 3 MB a second
    max_layers: Optional[int] = 50_000
    max_tops: Optional[int] = 100_000
    max_layer_fields: Optional[int] = 10_000      # fields written in one layer (rules, params, ...)
    # the memory one net may declare at Init (engine.memory_budget's count, plus LAYER_OVERHEAD
    # per layer); None (the library's default): no limit; the command line's: half the RAM
    max_net_bytes: Optional[int] = None

    # the command-line flag (CLI and server) that raises each
    FLAGS: ClassVar[Dict[str, str]] = {"text": "--max-text-mb", "layers": "--max-layers", "tops": "--max-tops",
                                       "fields": "--max-layer-fields", "memory": "--max-net-mb"}

    def with_flags(self, text_mb=None, layers=None, tops=None, net_mb=None, fields=None) -> "NetLimits":
        """These limits with those given by the flags (MB for the text and the memory; 0: no limit)."""
        out = self
        if fields is not None:
            out = replace(out, max_layer_fields=int(fields) or None)
        if net_mb is not None:
            out = replace(out, max_net_bytes=(int(net_mb) << 20) or None)
        if text_mb is not None:
            out = replace(out, max_text_bytes=(int(text_mb) << 20) or None)
        if layers is not None:
            out = replace(out, max_layers=int(layers) or None)
        if tops is not None:
            out = replace(out, max_tops=int(tops) or None)
        return out


DEFAULT = NetLimits()
_defaults = [DEFAULT]
_local = threading.local()


def current() -> NetLimits:
    """The limits in force on this thread."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else _defaults[0]


def set_defaults(limits: NetLimits) -> None:
    """The limits of every thread outside a :func:`using` block (the command line's flags)."""
    _defaults[0] = limits


@contextmanager
def using(limits: Optional[NetLimits]) -> Iterator[NetLimits]:
    """Read nets under ``limits`` on this thread inside the block (None: those in force)."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    limits = limits or current()
    stack.append(limits)
    try:
        yield limits
    finally:
        stack.pop()

"""Caffe's message formats in one place.

Numbers are printed as C++ iostreams print them by default (``%g``, six
significant digits), so log lines read exactly as Caffe's.
"""
import logging
import math
import time

net_log = logging.getLogger("engine.core.net")
layer_log = logging.getLogger("engine.layer")
solver_log = logging.getLogger("engine.solver")
upgrade_log = logging.getLogger("engine.core.upgrade")
io_log = logging.getLogger("engine.core.io")

_LEVEL_CHAR = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E",
               logging.CRITICAL: "F"}


class GlogFormatter(logging.Formatter):
    """``I1121 19:30:28.165256 24645 net.py:475] message`` (glog's prefix)."""

    def format(self, record):
        t = time.localtime(record.created)
        us = int((record.created - int(record.created)) * 1e6)
        return "%s%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] %s" % (
            _LEVEL_CHAR.get(record.levelno, "I"), t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, us,
            record.process or 0, record.filename, record.lineno, record.getMessage())


def num(x):
    """A number as ``std::ostream << x`` prints it (default precision 6)."""
    if isinstance(x, (bool,)):
        return "1" if x else "0"
    if isinstance(x, int):
        return str(x)
    try:
        import numpy as np
        if isinstance(x, np.integer):
            return str(int(x))
    except ImportError:  # pragma: no cover
        pass
    f = float(x)
    if math.isnan(f):
        return "-nan" if math.copysign(1.0, f) < 0 else "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return "%g" % f


def shape_string(shape, count=None):
    """Blob::shape_string: ``"64 1 28 28 (50176)"``; a scalar blob gives ``"(1)"``."""
    if count is None:
        count = 1
        for d in shape:
            count *= int(d)
    return "".join("%d " % d for d in shape) + "(%d)" % count


def human_bytes(n, unit_b="B"):
    """1536 -> '1.5 KiB' (binary units; ``unit_b`` names the unit below 1 KiB)."""
    n = float(n)
    for unit in (unit_b, "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == unit_b else ("%.1f %s" % (n, unit))
        n /= 1024.0


def human_count(n):
    """12345678 -> '12.3M'."""
    n = float(n)
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return ("%d" % n) if unit == "" else ("%.1f%s" % (n, unit))
        n /= 1000.0


def check_failed(expr, a=None, b=None, message=""):
    """glog's CHECK failure text, spaced as glog writes it: ``Check failed: expr (a vs. b) message``
    (CHECK_op writes ``(a vs. b) `` and then the streamed message, so without a message
    the text ends in a space)."""
    text = "Check failed: %s " % expr
    if a is not None or b is not None:
        text += "(%s vs. %s) " % (a, b)
    return text + message

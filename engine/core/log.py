"""Caffe's message formats in one place.

Numbers are printed as C++ iostreams print them by default (``%g``, six
significant digits), so log lines read exactly as Caffe's.
"""
import logging
import math
import os
import re
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


# ---------------------------------------------------------------------- glog's flags
class GlogFlags:
    """The glog flags the engine honours, as glog reads them from the environment:
    ``minloglevel`` (GLOG_minloglevel: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL), ``logtostderr``
    (GLOG_logtostderr), ``alsologtostderr`` (GLOG_alsologtostderr), ``stderrthreshold``
    (GLOG_stderrthreshold, default 2: what reaches stderr when logging to files) and ``v``
    (GLOG_v; the engine has no VLOG messages, so it changes nothing)."""

    def __init__(self, environ):
        self.minloglevel = _env_int(environ, "GLOG_minloglevel", 0)
        self.logtostderr = _env_bool(environ, "GLOG_logtostderr", False)
        self.alsologtostderr = _env_bool(environ, "GLOG_alsologtostderr", False)
        self.stderrthreshold = _env_int(environ, "GLOG_stderrthreshold", 2)
        self.v = _env_int(environ, "GLOG_v", 0)

    def __repr__(self):
        return "GlogFlags(%s)" % ", ".join("%s=%r" % kv for kv in vars(self).items())


def _env_int(environ, name, default):
    """glog's EnvToInt: strtol of the value (leading digits, else 0), the default when unset."""
    value = environ.get(name)
    if value is None:
        return default
    m = re.match(r"\s*([+-]?\d+)", value)
    return int(m.group(1)) if m else 0


def _env_bool(environ, name, default):
    """glog's EnvToBool: true when the value is empty or starts with t, T, y, Y or 1."""
    value = environ.get(name)
    if value is None:
        return default
    return value == "" or value[0] in "tTyY1"


_glog_flags = None


def read_glog_flags(environ=None):
    """Read glog's flags from the environment now and keep them: glog reads them once,
    when the library loads (``import caffe``), and later changes to the environment
    have no effect.  The engine reads them when it is first imported, and ``python -m
    engine run`` reads them again when the script first imports ``caffe``."""
    global _glog_flags
    _glog_flags = GlogFlags(os.environ if environ is None else environ)
    return _glog_flags


def glog_flags():
    """glog's flags as read by :func:`read_glog_flags` (``caffe.init_log(level, stderr)``
    sets ``minloglevel`` and ``logtostderr``, as it sets FLAGS_minloglevel and
    FLAGS_logtostderr)."""
    return _glog_flags if _glog_flags is not None else read_glog_flags()


def glog_level(level):
    """The logging level of glog severity ``level`` (clipped to INFO..FATAL)."""
    return _GLOG_LEVELS[min(max(int(level), 0), 3)]


_GLOG_LEVELS = (logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
read_glog_flags()


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

"""``python -m engine run SCRIPT [ARGS...]``: a pycaffe script, unchanged, on the engine.

The engine is installed as ``caffe`` (:func:`engine.pycaffe.install_as_caffe`), then the
script runs as ``__main__`` the way ``python SCRIPT ARGS...`` runs it: ``sys.argv`` is
``[SCRIPT, ARGS...]``, ``__file__`` is the script's absolute path, the script's folder is
first on ``sys.path``, and the exit code is the script's (``sys.exit(n)``; 1 and a
traceback for an uncaught exception).
``GLOG_minloglevel`` (0 INFO .. 3 FATAL), as pycaffe scripts set it to quiet Caffe (in the
environment, or in ``os.environ`` before ``import caffe``), sets how much of Caffe's log
reaches stderr.
"""
import builtins
import io
import logging
import os
import sys
import traceback
import types

_GLOG_LEVELS = (logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)


def glog_env_level(default):
    """The logging level GLOG_minloglevel asks for, or ``default``."""
    value = os.environ.get("GLOG_minloglevel", "").strip()
    if value.isdigit():
        return _GLOG_LEVELS[min(int(value), 3)]
    return default


class GlogEnvLevel(logging.Filter):
    """GLOG_minloglevel read as pycaffe's glog reads it: once, late.  glog takes it from
    the environment when ``import caffe`` loads the library, and scripts set it just
    before that import (``os.environ['GLOG_minloglevel'] = '2'``); here it is read when
    Caffe first logs, and kept from then on."""

    def __init__(self, default=logging.INFO):
        super().__init__()
        self.default, self.level = default, None

    def filter(self, record):
        if self.level is None:
            self.level = glog_env_level(self.default)
        return record.levelno >= self.level


def _script_traceback(exc, script):
    """The traceback from the script's own first frame on (as ``python SCRIPT`` shows it)."""
    tb = exc.__traceback__
    target = os.path.abspath(script)
    t = tb
    while t is not None and os.path.abspath(t.tb_frame.f_code.co_filename) != target:
        t = t.tb_next
    return "".join(traceback.format_exception(type(exc), exc, t or tb))


def _exit_code(e, err):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    err.write("%s\n" % (code,))
    return 1


def _run_as_main(path):
    """Execute the file at ``path`` as ``__main__``, as ``python SCRIPT`` does (python 3.9+
    gives it an absolute ``__file__`` while ``sys.argv[0]`` stays as typed, which
    ``runpy.run_path`` cannot do: it sets both to the same name)."""
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec")
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__=None,
                         __spec__=None, __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main      # pickle and multiprocessing find the script's classes
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def run_script(script, argv=(), err=None):
    """Run ``script`` with ``argv`` under the engine's ``caffe``; returns the exit code."""
    from engine.pycaffe import install_as_caffe
    err = err or sys.stderr
    script = os.fspath(script)
    if not os.path.isfile(script):
        err.write("python -m engine run: can't open file '%s': [Errno 2] No such file or directory\n" % script)
        return 2
    install_as_caffe()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script] + list(argv)
    path = os.path.abspath(script)
    sys.path.insert(0, os.path.dirname(path))
    try:
        _run_as_main(path)
        return 0
    except SystemExit as e:
        return _exit_code(e, err)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        err.write(_script_traceback(e, script))
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path

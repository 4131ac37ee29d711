"""``python -m engine run SCRIPT [ARGS...]`` and ``python -m engine run -m MODULE [ARGS...]``:
a pycaffe script or module, unchanged, on the engine.

The engine is installed as ``caffe`` (:func:`engine.pycaffe.install_as_caffe`) when the
program first imports ``caffe``, and the program runs as ``__main__`` the way ``python
SCRIPT ARGS...`` (``python -m MODULE ARGS...``) runs it: ``sys.argv`` is ``[SCRIPT,
ARGS...]`` (``[the module's file, ARGS...]``), ``__file__`` is the absolute path, the
script's folder (the working directory) is first on ``sys.path``, and the exit code is the
program's (``sys.exit(n)``; 1 and a traceback for an uncaught exception).

glog's flags (``GLOG_minloglevel``: 0 INFO .. 3 FATAL; ``GLOG_logtostderr``, ...) are read
as glog reads them: once, when the program first imports ``caffe`` (pycaffe scripts set
``os.environ['GLOG_minloglevel'] = '2'`` just before ``import caffe`` to quiet Caffe);
changes after that have no effect.  ``GLOG_minloglevel`` sets how much of Caffe's log
reaches stderr.

A program that dies on an AttributeError naming a NumPy 1.x name NumPy 2 removed
(``arr.tostring()``, ``np.product``, ``np.NaN``, ...) gets one more line after its
traceback, saying so and how to run it with NumPy 1.x (the ``legacy`` extra).
"""
import builtins
import importlib.machinery
import io
import logging
import os
import re
import runpy
import sys
import traceback
import types

from engine.core.log import glog_flags, glog_level, read_glog_flags


class GlogEnvLevel(logging.Filter):
    """glog's FLAGS_minloglevel (GLOG_minloglevel as glog read it: once, when the program
    first imported ``caffe``) on the run command's log handler."""

    def __init__(self, default=logging.INFO):
        super().__init__()
        self.default = default

    def filter(self, record):
        return record.levelno >= max(self.default, glog_level(glog_flags().minloglevel))


class _CaffeOnImport:
    """``import caffe`` (or any ``caffe.*``) gives the engine's pycaffe: the first such
    import reads glog's flags from the environment, as loading pycaffe's library does,
    and installs the engine as ``caffe``; then it steps aside (``sys.modules`` has them).
    A meta path finder and loader by its methods (not importlib.abc's classes: importing
    that module costs a script's start-up ~0.01 s, importlib.resources and pathlib)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "caffe":
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        from engine.pycaffe import install_as_caffe
        read_glog_flags()
        self.remove()
        caffe = install_as_caffe()
        self._spec = caffe.__spec__
        return caffe

    def exec_module(self, module):
        module.__spec__ = self._spec        # the engine's own module keeps its own spec

    def install(self):
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self):
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def _install_on_import():
    """Install the engine as ``caffe`` at the program's first ``import caffe``; returns
    the finder (remove it when the program is done)."""
    finder = _CaffeOnImport()
    if "caffe" in sys.modules:            # already installed (or a real pycaffe): as it is
        from engine.pycaffe import install_as_caffe
        install_as_caffe()
    else:
        finder.install()
    return finder


def _script_traceback(exc, script):
    """The traceback from the script's own first frame on (as ``python SCRIPT`` shows it)."""
    tb = exc.__traceback__
    target = os.path.abspath(script)
    t = tb
    while t is not None and os.path.abspath(t.tb_frame.f_code.co_filename) != target:
        t = t.tb_next
    return "".join(traceback.format_exception(type(exc), exc, t or tb))


# ---------------------------------------------------------------------- NumPy 1.x names
# What NumPy 1.26 has and NumPy 2 removed (numpy's namespace; ndarray and scalar methods),
# as the NumPy 2.0 migration guide lists them.
NUMPY2_REMOVED = frozenset("""
    ALLOW_THREADS BUFSIZE CLIP DataSource ERR_CALL ERR_DEFAULT ERR_IGNORE ERR_LOG ERR_PRINT ERR_RAISE ERR_WARN
    FLOATING_POINT_SUPPORT FPE_DIVIDEBYZERO FPE_INVALID FPE_OVERFLOW FPE_UNDERFLOW Inf Infinity MAXDIMS
    MAY_SHARE_BOUNDS MAY_SHARE_EXACT NAN NINF NZERO NaN PINF PZERO RAISE RankWarning SHIFT_DIVIDEBYZERO
    SHIFT_INVALID SHIFT_OVERFLOW SHIFT_UNDERFLOW UFUNC_BUFSIZE_DEFAULT UFUNC_PYVALS_NAME WRAP add_docstring
    add_newdoc add_newdoc_ufunc alltrue asfarray byte_bounds cast cfloat chararray clongfloat compare_chararrays
    compat complex_ cumproduct deprecate deprecate_with_doc disp fastCopyAndTranspose find_common_type float_
    format_parser get_array_wrap geterrobj in1d infty issctype issubclass_ issubsctype longcomplex longfloat
    lookfor mat maximum_sctype msort nbytes obj2sctype product recfromcsv recfromtxt round_ safe_eval sctype2char
    sctypes set_numeric_ops set_string_function seterrobj singlecomplex sometrue source string_ tracemalloc_domain
    trapz unicode_ who int0 uint0 bool8 object0 str0 bytes0 void0
    """.split())
NUMPY2_REMOVED_METHODS = frozenset({"tostring", "itemset", "newbyteorder", "ptp"})
# Aliases of builtins NumPy 1.20 deprecated and 1.24 removed (NumPy 2 has bool and long again,
# as its own scalar types): no NumPy the engine supports (>= 1.24) has the others.
NUMPY124_REMOVED = {"float": "float", "int": "int", "object": "object", "complex": "complex", "str": "str",
                    "unicode": "str", "bool": "bool", "long": "int", "typeDict": "np.sctypeDict"}

_MODULE_ATTR = re.compile(r"module 'numpy' has no attribute '(\w+)'")
_EXPIRED_ATTR = re.compile(r"`np\.(\w+)` was removed in the NumPy 2\.0 release")
_IMPORT_NAME = re.compile(r"cannot import name '(\w+)' from 'numpy'")
_OBJECT_ATTR = re.compile(r"'numpy\.[\w.]+' object has no attribute '(\w+)'")
LEGACY_HOW = ("pip install -r requirements-legacy.txt (the 'legacy' extra: pip install 'caffe-inspector[legacy]') "
              "in a virtual environment of its own, then python -m engine run again")


def numpy_hint(exc, numpy_version=None):
    """One line for an exception naming a NumPy 1.x name this NumPy lacks, else None."""
    if numpy_version is None:
        import numpy
        numpy_version = numpy.__version__
    numpy2 = int(numpy_version.split(".")[0]) >= 2
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (AttributeError, ImportError)):
            hint = _numpy_hint_for(str(exc), numpy_version, numpy2)
            if hint:
                return hint
        exc = exc.__cause__ or exc.__context__
    return None


def _numpy_hint_for(text, version, numpy2):
    m = _OBJECT_ATTR.search(text)
    if m and numpy2 and m.group(1) in NUMPY2_REMOVED_METHODS:
        return ("python -m engine run: `ndarray.%s` is a NumPy 1.x name that NumPy 2 removed (this is NumPy %s); "
                "to run the script unchanged on NumPy 1.x: %s" % (m.group(1), version, LEGACY_HOW))
    m = _EXPIRED_ATTR.search(text) or _MODULE_ATTR.search(text) or _IMPORT_NAME.search(text)
    if not m:
        return None
    name = m.group(1)
    if name in NUMPY124_REMOVED and not (numpy2 and name in ("bool", "long")):
        if name in ("bool", "long"):
            return ("python -m engine run: `np.%s` is an alias NumPy 1.24 removed and NumPy 2 has again (this is "
                    "NumPy %s): run the script with NumPy 2 (requirements.txt), not the legacy extra" % (name, version))
        return ("python -m engine run: `np.%s` is an alias NumPy 1.20 deprecated and 1.24 removed (this is NumPy %s); "
                "no NumPy the engine runs on (>= 1.24) has it, the legacy extra included: use `%s` instead"
                % (name, version, NUMPY124_REMOVED[name]))
    if numpy2 and name in NUMPY2_REMOVED:
        return ("python -m engine run: `np.%s` is a NumPy 1.x name that NumPy 2 removed (this is NumPy %s); "
                "to run the script unchanged on NumPy 1.x: %s" % (name, version, LEGACY_HOW))
    return None


def _report(exc, where, err):
    err.write(_script_traceback(exc, where))
    hint = numpy_hint(exc)
    if hint:
        err.write(hint + "\n")


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
    err = err or sys.stderr
    script = os.fspath(script)
    if not os.path.isfile(script):
        err.write("python -m engine run: can't open file '%s': [Errno 2] No such file or directory\n" % script)
        return 2
    path = os.path.abspath(script)

    def start():
        sys.argv = [script] + list(argv)
        sys.path.insert(0, os.path.dirname(path))
        _run_as_main(path)
    return _guarded(start, lambda: script, err)


def _guarded(start, source, err):
    """Run ``start()`` as python runs a program: the exit code of its SystemExit (0 when it
    returns), 1 with the engine's report of an exception (``source()``: the file to name);
    ``caffe`` importable as the engine meanwhile, ``sys.argv`` and ``sys.path`` restored."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    finder = _install_on_import()
    try:
        start()
        return 0
    except SystemExit as e:
        return _exit_code(e, err)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        _report(e, source(), err)
        return 1
    finally:
        finder.remove()
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _module_problem(module):
    """Why ``python -m MODULE`` would not start (python's words), or None."""
    import importlib.util
    if not module:
        return "Argument expected for the -m option"
    try:
        spec = importlib.util.find_spec(module)
        if spec is None:
            return "No module named %s" % module
        if spec.submodule_search_locations is not None:
            main = importlib.util.find_spec(module + ".__main__")
            if main is None:
                return "No module named %s.__main__; '%s' is a package and cannot be directly executed" % (
                    module, module)
    except (ImportError, ValueError) as e:
        return "Error while finding module specification for %r (%s: %s)" % (module, type(e).__name__, e)
    return None


def run_module(module, argv=(), err=None):
    """``python -m MODULE ARGS...`` under the engine's ``caffe`` (runpy.run_module with
    ``alter_sys``: ``sys.argv[0]`` the module's file, as python sets it; the working
    directory first on ``sys.path``); returns the exit code."""
    err = err or sys.stderr

    def start():
        cwd = os.getcwd()
        if not sys.path or sys.path[0] not in ("", cwd):
            sys.path.insert(0, cwd)
        problem = _module_problem(module)
        if problem:
            err.write("python -m engine run: %s\n" % problem)
            raise SystemExit(1)
        sys.argv = [module] + list(argv)       # run_module sets argv[0] to the module's file
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    return _guarded(start, lambda: _module_file(module), err)


def _module_file(module):
    import importlib.util
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(module + ".__main__")
        return spec.origin if spec is not None and spec.origin else module
    except Exception:
        return module

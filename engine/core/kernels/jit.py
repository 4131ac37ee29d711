"""Compiled CPU loops (Numba) for kernels whose NumPy form needs big temporaries.

Numba is imported the first time a compiled loop is needed, not when a kernel module is:
importing it costs a process about 0.25 s, and loading each cached loop 0.01-0.05 s more
(:func:`fast_cache_load`), which a run that needs no such loop (a GPU run, a net without convolutions or pooling, a tool
that only builds the net) never pays.  ``jit(fn)`` gives a :class:`Lazy` stand-in, bound
in its module as the compiled function will be; the first call of any stand-in of a
module (or :func:`use` asking about one) imports Numba and replaces every stand-in of that
module with its Numba dispatcher, so that compiled loops calling each other find compiled
functions and calls after that go straight to Numba (a dispatcher compiles, or loads from
the on-disk cache, at its first call).  Without Numba (or with a Numba that does not load
beside this NumPy, or with ENGINE_NUMBA=0) they are replaced by None: ``use`` says False
and callers keep their vectorised NumPy twins, which give the same results (to rounding
where they add in another order).  ``AVAILABLE`` (read as a module attribute) says whether
Numba imports, importing it.  Compiled functions are cached on disk (``cache=True``):
only the first process compiles them (GoogLeNet's loops: about 5 s); later ones load them
(about 0.01 s each).

Loading from that cache skips what Numba does before it (:func:`fast_cache_load`): its
dispatcher refreshes the CPU target's typing and lowering registries first, importing
every implementation module Numba has (and SciPy's BLAS, for ``np.dot``): about 0.5 s of
a process's CPU, needed to compile but not to load machine code already compiled.  The
code loaded is the same, so are the numbers; a signature not in the cache is compiled
as before (Numba's compiler refreshes the registries itself).  ENGINE_NUMBA_FAST_LOAD=0
keeps Numba's own loading (to compare).
"""
import os
import sys
import threading

# ENGINE_NUMBA=0: run as if Numba were not installed (the NumPy twins throughout; the
# same numbers to rounding, slower forwards, no Numba start-up: benchmarks/README.md).
USE_NUMBA = os.environ.get("ENGINE_NUMBA", "1") != "0"
FAST_LOAD = os.environ.get("ENGINE_NUMBA_FAST_LOAD", "1") != "0"
_numba = None           # the numba module once imported; False when it cannot be (or is not to be)
_LOCK = threading.RLock()

# Set False to force the NumPy twins (tests compare both).
ENABLED = True


def numba_module():
    """Numba, imported on the first call; None when it cannot be imported (or with
    ENGINE_NUMBA=0)."""
    global _numba
    if _numba is None:
        with _LOCK:
            if _numba is None and not USE_NUMBA:
                _numba = False
            if _numba is None:
                try:  # pragma: no cover - depends on the environment
                    _numba = _import_numba()
                except Exception:  # ImportError, or a Numba that does not support this NumPy
                    _numba = False
    return _numba or None


def _import_numba():
    """``import numba`` as a block of long-lived objects (engine.core.gcpause says why)."""
    from engine.core.gcpause import long_lived_imports
    with long_lived_imports():
        import numba
    return numba


def available():
    """True when Numba imports (importing it)."""
    return numba_module() is not None


def __getattr__(name):
    if name == "AVAILABLE":
        return available()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def compile_now(fn, **options):
    """``fn`` compiled (nopython, cached, GIL released; ``options``: more of Numba's, e.g.
    ``error_model="numpy"``), or None without Numba."""
    nb = numba_module()
    return (fast_cache_load(nb.njit(cache=True, nogil=True, boundscheck=False, **options)(fn)) if nb is not None
            else None)


def fast_cache_load(dispatcher):
    """``dispatcher`` (a Numba dispatcher with ``cache=True``), made to load a cached
    overload without first refreshing the CPU target's registries (the module's doc);
    returned unchanged with ENGINE_NUMBA_FAST_LOAD=0 or where its cache object is not
    the one this was written for (Numba's ``Cache`` as in 0.68: ``load_overload`` =
    refresh + ``_load_overload`` under ``_guard_against_spurious_io_errors``).

    What the refresh does that loading needs is kept: Numba's runtime (NRT: its C
    helpers' symbols and atomic reference counts, which the loaded code calls) is set up
    (:func:`init_runtime`, its machine code from the cache folder too).
    A miss (nothing cached for the signature, a stale index) returns None as before, and
    the dispatcher compiles, refreshing the registries then; a load that fails otherwise is
    done again Numba's way (refresh, then load).

    Nor does the dispatcher's first call look for Numba's extension packages first (its
    ``_compilation_chain_init_hook``: every installed distribution's entry points read,
    ~0.015 s): the kernels' arguments are arrays and numbers, and the refresh before any
    compiling or Numba's own loading loads the extensions (``entrypoints.init_all``), as
    any other dispatcher's first call does."""
    cache = getattr(dispatcher, "_cache", None)
    load = getattr(cache, "_load_overload", None)
    guard = getattr(cache, "_guard_against_spurious_io_errors", None)
    if not FAST_LOAD or load is None or guard is None:
        return dispatcher
    numbas = cache.load_overload
    if hasattr(dispatcher, "_compilation_chain_init_hook"):
        dispatcher._compilation_chain_init_hook = _no_hook

    def load_overload(sig, target_context):
        try:
            init_runtime(target_context, getattr(cache, "_cache_path", None))
            with guard():
                return load(sig, target_context)
            return None     # (an I/O error the guard swallowed: compile)
        except Exception:   # a Numba whose loading needs its registries
            return numbas(sig, target_context)

    cache.load_overload = load_overload
    return dispatcher


def _no_hook():
    """A kernel dispatcher's compilation-chain hook: nothing (see :func:`fast_cache_load`)."""


# Numba versions whose runtime set-up init_runtime repeats (numba.core.runtime.nrt's
# _Runtime.initialize and nrtdynmod.compile_nrt_functions are the same in 0.61-0.68).
_NRT_VERSIONS = tuple("0.%d." % v for v in range(61, 69))
_NRT_LIBRARY = "nrt"


def init_runtime(target_context, cache_dir=None):
    """Numba's runtime (NRT) set up as ``nrt.rtsys.initialize(target_context)`` does, with
    its small LLVM module (atomic reference counts, NRT_incref/NRT_decref, which the loaded
    loops call) loaded as machine code from ``cache_dir`` (a kernel's Numba cache folder)
    instead of compiled: 0.03-0.04 s of a process's CPU to ~0.005 s.  The first process
    compiles it as Numba does and saves the machine code there, named by what Numba keys
    its own cache on (the codegen's magic tuple: LLVM target and CPU features) and the
    Numba and llvmlite versions.  Numba's own set-up runs instead without ``cache_dir``,
    with ENGINE_NUMBA_FAST_LOAD=0, on a Numba version this was not written for, or when
    anything here fails."""
    from numba.core.runtime import nrt
    rt = nrt.rtsys
    if rt._init:
        return
    import numba
    if not (FAST_LOAD and cache_dir and numba.__version__.startswith(_NRT_VERSIONS)):
        rt.initialize(target_context)
        return
    try:
        _init_runtime_cached(rt, target_context, cache_dir, numba.__version__)
    except Exception:   # a Numba whose runtime differs after all: its own set-up
        rt._init = False
        rt.initialize(target_context)


def _init_runtime_cached(rt, ctx, cache_dir, numba_version):
    import hashlib

    import llvmlite
    from llvmlite import binding as ll
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.runtime import _nrt_python, nrtdynmod
    with global_compiler_lock:
        if rt._init:
            return
        codegen = ctx.codegen()
        key = repr((codegen.magic_tuple(), numba_version, llvmlite.__version__))
        path = os.path.join(cache_dir, "engine-nrt-%s.nbo" % hashlib.sha256(key.encode()).hexdigest()[:20])
        # what _Runtime.initialize does before compiling: the C helpers' symbols
        if config.NRT_STATS:
            _nrt_python.memsys_enable_stats()
        for py_name, address in _nrt_python.c_helpers.items():
            ll.add_symbol(py_name if py_name.startswith("_") else "NRT_" + py_name, address)
        library = None
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except OSError:
            blob = None
        n = int.from_bytes(blob[:8], "little") if blob is not None and len(blob) > 8 else -1
        if 0 < n <= len(blob) - 8:
            try:
                library = codegen.unserialize_library((_NRT_LIBRARY, "object", (blob[8:8 + n], blob[8 + n:])))
            except Exception:   # a damaged file: compiled again and rewritten
                library = None
        if library is None:     # compiled as nrtdynmod.compile_nrt_functions does, its code kept
            ir_mod, library = nrtdynmod.create_nrt_module(ctx)
            library.enable_object_caching()
            library.add_ir_module(ir_mod)
            library.finalize()
            name, kind, (obj, bitcode) = library.serialize_using_object_code()
            if name == _NRT_LIBRARY and kind == "object":
                _write_atomically(path, len(obj).to_bytes(8, "little") + obj + bitcode)
        rt._library = library
        rt._init = True


def _write_atomically(path, data):
    """``data`` into ``path`` (a temporary file renamed over it); nothing when the folder
    cannot be written."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


class Lazy:
    """The compiled form of ``fn`` before it is made: see the module's doc.  Calling it
    compiles its module's loops and calls the compiled ``fn``."""

    __slots__ = ("fn", "compiled", "options")

    def __init__(self, fn):
        self.fn = fn
        self.compiled = None
        self.options = {}

    def __repr__(self):
        return "<compiled on first use: %s.%s>" % (self.fn.__module__, self.fn.__qualname__)

    def __call__(self, *args):
        fn = materialize(self)
        if fn is None:
            raise RuntimeError("Numba is not available to run %s" % self.fn.__qualname__)
        return fn(*args)


_prepare = {}      # module name -> functions run before its loops are compiled


def before_compiling(module_name, hook):
    """Run ``hook()`` before the first loop of ``module_name`` is compiled (it binds what
    the loops read as globals: another module's compiled functions, its constants)."""
    _prepare.setdefault(module_name, []).append(hook)


def materialize(kernel):
    """The compiled function for ``kernel`` (a :class:`Lazy`, or what replaced it), or None
    without Numba; the first call for a module makes the dispatcher of every stand-in in it
    and binds them in their place."""
    if not isinstance(kernel, Lazy):
        return kernel
    if kernel.compiled is None:
        with _LOCK:
            if kernel.compiled is None:
                _materialize_module(kernel.fn.__module__)
    return kernel.compiled or None


def _materialize_module(module_name):
    namespace = vars(sys.modules[module_name])
    nb = numba_module()
    if nb is not None:
        for hook in _prepare.pop(module_name, ()):
            hook()
    lazy = [(name, v) for name, v in namespace.items() if isinstance(v, Lazy) and v.fn.__module__ == module_name]
    for _, v in lazy:
        if v.compiled is None:      # (a stand-in bound under two names is compiled once)
            v.compiled = compile_now(v.fn, **v.options) if nb is not None else False
    for name, v in lazy:      # calls from now on go straight to Numba's dispatchers
        namespace[name] = v.compiled or None


def jit(fn):
    """``fn``'s compiled form, made on first use (a :class:`Lazy` until then)."""
    return Lazy(fn)


def jit_with(**options):
    """:func:`jit` with more of Numba's options (``error_model="numpy"``: a float division by
    zero gives inf / NaN as NumPy's does, not Python's ZeroDivisionError)."""
    def wrap(fn):
        lazy = Lazy(fn)
        lazy.options = dict(options)
        return lazy
    return wrap


def use(kernel, *arrays):
    """True when the compiled ``kernel`` exists (Numba imports: compiled on this first
    question) and every array is a C-contiguous host array."""
    if kernel is None or not ENABLED:
        return False
    for a in arrays:
        if type(a).__module__ != "numpy" or not a.flags.c_contiguous:
            return False
    return materialize(kernel) is not None


# ------------------------------------------------------------------ LLVM IR (Numba intrinsics)
# Kernels that need the host's vector instructions spelled out (engine.core.kernels.gemm's
# micro-kernels, engine.instruments.fast_stats' |x| lanes) build LLVM IR in a Numba
# intrinsic's codegen with these two helpers (llvmlite comes with Numba).

def declare(builder, name, ret, args):
    """The LLVM function (an intrinsic such as ``llvm.fma.v16f32``) ``name`` of the
    builder's module, declared once."""
    from llvmlite import ir
    mod = builder.module
    return mod.globals.get(name) or ir.Function(mod, ir.FunctionType(ret, list(args)), name=name)


def accumulate_loop(builder, count, inits, body, prefix):
    """IR of ``for k in range(count): accs = body(k, accs)``, accumulators in registers
    (phi nodes) starting at ``inits``; ``body(k, accs)`` emits the loop's body and returns
    the new accumulators.  Returns their values after the loop (``inits`` when count <= 0),
    with the builder placed after it."""
    from llvmlite import ir
    i64 = ir.IntType(64)
    entry = builder.block
    loop = builder.append_basic_block(prefix + ".loop")
    done = builder.append_basic_block(prefix + ".done")
    builder.cbranch(builder.icmp_signed(">", count, ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    k = builder.phi(i64)
    k.add_incoming(ir.Constant(i64, 0), entry)
    accs = []
    for v in inits:
        p = builder.phi(v.type)
        p.add_incoming(v, entry)
        accs.append(p)
    new = body(k, accs)
    end = builder.block
    k1 = builder.add(k, ir.Constant(i64, 1))
    k.add_incoming(k1, end)
    for p, n in zip(accs, new):
        p.add_incoming(n, end)
    builder.cbranch(builder.icmp_signed("<", k1, count), loop, done)
    builder.position_at_end(done)
    outs = []
    for v, n in zip(inits, new):
        p = builder.phi(v.type)
        p.add_incoming(v, entry)
        p.add_incoming(n, end)
        outs.append(p)
    return outs

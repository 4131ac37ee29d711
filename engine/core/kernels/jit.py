"""Compiled CPU loops (Numba) for kernels whose NumPy form needs big temporaries.

``AVAILABLE`` is False without Numba (or with a Numba that does not load beside this
NumPy); callers then keep their vectorised NumPy twins, which give the same results.
Compiled functions are cached on disk (``cache=True``): only the first process
compiles them.
"""
try:  # pragma: no cover - depends on the environment
    from numba import njit as _njit
    AVAILABLE = True
except Exception:  # ImportError, or a Numba that does not support this NumPy
    _njit = None
    AVAILABLE = False

# Set False to force the NumPy twins (tests compare both).
ENABLED = True


def jit(fn):
    """``fn`` compiled (nopython, cached, GIL released), or None without Numba."""
    return _njit(cache=True, nogil=True, boundscheck=False)(fn) if AVAILABLE else None


def use(kernel, *arrays):
    """True when the compiled ``kernel`` exists and every array is a C-contiguous host array."""
    if kernel is None or not ENABLED:
        return False
    for a in arrays:
        if type(a).__module__ != "numpy" or not a.flags.c_contiguous:
            return False
    return True


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

"""Pick OpenBLAS's AVX-512 kernels on CPUs that have AVX-512 but that OpenBLAS does not know.

NumPy's OpenBLAS (a DYNAMIC_ARCH build) chooses its kernels from the CPU model when it is
loaded. On CPUs it does not recognise (AMD Zen 4/5, and most virtual machines, which mask the
model) it falls back to its AVX2 "Haswell" kernels although the core runs AVX-512 FMAs: a
float32 GEMM of a convolution's shape runs at about half the speed it could (122 against
215 GFLOP/s on one Zen 5 core, ``benchmarks/run.py`` and docs/performance.md).

OpenBLAS reads the environment variable ``OPENBLAS_CORETYPE`` once, when the library is
loaded, to override that choice. This module sets it to ``SkylakeX`` (OpenBLAS's AVX-512
kernels) when every AVX-512 extension those kernels use is present, before NumPy is
imported. It changes nothing when:

- ``OPENBLAS_CORETYPE`` is already set (set it yourself to choose, e.g. ``Haswell`` to keep
  the AVX2 kernels);
- NumPy was imported before the engine (OpenBLAS is loaded already; nothing can change it);
- the CPU lacks one of the extensions, or /proc/cpuinfo cannot be read (not Linux).

Results agree to float32 rounding either way (the conformance cases pass with both).
"""
import os
import sys

#: the AVX-512 extensions OpenBLAS's SkylakeX kernels use
REQUIRED = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
CORETYPE = "SkylakeX"

#: why the core type was or was not set (shown by ``python -m engine selftest``)
decision = "not decided"


def _cpu_flags(path="/proc/cpuinfo"):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def choose(environ=None, modules=None, flags=None):
    """``(value or None, reason)``: the OPENBLAS_CORETYPE to set, and why (pure)."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if "OPENBLAS_CORETYPE" in environ:
        return None, "OPENBLAS_CORETYPE=%s set by the user" % environ["OPENBLAS_CORETYPE"]
    if "numpy" in modules:
        return None, "NumPy was imported before the engine: OpenBLAS keeps the kernels it chose"
    flags = _cpu_flags() if flags is None else flags
    missing = [f for f in REQUIRED if f not in flags]
    if missing:
        return None, "the CPU lacks %s: OpenBLAS keeps the kernels it chose" % ", ".join(missing)
    return CORETYPE, "AVX-512 CPU: OPENBLAS_CORETYPE=%s (OpenBLAS's AVX-512 kernels)" % CORETYPE


def apply():
    global decision
    value, decision = choose()
    if value is not None:
        os.environ["OPENBLAS_CORETYPE"] = value
    return decision


apply()

"""Compile every CUDA source the engine uses with NVRTC, without a GPU or a driver.

CuPy compiles a ``RawKernel`` with NVRTC on first use; a syntax or type error
in a kernel would only show on a GPU machine.  NVRTC itself needs no driver:
``cupy_backends.cuda.libs.nvrtc`` (from the ``cupy-cuda12x`` wheel, with the
NVRTC library of the ``nvidia-cuda-nvrtc-cu12`` wheel) compiles CUDA C++ to PTX
on any machine.  (CuPy's higher-level ``compile_using_nvrtc`` asks the driver for
the device's architecture, so it refuses without one.)

:func:`compile_all` compiles each registered source
(:func:`engine.core.kernels.cuda_sources`) for float and double and for every
architecture of :data:`engine.core.kernels.CUDA_ARCHS` (``-arch=compute_XX``), and
checks that the PTX defines the kernel's entry point under its own name (what
a CuPy raw kernel looks up by that name).  ``python -m engine.core.kernels.nvrtc_check``
prints one line per source and exits 1 on any failure.
"""
import re
import sys
import time
from dataclasses import dataclass, field
from typing import List

import numpy as np

from engine.core import kernels

DTYPES = (np.float32, np.float64)


class NvrtcMissing(RuntimeError):
    """NVRTC cannot be loaded (the GPU extra's wheels are not installed)."""


@dataclass
class CompileResult:
    name: str
    module: str
    dtype: str
    arch: int
    ok: bool
    log: str = ""
    ptx_bytes: int = 0


@dataclass
class Report:
    nvrtc_version: tuple
    results: List[CompileResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self):
        return [r for r in self.results if not r.ok]


def load_nvrtc():
    """The ``cupy_backends`` NVRTC bindings, or :class:`NvrtcMissing` saying what to install."""
    try:
        from cupy_backends.cuda.libs import nvrtc
        version = nvrtc.getVersion()
    except Exception as e:   # ImportError, or the NVRTC shared library not found
        raise NvrtcMissing("NVRTC is not available (%s: %s); install the GPU extra's wheels: "
                           "pip install -r requirements-gpu.txt (cupy-cuda12x, nvidia-cuda-nvrtc-cu12)"
                           % (type(e).__name__, e)) from e
    return nvrtc, tuple(version)


def _entry_defined(ptx, name):
    return re.search(r"\.entry\s+%s\s*\(" % re.escape(name), ptx) is not None


def compile_source(nvrtc, name, source, dtype, arch):
    """(ok, log, ptx size) of one compilation of ``source`` (T = ``dtype``) for ``arch``."""
    code = kernels.cuda_code(source, dtype)
    prog = nvrtc.createProgram(code, "%s.cu" % name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, ["-arch=compute_%d" % arch])
        except Exception as e:
            log = nvrtc.getProgramLog(prog)
            return False, "%s\n%s" % (e, log.strip()), 0
        ptx = nvrtc.getPTX(prog)
        if isinstance(ptx, bytes):
            ptx = ptx.decode("utf-8", "replace")
        if not _entry_defined(ptx, name):
            return False, "the PTX has no entry point %r (is the kernel extern \"C\" __global__ " \
                          "and named as registered?)" % name, len(ptx)
        return True, "", len(ptx)
    finally:
        nvrtc.destroyProgram(prog)


def compile_all(archs=None, dtypes=DTYPES, names=None):
    """A :class:`Report` of every registered source, dtype and architecture."""
    nvrtc, version = load_nvrtc()
    archs = tuple(archs or kernels.CUDA_ARCHS)
    report = Report(version)
    t0 = time.perf_counter()
    for name, (source, module) in sorted(kernels.cuda_sources().items()):
        if names and name not in names:
            continue
        for dtype in dtypes:
            for arch in archs:
                ok, log, size = compile_source(nvrtc, name, source, dtype, arch)
                report.results.append(CompileResult(name, module, np.dtype(dtype).name, arch, ok, log, size))
    report.seconds = time.perf_counter() - t0
    return report


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m engine.core.kernels.nvrtc_check",
                                 description="Compile every CUDA source of the engine with NVRTC (no GPU needed).")
    ap.add_argument("--arch", type=int, action="append", help="compute capability, e.g. 90 (default: %s)"
                    % ", ".join(str(a) for a in kernels.CUDA_ARCHS))
    ap.add_argument("names", nargs="*", help="kernel names (default: all)")
    args = ap.parse_args(argv)
    try:
        report = compile_all(archs=args.arch, names=set(args.names) or None)
    except NvrtcMissing as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    by_name = {}
    for r in report.results:
        by_name.setdefault((r.name, r.module), []).append(r)
    print("NVRTC %d.%d: %d CUDA sources x %d dtypes x architectures %s"
          % (report.nvrtc_version[0], report.nvrtc_version[1], len(by_name), len(DTYPES),
             ", ".join("sm_%d" % c for c in (args.arch or kernels.CUDA_ARCHS))))
    for (name, module), rs in by_name.items():
        bad = [r for r in rs if not r.ok]
        print("  %-18s %-32s %s" % (name, module, "ok" if not bad else "FAILED (%d of %d)" % (len(bad), len(rs))))
    for r in report.failures[:5]:
        print("\n%s (%s, %s, compute_%d):\n%s" % (r.name, r.module, r.dtype, r.arch, r.log))
    print("%d compilations, %d failed, %.1f s" % (len(report.results), len(report.failures), report.seconds))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())

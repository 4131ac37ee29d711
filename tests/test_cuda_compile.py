"""Every CUDA source the engine uses compiles with NVRTC for sm_70..sm_90 -- no GPU needed.

The NVRTC tests need the GPU extra's wheels (cupy-cuda12x, nvidia-cuda-nvrtc-cu12) but no
device or driver.  Without the wheels they skip, except where ``ENGINE_REQUIRE_NVRTC=1``
(CI sets it, after installing requirements-gpu.txt): there a missing NVRTC fails, so a
kernel that stops compiling can never pass CI unseen.
"""
import os
import re
from pathlib import Path

import numpy as np
import pytest

from engine.core import kernels
from engine.core.kernels import nvrtc_check

ROOT = Path(__file__).resolve().parents[1]
# Ways to build a CUDA kernel with CuPy; only engine/core/kernels/__init__.py may use them.
_BUILDERS = re.compile(r"\b(RawKernel|RawModule|ElementwiseKernel|ReductionKernel)\s*\(|\bfuse\s*\(")


@pytest.fixture(scope="module")
def nvrtc():
    try:
        return nvrtc_check.load_nvrtc()[0]
    except nvrtc_check.NvrtcMissing as e:
        if os.environ.get("ENGINE_REQUIRE_NVRTC") == "1":
            pytest.fail(str(e))
        pytest.skip(str(e))


def test_every_kernel_builder_goes_through_the_registry():
    offenders = []
    for path in (ROOT / "engine").rglob("*.py"):
        if path == ROOT / "engine" / "core" / "kernels" / "__init__.py":
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if _BUILDERS.search(line.split("#", 1)[0]):
                offenders.append("%s:%d: %s" % (path.relative_to(ROOT), no, line.strip()))
    assert not offenders, "CUDA kernels built outside engine.core.kernels.raw_kernel:\n" + "\n".join(offenders)


def test_the_registry_lists_the_engines_kernels():
    sources = kernels.cuda_sources()
    expected = {"im2col_batch", "col2im_batch", "lrn_fill_scale", "lrn_compute_diff", "max_pool_fwd",
                "max_pool_bwd", "ave_pool_fwd", "ave_pool_bwd", "sto_pool_train", "sto_pool_test",
                "sto_pool_bwd"}
    assert expected <= set(sources)
    for name, (source, module) in sources.items():
        assert module.startswith("engine."), (name, module)
        assert re.search(r'extern "C" __global__ void %s\(' % name, source), name


def test_raw_kernel_refuses_an_unregistered_source():
    with pytest.raises(ValueError, match="not registered"):
        kernels.raw_kernel("im2col_batch", "extern \"C\" __global__ void im2col_batch() {}", np.float32)
    with pytest.raises(ValueError, match="not registered"):
        kernels.raw_kernel("nowhere", "extern \"C\" __global__ void nowhere() {}", np.float32)


def test_registering_two_sources_under_one_name_is_an_error():
    src = kernels.cuda_sources()["im2col_batch"][0]
    with pytest.raises(ValueError, match="two different CUDA sources"):
        kernels.cuda_source("im2col_batch", src + "\n// changed")


def test_every_source_compiles_for_every_architecture(nvrtc):
    report = nvrtc_check.compile_all()
    names = {r.name for r in report.results}
    assert names == set(kernels.cuda_sources())
    assert {r.arch for r in report.results} == set(kernels.CUDA_ARCHS)
    assert {r.dtype for r in report.results} == {"float32", "float64"}
    msg = "\n\n".join("%s (%s, compute_%d):\n%s" % (r.name, r.dtype, r.arch, r.log) for r in report.failures)
    assert not report.failures, msg
    assert all(r.ptx_bytes > 0 for r in report.results)


def test_a_compile_error_is_reported_with_nvrtcs_log(nvrtc):
    broken = 'extern "C" __global__ void broken(const int n, T* x) { x[threadIdx.x] = undefined_name; }'
    ok, log, _ = nvrtc_check.compile_source(nvrtc, "broken", broken, np.float32, 90)
    assert not ok
    assert "undefined_name" in log and "error" in log


def test_a_kernel_without_c_linkage_is_reported(nvrtc):
    mangled = '__global__ void mangled(T* x) { x[threadIdx.x] = T(1); }'
    ok, log, _ = nvrtc_check.compile_source(nvrtc, "mangled", mangled, np.float64, 70)
    assert not ok and "no entry point 'mangled'" in log


def test_the_command_line_check_passes(nvrtc, capsys):
    assert nvrtc_check.main(["--arch", "80", "im2col_batch", "max_pool_fwd"]) == 0
    out = capsys.readouterr().out
    assert "4 compilations, 0 failed" in out and "im2col_batch" in out and "sm_80" in out

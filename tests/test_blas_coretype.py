"""engine._blas_kernels: OPENBLAS_CORETYPE=SkylakeX only on AVX-512 CPUs, only before NumPy
loads OpenBLAS, never over the user's own setting."""
import os
import subprocess
import sys

import pytest

from engine import _blas_kernels as bk

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AVX512 = set(bk.REQUIRED) | {"avx2", "fma"}


def test_avx512_cpu_gets_the_avx512_kernels():
    value, why = bk.choose(environ={}, modules={}, flags=AVX512)
    assert value == "SkylakeX" and "AVX-512" in why


def test_the_users_setting_wins():
    value, why = bk.choose(environ={"OPENBLAS_CORETYPE": "Haswell"}, modules={}, flags=AVX512)
    assert value is None and "Haswell" in why


def test_too_late_once_numpy_is_loaded():
    value, why = bk.choose(environ={}, modules={"numpy": object()}, flags=AVX512)
    assert value is None and "NumPy was imported" in why


def test_a_missing_extension_keeps_openblas_choice():
    value, why = bk.choose(environ={}, modules={}, flags=AVX512 - {"avx512bw"})
    assert value is None and "avx512bw" in why


def _architecture(env):
    code = ("import engine, threadpoolctl; "
            "print([i.get('architecture') for i in threadpoolctl.threadpool_info() "
            "if i['internal_api'] == 'openblas'][0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not set(bk.REQUIRED) <= bk._cpu_flags(), reason="this CPU has no AVX-512")
def test_openblas_loads_the_chosen_kernels():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env["PYTHONPATH"] = ROOT
    assert _architecture(env) == "SkylakeX"
    env["OPENBLAS_CORETYPE"] = "Haswell"
    assert _architecture(env) == "Haswell"

"""Numba's runtime (NRT) set up from saved machine code (engine.core.kernels.jit.init_runtime,
issue 24's start-up): the first process compiles its small LLVM module as Numba does and saves
the code; later ones load it instead of compiling; a damaged file is compiled again and
rewritten; compiled code that allocates and frees arrays (the runtime's reference counts) runs
the same on a runtime loaded that way.  And Numba's import with the cyclic collector paused
(jit._import_numba) leaves the collector as it was and dropped cycles collectable.  Each step
runs in a fresh interpreter; none times anything."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent("""
    import sys
    import numpy as np
    from engine.core.kernels import jit
    from numba.core.registry import cpu_target
    from numba.core.runtime import nrt, nrtdynmod
    compiled = []
    make = nrtdynmod.create_nrt_module
    nrtdynmod.create_nrt_module = lambda ctx: compiled.append(1) or make(ctx)
    jit.init_runtime(cpu_target.target_context, sys.argv[1])
    print("INIT", nrt.rtsys._init, len(compiled))
    if len(sys.argv) > 2:       # compiled code that makes, fills and frees arrays (NRT calls)
        import numba

        @numba.njit
        def cumulative(n):
            a = np.empty(n, np.float32)
            for i in range(n):
                a[i] = np.float32(i) / np.float32(3)
            b = a.copy()
            return b.sum(), b[n - 1]

        print("RUN", *cumulative(1000))
        print("REF", *cumulative.py_func(1000))
""")


def _run(cache_dir, *extra, fast="1"):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ENGINE_NUMBA_FAST_LOAD=fast)
    out = subprocess.run([sys.executable, "-c", PROBE, str(cache_dir), *extra], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines() if line.strip()}


def _nrt_files(cache_dir):
    return sorted(p for p in Path(cache_dir).iterdir() if p.name.startswith("engine-nrt-"))


@pytest.fixture
def numba_present():
    from engine.core.kernels import jit
    if not jit.AVAILABLE:
        pytest.skip("Numba is not installed")
    import numba
    if not numba.__version__.startswith(jit._NRT_VERSIONS):
        pytest.skip("init_runtime uses Numba's own set-up on Numba %s" % numba.__version__)


def test_runtime_compiled_once_then_loaded(tmp_path, numba_present):
    first = _run(tmp_path)
    assert first["INIT"] == ["True", "1"]           # compiled, as Numba does
    files = _nrt_files(tmp_path)
    assert len(files) == 1 and files[0].stat().st_size > 8
    second = _run(tmp_path, "run")
    assert second["INIT"] == ["True", "0"]          # loaded: nothing compiled
    assert second["RUN"] == second["REF"]           # arrays made and freed through it
    assert _nrt_files(tmp_path) == files


def test_damaged_runtime_file_is_compiled_again_and_rewritten(tmp_path, numba_present):
    _run(tmp_path)
    (path,) = _nrt_files(tmp_path)
    good = path.read_bytes()
    path.write_bytes((16).to_bytes(8, "little") + b"not machine code" + b"junk")
    damaged = _run(tmp_path, "run")
    assert damaged["INIT"] == ["True", "1"]
    assert damaged["RUN"] == damaged["REF"]
    assert path.read_bytes() == good                # the same code as the first process's
    assert _run(tmp_path)["INIT"] == ["True", "0"]


def test_fast_load_off_keeps_numbas_own_setup(tmp_path, numba_present):
    out = _run(tmp_path, fast="0")
    assert out["INIT"] == ["True", "1"]
    assert _nrt_files(tmp_path) == []               # nothing saved: Numba's initialize ran


GC_PROBE = textwrap.dedent("""
    import gc, sys, weakref
    from engine.core.kernels import jit
    if sys.argv[1] == "off":
        gc.disable()
    kept = []
    if sys.argv[1] == "frozen":         # a program that froze its objects (before forking)
        kept.append(object.__new__(type("Kept", (), {})))
        gc.freeze()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a                 # a cycle: freed only by the collector
    freed = []
    weakref.finalize(a, freed.append, "a")
    del a, b
    print("NUMBA", jit.numba_module() is not None, "numba" in sys.modules)
    print("GC", gc.isenabled(), gc.get_freeze_count() > 0, freed)
    gc.collect()
    print("COLLECTED", freed)
""")


@pytest.mark.parametrize("user", ["on", "off", "frozen"])
def test_numba_import_pauses_the_collector_and_keeps_garbage_collectable(user, numba_present):
    """jit's Numba import pauses the cyclic collector and moves the objects to the oldest
    generation untraversed: afterwards the collector is as the program left it, nothing
    stays frozen, and a cycle the program dropped before is still freed by a collection;
    objects the program froze itself stay frozen."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", GC_PROBE, user], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines() if line.strip()}
    assert lines["NUMBA"] == ["True", "True"]
    # nothing left frozen, but what the program froze itself stays so
    assert lines["GC"][:2] == [str(user != "off"), str(user == "frozen")]
    if user != "frozen":
        assert lines["COLLECTED"] == ["['a']"]


ENGINE_GC_PROBE = textwrap.dedent("""
    import gc, sys, weakref
    if sys.argv[1] == "off":
        gc.disable()
    kept = []
    if sys.argv[1] == "frozen":
        kept.append(object.__new__(type("Kept", (), {})))
        gc.freeze()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    freed = []
    weakref.finalize(a, freed.append, "a")
    del a, b
    import engine
    print("GC", gc.isenabled(), gc.get_freeze_count() > 0, "engine.core.net" in sys.modules)
    gc.collect()
    print("COLLECTED", freed)
""")


@pytest.mark.parametrize("user", ["on", "off", "frozen"])
def test_import_engine_pauses_the_collector_the_same_way(user):
    """``import engine`` pauses the collector over its imports as jit does over Numba's."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", ENGINE_GC_PROBE, user], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines() if line.strip()}
    assert lines["GC"] == [str(user != "off"), str(user == "frozen"), "True"]
    if user != "frozen":
        assert lines["COLLECTED"] == ["['a']"]

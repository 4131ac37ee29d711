"""Start-up stays lazy (issue 24): ``import engine`` (and ``import caffe`` under ``python -m
engine run``) imports none of the heavy optional packages, building a net imports only the
layer families its types need and neither Numba nor SciPy, and Numba is imported when a
compiled loop is first needed.  Each check runs in a fresh interpreter; none times anything."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.nets import lenet_deploy

ROOT = Path(__file__).resolve().parents[1]

HEAVY = ("numba", "llvmlite", "scipy", "dash", "plotly", "onnx", "onnxruntime", "torch", "cupy", "cv2", "h5py")

LENET = lenet_deploy(64)


def _run(*args):
    """stdout of ``python ARGS`` (a fresh interpreter, the checkout first on its path)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _loaded(stdout, tag):
    """The names on the line that starts with ``tag``."""
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] == tag:
            return set(words[1:])
    raise AssertionError("no %s line in %r" % (tag, stdout))


def _loaded_line(stdout, tag):
    """The words after ``tag`` on its line, in order."""
    return stdout.split(tag + " ", 1)[1].split("\n", 1)[0].split()


def _state(stdout):
    return _loaded_line(stdout, "STATE")


def _numbas_and_fast_loads(code, tmp_path, ext):
    """The stdouts of the script ``code`` (argv[1]: where it saves its arrays, numba.EXT then
    fast.EXT in ``tmp_path``; a line "CACHE hits misses" of its compiled loops) run first with
    Numba's own loading of cached loops (ENGINE_NUMBA_FAST_LOAD=0: it also fills the cache),
    then with the engine's; skips where the second run did not load from Numba's cache."""
    def run(fast, name):
        env = dict(os.environ, PYTHONPATH=str(ROOT), ENGINE_NUMBA_FAST_LOAD=fast)
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    numbas = run("0", "numba." + ext)
    fast = run("1", "fast." + ext)
    hits, misses = (int(v) for v in _loaded_line(fast, "CACHE"))
    if misses or not hits:
        import pytest
        pytest.skip("Numba's on-disk cache is not used here (%d hits, %d misses)" % (hits, misses))
    return numbas, fast


PROBE = """
def loaded(tag):
    import sys
    print(tag, *sorted(m for m in %r if m in sys.modules))
""" % (HEAVY,)


def test_import_engine_imports_no_heavy_package():
    out = _run("-c", PROBE + "import engine\nloaded('ENGINE')\n")
    assert _loaded(out, "ENGINE") == set()


def test_building_a_lenet_needs_neither_numba_nor_scipy_and_forward_loads_numba_only():
    code = PROBE + textwrap.dedent("""
        import sys
        import numpy as np
        import engine
        from google.protobuf import text_format
        p = text_format.Parse(%r, engine.caffe_pb2.NetParameter())
        net = engine.Net.from_param(p, phase=engine.TEST)
        loaded("BUILT")
        print("FAMILIES", *sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("engine.core.layers.")))
        net.blobs["data"].data[...] = np.random.RandomState(0).rand(*net.blobs["data"].shape)
        net.forward()
        loaded("FORWARD")
    """) % LENET
    out = _run("-c", code)
    assert _loaded(out, "BUILT") == set()
    # Input (data), Convolution/Pooling (vision), InnerProduct/Softmax (common), ReLU (neuron)
    assert _loaded(out, "FAMILIES") == {"base", "registry", "data", "vision", "common", "neuron"}
    from engine.core.kernels import jit
    if jit.AVAILABLE:       # the compiled convolution and pooling loops: Numba, nothing else heavy
        assert {"numba", "llvmlite"} <= _loaded(out, "FORWARD") <= {"numba", "llvmlite", "scipy"}


def test_kernel_modules_and_the_recorder_import_without_numba():
    out = _run("-c", PROBE + textwrap.dedent("""
        from engine.core.kernels import conv2d, depthwise, gemm, im2col, lrn, pooling, blas, jit
        from engine.core import kernels
        kernels.cuda_sources()
        from engine.instruments import debug, fast_stats
        loaded("KERNELS")
    """))
    assert _loaded(out, "KERNELS") == set()


def test_python_m_engine_run_imports_caffe_without_heavy_packages(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE + "import caffe\nloaded('CAFFE')\nprint('NET', caffe.Net is not None)\n")
    out = _run("-m", "engine", "run", str(script))
    assert _loaded(out, "CAFFE") == set()
    assert "NET True" in out


def test_without_numba_the_numpy_twins_serve():
    """A Numba that cannot be imported (here: blocked) leaves every stand-in None and the
    callers on their NumPy twins; the forward runs and agrees with the compiled one."""
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import engine
        from google.protobuf import text_format
        def lenet_output():
            engine.set_random_seed(3)
            p = text_format.Parse(%r, engine.caffe_pb2.NetParameter())
            net = engine.Net.from_param(p, phase=engine.TEST)
            net.blobs["data"].data[...] = np.random.RandomState(0).rand(*net.blobs["data"].shape)
            return net.forward()["prob"].copy()
        if sys.argv[1] == "blocked":
            sys.modules["numba"] = None            # import numba raises ImportError
        out = lenet_output()
        from engine.core.kernels import conv2d, gemm, jit, pooling
        from engine.instruments import fast_stats
        print("STATE", jit.AVAILABLE, gemm.AVAILABLE, conv2d.compiled(), fast_stats.AVAILABLE,
              pooling._max_fwd_jit is None, "numba" in sys.modules and sys.modules["numba"] is not None)
        np.save(sys.argv[2], out)
    """) % LENET
    from engine.core.kernels import jit
    if not jit.AVAILABLE:
        import pytest
        pytest.skip("Numba is not installed: nothing to block")
    import tempfile

    import numpy as np
    with tempfile.TemporaryDirectory() as d:
        blocked = _run("-c", code, "blocked", os.path.join(d, "blocked.npy"))
        normal = _run("-c", code, "normal", os.path.join(d, "normal.npy"))
        # jit, gemm, conv2d, fast_stats available; pooling's stand-in replaced by None; numba imported
        assert _state(blocked) == ["False", "False", "False", "False", "True", "False"]
        assert _state(normal) == ["True", "True", "True", "True", "False", "True"]
        np.testing.assert_allclose(np.load(os.path.join(d, "blocked.npy")), np.load(os.path.join(d, "normal.npy")),
                                   rtol=1e-4, atol=1e-6)


def test_engine_numba_0_never_imports_numba():
    """ENGINE_NUMBA=0: as if Numba were not installed (NumPy twins, NumPy random draws)."""
    code = PROBE + textwrap.dedent("""
        import numpy as np
        import engine
        from google.protobuf import text_format
        from engine.core import rng
        from engine.core.kernels import gemm, jit
        p = text_format.Parse(%r, engine.caffe_pb2.NetParameter())
        net = engine.Net.from_param(p, phase=engine.TEST)
        net.blobs["data"].data[...] = np.random.RandomState(0).rand(*net.blobs["data"].shape)
        net.forward()
        print("STATE", jit.AVAILABLE, gemm.AVAILABLE, rng.compiled(1 << 30))
        loaded("FORWARD")
    """) % LENET
    env = dict(os.environ, PYTHONPATH=str(ROOT), ENGINE_NUMBA="0")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert _state(out.stdout) == ["False", "False", "None"]
    assert _loaded(out.stdout, "FORWARD") == set()


def test_cached_kernels_load_without_numbas_registries(tmp_path):
    """Compiled loops found in Numba's on-disk cache are loaded without refreshing Numba's
    CPU target (jit.fast_cache_load): none of its implementation registries (numba.np.*,
    which import SciPy's BLAS) get imported, and the forward's output is bit for bit the
    one Numba's own loading gives (ENGINE_NUMBA_FAST_LOAD=0, run first: it also fills the
    cache)."""
    from engine.core.kernels import jit
    if not jit.AVAILABLE:
        import pytest
        pytest.skip("Numba is not installed")
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import engine
        from google.protobuf import text_format
        engine.set_random_seed(3)
        p = text_format.Parse(%r, engine.caffe_pb2.NetParameter())
        net = engine.Net.from_param(p, phase=engine.TEST)
        net.blobs["data"].data[...] = np.random.RandomState(0).rand(*net.blobs["data"].shape)
        np.save(sys.argv[1], net.forward()["prob"])
        from numba.core.dispatcher import Dispatcher
        from engine.core.kernels import conv2d, gemm, pooling
        ds = [v for m in (conv2d, gemm, pooling) for v in vars(m).values() if isinstance(v, Dispatcher)]
        print("CACHE", sum(sum(d.stats.cache_hits.values()) for d in ds),
              sum(sum(d.stats.cache_misses.values()) for d in ds))
        print("STATE", *[m in sys.modules for m in ("numba.np.arraymath", "numba.np.linalg", "scipy.linalg")])
    """) % LENET

    numbas, fast = _numbas_and_fast_loads(code, tmp_path, "npy")
    assert _state(numbas) == ["True", "True", "True"]       # Numba's loading: every registry, SciPy's BLAS
    assert _state(fast) == ["False", "False", "False"]
    import numpy as np
    a, b = np.load(tmp_path / "numba.npy"), np.load(tmp_path / "fast.npy")
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


# An implicit-GEMM convolution (3x3 over 12x12) into AVE pooling, forward and backward.
AVE_NET = """
name: "ConvAve"
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 12 dim: 12 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "xavier" }
                            bias_filler { type: "constant" value: 0.1 } } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
"""


def test_cached_loops_load_without_numbas_array_implementation(tmp_path):
    """The cached loops of a forward and backward through an implicit-GEMM convolution and
    AVE pooling load without scanning for Numba's extensions or importing Numba's array
    implementation (numba.np.arrayobj,
    with its string and hashing modules: ~0.06 s of a process's start each time a loop
    that made an array inside itself was loaded): the loops take their scratch from the
    caller.  The outputs and gradients are those of Numba's own loading, byte for byte."""
    from engine.core.kernels import jit
    if not jit.AVAILABLE:
        import pytest
        pytest.skip("Numba is not installed")
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import engine
        from google.protobuf import text_format
        engine.set_random_seed(5)
        p = text_format.Parse(%r, engine.caffe_pb2.NetParameter())
        net = engine.Net.from_param(p, phase=engine.TEST)
        net.blobs["data"].data[...] = np.random.RandomState(0).rand(*net.blobs["data"].shape)
        out = net.forward()["pool"].copy()
        net.blobs["pool"].diff[...] = np.random.RandomState(1).rand(*net.blobs["pool"].shape)
        net.backward()
        np.savez(sys.argv[1], out=out, dx=net.blobs["data"].diff, dw=net.params["conv"][0].diff)
        from numba.core.dispatcher import Dispatcher
        from engine.core.kernels import conv2d, pooling
        ds = [v for m in (conv2d, pooling) for v in vars(m).values() if isinstance(v, Dispatcher)]
        print("CACHE", sum(sum(d.stats.cache_hits.values()) for d in ds),
              sum(sum(d.stats.cache_misses.values()) for d in ds))
        print("STATE", *[m in sys.modules for m in ("numba.np.arrayobj", "numba.np.arraymath")])
        from numba.core import entrypoints
        print("EXTENSIONS", entrypoints._already_initialized)
    """) % AVE_NET

    numbas, fast = _numbas_and_fast_loads(code, tmp_path, "npz")
    assert _state(numbas) == ["True", "True"]
    assert _state(fast) == ["False", "False"]
    # Numba's extension entry points: looked for by its own loading, not by the cached loads
    assert _loaded_line(numbas, "EXTENSIONS") == ["True"] and _loaded_line(fast, "EXTENSIONS") == ["False"]
    import numpy as np
    a, b = np.load(tmp_path / "numba.npz"), np.load(tmp_path / "fast.npz")
    for key in ("out", "dx", "dw"):
        assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), key
    assert np.abs(a["dw"]).sum() > 0 and np.abs(a["dx"]).sum() > 0


def test_fast_cache_load_falls_back_to_numbas_loading(monkeypatch):
    """jit.fast_cache_load: a cached overload is loaded without the refresh; a load that
    raises is done again by Numba's own ``load_overload``; a cache without the expected
    methods (or ENGINE_NUMBA_FAST_LOAD=0) leaves the dispatcher as it was."""
    import contextlib

    from engine.core.kernels import jit
    if not jit.AVAILABLE:
        import pytest
        pytest.skip("Numba is not installed")
    from numba.core.registry import cpu_target

    class Cache:
        def __init__(self, fail):
            self.fail, self.calls = fail, []

        @contextlib.contextmanager
        def _guard_against_spurious_io_errors(self):
            yield

        def _load_overload(self, sig, ctx):
            self.calls.append("fast")
            if self.fail:
                raise KeyError("needs the registries")
            return "loaded " + sig

        def load_overload(self, sig, ctx):
            self.calls.append("numba's")
            return "numba's " + sig

    class Dispatcher:
        def __init__(self, cache):
            self._cache = cache

    ctx = cpu_target.target_context
    ok, bad = Cache(False), Cache(True)
    assert jit.fast_cache_load(Dispatcher(ok))._cache.load_overload("(f4,)", ctx) == "loaded (f4,)"
    assert ok.calls == ["fast"]
    assert jit.fast_cache_load(Dispatcher(bad))._cache.load_overload("(f4,)", ctx) == "numba's (f4,)"
    assert bad.calls == ["fast", "numba's"]
    plain = Dispatcher(object())
    assert jit.fast_cache_load(plain) is plain and not hasattr(plain._cache, "load_overload")
    monkeypatch.setattr(jit, "FAST_LOAD", False)
    off = Cache(False)
    jit.fast_cache_load(Dispatcher(off))
    assert "load_overload" not in vars(off)

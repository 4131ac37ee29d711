"""``engine.install_as_caffe()`` and ``python -m engine run``: pycaffe programs, unchanged,
on the engine.  Each test runs in a fresh interpreter (installing the alias changes
``sys.modules`` and how caffe_pb2 messages print, for the whole process)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _python(code, tmp_path, **env):
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          env=_env(**env), timeout=300)


def _run(args, tmp_path, **env):
    return subprocess.run([sys.executable, "-m", "engine", "run"] + [str(a) for a in args], capture_output=True,
                          text=True, cwd=tmp_path, env=_env(**env), timeout=300)


def test_install_registers_the_engines_own_modules(tmp_path):
    r = _python("""
        import sys
        import engine
        caffe = engine.install_as_caffe()
        import caffe as c2
        import caffe.proto.caffe_pb2
        import caffe.draw, caffe.coord_map, caffe.net_spec, caffe.io, caffe.classifier, caffe.detector
        import caffe.pycaffe, caffe._caffe
        from caffe import layers as L, params as P
        from caffe.proto import caffe_pb2
        import engine.pycaffe, engine.proto.caffe_pb2, engine.pycaffe.io, engine.pycaffe.draw
        assert c2 is caffe is engine.pycaffe
        assert caffe.proto.caffe_pb2 is caffe_pb2 is engine.proto.caffe_pb2 is sys.modules["caffe.proto.caffe_pb2"]
        assert caffe.io is engine.pycaffe.io is sys.modules["caffe.io"]
        assert caffe.draw is engine.pycaffe.draw and caffe.coord_map is sys.modules["engine.pycaffe.coord_map"]
        assert caffe.pycaffe is sys.modules["engine.pycaffe.pycaffe"]
        assert L is engine.pycaffe.net_spec.layers and P is engine.pycaffe.net_spec.params
        assert caffe.Net is engine.Net and caffe.Layer is engine.Layer
        # one class per message: a message from either name is the same type
        assert isinstance(engine.proto.caffe_pb2.NetParameter(), caffe.proto.caffe_pb2.NetParameter)
        n = caffe.NetSpec()
        n.data = L.Input(shape=dict(dim=[1, 2]))
        assert isinstance(n.to_proto(), engine.proto.caffe_pb2.NetParameter)
        assert P.Pooling.MAX == caffe_pb2.PoolingParameter.MAX
        assert engine.install_as_caffe() is caffe          # idempotent
        print("ok")
        """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_install_refuses_when_another_caffe_is_imported(tmp_path):
    (tmp_path / "caffe").mkdir()
    (tmp_path / "caffe" / "__init__.py").write_text("REAL = True\n")
    r = _python("""
        import sys
        sys.path.insert(0, ".")
        import caffe
        import engine
        try:
            engine.install_as_caffe()
        except ImportError as e:
            print("refused:", e)
        assert sys.modules["caffe"].REAL
        """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "refused: install_as_caffe: a different module 'caffe'" in r.stdout


def test_no_top_level_caffe_package_is_shipped():
    assert not (ROOT / "caffe").exists()
    tomllib = pytest.importorskip("tomllib")
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert not any(p == "caffe" or p.startswith("caffe.") for p in packages)


@pytest.mark.shared
@pytest.mark.parametrize("program, outputs", [
    ("caffenet_netspec.py", {"train.prototxt": "caffenet_train.prototxt", "test.prototxt": "caffenet_test.prototxt"}),
    ("fcn8s_netspec.py", {"train.prototxt": "fcn8s_train.prototxt", "val.prototxt": "fcn8s_val.prototxt"}),
])
def test_netspec_programs_write_what_real_pycaffe_wrote(program, outputs, tmp_path, shared_dir):
    """A pycaffe program run unchanged through ``python -m engine run`` writes, byte for
    byte, the text real pycaffe wrote for the same NetSpec calls (../shared/golden/pycaffe)."""
    r = _run([PROGRAMS / program, tmp_path], tmp_path)
    assert r.returncode == 0, r.stderr
    for written, golden in outputs.items():
        assert (tmp_path / written).read_bytes() == (shared_dir / "golden" / "pycaffe" / golden).read_bytes(), written


def test_run_gives_the_script_argv_main_path_and_exit_code(tmp_path):
    (tmp_path / "helper_mod.py").write_text("VALUE = 7\n")
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import sys
        import caffe
        import helper_mod                       # the script's folder is on sys.path
        print(__name__, sys.argv[1:], helper_mod.VALUE, caffe.__version__, caffe.TRAIN, caffe.TEST)
        sys.exit(int(sys.argv[1]))
        """))
    r = _run(["-q", script, "3", "--flag", "-x"], tmp_path)
    assert r.returncode == 3, r.stderr
    assert r.stdout.strip() == "__main__ ['3', '--flag', '-x'] 7 1.0.0 0 1"
    assert _run([script, "0"], tmp_path).returncode == 0


def test_run_reports_a_scripts_exception_with_its_traceback(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import caffe\n\ndef go():\n    raise ValueError('bad input 42')\n\ngo()\n")
    r = _run([script], tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("Traceback (most recent call last):\n  File \"%s\", line 6" % script)
    assert "ValueError: bad input 42" in r.stderr
    assert "runpy" not in r.stderr


def test_run_missing_script(tmp_path):
    r = _run([tmp_path / "nope.py"], tmp_path)
    assert r.returncode == 2
    assert "can't open file" in r.stderr


def test_run_logs_like_pycaffe_and_glog_minloglevel_quiets_it(tmp_path):
    model = tmp_path / "m.prototxt"
    model.write_text('layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 } } }\n')
    script = tmp_path / "load.py"
    script.write_text("import caffe\nnet = caffe.Net('m.prototxt', caffe.TEST)\nprint(list(net.blobs))\n")
    r = _run([script], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['d']"
    assert "] Initializing net from parameters: " in r.stderr and r.stderr.startswith("I")
    quiet = _run([script], tmp_path, GLOG_minloglevel="2")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_a_classic_pycaffe_script_runs_unchanged(tmp_path):
    """Train, test, save and reload through the names a pycaffe script uses."""
    (tmp_path / "net.prototxt").write_text(textwrap.dedent("""
        name: "tiny"
        layer { name: "data" type: "DummyData" top: "data" top: "label"
          dummy_data_param { shape { dim: 8 dim: 4 } shape { dim: 8 }
            data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
        layer { name: "ip" type: "InnerProduct" bottom: "data" top: "out"
          inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "out" bottom: "label" top: "loss" }
        """))
    (tmp_path / "solver.prototxt").write_text('net: "net.prototxt" base_lr: 0.1 lr_policy: "fixed" max_iter: 5 '
                                              'display: 0 snapshot_prefix: "snap" snapshot_after_train: false\n')
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import caffe
        caffe.set_mode_cpu()
        caffe.set_random_seed(1)
        solver = caffe.get_solver('solver.prototxt')
        solver.step(5)
        net = solver.net
        out = net.forward(end='ip')
        assert list(out) == ['out'], out
        assert solver.iter == 5 and isinstance(solver, caffe.SGDSolver)
        net.save('w.caffemodel')
        net.save_hdf5('w.h5')
        test = caffe.Net('net.prototxt', caffe.TEST, weights='w.caffemodel')
        h5 = caffe.Net('net.prototxt', caffe.TEST)
        h5.load_hdf5('w.h5')
        for name in net.params:
            for a, b, c in zip(net.params[name], test.params[name], h5.params[name]):
                assert (a.data == b.data).all() and (a.data == c.data).all()
        print('loss %.3f' % float(net.blobs['loss'].data))
        """))
    r = _run(["-q", script], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("loss ")

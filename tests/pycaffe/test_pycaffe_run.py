"""``python -m engine run``: ``-m MODULE`` as ``python -m`` runs it, glog's flags read once
at ``import caffe``, and the line after a traceback naming a NumPy 1.x name."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.tools.run_script import NUMPY2_REMOVED, numpy_hint

ROOT = Path(__file__).resolve().parents[2]
NUMPY2 = int(np.__version__.split(".")[0]) >= 2
NET = 'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 2 } } }\n' \
      'layer { name: "ip" type: "InnerProduct" bottom: "d" top: "y" inner_product_param { num_output: 2 } }\n'


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLOG_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _python(args, cwd, **env):
    return subprocess.run([sys.executable] + [str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                          env=_env(**env), timeout=300)


def _engine_run(args, cwd, **env):
    return _python(["-m", "engine", "run"] + list(args), cwd, **env)


# ------------------------------------------------------------------ run -m MODULE
WHERE = """
import os, sys
print(__name__, sys.argv, sys.path[0] == os.getcwd(), __file__ == os.path.abspath(__file__))
try:
    import caffe
    print("caffe", caffe.__name__, caffe.Net.__module__)
except ImportError:
    print("no caffe")
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0)
"""


def test_run_m_runs_a_module_as_python_m_does(tmp_path):
    (tmp_path / "where.py").write_text(WHERE)
    plain = _python(["-m", "where", "3", "-q", "--flag"], tmp_path)
    engine_run = _engine_run(["-m", "where", "3", "-q", "--flag"], tmp_path)
    assert (plain.returncode, engine_run.returncode) == (3, 3), engine_run.stderr
    first = "__main__ ['%s', '3', '-q', '--flag'] True True" % (tmp_path / "where.py")
    assert plain.stdout.splitlines() == [first, "no caffe"]
    assert engine_run.stdout.splitlines() == [first, "caffe engine.pycaffe engine.core.net"]
    # the engine's own flags before -m are the engine's; everything after it is the module's
    quiet = _engine_run(["-q", "-m", "where", "-m", "x"], tmp_path)
    assert quiet.returncode == 0 and quiet.stdout.splitlines()[0].endswith("'-m', 'x'] True True")


def test_run_m_runs_a_packages_main_and_says_what_python_says(tmp_path):
    pkg = tmp_path / "tool"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nimport caffe\nprint('main', sys.argv[1:], "
                                     "type(caffe._caffe.IntVec()).__name__)\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    r = _engine_run(["-m", "tool", "a"], tmp_path)
    assert (r.returncode, r.stdout) == (0, "main ['a'] IntVec\n"), r.stderr
    missing = _engine_run(["-m", "no_such_module"], tmp_path)
    assert missing.returncode == 1 and "No module named no_such_module" in missing.stderr
    package = _engine_run(["-m", "lib"], tmp_path)
    assert package.returncode == 1
    assert "No module named lib.__main__; 'lib' is a package and cannot be directly executed" in package.stderr
    bare = _engine_run(["-m"], tmp_path)
    assert bare.returncode == 2 and "Argument expected for the -m option" in bare.stderr


def test_run_m_reports_a_modules_exception_from_its_own_frame(tmp_path):
    (tmp_path / "fails.py").write_text("import caffe\n\n\ndef go():\n    raise ValueError('bad 7')\n\n\ngo()\n")
    r = _engine_run(["-m", "fails"], tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith('Traceback (most recent call last):\n  File "%s", line 8' % (tmp_path / "fails.py"))
    assert r.stderr.rstrip().endswith("ValueError: bad 7")


PYCAFFE_STYLE_TESTS = '''
import os
import tempfile
import unittest

import numpy as np

import caffe


class TestLayerTypeList(unittest.TestCase):
    def test_standard_types(self):
        for type_name in ['Data', 'Convolution', 'InnerProduct']:
            self.assertIn(type_name, caffe.layer_type_list(),
                          '%s not in layer_type_list()' % type_name)


def simple_net_file(num_output):
    f = tempfile.NamedTemporaryFile(mode='w+', delete=False)
    f.write("""name: 'testnet' force_backward: true
    layer { type: 'DummyData' name: 'data' top: 'data' top: 'label'
      dummy_data_param { num: 5 channels: 2 height: 3 width: 4
        num: 5 channels: 1 height: 1 width: 1
        data_filler { type: 'gaussian' std: 1 }
        data_filler { type: 'constant' } } }
    layer { type: 'InnerProduct' name: 'ip' bottom: 'data' top: 'ip_blob'
      inner_product_param { num_output: """ + str(num_output) + """
        weight_filler { type: 'gaussian' std: 2.5 }
        bias_filler { type: 'constant' value: -3 } } }
    layer { type: 'SoftmaxWithLoss' name: 'loss' bottom: 'ip_blob' bottom: 'label'
      top: 'loss' }""")
    f.close()
    return f.name


class TestNet(unittest.TestCase):
    def setUp(self):
        self.num_output = 13
        net_file = simple_net_file(self.num_output)
        self.net = caffe.Net(net_file, caffe.TRAIN)
        self.net.blobs['label'].data[...] = np.random.randint(self.num_output,
                                                              size=self.net.blobs['label'].data.shape)
        os.remove(net_file)

    def test_memory(self):
        params = sum(map(list, self.net.params.values()), [])
        blobs = self.net.blobs.values()
        del self.net
        total = 0
        for p in params:
            total += p.data.sum() + p.diff.sum()
        for bl in blobs:
            total += bl.data.sum() + bl.diff.sum()

    def test_layer_dict(self):
        layer_dict = self.net.layer_dict
        self.assertEqual(list(layer_dict.keys()), list(self.net._layer_names))
        for i, name in enumerate(self.net._layer_names):
            self.assertEqual(layer_dict[name].type, self.net.layers[i].type)

    def test_forward_backward(self):
        self.net.forward()
        self.net.backward()

    def test_inputs_outputs(self):
        self.assertEqual(self.net.inputs, [])
        self.assertEqual(self.net.outputs, ['loss'])

    def test_top_bottom_names(self):
        self.assertEqual(self.net.top_names,
                         {'data': ['data', 'label'], 'ip': ['ip_blob'], 'loss': ['loss']})
        self.assertEqual(self.net.bottom_names,
                         {'data': [], 'ip': ['data'], 'loss': ['ip_blob', 'label']})

    def test_save_and_read(self):
        f = tempfile.NamedTemporaryFile(mode='w+', delete=False)
        f.close()
        self.net.save(f.name)
        net_file = simple_net_file(self.num_output)
        net2 = caffe.Net(net_file, f.name, caffe.TRAIN)
        os.remove(net_file)
        os.remove(f.name)
        for name in self.net.params:
            for i in range(len(self.net.params[name])):
                self.assertEqual(abs(self.net.params[name][i].data
                                     - net2.params[name][i].data).sum(), 0)
'''


def test_a_pycaffe_style_test_suite_runs_under_run_m_pytest(tmp_path):
    """Caffe's python/caffe/test suite runs as ``python -m engine run -m pytest``: here a
    suite written in its manner (unittest classes importing caffe)."""
    suite = tmp_path / "test"
    suite.mkdir()
    (suite / "test_pycaffe_manner.py").write_text(PYCAFFE_STYLE_TESTS)
    r = _engine_run(["-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)], tmp_path, GLOG_minloglevel="2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("7 passed")
    (suite / "test_fails.py").write_text("import caffe\n\n\ndef test_version():\n    assert caffe.__version__ == '0'\n")
    failed = _engine_run(["-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)], tmp_path,
                         GLOG_minloglevel="2")
    assert failed.returncode == 1 and "1 failed, 7 passed" in failed.stdout


# ------------------------------------------------------------------ glog's flags, read once
def test_glog_flags_are_read_once_when_the_script_imports_caffe(tmp_path):
    (tmp_path / "m.prototxt").write_text(NET)
    script = textwrap.dedent("""
        import os
        os.environ['GLOG_minloglevel'] = '%s'
        import caffe
        os.environ['GLOG_minloglevel'] = '%s'
        caffe.Net('m.prototxt', caffe.TEST)
        print('built')
        """)
    (tmp_path / "quiet_then_loud.py").write_text(script % ("2", "0"))
    (tmp_path / "loud_then_quiet.py").write_text(script % ("0", "2"))
    for run in (["quiet_then_loud.py"], ["-m", "quiet_then_loud"]):
        r = _engine_run(run, tmp_path)
        assert (r.returncode, r.stdout, r.stderr) == (0, "built\n", ""), run
    loud = _engine_run(["loud_then_quiet.py"], tmp_path)
    assert loud.returncode == 0 and "] Network initialization done." in loud.stderr
    assert loud.stderr.startswith("I")


def test_init_log_uses_the_flags_glog_read_at_import(tmp_path):
    """``caffe.init_log()`` takes FLAGS_minloglevel and FLAGS_logtostderr as glog read them
    from the environment at start-up, not as the script changed it after; in a plain
    ``python`` process too (the engine's first import reads them)."""
    (tmp_path / "m.prototxt").write_text(NET)
    (tmp_path / "init.py").write_text(textwrap.dedent("""
        import os
        import engine
        engine.install_as_caffe()
        import caffe
        os.environ['GLOG_minloglevel'] = '2'
        os.environ['GLOG_logtostderr'] = '0'
        caffe.init_log()
        caffe.Net('m.prototxt', caffe.TEST)
        caffe.init_log(2, True)         # init_log(level, stderr) sets the flags themselves
        caffe.Net('m.prototxt', caffe.TEST)
        print('built')
        """))
    r = _python(["init.py"], tmp_path, GLOG_minloglevel="0", GLOG_logtostderr="1")
    assert r.returncode == 0 and r.stdout == "built\n", r.stderr
    assert r.stderr.count("] Network initialization done.") == 1
    quiet = _python(["init.py"], tmp_path, GLOG_minloglevel="1", GLOG_logtostderr="1")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_glog_flags_parse_as_glog_parses_them():
    from engine.core.log import GlogFlags
    f = GlogFlags({"GLOG_minloglevel": "2x", "GLOG_logtostderr": "", "GLOG_v": " -1", "GLOG_stderrthreshold": "x"})
    assert (f.minloglevel, f.logtostderr, f.v, f.stderrthreshold, f.alsologtostderr) == (2, True, -1, 0, False)
    f = GlogFlags({"GLOG_logtostderr": "false", "GLOG_alsologtostderr": "yes"})
    assert (f.minloglevel, f.logtostderr, f.alsologtostderr, f.stderrthreshold) == (0, False, True, 2)


# ------------------------------------------------------------------ NumPy 1.x names
@pytest.mark.skipif(not NUMPY2, reason="NumPy 1.x has these names")
@pytest.mark.parametrize("call, name", [("np.zeros(3).tostring()", "`ndarray.tostring`"),
                                        ("np.product([2, 3])", "`np.product`"),
                                        ("np.NaN", "`np.NaN`")])
def test_a_script_dying_on_a_name_numpy2_removed_gets_one_line_more(tmp_path, call, name):
    (tmp_path / "old.py").write_text("import numpy as np\nimport caffe\n\nprint('start')\nx = %s\n" % call)
    r = _engine_run(["old.py"], tmp_path, GLOG_minloglevel="2")
    assert r.returncode == 1 and r.stdout == "start\n"
    lines = r.stderr.rstrip("\n").splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[-2].startswith("AttributeError: ")
    assert lines[-1].startswith("python -m engine run: %s is a NumPy 1.x name that NumPy 2 removed" % name)
    assert "requirements-legacy.txt" in lines[-1] and "[legacy]" in lines[-1]


@pytest.mark.skipif(NUMPY2, reason="the legacy extra's NumPy 1.x runs these")
def test_on_numpy_1x_a_legacy_script_runs_unchanged(tmp_path):
    """With the legacy extra (NumPy < 2), what NumPy 2 removed is there: the script runs."""
    (tmp_path / "m.prototxt").write_text(NET)
    (tmp_path / "legacy.py").write_text(textwrap.dedent("""
        import numpy as np
        import caffe
        net = caffe.Net('m.prototxt', caffe.TEST)
        w = net.params['ip'][0].data
        print(w.tostring() == w.tobytes(), np.product(w.shape), np.alltrue(np.isfinite(w)), np.NaN != np.NaN)
        print(type(net.params['ip']) is caffe._caffe.BlobVec, np.__version__ < '2')
        """))
    r = _engine_run(["legacy.py"], tmp_path, GLOG_minloglevel="2")
    assert (r.returncode, r.stdout) == (0, "True 4 True True\nTrue True\n"), r.stderr
    (tmp_path / "newer.py").write_text("import numpy as np\n\nx = np.bool(1)\n")
    newer = _engine_run(["newer.py"], tmp_path)
    assert newer.returncode == 1
    assert "`np.bool` is an alias NumPy 1.24 removed and NumPy 2 has again" in newer.stderr.splitlines()[-1]


def test_an_alias_numpy_1_24_removed_is_named_with_what_to_use(tmp_path):
    (tmp_path / "older.py").write_text("import numpy as np\n\nx = np.float(3)\n")
    r = _engine_run(["older.py"], tmp_path)
    assert r.returncode == 1
    last = r.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("python -m engine run: `np.float` is an alias NumPy 1.20 deprecated and 1.24 removed")
    assert last.endswith("use `float` instead")


def test_other_attribute_errors_get_no_line(tmp_path):
    (tmp_path / "typo.py").write_text("import numpy as np\n\nx = np.zeros(2).tostrin()\n")
    r = _engine_run(["typo.py"], tmp_path)
    assert r.returncode == 1 and "python -m engine run" not in r.stderr
    assert r.stderr.rstrip("\n").splitlines()[-1].startswith(
        "AttributeError: 'numpy.ndarray' object has no attribute 'tostrin'")


def test_numpy_hint_knows_which_version_lacks_the_name():
    product = AttributeError("module 'numpy' has no attribute 'product'")
    assert "legacy" in numpy_hint(product, "2.0.0") and numpy_hint(product, "1.26.4") is None
    expired = AttributeError("`np.asfarray` was removed in the NumPy 2.0 release. Use `np.asarray` instead.")
    assert "`np.asfarray`" in numpy_hint(expired, "2.4.6")
    method = AttributeError("'numpy.float32' object has no attribute 'itemset'")
    assert "`ndarray.itemset`" in numpy_hint(method, "2.1.0") and numpy_hint(method, "1.26.0") is None
    imported = ImportError("cannot import name 'cumproduct' from 'numpy' (/x/numpy/__init__.py)")
    assert "`np.cumproduct`" in numpy_hint(imported, "2.0.0")
    on_1x = AttributeError("module 'numpy' has no attribute 'bool'.\n`np.bool` was a deprecated alias")
    assert "NumPy 2 has again" in numpy_hint(on_1x, "1.26.4")
    assert numpy_hint(AttributeError("module 'numpy' has no attribute 'frobnicate'"), "2.0.0") is None
    try:
        try:
            raise AttributeError("module 'numpy' has no attribute 'sometrue'")
        except AttributeError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert "`np.sometrue`" in numpy_hint(outer, "2.0.0")
    assert {"product", "cumproduct", "alltrue", "sometrue", "asfarray", "NaN", "float_"} <= NUMPY2_REMOVED

"""pycaffe semantics that real programs depend on, found running them through the engine
(docs/pycaffe.md, "Acceptance"): a Python layer's own attribute names, its NumPy error
settings, forward_backward_all over inputs alone, one ``net.params`` dict, two nets on
one LMDB, ``set_mode_gpu`` without a GPU, a script naming its net."""
import logging
import sys
import textwrap

import lmdb
import numpy as np
import pytest

import engine
from engine.core import backend
from engine.proto import caffe_pb2
from engine.pycaffe import io as caffe_io

# A Python layer keeping state under names the engine's Layer also has (pycaffe's Layer
# has only blobs, type, setup, reshape, param_str and phase, so scripts use any others).
STATEFUL = '''
import numpy as np
import caffe


class Doubler(caffe.Layer):
    def setup(self, bottom, top):
        self.name = "my doubler"          # py-faster-rcnn style bookkeeping
        self.loss = 0.0
        self._loss = []
        self.dtype = np.float64
        self.xp = np
        self.on_gpu = False
        self.count = 0

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        self.count += 1
        self.loss = float(bottom[0].data.sum())
        top[0].data[...] = 2 * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = 2 * top[0].diff


class HalfSquare(caffe.Layer):
    """0.5 * sum(x**2), keeping its value in self.loss."""
    def setup(self, bottom, top):
        self.loss = None

    def reshape(self, bottom, top):
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.loss = 0.5 * np.sum(bottom[0].data ** 2)
        top[0].data[...] = self.loss

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = bottom[0].data * top[0].diff


class Divide(caffe.Layer):
    """x / y: under np.errstate(divide='raise') a zero in y raises, as in pycaffe."""
    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data / bottom[1].data

    def backward(self, top, propagate_down, bottom):
        pass
'''

STATEFUL_NET = """
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "double" type: "Python" bottom: "data" top: "twice"
  python_param { module: "%(mod)s" layer: "Doubler" } }
layer { name: "loss" type: "Python" bottom: "twice" top: "loss" loss_weight: 1
  python_param { module: "%(mod)s" layer: "HalfSquare" } }
"""


@pytest.fixture
def caffe_alias():
    """``import caffe`` inside Python layer modules: the engine's pycaffe."""
    saved = {k: v for k, v in sys.modules.items() if k == "caffe" or k.startswith("caffe.")}
    engine.install_as_caffe()
    yield
    for k in [k for k in sys.modules if k == "caffe" or k.startswith("caffe.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def _stateful_net(tmp_path, mod):
    (tmp_path / (mod + ".py")).write_text(STATEFUL)
    path = tmp_path / "net.prototxt"
    path.write_text(STATEFUL_NET % {"mod": mod})
    return engine.Net(str(path), engine.TRAIN)


def test_a_python_layer_keeps_state_under_any_name(tmp_path, caffe_alias):
    net = _stateful_net(tmp_path, "stateful_names")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = net.forward(data=x)
    np.testing.assert_allclose(out["loss"], [0.5 * np.sum((2 * x) ** 2)])
    net.backward()
    np.testing.assert_allclose(net.blobs["data"].diff, 4 * x)      # d/dx 0.5*|2x|^2
    double, loss = net.layers[1], net.layers[2]
    assert (double.name, double.count, double.loss, double.dtype) == ("my doubler", 1, 15.0, np.float64)
    assert loss.loss == pytest.approx(0.5 * np.sum((2 * x) ** 2))
    assert net.blob_loss_weights["loss"] == 1.0 and net._layer_names[1] == "double"
    saved = tmp_path / "w.caffemodel"
    net.save(str(saved))
    written = caffe_pb2.NetParameter.FromString(saved.read_bytes())
    assert [lp.name for lp in written.layer] == ["data", "double", "loss"]


def test_a_python_layers_numpy_runs_under_the_callers_error_settings(tmp_path, caffe_alias):
    (tmp_path / "divide_mod.py").write_text(STATEFUL)
    path = tmp_path / "div.prototxt"
    path.write_text("""
        layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 } } }
        layer { name: "y" type: "Input" top: "y" input_param { shape { dim: 2 } } }
        layer { name: "div" type: "Python" bottom: "x" bottom: "y" top: "q"
          python_param { module: "divide_mod" layer: "Divide" } }
        """)
    net = engine.Net(str(path), engine.TEST)
    x, y = np.ones(2, np.float32), np.array([2, 0], np.float32)
    with np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError) as info:
            net.forward(x=x, y=y)
    assert "div" in " ".join(getattr(info.value, "__notes__", []))
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(net.forward(x=x, y=y)["q"], [0.5, np.inf])


LINEAR = """
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "out"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
"""


@pytest.fixture
def linear(tmp_path):
    path = tmp_path / "linear.prototxt"
    path.write_text(LINEAR)
    engine.set_random_seed(5)
    return engine.Net(str(path), engine.TEST)


def test_forward_backward_all_over_inputs_alone_runs_every_batch(linear):
    """pycaffe pairs input and diff batches with izip_longest: with inputs only, every
    batch runs forward and backward (the last one padded), not just the first."""
    w = linear.params["ip"][0].data.copy()
    x = np.random.default_rng(1).standard_normal((10, 3))
    outs, diffs = linear.forward_backward_all(data=x)
    np.testing.assert_allclose(outs["out"], x @ w.T, rtol=1e-5, atol=1e-6)
    assert diffs["data"].shape == (10, 3)
    g = np.random.default_rng(2).standard_normal((10, 2))
    outs, diffs = linear.forward_backward_all(out=g)          # diffs alone: the net's data
    np.testing.assert_allclose(diffs["data"], g @ w, rtol=1e-5, atol=1e-6)
    outs, diffs = linear.forward_backward_all(data=x, out=g)
    np.testing.assert_allclose(diffs["data"], g @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs["out"], x @ w.T, rtol=1e-5, atol=1e-6)


def test_params_is_one_dict_of_the_layers_blob_lists(linear):
    params = linear.params
    assert linear.params is params
    assert params["ip"] is linear.layers[1].blobs
    assert linear.blobs is linear.blobs


def test_a_script_naming_its_net_keeps_the_saved_name(linear, tmp_path):
    """py-faster-rcnn's test script sets ``net.name``; Caffe's Net keeps its own name."""
    linear.name = "vgg16_faster_rcnn_iter_70000"
    linear.save(str(tmp_path / "w.caffemodel"))
    assert caffe_pb2.NetParameter.FromString((tmp_path / "w.caffemodel").read_bytes()).name == ""
    assert linear.name == "vgg16_faster_rcnn_iter_70000"


def _mnist_like_lmdb(path, n=24):
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(n):
            img = np.full((1, 4, 4), i, np.uint8)
            txn.put(b"%08d" % i, caffe_io.array_to_datum(img, i % 3).SerializeToString())
    env.close()


DATA_NET = """
layer { name: "data" type: "Data" top: "data" top: "label"
  data_param { source: "%s" batch_size: 4 backend: LMDB } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def test_two_solvers_and_a_net_read_one_lmdb(tmp_path):
    """01-learning-lenet makes a second solver on the same LMDB; nets on one source
    (train, test, a second solver) each read it from the start."""
    _mnist_like_lmdb(tmp_path / "db")
    (tmp_path / "net.prototxt").write_text(DATA_NET % (tmp_path / "db"))
    (tmp_path / "solver.prototxt").write_text(
        'train_net: "%s" test_net: "%s" test_iter: 1 test_interval: 1000 base_lr: 0.01 '
        'lr_policy: "fixed" snapshot_after_train: false display: 0\n'
        % (tmp_path / "net.prototxt", tmp_path / "net.prototxt"))
    first = engine.get_solver(str(tmp_path / "solver.prototxt"))
    first.step(2)
    second = engine.get_solver(str(tmp_path / "solver.prototxt"))
    net = engine.Net(str(tmp_path / "net.prototxt"), engine.TEST)
    for n in (second.net, second.test_nets[0], net):
        n.forward()
        assert n.blobs["data"].data[:, 0, 0, 0].tolist() == [0, 1, 2, 3]
    first.step(1)
    assert first.net.blobs["data"].data[:, 0, 0, 0].tolist() == [8, 9, 10, 11]
    del first, second, net          # the last reader closes the environment


@pytest.mark.skipif(backend.gpu_available(), reason="a usable GPU is present")
def test_set_mode_gpu_without_a_gpu_warns_and_computes_on_the_cpu(linear, caplog):
    """A CPU-only Caffe accepts set_mode_gpu() too; the engine keeps computing, on the CPU."""
    try:
        with caplog.at_level(logging.WARNING, logger="engine"):
            engine.pycaffe.set_mode_gpu()
            assert engine.set_mode_gpu is engine.pycaffe.set_mode_gpu
        assert backend.mode() == backend.CPU
        assert any("running on the CPU instead" in r.getMessage() for r in caplog.records)
        assert linear.forward(data=np.ones((4, 3)))["out"].shape == (4, 2)
    finally:
        backend.set_mode_cpu()


def test_run_gives_main_an_absolute_file_like_python(tmp_path):
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "where.py").write_text(textwrap.dedent("""
        import os, sys
        print(__file__ == os.path.abspath(__file__), sys.argv[0])
        """))
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "GLOG_minloglevel": "2"}
    r = subprocess.run([sys.executable, "-m", "engine", "run", "where.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "where.py"]


def test_init_log_takes_over_the_run_commands_logging(tmp_path):
    """Under ``python -m engine run`` Caffe's INFO lines reach stderr, as before glog is
    initialised; ``caffe.init_log()`` sends them to glog's files (here: nowhere) and keeps
    ERROR and above on stderr, ``init_log(0, True)`` keeps them all on stderr."""
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "m.prototxt").write_text('layer { name: "d" type: "Input" top: "d" '
                                         'input_param { shape { dim: 1 } } }\n')
    (tmp_path / "logs.py").write_text(textwrap.dedent("""
        import sys
        import caffe
        if sys.argv[1] == "init":
            caffe.init_log()
        elif sys.argv[1] == "stderr":
            caffe.init_log(0, True)
        caffe.Net('m.prototxt', caffe.TEST)
        """))
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}

    def stderr(mode):
        r = subprocess.run([sys.executable, "-m", "engine", "run", "logs.py", mode], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stderr
    assert "] Network initialization done." in stderr("none")
    assert stderr("init") == ""
    assert "] Network initialization done." in stderr("stderr")


def test_net_takes_pycaffes_arguments_by_position(linear, tmp_path):
    """_caffe.cpp names them network_file, phase, level, stages, weights: positional or
    by keyword; (file, weights, phase) is the legacy form."""
    model = str(tmp_path / "linear.prototxt")
    weights = str(tmp_path / "w.caffemodel")
    linear.save(weights)
    by_position = engine.Net(model, engine.TEST, 0, None, weights)
    by_keyword = engine.Net(network_file=model, phase=engine.TEST, weights=weights)
    legacy = engine.Net(model, weights, engine.TEST)
    for net in (by_position, by_keyword, legacy):
        assert (net.params["ip"][0].data == linear.params["ip"][0].data).all()
    staged = engine.Net(model, engine.TRAIN, 3, ["deploy"])
    assert (staged.param.state.phase, staged.param.state.level, list(staged.param.state.stage)) == (0, 3, ["deploy"])
    with pytest.raises(TypeError):
        engine.Net(model, engine.TEST, 0, None, weights, "extra")


def test_a_scripts_own_lmdb_environment_and_a_data_layer_coexist(tmp_path):
    """A script that writes (or counts) its LMDB with py-lmdb and leaves the environment
    open, then builds a net on it; and one that opens it again while a net reads it."""
    _mnist_like_lmdb(tmp_path / "db", n=8)
    own = lmdb.open(str(tmp_path / "db"), map_size=1 << 24)
    assert own.stat()["entries"] == 8
    (tmp_path / "net.prototxt").write_text(DATA_NET % (tmp_path / "db"))
    net = engine.Net(str(tmp_path / "net.prototxt"), engine.TRAIN)
    net.forward()
    assert net.blobs["data"].data[:, 0, 0, 0].tolist() == [0, 1, 2, 3]
    own.close()
    again = lmdb.open(str(tmp_path / "db"), readonly=True)
    with again.begin() as txn:
        datum = caffe_pb2.Datum.FromString(txn.get(b"%08d" % 5))
    assert caffe_io.datum_to_array(datum)[0, 0, 0] == 5
    net.forward()
    assert net.blobs["data"].data[:, 0, 0, 0].tolist() == [4, 5, 6, 7]
    again.close()


def test_a_script_quiets_caffe_by_setting_glog_minloglevel_before_importing_it(tmp_path):
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "m.prototxt").write_text('layer { name: "d" type: "Input" top: "d" '
                                         'input_param { shape { dim: 1 } } }\n')
    (tmp_path / "quiet.py").write_text(textwrap.dedent("""
        import os
        os.environ['GLOG_minloglevel'] = '2'
        import caffe
        caffe.Net('m.prototxt', caffe.TEST)
        print('built')
        """))
    r = subprocess.run([sys.executable, "-m", "engine", "run", "quiet.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert (r.returncode, r.stdout, r.stderr) == (0, "built\n", "")


def test_instruments_read_loss_weights_past_a_python_layers_own_loss(tmp_path, caffe_alias):
    """The debugger's records, reports and the inspector's graph read Caffe's loss weights,
    not a Python layer's own ``self.loss`` value (a float, or None before forward)."""
    from engine.instruments import report
    from engine.instruments.debug import Recorder
    from inspector.views import model

    net = _stateful_net(tmp_path, "stateful_instruments")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    net.blobs["data"].data[...] = x
    rec = Recorder(net)
    net.Forward()
    net.Backward()
    by_layer = {r.layer: r for r in rec.steps[0].layers}
    assert by_layer["double"].loss is None                       # its self.loss (15.0) is no weight
    assert by_layer["loss"].loss == pytest.approx(0.5 * np.sum((2 * x) ** 2))
    doc = report.build_report(net, recorder=rec)
    weights = {la["name"]: la["loss_weights"] for la in doc["layers"]}
    assert weights["double"] == [0.0] and weights["loss"] == [1.0]
    graph = model.build_graph(net)
    by_name = {layer.name: layer for layer in graph.layers}
    assert by_name["double"].loss_weights == (0.0,) and by_name["loss"].loss_weights == (1.0,)

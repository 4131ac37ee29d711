"""pycaffe's module-level names (caffe/__init__.py and _caffe.cpp): every one is present,
in ``engine.pycaffe`` (what ``import caffe`` gives) and in ``engine``, with Caffe's
semantics: Timer, init_log/log, solver count and rank, NCCL without NCCL,
layer_type_list, __version__, the solvers' ``lr``."""
import logging
import re
import time

import pytest

import engine
import engine.pycaffe as caffe
from engine.core import backend
from engine.core.errors import CaffeError, LayerError

# python/caffe/__init__.py of BVLC Caffe 1.0, name for name
PYCAFFE_NAMES = """Net SGDSolver NesterovSolver AdaGradSolver RMSPropSolver AdaDeltaSolver AdamSolver NCCL Timer
init_log log set_mode_cpu set_mode_gpu set_device Layer get_solver layer_type_list set_random_seed solver_count
set_solver_count solver_rank set_solver_rank set_multiprocess has_nccl __version__ TRAIN TEST Classifier Detector
io layers params NetSpec to_proto""".split()


@pytest.mark.parametrize("name", PYCAFFE_NAMES)
def test_every_public_name_is_there(name):
    assert getattr(caffe, name) is not None
    assert getattr(engine, name) is getattr(caffe, name) or name == "__version__"


def test_submodules_and_constants():
    import engine.pycaffe._caffe
    import engine.pycaffe.coord_map
    import engine.pycaffe.draw
    import engine.pycaffe.pycaffe
    assert caffe.proto.caffe_pb2 is engine.caffe_pb2
    assert (caffe.TRAIN, caffe.TEST) == (0, 1) == (engine.TRAIN, engine.TEST)
    assert caffe.__version__ == "1.0.0"
    assert caffe.pycaffe.Net is caffe.Net is engine.Net
    assert engine.pycaffe._caffe.Layer is caffe.Layer
    assert caffe.Classifier.__mro__[1] is engine.Net and caffe.Detector.__mro__[1] is engine.Net


def test_layer_type_list_is_caffes_registry_sorted():
    types = caffe.layer_type_list()
    for name in ("Data", "Convolution", "InnerProduct", "Python"):
        assert name in types
    assert types == sorted(types) and len(types) == 61


# ---------------------------------------------------------------------- Timer
def test_timer_reads_whole_milliseconds_on_the_cpu(monkeypatch):
    now = [5_000_000_000]                  # the clock, in ns, moved by hand: no real time is measured
    monkeypatch.setattr(time, "perf_counter_ns", lambda: now[0])
    t = caffe.Timer()
    t.start()
    now[0] += 12_999_999                   # 12.999999 ms: boost's total_milliseconds() truncates
    ms = t.ms                              # reading stops a running timer
    assert ms == 12.0 and isinstance(ms, float)
    now[0] += 5_000_000
    assert t.ms == ms                      # stopped: the reading holds
    t.start()
    now[0] += 3_000_000
    t.stop()
    assert t.ms == 3.0


def test_timer_never_started_reads_zero_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="engine"):
        assert caffe.Timer().ms == 0
    assert "Timer has never been run before reading time." in caplog.text


# ---------------------------------------------------------------------- logging
def test_init_log_and_log_write_glog_lines_to_stderr(capfd):
    lg = logging.getLogger("engine")
    saved = (lg.level, lg.propagate, list(lg.handlers))
    try:
        caffe.init_log(0, True)
        caffe.log("hello from a script")
        lg.getChild("core.net").warning("a warning")
        err = capfd.readouterr().err
        assert re.search(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ _caffe\.py:\d+\] hello from a script$", err, re.M)
        assert re.search(r"^W\d{4} .*\] a warning$", err, re.M)
        caffe.init_log(1)                  # log files in glog: only ERROR and above on stderr
        caffe.log("not shown")
        lg.getChild("core.net").error("shown")
        err = capfd.readouterr().err
        assert "not shown" not in err and "] shown" in err
        with pytest.raises(ValueError):
            caffe.init_log(7)
    finally:
        for h in list(lg.handlers):
            if h not in saved[2]:
                lg.removeHandler(h)
        lg.setLevel(saved[0])
        lg.propagate = saved[1]


# ---------------------------------------------------------------------- multi-GPU globals
def test_solver_count_rank_and_multiprocess(tmp_path):
    assert (caffe.solver_count(), caffe.solver_rank()) == (1, 0)
    path = tmp_path / "py.prototxt"
    (tmp_path / "pymod_count.py").write_text(
        "import engine\nclass L(engine.Layer):\n    def reshape(self, b, t): t[0].reshape(*b[0].shape)\n"
        "    def forward(self, b, t): t[0].data[...] = b[0].data\n")
    path.write_text('layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 } } }\n'
                    'layer { name: "p" type: "Python" bottom: "d" top: "p" '
                    'python_param { module: "pymod_count" layer: "L" } }\n')
    try:
        caffe.set_solver_count(2)
        caffe.set_solver_rank(1)
        assert (caffe.solver_count(), caffe.solver_rank(), backend.root_solver()) == (2, 1, False)
        with pytest.raises(LayerError, match="PythonLayer does not support CLI Multi-GPU, use train.py"):
            caffe.Net(str(path), caffe.TRAIN)
        caffe.Net(str(path), caffe.TEST)                     # only training is refused
        caffe.set_multiprocess(True)                         # train.py's processes: allowed
        caffe.Net(str(path), caffe.TRAIN)
    finally:
        caffe.set_solver_count(1)
        caffe.set_solver_rank(0)
        caffe.set_multiprocess(False)


# ---------------------------------------------------------------------- NCCL
def test_nccl_is_caffe_built_without_nccl():
    assert caffe.has_nccl() is False
    nccl = caffe.NCCL(None, b"uid")                          # constructing works, as in such a build
    assert not hasattr(caffe.NCCL, "new_uid") and not hasattr(nccl, "bcast")
    with pytest.raises(AttributeError, match="rebuild with USE_NCCL") as e:
        caffe.NCCL.new_uid()
    assert isinstance(e.value, CaffeError)
    with pytest.raises(CaffeError, match="NCCL used as a callback"):
        nccl(0)


# ---------------------------------------------------------------------- solvers
def test_get_solver_and_lr(tmp_path):
    (tmp_path / "n.prototxt").write_text(
        'layer { name: "d" type: "DummyData" top: "d" dummy_data_param { shape { dim: 2 dim: 3 } } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "d" top: "ip" inner_product_param { num_output: 1 } }\n'
        'layer { name: "l" type: "Reduction" bottom: "ip" top: "l" loss_weight: 1 }\n')
    (tmp_path / "s.prototxt").write_text('net: "%s" base_lr: 0.5 lr_policy: "step" gamma: 0.1 stepsize: 2 '
                                         'display: 0 max_iter: 4\n' % (tmp_path / "n.prototxt"))
    solver = caffe.get_solver(str(tmp_path / "s.prototxt"))
    assert isinstance(solver, caffe.SGDSolver) and solver.lr == pytest.approx(0.5)
    solver.step(2)
    assert solver.lr == pytest.approx(0.05) and solver.iter == 2
    assert caffe.AdamSolver(str(tmp_path / "s.prototxt")).lr == pytest.approx(0.5)

"""benchmarks/bench_train.py's pure parts: the solver it times (the tutorial's, changed only
where a timed CPU run needs it), the per-round ratios, and its answer without a Caffe.  No
Caffe is run and nothing is timed."""
import pytest

from benchmarks import bench_train
from engine.core.io import parse_prototxt
from engine.proto import caffe_pb2

SOLVER = """# The train/test net protocol buffer definition
net: "examples/mnist/lenet_train_test.prototxt"
test_iter: 100
test_interval: 500
base_lr: 0.01
max_iter: 10000
snapshot: 5000
solver_mode: GPU
"""


def test_the_timed_solver_is_the_tutorials_but_for_mode_length_and_snapshot():
    text = bench_train.timed_solver(SOLVER, 300)
    p = parse_prototxt(text, caffe_pb2.SolverParameter)
    assert (p.max_iter, p.solver_mode, p.snapshot_after_train, p.random_seed) == (300, p.CPU, False, 1)
    assert (p.net, p.test_iter, p.test_interval, p.base_lr, p.snapshot) == (
        "examples/mnist/lenet_train_test.prototxt", [100], 500, pytest.approx(0.01), 5000)
    warm = parse_prototxt(bench_train.timed_solver(SOLVER, 2, test_iter=1), caffe_pb2.SolverParameter)
    assert (warm.max_iter, warm.test_iter) == (2, [1])


def test_ratios_are_medians_of_the_rounds_ratios():
    runs = []
    for r, (caffe, engine) in enumerate(((10.0, 9.0), (20.0, 10.0), (10.0, 12.0))):
        runs.append({"net": "lenet", "threads": "1", "round": r, "tool": "caffe", "wall_s": caffe, "cpu_s": caffe})
        runs.append({"net": "lenet", "threads": "1", "round": r, "tool": "engine", "wall_s": engine,
                     "cpu_s": engine / 2})
    s = bench_train.summarise(runs)["lenet threads=1"]
    assert s["caffe"]["wall_s"] == 10.0 and s["engine"]["wall_s"] == 10.0
    assert s["engine"]["wall_ratio"] == pytest.approx(0.9) and s["engine"]["cpu_ratio"] == pytest.approx(0.45)
    assert "| lenet threads=1 | engine | 10.00 s | 5.00 s | 0.900 | 0.450 |" in bench_train.table(
        bench_train.summarise(runs))


def test_without_a_caffe_it_says_so(capsys):
    assert bench_train.main(["--caffe", "/nonexistent/caffe"]) == 0
    assert "no Caffe binary" in capsys.readouterr().out

"""Programs in the manner of real pycaffe programs, run unchanged through ``python -m
engine run`` (tests/pycaffe/programs/; docs/pycaffe.md, "Acceptance", lists the real
programs each one stands for).  Each checks its own numbers against NumPy or against
what pycaffe's source says the calls do, and exits non-zero when they disagree; the
tests also check what it prints."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"


def run_program(name, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GLOG_minloglevel="2")
    r = subprocess.run([sys.executable, "-m", "engine", "run", str(PROGRAMS / name), str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.splitlines()


def test_deepdream_steps(tmp_path):
    """forward(end=) returns the end layer's top, backward(start=) gives the input its
    gradient (checked in the program), blob.reshape resizes the input per octave."""
    out = run_program("dream_steps.py", tmp_path)
    assert [line.split()[:4] for line in out[:3]] == [["round", "8", "10", "(8,"], ["round", "6", "7", "(6,"],
                                                       ["round", "8", "10", "(8,"]]
    assert out[-1] == "features (4, 8, 10)"


def test_style_transfer_backward_chain(tmp_path):
    out = run_program("style_backprop_chain.py", tmp_path)
    assert out[-1].startswith("gradient (90,) max error")


def test_net_surgery_full_convolution(tmp_path):
    """Weights moved with .flat and saved; the full-conv net matches the classifier on
    every window (checked in the program)."""
    out = run_program("net_surgery_fullconv.py", tmp_path)
    assert out[:2] == ["fc_a: weight (5, 12), bias (5,)", "fc_b: weight (4, 5), bias (4,)"]
    assert out[2].startswith("scores (4, 3, 3)")
    assert out[-1] == "all 9 windows agree"
    assert (tmp_path / "conv.caffemodel").stat().st_size > 0


def test_fcn_solve_surgery_and_scoring(tmp_path):
    out = run_program("fcn_solve.py", tmp_path)
    assert out[0] == "moved conv1/0 conv1/1 score_fr/0 score_fr/1 upscore/0"
    assert "train sizes [(9, 11), (10, 9), (10, 9)] iter 3" in out     # each image its own size
    # 10x10 and 8x13 validation images, their first row ignored (label 255)
    assert out[-1] == "scored pixels %d loss finite True" % (9 * 10 + 7 * 13)


def test_learning_lenet_notebook(tmp_path):
    out = run_program("lenet_notebook.py", tmp_path)
    assert out[0] == "blobs [('data', (16, 1, 12, 12)), ('label', (16,)), ('conv1', (16, 4, 10, 10))]"
    assert out[1] == "params [('conv1', (4, 1, 3, 3)), ('hidden', (20, 100)), ('score', (10, 20))]"
    assert out[-1].startswith("second solver 1 ")
    solver_text = (tmp_path / "lenet_solver.prototxt").read_text()      # str() of the message, as pycaffe
    assert solver_text.startswith('train_net: "%s/lenet_train.prototxt"\n' % tmp_path)
    assert "solver_mode: GPU\nrandom_seed: 831486\ntype: \"SGD\"\n" in solver_text


def test_multilabel_python_data_layer(tmp_path):
    out = run_program("multilabel_datalayer.py", tmp_path)
    assert out[0] == "MultilabelDataLayerSync ready: split train, batch 4, images [16, 16]"
    assert [line.split(":")[0] for line in out[2:4]] == ["after 3 steps", "after 5 steps"]
    assert out[-1].startswith("iter 5 loss ")


def test_train_py_timing_hooks(tmp_path):
    out = run_program("train_timing.py", tmp_path)
    assert out == ["hooks per iteration 8 layers ['data', 'ip', 'loss']", "has_nccl False",
                   "no NCCL: NCCLUnavailable"]

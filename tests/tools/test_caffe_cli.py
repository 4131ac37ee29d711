"""The `caffe` tool's spellings on ``python -m engine``: gflags' forms of every flag,
caffe.cpp's fatal messages and exit codes, its usage and unknown-action output, and
the lines train, test, time and device_query print."""
import argparse
import os
import subprocess
import sys

import numpy as np
import pytest

from engine.core import backend
from engine.core.log import num
from engine.tools import gflags
from engine.tools.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from tests.tools.conftest import run, write_solver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# =========================================================================== gflags forms
def _parser():
    p = argparse.ArgumentParser()
    for name in ("a", "b", "c"):
        p.add_argument(name, nargs="?")
    p.add_argument("--solver")
    p.add_argument("--gpu", nargs="?", const="0")
    p.add_argument("--stage", action="append", default=[])
    p.add_argument("--gray", action="store_true")
    p.add_argument("--resize_width", type=int, default=0)
    p.add_argument("-v", "--verbose", action="store_true")
    return p


@pytest.mark.parametrize("spelling", [["-solver", "s.prototxt"], ["-solver=s.prototxt"],
                                      ["--solver", "s.prototxt"], ["--solver=s.prototxt"]])
def test_a_value_flag_in_each_gflags_spelling(spelling):
    p = _parser()
    argv = gflags.normalize(spelling, p)
    assert argv == ["--solver=s.prototxt"]
    assert p.parse_args(argv).solver == "s.prototxt"


@pytest.mark.parametrize("spelling, value", [(["-gray"], True), (["--gray"], True), (["-gray=true"], True),
                                             (["-gray=1"], True), (["-nogray"], False), (["-gray=false"], False),
                                             (["--gray=no"], False), ([], False)])
def test_boolean_flags_as_gflags_reads_them(spelling, value):
    p = _parser()
    assert p.parse_args(gflags.normalize(spelling, p)).gray is value


def test_flags_anywhere_positionals_kept_and_double_dash_ends_flags():
    p = _parser()
    argv = gflags.normalize(["-gray", "root/", "-resize_width", "9", "list.txt", "-v", "--", "-notaflag"], p)
    a = p.parse_args(argv)
    assert a.gray and a.resize_width == 9 and a.verbose and [a.a, a.b, a.c] == ["root/", "list.txt", "-notaflag"]
    # -gpu takes the next argument when it is a value, and means device 0 alone
    assert p.parse_args(gflags.normalize(["-gpu", "1,2"], p)).gpu == "1,2"
    assert p.parse_args(gflags.normalize(["-gpu"], p)).gpu == "0"
    assert p.parse_args(gflags.normalize(["-stage=a,b", "--stage", "c"], p)).stage == ["a,b", "c"]


def test_a_scripts_own_arguments_pass_untouched():
    """A command whose last positional takes the rest (python -m engine run SCRIPT ARGS...)."""
    p = argparse.ArgumentParser()
    p.add_argument("--gpu", nargs="?", const="0")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    argv = gflags.normalize(["-gpu", "1", "s.py", "-gpu", "0", "--unknown=x", "-v"], p)
    assert argv == ["--gpu=1", "s.py", "-gpu", "0", "--unknown=x", "-v"]
    a = p.parse_args(argv)
    assert a.gpu == "1" and a.script == "s.py" and a.args == ["-gpu", "0", "--unknown=x", "-v"]


def test_flags_gflags_refuses():
    p = _parser()
    with pytest.raises(gflags.FlagError, match="unknown command line flag 'bogus'"):
        gflags.normalize(["-bogus", "1"], p)
    with pytest.raises(gflags.FlagError, match="flag '-solver' is missing its argument"):
        gflags.normalize(["-solver"], p)
    with pytest.raises(gflags.FlagError, match="illegal value 'maybe' specified for bool flag 'gray'"):
        gflags.normalize(["-gray=maybe"], p)


def test_flags_before_the_command_move_after_it():
    commands = {"train": None, "test": None}
    assert gflags.hoist(["-gpu", "0", "train", "-solver", "s"], commands, {"gpu", "solver"}) == \
        ["train", "-gpu", "0", "-solver", "s"]
    assert gflags.hoist(["-solver=s", "train"], commands, {"solver"}) == ["train", "-solver=s"]
    assert gflags.hoist(["train", "-solver", "s"], commands, {"solver"}) == ["train", "-solver", "s"]


# =========================================================================== usage, unknown action
def test_no_command_prints_caffes_usage():
    code, out, err = run()
    assert code == EXIT_USAGE and out == ""
    assert "usage: python -m engine <command> <args>" in err and "commands:" in err
    lines = err.splitlines()
    start = lines.index("commands:") + 1
    assert [l.split()[0] for l in lines[start:start + 4]] == ["train", "test", "device_query", "time"]
    for name in ("convert_imageset", "compute_image_mean", "extract_features", "upgrade_net_proto_text",
                 "upgrade_net_proto_binary", "upgrade_solver_proto_text", "-solver", "-sighup_effect"):
        assert name in err
    # flags but no command: the usage too
    assert run("-gpu", "0")[0] == EXIT_USAGE
    for flag in ("-help", "--help", "-h", "--helpfull"):
        code, out, _ = run(flag)
        assert code == EXIT_OK and "usage: python -m engine <command> <args>" in out


def test_unknown_action_lists_the_available_ones():
    code, _, err = run("frobnicate", "-model", "x")
    assert code == EXIT_USAGE
    lines = err.splitlines()
    assert lines[0].startswith("E") and lines[0].endswith("] Available caffe actions:")
    listed = [l.split("] ", 1)[1] for l in lines[1:-1]]
    assert "\ttrain" in listed and "\tdevice_query" in listed and "\tconvert_imageset" in listed
    assert listed == sorted(listed)
    assert lines[-1].startswith("F") and lines[-1].endswith("] Unknown action: frobnicate")


def test_an_unknown_flag_is_a_usage_error():
    code, _, err = run("train", "-solvr", "s.prototxt")
    assert code == EXIT_USAGE and "unknown command line flag 'solvr'" in err


# =========================================================================== train
def test_train_needs_a_solver():
    code, _, err = run("train")
    assert code == EXIT_ERROR
    assert err == "error: Check failed: FLAGS_solver.size() > 0 (0 vs. 0) Need a solver definition to train.\n"


def test_train_snapshot_and_weights_are_exclusive(tmp_path):
    code, _, err = run("train", "-solver", tmp_path / "s.prototxt", "-snapshot", "a.solverstate",
                       "-weights", "w.caffemodel")
    assert code == EXIT_ERROR
    assert "Check failed: !FLAGS_snapshot.size() || !FLAGS_weights.size() Give a snapshot to resume training " \
           "or weights to finetune but not both." in err


@pytest.mark.parametrize("form", ["-solver %s", "-solver=%s", "--solver %s", "--solver=%s"])
def test_train_in_each_spelling(tmp_path, tiny_model, form):
    net, _, _ = tiny_model
    solver = write_solver(tmp_path / "s2.prototxt", net, tmp_path / "again", max_iter=1)
    code, _, err = run("train", *(form % solver).split(" "))
    assert code == EXIT_OK, err
    assert "] Use CPU." in err and "] Starting Optimization" in err and "] Optimization Done." in err
    assert (tmp_path / "again_iter_1.caffemodel").exists()


def test_train_finetunes_and_resumes(tmp_path, tiny_model):
    net, solver, weights = tiny_model
    code, _, err = run("-level", "0", "train", "-solver=" + solver, "-weights", weights, "-stage", "a,b",
                       "-sigint_effect", "none", "-sighup_effect=stop")
    assert code == EXIT_OK, err
    code, _, err = run("train", "--solver", solver, "--snapshot=" + weights.replace(".caffemodel", ".solverstate"))
    assert code == EXIT_OK and "] Resuming from " in err


def test_train_refuses_a_bad_signal_effect(tiny_model):
    _, solver, _ = tiny_model
    code, _, err = run("train", "-solver", solver, "-sigint_effect", "explode")
    assert code == EXIT_ERROR and 'Invalid signal effect "explode" was specified' in err


def test_train_on_all_gpus_without_cuda(tiny_model):
    if backend.gpu_available():
        pytest.skip("a GPU is present")
    _, solver, _ = tiny_model
    code, _, err = run("train", "-solver", solver, "-gpu", "all")
    assert code == EXIT_ERROR and "Cannot use GPU in CPU-only Caffe: check mode." in err


# =========================================================================== test
def test_test_needs_model_and_weights():
    code, _, err = run("test", "-weights", "w")
    assert code == EXIT_ERROR and "Need a model definition to score." in err
    code, _, err = run("test", "-model", "m")
    assert code == EXIT_ERROR and "Check failed: FLAGS_weights.size() > 0 (0 vs. 0) Need model weights to score." in err


def _messages(err):
    return [l.split("] ", 1)[1] for l in err.splitlines() if "] " in l]


def test_test_prints_each_batch_and_the_means(tiny_model):
    """caffe test's lines, and its numbers: the same Forward passes done here."""
    import engine
    net_path, _, weights = tiny_model
    code, out, err = run("test", "-model", net_path, "-weights=" + weights, "-iterations", "3")
    assert code == EXIT_OK and out == ""
    msgs = _messages(err)
    assert "Use CPU." in msgs and "Running for 3 iterations." in msgs
    net = engine.Net(net_path, engine.TEST, weights=weights)
    f = np.float32
    acc, loss = [], []
    for _ in range(3):
        outs = net.forward()
        acc.append(f(outs["accuracy"]))
        loss.append(f(outs["loss"]))
    net.layers[0].close()
    for i in range(3):
        assert "Batch %d, accuracy = %s" % (i, num(acc[i])) in msgs
        assert "Batch %d, loss = %s" % (i, num(loss[i])) in msgs
    # The prefetch thread reads ahead and logs its wrap-around whenever it gets there (as
    # Caffe's does): not part of the test command's own sequence.
    msgs = [m for m in msgs if "Restarting data prefetching" not in m]
    mean_loss = f(f(f(loss[0] + loss[1]) + loss[2]) / f(3))
    mean_acc = f(f(f(acc[0] + acc[1]) + acc[2]) / f(3))
    assert msgs[-3:] == ["Loss: %s" % num(mean_loss), "accuracy = %s" % num(mean_acc),
                         "loss = %s (* 1 = %s loss)" % (num(mean_loss), num(mean_loss))]


# =========================================================================== time
def test_time_with_the_model_flag(tiny_model):
    net, _, _ = tiny_model
    code, out, err = run("time", "-model", net, "-iterations=2", "-phase", "TEST")
    assert code == EXIT_OK, err
    msgs = _messages(err)
    assert msgs[:1] == ["Use CPU."] and "Performing Forward" in msgs and "Testing for 2 iterations." in msgs
    assert "Iteration: 2 forward-backward time: " in " ".join(msgs)
    lines = out.splitlines()
    assert lines[0] == "Average time per layer: " and lines[-1] == "*** Benchmark ends ***"
    assert any(l.startswith("      data\tforward: ") for l in lines)
    assert [l.split(":")[0] for l in lines[-5:-1]] == ["Average Forward pass", "Average Backward pass",
                                                       "Average Forward-Backward", "Total Time"]


def test_time_needs_a_model_and_a_known_phase(tiny_model):
    code, _, err = run("time")
    assert code == EXIT_ERROR and "Need a model definition to time." in err
    code, _, err = run("time", "-model", tiny_model[0], "-phase", "VAL")
    assert code == EXIT_USAGE and 'phase must be "TRAIN" or "TEST"' in err


# =========================================================================== device_query
def test_device_query_without_a_gpu_flag_queries_nothing():
    code, out, err = run("device_query")
    assert code == EXIT_OK and _messages(err) == ["Querying GPUs "]


def test_device_query_without_cuda_stops_as_cpu_only_caffe():
    if backend.gpu_available():
        pytest.skip("a GPU is present")
    code, _, err = run("device_query", "-gpu", "0")
    assert code == EXIT_ERROR
    assert _messages(err) == ["Querying GPUs 0"]
    assert err.splitlines()[-1].startswith("error: Cannot use GPU in CPU-only Caffe: check mode. (")


def test_device_query_lines_from_device_properties():
    from engine.tools.caffe_tools import device_query_lines
    props = {"name": b"Tesla K40c", "major": 3, "minor": 5, "totalGlobalMem": 12079136768,
             "sharedMemPerBlock": 49152, "regsPerBlock": 65536, "warpSize": 32, "memPitch": 2147483647,
             "maxThreadsPerBlock": 1024, "maxThreadsDim": (1024, 1024, 64),
             "maxGridSize": (2147483647, 65535, 65535), "clockRate": 745000, "totalConstMem": 65536,
             "textureAlignment": 512, "deviceOverlap": 1, "multiProcessorCount": 15,
             "kernelExecTimeoutEnabled": 0}
    lines = device_query_lines(1, props)
    assert lines[0] == "Device id:                     1"
    assert lines[3] == "Name:                          Tesla K40c"
    assert "Maximum dimension of block:    1024, 1024, 64" in lines
    assert "Maximum dimension of grid:     2147483647, 65535, 65535" in lines
    assert lines[-3:] == ["Concurrent copy and execution: Yes", "Number of multiprocessors:     15",
                          "Kernel execution timeout:      No"]
    assert len(lines) == 18 and len({l.index(":") for l in lines if not l.startswith("Device id")}) >= 1


@pytest.mark.gpu
def test_device_query_on_a_gpu():
    code, _, err = run("device_query", "-gpu", "0")
    assert code == EXIT_OK and "Device id:                     0" in _messages(err)


# =========================================================================== as a program
def test_python_dash_m_engine_with_caffes_spelling(tiny_model):
    net, _, weights = tiny_model
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "engine", "test", "-model", net, "-weights", weights,
                        "-iterations", "1"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 0 and "] Batch 0, accuracy = " in p.stderr and "] Loss: " in p.stderr
    p = subprocess.run([sys.executable, "-m", "engine", "train"], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 1 and "Need a solver definition to train." in p.stderr and "Traceback" not in p.stderr

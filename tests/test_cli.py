"""python -m engine: every subcommand, its exit code and key output lines."""
import io
import json
import os
import subprocess
import sys

import pytest

from engine.tools.cli import EXIT_DIFFER, EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from tests.nets import OVERFLOW

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")
RESNET = os.path.join(ROOT, "examples", "resnet_tiny", "resnet_tiny.prototxt")
SIAMESE = os.path.join(ROOT, "examples", "shared_stages", "siamese_stages.prototxt")


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_info():
    code, out, err = run("info", LENET, "--phase", "TRAIN")
    assert code == EXIT_OK and err == ""
    assert "Net 'LeNetDigits'" in out and "phase TRAIN" in out
    assert "Filtered out by the NetState (2):" in out
    assert "accuracy (Accuracy): include rule 0 {phase: TEST}: The NetState phase (0) differed" in out
    assert "conv1" in out and "data -> conv1 [64 20 24 24]" in out and "ip1 -> ip1* [64 500]" in out
    assert "Memory required for data: 5169924" in out and "in place 128000" in out
    assert "Params: 431080" in out and "MACC: 146752000" in out
    assert "conv1                  yes param 0 has lr_mult 1 > 0" in out
    code, out, _ = run("info", SIAMESE, "--phase", "TEST", "--stage", "deploy", "--level", "1")
    assert code == 0 and "stages [deploy]" in out and "level 1" in out
    code, out, _ = run("info", RESNET)
    assert "Splits inserted (" in out and "Splits inserted (0)" not in out
    code, out, _ = run("info", SIAMESE, "--phase", "TRAIN")
    assert "Shared params (" in out and "owned by" in out


def test_info_json():
    code, out, _ = run("info", LENET, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "engine-report" and "steps" not in doc
    assert "transcript" not in doc["init"] and len(doc["layers"]) == 9


def test_time_ends_with_caffes_summary():
    code, out, err = run("time", LENET, "--iterations", "2")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0] == "Average time per layer: "
    assert lines[-5].startswith("Average Forward pass: ") and lines[-5].endswith(" ms.")
    assert lines[-4].startswith("Average Backward pass: ")
    assert lines[-3].startswith("Average Forward-Backward: ")
    assert lines[-2].startswith("Total Time: ")
    assert lines[-1] == "*** Benchmark ends ***"
    assert "     conv1\tforward: " in out and "     conv1\tbackward: " in out
    # caffe logs its lines on stderr, glog style.
    assert "] Performing Forward" in err and "] *** Benchmark begins ***" in err
    assert "] Testing for 2 iterations." in err and "] Iteration: 2 forward-backward time: " in err
    assert err.rstrip().endswith("*** Benchmark ends ***")
    code, out, err = run("time", LENET, "--iterations", "1", "-q")
    assert code == 0 and err == "" and out.rstrip().endswith("*** Benchmark ends ***")


def test_debug_prints_caffes_lines():
    code, out, err = run("debug", LENET)
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0].startswith("    [Forward] Layer digits, top blob data data: ")
    assert "    [Forward] Layer conv1, param blob 0 data: " in out
    assert "    [Backward] Layer loss, bottom blob ip2 diff: " in out
    assert "    [Backward] Layer conv1, param blob 1 diff: " in out
    assert "    [Backward] All net params (data, diff): L1 norm = (" in out
    code, out, _ = run("debug", LENET, "--format", "table", "--iterations", "2", "--phase", "TEST")
    assert code == 0 and "step 1: forward layers 0..11" in out and "mean|x|" in out and "zero%" in out
    assert "iteration 1" in out


def test_debug_health_records_give_the_same_caffe_lines():
    code, full, _ = run("debug", LENET, "--seed", "3")
    code2, cheap, _ = run("debug", LENET, "--seed", "3", "--records", "health")
    assert code == code2 == EXIT_OK
    assert full.splitlines() == cheap.splitlines()[:len(full.splitlines())]


def test_debug_sentinel_and_findings(tmp_path):
    p = tmp_path / "overflow.prototxt"
    p.write_text(OVERFLOW)
    code, out, err = run("debug", p, "--sentinel")
    assert code == EXIT_ERROR
    assert err.count("\n") == 1 and err.startswith("error: Forward of layer 'exp3' (Exp): top blob 'e3'")
    assert "[Forward] Layer exp3, top blob e3 data: inf" in out and "Layer half" not in out
    assert "error   nonfinite" in out
    code, out, err = run("debug", p, "--report", tmp_path / "r.json")
    assert code == EXIT_OK and "Layer half, top blob out data: inf" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["findings"][0]["layer"] == "exp3"


def test_debug_with_a_solver_records_updates(tmp_path):
    sp = tmp_path / "s.prototxt"
    sp.write_text('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 5\nsnapshot_prefix: "%s"\n'
                  % (LENET, tmp_path / "x"))
    code, out, err = run("debug", "--solver", sp, "--iterations", "2", "--format", "table")
    assert code == 0 and out.count(": update layers") == 2 and "|dw|/|w| = " in out


@pytest.mark.parametrize("fmt,check", [("json", lambda t: json.loads(t)["schema"] == "engine-report"),
                                       ("csv", lambda t: t.startswith("index,name,type,")),
                                       ("md", lambda t: t.startswith("# Net report")),
                                       ("html", lambda t: t.startswith("<!DOCTYPE html>"))])
def test_report_formats(tmp_path, fmt, check):
    out_file = tmp_path / ("r." + fmt)
    code, out, err = run("report", LENET, "--format", fmt, "-o", out_file)
    assert code == EXIT_OK and "Wrote" in err
    assert check(out_file.read_text())


def test_report_to_stdout_static_and_with_timing(tmp_path):
    code, out, _ = run("report", RESNET, "--format", "json", "--no-run")
    doc = json.loads(out)
    assert code == 0 and doc["steps"] == [] and doc["meta"]["iterations"] == 0
    code, _, _ = run("report", LENET, "-o", tmp_path / "r.md", "--time", "1")
    assert code == 0 and "## Timing (1 iterations, CPU)" in (tmp_path / "r.md").read_text()


def test_compare_runs_and_logs(tmp_path):
    code, out, _ = run("compare", LENET, LENET)
    assert code == EXIT_OK and "runs agree within rtol 0.001" in out
    # Different weights: the runs part at the first layer with params.
    run("report", LENET, "--seed", "2", "-o", tmp_path / "seed2.json")
    code, out, _ = run("compare", LENET, tmp_path / "seed2.json")
    assert code == EXIT_DIFFER and "runs part at step 0 (forward), layer 'digits'" in out
    run("report", LENET, "-o", tmp_path / "seed1.json")
    code, out, _ = run("compare", tmp_path / "seed1.json", LENET, "--json", tmp_path / "cmp.json")
    assert code == EXIT_OK and json.loads((tmp_path / "cmp.json").read_text())["ok"] is True
    code, _, err = run("compare", LENET)
    assert code == EXIT_USAGE and "two runs" in err


@pytest.mark.shared
def test_compare_with_a_caffe_log(shared_dir, tmp_path):
    log = shared_dir / "golden" / "logs" / "lenet_test.log"
    # Our seeded inputs are not the harness's: the runs part at the first layer.
    code, out, _ = run("compare", log, shared_dir / "zoo" / "examples/mnist/lenet_train_test.input.prototxt",
                       "--phase", "TEST")
    assert code == EXIT_DIFFER and "lenet_test.log (Caffe log)" in out
    code, out, _ = run("compare", log, log)
    assert code == EXIT_OK


V1_NET = """name: "V1Net"
input: "data"
input_dim: 2
input_dim: 3
input_dim: 4
input_dim: 4
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv" blobs_lr: 1 blobs_lr: 2
         convolution_param { num_output: 2 kernel_size: 3 } }
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
"""


def test_upgrade_net_solver_and_caffemodel(tmp_path):
    from engine.core import io as eio
    from engine.proto import caffe_pb2
    src, dst = tmp_path / "v1.prototxt", tmp_path / "new.prototxt"
    src.write_text(V1_NET)
    code, out, err = run("upgrade", src, dst)
    assert code == EXIT_OK
    assert "Successfully upgraded file specified using deprecated V1LayerParameter" in err
    assert "Wrote upgraded NetParameter text proto to %s" % dst in err
    p = eio.read_net_prototxt(str(dst))
    assert [l.type for l in p.layer] == ["Input", "Convolution", "ReLU"] and not len(p.layers)
    assert p.layer[1].param[1].lr_mult == 2
    code, _, err = run("upgrade", dst, tmp_path / "again.prototxt")
    assert code == EXIT_OK and "File already in latest proto format: %s" % dst in err
    old = tmp_path / "old_solver.prototxt"
    old.write_text('net: "x.prototxt"\nbase_lr: 0.1\nsolver_type: ADAM\n')
    code, _, err = run("upgrade", old, tmp_path / "new_solver.prototxt")
    assert code == EXIT_OK and "Wrote upgraded SolverParameter text proto to" in err
    sp = eio.read_solver_prototxt(str(tmp_path / "new_solver.prototxt"))
    assert sp.type == "Adam" and not sp.HasField("solver_type")
    # A binary V1 caffemodel.
    v1 = eio.parse_prototxt(V1_NET.encode(), caffe_pb2.NetParameter)
    eio.write_binary(str(tmp_path / "v1.caffemodel"), v1)
    code, _, err = run("upgrade", tmp_path / "v1.caffemodel", tmp_path / "v2.caffemodel")
    assert code == EXIT_OK and "Wrote upgraded NetParameter binary proto to" in err
    m = eio.read_caffemodel(str(tmp_path / "v2.caffemodel"))
    assert [l.name for l in m.layer] == ["input", "conv", "relu"]
    bad = tmp_path / "bad.prototxt"
    bad.write_text("layer {\n  name: \"x\"\n  bogus_field: 1\n}\n")
    code, _, err = run("upgrade", bad, tmp_path / "o.prototxt")
    assert code == EXIT_ERROR and err.startswith("error: %s:3:" % bad)


def test_draw(tmp_path):
    code, out, _ = run("draw", LENET, tmp_path / "n.svg", "--rankdir", "TB", "--phase", "TRAIN")
    assert code == 0 and out.strip() == "Drawing net to %s" % (tmp_path / "n.svg")
    assert "<svg" in (tmp_path / "n.svg").read_text()
    code, _, _ = run("draw", RESNET, tmp_path / "n.dot", "--splits")
    assert code == 0 and "_split" in (tmp_path / "n.dot").read_text()
    from engine.instruments.draw import kaleido_available
    if not kaleido_available():
        code, _, err = run("draw", LENET, tmp_path / "n.png")
        assert code == EXIT_ERROR and "kaleido" in err and ".svg" in err
    code, _, err = run("draw", LENET, tmp_path / "n.svg", "--phase", "VAL")
    assert code == EXIT_USAGE


def test_train_and_test(tmp_path):
    sp = tmp_path / "solver.prototxt"
    sp.write_text('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\ndisplay: 1\nmax_iter: 2\n'
                  'snapshot_prefix: "%s"\n' % (LENET, tmp_path / "lenet"))
    code, out, err = run("train", "--solver", sp)
    assert code == EXIT_OK
    assert "] Use CPU." in err and "] Starting Optimization" in err and "] Optimization Done." in err
    weights = tmp_path / "lenet_iter_2.caffemodel"
    assert "Iteration 1 (" in err and "Snapshotting to binary proto file %s" % weights in err
    code, out, err = run("test", "--model", LENET, "--weights", weights, "--iterations", "2")
    assert code == EXIT_OK and "] Running for 2 iterations." in err and "] Loss: " in err
    assert "] Batch 1, loss = " in err
    code, _, err = run("train", "--solver", sp, "--weights", weights, "--snapshot", tmp_path / "x.solverstate")
    assert code == EXIT_ERROR and "Give a snapshot to resume training or weights to finetune but not both" in err
    code, _, err = run("train", "--solver", sp, "--snapshot", tmp_path / "lenet_iter_2.solverstate")
    assert code == EXIT_OK and "Resuming from" in err
    code, _, err = run("test", "--model", LENET)
    assert code == EXIT_ERROR and "Need model weights to score." in err


def test_errors_and_usage(tmp_path):
    code, _, err = run()
    assert code == EXIT_USAGE
    code, _, err = run("frobnicate")
    assert code == EXIT_USAGE and "Unknown action: frobnicate" in err
    code, _, err = run("info")
    assert code == EXIT_USAGE
    code, _, err = run("info", LENET, "--phase", "VAL")
    assert code == EXIT_USAGE and 'phase must be "TRAIN" or "TEST"' in err
    code, _, err = run("info", tmp_path / "missing.prototxt")
    assert code == EXIT_ERROR and err.startswith("error: ") and "missing.prototxt" in err
    bad = tmp_path / "bad.prototxt"
    bad.write_text('name: "x"\nlayer {\n  name: "a"\n  type: "Input"\n  top: "d"\n  oops: 3\n}\n')
    code, _, err = run("info", bad)
    assert code == EXIT_ERROR and err.startswith("error: %s:6:" % bad) and err.count("\n") == 1
    unk = tmp_path / "unk.prototxt"
    unk.write_text('name: "x"\nlayer { name: "in" type: "Input" top: "d" input_param { shape { dim: 1 } } }\n'
                   'layer { name: "mystery" type: "NoSuchLayer" bottom: "d" top: "e" }\n')
    code, _, err = run("debug", unk)
    assert code == EXIT_ERROR and "NoSuchLayer" in err and "mystery" in err and "Traceback" not in err
    shape = tmp_path / "shape.prototxt"
    shape.write_text('name: "x"\nlayer { name: "in" type: "Input" top: "a" top: "b" input_param { shape { dim: 2 '
                     'dim: 3 } shape { dim: 2 dim: 4 } } }\nlayer { name: "sum" type: "Eltwise" bottom: "a" '
                     'bottom: "b" top: "c" }\n')
    code, _, err = run("info", shape)
    assert code == EXIT_ERROR and "sum" in err


def test_gpu_flag_without_a_gpu_is_an_engine_error():
    from engine.core import backend
    if backend.gpu_available():
        pytest.skip("a GPU is present")
    code, _, err = run("info", LENET, "--gpu")
    assert code == EXIT_ERROR and err.startswith("error: GPU mode needs CuPy")


def test_python_dash_m_engine():
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "engine", "info", LENET], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0 and "Memory required for data" in p.stdout
    p = subprocess.run([sys.executable, "-m", "engine", "info", "/nonexistent.prototxt"], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 1 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "engine"], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 2 and "usage:" in p.stderr


def test_progress_line_only_on_a_terminal():
    from engine.tools.cli import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty = Tty()
    p = Progress(3, "debug", stream=tty)
    for k in (1, 2, 3):
        p(k)
    text = tty.getvalue()
    assert text.count("\r") == 3 and "3/3" in text and text.endswith("\n")
    plain = io.StringIO()
    p = Progress(3, "debug", stream=plain)
    p(1)
    assert plain.getvalue() == ""
    assert not Progress(3, "x", enabled=False, stream=Tty()).enabled

"""python -m engine debug --break-when and train --break-when: prints 'break: LAYER: COND',
stops, writes the report if asked, exits with 4."""
import io
import json
import os
import subprocess
import sys

import pytest

from engine.tools.cli import EXIT_BREAK, EXIT_OK, EXIT_USAGE, main
from tests.nets import DUMMY_SOFTMAX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")

OVERFLOW = """
name: "Overflow"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 4 dim: 25 } } }
layer { name: "scale" type: "Power" bottom: "data" top: "x" power_param { scale: 3 } }
layer { name: "exp1" type: "Exp" bottom: "x" top: "e1" }
layer { name: "exp2" type: "Exp" bottom: "e1" top: "e2" }
layer { name: "half" type: "Power" bottom: "e2" top: "out" power_param { scale: 0.5 } }
"""


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def _overflow(tmp_path):
    p = tmp_path / "overflow.prototxt"
    p.write_text(OVERFLOW)
    return p


def test_break_on_nonfinite_names_the_layer_and_exits_4(tmp_path):
    p = _overflow(tmp_path)
    report = tmp_path / "r.json"
    code, out, err = run("debug", p, "--break-when", "nonfinite", "-o", report)
    assert code == EXIT_BREAK == 4
    assert "break: exp2: nonfinite\n" in out
    assert "Layer exp2, top blob e2 data: inf" in out and "Layer half" not in out     # stopped after exp2
    assert "Wrote report to" in err
    doc = json.loads(report.read_text())
    assert doc["breakpoints"]["hits"][0]["message"] == "break: exp2: nonfinite"
    assert doc["breakpoints"]["breakpoints"] == [{"id": 1, "condition": "nonfinite", "enabled": True, "hits": 1}]
    assert doc["findings"][0]["check"] == "nonfinite" and doc["findings"][0]["layer"] == "exp2"
    assert doc["findings"][0]["step"] == 1 and [s["number"] for s in doc["steps"]] == [1]


def test_stat_and_layer_conditions_repeatable_first_in_run_order_wins(tmp_path):
    p = _overflow(tmp_path)
    code, out, _ = run("debug", p, "--break-when", "e2.max_abs > 1e30", "--break-when", "x.max_abs > 1")
    assert code == EXIT_BREAK and "break: scale: x.max_abs > 1\n" in out and "break: exp2" not in out
    code, out, _ = run("debug", LENET, "--break-when", "layer=pool2", "--format", "table")
    assert code == EXIT_BREAK and "break: pool2: layer=pool2" in out and "ip1" not in out.split("break:")[0]
    # a gradient condition: the first backward layer that writes ip1's diff is ip2
    code, out, _ = run("debug", LENET, "--break-when", "ip1.diff.mean_abs > 0")
    assert code == EXIT_BREAK and "break: ip2: ip1.diff.mean_abs > 0" in out
    # nothing fires: exit 0 and no break line
    code, out, _ = run("debug", LENET, "--break-when", "conv1.max_abs > 1e30")
    assert code == EXIT_OK and "break:" not in out


def test_bad_conditions_are_usage_errors(tmp_path):
    code, _, err = run("debug", LENET, "--break-when", "conv9.max_abs > 1")
    assert code == EXIT_USAGE and "no blob, param or layer 'conv9'" in err
    code, _, err = run("debug", LENET, "--break-when", "conv1.maxabs > 1")
    assert code == EXIT_USAGE and "cannot read the condition" in err
    code, _, err = run("debug", LENET, "--break-when", "loss.jump > 10")
    assert code == EXIT_USAGE and "add --solver" in err


def test_solver_loss_jump_stops_the_run(tmp_path):
    sp = tmp_path / "solver.prototxt"
    # a learning rate this large makes the loss jump within a few iterations
    sp.write_text('net: "%s"\nbase_lr: 50\nlr_policy: "fixed"\nmax_iter: 50\n' % LENET)
    code, out, err = run("debug", "--solver", sp, "--iterations", "30", "--break-when", "loss.jump > 2",
                         "--break-when", "loss.nonfinite", "--format", "table", "-o", tmp_path / "r.md")
    assert code == EXIT_BREAK, (out[-500:], err)
    line = [l for l in out.splitlines() if l.startswith("break: ")]
    assert line == ["break: loss: loss.jump > 2"] or line == ["break: loss: loss.nonfinite"]
    md = (tmp_path / "r.md").read_text()
    assert "## Breakpoints" in md and "hit: `break: loss:" in md
    updates = out.count(": update layers")
    assert 1 <= updates < 30                             # it stopped before the 30 iterations


def test_update_ratio_condition_in_a_solver_run(tmp_path):
    sp = tmp_path / "solver.prototxt"
    sp.write_text('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 50\n' % LENET)
    code, out, _ = run("debug", "--solver", sp, "--iterations", "3", "--break-when", "conv1/0.update_ratio > 0")
    assert code == EXIT_BREAK and "break: conv1: conv1/0.update_ratio > 0" in out


def test_exit_code_through_python_dash_m(tmp_path):
    p = _overflow(tmp_path)
    r = subprocess.run([sys.executable, "-m", "engine", "debug", str(p), "--break-when", "nonfinite"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 4 and "break: exp2: nonfinite" in r.stdout


# ---------------------------------------------------------------------- train --break-when
def _train_solver(tmp_path, base_lr=0.1, max_iter=20, extra=""):
    net = tmp_path / "dummy.prototxt"
    net.write_text(DUMMY_SOFTMAX)
    sp = tmp_path / "solver.prototxt"
    sp.write_text('net: "%s"\nbase_lr: %g\nlr_policy: "fixed"\nmax_iter: %d\ndisplay: 1\nrandom_seed: 3\n'
                  'snapshot_after_train: false\n%s' % (net, base_lr, max_iter, extra))
    return sp


def test_train_break_on_loss_jump_prints_the_line_writes_the_report_exits_4(tmp_path):
    sp = _train_solver(tmp_path, base_lr=1e3)
    report = tmp_path / "train.json"
    code, out, err = run("train", "--solver", sp, "--break-when", "loss.jump > 2", "--break-when", "loss.nonfinite",
                         "-o", report)
    assert code == EXIT_BREAK, (out, err[-800:])
    assert out.splitlines() == ["break: loss: loss.jump > 2"]
    it = int(err.split("Optimization stopped at iteration ")[1].split(":")[0])
    assert 0 < it < 19 and "Optimization Done." not in err
    # the hit's numbers are those Caffe logs for the iteration and the one before
    logged = {int(l.split("Iteration ")[1].split(" ")[0]): float(l.rsplit("loss = ", 1)[1])
              for l in err.splitlines() if "iter/s" in l}
    doc = json.loads(report.read_text())
    hit = doc["breakpoints"]["hits"][0]
    assert hit["iteration"] == it and hit["direction"] == "solver" and it in logged and it - 1 in logged
    assert hit["value"] == pytest.approx(logged[it] / logged[it - 1], rel=1e-4) and hit["value"] > 2
    assert doc["breakpoints"]["breakpoints"][0]["hits"] == 1 and doc["breakpoints"]["breakpoints"][1]["hits"] == 0
    assert doc["steps"] and "Wrote report to" in err


def test_train_break_on_a_layer_or_an_update_ratio_and_without_a_hit(tmp_path):
    sp = _train_solver(tmp_path, max_iter=4)
    code, out, err = run("train", "--solver", sp, "--break-when", "ip.max_abs > 0")
    assert code == EXIT_BREAK and out == "break: ip: ip.max_abs > 0\n"
    assert "Optimization stopped at iteration 0: break: ip: ip.max_abs > 0 (forward" in err
    assert "Iteration 0 (" not in err                       # stopped inside the first forward
    code, out, err = run("train", "--solver", sp, "--break-when", "ip.update_ratio > 0")
    assert code == EXIT_BREAK and out == "break: ip: ip.update_ratio > 0\n" and "iteration 0" in err
    code, out, err = run("train", "--solver", sp, "--break-when", "loss.nonfinite", "--break-when", "nonfinite")
    assert code == EXIT_OK and out == "" and "Optimization Done." in err and "Iteration 3 (" in err


def test_train_break_conditions_checked_against_the_solvers_net(tmp_path):
    sp = _train_solver(tmp_path, max_iter=2)
    code, _, err = run("train", "--solver", sp, "--break-when", "conv9.max_abs > 1")
    assert code == EXIT_USAGE and "no blob, param or layer 'conv9'" in err
    code, _, err = run("train", "-solver", sp, "-break_when", "loss.jump >")
    assert code == EXIT_USAGE and "cannot read the condition" in err

"""benchmarks/bench_startup.py's pycaffe rows: the commands of a round, the environment, the
check that ``--pycaffe`` imports caffe, and the targets against pycaffe's same-run median (or
the recorded constant).  No real pycaffe is needed and nothing is timed."""
import sys

import pytest

from benchmarks import bench_startup as bs


def _summary(warm):
    return {"warm_s": warm, "warm_cpu_s": warm, "cold_s": warm * 2, "cold_cpu_s": warm * 2}


def test_child_env_sets_or_drops_pythonpath(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = bs.child_env("/caffe/python", False, 1)
    assert env["PYTHONPATH"] == "/caffe/python" and "PYTHONDONTWRITEBYTECODE" not in env
    assert env["OPENBLAS_NUM_THREADS"] == "1"
    env = bs.child_env(None, True, 0)
    assert "PYTHONPATH" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert bs.child_env("/r", True, 0, {"ENGINE_NUMBA": "0"})["ENGINE_NUMBA"] == "0"


def test_row_commands_run_the_same_script_and_prototxt_on_both_sides(tmp_path):
    variants = {"engine": ("/wt", None), "engine_numba0": ("/wt", {"ENGINE_NUMBA": "0"})}
    rows = bs.row_commands(variants, ("/usr/bin/python3", "/caffe/python"), "s.py", "net.prototxt", False, 1,
                           str(tmp_path))
    assert [r[0] for r in rows] == ["engine", "engine_numba0", "pycaffe"]
    name, cmd, cwd, env = rows[0]
    assert cmd == [sys.executable, "-m", "engine", "run", "s.py", "net.prototxt"] and cwd == "/wt"
    assert env["PYTHONPATH"] == "/wt"
    assert rows[1][3]["ENGINE_NUMBA"] == "0"
    name, cmd, cwd, env = rows[2]
    assert cmd == ["/usr/bin/python3", "s.py", "net.prototxt"] and cwd == str(tmp_path)
    assert env["PYTHONPATH"] == "/caffe/python" and env["OPENBLAS_NUM_THREADS"] == "1"
    assert [r[0] for r in bs.row_commands(variants, None, "s.py", "n", False, 0, str(tmp_path))] == [
        "engine", "engine_numba0"]


def test_targets_compare_with_pycaffes_same_run_median():
    results = {"googlenet_1": {"engine": _summary(0.6), "pycaffe": _summary(0.75), "peer": _summary(0.5)},
               "lenet": {"engine": _summary(0.9), "pycaffe": _summary(0.6), "peer": _summary(0.5)}}
    rows = bs.targets(results)
    assert len(rows) == 2
    g = [r for r in rows if r["target"].startswith("googlenet_1")][0]
    assert g["met"] is True and g["reference"] == "pycaffe same run" and g["reference_s"] == 0.75
    assert g["ratio"] == pytest.approx(0.8)
    assert g["target"] == "googlenet_1 start-up to the first forward's result <= pycaffe's 0.750 s (same run)"
    lenet = [r for r in rows if r["target"].startswith("lenet")][0]
    assert lenet["met"] is None and lenet["ratio"] == pytest.approx(1.5)
    lines = bs.target_lines(rows)
    assert any(ln.startswith("MET  googlenet_1") and ln.endswith("(x0.80)") for ln in lines)
    assert any(ln.startswith("--   lenet") and ln.endswith("(x1.50)") for ln in lines)
    results["googlenet_1"]["engine"] = _summary(0.9)
    g = [r for r in bs.targets(results) if r["target"].startswith("googlenet_1")][0]
    assert g["met"] is False and bs.target_lines([g])[0].startswith("MISS googlenet_1")


def test_targets_fall_back_to_the_recorded_constant_without_pycaffe():
    results = {"googlenet_1": {"engine": _summary(0.7), "peer": _summary(0.5)},
               "lenet": {"engine": _summary(0.9), "peer": _summary(0.5)}}
    rows = bs.targets(results)
    recorded = bs.PYCAFFE_RECORDED["googlenet_1"]["median_s"]
    assert len(rows) == 1 and rows[0]["reference"] == "pycaffe recorded"
    assert rows[0]["target"].endswith("<= pycaffe's %.3f s (recorded)" % recorded)
    assert rows[0]["reference_s"] == recorded and rows[0]["met"] is (0.7 <= recorded)
    assert bs.target_of("lenet", results["lenet"]) is None
    assert bs.target_of("googlenet_1", results["googlenet_1"]) == (recorded, "pycaffe recorded")


def test_print_net_labels_pycaffe_rows_and_the_verdict(capsys):
    res = {"engine": _summary(0.6), "pycaffe": _summary(0.75), "peer": _summary(0.5)}
    bs.print_net("googlenet_1", res, ["engine", "pycaffe"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("MET  googlenet_1") and "pycaffe same run 0.750 s: x0.80" in out[0]
    assert out[1].startswith("--   googlenet_1 pycaffe") and "real pycaffe" in out[1]


def _fake_pycaffe(root, body):
    pkg = root / "caffe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    return str(root)


def test_check_pycaffe_finds_the_module_or_says_why(tmp_path):
    good = _fake_pycaffe(tmp_path / "good", "TEST = 1\n")
    assert bs.check_pycaffe(sys.executable, good).endswith("caffe/__init__.py")
    bad = _fake_pycaffe(tmp_path / "bad", "raise ImportError('no _caffe here')\n")
    with pytest.raises(SystemExit, match="cannot import caffe") as e:
        bs.check_pycaffe(sys.executable, bad)
    assert "no _caffe here" in str(e.value) and bad in str(e.value)


def test_pycaffe_path_without_pycaffe_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        bs.main(["--pycaffe-path", "/x", "--nets", "lenet", "--json", ""])
    assert e.value.code == 2 and "--pycaffe-path needs --pycaffe" in capsys.readouterr().err

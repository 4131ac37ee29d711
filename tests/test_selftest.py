"""``python -m engine selftest --gpu``: says clearly when no GPU is present, and its parts
(tests, conformance against the goldens at 1e-5, benchmark rows, results file) work --
checked here with CPU substitutes; the GPU run itself is marked ``gpu``."""
import io
import json
import textwrap

import pytest

from engine.core import backend
from engine.tools import cli, selftest


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    monkeypatch.setattr(backend, "_cupy_error", RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"))


def test_gpu_selftest_without_a_gpu_says_so_and_exits_1(no_gpu, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    results = tmp_path / "results.json"
    code = cli.main(["selftest", "--gpu", "--results", str(results)], out=out, err=err)
    assert code == 1
    assert "no GPU is present" in err.getvalue() and "cudaErrorNoDevice" in err.getvalue()
    assert "Nothing was run" in err.getvalue()
    assert not results.exists()


def test_selftest_needs_gpu_or_a_device(tmp_path):
    err = io.StringIO()
    assert cli.main(["selftest"], out=io.StringIO(), err=err) == 2
    assert "--gpu" in err.getvalue()


def _stats(asum, l2, sample, count=10):
    return {"count": count, "asum_mean": asum, "l2": l2, "sample": sample, "nonfinite": 0}


def test_numeric_check_holds_the_engine_to_the_relative_tolerance():
    ref = {"blobs_data": {"conv1": _stats(0.5, 3.0, [0.1, -0.2, 0.0])},
           "params_diff": {"conv1": [_stats(0.01, 0.2, [1e-3]), _stats(0.02, 0.1, [2e-3])]}}
    close = json.loads(json.dumps(ref))
    close["blobs_data"]["conv1"]["l2"] = 3.0 * (1 + 4e-6)
    problems, worst = selftest.numeric_problems(ref, close, 1e-5)
    assert problems == [] and 3e-6 < worst < 5e-6
    far = json.loads(json.dumps(ref))
    far["params_diff"]["conv1"][1]["asum_mean"] = 0.02 * (1 + 3e-5)
    problems, worst = selftest.numeric_problems(ref, far, 1e-5)
    assert len(problems) == 1 and "params_diff conv1[1] asum_mean" in problems[0]
    # a sampled value is judged against the blob's scale (mean |x|), not its own size
    near_zero = json.loads(json.dumps(ref))
    near_zero["blobs_data"]["conv1"]["sample"][2] = 1e-7
    assert selftest.numeric_problems(ref, near_zero, 1e-5)[0] == []
    missing = {"blobs_data": {}, "params_diff": ref["params_diff"]}
    assert "missing" in selftest.numeric_problems(ref, missing, 1e-5)[0][0]


def test_pytest_summary_is_parsed():
    c = selftest.parse_pytest_summary("...\n3 failed, 120 passed, 4 skipped, 1 error in 9.1s\n")
    assert c == {"passed": 120, "failed": 3, "skipped": 4, "errors": 1}
    # -q -q (pytest.ini's -q and the selftest's) ends on the warnings' docs line, not the counts
    c = selftest.parse_pytest_summary("....\n568 passed, 890 deselected, 73 warnings in 100.06s (0:01:40)\n"
                                      "\n-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html\n")
    assert c["passed"] == 568 and c["failed"] == 0


def test_tests_part_counts_under_a_pytest_ini_that_already_says_quiet(tmp_path):
    # pytest.ini's own -q on top of the selftest's made -qq, which prints no closing counts
    # line: the first GPU run of this kind reported 0 passed for 896 passing tests
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -q -p no:cacheprovider\n")
    (tmp_path / "test_two.py").write_text(textwrap.dedent("""
        def test_a():
            assert True

        def test_b():
            assert 1 == 2
    """))
    c = selftest.run_tests("cpu", io.StringIO(), root=str(tmp_path), extra=["test_two.py"])
    assert (c["passed"], c["failed"], c["rc"]) == (1, 1, 1)
    assert c["failures"] and "test_b" in c["failures"][0]


def test_results_are_merged_into_the_results_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": [{"net": "lenet"}], "records": [1]}))
    selftest.write_results({"device": "gpu", "tests": {"passed": 3}}, str(path))
    doc = json.loads(path.read_text())
    assert doc["results"] == [{"net": "lenet"}] and doc["records"] == [1]
    assert doc["gpu_selftest"]["tests"]["passed"] == 3


def test_benchmark_rows_are_judged_against_the_goal(tmp_path):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "run.py").write_text(textwrap.dedent("""
        import json, sys
        a = sys.argv
        out = a[a.index("--out") + 1]
        rows = [{"net": n, "device": "gpu", "batch": int(a[a.index("--batch") + 1]),
                 "ratio": {"forward_backward": r}, "engine_s": {"forward_backward": 0.011 * r},
                 "torch_s": {"forward_backward": 0.011}} for n, r in (("resnet50", 1.1), ("googlenet", 1.4))]
        json.dump({"results": rows}, open(out, "w"))
    """))
    out = io.StringIO()
    b = selftest.run_benchmark("gpu", out, root=str(tmp_path))
    assert b["rc"] == 0
    assert [(r["net"], r["batch"], r["met"]) for r in b["rows"]] == [("resnet50", 32, True), ("googlenet", 32, False)]
    assert "--gpu-only" in out.getvalue()
    # the medians beside the ratio: which side moved between two GPU runs
    assert b["rows"][1]["engine_ms"] == pytest.approx(15.4) and b["rows"][1]["torch_ms"] == pytest.approx(11.0)
    assert "(15.4 / 11.0 ms)" in out.getvalue()
    assert selftest.run_benchmark("gpu", out, root=str(tmp_path / "nowhere"))["skipped"]


@pytest.mark.shared
def test_conformance_part_on_the_cpu_substitute(shared_dir, tmp_path):
    out = io.StringIO()
    code, section = selftest.selftest("cpu", shared=str(shared_dir), parts=("conformance",),
                                      cases=["lenet_train"], results_path=str(tmp_path / "r.json"), out=out)
    assert code == 0, out.getvalue()
    c = section["conformance"]
    assert (c["cases"], c["matched"]) == (1, 1) and c["max_rel_err"] < 1e-5
    assert json.loads((tmp_path / "r.json").read_text())["gpu_selftest"]["device"] == "cpu"


@pytest.mark.shared
def test_a_wrong_engine_result_fails_the_conformance_part(shared_dir, monkeypatch):
    real = selftest.run_case

    def off(shared, case, device, timeout=900):
        got = real(shared, case, device, timeout)
        for s in got["blobs_data"].values():
            s["l2"] *= 1 + 1e-4
        return got

    monkeypatch.setattr(selftest, "run_case", off)
    c = selftest.run_conformance(str(shared_dir), "cpu", 1e-5, io.StringIO(), names=["lenet_train"])
    assert c["matched"] == 0 and "l2" in c["failures"][0]["problems"][0]


@pytest.mark.gpu
@pytest.mark.shared
def test_gpu_selftest_conformance_on_one_case(shared_dir, tmp_path):
    out = io.StringIO()
    code, section = selftest.selftest("gpu", shared=str(shared_dir), parts=("conformance",), cases=["lenet_train"],
                                      results_path=str(tmp_path / "r.json"), out=out)
    assert code == 0, out.getvalue()
    assert section["conformance"]["matched"] == 1



def _line(blob, value):
    return ["net.cpp:0", "    [Forward] Layer %s, top blob %s data: %s" % (blob, blob, value)]


@pytest.mark.shared
def test_gpu_debug_lines_that_print_the_exact_mean_are_explained_not_hidden(shared_dir):
    # Caffe's CPU golden printed cblas_sasum's float32-lane sum (0.725789); the engine on the
    # GPU prints the exact mean |x| (cuBLAS's sum), which the golden's float64 statistic confirms.
    compare = selftest._shared_module(str(shared_dir), "compare")
    ref = {"rc": 0, "log": {"forward": [_line("conv1", "0.725789"), _line("pool1", "0.5")]},
           "blobs_data": {"conv1": {"asum_mean": 0.7287081}, "pool1": {"asum_mean": 0.5}}}
    got = {"log": {"forward": [_line("conv1", "0.728708"), _line("pool1", "0.5")]}}
    problems = compare.compare(ref, dict(got, rc=0))
    assert any("value differs" in p for p in problems)
    kept, explained = selftest._explain_gpu_debug_lines(compare, ref, got, problems, 1e-5)
    assert not any("differs" in p for p in kept) and explained and "conv1" in explained[0]
    # a line the exact statistic does not confirm stays a difference, and so do later ones
    got_wrong = {"log": {"forward": [_line("conv1", "0.728708"), _line("pool1", "0.51")]}}
    kept, explained = selftest._explain_gpu_debug_lines(compare, ref, got_wrong,
                                                        compare.compare(ref, dict(got_wrong, rc=0)), 1e-5)
    assert any("pool1" in p and "value differs" in p for p in kept)
    ref_far = dict(ref, blobs_data={"conv1": {"asum_mean": 0.74}, "pool1": {"asum_mean": 0.5}})
    kept, _ = selftest._explain_gpu_debug_lines(compare, ref_far, got, problems, 1e-5)
    assert any("conv1" in p for p in kept)

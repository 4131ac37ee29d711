"""benchmarks/bench_caffe.py's pure parts: the net list, batches, the prototxts it writes, the
parsing of ``caffe time`` output and the target line.  No Caffe is needed or run, and nothing
is timed."""
import math
import os

import pytest

from benchmarks import bench_caffe
from engine.core.upgrade import read_net_params

# The shape of ``caffe time``'s output (glog prefixes, OpenBLAS's verbose line) and of the
# engine's: what run_tool parses.
CAFFE_OUTPUT = """\
Core: Haswell
I0101 00:00:01.000000 12345 caffe.cpp:404] Average time per layer:
I0101 00:00:01.000001 12345 caffe.cpp:407]       data\tforward: 0.0021 ms.
I0101 00:00:01.000002 12345 caffe.cpp:410]       data\tbackward: 0.0013 ms.
I0101 00:00:01.000003 12345 caffe.cpp:407] conv1/7x7_s2\tforward: 61.25 ms.
I0101 00:00:01.000004 12345 caffe.cpp:410] conv1/7x7_s2\tbackward: 120.5 ms.
I0101 00:00:01.000005 12345 caffe.cpp:415] Average Forward pass: 537.353 ms.
I0101 00:00:01.000006 12345 caffe.cpp:417] Average Backward pass: 703.554 ms.
I0101 00:00:01.000007 12345 caffe.cpp:419] Average Forward-Backward: 1241.33 ms.
"""


def test_parse_nets_splits_on_commas_and_rejects_an_empty_list():
    assert bench_caffe.parse_nets("googlenet, resnet50,,caffenet ") == ["googlenet", "resnet50", "caffenet"]
    assert bench_caffe.parse_nets("/x/net.prototxt") == ["/x/net.prototxt"]
    with pytest.raises(ValueError, match="no net"):
        bench_caffe.parse_nets(" , ")


def test_net_batch_defaults_per_net_and_an_explicit_batch_wins():
    assert bench_caffe.net_batch("googlenet") == 10
    assert bench_caffe.net_batch("resnet50") == 4
    assert bench_caffe.net_batch("caffenet") == 10
    assert bench_caffe.net_batch("/some/path.prototxt") == 10
    assert bench_caffe.net_batch("resnet50", 2) == 2


def test_target_line_met_miss_and_nan():
    assert bench_caffe.target_line("googlenet", 0.49).startswith("MET  googlenet forward-backward <= 0.5x caffe")
    assert bench_caffe.target_line("googlenet", 0.5).startswith("MET ")
    line = bench_caffe.target_line("resnet50", 0.734)
    assert line.startswith("MISS resnet50") and line.endswith(": 0.734")
    assert bench_caffe.target_line("caffenet", float("nan")).startswith("MISS caffenet")
    assert bench_caffe.target_line("caffenet", 0.7, target=0.8).startswith("MET  caffenet forward-backward <= 0.8x")


def test_blas_cores_in_order_without_repeats():
    text = "Core: Haswell\nsomething\n  Core: SkylakeX\nCore: Haswell\nnot a Core: line? no\n"
    assert bench_caffe.blas_cores(text) == ["Haswell", "SkylakeX"]
    assert bench_caffe.blas_cores("I0101 no blas line here") == []


def test_parse_time_output_reads_averages_and_layers():
    res = bench_caffe.parse_time_output(CAFFE_OUTPUT)
    assert res["forward"] == 537.353 and res["backward"] == 703.554 and res["forward_backward"] == 1241.33
    assert res["layers"]["conv1/7x7_s2"] == {"forward": 61.25, "backward": 120.5}
    assert res["layers"]["data"]["forward"] == 0.0021
    assert bench_caffe.blas_cores(CAFFE_OUTPUT) == ["Haswell"]


def test_child_env_sets_threads_verbose_blas_and_the_core_when_asked():
    env = bench_caffe.child_env(1)
    assert env["OPENBLAS_VERBOSE"] == "2" and env["GLOG_logtostderr"] == "1"
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert "OPENBLAS_CORETYPE" not in env or env["OPENBLAS_CORETYPE"] == os.environ.get("OPENBLAS_CORETYPE")
    env = bench_caffe.child_env(2, "Haswell")
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and env["OPENBLAS_NUM_THREADS"] == "2"


def test_resnet50_prototxt_is_the_train_layout_with_fillers_at_the_batch(tmp_path):
    out = tmp_path / "resnet50.prototxt"
    types = bench_caffe.write_prototxt(bench_caffe.NETS["resnet50"], 3, str(out))
    p = read_net_params(str(out))
    inputs = [lp for lp in p.layer if lp.type == "Input"]
    assert len(inputs) == 1 and list(inputs[0].top) == ["data", "label"]
    assert [list(s.dim) for s in inputs[0].input_param.shape] == [[3, 3, 224, 224], [3]]
    assert types["fc1000"] == "InnerProduct" and types["loss"] == "SoftmaxWithLoss"
    convs = [lp for lp in p.layer if lp.type == "Convolution"]
    assert len(convs) == 53 and all(lp.convolution_param.weight_filler.type == "msra" for lp in convs)
    bns = [lp for lp in p.layer if lp.type == "BatchNorm"]
    assert bns and not any(lp.batch_norm_param.use_global_stats for lp in bns)


@pytest.mark.shared
def test_caffenet_prototxt_gets_the_batch_on_both_phases_inputs(tmp_path):
    src = bench_caffe.NETS["caffenet"]
    if not os.path.exists(src):
        pytest.skip("%s not found" % src)
    out = tmp_path / "caffenet.prototxt"
    types = bench_caffe.write_prototxt(src, 7, str(out))
    p = read_net_params(str(out))
    shapes = [list(s.dim) for lp in p.layer if lp.type == "Input" for s in lp.input_param.shape]
    assert shapes and all(dims[0] == 7 for dims in shapes)
    assert types["fc6"] == "InnerProduct" and types["norm1"] == "LRN"


def test_ratios_are_medians_of_per_round_ratios():
    caffe = [dict(forward=10.0, backward=20.0, forward_backward=30.0, cpu_s=2.0)] * 3
    mine = [dict(forward=5.0 * k, backward=10.0, forward_backward=15.0 * k, cpu_s=1.0 * k) for k in (1, 2, 3)]
    r = bench_caffe._ratios(mine, caffe)
    assert r["forward_backward"] == pytest.approx(1.0) and r["forward"] == pytest.approx(1.0)
    assert r["backward"] == pytest.approx(0.5) and r["process_cpu"] == pytest.approx(1.0)
    assert math.isnan(bench_caffe.median([]))


def test_main_without_caffe_skips_and_a_bad_net_list_is_a_usage_error(capsys):
    assert bench_caffe.main(["--net", "googlenet,resnet50"]) == 0
    assert "skipped: no Caffe binary" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        bench_caffe.main(["--net", ","])
    assert e.value.code == 2
    assert "no net given" in capsys.readouterr().err

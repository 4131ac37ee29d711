"""engine.instruments.caffe_log: real Caffe logs (../shared/golden/logs) and the engine's own glog output."""
import io
import json
import os
import sys

import numpy as np
import pytest

import engine
from engine.core import backend
from engine.instruments.caffe_log import parse_caffe_log, read_caffe_log, split_messages
from engine.instruments.compare import compare_runs
from engine.instruments.debug import Recorder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")


def _harness(shared_dir):
    path = str(shared_dir / "conformance")
    if path not in sys.path:
        sys.path.insert(0, path)
    import harness
    return harness


def _case(shared_dir, name):
    spec = json.loads((shared_dir / "golden" / "cases" / (name + ".json")).read_text())
    return spec, str(shared_dir / "zoo" / spec["prototxt"])


# ---------------------------------------------------------------------- structure
def test_glog_lines_and_continuations():
    text = ("WARNING: Logging before InitGoogleLogging() is written to STDERR\n"
            "I20261121 19:30:29.509073 24694 net.cpp:53] Initializing net from parameters: \n"
            'name: "x"\n'
            "layer {\n}\n"
            "E1121 19:30:28.265703  4645 net.cpp:721]     [Backward] All net params (data, diff): L1 norm = "
            "(1, 2); L2 norm = (3, 4)\n")
    msgs = split_messages(text)
    assert [(m.level, m.file, m.line, m.thread) for m in msgs] == [("I", "net.cpp", 53, 24694),
                                                                   ("E", "net.cpp", 721, 4645)]
    assert msgs[0].text.endswith('name: "x"\nlayer {\n}') and msgs[0].lineno == 2


@pytest.mark.shared
def test_reads_the_three_golden_logs(shared_dir):
    lg = read_caffe_log(shared_dir / "golden" / "logs" / "lenet_test.log")
    assert len(lg.nets) == 1
    net = lg.nets[0]
    assert (net.name, net.phase, net.memory_required) == ("LeNet", "TEST", 8086808)
    assert [l["name"] for l in net.layers][:2] == ["mnist", "label_mnist_1_split"]
    assert net.layers[1]["type"] == "Split" and net.top_shapes["conv1"] == [100, 20, 24, 24]
    assert net.need_backward["conv1"] and not net.need_backward["mnist"]
    assert net.outputs == ["accuracy", "loss"]
    assert [(s.kind, len(s.layers)) for s in lg.steps] == [("forward", 12), ("backward", 9)]
    fwd = lg.steps[0]
    conv1 = fwd.layer("conv1")
    assert conv1.layer_index == 2 and conv1.type == "Convolution"
    top = conv1.blob("top", 0)
    assert top.name == "conv1" and top.data.asum_mean == pytest.approx(0.727325) and top.data.partial
    assert top.data.shape == (100, 20, 24, 24) and top.data.count == 100 * 20 * 24 * 24
    assert conv1.blob("param", 1).data.asum_mean == pytest.approx(0.0973672)
    loss = lg.steps[1].layer("loss")
    assert loss.blob("bottom", 0).name == "ip2_ip2_0_split_1" and loss.blob("bottom", 0).propagate

    lg = read_caffe_log(shared_dir / "golden" / "logs" / "solver_sgd_lenet.log")
    assert [s.kind for s in lg.steps] == ["forward", "backward"] * 4
    assert [s.iteration for s in lg.steps] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert lg.steps[1].meta["l1_data"] == pytest.approx(12435.5)
    assert lg.steps[1].meta["l2_diff"] == pytest.approx(11.2647)
    assert [p.iteration for p in lg.train] == [0, 1, 2, 3]
    assert lg.series("loss") == ([0, 1, 2, 3], [2.70951, 2.37648, 2.45792, 2.43662])
    assert lg.series("lr")[1] == [0.01, 0.00999925, 0.0099985, 0.00999775]
    assert lg.train[1].iters_per_s == pytest.approx(11.7647) and lg.train[0].outputs == {"loss": [2.70951]}

    lg = read_caffe_log(shared_dir / "golden" / "logs" / "cifar10_bn_train.log")
    assert lg.nets[0].memory_required == 40145204
    assert lg.steps[0].layer("bn1").blob("param", 2).data.asum_mean == pytest.approx(1.999)


# ---------------------------------------------------------------------- the engine vs Caffe
@pytest.mark.shared
@pytest.mark.parametrize("name", ["lenet_test", "cifar10_bn_train"])
def test_parsed_numbers_match_the_engines_records(shared_dir, name):
    harness = _harness(shared_dir)
    spec, proto = _case(shared_dir, name)
    backend.set_mode_cpu()
    net = engine.Net(proto, engine.TRAIN if spec.get("phase") == "TRAIN" else engine.TEST)
    harness.fill_params(net, spec.get("weights_seed", 1))
    harness.fill_inputs(net, spec, spec.get("input_seed", 2))
    rec = Recorder(net)
    net.forward()
    net.backward()
    lg = read_caffe_log(shared_dir / "golden" / "logs" / (name + ".log"))
    assert lg.nets[0].memory_required == net.memory_used_bytes
    assert [l["name"] for l in lg.nets[0].layers] == net.layer_names
    for layer, need in zip(net.layer_names, net.layer_need_backward):
        assert lg.nets[0].need_backward[layer] == need
    for blob, shape in lg.nets[0].top_shapes.items():
        assert list(net.blobs[blob].shape) == shape
    cmp = compare_runs(rec, lg, rtol=1e-3)
    assert cmp.ok, cmp.format(only_bad=True)
    compared = sum(len(l.blobs) for l in cmp.layers)
    lines = sum(1 for m in lg.messages if "[Forward]" in m.text or "[Backward] Layer" in m.text)
    assert compared == lines                       # every debug line of the log was checked


@pytest.mark.shared
def test_solver_log_matches_the_engines_steps_and_series(shared_dir, tmp_path, caplog):
    import logging
    harness = _harness(shared_dir)
    spec, proto = _case(shared_dir, "solver_sgd_lenet")
    sp = tmp_path / "solver.prototxt"
    sp.write_text('net: "%s"\n%s\nsnapshot_prefix: "%s"\n' % (proto, spec["solver"], tmp_path / "s"))
    from engine.core.solvers import get_solver
    from engine.tools.cli import GlogFormatter
    backend.set_mode_cpu()
    solver = get_solver(str(sp))
    net = solver.net
    harness.fill_params(net, spec.get("weights_seed", 1))
    harness.fill_inputs(net, spec, spec.get("input_seed", 2))
    rec = Recorder(net)
    rec.attach_solver(solver)
    buf = io.StringIO()
    h = logging.StreamHandler(buf)
    h.setFormatter(GlogFormatter())
    lg_engine = logging.getLogger("engine")
    lg_engine.addHandler(h)
    old = lg_engine.level
    lg_engine.setLevel(logging.INFO)
    try:
        for _ in range(spec["steps"]):
            solver.step(1)
    finally:
        lg_engine.removeHandler(h)
        lg_engine.setLevel(old)
    caffe = read_caffe_log(shared_dir / "golden" / "logs" / "solver_sgd_lenet.log")
    cmp = compare_runs(rec, caffe, rtol=1e-3, kinds=("forward", "backward"))
    assert cmp.ok, cmp.format(only_bad=True)
    assert len({l.step for l in cmp.layers}) == 8
    ours = parse_caffe_log(buf.getvalue())
    assert [s.kind for s in ours.steps] == ["forward", "backward"] * 4   # our debug_info lines parse too
    it_c, loss_c = caffe.series("loss")
    it_e, loss_e = ours.series("loss")
    assert it_c == it_e
    np.testing.assert_allclose(loss_e, loss_c, rtol=1e-3)
    np.testing.assert_allclose(ours.series("lr")[1], caffe.series("lr")[1], rtol=1e-5)
    assert compare_runs(ours, caffe, rtol=1e-3).ok


# ---------------------------------------------------------------------- solver / test / time lines
def test_train_log_with_test_nets_and_the_test_and_time_commands(tmp_path):
    from engine.tools.cli import main
    sp = tmp_path / "solver.prototxt"
    sp.write_text('net: "%s"\ntest_iter: 2\ntest_interval: 2\nbase_lr: 0.01\nlr_policy: "step"\n'
                  'stepsize: 2\ngamma: 0.5\ndisplay: 1\nmax_iter: 4\nsnapshot_prefix: "%s"\nrandom_seed: 3\n'
                  % (LENET, tmp_path / "lenet"))
    out, err = io.StringIO(), io.StringIO()
    assert main(["train", "--solver", str(sp)], out, err) == 0
    lg = parse_caffe_log(err.getvalue())
    assert len(lg.nets) == 2 and [n.phase for n in lg.nets] == ["TRAIN", "TEST"]
    assert [p.iteration for p in lg.train][:4] == [0, 1, 2, 3]
    assert lg.series("lr")[1][:4] == [0.01, 0.01, 0.005, 0.005]
    assert [(p.iteration, p.net_id) for p in lg.test] == [(0, 0), (2, 0), (4, 0)]
    assert set(lg.test[0].outputs) == {"accuracy", "loss"}
    assert lg.series("accuracy", test=True)[0] == [0, 2, 4]
    weights = tmp_path / "lenet_iter_4.caffemodel"
    assert weights.exists()
    out, err = io.StringIO(), io.StringIO()
    assert main(["test", "--model", LENET, "--weights", str(weights), "--iterations", "3"], out, err) == 0
    lg = parse_caffe_log(err.getvalue())
    assert len(lg.scores["batches"]["loss"]) == 3 and set(lg.scores["means"]) == {"accuracy", "loss"}
    assert lg.scores["loss"] == pytest.approx(np.mean(lg.scores["batches"]["loss"]), rel=1e-4)
    out, err = io.StringIO(), io.StringIO()
    assert main(["time", LENET, "--iterations", "2"], out, err) == 0
    lg = parse_caffe_log(err.getvalue())
    assert set(lg.timing["layers"]) == set(engine.Net(LENET, engine.TRAIN).layer_names)
    assert len(lg.timing["iterations"]) == 2 and lg.timing["total_ms"] > 0
    assert lg.timing["forward_ms"] > 0 and "forward_backward_ms" in lg.timing

"""The callbacks as plain functions (no browser): load, graph, details,
stepping, findings, export; and the app and its command line."""
import json
import re

import numpy as np
import pytest
from inspector_testlib import ROOT, data_url

from inspector import create_app, ids
from inspector.callbacks import details, export, findings, graph, load, stepping
from inspector.callbacks.common import guarded, run_failed
from inspector.state.sessions import new_session_id


@pytest.fixture
def sid(app_ctx):
    s = new_session_id()
    load.handle_load(app_ctx, s, None)
    return s


def _session(app_ctx, sid):
    return app_ctx.store.get(sid)


def test_initial_load_and_examples(app_ctx, sid):
    s = _session(app_ctx, sid)
    assert s.loaded.graph.name == "LeNetDigits" and s.net_version == 1 and s.error is None
    v, err, s, stages = load.handle_load(app_ctx, sid, ids.EXAMPLE, example=app_ctx.examples[1][1])
    assert v == 2 and s.loaded.graph.name == "SiameseStages" and set(stages) == {"no-norm", "deploy"}
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.STAGES, phase="TEST", level=1, stages=["deploy"])
    assert v == 3 and s.loaded.graph.has_layer("probe") and s.loaded.graph.has_layer("deploy_prob")
    assert s.loaded.graph.phase_name == "TEST"


def test_phase_change_on_an_expired_session_loads_nothing(app_ctx):
    """An evicted tab's session is empty: its Phase/Level/Stages controls (or the
    renderer echoing them after a load) must not put the default net there in place of
    the tab's own, silently (the load test saw steps run on LeNet in a ResNet tab, and
    a refused upload's answer replaced by LeNet's).  Without an Example entry or a Model
    path naming the tab's net (an uploaded net: its label is no path), nothing is loaded."""
    sid = new_session_id()
    for trigger in (ids.PHASE, ids.LEVEL, ids.STAGES):
        for example, path in ((None, None), (None, "uploaded lenet.prototxt"), (None, "no/such.prototxt")):
            v, err, s, _ = load.handle_load(app_ctx, sid, trigger, phase="TRAIN", level=0, stages=[],
                                            example=example, path=path)
            assert s.loaded is None and v == 0 and err is None


def test_phase_change_on_an_expired_session_rebuilds_the_tabs_own_net(app_ctx):
    """A tab whose session the server let go (more newer tabs than it keeps) and whose
    controls still name its net -- the Example list's entry, or the Model path box -- gets
    that net back in the phase asked for, instead of a blank page ("no net loaded")."""
    tiny = "examples/resnet_tiny/resnet_tiny.prototxt"
    sid = new_session_id()
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.PHASE, phase="TEST", level=0, stages=[], path=tiny)
    assert err is None and v == 1 and s.loaded.graph.name == "TinyResNet" and s.loaded.graph.phase_name == "TEST"
    lenet_label, lenet_path, _ = app_ctx.examples[0]
    sid = new_session_id()
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.PHASE, phase="TRAIN", level=0, stages=[],
                                    example=lenet_path, path=tiny)
    assert err is None and s.loaded.spec.model == lenet_path and s.loaded.graph.phase_name == "TRAIN"
    # a live session keeps its own net whatever the boxes say (they follow the load)
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.PHASE, phase="TEST", level=0, stages=[], path=tiny)
    assert s.loaded.spec.model == lenet_path and s.loaded.graph.phase_name == "TEST"


def test_open_path_under_root_and_refuse_escape(app_ctx, sid):
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.MODEL_PATH_OPEN,
                                    path="examples/resnet_tiny/resnet_tiny.prototxt")
    assert err is None and s.loaded.graph.name == "TinyResNet"
    good = s.loaded
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.MODEL_PATH_OPEN, path="../../etc/passwd")
    assert "outside the model root" in err.message and s.loaded is good


def test_uploads_weights_and_mean(app_ctx, sid, tmp_path):
    s = _session(app_ctx, sid)
    s.loaded.net.save(str(tmp_path / "w.caffemodel"))
    w = s.loaded.net.params["conv1"][0].data.copy()
    load.handle_load(app_ctx, sid, ids.EXAMPLE, example=app_ctx.examples[0][1])     # fresh random weights
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.UPLOAD_WEIGHTS,
                                    upload=(data_url((tmp_path / "w.caffemodel").read_bytes()), "w.caffemodel"))
    assert err is None, err
    assert np.array_equal(s.loaded.net.params["conv1"][0].data, w)
    from engine.core import io as eio
    eio.write_binary(str(tmp_path / "m.binaryproto"), eio.array_to_blobproto(np.ones((1, 1, 28, 28), np.float32)))
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.UPLOAD_MEAN,
                                    upload=(data_url((tmp_path / "m.binaryproto").read_bytes()), "m.binaryproto"))
    assert err is None and s.loaded.mean.shape == (1, 28, 28) and s.loaded.spec.weights


def test_graph_render_and_selection(app_ctx, sid):
    els, title, legend, meta = graph.render(app_ctx, sid, "category", "edges", ["fold_splits", "labels", "ghosts"],
                                            None)
    assert len([e for e in els if e["data"].get("kind") == "layer"]) > 3 and "LeNet" in title
    assert legend and meta["n"] == len(els) and meta["net"]
    els2, _t, _l, _m = graph.render(app_ctx, sid, "data", "nodes", [], None)
    assert any(e["data"].get("kind") == "blob" for e in els2)
    assert graph.selection_from_tap({"kind": "layer", "name": "conv1", "members": "|conv1|"}) == \
        {"kind": "layer", "name": "conv1"}
    assert graph.selection_from_tap({"blob": "conv1", "source": "L1"}, edge=True) == {"kind": "blob", "name": "conv1"}
    assert graph.selection_from_tap({"kind": "group", "name": "res2"}) == {"kind": "block", "name": "res2"}
    assert graph.selection_from_tap({"kind": "block", "name": "res2"}) == {"kind": "block", "name": "res2"}
    assert graph.selection_from_tap(None) is None
    items = graph.search_results(app_ctx, sid, "conv")
    assert 'data-name' in str(items) and "conv1" in str(items) and "Convolution" in str(items)
    sel, _exp, focus = graph.pick(app_ctx, sid, {"kind": "layer", "name": "conv2", "n": 3}, None)
    assert sel == {"kind": "layer", "name": "conv2"} and focus["n"] == 3


def test_details(app_ctx, sid):
    children, style = details.details(app_ctx, sid, {"kind": "layer", "name": "conv1"})
    assert style["display"] == "none" and "Convolution" in str(children)
    children, style = details.details(app_ctx, sid, {"kind": "blob", "name": "conv1"})
    assert style["display"] == "block" and "64×20×24×24" in str(children)
    children, _ = details.details(app_ctx, sid, {"kind": "ghost", "name": "accuracy"})
    assert "filtered out" in str(children)
    children, _ = details.details(app_ctx, sid, {"kind": "layer", "name": "nope"})
    assert "not in this net" in children
    hist, fmap, table, _pin = details.blob_view(app_ctx, sid, {"kind": "blob", "name": "conv1"}, "data", 0, 0, "0,3")
    assert hist.data[0].type == "bar" and fmap.data[0].type == "heatmap" and "values at [0, 3" in str(table)
    hist, fmap, table, _pin = details.blob_view(app_ctx, sid, {"kind": "blob", "name": "loss"}, "diff", 0, 0, "")
    assert fmap.layout.annotations                       # a scalar: no maps


def test_stepping_actions(app_ctx, sid):
    v0 = _session(app_ctx, sid).run_version
    v, msg = stepping.act(app_ctx, sid, ids.FORWARD, "conv1", "ip1")
    assert "ForwardFromTo(1, 5)" in msg and v > v0
    v, msg = stepping.act(app_ctx, sid, ids.FORWARD, "ip1", "conv1")
    assert msg.startswith("⚠") and "start <= end" in msg
    v, msg = stepping.act(app_ctx, sid, ids.STEP_FORWARD)
    assert "ForwardFromTo(6, 6)" in msg
    v, msg = stepping.act(app_ctx, sid, ids.RUN_TO, selection={"kind": "layer", "name": "loss"})
    assert "ForwardFromTo(7, 8)" in msg
    v, msg = stepping.act(app_ctx, sid, ids.RUN_TO, selection=None)
    assert "select a layer" in msg
    v, msg = stepping.act(app_ctx, sid, ids.BACKWARD, "conv1", "loss")
    assert "BackwardFromTo(8, 1)" in msg
    v, msg = stepping.act(app_ctx, sid, ids.STEP_BACKWARD)
    assert "BackwardFromTo(0, 0)" in msg and "needs no backward" in msg
    v, msg = stepping.act(app_ctx, sid, ids.FORWARD_BACKWARD)
    assert "loss" in msg
    v, msg = stepping.act(app_ctx, sid, ids.RESET)
    s = _session(app_ctx, sid)
    assert "reset" in msg and not s.loaded.recorder.steps
    assert float(s.loaded.net.blobs["conv1"].data.std()) == 0.0
    assert float(s.loaded.net.blobs["loss"].diff) == 1.0          # the loss weight is back
    v, msg = stepping.act(app_ctx, sid, ids.APPLY_INPUTS,
                          settings=stepping.input_settings("constant", 2.0, 0, None, None, ["crop"], "2,1,0",
                                                           255, ""))
    assert "constant 2" in msg and (s.loaded.net.blobs["data"].data == 2).all()
    v, msg = stepping.act(app_ctx, sid, ids.SOLVER_STEP)
    assert msg.startswith("⚠")


def test_run_failed_message_refusal_or_failure(caplog):
    from types import SimpleNamespace

    from inspector.state import runner
    s = SimpleNamespace(run_version=3)
    assert run_failed(s, "forward", runner.RunRefused("no net is loaded")) == "⚠ no net is loaded"
    assert s.run_version == 3 and not caplog.records          # a refusal: nothing ran, nothing logged
    try:
        raise FloatingPointError("layer conv1 blew up")
    except FloatingPointError as exc:
        msg = run_failed(s, "forward", exc)
    assert msg == "⚠ FloatingPointError: layer conv1 blew up" and s.run_version == 4
    assert "forward failed" in caplog.text and "Traceback" in caplog.text


def test_device_switch_refused_without_gpu(app_ctx, sid):
    from inspector import adapters
    if adapters.gpu_available():
        pytest.skip("a GPU is present")
    v, msg = stepping.act(app_ctx, sid, ids.DEVICE, device="GPU")
    assert "no GPU" in msg and _session(app_ctx, sid).device == "CPU"


@pytest.mark.gpu
def test_gpu_session(app_ctx, sid):
    v, msg = stepping.act(app_ctx, sid, ids.DEVICE, device="GPU")
    assert msg == "device: GPU"
    v, msg = stepping.act(app_ctx, sid, ids.FORWARD_BACKWARD)
    assert "loss" in msg and not msg.startswith("⚠")
    s = _session(app_ctx, sid)
    assert s.loaded.recorder.steps[-1].device == "GPU"
    hist, fmap, _t, _pin = details.blob_view(app_ctx, sid, {"kind": "blob", "name": "conv1"}, "diff", 0, 0, "")
    assert fmap.data[0].type == "heatmap"
    v, msg = stepping.act(app_ctx, sid, ids.DEVICE, device="CPU")
    v, msg = stepping.act(app_ctx, sid, ids.FORWARD, "digits", "loss")
    assert "ForwardFromTo(0, 8)" in msg


def test_layer_failure_mid_range_keeps_session(app_ctx, sid):
    s = _session(app_ctx, sid)
    s.loaded.net.blobs["label"].data[...] = 99          # labels out of range: SoftmaxWithLoss may complain
    v, msg = stepping.act(app_ctx, sid, ids.FORWARD, "digits", "loss")
    v2, msg2 = stepping.act(app_ctx, sid, ids.STEP_FORWARD)
    assert msg2                                           # the session still answers


def test_range_options(app_ctx, sid):
    opts, end_opts, first, last, solver = stepping.range_options(app_ctx, sid)
    assert opts[1] == {"label": "1 conv1", "value": "conv1"} and first == "digits" and last == "loss"
    assert opts == end_opts and len(opts) == 9                  # a small net: every layer listed
    assert solver is False
    assert stepping.searched_options(app_ctx, sid, "ip", "digits") == [
        {"label": "0 digits", "value": "digits"}, {"label": "5 ip1", "value": "ip1"},
        {"label": "7 ip2", "value": "ip2"}]


def test_range_options_of_a_big_net_are_few_and_searched():
    names = ["l%d" % i for i in range(721)]
    first = stepping.layer_options(names, "l0")
    assert len(first) == stepping.RANGE_SHOWN and first[0]["value"] == "l0"
    last = stepping.layer_options(names, "l720")
    assert len(last) == stepping.RANGE_SHOWN and last[-1] == {"label": "720 l720", "value": "l720"}
    mid = [o["value"] for o in stepping.layer_options(names, "l300")]
    assert "l300" in mid and "l280" in mid and "l319" in mid
    found = [o["value"] for o in stepping.layer_options(names, "l0", "72")]   # names and indices
    assert found[:3] == ["l0", "l72", "l172"] and "l720" in found and len(found) <= stepping.RANGE_SHOWN + 1


def test_solver_iteration(app_ctx, sid):
    solver = ROOT / "examples" / "lenet" / "lenet_solver.prototxt"
    v, err, s, _ = load.handle_load(app_ctx, sid, ids.UPLOAD_SOLVER,
                                    upload=(data_url(solver.read_text()), "lenet_solver.prototxt"))
    assert err is None, err and err.message
    assert s.loaded.solver is not None
    w0 = s.loaded.net.params["conv1"][0].data.copy()
    v, msg = stepping.act(app_ctx, sid, ids.SOLVER_STEP)
    assert "solver iteration 0 (now iter 1)" in msg, msg     # Caffe numbers the first iteration 0
    assert not np.array_equal(w0, s.loaded.net.params["conv1"][0].data)
    from inspector.views.run_state import STALE, layer_states
    st = layer_states(s.loaded.graph, s.loaded.runlog)
    assert st[s.loaded.graph.layer("conv1").index][0] == STALE      # params changed after the update


def test_findings_and_nan(app_ctx, overflow_net):
    sid = new_session_id()
    app_ctx.config.model = str(overflow_net)
    load.handle_load(app_ctx, sid, None)
    out = findings.findings(app_ctx, sid, "")
    assert len(out) == 8 and "Network initialization done" in out[6]
    style, text = findings.nan_alert(app_ctx, sid)
    assert style == {"display": "none"}
    stepping.act(app_ctx, sid, ids.FORWARD_BACKWARD)
    style, text = findings.nan_alert(app_ctx, sid)
    assert style["display"] == "flex" and "exp1" in text
    assert findings.nan_selection(app_ctx, sid) == {"kind": "layer", "name": "exp1"}
    out = findings.findings(app_ctx, sid, "")
    assert "[Forward] Layer exp1, top blob e1 data: inf" in out[7]
    assert "exp1" in str(out[0]) and "nonfinite" in str(out[0])       # engine.instruments.health's finding


def test_export_report(app_ctx, sid):
    stepping.act(app_ctx, sid, ids.FORWARD_BACKWARD)
    data = export.report(app_ctx, sid, "json")
    assert data["filename"] == "LeNetDigits_report.json"
    doc = json.loads(data["content"])
    assert "conv1" in data["content"]
    assert doc["schema"] == "engine-report"
    for fmt, ext, needle in (("html", "html", "<html"), ("markdown", "md", "conv1"), ("csv", "csv", "conv1")):
        d = export.report(app_ctx, sid, fmt)
        assert d["filename"].endswith("." + ext) and needle in d["content"]


def test_guarded_returns_no_update_on_error():
    from dash import no_update

    @guarded(2)
    def boom():
        raise RuntimeError("nope")

    assert boom() == (no_update, no_update)


def test_create_app_and_layout():
    from inspector.config import InspectorConfig
    app = create_app(InspectorConfig(model_root=str(ROOT)))
    page = app.layout()
    text = str(page)
    for i in (ids.GRAPH, ids.SESSION, ids.FORWARD, ids.UPLOAD_MODEL, ids.NAN_ALERT):
        assert i in text
    assert len(app.callback_map) >= 12
    # two page loads: two sessions
    assert app.layout().children[0].data != app.layout().children[0].data


def test_command_line():
    import importlib.util
    spec = importlib.util.spec_from_file_location("inspector_main", ROOT / "app.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    cfg = m.config_from_args(m.parse_args(["net.prototxt", "--weights", "w", "--stage", "a", "--stage", "b",
                                           "--level", "2", "--phase", "TEST", "--model-root", "/tmp",
                                           "--allow-python-layers"]))
    assert (cfg.model, cfg.weights, cfg.stages, cfg.level, cfg.phase) == ("net.prototxt", "w", ("a", "b"), 2, "TEST")
    assert cfg.host == "127.0.0.1" and cfg.model_root == "/tmp" and cfg.allow_python_layers
    assert m.config_from_args(m.parse_args(["deploy.prototxt"])).phase == "TEST"
    cfg = m.config_from_args(m.parse_args(["--max-sessions", "2", "--idle-minutes", "0.5"]))
    assert cfg.max_sessions == 2 and cfg.idle_seconds == 30 and cfg.model is None


def test_error_text_shows_a_python_layers_note():
    """A Python layer's own exception keeps its type; the page still names the layer."""
    from engine.core.layers.python_layer import add_layer_context
    from inspector.callbacks.common import error_text
    exc = ZeroDivisionError("division by zero")
    add_layer_context(exc, "py", "raised by forward() of Python layer 'py' (mod.Fails)")
    assert error_text(exc) == ("ZeroDivisionError: division by zero (raised by forward() of Python layer 'py' "
                               "(mod.Fails))")
    assert error_text(ValueError("plain")) == "ValueError: plain"


def test_findings_say_what_an_empty_list_means(app_ctx, tmp_path):
    # a net whose run raises no finding: the empty list says the checks ran, not "run forward first"
    net = tmp_path / "calm.prototxt"
    net.write_text('name: "Calm"\n'
                   'layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 5 } } }\n'
                   'layer { name: "half" type: "Power" bottom: "data" top: "out" power_param { scale: 0.5 } }\n')
    sid = new_session_id()
    app_ctx.config.model = str(net)
    load.handle_load(app_ctx, sid, None)
    assert "run forward/backward first" in str(findings.findings(app_ctx, sid, "")[0])
    stepping.act(app_ctx, sid, ids.FORWARD_BACKWARD)
    out = findings.findings(app_ctx, sid, "")
    assert "found nothing in the records" in str(out[0]) and "run forward" not in str(out[0])
    # a log filter that matches nothing says so (not "run forward")
    out = findings.findings(app_ctx, sid, "no-such-text")
    assert out[6] == out[7] == "(no line contains 'no-such-text')"


def test_root_cause_first_in_the_alert_and_one_finding_one_badge(app_ctx, tmp_path):
    # a deploy net whose BatchNorm statistics were never filled (no .caffemodel): the alert
    # names that cause before the first NaN/Inf, and the graph's badges are the Findings tab's
    from inspector.state import presenter
    from tests.test_health import _bn_stack
    p = tmp_path / "bn_stack.prototxt"
    p.write_text(_bn_stack(20))
    sid = new_session_id()
    app_ctx.config.model = str(p)
    load.handle_load(app_ctx, sid, None)
    with app_ctx.store.use(sid) as s:
        names = [layer.name for layer in s.loaded.graph.layers]
    stepping.act(app_ctx, sid, ids.FORWARD, names[0], names[-1])
    style, text = findings.nan_alert(app_ctx, sid)
    assert style["display"] == "flex"
    assert re.match(r"Root cause: BatchNorm statistics never filled in \d+ BatchNorm layers \(bn0, bn1", text)
    assert text.index("Root cause") < text.index("First NaN/Inf at layer")
    tab = findings.findings(app_ctx, sid, "")[0]
    assert "root_cause" in str(tab)
    with app_ctx.store.use(sid) as s:
        badges = presenter.findings_by_layer(s.loaded)
        health = presenter.findings(s.loaded)["health"]
    worst = {}
    for f in health:       # the tab's findings, worst per layer, are exactly the badges
        worst.setdefault(f["layer"], f["severity"])
    assert {k: v[0] for k, v in badges.items()} == {k: v for k, v in worst.items() if k}
    assert badges["bn0"][0] == "error"


def test_dead_relu_badges_fold_into_weights_not_loaded(app_ctx, tmp_path):
    from inspector.state import presenter
    from tests.test_health import DEPLOY
    p = tmp_path / "deploy.prototxt"
    p.write_text(DEPLOY)
    sid = new_session_id()
    app_ctx.config.model = str(p)
    load.handle_load(app_ctx, sid, None)
    stepping.act(app_ctx, sid, ids.FORWARD, "in", "relu3")
    with app_ctx.store.use(sid) as s:
        badges = presenter.findings_by_layer(s.loaded)
    assert not any(n.startswith("relu") for n in badges), badges      # one finding, one badge
    assert [v[1].split(":")[0] for v in badges.values()] == ["weights not loaded"]


def test_save_onnx_gives_a_model_onnxruntime_reproduces_and_refuses_data_layers(app_ctx, sid, tmp_path):
    pytest.importorskip("onnxruntime")
    import base64

    from inspector_testlib import DEPLOY_NET

    import engine.ports as ports
    from inspector.callbacks import image_export
    # a Filter layer's output size depends on its data: no ONNX form, refused naming the layer
    f = tmp_path / "filter.prototxt"
    f.write_text('name: "F"\nlayer { name: "in" type: "Input" top: "x" top: "sel" input_param { shape { dim: 4 '
                 'dim: 3 } shape { dim: 4 } } }\nlayer { name: "keep" type: "Filter" bottom: "x" bottom: "sel" '
                 'top: "y" }\n')
    sid1 = new_session_id()
    app_ctx.config.model = str(f)
    load.handle_load(app_ctx, sid1, None)
    data, status = image_export.onnx_download(app_ctx, sid1)
    assert data is None and status.startswith("not saved:") and "keep" in status and "Filter" in status
    p = tmp_path / "deploy.prototxt"
    p.write_text(DEPLOY_NET)
    sid2 = new_session_id()
    app_ctx.config.model = str(p)
    load.handle_load(app_ctx, sid2, None)
    data, status = image_export.onnx_download(app_ctx, sid2)
    assert status.startswith("saved TinyDeploy.onnx") and data["filename"] == "TinyDeploy.onnx"
    path = tmp_path / "tiny.onnx"
    path.write_bytes(base64.b64decode(data["content"]))
    with app_ctx.store.use(sid2) as s:
        result = ports.verify(s.loaded.net, str(path))
    assert result.ok, result


def test_compare_tab_this_net_vs_an_onnx_port(app_ctx, tmp_path):
    # a port with LRN's alpha divided by size once more: the tab names norm1 (its own arithmetic
    # departs when fed this net's own pool1), says why, and colours/selects the graph by it
    pytest.importorskip("onnxruntime")
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "ports"))
    import port_nets as pn

    from inspector.callbacks import compare
    from inspector.state import presenter
    p = tmp_path / "small.prototxt"
    p.write_text(pn.SMALL)
    sid = new_session_id()
    app_ctx.config.model = str(p)
    load.handle_load(app_ctx, sid, None)
    with app_ctx.store.use(sid) as s:
        net = s.loaded.net
        for blobs in net.params.values():          # trained-looking weights and statistics
            for b in blobs:
                b.data[...] = np.random.default_rng(1).uniform(0.5, 1.5, b.data.shape)
        port = pn.build_port(net)
    pn.attr(pn.node(port, "norm1"), "alpha", 0.02 / 5)
    msg, kind = compare.save_compare_upload(app_ctx, sid, data_url(port.SerializeToString(),
                                                                   "application/octet-stream"), "small_port.onnx")
    assert "this net vs an ONNX model" in msg and kind == "onnx"
    cmp, _ = compare.compare(app_ctx, sid, "onnx", rtol=1e-4)
    assert not cmp.ok and cmp.first_divergence.layer == "norm1"
    summary, fig, tbl = compare.compare_outputs(cmp)
    text = str(summary)
    assert "norm1" in text and "alpha" in text and "matched" in text
    assert "departs" in str(tbl)
    with app_ctx.store.use(sid) as s:
        m = presenter.metrics(s.loaded)
        g = s.loaded.graph
        assert m[g.layer("norm1").index].rel_diff > 1e-3 > m[g.layer("conv1").index].rel_diff
    # without an .onnx upload the comparison says what to do
    sid2 = new_session_id()
    load.handle_load(app_ctx, sid2, None)
    with pytest.raises(compare.CompareRefused, match="upload the ONNX model"):
        compare.compare(app_ctx, sid2, "onnx")

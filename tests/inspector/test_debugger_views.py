"""The debugger's view models, training history, long-action machinery and
callbacks as plain functions (no browser)."""
import threading
import time

import numpy as np
import pytest
from dash import no_update
from inspector_testlib import LENET, RESNET_TINY, SIAMESE, build_loaded, data_url

from inspector.callbacks import compare as compare_cb
from inspector.callbacks import downloads
from inspector.callbacks import training as training_cb
from inspector.state import jobs, presenter, runner
from inspector.state.sessions import ModelSpec, Session, SessionStore
from inspector.views import debug_figures, debug_views

HANG_GUARD = 120.0          # seconds a job thread may take before the test calls it hung (not a speed target)

SOLVER = ('net: "%s"\nbase_lr: 0.01\nmomentum: 0.9\nlr_policy: "inv"\ngamma: 0.0001\npower: 0.75\n'
          'display: 10\nmax_iter: 100\ntest_iter: 1\ntest_interval: 3\naverage_loss: 2\n')


@pytest.fixture
def trained_store(tmp_path):
    from inspector.state import loading
    solver = tmp_path / "solver.prototxt"
    solver.write_text(SOLVER % LENET)
    store = SessionStore(4, 3600)
    sid = "c" * 32
    with store.use(sid) as s:
        s.loaded = loading.build(ModelSpec(model=str(LENET), solver=str(solver)))
        runner.apply_inputs(s)
    return store, sid


# ------------------------------------------------------------------ training
def test_solver_iterations_fill_the_history(trained_store):
    store, sid = trained_store
    seen = []
    out = runner.run_solver(store, sid, 4, report=lambda d, n, t: seen.append((d, n, t)))
    assert out.done == 4 and out.stopped == "" and "4 iterations" in out.message
    assert [d for d, _n, _t in seen] == [1, 2, 3, 4] and "loss" in seen[-1][2]
    with store.use(sid) as s:
        h = s.loaded.training
        assert [p.iteration for p in h.train] == [0, 1, 2, 3]
        # Caffe's smoothed loss over average_loss (2) iterations
        assert h.train[2].smoothed == pytest.approx((h.train[1].loss + h.train[2].loss) / 2, rel=1e-6)
        # the rate the update used: inv policy base_lr * (1 + gamma * it) ^ -power
        for p in h.train:
            assert p.lr == pytest.approx(0.01 * (1 + 0.0001 * p.iteration) ** -0.75, rel=1e-5)
        assert h.train[-1].loss < h.train[0].loss
        assert "loss" in h.train[0].outputs
        # update ratios for every learnable param, one per iteration
        assert set(h.ratios) >= {"conv1/0", "conv1/1", "ip2/0"}
        assert [it for it, _r in h.ratios["conv1/0"]] == [0, 1, 2, 3]
        assert all(0 < r < 1 for _it, r in h.ratios["conv1/0"])
        # the test net ran at iteration 3 (test_interval 3), with the TEST phase's outputs
        assert [t.iteration for t in h.test] == [3] and {"accuracy", "loss"} <= set(h.test[0].outputs)
        # Caffe's log lines, for the findings' filter
        texts = [m for _lvl, m in h.log]
        assert any(m.startswith("Iteration 0 (") and ", loss = " in m for m in texts)
        assert any(m.startswith("Iteration 2, lr = ") for m in texts)


def test_a_test_pass_past_the_pages_run_limit_stops_and_records_nothing(trained_store):
    """The page's --run-seconds bounds a solver step's test pass too: it stops between two
    test iterations once the limit has passed, says so, and records no partial mean."""
    from engine.instruments.breakpoints import TimeLimit
    from inspector.state import training
    store, sid = trained_store
    with store.use(sid) as s:
        full = training.maybe_test(s, s.loaded, force=True)             # no limit: the whole pass
        assert {"accuracy", "loss"} <= set(full) and len(s.loaded.training.test) == 1
        s.run_limit = TimeLimit(-1.0, "--run-seconds 0")                 # already passed
        s.loaded.training.settings.test_iter = 3
        stopped = training.maybe_test(s, s.loaded, force=True)
        s.run_limit = None
        assert isinstance(stopped, training.StoppedTestPass) and (stopped.done, stopped.of) == (1, 3)
        assert stopped.text() == ("test pass stopped after 1 of 3 test iterations: time limit reached: -1 s "
                                  "(--run-seconds 0); not recorded")
        assert len(s.loaded.training.test) == 1                          # nothing recorded
        assert s.loaded.training.log[-1] == ("WARNING", "Iteration 0, Testing net (#0): " + stopped.text())


def test_transcript_filter_iteration_shows_iteration_lines(trained_store):
    from inspector.state import presenter
    store, sid = trained_store
    runner.run_solver(store, sid, 2)
    with store.use(sid) as s:
        lines = presenter.findings(s.loaded, "Iteration")["transcript"]
    assert lines and all("Iteration" in l for l in lines)
    assert any("Iteration 1 (" in l for l in lines)


def test_solver_run_cancelled_between_iterations(trained_store):
    store, sid = trained_store
    tok = jobs.CancelToken()

    def report(done, n, text):
        if done == 2:
            tok.cancel()

    out = runner.run_solver(store, sid, 50, report=report, token=tok)
    assert out.stopped == "cancelled" and out.done == 2
    assert "cancelled after 2 of 50 iterations" in out.message
    with store.use(sid) as s:
        assert len(s.loaded.training.train) == 2 and s.job is None and int(s.loaded.solver.iter) == 2


def test_solver_run_refuses_without_solver():
    store = SessionStore(2, 3600)
    sid = "d" * 32
    with store.use(sid) as s:
        s.loaded = build_loaded(LENET)
    out = runner.run_solver(store, sid, 3)
    assert out.done == 0 and out.stopped == "error" and out.message.startswith("⚠")


def test_full_records_pass_with_progress_and_cancel(app_ctx):
    sid = "e" * 32
    with app_ctx.store.use(sid) as s:
        s.loaded = build_loaded(LENET)
        runner.apply_inputs(s)
    seen = []
    version, msg = training_cb.run_job(app_ctx, sid, "forward_backward", None,
                                       set_progress=lambda v: seen.append(v))
    assert msg.startswith("Forward + Backward: loss"), msg
    with app_ctx.store.use(sid) as s:
        total = training_cb.pass_total(s.loaded, "forward_backward")
    assert seen[-1][0] == str(total) and seen[-1][1] == str(total)
    # cancelled at the first progress report (after the first layer): what ran is
    # kept, the page says where it stopped
    tok = jobs.CancelToken()

    def report(done, n, text):
        tok.cancel()

    with app_ctx.store.use(sid) as s:
        n_steps = len(s.loaded.recorder.steps)
    msg = training_cb.run_pass(app_ctx, sid, "forward", report=report, token=tok)
    assert "Forward cancelled after forward of digits (1 of 9 layers)" in msg, msg
    with app_ctx.store.use(sid) as s:
        assert len(s.loaded.recorder.steps) == n_steps + 1
        assert len(s.loaded.recorder.steps[-1].layers) == 1 and s.job is None


def test_training_views_and_figures(trained_store):
    store, sid = trained_store
    runner.run_solver(store, sid, 4)
    with store.use(sid) as s:
        h = s.loaded.training
        curves = debug_views.training_curves(h)
        summary = debug_views.training_summary(h)
    assert curves["loss"][0] == [0, 1, 2, 3] and curves["test"]["accuracy"][0] == [3]
    assert "4 iterations" in summary and "lr" in summary and "test @3" in summary
    fig = debug_figures.training_figure(curves)
    names = [t.name for t in fig.data]
    assert names[:2] == ["loss", "smoothed loss"] and "test accuracy" in names and "lr" in names
    rf = debug_figures.ratios_figure(dict(h.ratios))
    assert len(rf.data) == min(12, len(h.ratios)) and rf.layout.yaxis.type == "log"
    empty = debug_figures.training_figure({})
    assert not empty.data and "no solver iterations" in empty.layout.annotations[0].text


# ------------------------------------------------------------------ honest messages and metrics
def test_loss_only_where_the_net_has_loss(tmp_path):
    deploy = tmp_path / "noloss.prototxt"
    deploy.write_text('name: "NoLoss"\nlayer { name: "in" type: "Input" top: "data" '
                      'input_param { shape { dim: 1 dim: 3 } } }\n'
                      'layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" '
                      'inner_product_param { num_output: 2 } }\n')
    s = Session(id="f" * 32)
    s.loaded = build_loaded(deploy)
    runner.apply_inputs(s)
    msg = runner.forward_range(s, "in", "fc")
    assert msg == "ForwardFromTo(0, 1): in → fc"            # no "loss 0" for a net without loss
    with pytest.raises(runner.RunRefused) as e:
        runner.backward_range(s, "fc", "in")
    assert "no loss" in str(e.value) and "force_backward" in str(e.value)
    assert "Backward did nothing" in runner.forward_backward(s)


def test_backward_before_forward_warns():
    s = Session(id="a1" * 16)
    s.loaded = build_loaded(LENET)
    runner.apply_inputs(s)
    msg = runner.backward_range(s, "loss", "conv1")
    assert msg.startswith("BackwardFromTo(8, 1): loss → conv1") and "did not run forward" in msg
    runner.forward_range(s, "digits", "loss")
    assert "did not run forward" not in runner.backward_range(s, "loss", "conv1")


def test_gradient_metrics_are_split():
    from inspector.state import presenter
    from inspector.views import view_models as vm
    s = Session(id="a2" * 16)
    s.loaded = build_loaded(LENET)
    runner.apply_inputs(s)
    runner.forward_backward(s)
    m = presenter.metrics(s.loaded)
    g = s.loaded.graph
    relu = m[g.layer("relu1").index]
    assert relu.param_diff is None and relu.diff > 0          # no params: only a bottom gradient
    ip2 = m[g.layer("ip2").index]
    assert ip2.param_diff > 0 and ip2.diff > 0
    labels = dict(vm.COLOUR_MODES)
    assert "bottom gradient" in labels["diff"] and "param gradient" in labels["param_diff"]


# ------------------------------------------------------------------ compare and export
def test_compare_weights_refuses_without_weights(app_ctx):
    sid = "a3" * 16
    with app_ctx.store.use(sid) as s:
        s.loaded = build_loaded(LENET)
    with pytest.raises(compare_cb.CompareRefused) as e:
        compare_cb.compare(app_ctx, sid, "weights")
    assert "no weights loaded" in str(e.value)


def test_compare_against_a_snapshot(app_ctx, tmp_path):
    sid = "a4" * 16
    with app_ctx.store.use(sid) as s:
        s.loaded = build_loaded(LENET)
        runner.apply_inputs(s)
        net = s.loaded.net
        net.params["ip1"][0].data[...] *= 2.0
        net.save(str(tmp_path / "snap.caffemodel"))
        net.params["ip1"][0].data[...] /= 2.0
        s.uploads["compare"] = str(tmp_path / "snap.caffemodel")
        s.upload_names["compare"] = "snap.caffemodel"
    cmp, _v = compare_cb.compare(app_ctx, sid, "file", rtol=1e-4)
    assert cmp.first_divergence.layer == "ip1"
    with app_ctx.store.use(sid) as s:
        from inspector.state import presenter
        vals = debug_views.compare_layer_values(cmp, s.loaded.graph)
        m = presenter.metrics(s.loaded)
        g = s.loaded.graph
        assert vals[g.layer("ip1").index] > 0.1
        fwd = {l.layer: l for l in cmp.layers if l.kind == "forward"}
        assert fwd["conv1"].ok and fwd["pool2"].ok and not fwd["ip1"].ok     # forward parts at ip1
        assert m[g.layer("ip1").index].rel_diff == vals[g.layer("ip1").index]
    head, _notes = debug_views.compare_summary(cmp)
    assert "part at layer 'ip1'" in head
    bars = debug_views.compare_bars(cmp)
    fig = debug_figures.compare_figure(bars, cmp.rtol)
    assert len(fig.data[0].y) == len(bars)


def test_npy_export(app_ctx):
    sid = "a5" * 16
    with app_ctx.store.use(sid) as s:
        s.loaded = build_loaded(LENET)
        runner.apply_inputs(s)
        runner.forward_backward(s)
        want = np.array(s.loaded.net.blobs["ip1"].diff)
    name, arr = downloads.blob_array(app_ctx, sid, {"kind": "blob", "name": "ip1"}, "diff")
    assert name == "ip1_diff.npy" and np.array_equal(arr, want)
    import io
    back = np.load(io.BytesIO(downloads.npy_bytes(arr)))
    assert np.array_equal(back, want) and back.dtype == np.float32
    with pytest.raises(downloads.ExportRefused):
        downloads.blob_array(app_ctx, sid, {"kind": "layer", "name": "ip1"}, "data")


# ------------------------------------------------------------------ the job manager
def test_thread_job_manager_runs_cancels_and_keeps_results(tmp_path):
    m = jobs.ThreadJobManager(str(tmp_path / "cache"))
    started = threading.Event()

    def job_fn(key, progress_key, args, context):
        started.set()
        tok = jobs.current_token()
        for _ in range(200):
            if tok.cancelled:
                m.handle.set(key, "stopped")
                return
            time.sleep(0.01)
        m.handle.set(key, "finished")

    jid = m.call_job_fn("k1", job_fn, [], {})
    assert started.wait(HANG_GUARD) and m.job_running(jid)
    m.terminate_job(str(jid))                 # Dash hands the handle back as a string
    m.wait_all(HANG_GUARD)
    assert not m.job_running(jid) and m.handle.get("k1") == "stopped"
    jid2 = m.call_job_fn("k2", lambda *a: m.handle.set("k2", 42), [], {})
    m.wait_all(HANG_GUARD)
    assert m.result_ready("k2") and m.get_result("k2", jid2) == 42
    assert not m.job_running("not-a-job") and m.terminate_unhealthy_job(jid2) is False


# ------------------------------------------------------------------ timeline and breakpoints through the runner
def test_actions_become_timeline_steps_with_their_hits():
    from inspector.state import debugger
    s = Session(id="b1" * 16)
    s.loaded = build_loaded(LENET)
    runner.apply_inputs(s)
    runner.forward_range(s, "digits", "pool1")
    runner.forward_backward(s)
    debugger.breakpoints(s).add("layer=ip1", net=s.loaded.net)
    msg = runner.forward_backward(s)
    assert "stopped in forward after ip1" in msg and "break: ip1: layer=ip1" in msg
    tl = s.loaded.timeline
    assert [(st.index, st.action) for st in tl] == [(0, "forward"), (1, "forward_backward"), (2, "forward_backward")]
    assert tl[1].kinds == ("forward", "backward") and tl[2].kinds == ("forward",)
    assert [h.message for h in tl[2].hits] == ["break: ip1: layer=ip1"] and "stopped: break: ip1" in tl[2].label
    assert s.last_hit is tl[2].hits[0]
    rows = debug_views.timeline_rows(tl, s.loaded.graph)
    assert [r["step"] for r in rows] == [2, 1, 0] and rows[-1]["layers"] == "digits → pool1"
    assert "3 steps (0..2)" in debug_views.timeline_memory(tl)
    opts = debug_views.step_options(tl)
    assert [o["value"] for o in opts] == [0, 1, 2]


def test_solver_iteration_stopped_by_a_breakpoint_before_the_update(trained_store):
    from inspector.state import debugger
    store, sid = trained_store
    with store.use(sid) as s:
        debugger.breakpoints(s).add("ip1.diff.mean_abs > 0", net=s.loaded.net)
        before = np.array(s.loaded.net.params["ip1"][0].data)
    out = runner.run_solver(store, sid, 5)
    assert out.stopped == "breakpoint" and out.done == 1
    with store.use(sid) as s:
        assert "stopped in backward after ip2, before the update" in s.message
        assert int(s.loaded.solver.iter) == 0                                  # the update did not happen
        assert np.array_equal(s.loaded.net.params["ip1"][0].data, before)
        assert s.loaded.timeline.last.hits[0].layer == "ip2"
        # a loss condition is checked after each iteration instead
        bps = debugger.breakpoints(s)
        bps.enable(1, False)
        bps.add("loss < 100")
    out = runner.run_solver(store, sid, 5)
    assert out.stopped == "breakpoint" and out.done == 1
    with store.use(sid) as s:
        assert int(s.loaded.solver.iter) == 1 and s.last_hit.condition == "loss < 100"


def test_report_export_names_the_upload_not_its_folder(app_ctx, tmp_path):
    from inspector.callbacks import export
    from inspector.state import loading
    sid = "b2" * 16
    with app_ctx.store.use(sid) as s:
        path = loading.save_upload(s, "model", "mynet.prototxt", data_url(open(LENET).read()), 1 << 20)
        s.loaded = loading.build(ModelSpec(model=path, uploaded=True, label="mynet.prototxt"))
        runner.apply_inputs(s)
        runner.forward_backward(s)
        folder = s.upload_dir
    for fmt in ("html", "markdown", "json"):
        data = export.report(app_ctx, sid, fmt)
        assert folder not in data["content"] and "mynet.prototxt" in data["content"]
    assert "Timeline" in export.report(app_ctx, sid, "html")["content"]


def test_nan_alert_names_every_source(tmp_path):
    net = tmp_path / "two.prototxt"
    net.write_text('name: "Two"\nlayer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 4 } } }\n'
                   'layer { name: "log" type: "Log" bottom: "x" top: "a" }\n'
                   'layer { name: "pow" type: "Power" bottom: "x" top: "b" power_param { power: 0.5 } }\n')
    s = Session(id="b3" * 16)
    s.loaded = build_loaded(net, phase="TEST")
    s.loaded.net.blobs["x"].data[...] = -1.0
    runner.forward_range(s, 0, 3)                      # in, the split of x, log, pow
    srcs = debug_views.nonfinite_sources(s.loaded.recorder.steps, s.loaded.net)
    assert [x.layer for x in srcs] == ["log", "pow"]
    text = debug_views.sources_text(srcs)
    assert "2 sources of NaN/Inf: log (forward), pow (forward)" in text


def test_reports_fold_the_graph_as_the_page_opens_it(shared_dir):
    from engine.instruments import blocks as B
    from engine.instruments import folded_graph as F
    from inspector.state import presenter
    model = shared_dir / "zoo" / "models" / "bvlc_googlenet" / "deploy.prototxt"
    ld = build_loaded(model, phase="TEST")
    display, _layout = presenter.display_and_layout(ld, presenter.DEFAULT_OPTIONS)       # splits folded
    page = {(n.kind, n.block or n.name) for n in display.nodes if n.kind in ("layer", "block")}
    layers = B.net_layers(ld.net)
    fg = F.folded_graph(layers, B.with_sections(layers, B.find_blocks(layers)))
    report = {(n.kind, n.name) for n in fg.nodes if n.kind in ("layer", "block")}
    assert report == page and len([k for k, _ in page if k == "block"]) == 10    # conv2 folded in "input"
    assert set(fg.groups) == set(display.groups)


def test_step_back_over_siamese_contrastive_loss_before_its_forward():
    """Stepping back over the Siamese net's ContrastiveLoss before any forward raised
    AttributeError 'dist_sq' (the load test met it); Caffe's Backward there computes on the
    zero buffers LayerSetUp shaped: zero gradients, and a later Forward + Backward gives what a
    fresh net gives."""
    s = Session(id="a5" * 16)
    s.loaded = build_loaded(SIAMESE)
    runner.apply_inputs(s)
    net = s.loaded.net
    n = len(net.layers)
    msg = runner.step_backward(s)
    assert msg.startswith("step back: BackwardFromTo(%d, %d): loss → loss" % (n - 1, n - 1))
    assert "did not run forward" in msg
    assert not net.blobs["feat"].diff.any() and not net.blobs["feat_p"].diff.any()
    for _ in range(n - 1):                                   # every layer back to the inputs
        assert not runner.step_backward(s).startswith("⚠")
    assert all(not p.diff.any() for blobs in net.params.values() for p in blobs)
    runner.forward_backward(s)
    fresh = Session(id="a6" * 16)
    fresh.loaded = build_loaded(SIAMESE)
    for layer, blobs in net.params.items():             # the same weights (the fillers drew others)
        for a, b in zip(blobs, fresh.loaded.net.params[layer]):
            b.data[...] = a.data
    runner.apply_inputs(fresh)
    runner.forward_backward(fresh)
    for name in ("feat", "feat_p", "conv", "conv_p"):
        np.testing.assert_array_equal(net.blobs[name].diff, fresh.loaded.net.blobs[name].diff)
    for layer, blobs in net.params.items():
        for a, b in zip(blobs, fresh.loaded.net.params[layer]):
            np.testing.assert_array_equal(a.diff, b.diff)
    assert float(net.blobs["loss"].data) == float(fresh.loaded.net.blobs["loss"].data) > 0


def test_a_breakpoint_hit_and_a_comparison_select_open_and_centre_their_layer(app_ctx, tmp_path):
    from inspector.callbacks import breakpoints as bp_cb
    from inspector.callbacks import stepping
    from inspector.ids import FORWARD
    from inspector.state import debugger
    sid = "c1" * 16
    with app_ctx.store.use(sid) as s:
        s.loaded = build_loaded(RESNET_TINY, phase="TEST")     # BatchNorm on its stored statistics
        runner.apply_inputs(s)
    bp_cb.change(app_ctx, sid, "add", "layer=res2a_bn")
    folded = []                                    # the page shows res2 folded
    assert bp_cb.reveal(app_ctx, sid, folded) == (no_update,) * 3       # nothing to show yet
    _v, msg = stepping.act(app_ctx, sid, FORWARD, "input", "loss")
    assert "stopped after res2a_bn" in msg
    sel, expanded, focus = bp_cb.reveal(app_ctx, sid, folded)
    assert sel == {"kind": "layer", "name": "res2a_bn"} and expanded == ["res2"]
    assert focus == {"kind": "layer", "name": "res2a_bn", "n": "reveal-1"}
    assert bp_cb.reveal(app_ctx, sid, expanded) == (no_update,) * 3      # once
    # a solver-free comparison of two timeline steps that part at the layer whose weights changed
    with app_ctx.store.use(sid) as s:
        s.breakpoints.enable(1, False)
        runner.forward_range(s, "input", "loss")
        s.loaded.net.params["res2b"][0].data[...] *= 2
        runner.forward_range(s, "input", "loss")
        a, b = s.loaded.timeline.indices[-2:]
    cmp, _version = compare_cb.compare(app_ctx, sid, "steps", a, b)
    assert cmp.first_divergence.layer == "res2b"
    sel, expanded, focus = bp_cb.reveal(app_ctx, sid, ["res1"])
    assert sel["name"] == "res2b" and expanded == ["res1", "res2"] and focus["n"] == "reveal-2"
    # scrubbed back, the graph's marks are that step's: where its range stopped
    with app_ctx.store.use(sid) as s:
        first = s.loaded.timeline.indices[0]
        s.loaded.view_step = first
        steps = debugger.shown_steps(s.loaded)
        assert [st.id for st in steps] == [r.id for r in s.loaded.timeline[first].records]
        from inspector.views import view_models as vm
        assert vm.step_marks(steps).stopped == s.loaded.graph.layer("res2a_bn").index


def test_select_that_layer_opens_the_block_of_the_nan_source(app_ctx):
    from inspector.callbacks import findings
    sid = "c2" * 16
    with app_ctx.store.use(sid) as s:
        s.loaded = build_loaded(RESNET_TINY, phase="TEST")
        runner.apply_inputs(s)
        net = s.loaded.net
        for layer in net.layers:                 # BatchNorm statistics filled: no root cause upstream
            if layer.type == "BatchNorm":
                layer.blobs[1].data[...] = 1.0
                layer.blobs[2].data[...] = 1.0
        net.params["res2a"][0].data[...] *= 1e38          # overflows float32 inside block res2
        runner.forward_range(s, "input", "loss")
    sel, tab, expanded, focus = findings.show_nan_layer(app_ctx, sid, 3, [])
    assert sel == {"kind": "layer", "name": "res2a"} and tab == "details"
    assert expanded == ["res2"] and focus == {"kind": "layer", "name": "res2a", "n": "nan-3"}


def _overflowing_resnet(session):
    """The session's net: a small ResNet without weights (BatchNorm statistics unfilled), res2a's
    weights ×1e38, run forward: NaN/Inf, and a root cause upstream of it."""
    session.loaded = build_loaded(RESNET_TINY, phase="TEST")
    runner.apply_inputs(session)
    session.loaded.net.params["res2a"][0].data[...] *= 1e38
    runner.forward_range(session, "input", "loss")
    return session.loaded


def test_select_that_layer_goes_to_the_root_cause(app_ctx):
    # statistics never filled (no weights): the alert leads with the root cause, and the
    # button selects it (its block opened), not the layer where the first NaN/Inf showed
    from inspector.callbacks import findings
    sid = "c3" * 16
    with app_ctx.store.use(sid) as s:
        _overflowing_resnet(s)
        cause = presenter.nan_alert(s.loaded)["root_cause"]["layer"]
        first = presenter.nan_alert(s.loaded)["layer"]
    assert cause != first
    style, text = findings.nan_alert(app_ctx, sid)
    assert text.startswith("Root cause: ") and cause in text
    sel, tab, _expanded, focus = findings.show_nan_layer(app_ctx, sid, 4, [])
    assert sel == {"kind": "layer", "name": cause} and focus["name"] == cause


def test_graph_colours_reach_the_cytoscape_elements(trained_store, tmp_path):
    """What the graph sends to the page (cytoscape elements): a past timeline step's colours,
    the update ratio after a solver step, a comparison's relative differences, and a folded
    block carrying the largest value inside it."""
    from inspector.state import presenter
    from inspector.views import view_models as vm

    def fills(ld, colour_by, expanded=None):
        els, _view = presenter.graph_elements(ld, colour_by, presenter.DEFAULT_OPTIONS, expanded)
        return {e["data"]["name"]: e["data"]["fill"] for e in els if e["data"].get("kind") in ("layer", "block")}

    store, sid = trained_store
    with store.use(sid) as s:
        ld = s.loaded
        assert set(fills(ld, "update_ratio").values()) == {vm.NO_DATA_COLOUR}        # no update yet
        runner.solver_step(s)
        after = fills(ld, "update_ratio")
        assert after["conv1"] != vm.NO_DATA_COLOUR and after["relu1"] == vm.NO_DATA_COLOUR
        assert fills(ld, "param_diff")["ip2"] != vm.NO_DATA_COLOUR
        runner.forward_range(s, "digits", "loss")
        live = fills(ld, "data")
        s.loaded.net.params["conv1"][0].data[...] *= 3
        runner.forward_range(s, "digits", "loss")
        newest = fills(ld, "data")
        ld.view_step = ld.timeline.indices[-2]                  # scrubbed back: the colours as they were
        assert fills(ld, "data") == live != newest
        ld.view_step = None
    # a comparison of those two steps: relative differences from conv1 on
    a, b = ld.timeline.indices[-2:]
    from inspector.callbacks.common import AppContext
    from inspector.config import InspectorConfig
    app = AppContext(config=InspectorConfig(model_root=str(tmp_path)), store=store, examples=[])
    compare_cb.compare(app, sid, "steps", a, b)
    with store.use(sid) as s:
        rel = fills(s.loaded, "reldiff")
        m = presenter.metrics(s.loaded)
        g = s.loaded.graph
        assert m[g.layer("conv1").index].rel_diff > 0.1 and rel["conv1"] != vm.NO_DATA_COLOUR
    # a folded block: the largest mean |data| of the layers inside it
    t = Session(id="c3" * 16)
    t.loaded = build_loaded(RESNET_TINY, phase="TEST")
    runner.apply_inputs(t)
    runner.forward_range(t, "input", "loss")
    folded = presenter.graph_view(t.loaded, "data", presenter.DEFAULT_OPTIONS, None, [])
    opened = presenter.graph_view(t.loaded, "data", presenter.DEFAULT_OPTIONS, None, ["res1", "res2"])
    block = next(n for n in folded.nodes if n.kind == "block" and n.name == "res2")
    inside = [n.value for n in opened.nodes if n.kind == "layer" and n.members[0].startswith(("res2", "bn2"))]
    assert block.value == max(v for v in inside if v is not None)


def test_training_charts_without_a_solver_say_there_is_none(app_ctx):
    sid = "f" * 32
    with app_ctx.store.use(sid) as s:
        s.loaded = build_loaded(LENET)
    curves_fig, ratios_fig, note = training_cb.curves(app_ctx, sid)
    assert "No solver" in note
    for fig in (curves_fig, ratios_fig):        # not "run some (Run, or Solver step)": nothing can run
        text = fig.layout.annotations[0].text
        assert "no solver loaded" in text and "Solver step" not in text


def test_port_findings_at_many_layers_are_one_line_with_the_count():
    from engine.ports.compare import Diagnosis
    eps = "BatchNorm eps 0.001 in the port where Caffe's is 1e-05 (reproduces the port's output to %s)"
    diags = [Diagnosis("bn1", "batchnorm_eps", eps % "1e-07"),
             Diagnosis("(every BatchNorm)", "batchnorm_eps_every", "every BatchNorm (3 of 3): eps 0.001",
                       {"layers": ["bn1", "bn2", "bn3"]}),
             Diagnosis("bn2", "batchnorm_eps", eps % "2e-07"), Diagnosis("bn3", "batchnorm_eps", eps % "3e-07"),
             Diagnosis("ip1", "unknown", "no known cause: the layer's own arithmetic departs by 0.3 relative"),
             Diagnosis("ip2", "unknown", "no known cause: the layer's own arithmetic departs by 0.51 relative"),
             Diagnosis("prob", "softmax_axis", "Softmax over axis 0 in the port where Caffe's axis is 1")]
    rows = debug_views.port_findings(diags)
    assert rows == [("(every BatchNorm)", "every BatchNorm (3 of 3): eps 0.001"),
                    ("2 layers (ip1, ip2)", "no known cause: the layer's own arithmetic departs by 0.3 relative"),
                    ("prob", "Softmax over axis 0 in the port where Caffe's axis is 1")]
    assert debug_views.port_findings([]) == []


def test_the_graph_marks_the_cause_where_it_is_and_draws_what_follows_as_its_consequence(app_ctx):
    from inspector.views import view_models as vm
    sid = "c4" * 16
    with app_ctx.store.use(sid) as s:
        ld = _overflowing_resnet(s)
        causes = presenter.causes(ld)
        assert causes[0].check == "root_cause" and causes[0].layer == "stem_bn"
        bad = {ld.graph.layers[i].name for i, m in presenter.metrics(ld).items() if m.nonfinite}
        assert bad and set(causes[0].symptoms) >= bad - {"stem_bn"}
        for expanded in ([], None, [b.id for b in presenter.blocks(ld)]):      # folded, as opened, all open
            els, view = presenter.graph_elements(ld, "category", presenter.DEFAULT_OPTIONS, expanded)
            marked = [e for e in els if "cause" in e["classes"].split()]
            drawn = [e for e in marked if e["data"].get("kind") != "group"]
            # one node marked: the one drawing stem_bn (itself, or the folded block holding it) ...
            assert len(drawn) == 1 and "|stem_bn|" in drawn[0]["data"]["members"]
            assert "⚠" in drawn[0]["data"]["label"] and drawn[0]["data"]["short"].startswith("⚠")
            # ... and every frame around it, whose summary (shown zoomed out) names the cause
            frames = [e for e in els if e["data"].get("kind") == "group" and "|stem_bn|" in "|%s|" % "|".join(
                next(n for n in view.nodes if n.id == e["data"]["id"]).members)]
            ringed = {e["data"]["id"] for e in marked if e["data"].get("kind") == "group"}
            assert {e["data"]["id"] for e in frames} == ringed
            assert all("root cause: stem_bn" in e["data"]["short"] for e in frames)
            # what carries the NaN on is drawn as a consequence, without a ⚠ of its own
            follows = [e for e in els if "symptom" in e["classes"].split()]
            assert follows and not [e for e in els if "⚠ NaN" in e["data"].get("label", "")]
            assert not [e for e in follows if "⚠" in e["data"]["label"]]
        assert vm.finding_causes([]) == ()


def test_a_port_comparison_colours_by_each_layers_own_judgement():
    # a port's findings can sit under rtol (far above their own rounding), and a layer's own
    # rounding can be larger than another layer's finding: neutral is what the comparison judged
    # rounding, warm what it judged a finding, whatever the two values
    from types import SimpleNamespace

    from inspector.views import view_models as vm
    ld = build_loaded(LENET)
    layers = [SimpleNamespace(layer="conv1", kind="forward", max_rel=5e-6, ok=True),      # rounding
              SimpleNamespace(layer="ip1", kind="forward", max_rel=2e-6, ok=False),       # a finding
              SimpleNamespace(layer="ip2", kind="forward", max_rel=1e-7, ok=True)]
    ld.comparison = SimpleNamespace(layers=layers, rtol=1e-3, first_divergence=SimpleNamespace(layer="ip1"),
                                    label_a="this net", label_b="port.onnx", neutral_below=2e-6,
                                    end_to_end={"conv1": 5e-6, "ip2": 1e-6},
                                    judged_ok=frozenset(["conv1", "ip2"]))
    view = presenter.graph_view(ld, "reldiff", presenter.DEFAULT_OPTIONS, None, [])
    fill = {n.name: n.fill for n in view.nodes if n.kind == "layer"}
    assert fill["conv1"] == vm.ROUNDING_COLOUR and fill["ip2"] == vm.ROUNDING_COLOUR
    assert fill["ip1"] in vm._DEPARTS
    # a timeline comparison (no per-layer judgement) still colours by the value against rtol
    ld.comparison = SimpleNamespace(layers=layers, rtol=1e-6, first_divergence=SimpleNamespace(layer="ip1"),
                                    label_a="step 1", label_b="step 2")
    fill = {n.name: n.fill for n in presenter.graph_view(ld, "reldiff", presenter.DEFAULT_OPTIONS, None, []).nodes
            if n.kind == "layer"}
    assert fill["conv1"] in vm._DEPARTS and fill["ip2"] == vm.ROUNDING_COLOUR

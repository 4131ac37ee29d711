"""Continue, Step over and Run to cursor (issue 22), through the runner (no browser): a
resumed range, Forward + Backward or solver iteration gives what the uninterrupted one
gives; one NaN/Inf source is one finding however many steps saw it."""
import numpy as np
import pytest
from inspector_testlib import LENET, RESNET_TINY, build_loaded

from inspector import adapters
from inspector.callbacks import stepping
from inspector.callbacks import training as training_cb
from inspector.state import debugger, presenter, runner
from inspector.state.sessions import ModelSpec, Session, SessionStore
from inspector.views import debug_views

SOLVER = 'net: "%s"\nbase_lr: 0.01\nmomentum: 0.9\nlr_policy: "fixed"\nmax_iter: 100\n'


def _session(path=LENET, **kw):
    s = Session(id="d" * 32)
    s.loaded = build_loaded(path, **kw)
    runner.apply_inputs(s)
    return s


def test_continue_resumes_forward_and_backward_ranges_after_the_layer_that_stopped():
    s = _session()
    net = s.loaded.net
    n = len(s.loaded.graph.layers)
    full = runner.forward_range(s, 0, n - 1)
    want = float(np.asarray(net.blobs["loss"].data))
    bps = debugger.breakpoints(s)
    bps.add("layer=conv2")
    bps.add("layer=ip1")
    msg = runner.forward_range(s, 0, n - 1)
    assert "stopped after conv2" in msg and s.paused["next"] == 4 and s.paused["end"] == n - 1
    ran = [l.layer for l in s.loaded.recorder.steps[-1].layers]
    assert ran[-1] == "conv2"
    msg = runner.continue_run(s)                                   # on to the next hit ...
    assert msg.startswith("continue: ForwardFromTo(4, 8)") and "stopped after ip1" in msg
    assert [l.layer for l in s.loaded.recorder.steps[-1].layers] == ["pool2", "ip1"]
    msg = runner.continue_run(s)                                   # ... and to the end
    assert "stopped" not in msg and s.paused is None and "loss" in full
    assert float(np.asarray(net.blobs["loss"].data)) == pytest.approx(want, rel=1e-6)
    with pytest.raises(runner.RunRefused, match="nothing to continue"):
        runner.continue_run(s)
    # backward: down from where it stopped
    msg = runner.backward_range(s, n - 1, 0)
    assert "stopped after ip1" in msg and s.paused == dict(kind="backward", next=4, end=0, layer="ip1")
    runner.continue_run(s)
    assert s.paused["layer"] == "conv2"
    runner.continue_run(s)
    assert s.paused is None and [l.layer for l in s.loaded.recorder.steps[-1].layers] == ["pool1", "conv1"]
    assert [b.hit_count for b in bps.items] == [2, 2]
    labels = [st.label for st in s.loaded.timeline.steps]
    assert labels[-1] == "continue: BackwardFromTo(2, 0) · random seed 0"


def test_continue_forward_backward_matches_the_uninterrupted_gradients():
    s = _session()
    net = s.loaded.net
    net.ClearParamDiffs()
    runner.forward_backward(s)
    want = {k: np.array(v[0].diff) for k, v in net.params.items()}
    net.ClearParamDiffs()                                          # param diffs add up, as in Caffe
    debugger.breakpoints(s).add("layer=ip1")                       # fires forward, then backward
    stops = [runner.forward_backward(s)]
    while s.paused is not None:
        stops.append(runner.continue_run(s))
    assert "stopped in forward after ip1" in stops[0] and "stopped in backward after ip1" in stops[1]
    assert len(stops) == 3 and "stopped" not in stops[2]
    for k, w in want.items():
        assert np.allclose(net.params[k][0].diff, w, rtol=1e-5, atol=1e-7), k


def test_run_to_cursor_while_stopped_is_continue_with_a_one_shot_stop():
    s = _session()
    bps = debugger.breakpoints(s)
    bps.add("layer=pool1")
    runner.forward_range(s, 0, 8)
    msg = runner.run_to(s, "ip2")
    assert "at the cursor: ip2" in msg and s.paused["next"] == 8
    assert [b.id for b in bps.items] == [1] and bps._next == 2 and not any(h.layer == "ip2" for h in bps.hits)
    assert s.loaded.timeline.last.label.endswith("at the cursor: ip2") and not s.loaded.timeline.last.hits
    # not stopped: forward from the step cursor to the layer
    runner.apply_inputs(s)
    bps.enable(1, False)
    msg = runner.run_to(s, "pool2")
    # worded as the docs and the one-shot stop are: "run to cursor", "at the cursor"
    assert msg.startswith("run to cursor pool2: ForwardFromTo(0, 4)") and s.paused["next"] == 5
    assert msg.endswith(" — at the cursor: pool2")
    assert "ForwardFromTo(5, 8)" in runner.continue_run(s)


def test_step_over_runs_the_folded_block_at_the_cursor():
    s = _session(RESNET_TINY, phase="TEST")
    g = s.loaded.graph
    blocks = presenter.blocks(s.loaded)
    first = min(blocks, key=lambda b: (min(b.layers), -len(b.layers)))
    s.cursor_forward = min(first.layers)
    opened = [b.id for b in blocks if b.id != first.id and not set(first.layers) <= set(b.layers)]
    msg = runner.step_over(s, expanded=opened)
    assert msg.startswith("step over %s (%d layers)" % (first.name, max(first.layers) - min(first.layers) + 1))
    ran = [l.layer for l in s.loaded.recorder.steps[-1].layers]
    assert ran == [g.layers[i].name for i in range(min(first.layers), max(first.layers) + 1)]
    assert s.cursor_forward == max(first.layers) + 1 and s.paused["next"] == max(first.layers) + 1
    # outside any folded block (everything open): one layer, as Step ▶
    i = s.cursor_forward
    msg = runner.step_over(s, expanded=[b.id for b in blocks])
    assert msg.startswith("step: ForwardFromTo(%d, %d)" % (i, i))


@pytest.fixture
def solver_store(tmp_path):
    from inspector.state import loading
    solver = tmp_path / "solver.prototxt"
    solver.write_text(SOLVER % LENET)
    store = SessionStore(4, 3600)
    sids = ("e" * 32, "f" * 32)
    for sid in sids:
        with store.use(sid) as s:
            s.loaded = loading.build(ModelSpec(model=str(LENET), solver=str(solver)))
            runner.apply_inputs(s)
    with store.use(sids[0]) as a, store.use(sids[1]) as b:      # the same weights in both
        for k, v in a.loaded.net.params.items():
            for j, blob in enumerate(v):
                b.loaded.net.params[k][j].data[...] = blob.data
    return store, sids


def test_continue_a_solver_iteration_stopped_in_its_backward_updates_as_an_uninterrupted_one(solver_store):
    store, (sid, ref) = solver_store
    runner.run_solver(store, ref, 2)
    with store.use(sid) as s:
        debugger.breakpoints(s).add("layer=ip1")
    out = runner.run_solver(store, sid, 2)
    assert out.stopped == "breakpoint"
    with store.use(sid) as s:
        assert s.paused["kind"] == "solver" and s.paused["phase"] == "forward" and s.paused["remaining"] == 1
        disabled, title = stepping.continue_state(type("A", (), {"store": store})(), sid)
        assert not disabled and "solver run after ip1 (forward), 1 more iteration" in title
        s.solver_resume, s.solver_resume_pending = 1, 1
    app = type("A", (), {"store": store})()
    iterations, resume = training_cb.take_resume(app, sid, {"n": 1})
    assert iterations == 2 and resume["layer"] == "ip1"
    assert training_cb.take_resume(app, sid, {"n": 1}) is None               # taken once
    debugger.breakpoints(store.get(sid)).enable(1, False)
    version, msg = training_cb.run_job(app, sid, "solver", 1, resume=(iterations, resume))
    assert msg.startswith("continue: solver run: 2 iterations")
    with store.use(sid) as s, store.use(ref) as r:
        assert int(s.loaded.solver.iter) == int(r.loaded.solver.iter) == 2
        for k, v in r.loaded.net.params.items():
            assert np.allclose(s.loaded.net.params[k][0].data, v[0].data, rtol=1e-5, atol=1e-7), k
        assert s.loaded.training.train[0].loss == pytest.approx(r.loaded.training.train[0].loss, rel=1e-5)
        # a stop in the backward of an iteration: the update still sees every layer's gradient
        debugger.breakpoints(s).enable(1, True)
    with store.use(sid) as s:
        msg, hit = runner.solver_step_checked(s)
        assert "stopped in forward after ip1" in msg
        runner.continue_run(s)                                 # stops again, in the backward
        assert s.paused["phase"] == "backward"
        debugger.breakpoints(s).enable(1, False)
        runner.continue_run(s)
        assert s.paused is None and int(s.loaded.solver.iter) == 3
    with store.use(ref) as r:
        runner.solver_step_checked(r)
    with store.use(sid) as s, store.use(ref) as r:
        for k, v in r.loaded.net.params.items():
            assert np.allclose(s.loaded.net.params[k][0].data, v[0].data, rtol=1e-5, atol=1e-7), k


def test_one_nonfinite_source_is_listed_once_across_steps(tmp_path):
    """Stop on nonfinite, disable it, run to the end: the source is one finding, not two."""
    net = tmp_path / "overflow.prototxt"
    net.write_text("""name: "Overflow"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 4 dim: 25 } } }
layer { name: "scale" type: "Power" bottom: "data" top: "x" power_param { scale: 3 } }
layer { name: "exp1" type: "Exp" bottom: "x" top: "e1" }
layer { name: "exp2" type: "Exp" bottom: "e1" top: "e2" }
layer { name: "half" type: "Power" bottom: "e2" top: "out" power_param { scale: 0.5 } }
""")
    s = _session(net, phase="TEST")
    bps = debugger.breakpoints(s)
    bps.add("nonfinite")
    assert "stopped after exp2" in runner.forward_range(s, 0, 4)
    bps.enable(1, False)
    runner.forward_range(s, 0, 4)
    found = [f for f in adapters.health_findings(s.loaded.recorder.steps, s.loaded.net) if f["check"] == "nonfinite"]
    assert len(found) == 1 and found[0]["layer"] == "exp2" and "Carried on by 1 layer: half" in found[0]["message"]
    assert len(debug_views.nonfinite_sources(s.loaded.recorder.steps, s.loaded.net)) == 1


def test_steps_name_their_input_and_number_and_a_scrubbed_blob_offers_pin(tmp_path):
    """Three forwards on three inputs read apart in the Timeline, Diff and Compare lists; scrubbed
    back to a step that kept statistics only, the value table offers Pin (not "showing 0×0")."""
    from inspector.callbacks import details
    from inspector.callbacks import timeline as timeline_cb
    from inspector.state import inputs as inp
    s = _session()
    np.save(tmp_path / "three.npy", np.full((1, 28, 28), 3, np.float32))
    s.uploads["npy"], s.upload_names["npy"] = str(tmp_path / "three.npy"), "three.npy"
    runner.apply_inputs(s, inp.InputSettings(kind="random", seed=3))
    runner.forward_range(s, 0, 8)
    runner.apply_inputs(s, inp.InputSettings(kind="constant", value=0.5))
    runner.forward_range(s, 0, 8)
    runner.apply_inputs(s, inp.InputSettings(kind="npy"))
    runner.forward_range(s, 0, 8)
    opts = [o["label"] for o in debug_views.step_options(s.loaded.timeline)]
    assert opts == ["#0 ForwardFromTo(0, 8) · random seed 3", "#1 ForwardFromTo(0, 8) · constant 0.5",
                    "#2 ForwardFromTo(0, 8) · three.npy into data"]
    rows = debug_views.timeline_rows(s.loaded.timeline, s.loaded.graph)
    assert [r["label"] for r in rows][0] == "ForwardFromTo(0, 8) · three.npy into data"
    store = SessionStore(2, 3600)
    store._sessions[s.id] = s
    app = type("A", (), {"store": store})()
    s.loaded.view_step = 0
    _h, _f, table, pin = details.blob_view(app, s.id, {"kind": "blob", "name": "conv1"}, "data", 0, 0, "0")
    assert pin == {"display": "inline-block"}
    assert "step 0 kept statistics of conv1 only" in str(table) and "0×0" not in str(table)
    timeline_cb.pin(app, s.id, {"kind": "blob", "name": "conv1"})
    _h, _f, table, pin = details.blob_view(app, s.id, {"kind": "blob", "name": "conv1"}, "data", 0, 0, "0")
    assert pin == {"display": "none"} and "it is pinned now" in str(table)
    s.loaded.view_step = None
    runner.forward_range(s, 0, 8)
    s.loaded.view_step = 3                                         # a step after the pin: its values
    _h, _f, table, pin = details.blob_view(app, s.id, {"kind": "blob", "name": "conv1"}, "data", 0, 0, "0")
    assert pin == {"display": "none"} and "values at [0" in str(table)

"""A phase switch shows what a fresh load of that phase shows: the graph's elements,
caption and legend, the load bar, the controls, the layer range, the details of a layer,
and the net's graph and analysis; whether the net comes from the spares built ahead
(the command line's net, or a tab's own spare of a net opened from a path), from a path
under the model root without a spare (built on the switch), or back and forth (the graph
and analysis made once per net and reused).  And the spares themselves: a load waits for a
spare of its net already being built; a tab's spares stay within the spare budget, one per
tab, and go when the tab loads another net or its session ends."""
import json
import threading
import time

import plotly
import pytest
from inspector_testlib import ROOT

from inspector import ids
from inspector.callbacks import graph, load, stepping
from inspector.callbacks.common import AppContext
from inspector.config import InspectorConfig
from inspector.layout.header import load_error_box, load_status
from inspector.state import loading, presenter
from inspector.state.sessions import ModelSpec, SessionStore, new_session_id
from inspector.state.spares import Spares, first_view

LENET = "examples/lenet/lenet_train_test.prototxt"          # TRAIN and TEST differ (include rules)
RESNET = "examples/resnet_tiny/resnet_tiny.prototxt"
OPTIONS = ["fold_splits", "labels", "ghosts"]               # the page's default view options


def _json(value):
    return json.loads(json.dumps(value, cls=plotly.utils.PlotlyJSONEncoder))


def _app(model=None, spares=False, budget=1 << 30, root=ROOT):
    """The server's context (as create_app makes it); ``spares``: nets built ahead, the tabs'
    within ``budget`` bytes, each started at once after the load that asks for it."""
    cfg = InspectorConfig(model=str(ROOT / model) if model else None, model_root=str(root))
    app = AppContext(config=cfg, store=SessionStore(8, 3600), examples=cfg.examples())
    if spares:
        app.spares = Spares(lambda spec: first_view(loading.build(spec, model_root=cfg.model_root,
                                                                  max_bytes=cfg.max_net_bytes)),
                            budget=budget, stamp=loading.spec_stamp, delay=0.0)
        app.store.on_close.append(app.spares.drop_tab)
    return app


def page(app, sid):
    """What the page shows of the session's net (the JSON the callbacks send)."""
    els, title, legend, meta = graph.render(app, sid, "category", "edges", OPTIONS, None)
    with app.store.use(sid) as s:
        ld = s.loaded
        first = ld.graph.layers[1].name
        shown = {
            "elements": els, "title": title, "legend": legend, "drawn": meta["n"],
            "status": load_status(s), "error": load_error_box(s.error, load.describe(s)),
            "controls": load.controls(app, s, list(ld.graph.rule_stages)),
            "details": presenter.layer_panel(ld, first)[0],
        }
    shown["range"] = stepping.range_options(app, sid)
    return _json(shown)


def _net(app, sid):
    with app.store.use(sid) as s:
        return s.loaded


def _open(app, phase=None, path=None):
    """A new tab: the server's net (or ``path`` opened from the model root), then ``phase``."""
    sid = new_session_id()
    load.handle_load(app, sid, None)
    if path is not None:
        load.handle_load(app, sid, ids.MODEL_PATH_OPEN, path=path)
    if phase is not None and _net(app, sid).spec.phase != phase:
        load.handle_load(app, sid, ids.PHASE, phase=phase, level=0, stages=[])
    return sid


def _fresh(app, phase, path=None):
    """A tab that opened the net in ``phase`` straight away (its address names the phase)."""
    sid = new_session_id()
    search = "?model=%s&phase=%s" % (path, phase) if path else "?phase=%s" % phase
    load.handle_load_full(app, sid, None, search=search)
    assert _net(app, sid).spec.phase == phase
    return sid


def _same(app, switched, fresh):
    a, b = _net(app, switched), _net(app, fresh)
    assert a.net is not b.net                       # a net of its own, never another tab's
    assert a.graph == b.graph and a.analysis == b.analysis
    assert page(app, switched) == page(app, fresh)


def _wait_spares(app, *specs, timeout=120):
    end = time.time() + timeout
    while not all(app.spares.ready(s) for s in specs):
        assert time.time() < end, "the spares were not built"
        time.sleep(0.05)


@pytest.mark.parametrize("model", [LENET, RESNET])
def test_switch_from_a_path_shows_a_fresh_load_of_that_phase(model):
    app = _app()
    sid = _open(app, path=model)
    start = _net(app, sid).spec.phase
    other = "TEST" if start == "TRAIN" else "TRAIN"
    for phase in (other, start, other):            # back and forth: the second time from what was kept
        load.handle_load(app, sid, ids.PHASE, phase=phase, level=0, stages=[])
        assert _net(app, sid).spec.phase == phase
        _same(app, sid, _fresh(app, phase, path=model))


def test_switch_of_the_command_line_net_takes_the_spare_and_shows_a_fresh_load():
    app = _app(LENET, spares=True)
    spec = load.initial_spec(app)
    other = ModelSpec(**dict(vars(spec), phase="TEST"))
    app.spares.prime(spec)
    app.spares.prime(other)
    _wait_spares(app, spec, other)
    sid = _open(app)
    spare = app.spares._ready.get(app.spares._key(other))[0]
    load.handle_load(app, sid, ids.PHASE, phase="TEST", level=0, stages=[])
    assert _net(app, sid) is spare                  # taken at once, not built
    app.spares = None                               # the fresh tab builds its own
    _same(app, sid, _fresh(app, "TEST"))


def test_a_load_waits_for_the_spare_being_built():
    started, release, calls = threading.Event(), threading.Event(), []

    def build(spec):
        calls.append(spec)
        started.set()
        release.wait(10)
        return "net of %s" % spec

    spares = Spares(build)
    spares.prime("spec")
    assert started.wait(10)
    threading.Timer(0.2, release.set).start()
    assert spares.take("spec", wait=10) == "net of spec"     # the build under way, not a second one
    assert calls == ["spec"]
    assert spares.take("other", wait=10) is None             # nothing under way: no wait


def test_the_kept_graph_is_not_used_for_a_changed_file(tmp_path):
    src = (ROOT / RESNET).read_text()
    path = tmp_path / "net.prototxt"
    path.write_text(src)
    a = loading.build(ModelSpec(model=str(path), phase="TEST"))
    b = loading.build(ModelSpec(model=str(path), phase="TEST"))
    assert b.graph is a.graph and b.analysis is a.analysis
    path.write_text(src.replace('name: "', 'name: "x', 1))      # the net's name changes
    c = loading.build(ModelSpec(model=str(path), phase="TEST"))
    assert c.graph is not a.graph and c.graph.name != a.graph.name
    assert c.graph == loading.build_graph(c.net, loading.read_source(str(path)))


def test_the_server_settles_its_imports_before_it_builds_a_net(monkeypatch):
    """``caffe-inspector`` freezes what its imports made (gc.freeze) before the app starts
    building nets: full collections then skip those objects, and no net is ever frozen."""
    import gc

    import inspector
    from inspector import cli
    settle, order = cli.settle_startup, []

    class Server:
        def run(self, **kw):
            order.append("serve")

        def shutdown(self):
            order.append("shutdown")

    monkeypatch.setattr(cli, "settle_startup", lambda: order.append("settle"))
    monkeypatch.setattr(cli, "stop_on_signals", lambda: order.append("signals"))
    monkeypatch.setattr(inspector, "create_app", lambda config: order.append("create") or Server())
    cli.main(["--no-prebuild"])
    assert order == ["settle", "create", "signals", "serve", "shutdown"]     # its files go as it ends
    try:
        settle()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def _wait_tab_spare(app, sid, timeout=120):
    """The tab's spare once it is built (state, spec, bytes); None: it has none."""
    end = time.time() + timeout
    while True:
        got = app.spares.tab_spare(sid)
        if got is None or got[0] == "ready":
            return got
        assert time.time() < end, "the tab's spare was not built"
        time.sleep(0.05)


def _tab_spare_net(app, sid):
    return app.spares._tabs[sid].loaded


@pytest.mark.parametrize("model", [LENET, RESNET])
def test_a_net_opened_from_a_path_has_its_other_phase_built_ahead_and_the_switch_takes_it(model):
    app = _app(spares=True)
    sid = _open(app, path=model)
    start = _net(app, sid).spec.phase
    other = "TEST" if start == "TRAIN" else "TRAIN"
    state, spec, need = _wait_tab_spare(app, sid)
    assert spec == ModelSpec(**dict(vars(_net(app, sid).spec), phase=other))    # the same net, the other phase
    spare = _tab_spare_net(app, sid)
    assert need == spare.net.memory_required_bytes == app.spares.tab_bytes()
    load.handle_load(app, sid, ids.PHASE, phase=other, level=0, stages=[])
    assert _net(app, sid) is spare                      # taken at once, not built
    state, spec, _need = _wait_tab_spare(app, sid)      # and the phase it left is built ahead in turn
    assert spec.phase == start and app.spares.tab_bytes() == _need       # one spare per tab
    spares, app.spares = app.spares, None               # the fresh tab builds its own
    _same(app, sid, _fresh(app, other, path=model))
    app.spares = spares
    load.handle_load(app, sid, ids.PHASE, phase=start, level=0, stages=[])     # back: the spare again
    assert _net(app, sid).spec.phase == start
    app.spares = None
    _same(app, sid, _fresh(app, start, path=model))


def test_an_address_and_an_upload_get_a_spare_too():
    app = _app(spares=True)
    sid = new_session_id()
    load.handle_load_full(app, sid, None, search="?model=%s&phase=TEST" % LENET)     # a deep link
    assert _wait_tab_spare(app, sid)[1].phase == "TRAIN"
    import base64
    data = "data:text/plain;base64," + base64.b64encode((ROOT / RESNET).read_bytes()).decode()
    load.handle_load(app, sid, ids.UPLOAD_MODEL, upload=(data, "mine.prototxt"))
    _state, spec, _need = _wait_tab_spare(app, sid)
    assert spec.uploaded and spec.phase != _net(app, sid).spec.phase
    spare = _tab_spare_net(app, sid)
    load.handle_load(app, sid, ids.PHASE, phase=spec.phase, level=0, stages=[])
    assert _net(app, sid) is spare


def test_a_net_over_the_spare_budget_gets_none_and_its_switch_builds_it():
    need = loading.build(ModelSpec(model=str(ROOT / RESNET), phase="TEST")).net.memory_required_bytes
    app = _app(spares=True, budget=need - 1)
    sid = _open(app, path=RESNET)
    assert _wait_tab_spare(app, sid) is None and app.spares.tab_bytes() == 0
    start = _net(app, sid).spec.phase
    other = "TEST" if start == "TRAIN" else "TRAIN"
    before = _net(app, sid)
    load.handle_load(app, sid, ids.PHASE, phase=other, level=0, stages=[])
    assert _net(app, sid) is not before and _net(app, sid).spec.phase == other     # rebuilt
    assert _wait_tab_spare(app, sid) is None
    app.spares = None
    _same(app, sid, _fresh(app, other, path=RESNET))


def test_the_tabs_spares_stay_within_the_budget_those_primed_longest_ago_dropped_first():
    need = loading.build(ModelSpec(model=str(ROOT / LENET), phase="TEST")).net.memory_required_bytes
    app = _app(spares=True, budget=int(need * 2.5))         # room for two
    tabs = []
    for _ in range(3):
        tabs.append(_open(app, path=LENET))
        assert _wait_tab_spare(app, tabs[-1]) is not None
    assert app.spares.tab_spare(tabs[0]) is None           # the first tab's went to make room
    assert all(app.spares.tab_spare(t) is not None for t in tabs[1:])
    assert app.spares.tab_bytes() <= app.spares.budget
    start = _net(app, tabs[0]).spec.phase                   # its switch builds the net
    load.handle_load(app, tabs[0], ids.PHASE, phase="TEST" if start == "TRAIN" else "TRAIN", level=0, stages=[])
    assert _net(app, tabs[0]).spec.phase != start


def test_a_tab_that_loads_another_net_or_ends_drops_its_spare():
    app = _app(spares=True)
    sid = _open(app, path=LENET)
    assert _wait_tab_spare(app, sid)[1].model == str(ROOT / LENET)
    load.handle_load(app, sid, ids.MODEL_PATH_OPEN, path=RESNET)             # another net: its spare only
    assert _wait_tab_spare(app, sid)[1].model == str(ROOT / RESNET)
    assert app.spares.tab_bytes() == app.spares.tab_spare(sid)[2]
    load.handle_load(app, sid, ids.EXAMPLE, example=app.examples[0][1])      # an example: the shared spares'
    assert app.spares.tab_spare(sid) is None and app.spares.tab_bytes() == 0
    load.handle_load(app, sid, ids.MODEL_PATH_OPEN, path=LENET)
    assert _wait_tab_spare(app, sid) is not None
    app.store.drop(sid)                                                      # the session ends
    assert app.spares.tab_spare(sid) is None and app.spares.tab_bytes() == 0


def test_the_server_drops_a_tabs_spare_with_its_session():
    """create_app wires the spares to the sessions: a session evicted takes its spare along."""
    from inspector.app import create_app
    cfg = InspectorConfig(model_root=str(ROOT), prebuild=True)
    ctx = create_app(cfg).inspector
    assert ctx.spares.budget == cfg.spare_bytes > 0
    ctx.spares.delay = 0.0
    sid = _open(ctx, path=LENET)
    assert _wait_tab_spare(ctx, sid) is not None
    ctx.store.drop(sid)
    assert ctx.spares.tab_spare(sid) is None


def test_a_spare_whose_file_changed_is_not_taken(tmp_path):
    path = tmp_path / "net.prototxt"
    src = (ROOT / RESNET).read_text()
    path.write_text(src)
    app = _app(spares=True, root=tmp_path)
    sid = _open(app, path="net.prototxt")
    assert _wait_tab_spare(app, sid) is not None
    spare = _tab_spare_net(app, sid)
    path.write_text(src.replace('name: "', 'name: "x', 1))      # the net's name changes
    start = _net(app, sid).spec.phase
    load.handle_load(app, sid, ids.PHASE, phase="TEST" if start == "TRAIN" else "TRAIN", level=0, stages=[])
    assert _net(app, sid) is not spare and _net(app, sid).graph.name.startswith("x")


def test_a_switch_waits_for_the_tabs_spare_being_built():
    started, release, calls = threading.Event(), threading.Event(), []

    def build(spec):
        calls.append(spec)
        started.set()
        release.wait(10)
        return "net of %s" % spec

    spares = Spares(build, budget=1 << 20, delay=0.0)
    assert spares.prime_tab("tab", "spec", need=100)
    assert started.wait(10)
    assert spares.tab_spare("tab")[0] == "building"
    threading.Timer(0.2, release.set).start()
    assert spares.take_tab("tab", "spec", wait=10) == "net of spec"     # the build under way, not a second one
    assert calls == ["spec"] and spares.tab_spare("tab") is None
    assert spares.take_tab("tab", "spec", wait=10) is None              # taken: none left
    assert not spares.prime_tab("tab", "spec", need=2 << 20)            # over the budget: none
    assert spares.take_tab("other", "spec", wait=10) is None            # another tab's: never


def test_a_tabs_spare_starts_once_its_net_is_drawn():
    """A tab's spare waits out its delay after the load, or starts as the graph callback draws
    the net, if that is sooner."""
    built = threading.Event()
    app = _app(spares=True)
    app.spares.delay = 600.0
    sid = _open(app, path=LENET)
    assert app.spares.tab_spare(sid)[0] == "waiting"
    build = app.spares._build
    app.spares._build = lambda spec: (build(spec), built.set())[0]
    graph.render(app, sid, "category", "edges", OPTIONS, None)
    assert built.wait(120) and _wait_tab_spare(app, sid)[0] == "ready"

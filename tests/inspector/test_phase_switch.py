"""A phase switch shows what a fresh load of that phase shows: the graph's elements,
caption and legend, the load bar, the controls, the layer range, the details of a layer,
and the net's graph and analysis; whether the net comes from the spares built ahead
(the command line's net), from a path under the model root (built on the switch), or
back and forth (the graph and analysis made once per net and reused).  And the spares
themselves: a load waits for a spare of its net already being built."""
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


def _app(model=None, spares=False):
    cfg = InspectorConfig(model=str(ROOT / model) if model else None, model_root=str(ROOT))
    app = AppContext(config=cfg, store=SessionStore(8, 3600), examples=cfg.examples())
    if spares:
        app.spares = Spares(lambda spec: first_view(loading.build(spec, max_bytes=cfg.max_net_bytes)))
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
    spare = app.spares._ready.get(app.spares._key(other))
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

    monkeypatch.setattr(cli, "settle_startup", lambda: order.append("settle"))
    monkeypatch.setattr(inspector, "create_app", lambda config: order.append("create") or Server())
    cli.main(["--no-prebuild"])
    assert order == ["settle", "create", "serve"]
    try:
        settle()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()

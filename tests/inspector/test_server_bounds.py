"""Every request of the page bounded, whatever it sends (issue 34), through the page's real
callbacks over HTTP (benchmarks/load_test.py's Tab), with another tab working beside it:

- an Input of 300,000 ``dim`` entries (2 MB) and 796,000 in-place ReLUs (a 53 MB upload) are
  refused with the limit's message, and the other tab goes on;
- a net that passes the limits but takes more CPU than ``--load-seconds`` to build is stopped
  in its load check (a child process, inspector/state/guard.py) and refused naming the flag,
  while the other tab steps; the server builds nothing of it;
- the check's memory bound and the check of a net that builds (its NetParameter reused, not
  checked twice);
- a body past Flask's limit (413) shows the upload's limit in the page's load error box;
- a NUL byte in a path, an empty net (Caffe's Forward check), the message of a tab from before
  a restart.

Time caps are hang guards only: no duration is asserted.
"""
import concurrent.futures as cf
import json

import pytest

from benchmarks import load_test as lt

TRACEBACK = "Traceback (most recent call last)"


def dims_net(n):
    return ('name: "dims"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { %s } } }\n'
            % " ".join("dim: 1" for _ in range(n)))


def relu_net(n, name="relus"):
    head = ('name: "%s"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }\n'
            % name)
    return head + "".join('layer { name: "relu%d" type: "ReLU" bottom: "data" top: "data" }\n' % i
                          for i in range(n))


def upload(tab, filename, content, kind="model"):
    with tab.lock:
        tab.props["upload-%s.filename" % kind] = filename
    tab.last_load = {}
    return tab.trigger("upload-%s.contents" % kind, lt.data_url(content))


def load_error(out_or_tab):
    props = out_or_tab.props if hasattr(out_or_tab, "props") else out_or_tab
    return lt._text(props.get("load-error.children") or "")


def step(tab):
    tab.click("btn-step-forward")
    return tab.props.get("run-message.children") or ""


def no_http_errors(srv):
    assert srv.stats.http_errors == [] and srv.stats.tracebacks == [], (srv.stats.http_errors, srv.stats.tracebacks)


def other_tab_goes_on(a, n=2):
    """Tab ``a`` (on LeNet) steps ``n`` layers further, each from where it was."""
    for _ in range(n):
        i = a.cursor
        assert step(a).startswith("step: ForwardFromTo(%d, %d)" % (i, i))
        a.cursor += 1


# ---------------------------------------------------------------- refused at the limits
def test_a_300000_dim_input_is_refused_and_the_other_tab_goes_on(serve):
    srv = serve(prebuild=False)
    a, b = srv.tab(), srv.tab()
    other_tab_goes_on(a)
    before = b.props["net-version.data"]
    out = upload(b, "dims.prototxt", dims_net(300_000))
    err = load_error(out)
    assert "LimitExceeded" in err and "Check failed: shape.dim_size() <= kMaxBlobAxes (300000 vs. 32)" in err
    assert "layer data" in err and "dims.prototxt:2:62" in err and len(err) < 1500      # no axes echoed
    assert out["net-version.data"] == before                      # the tab keeps its net
    other_tab_goes_on(a)
    assert step(b).startswith("step: ForwardFromTo(0, 0)")
    no_http_errors(srv)


def test_796000_in_place_relus_are_refused_and_the_other_tab_goes_on(serve):
    srv = serve(prebuild=False, max_upload_bytes=64 << 20)
    a, b = srv.tab(), srv.tab()
    text = relu_net(796_000)                                      # 53 MB
    err = load_error(upload(b, "relus.prototxt", text))
    assert "LimitExceeded" in err and "more than the limit of 16,777,216 bytes for a net's text" in err
    assert "--max-text-mb" in err
    other_tab_goes_on(a)
    import engine
    srv2 = serve(prebuild=False, max_upload_bytes=64 << 20, net_limits=engine.NetLimits(max_text_bytes=None))
    c = srv2.tab()
    err = load_error(upload(c, "relus.prototxt", text))
    assert "the net has more than 50,000 layers (the 50,001st is at line 50002)" in err and "--max-layers" in err
    assert step(c).startswith("step: ForwardFromTo(0, 0)")
    no_http_errors(srv)
    no_http_errors(srv2)


# ---------------------------------------------------------------- bounded in the load check
def test_a_net_past_the_load_checks_cpu_is_refused_while_the_other_tab_steps(serve):
    srv = serve(prebuild=False, load_seconds=1)
    a, b = srv.tab(), srv.tab()
    guard = srv.app.inspector.guard
    pool = cf.ThreadPoolExecutor(1)
    try:
        # ~15 s of Init here, under the 50,000-layer limit: far past the 1 s of CPU on any machine
        pending = pool.submit(upload, b, "slow.prototxt", relu_net(45_000, "slow"))
        other_tab_goes_on(a, 3)                    # the check runs apart: this tab is answered meanwhile
        out = pending.result(timeout=300)
    finally:
        pool.shutdown()
    err = load_error(out)
    assert "LoadBounded" in err and "more than the 1 s of CPU a net from the page may take (--load-seconds 1)" in err
    assert guard.stats["bounded"] == 1 and not guard.children
    store = srv.app.inspector.store
    assert store.get(b.sid).loaded.graph.name == "LeNetDigits"      # nothing of it was built in the server
    other_tab_goes_on(a)
    no_http_errors(srv)


def test_the_load_check_bounds_memory_and_passes_a_net_that_builds(tmp_path):
    import engine
    from inspector.config import InspectorConfig
    from inspector.state.guard import LoadBounded, LoadGuard
    from inspector.state.loading import settings
    from inspector.state.sessions import ModelSpec
    big = tmp_path / "big.prototxt"          # an InnerProduct whose fillers write 400 MB at Init
    big.write_text('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 10000 } } }\n'
                   'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { '
                   'num_output: 10000 weight_filler { type: "gaussian" std: 0.01 } } }\n')
    cfg = InspectorConfig(model_root=str(tmp_path), max_net_bytes=None)
    guard = LoadGuard(cpu_seconds=120, memory_bytes=64 << 20, headroom=0)
    with pytest.raises(LoadBounded) as ei:
        guard.check(ModelSpec(model=str(big), phase="TEST"), settings(cfg))
    assert ei.value.limit == "memory" and "--max-net-mb" in str(ei.value)
    small = tmp_path / "small.prototxt"
    small.write_text(relu_net(3))
    spec = ModelSpec(model=str(small), phase="TEST")
    param = guard.check(spec, settings(cfg))
    assert [l.name for l in param.layer] == ["data", "relu0", "relu1", "relu2"]
    assert guard.check(spec, settings(cfg)) is None and guard.stats["cached"] == 1      # checked once
    assert isinstance(engine.Net(str(small), engine.TEST), engine.Net)


def test_a_checked_upload_loads_and_its_errors_come_back_whole(serve, tmp_path):
    srv = serve(prebuild=False)
    tab = srv.tab()
    out = upload(tab, "three.prototxt", relu_net(3, "Three"))
    assert "Three" in lt._text(out["load-status.children"]) and not load_error(out)
    assert srv.app.inspector.guard.stats["passed"] >= 1
    bad = ('name: "squeezenet"\nlayer {\n  name: "fire2/squeeze1x1"\n  type: "Convolution"\n'
           '  convolution_param {\n    num_output: 16\n    kernel_sise: 1\n  }\n}\n')
    err = load_error(upload(tab, "squeeze.prototxt", bad))     # a ParseError, rebuilt from the check
    assert "squeeze.prototxt:7:5" in err and "layer fire2/squeeze1x1" in err
    assert "field convolution_param.kernel_sise" in err
    no_http_errors(srv)


# ---------------------------------------------------------------- 413
def test_a_body_past_the_servers_limit_shows_the_upload_limit_in_the_page(serve):
    srv = serve(max_upload_bytes=4096, prebuild=False)
    tab = srv.tab()
    body = json.dumps(tab.payload(srv.deps.find("net-version.data"), ["upload-model.contents"]))
    r = lt.http().post(srv.url + "/_dash-update-component", data=body + " " * (8 << 20),
                       headers={"Content-Type": "application/json"}, timeout=120)
    assert r.status_code == 200 and TRACEBACK not in r.text
    doc = r.json()
    assert doc["response"] == {}                                # every output of the load stays
    box = lt._text(doc["sideUpdate"]["load-error"]["children"])
    assert "PathRefused" in box and "larger than the limit of 4096 bytes (--max-upload-mb" in box
    assert step(tab).startswith("step: ForwardFromTo(0, 0)")
    r = lt.http().post(srv.url + "/_load-nothing", data=" " * (8 << 20), timeout=120)     # not the page's: 413
    assert r.status_code in (404, 405, 413)


# ---------------------------------------------------------------- messages
def test_a_nul_byte_in_a_path_is_refused_with_a_message(serve):
    srv = serve(prebuild=False)
    tab = srv.tab()
    with tab.lock:
        tab.props["model-path.value"] = "examples/lenet\x00/lenet_train_test.prototxt"
    tab.last_load = {}
    out = tab.click("model-path-open")
    err = load_error(tab.props if not out else {**tab.props, **out})
    assert "PathRefused" in err and "contains a NUL byte" in err and "ValueError" not in err
    no_http_errors(srv)


def test_an_empty_net_loads_and_its_forward_fails_as_caffes(serve):
    srv = serve(prebuild=False)
    tab = srv.tab()
    out = upload(tab, "empty.prototxt", 'name: "Empty"\n')
    assert "Empty" in lt._text(out["load-status.children"]) and not load_error(out)
    msg = step(tab)
    assert msg.startswith("⚠") and "Check failed: end < layers_.size() (-1 vs. 0)" in msg
    no_http_errors(srv)


def test_a_tab_from_before_a_restart_is_told_so(serve):
    first = serve(prebuild=False)
    tab = first.tab()
    other_tab_goes_on(tab, 1)
    again = serve(prebuild=False)                    # the server restarted: the tab's next request goes there
    tab.base = again.url
    msg = step(tab)
    assert msg.startswith("⚠") and "the server was restarted since this page was opened" in msg
    assert "reload the page" in msg and "sat idle" not in msg
    fresh = again.tab()                               # a tab opened on it has its net
    assert step(fresh).startswith("step: ForwardFromTo(0, 0)")


def test_the_servers_caches_of_parsed_nets_are_bounded_by_size(tmp_path, monkeypatch):
    from inspector.state import loading
    monkeypatch.setattr(loading, "_SOURCES", type(loading._SOURCES)())
    monkeypatch.setattr(loading, "CACHED_BYTES", 3000)
    paths = []
    for k in range(3):
        p = tmp_path / ("n%d.prototxt" % k)
        p.write_text(relu_net(40, "n%d" % k))           # some 1,200 bytes each as a NetParameter
        paths.append(str(p))
        loading.read_source(str(p))
    kept = [key[0] for key in loading._SOURCES]
    assert kept == [paths[1], paths[2]]                 # the oldest went: 3 x 1,200 > 3,000
    big = tmp_path / "big.prototxt"
    big.write_text(relu_net(400, "big"))
    loading.read_source(str(big))
    assert [key[0] for key in loading._SOURCES] == [str(big)]      # the newest stays, even alone past it


# ---------------------------------------------------------------- a run from the page bounded
def conv_net(n, side=32, channels=8):
    """An Input and ``n`` 3x3 convolutions."""
    text = ('name: "convs"\nlayer { name: "data" type: "Input" top: "data" '
            'input_param { shape { dim: 2 dim: %d dim: %d dim: %d } } }\n' % (channels, side, side))
    bottom = "data"
    for i in range(n):
        text += ('layer { name: "conv%d" type: "Convolution" bottom: "%s" top: "conv%d" convolution_param '
                 '{ num_output: %d kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.01 } } }\n'
                 % (i, bottom, i, channels))
        bottom = "conv%d" % i
    return text


def test_a_run_past_run_seconds_stops_between_layers_and_continue_goes_on(serve):
    srv = serve(prebuild=False, run_seconds=1e-6)      # every layer ends past it: one layer per request
    a, b = srv.tab(), srv.tab()
    names = a.net.layers                               # digits, conv1, pool1, ..., loss
    msg = a.click("btn-forward")["run-message.children"]
    assert msg.startswith("ForwardFromTo(0, 8): %s → %s" % (names[0], names[8])) and \
        "stopped after %s: time limit reached: 1e-06 s (--run-seconds 1e-06) (forward, ran " % names[0] in msg, msg
    store = srv.app.inspector.store
    assert store.get(a.sid).paused == {"kind": "forward", "next": 1, "end": 8, "layer": names[0]}
    other_tab_goes_on(b)
    stops = [msg]
    for _ in range(12):                                # Continue: a layer further each time, then the end
        msg = a.click("btn-continue")["run-message.children"]
        stops.append(msg)
        if "time limit" not in msg:
            break
    assert len(stops) == 9 and stops[-1].startswith("continue: ForwardFromTo(8, 8)"), stops
    assert "stopped after %s: time limit reached" % names[2] in stops[2], stops
    assert store.get(a.sid).paused is None
    no_http_errors(srv)


def test_an_uploaded_nets_forward_backward_stops_at_run_seconds_and_continues(serve):
    """An uploaded net of 60 convolutions under a limit every layer passes (no timing is
    relied on): Forward + Backward stops after its first layer, Continue goes on from there."""
    srv = serve(prebuild=False, run_seconds=1e-6)
    a = srv.tab()
    out = upload(a, "convs.prototxt", conv_net(60))
    assert "convs" in lt._text(out.get("load-status.children") or ""), load_error(out)
    msg = a.click("btn-forward-backward")["run-message.children"]
    assert msg.startswith("Forward + Backward stopped in forward after data: time limit reached: 1e-06 s "
                          "(--run-seconds 1e-06)"), msg
    store = srv.app.inspector.store
    assert store.get(a.sid).paused == {"kind": "forward_backward", "next": 1, "end": 60, "phase": "forward",
                                       "layer": "data"}
    msg = a.click("btn-continue")["run-message.children"]
    assert "stopped in forward after conv0: time limit reached" in msg, msg
    assert store.get(a.sid).paused["next"] == 2
    no_http_errors(srv)


def test_a_layer_over_max_layer_gflop_is_refused_before_the_run_starts(serve):
    srv = serve(prebuild=False, max_layer_gflop=0.01)   # LeNet's conv1: 0.0376 GFLOP at batch 64
    a = srv.tab()
    assert step(a).startswith("step: ForwardFromTo(0, 0)")   # the data layer is cheap
    a.cursor = 1
    msg = a.click("btn-forward")["run-message.children"]
    assert msg.startswith("⚠ conv1 (Convolution) needs 0.0376 GFLOP for one forward pass of its batch, over "
                          "this server's limit of 0.01 GFLOP per layer (--max-layer-gflop)"), msg
    msg = a.click("btn-forward-backward")["run-message.children"]
    assert "conv1 (Convolution) needs" in msg and "--max-layer-gflop" in msg, msg
    no_http_errors(srv)

"""The inspector's server over HTTP (loopback only), on what it must refuse and
what must survive a failure:

- uploads over the size limit are refused with a message (and a body past the
  server's request limit too, where Flask answers 413, never a traceback);
- model paths that leave ``--model-root`` (``..``, absolute paths, symlinks
  pointing out) are refused with a message;
- Python layers in uploaded models are refused unless the server allows them;
- a layer that raises while stepping shows its error in the run message and
  the session goes on; a NaN/Inf is flagged, not fatal;
- a failed load (syntax, net error, Python layer, path, weights, mean) leaves
  the previous net, its inputs, its records and its cursor as they were;
- malformed requests never get a traceback back and the server keeps going.

The page is driven as the browser drives it (benchmarks/load_test.py's Tab:
``/_dash-layout``, ``/_dash-dependencies``, ``POST /_dash-update-component``).
"""
import json
import os

import numpy as np
from inspector_testlib import OVERFLOW_NET, SYNTAX_ERROR_NET

from benchmarks import load_test as lt

TRACEBACK = "Traceback (most recent call last)"

BOOM_MODULE = '''
import numpy as np
from engine import Layer


class Boom(Layer):
    """Copies its bottom; raises when the bottom holds a value above 1."""

    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        if float(np.max(bottom[0].data)) > 1.0:
            raise ValueError("boom: an input above 1 reached layer %s" % self.layer_param.name)
        top[0].data[...] = bottom[0].data

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff
'''


def boom_net(module):
    return """name: "BoomNet"
layer { name: "in" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
layer { name: "boom" type: "Python" bottom: "data" top: "copied"
        python_param { module: "%s" layer: "Boom" } }
layer { name: "fc" type: "InnerProduct" bottom: "copied" top: "fc"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
""" % module


UNKNOWN_BOTTOM_NET = """name: "Dangling"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 } } }
layer { name: "relu" type: "ReLU" bottom: "nothing" top: "r" }
"""

TINY_NET = """name: "TinyInRoot"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 4 } } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        inner_product_param { num_output: 2 } }
"""


def no_http_errors(srv):
    assert srv.stats.http_errors == [] and srv.stats.tracebacks == [], (srv.stats.http_errors, srv.stats.tracebacks)


def status(tab):
    return lt._text(tab.props.get("load-status.children"))


def load_error(tab):
    return lt._text(tab.props.get("load-error.children") or "")


def upload(tab, kind, filename, content):
    with tab.lock:
        tab.props["upload-%s.filename" % kind] = filename
    tab.last_load = {}
    return tab.trigger("upload-%s.contents" % kind, lt.data_url(content))


def open_path(tab, path):
    with tab.lock:
        tab.props["model-path.value"] = path
    tab.last_load = {}
    return tab.click("model-path-open")


def run(tab, button):
    tab.click(button)
    return tab.props.get("run-message.children") or ""


def set_inputs(tab, kind, value):
    with tab.lock:
        tab.props["input-kind.value"] = kind
        tab.props["input-value.value"] = value
    return run(tab, "btn-apply-inputs")


# ---------------------------------------------------------------- upload limits
def test_uploads_over_the_limit_are_refused_with_a_message(serve):
    srv = serve(max_upload_bytes=4096)
    tab = srv.tab()
    before = tab.props["net-version.data"]
    out = upload(tab, "model", "big.prototxt", "# padding\n" * 500)          # 5000 bytes
    err = lt._text(out.get("load-error.children"))
    assert "PathRefused" in err and "larger than the limit of 4096 bytes" in err
    assert out["net-version.data"] == before and "LeNetDigits" in lt._text(out["load-status.children"])
    out = upload(tab, "weights", "big.caffemodel", b"\0" * 6000)
    assert "larger than the limit of 4096 bytes" in lt._text(out.get("load-error.children"))
    # an input file over the limit: its callback fails, the banner says why
    with tab.lock:
        tab.props["upload-npy.filename"] = "x.npy"
    out = tab.trigger("upload-npy.contents", lt.data_url(b"\0" * 6000))
    assert "receiving the file failed" in out["error-text.children"] and "limit" in out["error-text.children"]
    assert out["error-banner.style"] == {"display": "flex"}
    # the session goes on
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(0, 0)")
    no_http_errors(srv)
    # a request body past the server's own limit is cut off before it is read (Flask's 413): the page
    # gets the upload limit's message in its load error box (tests/inspector/test_server_bounds.py)
    body = json.dumps(tab.payload(srv.deps.find("net-version.data"), ["upload-model.contents"]))
    r = lt.http().post(srv.url + "/_dash-update-component", data=body + " " * (8 << 20),
                       headers={"Content-Type": "application/json"}, timeout=120)
    assert r.status_code == 200 and TRACEBACK not in r.text
    assert "larger than the limit of 4096 bytes" in lt._text(r.json()["sideUpdate"]["load-error"]["children"])
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(1, 1)")


# ---------------------------------------------------------------- the model root
def test_model_paths_outside_the_root_are_refused(serve, tmp_path):
    root = tmp_path / "root"
    (root / "nets").mkdir(parents=True)
    (root / "nets" / "tiny.prototxt").write_text(TINY_NET)
    outside = tmp_path / "outside.prototxt"
    outside.write_text(TINY_NET.replace("TinyInRoot", "Outside"))
    os.symlink(outside, root / "link.prototxt")                  # a file symlink pointing out
    os.symlink(tmp_path, root / "up")                            # a folder symlink pointing out
    os.symlink(root / "nets" / "tiny.prototxt", root / "inside_link.prototxt")
    srv = serve(model_root=root)
    tab = srv.tab()
    version = tab.props["net-version.data"]
    refused = ["../outside.prototxt", "nets/../../outside.prototxt", str(outside), "link.prototxt",
               "up/outside.prototxt", "/etc/passwd", "nets/../../../../../../etc/passwd"]
    for path in refused:
        out = open_path(tab, path)
        err = lt._text(out.get("load-error.children"))
        assert "PathRefused" in err and "outside the model root" in err, (path, err)
        assert out["net-version.data"] == version, path
        assert "LeNetDigits" in lt._text(out["load-status.children"]), path
    # missing files and folders: a message too
    assert "does not exist" in lt._text(open_path(tab, "nets/nope.prototxt").get("load-error.children"))
    assert "not a file" in lt._text(open_path(tab, "nets").get("load-error.children"))
    # a model from the page that would read outside the root is refused by layer
    reader = ('layer { name: "d" type: "Data" top: "data" transform_param { mean_file: "%s/m.binaryproto" } '
              'data_param { source: "%s" backend: LMDB batch_size: 1 } }' % (tmp_path, root / "nets"))
    err = lt._text(upload(tab, "model", "reader.prototxt", reader).get("load-error.children"))
    assert "FileAccessRefused" in err and "outside the model root" in err and "layer d" in err
    assert tab.props["net-version.data"] == version
    # a data source outside the root is never opened: the net opens structure only, that layer stood in
    reader = ('name: "Standin" layer { name: "d" type: "Data" top: "data" '
              'data_param { source: "%s" backend: LMDB batch_size: 1 } }' % tmp_path)
    out = upload(tab, "model", "reader2.prototxt", reader)
    assert out.get("load-error.children") is None and "Standin" in lt._text(out["load-status.children"])
    version = tab.props["net-version.data"]
    # inside the root (also through a symlink that stays inside, and absolute): it loads
    for path in ("nets/tiny.prototxt", "inside_link.prototxt", str(root / "nets" / "tiny.prototxt")):
        out = open_path(tab, path)
        assert out.get("load-error.children") is None and "TinyInRoot" in lt._text(out["load-status.children"]), path
    assert [o["value"] for o in tab.props["range-start.options"]] == ["in", "fc"]
    no_http_errors(srv)


# ---------------------------------------------------------------- Python layers
def test_python_layers_are_refused_unless_the_server_allows_them(serve, tmp_path, monkeypatch):
    module = "server_safety_boom_%d" % os.getpid()
    (tmp_path / (module + ".py")).write_text(BOOM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    srv = serve()
    tab = srv.tab()
    version = tab.props["net-version.data"]
    out = upload(tab, "model", "boom.prototxt", boom_net(module))
    err = lt._text(out.get("load-error.children"))
    assert "PythonLayerRefused" in err and "layer boom" in err and "--allow-python-layers" in err
    assert out["net-version.data"] == version and "LeNetDigits" in lt._text(out["load-status.children"])
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(0, 0): digits")
    no_http_errors(srv)

    allowed = serve(allow_python_layers=True)
    tab = allowed.tab()
    out = upload(tab, "model", "boom.prototxt", boom_net(module))
    assert out.get("load-error.children") is None, lt._text(out.get("load-error.children"))
    assert "BoomNet" in lt._text(out["load-status.children"])
    assert set_inputs(tab, "constant", 0.5).startswith("inputs set: constant 0.5")
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(0, 0): in")
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(1, 1): boom")
    no_http_errors(allowed)


# ---------------------------------------------------------------- a failing layer
def test_a_failing_layer_shows_its_error_and_the_session_goes_on(serve, tmp_path, monkeypatch):
    module = "server_safety_boom2_%d" % os.getpid()
    (tmp_path / (module + ".py")).write_text(BOOM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    srv = serve(allow_python_layers=True)
    tab = srv.tab()
    out = upload(tab, "model", "boom.prototxt", boom_net(module))
    assert out.get("load-error.children") is None
    set_inputs(tab, "constant", 2.0)                     # the Python layer raises on inputs above 1
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(0, 0): in")
    msg = run(tab, "btn-step-forward")
    assert msg.startswith("⚠") and "boom: an input above 1 reached layer boom" in msg, msg
    assert "error-text.children" not in tab.props or not tab.props["error-text.children"]    # no banner needed
    msg = run(tab, "btn-forward-backward")
    assert msg.startswith("⚠") and "boom" in msg
    # the session goes on: other actions work, and with good inputs the same layer runs
    assert run(tab, "btn-step-backward").startswith("step back: BackwardFromTo(3, 3): loss")
    assert set_inputs(tab, "constant", 0.5).startswith("inputs set: constant 0.5")
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(0, 0): in")
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(1, 1): boom")
    assert run(tab, "btn-forward-backward").startswith("Forward + Backward: loss")
    # a net that overflows (Power + Exp → inf): flagged on the page, not fatal
    out = upload(tab, "model", "overflow.prototxt", OVERFLOW_NET)
    assert "Overflow" in lt._text(out["load-status.children"])
    assert run(tab, "btn-forward-backward").startswith("Forward + Backward: loss")
    assert "exp1" in tab.props["nan-text.children"] and tab.props["nan-alert.style"] == {"display": "flex"}
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(0, 0): in")
    no_http_errors(srv)
    assert srv.stats.banners == []


# ---------------------------------------------------------------- a failed load keeps everything
def _snapshot(app, sid):
    s = app.inspector.store.get(sid)
    ld = s.loaded
    return dict(
        loaded=ld, spec=s.spec, net_version=s.net_version, cursor=(s.cursor_forward, s.cursor_backward),
        inputs=dict(s.input_settings), data=ld.net.blobs["data"].data.copy(),
        label=ld.net.blobs["label"].data.copy(), conv1=ld.net.blobs["conv1"].data.copy(),
        weights=ld.net.params["conv1"][0].data.copy(), steps=[st.id for st in ld.recorder.steps],
        runlog=(ld.runlog.clock, ld.runlog.input_time, dict(ld.runlog.forward), dict(ld.runlog.backward),
                dict(ld.runlog.writer), ld.runlog.inputs_label))


def _same(a, b):
    assert a["loaded"] is b["loaded"] and a["spec"] == b["spec"]
    assert a["net_version"] == b["net_version"] and a["cursor"] == b["cursor"] and a["inputs"] == b["inputs"]
    for k in ("data", "label", "conv1", "weights"):
        assert np.array_equal(a[k], b[k]), k
    assert a["steps"] == b["steps"] and a["runlog"] == b["runlog"]


def test_a_failed_load_leaves_the_previous_net_inputs_and_records(serve, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    srv = serve(model_root=root)
    tab = srv.tab()
    app, sid = srv.app, tab.sid
    assert set_inputs(tab, "constant", 0.25).startswith("inputs set: constant 0.25")
    for i in range(3):
        assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(%d, %d)" % (i, i))
    tab.trigger("net-graph.clickData", {"points": [{"customdata": ["blob", "conv1"]}]})
    details_before = lt._text(tab.props["details.children"])
    before = _snapshot(app, sid)
    assert before["steps"] and before["inputs"]["kind"] == "constant"

    failures = [
        (lambda: upload(tab, "model", "broken.prototxt", SYNTAX_ERROR_NET), ["ParseError", "broken.prototxt:14:1"]),
        (lambda: upload(tab, "model", "dangling.prototxt", UNKNOWN_BOTTOM_NET),
         ["NetError", "layer relu", "blob nothing", "Unknown bottom blob"]),
        (lambda: upload(tab, "model", "py.prototxt", lt.PYTHON_LAYER_NET), ["PythonLayerRefused", "layer py"]),
        (lambda: open_path(tab, "../../etc/passwd"), ["outside the model root"]),
        (lambda: upload(tab, "weights", "junk.caffemodel", b"\xff" * 3000), ["junk.caffemodel", "not a NetParameter"]),
        (lambda: upload(tab, "mean", "junk.binaryproto", b"\xff" * 100), ["junk.binaryproto", "not a BlobProto"]),
    ]
    for act, needles in failures:
        out = act()
        err = lt._text(out.get("load-error.children"))
        for needle in needles:
            assert needle in err, (needle, err)
        s = app.inspector.store.get(sid)
        assert s.upload_dir not in err                       # the server's folders stay private
        assert out["net-version.data"] == before["net_version"]
        assert "LeNetDigits" in lt._text(out["load-status.children"])
        _same(before, _snapshot(app, sid))
    # the page still shows the same blob, and the next step goes on from the cursor
    tab.trigger("net-graph.clickData", {"points": [{"customdata": ["blob", "conv1"]}]})
    assert lt._text(tab.props["details.children"]) == details_before
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(3, 3): conv2")
    no_http_errors(srv)
    assert srv.stats.banners == []


# ---------------------------------------------------------------- requests the page never sends
def test_malformed_requests_get_no_traceback(serve):
    srv = serve()
    tab = srv.tab()
    post = lambda body: lt.http().post(srv.url + "/_dash-update-component", data=body,   # noqa: E731
                                       headers={"Content-Type": "application/json"}, timeout=120)
    for body in ("{", "{}", "[]", json.dumps({"output": "nope.x", "outputs": {"id": "nope", "property": "x"},
                                              "inputs": [], "state": [], "changedPropIds": []})):
        r = post(body)
        assert r.status_code >= 400 and TRACEBACK not in r.text and "File \"" not in r.text, (body, r.status_code)
    # a forged session id: the callback gets a fresh session of its own, or a banner — never a 500
    dep = srv.deps.find("run-version.data")
    for forged in ("../../etc", {"x": 1}, None, 12):
        p = tab.payload(dep, ["btn-step-forward.n_clicks"])
        for item in p["state"]:
            if item["id"] == "session-id":
                item["value"] = forged
        r = post(json.dumps(p))
        assert r.status_code == 200 and TRACEBACK not in r.text, (forged, r.status_code, r.text[:200])
    assert all(len(sid) == 32 for sid in srv.app.inspector.store.ids())
    # the real tab is untouched
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(0, 0): digits")
    no_http_errors(srv)

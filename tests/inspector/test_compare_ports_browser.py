"""The Compare tab's ports, in headless Chromium as a user uses them: an ONNX model, a PyTorch
module (.py + .pth, with the factory's name) and a runtime's tensors (.npz) uploaded and
compared; no Step A/Step B boxes for a port; a net without weights against a port with its
own: the weights-differ notice, and both its offers (copy the port's weights, load the
.caffemodel), each comparing again; a net of zeros: "proves nothing", not "Faithful"."""
import os
import re

import numpy as np
import pytest
from browser_helpers import open_tab as _tab
from browser_helpers import settle, text_of, wait_for, wait_text
from browser_helpers import start_app as _start

import engine
from inspector import ids

pytestmark = pytest.mark.browser

NET = """
name: "PagePort"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 12 dim: 12 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 }
                            bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1"
        scale_param { bias_term: true filler { type: "uniform" min: 0.5 max: 1.5 }
                      bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
"""


def _session(app):
    return next(iter(app.inspector.store._sessions.values()))       # the one tab's session


def _shot(dash_duo, name):
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        settle(dash_duo)
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], name))


def _other_net(tmp_path, seed=11):
    """The same net with other weights (and BatchNorm statistics that are not trivial)."""
    p = tmp_path / "other.prototxt"
    p.write_text(NET)
    engine.set_random_seed(seed)
    net = engine.Net(str(p), engine.TEST)
    rng = np.random.default_rng(seed)
    bn = net.layer_dict["bn1"]
    bn.blobs[0].data[...] = rng.normal(0.2, 0.3, 4)
    bn.blobs[1].data[...] = rng.uniform(0.5, 2.0, 4)
    bn.blobs[2].data[...] = 1.0
    return net


def _upload(dash_duo, app, id_, path, slot=None, done=None):
    """Give the upload box ``id_`` the file ``path`` (as a user picking it) until the server
    kept it in ``slot`` (or ``done()`` says it took it)."""
    def taken():
        if done() if done is not None else str(_session(app).uploads.get(slot, "")).endswith(
                os.path.basename(str(path))):
            return True
        try:
            dash_duo.driver.find_element("css selector", "#%s input[type=file]" % id_).send_keys(str(path))
        except Exception:     # noqa: BLE001 - stale while the tab re-renders
            pass
        return False
    wait_for(taken, timeout=120, what="%s received" % os.path.basename(str(path)))


def _displayed(dash_duo, id_):
    return dash_duo.driver.execute_script(
        "const e = document.getElementById(arguments[0]); return !!e && e.offsetParent !== null;", id_)


def _kind_shown(dash_duo, words):
    wait_for(lambda: words in text_of(dash_duo, ids.COMPARE_KIND), timeout=60, what="%r chosen" % words)


def _compare(dash_duo):
    dash_duo.driver.execute_script("document.getElementById(arguments[0]).click();", ids.COMPARE_BUTTON)


def _summary_after(dash_duo, needle, before):
    """The Compare summary once it shows ``needle`` and is not ``before`` (a new comparison);
    a refusal (⚠) fails at once, saying it."""
    seen = [""]

    def new_summary():
        t = seen[0] = text_of(dash_duo, ids.COMPARE_SUMMARY)
        if t == before:
            return None
        assert needle in t or not t.startswith("⚠"), t
        return t if needle in t else None
    try:
        return wait_for(new_summary, timeout=180, what="%r in a new Compare summary" % needle)
    except AssertionError as e:
        raise AssertionError("%s; the summary: %r" % (e, seen[0])) from None


def test_each_port_kind_uploaded_and_compared_without_step_boxes(dash_duo, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("torch")
    import engine.ports as ports
    p = tmp_path / "net.prototxt"
    p.write_text(NET)
    _other_net(tmp_path).save(str(tmp_path / "w.caffemodel"))
    app = _start(dash_duo, model=str(p), weights=str(tmp_path / "w.caffemodel"), allow_python_layers=True)
    net = _session(app).loaded.net
    _tab(dash_duo, "Compare")
    wait_for(lambda: _displayed(dash_duo, ids.COMPARE_STEPS), timeout=60, what="the Step boxes for two steps")
    # an ONNX port (this net exported): faithful; no Step A/B boxes
    onnx_path = tmp_path / "port.onnx"
    onnx_path.write_bytes(ports.export_onnx_bytes(net))
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, onnx_path, "compare")
    _kind_shown(dash_duo, "ONNX model")
    wait_for(lambda: not _displayed(dash_duo, ids.COMPARE_STEPS), timeout=60, what="no Step boxes for a port")
    _compare(dash_duo)
    onnx_text = _summary_after(dash_duo, "Faithful", "")
    _shot(dash_duo, "compare_port_onnx.png")
    # a PyTorch module: its .py (the factory's name typed) and its .pth
    res = ports.export_torch(net, tmp_path / "page_port.py")
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, res.path, "compare_torch")
    _kind_shown(dash_duo, "PyTorch module")
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, res.state_dict_path, "compare_state_dict")
    assert "state_dict" in text_of(dash_duo, ids.COMPARE_SUMMARY)
    wait_for(lambda: _displayed(dash_duo, ids.COMPARE_TORCH_BOX), timeout=60, what="the factory box")
    assert not _displayed(dash_duo, ids.COMPARE_STEPS)
    dash_duo.find_element("#" + ids.COMPARE_FACTORY).send_keys(res.class_name)
    _compare(dash_duo)
    torch_text = _summary_after(dash_duo, "Faithful", onnx_text)
    _shot(dash_duo, "compare_port_torch.png")
    # a runtime's tensors, names stripped: the input and every blob in Forward's order
    net.Forward()
    arrays = [np.array(net.blobs[b].data) for b in ("data", "conv1", "pool1", "ip1")]
    np.savez(tmp_path / "dump.npz", *arrays)
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, tmp_path / "dump.npz", "compare_tensors")
    _kind_shown(dash_duo, "runtime's tensors")
    assert not _displayed(dash_duo, ids.COMPARE_STEPS) and not _displayed(dash_duo, ids.COMPARE_TORCH_BOX)
    _compare(dash_duo)
    _summary_after(dash_duo, "Faithful", torch_text)
    assert "arr_3" in text_of(dash_duo, ids.COMPARE_TABLE)
    _shot(dash_duo, "compare_port_tensors.png")
    # back to two steps: the boxes again
    from selenium.webdriver.common.keys import Keys
    dash_duo.find_element("#%s" % ids.COMPARE_KIND).click()
    search = wait_for(lambda: dash_duo.driver.find_elements("css selector", "input.dash-dropdown-search"),
                      timeout=30, what="the dropdown's search box")[0]
    search.send_keys("two timeline")
    search.send_keys(Keys.ENTER)
    wait_for(lambda: _displayed(dash_duo, ids.COMPARE_STEPS), timeout=60, what="the Step boxes back")


def test_weights_differ_notice_and_the_offer_to_copy_the_ports_weights(dash_duo, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("torch")
    import engine.ports as ports
    p = tmp_path / "net.prototxt"
    p.write_text(NET)
    other = _other_net(tmp_path)                        # the port's weights: not this net's fillers'
    res = ports.export_torch(other, tmp_path / "trained.py")
    app = _start(dash_duo, model=str(p), allow_python_layers=True)
    _tab(dash_duo, "Compare")
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, res.path, "compare_torch")
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, res.state_dict_path, "compare_state_dict")
    _kind_shown(dash_duo, "PyTorch module")
    _compare(dash_duo)
    before = _summary_after(dash_duo, "First departing layer", "")
    wait_for(lambda: _displayed(dash_duo, ids.COMPARE_WEIGHTS_NOTICE), timeout=60, what="the weights notice")
    notice = text_of(dash_duo, ids.COMPARE_WEIGHTS_NOTICE)
    assert "weights differ" in notice and "state_dict" in notice and "Copy the port's weights" in notice
    assert "Load the net's .caffemodel" in notice
    _shot(dash_duo, "compare_weights_differ.png")
    # offer 1: copy the port's weights into the net, compared again
    dash_duo.driver.execute_script("document.getElementById(arguments[0]).click();", ids.COMPARE_COPY_WEIGHTS)
    after = _summary_after(dash_duo, "Faithful", before)
    assert "copied the port's weights into" in after
    wait_for(lambda: not _displayed(dash_duo, ids.COMPARE_WEIGHTS_NOTICE), timeout=60, what="the notice gone")
    np.testing.assert_allclose(_session(app).loaded.net.layer_dict["ip1"].blobs[0].data,
                               other.layer_dict["ip1"].blobs[0].data)
    _shot(dash_duo, "compare_weights_copied.png")


def test_weights_differ_offer_to_load_the_caffemodel(dash_duo, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import engine.ports as ports
    p = tmp_path / "net.prototxt"
    p.write_text(NET)
    other = _other_net(tmp_path)
    other.save(str(tmp_path / "other.caffemodel"))
    onnx_path = tmp_path / "other.onnx"
    onnx_path.write_bytes(ports.export_onnx_bytes(other))
    app = _start(dash_duo, model=str(p))
    _tab(dash_duo, "Compare")
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, onnx_path, "compare")
    _kind_shown(dash_duo, "ONNX model")
    _compare(dash_duo)
    before = _summary_after(dash_duo, "First departing layer", "")
    wait_for(lambda: _displayed(dash_duo, ids.COMPARE_WEIGHTS_NOTICE), timeout=60, what="the weights notice")
    assert "initializers" in text_of(dash_duo, ids.COMPARE_WEIGHTS_NOTICE)

    _upload(dash_duo, app, ids.COMPARE_LOAD_WEIGHTS, tmp_path / "other.caffemodel",
            done=lambda: _session(app).loaded.weights_from)
    after = _summary_after(dash_duo, "Faithful", before)
    assert "loaded other.caffemodel" in after
    wait_for(lambda: not _displayed(dash_duo, ids.COMPARE_WEIGHTS_NOTICE), timeout=60, what="the notice gone")
    _shot(dash_duo, "compare_weights_loaded.png")


def test_a_net_of_zeros_proves_nothing(dash_duo, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import engine.ports as ports
    p = tmp_path / "zeros.prototxt"
    p.write_text(re.sub(r"(bias_)?(weight_)?filler \{[^}]*\}", "", NET))   # a deploy file without fillers
    app = _start(dash_duo, model=str(p))
    onnx_path = tmp_path / "zeros.onnx"
    onnx_path.write_bytes(ports.export_onnx_bytes(_session(app).loaded.net))
    _tab(dash_duo, "Compare")
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, onnx_path, "compare")
    _kind_shown(dash_duo, "ONNX model")
    _compare(dash_duo)
    text = _summary_after(dash_duo, "Proves nothing", "")
    assert "Faithful" not in text and "every value compared is constant" in text
    assert not _displayed(dash_duo, ids.COMPARE_WEIGHTS_NOTICE)
    _shot(dash_duo, "compare_proved_nothing.png")


def test_uploaded_python_is_refused_unless_the_server_allows_it(dash_duo, tmp_path):
    pytest.importorskip("torch")
    import engine.ports as ports
    p = tmp_path / "net.prototxt"
    p.write_text(NET)
    app = _start(dash_duo, model=str(p))                # no --allow-python-layers
    res = ports.export_torch(_session(app).loaded.net, tmp_path / "page_port.py")
    marker = tmp_path / "ran"
    with open(res.path, "a", encoding="utf-8") as f:
        f.write("\nopen(%r, 'w').write('the upload ran')\n" % str(marker))
    _tab(dash_duo, "Compare")
    _upload(dash_duo, app, ids.COMPARE_UPLOAD, res.path, "compare_torch")
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "does not run uploaded code")
    _kind_shown(dash_duo, "PyTorch module")
    _compare(dash_duo)
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "--allow-python-layers")
    assert "is Python code from the page" in text_of(dash_duo, ids.COMPARE_SUMMARY)
    assert not marker.exists()

"""Browser tests: the inspector in headless Chromium (dash.testing's dash_duo)."""
import json
from pathlib import Path

import pytest
from browser_helpers import click_id as _click
from browser_helpers import click_node, details_show, graph_fills, settle, text_of, wait_for, wait_text

from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


def _start(dash_duo, **kw):
    cfg = InspectorConfig(model_root=str(ROOT), **kw)
    app = create_app(cfg)
    dash_duo.start_server(app)
    wait_text(dash_duo, ids.LOAD_STATUS, "layers", timeout=120)
    wait_for(lambda: graph_fills(dash_duo), what="the graph")
    return app


def test_load_example_and_click_node(dash_duo):
    _start(dash_duo)
    assert "LeNetDigits" in text_of(dash_duo, ids.LOAD_STATUS)
    click_node(dash_duo, "conv1", until=details_show(dash_duo, "Convolution"))
    details = text_of(dash_duo, ids.DETAILS)
    assert "num_output" in details and "lr_mult" in details


def _select(dash_duo, id_, label):
    dash_duo.select_dcc_dropdown("#" + id_, value=label)


def test_forward_range_shows_stats_and_recolours(dash_duo):
    _start(dash_duo)
    _select(dash_duo, ids.COLOUR_BY, "mean |data| of tops")
    before = wait_for(lambda: (lambda f: f if f.get("conv1") == "#e0e0e0" else None)(graph_fills(dash_duo)),
                      what="no-data colours")
    _select(dash_duo, ids.START, "1 conv1")
    _select(dash_duo, ids.END, "5 ip1")
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(1, 5)")
    after = wait_for(lambda: (lambda f: f if f.get("conv1") != before["conv1"] else None)(graph_fills(dash_duo)),
                     what="new colours")
    for name in ("conv1", "pool1", "conv2", "pool2", "ip1"):
        assert after[name] != "#e0e0e0", name
    assert after["relu1"] == "#e0e0e0" and after["loss"] == "#e0e0e0"     # outside the range
    click_node(dash_duo, "conv2", kind="blob", until=details_show(dash_duo, "mean |x|"))
    assert "64×50×8×8" in text_of(dash_duo, ids.DETAILS)
    wait_for(lambda: dash_duo.driver.find_element("id", ids.FEATURE_MAPS).find_elements(
        "css selector", ".heatmaplayer image, .hm image, image"), what="feature maps")


def test_backward_range(dash_duo):
    _start(dash_duo)
    _click(dash_duo, ids.FORWARD)                     # the whole net: 0 .. last
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    _select(dash_duo, ids.COLOUR_BY, "param gradient: mean |diff| of weights/biases")
    _click(dash_duo, ids.BACKWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "BackwardFromTo(8, 0)")
    fills = wait_for(lambda: (lambda f: f if f.get("conv1") != "#e0e0e0" else None)(graph_fills(dash_duo)),
                     what="gradient colours")
    assert fills["ip2"] != "#e0e0e0"
    click_node(dash_duo, "conv1", until=details_show(dash_duo, "last backward time"))


def test_nan_alert_names_first_layer(dash_duo, overflow_net):
    _start(dash_duo, model=str(overflow_net))
    _click(dash_duo, ids.FORWARD_BACKWARD)
    wait_text(dash_duo, ids.NAN_TEXT, "exp1")
    assert dash_duo.find_element("#" + ids.NAN_ALERT).is_displayed()
    _click(dash_duo, ids.NAN_SELECT)
    wait_text(dash_duo, ids.DETAILS, "Exp")
    assert "exp1" in text_of(dash_duo, ids.DETAILS)


def test_report_download(dash_duo):
    _start(dash_duo)
    _click(dash_duo, ids.FORWARD_BACKWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "loss")
    _click(dash_duo, ids.REPORT_BUTTON)
    folder = Path(dash_duo.download_path)
    files = wait_for(lambda: [p for p in folder.iterdir() if not p.name.endswith(".crdownload")],
                     what="a downloaded report")
    text = files[0].read_text()
    if files[0].suffix == ".json":
        doc = json.loads(text)
        assert doc
    assert "conv1" in text


def test_syntax_error_upload_keeps_previous_net(dash_duo, broken_net):
    _start(dash_duo)
    dash_duo.find_element("#%s input" % ids.UPLOAD_MODEL).send_keys(str(broken_net))
    wait_text(dash_duo, ids.LOAD_ERROR, "broken.prototxt:14:1")
    assert "Expected" in text_of(dash_duo, ids.LOAD_ERROR)
    assert "LeNetDigits" in text_of(dash_duo, ids.LOAD_STATUS)       # the last good net stays
    _click(dash_duo, ids.STEP_FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 0)")
    click_node(dash_duo, "pool1", until=details_show(dash_duo, "Pooling"))


def _real_net():
    """GoogLeNet from ../shared (run up to inception 3b), else the tiny ResNet."""
    zoo = ROOT.parent / "shared" / "zoo" / "models" / "bvlc_googlenet" / "deploy.prototxt"
    if zoo.is_file():
        return str(zoo), "TEST", "inception_3a/output"
    return str(ROOT / "examples" / "resnet_tiny" / "resnet_tiny.prototxt"), "TRAIN", None


def test_screenshot_of_a_real_net(dash_duo, tmp_path):
    model, phase, end = _real_net()
    _start(dash_duo, model=model, phase=phase)
    _click(dash_duo, ids.EXPAND_ALL)             # every layer drawn on its own (the net opens folded)
    _select(dash_duo, ids.COLOUR_BY, "mean |data| of tops")
    if end:      # run to a layer picked in the graph
        click_node(dash_duo, end, until=details_show(dash_duo, end))
        _click(dash_duo, ids.RUN_TO)
    else:
        _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo", timeout=120)
    names = list(graph_fills(dash_duo))
    target_layer = "conv2/3x3" if "conv2/3x3" in names else names[min(3, len(names) - 1)]
    click_node(dash_duo, target_layer, until=details_show(dash_duo, "needs backward"))
    settle(dash_duo)
    target = tmp_path / "screenshot.png"         # README's: test_graph_browser.py

    dash_duo.driver.save_screenshot(str(target))
    assert target.stat().st_size > 10000

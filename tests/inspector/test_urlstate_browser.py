"""Browser tests of issue 13's state and loading half: the address carries
the net, NetState and selection; a deep link, a reload and Back restore them;
a deploy net opened from the page is in TEST; Enter in the path box loads;
after a failed load every control shows the net that is loaded; choosing SVG
exports an SVG; no cloud-sharing button; the value table scrolls inside its
panel."""
import time
from pathlib import Path
from urllib.parse import unquote

import pytest
from browser_helpers import click_node, details_show, text_of, wait_for, wait_text
from inspector_testlib import DEPLOY_NET, PHASED_BROKEN_TRAIN
from selenium.webdriver.common.keys import Keys

from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


def _start(dash_duo, path="", **kw):
    kw.setdefault("model_root", str(ROOT))
    app = create_app(InspectorConfig(**kw))
    dash_duo.start_server(app)
    if path:
        dash_duo.driver.get(dash_duo.server_url + path)
    wait_text(dash_duo, ids.LOAD_STATUS, "layers", timeout=120)
    return app


def _address(dash_duo):
    return unquote(dash_duo.driver.execute_script("return window.location.search"))


def _wait_address(dash_duo, *needles, timeout=120):
    return wait_for(lambda: (lambda a: a if all(n in a for n in needles) else None)(_address(dash_duo)),
                    timeout, what="the address to hold %s (it is %r)" % (needles, _address(dash_duo)))


def _session_id(dash_duo):
    return dash_duo.driver.execute_script("return JSON.parse(window.sessionStorage.getItem(arguments[0]))",
                                          ids.SESSION)


def _checked(dash_duo, radio_id):
    return dash_duo.driver.execute_script(
        "const e = document.querySelector('#' + arguments[0] + ' input:checked'); return e ? e.value : null;",
        radio_id)


def _dropdown_text(dash_duo, id_):
    return text_of(dash_duo, id_).strip()


def _label(folder):
    from inspector.config import BUNDLED_EXAMPLES
    return next(label for label, rel, _phase in BUNDLED_EXAMPLES if rel.startswith(folder + "/"))


def _type_path(dash_duo, text):
    box = dash_duo.find_element("#" + ids.MODEL_PATH)
    box.clear()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def _wait_status(dash_duo, needle, timeout=120):
    return wait_text(dash_duo, ids.LOAD_STATUS, needle, timeout)


def test_deep_link_and_reload_restore_net_and_selection(dash_duo):
    app = _start(dash_duo, "/?example=resnet_tiny&layer=res1a")
    _wait_status(dash_duo, "TinyResNet")
    wait_text(dash_duo, ids.DETAILS, "res1a")
    assert "Convolution" in text_of(dash_duo, ids.DETAILS)
    _wait_address(dash_duo, "example=resnet_tiny", "phase=TRAIN", "layer=res1a")
    # selecting another layer names it in the address
    click_node(dash_duo, "res1b", until=details_show(dash_duo, "res1b"))
    _wait_address(dash_duo, "layer=res1b")
    sid = _session_id(dash_duo)
    store = app.inspector.store
    net = store.get(sid).loaded.net
    # a reload goes on with the same session and net, and shows the same selection
    dash_duo.driver.refresh()
    _wait_status(dash_duo, "TinyResNet")
    wait_text(dash_duo, ids.DETAILS, "res1b")
    assert _session_id(dash_duo) == sid and store.get(sid).loaded.net is net
    # the server forgot the session: the address builds the net again
    store.drop(sid)
    dash_duo.driver.refresh()
    _wait_status(dash_duo, "TinyResNet")
    wait_text(dash_duo, ids.DETAILS, "res1b")
    assert store.get(_session_id(dash_duo)).loaded.net is not net
    sid = _session_id(dash_duo)
    # the link in another tab: the same net and layer, in a session of its own -- also when the
    # browser copies this tab's sessionStorage into it (window.open, "Duplicate tab")
    link = dash_duo.driver.current_url
    first = dash_duo.driver.current_window_handle
    for how in ("new tab", "window.open"):
        before = set(dash_duo.driver.window_handles)
        if how == "new tab":
            dash_duo.driver.switch_to.new_window("tab")
            dash_duo.driver.get(link)
        else:
            dash_duo.driver.execute_script("window.open(arguments[0])", link)
            dash_duo.driver.switch_to.window((set(dash_duo.driver.window_handles) - before).pop())
        try:
            _wait_status(dash_duo, "TinyResNet")
            wait_text(dash_duo, ids.DETAILS, "res1b")
            other = _session_id(dash_duo)
            assert other and other != sid, how
        finally:
            dash_duo.driver.close()
            dash_duo.driver.switch_to.window(first)
    assert _session_id(dash_duo) == sid


def test_back_returns_to_the_previous_net(dash_duo):
    _start(dash_duo)
    _wait_status(dash_duo, "LeNetDigits")
    _wait_address(dash_duo, "example=lenet", "phase=TRAIN")
    dash_duo.select_dcc_dropdown("#" + ids.EXAMPLE, value=_label("resnet_tiny"))
    _wait_status(dash_duo, "TinyResNet")
    _wait_address(dash_duo, "example=resnet_tiny")
    dash_duo.driver.back()
    _wait_address(dash_duo, "example=lenet")
    _wait_status(dash_duo, "LeNetDigits")
    assert "LeNet" in _dropdown_text(dash_duo, ids.EXAMPLE)
    dash_duo.driver.forward()
    _wait_status(dash_duo, "TinyResNet")


def test_deploy_net_opened_from_the_page_is_in_test_and_enter_loads(dash_duo, tmp_path):
    (tmp_path / "net.prototxt").write_text(DEPLOY_NET)      # no "deploy" in its name: its layers decide
    _start(dash_duo, model_root=str(tmp_path))
    _wait_status(dash_duo, "LeNetDigits")
    assert _checked(dash_duo, ids.PHASE) == "TRAIN"
    _type_path(dash_duo, "net.prototxt")                    # Enter, no click on Open
    _wait_status(dash_duo, "TinyDeploy")
    assert "TEST" in text_of(dash_duo, ids.LOAD_STATUS)
    wait_for(lambda: _checked(dash_duo, ids.PHASE) == "TEST", what="the Phase control to show TEST")
    _wait_address(dash_duo, "model=net.prototxt", "phase=TEST")
    assert "LeNet" not in _dropdown_text(dash_duo, ids.EXAMPLE)     # the example list names no example now
    assert dash_duo.find_element("#" + ids.MODEL_PATH).get_attribute("value") == "net.prototxt"


def test_failed_load_keeps_every_control_on_the_loaded_net(dash_duo, tmp_path):
    (tmp_path / "phased.prototxt").write_text(PHASED_BROKEN_TRAIN)
    _start(dash_duo, model_root=str(tmp_path))
    _type_path(dash_duo, "phased.prototxt")
    _wait_status(dash_duo, "Phased")
    wait_for(lambda: _checked(dash_duo, ids.PHASE) == "TEST", what="TEST for a net fed by Input")
    # TRAIN fails (a TRAIN-only layer reads a blob nobody makes): the controls go back to the net shown
    dash_duo.find_element("#%s input[value='TRAIN']" % ids.PHASE).click()
    wait_text(dash_duo, ids.LOAD_ERROR, "nope")
    err = text_of(dash_duo, ids.LOAD_ERROR)
    assert "Still shown: Phased from phased.prototxt (TEST)" in err and "stays loaded" not in err
    wait_for(lambda: _checked(dash_duo, ids.PHASE) == "TEST", what="the Phase control back on TEST")
    assert "Phased" in text_of(dash_duo, ids.LOAD_STATUS) and "TEST" in text_of(dash_duo, ids.LOAD_STATUS)
    # an example, then a path that does not exist: the example list and path box keep the example's state
    dash_duo.select_dcc_dropdown("#" + ids.EXAMPLE, value=_label("shared_stages"))
    _wait_status(dash_duo, "SiameseStages")
    wait_for(lambda: _checked(dash_duo, ids.PHASE) == "TRAIN", what="the example's phase")
    _type_path(dash_duo, "missing.prototxt")
    wait_text(dash_duo, ids.LOAD_ERROR, "does not exist")
    assert "Still shown: SiameseStages" in text_of(dash_duo, ids.LOAD_ERROR)
    assert "Siamese" in _dropdown_text(dash_duo, ids.EXAMPLE)
    time.sleep(0.5)
    # the typed path stays in the box, to be fixed in place
    assert dash_duo.find_element("#" + ids.MODEL_PATH).get_attribute("value") == "missing.prototxt"
    assert _checked(dash_duo, ids.PHASE) == "TRAIN"


def _downloads(dash_duo, suffix):
    folder = Path(dash_duo.download_path)
    return wait_for(lambda: [p for p in folder.iterdir() if p.name.endswith(suffix)],
                    what="a downloaded %s file" % suffix)


def test_svg_export_downloads_an_svg_and_no_cloud_button(dash_duo):
    _start(dash_duo, "/?example=lenet&blob=conv1")
    _wait_status(dash_duo, "LeNetDigits")
    wait_text(dash_duo, ids.DETAILS, "conv1")
    # the charts (Plotly) offer no cloud sharing
    wait_for(lambda: dash_duo.driver.find_elements("css selector", "#%s .modebar-btn" % ids.HISTOGRAM),
             what="the histogram's modebar")
    titles = dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll('.modebar-btn')).map(b => b.getAttribute('data-title'))")
    assert titles and not [t for t in titles if t and ("Share" in t or "Chart Studio" in t or "cloud" in t.lower())]
    # the graph: SVG drawn by the server (the format and Save image are in the Save menu)
    dash_duo.find_element("#%s summary" % ids.SAVE_MENU).click()
    dash_duo.find_element("#%s input[value='svg']" % ids.IMAGE_FORMAT).click()
    dash_duo.find_element("#" + ids.IMAGE_SAVE).click()
    svg = _downloads(dash_duo, ".svg")[0]
    text = svg.read_text()
    assert text.lstrip().startswith("<svg") and ">conv1<" in text and ">ip2<" in text
    assert not list(Path(dash_duo.download_path).glob("*.png"))
    # and back to PNG: cytoscape's drawing of the whole graph
    if not dash_duo.find_element("#" + ids.IMAGE_FORMAT).is_displayed():
        dash_duo.find_element("#%s summary" % ids.SAVE_MENU).click()
    dash_duo.find_element("#%s input[value='png']" % ids.IMAGE_FORMAT).click()
    # the radio shows the page's value: PNG is chosen before Save image reads it
    wait_for(lambda: dash_duo.find_element("#%s input[value='png']" % ids.IMAGE_FORMAT).is_selected(),
             what="PNG chosen")
    dash_duo.find_element("#" + ids.IMAGE_SAVE).click()
    png = _downloads(dash_duo, ".png")[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_value_table_scrolls_inside_its_panel(dash_duo, tmp_path):
    _start(dash_duo, "/?example=lenet&blob=conv1")
    wait_text(dash_duo, ids.DETAILS, "conv1")
    dash_duo.find_element("#" + ids.FORWARD).click()                  # values with all their digits
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo")
    wait_text(dash_duo, ids.VALUE_TABLE, "values at")
    wait_for(lambda: "0." in text_of(dash_duo, ids.VALUE_TABLE), what="the values after Forward")
    dash_duo.driver.execute_script("document.getElementById(arguments[0]).scrollIntoView()", ids.VALUE_TABLE)
    dash_duo.driver.save_screenshot(str(tmp_path / "value_table.png"))
    sizes = dash_duo.driver.execute_script("""
        const t = document.getElementById(arguments[0]), side = t.closest('.side-col');
        const table = t.querySelector('table');
        return {table: table.scrollWidth, box: t.clientWidth, boxScroll: t.scrollWidth,
                side: side.clientWidth, sideScroll: side.scrollWidth,
                boxRight: t.getBoundingClientRect().right, sideRight: side.getBoundingClientRect().right};""",
        ids.VALUE_TABLE)
    assert sizes["table"] > sizes["box"], sizes            # the table is wider than its box: it scrolls there
    assert sizes["boxScroll"] > sizes["box"]
    assert sizes["sideScroll"] <= sizes["side"] + 1, sizes  # the panel itself does not overflow
    assert sizes["boxRight"] <= sizes["sideRight"] + 1, sizes


def test_save_onnx_downloads_a_model_of_the_loaded_net(dash_duo):
    onnx = pytest.importorskip("onnx")
    _start(dash_duo, "/?example=lenet")
    _wait_status(dash_duo, "LeNetDigits")
    dash_duo.find_element("#%s summary" % ids.SAVE_MENU).click()
    dash_duo.find_element("#" + ids.ONNX_SAVE).click()
    wait_text(dash_duo, ids.ONNX_STATUS, "saved LeNetDigits.onnx")
    model = onnx.load(str(_downloads(dash_duo, ".onnx")[0]))
    onnx.checker.check_model(model)
    names = {o.name for o in model.graph.output}
    assert "loss" in names and {"conv1", "ip2"} <= {t for n in model.graph.node for t in n.output} | names

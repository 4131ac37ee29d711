"""Browser tests of issue 13's loading defects, through the page: an uploaded net
is checked in the phase it opens in (a layer that phase filters out may name a
path outside the model root: it is never opened), and a relative data path
that cannot be opened says where it was looked for and where it is (issue 22: such a
net opens structure only, that layer stood in by an Input)."""
from pathlib import Path

import pytest
from browser_helpers import cy_eval, start_app, text_of, wait_for, wait_text
from inspector_testlib import PHASED_NET
from selenium.webdriver.common.keys import Keys

from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser


# a relative source: Caffe opens it from the working directory; it lies beside the net
RELATIVE_READER = """name: "Reader"
layer { name: "d" type: "Data" top: "data" top: "label"
        data_param { source: "digits_lmdb" backend: LMDB batch_size: 1 } }
"""


def _checked(dash_duo, radio_id):
    return dash_duo.driver.execute_script(
        "const e = document.querySelector('#' + arguments[0] + ' input:checked'); return e ? e.value : null;",
        radio_id)


def test_upload_is_checked_in_its_phase_and_relative_paths_say_where(dash_duo, tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "nets").mkdir(parents=True)                # its data nowhere: not in the cwd, beside it or under the root
    (root / "nets" / "reader.prototxt").write_text(RELATIVE_READER)
    upload = tmp_path / "phased.prototxt"
    upload.write_text(PHASED_NET)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)                    # the server's working directory: not the nets' folder
    dash_duo.start_server(create_app(InspectorConfig(model_root=str(root))))
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=120)

    # the upload opens in TEST; its TRAIN-only layer (outside the root) is filtered out: accepted
    dash_duo.find_element("#%s input[type=file]" % ids.UPLOAD_MODEL).send_keys(str(upload))
    wait_text(dash_duo, ids.LOAD_STATUS, "Phased", timeout=120)
    assert "TEST" in text_of(dash_duo, ids.LOAD_STATUS) and not text_of(dash_duo, ids.LOAD_ERROR).strip()
    wait_for(lambda: cy_eval(dash_duo, "return cy.nodes('.ghost').map(n => n.data('name'));") == ["train_data"],
             what="the filtered-out layer drawn as a ghost")
    assert not dash_duo.find_element("#" + ids.STANDIN_BOX).is_displayed()
    # TRAIN builds it: its source (outside the root) is never opened; the net opens structure only
    dash_duo.find_element("#%s input[value='TRAIN']" % ids.PHASE).click()
    wait_text(dash_duo, ids.STANDIN_TEXT, "outside the model root")
    box = text_of(dash_duo, ids.STANDIN_TEXT)
    assert "train_data" in box and "/etc/passwd_lmdb" in box and "Structure only" in box
    assert "TRAIN" in text_of(dash_duo, ids.LOAD_STATUS) and not text_of(dash_duo, ids.LOAD_ERROR).strip()

    # a net under the root whose relative source resolves outside it: where it was looked for, where it is
    box = dash_duo.find_element("#" + ids.MODEL_PATH)
    box.clear()
    box.send_keys("nets/reader.prototxt")
    box.send_keys(Keys.ENTER)
    # which directory it was looked for in (Caffe's: the working directory), and the two others
    wait_text(dash_duo, ids.STANDIN_TEXT, "looked for in the server's working directory, %s" % cwd)
    assert "then beside the prototxt and under the model root" in text_of(dash_duo, ids.STANDIN_TEXT)

    def opened():       # where it was looked for, and why (a click on the summary; again if the box re-rendered)
        box = dash_duo.find_element("#%s details" % ids.STANDIN_TEXT)
        if not box.get_attribute("open"):
            dash_duo.find_element("#%s summary" % ids.STANDIN_TEXT).click()
        return dash_duo.find_element("#%s details" % ids.STANDIN_TEXT).get_attribute("open")
    wait_for(opened, what="the details of where the source was looked for")
    text = text_of(dash_duo, ids.STANDIN_TEXT)
    assert str(Path(cwd) / "digits_lmdb") in text and "working directory" in text
    assert "not in the model's folder (%s) either" % (root / "nets") in text
    assert "layer d (Data)" in text and "Reader" in text_of(dash_duo, ids.LOAD_STATUS)


def test_a_tab_the_server_let_go_gets_its_own_net_back_on_a_phase_change(dash_duo):
    """The server keeps the nets of its most recently used tabs (max_sessions).  A tab it
    let go for a newer one still shows its net; clicking Phase there rebuilds that net (the
    Example list names it) in the phase clicked, instead of blanking the page with "no net
    loaded" (seen with ResNet-152 after eight newer tabs)."""
    app = start_app(dash_duo, max_sessions=1)
    store = app.inspector.store
    d = dash_duo.driver
    first = d.current_window_handle
    [first_sid] = store.ids()
    before = text_of(dash_duo, ids.LOAD_STATUS)
    phase = _checked(dash_duo, ids.PHASE)
    other = "TEST" if phase == "TRAIN" else "TRAIN"
    assert phase in before and "layers" in before
    d.switch_to.new_window("tab")                   # a newer tab: the server's one place is its
    d.get(dash_duo.server_url)
    wait_for(lambda: len(store.ids()) == 1 and store.ids()[0] != first_sid, what="the first tab let go")
    wait_text(dash_duo, ids.LOAD_STATUS, "layers")
    d.switch_to.window(first)
    d.find_element("css selector", "#%s input[value=%s]" % (ids.PHASE, other)).click()
    wait_text(dash_duo, ids.LOAD_STATUS, other)
    status = text_of(dash_duo, ids.LOAD_STATUS)
    assert before.split(" · ")[0] in status and "layers" in status and "no net" not in status
    wait_for(lambda: other in text_of(dash_duo, ids.GRAPH_TITLE), what="the graph caption in the new phase")
    assert cy_eval(dash_duo, "return cy.nodes().length;") > 0

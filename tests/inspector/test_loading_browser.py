"""Browser tests of issue 13's loading defects, through the page: an uploaded net
is checked in the phase it opens in (a layer that phase filters out may name a
path outside the model root: it is never opened), and a relative data path
that cannot be opened says where it was looked for and where it is."""
from pathlib import Path

import pytest
from browser_helpers import cy_eval, text_of, wait_for, wait_text
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
    (root / "nets" / "digits_lmdb").mkdir(parents=True)
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
    # TRAIN would build it: refused, naming the layer; the TEST net stays
    dash_duo.find_element("#%s input[value='TRAIN']" % ids.PHASE).click()
    wait_text(dash_duo, ids.LOAD_ERROR, "outside the model root")
    err = text_of(dash_duo, ids.LOAD_ERROR)
    assert "train_data" in err and "/etc/passwd_lmdb" in err
    wait_for(lambda: _checked(dash_duo, ids.PHASE) == "TEST", what="the Phase control back on TEST")

    # a net under the root whose relative source resolves outside it: where it was looked for, where it is
    box = dash_duo.find_element("#" + ids.MODEL_PATH)
    box.clear()
    box.send_keys("nets/reader.prototxt")
    box.send_keys(Keys.ENTER)
    wait_text(dash_duo, ids.LOAD_ERROR, "looked for at")
    err = text_of(dash_duo, ids.LOAD_ERROR)
    assert str(Path(cwd) / "digits_lmdb") in err and "working directory" in err
    assert str(root / "nets" / "digits_lmdb") in err and "start the server in %s" % (root / "nets") in err
    assert "layer d" in err and "Still shown: Phased" in err

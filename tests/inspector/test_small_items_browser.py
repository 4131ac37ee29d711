"""Issue 35, item 6, in the page: the upload box shows the file chosen; a net without a name
is "(unnamed)" everywhere the page names it (Caffe gives it none), not "net"; Run to cursor
reads as the docs say ("run to cursor", "at the cursor").  (A relative data source says which
directory it was looked for in: test_loading_browser.py.)"""
import os

import pytest
from browser_helpers import click_id, click_node, details_show, start_app, text_of, wait_for, wait_text

from inspector import ids

pytestmark = pytest.mark.browser

UNNAMED = """layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
"""


def _box(dash_duo, id_):
    return text_of(dash_duo, id_).replace("\n", " ")


def test_upload_box_names_its_file_an_unnamed_net_and_run_to_cursor(dash_duo, tmp_path):
    net = tmp_path / "tiny_unnamed_net.prototxt"
    net.write_text(UNNAMED)
    start_app(dash_duo)
    wait_for(lambda: _box(dash_duo, ids.UPLOAD_MODEL).strip().endswith("prototxt"),   # nothing chosen yet
             what="the upload box's label")
    dash_duo.find_element("#%s input[type=file]" % ids.UPLOAD_MODEL).send_keys(str(net))
    # the box shows the file chosen, and keeps showing it once the net it holds is loaded
    wait_for(lambda: "tiny_unnamed_net.prototxt" in _box(dash_duo, ids.UPLOAD_MODEL), what="the file in its box")
    wait_text(dash_duo, ids.LOAD_STATUS, "(unnamed)", timeout=120)
    assert "tiny_unnamed_net.prototxt" in _box(dash_duo, ids.UPLOAD_MODEL)
    # a net without a name: "(unnamed)" where the page names it, never "net"
    status = text_of(dash_duo, ids.LOAD_STATUS)
    assert status.startswith("(unnamed) · TEST") and not status.startswith("net ")
    wait_for(lambda: text_of(dash_duo, ids.GRAPH_TITLE).startswith("(unnamed) — TEST"), what="the graph's caption")
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "upload-unnamed.png"))

    # Run to cursor, worded as the docs word it
    click_node(dash_duo, "pool", until=details_show(dash_duo, "Pooling"))
    click_id(dash_duo, ids.RUN_TO)
    wait_text(dash_duo, ids.RUN_MESSAGE, "at the cursor: pool", timeout=120)
    msg = text_of(dash_duo, ids.RUN_MESSAGE)
    assert msg.startswith("run to cursor pool: ForwardFromTo(0, 3)"), msg

    # another net loaded by another way: the box no longer claims a file the net does not use
    from selenium.webdriver.common.keys import Keys
    box = dash_duo.find_element("#" + ids.MODEL_PATH)
    box.clear()
    box.send_keys("examples/lenet/lenet_train_test.prototxt", Keys.ENTER)
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=120)
    wait_for(lambda: "tiny_unnamed_net" not in _box(dash_duo, ids.UPLOAD_MODEL), what="the box back to its label")

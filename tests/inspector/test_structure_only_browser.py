"""Browser test of issue 22's items 5 and 7, as a user does it: a train_val whose data is not
on the machine (CIFAR-10 quick from ../shared/zoo: Data layers on LMDBs, a mean file) opens
structure only, says which sources are missing and what it assumed, takes the real shape,
steps, switches phase; load errors keep the typed path (fixed in place) and show
file:line:col; a fresh tab never shows a blank page."""
import os
import re
import shutil
import time

import pytest
from browser_helpers import cy_eval, text_of, wait_for, wait_text
from inspector_testlib import SYNTAX_ERROR_NET
from selenium.webdriver.common.keys import Keys

from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = [pytest.mark.browser, pytest.mark.shared]


def _type_path(dash_duo, text, clear=True):
    box = dash_duo.find_element("#" + ids.MODEL_PATH)
    if clear:
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.BACKSPACE)
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    return box


def _path_box(dash_duo):
    return dash_duo.find_element("#" + ids.MODEL_PATH).get_attribute("value")


def test_a_train_val_without_its_data_opens_steps_and_takes_its_shape(dash_duo, shared_dir, tmp_path):
    root = tmp_path / "root"
    (root / "cifar10").mkdir(parents=True)
    shutil.copy(shared_dir / "zoo" / "examples" / "cifar10" / "cifar10_quick_train_test.prototxt",
                root / "cifar10" / "cifar10_quick_train_test.prototxt")
    (root / "broken.prototxt").write_text(SYNTAX_ERROR_NET)
    dash_duo.start_server(create_app(InspectorConfig(model_root=str(root))))
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=60)

    # item 7: a typo fails; the typed path stays in the box and is fixed in place
    _type_path(dash_duo, "cifar10/cifar10_quic_train_test.prototxt")
    wait_text(dash_duo, ids.LOAD_ERROR, "does not exist")
    time.sleep(0.5)
    assert _path_box(dash_duo) == "cifar10/cifar10_quic_train_test.prototxt"
    box = dash_duo.find_element("#" + ids.MODEL_PATH)
    box.send_keys(Keys.END)
    for _ in range(len("_train_test.prototxt")):
        box.send_keys(Keys.ARROW_LEFT)
    box.send_keys("k", Keys.ENTER)

    # item 5: it opens, drawn as written, and says which source is missing and what it assumed
    wait_text(dash_duo, ids.LOAD_STATUS, "CIFAR10_quick", timeout=60)
    assert "TRAIN" in text_of(dash_duo, ids.LOAD_STATUS) and not text_of(dash_duo, ids.LOAD_ERROR).strip()
    wait_text(dash_duo, ids.STANDIN_TEXT, "Structure only")
    note = text_of(dash_duo, ids.STANDIN_TEXT)
    assert "layer cifar (Data)" in note and "examples/cifar10/cifar10_train_lmdb" in note
    assert "batch_size 100" in note and "assumed: 3 channels" in note and "224 × 224" in note
    assert "Some dimensions were assumed" in note
    hover = wait_for(lambda: cy_eval(dash_duo, """
        const n = cy.nodes().filter(x => x.data('kind') === 'layer' && x.data('name') === 'cifar')[0];
        return n ? JSON.stringify(n.data('hover')) : null;"""), what="the data layer drawn")
    assert "(Data)" in hover and "stood in by an Input" in hover
    ghosts = cy_eval(dash_duo, "return cy.nodes('.ghost').map(n => n.data('name'));")
    assert "accuracy" in ghosts                       # the TEST-only layers are drawn faded
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "structure_only.png"))

    # the real per-item shape, given in the page
    shape = dash_duo.find_element("[aria-label='Shape of data'] input")
    assert shape.get_attribute("value") == "3×224×224"
    shape.send_keys(Keys.CONTROL, "a")
    shape.send_keys("3x32x32")
    # a load that fails for another reason (a typo) leaves the notice and what was typed in it
    _type_path(dash_duo, "cifar10/no_such_net.prototxt")
    wait_text(dash_duo, ids.LOAD_ERROR, "does not exist")
    time.sleep(0.5)
    shape = dash_duo.find_element("[aria-label='Shape of data'] input")
    assert shape.get_attribute("value") == "3x32x32"
    dash_duo.find_element("[aria-label='Apply shapes']").click()
    wait_text(dash_duo, ids.STANDIN_TEXT, "3 × 32 × 32 (given)", timeout=60)
    assert "Some dimensions were assumed" not in text_of(dash_duo, ids.STANDIN_TEXT)
    # ... and it steps on synthetic inputs
    dash_duo.find_element("#" + ids.FORWARD).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "loss", timeout=60)
    assert "ForwardFromTo(0, " in text_of(dash_duo, ids.RUN_MESSAGE)
    # every phase: TEST has its own data layer (another missing LMDB), the given shape kept
    dash_duo.find_element("#%s input[value='TEST']" % ids.PHASE).click()
    wait_text(dash_duo, ids.STANDIN_TEXT, "cifar10_test_lmdb", timeout=60)
    assert "3 × 32 × 32 (given)" in text_of(dash_duo, ids.STANDIN_TEXT)
    assert "TEST" in text_of(dash_duo, ids.LOAD_STATUS)

    # a fresh tab on this address: the same net, never a blank page
    link = dash_duo.driver.current_url
    first = dash_duo.driver.current_window_handle
    dash_duo.driver.switch_to.new_window("tab")
    try:
        dash_duo.driver.get(link)
        wait_text(dash_duo, ids.LOAD_STATUS, "CIFAR10_quick", timeout=60)
        wait_text(dash_duo, ids.STANDIN_TEXT, "cifar10_test_lmdb")
    finally:
        dash_duo.driver.close()
        dash_duo.driver.switch_to.window(first)

    # item 7: a parse error names file:line:col; the typed path stays
    _type_path(dash_duo, "broken.prototxt")
    wait_text(dash_duo, ids.LOAD_ERROR, "broken.prototxt:")
    assert re.search(r"broken\.prototxt:\d+:\d+", text_of(dash_duo, ids.LOAD_ERROR))
    time.sleep(0.5)
    assert _path_box(dash_duo) == "broken.prototxt"
    # a fresh tab whose address names that broken net: the default net, the error beside it
    dash_duo.driver.switch_to.new_window("tab")
    try:
        dash_duo.driver.get(dash_duo.server_url + "/?model=broken.prototxt")
        wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=60)
        wait_text(dash_duo, ids.LOAD_ERROR, "Shown instead: LeNetDigits")
        assert "broken.prototxt:" in text_of(dash_duo, ids.LOAD_ERROR)
    finally:
        dash_duo.driver.close()
        dash_duo.driver.switch_to.window(first)


def test_a_siamese_train_test_opens_in_the_shape_its_shared_weights_take(dash_duo, shared_dir, tmp_path):
    """Caffe's MNIST siamese net (a Data layer of image pairs, sliced into two one-channel
    halves whose convolutions share weights) cannot take the first assumption (3 channels):
    it opens in one it takes (2 × 28 × 28), and the page says what was assumed and why."""
    root = tmp_path / "root"
    (root / "siamese").mkdir(parents=True)
    shutil.copy(shared_dir / "zoo" / "examples" / "siamese" / "mnist_siamese_train_test.prototxt",
                root / "siamese" / "mnist_siamese_train_test.prototxt")
    dash_duo.start_server(create_app(InspectorConfig(model_root=str(root))))
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=60)
    _type_path(dash_duo, "siamese/mnist_siamese_train_test.prototxt")
    wait_text(dash_duo, ids.LOAD_STATUS, "mnist_siamese_train_test", timeout=60)
    assert not text_of(dash_duo, ids.LOAD_ERROR).strip()
    wait_text(dash_duo, ids.STANDIN_TEXT, "Structure only")
    note = text_of(dash_duo, ids.STANDIN_TEXT)
    assert "layer pair_data (Data)" in note and "pair_data 64 × 2 × 28 × 28" in note
    assert "as 3 × 224 × 224 does not build (Cannot share param 'conv1_w'" in note
    assert "Some dimensions were assumed" in note
    shape = dash_duo.find_element("[aria-label='Shape of pair_data'] input")
    assert shape.get_attribute("value") == "2×28×28"
    shapes = cy_eval(dash_duo, "return cy.edges().map(e => e.data('label') || '')"
                               ".filter(l => l.indexOf('28') >= 0);")
    assert any("64×1×28×28" in s for s in shapes), shapes           # each half: one channel


FIXED_SIZE_NET = """name: "FixedSize"
layer { name: "data" type: "Data" top: "data" top: "label" data_param { source: "nowhere_lmdb" batch_size: 2 } }
layer { name: "grid" type: "Reshape" bottom: "data" top: "grid"
        reshape_param { shape { dim: 0 dim: 3 dim: 100 dim: 100 } } }
layer { name: "pool" type: "Pooling" bottom: "grid" top: "pool" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def test_a_net_no_assumed_shape_builds_asks_for_the_shape_and_opens_with_it(dash_duo, tmp_path):
    """A train_val whose data must be 3 × 100 × 100 (a Reshape to a fixed grid): no assumed or
    common shape builds, so the load fails; the error says the shapes were assumed, the
    structure-only box asks for the data's shape, and Apply shapes opens the net with it."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "fixed.prototxt").write_text(FIXED_SIZE_NET)
    dash_duo.start_server(create_app(InspectorConfig(model_root=str(root))))
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=60)
    _type_path(dash_duo, "fixed.prototxt")
    wait_text(dash_duo, ids.LOAD_ERROR, "give the data's shape", timeout=60)
    assert "structure only: the data was stood in with assumed shapes (data 2 × 3 × 224 × 224)" in \
        text_of(dash_duo, ids.LOAD_ERROR)
    wait_text(dash_duo, ids.STANDIN_TEXT, "does not build with its data in these shapes")
    assert "LeNetDigits" in text_of(dash_duo, ids.LOAD_STATUS)          # the last good net stays
    shape = dash_duo.find_element("[aria-label='Shape of data'] input")
    assert shape.get_attribute("value") == "3×224×224"
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "structure_only_ask.png"))
    shape.send_keys(Keys.CONTROL, "a")
    shape.send_keys("3x100x100")
    dash_duo.find_element("[aria-label='Apply shapes']").click()
    wait_text(dash_duo, ids.LOAD_STATUS, "FixedSize", timeout=60)
    assert not text_of(dash_duo, ids.LOAD_ERROR).strip()
    wait_text(dash_duo, ids.STANDIN_TEXT, "3 × 100 × 100 (given)")
    assert "does not build" not in text_of(dash_duo, ids.STANDIN_TEXT)

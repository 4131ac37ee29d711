"""The last step of Caffe's MNIST tutorial on the engine (tests/tutorial_mnist.py): the page
opened on the snapshot ``train_lenet.sh`` wrote, as ``python app.py
examples/mnist/lenet_train_test.prototxt --weights examples/mnist/lenet_iter_N.caffemodel``
opens it from the Caffe root: the net reads the tutorial's test LMDB (no stand-in), the
snapshot is the weights loaded, and a Forward in the page scores the first test batch as
``caffe test`` scored it with those weights."""
import re

import pytest
from browser_helpers import click_node, details_show, settle, text_of, wait_text

from inspector import create_app, ids
from inspector.config import InspectorConfig
from tests import tutorial_mnist as tut

pytestmark = pytest.mark.browser


def _batch0(test_log):
    """``caffe test``'s first batch: {output: value}."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"Batch 0, (\w+) = (\S+)", test_log)}


def test_the_page_opens_on_the_tutorials_snapshot(dash_duo, tmp_path, monkeypatch):
    root = tmp_path / "caffe"
    tut.make_root(root)
    assert tut.sh(root, "./examples/mnist/create_mnist.sh").returncode == 0
    train = tut.sh(root, "./examples/mnist/train_lenet.sh")
    assert train.returncode == 0, train.stderr[-3000:]
    weights = "examples/mnist/lenet_iter_%d.caffemodel" % tut.MAX_ITER
    scored = tut.sh(root, "./build/tools/caffe", "test", "-model", "examples/mnist/lenet_train_test.prototxt",
                    "-weights", weights, "-iterations", "1")
    assert scored.returncode == 0, scored.stderr[-3000:]
    batch0 = _batch0(scored.stderr)
    assert set(batch0) == {"accuracy", "loss"}

    monkeypatch.chdir(root)                     # as the user runs it: from the Caffe root
    app = create_app(InspectorConfig(model=str(root / "examples/mnist/lenet_train_test.prototxt"),
                                     weights=weights, model_root=str(root), phase="TEST"))
    dash_duo.start_server(app)
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNet · TEST", timeout=120)
    status = text_of(dash_duo, ids.LOAD_STATUS)
    assert "weights %s" % weights in status, status
    assert not dash_duo.find_element("#" + ids.STANDIN_BOX).is_displayed()     # the LMDB itself, read
    dash_duo.find_element("#" + ids.FORWARD).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 11)")
    loss = float(re.search(r"loss (\S+)", text_of(dash_duo, ids.RUN_MESSAGE)).group(1))
    assert loss == pytest.approx(batch0["loss"], rel=1e-4)
    click_node(dash_duo, "accuracy", kind="blob", until=details_show(dash_duo, "mean |x|"))
    accuracy = float(re.search(r"\nmean\t(\S+)", text_of(dash_duo, ids.DETAILS)).group(1))
    assert accuracy == pytest.approx(batch0["accuracy"], abs=1e-6)
    settle(dash_duo)
    dash_duo.driver.save_screenshot(str(tmp_path / "tutorial_snapshot.png"))

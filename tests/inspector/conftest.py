"""Inspector test set-up: small nets written here, and dash.testing with
headless Chromium configured so that plain ``python -m pytest`` works.

Browser tests (marked ``browser``) skip with a reason when chromedriver or
dash[testing] is missing.
"""
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LENET = ROOT / "examples" / "lenet" / "lenet_train_test.prototxt"
SIAMESE = ROOT / "examples" / "shared_stages" / "siamese_stages.prototxt"
RESNET_TINY = ROOT / "examples" / "resnet_tiny" / "resnet_tiny.prototxt"


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _browser_skip_reason():
    try:
        import selenium  # noqa: F401
        from dash.testing import browser  # noqa: F401,F811
    except Exception as e:  # pragma: no cover
        return "dash[testing]/selenium not installed (%s)" % e
    if shutil.which("chromedriver") is None:
        return "chromedriver not found (apt-get install chromium chromium-driver)"
    if _chromium() is None:
        return "no Chromium/Chrome binary found"
    return None


def pytest_configure(config):
    # dash.testing reads --headless; default it on so that plain `python -m pytest` works
    if hasattr(config.option, "headless"):
        config.option.headless = True
    chrome = _chromium()
    if chrome and "DASH_TEST_CHROMEPATH" not in os.environ:
        os.environ["DASH_TEST_CHROMEPATH"] = chrome


def pytest_setup_options():
    """dash.testing's hook: the Chrome options for every browser test."""
    from selenium.webdriver.chrome.options import Options
    options = Options()
    options.add_argument("--window-size=1600,1000")
    options.add_argument("--headless=new")
    return options


def pytest_collection_modifyitems(config, items):
    reason = None
    checked = False
    for item in items:
        if "browser" in item.keywords and str(item.fspath).startswith(str(Path(__file__).parent)):
            if not checked:
                reason, checked = _browser_skip_reason(), True
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


# ------------------------------------------------------------------ nets written for the tests
OVERFLOW_NET = """
name: "Overflow"
layer { name: "in" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
layer { name: "scale_up" type: "Power" bottom: "data" top: "big"
        power_param { power: 1 scale: 1 shift: 100 } }
layer { name: "exp1" type: "Exp" bottom: "big" top: "e1" }
layer { name: "exp2" type: "Exp" bottom: "e1" top: "e2" }
layer { name: "fc" type: "InnerProduct" bottom: "e2" top: "fc"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""

SYNTAX_ERROR_NET = """name: "Broken"
layer {
  name: "in"
  type: "Input"
  top: "data"
  input_param { shape { dim: 1 dim: 3 } }
}
layer {
  name: "fc"
  type: "InnerProduct"
  bottom: "data"
  top: "fc"
  inner_product_param { num_output: 2
}
"""


@pytest.fixture
def overflow_net(tmp_path):
    p = tmp_path / "overflow.prototxt"
    p.write_text(OVERFLOW_NET)
    return p


@pytest.fixture
def broken_net(tmp_path):
    p = tmp_path / "broken.prototxt"
    p.write_text(SYNTAX_ERROR_NET)
    return p


# ------------------------------------------------------------------ engine-backed fixtures
def build_loaded(path, phase="TRAIN", level=0, stages=()):
    from inspector import loading
    from inspector.sessions import ModelSpec
    return loading.build(ModelSpec(model=str(path), phase=phase, level=level, stages=tuple(stages)))


@pytest.fixture
def lenet():
    return build_loaded(LENET)


@pytest.fixture
def app_ctx(tmp_path):
    """The callbacks' AppContext (no Dash server), model root = the repo."""
    from inspector.callbacks.common import AppContext
    from inspector.config import InspectorConfig
    from inspector.sessions import SessionStore
    cfg = InspectorConfig(model_root=str(ROOT), max_upload_bytes=8 << 20)
    return AppContext(config=cfg, store=SessionStore(4, 3600), examples=cfg.examples())


def data_url(text_or_bytes, mime="text/plain"):
    import base64
    b = text_or_bytes.encode() if isinstance(text_or_bytes, str) else text_or_bytes
    return "data:%s;base64,%s" % (mime, base64.b64encode(b).decode())

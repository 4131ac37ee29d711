"""In the page, as a user sees it (issue 34, issue 35 item 4):

- a prototxt with ``kernel_sise`` at line 50 shows its file:line:column, the layer it is in
  (``layer fire2/squeeze1x1``) and the field (``convolution_param.kernel_sise``) in the load
  error box, beside the net still shown;
- a file over the upload limit, which the browser does not send (the server would cut its
  request off with Flask's 413: tests/inspector/test_server_bounds.py), shows the upload
  limit's message in the same box (assets/upload_limit.js), and the page goes on.
"""
import os

import pytest
from browser_helpers import text_of, wait_text

from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser

SHOTS = os.environ.get("INSPECTOR_SHOTS")          # a folder to keep the screenshots in (to look at them)


def squeeze_net():
    """A SqueezeNet-like net whose line 50 misspells kernel_size in fire2/squeeze1x1."""
    lines = ['name: "SqueezeNetTypo"',
             'layer {', '  name: "data"', '  type: "Input"', '  top: "data"',
             '  input_param { shape { dim: 1 dim: 3 dim: 32 dim: 32 } }', '}',
             'layer {', '  name: "conv1"', '  type: "Convolution"', '  bottom: "data"', '  top: "conv1"',
             '  convolution_param {', '    num_output: 16', '    kernel_size: 3', '    stride: 2', '  }', '}',
             'layer {', '  name: "relu_conv1"', '  type: "ReLU"', '  bottom: "conv1"', '  top: "conv1"', '}',
             'layer {', '  name: "pool1"', '  type: "Pooling"', '  bottom: "conv1"', '  top: "pool1"',
             '  pooling_param {', '    pool: MAX', '    kernel_size: 3', '    stride: 2', '  }', '}']
    while len(lines) < 41:
        lines.append("# fire2: squeeze 1x1, then expand 1x1 and 3x3")
    lines += ['layer {', '  name: "fire2/squeeze1x1"', '  type: "Convolution"', '  bottom: "pool1"',
              '  top: "fire2/squeeze1x1"', '  convolution_param {', '    num_output: 8',
              '    weight_filler { type: "xavier" }', '    kernel_sise: 1', '  }', '}']
    assert lines[49].strip() == "kernel_sise: 1"                 # line 50
    return "\n".join(lines) + "\n"


def _shot(dash_duo, tmp_path, name):
    path = os.path.join(SHOTS or str(tmp_path), name)
    dash_duo.driver.save_screenshot(path)
    return path


def test_a_parse_error_names_its_layer_and_field_in_the_page(dash_duo, tmp_path):
    net = tmp_path / "squeeze_typo.prototxt"
    net.write_text(squeeze_net())
    dash_duo.start_server(create_app(InspectorConfig(model_root=str(tmp_path))))
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=120)
    dash_duo.find_element("#%s input[type=file]" % ids.UPLOAD_MODEL).send_keys(str(net))
    wait_text(dash_duo, ids.LOAD_ERROR, "layer fire2/squeeze1x1", timeout=120)
    box = text_of(dash_duo, ids.LOAD_ERROR)
    assert "squeeze_typo.prototxt:50:5" in box and "field convolution_param.kernel_sise" in box
    assert 'has no field named "kernel_sise"' in box and "ParseError" in box
    assert "LeNetDigits" in text_of(dash_duo, ids.LOAD_STATUS)         # the last net stays
    _shot(dash_duo, tmp_path, "parse_error_layer.png")


def test_an_upload_past_the_limit_shows_the_limit(dash_duo, tmp_path):
    big = tmp_path / "huge.prototxt"
    big.write_text("# padding\n" * 200_000)            # 2 MB under a 16 KiB limit: not sent (it would get a 413)
    dash_duo.start_server(create_app(InspectorConfig(model_root=str(tmp_path), max_upload_bytes=16 << 10)))
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=120)
    dash_duo.find_element("#%s input[type=file]" % ids.UPLOAD_MODEL).send_keys(str(big))
    wait_text(dash_duo, ids.LOAD_ERROR, "larger than the limit of 16384 bytes", timeout=120)
    box = text_of(dash_duo, ids.LOAD_ERROR)
    assert "PathRefused" in box and "--max-upload-mb" in box
    assert "LeNetDigits" in text_of(dash_duo, ids.LOAD_STATUS)
    _shot(dash_duo, tmp_path, "upload_413.png")
    # the page goes on: a small upload loads
    small = tmp_path / "small.prototxt"
    small.write_text('name: "Small"\nlayer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 } } }\n')
    dash_duo.find_element("#%s input[type=file]" % ids.UPLOAD_MODEL).send_keys(str(small))
    wait_text(dash_duo, ids.LOAD_STATUS, "Small", timeout=120)

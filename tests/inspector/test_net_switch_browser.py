"""Loading a net redraws everything from that net (issue 35, item 2): no element, label or
style of the net before it survives, whichever way the net comes (path box, phase switch).

The graph patches an element that keeps its id (dash-cytoscape merges the new data into the
old), so two nets whose layers share names (LeNet's and SqueezeNet's "data" → "conv1") drew
the old net's edge label under the new one's: "d10×3×227×2278"."""
import pytest
from browser_helpers import cy_eval, wait_for, wait_text

from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser

# SqueezeNet 1.1's first layers: an Input "data" read by "conv1", as in LeNet (whose data layer
# writes "data" and "label": its labels sit mid-edge, this net's under the writer)
SQUEEZE_HEAD = """name: "SqueezeHead"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 10 dim: 3 dim: 227 dim: 227 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 64 kernel_size: 3 stride: 2 } }
layer { name: "relu_conv1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
"""

SQUEEZE_LABELS = {"10×3×227×227", "10×64×113×113", "10×64×56×56"}

# what each edge shows, as cytoscape draws it (its style), and every element's own data
_DRAWN_JS = """
const out = {labels: [], data: []};
cy.edges().forEach(e => {
  for (const k of ['label', 'source-label', 'target-label']) {
    const t = e.style(k);
    if (t) { out.labels.push(t); }
  }
});
cy.elements().forEach(e => out.data.push(JSON.stringify(e.data())));
return out;
"""


def _drawn(dash_duo):
    return cy_eval(dash_duo, _DRAWN_JS) or {"labels": [], "data": []}


def _open_path(dash_duo, path):
    box = dash_duo.find_element("#" + ids.MODEL_PATH)
    box.clear()
    box.send_keys(path)
    dash_duo.find_element("#" + ids.MODEL_PATH_OPEN).click()


def test_a_net_opened_after_lenet_keeps_nothing_of_lenet(dash_duo, tmp_path):
    (tmp_path / "squeeze.prototxt").write_text(SQUEEZE_HEAD)
    dash_duo.start_server(create_app(InspectorConfig(model_root=str(tmp_path))))
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits", timeout=120)
    wait_for(lambda: any("28×28" in t for t in _drawn(dash_duo)["labels"]), what="LeNet's edge labels")

    _open_path(dash_duo, "squeeze.prototxt")
    wait_text(dash_duo, ids.LOAD_STATUS, "SqueezeHead", timeout=120)
    wait_for(lambda: any("227×227" in t for t in _drawn(dash_duo)["labels"]), what="SqueezeHead's edge labels")
    drawn = _drawn(dash_duo)
    # every label drawn is this net's: LeNet's 28×28 data (and its label blob) are gone
    assert set(drawn["labels"]) == SQUEEZE_LABELS, drawn["labels"]
    # and nothing of LeNet is left in any element's data (a key the new element lacks)
    stale = [d for d in drawn["data"] if "28×28" in d or "mnist" in d or "ip2" in d]
    assert not stale, stale[:3]

    # a phase switch builds the net again: still exactly this net's drawing
    dash_duo.find_element("#%s input[value='TRAIN']" % ids.PHASE).click()
    wait_text(dash_duo, ids.LOAD_STATUS, "TRAIN", timeout=120)
    wait_for(lambda: set(_drawn(dash_duo)["labels"]) == SQUEEZE_LABELS, what="the same labels after the phase switch")

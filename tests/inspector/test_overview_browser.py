"""Browser tests of issue 22's overview, selection and small items, as a user does them
(clicks, the mouse wheel, keys; judged by what the page shows):

- names at every zoom: ResNet-152 at Fit net reads input, res2 .. res5, head, each with its
  size and output shape, every label drawn at 10 px or more; the wheel reveals the blocks'
  names, then the full labels and the blobs' shapes, a double-click the layers;
- the selection (or the block holding it) stays in view through Collapse, Expand, Collapse
  all, Expand all, a phase switch and a reload;
- the small things (GoogLeNet from ../shared/zoo): Step lands on drawn layers, "/" after a
  radio button, a link naming a layer the net lacks, the status line read in full, the
  Findings kept while they are recomputed."""
import time
from pathlib import Path

import pytest
from browser_helpers import click_at, cy_eval, text_of, wait_for, wait_text
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
from selenium.webdriver.common.keys import Keys

from benchmarks.netgen import deploy_prototxt
from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser
SHOTS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def resnet152(tmp_path_factory):
    p = tmp_path_factory.mktemp("resnet152") / "ResNet-152-deploy.prototxt"
    p.write_text(deploy_prototxt(152))       # KaimingHe's deploy file, as netgen writes it
    return p


def _start(dash_duo, model, path=""):
    app = create_app(InspectorConfig(model=str(model), model_root=str(Path(model).parent)))
    dash_duo.start_server(app)
    if path:
        dash_duo.driver.get(dash_duo.server_url + path)
    wait_text(dash_duo, ids.LOAD_STATUS, "layers", timeout=60)
    _drawn(dash_duo)
    return app


def _drawn(dash_duo):
    wait_for(lambda: dash_duo.driver.execute_script("return window.inspectorGraphDrawn || null"), timeout=60,
             what="the graph's first view")


# every label drawn: its text, its size on screen, its kind; labels hidden report ""
_LABELS = """
const z = cy.zoom(), out = [];
cy.nodes().forEach(n => {
  const text = n.pstyle('label').strValue;
  if (!text) return;
  const bb = n.renderedBoundingBox({includeLabels: true, includeNodes: false});
  out.push({name: n.data('name'), kind: n.data('kind'), text: text, px: n.pstyle('font-size').pfValue * z,
            y: n.renderedPosition().y, x1: bb.x1, x2: bb.x2, lod: ['short', 'side', 'top', 'nolabel']
            .filter(c => n.hasClass(c)).join('')});
});
return out;"""


def _labels(dash_duo):
    return cy_eval(dash_duo, _LABELS)


def _zoom(dash_duo):
    return cy_eval(dash_duo, "return cy.zoom();")


def _wheel_to(dash_duo, name, zoom, kind="block"):
    """Turn the mouse wheel over node ``name`` until the zoom passes ``zoom``."""
    d = dash_duo.driver
    for _ in range(30):
        if _zoom(dash_duo) >= zoom:
            break
        p = cy_eval(dash_duo, """
const n = cy.nodes().filter(x => x.data('name') === arguments[1] && x.data('kind') === arguments[2])[0];
const b = cy.container().getBoundingClientRect(), q = n.renderedPosition();
return [Math.round(b.left + q.x), Math.round(b.top + q.y)];""", name, kind)
        ActionChains(d).scroll_from_origin(ScrollOrigin.from_viewport(p[0], p[1]), 0, -120).perform()
        time.sleep(0.15)
    time.sleep(0.6)          # the labels follow once the zoom has stopped
    assert _zoom(dash_duo) >= zoom


def test_overview_reads_stages_then_blocks_layers_and_shapes(dash_duo, resnet152, tmp_path):
    _start(dash_duo, resnet152)
    dash_duo.find_element("#" + ids.FIT_NET).click()
    time.sleep(1.0)
    assert _zoom(dash_duo) < 0.4                                    # the whole net: far out
    labels = _labels(dash_duo)
    sides = sorted((lab for lab in labels if lab["lod"] == "side"), key=lambda lab: lab["y"])
    assert [lab["text"].split(" ")[0] for lab in sides] == ["input", "res2", "res3", "res4", "res5", "head"]
    text = {lab["text"].split(" ")[0]: lab["text"].replace("\n", " · ") for lab in sides}
    assert text["res4"] == "res4 · 36 blocks · 1×1024×14×14"
    assert text["res2"] == "res2 · 3 blocks · 1×256×56×56"
    assert text["input"].startswith("input · ") and "layers · 1×64×56×56" in text["input"]
    assert text["head"].endswith("1×1000")
    # every label drawn is at least 10 px high on screen, and inside the graph's width
    width = cy_eval(dash_duo, "return cy.width();")
    assert labels and all(lab["px"] >= 9.9 for lab in labels), [(lab["text"], lab["px"]) for lab in labels
                                                               if lab["px"] < 9.9]
    assert all(0 <= lab["x1"] and lab["x2"] <= width for lab in sides)
    # the long stage uses the width: res4's 36 blocks in columns
    columns = cy_eval(dash_duo, """
return new Set(cy.nodes('.block').filter(n => n.data('name').startsWith('res4'))
  .map(n => Math.round(n.position('x')))).size;""")
    assert columns >= 4
    dash_duo.driver.save_screenshot(str(tmp_path / "overview.png"))
    # the wheel over res4: the blocks' names (10 px and more) ...
    _wheel_to(dash_duo, "res4b20", 0.45)
    names = {lab["name"]: lab for lab in _labels(dash_duo) if lab["kind"] == "block"}
    assert "res4b20" in names and names["res4b20"]["text"] == "res4b20" and names["res4b20"]["px"] >= 9.9
    # ... then every label in full and the blobs' shapes
    _wheel_to(dash_duo, "res4b20", 0.96)
    labels = _labels(dash_duo)
    full = {lab["name"]: lab for lab in labels if lab["kind"] == "block"}
    assert full["res4b20"]["text"] == "res4b20 · 14 layers\n1×1024×14×14" and not full["res4b20"]["lod"]
    assert all(lab["px"] >= 9.9 for lab in labels)
    shapes = cy_eval(dash_duo, """return cy.edges('.srclab, .midlab, .tgtlab').filter(e => !e.hasClass('far')
  && e.visible() && e.data('label').indexOf('1×1024×14×14') >= 0).length;""")
    assert shapes > 0
    # ... and a double-click opens the block: its layers, named
    p = cy_eval(dash_duo, """
const n = cy.nodes().filter(x => x.data('name') === 'res4b20' && x.data('kind') === 'block')[0];
const b = cy.container().getBoundingClientRect(), q = n.renderedPosition();
return [b.left + q.x, b.top + q.y];""")
    click_at(dash_duo, p[0], p[1], double=True)
    wait_for(lambda: any(lab["text"] == "res4b20_branch2a" for lab in _labels(dash_duo)), timeout=30,
             what="res4b20's layers drawn with their names")


# the selected element(s) ("sel": the selection, or the folded block holding it) in the graph's
# visible part: left of the overview, below the legend
_IN_VIEW = """
const els = cy.elements('.sel');
if (!els.length) return null;
const bb = els.renderedBoundingBox({includeLabels: false, includeOverlays: false});
const map = document.getElementById(arguments[1]);
const right = cy.width() - (map && map.offsetParent !== null ? map.offsetWidth + 16 : 0);
const cx = (bb.x1 + bb.x2) / 2, cy_ = (bb.y1 + bb.y2) / 2;
const inside = cx > 0 && cx < right && cy_ > 40 && cy_ < cy.height();
const overlaps = bb.x2 > 0 && bb.x1 < right && bb.y2 > 40 && bb.y1 < cy.height();
return {inside: inside || (overlaps && (bb.w > right || bb.h > cy.height() - 40)),
        names: els.map(e => e.data('kind') + ' ' + e.data('name')), y: [bb.y1, bb.y2]};"""


def _in_view(dash_duo):
    return cy_eval(dash_duo, _IN_VIEW, ids.MINIMAP)


def _wait_in_view(dash_duo, names, what):
    """``names``: the selection's name, or the names of it and the blocks that may hold it."""
    names = (names,) if isinstance(names, str) else tuple(names)

    def ok():
        v = _in_view(dash_duo)
        return v if v and v["inside"] and any(n.split(" ", 1)[1] in names for n in v["names"]) else None
    time.sleep(0.5)
    return wait_for(ok, timeout=30, what="%s in view after %s (%r)" % (names[0], what, _in_view(dash_duo)))


def _kinds(dash_duo):
    return cy_eval(dash_duo, """
const out = {};
cy.nodes().forEach(n => { const k = n.data('kind'); out[k] = (out[k] || 0) + 1; });
return out;""")


def test_the_selection_stays_in_view_through_folding_a_phase_switch_and_a_reload(dash_duo, resnet152):
    _start(dash_duo, resnet152)
    d = dash_duo.driver
    box = d.find_element("css selector", "#%s" % ids.SEARCH)
    box.send_keys("res4b22_branch2c")
    wait_for(lambda: text_of(dash_duo, ids.SEARCH_RESULTS).startswith("res4b22_branch2c"), what="the match")
    box.send_keys(Keys.ENTER)
    wait_text(dash_duo, ids.DETAILS, "res4b22_branch2c")
    _wait_in_view(dash_duo, "res4b22_branch2c", "the search")
    # Collapse: the block now holding it (the view: res4b22 ended at y = -253 px)
    dash_duo.find_element("#" + ids.COLLAPSE).click()
    wait_for(lambda: _kinds(dash_duo).get("block") == 50, what="res4b22 folded")
    _wait_in_view(dash_duo, "res4b22", "Collapse")
    dash_duo.find_element("#" + ids.EXPAND).click()
    wait_for(lambda: _kinds(dash_duo).get("block") == 49, what="res4b22 open")
    _wait_in_view(dash_duo, "res4b22_branch2c", "Expand")
    dash_duo.find_element("#" + ids.COLLAPSE_ALL).click()
    wait_for(lambda: _kinds(dash_duo).get("block") == 6, what="every block folded")
    _wait_in_view(dash_duo, "res4", "Collapse all")
    dash_duo.find_element("#" + ids.EXPAND_ALL).click()
    wait_for(lambda: not _kinds(dash_duo).get("block"), timeout=60, what="every block open")
    _wait_in_view(dash_duo, "res4b22_branch2c", "Expand all")
    # a phase switch rebuilds the net and redraws it; a reload draws it afresh from the address
    d.find_element("css selector", "#%s input[value=TRAIN]" % ids.PHASE).click()
    wait_for(lambda: "— TRAIN" in text_of(dash_duo, ids.GRAPH_TITLE), timeout=60, what="the TRAIN net drawn")
    _wait_in_view(dash_duo, "res4b22_branch2c", "the phase switch")
    d.execute_script("window.inspectorGraphDrawn = null;")
    d.refresh()
    wait_text(dash_duo, ids.LOAD_STATUS, "layers", timeout=60)
    _drawn(dash_duo)
    wait_text(dash_duo, ids.DETAILS, "res4b22_branch2c")
    _wait_in_view(dash_duo, ("res4b22_branch2c", "res4b22", "res4"), "a reload")


def _stopped(dash_duo):
    return cy_eval(dash_duo, "return cy.nodes('.stopped').map(n => n.data('name'));")


def test_small_things_steps_keys_links_status_and_findings(dash_duo, shared_dir):
    """GoogLeNet's train_val with Input layers: "data" feeds the net and the label to three
    losses, so a Split follows it, which the graph folds away."""
    model = shared_dir / "zoo" / "models" / "bvlc_googlenet" / "train_val.input.prototxt"
    _start(dash_duo, model)
    d = dash_duo.driver
    # folded, Step ▶ marks the block holding the layer it ran ("data" is in the section "input") ...
    d.find_element("id", ids.STEP_FORWARD).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 1)", timeout=60)
    wait_for(lambda: _stopped(dash_duo) == ["input"], what="the marker on the section input")
    d.find_element("id", ids.RESET).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "reset", timeout=60)
    # ... and opened, it lands on, and marks, the layers drawn (the split runs with "data")
    d.find_element("id", ids.EXPAND_ALL).click()
    wait_for(lambda: cy_eval(dash_duo, "return cy.nodes('.layer').length;") > 150, what="every layer drawn")
    d.find_element("id", ids.STEP_FORWARD).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 1)", timeout=60)
    wait_for(lambda: _stopped(dash_duo) == ["data"], what="the marker on data")
    d.find_element("id", ids.STEP_FORWARD).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(2, 2)", timeout=60)
    wait_for(lambda: _stopped(dash_duo) == ["conv1/7x7_s2"], what="the marker on conv1/7x7_s2")
    # "/" right after a click on a radio button goes to the search box
    d.find_element("css selector", "#%s input[value=CPU]" % ids.DEVICE).click()
    d.switch_to.active_element.send_keys("/")
    assert d.switch_to.active_element.get_attribute("id") == ids.SEARCH
    d.switch_to.active_element.send_keys(Keys.ESCAPE)
    # the Findings stay while they are recomputed after a run (never an empty tab)
    for el in d.find_elements("css selector", ".tab"):
        if el.text.strip() == "Findings":
            el.click()
    wait_for(lambda: text_of(dash_duo, ids.HEALTH_TABLE).strip(), timeout=60, what="the findings")
    d.execute_script("""
window.__blank = 0;
const t = document.getElementById(arguments[0]);
new MutationObserver(() => { if (!t.innerText.trim()) window.__blank += 1; })
  .observe(t, {childList: true, subtree: true, characterData: true});""", ids.HEALTH_TABLE)
    d.find_element("id", ids.FORWARD).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 168)", timeout=180)      # TRAIN: 169 layers
    time.sleep(1.0)
    wait_for(lambda: not d.find_elements("css selector", ".recomputing"), timeout=60, what="the findings recomputed")
    assert d.execute_script("return window.__blank;") == 0 and text_of(dash_duo, ids.HEALTH_TABLE).strip()
    # the status line: cut on a narrow window, read in full on a click, cut again on the next
    d.set_window_size(700, 1000)
    msg = d.find_element("id", ids.RUN_MESSAGE)
    cut = "const e = document.getElementById(arguments[0]); return e.scrollWidth > e.clientWidth + 1;"
    wait_for(lambda: d.execute_script(cut, ids.RUN_MESSAGE), what="the run message cut")
    msg.click()
    wait_for(lambda: not d.execute_script(cut, ids.RUN_MESSAGE), what="the whole message shown")
    assert "ForwardFromTo(0, 168): data → loss3/loss3, loss " in msg.text
    assert msg.get_attribute("aria-expanded") == "true"
    msg.click()
    wait_for(lambda: d.execute_script(cut, ids.RUN_MESSAGE), what="cut again")
    d.set_window_size(1600, 1000)
    # a link naming a layer this net lacks says so (and selects nothing)
    d.get(dash_duo.server_url + "/?layer=no_such_layer")
    wait_text(dash_duo, ids.LOAD_ERROR, "no layer named 'no_such_layer' in this net", timeout=60)
    assert "Not in this net" in text_of(dash_duo, ids.LOAD_ERROR)
    assert not cy_eval(dash_duo, "return cy.elements('.sel').length;")

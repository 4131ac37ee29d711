"""Browser tests of the graph on a big net (issue 13): ResNet-152 deploy opens
folded; search -> select -> details (keyboard: "/", arrows, Enter); a match
inside a folded block opens it and is centred; expand/collapse a block in
place (one, all, double-click); clicks on node centres select that node in
the whole-net view and at every zoom level (frames behind); the accessible
names; a light page open (no Plotly, Start/End searched on the server);
panning the whole net restyles nothing; labels by level of detail and the
view after Collapse all; the README's screenshot."""
import os
from pathlib import Path
from urllib.parse import unquote

import pytest
from browser_helpers import _CY as _CY_JS
from browser_helpers import (
    click_at,
    click_node,
    cy_eval,
    details_show,
    find_point,
    settle,
    text_of,
    wait_for,
    wait_text,
)
from selenium.webdriver.common.keys import Keys

from benchmarks.netgen import deploy_prototxt
from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def resnet152(tmp_path_factory):
    d = tmp_path_factory.mktemp("resnet152")
    p = d / "resnet152_deploy.prototxt"
    p.write_text(deploy_prototxt(152))       # KaimingHe's deploy file: no fillers (weights from a caffemodel)
    return p


def _start(dash_duo, model, path=""):
    app = create_app(InspectorConfig(model=str(model), model_root=str(Path(model).parent)))
    dash_duo.start_server(app)
    if path:
        dash_duo.driver.get(dash_duo.server_url + path)
    wait_text(dash_duo, ids.LOAD_STATUS, "layers", timeout=120)
    wait_for(lambda: dash_duo.driver.execute_script("return window.inspectorGraphDrawn || null"), timeout=120,
             what="the graph's first view")
    return app


def _kinds(dash_duo):
    return cy_eval(dash_duo, """
const out = {};
cy.nodes().forEach(n => { const k = n.data('kind'); out[k] = (out[k] || 0) + 1; });
return out;""")


def _node_pos(dash_duo, name, kind):
    return cy_eval(dash_duo, """
const n = cy.nodes().filter(x => x.data('name') === arguments[1] && x.data('kind') === arguments[2])[0];
return n ? [n.position('x'), n.position('y')] : null;""", name, kind)


def _selected_names(dash_duo):
    return cy_eval(dash_duo, "return cy.elements('.sel').map(e => e.data('name') || e.data('blob'));")


def _address(dash_duo):
    return unquote(dash_duo.driver.execute_script("return window.location.search"))


def test_opens_folded_with_accessible_names(dash_duo, resnet152):
    _start(dash_duo, resnet152)
    kinds = _kinds(dash_duo)
    # the stages and the two sections (input, head) are open, the 50 residual blocks folded: about 60 nodes
    # instead of 700
    assert kinds.get("block") == 50 and kinds.get("group") == 6, kinds
    assert kinds.get("layer", 0) < 20
    d = dash_duo.driver
    holder = d.find_element("css selector", "[aria-label='Network graph']")
    assert holder.find_elements("css selector", "canvas")
    box = d.find_element("css selector", "[aria-label='Search layers and blobs']")
    assert box.find_elements("css selector", "input")
    assert d.find_element("css selector", "[aria-label='Details']").get_attribute("id") == ids.DETAILS
    # labels by level of detail: the first view is readable (zoom where 11px labels show)
    assert cy_eval(dash_duo, "return cy.zoom();") >= 0.64
    # the overview shows the visible window
    assert d.execute_script("const c = document.getElementById(arguments[0]); return c.width * c.height;",
                            ids.MINIMAP) > 0


def test_search_select_details_and_reveal(dash_duo, resnet152):
    _start(dash_duo, resnet152)
    d = dash_duo.driver
    d.find_element("tag name", "body").send_keys("/")               # "/" focuses the search box
    assert d.switch_to.active_element.get_attribute("id") == ids.SEARCH
    d.switch_to.active_element.send_keys("res4b22_branch2b")
    wait_for(lambda: "Convolution" in text_of(dash_duo, ids.SEARCH_RESULTS), what="matches listed")
    first = text_of(dash_duo, ids.SEARCH_RESULTS).splitlines()
    assert first[0] == "res4b22_branch2b" and "1×256×14×14" in " ".join(first[:4])
    d.switch_to.active_element.send_keys(Keys.ARROW_DOWN)          # the layer's blob, then back up
    d.switch_to.active_element.send_keys(Keys.ARROW_UP)
    d.switch_to.active_element.send_keys(Keys.ENTER)
    wait_text(dash_duo, ids.DETAILS, "res4b22_branch2b")
    assert "Convolution" in text_of(dash_duo, ids.DETAILS)
    # the folded block around it opened, the node is selected and centred
    wait_for(lambda: _selected_names(dash_duo) == ["res4b22_branch2b"], what="the node selected")
    wait_for(lambda: "open=" in _address(dash_duo) and "res4b22" in _address(dash_duo).split("open=")[1],
             what="the block open in the address")
    assert "layer=res4b22_branch2b" in _address(dash_duo)
    assert not d.find_element("id", ids.SEARCH_RESULTS).is_displayed()    # the pick closes the list

    def centred():        # in the part of the graph left of the overview
        p = find_point(dash_duo, "res4b22_branch2b")
        r = d.find_element("id", ids.GRAPH).rect
        left = r["width"] - d.find_element("id", ids.MINIMAP).rect["width"] - 16
        return p and abs(p[0] - (r["x"] + left / 2)) < 60 and abs(p[1] - (r["y"] + r["height"] / 2)) < 60
    wait_for(centred, what="the view centred on the match")
    # a type name finds layers too; arrows move, Enter picks the second match
    box = d.find_element("css selector", "#%s" % ids.SEARCH)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("Pooling")
    wait_for(lambda: text_of(dash_duo, ids.SEARCH_RESULTS).startswith("pool1"), what="pooling layers")
    box.send_keys(Keys.ARROW_DOWN)
    box.send_keys(Keys.ENTER)
    wait_text(dash_duo, ids.DETAILS, "pool5")


def test_expand_and_collapse_a_block_in_place(dash_duo, resnet152):
    _start(dash_duo, resnet152)
    before_pool1 = _node_pos(dash_duo, "pool1", "layer")
    below = _node_pos(dash_duo, "res3b5", "block")
    click_node(dash_duo, "res3b4", kind="block", until=details_show(dash_duo, "block of 14 layers"))
    dash_duo.find_element("#" + ids.EXPAND).click()
    wait_for(lambda: find_point(dash_duo, "res3b4_branch2a"), what="the block's layers drawn")
    kinds = _kinds(dash_duo)
    assert kinds["block"] == 49 and kinds["group"] == 7
    # in place: what is above does not move, what is below moves straight down
    assert _node_pos(dash_duo, "pool1", "layer") == before_pool1
    after = _node_pos(dash_duo, "res3b5", "block")
    assert abs(after[0] - below[0]) < 40 and after[1] > below[1] + 300
    assert "res3b4" in _address(dash_duo).split("open=")[1]
    # collapse (the selection is the block's frame now): back to where it was
    dash_duo.find_element("#" + ids.COLLAPSE).click()
    wait_for(lambda: _kinds(dash_duo).get("block") == 50, what="the block folded again")
    assert _node_pos(dash_duo, "res3b5", "block") == below
    # a double-click opens it too
    p = find_point(dash_duo, "res3b4", "block")
    click_at(dash_duo, p[0], p[1], double=True)
    wait_for(lambda: _kinds(dash_duo).get("block") == 49, what="double-click opens")
    # all / none
    dash_duo.find_element("#" + ids.EXPAND_ALL).click()
    wait_for(lambda: not _kinds(dash_duo).get("block"), what="every block open")
    assert _kinds(dash_duo)["layer"] == 721 - 50             # every layer but the folded splits
    dash_duo.find_element("#" + ids.COLLAPSE_ALL).click()
    wait_for(lambda: _kinds(dash_duo).get("block") == 6 and not _kinds(dash_duo).get("group"),
             what="only the stages and sections, folded")


def test_clicks_on_node_centres_select_that_node_in_the_whole_net_view(dash_duo, resnet152):
    _start(dash_duo, resnet152)
    dash_duo.find_element("#" + ids.FIT_NET).click()
    wait_for(lambda: cy_eval(dash_duo, "return cy.zoom();") < 0.3, what="the whole net: tiny nodes")
    settle(dash_duo)
    names = ["res2b", "res3a", "res3b3", "res4b1", "res4b2", "res4b17", "res4b18", "res4b35", "res5a", "res5c"]
    for name in names:
        p = find_point(dash_duo, name, "block")
        click_at(dash_duo, p[0], p[1])
        wait_for(lambda n=name: _selected_names(dash_duo) == [n], timeout=120,
                 what="a click on %s's centre to select it" % name)
    # fit to the selection zooms back to a readable view
    dash_duo.find_element("#" + ids.FIT_SELECTION).click()
    wait_for(lambda: cy_eval(dash_duo, "return cy.zoom();") >= 0.9, what="zoomed on the selection")


def _options(dash_duo):
    return dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll('.dash-dropdown-content .dash-dropdown-option'))"
        ".map(e => e.innerText.trim())")


def test_page_open_is_light_and_start_end_search_the_server(dash_duo, resnet152):
    _start(dash_duo, resnet152)
    d = dash_duo.driver
    # no Plotly (3.5 MB of script) until a chart is shown
    plotly = "return typeof window.Plotly !== 'undefined' || performance.getEntriesByType('resource')" \
             ".some(e => e.name.indexOf('plotly') >= 0);"
    assert not d.execute_script(plotly)
    # Start lists 40 of the 721 layers; typing searches them all on the server
    d.find_element("id", ids.START).click()
    opts = wait_for(lambda: _options(dash_duo), what="Start's options")
    assert len(opts) == 40 and opts[0] == "0 input"
    d.find_element("css selector", ".dash-dropdown-content input.dash-dropdown-search").send_keys("res5c_branch2c")
    hit = wait_for(lambda: [e for e in d.find_elements("css selector", ".dash-dropdown-content .dash-dropdown-option")
                            if e.text.strip().endswith(" res5c_branch2c")], what="the layer found on the server")
    hit[0].click()
    wait_for(lambda: "res5c_branch2c" in text_of(dash_duo, ids.START), what="Start set")
    d.find_element("id", ids.FORWARD).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(", timeout=120)
    assert "res5c_branch2c" in text_of(dash_duo, ids.RUN_MESSAGE)
    # "← selected" puts a layer from the graph into End (and among its options)
    box = d.find_element("css selector", "#%s" % ids.SEARCH)
    box.send_keys("res4b30_branch2a")
    wait_for(lambda: text_of(dash_duo, ids.SEARCH_RESULTS).startswith("res4b30_branch2a"), what="matches")
    box.send_keys(Keys.ENTER)
    wait_text(dash_duo, ids.DETAILS, "res4b30_branch2a")
    d.find_element("id", ids.SET_END).click()
    wait_for(lambda: "res4b30_branch2a" in text_of(dash_duo, ids.END), what="End from the selection")
    # a blob's charts bring Plotly in
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("pool5")
    wait_for(lambda: text_of(dash_duo, ids.SEARCH_RESULTS).startswith("pool5") and "blob" in text_of(
        dash_duo, ids.SEARCH_RESULTS), what="pool5's blob")     # not the last search's list, which has a blob too
    box.send_keys(Keys.ARROW_DOWN)
    box.send_keys(Keys.ENTER)
    wait_text(dash_duo, ids.DETAILS, "1×2048×1×1")
    wait_for(lambda: d.find_elements("css selector", "#%s .main-svg" % ids.HISTOGRAM), what="the histogram drawn")
    assert d.execute_script(plotly)


def test_panning_and_zooming_the_whole_net_restyles_nothing(dash_duo, resnet152):
    """Cytoscape 3.28 flipped every drawn node's :backgrounding state (a restyle of it, and of a
    compound node's whole inside): pans of ResNet-152 expanded ran at 10 frames a second."""
    _start(dash_duo, resnet152)
    dash_duo.find_element("#" + ids.EXPAND_ALL).click()
    wait_for(lambda: not _kinds(dash_duo).get("block"), timeout=120, what="every block open")
    # block frames are plain nodes drawn behind edges and nodes, not compound nodes
    assert cy_eval(dash_duo, "return cy.nodes(':parent').length;") == 0
    assert cy_eval(dash_duo, "return cy.nodes('.group').length;") == 56
    assert cy_eval(dash_duo, """
const f = Math.max(...cy.nodes('.group').map(n => n.pstyle('z-index').value));
const e = cy.edges()[0].pstyle('z-index').value, n = cy.nodes('.layer')[0].pstyle('z-index').value;
return f < e && e < n;""")
    cy_eval(dash_duo, """
window.__restyled = 0;
const st = cy.style(), apply = st.apply.bind(st);
st.apply = function (eles) { window.__restyled += eles.length; return apply(eles); };
cy.zoom(0.6); cy.center(cy.nodes('.layer')[300]);""")
    settle(dash_duo)                           # the zoom's own restyle (labels off) is done
    cy_eval(dash_duo, "window.__restyled = 0;")
    for _k in range(16):                       # panning: nothing to restyle
        cy_eval(dash_duo, "cy.panBy({x: 23, y: -61});")
        settle(dash_duo)                       # each view drawn
    assert dash_duo.driver.execute_script("return window.__restyled;") == 0
    # a zoom gesture (0.6 .. 0.39): the labels' sizes follow once it ends, each node restyled at most once
    nodes = cy_eval(dash_duo, "return cy.nodes().length;")
    dash_duo.driver.execute_async_script(_CY_JS + """
const done = arguments[arguments.length - 1];
let k = 0;
(function frame() {
  if (k++ >= 8) { done(); return; }
  cy.panBy({x: 23, y: -61}); cy.zoom(cy.zoom() * 0.95);
  requestAnimationFrame(frame);
})();""", ids.GRAPH)
    settle(dash_duo)                           # the zoom's restyle done
    assert dash_duo.driver.execute_script("return window.__restyled;") <= nodes
    cy_eval(dash_duo, "window.__restyled = 0;")
    # zooming in past 0.95 shows the edge labels and every node's full label: those restyled once
    labelled = cy_eval(dash_duo, "cy.zoom(1.0); return cy.edges('.srclab, .midlab, .tgtlab').length;")
    wait_for(lambda: dash_duo.driver.execute_script("return window.__restyled;") > 0, what="the labels restyled")
    settle(dash_duo)
    assert 0 < dash_duo.driver.execute_script("return window.__restyled;") <= labelled + nodes


def test_labels_by_level_of_detail_and_the_view_after_collapse_all(dash_duo, resnet152):
    _start(dash_duo, resnet152)
    far = "return [cy.edges('.srclab, .midlab, .tgtlab').length, cy.edges('.far').length];"
    labelled, hidden = cy_eval(dash_duo, far)
    assert labelled > 10 and hidden == 0                  # the first view: every label
    # shapes only when a layer of the blob's name made it, and a blob labelled once
    labels = cy_eval(dash_duo, "return cy.edges('.srclab, .midlab, .tgtlab').map(e => e.data('label'));")
    assert "1×64×56×56" in labels and "data 1×3×224×224" in labels
    cy_eval(dash_duo, "cy.zoom(0.4);")
    wait_for(lambda: cy_eval(dash_duo, far)[1] == cy_eval(dash_duo, far)[0], what="edge labels off when zoomed out")
    cy_eval(dash_duo, "cy.zoom(1.0);")
    wait_for(lambda: cy_eval(dash_duo, far)[1] == 0, what="edge labels back")
    # the whole net expanded and fitted, then Collapse all: the view comes back to a readable first view
    dash_duo.find_element("#" + ids.EXPAND_ALL).click()
    wait_for(lambda: not _kinds(dash_duo).get("block"), timeout=120, what="every block open")
    dash_duo.find_element("#" + ids.FIT_NET).click()
    wait_for(lambda: cy_eval(dash_duo, "return cy.zoom();") < 0.05, what="the whole net fitted")
    dash_duo.find_element("#" + ids.COLLAPSE_ALL).click()
    wait_for(lambda: cy_eval(dash_duo, "return cy.zoom();") >= 0.64, what="the first view again")
    assert cy_eval(dash_duo, """
const bb = cy.elements().boundingBox(), ext = cy.extent();
return bb.y1 >= ext.y1 && bb.x1 >= ext.x1 && bb.x2 <= ext.x2;""")


def test_clicks_at_every_zoom_level_select_what_is_under_the_pointer(dash_duo, resnet152):
    _start(dash_duo, resnet152)
    p = find_point(dash_duo, "res3b2", "block")
    click_at(dash_duo, p[0], p[1], double=True)           # a residual block opened inside its stage's frame
    wait_for(lambda: find_point(dash_duo, "res3b2_branch2b"), what="the block's layers drawn")
    settle(dash_duo)
    frame_edge = """
const f = cy.nodes('.group').filter(n => n.data('name') === 'res3b2')[0];
const x = f.position('x') + f.data('w') / 2 - 5, y = f.position('y') - f.data('h') / 2 + 8;   // top right margin
const z = cy.zoom(), box = cy.container().getBoundingClientRect();
cy.pan({x: cy.width() / 2 - x * z, y: cy.height() / 2 - y * z});
return [box.left + cy.width() / 2, box.top + cy.height() / 2];"""
    for zoom in (2.0, 1.0, 0.45, 0.2):
        for name, kind in (("res3b2_branch2b", "layer"), ("res3b4", "block"), ("res3b2_branch2a_relu", "layer")):
            cy_eval(dash_duo, "cy.zoom(arguments[1]); cy.center(cy.nodes('.group').filter(n => n.data('name') === "
                              "'res3b2')[0]);", zoom)
            settle(dash_duo)
            q = find_point(dash_duo, name, kind)
            click_at(dash_duo, q[0], q[1])
            wait_for(lambda n=name: _selected_names(dash_duo) == [n], timeout=120,
                     what="a click on %s at zoom %s to select it" % (name, zoom))
        if zoom >= 1.0:                          # the frame's own margin (nothing drawn there) selects the block
            q = cy_eval(dash_duo, frame_edge)
            settle(dash_duo)
            click_at(dash_duo, q[0], q[1])
            wait_for(lambda: _selected_names(dash_duo) == ["res3b2"], timeout=120,
                     what="a click on res3b2's frame at zoom %s" % zoom)


def test_screenshot_big_net_folded_with_a_search_result(dash_duo, resnet152, tmp_path):
    """README's screenshot: a big net folded (GoogLeNet from ../shared, else ResNet-152),
    coloured by mean |data| after running to a search result (the last step's marker and
    range), the result selected with its details."""
    zoo = ROOT.parent / "shared" / "zoo" / "models" / "bvlc_googlenet" / "deploy.prototxt"
    model, query = (zoo, "inception_4c/5x5") if zoo.is_file() else (resnet152, "res4b22_branch2b")
    _start(dash_duo, model)
    d = dash_duo.driver
    dash_duo.select_dcc_dropdown("#" + ids.COLOUR_BY, value="mean |data| of tops")
    box = d.find_element("css selector", "#%s" % ids.SEARCH)
    box.send_keys(query)
    wait_for(lambda: text_of(dash_duo, ids.SEARCH_RESULTS).startswith(query), what="matches")
    box.send_keys(Keys.ENTER)
    wait_text(dash_duo, ids.DETAILS, query)
    d.find_element("id", ids.RUN_TO).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo", timeout=120)
    wait_for(lambda: cy_eval(dash_duo, "return cy.nodes('.stopped').length;") == 1, what="the stop marker")
    box.send_keys(Keys.ESCAPE)
    cy_eval(dash_duo, "const n = cy.nodes('.sel'); cy.zoom(0.75); cy.center(n); cy.panBy({x: 0, y: 15});")
    settle(dash_duo)
    target = ROOT / "docs" / "screenshot.png"
    if not os.environ.get("INSPECTOR_UPDATE_SCREENSHOT"):
        target = tmp_path / "screenshot.png"     # keep the committed one unless asked
    d.save_screenshot(str(target))
    assert target.stat().st_size > 10000


def _net_box(dash_duo):
    """The drawn net's box in the graph's pixels, the graph's width and the overview's."""
    return cy_eval(dash_duo, """
const bb = cy.elements().renderedBoundingBox();
const map = document.getElementById(arguments[1]);
return {x1: bb.x1, x2: bb.x2, w: cy.width(), map: map.offsetParent === null ? 0 : map.offsetWidth};""",
                   ids.MINIMAP)


def test_fit_net_keeps_the_overview_corner_free_and_the_overview_can_be_hidden(dash_duo, resnet152):
    """Nodes under the overview could not be clicked: Fit net and the first view use the width
    left of it; the overview hides and shows again from its own button (aria-label)."""
    _start(dash_duo, resnet152)
    dash_duo.find_element("#" + ids.EXPAND_ALL).click()          # the widest view of the net
    wait_for(lambda: _kinds(dash_duo).get("layer", 0) > 500, timeout=120, what="expanded")
    dash_duo.find_element("#" + ids.FIT_NET).click()

    def fitted_left_of_the_overview():
        b = _net_box(dash_duo)
        return b if b and b["map"] > 100 and b["x2"] <= b["w"] - b["map"] - 8 else None

    wait_for(fitted_left_of_the_overview, what="Fit net to leave the overview's corner free")
    settle(dash_duo)
    box = _net_box(dash_duo)
    assert box["map"] > 100
    assert box["x2"] <= box["w"] - box["map"] - 8, box
    toggle = dash_duo.find_element("#" + ids.MINIMAP_TOGGLE)
    assert toggle.get_attribute("aria-label") == "Hide overview"
    toggle.click()
    wait_for(lambda: _net_box(dash_duo)["map"] == 0, what="the overview hidden")
    assert toggle.get_attribute("aria-label") == "Show overview"
    dash_duo.find_element("#" + ids.FIT_NET).click()
    wait_for(lambda: abs((_net_box(dash_duo)["x1"] + _net_box(dash_duo)["x2"]) / 2 - _net_box(dash_duo)["w"] / 2)
             < 20, what="Fit net to centre the net in the whole width")
    settle(dash_duo)
    box = _net_box(dash_duo)
    assert abs((box["x1"] + box["x2"]) / 2 - box["w"] / 2) < 20, box     # centred in the whole width
    toggle.click()
    wait_for(lambda: _net_box(dash_duo)["map"] > 100, what="the overview shown again")
    assert toggle.get_attribute("aria-label") == "Hide overview"

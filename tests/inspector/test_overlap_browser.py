"""Nothing drawn over anything else (issue 35, item 5), at 1280×800 and 1600×1000, on LeNet,
Caffe's MNIST siamese net, GoogLeNet and ResNet-152: the legend, the frames' titles, the edge
labels and the page's panels do not intersect (bounding boxes: the page's from the DOM, the
labels' from cytoscape, which draws them in its canvas), at the first view and at Fit net;
the Findings' Inserted splits table is not cut off on the right."""
import os
import shutil
from pathlib import Path

import pytest
from browser_helpers import click_id, cy_eval, open_tab, settle, wait_for, wait_text

from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser
SHARED = Path(os.environ.get("CAFFE_SHARED", Path(__file__).resolve().parents[3] / "shared"))
SIZES = ((1600, 1000), (1280, 800))

# every label cytoscape draws (an edge's blob shape, a frame's title) as a box in page coordinates,
# with what it says; ``shown``: on screen now (not faded out by the zoom, not hidden)
_LABELS_JS = """
const z = cy.zoom(), pan = cy.pan(), c = cy.container().getBoundingClientRect();
const page = b => ({left: c.left + b.x1 * z + pan.x, right: c.left + b.x2 * z + pan.x,
                    top: c.top + b.y1 * z + pan.y, bottom: c.top + b.y2 * z + pan.y});
const out = [];
const opts = {includeNodes: false, includeEdges: false, includeLabels: true, includeOverlays: false,
              includeUnderlays: false};
cy.edges().forEach(e => {
  const text = ['label', 'source-label', 'target-label'].map(k => e.pstyle(k).strValue).filter(t => t).join(' / ');
  if (!text) { return; }
  const b = e.boundingBox(opts);
  if (!(b.w > 0)) { return; }
  out.push({kind: 'edge label', text: text, box: page(b),
            shown: e.visible() && e.pstyle('text-opacity').value > 0 && z * 10 >= 8});
});
cy.nodes('.group').forEach(n => {
  if (n.hasClass('nolabel')) { return; }
  const text = n.pstyle('label').strValue;
  if (!text) { return; }
  const b = n.boundingBox(opts);
  if (!(b.w > 0)) { return; }
  out.push({kind: 'frame title', text: text, box: page(b), shown: true});
});
return {labels: out, canvas: {left: c.left, right: c.right, top: c.top, bottom: c.bottom}};
"""

_PANELS_JS = """
const box = sel => {
  const e = document.querySelector(sel);
  if (!e || !e.offsetParent) { return null; }
  const b = e.getBoundingClientRect();
  return b.width && b.height ? {left: b.left, right: b.right, top: b.top, bottom: b.bottom} : null;
};
return {legend: box('#graph-legend'), caption: box('#graph-title'), overview: box('#graph-minimap'),
        graph: box('#net-graph-holder'), graph_col: box('.graph-col'), side_col: box('.side-col'),
        header: box('.header'), navbar: box('.navbar'), stepping: box('.stepping')};
"""


def _meet(a, b, slack=0.5):
    return (a["left"] < b["right"] - slack and b["left"] < a["right"] - slack
            and a["top"] < b["bottom"] - slack and b["top"] < a["bottom"] - slack)


def _visible_part(box, canvas):
    """``box`` clipped to the graph's canvas (None: not on it)."""
    out = {"left": max(box["left"], canvas["left"]), "right": min(box["right"], canvas["right"]),
           "top": max(box["top"], canvas["top"]), "bottom": min(box["bottom"], canvas["bottom"])}
    return out if out["left"] < out["right"] and out["top"] < out["bottom"] else None


def _overlaps(dash_duo, where):
    """Every pair of things that intersect, described."""
    drawn = cy_eval(dash_duo, _LABELS_JS)
    panels = dash_duo.driver.execute_script(_PANELS_JS)
    labels, canvas = drawn["labels"], drawn["canvas"]
    bad = []
    shown = [lab for lab in labels if lab["shown"]]
    for i, a in enumerate(shown):            # the labels among themselves (the whole net, on screen or not)
        for b in shown[i + 1:]:
            if _meet(a["box"], b["box"]):
                bad.append("%s: %s %r / %s %r" % (where, a["kind"], a["text"], b["kind"], b["text"]))
    fixed = {k: v for k, v in panels.items() if v and k in ("legend", "caption", "overview")}
    for lab in shown:                         # ... and the page's own boxes over the graph
        part = _visible_part(lab["box"], canvas)
        for name, box in fixed.items():
            if part and _meet(part, box):
                bad.append("%s: %s %r under the %s" % (where, lab["kind"], lab["text"], name))
    for name in ("legend", "caption"):         # the legend and caption are not over the graph
        if panels[name] and _meet(panels[name], panels["graph"]):
            bad.append("%s: the %s over the graph" % (where, name))
    pairs = (("graph_col", "side_col"), ("header", "graph_col"), ("header", "side_col"),
             ("navbar", "graph"), ("stepping", "graph"), ("legend", "caption"))
    for a, b in pairs:
        if panels[a] and panels[b] and _meet(panels[a], panels[b]):
            bad.append("%s: the %s and the %s" % (where, a, b))
    return bad


def _shot(dash_duo, name):
    folder = os.environ.get("INSPECTOR_SCREENSHOTS")
    if folder:
        dash_duo.driver.save_screenshot(os.path.join(folder, name))


def _splits_table_whole(dash_duo):
    """The Findings' Inserted splits table fits its panel (no cell runs past its right edge)."""
    return dash_duo.driver.execute_script("""
        const t = document.querySelector('#' + arguments[0] + ' table');
        const side = document.querySelector('.side-col');
        if (!t || !side) { return null; }
        const s = side.getBoundingClientRect(), right = s.left + side.clientWidth;
        const cells = [...t.querySelectorAll('td, th')];
        return {table: t.getBoundingClientRect().right <= right + 0.5,
                cells: cells.every(c => c.scrollWidth <= c.clientWidth + 1
                                        && c.getBoundingClientRect().right <= right + 0.5),
                scroll: side.scrollWidth <= side.clientWidth + 1};""", ids.SPLITS_TABLE)


def _check(dash_duo, url, label, splits=False):
    bad = []
    for w, h in SIZES:
        dash_duo.driver.set_window_size(w, h)
        dash_duo.driver.get(url)
        wait_text(dash_duo, ids.LOAD_STATUS, "layers", timeout=120)
        wait_for(lambda: dash_duo.driver.execute_script("return window.inspectorGraphDrawn || null"), timeout=120,
                 what="the graph's first view")
        wait_for(lambda: (cy_eval(dash_duo, "return cy.elements().length;") or 0) > 0, what="the graph")
        settle(dash_duo)
        bad += _overlaps(dash_duo, "%s %dx%d first view" % (label, w, h))
        _shot(dash_duo, "overlap-%s-%dx%d.png" % (label, w, h))
        click_id(dash_duo, ids.FIT_NET)
        settle(dash_duo)
        bad += _overlaps(dash_duo, "%s %dx%d Fit net" % (label, w, h))
        _shot(dash_duo, "overlap-%s-%dx%d-fit.png" % (label, w, h))
        if splits:
            open_tab(dash_duo, "Findings")
            whole = wait_for(lambda: _splits_table_whole(dash_duo), what="the Inserted splits table")
            if not all(whole.values()):
                bad.append("%s %dx%d: the Inserted splits table is cut off (%s)" % (label, w, h, whole))
            _shot(dash_duo, "overlap-%s-%dx%d-splits.png" % (label, w, h))
    assert not bad, "\n".join(bad[:40]) + ("\n… %d in all" % len(bad) if len(bad) > 40 else "")


def _serve(dash_duo, root):
    dash_duo.start_server(create_app(InspectorConfig(model_root=str(root))))
    return dash_duo.server_url


def test_lenet_has_nothing_over_anything(dash_duo):
    root = Path(__file__).resolve().parents[2]
    url = _serve(dash_duo, root)
    _check(dash_duo, url + "/", "lenet")


def _check_shared_net(dash_duo, tmp_path, path, label, splits=False):
    """The check on a net of ../shared (``path`` under it), opened from a copy in ``tmp_path``."""
    if not SHARED.is_dir():
        pytest.skip("needs ../shared (%s)" % path)
    shutil.copy(SHARED / path, tmp_path / ("%s.prototxt" % label))
    url = _serve(dash_duo, tmp_path)
    _check(dash_duo, url + "/?model=%s.prototxt" % label, label, splits=splits)


@pytest.mark.shared
def test_the_siamese_net_has_nothing_over_anything(dash_duo, tmp_path):
    _check_shared_net(dash_duo, tmp_path, "zoo/examples/siamese/mnist_siamese_train_test.prototxt", "siamese")


@pytest.mark.shared
def test_googlenet_has_nothing_over_anything(dash_duo, tmp_path):
    _check_shared_net(dash_duo, tmp_path, "zoo/models/bvlc_googlenet/deploy.prototxt", "googlenet", splits=True)


def test_resnet152_has_nothing_over_anything(dash_duo, tmp_path):
    from benchmarks.netgen import deploy_prototxt
    (tmp_path / "resnet152.prototxt").write_text(deploy_prototxt(152))
    url = _serve(dash_duo, tmp_path)
    _check(dash_duo, url + "/?model=resnet152.prototxt", "resnet152", splits=True)

"""Helpers for the browser tests: find and click graph nodes, wait for text."""
import os
import time
from pathlib import Path

from selenium.webdriver.common.actions.action_builder import ActionBuilder

from inspector import create_app, ids
from inspector.config import InspectorConfig

ROOT = Path(__file__).resolve().parents[2]

_CY = """
const el = document.getElementById(arguments[0]);
let cy = el && el._cyreg && el._cyreg.cy;
if (!cy && el) {
  for (const d of el.getElementsByTagName('div')) { if (d._cyreg && d._cyreg.cy) { cy = d._cyreg.cy; break; } }
}
"""

# the page position (client coordinates) of the centre of the node showing ``name``
_POINT_JS = _CY + """
if (!cy) return null;
const want = arguments[1], kind = arguments[2];
const n = cy.nodes().filter(x => {
  const k = x.data('kind');
  if (kind === 'blob') return (k === 'blob' || k === 'output') && x.data('name') === want;
  if (kind === 'block') return (k === 'block' || k === 'group') && x.data('name') === want;
  if (kind === 'ghost') return k === 'ghost' && x.data('name') === want;
  return k === 'layer' && (x.data('members') || '').indexOf('|' + want + '|') >= 0;
})[0];
if (!n) return null;
const box = cy.container().getBoundingClientRect(), p = n.renderedPosition();
if (p.x < 0 || p.y < 0 || p.x > box.width || p.y > box.height) { cy.center(n); }
const q = n.renderedPosition();
return [box.left + q.x, box.top + q.y];
"""

# for a blob drawn as an edge: the middle of the edge
_EDGE_JS = _CY + """
if (!cy) return null;
const e = cy.edges().filter(x => x.data('blob') === arguments[1])[0];
if (!e) return null;
const box = cy.container().getBoundingClientRect();
let m = e.renderedMidpoint();
if (m.x < 0 || m.y < 0 || m.x > box.width || m.y > box.height) { cy.center(e); m = e.renderedMidpoint(); }
return [box.left + m.x, box.top + m.y];
"""


def find_point(dash_duo, name, kind="layer"):
    """(x, y) in the page of the graph's node called ``name`` (None while not drawn)."""
    p = dash_duo.driver.execute_script(_POINT_JS, ids.GRAPH, name, kind)
    if p is None and kind == "blob":
        p = dash_duo.driver.execute_script(_EDGE_JS, ids.GRAPH, name)
    return p


def cy_eval(dash_duo, body, *args):
    """Run ``body`` (JavaScript with ``cy``, the graph's cytoscape instance, and ``arguments``)."""
    return dash_duo.driver.execute_script(_CY + "if (!cy) return null;\n" + body, ids.GRAPH, *args)


def wait_for(predicate, timeout=120, interval=0.1, what="condition"):
    """``predicate()``'s first true value, polled every ``interval`` s for at most ``timeout`` s.
    With WAIT_TRACE=1 in the environment each wait prints how long it took (where a slow
    browser test spends its time: ``pytest -s``)."""
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            last = predicate()
            if last:
                if os.environ.get("WAIT_TRACE"):
                    print("WAIT %-50s %.1fs" % (what[:50], time.time() - end + timeout), flush=True)
                return last
        except Exception as e:  # stale elements while the page re-renders
            last = e
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


_SETTLE_JS = _CY + """
const done = arguments[arguments.length - 1];
const pending = () => (cy && cy.animated()) || (window.inspectorGraphPending && window.inspectorGraphPending());
if (pending()) { done(false); return; }
// two frames: what the page queued for the next frame (labels, the overview, a re-frame) has run,
// and no timer of the page's (the zoom's level of detail, 140 ms after the zoom) is still waiting
window.requestAnimationFrame(() => window.requestAnimationFrame(() => done(!pending())));
"""


def settle(dash_duo, timeout=120):
    """Wait until the graph is drawn and still: no animation running, and two animation
    frames later still none (the page's deferred work runs in the next frame).  Instead
    of a sleep, so a slow machine makes the wait longer, not the test wrong."""
    wait_for(lambda: dash_duo.driver.execute_async_script(_SETTLE_JS, ids.GRAPH), timeout=timeout,
             what="the graph to settle")


def next_frames(driver, n=2):
    """Return after the browser has drawn ``n`` more animation frames (what a scroll or an
    opened element changed is on screen then)."""
    driver.execute_async_script("""
const done = arguments[arguments.length - 1];
let n = arguments[0];
const step = () => (n-- <= 0 ? done(true) : window.requestAnimationFrame(step));
step();""", n)


def click_at(dash_duo, x, y, double=False):
    """A real mouse click (or double click) at viewport coordinates (x, y)."""
    a = ActionBuilder(dash_duo.driver)
    a.pointer_action.move_to_location(int(round(x)), int(round(y)))
    a.pointer_action.pause(0.15)
    a.pointer_action.click()
    if double:
        a.pointer_action.pause(0.05)
        a.pointer_action.click()
    a.perform()


def click_node(dash_duo, name, kind="layer", until=None, tries=5):
    """Click the centre of the graph's node (or blob edge) called ``name``;
    with ``until`` (a predicate), click again while the graph was re-rendering."""
    for k in range(tries):
        p = wait_for(lambda: find_point(dash_duo, name, kind), what="node %s" % name)
        try:
            time.sleep(0.15)
            p = find_point(dash_duo, name, kind) or p
            click_at(dash_duo, p[0], p[1])
        except Exception:
            if k == tries - 1:
                raise
            time.sleep(0.5)
            continue
        if until is None:
            return
        def took():    # on that node, not on a neighbour the graph moved under the pointer
            title = details_title(dash_duo)       # "name", or "name (block of 14 layers)"
            return (title == name or title.startswith(name + " (")) and until()
        try:
            wait_for(took, timeout=4, what="the click on %s to take" % name)
            return
        except AssertionError:
            if k == tries - 1:
                raise


def details_title(dash_duo):
    """The name the details panel is about ('' while it shows none)."""
    return dash_duo.driver.execute_script(
        "const e = document.querySelector('#' + arguments[0] + ' .details-title');"
        "return e ? e.innerText.trim() : '';", ids.DETAILS)


def details_show(dash_duo, needle):
    return lambda: needle in text_of(dash_duo, ids.DETAILS)


def text_of(dash_duo, id_):
    return dash_duo.driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.innerText : '';", id_)


def wait_text(dash_duo, id_, needle, timeout=120):
    return wait_for(lambda: needle in text_of(dash_duo, id_), timeout, what="%r in #%s" % (needle, id_))


def graph_fills(dash_duo):
    """The fill colours of the layer nodes, by name."""
    return cy_eval(dash_duo, """
const out = {};
cy.nodes().forEach(n => { if (n.data('kind') === 'layer') { out[n.data('name')] = n.data('fill'); } });
return out;""") or {}


def start_app(dash_duo, **kw):
    """The inspector with the checkout as its model root (the bundled example), loaded."""
    app = create_app(InspectorConfig(model_root=str(ROOT), **kw))
    dash_duo.start_server(app)
    wait_text(dash_duo, ids.LOAD_STATUS, "layers", timeout=120)
    return app


def click_id(dash_duo, id_):
    dash_duo.find_element("#" + id_).click()


def open_tab(dash_duo, label):
    """Click the side panel's tab called ``label``."""
    for el in dash_duo.driver.find_elements("css selector", ".tab"):
        if el.text.strip() == label:
            el.click()
            return
    raise AssertionError("no tab %r" % label)

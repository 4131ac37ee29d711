"""Helpers for the browser tests: find and click graph nodes, wait for text."""
import time

from selenium.webdriver.common.action_chains import ActionChains

from inspector import ids

_POINT_JS = """
const gd = document.getElementById(arguments[0]).querySelector('.js-plotly-plot');
if (!gd || !gd._fullData) return null;
const want = arguments[1], kind = arguments[2];
const traces = gd.querySelectorAll('g.trace.scatter');
for (let t = 0; t < gd._fullData.length; t++) {
  const tr = gd._fullData[t];
  if (!tr.customdata) continue;
  for (let i = 0; i < tr.customdata.length; i++) {
    const cd = tr.customdata[i];
    if (cd && cd[0] === kind && cd[1] === want) {
      const g = traces[tr.index];
      if (!g) return null;
      const pts = g.querySelectorAll('path.point');
      return pts[i] || null;
    }
  }
}
return null;
"""


def find_point(dash_duo, name, kind="layer"):
    return dash_duo.driver.execute_script(_POINT_JS, ids.GRAPH, name, kind)


def wait_for(predicate, timeout=20, interval=0.1, what="condition"):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:  # stale elements while the page re-renders
            last = e
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


def click_node(dash_duo, name, kind="layer", until=None, tries=5):
    """Click the graph's node (or blob label) called ``name``; with ``until``
    (a predicate), click again while the graph was re-rendering."""
    for k in range(tries):
        el = wait_for(lambda: find_point(dash_duo, name, kind), what="node %s" % name)
        try:
            ActionChains(dash_duo.driver).move_to_element(el).pause(0.2).click().perform()
        except Exception:
            if k == tries - 1:
                raise
            time.sleep(0.5)
            continue
        if until is None:
            return
        try:
            wait_for(until, timeout=4, what="the click on %s to take" % name)
            return
        except AssertionError:
            if k == tries - 1:
                raise


def details_show(dash_duo, needle):
    return lambda: needle in text_of(dash_duo, ids.DETAILS)


def text_of(dash_duo, id_):
    return dash_duo.driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.innerText : '';", id_)


def wait_text(dash_duo, id_, needle, timeout=20):
    return wait_for(lambda: needle in text_of(dash_duo, id_), timeout, what="%r in #%s" % (needle, id_))


def graph_fills(dash_duo):
    """The fill colours of the layer nodes, by name."""
    return dash_duo.driver.execute_script("""
const gd = document.getElementById(arguments[0]).querySelector('.js-plotly-plot');
const out = {};
if (!gd || !gd._fullData) return out;
for (const tr of gd._fullData) {
  if (tr.name !== 'layers') continue;
  const cs = tr.marker.color;
  tr.customdata.forEach((cd, i) => { out[cd[1]] = Array.isArray(cs) ? cs[i] : cs; });
}
return out;""", ids.GRAPH)

"""Compare's colours (issue 35, item 3): the scale covers every value shown (it stopped at the
95th percentile, below the departing layer's 0.00144), differences of rounding are neutral
(they were as yellow as the departing layer), the departing layer is marked on the graph;
and the chart's title is not under plotly's toolbar (item 5)."""
import os

import pytest
from browser_helpers import click_id, cy_eval, open_tab, settle, start_app, text_of, wait_for, wait_text

from inspector import ids
from inspector.views import view_models as vm

pytestmark = pytest.mark.browser

_NODES_JS = """
const out = {};
cy.nodes().forEach(n => { if (n.data('kind') === 'layer') {
  out[n.data('name')] = {fill: n.data('fill'), cause: n.hasClass('cause'), symptom: n.hasClass('symptom'),
                         label: n.data('label')}; } });
return out;
"""


def _boxes_meet(a, b):
    return not (a["right"] <= b["left"] or b["right"] <= a["left"] or
                a["bottom"] <= b["top"] or b["bottom"] <= a["top"])


def test_compare_colours_rounding_neutral_the_departure_marked_and_inside_the_scale(dash_duo):
    app = start_app(dash_duo)                                    # LeNet, TRAIN
    click_id(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    ctx = app.inspector
    with ctx.store.use(ctx.store.ids()[0]) as s:                  # the planted bug, and some rounding
        s.loaded.net.params["conv1"][0].data[...] *= 1 + 2 ** -21
        s.loaded.net.params["ip1"][0].data[...] *= 1.5
    open_tab(dash_duo, "Compare")
    click_id(dash_duo, ids.FORWARD)
    wait_for(lambda: text_of(dash_duo, ids.COMPARE_B).startswith("#1"), what="a second step to compare")
    click_id(dash_duo, ids.COMPARE_BUTTON)
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "part at layer 'ip1'", timeout=120)
    with ctx.store.use(ctx.store.ids()[0]) as s:
        rel = {l.layer: l.max_rel for l in s.loaded.comparison.layers}
    assert 0 < rel["conv1"] < 1e-4 and rel["ip1"] > 1e-3          # rounding upstream, the bug at ip1

    nodes = wait_for(lambda: (lambda n: n if n.get("ip1", {}).get("cause") else None)(cy_eval(dash_duo, _NODES_JS)),
                     what="ip1 marked as where the runs part")
    settle(dash_duo)
    nodes = cy_eval(dash_duo, _NODES_JS)
    # rounding-level differences neutral, the departing layer and what follows on the warm scale
    for name in ("conv1", "pool1", "conv2", "pool2"):
        assert nodes[name]["fill"] == vm.ROUNDING_COLOUR, (name, nodes[name])
    warm = set(vm._DEPARTS)
    assert nodes["ip1"]["fill"] in warm or nodes["ip1"]["fill"] not in (vm.ROUNDING_COLOUR, vm.NO_DATA_COLOUR)
    assert nodes["ip1"]["label"].startswith("⚠") and nodes["ip2"]["symptom"] and not nodes["conv1"]["symptom"]
    # the scale covers every value shown: its top is the largest difference
    legend = text_of(dash_duo, ids.GRAPH_LEGEND)
    assert "within rtol" in legend and "departs here: ip1" in legend
    top = max(rel[n] for n in rel if n in nodes and rel[n] == rel[n])
    assert vm._fmt(top) in legend, (legend, top)
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "compare-colours.png"))

    _title_clear_of_toolbar(dash_duo)


def test_a_long_compare_title_stays_clear_of_the_toolbar(dash_duo, tmp_path):
    # a report compared by its (long) file name: "this run vs <name>" ran under plotly's toolbar
    from inspector import adapters
    app = start_app(dash_duo)
    click_id(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    ctx = app.inspector
    with ctx.store.use(ctx.store.ids()[0]) as s:
        _name, text = adapters.make_report(s.loaded.net, s.loaded.recorder, "json")
    report = tmp_path / ("lenet_digits_run_saved_before_the_learning_rate_change_%s_report.json" % ("x" * 30))
    report.write_text(text)
    open_tab(dash_duo, "Compare")
    dash_duo.find_element("#%s input[type=file]" % ids.COMPARE_UPLOAD).send_keys(str(report))
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "received")
    click_id(dash_duo, ids.COMPARE_BUTTON)
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "agree", timeout=120)
    _title_clear_of_toolbar(dash_duo)
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "compare-title.png"))


def _title_clear_of_toolbar(dash_duo):
    """The chart's title clear of plotly's toolbar (shown while the pointer is on the chart), and whole."""
    chart = dash_duo.find_element("#" + ids.COMPARE_CHART)
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", chart)
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(dash_duo.driver).move_to_element(chart).perform()
    boxes = wait_for(lambda: dash_duo.driver.execute_script("""
        const c = document.getElementById(arguments[0]);
        const t = c.querySelector('.gtitle'), m = c.querySelector('.modebar');
        if (!t || !m || !m.getBoundingClientRect().width) { return null; }
        const r = e => { const b = e.getBoundingClientRect(); return {left: b.left, right: b.right, top: b.top,
                                                                       bottom: b.bottom}; };
        return [r(t), r(m), r(c)];""", ids.COMPARE_CHART), what="the chart's title and toolbar")
    title, bar, box = boxes
    assert not _boxes_meet(title, bar), boxes
    assert box["left"] <= title["left"] and title["right"] <= box["right"] + 1, boxes     # not cut either

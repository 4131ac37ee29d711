"""Browser tests of defects found by exploratory QA on big nets (headless
Chromium): each one a page behaviour a user met."""
import os
from pathlib import Path
from urllib.parse import unquote

import pytest
from browser_helpers import click_id as _click
from browser_helpers import cy_eval, text_of, wait_for, wait_text
from browser_helpers import open_tab as _tab
from browser_helpers import start_app as _start

from inspector import create_app, ids
from inspector.config import InspectorConfig

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


def _forward_twice(dash_duo):
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    _click(dash_duo, ids.STEP_FORWARD)            # a second step: the message changes
    wait_text(dash_duo, ids.RUN_MESSAGE, "step:")


def test_compare_tab_starts_empty_and_offers_the_last_two_steps(dash_duo):
    _start(dash_duo)
    _tab(dash_duo, "Compare")
    # before anything is compared the chart says so (no bare axes of an empty Plotly figure)
    wait_for(lambda: "nothing compared yet" in text_of(dash_duo, ids.COMPARE_CHART), what="the empty chart's note")
    _forward_twice(dash_duo)
    # step A and step B are the last two steps already: Compare works without choosing
    wait_for(lambda: text_of(dash_duo, ids.COMPARE_A).startswith("#0") and text_of(dash_duo, ids.COMPARE_B)
             .startswith("#1"), what="steps 0 and 1 chosen")
    _click(dash_duo, ids.COMPARE_BUTTON)
    wait_for(lambda: "step 0" in text_of(dash_duo, ids.COMPARE_SUMMARY), timeout=120, what="the comparison")
    assert "choose step A" not in text_of(dash_duo, ids.COMPARE_SUMMARY)


def test_log_filter_applies_while_typing_and_says_when_nothing_matches(dash_duo):
    _start(dash_duo)
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    _tab(dash_duo, "Findings")
    wait_text(dash_duo, ids.DEBUG_LINES, "[Forward]")
    dash_duo.find_element("#" + ids.TRANSCRIPT_FILTER).send_keys("no-such-line")     # no Enter, no blur
    wait_text(dash_duo, ids.DEBUG_LINES, "(no line contains 'no-such-line')")
    wait_text(dash_duo, ids.TRANSCRIPT, "(no line contains 'no-such-line')")


_IN_VIEW_JS = """
const n = cy.nodes().filter(x => ['layer', 'block'].includes(x.data('kind')) &&
                                 (x.data('members') || '').indexOf('|' + arguments[1] + '|') >= 0)[0];
if (!n) return null;
const p = n.renderedPosition();
return p.x > 0 && p.y > 0 && p.x < cy.width() && p.y < cy.height();
"""


def test_deep_link_to_a_layer_deep_in_a_big_net_shows_it(dash_duo, tmp_path):
    from benchmarks import netgen
    (tmp_path / "r50.prototxt").write_text(netgen.resnet_prototxt(50, fillers=False))
    app = create_app(InspectorConfig(model_root=str(tmp_path)))
    dash_duo.start_server(app)
    dash_duo.driver.get(dash_duo.server_url + "/?model=r50.prototxt&layer=res5c_branch2b")
    wait_text(dash_duo, ids.LOAD_STATUS, "ResNet-50", timeout=120)
    wait_text(dash_duo, ids.DETAILS, "res5c_branch2b", timeout=120)
    # the layer sits near the end of the net: the first view opens on it (or on the folded block
    # holding it), not on the net's top
    wait_for(lambda: cy_eval(dash_duo, _IN_VIEW_JS, "res5c_branch2b"), timeout=120,
             what="res5c_branch2b inside the visible graph")
    # the link names a layer (no open=): the blocks around it open, as a search pick opens them,
    # so the layer itself is drawn and selected, and the address says which blocks are open
    wait_for(lambda: cy_eval(dash_duo, """
const n = cy.nodes().filter(x => x.data('kind') === 'layer' && x.data('name') === arguments[1]);
return n.length === 1 && n[0].hasClass('sel');""", "res5c_branch2b"), timeout=120, what="the layer itself, selected")
    wait_for(lambda: "open=" in unquote(dash_duo.driver.current_url)
             and "res5c" in unquote(dash_duo.driver.current_url).split("open=")[1], what="open= in the address")


def test_cut_status_line_keeps_its_full_text_as_tooltip(dash_duo):
    _start(dash_duo)
    wait_for(lambda: "LeNetDigits" in (dash_duo.find_element("#" + ids.LOAD_STATUS).get_attribute("title") or ""),
             what="the net's status as the tooltip")
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    wait_for(lambda: "ForwardFromTo(0, 8)" in (dash_duo.find_element("#" + ids.RUN_MESSAGE).get_attribute("title")
                                                or ""), what="the run message as the tooltip")


def test_apply_inputs_answers_beside_its_button(dash_duo, tmp_path):
    import numpy as np
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((2, 2), np.float32))
    _start(dash_duo)
    _tab(dash_duo, "Inputs")
    dash_duo.driver.find_element("css selector", "#%s input[type=file]" % ids.UPLOAD_NPY).send_keys(str(bad))
    wait_text(dash_duo, ids.INPUT_FILE_STATUS, "bad.npy")
    _click(dash_duo, ids.APPLY_INPUTS)
    # the refusal is in the Inputs panel, not only in the (far, cut short) status line
    wait_text(dash_duo, ids.INPUT_FILE_STATUS, "does not fit the input blob")


def _choose_job(dash_duo, label):
    dash_duo.find_element("#" + ids.JOB_ACTION).click()
    opt = wait_for(lambda: [o for o in dash_duo.driver.find_elements(
        "css selector", ".dash-dropdown-content .dash-dropdown-option") if o.text == label], what=label)
    opt[0].click()


def test_long_action_status_ends_on_how_it_ended(dash_duo):
    _start(dash_duo)                              # LeNet, no solver
    _tab(dash_duo, "Training")
    # solver iterations without a solver: the status line says why nothing ran (it stayed empty)
    _click(dash_duo, ids.JOB_RUN)
    wait_for(lambda: "solver" in text_of(dash_duo, ids.JOB_STATUS).lower(), timeout=120,
             what="the refusal in the job status")
    # a full-records pass: the status ends on the pass's result, not on its last progress line
    _choose_job(dash_duo, "Forward (full records)")
    _click(dash_duo, ids.JOB_RUN)
    wait_text(dash_duo, ids.JOB_STATUS, "ForwardFromTo(0, 8)", timeout=120)
    assert "/ 9 —" not in text_of(dash_duo, ids.JOB_STATUS)


def test_a_search_hit_picked_with_the_mouse_closes_the_list(dash_duo):
    _start(dash_duo)
    box = dash_duo.find_element("#" + ids.SEARCH)
    box.send_keys("ip2")
    css = "#%s li.search-hit" % ids.SEARCH_RESULTS
    hit = wait_for(lambda: [h for h in dash_duo.driver.find_elements("css selector", css)
                            if h.get_attribute("data-kind") == "layer" and h.get_attribute("data-name") == "ip2"],
                   what="the ip2 hit")[0]
    hit.click()
    wait_text(dash_duo, ids.DETAILS, "InnerProduct")
    # the list no longer covers the graph (as after Enter)
    wait_for(lambda: not dash_duo.find_element("#" + ids.SEARCH_RESULTS).is_displayed(), what="the list to close")


def test_an_emptied_level_box_shows_the_loaded_level_again(dash_duo):
    from selenium.webdriver.common.keys import Keys
    _start(dash_duo)
    box = dash_duo.find_element("#" + ids.LEVEL)
    wait_for(lambda: box.get_attribute("value") == "0", what="level 0")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACKSPACE)
    box.send_keys(Keys.ENTER)
    # nothing to rebuild (still level 0), and the box says so instead of staying empty
    wait_for(lambda: dash_duo.find_element("#" + ids.LEVEL).get_attribute("value") == "0", what="level 0 again")
    assert "LeNetDigits" in text_of(dash_duo, ids.LOAD_STATUS)


def test_selection_buttons_are_off_until_something_is_selected(dash_duo):
    from browser_helpers import click_node, details_show
    _start(dash_duo)
    buttons = (ids.EXPAND, ids.COLLAPSE, ids.FIT_SELECTION)
    wait_for(lambda: all(not dash_duo.find_element("#" + b).is_enabled() for b in buttons),
             what="Expand / Collapse / Fit selection off with nothing selected")
    click_node(dash_duo, "conv1", until=details_show(dash_duo, "Convolution"))
    wait_for(lambda: all(dash_duo.find_element("#" + b).is_enabled() for b in buttons),
             what="the buttons on once a layer is selected")


def test_the_timeline_slider_tooltip_leaves_live_net_clickable(dash_duo):
    from selenium.webdriver.common.keys import Keys
    _start(dash_duo)
    _forward_twice(dash_duo)
    _tab(dash_duo, "Timeline")
    wait_text(dash_duo, ids.TIMELINE_INFO, "Live net (latest: step 1")
    handle = dash_duo.driver.find_element("css selector", "#%s [role=slider]" % ids.TIMELINE_SLIDER)
    handle.click()
    handle.send_keys(Keys.HOME)                 # scrubbed back: the handle keeps focus, its tooltip shows
    wait_text(dash_duo, ids.TIMELINE_INFO, "Showing step 0")
    # the button's own centre is the button, not the slider's tooltip over it
    on_top = dash_duo.driver.execute_script("""
        const b = document.getElementById(arguments[0]).getBoundingClientRect();
        const e = document.elementFromPoint(b.left + 8, b.top + b.height / 2);
        return e && e.closest('#' + arguments[0]) !== null;""", ids.TIMELINE_LIVE)
    assert on_top
    _click(dash_duo, ids.TIMELINE_LIVE)
    wait_text(dash_duo, ids.TIMELINE_INFO, "Live net")


def test_step_choices_show_their_whole_label(dash_duo):
    _start(dash_duo)
    _forward_twice(dash_duo)
    _tab(dash_duo, "Timeline")
    wait_text(dash_duo, ids.TIMELINE_INFO, "Live net (latest: step 1")
    # "0 ForwardFromTo(0, 8)" in a 110 px box read "0 Forwa…": the steps could not be told apart
    for id_ in (ids.TIMELINE_DIFF_A, ids.TIMELINE_DIFF_B):
        wait_for(lambda i=id_: "Forward" in text_of(dash_duo, i), what="a step in %s" % id_)
        cut = dash_duo.driver.execute_script("""
            const box = document.getElementById(arguments[0]);
            return [...box.querySelectorAll('*')].some(e => (e.innerText || '').includes('Forward') &&
                                                       e.scrollWidth > e.clientWidth + 1);""", id_)
        assert not cut, id_


def test_mobilenet_without_weights_names_the_unfilled_batchnorm_first(dash_duo, tmp_path):
    # QA: MobileNet without weights, Forward on random input: the red alert named conv5_2/dw while
    # the cause is BatchNorm statistics never filled (each multiplies by 1/sqrt(eps))
    from benchmarks import netgen
    # the deploy file's own fillers (msra), no .caffemodel: BatchNorm statistics stay unfilled
    text = netgen.mobilenet_prototxt(batch=1, image=64).replace(
        "convolution_param {", 'convolution_param {\n    weight_filler { type: "msra" }')
    (tmp_path / "mobilenet.prototxt").write_text(text)
    app = create_app(InspectorConfig(model_root=str(tmp_path)))
    dash_duo.start_server(app)
    dash_duo.driver.get(dash_duo.server_url + "/?model=mobilenet.prototxt")
    wait_text(dash_duo, ids.LOAD_STATUS, "layers", timeout=60)
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.NAN_TEXT, "Root cause: BatchNorm statistics never filled", timeout=60)
    alert = text_of(dash_duo, ids.NAN_TEXT)
    assert alert.index("Root cause") < alert.index("First NaN/Inf at layer")
    _tab(dash_duo, "Findings")
    wait_text(dash_duo, ids.HEALTH_TABLE, "root_cause", timeout=30)
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "root_cause.png"))

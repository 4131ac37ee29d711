"""Browser tests of the debugger's workflows (issue 14), in headless Chromium:
a solver run with live curves cancelled midway, .npy download, compare two
runs, scrub back in the timeline, a breakpoint hit on a net built to overflow."""
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from browser_helpers import click_id as _click
from browser_helpers import click_node, cy_eval, details_show, settle, text_of, wait_for, wait_text
from browser_helpers import open_tab as _tab
from browser_helpers import start_app as _start
from inspector_testlib import LENET

from inspector import ids

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]

SOLVER = """net: "%s"
base_lr: 0.01
momentum: 0.9
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 10
max_iter: 10000
test_iter: 1
test_interval: 5
"""


def _npy(path):
    """[the downloaded array] once the whole file is there (None while it is not)."""
    try:
        return [np.load(path)] if path.is_file() else None
    except (OSError, ValueError, EOFError):      # still being written
        return None


def _figure_points(dash_duo, id_):
    """Points of the first trace of the Plotly figure in #id_ (0 while none)."""
    return dash_duo.driver.execute_script("""
        const gd = document.getElementById(arguments[0]);
        const p = gd && gd.querySelector('.js-plotly-plot');
        if (!p || !p.data || !p.data.length || !p.data[0].x) return 0;
        return p.data[0].x.length;""", id_) or 0


def _health_rows(dash_duo):
    """The Findings tab's health table as lists of cell texts (None while it has no row)."""
    rows = dash_duo.driver.execute_script("""
        const t = document.getElementById(arguments[0]);
        return t ? Array.from(t.querySelectorAll('tbody tr')).map(
            r => Array.from(r.querySelectorAll('td')).map(c => c.innerText.trim())) : [];""", ids.HEALTH_TABLE)
    return rows or None


def _only_lines_with(text, needle):
    """The lines of ``text`` when every one holds ``needle`` (else None)."""
    lines = text.splitlines()
    return lines if lines and all(needle in l for l in lines) else None


def _set_input(dash_duo, id_, value):
    from selenium.webdriver.common.keys import Keys
    el = dash_duo.find_element("#" + id_)
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.BACKSPACE)
    el.send_keys(str(value))


def test_solver_run_live_curves_cancelled_midway(dash_duo, tmp_path):
    solver = tmp_path / "solver.prototxt"
    solver.write_text(SOLVER % LENET)
    app = _start(dash_duo, model=str(LENET), solver=str(solver), phase="TRAIN")
    _tab(dash_duo, "Training")
    _set_input(dash_duo, ids.JOB_ITERATIONS, 2000)
    _click(dash_duo, ids.JOB_RUN)
    # live: the curves grow while the run goes on, and the progress says so
    first = wait_for(lambda: _figure_points(dash_duo, ids.TRAIN_CURVES) >= 3, timeout=120, what="live curves")
    assert first
    n1 = _figure_points(dash_duo, ids.TRAIN_CURVES)
    wait_for(lambda: _figure_points(dash_duo, ids.TRAIN_CURVES) > n1 + 2, timeout=120, what="curves growing")
    assert "solver run:" in text_of(dash_duo, ids.JOB_STATUS)
    assert dash_duo.find_element("#" + ids.JOB_RUN).get_attribute("disabled")
    # the page stays responsive: another tab's callbacks answer while the run goes on
    _tab(dash_duo, "Findings")
    # every iteration warns the same (lr 0.01 on LeNet: update/weight > 0.01): the Findings
    # table lists each place once, with how many steps found it (hundreds of repeated rows
    # made the page spend seconds re-rendering them at each update while the run went on)
    rows = wait_for(lambda: _health_rows(dash_duo), timeout=120, what="the health findings")
    places = [tuple(r[1:4]) for r in rows]
    assert len(places) == len(set(places)), rows
    assert any(int(r[4]) > 1 for r in rows), rows
    dash_duo.find_element("#" + ids.TRANSCRIPT_FILTER).send_keys("Iteration\n")
    # the unfiltered transcript (the tab's first answer) holds "Iteration 0" too: wait for the
    # answer to the filter, which supersedes it
    lines = wait_for(lambda: _only_lines_with(text_of(dash_duo, ids.TRANSCRIPT), "Iteration"), timeout=120,
                     what="the transcript filtered to 'Iteration' lines")
    assert any(l.startswith("Iteration 0 ") or " Iteration 0 " in l for l in lines), lines[:5]
    assert any(", loss = " in l for l in lines) and any(", lr = " in l for l in lines)
    _tab(dash_duo, "Training")
    _click(dash_duo, ids.JOB_CANCEL)
    wait_text(dash_duo, ids.RUN_MESSAGE, "cancelled after", timeout=120)
    msg = text_of(dash_duo, ids.RUN_MESSAGE)
    done = int(msg.split("cancelled after ")[1].split(" ")[0])
    assert 3 <= done < 2000, msg
    s = next(iter(app.inspector.store._sessions.values()))      # the one tab's session
    h = s.loaded.training
    # the run's thread has ended (so nothing can add to the history any more) ...
    wait_for(lambda: not app.job_manager.running_jobs(), timeout=120, what="the run's thread to end")
    n_done = len(h.train)
    # ... having done exactly the iterations the message reports: none went on after Cancel
    assert n_done == done and s.job is None, (n_done, done)
    assert h.train[-1].loss < h.train[0].loss           # it learned the batch
    assert h.test, "test_interval 5: the test net ran"
    wait_for(lambda: _figure_points(dash_duo, ids.TRAIN_CURVES) >= n_done, timeout=120, what="final curves")
    assert not dash_duo.find_element("#" + ids.JOB_RUN).get_attribute("disabled")
    dash_duo.driver.save_screenshot(str(tmp_path / "training.png"))
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        _tab(dash_duo, "Training")
        settle(dash_duo)
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "training.png"))


def test_npy_download_of_a_blob(dash_duo):
    app = _start(dash_duo)
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    click_node(dash_duo, "conv1", kind="blob", until=details_show(dash_duo, "mean |x|"))
    _click(dash_duo, ids.NPY_BUTTON)
    path = Path(dash_duo.download_path) / "conv1_data.npy"
    try:
        arr = wait_for(lambda: _npy(path), timeout=120, what="the .npy download")[0]
    except AssertionError as exc:       # say what did arrive, and what the page said
        raise AssertionError("%s; downloads: %s; details: %r; banner: %r" % (
            exc, sorted(os.listdir(path.parent)), text_of(dash_duo, ids.DETAILS)[:200],
            text_of(dash_duo, ids.ERROR_BANNER))) from None
    s = next(iter(app.inspector.store._sessions.values()))
    live = s.loaded.net.blobs["conv1"].data
    assert arr.shape == live.shape == (64, 20, 24, 24) and arr.dtype == np.float32
    assert np.array_equal(arr, live)


def test_compare_with_a_saved_run(dash_duo, tmp_path):
    """Compare this run with another run's records (a report JSON made here: the
    same net, inputs and weights but conv2's weights scaled): the page names
    conv2 as the first layer where they part and colours the graph by the
    relative difference."""
    from inspector_testlib import build_loaded

    from inspector.state import runner
    from inspector.state.sessions import Session
    app = _start(dash_duo)
    _click(dash_duo, ids.FORWARD_BACKWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "Forward + Backward")
    live = next(iter(app.inspector.store._sessions.values())).loaded.net
    other = Session(id="0" * 32)
    other.loaded = build_loaded(LENET)
    net = other.loaded.net
    for name, blobs in live.params.items():
        for dst, src in zip(net.params[name], blobs):
            dst.data[...] = src.data
    for name in ("data", "label"):
        net.blobs[name].data[...] = live.blobs[name].data
    net.params["conv2"][0].data[...] *= 1.5
    runner.forward_backward(other)
    report = tmp_path / "other_run.json"
    report.write_text(json.dumps(other.loaded.recorder.to_dict()))

    _tab(dash_duo, "Compare")
    upload = dash_duo.driver.find_element("css selector", "#%s input[type=file]" % ids.COMPARE_UPLOAD)
    upload.send_keys(str(report))
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "received", timeout=120)
    _click(dash_duo, ids.COMPARE_BUTTON)
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "part at layer", timeout=120)
    summary = text_of(dash_duo, ids.COMPARE_SUMMARY)
    assert "this run and other_run.json part at layer 'conv2'" in summary, summary
    table = text_of(dash_duo, ids.COMPARE_TABLE)
    assert "DIFFERS" in table and "conv1" not in table.split("DIFFERS")[0]
    # the graph is coloured by the relative difference
    wait_for(lambda: "relative difference" in text_of(dash_duo, ids.COLOUR_BY), timeout=120,
             what="the colouring switched to the comparison")
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        settle(dash_duo)
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "compare.png"))


def _session(app):
    return next(iter(app.inspector.store._sessions.values()))       # the one tab's session


def _slider_to(dash_duo, value):
    """Move the timeline slider to ``value`` with the keyboard, as a user would:
    Home, then Right arrow ``value - min`` times."""
    from selenium.webdriver.common.keys import Keys
    thumb = dash_duo.find_element("#%s [role=slider]" % ids.TIMELINE_SLIDER)
    thumb.click()
    thumb.send_keys(Keys.HOME)
    lo = int(thumb.get_attribute("aria-valuemin"))
    for _ in range(int(value) - lo):
        thumb.send_keys(Keys.ARROW_RIGHT)


def test_scrub_back_shows_a_step_as_it_was(dash_duo, tmp_path):
    from inspector.views import panel_models
    app = _start(dash_duo)
    # pin conv1 so the timeline keeps its arrays
    click_node(dash_duo, "conv1", kind="blob", until=details_show(dash_duo, "mean |x|"))
    _tab(dash_duo, "Timeline")
    _click(dash_duo, ids.PIN_BLOB)
    wait_text(dash_duo, ids.PIN_STATUS, "pinned conv1")
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    first = np.array(_session(app).loaded.net.blobs["conv1"].data)
    # new inputs (another seed), forward again: step 1
    _tab(dash_duo, "Inputs")
    _set_input(dash_duo, ids.INPUT_SEED, 7)
    _click(dash_duo, ids.APPLY_INPUTS)
    wait_text(dash_duo, ids.RUN_MESSAGE, "seed 7")
    _click(dash_duo, ids.FORWARD)
    wait_for(lambda: "ForwardFromTo(0, 8)" in text_of(dash_duo, ids.RUN_MESSAGE), what="the second forward")
    _tab(dash_duo, "Timeline")
    wait_text(dash_duo, ids.TIMELINE_INFO, "Live net (latest: step 1")
    tl = _session(app).loaded.timeline
    step0 = tl.blob_stats(0, "conv1", "data")
    live_mean = panel_models._fmt(float(np.abs(_session(app).loaded.net.blobs["conv1"].data).mean()))
    assert panel_models._fmt(step0.asum_mean) != live_mean
    # scrub back to step 0: the info line, the blob panel and the graph's records are step 0's
    _slider_to(dash_duo, 0)
    wait_text(dash_duo, ids.TIMELINE_INFO, "Showing step 0")
    assert _session(app).loaded.view_step == 0
    wait_text(dash_duo, ids.GRAPH_TITLE, "viewing step 0")       # the graph says it is not live
    _tab(dash_duo, "Details")
    wait_text(dash_duo, ids.DETAILS, "as recorded at step 0")
    assert panel_models._fmt(step0.asum_mean) in text_of(dash_duo, ids.DETAILS)
    from inspector.state import presenter
    with app.inspector.store.use(_session(app).id) as s:
        m = presenter.metrics(s.loaded)        # what the graph colours by: step 0's records
        assert m[1].data == pytest.approx(step0.asum_mean)
    # the pinned array of step 0 downloads as it was
    _click(dash_duo, ids.NPY_BUTTON)
    path = Path(dash_duo.download_path) / "conv1_data_step0.npy"
    assert np.array_equal(wait_for(lambda: _npy(path), timeout=120, what="the step-0 .npy download")[0], first)
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "timeline_scrubbed.png"))
    # the diff of the two steps names conv1, then back to the live net
    _tab(dash_duo, "Timeline")
    _click(dash_duo, ids.TIMELINE_DIFF_BUTTON)
    wait_text(dash_duo, ids.TIMELINE_DIFF, "conv1")
    assert "array (pinned)" in text_of(dash_duo, ids.TIMELINE_DIFF)
    _click(dash_duo, ids.TIMELINE_LIVE)
    wait_text(dash_duo, ids.TIMELINE_INFO, "Live net")
    assert _session(app).loaded.view_step is None
    wait_for(lambda: "viewing step" not in text_of(dash_duo, ids.GRAPH_TITLE), what="the badge gone")


OVERFLOW = """name: "Overflow"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 4 dim: 25 } } }
layer { name: "scale" type: "Power" bottom: "data" top: "x" power_param { scale: 3 } }
layer { name: "exp1" type: "Exp" bottom: "x" top: "e1" }
layer { name: "exp2" type: "Exp" bottom: "e1" top: "e2" }
layer { name: "half" type: "Power" bottom: "e2" top: "out" power_param { scale: 0.5 } }
"""


def test_breakpoint_hit_on_a_net_built_to_overflow(dash_duo, tmp_path):
    net = tmp_path / "overflow.prototxt"
    net.write_text(OVERFLOW)
    app = _start(dash_duo, model=str(net), phase="TEST")
    _tab(dash_duo, "Timeline")
    _set_input(dash_duo, ids.BREAK_TEXT, "nonfinite")
    _click(dash_duo, ids.BREAK_ADD)
    wait_text(dash_duo, ids.BREAK_STATUS, "added #1: nonfinite")
    _set_input(dash_duo, ids.BREAK_TEXT, "conv1.max_abs > 1")       # a blob this net lacks: refused, says why
    _click(dash_duo, ids.BREAK_ADD)
    wait_text(dash_duo, ids.BREAK_STATUS, "no blob, param or layer 'conv1'")
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "stopped after exp2")
    msg = text_of(dash_duo, ids.RUN_MESSAGE)
    assert "break: exp2: nonfinite" in msg and "e2 data" in msg
    wait_text(dash_duo, ids.BREAK_HIT, "break: exp2: nonfinite")
    wait_for(lambda: "| 1" in text_of(dash_duo, ids.BREAK_TABLE) or "\t1" in text_of(dash_duo, ids.BREAK_TABLE)
             or text_of(dash_duo, ids.BREAK_TABLE).rstrip().endswith("1"), what="hit count 1")
    # the layer that fired is selected in the graph and in view
    wait_for(lambda: cy_eval(dash_duo, """
        const n = cy.nodes().filter(x => (x.data('members') || '').indexOf('|exp2|') >= 0)[0];
        if (!n || !n.hasClass('sel')) return false;
        const p = n.renderedPosition();
        return p.x > 0 && p.y > 0 && p.x < cy.width() && p.y < cy.height();"""), what="exp2 selected and shown")
    s = _session(app)
    assert s.breakpoints.items[0].hit_count == 1
    ran = [l.layer for l in s.loaded.recorder.steps[-1].layers]
    assert ran == ["in", "scale", "exp1", "exp2"]                     # 'half' did not run
    assert s.loaded.timeline.last.hits[0].message == "break: exp2: nonfinite"
    # the alert names the source, with its inputs and the cause
    wait_text(dash_duo, ids.NAN_TEXT, "First NaN/Inf at layer exp2")
    _tab(dash_duo, "Findings")
    wait_text(dash_duo, ids.HEALTH_TABLE, "Exp overflowed float32")
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        _tab(dash_duo, "Timeline")
        settle(dash_duo)
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "breakpoint_hit.png"))
    # a watchpoint fires earlier; disabled, the range runs through
    _tab(dash_duo, "Timeline")
    _set_input(dash_duo, ids.BREAK_TEXT, "x.max_abs > 1")
    _click(dash_duo, ids.BREAK_ADD)
    wait_text(dash_duo, ids.BREAK_STATUS, "added #2")
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "stopped after scale")
    assert [b.hit_count for b in s.breakpoints.items] == [1, 1]
    for bp_id in (1, 2):
        dash_duo.select_dcc_dropdown("#" + ids.BREAK_SELECT, index=bp_id - 1)
        _click(dash_duo, ids.BREAK_TOGGLE)
        wait_text(dash_duo, ids.BREAK_STATUS, "#%d disabled" % bp_id)
    _click(dash_duo, ids.FORWARD)
    wait_for(lambda: "stopped" not in text_of(dash_duo, ids.RUN_MESSAGE)
             and "ForwardFromTo(0, 4)" in text_of(dash_duo, ids.RUN_MESSAGE), what="the full range")
    # issue 22: stopped on nonfinite, disabled, run to the end: the source is listed once
    _tab(dash_duo, "Findings")
    wait_text(dash_duo, ids.HEALTH_TABLE, "Carried on by 1 layer: half")
    assert text_of(dash_duo, ids.HEALTH_TABLE).count("Exp overflowed float32") == 1


def _key(dash_duo, *keys):
    """Keys pressed on the page (the focused element gets them, as from a keyboard)."""
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(dash_duo.driver).send_keys(*keys).perform()


def _message_after(dash_duo, before, needle, timeout=30):
    return wait_for(lambda: (lambda m: m if m != before and needle in m else None)(text_of(dash_duo, ids.RUN_MESSAGE)),
                    timeout, what="%r in the run message" % needle)


def test_continue_step_over_and_run_to_cursor_by_keys(dash_duo, tmp_path):
    """Issue 22: after a breakpoint stop, F10 steps over a folded block, F8 continues to the end
    of the range; Run to cursor (Ctrl+F10) goes on to the selected layer; the shortcuts are listed
    in an overlay opened with ? or the "Keyboard shortcuts" button."""
    from inspector_testlib import RESNET_TINY
    from selenium.webdriver.common.keys import Keys
    app = _start(dash_duo, model=str(RESNET_TINY), phase="TEST")
    overlay = dash_duo.find_element("#" + ids.HELP_OVERLAY)
    dash_duo.find_element("[aria-label='Keyboard shortcuts']").click()
    wait_for(overlay.is_displayed, what="the shortcuts overlay")
    assert "F8" in overlay.text and "Continue" in overlay.text and "Step over" in overlay.text
    _key(dash_duo, Keys.ESCAPE)
    wait_for(lambda: not overlay.is_displayed(), what="the overlay closed by Esc")
    dash_duo.find_element("h1.title").click()                # the focus off the button, on the page
    _key(dash_duo, "?")
    wait_for(overlay.is_displayed, what="the overlay opened by ?")
    _key(dash_duo, Keys.ESCAPE)
    wait_for(lambda: not overlay.is_displayed(), what="the overlay closed")
    assert dash_duo.find_element("[aria-label='Continue']").get_attribute("disabled")   # nothing stopped yet

    _tab(dash_duo, "Timeline")
    _set_input(dash_duo, ids.BREAK_TEXT, "layer=stem_relu")
    _click(dash_duo, ids.BREAK_ADD)
    wait_text(dash_duo, ids.BREAK_STATUS, "added #1")
    _click(dash_duo, ids.FORWARD)
    wait_text(dash_duo, ids.RUN_MESSAGE, "stopped after stem_relu")
    wait_for(lambda: not dash_duo.find_element("[aria-label='Continue']").get_attribute("disabled"),
             what="Continue enabled")
    assert "forward from stem_stem_relu_0_split to accuracy" in \
        dash_duo.find_element("[aria-label='Continue']").get_attribute("title")
    _click(dash_duo, ids.COLLAPSE_ALL)                   # the residual blocks folded: one node each
    wait_for(lambda: cy_eval(dash_duo, "return cy.nodes().filter(n => n.data('kind') === 'block').length;") == 2,
             what="the blocks folded")
    msg = text_of(dash_duo, ids.RUN_MESSAGE)
    _key(dash_duo, Keys.F10)                             # the split after stem_relu: one layer
    msg = _message_after(dash_duo, msg, "step: ForwardFromTo(6, 6)")
    _key(dash_duo, Keys.F10)                             # the folded block res1: ten layers, one step
    msg = _message_after(dash_duo, msg, "step over res1 (10 layers)")
    s = _session(app)
    assert [l.layer for l in s.loaded.recorder.steps[-1].layers][0] == "res1a" and s.cursor_forward == 17
    _key(dash_duo, Keys.F8)                              # Continue: on to the end of the range
    msg = _message_after(dash_duo, msg, "continue: ForwardFromTo(17, 33)")
    assert "stopped" not in msg and "loss" in msg
    wait_for(lambda: dash_duo.find_element("[aria-label='Continue']").get_attribute("disabled"),
             what="Continue disabled at the end")
    # Run to cursor: from the start it stops at the breakpoint on the way, then goes on to the cursor
    click_node(dash_duo, "fc", until=details_show(dash_duo, "InnerProduct"))
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(dash_duo.driver).key_down(Keys.CONTROL).send_keys(Keys.F10).key_up(Keys.CONTROL).perform()
    msg = _message_after(dash_duo, msg, "stopped after stem_relu")
    assert msg.startswith("run to cursor fc: ForwardFromTo(0, 30)")
    click_node(dash_duo, "fc", until=details_show(dash_duo, "InnerProduct"))
    _click(dash_duo, ids.RUN_TO)
    msg = _message_after(dash_duo, msg, "at the cursor: fc")
    assert msg.startswith("run to cursor fc: continue: ForwardFromTo(6, 33)")
    assert [b.id for b in s.breakpoints.items] == [1] and s.breakpoints.items[0].hit_count == 2
    _tab(dash_duo, "Timeline")
    wait_text(dash_duo, ids.TIMELINE_TABLE, "at the cursor: fc")
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        time.sleep(1.0)
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "continue_run_to_cursor.png"))
    _key(dash_duo, Keys.F8)
    msg = _message_after(dash_duo, msg, "continue: ForwardFromTo(31, 33)")


def test_forwards_on_three_images_read_apart_and_a_scrubbed_blob_offers_pin(dash_duo, tmp_path):
    """Issue 22: three forwards on three images are three different lines in the Timeline and the
    Diff and Compare lists (each names its image and its step number); scrubbed back, a blob whose
    arrays were not kept offers Pin in its value table."""
    from PIL import Image
    app = _start(dash_duo)
    _tab(dash_duo, "Inputs")
    for k, name in enumerate(("cat.png", "dog.png", "bird.png")):
        path = tmp_path / name
        Image.fromarray(np.full((28, 28), 60 * k + 20, np.uint8)).save(path)
        dash_duo.driver.find_element("css selector", "#%s input[type=file]" % ids.UPLOAD_IMAGE).send_keys(str(path))
        wait_text(dash_duo, ids.INPUT_FILE_STATUS, name)
        _click(dash_duo, ids.APPLY_INPUTS)
        wait_text(dash_duo, ids.INPUT_FILE_STATUS, "inputs set: image %s" % name)
        _click(dash_duo, ids.FORWARD)
        wait_for(lambda n=k + 1: _session(app).loaded.timeline is not None and len(_session(app).loaded.timeline) == n,
                 what="forward %d" % (k + 1))
    _tab(dash_duo, "Timeline")
    wait_text(dash_duo, ids.TIMELINE_TABLE, "image bird.png")
    table = text_of(dash_duo, ids.TIMELINE_TABLE)
    assert all("ForwardFromTo(0, 8) · image %s into data" % n in table for n in ("cat.png", "dog.png", "bird.png"))
    wait_text(dash_duo, ids.TIMELINE_DIFF_A, "#1 ForwardFromTo(0, 8) · image dog.png")    # the last two steps
    wait_text(dash_duo, ids.TIMELINE_DIFF_B, "#2 ForwardFromTo(0, 8) · image bird.png")
    _tab(dash_duo, "Compare")
    wait_text(dash_duo, ids.COMPARE_A, "#1 ForwardFromTo(0, 8) · image dog.png")
    # scrubbed back to the first step, a blob nobody pinned: its values were not kept, Pin is offered
    _tab(dash_duo, "Timeline")
    _slider_to(dash_duo, 0)
    wait_text(dash_duo, ids.TIMELINE_INFO, "Showing step 0")
    assert "image cat.png" in text_of(dash_duo, ids.TIMELINE_INFO)
    click_node(dash_duo, "conv1", kind="blob", until=details_show(dash_duo, "as recorded at step 0"))
    wait_text(dash_duo, ids.VALUE_TABLE, "kept statistics of conv1 only")
    assert "0×0" not in text_of(dash_duo, ids.VALUE_TABLE)
    pin = dash_duo.find_element("[aria-label='Pin']")
    wait_for(pin.is_displayed, what="the Pin button")
    pin.click()
    wait_text(dash_duo, ids.VALUE_TABLE, "it is pinned now")
    wait_for(lambda: not pin.is_displayed(), what="Pin done")
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        _tab(dash_duo, "Timeline")
        time.sleep(1.0)
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "steps_tell_apart.png"))



def test_continue_a_solver_run_stopped_at_a_breakpoint(dash_duo, tmp_path):
    """Issue 22: a solver run (Training tab) stopped by a breakpoint inside an iteration; Continue
    finishes that iteration after the layer that stopped and runs the rest of the run as a job."""
    solver = tmp_path / "solver.prototxt"
    solver.write_text(SOLVER % LENET)
    app = _start(dash_duo, model=str(LENET), solver=str(solver), phase="TRAIN")
    _tab(dash_duo, "Timeline")
    _set_input(dash_duo, ids.BREAK_TEXT, "layer=ip2")
    _click(dash_duo, ids.BREAK_ADD)
    wait_text(dash_duo, ids.BREAK_STATUS, "added #1")
    _tab(dash_duo, "Training")
    _set_input(dash_duo, ids.JOB_ITERATIONS, 3)
    _click(dash_duo, ids.JOB_RUN)
    wait_text(dash_duo, ids.RUN_MESSAGE, "stopped in forward after ip2", timeout=60)
    s = _session(app)
    assert int(s.loaded.solver.iter) == 0 and s.paused["remaining"] == 2
    continue_btn = dash_duo.find_element("[aria-label='Continue']")
    wait_for(lambda: "the solver run after ip2 (forward), 2 more iteration" in continue_btn.get_attribute("title"),
             what="Continue's tooltip")
    continue_btn.click()                                          # on into the same iteration's backward
    wait_text(dash_duo, ids.RUN_MESSAGE, "stopped in backward after ip2", timeout=60)
    assert int(s.loaded.solver.iter) == 0
    _tab(dash_duo, "Timeline")
    dash_duo.select_dcc_dropdown("#" + ids.BREAK_SELECT, index=0)
    _click(dash_duo, ids.BREAK_TOGGLE)
    wait_text(dash_duo, ids.BREAK_STATUS, "#1 disabled")
    continue_btn.click()                                          # the rest of the run, no more hits
    wait_text(dash_duo, ids.RUN_MESSAGE, "continue: solver run: 3 iterations", timeout=90)
    assert int(s.loaded.solver.iter) == 3 and s.paused is None
    assert len(s.loaded.training.train) == 3



def test_compare_tab_with_an_onnx_port(dash_duo, tmp_path):
    # "this net vs an ONNX model": the page's own net exported, ip1's weights changed in the file
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import numpy_helper

    import engine.ports as ports
    app = _start(dash_duo)
    model = onnx.load_from_string(ports.export_onnx_bytes(_session(app).loaded.net))
    for init in model.graph.initializer:
        if init.name == "ip1/weight":
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.1, init.name))
    port = tmp_path / "lenet_port.onnx"
    port.write_bytes(model.SerializeToString())
    _tab(dash_duo, "Compare")

    def upload():
        if str(_session(app).uploads.get("compare", "")).endswith(".onnx"):
            return True
        try:
            dash_duo.driver.find_element("css selector", "#%s input[type=file]" % ids.COMPARE_UPLOAD).send_keys(
                str(port))
        except Exception:     # noqa: BLE001 - stale while the tab re-renders
            pass
        return False
    wait_for(upload, timeout=120, what="the port received")
    wait_for(lambda: "ONNX model" in dash_duo.driver.execute_script(
        "return document.getElementById(arguments[0]).innerText;", ids.COMPARE_KIND), timeout=60,
        what="the ONNX comparison chosen")
    dash_duo.driver.execute_script("document.getElementById(arguments[0]).click();", ids.COMPARE_BUTTON)
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "ip1", timeout=120)
    assert "departs" in text_of(dash_duo, ids.COMPARE_TABLE)
    assert "ip1" in text_of(dash_duo, ids.COMPARE_SUMMARY).split("diagnosis")[0]      # the verdict names it
    # the graph is coloured by the relative difference
    wait_for(lambda: "relative difference" in text_of(dash_duo, ids.COLOUR_BY), timeout=120,
             what="the colouring switched to the comparison")
    if os.environ.get("INSPECTOR_SCREENSHOTS"):
        settle(dash_duo)
        dash_duo.driver.save_screenshot(os.path.join(os.environ["INSPECTOR_SCREENSHOTS"], "compare_onnx.png"))

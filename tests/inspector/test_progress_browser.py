"""Where the page waits on the server (issue 35, item 7: a first click's details, a search
pick's, a Forward on a big net, the graph redrawn after it, a comparison, a file the server
writes: a report, an ONNX model, an SVG), it says so at once: a note
while the server works, gone when the answer is there.  The server is held here (an event
the test sets once it has seen the note), so the test waits on what the page shows, never
on a duration."""
import threading

import pytest
from browser_helpers import click_id, click_node, details_show, open_tab, start_app, text_of, wait_for, wait_text

from inspector import ids
from inspector.callbacks import compare as compare_cb
from inspector.callbacks import details as details_cb
from inspector.callbacks import export as export_cb
from inspector.callbacks import image_export as image_cb
from inspector.callbacks import stepping as stepping_cb

pytestmark = pytest.mark.browser


def _shown(dash_duo, css):
    return dash_duo.driver.execute_script("""
        const e = document.querySelector(arguments[0]);
        if (!e || !e.offsetParent) { return false; }
        const s = getComputedStyle(e);
        return s.display !== 'none' && s.visibility !== 'hidden' && parseFloat(s.opacity) > 0.5;""", css)


def _held(monkeypatch, module, name):
    """``module.name`` made to wait for the returned event before it answers."""
    release = threading.Event()
    real = getattr(module, name)

    def held(*args, **kw):
        release.wait(60)            # a hang guard: the test sets it as soon as it saw the note
        return real(*args, **kw)
    monkeypatch.setattr(module, name, held)
    return release


def test_the_page_says_it_is_waiting_for_details_and_for_a_run(dash_duo, monkeypatch):
    start_app(dash_duo)
    release = _held(monkeypatch, details_cb, "details")
    click_node(dash_duo, "conv1")
    wait_for(lambda: _shown(dash_duo, "#%s .recomputing" % ids.DETAILS_LOADING), what="the details' loading note")
    assert "loading the details" in text_of(dash_duo, ids.DETAILS_LOADING)
    release.set()
    wait_for(details_show(dash_duo, "Convolution"), what="conv1's details")
    wait_for(lambda: not _shown(dash_duo, "#%s .recomputing" % ids.DETAILS_LOADING), what="the note gone")

    release = _held(monkeypatch, stepping_cb, "act")
    click_id(dash_duo, ids.FORWARD)
    wait_for(lambda: _shown(dash_duo, "#" + ids.RUN_BUSY), what="the run's progress note")
    assert "running" in text_of(dash_duo, ids.RUN_BUSY)
    release.set()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 8)")
    wait_for(lambda: not _shown(dash_duo, "#" + ids.RUN_BUSY), what="the note gone once it ran")

    # a blob's charts (histogram, feature maps, values): drawn by the server, said so meanwhile
    release = _held(monkeypatch, details_cb, "blob_view")
    click_node(dash_duo, "pool1", kind="blob")
    wait_for(lambda: _shown(dash_duo, "#" + ids.BLOB_BUSY), what="the blob charts' progress note")
    release.set()
    wait_for(lambda: not _shown(dash_duo, "#" + ids.BLOB_BUSY), what="the note gone once they are drawn")


def test_the_page_says_it_is_comparing(dash_duo, monkeypatch):
    # a comparison runs the net (and a port) layer by layer: the Compare tab says so at once
    start_app(dash_duo)
    open_tab(dash_duo, "Compare")
    release = _held(monkeypatch, compare_cb, "compare")
    click_id(dash_duo, ids.COMPARE_BUTTON)
    wait_for(lambda: _shown(dash_duo, "#" + ids.COMPARE_BUSY), what="the comparison's progress note")
    assert "comparing" in text_of(dash_duo, ids.COMPARE_BUSY)
    release.set()
    wait_text(dash_duo, ids.COMPARE_SUMMARY, "the timeline needs two steps")      # nothing has run yet
    wait_for(lambda: not _shown(dash_duo, "#" + ids.COMPARE_BUSY), what="the note gone once it answered")


def test_the_page_says_it_is_writing_a_report_an_onnx_model_an_svg(dash_duo, monkeypatch):
    # each takes the server a second or more on a big net (GoogLeNet: ONNX export 1.3 s, HTML report 1.5 s)
    start_app(dash_duo)
    for module, name, click, note, words in (
            (export_cb, "report", (ids.REPORT_BUTTON,), ids.REPORT_BUSY, "making the report"),
            (image_cb, "onnx_download", (ids.ONNX_SAVE,), ids.ONNX_BUSY, "exporting ONNX"),
            (image_cb, "svg_download", (ids.IMAGE_FORMAT + " input[value='svg']", ids.IMAGE_SAVE), ids.IMAGE_BUSY,
             "saving the image")):
        release = _held(monkeypatch, module, name)
        if module is image_cb and not dash_duo.find_element("#" + ids.SAVE_MENU).get_attribute("open"):
            dash_duo.find_element("#%s summary" % ids.SAVE_MENU).click()
        for c in click:
            dash_duo.find_element("#" + c).click()
        css = "#" + note
        wait_for(lambda: _shown(dash_duo, css), what="the note %r" % words)   # noqa: B023 - waited on here
        assert words in text_of(dash_duo, note)
        release.set()
        wait_for(lambda: not _shown(dash_duo, css), what="the note %r gone once written" % words)  # noqa: B023

"""Where the page waits on the server (issue 35, item 7: a first click's details, a search
pick's, a Forward on a big net, the graph redrawn after it), it says so at once: a note
while the server works, gone when the answer is there.  The server is held here (an event
the test sets once it has seen the note), so the test waits on what the page shows, never
on a duration."""
import threading

import pytest
from browser_helpers import click_id, click_node, details_show, start_app, text_of, wait_for, wait_text

from inspector import ids
from inspector.callbacks import details as details_cb
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

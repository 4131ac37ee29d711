"""A fresh tab draws its net with the page's first render (inspector/callbacks/first_view.py),
as a user sees it in Chromium: the graph and the load bar are there, the side panels fill in
after it, the first load does not load the net again; a reload of a tab that opened another net
goes on with that net (no default net drawn into it, no session made for it); a deep link
still opens what it names."""
import time

import pytest
from browser_helpers import ROOT, click_node, details_show, open_tab, text_of, wait_for, wait_text

from inspector import create_app, ids
from inspector.config import InspectorConfig
from inspector.state.netstate import initial_spec

pytestmark = pytest.mark.browser


def _label(folder):
    from inspector.config import BUNDLED_EXAMPLES
    return next(label for label, rel, _phase in BUNDLED_EXAMPLES if rel.startswith(folder + "/"))


def _start(dash_duo):
    app = create_app(InspectorConfig(model_root=str(ROOT), prebuild=True))
    ctx = app.inspector
    end = time.monotonic() + 120
    while not ctx.spares.ready(initial_spec(ctx)):       # the default net is built ahead, as `python app.py` does
        assert time.monotonic() < end, "the default net was never built ahead"
        time.sleep(0.1)
    dash_duo.start_server(app)
    return app


def _sid(dash_duo):
    return dash_duo.driver.execute_script("return JSON.parse(window.sessionStorage.getItem('session-id'))")


def _drawn(dash_duo):
    return wait_for(lambda: dash_duo.driver.execute_script("return window.inspectorGraphDrawn || null"),
                    timeout=60, what="the graph's first view")


def _range_options(dash_duo):
    return dash_duo.driver.execute_script(
        "const d = document.getElementById(arguments[0]); return d ? d.innerText : '';", ids.START)


def test_a_new_tab_comes_with_its_net_drawn_and_the_panels_follow(dash_duo):
    app = _start(dash_duo)
    _drawn(dash_duo)
    wait_text(dash_duo, ids.LOAD_STATUS, "LeNetDigits")
    assert "LeNetDigits" in text_of(dash_duo, ids.GRAPH_TITLE)
    sid = _sid(dash_duo)
    session = app.inspector.store.get(sid)
    assert session is not None and session.loaded.net.name == "LeNetDigits"
    # the net went in with the page: the page's first load callback loaded nothing again
    wait_for(lambda: (session.first_view or {}).get("load_done"), timeout=60, what="the first load callback")
    assert session.net_version == 1 and session.first_view.get("graph_done")
    assert dash_duo.driver.execute_script("return document.cookie").find("inspector-tab=new") >= 0
    # the page asked for its layout (and the callback list) from its first lines, once: the
    # renderer took those answers, it did not ask again (one layout, one session)
    asked = dash_duo.driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)"
        ".filter(p => p.endsWith('/_dash-layout') || p.endsWith('/_dash-dependencies'))")
    assert sorted(asked) == ["/_dash-dependencies", "/_dash-layout"], asked
    assert len(app.inspector.store) == 1
    # no core-js polyfill bundle: regenerator's runtime, which the lazy components (the
    # dropdowns, the uploads) call as a global, comes from assets/vendor
    scripts = dash_duo.driver.execute_script(
        "return Array.from(document.scripts).map(s => s.src).filter(s => s)")
    assert not [s for s in scripts if "polyfill" in s], scripts
    assert dash_duo.driver.execute_script("return typeof window.regeneratorRuntime.mark") == "function"
    # the panels follow the graph: the range lists, the findings, a click's details
    wait_for(lambda: "0 digits" in _range_options(dash_duo), timeout=60, what="the Start list")
    open_tab(dash_duo, "Findings")
    wait_for(lambda: text_of(dash_duo, ids.HEALTH_TABLE).strip(), timeout=60, what="the findings")
    click_node(dash_duo, "conv1", until=details_show(dash_duo, "conv1"))
    assert "Convolution" in text_of(dash_duo, ids.DETAILS)
    # and the page steps as always
    dash_duo.find_element("#" + ids.STEP_FORWARD).click()
    wait_text(dash_duo, ids.RUN_MESSAGE, "ForwardFromTo(0, 0)")
    # nothing went wrong in the page's scripts meanwhile (a lazy component without regenerator's
    # runtime throws 'regeneratorRuntime is not defined')
    errors = [e for e in dash_duo.driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors


def test_a_reloaded_tab_goes_on_with_its_own_net(dash_duo):
    app = _start(dash_duo)
    _drawn(dash_duo)
    sid = _sid(dash_duo)
    wait_for(lambda: "example=lenet" in dash_duo.driver.current_url, timeout=60, what="the address")
    dash_duo.select_dcc_dropdown("#" + ids.EXAMPLE, value=_label("resnet_tiny"))
    wait_text(dash_duo, ids.LOAD_STATUS, "TinyResNet")
    wait_for(lambda: "example=resnet_tiny" in dash_duo.driver.current_url, timeout=60, what="the address")
    store = app.inspector.store
    net = store.get(sid).loaded.net
    sessions = len(store)
    dash_duo.driver.refresh()
    _drawn(dash_duo)
    wait_text(dash_duo, ids.LOAD_STATUS, "TinyResNet")
    assert "TinyResNet" in text_of(dash_duo, ids.GRAPH_TITLE)
    assert _sid(dash_duo) == sid and store.get(sid).loaded.net is net
    assert len(store) == sessions                      # the reload's page was not sent with a net of its own
    assert "inspector-tab=returning" in dash_duo.driver.execute_script("return document.cookie")


def test_a_deep_link_opens_what_it_names(dash_duo):
    _start(dash_duo)
    dash_duo.driver.get(dash_duo.server_url + "/?example=resnet_tiny&layer=res1a")
    wait_text(dash_duo, ids.LOAD_STATUS, "TinyResNet")
    wait_text(dash_duo, ids.DETAILS, "res1a")
    assert "TinyResNet" in text_of(dash_duo, ids.GRAPH_TITLE)

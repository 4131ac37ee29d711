"""A fresh tab's page comes with its default net loaded and drawn (inspector/callbacks/first_view.py):
what the layout carries equals what the load and graph callbacks give a new session, the page's
first load and graph callbacks then change nothing (once), and a tab that returns with its own
session, an address that names something, or a net not built ahead yet get the plain page."""
import re
import time

import pytest
from inspector_testlib import LENET

from inspector import create_app, ids
from inspector.callbacks.graph import first_graph_done, render
from inspector.callbacks.load import first_load_done, handle_load_full
from inspector.config import InspectorConfig
from inspector.layout.common import prop_of, with_props
from inspector.state.netstate import initial_spec


@pytest.fixture(scope="module")
def app():
    return create_app(InspectorConfig(model=LENET, prebuild=True))


def _ready(ctx):
    """Wait until the default net is built ahead (again: each first view takes it)."""
    end = time.monotonic() + 120
    while not ctx.spares.ready(initial_spec(ctx)):
        assert time.monotonic() < end, "the default net was never built ahead"
        time.sleep(0.05)


def _layout(app, referrer="http://127.0.0.1:8050/", cookie=None, path="/_dash-layout"):
    headers = {"Referer": referrer} if referrer else {}
    if cookie:
        headers["Cookie"] = "inspector-tab=" + cookie
    _ready(app.inspector)
    with app.server.test_request_context(path, headers=headers):
        return app.layout()


def _view_args(tree):
    return (prop_of(tree, ids.RUN_VERSION, "data"), prop_of(tree, ids.COLOUR_BY, "value"),
            prop_of(tree, ids.BLOB_MODE, "value"), prop_of(tree, ids.GRAPH_OPTIONS, "value"),
            prop_of(tree, ids.EXPANDED_BLOCKS, "data"))


def test_a_new_tab_gets_its_net_drawn_with_the_page(app):
    tree = _layout(app)
    sid = prop_of(tree, ids.SESSION, "data")
    ctx = app.inspector
    session = ctx.store.get(sid)
    assert session is not None and session.loaded is not None and session.loaded.net.name == "LeNetDigits"
    version = prop_of(tree, ids.NET_VERSION, "data")
    assert version == session.net_version >= 1
    assert "LeNetDigits" in str(prop_of(tree, ids.LOAD_STATUS, "children"))
    assert prop_of(tree, ids.PHASE, "value") == session.loaded.spec.phase

    # what it carries is what the callbacks draw for a new session of the same net
    other = "f" * 32
    handle_load_full(ctx, other, None, search="")
    args = _view_args(tree)
    els, title, _legend, meta = render(ctx, other, *args[1:])
    carried = prop_of(tree, ids.GRAPH, "elements")
    assert len(carried) == len(els) > 10
    assert [e["data"]["id"] for e in carried] == [e["data"]["id"] for e in els]
    assert [e.get("position") for e in carried] == [e.get("position") for e in els]
    assert prop_of(tree, ids.GRAPH_TITLE, "children") == title
    got = prop_of(tree, ids.GRAPH_META, "data")
    assert got["version"] == version and got["n"] == meta["n"] and got["net"].endswith("-%d" % version)

    # the page's first load and graph callbacks find the work done, once
    assert first_load_done(ctx, sid, "")
    assert not first_load_done(ctx, sid, "")
    assert not first_graph_done(ctx, sid, (1, *args[1:]))          # another run version: a drawing
    assert first_graph_done(ctx, sid, args)
    assert not first_graph_done(ctx, sid, args)


def test_the_first_load_is_done_only_for_the_plain_address(app):
    tree = _layout(app)
    sid = prop_of(tree, ids.SESSION, "data")
    assert not first_load_done(app.inspector, sid, "?layer=conv1")   # the address asks for more: a load
    assert first_load_done(app.inspector, sid, "?")


@pytest.mark.parametrize("case", ["returning tab", "address", "no request", "index page"])
def test_other_tabs_get_the_plain_page(app, case):
    kw = {"returning tab": dict(cookie="returning"),
          "address": dict(referrer="http://127.0.0.1:8050/?model=x.prototxt&layer=conv1"),
          "index page": dict(path="/")}.get(case)
    if case == "no request":
        tree = app.layout()
    else:
        tree = _layout(app, **kw)
    sid = prop_of(tree, ids.SESSION, "data")
    assert prop_of(tree, ids.NET_VERSION, "data") == 0
    assert prop_of(tree, ids.GRAPH, "elements") == []
    assert app.inspector.store.get(sid) is None            # no net was loaded for it
    assert not first_load_done(app.inspector, sid, "")


def test_a_new_tab_cookie_still_gets_the_first_view(app):
    tree = _layout(app, cookie="new")
    assert prop_of(tree, ids.NET_VERSION, "data") >= 1 and prop_of(tree, ids.GRAPH, "elements")


def test_no_net_built_ahead_no_first_view():
    app = create_app(InspectorConfig(model=LENET, prebuild=False))
    with app.server.test_request_context("/_dash-layout", headers={"Referer": "http://127.0.0.1:8050/"}):
        tree = app.layout()
    assert prop_of(tree, ids.NET_VERSION, "data") == 0 and prop_of(tree, ids.GRAPH, "elements") == []


def test_a_tab_driven_as_the_browser_drives_it(serve):
    """Through Dash's own dispatch (benchmarks/load_test.py's Tab, which does what the page's
    renderer and graph.js do): the page's first load callback answers "no update", the panels
    then list the net's layers, and the next load is a load."""
    srv = serve(prebuild=True)
    _ready(srv.app.inspector)
    tab = srv.tab()                      # checks the status and the range lists name LeNetDigits's layers
    version = tab.props["net-version.data"]
    assert version >= 1 and tab.props.get("net-graph.elements")
    assert tab.came_drawn                                 # the first load callback changed nothing
    assert srv.stats.errors == 0, (srv.stats.violations, srv.stats.banners, srv.stats.http_errors)
    out = tab.trigger("phase.value", "TEST")             # a real load afterwards
    assert out["net-version.data"] == version + 1
    assert "TEST" in str(out.get("load-status.children"))


def test_with_props_names_a_missing_component():
    from dash import html
    tree = html.Div([html.Div(id="a")])
    with pytest.raises(KeyError, match="'b'"):
        with_props(tree, {("a", "title"): "x", ("b", "title"): "y"})
    assert getattr(tree.children[0], "title", None) is None            # nothing set when one is missing
    with_props(tree, {("a", "title"): "x"})
    assert tree.children[0].title == "x"


def test_the_page_asks_for_its_layout_in_its_first_lines(app):
    """The page's head starts with assets/boot.inline.js, written into the page (not served
    as an asset, not after the styles and scripts): it marks the tab's kind and asks for the
    layout and the callback list while the scripts load, under the app's path prefix."""
    html = app.server.test_client().get("/").get_data(as_text=True)
    head = html[html.index("<head>"):html.index("</head>")]
    first = head.index("<script")
    assert first < head.find("<link") or head.find("<link") < 0
    assert head[first:].startswith('<script data-prefix="/">')
    boot = head[first:head.index("</script>", first)]
    assert "inspector-tab" in boot and "'_dash-layout', '_dash-dependencies'" in boot
    assert "boot.inline.js" not in html                          # not served as an asset as well
    assert html.count("<script") == html.count("</script>")


def test_the_early_layout_request_follows_the_path_prefix():
    from inspector.app import index_page
    page = index_page("<html><head><title>x</title></head><body></body></html>", "/apps/inspector/")
    assert '<script data-prefix="/apps/inspector/">' in page
    assert page.index("<script") < page.index("<title>")


def test_the_pages_own_scripts_are_in_the_page_and_no_unused_bundle_is(app):
    # six connections to the server: the layout and the callback list waited behind four
    # small script requests; dash_table's bundle came although the page has no DataTable
    from inspector.config import data_dir
    html = app.server.test_client().get("/").get_data(as_text=True)
    srcs = re.findall(r'<script src="([^"]+)"', html)
    assert srcs and not [s for s in srcs if "/assets/" in s or "dash_table" in s or "polyfill@" in s], srcs
    assets = sorted(p for p in data_dir("assets").rglob("*.js") if not p.name.endswith(".inline.js"))
    assert assets
    positions = []
    for p in assets:             # each written in whole, once, after cytoscape's bundle, before the renderer
        text = p.read_text(encoding="utf-8")
        assert html.count(text) == 1, p.name
        positions.append(html.index(text))
    assert html.index("dash_cytoscape") < min(positions) and max(positions) < html.index("dash_renderer")
    # in Dash's order (regenerator's runtime, which the renderer's lazy parts call, before it)
    assert positions == sorted(positions)


def test_a_script_that_cannot_stand_inline_stays_a_tag(tmp_path):
    from inspector.app import _ASSET_SCRIPT, _inline_script
    (tmp_path / "ok.js").write_text("var a = 1;")
    (tmp_path / "bad.js").write_text("var s = '</script>';")
    tags = ('<script src="/assets/ok.js?m=1"></script><script src="/assets/bad.js?m=2"></script>'
            '<script src="/assets/gone.js?m=3"></script>')
    out = _ASSET_SCRIPT.sub(lambda m: _inline_script(str(tmp_path), m), tags)
    assert "<script>\nvar a = 1;\n</script>" in out
    assert '<script src="/assets/bad.js?m=2"></script>' in out and '<script src="/assets/gone.js?m=3"></script>' in out
    assert not re.search(r'src="[^"]*ok\.js', out)


def test_the_shortcuts_overlay_is_static_markup_in_the_page_not_in_the_layout(app):
    """The keyboard shortcuts' overlay never changes: it is written into the page after Dash's
    root (React does not render its components on every open), once, hidden, every shortcut
    escaped, and the Dash layout no longer has it."""
    from inspector.layout.graph_panel import SHORTCUTS
    page = app.server.test_client().get("/").get_data(as_text=True)
    assert page.count('id="%s"' % ids.HELP_OVERLAY) == 1
    root = page.index('id="react-entry-point"')
    overlay = page[page.index('id="%s"' % ids.HELP_OVERLAY):]
    overlay = overlay[:overlay.index("</div></div></div>")]
    assert page.index('id="%s"' % ids.HELP_OVERLAY) > root
    assert 'style="display: none;"' in overlay and 'aria-label="Close keyboard shortcuts"' in overlay
    assert overlay.count("<tr>") == len(SHORTCUTS)
    for key, what in SHORTCUTS:
        assert "<kbd>%s</kbd>" % key in overlay and what.replace("&", "&amp;") in overlay
    assert "<b>Keyboard shortcuts</b>" in overlay
    assert ids.HELP_OVERLAY not in str(_layout(app))

"""Inspector test set-up: small nets written here, and dash.testing with
headless Chromium configured so that plain ``python -m pytest`` works.

Browser tests (marked ``browser``) skip with a reason when chromedriver or
dash[testing] is missing.
"""
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inspector_testlib import LENET, OVERFLOW_NET, ROOT, SYNTAX_ERROR_NET, build_loaded  # noqa: E402


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _browser_skip_reason():
    try:
        import selenium  # noqa: F401
        from dash.testing import browser  # noqa: F401,F811
    except Exception as e:  # pragma: no cover
        return "dash[testing]/selenium not installed (%s)" % e
    if shutil.which("chromedriver") is None:
        return "chromedriver not found (apt-get install chromium chromium-driver)"
    if _chromium() is None:
        return "no Chromium/Chrome binary found"
    return None


# The browser test modules import selenium at their top: without it (a machine with dash but
# not its testing extra, such as the GPU self-test's) pytest leaves them out instead of
# reporting their import as an error; with it, they skip one by one as above when Chromium
# is missing.
collect_ignore_glob = [] if importlib.util.find_spec("selenium") else ["*_browser.py"]


def _free_port():
    """A TCP port nobody listens on now (the OS picks it)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _honour_test_port():
    """INSPECTOR_TEST_PORT: the port dash_duo's server uses; without it, a free port the OS
    picks for each server (dash's default, 8050, would collide between the pytest-xdist
    workers and with any other run on the machine).  And the server's start may take
    up to 120 s (dash's default, 3 s, is a rate a busy machine does not always keep:
    the wait ends as soon as the server answers)."""
    port = os.environ.get("INSPECTOR_TEST_PORT")
    try:
        from dash.testing.application_runners import ThreadedRunner
    except Exception:  # pragma: no cover - dash[testing] missing: browser tests skip
        return
    start = ThreadedRunner.start
    if getattr(start, "_port_patched", False):
        return

    def start_on_port(self, app, start_timeout=120, **kwargs):
        kwargs.setdefault("port", int(port) if port else _free_port())
        return start(self, app, start_timeout=max(start_timeout, 120), **kwargs)
    start_on_port._port_patched = True
    ThreadedRunner.start = start_on_port


def pytest_configure(config):
    _honour_test_port()
    # dash.testing reads --headless; default it on so that plain `python -m pytest` works
    if hasattr(config.option, "headless"):
        config.option.headless = True
    chrome = _chromium()
    if chrome and "DASH_TEST_CHROMEPATH" not in os.environ:
        os.environ["DASH_TEST_CHROMEPATH"] = chrome


@pytest.hookimpl(optionalhook=True)
def pytest_setup_options():
    """dash.testing's hook: the Chrome options for every browser test (optional: where
    dash is installed without its testing extra, selenium, pytest knows no such hook)."""
    from selenium.webdriver.chrome.options import Options
    options = Options()
    options.add_argument("--window-size=1600,1000")
    options.add_argument("--headless=new")
    return options


# ---------------------------------------------------------------- one Chromium for every browser test
# dash.testing starts and quits a Chromium for each test (about 3 s of a 2-core machine's
# time, 52 times).  Here one Chromium serves them all, each test in a clean state: every
# server listens on a port of its own, so each test's page is another origin (its own
# sessionStorage, localStorage and cache); other tabs are closed, the window is put back to
# its size, the log is drained, downloads go to the test's folder.  A test that fails, or a
# browser that stops answering, gets a fresh Chromium.  BROWSER_PER_TEST=1: one per test.
_SHARED = {"driver": None}


def _shared_browser_class():
    from dash.testing.composite import DashComposite
    from selenium.common.exceptions import WebDriverException

    class SharedChromium(DashComposite):
        def get_webdriver(self):
            d = _SHARED["driver"]
            if d is not None:
                try:
                    d.execute_cdp_cmd("Page.setDownloadBehavior",
                                      {"behavior": "allow", "downloadPath": self.download_path})
                    return d
                except WebDriverException:
                    _quit(d)
            d = _SHARED["driver"] = super().get_webdriver()
            return d

        def __exit__(self, exc_type, exc_val, tb):
            d = self.driver
            if exc_type is not None or os.environ.get("BROWSER_PER_TEST") == "1" or not _reset(d):
                _quit(d)
    return SharedChromium


def _quit(driver):
    _SHARED["driver"] = None
    try:
        driver.quit()
    except Exception:  # pragma: no cover - a browser already gone
        pass


def _reset(driver):
    """Back to one blank tab of the usual size, nothing left in the log; False if it fails."""
    try:
        handles = driver.window_handles
        for h in handles[1:]:
            driver.switch_to.window(h)
            driver.close()
        driver.switch_to.window(handles[0])
        driver.get("about:blank")
        driver.set_window_size(1600, 1000)
        driver.get_log("browser")
        return True
    except Exception:
        return False


@pytest.fixture
def dash_duo(request, dash_thread_server, tmpdir):
    """dash.testing's dash_duo (same arguments), on the one shared Chromium."""
    with _shared_browser_class()(
        server=dash_thread_server,
        browser=request.config.getoption("webdriver"),
        remote=request.config.getoption("remote"),
        remote_url=request.config.getoption("remote_url"),
        headless=request.config.getoption("headless"),
        options=request.config.hook.pytest_setup_options(),
        download_path=tmpdir.mkdir("download").strpath,
        percy_assets_root=request.config.getoption("percy_assets"),
        percy_finalize=request.config.getoption("nopercyfinalize"),
        pause=request.config.getoption("pause"),
    ) as dc:
        yield dc


def pytest_sessionfinish(session, exitstatus):
    if _SHARED["driver"] is not None:
        _quit(_SHARED["driver"])


def pytest_collection_modifyitems(config, items):
    reason = None
    checked = False
    for item in items:
        if "browser" in item.keywords and str(item.fspath).startswith(str(Path(__file__).parent)):
            if not checked:
                reason, checked = _browser_skip_reason(), True
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


# ------------------------------------------------------------------ nets written for the tests
@pytest.fixture
def overflow_net(tmp_path):
    p = tmp_path / "overflow.prototxt"
    p.write_text(OVERFLOW_NET)
    return p


@pytest.fixture
def broken_net(tmp_path):
    p = tmp_path / "broken.prototxt"
    p.write_text(SYNTAX_ERROR_NET)
    return p


# ------------------------------------------------------------------ engine-backed fixtures
@pytest.fixture
def lenet():
    return build_loaded(LENET)


@pytest.fixture
def app_ctx(tmp_path):
    """The callbacks' AppContext (no Dash server), model root = the repo."""
    from inspector.callbacks.common import AppContext
    from inspector.config import InspectorConfig
    from inspector.state.sessions import SessionStore
    cfg = InspectorConfig(model_root=str(ROOT), max_upload_bytes=8 << 20)
    return AppContext(config=cfg, store=SessionStore(4, 3600), examples=cfg.examples())


# ---------------------------------------------------------------- a server driven as the browser drives it
@pytest.fixture(scope="module")
def expect():
    from benchmarks import load_test as lt
    return lt.expected_nets()


@pytest.fixture
def serve(expect, request):
    """serve(**config) → a server on 127.0.0.1 and .tab() to open browser tabs on it
    (benchmarks/load_test.py's Tab), each tab checked to open the bundled LeNet."""
    import concurrent.futures as cf
    import random
    from types import SimpleNamespace

    from benchmarks import load_test as lt
    from inspector import create_app
    label = request.module.__name__.rsplit("_", 1)[-1]          # "safety", "limits"
    made = []

    def start(**cfg):
        app = create_app(lt.make_config(**cfg))
        server = lt.ServerThread(app)
        pool = cf.ThreadPoolExecutor(8)
        made.append((server, pool))
        stats = lt.Stats()
        deps = lt.Dependencies.fetch(server.url)

        def tab():
            t = lt.Tab(server.url, deps, stats, pool, expect, random.Random(0), label)
            t.open()
            assert t.net is expect["lenet"] and "LeNetDigits" in lt._text(t.props.get("load-status.children"))
            return t

        return SimpleNamespace(app=app, server=server, stats=stats, tab=tab, url=server.url, deps=deps)

    yield start
    for server, pool in made:
        pool.shutdown(wait=True)
        server.stop()
        server.app.shutdown()        # its sessions' folders, its load checks (inspector/app.py)

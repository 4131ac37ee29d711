"""``create_app(config)``: the Dash app of the inspector."""
import html
import logging
import os
import re

import flask
from dash import Dash

from inspector import adapters

from .callbacks import AppContext, register_all
from .callbacks.common import error_text
from .callbacks.first_view import fresh_tab, with_first_view
from .config import InspectorConfig, data_dir
from .layout import page, shortcuts_overlay_html
from .state import cleanup
from .state.guard import LoadGuard, build_checked
from .state.jobs import ThreadJobManager
from .state.loading import settings, spec_stamp
from .state.netstate import initial_spec
from .state.sessions import SessionStore
from .state.spares import Spares, first_view

log = logging.getLogger("inspector")


def create_app(config=None, store=None):
    """The Dash app for ``config`` (an InspectorConfig).  Sessions live in
    ``store`` (a new SessionStore by default)."""
    config = config or InspectorConfig()
    store = store or SessionStore(config.max_sessions, config.idle_seconds)
    cleanup.sweep()          # the folders of servers killed before they could remove them
    cleanup.keep_big_buffers_apart()     # an upload's buffers leave the RSS when freed
    _load_layer_registry()
    ctx = AppContext(config=config, store=store, examples=config.examples())
    if config.load_seconds:      # nets from the page: built apart first, bounded (state/guard.py)
        ctx.guard = LoadGuard(config.load_seconds, memory_bytes=config.max_net_bytes, workers=config.load_workers)
        ctx.guard.start()
    if config.prebuild and not config.gpu:
        ctx.spares = Spares(lambda spec: first_view(build_checked(ctx.guard, spec, settings(config))),
                            budget=config.spare_bytes, stamp=spec_stamp)
        store.on_close.append(ctx.spares.drop_tab)     # a session that ends takes its spare net along
        ctx.spares.prime(initial_spec(ctx))
    manager = ThreadJobManager(config.cache_dir, expire=config.job_expire_seconds)
    # suppress_callback_exceptions: with it off, Dash builds the whole page once more as a
    # "validation layout", writes it into every page (53 KB of the 121 KB page of ResNet-152,
    # 20 ms of the server's time per page) and the renderer checks every callback against it
    # on every open; tests/inspector/test_callback_ids.py makes the same check once, in CI.
    dash_app = _Dash(__name__, title=config.title, assets_folder=str(data_dir("assets")),
                    assets_ignore=INLINE_ASSETS, suppress_callback_exceptions=True,
                    on_error=_last_resort, background_callback_manager=manager)
    dash_app.index_string = index_page(dash_app.index_string, dash_app.config.requests_pathname_prefix)
    dash_app.job_manager = manager           # long actions: inspector/state/jobs.py
    gpu = adapters.gpu_available()
    solver_ok = True         # engine's solvers are part of the engine

    def serve_layout():
        store.evict_idle()
        sid = store.new_id()
        tree = page(config, sid, ctx.examples, gpu, solver_ok)
        if fresh_tab(flask.request if flask.has_request_context() else None):
            tree = with_first_view(ctx, sid, tree)       # the default net drawn with the page
        return tree

    dash_app.layout = serve_layout
    # uploads travel base64-encoded inside the callback's JSON
    dash_app.server.config["MAX_CONTENT_LENGTH"] = int(config.max_upload_bytes * 1.4) + 2 ** 20
    register_all(dash_app, ctx)
    dash_app.inspector = ctx
    _too_large_as_a_load_error(dash_app.server, config)
    dash_app.shutdown = _shutdown_later(ctx, manager)
    return dash_app


def _shutdown_later(ctx, manager):
    """``shutdown()``: end every session (their upload folders go), stop the load checks, drop the
    spare nets and remove the job cache this server made.  Also called at the process's exit
    (inspector.cli turns SIGTERM into one); it holds the app only weakly until then."""
    import atexit
    import weakref
    ctx_ref, manager_ref = weakref.ref(ctx), weakref.ref(manager)

    def shutdown():
        c, m = ctx_ref(), manager_ref()
        if c is not None:
            c.store.close_all()
            if c.guard is not None:
                c.guard.shutdown()
            if c.spares is not None:
                c.spares.clear()
        if m is not None:
            m.remove_cache()
    atexit.register(shutdown)
    return shutdown


def _drain(request, cap):
    """Read and drop the body of a refused request (at most ``cap`` bytes, in small pieces): a browser
    whose upload is not read gets its connection reset instead of the answer."""
    stream = request.environ.get("wsgi.input")
    left = min(int(request.content_length or 0), int(cap))
    try:
        while left > 0 and stream is not None:
            chunk = stream.read(min(left, 1 << 16))
            if not chunk:
                break
            left -= len(chunk)
    except (OSError, ValueError):
        pass


def _too_large_as_a_load_error(server, config):
    """A request past Flask's limit (an upload past --max-upload-mb by more than the 1.4 x that
    base64 and the JSON take) is refused with 413 before its body is read, so Dash's page
    would show nothing at all: the page gets the message any upload over the limit gets, in the
    load error box, and every output of the callback stays as it was."""
    from werkzeug.exceptions import RequestEntityTooLarge

    from . import ids
    from .layout.header import load_error_box
    from .state.loading import too_large_message
    from .state.sessions import LoadError

    @server.errorhandler(RequestEntityTooLarge)
    def too_large(exc):
        if not flask.request.path.endswith("/_dash-update-component"):
            return exc
        from plotly.io.json import to_json_plotly
        _drain(flask.request, 4 * config.max_upload_bytes + (64 << 20))
        err = LoadError(message=too_large_message(flask.request.content_length, config.max_upload_bytes),
                        kind="PathRefused")
        box = load_error_box(err, "this tab's net")
        body = {"multi": True, "response": {}, "sideUpdate": {ids.LOAD_ERROR: {"children": box}}}
        return flask.Response(to_json_plotly(body), status=200, mimetype="application/json")


class _Dash(Dash):
    """Dash with fewer scripts for a first open to fetch:

    - without the core-js polyfill bundle (``deps/polyfill@7``, 100 KB that a first open
      fetched, compiled and ran before anything else, about 0.1 s): every browser the page
      supports has what it polyfills, except regenerator's runtime, which the renderer's and
      dcc's lazy components call as a global; assets/vendor/regenerator-runtime.js (the
      regenerator-runtime package, MIT) gives it, loaded before the renderer as every asset;
    - without dash_table's bundle (the page has no DataTable; ``import dash`` registers it);
    - with the page's own scripts (assets/*.js) written into the page where their tags were,
      in the same order: a browser opens six connections to a server, and the page's
      layout and callback list (asked for at once by boot.inline.js) waited behind four
      small script requests."""

    def _generate_scripts_html(self):
        tags = _DROPPED.sub("", super()._generate_scripts_html())
        return _ASSET_SCRIPT.sub(lambda m: _inline_script(self.config.assets_folder, m), tags)


_DROPPED = re.compile(r'<script src="[^"]*/(deps/polyfill@|dash_table/bundle)[^"]*"></script>\s*')
_ASSET_SCRIPT = re.compile(r'<script src="[^"]*?/assets/([\w./-]+\.js)\?m=[^"]*"></script>')


def _inline_script(folder, match):
    """The asset script of ``match`` (a <script src> tag of Dash's) as an inline script, or
    the tag as it was where its text cannot stand inline."""
    path = os.path.join(folder, *match.group(1).split("/"))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return match.group(0)
    if "</script" in text.lower() or "<!--" in text or "{%" in text:
        return match.group(0)
    return "<script>\n%s\n</script>" % text
INLINE_ASSETS = r"\.inline\.js$"     # assets written into the page itself (index_page), not served


def index_page(index_string, prefix):
    """Dash's page ``index_string`` with assets/boot.inline.js inline at the top of its head
    (the tab's session kind, and the layout asked for while the scripts load) and the page's
    static markup after Dash's root (layout.shortcuts_overlay_html)."""
    boot = (data_dir("assets") / "boot.inline.js").read_text(encoding="utf-8")
    if "</script" in boot.lower() or "{%" in boot:
        raise ValueError("assets/boot.inline.js cannot be written inline into the page")
    tag = '<script data-prefix="%s">\n%s\n</script>' % (html.escape(prefix, quote=True), boot)
    head = index_string.index("<head>") + len("<head>")
    page_ = index_string[:head] + "\n" + tag + index_string[head:]
    # the page's static markup (the shortcuts overlay) beside Dash's root: React never renders it
    return page_.replace(APP_ENTRY, APP_ENTRY + "\n" + shortcuts_overlay_html(), 1)


APP_ENTRY = "{%app_entry%}"


def _load_layer_registry():
    """Load every engine layer type now, before threads serve requests: the
    registry's lazy first load is not thread-safe, and the first loads of a fresh
    server, arriving at once, failed with 'Unknown layer type: Convolution'."""
    import engine
    engine.layer_type_list()


def _last_resort(exc):
    """Dash's on_error: a callback error that escaped the guards goes to the banner."""
    from dash import set_props

    from inspector import ids
    log.error("unguarded callback error: %s", exc, exc_info=exc)
    try:
        set_props(ids.ERROR_TEXT, {"children": error_text(exc)})
        set_props(ids.ERROR_BANNER, {"style": {"display": "flex"}})
    except Exception:
        pass
    return None

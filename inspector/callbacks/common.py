"""What every callback module shares: the app context, the error guard and
the trigger helper.

Callbacks are thin: each registered Dash callback unpacks its arguments, calls
a plain function of its module (tested without Dash) and packs the result.
:func:`guarded` makes a failing callback show its error in the page's banner
(type and message, never a traceback; the traceback goes to the server log)
and leave its outputs as they were, so the session goes on.
"""
import logging
import os
import time
from dataclasses import dataclass
from functools import wraps
from typing import Any, List

from dash import ctx, no_update, set_props
from dash.exceptions import PreventUpdate

from inspector import ids
from inspector.state import runner

log = logging.getLogger("inspector")


@dataclass
class AppContext:
    config: Any            # InspectorConfig
    store: Any             # SessionStore
    examples: List[tuple]  # [(label, path, phase)]
    spares: Any = None     # spares.Spares: nets built ahead, for the next tab and phase switches (None: none)
    guard: Any = None      # guard.LoadGuard: nets from the page built apart first, bounded (None: not checked)


def error_text(exc):
    """What the page says about an exception: its type and message, and its notes (a
    Python layer's own exception names the layer there)."""
    msg = str(exc).strip() or "(no message)"
    name = type(exc).__name__
    notes = [str(n).strip() for n in getattr(exc, "__notes__", ()) or () if str(n).strip()]
    if notes:
        msg += " (%s)" % "; ".join(notes)
    return "%s: %s" % (name, msg)


def run_failed(session, action, exc):
    """The page's message when a run action raised ``exc``: a refusal (runner.RunRefused)
    as it is; any other failure logged, with the session's run version bumped so the
    page shows what ran before it."""
    if isinstance(exc, runner.RunRefused):
        return "⚠ " + str(exc)
    log.exception("%s failed", action)
    session.run_version += 1
    return "⚠ " + error_text(exc)


def show_error(exc, what=""):
    text = error_text(exc)
    if what:
        text = "%s failed — %s" % (what, text)
    set_props(ids.ERROR_TEXT, {"children": text})
    set_props(ids.ERROR_BANNER, {"style": {"display": "flex"}})


TIMES = bool(os.environ.get("INSPECTOR_CALLBACK_TIMES"))    # log each callback's time (profiling the page)


def guarded(n_outputs, what=""):
    """Decorator: on an exception, show it in the banner and update nothing.  With
    INSPECTOR_CALLBACK_TIMES set, each call's time goes to the server log."""
    def deco(fn):
        @wraps(fn)
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            except PreventUpdate:
                raise
            except Exception as exc:   # noqa: BLE001 - the page must live on
                log.exception("callback %s failed", fn.__name__)
                try:
                    show_error(exc, what or fn.__name__.replace("_", " "))
                except Exception:      # outside a callback context (tests)
                    pass
                return no_update if n_outputs == 1 else tuple([no_update] * n_outputs)
            finally:
                if TIMES:
                    log.warning("callback %s: %.0f ms", fn.__name__, (time.perf_counter() - t0) * 1e3)
        return wrapper
    return deco


def triggered():
    """The id of the component that fired the current callback (None at load)."""
    t = ctx.triggered_id
    return t if isinstance(t, str) else None


def triggered_all():
    """The ids of every input that fired the current callback (empty at load)."""
    try:
        return {v for v in ctx.triggered_prop_ids.values() if isinstance(v, str)}
    except Exception:
        return set()

"""The page's address: which net is open, in which NetState, what is selected
and which blocks are expanded — a short, readable query string
(docs/inspector-urls.md).

    ?example=lenet&phase=TRAIN&layer=conv1
    ?model=models/bvlc_googlenet/deploy.prototxt&phase=TEST&layer=inception_3a/1x1&open=inception_3a
    ?cli=deploy.prototxt&phase=TEST&blob=pool5/7x7_s1

:func:`encode` and :func:`decode` are pure (no Dash, no files).
:func:`state_of` describes a session's loaded net; :func:`spec_for` turns an
address back into the :class:`~inspector.state.sessions.ModelSpec` to build.
"""
import os
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple
from urllib.parse import quote, unquote

from .netstate import PHASES, initial_spec

SOURCES = ("example", "model", "cli", "upload")    # where the net comes from (one of them per address)
SELECT_KINDS = ("layer", "blob", "ghost", "block")
# characters left as they are inside a value (besides letters, digits and -._~): readable layer
# names and paths; '&', '=', '#', '+', '%', ',' and spaces are escaped
_SAFE = "/:@!$'()*;"


@dataclass(frozen=True)
class UrlState:
    source: Optional[str] = None          # one of SOURCES; None: the server's default net
    name: str = ""                        # example key, path under the model root, or file name
    phase: Optional[str] = None           # None: the net's default (netstate.default_phase)
    level: int = 0
    stages: Tuple[str, ...] = ()
    selection: Optional[Tuple[str, str]] = None     # (kind, name)
    expanded: Optional[Tuple[str, ...]] = None      # None: the graph's default folding
    problems: Tuple[str, ...] = field(default=(), compare=False)   # what decode could not read

    @property
    def net_part(self):
        """The state without the selection and folding (what a load depends on)."""
        return replace(self, selection=None, expanded=None, problems=())

    def selection_dict(self):
        return None if self.selection is None else {"kind": self.selection[0], "name": self.selection[1]}


def _q(value):
    return quote(str(value), safe=_SAFE)


def _qlist(values):
    return ",".join(quote(str(v), safe=_SAFE) for v in values)


def encode(state):
    """The query string (with its leading "?", or "" for nothing) of ``state``."""
    parts = []
    if state.source in SOURCES:
        parts.append("%s=%s" % (state.source, _q(state.name)))
    if state.phase:
        parts.append("phase=" + state.phase)
    if state.level:
        parts.append("level=%d" % int(state.level))
    if state.stages:
        parts.append("stages=" + _qlist(state.stages))
    if state.selection is not None:
        kind, name = state.selection
        parts.append("%s=%s" % (kind, _q(name)))
    if state.expanded is not None:
        parts.append("open=" + _qlist(state.expanded))
    return "?" + "&".join(parts) if parts else ""


def _split_list(raw):
    return tuple(unquote(v) for v in raw.split(",") if v != "")


def decode(search):
    """The UrlState of a query string ("?a=1&b=2" or "a=1&b=2"; None or ""
    is the empty state).  Unknown keys are ignored; values that cannot be read
    are listed in ``problems`` and left at their defaults."""
    text = (search or "").lstrip("?")
    out = {}
    problems = []
    for item in text.split("&"):
        if not item:
            continue
        key, _eq, raw = item.partition("=")
        key = unquote(key).strip().lower()
        if key in SOURCES:
            if "source" in out:
                problems.append("the address names two nets (%s and %s); using %s"
                                % (out["source"], key, out["source"]))
                continue
            out["source"], out["name"] = key, unquote(raw)
        elif key == "phase":
            phase = unquote(raw).strip().upper()
            if phase in PHASES:
                out["phase"] = phase
            else:
                problems.append("phase must be TRAIN or TEST (the address says %r)" % unquote(raw))
        elif key == "level":
            try:
                out["level"] = int(unquote(raw))
            except ValueError:
                problems.append("level must be a whole number (the address says %r)" % unquote(raw))
        elif key == "stages":
            out["stages"] = _split_list(raw)
        elif key in SELECT_KINDS:
            name = unquote(raw)
            if name:
                out["selection"] = (key, name)
        elif key == "open":
            out["expanded"] = _split_list(raw)
    return UrlState(problems=tuple(problems), **out)


# ------------------------------------------------------------------ sessions <-> addresses
def example_key(path):
    """The short name of a bundled example in addresses: its folder's name."""
    return os.path.basename(os.path.dirname(str(path)))


def _same_file(a, b):
    try:
        return bool(a) and bool(b) and os.path.realpath(a) == os.path.realpath(b)
    except (TypeError, ValueError):
        return False


def cli_model(app):
    """The prototxt the command line named (directly or through --solver), or None."""
    cfg = app.config
    if cfg.model:
        return cfg.model
    if cfg.solver:
        return initial_spec(app).model
    return None


def net_of(app, spec, upload_name=None):
    """(source, name) naming ``spec``'s net in an address; (None, "") when the
    net has no address (nothing loaded)."""
    if spec is None or not spec.model:
        return None, ""
    cfg = app.config
    if spec.uploaded:
        return "upload", upload_name or os.path.basename(spec.model)
    cli = cli_model(app) if spec.trusted else None
    if cli and _same_file(spec.model, cli):
        rel = _relative(spec.model, cfg.model_root)
        return ("model", rel) if rel is not None else ("cli", os.path.basename(cli))
    for _label, path, _phase in app.examples:
        if _same_file(spec.model, path):
            return "example", example_key(path)
    rel = _relative(spec.model, cfg.model_root)
    if rel is not None:
        return "model", rel
    return "cli", os.path.basename(spec.model)


def _relative(path, root):
    """``path`` relative to ``root`` with "/" separators, or None outside it."""
    root_real = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([root_real, real]) != root_real:
        return None
    return os.path.relpath(real, root_real).replace(os.sep, "/")


def state_of(app, session, selection=None, expanded=None):
    """The UrlState of ``session``'s loaded net, with ``selection`` ({"kind",
    "name"}) and ``expanded`` (block ids) as the page holds them."""
    ld = session.loaded
    if ld is None:
        return UrlState()
    spec = ld.spec
    source, name = net_of(app, spec, session.upload_names.get("model") if spec.uploaded else None)
    sel = None
    if isinstance(selection, dict) and selection.get("kind") in SELECT_KINDS and selection.get("name"):
        sel = (selection["kind"], str(selection["name"]))
    exp = tuple(str(b) for b in expanded) if isinstance(expanded, (list, tuple)) else None
    return UrlState(source=source, name=name, phase=spec.phase, level=int(spec.level or 0),
                    stages=tuple(spec.stages), selection=sel, expanded=exp)


class AddressError(ValueError):
    """An address that names no net this server can open."""

    layer = None
    blob = None


def spec_for(app, session, state):
    """The ModelSpec an address asks for (None: the server's default net,
    which the caller picks).  Raises AddressError or loading.PathRefused."""
    from . import loading
    from .sessions import ModelSpec
    cfg = app.config
    if state.source is None:
        return None
    if state.source == "example":
        for label, path, phase in app.examples:
            if example_key(path) == state.name:
                spec = ModelSpec(model=path, label=label, trusted=True, phase=phase)
                break
        else:
            names = ", ".join(example_key(p) for _l, p, _ph in app.examples) or "none"
            raise AddressError("the address names the example %r; this server has %s" % (state.name, names))
        phase = spec.phase
    elif state.source == "cli":
        if not cli_model(app):
            raise AddressError("the address names the command line's net (%s), but this server was started "
                               "without one" % state.name)
        spec = initial_spec(app)
        phase = spec.phase
    elif state.source == "upload":
        saved = session.uploads.get("model")
        if not saved or session.upload_names.get("model") != state.name or not os.path.isfile(saved):
            raise AddressError("the uploaded net %s is not on the server any more (uploads live as long as "
                               "the tab's session): upload it again" % state.name)
        cur = session.loaded.spec if session.loaded is not None else None
        if cur is not None and cur.uploaded and _same_file(cur.model, saved):
            spec = cur                       # with the weights and mean uploaded for it
        else:
            spec = ModelSpec(model=saved, label="uploaded %s" % state.name, uploaded=True)
        phase = None
    else:   # model: a path under the model root
        real = loading.resolve_model_path(state.name, cfg.model_root)
        cli = cli_model(app)
        if cli and _same_file(real, cli):
            spec = initial_spec(app)         # trusted, with its weights and solver
            phase = spec.phase
        else:
            spec = ModelSpec(model=real, label=os.path.relpath(real, os.path.realpath(cfg.model_root)))
            phase = None
    # no phase named: the net's own (None), decided once the load check read the file (state/guard.py)
    phase = state.phase or phase
    return replace(spec, phase=phase, level=int(state.level or 0), stages=tuple(state.stages))

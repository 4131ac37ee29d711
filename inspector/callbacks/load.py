"""Loading: examples, a path under the model root, uploads, NetState, device
and the page's address.  A failed load keeps the last good net and shows
where it failed; every control (Example, path, Phase, Level, Stages) always
shows the state of the net that is loaded."""
import os
from dataclasses import dataclass, replace
from typing import Any, Optional

from dash import ALL, Input, Output, State, no_update
from dash.exceptions import PreventUpdate

import engine
from inspector import ids
from inspector.state import cleanup, debugger, guard, loading, runner, urlstate

from ..layout.header import load_error_box, load_status, standin_children
from ..state.inputs import InputSettings
from ..state.netstate import default_phase, initial_spec
from ..state.sessions import ModelSpec
from .common import guarded, triggered
from .graph import opened_around

UPLOAD_KINDS = {ids.UPLOAD_MODEL: "model", ids.UPLOAD_WEIGHTS: "weights", ids.UPLOAD_SOLVER: "solver",
                ids.UPLOAD_MEAN: "mean"}
OPEN_PATH = (ids.MODEL_PATH_OPEN, ids.MODEL_PATH)          # the Open button, Enter in the path box
FROM_ADDRESS = (None, ids.URL_POP, ids.SESSION)            # page load, back/forward, a restored tab
SAME_NET_NOOP = (ids.EXAMPLE, ids.PHASE, ids.LEVEL, ids.STAGES)   # choosing what is loaded changes nothing
NOT_IN_NET = "not in this net"     # the error kind of an address naming a layer, blob or block the net lacks
UPLOAD_IDS = tuple(UPLOAD_KINDS)
# what the load callback sets, in order (a fresh tab's page is sent with the same, see first_load)
LOAD_OUTPUTS = ((ids.NET_VERSION, "data"), (ids.LOAD_ERROR, "children"), (ids.LOAD_STATUS, "children"),
                (ids.STAGES, "options"), *((u, "contents") for u in UPLOAD_IDS),
                (ids.EXAMPLE, "value"), (ids.MODEL_PATH, "value"), (ids.PHASE, "value"),
                (ids.LEVEL, "value"), (ids.STAGES, "value"), (ids.SELECTION, "data"), (ids.EXPANDED_BLOCKS, "data"))
SHARED_OUTPUTS = ((ids.SELECTION, "data"), (ids.EXPANDED_BLOCKS, "data"))    # other callbacks set them too


def shown_spec(app, session):
    """The spec whose state the controls show: the loaded net's; with none
    loaded, the one the last load tried."""
    if session.loaded is not None:
        return session.loaded.spec
    return session.failed_spec or initial_spec(app)


def parse_shape(top, text):
    """Per-item dims from what was typed for a stood-in top ("3x227x227", "3, 227, 227")."""
    parts = [p for p in str(text or "").replace("×", " ").replace("x", " ").replace("X", " ")
             .replace(",", " ").split() if p]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError("the shape of %s must be whole numbers such as 3×227×227 (got %r)" % (top, text)) from None
    if not dims or any(d <= 0 for d in dims):
        raise ValueError("the shape of %s must be positive numbers such as 3×227×227 (got %r)" % (top, text))
    return dims


def next_spec(app, session, trigger, example=None, path=None, upload=None, phase=None, level=None,
              stages=None, data_shapes=None):
    """The spec the trigger asks for (raises PathRefused for bad paths/uploads).

    A net opened from the page (an example, a path, an uploaded prototxt)
    opens in the NetState the command line would give it (a deploy net in
    TEST; level 0, no stages); weights, solver and mean files keep the
    current state; the Phase/Level/Stages controls rebuild the current net."""
    cur = shown_spec(app, session)
    if trigger is None:
        return initial_spec(app) if session.loaded is None else None
    if trigger == ids.EXAMPLE:
        spec = _example_spec(app, example)
        if spec is None:
            raise loading.PathRefused("unknown example %r" % (example,))
        return spec
    if trigger in OPEN_PATH:
        return _path_spec(app, path)
    if trigger in UPLOAD_KINDS:
        kind = UPLOAD_KINDS[trigger]
        contents, filename = upload
        saved = loading.save_upload(session, kind, filename, contents, app.config.max_upload_bytes)
        if kind == "model":     # its phase (None): the net's own, decided once its load check read it
            return ModelSpec(model=saved, label="uploaded %s" % os.path.basename(str(filename)), uploaded=True,
                             mean=cur.mean, phase=None)
        return replace(cur, **{kind: saved})
    if trigger == ids.STANDIN_APPLY:
        if failed_stand_ins(session):
            cur = session.failed_spec        # the shapes are for the net that did not build
        elif session.loaded is None:
            return None
        if not data_shapes:
            return None
        given = dict(cur.data_shapes)
        given.update({top: parse_shape(top, text) for top, text in data_shapes})
        return replace(cur, data_shapes=tuple(sorted(given.items())))
    if trigger in (ids.PHASE, ids.LEVEL, ids.STAGES):
        if session.loaded is None and session.failed_spec is None:
            # An expired session (the server let it go for newer tabs): rebuild the net the
            # tab still shows, named by its Example list or its Model path box; never the
            # default net in place of another (an uploaded net is gone: nothing then).
            cur = _tab_net(app, example, path)
            if cur is None:
                return None
        return replace(cur, phase=phase or cur.phase, level=int(level or 0), stages=tuple(stages or ()))
    return None


def _example_spec(app, example):
    """The spec of an entry of the Example list ("cli": the command line's net), or None."""
    if example == "cli":
        return initial_spec(app)
    for label, p, ex_phase in app.examples:
        if p == example:
            return ModelSpec(model=p, label=label, trusted=True, phase=ex_phase)
    return None


def _tab_net(app, example, path):
    """The net a tab shows, read from its controls: the Example list's entry, else the file
    its Model path box names under the model root; None when neither names one (an uploaded
    net: its label is no path)."""
    spec = _example_spec(app, example) if example else None
    if spec is not None or not path:
        return spec
    try:
        spec = _path_spec(app, path)
    except loading.PathRefused:
        return None
    return spec if os.path.isfile(spec.model) else None


def _path_spec(app, path):
    """The spec of a prototxt named by a path under the model root (raises PathRefused)."""
    real = loading.resolve_model_path(path, app.config.model_root)
    return ModelSpec(model=real, label=os.path.relpath(real, os.path.realpath(app.config.model_root)),
                     phase=None)      # the net's own, decided once its load check read it (state/guard.py)


def _hide_uploads(session, err):
    for saved in session.uploads.values():     # never show the server's temp folders
        err.message = err.message.replace(saved, os.path.basename(saved))
        err.hint = err.hint.replace(saved, os.path.basename(saved))
        if err.path == saved:
            err.path = os.path.basename(saved)
    if session._dir:
        err.message = err.message.replace(session._dir + os.sep, "")
        err.hint = err.hint.replace(session._dir + os.sep, "")


def _path_hint(spec, err):
    """Where a failing layer's relative files were looked for (or ""): from the NetParameter its
    load check read (loading.read_source's), for an error of Init; a file that does not parse, or
    is over a limit, has none to give."""
    if not err.layer or not spec.model or err.kind in ("ParseError", "LimitExceeded", "LoadBounded"):
        return ""
    try:
        param = loading.read_source(spec.model, copy=False)
    except (engine.CaffeError, OSError):    # the file's own error is already shown
        return ""
    return loading.relative_path_hint(param, err.layer, spec.model, private_model_dir=spec.uploaded) or ""


def failed_stand_ins(session):
    """The stood-in data layers of the structure-only net the last load could not build in
    the shapes assumed (or given) for its data (StandInInfo; () when it failed otherwise)."""
    err = session.error
    if err is None or session.failed_spec is None:
        return ()
    return tuple(getattr(err, "stand_ins", ()) or ())


def standin_hints(session):
    """{stood-in layer: where its relative source was looked for, and whether it is
    beside the model} (loading.relative_path_hint), for the structure-only notice."""
    ld = session.loaded
    out = {}
    for si in ld.graph.stand_ins:
        if ld.source_param is None or not si.source or os.path.isabs(si.source):
            continue
        hint = loading.relative_path_hint(ld.source_param, si.layer, ld.spec.model,
                                          private_model_dir=ld.spec.uploaded) or ""
        own = "%s = %r" % (si.field, si.source)       # its own source (a layer of another phase may share its name)
        lines = [line for line in hint.splitlines() if line.startswith(own)]
        if lines:
            out[si.layer] = "\n".join(lines)
    return out


SPARE_WAIT = 60.0      # seconds a load waits for the spare of its net being built (then builds its own)


def _spare(app, session, spec):
    """The net built ahead for ``spec`` (on the CPU), or None: the tab's own spare (its net in
    the other phase), else a shared one (the page's default net, the command line's or an
    example's net in the other phase).  One being built now is waited for: a second Init
    beside it (a quick switch back and forth of the Phase, a tab opened as the server
    starts) would take as long as both together."""
    spares = getattr(app, "spares", None)
    if spares is None or session.device != "CPU":
        return None
    if not spec.trusted:
        return spares.take_tab(session.id, spec, wait=SPARE_WAIT)
    return spares.take(spec, wait=SPARE_WAIT)


def _spare_other_phase(app, session, loaded):
    """Build the net just loaded in the other phase ahead (a moment later), so that a switch
    of the Phase takes it at once: the command line's and the examples' nets as shared
    spares, any other net (a path, an upload, an address) as the tab's own spare when its
    memory fits the spare budget.  The tab's spare of the net it had goes either way."""
    spares = getattr(app, "spares", None)
    if spares is None:
        return
    spec = loaded.spec
    if session.device != "CPU" or spec.solver:
        spares.drop_tab(session.id)
        return
    other = replace(spec, phase="TEST" if spec.phase == "TRAIN" else "TRAIN", level=int(spec.level or 0),
                    stages=tuple(spec.stages))
    if spec.trusted:
        spares.drop_tab(session.id)
        spares.prime_later(other)
    else:
        spares.prime_tab(session.id, other, need=loaded.net.memory_required_bytes)


def load(app, session, spec, device=None):
    """Build ``spec`` into the session.  On failure, record the error and keep
    the last good net.  Returns True when a new net is in."""
    if device is not None and session.loaded is None:
        session.device = device if device == "CPU" or runner.adapters.gpu_available() else "CPU"
    try:
        loaded = _spare(app, session, spec)
        if loaded is None:       # a net from the page is first built apart, bounded (state/guard.py)
            loaded = guard.build_checked(getattr(app, "guard", None), spec, loading.settings(app.config),
                                         session.device)
        spec = loaded.spec       # (its phase decided, when it was the net's own)
    except Exception as exc:  # noqa: BLE001 - every failure is shown in the page
        err = loading.load_error(exc, spec.model)
        if type(exc).__name__ == "PythonLayerRefused":
            err.message += " (start the server with --allow-python-layers to run them)"
        if isinstance(exc, engine.MemoryBudgetExceeded):
            err.message += loading.too_large_hint(exc.budget)
        err.hint = _path_hint(spec, err)      # a relative data path: where it was looked for, where it is
        _hide_uploads(session, err)
        session.error = err
        session.failed_spec = spec
        return False
    _spare_other_phase(app, session, loaded)
    old = session.loaded
    if old is not None:
        old.recorder.detach()
    debugger.timeline(loaded, app.config.timeline_budget_mb << 20)
    session.loaded = loaded
    session.spec = spec
    session.error = None
    session.failed_spec = None
    session.net_version += 1
    session.cursor_forward = 0
    session.cursor_backward = -1
    session.paused = None
    try:
        settings = InputSettings(**session.input_settings) if session.input_settings else InputSettings()
        if settings.kind in ("npy", "image"):
            settings = InputSettings()
        if loaded.graph.inputs:
            session.message = runner.apply_inputs(session, settings)
        else:
            session.message = "net loaded (its data layers make their own inputs)"
    except (runner.RunRefused, engine.CaffeError, OSError, ValueError) as exc:
        session.message = "net loaded; inputs not set: %s" % exc
    return True


def _net_key(app, session, spec):
    """What makes two specs the same net for an address: where it comes from
    and its NetState."""
    upload_name = session.upload_names.get("model") if spec.uploaded else None
    return urlstate.net_of(app, spec, upload_name), spec.phase, int(spec.level or 0), tuple(spec.stages)


def spec_from_address(app, session, search):
    """(spec to load or None, UrlState, error, named) for the page's address.
    spec None: keep the loaded net (it is the one the address names, e.g. a
    reloaded tab whose session lives on).  named: False when the net the
    address names cannot be opened (then its selection means nothing)."""
    state = urlstate.decode(search)
    problems = list(state.problems)
    spec = None
    named = True
    try:
        spec = urlstate.spec_for(app, session, state)
    except (urlstate.AddressError, loading.PathRefused) as exc:
        problems.insert(0, str(exc))
        named = False
    if spec is None:                 # no net named (or a bad one): the loaded net, else the default
        if session.loaded is not None:
            spec = None
        else:
            spec = initial_spec(app)
            if not problems and (state.phase or state.level or state.stages):
                spec = replace(spec, phase=state.phase or spec.phase, level=state.level, stages=state.stages)
    elif session.loaded is not None and _net_key(app, session, session.loaded.spec) == \
            _net_key(app, session, _phase_as_loaded(session, spec)):
        spec = None
    err = None
    if problems:
        err = loading.load_error(urlstate.AddressError("; ".join(problems)))
        err.kind = "address"
    return spec, state, err, named


def _phase_as_loaded(session, spec):
    """``spec`` with the net's own phase when it names none and is the loaded net's file (decided
    from the NetParameter the tab holds: nothing is parsed here)."""
    ld = session.loaded
    if spec.phase is not None or ld is None or ld.source_param is None or not spec.model or not ld.spec.model:
        return spec
    if os.path.realpath(spec.model) != os.path.realpath(ld.spec.model):
        return spec
    return replace(spec, phase=default_phase(ld.source_param))


def _fallback(app, session, failed, device):
    """A tab whose net could not be built (an address naming a broken net, a command-line
    net that fails) opens the default net instead, with the error beside it: never a
    blank page.  Returns whether a net is in."""
    err = session.error
    candidates = [initial_spec(app)] + [ModelSpec(model=p, label=label, trusted=True, phase=ph)
                                        for label, p, ph in app.examples[:1]]
    for spec in candidates:
        if not spec.model or (failed is not None and spec.model == failed.model):
            continue
        if load(app, session, spec, device):
            if err is not None:
                err.fallback = True
                session.error = err
                session.failed_spec = failed
            return True
    return False


KIND_WORDS = {"layer": "layer", "blob": "blob", "ghost": "filtered-out layer", "block": "block"}


def address_misses(loaded, state):
    """(What the address names that the net loaded does not hold, as sentences: its
    selection, blocks to open; whether its selection is there (or it names none))."""
    from inspector.state import presenter
    g = loaded.graph
    known_blocks = {b.id for b in presenter.blocks(loaded)}
    out = []
    there = True
    if state.selection is not None:
        kind, name = state.selection
        there = {"layer": g.has_layer, "blob": g.has_blob, "block": known_blocks.__contains__,
                 "ghost": lambda n: any(x.name == n for x in g.ghosts)}.get(kind, lambda _n: False)(name)
        if not there:
            out.append("no %s named %r in this net (%s, %s): nothing is selected"
                       % (KIND_WORDS.get(kind, kind), name, g.shown_name, g.phase_name))
    missing = [b for b in (state.expanded or ()) if b not in known_blocks]
    if missing:
        out.append("no block named %s in this net: left folded" % ", ".join(repr(b) for b in missing))
    return out, there


@dataclass
class LoadResult:
    version: int
    error: Any
    session: Any
    stages: list
    restore: Optional[dict] = None          # selection and folding from the address
    noop: bool = False                      # the controls asked for the net already loaded


def handle_load_full(app, sid, trigger, device=None, search=None, **kw):
    """The load callback as a plain function (see :class:`LoadResult`)."""
    with app.store.use(sid) as s:
        restore = None
        noop = False
        if trigger in FROM_ADDRESS:
            spec, state, addr_err, named = spec_from_address(app, s, search)
            built = load(app, s, spec, device) if spec is not None else True
            if not built and s.loaded is None and _fallback(app, s, spec, device):
                named = False                # the default net: the address's selection is not its
            if addr_err is not None:
                s.error = addr_err if s.error is None or spec is None else s.error
            elif spec is None and trigger is not None:
                s.error = None
            if named and built:              # the page shows the net the address names
                misses, there = address_misses(s.loaded, state) if s.loaded is not None else ([], True)
                if misses and s.error is None:
                    err = loading.load_error(urlstate.AddressError("the address names " + "; ".join(misses)))
                    err.kind = NOT_IN_NET
                    s.error = err
                elif misses and s.error.kind == "address":
                    s.error.message += "; it names " + "; ".join(misses)
                restore = {"selection": state.selection_dict() if there else None,
                           "expanded": None if state.expanded is None else list(state.expanded),
                           "net_version": s.net_version}
        else:
            try:
                spec = next_spec(app, s, trigger, **kw)
            except (loading.PathRefused, engine.CaffeError, OSError, ValueError) as exc:    # shown in the page
                s.error = loading.load_error(exc)
                s.failed_spec = None
                spec = None
            if spec is not None and trigger in SAME_NET_NOOP and s.loaded is not None and spec == s.loaded.spec:
                noop = True                 # the controls already show this net: nothing to rebuild
            elif spec is not None:
                load(app, s, spec, device)
        stages = list(s.loaded.graph.rule_stages) if s.loaded is not None else []
        return LoadResult(s.net_version, s.error, s, stages, restore, noop)


def handle_load(app, sid, trigger, device=None, **kw):
    """The load callback as a plain function: (net version, error, session, stage options)."""
    r = handle_load_full(app, sid, trigger, device=device, **kw)
    return r.version, r.error, r.session, r.stages


def controls(app, session, stage_opts):
    """The values of the load controls for the net the page shows:
    (example, path, phase, level, stages, stage options)."""
    spec = shown_spec(app, session)
    example = None
    path = ""
    if spec.model:
        source, name = urlstate.net_of(app, spec)
        if source == "example":
            example = next((p for _l, p, _ph in app.examples if urlstate.example_key(p) == name), None)
        elif spec.trusted and app.config.model and urlstate.cli_model(app) and \
                os.path.realpath(spec.model) == os.path.realpath(urlstate.cli_model(app)):
            example = "cli"
        if source == "model" and not spec.uploaded:
            path = name
    stages = list(spec.stages)
    opts = sorted(set(stage_opts) | set(stages))
    return example, path, spec.phase or "TRAIN", int(spec.level or 0), stages, \
        [{"label": s, "value": s} for s in opts]


def describe(session):
    """How the error box names the net still shown (None: none)."""
    ld = session.loaded
    if ld is None:
        return None
    g = ld.graph
    st = ld.spec
    bits = [st.phase]
    if st.level:
        bits.append("level %d" % st.level)
    if st.stages:
        bits.append("stages " + ", ".join(st.stages))
    return "%s from %s (%s)" % (g.shown_name, st.label or os.path.basename(st.model), "; ".join(bits))


def load_outputs(app, r, trigger, selection):
    """The load callback's outputs (LOAD_OUTPUTS, in order) for a :class:`LoadResult`."""
    s = r.session
    ex, path_value, ph, lv, st, opts = controls(app, s, r.stages)
    if s.loaded is None and s.failed_spec is None:
        # an expired session: the controls keep showing the tab's net, never the default one
        ex = path_value = ph = lv = st = opts = no_update
    if trigger in OPEN_PATH and r.error is not None and r.error.kind != "address":
        path_value = no_update          # the typed path stays, to be fixed in place
    clear = [None if u == trigger else no_update for u in UPLOAD_IDS]
    sel, expanded = no_update, no_update
    if r.restore is not None:           # loaded from the address: its selection and folding
        if r.restore["selection"] != selection:
            sel = r.restore["selection"]
        if r.restore["expanded"] is not None:
            expanded = r.restore["expanded"]
        elif (s.loaded is not None and isinstance(r.restore["selection"], dict)
              and r.restore["selection"].get("kind") in ("layer", "blob")):
            # a link naming a layer (no open=): the blocks around it open, as a search pick does
            sel_ = r.restore["selection"]
            expanded = opened_around(s.loaded, sel_["kind"], sel_.get("name"), None)
    return (r.version, load_error_box(r.error, describe(s)), load_status(s), opts, *clear,
            ex, path_value, ph, lv, st, sel, expanded)


def first_load(app, sid):
    """A fresh tab's first load, made while its page is sent (inspector/app.py): the default net
    into the new session ``sid``, when it is built ahead already (never a wait: a page held up
    by an Init would show nothing at all).  Returns {(id, prop): value} of the load callback's
    outputs, for the page to carry, or None (the page loads as usual).  The session remembers
    it, so that the page's first load callback does not do it again (``first_load_done``)."""
    spares = getattr(app, "spares", None)
    spec = initial_spec(app)
    if spares is None or not spec.model or not spares.ready(spec):
        return None
    r = handle_load_full(app, sid, None, search="")
    if r.error is not None or r.session.loaded is None:
        return None                      # the page's own load shows what happened
    with app.store.use(sid) as s:
        s.first_view = {"net_version": s.net_version}
    out = load_outputs(app, r, None, None)
    return {key: v for key, v in zip(LOAD_OUTPUTS, out) if v is not no_update}


def first_load_done(app, sid, search):
    """Whether the page's first load callback finds its net loaded with the page already
    (first_load); then it changes nothing.  Once: a later load is a load."""
    if search and search != "?":
        return False
    with app.store.use(sid) as s:
        fv = s.first_view
        if not fv or fv.get("net_version") != s.net_version or fv.get("load_done"):
            return False
        fv["load_done"] = True
        return True


def register(dash_app, app):
    upload_ids = list(UPLOAD_IDS)
    n_out = len(LOAD_OUTPUTS)

    @dash_app.callback(
        Output(ids.STANDIN_BOX, "style"), Output(ids.STANDIN_TEXT, "children"), Output(ids.STANDIN_FORM, "children"),
        Input(ids.PANELS_NET, "data"), Input(ids.LOAD_ERROR, "children"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(3, "describing the stood-in data layers")
    def standin_cb(_nv, _error, sid):
        with app.store.use(sid) as s:
            failed = failed_stand_ins(s)
            g = s.loaded.graph if s.loaded is not None else None
            # what the notice is about: the net that failed, else the loaded one (redrawn only when
            # that changes: a load error of another kind keeps the boxes and what was typed in them)
            about = ("failed", id(s.error)) if failed else ("loaded", s.net_version if g is not None else None)
            if triggered() == ids.LOAD_ERROR and s.standin_about == about:
                raise PreventUpdate
            s.standin_about = about
            if failed:               # a net that did not build in the assumed shapes: ask for them
                text, form = standin_children(failed, failed=True)
                return {"display": "block"}, text, form
            if g is None or not g.stand_ins:
                return {"display": "none"}, None, None
            text, form = standin_children(g.stand_ins, standin_hints(s))
        return {"display": "block"}, text, form

    @dash_app.callback(
        *[Output(i, prop, allow_duplicate=(i, prop) in SHARED_OUTPUTS) for i, prop in LOAD_OUTPUTS],
        Input(ids.EXAMPLE, "value"), Input(ids.MODEL_PATH_OPEN, "n_clicks"), Input(ids.MODEL_PATH, "n_submit"),
        *[Input(u, "contents") for u in upload_ids],
        Input(ids.PHASE, "value"), Input(ids.LEVEL, "value"), Input(ids.STAGES, "value"),
        Input(ids.URL_POP, "data"), Input(ids.SESSION, "data"), Input(ids.STANDIN_APPLY, "n_clicks"),
        State(ids.MODEL_PATH, "value"), *[State(u, "filename") for u in upload_ids],
        State(ids.DEVICE, "value"), State(ids.URL, "search"), State(ids.SELECTION, "data"),
        State({"type": ids.STANDIN_SHAPE, "top": ALL}, "value"), State({"type": ids.STANDIN_SHAPE, "top": ALL}, "id"),
        prevent_initial_call="initial_duplicate",
        running=[(Output(ids.LOAD_BUSY, "style"), {"display": "inline-block"}, {"display": "none"})])
    @guarded(n_out, "loading")
    def load_cb(example, _open, _submit, c_model, c_weights, c_solver, c_mean, phase, level, stages, pop, sid,
                _apply, path, f_model, f_weights, f_solver, f_mean, device, search, selection, shape_values,
                shape_ids):
        trigger = triggered()
        if trigger is None and first_load_done(app, sid, search):
            raise PreventUpdate              # the page came with this net (first_load)
        contents = dict(zip(upload_ids, (c_model, c_weights, c_solver, c_mean)))
        names = dict(zip(upload_ids, (f_model, f_weights, f_solver, f_mean)))
        upload = None
        if trigger in contents:
            if not contents[trigger]:
                raise PreventUpdate
            upload = (contents[trigger], names[trigger])
        if trigger == ids.EXAMPLE and not example:
            raise PreventUpdate              # the list was cleared to show a net opened otherwise
        if trigger == ids.URL_POP:
            if not isinstance(pop, dict):
                raise PreventUpdate
            search = pop.get("search") or ""
        shapes = [(i["top"], v) for i, v in zip(shape_ids or [], shape_values or []) if isinstance(i, dict)]
        r = handle_load_full(app, sid, trigger, device=device, search=search, example=example, path=path,
                             upload=upload, phase=phase, level=level, stages=stages, data_shapes=shapes)
        if upload is not None:
            del upload, contents, c_model, c_weights, c_solver, c_mean
            cleanup.give_memory_back()       # what the upload's request took leaves the server's RSS
        if r.noop:
            if trigger == ids.LEVEL and level is None:      # an emptied (or non-numeric) Level box:
                out = [no_update] * n_out                   # show the loaded net's level again
                out[7 + len(upload_ids)] = int(r.session.loaded.spec.level or 0) if r.session.loaded is not None else 0
                return tuple(out)
            raise PreventUpdate
        return load_outputs(app, r, trigger, selection)

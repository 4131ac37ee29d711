"""The inspector's side of the engine's history and breakpoints
(``engine.instruments.history``, ``engine.instruments.breakpoints``).

- :func:`timeline` gives a loaded net's :class:`Timeline` (made on first use,
  with the session's memory budget for pinned arrays); :func:`record_action`
  adds the steps an action recorded as one timeline step.
- :func:`breakpoints` gives a session's :class:`Breakpoints` (kept across
  loads: conditions name layers and blobs, not objects).
- :func:`run_forward` / :func:`run_backward` run a range, stopping on a hit
  when any breakpoint is enabled or the request's time limit has passed
  (``session.run_limit``, a TimeLimit: the page's ``--run-seconds``), else as
  Net::ForwardFromTo / BackwardFromTo; :func:`watching` does the same around a
  solver iteration.  :func:`check_cost` refuses, before it starts, a run with a
  layer over the server's ``--max-layer-gflop`` (one layer cannot be stopped halfway).
- :func:`latest_records` gives the records the graph shows: the live ones, or
  those as they were after the timeline step being viewed (:func:`shown_steps`:
  the steps its marks come from).
- :func:`stopped` keeps the hit that stopped an action; :func:`reveal` asks the
  page to select, open and centre a layer (a hit's, where a comparison parts).
"""
from engine.instruments import breakpoints as bp
from engine.instruments.history import DEFAULT_BUDGET, Timeline


class RunRefused(ValueError):
    """The action cannot run (no net, bad range, no solver, a layer over the server's limit)."""


ACTIONS = ("forward", "backward", "forward_backward", "solver_iteration")


def timeline(loaded, budget_bytes=DEFAULT_BUDGET):
    if loaded is None:
        return None
    if loaded.timeline is None:
        loaded.timeline = Timeline(loaded.net, budget_bytes=budget_bytes)
    return loaded.timeline


def record_action(loaded, action, steps, label="", hits=()):
    """One timeline step for ``action`` from the Recorder's new StepRecords."""
    if not steps:
        return None
    step = timeline(loaded).record(action, list(steps), label=label, hits=[h for h in hits if h is not None])
    loaded.view_step = None          # a new action shows the live net
    return step


def breakpoints(session, create=True):
    if session.breakpoints is None and create:
        session.breakpoints = bp.Breakpoints()
    return session.breakpoints


def active(bps):
    return bps is not None and bps.active


def _limit(session):
    return getattr(session, "run_limit", None)


def check_cost(session, loaded, lo, hi, what="forward"):
    """Refuse a run of layers ``lo``..``hi`` (either order) when one of them needs more
    FLOPs for its forward pass than ``session.max_layer_flops`` (the server's
    ``--max-layer-gflop``; None: no limit): the time limit stops a run only between
    layers, so no single layer may take longer than the server can wait."""
    cap = getattr(session, "max_layer_flops", None)
    if not cap or loaded is None:
        return
    g = loaded.graph
    a, b = sorted((int(lo), int(hi)))
    for i in range(max(a, 0), min(b, len(g.layers) - 1) + 1):
        layer = g.layers[i]
        flops = (loaded.analysis.get(layer.name) or {}).get("flops")
        if flops and flops > cap:
            raise RunRefused(
                "%s (%s) needs %.4g GFLOP for one forward pass of its batch%s, over this server's "
                "limit of %.4g GFLOP per layer (--max-layer-gflop): the %s does not run here. Run "
                "it with python -m engine (debug, time), or start the server with a higher "
                "--max-layer-gflop (0: no limit)" % (
                    layer.name, layer.type, flops / 1e9, "" if what == "forward" else " (about twice that backward)",
                    cap / 1e9, what))


def run_forward(session, loaded, start, end):
    """(loss, Hit or None).  With enabled breakpoints (or the request's time limit) the
    range stops after the layer that fired (or the first that ended past the limit)."""
    check_cost(session, loaded, start, end)
    bps, limit = breakpoints(session, create=False), _limit(session)
    if not active(bps) and limit is None:
        return float(loaded.net.ForwardFromTo(start, end)), None
    res = bp.run_forward(loaded.net, start, end, breakpoints(session), recorder=loaded.recorder, time_limit=limit)
    return res.loss, res.hit


def run_backward(session, loaded, start, end):
    check_cost(session, loaded, start, end, "backward")
    bps, limit = breakpoints(session, create=False), _limit(session)
    if not active(bps) and limit is None:
        loaded.net.BackwardFromTo(start, end)
        return None
    return bp.run_backward(loaded.net, start, end, breakpoints(session), recorder=loaded.recorder,
                           time_limit=limit).hit


def watching(session, loaded):
    """A context manager that stops layers on a breakpoint hit or past the request's time
    limit (raises :class:`engine.instruments.breakpoints.BreakpointHit`); a no-op without
    either."""
    bps, limit = breakpoints(session, create=False), _limit(session)
    if not active(bps) and limit is None:
        return _Nothing()
    return breakpoints(session).watching(loaded.net, loaded.recorder, limit)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def check_update(session, loaded, update_step):
    bps = breakpoints(session, create=False)
    if not active(bps):
        return None
    return bps.check_update(loaded.net, update_step)


def check_solver(session, iteration, loss, net=None):
    bps = breakpoints(session, create=False)
    if not active(bps):
        return None
    return bps.check_solver(iteration, loss, net)


def stopped(session, hit):
    """Keep ``hit`` (or None) as what stopped the session's last action; a hit asks the
    graph to select and show the layer that fired (:func:`reveal`)."""
    session.last_hit = hit
    session.last_hit_cursor = bool(hit is not None and getattr(session, "cursor_bp", None) is not None
                                   and hit.breakpoint_id == session.cursor_bp)
    if hit is not None and getattr(hit, "layer", None) and session.loaded is not None \
            and session.loaded.graph.has_layer(hit.layer):
        reveal(session, hit.layer)


def reveal(session, layer):
    """Ask the page to select layer ``layer`` in the graph, open the blocks around it and
    centre it (the next graph refresh takes it: :func:`take_reveal`)."""
    session.reveals += 1
    session.reveal = {"kind": "layer", "name": layer, "n": "reveal-%d" % session.reveals}


def take_reveal(session):
    """The pending reveal, once (None when there is none)."""
    r, session.reveal = session.reveal, None
    return r


def hit_text(hit):
    """What the page says when a breakpoint fires."""
    if hit is None:
        return ""
    return hit.describe()


def _view_index(loaded):
    tl = loaded.timeline if loaded is not None else None
    step = loaded.view_step if loaded is not None else None
    if tl is None or step is None or tl.get(step) is None:
        return None
    return step


def latest_records(loaded):
    """{(layer index, direction): LayerRecord} the graph colours show: the live
    Recorder's, or those as they were after the timeline step being viewed."""
    k = _view_index(loaded)
    if k is None:
        return loaded.recorder.latest_layer_records()
    return loaded.timeline.layer_records(k)


def shown_steps(loaded):
    """The StepRecords the graph's marks (where it stopped, what ran) come from: the
    timeline step being viewed, else the live Recorder's."""
    k = _view_index(loaded)
    return loaded.recorder.steps if k is None else loaded.timeline[k].records


def viewed_step(loaded):
    """The timeline Step being viewed, or None (live)."""
    k = _view_index(loaded)
    return None if k is None else loaded.timeline[k]


def recorded_blob_stats(loaded, name, which):
    """(BlobStats or None, pinned array or None) of blob ``name`` as it was after
    the viewed step."""
    k = _view_index(loaded)
    if k is None:
        return None, None
    tl = loaded.timeline
    return tl.blob_stats(k, name, which), tl.pinned_array(k, name, which)

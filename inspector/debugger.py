"""The inspector's side of the engine's history and breakpoints
(``engine.instruments.history``, ``engine.instruments.breakpoints``).

- :func:`timeline` gives a loaded net's :class:`Timeline` (made on first use,
  with the session's memory budget for pinned arrays); :func:`record_action`
  adds the steps an action recorded as one timeline step.
- :func:`breakpoints` gives a session's :class:`Breakpoints` (kept across
  loads: conditions name layers and blobs, not objects).
- :func:`run_forward` / :func:`run_backward` run a range, stopping on a hit
  when any breakpoint is enabled (``RunResult``), else as Net::ForwardFromTo.
- :func:`latest_records` gives the records the graph shows: the live ones, or
  those as they were after the timeline step being viewed.
"""
import importlib

DEFAULT_BUDGET = 256 << 20
ACTIONS = ("forward", "backward", "forward_backward", "solver_iteration")


def _mod(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def history_module():
    return _mod("engine.instruments.history")


def breakpoints_module():
    return _mod("engine.instruments.breakpoints")


def timeline(loaded, budget_bytes=DEFAULT_BUDGET):
    if loaded is None:
        return None
    tl = getattr(loaded, "timeline", None)
    if tl is None:
        mod = history_module()
        if mod is None:
            return None
        tl = mod.Timeline(loaded.net, budget_bytes=budget_bytes)
        loaded.timeline = tl
    return tl


def record_action(loaded, action, steps, label=""):
    """One timeline step for ``action`` from the Recorder's new StepRecords."""
    tl = timeline(loaded)
    if tl is None or not steps:
        return None
    step = tl.record(action, list(steps), label=label)
    loaded.view_step = None          # a new action shows the live net
    return step


def breakpoints(session, create=True):
    bps = getattr(session, "breakpoints", None)
    if bps is None and create:
        mod = breakpoints_module()
        if mod is None:
            return None
        bps = mod.Breakpoints()
        session.breakpoints = bps
    return bps


def active(bps):
    return bps is not None and any(getattr(b, "enabled", True) for b in bps.items)


def run_forward(session, loaded, start, end):
    """(loss or None, Hit or None).  With enabled breakpoints the range runs
    under engine.instruments.breakpoints.run_forward and stops after the layer
    that fired."""
    bps = breakpoints(session, create=False)
    if not active(bps):
        return loaded.net._forward(start, end), None
    res = breakpoints_module().run_forward(loaded.net, start, end, bps, recorder=loaded.recorder)
    return getattr(res, "loss", None), res.hit


def run_backward(session, loaded, start, end):
    bps = breakpoints(session, create=False)
    if not active(bps):
        loaded.net._backward(start, end)
        return None
    res = breakpoints_module().run_backward(loaded.net, start, end, bps, recorder=loaded.recorder)
    return res.hit


def check_solver(session, iteration, loss):
    bps = breakpoints(session, create=False)
    if not active(bps):
        return None
    return bps.check_solver(iteration, loss)


def hit_text(hit):
    """What the page says when a breakpoint fires."""
    if hit is None:
        return ""
    msg = getattr(hit, "message", "") or "break: %s: %s" % (getattr(hit, "layer", "?"), getattr(hit, "condition", "?"))
    where = []
    if getattr(hit, "direction", None):
        where.append(str(hit.direction))
    if getattr(hit, "blob", None):
        where.append("blob %s" % hit.blob)
    if getattr(hit, "value", None) is not None:
        try:
            where.append("value %.6g" % float(hit.value))
        except (TypeError, ValueError):
            pass
    return "⛔ %s%s" % (msg, (" (%s)" % ", ".join(where)) if where else "")


def latest_records(loaded):
    """{(layer index, direction): LayerRecord} the graph colours show: the live
    Recorder's, or those as they were after the timeline step being viewed."""
    step = getattr(loaded, "view_step", None)
    tl = getattr(loaded, "timeline", None)
    if step is None or tl is None or not (0 <= step < len(tl.steps)):
        return loaded.recorder.latest_layer_records()
    out = {}
    for k in range(step + 1):
        for rec in tl[k].records:
            for l in rec.layers:
                out[(l.layer_index, l.direction)] = l
    return out


def viewed_step(loaded):
    """The timeline Step being viewed, or None (live)."""
    step = getattr(loaded, "view_step", None) if loaded is not None else None
    tl = getattr(loaded, "timeline", None) if loaded is not None else None
    if step is None or tl is None or not (0 <= step < len(tl.steps)):
        return None
    return tl[step]


def recorded_blob_stats(loaded, name, which):
    """(BlobStats or None, pinned array or None) of blob ``name`` as it was after
    the viewed step: the last record of that blob in steps 0..view_step."""
    tl = getattr(loaded, "timeline", None)
    step = getattr(loaded, "view_step", None)
    if tl is None or step is None:
        return None, None
    found = None
    for k in range(step + 1):
        for rec in tl[k].records:
            for l in rec.layers:
                for b in l.blobs:
                    if b.role in ("top", "bottom") and b.name == name:
                        s = getattr(b, which, None)
                        if s is not None:
                            found = s
    pinned = None
    st = tl[step]
    for (blob, side), arr in (getattr(st, "pinned", None) or {}).items():
        if blob == name and side == which:
            pinned = arr
    return found, pinned

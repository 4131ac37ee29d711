"""What the stepping controls do to a session's net: set inputs, run
ForwardFromTo / BackwardFromTo on exactly the chosen range, step one layer,
run to a layer, forward+backward, reset, one solver iteration.

Every function takes a :class:`sessions.Session` (the caller holds its lock),
runs in the session's device mode, brings the RunLog up to date from the
Recorder's new records (also when a layer fails half way) and returns a
one-line message for the page.  :func:`run_solver` runs many solver iterations,
taking the session's lock for one iteration at a time so that the page's other
callbacks (graph, curves, details) interleave with the run; it reports progress,
stops when cancelled, when a breakpoint fires, or when the net was replaced.
"""
import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from engine.instruments.breakpoints import BreakpointHit, TimeLimit
from inspector import adapters
from inspector.state import debugger, jobs, training
from inspector.state import inputs as inp

RunRefused = debugger.RunRefused      # the action cannot run (no net, bad range, no solver, a layer too costly)


@contextmanager
def bounded(session, config):
    """A page's run inside: stopped between layers past ``--run-seconds`` (a TimeLimit, as a
    breakpoint stops it) and refused up front for a layer over ``--max-layer-gflop``."""
    seconds, gflop = getattr(config, "run_seconds", 0), getattr(config, "max_layer_gflop", 0)
    session.run_limit = TimeLimit(float(seconds), "--run-seconds %g" % seconds) if seconds else None
    session.max_layer_flops = float(gflop) * 1e9 if gflop else None
    try:
        yield session
    finally:
        session.run_limit = None
        session.max_layer_flops = None


def _loaded(session):
    if session.loaded is None:
        raise RunRefused(session.no_net)
    return session.loaded


def _no_layers(ld, forward=True):
    """A net with no layers (``name: "x"`` alone: Caffe's Init takes it) runs as Caffe's does: its
    Forward is ForwardFromTo(0, -1), which fails ``Check failed: end < layers_.size() (-1 vs. 0)``
    (its Backward, BackwardFromTo(-1, 0), the start's twin); the engine raises that NetError."""
    if not ld.graph.layers:
        if forward:
            ld.net.ForwardFromTo(0, -1)
        else:
            ld.net.BackwardFromTo(-1, 0)


def _mode(session):
    import engine
    return engine.using_mode(session.device)


def _layer_index(graph, name_or_index):
    if isinstance(name_or_index, int):
        if not 0 <= name_or_index < len(graph.layers):
            raise RunRefused("no layer %d (the net has %d)" % (name_or_index, len(graph.layers)))
        return name_or_index
    if not graph.has_layer(name_or_index):
        raise RunRefused("no layer named %r" % (name_or_index,))
    return graph.layer(name_or_index).index


class _Tracking:
    """Brings the RunLog up to date with the steps recorded inside the block,
    and adds them to the timeline as one step of ``action`` (when given), with
    the breakpoint hits the block appended to ``hits``."""

    def __init__(self, session, action=None, label=""):
        self.session = session
        self.loaded = session.loaded
        self.action = action
        self.label = label
        self.hits = []
        steps = self.loaded.recorder.steps
        self.last_id = steps[-1].id if steps else 0

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        ld = self.loaded
        g = ld.graph
        new = [step for step in ld.recorder.steps if step.id > self.last_id]
        if self.action and new:
            label = self.label
            if ld.runlog.inputs_label and self.action != "solver_iteration":
                label += " · " + ld.runlog.inputs_label         # what it ran on: steps on other inputs read apart
            if exc is not None:
                label = "%s (failed: %s)" % (label, type(exc).__name__)
            hits = [h for h in self.hits if h is not None and not _at_cursor(self.session, h)]
            cursor = [h for h in self.hits if _at_cursor(self.session, h)]
            if hits:
                label += " — stopped: " + "; ".join(h.message for h in hits)
            if cursor:
                label += " — at the cursor: " + cursor[0].layer
            debugger.record_action(ld, self.action, new, label, hits)
        for step in new:
            for lr in step.layers:
                if lr.direction == "forward":
                    ld.runlog.ran_forward(lr.layer_index, g.layers[lr.layer_index].top_ids)
                elif lr.direction == "backward":
                    ld.runlog.ran_backward(lr.layer_index)
        self.session.run_version += 1
        return False


# ------------------------------------------------------------------ inputs
def input_shapes(loaded):
    net = loaded.net
    return {name: tuple(net.blobs[name].shape) for name in loaded.graph.inputs}


def apply_inputs(session, settings=None):
    """Fill the net's input blobs (``settings``: InputSettings, default random);
    the graph then shows everything downstream as not run."""
    settings = settings if settings is not None else inp.InputSettings()
    ld = _loaded(session)
    shapes = input_shapes(ld)
    if not shapes:
        raise RunRefused("this net has no Input blobs to fill (its data layers make their own)")
    labels = inp.label_blobs(ld.graph)
    if settings.kind == "random":
        arrays = inp.random_inputs(shapes, labels, settings.value, settings.seed, settings.classes)
        label = "random seed %d%s" % (settings.seed, "" if settings.value == 1 else ", std %g" % settings.value)
    elif settings.kind == "constant":
        arrays = inp.constant_inputs(shapes, labels, settings.value)
        label = "constant %g" % settings.value
    elif settings.kind == "npy":
        path = session.uploads.get("npy")
        if not path:
            raise RunRefused("upload a .npy file first")
        arr = inp.load_npy(path)
        first = _first_data_input(shapes, labels)
        arrays = inp.random_inputs(shapes, labels, 1.0, settings.seed, settings.classes)
        arrays[first] = inp.fit_array(arr, shapes[first], session.upload_names.get("npy", "npy"))
        label = "%s into %s" % (session.upload_names.get("npy", "npy"), first)
    elif settings.kind == "image":
        path = session.uploads.get("image")
        if not path:
            raise RunRefused("upload an image first")
        first = _first_data_input(shapes, labels)
        shape = shapes[first]
        if len(shape) != 4:
            raise RunRefused("input %s has shape %s; an image needs N x C x H x W" % (first, shape))
        im = inp.load_image(path, color=shape[1] == 3)
        x = inp.preprocess_image(im, shape, settings, ld.mean)
        arrays = inp.random_inputs(shapes, labels, 1.0, settings.seed, settings.classes)
        arrays[first] = np.broadcast_to(x, shape).copy()
        label = "image %s into %s" % (session.upload_names.get("image", "image"), first)
    else:
        raise RunRefused("unknown input kind %r" % (settings.kind,))
    with _mode(session):
        for name, arr in arrays.items():
            ld.net.blobs[name].data[...] = arr
    tops = {l.index: l.top_ids for l in ld.graph.layers}
    ld.runlog.inputs_changed(tops, label)
    session.input_settings = dict(settings.__dict__)
    session.cursor_forward = 0
    session.cursor_backward = -1
    session.paused = None
    session.run_version += 1
    return "inputs set: %s" % label


def _first_data_input(shapes, labels):
    for name in shapes:
        if name not in labels:
            return name
    return next(iter(shapes))


# ------------------------------------------------------------------ running
# Where Continue resumes (``session.paused``): a dict with "kind" ("forward", "backward",
# "forward_backward" or "solver"), "next" (the layer to run next), "end" (where the range
# Continue finishes ends), "phase" (forward or backward, for forward_backward and solver),
# "remaining" (solver: iterations of the run left after the stopped one) and "layer" (the
# layer that stopped).  Every run action sets it anew; inputs, reset and loads clear it.
def pause(session, kind, next_=None, end=None, **extra):
    session.paused = dict(kind=kind, next=next_, end=end, **extra)
    return session.paused


def _after_forward(session, g, stop, resume_end):
    """The pause after a forward run that stopped after layer ``stop``."""
    if resume_end is not None and stop + 1 <= resume_end:
        pause(session, "forward", stop + 1, resume_end, layer=g.layers[stop].name)
    else:
        session.paused = None


def forward_range(session, start, end, resume_end=None, label=None):
    """ForwardFromTo(start, end) on exactly that range.  ``resume_end``: where Continue
    runs to after this (default ``end``: a breakpoint stop resumes the same range)."""
    ld = _loaded(session)
    _no_layers(ld)
    s, e = _layer_index(ld.graph, start), _layer_index(ld.graph, end)
    if s > e:
        raise RunRefused("ForwardFromTo needs start <= end (got %d > %d)" % (s, e))
    g = ld.graph
    text = "ForwardFromTo(%d, %d)" % (s, e)
    with _Tracking(session, "forward", label or text) as tr, _mode(session):
        loss, hit = debugger.run_forward(session, ld, s, e)
        tr.hits.append(hit)
    last = _stopped_at(hit, g, e)
    session.cursor_forward = last + 1 if last + 1 < len(g.layers) else 0
    debugger.stopped(session, hit)
    _after_forward(session, g, last, e if resume_end is None else resume_end)
    msg = "%s: %s → %s%s" % (text, g.layers[s].name, g.layers[e].name, _loss_text(ld, s, last, loss))
    if hit is not None:
        msg = "%s — %s" % (msg, _hit_phrase(session, hit, g.layers[last].name))
    return msg


def _at_cursor(session, hit):
    """Whether ``hit`` is Run to cursor's one-shot stop (not a breakpoint of the user's)."""
    return hit is not None and session.cursor_bp is not None and hit.breakpoint_id == session.cursor_bp


def _hit_phrase(session, hit, layer):
    """How a message names a stop: a breakpoint, or Run to cursor's one-shot stop."""
    if _at_cursor(session, hit):
        return "at the cursor: %s" % layer
    return "stopped after %s: %s" % (layer, debugger.hit_text(hit))


def has_loss(graph, start=0, end=None):
    """Whether any layer in start..end has a top with a loss weight."""
    end = len(graph.layers) - 1 if end is None else end
    return any(any(w for w in l.loss_weights) for l in graph.layers[start:end + 1])


def _loss_text(ld, start, end, loss):
    """", loss X" when the range ran a layer with a loss weight (else nothing:
    a net or range without loss has no loss to report)."""
    if not has_loss(ld.graph, start, end):
        return ""
    if loss is None:
        total = 0.0
        for l in ld.graph.layers[start:end + 1]:
            for t, w in zip(l.tops, l.loss_weights):
                if w:
                    total += float(w) * float(np.asarray(ld.net.blobs[t].data).sum())
        loss = total
    return ", loss %.6g" % float(loss)


def _stopped_at(hit, graph, default):
    """The layer index a breakpoint hit stopped after (``default`` without a hit)."""
    if hit is None:
        return default
    name = getattr(hit, "layer", None)
    if isinstance(name, int):
        return name
    if name and graph.has_layer(name):
        return graph.layer(name).index
    return default


def _backward_refusal(ld, s, e):
    """Why BackwardFromTo(s, e) could do nothing, or None when it can."""
    g = ld.graph
    if not any(l.need_backward for l in g.layers[e:s + 1]):
        if not has_loss(g):
            return ("BackwardFromTo(%d, %d) would do nothing: this net has no loss (no top with a loss "
                    "weight) and force_backward is off, so no layer needs backward. Add a loss layer, "
                    "set loss_weight on a top, or force_backward: true." % (s, e))
        return ("BackwardFromTo(%d, %d) would do nothing: no layer from %s to %s needs backward "
                "(see each layer's 'needs backward' reason)." % (s, e, g.layers[e].name, g.layers[s].name))
    return None


def _stale_note(ld, s, e):
    """A warning when the layers about to run backward never ran forward since
    the inputs changed: Caffe runs them anyway, on zero or stale tops."""
    t_in = ld.runlog.input_time or 0
    missing = [l.name for l in ld.graph.layers[e:s + 1]
               if l.need_backward and l.index not in ld.runlog.input_layers
               and ld.runlog.forward.get(l.index, -1) < t_in]
    if not missing:
        return ""
    return (" (⚠ %s did not run forward since the inputs changed: these gradients come from zero or stale "
            "tops — run Forward first)" % (missing[0] if len(missing) == 1 else "%d layers" % len(missing)))


def backward_range(session, start, end, resume_end=None, label=None):
    """BackwardFromTo(start, end): from the later layer down to the earlier.
    ``resume_end``: where Continue runs down to after a stop (default ``end``)."""
    ld = _loaded(session)
    _no_layers(ld, forward=False)
    s, e = _layer_index(ld.graph, start), _layer_index(ld.graph, end)
    if s < e:
        s, e = e, s
    why = _backward_refusal(ld, s, e)
    if why:
        raise RunRefused(why)
    g = ld.graph
    note = _stale_note(ld, s, e)
    text = "BackwardFromTo(%d, %d)" % (s, e)
    with _Tracking(session, "backward", label or text) as tr, _mode(session):
        hit = debugger.run_backward(session, ld, s, e)
        tr.hits.append(hit)
    last = _stopped_at(hit, g, e)
    session.cursor_backward = last - 1
    debugger.stopped(session, hit)
    resume_end = e if resume_end is None else resume_end
    if last - 1 >= resume_end:
        pause(session, "backward", last - 1, resume_end, layer=g.layers[last].name)
    else:
        session.paused = None
    msg = "%s: %s → %s%s" % (text, g.layers[s].name, g.layers[e].name, note)
    if hit is not None:
        msg = "%s — %s" % (msg, _hit_phrase(session, hit, g.layers[last].name))
    return msg


def _forward_end(session, i):
    """Where Continue runs to after a step from layer ``i``: the end of the range a
    breakpoint stopped (when the step goes on from there), else the last layer."""
    p = session.paused
    n = len(session.loaded.graph.layers)
    if p and p["kind"] == "forward" and p["next"] == i:
        return p["end"]
    return n - 1


def step_forward(session):
    """Forward one layer drawn in the graph: the layer at the cursor with the inserted
    splits right after it (they copy its output, and the graph draws them folded into
    it), or, when the cursor is on a split, that split and the layer after it."""
    ld = _loaded(session)
    _no_layers(ld)
    layers = ld.graph.layers
    i = session.cursor_forward if 0 <= session.cursor_forward < len(layers) else 0
    e = i
    while layers[e].is_split and e + 1 < len(layers):
        e += 1
    while e + 1 < len(layers) and layers[e + 1].is_split:
        e += 1
    return "step: " + forward_range(session, i, e, resume_end=_forward_end(session, e))


def step_over(session, expanded=None, selection=None):
    """Step over a folded block: from the step cursor, every layer of the folded block
    drawn there (or of the block selected, when it lies ahead) as one step; a layer
    outside any folded block is one step, as Step ▶."""
    from inspector.state import presenter
    ld = _loaded(session)
    g = ld.graph
    i = session.cursor_forward if 0 <= session.cursor_forward < len(g.layers) else 0
    blocks = presenter.blocks(ld)
    opened = set(presenter.expanded_set(ld, expanded))
    target = None
    if isinstance(selection, dict) and selection.get("kind") == "block":
        target = next((b for b in blocks if b.id == selection.get("name") or b.name == selection.get("name")), None)
        if target is not None and max(target.layers) < i:
            target = None                      # behind the cursor: the block at the cursor instead
    if target is None:
        # the outermost folded block holding the cursor's layer: the node the graph draws there
        folded = [b for b in blocks if i in b.layers and b.id not in opened]
        target = max(folded, key=lambda b: len(b.layers)) if folded else None
    e = max(target.layers) if target is not None else i   # a selected block ahead: the layers before it too
    label = "step over %s: ForwardFromTo(%d, %d)" % (target.name, i, e) if target is not None else None
    msg = forward_range(session, i, e, resume_end=max(e, _forward_end(session, i)), label=label)
    return ("step over %s (%d layers): " % (target.name, e - i + 1) if target is not None else "step: ") + msg


def step_backward(session):
    ld = _loaded(session)
    _no_layers(ld, forward=False)
    n = len(ld.graph.layers)
    i = session.cursor_backward if 0 <= session.cursor_backward < n else n - 1
    p = session.paused
    resume_end = p["end"] if p and p["kind"] == "backward" and p["next"] == i else 0
    if not ld.graph.layers[i].need_backward:
        why = _backward_refusal(ld, n - 1, 0)
        if why:
            raise RunRefused(why)
    msg = backward_range(session, i, i, resume_end=resume_end) if ld.graph.layers[i].need_backward else \
        "BackwardFromTo(%d, %d): %s → %s" % (i, i, ld.graph.layers[i].name, ld.graph.layers[i].name)
    session.cursor_backward = i - 1 if i > 0 else n - 1
    if not ld.graph.layers[i].need_backward:
        msg += " (needs no backward: skipped, as in Caffe)"
        if i - 1 >= resume_end:
            pause(session, "backward", i - 1, resume_end, layer=ld.graph.layers[i].name)
        else:
            session.paused = None
    return "step back: " + msg


def run_to(session, layer):
    """Run to cursor.  Stopped (a breakpoint, a step): Continue with a one-shot stop
    after ``layer`` (forward or backward, wherever it comes next; the run goes to its
    end when it does not pass there).  Otherwise: forward from the step cursor (or from
    0 when the layer is behind it) up to and including ``layer``."""
    ld = _loaded(session)
    e = _layer_index(ld.graph, layer)
    name = ld.graph.layers[e].name
    p = session.paused
    if p is not None and (p["kind"] != "solver" or p.get("phase") is not None):
        return "run to cursor %s: " % name + continue_run(session, stop_at=name)
    s = session.cursor_forward if 0 <= session.cursor_forward <= e else 0
    msg = forward_range(session, s, e, resume_end=len(ld.graph.layers) - 1)
    if session.paused is not None and session.paused.get("next") == e + 1 and " — " not in msg:
        msg += " — at the cursor: %s" % name        # it stopped where it was asked to, as a one-shot stop reads
    return "run to cursor %s: " % name + msg


class _StopAt:
    """Run to cursor's one-shot breakpoint (``layer=NAME``) around a run; it leaves no
    trace in the session's breakpoints (ids, hits)."""

    def __init__(self, session, layer):
        self.session, self.layer = session, layer

    def __enter__(self):
        if self.layer is None:
            return self
        bps = debugger.breakpoints(self.session)
        self.next_id = bps._next
        self.session.cursor_bp = bps.add("layer=%s" % self.layer)
        return self

    def __exit__(self, *exc):
        if self.layer is None:
            return False
        bps = debugger.breakpoints(self.session)
        bid = self.session.cursor_bp
        bps.items = [b for b in bps.items if b.id != bid]
        bps.hits[:] = [h for h in bps.hits if h.breakpoint_id != bid]
        if bps._next == bid + 1:
            bps._next = self.next_id
        self.session.cursor_bp = None
        return False


def continue_run(session, stop_at=None):
    """Continue: resume after the layer that stopped, to the next breakpoint hit or the
    end of what was running (a forward or backward range, Forward + Backward, the steps'
    run to the net's end); ``stop_at``: a layer to stop after too (Run to cursor).  A
    stopped solver iteration: :func:`solver_step_checked` with ``resume`` (the page runs
    the rest of a long run as a job)."""
    p = session.paused
    if p is None:
        raise RunRefused("nothing to continue: no run is stopped (Forward range, Step ▶, Forward + Backward "
                         "or a solver step stop at a breakpoint; then Continue resumes after that layer)")
    kind = p["kind"]
    with _StopAt(session, stop_at):
        if kind == "forward":
            return "continue: " + forward_range(session, p["next"], p["end"], resume_end=p["end"],
                                                label="continue: ForwardFromTo(%d, %d)" % (p["next"], p["end"]))
        if kind == "backward":
            return "continue: " + backward_range(session, p["next"], p["end"], resume_end=p["end"],
                                                 label="continue: BackwardFromTo(%d, %d)" % (p["next"], p["end"]))
        if kind == "forward_backward":
            if p["phase"] == "forward":
                return "continue: " + forward_backward(session, fwd_from=p["next"])
            return "continue: " + forward_backward(session, bwd_from=p["next"])
        if kind == "solver":
            return "continue: " + solver_step_checked(session, resume=p)[0]
    raise RunRefused("cannot continue a %s" % kind)


def forward_backward(session, fwd_from=0, bwd_from=None):
    """Forward + Backward over the whole net (Continue: from layer ``fwd_from`` on, or
    only the backward from ``bwd_from`` down)."""
    ld = _loaded(session)
    g = ld.graph
    n = len(g.layers)
    note = ""
    if not has_loss(g) and not any(l.need_backward for l in g.layers):
        note = " (Backward did nothing: the net has no loss and force_backward is off)"
    label = "Forward + Backward" if fwd_from == 0 and bwd_from is None else \
        "continue: Forward + Backward from %s %s" % ("layer %d" % (fwd_from if bwd_from is None else bwd_from),
                                                    "forward" if bwd_from is None else "backward")
    loss = None
    with _Tracking(session, "forward_backward", label) as tr, _mode(session):
        hit = None
        if bwd_from is None:
            if fwd_from <= n - 1:
                loss, hit = debugger.run_forward(session, ld, fwd_from, n - 1)
            where = "forward"
            if hit is None and n:
                hit = debugger.run_backward(session, ld, n - 1, 0)
                where = "backward"
        else:
            where = "backward"
            if bwd_from >= 0:
                hit = debugger.run_backward(session, ld, bwd_from, 0)
        tr.hits.append(hit)
    session.cursor_forward = 0
    session.cursor_backward = -1
    debugger.stopped(session, hit)
    session.paused = None
    if fwd_from == 0 and bwd_from is None:
        msg = "Forward + Backward%s%s" % (_loss_text(ld, 0, n - 1, loss).replace(", ", ": ", 1), note)
    else:
        msg = label[len("continue: "):] + note
    if hit is not None:
        last = _stopped_at(hit, g, n - 1)
        nxt = last + 1 if where == "forward" else last - 1
        if where == "forward" or nxt >= 0:          # after the forward, the whole backward remains
            pause(session, "forward_backward", nxt, 0 if where == "backward" else n - 1, phase=where,
                  layer=g.layers[last].name)
        if _at_cursor(session, hit):
            msg = "Forward + Backward in %s, at the cursor: %s" % (where, g.layers[last].name)
        else:
            msg = "Forward + Backward stopped in %s after %s: %s" % (where, g.layers[last].name,
                                                                    debugger.hit_text(hit))
    return msg


def reset(session):
    """Zero every activation and gradient (params kept, param diffs cleared),
    forget the records, put the inputs back."""
    ld = _loaded(session)
    inputs = set(ld.graph.inputs)
    with _mode(session):
        for name, blob in ld.net.blobs.items():
            if name not in inputs:
                blob.data[...] = 0
            blob.diff[...] = 0
        ld.net.ClearParamDiffs()
    # loss weights live in the loss tops' diffs (as in Caffe): put them back
    for l in ld.graph.layers:
        for t, w in zip(l.top_ids, l.loss_weights):
            if w:
                ld.net.blobs[ld.graph.blobs[t].name].diff[...] = w
    ld.recorder.clear()
    input_time = ld.runlog.input_time
    label = ld.runlog.inputs_label
    ld.runlog.reset()
    if input_time is not None:
        ld.runlog.inputs_changed({l.index: l.top_ids for l in ld.graph.layers}, label)
    session.cursor_forward = 0
    session.cursor_backward = -1
    session.paused = None
    session.run_version += 1
    return "reset: activations and gradients zeroed, records cleared"


def solver_step(session):
    return solver_step_checked(session)[0]


def solver_step_checked(session, resume=None, remaining=0):
    """One solver iteration (forward, backward, update; the test net when the
    solver file's test_interval says so): (message, breakpoint Hit or None).
    The training view's curves and the timeline get the iteration.  ``resume``: a
    solver pause (``session.paused``): the stopped iteration goes on after the layer
    that stopped.  ``remaining``: iterations of the run left after this one (what a
    stop's pause keeps for Continue)."""
    ld = _loaded(session)
    if ld.solver is None:
        raise RunRefused(ld.solver_note or "load a solver prototxt to run solver iterations")
    it = int(ld.solver.iter)
    resumed = resume is not None
    if resume is not None:
        remaining = int(resume.get("remaining", 0))
        if resume.get("phase") is None:
            resume = None                      # stopped between iterations: a whole new one
    label = "solver iteration %d" % it if resume is None else \
        "continue: solver iteration %d from %s %s" % (it, resume["layer"], resume["phase"])
    debugger.check_cost(session, ld, 0, len(ld.graph.layers) - 1, "solver iteration")
    with _Tracking(session, "solver_iteration", label) as tr, _mode(session):
        try:
            with debugger.watching(session, ld):
                point, update = training.solver_iteration(ld, resume=_resumer(ld, resume))
        except BreakpointHit as stop:       # stopped inside the iteration's forward or backward
            tr.hits.append(stop.hit)
            debugger.stopped(session, stop.hit)
            session.cursor_forward, session.cursor_backward = 0, -1
            li = stop.hit.layer_index
            pause(session, "solver", li + 1 if stop.hit.direction == "forward" else li - 1, None,
                  phase=stop.hit.direction, layer=stop.hit.layer, index=li, remaining=remaining)
            if _at_cursor(session, stop.hit):
                return ("solver iteration %d in %s, at the cursor: %s (before the update)" % (
                    it, stop.hit.direction, stop.hit.layer), stop.hit)
            return ("solver iteration %d stopped in %s after %s, before the update: %s" % (
                it, stop.hit.direction, stop.hit.layer, debugger.hit_text(stop.hit)), stop.hit)
        tested = training.maybe_test(session, ld)
        hit = debugger.check_update(session, ld, update) or \
            debugger.check_solver(session, point.iteration, point.loss, ld.net)
        tr.hits.append(hit)
    ld.runlog.params_changed()
    session.cursor_forward = 0
    session.cursor_backward = -1
    debugger.stopped(session, hit)
    # what is left of the run for Continue: after a stop, or after a resumed iteration run on its own
    session.paused = pause(session, "solver", None, None, phase=None, layer=None, remaining=remaining) \
        if (hit is not None or resumed) and remaining > 0 else None
    msg = "solver iteration %d (now iter %d): loss %.6g (smoothed %.6g), lr %s" % (
        point.iteration, ld.solver.iter, point.loss, point.smoothed,
        "%.6g" % point.lr if point.lr is not None else "—")
    if isinstance(tested, training.StoppedTestPass):
        msg += "; " + tested.text()
    elif tested:
        msg += "; test: " + ", ".join("%s %.4g" % kv for kv in tested.items())
    if hit is not None:
        msg += " — " + debugger.hit_text(hit)
    return msg, hit


def _resumer(ld, resume):
    """What the resumed iteration does in place of Net::ForwardBackward: the rest of the
    forward after the layer that stopped (its loss added to the layers' before it), then
    the backward; or only the rest of the backward.  None: a whole iteration."""
    if resume is None:
        return None
    from engine.instruments.breakpoints import partial_loss
    net = ld.net
    n = len(net.layers)
    phase, nxt = resume["phase"], int(resume["next"])

    def forward_backward():
        if phase == "forward":
            loss = partial_loss(net, 0, nxt - 1)
            if nxt <= n - 1:
                loss += float(net.ForwardFromTo(nxt, n - 1))
            net.Backward()
            return loss
        if nxt >= 0:
            net.BackwardFromTo(nxt, 0)
        return partial_loss(net, 0, n - 1)
    return forward_backward


def set_device(session, device):
    if device == "GPU" and not adapters.gpu_available():
        raise RunRefused("no GPU: CuPy with a CUDA device is not available")
    session.device = "GPU" if device == "GPU" else "CPU"
    return "device: %s" % session.device


# ------------------------------------------------------------------ many iterations
@dataclass
class RunOutcome:
    done: int
    requested: int
    message: str
    stopped: str = ""        # "", "cancelled", "breakpoint", "error", "net changed"


def run_solver(store, sid, iterations, report=None, token=None, iterate=None, resume=None):
    """Run ``iterations`` solver iterations on session ``sid``, one lock at a
    time.  ``iterate(session) -> (message, hit)`` runs one (default:
    :func:`solver_step_checked`, told how many iterations remain after it,
    for Continue after a stop); ``report(done, total, text)``.  ``resume``: the
    first iteration is one a breakpoint stopped, going on after that layer (Continue)."""
    n_total = max(int(iterations), 0)
    if iterate is None:
        started = [0]

        def iterate(s):
            started[0] += 1
            return solver_step_checked(s, resume=resume if started[0] == 1 else None,
                                       remaining=max(n_total - started[0], 0))
    token = token or jobs.current_token()
    n = max(int(iterations), 0)
    with store.use(sid) as s:
        loaded = s.loaded
        if loaded is None:
            return RunOutcome(0, n, "⚠ no net is loaded", "error")
        if loaded.solver is None:
            return RunOutcome(0, n, "⚠ " + (loaded.solver_note or "load a solver prototxt to train"), "error")
        s.job = {"kind": "solver", "token": token, "started": time.time()}
    done = 0
    msg = ""
    stopped = ""
    try:
        for _ in range(n):
            if token.cancelled:
                stopped = "cancelled"
                break
            with store.use(sid) as s:
                if s.loaded is not loaded:
                    stopped = "net changed"
                    break
                try:
                    msg, hit = iterate(s)
                except Exception as exc:  # noqa: BLE001 - a layer failed: shown, the session goes on
                    logging.getLogger("inspector").exception("solver iteration failed")
                    s.run_version += 1
                    msg, stopped = "⚠ %s: %s" % (type(exc).__name__, exc), "error"
                    break
                done += 1
                if hit is not None:
                    stopped = "breakpoint"
                    break
                last = loaded.training.train[-1] if loaded.training and loaded.training.train else None
            # the tab's other callbacks (findings, details...) that wait for this session get in
            # between two iterations: a lock is not fair, and this thread would take it again at once
            store.let_in(sid)
            if report is not None:
                report(done, n, "iteration %d, loss %s" % (last.iteration, _g(last.loss)) if last else "")
    finally:
        with store.use(sid) as s:
            if s.job is not None and s.job.get("token") is token:
                s.job = None
    if stopped == "cancelled":
        msg = "solver run cancelled after %d of %d iterations%s" % (done, n, (" — " + msg) if msg else "")
    elif stopped == "net changed":
        msg = "solver run stopped after %d of %d iterations: another net was loaded" % (done, n)
    elif stopped == "":
        msg = "solver run: %d iterations — %s" % (done, msg)
    with store.use(sid) as s:
        s.message = msg
    return RunOutcome(done, n, msg, stopped)



def _g(v):
    if v is None:
        return "—"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return "%.6g" % v

"""What the stepping controls do to a session's net: set inputs, run
ForwardFromTo / BackwardFromTo on exactly the chosen range, step one layer,
run to a layer, forward+backward, reset, one solver iteration.

Every function takes a :class:`sessions.Session` (the caller holds its lock),
runs in the session's device mode, brings the RunLog up to date from the
Recorder's new records (also when a layer fails half way) and returns a
one-line message for the page.
"""
import numpy as np

from inspector import adapters, inputs as inp


class RunRefused(ValueError):
    """The action cannot run (no net, bad range, no solver)."""


def _loaded(session):
    if session.loaded is None:
        raise RunRefused("no net is loaded (if this page sat idle, its session expired: reload the page)")
    return session.loaded


def _mode(session):
    from engine.core import backend
    return backend.using_mode(session.device)


def _layer_index(graph, name_or_index):
    if isinstance(name_or_index, int):
        if not 0 <= name_or_index < len(graph.layers):
            raise RunRefused("no layer %d (the net has %d)" % (name_or_index, len(graph.layers)))
        return name_or_index
    if not graph.has_layer(name_or_index):
        raise RunRefused("no layer named %r" % (name_or_index,))
    return graph.layer(name_or_index).index


class _Tracking:
    """Brings the RunLog up to date with the steps recorded inside the block."""

    def __init__(self, session):
        self.session = session
        self.loaded = session.loaded
        steps = self.loaded.recorder.steps
        self.last_id = steps[-1].id if steps else 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        ld = self.loaded
        g = ld.graph
        for step in ld.recorder.steps:
            if step.id <= self.last_id:
                continue
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


def apply_inputs(session, settings=inp.InputSettings()):
    """Fill the net's input blobs; the graph then shows everything downstream
    as not run."""
    ld = _loaded(session)
    shapes = input_shapes(ld)
    if not shapes:
        raise RunRefused("this net has no Input blobs to fill (its data layers make their own)")
    labels = inp.label_blobs(ld.graph)
    if settings.kind == "random":
        arrays = inp.random_inputs(shapes, labels, settings.value, settings.seed, settings.classes)
        label = "random N(0, %g²), seed %d" % (settings.value, settings.seed)
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
    session.run_version += 1
    return "inputs set: %s" % label


def _first_data_input(shapes, labels):
    for name in shapes:
        if name not in labels:
            return name
    return next(iter(shapes))


# ------------------------------------------------------------------ running
def forward_range(session, start, end):
    """ForwardFromTo(start, end) on exactly that range."""
    ld = _loaded(session)
    s, e = _layer_index(ld.graph, start), _layer_index(ld.graph, end)
    if s > e:
        raise RunRefused("ForwardFromTo needs start <= end (got %d > %d)" % (s, e))
    with _Tracking(session), _mode(session):
        loss = ld.net._forward(s, e)
    session.cursor_forward = e + 1 if e + 1 < len(ld.graph.layers) else 0
    return "ForwardFromTo(%d, %d): %s → %s, loss %.6g" % (
        s, e, ld.graph.layers[s].name, ld.graph.layers[e].name, float(loss))


def backward_range(session, start, end):
    """BackwardFromTo(start, end): from the later layer down to the earlier."""
    ld = _loaded(session)
    s, e = _layer_index(ld.graph, start), _layer_index(ld.graph, end)
    if s < e:
        s, e = e, s
    with _Tracking(session), _mode(session):
        ld.net._backward(s, e)
    session.cursor_backward = e - 1
    return "BackwardFromTo(%d, %d): %s → %s" % (s, e, ld.graph.layers[s].name, ld.graph.layers[e].name)


def step_forward(session):
    ld = _loaded(session)
    i = session.cursor_forward if 0 <= session.cursor_forward < len(ld.graph.layers) else 0
    return "step: " + forward_range(session, i, i)


def step_backward(session):
    ld = _loaded(session)
    n = len(ld.graph.layers)
    i = session.cursor_backward if 0 <= session.cursor_backward < n else n - 1
    msg = backward_range(session, i, i)
    session.cursor_backward = i - 1 if i > 0 else n - 1
    if not ld.graph.layers[i].need_backward:
        msg += " (needs no backward: skipped, as in Caffe)"
    return "step back: " + msg


def run_to(session, layer):
    """Forward from the step cursor (or from 0 when the layer is behind it) up
    to and including ``layer``."""
    ld = _loaded(session)
    e = _layer_index(ld.graph, layer)
    s = session.cursor_forward if 0 <= session.cursor_forward <= e else 0
    return "run to %s: " % ld.graph.layers[e].name + forward_range(session, s, e)


def forward_backward(session):
    ld = _loaded(session)
    with _Tracking(session), _mode(session):
        loss = ld.net.ForwardBackward()
    session.cursor_forward = 0
    session.cursor_backward = -1
    return "Forward + Backward: loss %.6g" % float(loss)


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
    session.run_version += 1
    return "reset: activations and gradients zeroed, records cleared"


def solver_step(session):
    ld = _loaded(session)
    if ld.solver is None:
        raise RunRefused(ld.solver_note or "load a solver prototxt to run solver iterations")
    with _Tracking(session), _mode(session):
        it, loss = adapters.solver_iteration(ld.solver)
    ld.runlog.params_changed()
    session.cursor_forward = 0
    session.cursor_backward = -1
    return "solver iteration %s: smoothed loss %s" % (it, "%.6g" % loss if loss is not None else "—")


def set_device(session, device):
    if device == "GPU" and not adapters.gpu_available():
        raise RunRefused("no GPU: CuPy with a CUDA device is not available")
    session.device = "GPU" if device == "GPU" else "CPU"
    return "device: %s" % session.device

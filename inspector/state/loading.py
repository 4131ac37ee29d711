"""Where nets come from: paths under the model root, uploads, and building a
:class:`sessions.Loaded` from a :class:`sessions.ModelSpec`.

- :func:`resolve_model_path` refuses any path that escapes ``--model-root``
  (``..``, absolute paths elsewhere, symlinks pointing out).
- :func:`save_upload` decodes a ``dcc.Upload`` data URL into the session's
  upload folder, refusing files over the size limit.
- :func:`build` reads the prototxt, builds the Net (or the solver and its
  net), loads weights and the mean file, attaches a Recorder.  Python layers
  are refused unless the server allows them.
- :func:`load_error` turns any failure into a :class:`sessions.LoadError`
  (file, line, column, layer, blob).
"""
import base64
import binascii
import os
import re
import threading
from collections import OrderedDict

import numpy as np

from inspector import adapters

from ..views.model import build_graph, stand_in_infos
from ..views.run_state import RunLog
from .sessions import Loaded, LoadError


class PathRefused(ValueError):
    """A path outside the model root, or an upload that is not acceptable."""

    layer = None
    blob = None


class FileAccessRefused(PathRefused):
    """A model from the page names a file outside the model root, or writes files."""

    def __init__(self, message, layer=None):
        super().__init__(message)
        self.layer = layer


# string fields of layer settings that name files the layer opens
FILE_FIELDS = ("source", "mean_file", "meanfile", "file_name", "root_folder")
WRITING_TYPES = ("HDF5Output",)


def _file_fields(msg, prefix=""):
    """(field path, value) of every file-naming string set inside ``msg``."""
    out = []
    for fd, value in msg.ListFields():
        name = prefix + fd.name
        if fd.type == fd.TYPE_MESSAGE:
            items = value if _repeated(fd) else [value]
            for k, v in enumerate(items):
                out += _file_fields(v, "%s%s." % (name, "[%d]" % k if _repeated(fd) else ""))
        elif fd.type == fd.TYPE_STRING and fd.name in FILE_FIELDS:
            for v in (value if _repeated(fd) else [value]):
                if v:
                    out.append((name, v))
    return out


def _repeated(fd):
    if hasattr(fd, "is_repeated"):          # protobuf >= 5
        return bool(fd.is_repeated)
    return fd.label == fd.LABEL_REPEATED


def surviving_layers(param, state):
    """The layers of ``param`` that the NetState ``state`` = (phase, level,
    stages) keeps, as Net(model, phase, level, stages) filters them (the
    stages are added to the file's own)."""
    import engine
    phase, level, stages = state
    p = type(param)()
    p.CopyFrom(param)
    p.state.phase = int(phase)
    p.state.level = int(level)
    for s in stages:
        p.state.stage.append(s)
    kept, _dropped = engine.filter_net(p, log=False)
    return list(kept.layer)


def _opened_at(value, cwd=None):
    """Where Caffe opens the file ``value``: relative paths from the working directory."""
    return os.path.join(cwd or os.getcwd(), value) if not os.path.isabs(value) else value


def check_file_access(param, model_root, state=None, skip=None):
    """Refuse a net (from the page) whose layers would write files, or read
    files outside the model root (paths resolve against the working
    directory, as Caffe opens them).  With ``state`` (phase, level, stages),
    only the layers that NetState keeps are checked: a layer filtered out is
    never built, so whatever it names is never opened.  ``skip(lp)``: layers
    that will not be built as written (a data layer stood in, which opens nothing)."""
    root = os.path.realpath(model_root)
    layers = param.layer if state is None else surviving_layers(param, state)
    for lp in layers:
        if skip is not None and skip(lp):
            continue
        if lp.type in WRITING_TYPES:
            raise FileAccessRefused("layer '%s' (%s) writes files on the server; refused for models opened "
                                    "from the page" % (lp.name, lp.type), layer=lp.name)
        for name, value in _file_fields(lp):
            real = os.path.realpath(_opened_at(value))
            if os.path.commonpath([root, real]) != root:
                how = "" if os.path.isabs(value) else \
                    " (relative paths are opened from the server's working directory, %s, as Caffe opens them)" \
                    % os.getcwd()
                raise FileAccessRefused("layer '%s' reads %s = %r, which is %s%s: outside the model root %s"
                                        % (lp.name, name, value, real, how, root), layer=lp.name)


DATA_TYPES = ("Data", "ImageData", "HDF5Data", "WindowData")     # the layers whose source Init opens


def relative_sources_found(param, model_path=None, model_root=None, cwd=None, private_model_dir=False,
                           confined=False):
    """Relative data sources that are not where Caffe opens them (the working directory) but
    beside the prototxt or under the model root: each such ``source`` in ``param`` (a copy
    the caller builds from) is rewritten to where it is; returns one line per source found,
    saying where it was looked for and where it is.  ``private_model_dir``: the model is an
    upload (its folder is the server's, not the user's: not looked in); ``confined``: a
    model from the page, whose files must lie under the model root (``../`` is not followed out)."""
    cwd = cwd or os.getcwd()
    root = os.path.realpath(model_root) if model_root else None
    places = []
    if model_path and not private_model_dir:
        places.append(("beside the prototxt", os.path.dirname(os.path.abspath(model_path))))
    if model_root:
        places.append(("under the model root", os.path.realpath(model_root)))
    found = []
    for lp in param.layer:
        if lp.type not in DATA_TYPES:
            continue
        for name, value in _file_fields(lp):
            if not name.endswith(".source") or os.path.isabs(value) or os.path.exists(_opened_at(value, cwd)):
                continue
            for where, folder in places:
                at = os.path.join(folder, value)
                if confined and (root is None or os.path.commonpath([root, os.path.realpath(at)]) != root):
                    continue
                if os.path.exists(at):
                    getattr(lp, name.split(".")[0]).source = at
                    found.append("layer '%s' %s = %r: not in the server's working directory (%s, where Caffe "
                                 "opens a relative path); found %s, %s (used)" % (lp.name, name, value, cwd,
                                                                                   where, at))
                    break
    return found


def relative_path_hint(param, layer, model_path=None, cwd=None, private_model_dir=False):
    """Where the missing relative files of ``layer`` were looked for (the
    server's working directory, as Caffe opens them), and whether they are in
    the model's folder instead; None when the layer names no missing relative
    file.  ``private_model_dir``: the model is an upload (its folder is the
    server's business, not named)."""
    cwd = cwd or os.getcwd()
    model_dir = os.path.dirname(os.path.abspath(model_path)) if model_path else None
    lines = []
    for lp in param.layer:
        if lp.name != layer:
            continue
        for name, value in _file_fields(lp):
            if os.path.isabs(value) or name.endswith("root_folder"):
                continue
            at = _opened_at(value, cwd)
            if os.path.exists(at):
                continue
            line = ("%s = %r is relative: it was looked for at %s (relative paths are opened from the server's "
                    "working directory, %s, as Caffe opens them)" % (name, value, at, cwd))
            if model_dir and not private_model_dir:
                beside = os.path.join(model_dir, value)
                if os.path.exists(beside):
                    line += ("; it is in the model's folder, %s: start the server in %s, or write the path "
                             "relative to %s or as an absolute path" % (beside, model_dir, cwd))
                else:
                    line += "; it is not in the model's folder (%s) either" % model_dir
            elif private_model_dir:
                line += "; an uploaded net's data files must be on the server: open the model by path instead"
            lines.append(line)
    return "\n".join(lines) or None


def root_reader(model_root):
    """``can_read(path)`` for structure-only nets opened from the page: None when the
    page may read ``path`` (it exists under the model root), else why not."""
    root = os.path.realpath(model_root)

    def can_read(path):
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root:
            return "outside the model root (not read)"
        return None if os.path.exists(real) else "not found"
    return can_read


def resolve_model_path(path, root):
    """The real path of ``path`` (relative to ``root`` unless absolute) if it
    lies inside ``root``; raises PathRefused otherwise."""
    if not path or not str(path).strip():
        raise PathRefused("no path given")
    p = str(path).strip()
    if "\0" in p:
        raise PathRefused("%r contains a NUL byte (\\x00), which no file name can hold: refused" % p)
    root_real = os.path.realpath(root)
    full = p if os.path.isabs(p) else os.path.join(root_real, p)
    real = os.path.realpath(full)
    if os.path.commonpath([root_real, real]) != root_real:
        raise PathRefused("%s is outside the model root %s" % (p, root_real))
    if not os.path.exists(real):
        raise PathRefused("%s does not exist (under the model root %s)" % (p, root_real))
    if not os.path.isfile(real):
        raise PathRefused("%s is not a file" % p)
    return real


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(name):
    base = os.path.basename(str(name or "upload")).strip() or "upload"
    base = _SAFE.sub("_", base).lstrip(".") or "upload"
    return base[:120]


def too_large_message(size, max_bytes):
    """What the page says of an upload over ``--max-upload-mb`` (``size``: its bytes, or of the
    request that carried it; None: not known)."""
    of = "" if size is None else " of %s bytes" % "{:,}".format(int(size))
    return ("upload%s larger than the limit of %d bytes (--max-upload-mb %g): refused before it was read"
            % (of, max_bytes, max_bytes / 2 ** 20))


def decode_upload(contents, max_bytes):
    """The bytes of a dcc.Upload ``contents`` data URL (size-checked)."""
    if not contents or "," not in contents:
        raise PathRefused("empty upload")
    header, b64 = contents.split(",", 1)
    # base64 is 4/3 the size: refuse before decoding anything too large
    if len(b64) * 3 // 4 > max_bytes + 3:
        raise PathRefused(too_large_message(None, max_bytes))
    try:
        data = base64.b64decode(b64, validate=False)
    except (binascii.Error, ValueError) as e:
        raise PathRefused("upload is not valid base64: %s" % e) from None
    if len(data) > max_bytes:
        raise PathRefused(too_large_message(len(data), max_bytes))
    return data


def save_upload(session, kind, filename, contents, max_bytes):
    """Save an upload of ``kind`` (model, weights, solver, mean, npy, image) into
    the session's folder; returns the path."""
    data = decode_upload(contents, max_bytes)
    folder = os.path.join(session.upload_dir, kind)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, safe_filename(filename))
    with open(path, "wb") as f:
        f.write(data)
    session.uploads[kind] = path
    session.upload_names[kind] = os.path.basename(str(filename or path))
    return path


# ------------------------------------------------------------------ errors
def too_large_hint(max_bytes):
    """What the page adds to a net refused for its memory (engine.MemoryBudgetExceeded)."""
    import engine
    return (" — refused by this server's limit of %s per net (--max-net-mb %d): the server and the other "
            "sessions go on; a smaller batch (the first dim of the Input or data layer) needs less"
            % (engine.human_bytes(max_bytes), max_bytes >> 20))


def load_error(exc, default_path=None):
    """A LoadError describing ``exc`` (ParseError: file:line:col; NetError:
    layer/blob, and file:line:col of the layer or field when the net came from a file)."""
    from engine import ParseError
    located = isinstance(exc, ParseError) or getattr(exc, "line", None) is not None
    msg = getattr(exc, "detail", None) if located else None
    err = LoadError(message=str(msg or exc) or type(exc).__name__, kind=type(exc).__name__)
    if located:
        err.path, err.line, err.column = exc.path or default_path, exc.line, exc.column
    else:
        err.path = default_path
        if getattr(exc, "line", None) is not None:        # an Init error that knows its prototxt line
            err.path = getattr(exc, "path", None) or default_path
            err.line, err.column = exc.line, getattr(exc, "column", None)
    err.layer = getattr(exc, "layer", None)
    err.blob = getattr(exc, "blob", None)
    err.field = getattr(exc, "field", None) if isinstance(getattr(exc, "field", None), str) else None
    err.stand_ins = stand_in_infos(getattr(exc, "stand_ins", ()))
    if isinstance(exc, PathRefused):
        err.path = None
    return err


# ------------------------------------------------------------------ building
def _read_mean(path):
    import engine
    arr = np.asarray(engine.io.blobproto_to_array(engine.read_blobproto(path)), dtype=np.float32)
    while arr.ndim > 3 and arr.shape[0] == 1:
        arr = arr[0]
    return arr


CACHED_BYTES = 128 << 20       # what each of the caches below may hold, all its entries together (estimated)
LAYER_BYTES = 16 << 10         # a layer's share of a NetGraph and its analysis (engine.core.limits.LAYER_OVERHEAD)


def _bound(cache, keep, size_of):
    """Drop the oldest entries of ``cache`` (an OrderedDict, newest last) past ``keep`` of them or
    past CACHED_BYTES together by ``size_of(key, value)`` (the newest is kept even alone past it):
    a few nets of 50,000 layers, or of megabyte names, would otherwise hold the server's memory
    after their tabs went."""
    sizes = [size_of(k, v) for k, v in cache.items()]
    total = sum(sizes)
    i = 0
    while len(cache) > keep or (len(cache) > 1 and total > CACHED_BYTES):
        cache.popitem(last=False)
        total -= sizes[i]
        i += 1


def _source_size(_key, param):
    return param.ByteSize()


def _drawn_size(key, hit):
    """A graph and analysis: its layers' share, and the Init transcript its key holds (the text
    of the net and every name, which the graph holds too)."""
    transcript = key[-1] if isinstance(key, tuple) and key else ()
    return len(hit[0].layers) * LAYER_BYTES + 2 * sum(len(m) for _lvl, m in transcript)


_SOURCES = OrderedDict()       # (real path, mtime, size) -> NetParameter as read (upgraded, unfiltered)
_SOURCES_LOCK = threading.Lock()


def file_version(path):
    """(real path, mtime, size) of the file at ``path``: what says it is the same file, unchanged
    (None: no such file)."""
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return os.path.realpath(path), st.st_mtime_ns, st.st_size


def spec_stamp(spec):
    """The versions of the files ``spec`` builds from (model, weights, solver, mean): a net
    built ahead is what a build now would give only while they are unchanged."""
    return tuple(file_version(p) if p else None for p in (spec.model, spec.weights, spec.solver, spec.mean))


def read_source(path, keep=8, copy=True):
    """The NetParameter of the prototxt at ``path`` (engine.read_net_params), parsed
    once per version of the file: a phase switch, a level or the next tab rebuilds the
    same file, and ResNet-152's 9,000 lines took 0.3-0.5 s to parse each time.  A copy
    (the caller may change it) unless ``copy`` is False (then only read it)."""
    import engine
    key = file_version(path)
    with _SOURCES_LOCK:
        hit = _SOURCES.get(key) if key is not None else None
        if hit is not None:
            _SOURCES.move_to_end(key)
    if hit is None:
        hit = engine.read_net_params(path)
        if key is not None:
            with _SOURCES_LOCK:
                _SOURCES[key] = hit
                _bound(_SOURCES, keep, _source_size)
    if not copy:
        return hit
    out = type(hit)()
    out.CopyFrom(hit)
    return out


_DRAWN = OrderedDict()         # what a built net's NetGraph and analysis depend on -> (graph, analysis)
_DRAWN_LOCK = threading.Lock()


def _drawn_key(spec, net):
    """What :func:`build_graph` and the analysis read of a net just built, as a key: the
    versions of its files, and what Init decided (its transcript holds the param as
    filtered, every layer made, each top's shape and the memory; the stand-ins and the
    bytes allocated besides).  Two builds with one key give equal graphs and analyses,
    so switching the phase back (or the next tab) reuses them.  None: not kept (a net
    made by a solver, or files that cannot be read)."""
    if spec.solver:
        return None
    source = file_version(spec.model)
    weights = file_version(spec.weights) if spec.weights else ()
    if source is None or weights is None:
        return None
    rec = net.init_record
    return (source, weights, spec.state(), str(net.dtype), int(net.memory_used_bytes),
            repr(getattr(rec, "stand_ins", ())), tuple(rec.transcript))


def _graph_and_analysis(spec, net, source, keep=8):
    """(NetGraph, analysis) of ``net``, built from ``source``: made once per :func:`_drawn_key`."""
    key = _drawn_key(spec, net)
    with _DRAWN_LOCK:
        hit = _DRAWN.get(key) if key is not None else None
        if hit is not None:
            _DRAWN.move_to_end(key)
            return hit
    hit = build_graph(net, source), adapters.layer_analysis(net)
    if key is not None:
        with _DRAWN_LOCK:
            _DRAWN[key] = hit
            _bound(_DRAWN, keep, _drawn_size)
    return hit


def remember_source(path, param):
    """Keep ``param`` as what :func:`read_source` gives for the file at ``path`` as it is now
    (the load check read it already: inspector.state.guard)."""
    key = file_version(path)
    if key is None:
        return
    with _SOURCES_LOCK:
        _SOURCES[key] = param
        _SOURCES.move_to_end(key)
        _bound(_SOURCES, 8, _source_size)


def settings(config):
    """What :func:`build` takes from the server's settings (an InspectorConfig), for every net
    a tab opens: Python layers, the model root, the memory budget, the limits of a net."""
    return dict(allow_python=config.allow_python_layers, model_root=config.model_root,
                max_bytes=config.max_net_bytes, limits=config.net_limits)


def build(spec, allow_python=False, device="CPU", model_root=None, max_bytes=None, limits=None):
    """A Loaded net for ``spec`` (raises on any failure).  With ``model_root``,
    an untrusted spec (from the page) may read files only under it.  With ``max_bytes``,
    a net (with its solver's) that declares more memory at Init is refused
    (engine.MemoryBudgetExceeded) before that memory is allocated.  ``limits``: the
    engine.NetLimits it is read under (None: those in force)."""
    import engine
    from engine.instruments.debug import Recorder
    with engine.using_mode(device), engine.memory_budget(max_bytes or None), engine.net_limits(limits):
        net, solver, source, note, mean, found = build_net(spec, allow_python, model_root)
        graph, analysis = _graph_and_analysis(spec, net, source)
        recorder = Recorder(net, stats=True, sentinel=False)
        inputs = tuple(l.index for l in graph.layers if l.type == "Input" or l.stand_in)
    loaded = Loaded(net=net, graph=graph, recorder=recorder, runlog=RunLog(input_layers=inputs),
                    spec=spec, source_param=source, solver=solver, solver_note=note,
                    analysis=analysis, mean=mean, max_bytes=max_bytes or None)
    loaded.cache["sources_found"] = tuple(found)       # the load status says where they were found
    return loaded


def build_net(spec, allow_python=False, model_root=None):
    """What the engine reads and builds for ``spec`` (:func:`build` without the page's graph and
    records, under its device, budget and limits): ``(net, solver, NetParameter as read, a note
    on the solver, mean array, relative sources found elsewhere)``.  The load check
    (state/guard.py) runs this much."""
    import engine
    if not spec.model:
        raise PathRefused("no model file")
    phase, level, stages = spec.state()
    # a data layer whose source is missing (or, opened from the page, outside the model root) is
    # stood in by an Input shaped from its params: the net opens structure-only (engine.core.standins)
    can_read = root_reader(model_root) if model_root is not None and not spec.trusted else None
    source = read_source(spec.model)
    # a relative data source opens from the working directory, as in Caffe, else beside the
    # prototxt or under the model root, where a model's data usually is
    found = relative_sources_found(source, spec.model, model_root, private_model_dir=spec.uploaded,
                                   confined=model_root is not None and not spec.trusted)
    if model_root is not None and not spec.trusted:
        check_file_access(source, model_root, state=(phase, level, stages),
                          skip=lambda lp: engine.missing_data_source(lp, can_read) is not None)
    solver = None
    note = ""
    if spec.solver:
        if phase != 0:
            note = "the solver steps the TRAIN net: switch the phase to TRAIN to use it"
        else:
            solver = adapters.build_solver(spec.solver, spec.model, spec.state(),
                                           allow_python=allow_python, weights=spec.weights)
    if solver is not None:
        net = solver.net
    else:
        net = engine.Net(spec.model, phase, level=level, stages=list(stages) or None,
                         allow_python=allow_python, param=source,     # the file is read once
                         structure_only=True, data_shapes=dict(spec.data_shapes), can_read=can_read)
        net.model_file = spec.model
        if spec.weights:
            net.copy_from(spec.weights)
    mean = _read_mean(spec.mean) if spec.mean else None
    return net, solver, source, note, mean, found

"""Net: Caffe's Net re-implemented (net.cpp, BVLC Caffe 1.0 master).

Init runs in net.cpp's order: FilterNet, InsertSplits, then per layer
AppendBottom, AppendTop (in-place tops, Input tops as net inputs), anonymous
AutoTopBlobs tops, SetUp, loss weights, memory, AppendParam; then the backward
analysis (blobs under the loss, skipped propagation, force_backward), the
outputs, ShareWeights.  It logs net.cpp's messages word for word and keeps a
structured record of every decision for the inspector (``net.init_record``).

The API is pycaffe's (``blobs``, ``params``, ``forward``, ``backward``, ...),
plus, public, what a debugger needs (``layer_need_backward``,
``param_owners``, ``memory_used``, ...).
"""
from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, List, Sequence

import numpy as np
from google.protobuf import text_format

from engine.core import backend
from engine.core import limits as net_limits
from engine.core.blob import Blob, declare_layer, memory_ledger
from engine.core.errors import CaffeError, EmptyBlobError, NetError, ShapeError, UnknownLayerTypeError, mark_layer
from engine.core.layers.base import Layer, loss_weight  # noqa: F401  (Layer: annotations)
from engine.core.log import check_failed, num
from engine.core.log import net_log as log
from engine.core.source_map import NetSource, guess_field, layer_signature
from engine.core.vectors import BlobVec, DtypeVec, IntVec, LayerVec, StringVec
from engine.core.weights import read_weights
from engine.proto import caffe_pb2

TRAIN, TEST = 0, 1


# ------------------------------------------------------------------ Init record
@dataclass
class BackwardDecision:
    """Why a layer does or does not need backward computation."""
    need: bool
    rule: str          # short key: "bottom", "param", "none", "not-under-loss", "skip-propagate", "force"
    detail: str        # a sentence for people


@dataclass
class SharedParam:
    net_param_id: int
    layer: str
    param_index: int
    name: str
    owner_net_param_id: int
    owner_layer: str
    owner_param_index: int
    mode: str          # "STRICT" or "PERMISSIVE"


SAME_ERROR_LIMIT = 4    # stand-ins: other shapes giving Init's first error in a row before giving up


@dataclass
class InitRecord:
    """What Init decided, for the inspector and reports."""
    filtered: list = field(default_factory=list)       # engine.core.filter dropped-layer records
    splits: list = field(default_factory=list)         # engine.core.splits inserted-split records
    in_place: list = field(default_factory=list)       # (layer name, top index, blob name)
    shared: List[SharedParam] = field(default_factory=list)
    backward: List[BackwardDecision] = field(default_factory=list)
    transcript: list = field(default_factory=list)     # (level name, message) of Init's log
    upgraded: bool = False
    stand_ins: list = field(default_factory=list)      # engine.core.standins.StandIn (structure_only)


class _Capture(logging.Handler):
    """The log lines of one Init: those logged by the thread running it (nets built at the
    same time in other threads log to the same logger; their lines are theirs)."""

    def __init__(self, sink):
        super().__init__(logging.DEBUG)
        self.sink = sink
        self.thread = threading.get_ident()

    def emit(self, record):
        if threading.get_ident() != self.thread:
            return
        try:
            self.sink.append((record.levelname, record.getMessage()))
        except Exception:  # pragma: no cover
            pass


class _Quiet:
    """INFO on the net logger while any Init records its transcript and the user has not
    enabled it, those records kept from the user's handlers; the user's level comes back
    when the last Init running (in any thread) ends, not when the first does."""

    def __init__(self):
        self._lock = threading.Lock()
        self._users = 0
        self._saved = None

    def __enter__(self):
        with self._lock:
            if self._users == 0 and not log.isEnabledFor(logging.INFO):
                self._saved = (log.level, log.propagate)
                log.setLevel(logging.INFO)
                log.propagate = False
            self._users += 1

    def __exit__(self, *exc):
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._saved is not None:
                log.setLevel(self._saved[0])
                log.propagate = self._saved[1]
                self._saved = None
        return False


_quiet = _Quiet()


# ------------------------------------------------------------------ Net

def _call_translated(fn, *args):
    """fn(*args), with GPU failures and host MemoryErrors raised as DeviceError, as inside
    backend.translate_gpu_errors (without entering a context manager per layer run)."""
    try:
        return fn(*args)
    except CaffeError:
        raise
    except Exception as e:
        err = backend.translated_error(e)
        if err is None:
            raise
        raise err from e

# The layer types whose factory (layer_factory.cpp) picks an engine, and the param holding it.
# A CPU-only Caffe (no USE_CUDNN, as the reference build) knows no CUDNN engine.
_ENGINE_PARAMS = {"Convolution": "convolution_param", "Deconvolution": "convolution_param",
                  "Pooling": "pooling_param", "LRN": "lrn_param", "ReLU": "relu_param",
                  "Sigmoid": "sigmoid_param", "Softmax": "softmax_param", "TanH": "tanh_param",
                  "SoftmaxWithLoss": "softmax_param"}      # its inner Softmax is made by the factory
_CUDNN = 2          # every *Parameter.Engine: DEFAULT 0, CAFFE 1, CUDNN 2


def _check_engine(lp):
    """layer_factory.cpp's ``LOG(FATAL) << "Layer " << name << " has unknown engine."`` for
    ``engine: CUDNN`` on the CPU, where Caffe is built without cuDNN (CPU_ONLY); on the GPU the
    engine takes it as a cuDNN build does (the same arithmetic)."""
    field_name = _ENGINE_PARAMS.get(lp.type)
    if field_name is None or not lp.HasField(field_name) or backend.mode() != "CPU":
        return
    if getattr(lp, field_name).engine == _CUDNN:
        raise NetError("Layer %s has unknown engine. (a Caffe built without cuDNN, as every CPU-only one, knows "
                       "no CUDNN engine; engine: CAFFE or DEFAULT runs here)" % lp.name, layer=lp.name,
                       field="engine")


class Net:
    """pycaffe's Net: ``Net(model_file, phase, level=0, stages=None, weights=None)``
    or the deprecated ``Net(model_file, weights, phase)``.

    Extra keyword arguments: ``allow_python`` (default True: Python layers run the
    model author's code, as in Caffe), ``dtype`` (default float32), ``structure_only``
    (default False: as Caffe, a data layer whose source is missing fails Init; True: it
    is stood in by an Input layer shaped from its params, ``data_shapes`` giving
    {top: per-item dims} they cannot tell and ``can_read(path)`` saying why a path may
    not be read; see engine.core.standins and ``init_record.stand_ins``).
    """

    def __init__(self, network_file, *args, level=0, stages=None, weights=None, phase=None,
                 allow_python=True, dtype=np.float32, param=None, structure_only=False, data_shapes=None,
                 can_read=None):
        if len(args) == 2 and isinstance(args[0], (str, os.PathLike)):
            weights, phase = args          # Net(model, weights, phase)
            _legacy_constructor_warning(network_file, weights, phase)
        elif 1 <= len(args) <= 4:          # Net(model, phase, level, stages, weights), as pycaffe takes them
            phase, level, stages, weights = tuple(args) + (level, stages, weights)[len(args) - 1:]
        elif args:
            raise TypeError("Net(model_file, phase, level=0, stages=None, weights=None)")
        if phase is None:
            raise TypeError("Net() needs a phase: engine.TRAIN or engine.TEST")
        from engine.core.upgrade import read_net_params
        self.model_file = None
        if param is None:
            self.model_file = os.fspath(network_file)
            param = read_net_params(self.model_file)
        else:
            p = caffe_pb2.NetParameter()
            p.CopyFrom(param)
            param = p
        # errors name lines of this file (when ``param`` is not what it holds, they name none)
        self._source_file = os.fspath(network_file) if isinstance(network_file, (str, os.PathLike)) else None
        param.state.phase = int(phase)
        for s in (stages or []):
            param.state.stage.append(s)
        param.state.level = int(level)
        self._allow_python = allow_python
        self._dtype = np.dtype(dtype)
        self._stand_in = (data_shapes, can_read) if structure_only else None
        self.init(param)
        if weights is not None:
            self.copy_from(weights)

    @classmethod
    def from_param(cls, param: caffe_pb2.NetParameter, phase: int | None = None, level: int | None = None,
                   stages: Sequence[str] | None = None, allow_python: bool = True, dtype: Any = np.float32,
                   model_dir: str | None = None, source_file: str | os.PathLike | None = None) -> Net:
        """A Net from a NetParameter (Net(const NetParameter&)).  ``phase``/``level``/
        ``stages`` override the param's state only when given.  ``source_file``: the
        prototxt the param was read from (errors then name its lines, when it still
        holds this net)."""
        from engine.core.upgrade import net_needs_upgrade, upgrade_net
        p = caffe_pb2.NetParameter()
        p.CopyFrom(param)
        if net_needs_upgrade(p):
            p = upgrade_net(p)
        if phase is not None:
            p.state.phase = int(phase)  # type: ignore[assignment]
        if stages:
            for s in stages:
                p.state.stage.append(s)
        if level is not None:
            p.state.level = int(level)
        self = cls.__new__(cls)
        self.model_file = os.path.join(model_dir, "<param>") if model_dir else None
        self._source_file = os.fspath(source_file) if source_file is not None else None
        self._allow_python = allow_python
        self._dtype = np.dtype(dtype)
        self.init(p)
        return self

    # -------------------------------------------------------------- Init
    def init(self, in_param: caffe_pb2.NetParameter) -> None:
        from engine.core.filter import filter_net
        from engine.core.splits import insert_splits
        self.init_record = rec = InitRecord()
        self._source_layers = layer_signature(in_param.layer)
        handler = _Capture(rec.transcript)
        # Record the transcript even when INFO is not enabled for the user; then
        # keep those records away from the user's handlers.
        _quiet.__enter__()
        log.addHandler(handler)
        try:
            # What the blobs declare (data and diff, tops, params, layers' own buffers) is
            # counted as Init goes, before any of it is allocated (memory is used lazily).
            with memory_ledger(net_limits.current().max_net_bytes) as ledger:
                self._init(in_param, filter_net, insert_splits)
            self.memory_required_bytes = ledger.total
        except Exception as e:
            if not self._init_with_other_stand_ins(e, in_param, filter_net, insert_splits):
                self._locate(e)
                raise
        finally:
            log.removeHandler(handler)
            _quiet.__exit__()

    def _init_with_other_stand_ins(self, e, in_param, filter_net, insert_splits):
        """Init of a structure-only net failed with ``e`` while some stand-in's shape was
        assumed: build it with the first other common shape it takes (standins.alternatives;
        its stand-ins then say what was assumed and why).  False when none does, or when
        another shape gives the same error (the shape is not the cause); ``e`` then says
        which shapes were assumed."""
        from engine.core import standins
        rec = self.init_record
        stand_ins = list(rec.stand_ins)
        if getattr(self, "_stand_in", None) is None or not isinstance(e, CaffeError) or not stand_ins:
            return False
        if not any(s.assumed for s in stand_ins):
            e.stand_ins = stand_ins         # the shapes were given: the error is theirs
            return False
        given, can_read = self._stand_in
        first = {t.name: t.shape for s in stand_ins for t in s.tops}
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        transcript = list(rec.transcript)
        tried = same = 0
        try:
            deadline = time.monotonic() + standins.ALTERNATIVE_SECONDS
            for shapes in standins.alternatives(stand_ins):
                if time.monotonic() > deadline:
                    break
                tried += 1
                self.init_record = InitRecord(transcript=rec.transcript)
                del rec.transcript[:]
                self._stand_in = ({**(given or {}), **shapes}, can_read)
                try:
                    with memory_ledger(net_limits.current().max_net_bytes) as ledger:
                        self._init(in_param, filter_net, insert_splits)
                except CaffeError as again:
                    same = same + 1 if str(again) == str(e) else 0
                    if same >= SAME_ERROR_LIMIT:    # the same error whatever the shape: not the shape's
                        break
                    continue
                self.memory_required_bytes = ledger.total
                standins.note_alternative(self.init_record.stand_ins, shapes, first, why)
                described = iter(s.describe() for s in self.init_record.stand_ins)
                rec.transcript[:] = [(lvl, "Structure only: %s" % next(described, msg))
                                     if msg.startswith("Structure only: ") else (lvl, msg)
                                     for lvl, msg in rec.transcript]
                return True
        finally:
            self._stand_in = (given, can_read)
        self.init_record = rec
        rec.transcript[:] = transcript
        assumed = "; ".join("%s %s" % (t.name, " × ".join(str(d) for d in t.shape))
                            for s in stand_ins for t in s.tops if t.assumed)
        note = (" [structure only: the data was stood in with assumed shapes (%s)%s; give the data's "
                "shape]" % (assumed, ", and %d other common shapes do not build either" % tried if tried else ""))
        if e.args:
            e.args = (str(e.args[0]) + note,) + tuple(e.args[1:])
        e.stand_ins = stand_ins             # what was stood in, for a page that asks for the shapes
        return False

    def _init(self, in_param, filter_net, insert_splits):
        rec = self.init_record
        self.phase = in_param.state.phase
        filtered, rec.filtered = filter_net(in_param)
        log.info("Initializing net from parameters: \n%s", text_format.MessageToString(filtered).rstrip("\n"))
        stand_in = getattr(self, "_stand_in", None)
        if stand_in is not None:
            from engine.core.standins import stand_in_data
            filtered, rec.stand_ins = stand_in_data(filtered, can_read=stand_in[1], shapes=stand_in[0])
            for s in rec.stand_ins:
                log.warning("Structure only: %s", s.describe())
        param, rec.splits = insert_splits(filtered)
        self.param = param
        self.name = param.name
        self._reset_state()
        blob_name_to_idx, available = {}, set()
        for layer_id in range(len(param.layer)):
            try:
                self._init_layer(param, layer_id, available, blob_name_to_idx)
            except Exception as e:
                if isinstance(e, NetError) or getattr(e, "layer", None) is not None:   # Python layers' own
                    mark_layer(e, "split", layer_id)
                raise
        self._decide_backward_from_losses()
        if param.force_backward:
            self._force_backward()
        for name in sorted(available):
            log.info("This network produces output %s", name)
            self._output_ids.append(blob_name_to_idx[name])
        self._blob_names_index = {n: i for i, n in enumerate(self._blob_name_list)}
        self._layer_names_index = {n: i for i, n in enumerate(self._layer_name_list)}
        self._share_weights()
        self._blobs_dict = OrderedDict(zip(self._blob_name_list, self._blob_list))
        self._layer_dict = OrderedDict(zip(self._layer_name_list, self._layers))
        self.debug_info = bool(param.debug_info)
        log.info("Network initialization done.")

    # -------------------------------------------------------------- where errors are in the file
    def _net_source(self):
        """The prototxt this net was read from, with positions (None: no file, or unreadable)."""
        if not getattr(self, "_source_file", None):
            return None
        cached = getattr(self, "_net_source_cached", False)
        if cached is False:
            cached = self._net_source_cached = NetSource.read(self._source_file)
        return cached

    def _layer_source(self, stage, index):
        """``(NetSource, node as written, same layer)`` of the layer at ``index`` of Init's
        ``stage`` (see :func:`engine.core.errors.mark_layer`), following it back through
        InsertSplits, FilterNet and the upgrades; ``same layer`` is False for a Split layer
        (its producer's node is given).  None when the file does not hold this net."""
        rec = self.init_record
        same = True
        if stage == "split":
            splits = {r.position: r for r in rec.splits}
            if index in splits:
                index, same = splits[index].producer_index, False
                if index < 0:
                    return None
            else:
                index -= sum(1 for pos in splits if pos < index)
            stage = "filtered"
        if stage == "filtered":
            dropped = {d.index for d in rec.filtered}
            kept = [i for i in range(len(self._source_layers)) if i not in dropped]
            if not 0 <= index < len(kept):
                return None
            index = kept[index]
        src = self._net_source()
        if src is None:
            return None
        nodes = src.written_for(self._source_layers)
        if nodes is None or not 0 <= index < len(nodes):
            return None
        return src, nodes[index], same

    def _locate(self, e):
        """Add the prototxt position of the layer (and field) that ``e`` names, when the
        net came from a file that still holds it: a NetError's message starts with
        ``file:line:column:``; another exception from a layer (a Python layer's own) gets
        a note."""
        ref = getattr(e, "_net_ref", None)
        if ref is None:
            return
        try:
            found = self._layer_source(ref[0], ref[1])
        except Exception:   # noqa: BLE001 - a position is a nicety: never hide the error itself
            found = None
        if found is None:
            return
        src, node, same = found
        fname, findex = ref[2], ref[3]
        if isinstance(e, NetError):
            if fname is None and same:
                fname, findex = guess_field(node, e.detail) or (None, 0)
            fnode = node.find(fname, findex) if fname and same else None
            at = fnode or node
            e.locate(src.path, at.line, at.column, node.line, node.column)
        elif hasattr(e, "add_note"):
            e.add_note("layer '%s' is written at %s:%d:%d" % (getattr(e, "layer", "?"), src.path, node.line,
                                                             node.column))

    def _reset_state(self):
        """Empty per-layer and per-blob vectors, as Net's members before Init."""
        self._layers, self._layer_name_list = [], []
        self._blob_list, self._blob_name_list = [], []
        self._blob_need_backward = []
        self._loss_weight_list = []
        self._bottom_vecs, self._top_vecs = [], []
        self._bottom_id_vecs, self._top_id_vecs, self._param_id_vecs = [], [], []
        self._bottom_need_backward, self._layer_need_backward = [], []
        self._input_ids, self._output_ids = [], []
        self._params, self._param_owners, self._param_display_names = [], [], []
        self._param_layer_indices, self._param_names_index = [], {}
        self._learnable_params, self._learnable_param_ids = [], []
        self._params_lr, self._params_weight_decay = [], []
        self._has_params_lr, self._has_params_decay = [], []
        self.memory_used = 0
        self._top_shapes = {}              # layer index -> its tops' shapes after its last Forward
        # bytes the net's blobs declare at Init (data and diff of tops, params and the
        # layers' own blobs, plus the largest work buffer): what it holds once it has run
        # forward and backward, known before any of it is allocated
        self.memory_required_bytes = 0
        self.debug_info = False
        self._before_forward, self._after_forward = [], []
        self._before_backward, self._after_backward = [], []
        self.debug_observers = []
        self._params_cache = None           # pycaffe.py's dicts and lists, made at first use
        self._input_list = self._output_list = None
        self._top_names = self._bottom_names = None

    def _create_layer(self, lp):
        """The layer object for ``lp`` (Python layers learn the model's folder)."""
        from engine.core.layers.registry import create_layer
        if not lp.HasField("phase"):
            lp.phase = self.phase
        if len(lp.propagate_down) > 0 and len(lp.propagate_down) != len(lp.bottom):
            raise NetError("propagate_down param must be specified either 0 or bottom_size times "
                           "(layer '%s': %d vs. %d)" % (lp.name, len(lp.propagate_down), len(lp.bottom)),
                           layer=lp.name, field="propagate_down")
        _check_engine(lp)
        kwargs = {"dtype": self._dtype}
        if lp.type == "Python":
            kwargs["model_dir"] = os.path.dirname(os.path.abspath(self.model_file)) if self.model_file else None
        try:
            return create_layer(lp, allow_python=self._allow_python, **kwargs)
        except UnknownLayerTypeError as e:
            if e.field is None:
                e.field = "type"
            raise

    def _init_layer(self, param, layer_id, available, blob_name_to_idx):
        """One iteration of Init's layer loop: create, wire bottoms and tops, SetUp,
        params and the first need-backward decision."""
        lp = param.layer[layer_id]
        declare_layer(lp.name)              # its own memory, against the net's budget
        layer = self._create_layer(lp)
        self._layers.append(layer)
        self._layer_name_list.append(lp.name)
        log.info("Creating Layer %s", lp.name)
        for vec in (self._bottom_vecs, self._top_vecs, self._bottom_id_vecs, self._top_id_vecs,
                    self._param_id_vecs, self._bottom_need_backward):
            vec.append([])
        need_backward = False
        why = None
        for bottom_id in range(len(lp.bottom)):
            blob_id = self._append_bottom(param, layer_id, bottom_id, available, blob_name_to_idx)
            if self._blob_need_backward[blob_id]:
                need_backward = True
                why = why or BackwardDecision(True, "bottom", "bottom blob '%s' needs backward"
                                              % self._blob_name_list[blob_id])
        num_top = len(lp.top)
        for top_id in range(num_top):
            self._append_top(param, layer_id, top_id, available, blob_name_to_idx)
            if lp.type == "Input":
                self._input_ids.append(len(self._blob_list) - 1)
        if layer.auto_top_blobs:
            needed = max(layer.min_top, layer.exact_num_top)
            while num_top < needed:
                self._append_top(param, layer_id, num_top, None, None)
                num_top += 1
        self._setup_layer(lp, layer, layer_id)
        need_backward, why = self._param_backward(lp, layer, need_backward, why)
        for param_id in range(len(layer.blobs)):
            try:
                self._append_param(param, layer_id, param_id)
            except NetError as e:           # sharing: the layer's param {} spec at fault
                if e.field is None:
                    e.field, e.field_index = "param", param_id
                raise
        self._layer_need_backward.append(need_backward)
        if why is None:
            why = BackwardDecision(False, "none", "no bottom needs backward and no param has lr_mult > 0")
        self.init_record.backward.append(why)
        if need_backward:
            for bid in self._top_id_vecs[layer_id]:
                self._blob_need_backward[bid] = True

    def _setup_layer(self, lp, layer, layer_id):
        """Layer SetUp (errors name the layer), then the tops' loss weights, shapes and
        memory, logged as Caffe logs them."""
        try:
            with backend.translate_gpu_errors():
                layer.SetUp(self._bottom_vecs[layer_id], self._top_vecs[layer_id])
        except CaffeError as e:
            self._name_empty(e, layer_id)
            if getattr(e, "layer", None) is None:
                e.layer = lp.name
                e.args = ("%s (layer '%s', type %s)" % (e, lp.name, lp.type),)
            raise
        log.info("Setting up %s", lp.name)   # master logs it after SetUp
        for top_id, top in enumerate(self._top_vecs[layer_id]):
            bid = self._top_id_vecs[layer_id][top_id]
            if len(self._loss_weight_list) <= bid:
                self._loss_weight_list.extend([0.0] * (bid + 1 - len(self._loss_weight_list)))
            self._loss_weight_list[bid] = loss_weight(layer, top_id)
            log.info("Top shape: %s", top.shape_string())
            if loss_weight(layer, top_id):
                log.info("    with loss weight %s", num(np.float32(loss_weight(layer, top_id))))
            self.memory_used += top.count
        log.info("Memory required for data: %d", self.memory_used * self._dtype.itemsize)

    def _param_backward(self, lp, layer, need_backward, why):
        """Params with lr_mult > 0 make the layer need backward (and propagate down to them)."""
        param_size = len(lp.param)
        num_param_blobs = len(layer.blobs)
        if param_size > num_param_blobs:
            raise NetError("Too many params specified for layer %s" % lp.name, layer=lp.name, field="param",
                           field_index=num_param_blobs)
        default_spec = caffe_pb2.ParamSpec()
        for param_id in range(num_param_blobs):
            spec = lp.param[param_id] if param_id < param_size else default_spec
            pnb = spec.lr_mult > 0
            if pnb and not need_backward:
                why = BackwardDecision(True, "param", "param %d has lr_mult %s > 0"
                                       % (param_id, num(spec.lr_mult)))
            need_backward |= pnb
            layer.set_param_propagate_down(param_id, pnb)
        return need_backward, why

    def _decide_backward_from_losses(self):
        """Init's backward pass over the net: which blobs contribute to the loss, and
        which layers can skip backward because none of their tops propagates."""
        rec = self.init_record
        under_loss, skip_backp = set(), set()
        for layer_id in range(len(self._layers) - 1, -1, -1):
            layer = self._layers[layer_id]
            contributes = False
            skip_prop = True
            for top_id, bid in enumerate(self._top_id_vecs[layer_id]):
                bname = self._blob_name_list[bid]
                if loss_weight(layer, top_id) or bname in under_loss:
                    contributes = True
                if bname not in skip_backp:
                    skip_prop = False
                if contributes and not skip_prop:
                    break
            if self._layer_need_backward[layer_id] and skip_prop:
                self._layer_need_backward[layer_id] = False
                for b in range(len(self._bottom_vecs[layer_id])):
                    self._bottom_need_backward[layer_id][b] = False
                rec.backward[layer_id] = BackwardDecision(
                    False, "skip-propagate", "no top blob propagates a gradient back "
                    "(every consumer skips it via propagate_down or needs no backward)")
            if not contributes:
                if self._layer_need_backward[layer_id]:
                    rec.backward[layer_id] = BackwardDecision(
                        False, "not-under-loss", "no top blob contributes to a loss")
                elif rec.backward[layer_id].rule == "none" and self._top_id_vecs[layer_id]:
                    rec.backward[layer_id].detail += "; no top blob contributes to a loss"
                self._layer_need_backward[layer_id] = False
            if self._layer_need_backward[layer_id]:
                log.info("%s needs backward computation.", self._layer_name_list[layer_id])
            else:
                log.info("%s does not need backward computation.", self._layer_name_list[layer_id])
            for b, bid in enumerate(self._bottom_id_vecs[layer_id]):
                if contributes:
                    under_loss.add(self._blob_name_list[bid])
                else:
                    self._bottom_need_backward[layer_id][b] = False
                if not self._bottom_need_backward[layer_id][b]:
                    skip_backp.add(self._blob_name_list[bid])

    def _force_backward(self):
        """force_backward: every layer needs backward, bottoms where the layer allows it."""
        rec = self.init_record
        for layer_id, layer in enumerate(self._layers):
            if not self._layer_need_backward[layer_id]:
                rec.backward[layer_id] = BackwardDecision(
                    True, "force", "force_backward is set (was: %s)" % rec.backward[layer_id].detail)
            self._layer_need_backward[layer_id] = True
            for b, bid in enumerate(self._bottom_id_vecs[layer_id]):
                nb = self._bottom_need_backward[layer_id][b] or layer.allow_force_backward(b)
                self._bottom_need_backward[layer_id][b] = nb
                self._blob_need_backward[bid] = self._blob_need_backward[bid] or nb
            for pid in range(len(layer.blobs)):
                layer.set_param_propagate_down(pid, True)

    def _append_top(self, param, layer_id, top_id, available, name_to_idx):
        lp = param.layer[layer_id]
        blob_name = lp.top[top_id] if top_id < len(lp.top) else "(automatic)"
        if name_to_idx is not None and top_id < len(lp.bottom) and blob_name == lp.bottom[top_id]:
            log.info("%s -> %s (in-place)", lp.name, blob_name)
            bid = name_to_idx[blob_name]
            self._top_vecs[layer_id].append(self._blob_list[bid])
            self._top_id_vecs[layer_id].append(bid)
            self.init_record.in_place.append((lp.name, top_id, blob_name))
        elif name_to_idx is not None and blob_name in name_to_idx:
            raise NetError("Top blob '%s' produced by multiple sources. (layer '%s', top index %d)"
                           % (blob_name, lp.name, top_id), layer=lp.name, blob=blob_name, field="top",
                           field_index=top_id)
        else:
            log.info("%s -> %s", lp.name, blob_name)
            blob = Blob(dtype=self._dtype)
            bid = len(self._blob_list)
            self._blob_list.append(blob)
            self._blob_name_list.append(blob_name)
            self._blob_need_backward.append(False)
            if name_to_idx is not None:
                name_to_idx[blob_name] = bid
            self._top_id_vecs[layer_id].append(bid)
            self._top_vecs[layer_id].append(blob)
        if available is not None:
            available.add(blob_name)

    def _append_bottom(self, param, layer_id, bottom_id, available, name_to_idx):
        lp = param.layer[layer_id]
        blob_name = lp.bottom[bottom_id]
        if blob_name not in available:
            raise NetError("Unknown bottom blob '%s' (layer '%s', bottom index %d)"
                           % (blob_name, lp.name, bottom_id), layer=lp.name, blob=blob_name, field="bottom",
                           field_index=bottom_id)
        bid = name_to_idx[blob_name]
        log.info("%s <- %s", self._layer_name_list[layer_id], blob_name)
        self._bottom_vecs[layer_id].append(self._blob_list[bid])
        self._bottom_id_vecs[layer_id].append(bid)
        available.discard(blob_name)
        # Master's rule: an explicit propagate_down decides, either way (the
        # recurrent layers' unrolled nets rely on propagate_down: true).
        need = self._blob_need_backward[bid]
        if len(lp.propagate_down) > 0:
            need = bool(lp.propagate_down[bottom_id])
        self._bottom_need_backward[layer_id].append(need)
        return bid

    def _append_param(self, param, layer_id, param_id):
        layer = self._layers[layer_id]
        lp = layer.layer_param
        param_size = len(lp.param)
        pname = lp.param[param_id].name if param_size > param_id else ""
        self._param_display_names.append(pname if pname else str(param_id))
        net_param_id = len(self._params)
        self._params.append(layer.blobs[param_id])
        self._param_id_vecs[layer_id].append(net_param_id)
        self._param_layer_indices.append((layer_id, param_id))
        spec = lp.param[param_id] if param_size > param_id else caffe_pb2.ParamSpec()
        if not param_size or not pname or pname not in self._param_names_index:
            self._param_owners.append(-1)
            if pname:
                self._param_names_index[pname] = net_param_id
            self._learnable_param_ids.append(len(self._learnable_params))
            self._learnable_params.append(self._params[net_param_id])
            self._has_params_lr.append(spec.HasField("lr_mult"))
            self._has_params_decay.append(spec.HasField("decay_mult"))
            self._params_lr.append(spec.lr_mult)
            self._params_weight_decay.append(spec.decay_mult)
            return
        owner_id = self._param_names_index[pname]
        self._param_owners.append(owner_id)
        owner_layer_id, owner_param_id = self._param_layer_indices[owner_id]
        log.info("Sharing parameters '%s' owned by layer '%s', param index %d",
                 pname, self._layer_name_list[owner_layer_id], owner_param_id)
        this_blob = layer.blobs[param_id]
        owner_blob = self._layers[owner_layer_id].blobs[owner_param_id]
        permissive = param_size > param_id and spec.share_mode == caffe_pb2.ParamSpec.PERMISSIVE
        if permissive:
            if this_blob.count != owner_blob.count:
                raise NetError("Shared parameter blobs must have the same count. Cannot share param "
                               "'%s' owned by layer '%s' with layer '%s'; count mismatch.  Owner layer "
                               "param shape is %s; sharing layer shape is %s"
                               % (pname, self._layer_name_list[owner_layer_id], self._layer_name_list[layer_id],
                                  owner_blob.shape_string(), this_blob.shape_string()),
                               layer=self._layer_name_list[layer_id], blob=pname)
        elif this_blob.shape != owner_blob.shape:
            raise NetError("Cannot share param '%s' owned by layer '%s' with layer '%s'; shape mismatch.  "
                           "Owner layer param shape is %s; sharing layer expects shape %s"
                           % (pname, self._layer_name_list[owner_layer_id], self._layer_name_list[layer_id],
                              owner_blob.shape_string(), this_blob.shape_string()),
                           layer=self._layer_name_list[layer_id], blob=pname)
        lid = self._learnable_param_ids[owner_id]
        self._learnable_param_ids.append(lid)
        layers = (self._layer_name_list[layer_id], self._layer_name_list[owner_layer_id])
        self._share_mult(spec, "lr_mult", self._has_params_lr, self._params_lr, lid, pname, layers)
        self._share_mult(spec, "decay_mult", self._has_params_decay, self._params_weight_decay, lid, pname,
                         layers)
        self.init_record.shared.append(SharedParam(
            net_param_id, self._layer_name_list[layer_id], param_id, pname, owner_id,
            self._layer_name_list[owner_layer_id], owner_param_id, "PERMISSIVE" if permissive else "STRICT"))

    @staticmethod
    def _share_mult(spec, field, has, values, lid, pname, layers):
        """A sharing layer's ``lr_mult`` / ``decay_mult`` (``field``) of learnable param
        ``lid``: set it when the owner left it unset, else it must agree (Caffe's CHECK).
        ``layers``: the names of the sharing layer and the owner."""
        if not spec.HasField(field):
            return
        value = getattr(spec, field)
        if not has[lid]:
            has[lid] = True
            values[lid] = value
        elif value != values[lid]:
            raise NetError("Shared param '%s' has mismatched %s. (layer '%s' gives %s, owner layer '%s' %s)"
                           % (pname, field, layers[0], num(value), layers[1], num(values[lid])),
                           layer=layers[0], blob=pname)

    def _share_weights(self):
        for i, owner in enumerate(self._param_owners):
            if owner < 0:
                continue
            self._params[i].share_data(self._params[owner])
            self._params[i].share_diff(self._params[owner])

    # -------------------------------------------------------------- running
    def _check_range(self, start, end, forward=True):
        """ForwardFromTo's ``CHECK_GE(start, 0); CHECK_LT(end, layers_.size())`` (BackwardFromTo's
        ``CHECK_GE(end, 0); CHECK_LT(start, layers_.size())``).  ``layers_.size()`` is unsigned, so
        a negative index fails the second check too: an empty net's Forward, ForwardFromTo(0, -1),
        fails ``Check failed: end < layers_.size() (-1 vs. 0)`` as in Caffe."""
        n = len(self._layers)
        first, last = ("start", "end") if forward else ("end", "start")
        low, high = (start, end) if forward else (end, start)
        if low < 0:
            raise NetError(check_failed("%s >= 0" % first, low, 0).rstrip())
        if not 0 <= high < n:
            raise NetError(check_failed("%s < layers_.size()" % last, high, n).rstrip())

    def ForwardFromTo(self, start: int, end: int) -> float:
        """Run layers start..end (inclusive); return the weighted loss."""
        self._check_range(start, end, True)
        loss = self._dtype.type(0)
        for obs in self.debug_observers:
            obs.begin("forward", start, end)
        # BatchNorm -> Scale -> ReLU in one pass where nothing can see between them (engine.core.fusion)
        chains = (self._fusion_chains() if not (self.debug_observers or self._before_forward or self._after_forward
                                                or self.debug_info) else None)
        try:
            i = start
            while i <= end:
                chain = chains.get(i) if chains else None
                if chain is not None and i + chain.length - 1 <= end:
                    try:
                        chain.forward(self._bottom_vecs, self._top_vecs)
                    except CaffeError as e:
                        self._name_empty(e, i)
                        _annotate(e, self._layer_name_list[i], chain.bn.type, "Forward")
                        raise
                    for k in range(i, i + chain.length):
                        self._top_shapes[k] = tuple(t.shape for t in self._top_vecs[k])
                    i += chain.length
                    continue
                for cb in self._before_forward:
                    cb(i)
                for obs in self.debug_observers:
                    obs.before_layer("forward", i)
                layer = self._layers[i]
                try:
                    layer_loss = _call_translated(layer.Forward, self._bottom_vecs[i], self._top_vecs[i])
                except CaffeError as e:
                    self._name_empty(e, i)
                    _annotate(e, self._layer_name_list[i], layer.type, "Forward")
                    raise
                if layer_loss:      # adding a zero leaves the sum as it is (it starts at +0)
                    with np.errstate(all="ignore"):     # inf + -inf losses: nan, as in C
                        loss += layer_loss
                self._top_shapes[i] = tuple(t.shape for t in self._top_vecs[i])
                for obs in self.debug_observers:
                    obs.after_layer("forward", i)
                if self.debug_info:
                    self._forward_debug_info(i)
                for cb in self._after_forward:
                    cb(i)
                i += 1
        finally:
            for obs in self.debug_observers:
                obs.end("forward", start, end)
        return loss

    def _fusion_chains(self):
        """engine.core.fusion.chains of this Net, found once (CPU only: None on the GPU)."""
        if backend.mode() != backend.CPU:
            return None
        key = tuple(map(id, self._layers))      # (the chains hold the layers: their ids stay theirs)
        got = self.__dict__.get("_chains")
        if got is None or got[0] != key:
            from engine.core import fusion
            got = self._chains = (key, fusion.chains(self))
        return got[1]

    def _fusion_relus(self):
        """{index of the ReLU: Chain} of the chains that end in a ReLU (their ReLU's and
        Scale's Backward run as one)."""
        chains = self._fusion_chains()
        if not chains:
            return None
        got = self.__dict__.get("_relu_chains")
        if got is None or got[0] is not chains:
            got = self._relu_chains = (chains, {c.start + 2: c for c in chains.values() if c.relu is not None})
        return got[1]

    def _name_empty(self, e, i):
        """Name the blob in an EmptyBlobError raised while layer ``i`` ran (Caffe's
        ``Check failed: data_``): one of its bottoms or tops, a param, or a buffer of its own."""
        if not isinstance(e, EmptyBlobError) or e.source is None:
            return
        src, e.source = e.source, None
        name = None
        for blob, bid in itertools.chain(zip(self._bottom_vecs[i], self._bottom_id_vecs[i]),
                                         zip(self._top_vecs[i], self._top_id_vecs[i])):
            if blob is src:
                name = self._blob_names[bid]
        if name is not None:
            e.blob = name
        else:
            layer = self._layers[i]
            pid = next((k for k, b in enumerate(layer.blobs) if b is src), None)
            name = ("param %d of layer '%s'" % (pid, self._layer_name_list[i]) if pid is not None
                    else "an internal buffer of layer '%s'" % self._layer_name_list[i])
        e.args = src.empty_error(e.which, name).args

    def ForwardFrom(self, start: int) -> float:
        return self.ForwardFromTo(start, len(self._layers) - 1)

    def ForwardTo(self, end: int) -> float:
        return self.ForwardFromTo(0, end)

    def Forward(self) -> tuple[list[Blob], float]:
        """Net::Forward(&loss): run every layer; returns (outputs, loss)."""
        loss = self.ForwardFromTo(0, len(self._layers) - 1)
        return [self._blob_list[i] for i in self._output_ids], loss

    def BackwardFromTo(self, start: int, end: int) -> None:
        self._check_range(start, end, False)
        for obs in self.debug_observers:
            obs.begin("backward", start, end)
        # a ReLU's and a Scale's Backward in one pass where nothing can see between them (engine.core.fusion)
        relus = (self._fusion_relus() if not (self.debug_observers or self._before_backward or self._after_backward
                                              or self.debug_info) else None)
        try:
            i = start
            while i >= end:
                chain = relus.get(i) if relus else None
                if (chain is not None and i - 1 >= end and self._layer_need_backward[i]
                        and self._layer_need_backward[i - 1]):
                    try:
                        self._check_top_shapes(i)
                        self._check_top_shapes(i - 1)
                        chain.backward_relu_scale(self._top_vecs, self._bottom_need_backward, self._bottom_vecs)
                    except CaffeError as e:
                        self._name_empty(e, i)
                        _annotate(e, self._layer_name_list[i], chain.relu.type, "Backward")
                        raise
                    i -= 2
                    continue
                for cb in self._before_backward:
                    cb(i)
                if self._layer_need_backward[i]:
                    for obs in self.debug_observers:
                        obs.before_layer("backward", i)
                    layer = self._layers[i]
                    try:
                        self._check_top_shapes(i)
                        _call_translated(layer.Backward, self._top_vecs[i], self._bottom_need_backward[i],
                                         self._bottom_vecs[i])
                    except CaffeError as e:
                        self._name_empty(e, i)
                        _annotate(e, self._layer_name_list[i], layer.type, "Backward")
                        raise
                    for obs in self.debug_observers:
                        obs.after_layer("backward", i)
                    if self.debug_info:
                        self._backward_debug_info(i)
                for cb in self._after_backward:
                    cb(i)
                i -= 1
        finally:
            for obs in self.debug_observers:
                obs.end("backward", start, end)

    def BackwardFrom(self, start: int) -> None:
        self.BackwardFromTo(start, 0)

    def BackwardTo(self, end: int) -> None:
        self.BackwardFromTo(len(self._layers) - 1, end)

    def Backward(self) -> None:
        self.BackwardFromTo(len(self._layers) - 1, 0)
        if self.debug_info:
            asum_data = asum_diff = sumsq_data = sumsq_diff = 0.0
            for i, p in enumerate(self._params):
                if self._param_owners[i] >= 0:
                    continue
                asum_data += p.asum_data()
                asum_diff += p.asum_diff()
                sumsq_data += p.sumsq_data()
                sumsq_diff += p.sumsq_diff()
            log.info("    [Backward] All net params (data, diff): L1 norm = (%s, %s); L2 norm = (%s, %s)",
                     num(np.float32(asum_data)), num(np.float32(asum_diff)),
                     num(np.float32(np.sqrt(sumsq_data))), num(np.float32(np.sqrt(sumsq_diff))))

    def ForwardBackward(self) -> float:
        _, loss = self.Forward()
        self.Backward()
        return loss

    def _mean_abs(self, blob, which):
        return _mean_abs(blob, which, self.debug_observers)

    def _forward_debug_info(self, i):
        name = self._layer_name_list[i]
        for top_id, blob in enumerate(self._top_vecs[i]):
            bname = self._blob_name_list[self._top_id_vecs[i][top_id]]
            log.info("    [Forward] Layer %s, top blob %s data: %s", name, bname, self._mean_abs(blob, "data"))
        for pid, blob in enumerate(self._layers[i].blobs):
            pname = self._param_display_names[self._param_id_vecs[i][pid]]
            log.info("    [Forward] Layer %s, param blob %s data: %s", name, pname, self._mean_abs(blob, "data"))

    def _backward_debug_info(self, i):
        name = self._layer_name_list[i]
        for b, blob in enumerate(self._bottom_vecs[i]):
            if not self._bottom_need_backward[i][b]:
                continue
            bname = self._blob_name_list[self._bottom_id_vecs[i][b]]
            log.info("    [Backward] Layer %s, bottom blob %s diff: %s", name, bname, self._mean_abs(blob, "diff"))
        layer = self._layers[i]
        for pid, blob in enumerate(layer.blobs):
            if not layer.get_param_propagate_down(pid):
                continue
            log.info("    [Backward] Layer %s, param blob %d diff: %s", name, pid, self._mean_abs(blob, "diff"))

    def update_debug_info(self, param_id: int) -> None:
        """Net::UpdateDebugInfo for one net param (used by solvers under debug_info)."""
        blob = self._params[param_id]
        owner = self._param_owners[param_id]
        lname = self._layer_name_list[self._param_layer_indices[param_id][0]]
        disp = self._param_display_names[param_id]
        if owner < 0:
            log.info("    [Update] Layer %s, param %s data: %s; diff: %s", lname, disp,
                     self._mean_abs(blob, "data"), self._mean_abs(blob, "diff"))
        else:
            olname = self._layer_name_list[self._param_layer_indices[owner][0]]
            log.info("    [Update] Layer %s, param blob %s (owned by layer %s, param %s) diff: %s",
                     lname, disp, olname, self._param_display_names[owner], self._mean_abs(blob, "diff"))

    def Update(self) -> None:
        """Net::Update: every learnable (owned) param: data -= diff.  Shared params
        share the owner's data and diff (ShareWeights), so their gradients are
        already accumulated in the owner's diff."""
        for p in self._learnable_params:
            p.update()

    def ClearParamDiffs(self) -> None:
        for p in self._learnable_params:
            p.mut_diff()[...] = 0

    def Reshape(self) -> None:
        for i, layer in enumerate(self._layers):
            try:
                layer.reshape(self._bottom_vecs[i], self._top_vecs[i])
            except CaffeError as e:
                self._name_empty(e, i)
                _annotate(e, self._layer_name_list[i], layer.type, "Reshape")
                raise
            self._top_shapes[i] = tuple(t.shape for t in self._top_vecs[i])

    def _check_top_shapes(self, i):
        """Before layer ``i``'s Backward: its tops still have the shapes its Forward (or
        Reshape) gave them.  A later in-place layer that reshapes its top (a Reduction
        or an InnerProduct written in place) changes them under it; Caffe then reads
        and writes past the blob's count, the engine stops here."""
        seen = self._top_shapes.get(i)
        if seen is None:
            return                          # never run forward: Backward on the shapes SetUp gave
        for k, top in enumerate(self._top_vecs[i]):
            if k < len(seen) and top.shape != seen[k]:
                bid = self._top_id_vecs[i][k]
                later = [self._layer_name_list[j] for j in range(i + 1, len(self._layers))
                         if bid in self._top_id_vecs[j]]
                raise ShapeError("top blob '%s' has shape %s at Backward, not the %s its Forward gave it%s: "
                                 "Caffe reads and writes past the blob's data here"
                                 % (self._blob_names[bid], _shape_str(top.shape), _shape_str(seen[k]),
                                    " (changed by layer %s, in place after it)"
                                    % ", ".join("'%s'" % n for n in later) if later else ""),
                                 blob=self._blob_names[bid])

    # -------------------------------------------------------------- weights
    def CopyTrainedLayersFrom(self, source: str | os.PathLike | caffe_pb2.NetParameter) -> None:
        """From a NetParameter, a .caffemodel path or an .h5 path.

        Every source layer is checked against its target (blob count, shapes,
        value counts) before anything is copied, so a model that does not fit
        raises and leaves every param as it was (Caffe copies layer by layer
        and would leave the layers before the bad one overwritten).  An error
        names the target layer's line in the net's prototxt."""
        try:
            self._copy_trained_layers_from(source)
        except NetError as e:
            if e.layer in self._layer_names_index:
                mark_layer(e, "split", self._layer_name_list.index(e.layer))
                self._locate(e)
            raise

    def _copy_trained_layers_from(self, source: str | os.PathLike | caffe_pb2.NetParameter) -> None:
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            if path.endswith(".h5"):
                return self._copy_from_hdf5(path)
            source = read_weights(path)
        plan = []
        src: Any
        for src in getattr(source, "layer", source):  # type: ignore[union-attr]
            lname = src.name
            if lname not in self._layer_names_index:
                log.info("Ignoring source layer %s", lname)
                continue
            target_id = self._layer_name_list.index(lname)
            target_blobs = self._layers[target_id].blobs
            if len(target_blobs) != len(src.blobs):
                raise ShapeError("Incompatible number of blobs for layer %s (source has %d, target %d)"
                                 % (lname, len(src.blobs), len(target_blobs)), layer=lname)
            for j, tb in enumerate(target_blobs):
                if not tb.shape_equals(src.blobs[j]):
                    sshape = Blob.proto_shape(src.blobs[j])
                    raise ShapeError(
                        "Cannot copy param %d weights from layer '%s'; shape mismatch.  Source param shape "
                        "is %s; target param shape is %s. To learn this layer's parameters from scratch "
                        "rather than copying from a saved net, rename the layer."
                        % (j, lname, _shape_str(sshape), tb.shape_string()), layer=lname)
                _check_proto_values(src.blobs[j], tb, j, lname)
            plan.append((target_blobs, src))
        with np.errstate(all="ignore"):     # doubles beyond float range become inf, as in Caffe
            for target_blobs, src in plan:
                for j, tb in enumerate(target_blobs):
                    tb.from_proto(src.blobs[j], reshape=False)

    def _copy_from_hdf5(self, path):
        """CopyTrainedLayersFromHDF5: Caffe's layout (``data/<layer>/<param index>``).  A
        layer may lack the datasets of params it shares from another layer (ToHDF5 writes
        only the params a layer owns); more datasets than params is an error."""
        import h5py
        plan = []
        try:
            with h5py.File(path, "r") as f:
                data = f["data"]
                for lname in data:
                    if lname not in self._layer_names_index:
                        log.info("Ignoring source layer %s", lname)
                        continue
                    plan.extend(self._hdf5_layer_plan(data[lname], lname))
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:   # h5py: corrupt files
            from engine.core.errors import ParseError
            raise ParseError("cannot read weights from HDF5 file: %s: %s" % (type(e).__name__, e),
                             path) from None
        for tb, arr in plan:
            tb.data[...] = arr

    def _hdf5_layer_plan(self, grp, lname):
        target_id = self._layer_names_index[lname]
        target_blobs = self._layers[target_id].blobs
        if len(grp) > len(target_blobs):
            raise ShapeError("Check failed: num_source_params <= target_blobs.size() (%d vs. %d) "
                             "Incompatible number of blobs for layer %s" % (len(grp), len(target_blobs), lname),
                             layer=lname)
        plan = []
        for j, tb in enumerate(target_blobs):
            if str(j) not in grp:
                if self._param_owners[self._param_id_vecs[target_id][j]] != -1:
                    continue          # shared in the target: its owner brings the values
                raise ShapeError("Incompatible number of blobs for layer %s (no dataset '%d')" % (lname, j),
                                 layer=lname)
            with np.errstate(all="ignore"):
                arr = np.asarray(grp[str(j)]).astype(tb.dtype)
            if tuple(arr.shape) != tb.shape:
                raise ShapeError("Check failed: blob_dims == blob->shape() Cannot load blob from hdf5; shape "
                                 "mismatch. Source shape is %s target shape is %s (param %d of layer '%s')"
                                 % (_shape_str(arr.shape), tb.shape_string(), j, lname), layer=lname)
            plan.append((tb, arr))
        return plan

    def load_hdf5(self, filename: str | os.PathLike) -> None:
        """pycaffe's ``load_hdf5``: CopyTrainedLayersFromHDF5, whatever the extension."""
        self._copy_from_hdf5(os.fspath(filename))

    def ShareTrainedLayersWith(self, other: Net) -> None:
        """Share every same-named layer's params with ``other``; all are checked first,
        so a mismatch raises before anything is shared."""
        plan = []
        for i, src_layer in enumerate(other.layers):
            lname = other._layer_name_list[i]
            if lname not in self._layer_names_index:
                log.info("Ignoring source layer %s", lname)
                continue
            target_blobs = self._layers[self._layer_name_list.index(lname)].blobs
            if len(target_blobs) != len(src_layer.blobs):
                raise ShapeError("Incompatible number of blobs for layer %s" % lname, layer=lname)
            for j, tb in enumerate(target_blobs):
                if tb.shape != src_layer.blobs[j].shape:
                    raise ShapeError("Cannot share param %d of layer '%s': shape %s vs %s"
                                     % (j, lname, src_layer.blobs[j].shape_string(), tb.shape_string()),
                                     layer=lname)
                plan.append((tb, src_layer.blobs[j]))
        for tb, sb in plan:
            tb.share_data(sb)

    def ToProto(self, write_diff: bool = False) -> caffe_pb2.NetParameter:
        p = caffe_pb2.NetParameter()
        p.name = self.param.name       # not self.name: a script may set that one (pycaffe's Net has none)
        for layer in self._layers:
            p.layer.add().CopyFrom(layer.to_proto(write_diff))
        return p

    def ToHDF5(self, filename: str | os.PathLike, write_diff: bool = False) -> None:
        """Net::ToHDF5: ``data/<layer>/<param index>`` float32 datasets for the params a
        layer owns (shared ones are left to their owner), and with ``write_diff`` every
        param's diff under ``diff/``."""
        import h5py
        with h5py.File(filename, "w") as f:
            data = f.create_group("data")
            diff = f.create_group("diff") if write_diff else None
            for i, layer in enumerate(self._layers):
                lname = self._layer_name_list[i]
                if lname in data:
                    raise NetError("Error saving weights to %s: two layers are named '%s'"
                                   % (os.fspath(filename), lname), layer=lname)
                g = data.create_group(lname)
                gd = diff.create_group(lname) if diff is not None else None
                for j, b in enumerate(layer.blobs):
                    if self._param_owners[self._param_id_vecs[i][j]] == -1:
                        g.create_dataset(str(j), data=b.data)
                    if gd is not None:
                        gd.create_dataset(str(j), data=b.diff)

    # -------------------------------------------------------------- pycaffe API
    # What _caffe.cpp returns by internal reference is a vector over the Net's own list
    # (changing it changes the Net); what it returns by copy is a new vector each time.
    @property
    def layers(self) -> LayerVec:
        """pycaffe's ``net.layers``: a ``caffe._caffe.LayerVec`` over the net's layers."""
        return LayerVec._view(self._layers)

    @property
    def _blobs(self) -> BlobVec:
        """pycaffe's ``net._blobs``: a ``caffe._caffe.BlobVec`` over the net's blobs."""
        return BlobVec._view(self._blob_list)

    @property
    def _blob_names(self) -> StringVec:
        """pycaffe's ``net._blob_names``: a ``caffe._caffe.StringVec`` (a copy)."""
        return StringVec._of(self._blob_name_list)

    @property
    def _layer_names(self) -> StringVec:
        """pycaffe's ``net._layer_names``: a ``caffe._caffe.StringVec`` (a copy)."""
        return StringVec._of(self._layer_name_list)

    @property
    def _inputs(self) -> IntVec:
        """pycaffe's ``net._inputs``: the input blobs' indices, a ``caffe._caffe.IntVec`` (a copy)."""
        return IntVec._of(self._input_ids)

    @property
    def _outputs(self) -> IntVec:
        """pycaffe's ``net._outputs``: the output blobs' indices, a ``caffe._caffe.IntVec`` (a copy)."""
        return IntVec._of(self._output_ids)

    @property
    def _blob_loss_weights(self) -> DtypeVec:
        """pycaffe's ``net._blob_loss_weights``: a ``caffe._caffe.DtypeVec`` over the net's
        loss weights (float32), indexed by blob."""
        return DtypeVec._view(self._loss_weight_list)

    def _bottom_ids(self, i: int) -> IntVec:
        """pycaffe's ``net._bottom_ids(i)``: layer ``i``'s bottom blob indices (an IntVec copy)."""
        return IntVec._of(self._bottom_id_vecs[i])

    def _top_ids(self, i: int) -> IntVec:
        """pycaffe's ``net._top_ids(i)``: layer ``i``'s top blob indices (an IntVec copy)."""
        return IntVec._of(self._top_id_vecs[i])

    # pycaffe.py's properties: OrderedDicts and lists, made once and kept (as pycaffe
    # keeps them on the Net), but blob_loss_weights, which pycaffe makes anew each time.
    @property
    def blobs(self) -> OrderedDict[str, Blob]:
        return self._blobs_dict

    @property
    def blob_loss_weights(self) -> OrderedDict[str, float]:
        return OrderedDict(zip(self._blob_name_list, self._blob_loss_weights))

    @property
    def layer_dict(self) -> OrderedDict[str, Layer]:
        return self._layer_dict

    @property
    def params(self) -> OrderedDict[str, BlobVec]:
        """pycaffe's ``net.params``: {layer name: the layer's ``blobs`` (a BlobVec)} for
        the layers with params, made once."""
        if self._params_cache is None:
            self._params_cache = OrderedDict((n, l.blobs) for n, l in zip(self._layer_name_list, self._layers)
                                             if len(l.blobs) > 0)
        return self._params_cache

    @property
    def inputs(self) -> list[str]:
        if self._input_list is None:
            self._input_list = [self._blob_name_list[i] for i in self._input_ids]
        return self._input_list

    @property
    def outputs(self) -> list[str]:
        if self._output_list is None:
            self._output_list = [self._blob_name_list[i] for i in self._output_ids]
        return self._output_list

    @property
    def top_names(self) -> OrderedDict[str, list[str]]:
        if self._top_names is None:
            self._top_names = OrderedDict((n, [self._blob_name_list[b] for b in self._top_id_vecs[i]])
                                          for i, n in enumerate(self._layer_name_list))
        return self._top_names

    @property
    def bottom_names(self) -> OrderedDict[str, list[str]]:
        if self._bottom_names is None:
            self._bottom_names = OrderedDict((n, [self._blob_name_list[b] for b in self._bottom_id_vecs[i]])
                                             for i, n in enumerate(self._layer_name_list))
        return self._bottom_names

    def _forward(self, start, end):
        return self.ForwardFromTo(start, end)

    def _backward(self, start, end):
        self.BackwardFromTo(start, end)

    def _layer_index(self, name):
        try:
            return self._layer_name_list.index(name)
        except ValueError:
            raise NetError("Unknown layer name '%s'" % name, layer=name) from None

    def forward(self, blobs: Sequence[str] | None = None, start: str | None = None, end: str | None = None,
                **kwargs: Any) -> dict[str, np.ndarray]:
        """pycaffe's Net.forward: run layers ``start``..``end`` (names; inclusive) and
        return {blob name: data} for the end layer's tops (the net's outputs when no
        ``end`` is given) plus the blobs named in ``blobs``.  Keyword arguments set
        the net's inputs first (all of them, each a full batch)."""
        blobs = list(blobs or [])
        start_ind = self._layer_index(start) if start is not None else 0
        if end is not None:
            end_ind = self._layer_index(end)
            outputs = _unique(self.top_names[end] + blobs)
        else:
            end_ind = len(self._layers) - 1
            outputs = _unique(self.outputs + blobs)
        if kwargs:
            self._set_batch_arrays(kwargs, self.inputs, "data", "Input blob", "inputs", "Input")
        self._forward(start_ind, end_ind)
        return self._arrays(outputs, "data")

    def _arrays(self, names: Sequence[str], which: str) -> dict[str, np.ndarray]:
        """{name: blob data or diff}; a blob that never got a shape is named in the error."""
        allb, out = self.blobs, {}
        for name in names:
            try:
                out[name] = getattr(allb[name], which)
            except ShapeError as e:
                if e.blob is None:
                    e.blob = name
                    e.args = ("%s (blob '%s')" % (e, name),) + tuple(e.args[1:])
                raise
        return out

    def _set_batch_arrays(self, arrays: dict[str, Any], names: Sequence[str], side: str, given: str,
                          expected: str, what: str) -> None:
        """pycaffe's forward(**kwargs) / backward(**kwargs): ``arrays`` must name exactly the
        blobs ``names`` (the net's ``expected``), each a full batch; they are copied into
        the blobs' ``side`` ("data" or "diff")."""
        if set(arrays) != set(names):
            raise NetError("%s arguments do not match net %s. (given: %s; net %s: %s)"
                           % (given, expected, ", ".join(sorted(arrays)), expected, ", ".join(names)))
        for name, arr in arrays.items():
            arr = np.asarray(arr)
            blob = self.blobs[name]
            if arr.shape[:1] != blob.shape[:1]:
                raise ShapeError("%s is not batch sized (blob '%s': %s given for a batch of %s)"
                                 % (what, name, _first_dim(arr.shape), _first_dim(blob.shape)), blob=name)
            getattr(blob, side)[...] = arr

    def backward(self, diffs: Sequence[str] | None = None, start: str | None = None, end: str | None = None,
                 **kwargs: Any) -> dict[str, np.ndarray]:
        """pycaffe's Net.backward: run layers ``start``..``end`` (names) backward and
        return {blob name: diff} for the end layer's bottoms (the net's inputs when no
        ``end`` is given) plus the blobs named in ``diffs``.  Keyword arguments set
        the diffs of the net's outputs first (all of them, each a full batch)."""
        diffs = list(diffs or [])
        start_ind = self._layer_index(start) if start is not None else len(self._layers) - 1
        if end is not None:
            end_ind = self._layer_index(end)
            outputs = _unique(self.bottom_names[end] + diffs)
        else:
            end_ind = 0
            outputs = _unique(self.inputs + diffs)
        if kwargs:
            self._set_batch_arrays(kwargs, self.outputs, "diff", "Top diff", "outputs", "Diff")
        self._backward(start_ind, end_ind)
        return self._arrays(outputs, "diff")

    def forward_all(self, blobs: Sequence[str] | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
        """pycaffe's forward_all: run in batches over all the given inputs (without
        inputs, one forward pass over what the net holds)."""
        all_outs: dict[str, Any] = {out: [] for out in set(self.outputs + list(blobs or []))}
        for batch in (self._batch(kwargs) if kwargs else [{}]):
            outs = self.forward(blobs=blobs, **batch)
            for out, out_blob in outs.items():
                all_outs[out].extend(out_blob.copy())
        pad = len(next(iter(all_outs.values()))) - len(next(iter(kwargs.values()))) if kwargs else 0
        for out in all_outs:
            all_outs[out] = np.asarray(all_outs[out])
            if pad:
                all_outs[out] = all_outs[out][:-pad]
        return all_outs

    def forward_backward_all(self, blobs: Sequence[str] | None = None, diffs: Sequence[str] | None = None,
                             **kwargs: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """pycaffe's forward_backward_all: forward and backward in batches over the given
        inputs (forward) and output diffs (backward); where only one kind is given, the
        other pass runs on what the net holds (as pycaffe pairs the batches with
        ``izip_longest``)."""
        all_outs: dict[str, Any] = {out: [] for out in set(self.outputs + list(blobs or []))}
        all_diffs: dict[str, Any] = {d: [] for d in set(self.inputs + list(diffs or []))}
        fwd = {k: kwargs[k] for k in self.inputs if k in kwargs}
        bwd = {k: kwargs[k] for k in self.outputs if k in kwargs}
        pairs: Any = itertools.zip_longest(self._batch(fwd), self._batch(bwd), fillvalue={})
        for fb, bb in (pairs if fwd or bwd else [({}, {})]):
            outs = self.forward(blobs=blobs, **fb)
            ds = self.backward(diffs=diffs, **bb)
            for k, v in outs.items():
                all_outs[k].extend(v.copy())
            for k, v in ds.items():
                all_diffs[k].extend(v.copy())
        pad = 0
        if kwargs:
            pad = len(next(iter(all_outs.values()))) - len(next(iter(kwargs.values())))
        for d in (all_outs, all_diffs):
            for k in d:
                d[k] = np.asarray(d[k])
                if pad:
                    d[k] = d[k][:-pad]
        return all_outs, all_diffs

    def _batch(self, blobs):
        """pycaffe's _batch: {name: a batch of each array} per batch of the net's batch
        size, the last one padded with zeros; nothing for no arrays."""
        if not blobs:
            return
        num = len(next(iter(blobs.values())))
        batch_size = next(iter(self.blobs.values())).shape[0]
        remainder = num % batch_size
        num_batches = num // batch_size
        for b in range(num_batches):
            i = b * batch_size
            yield {name: blobs[name][i:i + batch_size] for name in blobs}
        if remainder > 0:
            padded = {}
            for name in blobs:
                pad_shape = (batch_size - remainder,) + tuple(blobs[name].shape[1:])
                padded[name] = np.concatenate([blobs[name][-remainder:], np.zeros(pad_shape)])
            yield padded

    def reshape(self) -> None:
        self.Reshape()

    def copy_from(self, filename: str | os.PathLike) -> None:
        self.CopyTrainedLayersFrom(filename)

    def share_with(self, other: Net) -> None:
        self.ShareTrainedLayersWith(other)

    def save(self, filename: str | os.PathLike, write_diff: bool = False) -> None:
        from engine.core.io import write_binary
        write_binary(filename, self.ToProto(write_diff))

    def save_hdf5(self, filename: str | os.PathLike, write_diff: bool = False) -> None:
        self.ToHDF5(filename, write_diff)

    def clear_param_diffs(self) -> None:
        self.ClearParamDiffs()

    def before_forward(self, callback: Callable[[int], None]) -> None:
        self._before_forward.append(callback)

    def after_forward(self, callback: Callable[[int], None]) -> None:
        self._after_forward.append(callback)

    def before_backward(self, callback: Callable[[int], None]) -> None:
        self._before_backward.append(callback)

    def after_backward(self, callback: Callable[[int], None]) -> None:
        self._after_backward.append(callback)

    def set_input_arrays(self, data: np.ndarray, labels: np.ndarray) -> None:
        """pycaffe's set_input_arrays: feed the first (MemoryData) layer."""
        layer = self._layers[0]
        if layer.type != "MemoryData":
            raise NetError("set_input_arrays needs a MemoryData layer first, found %s" % layer.type)
        layer.set_input_arrays(data, labels)

    _set_input_arrays = set_input_arrays

    # -------------------------------------------------------------- debugger API
    @property
    def _blob_loss_weights_list(self):
        return list(self._loss_weight_list)

    @property
    def layer_names(self) -> list[str]:
        return list(self._layer_name_list)

    @property
    def blob_names(self) -> list[str]:
        return list(self._blob_name_list)

    @property
    def layer_need_backward(self) -> list[bool]:
        return list(self._layer_need_backward)

    @property
    def bottom_need_backward(self) -> list[list[bool]]:
        return [list(v) for v in self._bottom_need_backward]

    @property
    def blob_need_backward(self) -> list[bool]:
        return list(self._blob_need_backward)

    @property
    def param_owners(self) -> list[int]:
        return list(self._param_owners)

    @property
    def param_display_names(self) -> list[str]:
        return list(self._param_display_names)

    @property
    def param_layer_indices(self) -> list[tuple[int, int]]:
        return list(self._param_layer_indices)

    @property
    def learnable_params(self) -> list[Blob]:
        return list(self._learnable_params)

    @property
    def learnable_param_ids(self) -> list[int]:
        return list(self._learnable_param_ids)

    @property
    def all_params(self) -> list[Blob]:
        """Net::params(): every param blob, sharing ones included, in net order."""
        return list(self._params)

    @property
    def params_lr(self) -> list[float]:
        return list(self._params_lr)

    @property
    def params_weight_decay(self) -> list[float]:
        return list(self._params_weight_decay)

    @property
    def has_params_lr(self) -> list[bool]:
        return list(self._has_params_lr)

    @property
    def has_params_decay(self) -> list[bool]:
        return list(self._has_params_decay)

    @property
    def param_id_vecs(self) -> list[list[int]]:
        return [list(v) for v in self._param_id_vecs]

    @property
    def bottom_vecs(self) -> list[list[Blob]]:
        return self._bottom_vecs

    @property
    def top_vecs(self) -> list[list[Blob]]:
        return self._top_vecs

    @property
    def bottom_id_vecs(self) -> list[list[int]]:
        return [list(v) for v in self._bottom_id_vecs]

    @property
    def top_id_vecs(self) -> list[list[int]]:
        return [list(v) for v in self._top_id_vecs]

    @property
    def input_blob_indices(self) -> list[int]:
        return list(self._input_ids)

    @property
    def output_blob_indices(self) -> list[int]:
        return list(self._output_ids)

    @property
    def memory_used_bytes(self) -> int:
        return self.memory_used * self._dtype.itemsize

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    def has_blob(self, name: str) -> bool:
        return name in self._blob_names_index

    def blob_by_name(self, name: str) -> Blob:
        if name not in self._blob_names_index:
            raise NetError("Unknown blob name %s" % name, blob=name)
        return self._blob_list[self._blob_names_index[name]]

    def has_layer(self, name: str) -> bool:
        return name in self._layer_names_index

    def layer_by_name(self, name: str) -> Layer:
        if name not in self._layer_names_index:
            raise NetError("Unknown layer name %s" % name, layer=name)
        return self._layers[self._layer_names_index[name]]

    def __repr__(self):
        return "<Net '%s' phase %s: %d layers, %d blobs>" % (
            self.name, "TRAIN" if self.phase == TRAIN else "TEST", len(self._layers), len(self._blob_list))


def _mean_abs(blob, which, observers=()):
    """Caffe's debug_info number (mean |x|), taken from a debug record when one
    was just computed for this blob, else reduced here."""
    for obs in observers:
        v = obs.asum_mean(blob, which)
        if v is not None:
            return num(np.float32(v))
    if blob.count == 0:
        return num(np.float32(np.nan))
    s = blob.asum_data() if which == "data" else blob.asum_diff()
    return num(np.float32(s) / np.float32(blob.count))


def _shape_str(shape):
    c = 1
    for d in shape:
        c *= int(d)
    return "".join("%d " % d for d in shape) + "(%d)" % c


def _legacy_constructor_warning(network_file, weights, phase):
    """pycaffe's Net_Init_Load warnings for ``Net(model, weights, phase)``."""
    log.warning("DEPRECATION WARNING - deprecated use of Python interface")
    log.warning('Use this instead (with the named "weights" parameter):')
    log.warning("Net('%s', %d, weights='%s')", os.fspath(network_file), int(phase), os.fspath(weights))


def _unique(names):
    """``names`` without repeats, in order (pycaffe takes a set of them)."""
    return list(dict.fromkeys(names))


def _first_dim(shape):
    return str(shape[0]) if len(shape) else "a 0-d array"


def _check_proto_values(proto, blob, j, lname):
    """Blob::FromProto's value-count CHECKs, done before copying anything."""
    count = blob.count
    for which in ("data", "diff"):
        n_double, n_float = len(getattr(proto, "double_" + which)), len(getattr(proto, which))
        n = n_double if n_double else n_float
        if which == "diff" and n == 0:
            continue
        if n != count:
            raise ShapeError("Check failed: count_ == proto.%s_size() (%d vs. %d): param %d of layer '%s' "
                             "has %d %s values for shape %s" % (("double_" if n_double else "") + which,
                                                               count, n, j, lname, n, which,
                                                               blob.shape_string()), layer=lname)


def _annotate(e, layer_name, layer_type, stage):
    """Name the layer in an error raised while running it (once)."""
    if getattr(e, "layer", None) is None:
        try:
            e.layer = layer_name
        except AttributeError:
            pass
        e.args = ("%s: %s (layer '%s', type %s)" % (stage, e, layer_name, layer_type),) + tuple(e.args[1:])

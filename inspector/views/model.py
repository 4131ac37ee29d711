"""A plain graph of the net the engine built, for everything downstream.

:func:`build_graph` reads a :class:`engine.Net` (and, optionally, the
NetParameter it was built from, to draw the layers the NetState filtered out)
and returns a :class:`NetGraph` of frozen dataclasses: layers, blobs, the
edges blobs make between layers (in-place chains resolved to the layer that
last wrote the blob), inserted splits, filtered-out "ghost" layers with their
rule, shared params with owners and sharers, and the backward decisions with
their reasons.  No protobuf or engine type leaks past this module: settings are
turned into text and rows here (a layer's settings when they are first read).
"""
import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Dict, Optional, Tuple

from google.protobuf import descriptor as _descriptor
from google.protobuf import text_format

import engine
from engine.proto import caffe_pb2
from inspector.views import layer_meta

TRAIN, TEST = 0, 1


@dataclass(frozen=True)
class ParamInfo:
    index: int                    # position among the layer's param blobs
    display_name: str             # Caffe's display name ("0" or the ParamSpec name)
    net_param_id: int
    shape: Tuple[int, ...]
    count: int
    lr_mult: float                # as Net::params_lr() (owner's, for shared params)
    decay_mult: float
    propagate_down: bool          # param_propagate_down (the layer learns it)
    owner: Optional[Tuple[str, int]] = None    # (layer, param index) that owns it, if shared
    sharers: Tuple[Tuple[str, int], ...] = ()  # (layer, param index) sharing this one
    share_mode: str = ""


@dataclass(frozen=True)
class LayerNode:
    index: int
    name: str
    type: str
    category: str
    bottoms: Tuple[str, ...]
    bottom_ids: Tuple[int, ...]
    tops: Tuple[str, ...]
    top_ids: Tuple[int, ...]
    in_place: Tuple[bool, ...]            # per top: written in place over its bottom
    params: Tuple[ParamInfo, ...]
    need_backward: bool
    backward_rule: str
    backward_reason: str
    bottom_need_backward: Tuple[bool, ...]
    loss_weights: Tuple[float, ...]       # per top
    is_split: bool = False
    split_blob: str = ""                  # for a split: the blob it copies
    source_index: int = -1                # position in the unfiltered net (-1: inserted / unknown)
    top_bytes: int = 0                    # data bytes of the tops it allocates (not in place)
    caffe_top_count: int = 0              # Caffe's memory_used_ share: every top's count
    param_bytes: int = 0                  # data bytes of the params it owns
    stand_in: str = ""                    # a data layer stood in by an Input (its source is missing): why
    # the LayerParameter as written: read only for ``written`` and ``settings``, when a layer's
    # details are shown (turning all 721 of ResNet-152 into text was a quarter of its graph's build)
    source: Any = field(default=None, compare=False, hash=False, repr=False)

    @property
    def has_params(self):
        return bool(self.params)

    @cached_property
    def written(self):
        """The layer as written (prototxt text, without blobs)."""
        return _written(self.source) if self.source is not None else ""

    @cached_property
    def settings(self):
        """((param field, ((setting, effective value, set in the file), ...)), ...)."""
        return _settings(self.source) if self.source is not None else ()


@dataclass(frozen=True)
class BlobNode:
    id: int
    name: str
    shape: Tuple[int, ...]
    count: int
    bytes: int
    writers: Tuple[int, ...]              # layer indices writing it, in net order
    readers: Tuple[Tuple[int, int], ...]  # (layer index, bottom index)
    is_input: bool
    is_output: bool
    loss_weight: float
    need_backward: bool


@dataclass(frozen=True)
class Edge:
    blob_id: int
    blob: str
    src: int              # producing layer index (-1: nobody in this net)
    src_top: int
    dst: int              # consuming layer index
    dst_bottom: int
    shape: Tuple[int, ...]


@dataclass(frozen=True)
class GhostLayer:
    """A layer the NetState filtered out, with the rule that dropped it."""
    index: int            # position in the unfiltered net
    name: str
    type: str
    category: str
    bottoms: Tuple[str, ...]
    tops: Tuple[str, ...]
    rule_kind: str
    rule_index: int
    rule: str
    reason: str


@dataclass(frozen=True)
class GhostEdge:
    """A blob a ghost layer would have read: from a real layer or another ghost."""
    blob: str
    src_kind: str         # "layer" or "ghost"
    src: int              # layer index, or position in NetGraph.ghosts
    dst: int              # position in NetGraph.ghosts


@dataclass(frozen=True)
class SplitInfo:
    name: str
    blob: str
    producer: str
    tops: Tuple[str, ...]
    consumers: Tuple[Tuple[str, int, str], ...]   # (layer, bottom index, split top)
    loss_weight: float


@dataclass(frozen=True)
class SharedInfo:
    layer: str
    param_index: int
    name: str
    owner_layer: str
    owner_param_index: int
    mode: str


@dataclass(frozen=True)
class StandInTop:
    name: str
    shape: Tuple[int, ...]
    text: str                             # the shape and where each part came from
    assumed: Tuple[str, ...] = ()         # what was assumed (nothing: known from the params, or given)
    given: bool = False


@dataclass(frozen=True)
class StandInInfo:
    """A data layer whose source is missing, stood in by an Input (engine.core.standins)."""
    layer: str
    type: str
    field: str
    source: str
    reason: str
    tops: Tuple[StandInTop, ...]
    path: str = ""                        # where the source was looked for

    @property
    def assumed(self):
        return any(t.assumed for t in self.tops)


def stand_in_infos(records):
    """StandInInfo of the engine's StandIn records (engine.core.standins)."""
    return tuple(StandInInfo(s.layer, s.type, s.field, s.source, s.reason,
                             tuple(StandInTop(t.name, tuple(int(d) for d in t.shape), t.describe(),
                                              tuple(t.assumed), bool(t.given)) for t in s.tops),
                             s.path)
                 for s in records or ())


UNNAMED = "(unnamed)"


@dataclass(frozen=True)
class NetGraph:
    name: str
    phase: int
    level: int
    stages: Tuple[str, ...]
    layers: Tuple[LayerNode, ...]
    blobs: Tuple[BlobNode, ...]
    edges: Tuple[Edge, ...]
    ghosts: Tuple[GhostLayer, ...] = ()
    ghost_edges: Tuple[GhostEdge, ...] = ()
    splits: Tuple[SplitInfo, ...] = ()
    shared: Tuple[SharedInfo, ...] = ()
    inputs: Tuple[str, ...] = ()
    outputs: Tuple[str, ...] = ()
    memory_used_bytes: int = 0
    itemsize: int = 4
    transcript: Tuple[Tuple[str, str], ...] = ()
    rule_stages: Tuple[str, ...] = ()       # every stage named by a rule in the source
    stand_ins: Tuple[StandInInfo, ...] = ()  # data layers stood in (structure only)
    key: str = ""                           # identifies the structure (for layout caches)
    _layer_index: Dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    _blob_index: Dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def phase_name(self):
        return "TRAIN" if self.phase == TRAIN else "TEST"

    @property
    def shown_name(self):
        """The net's name as the page shows it: a net without one is "(unnamed)" (Caffe gives
        it none: NetParameter.name is empty), everywhere the page names it."""
        return self.name or UNNAMED

    def layer(self, name):
        """The LayerNode called ``name`` (KeyError if none)."""
        return self.layers[self._layer_index[name]]

    def has_layer(self, name):
        return name in self._layer_index

    def blob(self, name):
        return self.blobs[self._blob_index[name]]

    def has_blob(self, name):
        return name in self._blob_index

    def layer_names(self):
        return [l.name for l in self.layers]


# ------------------------------------------------------------------ settings as text
def _scalar_text(fd, value):
    if fd.type == _descriptor.FieldDescriptor.TYPE_ENUM:
        ev = fd.enum_type.values_by_number.get(int(value))
        return ev.name if ev is not None else str(value)
    if fd.type == _descriptor.FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if fd.type in (_descriptor.FieldDescriptor.TYPE_FLOAT, _descriptor.FieldDescriptor.TYPE_DOUBLE):
        return "%g" % value
    if fd.type == _descriptor.FieldDescriptor.TYPE_STRING:
        return '"%s"' % value
    if fd.type == _descriptor.FieldDescriptor.TYPE_BYTES:
        return "<%d bytes>" % len(value)
    return str(value)


def _is_repeated(fd):
    if hasattr(fd, "is_repeated"):          # protobuf >= 5
        return bool(fd.is_repeated)
    return fd.label == _descriptor.FieldDescriptor.LABEL_REPEATED


def _value_text(fd, value, depth):
    if fd.type == _descriptor.FieldDescriptor.TYPE_MESSAGE:
        return "{%s}" % _effective_text(value, depth + 1)
    return _scalar_text(fd, value)


def _effective_text(msg, depth=0):
    """A message on one line with every field's effective value (defaults included)."""
    if depth > 2:
        return text_format.MessageToString(msg, as_one_line=True)
    parts = []
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if _is_repeated(fd):
            if len(value):
                parts.append("%s: [%s]" % (fd.name, ", ".join(_value_text(fd, v, depth) for v in value)))
        elif fd.type == _descriptor.FieldDescriptor.TYPE_MESSAGE and not msg.HasField(fd.name):
            continue
        else:
            parts.append("%s: %s" % (fd.name, _value_text(fd, value, depth)))
    return " ".join(parts)


def setting_rows(msg):
    """((field, effective value, set in the file), ...) for one settings message."""
    rows = []
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if _is_repeated(fd):
            is_set = len(value) > 0
            text = "[%s]" % ", ".join(_value_text(fd, v, 0) for v in value)
        elif fd.type == _descriptor.FieldDescriptor.TYPE_MESSAGE:
            is_set = msg.HasField(fd.name)
            text = "{%s}" % _effective_text(value, 1) if is_set else "(unset)"
        else:
            is_set = msg.HasField(fd.name)
            text = _scalar_text(fd, value)
        rows.append((fd.name, text, bool(is_set)))
    return tuple(rows)


def _settings(lp):
    fields = list(layer_meta.meta(lp.type).param_fields)
    for fd in lp.DESCRIPTOR.fields:      # anything else the file sets (unknown types, extras)
        if fd.name.endswith("_param") and fd.name not in fields and not _is_repeated(fd) \
                and fd.type == _descriptor.FieldDescriptor.TYPE_MESSAGE and lp.HasField(fd.name):
            fields.append(fd.name)
    out = []
    for name in fields:
        if not hasattr(lp, name):
            continue
        out.append((name, setting_rows(getattr(lp, name))))
    return tuple(out)


def _written(lp):
    p = caffe_pb2.LayerParameter()
    p.CopyFrom(lp)
    del p.blobs[:]
    return text_format.MessageToString(p)


def _rule_stages(param):
    stages = {}                 # (a dict keeps the order and finds a stage at once: linear in the rules)
    if param is None:
        return ()
    for lp in param.layer:
        for rule in list(lp.include) + list(lp.exclude):
            for s in list(rule.stage) + list(rule.not_stage):
                stages.setdefault(s, None)
    return tuple(stages)


# ------------------------------------------------------------------ the graph
def build_graph(net, source_param=None):
    """A :class:`NetGraph` of ``net``.

    ``source_param``: the (upgraded, unfiltered) NetParameter the net was built
    from; with it the graph also holds the filtered-out layers (as ghosts) and
    the layers exactly as written.  Without it the net's own (filtered, split)
    param is used.
    """
    rec = net.init_record
    itemsize = int(net.dtype.itemsize)
    source_layers, source_index = _source_layers(net, source_param)
    stand_ins = stand_in_infos(getattr(rec, "stand_ins", ()))
    layers, edges, writers, readers = _layer_nodes(net, itemsize, source_layers, source_index,
                                                   {s.layer: s for s in stand_ins})
    blobs = _blob_nodes(net, itemsize, writers, readers)
    ghosts = _ghost_layers(rec, source_param)
    ghost_edges = _ghost_edges(layers, ghosts, source_param)
    splits = tuple(SplitInfo(s.name, s.blob, s.producer, tuple(s.tops),
                             tuple((c.layer, c.bottom_index, c.split_top) for c in s.consumers),
                             float(s.loss_weight)) for s in rec.splits)
    shared = tuple(SharedInfo(s.layer, s.param_index, s.name, s.owner_layer, s.owner_param_index, s.mode)
                   for s in rec.shared)
    state = net.param.state
    key_src = repr(([(l.name, l.type, l.bottoms, l.tops) for l in layers],
                    [(g.name, g.bottoms, g.tops) for g in ghosts]))
    return NetGraph(
        name=net.name, phase=int(net.phase), level=int(state.level), stages=tuple(state.stage),
        layers=tuple(layers), blobs=blobs, edges=tuple(edges), ghosts=tuple(ghosts),
        ghost_edges=ghost_edges,
        splits=splits, shared=shared, inputs=tuple(net.inputs), outputs=tuple(net.outputs),
        memory_used_bytes=int(net.memory_used_bytes), itemsize=itemsize,
        transcript=tuple((lvl, msg) for lvl, msg in rec.transcript),
        rule_stages=_rule_stages(source_param if source_param is not None else net.param),
        stand_ins=stand_ins,
        key=hashlib.sha1(key_src.encode()).hexdigest()[:16],
        _layer_index={l.name: l.index for l in layers},
        _blob_index={b.name: b.id for b in blobs})


def _source_layers(net, source_param):
    """``(source_layers, source_index)``: for each net layer index, the source
    LayerParameter it came from and its index in the source (splits have none)."""
    rec = net.init_record
    source_layers = {}
    source_index = {}
    if source_param is None:
        return source_layers, source_index
    split_recs = {s.name for s in rec.splits}
    dropped = {d.index for d in rec.filtered}
    kept = [i for i in range(len(source_param.layer)) if i not in dropped]
    k = 0
    for i, n in enumerate(net.layer_names):
        if n in split_recs and net.layers[i].type == "Split":
            continue
        if k < len(kept) and source_param.layer[kept[k]].name == n:
            source_layers[i] = source_param.layer[kept[k]]
            source_index[i] = kept[k]
        k += 1
    return source_layers, source_index


class _ParamTables:
    """The net's param tables, read once: owners, sharers, multipliers, share modes."""

    def __init__(self, net):
        self.names = net.layer_names
        self.owners = net.param_owners
        self.pli = net.param_layer_indices
        self.disp = net.param_display_names
        self.lrs, self.decays = net.params_lr, net.params_weight_decay
        self.lids = net.learnable_param_ids
        self.param_ids = net.param_id_vecs
        self.sharers = {}
        for pid, owner in enumerate(self.owners):
            if owner >= 0:
                l, i = self.pli[pid]
                self.sharers.setdefault(owner, []).append((self.names[l], i))
        self.shared_mode = {(s.layer, s.param_index): s.mode for s in net.init_record.shared}

    def params(self, i, layer, itemsize):
        """``(ParamInfo tuple, bytes of the params layer ``i`` owns)``."""
        name = self.names[i]
        params = []
        param_bytes = 0
        for k, pid in enumerate(self.param_ids[i]):
            blob = layer.blobs[k]
            owner = self.owners[pid]
            lid = self.lids[pid]
            own = None
            if owner >= 0:
                ol, oi = self.pli[owner]
                own = (self.names[ol], oi)
            else:
                param_bytes += blob.count * itemsize
            params.append(ParamInfo(
                k, self.disp[pid], pid, tuple(int(d) for d in blob.shape), int(blob.count),
                float(self.lrs[lid]), float(self.decays[lid]), bool(layer.get_param_propagate_down(k)),
                own, tuple(self.sharers.get(pid, ())), self.shared_mode.get((name, k), "")))
        return tuple(params), param_bytes


def _layer_nodes(net, itemsize, source_layers, source_index, stand_ins=None):
    """``(layers, edges, writers, readers)``: a LayerNode per net layer, the
    edges its bottoms make (from the blob's last writer), and per blob id the
    layers writing it and the ``(layer, bottom index)`` pairs reading it."""
    rec = net.init_record
    names = net.layer_names
    blob_names = net.blob_names
    split_recs = {s.name: s for s in rec.splits}
    tables = _ParamTables(net)
    top_ids, bottom_ids = net.top_id_vecs, net.bottom_id_vecs
    bnb = net.bottom_need_backward
    lnb = net.layer_need_backward
    all_blobs = [net.blobs[n] for n in blob_names]
    in_place_set = {(l, t) for (l, t, _b) in rec.in_place}

    layers = []
    writers = {b: [] for b in range(len(blob_names))}
    readers = {b: [] for b in range(len(blob_names))}
    edges = []
    last_writer = {}
    for i, name in enumerate(names):
        layer = net.layers[i]
        lp = source_layers.get(i, net.param.layer[i])
        params, param_bytes = tables.params(i, layer, itemsize)
        tops = tuple(blob_names[b] for b in top_ids[i])
        bottoms = tuple(blob_names[b] for b in bottom_ids[i])
        in_place = tuple((name, t) in in_place_set for t in range(len(tops)))
        for j, b in enumerate(bottom_ids[i]):
            readers[b].append((i, j))
            src = last_writer.get(b, (-1, -1))
            edges.append(Edge(b, blob_names[b], src[0], src[1], i, j,
                              tuple(int(d) for d in all_blobs[b].shape)))
        top_bytes = 0
        caffe_count = 0
        for t, b in enumerate(top_ids[i]):
            writers[b].append(i)
            last_writer[b] = (i, t)
            caffe_count += int(all_blobs[b].count)
            if not in_place[t]:
                top_bytes += int(all_blobs[b].count) * itemsize
        decision = rec.backward[i] if i < len(rec.backward) else None
        sp = split_recs.get(name) if layer.type == "Split" else None
        si = (stand_ins or {}).get(name) if layer.type == "Input" else None
        ltype = si.type if si is not None else layer.type       # drawn as written: a Data layer stays one
        layers.append(LayerNode(
            index=i, name=name, type=ltype, category=layer_meta.category(ltype),
            bottoms=bottoms, bottom_ids=tuple(bottom_ids[i]), tops=tops, top_ids=tuple(top_ids[i]),
            in_place=in_place, params=params, need_backward=bool(lnb[i]),
            backward_rule=decision.rule if decision else "",
            backward_reason=decision.detail if decision else "",
            bottom_need_backward=tuple(bool(x) for x in bnb[i]),
            loss_weights=tuple(float(engine.loss_weight(layer, t)) for t in range(len(tops))),
            is_split=sp is not None, split_blob=sp.blob if sp else "",
            source_index=source_index.get(i, -1), top_bytes=top_bytes, caffe_top_count=caffe_count,
            param_bytes=param_bytes, source=lp,
            stand_in="stood in by an Input: %s '%s' %s" % (si.field, si.source, si.reason) if si else ""))
    return layers, edges, writers, readers


def _blob_nodes(net, itemsize, writers, readers):
    inputs = set(net.inputs)
    outputs = set(net.outputs)
    loss_w = net.blob_loss_weights
    bnb_blob = net.blob_need_backward
    all_blobs = [net.blobs[n] for n in net.blob_names]
    return tuple(BlobNode(
        b, n, tuple(int(d) for d in all_blobs[b].shape), int(all_blobs[b].count),
        int(all_blobs[b].count) * itemsize, tuple(writers[b]), tuple(readers[b]),
        n in inputs, n in outputs, float(loss_w.get(n, 0.0)), bool(bnb_blob[b]))
        for b, n in enumerate(net.blob_names))


def _ghost_layers(rec, source_param):
    """A GhostLayer per layer the NetState filtered out, with its rule."""
    ghosts = []
    for d in rec.filtered:
        gl = source_param.layer[d.index] if source_param is not None and d.index < len(source_param.layer) else None
        ghosts.append(GhostLayer(
            d.index, d.name, d.type, layer_meta.category(d.type),
            tuple(gl.bottom) if gl is not None else (), tuple(gl.top) if gl is not None else (),
            d.rule_kind, d.rule_index, d.rule, d.reason))
    return ghosts


def _ghost_edges(layers, ghosts, source_param):
    """Where each ghost's bottoms would have come from: the last layer (kept or
    filtered) before it in the source that wrote a blob of that name."""
    if source_param is None or not ghosts:
        return ()
    by_source = {}
    for l in layers:
        if l.source_index >= 0:
            by_source[l.source_index] = ("layer", l.index)
    for g_pos, g in enumerate(ghosts):
        by_source[g.index] = ("ghost", g_pos)
    out = []
    last = {}
    for s in range(len(source_param.layer)):
        who = by_source.get(s)
        if who is None:
            continue
        if who[0] == "ghost":
            for b in source_param.layer[s].bottom:
                if b in last:
                    out.append(GhostEdge(b, last[b][0], last[b][1], who[1]))
        for t in source_param.layer[s].top:
            last[t] = who
    return tuple(out)

"""NetGraph + debug records → what the graph figure shows.  Pure.

- :func:`display_graph`: the nodes and edges to draw, given the view options
  (blobs as edges or as nodes, splits shown or folded, in-place chains folded
  into their producer, ghosts of filtered layers).
- :func:`layer_metrics`: per-layer numbers from the latest records (mean
  |data|, mean |diff|, NaN/Inf, time).
- :func:`graph_view`: positions (from a Layout) + colours + states + hover
  text for every node and edge, ready for :mod:`inspector.views.figures`.
"""
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from engine import human_bytes
from engine.instruments.blocks import drawn_groups
from engine.instruments.blocks import fold as folding  # the reports fold the same way
from inspector.views import layer_meta

from .run_state import FRESH, NA, NOT_RUN, STALE

# ------------------------------------------------------------------ options
COLOUR_MODES = (
    ("category", "layer category"),
    ("backward", "needs backward"),
    ("data", "mean |data| of tops"),
    ("diff", "bottom gradient: mean |diff| of bottoms"),
    ("param_diff", "param gradient: mean |diff| of weights/biases"),
    ("update_ratio", "update ratio |Δw|/|w| (last solver step)"),
    ("reldiff", "relative difference (Compare)"),
    ("nonfinite", "NaN / Inf"),
    ("time", "time (ms)"),
    ("memory", "memory (bytes)"),
    ("flops", "FLOPs"),
    ("state", "ran / stale"),
)
COLOUR_KEYS = tuple(k for k, _ in COLOUR_MODES)


@dataclass(frozen=True)
class DisplayOptions:
    blobs_as_nodes: bool = False
    fold_splits: bool = True
    fold_inplace: bool = False
    show_ghosts: bool = True
    labels: bool = True


# ------------------------------------------------------------------ display graph
@dataclass(frozen=True)
class DNode:
    id: str
    kind: str                      # "layer", "blob", "ghost", "output"
    name: str                      # layer name / blob name / ghost name
    label: str
    layers: Tuple[int, ...] = ()   # layer indices shown by this node (folded chains: several)
    blob_id: int = -1
    ghost: int = -1
    category: str = "other"
    sort_key: float = 0.0
    group: str = ""                # the innermost expanded block drawn around it ("" : none)
    block: str = ""                # kind "block": the folded block's id


@dataclass(frozen=True)
class DEdge:
    src: str
    dst: str
    kind: str                      # "data" or "ghost"
    blob: str
    blob_id: int = -1
    src_layer: int = -1            # the layer that wrote the blob (-1: none / ghost)
    shape: Tuple[int, ...] = ()


@dataclass(frozen=True)
class DisplayGraph:
    nodes: Tuple[DNode, ...]
    edges: Tuple[DEdge, ...]
    node_of_layer: Dict[int, str]
    groups: Dict[str, Optional[str]] = field(default_factory=dict)   # expanded block -> its parent block
    blocks: Dict[str, Any] = field(default_factory=dict)              # every block of the net, by id
    split_sources: Dict[int, int] = field(default_factory=dict)       # folded split -> the drawn layer it follows

    def layout_input(self):
        """(node ids in preferred order, (src, dst) pairs, {node: width}) for
        graph_layout; widths in x units of about one label character."""
        nodes = tuple(n.id for n in sorted(self.nodes, key=lambda n: n.sort_key))
        seen = []
        s = set()
        for e in self.edges:
            k = (e.src, e.dst)
            if k not in s:
                s.add(k)
                seen.append(k)
        widths = {n.id: node_width(n) for n in self.nodes}
        return nodes, tuple(seen), widths

    def member_of(self):
        """{node id: the expanded block drawn around it} for compound_layout."""
        return {n.id: n.group for n in self.nodes if n.group}

    def wrappable(self):
        """The folded blocks: long chains of them are laid out in columns."""
        return frozenset(n.id for n in self.nodes if n.kind == "block")

    def split_source(self, layer):
        """The drawn layer a folded split ``layer`` copies the output of (None: none)."""
        return self.split_sources.get(layer)


CHAR = 1.0          # x units per label character
BOX = 4.0           # x units for a node's marker and the gap after its label


def node_width(node):
    return BOX + CHAR * max(len(line) for line in node.label.split("\n"))


def _shape_text(shape):
    return "×".join(str(d) for d in shape) if shape else "scalar"


def block_label(block, children=0):
    """A block's name and size: its blocks when it holds some (a stage: "res4 · 36
    blocks"), else its layers ("res4b22 · 14 layers")."""
    if children:
        return "%s · %d block%s" % (block.name, children, "" if children == 1 else "s")
    return "%s · %d layers" % (block.name, len(block.layers))


def child_counts(blocks):
    """{block id: how many blocks it holds directly, when they hold all its layers (a
    stage); absent when it holds layers of its own too (a section around a stem)}."""
    blocks = list(blocks)
    out: Dict[str, int] = {}
    covered: Dict[str, set] = {}
    for b in blocks:
        if b.parent:
            out[b.parent] = out.get(b.parent, 0) + 1
            covered.setdefault(b.parent, set()).update(b.layers)
    for b in blocks:
        if b.id in out and not covered[b.id] >= set(b.layers):
            del out[b.id]
    return out


def inner_blocks(blocks):
    """{block id: the ids of the blocks inside it, at any depth}."""
    by_id = {b.id: b for b in blocks}
    out: Dict[str, list] = {b.id: [] for b in blocks}
    for b in blocks:
        p = b.parent
        while p is not None and p in by_id:
            out[p].append(b.id)
            p = by_id[p].parent
    return out


def display_graph(graph, opts=DisplayOptions(), blocks=(), expanded=None):
    """The nodes and edges to draw for ``graph`` under ``opts``; ``blocks``
    (engine.instruments.blocks.find_blocks of its layers) are drawn folded
    into one node each unless ``expanded`` (ids; None: all) names them."""
    folded_at, group_at, groups = folding(blocks, expanded)
    by_id = {b.id: b for b in blocks}
    src_of = {}
    for e in graph.edges:
        src_of.setdefault((e.dst, e.dst_bottom), e.src)
    node_of, members = _node_of_layer(graph.layers, src_of, folded_at, opts)
    nodes = _layer_nodes(graph, members, by_id, group_at, child_counts(blocks))
    wiring = _Wiring(graph, opts, nodes, node_of, src_of, folded_at)
    for e in graph.edges:
        wiring.data_edge(e)
    for name in graph.outputs:
        wiring.output(name)
    nodes.update(wiring.blob_nodes)
    edges = wiring.edges
    if opts.show_ghosts and graph.ghosts:
        edges.extend(_ghost_nodes(graph, nodes, node_of))
    return DisplayGraph(tuple(nodes.values()), tuple(edges), node_of,
                        drawn_groups(groups, (nd.group for nd in nodes.values())), by_id,
                        _split_sources(graph.layers, src_of, node_of))


def _split_sources(layers, src_of, node_of):
    """{folded split: the drawn layer whose output it copies}."""
    out = {}
    for l in layers:
        if l.is_split and l.index not in node_of:
            p = src_of.get((l.index, 0), -1)
            while p >= 0 and p not in node_of:
                p = src_of.get((p, 0), -1)
            if p >= 0:
                out[l.index] = p
    return out


def _node_of_layer(layers, src_of, folded_at, opts):
    """``(node_of, members)``: the node id drawing each layer (folded splits have
    none; a folded block's layers its block node; with ``fold_inplace`` a layer
    whose tops are all in place its producer's node), and each node's layers."""
    node_of = {}
    members = {}
    for l in layers:
        if opts.fold_splits and l.is_split and l.index not in folded_at:
            continue
        nid = "L%d" % l.index
        if l.index in folded_at:
            nid = "K:" + folded_at[l.index]
        elif opts.fold_inplace and l.tops and all(l.in_place):
            p = src_of.get((l.index, 0), -1)
            while p >= 0 and opts.fold_splits and layers[p].is_split:
                p = src_of.get((p, 0), -1)
            if p >= 0 and p in node_of:
                nid = node_of[p]
        node_of[l.index] = nid
        members.setdefault(nid, []).append(l.index)
    return node_of, members


def _layer_nodes(graph, members, by_id, group_at, children):
    """{node id: DNode} of the layer and folded-block nodes (``children``: child_counts)."""
    layers = graph.layers
    nodes = {}
    for nid, idx in members.items():
        first = layers[idx[0]]
        if nid.startswith("K:"):
            b = by_id[nid[2:]]
            nodes[nid] = DNode(nid, "block", b.name, block_label(b, children.get(b.id, 0)), tuple(b.layers),
                               category=_main_category(graph, b.layers), sort_key=float(b.layers[0]),
                               group=b.parent or "", block=b.id)
            continue
        label = first.name if len(idx) == 1 else "%s (+%d)" % (first.name, len(idx) - 1)
        nodes[nid] = DNode(nid, "layer", first.name, label, tuple(idx), category=first.category,
                           sort_key=float(idx[0]), group=group_at.get(idx[0], ""))
    return nodes


class _Wiring:
    """The data edges between the drawn nodes, adding the net's input nodes (to
    ``nodes``), output nodes and, with ``blobs_as_nodes``, blob nodes."""

    def __init__(self, graph, opts, nodes, node_of, src_of, folded_at):
        self.graph, self.opts, self.nodes, self.node_of = graph, opts, nodes, node_of
        self.src_of, self.folded_at = src_of, folded_at
        self.edges = []
        self.blob_nodes = {}
        self.drawn = set()

    def resolve(self, src, blob):
        """Follow folded splits up to the real producer; returns (layer, blob name)."""
        layers = self.graph.layers
        while src >= 0 and self.opts.fold_splits and layers[src].is_split:
            b = layers[src].split_blob or blob
            if src in self.folded_at:            # a split inside a folded block: the block writes the blob
                return src, b
            src, blob = self.src_of.get((src, 0), -1), b
        return src, blob

    def blob_node(self, blob_id, name, writer, shape):
        bid = "B%d@%d" % (blob_id, writer)
        if bid not in self.blob_nodes:
            self.blob_nodes[bid] = DNode(bid, "blob", name, "%s %s" % (name, _shape_text(shape)),
                                         blob_id=blob_id, category="blob", sort_key=writer + 0.5,
                                         group=self.nodes[self.node_of[writer]].group)
        return bid

    def data_edge(self, e):
        graph, nodes = self.graph, self.nodes
        if e.dst not in self.node_of:
            return        # a folded split: its consumers are wired to its source
        src, blob = self.resolve(e.src, e.blob)
        dst_id = self.node_of[e.dst]
        blob_id = graph.blob(blob).id if graph.has_blob(blob) else e.blob_id
        shape = graph.blobs[blob_id].shape if 0 <= blob_id < len(graph.blobs) else e.shape
        if src < 0:
            src_id = "I%d" % blob_id
            if src_id not in nodes:
                nodes[src_id] = DNode(src_id, "blob", blob, "%s %s" % (blob, _shape_text(shape)),
                                      blob_id=blob_id, category="blob", sort_key=-1.0)
        else:
            src_id = self.node_of[src]
        if src_id == dst_id:
            return        # inside a folded chain
        if (src_id, dst_id, blob) in self.drawn:
            return        # a blob read twice inside a folded block: one edge
        self.drawn.add((src_id, dst_id, blob))
        if self.opts.blobs_as_nodes and src >= 0:
            mid = self.blob_node(blob_id, blob, src, shape)
            if (src_id, mid, blob) not in self.drawn:
                self.drawn.add((src_id, mid, blob))
                self.edges.append(DEdge(src_id, mid, "data", blob, blob_id, src, shape))
            self.edges.append(DEdge(mid, dst_id, "data", blob, blob_id, src, shape))
        else:
            self.edges.append(DEdge(src_id, dst_id, "data", blob, blob_id, src, shape))

    def output(self, name):
        """A net output: a small terminal node (or its blob node) after its last writer."""
        b = self.graph.blob(name)
        if not b.writers:
            return
        w = b.writers[-1]
        if w not in self.node_of:
            return
        if self.opts.blobs_as_nodes:
            bid = self.blob_node(b.id, name, w, b.shape)
            self.edges.append(DEdge(self.node_of[w], bid, "data", name, b.id, w, b.shape))
        else:
            oid = "O%d" % b.id
            self.nodes[oid] = DNode(oid, "output", name, name, blob_id=b.id, category="blob",
                                    sort_key=w + 0.6, group=self.nodes[self.node_of[w]].group)
            self.edges.append(DEdge(self.node_of[w], oid, "data", name, b.id, w, b.shape))


def _ghost_nodes(graph, nodes, node_of):
    """Adds a node per filtered-out layer to ``nodes`` (placed before the first
    kept layer after it in the source); returns the ghost edges."""
    layers = graph.layers
    src_idx = [(l.source_index, l.index) for l in layers if l.source_index >= 0]
    for k, g in enumerate(graph.ghosts):
        after = [li for si, li in src_idx if si > g.index]
        key = (after[0] - 0.4) if after else len(layers) + 0.5
        gid = "G%d" % k
        nodes[gid] = DNode(gid, "ghost", g.name, g.name, ghost=k, category=g.category, sort_key=key)
    edges = []
    for ge in graph.ghost_edges:
        if ge.src_kind == "ghost":
            src_id = "G%d" % ge.src
        else:
            src_id = node_of.get(ge.src)
            if src_id is None:
                continue
        edges.append(DEdge(src_id, "G%d" % ge.dst, "ghost", ge.blob))
    return edges


def _main_category(graph, layer_ids):
    """The category of most of a block's layers (splits and in-place helpers aside when possible)."""
    counts = {}
    for i in layer_ids:
        l = graph.layers[i]
        if l.is_split or (l.tops and all(l.in_place)):
            continue
        counts[l.category] = counts.get(l.category, 0) + 1
    if not counts:
        return graph.layers[layer_ids[0]].category if layer_ids else "other"
    return max(counts.items(), key=lambda kv: kv[1])[0]


# ------------------------------------------------------------------ metrics
@dataclass(frozen=True)
class LayerMetric:
    data: Optional[float] = None        # mean |data| over the tops (latest forward)
    diff: Optional[float] = None        # mean |diff| over the bottoms that take a gradient, latest backward
    nonfinite: bool = False
    nonfinite_where: str = ""
    fwd_ms: Optional[float] = None
    bwd_ms: Optional[float] = None
    loss: Optional[float] = None
    param_diff: Optional[float] = None  # mean |diff| over the param blobs the layer learns, latest backward
    update_ratio: Optional[float] = None    # largest |Δw|₂/|w|₂ of its params, latest solver update
    rel_diff: Optional[float] = None    # largest relative difference in the active comparison

    @property
    def time_ms(self):
        if self.fwd_ms is None and self.bwd_ms is None:
            return None
        return (self.fwd_ms or 0.0) + (self.bwd_ms or 0.0)


def _mean(vals):
    vals = [v for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def _nonfinite_where(rec):
    for b in rec.blobs:
        for which in ("data", "diff"):
            s = getattr(b, which)
            if s is not None and not s.finite:
                return "%s %s %s" % (b.role, b.name, which)
    return ""


def layer_metrics(graph, latest):
    """{layer index: LayerMetric} from ``latest`` = Recorder.latest_layer_records()."""
    out = {}
    for l in graph.layers:
        f = latest.get((l.index, "forward"))
        b = latest.get((l.index, "backward"))
        data = diff = None
        nonfinite = False
        where = ""
        if f is not None:
            data = _mean([x.data.asum_mean for x in f.blobs if x.role == "top" and x.data is not None])
            if f.nonfinite:
                nonfinite, where = True, "forward: " + _nonfinite_where(f)
        param_diff = ratio = None
        if b is not None:
            diff = _mean([x.diff.asum_mean for x in b.blobs
                          if x.role == "bottom" and x.diff is not None
                          and x.index < len(l.bottom_need_backward) and l.bottom_need_backward[x.index]])
            param_diff = _mean([x.diff.asum_mean for x in b.blobs if x.role == "param" and x.diff is not None
                                and (x.propagate is None or x.propagate)])
            if b.nonfinite and not nonfinite:
                nonfinite, where = True, "backward: " + _nonfinite_where(b)
        u = latest.get((l.index, "update"))
        if u is not None:
            rs = [x.ratio for x in u.blobs if x.ratio is not None and math.isfinite(x.ratio)]
            ratio = max(rs) if rs else None
        out[l.index] = LayerMetric(data, diff, nonfinite, where,
                                   f.time_ms if f is not None else None,
                                   b.time_ms if b is not None else None,
                                   f.loss if f is not None else None, param_diff, ratio)
    return out


def layer_memory(layer, analysis=None):
    """Bytes a layer adds: its new tops (data and diff) and the params it owns
    (data and diff) — engine.instruments.analysis's allocation figures when given (they
    also know which tops share their bottom's memory, e.g. Flatten, Reshape)."""
    an = (analysis or {}).get(layer.name) or {}
    if an.get("top_bytes") is not None:
        return int(an["top_bytes"] + (an.get("diff_bytes") or 0) + (an.get("param_bytes") or 0))
    return 2 * layer.top_bytes + 2 * layer.param_bytes


# ------------------------------------------------------------------ the view of the graph
STATE_COLOURS = {FRESH: "#2ca02c", STALE: "#ff7f0e", NOT_RUN: "#c7c7c7", NA: "#c7c7c7"}
GHOST_COLOUR = "#dddddd"
BLOB_COLOUR = "#ffffff"
NONFINITE_COLOUR = "#d62728"
FINITE_COLOUR = "#2ca02c"
NO_DATA_COLOUR = "#e0e0e0"


@dataclass(frozen=True)
class NodeView:
    id: str
    kind: str
    name: str
    x: float
    y: float
    label: str
    fill: str                  # the colour
    value: Optional[float]     # the numeric value behind the colour (numeric modes)
    line: str                  # outline colour: the run state
    line_width: float
    state: str
    hover: str
    selected: bool = False
    parent: str = ""                 # the frame (expanded block) it is drawn in: "F:<block id>"
    members: Tuple[str, ...] = ()    # the layer names it stands for (folded chains and blocks)
    mark: str = ""                   # "stopped": where the last step stopped; "ran": in its range
    width: float = 0.0               # frames: their size in layout units (x units, ranks)
    height: float = 0.0
    short: str = ""                  # what it shows zoomed out: its name (a frame: name, size and shape)
    inner: Tuple[str, ...] = ()      # a folded block: the blocks folded inside it (at any depth)
    flag: str = ""                   # "cause": it holds a finding's cause; "symptom": what follows from one


@dataclass(frozen=True)
class EdgeView:
    points: Tuple[Tuple[float, float], ...]
    kind: str                  # "data" / "ghost"
    state: str
    blob: str
    label: str
    hover: str
    selected: bool = False
    src: str = ""                    # the display nodes it joins
    dst: str = ""


@dataclass(frozen=True)
class ColourScale:
    title: str
    lo: float
    hi: float
    log: bool
    palette: Tuple[str, ...] = ()        # low → high ("": the default, _SCALE)
    below: Optional[str] = None          # what a value under lo is drawn as (a neutral colour), None: no such band
    below_text: str = ""


@dataclass(frozen=True)
class GraphView:
    nodes: Tuple[NodeView, ...]
    edges: Tuple[EdgeView, ...]
    legend: Tuple[Tuple[str, str], ...]         # (label, colour) for categorical colourings
    scale: Optional[ColourScale]
    colour_by: str
    title: str
    height: int
    width: float
    labels: bool
    uirevision: str
    marks: Optional["StepMarks"] = None
    causes: Tuple["Cause", ...] = ()


@dataclass(frozen=True)
class StepMarks:
    """Where the last step stopped, and the layers its range covered."""
    kind: str                        # "forward", "backward" or "update"
    stopped: Optional[int]           # layer index (None: the step recorded no layer)
    ran: Tuple[int, ...]
    start: int
    end: int


def step_marks(steps):
    """:class:`StepMarks` of the last forward/backward step of ``steps``
    (Recorder.steps), or None before any."""
    for st in reversed(list(steps or ())):
        if st.kind not in ("forward", "backward"):
            continue
        ran = tuple(l.layer_index for l in st.layers)
        return StepMarks(st.kind, ran[-1] if ran else None, ran, st.start, st.end)
    return None


SEVERITY = {"error": 3, "warning": 2, "warn": 2, "info": 1}


def worst_findings(findings):
    """{layer name: (severity, message)}: the worst health finding per layer."""
    out = {}
    for f in findings or ():
        layer = f.get("layer")
        if not layer:
            continue
        rank = SEVERITY.get(str(f.get("severity", "")).lower(), 0)
        if layer not in out or rank > SEVERITY.get(out[layer][0], 0):
            out[layer] = (str(f.get("severity", "")), str(f.get("message", "")))
    return out


# ------------------------------------------------------------------ causes, and what follows from them
CAUSE_BADGES = {"root_cause": "root cause", "nonfinite": "NaN/Inf source", "exploding_gradient": "exploding gradient",
                "weights_not_loaded": "weights not loaded", "departs": "departs here"}


@dataclass(frozen=True)
class Cause:
    """A finding that explains others, where it is: the layer the graph marks, what the mark
    says, and the layers whose trouble follows from it (drawn as its consequences)."""
    layer: str
    check: str
    badge: str
    message: str
    symptoms: Tuple[str, ...] = ()


def finding_causes(findings, graph=None, metrics=None):
    """The causes among health findings (adapters.health_findings rows), worst first: a
    ``root_cause`` (a degenerate parameter upstream of NaN/Inf: every layer holding NaN/Inf
    follows from it, the NaN/Inf sources included); without one, each NaN/Inf source (what
    it carried on follows from it); an exploding gradient; weights not loaded (the ReLUs it
    explains follow from it).  ``metrics``: layer_metrics(), for the layers holding NaN/Inf."""
    rows = [f for f in findings or () if f.get("layer")]
    index = {l.name: l.index for l in graph.layers} if graph is not None else {}
    bad = [graph.layers[i].name for i, m in sorted((metrics or {}).items()) if m.nonfinite] \
        if graph is not None else []

    def ordered(names, but=()):
        return tuple(sorted(dict.fromkeys(n for n in names if n not in but), key=lambda n: index.get(n, 1 << 30)))

    roots = [f for f in rows if f.get("check") == "root_cause"]
    sources = list(dict.fromkeys(f["layer"] for f in rows if f.get("check") == "nonfinite"))
    out = []
    for f in roots:
        out.append(Cause(f["layer"], "root_cause", CAUSE_BADGES["root_cause"], str(f.get("message", "")),
                         ordered(list(f.get("explains") or ()) + sources + bad, but=(f["layer"],))))
    if not roots:
        for name in sources:
            msg = next(str(f.get("message", "")) for f in rows if f.get("check") == "nonfinite" and f["layer"] == name)
            out.append(Cause(name, "nonfinite", CAUSE_BADGES["nonfinite"], msg, ordered(bad, but=sources)))
    for f in rows:
        if f.get("check") == "exploding_gradient" and f["layer"] not in {c.layer for c in out}:
            out.append(Cause(f["layer"], "exploding_gradient", CAUSE_BADGES["exploding_gradient"],
                             str(f.get("message", ""))))
        elif f.get("check") == "weights_not_loaded" and (f.get("explains") or f.get("severity") != "info"):
            out.append(Cause(f["layer"], "weights_not_loaded", CAUSE_BADGES["weights_not_loaded"],
                             str(f.get("message", "")), ordered(f.get("explains") or (), but=(f["layer"],))))
    return tuple(out)


def departure(graph, layer, rel, rtol, message=""):
    """The Cause a comparison's first departing ``layer`` is drawn as (Compare): the layers
    after it whose relative difference (``rel``: {layer index: value}) exceeds ``rtol`` follow
    from it.  None when the layer is not in the graph."""
    if not layer or not graph.has_layer(layer):
        return None
    at = graph.layer(layer).index
    after = tuple(graph.layers[i].name for i, v in sorted(rel.items())
                  if i > at and (v != v or v > rtol))
    return Cause(layer, "departs", CAUSE_BADGES["departs"], message, after)


def _cause_marks(causes):
    """({layer: the Cause marked there}, {layer: the Cause it follows from})."""
    at, follows = {}, {}
    for c in causes or ():
        at.setdefault(c.layer, c)
    for c in causes or ():
        for n in c.symptoms:
            if n not in at:
                follows.setdefault(n, c)
    return at, follows


def _flag_of(names, at, follows):
    """("cause" | "symptom" | "", the Cause) of a node drawing the layers ``names``."""
    for n in names:
        if n in at:
            return "cause", at[n]
    for n in names:
        if n in follows:
            return "symptom", follows[n]
    return "", None


_SCALE = ("#440154", "#3b528b", "#21918c", "#5ec962", "#fde725")   # viridis: low → high


def _interp(c1, c2, t):
    a = [int(c1[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(c2[i:i + 2], 16) for i in (1, 3, 5)]
    return "#%02x%02x%02x" % tuple(int(round(x + (y - x) * t)) for x, y in zip(a, b))


def _percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * q
    i = int(math.floor(k))
    j = min(i + 1, len(sorted_vals) - 1)
    return sorted_vals[i] + (sorted_vals[j] - sorted_vals[i]) * (k - i)


def value_range(values, q=0.05):
    """(lo, hi, log) of a colour scale for ``values``: the 5th to 95th
    percentile (so one outlier does not wash the rest out), on a log scale when
    the positive values span more than two decades."""
    vals = sorted(v for v in values if v is not None and math.isfinite(v))
    if not vals:
        return 0.0, 1.0, False
    pos = [v for v in vals if v > 0]
    log = len(pos) == len(vals) and pos[-1] / max(pos[0], 1e-30) > 100
    if log:
        logs = [math.log10(v) for v in pos]
        lo, hi = 10 ** _percentile(logs, q), 10 ** _percentile(logs, 1 - q)
    else:
        lo, hi = _percentile(vals, q), _percentile(vals, 1 - q)
    if hi <= lo:
        lo, hi = vals[0], vals[-1]
    return lo, hi, log


# Compare: differences within the comparison's tolerance (rounding) are neutral; above it a
# warm scale from the tolerance up to the largest difference shown (NaN/Inf: its top)
ROUNDING_COLOUR = "#dde3ea"
_DEPARTS = ("#fee08b", "#fdae61", "#f46d43", "#d73027", "#a50026")


def reldiff_range(values, rtol=None):
    """(lo, hi, log) of the relative-difference colouring: from the tolerance (or the smallest
    value, without one) to the largest finite value, every value shown inside the scale."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    lo = float(rtol) if rtol else (min((v for v in vals if v > 0), default=1e-12))
    hi = max(vals, default=lo)
    return lo, max(hi, lo), True


def reldiff_colour(value, lo, hi, rounding=True):
    """The colour of a relative difference: neutral below ``lo`` (the tolerance: rounding)
    when ``rounding``, else on the warm scale over [lo, hi] (log), NaN/Inf at its top."""
    if value is None:
        return NO_DATA_COLOUR
    if not math.isfinite(value):
        return _DEPARTS[-1]
    if rounding and value < lo:
        return ROUNDING_COLOUR
    if hi <= lo:
        return _DEPARTS[-1] if value >= lo else _DEPARTS[0]
    return scale_colour(max(value, lo), lo, hi, True, _DEPARTS)


def scale_colour(value, lo, hi, log=True, palette=_SCALE):
    """A hex colour for ``value`` on a light → dark scale over [lo, hi]."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NO_DATA_COLOUR
    if log:
        value, lo, hi = (math.log10(max(v, 1e-30)) for v in (value, lo, hi))
    t = 0.0 if hi <= lo else min(max((value - lo) / (hi - lo), 0.0), 1.0)
    k = t * (len(palette) - 1)
    i = min(int(k), len(palette) - 2)
    return _interp(palette[i], palette[i + 1], k - i)


def _node_value(node, mode, graph, metrics, analysis):
    ls = [graph.layers[i] for i in node.layers]
    if not ls:
        return None
    if mode in ("data", "diff") and node.kind == "block":      # a block: its worst (largest) layer
        vs = [getattr(metrics.get(l.index, LayerMetric()), mode) for l in ls]
        vs = [v for v in vs if v is not None and math.isfinite(v)]
        return max(vs) if vs else None
    if mode == "data":
        return metrics.get(ls[-1].index, LayerMetric()).data
    if mode == "diff":
        return metrics.get(ls[0].index, LayerMetric()).diff
    if mode in ("param_diff", "update_ratio", "reldiff"):
        field_ = "rel_diff" if mode == "reldiff" else mode
        vs = [getattr(metrics.get(l.index, LayerMetric()), field_) for l in ls]
        vs = [v for v in vs if v is not None]
        return max(vs) if vs else None
    if mode == "time":
        ts = [metrics.get(l.index, LayerMetric()).time_ms for l in ls]
        ts = [t for t in ts if t is not None]
        return sum(ts) if ts else None
    if mode == "memory":
        return float(sum(layer_memory(l, analysis) for l in ls))
    if mode == "flops":
        fs = [(analysis.get(l.name) or {}).get("flops") for l in ls]
        fs = [f for f in fs if f is not None]
        return sum(fs) if fs else None
    return None


def _fmt(v, unit=""):
    if v is None:
        return "—"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if abs(v) >= 1e9:
        return "%.3g G%s" % (v / 1e9, unit)
    if abs(v) >= 1e6:
        return "%.3g M%s" % (v / 1e6, unit)
    if abs(v) >= 1e3:
        return "%.3g k%s" % (v / 1e3, unit)
    return "%.4g%s" % (v, (" " + unit) if unit else "")


def format_bytes(n):
    return "—" if n is None else human_bytes(n)


def _layer_hover(graph, idx, metrics, analysis, states):
    lines = []
    for i in idx:
        l = graph.layers[i]
        m = metrics.get(i, LayerMetric())
        st = states[i] if states else (NOT_RUN, NOT_RUN)
        lines.append("<b>%s</b> (%s)" % (l.name, l.type))
        if l.stand_in:
            lines.append("structure only: %s" % l.stand_in)
        lines.append("tops: %s" % ", ".join("%s %s" % (t, _shape_text(graph.blobs[b].shape))
                                            for t, b in zip(l.tops, l.top_ids)) if l.tops else "tops: —")
        lines.append("backward: %s — %s" % ("yes" if l.need_backward else "no", l.backward_reason))
        lines.append("forward: %s · backward: %s" % st)
        if m.data is not None:
            lines.append("mean |data| %s" % _fmt(m.data))
        if m.diff is not None:
            lines.append("bottom gradient mean |diff| %s" % _fmt(m.diff))
        if m.param_diff is not None:
            lines.append("param gradient mean |diff| %s" % _fmt(m.param_diff))
        if m.update_ratio is not None:
            lines.append("update ratio |Δw|/|w| %s" % _fmt(m.update_ratio))
        if m.rel_diff is not None:
            lines.append("relative difference (Compare) %s" % _fmt(m.rel_diff))
        if m.time_ms is not None:
            lines.append("time %.3f ms" % m.time_ms)
        if m.nonfinite:
            lines.append("<b>NaN/Inf</b> in %s" % m.nonfinite_where)
        fl = (analysis.get(l.name) or {}).get("flops")
        if fl is not None:
            lines.append("FLOPs %s" % _fmt(fl))
    return "<br>".join(lines)


NUMERIC_MODES = ("data", "diff", "time", "memory", "flops", "param_diff", "update_ratio", "reldiff")
BLOCK_FRAME_FILL = "#f5f7fb"


def node_fill(node, colour_by, graph, metrics, fwd, value, lo, hi, log, rounding=False):
    """The colour of a layer or block node under ``colour_by`` (a pure
    function of the graph, the per-layer metrics and the mode: the timeline
    and comparisons feed their own metrics); ``rounding``: relative differences
    under ``lo`` (the comparison's tolerance) are drawn neutral."""
    if colour_by == "category":
        return layer_meta.category_colour(node.category)
    if colour_by == "backward":
        return "#59a14f" if any(graph.layers[i].need_backward for i in node.layers) else "#bab0ac"
    if colour_by == "nonfinite":
        ms = [metrics.get(i) for i in node.layers]
        if any(m is not None and m.nonfinite for m in ms):
            return NONFINITE_COLOUR
        if any(m is not None and (m.data is not None or m.diff is not None or m.param_diff is not None)
               for m in ms):
            return FINITE_COLOUR
        return NO_DATA_COLOUR
    if colour_by == "state":
        return STATE_COLOURS[fwd]
    if colour_by == "reldiff":
        return reldiff_colour(value, lo, hi, rounding)
    return scale_colour(value, lo, hi, log) if value is not None else NO_DATA_COLOUR


def _block_state(node, states):
    """A block's run state: stale if any layer is, fresh if any ran, else not run."""
    if not states:
        return NOT_RUN
    fwd = [states[i][0] for i in node.layers]
    if STALE in fwd:
        return STALE
    return FRESH if FRESH in fwd else NOT_RUN


def _block_hover(graph, node, block, metrics, findings, colour_by, value):
    lines = ["<b>%s</b> — block of %d layers (%s)" % (block.name, len(block.layers), block.kind)]
    shapes = []
    for name in block.outputs:
        if graph.has_blob(name):
            shapes.append("%s %s" % (name, _shape_text(graph.blob(name).shape)))
    lines.append("in: %s" % (", ".join(block.inputs) or "—"))
    lines.append("out: %s" % (", ".join(shapes) or "—"))
    if value is not None:
        lines.append("%s %s" % (dict(COLOUR_MODES).get(colour_by, colour_by), _fmt(value)))
    bad = [graph.layers[i].name for i in node.layers if metrics.get(i) is not None and metrics[i].nonfinite]
    if bad:
        lines.append("<b>NaN/Inf</b> first in %s" % bad[0])
    worst = _worst_inside(graph, node, findings)
    if worst:
        lines.append("%s in %s: %s" % (worst[1][0], worst[0], worst[1][1]))
    lines.append("double-click or Expand to open it")
    return "<br>".join(lines)


def _worst_inside(graph, node, findings):
    best = None
    for i in node.layers:
        f = (findings or {}).get(graph.layers[i].name)
        if f is not None and (best is None or SEVERITY.get(f[0], 0) > SEVERITY.get(best[1][0], 0)):
            best = (graph.layers[i].name, f)
    return best


def _block_label(graph, node, block, metrics, findings, marked=("", None)):
    """A folded block's label: name and size, output shape, and its mark: the cause of a
    finding inside it (⚠ and what), nothing more where what it holds follows from a cause
    (the node is drawn as a consequence), else ⚠ NaN / ⚠ for what it holds."""
    shape = block_shape(graph, block)
    flag = ""
    kind, cause = marked
    if kind == "cause":
        flag = " ⚠ " + cause.badge
    elif kind == "symptom":
        flag = ""
    elif any(metrics.get(i) is not None and metrics[i].nonfinite for i in node.layers):
        flag = " ⚠ NaN"
    else:
        worst = _worst_inside(graph, node, findings)
        if worst and SEVERITY.get(worst[1][0], 0) >= 2:
            flag = " ⚠"
    return "%s\n%s%s" % (node.label, shape, flag)


def _mark(node, marks):
    if marks is None:
        return ""
    if marks.stopped is not None and marks.stopped in node.layers:
        return "stopped"
    if node.layers and set(node.layers) & set(marks.ran):
        return "ran"
    return ""


def _selected(node, graph, sel_kind, sel_name):
    if node.kind in ("layer", "block"):
        if sel_kind == "block":
            return node.kind == "block" and node.block == sel_name
        return sel_kind == "layer" and sel_name in [graph.layers[i].name for i in node.layers]
    if node.kind == "ghost":
        return sel_kind == "ghost" and sel_name == node.name
    return sel_kind == "blob" and sel_name == node.name


def graph_view(graph, display, layout, metrics=None, states=None, colour_by="category",
               selection=None, analysis=None, blob_states=None, labels=True, revision="",
               findings=None, marks=None, causes=(), tolerance=None):
    """Everything the graph draws.  ``layout``: graph_layout's Layout or
    CompoundLayout of ``display``; ``states``: run_state.layer_states();
    ``blob_states``: run_state.blob_states(); ``selection``: {"kind", "name"}
    (kinds layer, blob, ghost, block); ``findings``: worst_findings();
    ``marks``: step_marks(); ``tolerance``: the comparison's rtol (relative differences
    under it are rounding, drawn neutral); ``causes``: finding_causes() (each marked where it is, on its
    layer or the folded block and the frames holding it, and what follows from it drawn as
    its consequence); ``revision``: added to the net's key to keep (or reset) the user's zoom."""
    metrics = metrics or {}
    analysis = analysis or {}
    blob_states = blob_states or {}
    if colour_by not in COLOUR_KEYS:
        colour_by = "category"
    sel_kind = (selection or {}).get("kind")
    sel_name = (selection or {}).get("name")
    values = {}
    if colour_by in NUMERIC_MODES:
        for node in display.nodes:
            if node.kind in ("layer", "block"):
                v = _node_value(node, colour_by, graph, metrics, analysis)
                if v is not None and (math.isfinite(v) or colour_by == "reldiff"):
                    values[node.id] = v
    if colour_by == "reldiff":
        lo, hi, log = reldiff_range(values.values(), tolerance)
    else:
        lo, hi, log = value_range(list(values.values()))
    scaled_ = (lo, hi, log, tolerance is not None)

    marks = _visible_marks(display, marks)
    inside = inner_blocks(display.blocks.values())
    at, follows = _cause_marks(causes)
    nodes = []
    for node in display.nodes:
        x, y = layout.positions.get(node.id, (0.0, 0.0))
        value = values.get(node.id)
        marked = _flag_of([graph.layers[i].name for i in node.layers], at, follows) \
            if node.kind in ("layer", "block") else ("", None)
        label, fill, state, hover, members = _node_look(node, graph, display, metrics, analysis, states,
                                                        blob_states, findings, colour_by, (value,) + scaled_,
                                                        marked)
        line = STATE_COLOURS.get(state, "#888888") if node.kind != "ghost" else "#aaaaaa"
        width = 3.0 if state in (FRESH, STALE) else 1.0
        inner = (node.block,) + tuple(inside.get(node.block, ())) if node.kind == "block" else ()
        short = display.blocks[node.block].name if node.kind == "block" else node.name
        if marked[0] == "cause":
            short = "⚠ " + short
        nodes.append(NodeView(node.id, node.kind, node.block or node.name, x, y, label, fill, value, line, width,
                              state, hover, _selected(node, graph, sel_kind, sel_name),
                              "F:" + node.group if node.group else "", members, _mark(node, marks),
                              short=short, inner=inner, flag=marked[0]))
    nodes.extend(_group_views(graph, display, layout, sel_name if sel_kind == "block" else None, at))
    edges = [_edge_view(e, graph, layout, states, sel_kind == "blob" and sel_name == e.blob) for e in display.edges]
    legend, scale = _legend(colour_by, display, values, scaled_)
    title = "%s — %s%s%s" % (graph.shown_name, graph.phase_name,
                             (" level %d" % graph.level) if graph.level else "",
                             (" stages %s" % ",".join(graph.stages)) if graph.stages else "")
    return GraphView(tuple(nodes), tuple(edges), legend, scale, colour_by, title, layout.height,
                     layout.width, labels, graph.key + revision, marks, tuple(causes or ()))


def _cause_hover(marked):
    kind, cause = marked
    if kind == "cause":
        return "<br><b>⚠ %s</b> in %s: %s" % (cause.badge, cause.layer, cause.message)
    if kind == "symptom":
        return "<br>follows from the %s in %s" % (cause.badge, cause.layer)
    return ""


def _node_look(node, graph, display, metrics, analysis, states, blob_states, findings, colour_by, scaled,
               marked=("", None)):
    """``(label, fill, state, hover, member layer names)`` of one display node;
    ``scaled``: (its value, lo, hi, log) of the colour scale; ``marked``: _flag_of()."""
    value, lo, hi, log, rounding = scaled
    label = node.label
    members = ()
    if node.kind in ("layer", "block"):
        members = tuple(graph.layers[i].name for i in node.layers)
        if node.kind == "block":
            block = display.blocks[node.block]
            state = fwd = _block_state(node, states)
            hover = _block_hover(graph, node, block, metrics, findings, colour_by, value)
            label = _block_label(graph, node, block, metrics, findings, marked)
        else:
            fwd, _bwd = states[node.layers[-1]] if states else (NOT_RUN, NOT_RUN)
            state = fwd
            hover = _layer_hover(graph, node.layers, metrics, analysis, states)
            if marked[0] == "cause":
                label = "⚠ " + label
        hover += _cause_hover(marked)
        fill = node_fill(node, colour_by, graph, metrics, fwd, value, lo, hi, log, rounding)
    elif node.kind == "ghost":
        g = graph.ghosts[node.ghost]
        fill = GHOST_COLOUR
        hover = "<b>%s</b> (%s) — filtered out<br>%s rule %d {%s}<br>%s" % (
            g.name, g.type, g.rule_kind, g.rule_index, g.rule, g.reason)
        state = NA
    else:
        fill = BLOB_COLOUR
        state = blob_states.get(node.blob_id, NOT_RUN)
        b = graph.blobs[node.blob_id] if node.blob_id >= 0 else None
        hover = "<b>%s</b> %s<br>%s" % (node.name, _shape_text(b.shape) if b else "",
                                        "data: %s" % state)
    return label, fill, state, hover, members


def _group_views(graph, display, layout, selected_block, causes_at=None):
    """A frame per expanded block, at its CompoundLayout box; ``selected_block``:
    the selected block's id (None: no block is selected); ``causes_at``: {layer: Cause}
    (a frame holding a cause says so, zoomed out too: its summary names it)."""
    boxes = getattr(layout, "boxes", {}) or {}
    kids = child_counts(display.blocks.values())
    out = []
    for g, parent in display.groups.items():
        b = display.blocks[g]
        bx, by, bw, bh = boxes.get(g, (0.0, 0.0, 0.0, 0.0))
        label = block_label(b, kids.get(g, 0))
        shape = block_shape(graph, b)
        names = tuple(graph.layers[i].name for i in b.layers)
        kind, cause = _flag_of(names, causes_at or {}, {})
        short = label + ("\n" + shape if shape else "")
        hover = "<b>%s</b> — %d layers (click the frame to select it)" % (b.name, len(b.layers))
        if cause is not None:
            short += "\n⚠ %s: %s" % (cause.badge, cause.layer)
            hover += _cause_hover((kind, cause))
        out.append(NodeView("F:" + g, "group", g, bx, by, label, BLOCK_FRAME_FILL, None, "#9aa8bd", 1.0,
                            NA, hover, selected_block == g, "F:" + parent if parent else "",
                            names, "", bw, bh, short=short, flag=kind))
    return out


def block_shape(graph, block):
    """The shape of what a block writes last ("" if unknown)."""
    if block.outputs and graph.has_blob(block.outputs[-1]):
        return _shape_text(graph.blob(block.outputs[-1]).shape)
    return ""


def _visible_marks(display, marks):
    """``marks`` with a step that stopped on a layer not drawn (an inserted split, folded
    away) stopped at the layer whose output it splits, the one drawn in its place."""
    if marks is None or marks.stopped is None or marks.stopped in display.node_of_layer:
        return marks
    from dataclasses import replace
    drawn = [i for i in marks.ran if i in display.node_of_layer and i <= marks.stopped]
    at = drawn[-1] if drawn else display.split_source(marks.stopped)
    return replace(marks, stopped=at) if at is not None else marks


def _edge_view(e, graph, layout, states, selected):
    pts = layout.edge_points.get((e.src, e.dst))
    if pts is None:
        a = layout.positions.get(e.src, (0.0, 0.0))
        b = layout.positions.get(e.dst, (0.0, 0.0))
        pts = (a, b)
    if e.kind == "ghost":
        state = NA
    else:
        state = states[e.src_layer][0] if states and e.src_layer >= 0 else NOT_RUN
    if e.kind != "data":
        label = e.blob
    elif graph.has_layer(e.blob):
        label = _shape_text(e.shape)      # named after the layer that made it (Caffe's habit): the shape
    else:
        label = "%s %s" % (e.blob, _shape_text(e.shape))
    hover = "blob <b>%s</b> %s<br>data: %s" % (e.blob, _shape_text(e.shape), state) \
        if e.kind == "data" else "%s (filtered-out path)" % e.blob
    return EdgeView(tuple(pts), e.kind, state, e.blob, label, hover, selected, e.src, e.dst)


def _legend(colour_by, display, values, scaled):
    """``(legend entries, ColourScale or None)`` of the colour mode; ``scaled``: (lo, hi, log,
    rounding band) of its scale."""
    lo, hi, log, rounding = scaled
    if colour_by == "category":
        cats = []
        for node in display.nodes:
            if node.kind in ("layer", "block") and node.category not in cats:
                cats.append(node.category)
        return tuple((layer_meta.CATEGORIES[c][1], layer_meta.category_colour(c)) for c in cats), None
    if colour_by == "backward":
        return (("needs backward", "#59a14f"), ("no backward", "#bab0ac")), None
    if colour_by == "nonfinite":
        return (("NaN/Inf", NONFINITE_COLOUR), ("finite", FINITE_COLOUR), ("no record", NO_DATA_COLOUR)), None
    if colour_by == "state":
        return (("ran (fresh)", STATE_COLOURS[FRESH]), ("stale", STATE_COLOURS[STALE]),
                ("not run", STATE_COLOURS[NOT_RUN])), None
    if values and colour_by == "reldiff":
        top = max(values.values())
        return (), ColourScale(dict(COLOUR_MODES)[colour_by], lo, top if not math.isfinite(top) else hi, True,
                               _DEPARTS, ROUNDING_COLOUR if rounding else None,
                               "< %s: within rtol (rounding)" % _fmt(lo) if rounding else "")
    if values:
        return (), ColourScale(dict(COLOUR_MODES)[colour_by], lo, hi, log)
    why = _NO_VALUES.get(colour_by, "no values yet")
    return (("%s: %s" % (dict(COLOUR_MODES).get(colour_by, colour_by), why), NO_DATA_COLOUR),), None


# what a numeric colouring with nothing to show says (all nodes grey), and what to do
_NO_VALUES = {
    "data": "no records yet: run Forward",
    "diff": "no bottom gradient recorded: run Backward (a net with a loss, or force_backward)",
    "param_diff": "no param gradient recorded: run Backward (a net with a loss, or force_backward)",
    "update_ratio": "no solver step yet: run Solver step (open the net with a solver)",
    "reldiff": "nothing compared yet: compare two runs in the Compare tab",
    "time": "no timings yet: run Forward or Backward",
}

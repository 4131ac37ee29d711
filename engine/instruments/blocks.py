"""Blocks of a net: the residual blocks, Inception modules, depthwise-separable
pairs and stages a person would fold when looking at a big net.  Pure: layers
in, blocks out (no engine objects needed; :func:`net_layers` and
:func:`param_layers` turn a Net or a NetParameter into the input).

Two sources, merged into one nested family of blocks:

- **names**: layers whose names share an instance key form a block when they
  are a closed sub-graph (no path leaves the group and comes back into it).
  The key is the part before the first ``/`` (``inception_4a/1x1`` ->
  ``inception_4a``, ``conv5_3/dw`` -> ``conv5_3``), else the shortest
  ``_``-prefix that holds a digit (``res4b22_branch2a`` -> ``res4b22``,
  ``conv1_2`` -> ``conv1``; ``score_pool4`` has none and stays alone);
- **structure**: a sub-graph between a fork and the join where its branches
  meet again (the immediate post-dominator), entered only at the fork and
  left only at the join: a residual block, an Inception module, whatever the
  layers are called.  It is named after its join layer.

Layers written in place over their input (BatchNorm, Scale, ReLU, Dropout)
and inserted Split layers always go with the layer that produced their
input, so a block carries its own activations.  A block holds at least
``min_layers`` layers and never most of the net; blocks nest (a structural
block around named ones) and never overlap otherwise.
"""
import re
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import networkx as nx


@dataclass(frozen=True)
class Block:
    id: str                      # unique in the net: the name key or the join layer's name
    name: str                    # what to show
    layers: Tuple[int, ...]      # layer indices inside (nested blocks included), in net order
    inputs: Tuple[str, ...]      # blobs read inside and written outside (or net inputs)
    outputs: Tuple[str, ...]     # blobs written inside and read outside (or never read: net outputs)
    parent: Optional[str] = None  # the id of the smallest block around this one
    kind: str = "name"           # "name", "structure", "stage" (a run of blocks: res4, inception_4) or
    #                              "section" (the layers before the first stage, or after the last)


@dataclass(frozen=True)
class _Layer:
    name: str
    type: str
    bottoms: Tuple[str, ...]
    tops: Tuple[str, ...]


def _as_layer(item):
    if isinstance(item, (tuple, list)):
        name, type_, bottoms, tops = item
    else:
        name, type_, bottoms, tops = item.name, item.type, item.bottoms, item.tops
    return _Layer(str(name), str(type_), tuple(bottoms), tuple(tops))


def net_layers(net):
    """(name, type, bottoms, tops) per layer of an engine Net (splits included)."""
    tops, bottoms = net.top_names, net.bottom_names
    return [(n, l.type, tuple(bottoms[n]), tuple(tops[n])) for n, l in zip(net.layer_names, net.layers)]


def param_layers(param):
    """(name, type, bottoms, tops) per layer of a NetParameter."""
    return [(lp.name, lp.type, tuple(lp.bottom), tuple(lp.top)) for lp in param.layer]


# ------------------------------------------------------------------ the layer graph
def _wiring(layers):
    """(graph of layer indices: writer -> reader, {layer: producer of its first bottom})."""
    g = nx.DiGraph()
    g.add_nodes_from(range(len(layers)))
    last = {}
    producer = {}
    for i, l in enumerate(layers):
        for k, b in enumerate(l.bottoms):
            w = last.get(b)
            if w is not None:
                g.add_edge(w, i)
                if k == 0:
                    producer[i] = w
        for t in l.tops:
            last[t] = i
    return g, producer


def _is_follower(layer):
    """Written in place over its input, or an inserted Split: it goes with its producer."""
    if layer.type == "Split":
        return True
    return bool(layer.tops) and bool(layer.bottoms) and all(t in layer.bottoms for t in layer.tops)


def _anchors(layers, producer):
    """{layer: the layer it goes with} (itself, or its producer's anchor for followers)."""
    anchor = {}
    for i, l in enumerate(layers):
        p = producer.get(i)
        anchor[i] = anchor[p] if (p is not None and _is_follower(l)) else i
    return anchor


def name_key(name):
    """The instance a layer's name belongs to (see the module's docstring)."""
    if "/" in name:
        return name.split("/", 1)[0]
    parts = name.split("_")
    for k in range(1, len(parts)):
        p = "_".join(parts[:k])
        if any(c.isdigit() for c in p):
            return p
    return name


def _closed(g, members):
    """No path leaves ``members`` and comes back into it.  Layers are in net order
    (every edge goes forward), so the walk stops past the last member."""
    last = max(members)
    outside = {v for u in members for v in g.successors(u) if v not in members and v < last}
    seen = set(outside)
    stack = list(outside)
    while stack:
        u = stack.pop()
        for v in g.successors(u):
            if v in members:
                return False
            if v not in seen and v < last:
                seen.add(v)
                stack.append(v)
    return True


def _with_followers(anchor, members):
    return {i for i, a in anchor.items() if a in members}


# ------------------------------------------------------------------ candidates
def _name_groups(layers, g, anchor, min_layers):
    """[(id, name, set of layers)] from the name keys."""
    runs: Dict[str, List[List[int]]] = {}
    prev = None
    for i, l in enumerate(layers):
        if anchor[i] != i:
            continue
        key = name_key(l.name)
        if key == prev:
            runs[key][-1].append(i)
        else:
            runs.setdefault(key, []).append([i])
        prev = key
    out = []
    for key, parts in runs.items():
        whole = [i for p in parts for i in p]
        candidates = [whole] if len(parts) > 1 and _closed(g, _with_followers(anchor, set(whole))) else parts
        for n, run in enumerate(candidates):
            if len(run) < 2:
                continue
            members = _with_followers(anchor, set(run))
            if len(members) < min_layers or not _closed(g, members):
                continue
            out.append((key if n == 0 else "%s~%d" % (key, n + 1), key, members))
    return out


def _structure_groups(layers, g, anchor, min_layers):
    """[(id, name, set of layers)]: fork .. join regions entered at the fork, left at the join."""
    if g.number_of_nodes() == 0:
        return []
    sink = -1
    rev = nx.DiGraph()
    rev.add_nodes_from(g.nodes)
    rev.add_edges_from((v, u) for u, v in g.edges)
    rev.add_node(sink)
    rev.add_edges_from((sink, u) for u in g.nodes if g.out_degree(u) == 0)
    try:
        ipdom = nx.immediate_dominators(rev, sink)
    except nx.NetworkXError:
        return []
    out = []
    for f in g.nodes:
        if g.out_degree(f) < 2:
            continue
        j = ipdom.get(f)
        if j is None or j == sink or j == f:
            continue
        region = _between(g, f, j)
        if any(p not in region and p != f for v in region for p in g.predecessors(v)):
            continue       # entered from elsewhere
        if any(s not in region for v in region if v != j for s in g.successors(v)):
            continue       # left before the join
        members = region | _with_followers(anchor, {j})
        members |= _with_followers(anchor, members & {i for i in anchor if anchor[i] == i})
        if len(members) < min_layers:
            continue
        name = layers[j].name
        out.append((name, name, members))
    return out


def _between(g, f, j):
    """The layers after ``f`` up to and including ``j``, its immediate post-dominator:
    every path from ``f`` to the outputs passes ``j``, so what ``f`` reaches before ``j``
    is exactly what lies on its paths to ``j`` (a walk of the region, not of the net)."""
    region = {j}
    stack = [v for v in g.successors(f) if v != j]
    region.update(stack)
    while stack:
        u = stack.pop()
        for v in g.successors(u):
            if v not in region:
                region.add(v)
                stack.append(v)
    return region


_STAGE = re.compile(r"^(.*\d)(?:[a-z]\d*|_\d+)$")


def stage_key(block_id):
    """The stage a block's key belongs to (``res4b22`` -> ``res4``, ``inception_4a`` ->
    ``inception_4``, ``conv5_3`` -> ``conv5``), or None."""
    m = _STAGE.match(block_id)
    return m.group(1) if m else None


def _stage_groups(layers, g, accepted, limit):
    """Runs of at least two outermost named blocks of one stage key, with the layers between them."""
    tops = [a for a in accepted if not any(a[2] < o[2] for o in accepted)]
    tops.sort(key=lambda a: min(a[2]))
    out = []
    run: List[Tuple[str, str, frozenset, str]] = []
    key = None

    def flush():
        if len(run) >= 2 and key is not None:
            lo, hi = min(run[0][2]), max(run[-1][2])
            members = frozenset(range(lo, hi + 1))
            if len(members) <= limit and _closed(g, members):
                out.append((key, key, members))
    for a in tops:
        k = stage_key(a[0]) if a[3] == "name" else None
        if k is None or k != key:
            flush()
            run, key = [], k
        if k is not None:
            run.append(a)
    flush()
    return out


# ------------------------------------------------------------------ merging
def _readers(layers):
    """{blob: [indices of the layers reading it]}."""
    out: Dict[str, List[int]] = {}
    for i, l in enumerate(layers):
        for b in l.bottoms:
            out.setdefault(b, []).append(i)
    return out


def _blob_ends(layers, members, readers):
    """(inputs, outputs) of a block: the blobs it reads before writing them, and
    those it writes that are read outside it or not at all."""
    order = sorted(members)
    first_write: Dict[str, int] = {}
    for i in order:
        for t in layers[i].tops:
            first_write.setdefault(t, i)
    inputs, outputs = [], []
    for i in order:
        for b in layers[i].bottoms:
            if b not in inputs and first_write.get(b, i) >= i:
                inputs.append(b)
    for i in order:
        for t in layers[i].tops:
            if t in outputs:
                continue
            who = readers.get(t, ())
            if not who or any(r not in members for r in who):
                outputs.append(t)
    return tuple(inputs), tuple(outputs)


def find_blocks(layers: Sequence, min_layers: int = 3, max_share: float = 0.6) -> List[Block]:
    """The blocks of a net given its layers in net order: ``(name, type,
    bottoms, tops)`` tuples or objects with those attributes.  Parents come
    before their children; a block holds at least ``min_layers`` layers and at
    most ``max_share`` of the net."""
    ls = [_as_layer(x) for x in layers]
    if not ls:
        return []
    g, producer = _wiring(ls)
    anchor = _anchors(ls, producer)
    limit = max(min_layers, int(max_share * len(ls)))
    named = [c for c in _name_groups(ls, g, anchor, min_layers) if len(c[2]) <= limit]
    structural = [c for c in _structure_groups(ls, g, anchor, min_layers) if len(c[2]) <= limit]

    accepted: List[Tuple[str, str, frozenset, str]] = []

    def fits(members):
        for _i, _n, other, _k in accepted:
            inter = members & other
            if inter and inter != members and inter != other:
                return False        # partial overlap
            if members == other:
                return False
        return True

    for bid, name, members in sorted(named, key=lambda c: min(c[2])):
        m = frozenset(members)
        if fits(m):
            accepted.append((bid, name, m, "name"))
    ids = {a[0] for a in accepted}
    for bid, name, members in sorted(structural, key=lambda c: (-len(c[2]), min(c[2]))):
        m = frozenset(members)
        if not fits(m):
            continue
        if bid in ids:
            clash = next(a for a in accepted if a[0] == bid)
            if clash[2] < m:            # the named block of the join: the structural one takes its name
                accepted.remove(clash)
            else:
                bid = "%s~block" % bid
        ids.add(bid)
        accepted.append((bid, name, m, "structure"))

    for bid, name, members in _stage_groups(ls, g, accepted, len(ls) * 0.9):
        if bid not in ids and fits(members):
            ids.add(bid)
            accepted.append((bid, name, members, "stage"))

    accepted.sort(key=lambda a: (-len(a[2]), min(a[2])))
    readers = _readers(ls)
    blocks = []
    for k, (bid, name, members, kind) in enumerate(accepted):
        parent = None
        for pid, _pn, pm, _pk in reversed(accepted[:k]):
            if members < pm:
                parent = pid
                break
        inputs, outputs = _blob_ends(ls, members, readers)
        blocks.append(Block(bid, name, tuple(sorted(members)), inputs, outputs, parent, kind))
    blocks.sort(key=lambda b: (b.layers[0], -len(b.layers)))
    return blocks


SECTIONS = (("input", "before"), ("head", "after"))


def with_sections(layers: Sequence, blocks: Sequence[Block], min_layers: int = 2,
                  max_share: float = 0.6) -> List[Block]:
    """``blocks`` (find_blocks of ``layers``) and the net's two sections, when it has
    stages: "input", the layers before its first stage (the data layers and the stem),
    and "head", those after its last (pooling, classifier, loss, accuracy); each a
    block of kind "section" holding at least ``min_layers`` layers other than inserted
    splits, at most ``max_share`` of the net, closed and cutting no block (the blocks
    inside it become its children).  Then a zoomed-out ResNet reads input, res2 ..
    res5, head.  Nets with fewer than two stages get none."""
    ls = [_as_layer(x) for x in layers]
    main = sorted((b for b in blocks if b.parent is None and b.kind == "stage"), key=lambda b: b.layers[0])
    if len(main) < 2 or not ls:
        return list(blocks)
    g, _producer = _wiring(ls)
    readers = _readers(ls)
    taken = {b.id for b in blocks}
    spans = {"before": range(main[0].layers[0]), "after": range(max(main[-1].layers) + 1, len(ls))}
    out = list(blocks)
    for name, where in SECTIONS:
        members = frozenset(spans[where])
        shown = [i for i in members if ls[i].type != "Split"]
        if len(shown) < min_layers or len(members) > max_share * len(ls) or not _closed(g, members):
            continue
        if any(set(b.layers) & members and not set(b.layers) <= members for b in out):
            continue          # a block reaches across its edge
        bid = name if name not in taken else "%s~section" % name
        taken.add(bid)
        inputs, outputs = _blob_ends(ls, members, readers)
        out = [replace(b, parent=bid) if b.parent is None and set(b.layers) <= members else b for b in out]
        out.append(Block(bid, name, tuple(sorted(members)), inputs, outputs, None, "section"))
    out.sort(key=lambda b: (b.layers[0], -len(b.layers)))
    return out


def innermost(blocks: Sequence[Block]) -> Dict[int, str]:
    """{layer index: id of the smallest block holding it} (layers outside every block absent)."""
    out: Dict[int, str] = {}
    for b in sorted(blocks, key=lambda b: -len(b.layers)):
        for i in b.layers:
            out[i] = b.id
    return out


# ---------------------------------------------------------------------- folding (the inspector's and the reports')
FOLD_BUDGET = 60        # a net opens with whole levels of blocks opened while this many nodes show


def fold(blocks: Sequence[Block], expanded=None):
    """How ``blocks`` draw when the blocks ``expanded`` (ids; None: all) are open:
    ({layer: the folded block drawn in its place}, {layer: the innermost open block
    around it}, {open block shown: its parent}).  A block shows when every block
    around it is open; a shown block that is not open is one node."""
    by_id = {b.id: b for b in blocks}
    opened = set(by_id) if expanded is None else set(expanded) & set(by_id)

    def shown(b):
        p = b.parent
        while p is not None:
            if p not in opened:
                return False
            p = by_id[p].parent
        return True
    folded_at: Dict[int, str] = {}
    group_at: Dict[int, str] = {}
    groups: Dict[str, Optional[str]] = {}
    for b in sorted(blocks, key=lambda b: -len(b.layers)):       # outer blocks first
        if not shown(b):
            continue
        if b.id in opened:
            groups[b.id] = b.parent
            for i in b.layers:
                group_at[i] = b.id
        else:
            for i in b.layers:
                folded_at[i] = b.id
    return folded_at, group_at, groups


def drawn_groups(groups, node_groups):
    """{open block: its parent} of ``groups`` (as :func:`fold` returns them) that
    hold a drawn node (``node_groups``: the innermost group of each node, "" for
    none), with the blocks around them: the frames a drawing shows."""
    shown = {g for g in node_groups if g}
    for g in list(shown):
        p = groups.get(g)
        while p is not None and p not in shown:
            shown.add(p)
            p = groups.get(p)
    return {g: p for g, p in groups.items() if g in shown}


def default_open(blocks: Sequence[Block], shown_layers: Sequence[int], budget: int = FOLD_BUDGET):
    """The blocks a net opens with: whole levels of the block tree, outermost first,
    while the nodes drawn (``shown_layers``, the layers drawn on their own, e.g. all
    but inserted splits, less those folded, plus one per folded block) stay within
    ``budget``.  A small net opens fully, ResNet-152 with its stages open and its
    residual blocks folded, GoogLeNet with its Inception stages open."""
    if not blocks:
        return ()
    by_id = {b.id: b for b in blocks}
    depth = {}
    for b in blocks:
        d, p = 0, b.parent
        while p is not None:
            d, p = d + 1, by_id[p].parent
        depth[b.id] = d
    opened: set = set()
    for level in range(max(depth.values()) + 1):
        trial = opened | {b.id for b in blocks if depth[b.id] == level}
        folded_at, _groups_at, _groups = fold(blocks, trial)
        count = len([i for i in shown_layers if i not in folded_at]) + len(set(folded_at.values()))
        if count > budget:
            break
        opened = trial
    return tuple(b.id for b in blocks if b.id in opened)

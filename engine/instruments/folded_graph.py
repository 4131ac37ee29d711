"""A net's graph folded into blocks, drawn as the inspector draws it, as SVG (reports).

The blocks are :func:`engine.instruments.blocks.find_blocks`'s (with the sections
of :func:`~engine.instruments.blocks.with_sections`, as the page has them), folded with
:func:`~engine.instruments.blocks.fold` and opened by default as the page opens
them (:func:`~engine.instruments.blocks.default_open`); the positions come from
:func:`engine.instruments.graph_layout.compound_layout`, the page's layout.  So a
report shows the net as the inspector first shows it: GoogLeNet with its
Inception stages open and each module one node, ResNet-152 with its stages open
and each residual block one node.

    layers = blocks.net_layers(net)
    fg = folded_graph(layers, blocks.with_sections(layers, blocks.find_blocks(layers)))
    svg = to_svg(fg, style)          # style(node) -> NodeStyle, e.g. from a run's records

:func:`block_view` draws one block's inside (its own blocks folded), for a
report's per-block sections.  Pure: layer tuples and blocks in, text out.
"""
import html
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Sequence, Tuple

from engine.instruments import blocks as blocks_mod
from engine.instruments import graph_layout

# a colour per layer category (Tableau 10, readable by most colour-blind people): the page's too
CATEGORY_COLOURS = {
    "input": "#4e79a7", "conv": "#f28e2b", "pool": "#59a14f", "fc": "#e15759", "activation": "#b07aa1",
    "norm": "#edc948", "structure": "#9c9c9c", "split": "#cfcfcf", "recurrent": "#76b7b2", "loss": "#ff9da7",
    "output": "#17becf", "python": "#9c755f", "other": "#bab0ac",
}
BLOCK_FILL = "#e8edf5"
INPUT_FILL = "#ffffff"
FRAME_FILL = "#f5f7fb"
XPX, YPX = 7.0, 62.0            # pixels per layout x unit and per rank, as the page draws
CHAR_PX = 6.6
NODE_H = {"layer": 26.0, "block": 42.0, "input": 20.0}
FONT = "Helvetica, Arial, sans-serif"


@dataclass(frozen=True)
class Node:
    id: str
    kind: str                         # "layer", "block" (folded) or "input" (a blob from outside)
    name: str                         # layer name, block id, or blob name
    label: str
    layers: Tuple[int, ...] = ()      # the layer indices it stands for
    group: str = ""                   # the open block drawn around it ("": none)


@dataclass(frozen=True)
class FoldedGraph:
    nodes: Tuple[Node, ...]
    edges: Tuple[Tuple[str, str, str], ...]        # (source node, target node, blob)
    groups: Dict[str, Optional[str]]               # open block drawn as a frame: its parent frame
    blocks: Dict[str, blocks_mod.Block] = field(default_factory=dict)
    title: str = ""


@dataclass(frozen=True)
class NodeStyle:
    fill: str
    line: str = "#555555"
    line_width: float = 1.0
    extra: str = ""          # a second label line (a block's shape and flags)
    tooltip: str = ""
    mark: bool = False       # drawn with the page's "stopped here" halo


def block_label(block):
    return "%s · %d layers" % (block.name, len(block.layers))


def _producers(layers):
    """[{bottom position: the layer that wrote that bottom (-1: none)}] per layer, in net order."""
    last = {}
    out = []
    for i, (_name, _type, bottoms, tops) in enumerate(layers):
        out.append({k: last.get(b, -1) for k, b in enumerate(bottoms)})
        for t in tops:
            last[t] = i
    return out


def split_sources(layers):
    """{top of an inserted Split: the blob it copies} (through chains of splits)."""
    out = {}
    for _name, type_, bottoms, tops in layers:
        if type_ == "Split" and bottoms:
            src = out.get(bottoms[0], bottoms[0])
            for t in tops:
                out[t] = src
    return out


def folded_graph(layers: Sequence, blocks: Sequence, expanded=None, scope=None, title="") -> FoldedGraph:
    """The nodes and edges drawn for ``layers`` ((name, type, bottoms, tops) in net
    order, splits included) with ``blocks`` folded unless ``expanded`` (ids; None: the
    page's default) opens them.  Inserted splits are drawn as the blob they copy.
    ``scope``: a block id; only its layers are drawn, inside its frame, and what they
    read from outside comes in as input nodes."""
    layers = [tuple(x) if isinstance(x, (tuple, list)) else (x.name, x.type, tuple(x.bottoms), tuple(x.tops))
              for x in layers]
    by_id = {b.id: b for b in blocks}
    is_split = [t == "Split" for _n, t, _b, _t in layers]
    if expanded is None:
        shown = [i for i in range(len(layers)) if not is_split[i]]
        expanded = blocks_mod.default_open(blocks, shown)
    opened, inside = _opened(blocks, by_id, expanded, scope)
    folded_at, group_at, groups = blocks_mod.fold(blocks, opened)
    if inside is not None:
        groups = {scope: None}                  # its frame alone: the blocks around it are not drawn
        group_at = dict.fromkeys(inside, scope)
    node_of, nodes = _fold_nodes(layers, by_id, is_split, inside, folded_at, group_at, groups)
    edges = _fold_edges(layers, is_split, folded_at, node_of, nodes)
    return FoldedGraph(tuple(nodes.values()), tuple(edges),
                       blocks_mod.drawn_groups(groups, (n.group for n in nodes.values())), by_id, title)


def _opened(blocks, by_id, expanded, scope):
    """``(open block ids, layers of the scope block or None)``: with a scope, the
    blocks around it open and those strictly inside it as ``expanded`` says."""
    opened = set(expanded)
    if scope is None:
        return opened, None
    b = by_id[scope]
    inside = set(b.layers)
    opened = (opened - {c.id for c in blocks if set(c.layers) < inside}) | {scope}
    p = b.parent
    while p is not None:
        opened.add(p)
        p = by_id[p].parent
    return opened, inside


def _fold_nodes(layers, by_id, is_split, inside, folded_at, group_at, groups):
    """``(node_of, nodes)``: the node drawing each layer (a folded block's, or its
    own; inserted splits none) and the nodes by id, in net order."""
    node_of: Dict[int, str] = {}
    nodes: Dict[str, Node] = {}
    for i, (name, _type, _b, _t) in enumerate(layers):
        if inside is not None and i not in inside:
            continue
        if i in folded_at:
            blk = by_id[folded_at[i]]
            nid = "K:" + blk.id
            node_of[i] = nid
            if nid not in nodes:
                parent = blk.parent if blk.parent in groups else ""
                nodes[nid] = Node(nid, "block", blk.id, block_label(blk), blk.layers, parent or "")
            continue
        if is_split[i]:
            continue
        nid = "L%d" % i
        node_of[i] = nid
        nodes[nid] = Node(nid, "layer", name, name, (i,), group_at.get(i, ""))
    return node_of, nodes


def _fold_edges(layers, is_split, folded_at, node_of, nodes):
    """One (src, dst, blob) edge per pair of drawn nodes a blob joins (inserted
    splits looked through); a blob no drawn node wrote comes from an input node,
    added to ``nodes``."""
    producers = _producers(layers)
    copied = split_sources(layers)

    def source(i, k):
        """The layer that really wrote bottom k of layer i: through unfolded inserted splits."""
        src = producers[i].get(k, -1)
        while src >= 0 and is_split[src] and src not in folded_at:
            src = producers[src].get(0, -1)
        return src

    edges = []
    seen = set()
    for i, (_name, _type, bottoms, _tops) in enumerate(layers):
        if i not in node_of:
            continue
        for k, blob in enumerate(bottoms):
            src = source(i, k)
            if src >= 0 and src in node_of:
                sid = node_of[src]
            else:
                blob = copied.get(blob, blob)
                sid = "I:" + blob
                if sid not in nodes:
                    nodes[sid] = Node(sid, "input", blob, blob, ())
            e = (sid, node_of[i], blob)
            if sid != node_of[i] and (sid, node_of[i]) not in seen:
                seen.add((sid, node_of[i]))
                edges.append(e)
    return edges


def block_view(layers: Sequence, blocks: Sequence, block_id: str) -> FoldedGraph:
    """One block's inside: its layers in its frame (which names it), the blocks nested in it folded."""
    return folded_graph(layers, blocks, expanded=(), scope=block_id)


# ---------------------------------------------------------------------- layout and SVG
def node_size(node, extra=""):
    chars = max(len(line) for line in [node.label] + ([extra] if extra else []))
    return chars * CHAR_PX + 16.0, NODE_H.get(node.kind, 24.0)


def layout(fg):
    """graph_layout.compound_layout of the folded graph (the page's layout)."""
    order = sorted(fg.nodes, key=lambda n: (n.layers[0] if n.layers else -1, n.kind != "input"))
    widths = {n.id: 4.0 + max(len(n.label), 8) for n in fg.nodes}
    pairs = tuple(dict.fromkeys((s, d) for s, d, _b in fg.edges))
    return graph_layout.compound_layout(tuple(n.id for n in order), pairs, widths, fg.groups,
                                        {n.id: n.group for n in fg.nodes if n.group},
                                        wrap=frozenset(n.id for n in fg.nodes if n.kind == "block"))


def _esc(s):
    return html.escape(str(s), quote=True)


def default_style(node):
    return NodeStyle(BLOCK_FILL if node.kind == "block" else INPUT_FILL if node.kind == "input" else "#bab0ac")


def to_svg(fg, style: Callable[[Node], NodeStyle] = default_style, lay=None):
    """The folded graph as a standalone SVG element (text searchable; each node's
    ``<title>`` is its tooltip)."""
    lay = lay or layout(fg)
    styles = {n.id: style(n) for n in fg.nodes}
    box = {}
    for n in fg.nodes:
        x, y = lay.positions.get(n.id, (0.0, 0.0))
        w, h = node_size(n, styles[n.id].extra)
        box[n.id] = (x * XPX + w / 2.0, -y * YPX, w, h)
    frames = _frames(fg, box)
    xs = [cx - w / 2 for cx, _cy, w, _h in box.values()] + [cx + w / 2 for cx, _cy, w, _h in box.values()]
    ys = [cy - h / 2 for _cx, cy, _w, h in box.values()] + [cy + h / 2 for _cx, cy, _w, h in box.values()]
    for x0, y0, x1, y1 in frames.values():
        xs += [x0, x1]
        ys += [y0, y1]
    x0, y0 = (min(xs) - 12, min(ys) - (30 if fg.title else 12)) if xs else (0.0, 0.0)
    x1, y1 = (max(xs) + 12, max(ys) + 12) if xs else (100.0, 40.0)
    w, h = x1 - x0, y1 - y0
    out = ['<svg xmlns="http://www.w3.org/2000/svg" class="net-graph" viewBox="%.1f %.1f %.1f %.1f" '
           'width="%.0f" height="%.0f" font-family="%s">' % (x0, y0, w, h, w, h, FONT),
           '<defs><marker id="arr" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#666"/></marker></defs>']
    if fg.title:
        out.append('<text x="%.1f" y="%.1f" font-size="13" font-weight="bold" fill="#222">%s</text>'
                   % (x0 + 8, y0 + 18, _esc(fg.title)))
    for gid in sorted(frames, key=lambda g: _depth(fg.groups, g)):
        fx0, fy0, fx1, fy1 = frames[gid]
        b = fg.blocks.get(gid)
        out.append('<g class="frame"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="8" fill="%s" '
                   'fill-opacity="0.85" stroke="#9aa8bd" stroke-dasharray="5 3"/><text x="%.1f" y="%.1f" '
                   'font-size="12" font-weight="bold" fill="#34495e" text-anchor="middle">%s</text></g>'
                   % (fx0, fy0, fx1 - fx0, fy1 - fy0, FRAME_FILL, (fx0 + fx1) / 2, fy0 + 15,
                      _esc(block_label(b) if b else gid)))
    for s, d, blob in fg.edges:
        if s not in box or d not in box:
            continue
        sx, sy, _sw, sh = box[s]
        tx, ty, _tw, th = box[d]
        inner = [(px * XPX + 8.0, -py * YPX) for px, py in lay.edge_points.get((s, d), ())[1:-1]]
        pts = [(sx, sy + sh / 2)] + inner + [(tx, ty - th / 2)]
        out.append('<polyline points="%s" fill="none" stroke="#777" stroke-width="1.3" marker-end="url(#arr)">'
                   '<title>%s</title></polyline>' % (" ".join("%.1f,%.1f" % p for p in pts), _esc(blob)))
    for n in fg.nodes:
        out.append(_node_svg(n, box[n.id], styles[n.id]))
    out.append("</svg>")
    return "\n".join(out)


def _depth(groups, g):
    d = 0
    while g is not None:
        g = groups.get(g)
        d += 1
    return d


def _frames(fg, box):
    """{open block: (x0, y0, x1, y1)} around its members (nested frames included)."""
    members: Dict[str, list] = {}
    for n in fg.nodes:
        if n.group:
            members.setdefault(n.group, []).append(box[n.id])
    out = {}

    def bounds(g):
        if g in out:
            return out[g]
        rects = [(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2) for cx, cy, w, h in members.get(g, [])]
        rects += [bounds(c) for c, p in fg.groups.items() if p == g]
        if not rects:
            out[g] = (0.0, 0.0, 0.0, 0.0)
            return out[g]
        out[g] = (min(r[0] for r in rects) - 12, min(r[1] for r in rects) - 24, max(r[2] for r in rects) + 12,
                  max(r[3] for r in rects) + 10)
        return out[g]
    for g in fg.groups:
        bounds(g)
    return {g: b for g, b in out.items() if b[2] > b[0]}


def _node_svg(n, b, st):
    cx, cy, w, h = b
    lines = [("▶ " if st.mark else "") + n.label] + ([st.extra] if st.extra else [])
    fg = _text_colour(st.fill)
    parts = ['<g class="node %s">' % n.kind]
    if st.tooltip:
        parts.append("<title>%s</title>" % _esc(st.tooltip))
    if st.mark:
        parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="9" fill="#1f77b4" fill-opacity="0.4"/>'
                     % (cx - w / 2 - 6, cy - h / 2 - 6, w + 12, h + 12))
    dash = ' stroke-dasharray="6 2"' if n.kind == "block" else ""
    parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="5" fill="%s" stroke="%s" '
                 'stroke-width="%.1f"%s/>' % (cx - w / 2, cy - h / 2, w, h, st.fill, st.line, st.line_width, dash))
    for k, line in enumerate(lines):
        ty = cy + (k - (len(lines) - 1) / 2.0) * 14 + 4
        weight = ' font-weight="bold"' if n.kind == "block" and k == 0 else ""
        parts.append('<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" fill="%s"%s>%s</text>'
                     % (cx, ty, fg, weight, _esc(line)))
    parts.append("</g>")
    return "".join(parts)


def _text_colour(fill):
    try:
        r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    except (TypeError, ValueError):
        return "#1a1a1a"
    return "#1a1a1a" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 140 else "#ffffff"

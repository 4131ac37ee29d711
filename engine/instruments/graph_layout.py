"""Layered (Sugiyama-style) layout of a DAG, with networkx, in Python.

1. Ranks: the longest path from the sources (a layer sits one rank below its
   latest input); sources other than the first-rank ones are pulled down to
   just above their first consumer so they do not drag long edges.
2. Edges that span several ranks get dummy nodes, one per rank crossed.
3. Crossing reduction: barycenter sweeps, alternately downwards (order a rank
   by the mean position of its predecessors) and upwards (successors), keeping
   the ordering with the fewest crossings.
4. X coordinates: each node is pulled towards the mean x of its neighbours, and
   the order is kept with at least one unit between neighbours (an isotonic
   regression per rank), a few passes down and up.

Everything is pure: :func:`layered_layout` takes node ids and edges and
returns a :class:`Layout`; results are cached per structure
(:func:`cached_layout`).  ``count_crossings`` is exposed for tests.
"""
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

import networkx as nx

DUMMY = "~"   # prefix of dummy node ids


@dataclass(frozen=True)
class Layout:
    positions: Dict[str, Tuple[float, float]]   # real nodes: (x, y); y = -rank
    ranks: Dict[str, int]                      # real and dummy nodes
    order: Tuple[Tuple[str, ...], ...]         # per rank, left to right (dummies included)
    edge_points: Dict[Tuple[str, str], Tuple[Tuple[float, float], ...]]  # polyline per edge
    crossings: int                             # after crossing reduction
    crossings_initial: int                     # with the input order
    width: float
    height: int


# ------------------------------------------------------------------ ranks
def assign_ranks(graph):
    """{node: rank} by the longest path from the sources; later sources are
    placed one rank above their first consumer."""
    rank = {}
    for n in nx.topological_sort(graph):
        preds = list(graph.predecessors(n))
        rank[n] = max(rank[p] + 1 for p in preds) if preds else 0
    for n in graph.nodes:
        if graph.in_degree(n) == 0 and graph.out_degree(n) > 0:
            rank[n] = max(0, min(rank[s] for s in graph.successors(n)) - 1)
    return rank


def _with_dummies(graph, rank):
    """A copy where every edge spans one rank; and the chain of each long edge."""
    g = nx.DiGraph()
    for n in graph.nodes:
        g.add_node(n)
    chains = {}
    k = 0
    for u, v in graph.edges:
        span = rank[v] - rank[u]
        if span <= 1:
            g.add_edge(u, v)
            chains[(u, v)] = (u, v)
            continue
        prev = u
        chain = [u]
        for r in range(rank[u] + 1, rank[v]):
            d = "%s%d" % (DUMMY, k)
            k += 1
            rank[d] = r
            g.add_node(d)
            g.add_edge(prev, d)
            chain.append(d)
            prev = d
        g.add_edge(prev, v)
        chain.append(v)
        chains[(u, v)] = tuple(chain)
    return g, chains


# ------------------------------------------------------------------ crossings
def _inversions(seq):
    """Number of pairs i < j with seq[i] > seq[j] (Fenwick tree)."""
    if len(seq) < 2:
        return 0
    values = sorted(set(seq))
    index = {v: i + 1 for i, v in enumerate(values)}
    tree = [0] * (len(values) + 1)
    inv = 0
    seen = 0
    for x in seq:
        i = index[x]
        # count seen elements <= x
        le = 0
        j = i
        while j > 0:
            le += tree[j]
            j -= j & -j
        inv += seen - le
        j = i
        while j < len(tree):
            tree[j] += 1
            j += j & -j
        seen += 1
    return inv


def crossings_between(upper, lower, edges):
    """Crossings between two adjacent ranks given their orders and the edges
    (u in ``upper``, v in ``lower``)."""
    pu = {n: i for i, n in enumerate(upper)}
    pl = {n: i for i, n in enumerate(lower)}
    pairs = sorted((pu[u], pl[v]) for u, v in edges if u in pu and v in pl)
    return _inversions([b for _a, b in pairs])


def count_crossings(order, graph):
    """Total crossings of a ranked order (every edge between adjacent ranks)."""
    total = 0
    for r in range(len(order) - 1):
        upper, lower = order[r], order[r + 1]
        pu = set(upper)
        pl = set(lower)
        es = [(u, v) for u in upper for v in graph.successors(u) if v in pl]
        if es and pu:
            total += crossings_between(upper, lower, es)
    return total


# ------------------------------------------------------------------ ordering
def _sweep(order, graph, down):
    ranks = range(1, len(order)) if down else range(len(order) - 2, -1, -1)
    new = [list(r) for r in order]
    for r in ranks:
        ref = new[r - 1] if down else new[r + 1]
        pos = {n: i for i, n in enumerate(ref)}
        keyed = []
        for i, n in enumerate(new[r]):
            nbrs = graph.predecessors(n) if down else graph.successors(n)
            ps = [pos[m] for m in nbrs if m in pos]
            bary = sum(ps) / len(ps) if ps else None
            keyed.append([bary, i, n])
        # nodes without neighbours keep their slot: give them their own index scaled
        scale = (len(ref) - 1) / max(len(new[r]) - 1, 1) if ref else 1.0
        for k in keyed:
            if k[0] is None:
                k[0] = k[1] * scale
        keyed.sort(key=lambda k: (k[0], k[1]))
        new[r] = [k[2] for k in keyed]
    return new


def reduce_crossings(order, graph, max_iter=12):
    """Barycenter sweeps (down, up, ...) keeping the best order; returns
    (order, crossings)."""
    best = [list(r) for r in order]
    best_c = count_crossings(best, graph)
    cur = best
    stale = 0
    for it in range(max_iter):
        if best_c == 0:
            break
        cur = _sweep(cur, graph, down=(it % 2 == 0))
        c = count_crossings(cur, graph)
        if c < best_c:
            best, best_c = [list(r) for r in cur], c
            stale = 0
        else:
            stale += 1
            if stale >= 4:
                break
    return best, best_c


# ------------------------------------------------------------------ coordinates
def _isotonic(y):
    """Least-squares non-decreasing fit of ``y`` (pool adjacent violators)."""
    blocks = []   # [sum, count]
    for v in y:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out = []
    for s, c in blocks:
        out.extend([s / c] * c)
    return out


def _place(desired, gaps):
    """x for the nodes of a rank: as near ``desired`` as possible, in order,
    node k at least ``gaps[k-1]`` right of node k-1 (least squares)."""
    offsets = [0.0]
    for g in gaps:
        offsets.append(offsets[-1] + g)
    y = [d - o for d, o in zip(desired, offsets)]
    z = _isotonic(y)
    return [zi + o for zi, o in zip(z, offsets)]


def assign_x(order, graph, passes=4, widths=None, dummy_width=1.0):
    """x per node: ``widths[n]`` is the room node n needs to its right (its
    box and label) before the next node of its rank; 1 by default."""
    def width(n):
        if n.startswith(DUMMY):
            return dummy_width
        return widths.get(n, 1.0) if widths else 1.0

    x = {}
    for row in order:
        pos = 0.0
        for n in row:
            x[n] = pos
            pos += width(n)
        for n in row:
            x[n] -= pos / 2.0
    for p in range(passes):
        down = p % 2 == 0
        rows = order if down else list(reversed(order))
        for row in rows:
            desired = []
            for n in row:
                nb = list(graph.predecessors(n)) + list(graph.successors(n))
                # centres line up (nodes are as wide as their labels): x is a node's left edge
                desired.append(sum(x[m] + width(m) / 2.0 for m in nb) / len(nb) - width(n) / 2.0 if nb else x[n])
            for n, v in zip(row, _place(desired, [width(m) for m in row[:-1]])):
                x[n] = v
    return x


# ------------------------------------------------------------------ public
def _drop_cycles(graph):
    g = graph.copy()
    while True:
        try:
            cyc = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return g
        g.remove_edge(*cyc[-1][:2])


def layered_layout(nodes: Sequence[str], edges: Sequence[Tuple[str, str]], sweeps=12,
                   widths=None) -> Layout:
    """Lay out a DAG top to bottom.  ``nodes`` in their preferred initial order
    (e.g. the net's layer order); ``edges`` as (source, target) node ids;
    ``widths``: {node: room it needs to its right} (default 1 each)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from((u, v) for u, v in edges if u != v)
    if not nx.is_directed_acyclic_graph(graph):
        graph = _drop_cycles(graph)
    rank = assign_ranks(graph)
    g, chains = _with_dummies(graph, rank)
    height = (max(rank.values()) + 1) if rank else 0
    buckets = [[] for _ in range(height)]
    # initial order: the given node order, dummies after their chain's source
    seen = set()
    first_pos = {n: i for i, n in enumerate(nodes)}
    for n in nodes:
        if n in rank and n not in seen:
            buckets[rank[n]].append(n)
            seen.add(n)
    for chain in chains.values():
        for d in chain[1:-1]:
            buckets[rank[d]].append(d)
    # dummies: place them by their source's initial position
    dsrc = {d: chain[0] for chain in chains.values() for d in chain[1:-1]}
    for r in range(height):
        buckets[r].sort(key=lambda n: first_pos[n] if n in first_pos else first_pos.get(dsrc.get(n), 0) + 0.5)
    initial = count_crossings(buckets, g)
    order, c = reduce_crossings(buckets, g, max_iter=sweeps)
    dw = min(widths.values()) if widths else 1.0
    x = assign_x(order, g, widths=widths, dummy_width=dw)
    positions = {n: (x[n], -float(rank[n])) for n in graph.nodes}
    points = {}
    for (u, v), chain in chains.items():
        points[(u, v)] = tuple((x[n], -float(rank[n])) for n in chain)
    xs = [p[0] for p in positions.values()] or [0.0]
    right = max((p[0] + (widths.get(n, 1.0) if widths else 1.0) for n, p in positions.items()), default=0.0)
    return Layout(positions, dict(rank), tuple(tuple(r) for r in order), points, c, initial,
                  right - min(xs), height)


class _LRU:
    def __init__(self, size):
        self.size = size
        self.data = OrderedDict()

    def get(self, key):
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key, value):
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)


_CACHE = _LRU(32)


def cached_layout(nodes: Sequence[str], edges: Sequence[Tuple[str, str]], widths=None) -> Layout:
    """:func:`layered_layout`, cached per (nodes, edges, widths) structure."""
    key = (tuple(nodes), tuple(edges), tuple(sorted(widths.items())) if widths else None)
    hit = _CACHE.get(key)
    if hit is None:
        hit = layered_layout(nodes, edges, widths=widths)
        _CACHE.put(key, hit)
    return hit


def cache_clear():
    _CACHE.data.clear()


def cache_info():
    return len(_CACHE.data)


# ------------------------------------------------------------------ nested groups (folded / expanded blocks)
GROUP_PAD_X = 2.0      # x units between a group's frame and its contents, each side
GROUP_PAD_TOP = 0.7    # ranks above a group's contents (its title)
PORT = "^in:"          # prefix of a group's entry port (a hidden node: edges from outside enter there)
GROUP_PAD_BOTTOM = 0.4
PORT_RANK = 0.45       # the height of a rank holding only a group's entry port
LAST_RANK_TRIM = 0.45  # of the last rank of a group, what lies below its nodes and is not counted


@dataclass(frozen=True)
class CompoundLayout:
    positions: Dict[str, Tuple[float, float]]      # leaf nodes: (x left, y); y = -(ranks from the top)
    boxes: Dict[str, Tuple[float, float, float, float]]   # groups: (x left, y top, width, height in ranks)
    edge_points: Dict[Tuple[str, str], Tuple[Tuple[float, float], ...]]   # polyline per leaf edge
    width: float
    height: float


def _chain(n, member_of, groups):
    """[n, its group, the group's parent, ..., None]."""
    out = [n]
    g = member_of.get(n)
    while g is not None:
        out.append(g)
        g = groups.get(g)
    out.append(None)
    return out


def compound_layout(nodes: Sequence[str], edges: Sequence[Tuple[str, str]], widths=None, groups=None,
                    member_of=None, wrap=frozenset()) -> CompoundLayout:
    """Lay out a DAG whose nodes sit in nested groups (expanded blocks).

    Each group is laid out on its own (its child groups as single nodes as
    wide and as tall as their own layouts), then placed inside its parent: a
    rank holding a tall group grows to its height.  So expanding or folding a
    group only moves what is below it and beside it; the order of everything
    else stays.  ``groups``: {group: parent group or None}; ``member_of``:
    {node: the innermost group holding it} (absent: top level).  Every
    sub-layout is cached (:func:`cached_layout`).  A chain of at least
    WRAP_MIN nodes of ``wrap`` (folded blocks: ResNet-152's 36 in res4), one
    after the other, is laid out in columns (:func:`wrap_chains`), so that a
    long stage uses the screen's width instead of a column 60 ranks tall."""
    groups = dict(groups or {})
    member_of = {n: g for n, g in (member_of or {}).items() if g in groups}
    items = _group_items(nodes, groups, member_of)
    level_edges, lca_rep, entries = _level_edges(edges, groups, member_of)
    sizes, local, root_size = _layout_groups(items, level_edges, groups, widths or {}, wrap)
    positions, boxes, ports, origin = _place_groups(local, sizes)

    def dummies(g, a, b):
        lay, _pos, tops, x0 = local[g]
        ox, oy = origin[g]
        out = []
        for px, py in lay.edge_points.get((a, b), ())[1:-1]:
            r = int(round(-py))
            out.append((ox + px - x0, oy - tops[min(r, len(tops) - 1)]))
        return out

    points = {}
    for (u, v), (g, ru, rv) in lca_rep.items():
        inner = dummies(g, ru, rv)
        for sub, rep in entries.get((u, v), ()):
            if PORT + sub in ports:
                inner.append(ports[PORT + sub])
            inner.extend(dummies(sub, PORT + sub, rep))
        points[(u, v)] = (positions.get(u, (0.0, 0.0)),) + tuple(inner) + (positions.get(v, (0.0, 0.0)),)
    width, height = root_size
    return CompoundLayout(positions, boxes, points, width, height)


def _group_items(nodes, groups, member_of):
    """{group or None: its direct members (nodes and child groups)}, in node
    order (a child group where its first node stands)."""
    order = {n: i for i, n in enumerate(nodes)}
    items: Dict[object, list] = {}
    for n in nodes:
        items.setdefault(member_of.get(n), []).append(n)
    first = {}
    for n in nodes:
        for g in _chain(n, member_of, groups)[1:-1]:
            first.setdefault(g, order[n])
    for g, parent in groups.items():
        if g in first:
            items.setdefault(parent, []).append(g)
    for k in items:
        items[k].sort(key=lambda m: order[m] if m in order else first.get(m, 0) - 0.5)
    return items


def _level_edges(edges, groups, member_of):
    """``(level_edges, lca_rep, entries)``: each leaf edge as an edge between
    the two members of the innermost group holding both ends ({group: [(a, b)]},
    and {(u, v): (group, a, b)}), plus, for an edge entering nested groups, the
    port edges inside each ({(u, v): [(group, member)]})."""
    level_edges: Dict[object, list] = {}
    lca_rep = {}
    entries: Dict[Tuple[str, str], list] = {}
    for u, v in edges:
        cu, cv = _chain(u, member_of, groups), _chain(v, member_of, groups)
        sv = set(cv)
        lca_i = next(i for i, g in enumerate(cu) if g in sv and i > 0)
        lca = cu[lca_i]
        ru, rv = cu[lca_i - 1], cv[cv.index(lca) - 1]
        if ru != rv:
            level_edges.setdefault(lca, []).append((ru, rv))
            lca_rep[(u, v)] = (lca, ru, rv)
            # entering nested groups: from each group's entry port (a hidden node on its top rank) to
            # the member the edge goes to, so that edge is routed inside the frame like any other
            for g in reversed(cv[1:cv.index(lca)]):
                rep = cv[cv.index(g) - 1]
                level_edges.setdefault(g, []).append((PORT + g, rep))
                entries.setdefault((u, v), []).append((g, rep))
    return level_edges, lca_rep, entries


def _layout_groups(items, level_edges, groups, widths, wrap=frozenset()):
    """Each group laid out on its own, innermost first: ``(sizes, local, root size)``
    with sizes {group: (width, height) of its frame} and local {group or None:
    (layout, member positions, rank tops, x offset)}."""
    sizes: Dict[str, Tuple[float, float]] = {}      # group: (width, height) of its frame
    local: Dict[object, tuple] = {}
    root_size = (0.0, 0.0)

    def depth(g):
        d = 0
        while g is not None:
            g = groups.get(g)
            d += 1
        return d

    for g in sorted([k for k in items if k is not None], key=depth, reverse=True) + [None]:
        members = items.get(g, [])
        if not members:
            continue
        if any(e[0] == PORT + str(g) for e in level_edges.get(g, [])):
            members = [PORT + str(g)] + list(members)
        local[g], size = _layout_group(g, members, list(dict.fromkeys(level_edges.get(g, []))), sizes, widths,
                                       wrap)
        if g is not None:
            sizes[g] = (size[0] + 2 * GROUP_PAD_X, size[1] + GROUP_PAD_TOP + GROUP_PAD_BOTTOM)
        else:
            root_size = size
    return sizes, local, root_size


def _layout_group(g, members, es, sizes, widths, wrap=frozenset()):
    """One group's (or the top level's, ``g`` None) layout: ``((layout, positions,
    rank tops, x offset), (width, height))``; a rank holding a child group is as
    tall as the group's frame."""
    w = {m: (sizes[m][0] + 1.0 if m in sizes else widths.get(m, 1.0 if not m.startswith(PORT) else 3.0))
         for m in members}
    lay = cached_layout(tuple(members), tuple(es), w)
    if wrap:
        lay = wrap_chains(lay, es, w, wrap)
    rank_h = [1.0] * max(lay.height, 1)
    for r, row in enumerate(lay.order):
        if row and all(m.startswith((PORT, DUMMY)) for m in row):
            rank_h[r] = PORT_RANK        # the entry port's rank: a short step, not a whole rank
    for m in members:
        if m in sizes:
            r = lay.ranks[m]
            rank_h[r] = max(rank_h[r], sizes[m][1] + 0.5)
    tops = [0.0]
    for h in rank_h:
        tops.append(tops[-1] + h)
    if g is None:       # the top level: anchored on its first node, so growing a block moves nothing above it
        x0 = lay.positions[members[0]][0] + w[members[0]] / 2.0
    else:               # a group: its contents start at its frame's left edge
        x0 = min((lay.positions[m][0] for m in members), default=0.0)
    pos = {m: (lay.positions[m][0] - x0, -tops[lay.ranks[m]]) for m in members}
    right = max((pos[m][0] + w[m] for m in members), default=0.0) - min(pos[m][0] for m in members)
    # the last rank ends just below its nodes (a whole rank there stretched every frame)
    return (lay, pos, tops, x0), (right, max(tops[-1] - LAST_RANK_TRIM, 0.5))


WRAP_MIN = 9          # chains of at least this many wrappable nodes are laid out in columns
WRAP_GAP = 6.0        # x units between two columns (the edge from one column's foot to the next's head)
WRAP_ROWS_PER_COL = 1.6   # rows per column: a stage's grid about twice as wide as tall on screen


def _chains(lay, es, wrap):
    """Runs of ranks, each holding exactly one node, of ``wrap``, each node the only
    successor of the one above it and the only predecessor of the one below: [[node, ...]]."""
    succ, pred = {}, {}
    for u, v in es:
        succ.setdefault(u, set()).add(v)
        pred.setdefault(v, set()).add(u)
    runs, run = [], []
    for row in lay.order:
        n = row[0] if len(row) == 1 else None
        if n is not None and n in wrap and (not run or (succ.get(run[-1]) == {n} and pred.get(n) == {run[-1]})):
            run.append(n)
            continue
        if len(run) >= WRAP_MIN:
            runs.append(run)
        run = [n] if n is not None and n in wrap else []
    if len(run) >= WRAP_MIN:
        runs.append(run)
    return runs


def wrap_chains(lay: Layout, es, widths, wrap) -> Layout:
    """``lay`` with each long chain of ``wrap`` nodes (see :func:`_chains`) laid out
    in columns, read top to bottom and left to right, centred where the chain stood;
    the ranks below move up.  The edge from a column's foot to the next column's head
    runs up the gap between them."""
    runs = _chains(lay, es, wrap)
    if not runs:
        return lay
    positions = dict(lay.positions)
    ranks = dict(lay.ranks)
    points = dict(lay.edge_points)
    rank_of = {n: r for r, row in enumerate(lay.order) for n in row}
    shift_at = []                    # (first rank after a run, ranks it saves)
    for run in runs:
        n = len(run)
        cols = max(2, int(round(math.sqrt(n / WRAP_ROWS_PER_COL))))
        rows = int(math.ceil(n / float(cols)))
        cols = int(math.ceil(n / float(rows)))
        cw = max(widths.get(m, 1.0) for m in run)
        centre = sum(lay.positions[m][0] + widths.get(m, 1.0) / 2.0 for m in run) / n
        left = centre - (cols * cw + (cols - 1) * WRAP_GAP) / 2.0
        top = rank_of[run[0]]
        last = (cols - 1) * rows         # the last column's first node; that column ends on the bottom row,
        offset = cols * rows - n         # so the edge out of the chain leaves below the grid
        for k, m in enumerate(run):
            c, r = divmod(k, rows) if k < last else (cols - 1, k - last + offset)
            x = left + c * (cw + WRAP_GAP) + (cw - widths.get(m, 1.0)) / 2.0
            positions[m] = (x, -float(top + r))
            ranks[m] = top + r
        for k in range(n - 1):
            a, b = run[k], run[k + 1]
            if (k + 1) % rows == 0 and k + 1 <= last:     # up the gap to the next column's head
                gx = left + (k // rows + 1) * (cw + WRAP_GAP) - WRAP_GAP / 2.0
                points[(a, b)] = (positions[a], (gx, positions[a][1]), (gx, positions[b][1]), positions[b])
            else:
                points[(a, b)] = (positions[a], positions[b])
        shift_at.append((top + n, n - rows))

    def moved(rank):
        return rank - sum(saved for after, saved in shift_at if rank >= after)
    wrapped = {m for run in runs for m in run}
    for node, r in lay.ranks.items():
        if node not in wrapped:
            ranks[node] = moved(r)
            if node in positions:
                positions[node] = (positions[node][0], -float(ranks[node]))
    for key, pts in lay.edge_points.items():
        if key[0] in wrapped and key[1] in wrapped:
            continue
        new = [(x, -float(moved(int(round(-y))))) for x, y in pts]
        new[0] = positions.get(key[0], new[0])
        new[-1] = positions.get(key[1], new[-1])
        points[key] = tuple(new)
    height = max(ranks.values()) + 1 if ranks else 0
    order: list = [[] for _ in range(height)]
    for node, r in sorted(ranks.items(), key=lambda kv: positions.get(kv[0], (0.0, 0.0))[0]):
        order[r].append(node)
    xs = [p[0] for p in positions.values()] or [0.0]
    right = max((p[0] + widths.get(m, 1.0) for m, p in positions.items()), default=0.0)
    return Layout(positions, ranks, tuple(tuple(r) for r in order), points, lay.crossings,
                  lay.crossings_initial, right - min(xs), height)


def _place_groups(local, sizes):
    """Absolute places, top level down: ``(leaf positions, group boxes, port
    positions, each group's content origin)``."""
    positions = {}
    boxes = {}
    ports = {}
    origin = {None: (0.0, 0.0)}
    todo = [None]
    while todo:
        g = todo.pop()
        if g not in local:
            continue
        ox, oy = origin[g]
        _lay, pos, _tops, _x0 = local[g]
        for m, (lx, ly) in pos.items():
            ax, ay = ox + lx, oy + ly
            if m.startswith(PORT):
                ports[m] = (ax, ay)
            elif m in sizes:
                boxes[m] = (ax, ay, sizes[m][0], sizes[m][1])
                origin[m] = (ax + GROUP_PAD_X, ay - GROUP_PAD_TOP)
                todo.append(m)
            else:
                positions[m] = (ax, ay)
    return positions, boxes, ports, origin

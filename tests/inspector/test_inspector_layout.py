"""graph_layout: ranks, crossing counts on known graphs, crossing reduction, coordinates."""
import itertools
import random

import networkx as nx
import pytest

from engine.instruments import graph_layout as gl


def _g(edges, nodes=()):
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return g


def test_ranks_longest_path():
    g = _g([("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")])
    assert gl.assign_ranks(g) == {"a": 0, "b": 1, "c": 2, "d": 3}


def test_late_source_sits_above_its_consumer():
    # "w" feeds only "d" (rank 3): it is placed at rank 2, not 0
    g = _g([("a", "b"), ("b", "c"), ("c", "d"), ("w", "d")])
    r = gl.assign_ranks(g)
    assert r["w"] == 2 and r["a"] == 0


@pytest.mark.parametrize("upper,lower,edges,expected", [
    (["a", "b"], ["x", "y"], [("a", "x"), ("b", "y")], 0),
    (["a", "b"], ["x", "y"], [("a", "y"), ("b", "x")], 1),
    (["a", "b", "c"], ["x", "y", "z"], [("a", "z"), ("b", "y"), ("c", "x")], 3),
    (["a", "b"], ["x", "y", "z"], [("a", "x"), ("a", "z"), ("b", "y")], 1),
    (["a", "b", "c"], ["x", "y", "z"], [(u, v) for u in "abc" for v in "xyz"], 9),   # K3,3
])
def test_crossings_between_known_graphs(upper, lower, edges, expected):
    assert gl.crossings_between(upper, lower, edges) == expected


def _brute(upper, lower, edges):
    pu = {n: i for i, n in enumerate(upper)}
    pl = {n: i for i, n in enumerate(lower)}
    c = 0
    for (a, b), (u, v) in itertools.combinations(edges, 2):
        if (pu[a] - pu[u]) * (pl[b] - pl[v]) < 0:
            c += 1
    return c


def test_crossings_match_brute_force():
    rnd = random.Random(3)
    for _ in range(50):
        upper = ["u%d" % i for i in range(rnd.randint(1, 7))]
        lower = ["l%d" % i for i in range(rnd.randint(1, 7))]
        edges = list({(rnd.choice(upper), rnd.choice(lower)) for _ in range(rnd.randint(0, 15))})
        assert gl.crossings_between(upper, lower, edges) == _brute(upper, lower, edges)


def test_count_crossings_over_ranks():
    g = _g([("a", "y"), ("b", "x"), ("x", "q"), ("y", "p")])
    order = [["a", "b"], ["x", "y"], ["p", "q"]]
    assert gl.count_crossings(order, g) == 2


def test_reduction_removes_crossings_of_a_twisted_ladder():
    nodes = ["a", "b", "c", "x", "y", "z"]
    edges = [("a", "z"), ("b", "y"), ("c", "x")]
    lay = gl.layered_layout(nodes, edges)
    assert lay.crossings_initial == 3
    assert lay.crossings == 0


def test_reduction_lowers_crossings_on_random_dags():
    rnd = random.Random(7)
    lowered = 0
    for _trial in range(20):
        ranks = [["r%d_%d" % (r, i) for i in range(rnd.randint(2, 5))] for r in range(5)]
        nodes = [n for row in ranks for n in row]
        rnd.shuffle(nodes)
        edges = set()
        for r in range(4):
            for u in ranks[r]:
                for v in rnd.sample(ranks[r + 1], rnd.randint(1, len(ranks[r + 1]))):
                    edges.add((u, v))
        lay = gl.layered_layout(nodes, sorted(edges))
        assert lay.crossings <= lay.crossings_initial
        lowered += lay.crossings < lay.crossings_initial
    assert lowered >= 10


def test_long_edges_route_through_dummies_and_positions_are_real_nodes():
    nodes = ["a", "b", "c", "d"]
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]
    lay = gl.layered_layout(nodes, edges)
    assert set(lay.positions) == set(nodes)
    assert len(lay.edge_points[("a", "d")]) == 4          # a, two dummies, d
    assert [lay.positions[n][1] for n in nodes] == [0.0, -1.0, -2.0, -3.0]
    assert lay.height == 4


def test_nodes_of_a_rank_keep_their_widths_apart():
    nodes = ["s", "p", "q", "r"]
    edges = [("s", "p"), ("s", "q"), ("s", "r")]
    widths = {"s": 5.0, "p": 7.0, "q": 3.0, "r": 4.0}
    lay = gl.layered_layout(nodes, edges, widths=widths)
    row = list(lay.order[1])
    xs = [lay.positions[n][0] for n in row]
    for a, _b, xa, xb in zip(row, row[1:], xs, xs[1:]):
        assert xb - xa >= widths[a] - 1e-9


def test_chain_is_straight():
    nodes = list("abcdef")
    edges = list(zip(nodes, nodes[1:]))
    lay = gl.layered_layout(nodes, edges)
    assert len({round(lay.positions[n][0], 6) for n in nodes}) == 1


def test_cycles_are_tolerated():
    lay = gl.layered_layout(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a")])
    assert set(lay.positions) == {"a", "b", "c"}


def test_cached_layout_is_cached_per_structure():
    gl.cache_clear()
    a = gl.cached_layout(("a", "b"), (("a", "b"),))
    b = gl.cached_layout(("a", "b"), (("a", "b"),))
    c = gl.cached_layout(("a", "b", "c"), (("a", "b"),))
    assert a is b and a is not c and gl.cache_info() == 2


def test_inversions():
    assert gl._inversions([3, 1, 2]) == 2
    assert gl._inversions([1, 1, 1]) == 0
    assert gl._inversions([]) == 0


def test_long_chains_of_folded_blocks_wrap_into_columns():
    """Issue 22: ResNet-152's res4 (36 folded blocks) is a grid of columns, read top to
    bottom and left to right, the last column ending on the bottom row; what comes after
    moves up; a chain shorter than WRAP_MIN, or of nodes not allowed to wrap, stays a column."""
    chain = ["b%d" % i for i in range(36)]
    nodes = ["in"] + chain + ["out"]
    edges = list(zip(nodes, nodes[1:]))
    widths = dict.fromkeys(nodes, 20.0)
    plain = gl.compound_layout(nodes, edges, widths)
    lay = gl.compound_layout(nodes, edges, widths, wrap=frozenset(chain))
    xs = sorted({round(lay.positions[n][0], 3) for n in chain})
    rows = sorted({lay.positions[n][1] for n in chain}, reverse=True)
    assert len(xs) == 5 and len(rows) == 8                  # 36 blocks: 5 columns of up to 8
    assert all(b - a >= 20.0 for a, b in zip(xs, xs[1:]))  # columns apart by more than a block
    col = {n: xs.index(round(lay.positions[n][0], 3)) for n in chain}
    assert [col[n] for n in chain] == sorted(col[n] for n in chain)      # read column by column
    assert lay.positions["b35"][1] == rows[-1] and lay.positions["b0"][1] == rows[0]
    assert lay.positions["out"][1] > plain.positions["out"][1] + 20      # 28 ranks saved
    # a column's foot to the next column's head: up the gap between them
    pts = lay.edge_points[("b7", "b8")]
    assert len(pts) == 4 and xs[0] + 20.0 < pts[1][0] < xs[1] and pts[2][1] > pts[1][1]
    # short chains and chains of plain layers stay as they were
    assert gl.compound_layout(nodes, edges, widths, wrap=frozenset(chain[:8])).positions == plain.positions
    assert gl.compound_layout(nodes, edges, widths, wrap=frozenset({"in", "out"})).positions == plain.positions

"""view_models and run_state: what the graph shows, from graph + records."""
import pytest
from inspector_testlib import LENET, RESNET_TINY, build_loaded

from engine.instruments import graph_layout as gl
from inspector.state import presenter, runner
from inspector.state.sessions import Session
from inspector.views import run_state as rs
from inspector.views import view_models as vm


def session_for(ld, c="s"):
    s = Session(id=c * 32, loaded=ld)
    runner.apply_inputs(s)
    return s


def _ids_of(display, kind):
    return [n for n in display.nodes if n.kind == kind]


def test_display_graph_layers_ghosts_outputs(lenet):
    d = vm.display_graph(lenet.graph, vm.DisplayOptions())
    layers = _ids_of(d, "layer")
    assert len(layers) == len(lenet.graph.layers)
    assert {n.name for n in _ids_of(d, "ghost")} == {"digits", "accuracy"}
    assert {n.name for n in _ids_of(d, "output")} == {"loss"}
    d2 = vm.display_graph(lenet.graph, vm.DisplayOptions(show_ghosts=False))
    assert not _ids_of(d2, "ghost") and not [e for e in d2.edges if e.kind == "ghost"]


def test_fold_splits_wires_producer_to_consumers():
    ld = build_loaded(RESNET_TINY)
    g = ld.graph
    shown = vm.display_graph(g, vm.DisplayOptions(fold_splits=False))
    folded = vm.display_graph(g, vm.DisplayOptions(fold_splits=True))
    n_splits = sum(l.is_split for l in g.layers)
    assert n_splits > 0
    assert len(_ids_of(shown, "layer")) - len(_ids_of(folded, "layer")) == n_splits
    split_names = {l.name for l in g.layers if l.is_split}
    assert not split_names & {n.name for n in _ids_of(folded, "layer")}
    # every folded edge names a real (unsplit) blob
    split_tops = {t for s in g.splits for t in s.tops}
    assert not {e.blob for e in folded.edges if e.kind == "data"} & split_tops
    nodes, edges, _w = folded.layout_input()
    lay = gl.layered_layout(nodes, edges)
    assert set(lay.positions) == {n.id for n in folded.nodes}


def test_fold_inplace_merges_chain_into_producer():
    ld = build_loaded(RESNET_TINY)
    d = vm.display_graph(ld.graph, vm.DisplayOptions(fold_inplace=True))
    stem = [n for n in d.nodes if n.name == "stem"][0]
    names = [ld.graph.layers[i].name for i in stem.layers]
    assert names == ["stem", "stem_bn", "stem_scale", "stem_relu"]
    assert stem.label == "stem (+3)"
    assert d.node_of_layer[ld.graph.layer("stem_relu").index] == stem.id


def test_blobs_as_nodes(lenet):
    d = vm.display_graph(lenet.graph, vm.DisplayOptions(blobs_as_nodes=True, show_ghosts=False))
    blobs = _ids_of(d, "blob")
    # ip1 is written twice (ip1, then relu1 in place): two versions
    assert sorted(n.name for n in blobs if n.name == "ip1") == ["ip1", "ip1"]
    for e in d.edges:
        kinds = {n.id: n.kind for n in d.nodes}
        assert "blob" in (kinds[e.src], kinds[e.dst])


def _view(ld, colour_by, **kw):
    return presenter.graph_view(ld, colour_by, vm.DisplayOptions(), **kw)


def test_colour_by_category_and_legend(lenet):
    v = _view(lenet, "category")
    conv = [n for n in v.nodes if n.name == "conv1" and n.kind == "layer"][0]
    assert conv.fill == "#f28e2b"
    assert ("convolution", "#f28e2b") in v.legend and v.scale is None


def test_recolour_after_forward(lenet):
    s = session_for(lenet, "x")
    v0 = _view(lenet, "data")
    assert all(n.fill == vm.NO_DATA_COLOUR for n in v0.nodes if n.kind == "layer")
    runner.forward_range(s, 1, 4)
    v1 = _view(lenet, "data")
    fills = {n.name: n.fill for n in v1.nodes if n.kind == "layer"}
    assert fills["conv1"] != vm.NO_DATA_COLOUR and fills["ip1"] == vm.NO_DATA_COLOUR
    assert v1.scale is not None and v1.scale.lo <= v1.scale.hi
    states = {n.name: n.state for n in v1.nodes if n.kind == "layer"}
    assert states["conv1"] == rs.FRESH and states["ip1"] == rs.NOT_RUN


def test_numeric_colouring_with_nothing_to_show_says_why(lenet):
    # nothing ran, no solver step, nothing compared: every node grey, and the legend says
    # what to do instead of staying empty
    for mode, needle in (("data", "run Forward"), ("update_ratio", "Solver step"), ("reldiff", "Compare tab")):
        v = _view(lenet, mode)
        assert v.scale is None
        assert [label for label, colour in v.legend if needle in label and colour == vm.NO_DATA_COLOUR], mode


def test_metrics_from_records(lenet):
    s = session_for(lenet, "y")
    runner.forward_backward(s)
    m = presenter.metrics(lenet)
    conv = m[lenet.graph.layer("conv1").index]
    assert conv.data > 0 and conv.fwd_ms >= 0 and conv.bwd_ms >= 0
    # gradients, labelled apart: conv1's bottom (the input) takes none, its weights do
    assert conv.diff is None and conv.param_diff > 0
    conv2 = m[lenet.graph.layer("conv2").index]
    assert conv2.diff > 0 and conv2.param_diff > 0
    assert not conv.nonfinite
    rec = lenet.recorder.latest_layer_records()[(lenet.graph.layer("conv1").index, "forward")]
    top = [b for b in rec.blobs if b.role == "top"][0]
    assert conv.data == pytest.approx(top.data.asum_mean)


def test_nonfinite_colouring(overflow_net):
    ld = build_loaded(overflow_net)
    s = session_for(ld, "z")
    runner.forward_range(s, 0, len(ld.graph.layers) - 1)
    v = _view(ld, "nonfinite")
    fills = {n.name: n.fill for n in v.nodes if n.kind == "layer"}
    assert fills["scale_up"] == vm.FINITE_COLOUR and fills["exp1"] == vm.NONFINITE_COLOUR


def test_selection_marks_nodes_and_edges(lenet):
    v = _view(lenet, "category", selection={"kind": "layer", "name": "pool1"})
    assert [n.name for n in v.nodes if n.selected] == ["pool1"]
    v = _view(lenet, "category", selection={"kind": "blob", "name": "conv1"})
    assert any(e.selected for e in v.edges)


def test_value_range_and_scale_colour():
    lo, hi, log = vm.value_range([1e-6, 1e-3, 1.0, 10.0])
    assert log and lo < hi
    lo, hi, log = vm.value_range([1.0, 2.0, 3.0])
    assert not log
    a, b = vm.scale_colour(lo, lo, hi, False), vm.scale_colour(hi, lo, hi, False)
    assert a == vm._SCALE[0] and b == vm._SCALE[-1]
    assert vm.scale_colour(None, 0, 1) == vm.NO_DATA_COLOUR


# ------------------------------------------------------------------ run states
def _chain_graph():
    ld = build_loaded(LENET)
    return ld


def test_run_states_follow_inputs_and_ranges(lenet):
    g, log = lenet.graph, rs.RunLog(input_layers=(0,))
    st = rs.layer_states(g, log)
    assert st[0][0] == rs.FRESH                     # an Input layer holds its (zero) values
    assert all(f == rs.NOT_RUN for f, _b in st[1:])
    tops = {l.index: l.top_ids for l in g.layers}
    log.inputs_changed(tops)
    for i in range(1, 4):
        log.ran_forward(i, g.layers[i].top_ids)
    st = rs.layer_states(g, log)
    assert [f for f, _ in st[:4]] == [rs.FRESH] * 4 and st[4][0] == rs.NOT_RUN
    # re-running an upstream layer makes the downstream ones stale
    log.ran_forward(1, g.layers[1].top_ids)
    st = rs.layer_states(g, log)
    assert st[1][0] == rs.FRESH and st[2][0] == rs.STALE and st[3][0] == rs.STALE
    # new inputs: everything that ran is stale
    log.inputs_changed(tops)
    st = rs.layer_states(g, log)
    assert st[0][0] == rs.FRESH and all(f == rs.STALE for f, _ in st[1:4])
    bs = rs.blob_states(g, log, st)
    assert bs[g.blob("data").id] == rs.FRESH and bs[g.blob("conv1").id] == rs.STALE


def test_backward_states(lenet):
    s = session_for(lenet, "b")
    runner.forward_backward(s)
    st = rs.layer_states(lenet.graph, lenet.runlog)
    for l in lenet.graph.layers:
        f, b = st[l.index]
        assert f == rs.FRESH
        assert b == (rs.FRESH if l.need_backward else rs.NA)
    runner.forward_range(s, 0, 2)          # forward again: old gradients are stale
    st = rs.layer_states(lenet.graph, lenet.runlog)
    assert st[lenet.graph.layer("conv1").index][1] == rs.STALE


def test_params_changed_makes_param_layers_stale(lenet):
    s = session_for(lenet, "p")
    runner.forward_range(s, 0, 8)
    lenet.runlog.params_changed()
    st = rs.layer_states(lenet.graph, lenet.runlog)
    assert st[lenet.graph.layer("conv1").index][0] == rs.STALE
    assert st[lenet.graph.layer("digits").index][0] == rs.FRESH


def test_flops_and_memory_from_engine_analysis(lenet):
    from inspector.views import panel_models as pm
    an = lenet.analysis
    assert an["conv1"]["flops"] > 0 and an["conv1"]["macc"] > 0
    v = _view(lenet, "flops")
    vals = {n.name: n.value for n in v.nodes if n.kind == "layer"}
    assert vals["conv1"] == an["conv1"]["flops"] and v.scale is not None
    rows = {r[0]: r for r in pm.memory_rows(lenet.graph, an)}
    assert rows["relu1"][1] == 0                      # in place: nothing allocated
    assert rows["ip1"][3] == an["ip1"]["param_bytes"]
    d = pm.layer_details(lenet.graph, lenet.graph.layer("conv1").index, analysis=an)
    assert "FLOPs (forward, one batch)" in dict(d["summary"])
    assert "params" in pm.analysis_totals(an)


# ------------------------------------------------------------------ blocks: folding, layout, search (issue 13)
def _resnet50(tmp_path):
    from benchmarks.netgen import resnet_prototxt
    p = tmp_path / "resnet50_deploy.prototxt"
    p.write_text(resnet_prototxt(50, fillers=False))
    return build_loaded(p, phase="TEST")


def test_folded_blocks_and_default_folding(tmp_path):
    ld = _resnet50(tmp_path)
    blks = presenter.blocks(ld)
    opened = presenter.expanded_set(ld, None)
    # stages and the two sections (input: the stem, head: pool5 .. prob) open, residual blocks folded
    assert set(opened) == {"input", "res2", "res3", "res4", "res5", "head"}
    d = vm.display_graph(ld.graph, vm.DisplayOptions(), blks, opened)
    folded = [n for n in d.nodes if n.kind == "block"]
    assert len(folded) == 16 and all(n.group.startswith("res") for n in folded)
    res4b = next(n for n in folded if n.block == "res4b")
    assert res4b.label == "res4b · 14 layers" and res4b.group == "res4"
    assert set(d.groups) == {"input", "res2", "res3", "res4", "res5", "head"}
    # one edge per blob between two drawn nodes (a blob read twice inside a block: one edge)
    pairs = [(e.src, e.dst, e.blob) for e in d.edges]
    assert len(pairs) == len(set(pairs))
    # the view: the block coloured by its worst layer, labelled with its output shape
    v = presenter.graph_view(ld, "flops", vm.DisplayOptions())
    node = next(n for n in v.nodes if n.kind == "block" and n.name == "res4b")
    assert node.value is not None and "1×1024×14×14" in node.label
    assert node.parent == "F:res4"
    assert any(n.kind == "group" and n.name == "res4" and n.width > 0 for n in v.nodes)


def test_expanding_a_block_moves_only_what_is_below(tmp_path):
    ld = _resnet50(tmp_path)
    opened = list(presenter.expanded_set(ld, None))
    _d1, lay1 = presenter.display_and_layout(ld, vm.DisplayOptions(), opened)
    _d2, lay2 = presenter.display_and_layout(ld, vm.DisplayOptions(), opened + ["res3b"])
    above = [n for n in lay1.positions if n in lay2.positions and lay1.positions[n][1] > lay1.positions["K:res3b"][1]]
    assert above and all(lay1.positions[n] == lay2.positions[n] for n in above)
    after = lay2.positions["K:res3c"]
    assert after[1] < lay1.positions["K:res3c"][1] - 5           # pushed down by the opened block
    assert lay2.boxes["res3b"][3] > 5                             # its frame holds its 14 layers


def test_search_ranks_names_types_and_blocks(lenet, tmp_path):
    from inspector.views.search import blocks_to_open, search
    matches, total = search(lenet.graph, "conv")
    assert [m.name for m in matches[:2]] == ["conv1", "conv2"] and matches[0].type == "Convolution"
    assert any(m.kind == "blob" for m in matches) and total == len(matches)
    by_type, _ = search(lenet.graph, "pooling")
    assert [m.name for m in by_type] == ["pool1", "pool2"]
    assert search(lenet.graph, "  ")[0] == [] and search(lenet.graph, "zzz")[1] == 0
    ld = _resnet50(tmp_path)
    blks = presenter.blocks(ld)
    hits, _ = search(ld.graph, "res4b_branch2", blks)
    assert hits[0].name == "res4b_branch2a" and hits[0].where == "res4b"
    assert set(blocks_to_open(ld.graph, blks, "layer", "res4b_branch2a")) == {"res4", "res4b"}
    assert blocks_to_open(ld.graph, blks, "block", "res4b") == ["res4"]


def test_step_marks(lenet):
    s = session_for(lenet)
    runner.forward_range(s, 1, 3)
    m = vm.step_marks(lenet.recorder.steps)
    assert m.kind == "forward" and m.stopped == 3 and m.ran == (1, 2, 3)
    v = presenter.graph_view(lenet, "category", vm.DisplayOptions())
    marks = {n.name: n.mark for n in v.nodes if n.kind == "layer"}
    assert marks["conv2"] == "stopped" and marks["conv1"] == "ran" and marks["pool1"] == "ran" and marks["ip2"] == ""


def test_stage_labels_count_blocks_and_folded_blocks_name_what_they_hold(tmp_path):
    """Issue 22: a stage reads "res4 · 6 blocks" with its output shape (what a zoomed-out
    page shows beside it); a folded block lists the blocks folded inside it (the page keeps
    a selected inner block in view through its holder)."""
    ld = _resnet50(tmp_path)
    v = presenter.graph_view(ld, "category", vm.DisplayOptions())
    frames = {n.name: n for n in v.nodes if n.kind == "group"}
    assert frames["res4"].label == "res4 · 6 blocks" and frames["res4"].short == "res4 · 6 blocks\n1×1024×14×14"
    assert frames["input"].short.startswith("input · ") and frames["head"].short.endswith("1×1000")
    block = next(n for n in v.nodes if n.kind == "block" and n.name == "res4b")
    assert block.short == "res4b" and block.inner == ("res4b",) and block.label.startswith("res4b · 14 layers")
    folded = presenter.graph_view(ld, "category", vm.DisplayOptions(), expanded=[])      # Collapse all
    res4 = next(n for n in folded.nodes if n.kind == "block" and n.name == "res4")
    assert res4.label.startswith("res4 · 6 blocks\n1×1024×14×14") and set(res4.inner) >= {"res4", "res4a", "res4f"}
    from inspector.views import cyto
    el = next(e for e in cyto.elements(folded) if e["data"].get("name") == "res4")
    assert "|res4b|" in el["data"]["inner"] and el["data"]["short"] == "res4"
    # a section holding a block and layers of its own counts layers (MobileNet's head: conv6, pool6, fc7, prob)
    from benchmarks.netgen import mobilenet_prototxt
    p = tmp_path / "mobilenet.prototxt"
    p.write_text(mobilenet_prototxt())
    mv = presenter.graph_view(build_loaded(p, phase="TEST"), "category", vm.DisplayOptions())
    labels = {n.name: n.label for n in mv.nodes if n.kind == "group"}
    assert labels["conv5"] == "conv5 · 6 blocks" and labels["head"].startswith("head · ") and \
        labels["head"].endswith(" layers")


SPLIT_FIRST = """name: "SplitFirst"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "data" top: "a" inner_product_param { num_output: 2 } }
layer { name: "b" type: "InnerProduct" bottom: "data" top: "b" inner_product_param { num_output: 2 } }
"""


def test_a_step_lands_on_a_drawn_layer_never_on_a_folded_split(tmp_path):
    """Issue 22: "data" feeds two layers, so Caffe inserts a Split after it, which the graph
    folds away: Step ▶ runs data with its split and marks data; the next step runs "a"."""
    p = tmp_path / "split_first.prototxt"
    p.write_text(SPLIT_FIRST)
    ld = build_loaded(p, phase="TEST")
    assert ld.graph.layers[1].is_split
    s = session_for(ld)
    msg = runner.step_forward(s)
    assert "ForwardFromTo(0, 1)" in msg and s.cursor_forward == 2
    marks = {n.name: n.mark for n in presenter.graph_view(ld, "category", vm.DisplayOptions()).nodes
             if n.kind == "layer"}
    assert marks["data"] == "stopped" and "stopped" not in (marks["a"], marks["b"])
    runner.step_forward(s)
    marks = {n.name: n.mark for n in presenter.graph_view(ld, "category", vm.DisplayOptions()).nodes
             if n.kind == "layer"}
    assert marks["a"] == "stopped"
    # a step that ran the split alone (a range ending there) marks the layer it copies
    runner.forward_range(s, 1, 1)
    marks = {n.name: n.mark for n in presenter.graph_view(ld, "category", vm.DisplayOptions()).nodes
             if n.kind == "layer"}
    assert marks["data"] == "stopped"
    # with splits drawn, the split itself carries the mark
    shown = presenter.graph_view(ld, "category", vm.DisplayOptions(fold_splits=False))
    assert {n.name: n.mark for n in shown.nodes if n.kind == "layer"}[ld.graph.layers[1].name] == "stopped"


def test_relative_difference_scale_covers_every_value_and_rounding_is_neutral():
    vals = [0.0, 3e-7, 1e-6, 0.00144, 0.02, 0.5]
    lo, hi, log = vm.reldiff_range(vals, 1e-3)
    assert (lo, hi, log) == (1e-3, 0.5, True)                 # the tolerance up to the largest value shown
    assert vm.reldiff_range(vals + [float("inf")], 1e-3)[1] == 0.5
    colours = [vm.reldiff_colour(v, lo, hi) for v in vals]
    assert colours[:3] == [vm.ROUNDING_COLOUR] * 3             # within rtol: rounding, neutral
    assert colours[3] not in (vm.ROUNDING_COLOUR, vm.NO_DATA_COLOUR) and colours[-1] == vm._DEPARTS[-1]
    assert vm.reldiff_colour(1e-3, lo, hi) == vm._DEPARTS[0]
    assert vm.reldiff_colour(float("nan"), lo, hi) == vm._DEPARTS[-1]
    assert vm.reldiff_colour(None, lo, hi) == vm.NO_DATA_COLOUR
    # without a tolerance: every value on the scale, from the smallest positive one
    lo, hi, _ = vm.reldiff_range(vals)
    assert lo == 3e-7 and hi == 0.5 and vm.reldiff_colour(3e-7, lo, hi, rounding=False) == vm._DEPARTS[0]


def test_long_chart_titles_are_broken_into_lines_that_fit():
    from inspector.views import debug_figures as df
    lines = df.title_lines("this net vs googlenet2_lrn_alpha_conv2_norm2.onnx (each layer's own arithmetic)")
    assert len(lines) == 2 and all(len(x) <= df.TITLE_CHARS for x in lines)
    one = df.title_lines("this run vs " + "x" * 100 + ".json")
    assert all(len(x) <= df.TITLE_CHARS for x in one) and one[-1].endswith(".json") and "…" in one[-1]
    fig = df.compare_figure([("fwd a", 1e-6, True)], 1e-3, "step 0 vs step 1")
    assert fig.layout.margin.t >= df.TOOLBAR_PX + 15 and fig.layout.title.pad.t == df.TOOLBAR_PX


def test_finding_causes_mark_each_cause_and_what_follows(lenet):
    g = lenet.graph
    bad = {g.layer(n).index: vm.LayerMetric(nonfinite=True) for n in ("ip1", "relu1", "ip2", "loss")}
    # a NaN/Inf source with no root cause upstream: the source is the cause, what carried it on follows
    rows = [{"severity": "error", "check": "nonfinite", "layer": "ip1", "message": "Inf at ip1"},
            {"severity": "warning", "check": "exploding_gradient", "layer": "conv2", "message": "|g|/|w| 50"},
            {"severity": "info", "check": "weights_not_loaded", "layer": "conv1", "message": "fillers"}]
    causes = vm.finding_causes(rows, g, bad)
    assert [(c.check, c.layer) for c in causes] == [("nonfinite", "ip1"), ("exploding_gradient", "conv2")]
    assert causes[0].symptoms == ("relu1", "ip2", "loss") and causes[1].symptoms == ()
    # a root cause upstream: the NaN/Inf sources follow from it too
    rows = [{"severity": "error", "check": "root_cause", "layer": "conv1", "message": "unfilled",
             "explains": ["ip1"]}] + rows[:1]
    (root,) = vm.finding_causes(rows, g, bad)
    assert root.layer == "conv1" and root.symptoms == ("ip1", "relu1", "ip2", "loss")
    # weights not loaded that explain dead ReLUs: the ReLUs follow from it
    rows = [{"severity": "warning", "check": "weights_not_loaded", "layer": "conv1", "message": "zeros",
             "explains": ["relu1"]}]
    (w,) = vm.finding_causes(rows, g, {})
    assert (w.check, w.layer, w.symptoms) == ("weights_not_loaded", "conv1", ("relu1",))
    # drawn: the cause's node ringed and flagged ⚠, the ReLU's as a consequence
    display, layout = presenter.display_and_layout(lenet, presenter.DEFAULT_OPTIONS)
    view = vm.graph_view(g, display, layout, causes=(w,))
    flags = {n.name: n.flag for n in view.nodes if n.kind == "layer"}
    assert flags["conv1"] == "cause" and flags["relu1"] == "symptom" and flags["ip2"] == ""
    assert next(n for n in view.nodes if n.name == "conv1").label.startswith("⚠ ")

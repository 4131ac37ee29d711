"""Glue from a session's loaded net to the pure view models and figures.

Each function takes a :class:`sessions.Loaded` (the caller holds the session
lock), gathers what the view models need (records, run states, arrays) and
returns figures or panel data.  The display graph and its layout are cached on
the Loaded per view option, so a recolour after a step costs only the view
model and the figure.
"""
import threading
import zlib
from collections import OrderedDict

import numpy as np

from engine.instruments import blocks as blocks_mod
from engine.instruments import graph_layout
from engine.instruments.blocks import find_blocks, with_sections
from inspector import adapters
from inspector.views import cyto, figures
from inspector.views import panel_models as pm
from inspector.views import view_models as vm

from ..views.run_state import blob_states, layer_states

DEFAULT_OPTIONS = vm.DisplayOptions()


def display_options(blob_mode="edges", options=()):
    options = set(options or ())
    return vm.DisplayOptions(blobs_as_nodes=blob_mode == "nodes", fold_splits="fold_splits" in options,
                             fold_inplace="fold_inplace" in options, show_ghosts="ghosts" in options,
                             labels="labels" in options)


_SHARED = OrderedDict()       # what depends only on a net's structure, by its key: blocks, layouts
_SHARED_LOCK = threading.Lock()


def _shared(key, make, keep=48):
    """``make()`` once per ``key`` across loaded nets (a phase switch or the next tab
    rebuilds a net of the same structure: its blocks and layouts are the same)."""
    with _SHARED_LOCK:
        hit = _SHARED.get(key)
        if hit is not None:
            _SHARED.move_to_end(key)
            return hit
    hit = make()
    with _SHARED_LOCK:
        _SHARED[key] = hit
        while len(_SHARED) > keep:
            _SHARED.popitem(last=False)
    return hit


def structure_key(graph):
    """What the drawing depends on: the layers and their wiring (graph.key) and the blobs' shapes."""
    return graph.key, tuple(b.shape for b in graph.blobs)


def drawing_scope(loaded):
    """The prefix of a drawing's element ids (cyto.elements' ``scope``): one per structure
    (structure_key: layers, wiring, shapes), so that a net of another structure shares no
    element with the net drawn before it (the page would patch an element of the same id,
    keeping what the new one lacks), while the same structure built again (a phase switch
    of a deploy net, a reload) is patched in place, as fast as a recolour."""
    cache = loaded.cache
    if "scope" not in cache:
        cache["scope"] = "n%08x" % zlib.crc32(repr(structure_key(loaded.graph)).encode())
    return cache["scope"]


def blocks(loaded):
    """The net's blocks (engine.instruments.blocks: found from names and structure, and
    the sections before the first stage and after the last), found once per structure."""
    cache = loaded.cache
    if "blocks" not in cache:
        layers = loaded.graph.layers
        cache["blocks"] = _shared(("blocks", loaded.graph.key),
                                  lambda: tuple(with_sections(layers, find_blocks(layers))))
    return cache["blocks"]


FOLD_BUDGET = blocks_mod.FOLD_BUDGET


def default_expanded(graph, blks, budget=FOLD_BUDGET):
    """The blocks a net opens with expanded (engine.instruments.blocks.default_open: the
    reports fold the same way), counting the layers drawn apart from inserted splits."""
    return blocks_mod.default_open(blks, [l.index for l in graph.layers if not l.is_split], budget)


def expanded_set(loaded, expanded):
    """The expanded block ids: the page's list, or the net's default when the page has none (None)."""
    if expanded is None:
        key = "default_expanded"
        if key not in loaded.cache:
            loaded.cache[key] = _shared(("default_expanded", loaded.graph.key),
                                        lambda: default_expanded(loaded.graph, blocks(loaded)))
        return loaded.cache[key]
    known = {b.id for b in blocks(loaded)}
    return tuple(sorted(set(expanded) & known))


def display_and_layout(loaded, opts, expanded=None):
    cache = loaded.cache
    opened = expanded_set(loaded, expanded)
    key = (opts.blobs_as_nodes, opts.fold_splits, opts.fold_inplace, opts.show_ghosts, opened)
    layouts = cache.setdefault("layouts", OrderedDict())
    hit = layouts.get(key)
    if hit is None:
        def make():
            display = vm.display_graph(loaded.graph, opts, blocks(loaded), opened)
            nodes, edges, widths = display.layout_input()
            return display, graph_layout.compound_layout(nodes, edges, widths, display.groups, display.member_of(),
                                                         wrap=display.wrappable())
        hit = _shared(("layout", structure_key(loaded.graph)) + key, make)
        layouts[key] = hit
        while len(layouts) > 24:
            layouts.popitem(last=False)
    else:
        layouts.move_to_end(key)
    return hit


def metrics(loaded):
    """Per-layer numbers of the live records, or of the timeline step being
    viewed; with a comparison active, each layer's relative difference."""
    from dataclasses import replace

    from inspector.state import debugger
    from inspector.views import debug_views
    m = vm.layer_metrics(loaded.graph, debugger.latest_records(loaded))
    cmp = getattr(loaded, "comparison", None)
    if cmp is not None:
        for i, v in debug_views.compare_layer_values(cmp, loaded.graph).items():
            m[i] = replace(m.get(i, vm.LayerMetric()), rel_diff=v)
    return m


def states(loaded):
    return layer_states(loaded.graph, loaded.runlog)


def health_rows(loaded):
    """The health findings of the records (adapters.health_findings), cached per step."""
    steps = loaded.recorder.steps
    # the same findings as the Findings tab (with the net: weights not loaded and root
    # causes fold what they explain), so one finding is one badge; new weights, new key
    params = tuple(p.data_memory.version for p in getattr(loaded.net, "all_params", ()))
    key = ("findings", len(steps), steps[-1].id if steps else 0, id(loaded.net), params)
    hit = loaded.cache.get("findings")
    if hit is None or hit[0] != key:
        rows = adapters.health_findings(steps, loaded.net)
        hit = (key, rows, vm.worst_findings(rows))
        loaded.cache["findings"] = hit
    return hit[1]


def findings_by_layer(loaded):
    """{layer: (severity, message)}, the worst health finding per layer, cached per step."""
    health_rows(loaded)
    return loaded.cache["findings"][2]


def causes(loaded, layer_metrics=None):
    """The findings' causes, each where it is, and what follows from it (view_models.finding_causes)."""
    return vm.finding_causes(health_rows(loaded), loaded.graph, layer_metrics if layer_metrics is not None
                             else metrics(loaded))


def graph_view(loaded, colour_by="category", opts=DEFAULT_OPTIONS, selection=None, expanded=None):
    from inspector.state import debugger
    display, layout = display_and_layout(loaded, opts, expanded)
    st = states(loaded)
    m = metrics(loaded)
    found, tolerance = causes(loaded, m), None
    cmp = getattr(loaded, "comparison", None)
    if colour_by == "reldiff" and cmp is not None:      # Compare: its tolerance, where the runs part
        tolerance = cmp.rtol
        fd = getattr(cmp, "first_divergence", None)
        rel = {i: x.rel_diff for i, x in m.items() if x.rel_diff is not None}
        why = "%s and %s part here (rtol %g)" % (cmp.label_a, cmp.label_b, cmp.rtol)
        departs = vm.departure(loaded.graph, getattr(fd, "layer", None), rel, cmp.rtol, why) if fd else None
        found = ((departs,) if departs else ()) + found
    return vm.graph_view(loaded.graph, display, layout, m, st, colour_by, selection,
                         loaded.analysis, blob_states(loaded.graph, loaded.runlog, st),
                         opts.labels and not opts.blobs_as_nodes,     # blob nodes carry the blob's label
                         revision=_revision(opts), findings=findings_by_layer(loaded),
                         marks=vm.step_marks(debugger.shown_steps(loaded)), causes=found, tolerance=tolerance)


def graph_elements(loaded, colour_by="category", opts=DEFAULT_OPTIONS, expanded=None, scope=""):
    """(cytoscape elements, the view) of the loaded net: what the graph callback sends;
    ``scope``: the net's own prefix of the element ids (cyto.elements)."""
    view = graph_view(loaded, colour_by, opts, None, expanded)
    return cyto.elements(view, scope), view


def graph_svg(loaded, colour_by="category", opts=DEFAULT_OPTIONS, expanded=None):
    return cyto.graph_svg(graph_view(loaded, colour_by, opts, None, expanded))


def _revision(opts):
    """Zoom and pan survive recolours and steps, not a change of what is drawn."""
    return "-%d%d%d%d" % (opts.blobs_as_nodes, opts.fold_splits, opts.fold_inplace, opts.show_ghosts)


# ------------------------------------------------------------------ details
def layer_panel(loaded, name):
    g = loaded.graph
    l = g.layer(name)
    d = pm.layer_details(g, l.index, metrics(loaded).get(l.index), states(loaded)[l.index], loaded.analysis)
    filt = None
    if l.params and l.type in ("Convolution", "Deconvolution") and len(l.params[0].shape) == 4:
        w = adapters.blob_values(loaded.net.layers[l.index].blobs[0])
        rgb = w.shape[1] == 3
        mosaic, _pages = pm.filter_mosaic(w, "rgb" if rgb else 0)
        title = "%s filters (%s)" % (name, "RGB" if rgb else "input channel 0")
        filt = figures.rgb_mosaic_figure(mosaic, title) if rgb else figures.mosaic_figure(mosaic, title,
                                                                                          diverging=True)
    return d, filt


def block_panel(loaded, block_id):
    """Details of a block: what it holds, reads and writes, its cost; None if unknown."""
    b = next((x for x in blocks(loaded) if x.id == block_id), None)
    if b is None:
        return None
    g = loaded.graph
    opened = block_id in expanded_set(loaded, loaded.cache.get("page_expanded"))

    def shaped(names):
        return ", ".join("%s %s" % (n, "×".join(str(d) for d in g.blob(n).shape)) if g.has_blob(n) else n
                         for n in names) or "—"
    flops = sum((loaded.analysis.get(g.layers[i].name) or {}).get("flops") or 0 for i in b.layers)
    mem = sum(vm.layer_memory(g.layers[i], loaded.analysis) for i in b.layers)
    m = metrics(loaded)
    ms = [m[i].time_ms for i in b.layers if i in m and m[i].time_ms is not None]
    kinds = {"name": "layers named alike", "structure": "a fork and the join of its branches",
             "stage": "a run of blocks of one stage",
             "section": "the layers before the first stage (input) or after the last (head)"}
    summary = [("found from", kinds.get(b.kind, b.kind)), ("layers", str(len(b.layers))),
               ("inside", b.parent or "—"), ("reads", shaped(b.inputs)), ("writes", shaped(b.outputs)),
               ("FLOPs", vm._fmt(float(flops)) if flops else "—"), ("memory", vm.format_bytes(mem)),
               ("time (last run)", "%.3f ms" % sum(ms) if ms else "—")]
    hint = "Expand (toolbar) or double-click the block to open it in place." if not opened else \
        "Open: Collapse (toolbar) or double-click its frame to fold it."
    return {"title": "%s (block of %d layers)" % (b.name, len(b.layers)), "summary": summary, "hint": hint,
            "layers": [g.layers[i].name for i in b.layers if not g.layers[i].is_split]}


def _blob_array(loaded, name, which):
    return adapters.blob_values(loaded.net.blobs[name], which)


def blob_panel(loaded, name):
    from engine.instruments.debug import array_stats
    from inspector.state import debugger
    from inspector.views import debug_views
    g = loaded.graph
    step = debugger.viewed_step(loaded)
    if step is not None:     # as it was after that step: its records (and pinned arrays)
        data = debugger.recorded_blob_stats(loaded, name, "data")[0]
        diff = debugger.recorded_blob_stats(loaded, name, "diff")[0]
        d = pm.blob_details(g, name, data, diff, "as recorded at " + debug_views.step_text(step, g))
        return d
    data = array_stats(_blob_array(loaded, name, "data"))
    diff = array_stats(_blob_array(loaded, name, "diff"))
    bst = blob_states(g, loaded.runlog, states(loaded))
    return pm.blob_details(g, name, data, diff, bst.get(g.blob(name).id))


def blob_figures(loaded, name, which="data", item=0, page=0, index=()):
    """(histogram, feature maps, (rows, index, full shape)) of a blob."""
    from engine.instruments.debug import array_stats
    from inspector.state import debugger
    if debugger.viewed_step(loaded) is not None:
        st, pinned = debugger.recorded_blob_stats(loaded, name, which)
        if pinned is None:
            step = debugger.viewed_step(loaded)
            hist = (figures.histogram_figure(st.hist, st.hist_lo, st.hist_hi, "%s %s histogram (step %d)"
                                             % (name, which, step.index), "#e15759" if which == "diff" else "#4e79a7")
                    if st is not None and st.hist
                    else figures.empty_figure("no record of %s at step %d" % (name, step.index)))
            note = figures.empty_figure("step %d kept statistics only: pin %s (Timeline tab) to keep its arrays"
                                        % (step.index, name))
            return hist, note, ([], (), ())
        arr = np.asarray(pinned)
    else:
        arr = _blob_array(loaded, name, which)
    if arr.size == 0:               # a batch of 0: nothing to draw or list
        note = "%s is empty (shape %s): no values" % (name, " ".join(str(d) for d in arr.shape))
        return figures.empty_figure(note), figures.empty_figure(note), ([], (), tuple(arr.shape))
    st = array_stats(arr)
    hist = figures.histogram_figure(st.hist, st.hist_lo, st.hist_hi, "%s %s histogram" % (name, which),
                                    "#e15759" if which == "diff" else "#4e79a7")
    if arr.ndim >= 2:
        mosaic, labels, n_pages = pm.feature_mosaic(arr, item, page)
        title = "%s %s, item %d, page %d/%d" % (name, which, min(max(int(item), 0), arr.shape[0] - 1),
                                               min(max(int(page), 0), n_pages - 1) + 1, n_pages)
        fmap = figures.mosaic_figure(mosaic, title, labels, diverging=(which == "diff"))
    else:
        fmap = figures.empty_figure("%s is %s: no maps to show" % (name, "a scalar" if arr.ndim == 0 else "1-D"))
    return hist, fmap, pm.value_slice(arr, index)


# ------------------------------------------------------------------ findings
def findings(loaded, transcript_filter=""):
    g = loaded.graph
    m = metrics(loaded)
    return {
        "filtered": pm.filtered_rows(g), "splits": pm.split_rows(g), "shared": pm.shared_rows(g),
        "memory": figures.memory_figure(pm.memory_rows(g, loaded.analysis)),
        "time": figures.time_figure(pm.time_rows(g, m)),
        "transcript": pm.transcript_lines(tuple(g.transcript) + tuple(_training_log(loaded)), transcript_filter),
        "debug": pm.debug_info_lines(g, loaded.recorder.steps, transcript_filter),
        "health": adapters.health_findings(loaded.recorder.steps, loaded.net),
    }


def _training_log(loaded):
    """The solver's log lines of the page's solver iterations (Caffe's
    "Iteration N ..., loss = X" ...), after the Init transcript."""
    h = getattr(loaded, "training", None)
    return list(h.log) if h is not None else []


def nan_alert(loaded):
    """The NaN/Inf alert's facts, with the root cause (a degenerate parameter upstream)
    when one explains it."""
    if loaded is None:
        return None
    first = loaded.recorder.first_nonfinite
    a = pm.nan_alert(first)
    if a is not None:
        a["root_cause"] = adapters.root_cause(loaded.net, first)
    return a

"""Glue from a session's loaded net to the pure view models and figures.

Each function takes a :class:`sessions.Loaded` (the caller holds the session
lock), gathers what the view models need (records, run states, arrays) and
returns figures or panel data.  The display graph and its layout are cached on
the Loaded per view option, so a recolour after a step costs only the view
model and the figure.
"""
import numpy as np

from engine.instruments import graph_layout
from inspector import adapters, figures
from inspector import panel_models as pm
from inspector import view_models as vm

from .run_state import blob_states, layer_states


def display_options(blob_mode="edges", options=()):
    options = set(options or ())
    return vm.DisplayOptions(blobs_as_nodes=blob_mode == "nodes", fold_splits="fold_splits" in options,
                             fold_inplace="fold_inplace" in options, show_ghosts="ghosts" in options,
                             labels="labels" in options)


def display_and_layout(loaded, opts):
    cache = loaded.cache
    key = (opts.blobs_as_nodes, opts.fold_splits, opts.fold_inplace, opts.show_ghosts)
    hit = cache.get(key)
    if hit is None:
        display = vm.display_graph(loaded.graph, opts)
        nodes, edges, widths = display.layout_input()
        hit = (display, graph_layout.cached_layout(nodes, edges, widths))
        cache[key] = hit
    return hit


def metrics(loaded):
    """Per-layer numbers of the live records, or of the timeline step being
    viewed; with a comparison active, each layer's relative difference."""
    from dataclasses import replace

    from inspector import debug_views, debugger
    m = vm.layer_metrics(loaded.graph, debugger.latest_records(loaded))
    cmp = getattr(loaded, "comparison", None)
    if cmp is not None:
        for i, v in debug_views.compare_layer_values(cmp, loaded.graph).items():
            m[i] = replace(m.get(i, vm.LayerMetric()), rel_diff=v)
    return m


def states(loaded):
    return layer_states(loaded.graph, loaded.runlog)


def graph_view(loaded, colour_by="category", opts=vm.DisplayOptions(), selection=None):
    display, layout = display_and_layout(loaded, opts)
    st = states(loaded)
    return vm.graph_view(loaded.graph, display, layout, metrics(loaded), st, colour_by, selection,
                         loaded.analysis, blob_states(loaded.graph, loaded.runlog, st), opts.labels,
                         revision=_revision(opts))


def _revision(opts):
    """Zoom and pan survive recolours and steps, not a change of what is drawn."""
    return "-%d%d%d%d" % (opts.blobs_as_nodes, opts.fold_splits, opts.fold_inplace, opts.show_ghosts)


def graph_figure(loaded, colour_by="category", opts=vm.DisplayOptions(), selection=None):
    return figures.graph_figure(graph_view(loaded, colour_by, opts, selection))


def selection_trace(loaded, opts, selection):
    display, layout = display_and_layout(loaded, opts)
    view = vm.graph_view(loaded.graph, display, layout, {}, None, "category", selection, {}, {}, opts.labels)
    return figures.selection_trace(view)


# ------------------------------------------------------------------ details
def layer_panel(loaded, name):
    g = loaded.graph
    l = g.layer(name)
    d = pm.layer_details(g, l.index, metrics(loaded).get(l.index), states(loaded)[l.index], loaded.analysis)
    filt = None
    if l.params and l.type in ("Convolution", "Deconvolution") and len(l.params[0].shape) == 4:
        w = loaded.net.layers[l.index].blobs[0].data
        rgb = w.shape[1] == 3
        mosaic, _pages = pm.filter_mosaic(w, "rgb" if rgb else 0)
        title = "%s filters (%s)" % (name, "RGB" if rgb else "input channel 0")
        filt = figures.rgb_mosaic_figure(mosaic, title) if rgb else figures.mosaic_figure(mosaic, title,
                                                                                          diverging=True)
    return d, filt


def _blob_array(loaded, name, which):
    b = loaded.net.blobs[name]
    return np.asarray(b.diff if which == "diff" else b.data)


def blob_panel(loaded, name):
    from engine.instruments.debug import array_stats
    from inspector import debug_views, debugger
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
    from inspector import debugger
    if debugger.viewed_step(loaded) is not None:
        st, pinned = debugger.recorded_blob_stats(loaded, name, which)
        if pinned is None:
            step = debugger.viewed_step(loaded)
            hist = (figures.histogram_figure(st.hist, st.hist_lo, st.hist_hi, "%s %s histogram (step %d)"
                                             % (name, which, step.index), "#e15759" if which == "diff" else "#4e79a7")
                    if st is not None and st.hist else figures.empty_figure("no record of %s at step %d" % (name, step.index)))
            note = figures.empty_figure("step %d kept statistics only: pin %s (Timeline tab) to keep its arrays"
                                        % (step.index, name))
            return hist, note, ([], (), ())
        arr = np.asarray(pinned)
    else:
        arr = _blob_array(loaded, name, which)
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
    return pm.nan_alert(loaded.recorder.first_nonfinite) if loaded is not None else None

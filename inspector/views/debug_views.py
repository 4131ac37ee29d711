"""Debugger objects → what the Timeline, Training and Compare tabs show.
Pure: rows of strings and numbers, no Dash.

- :func:`training_curves`, :func:`training_summary` (a TrainingHistory);
- :func:`timeline_rows`, :func:`timeline_memory`, :func:`step_options`,
  :func:`step_text`, :func:`diff_rows` (engine.instruments.history);
- :func:`breakpoint_rows` (engine.instruments.breakpoints);
- :func:`compare_layer_values`, :func:`compare_bars`, :func:`compare_rows`,
  :func:`compare_summary` (engine.instruments.compare.Comparison).
"""
import math

from engine.instruments import nonfinite

ACTION_NAMES = {"forward": "forward", "backward": "backward", "forward_backward": "forward + backward",
                "solver_iteration": "solver iteration"}


def _g(v, fmt="%.4g"):
    if v is None:
        return "—"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(f):
        return str(f)
    return fmt % f


# ------------------------------------------------------------------ training
def training_curves(h):
    """The series training_figure draws, from a TrainingHistory."""
    if h is None:
        return {}
    return {"loss": h.series("loss"), "smoothed": h.series("smoothed"), "lr": h.series("lr"),
            "outputs": {n: h.series(n) for n in h.output_names()},
            "test": {n: h.test_series(n) for n in h.test_names()}}


def training_summary(h):
    if h is None or not h.train:
        return "No iterations yet."
    p = h.train[-1]
    bits = ["%d iterations" % len(h.train), "last: iteration %d" % p.iteration, "loss %s" % _g(p.loss),
            "smoothed %s (average_loss %d)" % (_g(p.smoothed), h.settings.average_loss)]
    if p.lr is not None:
        bits.append("lr %s" % _g(p.lr, "%.6g"))
    for k, v in p.outputs.items():
        if k != "loss":
            bits.append("%s %s" % (k, _g(v)))
    if h.test:
        t = h.test[-1]
        bits.append("test @%d: %s" % (t.iteration, ", ".join("%s %s" % (k, _g(v)) for k, v in t.outputs.items())))
    elif h.settings.test_interval:
        bits.append("test every %d iterations (%d batches)" % (h.settings.test_interval, h.settings.test_iter))
    else:
        bits.append("no test net (the solver file sets no test_interval)")
    ms = [q.wall_ms for q in h.train[-20:]]
    bits.append("%.1f ms / iteration" % (sum(ms) / len(ms)))
    return " · ".join(bits)


# ------------------------------------------------------------------ timeline
def _step_layers(step, graph=None):
    if step.start is None or step.end is None:
        return ""
    if graph is not None and 0 <= step.start < len(graph.layers) and 0 <= step.end < len(graph.layers):
        return "%s → %s" % (graph.layers[step.start].name, graph.layers[step.end].name)
    return "%s → %s" % (step.start, step.end)


def step_text(step, graph=None):
    """One line about a timeline Step."""
    if step is None:
        return "live net"
    parts = ["step %d" % step.index, ACTION_NAMES.get(step.action, step.action)]
    if step.label:
        parts.append(step.label)
    lay = _step_layers(step, graph)
    if lay:
        parts.append(lay)
    if step.wall_time is not None:
        parts.append("%.1f ms" % (1000.0 * float(step.wall_time)))
    if step.pinned:
        parts.append("%d pinned array%s" % (len(step.pinned), "" if len(step.pinned) == 1 else "s"))
    return " · ".join(parts)


def timeline_rows(timeline, graph=None, viewing=None, limit=200):
    """Rows of the steps table (the latest ``limit``, newest first)."""
    if timeline is None:
        return []
    rows = []
    steps = list(timeline.steps)
    for st in reversed(steps[-limit:]):
        rows.append({"step": st.index, "action": ACTION_NAMES.get(st.action, st.action), "label": st.label or "",
                     "layers": _step_layers(st, graph),
                     "ms": _g(1000.0 * float(st.wall_time), "%.1f") if st.wall_time is not None else "—",
                     "pinned": ", ".join("%s.%s" % k for k in sorted(st.pinned)) if st.pinned else "",
                     "shown": "◀" if viewing is not None and st.index == viewing else ""})
    return rows


def timeline_memory(timeline):
    """Steps, the memory their records and pinned arrays take against the budget."""
    return "" if timeline is None else timeline.summary()


def step_options(timeline, graph=None):
    if timeline is None:
        return []
    return [{"label": "#%d %s" % (st.index, st.label or ACTION_NAMES.get(st.action, st.action)), "value": st.index}
            for st in timeline.steps]


def diff_rows(deltas, limit=40):
    """Rows of BlobDelta(blob, side, stat, before, after, rel_change), largest change first
    ("new" / "gone": recorded in one of the two steps only)."""
    rows = []
    for d in list(deltas)[:limit]:
        change = _g(d.rel_change, "%.3g")
        if d.before is None:
            change = "new in B"
        elif d.after is None:
            change = "not in B"
        rows.append({"blob": d.blob, "side": d.side, "stat": "array (pinned)" if d.stat == "array" else d.stat,
                     "before": _g(d.before), "after": _g(d.after), "relative change": change})
    return rows


# ------------------------------------------------------------------ non-finite sources
def nonfinite_sources(steps, net=None, last=20):
    """The distinct NaN/Inf sources (engine.instruments.nonfinite) of the latest
    ``last`` steps: one per (direction, layer, blob), the most recent kept."""
    found = {}
    for st in list(steps)[-last:]:
        for src in nonfinite.sources(st, net):
            found[(src.direction, src.layer, src.blob)] = src
    return list(found.values())


def sources_text(sources):
    """" · 3 sources of NaN/Inf: log (forward), pow (forward), … — the Findings tab explains each" or ""."""
    if len(sources) < 2:
        return ""
    names = ["%s (%s)" % (s.layer, s.direction) for s in sources[:5]]
    return " · %d sources of NaN/Inf: %s%s — the Findings tab explains each" % (
        len(sources), ", ".join(names), ", …" if len(sources) > 5 else "")


# ------------------------------------------------------------------ breakpoints
def breakpoint_rows(bps):
    if bps is None:
        return []
    out = []
    for b in bps.items:
        out.append({"id": b.id, "condition": str(b.condition), "enabled": bool(b.enabled),
                    "hits": int(getattr(b, "hit_count", 0))})
    return out


def breakpoint_options(bps):
    return [{"label": "#%s %s%s" % (r["id"], r["condition"], "" if r["enabled"] else " (off)"), "value": r["id"]}
            for r in breakpoint_rows(bps)]


# ------------------------------------------------------------------ compare
def compare_layer_values(cmp, graph):
    """{layer index: the largest relative difference of its records} for the
    graph's "relative difference" colouring (layers named in the comparison)."""
    out = {}
    if cmp is None:
        return out
    for l in cmp.layers:
        if not graph.has_layer(l.layer):
            continue
        i = graph.layer(l.layer).index
        v = l.max_rel if l.max_rel == l.max_rel else math.inf
        out[i] = max(out.get(i, 0.0), v)
    return out


def compare_bars(cmp):
    """[(label, max rel, ok)] per layer record, in order."""
    if cmp is None:
        return []
    short = {"forward": "fwd", "backward": "bwd", "update": "upd"}
    return [("%s %s" % (short.get(l.kind, l.kind), l.layer), l.max_rel, l.ok) for l in cmp.layers]


def compare_rows(cmp, only_bad=False, limit=60):
    rows = []
    if cmp is None:
        return rows
    for l in cmp.layers:
        if only_bad and l.ok:
            continue
        what = l.worst_text(cmp.label_a, cmp.label_b, _g)
        rows.append({"step": l.step, "kind": l.kind, "layer": l.layer, "type": l.type,
                     "max rel": _g(l.max_rel, "%.3g"), "verdict": "ok" if l.ok else "DIFFERS", "worst": what})
        if len(rows) >= limit:
            break
    return rows


def compare_summary(cmp):
    """(headline, notes) of a Comparison."""
    if cmp is None:
        return "", []
    fd = cmp.first_divergence
    if fd is None:
        head = "%s and %s agree within rtol %g (%d layer records compared)" % (
            cmp.label_a, cmp.label_b, cmp.rtol, len(cmp.layers))
    else:
        w = fd.worst
        detail = ("only in %s" % (cmp.label_a if fd.only_in == "a" else cmp.label_b)) if fd.only_in else \
            "%s blob '%s' %s %s = %s vs %s (rel %s > %g)" % (w.role, w.name, w.which, w.stat, _g(w.a), _g(w.b),
                                                            _g(w.rel, "%.3g"), cmp.rtol)
        head = "%s and %s part at layer '%s' (%s, %s step %d): %s" % (
            cmp.label_a, cmp.label_b, fd.layer, fd.type, fd.kind, fd.step, detail)
    return head, list(cmp.notes)


def port_findings(diagnosis):
    """A port comparison's diagnosis as the Compare tab lists it: [(where, text)], a finding
    that holds at many layers once with its count -- a summary the diagnosis has (its
    evidence names the layers) stands for those layers' own lines; other lines of one kind
    whose texts differ only in their numbers are merged."""
    import re
    covered = set()
    for d in diagnosis:
        layers = d.evidence.get("layers") if isinstance(d.evidence, dict) else None
        if layers and len(layers) > 1:
            base = d.kind[:-len("_every")] if d.kind.endswith("_every") else d.kind
            covered.update((layer, k) for layer in layers for k in (base, d.kind))
    groups, order = {}, []
    for d in diagnosis:
        summary = isinstance(d.evidence, dict) and len(d.evidence.get("layers") or ()) > 1
        if not summary and (d.layer, d.kind) in covered:
            continue
        key = (d.kind, re.sub(r"[-+]?\d[\d.]*(e[-+]?\d+)?", "#", d.text.split(" (reproduces")[0]))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(d)
    out = []
    for key in order:
        ds = groups[key]
        if len(ds) == 1:
            out.append((ds[0].layer, ds[0].text))
        else:
            names = [d.layer for d in ds]
            out.append(("%d layers (%s)" % (len(ds), ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")),
                        ds[0].text))
    return out

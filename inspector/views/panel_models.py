"""NetGraph + records + arrays → what the details and findings panels show.
Pure: rows of strings and numbers, mosaics as arrays, no Dash.

Details: :func:`layer_details`, :func:`blob_details`, :func:`ghost_details`,
:func:`feature_mosaic`, :func:`filter_mosaic`, :func:`value_slice`.
Findings: :func:`filtered_rows`, :func:`split_rows`, :func:`shared_rows`,
:func:`transcript_lines`, :func:`debug_info_lines`, :func:`memory_rows`,
:func:`time_rows`, :func:`nan_alert`.
"""
import math
from typing import Optional

import numpy as np

from engine.instruments.debug import caffe_debug_lines
from inspector.views import layer_meta

from .view_models import LayerMetric, _fmt, _shape_text, format_bytes, layer_memory


# ------------------------------------------------------------------ details
def layer_details(graph, index, metric=None, state=None, analysis=None):
    """Everything about one layer, as rows."""
    l = graph.layers[index]
    metric = metric or LayerMetric()
    meta = layer_meta.meta(l.type)
    an = (analysis or {}).get(l.name) or {}
    bottoms = []
    for j, (b, bid) in enumerate(zip(l.bottoms, l.bottom_ids)):
        blob = graph.blobs[bid]
        bottoms.append({"name": b, "shape": _shape_text(blob.shape),
                        "need_backward": l.bottom_need_backward[j] if j < len(l.bottom_need_backward) else False})
    tops = []
    for t, (b, bid) in enumerate(zip(l.tops, l.top_ids)):
        blob = graph.blobs[bid]
        tops.append({"name": b, "shape": _shape_text(blob.shape), "in_place": l.in_place[t],
                     "loss_weight": l.loss_weights[t] if t < len(l.loss_weights) else 0.0})
    params = []
    for p in l.params:
        if p.owner is not None:
            share = "shared, owned by %s param %d (%s)" % (p.owner[0], p.owner[1], p.share_mode or "STRICT")
        elif p.sharers:
            share = "owner; shared with " + ", ".join("%s param %d" % s for s in p.sharers)
        else:
            share = "own"
        params.append({"name": p.display_name, "shape": _shape_text(p.shape), "count": p.count,
                       "lr_mult": "%g" % p.lr_mult, "decay_mult": "%g" % p.decay_mult,
                       "learns": "yes" if p.propagate_down else "no", "sharing": share})
    summary = [
        ("type", l.type), ("category", layer_meta.CATEGORIES[meta.category][1]),
        ("what it does", meta.description), ("index", str(l.index)),
        ("needs backward", "yes" if l.need_backward else "no"),
        ("why", "%s — %s" % (l.backward_rule, l.backward_reason)),
        ("memory (tops + params, data + diff)", format_bytes(layer_memory(l, analysis))),
        ("Caffe's memory count (tops, in-place included)", format_bytes(l.caffe_top_count * graph.itemsize)),
    ]
    if l.is_split:
        summary.append(("inserted split of", l.split_blob))
    if state is not None:
        summary.append(("forward / backward state", "%s / %s" % state))
    if an.get("flops") is not None:
        summary.append(("FLOPs (forward, one batch)", _fmt(an["flops"])))
    if an.get("macc") is not None:
        summary.append(("MACC", _fmt(an["macc"]) + (" — " + an["formula"] if an.get("formula") else "")))
    if an.get("params"):
        summary.append(("params (owned)", "{:,}".format(int(an["params"]))))
    if metric.fwd_ms is not None:
        summary.append(("last forward time", "%.3f ms" % metric.fwd_ms))
    if metric.bwd_ms is not None:
        summary.append(("last backward time", "%.3f ms" % metric.bwd_ms))
    if metric.data is not None:
        summary.append(("mean |data| of tops", _fmt(metric.data)))
    if metric.diff is not None:
        summary.append(("bottom gradient: mean |diff| of bottoms", _fmt(metric.diff)))
    if metric.param_diff is not None:
        summary.append(("param gradient: mean |diff| of weights/biases", _fmt(metric.param_diff)))
    if metric.update_ratio is not None:
        summary.append(("update ratio |Δw|/|w| (last solver step)", _fmt(metric.update_ratio)))
    if metric.rel_diff is not None:
        summary.append(("relative difference (Compare)", _fmt(metric.rel_diff)))
    if metric.nonfinite:
        summary.append(("NaN / Inf", metric.nonfinite_where))
    settings = [{"param": field, "setting": name, "value": value, "set": "written" if is_set else "default"}
                for field, rows in l.settings for name, value, is_set in rows]
    return {"title": l.name, "summary": summary, "bottoms": bottoms, "tops": tops, "params": params,
            "settings": settings, "written": l.written}


def ghost_details(graph, name):
    for g in graph.ghosts:
        if g.name == name:
            return {"title": g.name, "summary": [
                ("type", g.type), ("filtered out by", "%s rule %d {%s}" % (g.rule_kind, g.rule_index, g.rule)),
                ("why", g.reason), ("bottoms", ", ".join(g.bottoms) or "—"),
                ("tops", ", ".join(g.tops) or "—"), ("position in the file", str(g.index))]}
    return None


def stats_rows(stats):
    """Rows of a BlobStats (or None)."""
    if stats is None:
        return []
    return [("count", str(stats.count)), ("mean |x|", _fmt(stats.asum_mean)),
            ("min", _fmt(stats.min)), ("max", _fmt(stats.max)), ("mean", _fmt(stats.mean)),
            ("std", _fmt(stats.std)), ("L2", _fmt(stats.l2)),
            ("zeros", "%.1f%%" % (100.0 * stats.frac_zero)), ("NaN", str(stats.nan)), ("Inf", str(stats.inf))]


def blob_details(graph, name, data_stats=None, diff_stats=None, state=None):
    b = graph.blob(name)
    writers = ", ".join(graph.layers[i].name for i in b.writers) or "—"
    readers = ", ".join("%s (bottom %d)" % (graph.layers[i].name, j) for i, j in b.readers) or "—"
    summary = [("shape", _shape_text(b.shape)), ("count", str(b.count)), ("bytes (data)", format_bytes(b.bytes)),
               ("written by", writers), ("read by", readers),
               ("net input", "yes" if b.is_input else "no"), ("net output", "yes" if b.is_output else "no"),
               ("needs backward", "yes" if b.need_backward else "no")]
    if b.loss_weight:
        summary.append(("loss weight", "%g" % b.loss_weight))
    if state is not None:
        summary.append(("data state", state))
    return {"title": name, "summary": summary, "data": stats_rows(data_stats), "diff": stats_rows(diff_stats)}


# ------------------------------------------------------------------ mosaics
def _grid(n):
    cols = int(math.ceil(math.sqrt(n)))
    rows = int(math.ceil(n / max(cols, 1)))
    return rows, cols


def tile(images, pad=1):
    """Tile equally-sized 2-D arrays into one with NaN gaps; returns
    (mosaic, [(x, y, index)] top-left corners)."""
    n = len(images)
    if n == 0:
        return np.zeros((0, 0)), []
    h, w = images[0].shape
    rows, cols = _grid(n)
    out = np.full((rows * (h + pad) - pad, cols * (w + pad) - pad), np.nan, dtype=np.float64)
    corners = []
    for k, im in enumerate(images):
        r, c = divmod(k, cols)
        y, x = r * (h + pad), c * (w + pad)
        out[y:y + h, x:x + w] = im
        corners.append((x, y, k))
    return out, corners


def pages(count, per_page):
    return max(1, int(math.ceil(count / float(per_page))))


def feature_mosaic(arr, item=0, page=0, per_page=36):
    """Channels of one batch item of an N x C x H x W (or N x C, N x C x L)
    array, one page of them; returns (mosaic, labels [(x, y, text)], pages)."""
    a = np.asarray(arr)
    if a.ndim == 0:
        a = a.reshape(1, 1, 1, 1)
    while a.ndim < 4:
        a = a[..., None]
    if a.ndim > 4:
        a = a.reshape(a.shape[0], a.shape[1], a.shape[2], -1)
    item = min(max(int(item), 0), a.shape[0] - 1)
    c = a.shape[1]
    if a.shape[2] == 1 and a.shape[3] == 1:    # a vector per item: show it as one image
        v = a[item, :, 0, 0].astype(np.float64)
        side = int(math.ceil(math.sqrt(c)))
        img = np.full(side * side, np.nan)
        img[:c] = v
        return img.reshape(side, side), [], 1
    n_pages = pages(c, per_page)
    page = min(max(int(page), 0), n_pages - 1)
    chans = list(range(page * per_page, min(c, (page + 1) * per_page)))
    mosaic, corners = tile([a[item, k].astype(np.float64) for k in chans])
    labels = [(x - 0.5, y - 0.5, str(chans[k])) for x, y, k in corners] if len(chans) <= 64 else []
    return mosaic, labels, n_pages


def filter_mosaic(weights, in_channel=0, page=0, per_page=64):
    """Filters of a conv weight blob (O x C x kh x kw): RGB tiles when C == 3
    and ``in_channel`` == "rgb", else one input channel; returns
    (mosaic (2-D, or H x W x 3 for RGB), pages)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 4:
        raise ValueError("filters need a 4-D weight blob, this one is %d-D" % w.ndim)
    o = w.shape[0]
    n_pages = pages(o, per_page)
    page = min(max(int(page), 0), n_pages - 1)
    idx = range(page * per_page, min(o, (page + 1) * per_page))
    if in_channel == "rgb" and w.shape[1] == 3:
        tiles = []
        for k in idx:
            f = w[k].transpose(1, 2, 0)
            lo, hi = f.min(), f.max()
            tiles.append((f - lo) / (hi - lo) if hi > lo else np.zeros_like(f))
        chans = [tile([t[:, :, ch] for t in tiles])[0] for ch in range(3)]
        return np.stack(chans, axis=2), n_pages
    ci = min(max(int(in_channel), 0), w.shape[1] - 1)
    return tile([w[k, ci] for k in idx])[0], n_pages


def value_slice(arr, index=(), max_rows=16, max_cols=16):
    """A 2-D window of ``arr`` after fixing the leading ``index``; returns
    (rows of strings, the index used, the full 2-D shape)."""
    a = np.asarray(arr)
    idx = []
    for i in index:
        if a.ndim <= 2:
            break
        i = min(max(int(i), 0), a.shape[0] - 1)
        idx.append(i)
        a = a[i]
    while a.ndim > 2:
        idx.append(0)
        a = a[0]
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim == 0:
        a = a.reshape(1, 1)
    full = a.shape
    a = a[:max_rows, :max_cols]
    rows = [["%.4g" % float(v) for v in row] for row in a]
    return rows, tuple(idx), full


# ------------------------------------------------------------------ findings
def filtered_rows(graph):
    return [{"layer": g.name, "type": g.type, "rule": "%s %d: {%s}" % (g.rule_kind, g.rule_index, g.rule),
             "why": g.reason} for g in graph.ghosts]


def split_rows(graph):
    return [{"split layer": s.name, "blob": s.blob, "producer": s.producer,
             "consumers": ", ".join("%s[%d] ← %s" % (c, j, t) if c else "loss ← %s" % t
                                    for c, j, t in s.consumers),
             "loss weight": "%g" % s.loss_weight if s.loss_weight else ""} for s in graph.splits]


def shared_rows(graph):
    return [{"layer": s.layer, "param": "%d (%s)" % (s.param_index, s.name),
             "owner": "%s param %d" % (s.owner_layer, s.owner_param_index), "mode": s.mode}
            for s in graph.shared]


def transcript_lines(transcript, text="", level=""):
    """Log lines [(level, message)] whose text contains ``text`` (case-blind)."""
    text = (text or "").lower()
    out = []
    for lvl, msg in transcript:
        if level and lvl != level:
            continue
        for line in str(msg).splitlines() or [""]:
            if not text or text in line.lower():
                out.append("%s %s" % (lvl[:1], line))
    return out


def debug_info_lines(graph, steps, text=""):
    """Caffe's debug_info lines as the engine formats them (``caffe_debug_lines``) for
    the recorded steps (those containing ``text``, case-blind, when given)."""
    lines = _debug_info_lines(graph, steps)
    text = (text or "").lower()
    return [l for l in lines if text in l.lower()] if text else lines


def _debug_info_lines(graph, steps):
    return [line for step in steps for line in caffe_debug_lines(step)]


def memory_rows(graph, analysis=None):
    """[(layer, activations, gradients, params)] in bytes allocated:
    engine.instruments.analysis's figures when present, else the graph's (new tops,
    their diffs, owned params' data and diff)."""
    rows = []
    for l in graph.layers:
        an = (analysis or {}).get(l.name) or {}
        if an.get("top_bytes") is not None:
            rows.append((l.name, int(an["top_bytes"]), int(an.get("diff_bytes") or 0),
                         int(an.get("param_bytes") or 0)))
        else:
            rows.append((l.name, l.top_bytes, l.top_bytes, 2 * l.param_bytes))
    return rows


def analysis_totals(analysis):
    """A short line of net totals from engine.instruments.analysis (None without it)."""
    t = (analysis or {}).get("__totals__")
    if not t:
        return None
    parts = []
    if t.get("params") is not None:
        parts.append("%s params" % _fmt(float(t["params"])))
    if t.get("flops") is not None:
        parts.append("%sFLOPs" % _fmt(float(t["flops"])))
    if t.get("total_allocated_bytes") is not None:
        parts.append("%s allocated" % format_bytes(t["total_allocated_bytes"]))
    return " · ".join(parts)


def time_rows(graph, metrics):
    return [(l.name, metrics.get(l.index, LayerMetric()).fwd_ms, metrics.get(l.index, LayerMetric()).bwd_ms)
            for l in graph.layers]


def nan_alert(finding) -> Optional[dict]:
    """What the NaN/Inf alert says, or None."""
    if finding is None:
        return None
    return {"layer": finding.layer, "message": finding.message, "direction": finding.direction,
            "blob": finding.blob}

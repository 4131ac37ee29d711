"""Export a run: JSON (documented schema), self-contained HTML, Markdown, CSV.

    doc = build_report(net, recorder)               # the JSON document (a dict)
    text = render(net, recorder=recorder, fmt="html")   # "json", "html", "markdown"/"md", "csv"
    write_report("run.html", net, recorder)         # format from the extension

The JSON schema is in ``docs/report-schema.md`` (``schema_version`` below).
The HTML page embeds Plotly's JavaScript once (offline, no network): the net's
graph folded into blocks as the inspector opens it, with NaN/Inf, findings and
breakpoint hits marked, and each block's inside below it (inline SVG,
:mod:`engine.instruments.folded_graph`), bar charts of FLOPs, memory and time per layer,
statistics per layer (mean |x| of the data and the gradients, NaN/Inf), the
update-to-weight ratios, the per-layer table, the findings and what Init
decided.  CSV is the per-layer table (one row per layer); Markdown holds the
summary, the table, the findings and Init's decisions.
"""
import csv
import datetime
import html
import io
import json
import math
import os

from engine.core import backend
from engine.core.layers.base import loss_weight
from engine.instruments.analysis import analyze_net, human_bytes, human_count
from engine.instruments.debug import SCHEMA_VERSION as RECORD_SCHEMA_VERSION

SCHEMA = "engine-report"
SCHEMA_VERSION = 1
FORMATS = ("json", "html", "markdown", "md", "csv")
NUMERIC_COLUMNS = (0, 5, 6, 7, 8, 10, 11, 12, 13)      # of the HTML layer table
CSV_COLUMNS = ["index", "name", "type", "bottoms", "tops", "top_shapes", "params", "macc", "flops",
               "memory_bytes", "top_diff_bytes", "param_bytes", "in_place", "need_backward", "backward_reason",
               "forward_ms", "backward_ms", "top_asum_mean", "bottom_diff_asum_mean", "nonfinite"]

UNNAMED = "(unnamed)"     # how a net without a name (NetParameter.name unset) is shown; its JSON keeps ""


def shown_name(name):
    """A net's name as the reports show it: ``name``, or "(unnamed)"."""
    return name or UNNAMED


def _clean(x):
    """JSON-safe: NaN/Inf as strings ("nan", "inf", "-inf"), tuples as lists."""
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            return _clean(x.item())
        except Exception:
            return str(x)
    return x


def _init_doc(net):
    rec = net.init_record
    filtered = []
    for d in rec.filtered:
        filtered.append({"index": d.index, "name": d.name, "type": d.type, "rule_kind": d.rule_kind,
                         "rule_index": d.rule_index, "rule": d.rule, "reason": d.reason})
    splits = []
    for s in rec.splits:
        splits.append({"name": s.name, "blob": s.blob, "producer": s.producer, "tops": list(s.tops),
                       "loss_weight": s.loss_weight, "position": s.position,
                       "consumers": [{"layer": c.layer, "bottom_index": c.bottom_index, "split_top": c.split_top}
                                     for c in s.consumers]})
    return {
        "filtered": filtered,
        "splits": splits,
        "in_place": [{"layer": l, "top_index": k, "blob": b} for (l, k, b) in rec.in_place],
        "shared": [{"net_param_id": s.net_param_id, "layer": s.layer, "param_index": s.param_index,
                    "name": s.name, "owner_layer": s.owner_layer, "owner_param_index": s.owner_param_index,
                    "mode": s.mode} for s in rec.shared],
        "backward": [{"layer": net.layer_names[i], "need": b.need, "rule": b.rule, "detail": b.detail}
                     for i, b in enumerate(rec.backward)],
        "transcript": [[lv, msg] for lv, msg in rec.transcript],
    }


def _latest(steps):
    out = {}
    for s in steps:
        for l in s.layers:
            out[(l.layer_index, l.direction)] = l
    return out


def _layer_rows(net, analysis, steps):
    latest = _latest(steps)
    rows = []
    for la in analysis.layers:
        i = la.index
        layer = net.layers[i]
        pids = net.param_id_vecs[i]
        params = []
        for k, b in enumerate(layer.blobs):
            pid = pids[k] if k < len(pids) else -1
            owner = net.param_owners[pid] if pid >= 0 else -1
            owner_name = None
            if owner >= 0:
                oli, opi = net.param_layer_indices[owner]
                owner_name = "%s/%d" % (net.layer_names[oli], opi)
            params.append({"name": net.param_display_names[pid] if pid >= 0 else str(k), "shape": list(b.shape),
                           "count": int(b.count), "owner": owner_name})
        fwd = latest.get((i, "forward"))
        bwd = latest.get((i, "backward"))
        top_asum = [b.data.asum_mean for b in fwd.blobs if b.role == "top" and b.data] if fwd else []
        bot_diff = [b.diff.asum_mean for b in bwd.blobs if b.role == "bottom" and b.propagate and b.diff] \
            if bwd else []
        inplace = set(la.inplace_tops)
        rows.append({
            "index": i, "name": la.name, "type": la.type,
            "bottoms": [{"name": n, "shape": s} for n, s in zip(la.bottoms, la.bottom_shapes)],
            "tops": [{"name": n, "shape": s, "in_place": n in inplace and n in la.bottoms}
                     for n, s in zip(la.tops, la.top_shapes)],
            "params": params,
            "params_count": la.params, "params_owned": la.params_owned,
            "macc": la.macc, "flops": la.flops, "flops_counted": la.counted, "flops_formula": la.formula,
            "memory_bytes": la.memory_bytes, "top_data_bytes": la.top_data_bytes,
            "top_diff_bytes": la.top_diff_bytes, "allocated_top_bytes": la.allocated_top_bytes,
            "inplace_bytes": la.inplace_bytes, "shared_top_bytes": la.shared_top_bytes,
            "param_data_bytes": la.param_data_bytes, "param_diff_bytes": la.param_diff_bytes,
            "shared_param_bytes": la.shared_param_bytes,
            "need_backward": la.need_backward, "backward_reason": la.backward_reason,
            "loss_weights": [float(loss_weight(layer, k)) for k in range(len(la.tops))],
            "forward_ms": fwd.time_ms if fwd else None,
            "backward_ms": bwd.time_ms if bwd else None,
            "top_asum_mean": top_asum, "bottom_diff_asum_mean": bot_diff,
            "nonfinite": bool((fwd and fwd.nonfinite) or (bwd and bwd.nonfinite)),
        })
    return rows


def build_report(net, recorder=None, steps=None, findings=None, timing=None, analysis=None, comparison=None,
                 health_config=None, meta=None, include_transcript=True, breakpoints=None, timeline=None,
                 model_label=None, port_comparison=None):
    """The report document (a JSON-ready dict; see docs/report-schema.md).

    ``breakpoints`` (engine.instruments.breakpoints.Breakpoints) and ``timeline``
    (engine.instruments.history.Timeline) add their conditions, hits and steps;
    ``model_label`` is how the model is named instead of its path (an uploaded
    file's name, not the folder it was saved in); ``port_comparison`` (an
    engine.ports.compare.PortComparison or its dict) adds the net-vs-port section."""
    from engine import __version__
    from engine.instruments import health
    if steps is None:
        steps = list(recorder.steps) if recorder is not None else []
    analysis = analysis or analyze_net(net)
    if findings is None:
        findings = health.check(steps, health_config, net=net)
        first = getattr(recorder, "first_nonfinite", None) if recorder is not None else None
        if first is not None and not any(f.check == "nonfinite" and f.layer == first.layer for f in findings):
            findings = health.findings_from_nonfinite(first) + findings
    state = net.param.state
    numbers = {s.id: k for k, s in enumerate(steps, 1)}     # steps as this report counts them: 1..n
    init = _init_doc(net)
    if not include_transcript:
        init.pop("transcript", None)
    doc = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "record_schema_version": RECORD_SCHEMA_VERSION,
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "engine_version": __version__,
        "net": {
            "name": net.name, "model_file": model_label or net.model_file,
            "phase": "TRAIN" if net.phase == 0 else "TEST", "level": int(state.level),
            "stages": list(state.stage), "dtype": str(net.dtype), "device": backend.mode(),
            "inputs": net.inputs, "outputs": net.outputs,
            "memory_used_bytes": int(net.memory_used_bytes),
            "num_layers": len(net.layers), "num_blobs": len(net.blob_names),
        },
        "layers": _layer_rows(net, analysis, steps),
        "totals": analysis.totals,
        "init": init,
        "steps": [dict(s.to_dict(), number=numbers[s.id]) for s in steps],
        "findings": [dict(f.to_dict(), step=numbers.get(f.step_id)) for f in findings],
        "first_nonfinite": recorder.first_nonfinite.to_dict()
        if recorder is not None and getattr(recorder, "first_nonfinite", None) else None,
        "timing": timing.to_dict() if hasattr(timing, "to_dict") else timing,
        "comparison": comparison.to_dict() if hasattr(comparison, "to_dict") else comparison,
        "breakpoints": None if breakpoints is None else breakpoints.to_dict(),
        "timeline": _timeline_doc(timeline, numbers),
        "port_comparison": port_comparison.to_dict() if hasattr(port_comparison, "to_dict") else port_comparison,
        "meta": dict(meta or {}),
    }
    return _clean(doc)


def _timeline_doc(tl, numbers):
    """The timeline's actions, each with the report's numbers of its records."""
    if tl is None:
        return None
    d = tl.to_dict()
    for s, st in zip(d["steps"], tl.steps):
        s["step_numbers"] = [numbers[r.id] for r in st.records if r.id in numbers]
    return d


# ---------------------------------------------------------------------- text formats
def to_json(doc, indent=1):
    return json.dumps(doc, indent=indent, allow_nan=False) + "\n"


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "%.6g" % v
    if isinstance(v, list):
        return " ".join(_cell(x) for x in v)
    return str(v)


def csv_rows(doc):
    for r in doc["layers"]:
        yield {
            "index": r["index"], "name": r["name"], "type": r["type"],
            "bottoms": " ".join(b["name"] for b in r["bottoms"]),
            "tops": " ".join(t["name"] for t in r["tops"]),
            "top_shapes": " ".join("x".join(str(d) for d in t["shape"]) or "scalar" for t in r["tops"]),
            "params": r["params_count"], "macc": r["macc"], "flops": r["flops"],
            "memory_bytes": r["memory_bytes"], "top_diff_bytes": r["top_diff_bytes"],
            "param_bytes": r["param_data_bytes"],
            "in_place": " ".join(t["name"] for t in r["tops"] if t["in_place"]),
            "need_backward": int(bool(r["need_backward"])), "backward_reason": r["backward_reason"],
            "forward_ms": _cell(r["forward_ms"]), "backward_ms": _cell(r["backward_ms"]),
            "top_asum_mean": _cell(r["top_asum_mean"]), "bottom_diff_asum_mean": _cell(r["bottom_diff_asum_mean"]),
            "nonfinite": int(bool(r["nonfinite"])),
        }


def to_csv(doc):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in csv_rows(doc):
        w.writerow(row)
    return buf.getvalue()


def _md_escape(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc):
    n, t = doc["net"], doc["totals"]
    out = ["# Net report: %s" % _md_escape(shown_name(n["name"])), ""]
    out.append("- model: `%s`; phase %s, level %d, stages [%s]; %s on %s" % (
        n.get("model_file") or "-", n["phase"], n["level"], ", ".join(n["stages"]), n["dtype"], n["device"]))
    out.append("- %d layers, %d blobs; inputs: %s; outputs: %s" % (
        n["num_layers"], n["num_blobs"], ", ".join(n["inputs"]) or "-", ", ".join(n["outputs"]) or "-"))
    out.append("- params: %s (%s with shared); MACC %s; FLOPs %s (forward, one batch)" % (
        human_count(t["params"]), human_count(t["params_all"]), human_count(t["macc"]), human_count(t["flops"])))
    out.append("- Memory required for data (Caffe): %d bytes (%s); in place %s, shared tops %s, allocated %s; "
               "params %s" % (n["memory_used_bytes"], human_bytes(n["memory_used_bytes"]),
                              human_bytes(t["inplace_bytes"]), human_bytes(t["shared_top_bytes"]),
                              human_bytes(t["allocated_top_bytes"]), human_bytes(t["param_data_bytes"])))
    out.append("- generated %s by engine %s (report schema %d)" % (doc["generated"], doc["engine_version"],
                                                                   doc["schema_version"]))
    out += ["", "## Layers", ""]
    out.append("| # | layer | type | bottoms | tops (shape) | params | MACC | FLOPs | memory | backward | "
               "fwd ms | bwd ms | top mean\\|x\\| | bottom diff mean\\|x\\| |")
    out.append("|---:|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for r in doc["layers"]:
        tops = ", ".join("%s%s (%s)" % (tp["name"], " [in place]" if tp["in_place"] else "",
                                         "x".join(str(d) for d in tp["shape"]) or "scalar") for tp in r["tops"])
        out.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["index"], _md_escape(r["name"]), r["type"], _md_escape(", ".join(b["name"] for b in r["bottoms"])),
            _md_escape(tops), human_count(r["params_count"]), human_count(r["macc"]), human_count(r["flops"]),
            human_bytes(r["memory_bytes"]), "yes" if r["need_backward"] else "no", _cell(r["forward_ms"]),
            _cell(r["backward_ms"]), _cell(r["top_asum_mean"]), _cell(r["bottom_diff_asum_mean"])))
    out += ["", "## Findings", ""]
    if doc["findings"]:
        for f in doc["findings"]:
            where = " (step %s%s)" % (f["step"], _also_in(f)) if f.get("step") else ""
            out.append("- **%s** `%s`%s %s" % (f["severity"], f["check"], where, _md_escape(f["message"])))
    else:
        out.append("No findings%s." % ("" if doc["steps"] else " (no steps recorded)"))
    out += _md_steps(doc)
    init = doc["init"]
    out += ["", "## What Init decided"]
    out += _md_list("Filtered layers", ["- `%s` (%s): %s rule %d `{%s}`: %s" % (
        d["name"], d["type"], d["rule_kind"], d["rule_index"], d["rule"], _md_escape(d["reason"]))
        for d in init["filtered"]])
    out += _md_list("Split layers", ["- `%s`: blob `%s` from `%s` to %d consumers (%s)" % (
        s["name"], s["blob"], s["producer"], len(s["tops"]), ", ".join(s["tops"])) for s in init["splits"]])
    out += _md_list("Shared params", ["- `%s` param %d (`%s`) owned by `%s` param %d (%s)" % (
        s["layer"], s["param_index"], s["name"], s["owner_layer"], s["owner_param_index"], s["mode"])
        for s in init["shared"]])
    out += ["", "### Backward", ""]
    for b in init["backward"]:
        out.append("- `%s`: %s (%s)" % (b["layer"], "needs backward" if b["need"] else "no backward",
                                         _md_escape(b["detail"])))
    if doc.get("timing"):
        tm = doc["timing"]
        out += ["", "## Timing (%d iterations, %s)" % (tm["iterations"], tm["device"]), "",
                "| layer | forward ms | backward ms |", "|---|---:|---:|"]
        for l in tm["layers"]:
            out.append("| %s | %s | %s |" % (_md_escape(l["name"]), _cell(l["forward_ms"]), _cell(l["backward_ms"])))
        out.append("")
        out.append("Average forward %s ms, backward %s ms, forward-backward %s ms." % (
            _cell(tm["forward_ms"]), _cell(tm["backward_ms"]), _cell(tm["forward_backward_ms"])))
    out += _md_port(doc.get("port_comparison"))
    out.append("")
    return "\n".join(out)


PORT_COLUMNS = ("layer", "type", "value", "shape", "port tensor", "matched", "own rel", "end-to-end rel", "status")


def port_rows(pc):
    """The port comparison's rows as table cells (PORT_COLUMNS), in the net's order."""
    rows = []
    for r in pc["rows"]:
        shape = "x".join(str(d) for d in r["shape"])
        if r.get("tensor_shape") is not None and r["tensor_shape"] != r["shape"]:
            shape += " (port %s)" % "x".join(str(d) for d in r["tensor_shape"])
        rows.append([r["layer"], r["type"], r["label"], shape, r["tensor"] or "", r["matched"] or "",
                     _cell(r["own_rel"]), _cell(r["rel"]), r["status"]])
    return rows


def _port_summary(pc):
    m = pc["matching"]
    lines = ["port `%s` against net `%s` (rtol %s): %s" % (pc["port"], pc["net"], _cell(pc["rtol"]),
                                                         "faithful" if pc["faithful"] else "departs"),
             "matched %d of %d values: %d input, %d by name, %d by topology and shape; %d not matched; "
             "%d port tensors matched to none" % (m["input"] + m["name"] + m["topology"], m["values"], m["input"],
                                                   m["name"], m["topology"], m["unmatched"],
                                                   len(pc["unmatched_tensors"])),
             pc["message"]]
    lines[1:1] = ["input layout: %s" % lay["text"] for lay in pc.get("input_layouts") or []]
    lines += ["diagnosis: %s: %s" % (d["layer"], d["text"]) for d in pc["diagnosis"]]
    lines += ["note: %s" % n for n in pc.get("notes", [])]
    return lines


def _md_port(pc):
    if not pc:
        return []
    out = ["", "## Port comparison", ""]
    out += ["- %s" % _md_escape(l) for l in _port_summary(pc)]
    out += ["", "| %s |" % " | ".join(PORT_COLUMNS), "|%s" % ("---|" * len(PORT_COLUMNS))]
    for cells in port_rows(pc):
        out.append("| %s |" % " | ".join(_md_escape(c) for c in cells))
    return out


def _md_list(title, items):
    """A titled Markdown list (the items' lines), or "None." without items."""
    return ["", "### %s" % title, ""] + (items or ["None."])


def step_rows(doc):
    """[{step, kind, layers, iteration, ms, records, nonfinite}] of the report's steps, numbered 1..n."""
    names = [r["name"] for r in doc["layers"]]
    rows = []
    for s in doc["steps"]:
        a, b = s["start"], s["end"]
        span = "%s → %s" % (names[a], names[b]) if 0 <= a < len(names) and 0 <= b < len(names) else ""
        bad = sum(1 for l in s["layers"] for x in l["blobs"] for w in ("data", "diff")
                  if x.get(w) and isinstance(x[w].get("nan"), int) and (x[w]["nan"] or x[w]["inf"]))
        rows.append({"step": s.get("number", s["id"]), "kind": s["kind"], "layers": span,
                     "iteration": "" if s.get("iteration") is None else s["iteration"],
                     "ms": _cell(s.get("wall_ms")), "records": len(s["layers"]), "nonfinite": bad})
    return rows


def timeline_rows(doc):
    """[{action, label, steps, pinned, hits}] of the timeline's actions (empty without one)."""
    tl = doc.get("timeline")
    if not tl:
        return []
    out = []
    for a in tl["steps"]:
        nums = a.get("step_numbers") or []
        out.append({"action": a["index"], "what": a["label"],
                    "steps": ", ".join(str(n) for n in nums) or "(not in this report)",
                    "pinned": ", ".join(a["pinned"]), "hits": "; ".join(h["message"] for h in a["hits"])})
    return out


def _count(n, noun):
    """"1 step", "3 steps"."""
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")


def _md_steps(doc):
    out = ["", "## Steps (%d)" % len(doc["steps"]), ""]
    rows = step_rows(doc)
    if rows:
        out.append("| step | kind | layers | iteration | ms | layer records | NaN/Inf blobs |")
        out.append("|---:|---|---|---:|---:|---:|---:|")
        for r in rows:
            out.append("| %s | %s | %s | %s | %s | %s | %s |" % (r["step"], r["kind"], _md_escape(r["layers"]),
                                                                r["iteration"], r["ms"], r["records"], r["nonfinite"]))
    else:
        out.append("No steps recorded.")
    tl = doc.get("timeline")
    if tl:
        out += ["", "## Timeline (%s; records %s, pinned arrays %s of the %s budget)" % (
            _count(len(tl["steps"]), "action"), human_bytes(tl["records_bytes"]), human_bytes(tl["pinned_bytes"]),
            human_bytes(tl["budget_bytes"])), ""]
        for r in timeline_rows(doc):
            out.append("- action %s: %s — steps %s%s%s" % (r["action"], _md_escape(r["what"]), r["steps"],
                                                         "; pinned " + r["pinned"] if r["pinned"] else "",
                                                         "; **%s**" % _md_escape(r["hits"]) if r["hits"] else ""))
    bp = doc.get("breakpoints")
    if bp:
        out += ["", "## Breakpoints", ""]
        for b in bp["breakpoints"]:
            out.append("- #%d `%s` (%s): %d hit%s" % (b["id"], _md_escape(b["condition"]),
                                                      "enabled" if b["enabled"] else "disabled", b["hits"],
                                                      "" if b["hits"] == 1 else "s"))
        for h in bp["hits"]:
            out.append("- hit: `%s` (%s%s)" % (_md_escape(h["message"]), h["direction"],
                                               ", iteration %s" % h["iteration"] if h.get("iteration") is not None
                                               else ""))
    return out


def _html_table(rows, cols, e):
    parts = ["<table><tr>%s</tr>" % "".join("<th>%s</th>" % e(c) for c in cols)]
    for r in rows:
        parts.append("<tr>%s</tr>" % "".join("<td>%s</td>" % e(str(r[c])) for c in cols))
    parts.append("</table>")
    return "".join(parts)


def _html_steps(doc, e):
    parts = ["<h2 id='steps'>Steps (%d)</h2>" % len(doc["steps"])]
    rows = step_rows(doc)
    parts.append(_html_table(rows, ["step", "kind", "layers", "iteration", "ms", "records", "nonfinite"], e)
                 if rows else "<p>No steps recorded.</p>")
    tl = doc.get("timeline")
    if tl:
        parts.append("<h2 id='timeline'>Timeline</h2><p>%s; records %s, pinned arrays %s of the %s "
                     "budget%s.</p>" % (_count(len(tl["steps"]), "action"), human_bytes(tl["records_bytes"]),
                                        human_bytes(tl["pinned_bytes"]), human_bytes(tl["budget_bytes"]),
                                        "; pinned: " + e(", ".join(tl["pins"])) if tl["pins"] else ""))
        parts.append(_html_table(timeline_rows(doc), ["action", "what", "steps", "pinned", "hits"], e))
    bp = doc.get("breakpoints")
    if bp:
        parts.append("<h2 id='breakpoints'>Breakpoints</h2>")
        parts.append(_html_table([{"#": b["id"], "condition": b["condition"],
                                   "enabled": "yes" if b["enabled"] else "no", "hits": b["hits"]}
                                  for b in bp["breakpoints"]], ["#", "condition", "enabled", "hits"], e))
        if bp["hits"]:
            parts.append(_html_table([{"hit": h["message"], "direction": h["direction"], "blob": h.get("blob") or "",
                                       "value": _cell(h.get("value")), "iteration": "" if h.get("iteration") is None
                                       else h["iteration"]} for h in bp["hits"]],
                                     ["hit", "direction", "blob", "value", "iteration"], e))
    return "\n".join(parts)


# ---------------------------------------------------------------------- HTML
# ---------------------------------------------------------------------- the net's graph, folded
_SEVERITY = {"error": 3, "warning": 2, "warn": 2, "info": 1}


class _GraphFacts:
    """What the report's graph marks per layer: NaN/Inf, the worst finding, breakpoint
    hits, the category, top shapes and mean |data|, from the report document."""

    def __init__(self, net, doc):
        self.rows = {r["index"]: r for r in doc["layers"]}
        self.types = [l.type for l in net.layers]
        self.categories = [getattr(l, "category", "other") for l in net.layers]
        self.names = list(net.layer_names)
        self.worst = {}
        for f in doc["findings"]:
            rank = _SEVERITY.get(str(f.get("severity", "")).lower(), 0)
            if f.get("layer") and rank > self.worst.get(f["layer"], (0, ""))[0]:
                self.worst[f["layer"]] = (rank, "%s: %s" % (f["severity"], f["message"]))
        from engine.instruments.blocks import net_layers
        from engine.instruments.folded_graph import split_sources
        self.copied = split_sources(net_layers(net))
        hits = (doc.get("breakpoints") or {}).get("hits") or []
        self.hits = {h["layer"]: h["message"] for h in hits if h.get("layer")}

    def worst_in(self, idx):
        best = None
        for i in idx:
            w = self.worst.get(self.names[i])
            if w and (best is None or w[0] > best[1][0]):
                best = (self.names[i], w)
        return best

    def style(self, fg):
        from engine.instruments import folded_graph as F

        def style(n):
            if n.kind == "input":
                return F.NodeStyle(F.INPUT_FILL, "#999999", tooltip="blob %s (from outside)" % n.name)
            bad = [self.names[i] for i in n.layers if self.rows.get(i, {}).get("nonfinite")]
            worst = self.worst_in(n.layers)
            hit = next((self.hits[self.names[i]] for i in n.layers if self.names[i] in self.hits), None)
            line, width = ("#d62728", 3.0) if bad else ("#ff7f0e", 2.5) if worst and worst[1][0] >= 2 else \
                ("#6b7a90" if n.kind == "block" else "#555555", 1.0)
            tip = self._tooltip(fg, n, bad, worst, hit)
            if n.kind == "block":
                return F.NodeStyle(F.BLOCK_FILL, line, max(width, 1.5), self._block_extra(fg, n, bad, worst), tip,
                                   hit is not None)
            return F.NodeStyle(F.CATEGORY_COLOURS.get(self.categories[n.layers[0]], F.CATEGORY_COLOURS["other"]),
                               line, width, "", tip, hit is not None)
        return style

    def _block_extra(self, fg, n, bad, worst):
        b = fg.blocks[n.name]
        last = self.rows.get(b.layers[-1], {})
        shape = next((t["shape"] for t in last.get("tops", ()) if b.outputs and t["name"] == b.outputs[-1]), None)
        text = "x".join(str(d) for d in shape) if shape else ""
        if bad:
            text += " ⚠ NaN"
        elif worst and worst[1][0] >= 2:
            text += " ⚠"
        return text.strip()

    def _tooltip(self, fg, n, bad, worst, hit):
        if n.kind == "block":
            b = fg.blocks[n.name]
            copied = self.copied
            lines = ["%s: block of %d layers (%s)" % (b.name, len(b.layers), b.kind),
                     "in: %s" % (", ".join(dict.fromkeys(copied.get(x, x) for x in b.inputs)) or "-"),
                     "out: %s" % (", ".join(dict.fromkeys(copied.get(x, x) for x in b.outputs)) or "-")]
        else:
            i = n.layers[0]
            r = self.rows.get(i, {})
            lines = ["%s (%s)" % (self.names[i], self.types[i])]
            lines += ["top %s %s" % (t["name"], "x".join(str(d) for d in t["shape"])) for t in r.get("tops", ())]
            if r.get("top_asum_mean"):
                lines.append("mean |data| %s" % _cell(r["top_asum_mean"]))
        if bad:
            lines.append("NaN/Inf first in %s" % bad[0])
        if worst:
            lines.append("%s (in %s)" % (worst[1][1], worst[0]))
        if hit:
            lines.append(hit)
        return "\n".join(lines)


def _graph_html(net, doc, e):
    """The net's graph folded into blocks as the inspector opens it (inline SVG), and
    each block's inside in a section of its own."""
    from engine.instruments import blocks as B
    from engine.instruments import folded_graph as F
    layers = B.net_layers(net)
    blks = B.with_sections(layers, B.find_blocks(layers))
    facts = _GraphFacts(net, doc)
    copied = F.split_sources(layers)

    def blobs(names):
        return ", ".join(dict.fromkeys(copied.get(n, n) for n in names)) or "-"
    fg = F.folded_graph(layers, blks, title="%s (%s)" % (shown_name(net.name), doc["net"]["phase"]))
    folded = [n for n in fg.nodes if n.kind == "block"]
    parts = ["<h2 id='graph'>Net graph</h2>"]
    if blks:
        parts.append("<p>%d layers in %d blocks (found from the names and the structure, as the inspector folds "
                     "them); %d shown folded: each is one node (its output shape, ⚠ for NaN/Inf or a warning "
                     "inside); open one below. Red outline: NaN/Inf, orange: a finding, ▶: a breakpoint hit; "
                     "hover for details.</p>" % (len(net.layers), len(blks), len(folded)))
    parts.append("<div class='graph'>%s</div>" % F.to_svg(fg, facts.style(fg)))
    if blks:
        parts.append("<h2 id='blocks'>Blocks</h2>")
        for b in sorted(blks, key=lambda b: b.layers[0]):
            inner = F.block_view(layers, blks, b.id)
            bad = any(doc["layers"][i]["nonfinite"] for i in b.layers if i < len(doc["layers"]))
            worst = facts.worst_in(b.layers)
            flag = " ⚠ NaN/Inf" if bad else (" ⚠ %s" % worst[1][1].split(":", 1)[0]) if worst else ""
            parts.append("<details id='block-%s'><summary><b>%s</b> · %d layers%s%s — in: %s; out: %s</summary>"
                         % (e(b.id), e(b.name), len(b.layers), " (inside %s)" % e(b.parent) if b.parent else "",
                            e(flag), e(blobs(b.inputs)), e(blobs(b.outputs))))
            parts.append("<div class='graph'>%s</div></details>" % F.to_svg(inner, facts.style(inner)))
    return "\n".join(parts)


def _figures(net, doc):
    """[(title, plotly Figure)] for the HTML page."""
    rows = doc["layers"]
    names = ["%d %s" % (r["index"], r["name"]) for r in rows]
    figs = _layer_figures(names, rows, doc.get("timing"))
    steps = doc["steps"]
    fwd = [s for s in steps if s["kind"] == "forward"]
    bwd = [s for s in steps if s["kind"] == "backward"]
    if fwd or bwd:
        figs.append(("Statistics", _statistics_figure(fwd[-1] if fwd else None, bwd[-1] if bwd else None)))
        fig = _nonfinite_figure(steps)
        if fig is not None:
            figs.append(("Non-finite values", fig))
    upd = [s for s in steps if s["kind"] == "update"]
    if upd:
        figs.append(("Updates", _update_figure(upd)))
    return figs


def _bar(names, title, ys, ytitle):
    import plotly.graph_objects as go
    fig = go.Figure(go.Bar(x=names, y=ys, marker_color="#4e79a7"))
    fig.update_layout(title=title, yaxis_title=ytitle, height=380, margin=dict(l=60, r=20, t=40, b=120))
    return fig


def _time_bars(xs, fwd_ms, bwd_ms, title):
    import plotly.graph_objects as go
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=fwd_ms, name="forward"))
    fig.add_trace(go.Bar(x=xs, y=bwd_ms, name="backward"))
    fig.update_layout(title=title, barmode="group", height=380, margin=dict(l=60, r=20, t=40, b=120))
    return fig


def _layer_figures(names, rows, tm):
    """FLOPs, memory, the recorded times per layer, and caffe time's averages (``tm``)."""
    figs = [("FLOPs per layer", _bar(names, "FLOPs per layer (forward)", [r["flops"] for r in rows], "FLOPs")),
            ("Memory per layer", _bar(names, "Top data per layer (Caffe's count)", [r["memory_bytes"] for r in rows],
                                      "bytes"))]
    if any(r["forward_ms"] is not None for r in rows):
        figs.append(("Time per layer", _time_bars(names, [r["forward_ms"] or 0 for r in rows],
                                                  [r["backward_ms"] or 0 for r in rows],
                                                  "Time per layer (last recorded step, ms)")))
    if tm:
        figs.append(("Benchmark", _time_bars([l["name"] for l in tm["layers"]], [l["forward_ms"] for l in tm["layers"]],
                                             [l["backward_ms"] for l in tm["layers"]],
                                             "caffe time: average per layer over %d iterations (ms)"
                                             % tm["iterations"])))
    return figs


def _positive(v):
    return v if isinstance(v, (int, float)) and v > 0 else None


def _mean_abs_trace(layers, role, which, name):
    """A line of mean |x| of ``which`` (data or diff) of the ``role`` blobs, layer after layer."""
    import plotly.graph_objects as go
    xs, ys, hover = [], [], []
    for l in layers:
        for b in l["blobs"]:
            if b["role"] == role and (role == "top" or b.get("propagate")) and b[which]:
                xs.append("%d %s" % (l["layer_index"], l["layer"]))
                ys.append(_positive(b[which]["asum_mean"]))
                hover.append("%s: %s" % (b["name"], b[which]["asum_mean"]))
    return go.Scatter(x=xs, y=ys, mode="lines+markers", name=name, hovertext=hover)


def _statistics_figure(fwd, bwd):
    """Mean |x| of the tops of the last forward step and of the bottom diffs of the last backward step."""
    import plotly.graph_objects as go
    fig = go.Figure()
    if fwd:
        fig.add_trace(_mean_abs_trace(fwd["layers"], "top", "data", "top data mean |x|"))
    if bwd:
        fig.add_trace(_mean_abs_trace(reversed(bwd["layers"]), "bottom", "diff", "bottom diff mean |x|"))
    fig.update_yaxes(type="log")
    fig.update_layout(title="Blob statistics (last forward / backward step): mean |x|, log scale", height=420,
                      margin=dict(l=60, r=20, t=40, b=120))
    return fig


def _nonfinite_figure(steps):
    """NaN + Inf counts per layer record (None when every value is finite)."""
    import plotly.graph_objects as go
    xs, nans = [], []
    for s in steps:
        for l in s["layers"]:
            k = 0
            for b in l["blobs"]:
                for which in ("data", "diff"):
                    st = b.get(which)
                    if st and isinstance(st.get("nan"), int):
                        k += st["nan"] + st["inf"]
            if k:
                xs.append("step %s %s %s" % (s.get("number", s["id"]), s["kind"], l["layer"]))
                nans.append(k)
    if not xs:
        return None
    fig = go.Figure(go.Bar(x=xs, y=nans, marker_color="#e15759"))
    fig.update_layout(title="Non-finite values (NaN + Inf) per layer record", height=380,
                      margin=dict(l=60, r=20, t=40, b=160))
    return fig


def _update_figure(upd):
    """The update-to-weight ratio of each param over the update steps."""
    import plotly.graph_objects as go
    fig = go.Figure()
    series = {}
    for s in upd:
        for l in s["layers"]:
            for b in l["blobs"]:
                r = b.get("ratio")
                if isinstance(r, (int, float)) and r > 0:
                    series.setdefault("%s/%s" % (l["layer"], b["name"]), []).append(
                        (s["iteration"] if s["iteration"] is not None else s.get("number", s["id"]), r))
    for k, pts in series.items():
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=k))
    fig.add_hrect(y0=1e-4, y1=1e-2, fillcolor="#59a14f", opacity=0.08, line_width=0)
    fig.update_yaxes(type="log")
    fig.update_layout(title="Update-to-weight ratio |Δw|/|w| per param", xaxis_title="iteration", height=420,
                      margin=dict(l=60, r=20, t=40, b=40))
    return fig


_CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:20px;color:#222}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fde2e2} .error{color:#b00020;font-weight:bold} .warning{color:#a65c00}
.summary li{margin:2px 0} h2{margin-top:28px;border-bottom:1px solid #ddd}
code{background:#f6f6f6;padding:0 3px}
div.graph{overflow:auto;max-height:900px;border:1px solid #e3e3e3;margin:6px 0}
div.graph svg{display:block} details{margin:3px 0} summary{cursor:pointer}
"""


def to_html(doc, net=None, figures=True):
    """A self-contained HTML page (Plotly's JS inline, once)."""
    e = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
             "<title>Net report: %s</title>" % e(shown_name(doc["net"]["name"])), "<style>%s</style>" % _CSS]
    if figures and net is not None:
        import plotly.offline
        parts.append('<script type="text/javascript">%s</script>' % plotly.offline.get_plotlyjs())
    parts.append("</head><body>")
    parts += _html_summary(doc, e)
    parts += _html_findings(doc, e)
    parts.append(_html_steps(doc, e))
    if net is not None:
        parts.append(_graph_html(net, doc, e))
    if figures and net is not None:
        for k, (title, fig) in enumerate(_figures(net, doc)):
            parts.append("<h2>%s</h2>" % e(title))
            parts.append(fig.to_html(include_plotlyjs=False, full_html=False, div_id="fig%d" % k))
    parts += _html_port(doc.get("port_comparison"), e)
    parts += _html_layers(doc, e)
    parts += _html_init(doc["init"], e)
    if doc.get("timing"):
        tm = doc["timing"]
        parts.append("<h2 id='timing'>Timing</h2><p>%d iterations on %s: forward %s ms, backward %s ms, "
                     "forward-backward %s ms.</p>" % (tm["iterations"], e(tm["device"]), _cell(tm["forward_ms"]),
                                                       _cell(tm["backward_ms"]), _cell(tm["forward_backward_ms"])))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _html_summary(doc, e):
    n, t = doc["net"], doc["totals"]
    parts = ["<h1>Net report: %s</h1>" % e(shown_name(n["name"])), "<ul class='summary'>"]
    parts.append("<li>model <code>%s</code>; phase %s, level %d, stages [%s]; %s on %s</li>" % (
        e(str(n.get("model_file") or "-")), n["phase"], n["level"], e(", ".join(n["stages"])), n["dtype"], n["device"]))
    parts.append("<li>%d layers, %d blobs; inputs %s; outputs %s</li>" % (
        n["num_layers"], n["num_blobs"], e(", ".join(n["inputs"]) or "-"), e(", ".join(n["outputs"]) or "-")))
    parts.append("<li>params %s (%s with shared); MACC %s; FLOPs %s (forward, one batch)</li>" % (
        human_count(t["params"]), human_count(t["params_all"]), human_count(t["macc"]), human_count(t["flops"])))
    parts.append("<li>Memory required for data (Caffe's count): %d bytes (%s): allocated %s, in place %s, "
                 "shared with a bottom %s; params %s</li>" % (
                     n["memory_used_bytes"], human_bytes(n["memory_used_bytes"]), human_bytes(t["allocated_top_bytes"]),
                     human_bytes(t["inplace_bytes"]), human_bytes(t["shared_top_bytes"]),
                     human_bytes(t["param_data_bytes"])))
    parts.append("<li>%s recorded; %s</li>" % (_count(len(doc["steps"]), "step"),
                                                _count(len(doc["findings"]), "finding")))
    parts.append("<li>generated %s by engine %s (report schema %d)</li></ul>" % (
        e(doc["generated"]), e(doc["engine_version"]), doc["schema_version"]))
    return parts


def _html_port(pc, e):
    """The net-vs-port section: summary, first departing layer, diagnosis, the per-value table."""
    if not pc:
        return []
    parts = ["<h2 id='port-comparison'>Port comparison</h2>", "<ul class='summary'>"]
    parts += ["<li>%s</li>" % e(l) for l in _port_summary(pc)]
    parts.append("</ul><table id='port-table'><tr>%s</tr>" % "".join("<th>%s</th>" % e(c) for c in PORT_COLUMNS))
    first = pc.get("first_departing_label")
    for r, cells in zip(pc["rows"], port_rows(pc)):
        bad = r["status"] in ("departs", "shape") or r["label"] == first
        parts.append("<tr%s>%s</tr>" % (" class='bad'" if bad else "", "".join(
            "<td%s>%s</td>" % (" class='num'" if k in (6, 7) else "", e(str(c))) for k, c in enumerate(cells))))
    parts.append("</table>")
    return parts


def _also_in(f):
    """", found in N steps" for a finding that several steps found (the step shown is the latest)."""
    n = f.get("steps") or 1
    return "; found in %d steps" % n if n > 1 else ""


def _html_findings(doc, e):
    parts = ["<h2 id='findings'>Findings</h2>"]
    if not doc["findings"]:
        parts.append("<p>No findings%s.</p>" % ("" if doc["steps"] else " (no steps recorded)"))
        return parts
    parts.append("<table><tr><th>severity</th><th>check</th><th>step</th><th>layer</th><th>blob</th>"
                 "<th>message</th></tr>")
    for f in doc["findings"]:
        step = "%s%s" % (f.get("step") or "", _also_in(f))
        parts.append("<tr><td class='%s'>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
            e(f["severity"]), e(f["severity"]), e(f["check"]), e(step), e(f["layer"]),
            e(str(f["blob"] or "")), e(f["message"])))
    parts.append("</table>")
    return parts


def _html_layers(doc, e):
    parts = ["<h2 id='layers'>Layers</h2>"]
    cols = ["#", "layer", "type", "bottoms", "tops (shape)", "params", "MACC", "FLOPs", "memory", "backward",
            "fwd ms", "bwd ms", "top mean |x|", "bottom diff mean |x|"]
    parts.append("<table id='layer-table'><tr>%s</tr>" % "".join("<th>%s</th>" % e(c) for c in cols))
    for r in doc["layers"]:
        tops = "<br>".join("%s%s <span>(%s)</span>" % (e(tp["name"]), " [in place]" if tp["in_place"] else "",
                                                       "x".join(str(d) for d in tp["shape"]) or "scalar")
                           for tp in r["tops"])
        cells = [str(r["index"]), e(r["name"]), e(r["type"]), e(", ".join(b["name"] for b in r["bottoms"])), tops,
                 human_count(r["params_count"]), human_count(r["macc"]), human_count(r["flops"]),
                 human_bytes(r["memory_bytes"]),
                 ("yes" if r["need_backward"] else "no") + "<br><small>%s</small>" % e(r["backward_reason"]),
                 e(_cell(r["forward_ms"])), e(_cell(r["backward_ms"])), e(_cell(r["top_asum_mean"])),
                 e(_cell(r["bottom_diff_asum_mean"]))]
        parts.append("<tr%s>%s</tr>" % (" class='bad'" if r["nonfinite"] else "",
                                        "".join("<td%s>%s</td>" % (" class='num'" if k in NUMERIC_COLUMNS else "", c)
                                                for k, c in enumerate(cells))))
    parts.append("</table>")
    return parts


def _html_init(init, e):
    """What Init decided: the filtered layers, the inserted splits, the shared params."""
    parts = ["<h2 id='init'>What Init decided</h2>"]
    parts += _html_init_table("Filtered layers", ("layer", "type", "rule", "reason"), [
        "<td>%s</td><td>%s</td><td>%s %d {%s}</td><td>%s</td>" % (
            e(d["name"]), e(d["type"]), e(d["rule_kind"]), d["rule_index"], e(d["rule"]), e(d["reason"]))
        for d in init["filtered"]])
    parts += _html_init_table("Split layers", ("split", "blob", "producer", "tops"), [
        "<td>%s</td><td>%s</td><td>%s</td><td>%s</td>" % (
            e(s["name"]), e(s["blob"]), e(s["producer"]), e(", ".join(s["tops"])))
        for s in init["splits"]])
    parts += _html_init_table("Shared params", ("layer", "param", "name", "owner", "mode"), [
        "<td>%s</td><td>%d</td><td>%s</td><td>%s param %d</td><td>%s</td>" % (
            e(s["layer"]), s["param_index"], e(s["name"]), e(s["owner_layer"]), s["owner_param_index"], e(s["mode"]))
        for s in init["shared"]])
    return parts


def _html_init_table(title, cols, cells):
    """A titled table of rows (``cells``: each row's <td>s), or "None." without rows."""
    parts = ["<h3>%s</h3>" % title]
    if not cells:
        parts.append("<p>None.</p>")
        return parts
    parts.append("<table><tr>%s</tr>" % "".join("<th>%s</th>" % c for c in cols))
    parts += ["<tr>%s</tr>" % c for c in cells]
    parts.append("</table>")
    return parts


# ---------------------------------------------------------------------- entry points
def _fmt(fmt):
    fmt = (fmt or "json").lower()
    if fmt == "md":
        fmt = "markdown"
    if fmt == "htm":
        fmt = "html"
    if fmt not in ("json", "html", "markdown", "csv"):
        raise ValueError("report format must be one of json, html, markdown (md), csv (got %r)" % fmt)
    return fmt


def render(net, recorder=None, fmt="json", **kwargs):
    """The report as text in ``fmt`` ("json", "html", "markdown"/"md", "csv");
    ``kwargs`` go to :func:`build_report`."""
    fmt = _fmt(fmt)
    doc = build_report(net, recorder, **kwargs)
    if fmt == "json":
        return to_json(doc)
    if fmt == "csv":
        return to_csv(doc)
    if fmt == "markdown":
        return to_markdown(doc)
    return to_html(doc, net)


def format_from_path(path):
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    return {"json": "json", "html": "html", "htm": "html", "md": "markdown", "markdown": "markdown",
            "csv": "csv"}.get(ext, "json")


def write_report(path, net, recorder=None, fmt=None, **kwargs):
    text = render(net, recorder, fmt or format_from_path(path), **kwargs)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path

"""GraphView → the elements and stylesheet of the dash-cytoscape graph, and
the graph as an SVG file.  Pure functions: no Dash, no engine, no state.

Positions come from our own layered layout (``preset``): layout x units and
ranks are scaled to pixels here.  Expanded blocks are compound nodes (their
members name them as ``parent``); a folded block is one node.  The selection
is not part of the elements: the page marks it client-side
(``assets/graph.js``), so a click costs no redraw.
"""
import html
import math
import re

from .run_state import FRESH, STALE

XPX = 7.0          # pixels per layout x unit (about one label character)
YPX = 62.0         # pixels per rank
CHAR_PX = 6.6      # width of a label character at the node font
NODE_H = {"layer": 26, "block": 42, "ghost": 24, "blob": 20, "output": 20}
FONT = "Inter, Segoe UI, Helvetica, Arial, sans-serif"
EDGE_COLOURS = {FRESH: "#4d4d4d", STALE: "#ff7f0e"}
EDGE_IDLE = "#a8a8a8"
_TAG = re.compile(r"<[^>]+>")


def hover_lines(text):
    """Plain text lines of a view model's hover text (which marks bold with
    <b> and breaks with <br>): the page shows them with textContent, never as HTML."""
    return [html.unescape(_TAG.sub("", part)) for part in (text or "").split("<br>")]


def text_colour(fill):
    """Black or white, whichever reads better on ``fill`` (#rrggbb)."""
    try:
        r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    except (TypeError, ValueError):
        return "#1a1a1a"
    lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#1a1a1a" if lum > 140 else "#ffffff"


def node_size(node):
    """(width, height) in pixels of a drawn node."""
    chars = max(len(line) for line in node.label.split("\n")) if node.label else 1
    return chars * CHAR_PX + 16.0, float(NODE_H.get(node.kind, 24))


def node_label(node):
    return ("▶ " + node.label) if node.mark == "stopped" else node.label


def centre(node):
    """The pixel centre of a (non-frame) node: layout x is its left edge."""
    w, _h = node_size(node)
    return node.x * XPX + w / 2.0, -node.y * YPX


def _node_element(node):
    w, h = node_size(node)
    cx, cy = centre(node)
    data = {"id": node.id, "kind": node.kind, "name": node.name, "label": node_label(node),
            "fill": node.fill, "fg": text_colour(node.fill), "line": node.line, "lw": node.line_width,
            "w": round(w, 1), "h": h, "hover": hover_lines(node.hover)}
    if node.members:
        data["members"] = "|" + "|".join(node.members) + "|"
    if node.inner:
        data["inner"] = "|" + "|".join(node.inner) + "|"      # a folded block: the blocks inside it
    data["short"] = node.short or node.name   # its name, shown zoomed out (assets/graph.js)
    if node.parent:
        data["frame"] = node.parent         # the frame drawn around it (a plain node: see _frame_element)
    classes = [node.kind]
    if node.state in (FRESH, STALE):
        classes.append(node.state)
    if node.mark:
        classes.append(node.mark)
    if node.flag:
        classes.append(node.flag)           # "cause" / "symptom": a finding's cause, what follows from it
    return {"data": data, "position": {"x": round(cx, 1), "y": round(cy, 1)}, "classes": " ".join(classes)}


FRAME_PAD = 12.0    # pixels between a block's frame and what it holds
FRAME_TOP = 6.0     # and above it (the frame's name is drawn above the frame)


def _frame_element(node, box, depth):
    """A block's frame: a plain node behind its members (not a cytoscape compound
    node: those are restyled with everything inside them), sized to ``box``."""
    x0, y0, x1, y1 = box
    data = {"id": node.id, "kind": "group", "name": node.name, "label": node.label, "fill": node.fill,
            "hover": hover_lines(node.hover), "w": round(x1 - x0, 1), "h": round(y1 - y0, 1), "z": depth,
            "short": node.short or node.label}
    if node.parent:
        data["frame"] = node.parent
    else:
        data["outer"] = 1                   # an outermost frame: zoomed out, its summary beside it
    return {"data": data, "position": {"x": round((x0 + x1) / 2, 1), "y": round((y0 + y1) / 2, 1)},
            "classes": "group" + (" " + node.flag if node.flag else "")}


def frame_boxes(view):
    """{frame id: (x0, y0, x1, y1)} in pixels: each expanded block's frame around its
    members' boxes (and the frames inside it), with FRAME_PAD around them."""
    frames = {n.id: n for n in view.nodes if n.kind == "group"}
    children = {}
    for n in view.nodes:
        if n.parent:
            children.setdefault(n.parent, []).append(n)
    boxes = {}

    def box(fid):
        if fid in boxes:
            return boxes[fid]
        parts = []
        for c in children.get(fid, ()):
            if c.kind == "group":
                parts.append(box(c.id))
            else:
                (cx, cy), (w, h) = centre(c), node_size(c)
                parts.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        parts = [p for p in parts if p is not None]
        if not parts:
            boxes[fid] = None
            return None
        b = (min(p[0] for p in parts) - FRAME_PAD, min(p[1] for p in parts) - FRAME_PAD - FRAME_TOP,
             max(p[2] for p in parts) + FRAME_PAD, max(p[3] for p in parts) + FRAME_PAD)
        boxes[fid] = b
        return b
    for fid in frames:
        box(fid)
    return {k: v for k, v in boxes.items() if v is not None}


def _segments(points, src, dst):
    """Cytoscape's segment-distances / segment-weights for the interior points of a polyline."""
    (sx, sy), (tx, ty) = src, dst
    dx, dy = tx - sx, ty - sy
    length2 = dx * dx + dy * dy
    if length2 <= 1e-9:
        return None
    length = math.sqrt(length2)
    dists, weights = [], []
    for px, py in points:
        w = ((px - sx) * dx + (py - sy) * dy) / length2
        d = (dx * (py - sy) - dy * (px - sx)) / length
        if w <= 0.02 or w >= 0.98:
            continue
        dists.append(round(d, 1))
        weights.append(round(w, 3))
    if not dists or max(abs(d) for d in dists) < 4.0:
        return None
    return " ".join(str(d) for d in dists), " ".join(str(w) for w in weights)


def elements(view, scope=""):
    """The cytoscape elements of a GraphView: frames first (outer before inner), then nodes, edges.
    ``scope`` (a net's own token) prefixes every element id: the page patches an element that
    keeps its id (dash-cytoscape merges the new data into the old, so a key the new element
    lacks keeps the old value), and a new net must share no element with the one before it."""
    frames = {n.id: n for n in view.nodes if n.kind == "group"}
    depth = {}

    def frame_depth(fid):
        if fid not in depth:
            parent = frames[fid].parent
            depth[fid] = 0 if parent not in frames else frame_depth(parent) + 1
        return depth[fid]
    boxes = frame_boxes(view)
    out = [_frame_element(frames[f], boxes[f], frame_depth(f)) for f in sorted(frames, key=frame_depth)
           if f in boxes]
    centres = {}
    for n in view.nodes:
        if n.kind == "group":
            continue
        el = _node_element(n)
        centres[n.id] = (el["position"]["x"], el["position"]["y"])
        out.append(el)
    labelled, seen_ids = set(), set()
    for k, e in enumerate(view.edges):
        if e.src not in centres or e.dst not in centres:
            continue
        state = e.state if e.state in (FRESH, STALE) else "idle"
        eid = "E:%s>%s:%s" % (e.src, e.dst, e.blob)      # stable across redraws (folding, options)
        if eid in seen_ids:
            eid += "#%d" % k
        seen_ids.add(eid)
        data = {"id": eid, "source": e.src, "target": e.dst, "blob": e.blob,
                "colour": EDGE_COLOURS.get(e.state, EDGE_IDLE), "hover": hover_lines(e.hover)}
        data["label"] = data["src_label"] = data["mid_label"] = data["lp"] = ""     # every key, always (scoped())
        if view.labels and e.label and (e.src, e.label) not in labelled:
            labelled.add((e.src, e.label))       # a blob read by several layers: its label once, at its writer
            data["label"] = e.label
        classes = [e.kind, state]
        inner = [(x * XPX + 8.0, -y * YPX) for x, y in e.points[1:-1]]
        seg = _segments(inner, centres[e.src], centres[e.dst]) if inner else None
        if seg is not None:
            data["sd"], data["sw"] = seg
            classes.append("seg")
        out.append({"data": data, "classes": " ".join(classes)})
    _place_edge_labels(out)
    return scoped(out, scope) if scope else out


_REFS = ("id", "source", "target", "frame")      # the data keys that name an element


def scoped(els, scope):
    """``els`` with every element id (and every reference to one) prefixed by ``scope``."""
    out = []
    for el in els:
        d = dict(el["data"])
        for k in _REFS:
            if k in d:
                d[k] = "%s/%s" % (scope, d[k])
        out.append(dict(el, data=d))
    return out


def _place_edge_labels(els):
    """Where each edge label goes: under the layer that writes the blob (``src_label``), or,
    for a layer writing several labelled blobs (a data layer's data and label, a Slice), at
    the middle of each edge (``mid_label``), where diverging edges keep their labels apart."""
    per_source = {}
    for el in els:
        d = el["data"]
        if "source" in d and d.get("label"):
            per_source[d["source"]] = per_source.get(d["source"], 0) + 1
    for el in els:
        d = el["data"]
        if "source" in d and d.get("label"):
            where = "mid_label" if per_source[d["source"]] > 1 else "src_label"
            d[where] = d["label"]
            d["lp"] = LABEL_CLASS[where]       # its place; the page moves it where it would cover another
            el["classes"] += " " + LABEL_CLASS[where]


# the class that shows an edge's label (its presence, not a data key's: a key an element no longer
# has keeps its old value in the page, a class list is replaced whole): under the layer that
# writes the blob, mid-edge, or above the layer that reads it (assets/graph.js moves a label that
# would cover another label, a frame's title or a node there; where none is free, it hides it:
# class "lblhide", the blob and its shape are in the edge's hover box)
LABEL_CLASS = {"src_label": "srclab", "mid_label": "midlab"}
LABEL_PLACES = ("srclab", "midlab", "tgtlab")


CAUSE_COLOUR = "#c2185b"       # a finding's cause (not the selection's red)
SYMPTOM_COLOUR = "#e8a3bd"      # what follows from it

# drawing order (z-index, compared across nodes and edges): frames (by depth), edges, nodes, the selection
Z_EDGE, Z_NODE, Z_SEL = 10, 20, 30


def stylesheet():
    """The graph's style: colours and sizes come from each element's data.  Labels by level
    of detail, every label shown at least 10 px high on screen (``assets/graph.js`` sets
    the classes and sizes as the zoom changes): from zoom 0.86 each node's full label (11 px
    at zoom 1) and each frame's name above it; below, a node shows its name alone (``short``,
    10 px on screen) where it fits inside the node, else nothing, an outermost frame (a
    stage, a section) its name, size and output shape beside it (``side``, 12 px), an inner
    frame its name above it (``top``, 10 px) where that fits; edge labels (the blob's shape,
    and its name unless a layer of that name made it; once per blob, under the layer that
    writes it) from zoom 0.95 (the page marks edges "far" below it)."""
    node_text = {"label": "data(label)", "font-family": FONT, "font-size": 11, "color": "data(fg)",
                 "text-valign": "center", "text-halign": "center", "min-zoomed-font-size": 7,
                 "text-wrap": "wrap", "text-max-width": 400}
    return [
        {"selector": "node[lw]", "style": {
            **node_text, "shape": "round-rectangle", "width": "data(w)", "height": "data(h)",
            "background-color": "data(fill)", "border-color": "data(line)", "border-width": "data(lw)",
            "z-index-compare": "manual", "z-index": Z_NODE}},
        {"selector": "node.block", "style": {
            "shape": "cut-rectangle", "border-style": "double", "font-weight": "bold", "font-size": 11.5,
            "border-width": 4}},
        {"selector": "node.ghost", "style": {"opacity": 0.55, "border-style": "dashed", "color": "#555"}},
        {"selector": "node.blob", "style": {"font-size": 11, "color": "#333", "border-color": "#999",
                                            "shape": "round-rectangle"}},
        {"selector": "node.output", "style": {"shape": "round-tag", "font-size": 11, "color": "#333",
                                              "border-color": "#777", "background-color": "#ffffff"}},
        {"selector": "node.group", "style": {
            "shape": "round-rectangle", "width": "data(w)", "height": "data(h)", "background-color": "data(fill)",
            "background-opacity": 0.85, "border-color": "#9aa8bd", "border-width": 1.5, "border-style": "dashed",
            "label": "data(label)", "text-valign": "top", "text-halign": "center", "font-family": FONT,
            "font-size": 13, "font-weight": "bold", "color": "#34495e", "min-zoomed-font-size": 7,
            "text-margin-y": -2, "z-index-compare": "manual", "z-index": "data(z)"}},
        {"selector": "node.ran", "style": {"underlay-color": "#1f77b4", "underlay-padding": 6,
                                           "underlay-opacity": 0.16, "underlay-shape": "round-rectangle"}},
        {"selector": "node.stopped", "style": {"underlay-color": "#1f77b4", "underlay-padding": 9,
                                               "underlay-opacity": 0.45, "underlay-shape": "round-rectangle"}},
        {"selector": "edge", "style": {
            "width": 1.6, "line-color": "data(colour)", "target-arrow-color": "data(colour)",
            "target-arrow-shape": "triangle", "arrow-scale": 0.8, "curve-style": "bezier",
            "edge-distances": "node-position", "z-index-compare": "manual", "z-index": Z_EDGE}},
        {"selector": "node.short", "style": {
            "label": "data(short)", "font-size": "data(fs)", "color": "#1a1a1a", "font-weight": "normal",
            "text-wrap": "none", "min-zoomed-font-size": 0, "text-background-color": "#ffffff",
            "text-background-opacity": 0.75, "text-background-padding": "1px",
            "text-background-shape": "round-rectangle"}},
        {"selector": "node.nolabel", "style": {"label": ""}},
        {"selector": "node.group.side", "style": {
            "label": "data(side)", "font-size": "data(fs)", "text-halign": "right", "text-valign": "center",
            "text-margin-x": "data(fm)", "text-margin-y": 0, "text-wrap": "wrap", "text-max-width": 2000,
            "min-zoomed-font-size": 0, "text-justification": "left", "color": "#1f2d3d",
            "text-background-color": "#ffffff", "text-background-opacity": 0.85, "text-background-padding": "2px"}},
        {"selector": "node.group.top", "style": {"font-size": "data(fs)", "min-zoomed-font-size": 0}},
        {"selector": "edge.srclab, edge.midlab, edge.tgtlab", "style": {
            "font-size": 10, "font-family": FONT, "color": "#555", "min-zoomed-font-size": 8,
            "text-background-color": "#ffffff", "text-background-opacity": 0.85, "text-background-padding": "1px"}},
        {"selector": "edge.srclab", "style": {"source-label": "data(label)", "source-text-offset": 16}},
        {"selector": "edge.midlab", "style": {"label": "data(label)"}},
        {"selector": "edge.tgtlab", "style": {"target-label": "data(label)", "target-text-offset": 18}},
        {"selector": "edge.shifted", "style": {"text-margin-x": "data(lx)", "source-text-margin-x": "data(lx)",
                                               "target-text-margin-x": "data(lx)"}},
        {"selector": "edge.far", "style": {"text-opacity": 0, "text-background-opacity": 0}},   # zoomed out
        {"selector": "edge.seg", "style": {"curve-style": "segments", "segment-distances": "data(sd)",
                                           "segment-weights": "data(sw)"}},
        {"selector": "edge.stale", "style": {"line-style": "dotted"}},
        {"selector": "edge.ghost", "style": {"line-style": "dashed", "line-color": "#c8c8c8",
                                             "target-arrow-color": "#c8c8c8", "width": 1.0}},
        # a finding's cause: a red ring outside the node (the border keeps the run state), its
        # frames a solid red border; what follows from it: a thin dashed ring
        {"selector": "node.cause", "style": {"outline-color": CAUSE_COLOUR, "outline-width": 4, "outline-offset": 3,
                                             "outline-style": "solid", "outline-opacity": 1}},
        {"selector": "node.symptom", "style": {"outline-color": SYMPTOM_COLOUR, "outline-width": 2,
                                               "outline-offset": 2, "outline-style": "dashed", "outline-opacity": 1}},
        {"selector": "node.group.cause", "style": {"outline-width": 0, "border-color": CAUSE_COLOUR,
                                                   "border-style": "solid", "border-width": 3}},
        {"selector": "node.group.cause.side", "style": {"color": CAUSE_COLOUR}},
        {"selector": ".sel", "style": {"border-color": "#d62728", "border-width": 4, "z-index": Z_SEL}},
        {"selector": "node.group.sel", "style": {"border-style": "solid", "border-width": 3, "z-index": "data(z)"}},
        {"selector": "edge.sel", "style": {"line-color": "#d62728", "target-arrow-color": "#d62728",
                                           "width": 3.2, "font-size": 10, "color": "#d62728"}},
        {"selector": "node:selected", "style": {"overlay-opacity": 0}},
        {"selector": "node:active", "style": {"overlay-opacity": 0.08}},
    ]


# ------------------------------------------------------------------ SVG export
def _esc(text):
    return html.escape(str(text), quote=True)


def _along(points, distance):
    """The point ``distance`` pixels along a polyline from its start (None: its middle)."""
    lengths = [math.hypot(b[0] - a[0], b[1] - a[1]) for a, b in zip(points, points[1:])]
    left = sum(lengths) / 2.0 if distance is None else min(distance, sum(lengths))
    for (a, b), n in zip(zip(points, points[1:]), lengths):
        if left <= n and n > 0:
            t = left / n
            return a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t
        left -= n
    return points[-1]


def graph_svg(view, title=""):
    """The whole graph as a standalone SVG document (what "Save image" gives for SVG)."""
    els = elements(view)
    pos = {}
    for el in els:
        d = el["data"]
        if "source" in d or d.get("kind") == "group":
            continue
        x, y = el["position"]["x"], el["position"]["y"]
        pos[d["id"]] = (x, y, d["w"], d["h"])
    frames = [el["data"] for el in els if el["data"].get("kind") == "group"]
    boxes = {}
    for el in els:
        d = el["data"]
        if d.get("kind") == "group":
            x, y = el["position"]["x"], el["position"]["y"]
            boxes[d["id"]] = (x - d["w"] / 2, y - d["h"] / 2 - 16, x + d["w"] / 2, y + d["h"] / 2)
    all_x = [x - w / 2 for x, _y, w, _h in pos.values()] + [x + w / 2 for x, _y, w, _h in pos.values()]
    all_y = [y - h / 2 for _x, y, _w, h in pos.values()] + [y + h / 2 for _x, y, _w, h in pos.values()]
    for b in boxes.values():
        all_x += [b[0], b[2]]
        all_y += [b[1], b[3]]
    x0, y0 = (min(all_x) - 20, min(all_y) - 40) if all_x else (0, 0)
    x1, y1 = (max(all_x) + 20, max(all_y) + 20) if all_x else (100, 100)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" viewBox="%.1f %.1f %.1f %.1f" width="%.0f" height="%.0f" '
           'font-family="%s">' % (x0, y0, x1 - x0, y1 - y0, x1 - x0, y1 - y0, _esc(FONT)),
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#666"/></marker></defs>',
           '<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#ffffff"/>' % (x0, y0, x1 - x0, y1 - y0),
           '<text x="%.1f" y="%.1f" font-size="14" fill="#222">%s</text>'
           % (x0 + 10, y0 + 22, _esc(title or view.title))]
    for f in frames:
        b = boxes.get(f["id"])
        if not b:
            continue
        top = b[1] + 16         # the frame; its name above it, as the page draws it
        out.append('<g class="block"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="8" fill="%s" '
                   'stroke="#9aa8bd" stroke-dasharray="5 3"/><text x="%.1f" y="%.1f" font-size="12" '
                   'font-weight="bold" fill="#34495e" text-anchor="middle">%s</text></g>'
                   % (b[0], top, b[2] - b[0], b[3] - top, _esc(f["fill"]), (b[0] + b[2]) / 2, top - 4,
                      _esc(f["label"])))
    routes = {}
    for e in view.edges:
        routes.setdefault((e.src, e.dst, e.blob), [(x * XPX + 8.0, -y * YPX) for x, y in e.points[1:-1]])
    for el in els:
        d = el["data"]
        if "source" not in d or d["source"] not in pos or d["target"] not in pos:
            continue
        sx, sy, _sw, sh = pos[d["source"]]
        tx, ty, _tw, th = pos[d["target"]]
        pts = [(sx, sy + sh / 2)] + routes.get((d["source"], d["target"], d["blob"]), []) + [(tx, ty - th / 2)]
        dash = ' stroke-dasharray="4 3"' if "ghost" in el["classes"] or "stale" in el["classes"] else ""
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.4"%s marker-end="url(#arrow)">'
                   '<title>%s</title></polyline>' % (" ".join("%.1f,%.1f" % p for p in pts), _esc(d["colour"]),
                                                     dash, _esc(d.get("label") or d["blob"])))
        if d.get("label"):
            lx, ly = _along(pts, 16.0) if d["src_label"] else _along(pts, None)
            out.append('<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle" fill="#555" stroke="#ffffff" '
                       'stroke-width="3" paint-order="stroke">%s</text>' % (lx, ly + 3, _esc(d["label"])))
    for el in els:
        d = el["data"]
        if d["id"] not in pos:
            continue
        x, y, w, h = pos[d["id"]]
        lines = d["label"].split("\n")
        dash = ' stroke-dasharray="4 2"' if d["kind"] == "ghost" else ""
        out.append('<g class="%s"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="5" fill="%s" stroke="%s" '
                   'stroke-width="%.1f"%s/>' % (_esc(d["kind"]), x - w / 2, y - h / 2, w, h, _esc(d["fill"]),
                                                _esc(d["line"]), max(1.0, float(d["lw"])), dash))
        for k, line in enumerate(lines):
            ty = y + (k - (len(lines) - 1) / 2.0) * 13 + 4
            out.append('<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" fill="%s">%s</text>'
                       % (x, ty, _esc(d["fg"]), _esc(line)))
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)

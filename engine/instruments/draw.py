"""Draw a net's DAG, like Caffe's ``python/draw_net.py`` (``caffe.draw``), without graphviz.

    draw_net_to_file("net.prototxt", "net.svg", rankdir="LR", phase="TRAIN")
    graph = net_graph(net)            # a Net (its layers, Splits included, with blob shapes)
    graph = net_graph(net_param)      # a NetParameter (the layers as written)
    svg = to_svg(graph); dot = to_dot(graph); fig = to_plotly(graph)

Layers are boxes (Caffe's colours: Convolution red, Pooling orange,
InnerProduct purple, in-place neuron layers green, others blue) labelled with
name, type and, for Convolution and Pooling, kernel size, stride and pad; blobs
are grey octagons.  An in-place layer writes a new version of its blob, so the
drawing stays acyclic.  The layout is layered (longest path from the inputs;
within a layer, nodes follow the mean position of their predecessors), in the
direction ``rankdir``: LR (default, as draw_net.py), RL, TB or BT.

Output by extension: ``.svg`` (written directly), ``.dot``/``.gv``/``.raw``
(Graphviz source, as draw_net.py's ``.raw``), ``.png``/``.pdf``/``.jpg``/``.webp``
through Plotly and kaleido when kaleido is installed (otherwise a
:class:`~engine.core.errors.CaffeError` says to write an SVG instead), ``.html``
(a self-contained interactive Plotly page).
"""
import importlib.util
import os
from dataclasses import dataclass, field
from typing import List

from engine.core.errors import CaffeError
from engine.proto import caffe_pb2

LAYER_COLOR = "#6495ED"
NEURON_COLOR = "#90EE90"
BLOB_COLOR = "#E0E0E0"
TYPE_COLOR = {"Convolution": "#FF5050", "Deconvolution": "#FF5050", "Pooling": "#FF9900",
              "InnerProduct": "#CC33FF"}
RANKDIRS = ("LR", "RL", "TB", "BT")
CHAR_W, LINE_H, PAD = 7.0, 15.0, 8.0


def escape(text, entities=None):
    """xml.sax.saxutils.escape (imported when an SVG is written: xml.sax pulls in urllib
    and email, which ``import caffe`` does not need)."""
    from xml.sax.saxutils import escape as _escape
    return _escape(text, entities or {})


@dataclass
class Node:
    id: str
    kind: str                 # "layer" or "blob"
    name: str
    lines: List[str]
    color: str
    type: str = ""
    hover: str = ""
    rank: int = 0
    order: float = 0.0
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0


@dataclass
class Edge:
    src: str
    dst: str
    label: str = ""


@dataclass
class Graph:
    name: str
    nodes: List[Node] = field(default_factory=list)
    edges: List[Edge] = field(default_factory=list)
    rankdir: str = "LR"
    width: float = 0.0
    height: float = 0.0

    def node(self, node_id):
        for n in self.nodes:
            if n.id == node_id:
                return n
        return None


# ---------------------------------------------------------------------- labels
# caffe.draw's labels and colours, shared with engine.pycaffe.draw.
def _first(rep, default=0):
    return int(rep[0]) if len(rep) else default


def layer_fill_color(ltype):
    """caffe.draw's colour of a layer box by type (in-place neuron layers aside)."""
    return TYPE_COLOR.get(ltype, LAYER_COLOR)


def pooling_method_name(pool):
    """``MAX``, ``AVE``, ``STOCHASTIC`` for a PoolingParameter.pool value."""
    return caffe_pb2.PoolingParameter.PoolMethod.Name(pool)


def layer_lr_mults(lp):
    """caffe.draw's ``get_layer_lr_mult``: (weights, bias) lr_mult of a Convolution,
    Deconvolution or InnerProduct layer (1.0 where no ``param`` gives one)."""
    if lp.type not in ("Convolution", "Deconvolution", "InnerProduct"):
        raise ValueError("%s layers do not have a learning rate multiplier" % lp.type)
    if len(lp.param) == 0:
        return 1.0, 1.0
    if len(lp.param) == 1:
        return lp.param[0].lr_mult, 1.0
    if len(lp.param) == 2:
        return lp.param[0].lr_mult, lp.param[1].lr_mult
    raise ValueError("Could not parse the learning rate multiplier")


def _spatial(lp, ltype, exact):
    """(kernel size, stride, pad) of a Convolution/Deconvolution/Pooling layer, or None.
    ``exact``: as caffe.draw reads them (the first kernel_size/stride/pad); otherwise the
    ``_h`` fields win when set and a global pooling says so."""
    if ltype == "Pooling":
        pp = lp.pooling_param
        if exact:
            return pp.kernel_size, pp.stride, pp.pad
        if pp.global_pooling:
            return "global"
        return (pp.kernel_h if pp.HasField("kernel_h") else pp.kernel_size,
                pp.stride_h if pp.HasField("stride_h") else pp.stride,
                pp.pad_h if pp.HasField("pad_h") else pp.pad)
    if ltype in ("Convolution", "Deconvolution"):
        cp = lp.convolution_param
        k, s, p = _first(cp.kernel_size, 1), _first(cp.stride, 1), _first(cp.pad, 0)
        if not exact:
            k = cp.kernel_h if cp.HasField("kernel_h") else _first(cp.kernel_size)
            s = cp.stride_h if cp.HasField("stride_h") else s
            p = cp.pad_h if cp.HasField("pad_h") else p
        return k, s, p
    return None


def layer_label_lines(lp, ltype=None, display_lrm=False, exact=False):
    """The lines of a layer's label, as caffe.draw builds them: its name, ``(Type)``
    (``(Pooling MAX)``), for Convolution, Deconvolution and Pooling ``kernel size: K``,
    ``stride: S``, ``pad: P``, and with ``display_lrm`` ``lr mult: W, B`` for learnable
    layers.  ``exact`` reads the spatial fields exactly as caffe.draw does."""
    ltype = ltype or lp.type
    lines = [lp.name]
    if ltype == "Pooling":
        lines.append("(%s %s)" % (ltype, pooling_method_name(lp.pooling_param.pool)))
    else:
        lines.append("(%s)" % ltype)
    spatial = _spatial(lp, ltype, exact)
    if spatial == "global":
        lines.append("global")
    elif spatial is not None:
        lines.extend(["kernel size: %d" % spatial[0], "stride: %d" % spatial[1], "pad: %d" % spatial[2]])
    if display_lrm and ltype in ("Convolution", "Deconvolution", "InnerProduct"):
        w, b = layer_lr_mults(lp)
        if w or b:
            lines.append("lr mult: %.1f, %.1f" % (w, b))
    return lines


def edge_label(lp, ltype=None):
    """caffe.draw's label of a layer's out-edges: ``Batch N`` for Data, num_output for
    Convolution, Deconvolution and InnerProduct, else empty."""
    ltype = ltype or lp.type
    if ltype == "Data":
        return "Batch %d" % lp.data_param.batch_size
    if ltype in ("Convolution", "Deconvolution"):
        return str(lp.convolution_param.num_output)
    if ltype == "InnerProduct":
        return str(lp.inner_product_param.num_output)
    return ""


# ---------------------------------------------------------------------- building
def net_graph(source, splits=None, label_edges=True):
    """A :class:`Graph` of a Net (its real layers and blob shapes) or a NetParameter.
    ``splits``: keep Split layers (default: yes for a Net, as it has them)."""
    from engine.core.net import Net
    shapes = {}
    if isinstance(source, Net):
        param = source.param
        name = source.name
        for bname in source.blob_names:
            shapes[bname] = list(source.blobs[bname].shape)
        layer_types = [l.type for l in source.layers]
        need = source.layer_need_backward
    else:
        param = source
        name = param.name
        layer_types = [lp.type for lp in param.layer]
        need = None
    g = Graph(name or "net")
    version = {}        # blob name -> node id of its current version
    counts = {}
    skip_split = splits is False

    def blob_node(bname, create=False):
        if not create and bname in version:
            return version[bname]
        k = counts.get(bname, 0)
        counts[bname] = k + 1
        nid = "blob:%s#%d" % (bname, k)
        lines = [bname]
        hover = "blob %s" % bname
        if bname in shapes:
            lines.append(" x ".join(str(d) for d in shapes[bname]) or "scalar")
            hover += " %s" % (shapes[bname],)
        g.nodes.append(Node(nid, "blob", bname, lines, BLOB_COLOR, hover=hover))
        version[bname] = nid
        return nid

    for blob in param.input:
        blob_node(blob, create=True)
    alias = {}
    for i, lp in enumerate(param.layer):
        ltype = layer_types[i] if i < len(layer_types) else lp.type
        if skip_split and ltype == "Split":
            for t in lp.top:
                alias[t] = alias.get(lp.bottom[0], lp.bottom[0])
            continue
        bottoms = [alias.get(b, b) for b in lp.bottom]
        inplace = len(bottoms) == 1 and len(lp.top) == 1 and bottoms[0] == lp.top[0]
        color = NEURON_COLOR if inplace else layer_fill_color(ltype)
        lid = "layer:%d:%s" % (i, lp.name)
        hover = "%s (%s)" % (lp.name, ltype)
        if need is not None and i < len(need):
            hover += ", %s backward" % ("needs" if need[i] else "no")
        g.nodes.append(Node(lid, "layer", lp.name, layer_label_lines(lp, ltype), color, ltype, hover))
        for b in bottoms:
            g.edges.append(Edge(blob_node(b), lid))
        label = edge_label(lp, ltype) if label_edges else ""
        for t in lp.top:
            g.edges.append(Edge(lid, blob_node(t, create=True), label))
    layout(g)
    return g


# ---------------------------------------------------------------------- layout
def layout(g, rankdir=None, rank_gap=46.0, node_gap=18.0):
    """Layered coordinates (x, y of node centres, w, h) for ``rankdir``."""
    if rankdir is not None:
        g.rankdir = rankdir
    rd = g.rankdir.upper()
    if rd not in RANKDIRS:
        raise CaffeError("rankdir must be one of %s (got %r)" % (", ".join(RANKDIRS), rankdir))
    horizontal = rd in ("LR", "RL")
    preds = {n.id: [] for n in g.nodes}
    for e in g.edges:
        preds[e.dst].append(e.src)
    index = {n.id: n for n in g.nodes}
    for n in g.nodes:       # creation order is topological
        n.rank = 1 + max((index[p].rank for p in preds[n.id]), default=-1)
        n.w = max(len(s) for s in n.lines) * CHAR_W + 2 * PAD
        n.h = len(n.lines) * LINE_H + PAD
        if n.kind == "blob":
            n.w += 10
    ranks = {}
    for n in g.nodes:
        ranks.setdefault(n.rank, []).append(n)
    # Along-rank positions: follow the predecessors, keep a gap.
    along = (lambda n: n.h) if horizontal else (lambda n: n.w)
    across = (lambda n: n.w) if horizontal else (lambda n: n.h)
    for r in sorted(ranks):
        row = ranks[r]
        desired = {}
        for k, n in enumerate(row):
            ps = [index[p].order for p in preds[n.id]]
            desired[n.id] = sum(ps) / len(ps) if ps else k * 60.0
        row.sort(key=lambda n: desired[n.id])
        pos = []
        for k, n in enumerate(row):
            want = desired[n.id]
            if k:
                prev = row[k - 1]
                want = max(want, pos[-1] + along(prev) / 2 + node_gap + along(n) / 2)
            pos.append(want)
        shift = sum(desired[n.id] for n in row) / len(row) - sum(pos) / len(pos)
        for n, p in zip(row, pos):
            n.order = p + shift
    # Across: ranks one after the other.
    offset = 0.0
    centre = {}
    for r in sorted(ranks):
        size = max(across(n) for n in ranks[r])
        centre[r] = offset + size / 2
        offset += size + rank_gap
    lo = min((n.order - along(n) / 2 for n in g.nodes), default=0.0)
    hi = max((n.order + along(n) / 2 for n in g.nodes), default=0.0)
    extent_across = max(offset - rank_gap, 0.0)
    margin = 12.0
    for n in g.nodes:
        a = centre[n.rank]
        if rd == "RL" or rd == "BT":
            a = extent_across - a
        b = n.order - lo
        if horizontal:
            n.x, n.y = a + margin, b + margin
        else:
            n.x, n.y = b + margin, a + margin
    if horizontal:
        g.width, g.height = extent_across + 2 * margin, (hi - lo) + 2 * margin
    else:
        g.width, g.height = (hi - lo) + 2 * margin, extent_across + 2 * margin
    return g


def _anchor(n, rd, out):
    """Where an edge leaves (out=True) or enters a node."""
    if rd == "LR":
        return (n.x + n.w / 2, n.y) if out else (n.x - n.w / 2, n.y)
    if rd == "RL":
        return (n.x - n.w / 2, n.y) if out else (n.x + n.w / 2, n.y)
    if rd == "TB":
        return (n.x, n.y + n.h / 2) if out else (n.x, n.y - n.h / 2)
    return (n.x, n.y - n.h / 2) if out else (n.x, n.y + n.h / 2)


def _curve(g, e):
    index = {n.id: n for n in g.nodes}
    a, b = index[e.src], index[e.dst]
    rd = g.rankdir.upper()
    x0, y0 = _anchor(a, rd, True)
    x1, y1 = _anchor(b, rd, False)
    if rd in ("LR", "RL"):
        dx = (x1 - x0) / 2
        return (x0, y0), (x0 + dx, y0), (x1 - dx, y1), (x1, y1)
    dy = (y1 - y0) / 2
    return (x0, y0), (x0, y0 + dy), (x1, y1 - dy), (x1, y1)


def _octagon(n):
    c = min(n.h, n.w) * 0.28
    x0, y0, x1, y1 = n.x - n.w / 2, n.y - n.h / 2, n.x + n.w / 2, n.y + n.h / 2
    return [(x0 + c, y0), (x1 - c, y0), (x1, y0 + c), (x1, y1 - c), (x1 - c, y1), (x0 + c, y1),
            (x0, y1 - c), (x0, y0 + c)]


# ---------------------------------------------------------------------- SVG / DOT
def to_svg(g):
    """A standalone SVG document of the laid-out graph."""
    w, h = max(g.width, 10), max(g.height, 10)
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.1f %.1f" '
           'font-family="Helvetica, Arial, sans-serif" font-size="12">' % (w, h, w, h),
           '<title>%s</title>' % escape(g.name),
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
           '<rect width="100%" height="100%" fill="white"/>']
    for e in g.edges:
        (x0, y0), (c1x, c1y), (c2x, c2y), (x1, y1) = _curve(g, e)
        out.append('<path class="edge" d="M %.1f %.1f C %.1f %.1f %.1f %.1f %.1f %.1f" fill="none" stroke="#555" '
                   'stroke-width="1.2" marker-end="url(#arrow)"/>' % (x0, y0, c1x, c1y, c2x, c2y, x1, y1))
        if e.label:
            out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="#333">%s</text>'
                       % ((x0 + x1) / 2, (y0 + y1) / 2 - 3, escape(e.label)))
    for n in g.nodes:
        out.append('<g class="%s" id="%s"><title>%s</title>' % (n.kind, escape(n.id, {'"': "&quot;"}),
                                                                escape(n.hover or n.name)))
        if n.kind == "layer":
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="4" fill="%s" stroke="#333"/>'
                       % (n.x - n.w / 2, n.y - n.h / 2, n.w, n.h, n.color))
        else:
            pts = " ".join("%.1f,%.1f" % p for p in _octagon(n))
            out.append('<polygon points="%s" fill="%s" stroke="#666"/>' % (pts, n.color))
        top = n.y - (len(n.lines) - 1) * LINE_H / 2
        for k, line in enumerate(n.lines):
            out.append('<text x="%.1f" y="%.1f" text-anchor="middle" dominant-baseline="central"%s>%s</text>'
                       % (n.x, top + k * LINE_H, ' font-weight="bold"' if k == 0 and n.kind == "layer" else "",
                          escape(line)))
        out.append('</g>')
    out.append('</svg>')
    return "\n".join(out) + "\n"


def to_dot(g):
    """Graphviz source (what draw_net.py writes for ``.raw``)."""
    def q(s):
        return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')
    out = ["digraph %s {" % q(g.name), "  rankdir=%s;" % g.rankdir]
    for n in g.nodes:
        shape = "record" if n.kind == "layer" else "octagon"
        out.append("  %s [label=%s, shape=%s, style=filled, fillcolor=%s];"
                   % (q(n.id), q("\\n".join(n.lines)), shape, q(n.color)))
    for e in g.edges:
        out.append("  %s -> %s%s;" % (q(e.src), q(e.dst), (" [label=%s]" % q(e.label)) if e.label else ""))
    out.append("}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------- Plotly
def to_plotly(g, title=None, arrows_max=400):
    """A Plotly figure of the graph (boxes as shapes, hover on every node)."""
    import plotly.graph_objects as go
    fig = go.Figure()
    ex, ey = [], []
    for e in g.edges:
        p0, p1, p2, p3 = _curve(g, e)
        for t in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
            u = 1 - t
            ex.append(u ** 3 * p0[0] + 3 * u * u * t * p1[0] + 3 * u * t * t * p2[0] + t ** 3 * p3[0])
            ey.append(u ** 3 * p0[1] + 3 * u * u * t * p1[1] + 3 * u * t * t * p2[1] + t ** 3 * p3[1])
        ex.append(None)
        ey.append(None)
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#777", width=1), hoverinfo="skip",
                             showlegend=False, name="edges"))
    shapes = []
    for n in g.nodes:
        if n.kind == "layer":
            shapes.append(dict(type="rect", x0=n.x - n.w / 2, y0=n.y - n.h / 2, x1=n.x + n.w / 2, y1=n.y + n.h / 2,
                               fillcolor=n.color, line=dict(color="#333", width=1), layer="below"))
        else:
            pts = _octagon(n)
            path = "M " + " L ".join("%.1f,%.1f" % p for p in pts) + " Z"
            shapes.append(dict(type="path", path=path, fillcolor=n.color, line=dict(color="#666", width=1),
                               layer="below"))
    fig.add_trace(go.Scatter(
        x=[n.x for n in g.nodes], y=[n.y for n in g.nodes], mode="text",
        text=["<br>".join(escape(s) for s in n.lines) for n in g.nodes], textfont=dict(size=10),
        hovertext=[n.hover or n.name for n in g.nodes], hoverinfo="text", showlegend=False, name="nodes"))
    annotations = []
    if len(g.edges) <= arrows_max:
        for e in g.edges:
            p0, _, p2, p3 = _curve(g, e)
            annotations.append(dict(x=p3[0], y=p3[1], ax=p2[0] + (p3[0] - p2[0]) * 0.6,
                                    ay=p2[1] + (p3[1] - p2[1]) * 0.6, xref="x", yref="y", axref="x", ayref="y",
                                    showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1, arrowcolor="#555",
                                    text=""))
    scale = 1.0
    fig.update_layout(shapes=shapes, annotations=annotations, title=title or g.name,
                      plot_bgcolor="white", margin=dict(l=10, r=10, t=40, b=10),
                      width=int(min(max(g.width * scale + 40, 400), 4000)),
                      height=int(min(max(g.height * scale + 80, 300), 4000)))
    fig.update_xaxes(visible=False, range=[-10, g.width + 10])
    fig.update_yaxes(visible=False, range=[g.height + 10, -10], scaleanchor="x", scaleratio=1)
    return fig


# ---------------------------------------------------------------------- files
def _load_param(model, phase=None, level=0, stages=()):
    from engine.core.filter import filter_net
    from engine.core.upgrade import read_net_params
    param = read_net_params(model)
    if phase is None or str(phase).upper() == "ALL":
        return param
    p = caffe_pb2.NetParameter()
    p.CopyFrom(param)
    ph = str(phase).upper()
    if ph not in ("TRAIN", "TEST"):
        raise CaffeError("phase must be TRAIN, TEST or ALL (got %r)" % (phase,))
    p.state.phase = caffe_pb2.TRAIN if ph == "TRAIN" else caffe_pb2.TEST
    p.state.level = int(level)
    for s in stages or ():
        p.state.stage.append(s)
    filtered, _ = filter_net(p)
    return filtered


def kaleido_available():
    return importlib.util.find_spec("kaleido") is not None


def draw_net_to_file(source, filename, rankdir="LR", phase=None, level=0, stages=(), splits=None):
    """Draw ``source`` (a prototxt path, a NetParameter or a Net) to ``filename``; the
    format follows the extension (see the module doc).  Returns the Graph."""
    from engine.core.net import Net
    if isinstance(source, (str, os.PathLike)):
        source = _load_param(os.fspath(source), phase, level, stages)
        if splits:
            from engine.core.splits import insert_splits
            source, _ = insert_splits(source)
    g = net_graph(source, splits=splits if isinstance(source, Net) else None)
    layout(g, rankdir)
    ext = os.path.splitext(os.fspath(filename))[1].lower().lstrip(".")
    if ext == "svg":
        data = to_svg(g).encode("utf-8")
    elif ext in ("dot", "gv", "raw"):
        data = to_dot(g).encode("utf-8")
    elif ext in ("html", "htm"):
        data = to_plotly(g).to_html(include_plotlyjs=True, full_html=True).encode("utf-8")
    elif ext in ("png", "pdf", "jpg", "jpeg", "webp"):
        if not kaleido_available():
            raise CaffeError("writing %s needs the 'kaleido' package, the draw extra (pip install "
                             "'caffe-inspector[draw]', or pip install kaleido); "
                             "write an .svg instead (e.g. %s)" % (ext.upper(), _with_ext(filename, ".svg")))
        fig = to_plotly(g)
        try:
            data = fig.to_image(format="jpg" if ext == "jpeg" else ext)
        except Exception as e:  # kaleido present but unable to render
            raise CaffeError("could not render %s with kaleido (%s); write an .svg instead" % (ext.upper(), e)) \
                from None
    else:
        raise CaffeError("unknown image format '%s': use .svg, .png (with kaleido), .pdf, .dot or .html"
                         % (ext or os.fspath(filename)))
    with open(filename, "wb") as f:
        f.write(data)
    return g


def _with_ext(path, ext):
    return os.path.splitext(os.fspath(path))[0] + ext

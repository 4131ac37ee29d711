"""pycaffe's ``caffe.draw``: a NetParameter drawn with pydot (Graphviz).

``get_pydot_graph(net_param, rankdir, label_edges=True, phase=None, display_lrm=False)``
builds pycaffe's graph: a record node per layer labelled with its name, type, kernel
size, stride and pad (and lr multipliers with ``display_lrm``), coloured by type (in-place
layers green), an octagon per blob, edges labelled with batch size or num_output.
``draw_net`` renders it with Graphviz's ``dot`` in a format (``ext``), and
``draw_net_to_file`` writes the format its file name's extension names.

``phase`` keeps the layers pycaffe keeps for that phase (only the rules' phases are
read).  Beyond pycaffe (Caffe issue 4365), ``level`` and ``stages`` select layers by the
whole NetState, with Caffe's own rules (min_level, max_level, stage, not_stage, and phase
when one is given), as ``caffe.Net(..., level=, stages=)`` builds them.

pydot is an optional extra of the engine (``pip install pydot``, or the ``draw`` extra);
rendering needs Graphviz's ``dot`` program.  Without them the calls say so; ``python -m
engine draw`` draws without either.  The labels and colours are the ones the engine's own
drawer (:mod:`engine.instruments.draw`) shares.
"""
import shutil

from engine.core.errors import CaffeError
from engine.core.filter import state_meets_rule
from engine.instruments import draw as _shared
from engine.proto import caffe_pb2

__all__ = ["LAYER_STYLE_DEFAULT", "NEURON_LAYER_STYLE", "BLOB_STYLE", "get_pooling_types_dict",
           "get_edge_label", "get_layer_lr_mult", "get_layer_label", "choose_color_by_layertype",
           "get_pydot_graph", "draw_net", "draw_net_to_file"]

LAYER_STYLE_DEFAULT = {"shape": "record", "fillcolor": _shared.LAYER_COLOR, "style": "filled"}
NEURON_LAYER_STYLE = {"shape": "record", "fillcolor": _shared.NEURON_COLOR, "style": "filled"}
BLOB_STYLE = {"shape": "octagon", "fillcolor": _shared.BLOB_COLOR, "style": "filled"}

_PYDOT_MISSING = ("caffe.draw needs pydot (the engine's optional 'draw' extra: pip install pydot, or "
                  "pip install -r requirements-draw.txt) and Graphviz's dot program to render; "
                  "`python -m engine draw MODEL OUT.svg` draws without them")


def _pydot():
    """pydotplus when installed (as pycaffe prefers it), else pydot."""
    try:
        import pydotplus as pydot
    except ImportError:
        try:
            import pydot
        except ImportError as e:
            raise ImportError(_PYDOT_MISSING) from e
    return pydot


def get_pooling_types_dict():
    """{PoolMethod number: name}."""
    return {v.number: k for k, v in caffe_pb2.PoolingParameter.PoolMethod.DESCRIPTOR.values_by_name.items()}


def get_edge_label(layer):
    """``Batch N`` (Data), num_output (Convolution, Deconvolution, InnerProduct), else ``""``
    (Graphviz's empty label)."""
    return _shared.edge_label(layer) or '""'


def get_layer_lr_mult(layer):
    """(weights, bias) learning-rate multipliers of a Convolution, Deconvolution or
    InnerProduct layer; ValueError for other types."""
    return _shared.layer_lr_mults(layer)


def get_layer_label(layer, rankdir, display_lrm=False):
    """The quoted node label: name, type and spatial settings, separated by spaces for
    a vertical graph (TB, BT) and by newlines otherwise."""
    separator = " " if rankdir in ("TB", "BT") else r"\n"
    lines = _shared.layer_label_lines(layer, display_lrm=display_lrm, exact=True)
    return '"%s"' % separator.join(lines)


def choose_color_by_layertype(layertype):
    """The fill colour of a layer by type."""
    return _shared.layer_fill_color(layertype)


def _state(phase, level, stages):
    state = caffe_pb2.NetState()
    if phase is not None:
        state.phase = phase
    state.level = int(level or 0)
    state.stage.extend(stages or ())
    return state


def _meets(state, rule, name, ignore_phase):
    if ignore_phase and rule.HasField("phase"):
        rule = type(rule).FromString(rule.SerializeToString())
        rule.ClearField("phase")
    return state_meets_rule(state, rule, name, log=False)[0]


def _included(layer, phase, level, stages):
    """Whether ``layer`` is drawn: all layers without a phase, level or stages; with only a
    phase, pycaffe's rule (the phases of include/exclude rules); with a level or stages,
    Caffe's NetState rules (phases ignored when no phase is given)."""
    if phase is None and level is None and stages is None:
        return True
    if len(layer.include) > 0 and len(layer.exclude) > 0:
        raise ValueError("layer " + layer.name + " has both include and exclude specified.")
    if level is None and stages is None:
        included = len(layer.include) == 0
        for rule in layer.include:
            included = included or rule.phase == phase
        for rule in layer.exclude:
            included = included and not rule.phase == phase
        return included
    state = _state(phase, level, stages)
    if len(layer.include) == 0:
        return not any(_meets(state, r, layer.name, phase is None) for r in layer.exclude)
    return any(_meets(state, r, layer.name, phase is None) for r in layer.include)


def get_pydot_graph(caffe_net, rankdir, label_edges=True, phase=None, display_lrm=False, level=None,
                    stages=None):
    """A pydot graph of the NetParameter ``caffe_net`` (see the module doc)."""
    pydot = _pydot()
    pydot_graph = pydot.Dot(caffe_net.name if caffe_net.name else "Net", graph_type="digraph", rankdir=rankdir)
    pydot_nodes = {}
    pydot_edges = []
    for layer in caffe_net.layer:
        if not _included(layer, phase, level, stages):
            continue
        node_label = get_layer_label(layer, rankdir, display_lrm=display_lrm)
        node_name = "%s_%s" % (layer.name, layer.type)
        if len(layer.bottom) == 1 and len(layer.top) == 1 and layer.bottom[0] == layer.top[0]:
            pydot_nodes[node_name] = pydot.Node(node_label, **NEURON_LAYER_STYLE)   # in-place neuron layer
        else:
            style = dict(LAYER_STYLE_DEFAULT, fillcolor=choose_color_by_layertype(layer.type))
            pydot_nodes[node_name] = pydot.Node(node_label, **style)
        for bottom_blob in layer.bottom:
            pydot_nodes[bottom_blob + "_blob"] = pydot.Node("%s" % bottom_blob, **BLOB_STYLE)
            pydot_edges.append({"src": bottom_blob + "_blob", "dst": node_name, "label": '""'})
        for top_blob in layer.top:
            pydot_nodes[top_blob + "_blob"] = pydot.Node("%s" % top_blob)
            pydot_edges.append({"src": node_name, "dst": top_blob + "_blob",
                                "label": get_edge_label(layer) if label_edges else '""'})
    for node in pydot_nodes.values():
        pydot_graph.add_node(node)
    for edge in pydot_edges:
        pydot_graph.add_edge(pydot.Edge(pydot_nodes[edge["src"]], pydot_nodes[edge["dst"]], label=edge["label"]))
    return pydot_graph


def draw_net(caffe_net, rankdir, ext="png", phase=None, display_lrm=False, level=None, stages=None):
    """The drawing of ``caffe_net`` as bytes in Graphviz's format ``ext``."""
    graph = get_pydot_graph(caffe_net, rankdir, phase=phase, display_lrm=display_lrm, level=level, stages=stages)
    if shutil.which("dot") is None:
        raise CaffeError("caffe.draw.draw_net: Graphviz's dot program is not on the PATH (install Graphviz, "
                         "e.g. apt-get install graphviz); get_pydot_graph(...).to_string() gives the DOT "
                         "source without it, and `python -m engine draw MODEL OUT.svg` draws without it")
    return graph.create(format=ext)


def draw_net_to_file(caffe_net, filename, rankdir="LR", phase=None, display_lrm=False, level=None, stages=None):
    """Draw ``caffe_net`` into ``filename`` in the format of its extension."""
    ext = filename[filename.rfind(".") + 1:]
    data = draw_net(caffe_net, rankdir, ext, phase, display_lrm, level, stages)
    with open(filename, "wb") as fid:
        fid.write(data)

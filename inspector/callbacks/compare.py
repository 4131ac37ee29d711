"""Compare two runs in the page (engine.instruments.compare does the work):
two timeline steps; this net on the CPU and on the GPU; these weights against
the fillers' (before loading weights); this run against a Caffe log, a saved
report or a snapshot (.caffemodel).  The graph is then coloured by the
relative difference per layer and the first layer where the runs part is
named."""
import os
from dataclasses import dataclass

import numpy as np
from dash import Input, Output, State, no_update

from inspector import adapters, ids
from inspector.state import debugger, loading
from inspector.views import debug_figures, debug_views

from ..layout.common import table
from .common import guarded, triggered

COLUMNS = ["step", "kind", "layer", "type", "max rel", "verdict", "worst"]


class CompareRefused(ValueError):
    """The comparison asked for cannot be made (says why)."""


@dataclass
class _PortLayer:
    layer: str
    kind: str
    max_rel: float
    ok: bool


@dataclass
class _PortDivergence:
    layer: str


class PortView:
    """engine.ports.compare_port's result seen as the tab's comparisons are (``layers`` with
    each layer's largest own divergence, ``first_divergence``), so the graph colours by it
    and selects the first departing layer; ``result`` keeps the whole comparison."""

    def __init__(self, result, label):
        self.result = result
        self.label_a, self.label_b = "this net", label
        self.rtol = result.rtol
        self.ok = result.faithful
        self.layers = []
        for name, d in result.by_layer().items():
            v = d["own_rel"] if d["own_rel"] is not None else d["rel"]
            if v is None:
                continue
            self.layers.append(_PortLayer(name, "forward", float(v), d["status"] not in ("departs", "shape")))
        self.first_divergence = _PortDivergence(result.first_departing) if result.first_departing else None


def _fresh_run(ld, device, weights=None, params_from=None):
    """StepRecords of Forward (+ Backward) on a fresh copy of the loaded net:
    same prototxt and NetState, the live net's inputs, the params of
    ``params_from`` (a Net) or of ``weights`` (a caffemodel), else the fillers'."""
    import engine
    from engine.instruments.debug import Recorder
    spec = ld.spec
    phase, level, stages = spec.state()
    with engine.using_mode(device):
        with engine.memory_budget(getattr(ld, "max_bytes", None)):
            net = engine.Net(spec.model, phase, level=level, stages=list(stages) or None)
        if params_from is not None:
            for name, blobs in params_from.params.items():
                if name in net.params:
                    for dst, src in zip(net.params[name], blobs):
                        dst.data[...] = src.data
        if weights:
            net.copy_from(weights)
        for name in ld.graph.inputs:
            if name in net.blobs:
                net.blobs[name].data[...] = np.asarray(ld.net.blobs[name].data)
        rec = Recorder(net, stats=True, sentinel=False)
        try:
            net.Forward()
            if any(net.layer_need_backward):
                net.Backward()
        finally:
            rec.detach()
    return list(rec.steps)


def compare(app, sid, kind, a=None, b=None, rtol=1e-3):
    """Make the comparison, keep it on the loaded net; returns it."""
    from engine.instruments.compare import compare_runs
    rtol = float(rtol if rtol is not None else 1e-3)
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None:
            raise CompareRefused("no net is loaded")
        if kind == "steps":
            tl = debugger.timeline(ld)
            if tl is None or len(tl.steps) < 2:
                raise CompareRefused("the timeline needs two steps: run Forward (or anything) twice, e.g. with "
                                     "different inputs or after a solver iteration")
            if a is None or b is None:
                raise CompareRefused("choose step A and step B")
            cmp = compare_runs(list(tl[int(a)].records), list(tl[int(b)].records), rtol=rtol,
                               label_a="step %s" % a, label_b="step %s" % b)
        elif kind == "device":
            if not adapters.gpu_available():
                raise CompareRefused("no GPU here (CuPy with a CUDA device is not available): the CPU vs GPU "
                                     "comparison needs one")
            cmp = compare_runs(_fresh_run(ld, "CPU", params_from=ld.net), _fresh_run(ld, "GPU", params_from=ld.net),
                               rtol=rtol, label_a="CPU", label_b="GPU")
        elif kind == "weights":
            if not ld.spec.weights and not (ld.training and ld.training.train):
                raise CompareRefused("this net has no weights loaded and was not trained here: its params are "
                                     "the fillers' already. Load a .caffemodel (or run solver iterations) first")
            cmp = compare_runs(_fresh_run(ld, s.device, params_from=ld.net), _fresh_run(ld, s.device),
                               rtol=rtol, label_a="these weights", label_b="fillers' weights")
        elif kind == "onnx":
            path = s.uploads.get("compare")
            if not path or not path.endswith(".onnx"):
                raise CompareRefused("upload the ONNX model (.onnx) to compare this net with first")
            import engine.ports as ports
            name = s.upload_names.get("compare", os.path.basename(path))
            inputs = {n: np.asarray(ld.net.blobs[n].data) for n in ld.graph.inputs if n in ld.net.blobs}
            try:
                result = ports.compare_port(ld.net, path, inputs=inputs, rtol=rtol)
            except (ports.MissingExtraError, ports.ExportError, ValueError) as exc:
                raise CompareRefused("%s: %s" % (name, exc)) from None
            cmp = PortView(result, name)
        elif kind == "file":
            path = s.uploads.get("compare")
            if not path:
                raise CompareRefused("upload a Caffe log, a report (.json) or a snapshot (.caffemodel) first")
            name = s.upload_names.get("compare", os.path.basename(path))
            if path.endswith(".caffemodel"):
                cmp = compare_runs(_fresh_run(ld, s.device, params_from=ld.net),
                                   _fresh_run(ld, s.device, weights=path), rtol=rtol,
                                   label_a="these weights", label_b=name)
            else:
                if not ld.recorder.steps:
                    raise CompareRefused("nothing has run yet: run Forward + Backward (or the solver) so there "
                                         "is a run to compare with %s" % name)
                cmp = compare_runs(ld.recorder, path, rtol=rtol, label_a="this run", label_b=name)
        else:
            raise CompareRefused("unknown comparison %r" % (kind,))
        ld.comparison = cmp
        fd = cmp.first_divergence
        if fd is not None and ld.graph.has_layer(fd.layer):
            debugger.reveal(s, fd.layer)          # the graph selects and shows where the runs part
        s.run_version += 1
        return cmp, s.run_version


def compare_outputs(cmp):
    from dash import html
    if isinstance(cmp, PortView):
        return port_outputs(cmp)
    head, notes = debug_views.compare_summary(cmp)
    summary = html.Div([html.Div(head, className="compare-head")] +
                       [html.Div("note: " + n, className="muted") for n in notes])
    fig = debug_figures.compare_figure(debug_views.compare_bars(cmp), cmp.rtol, "%s vs %s" % (cmp.label_a, cmp.label_b))
    rows = debug_views.compare_rows(cmp, only_bad=not cmp.ok) or debug_views.compare_rows(cmp)
    return summary, fig, table(rows, COLUMNS, empty="no layer records")


PORT_COLUMNS = ["layer", "type", "value", "port tensor", "matched", "own rel", "end-to-end rel", "status"]


def port_outputs(view):
    """(summary, figure, table) of an ONNX port comparison: the verdict and first departing
    layer, the diagnosis, how values were matched; each layer's own divergence; the rows."""
    from dash import html
    r = view.result
    m = r.matching
    lines = [html.Div(r.message, className="compare-head")]
    lines += [html.Div("diagnosis — %s: %s" % (d.layer, d.text), className="port-diagnosis") for d in r.diagnosis]
    lines.append(html.Div("matched %d of %d values: %d input, %d by name, %d by topology and shape; %d not matched"
                          % (m["input"] + m["name"] + m["topology"], m["values"], m["input"], m["name"],
                             m["topology"], m["unmatched"]), className="muted"))
    lines += [html.Div("note: " + n, className="muted") for n in r.notes]
    fig = debug_figures.compare_figure([(l.layer, l.max_rel, l.ok) for l in view.layers], view.rtol,
                                       "this net vs %s (each layer's own arithmetic)" % view.label_b)
    bad = [x for x in r.rows if x.status in ("departs", "shape", "small")]
    shown = (bad + [x for x in r.rows if x not in bad])[:80]
    rows = [{"layer": x.layer, "type": x.type, "value": x.label, "port tensor": x.tensor or "—",
             "matched": x.matched or "—", "own rel": _num(x.own_rel), "end-to-end rel": _num(x.rel),
             "status": x.status} for x in shown]
    return html.Div(lines), fig, table(rows, PORT_COLUMNS, empty="no value compared")


def _num(v):
    return "—" if v is None else ("0" if v == 0 else "%.3g" % v)


def save_compare_upload(app, sid, contents, filename):
    with app.store.use(sid) as s:
        loading.save_upload(s, "compare", filename, contents, app.config.max_upload_bytes)
        if filename.endswith(".onnx"):
            return "%s received: choose “this net vs an ONNX model” and Compare" % filename
        return "%s received: choose “this run vs a Caffe log…” and Compare" % filename


def clear(app, sid):
    with app.store.use(sid) as s:
        if s.loaded is not None:
            s.loaded.comparison = None
        s.run_version += 1
        return s.run_version


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.COMPARE_SUMMARY, "children"), Output(ids.COMPARE_CHART, "figure"),
        Output(ids.COMPARE_TABLE, "children"),
        Output(ids.RUN_VERSION, "data", allow_duplicate=True), Output(ids.COLOUR_BY, "value", allow_duplicate=True),
        Output(ids.COMPARE_KIND, "value"),
        Input(ids.COMPARE_BUTTON, "n_clicks"), Input(ids.COMPARE_CLEAR, "n_clicks"),
        Input(ids.COMPARE_UPLOAD, "contents"),
        State(ids.COMPARE_UPLOAD, "filename"), State(ids.COMPARE_KIND, "value"), State(ids.COMPARE_A, "value"),
        State(ids.COMPARE_B, "value"), State(ids.COMPARE_RTOL, "value"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(6, "comparing")
    def compare_cb(_n, _clear, contents, filename, kind, a, b, rtol, sid):
        t = triggered()
        if t == ids.COMPARE_UPLOAD:
            if not contents:
                return (no_update,) * 6
            return (save_compare_upload(app, sid, contents, filename), no_update, no_update, no_update, no_update,
                    "onnx" if (filename or "").endswith(".onnx") else "file")
        if t == ids.COMPARE_CLEAR:
            return "", debug_figures.compare_figure([], 1e-3), None, clear(app, sid), "category", no_update
        try:
            cmp, version = compare(app, sid, kind, a, b, rtol)
        except CompareRefused as exc:
            return "⚠ " + str(exc), no_update, no_update, no_update, no_update, no_update
        summary, fig, tbl = compare_outputs(cmp)
        return summary, fig, tbl, version, "reldiff", no_update

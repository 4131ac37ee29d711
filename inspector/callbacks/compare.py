"""Compare two runs in the page (engine.instruments.compare does the work):
two timeline steps; this net on the CPU and on the GPU; these weights against
the fillers' (before loading weights); this run against a Caffe log, a saved
report or a snapshot (.caffemodel); this net against a port of it -- an ONNX
model, a PyTorch module (.py + .pth), a runtime's tensors (.npz) -- each
layer's own arithmetic (inspector/state/port_compare.py).  The graph is then
coloured by the relative difference per layer and the first layer where the
runs part is named."""
import os

import numpy as np
from dash import Input, Output, State, no_update

from inspector import adapters, ids
from inspector.state import debugger, loading, port_compare
from inspector.state.port_compare import PortView
from inspector.views import debug_figures, debug_views

from ..layout.common import table
from .common import guarded, triggered

COLUMNS = ["step", "kind", "layer", "type", "max rel", "verdict", "worst"]


class CompareRefused(ValueError):
    """The comparison asked for cannot be made (says why)."""


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


def compare(app, sid, kind, a=None, b=None, rtol=1e-3, factory=None):
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
            if not port_compare.net_has_weights(ld):
                raise CompareRefused("this net has no weights loaded and was not trained here: its params are "
                                     "the fillers' already. Load a .caffemodel (or run solver iterations) first")
            cmp = compare_runs(_fresh_run(ld, s.device, params_from=ld.net), _fresh_run(ld, s.device),
                               rtol=rtol, label_a="these weights", label_b="fillers' weights")
        elif kind in port_compare.PORT_KINDS:
            try:
                cmp = port_compare.compare(s, kind, rtol, factory, allow_code=app.config.allow_python_layers)
            except port_compare.PortRefused as exc:
                raise CompareRefused(str(exc)) from None
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
        return _keep(s, cmp)


def _keep(s, cmp):
    """The comparison ``cmp`` becomes the tab's: the graph selects where the runs part."""
    ld = s.loaded
    ld.comparison = cmp
    fd = cmp.first_divergence
    if fd is not None and ld.graph.has_layer(fd.layer):
        debugger.reveal(s, fd.layer)          # the graph selects and shows where the runs part
    s.run_version += 1
    return cmp, s.run_version


def port_weights(app, sid, rtol=1e-3, contents=None, filename=None):
    """The weights notice's offers: copy the port's weights into the net (``contents`` None)
    or load the uploaded .caffemodel into it; then compare again."""
    rtol = float(rtol if rtol is not None else 1e-3)
    with app.store.use(sid) as s:
        if s.loaded is None:
            raise CompareRefused("no net is loaded")
        try:
            if contents is None:
                cmp = port_compare.copy_weights(s, rtol, allow_code=app.config.allow_python_layers)
            else:
                cmp = port_compare.load_weights(s, filename, contents, app.config.max_upload_bytes, rtol,
                                                allow_code=app.config.allow_python_layers)
        except port_compare.PortRefused as exc:
            raise CompareRefused(str(exc)) from None
        if cmp is None:
            s.run_version += 1
            return None, s.run_version
        return _keep(s, cmp)


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
    """(summary, figure, table) of a port comparison: the verdict and first departing layer
    (or why it proves nothing), the diagnosis (a finding at many layers once, with its
    count), how values were matched; each layer's own divergence; the rows."""
    from dash import html
    r = view.result
    m = r.matching
    lines = []
    if view.note:
        lines.append(html.Div(view.note, className="muted"))
    if view.proves_nothing:
        lines.append(html.Div("⚠ " + view.proves_nothing, className="compare-head warn"))
    else:
        lines.append(html.Div(r.message, className="compare-head"))
    lines += [html.Div("diagnosis — %s: %s" % (where, text), className="port-diagnosis")
              for where, text in debug_views.port_findings(r.diagnosis)]
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


def weights_notice(cmp):
    """(style, text) of the weights notice: shown when a port comparison found the net's
    weights are not the port's."""
    if isinstance(cmp, PortView) and cmp.weights_differ:
        return {"display": "block"}, "⚠ " + cmp.weights_differ[0].upper() + cmp.weights_differ[1:] + "."
    return {"display": "none"}, ""


def _num(v):
    return "—" if v is None else ("0" if v == 0 else "%.3g" % v)


def save_compare_upload(app, sid, contents, filename):
    """Keep a Compare upload (a port's file in its own slot); returns (message, the
    comparison kind it is for)."""
    with app.store.use(sid) as s:
        slot = port_compare.slot_of(filename)
        loading.save_upload(s, slot[0] if slot else "compare", filename, contents, app.config.max_upload_bytes)
        if slot is not None:
            return port_compare.received(s, filename, app.config.allow_python_layers), slot[1]
        return "%s received: choose “this run vs a Caffe log…” and Compare" % filename, "file"


def clear(app, sid):
    with app.store.use(sid) as s:
        if s.loaded is not None:
            s.loaded.comparison = None
        s.run_version += 1
        return s.run_version


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.COMPARE_STEPS, "style"), Output(ids.COMPARE_TORCH_BOX, "style"),
        Input(ids.COMPARE_KIND, "value"))
    def compare_kind_cb(kind):
        # Step A / Step B only for two timeline steps; the factory's name only for a PyTorch port
        return ({"display": "flex"} if kind == "steps" else {"display": "none"},
                {"display": "block"} if kind == "torch" else {"display": "none"})

    @dash_app.callback(
        Output(ids.COMPARE_SUMMARY, "children"), Output(ids.COMPARE_CHART, "figure"),
        Output(ids.COMPARE_TABLE, "children"),
        Output(ids.RUN_VERSION, "data", allow_duplicate=True), Output(ids.COLOUR_BY, "value", allow_duplicate=True),
        Output(ids.COMPARE_KIND, "value"),
        Output(ids.COMPARE_WEIGHTS_NOTICE, "style"), Output(ids.COMPARE_WEIGHTS_TEXT, "children"),
        Input(ids.COMPARE_BUTTON, "n_clicks"), Input(ids.COMPARE_CLEAR, "n_clicks"),
        Input(ids.COMPARE_UPLOAD, "contents"),
        Input(ids.COMPARE_COPY_WEIGHTS, "n_clicks"), Input(ids.COMPARE_LOAD_WEIGHTS, "contents"),
        State(ids.COMPARE_UPLOAD, "filename"), State(ids.COMPARE_LOAD_WEIGHTS, "filename"),
        State(ids.COMPARE_KIND, "value"), State(ids.COMPARE_A, "value"),
        State(ids.COMPARE_B, "value"), State(ids.COMPARE_RTOL, "value"), State(ids.COMPARE_FACTORY, "value"),
        State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(8, "comparing")
    def compare_cb(_n, _clear, contents, _copy, w_contents, filename, w_filename, kind, a, b, rtol, factory, sid):
        t = triggered()
        if t == ids.COMPARE_UPLOAD:
            if not contents:
                return (no_update,) * 8
            msg, new_kind = save_compare_upload(app, sid, contents, filename)
            return (msg, no_update, no_update, no_update, no_update, new_kind, no_update, no_update)
        if t == ids.COMPARE_CLEAR:
            return ("", debug_figures.compare_figure([], 1e-3), None, clear(app, sid), "category", no_update,
                    {"display": "none"}, "")
        try:
            if t == ids.COMPARE_COPY_WEIGHTS or t == ids.COMPARE_LOAD_WEIGHTS:
                if t == ids.COMPARE_LOAD_WEIGHTS and not w_contents:
                    return (no_update,) * 8
                cmp, version = port_weights(app, sid, rtol, w_contents if t == ids.COMPARE_LOAD_WEIGHTS else None,
                                            w_filename)
                if cmp is None:
                    return ("%s loaded into this net" % w_filename, no_update, no_update, version, no_update,
                            no_update, {"display": "none"}, "")
            else:
                cmp, version = compare(app, sid, kind, a, b, rtol, factory)
        except CompareRefused as exc:
            return "⚠ " + str(exc), no_update, no_update, no_update, no_update, no_update, no_update, no_update
        summary, fig, tbl = compare_outputs(cmp)
        style, text = weights_notice(cmp)
        return summary, fig, tbl, version, "reldiff", no_update, style, text

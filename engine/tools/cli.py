"""``python -m engine``: Caffe's command line (``caffe train/test/time``,
``upgrade_net_proto_*``, ``draw_net.py``) and the debugging instruments.

    python -m engine info MODEL [--phase TEST] [--json]
    python -m engine time MODEL [--iterations 50] [--gpu [ID]]
    python -m engine debug MODEL [--iterations 1] [--format caffe|table] [--sentinel]
                               [--break-when COND ...] [-o REPORT]
    python -m engine report MODEL --format html|json|md|csv -o FILE
    python -m engine compare A B [--rtol 1e-3] [--gpu]
    python -m engine upgrade IN OUT
    python -m engine draw MODEL OUT [--rankdir LR] [--phase TRAIN|TEST|ALL]
    python -m engine train --solver S [--weights W | --snapshot S] [--gpu [IDS]] [--break-when COND ...] [-o R]
    python -m engine test --model M --weights W [--iterations 50] [--gpu [ID]]
    python -m engine device_query --gpu ID
    python -m engine convert_imageset [flags] ROOTFOLDER/ LISTFILE DB_NAME
    python -m engine compute_image_mean [--backend lmdb] INPUT_DB [OUTPUT_FILE]
    python -m engine extract_features W PROTO BLOBS DBS N lmdb|leveldb [CPU|GPU] [ID]
    python -m engine upgrade_net_proto_text|upgrade_net_proto_binary|upgrade_solver_proto_text IN OUT
    python -m engine convert_mnist_data IMAGES LABELS DB [--backend lmdb|leveldb]   (engine.tools.converters)
    python -m engine convert_cifar_data INPUT_FOLDER OUTPUT_FOLDER [lmdb|leveldb]
    python -m engine convert_mnist_siamese_data IMAGES LABELS DB [--seed S]
    python -m engine build-shims [CAFFE_ROOT]   (build/tools/caffe etc. for Caffe's tutorial scripts)
    python -m engine run SCRIPT [ARGS...]      (a pycaffe script, with the engine as caffe)
    python -m engine export-onnx MODEL -o OUT.onnx [--weights W] [--opset N|latest] [--all-blobs] [--verify]
    python -m engine run -m MODULE [ARGS...]   (a module, as python -m runs it: -m pytest)
    python -m engine compare-port MODEL --weights W --onnx PORT [--input IMG|X.npy] [preprocessing]
    python -m engine export-torch MODEL --weights W -o model.py   (engine.tools.port_commands)

Caffe's spellings: every flag also as gflags writes it (``-solver s``, ``-solver=s``,
``--solver=s``; ``-gray``, ``-nogray``), before or after the command
(:mod:`engine.tools.gflags`); ``train``, ``test``, ``time`` and ``device_query`` accept
all of caffe.cpp's flags.  The tools themselves live in :mod:`engine.tools.caffe_tools`.

Standard options: ``--phase``, ``--level``, ``--stage`` (repeatable, or comma
separated as Caffe's ``-stage``), ``--weights``, ``--gpu [ID]``,
``--iterations``, ``-v/--verbose`` (Caffe's log lines on stderr in glog's
format; ``train``, ``test`` and ``time`` always log, as caffe does; ``-q``
silences them).

Exit codes: 0 success; 1 an engine error (one line on stderr:
``error: <where: file:line:col / layer / blob>: <Caffe's message>``; where Caffe
stops with a fatal CHECK, its message); 2 a usage error (no command: the usage; an
unknown command: Caffe's "Available caffe actions" lines), and, as Caffe's upgrade
tools, an input that does not parse; 3 ``compare`` found the runs differ (``compare-port``:
the port departs); 4 ``debug
--break-when``: a breakpoint fired (the line ``break: LAYER: COND`` says where); 130
interrupted.  ``train --break-when COND`` stops the same way (exit 4).
"""
import argparse
import json
import logging
import os
import sys
import time

import numpy as np

from engine.core.log import GlogFormatter, check_failed
from engine.proto import caffe_pb2
from engine.tools import gflags

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DIFFER, EXIT_INTERRUPT = 0, 1, 2, 3, 130
EXIT_BREAK = 4          # debug --break-when: a breakpoint fired


# ---------------------------------------------------------------------- logging
class _Logging:
    """Route the engine's loggers to ``stream`` for the duration of a command."""

    def __init__(self, level, stream):
        self.level, self.stream = level, stream
        self.handler = None

    def __enter__(self):
        lg = logging.getLogger("engine")
        self.saved = (lg.level, lg.propagate)
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(GlogFormatter())
        self.handler.setLevel(self.level)
        lg.addHandler(self.handler)
        lg.setLevel(self.level)
        lg.propagate = False
        return self

    def __exit__(self, *exc):
        lg = logging.getLogger("engine")
        lg.removeHandler(self.handler)
        lg.setLevel(self.saved[0])
        lg.propagate = self.saved[1]
        try:
            self.stream.flush()
        except Exception:  # pragma: no cover
            pass


# ---------------------------------------------------------------------- progress
class Progress:
    """A one-line progress indicator on stderr, only when stderr is a terminal."""

    def __init__(self, total, label, enabled=True, stream=None):
        self.total, self.label = int(total), label
        self.stream = stream or sys.stderr
        try:
            tty = self.stream.isatty()
        except Exception:
            tty = False
        self.enabled = enabled and tty and self.total > 1
        self.t0 = time.perf_counter()

    def __call__(self, done, total=None):
        if not self.enabled:
            return
        total = total or self.total
        width = 24
        filled = int(width * done / max(total, 1))
        el = time.perf_counter() - self.t0
        eta = el / done * (total - done) if done else 0.0
        self.stream.write("\r%s [%s%s] %d/%d %.1fs (eta %.1fs) " % (self.label, "#" * filled, "." * (width - filled),
                                                                   done, total, el, eta))
        self.stream.flush()
        if done >= total:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------------- helpers
class UsageError(Exception):
    pass


def _phase(name, default):
    from engine.core.net import TEST, TRAIN
    if name is None:
        return default
    n = str(name).upper()
    if n == "TRAIN":
        return TRAIN
    if n == "TEST":
        return TEST
    raise UsageError('phase must be "TRAIN" or "TEST" (got %r)' % name)


def _stages(values):
    """--stage a --stage b,c -> ["a", "b", "c"]."""
    out = []
    for v in values or ():
        out.extend(s for s in str(v).split(",") if s != "")
    return out


def _use_device(gpu):
    """None/False: CPU; otherwise the first device id of Caffe's -gpu string."""
    from engine.core import backend
    if gpu is None or gpu is False or gpu == "":
        backend.set_mode_cpu()
        return "CPU"
    ids = str(gpu).split(",")
    if ids[0] == "all":
        dev = 0
    else:
        try:
            dev = int(ids[0])
        except ValueError:
            raise UsageError("--gpu takes device ids separated by ',' or 'all' (got %r)" % gpu) from None
    backend.cupy()          # DeviceError (an engine error) when CUDA is not usable
    backend.set_device(dev)
    backend.set_mode_gpu()
    return "GPU %d" % dev


def _label_classes(net):
    """{label blob: number of classes} guessed from the layers that read labels."""
    names = net.blob_names
    producer = {}
    for i in range(len(net.layers)):
        for t in net.top_id_vecs[i]:
            producer[names[t]] = i
    out = {}
    for i, l in enumerate(net.layers):
        if l.type not in ("SoftmaxWithLoss", "Accuracy", "InfogainLoss", "MultinomialLogisticLoss", "HingeLoss"):
            continue
        b_ids = net.bottom_id_vecs[i]
        if len(b_ids) < 2:
            continue
        pred = net.bottom_vecs[i][0]
        classes = pred.shape[1] if len(pred.shape) > 1 else 2
        lbl = names[b_ids[1]]
        out[lbl] = classes
        p = producer.get(lbl)
        if p is not None and net.layers[p].type == "Split":
            out[names[net.bottom_id_vecs[p][0]]] = classes
    return out


def fill_inputs(net, seed=0):
    """Seeded inputs for the net's Input blobs: normal(0, 1) values, integer labels
    (0..classes-1) for blobs named like labels or read as labels by a loss."""
    rng = np.random.default_rng(seed)
    classes = _label_classes(net)
    for name in net.inputs:
        blob = net.blobs[name]
        if name in classes or "label" in name.lower():
            blob.data[...] = rng.integers(0, max(int(classes.get(name, 10)), 1), size=blob.shape)
        else:
            blob.data[...] = rng.standard_normal(blob.shape)


def build_net(model, phase, level=0, stages=(), weights=None, seed=1, gpu=None, structure_only=False,
              data_shapes=None):
    """A Net on the device ``gpu`` asks for, its fillers seeded, then ``weights``
    (``structure_only``: data layers whose source is missing stood in, engine.core.standins)."""
    from engine.core import backend
    from engine.core.net import Net
    _use_device(gpu)
    backend.set_random_seed(seed)
    if structure_only:
        net = Net(model, phase, level=level, stages=list(stages), structure_only=True, data_shapes=data_shapes)
    else:
        net = Net(model, phase, level=level, stages=list(stages))
    if weights:
        net.copy_from(weights)
    return net


def run_records(net, iterations=1, backward=None, seed=0, sentinel=False, progress=None, recorder=None,
                refill=False):
    """Forward (and backward) ``iterations`` times with a Recorder attached; returns it."""
    from engine.instruments.debug import Recorder
    rec = recorder or Recorder(net, sentinel=sentinel)
    if backward is None:
        backward = any(net.layer_need_backward)
    fill_inputs(net, seed)
    for it in range(int(iterations)):
        if refill and it:
            fill_inputs(net, seed + it)
        rec.iteration = it
        net.Forward()
        if backward:
            net.Backward()
        if progress is not None:
            progress(it + 1)
    return rec


def _engine_run_for_compare(model, args, gpu, reference=None):
    """Records of ``model`` on a device; ``reference``: a Net whose weights to copy."""
    from engine.core import backend
    phase = _phase(args.phase, 0)
    net = build_net(model, phase, args.level, _stages(args.stage), args.weights, args.seed, gpu)
    if reference is not None:
        net.CopyTrainedLayersFrom(reference.ToProto())
    rec = run_records(net, args.iterations, seed=args.seed)
    backend.set_mode_cpu()
    return net, rec


def _say(stream, text=""):
    stream.write(text + "\n")


# ---------------------------------------------------------------------- commands
def _info_net(args):
    """info's net: with --structure-only, data layers whose source is missing stood in;
    without it, a missing source fails as in Caffe, and the error says how to look anyway."""
    from engine.core.errors import CaffeError
    from engine.core.standins import parse_shapes
    try:
        shapes = parse_shapes(args.data_shape)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if shapes and not args.structure_only:
        raise UsageError("--data-shape gives the shapes of stood-in data layers: add --structure-only")
    try:
        return build_net(args.model, _phase(args.phase, 0), args.level, _stages(args.stage), args.weights,
                         args.seed, args.gpu, structure_only=args.structure_only, data_shapes=shapes)
    except CaffeError as e:
        if args.structure_only or not _names_missing_data(args):
            raise
        e.args = ("%s\n(a data layer's source is missing: --structure-only shows the net with that layer "
                  "stood in by an Input of the shape its params give)" % (e.args[0] if e.args else e),)
        raise


def _names_missing_data(args):
    """Whether the model, in the asked NetState, has a data layer whose source is missing."""
    from engine.core.filter import filter_net
    from engine.core.standins import missing_source
    from engine.core.upgrade import read_net_params
    try:
        p = read_net_params(args.model)
    except Exception:  # noqa: BLE001 - the model's own error is the one to show
        return False
    p.state.phase = _phase(args.phase, 0)
    p.state.level = int(args.level)
    p.state.stage.extend(_stages(args.stage))
    kept, _ = filter_net(p, log=False)
    return any(missing_source(lp) for lp in kept.layer)


def cmd_info(args, out, err):
    from engine.instruments.analysis import analyze_net, human_bytes, human_count
    net = _info_net(args)
    a = analyze_net(net)
    rec = net.init_record
    if args.json:
        from engine.instruments.report import build_report
        doc = build_report(net, steps=[], findings=[], analysis=a, include_transcript=False)
        doc.pop("steps", None)
        _say(out, json.dumps(doc, indent=1))
        return EXIT_OK
    st = net.param.state
    _say(out, "Net '%s' from %s: phase %s, level %d, stages [%s]; %s on %s" % (
        net.name, args.model, "TRAIN" if net.phase == 0 else "TEST", st.level, ", ".join(st.stage),
        net.dtype, "GPU" if args.gpu is not None else "CPU"))
    _say(out, "Inputs: %s; outputs: %s" % (", ".join(net.inputs) or "-", ", ".join(net.outputs) or "-"))
    if rec.stand_ins:
        _say(out)
        _say(out, "Structure only: %d data layer(s) stood in by Input layers (their source is missing):"
             % len(rec.stand_ins))
        for s in rec.stand_ins:
            _say(out, "  %s (%s): %s '%s' %s" % (s.layer, s.type, s.field, s.source, s.reason))
            for t in s.tops:
                _say(out, "    %s" % t.describe())
        if any(s.assumed for s in rec.stand_ins):
            _say(out, "  (assumed dimensions: give the real ones with --data-shape TOP=C,H,W)")
    _say(out)
    _say(out, "Filtered out by the NetState (%d):" % len(rec.filtered))
    for d in rec.filtered:
        _say(out, "  %s (%s): %s rule %d {%s}: %s" % (d.name, d.type, d.rule_kind, d.rule_index, d.rule, d.reason))
    _say(out)
    _say(out, "Layers (%d):" % len(net.layers))
    hdr = "  %3s  %-22s %-16s %-44s %8s %8s %8s %9s  %s" % ("#", "layer", "type", "bottoms -> tops [shape]",
                                                             "params", "MACC", "FLOPs", "memory", "backward")
    _say(out, hdr)
    for la in a.layers:
        tops = ", ".join("%s%s [%s]" % (n, "*" if n in la.inplace_tops and n in la.bottoms else "",
                                        " ".join(str(d) for d in s))
                         for n, s in zip(la.tops, la.top_shapes))
        flow = "%s -> %s" % (", ".join(la.bottoms), tops)
        _say(out, "  %3d  %-22s %-16s %-44s %8s %8s %8s %9s  %s" % (
            la.index, la.name[:22], la.type[:16], flow, human_count(la.params), human_count(la.macc),
            human_count(la.flops), human_bytes(la.memory_bytes), "yes" if la.need_backward else "no"))
    _say(out, "  (* = in place)")
    _say(out)
    _say(out, "Backward:")
    for i, b in enumerate(rec.backward):
        _say(out, "  %-22s %-3s %s" % (net.layer_names[i], "yes" if b.need else "no", b.detail))
    _say(out)
    _say(out, "Splits inserted (%d):" % len(rec.splits))
    for s in rec.splits:
        _say(out, "  %s: blob '%s' from %s feeds %d consumers (%s)" % (
            s.name, s.blob, s.producer, len(s.tops),
            ", ".join("%s" % (c.layer or "loss") for c in s.consumers) or ", ".join(s.tops)))
    _say(out, "Shared params (%d):" % len(rec.shared))
    for s in rec.shared:
        _say(out, "  %s param %d ('%s') owned by %s param %d (%s)" % (
            s.layer, s.param_index, s.name, s.owner_layer, s.owner_param_index, s.mode))
    _say(out)
    t = a.totals
    _say(out, "Params: %d (%s); with shared: %d" % (t["params"], human_count(t["params"]), t["params_all"]))
    _say(out, "MACC: %d (%s); FLOPs: %d (%s) (forward, one batch)" % (
        t["macc"], human_count(t["macc"]), t["flops"], human_count(t["flops"])))
    _say(out, "Memory required for data: %d (%s) = allocated %d + in place %d + shared with a bottom %d%s" % (
        net.memory_used_bytes, human_bytes(net.memory_used_bytes), t["allocated_top_bytes"], t["inplace_bytes"],
        t["shared_top_bytes"], "" if t["reconciles"] else " (shapes changed since Init)"))
    _say(out, "Param memory: %d (%s) data + the same for diffs; sharing saves %d" % (
        t["param_data_bytes"], human_bytes(t["param_data_bytes"]), t["shared_param_bytes"]))
    if t["uncounted_layers"]:
        _say(out, "FLOPs not modelled for %d layer(s): %s" % (
            t["uncounted_layers"], ", ".join("%s (%s)" % (l.name, l.type) for l in a.layers if not l.counted)))
    return EXIT_OK


def cmd_time(args, out, err):
    from engine.instruments.timing import time_net
    from engine.tools.caffe_tools import ToolError
    args.model = args.model or args.model_flag
    if not args.model:
        raise ToolError(check_failed("FLAGS_model.size() > 0", 0, 0, "Need a model definition to time."))
    phase = _phase(args.phase, 0)
    gpus = args.gpu
    if gpus is not None and "," in str(gpus):
        ids = str(gpus).split(",")
        for extra in reversed(ids[1:]):
            logging.getLogger("engine.caffe").info("Not using GPU #%s for single-GPU function", extra)
        gpus = ids[0]
    if gpus is not None:
        logging.getLogger("engine.caffe").info("Use GPU with device ID %s", gpus)
    else:
        logging.getLogger("engine.caffe").info("Use CPU.")
    net = build_net(args.model, phase, args.level, _stages(args.stage), args.weights, args.seed, gpus)
    fill_inputs(net, args.seed)
    prog = Progress(args.iterations, "time", enabled=args.quiet and not args.no_progress)
    res = time_net(net, args.iterations, warmup=args.warmup, progress=prog)
    for line in res.summary_lines():
        _say(out, line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res.to_dict(), f, indent=1)
    return EXIT_OK


def _print_table(step, out, number):
    from engine.core.log import num
    _say(out, "step %d: %s layers %d..%d on %s%s (%.3f ms)" % (
        number, step.kind, step.start, step.end, step.device,
        "" if step.iteration is None else ", iteration %d" % step.iteration, step.wall_ms))
    _say(out, "  %-20s %-14s %9s  %-6s %-24s %-4s %11s %11s %11s %11s %7s %5s %5s" % (
        "layer", "type", "ms", "role", "blob", "side", "mean|x|", "min", "max", "std", "zero%", "nan", "inf"))
    for rec in step.layers:
        first = True
        for b in rec.blobs:
            for which in ("data", "diff"):
                s = getattr(b, which)
                if s is None:
                    continue
                if step.kind == "backward" and which == "data":
                    continue
                _say(out, "  %-20s %-14s %9s  %-6s %-24s %-4s %11s %11s %11s %11s %7.2f %5d %5d" % (
                    rec.layer[:20] if first else "", rec.type[:14] if first else "",
                    ("%.3f" % rec.time_ms) if first else "", b.role, b.name[:24], which,
                    num(np.float32(s.asum_mean)), num(np.float32(s.min)), num(np.float32(s.max)),
                    num(np.float32(s.std)), 100.0 * s.frac_zero, s.nan, s.inf))
                first = False
            if step.kind == "update" and b.ratio is not None:
                _say(out, "  %-20s %-14s %9s  %-6s %-24s |dw|/|w| = %s" % ("", "", "", "", b.name[:24],
                                                                       num(b.ratio)))
        if first:
            _say(out, "  %-20s %-14s %9.3f  (no blobs)" % (rec.layer[:20], rec.type[:14], rec.time_ms))


def _breakpoints(conditions, net, solver):
    """engine.instruments.breakpoints.Breakpoints of --break-when (a bad one is a usage error)."""
    from engine.instruments.breakpoints import Breakpoints, ConditionError
    try:
        bps = Breakpoints(conditions, net=net)
    except ConditionError as e:
        raise UsageError("--break-when: %s" % e) from None
    for b in bps.items:
        if b.condition.solver_only and solver is None:
            raise UsageError("--break-when %s watches a solver run's loss: add --solver SOLVER" % b.condition)
    return bps


def _run_watched(net, iterations, backward, seed, progress, rec, bps):
    """run_records under breakpoints: the Hit that stopped it, or None."""
    from engine.instruments.breakpoints import run_backward, run_forward
    if backward is None:
        backward = any(net.layer_need_backward)
    fill_inputs(net, seed)
    last = len(net.layers) - 1
    for it in range(int(iterations)):
        rec.iteration = it
        hit = run_forward(net, 0, last, bps, rec).hit
        if hit is None and backward:
            hit = run_backward(net, last, 0, bps, rec).hit
        if hit is not None:
            return hit
        progress(it + 1)
    return None


def _solver_step_watched(solver, rec, bps):
    """One solver iteration under breakpoints: a hit inside it (forward, backward),
    after the update, or on the loss; None when none fired."""
    from engine.instruments.breakpoints import BreakpointHit, SolverWatch
    try:
        with SolverWatch(solver, bps, rec):
            solver.step(1)
    except BreakpointHit as e:
        return e.hit
    return None


def _net_or_solver(args, command):
    """``(net, solver)`` of debug/report: the solver's train net with --solver (solver None
    otherwise), the weights copied in; else MODEL built as ``build_net`` does."""
    if not args.solver:
        if not args.model:
            raise UsageError("%s needs MODEL (or --solver)" % command)
        net = build_net(args.model, _phase(args.phase, 0), args.level, _stages(args.stage), args.weights,
                        args.seed, args.gpu)
        return net, None
    from engine.core import backend
    from engine.core.solvers import get_solver
    _use_device(args.gpu)
    backend.set_random_seed(args.seed)
    solver = get_solver(args.solver)
    if args.weights:
        solver.net.copy_from(args.weights)
    return solver.net, solver


def cmd_debug(args, out, err):
    from engine.instruments import health
    from engine.instruments.debug import NonFiniteError, Recorder, all_params_line, caffe_debug_lines
    net, solver = _net_or_solver(args, "debug")
    bps = _breakpoints(args.break_when, net, solver)
    rec = Recorder(net, sentinel=args.sentinel, bins=0 if args.no_hist else 32, level=args.records)
    prog = Progress(args.iterations, "debug", enabled=not args.no_progress and not args.verbose)
    failure = hit = None
    try:
        if solver is not None:
            rec.attach_solver(solver)
            fill_inputs(net, args.seed)
            for it in range(args.iterations):
                if bps.items:
                    hit = _solver_step_watched(solver, rec, bps)
                    if hit is not None:
                        break
                else:
                    solver.step(1)
                prog(it + 1)
        elif bps.items:
            hit = _run_watched(net, args.iterations, None if not args.no_backward else False, args.seed, prog,
                               rec, bps)
        else:
            run_records(net, args.iterations, backward=None if not args.no_backward else False, seed=args.seed,
                        progress=prog, recorder=rec)
    except NonFiniteError as e:
        failure = e
    for number, step in enumerate(rec.steps, 1):
        if args.format == "caffe":
            for line in caffe_debug_lines(step):
                _say(out, line)
            if step.kind == "backward" and step.start == len(net.layers) - 1 and step.end == 0 and failure is None:
                _say(out, all_params_line(net))
        else:
            _print_table(step, out, number)
    if hit is not None:
        _say(out, hit.message)
    findings = health.check(rec.steps, net=net)
    if findings:
        _say(out, "")
        _say(out, "Findings (%d):" % len(findings))
        for f in findings:
            _say(out, "  %-7s %-18s %s" % (f.severity, f.check, f.message))
    if args.report:
        from engine.instruments.report import write_report
        write_report(args.report, net, rec, findings=findings, breakpoints=bps if bps.items else None)
        _say(err, "Wrote report to %s" % args.report)
    if failure is not None:
        raise failure
    return EXIT_BREAK if hit is not None else EXIT_OK


def cmd_report(args, out, err):
    from engine.instruments.report import FORMATS, render
    fmt = args.format
    if fmt is None:
        from engine.instruments.report import format_from_path
        fmt = format_from_path(args.output) if args.output else "json"
    if fmt not in FORMATS:
        raise UsageError("--format must be one of html, json, md, csv")
    net, solver = _net_or_solver(args, "report")
    from engine.instruments.debug import NonFiniteError, Recorder
    rec = Recorder(net)
    prog = Progress(args.iterations, "report", enabled=not args.no_progress and not args.verbose)
    if not args.no_run:
        try:
            if solver is not None:
                rec.attach_solver(solver)
                fill_inputs(net, args.seed)
                for it in range(args.iterations):
                    solver.step(1)
                    prog(it + 1)
            else:
                run_records(net, args.iterations, seed=args.seed, progress=prog, recorder=rec)
        except NonFiniteError:
            pass
    timing = None
    if args.time:
        from engine.instruments.timing import time_net
        timing = time_net(net, args.time)
    text = render(net, recorder=rec, fmt=fmt, timing=timing,
                  meta={"command": "report", "iterations": 0 if args.no_run else args.iterations,
                        "seed": args.seed, "model": args.model, "solver": args.solver})
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        _say(err, "Wrote %s report to %s" % (fmt, args.output))
    else:
        out.write(text)
    return EXIT_OK


def _is_log(path):
    p = path.lower()
    if p.endswith((".log", ".txt", ".info")) or ".log." in p:
        return True
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    from engine.instruments.caffe_log import GLOG
    return any(GLOG.match(l) for l in head.splitlines()[:20])


def cmd_compare(args, out, err):
    from engine.instruments.compare import compare_runs
    sides = []
    ref_net = None
    b = args.b if args.b is not None else args.a
    if args.b is None and not args.gpu and not args.b_gpu:
        raise UsageError("compare needs two runs (A B), or one model with --gpu (CPU vs GPU)")
    gpu_a = args.a_gpu
    gpu_b = args.b_gpu if args.b_gpu is not None else ("0" if args.gpu else None)
    labels = []
    for path, gpu in ((args.a, gpu_a), (b, gpu_b)):
        if path.endswith(".json"):
            sides.append(path)
            labels.append(os.path.basename(path))
        elif _is_log(path):
            from engine.instruments.caffe_log import read_caffe_log
            sides.append(read_caffe_log(path))
            labels.append(os.path.basename(path) + " (Caffe log)")
        else:
            net, rec = _engine_run_for_compare(path, args, gpu, reference=ref_net)
            ref_net = ref_net or net
            sides.append(rec)
            labels.append("%s on %s" % (os.path.basename(path), "GPU" if gpu is not None else "CPU"))
    cmp = compare_runs(sides[0], sides[1], rtol=args.rtol, label_a=labels[0], label_b=labels[1])
    _say(out, cmp.format(only_bad=not args.all, limit=None if args.all else 40))
    if args.json:
        from engine.instruments.report import _clean
        with open(args.json, "w") as f:
            json.dump(_clean(cmp.to_dict()), f, indent=1)
    return EXIT_OK if cmp.ok else EXIT_DIFFER


def cmd_upgrade(args, out, err):
    """Any of the three upgrade tools, the kind of input guessed (or --binary / --kind)."""
    from engine.core import io
    from engine.core.errors import ParseError
    from engine.tools import caffe_tools
    path = args.input
    with open(path, "rb") as f:
        data = f.read()
    binary = args.binary or path.lower().endswith((".caffemodel", ".binaryproto", ".pb")) or io._looks_binary(data)
    if binary:
        param = io.parse_binary(data, caffe_pb2.NetParameter, path)
        return caffe_tools.upgrade_net_proto_binary(path, args.output, param)
    kind = args.kind
    if kind in (None, "net"):
        try:
            param = io.parse_prototxt(data, caffe_pb2.NetParameter, path)
            return caffe_tools.upgrade_net_proto_text(path, args.output, param)
        except ParseError as net_error:
            if kind == "net":
                raise
            try:
                param = io.parse_prototxt(data, caffe_pb2.SolverParameter, path)
            except ParseError:
                raise ParseError("Failed to parse input text file as NetParameter or SolverParameter: %s"
                                 % net_error.detail, net_error.path, net_error.line, net_error.column) from None
    else:
        param = io.parse_prototxt(data, caffe_pb2.SolverParameter, path)
    return caffe_tools.upgrade_solver_proto_text(path, args.output, param)


def _upgrade_tool(name):
    """upgrade_net_proto_text / upgrade_net_proto_binary / upgrade_solver_proto_text IN OUT:
    exit 2 when the input does not parse, 1 when the upgrade reported errors, as Caffe's tools."""
    def cmd(args, out, err):
        from engine.tools import caffe_tools
        try:
            return getattr(caffe_tools, name)(args.input, args.output)
        except caffe_tools.UpgradeFailed as e:
            logging.getLogger("engine.tools").error("%s", e)
            return 2
    return cmd


def cmd_device_query(args, out, err):
    from engine.tools.caffe_tools import device_query
    return device_query(args.gpu)


def cmd_convert_imageset(args, out, err):
    from engine.tools.caffe_tools import convert_imageset
    return convert_imageset(args.root, args.listfile, args.db_name, gray=args.gray, shuffle=args.shuffle,
                            backend=args.backend, resize_width=args.resize_width, resize_height=args.resize_height,
                            check_size=args.check_size, encoded=args.encoded, encode_type=args.encode_type,
                            seed=args.seed)


def cmd_compute_image_mean(args, out, err):
    from engine.tools.caffe_tools import compute_image_mean
    compute_image_mean(args.input_db, args.output_file, backend=args.backend)
    return EXIT_OK


def cmd_extract_features(args, out, err):
    from engine.tools.caffe_tools import extract_features
    return extract_features(args.pretrained, args.proto, args.blob_names, args.dataset_names, args.num_mini_batches,
                            args.db_type, mode=args.mode or "CPU", device_id=args.device_id)


def cmd_draw(args, out, err):
    from engine.instruments.draw import draw_net_to_file
    phase = args.phase.upper() if args.phase else "ALL"
    if phase not in ("TRAIN", "TEST", "ALL"):
        raise UsageError('--phase must be TRAIN, TEST or ALL (got %r)' % args.phase)
    _say(out, "Drawing net to %s" % args.output)
    draw_net_to_file(args.model, args.output, rankdir=args.rankdir, phase=phase, level=args.level,
                     stages=_stages(args.stage), splits=args.splits)
    return EXIT_OK


class _TrainWatch:
    """train's --break-when and -o: for ``train(watch=...)``, breakpoints on the solver's
    net (checked against it once built), a health-level Recorder of its last iterations
    (for update ratios and the report), and what stopped the run."""

    def __init__(self, conditions):
        self.conditions = list(conditions)
        self.solver = self.recorder = self.bps = None

    def __call__(self, solver, action):
        from engine.instruments.breakpoints import SolverWatch
        from engine.instruments.debug import Recorder
        self.solver = solver
        self.bps = _breakpoints(self.conditions, solver.net, solver)
        self.recorder = Recorder(solver.net, bins=0, max_steps=30, level="health")
        self.recorder.attach_solver(solver)
        return SolverWatch(solver, self.bps, self.recorder, action=action)

    def report(self, path, err):
        from engine.instruments import health
        from engine.instruments.report import write_report
        if self.solver is None:
            return
        net, rec = self.solver.net, self.recorder
        write_report(path, net, rec, findings=health.check(rec.steps, net=net),
                     breakpoints=self.bps if self.bps.items else None)
        _say(err, "Wrote report to %s" % path)


def cmd_train(args, out, err):
    from engine.instruments.breakpoints import BreakpointHit
    from engine.tools.solver_commands import train
    stage = _stages(args.stage) if args.stage else ""
    watch = _TrainWatch(args.break_when) if args.break_when or args.report else None
    try:
        code = train(args.solver, weights=args.weights, snapshot=args.snapshot, gpu=args.gpu, level=args.level,
                     stage=stage, sigint_effect=args.sigint_effect, sighup_effect=args.sighup_effect, watch=watch)
    except BreakpointHit as stop:
        _say(out, stop.hit.message)
        logging.getLogger("engine.caffe").info("Optimization stopped at iteration %s: %s", stop.hit.iteration,
                                               stop.hit.describe())
        code = EXIT_BREAK
    if args.report:
        watch.report(args.report, err)
    return code


def cmd_test(args, out, err):
    from engine.tools.solver_commands import test
    stage = _stages(args.stage) if args.stage else ""
    return test(args.model, args.weights, iterations=args.iterations, gpu=args.gpu, level=args.level, stage=stage)


def cmd_run(args, out, err):
    from engine.tools.run_script import GlogEnvLevel, run_module, run_script
    if args.module is None and args.script is None:
        raise UsageError("run: a script (run SCRIPT ARGS...) or a module (run -m MODULE ARGS...)")
    if args.module == []:
        raise UsageError("run: Argument expected for the -m option")
    if not (args.verbose or args.quiet):
        for handler in logging.getLogger("engine").handlers:      # _Logging's, for this command
            handler.addFilter(GlogEnvLevel(logging.INFO))
    if args.module is not None:
        return run_module(args.module[0], args.module[1:], err=err)
    return run_script(args.script, args.args, err=err)


def cmd_export_onnx(args, out, err):
    """export-onnx: the net as an ONNX model with Caffe's exact semantics (engine.ports)."""
    from engine.ports.onnx_export import export_onnx
    net = build_net(args.model, _phase(args.phase, 1), args.level, _stages(args.stage), args.weights, args.seed)
    prog = Progress(len(net.layers), "export-onnx", enabled=not args.no_progress and not args.verbose)
    res = export_onnx(net, args.output, opset=args.opset, all_blobs=args.all_blobs, progress=prog)
    _say(out, "Wrote %s: %s" % (args.output, res.summary()))
    if not args.verify:
        return EXIT_OK
    from engine.ports.verify import random_inputs, verify
    random_inputs(net, args.seed)
    result = verify(net, res.model, rtol=args.rtol)
    if args.verbose or not result.ok:
        _say(out, result.table(only_failures=not args.verbose))
    _say(out, "verify (onnxruntime vs the engine, random inputs seed %d): %s" % (args.seed, result.summary()))
    return EXIT_OK if result.ok else EXIT_DIFFER


def _add_export_onnx_command(sub):
    p = sub.add_parser("export-onnx", help="export the net to ONNX with Caffe's exact semantics (docs/ports.md)")
    p.add_argument("model", help="the net prototxt")
    p.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    p.add_argument("--weights", help="a .caffemodel (default: the engine's fillers, seeded by --seed)")
    p.add_argument("--opset", help="ONNX opset: 13 (default), a number (clamped to the newest onnxruntime runs), "
                   "or 'latest'")
    p.add_argument("--phase", help="TEST (default) or TRAIN")
    p.add_argument("--level", type=int, default=0, help="NetState level (default 0)")
    p.add_argument("--stage", action="append", default=[], help="NetState stage (repeatable; or comma separated)")
    p.add_argument("--all-blobs", action="store_true", help="every blob (its state after Forward) as an output")
    p.add_argument("--verify", action="store_true", help="then run onnxruntime and the engine on random inputs and "
                   "compare every blob (exit 3 if one differs)")
    p.add_argument("--rtol", type=float, default=1e-5, help="--verify's tolerance: max |diff| <= rtol x max |blob| "
                   "(+ 1e-6) for each blob (default 1e-5)")
    p.add_argument("--seed", type=int, default=1, help="seed of the fillers and of --verify's inputs (default 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress line (one is drawn on a terminal)")
    _log_flags(p)
    p.set_defaults(func=cmd_export_onnx, log_default=False)


# ---------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        raise UsageError("%s: %s" % (self.prog, message))


def _common(p, phase=True, weights=True, iterations=None, gpu=True):
    if phase:
        p.add_argument("--phase", help="TRAIN (default) or TEST")
    p.add_argument("--level", type=int, default=0, help="NetState level (default 0)")
    p.add_argument("--stage", action="append", default=[], help="NetState stage (repeatable; or comma separated)")
    if weights:
        p.add_argument("--weights", help="a .caffemodel (or .h5) to load")
    if gpu:
        p.add_argument("--gpu", nargs="?", const="0", default=None, metavar="ID",
                       help="run on the GPU (device ID, default 0)")
    if iterations is not None:
        p.add_argument("--iterations", type=int, default=iterations, help="default %d" % iterations)
    p.add_argument("--seed", type=int, default=1, help="seed of fillers and inputs (default 1)")
    p.add_argument("-v", "--verbose", action="store_true", help="Caffe's log lines on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no log lines on stderr")
    p.add_argument("--no-progress", action="store_true", help="no progress line")


# caffe.cpp's flags: every `caffe` command accepts all of them (and ignores those it does not use).
CAFFE_FLAGS = {
    "gpu": dict(nargs="?", const="0", default=None, metavar="IDS",
                help="run on these GPUs: device ids separated by ',', or 'all' (train: default from the "
                     "solver's solver_mode)"),
    "solver": dict(help="the solver prototxt (train)"),
    "model": dict(help="the model prototxt (test, time)"),
    "phase": dict(help="TRAIN or TEST (time; default TRAIN)"),
    "level": dict(type=int, default=0, help="the NetState level (default 0)"),
    "stage": dict(action="append", default=[], help="NetState stages, separated by ',' (repeatable)"),
    "snapshot": dict(help="a .solverstate to resume training from (train)"),
    "weights": dict(help="caffemodel(s) to start from, separated by ',' (train: finetune; test: required)"),
    "iterations": dict(type=int, default=50, help="iterations to run (test, time; default 50)"),
    "sigint_effect": dict(default="stop", help="on SIGINT: snapshot, stop (default) or none (train)"),
    "sighup_effect": dict(default="snapshot", help="on SIGHUP: snapshot (default), stop or none (train)"),
}


def _caffe_flags(p, skip=()):
    for name, kw in CAFFE_FLAGS.items():
        if name not in skip:
            p.add_argument("--" + name, **kw)


def _log_flags(p):
    p.add_argument("-v", "--verbose", action="store_true", help="Caffe's log lines on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")


def _quiet_flags(p):
    """-v/-q without help lines (upgrade, draw, run)."""
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")


PROG = "python -m engine"


def default_prog(argv0):
    """The name the command line calls itself by: the console script's or a shim's file name
    (``caffe-engine``, ``caffe``, ``convert_mnist_data.bin``), or ``python -m engine``."""
    base = os.path.basename(argv0 or "")
    return PROG if base in ("", "__main__.py", "-m", "-c") else base


def make_parser(only=None, prog=PROG):
    """The command line's parser; ``only="run"``: with the run command alone (what
    ``python -m engine run SCRIPT`` needs: a script's start-up skips building the others)."""
    ap = _Parser(prog=prog, description="Caffe's command line and debugging instruments on the "
                 "engine.", epilog="Exit codes: 0 ok, 1 engine error, 2 usage, 3 compare: runs differ, "
                 "4 debug/train: a breakpoint fired.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    if only == "run":
        _add_run_command(sub)
        ap.command_parsers = sub.choices
        return ap
    _add_instrument_commands(sub)
    _add_file_commands(sub)
    _add_caffe_commands(sub)
    _add_caffe_tool_commands(sub)
    _add_run_command(sub)
    from engine.tools import converters, port_commands, selftest, shims
    converters.add_parsers(sub)         # convert_mnist_data, convert_cifar_data, convert_mnist_siamese_data
    shims.add_parser(sub)               # build-shims: Caffe's build/ layout for its tutorial scripts
    selftest.add_parser(sub)
    _add_export_onnx_command(sub)
    port_commands.add_parsers(sub)      # compare-port, export-torch
    ap.command_parsers = sub.choices
    return ap


def _add_instrument_commands(sub):
    """info, time, debug, report, compare: the engine's instruments on a model."""
    p = sub.add_parser("info", help="what Init builds: layers, tops, params, FLOPs, memory, backward, filtering")
    p.add_argument("model")
    _common(p)
    p.add_argument("--json", action="store_true", help="the report document without steps, as JSON")
    p.add_argument("--structure-only", action="store_true",
                   help="data layers whose source is missing (an LMDB, an image list, HDF5 files not on this "
                        "machine) are stood in by Input layers shaped from their params (batch_size, crop_size, "
                        "new_height/new_width, the mean file); what cannot be known is assumed and said")
    p.add_argument("--data-shape", action="append", default=[], metavar="TOP=C,H,W",
                   help="with --structure-only: a stood-in top's per-item shape (repeatable)")
    p.set_defaults(func=cmd_info, log_default=False)

    p = sub.add_parser("time", help="caffe time: benchmark model execution time (per-layer forward/backward "
                       "averages)")
    p.add_argument("model", nargs="?", help="the model prototxt (or -model)")
    _common(p, iterations=50)
    p.add_argument("--model", dest="model_flag", metavar="MODEL", help=CAFFE_FLAGS["model"]["help"])
    _caffe_flags(p, skip=("model", "phase", "level", "stage", "weights", "gpu", "iterations"))
    p.add_argument("--warmup", type=int, default=0, help="untimed passes after Caffe's first one")
    p.add_argument("--json", metavar="FILE", help="also write the timings as JSON")
    p.set_defaults(func=cmd_time, log_default=True)

    _add_debug_command(sub)

    p = sub.add_parser("report", help="export a run as HTML, JSON, Markdown or CSV")
    p.add_argument("model", nargs="?")
    _common(p, iterations=1)
    p.add_argument("--format", choices=("html", "json", "md", "markdown", "csv"))
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p.add_argument("--solver", help="step this solver instead (records updates too)")
    p.add_argument("--no-run", action="store_true", help="static report only (no forward/backward)")
    p.add_argument("--time", type=int, default=0, metavar="N", help="also benchmark N iterations")
    p.set_defaults(func=cmd_report, log_default=False)

    p = sub.add_parser("compare", help="two runs side by side and where they part (models, reports, Caffe logs)")
    p.add_argument("a", help="a model prototxt, a Caffe log or a report .json")
    p.add_argument("b", nargs="?", help="the same kinds (default: A again, with --gpu)")
    _common(p, iterations=1, gpu=False)
    p.add_argument("--gpu", action="store_true", help="B runs on GPU 0 (A on the CPU)")
    p.add_argument("--a-gpu", metavar="ID", help="run A on this GPU")
    p.add_argument("--b-gpu", metavar="ID", help="run B on this GPU")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    p.add_argument("--all", action="store_true", help="list every layer, not only those that differ")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.set_defaults(func=cmd_compare, log_default=False)


def _add_debug_command(sub):
    p = sub.add_parser("debug", help="forward/backward with records: Caffe's debug_info lines or a table, "
                       "and health findings")
    p.add_argument("model", nargs="?")
    _common(p, iterations=1)
    p.add_argument("--solver", help="step this solver instead (records updates too)")
    p.add_argument("--format", choices=("caffe", "table"), default="caffe")
    p.add_argument("--sentinel", action="store_true", help="stop at the first non-finite output or gradient")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--no-hist", action="store_true", help="skip histograms (faster)")
    p.add_argument("--records", choices=("full", "health"), default="full",
                   help="every statistic, or health: mean |x| and NaN/Inf only (cheapest)")
    p.add_argument("-o", "--report", metavar="FILE", help="also write a report (format from the extension)")
    p.add_argument("--break-when", action="append", default=[], metavar="COND",
                   help="stop when COND holds (repeatable): nonfinite, layer=NAME, BLOB.STAT OP N, "
                        "BLOB.diff.STAT OP N (STAT: mean_abs, max_abs, std, zero_fraction; OP: > >= < <=), "
                        "LAYER.update_ratio OP N, loss.jump > FACTOR, loss.nonfinite (with --solver); "
                        "prints 'break: LAYER: COND' and exits with 4")
    p.set_defaults(func=cmd_debug, log_default=False)


def _add_file_commands(sub):
    """upgrade, draw: a model file in, a file out."""
    p = sub.add_parser("upgrade", help="upgrade a net prototxt, a caffemodel or a solver prototxt")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--binary", action="store_true", help="the input is a binary NetParameter (caffemodel)")
    p.add_argument("--kind", choices=("net", "solver"), help="what a text input holds (default: guessed)")
    _quiet_flags(p)
    p.set_defaults(func=cmd_upgrade, log_default=True)

    p = sub.add_parser("draw", help="draw the net's DAG (svg; png/pdf with kaleido; dot; html)")
    p.add_argument("model")
    p.add_argument("output")
    p.add_argument("--rankdir", default="LR", help="LR (default), RL, TB or BT")
    p.add_argument("--phase", help="TRAIN, TEST or ALL (default: ALL, the net as written)")
    p.add_argument("--level", type=int, default=0)
    p.add_argument("--stage", action="append", default=[])
    p.add_argument("--splits", action="store_true", help="insert Caffe's Split layers")
    _quiet_flags(p)
    p.set_defaults(func=cmd_draw, log_default=False)


def _add_caffe_commands(sub):
    """caffe.cpp's commands: train, test, device_query (time is with the instruments)."""
    p = sub.add_parser("train", help="caffe train: train or finetune a model")
    _caffe_flags(p)
    _log_flags(p)
    p.add_argument("-o", "--report", metavar="FILE", help="also write a report of the last iterations (format "
                   "from the extension), with the breakpoints and their hits")
    p.add_argument("--break-when", action="append", default=[], metavar="COND",
                   help="stop training when COND holds (repeatable; as debug's: nonfinite, layer=NAME, "
                        "BLOB.STAT OP N, LAYER.update_ratio OP N, loss.jump > FACTOR, loss.nonfinite, loss OP N); "
                        "prints 'break: LAYER: COND' and exits with 4")
    p.set_defaults(func=cmd_train, log_default=True)

    for name, func, what in (("test", cmd_test, "score a model"),
                             ("device_query", cmd_device_query, "show GPU diagnostic information")):
        p = sub.add_parser(name, help="caffe %s: %s" % (name, what))
        _caffe_flags(p)
        _log_flags(p)
        p.set_defaults(func=func, log_default=True)


def _add_caffe_tool_commands(sub):
    """Caffe's tools/: convert_imageset, compute_image_mean, extract_features, the upgrade tools."""
    _add_convert_imageset_command(sub)

    p = sub.add_parser("compute_image_mean", help="Caffe's compute_image_mean: the mean image of a database, "
                       "as a binaryproto")
    p.add_argument("input_db", metavar="INPUT_DB")
    p.add_argument("output_file", metavar="OUTPUT_FILE", nargs="?", help="the mean .binaryproto to write")
    p.add_argument("--backend", default="lmdb", help="lmdb (default) or leveldb")
    _log_flags(p)
    p.set_defaults(func=cmd_compute_image_mean, log_default=True)

    p = sub.add_parser("extract_features", help="Caffe's extract_features: blobs of a net, batch after batch, "
                       "into databases of float Datums")
    p.add_argument("pretrained", metavar="pretrained_net_param", help="the .caffemodel")
    p.add_argument("proto", metavar="feature_extraction_proto_file", help="the net (TEST phase) with a data layer")
    p.add_argument("blob_names", metavar="extract_feature_blob_name1[,name2,...]")
    p.add_argument("dataset_names", metavar="save_feature_dataset_name1[,name2,...]",
                   help="one new database per blob")
    p.add_argument("num_mini_batches")
    p.add_argument("db_type", help="lmdb or leveldb")
    p.add_argument("mode", metavar="CPU/GPU", nargs="?", default="CPU")
    p.add_argument("device_id", metavar="DEVICE_ID", nargs="?")
    _log_flags(p)
    p.set_defaults(func=cmd_extract_features, log_default=True)

    for name, what in (("upgrade_net_proto_text", "a V0/V1 net prototxt"),
                       ("upgrade_net_proto_binary", "a V0/V1 binary net (caffemodel)"),
                       ("upgrade_solver_proto_text", "an old solver prototxt")):
        p = sub.add_parser(name, help="Caffe's %s: upgrade %s to the current format" % (name, what))
        p.add_argument("input", metavar="IN")
        p.add_argument("output", metavar="OUT")
        _log_flags(p)
        p.set_defaults(func=_upgrade_tool(name), log_default=True)


def _add_convert_imageset_command(sub):
    p = sub.add_parser("convert_imageset", help="Caffe's convert_imageset: images listed in a file into an LMDB "
                       "or LevelDB of Datums")
    p.add_argument("root", metavar="ROOTFOLDER/", help="prefixed to every name of the list (keep its trailing /)")
    p.add_argument("listfile", metavar="LISTFILE", help="lines of '<name> <label>'")
    p.add_argument("db_name", metavar="DB_NAME", help="the database to create (must not exist)")
    p.add_argument("--gray", action="store_true", help="read the images as grey (1 channel)")
    p.add_argument("--shuffle", action="store_true", help="shuffle the list first")
    p.add_argument("--backend", default="lmdb", help="lmdb (default) or leveldb")
    p.add_argument("--resize_width", type=int, default=0, help="resize to this width (with -resize_height)")
    p.add_argument("--resize_height", type=int, default=0, help="resize to this height (with -resize_width)")
    p.add_argument("--check_size", action="store_true", help="stop when an image's data size differs from the "
                   "first's")
    p.add_argument("--encoded", action="store_true", help="store the encoded image (the file's bytes)")
    p.add_argument("--encode_type", default="", help="encode as this type (png, jpg, ...); implies -encoded")
    p.add_argument("--seed", type=int, help="seed of -shuffle (default: the engine's generator)")
    _log_flags(p)
    p.set_defaults(func=cmd_convert_imageset, log_default=True)


def _add_run_command(sub):
    p = sub.add_parser("run", help="run a pycaffe script unchanged, with the engine as `caffe`")
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ARGS",
                   help="run a module as `python -m MODULE ARGS...` does (e.g. -m pytest)")
    p.add_argument("script", nargs="?", help="the Python script (run as __main__, as `python SCRIPT ARGS...`)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    _quiet_flags(p)
    p.set_defaults(func=cmd_run, log_default=True)


def _where(e):
    """The engine error as one line, naming the layer/blob when the text does not."""
    msg = " ".join(str(e).split("\n")).strip() or type(e).__name__
    extra = []
    layer, blob = getattr(e, "layer", None), getattr(e, "blob", None)
    if layer and ("'%s'" % layer) not in msg and (" %s" % layer) not in msg:
        extra.append("layer '%s'" % layer)
    if blob and ("'%s'" % blob) not in msg and (" %s" % blob) not in msg:
        extra.append("blob '%s'" % blob)
    if extra:
        msg += " [%s]" % ", ".join(extra)
    return msg


_CAFFE_COMMANDS = ("train", "test", "device_query", "time")
_HELP = ("-h", "--help", "-help", "--helpfull", "-helpfull")


def usage_text(ap):
    """What ``python -m engine`` prints without a command (caffe's usage: its commands
    first, then the others, then caffe.cpp's flags)."""
    helps = {a.dest: a.help for a in ap._subparsers._group_actions[0]._choices_actions}
    names = list(_CAFFE_COMMANDS) + sorted(n for n in ap.command_parsers if n not in _CAFFE_COMMANDS)
    lines = ["%s: Caffe's command line on the engine" % ap.prog,
             "usage: %s <command> <args>     (as caffe <command> <args>)" % ap.prog, "", "commands:"]
    lines += ["  %-26s %s" % (n, helps.get(n, "")) for n in names]
    lines += ["", "  Limits of every command (any spelling, anywhere on the line):"]
    lines += ["    --%-17s %s" % (n, h) for n, (_kw, h) in BUDGET_FLAGS.items()]
    lines += ["", "  Flags of caffe's commands, spelled -flag value, -flag=value, --flag value or --flag=value:"]
    lines += ["    -%-15s %s" % (n, kw["help"]) for n, kw in sorted(CAFFE_FLAGS.items())]
    lines += ["", "%s <command> --help: a command's own arguments and flags." % ap.prog,
              "Exit codes: 0 ok, 1 engine error (Caffe's fatal message), 2 usage, 3 compare: runs differ."]
    return "\n".join(lines) + "\n"


def _value_flags(commands):
    """Names (no dashes) of the options, of any command, that take a value."""
    out = set()
    for parser in commands.values():
        for a in parser._actions:
            if a.option_strings and a.nargs != 0:
                out.update(s.lstrip("-") for s in a.option_strings)
    return out


def _unknown_action(name, commands, err):
    """caffe's GetBrewFunction for an unknown name: the actions available, then the fatal line."""
    lg = logging.getLogger("engine.caffe")
    with _Logging(logging.INFO, err):
        lg.error("Available caffe actions:")
        for n in sorted(commands):
            lg.error("\t%s", n)
        lg.critical("Unknown action: %s", name)


def _caffe_spelling(ap, argv, out, err):
    """gflags' spellings: flags before the command moved after it, every flag of the
    command rewritten for argparse (engine.tools.gflags); caffe's usage without a
    command and its message for an unknown one.  Returns ``(argv, exit code or None)``."""
    commands = ap.command_parsers
    argv = gflags.hoist(argv, commands, _value_flags(commands))
    if not argv or (argv[0] not in commands and argv[0].startswith("-") and argv[0] not in _HELP):
        err.write(usage_text(ap))
        return argv, EXIT_USAGE
    if argv[0] in _HELP:
        out.write(usage_text(ap))
        return argv, EXIT_OK
    if argv[0] not in commands:
        _unknown_action(argv[0], commands, err)
        return argv, EXIT_USAGE
    try:
        return [argv[0]] + gflags.normalize(argv[1:], commands[argv[0]]), None
    except gflags.FlagError as e:
        commands[argv[0]].print_usage(err)
        err.write("usage error: %s: %s\n" % (argv[0], e))
        return argv, EXIT_USAGE


# ---------------------------------------------------------------------- budgets and early checks
# The limits every command reads and builds nets under (engine.core.limits), as flags of every
# command, in any of gflags' spellings: flag -> (NetLimits.with_flags keyword, help)
BUDGET_FLAGS = {
    "max-net-mb": ("net_mb", "memory one net may declare at Init, its layers' own included; a net past it is "
                             "refused before its memory is allocated (default: half of this machine's memory; "
                             "0: no limit)"),
    "max-layers": ("layers", "layers of a net (default 50000; 0: no limit)"),
    "max-tops": ("tops", "tops of a net's layers (default 100000; 0: no limit)"),
    "max-text-mb": ("text_mb", "size of a net's prototxt in MB (default 16; 0: no limit)"),
    "max-layer-fields": ("fields", "fields written in one layer: rules, params, ... (default 10000; 0: no limit)"),
}


def _take_budget_flags(argv):
    """``(argv without the budget flags, {keyword: value})``: ``--max-layers N``, ``-max-layers=N``,
    ``--max_layers N``, ... anywhere before a ``run`` command's script (whose own flags they are
    not).  A value that is not a whole number of 0 or more is a UsageError."""
    if argv[:1] == ["run"]:
        return argv, {}
    rest, found = [], {}
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, value = a.lstrip("-").replace("_", "-").partition("=")
        if a.startswith("-") and name in BUDGET_FLAGS:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError("--%s needs a value" % name)
                value = argv[i + 1]
                i += 1
            try:
                number = int(value)
            except ValueError:
                number = -1
            if number < 0:
                raise UsageError("--%s must be a whole number, 0 (no limit) or more (got %r)" % (name, value))
            found[BUDGET_FLAGS[name][0]] = number
        else:
            rest.append(a)
        i += 1
    return rest, found


def _budget(flags):
    """The NetLimits of a command: the defaults, the command line's memory budget (half the RAM)
    and its flags."""
    from engine.core import limits
    base = limits.NetLimits(max_net_bytes=limits.half_the_memory())
    return base.with_flags(**flags)


# the attributes of a command's arguments that name a file it writes ("-": stdout)
_OUTPUTS = ("output", "report", "json", "output_file")


def _check_before_work(args):
    """What a command would only find out after its work: an output file whose folder does not
    exist, ``time``'s iterations.  Raised before any net is read."""
    import errno
    for attr in _OUTPUTS:
        value = getattr(args, attr, None)
        if not isinstance(value, str) or not value or value == "-":
            continue
        folder = os.path.dirname(os.path.abspath(value))
        if not os.path.isdir(folder):
            raise FileNotFoundError(errno.ENOENT, "the folder %s does not exist (nothing was run)" % folder, value)
    if args.command == "time" and getattr(args, "iterations", 1) is not None and args.iterations < 1:
        from engine.core.errors import CaffeError
        raise CaffeError("time: --iterations must be at least 1 (got %d)" % args.iterations)


def main(argv=None, out=None, err=None, prog=None, command=None):
    """Run the command line; returns the exit code (see the module doc).  ``prog``: the name
    usage and --help print (default: the console script's name, from sys.argv[0], when
    ``argv`` is None; else ``python -m engine``); ``command``: a tool that is one command
    (a build shim's ``convert_mnist_data.bin``): ``argv`` are that command's arguments, and
    its usage names ``prog`` alone."""
    from engine.core import limits
    from engine.core.errors import CaffeError  # debug.NonFiniteError is one
    out = out or sys.stdout
    err = err or sys.stderr
    if prog is None:
        prog = default_prog(sys.argv[0]) if argv is None else PROG
    argv = list(sys.argv[1:] if argv is None else argv)
    if command is not None:
        argv = [command] + argv
    try:
        argv, budget_flags = _take_budget_flags(argv)
    except UsageError as e:
        err.write("usage error: %s\n" % e)
        return EXIT_USAGE
    ap = make_parser(only="run" if argv[:1] == ["run"] else None, prog=prog)
    if command is not None:
        ap.command_parsers[command].prog = prog
    argv, code = _caffe_spelling(ap, argv, out, err)
    if code is not None:
        return code
    try:
        args = ap.parse_args(argv)
    except UsageError as e:
        err.write("usage error: %s\n" % e)
        return EXIT_USAGE
    except SystemExit as e:      # --help
        return int(e.code or 0)
    if not getattr(args, "command", None):
        ap.print_help(err)
        return EXIT_USAGE
    verbose, quiet = getattr(args, "verbose", False), getattr(args, "quiet", False)
    level = logging.INFO if (verbose or args.log_default) and not quiet else logging.WARNING
    if quiet:
        level = logging.ERROR
    try:
        _check_before_work(args)
        with _Logging(level, err), limits.using(_budget(budget_flags)):
            code = args.func(args, out, err)
        out.flush()
        return EXIT_OK if code is None else int(code)
    except UsageError as e:
        err.write("usage error: %s\n" % e)
        return EXIT_USAGE
    except CaffeError as e:
        err.write("error: %s\n" % _where(e))
        return EXIT_ERROR
    except OSError as e:          # files that cannot be read or written
        if e.filename is not None:
            err.write("error: %s: %s\n" % (e.filename, e.strerror or e))
        else:
            err.write("error: %s\n" % " ".join(str(e).split()))
        return EXIT_ERROR
    except BrokenPipeError:       # `python -m engine ... | head`
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except Exception:  # pragma: no cover
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return EXIT_INTERRUPT
    finally:
        from engine.core import backend
        backend.set_mode_cpu()

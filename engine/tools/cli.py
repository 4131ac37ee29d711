"""``python -m engine``: Caffe's command line (``caffe train/test/time``,
``upgrade_net_proto_*``, ``draw_net.py``) and the debugging instruments.

    python -m engine info MODEL [--phase TEST] [--json]
    python -m engine time MODEL [--iterations 50] [--gpu [ID]]
    python -m engine debug MODEL [--iterations 1] [--format caffe|table] [--sentinel]
    python -m engine report MODEL --format html|json|md|csv -o FILE
    python -m engine compare A B [--rtol 1e-3] [--gpu]
    python -m engine upgrade IN OUT
    python -m engine draw MODEL OUT [--rankdir LR] [--phase TRAIN|TEST|ALL]
    python -m engine train --solver S [--weights W | --snapshot S] [--gpu [IDS]]
    python -m engine test --model M --weights W [--iterations 50] [--gpu [ID]]

Standard options: ``--phase``, ``--level``, ``--stage`` (repeatable, or comma
separated as Caffe's ``-stage``), ``--weights``, ``--gpu [ID]``,
``--iterations``, ``-v/--verbose`` (Caffe's log lines on stderr in glog's
format; ``train``, ``test`` and ``time`` always log, as caffe does; ``-q``
silences them).

Exit codes: 0 success; 1 an engine error (one line on stderr:
``error: <where: file:line:col / layer / blob>: <Caffe's message>``); 2 a usage
error; 3 ``compare`` found the runs differ; 130 interrupted.
"""
import argparse
import json
import logging
import os
import sys
import time

import numpy as np

from engine.proto import caffe_pb2

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DIFFER, EXIT_INTERRUPT = 0, 1, 2, 3, 130
_LEVEL_CHAR = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E",
               logging.CRITICAL: "F"}


# ---------------------------------------------------------------------- logging
class GlogFormatter(logging.Formatter):
    """``I1121 19:30:28.165256 24645 net.py:475] message`` (glog's prefix)."""

    def format(self, record):
        t = time.localtime(record.created)
        us = int((record.created - int(record.created)) * 1e6)
        return "%s%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] %s" % (
            _LEVEL_CHAR.get(record.levelno, "I"), t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, us,
            record.process or 0, record.filename, record.lineno, record.getMessage())


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
    for i, l in enumerate(net.layers):
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


def build_net(model, phase, level=0, stages=(), weights=None, seed=1, gpu=None):
    """A Net on the device ``gpu`` asks for, its fillers seeded, then ``weights``."""
    from engine.core import backend
    from engine.core.net import Net
    _use_device(gpu)
    backend.set_random_seed(seed)
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
def cmd_info(args, out, err):
    from engine.instruments.analysis import analyze_net, human_bytes, human_count
    net = build_net(args.model, _phase(args.phase, 0), args.level, _stages(args.stage), args.weights, args.seed,
                    args.gpu)
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


def cmd_debug(args, out, err):
    from engine.instruments import health
    from engine.instruments.debug import NonFiniteError, Recorder, all_params_line, caffe_debug_lines
    solver = None
    if args.solver:
        from engine.core import backend
        from engine.core.solvers import get_solver
        _use_device(args.gpu)
        backend.set_random_seed(args.seed)
        solver = get_solver(args.solver)
        net = solver.net
        if args.weights:
            net.copy_from(args.weights)
    else:
        if not args.model:
            raise UsageError("debug needs MODEL (or --solver)")
        net = build_net(args.model, _phase(args.phase, 0), args.level, _stages(args.stage), args.weights,
                        args.seed, args.gpu)
    rec = Recorder(net, sentinel=args.sentinel, bins=0 if args.no_hist else 32, level=args.records)
    prog = Progress(args.iterations, "debug", enabled=not args.no_progress and not args.verbose)
    failure = None
    try:
        if solver is not None:
            rec.attach_solver(solver)
            fill_inputs(net, args.seed)
            for it in range(args.iterations):
                solver.step(1)
                prog(it + 1)
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
    findings = health.check(rec.steps)
    if findings:
        _say(out, "")
        _say(out, "Findings (%d):" % len(findings))
        for f in findings:
            _say(out, "  %-7s %-18s %s" % (f.severity, f.check, f.message))
    if args.report:
        from engine.instruments.report import write_report
        write_report(args.report, net, rec, findings=findings)
        _say(err, "Wrote report to %s" % args.report)
    if failure is not None:
        raise failure
    return EXIT_OK


def cmd_report(args, out, err):
    from engine.instruments.report import FORMATS, render
    fmt = args.format
    if fmt is None:
        from engine.instruments.report import format_from_path
        fmt = format_from_path(args.output) if args.output else "json"
    if fmt not in FORMATS:
        raise UsageError("--format must be one of html, json, md, csv")
    solver = None
    if args.solver:
        from engine.core import backend
        from engine.core.solvers import get_solver
        _use_device(args.gpu)
        backend.set_random_seed(args.seed)
        solver = get_solver(args.solver)
        net = solver.net
        if args.weights:
            net.copy_from(args.weights)
    else:
        if not args.model:
            raise UsageError("report needs MODEL (or --solver)")
        net = build_net(args.model, _phase(args.phase, 0), args.level, _stages(args.stage), args.weights,
                        args.seed, args.gpu)
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
    if p.endswith((".log", ".txt")) or ".log." in p or p.endswith(".INFO".lower()):
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
    for which, path, gpu in (("A", args.a, gpu_a), ("B", b, gpu_b)):
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
    from engine.core import io
    from engine.core.errors import ParseError
    from engine.core.upgrade import (
        net_needs_data_upgrade,
        net_needs_upgrade,
        solver_needs_type_upgrade,
        upgrade_net_as_needed,
        upgrade_net_data_transformation,
        upgrade_solver_as_needed,
    )
    lg = logging.getLogger("engine.core.upgrade")
    path = args.input
    with open(path, "rb") as f:
        data = f.read()
    binary = args.binary or path.lower().endswith((".caffemodel", ".binaryproto", ".pb")) or io._looks_binary(data)
    kind = args.kind
    if binary:
        param = io.parse_binary(data, caffe_pb2.NetParameter, path)
        kind = "net"
    else:
        param = None
        if kind in (None, "net"):
            try:
                param = io.parse_prototxt(data, caffe_pb2.NetParameter, path)
                kind = "net"
            except ParseError as net_error:
                if kind == "net":
                    raise
                try:
                    param = io.parse_prototxt(data, caffe_pb2.SolverParameter, path)
                    kind = "solver"
                except ParseError:
                    raise ParseError("Failed to parse input text file as NetParameter or SolverParameter: %s"
                                     % net_error.detail, net_error.path, net_error.line, net_error.column) \
                        from None
        else:
            param = io.parse_prototxt(data, caffe_pb2.SolverParameter, path)
    success = True
    if kind == "solver":
        if solver_needs_type_upgrade(param):
            param, success = upgrade_solver_as_needed(param, path)
            if not success:
                lg.error("Encountered error(s) while upgrading prototxt; see details above.")
        else:
            lg.error("File already in latest proto format: %s", path)
        io.write_prototxt(args.output, param)
        lg.info("Wrote upgraded SolverParameter text proto to %s", args.output)
    else:
        need_data = net_needs_data_upgrade(param)
        if net_needs_upgrade(param):
            param, success = upgrade_net_as_needed(param, path)
            if not success:
                lg.error("Encountered error(s) while upgrading prototxt; see details above.")
        else:
            lg.error("File already in latest proto format: %s", path)
        if need_data and net_needs_data_upgrade(param):
            param = upgrade_net_data_transformation(param)
        if binary:
            io.write_binary(args.output, param)
            lg.error("Wrote upgraded NetParameter binary proto to %s", args.output)
        else:
            io.write_prototxt(args.output, param)
            lg.info("Wrote upgraded NetParameter text proto to %s", args.output)
    return EXIT_OK if success else EXIT_ERROR


def cmd_draw(args, out, err):
    from engine.instruments.draw import draw_net_to_file
    phase = args.phase.upper() if args.phase else "ALL"
    if phase not in ("TRAIN", "TEST", "ALL"):
        raise UsageError('--phase must be TRAIN, TEST or ALL (got %r)' % args.phase)
    _say(out, "Drawing net to %s" % args.output)
    draw_net_to_file(args.model, args.output, rankdir=args.rankdir, phase=phase, level=args.level,
                     stages=_stages(args.stage), splits=args.splits)
    return EXIT_OK


def cmd_train(args, out, err):
    from engine.tools.solver_commands import train
    if not args.solver:
        raise UsageError("train needs --solver")
    stage = _stages(args.stage) if args.stage else ""
    return train(args.solver, weights=args.weights, snapshot=args.snapshot, gpu=args.gpu, level=args.level,
                 stage=stage, sigint_effect=args.sigint_effect, sighup_effect=args.sighup_effect)


def cmd_test(args, out, err):
    from engine.tools.solver_commands import test
    if not args.model:
        raise UsageError("test needs --model")
    if not args.weights:
        raise UsageError("test needs --weights")
    stage = _stages(args.stage) if args.stage else ""
    return test(args.model, args.weights, iterations=args.iterations, gpu=args.gpu, level=args.level, stage=stage)


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


def make_parser():
    ap = _Parser(prog="python -m engine", description="Caffe's command line and debugging instruments on the "
                 "engine.", epilog="Exit codes: 0 ok, 1 engine error, 2 usage, 3 compare: runs differ.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("info", help="what Init builds: layers, tops, params, FLOPs, memory, backward, filtering")
    p.add_argument("model")
    _common(p)
    p.add_argument("--json", action="store_true", help="the report document without steps, as JSON")
    p.set_defaults(func=cmd_info, log_default=False)

    p = sub.add_parser("time", help="caffe time: per-layer forward/backward averages")
    p.add_argument("model")
    _common(p, iterations=50)
    p.add_argument("--warmup", type=int, default=0, help="untimed passes after Caffe's first one")
    p.add_argument("--json", metavar="FILE", help="also write the timings as JSON")
    p.set_defaults(func=cmd_time, log_default=True)

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
    p.add_argument("--report", metavar="FILE", help="also write a report (format from the extension)")
    p.set_defaults(func=cmd_debug, log_default=False)

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

    p = sub.add_parser("upgrade", help="upgrade a net prototxt, a caffemodel or a solver prototxt")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--binary", action="store_true", help="the input is a binary NetParameter (caffemodel)")
    p.add_argument("--kind", choices=("net", "solver"), help="what a text input holds (default: guessed)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_upgrade, log_default=True)

    p = sub.add_parser("draw", help="draw the net's DAG (svg; png/pdf with kaleido; dot; html)")
    p.add_argument("model")
    p.add_argument("output")
    p.add_argument("--rankdir", default="LR", help="LR (default), RL, TB or BT")
    p.add_argument("--phase", help="TRAIN, TEST or ALL (default: ALL, the net as written)")
    p.add_argument("--level", type=int, default=0)
    p.add_argument("--stage", action="append", default=[])
    p.add_argument("--splits", action="store_true", help="insert Caffe's Split layers")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_draw, log_default=False)

    p = sub.add_parser("train", help="caffe train: train or finetune a model")
    p.add_argument("--solver", help="the solver definition prototxt")
    p.add_argument("--weights", help="caffemodel(s) to finetune from, comma separated")
    p.add_argument("--snapshot", help="a solver state to resume from")
    p.add_argument("--gpu", nargs="?", const="0", default=None, metavar="IDS",
                   help="device ids separated by ',' or 'all' (default: the solver's solver_mode)")
    p.add_argument("--level", type=int, default=0)
    p.add_argument("--stage", action="append", default=[])
    p.add_argument("--sigint_effect", "--sigint-effect", default="stop", choices=("stop", "snapshot", "none"))
    p.add_argument("--sighup_effect", "--sighup-effect", default="snapshot", choices=("stop", "snapshot", "none"))
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_train, log_default=True)

    p = sub.add_parser("test", help="caffe test: score a model")
    p.add_argument("--model", help="the model definition prototxt")
    p.add_argument("--weights", help="the trained weights")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--gpu", nargs="?", const="0", default=None, metavar="IDS")
    p.add_argument("--level", type=int, default=0)
    p.add_argument("--stage", action="append", default=[])
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_test, log_default=True)

    from engine.tools import selftest
    selftest.add_parser(sub)
    return ap


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


def main(argv=None, out=None, err=None):
    """Run the command line; returns the exit code (see the module doc)."""
    from engine.core.errors import CaffeError
    from engine.instruments.debug import NonFiniteError
    out = out or sys.stdout
    err = err or sys.stderr
    ap = make_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
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
        with _Logging(level, err):
            code = args.func(args, out, err)
        out.flush()
        return EXIT_OK if code is None else int(code)
    except UsageError as e:
        err.write("usage error: %s\n" % e)
        return EXIT_USAGE
    except (CaffeError, NonFiniteError) as e:
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

#!/usr/bin/env python3
"""The engine against real BVLC Caffe: ``caffe time`` beside ``python -m engine time``.

    python benchmarks/bench_caffe.py --caffe /path/to/build/tools/caffe
    python benchmarks/bench_caffe.py --caffe CAFFE --net googlenet --batch 10 --rounds 5 --json out.json
    python benchmarks/bench_caffe.py --caffe CAFFE --net googlenet,resnet50,caffenet --rounds 3

Both tools time the same prototxt the same way (tools/caffe.cpp ``time()``: one clean
Forward and Backward, then ``--iterations`` passes of every layer's Forward and every
layer's Backward) at the same batch and thread count (``--threads``: OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS and MKL_NUM_THREADS for both processes).  Rounds alternate Caffe and the
engine (the first tool of a round alternates too), each in a fresh process, so that the
machine's load hits both alike; a ratio is the median of the per-round ratios of engine /
Caffe "Average Forward-Backward" (also forward and backward alone), and of the processes'
CPU times (whole process: Init and the untimed first pass included; steadier on a busy
machine).  Per-layer-type sums (forward, backward) of the last round come with it.

Without ``--caffe`` (or with a path that is not an executable) it prints why and exits 0:
there is no Caffe build to compare with.  Nets (``--net``, comma-separated; each gets its own
rounds, table and target line, in the order given):

- ``googlenet``: the zoo's ``bvlc_googlenet/train_val.input.prototxt`` in TRAIN (data from
  Input layers, the three losses), batch 10 unless ``--batch``;
- ``resnet50``: ``netgen.py``'s ResNet-50 in its TRAIN layout, the one ``run.py`` times
  (Input ``data`` and ``label``, BatchNorm with batch statistics, SoftmaxWithLoss), with its
  fillers (MSRA) so that both tools start from random weights; batch 4 (``run.py``'s full
  CPU batch) unless ``--batch``;
- ``caffenet``: the zoo's ``bvlc_reference_caffenet/train_val.input.prototxt`` in TRAIN,
  batch 10 unless ``--batch``;
- or a prototxt path (``--phase``; batch 10 unless ``--batch``).

Each net's target line is ``MET``/``MISS`` of engine / Caffe forward-backward <= 0.5 (issue
24's target for GoogLeNet; the same line for the others).  The children run with
``OPENBLAS_VERBOSE=2``, so each side's OpenBLAS says which kernels it picked (``Core: ...``);
the lines are printed with the table (``--blas-core NAME`` sets ``OPENBLAS_CORETYPE`` for
both).  Caffe's code and build stay outside the repository.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SHARED_ZOO = os.path.join(os.path.dirname(ROOT), "shared", "zoo", "models")
NETS = {"googlenet": os.path.join(SHARED_ZOO, "bvlc_googlenet", "train_val.input.prototxt"),
        "resnet50": "netgen:resnet50",
        "caffenet": os.path.join(SHARED_ZOO, "bvlc_reference_caffenet", "train_val.input.prototxt")}
DEFAULT_BATCH = {"googlenet": 10, "resnet50": 4, "caffenet": 10}
TARGET = 0.5            # issue 24: engine / Caffe forward-backward
AVERAGES = (("forward", "Average Forward pass"), ("backward", "Average Backward pass"),
            ("forward_backward", "Average Forward-Backward"))
_LAYER_LINE = re.compile(r"(?:^|\s)(\S+)\s+(forward|backward): ([0-9.eE+-]+) ms\.")
_BLAS_CORE = re.compile(r"^\s*Core:\s*(\S+)", re.M)


def parse_nets(text):
    """The ``--net`` value as a list: comma-separated names of ``NETS`` or prototxt paths."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--net: no net given")
    return names


def net_batch(name, batch=None):
    """``batch`` if given, else the net's default (``DEFAULT_BATCH``; 10 for a path)."""
    return batch if batch is not None else DEFAULT_BATCH.get(name, 10)


def target_line(net, ratio, target=TARGET):
    """``MET``/``MISS`` of engine / Caffe forward-backward against ``target``."""
    met = ratio == ratio and ratio <= target          # NaN (no rounds) is a MISS
    return "%-4s %s forward-backward <= %.1fx caffe: %.3f" % ("MET" if met else "MISS", net, target, ratio)


def blas_cores(text):
    """The kernels OpenBLAS said it picked (``OPENBLAS_VERBOSE=2``: ``Core: Haswell``), in
    order, without repeats (a process may load more than one OpenBLAS); [] if none said."""
    out = []
    for m in _BLAS_CORE.finditer(text):
        if m.group(1) not in out:
            out.append(m.group(1))
    return out


def net_source(src):
    """The NetParameter of a ``NETS`` value or a prototxt path."""
    if src == "netgen:resnet50":
        from benchmarks.netgen import resnet
        return resnet(50, batch=1, train=True, fillers=True)
    from engine.core.upgrade import read_net_params
    return read_net_params(src)


def write_prototxt(path, batch, out):
    """``path`` (or a ``netgen:`` net) with the batch set on every Input shape (and a deploy
    net's input dims)."""
    from google.protobuf import text_format

    p = net_source(path)
    for lp in p.layer:
        if lp.type == "Input":
            for s in lp.input_param.shape:
                if len(s.dim):
                    s.dim[0] = batch
    with open(out, "w") as f:
        f.write(text_format.MessageToString(p))
    return {lp.name: lp.type for lp in p.layer}


def parse_time_output(text):
    """The averages (ms) and per-layer times of a ``caffe time`` / ``engine time`` output."""
    res = {}
    for key, label in AVERAGES:
        m = re.search(re.escape(label) + r": ([0-9.eE+-]+) ms", text)
        if m:
            res[key] = float(m.group(1))
    layers = {}
    for m in _LAYER_LINE.finditer(text):
        layers.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
    res["layers"] = layers
    return res


def run_tool(cmd, env, cwd=ROOT):
    """(parsed output, wall s, CPU s of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    text = proc.stdout + "\n" + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd[:3]), proc.returncode, text[-3000:]))
    res = parse_time_output(text)
    res["blas_cores"] = blas_cores(text)
    if "forward_backward" not in res:
        raise RuntimeError("no 'Average Forward-Backward' in the output of %s:\n%s" % (cmd[0], text[-3000:]))
    return res, wall, cpu


def by_type(layers, types):
    out = {}
    for name, t in layers.items():
        k = types.get(name, "Split")      # InsertSplits' layers are not in the prototxt
        s = out.setdefault(k, {"forward": 0.0, "backward": 0.0})
        s["forward"] += t.get("forward", 0.0)
        s["backward"] += t.get("backward", 0.0)
    return out


def _ratios(mine, caffe):
    """Medians of the per-round ratios mine / Caffe (averages and process CPU time)."""
    out = {key: median([e[key] / c[key] for e, c in zip(mine, caffe)]) for key, _ in AVERAGES}
    out["process_cpu"] = median([e["cpu_s"] / c["cpu_s"] for e, c in zip(mine, caffe)])
    return out


def median(xs):
    return float(statistics.median(xs)) if xs else float("nan")


def child_env(threads, blas_core=None):
    """Both tools' environment: glog to stderr, ``threads`` BLAS/OpenMP threads, OpenBLAS
    saying which kernels it picked (and picking ``blas_core`` when given)."""
    env = dict(os.environ, GLOG_logtostderr="1", OPENBLAS_VERBOSE="2")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    if blas_core:
        env["OPENBLAS_CORETYPE"] = blas_core
    return env


def bench_net(a, net, tmp):
    """The alternating rounds of one net: its result dict (None when its prototxt is absent)."""
    src = NETS.get(net, net)
    if not src.startswith("netgen:") and not os.path.exists(src):
        print("bench_caffe: %s skipped: %s not found" % (net, src))
        return None
    batch = net_batch(net, a.batch)
    proto = os.path.join(tmp, "%s.prototxt" % re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(net)))
    types = write_prototxt(src, batch, proto)
    env = child_env(a.threads, a.blas_core)
    cmds = {
        "caffe": [a.caffe, "time", "-model", proto, "-iterations", str(a.iterations), "-phase", a.phase],
        "engine": [sys.executable, "-m", "engine", "time", proto, "--iterations", str(a.iterations),
                   "--phase", a.phase, "-q", "--no-progress"],
    }
    tools = ["caffe", "engine"]
    cwd = {"caffe": ROOT, "engine": ROOT}
    if a.baseline_root:
        cmds["baseline"] = cmds["engine"]
        cwd["baseline"] = os.path.abspath(a.baseline_root)
        tools.append("baseline")
    print("== %s (batch %d, %s, %d thread%s)" % (net, batch, a.phase, a.threads, "" if a.threads == 1 else "s"),
          flush=True)
    runs = {t: [] for t in tools}
    for r in range(a.rounds):
        order = tools[r % len(tools):] + tools[:r % len(tools)]
        for tool in order:
            res, wall, cpu = run_tool(cmds[tool], env, cwd[tool])
            res.update(wall_s=wall, cpu_s=cpu)
            runs[tool].append(res)
            print("round %d %-6s forward-backward %8.1f ms (forward %.1f, backward %.1f); process %.1f s wall, "
                  "%.1f s CPU" % (r + 1, tool, res["forward_backward"], res.get("forward", 0),
                                  res.get("backward", 0), wall, cpu), flush=True)
    ratios = _ratios(runs["engine"], runs["caffe"])
    base = _ratios(runs["baseline"], runs["caffe"]) if a.baseline_root else None
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    out = dict(net=net, prototxt=src, phase=a.phase, batch=batch, iterations=a.iterations,
               rounds=a.rounds, threads=a.threads, caffe=os.path.abspath(a.caffe), load_average=load,
               blas_core_requested=a.blas_core,
               blas_cores={t: rs[-1]["blas_cores"] for t, rs in runs.items()},
               engine_over_caffe=ratios,
               **({"baseline_root": os.path.abspath(a.baseline_root), "baseline_over_caffe": base}
                  if base else {}),
               **{"%s_ms" % t: {k: median([x[k] for x in runs[t]]) for k, _ in AVERAGES} for t in tools},
               samples={t: [{k: v for k, v in r.items() if k not in ("layers", "blas_cores")} for r in rs]
                        for t, rs in runs.items()},
               by_type={t: by_type(rs[-1]["layers"], types) for t, rs in runs.items()})
    for label, rr in (("engine", ratios), ("baseline", base)):
        if rr:
            print("%s / Caffe (median of %d rounds): forward-backward %.3f, forward %.3f, backward %.3f; "
                  "process CPU time %.3f" % (label, a.rounds, rr["forward_backward"], rr["forward"], rr["backward"],
                                             rr["process_cpu"]))
    for t in tools:
        print("OpenBLAS kernels, %s: %s" % (t, ", ".join(out["blas_cores"][t]) or "not reported (no OpenBLAS "
                                                                                   "said Core:)"))
    print_table(out["by_type"])
    out["target"] = target_line(net, ratios["forward_backward"])
    print(out["target"], flush=True)
    return out


def print_table(bt):
    """Per-layer-type sums of the last round: Caffe's and the engine's forward and backward."""
    print("%-16s %10s %10s %10s %10s" % ("layer type (ms)", "caffe fwd", "caffe bwd", "engine fwd", "engine bwd"))
    for k in sorted(bt["caffe"], key=lambda k: -sum(bt["caffe"][k].values())):
        c, e = bt["caffe"][k], bt["engine"].get(k, {"forward": 0.0, "backward": 0.0})
        print("%-16s %10.1f %10.1f %10.1f %10.1f" % (k, c["forward"], c["backward"], e["forward"], e["backward"]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--caffe", help="path to a BVLC Caffe binary (build/tools/caffe); skipped without one")
    p.add_argument("--net", default="googlenet",
                   help="comma-separated: googlenet, resnet50, caffenet or prototxt paths (default googlenet)")
    p.add_argument("--phase", default="TRAIN", help="TRAIN (default) or TEST")
    p.add_argument("--batch", type=int, default=None,
                   help="batch of every net (default: googlenet 10, resnet50 4, caffenet 10, a path 10)")
    p.add_argument("--iterations", type=int, default=5, help="timed passes per run (caffe time -iterations)")
    p.add_argument("--rounds", type=int, default=3, help="alternating Caffe/engine rounds")
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads of both (default 1)")
    p.add_argument("--blas-core", metavar="NAME",
                   help="OPENBLAS_CORETYPE for both (e.g. Haswell, SkylakeX); default: each OpenBLAS picks")
    p.add_argument("--baseline-root", metavar="DIR",
                   help="also time the engine of another checkout (e.g. `git archive REV | tar -x -C DIR`) "
                        "in the same rounds: rows 'baseline'")
    p.add_argument("--json", help="write the result here (one net: its result; several: {net: result})")
    a = p.parse_args(argv)
    try:
        nets = parse_nets(a.net)
    except ValueError as e:
        p.error(str(e))
    if not a.caffe or not (os.path.isfile(a.caffe) and os.access(a.caffe, os.X_OK)):
        print("bench_caffe: skipped: no Caffe binary (--caffe %s)" % (a.caffe or "not given"))
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_caffe_") as tmp:   # the prototxts written: removed after
        for net in nets:
            out = bench_net(a, net, tmp)
            if out is not None:
                results[net] = out
    if len(results) > 1:
        print()
        for out in results.values():
            print(out["target"])
    if a.json and results:
        with open(a.json, "w") as f:
            json.dump(next(iter(results.values())) if len(nets) == 1 else results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

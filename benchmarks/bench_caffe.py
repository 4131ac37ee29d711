#!/usr/bin/env python3
"""The engine against real BVLC Caffe: ``caffe time`` beside ``python -m engine time``.

    python benchmarks/bench_caffe.py --caffe /path/to/build/tools/caffe
    python benchmarks/bench_caffe.py --caffe CAFFE --net googlenet --batch 10 --rounds 5 --json out.json

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
there is no Caffe build to compare with.  Nets: ``googlenet`` (the zoo's
``train_val.input.prototxt`` in TRAIN: data from Input layers, the three losses), or a
prototxt path (``--phase``).  Caffe's code and build stay outside the repository.
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
NETS = {"googlenet": os.path.join(SHARED_ZOO, "bvlc_googlenet", "train_val.input.prototxt")}
AVERAGES = (("forward", "Average Forward pass"), ("backward", "Average Backward pass"),
            ("forward_backward", "Average Forward-Backward"))
_LAYER_LINE = re.compile(r"(?:^|\s)(\S+)\s+(forward|backward): ([0-9.eE+-]+) ms\.")


def write_prototxt(path, batch, out):
    """``path`` with the batch set on every Input shape (and a deploy net's input dims)."""
    from google.protobuf import text_format

    from engine.core.upgrade import read_net_params
    p = read_net_params(path)
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--caffe", help="path to a BVLC Caffe binary (build/tools/caffe); skipped without one")
    p.add_argument("--net", default="googlenet", help="googlenet, or a prototxt path")
    p.add_argument("--phase", default="TRAIN", help="TRAIN (default) or TEST")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--iterations", type=int, default=5, help="timed passes per run (caffe time -iterations)")
    p.add_argument("--rounds", type=int, default=3, help="alternating Caffe/engine rounds")
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads of both (default 1)")
    p.add_argument("--baseline-root", metavar="DIR",
                   help="also time the engine of another checkout (e.g. `git archive REV | tar -x -C DIR`) "
                        "in the same rounds: rows 'baseline'")
    p.add_argument("--json", help="write the result here")
    a = p.parse_args(argv)
    if not a.caffe or not (os.path.isfile(a.caffe) and os.access(a.caffe, os.X_OK)):
        print("bench_caffe: skipped: no Caffe binary (--caffe %s)" % (a.caffe or "not given"))
        return 0
    src = NETS.get(a.net, a.net)
    if not os.path.exists(src):
        print("bench_caffe: skipped: %s not found" % src)
        return 0
    tmp = tempfile.mkdtemp(prefix="bench_caffe_")
    proto = os.path.join(tmp, "net.prototxt")
    types = write_prototxt(src, a.batch, proto)
    env = dict(os.environ, GLOG_logtostderr="1")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(a.threads)
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
    out = dict(net=a.net, prototxt=src, phase=a.phase, batch=a.batch, iterations=a.iterations,
               rounds=a.rounds, threads=a.threads, caffe=os.path.abspath(a.caffe), load_average=load,
               engine_over_caffe=ratios,
               **({"baseline_root": os.path.abspath(a.baseline_root), "baseline_over_caffe": base}
                  if base else {}),
               **{"%s_ms" % t: {k: median([x[k] for x in runs[t]]) for k, _ in AVERAGES} for t in tools},
               samples={t: [{k: v for k, v in r.items() if k != "layers"} for r in rs] for t, rs in runs.items()},
               by_type={t: by_type(rs[-1]["layers"], types) for t, rs in runs.items()})
    for label, rr in (("engine", ratios), ("baseline", base)):
        if rr:
            print("%s / Caffe (median of %d rounds): forward-backward %.3f, forward %.3f, backward %.3f; "
                  "process CPU time %.3f" % (label, a.rounds, rr["forward_backward"], rr["forward"], rr["backward"],
                                             rr["process_cpu"]))
    print("%-16s %10s %10s %10s %10s" % ("layer type (ms)", "caffe fwd", "caffe bwd", "engine fwd", "engine bwd"))
    bt = out["by_type"]
    for k in sorted(bt["caffe"], key=lambda k: -sum(bt["caffe"][k].values())):
        c, e = bt["caffe"][k], bt["engine"].get(k, {"forward": 0.0, "backward": 0.0})
        print("%-16s %10.1f %10.1f %10.1f %10.1f" % (k, c["forward"], c["backward"], e["forward"], e["backward"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

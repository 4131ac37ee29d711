#!/usr/bin/env python3
"""Overhead of full debug records (engine.instruments.debug.Recorder) over plain forward/backward.

    python benchmarks/bench_records.py [--repeats 7] [--iterations 3] [--json out.json] [--gpu]

For each bundled net (examples/*/*.prototxt that initialise without external data),
times forward+backward passes without and with a Recorder attached (statistics of every
bottom, top and param blob, data and diff, with histograms) and prints the ratio
records/plain.  Plain and recorded runs alternate and the median of ``--repeats``
samples is kept, so machine noise hits both sides alike.  CPU always; GPU too when
CuPy sees a device (or only with --gpu).
"""
import argparse
import glob
import json
import logging
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402


def _nets():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*", "*.prototxt"))):
        if path.endswith("_solver.prototxt") or "lmdb" in os.path.basename(path):
            continue
        out.append(path)
    return out


def bench_net(path, mode, repeats, iterations, bins, level="full"):
    import engine
    from engine.core import backend
    from engine.tools.cli import fill_inputs
    from engine.instruments.debug import Recorder
    if mode == "GPU":
        backend.set_mode_gpu()
    else:
        backend.set_mode_cpu()
    backend.set_random_seed(1)
    net = engine.Net(path, engine.TRAIN)
    fill_inputs(net, 1)
    backward = any(net.layer_need_backward)

    def passes():
        backend.synchronize()
        t0 = time.perf_counter()
        for _ in range(iterations):
            net.Forward()
            if backward:
                net.Backward()
        backend.synchronize()
        return (time.perf_counter() - t0) / iterations * 1e3

    passes()                                  # warm-up: allocations, kernels
    rec = Recorder(net, bins=bins, max_steps=4, level=level)
    passes()
    rec.detach()
    plain, recorded = [], []
    for _ in range(repeats):
        plain.append(passes())
        rec = Recorder(net, bins=bins, max_steps=4, level=level)
        recorded.append(passes())
        rec.detach()
    p, r = statistics.median(plain), statistics.median(recorded)
    backend.set_mode_cpu()
    return {"net": os.path.relpath(path, ROOT), "device": mode, "plain_ms": p, "records_ms": r,
            "ratio": r / p if p else float("nan"), "overhead_ms": r - p, "bins": bins, "level": level}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=2, help="passes per sample")
    ap.add_argument("--gpu", action="store_true", help="GPU only")
    ap.add_argument("--no-hist", action="store_true", help="records without histograms")
    ap.add_argument("--level", choices=("full", "health"), default="full",
                    help="Recorder level: full statistics, or health (mean |x| and NaN/Inf only)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    logging.getLogger("engine").setLevel(logging.WARNING)
    from engine.core import backend
    modes = ["GPU"] if a.gpu else (["CPU", "GPU"] if backend.gpu_available() else ["CPU"])
    if a.gpu and not backend.gpu_available():
        print("no GPU: CuPy does not see a CUDA device", file=sys.stderr)
        return 1
    rows = []
    print("%-45s %-4s %11s %11s %8s" % ("net", "dev", "plain ms", "records ms", "ratio"))
    for mode in modes:
        for path in _nets():
            r = bench_net(path, mode, a.repeats, a.iterations, 0 if a.no_hist else 32, a.level)
            rows.append(r)
            print("%-45s %-4s %11.2f %11.2f %8.3f" % (r["net"], r["device"], r["plain_ms"], r["records_ms"],
                                                      r["ratio"]))
            sys.stdout.flush()
    for mode in modes:
        rs = [r["ratio"] for r in rows if r["device"] == mode]
        if rs:
            tot_p = sum(r["plain_ms"] for r in rows if r["device"] == mode)
            tot_r = sum(r["records_ms"] for r in rows if r["device"] == mode)
            print("%s: median ratio %.3f; all nets together %.3f (records / plain)"
                  % (mode, statistics.median(rs), tot_r / tot_p))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": {"cpus": os.cpu_count(), "numpy": np.__version__}, "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

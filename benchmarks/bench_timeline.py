#!/usr/bin/env python3
"""Memory of a timeline (engine.instruments.history.Timeline) over many actions.

    python benchmarks/bench_timeline.py                       # GoogLeNet, 100 forward+backward steps
    python benchmarks/bench_timeline.py --net PATH --steps 50 --pin inception_4a/output --json out.json

The net (default ``../shared/zoo/models/bvlc_googlenet/train_val.input.prototxt``, TRAIN,
its Input batch set by ``--batch``, default 1: the records' size does not depend on it)
runs ``--steps`` actions, each a Forward + Backward on fresh N(0, 1) inputs, with a
Recorder at the full level (every statistic of every bottom, top and param, data and
diff, 32-bin histograms) and a Timeline with a budget large enough to keep everything.
``--pin BLOB`` (repeatable) keeps those blobs' data arrays after every step.

Reported: the timeline's own accounting (records, pinned arrays) and the memory
tracemalloc sees held by the timeline alone at the end (the Recorder's copy of the
steps and its caches are dropped first), per step and in total; wall time per step.
"""
import argparse
import gc
import json
import os
import sys
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

GOOGLENET = os.path.join(os.path.dirname(ROOT), "shared", "zoo", "models", "bvlc_googlenet",
                         "train_val.input.prototxt")


def _with_batch(path, batch):
    """The prototxt with every Input shape's first dim set to ``batch`` (a temp file)."""
    import tempfile

    from google.protobuf import text_format

    import engine
    from engine.proto import caffe_pb2
    param = engine.read_net_params(path)
    for lp in param.layer:
        if lp.type == "Input":
            for shape in lp.input_param.shape:
                if len(shape.dim):
                    shape.dim[0] = batch
    fd, out = tempfile.mkstemp(suffix=".prototxt", prefix="bench-timeline-")
    with os.fdopen(fd, "w") as f:
        f.write(text_format.MessageToString(param))
    assert isinstance(param, caffe_pb2.NetParameter)
    return out


def _mib(n):
    return n / 2.0 ** 20


def run(path, steps=100, batch=1, pins=(), seed=0):
    import engine
    from engine.core import backend
    from engine.instruments.debug import Recorder
    from engine.instruments.history import Timeline
    backend.set_random_seed(1)
    tmp = _with_batch(path, batch)
    try:
        net = engine.Net(tmp, engine.TRAIN)
    finally:
        os.unlink(tmp)
    rng = np.random.default_rng(seed)
    label_classes = 1000

    def fill():
        for name in net.inputs:
            blob = net.blobs[name]
            if "label" in name:
                blob.data[...] = rng.integers(0, label_classes, blob.shape)
            else:
                blob.data[...] = rng.standard_normal(blob.shape)

    # warm-up: the layers' workspaces and the statistics' scratch buffers are allocated once, lazily
    warm = Recorder(net, level="full")
    fill()
    net.Forward()
    net.Backward()
    warm.detach()
    del warm
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    rec = Recorder(net, level="full")
    tl = Timeline(net, budget_bytes=64 << 30)
    for p in pins:
        tl.pin(p)
    walls = []
    for _ in range(steps):
        fill()
        last = rec.steps[-1].id if rec.steps else 0
        t0 = time.perf_counter()
        net.Forward()
        net.Backward()
        walls.append(time.perf_counter() - t0)
        tl.record("forward_backward", [s for s in rec.steps if s.id > last])
    rec.detach()
    rec.clear()
    rec._cache.clear()
    del rec
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    layers = sum(len(r.layers) for s in tl for r in s.records)
    stats = len(tl._stats_refs)
    return {
        "net": os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path), "batch": batch,
        "layers": len(net.layers), "steps": len(tl), "pins": list(pins),
        "layer_records": layers, "distinct_blob_stats": stats,
        "records_bytes": tl.records_bytes, "pinned_bytes": tl.pinned_bytes, "memory_bytes": tl.memory_bytes,
        "tracemalloc_held_bytes": held,
        "per_step_records_bytes": tl.records_bytes / max(len(tl), 1),
        "per_step_held_bytes": held / max(len(tl), 1),
        "step_s_median": float(np.median(walls)), "summary": tl.summary(),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", default=GOOGLENET)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--pin", action="append", default=[])
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.net):
        print("no net at %s (../shared/zoo is needed for GoogLeNet)" % args.net, file=sys.stderr)
        return 2
    import logging
    logging.getLogger("engine").setLevel(logging.WARNING)
    r = run(args.net, args.steps, args.batch, args.pin)
    print("%s, batch %d, %d layers: %d steps (forward + backward each), %d layer records, %d distinct BlobStats"
          % (r["net"], r["batch"], r["layers"], r["steps"], r["layer_records"], r["distinct_blob_stats"]))
    print("  timeline's accounting: records %.1f MiB (%.0f KiB per step) + pinned %.1f MiB = %.1f MiB"
          % (_mib(r["records_bytes"]), r["per_step_records_bytes"] / 1024, _mib(r["pinned_bytes"]),
             _mib(r["memory_bytes"])))
    print("  held at the end (tracemalloc, the timeline alone): %.1f MiB (%.0f KiB per step)"
          % (_mib(r["tracemalloc_held_bytes"]), r["per_step_held_bytes"] / 1024))
    print("  forward+backward with records: median %.2f s per step" % r["step_s_median"])
    print("  " + r["summary"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

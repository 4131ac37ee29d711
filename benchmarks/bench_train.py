#!/usr/bin/env python3
"""Caffe's tutorials' training, timed: real ``caffe train`` beside ``python -m engine train``
on the same solver, net and databases, in the same rounds.

    python benchmarks/bench_train.py --caffe /work/caffe/build/tools/caffe
    python benchmarks/bench_train.py --caffe CAFFE --nets lenet --iterations 300 --rounds 5 --threads 1,default
    python benchmarks/bench_train.py --caffe CAFFE --baseline-root /tmp/engine-before --json out.json

Nets (``--nets``): ``lenet`` (examples/mnist: lenet_solver.prototxt and
lenet_train_test.prototxt, on Fashion-MNIST's 60,000 + 10,000 images from Debian's
dataset-fashion-mnist, or generated IDX images of the same size without it) and
``cifar10_quick`` (examples/cifar10: cifar10_quick_solver.prototxt and
cifar10_quick_train_test.prototxt with its mean file, on 60,000 generated 32 x 32 images in
CIFAR-10's binary format: the figures are speed, not accuracy).  Caffe's files come from the
BVLC/caffe snapshot (``--caffe-mirror``, a bare git directory) or a checkout
(``--caffe-root``); the databases and the mean are written with the engine's converters
(byte for byte Caffe's, tests/tools/test_converters.py).  Each solver is Caffe's as written
but for: ``solver_mode: CPU``, ``max_iter`` (``--iterations``, default 300 for LeNet, 200
for CIFAR-10 quick), ``snapshot_after_train: false``, ``random_seed: 1``.  So a run is a user's
``train``: start-up, Init, the test pass at iteration 0 (the tutorial's test_iter: 100
batches of 100), the iterations with their display lines.

Each run is a fresh process timed from its start to its exit (wall) with its CPU time
(user + sys, from the kernel's rusage of the child); ``--threads 1,default``: with
OPENBLAS_NUM_THREADS=1 (and OMP_/MKL_) for both, and with neither set (each library's
default: every core).  Rounds interleave Caffe, the engine and ``--baseline-root`` (another
checkout of the engine, e.g. ``git archive REV | tar -x -C DIR``), the first tool of a round
alternating, so that the machine's load falls on all alike; a ratio is the median of the
per-round ratios engine / Caffe (wall, CPU).  ``--json`` writes every run.

Without a Caffe binary it says so and exits 0.
"""
import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

MIRROR = "/work/.mirror/BVLC+caffe/repo"
FASHION = "/usr/share/datasets/fashion-mnist"
NETS = {
    "lenet": {"dir": "examples/mnist", "solver": "lenet_solver.prototxt", "net": "lenet_train_test.prototxt",
              "iterations": 300},
    "cifar10_quick": {"dir": "examples/cifar10", "solver": "cifar10_quick_solver.prototxt",
                      "net": "cifar10_quick_train_test.prototxt", "iterations": 200},
}
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


# ====================================================================== Caffe's files
def caffe_file(rel, caffe_root=None, mirror=MIRROR):
    """The text of Caffe's file ``rel`` from a checkout or the snapshot."""
    if caffe_root:
        with open(os.path.join(caffe_root, rel)) as f:
            return f.read()
    res = subprocess.run(["git", "--git-dir", mirror, "show", "HEAD:" + rel], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit("cannot read Caffe's %s from %s: %s" % (rel, mirror, res.stderr.strip()))
    return res.stdout


def edit_solver(text, settings):
    """A solver prototxt's text with each ``settings`` field's line replaced (or added at the
    end), every other line as written."""
    import re
    for key, value in settings.items():
        line = "%s: %s" % (key, value)
        text, n = re.subn(r"(?m)^%s:.*$" % key, line, text)
        if not n:
            text += "\n" + line + "\n"
    return text


def timed_solver(text, iterations, test_iter=None):
    """The tutorial's solver, changed only where a timed CPU run needs it (``test_iter``:
    the warm-up's)."""
    settings = {"solver_mode": "CPU", "max_iter": iterations, "snapshot_after_train": "false", "random_seed": 1}
    if test_iter is not None:
        settings["test_iter"] = test_iter
    return edit_solver(text, settings)


# ====================================================================== the data
def _idx_files(folder):
    """data/mnist's four IDX files: Fashion-MNIST's (gunzipped) or generated ones."""
    os.makedirs(folder, exist_ok=True)
    names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    if all(os.path.isfile(os.path.join(FASHION, n + ".gz")) for n in names):
        for n in names:
            with gzip.open(os.path.join(FASHION, n + ".gz")) as src, open(os.path.join(folder, n), "wb") as dst:
                shutil.copyfileobj(src, dst)
        return "Fashion-MNIST (Debian's dataset-fashion-mnist)"
    import numpy as np
    rng = np.random.default_rng(0)
    for kind, count in (("train", 60000), ("t10k", 10000)):
        labels = rng.integers(0, 10, count).astype(np.uint8)
        images = rng.integers(0, 256, (count, 28, 28)).astype(np.uint8)
        with open(os.path.join(folder, "%s-images-idx3-ubyte" % kind), "wb") as f:
            f.write(np.array([2051, count, 28, 28], ">u4").tobytes() + images.tobytes())
        with open(os.path.join(folder, "%s-labels-idx1-ubyte" % kind), "wb") as f:
            f.write(np.array([2049, count], ">u4").tobytes() + labels.tobytes())
    return "generated IDX images (no dataset-fashion-mnist)"


def _cifar_batches(folder):
    import numpy as np
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"):
        recs = rng.integers(0, 256, (10000, 3073), dtype=np.uint8)
        recs[:, 0] %= 10
        recs.tofile(os.path.join(folder, name + ".bin"))


def prepare(work, nets, iterations, caffe_root=None, mirror=MIRROR):
    """A Caffe root at ``work`` with the nets' files, databases and timed solvers; returns
    {net: (solver path relative to work, data description)}."""
    from engine.tools.caffe_tools import compute_image_mean
    from engine.tools.converters import convert_cifar_data, convert_mnist_data
    out = {}
    for name in nets:
        spec = NETS[name]
        os.makedirs(os.path.join(work, spec["dir"]), exist_ok=True)
        for rel in (spec["net"],):
            with open(os.path.join(work, spec["dir"], rel), "w") as f:
                f.write(caffe_file(spec["dir"] + "/" + rel, caffe_root, mirror))
        solver = os.path.join(spec["dir"], "timed_" + spec["solver"])
        text = caffe_file(spec["dir"] + "/" + spec["solver"], caffe_root, mirror)
        with open(os.path.join(work, solver), "w") as f:
            f.write(timed_solver(text, iterations.get(name) or spec["iterations"]))
        with open(os.path.join(work, warmup_solver(solver)), "w") as f:
            f.write(timed_solver(text, 2, test_iter=1))
        if name == "lenet":
            data = _idx_files(os.path.join(work, "data", "mnist"))
            for kind, db in (("train", "mnist_train_lmdb"), ("t10k", "mnist_test_lmdb")):
                if os.path.isdir(os.path.join(work, "examples/mnist", db)):
                    continue                        # made by an earlier run in this --work
                convert_mnist_data(os.path.join(work, "data/mnist/%s-images-idx3-ubyte" % kind),
                                   os.path.join(work, "data/mnist/%s-labels-idx1-ubyte" % kind),
                                   os.path.join(work, "examples/mnist", db))
        else:
            data = "generated CIFAR-10 batches"
            if os.path.isdir(os.path.join(work, "examples/cifar10/cifar10_train_lmdb")):
                out[name] = (solver, data)
                continue
            _cifar_batches(os.path.join(work, "data", "cifar10"))
            convert_cifar_data(os.path.join(work, "data/cifar10"), os.path.join(work, "examples/cifar10"), "lmdb")
            compute_image_mean(os.path.join(work, "examples/cifar10/cifar10_train_lmdb"),
                               os.path.join(work, "examples/cifar10/mean.binaryproto"))
        out[name] = (solver, data)
    return out


def warmup_solver(solver):
    return solver.replace("timed_", "warmup_")


# ====================================================================== runs
def run_once(argv, cwd, threads, env_extra=None):
    """(wall s, cpu s, stderr tail) of one process.  Python keeps its bytecode cache (as an
    installed package has one), under ``cwd/pycache`` (PYTHONPYCACHEPREFIX): not in the venv."""
    env = dict(os.environ, GLOG_logtostderr="1", PYTHONPYCACHEPREFIX=os.path.join(cwd, "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for var in THREAD_VARS:
        env.pop(var, None)
        if threads != "default":
            env[var] = str(threads)
    env.update(env_extra or {})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode != 0:
        raise SystemExit("%s failed (%d):\n%s" % (" ".join(argv), res.returncode, res.stderr[-3000:]))
    return wall, cpu, res.stderr


def tools(caffe, baseline_root):
    out = [("caffe", [caffe, "train"], {})]
    out.append(("engine", [sys.executable, "-m", "engine", "train"], {"PYTHONPATH": ROOT}))
    if baseline_root:
        out.append(("baseline", [sys.executable, "-m", "engine", "train"], {"PYTHONPATH": baseline_root}))
    return out


def measure(work, solvers, caffe, rounds, thread_settings, baseline_root=None):
    runs = []
    for name, (solver, _) in solvers.items():
        for _tool, argv, env in tools(caffe, baseline_root):     # untimed: bytecode, Numba's cache, page cache
            run_once(argv + ["--solver=" + warmup_solver(solver)], work, "1", env)
        for threads in thread_settings:
            for r in range(rounds):
                order = tools(caffe, baseline_root)
                if r % 2:
                    order = order[::-1]
                for tool, argv, env in order:
                    wall, cpu, log = run_once(argv + ["--solver=" + solver], work, threads, env)
                    runs.append({"net": name, "threads": threads, "round": r, "tool": tool, "wall_s": wall,
                                 "cpu_s": cpu})
                    print("  %-14s threads=%-7s round %d %-8s wall %6.2f s  cpu %6.2f s" % (name, threads, r, tool,
                                                                                         wall, cpu), flush=True)
    return runs


def summarise(runs):
    """{(net, threads): {tool: {median wall, cpu}, ratios per round medians}}."""
    out = {}
    keys = sorted({(r["net"], r["threads"]) for r in runs}, key=str)
    for key in keys:
        rows = [r for r in runs if (r["net"], r["threads"]) == key]
        by = {}
        for r in rows:
            by.setdefault(r["tool"], {})[r["round"]] = r
        entry = {tool: {"wall_s": statistics.median(x["wall_s"] for x in v.values()),
                        "cpu_s": statistics.median(x["cpu_s"] for x in v.values())} for tool, v in by.items()}
        for tool in by:
            if tool == "caffe":
                continue
            common = sorted(set(by[tool]) & set(by["caffe"]))
            entry[tool]["wall_ratio"] = statistics.median(by[tool][i]["wall_s"] / by["caffe"][i]["wall_s"]
                                                          for i in common)
            entry[tool]["cpu_ratio"] = statistics.median(by[tool][i]["cpu_s"] / by["caffe"][i]["cpu_s"]
                                                         for i in common)
        out["%s threads=%s" % key] = entry
    return out


def table(summary):
    lines = ["| net, BLAS threads | tool | wall (median) | CPU (median) | wall / Caffe | CPU / Caffe |",
             "|---|---|---|---|---|---|"]
    for key, entry in summary.items():
        for tool, v in entry.items():
            lines.append("| %s | %s | %.2f s | %.2f s | %s | %s |" % (
                key, tool, v["wall_s"], v["cpu_s"], "%.3f" % v["wall_ratio"] if "wall_ratio" in v else "1",
                "%.3f" % v["cpu_ratio"] if "cpu_ratio" in v else "1"))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--caffe", help="real Caffe's build/tools/caffe")
    ap.add_argument("--caffe-root", help="a checkout of BVLC/caffe for the tutorials' files (default: --caffe-mirror)")
    ap.add_argument("--caffe-mirror", default=MIRROR, help="a bare git directory of BVLC/caffe")
    ap.add_argument("--nets", default="lenet,cifar10_quick")
    ap.add_argument("--iterations", type=int, help="max_iter for every net (default: lenet 300, cifar10_quick 200)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,default", help="BLAS thread settings, e.g. 1,default")
    ap.add_argument("--baseline-root", help="another checkout of the engine, timed in the same rounds")
    ap.add_argument("--work", help="where the Caffe root is made (default: a temporary folder)")
    ap.add_argument("--json", help="write the runs and the summary here")
    args = ap.parse_args(argv)
    if not args.caffe or not os.access(args.caffe, os.X_OK):
        print("no Caffe binary (--caffe): nothing to compare with")
        return 0
    nets = [n.strip() for n in args.nets.split(",") if n.strip()]
    for n in nets:
        if n not in NETS:
            raise SystemExit("unknown net %r (known: %s)" % (n, ", ".join(NETS)))
    work = args.work or tempfile.mkdtemp(prefix="bench_train_")
    iterations = dict.fromkeys(nets, args.iterations) if args.iterations else {}
    solvers = prepare(work, nets, iterations, args.caffe_root, args.caffe_mirror)
    for n, (solver, data) in solvers.items():
        print("%s: %s in %s, data: %s" % (n, solver, work, data))
    runs = measure(work, solvers, args.caffe, args.rounds, [t.strip() for t in args.threads.split(",")],
                   args.baseline_root)
    summary = summarise(runs)
    print(table(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary, "work": work}, f, indent=1)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

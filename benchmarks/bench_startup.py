#!/usr/bin/env python3
"""Start-up: from ``python -m engine run script.py`` to the first forward's printed result.

    python benchmarks/bench_startup.py                       # LeNet, GoogLeNet, ResNet-50; 5 warm runs
    python benchmarks/bench_startup.py --runs 9 --nets googlenet --baseline-root /tmp/engine-before
    python benchmarks/bench_startup.py --stages --no-numba-row --baseline-root DIR   # what README.md shows
    python benchmarks/bench_startup.py --json out.json       # default: the "startup" key of results.json
    python benchmarks/bench_startup.py --pycaffe /usr/bin/python3 --pycaffe-path /work/caffe/src/python

The script is the five lines of a pycaffe user (``SCRIPT`` below): ``import caffe``, build the
deploy net with random weights (its fillers: no caffemodel), fill the data blob with a seeded
random image, ``forward()``, print the argmax.  Each run is a fresh process; its time is the
wall clock from just before the process is started to the moment its printed result arrives
(the interpreter's teardown after it is not counted), and the process's CPU time (user + sys,
whole process) comes beside it: steadier on a loaded machine.

- cold: the first run of each net in this invocation, with nothing done beforehand (no page
  cache dropped either: "cold" is the first start after whatever ran before).  Whether
  Numba's on-disk cache held the compiled kernels then is reported (``numba_cache``); it is
  there after any earlier run from this checkout.
- warm: the median of ``--runs`` runs after it.

Nets: LeNet (the bundled ``examples/lenet`` net as a deploy net: an Input of 64 x 1 x 28 x 28,
the train/test net's layers without data, loss and accuracy, a Softmax ``prob``, as Caffe's
``examples/mnist/lenet.prototxt``), GoogLeNet (the zoo's ``bvlc_googlenet/deploy.prototxt``;
needs ``../shared/zoo``) with one image (``googlenet_1``: the pycaffe script of the issue,
"one forward of one image"; the target row) and as written, batch 10 (``googlenet``), and
ResNet-50 (``netgen.py``'s deploy layout, batch 1, with fillers).

Peers, each labelled as what it is:
- **pycaffe, same run** (``--pycaffe PYTHON``, with ``--pycaffe-path DIR`` put on its
  PYTHONPATH: a BVLC Caffe build's ``python`` directory): real pycaffe runs the same script
  (``PYTHON script.py deploy.prototxt``: the same deploy file, its random fillers, one forward,
  the argmax printed) in the same rounds, timed the same way (rows ``pycaffe``).  The target is
  then the engine's warm ``googlenet_1`` median <= pycaffe's warm median of the same run, and
  every net gets its ratio.
- **pycaffe, recorded** (without ``--pycaffe``): the figure once measured with real pycaffe on
  this machine for the GoogLeNet script (0.63-0.83 s, median 0.73 s) is a constant
  (``PYCAFFE_RECORDED``), and the target is GoogLeNet's warm start <= that median.  No figure
  was recorded for LeNet or ResNet-50: they have no target then.
- **PyTorch import, same run**: ``python -c "import torch; torch.zeros(1)"`` timed the same
  way in the same rounds (the start-up of another NumPy-era framework on this machine, not an
  equivalent script); the ratio is engine / that.

``--baseline-root DIR`` times another checkout (e.g. ``git archive REV | tar -x -C DIR``) in the
same rounds (rows ``baseline``); ``--no-numba-row`` times the engine with ``ENGINE_NUMBA=0``
too (rows ``engine_numba0``: an opt-in, the NumPy twins instead of the compiled loops, so no
Numba start-up; the same numbers to rounding, not bit for bit).  Rounds interleave engine,
baseline, that, pycaffe, peer, so that the machine's load hits all alike.  Children run without
PYTHONDONTWRITEBYTECODE (Python keeps its bytecode cache, as an installed package has one);
``--no-bytecode-cache`` keeps the variable.

``--stages`` then runs each net ``--runs`` times more with each stage timed inside the
process (start: interpreter, engine and ``-m engine run`` to the script's first line -- for
pycaffe, the interpreter to the script's first line; import caffe; Net; the first forward; a
second forward for comparison) as process CPU time with one BLAS thread: the work's own cost,
which a loaded machine's wall clock hides.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SHARED_ZOO = os.path.join(os.path.dirname(ROOT), "shared", "zoo", "models")

SCRIPT = """\
import sys
import numpy as np
import caffe
net = caffe.Net(sys.argv[1], caffe.TEST)
net.blobs['data'].data[...] = np.random.RandomState(0).rand(*net.blobs['data'].data.shape)
print("RESULT", net.forward()[net.outputs[0]].argmax())
"""

PEER = "import torch; torch.zeros(1); print('RESULT', 0)"

# --stages: the same script with the time of each stage (process CPU and wall; the spawn time
# comes in T_SPAWN), run with one BLAS thread so that the CPU times are the work's own.
STAGES_SCRIPT = """\
import os, sys, time
t0, c0 = time.time(), time.process_time()
import numpy as np
import caffe
t1, c1 = time.time(), time.process_time()
net = caffe.Net(sys.argv[1], caffe.TEST)
t2, c2 = time.time(), time.process_time()
net.blobs['data'].data[...] = np.random.RandomState(0).rand(*net.blobs['data'].data.shape)
r = net.forward()[net.outputs[0]].argmax()
t3, c3 = time.time(), time.process_time()
net.forward()
t4, c4 = time.time(), time.process_time()
print("RESULT", r)
print("STAGES", t0 - float(os.environ["T_SPAWN"]), t1 - t0, t2 - t1, t3 - t2, t4 - t3, c0, c1 - c0, c2 - c1, c3 - c2,
      c4 - c3)
"""
STAGES = ("start", "import_caffe", "net", "forward1", "forward2")

# The real pycaffe's time for the GoogLeNet script on this machine (issue 24): a recorded
# constant, not measured here (no pycaffe installed).
# The issue describes that script as "GoogLeNet deploy, Net, one forward of one image": the
# target row is GoogLeNet with an input of one image ("googlenet_1": the deploy file with its
# Input's batch 10 made 1, as pycaffe's classification example reshapes its data blob to one
# image); "googlenet" runs the deploy file as written (10 images) beside it, without a target.
PYCAFFE_RECORDED = {"googlenet_1": {"low_s": 0.63, "high_s": 0.83, "median_s": 0.73}}
TARGET_NET = "googlenet_1"
PYCAFFE_ROW = "pycaffe"
NETS = ("lenet", "googlenet_1", "googlenet", "resnet50")
KERNEL_CACHE = os.path.join("engine", "core", "kernels", "__pycache__")


# ====================================================================== the nets
def lenet_deploy():
    """examples/lenet's net as Caffe's examples/mnist/lenet.prototxt deploys it."""
    from google.protobuf import text_format

    from engine.core.upgrade import read_net_params
    from engine.proto import caffe_pb2
    src = read_net_params(os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt"))
    net = caffe_pb2.NetParameter(name=src.name)
    data = net.layer.add(name="data", type="Input", top=["data"])
    data.input_param.shape.add(dim=[64, 1, 28, 28])
    last = None
    for lp in src.layer:
        if lp.type in ("Data", "Input", "SoftmaxWithLoss", "Accuracy"):
            continue
        net.layer.add().CopyFrom(lp)
        last = lp.top[0]
    net.layer.add(name="prob", type="Softmax", bottom=[last], top=["prob"])
    return text_format.MessageToString(net)


def resnet50_deploy():
    """netgen.py's ResNet-50, TEST layout, batch 1, with its fillers (random weights)."""
    from google.protobuf import text_format

    from benchmarks import netgen
    return text_format.MessageToString(netgen.resnet(50, batch=1, train=False, fillers=True, conv1_bias=False))


def one_image(src, dst):
    """``src`` (a deploy file with one Input layer) with that Input's batch made 1, written to
    ``dst``; returns ``dst``."""
    from google.protobuf import text_format

    from engine.core.upgrade import read_net_params
    net = read_net_params(src)
    inputs = [lp for lp in net.layer if lp.type == "Input"]
    if len(inputs) != 1 or len(inputs[0].input_param.shape) != 1:
        raise ValueError("%s: expected one Input layer with one shape" % src)
    inputs[0].input_param.shape[0].dim[0] = 1
    with open(dst, "w") as f:
        f.write(text_format.MessageToString(net))
    return dst


def write_nets(names, tmp):
    """{name: prototxt path} of the nets whose source is here (GoogLeNet needs ../shared/zoo)."""
    paths = {}
    for name in names:
        if name in ("googlenet", "googlenet_1"):
            path = os.path.join(SHARED_ZOO, "bvlc_googlenet", "deploy.prototxt")
            if not os.path.exists(path):
                print("%s: skipped, %s not found" % (name, path))
                continue
            if name == "googlenet_1":
                path = one_image(path, os.path.join(tmp, "googlenet_1_deploy.prototxt"))
            paths[name] = path
            continue
        text = {"lenet": lenet_deploy, "resnet50": resnet50_deploy}[name]()
        path = os.path.join(tmp, name + "_deploy.prototxt")
        with open(path, "w") as f:
            f.write(text)
        paths[name] = path
    return paths


# ====================================================================== timing
def child_env(root, keep_no_bytecode, threads, extra=None):
    """The children's environment: ``root`` as PYTHONPATH (none when ``root`` is None),
    ``threads`` BLAS threads when given, ``extra`` on top."""
    env = dict(os.environ, **(extra or {}))
    if root:
        env["PYTHONPATH"] = root
    else:
        env.pop("PYTHONPATH", None)
    if not keep_no_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    if threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(threads)
    return env


def row_commands(variants, pycaffe, script, path, keep_no_bytecode, threads, tmp):
    """[(row, argv, cwd, env)] of one round: each engine variant (``python -m engine run
    script path`` in its checkout) and then real pycaffe (``PYTHON script path`` in ``tmp``,
    its ``--pycaffe-path`` on PYTHONPATH) when ``pycaffe`` = (python, path or None) is given."""
    rows = []
    for variant, (root, extra) in variants.items():
        rows.append((variant, [sys.executable, "-m", "engine", "run", script, path], root,
                     child_env(root, keep_no_bytecode, threads, extra)))
    if pycaffe:
        python, pypath = pycaffe
        rows.append((PYCAFFE_ROW, [python, script, path], tmp, child_env(pypath, keep_no_bytecode, threads)))
    return rows


def time_process(cmd, cwd, env):
    """(seconds to the RESULT line, CPU seconds of the whole process, the result)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    t_result, result = None, None
    for line in proc.stdout:
        if line.startswith("RESULT") and t_result is None:
            t_result = time.perf_counter() - t0
            result = line.split()[1]
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or t_result is None:
        raise RuntimeError("%s (in %s) failed with exit code %s" % (" ".join(cmd), cwd, proc.returncode))
    return t_result, usage.ru_utime + usage.ru_stime, result


def check_pycaffe(python, pypath):
    """``import caffe`` with ``python`` (``pypath`` on PYTHONPATH): the module's file, or a
    ``SystemExit`` that says what failed (before any round is timed)."""
    env = child_env(pypath, True, 0)
    p = subprocess.run([python, "-c", "import caffe; print(caffe.__file__)"], env=env, cwd=tempfile.gettempdir(),
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("bench_startup: --pycaffe %s%s cannot import caffe:\n%s" % (
            python, " (PYTHONPATH %s)" % pypath if pypath else "", (p.stdout + p.stderr)[-2000:]))
    return p.stdout.strip()


def run_stages(nets, runs, variants, keep_no_bytecode, tmp, pycaffe=None):
    """{net: {variant: {stage: median process CPU s}, 'wall_to_result_s', 'cpu_to_result_s'}}:
    STAGES_SCRIPT ``runs`` times per net and variant (and pycaffe), one BLAS thread.  start:
    from the spawn to the script's first line (interpreter, engine, ``-m engine run``)."""
    script = os.path.join(tmp, "first_forward_stages.py")
    with open(script, "w") as f:
        f.write(STAGES_SCRIPT)
    out = {}
    for name, path in nets.items():
        rows = {}
        for _ in range(runs):
            for variant, cmd, cwd, env in row_commands(variants, pycaffe, script, path, keep_no_bytecode, 1, tmp):
                env["T_SPAWN"] = repr(time.time())
                p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True, check=True)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("STAGES")][0]
                vals = [float(v) for v in line.split()[1:]]
                rows.setdefault(variant, []).append((vals[:5], vals[5:]))
        out[name] = {}
        for variant, rs in rows.items():
            med = {st: statistics.median(r[1][i] for r in rs) for i, st in enumerate(STAGES)}
            med["cpu_to_result_s"] = statistics.median(sum(r[1][:4]) for r in rs)
            med["wall_to_result_s"] = statistics.median(sum(r[0][:4]) for r in rs)
            out[name][variant] = med
            print("stages %-11s %-13s cpu: start %.3f  import caffe %.3f  Net %.3f  forward 1 %.3f  (forward 2 %.3f)"
                  "  = %.3f s to the result (wall %.3f)" % (
                      name, variant, *[med[st] for st in STAGES], med["cpu_to_result_s"], med["wall_to_result_s"]))
        sys.stdout.flush()
    return out


def numba_cache_files(root):
    d = os.path.join(root, KERNEL_CACHE)
    return len([f for f in os.listdir(d) if f.endswith(".nbi")]) if os.path.isdir(d) else 0


def summary(samples):
    """cold: the first sample; warm: the median of the others."""
    walls = [s[0] for s in samples[1:]]
    cpus = [s[1] for s in samples[1:]]
    return {"cold_s": samples[0][0], "cold_cpu_s": samples[0][1],
            "warm_s": statistics.median(walls) if walls else None,
            "warm_cpu_s": statistics.median(cpus) if cpus else None,
            "samples_s": [round(s[0], 4) for s in samples], "samples_cpu_s": [round(s[1], 4) for s in samples]}


def run(nets, runs, variants, keep_no_bytecode, threads, tmp, pycaffe=None):
    """{net: {variant: summary}} (variants: {name: (checkout, extra environment)}; real
    pycaffe (rows 'pycaffe') when ``pycaffe`` = (python, path) is given, and 'peer', timed in
    each net's rounds)."""
    script = os.path.join(tmp, "first_forward.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    out = {}
    for name, path in nets.items():
        samples = {}
        caches = {v: numba_cache_files(root) for v, (root, _) in variants.items()}
        results = {}
        for _ in range(runs + 1):
            for variant, cmd, cwd, env in row_commands(variants, pycaffe, script, path, keep_no_bytecode, threads,
                                                       tmp):
                t, cpu, result = time_process(cmd, cwd, env)
                samples.setdefault(variant, []).append((t, cpu))
                results.setdefault(variant, result)
            env = child_env(ROOT, keep_no_bytecode, threads)
            t, cpu, _ = time_process([sys.executable, "-c", PEER], tmp, env)
            samples.setdefault("peer", []).append((t, cpu))
        out[name] = {v: summary(s) for v, s in samples.items()}
        for v in variants:
            out[name][v]["numba_cache_files_before_cold"] = caches[v]
        for v, result in results.items():
            out[name][v]["argmax"] = result
        out[name]["prototxt"] = path
        print_net(name, out[name], list(variants) + ([PYCAFFE_ROW] if pycaffe else []))
        sys.stdout.flush()
    return out


# ====================================================================== report
def pycaffe_reference(name, res):
    """(seconds, label) that the warm start of ``name`` is compared with: real pycaffe's warm
    median of the same run when it ran, else the recorded constant (``PYCAFFE_RECORDED``);
    None when there is neither."""
    if PYCAFFE_ROW in res and res[PYCAFFE_ROW].get("warm_s"):
        return res[PYCAFFE_ROW]["warm_s"], "pycaffe same run"
    rec = PYCAFFE_RECORDED.get(name)
    return (rec["median_s"], "pycaffe recorded") if rec else None


def target_of(name, res=None):
    """The target (seconds, label) of ``name``: only ``TARGET_NET`` has one."""
    return pycaffe_reference(name, res or {}) if name == TARGET_NET else None


def print_net(name, res, variants):
    peer = res["peer"]
    ref = pycaffe_reference(name, res)
    target = target_of(name, res)
    for variant in variants:
        r = res[variant]
        is_engine = variant != PYCAFFE_ROW
        verdict = ("MET " if r["warm_s"] <= target[0] else "MISS") if target is not None and is_engine else "--  "
        if not is_engine:
            versus = "real pycaffe"
        elif ref:
            versus = "%s %.3f s: x%.2f" % (ref[1], ref[0], r["warm_s"] / ref[0])
        else:
            versus = "pycaffe none"
        print("%s %-11s %-13s warm %6.3f s (cpu %5.3f)  cold %6.3f s (cpu %5.3f)  | peer torch import %5.3f s: "
              "x%.2f | %s%s" % (
                  verdict, name, variant, r["warm_s"], r["warm_cpu_s"], r["cold_s"], r["cold_cpu_s"],
                  peer["warm_s"], r["warm_s"] / peer["warm_s"], versus,
                  (" (target: warm <= %.3f s)" % target[0]) if target is not None and is_engine else ""))


def targets(results, variant="engine"):
    """The target rows: ``TARGET_NET``'s warm start of ``variant`` against pycaffe's (same run,
    else recorded); with pycaffe in the run, the other nets' ratios too (``met`` None: no target)."""
    rows = []
    for name, res in results.items():
        ref = pycaffe_reference(name, res)
        if ref is None or variant not in res:
            continue
        value = res[variant]["warm_s"]
        has_target = name == TARGET_NET
        rows.append({"target": "%s start-up to the first forward's result <= pycaffe's %.3f s (%s)"
                               % (name, ref[0], ref[1].replace("pycaffe ", "")),
                     "value": value, "reference_s": ref[0], "reference": ref[1], "ratio": value / ref[0],
                     "met": (value <= ref[0]) if has_target else None})
    return rows


def target_lines(rows):
    """One line per target row: MET / MISS (or ``--`` for a net without a target) and the ratio."""
    out = []
    for t in rows:
        verdict = "--" if t["met"] is None else ("MET" if t["met"] else "MISS")
        out.append("%-4s %s: %.3f s (x%.2f)" % (verdict, t["target"], t["value"], t["ratio"]))
    return out


def versions():
    out = {"python": platform.python_version()}
    for mod in ("numpy", "numba", "scipy", "torch"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # pragma: no cover - optional packages
            out[mod] = None
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default=",".join(NETS), help="comma-separated: %s" % ", ".join(NETS))
    ap.add_argument("--runs", type=int, default=5, help="warm runs per net after the cold one (default 5)")
    ap.add_argument("--baseline-root", metavar="DIR", help="also time this checkout of the engine (rows 'baseline')")
    ap.add_argument("--no-numba-row", action="store_true",
                    help="also time the engine with ENGINE_NUMBA=0 (rows 'engine_numba0')")
    ap.add_argument("--stages", action="store_true",
                    help="also time each stage (start, import caffe, Net, forward 1, forward 2: process CPU, one "
                         "BLAS thread; --runs runs)")
    ap.add_argument("--threads", type=int, default=0, help="BLAS threads of the children (default: their own)")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE in the children's environment")
    ap.add_argument("--pycaffe", metavar="PYTHON",
                    help="also run the script on real pycaffe with this interpreter (rows 'pycaffe'; the target "
                         "then compares with its same-run median)")
    ap.add_argument("--pycaffe-path", metavar="DIR",
                    help="PYTHONPATH of --pycaffe (a Caffe build's python directory, holding caffe/_caffe.so)")
    ap.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "results.json"),
                    help="write the 'startup' key of this JSON file (kept: its other keys)")
    a = ap.parse_args(argv)
    names = [n.strip() for n in a.nets.split(",") if n.strip()]
    unknown = set(names) - set(NETS)
    if unknown:
        ap.error("unknown nets: %s" % ", ".join(sorted(unknown)))
    if a.pycaffe_path and not a.pycaffe:
        ap.error("--pycaffe-path needs --pycaffe PYTHON")
    pycaffe = (a.pycaffe, a.pycaffe_path and os.path.abspath(a.pycaffe_path)) if a.pycaffe else None
    pycaffe_module = check_pycaffe(*pycaffe) if pycaffe else None
    variants = {"engine": (ROOT, None)}
    if a.baseline_root:
        variants["baseline"] = (os.path.abspath(a.baseline_root), None)
    if a.no_numba_row:
        variants["engine_numba0"] = (ROOT, {"ENGINE_NUMBA": "0"})
    load_before = list(os.getloadavg())
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        nets = write_nets(names, tmp)
        results = run(nets, a.runs, variants, a.no_bytecode_cache, a.threads, tmp, pycaffe)
        stages = run_stages(nets, a.runs, variants, a.no_bytecode_cache, tmp, pycaffe) if a.stages else None
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": a.runs, "threads": a.threads or None,
        "bytecode_cache": not a.no_bytecode_cache, "baseline_root": a.baseline_root and variants["baseline"][0],
        "machine": dict(cpus=os.cpu_count(), platform=platform.platform(), load_average_before=load_before,
                        load_average_after=list(os.getloadavg()), **versions()),
        "script": SCRIPT, "peer": PEER, "pycaffe_recorded": PYCAFFE_RECORDED,
        "pycaffe": pycaffe and {"python": pycaffe[0], "path": pycaffe[1], "module": pycaffe_module},
        "total_s": time.perf_counter() - t0, "results": results, "targets": targets(results),
    }
    if stages is not None:
        report["stages_cpu_one_thread"] = stages
    print()
    for line in target_lines(report["targets"]):
        print(line)
    if a.json:
        try:
            with open(a.json) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = {}
        doc["startup"] = report
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
        print("JSON: %s (key 'startup'; %.0f s)" % (a.json, report["total_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

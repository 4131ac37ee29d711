"""``python -m engine selftest --gpu``: prove the GPU path on a machine that has one.

Three parts, each run where a GPU is present (CuPy sees a CUDA device):

1. **GPU tests**: ``python -m pytest -m gpu`` (every test marked ``gpu``; they skip
   elsewhere).
2. **Conformance on the GPU**: every case of ``../shared/golden/cases`` runs through
   the shared conformance harness with the engine in GPU mode, and is compared with
   real Caffe's recorded run: the shared checks (``compare.compare``: layers, shapes,
   the Init transcript, debug_info lines) plus every recorded statistic (mean |x|, L2
   norm and the sampled values of every blob's data and diff, every param's diff, the
   solver steps) within ``--rtol`` (1e-5) relative.
3. **GPU benchmark**: ``benchmarks/run.py --gpu-only`` on ResNet-50 and GoogLeNet at
   batch 32, forward+backward against PyTorch + cuDNN (goal: <= 1.2x).

The figures go to ``benchmarks/results.json`` under ``gpu_selftest``.  Without a GPU
the command says so and exits 1 without running anything.  ``--device cpu`` runs the
same parts on the CPU (the GPU tests then are the CPU tests of the same files, and
the benchmark is the CPU one): what this machine can check of the machinery.
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_SHARED = os.environ.get("CAFFE_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
BENCH_NETS = ("resnet50", "googlenet")
BENCH_BATCH = 32
GOAL_RATIO = 1.2

# Runs the shared harness with the engine switched to ``device`` (the harness calls
# set_mode_cpu(); here that call selects the device under test).
_HARNESS_SHIM = r"""
import runpy, sys
import engine
device = sys.argv.pop(1)
if device == "gpu":
    engine.set_mode_cpu = lambda: engine.set_mode_gpu()
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

_STAT_KEYS = ("forward_outputs", "blobs_data", "blobs_diff", "params_diff")


class NoGpu(RuntimeError):
    pass


def gpu_status():
    """(True, device name) or (False, why not)."""
    from engine.core import backend
    if not backend.gpu_available():
        why = backend._cupy_error
        return False, ("CuPy is not installed" if isinstance(why, ImportError)
                       else "CuPy sees no CUDA device (%s)" % (str(why).strip() or type(why).__name__))
    cp = backend.cupy()
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props.get("name", b"GPU")
    return True, name.decode() if isinstance(name, bytes) else str(name)


# ---------------------------------------------------------------------- 1. tests
def run_tests(device, out, root=ROOT, extra=()):
    """pytest on the ``gpu``-marked tests (``device == "gpu"``) or, as the CPU
    substitute, on ``extra`` test paths; returns {"passed", "failed", "skipped", "rc"} and
    the failures' summary lines.  One process: the GPU tests share one device and pytest-xdist
    lost a worker on the first GPU machine."""
    # addopts emptied: pytest.ini's own -q on top of this one (-qq) drops the closing
    # "N passed" line that the counts are read from
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", "-rfE",
           "--tb=line"]
    cmd += ["-m", "gpu"] if device == "gpu" else []
    cmd += list(extra)
    out.write("$ %s\n" % " ".join(cmd[1:]))
    out.flush()
    p = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    counts = parse_pytest_summary(p.stdout)
    counts["rc"] = p.returncode
    # what failed and why (pytest's short summary), for the results file
    counts["failures"] = [line[:400] for line in p.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    if p.returncode not in (0, 1):
        counts["output_tail"] = (p.stdout + p.stderr)[-4000:]
    out.write((p.stdout.strip().splitlines() or [""])[-1] + "\n")
    return counts


def parse_pytest_summary(text):
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    # pytest's closing line ("3 failed, 120 passed ... in 9.1s"), wherever the warnings
    # summary or a plugin's lines put it
    lines = [ln for ln in text.strip().splitlines() if re.search(r"\d+ (passed|failed|errors?|skipped)", ln)
             and re.search(r" in [\d.]+s", ln)]
    last = lines[-1] if lines else ""
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", last):
        key = "errors" if word.startswith("error") else word
        if key in counts:
            counts[key] += int(n)
    return counts


# ---------------------------------------------------------------------- 2. conformance
def _shared_module(shared, name):
    import importlib.util
    path = os.path.join(shared, "conformance", name + ".py")
    spec = importlib.util.spec_from_file_location("conformance_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_case(shared, case_path, device, timeout=900):
    """The harness's result document for one case, the engine on ``device``."""
    harness = os.path.join(shared, "conformance", "harness.py")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    spec = json.load(open(case_path))
    proto = spec["prototxt"]
    if not os.path.isabs(proto):
        proto = os.path.join(shared, "zoo", proto)
    env = dict(os.environ, HELDOUT_DATA=os.path.join(shared, "zoo"), PYTHONPATH=ROOT)
    cmd = [sys.executable, "-c", _HARNESS_SHIM, device, harness, "--impl", "engine", "--prototxt", proto,
           "--spec", os.path.abspath(case_path), "--out", out]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    result = {"case": os.path.basename(case_path), "impl": "engine", "rc": rc}
    if rc == 0:
        with open(out) as f:
            result.update(json.load(f))
    else:
        result["error_tail"] = err[-3000:]
    os.unlink(out)
    # As the shared run_case does: Caffe's log lines (Init transcript, debug_info) from stderr.
    result["log"] = _shared_module(shared, "run_case").parse_log(err)
    return result


def rel_err(a, b, scale=0.0):
    """|a - b| relative to the larger magnitude (and ``scale``); 0 when both are NaN."""
    if a is None or b is None:
        return 0.0 if a is b else math.inf
    if math.isnan(a) or math.isnan(b):
        return 0.0 if (math.isnan(a) and math.isnan(b)) else math.inf
    if a == b:
        return 0.0
    den = max(abs(a), abs(b), scale)
    return abs(a - b) / den if den > 0 else math.inf


def _stat_pairs(ref, got):
    """(where, caffe stats, engine stats) of every recorded statistic."""
    for key in _STAT_KEYS:
        r, g = ref.get(key) or {}, got.get(key) or {}
        for name, rs in r.items():
            gs = g.get(name)
            rl, gl = (rs, gs) if isinstance(rs, list) else ([rs], [gs])
            for k, a in enumerate(rl):
                b = gl[k] if isinstance(gl, list) and k < len(gl) else None
                yield "%s %s%s" % (key, name, "[%d]" % k if isinstance(rs, list) else ""), a, b
    for i, (rs, gs) in enumerate(zip(ref.get("solver_steps", []), got.get("solver_steps", []))):
        for key in ("loss", "params", "params_diff"):
            for name, a in (rs.get(key) or {}).items():
                b = (gs.get(key) or {}).get(name)
                al, bl = (a, b) if isinstance(a, list) else ([a], [b])
                for k, x in enumerate(al):
                    y = bl[k] if isinstance(bl, list) and k < len(bl) else None
                    yield "step %d %s %s[%d]" % (i, key, name, k), x, y


def numeric_problems(ref, got, rtol):
    """(problems, largest relative error) of the recorded statistics at ``rtol``: mean
    |x| and L2 relative to themselves, sampled values relative to the blob's mean |x|."""
    problems, worst = [], 0.0
    for where, a, b in _stat_pairs(ref, got):
        if b is None:
            problems.append("%s: missing" % where)
            continue
        if not a.get("count"):
            continue
        if a.get("count") != b.get("count") or a.get("nonfinite") != b.get("nonfinite"):
            problems.append("%s: count/non-finite %s/%s vs %s/%s" % (where, a.get("count"), a.get("nonfinite"),
                                                                      b.get("count"), b.get("nonfinite")))
            continue
        errs = [(rel_err(a[k], b[k]), k) for k in ("asum_mean", "l2") if k in a and k in b]
        scale = abs(a.get("asum_mean") or 0.0)
        errs += [(rel_err(x, y, scale), "sample") for x, y in zip(a.get("sample", []), b.get("sample", []))]
        for e, k in errs:
            worst = max(worst, e)
            if e > rtol:
                problems.append("%s %s: relative error %.2g > %.0e" % (where, k, e, rtol))
                break
    return problems, worst


def run_conformance(shared, device, rtol, out, names=None, jobs=1):
    """Every case (or ``names``) on ``device``; ``jobs`` cases run at once (each its own
    process), the lines written in the cases' order."""
    from concurrent.futures import ThreadPoolExecutor
    compare = _shared_module(shared, "compare")
    cases_dir = os.path.join(shared, "golden", "cases")
    golden_dir = os.path.join(shared, "golden", "caffe")
    cases = sorted(f[:-5] for f in os.listdir(cases_dir) if f.endswith(".json"))
    if names:
        cases = [c for c in cases if c in names]
    rows = []
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        runs = [pool.submit(run_case, shared, os.path.join(cases_dir, name + ".json"), device) for name in cases]
        for name, run in zip(cases, runs):
            rows.append(_judge_case(compare, golden_dir, name, run.result(), rtol, out, device))
    return {"device": device, "rtol": rtol, "cases": len(rows), "matched": sum(r["match"] for r in rows),
            "max_rel_err": max((r["max_rel_err"] for r in rows), default=0.0),
            "failures": [r for r in rows if not r["match"]]}


def _judge_case(compare, golden_dir, name, got, rtol, out, device="cpu"):
    """One case's row (and its lines on ``out``): the shared checks plus the statistics."""
    ref = json.load(open(os.path.join(golden_dir, name + ".json")))
    problems = compare.compare(ref, got)
    explained = []
    if device == "gpu":
        problems, explained = _explain_gpu_debug_lines(compare, ref, got, problems, rtol)
    numeric, worst = numeric_problems(ref, got, rtol) if ref.get("rc") == 0 and got.get("rc") == 0 else ([], 0.0)
    ok = not problems and not numeric
    out.write("  %-32s %s  (max rel. error %.1e)\n" % (name, "match" if ok else "DIFFERS", worst))
    for p in (problems + numeric)[:3]:
        out.write("      %s\n" % p[:240])
    out.flush()
    row = {"case": name, "match": ok, "max_rel_err": worst, "problems": (problems + numeric)[:5]}
    if explained:
        row["explained"] = explained[:5]
        out.write("      (%d debug_info line(s) follow cuBLAS's exact sum, not the CPU's float32 lanes: %s)\n"
                  % (len(explained), explained[0][:200]))
    if got.get("rc") != 0 and ref.get("rc") == 0:
        row["error_tail"] = (got.get("error_tail") or "")[-1500:]
    return row


_FORWARD_LINE = re.compile(r"^\s*\[Forward\] Layer \S+, top blob (\S+) data: (\S+)$")


def _explain_gpu_debug_lines(compare, ref, got, problems, rtol):
    """(problems, explained): the debug_info comparison again, where a [Forward] top-data
    line whose number is the blob's exact mean |x| (the golden's float64 statistic, within
    ``rtol``) is explained, not a difference.  Caffe's CPU run printed cblas_sasum's sum in
    16 float32 lanes, which drifts on blobs of 10^5+ elements; on the GPU Caffe prints
    cublasSasum's, as the engine does.  Anything else is still a problem."""
    kept = [p for p in problems if " value differs: " not in p and " line differs: " not in p]
    explained = []
    data = ref.get("blobs_data") or {}
    for phase in sorted({m.group(1) for m in (re.match(r"^(\S+) (?:value|line) differs: ", p)
                                               for p in problems) if m}):
        for a, b in zip(compare.debug_lines(ref, phase), compare.debug_lines(got, phase)):
            if compare.NUM.sub("#", a.strip()) != compare.NUM.sub("#", b.strip()):
                kept.append("%s line differs: caffe %r, engine %r" % (phase, a.strip(), b.strip()))
                break
            na = [float(x) for x in compare.NUM.findall(a)]
            nb = [float(x) for x in compare.NUM.findall(b)]
            if len(na) == len(nb) and all(compare.close(x, y) for x, y in zip(na, nb)):
                continue
            m = _FORWARD_LINE.match(b)
            exact = (data.get(m.group(1)) or {}).get("asum_mean") if m else None
            if exact is not None and rel_err(float(m.group(2)), exact) <= rtol:
                explained.append("%s: caffe %s, engine %s, exact %.6g" % (m.group(1), na[-1], nb[-1], exact))
                continue
            kept.append("%s value differs: caffe %r, engine %r" % (phase, a.strip(), b.strip()))
            break
    return kept, explained


# ---------------------------------------------------------------------- 3. benchmark
def run_benchmark(device, out, nets=BENCH_NETS, batch=BENCH_BATCH, root=ROOT, repeat=5):
    """benchmarks/run.py on ``device`` for ``nets``; its result rows."""
    script = os.path.join(root, "benchmarks", "run.py")
    if not os.path.exists(script):
        out.write("benchmark skipped: %s not found (run from a checkout)\n" % script)
        return {"skipped": "benchmarks/run.py not found"}
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        res = f.name
    cmd = [sys.executable, script, "--nets", ",".join(nets), "--batch", str(batch), "--repeat", str(repeat),
           "--out", res, "--gpu-only" if device == "gpu" else "--no-gpu"]
    out.write("$ %s\n" % " ".join(cmd[1:]))
    out.flush()
    p = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    try:
        with open(res) as f:
            rows = json.load(f).get("results", [])
    except ValueError:
        rows = []
    os.unlink(res)
    summary = []
    for r in rows:
        fb = (r.get("ratio") or {}).get("forward_backward")
        # the medians themselves too: a ratio alone cannot say which side moved between runs
        e_ms, t_ms = ((r.get(k) or {}).get("forward_backward") for k in ("engine_s", "torch_s"))
        e_ms, t_ms = (v * 1e3 if v is not None else None for v in (e_ms, t_ms))
        summary.append({"net": r.get("net"), "device": r.get("device"), "batch": r.get("batch"),
                        "fwd_bwd_ratio": fb, "engine_ms": e_ms, "torch_ms": t_ms,
                        "goal": GOAL_RATIO, "met": fb is not None and fb <= GOAL_RATIO,
                        "memory": r.get("memory"), "check": r.get("check"), "error": r.get("error")})
        out.write("  %-10s %s b%s fwd+bwd engine/torch %s%s (goal <= %.1f)\n"
                  % (r.get("net"), r.get("device"), r.get("batch"),
                     "%.2f" % fb if fb is not None else r.get("error", "?"),
                     " (%.1f / %.1f ms)" % (e_ms, t_ms) if e_ms is not None and t_ms is not None else "",
                     GOAL_RATIO))
    doc = {"rc": p.returncode, "rows": summary}
    if p.returncode:
        doc["error_tail"] = p.stderr[-3000:]
    return doc


# ---------------------------------------------------------------------- the command
def write_results(section, path=None):
    """Put ``section`` under ``gpu_selftest`` in benchmarks/results.json (other keys kept)."""
    path = path or os.path.join(ROOT, "benchmarks", "results.json")
    doc = {}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc["gpu_selftest"] = section
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return path


def selftest(device="gpu", shared=None, rtol=1e-5, out=None, parts=("tests", "conformance", "benchmark"),
             cases=None, results_path=None, cpu_tests=("tests/test_cuda_compile.py",), jobs=1):
    """Run the parts on ``device``; returns (exit code, the section written)."""
    out = out or sys.stdout
    shared = shared or DEFAULT_SHARED
    if device == "gpu":
        ok, what = gpu_status()
        if not ok:
            raise NoGpu(what)
        from engine.core import backend
        backend.set_mode_gpu()
        backend.set_mode_cpu()
    else:
        what = "CPU (substitute run: no GPU part is exercised)"
    out.write("selftest on %s\n" % what)
    section = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "device": device, "device_name": what}
    failed = False
    if "tests" in parts:
        out.write("\n1. tests\n")
        t = run_tests(device, out, extra=() if device == "gpu" else cpu_tests)
        section["tests"] = t
        failed |= t["rc"] != 0 or t["failed"] > 0 or t["passed"] == 0
    if "conformance" in parts:
        out.write("\n2. conformance on %s against Caffe's goldens (rtol %.0e)\n" % (device.upper(), rtol))
        if not os.path.isdir(os.path.join(shared, "golden", "cases")):
            out.write("  skipped: %s has no golden/cases\n" % shared)
            section["conformance"] = {"skipped": "no ../shared"}
            failed = True
        else:
            c = run_conformance(shared, device, rtol, out, names=cases, jobs=jobs)
            section["conformance"] = c
            out.write("  conformance on %s: %d/%d cases match (max rel. error %.1e)\n"
                      % (device.upper(), c["matched"], c["cases"], c["max_rel_err"]))
            failed |= c["matched"] != c["cases"]
    if "benchmark" in parts:
        out.write("\n3. benchmark against PyTorch (%s)\n" % ("cuDNN" if device == "gpu" else "CPU"))
        b = run_benchmark(device, out)
        section["benchmark"] = b
        failed |= bool(b.get("rc")) or any(r.get("error") for r in b.get("rows", []))
    path = write_results(section, results_path)
    out.write("\nfigures written to %s (gpu_selftest)\n" % path)
    return (1 if failed else 0), section


def cmd_selftest(args, out, err):
    if not args.gpu and args.device is None:
        err.write("selftest: say --gpu (the GPU self-test), or --device cpu for the CPU substitute run\n")
        return 2
    device = args.device or "gpu"
    parts = tuple(p.strip() for p in args.parts.split(",") if p.strip())
    try:
        code, _ = selftest(device, shared=args.shared, rtol=args.rtol, out=out, parts=parts,
                           cases=args.case or None, results_path=args.results, jobs=args.jobs)
    except NoGpu as e:
        err.write("selftest --gpu: no GPU is present: %s.\nNothing was run; run this on a machine with a CUDA "
                  "GPU and the GPU extra (pip install -r requirements-gpu.txt).  Without a GPU, "
                  "`python -m engine.core.kernels.nvrtc_check` compiles every CUDA source.\n" % e)
        return 1
    return code


def add_parser(sub):
    p = sub.add_parser("selftest", help="--gpu: GPU tests, conformance on the GPU, GPU benchmark "
                       "(figures to benchmarks/results.json)")
    p.add_argument("--gpu", action="store_true", help="the GPU self-test (exits 1 when no GPU is present)")
    p.add_argument("--device", choices=("gpu", "cpu"), help="run the parts on this device (cpu: a substitute run)")
    p.add_argument("--parts", default="tests,conformance,benchmark", help="comma-separated subset of "
                   "tests, conformance, benchmark")
    p.add_argument("--case", action="append", help="only this conformance case (repeatable)")
    p.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance against the goldens (1e-5)")
    p.add_argument("--jobs", type=int, default=1, help="conformance cases run at once, each in its own process "
                   "(default 1)")
    p.add_argument("--shared", help="the shared reference folder (default ../shared)")
    p.add_argument("--results", help="results file (default benchmarks/results.json)")
    p.set_defaults(func=cmd_selftest, log_default=False)
    return p

"""The fuzzer's mutants against real Caffe: does the engine accept what Caffe accepts, and refuse
what it refuses?

Mutants are benchmarks/fuzz.py's (the same seed nets, the same mutations, the same seed ->
the same mutants); each is run by real BVLC Caffe 1.0 (pycaffe under Debian's Python, built at
``--caffe``: ``/work/caffe``) and by the engine, each side in a process of its own
(benchmarks/verdict.py: the side imported once, a fork per mutant, a time limit): ``Net(path,
phase, level, stages)``, ``forward()`` on the inputs as Init leaves them (zeros), ``backward()``.

Each mutant gets one of:

- ``agree: both accept`` / ``agree: both refuse`` (Caffe's fatal CHECK or a raised error; the
  engine's CaffeError);
- ``Caffe crashes, the engine refuses`` (a segmentation fault, a floating-point exception: a
  crash, not a refusal of Caffe's);
- ``ENGINE ACCEPTS, CAFFE REFUSES``: a bug to fix;
- ``engine refuses, Caffe accepts``: listed with both messages;
- ``engine escape`` (an exception that is not the engine's own) and ``hang`` (either side past
  ``--timeout``).

    python benchmarks/fuzz_caffe.py --mutants 300 --seed 41
    python benchmarks/fuzz_caffe.py --mutants 50 --seed 7 --out /tmp/fuzz-caffe-7 --json summary.json

The figures of the campaigns run are in benchmarks/README.md and docs/fuzzing.md.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import fuzz  # noqa: E402

CAFFE = os.environ.get("CAFFE_ROOT", "/work/caffe")
CAFFE_PYTHON = "/usr/bin/python3"
VERDICT = os.path.join(ROOT, "benchmarks", "verdict.py")


class Side:
    """A verdict process (benchmarks/verdict.py) of one side."""

    def __init__(self, side, caffe_root=CAFFE):
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", GLOG_minloglevel="0")
        if side == "caffe":
            env["PYTHONPATH"] = os.path.join(caffe_root, "python")
            exe = CAFFE_PYTHON
        else:
            exe = sys.executable
        self.side = side
        self.proc = subprocess.Popen([exe, VERDICT, "--side", side], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
        hello = self.proc.stdout.readline()
        if not hello:
            raise RuntimeError("the %s side did not start (%s)" % (side, exe))

    def ask(self, path, m, timeout):
        req = {"path": path, "phase": m["phase"], "level": m["level"], "stages": m["stages"], "timeout": timeout}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the %s side ended" % self.side)
        return json.loads(line)

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def classify(caffe, eng):
    """The mutant's category from both answers."""
    c, e = caffe["status"], eng["status"]
    if e == "reject" and not (eng.get("error") or "").startswith("engine."):
        return "engine escape"
    if "hang" in (c, e):
        return "hang (%s)" % ("both" if c == e else "Caffe" if c == "hang" else "engine")
    if e == "crash":
        return "engine crash"
    if c == "accept" and e == "accept":
        return "agree: both accept"
    if c == "reject" and e == "reject":
        return "agree: both refuse"
    if c == "crash" and e == "reject":
        return "Caffe crashes, the engine refuses"
    if c == "crash" and e == "accept":
        return "Caffe crashes, the engine accepts"
    if e == "accept":
        return "ENGINE ACCEPTS, CAFFE REFUSES"
    return "engine refuses, Caffe accepts"


def campaign(args):
    seed = args.seed
    out_dir = args.out or os.path.join(tempfile.gettempdir(), "fuzz-caffe-%d" % seed)
    os.makedirs(out_dir, exist_ok=True)
    fixtures = os.path.join(out_dir, "fixtures")
    fuzz.make_fixtures(fixtures)
    t0 = time.monotonic()

    def say(msg):
        print("[%6.0f s] %s" % (time.monotonic() - t0, msg), flush=True)

    import logging
    logging.disable(logging.CRITICAL)
    import engine
    raw = fuzz.collect_seeds(fixtures, zoo=not args.no_zoo)
    seeds = fuzz.prepare_seeds(raw, args.batch, 1, lambda _m: None)
    types = engine.layer_type_list()
    say("seed %d: %d seed nets, %d mutants, timeout %.0f s, Caffe at %s" % (seed, len(seeds), args.mutants,
                                                                           args.timeout, args.caffe))
    caffe, eng = Side("caffe", args.caffe), Side("engine")
    counts = collections.Counter()
    listed = collections.defaultdict(list)
    path = os.path.join(out_dir, "mutant.prototxt")
    try:
        for i in range(args.start, args.start + args.mutants):
            m = fuzz.make_mutant(seed, i, seeds, types)
            with open(path, "wb") as f:
                f.write(m["text"].encode("utf-8", "surrogatepass"))
            a, b = caffe.ask(path, m, args.timeout), eng.ask(path, m, args.timeout)
            kind = classify(a, b)
            counts[kind] += 1
            if not kind.startswith("agree"):
                stem = os.path.join(out_dir, "%05d" % i)
                with open(stem + ".prototxt", "wb") as f:
                    f.write(m["text"].encode("utf-8", "surrogatepass"))
                info = {k: v for k, v in m.items() if k != "text"}
                info.update(kind=kind, caffe=a, engine=b, campaign_seed=seed)
                with open(stem + ".json", "w") as f:
                    json.dump(info, f, indent=1)
                listed[kind].append((i, m["seed_net"], m["ops"], a.get("message", ""), b.get("message", ""),
                                     stem + ".prototxt"))
                say("%s: mutant %d (%s; %s)" % (kind, i, m["seed_net"], "; ".join(m["ops"])))
            if (i - args.start + 1) % 50 == 0:
                say("%d/%d: %s" % (i - args.start + 1, args.mutants, dict(counts)))
    finally:
        caffe.close()
        eng.close()
    secs = time.monotonic() - t0
    agreed = counts["agree: both accept"] + counts["agree: both refuse"]
    lines = ["", "Caffe agreement: seed %d, mutants %d..%d of %d seed nets, %.0f s"
             % (seed, args.start, args.start + args.mutants - 1, len(seeds), secs),
             "agreed %d of %d (%s)" % (agreed, args.mutants, ", ".join("%s %d" % kv for kv in sorted(counts.items())))]
    for kind, rows in sorted(listed.items()):
        for i, net, ops, cm, em, p in rows:
            lines.append("  %s: mutant %d (%s; %s) -> %s\n    Caffe: %s\n    engine: %s"
                         % (kind, i, net, "; ".join(ops), p, cm.replace("\n", " | ")[-300:],
                            em.replace("\n", " | ")[-300:]))
    print("\n".join(lines), flush=True)
    summary = {"seed": seed, "start": args.start, "mutants": args.mutants, "seconds": round(secs),
               "agreed": agreed, "counts": dict(counts), "out": out_dir,
               "listed": {k: [r[0] for r in v] for k, v in listed.items()}}
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if counts["ENGINE ACCEPTS, CAFFE REFUSES"] or counts["engine escape"] else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mutants", type=int, default=300)
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--start", type=int, default=0, help="the first mutant's index (default 0)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds each side may take on one mutant")
    p.add_argument("--batch", type=int, default=2, help="the seed nets' batch (as fuzz.py's --batch)")
    p.add_argument("--no-zoo", action="store_true", help="without ../shared's zoo nets")
    p.add_argument("--caffe", default=CAFFE, help="real Caffe's tree (its python/ is pycaffe)")
    p.add_argument("--out", help="where the mutants that do not agree are written")
    p.add_argument("--json", help="also write the summary here")
    args = p.parse_args(argv)
    if not os.path.isdir(os.path.join(args.caffe, "python", "caffe")):
        print("real Caffe's pycaffe is not at %s/python (see --caffe)" % args.caffe, file=sys.stderr)
        return 2
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())

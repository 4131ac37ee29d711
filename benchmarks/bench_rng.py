"""Speed of Caffe's random streams (engine.core.rng) beside NumPy's own generator.

    python benchmarks/bench_rng.py [--n 1000000] [--repeat 3] [--init]

One line per distribution: the engine's time for n draws on its compiled loops
(Numba) and on the NumPy code it keeps for when Numba is missing, NumPy's own
Generator for the same n, and the compiled time over NumPy's.  The engine's
draws are boost's, value for value (float32 as a filler draws them, unless the
name says f64).  ``--init`` adds Net Init of two filler-heavy nets, CaffeNet's
TRAIN net (../shared/zoo, ~61 M gaussian weights) and a netgen ResNet-152 with
msra fillers (~60 M), seeded, with the time spent in fillers: in a fresh process
(which loads Numba when its draws need it), then on both paths.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.core import rng  # noqa: E402

CAFFENET = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "zoo",
                        "models", "bvlc_reference_caffenet", "train_val.input.prototxt")


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def on_path(compiled, fn):
    """``fn`` run with the compiled loops (large draws) or on the NumPy code."""
    def run():
        saved = rng.COMPILED
        rng.COMPILED = compiled
        try:
            return fn()
        finally:
            rng.COMPILED = saved
    return run


def draws(n, repeat):
    gen = np.random.default_rng(1)
    rng.set_random_seed(1)
    cases = [
        ("uniform", lambda: rng.caffe_rng_uniform(n, -1, 1, np.float32),
         lambda: gen.uniform(-1, 1, n).astype(np.float32)),
        ("gaussian", lambda: rng.caffe_rng_gaussian(n, 0, 1, np.float32),
         lambda: gen.standard_normal(n, dtype=np.float32)),
        ("gaussian f64", lambda: rng.caffe_rng_gaussian(n, 0, 1, np.float64),
         lambda: gen.standard_normal(n)),
        ("bernoulli", lambda: rng.caffe_rng_bernoulli(n, 0.5, np.float64),
         lambda: gen.random(n) < 0.5),
        ("shuffle", lambda: rng.shuffle_indices(rng.caffe_rng(), n),
         lambda: gen.permutation(n)),
    ]
    print("%-14s %12s %12s %12s %8s   (n = %d, best of %d)"
          % ("draw", "compiled ms", "numpy-path", "NumPy ms", "ratio", n, repeat))
    for name, ours, theirs in cases:
        fast = best(on_path(True, ours), repeat)
        slow = best(on_path(False, ours), repeat)
        ref = best(theirs, repeat)
        print("%-14s %12.1f %12.1f %12.1f %8.1f" % (name, fast * 1e3, slow * 1e3, ref * 1e3, fast / ref))


def _resnet152():
    from benchmarks import netgen
    f = tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False)
    with f:
        f.write(netgen.resnet_prototxt(152, train=True, batch=1))
    return f.name


def _init(path):
    """Seconds of a seeded TRAIN Net Init of ``path``, and of them in fillers; the number of
    values the fillers drew."""
    import engine
    from engine.core import fillers
    spent = [0.0, 0]
    fill = fillers.fill

    def timed(blob, param):
        t = time.perf_counter()
        fill(blob, param)
        spent[0] += time.perf_counter() - t
        spent[1] += blob.count if param.type not in ("constant", "bilinear") else 0

    fillers.fill = timed
    try:
        engine.set_random_seed(1)
        t = time.perf_counter()
        net = engine.Net(path, engine.TRAIN)
        total = time.perf_counter() - t
    finally:
        fillers.fill = fill
    del net
    return total, spent[0], spent[1]


def _fresh_init(path):
    """:func:`_init` in a new process: Numba not loaded yet (loaded by the draws that need it)."""
    import json
    import subprocess
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--init-once", path],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def inits():
    nets = [("ResNet-152 (netgen, msra)", _resnet152())]
    if os.path.exists(CAFFENET):
        nets.insert(0, ("CaffeNet TRAIN", CAFFENET))
    else:
        print("(%s is absent: CaffeNet skipped)" % CAFFENET)
    print("\nNet Init, seeded, in seconds (of it in fillers): compiled in a fresh process (Numba\n"
          "loaded by the draws), compiled once Numba is loaded, and on the NumPy code")
    print("%-28s %8s %15s %15s %15s" % ("net", "values", "fresh process", "compiled", "numpy-path"))
    for name, path in nets:
        fresh = _fresh_init(path)
        on_path(True, lambda: rng.caffe_rng_gaussian(1 << 23, 0, 1))()      # Numba loaded
        fast = on_path(True, lambda p=path: _init(p))()
        slow = on_path(False, lambda p=path: _init(p))()
        print("%-28s %7.1fM %7.2f (%5.2f) %7.2f (%5.2f) %7.2f (%5.2f)"
              % (name, fast[2] / 1e6, fresh[0], fresh[1], fast[0], fast[1], slow[0], slow[1]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--init", action="store_true", help="also time Net Init of CaffeNet and ResNet-152")
    ap.add_argument("--init-once", metavar="PROTOTXT", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.init_once:
        import json
        print(json.dumps(_init(a.init_once)))
        return
    if rng.compiled(1 << 62) is None:
        print("Numba is not available: the compiled column runs the NumPy code too.")
    draws(a.n, a.repeat)
    if a.init:
        inits()


if __name__ == "__main__":
    main()

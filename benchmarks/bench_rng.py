"""Speed of Caffe's random streams (engine.core.rng) beside NumPy's own generator.

    python benchmarks/bench_rng.py [--n 1000000] [--repeat 3]

Prints one line per distribution: the engine's time for n draws (float32, as a
filler draws them), NumPy's Generator for the same n, and the ratio.  The
engine reproduces boost's draws value for value, so it is slower than NumPy's
own ziggurat; the target is that a filler of a million values stays well under
a second (a VGG-16 fc6 of 103M gaussians in seconds, as Caffe itself takes).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.core import rng  # noqa: E402


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    n = a.n
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
    print("%-14s %12s %12s %8s   (n = %d, best of %d)" % ("draw", "engine ms", "numpy ms", "ratio", n,
                                                           a.repeat))
    for name, ours, theirs in cases:
        t1, t2 = best(ours, a.repeat), best(theirs, a.repeat)
        print("%-14s %12.1f %12.1f %8.1f" % (name, t1 * 1e3, t2 * 1e3, t1 / t2))


if __name__ == "__main__":
    main()

"""Hostile uploads against the inspector's server: each one bounded, and the server does not grow.

A server (``create_app`` with the defaults but for ``--max-upload-mb 64``, in a child process,
served by waitress threads as ``app.py --serve waitress`` does) gets generated pathological
prototxts and caffemodels through the page's real upload callbacks (benchmarks/load_test.py's
Tab, over HTTP), one after the other, while a second tab steps through LeNet beside them.  For
each upload: the request's time, what the page said (the error's kind and the start of its
message), and the server process's RSS after it.  At the end: the worst request time, the RSS
before the first upload and after the last (and after each round), the other tab's slowest
step while they ran, and what the server left in its temporary folder once it ended.

    python benchmarks/hostile.py                  # every case
    python benchmarks/hostile.py --only dims,relus --json out.json
    python benchmarks/hostile.py --rounds 2        # every case twice: does the RSS grow with them?

The figures are in benchmarks/README.md ("Hostile inputs").
"""
import argparse
import concurrent.futures as cf
import json
import os
import random
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import load_test as lt  # noqa: E402

INPUT = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }\n'


def _relus(n):
    return 'name: "relus"\n' + INPUT + "".join('layer { name: "r%d" type: "ReLU" bottom: "data" top: "data" }\n' % i
                                             for i in range(n))


def _caffemodel(layers=0, blob_dims=None, data=0):
    from engine.proto import caffe_pb2
    p = caffe_pb2.NetParameter()
    for i in range(layers):
        lp = p.layer.add(name="l%d" % i, type="ReLU")
        if blob_dims:
            b = lp.blobs.add()
            b.shape.dim.extend(blob_dims)
            b.data.extend([0.5] * data)
    return p.SerializeToString()


def cases():
    """(name, kind of upload, file name, bytes) of every case (made when asked)."""
    big = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 100000 dim: 3 dim: 1024 '
           'dim: 1024 } } }\n')
    fifteen = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1024 dim: 1024 dim: 1024 } }'
               ' }\n' + "".join('layer { name: "r%d" type: "ReLU" bottom: "data" top: "r%d" }\n' % (i, i)
                                for i in range(2)))
    yield "dims: an Input of 300,000 dim entries (2 MB)", "model", "dims.prototxt", \
        ('name: "dims"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { %s } } }\n'
         % " ".join("dim: 1" for _ in range(300_000))).encode()
    yield "relus: 796,000 in-place ReLUs (53 MB)", "model", "relus.prototxt", _relus(796_000).encode()
    yield "relus-60k: 60,000 in-place ReLUs (4 MB, under the text limit)", "model", "relus60k.prototxt", \
        _relus(60_000).encode()
    yield "relus-20k: 20,000 in-place ReLUs (under every limit)", "model", "relus20k.prototxt", _relus(20_000).encode()
    yield "tops: one layer with 150,000 tops", "model", "tops.prototxt", \
        ('name: "t"\n' + INPUT + 'layer { name: "s" type: "Split" bottom: "data" %s }\n'
         % " ".join('top: "t%d"' for _ in range(150_000))).encode()
    yield "bottoms: a Concat of 90,000 bottoms (under the limit)", "model", "bottoms.prototxt", \
        ('name: "b"\n' + INPUT + 'layer { name: "c" type: "Concat" %s top: "c" concat_param { axis: 0 } }\n'
         % " ".join('bottom: "data"' for _ in range(90_000))).encode()
    yield "rules: a layer with 100,000 include rules", "model", "rules.prototxt", \
        ('name: "r"\n' + INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" top: "r" %s }\n'
         % " ".join('include { stage: "s%d" }' % i for i in range(100_000))).encode()
    yield "nested: 200,000 nested braces", "model", "nested.prototxt", ("layer { " * 200_000).encode()
    yield "line: 10 MB of garbage on one line", "model", "line.prototxt", \
        b"layer { name: " + bytes(random.Random(0).choice(b"abc{}:\" 0123") for _ in range(10 << 20))
    yield "name: a layer name of 10 MB", "model", "name.prototxt", \
        ('name: "n"\nlayer { name: "%s" type: "Input" top: "d" input_param { shape { dim: 1 } } }\n'
         % ("x" * (10 << 20))).encode()
    yield "intmax: a 100000x3x1024x1024 Input", "model", "intmax.prototxt", big.encode()
    yield "memory: a net of 16 GiB a blob", "model", "memory.prototxt", fifteen.encode()
    yield "utf8: invalid UTF-8 bytes", "model", "bytes.prototxt", b"name: \"\xff\xfe\"\n" * 1000
    yield "empty: an empty net", "model", "empty.prototxt", b'name: "x"\n'
    yield "weights-random: 20 MB of random bytes as a caffemodel", "weights", "random.caffemodel", \
        random.Random(1).randbytes(20 << 20)
    yield "weights-layers: a caffemodel of 200,000 layers", "weights", "layers.caffemodel", _caffemodel(200_000)
    yield "weights-shape: a blob claiming 2^31 elements, holding 10", "weights", "shape.caffemodel", \
        _caffemodel(1, [1 << 16, 1 << 15], 10)
    yield "weights-truncated: a caffemodel cut in the middle of a blob", "weights", "cut.caffemodel", \
        _caffemodel(3, [1000], 1000)[:-1234]


def words(v):
    """The text a component (Dash's JSON of it) shows."""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return " ".join(words(x) for x in v)
    if isinstance(v, dict):
        return words(v.get("props", {}).get("children", "")) if "props" in v else ""
    return "" if v is None else str(v)


def run(only=None, threads=8, rounds=1):
    import json as _json
    import subprocess
    import tempfile

    import psutil
    expect = lt.expected_nets()
    tmp = tempfile.mkdtemp(prefix="hostile-")
    # the server in a process of its own (its RSS is the server's alone), waitress threads, as
    # app.py --serve waitress; the bystander's timeline kept small (16 MiB): not what is measured
    cfg = {"max_upload_bytes": 64 << 20, "prebuild": False, "timeline_budget_mb": 16, "_server": "waitress",
           "_threads": threads}
    proc = subprocess.Popen([sys.executable, lt.__file__, "--serve", _json.dumps(cfg)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=dict(os.environ, TMPDIR=tmp), text=True)
    line = ""
    for _ in range(100):
        line = proc.stdout.readline()
        if not line or line.startswith("PORT "):
            break
    if not line.startswith("PORT "):
        raise RuntimeError("the server did not start (exit code %s)" % proc.poll())
    url = "http://%s:%d" % (lt.LOOPBACK, int(line.split()[1]))
    server = psutil.Process(proc.pid)

    def rss():
        return server.memory_info().rss

    pool = cf.ThreadPoolExecutor(8)
    stats = lt.Stats()
    deps = lt.Dependencies.fetch(url)
    rows = []
    other = {"steps": 0, "worst": 0.0, "errors": 0}
    stop = threading.Event()
    try:
        attacker = lt.Tab(url, deps, stats, pool, expect, random.Random(0), "hostile")
        attacker.open()
        bystander = lt.Tab(url, deps, stats, pool, expect, random.Random(1), "bystander")
        bystander.open()

        def steps():
            while not stop.is_set():
                t = time.perf_counter()
                bystander.click("btn-step-forward")
                dt = time.perf_counter() - t
                msg = bystander.props.get("run-message.children") or ""
                other["steps"] += 1
                other["worst"] = max(other["worst"], dt)
                if not msg.startswith("step: "):
                    other["errors"] += 1
                time.sleep(0.2)
        walker = threading.Thread(target=steps, daemon=True)
        for _ in range(60):                 # the bystander's records and the page's caches warm first
            bystander.click("btn-step-forward")
        start_rss = rss()
        walker.start()
        round_rss = []
        for round_no, (name, kind, filename, data) in ((r, c) for r in range(rounds) for c in cases()):
            if only and not any(name.startswith(o + ":") for o in only):
                continue
            if round_no > len(round_rss):
                round_rss.append(rss())
            with attacker.lock:
                attacker.props["upload-%s.filename" % kind] = filename
            attacker.last_load = {}
            t = time.perf_counter()
            out = attacker.trigger("upload-%s.contents" % kind, lt.data_url(data))
            dt = time.perf_counter() - t
            err = words(out.get("load-error.children"))
            status = words(out.get("load-status.children"))
            said = err or ("loaded: " + status if status else "(nothing)")
            rows.append({"case": name, "round": round_no + 1, "bytes": len(data), "seconds": round(dt, 2),
                         "rss_after": rss(), "said": " ".join(said.split())[:200]})
            print("%-62s %9d B %7.2f s  RSS %5.0f MiB  %s" % (name, len(data), dt, rows[-1]["rss_after"] / 2 ** 20,
                                                              rows[-1]["said"][:110]), flush=True)
            del data, out
        stop.set()
        walker.join(60)
        end_rss = rss()
        round_rss.append(end_rss)
    finally:
        stop.set()
        pool.shutdown()
        proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        left = [n for n in os.listdir(tmp) if n.startswith(("inspector-", "caffe-inspector-jobs-"))]
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    summary = {"cases": rows, "worst_seconds": max(r["seconds"] for r in rows),
               "worst_case": max(rows, key=lambda r: r["seconds"])["case"],
               "rss_before": start_rss, "rss_after": end_rss, "rss_after_each_round": round_rss,
               "left_behind": left, "other_tab": other, "http_errors": len(stats.http_errors),
               "tracebacks": len(stats.tracebacks)}
    print("RSS after each round: %s MiB" % ", ".join("%.0f" % (r / 2 ** 20) for r in round_rss))
    print("worst request %.2f s (%s); the server's RSS %.0f MiB before the first upload, %.0f MiB after the last; "
          "the other tab: %d steps, slowest %.2f s, %d not answered as a step; HTTP errors %d, tracebacks %d; "
          "left in its temporary folder at exit: %s" % (summary["worst_seconds"], summary["worst_case"],
                                                        start_rss / 2 ** 20, end_rss / 2 ** 20, other["steps"],
                                                        other["worst"], other["errors"], summary["http_errors"],
                                                        summary["tracebacks"], left or "nothing"))
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated case names (dims, relus, tops, weights-random, ...)")
    p.add_argument("--rounds", type=int, default=1, help="every case this many times (RSS after each round)")
    p.add_argument("--json", help="also write the figures here")
    a = p.parse_args(argv)
    summary = run(a.only.split(",") if a.only else None, rounds=a.rounds)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()

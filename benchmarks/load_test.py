"""Load test of the inspector's server, over HTTP on loopback, the way the page drives it.

The server is ``create_app(config).server`` (a Flask app) served by werkzeug's
``make_server`` on 127.0.0.1 with an ephemeral port, threaded, in a
background thread.  By default the CLI runs that server in a child process, so
the peak RSS and the latencies are the server's alone (``--in-process`` keeps
it in this process, as the tests do).  Nothing listens on any other address.

Each simulated browser tab (a :class:`Tab`) does what the Dash renderer does:
``GET /_dash-layout`` (a fresh session id in the ``session-id`` store),
``GET /_dash-dependencies`` (the registered callbacks, i.e. ``app.callback_map``),
then ``POST /_dash-update-component`` with Dash's payload (output, outputs,
inputs, state, changedPropIds), and after every answer it fires the callbacks
whose inputs the answer changed, concurrently, as the renderer does.

A tab loads its own bundled net (LeNet, the tiny ResNet, the Siamese net; tab
``k`` takes net ``k % 3``), steps it (step, step back, ranges,
forward+backward; now and then a long Forward + Backward with full records as
a background callback, polled for its progress and result as the renderer
polls them), selects layers in the graph, sometimes switches to another
bundled net, and uploads a small net with a Python layer that the server must
refuse (the previous net staying loaded).  Every answer is checked against
what the tab expects of *its* net: the layer list of the range dropdowns, the
net name in the status line, the layer names and indices in every step
message (and the step cursor), the layers drawn in the graph and the layer in
the details panel.  A tab is closed after ``--tab-actions`` actions and a new
one opened, so sessions are abandoned all the time and only eviction
(``--max-sessions``, LRU; ``--idle-seconds``) keeps the server's memory
bounded.  When the server evicted a tab's session, the page says "session
expired"; the tab counts it and reloads, as a user would.

    python benchmarks/load_test.py --sessions 8 --seconds 60 [--max-sessions 8] [--json out.json]

A run lasts ``--seconds`` (the benchmark) or, given a :class:`Goal` (``--goal steps=400,...``;
the tests), until the tabs have done that much work, with a generous time cap that is
only a hang guard: a run that hits it reports what was missing (``Result.hit_cap``,
``Result.missing``) instead of a rate.

Prints requests, errors (HTTP >= 400, error banners, answers with a
traceback, isolation failures), p50/p95 latency (all callbacks and per
callback), peak RSS of the server process and the sessions alive.
"""
import argparse
import base64
import concurrent.futures as cf
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

LOOPBACK = "127.0.0.1"          # the only address this harness ever binds or calls

NETS = (
    ("lenet", "examples/lenet/lenet_train_test.prototxt"),
    ("resnet_tiny", "examples/resnet_tiny/resnet_tiny.prototxt"),
    ("siamese", "examples/shared_stages/siamese_stages.prototxt"),
)

PYTHON_LAYER_NET = """name: "PyLayerNet"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 } } }
layer { name: "py" type: "Python" bottom: "data" top: "out"
        python_param { module: "load_test_layer" layer: "Doubler" } }
"""

# short names of the callbacks, by the first output of each
KINDS = {"net-version.data": "load", "run-version.data": "run", "net-graph.elements": "graph",
         "details.children": "details", "blob-histogram.figure": "blob", "range-start.options": "ranges",
         "health-table.children": "findings", "nan-alert.style": "nan", "selection.data": "select",
         "input-file-status.children": "input-file",
         "download.data": "report", "error-banner.style": "dismiss", "range-start.value": "set-start",
         "range-end.value": "set-end"}

_STEP = re.compile(r"(Forward|Backward)FromTo\((\d+), (\d+)\): (\S+) → ([^\s,]+)")
_LAYER_ERROR = re.compile(r"^⚠ [A-Za-z_][\w.]*: ")
EXPIRED = "no net is loaded"


# ---------------------------------------------------------------- the server
class ServerThread:
    """``app.server`` served by werkzeug on 127.0.0.1:<ephemeral>, threaded,
    in a daemon thread."""

    def __init__(self, app):
        from werkzeug.serving import make_server
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.app = app
        self.httpd = make_server(LOOPBACK, 0, app.server, threaded=True)
        self.port = self.httpd.server_port
        self.url = "http://%s:%d" % (LOOPBACK, self.port)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="inspector-server", daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


class WaitressThread:
    """``app.server`` served by waitress (the production way, docs/serving.md:
    ``python app.py --serve waitress --threads N``) on 127.0.0.1:<ephemeral>,
    in a daemon thread."""

    def __init__(self, app, threads=8):
        from waitress.server import create_server
        logging.getLogger("waitress").setLevel(logging.ERROR)
        self.app = app
        self.server = create_server(app.server, host=LOOPBACK, port=0, threads=int(threads),
                                    ident="caffe-inspector")
        self.port = int(self.server.effective_port)
        self.url = "http://%s:%d" % (LOOPBACK, self.port)
        self.thread = threading.Thread(target=self.server.run, name="inspector-waitress", daemon=True)
        self.thread.start()

    def stop(self):
        self.server.close()


def make_config(max_sessions=8, idle_seconds=3600.0, max_upload_bytes=8 << 20, model_root=ROOT, **kw):
    from inspector.config import InspectorConfig
    return InspectorConfig(model_root=str(model_root), max_sessions=max_sessions, idle_seconds=idle_seconds,
                           max_upload_bytes=max_upload_bytes, **kw)


def add_stats_route(app):
    """``GET /_load-test/stats``: RSS, sessions alive, evicted (``?deep=1``: also
    the engine Nets alive after a gc and the session folders on disk).  Only the
    harness adds it."""
    from flask import jsonify, request

    def stats():
        return jsonify(server_stats(app, deep=request.args.get("deep") == "1"))

    app.server.add_url_rule("/_load-test/stats", "load_test_stats", stats)


def server_stats(app, deep=False):
    import psutil
    store = app.inspector.store
    out = {"rss": psutil.Process(os.getpid()).memory_info().rss, "sessions": len(store),
           "evicted": store.evicted, "pid": os.getpid()}
    if deep:
        out["nets_alive"] = nets_alive()
        out["session_dirs"] = session_dirs()
    return out


def nets_alive():
    """engine Nets reachable in this process after a full collection."""
    import gc

    from engine.core.net import Net
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Net))


def session_dirs(folder=None):
    folder = folder or tempfile.gettempdir()
    try:
        return sum(1 for n in os.listdir(folder) if n.startswith("inspector-%d-" % os.getpid()))
    except OSError:
        return -1


# ---------------------------------------------------------------- what each net should look like
@dataclass
class NetInfo:
    key: str
    path: str
    name: str
    layers: list
    types: dict

    def is_split(self, i):
        return self.types.get(self.layers[i]) == "Split"

    def step_end(self, i):
        """Where Step ▶ from layer ``i`` ends (inspector/state/runner.py's step_forward): the
        inserted Split layers right after it run with it (the graph draws them folded into it);
        from a Split, it and the layer after it."""
        e = i
        while self.is_split(e) and e + 1 < len(self.layers):
            e += 1
        while e + 1 < len(self.layers) and self.is_split(e + 1):
            e += 1
        return e


def expected_nets(phase="TRAIN"):
    """What the server should show for each bundled net (built here once)."""
    from inspector.state import loading
    from inspector.state.sessions import ModelSpec
    out = {}
    for key, rel in NETS:
        path = os.path.join(ROOT, rel)
        ld = loading.build(ModelSpec(model=path, phase=phase))
        g = ld.graph
        out[key] = NetInfo(key, path, g.name, list(g.layer_names()), {l.name: l.type for l in g.layers})
        ld.recorder.detach()
        del ld
    names = [n.name for n in out.values()]
    assert len(set(names)) == len(names)
    return out


# ---------------------------------------------------------------- statistics
@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    latencies: dict = field(default_factory=dict)      # kind -> [seconds]
    statuses: dict = field(default_factory=dict)       # status -> count
    http_errors: list = field(default_factory=list)    # (kind, status, first bytes)
    banners: list = field(default_factory=list)        # error banner texts
    tracebacks: list = field(default_factory=list)
    violations: list = field(default_factory=list)     # isolation / expectation failures
    counts: dict = field(default_factory=dict)         # events: steps, loads, refusals, expired, tabs, ...
    layer_errors: dict = field(default_factory=dict)   # a layer raised (shown in the page): message -> count
    expired_reasons: list = field(default_factory=list)

    def request(self, kind, seconds, status, body=""):
        with self.lock:
            self.latencies.setdefault(kind, []).append(seconds)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status >= 400:
                self.http_errors.append((kind, status, body[:300]))
            if "Traceback (most recent call last)" in body:
                self.tracebacks.append((kind, body[:300]))

    def count(self, what, n=1):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def layer_error(self, text):
        with self.lock:
            self.layer_errors[text] = self.layer_errors.get(text, 0) + 1

    def violation(self, text):
        with self.lock:
            self.violations.append(text)

    def banner(self, text):
        with self.lock:
            self.banners.append(text)

    @property
    def requests(self):
        return sum(self.statuses.values())

    @property
    def errors(self):
        return len(self.http_errors) + len(self.banners) + len(self.tracebacks) + len(self.violations)


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# ---------------------------------------------------------------- one browser tab
_local = threading.local()


def http():
    """This thread's requests.Session (no proxies: everything is loopback)."""
    s = getattr(_local, "session", None)
    if s is None:
        import requests
        s = requests.Session()
        s.trust_env = False
        _local.session = s
    return s


def _walk_layout(node, props):
    if isinstance(node, list):
        for n in node:
            _walk_layout(n, props)
    elif isinstance(node, dict):
        p = node.get("props")
        if isinstance(p, dict):
            cid = p.get("id")
            for k, v in p.items():
                if k == "children":
                    _walk_layout(v, props)
                if isinstance(cid, str) and k != "id":
                    props["%s.%s" % (cid, k)] = v


def split_output(output):
    """Dash's output key → ([{"id", "property"}], multi)."""
    multi = output.startswith("..") and output.endswith("..")
    parts = output[2:-2].split("...") if multi else [output]
    outs = []
    for part in parts:
        cid, prop = part.rsplit(".", 1)
        outs.append({"id": cid, "property": prop.split("@", 1)[0]})
    return outs, multi


class Dependencies:
    """The callbacks as the page gets them (``/_dash-dependencies``)."""

    def __init__(self, deps):
        # clientside callbacks run in the browser, not on the server: a tab never posts them
        deps = [d for d in deps if not d.get("clientside_function")]
        self.deps = deps
        self.by_output = {d["output"]: d for d in deps}
        self.by_input = {}
        for d in deps:
            for i in d["inputs"]:
                self.by_input.setdefault("%s.%s" % (i["id"], i["property"]), []).append(d)

    @classmethod
    def fetch(cls, base):
        r = http().get(base + "/_dash-dependencies", timeout=120)
        r.raise_for_status()
        return cls(r.json())

    def find(self, first_output):
        """The callback whose first output is ``first_output`` ("id.prop")."""
        for d in self.deps:
            outs, _m = split_output(d["output"])
            first = d["output"].lstrip(".").split("...")[0]      # its other outputs may be duplicates ("@")
            if "%s.%s" % (outs[0]["id"], outs[0]["property"]) == first_output and "@" not in first:
                return d
        raise KeyError(first_output)


class Expired(Exception):
    """The server evicted this tab's session."""


_ERR_PARTS = re.compile(r'"children": "((?:[^"\\]|\\.)*)", "className": "err-(?:kind|where|layer|blob|message)"')


def _load_error_text(box):
    """The kind, place and message of the page's load-error box."""
    parts = _ERR_PARTS.findall(_text(box))
    return " | ".join(parts) if parts else _text(box)[:300]


def _text(v):
    return json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v


class Tab:
    """One browser tab: its props, its session id, the callbacks it fires."""

    def __init__(self, base, deps, stats, pool, expect, rng, label=""):
        self.base, self.deps, self.stats, self.pool = base, deps, stats, pool
        self.expect = expect                    # {key: NetInfo}
        self.rng = rng
        self.label = label
        self.props = {}
        self.sid = None
        self.net = None                         # NetInfo of the net the server should hold for us
        self.cursor = 0                         # where the next "step" should run
        self.last_load = {}                     # what the last answered load callback changed
        self.lock = threading.Lock()

    # ----------------------------------------------------------- HTTP
    def open(self):
        t = time.perf_counter()
        r = http().get(self.base + "/_dash-layout", timeout=120)
        self.stats.request("layout", time.perf_counter() - t, r.status_code, "" if r.ok else r.text)
        r.raise_for_status()
        props = {}
        _walk_layout(r.json(), props)
        self.props = props
        self.sid = props["session-id.data"]
        self.net = None
        self.stats.count("tabs")
        # the renderer's first round: the load callback with nothing triggered, then what it changes
        updates = self.fire(self.deps.find("net-version.data"), [], cascade=True)
        self.came_drawn = not updates and self.props.get("net-version.data", 0) >= 1
        if self.came_drawn:
            # the page came with its net drawn (inspector/callbacks/first_view.py): its load
            # callback changed nothing, and the panels follow the graph (assets/graph.js)
            self.last_load = {k: v for k, v in props.items() if k in ("load-status.children", "load-error.children")}
            self.trigger("panels-net.data", self.props["net-version.data"])
        if self.props.get("net-version.data", 0) >= 1:
            self._loaded(self.expect["lenet"], self.last_load)

    def payload(self, dep, changed):
        outs, multi = split_output(dep["output"])

        def vals(items):
            out = []
            for i in items:
                d = {"id": i["id"], "property": i["property"]}
                key = "%s.%s" % (i["id"], i["property"])
                if key in self.props:
                    d["value"] = self.props[key]
                out.append(d)
            return out

        with self.lock:
            return {"output": dep["output"], "outputs": outs if multi else outs[0],
                    "inputs": vals(dep["inputs"]), "state": vals(dep["state"]), "changedPropIds": list(changed)}

    def post(self, dep, changed):
        """One callback request; returns {"id.prop": value} of what it changed."""
        outs, _m = split_output(dep["output"])
        kind = "job" if dep.get("background") else \
            KINDS.get("%s.%s" % (outs[0]["id"], outs[0]["property"]), dep["output"][:30])
        body = json.dumps(self.payload(dep, changed))
        t = time.perf_counter()
        r = http().post(self.base + "/_dash-update-component", data=body,
                        headers={"Content-Type": "application/json"}, timeout=120)
        dt = time.perf_counter() - t
        text = r.text if r.status_code != 204 else ""
        self.stats.request(kind, dt, r.status_code, text if r.status_code >= 400 or "Traceback" in text else "")
        if r.status_code == 204:
            return {}, kind
        if r.status_code != 200:
            return {}, kind
        doc = r.json()
        if dep.get("background") and "cacheKey" in doc:
            doc = self.poll(dep, body, doc)
        updates = {}
        for cid, pv in (doc.get("response") or {}).items():
            for prop, v in pv.items():
                updates["%s.%s" % (cid, prop)] = v
        for cid, pv in (doc.get("sideUpdate") or {}).items():
            for prop, v in pv.items():
                updates["%s.%s" % (cid, prop)] = v
        if "error-text.children" in updates:
            self.stats.banner("%s (%s): %s" % (kind, self.label, updates["error-text.children"]))
        if "net-version.data" in updates:
            # the page's graph passes a new net's version on to the side panels once it is
            # drawn (assets/graph.js sets panels-net): a tab does it at once
            updates["panels-net.data"] = updates["net-version.data"]
        with self.lock:
            for k, v in updates.items():
                if isinstance(v, dict) and v.get("__dash_patch_update"):
                    continue                     # a Patch of the figure: the renderer merges it
                self.props[k] = v
        return updates, kind

    def poll(self, dep, body, handles, timeout=120.0):
        """A background callback (a long action): poll its result the way the renderer
        does, every ``interval`` ms with the signed cacheKey and job handles; returns
        the final answer (``{}`` when it did not come)."""
        interval = (dep["background"].get("interval") or 1000) / 1000.0
        params = {"cacheKey": handles["cacheKey"], "job": handles["job"]}
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            time.sleep(interval)
            t = time.perf_counter()
            r = http().post(self.base + "/_dash-update-component", params=params, data=body,
                            headers={"Content-Type": "application/json"}, timeout=120)
            text = r.text if r.status_code != 204 else ""
            self.stats.request("job-poll", time.perf_counter() - t, r.status_code,
                               text if r.status_code >= 400 or "Traceback" in text else "")
            if r.status_code != 200:
                return {}
            doc = r.json()
            if doc.get("progress"):
                self.stats.count("job progress reports")
            if "response" in doc:
                return doc
        self.stats.violation("%s: a long action gave no result in %.0f s" % (self.label, timeout))
        return {}

    def fire(self, dep, changed, cascade=True, depth=0):
        """Fire ``dep``; then, like the renderer, every callback whose inputs it changed
        (all of one round at once)."""
        updates, kind = self.post(dep, changed)
        self._observe(kind, updates)
        if cascade:
            self.cascade({k: {dep["output"]} for k in updates}, depth + 1)
        return updates

    def cascade(self, changed, depth=1):
        """``changed``: {prop: the callbacks whose answers led to it}.  Like the
        renderer, a callback is not fired again by a change it caused itself, directly
        or through others (dash-renderer prunes such circular requests): the load
        callback's own outputs (example, phase, level, stages) do not re-run it."""
        if not changed or depth > 4:
            return
        todo = {}
        for prop, preds in changed.items():
            for d in self.deps.by_input.get(prop, ()):
                if d["output"] in preds:
                    continue
                entry = todo.setdefault(d["output"], (d, set(), set()))
                entry[1].add(prop)
                entry[2].update(preds)
        if not todo:
            return
        futures = [(d, preds, self.pool.submit(self.post, d, sorted(ch))) for d, ch, preds in todo.values()]
        nxt = {}
        for d, preds, f in futures:
            updates, kind = f.result()
            self._observe(kind, updates)
            for k in updates:
                nxt.setdefault(k, set()).update(preds | {d["output"]})
        self.cascade(nxt, depth + 1)

    def trigger(self, prop, value):
        """The user changes ``prop`` (a click: n_clicks + 1)."""
        with self.lock:
            self.props[prop] = value
        out = {}
        todo = self.deps.by_input.get(prop, ())
        futures = [(d, self.pool.submit(self.post, d, [prop])) for d in todo]
        nxt = {}
        for d, f in futures:
            updates, kind = f.result()
            self._observe(kind, updates)
            out.update(updates)
            for k in updates:
                if k != prop:
                    nxt.setdefault(k, set()).add(d["output"])
        self.cascade(nxt, 1)
        return out

    def click(self, button):
        key = "%s.n_clicks" % button
        return self.trigger(key, (self.props.get(key) or 0) + 1)

    # ----------------------------------------------------------- checks of every answer
    def _observe(self, kind, updates):
        """Isolation checks on what came back for this tab."""
        if kind == "load" and updates:
            self.last_load = updates
        net = self.net
        if not updates or net is None:
            return
        if kind == "ranges" and "range-start.options" in updates:
            got = [o["value"] for o in updates["range-start.options"]]
            if got and got != net.layers:
                self.stats.violation("%s: range options %s… are not %s's layers" % (self.label, got[:4], net.name))
        if kind == "graph" and "net-graph.elements" in updates:
            drawn = set()
            for el in updates["net-graph.elements"] or []:
                data = el.get("data") or {}
                if data.get("kind") in ("layer", "block"):        # a block stands for the layers it folds
                    drawn.update(m for m in (data.get("members") or "").split("|") if m)
            if drawn and not drawn <= set(net.layers):
                self.stats.violation("%s: graph draws layers %s not in %s"
                                     % (self.label, sorted(drawn - set(net.layers))[:4], net.name))
            if drawn:
                self.stats.count("graphs-checked")

    def _loaded(self, info, updates):
        """After a load that should have brought ``info`` in."""
        status = _text(updates.get("load-status.children", self.props.get("load-status.children")))
        err = updates.get("load-error.children")
        if err:
            self.stats.violation("%s: loading %s failed: %s" % (self.label, info.name, _load_error_text(err)))
        if "no net loaded" in status:
            raise Expired(status)
        if info.name not in status:
            self.stats.violation("%s: status after loading %s says %s" % (self.label, info.name, status[:120]))
        for other in self.expect.values():
            if other.name != info.name and other.name in status:
                self.stats.violation("%s: status names %s, not %s" % (self.label, other.name, info.name))
        self.net = info
        self.cursor = 0
        got = [o["value"] for o in self.props.get("range-start.options") or []]
        if not got:
            raise Expired("no layers listed")
        if got != info.layers:
            self.stats.violation("%s: after loading %s the range lists %s…" % (self.label, info.name, got[:4]))

    def _message(self):
        msg = self.props.get("run-message.children") or ""
        if EXPIRED in msg:
            raise Expired(msg)
        return msg

    def _check_step(self, msg, direction, start=None, end=None):
        if _LAYER_ERROR.match(msg):
            # a layer raised: the page shows it in the run message and the session goes on
            self.stats.layer_error("%s on %s: %s" % (direction, self.net.name, msg[2:]))
            return None
        m = _STEP.search(msg)
        if not m or m.group(1) != direction or msg.startswith("⚠"):
            self.stats.violation("%s: unexpected run message on %s: %r" % (self.label, self.net.name, msg[:160]))
            return None
        s, e, a, b = int(m.group(2)), int(m.group(3)), m.group(4), m.group(5)
        names = self.net.layers
        if not (s < len(names) and e < len(names) and names[s] == a and names[e] == b):
            self.stats.violation("%s: %s names %s/%s at %d/%d, not %s's" % (self.label, msg[:80], a, b, s, e,
                                                                            self.net.name))
        if start is not None and (s, e) != (start, end):
            self.stats.violation("%s: asked %s(%d, %d) on %s, ran (%d, %d) — cursor moved by someone else?"
                                 % (self.label, direction, start, end, self.net.name, s, e))
        return s, e

    # ----------------------------------------------------------- actions
    def load_example(self, info):
        shown = self.net is not None and self.net.key == info.key and \
            self.props.get("example-select.value") == info.path
        before = self.props.get("net-version.data")
        self.last_load = {}
        if not shown:
            self.net = info                     # what the answers to this load must show
        self.trigger("example-select.value", info.path)
        if shown and self.last_load.get("net-version.data", before) == before:
            # the page already showed this net: the server keeps it as it is (the same Net,
            # its records and the step cursor), answering nothing new
            self.stats.count("reselected")
        else:
            self._loaded(info, self.last_load)
        self.stats.count("loads")
        self.stats.count("loaded " + info.key)

    def step(self):
        n = len(self.net.layers)
        i = self.cursor if 0 <= self.cursor < n else 0
        e = self.net.step_end(i)
        self.click("btn-step-forward")
        msg = self._message()
        if self._check_step(msg, "Forward", i, e) is not None:
            self.cursor = e + 1 if e + 1 < n else 0
        self.stats.count("steps")
        self.stats.count("stepped " + self.net.key)

    def step_back(self):
        self.click("btn-step-backward")
        self._check_step(self._message(), "Backward")
        self.stats.count("steps back")

    def forward_range(self):
        n = len(self.net.layers)
        s = self.rng.randrange(n)
        e = self.rng.randrange(s, n)
        with self.lock:
            self.props["range-start.value"] = self.net.layers[s]
            self.props["range-end.value"] = self.net.layers[e]
        self.click("btn-forward")
        if self._check_step(self._message(), "Forward", s, e) is not None:
            self.cursor = e + 1 if e + 1 < n else 0
        self.stats.count("ranges")

    def forward_backward(self):
        self.click("btn-forward-backward")
        msg = self._message()
        if _LAYER_ERROR.match(msg):
            self.stats.layer_error("Forward+Backward on %s: %s" % (self.net.name, msg[2:]))
        elif not msg.startswith("Forward + Backward: loss"):
            self.stats.violation("%s: forward+backward on %s said %r" % (self.label, self.net.name, msg[:160]))
        else:
            self.cursor = 0
        self.stats.count("forward+backward")

    def long_action(self):
        """A full-records Forward + Backward as a background callback: a thread of the
        server runs it, its progress and result go through the on-disk cache."""
        with self.lock:
            self.props["job-action.value"] = "forward_backward"
        self.click("btn-job-run")
        msg = self._message()
        if _LAYER_ERROR.match(msg):
            self.stats.layer_error("long Forward+Backward on %s: %s" % (self.net.name, msg[2:]))
        elif not msg.startswith("Forward + Backward: loss"):
            self.stats.violation("%s: the long Forward+Backward on %s said %r" % (self.label, self.net.name,
                                                                                  msg[:160]))
        else:
            self.cursor = 0
        self.stats.count("long actions")

    def select(self):
        name = self.rng.choice(self.net.layers)
        self.trigger("net-graph.tapNodeData", {"kind": "layer", "name": name, "members": "|%s|" % name})
        details = _text(self.props.get("details.children"))
        if "Click a layer" in details:
            raise Expired("details empty: %s" % details[:100])
        if name not in details or self.net.types[name] not in details or "not in this net" in details:
            self.stats.violation("%s: details of %s (%s) on %s: %s"
                                 % (self.label, name, self.net.types[name], self.net.name, details[:160]))
        self.stats.count("selects")

    def upload_python_net(self):
        """A net with a Python layer: refused with a message, the previous net kept."""
        before = self.props.get("net-version.data")
        self.last_load = {}
        with self.lock:
            self.props["upload-model.filename"] = "py_layer.prototxt"
        self.trigger("upload-model.contents", data_url(PYTHON_LAYER_NET))
        upd = self.last_load
        err = _text(upd.get("load-error.children"))
        status = _text(upd.get("load-status.children"))
        if "no net loaded" in status:
            raise Expired(status)
        if "PythonLayerRefused" not in err or "allow-python-layers" not in err:
            self.stats.violation("%s: the Python-layer net was not refused: %s" % (self.label, err[:200]))
        if upd.get("net-version.data") != before:
            self.stats.violation("%s: a refused load changed the net version %s -> %s"
                                 % (self.label, before, upd.get("net-version.data")))
        if self.net.name not in status:
            self.stats.violation("%s: after the refused upload the status says %s" % (self.label, status[:120]))
        self.stats.count("python refused")


def data_url(text, mime="text/plain"):
    b = text.encode() if isinstance(text, str) else text
    return "data:%s;base64,%s" % (mime, base64.b64encode(b).decode())


@dataclass
class Goal:
    """The work a run does before it stops: at least ``counts[event]`` of each event
    (the Stats counts: ``steps``, ``tabs``, ``loaded lenet``, ...) and ``requests``
    HTTP requests."""
    counts: dict = field(default_factory=dict)
    requests: int = 0

    def missing(self, stats):
        """What is still to do, e.g. ``["steps 31/40"]`` (empty when reached)."""
        with stats.lock:
            counts = dict(stats.counts)
            requests = sum(stats.statuses.values())
        out = ["%s %d/%d" % (k, counts.get(k, 0), n) for k, n in self.counts.items() if counts.get(k, 0) < n]
        if requests < self.requests:
            out.append("requests %d/%d" % (requests, self.requests))
        return out

    def reached(self, stats):
        return not self.missing(stats)

    @classmethod
    def parse(cls, text):
        """``"steps=400,selects=50,requests=3000"`` -> Goal."""
        counts, requests = {}, 0
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, _, n = part.partition("=")
            if key.strip() == "requests":
                requests = int(n)
            else:
                counts[key.strip()] = int(n)
        return cls(counts, requests)


def run_tab(base, deps, stats, pool, expect, index, done, tab_actions, seed):
    """Tab ``index`` until ``done()`` (the run's goal reached, its duration or its cap
    past): open, load its net, act, close, open another."""
    rng = random.Random(seed * 1000 + index)
    keys = list(expect)
    own = expect[keys[index % len(keys)]]
    n = 0
    while not done():
        n += 1
        tab = Tab(base, deps, stats, pool, expect, rng, label="tab%d.%d" % (index, n))
        try:
            tab.open()
            tab.load_example(own)
            for _ in range(tab_actions):
                if done():
                    break
                r = rng.random()
                if r < 0.45:
                    tab.step()
                elif r < 0.55:
                    tab.step_back()
                elif r < 0.65:
                    tab.forward_range()
                elif r < 0.69:
                    tab.forward_backward()
                elif r < 0.72:
                    tab.long_action()
                elif r < 0.88:
                    tab.select()
                elif r < 0.94:
                    tab.upload_python_net()
                else:
                    tab.load_example(expect[rng.choice(keys)])
        except Expired as exc:
            stats.count("expired")
            stats.expired_reasons.append("%s: %s" % (tab.label, str(exc)[:160]))
        except Exception as exc:      # noqa: BLE001 - the harness itself must not die silently
            stats.violation("%s: harness error %s: %s" % (tab.label, type(exc).__name__, exc))


# ---------------------------------------------------------------- a run
@dataclass
class Result:
    stats: Stats
    seconds: float
    sessions: int
    max_sessions: int
    samples: list           # (t, rss, sessions alive)
    final: dict             # server stats at the end (deep)
    rss_start: int
    goal: Goal = None       # the work asked for (None: a run of a fixed duration)
    hit_cap: bool = False   # the run stopped at its time cap (the hang guard) before reaching its goal
    missing: list = field(default_factory=list)   # what of the goal was not done when it stopped

    @property
    def peak_rss(self):
        return max([s[1] for s in self.samples] or [0])

    @property
    def max_alive(self):
        return max([s[2] for s in self.samples] or [0])

    def rss_halves(self):
        """(peak RSS of the first half, of the second half) after the first 20 %."""
        t0 = self.seconds * 0.2
        mid = (self.seconds + t0) / 2
        a = [s[1] for s in self.samples if t0 <= s[0] < mid]
        b = [s[1] for s in self.samples if s[0] >= mid]
        return (max(a) if a else 0, max(b) if b else 0)

    def summary(self):
        st = self.stats
        allv = [x for v in st.latencies.values() for x in v]
        per = {k: {"n": len(v), "p50_ms": percentile(v, 50) * 1e3, "p95_ms": percentile(v, 95) * 1e3}
               for k, v in sorted(st.latencies.items())}
        h1, h2 = self.rss_halves()
        return {
            "sessions": self.sessions, "seconds": self.seconds, "max_sessions": self.max_sessions,
            "requests": st.requests, "errors": st.errors,
            "http_errors": len(st.http_errors), "http_5xx": sum(1 for e in st.http_errors if e[1] >= 500),
            "banners": len(st.banners), "tracebacks": len(st.tracebacks), "violations": len(st.violations),
            "statuses": {str(k): v for k, v in sorted(st.statuses.items())},
            "p50_ms": percentile(allv, 50) * 1e3, "p95_ms": percentile(allv, 95) * 1e3, "per_callback": per,
            "rss_start_mib": self.rss_start / 2 ** 20, "peak_rss_mib": self.peak_rss / 2 ** 20,
            "peak_rss_first_half_mib": h1 / 2 ** 20, "peak_rss_second_half_mib": h2 / 2 ** 20,
            "sessions_alive_end": self.final.get("sessions"), "sessions_alive_max": self.max_alive,
            "evicted": self.final.get("evicted"), "nets_alive_end": self.final.get("nets_alive"),
            "session_dirs_end": self.final.get("session_dirs"), "events": dict(sorted(st.counts.items())),
            "layer_errors": dict(st.layer_errors),
            "goal": None if self.goal is None else dict(self.goal.counts, requests=self.goal.requests),
            "hit_cap": self.hit_cap, "missing": list(self.missing),
        }


DEFAULT_CAP = 600.0         # seconds: a run with a goal that has not reached it by then is hung


def drive(base, sessions, seconds, expect, sample, seed=0, tab_actions=25, interval=0.25, goal=None,
          cap=DEFAULT_CAP):
    """Run ``sessions`` tabs against ``base`` for ``seconds`` or, with a ``goal``, until the
    goal is reached (``seconds`` then unused; ``cap`` seconds at most, a hang guard);
    ``sample()`` gives (rss, sessions alive) of the server.  Returns (stats, samples,
    seconds taken, whether the cap stopped it)."""
    stats = Stats()
    deps = Dependencies.fetch(base)
    samples = []
    t0 = time.monotonic()
    deadline = t0 + (cap if goal is not None else seconds)
    stop = threading.Event()
    capped = threading.Event()

    def done():
        if goal is not None and goal.reached(stats):
            return True
        if time.monotonic() >= deadline:
            if goal is not None:
                capped.set()
            return True
        return False

    def sampler():
        while not stop.is_set():
            rss, alive = sample()
            samples.append((time.monotonic() - t0, rss, alive))
            stop.wait(interval)

    st = threading.Thread(target=sampler, daemon=True)
    st.start()
    with cf.ThreadPoolExecutor(max_workers=sessions * 4, thread_name_prefix="tab-cb") as pool:
        tabs = [threading.Thread(target=run_tab, args=(base, deps, stats, pool, expect, i, done, tab_actions,
                                                       seed), name="tab%d" % i, daemon=True)
                for i in range(sessions)]
        for t in tabs:
            t.start()
        for t in tabs:
            t.join(max(deadline - time.monotonic(), 0) + 300)
    stop.set()
    st.join(5)
    rss, alive = sample()
    samples.append((time.monotonic() - t0, rss, alive))
    return stats, samples, time.monotonic() - t0, capped.is_set() and not (goal and goal.reached(stats))


def _result(stats, took, sessions, max_sessions, samples, final, rss_start, goal, capped):
    return Result(stats, took, sessions, max_sessions, samples, final, rss_start, goal=goal, hit_cap=capped,
                  missing=goal.missing(stats) if goal is not None else [])


def run_in_process(sessions=8, seconds=10.0, max_sessions=8, idle_seconds=3600.0, seed=0, tab_actions=25,
                   config=None, goal=None, cap=DEFAULT_CAP):
    """Server in a thread of this process (the tests: with a ``goal``, see :func:`drive`)."""
    from inspector import create_app
    expect = expected_nets()
    nets_before = nets_alive()
    config = config or make_config(max_sessions=max_sessions, idle_seconds=idle_seconds)
    app = create_app(config)
    server = ServerThread(app)
    tmp_before, tmp = tempfile.tempdir, tempfile.mkdtemp(prefix="load-test-")
    tempfile.tempdir = tmp                      # the sessions' upload folders go here, to be counted
    try:
        rss_start = server_stats(app)["rss"]

        def sample():
            s = server_stats(app)
            return s["rss"], s["sessions"]

        stats, samples, took, capped = drive(server.url, sessions, seconds, expect, sample, seed, tab_actions,
                                             goal=goal, cap=cap)
        final = server_stats(app, deep=True)
        final["nets_before"] = nets_before
    finally:
        server.stop()
        tempfile.tempdir = tmp_before
        shutil.rmtree(tmp, ignore_errors=True)
    return _result(stats, took, sessions, config.max_sessions, samples, final, rss_start, goal, capped), app


def run_child(sessions=8, seconds=60.0, max_sessions=8, idle_seconds=3600.0, seed=0, tab_actions=25,
              server="werkzeug", threads=8, goal=None, cap=DEFAULT_CAP):
    """Server in a child process (its own RSS, no GIL shared with the tabs);
    ``server``: werkzeug's threaded server or waitress with ``threads`` threads."""
    import psutil
    tmp = tempfile.mkdtemp(prefix="load-test-")
    env = dict(os.environ, TMPDIR=tmp)
    cfg = {"max_sessions": max_sessions, "idle_seconds": idle_seconds, "_server": server, "_threads": threads}
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", json.dumps(cfg)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    try:
        line = ""
        for _ in range(100):                    # skip anything the child printed before its port
            line = proc.stdout.readline()
            if not line or line.startswith("PORT "):
                break
        if not line.startswith("PORT "):
            raise RuntimeError("the server did not start (exit code %s)" % proc.poll())
        base = "http://%s:%d" % (LOOPBACK, int(line.split()[1]))
        child = psutil.Process(proc.pid)
        expect = expected_nets()

        def remote(deep=False):
            r = http().get(base + "/_load-test/stats" + ("?deep=1" if deep else ""), timeout=120)
            r.raise_for_status()
            return r.json()

        rss_start = child.memory_info().rss

        def sample():
            return child.memory_info().rss, remote()["sessions"]

        stats, samples, took, capped = drive(base, sessions, seconds, expect, sample, seed, tab_actions,
                                             goal=goal, cap=cap)
        final = remote(deep=True)
        final["session_dirs"] = session_dirs(tmp)
    finally:
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return _result(stats, took, sessions, max_sessions, samples, final, rss_start, goal, capped)


def serve_child(cfg_json):
    from inspector import create_app
    cfg = json.loads(cfg_json)
    kind, threads = cfg.pop("_server", "werkzeug"), cfg.pop("_threads", 8)
    app = create_app(make_config(**cfg))
    add_stats_route(app)
    server = WaitressThread(app, threads) if kind == "waitress" else ServerThread(app)
    print("PORT %d" % server.port, flush=True)
    sys.stdin.read()                 # until the parent closes our stdin
    server.stop()


def report(res):
    s = res.summary()
    lines = [
        "sessions (tabs at once) %d, %.1f s, --max-sessions %d" % (s["sessions"], s["seconds"], s["max_sessions"]),
    ]
    if res.goal is not None:
        lines.append("goal          %s: %s" % (", ".join("%s %d" % kv for kv in s["goal"].items()),
                                               "STOPPED AT THE TIME CAP, missing " + ", ".join(res.missing)
                                               if res.hit_cap else "reached"))
    lines += [
        "requests      %d  (HTTP statuses %s)" % (s["requests"], s["statuses"]),
        "errors        %d  (HTTP>=400 %d, of them 5xx %d; error banners %d; tracebacks %d; isolation %d)"
        % (s["errors"], s["http_errors"], s["http_5xx"], s["banners"], s["tracebacks"], s["violations"]),
        "latency       p50 %.1f ms, p95 %.1f ms (every callback request)" % (s["p50_ms"], s["p95_ms"]),
    ]
    for k, v in s["per_callback"].items():
        lines.append("  %-12s n=%-6d p50 %8.1f ms  p95 %8.1f ms" % (k, v["n"], v["p50_ms"], v["p95_ms"]))
    lines += [
        "RSS           start %.0f MiB, peak %.0f MiB (peak in 1st/2nd half after warm-up: %.0f / %.0f MiB)"
        % (s["rss_start_mib"], s["peak_rss_mib"], s["peak_rss_first_half_mib"], s["peak_rss_second_half_mib"]),
        "sessions      alive at the end %s, most alive %s, evicted %s; Nets alive %s; session folders %s"
        % (s["sessions_alive_end"], s["sessions_alive_max"], s["evicted"], s["nets_alive_end"],
           s["session_dirs_end"]),
        "events        %s" % ", ".join("%s %d" % kv for kv in s["events"].items()),
    ]
    for text, n in s["layer_errors"].items():
        lines.append("  a layer raised (shown in the run message, session went on) x%d: %s" % (n, text[:200]))
    st = res.stats
    for title, items in (("expired", st.expired_reasons), ("HTTP errors", st.http_errors),
                         ("banners", st.banners), ("tracebacks", st.tracebacks),
                         ("isolation", st.violations)):
        for it in items[:10]:
            lines.append("  %s: %s" % (title, it))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=8, help="browser tabs working at once")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--goal", help="run until this much work is done instead of --seconds, e.g. "
                                  "steps=400,selects=50,tabs=40,requests=3000 (event names as in the report)")
    p.add_argument("--cap", type=float, default=DEFAULT_CAP, help="with --goal: stop after this many seconds "
                                                                  "anyway (a hang guard; the run then fails)")
    p.add_argument("--max-sessions", type=int, default=None, help="the server's --max-sessions (default: --sessions)")
    p.add_argument("--idle-seconds", type=float, default=3600.0)
    p.add_argument("--tab-actions", type=int, default=25, help="actions before a tab is closed and another opened")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--in-process", action="store_true", help="serve from a thread of this process")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--server", choices=["werkzeug", "waitress"], default="werkzeug",
                   help="the server in the child process: werkzeug's threaded one (python app.py) or waitress "
                        "(python app.py --serve waitress, docs/serving.md)")
    p.add_argument("--threads", type=int, default=8, help="waitress worker threads")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.serve:
        return serve_child(a.serve)
    logging.basicConfig(level=logging.CRITICAL)
    kw = dict(sessions=a.sessions, seconds=a.seconds, max_sessions=a.max_sessions or a.sessions,
              idle_seconds=a.idle_seconds, seed=a.seed, tab_actions=a.tab_actions,
              goal=Goal.parse(a.goal) if a.goal else None, cap=a.cap)
    res = run_in_process(**kw)[0] if a.in_process else run_child(server=a.server, threads=a.threads, **kw)
    print(report(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(res.summary(), samples=res.samples), f, indent=1)
    return 0 if res.stats.errors == 0 and not res.hit_cap else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Screenshots of the debugger's views on real nets (headless Chromium), for the docs.

    python benchmarks/debugger_screenshots.py --out docs/img [--zoo ../shared/zoo]

CaffeNet's deploy.prototxt without weights (no fillers: every param 0, every ReLU dead;
the findings say "weights not loaded" once); GoogLeNet's deploy.prototxt with random
weights of a trained net's scale made from its train_val fillers (timeline scrubbed back
with a pinned blob and a diff of two steps; a breakpoint hit, its layer selected and
shown in the folded graph; compared with a snapshot whose inception_4b/5x5 weights were
scaled), and with inception_4* weights scaled up until float32 overflows (every NaN/Inf
source, the graph coloured by NaN/Inf with the first source's block opened; the HTML
report exported from that page, its folded graph); LeNet on real handwritten digits
(examples/lenet's LMDBs, written to a temporary folder) with a solver: the Training tab's
live curves, mid-run.  Each view is one PNG in ``--out`` (docs/debugger.md shows them).
Servers bind 127.0.0.1 on ephemeral ports; nothing else is reached.
"""
import argparse
import logging
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


LENET = os.path.join(ROOT, "examples", "lenet", "lenet_lmdb_train_test.prototxt")
SOLVER = ('net: "%s"\nbase_lr: 0.01\nmomentum: 0.9\nweight_decay: 0.0005\nlr_policy: "inv"\ngamma: 0.0001\n'
          'power: 0.75\ndisplay: 10\nmax_iter: 10000\ntest_iter: 4\ntest_interval: 20\naverage_loss: 10\n'
          'random_seed: 1\n')


# ---------------------------------------------------------------- weights
def make_weights(zoo, folder):
    """(random, one layer scaled, overflowing) caffemodels for GoogLeNet's deploy net."""
    import engine
    from engine.core import backend
    backend.set_random_seed(1)
    gdir = os.path.join(zoo, "models", "bvlc_googlenet")
    src = engine.read_net_params(os.path.join(gdir, "train_val.input.prototxt"))
    for lp in src.layer:
        if lp.type == "Input":
            for shape in lp.input_param.shape:
                shape.dim[0] = 1
    tmp = os.path.join(folder, "train_val_b1.prototxt")
    from google.protobuf import text_format
    with open(tmp, "w") as f:
        f.write(text_format.MessageToString(src))
    net = engine.Net(tmp, engine.TRAIN)
    out = {}
    out["random"] = os.path.join(folder, "googlenet_random.caffemodel")
    net.save(out["random"])
    net.params["inception_4b/5x5"][0].data[...] *= 1.5
    out["scaled"] = os.path.join(folder, "googlenet_4b5x5_x1.5.caffemodel")
    net.save(out["scaled"])
    net.params["inception_4b/5x5"][0].data[...] /= 1.5
    for name, blobs in net.params.items():
        if name.startswith("inception_4") and name.endswith(("/1x1", "/3x3", "/5x5")):
            blobs[0].data[...] *= 1e9        # each inception module x1e9: float32 ends at 3e38
    out["overflow"] = os.path.join(folder, "googlenet_overflow.caffemodel")
    net.save(out["overflow"])
    return out


# ---------------------------------------------------------------- a page
class Page:
    def __init__(self, app, width=1600, height=1000, downloads=None):
        from selenium import webdriver

        from benchmarks.load_test import ServerThread
        self.app = app
        self.server = ServerThread(app)
        opts = webdriver.ChromeOptions()
        for a in ("--headless", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--window-size=%d,%d" % (width, height)):
            opts.add_argument(a)
        if downloads:
            opts.add_experimental_option("prefs", {"download.default_directory": downloads,
                                                   "download.prompt_for_download": False})
        self.d = webdriver.Chrome(options=opts)
        self.d.get(self.server.url)
        self.wait_text("load-status", "layers", 300)

    def close(self):
        self.d.quit()
        self.server.stop()

    def text(self, id_):
        return self.d.execute_script("const e = document.getElementById(arguments[0]); "
                                     "return e ? e.innerText : '';", id_)

    def wait(self, pred, timeout=300, what=""):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if pred():
                    return
            except Exception:  # noqa: BLE001 - the page re-renders
                pass
            time.sleep(0.25)
        raise RuntimeError("timed out: %s" % what)

    def wait_text(self, id_, needle, timeout=300):
        self.wait(lambda: needle in self.text(id_), timeout, "%r in #%s" % (needle, id_))

    def click(self, id_):
        self.d.find_element("css selector", "#" + id_).click()

    def tab(self, label):
        for el in self.d.find_elements("css selector", ".tab"):
            if el.text.strip() == label:
                el.click()
                time.sleep(0.5)
                return
        raise RuntimeError("no tab %r" % label)

    def type(self, id_, value):
        from selenium.webdriver.common.keys import Keys
        el = self.d.find_element("css selector", "#" + id_)
        el.send_keys(Keys.CONTROL, "a")
        el.send_keys(Keys.BACKSPACE)
        el.send_keys(str(value))

    def choose(self, id_, label):
        """Pick ``label`` in the dcc.Dropdown ``id_``."""
        self.click(id_)
        time.sleep(0.5)
        for el in self.d.find_elements("css selector", "[role=option]"):
            if el.text.strip() == label:
                el.click()
                time.sleep(0.5)
                return
        raise RuntimeError("no option %r in #%s" % (label, id_))

    def search(self, text):
        """Type ``text`` in the graph's search box and take the first match (Enter)."""
        from selenium.webdriver.common.keys import Keys
        self.type("graph-search", text)
        self.wait(lambda: self.d.find_elements("css selector", "li.search-hit"), 60, "search results")
        self.d.find_element("css selector", "#graph-search").send_keys(Keys.ENTER)
        time.sleep(1.5)

    def show(self, id_):
        self.d.execute_script("document.getElementById(arguments[0]).scrollIntoView({block: 'start'})", id_)
        time.sleep(0.5)

    def session(self):
        return next(iter(self.app.inspector.store._sessions.values()))

    def shot(self, path, settle=1.5):
        time.sleep(settle)
        self.d.save_screenshot(path)
        print("wrote", path)


def _app(model, **kw):
    from inspector import create_app
    from inspector.config import InspectorConfig
    return create_app(InspectorConfig(model=model, model_root=os.path.dirname(model), **kw))


# ---------------------------------------------------------------- the views
def weights_not_loaded(deploy, out):
    p = Page(_app(deploy, phase="TEST"))
    try:
        p.click("btn-forward")
        p.wait_text("run-message", "ForwardFromTo(0,")
        p.tab("Findings")
        p.wait_text("health-table", "weights not loaded")
        p.shot(os.path.join(out, "debugger-findings-weights-not-loaded.png"))
    finally:
        p.close()


def timeline_breakpoints_compare(deploy, weights, out):
    p = Page(_app(deploy, phase="TEST", weights=weights["random"]))
    try:
        with p.app.inspector.store.use(p.session().id) as s:
            s.loaded.timeline.pin("inception_4a/output")
        p.click("btn-forward")
        p.wait_text("run-message", "ForwardFromTo(0,")
        p.tab("Inputs")
        p.type("input-seed", 7)
        p.click("btn-apply-inputs")
        p.wait_text("run-message", "seed 7")
        p.click("btn-forward")
        p.wait_text("run-message", "ForwardFromTo(0,")
        p.choose("colour-by", "mean |data| of tops")
        p.search("inception_4a/output")          # the pinned blob's layer: its block opened, centred
        p.tab("Timeline")
        p.wait_text("timeline-info", "latest: step 1")
        from selenium.webdriver.common.keys import Keys
        thumb = p.d.find_element("css selector", "#timeline-slider [role=slider]")
        thumb.click()
        thumb.send_keys(Keys.HOME)
        p.wait_text("timeline-info", "Showing step 0")
        p.click("btn-timeline-diff")
        p.wait_text("timeline-diff", "inception")
        p.shot(os.path.join(out, "debugger-timeline.png"))
        p.click("btn-timeline-live")
        p.wait_text("timeline-info", "Live net")
        # breakpoints: a watchpoint on a blob statistic and a layer breakpoint
        p.show("break-text")
        p.type("break-text", "inception_4a/output.max_abs > 5")
        p.click("btn-break-add")
        p.wait_text("break-status", "added #1")
        p.type("break-text", "layer=inception_4c/output")
        p.click("btn-break-add")
        p.wait_text("break-status", "added #2")
        p.click("btn-forward")
        p.wait_text("run-message", "stopped after")
        p.show("break-text")
        p.wait_text("break-hit", "break:")
        p.shot(os.path.join(out, "debugger-breakpoints.png"))
        with p.app.inspector.store.use(p.session().id) as s:
            for b in s.breakpoints.items:
                b.enabled = False
        # compare with a snapshot whose inception_4b/5x5 was scaled
        p.tab("Compare")
        up = p.d.find_element("css selector", "#upload-compare-log input[type=file]")
        up.send_keys(weights["scaled"])
        p.wait_text("compare-summary", "received")
        p.click("btn-compare")
        p.wait_text("compare-summary", "part at layer", 900)
        p.shot(os.path.join(out, "debugger-compare.png"), settle=4)
    finally:
        p.close()


def nonfinite_sources(deploy, weights, out, folder):
    p = Page(_app(deploy, phase="TEST", weights=weights["overflow"]))
    try:
        p.click("btn-forward")
        p.wait_text("run-message", "ForwardFromTo(0,")
        p.wait_text("nan-text", "First NaN/Inf")
        p.choose("colour-by", "NaN / Inf")
        p.click("nan-select")                     # the first source: its block opened, centred
        time.sleep(2.0)
        p.tab("Findings")
        p.wait_text("health-table", "overflow")
        p.shot(os.path.join(out, "debugger-nonfinite-sources.png"))
        report_shot(p, os.path.join(folder, "googlenet_overflow_report.html"), os.path.join(out, "debugger-report.png"))
    finally:
        p.close()


def report_shot(p, html_path, png):
    """The page's HTML report (as Download report makes it), opened in the browser: its graph."""
    from inspector.callbacks import export
    data = export.report(p.app.inspector, p.session().id, "html")
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(data["content"])
    p.d.get("file://" + html_path)
    time.sleep(2.0)
    p.d.execute_script("""
        const nodes = Array.from(document.querySelectorAll('#graph ~ div.graph g.node.block'));
        const n = nodes.find(g => g.textContent.indexOf('inception_4e') >= 0);
        (n || document.getElementById('graph')).scrollIntoView({block: 'center'});""")
    p.shot(png, settle=1.0)


def digits_net(folder):
    """LeNet's LMDB net reading the handwritten digits written into ``folder``."""
    import subprocess
    train, test = os.path.join(folder, "digits_train_lmdb"), os.path.join(folder, "digits_test_lmdb")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "lenet", "make_digits_lmdb.py"), train, test],
                   check=True, cwd=ROOT, capture_output=True)
    with open(LENET) as f:
        text = f.read().replace("examples/lenet/digits_train_lmdb", train).replace(
            "examples/lenet/digits_test_lmdb", test)
    net = os.path.join(folder, "lenet_digits.prototxt")
    with open(net, "w") as f:
        f.write(text)
    return net


def training(folder, out):
    net = digits_net(folder)
    solver = os.path.join(folder, "lenet_solver.prototxt")
    with open(solver, "w") as f:
        f.write(SOLVER % net)
    p = Page(_app(net, solver=solver, phase="TRAIN"))
    try:
        p.tab("Training")
        p.type("job-iterations", 2000)
        p.click("btn-job-run")
        p.wait(lambda: len(p.session().loaded.training.train) >= 120, 900, "120 iterations")
        p.shot(os.path.join(out, "debugger-training.png"), settle=2.5)
        p.click("btn-job-cancel")
        p.wait_text("run-message", "cancelled after", 300)
    finally:
        p.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--zoo", default=os.path.join(os.path.dirname(ROOT), "shared", "zoo"))
    ap.add_argument("--only", action="append", default=[],
                    help="findings, timeline, nonfinite, training (default: all)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    os.makedirs(a.out, exist_ok=True)
    deploy = os.path.join(a.zoo, "models", "bvlc_googlenet", "deploy.prototxt")
    caffenet = os.path.join(a.zoo, "models", "bvlc_reference_caffenet", "deploy.prototxt")    # no fillers
    want = set(a.only) or {"findings", "timeline", "nonfinite", "training"}
    with tempfile.TemporaryDirectory(prefix="debugger-shots-") as folder:
        weights = make_weights(a.zoo, folder) if want & {"timeline", "nonfinite"} else {}
        if "findings" in want:
            weights_not_loaded(caffenet, a.out)
        if "timeline" in want:
            timeline_breakpoints_compare(deploy, weights, a.out)
        if "nonfinite" in want:
            nonfinite_sources(deploy, weights, a.out, folder)
        if "training" in want:
            training(folder, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

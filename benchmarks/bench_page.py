"""Time from opening the inspector's page to a drawn graph, in headless Chromium;
switching the phase; and how smoothly the whole net pans and zooms.

Starts ``python app.py MODEL --port PORT`` (this checkout) and reports, each
as the list of times and their median (the machine is usually busy):

- **warm open** (``--loads``): the page opened in a fresh tab of a browser that
  has opened it before (its scripts cached), a new session, so the server
  opens the net for it as for a new user: ms from navigation start to the
  first frame with the graph drawn (the cytoscape graph's first view, or the
  Plotly graph's first points for older versions of the page);
- **fresh-profile open** (``--fresh``): the same in a new browser with an
  empty profile each time (nothing cached: every script is fetched), as a
  first-time user opens it; at once after the browser starts, or ``--settle S``
  seconds later (a fresh Chromium spends its first second or so on its own
  new-tab page and profile, on the same two cores, while an immediate open loads);
- **phase switch** (``--phase``): a click on the Phase radio button that is
  not checked (TRAIN <-> TEST, alternating, ``--phase-pause`` seconds apart)
  to the first frame with the graph's caption naming the new phase (the net
  rebuilt in that phase and drawn).

``--open-path`` opens the net as a path typed in the page does, not from the command line:
the servers start with no model (``--model-root`` its folder) and every tab opens the
address ``?model=NAME`` (a net from a path under the model root, built for the tab as a
path typed in the page or an upload is, with the tab's own spare of its other phase).

``--before ROOT`` measures another checkout (e.g. ``git worktree add`` or
``git archive`` of an older commit) in the same run: both servers run side by
side and their loads alternate (before, after, before, ...), so that both see
the same machine load.

``--panzoom`` then opens every block (Expand all: ResNet-152's 721 layers
drawn one by one) and measures the frames while the view pans and zooms in
and out for ``--frames`` animation frames (requestAnimationFrame driving
cytoscape's pan and zoom, as a wheel or a drag does): frame times and the
frames that missed 60 fps.

    python benchmarks/bench_page.py [MODEL] [--loads 3] [--fresh 3] [--settle S] [--phase 4] [--phase-pause 4]
                                    [--before ROOT] [--no-prebuild] [--open-path] [--panzoom] [--json out.json]

MODEL defaults to ResNet-152 as KaimingHe's deploy file (``netgen.deploy``:
no weight fillers, old-style input fields; the page opens it in TEST).  Needs
Chromium and chromedriver (Debian: chromium, chromium-driver) and selenium.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The drawn graph: the cytoscape page stamps its first view (window.inspectorGraphDrawn, ms
# since navigation start); for the Plotly page of older versions, the first points on screen
# (seen by polling every 20 ms).
DRAWN = """
if (window.inspectorGraphDrawn) { return window.inspectorGraphDrawn; }
if (document.querySelector('#net-graph .scatterlayer .point')) { return performance.now(); }
return null;
"""

_CY = """
const el = document.getElementById('net-graph');
let cy = el && el._cyreg && el._cyreg.cy;
if (!cy && el) {
  for (const d of el.getElementsByTagName('div')) { if (d._cyreg && d._cyreg.cy) { cy = d._cyreg.cy; break; } }
}
"""

# pan and zoom for ``frames`` animation frames: a zoom out to the whole net, a pan along it,
# a zoom in to reading size and a pan back; the frame times go to window.__panzoom
PANZOOM = _CY + """
const frames = arguments[0], done = arguments[arguments.length - 1];
const bb = cy.elements().boundingBox(), w = cy.width(), h = cy.height();
const zFit = Math.min(w / bb.w, h / bb.h), zRead = 0.9;
const times = [];
let k = 0, last = performance.now();
function view(t) {                       // t in [0, 1): the camera's path
  const phase = Math.floor(t * 4), u = t * 4 - phase;
  const zs = [[zRead, zFit], [zFit, zFit], [zFit, zRead], [zRead, zRead]][phase];
  const ys = [[0.05, 0.5], [0.5, 0.95], [0.95, 0.6], [0.6, 0.1]][phase];
  const z = zs[0] * Math.pow(zs[1] / zs[0], u), y = bb.y1 + bb.h * (ys[0] + (ys[1] - ys[0]) * u);
  cy.viewport({zoom: z, pan: {x: w / 2 - (bb.x1 + bb.w / 2) * z, y: h / 2 - y * z}});
}
function step(now) {
  times.push(now - last);
  last = now;
  if (k >= frames) { done(times.slice(1)); return; }
  view(k / frames);
  k += 1;
  requestAnimationFrame(step);
}
view(0);
requestAnimationFrame(function (now) { last = now; requestAnimationFrame(step); });
"""


def _driver(profile=None):
    """Headless Chromium at 1600x1000; ``profile``: its user-data folder (a fresh,
    empty one for a first-time user)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    o = Options()
    o.add_argument("--headless=new")
    if profile:
        o.add_argument("--user-data-dir=%s" % profile)
    o.add_argument("--window-size=1600,1000")
    o.add_argument("--no-sandbox")
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            o.binary_location = shutil.which(name)
            break
    return webdriver.Chrome(options=o)


# click the Phase radio button that is not checked; resolve with the ms to the first frame whose
# graph caption names the new phase (the caption and the elements come from one callback)
PHASE_SWITCH = """
const limit = arguments[0], done = arguments[arguments.length - 1];
const radios = Array.from(document.querySelectorAll('#phase input[type=radio]'));
const other = radios.find(r => !r.checked);
if (!other) { done(null); return; }
const want = other.value, t0 = performance.now();
other.click();
(function poll() {
  const t = document.getElementById('graph-title');
  if (t && t.innerText.indexOf('\u2014 ' + want) >= 0) {
    requestAnimationFrame(() => done(performance.now() - t0));
  } else if (performance.now() - t0 > limit) { done(null); }
  else { setTimeout(poll, 10); }
})();
"""


PHASE_TARGET_MS = 1000          # issue 22: a phase switch of ResNet-152 within a second (median)
FRESH_TARGET_MS = 1000          # issue 22: ResNet-152 drawn within a second with a fresh profile (median)


def _wait_server(url, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.3)
    raise RuntimeError("the server at %s did not answer" % url)


def _wait_drawn(d, timeout):
    end = time.time() + timeout
    while time.time() < end:
        v = d.execute_script(DRAWN)
        if v:
            return float(v)
        time.sleep(0.02)
    raise RuntimeError("the graph was not drawn within %.0f s" % timeout)


class Page:
    """One server (a checkout's app.py on MODEL) and a browser on it."""

    def __init__(self, root, model, port, server_args=(), open_path=False):
        """``open_path``: the server starts with no model and the tabs open MODEL by its
        path under the model root (its address), as a net opened from the page."""
        from urllib.parse import quote
        self.root, self.url = root, "http://127.0.0.1:%d/" % port
        self.open_url = self.url + ("?model=%s" % quote(os.path.basename(model)) if open_path else "")
        self.server = subprocess.Popen(
            [sys.executable, os.path.join(root, "app.py")] + ([] if open_path else [model]) +
            ["--port", str(port), "--model-root", os.path.dirname(os.path.abspath(model))] + list(server_args),
            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.driver = None

    def start(self, timeout=60.0):
        _wait_server(self.url)
        self.driver = _driver()
        self.driver.get(self.open_url)  # warm the browser's cache of the page's scripts, as a returning user
        _wait_drawn(self.driver, timeout)

    def load(self, timeout=60.0):
        """ms from navigation start to the drawn graph, in a fresh tab."""
        d = self.driver
        d.switch_to.new_window("tab")
        d.get(self.open_url)
        return _wait_drawn(d, timeout)

    def fresh(self, timeout=60.0, settle=0.0):
        """ms from navigation start to the drawn graph in a new browser with an empty profile,
        opened ``settle`` seconds after the browser started (0: at once)."""
        profile = tempfile.mkdtemp(prefix="bench-page-profile-")
        d = _driver(profile)
        try:
            if settle:
                time.sleep(settle)
            d.get(self.open_url)
            return _wait_drawn(d, timeout)
        finally:
            d.quit()
            shutil.rmtree(profile, ignore_errors=True)

    def phase_switch(self, timeout=60.0):
        """ms from a click on the unchecked Phase radio button to the first frame with the
        graph's caption naming that phase (in the tab opened last)."""
        d = self.driver
        d.set_script_timeout(timeout)
        return d.execute_async_script(PHASE_SWITCH, int(timeout * 1000))

    def panzoom(self, frames=240, timeout=120.0):
        """Frame times (ms) while panning and zooming the fully expanded net."""
        d = self.driver
        d.find_element("id", "btn-expand-all").click()
        end = time.time() + timeout
        while time.time() < end:
            if d.execute_script(_CY + "return cy && cy.nodes('.block').length === 0 && cy.nodes().length > 100;"):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("Expand all did not open every block within %.0f s" % timeout)
        time.sleep(2.0)
        d.set_script_timeout(timeout)
        nodes = d.execute_script(_CY + "return cy.elements().length;")
        return nodes, d.execute_async_script(PANZOOM, frames)

    def close(self):
        if self.driver is not None:
            self.driver.quit()
        self.server.terminate()
        self.server.wait(timeout=20)


def _median(times):
    times = [t for t in times if t is not None]
    return statistics.median(times) if times else float("nan")


def frame_summary(times):
    times = sorted(times)
    return {"frames": len(times), "median_ms": statistics.median(times),
            "p95_ms": times[int(0.95 * (len(times) - 1))], "max_ms": times[-1],
            "over_33ms": sum(1 for t in times if t > 33.4), "fps": 1000.0 * len(times) / sum(times)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", help="prototxt (default: ResNet-152 deploy, KaimingHe's file as netgen.py "
                                            "writes it)")
    p.add_argument("--loads", type=int, default=3, help="warm opens: fresh tabs of a browser that opened the page")
    p.add_argument("--fresh", type=int, default=3, help="opens in a new browser with an empty profile each")
    p.add_argument("--settle", type=float, default=0.0,
                   help="seconds each fresh-profile browser is left to start (its first-run work: the new-tab "
                        "page, the profile) before the page is opened, as a user who types the address; "
                        "0 (the default): at once, that work overlapping the open")
    p.add_argument("--phase", type=int, default=4, help="phase switches (TRAIN <-> TEST), alternating")
    p.add_argument("--phase-pause", type=float, default=4.0, help="seconds between phase switches (a user "
                                                                  "looks at the net before switching again)")
    p.add_argument("--port", type=int, default=int(os.environ.get("INSPECTOR_TEST_PORT", 8111)))
    p.add_argument("--root", default=ROOT, help="the checkout whose app.py to start (default: this one)")
    p.add_argument("--before", help="another checkout to measure in the same run, loads alternating")
    p.add_argument("--before-port", type=int, help="its server's port (default: PORT + 50)")
    p.add_argument("--pause", type=float, default=6.0, help="seconds between loads (the server builds the "
                                                             "next tab's net meanwhile)")
    p.add_argument("--fillers", action="store_true", help="ResNet-152 with msra weight fillers (the train "
                   "layout's Input layer and conv1 bias)")
    p.add_argument("--no-prebuild", action="store_true", help="start the servers with --no-prebuild: no net is "
                   "built ahead, every phase switch builds its net (as for a net opened from a path or an upload)")
    p.add_argument("--open-path", action="store_true", help="open MODEL as a path typed in the page (its "
                   "address ?model=NAME, the server started with no model), not from the command line")
    p.add_argument("--panzoom", action="store_true", help="also measure pan/zoom frames on the whole net expanded")
    p.add_argument("--frames", type=int, default=240)
    p.add_argument("--json", help="also write the figures here")
    a = p.parse_args(argv)
    model = a.model
    if model is None:
        from benchmarks.netgen import deploy_prototxt, resnet_prototxt
        model = os.path.join(tempfile.mkdtemp(prefix="bench-page-"), "resnet152_deploy.prototxt")
        with open(model, "w") as f:
            f.write(resnet_prototxt(152, fillers=True) if a.fillers else deploy_prototxt(152))
    server_args = ["--no-prebuild"] if a.no_prebuild else []
    pages = [("after", Page(a.root, model, a.port, server_args, a.open_path))]
    if a.before:
        pages.insert(0, ("before", Page(a.before, model, a.before_port or a.port + 50, server_args, a.open_path)))
    out = {"model": model, "roots": {k: pg.root for k, pg in pages}}
    try:
        for _k, pg in pages:
            pg.start()
        figures = {k: {"warm": [], "fresh": [], "phase": []} for k, _pg in pages}
        for _ in range(a.loads):
            for k, pg in pages:
                time.sleep(a.pause)
                figures[k]["warm"].append(pg.load())
        for _ in range(a.fresh):
            for k, pg in pages:
                time.sleep(a.pause)
                figures[k]["fresh"].append(pg.fresh(settle=a.settle))
        for _ in range(a.phase):
            for k, pg in pages:
                time.sleep(a.phase_pause)
                figures[k]["phase"].append(pg.phase_switch())
        names = {"warm": "warm open (fresh tab, cached scripts) -> graph drawn",
                 "fresh": "fresh-profile open%s -> graph drawn" % (
                     " (%g s after the browser started)" % a.settle if a.settle else ""),
                 "phase": "phase switch -> graph drawn"}
        for k, _pg in pages:
            out[k] = {}
            for what, times in figures[k].items():
                if not times:
                    continue
                print("%s %s: %s, ms: %s (median %.0f, best %.0f)" % (
                    k, os.path.basename(model), names[what], ", ".join("-" if t is None else "%.0f" % t for t in times),
                    _median(times), min(t for t in times if t is not None) if any(times) else float("nan")))
                out[k][what] = {"times_ms": times, "median_ms": _median(times)}
            for what, limit, label in (("fresh", FRESH_TARGET_MS, "fresh-profile open"),
                                        ("phase", PHASE_TARGET_MS, "phase switch")):
                if figures[k][what]:
                    med = _median(figures[k][what])
                    met = med <= limit
                    print("%s %s target (<= %d ms): %s (median %.0f ms, x%.2f)" % (
                        k, label, limit, "MET" if met else "MISS", med, med / limit))
                    out[k][what]["target_met"] = met
        if a.panzoom:
            for k, pg in pages:
                n, frames = pg.panzoom(a.frames)
                s = frame_summary(frames)
                out[k]["panzoom"] = dict(s, elements=n)
                print("%s pan/zoom, whole net expanded (%d elements): %d frames, median %.1f ms, p95 %.1f ms, "
                      "max %.0f ms, %d frames over 33 ms, %.0f fps" % (
                          k, n, s["frames"], s["median_ms"], s["p95_ms"], s["max_ms"], s["over_33ms"], s["fps"]))
    finally:
        for _k, pg in pages:
            pg.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

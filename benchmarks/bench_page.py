"""Time from opening the inspector's page to a drawn graph, in headless Chromium.

Starts ``python app.py MODEL --port PORT`` (this checkout), opens the page
``--loads`` times, each in a fresh tab (a new browser session, so the server
opens the net for it as for a new user), and reports for each load the time
from navigation start to the first frame with the graph drawn: the graph's
nodes on screen (the cytoscape graph's first view, or the Plotly graph's first
points for older versions of the page).

    python benchmarks/bench_page.py [MODEL] [--loads 3] [--port 8111] [--json out.json]

MODEL defaults to ResNet-152 deploy from ``benchmarks/netgen.py``.  Needs
Chromium and chromedriver (Debian: chromium, chromium-driver) and selenium.
"""
import argparse
import json
import os
import shutil
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


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    o = Options()
    o.add_argument("--headless=new")
    o.add_argument("--window-size=1600,1000")
    o.add_argument("--no-sandbox")
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            o.binary_location = shutil.which(name)
            break
    return webdriver.Chrome(options=o)


def _wait_server(url, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.3)
    raise RuntimeError("the server at %s did not answer" % url)


def measure(url, loads=3, pause=6.0, timeout=60.0):
    """[ms from navigation start to the drawn graph] for ``loads`` fresh tabs."""
    d = _driver()
    out = []
    try:
        d.get(url)                      # warm the browser's cache of the page's scripts, as a returning user
        _wait_drawn(d, timeout)
        for _ in range(loads):
            time.sleep(pause)           # the server builds the next tab's net meanwhile (when it does)
            d.switch_to.new_window("tab")
            d.get(url)
            out.append(_wait_drawn(d, timeout))
    finally:
        d.quit()
    return out


def _wait_drawn(d, timeout):
    end = time.time() + timeout
    while time.time() < end:
        v = d.execute_script(DRAWN)
        if v:
            return float(v)
        time.sleep(0.02)
    raise RuntimeError("the graph was not drawn within %.0f s" % timeout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", help="prototxt (default: ResNet-152 deploy from netgen.py)")
    p.add_argument("--loads", type=int, default=3)
    p.add_argument("--port", type=int, default=int(os.environ.get("INSPECTOR_TEST_PORT", 8111)))
    p.add_argument("--root", default=ROOT, help="the checkout whose app.py to start (default: this one)")
    p.add_argument("--fillers", action="store_true", help="ResNet-152 with msra weight fillers (default: "
                   "none, as KaimingHe's deploy file: its weights come from a caffemodel)")
    p.add_argument("--json", help="also write the figures here")
    a = p.parse_args(argv)
    model = a.model
    if model is None:
        from benchmarks.netgen import resnet_prototxt
        model = os.path.join(tempfile.mkdtemp(prefix="bench-page-"), "resnet152_deploy.prototxt")
        with open(model, "w") as f:
            f.write(resnet_prototxt(152, fillers=a.fillers))
    server = subprocess.Popen([sys.executable, os.path.join(a.root, "app.py"), model, "--port", str(a.port),
                               "--model-root", os.path.dirname(os.path.abspath(model))],
                              cwd=a.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = "http://127.0.0.1:%d/" % a.port
        _wait_server(url)
        times = measure(url, a.loads)
    finally:
        server.terminate()
        server.wait(timeout=20)
    print("%s: page open -> graph drawn, ms: %s (best %.0f)" % (os.path.basename(model),
                                                              ", ".join("%.0f" % t for t in times), min(times)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": model, "root": a.root, "times_ms": times, "best_ms": min(times)}, f, indent=1)


if __name__ == "__main__":
    main()

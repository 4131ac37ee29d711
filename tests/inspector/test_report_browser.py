"""The HTML report of a big net in headless Chromium: its graph folded into blocks as the
page opens it, readable (node labels at their size, not a hairball), each block opening in
place; a screenshot is kept in the test's folder."""
import sys
from pathlib import Path

import pytest

import engine
from engine.instruments.report import write_report

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from browser_helpers import next_frames, wait_for  # noqa: E402


def _open(dash_duo, path):
    d = dash_duo.driver
    d.set_window_size(1400, 1000)
    d.get(path.as_uri())
    wait_for(lambda: d.execute_script("return document.readyState") == "complete", timeout=120,
             what="the report page to load")
    next_frames(d)
    return d


def _graph_facts(d, selector):
    """Size of the SVG under ``selector`` on the page, its block nodes and the font size
    its labels are drawn at (px), from the browser's own layout."""
    return d.execute_script("""
        const svg = document.querySelector(arguments[0]);
        if (!svg) return null;
        const r = svg.getBoundingClientRect();
        const labels = Array.from(svg.querySelectorAll('g.node text'));
        const shown = labels.filter(t => { const b = t.getBoundingClientRect(); return b.width > 0 && b.height > 0; });
        const size = shown.length ? shown[0].getBoundingClientRect().height : 0;
        return {w: r.width, h: r.height, visible: svg.checkVisibility(),
                blocks: svg.querySelectorAll('g.node.block').length,
                layers: svg.querySelectorAll('g.node.layer').length, labels: shown.length, px: size,
                text: shown.map(t => t.textContent)};""", selector)


def _non_white_fraction(png_path, box):
    from PIL import Image
    im = Image.open(png_path).convert("L").crop(box)
    px = list(im.getdata())
    return sum(1 for v in px if v < 235) / float(len(px))


def test_resnet152_report_graph_folded_and_readable(dash_duo, tmp_path):
    from benchmarks import netgen
    proto = tmp_path / "resnet152.prototxt"
    proto.write_text(netgen.resnet_prototxt(152, fillers=False))
    net = engine.Net(str(proto), engine.TEST)
    report = tmp_path / "resnet152.html"
    write_report(str(report), net, None, model_label="resnet152.prototxt")
    d = _open(dash_duo, report)
    top = _graph_facts(d, "#graph ~ div.graph svg")
    assert top is not None and top["blocks"] == 50 and top["layers"] == 9, top
    assert 150 < top["w"] < 1400 and top["h"] > 2000                 # drawn at its size, one column of blocks
    assert top["px"] >= 9 and "res4b22 · 14 layers" in top["text"] and "res5c · 13 layers" in top["text"]
    d.execute_script("document.getElementById('graph').scrollIntoView()")
    next_frames(d)
    shot = tmp_path / "resnet152_report_graph.png"
    d.save_screenshot(str(shot))
    assert _non_white_fraction(shot, (20, 120, 400, 900)) > 0.02      # the graph is drawn where it says
    # a block opens in place, drawn alone with what it reads from outside
    inner = "#block-res4b22 svg"
    assert _graph_facts(d, inner)["visible"] is False                  # folded away until opened
    d.execute_script("const e = document.getElementById('block-res4b22'); e.open = true; e.scrollIntoView();")
    next_frames(d)
    facts = _graph_facts(d, inner)
    assert facts["visible"] and facts["w"] > 150 and facts["layers"] == 13 and "res4b21" in facts["text"], facts
    d.save_screenshot(str(tmp_path / "resnet152_report_block.png"))
    page = d.page_source
    assert str(tmp_path) not in page and "Steps (0)" in page


def test_googlenet_report_graph(dash_duo, shared_dir, tmp_path):
    model = shared_dir / "zoo" / "models" / "bvlc_googlenet" / "deploy.prototxt"
    net = engine.Net(str(model), engine.TEST)
    report = tmp_path / "googlenet.html"
    write_report(str(report), net, None)
    d = _open(dash_duo, report)
    top = _graph_facts(d, "#graph ~ div.graph svg")
    # nine Inception modules and conv2, folded inside the section "input" (the page folds it the same way)
    assert top["blocks"] == 10 and "inception_4c · 15 layers" in top["text"], top
    d.execute_script("document.getElementById('graph').scrollIntoView()")
    next_frames(d)
    shot = tmp_path / "googlenet_report_graph.png"
    d.save_screenshot(str(shot))
    assert _non_white_fraction(shot, (20, 120, 400, 900)) > 0.02

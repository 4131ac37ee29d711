"""engine.instruments.report (JSON schema, CSV, Markdown, self-contained HTML) and engine.instruments.draw."""
import csv
import io
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import engine
from engine.core import backend
from engine.instruments.debug import Recorder
from engine.instruments.report import CSV_COLUMNS, SCHEMA_VERSION, build_report, render, write_report
from tests.nets import overflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")
RESNET = os.path.join(ROOT, "examples", "resnet_tiny", "resnet_tiny.prototxt")
SIAMESE = os.path.join(ROOT, "examples", "shared_stages", "siamese_stages.prototxt")


def _run(path=LENET, phase=engine.TRAIN):
    from engine.tools.cli import fill_inputs
    backend.set_random_seed(1)
    net = engine.Net(path, phase)
    fill_inputs(net, 1)
    rec = Recorder(net)
    net.forward()
    net.backward()
    return net, rec


def _no_nan_constants(text):
    def bad(c):
        raise ValueError("non-standard JSON constant %s" % c)
    return json.loads(text, parse_constant=bad)


def test_json_schema_keys():
    net, rec = _run()
    doc = _no_nan_constants(render(net, recorder=rec, fmt="json"))
    assert doc["schema"] == "engine-report" and doc["schema_version"] == SCHEMA_VERSION
    for k in ("record_schema_version", "generated", "engine_version", "net", "layers", "totals", "init", "steps",
              "findings", "first_nonfinite", "timing", "comparison", "meta"):
        assert k in doc, k
    assert doc["net"]["memory_used_bytes"] == net.memory_used_bytes and doc["net"]["phase"] == "TRAIN"
    assert [l["name"] for l in doc["layers"]] == net.layer_names
    conv1 = doc["layers"][1]
    for k in ("name", "type", "bottoms", "tops", "params", "params_count", "macc", "flops", "memory_bytes",
              "need_backward", "backward_reason", "forward_ms", "backward_ms", "top_asum_mean", "nonfinite"):
        assert k in conv1, k
    assert conv1["tops"] == [{"name": "conv1", "shape": [64, 20, 24, 24], "in_place": False}]
    assert conv1["params"][0] == {"name": "0", "shape": [20, 1, 5, 5], "count": 500, "owner": None}
    assert conv1["params_count"] == 520 and conv1["macc"] == 64 * 20 * 24 * 24 * 25
    assert doc["layers"][6]["tops"][0]["in_place"] is True            # relu1
    assert sum(l["memory_bytes"] for l in doc["layers"]) == net.memory_used_bytes
    assert doc["totals"]["reconciles"] is True
    assert {d["name"] for d in doc["init"]["filtered"]} == {"digits", "accuracy"}
    assert doc["init"]["in_place"] == [{"layer": "relu1", "top_index": 0, "blob": "ip1"}]
    assert len(doc["init"]["backward"]) == len(net.layers) and doc["init"]["transcript"]
    assert [s["kind"] for s in doc["steps"]] == ["forward", "backward"]


def test_init_record_of_splits_and_shared_params():
    net = engine.Net(SIAMESE, engine.TRAIN)
    doc = build_report(net)
    assert doc["init"]["shared"] and all(s["owner_layer"] for s in doc["init"]["shared"])
    owned = [p for l in doc["layers"] for p in l["params"] if p["owner"]]
    assert owned and all("/" in p["owner"] for p in owned)
    net = engine.Net(RESNET, engine.TRAIN)
    doc = build_report(net)
    assert doc["init"]["splits"] and doc["init"]["splits"][0]["consumers"]
    assert doc["steps"] == [] and doc["findings"] == []


def test_csv_columns_and_rows():
    net, rec = _run()
    text = render(net, rec, "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0].keys()) == CSV_COLUMNS
    assert [r["name"] for r in rows] == net.layer_names
    r = rows[1]
    assert (r["type"], r["bottoms"], r["tops"], r["top_shapes"]) == ("Convolution", "data", "conv1", "64x20x24x24")
    assert int(r["params"]) == 520 and int(r["memory_bytes"]) == 64 * 20 * 24 * 24 * 4
    assert float(r["forward_ms"]) >= 0 and float(r["top_asum_mean"]) > 0
    assert rows[6]["in_place"] == "ip1" and rows[0]["need_backward"] == "0"


def test_markdown_table():
    net, rec = _run()
    md = render(net, recorder=rec, fmt="markdown")
    assert md.startswith("# Net report: LeNetDigits")
    lines = md.splitlines()
    head = lines.index(next(l for l in lines if l.startswith("| # | layer | type |")))
    assert lines[head + 1].startswith("|---:|")
    body = lines[head + 2:head + 2 + len(net.layers)]
    assert len(body) == len(net.layers) and all(l.startswith("| ") and l.endswith(" |") for l in body)
    assert "| 6 | relu1 | ReLU | ip1 | ip1 [in place] (64x500) |" in md
    assert "## Findings" in md and "### Filtered layers" in md and "`digits` (Input)" in md
    assert render(net, rec, "md") .startswith("# Net report")


def test_html_is_self_contained_with_plotly_and_tables(tmp_path):
    import plotly.offline
    net, rec = _run()
    path = tmp_path / "r.html"
    write_report(str(path), net, rec)
    html = path.read_text()
    js = plotly.offline.get_plotlyjs()
    assert js[:200] in html and html.count(js[:200]) == 1              # the library, inline, once
    rest = html.replace(js, "")
    assert "cdn.plot.ly" not in rest and "<script src" not in rest and 'src="http' not in rest
    assert "<table id='layer-table'>" in html and html.count("<tr") > len(net.layers)
    assert "Net graph" in html and "FLOPs per layer" in html and "Statistics" in html
    assert "Plotly.newPlot" in html and html.count('class="plotly-graph-div"') >= 4


OVERFLOW = overflow((2, 5), tail="")


def test_nan_findings_in_every_format(tmp_path):
    p = tmp_path / "o.prototxt"
    p.write_text(OVERFLOW)
    net = engine.Net(str(p), engine.TEST)
    net.blobs["data"].data[...] = np.array([[0, 0, 2, 0, 0], [0, 0, 0, 0, 0]], np.float32)
    rec = Recorder(net)
    net.forward()
    doc = _no_nan_constants(render(net, rec, "json"))
    assert doc["findings"][0]["check"] == "nonfinite" and doc["findings"][0]["layer"] == "exp3"
    assert doc["first_nonfinite"]["layer"] == "exp3"
    top = doc["steps"][0]["layers"][3]["blobs"][1]["data"]
    assert top["inf"] == 1 and top["max"] == "inf"
    from engine.instruments.debug import StepRecord
    back = StepRecord.from_dict(doc["steps"][0])
    assert back.layers[3].blobs[1].data.max == float("inf")
    assert "nonfinite" in render(net, rec, "md")
    html = render(net, rec, "html")
    assert "class='bad'" in html and "Non-finite values" in html
    assert list(csv.DictReader(io.StringIO(render(net, rec, "csv"))))[3]["nonfinite"] == "1"


def test_update_steps_and_timing_in_the_report(tmp_path):
    from engine.core.solvers import get_solver
    from engine.instruments.timing import time_net
    sp = tmp_path / "s.prototxt"
    sp.write_text('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 5\nsnapshot_prefix: "%s"\n'
                  % (LENET, tmp_path / "x"))
    solver = get_solver(str(sp))
    rec = Recorder(solver.net)
    rec.attach_solver(solver)
    solver.step(2)
    timing = time_net(solver.net, 1)
    doc = build_report(solver.net, rec, timing=timing)
    ups = [s for s in doc["steps"] if s["kind"] == "update"]
    assert len(ups) == 2 and "ratio" in ups[0]["layers"][0]["blobs"][0]
    assert doc["timing"]["iterations"] == 1 and len(doc["timing"]["layers"]) == len(solver.net.layers)
    html = render(solver.net, rec, "html", timing=timing)
    assert "Update-to-weight ratio" in html and "Benchmark" in html


def test_draw_svg_dot_and_missing_kaleido(tmp_path):
    from engine.core.errors import CaffeError
    from engine.instruments.draw import draw_net_to_file, kaleido_available, net_graph, to_svg
    g = draw_net_to_file(LENET, str(tmp_path / "n.svg"), phase="TRAIN")
    svg = (tmp_path / "n.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg and svg.count('class="layer"') == 9
    assert "conv1" in svg and "kernel size: 5" in svg and "#FF5050" in svg
    assert len([n for n in g.nodes if n.kind == "layer"]) == 9
    draw_net_to_file(LENET, str(tmp_path / "n.dot"), rankdir="TB")
    dot = (tmp_path / "n.dot").read_text()
    assert dot.startswith('digraph "LeNetDigits"') and "rankdir=TB;" in dot
    # ALL: the net as written (both phases' layers); a Net: its real layers with Splits.
    g_all = draw_net_to_file(LENET, str(tmp_path / "all.svg"))
    assert len([n for n in g_all.nodes if n.kind == "layer"]) == 11
    g_net = net_graph(engine.Net(RESNET, engine.TRAIN))
    assert any(n.type == "Split" for n in g_net.nodes) and "8 x 3 x 32 x 32" in to_svg(g_net)
    if not kaleido_available():
        with pytest.raises(CaffeError, match="kaleido.*svg"):
            draw_net_to_file(LENET, str(tmp_path / "n.png"))
    with pytest.raises(CaffeError, match="rankdir"):
        draw_net_to_file(LENET, str(tmp_path / "n.svg"), rankdir="XY")


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


@pytest.mark.browser
def test_html_report_renders_in_headless_chromium(tmp_path):
    chrome = _chromium()
    if chrome is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    net, rec = _run()
    page = tmp_path / "report.html"
    write_report(str(page), net, rec)
    shot = tmp_path / "shot.png"
    cmd = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--user-data-dir=%s" % (tmp_path / "profile"), "--window-size=1280,2000",
           "--virtual-time-budget=5000", "--screenshot=%s" % shot, page.as_uri()]
    try:
        subprocess.run(cmd, capture_output=True, timeout=120, cwd=str(tmp_path))
    except subprocess.TimeoutExpired:
        pytest.fail("chromium did not finish within 120 s")
    assert shot.exists() and shot.stat().st_size > 10000
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_warning_of_every_iteration_is_one_finding_in_every_format(tmp_path):
    """Three solver iterations that each warn the same things: each place once in the report,
    the latest step's, with "found in 3 steps" (JSON: ``steps``)."""
    from engine.core.solvers import get_solver
    sp = tmp_path / "s.prototxt"
    sp.write_text('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 5\nsnapshot_prefix: "%s"\n'
                  % (LENET, tmp_path / "x"))
    backend.set_random_seed(1)
    solver = get_solver(str(sp))
    rec = Recorder(solver.net)
    rec.attach_solver(solver)
    solver.step(3)
    doc = build_report(solver.net, rec)
    places = [(f["check"], f["layer"], f["blob"]) for f in doc["findings"]]
    assert places and len(places) == len(set(places))
    assert ("gradient_flow", "ip1", "pool2") in places        # (the inputs are Input's zeros)
    assert {f["steps"] for f in doc["findings"]} >= {3}, doc["findings"]
    md = render(solver.net, rec, "md")
    html = render(solver.net, rec, "html")
    assert "found in 3 steps" in md and "found in 3 steps" in html

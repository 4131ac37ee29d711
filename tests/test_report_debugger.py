"""Reports with the debugger's pieces: steps counted 1..n everywhere, the timeline and
breakpoint hits, the model named without a temporary path."""
import json
import os
import re

import numpy as np

import engine
from engine.core import backend
from engine.instruments import breakpoints as bp
from engine.instruments.debug import Recorder
from engine.instruments.history import Timeline
from engine.instruments.report import render

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")


def _session():
    """LeNet after 26 steps of an earlier Recorder's life: ids are global, the report's count is not."""
    backend.set_random_seed(1)
    net = engine.Net(LENET, engine.TRAIN)
    net.blobs["data"].data[...] = np.random.default_rng(0).random(net.blobs["data"].shape)
    other = Recorder(net)
    for _ in range(13):
        net.Forward()
        net.Backward()
    other.detach()
    rec = Recorder(net)
    tl = Timeline(net)
    tl.pin("conv1")
    bps = bp.Breakpoints(["layer=ip1"], net=net)
    n0 = rec.steps[-1].id if rec.steps else 0
    res = bp.run_forward(net, 0, len(net.layers) - 1, bps, rec)
    tl.record("forward", [s for s in rec.steps if s.id > n0], label="Forward", hits=[res.hit])
    n0 = rec.steps[-1].id
    net.Forward()
    net.Backward()
    tl.record("forward_backward", [s for s in rec.steps if s.id > n0], label="Forward + Backward")
    return net, rec, tl, bps


def test_step_numbers_are_the_reports_own():
    net, rec, tl, bps = _session()
    assert rec.steps[0].id > 20                             # the Recorder's ids come from a global counter
    doc = json.loads(render(net, rec, "json", timeline=tl, breakpoints=bps))
    assert [s["number"] for s in doc["steps"]] == [1, 2, 3]
    assert [a["step_numbers"] for a in doc["timeline"]["steps"]] == [[1], [2, 3]]
    assert doc["timeline"]["pins"] == ["conv1.data"]
    assert doc["breakpoints"]["hits"][0]["message"] == "break: ip1: layer=ip1"
    html = render(net, rec, "html", timeline=tl, breakpoints=bps)
    assert "3 steps recorded" in html and "<h2 id='steps'>Steps (3)</h2>" in html
    assert "2 actions; records" in html
    rows = re.findall(r"<tr><td>(\d+)</td><td>(forward|backward|update)</td>", html)
    assert rows == [("1", "forward"), ("2", "forward"), ("3", "backward")]
    assert "<h2 id='timeline'>Timeline</h2>" in html and "break: ip1: layer=ip1" in html
    md = render(net, rec, "md", timeline=tl, breakpoints=bps)
    assert "## Steps (3)" in md and "- action 0: Forward — stopped" not in md
    assert "- action 0: Forward — steps 1; pinned conv1.data; **break: ip1: layer=ip1**" in md
    assert "- #1 `layer=ip1` (enabled): 1 hit" in md


def test_model_label_replaces_the_path(tmp_path):
    p = tmp_path / "inspector-0123abcd-upload" / "model"
    p.mkdir(parents=True)
    (p / "net.prototxt").write_text(open(LENET).read())
    net = engine.Net(str(p / "net.prototxt"), engine.TRAIN)
    rec = Recorder(net)
    net.Forward()
    for fmt in ("html", "md", "json"):
        text = render(net, rec, fmt, model_label="net.prototxt")
        assert str(tmp_path) not in text and "inspector-0123abcd" not in text
        assert "net.prototxt" in text
    assert str(tmp_path) in render(net, rec, "json")      # without a label: the path, as before


def test_counts_of_one_read_as_one():
    net = engine.Net(LENET, engine.TRAIN)
    rec = Recorder(net)
    net.Forward()
    html = render(net, rec, "html")
    assert "<li>1 step recorded; " in html and "1 steps" not in html

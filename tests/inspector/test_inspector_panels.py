"""panel_models: details and findings as rows; mosaics; debug_info lines."""
import logging

import numpy as np
import pytest
from inspector_testlib import SIAMESE, build_loaded

from inspector.state import presenter, runner
from inspector.state.sessions import Session
from inspector.views import panel_models as pm


def _session(ld):
    s = Session(id="d" * 32, loaded=ld)
    runner.apply_inputs(s)
    return s


def test_layer_details(lenet):
    g = lenet.graph
    d = pm.layer_details(g, g.layer("conv1").index)
    summary = dict(d["summary"])
    assert summary["type"] == "Convolution" and summary["needs backward"] == "yes"
    assert d["bottoms"] == [{"name": "data", "shape": "64×1×28×28", "need_backward": False}]
    assert d["params"][0]["lr_mult"] == "1" and d["params"][1]["lr_mult"] == "2"
    assert any(r["setting"] == "num_output" and r["set"] == "written" for r in d["settings"])
    assert any(r["setting"] == "group" and r["set"] == "default" for r in d["settings"])
    relu = pm.layer_details(g, g.layer("relu1").index)
    assert relu["tops"][0]["in_place"] is True


def test_shared_param_details():
    ld = build_loaded(SIAMESE)
    d = pm.layer_details(ld.graph, ld.graph.layer("feat_p").index)
    assert "owned by feat param 0" in d["params"][0]["sharing"]
    d = pm.layer_details(ld.graph, ld.graph.layer("feat").index)
    assert "shared with feat_p param 0" in d["params"][0]["sharing"]


def test_ghost_and_blob_details(lenet):
    gd = pm.ghost_details(lenet.graph, "accuracy")
    assert dict(gd["summary"])["type"] == "Accuracy"
    assert pm.ghost_details(lenet.graph, "nope") is None
    s = _session(lenet)
    runner.forward_range(s, 0, 1)
    bd = presenter.blob_panel(lenet, "conv1")
    summary = dict(bd["summary"])
    assert summary["shape"] == "64×20×24×24" and summary["written by"] == "conv1"
    assert dict(bd["data"])["NaN"] == "0" and summary["data state"] == "fresh"


def test_feature_mosaic_pages():
    a = np.random.default_rng(0).standard_normal((2, 40, 5, 6))
    m, labels, pages = pm.feature_mosaic(a, item=1, page=0, per_page=36)
    assert pages == 2 and m.shape == (6 * 6 - 1, 6 * 7 - 1) and len(labels) == 36
    assert np.allclose(m[:5, :6], a[1, 0])
    m2, _l, _p = pm.feature_mosaic(a, item=1, page=1, per_page=36)
    assert np.allclose(m2[:5, :6], a[1, 36])
    v, _l, p = pm.feature_mosaic(np.arange(10.0).reshape(1, 10))
    assert p == 1 and v.shape == (4, 4) and np.isnan(v[-1, -1])


def test_filter_mosaic():
    w = np.random.default_rng(1).standard_normal((8, 3, 3, 3))
    rgb, pages = pm.filter_mosaic(w, "rgb")
    assert rgb.ndim == 3 and rgb.shape[2] == 3 and pages == 1
    one, _ = pm.filter_mosaic(w, 1)
    assert one.ndim == 2 and np.allclose(one[:3, :3], w[0, 1])
    with pytest.raises(ValueError):
        pm.filter_mosaic(np.zeros((2, 3)))


def test_value_slice():
    a = np.arange(2 * 3 * 4 * 5, dtype=float).reshape(2, 3, 4, 5)
    rows, idx, full = pm.value_slice(a, (1, 2))
    assert idx == (1, 2) and full == (4, 5) and rows[0][0] == "%.4g" % a[1, 2, 0, 0]
    rows, idx, full = pm.value_slice(np.float32(3.0))
    assert rows == [["3"]]


def test_findings_rows(lenet):
    ld = build_loaded(SIAMESE, phase="TEST")
    assert {r["layer"] for r in pm.filtered_rows(ld.graph)} >= {"pair", "loss", "probe"}
    tr = build_loaded(SIAMESE)
    assert {r["layer"] for r in pm.shared_rows(tr.graph)} == {"conv_p", "feat_p"}
    lines = pm.transcript_lines(lenet.graph.transcript, "memory required")
    assert lines and all("memory required" in l.lower() for l in lines)
    rows = pm.memory_rows(lenet.graph)
    assert [r[0] for r in rows] == lenet.graph.layer_names()


def test_debug_info_lines_match_caffe(lenet):
    """The lines derived from the records are the ones Net logs with debug_info."""
    s = _session(lenet)
    captured = []

    class H(logging.Handler):
        def emit(self, record):
            captured.append(record.getMessage())

    from engine.core.log import net_log
    h = H()
    net_log.addHandler(h)
    old_level = net_log.level
    net_log.setLevel(logging.INFO)
    lenet.net.debug_info = True
    try:
        runner.forward_range(s, 0, len(lenet.graph.layers) - 1)
        runner.backward_range(s, len(lenet.graph.layers) - 1, 0)
    finally:
        lenet.net.debug_info = False
        net_log.removeHandler(h)
        net_log.setLevel(old_level)
    caffe_lines = [l for l in captured if l.startswith(("    [Forward]", "    [Backward]"))]
    ours = pm.debug_info_lines(lenet.graph, lenet.recorder.steps)
    assert ours == caffe_lines


def test_nan_alert(overflow_net):
    ld = build_loaded(overflow_net)
    s = _session(ld)
    assert pm.nan_alert(ld.recorder.first_nonfinite) is None
    runner.forward_backward(s)
    a = pm.nan_alert(ld.recorder.first_nonfinite)
    assert a["layer"] == "exp1" and "Inf" in a["message"]

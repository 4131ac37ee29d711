"""The inspector's server and the nets that would take it down (issue 21), over HTTP as the
browser drives it (benchmarks/load_test.py's Tab):

- a net whose memory passes ``--max-net-mb`` is refused at Init, before its memory is
  allocated, with a message naming what it needs and the limit; the tab keeps its last net,
  another tab's session (its net, its steps) is untouched, and the server answers;
- a batch of 0 (LeNet with ``dim: 0``) loads as Caffe's Init takes it, and stepping into the
  first layer that reads the empty blob shows Caffe's ``Check failed: data_`` as the run
  message (blob, shape, layer), never a traceback, and the session goes on.
"""

import pytest

from benchmarks import load_test as lt
from inspector.cli import config_from_args, parse_args

TRACEBACK = "Traceback (most recent call last)"

# 1024 x 1024 x 128 floats: 512 MiB of data (1 GiB with its diff), every blob far below INT_MAX
BIG_NET = """name: "TooBig"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1024 dim: 1024 dim: 128 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 10 } }
"""

ZERO_BATCH_NET = """name: "LeNetZero"
layer { name: "data" type: "Input" top: "data" input_param { shape: { dim: 0 dim: 1 dim: 28 dim: 28 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 20 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "prob" type: "Softmax" bottom: "ip1" top: "prob" }
"""


def upload(tab, filename, content):
    with tab.lock:
        tab.props["upload-model.filename"] = filename
    tab.last_load = {}
    return tab.trigger("upload-model.contents", lt.data_url(content))


def run(tab, button):
    tab.click(button)
    return tab.props.get("run-message.children") or ""


def no_http_errors(srv):
    assert srv.stats.http_errors == [] and srv.stats.tracebacks == [], (srv.stats.http_errors, srv.stats.tracebacks)


# ---------------------------------------------------------------- --max-net-mb
def test_max_net_mb_option():
    import psutil
    half = psutil.virtual_memory().total // 2
    assert config_from_args(parse_args([])).max_net_bytes == half            # default: half of the RAM
    assert config_from_args(parse_args(["--max-net-mb", "300"])).max_net_bytes == 300 << 20
    assert config_from_args(parse_args(["--max-net-mb", "0"])).max_net_bytes is None     # no limit
    with pytest.raises(SystemExit):
        parse_args(["--max-net-mb", "-1"])


def test_spare_mb_option():
    import psutil
    default = min(2 << 30, psutil.virtual_memory().total // 4)
    assert config_from_args(parse_args([])).spare_bytes == default           # the tabs' spare nets, together
    assert config_from_args(parse_args(["--spare-mb", "300"])).spare_bytes == 300 << 20
    assert config_from_args(parse_args(["--spare-mb", "0"])).spare_bytes == 0             # no tab spares
    with pytest.raises(SystemExit):
        parse_args(["--spare-mb", "-1"])


def test_a_net_over_the_memory_budget_is_refused_beside_another_session(serve):
    srv = serve(max_net_bytes=64 << 20, prebuild=False)
    a, b = srv.tab(), srv.tab()
    for i in range(3):                                   # tab A works on its net
        assert run(a, "btn-step-forward").startswith("step: ForwardFromTo(%d, %d)" % (i, i))
    store = srv.app.inspector.store
    a_loaded, a_version = store.get(a.sid).loaded, a.props["net-version.data"]
    b_version = b.props["net-version.data"]

    out = upload(b, "too_big.prototxt", BIG_NET)         # tab B opens a net of 1 GiB
    err = lt._text(out.get("load-error.children"))
    assert "MemoryBudgetExceeded" in err and "layer data" in err, err
    assert "the net needs at least 1.0 GiB of memory, more than the budget of 64.0 MiB" in err
    assert "up to a blob of shape 1024 1024 128" in err and "refused before that memory is allocated" in err
    assert "--max-net-mb 64" in err and "the other sessions go on" in err
    assert TRACEBACK not in err
    # B keeps its last net, usable
    assert out["net-version.data"] == b_version and "LeNetDigits" in lt._text(out["load-status.children"])
    assert store.get(b.sid).loaded.net.name == "LeNetDigits"
    assert run(b, "btn-step-forward").startswith("step: ForwardFromTo(0, 0)")
    # A is untouched: the same net, its cursor, and it goes on stepping
    assert store.get(a.sid).loaded is a_loaded and a.props["net-version.data"] == a_version
    assert run(a, "btn-step-forward").startswith("step: ForwardFromTo(3, 3)")
    # the server answers: a new tab opens and loads the default net
    c = srv.tab()
    assert run(c, "btn-forward-backward").startswith("Forward + Backward: loss")
    # a net within the budget opens in the tab that was refused
    out = upload(b, "zero.prototxt", ZERO_BATCH_NET)
    assert out.get("load-error.children") is None and "LeNetZero" in lt._text(out["load-status.children"])
    no_http_errors(srv)
    assert srv.stats.banners == []


# ---------------------------------------------------------------- a batch of 0
def test_a_batch_of_0_loads_and_stepping_into_it_shows_caffes_check(serve):
    srv = serve(prebuild=False)
    tab = srv.tab()
    out = upload(tab, "zero.prototxt", ZERO_BATCH_NET)
    assert out.get("load-error.children") is None, lt._text(out.get("load-error.children"))
    assert "LeNetZero" in lt._text(out["load-status.children"])
    assert run(tab, "btn-step-forward").startswith("step: ForwardFromTo(0, 0): data")     # Input asks nothing
    msg = run(tab, "btn-step-forward")
    assert msg.startswith("⚠ EmptyBlobError: Forward: Check failed: data_ (blob 'data' has shape 0 1 28 28 (0)"), msg
    assert "(layer 'conv1', type Convolution)" in msg and TRACEBACK not in msg
    msg = run(tab, "btn-forward-backward")
    assert msg.startswith("⚠ EmptyBlobError") and "conv1" in msg
    # the page still shows the empty blob and the layer: details, no banner
    tab.trigger("net-graph.tapNodeData", {"kind": "blob", "name": "data"})
    details = lt._text(tab.props["details.children"])
    assert "data" in details and "Click a layer" not in details, details[:300]
    tab.trigger("net-graph.tapNodeData", {"kind": "layer", "name": "conv1", "members": "|conv1|"})
    details = lt._text(tab.props["details.children"])
    assert "conv1" in details and "Convolution" in details, details[:300]
    # the session goes on: the default net again, and it runs
    tab.load_example(tab.expect["lenet"])
    assert "LeNetDigits" in lt._text(tab.props.get("load-status.children"))
    assert run(tab, "btn-forward-backward").startswith("Forward + Backward: loss")
    no_http_errors(srv)
    assert srv.stats.banners == []

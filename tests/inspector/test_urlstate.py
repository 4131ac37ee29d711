"""Issue 13, state and loading: the page's address (encode/decode, sessions <->
addresses), the phase a net opens in, controls after a failed load, the
file-access check after filtering, where relative data paths were looked
for, and the Plotly config of every figure."""
import os
from pathlib import Path

import pytest
from dash import dcc
from inspector_testlib import DEPLOY_NET, LENET, PHASED_NET, ROOT, data_url

from inspector import ids
from inspector.callbacks import load
from inspector.callbacks.common import AppContext
from inspector.config import InspectorConfig
from inspector.layout.common import PLOT_CONFIG
from inspector.state import loading, urlstate
from inspector.state.netstate import default_phase, is_deploy_net
from inspector.state.sessions import ModelSpec, SessionStore, new_session_id
from inspector.state.urlstate import UrlState, decode, encode

OLD_STYLE_DEPLOY = """name: "OldDeploy"
input: "data" input_dim: 1 input_dim: 3 input_dim: 4 input_dim: 4
layer { name: "relu" type: "ReLU" bottom: "data" top: "out" }
"""


# ------------------------------------------------------------------ encode / decode
def test_encode_is_short_and_readable():
    s = UrlState(source="model", name="models/bvlc_googlenet/deploy.prototxt", phase="TEST",
                 selection=("layer", "inception_3a/1x1"), expanded=("inception_3a",))
    assert encode(s) == ("?model=models/bvlc_googlenet/deploy.prototxt&phase=TEST&layer=inception_3a/1x1"
                         "&open=inception_3a")
    assert encode(UrlState(source="example", name="lenet", phase="TRAIN")) == "?example=lenet&phase=TRAIN"
    assert encode(UrlState()) == ""
    # level 0, no stages, no selection, default folding: nothing written for them
    assert "level" not in encode(UrlState(source="cli", name="x.prototxt", phase="TEST", level=0))


@pytest.mark.parametrize("state", [
    UrlState(source="example", name="resnet_tiny", phase="TRAIN", selection=("blob", "res1a")),
    UrlState(source="model", name="a b/c&d=e#f+g%h,i.prototxt", phase="TEST", level=3,
             stages=("deploy", "no,comma", "x y"), selection=("layer", "conv1/3x3 & more"),
             expanded=("res2a", "inception_4a/x,y", "")),
    UrlState(source="upload", name="my net (2).prototxt", phase="TRAIN", selection=("ghost", "loss")),
    UrlState(source="cli", name="deploy.prototxt", phase="TEST", expanded=()),
    UrlState(source="model", name="nets/ünïcode.prototxt", phase="TRAIN", selection=("layer", "слой")),
    UrlState(source="model", name="r152.prototxt", phase="TEST", selection=("block", "res4b22"),
             expanded=("res4",)),
])
def test_decode_inverts_encode(state):
    back = decode(encode(state))
    expect_open = None if state.expanded is None else tuple(b for b in state.expanded if b)
    assert back == UrlState(source=state.source, name=state.name, phase=state.phase, level=state.level,
                            stages=state.stages, selection=state.selection, expanded=expect_open)
    assert back.problems == ()
    q = encode(state)
    assert " " not in q and "#" not in q and q.count("?") == 1


def test_decode_is_lenient_and_says_what_it_could_not_read():
    s = decode("?model=x.prototxt&phase=test&level=two&stages=&utm_source=mail&layer=")
    assert (s.source, s.name, s.phase, s.level, s.stages, s.selection) == ("model", "x.prototxt", "TEST", 0, (), None)
    assert any("level" in p for p in s.problems)
    s = decode("example=lenet&model=other.prototxt&phase=DEPLOY")
    assert (s.source, s.name, s.phase) == ("example", "lenet", None)
    assert any("two nets" in p for p in s.problems) and any("TRAIN or TEST" in p for p in s.problems)
    assert decode(None) == UrlState() and decode("") == UrlState() and decode("?") == UrlState()
    assert decode("?open=").expanded == () and decode("?phase=TRAIN").expanded is None
    assert decode("?layer=a+b").selection == ("layer", "a+b")          # '+' is not a space here


# ------------------------------------------------------------------ the phase a net opens in
def test_deploy_nets_open_in_test(tmp_path):
    p = tmp_path / "net.prototxt"                     # no "deploy" in the name: the structure decides
    p.write_text(DEPLOY_NET)
    assert default_phase(str(p)) == "TEST"
    old = tmp_path / "old.prototxt"
    old.write_text(OLD_STYLE_DEPLOY)
    assert default_phase(str(old)) == "TEST"
    assert default_phase(str(LENET)) == "TRAIN"                        # Data layers and a loss
    assert default_phase(str(ROOT / "examples" / "resnet_tiny" / "resnet_tiny.prototxt")) == "TRAIN"
    named = tmp_path / "with_loss_deploy.prototxt"                    # a loss: TRAIN whatever the name
    named.write_text(DEPLOY_NET + 'layer { name: "l" type: "EuclideanLoss" bottom: "prob" bottom: "prob" '
                                  'top: "l" }\n')
    assert default_phase(str(named)) == "TRAIN"
    weighted = tmp_path / "weighted.prototxt"                          # loss_weight makes any layer a loss
    weighted.write_text(DEPLOY_NET.replace('top: "prob" }', 'top: "prob" loss_weight: 1 }'))
    assert default_phase(str(weighted)) == "TRAIN"
    assert default_phase(str(tmp_path / "missing_deploy.prototxt")) == "TEST"   # unreadable: by its name
    assert default_phase(str(tmp_path / "missing.prototxt")) == "TRAIN"
    from engine.core.upgrade import read_net_params
    assert is_deploy_net(read_net_params(str(p))) and not is_deploy_net(read_net_params(str(LENET)))


def test_googlenet_deploy_opens_in_test(shared_dir):
    assert default_phase(str(shared_dir / "zoo" / "models" / "bvlc_googlenet" / "deploy.prototxt")) == "TEST"


def test_command_line_uses_the_same_rule(tmp_path):
    from inspector.cli import config_from_args, parse_args
    p = tmp_path / "net.prototxt"
    p.write_text(DEPLOY_NET)
    assert config_from_args(parse_args([str(p)])).phase == "TEST"
    assert config_from_args(parse_args([str(p), "--phase", "TRAIN"])).phase == "TRAIN"
    assert config_from_args(parse_args([str(LENET)])).phase == "TRAIN"
    assert config_from_args(parse_args([])).phase is None             # the examples' own phases


# ------------------------------------------------------------------ loading from the page
@pytest.fixture
def root_ctx(tmp_path):
    """An AppContext whose model root is a fresh folder with a deploy net and a phased net."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "net.prototxt").write_text(DEPLOY_NET)
    (root / "phased.prototxt").write_text(PHASED_NET)
    cfg = InspectorConfig(model_root=str(root), max_upload_bytes=8 << 20)
    return AppContext(config=cfg, store=SessionStore(4, 3600), examples=cfg.examples())


def test_a_deploy_net_opened_from_the_page_is_in_test(root_ctx):
    sid = new_session_id()
    load.handle_load(root_ctx, sid, None)                              # LeNet, TRAIN
    load.handle_load(root_ctx, sid, ids.LEVEL, phase="TRAIN", level=2, stages=["x"])
    s = root_ctx.store.get(sid)
    assert (s.loaded.spec.phase, s.loaded.spec.level) == ("TRAIN", 2)
    v, err, s, _ = load.handle_load(root_ctx, sid, ids.MODEL_PATH, path="net.prototxt")   # Enter in the box
    assert err is None and s.loaded.graph.name == "TinyDeploy"
    assert (s.loaded.spec.phase, s.loaded.spec.level, s.loaded.spec.stages) == ("TEST", 0, ())
    assert s.loaded.graph.phase_name == "TEST"
    ex, path, phase, level, stages, _opts = load.controls(root_ctx, s, [])
    assert (ex, path, phase, level, stages) == (None, "net.prototxt", "TEST", 0, [])
    # an upload of the same net: TEST too
    v, err, s, _ = load.handle_load(root_ctx, sid, ids.UPLOAD_MODEL, upload=(data_url(DEPLOY_NET), "up.prototxt"))
    assert err is None and s.loaded.spec.phase == "TEST" and s.loaded.spec.uploaded
    # an example: its own phase
    v, err, s, _ = load.handle_load(root_ctx, sid, ids.EXAMPLE, example=root_ctx.examples[0][1])
    assert s.loaded.spec.phase == "TRAIN" and load.controls(root_ctx, s, [])[0] == root_ctx.examples[0][1]


def test_controls_show_the_loaded_net_after_a_failed_load(root_ctx):
    root = root_ctx.config.model_root
    (Path(root) / "lmdb").mkdir()
    (Path(root) / "phased.prototxt").write_text(PHASED_NET.replace(
        'data_param { source: "/etc/passwd_lmdb"',
        'transform_param { mean_file: "/etc/mean.binaryproto" } data_param { source: "%s/lmdb"' % root))
    sid = new_session_id()
    v, err, s, _ = load.handle_load(root_ctx, sid, ids.MODEL_PATH_OPEN, path="phased.prototxt")
    assert err is None and s.loaded.spec.phase == "TEST"              # Input, no loss: a deploy net
    good = s.loaded
    # TRAIN builds the Data layer, whose mean file is outside the model root: refused
    v, err, s, _ = load.handle_load(root_ctx, sid, ids.PHASE, phase="TRAIN", level=0, stages=[])
    assert "outside the model root" in err.message and s.loaded is good
    ex, path, phase, level, stages, _ = load.controls(root_ctx, s, [])
    assert (ex, path, phase) == (None, "phased.prototxt", "TEST")     # the net shown, not the one that failed
    box = str(load.load_error_box(err, load.describe(s)))
    assert "Still shown: Phased from phased.prototxt (TEST)" in box and "No net is loaded" not in box
    # a bad path: the box and controls still describe the Phased net
    v, err, s, _ = load.handle_load(root_ctx, sid, ids.MODEL_PATH, path="nope.prototxt")
    assert "does not exist" in err.message and load.controls(root_ctx, s, [])[1] == "phased.prototxt"
    # a fresh tab whose net cannot be built opens the default net instead, with the error beside it
    sid2 = new_session_id()
    root_ctx.config.model = str(root_ctx.config.model_root) + "/missing.prototxt"
    v, err, s2, _ = load.handle_load(root_ctx, sid2, None)
    assert s2.loaded is not None and s2.loaded.graph.name == "LeNetDigits" and err is not None
    assert "missing.prototxt" in err.message
    box = str(load.load_error_box(err, load.describe(s2)))
    assert "Shown instead: LeNetDigits" in box and "the default net" in box
    # nothing loaded at all: the box says so
    assert "No net is loaded." in str(load.load_error_box(err, None))


def test_only_layers_that_survive_filtering_are_checked(root_ctx, tmp_path):
    root = root_ctx.config.model_root
    spec = ModelSpec(model=os.path.join(root, "phased.prototxt"), phase="TEST")
    ld = loading.build(spec, model_root=root)                          # the TRAIN-only Data layer is never built
    assert ld.graph.name == "Phased" and not ld.graph.has_layer("train_data")
    # in TRAIN its source (outside the model root) is never opened: the layer is stood in
    train = loading.build(ModelSpec(model=spec.model, phase="TRAIN"), model_root=root)
    (si,) = train.graph.stand_ins
    assert si.layer == "train_data" and "outside the model root" in si.reason
    # the same through an upload
    sid = new_session_id()
    load.handle_load(root_ctx, sid, None)
    load.handle_load(root_ctx, sid, ids.UPLOAD_MODEL, upload=(data_url(PHASED_NET), "phased.prototxt"))
    s = root_ctx.store.get(sid)
    assert s.loaded.graph.name == "Phased" and s.loaded.spec.phase == "TEST" and s.error is None


def _digits_lmdb(path, n=2):
    """A small LMDB of 1×4×4 Datums, as convert_imageset writes them."""
    import lmdb
    import numpy as np

    from engine.pycaffe.io import array_to_datum
    env = lmdb.open(str(path), map_size=1 << 22, subdir=True)
    with env.begin(write=True) as txn:
        for i in range(n):
            txn.put(b"%08d" % i, array_to_datum(np.full((1, 4, 4), i, np.uint8), i).SerializeToString())
    env.close()


RELATIVE_READER = ('name: "Reader"\nlayer { name: "d" type: "Data" top: "data" top: "label" '
                   'data_param { source: "digits_lmdb" backend: LMDB batch_size: 1 } }\n')


def test_a_relative_data_source_is_looked_for_beside_the_prototxt_and_under_the_model_root(tmp_path, monkeypatch):
    """Caffe opens a relative source from the working directory; the page looks there first,
    then beside the prototxt and under the model root, and opens it where it is (saying so);
    found nowhere, the layer is stood in and the page says which directory it was looked for in."""
    pytest.importorskip("lmdb")
    root = tmp_path / "root"
    (root / "nets").mkdir(parents=True)
    net = root / "nets" / "reader.prototxt"
    net.write_text(RELATIVE_READER)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    _digits_lmdb(root / "nets" / "digits_lmdb")                      # beside the model, not in the cwd
    for trusted in (False, True):                                    # from the page; from the command line
        ld = loading.build(ModelSpec(model=str(net), trusted=trusted), model_root=str(root))
        assert not ld.graph.stand_ins and ld.net.blobs["data"].shape == (1, 1, 4, 4)      # the real data
        (found,) = ld.cache["sources_found"]
        assert "not in the server's working directory (%s" % cwd in found
        assert "found beside the prototxt, %s (used)" % (root / "nets" / "digits_lmdb") in found
    # under the model root (the path relative to it), not beside the model
    (root / "nets" / "digits_lmdb").rename(root / "digits_lmdb")
    ld = loading.build(ModelSpec(model=str(net)), model_root=str(root))
    assert not ld.graph.stand_ins and "found under the model root, %s" % (root / "digits_lmdb") in \
        ld.cache["sources_found"][0]
    # from the page, never followed out of the model root ("../" beside the prototxt)
    (root / "digits_lmdb").rename(tmp_path / "digits_lmdb")
    escaping = root / "nets" / "escape.prototxt"
    escaping.write_text(RELATIVE_READER.replace('"digits_lmdb"', '"../../digits_lmdb"'))
    ld = loading.build(ModelSpec(model=str(escaping)), model_root=str(root))
    assert not ld.cache["sources_found"] and ld.graph.stand_ins[0].layer == "d"
    # found nowhere: stood in (structure only); the notice says which directory it was looked in
    (tmp_path / "digits_lmdb").rename(tmp_path / "elsewhere_lmdb")
    cfg = InspectorConfig(model_root=str(root), max_upload_bytes=8 << 20)
    ctx = AppContext(config=cfg, store=SessionStore(4, 3600), examples=cfg.examples())
    v, err, s, _ = load.handle_load(ctx, new_session_id(), ids.MODEL_PATH_OPEN, path="nets/reader.prototxt")
    assert err is None and s.loaded.graph.name == "Reader" and not s.loaded.cache["sources_found"]
    (si,) = s.loaded.graph.stand_ins
    assert si.layer == "d" and si.path == str(cwd / "digits_lmdb") and "outside the model root" in si.reason
    from inspector.layout.header import standin_children
    text = str(standin_children(s.loaded.graph.stand_ins)[0])
    assert "looked for in the server's working directory, %s, where Caffe opens it, then beside the prototxt " \
           "and under the model root" % cwd in text
    hint = load.standin_hints(s)["d"]
    assert str(cwd / "digits_lmdb") in hint and "working directory" in hint


def test_an_upload_is_checked_in_the_phase_it_opens_in(root_ctx):
    """The uploaded net's TRAIN-only Data layer names /etc/passwd_lmdb: the upload opens in TEST
    (Input, no loss), where that layer is filtered out and never opened: accepted; asking for
    TRAIN builds the net structure-only: that layer is stood in by an Input (never opened), and
    the page says why."""
    sid = new_session_id()
    v, err, s, _ = load.handle_load(root_ctx, sid, ids.UPLOAD_MODEL, upload=(data_url(PHASED_NET), "phased.prototxt"))
    assert err is None and s.loaded.graph.name == "Phased" and s.loaded.spec.phase == "TEST"
    assert [g.name for g in s.loaded.graph.ghosts] == ["train_data"]         # drawn faded, never built
    v, err, s, _ = load.handle_load(root_ctx, sid, ids.PHASE, phase="TRAIN", level=0, stages=[])
    assert err is None and s.loaded.spec.phase == "TRAIN" and s.loaded.spec.uploaded
    (si,) = s.loaded.graph.stand_ins
    assert si.layer == "train_data" and si.source == "/etc/passwd_lmdb" and "outside the model root" in si.reason
    assert s.loaded.net.blobs["data"].shape == (2, 3, 224, 224)      # batch_size 2; the rest assumed


# ------------------------------------------------------------------ sessions <-> addresses
def _ctx(**kw):
    cfg = InspectorConfig(model_root=str(ROOT), max_upload_bytes=8 << 20, **kw)
    return AppContext(config=cfg, store=SessionStore(4, 3600), examples=cfg.examples())


def test_address_of_each_kind_of_net_loads_the_same_net(tmp_path):
    ctx = _ctx()
    sid = new_session_id()
    load.handle_load(ctx, sid, None)
    s = ctx.store.get(sid)
    st = urlstate.state_of(ctx, s, {"kind": "layer", "name": "conv1"}, ["b1"])
    assert encode(st) == "?example=lenet&phase=TRAIN&layer=conv1&open=b1"
    load.handle_load(ctx, sid, ids.MODEL_PATH_OPEN, path="examples/resnet_tiny/../resnet_tiny/resnet_tiny.prototxt")
    assert encode(urlstate.state_of(ctx, s)) == "?example=resnet_tiny&phase=TRAIN"     # a bundled example is named so
    (ROOT / "tests" / "inspector").exists()
    load.handle_load(ctx, sid, ids.UPLOAD_MODEL, upload=(data_url(DEPLOY_NET), "tiny deploy.prototxt"))
    q = encode(urlstate.state_of(ctx, s, {"kind": "blob", "name": "fc"}))
    assert q == "?upload=tiny%20deploy.prototxt&phase=TEST&blob=fc"
    # the address gives the same net back (no rebuild needed), with its selection
    r = load.handle_load_full(ctx, sid, ids.URL_POP, search=q)
    assert r.error is None and r.restore["selection"] == {"kind": "blob", "name": "fc"}
    assert r.version == s.net_version                                    # nothing rebuilt
    # another tab (a new session): the upload is not there
    r2 = load.handle_load_full(ctx, new_session_id(), None, search=q)
    assert "upload it again" in r2.error.message and r2.session.loaded.graph.name == "LeNetDigits"
    # a path under the model root
    p = tmp_path / "x.prototxt"
    p.write_text(DEPLOY_NET)
    ctx2 = _ctx()
    ctx2.config.model_root = str(tmp_path)
    sid2 = new_session_id()
    r = load.handle_load_full(ctx2, sid2, None, search="?model=x.prototxt&layer=fc")
    assert r.error is None and r.session.loaded.graph.name == "TinyDeploy" and r.session.loaded.spec.phase == "TEST"
    assert encode(urlstate.state_of(ctx2, r.session, r.restore["selection"])) == "?model=x.prototxt&phase=TEST&layer=fc"
    r = load.handle_load_full(ctx2, sid2, ids.URL_POP, search="?model=x.prototxt&phase=TRAIN")
    assert r.session.loaded.spec.phase == "TRAIN" and r.restore["selection"] is None


def test_command_line_net_outside_the_root_is_named_cli(tmp_path):
    p = tmp_path / "elsewhere.prototxt"
    p.write_text(DEPLOY_NET)
    ctx = _ctx(model=str(p), phase="TEST")
    sid = new_session_id()
    load.handle_load(ctx, sid, None)
    s = ctx.store.get(sid)
    assert encode(urlstate.state_of(ctx, s)) == "?cli=elsewhere.prototxt&phase=TEST"
    assert load.controls(ctx, s, [])[0] == "cli"
    # a fresh tab opening that address gets the command line's net (trusted, as started)
    r = load.handle_load_full(ctx, new_session_id(), None, search="?cli=elsewhere.prototxt&phase=TEST&layer=fc")
    assert r.error is None and r.session.loaded.spec.trusted and r.restore["selection"]["name"] == "fc"
    # a server without a command-line net says so and opens its default
    r = load.handle_load_full(_ctx(), new_session_id(), None, search="?cli=elsewhere.prototxt")
    assert "without one" in r.error.message and r.session.loaded is not None


def test_bad_addresses_open_the_default_net_and_say_why():
    ctx = _ctx()
    for q, needle in [("?model=../../etc/passwd", "outside the model root"),
                      ("?example=nonesuch", "resnet_tiny"),
                      ("?model=nope.prototxt", "does not exist"),
                      ("?example=lenet&phase=SIDEWAYS", "TRAIN or TEST")]:
        r = load.handle_load_full(ctx, new_session_id(), None, search=q)
        assert r.session.loaded is not None and r.session.loaded.graph.name == "LeNetDigits", q
        assert needle in r.error.message and r.error.kind == "address", (q, r.error.message)
    # in a tab that shows a net: a bad address keeps it, and its selection (for another net) is not applied
    sid = new_session_id()
    load.handle_load_full(ctx, sid, None, search="?example=resnet_tiny&layer=res1a")
    r = load.handle_load_full(ctx, sid, ids.URL_POP, search="?model=../x.prototxt&layer=conv1")
    assert r.session.loaded.graph.name == "TinyResNet" and r.restore is None and "outside" in r.error.message
    # an address without a net: the server's default, in the address' NetState
    r = load.handle_load_full(ctx, new_session_id(), None, search="?phase=TEST")
    assert r.session.loaded.spec.phase == "TEST" and r.error is None


def test_reloaded_tab_keeps_its_session_and_net():
    ctx = _ctx()
    sid = new_session_id()
    r = load.handle_load_full(ctx, sid, None, search="?example=resnet_tiny&layer=res1a")
    v1, net1 = r.version, r.session.loaded.net
    r = load.handle_load_full(ctx, sid, ids.SESSION, search="?example=resnet_tiny&phase=TRAIN&layer=res1a")
    assert r.version == v1 and r.session.loaded.net is net1 and r.restore["selection"]["name"] == "res1a"
    ctx.store.drop(sid)                                               # the server forgot the session
    r = load.handle_load_full(ctx, sid, None, search="?example=resnet_tiny&phase=TRAIN&layer=res1a")
    assert r.session.loaded.graph.name == "TinyResNet" and r.session.loaded.net is not net1


def test_the_address_sets_selection_and_folding_only_when_it_names_them():
    ctx = _ctx()
    sid = new_session_id()
    r = load.handle_load_full(ctx, sid, None, search="?example=resnet_tiny&blob=res1a&open=b1,b%2C2")
    assert r.restore == {"selection": {"kind": "blob", "name": "res1a"}, "expanded": ["b1", "b,2"],
                         "net_version": r.version}
    r = load.handle_load_full(ctx, sid, ids.URL_POP, search="?example=resnet_tiny&phase=TRAIN")
    assert r.restore["selection"] is None and r.restore["expanded"] is None     # the graph's default folding
    r = load.handle_load_full(ctx, sid, ids.URL_POP, search="?example=resnet_tiny&phase=TRAIN&open=")
    assert r.restore["expanded"] == []                                           # everything folded
    # the controls of the page do not touch the selection
    r = load.handle_load_full(ctx, sid, ids.EXAMPLE, example=ctx.examples[0][1])
    assert r.restore is None


def test_an_address_naming_what_the_net_lacks_says_so():
    """Issue 22: layer=no_such_layer was silently ignored."""
    ctx = _ctx()
    r = load.handle_load_full(ctx, new_session_id(), None, search="?example=lenet&layer=no_such_layer")
    assert r.session.loaded.graph.name == "LeNetDigits" and r.restore["selection"] is None
    assert r.error.kind == load.NOT_IN_NET
    assert "no layer named 'no_such_layer' in this net (LeNetDigits, TRAIN): nothing is selected" in r.error.message
    r = load.handle_load_full(ctx, new_session_id(), None, search="?example=resnet_tiny&block=nope&open=res1,zz")
    assert "no block named 'nope'" in r.error.message and "no block named 'zz'" in r.error.message
    assert r.restore["selection"] is None and r.restore["expanded"] == ["res1", "zz"]
    r = load.handle_load_full(ctx, new_session_id(), None, search="?example=lenet&layer=conv1")
    assert r.error is None and r.restore["selection"] == {"kind": "layer", "name": "conv1"}
    err = load.loading.load_error(urlstate.AddressError("the address names no layer named 'x'"))
    assert "Could not load" in str(load.load_error_box(err, "LeNet"))       # an address naming no net
    err.kind = load.NOT_IN_NET
    box = str(load.load_error_box(err, "LeNet"))
    assert "Not in this net" in box and "Could not load" not in box and "Shown: LeNet" in box


def test_unchanged_controls_rebuild_nothing():
    ctx = _ctx()
    sid = new_session_id()
    load.handle_load(ctx, sid, None)
    s = ctx.store.get(sid)
    r = load.handle_load_full(ctx, sid, ids.PHASE, phase="TRAIN", level=0, stages=[])
    assert r.noop and r.version == s.net_version
    r = load.handle_load_full(ctx, sid, ids.EXAMPLE, example=ctx.examples[0][1])
    assert r.noop


# ------------------------------------------------------------------ Plotly config
def _graphs(node, out):
    if isinstance(node, dcc.Graph):
        out.append(node)
    children = getattr(node, "children", None)
    for c in children if isinstance(children, (list, tuple)) else [children]:
        if c is not None and hasattr(c, "to_plotly_json"):
            _graphs(c, out)
    return out


def test_no_figure_offers_cloud_sharing():
    from inspector import create_app
    from inspector.layout.side_panels import layer_details_children
    page = create_app(InspectorConfig(model_root=str(ROOT))).layout()
    graphs = _graphs(page, [])
    assert len(graphs) >= 5
    d = {"title": "x", "summary": [], "bottoms": [], "tops": [], "params": [], "settings": [], "written": ""}
    graphs += _graphs(layer_details_children(d, filter_fig={}), [])
    for g in graphs:
        for key, value in PLOT_CONFIG.items():
            assert g.config.get(key) == value, (g.id, key)

"""Nothing lost: a failed load, Init or step leaves the previous state as it was.

- ``net.copy_from(bad)`` that fails on layer k leaves every param unchanged, also the
  params of the layers before k (Caffe copies layer by layer; the engine checks every
  layer first); the same for ``.h5`` weights and ``share_with``.
- A failed ``Net(...)`` raises, and leaves no running data thread, no log handler and
  no change of device mode behind.
- A solver step that fails (in Forward, or in the update) leaves the weights, the
  solver's history and its iteration count unchanged.
"""
import gc
import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine import TEST, TRAIN, Net
from engine.core import backend
from engine.core.errors import CaffeError, LayerError, ParseError, ShapeError, SolverError

NET = ('layer { name: "data" type: "Input" top: "data" top: "label" '
       'input_param { shape { dim: 4 dim: 3 dim: 4 dim: 5 } shape { dim: 4 } } }\n'
       'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" '
       'convolution_param { num_output: 2 kernel_size: 3 weight_filler { type: "gaussian" } } }\n'
       'layer { name: "ip1" type: "InnerProduct" bottom: "conv" top: "ip1" '
       'inner_product_param { num_output: 6 weight_filler { type: "gaussian" } } }\n'
       'layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" '
       'inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }\n'
       'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }\n')
LAYERS = ["conv", "ip1", "ip2"]


def _net(tmp_path, text=NET, phase=TRAIN, name="net.prototxt"):
    p = Path(tmp_path) / name
    p.write_text(text)
    return Net(str(p), phase)


def _randomize(net, seed):
    rng = np.random.default_rng(seed)
    for blobs in net.params.values():
        for b in blobs:
            b.data[...] = rng.normal(size=b.shape)


def _snapshot(net):
    return {name: [b.data.copy() for b in blobs] for name, blobs in net.params.items()}


def _assert_unchanged(net, before):
    for name, blobs in net.params.items():
        for j, b in enumerate(blobs):
            np.testing.assert_array_equal(b.data, before[name][j], err_msg="%s[%d] changed" % (name, j))


def _model(tmp_path, seed=1):
    """A caffemodel of NET with weights different from any fresh net's."""
    src = _net(tmp_path, name="source.prototxt")
    _randomize(src, seed)
    return src.ToProto()


def _spoil(param, layer, how):
    """Make the source layer ``layer`` of a NetParameter unfit for NET in one way."""
    lp = next(l for l in param.layer if l.name == layer)
    if how == "shape":
        lp.blobs[0].shape.dim[0] += 1
        lp.blobs[0].data.extend([0.0] * (len(lp.blobs[0].data) // (lp.blobs[0].shape.dim[0] - 1)))
    elif how == "blob-count":
        del lp.blobs[1]
    elif how == "value-count":
        del lp.blobs[0].data[-1]
    elif how == "diff-count":
        lp.blobs[1].diff.extend([1.0, 2.0, 3.0, 4.0, 5.0])
    return param


# --------------------------------------------------------------------------- copy_from
@pytest.mark.parametrize("how", ["shape", "blob-count", "value-count", "diff-count"])
@pytest.mark.parametrize("bad_layer", LAYERS)
@pytest.mark.parametrize("source", ["file", "param"])
def test_failed_copy_from_changes_no_param(tmp_path, how, bad_layer, source):
    net = _net(tmp_path)
    _randomize(net, 99)
    before = _snapshot(net)
    param = _spoil(_model(tmp_path), bad_layer, how)
    if source == "file":
        path = tmp_path / "bad.caffemodel"
        path.write_bytes(param.SerializeToString())
        arg = str(path)
    else:
        arg = param
    with pytest.raises(ShapeError) as ei:
        net.copy_from(arg) if source == "file" else net.CopyTrainedLayersFrom(arg)
    assert ei.value.layer == bad_layer and bad_layer in str(ei.value)
    _assert_unchanged(net, before)     # the layers before bad_layer too


def test_good_copy_from_still_copies_everything(tmp_path):
    net = _net(tmp_path)
    param = _model(tmp_path, seed=5)
    net.CopyTrainedLayersFrom(param)
    src = Net.from_param(param, phase=TRAIN)
    for name in LAYERS:
        for a, b in zip(net.params[name], src.params[name]):
            np.testing.assert_array_equal(a.data, b.data)


def test_failed_copy_from_unreadable_file_changes_nothing(tmp_path):
    net = _net(tmp_path)
    before = _snapshot(net)
    data = _model(tmp_path).SerializeToString()
    path = tmp_path / "trunc.caffemodel"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ParseError):
        net.copy_from(str(path))
    _assert_unchanged(net, before)


def test_weights_argument_failure_raises(tmp_path):
    (tmp_path / "net.prototxt").write_text(NET)
    bad = tmp_path / "bad.caffemodel"
    bad.write_bytes(_spoil(_model(tmp_path), "ip2", "shape").SerializeToString())
    with pytest.raises(ShapeError, match="layer 'ip2'"):
        Net(str(tmp_path / "net.prototxt"), TRAIN, weights=str(bad))


def test_failed_hdf5_copy_changes_no_param(tmp_path):
    h5py = pytest.importorskip("h5py")
    src = _net(tmp_path, name="source.prototxt")
    _randomize(src, 3)
    path = tmp_path / "w.h5"
    src.save_hdf5(str(path))
    with h5py.File(str(path), "r+") as f:
        del f["data/ip2/0"]
        f["data/ip2"].create_dataset("0", data=np.zeros((4, 6), np.float32))   # 3 x 6 expected
    net = _net(tmp_path)
    before = _snapshot(net)
    with pytest.raises(ShapeError, match="layer 'ip2'"):
        net.copy_from(str(path))
    _assert_unchanged(net, before)


def test_failed_share_with_shares_nothing(tmp_path):
    a = _net(tmp_path, name="a.prototxt")
    b = _net(tmp_path, NET.replace("num_output: 3", "num_output: 5"), name="b.prototxt")
    with pytest.raises(ShapeError, match="layer 'ip2'"):
        a.share_with(b)
    for name in LAYERS:
        for x, y in zip(a.params[name], b.params[name]):
            assert not x.shares_data_with(y), "%s was shared before the failure" % name


# --------------------------------------------------------------------------- Init
def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("prefetch-") and t.is_alive()]


def _wait_no_prefetch(timeout=120):          # a hang guard: returns as soon as they are gone
    end = time.time() + timeout
    while time.time() < end:
        gc.collect()
        if not _prefetch_threads():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def lmdb_source(tmp_path):
    lmdb = pytest.importorskip("lmdb")
    from engine.core.io import array_to_datum
    path = str(tmp_path / "db")
    env = lmdb.open(path, map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(8):
            txn.put(b"%08d" % i, array_to_datum(np.full((1, 4, 4), i, np.uint8), i).SerializeToString())
    env.close()
    return path


@pytest.mark.parametrize("bad", [
    ('layer { name: "x" type: "Bogus" bottom: "data" top: "y" }', "UnknownLayerTypeError"),
    ('layer { name: "x" type: "ReLU" bottom: "nope" top: "y" }', "NetError"),
    ('layer { name: "x" type: "Reshape" bottom: "data" top: "y" reshape_param { shape { dim: 7 } } }',
     "LayerError"),
])
def test_failed_init_leaves_no_thread_handler_or_mode(tmp_path, lmdb_source, bad):
    text = ('layer { name: "d" type: "Data" top: "data" top: "label" data_param { source: "%s" '
            'batch_size: 2 backend: LMDB } }\n' % lmdb_source) + bad[0] + "\n"
    assert _wait_no_prefetch()
    net_log = logging.getLogger("engine.core.net")
    handlers = list(net_log.handlers)
    level = net_log.level
    mode = backend.mode()
    with pytest.raises(CaffeError) as ei:
        _net(tmp_path, text, phase=TEST)
    assert type(ei.value).__name__ == bad[1]
    del ei                               # the traceback holds the half-built net
    assert _wait_no_prefetch(), "a failed Init left prefetch threads: %s" % _prefetch_threads()
    assert net_log.handlers == handlers and net_log.level == level
    assert backend.mode() == mode


def test_failed_init_does_not_disturb_a_live_net(tmp_path):
    good = _net(tmp_path, name="good.prototxt")
    _randomize(good, 4)
    before = _snapshot(good)
    with pytest.raises(CaffeError):
        _net(tmp_path, NET.replace('type: "Convolution"', 'type: "Convolutoin"'), name="bad.prototxt")
    _assert_unchanged(good, before)
    good.forward()


# --------------------------------------------------------------------------- solver steps
def _solver(tmp_path, extra=""):
    from engine import get_solver
    (tmp_path / "net.prototxt").write_text(NET)
    (tmp_path / "solver.prototxt").write_text(
        'net: "%s"\nbase_lr: 0.1\nmomentum: 0.9\nlr_policy: "fixed"\nrandom_seed: 1\n%s'
        % (tmp_path / "net.prototxt", extra))
    s = get_solver(str(tmp_path / "solver.prototxt"))
    s.net.blobs["data"].data[...] = np.random.default_rng(0).normal(size=s.net.blobs["data"].shape)
    s.net.blobs["label"].data[...] = [0, 1, 2, 1]
    return s


def _solver_state(s):
    return (_snapshot(s.net), [h.data.copy() for h in s.history], s.iter)


def _assert_solver_unchanged(s, state):
    params, history, it = state
    _assert_unchanged(s.net, params)
    for h, h0 in zip(s.history, history):
        np.testing.assert_array_equal(h.data, h0)
    assert s.iter == it


def test_step_failing_in_forward_changes_nothing(tmp_path):
    s = _solver(tmp_path)
    s.step(2)
    state = _solver_state(s)
    s.net.blobs["label"].data[...] = [0, 1, 7, 1]     # class 7 of 3: Caffe reads out of bounds
    with pytest.raises(LayerError, match="label value 7"):
        s.step(1)
    _assert_solver_unchanged(s, state)
    s.net.blobs["label"].data[...] = [0, 1, 2, 1]
    s.step(1)                                          # and it carries on
    assert s.iter == state[2] + 1


def test_step_failing_in_update_changes_nothing(tmp_path):
    s = _solver(tmp_path)
    s.step(1)
    state = _solver_state(s)
    s.param.lr_policy = "bogus"
    with pytest.raises(SolverError, match="Unknown learning rate policy: bogus"):
        s.step(1)
    _assert_solver_unchanged(s, state)

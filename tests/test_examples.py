"""The bundled examples: every example net initialises in the phases (and, for
examples/shared_stages, the stages and level) it declares and runs forward and
backward to a finite loss; make_digits_lmdb.py writes LMDBs the Data layer reads;
a short LeNet run on those digits lowers the loss."""
import contextlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import engine
from engine import TEST, TRAIN
from engine.core.errors import ParseError
from engine.core.io import datum_to_array, parse_prototxt
from engine.core.upgrade import read_net_params
from engine.proto import caffe_pb2

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
LENET = EXAMPLES / "lenet"
# The LMDB sources the bundled nets name (relative to the repo root, as Caffe opens them).
DIGITS_SOURCES = {"examples/lenet/digits_train_lmdb": "train",
                  "examples/lenet/digits_test_lmdb": "test"}
PHASES = {"TRAIN": TRAIN, "TEST": TEST}


def _load_script():
    spec = importlib.util.spec_from_file_location("make_digits_lmdb",
                                                  LENET / "make_digits_lmdb.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_digits_lmdb = _load_script()


def _example_prototxts():
    """(nets, solvers): every examples/**/*.prototxt, told apart by parsing."""
    nets, solvers = [], []
    for path in sorted(EXAMPLES.rglob("*.prototxt")):
        text = path.read_text()
        try:
            parse_prototxt(text, caffe_pb2.NetParameter, str(path))
        except ParseError:
            parse_prototxt(text, caffe_pb2.SolverParameter, str(path))  # neither: fails here
            solvers.append(path)
        else:
            nets.append(path)
    return nets, solvers


NETS, SOLVERS = _example_prototxts()


def _declared_phases(param):
    """The phases the net's include/exclude rules name (both when it names none)."""
    phases = {r.phase for lp in param.layer for r in list(lp.include) + list(lp.exclude)
              if r.HasField("phase")}
    return sorted(phases) or [TRAIN, TEST]


def _cases():
    cases = []
    for path in NETS:
        rel = path.relative_to(ROOT).as_posix()
        for phase in _declared_phases(read_net_params(path)):
            name = "TRAIN" if phase == TRAIN else "TEST"
            cases.append(pytest.param(rel, name, 0, (), id="%s-%s" % (rel, name)))
    # The NetState rules examples/shared_stages shows off.
    stages = "examples/shared_stages/siamese_stages.prototxt"
    for phase in ("TRAIN", "TEST"):
        for level, st in ((0, ("deploy",)), (0, ("no-norm",)), (1, ()),
                          (1, ("deploy", "no-norm"))):
            cases.append(pytest.param(stages, phase, level, st,
                                      id="%s-%s-level%d-%s" % (stages, phase, level,
                                                               "+".join(st) or "nostage")))
    return cases


@pytest.fixture(scope="module")
def digits_lmdbs(tmp_path_factory):
    """The digits LMDBs, written by the example's script into a temporary folder."""
    d = tmp_path_factory.mktemp("digits")
    train, test = d / "digits_train_lmdb", d / "digits_test_lmdb"
    assert make_digits_lmdb.main([str(train), str(test)]) == 0
    return {"train": str(train), "test": str(test)}


def _with_lmdbs(param, lmdbs):
    """``param`` with the bundled digits LMDB sources pointed at ``lmdbs``."""
    for lp in param.layer:
        if lp.type == "Data":
            assert lp.data_param.source in DIGITS_SOURCES, \
                "unknown Data source %s: teach tests/test_examples.py to build it" \
                % lp.data_param.source
            lp.data_param.source = lmdbs[DIGITS_SOURCES[lp.data_param.source]]
    return param


def _close(net):
    for layer in net.layers:
        close = getattr(layer, "close", None)
        if close is not None:
            close()


@contextlib.contextmanager
def _one_blas_thread():
    """Single-threaded BLAS for the training test: on a loaded 2-core machine
    OpenBLAS's spinning worker threads make each GEMM several times slower."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn brings threadpoolctl
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def test_examples_found():
    names = {p.relative_to(ROOT).as_posix() for p in NETS}
    assert {"examples/lenet/lenet_train_test.prototxt",
            "examples/lenet/lenet_lmdb_train_test.prototxt",
            "examples/resnet_tiny/resnet_tiny.prototxt",
            "examples/shared_stages/siamese_stages.prototxt"} <= names
    assert "examples/lenet/lenet_solver.prototxt" in {p.relative_to(ROOT).as_posix()
                                                      for p in SOLVERS}


@pytest.mark.parametrize("rel, phase_name, level, stages", _cases())
def test_example_net_runs(rel, phase_name, level, stages, digits_lmdbs):
    phase = PHASES[phase_name]
    param = read_net_params(ROOT / rel)
    param = _with_lmdbs(param, digits_lmdbs)
    net = engine.Net.from_param(param, phase=phase, level=level, stages=list(stages),
                                model_dir=str((ROOT / rel).parent))
    try:
        names = list(net.layer_dict)
        if rel.endswith("siamese_stages.prototxt"):
            assert ("deploy_prob" in names) == (phase == TEST and "deploy" in stages)
            assert ("norm" in names) == ("no-norm" not in stages)
            assert ("probe" in names) == (level >= 1)
            assert ("loss" in names) == (phase == TRAIN)
        rng = np.random.default_rng(0)
        for name in net.inputs:
            blob = net.blobs[name]
            if name in ("label", "sim"):
                blob.data[...] = rng.integers(0, 2, blob.data.shape)
            else:
                blob.data[...] = rng.standard_normal(blob.data.shape)
        out = net.forward()
        assert out, "the net has no outputs"
        for name, value in out.items():
            assert np.all(np.isfinite(value)), "%s: %s" % (name, value)
        losses = [n for n in out if net.blob_loss_weights[n]]
        if phase == TRAIN or "loss" in names:
            assert losses, "no loss output in %s" % phase_name
        net.backward()
        for lname, blobs in net.params.items():
            for i, b in enumerate(blobs):
                assert np.all(np.isfinite(b.diff)), "%s[%d] diff" % (lname, i)
        if losses:
            assert any(np.abs(b.diff).sum() > 0 for bs in net.params.values() for b in bs)
    finally:
        _close(net)


def test_make_digits_lmdb_is_read_by_the_data_layer(digits_lmdbs, tmp_path):
    import lmdb
    from sklearn.datasets import load_digits
    images, labels = make_digits_lmdb.load_images()
    train_idx, test_idx = make_digits_lmdb.split(len(images))
    assert (len(train_idx), len(test_idx)) == (1437, 360)
    assert not set(train_idx) & set(test_idx)
    np.testing.assert_array_equal(labels, load_digits().target)
    assert images.dtype == np.uint8 and images.shape == (1797, 1, 28, 28)
    assert images.min() == 0 and images.max() == 255

    # Keys and Datum fields as Caffe writes them.
    env = lmdb.open(digits_lmdbs["test"], readonly=True, lock=False)
    with env.begin() as txn:
        keys = [k for k, _ in txn.cursor()]
        datum = caffe_pb2.Datum()
        datum.ParseFromString(txn.get(b"00000007"))
    env.close()
    assert keys == [b"%08d" % i for i in range(360)]
    assert (datum.channels, datum.height, datum.width) == (1, 28, 28)
    assert len(datum.data) == 28 * 28 and not datum.float_data and not datum.encoded
    assert datum.label == labels[test_idx[7]]
    np.testing.assert_array_equal(datum_to_array(datum), images[test_idx[7]])

    # Idempotent: writing again over the same paths leaves the same databases.
    again = tmp_path / "again"
    assert make_digits_lmdb.main([str(again), str(tmp_path / "again_test")]) == 0
    assert make_digits_lmdb.main([str(again), str(tmp_path / "again_test")]) == 0
    env = lmdb.open(str(again), readonly=True, lock=False)
    assert env.stat()["entries"] == 1437
    env.close()

    # The Data layer reads every record back: pixels 0..255 (scale 1), the labels.
    for which, idx in (("train", train_idx), ("test", test_idx)):
        net_param = parse_prototxt(
            'layer { name: "d" type: "Data" top: "data" top: "label" '
            'data_param { source: "%s" batch_size: %d backend: LMDB } }'
            % (digits_lmdbs[which], len(idx)), caffe_pb2.NetParameter)
        net = engine.Net.from_param(net_param, phase=TEST)
        try:
            net.forward()
            data, label = net.blobs["data"].data, net.blobs["label"].data
            assert data.shape == (len(idx), 1, 28, 28)
            assert data.min() == 0 and data.max() == 255
            np.testing.assert_array_equal(data, images[idx].astype(np.float32))
            np.testing.assert_array_equal(label, labels[idx].astype(np.float32))
        finally:
            _close(net)


def _evaluate(solver):
    """Mean loss and accuracy of test net 0 over test_iter batches (the whole test set)."""
    net = solver.test_nets[0]
    solver.share_weights(net)
    losses, accs = [], []
    for _ in range(solver.param.test_iter[0]):
        out = net.forward()
        losses.append(float(out["loss"]))
        accs.append(float(out["accuracy"]))
    return np.mean(losses), np.mean(accs)


def test_short_lenet_training_lowers_the_loss(digits_lmdbs, tmp_path):
    net_param = _with_lmdbs(read_net_params(LENET / "lenet_lmdb_train_test.prototxt"),
                            digits_lmdbs)
    (tmp_path / "net.prototxt").write_text(str(net_param))
    solver_param = parse_prototxt((LENET / "lenet_solver.prototxt").read_text(),
                                  caffe_pb2.SolverParameter)
    solver_param.net = str(tmp_path / "net.prototxt")
    solver_param.max_iter = 60
    solver_param.test_interval = 1000
    solver_param.display = 0
    solver_param.snapshot_after_train = False
    solver_param.snapshot_prefix = str(tmp_path / "snap")
    (tmp_path / "solver.prototxt").write_text(str(solver_param))

    with _one_blas_thread():
        solver = engine.get_solver(str(tmp_path / "solver.prototxt"))
        try:
            loss0, acc0 = _evaluate(solver)
            train_losses = []
            for _ in range(60):
                solver.step(1)
                train_losses.append(float(solver.net.blobs["loss"].data))
            loss1, acc1 = _evaluate(solver)
        finally:
            _close(solver.net)
            for net in solver.test_nets:
                _close(net)
    assert solver.iter == 60
    assert np.all(np.isfinite(train_losses))
    assert loss0 > 2.0 and acc0 < 0.3          # untrained: about ln 10, chance
    assert np.mean(train_losses[-10:]) < 0.25 * np.mean(train_losses[:5])
    assert loss1 < 0.25 * loss0
    assert acc1 > 0.85

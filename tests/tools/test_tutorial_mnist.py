"""Caffe's MNIST tutorial end to end on the engine, as a user runs it (tests/tutorial_mnist.py):
raw IDX files -> create_mnist.sh (convert_mnist_data) -> LMDB -> train_lenet.sh (``caffe
train -solver examples/mnist/lenet_solver.prototxt``) -> a snapshot -> ``caffe test`` on it.
On a slice of the real Fashion-MNIST files where Debian's dataset-fashion-mnist is
installed, on generated IDX files otherwise.  What is checked is the path and the numbers
that could go wrong on it (the databases' records, the snapshot's weights against the same
solver run in this process, ``caffe test`` against the training's own last test pass), not
accuracy against time.  tests/inspector/test_tutorial_browser.py opens the page on the
snapshot."""
import os
import re

import numpy as np
import pytest

from engine.core.db import read_records
from engine.proto import caffe_pb2
from tests import tutorial_mnist as tut


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    root = tmp_path_factory.mktemp("caffe")
    which, data = tut.make_root(root)
    create = tut.sh(root, "./examples/mnist/create_mnist.sh")
    train = tut.sh(root, "./examples/mnist/train_lenet.sh")
    return root, which, data, create, train


def test_create_mnist_writes_the_idx_files_into_lmdbs(tutorial):
    root, which, data, create, _ = tutorial
    assert create.returncode == 0, create.stderr
    assert create.stdout.splitlines() == ["Creating lmdb...", "Done."]
    for kind, name in (("train", "mnist_train_lmdb"), ("t10k", "mnist_test_lmdb")):
        images, labels = data[kind]
        recs = read_records(str(root / "examples" / "mnist" / name), "lmdb")
        assert [k for k, _ in recs] == [b"%08d" % i for i in range(len(images))]
        for i in (0, len(images) - 1):
            d = caffe_pb2.Datum.FromString(recs[i][1])
            assert (d.channels, d.height, d.width, d.label) == (1, 28, 28, int(labels[i]))
            assert d.data == images[i].tobytes()
        assert "Processed %d files." % len(images) in create.stderr


def test_train_lenet_runs_the_solver_as_written_and_snapshots(tutorial):
    """The run's log is Caffe's, its snapshot holds the weights the same solver reaches in
    this process (the command line changes no number)."""
    import engine
    root, which, _, _, train = tutorial
    assert train.returncode == 0, train.stderr[-3000:]
    log = train.stderr
    assert "Solving LeNet" in log and "Optimization Done." in log
    assert "Iteration %d, loss = " % tut.MAX_ITER in log
    snap = root / "examples" / "mnist" / ("lenet_iter_%d" % tut.MAX_ITER)
    assert snap.with_suffix(".caffemodel").is_file() and snap.with_suffix(".solverstate").is_file()
    loss0 = float(re.search(r"Iteration 0 \(.*\), loss = (\S+)", log).group(1))
    assert 1.5 < loss0 < 3.5          # a fresh LeNet on ten classes: about ln(10)
    model = caffe_pb2.NetParameter.FromString(snap.with_suffix(".caffemodel").read_bytes())
    saved = {l.name: [np.asarray(b.data, np.float32) for b in l.blobs] for l in model.layer if l.blobs}
    assert set(saved) == {"conv1", "conv2", "ip1", "ip2"}
    cwd = os.getcwd()
    os.chdir(root)
    try:
        engine.set_mode_cpu()
        solver = engine.get_solver("examples/mnist/lenet_solver.prototxt")
        solver.step(tut.MAX_ITER)
        for name, blobs in saved.items():
            for mine, theirs in zip(solver.net.params[name], blobs):
                np.testing.assert_array_equal(mine.data.ravel(), theirs, err_msg=name)
    finally:
        os.chdir(cwd)


def test_caffe_test_scores_the_snapshot_as_the_training_did(tutorial):
    """The test set is TEST_ITER batches, so the training's last test pass and ``caffe test
    -iterations TEST_ITER`` score the same weights on the same images: the same lines."""
    root, _, _, _, train = tutorial
    assert train.returncode == 0
    res = tut.sh(root, "./build/tools/caffe", "test", "-model", "examples/mnist/lenet_train_test.prototxt",
                 "-weights", "examples/mnist/lenet_iter_%d.caffemodel" % tut.MAX_ITER,
                 "-iterations", str(tut.TEST_ITER))
    assert res.returncode == 0, res.stderr[-3000:]
    scored = tut.caffe_test_outputs(res.stderr)
    trained = tut.final_test_outputs(train.stderr)
    assert set(scored) == {"accuracy", "loss"} and scored == trained
    assert 0.0 <= float(scored["accuracy"]) <= 1.0


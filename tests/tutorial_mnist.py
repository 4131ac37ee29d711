"""Caffe's MNIST tutorial as a user runs it, on the engine (tests/tools/test_tutorial_mnist.py,
tests/inspector/test_tutorial_browser.py; docs/tutorials.md is the same path for a person):

    python -m engine build-shims CAFFE_ROOT      # build/tools/caffe, build/examples/mnist/... run the engine
    cd CAFFE_ROOT
    ./examples/mnist/create_mnist.sh             # data/mnist's IDX files -> examples/mnist/mnist_*_lmdb
    ./examples/mnist/train_lenet.sh              # -> examples/mnist/lenet_iter_N.caffemodel / .solverstate
    ./build/tools/caffe test -model examples/mnist/lenet_train_test.prototxt -weights ... -iterations N

CAFFE_ROOT holds Caffe's own examples/mnist files, taken from the BVLC/caffe snapshot
(``git show``) when its mirror is here (``CAFFE_MIRROR``, default /work/.mirror/BVLC+caffe/repo),
else this project's equivalents (examples/lenet's LMDB net and solver, pointed at
examples/mnist, and two scripts written below that call the tools as Caffe's do).  The
data: a slice of the real Fashion-MNIST files when Debian's ``dataset-fashion-mnist`` is
installed, else IDX files generated here; both in MNIST's IDX format, uncompressed, where
Caffe's data/mnist/get_mnist.sh leaves them.  The solver is Caffe's with what its tutorial
says to change (``solver_mode: CPU``) and a short run: few iterations, a test set of exactly
``TEST_ITER`` batches (so every test pass and ``caffe test -iterations TEST_ITER`` read the
same images), a seed.
"""
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("CAFFE_MIRROR", "/work/.mirror/BVLC+caffe/repo"))
FASHION = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
TUTORIAL_FILES = ("create_mnist.sh", "train_lenet.sh", "lenet_train_test.prototxt", "lenet_solver.prototxt")
TRAIN_ITEMS, TEST_ITEMS = 640, 200          # the slice: ten training batches of 64, two test batches of 100
MAX_ITER, TEST_ITER = 20, 2

_CREATE = """#!/usr/bin/env sh
# data/mnist's IDX files into LMDBs, as Caffe's examples/mnist/create_mnist.sh does it
set -e
EXAMPLE=examples/mnist
DATA=data/mnist
BUILD=build/examples/mnist
BACKEND="lmdb"
echo "Creating ${BACKEND}..."
rm -rf $EXAMPLE/mnist_train_${BACKEND} $EXAMPLE/mnist_test_${BACKEND}
$BUILD/convert_mnist_data.bin $DATA/train-images-idx3-ubyte $DATA/train-labels-idx1-ubyte \\
  $EXAMPLE/mnist_train_${BACKEND} --backend=${BACKEND}
$BUILD/convert_mnist_data.bin $DATA/t10k-images-idx3-ubyte $DATA/t10k-labels-idx1-ubyte \\
  $EXAMPLE/mnist_test_${BACKEND} --backend=${BACKEND}
echo "Done."
"""
_TRAIN = """#!/usr/bin/env sh
set -e
./build/tools/caffe train --solver=examples/mnist/lenet_solver.prototxt $@
"""


def caffes_files():
    """{name: text} of Caffe's examples/mnist tutorial files from the snapshot, or None."""
    if not (MIRROR / "HEAD").exists():
        return None
    out = {}
    for name in TUTORIAL_FILES:
        res = subprocess.run(["git", "--git-dir", str(MIRROR), "show", "HEAD:examples/mnist/" + name],
                             capture_output=True, text=True)
        if res.returncode != 0:
            return None
        out[name] = res.stdout
    return out


def our_files():
    """This project's equivalents: examples/lenet's LMDB net and solver, pointed at examples/mnist."""
    net = (ROOT / "examples/lenet/lenet_lmdb_train_test.prototxt").read_text()
    net = net.replace("examples/lenet/digits_train_lmdb", "examples/mnist/mnist_train_lmdb")
    net = net.replace("examples/lenet/digits_test_lmdb", "examples/mnist/mnist_test_lmdb")
    net = re.sub(r"batch_size: 90", "batch_size: 100", net)
    solver = (ROOT / "examples/lenet/lenet_solver.prototxt").read_text()
    solver = solver.replace("examples/lenet/lenet_lmdb_train_test.prototxt", "examples/mnist/lenet_train_test.prototxt")
    solver = solver.replace('snapshot_prefix: "examples/lenet/lenet_digits"', 'snapshot_prefix: "examples/mnist/lenet"')
    return {"create_mnist.sh": _CREATE, "train_lenet.sh": _TRAIN, "lenet_train_test.prototxt": net,
            "lenet_solver.prototxt": solver}


def short_solver(text):
    """The tutorial's solver with what its readme says to change for a CPU (solver_mode) and
    a short run; every other line as written."""
    from benchmarks.bench_train import edit_solver
    return edit_solver(text, {"max_iter": MAX_ITER, "test_iter": TEST_ITER, "test_interval": MAX_ITER, "display": 5,
                              "snapshot": MAX_ITER, "solver_mode": "CPU", "random_seed": 1})


def _idx(images, labels):
    n, rows, cols = images.shape
    img = np.array([2051, n, rows, cols], ">u4").tobytes() + images.tobytes()
    lab = np.array([2049, n], ">u4").tobytes() + labels.tobytes()
    return img, lab


def _fashion_slice(kind, count):
    """The first ``count`` images and labels of Fashion-MNIST's ``kind`` (train / t10k) files."""
    with gzip.open(FASHION / ("%s-images-idx3-ubyte.gz" % kind)) as f:
        head = np.frombuffer(f.read(16), ">u4")
        rows, cols = int(head[2]), int(head[3])
        images = np.frombuffer(f.read(count * rows * cols), np.uint8).reshape(count, rows, cols)
    with gzip.open(FASHION / ("%s-labels-idx1-ubyte.gz" % kind)) as f:
        f.read(8)
        labels = np.frombuffer(f.read(count), np.uint8)
    return images, labels


def _generated(kind, count):
    """Digit-like IDX data: each class a bright bar at its own place, with noise."""
    rng = np.random.default_rng(0 if kind == "train" else 1)
    labels = rng.integers(0, 10, count).astype(np.uint8)
    images = rng.integers(0, 60, (count, 28, 28)).astype(np.uint8)
    for i, lab in enumerate(labels):
        images[i, 2 + 2 * lab:5 + 2 * lab, 4:24] = 255
    return images, labels


def dataset():
    """'fashion-mnist' when Debian's files are here, else 'generated'."""
    return "fashion-mnist" if (FASHION / "train-images-idx3-ubyte.gz").is_file() else "generated"


def write_data(root):
    """data/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte; returns {kind: (images, labels)}."""
    source = _fashion_slice if dataset() == "fashion-mnist" else _generated
    folder = root / "data" / "mnist"
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for kind, count in (("train", TRAIN_ITEMS), ("t10k", TEST_ITEMS)):
        images, labels = out[kind] = source(kind, count)
        img, lab = _idx(images, labels)
        (folder / ("%s-images-idx3-ubyte" % kind)).write_bytes(img)
        (folder / ("%s-labels-idx1-ubyte" % kind)).write_bytes(lab)
    return out


def make_root(root):
    """A Caffe root with the tutorial's files, its data and the engine's build/ shims;
    returns ('caffe' or 'ours', the data)."""
    from engine.tools.shims import write_shims
    files = caffes_files()
    which = "caffe" if files else "ours"
    files = files or our_files()
    ex = root / "examples" / "mnist"
    ex.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        if name == "lenet_solver.prototxt":
            text = short_solver(text)
        (ex / name).write_text(text)
        if name.endswith(".sh"):
            (ex / name).chmod(0o755)
    data = write_data(root)
    write_shims(str(root), python=sys.executable)
    return which, data


def sh(root, *argv, timeout=600):
    """Run a command in the Caffe root as a user does (the engine importable only through the shims)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(list(argv), cwd=str(root), capture_output=True, text=True, timeout=timeout, env=env)


_TEST_OUT = re.compile(r"Test net output #(\d+): (\S+) = (\S+)")
_CAFFE_TEST = re.compile(r"\] (accuracy|loss) = (\S+)")


def final_test_outputs(train_log):
    """The last test pass's outputs of a ``caffe train`` log: {name: printed value}."""
    out = {}
    for line in train_log.splitlines():
        m = _TEST_OUT.search(line)
        if m:
            if m.group(1) == "0":
                out = {}
            out[m.group(2)] = m.group(3)
    return out


def caffe_test_outputs(test_log):
    """``caffe test``'s closing lines: {name: printed value}."""
    return {m.group(1): m.group(2) for m in map(_CAFFE_TEST.search, test_log.splitlines()) if m}

"""Fixtures for Caffe's tools: small image sets written with OpenCV, databases made by
convert_imageset, and a small net that reads them through a Data layer."""
import io
from pathlib import Path

import numpy as np
import pytest

from engine.tools.cli import main

cv2 = pytest.importorskip("cv2")

CLASSES = 3


def run(*argv):
    """``python -m engine ARGV`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def image_set(tmp_path):
    """Eight colour PNGs of assorted sizes under ``root/sub/`` and a list file of
    ``sub/imN.png label`` lines: (root with its slash, list path, {name: BGR image}, labels)."""
    rng = np.random.default_rng(3)
    root = tmp_path / "images"
    (root / "sub").mkdir(parents=True)
    images, lines, labels = {}, [], []
    for i in range(8):
        img = rng.integers(0, 256, (11 + i % 3, 13 + i % 2, 3), dtype=np.uint8)
        name = "sub/im%d.png" % i
        assert cv2.imwrite(str(root / name), img)
        images[name] = img
        labels.append(i % CLASSES)
        lines.append("%s %d" % (name, i % CLASSES))
    listfile = tmp_path / "list.txt"
    listfile.write_text("\n".join(lines) + "\n")
    return str(root) + "/", str(listfile), images, labels


NET = """name: "tiny"
layer {
  name: "data" type: "Data" top: "data" top: "label"
  transform_param { scale: 0.00390625 %(transform)s }
  data_param { source: "%(source)s" batch_size: 4 %(backend)s }
}
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 2 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
layer { name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
  include { phase: TEST } }
"""


def write_net(path, source, backend="", transform=""):
    Path(path).write_text(NET % dict(source=source, backend=backend, transform=transform))
    return str(path)


def write_solver(path, net, prefix, max_iter=2):
    Path(path).write_text('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\nmomentum: 0.9\ndisplay: 1\n'
                          'max_iter: %d\nsnapshot_prefix: "%s"\nrandom_seed: 1\n' % (net, max_iter, prefix))
    return str(path)


@pytest.fixture
def leveldb_set(tmp_path, image_set):
    """image_set resized to 8 x 9 in a LevelDB by convert_imageset (Caffe's default backend)."""
    pytest.importorskip("plyvel")
    root, listfile, images, labels = image_set
    db = tmp_path / "train_leveldb"
    code, _, err = run("convert_imageset", "-backend", "leveldb", "-resize_height", 8, "-resize_width", 9,
                       root, listfile, db)
    assert code == 0, err
    return str(db), images, labels


@pytest.fixture
def tiny_model(tmp_path, leveldb_set):
    """A net reading the LevelDB with Caffe's default backend, its solver, and weights
    trained for 2 iterations: (net, solver, caffemodel)."""
    db, _, _ = leveldb_set
    net = write_net(tmp_path / "tiny.prototxt", db)
    solver = write_solver(tmp_path / "solver.prototxt", net, tmp_path / "tiny")
    code, _, err = run("train", "-solver", solver)
    assert code == 0, err
    return net, solver, str(tmp_path / "tiny_iter_2.caffemodel")

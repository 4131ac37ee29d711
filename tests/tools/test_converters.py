"""Caffe's example converters (convert_mnist_data, convert_cifar_data,
convert_mnist_siamese_data) against the databases real Caffe's converters wrote for the
same inputs: keys, Datum bytes and counts (a digest over every record, the first and last
records in full), the siamese pairs, and the converters' log lines.  The inputs and how
the expected figures were recorded: tests/data/caffe_converters/README.md."""
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.core.db import read_records
from engine.proto import caffe_pb2
from engine.tools import converters
from engine.tools.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from tests.data.caffe_converters import inputs
from tests.tools.conftest import run

DATA = Path(__file__).resolve().parents[1] / "data" / "caffe_converters"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def _messages(err, tmp):
    return [l.split("] ", 1)[1].replace(str(tmp), "TMP") for l in err.splitlines() if "] " in l]


def _same_as_caffe(path, backend, expected):
    """The database at ``path`` holds what Caffe's did: count, every record (digest), the
    first and last records byte for byte."""
    recs = read_records(str(path), backend)
    assert len(recs) == expected["count"]
    assert [[k.decode(), v.hex()] for k, v in recs[:len(expected["head"])]] == expected["head"]
    assert [recs[-1][0].decode(), recs[-1][1].hex()] == expected["last"]
    assert inputs.records_digest(recs) == expected["digest"]
    return recs


@pytest.fixture
def mnist_files(tmp_path):
    return inputs.write_mnist(tmp_path)


@pytest.mark.parametrize("backend", ["lmdb", "leveldb"])
def test_convert_mnist_data_writes_what_caffe_wrote(tmp_path, mnist_files, backend):
    if backend == "leveldb":
        pytest.importorskip("plyvel")
    images, labels = mnist_files
    out = tmp_path / ("mnist_" + backend)
    code, _, err = run("convert_mnist_data", images, labels, out, "--backend=" + backend)
    assert code == EXIT_OK, err
    expected = EXPECTED["mnist_" + backend]
    assert _messages(err, tmp_path) == expected["log"]
    recs = _same_as_caffe(out, backend, expected)
    d = caffe_pb2.Datum.FromString(recs[7][1])            # item 7's label byte is 200: C's char, -56
    assert (d.channels, d.height, d.width, d.label) == (1, inputs.MNIST_ROWS, inputs.MNIST_COLS, -56)


def test_convert_mnist_data_reads_the_downloaded_gzip_files_as_they_are(tmp_path, mnist_files):
    """MNIST and Fashion-MNIST come as .gz: the same database from them as Caffe's from the
    gunzipped files (gflags' -backend spelling)."""
    gz = []
    for path in mnist_files:
        with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
            g.write(f.read())
        gz.append(path + ".gz")
    out = tmp_path / "from_gz"
    code, _, err = run("convert_mnist_data", "-backend", "lmdb", gz[0], gz[1], out)
    assert code == EXIT_OK, err
    _same_as_caffe(out, "lmdb", EXPECTED["mnist_lmdb"])


def test_convert_cifar_data_writes_what_caffe_wrote(tmp_path):
    """Caffe's split (five training batches into cifar10_train_lmdb, keys 00000..49999; the
    test batch into cifar10_test_lmdb) from full-size batches (Caffe reads 10,000 records
    from each)."""
    src = tmp_path / "cifar"
    src.mkdir()
    inputs.write_cifar(src)
    code, _, err = run("convert_cifar_data", src, tmp_path, "lmdb")
    assert code == EXIT_OK, err
    assert _messages(err, tmp_path) == EXPECTED["cifar_log_lmdb"]
    shutil.rmtree(src)                                      # 184 MB of input, no longer needed
    train = _same_as_caffe(tmp_path / "cifar10_train_lmdb", "lmdb", EXPECTED["cifar_train_lmdb"])
    assert train[-1][0] == b"49999"
    test = _same_as_caffe(tmp_path / "cifar10_test_lmdb", "lmdb", EXPECTED["cifar_test_lmdb"])
    d = caffe_pb2.Datum.FromString(test[5 * 7 + 3][1])      # the test batch's label byte 205
    assert (d.channels, d.height, d.width, d.label) == (3, 32, 32, 205 - 256)


def test_convert_mnist_siamese_data_pairs_as_caffe_from_the_same_seed(tmp_path, mnist_files):
    """Caffe's generator was started from SIAMESE_SEED (its 8 bytes of /dev/urandom given by
    record.py's shim): the same pairs, in the same order, the same Datums."""
    pytest.importorskip("plyvel")
    expected = EXPECTED["siamese_leveldb"]
    seed = EXPECTED["siamese_seed"]
    first, second = converters.siamese_pairs(inputs.MNIST_ITEMS, seed)
    assert [[int(i), int(j)] for i, j in zip(first, second)][:len(expected["pairs"])] == expected["pairs"]
    images, labels = mnist_files
    out = tmp_path / "siamese"
    code, _, err = run("convert_mnist_siamese_data", images, labels, out, "--seed", seed)
    assert code == EXIT_OK, err
    assert _messages(err, tmp_path) == expected["log"]
    recs = _same_as_caffe(out, "leveldb", expected)
    same = sum(caffe_pb2.Datum.FromString(v).label for _, v in recs)
    assert same == expected["same_label"]
    d = caffe_pb2.Datum.FromString(recs[0][1])
    imgs, _ = inputs.mnist_arrays()
    i, j = expected["pairs"][0]
    assert d.channels == 2 and d.data == imgs[i].tobytes() + imgs[j].tobytes()


def test_convert_mnist_siamese_data_without_a_seed_pairs_afresh_each_run(tmp_path, mnist_files):
    """As Caffe's (an unseeded generator): two runs, two pairings."""
    pytest.importorskip("plyvel")
    runs = []
    for name in ("a", "b"):
        code, _, err = run("convert_mnist_siamese_data", *mnist_files, tmp_path / name)
        assert code == EXIT_OK, err
        runs.append(read_records(str(tmp_path / name), "leveldb"))
    assert [k for k, _ in runs[0]] == [k for k, _ in runs[1]]
    assert [v for _, v in runs[0]] != [v for _, v in runs[1]]


# ------------------------------------------------------------------ bad input: a clear error, no database
def _idx(tmp_path, images, labels, magic=(2051, 2049), counts=None):
    img, lab = inputs.idx_bytes(images, labels)
    img = np.uint32(magic[0]).byteswap().tobytes() + img[4:]
    lab = np.uint32(magic[1]).byteswap().tobytes() + lab[4:]
    if counts is not None:
        lab = lab[:4] + np.uint32(counts).byteswap().tobytes() + lab[8:]
    (tmp_path / "i").write_bytes(img)
    (tmp_path / "l").write_bytes(lab)
    return tmp_path / "i", tmp_path / "l"


@pytest.mark.parametrize("command", ["convert_mnist_data", "convert_mnist_siamese_data"])
def test_mnist_converters_refuse_bad_idx_files_naming_them(tmp_path, command):
    if command == "convert_mnist_siamese_data":
        pytest.importorskip("plyvel")
    imgs = np.zeros((3, 2, 2), np.uint8)
    labs = np.zeros(3, np.uint8)
    out = tmp_path / "db"
    cases = [
        (dict(magic=(2049, 2049)),
         "Check failed: magic == 2051 (2049 vs. 2051) Incorrect image file magic. (%s)" % (tmp_path / "i")),
        (dict(magic=(2051, 7)),
         "Check failed: magic == 2049 (7 vs. 2049) Incorrect label file magic. (%s)" % (tmp_path / "l")),
        (dict(counts=4), "Check failed: num_items == num_labels (3 vs. 4)"),
    ]
    for how, message in cases:
        images, labels = _idx(tmp_path, imgs, labs, **how)
        code, _, err = run(command, images, labels, out)
        assert code == EXIT_ERROR and message in err, err
        assert not out.exists()
    images, labels = _idx(tmp_path, imgs, labs)
    images.write_bytes(images.read_bytes()[:-1])
    code, _, err = run(command, images, labels, out)
    assert code == EXIT_ERROR and "%s: its header counts 3 images of 2 x 2" % images in err and "cut short" in err
    code, _, err = run(command, tmp_path / "missing", labels, out)
    assert code == EXIT_ERROR and "Check failed: image_file Unable to open file %s" % (tmp_path / "missing") in err
    assert not out.exists()


def test_convert_mnist_data_refuses_a_database_that_exists_and_an_unknown_backend(tmp_path, mnist_files):
    out = tmp_path / "db"
    out.mkdir()
    code, _, err = run("convert_mnist_data", *mnist_files, out)
    assert code == EXIT_ERROR and "mkdir %s failed" % out in err
    code, _, err = run("convert_mnist_data", *mnist_files, tmp_path / "x", "--backend", "rocksdb")
    assert code == EXIT_ERROR and "Unknown database backend: rocksdb" in err


def test_convert_mnist_siamese_data_refuses_a_leveldb_that_exists(tmp_path, mnist_files):
    pytest.importorskip("plyvel")
    out = tmp_path / "siamese"
    assert run("convert_mnist_siamese_data", *mnist_files, out)[0] == EXIT_OK
    code, _, err = run("convert_mnist_siamese_data", *mnist_files, out)
    assert code == EXIT_ERROR
    assert err.strip() == ("error: Check failed: status.ok() Failed to open leveldb %s. Is it already existing? "
                           "(Invalid argument: %s: exists (error_if_exists is true))" % (out, out))


def test_convert_cifar_data_names_the_batch_it_cannot_read(tmp_path):
    src = tmp_path / "cifar"
    src.mkdir()
    code, _, err = run("convert_cifar_data", src, tmp_path)
    assert code == EXIT_ERROR
    assert "Check failed: data_file Unable to open train file #1 (%s/data_batch_1.bin" % src in err
    short = np.zeros((10, inputs.CIFAR_RECORD_BYTES), np.uint8)
    for name in inputs.CIFAR_FILES:
        short.tofile(str(src / (name + ".bin")))
    code, _, err = run("convert_cifar_data", src, tmp_path, "--backend=lmdb")
    assert code == EXIT_ERROR and "%s/data_batch_1.bin: 30730 bytes, fewer than the 10000 records" % src in err
    assert not (tmp_path / "cifar10_train_lmdb").exists()
    code, _, err = run("convert_cifar_data", src, tmp_path, "lmdb", "--backend=leveldb")
    assert code == EXIT_USAGE and "disagree" in err

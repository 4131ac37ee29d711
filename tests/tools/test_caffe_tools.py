"""Caffe's companion tools as subcommands: convert_imageset, compute_image_mean,
extract_features and the upgrade tools, on small files made here.  Their databases
are read back with the LMDB and LevelDB libraries directly (what real Caffe reads),
and through the engine's Data layer."""
import numpy as np
import pytest

import engine
from engine.core import db as edb
from engine.core.log import num
from engine.proto import caffe_pb2
from engine.tools.cli import EXIT_ERROR, EXIT_OK
from tests.tools.conftest import run, write_net

cv2 = pytest.importorskip("cv2")
lmdb = pytest.importorskip("lmdb")


def _messages(err):
    return [l.split("] ", 1)[1] for l in err.splitlines() if "] " in l]


def _lmdb_records(path):
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        out = [(k, v) for k, v in txn.cursor()]
    env.close()
    return out


def _leveldb_records(path):
    plyvel = pytest.importorskip("plyvel")
    d = plyvel.DB(str(path))
    out = list(d.iterator())
    d.close()
    return out


def _datum(value):
    d = caffe_pb2.Datum()
    d.ParseFromString(value)
    return d


def _chw(img):
    if img.ndim == 2:
        img = img[:, :, None]
    return np.ascontiguousarray(np.transpose(img, (2, 0, 1)))


# =========================================================================== convert_imageset
def test_convert_imageset_to_lmdb_resized(tmp_path, image_set):
    root, listfile, images, labels = image_set
    out = tmp_path / "lmdb"
    code, _, err = run("convert_imageset", "-resize_height=8", "--resize_width", "9", root, listfile, out)
    assert code == EXIT_OK, err
    msgs = _messages(err)
    assert msgs == ["A total of 8 images.", "Opened lmdb %s" % out, "Processed 8 files."]
    records = _lmdb_records(out)
    names = list(images)
    assert [k for k, _ in records] == [b"%08d_%s" % (i, n.encode()) for i, n in enumerate(names)]
    for (_, value), name, label in zip(records, names, labels):
        d = _datum(value)
        assert (d.channels, d.height, d.width, d.label, d.encoded) == (3, 8, 9, label, False)
        ref = cv2.resize(cv2.imread(root + name, cv2.IMREAD_COLOR), (9, 8), interpolation=cv2.INTER_LINEAR)
        assert d.data == _chw(ref).tobytes()


def test_convert_imageset_to_leveldb_gray(tmp_path, image_set):
    pytest.importorskip("plyvel")
    root, listfile, images, labels = image_set
    out = tmp_path / "ldb"
    code, _, err = run("convert_imageset", "-gray", "-backend=leveldb", root, listfile, out)
    assert code == EXIT_OK, err
    assert "Opened leveldb %s" % out in _messages(err)
    records = _leveldb_records(out)
    assert len(records) == 8
    for (key, value), name in zip(records, images):
        d = _datum(value)
        assert key.endswith(name.encode()) and d.channels == 1
        assert d.data == cv2.imread(root + name, cv2.IMREAD_GRAYSCALE).tobytes()


def test_convert_imageset_encoded_keeps_or_reencodes(tmp_path, image_set):
    root, listfile, images, _ = image_set
    code, _, err = run("convert_imageset", "-encoded", root, listfile, tmp_path / "png")
    assert code == EXIT_OK, err
    for (_, value), name in zip(_lmdb_records(tmp_path / "png"), images):
        d = _datum(value)
        assert d.encoded and d.data == (open(root + name, "rb").read())    # the file itself
    code, _, err = run("convert_imageset", "-encode_type", "jpg", root, listfile, tmp_path / "jpg")
    assert code == EXIT_OK and "encode_type specified, assuming encoded=true." in _messages(err)
    for (_, value), name in zip(_lmdb_records(tmp_path / "jpg"), images):
        d = _datum(value)
        ok, buf = cv2.imencode(".jpg", cv2.imread(root + name))
        assert d.encoded and d.data == buf.tobytes()


def test_convert_imageset_skips_unreadable_images_and_keeps_line_numbers(tmp_path, image_set):
    root, listfile, images, _ = image_set
    names = list(images)
    lst = tmp_path / "holes.txt"
    lst.write_text("%s 1\nsub/missing.png 2\n%s 0\n" % (names[0], names[1]))
    code, _, err = run("convert_imageset", root, lst, tmp_path / "db")
    assert code == EXIT_OK
    assert "Could not open or find file %ssub/missing.png" % root in err and "Processed 2 files." in err
    assert [k for k, _ in _lmdb_records(tmp_path / "db")] == [b"00000000_" + names[0].encode(),
                                                              b"00000002_" + names[1].encode()]


def test_convert_imageset_shuffle_is_seedable(tmp_path, image_set):
    root, listfile, images, _ = image_set
    keys = []
    for i, seed in enumerate((7, 7, 8)):
        code, _, err = run("convert_imageset", "-shuffle", "-seed", seed, root, listfile, tmp_path / ("s%d" % i))
        assert code == EXIT_OK and _messages(err)[0] == "Shuffling data"
        keys.append([k.split(b"_", 1)[1].decode() for k, _ in _lmdb_records(tmp_path / ("s%d" % i))])
    assert sorted(keys[0]) == sorted(images) and keys[0] != list(images)
    assert keys[0] == keys[1] and keys[0] != keys[2]


def test_convert_imageset_fatal_cases(tmp_path, image_set):
    root, listfile, _, _ = image_set
    code, _, err = run("convert_imageset", "-check_size", root, listfile, tmp_path / "a")
    assert code == EXIT_ERROR and "Check failed: data.size() == data_size" in err
    assert "Incorrect data field size" in err
    (tmp_path / "exists").mkdir()
    code, _, err = run("convert_imageset", root, listfile, tmp_path / "exists")
    assert code == EXIT_ERROR and "mkdir %s failed" % (tmp_path / "exists") in err
    code, _, err = run("convert_imageset", "-backend", "rocksdb", root, listfile, tmp_path / "b")
    assert code == EXIT_ERROR and "Unknown database backend: rocksdb" in err
    code, _, err = run("convert_imageset", root, listfile)
    assert code == 2 and "DB_NAME" in err


def test_convert_imageset_leveldb_that_exists(tmp_path, image_set, leveldb_set):
    root, listfile, _, _ = image_set
    code, _, err = run("convert_imageset", "-backend", "leveldb", root, listfile, leveldb_set[0])
    assert code == EXIT_ERROR and "Failed to open leveldb %s" % leveldb_set[0] in err and "exists" in err


# =========================================================================== read back by the Data layer
@pytest.mark.parametrize("backend", ["lmdb", "leveldb"])
def test_data_layer_reads_what_convert_imageset_wrote(tmp_path, image_set, backend):
    if backend == "leveldb":
        pytest.importorskip("plyvel")
    root, listfile, images, labels = image_set
    out = tmp_path / backend
    assert run("convert_imageset", "-backend", backend, "-resize_height", 8, "-resize_width", 9,
               root, listfile, out)[0] == EXIT_OK
    net_path = write_net(tmp_path / "n.prototxt", out, "backend: %s" % backend.upper())
    net = engine.Net(net_path, engine.TEST)
    expected = np.stack([_chw(cv2.resize(cv2.imread(root + n), (9, 8), interpolation=cv2.INTER_LINEAR))
                         for n in images]).astype(np.float32) * np.float32(0.00390625)
    for batch in range(3):                      # 8 records in batches of 4: wraps after two
        net.forward()
        rows = [(4 * batch + k) % 8 for k in range(4)]
        np.testing.assert_array_equal(net.blobs["data"].data, expected[rows])
        np.testing.assert_array_equal(net.blobs["label"].data, np.asarray(labels, np.float32)[rows])
    net.layers[0].close()


def test_data_layer_default_backend_is_leveldb_and_a_mismatch_is_refused_as_caffe(tmp_path, image_set,
                                                                                  leveldb_set):
    """An LMDB named with the default backend (LEVELDB) is refused, as Caffe's LevelDB
    refuses it (found by benchmarks/fuzz_caffe.py, seed 20261207: the engine read it with a
    warning), the message saying which backend the folder holds."""
    root, listfile, _, _ = image_set
    net = engine.Net(write_net(tmp_path / "a.prototxt", leveldb_set[0]), engine.TEST)   # no backend: LEVELDB
    net.forward()
    net.layers[0].close()
    assert run("convert_imageset", "-resize_height", 8, "-resize_width", 9, root, listfile, tmp_path / "l")[0] == 0
    with pytest.raises(engine.CaffeError) as e:
        engine.Net(write_net(tmp_path / "b.prototxt", tmp_path / "l"), engine.TEST)
    assert "Check failed: status.ok() Failed to open leveldb %s" % (tmp_path / "l") in str(e.value)
    assert "(%s is an LMDB: set data_param.backend: LMDB)" % (tmp_path / "l") in str(e.value)
    net = engine.Net(write_net(tmp_path / "c.prototxt", tmp_path / "l", "backend: LMDB"), engine.TEST)
    net.forward()
    net.layers[0].close()


def test_two_nets_read_one_leveldb_at_once(tmp_path, leveldb_set):
    """LevelDB locks its directory per process: the train and test nets share one handle."""
    path = write_net(tmp_path / "n.prototxt", leveldb_set[0])
    a, b = engine.Net(path, engine.TRAIN), engine.Net(path, engine.TEST)
    a.forward()
    b.forward()
    np.testing.assert_array_equal(a.blobs["data"].data, b.blobs["data"].data)
    a.layers[0].close()
    b.forward()
    b.layers[0].close()


# =========================================================================== compute_image_mean
def _mean_by_hand(images, names):
    total = np.zeros(images[names[0]].size, np.float32)
    for n in names:
        total += _chw(images[n]).reshape(-1).astype(np.float32)
    return total / np.float32(len(names))


def test_compute_image_mean(tmp_path, image_set, leveldb_set):
    root, _, images, _ = image_set
    resized = {n: cv2.resize(img, (9, 8), interpolation=cv2.INTER_LINEAR) for n, img in images.items()}
    out = tmp_path / "mean.binaryproto"
    code, _, err = run("compute_image_mean", "-backend", "leveldb", leveldb_set[0], out)
    assert code == EXIT_OK, err
    mean = _mean_by_hand(resized, list(resized))
    blob = caffe_pb2.BlobProto()
    blob.ParseFromString(out.read_bytes())
    assert (blob.num, blob.channels, blob.height, blob.width) == (1, 3, 8, 9) and not blob.HasField("shape")
    np.testing.assert_array_equal(np.asarray(blob.data, np.float32), mean)
    channel = [np.cumsum(mean[72 * c:72 * (c + 1)], dtype=np.float32)[-1] / np.float32(72) for c in range(3)]
    assert _messages(err)[-4:] == ["Number of channels: 3"] + ["mean_value channel [%d]: %s" % (c, num(channel[c]))
                                                                for c in range(3)]
    assert "Processed 8 files." in _messages(err) and "Write to %s" % out in _messages(err)
    # The engine's Data layer subtracts it.
    net = engine.Net(write_net(tmp_path / "m.prototxt", leveldb_set[0], transform='mean_file: "%s"' % out),
                     engine.TEST)
    net.forward()
    first = _chw(resized[list(resized)[0]]).astype(np.float32)
    np.testing.assert_array_equal(net.blobs["data"].data[0],
                                  (first - mean.reshape(3, 8, 9)) * np.float32(0.00390625))
    net.layers[0].close()


def test_compute_image_mean_decodes_encoded_datums(tmp_path, image_set):
    root, listfile, images, _ = image_set
    names = list(images)[0:7:6]                # two images of one size (11 x 13)
    lst = tmp_path / "two.txt"
    lst.write_text("".join("%s 0\n" % n for n in names))
    assert run("convert_imageset", "-encoded", root, lst, tmp_path / "enc")[0] == EXIT_OK
    code, _, err = run("compute_image_mean", tmp_path / "enc")
    assert code == EXIT_OK and _messages(err)[1] == "Decoding Datum"
    assert not any(m.startswith("Write to") for m in _messages(err))
    mean = _mean_by_hand(images, names).reshape(3, -1)
    for c in range(3):
        assert "mean_value channel [%d]: %s" % (c, num(np.cumsum(mean[c], dtype=np.float32)[-1]
                                                       / np.float32(mean.shape[1]))) in _messages(err)


def test_compute_image_mean_refuses_mixed_sizes_and_empty_databases(tmp_path, image_set):
    root, listfile, _, _ = image_set
    assert run("convert_imageset", root, listfile, tmp_path / "mixed")[0] == EXIT_OK
    code, _, err = run("compute_image_mean", tmp_path / "mixed")
    assert code == EXIT_ERROR and "Check failed: size_in_datum == data_size" in err
    lmdb.open(str(tmp_path / "empty"), map_size=1 << 20).close()
    code, _, err = run("compute_image_mean", tmp_path / "empty")
    assert code == EXIT_ERROR and "the database is empty" in err


# =========================================================================== extract_features
def test_extract_features_two_blobs(tmp_path, tiny_model):
    net_path, _, weights = tiny_model
    a, b = tmp_path / "ip_feats", tmp_path / "conv_feats"
    code, _, err = run("extract_features", weights, net_path, "ip,conv", "%s,%s" % (a, b), 3, "lmdb")
    assert code == EXIT_OK, err
    # The Data layer's prefetch thread logs its wrap-around whenever it gets there, as Caffe's
    # does: where that line falls among the main thread's lines is the scheduler's choice.
    msgs = [m for m in _messages(err) if m != "Restarting data prefetching from start."]
    assert msgs[0] == "Using CPU" and "Extracting Features" in msgs
    assert msgs[-3:] == ["Extracted features of 12 query images for feature blob ip",
                         "Extracted features of 12 query images for feature blob conv",
                         "Successfully extracted the features!"]
    net = engine.Net(net_path, engine.TEST, weights=weights)
    ip, conv = [], []
    for _ in range(3):
        net.forward()
        ip.append(net.blobs["ip"].data.copy())
        conv.append(net.blobs["conv"].data.copy())
    net.layers[0].close()
    for path, arrays in ((a, ip), (b, conv)):
        records = _lmdb_records(path)
        values = np.concatenate(arrays)
        assert [k for k, _ in records] == [b"%010d" % i for i in range(12)]
        for (_, value), expected in zip(records, values):
            d = _datum(value)
            shape = expected.shape + (1,) * (3 - expected.ndim)
            assert (d.channels, d.height, d.width) == shape and not d.data and not d.HasField("label")
            np.testing.assert_array_equal(np.asarray(d.float_data, np.float32), expected.reshape(-1))


def test_extract_features_into_leveldb_read_by_the_engine(tmp_path, tiny_model):
    pytest.importorskip("plyvel")
    net_path, _, weights = tiny_model
    code, _, err = run("extract_features", weights, net_path, "ip", tmp_path / "f", 1, "leveldb", "CPU")
    assert code == EXIT_OK, err
    records = edb.read_records(str(tmp_path / "f"))
    assert len(records) == 4 and records[0][0] == b"0000000000"
    assert len(_datum(records[0][1]).float_data) == 3


def test_extract_features_checks(tmp_path, tiny_model):
    net_path, _, weights = tiny_model
    code, _, err = run("extract_features", weights, net_path, "ip,conv", tmp_path / "x", 1, "lmdb")
    assert code == EXIT_ERROR and "the number of blob names and dataset names must be equal" in err
    code, _, err = run("extract_features", weights, net_path, "fc7", tmp_path / "x", 1, "lmdb")
    assert code == EXIT_ERROR and "Unknown feature blob name fc7 in the network %s" % net_path in err
    code, _, err = run("extract_features", weights, net_path, "ip", tmp_path / "x", 1)
    assert code == 2
    from engine.core import backend
    if not backend.gpu_available():
        code, _, err = run("extract_features", weights, net_path, "ip", tmp_path / "y", 1, "lmdb", "GPU", 0)
        assert code == EXIT_ERROR and "Using GPU" in err and "Using Device_id=0" in err


# =========================================================================== upgrade tools
V1 = """name: "old"
input: "data"
input_dim: 1
input_dim: 1
input_dim: 4
input_dim: 4
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv" blobs_lr: 1 blobs_lr: 2
         convolution_param { num_output: 2 kernel_size: 3 } }
"""


def test_upgrade_net_proto_text_and_binary(tmp_path):
    from engine.core import io as eio
    src, dst = tmp_path / "v1.prototxt", tmp_path / "v2.prototxt"
    src.write_text(V1)
    code, _, err = run("upgrade_net_proto_text", src, dst)
    assert code == EXIT_OK and _messages(err)[-1] == "Wrote upgraded NetParameter text proto to %s" % dst
    p = eio.read_net_prototxt(str(dst))
    assert [l.type for l in p.layer] == ["Input", "Convolution"] and p.layer[1].param[1].lr_mult == 2
    code, _, err = run("upgrade_net_proto_text", dst, tmp_path / "v3.prototxt")
    assert code == EXIT_OK and err.splitlines()[0].startswith("E")
    assert "File already in latest proto format: %s" % dst in err
    eio.write_binary(str(tmp_path / "v1.caffemodel"), eio.parse_prototxt(V1, caffe_pb2.NetParameter))
    code, _, err = run("upgrade_net_proto_binary", tmp_path / "v1.caffemodel", tmp_path / "v2.caffemodel")
    assert code == EXIT_OK and err.splitlines()[-1].startswith("I")
    assert "Wrote upgraded NetParameter binary proto to %s" % (tmp_path / "v2.caffemodel") in err
    assert [l.name for l in eio.read_caffemodel(str(tmp_path / "v2.caffemodel")).layer] == ["input", "conv"]


def test_upgrade_solver_proto_text(tmp_path):
    from engine.core import io as eio
    src = tmp_path / "old.prototxt"
    src.write_text('net: "n.prototxt"\nbase_lr: 0.1\nsolver_type: NESTEROV\n')
    code, _, err = run("upgrade_solver_proto_text", src, tmp_path / "new.prototxt")
    assert code == EXIT_OK and "Wrote upgraded SolverParameter text proto to" in err
    assert eio.read_solver_prototxt(str(tmp_path / "new.prototxt")).type == "Nesterov"


def test_upgrade_tools_exit_2_when_the_input_does_not_parse(tmp_path):
    bad = tmp_path / "bad.prototxt"
    bad.write_text("layer { bogus: 1 }\n")
    for tool, kind in (("upgrade_net_proto_text", "text file as NetParameter"),
                       ("upgrade_solver_proto_text", "text file as SolverParameter"),
                       ("upgrade_net_proto_binary", "binary file as NetParameter")):
        code, _, err = run(tool, bad, tmp_path / "out")
        assert code == 2, tool
        assert _messages(err)[-1] == "Failed to parse input %s: %s" % (kind, bad)
        assert not (tmp_path / "out").exists()


def test_extract_features_refuses_blobs_of_more_than_four_axes(tmp_path):
    net = tmp_path / "five.prototxt"
    net.write_text('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 1 dim: 1 dim: 1 '
                   'dim: 3 } } }\nlayer { name: "r" type: "Reshape" bottom: "x" top: "y" reshape_param { '
                   'shape { dim: 2 dim: 3 } } }\n')
    weights = tmp_path / "empty.caffemodel"
    weights.write_bytes(caffe_pb2.NetParameter(name="empty").SerializeToString())
    code, _, err = run("extract_features", weights, net, "y", tmp_path / "y", 2, "lmdb")
    assert code == EXIT_OK, err
    records = _lmdb_records(tmp_path / "y")
    assert len(records) == 4 and [(_datum(v).channels, _datum(v).height) for _, v in records[:1]] == [(3, 1)]
    code, _, err = run("extract_features", weights, net, "x", tmp_path / "x", 1, "lmdb")
    assert code == EXIT_ERROR and "Cannot use legacy accessors on Blobs with > 4 axes." in err

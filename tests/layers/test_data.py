"""Data layers and the DataTransformer, after Caffe's test_data_layer.cpp,
test_data_transformer.cpp, test_image_data_layer.cpp, test_hdf5data_layer.cpp,
test_hdf5_output_layer.cpp, test_memory_data_layer.cpp and test_dummy_data_layer.cpp.
Every fixture (LMDBs, images, HDF5 files) is made in tmp_path."""
import io
import logging

import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob
from engine.core.data_transformer import DataTransformer, read_image, resize_linear
from engine.core.errors import LayerError, ShapeError
from engine.core.io import array_to_blobproto, array_to_datum, write_binary
from engine.proto import caffe_pb2
from tests.layers.helpers import empty_blobs, make_layer

lmdb = pytest.importorskip("lmdb")
h5py = pytest.importorskip("h5py")
Image = pytest.importorskip("PIL.Image")

F32 = np.float32


# --------------------------------------------------------------------------- fixtures
def _write_lmdb(path, datums):
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, d in enumerate(datums):
            txn.put(b"%08d" % i, d.SerializeToString())
    env.close()
    return str(path)


def _png_bytes(arr_hwc_rgb):
    buf = io.BytesIO()
    a = np.asarray(arr_hwc_rgb, dtype=np.uint8)
    Image.fromarray(a if a.shape[-1] != 1 else a[..., 0]).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def raw_images():
    return np.random.default_rng(0).integers(0, 256, (6, 3, 5, 4), dtype=np.uint8)


@pytest.fixture
def raw_lmdb(tmp_path, raw_images):
    return _write_lmdb(tmp_path / "raw_lmdb", [array_to_datum(a, i) for i, a in enumerate(raw_images)])


def _data_layer(source, batch=4, extra="", phase="TRAIN", name="mnist"):
    return make_layer('name: "%s" type: "Data" data_param { source: "%s" batch_size: %d backend: LMDB } %s'
                      % (name, source, batch, extra), phase=phase, dtype=F32)


# =========================================================================== Input
def test_input_one_shape_for_all_tops():
    layer = make_layer('type: "Input" input_param { shape { dim: 2 dim: 3 } }')
    top = empty_blobs(2)
    layer.SetUp([], top)
    assert top[0].shape == (2, 3) and top[1].shape == (2, 3)


def test_input_one_shape_per_top():
    layer = make_layer('type: "Input" input_param { shape { dim: 2 dim: 3 } shape { dim: 4 } }')
    top = empty_blobs(2)
    layer.SetUp([], top)
    assert top[0].shape == (2, 3) and top[1].shape == (4,)
    layer.Forward([], top)


def test_input_shape_count_mismatch():
    layer = make_layer('type: "Input" input_param { shape { dim: 2 } shape { dim: 4 } }')
    with pytest.raises(LayerError, match="Must specify 'shape' once, once per top blob, or not at all: "
                                         "3 tops vs. 2 shapes."):
        layer.SetUp([], empty_blobs(3))


# =========================================================================== DummyData
def test_dummy_data_one_top_constant():
    layer = make_layer('type: "DummyData" dummy_data_param { num: 5 channels: 3 height: 2 width: 4 }')
    top = empty_blobs(1)
    layer.SetUp([], top)
    assert top[0].shape == (5, 3, 2, 4)
    assert np.all(top[0].data == 0)
    layer.Forward([], top)
    assert np.all(top[0].data == 0)


def test_dummy_data_two_tops_constant():
    layer = make_layer('type: "DummyData" dummy_data_param { num: 5 num: 3 channels: 3 height: 2 '
                       'height: 1 width: 4 data_filler { type: "constant" value: 7 } }')
    top = empty_blobs(2)
    layer.SetUp([], top)
    assert top[0].shape == (5, 3, 2, 4) and top[1].shape == (3, 3, 1, 4)
    for _ in range(2):
        assert np.all(top[0].data == 7) and np.all(top[1].data == 7)
        layer.Forward([], top)


def test_dummy_data_constant_gaussian_constant():
    """Constant tops are filled once; a gaussian top is refilled at every Forward."""
    layer = make_layer('type: "DummyData" dummy_data_param { shape { dim: 5 dim: 3 dim: 2 dim: 4 } '
                       'shape { dim: 5 dim: 3 } shape { dim: 2 } '
                       'data_filler { type: "constant" value: 7 } '
                       'data_filler { type: "gaussian" mean: 3 std: 1 } '
                       'data_filler { type: "constant" value: 9 } }')
    top = empty_blobs(3)
    layer.SetUp([], top)
    assert np.all(top[0].data == 7) and np.all(top[2].data == 9)
    layer.Forward([], top)
    first = top[1].data.copy()
    assert abs(first.mean() - 3) < 1.5 and np.std(first) > 0
    top[0].data[...] = -1   # a constant top is not refilled
    layer.Forward([], top)
    assert not np.array_equal(top[1].data, first)
    assert np.all(top[0].data == -1) and np.all(top[2].data == 9)


def test_dummy_data_errors():
    layer = make_layer('type: "DummyData" dummy_data_param { shape { dim: 2 } num: 2 }')
    with pytest.raises(LayerError, match="Both shape and legacy fields were specified"):
        layer.SetUp([], empty_blobs(1))
    layer = make_layer('type: "DummyData" dummy_data_param { shape { dim: 2 } shape { dim: 3 } }')
    with pytest.raises(LayerError, match=r"Must specify 'shape' once, or once per top blob \(3\); "
                                         r"specified 2\."):
        layer.SetUp([], empty_blobs(3))
    layer = make_layer('type: "DummyData" dummy_data_param { shape { dim: 2 } '
                       'data_filler { type: "constant" } data_filler { type: "constant" } }')
    with pytest.raises(LayerError, match="Number of data fillers must be 0, 1 or equal to the number "
                                         "of tops: 3; you specified 2 data fillers."):
        layer.SetUp([], empty_blobs(3))


# =========================================================================== DataTransformer
def _transformer(text, phase=caffe_pb2.TRAIN, dtype=np.float64):
    from google.protobuf import text_format
    p = caffe_pb2.TransformationParameter()
    text_format.Merge(text, p)
    t = DataTransformer(p, phase, dtype)
    backend.set_random_seed(1701)
    t.init_rand()
    return t


def _unique_datum(c=2, h=4, w=5, label=0):
    return array_to_datum(np.arange(c * h * w, dtype=np.uint8).reshape(c, h, w), label)


def test_transform_empty_is_identity():
    d = _unique_datum()
    out = _transformer("").transform(d)
    np.testing.assert_array_equal(out, np.arange(40).reshape(2, 4, 5))


def test_transform_scale_and_mean_value():
    d = _unique_datum()
    out = _transformer("scale: 0.25 mean_value: 3").transform(d)
    np.testing.assert_allclose(out, (np.arange(40).reshape(2, 4, 5) - 3) * 0.25)
    out = _transformer("mean_value: 1 mean_value: 2").transform(d)
    ref = np.arange(40).reshape(2, 4, 5) - np.array([1, 2]).reshape(2, 1, 1)
    np.testing.assert_allclose(out, ref)


def test_transform_mean_values_count_must_match_channels():
    with pytest.raises(LayerError, match="Specify either 1 mean_value or as many as channels: 2"):
        _transformer("mean_value: 1 mean_value: 2 mean_value: 3").transform(_unique_datum())


def test_transform_crop_test_is_centred():
    d = _unique_datum(h=6, w=7)
    out = _transformer("crop_size: 3", phase=caffe_pb2.TEST).transform(d)
    ref = np.arange(2 * 6 * 7).reshape(2, 6, 7)[:, 1:4, 2:5]
    np.testing.assert_array_equal(out, ref)


def test_transform_crop_train_is_random_and_valid():
    d = _unique_datum(h=6, w=7)
    t = _transformer("crop_size: 3")
    src = np.arange(2 * 6 * 7).reshape(2, 6, 7)
    seen = set()
    for _ in range(50):
        out = t.transform(d)
        h_off, w_off = np.argwhere(src[0] == out[0, 0, 0])[0]
        np.testing.assert_array_equal(out, src[:, h_off:h_off + 3, w_off:w_off + 3])
        seen.add((h_off, w_off))
    assert len(seen) > 5


def test_transform_mirror():
    d = _unique_datum()
    src = np.arange(40).reshape(2, 4, 5)
    t = _transformer("mirror: true")
    flips = 0
    for _ in range(40):
        out = t.transform(d)
        if np.array_equal(out, src[:, :, ::-1]):
            flips += 1
        else:
            np.testing.assert_array_equal(out, src)
    assert 5 < flips < 35


def test_transform_crop_mirror_mean_scale_against_numpy(tmp_path):
    """(x - mean[crop]) * scale, mirrored: the mean is taken at the source position."""
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (3, 8, 9), dtype=np.uint8)
    mean = rng.uniform(0, 255, (1, 3, 8, 9)).astype(np.float32)
    mean_file = tmp_path / "mean.binaryproto"
    bp = array_to_blobproto(mean)
    write_binary(mean_file, bp)
    t = _transformer('crop_size: 5 mirror: true scale: 0.5 mean_file: "%s"' % mean_file,
                     phase=caffe_pb2.TEST, dtype=np.float32)
    d = array_to_datum(img)
    for _ in range(10):
        out = t.transform(d)
        ref = (img[:, 1:6, 2:7].astype(np.float32) - mean[0, :, 1:6, 2:7]) * np.float32(0.5)
        assert np.array_equal(out, ref) or np.array_equal(out, ref[:, :, ::-1])


def test_transform_mean_file_shape_mismatch_names_both_shapes(tmp_path):
    mean_file = tmp_path / "mean.binaryproto"
    write_binary(mean_file, array_to_blobproto(np.zeros((1, 1, 4, 5), np.float32)))
    t = _transformer('mean_file: "%s"' % mean_file)
    with pytest.raises(ShapeError) as e:
        t.transform(_unique_datum())
    msg = str(e.value)
    assert "(2 vs. 1)" in msg and "1 x 4 x 5" in msg and "2 x 4 x 5" in msg and str(mean_file) in msg


def test_transform_float_datum():
    d = caffe_pb2.Datum(channels=1, height=2, width=2)
    d.float_data.extend([0.5, -1.5, 2.0, 3.25])
    out = _transformer("scale: 2").transform(d)
    np.testing.assert_allclose(out, [[[1.0, -3.0], [4.0, 6.5]]])


def test_transform_encoded_datum_is_bgr_and_force_gray():
    rgb = np.random.default_rng(1).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    d = caffe_pb2.Datum(encoded=True, data=_png_bytes(rgb))
    out = _transformer("").transform(d)
    np.testing.assert_array_equal(out, np.transpose(rgb[:, :, ::-1], (2, 0, 1)))
    assert _transformer("").infer_blob_shape(d) == [1, 3, 4, 5]
    gray = _transformer("force_gray: true").transform(d)
    cv2 = pytest.importorskip("cv2")   # OpenCV's own grey conversion (IMREAD_GRAYSCALE), as Caffe's
    ref = cv2.imdecode(np.frombuffer(d.data, np.uint8), cv2.IMREAD_GRAYSCALE).astype(np.float64)
    np.testing.assert_array_equal(gray, ref[None])
    with pytest.raises(LayerError, match="cannot set both force_color and force_gray"):
        _transformer("force_gray: true force_color: true").transform(d)


def test_transform_blob_batch():
    x = np.arange(2 * 2 * 4 * 4, dtype=np.float64).reshape(2, 2, 4, 4)
    t = _transformer("crop_size: 2 mean_value: 1 scale: 2", phase=caffe_pb2.TEST)
    out = t.transform_blob(x.copy())
    np.testing.assert_allclose(out, (x[:, :, 1:3, 1:3] - 1) * 2)


def test_resize_linear_matches_float_bilinear():
    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    out = resize_linear(img, 5, 12)

    def taps(dst, src):
        f = (np.arange(dst) + 0.5) * src / dst - 0.5
        s = np.floor(f).astype(int)
        fx = f - s
        fx[s < 0] = 0
        s[s < 0] = 0
        fx[s >= src - 1] = 0
        s[s >= src - 1] = src - 1
        return s, np.minimum(s + 1, src - 1), fx

    ys, ys1, fy = taps(5, 7)
    xs, xs1, fx = taps(12, 9)
    a = img.astype(float)
    rows = a[:, xs] * (1 - fx)[None, :, None] + a[:, xs1] * fx[None, :, None]
    ref = rows[ys] * (1 - fy)[:, None, None] + rows[ys1] * fy[:, None, None]
    assert out.shape == (5, 12, 3)
    assert np.abs(out.astype(float) - ref).max() <= 1.0


# =========================================================================== Data (LMDB)
def test_data_reads_in_order_and_wraps(raw_lmdb, raw_images, caplog):
    layer = _data_layer(raw_lmdb, batch=4, extra="transform_param { scale: 0.5 }")
    top = empty_blobs(2, F32)
    with caplog.at_level(logging.INFO):
        layer.SetUp([], top)
        assert top[0].shape == (4, 3, 5, 4) and top[1].shape == (4,)
        expected = [[0, 1, 2, 3], [4, 5, 0, 1], [2, 3, 4, 5]]
        for labels in expected:
            layer.Forward([], top)
            np.testing.assert_array_equal(top[1].data, labels)
            np.testing.assert_array_equal(top[0].data, raw_images[labels].astype(F32) * F32(0.5))
    assert "Restarting data prefetching from start." in caplog.text
    layer.close()


def test_data_gpu_mode(raw_lmdb, raw_images, mode):
    layer = _data_layer(raw_lmdb, batch=3, extra="data_param { prefetch: 1 }")
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    layer.Forward([], top)
    np.testing.assert_array_equal(backend.to_host(top[0].get_data()), raw_images[:3])
    np.testing.assert_array_equal(backend.to_host(top[1].get_data()), [0, 1, 2])
    layer.close()


def test_data_without_label_top(raw_lmdb, raw_images):
    layer = _data_layer(raw_lmdb, batch=2)
    top = empty_blobs(1, F32)
    layer.SetUp([], top)
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, raw_images[:2])


def test_data_crop_test_phase(raw_lmdb, raw_images):
    layer = _data_layer(raw_lmdb, batch=2, extra="transform_param { crop_size: 3 }", phase="TEST")
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    assert top[0].shape == (2, 3, 3, 3)
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, raw_images[:2, :, 1:4, 0:3])


def test_data_encoded_png(tmp_path):
    rng = np.random.default_rng(2)
    rgbs = rng.integers(0, 256, (3, 6, 5, 3), dtype=np.uint8)
    datums = [caffe_pb2.Datum(encoded=True, data=_png_bytes(a), label=10 + i) for i, a in enumerate(rgbs)]
    src = _write_lmdb(tmp_path / "png_lmdb", datums)
    layer = _data_layer(src, batch=3, extra="transform_param { mean_value: 10 mean_value: 20 mean_value: 30 }")
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    assert top[0].shape == (3, 3, 6, 5)
    layer.Forward([], top)
    bgr = np.transpose(rgbs[:, :, :, ::-1], (0, 3, 1, 2)).astype(F32)
    np.testing.assert_array_equal(top[0].data, bgr - np.array([10, 20, 30], F32).reshape(1, 3, 1, 1))
    np.testing.assert_array_equal(top[1].data, [10, 11, 12])


def test_data_ignores_rand_skip_as_caffe_master(raw_lmdb):
    """Caffe 1.0 (master)'s DataLayer reads from the first record whatever rand_skip says."""
    def first_labels(extra):
        backend.set_random_seed(5)
        layer = _data_layer(raw_lmdb, batch=6, extra=extra)
        top = empty_blobs(2, F32)
        layer.SetUp([], top)
        layer.Forward([], top)
        return top[1].data.astype(int)
    np.testing.assert_array_equal(first_labels("data_param { rand_skip: 5 }"), first_labels(""))


def test_data_missing_lmdb_names_the_path(tmp_path):
    path = tmp_path / "nowhere"
    layer = _data_layer(str(path))
    with pytest.raises(LayerError, match=r"^Data layer 'mnist': cannot open LMDB at %s: "
                                         % str(path).replace("\\", "\\\\")):
        layer.SetUp([], empty_blobs(2, F32))


def test_data_empty_lmdb_names_the_path(tmp_path):
    path = tmp_path / "empty_lmdb"
    lmdb.open(str(path), map_size=1 << 20).close()
    layer = _data_layer(str(path))
    with pytest.raises(LayerError) as e:
        layer.SetUp([], empty_blobs(2, F32))
    assert str(e.value).startswith("Data layer 'mnist': cannot open LMDB at %s: " % path)
    assert "empty" in str(e.value)


def test_data_in_a_net(raw_lmdb, raw_images, tmp_path):
    from engine.core.net import Net
    model = tmp_path / "net.prototxt"
    model.write_text('layer { name: "data" type: "Data" top: "data" top: "label" '
                     'data_param { source: "%s" batch_size: 2 backend: LMDB } }' % raw_lmdb)
    net = Net(str(model), caffe_pb2.TEST)
    net.forward()
    np.testing.assert_array_equal(net.blobs["data"].data, raw_images[:2])
    np.testing.assert_array_equal(net.blobs["label"].data, [0, 1])
    net.forward()
    np.testing.assert_array_equal(net.blobs["label"].data, [2, 3])


# =========================================================================== ImageData
@pytest.fixture
def image_list(tmp_path):
    rng = np.random.default_rng(4)
    imgs = []
    lines = []
    (tmp_path / "imgs").mkdir()
    for i in range(5):
        rgb = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        Image.fromarray(rgb).save(tmp_path / "imgs" / ("im%d.png" % i))
        imgs.append(rgb)
        lines.append("im%d.png %d" % (i, i))
    src = tmp_path / "list.txt"
    src.write_text("\n".join(lines) + "\n")
    return str(src), str(tmp_path / "imgs") + "/", np.stack(imgs)


def _image_layer(src, root, extra="", batch=3, phase="TRAIN"):
    return make_layer('name: "img" type: "ImageData" image_data_param { source: "%s" root_folder: "%s" '
                      'batch_size: %d %s }' % (src, root, batch, extra), phase=phase, dtype=F32)


def test_image_data_reads_bgr_in_order(image_list):
    src, root, imgs = image_list
    layer = _image_layer(src, root)
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    assert top[0].shape == (3, 3, 6, 8) and top[1].shape == (3,)
    bgr = np.transpose(imgs[:, :, :, ::-1], (0, 3, 1, 2))
    for labels in ([0, 1, 2], [3, 4, 0]):
        layer.Forward([], top)
        np.testing.assert_array_equal(top[1].data, labels)
        np.testing.assert_array_equal(top[0].data, bgr[labels])


def test_image_data_resize_and_gray(image_list):
    src, root, imgs = image_list
    layer = _image_layer(src, root, "new_height: 4 new_width: 5 is_color: false")
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    assert top[0].shape == (3, 1, 4, 5)
    layer.Forward([], top)
    cv2 = pytest.importorskip("cv2")   # cv::imread(GRAYSCALE) then cv::resize(INTER_LINEAR), as Caffe
    gray = cv2.imread(root + "im0.png", cv2.IMREAD_GRAYSCALE)
    np.testing.assert_array_equal(top[0].data[0, 0], cv2.resize(gray, (5, 4), interpolation=cv2.INTER_LINEAR))


def test_image_data_shuffle_covers_every_image(image_list):
    src, root, _ = image_list
    backend.set_random_seed(3)
    layer = _image_layer(src, root, "shuffle: true", batch=5)
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    orders = set()
    for _ in range(4):
        layer.Forward([], top)
        labels = top[1].data.astype(int)
        assert sorted(labels) == [0, 1, 2, 3, 4]
        orders.add(tuple(labels))
    assert len(orders) > 1


def test_image_data_new_size_both_or_neither(image_list):
    src, root, _ = image_list
    with pytest.raises(LayerError, match="new_height and new_width to be set at the same time"):
        _image_layer(src, root, "new_height: 4").SetUp([], empty_blobs(2, F32))


def test_image_data_missing_image_names_the_file(tmp_path, image_list):
    src, root, _ = image_list
    bad = tmp_path / "bad.txt"
    bad.write_text("missing.png 1\n")
    with pytest.raises(LayerError, match=r"ImageData layer 'img': Could not load .*missing\.png"):
        _image_layer(str(bad), root).SetUp([], empty_blobs(2, F32))
    with pytest.raises(LayerError, match="cannot open image list .*nolist.txt"):
        _image_layer(str(tmp_path / "nolist.txt"), root).SetUp([], empty_blobs(2, F32))


def test_read_image_missing_file(tmp_path):
    with pytest.raises(LayerError, match="Could not open or find file .*nofile.png"):
        read_image(str(tmp_path / "nofile.png"))


# =========================================================================== HDF5Data
@pytest.fixture
def hdf5_files(tmp_path):
    """Two files of 10 rows each: data (10, 8, 5, 5), label (10,), label2 (10, 1)."""
    names = []
    for f in range(2):
        path = tmp_path / ("sample%d.h5" % f)
        base = f * 10
        data = np.arange(10 * 8 * 5 * 5, dtype=np.float32).reshape(10, 8, 5, 5) + base * 1000
        with h5py.File(path, "w") as h:
            h["data"] = data
            h["label"] = np.arange(base, base + 10, dtype=np.int32)
            h["label2"] = (np.arange(base, base + 10, dtype=np.float64) * 2).reshape(10, 1)
        names.append(str(path))
    src = tmp_path / "list.txt"
    src.write_text("\n".join(names) + "\n")
    return str(src)


def test_hdf5_data_reads_across_files(hdf5_files, mode):
    layer = make_layer('type: "HDF5Data" top: "data" top: "label" top: "label2" '
                       'hdf5_data_param { source: "%s" batch_size: 5 }' % hdf5_files, dtype=F32)
    top = empty_blobs(3, F32)
    layer.SetUp([], top)
    assert top[0].shape == (5, 8, 5, 5) and top[1].shape == (5,) and top[2].shape == (5, 1)
    for it in range(6):
        layer.Forward([], top)
        start = (it * 5) % 20
        labels = np.arange(start, start + 5)
        np.testing.assert_array_equal(backend.to_host(top[1].get_data()), labels)
        np.testing.assert_array_equal(backend.to_host(top[2].get_data())[:, 0], labels * 2)
        row0 = (labels[0] % 10)
        ref0 = np.arange(8 * 5 * 5, dtype=np.float32) + row0 * 200 + (labels[0] // 10) * 10000
        np.testing.assert_array_equal(backend.to_host(top[0].get_data())[0].reshape(-1), ref0)


def test_hdf5_data_shuffle(hdf5_files):
    backend.set_random_seed(2)
    layer = make_layer('type: "HDF5Data" top: "data" top: "label" '
                       'hdf5_data_param { source: "%s" batch_size: 10 shuffle: true }' % hdf5_files)
    top = empty_blobs(2)
    layer.SetUp([], top)
    seen = []
    for _ in range(2):
        layer.Forward([], top)
        labels = top[1].data.astype(int)
        assert len(set(labels // 10)) == 1            # one file at a time
        seen.extend(labels)
        # rows stay paired across datasets
        np.testing.assert_array_equal(top[0].data[:, 0, 0, 0] % 10000, (labels % 10) * 200)
    assert sorted(seen) == list(range(20))


def test_hdf5_data_errors(tmp_path, hdf5_files):
    layer = make_layer('name: "h5" type: "HDF5Data" top: "data" top: "nope" '
                       'hdf5_data_param { source: "%s" batch_size: 2 }' % hdf5_files)
    with pytest.raises(LayerError, match=r"Failed to find HDF5 dataset nope in .*sample0\.h5"):
        layer.SetUp([], empty_blobs(2))
    lst = tmp_path / "missing.txt"
    lst.write_text(str(tmp_path / "gone.h5") + "\n")
    layer = make_layer('type: "HDF5Data" top: "data" hdf5_data_param { source: "%s" batch_size: 2 }' % lst)
    with pytest.raises(LayerError, match=r"Failed opening HDF5 file: .*gone\.h5"):
        layer.SetUp([], empty_blobs(1))
    layer = make_layer('type: "HDF5Data" top: "data" hdf5_data_param { source: "%s" batch_size: 2 }'
                       % (tmp_path / "nolist.txt"))
    with pytest.raises(LayerError, match=r"Failed to open source file: .*nolist\.txt"):
        layer.SetUp([], empty_blobs(1))
    layer = make_layer('type: "HDF5Data" top: "data" transform_param { scale: 2 } '
                       'hdf5_data_param { source: "%s" batch_size: 2 }' % hdf5_files)
    with pytest.raises(LayerError, match="HDF5Data does not transform data."):
        layer.SetUp([], empty_blobs(1))


# =========================================================================== HDF5Output
def test_hdf5_output_writes_data_and_label(tmp_path, mode):
    out = tmp_path / "out.h5"
    layer = make_layer('type: "HDF5Output" bottom: "data" bottom: "label" '
                       'hdf5_output_param { file_name: "%s" }' % out, dtype=F32)
    data = Blob((4, 3, 2, 2), F32)
    data.data[...] = np.arange(48).reshape(4, 3, 2, 2)
    label = Blob((4,), F32)
    label.data[...] = [1, 2, 3, 4]
    layer.SetUp([data, label], [])
    layer.Forward([data, label], [])
    layer.close()
    with h5py.File(out, "r") as f:
        np.testing.assert_array_equal(f["data"][()], data.data)
        np.testing.assert_array_equal(f["label"][()], np.array([1, 2, 3, 4], F32).reshape(4, 1, 1, 1))
        assert f["data"].dtype == np.float32


def test_hdf5_output_batch_mismatch(tmp_path):
    layer = make_layer('type: "HDF5Output" hdf5_output_param { file_name: "%s" }' % (tmp_path / "o.h5"))
    a, b = Blob((4, 3)), Blob((3,))
    layer.SetUp([a, b], [])
    with pytest.raises(LayerError, match=r"bottom\[0\]->num\(\) == bottom\[1\]->num\(\) \(4 vs. 3\)"):
        layer.Forward([a, b], [])


# =========================================================================== MemoryData
def _memory_layer(extra="", batch=2):
    return make_layer('type: "MemoryData" memory_data_param { batch_size: %d channels: 2 height: 3 '
                      'width: 1 } %s' % (batch, extra), dtype=F32)


def test_memory_data_cycles_through_arrays(mode):
    layer = _memory_layer()
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    assert top[0].shape == (2, 2, 3, 1) and top[1].shape == (2,)
    with pytest.raises(LayerError, match="MemoryDataLayer needs to be initialized by calling Reset"):
        layer.Forward([], top)
    data = np.arange(6 * 6, dtype=F32).reshape(6, 2, 3, 1)
    labels = np.arange(6, dtype=F32)
    layer.set_input_arrays(data, labels)
    for start in (0, 2, 4, 0):
        layer.Forward([], top)
        np.testing.assert_array_equal(backend.to_host(top[0].get_data()), data[start:start + 2])
        np.testing.assert_array_equal(backend.to_host(top[1].get_data()).reshape(-1),
                                      labels[start:start + 2])
    assert top[1].shape == (2, 1, 1, 1)


def test_memory_data_uses_the_callers_memory():
    layer = _memory_layer()
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    data = np.zeros((2, 2, 3, 1), F32)
    layer.set_input_arrays(data, np.zeros(2, F32))
    data[...] = 5
    layer.Forward([], top)
    assert np.all(top[0].data == 5)


def test_memory_data_input_checks():
    layer = _memory_layer()
    layer.SetUp([], empty_blobs(2, F32))
    ok = np.zeros((4, 2, 3, 1), F32)
    with pytest.raises(LayerError, match="first dimensions of input arrays must be a multiple of batch size"):
        layer.set_input_arrays(np.zeros((3, 2, 3, 1), F32), np.zeros(3, F32))
    with pytest.raises(LayerError, match="data array has wrong number of channels"):
        layer.set_input_arrays(np.zeros((4, 3, 3, 1), F32), np.zeros(4, F32))
    with pytest.raises(LayerError, match="data array must be 4-d"):
        layer.set_input_arrays(np.zeros((4, 6), F32), np.zeros(4, F32))
    with pytest.raises(LayerError, match="data and labels must have the same first dimension"):
        layer.set_input_arrays(ok, np.zeros(2, F32))
    with pytest.raises(LayerError, match="data array must be float32"):
        layer.set_input_arrays(ok.astype(np.int32), np.zeros(4, F32))
    with pytest.raises(LayerError, match="batch_size, channels, height, and width must be specified"):
        make_layer('type: "MemoryData" memory_data_param { batch_size: 2 }').SetUp([], empty_blobs(2))


def test_memory_data_add_datum_vector_transforms():
    layer = _memory_layer("transform_param { scale: 2 }")
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    datums = [array_to_datum(np.full((2, 3, 1), i, np.uint8), label=i) for i in range(4)]
    layer.add_datum_vector(datums)
    with pytest.raises(LayerError, match="Can't add data until current data has been consumed."):
        layer.add_datum_vector(datums)
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data[:, 0, 0, 0], [0, 2])
    np.testing.assert_array_equal(top[1].data.reshape(-1), [0, 1])
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data[:, 0, 0, 0], [4, 6])
    with pytest.raises(LayerError, match="The added data must be a multiple of the batch size."):
        layer.add_datum_vector(datums[:3])


def test_memory_data_in_a_net(tmp_path):
    from engine.core.net import Net
    model = tmp_path / "net.prototxt"
    model.write_text('layer { name: "data" type: "MemoryData" top: "data" top: "label" '
                     'memory_data_param { batch_size: 2 channels: 1 height: 2 width: 2 } }')
    net = Net(str(model), caffe_pb2.TEST)
    data = np.arange(16, dtype=F32).reshape(4, 1, 2, 2)
    net.set_input_arrays(data, np.arange(4, dtype=F32))
    net.forward()
    np.testing.assert_array_equal(net.blobs["data"].data, data[:2])
    net.forward()
    np.testing.assert_array_equal(net.blobs["label"].data.reshape(-1), [2, 3])


# =========================================================================== WindowData
def test_window_data(tmp_path):
    rng = np.random.default_rng(9)
    rgb = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "w.png")
    wf = tmp_path / "windows.txt"
    wf.write_text("# 0\n%s\n3\n20\n24\n3\n"
                  "1 0.9 2 3 10 12\n"
                  "2 0.8 0 0 23 19\n"
                  "0 0.1 5 5 15 15\n" % (tmp_path / "w.png"))
    backend.set_random_seed(4)
    layer = make_layer('type: "WindowData" window_data_param { source: "%s" batch_size: 8 '
                       'fg_fraction: 0.5 context_pad: 1 } transform_param { crop_size: 6 mirror: true '
                       'mean_value: 100 }' % wf, dtype=F32)
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    assert top[0].shape == (8, 3, 6, 6) and top[1].shape == (8,)
    layer.Forward([], top)
    labels = top[1].data
    np.testing.assert_array_equal(labels[:4], 0)
    assert set(labels[4:]) <= {1, 2}
    assert np.abs(top[0].data).max() <= 155 and np.any(top[0].data != 0)
    # without context padding or mirroring a background window is the warped crop itself
    backend.set_random_seed(4)
    layer = make_layer('type: "WindowData" window_data_param { source: "%s" batch_size: 2 '
                       'fg_fraction: 0 } transform_param { crop_size: 4 }' % wf, dtype=F32)
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    layer.Forward([], top)
    bgr = rgb[:, :, ::-1]
    ref = np.transpose(resize_linear(np.ascontiguousarray(bgr[5:16, 5:16]), 4, 4), (2, 0, 1))
    np.testing.assert_array_equal(top[0].data[0], ref)


def test_window_data_missing_file(tmp_path):
    layer = make_layer('type: "WindowData" window_data_param { source: "%s" batch_size: 2 } '
                       'transform_param { crop_size: 4 }' % (tmp_path / "none.txt"))
    with pytest.raises(LayerError, match=r"Failed to open window file .*none\.txt"):
        layer.SetUp([], empty_blobs(2))

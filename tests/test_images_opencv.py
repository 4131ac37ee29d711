"""Images as Caffe's OpenCV hands them over (engine.core.images): reading and decoding
as cv::imread / cv::imdecode do, resizing as cv::resize INTER_LINEAR does, checked
against cv2 itself; the ImageData layer's resized batches; a clear error naming the
package when OpenCV is missing.  (../shared/golden holds no image-data runs of Caffe,
so OpenCV is the reference here.)"""
import sys

import numpy as np
import pytest

from engine.core import images
from engine.core.data_transformer import resize_linear
from engine.proto import caffe_pb2

cv2 = pytest.importorskip("cv2")

SIZES = [((37, 53), (24, 24)), ((100, 80), (227, 227)), ((64, 64), (32, 32)), ((30, 40), (61, 17)),
         ((256, 256), (227, 227)), ((5, 7), (5, 7)), ((1, 9), (3, 4)), ((480, 640), (240, 320))]


@pytest.mark.parametrize("src, dst", SIZES)
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_resize_is_cv2_resize_inter_linear(src, dst, channels):
    rng = np.random.default_rng(src[0] * 7 + dst[1] + channels)
    img = rng.integers(0, 256, src + (channels,), dtype=np.uint8)
    out = resize_linear(img, *dst)
    ref = cv2.resize(img, (dst[1], dst[0]), interpolation=cv2.INTER_LINEAR)
    assert out.shape == dst + (channels,)
    np.testing.assert_array_equal(out, ref.reshape(out.shape))


def test_resize_of_a_window_view_is_the_resize_of_its_copy():
    """WindowData resizes a region of the image in place (a cv::Mat ROI)."""
    img = np.random.default_rng(1).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    region = img[5:31, 7:40]
    np.testing.assert_array_equal(images.resize(region, 17, 17),
                                  cv2.resize(np.ascontiguousarray(region), (17, 17), interpolation=cv2.INTER_LINEAR))


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(2)
    bgr = rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)
    out = {"bgr": bgr}
    for name, img, params in (("color.png", bgr, []), ("color.jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90]),
                              ("gray.png", bgr[:, :, 1], []),
                              ("deep.png", (bgr.astype(np.uint16) * 257), []),
                              ("alpha.png", np.dstack([bgr, bgr[:, :, :1]]), [])):
        path = str(tmp_path / name)
        assert cv2.imwrite(path, img, params)
        out[name] = path
    return out


@pytest.mark.parametrize("name", ["color.png", "color.jpg", "gray.png", "deep.png", "alpha.png"])
@pytest.mark.parametrize("color", [True, False])
def test_imread_is_cv2_imread(files, name, color):
    got = images.imread(files[name], color)
    ref = cv2.imread(files[name], cv2.IMREAD_COLOR if color else cv2.IMREAD_GRAYSCALE)
    assert got.dtype == np.uint8 and got.shape == ref.shape[:2] + ((3,) if color else (1,))
    np.testing.assert_array_equal(got.reshape(ref.shape), ref)


def test_imread_of_a_missing_or_broken_file(tmp_path):
    with pytest.raises(images.ImageError, match="Could not open or find file .*nothere.png"):
        images.imread(str(tmp_path / "nothere.png"))
    (tmp_path / "broken.png").write_bytes(b"not an image at all")
    with pytest.raises(images.ImageError, match="Could not open or find file .*broken.png"):
        images.imread(str(tmp_path / "broken.png"))


def test_decode_native_keeps_the_files_channels(files):
    data = open(files["alpha.png"], "rb").read()
    got = images.imdecode(data, None)
    np.testing.assert_array_equal(got, cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED))
    assert got.shape[2] == 4
    datum = caffe_pb2.Datum(encoded=True, data=data, label=3)
    assert images.decode_datum_native(datum)
    assert (datum.channels, datum.height, datum.width, datum.encoded, datum.label) == (4, 9, 11, False, 3)
    assert datum.data == np.transpose(got, (2, 0, 1)).tobytes()
    assert not images.decode_datum_native(datum)


def test_read_image_to_datum_as_caffe(files):
    d = images.read_image_to_datum(files["color.png"], 5, 4, 6, True)
    ref = cv2.resize(cv2.imread(files["color.png"]), (6, 4), interpolation=cv2.INTER_LINEAR)
    assert (d.channels, d.height, d.width, d.label, d.encoded) == (3, 4, 6, 5, False)
    assert d.data == np.transpose(ref, (2, 0, 1)).tobytes()
    # encoded: the file as it is when it already has the format, size and colour asked for
    assert images.read_image_to_datum(files["color.png"], 1, encoding="png").data == \
        open(files["color.png"], "rb").read()
    # (a grey file read in colour has 3 channels, as asked: kept too)
    assert images.read_image_to_datum(files["gray.png"], 1, encoding="png").data == \
        open(files["gray.png"], "rb").read()
    # otherwise OpenCV re-encodes what it read
    d = images.read_image_to_datum(files["color.png"], 1, encoding="jpg")
    assert d.encoded and d.data == cv2.imencode(".jpg", cv2.imread(files["color.png"]))[1].tobytes()
    d = images.read_image_to_datum(files["color.png"], 1, 4, 6, False, encoding="png")
    ref = cv2.resize(cv2.imread(files["color.png"], cv2.IMREAD_GRAYSCALE), (6, 4), interpolation=cv2.INTER_LINEAR)
    assert d.data == cv2.imencode(".png", ref)[1].tobytes()
    assert images.read_image_to_datum(files["color.png"] + ".missing", 1) is None


def test_image_data_layer_resizes_as_caffe(tmp_path):
    from tests.layers.helpers import empty_blobs, make_layer
    rng = np.random.default_rng(9)
    lines = []
    for i in range(3):
        cv2.imwrite(str(tmp_path / ("i%d.png" % i)), rng.integers(0, 256, (13 + i, 17, 3), dtype=np.uint8))
        lines.append("i%d.png %d" % (i, i))
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    layer = make_layer('name: "img" type: "ImageData" image_data_param { source: "%s" root_folder: "%s/" '
                       'batch_size: 3 new_height: 10 new_width: 12 }' % (tmp_path / "list.txt", tmp_path),
                       phase="TEST", dtype=np.float32)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    layer.Forward([], top)
    for i in range(3):
        ref = cv2.resize(cv2.imread(str(tmp_path / ("i%d.png" % i))), (12, 10), interpolation=cv2.INTER_LINEAR)
        np.testing.assert_array_equal(top[0].data[i], np.transpose(ref, (2, 0, 1)).astype(np.float32))
    layer.close()


def test_without_opencv_the_error_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)
    monkeypatch.setattr(images, "_cv2", None)
    with pytest.raises(images.MissingOpenCV, match="needs OpenCV .*pip install opencv-python-headless"):
        images.resize(np.zeros((2, 2, 1), np.uint8), 3, 3)

"""caffe.io: Caffe's own test_io.py checks, the proto helpers, images (scikit-image, as
pycaffe calls it), oversample and the Transformer's setters, checks and pipeline."""
import numpy as np
import pytest
from PIL import Image

import engine
from engine.core.errors import CaffeError
from engine.proto import caffe_pb2
from engine.pycaffe import io as caffe_io

skimage_transform = pytest.importorskip("skimage.transform")


# ---------------------------------------------------------------------- protos (test_io.py)
def test_blobproto_old_format():
    blob = caffe_pb2.BlobProto()
    blob.data.extend(list(np.zeros((10, 10)).flatten()))
    blob.num, blob.channels, blob.height, blob.width = (1, 1, 10, 10)
    assert caffe_io.blobproto_to_array(blob).shape == (1, 1, 10, 10)


def test_blobproto_new_format_and_float64():
    data = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    blob = caffe_pb2.BlobProto()
    blob.data.extend(list(data.flatten()))
    blob.shape.dim.extend(list(data.shape))
    arr = caffe_io.blobproto_to_array(blob)
    assert arr.shape == data.shape and arr.dtype == np.float64      # np.array(blob.data), as pycaffe
    np.testing.assert_array_equal(arr, data)


def test_blobproto_no_shape_is_a_value_error():
    blob = caffe_pb2.BlobProto()
    blob.data.extend(list(np.zeros((10, 10)).flatten()))
    with pytest.raises(ValueError):
        caffe_io.blobproto_to_array(blob)


def test_blobproto_scalar():
    blob = caffe_pb2.BlobProto()
    blob.data.extend([123.0])
    assert caffe_io.blobproto_to_array(blob) == 123


def test_blobproto_diff_and_round_trip():
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    d = -a
    blob = caffe_io.array_to_blobproto(a, d)
    assert list(blob.shape.dim) == [2, 3, 4]
    np.testing.assert_array_equal(caffe_io.blobproto_to_array(blob), a)
    np.testing.assert_array_equal(caffe_io.blobproto_to_array(blob, return_diff=True), d)


def test_blobprotovector_round_trip():
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((1, 2, 2), np.float32)]
    data = caffe_io.arraylist_to_blobprotovector_str(arrays)
    assert isinstance(data, bytes)
    back = caffe_io.blobprotovector_str_to_arraylist(data)
    assert [b.shape for b in back] == [(2, 3), (1, 2, 2)] and back[0].dtype == np.float64
    np.testing.assert_array_equal(back[0], arrays[0])


def test_array_to_datum_label_size():
    """test_io.py's test_label_none_size: a datum without label serializes shorter."""
    d1 = caffe_io.array_to_datum(np.ones((10, 10, 3)), label=1)
    d2 = caffe_io.array_to_datum(np.ones((10, 10, 3)))
    assert len(d1.SerializeToString()) > len(d2.SerializeToString())


def test_datum_round_trips():
    u8 = np.random.default_rng(1).integers(0, 256, size=(3, 4, 5), dtype=np.uint8)
    d = caffe_io.array_to_datum(u8, label=7)
    assert (d.channels, d.height, d.width, d.label) == (3, 4, 5, 7) and d.data == u8.tobytes()
    np.testing.assert_array_equal(caffe_io.datum_to_array(d), u8)
    f = np.linspace(0, 1, 24).reshape(2, 3, 4)
    back = caffe_io.datum_to_array(caffe_io.array_to_datum(f))
    assert back.dtype == np.float64
    np.testing.assert_allclose(back, f.astype(np.float32))
    with pytest.raises(ValueError, match="Incorrect array shape."):
        caffe_io.array_to_datum(np.ones((2, 2)))


def test_io_module_holds_caffe_pb2():
    assert caffe_io.caffe_pb2 is caffe_pb2
    assert engine.io is caffe_io
    assert caffe_io.resize is skimage_transform.resize


# ---------------------------------------------------------------------- images
def _png(tmp_path, arr, name="im.png"):
    path = tmp_path / name
    Image.fromarray(arr).save(path)
    return str(path)


def test_load_image_color_grey_alpha(tmp_path):
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    im = caffe_io.load_image(_png(tmp_path, rgb))
    assert im.dtype == np.float32 and im.shape == (5, 7, 3)
    np.testing.assert_array_equal(im, rgb / np.float32(255))
    grey = rng.integers(0, 256, size=(5, 7), dtype=np.uint8)
    g3 = caffe_io.load_image(_png(tmp_path, grey, "g.png"))
    assert g3.shape == (5, 7, 3) and (g3[..., 0] == g3[..., 2]).all()
    g1 = caffe_io.load_image(_png(tmp_path, grey, "g.png"), color=False)
    assert g1.shape == (5, 7, 1)
    np.testing.assert_array_equal(g1[..., 0], grey / np.float32(255))
    rgba = rng.integers(0, 256, size=(5, 7, 4), dtype=np.uint8)
    a = caffe_io.load_image(_png(tmp_path, rgba, "a.png"))
    assert a.shape == (5, 7, 3)
    np.testing.assert_array_equal(a, rgba[..., :3] / np.float32(255))
    intensity = caffe_io.load_image(_png(tmp_path, rgb, "c.png"), color=False)
    assert intensity.shape == (5, 7, 1) and 0 <= intensity.min() and intensity.max() <= 1


def test_resize_image_is_skimage_called_as_pycaffe_calls_it():
    im = np.random.default_rng(3).uniform(-5, 20, size=(9, 11, 3)).astype(np.float32)
    out = caffe_io.resize_image(im, (4, 17))
    lo, hi = im.min(), im.max()
    expected = skimage_transform.resize((im - lo) / (hi - lo), (4, 17), order=1, mode="constant") * (hi - lo) + lo
    assert out.dtype == np.float32 and out.shape == (4, 17, 3)
    np.testing.assert_array_equal(out, expected.astype(np.float32))


def test_resize_constant_and_other_channel_counts():
    const = np.full((4, 4, 1), 2.5, np.float32)
    out = caffe_io.resize_image(const, (3, 6))
    assert out.shape == (3, 6, 1) and (out == 2.5).all()
    five = np.random.default_rng(4).standard_normal((6, 8, 5)).astype(np.float32)
    zoomed = caffe_io.resize_image(five, (3, 4))           # scipy.ndimage.zoom, as pycaffe
    from scipy.ndimage import zoom
    np.testing.assert_array_equal(zoomed, zoom(five, (0.5, 0.5, 1), order=1).astype(np.float32))
    nearest = caffe_io.resize_image(five, (12, 16), interp_order=0)
    np.testing.assert_array_equal(nearest[::2, ::2], five)


def test_oversample_corners_center_and_mirrors():
    im = np.arange(6 * 8 * 2, dtype=np.float32).reshape(6, 8, 2)
    crops = caffe_io.oversample([im, im + 1000], (4, 4))
    assert crops.shape == (20, 4, 4, 2) and crops.dtype == np.float32
    np.testing.assert_array_equal(crops[0], im[0:4, 0:4])
    np.testing.assert_array_equal(crops[1], im[0:4, 4:8])
    np.testing.assert_array_equal(crops[2], im[2:6, 0:4])
    np.testing.assert_array_equal(crops[3], im[2:6, 4:8])
    np.testing.assert_array_equal(crops[4], im[1:5, 2:6])                # centre
    for k in range(5):
        np.testing.assert_array_equal(crops[5 + k], crops[k][:, ::-1])   # mirrored
    np.testing.assert_array_equal(crops[10], im[0:4, 0:4] + 1000)


# ---------------------------------------------------------------------- Transformer
def _transformer(shape=(1, 3, 4, 5)):
    return caffe_io.Transformer({"data": shape})


def test_transformer_checks_and_messages():
    t = _transformer()
    with pytest.raises(Exception, match=r"^nope is not one of the net inputs: \{'data': \(1, 3, 4, 5\)\}$"):
        t.set_raw_scale("nope", 1)
    with pytest.raises(Exception, match="Transpose order needs to have the same number of dimensions as the input."):
        t.set_transpose("data", (1, 0))
    with pytest.raises(Exception, match="Channel swap needs to have the same number of dimensions as the input "
                                        "channels."):
        t.set_channel_swap("data", (1, 0))
    with pytest.raises(ValueError, match="Mean channels incompatible with input."):
        t.set_mean("data", np.zeros(2))
    with pytest.raises(ValueError, match="Mean shape invalid"):
        t.set_mean("data", np.zeros((1, 3, 4, 5)))
    with pytest.raises(CaffeError):
        t.preprocess("other", np.zeros((4, 5, 3)))


def test_transformer_pipeline_and_inverse():
    rng = np.random.default_rng(5)
    t = _transformer()
    t.set_transpose("data", (2, 0, 1))
    t.set_channel_swap("data", (2, 1, 0))
    t.set_raw_scale("data", 255.0)
    mean = np.array([104.0, 117.0, 123.0])
    t.set_mean("data", mean)
    t.set_input_scale("data", 0.5)
    im = rng.uniform(0, 1, size=(4, 5, 3)).astype(np.float32)
    x = t.preprocess("data", im.copy())
    expected = (im.transpose(2, 0, 1)[[2, 1, 0]] * np.float32(255) - mean[:, None, None]) * 0.5
    assert x.dtype == np.float32 and x.shape == (3, 4, 5)
    np.testing.assert_allclose(x, expected, rtol=1e-6)
    np.testing.assert_allclose(t.deprocess("data", x[None]), im, rtol=1e-5, atol=1e-6)


def test_transformer_resizes_to_the_input_size():
    t = _transformer()
    t.set_transpose("data", (2, 0, 1))
    im = np.random.default_rng(6).uniform(0, 1, size=(8, 9, 3)).astype(np.float32)
    np.testing.assert_array_equal(t.preprocess("data", im), caffe_io.resize_image(im, (4, 5)).transpose(2, 0, 1))


def test_transformer_elementwise_mean_resized_to_the_input():
    t = _transformer()
    mean = np.random.default_rng(7).uniform(90, 130, size=(3, 8, 10))
    t.set_mean("data", mean)
    m = t.mean["data"]
    assert m.shape == (3, 4, 5)
    lo, hi = mean.min(), mean.max()
    expected = caffe_io.resize_image(((mean - lo) / (hi - lo)).transpose(1, 2, 0), (4, 5)).transpose(2, 0, 1)
    np.testing.assert_allclose(m, expected * (hi - lo) + lo)
    same = np.ones((3, 4, 5))
    t.set_mean("data", same)
    assert t.mean["data"] is same


def test_transformer_scales_a_float32_image_in_place_like_pycaffe():
    """pycaffe's preprocess multiplies in place: with no resize and no copying step before
    the scaling, the caller's float32 array is scaled too."""
    t = _transformer()                     # H x W 4 x 5: no resize
    t.set_raw_scale("data", 2.0)
    im = np.ones((4, 5, 3), np.float32)
    out = t.preprocess("data", im)
    assert out is im and (im == 2).all()

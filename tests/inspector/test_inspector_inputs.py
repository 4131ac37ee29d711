"""inputs: labels, random/constant/npy arrays, Transformer-style images."""
import numpy as np
import pytest
from inspector_testlib import SIAMESE, build_loaded, data_url

from inspector.state import inputs as inp
from inspector.state import runner
from inspector.state.sessions import Session


def test_label_blobs(lenet):
    assert inp.label_blobs(lenet.graph) == {"label": 10}
    assert inp.label_blobs(build_loaded(SIAMESE).graph) == {"sim": 2}


def test_random_and_constant():
    shapes = {"data": (2, 3), "label": (2,)}
    r = inp.random_inputs(shapes, {"label": 3}, value=2.0, seed=1)
    assert r["data"].dtype == np.float32 and set(np.unique(r["label"])) <= {0, 1, 2}
    assert np.array_equal(r["data"], inp.random_inputs(shapes, {"label": 3}, 2.0, 1)["data"])
    c = inp.constant_inputs(shapes, {"label": 3}, 0.5)
    assert (c["data"] == 0.5).all() and (c["label"] == 0).all()


def test_fit_array():
    assert inp.fit_array(np.ones((3, 4)), (2, 3, 4)).shape == (2, 3, 4)
    assert inp.fit_array(np.arange(24), (2, 3, 4))[1, 2, 3] == 23
    with pytest.raises(ValueError, match="does not fit"):
        inp.fit_array(np.ones(5), (2, 3))


def test_preprocess_like_transformer():
    im = np.zeros((10, 20, 3), np.float32)
    im[..., 0] = 1.0                                   # pure red (RGB)
    x = inp.preprocess_image(im, (1, 3, 8, 8), inp.InputSettings(resize=12, mean=(10.0, 20.0, 30.0)))
    assert x.shape == (3, 8, 8)
    # channel swap (2,1,0): red ends up in channel 2 (BGR), scaled by 255, mean subtracted
    assert np.allclose(x[2], 255 - 30) and np.allclose(x[0], -10) and np.allclose(x[1], -20)
    g = inp.preprocess_image(im, (1, 1, 5, 5), inp.InputSettings(crop=False, raw_scale=1.0))
    assert g.shape == (1, 5, 5) and np.allclose(g, 1 / 3, atol=1e-5)
    mean_file = np.full((3, 8, 8), 5.0, np.float32)
    y = inp.preprocess_image(im, (1, 3, 8, 8), inp.InputSettings(crop=False), mean_file)
    assert np.allclose(y[2][:, 1:-1], 250)     # the edge columns: caffe.io.resize_image's border
    from engine.pycaffe.io import Transformer
    t = Transformer({"data": (1, 3, 8, 8)})
    t.set_transpose("data", (2, 0, 1))
    t.set_channel_swap("data", (2, 1, 0))
    t.set_raw_scale("data", 255.0)
    t.set_mean("data", mean_file)
    np.testing.assert_allclose(y, t.preprocess("data", im), rtol=1e-6)


def test_parse_helpers():
    assert inp.parse_floats("104, 117 123") == (104.0, 117.0, 123.0)
    assert inp.parse_floats("") == () and inp.parse_ints("2,1,0") == (2, 1, 0)


def _session(ld):
    return Session(id="i" * 32, loaded=ld)


def test_apply_inputs_kinds(lenet, tmp_path):
    s = _session(lenet)
    try:
        assert "random" in runner.apply_inputs(s, inp.InputSettings(kind="random", seed=3))
        lab = lenet.net.blobs["label"].data
        assert lab.min() >= 0 and lab.max() < 10 and (lab == lab.astype(int)).all()
        runner.apply_inputs(s, inp.InputSettings(kind="constant", value=0.25))
        assert (lenet.net.blobs["data"].data == 0.25).all()
        with pytest.raises(runner.RunRefused):
            runner.apply_inputs(s, inp.InputSettings(kind="npy"))
        buf = tmp_path / "x.npy"
        np.save(buf, np.full((1, 28, 28), 7.0))
        from inspector.state import loading
        loading.save_upload(s, "npy", "x.npy", data_url(buf.read_bytes(), "application/octet-stream"), 1 << 20)
        assert "x.npy into data" in runner.apply_inputs(s, inp.InputSettings(kind="npy"))
        assert (lenet.net.blobs["data"].data == 7.0).all()
        from PIL import Image
        img = tmp_path / "im.png"
        Image.fromarray(np.full((40, 30, 3), 255, np.uint8)).save(img)
        loading.save_upload(s, "image", "im.png", data_url(img.read_bytes(), "image/png"), 1 << 20)
        runner.apply_inputs(s, inp.InputSettings(kind="image", raw_scale=1.0, mean=(0.5,)))
        assert np.allclose(lenet.net.blobs["data"].data, 0.5)
    finally:
        s.close()


def test_images_are_loaded_and_resized_by_pycaffes_io(tmp_path):
    """The inspector's image input uses caffe.io's own load_image and resize_image."""
    from PIL import Image

    from engine.pycaffe import io as caffe_io
    assert inp.load_image is caffe_io.load_image
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, size=(9, 13, 3), dtype=np.uint8)
    path = tmp_path / "im.png"
    Image.fromarray(rgb).save(path)
    im = inp.load_image(str(path))
    np.testing.assert_array_equal(im, rgb.astype(np.float32) / 255)
    x = inp.preprocess_image(im, (1, 3, 6, 7), inp.InputSettings(crop=False, raw_scale=1.0, channel_swap=()))
    expected = caffe_io.resize_image(im, (6, 7)).transpose(2, 0, 1)
    np.testing.assert_array_equal(x, expected)

"""caffe.Classifier and caffe.Detector: pycaffe's image pipelines (resize, crops or
windows, Transformer, forward_all) on a small net with saved weights."""
import numpy as np
import pytest
from PIL import Image

import engine
from engine.pycaffe import Classifier, Detector
from engine.pycaffe import io as caffe_io

pytest.importorskip("skimage")

DEPLOY = """
name: "tiny"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.3 }
                      bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "deploy.prototxt"
    path.write_text(DEPLOY)
    engine.set_random_seed(11)
    net = engine.Net(str(path), engine.TEST)
    weights = tmp_path / "tiny.caffemodel"
    net.save(str(weights))
    return str(path), str(weights)


def _images(n, h=12, w=10, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 1, size=(h, w, 3)).astype(np.float32) for _ in range(n)]


def _reference(model, inputs):
    net = engine.Net(model[0], engine.TEST, weights=model[1])
    out = []
    for i in range(0, len(inputs), 4):
        batch = np.zeros((4, 3, 8, 8), np.float32)
        part = inputs[i:i + 4]
        batch[:len(part)] = part
        out.extend(net.forward(data=batch)["prob"][:len(part)].copy())
    return np.array(out)


def _preprocess(x, mean, channel_swap=(2, 1, 0), raw_scale=255.0):
    x = x.transpose(2, 0, 1)[list(channel_swap)] * np.float32(raw_scale)
    return x - mean[:, None, None]


def test_classifier_center_crop(model):
    mean = np.array([0.4, 0.5, 0.6]) * 255
    clf = Classifier(model[0], model[1], image_dims=(10, 10), mean=mean, raw_scale=255, channel_swap=(2, 1, 0))
    assert list(clf.crop_dims) == [8, 8] and clf.inputs == ["data"]
    images = _images(5)
    pred = clf.predict(images, oversample=False)
    assert pred.shape == (5, 5)
    expected_in = [_preprocess(caffe_io.resize_image(im, (10, 10))[1:9, 1:9], mean) for im in images]
    np.testing.assert_allclose(pred, _reference(model, expected_in), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(pred.sum(1), 1, rtol=1e-5)


def test_classifier_oversample_averages_ten_crops(model):
    clf = Classifier(model[0], model[1], image_dims=(10, 10), raw_scale=255)
    images = _images(2, seed=1)
    pred = clf.predict(images)
    resized = np.array([caffe_io.resize_image(im, (10, 10)) for im in images])
    crops = caffe_io.oversample(resized, (8, 8))
    ref = _reference(model, [c.transpose(2, 0, 1) * np.float32(255) for c in crops])
    np.testing.assert_allclose(pred, ref.reshape(2, 10, -1).mean(1), rtol=1e-5, atol=1e-7)


def _png(tmp_path, seed=2, h=20, w=24):
    arr = np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    path = tmp_path / ("im%d.png" % seed)
    Image.fromarray(arr).save(path)
    return str(path)


def test_detector_windows(model, tmp_path):
    det = Detector(model[0], model[1], raw_scale=255)
    assert list(det.crop_dims) == [8, 8, 3]
    path = _png(tmp_path)
    windows = [np.array([0, 0, 10, 12]), np.array([5, 6, 20, 24])]
    dets = det.detect_windows([(path, windows)])
    assert [d["filename"] for d in dets] == [path, path] and dets[1]["window"] is windows[1]
    im = caffe_io.load_image(path)
    ref = _reference(model, [caffe_io.resize_image(im[w[0]:w[2], w[1]:w[3]], (8, 8)).transpose(2, 0, 1) * 255
                             for w in windows])
    np.testing.assert_allclose(np.array([d["prediction"] for d in dets]), ref, rtol=1e-5, atol=1e-7)


def test_detector_context_pad_fills_with_the_mean(model, tmp_path):
    mean = np.array([10.0, 20.0, 30.0])
    det = Detector(model[0], model[1], mean=mean, raw_scale=255, channel_swap=(2, 1, 0), context_pad=2)
    # the mean in image space: channels back to RGB order, divided by raw_scale
    np.testing.assert_allclose(det.crop_mean[0, 0], mean[[2, 1, 0]] / 255)
    im = caffe_io.load_image(_png(tmp_path, seed=3))
    crop = det.crop(im, np.array([0, 0, 9, 9]))          # at the corner: context out of the image
    assert crop.shape == (8, 8, 3)
    np.testing.assert_allclose(crop[0, 0], mean[[2, 1, 0]] / 255, rtol=1e-6)   # padded with the mean
    inside = det.crop(im, np.array([5, 5, 14, 14]))
    assert not np.allclose(inside[0, 0], mean[[2, 1, 0]] / 255)
    dets = det.detect_windows([(_png(tmp_path, seed=3), [np.array([0, 0, 9, 9]), np.array([5, 5, 14, 14])])])
    assert len(dets) == 2 and dets[0]["prediction"].shape == (5,)

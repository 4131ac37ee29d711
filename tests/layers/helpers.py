"""Helpers shared by the layer tests: build a layer from prototxt text, make blobs."""
import numpy as np
from google.protobuf import text_format

from engine.core import backend
from engine.core.blob import Blob
from engine.core.layers import create_layer


def make_layer(text, phase="TRAIN", dtype=np.float64):
    """A layer from LayerParameter text (``type: "ReLU" relu_param {...}``)."""
    from engine.proto import caffe_pb2
    p = caffe_pb2.LayerParameter()
    text_format.Merge(text, p)
    if not p.name:
        p.name = "test_" + p.type.lower()
    if not p.HasField("phase"):
        p.phase = caffe_pb2.TRAIN if phase == "TRAIN" else caffe_pb2.TEST
    return create_layer(p, dtype=dtype)


def gaussian_blob(shape, std=1.0, mean=0.0, seed=1701, dtype=np.float64):
    """A blob filled like Caffe's GaussianFiller in the layer tests."""
    b = Blob(shape, dtype=dtype)
    rng = np.random.default_rng(seed)
    b.data[...] = rng.normal(mean, std, b.count).reshape(b.shape)
    return b


def uniform_blob(shape, lo=0.0, hi=1.0, seed=1701, dtype=np.float64):
    b = Blob(shape, dtype=dtype)
    rng = np.random.default_rng(seed)
    b.data[...] = rng.uniform(lo, hi, b.count).reshape(b.shape)
    return b


def empty_blobs(n, dtype=np.float64):
    return [Blob(dtype=dtype) for _ in range(n)]


def seed(s=1701):
    backend.set_random_seed(s)

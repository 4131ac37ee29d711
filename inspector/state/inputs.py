"""Values for a net's input blobs: random, constant, a .npy file, or an image
preprocessed like pycaffe's ``caffe.io.Transformer`` (resize, centre crop,
HWC → CHW, channel swap, raw scale, mean subtraction).  Images are loaded and
resized by pycaffe's own ``caffe.io.load_image`` / ``resize_image``
(:mod:`engine.pycaffe.io`, scikit-image).

Label-like inputs (read as the label of a loss or accuracy layer) get
integers in [0, classes): the classes are guessed from the prediction the
label is compared with, so a random LeNet batch is a valid batch.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from engine.pycaffe.io import load_image, resize_image  # noqa: F401  (load_image: the runner's)

LABEL_READERS = {"SoftmaxWithLoss", "Accuracy", "SigmoidCrossEntropyLoss", "HingeLoss",
                 "InfogainLoss", "MultinomialLogisticLoss", "ContrastiveLoss", "EuclideanLoss"}


@dataclass(frozen=True)
class InputSettings:
    kind: str = "random"             # random | constant | npy | image
    value: float = 1.0               # constant value, or the std of random values
    seed: int = 0
    classes: Optional[int] = None    # label range (None: guessed)
    resize: Optional[int] = None     # image: resize the shorter side? no: to (resize, resize) before the crop
    crop: bool = True                # image: centre crop to the blob's H x W
    channel_swap: Tuple[int, ...] = (2, 1, 0)
    raw_scale: float = 255.0
    mean: Tuple[float, ...] = ()     # per-channel mean (after raw_scale); empty: none / the mean file
    use_mean_file: bool = True


def label_blobs(graph):
    """{input blob name: classes} for net inputs used as labels."""
    inputs = set(graph.inputs)
    out = {}
    for l in graph.layers:
        if l.type not in LABEL_READERS or len(l.bottoms) < 2:
            continue
        if l.type == "EuclideanLoss":
            continue
        label_idx = 2 if l.type == "ContrastiveLoss" else 1
        if label_idx >= len(l.bottoms):
            continue
        name = _origin(graph, l.bottoms[label_idx])
        if name not in inputs:
            continue
        if l.type == "ContrastiveLoss":
            classes = 2
        else:
            pred = graph.blobs[l.bottom_ids[0]].shape
            classes = int(pred[1]) if len(pred) > 1 else 2
        out[name] = min(out.get(name, classes), classes)
    return out


def _origin(graph, blob):
    """The blob a split top copies (follows inserted splits up)."""
    for s in graph.splits:
        if blob in s.tops:
            return _origin(graph, s.blob)
    return blob


def random_inputs(shapes, labels, value=1.0, seed=0, classes=None):
    """{name: array}: N(0, value²) data, integer labels in [0, classes)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if name in labels:
            k = int(classes or labels[name] or 2)
            out[name] = rng.integers(0, max(k, 1), size=shape).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * float(value)).astype(np.float32)
    return out


def constant_inputs(shapes, labels, value=1.0):
    return {name: (np.zeros(shape, np.float32) if name in labels else
                   np.full(shape, value, np.float32)) for name, shape in shapes.items()}


def fit_array(arr, shape, what="array"):
    """``arr`` fitted to a blob ``shape``: equal shape, one item (tiled over the
    batch), or the same number of values (reshaped)."""
    arr = np.asarray(arr, dtype=np.float32)
    shape = tuple(shape)
    if arr.shape == shape:
        return arr
    if len(shape) >= 1 and arr.shape == shape[1:]:
        return np.broadcast_to(arr, shape).copy()
    if arr.size == int(np.prod(shape)):
        return arr.reshape(shape)
    raise ValueError("%s of shape %s does not fit the input blob of shape %s (give the full shape, "
                     "one batch item %s, or as many values)" % (what, arr.shape, shape, shape[1:]))


def load_npy(path):
    arr = np.load(path, allow_pickle=False)
    if not np.issubdtype(arr.dtype, np.number) and arr.dtype != np.bool_:
        raise ValueError("%s does not hold numbers (dtype %s)" % (path, arr.dtype))
    return arr


def _resized(im, h, w):
    """``im`` at h x w, as ``caffe.io.resize_image`` (unchanged when already that size)."""
    if im.shape[0] == h and im.shape[1] == w:
        return im
    return resize_image(im, (h, w))


def preprocess_image(im, shape, settings=InputSettings(), mean_file=None):
    """One image (H x W x C in [0, 1]) → C x H x W for a blob of ``shape``
    ((N,) C, H, W), as Transformer.preprocess with resize and centre crop."""
    c, h, w = (int(d) for d in shape[-3:])
    if im.shape[2] == 1 and c == 3:
        im = np.repeat(im, 3, axis=2)
    elif im.shape[2] == 3 and c == 1:
        im = im.mean(axis=2, keepdims=True)
    if settings.resize and settings.crop:
        im = _resized(im, int(settings.resize), int(settings.resize))
        if im.shape[0] < h or im.shape[1] < w:
            im = _resized(im, max(h, im.shape[0]), max(w, im.shape[1]))
        top = (im.shape[0] - h) // 2
        left = (im.shape[1] - w) // 2
        im = im[top:top + h, left:left + w]
    else:
        im = _resized(im, h, w)
    x = im.transpose(2, 0, 1).astype(np.float32)              # HWC -> CHW
    if c == 3 and settings.channel_swap and len(settings.channel_swap) == 3:
        x = x[list(settings.channel_swap)]
    x = x * np.float32(settings.raw_scale)
    if settings.mean:
        m = np.asarray(settings.mean, np.float32)
        if m.size == 1:
            x = x - m[0]
        elif m.size == c:
            x = x - m.reshape(c, 1, 1)
        else:
            raise ValueError("give 1 mean value or %d (one per channel), not %d" % (c, m.size))
    elif mean_file is not None and settings.use_mean_file:
        m = np.asarray(mean_file, np.float32)
        if m.ndim == 3 and m.shape[0] == c:
            if m.shape[1:] == (h, w):
                x = x - m
            else:   # as the classification example: the per-channel mean of the mean image
                x = x - m.mean(axis=(1, 2)).reshape(c, 1, 1)
        else:
            raise ValueError("the mean file has shape %s, the input has %d channels" % (m.shape, c))
    return x


def parse_floats(text):
    """'104, 117, 123' → (104.0, 117.0, 123.0); '' → ()."""
    if text is None:
        return ()
    parts = [p for p in str(text).replace(";", ",").replace(" ", ",").split(",") if p.strip()]
    return tuple(float(p) for p in parts)


def parse_ints(text):
    return tuple(int(float(p)) for p in parse_floats(text))

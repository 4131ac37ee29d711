"""Caffe's DataTransformer (data_transformer.cpp) and the image helpers behind it.

A transformer turns one record (a Datum, a decoded image or an array) into a
C x H x W array of the net's dtype: optional crop (random in TRAIN, centred
in TEST), optional random mirror, mean subtraction (a mean file, or one mean
value / one per channel) and scaling, in Caffe's order: ``(x - mean) * scale``.

Images are what OpenCV hands Caffe: H x W x C uint8 in BGR order (grey images
have one channel), read, decoded and resized (INTER_LINEAR) by OpenCV itself
(:mod:`engine.core.images`).

Random numbers: as in Caffe, each transformer owns a boost::mt19937
(``engine.core.rng.Stream``) seeded with ``caffe_rng_rand()`` when ``init_rand``
runs; ``Rand(n)`` is its next output modulo n, drawn in Caffe's order (mirror
coin first, then the crop offsets, height before width).
"""
import os

import numpy as np

from engine.core import images, rng
from engine.core.errors import LayerError, ShapeError
from engine.core.images import ImageError  # noqa: F401  (re-exported: the data layers catch it)
from engine.proto import caffe_pb2

TRAIN, TEST = 0, 1


# --------------------------------------------------------------------------- images

def decode_image(data, color=None, what="encoded image"):
    """cv::imdecode of ``data`` (bytes): H x W x C uint8, BGR(A) order.

    ``color``: True (IMREAD_COLOR), False (IMREAD_GRAYSCALE) or None (IMREAD_UNCHANGED)."""
    return images.imdecode(data, color, what)


def read_image(path, height=0, width=0, is_color=True):
    """ReadImageToCVMat: read ``path`` (color: 3-channel BGR, else 1-channel grey)
    and resize to height x width when both are positive."""
    return images.read_image_to_cvmat(path, height, width, is_color)


def resize_linear(img, height, width):
    """cv::resize(img, Size(width, height), INTER_LINEAR) for an H x W x C uint8 image."""
    return images.resize(img, height, width)


def datum_to_image(datum, force_color=False, force_gray=False):
    """Decode an encoded Datum as DataTransformer does (native channels unless forced)."""
    if force_color and force_gray:
        raise LayerError("cannot set both force_color and force_gray")
    if force_color or force_gray:
        return decode_image(datum.data, bool(force_color), "encoded Datum")
    return decode_image(datum.data, None, "encoded Datum")


def datum_array(datum):
    """A raw (not encoded) Datum as a C x H x W array (uint8 bytes or float32 values)."""
    shape = (datum.channels, datum.height, datum.width)
    count = shape[0] * shape[1] * shape[2]
    if len(datum.data):
        arr = np.frombuffer(datum.data, dtype=np.uint8)
    else:
        arr = np.asarray(datum.float_data, dtype=np.float32)
    if arr.size < count:
        raise ShapeError("Datum holds %d values for shape %d x %d x %d (%d)"
                         % (arr.size, shape[0], shape[1], shape[2], count))
    return arr[:count].reshape(shape)


# --------------------------------------------------------------------------- transformer

class DataTransformer:
    """DataTransformer(TransformationParameter, phase)."""

    def __init__(self, param, phase, dtype=np.float32, layer_name=None):
        p = caffe_pb2.TransformationParameter()
        p.CopyFrom(param)
        self.param = p
        self.phase = int(phase)
        self.dtype = np.dtype(dtype)
        self.layer_name = layer_name
        self._rng = None
        self.mean = None          # C x H x W array of the mean file
        self.mean_shape = None    # legacy (channels, height, width) of the mean blob
        self.mean_values = [float(v) for v in p.mean_value]
        if p.HasField("mean_file"):
            if len(p.mean_value):
                raise self._error("Cannot specify mean_file and mean_value at the same time")
            self._load_mean(p.mean_file)

    def _error(self, message, cls=LayerError):
        if self.layer_name:
            return cls("%s (layer '%s')" % (message, self.layer_name), layer=self.layer_name)
        return cls(message)

    def _load_mean(self, path):
        from engine.core.blob import Blob
        from engine.core.errors import ParseError
        from engine.core.io import read_blobproto
        from engine.core.log import layer_log
        layer_log.info("Loading mean file from: %s", path)
        try:
            proto = read_blobproto(path)
        except ParseError as e:
            raise self._error("cannot read mean file %s: %s" % (path, e)) from None
        blob = Blob(dtype=self.dtype)
        blob.from_proto(proto)
        self.mean_blob = blob
        self.mean_file = path
        self.mean_shape = (blob.channels, blob.height, blob.width)
        self.mean = blob.data.reshape(-1)[: int(np.prod(self.mean_shape))].reshape(self.mean_shape).copy()

    # ------------------------------------------------------------------ random
    def init_rand(self):
        """InitRand: its own mt19937, seeded with ``caffe_rng_rand()``, only when mirroring
        or random cropping (no draw otherwise)."""
        p = self.param
        if p.mirror or (self.phase == TRAIN and p.crop_size):
            self._rng = rng.Stream(rng.caffe_rng_rand())
        else:
            self._rng = None

    def rand(self, n):
        """Rand(n): the transformer's next raw output modulo ``n``."""
        if self._rng is None:
            self.init_rand()
        return self._rng() % n

    # ------------------------------------------------------------------ shapes
    def infer_blob_shape(self, record):
        """InferBlobShape for a Datum, an H x W x C image, or a C x H x W array (1, C, H, W)."""
        crop = self.param.crop_size
        if isinstance(record, caffe_pb2.Datum):
            if record.encoded:
                img = datum_to_image(record, self.param.force_color, self.param.force_gray)
                return self.infer_blob_shape(img)
            c, h, w = record.channels, record.height, record.width
        else:
            arr = np.asarray(record)
            if arr.ndim != 3:
                raise self._error("expected an image (H x W x C), got shape %s" % (arr.shape,))
            h, w, c = arr.shape
        if c <= 0:
            raise self._error("Check failed: datum_channels > 0 (%d vs. 0)" % c)
        if h < crop:
            raise self._error("Check failed: datum_height >= crop_size (%d vs. %d)" % (h, crop))
        if w < crop:
            raise self._error("Check failed: datum_width >= crop_size (%d vs. %d)" % (w, crop))
        return [1, c, crop or h, crop or w]

    # ------------------------------------------------------------------ transforms
    def _check_mean(self, c, h, w, what):
        if self.mean is None:
            return
        mc, mh, mw = self.mean_shape
        for name, a, b in (("channels", c, mc), ("height", h, mh), ("width", w, mw)):
            if a != b:
                raise self._error(
                    "Check failed: %s_%s == data_mean_.%s() (%d vs. %d): the mean file %s has shape "
                    "%d x %d x %d (channels x height x width) but the %s is %d x %d x %d"
                    % (what, name, name, a, b, self.mean_file, mc, mh, mw, what, c, h, w), ShapeError)

    def _mean_values_for(self, c):
        mv = self.mean_values
        if mv:
            if not (len(mv) == 1 or len(mv) == c):
                raise self._error("Specify either 1 mean_value or as many as channels: %d" % c)
            if c > 1 and len(mv) == 1:
                # Caffe replicates the single value in place.
                self.mean_values = mv = mv * c
        return mv

    def _crop_window(self, h, w):
        """``(h_off, w_off, out_h, out_w)`` of the crop: random offsets in TRAIN (drawn h
        then w), the centre in TEST; the whole H x W without ``crop_size``."""
        crop = self.param.crop_size
        if not crop:
            return 0, 0, h, w
        if self.phase == TRAIN:
            h_off = self.rand(h - crop + 1)
            return h_off, self.rand(w - crop + 1), crop, crop
        return (h - crop) // 2, (w - crop) // 2, crop, crop

    def transform_chw(self, src, what="datum"):
        """Transform one C x H x W array (a raw Datum's values, or an image as CHW).

        Returns the transformed C x H' x W' array of the transformer's dtype."""
        p = self.param
        dt = self.dtype
        c, h, w = src.shape
        crop = p.crop_size
        if c <= 0:
            raise self._error("Check failed: datum_channels > 0 (%d vs. 0)" % c)
        if h < crop or w < crop:
            raise self._error("Check failed: %s_height >= crop_size and %s_width >= crop_size "
                              "(%d x %d vs. crop_size %d)" % (what, what, h, w, crop))
        do_mirror = bool(p.mirror) and self.rand(2) != 0
        self._check_mean(c, h, w, what)
        mv = self._mean_values_for(c)
        h_off, w_off, oh, ow = self._crop_window(h, w)
        x = src[:, h_off:h_off + oh, w_off:w_off + ow].astype(dt)
        with np.errstate(all="ignore"):     # a huge scale or mean overflows to inf, as in C
            if self.mean is not None:
                x = x - self.mean[:, h_off:h_off + oh, w_off:w_off + ow].astype(dt)
            elif mv:
                x = x - np.asarray(mv, dtype=dt).reshape(c, 1, 1)
            x = x * dt.type(p.scale)
        if do_mirror:
            x = x[:, :, ::-1]
        return np.ascontiguousarray(x, dtype=dt)

    def transform_datum(self, datum):
        """Transform(const Datum&): encoded data is decoded first."""
        p = self.param
        if datum.encoded:
            img = datum_to_image(datum, p.force_color, p.force_gray)
            return self.transform_image(img)
        if p.force_color or p.force_gray:
            from engine.core.log import layer_log
            layer_log.error("force_color and force_gray only for encoded datum")
        return self.transform_chw(datum_array(datum), "datum")

    def transform_image(self, img):
        """Transform(const cv::Mat&): an H x W x C uint8 image (BGR)."""
        img = np.asarray(img)
        if img.ndim == 2:
            img = img[:, :, None]
        if img.dtype != np.uint8:
            raise self._error("Image data type must be unsigned byte")
        return self.transform_chw(np.transpose(img, (2, 0, 1)), "img")

    def transform(self, record):
        """Transform a Datum, an H x W x C uint8 image, or a list of either (stacked)."""
        if isinstance(record, caffe_pb2.Datum):
            return self.transform_datum(record)
        if isinstance(record, (list, tuple)):
            return np.stack([self.transform(r) for r in record])
        return self.transform_image(record)

    def transform_blob(self, src, dst=None):
        """Transform(Blob* input, Blob* transformed): an N x C x H x W float array.

        The mean is subtracted in place from ``src`` (as Caffe does); one mirror
        coin and one crop offset serve the whole batch.  Returns the result."""
        p = self.param
        dt = self.dtype
        x = np.asarray(src)
        n, c, h, w = x.shape
        do_mirror = bool(p.mirror) and self.rand(2) != 0
        h_off, w_off, oh, ow = self._crop_window(h, w)
        if self.mean is not None:
            self._check_mean(c, h, w, "input")
            x -= self.mean[None].astype(x.dtype)
        mv = self._mean_values_for(c)
        if mv:
            x -= np.asarray(mv, dtype=x.dtype).reshape(1, -1, 1, 1) if len(mv) > 1 else x.dtype.type(mv[0])
        out = x[:, :, h_off:h_off + oh, w_off:w_off + ow]
        if do_mirror:
            out = out[:, :, :, ::-1]
        out = out.astype(dt)
        if p.scale != 1:
            out = out * dt.type(p.scale)
        if dst is not None:
            dst[...] = out
            return dst
        return np.ascontiguousarray(out)


def resolve_path(path, base_dir=None):
    """``path`` as Caffe opens it (relative to the working directory), falling back to
    ``base_dir`` for a relative path that does not exist there."""
    if os.path.isabs(path) or os.path.exists(path) or not base_dir:
        return path
    alt = os.path.join(base_dir, path)
    return alt if os.path.exists(alt) else path

"""Images as Caffe handles them: OpenCV (opencv-python-headless) reads, decodes,
resizes and encodes, and Caffe's helpers of src/caffe/util/io.cpp move images in
and out of Datums.

An image is an H x W x C ``uint8`` array in OpenCV's channel order (BGR, BGRA;
grey images have one channel), as a ``cv::Mat`` is.  The read flags are
cv::imread's: ``COLOR`` (3 channels), ``GRAYSCALE`` (1) and ``UNCHANGED``
(the file's own channels, which is what ``cv::imdecode(data, -1)`` and
DecodeDatumNative use).

OpenCV is a requirement of the project (``opencv-python-headless`` in
requirements.txt); if it is missing every function here raises
:class:`MissingOpenCV` with the command that installs it.
"""
import os

import numpy as np

from engine.core.errors import LayerError
from engine.core.log import io_log
from engine.proto import caffe_pb2

UNCHANGED, GRAYSCALE, COLOR = -1, 0, 1

INSTALL_HINT = "pip install opencv-python-headless (a requirement of caffe-inspector: pip install -r requirements.txt)"


class ImageError(LayerError):
    """An image could not be read, decoded or encoded."""


class MissingOpenCV(ImageError):
    """OpenCV is not importable."""


_cv2 = None


def cv2():
    """The ``cv2`` module, imported on first use."""
    global _cv2
    if _cv2 is None:
        try:
            import cv2 as module
        except ImportError as e:
            raise MissingOpenCV("reading and resizing images as Caffe does needs OpenCV (%s): %s"
                                % (e, INSTALL_HINT)) from None
        _cv2 = module
    return _cv2


def _flag(color):
    """cv::imread's flag for ``color``: True (COLOR), False (GRAYSCALE), None (UNCHANGED)."""
    c = cv2()
    if color is None:
        return c.IMREAD_UNCHANGED
    return c.IMREAD_COLOR if color else c.IMREAD_GRAYSCALE


def _as_hwc(img):
    """OpenCV's 2-D grey result as H x W x 1; 8-bit images only, as Caffe's CVMatToDatum checks."""
    if img.ndim == 2:
        img = img[:, :, None]
    if img.dtype != np.uint8:
        raise ImageError("Check failed: cv_img.depth() == CV_8U Image data type must be unsigned byte "
                         "(this image holds %s values)" % img.dtype)
    return img


def imread(path, color=True):
    """cv::imread(path, flag): H x W x C uint8 in BGR order; ImageError when the file
    is missing or OpenCV cannot decode it."""
    c = cv2()
    if not os.path.isfile(path):
        raise ImageError("Could not open or find file %s" % path)
    img = c.imread(path, _flag(color))
    if img is None:
        raise ImageError("Could not open or find file %s (OpenCV cannot decode it as an image)" % path)
    return _as_hwc(img)


def imdecode(data, color=None, what="encoded image"):
    """cv::imdecode(bytes, flag): H x W x C uint8 (BGR/BGRA)."""
    c = cv2()
    buf = np.frombuffer(bytes(data), np.uint8)
    img = c.imdecode(buf, _flag(color)) if buf.size else None
    if img is None:
        raise ImageError("Could not decode %s (%d bytes)" % (what, buf.size))
    return _as_hwc(img)


def imencode(img, ext):
    """cv::imencode("." + ext, img): the encoded bytes."""
    c = cv2()
    try:
        ok, buf = c.imencode("." + ext.lstrip("."), np.ascontiguousarray(img))
    except c.error as e:
        raise ImageError("cannot encode an image as '%s': %s" % (ext, str(e).strip().splitlines()[-1])) \
            from None
    if not ok:
        raise ImageError("cannot encode an image as '%s'" % ext)
    return buf.tobytes()


def resize(img, height, width):
    """cv::resize(img, Size(width, height)) with INTER_LINEAR, Caffe's interpolation.

    ``img``: H x W x C uint8 (C of 1 kept as a channel axis)."""
    c = cv2()
    src = np.asarray(img)
    out = c.resize(src, (int(width), int(height)), interpolation=c.INTER_LINEAR)
    if out.ndim == 2:
        out = out[:, :, None]
    return out


# --------------------------------------------------------------------------- Caffe's io.cpp helpers

def read_image_to_cvmat(path, height=0, width=0, is_color=True):
    """ReadImageToCVMat: read ``path`` (3-channel BGR, or 1-channel grey) and resize it
    to height x width when both are positive."""
    img = imread(path, bool(is_color))
    if height > 0 and width > 0:
        img = resize(img, height, width)
    return img


def cvmat_to_datum(img, datum=None):
    """CVMatToDatum: the image's bytes in C x H x W order in ``datum.data`` (not encoded)."""
    img = _as_hwc(np.asarray(img))
    datum = caffe_pb2.Datum() if datum is None else datum
    h, w, ch = img.shape
    datum.channels, datum.height, datum.width = ch, h, w
    datum.ClearField("float_data")
    datum.encoded = False
    datum.data = np.ascontiguousarray(np.transpose(img, (2, 0, 1))).tobytes()
    return datum


def read_file_to_datum(path, label, datum=None):
    """ReadFileToDatum: the file's bytes as an encoded Datum."""
    datum = caffe_pb2.Datum() if datum is None else datum
    with open(path, "rb") as f:
        datum.data = f.read()
    datum.label = int(label)
    datum.encoded = True
    return datum


def _match_ext(path, encoding):
    """matchExt: does the file's extension name ``encoding`` (jpeg counts as jpg)?"""
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else path.lower()
    enc = encoding.lower()
    return ext == enc or (enc == "jpg" and ext == "jpeg")


def read_image_to_datum(path, label, height=0, width=0, is_color=True, encoding=""):
    """ReadImageToDatum: the image as a raw Datum, or encoded with ``encoding``
    ("png", "jpg", ...): the file's own bytes when it already is that format,
    at its size and colour, otherwise re-encoded by OpenCV.  Returns None (after
    Caffe's "Could not open or find file" error line) when the image cannot be read."""
    try:
        img = read_image_to_cvmat(path, height, width, is_color)
    except MissingOpenCV:
        raise
    except ImageError as e:
        io_log.error("%s", e)
        return None
    datum = caffe_pb2.Datum()
    if encoding:
        if (img.shape[2] == 3) == bool(is_color) and not height and not width and _match_ext(path, encoding):
            return read_file_to_datum(path, label, datum)
        datum.data = imencode(img, encoding)
        datum.label = int(label)
        datum.encoded = True
        return datum
    cvmat_to_datum(img, datum)
    datum.label = int(label)
    return datum


def decode_datum_native(datum):
    """DecodeDatumNative: an encoded Datum becomes a raw one (native channels), in
    place; returns whether it was encoded."""
    if not datum.encoded:
        return False
    img = imdecode(datum.data, None, "encoded Datum")
    cvmat_to_datum(img, datum)
    return True


def check_opencv():
    """Raise :class:`MissingOpenCV` now rather than on the first image."""
    cv2()


__all__ = ["COLOR", "GRAYSCALE", "UNCHANGED", "ImageError", "MissingOpenCV", "cv2", "imread",
           "imdecode", "imencode", "resize", "read_image_to_cvmat", "cvmat_to_datum", "read_file_to_datum",
           "read_image_to_datum", "decode_datum_native", "check_opencv"]

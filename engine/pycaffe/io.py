"""pycaffe's ``caffe.io``: arrays to and from Caffe's protos, image loading and
resizing, and the input :class:`Transformer`.

- ``blobproto_to_array``, ``array_to_blobproto``, ``arraylist_to_blobprotovector_str``,
  ``blobprotovector_str_to_arraylist``, ``array_to_datum``, ``datum_to_array``: the
  engine's readers (:mod:`engine.core.io`) with pycaffe's types: arrays read from a
  BlobProto are float64, as pycaffe's ``np.array(blob.data)``; a BlobProto whose values
  do not fill its shape raises ValueError (pycaffe: numpy's reshape).
- ``load_image``, ``resize_image``: through scikit-image, called as pycaffe calls it
  (``skimage.io.imread``, ``img_as_float``, ``skimage.transform.resize(order=1,
  mode='constant')``; ``scipy.ndimage.zoom`` for images of other than 1 or 3 channels),
  so the numbers are pycaffe's with the same scikit-image.
- ``oversample``: the four corners, the centre and their mirrors.
- ``Transformer``: every setter and ``preprocess``/``deprocess`` with pycaffe's checks,
  messages and order of operations (resize, transpose, channel swap, raw scale, mean,
  input scale), in-place steps included: like pycaffe, ``preprocess`` may scale the
  caller's float32 array in place when no step before the scaling copies it.
"""
import numpy as np

from engine.core import io as _io
from engine.core.errors import CaffeError, ShapeError
from engine.proto import caffe_pb2

__all__ = ["blobproto_to_array", "array_to_blobproto", "arraylist_to_blobprotovector_str",
           "blobprotovector_str_to_arraylist", "array_to_datum", "datum_to_array", "Transformer",
           "load_image", "resize_image", "oversample", "caffe_pb2"]

array_to_blobproto = _io.array_to_blobproto
arraylist_to_blobprotovector_str = _io.arraylist_to_blobprotovector_str
array_to_datum = _io.array_to_datum
datum_to_array = _io.datum_to_array

_SKIMAGE_MISSING = ("caffe.io.%s needs scikit-image, a dependency of the engine "
                    "(pip install -r requirements.txt, or pip install scikit-image)")


# ---------------------------------------------------------------------- protos
def blobproto_to_array(blob, return_diff=False):
    """A BlobProto's data (or diff, with ``return_diff``) as a float64 array of its shape
    (the legacy num/channels/height/width when any is set, else ``shape.dim``)."""
    try:
        return _io.blobproto_to_array(blob, return_diff, dtype=np.float64)
    except ShapeError as e:
        raise ValueError(str(e)) from None


def blobprotovector_str_to_arraylist(data):
    """A serialized BlobProtoVector as a list of float64 arrays."""
    try:
        return _io.blobprotovector_str_to_arraylist(data, dtype=np.float64)
    except ShapeError as e:
        raise ValueError(str(e)) from None


# ---------------------------------------------------------------------- images
def _skimage(what):
    try:
        import skimage
        import skimage.io
        import skimage.transform
    except ImportError as e:
        raise ImportError(_SKIMAGE_MISSING % what) from e
    return skimage


def load_image(filename, color=True):
    """An image as float32 in [0, 1]: H x W x 3 (RGB) with ``color``, else H x W x 1
    (intensity); grey images are repeated to 3 channels, alpha is dropped."""
    skimage = _skimage("load_image")
    img = skimage.img_as_float(skimage.io.imread(filename, as_gray=not color)).astype(np.float32)
    if img.ndim == 2:
        img = img[:, :, np.newaxis]
        if color:
            img = np.tile(img, (1, 1, 3))
    elif img.shape[2] == 4:
        img = img[:, :, :3]
    return img


def resize_image(im, new_dims, interp_order=1):
    """``im`` (H x W x K) resized to ``new_dims`` (height, width), float32: scikit-image
    (1 or 3 channels, scaled to [0, 1] and back; a constant image stays constant), else
    scipy's ``ndimage.zoom``; ``interp_order`` 1 is bilinear."""
    if im.shape[-1] == 1 or im.shape[-1] == 3:
        im_min, im_max = im.min(), im.max()
        if im_max > im_min:
            resize = _skimage("resize_image").transform.resize
            im_std = (im - im_min) / (im_max - im_min)
            resized_std = resize(im_std, new_dims, order=interp_order, mode="constant")
            resized_im = resized_std * (im_max - im_min) + im_min
        else:
            ret = np.empty((new_dims[0], new_dims[1], im.shape[-1]), dtype=np.float32)
            ret.fill(im_min)
            return ret
    else:
        from scipy.ndimage import zoom
        scale = tuple(np.array(new_dims, dtype=float) / np.array(im.shape[:2]))
        resized_im = zoom(im, scale + (1,), order=interp_order)
    return resized_im.astype(np.float32)


def oversample(images, crop_dims):
    """10 crops of each image (H x W x K): the four corners and the centre, then the
    same five mirrored; returns a float32 (10 N x h x w x K) array."""
    im_shape = np.array(images[0].shape)
    crop_dims = np.array(crop_dims)
    im_center = im_shape[:2] / 2.0
    h_indices = (0, im_shape[0] - crop_dims[0])
    w_indices = (0, im_shape[1] - crop_dims[1])
    crops_ix = np.empty((5, 4), dtype=int)
    curr = 0
    for i in h_indices:
        for j in w_indices:
            crops_ix[curr] = (i, j, i + crop_dims[0], j + crop_dims[1])
            curr += 1
    crops_ix[4] = np.tile(im_center, (1, 2)) + np.concatenate([-crop_dims / 2.0, crop_dims / 2.0])
    crops_ix = np.tile(crops_ix, (2, 1))
    crops = np.empty((10 * len(images), crop_dims[0], crop_dims[1], im_shape[-1]), dtype=np.float32)
    ix = 0
    for im in images:
        for crop in crops_ix:
            crops[ix] = im[crop[0]:crop[2], crop[1]:crop[3], :]
            ix += 1
        crops[ix - 5:ix] = crops[ix - 5:ix, :, ::-1, :]     # the last five: mirrored
    return crops


# ---------------------------------------------------------------------- Transformer
class Transformer:
    """Prepares inputs for a Net: ``Transformer({name: blob shape})``, then per input
    ``set_transpose``, ``set_channel_swap``, ``set_raw_scale``, ``set_mean``,
    ``set_input_scale``, and ``preprocess(name, H x W x K image)`` / ``deprocess``."""

    def __init__(self, inputs):
        self.inputs = inputs
        self.transpose = {}
        self.channel_swap = {}
        self.raw_scale = {}
        self.mean = {}
        self.input_scale = {}

    def __check_input(self, in_):
        if in_ not in self.inputs:
            raise CaffeError("{} is not one of the net inputs: {}".format(in_, self.inputs))

    def preprocess(self, in_, data):
        """H' x W' x K data -> K x H x W for input ``in_``: float32, resized to the input's
        H x W, transposed, channels swapped, times raw_scale, minus the mean, times
        input_scale."""
        self.__check_input(in_)
        caffe_in = data.astype(np.float32, copy=False)
        transpose = self.transpose.get(in_)
        channel_swap = self.channel_swap.get(in_)
        raw_scale = self.raw_scale.get(in_)
        mean = self.mean.get(in_)
        input_scale = self.input_scale.get(in_)
        in_dims = self.inputs[in_][2:]
        if caffe_in.shape[:2] != in_dims:
            caffe_in = resize_image(caffe_in, in_dims)
        if transpose is not None:
            caffe_in = caffe_in.transpose(transpose)
        if channel_swap is not None:
            caffe_in = caffe_in[channel_swap, :, :]
        if raw_scale is not None:
            caffe_in *= raw_scale
        if mean is not None:
            caffe_in -= mean
        if input_scale is not None:
            caffe_in *= input_scale
        return caffe_in

    def deprocess(self, in_, data):
        """The inverse of :meth:`preprocess` (without the resize), on a squeezed copy."""
        self.__check_input(in_)
        decaf_in = data.copy().squeeze()
        transpose = self.transpose.get(in_)
        channel_swap = self.channel_swap.get(in_)
        raw_scale = self.raw_scale.get(in_)
        mean = self.mean.get(in_)
        input_scale = self.input_scale.get(in_)
        if input_scale is not None:
            decaf_in /= input_scale
        if mean is not None:
            decaf_in += mean
        if raw_scale is not None:
            decaf_in /= raw_scale
        if channel_swap is not None:
            decaf_in = decaf_in[np.argsort(channel_swap), :, :]
        if transpose is not None:
            decaf_in = decaf_in.transpose(np.argsort(transpose))
        return decaf_in

    def set_transpose(self, in_, order):
        """The order of dimensions, e.g. (2, 0, 1) for H x W x C images into C x H x W."""
        self.__check_input(in_)
        if len(order) != len(self.inputs[in_]) - 1:
            raise CaffeError("Transpose order needs to have the same number of dimensions as the input.")
        self.transpose[in_] = order

    def set_channel_swap(self, in_, order):
        """The channel order after transposing, e.g. (2, 1, 0) for RGB to BGR."""
        self.__check_input(in_)
        if len(order) != self.inputs[in_][1]:
            raise CaffeError("Channel swap needs to have the same number of dimensions as the input channels.")
        self.channel_swap[in_] = order

    def set_raw_scale(self, in_, scale):
        """Scale of the raw input (before the mean), e.g. 255 for images in [0, 1]."""
        self.__check_input(in_)
        self.raw_scale[in_] = scale

    def set_mean(self, in_, mean):
        """The mean to subtract: one value per channel (a 1-d array) or a C x H x W (or
        H x W) array, resized to the input when its shape differs."""
        self.__check_input(in_)
        ms = mean.shape
        if mean.ndim == 1:
            if ms[0] != self.inputs[in_][1]:
                raise ValueError("Mean channels incompatible with input.")
            mean = mean[:, np.newaxis, np.newaxis]
        else:
            if len(ms) == 2:
                ms = (1,) + ms
            if len(ms) != 3:
                raise ValueError("Mean shape invalid")
            if ms != self.inputs[in_][1:]:
                in_shape = self.inputs[in_][1:]
                m_min, m_max = mean.min(), mean.max()
                normal_mean = (mean - m_min) / (m_max - m_min)
                mean = resize_image(normal_mean.transpose((1, 2, 0)),
                                    in_shape[1:]).transpose((2, 0, 1)) * (m_max - m_min) + m_min
        self.mean[in_] = mean

    def set_input_scale(self, in_, scale):
        """Scale applied last, after the mean is subtracted."""
        self.__check_input(in_)
        self.input_scale[in_] = scale


def __getattr__(name):
    """pycaffe's io module also holds ``skimage``, ``resize`` and ``zoom``."""
    if name == "skimage":
        return _skimage("skimage")
    if name == "resize":
        return _skimage("resize").transform.resize
    if name == "zoom":
        from scipy.ndimage import zoom
        return zoom
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

"""pycaffe's ``caffe.coord_map``: how spatial coordinates map between two tops of a
NetSpec, and ``crop`` (the Crop layer with the offsets FCN infers).

A map is ``(axis, a, b)``: an output coordinate ``y`` relates to an input coordinate
``x`` by ``y = a * x + b`` along the spatial axes from ``axis`` on (``axis`` None: a
pointwise layer, independent of axis).  Convolution, Pooling and Im2col scale by
``1/stride`` and shift by ``(pad - (k - 1) / 2) / stride`` (``k`` the dilated kernel
extent); Deconvolution scales by ``stride`` and shifts by ``(k - 1) / 2 - pad``; a Crop
shifts by ``-offset``; the layers in :data:`PASS_THROUGH_LAYERS` are the identity.
:func:`coord_map_from_to` walks back from both tops to a common ancestor, composing
maps, and returns the map from the first top's coordinates to the second's.
"""
import numpy as np

from engine.pycaffe.net_spec import layers as L

__all__ = ["PASS_THROUGH_LAYERS", "conv_params", "crop_params", "UndefinedMapException", "coord_map",
           "AxisMismatchException", "compose", "inverse", "coord_map_from_to", "crop"]

PASS_THROUGH_LAYERS = ["AbsVal", "BatchNorm", "Bias", "BNLL", "Dropout", "Eltwise", "ELU", "Log", "LRN",
                       "Exp", "MVN", "Power", "ReLU", "PReLU", "Scale", "Sigmoid", "Split", "TanH",
                       "Threshold"]


def conv_params(fn):
    """``(axis, stride, dilated kernel extent, pad)`` of a Convolution, Deconvolution,
    Im2col (``convolution_param``) or Pooling (its own fields) Function, as arrays."""
    params = fn.params.get("convolution_param", fn.params)
    axis = params.get("axis", 1)
    ks = np.array(params["kernel_size"], ndmin=1)
    dilation = np.array(params.get("dilation", 1), ndmin=1)
    legacy = {"pad_h", "pad_w", "kernel_h", "kernel_w", "stride_h", "stride_w"} & set(fn.params)
    assert len(legacy) == 0, "cropping does not support legacy _h/_w params"
    return (axis, np.array(params.get("stride", 1), ndmin=1), (ks - 1) * dilation + 1,
            np.array(params.get("pad", 0), ndmin=1))


def crop_params(fn):
    """``(axis, offset)`` of a Crop Function (axis 2 by default: N, C, H, W)."""
    params = fn.params.get("crop_param", fn.params)
    axis = params.get("axis", 2)
    offset = np.array(params.get("offset", 0), ndmin=1)
    return axis, offset


class UndefinedMapException(Exception):
    """The layer has no coordinate mapping."""


def coord_map(fn):
    """The ``(axis, scale, shift)`` map of one layer (see the module doc)."""
    if fn.type_name in ("Convolution", "Pooling", "Im2col"):
        axis, stride, ks, pad = conv_params(fn)
        return axis, 1 / stride, (pad - (ks - 1) / 2) / stride
    if fn.type_name == "Deconvolution":
        axis, stride, ks, pad = conv_params(fn)
        return axis, stride, (ks - 1) / 2 - pad
    if fn.type_name in PASS_THROUGH_LAYERS:
        return None, 1, 0
    if fn.type_name == "Crop":
        axis, offset = crop_params(fn)
        return axis - 1, 1, -offset        # axis - 1: the last non-coordinate axis
    raise UndefinedMapException


class AxisMismatchException(Exception):
    """Two maps on different axes cannot be composed."""


def compose(base_map, next_map):
    """``base_map`` then ``next_map``: the scales multiply, the further shift is scaled
    by the base scale."""
    ax1, a1, b1 = base_map
    ax2, a2, b2 = next_map
    if ax1 is None:
        ax = ax2
    elif ax2 is None or ax1 == ax2:
        ax = ax1
    else:
        raise AxisMismatchException
    return ax, a1 * a2, a1 * b2 + b1


def inverse(coord_map):
    """The inverse map (unscale, unshift): the backward mapping."""
    ax, a, b = coord_map
    return ax, 1 / a, -b / a


def _mappable_bottoms(top):
    """The bottoms a coordinate walk goes through: all of them, but only the first
    (cropped) one of a Crop (the second only gives the size)."""
    bottoms = top.fn.inputs
    if top.fn.type_name == "Crop":
        bottoms = bottoms[:1]
    return bottoms


def _maps_back_from(top):
    """{ancestor top: map from it to ``top``}, walking back through mappable layers."""
    maps = {top: (None, 1, 0)}
    frontier = {top}
    while frontier:
        t = frontier.pop()
        try:
            for bottom in _mappable_bottoms(t):
                maps[bottom] = compose(maps[t], coord_map(t.fn))
                frontier.add(bottom)
        except UndefinedMapException:
            pass
    return maps


def coord_map_from_to(top_from, top_to):
    """The map from ``top_from``'s coordinates to ``top_to``'s, through their first
    common ancestor.  RuntimeError when no spatial path joins them."""
    from_maps = _maps_back_from(top_from)
    to_maps = {top_to: (None, 1, 0)}
    frontier = {top_to}
    while frontier:
        top = frontier.pop()
        if top in from_maps:
            return compose(to_maps[top], inverse(from_maps[top]))
        try:
            for bottom in _mappable_bottoms(top):
                to_maps[bottom] = compose(to_maps[top], coord_map(top.fn))
                frontier.add(bottom)
        except UndefinedMapException:
            continue
    raise RuntimeError("Could not compute map between tops; are they connected by spatial layers?")


def crop(top_from, top_to):
    """A Crop layer cropping ``top_from`` to ``top_to``, its axis and offsets inferred
    from the coordinate map (which must be a whole, non-negative shift)."""
    ax, a, b = coord_map_from_to(top_from, top_to)
    assert (a == 1).all(), "scale mismatch on crop (a = {})".format(a)
    assert (b <= 0).all(), "cannot crop negative offset (b = {})".format(b)
    assert (np.round(b) == b).all(), "cannot crop noninteger offset (b = {})".format(b)
    return L.Crop(top_from, top_to, crop_param=dict(axis=ax + 1,    # +1: the first cropped axis
                                                     offset=list(-np.round(b).astype(int))))

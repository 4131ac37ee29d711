"""caffe.coord_map: Caffe's own test_coord_map.py checks, and the Crop offsets FCN infers."""
import numpy as np
import pytest

import engine
from engine.pycaffe import NetSpec
from engine.pycaffe import layers as L
from engine.pycaffe import params as P
from engine.pycaffe.coord_map import (
    AxisMismatchException,
    UndefinedMapException,
    compose,
    coord_map,
    coord_map_from_to,
    crop,
    inverse,
)


def coord_net_spec(ks=3, stride=1, pad=0, pool=2, dstride=2, dpad=0, nested=False):
    """conv - pool - deconv over a 100 x 100 input (and a 20 x 20 aux input); ``nested``
    puts the deconvolution's settings in convolution_param (so the spec builds a net)."""
    n = NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 1, 100, 100]))
    n.aux = L.Input(shape=dict(dim=[2, 1, 20, 20]))
    n.conv = L.Convolution(n.data, num_output=10, kernel_size=ks, stride=stride, pad=pad)
    n.pool = L.Pooling(n.conv, pool=P.Pooling.MAX, kernel_size=pool, stride=pool, pad=0)
    deconv_ks = [s * 2 for s in dstride] if isinstance(dstride, list) else dstride * 2
    settings = dict(num_output=10, kernel_size=deconv_ks, stride=dstride, pad=dpad)
    n.deconv = L.Deconvolution(n.pool, convolution_param=settings) if nested else L.Deconvolution(n.pool, **settings)
    return n


def test_conv_pool_deconv():
    n = coord_net_spec()
    ax, a, b = coord_map_from_to(n.deconv, n.data)
    assert (ax, a, b) == (1, 1, 0)                 # 2x pool, 2x deconv: identity
    n = coord_net_spec(pool=4, dstride=4)
    assert coord_map_from_to(n.deconv, n.data) == (1, 1, -1)


def test_pass_through_and_1x1_conv_are_identity():
    n = coord_net_spec()
    expected = coord_map_from_to(n.deconv, n.data)
    n.relu = L.ReLU(n.deconv)
    n.conv1x1 = L.Convolution(n.relu, num_output=10, kernel_size=1, stride=1, pad=0)
    for top in (n.relu, n.conv1x1):
        assert coord_map_from_to(top, n.data) == expected


@pytest.mark.parametrize("pad", [0, 3, 10])
def test_padding(pad):
    n = coord_net_spec()
    _, a, b = coord_map_from_to(n.deconv, n.data)
    n = coord_net_spec(pad=pad)                    # conv padding adds offset
    assert coord_map_from_to(n.deconv, n.data)[1:] == (a, b - pad)
    n = coord_net_spec(dpad=pad)                   # deconv padding subtracts it
    assert coord_map_from_to(n.deconv, n.data)[1:] == (a, b + pad)
    n = coord_net_spec(pad=pad, dpad=pad)          # both cancel
    assert coord_map_from_to(n.deconv, n.data)[1:] == (a, b)


def test_multi_bottom_layer_maps_each_bottom_alike():
    n = coord_net_spec()
    n.conv_data, n.conv_aux = L.Convolution(n.data, n.aux, ntop=2, num_output=10, kernel_size=5, stride=2, pad=0)
    assert coord_map_from_to(n.conv_data, n.data) == coord_map_from_to(n.conv_aux, n.aux)


def test_anisotropic_map_is_its_isotropic_parts():
    n3x3 = coord_net_spec(ks=3, stride=1, pad=0)
    n5x5 = coord_net_spec(ks=5, stride=2, pad=10)
    n3x5 = coord_net_spec(ks=[3, 5], stride=[1, 2], pad=[0, 10])
    ax_3, a_3, b_3 = coord_map_from_to(n3x3.deconv, n3x3.data)
    ax_5, a_5, b_5 = coord_map_from_to(n5x5.deconv, n5x5.data)
    ax_35, a_35, b_35 = coord_map_from_to(n3x5.deconv, n3x5.data)
    assert ax_3 == ax_5 == ax_35
    assert (a_3, b_3) == (a_35[0], b_35[0]) and (a_5, b_5) == (a_35[1], b_35[1])


def test_nd_conv():
    n = NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 3, 100, 100, 100]))
    n.conv = L.Convolution(n.data, num_output=10, kernel_size=[3, 3, 3], stride=[1, 1, 1], pad=[0, 1, 2])
    n.pool = L.Pooling(n.conv, pool=P.Pooling.MAX, kernel_size=2, stride=2, pad=0)
    n.deconv = L.Deconvolution(n.pool, num_output=10, kernel_size=4, stride=2, pad=0)
    ax, a, b = coord_map_from_to(n.deconv, n.data)
    assert ax == 1 and len(a) == len(b) and np.all(a == 1)
    assert b[0] - 1 == b[1] and b[1] - 1 == b[2]


@pytest.mark.parametrize("offset", [0, 4, 10])
def test_crop_of_crop(offset):
    n = coord_net_spec()
    ax, a, b = coord_map_from_to(n.deconv, n.data)
    n.crop = L.Crop(n.deconv, n.data, axis=2, offset=offset)
    assert coord_map_from_to(n.crop, n.data) == (ax, a, b + offset)


def test_crop_helper_builds_a_crop_layer(tmp_path):
    n = coord_net_spec(pad=1, nested=True)
    n.crop = crop(n.deconv, n.data)
    proto = n.to_proto()
    layer = proto.layer[-1]
    assert layer.type == "Crop" and list(layer.bottom) == ["deconv", "data"]
    assert layer.crop_param.axis == 2 and list(layer.crop_param.offset) == [1]
    path = tmp_path / "crop.prototxt"
    path.write_text(str(proto))
    net = engine.Net(str(path), engine.TEST)
    assert net.blobs["crop"].shape == net.blobs["data"].shape[:1] + (10,) + net.blobs["data"].shape[2:]


def test_unconnected_scale_mismatch_and_negative_crop_are_caught():
    n = coord_net_spec()
    n.ip = L.InnerProduct(n.deconv, num_output=10)
    with pytest.raises(RuntimeError, match="Could not compute map between tops"):
        coord_map_from_to(n.ip, n.data)
    n = coord_net_spec(pool=3, dstride=2)
    with pytest.raises(AssertionError, match="scale mismatch on crop"):
        crop(n.deconv, n.data)
    n = coord_net_spec(dpad=10)
    with pytest.raises(AssertionError, match="cannot crop negative offset"):
        crop(n.deconv, n.data)


def test_fcn_offsets():
    """FCN-8s's skips: crop offsets 5 (pool4 to 2x upscore), 9 (pool3) and 31 (the input)."""
    n = NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 3, 500, 500]))
    top = n.data
    pools = []
    for i, outputs in enumerate((64, 128, 256, 512, 512)):
        for j in range(2 if i < 2 else 3):
            top = L.Convolution(top, num_output=outputs, kernel_size=3, pad=100 if (i, j) == (0, 0) else 1)
            top = L.ReLU(top, in_place=True)
        top = L.Pooling(top, pool=P.Pooling.MAX, kernel_size=2, stride=2)
        pools.append(top)
    fc7 = L.Convolution(L.Convolution(top, num_output=8, kernel_size=7, pad=0), num_output=8, kernel_size=1, pad=0)
    up2 = L.Deconvolution(L.Convolution(fc7, num_output=21, kernel_size=1),
                          convolution_param=dict(num_output=21, kernel_size=4, stride=2))
    c4 = crop(L.Convolution(pools[3], num_output=21, kernel_size=1, pad=0), up2)
    up4 = L.Deconvolution(L.Eltwise(up2, c4), convolution_param=dict(num_output=21, kernel_size=4, stride=2))
    c3 = crop(L.Convolution(pools[2], num_output=21, kernel_size=1, pad=0), up4)
    up8 = L.Deconvolution(L.Eltwise(up4, c3), convolution_param=dict(num_output=21, kernel_size=16, stride=8))
    c = crop(up8, n.data)
    offsets = [list(f.fn.params["crop_param"]["offset"]) for f in (c4, c3, c)]
    assert offsets == [[5], [9], [31]]


def test_map_algebra():
    assert compose((None, 1, 0), (2, 0.5, 1)) == (2, 0.5, 1)
    assert compose((2, 2, 1), (None, 1, 0)) == (2, 2, 1)
    assert compose((1, 2, 1), (1, 3, 2)) == (1, 6, 5)
    with pytest.raises(AxisMismatchException):
        compose((1, 1, 0), (2, 1, 0))
    assert inverse((1, 2.0, 4.0)) == (1, 0.5, -2.0)
    with pytest.raises(UndefinedMapException):
        coord_map(L.InnerProduct(L.Input(), num_output=1).fn)
    with pytest.raises(AssertionError, match="legacy _h/_w"):
        coord_map(L.Convolution(L.Input(), kernel_size=3, pad_h=1).fn)

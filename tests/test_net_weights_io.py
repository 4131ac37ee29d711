"""Loading weights from a .caffemodel (Net.CopyTrainedLayersFrom with a path) gives the
same params as copying from the parsed NetParameter, on the fast path (blob data read
from the file's bytes, the rest upgraded without it) and on the fallbacks."""
import numpy as np
import pytest

import engine
from engine.core import io
from engine.core.weights import _split_blob_data
from engine.proto import caffe_pb2

NET = """
name: "w"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 5 dim: 5 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.5 }
                            bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
"""


def _net(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(NET)
    return engine.Net(str(path), engine.TEST)


def _params(net):
    return [b.data.copy() for blobs in net.params.values() for b in blobs]


def _assert_loads_as(path, raw, ref):
    """The caffemodel bytes ``raw``, written to ``path``, load into a fresh net as ``ref``'s params."""
    path.write_bytes(raw)
    got = _net(path.parent)
    got.copy_from(str(path))
    for x, y in zip(_params(got), _params(ref)):
        np.testing.assert_array_equal(x, y)


def _randomize(net, seed=0):
    rng = np.random.default_rng(seed)
    for blobs in net.params.values():
        for b in blobs:
            b.data[...] = rng.standard_normal(b.shape)


def _vb(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, payload):
    return _vb(num << 3 | 2) + _vb(len(payload)) + payload


def test_saved_weights_load_the_same(tmp_path):
    src = _net(tmp_path)
    _randomize(src)
    src.save(str(tmp_path / "w.caffemodel"))
    raw = (tmp_path / "w.caffemodel").read_bytes()
    assert _split_blob_data(raw) is not None                  # the fast path applies
    a = _net(tmp_path)
    a.copy_from(str(tmp_path / "w.caffemodel"))
    b = _net(tmp_path)
    b.CopyTrainedLayersFrom(io.read_caffemodel(str(tmp_path / "w.caffemodel")))
    for x, y, z in zip(_params(a), _params(b), _params(src)):
        np.testing.assert_array_equal(x, z)
        np.testing.assert_array_equal(y, z)


def test_legacy_shapes_and_split_data_runs(tmp_path):
    """Blobs with num/channels/height/width and a data field in two packed runs (which
    protobuf merges): the walk gives up and the plain parse is used."""
    ref = _net(tmp_path)
    _randomize(ref, 1)
    layers = []
    for name, blobs in ref.params.items():
        lp = caffe_pb2.LayerParameter(name=name)
        body = lp.SerializeToString()
        for k, b in enumerate(blobs):
            bp = caffe_pb2.BlobProto()
            shape = b.shape
            if name == "conv" and k == 0:                     # the legacy 4-D form
                bp.num, bp.channels, bp.height, bp.width = shape
            else:
                bp.shape.dim.extend(shape)
            vals = b.data.reshape(-1).astype("<f4").tobytes()
            if name == "ip" and k == 0:
                half = (b.count // 2) * 4
                data = _field(5, vals[:half]) + _field(5, vals[half:])
            else:
                data = _field(5, vals)
            body += _field(7, bp.SerializeToString() + data)
        layers.append(_field(100, body))
    raw = b"".join(layers)
    assert _split_blob_data(raw) is None
    _assert_loads_as(tmp_path / "m.caffemodel", raw, ref)


def test_fast_path_legacy_shape(tmp_path):
    ref = _net(tmp_path)
    _randomize(ref, 2)
    p = ref.ToProto()
    for lp in p.layer:
        if lp.name == "conv":
            bp = lp.blobs[0]
            dims = list(bp.shape.dim)
            bp.ClearField("shape")
            bp.num, bp.channels, bp.height, bp.width = dims
    raw = p.SerializeToString()
    assert _split_blob_data(raw) is not None
    _assert_loads_as(tmp_path / "l.caffemodel", raw, ref)


def test_shape_mismatch_and_corrupt_file_raise_as_before(tmp_path):
    src = _net(tmp_path)
    p = src.ToProto()
    p.layer[1].blobs[0].shape.dim[0] = 5
    (tmp_path / "bad.caffemodel").write_bytes(p.SerializeToString())
    with pytest.raises(engine.ShapeError, match="shape mismatch"):
        _net(tmp_path).copy_from(str(tmp_path / "bad.caffemodel"))
    good = src.ToProto().SerializeToString()
    (tmp_path / "cut.caffemodel").write_bytes(good[: len(good) // 2])
    with pytest.raises(engine.ParseError):
        _net(tmp_path).copy_from(str(tmp_path / "cut.caffemodel"))

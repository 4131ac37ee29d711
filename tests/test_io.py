"""engine.core.io: prototxt/caffemodel/binaryproto reading and writing, and its errors."""
import numpy as np
import pytest

from engine.core import io
from engine.core.errors import ParseError, ShapeError
from engine.proto import caffe_pb2 as pb

NET = """name: "tiny"
layer {
  name: "data"
  type: "Input"
  top: "data"
  input_param { shape { dim: 2 dim: 3 } }
}
layer {
  name: "ip"
  type: "InnerProduct"
  bottom: "data"
  top: "ip"
  inner_product_param { num_output: 4 }
}
"""


def write(tmp_path, name, content):
    p = tmp_path / name
    if isinstance(content, str):
        p.write_text(content, encoding="utf-8")
    else:
        p.write_bytes(content)
    return p


def parse_error(fn, *args):
    with pytest.raises(ParseError) as info:
        fn(*args)
    return info.value


# ---------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------

def test_read_net_prototxt(tmp_path):
    net = io.read_net_prototxt(write(tmp_path, "net.prototxt", NET))
    assert isinstance(net, pb.NetParameter)
    assert [l.name for l in net.layer] == ["data", "ip"]
    assert list(net.layer[0].input_param.shape[0].dim) == [2, 3]
    assert net.layer[1].inner_product_param.num_output == 4


def test_syntax_error_has_file_line_column(tmp_path):
    p = write(tmp_path, "bad.prototxt", NET.replace('top: "ip"\n', 'top: "ip"\n  {\n'))
    err = parse_error(io.read_net_prototxt, p)
    assert (err.path, err.line, err.column) == (str(p), 13, 3)
    assert str(err).startswith("%s:13:3: " % p)
    assert "caffe.NetParameter" in str(err)


def test_unknown_field_has_file_line_column(tmp_path):
    p = write(tmp_path, "bad.prototxt", NET.replace('  top: "data"\n', '  top: "data"\n  tops: "x"\n'))
    err = parse_error(io.read_net_prototxt, p)
    assert (err.line, err.column) == (6, 3)
    assert 'no field named "tops"' in str(err)
    assert str(err).startswith("%s:6:3: " % p)


def test_unknown_enum_value_has_file_line_column(tmp_path):
    text = 'layer {\n  name: "p"\n  type: "Pooling"\n  pooling_param {\n    pool: MEDIAN\n  }\n}\n'
    p = write(tmp_path, "bad.prototxt", text)
    err = parse_error(io.read_net_prototxt, p)
    assert (err.path, err.line, err.column) == (str(p), 5, 11)
    assert "MEDIAN" in str(err)


def test_wrong_value_type_and_range(tmp_path):
    err = parse_error(io.parse_prototxt, "force_backward: maybe", pb.NetParameter, "n.prototxt")
    assert (err.path, err.line) == ("n.prototxt", 1)
    err = parse_error(io.parse_prototxt,
                      "layer {\n convolution_param { num_output: -1 } }", pb.NetParameter)
    assert err.line == 2 and err.path is None


def test_singular_field_twice_is_an_error():
    # Caffe parses with TextFormat::Parse, which forbids overwriting a singular field.
    err = parse_error(io.parse_prototxt, 'name: "a"\nname: "b"\n', pb.NetParameter, "n")
    assert err.line == 2 and err.column is not None
    assert 'multiple "name" fields' in str(err)


def test_missing_required_field():
    err = parse_error(io.parse_prototxt, 'layer { clip_param { min: 0 } }',
                      pb.NetParameter, "clip.prototxt")
    assert "missing required fields" in str(err)
    assert "layer[0].clip_param.max" in str(err)
    net = io.parse_prototxt('layer { clip_param { min: 0 max: 6 } }', pb.NetParameter)
    assert net.layer[0].clip_param.max == 6


def test_invalid_utf8_has_position():
    err = parse_error(io.parse_prototxt, b'name: "x"\n  \xff', pb.NetParameter, "u.prototxt")
    assert (err.line, err.column) == (2, 3)


def test_missing_file_names_the_file(tmp_path):
    p = tmp_path / "nowhere.prototxt"
    err = parse_error(io.read_net_prototxt, p)
    assert err.path == str(p)
    assert "File not found" in str(err) and str(p) in str(err)
    err = parse_error(io.read_caffemodel, tmp_path / "nowhere.caffemodel")
    assert "nowhere.caffemodel" in str(err)


def test_read_solver_prototxt(tmp_path):
    text = ('net: "train_val.prototxt"\ntest_iter: 100\ntest_interval: 500\nbase_lr: 0.01\n'
            'lr_policy: "step"\nstepsize: 100\nsolver_mode: CPU\ntype: "Adam"\n')
    s = io.read_solver_prototxt(write(tmp_path, "solver.prototxt", text))
    assert s.net == "train_val.prototxt" and list(s.test_iter) == [100]
    assert s.base_lr == pytest.approx(0.01) and s.solver_mode == pb.SolverParameter.CPU
    assert s.type == "Adam" and s.momentum2 == pytest.approx(0.999)


def test_write_prototxt_round_trip(tmp_path):
    net = io.parse_prototxt(NET, pb.NetParameter)
    p = tmp_path / "out.prototxt"
    io.write_prototxt(p, net)
    assert io.read_net_prototxt(p) == net


# ---------------------------------------------------------------------------
# Binary
# ---------------------------------------------------------------------------

def _caffemodel(tmp_path):
    net = io.parse_prototxt(NET, pb.NetParameter)
    net.layer[1].blobs.add().CopyFrom(io.array_to_blobproto(np.arange(12.0).reshape(4, 3)))
    net.layer[1].blobs.add().CopyFrom(io.array_to_blobproto(np.ones(4)))
    p = tmp_path / "tiny.caffemodel"
    io.write_binary(p, net)
    return p, net


def test_caffemodel_round_trip(tmp_path):
    p, net = _caffemodel(tmp_path)
    back = io.read_caffemodel(p)
    assert back == net
    w = io.blobproto_to_array(back.layer[1].blobs[0])
    np.testing.assert_array_equal(w, np.arange(12.0, dtype=np.float32).reshape(4, 3))


@pytest.mark.parametrize("keep", [1, 5, 0.5, -1])
def test_truncated_caffemodel_names_the_file(tmp_path, keep):
    p, _ = _caffemodel(tmp_path)
    data = p.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else (keep if keep > 0 else len(data) + keep)
    t = write(tmp_path, "cut.caffemodel", data[:cut])
    err = parse_error(io.read_caffemodel, t)
    assert err.path == str(t)
    assert str(err).startswith(str(t) + ": ")
    assert "truncated or not a NetParameter (caffemodel)" in str(err)


def test_text_file_read_as_caffemodel(tmp_path):
    p = write(tmp_path, "net.caffemodel", NET)
    err = parse_error(io.read_caffemodel, p)
    assert "not a NetParameter (caffemodel)" in str(err)


def test_bytes_that_decode_to_nothing_known_are_rejected():
    # Field 15 (unknown to NetParameter) as a varint: valid wire format, no known field.
    err = parse_error(io.parse_binary, b"\x78\x01", pb.NetParameter, "x.caffemodel")
    assert "no known caffe.NetParameter field" in str(err)
    assert io.parse_binary(b"", pb.NetParameter) == pb.NetParameter()


def test_binary_missing_required_field():
    lp = pb.LayerParameter()
    lp.clip_param.min = 0
    err = parse_error(io.parse_binary, lp.SerializePartialToString(), pb.LayerParameter, "c")
    assert "clip_param.max" in str(err)


def test_read_text_or_binary(tmp_path):
    p, net = _caffemodel(tmp_path)
    assert io.read_text_or_binary(p, pb.NetParameter) == net
    text = io.parse_prototxt(NET, pb.NetParameter)
    assert io.read_text_or_binary(write(tmp_path, "n.prototxt", NET), pb.NetParameter) == text
    # No known extension: the content decides.
    assert io.read_text_or_binary(write(tmp_path, "net_def", NET), pb.NetParameter) == text
    assert io.read_text_or_binary(write(tmp_path, "weights", p.read_bytes()),
                                  pb.NetParameter) == net
    err = parse_error(io.read_text_or_binary, write(tmp_path, "broken", NET + "layer {"),
                      pb.NetParameter)
    assert err.line is not None  # reported as the text error it looks like


# ---------------------------------------------------------------------------
# BlobProto and Datum helpers
# ---------------------------------------------------------------------------

def test_binaryproto_round_trip(tmp_path):
    mean = np.random.default_rng(0).random((3, 5, 4)).astype(np.float32)
    diff = -mean
    p = tmp_path / "mean.binaryproto"
    io.write_binary(p, io.array_to_blobproto(mean, diff))
    bp = io.read_blobproto(p)
    assert list(bp.shape.dim) == [3, 5, 4]
    got = io.blobproto_to_array(bp)
    assert got.dtype == np.float32 and got.shape == (3, 5, 4)
    np.testing.assert_array_equal(got, mean)
    np.testing.assert_array_equal(io.blobproto_to_array(bp, return_diff=True), diff)


def test_blobproto_legacy_shape_and_double_data():
    bp = pb.BlobProto(num=1, channels=2, height=1, width=3)
    bp.double_data.extend([0.5, 1, 2, 3, 4, 5])
    bp.data.extend([9] * 6)  # ignored: double_data wins, as in Blob::FromProto
    arr = io.blobproto_to_array(bp)
    assert arr.shape == (1, 2, 1, 3) and arr.dtype == np.float32
    np.testing.assert_array_equal(arr.ravel(), [0.5, 1, 2, 3, 4, 5])
    assert io.blobproto_to_array(bp, dtype=np.float64).dtype == np.float64


def test_blobproto_count_mismatch():
    bp = pb.BlobProto()
    bp.shape.dim.extend([2, 2])
    bp.data.extend([1, 2, 3])
    with pytest.raises(ShapeError, match="4 vs. 3"):
        io.blobproto_to_array(bp)


def test_blobprotovector_helpers():
    arrays = [np.zeros((2, 2), np.float32), np.arange(3, dtype=np.float32)]
    back = io.blobprotovector_str_to_arraylist(io.arraylist_to_blobprotovector_str(arrays))
    assert len(back) == 2
    for a, b in zip(arrays, back):
        np.testing.assert_array_equal(a, b)


def test_datum_round_trip_uint8(tmp_path):
    img = np.random.default_rng(1).integers(0, 256, (3, 4, 5), dtype=np.uint8)
    datum = io.array_to_datum(img, label=7)
    assert (datum.channels, datum.height, datum.width, datum.label) == (3, 4, 5, 7)
    assert datum.data == img.tobytes() and len(datum.float_data) == 0
    back = io.datum_to_array(pb.Datum.FromString(datum.SerializeToString()))
    assert back.dtype == np.uint8 and back.flags.writeable
    np.testing.assert_array_equal(back, img)


def test_datum_round_trip_float():
    arr = np.linspace(-1, 1, 24).reshape(2, 3, 4)
    datum = io.array_to_datum(arr)
    assert not datum.HasField("label") and datum.data == b""
    back = io.datum_to_array(datum)
    np.testing.assert_allclose(back, arr, rtol=1e-6)


def test_datum_errors():
    with pytest.raises(ValueError, match="Incorrect array shape"):
        io.array_to_datum(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="encoded"):
        io.datum_to_array(pb.Datum(channels=3, height=1, width=1, data=b"\xff\xd8\xff",
                                   encoded=True))

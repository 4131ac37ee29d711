"""Structure-only nets (engine.core.standins): data layers whose source is missing are
stood in by Input layers shaped from their params; Caffe's behaviour stays the default."""
import io
import os

import numpy as np
import pytest

import engine
from engine.core.io import array_to_blobproto
from engine.core.standins import missing_source, parse_shapes, stand_in_data
from engine.proto import caffe_pb2
from engine.tools.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main

TRAIN_VAL = """name: "TV"
layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TRAIN }
        transform_param { crop_size: 27 mean_file: "%(mean)s" mirror: true }
        data_param { source: "%(missing)s/train_lmdb" batch_size: 8 backend: LMDB } }
layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TEST }
        transform_param { crop_size: 27 mean_value: 104 mean_value: 117 mean_value: 123 }
        data_param { source: "%(missing)s/val_lmdb" batch_size: 2 backend: LMDB } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 stride: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "fc" type: "InnerProduct" bottom: "conv" top: "fc"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "acc" type: "Accuracy" bottom: "fc" bottom: "label" top: "acc" include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""


@pytest.fixture
def train_val(tmp_path):
    mean = tmp_path / "mean.binaryproto"
    mean.write_bytes(array_to_blobproto(np.zeros((1, 1, 32, 32), np.float32)).SerializeToString())
    path = tmp_path / "train_val.prototxt"
    path.write_text(TRAIN_VAL % {"mean": mean, "missing": tmp_path / "nowhere"})
    return path


def test_caffe_behaviour_stays_the_default(train_val):
    with pytest.raises(engine.CaffeError):
        engine.Net(str(train_val), engine.TRAIN)


def test_train_and_test_open_with_shapes_from_the_params(train_val):
    net = engine.Net(str(train_val), engine.TRAIN, structure_only=True)
    (s,) = net.init_record.stand_ins
    assert (s.layer, s.type, s.field, s.reason) == ("data", "Data", "data_param.source", "not found")
    assert s.source.endswith("nowhere/train_lmdb")
    # 1 channel from the mean file, 27 x 27 from crop_size, 8 from batch_size: nothing assumed
    assert net.blobs["data"].shape == (8, 1, 27, 27) and net.blobs["label"].shape == (8,)
    assert not s.assumed and "1 channel (the mean file" in s.tops[0].describe()
    assert net.inputs == ["data", "label"] and [l.type for l in net.layers][0] == "Input"
    assert len(net.init_record.filtered) == 2            # the TEST data layer and the accuracy
    assert any("Structure only: layer 'data' (Data)" in m for _lvl, m in net.init_record.transcript)
    # it steps: inputs set from outside, as a deploy net's
    net.blobs["data"].data[...] = np.random.default_rng(0).standard_normal((8, 1, 27, 27))
    net.blobs["label"].data[...] = np.arange(8) % 5
    loss = net.forward()["loss"]
    assert np.isfinite(loss) and loss > 0
    test = engine.Net(str(train_val), engine.TEST, structure_only=True)
    assert test.blobs["data"].shape == (2, 3, 27, 27)     # 3 mean_values: 3 channels
    assert "acc" in test.outputs


def test_unknown_dimensions_are_assumed_and_said_or_given(tmp_path):
    path = tmp_path / "n.prototxt"
    path.write_text("""layer { name: "d" type: "Data" top: "data" top: "label"
        data_param { source: "nowhere_lmdb" batch_size: 4 } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 2 } }""")
    net = engine.Net(str(path), engine.TRAIN, structure_only=True)
    (s,) = net.init_record.stand_ins
    assert net.blobs["data"].shape == (4, 3, 224, 224) and s.assumed
    assert s.tops[0].assumed == ["3 channels", "224 × 224 (height × width)"]
    given = engine.Net(str(path), engine.TRAIN, structure_only=True, data_shapes={"data": (1, 28, 28)})
    assert given.blobs["data"].shape == (4, 1, 28, 28) and not given.init_record.stand_ins[0].assumed
    assert given.init_record.stand_ins[0].tops[0].given


def test_image_data_hdf5_and_refused_paths(tmp_path):
    listed = tmp_path / "list.txt"
    listed.write_text("missing_image.jpg 3\n")
    param = caffe_pb2.NetParameter()
    from google.protobuf import text_format
    text_format.Merge("""
layer { name: "img" type: "ImageData" top: "im" top: "lab"
        image_data_param { source: "%s" batch_size: 2 new_height: 40 new_width: 30 is_color: false
                           root_folder: "%s/" } }
layer { name: "h5" type: "HDF5Data" top: "x" top: "y" hdf5_data_param { source: "%s/none.txt" batch_size: 5 } }
layer { name: "ok" type: "DummyData" top: "z" dummy_data_param { shape { dim: 1 } } }
""" % (listed, tmp_path, tmp_path), param)
    out, recs = stand_in_data(param, shapes={"x": (6,)})
    assert [r.layer for r in recs] == ["img", "h5"]
    assert recs[0].reason.startswith("lists ") and "missing_image.jpg" in recs[0].reason
    assert recs[0].tops[0].shape == (2, 1, 40, 30) and not recs[0].assumed
    assert recs[1].tops[0].shape == (5, 6) and recs[1].tops[1].shape == (5, 1) and recs[1].assumed
    assert [l.type for l in out.layer] == ["Input", "Input", "DummyData"]
    assert [l.type for l in param.layer] == ["ImageData", "HDF5Data", "DummyData"]     # pure
    # a caller that may not read a path (the inspector's model root) refuses it by its reason
    lp = param.layer[0]
    assert missing_source(lp, can_read=lambda p: "outside the model root")[3] == "outside the model root"


def test_parse_shapes():
    assert parse_shapes(["data=3,227,227", "label=", "x=4x5"]) == {"data": (3, 227, 227), "label": (), "x": (4, 5)}
    for bad in ("data", "data=3,a", "data=0,2"):
        with pytest.raises(ValueError):
            parse_shapes([bad])


def _run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_info_structure_only(train_val):
    code, out, err = _run("info", train_val)
    assert code == EXIT_ERROR and "--structure-only" in err
    code, out, err = _run("info", train_val, "--structure-only")
    assert code == EXIT_OK, err
    assert "Structure only: 1 data layer(s) stood in" in out
    assert "data (Data): data_param.source '%s' not found" % os.path.join(train_val.parent, "nowhere", "train_lmdb") \
        in out
    assert "data 8 × 1 × 27 × 27" in out and "conv -> conv* [8 4 13 13]" in out
    code, out, _ = _run("info", train_val, "--structure-only", "--phase", "TEST", "--data-shape", "data=3,31,31")
    assert code == EXIT_OK and "data 2 × 3 × 31 × 31" in out and "(given)" in out
    code, _out, err = _run("info", train_val, "--data-shape", "data=3,31,31")
    assert code == EXIT_USAGE and "--structure-only" in err


# A net that takes only 784 values an item (a reconstruction loss against the flattened data),
# and one whose data is a pair of one-channel images sharing weights: neither builds in the
# first assumption (3 x 224 x 224).
RECONSTRUCT = """name: "AE"
layer { name: "data" type: "Data" top: "data" data_param { source: "%(missing)s" batch_size: 4 } }
layer { name: "flat" type: "Flatten" bottom: "data" top: "flat" }
layer { name: "code" type: "InnerProduct" bottom: "flat" top: "code"
        inner_product_param { num_output: 8 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "decode" type: "InnerProduct" bottom: "code" top: "decode"
        inner_product_param { num_output: 784 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "decode" bottom: "flat" top: "loss" }
"""
PAIRS = """name: "Pairs"
layer { name: "pair" type: "Data" top: "pair" top: "sim" data_param { source: "%(missing)s" batch_size: 2 } }
layer { name: "slice" type: "Slice" bottom: "pair" top: "a" top: "b" slice_param { slice_dim: 1 slice_point: 1 } }
layer { name: "ca" type: "Convolution" bottom: "a" top: "ca"
        param { name: "w" } convolution_param { num_output: 2 kernel_size: 3 bias_term: false } }
layer { name: "cb" type: "Convolution" bottom: "b" top: "cb"
        param { name: "w" } convolution_param { num_output: 2 kernel_size: 3 bias_term: false } }
layer { name: "sink" type: "Silence" bottom: "ca" bottom: "cb" bottom: "sim" }
"""
NOT_THE_SHAPE = """name: "Broken"
layer { name: "data" type: "Data" top: "data" data_param { source: "%(missing)s" batch_size: 2 } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 2 } }
"""


def _net(tmp_path, text, **kw):
    path = tmp_path / "net.prototxt"
    path.write_text(text % {"missing": tmp_path / "nowhere_lmdb"})
    return engine.Net(str(path), engine.TRAIN, structure_only=True, **kw)


@pytest.mark.parametrize("text, top, item", [(RECONSTRUCT, "data", (1, 28, 28)), (PAIRS, "pair", (2, 28, 28))])
def test_an_assumed_shape_the_net_cannot_take_gives_way_to_one_it_can(tmp_path, text, top, item):
    net = _net(tmp_path, text)
    assert net.blobs[top].shape[1:] == item
    (s,) = net.init_record.stand_ins
    (t,) = [t for t in s.tops if t.name == top]
    # said: what is assumed now, and that the first assumption does not build (with its error)
    assert s.assumed and not t.given and not any("(given)" in k for k in t.known)
    (said,) = t.assumed
    assert said.startswith("%s, as 3 × 224 × 224 does not build (" % " × ".join(map(str, item)))
    assert ("count" in said) if text is RECONSTRUCT else ("Cannot share param 'w'" in said)
    # the transcript's line is the stand-in as built
    lines = [m for _lvl, m in net.init_record.transcript if m.startswith("Structure only: ")]
    assert lines == ["Structure only: " + s.describe()]
    assert sum(m.startswith("Initializing net from parameters") for _lvl, m in net.init_record.transcript) == 1
    net.forward()        # and it steps


def test_given_shapes_are_kept_and_not_replaced(tmp_path):
    with pytest.raises(engine.CaffeError) as ei:
        _net(tmp_path, RECONSTRUCT, data_shapes={"data": (3, 10, 10)})
    assert "structure only" not in str(ei.value)     # nothing was assumed: Caffe's error as it is


def test_an_error_that_is_not_the_shapes_says_what_was_assumed(tmp_path):
    with pytest.raises(engine.CaffeError) as ei:
        _net(tmp_path, NOT_THE_SHAPE)
    msg = str(ei.value)
    assert "kernel_size must be specified" in msg and ":3:" in msg          # the error and its line
    assert "[structure only: the data was stood in with assumed shapes (data 2 × 3 × 224 × 224)" in msg
    assert "give the data's shape]" in msg


ZOO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.pardir, "shared", "zoo")


@pytest.mark.skipif(not os.path.isdir(ZOO), reason="../shared/zoo (Caffe's example nets) is not beside the checkout")
@pytest.mark.parametrize("rel, top, item", [
    ("examples/siamese/mnist_siamese_train_test.prototxt", "pair_data", (2, 28, 28)),
    ("examples/mnist/mnist_autoencoder.prototxt", "data", (1, 28, 28))])
def test_caffes_mnist_siamese_and_autoencoder_open_without_their_data(rel, top, item):
    net = engine.Net(os.path.join(ZOO, rel), engine.TRAIN, structure_only=True)
    assert net.blobs[top].shape[1:] == item
    assert "does not build" in net.init_record.stand_ins[0].describe()

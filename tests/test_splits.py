"""engine.core.splits against Caffe's SplitLayerInsertionTest cases and small nets of our own."""
import pytest

from engine.core.errors import NetError
from engine.core.splits import InsertedSplit, SplitConsumer, insert_splits, split_blob_name, split_layer_name
from engine.proto import caffe_pb2
from tests.proto_helpers import parse, pure_and_idempotent, same

NetParameter = caffe_pb2.NetParameter


# ---------------------------------------------------------------------------
# Caffe's own cases (../shared/caffe_tests/split_*)
# ---------------------------------------------------------------------------

SPLIT_CASES = {
    "TestNoInsertion1": [], "TestNoInsertion2": [], "TestNoInsertionImageNet": [],
    "TestNoInsertionWithInPlace": [],
    "TestLossInsertion": ["data_data_0_split", "innerproduct1_innerproduct1_0_split"],
    "TestInsertion": ["data_data_0_split", "innerprod2_innerprod2_0_split"],
    "TestInsertionTwoTop": ["data_data_0_split", "label_data_1_split"],
    "TestWithInPlace": ["data_data_0_split", "innerprod1_relu1_0_split"],
}


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_caffe_insert_splits(shared_dir, case):
    d = shared_dir / "caffe_tests"
    inp = parse((d / ("split_%s.input.prototxt" % case)).read_text())
    exp = parse((d / ("split_%s.expected.prototxt" % case)).read_text())
    out, records = pure_and_idempotent(insert_splits, inp, exp)
    assert [r.name for r in records] == SPLIT_CASES[case]
    for r in records:
        assert out.layer[r.position].name == r.name
        assert tuple(out.layer[r.position].top) == r.tops


def test_caffe_split_cases_all_covered(shared_dir):
    names = sorted(p.name[len("split_"):-len(".input.prototxt")]
                   for p in (shared_dir / "caffe_tests").glob("split_*.input.prototxt"))
    assert names == sorted(SPLIT_CASES)


def test_caffe_loss_insertion_records(shared_dir):
    inp = parse((shared_dir / "caffe_tests" / "split_TestLossInsertion.input.prototxt")
                .read_text())
    out, records = insert_splits(inp)
    ip1 = records[1]
    assert ip1.loss_weight == 2.5
    assert ip1.consumers == (
        SplitConsumer("", -1, -1, "innerproduct1_innerproduct1_0_split_0"),
        SplitConsumer("loss", 3, 0, "innerproduct1_innerproduct1_0_split_1"))
    assert [l.name for l in out.layer if l.loss_weight] == ["innerproduct1_innerproduct1_0_split"]


# ---------------------------------------------------------------------------
# Small nets
# ---------------------------------------------------------------------------

def test_split_names():
    assert split_layer_name("conv1", "data", 0) == "data_conv1_0_split"
    assert split_blob_name("conv1", "data", 2, 3) == "data_conv1_2_split_3"


def test_split_naming_and_placement():
    net = parse("""
name: "n"
layer { name: "src" type: "DummyData" top: "a" top: "b" }
layer { name: "u1" type: "ReLU" bottom: "b" top: "u1" }
layer { name: "u2" type: "Concat" bottom: "a" bottom: "b" bottom: "b" top: "u2" }
layer { name: "u3" type: "ReLU" bottom: "a" top: "u3" }
""")
    out, records = insert_splits(net)
    assert [(l.name, l.type) for l in out.layer] == [
        ("src", "DummyData"), ("a_src_0_split", "Split"), ("b_src_1_split", "Split"),
        ("u1", "ReLU"), ("u2", "Concat"), ("u3", "ReLU")]
    assert list(out.layer[1].bottom) == ["a"]
    assert list(out.layer[1].top) == ["a_src_0_split_0", "a_src_0_split_1"]
    assert list(out.layer[2].top) == ["b_src_1_split_0", "b_src_1_split_1", "b_src_1_split_2"]
    assert list(out.layer[3].bottom) == ["b_src_1_split_0"]
    assert list(out.layer[4].bottom) == ["a_src_0_split_0", "b_src_1_split_1", "b_src_1_split_2"]
    assert list(out.layer[5].bottom) == ["a_src_0_split_1"]
    assert not any(l.loss_weight for l in out.layer)
    a, b = records
    assert isinstance(a, InsertedSplit)
    assert (a.name, a.blob, a.producer, a.producer_index, a.top_index, a.position) == \
        ("a_src_0_split", "a", "src", 0, 0, 1)
    assert a.consumers == (SplitConsumer("u2", 2, 0, "a_src_0_split_0"),
                           SplitConsumer("u3", 3, 0, "a_src_0_split_1"))
    assert b.consumers == (SplitConsumer("u1", 1, 0, "b_src_1_split_0"),
                           SplitConsumer("u2", 2, 1, "b_src_1_split_1"),
                           SplitConsumer("u2", 2, 2, "b_src_1_split_2"))
    assert b.loss_weight == 0.0


def test_split_with_in_place():
    net = parse("""
layer { name: "data" type: "Input" top: "x" }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h" }
layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
layer { name: "drop" type: "Dropout" bottom: "h" top: "h" }
layer { name: "out1" type: "InnerProduct" bottom: "h" top: "o1" }
layer { name: "out2" type: "InnerProduct" bottom: "h" top: "o2" }
""")
    out, records = insert_splits(net)
    # the in-place chain ip -> relu -> drop reads one copy each; the last writer (drop)
    # is the one split
    assert [l.name for l in out.layer] == ["data", "ip", "relu", "drop", "h_drop_0_split",
                                           "out1", "out2"]
    assert list(out.layer[2].bottom) == ["h"] and list(out.layer[2].top) == ["h"]
    assert list(out.layer[3].bottom) == ["h"] and list(out.layer[3].top) == ["h"]
    assert list(out.layer[4].top) == ["h_drop_0_split_0", "h_drop_0_split_1"]
    assert list(out.layer[5].bottom) == ["h_drop_0_split_0"]
    assert list(out.layer[6].bottom) == ["h_drop_0_split_1"]
    assert [(r.producer, r.producer_index) for r in records] == [("drop", 3)]


def test_in_place_reader_of_a_shared_blob():
    """The copy an in-place layer writes is what later readers share, so it is split."""
    net = parse("""
layer { name: "data" type: "Input" top: "x" }
layer { name: "relu" type: "ReLU" bottom: "x" top: "x" }
layer { name: "sig" type: "Sigmoid" bottom: "x" top: "s" }
layer { name: "tanh" type: "TanH" bottom: "x" top: "t" }
""")
    out, _ = insert_splits(net)
    assert [l.name for l in out.layer] == ["data", "relu", "x_relu_0_split", "sig", "tanh"]
    assert list(out.layer[1].bottom) == ["x"]     # data's x has one reader: relu


def test_loss_weight_moves_to_first_split_top():
    net = parse("""
layer { name: "data" type: "Input" top: "x" }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" top: "z" loss_weight: 0.5
        loss_weight: 3 }
layer { name: "use" type: "ReLU" bottom: "y" top: "r" }
layer { name: "loss" type: "EuclideanLoss" bottom: "r" bottom: "z" top: "l" loss_weight: 1 }
""")
    out, records = insert_splits(net)
    names = [l.name for l in out.layer]
    assert names == ["data", "ip", "y_ip_0_split", "z_ip_1_split", "use", "loss"]
    ip = out.layer[1]
    assert list(ip.loss_weight) == []           # cleared on the producer (all of them)
    assert list(out.layer[2].top) == ["y_ip_0_split_0", "y_ip_0_split_1"]
    assert list(out.layer[2].loss_weight) == [0.5, 0.0]
    assert list(out.layer[3].loss_weight) == [3.0, 0.0]
    assert list(out.layer[4].bottom) == ["y_ip_0_split_1"]      # split_0 is the loss use
    assert list(out.layer[5].bottom) == ["r", "z_ip_1_split_1"]
    assert list(out.layer[5].loss_weight) == [1.0]              # single use: untouched
    assert [r.loss_weight for r in records] == [0.5, 3.0]
    assert records[0].consumers[0] == SplitConsumer("", -1, -1, "y_ip_0_split_0")


def test_zero_loss_weight_is_not_a_use():
    net = parse("""
layer { name: "data" type: "Input" top: "x" loss_weight: 0 }
layer { name: "a" type: "ReLU" bottom: "x" top: "a" }
""")
    out, records = insert_splits(net)
    assert records == []
    same(out, net)


def test_net_inputs_split_at_the_front():
    net = parse("""
input: "data"
input_shape { dim: 1 dim: 2 }
layer { name: "a" type: "ReLU" bottom: "data" top: "a" }
layer { name: "b" type: "ReLU" bottom: "data" top: "b" }
""")
    out, records = insert_splits(net)
    assert [l.name for l in out.layer] == ["data_input_0_split", "a", "b"]
    assert list(out.layer[0].top) == ["data_input_0_split_0", "data_input_0_split_1"]
    assert list(out.input) == ["data"]
    assert (records[0].producer, records[0].producer_index, records[0].position) == \
        ("input", -1, 0)


def test_unknown_bottom_blob():
    net = parse("""
layer { name: "data" type: "Input" top: "data" }
layer { name: "r" type: "ReLU" bottom: "data" bottom: "dta" top: "out" }
""")
    with pytest.raises(NetError) as info:
        insert_splits(net)
    assert str(info.value) == "Unknown bottom blob 'dta' (layer 'r', bottom index 1)"
    assert (info.value.layer, info.value.blob) == ("r", "dta")


def test_bottom_before_its_producer_is_unknown():
    net = parse("""
layer { name: "r" type: "ReLU" bottom: "late" top: "out" }
layer { name: "src" type: "Input" top: "late" }
""")
    with pytest.raises(NetError,
                       match="Unknown bottom blob 'late' \\(layer 'r', bottom index 0\\)"):
        insert_splits(net)


def test_other_fields_are_kept():
    net = parse("""
name: "keep" force_backward: true state { phase: TRAIN } debug_info: true
layer { name: "data" type: "Input" top: "x" }
layer { name: "a" type: "ReLU" bottom: "x" top: "a" propagate_down: false }
layer { name: "b" type: "ReLU" bottom: "x" top: "b" include { phase: TRAIN } }
""")
    out, _ = insert_splits(net)
    assert out.name == "keep" and out.force_backward and out.debug_info
    assert out.state.phase == caffe_pb2.TRAIN
    assert list(out.layer[2].propagate_down) == [False]
    assert out.layer[3].include[0].phase == caffe_pb2.TRAIN

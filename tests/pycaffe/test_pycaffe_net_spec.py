"""caffe.net_spec (NetSpec, layers, params, to_proto): Caffe's own test_net_spec.py checks,
and pycaffe's naming and field-assignment rules."""
import pytest
from google.protobuf import text_format

import engine
from engine.proto import caffe_pb2
from engine.pycaffe import NetSpec, to_proto
from engine.pycaffe import layers as L
from engine.pycaffe import params as P
from engine.pycaffe.net_spec import Function, Top, param_name_dict


def _lenet(batch_size, named=True):
    n = NetSpec() if named else None
    data, label = L.DummyData(shape=[dict(dim=[batch_size, 1, 28, 28]), dict(dim=[batch_size, 1, 1, 1])],
                              transform_param=dict(scale=1. / 255), ntop=2)
    conv1 = L.Convolution(data, kernel_size=5, num_output=20, weight_filler=dict(type="xavier"))
    pool1 = L.Pooling(conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    conv2 = L.Convolution(pool1, kernel_size=5, num_output=50, weight_filler=dict(type="xavier"))
    pool2 = L.Pooling(conv2, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    ip1 = L.InnerProduct(pool2, num_output=500, weight_filler=dict(type="xavier"))
    relu1 = L.ReLU(ip1, in_place=True)
    ip2 = L.InnerProduct(relu1, num_output=10, weight_filler=dict(type="xavier"))
    loss = L.SoftmaxWithLoss(ip2, label)
    if not named:
        return loss.to_proto()
    for name, top in (("data", data), ("label", label), ("conv1", conv1), ("pool1", pool1), ("conv2", conv2),
                      ("pool2", pool2), ("ip1", ip1), ("relu1", relu1), ("ip2", ip2), ("loss", loss)):
        n[name] = top
    return n.to_proto()


def _load(tmp_path, proto):
    path = tmp_path / "net.prototxt"
    path.write_text(str(proto))
    return engine.Net(str(path), engine.TEST)


@pytest.mark.parametrize("named", [True, False])
def test_lenet_builds_with_an_in_place_relu(named, tmp_path):
    """test_net_spec.py's test_lenet: the ReLU is in place, the net has 9 layers."""
    proto = _lenet(50, named)
    assert proto.layer[6].bottom == proto.layer[6].top
    assert len(_load(tmp_path, proto).layers) == 9


def test_named_and_anonymous_names():
    named, anon = _lenet(50), _lenet(50, named=False)
    assert [l.name for l in named.layer] == ["data", "conv1", "pool1", "conv2", "pool2", "ip1", "relu1", "ip2",
                                             "loss"]
    assert list(named.layer[0].top) == ["data", "label"]
    assert list(named.layer[6].top) == ["ip1"]            # in place: the bottom's name
    # automatic names: the type and a counter per type; a layer takes its first top's name
    assert [l.name for l in anon.layer] == ["DummyData1", "Convolution1", "Pooling1", "Convolution2", "Pooling2",
                                            "InnerProduct1", "ReLU1", "InnerProduct2", "SoftmaxWithLoss1"]
    assert list(anon.layer[0].top) == ["DummyData1", "DummyData2"]
    assert list(anon.layer[8].bottom) == ["InnerProduct2", "DummyData2"]


def test_fields_go_to_the_type_param_or_the_layer():
    proto = _lenet(50)
    conv = proto.layer[1]
    assert conv.convolution_param.num_output == 20 and list(conv.convolution_param.kernel_size) == [5]
    assert conv.convolution_param.weight_filler.type == "xavier"
    assert proto.layer[0].transform_param.scale == pytest.approx(1. / 255)
    assert [list(s.dim) for s in proto.layer[0].dummy_data_param.shape] == [[50, 1, 28, 28], [50, 1, 1, 1]]
    assert proto.layer[2].pooling_param.pool == caffe_pb2.PoolingParameter.MAX
    ip = L.InnerProduct(L.Input(), num_output=3, loss_weight=2, include=dict(phase=caffe_pb2.TRAIN),
                        param=[dict(lr_mult=1), dict(lr_mult=2, decay_mult=0)], propagate_down=True)
    layer = ip.to_proto().layer[1]
    assert list(layer.loss_weight) == [2.0] and layer.include[0].phase == caffe_pb2.TRAIN
    assert [p.lr_mult for p in layer.param] == [1, 2] and layer.param[1].decay_mult == 0
    assert list(layer.propagate_down) == [True]             # a single value for a repeated field
    assert not layer.inner_product_param.HasField("bias_term")


def test_python_layer_param_str_and_ntop():
    data, label = L.Python(module="voc_layers", layer="VOCSegDataLayer", ntop=2, param_str=str({"seed": 1}))
    layer = to_proto(data, label).layer[0]
    assert layer.python_param.module == "voc_layers" and layer.python_param.layer == "VOCSegDataLayer"
    assert layer.python_param.param_str == "{'seed': 1}"
    assert list(layer.top) == ["Python1", "Python2"]
    assert 'param_str: "{\\\'seed\\\': 1}"' in str(layer)


def test_a_type_without_its_own_param_message_takes_fields_on_the_layer():
    """pycaffe's rule: Deconvolution has no deconvolution_param, so ``num_output`` is looked
    up on the LayerParameter, which has no such field (pycaffe fails the same way)."""
    assert "Deconvolution" not in param_name_dict() and param_name_dict()["Convolution"] == "convolution"
    with pytest.raises(AttributeError):
        L.Deconvolution(L.Input(), num_output=3).to_proto()
    d = L.Deconvolution(L.Input(), convolution_param=dict(num_output=3, kernel_size=4, stride=2))
    assert d.to_proto().layer[1].convolution_param.num_output == 3


def test_zero_tops_and_silence():
    """test_net_spec.py's test_zero_tops: top-less layers build; the net has no outputs."""
    n = NetSpec()
    n.data, n.data2 = L.DummyData(shape=dict(dim=3), ntop=2)
    n.silence_data = L.Silence(n.data, ntop=0)
    n.silence_data2 = L.Silence(n.data2, ntop=0)
    proto = n.to_proto()
    assert [l.name for l in proto.layer] == ["data", "silence_data", "silence_data2"]
    assert isinstance(L.Silence(n.data, ntop=0), Function)
    with pytest.raises(AttributeError):     # as pycaffe: to_proto takes tops, not a top-less Function
        to_proto(L.Silence(n.data, ntop=0))


def test_zero_tops_net_forwards_nothing(tmp_path):
    n = NetSpec()
    n.data, n.data2 = L.DummyData(shape=dict(dim=3), ntop=2)
    n.silence_data = L.Silence(n.data, ntop=0)
    n.silence_data2 = L.Silence(n.data2, ntop=0)
    assert len(_load(tmp_path, n.to_proto()).forward()) == 0


def test_type_error_for_an_input_that_is_not_a_top():
    """test_net_spec.py's test_type_error, message for message."""
    data = L.DummyData(ntop=2)
    with pytest.raises(TypeError, match=r"^Silence input 0 is not a Top \(type is <class 'tuple'>\)$"):
        L.Silence(data, ntop=0)
    L.Silence(*data, ntop=0)


def test_to_proto_of_several_tops_shares_layers_not_names():
    data, label = L.DummyData(ntop=2)
    ip = L.InnerProduct(data, num_output=2)
    proto = to_proto(L.SoftmaxWithLoss(ip, label), L.Accuracy(ip, label))
    assert [l.name for l in proto.layer] == ["DummyData1", "InnerProduct1", "SoftmaxWithLoss1", "Accuracy1"]
    assert list(proto.layer[3].bottom) == ["InnerProduct1", "DummyData2"]


def test_netspec_access_and_errors():
    n = NetSpec()
    n["data"] = L.Input(shape=dict(dim=[2, 3]))
    assert n.data is n["data"] and isinstance(n.data, Top)
    with pytest.raises(KeyError):
        _ = n.missing               # pycaffe: a KeyError, not AttributeError
    assert list(n.tops) == ["data"]
    assert text_format.MessageToString(n.to_proto()).replace('"data"', '"Input1"') == \
        text_format.MessageToString(n.data.to_proto())          # Top.to_proto names automatically


def test_params_read_caffe_pb2_constants():
    assert P.Pooling.AVE == caffe_pb2.PoolingParameter.AVE
    assert P.Eltwise.SUM == caffe_pb2.EltwiseParameter.SUM
    assert P.Data.LMDB == caffe_pb2.DataParameter.LMDB
    with pytest.raises(AttributeError):
        _ = P.Pooling.NOPE


def test_empty_list_leaves_a_repeated_field_empty():
    layer = L.Convolution(L.Input(), num_output=1, kernel_size=[]).to_proto().layer[1]
    assert len(layer.convolution_param.kernel_size) == 0


def test_engine_namespace_has_the_net_spec_names():
    assert engine.NetSpec is NetSpec and engine.layers is L and engine.params is P and engine.to_proto is to_proto

"""Every registered layer type keeps its facts on its class (category, summary, the
LayerParameter fields of its settings, its FLOP formula), as Caffe's layer.hpp keeps
the blob counts; the inspector's table and the analysis are derived from them."""
import pytest

import engine
from engine.core.layers.base import Layer
from engine.core.layers.registry import CATEGORIES, find_layer_class, layer_types
from engine.proto import caffe_pb2

TYPES = layer_types()


def test_all_types_registered():
    assert len(TYPES) >= 61
    assert find_layer_class("NoSuchType") is None


@pytest.mark.parametrize("type_name", TYPES)
def test_layer_class_declares_every_fact(type_name):
    cls = find_layer_class(type_name)
    own = cls.__dict__
    # declared by the type itself, not inherited from a family base
    assert "category" in own and own["category"] in CATEGORIES, type_name
    assert "summary" in own and isinstance(own["summary"], str) and len(own["summary"]) > 3
    assert "param_fields" in own
    fields = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    for f in own["param_fields"]:
        assert f in fields, "%s: %s is not a LayerParameter field" % (type_name, f)
    # a FLOP formula of its own or of its family (neurons: one op per element)
    assert cls.flops is not Layer.flops, "%s has no FLOP formula" % type_name


def test_summaries_are_distinct():
    summaries = [find_layer_class(t).summary for t in TYPES]
    assert len(set(summaries)) == len(summaries)


def test_inspector_table_is_derived_from_the_classes():
    from inspector.views import layer_meta
    for t in TYPES:
        m = layer_meta.meta(t)
        cls = find_layer_class(t)
        assert (m.category, m.description, m.param_fields) == (cls.category, cls.summary, tuple(cls.param_fields))
    assert layer_meta.meta("NoSuchType") is layer_meta.OTHER
    assert set(layer_meta.CATEGORIES) == set(engine.layer_categories())


def test_a_new_layer_type_is_one_class():
    """Registering one class is enough for the registry, the table and the analysis."""
    from engine.core.layers.base import elementwise_flops
    from engine.core.layers.registry import _REGISTRY, register_layer

    @register_layer
    class TwiceLayer(Layer):
        type = "TestTwice"
        category = "activation"
        summary = "2 x (a test type)."
        param_fields = ()
        flops = elementwise_flops

        def reshape(self, bottom, top):
            top[0].reshape_like(bottom[0])

        def forward(self, bottom, top):
            top[0].mut_data()[...] = 2 * bottom[0].get_data()

    try:
        from inspector.views import layer_meta
        layer_meta.meta.cache_clear()
        assert layer_meta.category("TestTwice") == "activation"
        net_text = ('input: "x" input_shape { dim: 2 dim: 3 } '
                    'layer { name: "t" type: "TestTwice" bottom: "x" top: "y" }')
        from google.protobuf import text_format
        p = text_format.Parse(net_text, caffe_pb2.NetParameter())
        net = engine.Net.from_param(p, phase=engine.TEST)
        from engine.instruments.analysis import analyze_net
        assert analyze_net(net).layer("t").flops == 6
        net.forward()
        assert net.blobs["y"].data.tolist() == [[0.0] * 3] * 2
    finally:
        _REGISTRY.pop("TestTwice", None)
        from inspector.views import layer_meta
        layer_meta.meta.cache_clear()

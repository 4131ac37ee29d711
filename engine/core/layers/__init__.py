"""The layer library: base classes, the registry and every layer family."""
from engine.core.layers.base import Layer, NeuronLayer, LossLayer  # noqa: F401
from engine.core.layers.registry import register_layer, create_layer, layer_class, layer_types  # noqa: F401

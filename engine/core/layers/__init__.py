"""The layer library: base classes, the registry and every layer family."""
from engine.core.layers.base import Layer, LossLayer, NeuronLayer  # noqa: F401
from engine.core.layers.registry import create_layer, layer_class, layer_types, register_layer  # noqa: F401

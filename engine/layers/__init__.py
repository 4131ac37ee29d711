"""The layer library: base classes, the registry and every layer family."""
from .base import Layer, NeuronLayer, LossLayer  # noqa: F401
from .registry import register_layer, create_layer, layer_class, layer_types  # noqa: F401

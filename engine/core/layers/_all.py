"""Imports every layer family module so that each registers its layers."""
from engine.core.layers import common, data, loss, neuron, norm, python_layer, recurrent, vision  # noqa: F401

"""Imports every layer family module so that each registers its layers."""
from engine.core.layers import data, neuron, common, vision, loss, norm, recurrent, python_layer  # noqa: F401

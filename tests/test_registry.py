"""The layer registry: lookups, the unknown-type message, thread-safe first load."""
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.errors import UnknownLayerTypeError
from engine.core.layers import layer_class, layer_types

ROOT = Path(__file__).resolve().parents[1]


def test_every_caffe_1_0_type_is_registered():
    caffe_types = """AbsVal Accuracy ArgMax BNLL BatchNorm BatchReindex Bias Clip Concat ContrastiveLoss
    Convolution Crop Data Deconvolution Dropout DummyData ELU Eltwise Embed EuclideanLoss Exp Filter
    Flatten HDF5Data HDF5Output HingeLoss Im2col ImageData InfogainLoss InnerProduct Input LRN LSTM
    LSTMUnit Log MVN MemoryData MultinomialLogisticLoss PReLU Parameter Pooling Power Python RNN ReLU
    Reduction Reshape SPP Scale Sigmoid SigmoidCrossEntropyLoss Silence Slice Softmax SoftmaxWithLoss
    Split Swish TanH Threshold Tile WindowData""".split()
    assert layer_types() == sorted(caffe_types)


def test_unknown_type_lists_the_known_ones_in_caffe_order():
    with pytest.raises(UnknownLayerTypeError) as e:
        layer_class("Convolutoin")
    msg = str(e.value)
    assert msg.startswith("Unknown layer type: Convolutoin (known types: AbsVal, Accuracy, ArgMax, BNLL, "
                          "BatchNorm, ")


def test_first_load_from_many_threads_at_once():
    code = """
import threading, engine.core.layers.registry as r
errors = []
def go():
    try:
        r.layer_class("Convolution"); r.layer_class("Pooling")
    except Exception as e:
        errors.append(repr(e))
ts = [threading.Thread(target=go) for _ in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
print("ERRORS", errors)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "ERRORS []" in out.stdout, out.stdout + out.stderr


def test_the_table_names_the_module_that_registers_each_type():
    """registry.MODULES (what the lazy lookup imports) is what the family modules register."""
    from engine.core.layers import registry
    layer_types()                                                   # imports every family
    registered = {t: c.__module__ for t, c in registry._REGISTRY.items()
                  if c.__module__.startswith("engine.core.layers.")}
    assert registered == registry.MODULES


def test_a_lookup_imports_only_the_module_of_its_type():
    code = """
import sys
from engine.core.layers.registry import layer_class, find_layer_class
layer_class("ReLU")
print("AFTER_RELU", sorted(m for m in sys.modules if m.startswith("engine.core.layers.")))
assert find_layer_class("NoSuchType") is None                  # an unknown type: every family
print("AFTER_UNKNOWN", sorted(m for m in sys.modules if m.startswith("engine.core.layers.")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith("AFTER"))
    assert lines["AFTER_RELU"] == str(["engine.core.layers.base", "engine.core.layers.neuron",
                                       "engine.core.layers.registry"]), out.stdout + out.stderr
    for family in ("common", "data", "loss", "norm", "python_layer", "recurrent", "vision"):
        assert "engine.core.layers." + family in lines["AFTER_UNKNOWN"]


def test_a_built_in_type_name_cannot_be_taken_before_its_module_loads():
    from engine.core.layers.base import Layer
    from engine.core.layers.registry import register_layer

    class Impostor(Layer):
        type = "LSTM"

    with pytest.raises(ValueError, match="Layer type LSTM already registered"):
        register_layer(Impostor)
    assert layer_class("LSTM").__module__ == "engine.core.layers.recurrent"

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

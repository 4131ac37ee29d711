"""Small nets shared by several test modules."""
import os

import numpy as np

import engine
from engine.core import backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "lenet", "lenet_train_test.prototxt")

_LENET_DEPLOY = """name: "LeNet"
layer { name: "data" type: "Input" top: "data" input_param { shape: { dim: %d dim: 1 dim: 28 dim: 28 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 20 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 50 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  inner_product_param { num_output: 500 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "prob" type: "Softmax" bottom: "ip2" top: "prob" }
"""


def lenet_deploy(batch):
    """LeNet's deploy net (Input of ``batch`` x 1 x 28 x 28, xavier fillers, Softmax) as text."""
    return _LENET_DEPLOY % batch


HALF = 'layer { name: "half" type: "Power" bottom: "e3" top: "out" power_param { scale: 0.5 } }'
RELU = 'layer { name: "relu" type: "ReLU" bottom: "e3" top: "e3" }'


def overflow(shape=(4, 25), tail=HALF):
    """exp(exp(exp(x))) on an Input of ``shape``, then the ``tail`` layers (reading e3).
    An input of 2 overflows float32 at exp3 (exp(1618)); 1 stays finite (3.8e6)."""
    dims = " ".join("dim: %d" % d for d in shape)
    return "\n".join(['', 'name: "Overflow"',
                      'layer { name: "in" type: "Input" top: "data" input_param { shape { %s } } }' % dims,
                      'layer { name: "exp1" type: "Exp" bottom: "data" top: "e1" }',
                      'layer { name: "exp2" type: "Exp" bottom: "e1" top: "e2" }',
                      'layer { name: "exp3" type: "Exp" bottom: "e2" top: "e3" }'] + ([tail] if tail else []) + [''])


# "half" carries the Inf on.
OVERFLOW = overflow()

# DummyData (8 x 6, labels 1) into a 3-way InnerProduct and SoftmaxWithLoss: a net a solver trains alone.
DUMMY_SOFTMAX = """
name: "Dummy"
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 8 dim: 6 } shape { dim: 8 }
                           data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def lenet_with_inputs(seed=0):
    """LeNet's TRAIN net (filler seed 1) with random images and labels from ``seed`` in its Input blobs."""
    backend.set_random_seed(1)
    net = engine.Net(LENET, engine.TRAIN)
    rng = np.random.default_rng(seed)
    net.blobs["data"].data[...] = rng.random(net.blobs["data"].shape)
    net.blobs["label"].data[...] = rng.integers(0, 10, net.blobs["label"].shape)
    return net

"""The gradient loop of fzliu/style-transfer's style_optfn, checked by hand.

A gradient is added into the diff of each chosen layer's top, deepest first, and
backward(start=layer, end=next_layer) carries it down, the next layer adding its own term
to the diff the previous backward left (end=None the last time: down to the data).  With
two 1x1 convolutions and no nonlinearity the data gradient is W1^T (g1 + W2^T g2).

    python -m engine run style_backprop_chain.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np

workdir = sys.argv[1]
model_file = os.path.join(workdir, "style_deploy.prototxt")
with open(model_file, "w") as f:
    f.write("""
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 5 dim: 6 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
  convolution_param { num_output: 2 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 } } }
""")
caffe.set_random_seed(5)
net = caffe.Net(model_file, caffe.TEST)
layers = [b for b in net.blobs if b in ("conv1", "conv2")]
rng = np.random.RandomState(1)
net.blobs["data"].data[0] = rng.randn(3, 5, 6)
net.forward()
g = {"conv1": rng.randn(4, 5, 6).astype(np.float32), "conv2": rng.randn(2, 5, 6).astype(np.float32)}

net.blobs[layers[-1]].diff[:] = 0
for i, layer in enumerate(reversed(layers)):
    next_layer = None if i == len(layers) - 1 else layers[-i - 2]
    grad = net.blobs[layer].diff[0]
    grad += g[layer]
    net.backward(start=layer, end=next_layer)
    if next_layer is None:
        grad = net.blobs["data"].diff[0]
    else:
        grad = net.blobs[next_layer].diff[0]

W1 = net.params["conv1"][0].data[:, :, 0, 0].astype(np.float64)
W2 = net.params["conv2"][0].data[:, :, 0, 0].astype(np.float64)
expect = np.einsum("oc,ohw->chw", W1, g["conv1"] + np.einsum("oc,ohw->chw", W2, g["conv2"]))
err = float(np.abs(grad - expect).max())
assert err < 1e-4, err
flat = grad.flatten().astype(np.float64)
print("grad", flat.shape, "max error %.1e" % err)

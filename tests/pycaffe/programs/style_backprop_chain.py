"""Layer-by-layer backpropagation of hand-made gradients, the pattern of style-transfer
programs (fzliu/style-transfer's optimisation callback), checked by hand.

The deepest chosen layer's top diff is zeroed; then for each chosen layer, deepest first,
its own gradient term is added into its top's diff and backward(start=that layer,
end=the next chosen layer up) runs, ending with end=None (down to the data), each pass
leaving in the next layer's diff what the next term is added to.  Two 1x1 convolutions
with no nonlinearity give the data gradient W1^T (g1 + W2^T g2).

    python -m engine run style_backprop_chain.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np

out_dir = sys.argv[1]
deploy = os.path.join(out_dir, "style_deploy.prototxt")
with open(deploy, "w") as f:
    f.write("""
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 5 dim: 6 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
  convolution_param { num_output: 2 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 } } }
""")
caffe.set_random_seed(5)
net = caffe.Net(deploy, caffe.TEST)
chosen = [name for name in net.blobs if name.startswith("conv")]     # shallow to deep
draws = np.random.RandomState(1)
net.blobs["data"].data[0] = draws.randn(3, 5, 6)
net.forward()
terms = {"conv1": draws.randn(4, 5, 6).astype(np.float32), "conv2": draws.randn(2, 5, 6).astype(np.float32)}

net.blobs[chosen[-1]].diff[...] = 0
deep_first = chosen[::-1]
for k, layer in enumerate(deep_first):
    above = deep_first[k + 1] if k + 1 < len(deep_first) else None
    net.blobs[layer].diff[0] += terms[layer]
    net.backward(start=layer, end=above)
gradient = net.blobs["data"].diff[0]

w1 = net.params["conv1"][0].data[:, :, 0, 0].astype(np.float64)
w2 = net.params["conv2"][0].data[:, :, 0, 0].astype(np.float64)
through_conv2 = np.tensordot(w2.T, terms["conv2"], axes=(1, 0))
by_hand = np.tensordot(w1.T, terms["conv1"] + through_conv2, axes=(1, 0))
error = float(np.abs(gradient - by_hand).max())
assert error < 1e-4, error
print("gradient", gradient.ravel().shape, "max error %.1e" % error)

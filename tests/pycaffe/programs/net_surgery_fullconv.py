"""Caffe's net_surgery notebook, second half, on a small net: cast the InnerProduct layers
of a classifier into convolutions ("fully convolutional"), transplanting the weights with
``.flat`` through net.params, net.save the result, reload it, and classify every window
of a larger input with one forward_all.  Each output location must equal the classifier
run on that window.

    python -m engine run net_surgery_fullconv.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np

workdir = sys.argv[1]
head = """
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 3 kernel_size: 3 weight_filler { type: "gaussian" std: 0.3 }
                      bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
"""
classifier = """name: "small"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 6 dim: 6 } } }
""" + head + """
layer { name: "fc6" type: "InnerProduct" bottom: "pool1" top: "fc6"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 }
                        bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "fc7" type: "InnerProduct" bottom: "fc6" top: "fc7"
  inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 }
                        bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "prob" type: "Softmax" bottom: "fc7" top: "prob" }
"""
full_conv = """name: "small_full_conv"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 10 dim: 10 } } }
""" + head + """
layer { name: "fc6-conv" type: "Convolution" bottom: "pool1" top: "fc6-conv"
  convolution_param { num_output: 5 kernel_size: 2 } }
layer { name: "fc7-conv" type: "Convolution" bottom: "fc6-conv" top: "fc7-conv"
  convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "prob" type: "Softmax" bottom: "fc7-conv" top: "prob" }
"""
for name, text in (("small.prototxt", classifier), ("small_full_conv.prototxt", full_conv)):
    with open(os.path.join(workdir, name), "w") as f:
        f.write(text)
weights = os.path.join(workdir, "small.caffemodel")
caffe.set_random_seed(2)
caffe.Net(os.path.join(workdir, "small.prototxt"), caffe.TEST).save(weights)

net = caffe.Net(os.path.join(workdir, "small.prototxt"), weights, caffe.TEST)
params = ["fc6", "fc7"]
fc_params = {pr: (net.params[pr][0].data, net.params[pr][1].data) for pr in params}
net_full_conv = caffe.Net(os.path.join(workdir, "small_full_conv.prototxt"), weights, caffe.TEST)
params_full_conv = ["fc6-conv", "fc7-conv"]
conv_params = {pr: (net_full_conv.params[pr][0].data, net_full_conv.params[pr][1].data)
               for pr in params_full_conv}
for fc in params:
    print("{} weights are {} dimensional and biases are {} dimensional".format(
        fc, fc_params[fc][0].shape, fc_params[fc][1].shape))
for pr, pr_conv in zip(params, params_full_conv):
    conv_params[pr_conv][0].flat = fc_params[pr][0].flat  # flat unrolls the arrays
    conv_params[pr_conv][1][...] = fc_params[pr][1]
full_weights = os.path.join(workdir, "small_full_conv.caffemodel")
net_full_conv.save(full_weights)

reloaded = caffe.Net(os.path.join(workdir, "small_full_conv.prototxt"), full_weights, caffe.TEST)
rng = np.random.RandomState(3)
image = rng.rand(2, 10, 10).astype(np.float32)
out = reloaded.forward_all(data=np.asarray([image]))
print("prob map", out["prob"].shape, "argmax", out["prob"][0].argmax(axis=0).tolist())
for i in range(3):
    for j in range(3):
        window = image[:, 2 * i:2 * i + 6, 2 * j:2 * j + 6]
        expect = net.forward(data=window[None])["prob"][0]
        assert np.allclose(out["prob"][0, :, i, j], expect, rtol=1e-5, atol=1e-6), (i, j)
print("every window matches")

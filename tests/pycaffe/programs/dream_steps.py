"""The calls deepdream's notebook makes, on a net small enough to check by hand.

Patch a deploy file to force_backward through caffe.io.caffe_pb2 and text_format, build a
caffe.Classifier (mean, channel_swap), then make_step: forward(end=...), set the end
blob's diff to its data (the L2 objective), backward(start=...), step the input, on an
input resized by blob.reshape for each octave.  The nets are two 1x1 convolutions, so the
gradient is checked against NumPy.

    python -m engine run dream_steps.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np
from google.protobuf import text_format

workdir = sys.argv[1]
net_fn = os.path.join(workdir, "dream_deploy.prototxt")
param_fn = os.path.join(workdir, "dream.caffemodel")
with open(net_fn, "w") as f:
    f.write("""
name: "tiny_dream"
input: "data"
input_shape { dim: 1 dim: 3 dim: 8 dim: 10 }
layer { name: "mix" type: "Convolution" bottom: "data" top: "mix/out"
  convolution_param { num_output: 4 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 }
                      bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "head" type: "Convolution" bottom: "mix/out" top: "head/out"
  convolution_param { num_output: 2 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 } } }
""")
caffe.set_random_seed(11)
caffe.Net(net_fn, caffe.TEST).save(param_fn)

model = caffe.io.caffe_pb2.NetParameter()
text_format.Merge(open(net_fn).read(), model)
model.force_backward = True
patched = os.path.join(workdir, "tmp.prototxt")
open(patched, "w").write(str(model))

net = caffe.Classifier(patched, param_fn, mean=np.float32([104.0, 116.0, 122.0]), channel_swap=(2, 1, 0))
W = net.params["mix"][0].data[:, :, 0, 0].astype(np.float64)
b = net.params["mix"][1].data.astype(np.float64)


def preprocess(net, img):
    return np.float32(np.rollaxis(img, 2)[::-1]) - net.transformer.mean["data"]


def deprocess(net, img):
    return np.dstack((img + net.transformer.mean["data"])[::-1])


def make_step(net, step_size=1.5, end="mix/out"):
    src, dst = net.blobs["data"], net.blobs[end]
    out = net.forward(end="mix")
    assert list(out) == ["mix/out"], out
    dst.diff[:] = dst.data                         # objective_L2
    net.backward(start="mix")
    g = src.diff[0]
    x = src.data[0].astype(np.float64)
    mix = np.einsum("oc,chw->ohw", W, x) + b[:, None, None]
    expect = np.einsum("oc,ohw->chw", W, mix)
    assert np.allclose(g, expect, rtol=1e-4, atol=1e-4), np.abs(g - expect).max()
    src.data[:] += step_size / np.abs(g).mean() * g
    bias = net.transformer.mean["data"]
    src.data[:] = np.clip(src.data, -bias, 255 - bias)


rng = np.random.RandomState(0)
img = np.float32(rng.uniform(0, 255, (8, 10, 3)))
src = net.blobs["data"]
for h, w in ((8, 10), (6, 7), (8, 10)):             # octaves: the input resized each time
    base = preprocess(net, img[:h, :w])
    src.reshape(1, 3, h, w)
    src.data[0] = base
    for _ in range(2):
        make_step(net)
    assert net.blobs["mix/out"].data.shape == (1, 4, h, w)
    assert net.blobs["head/out"].data.shape == (1, 2, 8, 10)   # forward(end=) stopped before it
    vis = deprocess(net, src.data[0])
    print("octave", h, w, vis.shape, "%.4f" % float(np.abs(vis - img[:h, :w]).mean()))
guide = net.forward(end="mix")["mix/out"][0].copy()
print("guide", guide.shape)

"""Gradient ascent on the input, the way deepdream's notebook drives pycaffe, on a net
small enough to check by hand.

Calls exercised: caffe.io.caffe_pb2 + text_format to switch force_backward on in a deploy
file; caffe.Classifier(mean=..., channel_swap=...) and its transformer.mean; per step
forward(end=LAYER), the end blob's diff set from its data, backward(start=LAYER), the
input blob's diff read and its data changed; blob.reshape to a new input size between
rounds.  The net is two 1x1 convolutions, so the input gradient of 0.5*|mix|^2 is
W^T mix, compared with NumPy at every step.

    python -m engine run dream_steps.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np
from google.protobuf import text_format

out_dir = sys.argv[1]
deploy = os.path.join(out_dir, "dream_deploy.prototxt")
weights = os.path.join(out_dir, "dream.caffemodel")
with open(deploy, "w") as f:
    f.write("""
name: "two_by_one"
input: "data"
input_shape { dim: 1 dim: 3 dim: 8 dim: 10 }
layer { name: "mix" type: "Convolution" bottom: "data" top: "mix/out"
  convolution_param { num_output: 4 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 }
                      bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "head" type: "Convolution" bottom: "mix/out" top: "head/out"
  convolution_param { num_output: 2 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 } } }
""")
caffe.set_random_seed(11)
caffe.Net(deploy, caffe.TEST).save(weights)

proto = caffe.io.caffe_pb2.NetParameter()
with open(deploy) as f:
    text_format.Merge(f.read(), proto)
proto.force_backward = True
with_backward = os.path.join(out_dir, "with_backward.prototxt")
with open(with_backward, "w") as f:
    f.write(str(proto))

clf = caffe.Classifier(with_backward, weights, mean=np.float32([90.0, 100.0, 110.0]), channel_swap=(2, 1, 0))
mean = clf.transformer.mean["data"]                    # (3, 1, 1), BGR
kernel = clf.params["mix"][0].data[:, :, 0, 0].astype(np.float64)
shift = clf.params["mix"][1].data.astype(np.float64)


def to_net(rgb):
    return rgb.transpose(2, 0, 1)[::-1].astype(np.float32) - mean


def from_net(bgr):
    return (bgr + mean)[::-1].transpose(1, 2, 0)


def ascend(net, rate=1.5):
    inp = net.blobs["data"]
    answer = net.forward(end="mix")
    assert sorted(answer) == ["mix/out"], sorted(answer)
    target = net.blobs["mix/out"]
    target.diff[...] = target.data
    net.backward(start="mix")
    grad = inp.diff[0]
    x = inp.data[0].astype(np.float64)
    activation = np.tensordot(kernel, x, axes=(1, 0)) + shift[:, None, None]
    by_hand = np.tensordot(kernel.T, activation, axes=(1, 0))
    assert np.allclose(grad, by_hand, rtol=1e-4, atol=1e-4), float(np.abs(grad - by_hand).max())
    inp.data[...] += rate / np.abs(grad).mean() * grad
    inp.data[...] = np.clip(inp.data, -mean, 255 - mean)


picture = np.float32(np.random.RandomState(0).uniform(0, 255, (8, 10, 3)))
for rows, cols in ((8, 10), (6, 7), (8, 10)):
    clf.blobs["data"].reshape(1, 3, rows, cols)
    clf.blobs["data"].data[0] = to_net(picture[:rows, :cols])
    for _ in range(2):
        ascend(clf)
    assert clf.blobs["mix/out"].data.shape == (1, 4, rows, cols)
    assert clf.blobs["head/out"].data.shape == (1, 2, 8, 10)       # forward stopped before head
    seen = from_net(clf.blobs["data"].data[0])
    print("round", rows, cols, seen.shape, "%.4f" % float(np.abs(seen - picture[:rows, :cols]).mean()))
features = clf.forward(end="mix")["mix/out"][0].copy()
print("features", features.shape)

"""Fold BatchNorm + Scale into the convolution before them, in the manner of the public
"merge_bn" scripts for MobileNet-SSD and the like: the trained net and a deploy net
without the BN/Scale layers are loaded, every layer's params are copied by testing
``type(net.params[name]) is caffe._caffe.BlobVec``, the BN statistics and Scale factors
are folded into each convolution's weights and bias, and the merged weights are saved.

usage: merge_bn.py MODEL WEIGHTS MERGED_MODEL MERGED_WEIGHTS
"""
import sys

import caffe
import numpy as np


def merge_bn(net, nob):
    """w' = w * scale / sqrt(var + eps), b' = (b - mean) * scale / sqrt(var + eps) + shift."""
    merged, copied = [], []
    for key in net.params.keys():
        if type(net.params[key]) is caffe._caffe.BlobVec:
            if key.endswith(("/bn", "/scale")):
                continue
            conv = net.params[key]
            if key + "/bn" not in net.params:
                for i, w in enumerate(conv):
                    nob.params[key][i].data[...] = w.data
                copied.append(key)
            else:
                bn = net.params[key + "/bn"]
                scale = net.params[key + "/scale"]
                wt = conv[0].data
                channels = wt.shape[0]
                bias = np.zeros(wt.shape[0])
                if len(conv) > 1:
                    bias = conv[1].data
                mean = bn[0].data
                var = bn[1].data
                scalef = bn[2].data
                scales = scale[0].data
                shift = scale[1].data
                if scalef != 0:
                    scalef = 1. / scalef
                mean = mean * scalef
                var = var * scalef
                rstd = 1. / np.sqrt(var + 1e-5)
                rstd1 = rstd.reshape((channels, 1, 1, 1))
                scales1 = scales.reshape((channels, 1, 1, 1))
                wt = wt * rstd1 * scales1
                bias = (bias - mean) * rstd * scales + shift
                nob.params[key][0].data[...] = wt
                nob.params[key][1].data[...] = bias
                merged.append(key)
    return merged, copied


model, weights, merged_model, merged_weights = sys.argv[1:5]
net = caffe.Net(model, weights, caffe.TEST)
nob = caffe.Net(merged_model, caffe.TEST)
merged, copied = merge_bn(net, nob)
print("merged", " ".join(merged))
print("copied", " ".join(copied))

# The pruning scripts' form of the same test, and the layers' own class.
skipped = [name for name in nob.params if type(nob.params[name]) is not caffe._caffe.BlobVec]
print("skipped", len(skipped))
bn_layers = [name for name, layer in zip(net._layer_names, net.layers)
             if isinstance(layer, caffe.Layer) and layer.type == "BatchNorm"]
print("batchnorm", " ".join(bn_layers))
nob.save(merged_weights)

x = np.random.RandomState(0).uniform(-1, 1, net.blobs["data"].data.shape).astype(np.float32)
a = net.forward(data=x)["fc"].copy()
b = nob.forward(data=x)["fc"].copy()
print("max difference %.3g of %.3g" % (np.abs(a - b).max(), np.abs(a).max()))

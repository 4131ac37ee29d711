"""Turning a classifier into a fully convolutional net by net surgery, as Caffe's
net_surgery notebook teaches, on a small net.

Calls exercised: caffe.Net(model, weights, caffe.TEST) (the legacy order); net.params[...]
[i].data of an InnerProduct copied into a Convolution of another net through ``.flat``
and ``[...]``; net.save; loading the saved file; forward_all over one larger image.  Each
location of the convolutional output must equal the classifier run on its window.

    python -m engine run net_surgery_fullconv.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np

out_dir = sys.argv[1]
FEATURES = """
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 3 kernel_size: 3 weight_filler { type: "gaussian" std: 0.3 }
                      bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
"""
CLASSIFIER = 'name: "windows"\n' + \
    'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 6 dim: 6 } } }\n' + \
    FEATURES + """
layer { name: "fc_a" type: "InnerProduct" bottom: "pool1" top: "fc_a"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 }
                        bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "fc_b" type: "InnerProduct" bottom: "fc_a" top: "fc_b"
  inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 }
                        bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "prob" type: "Softmax" bottom: "fc_b" top: "prob" }
"""
CONVOLUTIONAL = 'name: "windows_conv"\n' + \
    'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 10 dim: 10 } } }\n' + \
    FEATURES + """
layer { name: "fc_a-conv" type: "Convolution" bottom: "pool1" top: "fc_a-conv"
  convolution_param { num_output: 5 kernel_size: 2 } }
layer { name: "fc_b-conv" type: "Convolution" bottom: "fc_a-conv" top: "fc_b-conv"
  convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "prob" type: "Softmax" bottom: "fc_b-conv" top: "prob" }
"""
paths = {}
for key, text in (("classifier", CLASSIFIER), ("conv", CONVOLUTIONAL)):
    paths[key] = os.path.join(out_dir, key + ".prototxt")
    with open(paths[key], "w") as f:
        f.write(text)
trained = os.path.join(out_dir, "classifier.caffemodel")
caffe.set_random_seed(2)
caffe.Net(paths["classifier"], caffe.TEST).save(trained)

classifier = caffe.Net(paths["classifier"], trained, caffe.TEST)
convolutional = caffe.Net(paths["conv"], trained, caffe.TEST)     # conv1 comes along, fc_* are ignored
for fc in ("fc_a", "fc_b"):
    weight, bias = classifier.params[fc]
    print("%s: weight %s, bias %s" % (fc, weight.data.shape, bias.data.shape))
    target_weight, target_bias = convolutional.params[fc + "-conv"]
    target_weight.data.flat = weight.data.flat          # same numbers, O x C*H*W -> O x C x H x W
    target_bias.data[...] = bias.data
surgered = os.path.join(out_dir, "conv.caffemodel")
convolutional.save(surgered)

reloaded = caffe.Net(paths["conv"], surgered, caffe.TEST)
image = np.random.RandomState(3).rand(2, 10, 10).astype(np.float32)
scores = reloaded.forward_all(data=np.asarray([image]))["prob"][0]
print("scores", scores.shape, "best", scores.argmax(axis=0).tolist())
for row in range(3):
    for col in range(3):
        window = image[None, :, 2 * row:2 * row + 6, 2 * col:2 * col + 6]
        single = classifier.forward(data=window)["prob"][0]
        assert np.allclose(scores[:, row, col], single, rtol=1e-5, atol=1e-6), (row, col)
print("all 9 windows agree")

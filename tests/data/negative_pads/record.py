#!/usr/bin/env python3
"""Run real Caffe (pycaffe) on nets whose Convolution, Deconvolution, Im2col and Pooling
layers have a negative pad, and write expected.npz (what tests/layers/test_negative_pads.py
compares the engine with).

    PYTHONPATH=/work/caffe/python python3 tests/data/negative_pads/record.py

A pad is a uint32 in caffe.proto; Caffe holds it in an int, so 4294967295 is -1 there and
its im2col and pooling loops start the windows inside the image.  Each case: the net's
text, its input and the top's diff (seeded NumPy draws, kept in the file), and what Caffe
computed: the top, the bottom's diff and every param's data and diff.
"""
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
M1, M2 = 4294967295, 4294967294          # -1 and -2 in Caffe's int

CASES = {
    "conv_pad_m1": ((2, 3, 7, 6), 'type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 '
                    'pad: %d weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" } }' % M1),
    "conv_pad_h_m1_stride2": ((2, 3, 9, 8), 'type: "Convolution" convolution_param { num_output: 2 kernel_size: 3 '
                              'stride: 2 pad_h: %d pad_w: 1 weight_filler { type: "gaussian" std: 0.5 } '
                              'bias_filler { type: "gaussian" } }' % M1),
    "conv_depthwise_pad_m1": ((2, 3, 8, 8), 'type: "Convolution" convolution_param { num_output: 3 group: 3 '
                              'kernel_size: 3 pad: %d weight_filler { type: "gaussian" std: 0.5 } '
                              'bias_filler { type: "gaussian" } }' % M1),
    "conv_dilated_pad_m2": ((1, 2, 10, 11), 'type: "Convolution" convolution_param { num_output: 3 kernel_size: 3 '
                            'dilation: 2 pad: %d weight_filler { type: "gaussian" std: 0.5 } '
                            'bias_filler { type: "gaussian" } }' % M2),
    "conv3d_pad_m1": ((1, 2, 6, 5, 5), 'type: "Convolution" convolution_param { num_output: 2 kernel_size: 3 '
                      'pad: %d weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" } }' % M1),
    "deconv_pad_m1_stride2": ((2, 3, 4, 5), 'type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 3 '
                              'stride: 2 pad: %d weight_filler { type: "gaussian" std: 0.5 } '
                              'bias_filler { type: "gaussian" } }' % M1),
    "im2col_pad_m1": ((2, 2, 6, 5), 'type: "Im2col" convolution_param { kernel_size: 2 stride: 2 pad: %d }' % M1),
    "max_pool_pad_m1_ceil": ((2, 3, 8, 9), 'type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 '
                             'pad: %d }' % M1),
    "ave_pool_pad_m1_ceil": ((2, 3, 8, 9), 'type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 '
                             'pad: %d }' % M1),
    "ave_pool_pad_h_m1": ((1, 2, 7, 6), 'type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 1 '
                          'pad_h: %d pad_w: 1 }' % M1),
    "max_pool_pad_w_m1_floor": ((1, 2, 7, 8), 'type: "Pooling" pooling_param { pool: MAX kernel_h: 2 kernel_w: 3 '
                                'stride: 2 pad_h: 1 pad_w: %d round_mode: FLOOR }' % M1),
}


def net_text(shape, layer):
    dims = " ".join("dim: %d" % d for d in shape)
    return ('name: "negative_pad" force_backward: true\n'
            'layer { name: "data" type: "Input" top: "data" input_param { shape { %s } } }\n'
            'layer { name: "layer" %s bottom: "data" top: "out" }\n' % (dims, layer))


def main():
    import tempfile

    import caffe
    caffe.set_mode_cpu()
    caffe.set_random_seed(1701)
    rng = np.random.default_rng(20261207)
    out = {}
    for name, (shape, layer) in CASES.items():
        text = net_text(shape, layer)
        with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as f:
            f.write(text)
        net = caffe.Net(f.name, caffe.TEST)
        os.unlink(f.name)
        x = rng.standard_normal(shape).astype(np.float32)
        if name.startswith("max_pool"):
            x = np.round(x * 8) / 8           # ties: the first maximum is the one Caffe routes to
        net.blobs["data"].data[...] = x
        net.forward()
        top = net.blobs["out"].data.copy()
        dtop = rng.standard_normal(top.shape).astype(np.float32)
        net.blobs["out"].diff[...] = dtop
        net.backward()
        out[name + "/net"] = np.array(text)
        out[name + "/x"], out[name + "/top_diff"] = x, dtop
        out[name + "/top"], out[name + "/x_diff"] = top, net.blobs["data"].diff.copy()
        for i, p in enumerate(net.params.get("layer", [])):
            out[name + "/param%d" % i] = p.data.copy()
            out[name + "/param%d_diff" % i] = p.diff.copy()
        print(name, "top", top.shape)
    np.savez_compressed(os.path.join(HERE, "expected.npz"), **out)


if __name__ == "__main__":
    main()

"""A pycaffe program (run it as ``python -m engine run fcn8s_netspec.py OUTDIR``): FCN-8s
for PASCAL VOC as a NetSpec with named tops, Python data layers and Crop layers whose
offsets caffe.coord_map infers.  Writes OUTDIR/train.prototxt and OUTDIR/val.prototxt."""
import os
import sys

import caffe
from caffe import layers as L
from caffe import params as P
from caffe.coord_map import crop

LEARN = [dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)]
VGG = [(1, 2, 64), (2, 2, 128), (3, 3, 256), (4, 3, 512), (5, 3, 512)]   # block, convs, outputs


def conv_relu(n, name, bottom, outputs, kernel=3, pad=1):
    n[name] = L.Convolution(bottom, kernel_size=kernel, stride=1, num_output=outputs, pad=pad, param=LEARN)
    relu = name.replace("conv", "relu") if name.startswith("conv") else "relu" + name[2:]
    n[relu] = L.ReLU(n[name], in_place=True)
    return n[relu]


def upscore(bottom, kernel, stride):
    return L.Deconvolution(bottom, convolution_param=dict(num_output=21, kernel_size=kernel, stride=stride,
                                                          bias_term=False), param=[dict(lr_mult=0)])


def score(bottom):
    return L.Convolution(bottom, num_output=21, kernel_size=1, pad=0, param=LEARN)


def fcn(split):
    n = caffe.NetSpec()
    settings = {"split": split, "mean": (104.00699, 116.66877, 122.67892), "seed": 1337}
    if split == "train":
        settings["sbdd_dir"] = "../data/sbdd/dataset"
        layer = "SBDDSegDataLayer"
    else:
        settings["voc_dir"] = "../data/pascal/VOC2011"
        layer = "VOCSegDataLayer"
    n.data, n.label = L.Python(module="voc_layers", layer=layer, ntop=2, param_str=str(settings))
    top = n.data
    for block, convs, outputs in VGG:
        for i in range(1, convs + 1):
            top = conv_relu(n, "conv%d_%d" % (block, i), top, outputs, pad=100 if (block, i) == (1, 1) else 1)
        n["pool%d" % block] = top = L.Pooling(top, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    top = conv_relu(n, "fc6", top, 4096, kernel=7, pad=0)
    n.drop6 = L.Dropout(top, dropout_ratio=0.5, in_place=True)
    top = conv_relu(n, "fc7", n.drop6, 4096, kernel=1, pad=0)
    n.drop7 = L.Dropout(top, dropout_ratio=0.5, in_place=True)
    n.score_fr = score(n.drop7)
    n.upscore2 = upscore(n.score_fr, 4, 2)
    n.score_pool4 = score(n.pool4)
    n.score_pool4c = crop(n.score_pool4, n.upscore2)
    n.fuse_pool4 = L.Eltwise(n.upscore2, n.score_pool4c, operation=P.Eltwise.SUM)
    n.upscore_pool4 = upscore(n.fuse_pool4, 4, 2)
    n.score_pool3 = score(n.pool3)
    n.score_pool3c = crop(n.score_pool3, n.upscore_pool4)
    n.fuse_pool3 = L.Eltwise(n.upscore_pool4, n.score_pool3c, operation=P.Eltwise.SUM)
    n.upscore8 = upscore(n.fuse_pool3, 16, 8)
    n.score = crop(n.upscore8, n.data)
    n.loss = L.SoftmaxWithLoss(n.score, n.label, loss_param=dict(normalize=False, ignore_label=255))
    return n.to_proto()


if __name__ == "__main__":
    out = sys.argv[1]
    for filename, split in (("train.prototxt", "train"), ("val.prototxt", "seg11valid")):
        with open(os.path.join(out, filename), "w") as f:
            f.write(str(fcn(split)))

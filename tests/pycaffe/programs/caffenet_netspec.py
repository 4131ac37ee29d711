"""A pycaffe program (run it as ``python -m engine run caffenet_netspec.py OUTDIR``): CaffeNet
for training and testing, written with NetSpec functions and anonymous tops, as BVLC's
pycaffe example builds it.  Writes OUTDIR/train.prototxt and OUTDIR/test.prototxt."""
import os
import sys

from caffe import layers as L
from caffe import params as P
from caffe import to_proto

# (kernel, outputs, stride, pad, group, then: "pool+lrn", "pool" or nothing)
CONVS = [(11, 96, 4, 0, 1, "pool+lrn"), (5, 256, 1, 2, 2, "pool+lrn"), (3, 384, 1, 1, 1, ""),
         (3, 384, 1, 1, 2, ""), (3, 256, 1, 1, 2, "pool")]


def features(top):
    for kernel, outputs, stride, pad, group, after in CONVS:
        top = L.Convolution(top, kernel_size=kernel, stride=stride, num_output=outputs, pad=pad, group=group)
        top = L.ReLU(top, in_place=True)
        if after.startswith("pool"):
            top = L.Pooling(top, pool=P.Pooling.MAX, kernel_size=3, stride=2)
        if after.endswith("lrn"):
            top = L.LRN(top, local_size=5, alpha=1e-4, beta=0.75)
    return top


def classifier(top):
    for _ in range(2):
        top = L.InnerProduct(top, num_output=4096)
        top = L.ReLU(top, in_place=True)
        top = L.Dropout(top, in_place=True)
    return L.InnerProduct(top, num_output=1000)


def caffenet(source, batch_size, accuracy):
    data, label = L.Data(source=source, backend=P.Data.LMDB, batch_size=batch_size, ntop=2,
                         transform_param=dict(crop_size=227, mean_value=[104, 117, 123], mirror=True))
    scores = classifier(features(data))
    loss = L.SoftmaxWithLoss(scores, label)
    if accuracy:
        return to_proto(loss, L.Accuracy(scores, label))
    return to_proto(loss)


if __name__ == "__main__":
    out = sys.argv[1]
    with open(os.path.join(out, "train.prototxt"), "w") as f:
        print(caffenet("/path/to/caffe-train-lmdb", 256, False), file=f)
    with open(os.path.join(out, "test.prototxt"), "w") as f:
        print(caffenet("/path/to/caffe-val-lmdb", 50, True), file=f)

"""The calls of Caffe's pascal-multilabel-with-datalayer notebook: NetSpec with
L.Python(module=..., layer=..., ntop=2, param_str=str(dict)), a solver file written as
"key: value" lines (examples/pycaffe/tools.py's CaffeSolver), caffe.SGDSolver,
solver.test_nets[0].share_with(solver.net), step, and a Hamming-distance accuracy over
the test net's blobs.

    python -m engine run multilabel_datalayer.py WORKDIR
"""
import os.path as osp
import sys

import caffe
import numpy as np
from caffe import layers as L
from caffe import params as P

workdir = sys.argv[1]
sys.path.append(osp.dirname(osp.abspath(__file__)))        # the layer module sits beside


def net_multilabel(data_layer_params, datalayer):
    n = caffe.NetSpec()
    n.data, n.label = L.Python(module="multilabel_layers", layer=datalayer, ntop=2,
                               param_str=str(data_layer_params))
    n.conv1 = L.Convolution(n.data, kernel_size=3, stride=2, num_output=4, weight_filler=dict(type="xavier"))
    n.relu1 = L.ReLU(n.conv1, in_place=True)
    n.pool1 = L.Pooling(n.relu1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.score = L.InnerProduct(n.pool1, num_output=6, weight_filler=dict(type="xavier"))
    n.loss = L.SigmoidCrossEntropyLoss(n.score, n.label)
    return str(n.to_proto())


sp = {"base_lr": "0.001", "momentum": "0.9", "test_iter": "100", "test_interval": "250", "display": "1",
      "snapshot": "2500", "snapshot_prefix": '"%s"' % osp.join(workdir, "snapshot"), "lr_policy": '"fixed"',
      "gamma": "0.1", "weight_decay": "0.0005", "train_net": '"%s"' % osp.join(workdir, "trainnet.prototxt"),
      "test_net": '"%s"' % osp.join(workdir, "valnet.prototxt"), "max_iter": "100000",
      "test_initialization": "false", "average_loss": "25", "iter_size": "1"}
with open(osp.join(workdir, "solver.prototxt"), "w") as f:
    for key, value in sorted(sp.items()):
        f.write("%s: %s\n" % (key, value))
for split, name in (("train", "trainnet.prototxt"), ("val", "valnet.prototxt")):
    with open(osp.join(workdir, name), "w") as f:
        f.write(net_multilabel(dict(batch_size=4, im_shape=[16, 16], split=split, num_classes=6),
                               "MultilabelDataLayerSync"))

solver = caffe.SGDSolver(osp.join(workdir, "solver.prototxt"))
solver.test_nets[0].share_with(solver.net)
solver.step(1)
layer = solver.net.layers[0]
assert layer.top_names == ["data", "label"] and layer.batch_size == 4
assert solver.net.blobs["label"].data.shape == (4, 6) and (solver.net.blobs["label"].data.sum(1) == 2).all()


def hamming_distance(gt, est):
    return sum([1 for (g, e) in zip(gt, est) if g == e]) / float(len(gt))


def check_accuracy(net, num_batches, batch_size=4):
    acc = 0.0
    for _ in range(num_batches):
        net.forward()
        gts = net.blobs["label"].data
        ests = net.blobs["score"].data > 0
        for gt, est in zip(gts, ests):
            acc += hamming_distance(gt, est)
    return acc / (num_batches * batch_size)


for itt in range(2):
    solver.step(2)
    acc = check_accuracy(solver.test_nets[0], 2)
    assert 0 <= acc <= 1
    print("itt:{:3d}".format((itt + 1) * 2), "accuracy:{0:.4f}".format(acc))
assert np.shares_memory(solver.test_nets[0].params["score"][0].data, solver.net.params["score"][0].data)
print("iter", solver.iter, "loss %.4f" % float(solver.net.blobs["loss"].data))

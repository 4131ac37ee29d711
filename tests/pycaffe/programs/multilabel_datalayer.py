"""Training with a Python data layer the way Caffe's pascal-multilabel-with-datalayer
notebook does.

Calls exercised: NetSpec with L.Python(module=..., layer=..., ntop=2,
param_str=str(dict)); a solver file written as sorted "key: value" lines (strings in
quotes); caffe.SGDSolver; solver.test_nets[0].share_with(solver.net); solver.step; the
layer object read back from solver.net.layers[0]; accuracy computed from the test net's
blobs after forward().

    python -m engine run multilabel_datalayer.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np
from caffe import layers as L
from caffe import params as P

out_dir = sys.argv[1]
sys.path.append(os.path.dirname(os.path.abspath(__file__)))      # the layer module sits beside


def multilabel_net(split):
    spec = caffe.NetSpec()
    cfg = dict(batch_size=4, im_shape=[16, 16], split=split, num_classes=6)
    spec.data, spec.label = L.Python(module="multilabel_layers", layer="MultilabelDataLayerSync", ntop=2,
                                     param_str=str(cfg))
    spec.conv1 = L.Convolution(spec.data, num_output=4, kernel_size=3, stride=2, weight_filler=dict(type="xavier"))
    spec.relu1 = L.ReLU(spec.conv1, in_place=True)
    spec.pool1 = L.Pooling(spec.relu1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    spec.score = L.InnerProduct(spec.pool1, num_output=6, weight_filler=dict(type="xavier"))
    spec.loss = L.SigmoidCrossEntropyLoss(spec.score, spec.label)
    return str(spec.to_proto())


for split in ("train", "val"):
    with open(os.path.join(out_dir, split + "net.prototxt"), "w") as f:
        f.write(multilabel_net(split))
settings = {"train_net": '"%s"' % os.path.join(out_dir, "trainnet.prototxt"),
            "test_net": '"%s"' % os.path.join(out_dir, "valnet.prototxt"),
            "test_iter": "10", "test_interval": "1000", "test_initialization": "false",
            "base_lr": "0.0001", "lr_policy": '"fixed"', "momentum": "0.9", "weight_decay": "0.0005",
            "display": "1", "average_loss": "10", "max_iter": "1000", "snapshot": "1000",
            "snapshot_prefix": '"%s"' % os.path.join(out_dir, "snapshot")}
with open(os.path.join(out_dir, "solver.prototxt"), "w") as f:
    f.writelines("%s: %s\n" % item for item in sorted(settings.items()))

solver = caffe.SGDSolver(os.path.join(out_dir, "solver.prototxt"))
solver.test_nets[0].share_with(solver.net)
solver.step(1)
layer = solver.net.layers[0]
assert layer.top_names == ["data", "label"] and layer.batch_size == 4
labels = solver.net.blobs["label"].data
assert labels.shape == (4, 6) and (labels.sum(axis=1) == 2).all()


def label_agreement(net, batches):
    """Fraction of (image, class) pairs where score > 0 says what the label says."""
    agree = []
    for _ in range(batches):
        net.forward()
        agree.append(np.mean((net.blobs["score"].data > 0) == (net.blobs["label"].data > 0.5)))
    return float(np.mean(agree))


for _ in range(2):
    solver.step(2)
    agreement = label_agreement(solver.test_nets[0], 2)
    assert 0.0 <= agreement <= 1.0
    print("after %d steps: agreement %.4f" % (solver.iter, agreement))
assert np.shares_memory(solver.test_nets[0].params["score"][0].data, solver.net.params["score"][0].data)
print("iter", solver.iter, "loss %.4f" % float(solver.net.blobs["loss"].data))

"""Solving from Python the way Caffe's 01-learning-lenet notebook teaches, on a small LMDB
this program writes.

Calls exercised: caffe.io.array_to_datum into an LMDB; NetSpec with
L.Data(..., backend=P.Data.LMDB, transform_param=..., ntop=2); a caffe_pb2.SolverParameter
filled field by field and written with str(); caffe.get_solver and caffe.SGDSolver;
step(1) in a loop reading solver.net.blobs['loss'].data; the test net run with
forward(start='conv1') (scoring the batch it holds again) and with forward() (the next
batch); a second solver made on the same LMDB while the first one lives.

    python -m engine run lenet_notebook.py WORKDIR
"""
import os
import sys

import caffe
import lmdb
import numpy as np
from caffe import layers as L
from caffe import params as P
from caffe.proto import caffe_pb2

out_dir = sys.argv[1]
draws = np.random.RandomState(3)
for split, count in (("train", 64), ("test", 40)):
    env = lmdb.open(os.path.join(out_dir, "digits_%s_lmdb" % split), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(count):
            digit = int(draws.randint(10))
            pixels = draws.randint(0, 40, (1, 12, 12)).astype(np.uint8)
            pixels[0, digit] = 250                           # the row says the class
            txn.put(b"%08d" % i, caffe.io.array_to_datum(pixels, digit).SerializeToString())
    env.close()


def small_lenet(source, batch):
    spec = caffe.NetSpec()
    spec.data, spec.label = L.Data(source=source, backend=P.Data.LMDB, batch_size=batch, ntop=2,
                                   transform_param=dict(scale=1. / 255))
    spec.conv1 = L.Convolution(spec.data, num_output=4, kernel_size=3, weight_filler=dict(type="xavier"))
    spec.pool1 = L.Pooling(spec.conv1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    spec.hidden = L.InnerProduct(spec.pool1, num_output=20, weight_filler=dict(type="xavier"))
    spec.relu = L.ReLU(spec.hidden, in_place=True)
    spec.score = L.InnerProduct(spec.relu, num_output=10, weight_filler=dict(type="xavier"))
    spec.loss = L.SoftmaxWithLoss(spec.score, spec.label)
    return spec.to_proto()


nets = {}
for split, batch in (("train", 16), ("test", 20)):
    nets[split] = os.path.join(out_dir, "lenet_%s.prototxt" % split)
    with open(nets[split], "w") as f:
        f.write(str(small_lenet(os.path.join(out_dir, "digits_%s_lmdb" % split), batch)))

sp = caffe_pb2.SolverParameter()
sp.train_net = nets["train"]
sp.test_net.append(nets["test"])
sp.test_iter.append(2)
sp.test_interval = 500
sp.base_lr = 0.01
sp.lr_policy = "inv"
sp.gamma = 1e-4
sp.power = 0.75
sp.momentum = 0.9
sp.weight_decay = 5e-4
sp.max_iter = 1000
sp.display = 1000
sp.snapshot = 1000
sp.snapshot_prefix = os.path.join(out_dir, "lenet")
sp.solver_mode = caffe_pb2.SolverParameter.GPU        # pycaffe leaves the mode to set_mode_*
sp.random_seed = 0xCAFFE
sp.type = "SGD"
solver_file = os.path.join(out_dir, "lenet_solver.prototxt")
with open(solver_file, "w") as f:
    f.write(str(sp))

caffe.set_mode_cpu()
solver = caffe.get_solver(solver_file)
print("blobs", [(name, blob.data.shape) for name, blob in solver.net.blobs.items()][:3])
print("params", [(name, p[0].data.shape) for name, p in solver.net.params.items()])
tester = solver.test_nets[0]
solver.net.forward()
tester.forward()

losses, hits = [], []
for it in range(12):
    solver.step(1)
    losses.append(float(solver.net.blobs["loss"].data))
    before = tester.blobs["data"].data.copy()
    tester.forward(start="conv1")
    assert (tester.blobs["data"].data == before).all()           # the batch it held, scored again
    if it % 4 == 0:
        right = 0
        for _ in range(2):
            tester.forward()
            right += int((tester.blobs["score"].data.argmax(1) == tester.blobs["label"].data).sum())
        hits.append(right)
assert solver.iter == 12 and np.isfinite(losses).all()
labels = tester.blobs["label"].data.copy()
tester.forward()
assert (labels != tester.blobs["label"].data).any()             # forward() read the next batch
print("loss %.4f -> %.4f" % (losses[0], losses[-1]), "right of 40:", hits)

again = caffe.SGDSolver(solver_file)                             # same LMDBs, the first solver alive
again.step(1)
print("second solver", again.iter, "%.4f" % float(again.net.blobs["loss"].data))

"""The calls of Caffe's 01-learning-lenet notebook on a small LMDB the program writes.

caffe.io.array_to_datum into an LMDB; NetSpec LeNet with L.Data(..., ntop=2); a
SolverParameter filled in Python and written with str(); caffe.get_solver and
caffe.SGDSolver; a step(1) loop storing solver.net.blobs['loss'].data; the test net run
with forward(start='conv1') (re-scoring the batch it holds) and forward() (the next
batch); a second solver made on the same LMDB while the first still exists.

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

workdir = sys.argv[1]
rng = np.random.RandomState(3)
for split, n in (("train", 64), ("test", 40)):
    env = lmdb.open(os.path.join(workdir, "mnist_%s_lmdb" % split), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(n):
            label = int(rng.randint(10))
            img = rng.randint(0, 40, (1, 12, 12)).astype(np.uint8)
            img[0, label, :] = 250
            txn.put(("%08d" % i).encode(), caffe.io.array_to_datum(img, label).SerializeToString())
    env.close()


def lenet(lmdb_path, batch_size):
    n = caffe.NetSpec()
    n.data, n.label = L.Data(batch_size=batch_size, backend=P.Data.LMDB, source=lmdb_path,
                             transform_param=dict(scale=1. / 255), ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=3, num_output=4, weight_filler=dict(type="xavier"))
    n.pool1 = L.Pooling(n.conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.fc1 = L.InnerProduct(n.pool1, num_output=20, weight_filler=dict(type="xavier"))
    n.relu1 = L.ReLU(n.fc1, in_place=True)
    n.score = L.InnerProduct(n.relu1, num_output=10, weight_filler=dict(type="xavier"))
    n.loss = L.SoftmaxWithLoss(n.score, n.label)
    return n.to_proto()


train_net_path = os.path.join(workdir, "lenet_auto_train.prototxt")
test_net_path = os.path.join(workdir, "lenet_auto_test.prototxt")
with open(train_net_path, "w") as f:
    f.write(str(lenet(os.path.join(workdir, "mnist_train_lmdb"), 16)))
with open(test_net_path, "w") as f:
    f.write(str(lenet(os.path.join(workdir, "mnist_test_lmdb"), 20)))

s = caffe_pb2.SolverParameter()
s.random_seed = 0xCAFFE
s.train_net = train_net_path
s.test_net.append(test_net_path)
s.test_interval = 500
s.test_iter.append(2)
s.max_iter = 10000
s.type = "SGD"
s.base_lr = 0.01
s.momentum = 0.9
s.weight_decay = 5e-4
s.lr_policy = "inv"
s.gamma = 0.0001
s.power = 0.75
s.display = 1000
s.snapshot = 5000
s.snapshot_prefix = os.path.join(workdir, "custom_net")
s.solver_mode = caffe_pb2.SolverParameter.GPU        # pycaffe leaves the mode to set_mode_*
solver_config_path = os.path.join(workdir, "custom_auto_solver.prototxt")
with open(solver_config_path, "w") as f:
    f.write(str(s))

caffe.set_mode_cpu()
solver = caffe.get_solver(solver_config_path)
print("nets", [(k, v.data.shape) for k, v in solver.net.blobs.items()][:3])
print("weights", [(k, v[0].data.shape) for k, v in solver.net.params.items()])
solver.net.forward()
solver.test_nets[0].forward()

niter, test_interval = 12, 4
train_loss = np.zeros(niter)
test_acc = np.zeros(int(np.ceil(niter / test_interval)))
output = np.zeros((niter, 8, 10))
for it in range(niter):
    solver.step(1)
    train_loss[it] = solver.net.blobs["loss"].data
    held = solver.test_nets[0].blobs["data"].data.copy()
    solver.test_nets[0].forward(start="conv1")
    assert (solver.test_nets[0].blobs["data"].data == held).all()     # no new batch
    output[it] = solver.test_nets[0].blobs["score"].data[:8]
    if it % test_interval == 0:
        correct = 0
        for _ in range(2):
            solver.test_nets[0].forward()
            correct += sum(solver.test_nets[0].blobs["score"].data.argmax(1) == solver.test_nets[0].blobs["label"].data)
        test_acc[it // test_interval] = correct / 40.
assert solver.iter == niter and np.isfinite(train_loss).all()
held = solver.test_nets[0].blobs["label"].data.copy()
solver.test_nets[0].forward()
assert (held != solver.test_nets[0].blobs["label"].data).any()      # forward() reads the next batch
print("loss first %.4f last %.4f" % (train_loss[0], train_loss[-1]))
print("accuracy", test_acc.tolist())

solver2 = caffe.SGDSolver(solver_config_path)          # the same LMDBs, the first solver alive
solver2.step(1)
print("second solver", solver2.iter, "%.4f" % float(solver2.net.blobs["loss"].data))

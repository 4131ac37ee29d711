"""The shape of FCN's solve.py / surgery.py / score.py on a tiny segmentation net.

NetSpec with a Python data layer (param_str), caffe.coord_map.crop back to the input;
caffe.SGDSolver on a solver file; weights moved into it from another net through
net.params and ``.flat``; bilinear kernels written into the Deconvolution by fancy
indexing; solver.step; solver.test_nets[0].share_with(solver.net); a score loop over the
validation images (each its own size) reading net.blobs.

    python -m engine run fcn_solve.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np
from caffe import layers as L
from caffe import params as P
from caffe.coord_map import crop

workdir = sys.argv[1]
rng = np.random.RandomState(7)
sizes = {"train": [(9, 11), (12, 10), (10, 9)], "val": [(10, 10), (8, 13)]}
for split, shapes in sizes.items():
    names = []
    for i, (h, w) in enumerate(shapes):
        name = "%s_%d" % (split, i)
        np.save(os.path.join(workdir, name + "_img.npy"), rng.uniform(0, 255, (h, w, 3)))
        label = rng.randint(0, 3, (h, w))
        label[0, :] = 255                                  # ignored pixels
        np.save(os.path.join(workdir, name + "_cls.npy"), label)
        names.append(name)
    with open(os.path.join(workdir, split + ".txt"), "w") as f:
        f.write("\n".join(names) + "\n")


def conv_relu(bottom, nout, ks=3, pad=1):
    conv = L.Convolution(bottom, kernel_size=ks, num_output=nout, pad=pad,
                         param=[dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)],
                         weight_filler=dict(type="gaussian", std=0.1))
    return conv, L.ReLU(conv, in_place=True)


def fcn(split):
    n = caffe.NetSpec()
    n.data, n.label = L.Python(module="fcn_seg_layers", layer="SegDataLayer", ntop=2, param_str=str(dict(
        data_dir=workdir, split=split, mean=(104.00699, 116.66877, 122.67892), seed=3)))
    n.conv1, n.relu1 = conv_relu(n.data, 4, pad=8)
    n.pool1 = L.Pooling(n.relu1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.score_fr = L.Convolution(n.pool1, num_output=3, kernel_size=1, pad=0,
                               param=[dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)])
    n.upscore = L.Deconvolution(n.score_fr, convolution_param=dict(num_output=3, kernel_size=4, stride=2,
                                                                   bias_term=False), param=[dict(lr_mult=0)])
    n.score = crop(n.upscore, n.data)
    n.loss = L.SoftmaxWithLoss(n.score, n.label, loss_param=dict(normalize=False, ignore_label=255))
    return n.to_proto()


for split in ("train", "val"):
    with open(os.path.join(workdir, split + ".prototxt"), "w") as f:
        f.write(str(fcn(split)))
with open(os.path.join(workdir, "solver.prototxt"), "w") as f:
    f.write('train_net: "%s"\ntest_net: "%s"\ntest_iter: 2\ntest_interval: 999999999\ndisplay: 1\n'
            'average_loss: 20\nlr_policy: "fixed"\nbase_lr: 1e-6\nmomentum: 0.99\niter_size: 1\n'
            'max_iter: 100000\nweight_decay: 0.0005\nsnapshot: 4000\nsnapshot_prefix: "%s/train"\n'
            'test_initialization: false\n' % (os.path.join(workdir, "train.prototxt"),
                                              os.path.join(workdir, "val.prototxt"), workdir))

solver = caffe.SGDSolver(os.path.join(workdir, "solver.prototxt"))

# "surgery": copy matching parameters from another net, coercing shapes through .flat
donor = caffe.Net(os.path.join(workdir, "val.prototxt"), caffe.TEST)
donor.params["conv1"][0].data[...] = rng.randn(*donor.params["conv1"][0].data.shape) * 0.05
donor.params["score_fr"][1].data[...] = [0.1, 0.2, 0.3]
for p in donor.params:
    if p not in solver.net.params:
        print("dropping", p)
        continue
    for i in range(len(donor.params[p])):
        print("copying", p, i)
        solver.net.params[p][i].data.flat = donor.params[p][i].data.flat
assert (solver.net.params["conv1"][0].data == donor.params["conv1"][0].data).all()
assert (solver.net.params["score_fr"][1].data == np.float32([0.1, 0.2, 0.3])).all()


def bilinear(size):
    factor = (size + 1) // 2
    center = factor - 1 if size % 2 == 1 else factor - 0.5
    og = np.ogrid[:size, :size]
    return (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)


interp_layers = [k for k in solver.net.params.keys() if "up" in k]
for layer in interp_layers:
    m, k, h, w = solver.net.params[layer][0].data.shape
    solver.net.params[layer][0].data[range(m), range(k), :, :] = bilinear(h)

seen = []
for _ in range(3):
    solver.step(1)
    seen.append(solver.net.blobs["data"].data.shape[2:])
    assert solver.net.blobs["score"].data.shape[2:] == solver.net.blobs["data"].data.shape[2:]
    assert np.isfinite(solver.net.blobs["loss"].data).all()
print("train sizes", seen, "iter", solver.iter)
up = solver.net.params["upscore"][0].data
assert np.allclose(up[0, 0], bilinear(4)) and not up[0, 1].any()       # lr_mult 0: kept


def fast_hist(a, b, n):
    k = (a >= 0) & (a < n)
    return np.bincount(n * a[k].astype(int) + b[k], minlength=n ** 2).reshape(n, n)


test = solver.test_nets[0]
test.share_with(solver.net)
assert np.shares_memory(test.params["conv1"][0].data, solver.net.params["conv1"][0].data)
hist, loss = np.zeros((3, 3)), 0
val = np.loadtxt(os.path.join(workdir, "val.txt"), dtype=str)
for idx in val:
    test.forward()
    h, w = test.blobs["data"].data.shape[2:]
    assert (h, w) == np.load(os.path.join(workdir, idx + "_cls.npy")).shape
    hist += fast_hist(test.blobs["label"].data[0, 0].flatten(), test.blobs["score"].data[0].argmax(0).flatten(), 3)
    loss += test.blobs["loss"].data.flat[0]
print("val pixels", int(hist.sum()), "loss finite", bool(np.isfinite(loss)))

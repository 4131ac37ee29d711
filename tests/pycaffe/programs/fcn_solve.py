"""Training and scoring a tiny fully convolutional segmentation net the way FCN's scripts
(solve.py with surgery.py and score.py) drive pycaffe.

Calls exercised: NetSpec with L.Python(..., ntop=2, param_str=str(dict)) and
caffe.coord_map.crop back to the input; caffe.SGDSolver on a solver file; params copied
in from another net through net.params[...][i].data.flat; bilinear kernels written into
a Deconvolution with fancy indexing (lr_mult 0 keeps them); solver.step;
solver.test_nets[0].share_with(solver.net); a scoring loop over validation images of
different sizes reading net.blobs.

    python -m engine run fcn_solve.py WORKDIR
"""
import os
import sys

import caffe
import numpy as np
from caffe import layers as L
from caffe import params as P
from caffe.coord_map import crop

out_dir = sys.argv[1]
draws = np.random.RandomState(7)
splits = {"train": [(9, 11), (12, 10), (10, 9)], "val": [(10, 10), (8, 13)]}
for split, shapes in splits.items():
    names = ["%s_%d" % (split, i) for i in range(len(shapes))]
    for name, (h, w) in zip(names, shapes):
        np.save(os.path.join(out_dir, name + "_img.npy"), draws.uniform(0, 255, (h, w, 3)))
        labels = draws.randint(0, 3, (h, w))
        labels[0] = 255                                   # a row to ignore
        np.save(os.path.join(out_dir, name + "_cls.npy"), labels)
    with open(os.path.join(out_dir, split + ".txt"), "w") as f:
        f.write("\n".join(names) + "\n")

LEARNED = [dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)]


def segnet(split):
    spec = caffe.NetSpec()
    settings = dict(data_dir=out_dir, split=split, mean=(104.0, 117.0, 123.0), seed=3)
    spec.data, spec.label = L.Python(module="fcn_seg_layers", layer="SegDataLayer", ntop=2, param_str=str(settings))
    spec.conv1 = L.Convolution(spec.data, kernel_size=3, num_output=4, pad=8, param=LEARNED,
                               weight_filler=dict(type="gaussian", std=0.1))
    spec.relu1 = L.ReLU(spec.conv1, in_place=True)
    spec.pool1 = L.Pooling(spec.relu1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    spec.score_fr = L.Convolution(spec.pool1, num_output=3, kernel_size=1, param=LEARNED)
    spec.upscore = L.Deconvolution(spec.score_fr, param=[dict(lr_mult=0)],
                                   convolution_param=dict(num_output=3, kernel_size=4, stride=2, bias_term=False))
    spec.score = crop(spec.upscore, spec.data)
    spec.loss = L.SoftmaxWithLoss(spec.score, spec.label, loss_param=dict(normalize=False, ignore_label=255))
    return spec.to_proto()


for split in splits:
    with open(os.path.join(out_dir, split + ".prototxt"), "w") as f:
        f.write(str(segnet(split)))
with open(os.path.join(out_dir, "solver.prototxt"), "w") as f:
    f.write("\n".join([
        'train_net: "%s"' % os.path.join(out_dir, "train.prototxt"),
        'test_net: "%s"' % os.path.join(out_dir, "val.prototxt"),
        "test_iter: 2", "test_interval: 999999999", "test_initialization: false",
        'lr_policy: "fixed"', "base_lr: 1e-6", "momentum: 0.99", "weight_decay: 0.0005",
        "display: 1", "average_loss: 20", "max_iter: 1000", "snapshot: 1000",
        'snapshot_prefix: "%s"' % os.path.join(out_dir, "snap")]) + "\n")

solver = caffe.SGDSolver(os.path.join(out_dir, "solver.prototxt"))

donor = caffe.Net(os.path.join(out_dir, "val.prototxt"), caffe.TEST)
donor.params["conv1"][0].data[...] = draws.randn(*donor.params["conv1"][0].data.shape) * 0.05
donor.params["score_fr"][1].data[...] = [0.1, 0.2, 0.3]
moved = []
for layer_name, blobs in donor.params.items():
    for i, blob in enumerate(blobs):
        solver.net.params[layer_name][i].data.flat = blob.data.flat
        moved.append("%s/%d" % (layer_name, i))
print("moved", " ".join(moved))
assert (solver.net.params["conv1"][0].data == donor.params["conv1"][0].data).all()
assert (solver.net.params["score_fr"][1].data == np.float32([0.1, 0.2, 0.3])).all()


def bilinear_kernel(size):
    """Outer product of a triangle centred on the kernel (the upsampling filter)."""
    half = (size + 1) // 2
    centre = half - 1 if size % 2 else half - 0.5
    tri = 1 - np.abs(np.arange(size) - centre) / half
    return np.outer(tri, tri)


for name in [k for k in solver.net.params if "up" in k]:
    n_out, n_in, kh, _ = solver.net.params[name][0].data.shape
    solver.net.params[name][0].data[range(n_out), range(n_in), :, :] = bilinear_kernel(kh)

sizes = []
for _ in range(3):
    solver.step(1)
    sizes.append(solver.net.blobs["data"].data.shape[2:])
    assert solver.net.blobs["score"].data.shape[2:] == sizes[-1]
    assert np.isfinite(solver.net.blobs["loss"].data).all()
print("train sizes", sizes, "iter", solver.iter)
kernel = solver.net.params["upscore"][0].data
assert np.allclose(kernel[1, 1], bilinear_kernel(4)) and not kernel[1, 0].any()

test_net = solver.test_nets[0]
test_net.share_with(solver.net)
assert np.shares_memory(test_net.params["conv1"][0].data, solver.net.params["conv1"][0].data)
confusion, total_loss = np.zeros((3, 3), np.int64), 0.0
for name in np.loadtxt(os.path.join(out_dir, "val.txt"), dtype=str):
    test_net.forward()
    truth = test_net.blobs["label"].data[0, 0].astype(int).ravel()
    guess = test_net.blobs["score"].data[0].argmax(axis=0).ravel()
    assert test_net.blobs["data"].data.shape[2:] == np.load(os.path.join(out_dir, name + "_cls.npy")).shape
    keep = truth < 3
    np.add.at(confusion, (truth[keep], guess[keep]), 1)
    total_loss += float(test_net.blobs["loss"].data.flat[0])
print("scored pixels", int(confusion.sum()), "loss finite", bool(np.isfinite(total_loss)))

"""The timing hooks of Caffe's python/train.py (its ``time(solver, nccl)``) on one solver:
a caffe.Timer per layer started and stopped from net.before_forward/after_forward/
before_backward/after_backward, solver.add_callback pairs, solver.param.display,
solver.net._layer_names, caffe.log; and NCCL as a CPU build of Caffe has it.

    python -m engine run train_timing.py WORKDIR
"""
import os
import sys

import caffe

workdir = sys.argv[1]
with open(os.path.join(workdir, "net.prototxt"), "w") as f:
    f.write("""
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 4 dim: 5 } shape { dim: 4 }
    data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
""")
with open(os.path.join(workdir, "solver.prototxt"), "w") as f:
    f.write('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 4\ndisplay: 2\n'
            'snapshot_after_train: false\n' % os.path.join(workdir, "net.prototxt"))

caffe.init_log()
solver = caffe.SGDSolver(os.path.join(workdir, "solver.prototxt"))
events = []
fprop, bprop = [], []
total, allrd = caffe.Timer(), caffe.Timer()
for _ in range(len(solver.net.layers)):
    fprop.append(caffe.Timer())
    bprop.append(caffe.Timer())
display = solver.param.display


def show_time():
    if solver.iter % display == 0:
        s = "\n"
        for i in range(len(solver.net.layers)):
            s += "forw %3d %8s " % (i, solver.net._layer_names[i])
            s += ": %.2f\n" % fprop[i].ms
        for i in range(len(solver.net.layers) - 1, -1, -1):
            s += "back %3d %8s " % (i, solver.net._layer_names[i])
            s += ": %.2f\n" % bprop[i].ms
        s += "solver total: %.2f\n" % total.ms
        s += "allreduce: %.2f\n" % allrd.ms
        caffe.log(s)
        events.append(("shown", solver.iter))


solver.net.before_forward(lambda layer: (events.append(("bf", layer)), fprop[layer].start()))
solver.net.after_forward(lambda layer: fprop[layer].stop())
solver.net.before_backward(lambda layer: (events.append(("bb", layer)), bprop[layer].start()))
solver.net.after_backward(lambda layer: bprop[layer].stop())
solver.add_callback(lambda: (events.append(("start", solver.iter)), total.start()),
                    lambda: (total.stop(), allrd.start()))
solver.add_callback(lambda: "", lambda: (allrd.stop(), show_time()))
solver.step(solver.param.max_iter)

assert solver.iter == 4
assert [e for e in events if e[0] == "shown"] == [("shown", 0), ("shown", 2)]
first = events[:events.index(("start", 1))]
assert first == [("start", 0), ("bf", 0), ("bf", 1), ("bf", 2), ("bb", 2), ("bb", 1), ("bb", 0), ("shown", 0)], first
assert all(t.ms >= 0 for t in fprop + bprop + [total, allrd])
print("events per iteration", len(first), "layers", list(solver.net._layer_names))
print("has_nccl", caffe.has_nccl())
try:
    caffe.NCCL.new_uid()
except AttributeError as e:
    print("no NCCL:", type(e).__name__)

"""Per-layer timing hooks the way Caffe's python/train.py sets them up (``--timing``), on
one solver without NCCL.

Calls exercised: caffe.init_log() and caffe.log(); a caffe.Timer per layer started and
stopped from net.before_forward / after_forward / before_backward / after_backward;
solver.add_callback(on_start, on_gradients_ready) twice; solver.param.display and
max_iter; solver.net._layer_names; Timer.ms; caffe.has_nccl() and caffe.NCCL.new_uid()
as a Caffe built without NCCL has them.

    python -m engine run train_timing.py WORKDIR
"""
import os
import sys

import caffe

out_dir = sys.argv[1]
model = os.path.join(out_dir, "net.prototxt")
with open(model, "w") as f:
    f.write("""
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 4 dim: 5 } shape { dim: 4 }
    data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
""")
with open(os.path.join(out_dir, "solver.prototxt"), "w") as f:
    f.write('net: "%s"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 4\ndisplay: 2\n'
            'snapshot_after_train: false\n' % model)

caffe.init_log()
solver = caffe.SGDSolver(os.path.join(out_dir, "solver.prototxt"))
net = solver.net
trace = []
forward_t = [caffe.Timer() for _ in net.layers]
backward_t = [caffe.Timer() for _ in net.layers]
step_t, reduce_t = caffe.Timer(), caffe.Timer()


def report():
    if solver.iter % solver.param.display:
        return
    lines = ["forward %d %s: %.2f ms" % (i, name, forward_t[i].ms) for i, name in enumerate(net._layer_names)]
    lines += ["backward %d %s: %.2f ms" % (i, net._layer_names[i], backward_t[i].ms)
              for i in reversed(range(len(net.layers)))]
    lines += ["step: %.2f ms" % step_t.ms, "reduce: %.2f ms" % reduce_t.ms]
    caffe.log("\n".join(lines))
    trace.append(("report", solver.iter))


def begin_forward(i):
    trace.append(("forward", i))
    forward_t[i].start()


def begin_backward(i):
    trace.append(("backward", i))
    backward_t[i].start()


net.before_forward(begin_forward)
net.after_forward(lambda i: forward_t[i].stop())
net.before_backward(begin_backward)
net.after_backward(lambda i: backward_t[i].stop())
solver.add_callback(lambda: (trace.append(("start", solver.iter)), step_t.start()),
                    lambda: (step_t.stop(), reduce_t.start()))
solver.add_callback(lambda: None, lambda: (reduce_t.stop(), report()))
solver.step(solver.param.max_iter)

assert solver.iter == 4
assert [t for t in trace if t[0] == "report"] == [("report", 0), ("report", 2)]
first = trace[:trace.index(("start", 1))]
assert first == [("start", 0), ("forward", 0), ("forward", 1), ("forward", 2), ("backward", 2), ("backward", 1),
                 ("backward", 0), ("report", 0)], first
assert all(t.ms >= 0 for t in forward_t + backward_t + [step_t, reduce_t])
print("hooks per iteration", len(first), "layers", list(net._layer_names))
print("has_nccl", caffe.has_nccl())
try:
    caffe.NCCL.new_uid()
except AttributeError as e:
    print("no NCCL:", type(e).__name__)

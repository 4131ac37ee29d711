"""Engine speed and memory against PyTorch on the same nets.

    python benchmarks/run.py [--quick] [--gpu | --no-gpu] [--nets lenet,resnet50]
                             [--repeat N] [--threads N] [--out results.json]

For each net (LeNet, the tiny ResNet, the siamese net, CaffeNet, GoogLeNet,
ResNet-50 and ResNet-152 from ``benchmarks/netgen.py``; ResNet-50 and MobileNet v2
deploy, from the same file, at batch 1 and 8 on the CPU: one row each) and each device
(CPU; GPU where CuPy sees one), one worker process:

1. writes the prototxt with the benchmark's batch (deploy nets get
   ``force_backward: true`` and a fixed gradient on their output), initialises
   it, gives its weights random values of a trained net's scale and saves them
   as a caffemodel;
2. measures the engine's peak memory in one forward+backward (tracemalloc on
   the CPU, a CuPy memory-pool hook on the GPU) against the sum of the blobs'
   data and diffs and the params' data and diffs;
3. times Init without and with the weights (``Net(prototxt, phase[, weights])``);
4. builds the same net in PyTorch (``benchmarks/torch_ref.py``) with the
   engine's weights, checks every blob, the param gradients and the input
   gradients against the engine's (relative error <= 1e-4 for data, 1e-3 for
   gradients, relative to the array's largest magnitude);
5. times, interleaved (engine, torch, engine, ...) so both see the same machine
   load: forward, backward, forward+backward, and the engine's forward+backward
   with a full debug ``Recorder`` attached (one Recorder kept across the rounds, as
   a session keeps it).  Medians; ratios are engine / torch from the same run, and
   the records' overhead the median of the per-round ratios.

Threads: the engine's BLAS thread count (threadpoolctl), also given to
``torch.set_num_threads``; ``--threads N`` limits both.  GPU: TF32 off.

Writes JSON (``--out``, default ``benchmarks/results.json``) and prints a table.
"""
import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

SHARED_ZOO = os.path.join(os.path.dirname(ROOT), "shared", "zoo", "models")

# name: source, phase, how backward starts, batches {quick CPU, full CPU, GPU}.
NETS = {
    "lenet": dict(path=os.path.join(ROOT, "examples/lenet/lenet_train_test.prototxt"), phase="TRAIN",
                  batch=dict(quick=64, full=64, gpu=64)),
    "resnet_tiny": dict(path=os.path.join(ROOT, "examples/resnet_tiny/resnet_tiny.prototxt"), phase="TRAIN",
                        batch=dict(quick=8, full=32, gpu=64)),
    "siamese": dict(path=os.path.join(ROOT, "examples/shared_stages/siamese_stages.prototxt"), phase="TRAIN",
                    batch=dict(quick=16, full=64, gpu=64)),
    "cifar10_quick": dict(path=os.path.join(os.path.dirname(SHARED_ZOO), "examples/cifar10/"
                                            "cifar10_quick_train_test.input.prototxt"), phase="TRAIN",
                          batch=dict(quick=100, full=100, gpu=100)),
    "caffenet": dict(path=os.path.join(SHARED_ZOO, "bvlc_reference_caffenet/deploy.prototxt"), phase="TEST",
                     batch=dict(quick=4, full=10, gpu=64)),
    "googlenet": dict(path=os.path.join(SHARED_ZOO, "bvlc_googlenet/deploy.prototxt"), phase="TEST",
                      batch=dict(quick=2, full=8, gpu=32)),
    "resnet50": dict(gen=50, phase="TRAIN", batch=dict(quick=1, full=4, gpu=32)),
    "resnet152": dict(gen=152, phase="TRAIN", batch=dict(quick=1, full=2, gpu=16)),
    # Issue 24: deploy nets (TEST, force_backward) at batch 1 and 8, one row each.
    "resnet50_deploy": dict(gen=50, phase="TEST", batches=(1, 8), batch=dict(gpu=32)),
    "mobilenet_v2": dict(gen="mobilenet_v2", phase="TEST", batches=(1, 8), batch=dict(gpu=32)),
}

TIMED = ("forward", "backward", "forward_backward")
MAX_ROUNDS = 25


# ====================================================================== helpers
def blas_threads():
    try:
        from threadpoolctl import threadpool_info
        for info in threadpool_info():
            if info.get("user_api") == "blas" and "numpy" in info.get("filepath", ""):
                return int(info["num_threads"])
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                return int(info["num_threads"])
    except Exception:
        pass
    return os.cpu_count() or 1


def median(xs):
    return float(statistics.median(xs)) if xs else float("nan")


def _now():
    return time.perf_counter()


def net_param(spec, batch):
    """The benchmark's NetParameter: the batch set on every Input shape;
    deploy nets (no loss) get force_backward."""
    from engine.core.upgrade import read_net_params
    if spec.get("gen") == "mobilenet_v2":
        from benchmarks.netgen import mobilenet_v2
        p = mobilenet_v2(batch=batch)
    elif "gen" in spec:
        from benchmarks.netgen import resnet
        p = resnet(spec["gen"], batch=batch, train=spec["phase"] == "TRAIN", fillers=False)
    else:
        p = read_net_params(spec["path"])
    for lp in p.layer:
        if lp.type == "Input":
            for s in lp.input_param.shape:
                if len(s.dim):
                    s.dim[0] = batch
    if not any(lp.type.endswith("Loss") for lp in p.layer):
        p.force_backward = True
    return p


def randomize_weights(net, rng):
    """Weights of a trained net's scale: He-normal conv/IP weights, small biases,
    BatchNorm statistics of unit-variance data, Scale near identity."""
    for layer in net.layers:
        t = layer.type
        for j, b in enumerate(layer.blobs):
            shape = b.shape
            if t == "BatchNorm":
                if j == 0:
                    b.data[...] = rng.normal(0, 0.1, shape)
                elif j == 1:
                    b.data[...] = rng.uniform(0.5, 1.5, shape)
                else:
                    b.data[...] = 1.0
            elif t == "Scale":
                b.data[...] = rng.uniform(0.8, 1.2, shape) if j == 0 else rng.normal(0, 0.05, shape)
            elif len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                b.data[...] = rng.normal(0, np.sqrt(2.0 / fan_in), shape)
            else:
                b.data[...] = rng.normal(0, 0.01, shape)


def calibrate_batchnorm(net, inputs):
    """Global-statistics BatchNorm (deploy nets) given the statistics of what reaches it
    from ``inputs`` ({blob: array}), as a trained net's running averages are: with random
    statistics the activations of a deep net grow layer after layer (MobileNet v2's linear
    bottlenecks: logits of 10^4, where float32 softmax is ill-conditioned)."""
    for n, a in inputs.items():
        net.blobs[n].data[...] = a
    for i, layer in enumerate(net.layers):
        if layer.type == "BatchNorm" and getattr(layer, "use_global_stats", False):
            x = net._blobs[net._bottom_id_vecs[i][0]].data
            x = x.reshape(x.shape[0], x.shape[1], -1).astype(np.float64)
            layer.blobs[0].data[...] = x.mean(axis=(0, 2))
            layer.blobs[1].data[...] = x.var(axis=(0, 2))
            layer.blobs[2].data[...] = 1.0
        net.ForwardFromTo(i, i)


def input_arrays(net, rng):
    """Random inputs: labels where a loss/accuracy layer reads them, else N(0, 1)."""
    roles = {}
    for i, layer in enumerate(net.layers):
        bids = net._bottom_id_vecs[i]
        if layer.type in ("SoftmaxWithLoss", "Accuracy") and len(bids) > 1:
            classes = net._blobs[bids[0]].shape[getattr(layer, "axis", 1)]
            roles[net._blob_names[bids[1]]] = ("label", classes)
        elif layer.type == "ContrastiveLoss":
            roles[net._blob_names[bids[2]]] = ("label", 2)
    out = {}
    for name in net.inputs:
        shape = net.blobs[name].shape
        role = roles.get(name)
        if role:
            out[name] = rng.integers(0, role[1], shape).astype(np.float32)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def blob_bytes(net):
    """Sum of the distinct blobs' data and diff buffers and the params' data and diff."""
    seen, total = set(), 0
    blobs = list(net._blobs) + [b for l in net.layers for b in l.blobs]
    for b in blobs:
        for mem in (b.data_memory, b.diff_memory):
            if id(mem) not in seen:
                seen.add(id(mem))
                total += b.count * b.dtype.itemsize
    return total


class _GpuPeak:
    """Peak bytes in use in CuPy's memory pool while active (untested here: no GPU)."""

    def __init__(self):
        import cupy
        self.cupy = cupy
        self.pool = cupy.get_default_memory_pool()
        self.hook = None
        try:
            outer = self

            class Hook(cupy.cuda.MemoryHook):
                name = "bench_peak"

                def malloc_postprocess(self, **kw):
                    outer.cur += kw["mem_size"]
                    outer.peak = max(outer.peak, outer.cur)

                def free_postprocess(self, **kw):
                    outer.cur -= kw["mem_size"]
            self.hook = Hook()
        except Exception:
            self.hook = None

    def __enter__(self):
        self.cupy.cuda.Device().synchronize()
        self.cur = self.peak = self.pool.used_bytes()
        if self.hook is not None:
            self.hook.__enter__()
        return self

    def __exit__(self, *exc):
        self.cupy.cuda.Device().synchronize()
        if self.hook is not None:
            self.hook.__exit__(*exc)
        self.peak = max(self.peak, self.pool.used_bytes())


# ====================================================================== worker
class Bench:
    def __init__(self, name, spec, device, batch, repeat, threads):
        import engine
        from engine.core import backend
        self.engine, self.backend = engine, backend
        self.name, self.spec, self.device, self.batch = name, spec, device, batch
        self.repeat = repeat
        self.threads = threads
        self.phase = engine.TRAIN if spec["phase"] == "TRAIN" else engine.TEST
        self.rng = np.random.default_rng(1234)
        self.tmp = tempfile.mkdtemp(prefix="bench_%s_" % name)
        self.gpu = device == "gpu"
        self.result = dict(net=name, device=device, batch=batch, phase=spec["phase"], threads=threads)

    def sync(self):
        if self.gpu:
            self.backend.synchronize()
            import torch
            torch.cuda.synchronize()

    # ---------------------------------------------------------------- setup
    def prepare(self):
        from google.protobuf import text_format

        from engine.core.net import Net
        param = net_param(self.spec, self.batch)
        self.prototxt = os.path.join(self.tmp, "net.prototxt")
        with open(self.prototxt, "w") as f:
            f.write(text_format.MessageToString(param))
        net = Net(self.prototxt, self.phase)
        randomize_weights(net, self.rng)
        self.inputs = input_arrays(net, self.rng)
        if self.phase == self.engine.TEST:
            calibrate_batchnorm(net, self.inputs)
        self.weights = os.path.join(self.tmp, "net.caffemodel")
        net.save(self.weights)
        self.result.update(layers=len(net.layers), blobs=len(net.blob_names),
                           params=int(sum(b.count for b in net.learnable_params)),
                           caffemodel_mb=os.path.getsize(self.weights) / 2 ** 20)
        self.force = bool(net.param.force_backward) and not any(
            l.type.endswith("Loss") for l in net.layers)
        del net
        gc.collect()

    def make_net(self):
        from engine.core.net import Net
        net = Net(self.prototxt, self.phase, weights=self.weights)
        for n, a in self.inputs.items():
            net.blobs[n].data[...] = a
        if self.force:
            self.out_grads = {}
            for n in net.outputs:
                g = self.rng.standard_normal(net.blobs[n].shape).astype(np.float32) * 1e-2
                self.out_grads[n] = g
        return net

    # ---------------------------------------------------------------- engine steps
    def e_forward(self, net):
        net.ForwardFromTo(0, len(net.layers) - 1)

    def e_backward(self, net):
        if self.force:
            for n, g in self.out_grads.items():
                net.blobs[n].diff[...] = g
        net.BackwardFromTo(len(net.layers) - 1, 0)

    # ---------------------------------------------------------------- memory
    def memory(self):
        """Peak bytes of one forward+backward of a fresh net, against the blobs' and params'
        data and diff plus the buffers Caffe's layers keep (``caffe_workspace_bytes``), and
        where the difference goes: the engine's shared workspaces (by name) and the rest
        (temporaries inside layers).  Compiled kernels are loaded first and the workspaces
        emptied, so code loading is not counted and the workspaces are."""
        from engine.core.layers import base
        from engine.instruments.analysis import caffe_workspace_bytes
        warm = self.make_net()
        self.e_forward(warm)
        self.e_backward(warm)
        del warm
        base._WORK.__dict__.get("arrays", {}).clear()
        gc.collect()
        if self.gpu:
            from engine.core import backend
            backend.set_mode_gpu()
            net = self.make_net()
            self.e_forward(net)      # warm: kernels compiled, buffers made
            self.e_backward(net)
            with _GpuPeak() as pk:
                net.ClearParamDiffs()
                self.e_forward(net)
                self.e_backward(net)
            peak = pk.peak
        else:
            tracemalloc.start()
            net = self.make_net()
            tracemalloc.reset_peak()
            self.e_forward(net)
            self.e_backward(net)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        ref = blob_bytes(net)
        caffe_ws = sum(caffe_workspace_bytes(net).values())
        ws = {k[0]: int(a.nbytes) for k, a in base._WORK.__dict__.get("arrays", {}).items() if a is not None}
        self.result["memory"] = dict(peak_bytes=int(peak), blob_bytes=int(ref), caffe_workspace_bytes=int(caffe_ws),
                                     ratio=peak / ref if ref else float("nan"),
                                     ratio_caffe=peak / (ref + caffe_ws) if ref else float("nan"),
                                     engine_workspace_bytes=int(sum(ws.values())), engine_workspaces=ws,
                                     other_bytes=int(peak - ref - sum(ws.values())),
                                     method="cupy pool hook" if self.gpu else "tracemalloc")
        del net
        gc.collect()

    def init_times(self, n):
        """Wall and CPU (process) time of Init; the CPU time is what the machine's
        other load inflates least (Init is single-threaded)."""
        from engine.core.net import Net
        plain, weighted, plain_cpu, weighted_cpu = [], [], [], []
        for _ in range(n):
            gc.collect()
            t, c = _now(), time.process_time()
            net = Net(self.prototxt, self.phase)
            plain.append(_now() - t)
            plain_cpu.append(time.process_time() - c)
            del net
            gc.collect()
            t, c = _now(), time.process_time()
            net = Net(self.prototxt, self.phase, weights=self.weights)
            weighted.append(_now() - t)
            weighted_cpu.append(time.process_time() - c)
            del net
        self.result["init_s"] = median(plain)
        self.result["init_weights_s"] = median(weighted)
        self.result["init_cpu_s"] = median(plain_cpu)
        self.result["init_weights_cpu_s"] = median(weighted_cpu)

    # ---------------------------------------------------------------- torch
    def build_torch(self, net):
        import torch

        from benchmarks import torch_ref
        dev = "cuda" if self.gpu else "cpu"
        torch_ref.configure_torch(self.threads, dev)
        tnet = torch_ref.TorchNet(net, dev)
        self.t_inputs = tnet.feed(self.inputs)
        self.t_grads = None
        if self.force:
            self.t_grads = {n: torch.tensor(g, device=dev) for n, g in self.out_grads.items()}
        self.grad_inputs = [n for n in net.inputs if self.force]
        return tnet

    def check(self, net, tnet):
        from benchmarks import torch_ref
        net.ClearParamDiffs()
        self.e_forward(net)
        self.e_backward(net)
        tnet.zero_grad()
        env = tnet.forward(self.t_inputs, self.grad_inputs)
        tnet.backward(env, self.t_grads)
        self.sync()
        fails, worst, ill = torch_ref.compare(net, tnet, env, self.grad_inputs)
        ref_used = False
        if fails:
            # Past the plain tolerance: judge against a float64 PyTorch run.
            import torch
            t64 = torch_ref.TorchNet(net, tnet.device, torch.float64)
            in64 = t64.feed(self.inputs)
            g64 = {n: g.double() for n, g in self.t_grads.items()} if self.t_grads else None
            # The engine ran its forward already: BatchNorm's running stats moved,
            # but the float64 net reads batch statistics in TRAIN, global ones in TEST
            # (not moved in TEST), so it computes the same function.
            env64 = t64.forward(in64, self.grad_inputs)
            t64.backward(env64, g64)
            fails, worst, ill = torch_ref.compare(net, tnet, env, self.grad_inputs, ref=(t64, env64))
            ref_used = True
            del t64, env64
        if fails:
            # Past the float64 judge: the same with the engine's ReLU masks (ties at 0).
            import torch
            t64 = torch_ref.TorchNet(net, tnet.device, torch.float64)
            tm = torch_ref.TorchNet(net, tnet.device, torch.float64, engine_relu_masks=True)
            g64 = {n: g.double() for n, g in self.t_grads.items()} if self.t_grads else None
            env64 = t64.forward(t64.feed(self.inputs), self.grad_inputs)
            t64.backward(env64, g64)
            envm = tm.forward(tm.feed(self.inputs), self.grad_inputs)
            tm.backward(envm, g64)
            fails, worst, ill = torch_ref.compare(net, tnet, env, self.grad_inputs, ref=(t64, env64),
                                                  ref_masked=(tm, envm))
            del t64, env64, tm, envm
        self.result["check"] = dict(ok=not fails, worst=worst[0], worst_rel_err=worst[1],
                                    float64_reference=ref_used,
                                    failures=[list(f) for f in fails[:10]],
                                    ill_conditioned=[list(f) for f in ill])

    def t_forward(self, tnet):
        import torch
        with torch.no_grad():
            tnet.forward(self.t_inputs)

    # ---------------------------------------------------------------- timing
    def timings(self, net, tnet):
        from engine.instruments.debug import Recorder
        e = {k: [] for k in TIMED + ("forward_backward_debug",)}
        rec = None
        t = {k: [] for k in TIMED}
        sync = self.sync

        def timed(fn, *a):
            sync()
            t0 = _now()
            fn(*a)
            sync()
            return _now() - t0

        def e_fb():
            self.e_forward(net)
            self.e_backward(net)

        def t_fb():
            env = tnet.forward(self.t_inputs)
            tnet.backward(env, self.t_grads)

        # Small nets get more rounds (at least ~1 s of engine forward+backward in all),
        # since a millisecond step is at the mercy of the machine's other load.
        sync()
        t0 = _now()
        e_fb()
        one = max(_now() - t0, 1e-4)
        rounds = self.repeat if one > 0.25 else min(MAX_ROUNDS, max(self.repeat, int(1.0 / one)))
        self.result["rounds"] = rounds
        for it in range(rounds + 1):           # the first round warms up
            keep = it > 0
            # forward
            x = timed(self.e_forward, net)
            y = timed(self.t_forward, tnet)
            if keep:
                e["forward"].append(x)
                t["forward"].append(y)
            # backward alone (after an untimed forward)
            net.ClearParamDiffs()
            self.e_forward(net)
            x = timed(self.e_backward, net)
            tnet.zero_grad()
            env = tnet.forward(self.t_inputs)
            sync()
            y = timed(tnet.backward, env, self.t_grads)
            del env
            if keep:
                e["backward"].append(x)
                t["backward"].append(y)
            # forward + backward
            net.ClearParamDiffs()
            x = timed(e_fb)
            tnet.zero_grad()
            y = timed(t_fb)
            if keep:
                e["forward_backward"].append(x)
                t["forward_backward"].append(y)
            # forward + backward with full debug records
            net.ClearParamDiffs()
            if rec is None:
                rec = Recorder(net)         # kept across rounds, as a session keeps it
            elif rec not in net.debug_observers:
                net.debug_observers.append(rec)
            x = timed(e_fb)
            rec.detach()
            if keep:
                e["forward_backward_debug"].append(x)
        med_e = {k: median(v) for k, v in e.items()}
        med_t = {k: median(v) for k, v in t.items()}
        self.result["engine_s"] = med_e
        self.result["torch_s"] = med_t
        # Ratio: the median of the per-round ratios (engine and torch ran back to
        # back in each round, so they saw the same machine load).
        self.result["ratio"] = {k: median([x / y for x, y in zip(e[k], t[k])]) for k in TIMED}
        self.result["debug_overhead"] = median([x / y for x, y in zip(e["forward_backward_debug"],
                                                                       e["forward_backward"])]) - 1.0
        self.result["samples"] = {"engine": e, "torch": t}

    def run(self, init_repeat, memory_only=False):
        if self.gpu:
            self.backend.set_mode_gpu()
        self.prepare()
        self.memory()
        if memory_only:
            return self.result
        if self.gpu:
            self.backend.set_mode_cpu()
        self.init_times(init_repeat)
        if self.gpu:
            self.backend.set_mode_gpu()
        net = self.make_net()
        tnet = self.build_torch(net)
        self.check(net, tnet)
        self.timings(net, tnet)
        return self.result


def worker_main(a):
    import torch

    import engine.core.kernels.blas  # noqa: F401  (loads SciPy's BLAS too, before limiting threads)
    from engine.core import backend
    if a.threads:
        from threadpoolctl import threadpool_limits
        threadpool_limits(a.threads, user_api="blas")
    threads = blas_threads()
    torch.set_num_threads(threads)
    spec = NETS[a.worker]
    res = dict(net=a.worker, device=a.device)
    try:
        if a.device == "gpu" and not backend.gpu_available():
            raise RuntimeError("no GPU")
        b = Bench(a.worker, spec, a.device, a.batch, a.repeat, threads)
        res = b.run(a.init_repeat, a.memory_only)
    except Exception as exc:  # reported, not fatal to the whole run
        import traceback
        res.update(error="%s: %s" % (type(exc).__name__, exc), traceback=traceback.format_exc())
    with open(a.result, "w") as f:
        json.dump(res, f)


# ====================================================================== driver
def _fmt_s(v):
    if v is None or v != v:
        return "-"
    return "%.1f ms" % (v * 1e3) if v < 1 else "%.2f s" % v


def _fmt_mb(v):
    return "%.0f MB" % (v / 2 ** 20) if v >= 2 ** 20 else "%.1f MB" % (v / 2 ** 20)


def table(results):
    head = ("net", "dev", "batch", "check", "init", "init+w (cpu)", "fwd e/t", "bwd e/t", "fwd+bwd e/t",
            "ratio f/b/fb", "debug", "mem peak/(blobs+caffe ws)")
    rows = [head]
    for r in results:
        if "error" in r:
            rows.append((r["net"], r["device"], "-", "ERROR", r["error"][:60]) + ("",) * (len(head) - 5))
            continue
        es, ts, ra = r["engine_s"], r["torch_s"], r["ratio"]
        chk = r["check"]
        mem = r["memory"]
        rows.append((
            r["net"], r["device"], str(r["batch"]),
            ("ok %.0e" if chk["ok"] else "FAIL %.0e") % chk["worst_rel_err"],
            _fmt_s(r["init_s"]), "%s (%s)" % (_fmt_s(r["init_weights_s"]), _fmt_s(r["init_weights_cpu_s"])),
            "%s/%s" % (_fmt_s(es["forward"]), _fmt_s(ts["forward"])),
            "%s/%s" % (_fmt_s(es["backward"]), _fmt_s(ts["backward"])),
            "%s/%s" % (_fmt_s(es["forward_backward"]), _fmt_s(ts["forward_backward"])),
            "%.2f/%.2f/%.2f" % (ra["forward"], ra["backward"], ra["forward_backward"]),
            "%+.0f%%" % (100 * r["debug_overhead"]),
            "%s/%s=%.2f" % (_fmt_mb(mem["peak_bytes"]),
                            _fmt_mb(mem["blob_bytes"] + mem.get("caffe_workspace_bytes", 0)),
                            mem.get("ratio_caffe", mem["ratio"])),
        ))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = []
    for k, row in enumerate(rows):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def memory_table(results):
    """Peak memory of each net against blobs + params + Caffe's workspace, and where the rest goes."""
    lines = ["%-14s %-4s %6s %9s %9s %9s %7s %9s %9s  %s" % ("net", "dev", "batch", "peak", "blobs", "caffe ws",
                                                          "ratio", "engine ws", "other", "largest workspaces")]
    for r in results:
        m = r.get("memory")
        if not m:
            lines.append("%-14s %-4s ERROR %s" % (r["net"], r["device"], r.get("error", "?")))
            continue
        ws = sorted(m.get("engine_workspaces", {}).items(), key=lambda kv: -kv[1])[:3]
        lines.append("%-14s %-4s %6s %9s %9s %9s %7.2f %9s %9s  %s" % (
            r["net"], r["device"], r.get("batch", "-"), _fmt_mb(m["peak_bytes"]), _fmt_mb(m["blob_bytes"]),
            _fmt_mb(m.get("caffe_workspace_bytes", 0)), m.get("ratio_caffe", m["ratio"]),
            _fmt_mb(m.get("engine_workspace_bytes", 0)), _fmt_mb(m.get("other_bytes", 0)),
            ", ".join("%s %s" % (k, _fmt_mb(v)) for k, v in ws)))
    return "\n".join(lines)


def markdown(results):
    """The table as Markdown (for benchmarks/README.md)."""
    out = ["| net | device | batch | layers | check | Init | Init + weights (CPU) | fwd engine / torch | "
           "bwd engine / torch | fwd+bwd engine / torch | **ratio fwd / bwd / fwd+bwd** | debug records | "
           "memory peak / (blobs + Caffe's workspace) |", "|" + "---|" * 13]
    for r in results:
        if "error" in r:
            out.append("| %s | %s | | | ERROR: %s |%s" % (r["net"], r["device"], r["error"][:80], " |" * 8))
            continue
        es, ts, ra, chk, mem = r["engine_s"], r["torch_s"], r["ratio"], r["check"], r["memory"]
        c = "ok %.0e" % chk["worst_rel_err"] if chk["ok"] else "FAIL"
        if chk["ok"] and chk.get("float64_reference"):
            c = "ok (float64 judge%s)" % ("; %d ill-conditioned" % len(chk["ill_conditioned"])
                                          if chk["ill_conditioned"] else "")
        out.append("| %s | %s | %d | %d | %s | %s | %s (%s) | %s / %s | %s / %s | %s / %s | "
                   "%.2f / %.2f / **%.2f** | %+.0f%% | %s / %s = %.2f |" % (
                       r["net"], r["device"], r["batch"], r["layers"], c, _fmt_s(r["init_s"]),
                       _fmt_s(r["init_weights_s"]), _fmt_s(r["init_weights_cpu_s"]),
                       _fmt_s(es["forward"]), _fmt_s(ts["forward"]), _fmt_s(es["backward"]),
                       _fmt_s(ts["backward"]), _fmt_s(es["forward_backward"]), _fmt_s(ts["forward_backward"]),
                       ra["forward"], ra["backward"], ra["forward_backward"], 100 * r["debug_overhead"],
                       _fmt_mb(mem["peak_bytes"]), _fmt_mb(mem["blob_bytes"] + mem.get("caffe_workspace_bytes", 0)),
                       mem.get("ratio_caffe", mem["ratio"])))
    return "\n".join(out)


def targets(results):
    """The issue's targets, met or missed."""
    out = []
    for r in results:
        if "error" in r:
            continue
        # Issue 24: every net at PyTorch's pace or faster on the CPU (issue 16 allowed small
        # nets 1.1x and big ones 1.5x); the GPU keeps issue 16's 1.2x until one has been measured.
        lim_fb = 1.2 if r["device"] == "gpu" else 1.0
        name = r["net"] + (" b%d" % r["batch"] if "batches" in NETS.get(r["net"], {}) else "")
        out.append(dict(target="%s %s fwd+bwd <= %.1fx torch" % (name, r["device"], lim_fb),
                        value=r["ratio"]["forward_backward"], met=r["ratio"]["forward_backward"] <= lim_fb))
        lim_dbg = 0.30
        out.append(dict(target="%s %s full debug records <= +%d%%" % (name, r["device"], lim_dbg * 100),
                        value=r["debug_overhead"], met=r["debug_overhead"] <= lim_dbg))
        mem = r["memory"]
        rc = mem.get("ratio_caffe", mem["ratio"])
        out.append(dict(target="%s %s memory peak <= 1.3x (blobs + Caffe's workspace)" % (name, r["device"]),
                        value=rc, met=rc <= 1.3))
        if r["net"] == "resnet152" and r["device"] == "cpu":
            out.append(dict(target="resnet152 Init with weights < 1 s (wall)", value=r["init_weights_s"],
                            met=r["init_weights_s"] < 1.0))
            out.append(dict(target="resnet152 Init with weights < 1 s (CPU time)",
                            value=r["init_weights_cpu_s"], met=r["init_weights_cpu_s"] < 1.0))
    return out


def _run_worker(a, n, dev, batch, repeat, init_repeat):
    """One worker process: net ``n`` on ``dev`` at ``batch``; its result (an error entry when
    the worker gave none)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        res_path = f.name
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", n, "--device", dev,
           "--batch", str(batch), "--repeat", str(repeat), "--init-repeat", str(init_repeat),
           "--result", res_path]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    if a.memory_only:
        cmd += ["--memory-only"]
    env = dict(os.environ)
    if a.threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(a.threads)
    t0 = _now()
    proc = subprocess.run(cmd, cwd=ROOT, env=env)
    try:
        with open(res_path) as f:
            res = json.load(f)
    except Exception:
        res = dict(net=n, device=dev, batch=batch, error="worker exited with %d" % proc.returncode)
    os.unlink(res_path)
    res["wall_s"] = _now() - t0
    print("%-12s %-4s b%-3d done in %.0f s%s" % (n, dev, batch, res["wall_s"],
                                               ("  ERROR " + res["error"]) if "error" in res else ""),
          file=sys.stderr)
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small CPU batches and few repeats (~10 min)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpu", dest="gpu", action="store_true", default=None,
                   help="also run on the GPU (default: if one is seen)")
    g.add_argument("--no-gpu", dest="gpu", action="store_false", help="CPU only")
    g.add_argument("--gpu-only", dest="gpu", action="store_const", const="only", help="the GPU only")
    p.add_argument("--nets", default=",".join(NETS), help="comma-separated subset of: " + ", ".join(NETS))
    p.add_argument("--repeat", type=int, help="timed repeats per measurement (default 5, --quick 3)")
    p.add_argument("--init-repeat", type=int, help="Init repeats (default 3)")
    p.add_argument("--batch", type=int, help="override every net's batch")
    p.add_argument("--threads", type=int, help="limit the engine's BLAS and torch's threads")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results.json"))
    p.add_argument("--memory-only", action="store_true", help="only the memory measurement (no torch, no timings)")
    p.add_argument("--markdown", metavar="JSON", help="print the table of a results file as Markdown and exit")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.markdown:
        with open(a.markdown) as f:
            print(markdown(json.load(f)["results"]))
        return
    if a.worker:
        a.repeat = a.repeat or 3
        a.init_repeat = a.init_repeat or 3
        return worker_main(a)
    repeat = a.repeat or (3 if a.quick else 5)
    init_repeat = a.init_repeat or 3
    from engine.core import backend
    gpu = backend.gpu_available() if a.gpu is None else a.gpu
    if a.gpu == "only" and not backend.gpu_available():
        print("--gpu-only: CuPy sees no CUDA device; nothing to run", file=sys.stderr)
        return 1
    if a.gpu and not backend.gpu_available():
        print("GPU requested but CuPy sees no CUDA device: GPU parts skipped", file=sys.stderr)
        gpu = False
    devices = ["gpu"] if gpu and a.gpu == "only" else ["cpu"] + (["gpu"] if gpu else [])
    names = [n.strip() for n in a.nets.split(",") if n.strip()]
    for n in names:
        if n not in NETS:
            p.error("unknown net %s (choose from %s)" % (n, ", ".join(NETS)))
    results = []
    t_start = _now()
    for dev in devices:
        for n in names:
            spec = NETS[n]
            if "path" in spec and not os.path.exists(spec["path"]):
                print("skipping %s: %s not found" % (n, spec["path"]), file=sys.stderr)
                continue
            if a.batch:
                batches = [a.batch]
            elif dev == "cpu" and "batches" in spec:      # one row per batch, quick or not
                batches = list(spec["batches"])
            else:
                batches = [spec["batch"]["gpu" if dev == "gpu" else ("quick" if a.quick else "full")]]
            for batch in batches:
                results.append(_run_worker(a, n, dev, batch, repeat, init_repeat))
    if a.memory_only:
        print(memory_table(results))
        with open(a.out, "w") as f:
            json.dump(dict(when=time.strftime("%Y-%m-%d %H:%M:%S"), memory_only=True, results=results), f, indent=1)
        return 0
    report = dict(
        when=time.strftime("%Y-%m-%d %H:%M:%S"), quick=a.quick, repeat=repeat, threads=a.threads,
        load_average=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        machine=dict(platform=platform.platform(), python=platform.python_version(), cpus=os.cpu_count(),
                     numpy=np.__version__, gpu=gpu),
        total_s=_now() - t_start, results=results, targets=targets(results))
    try:
        import torch
        report["machine"]["torch"] = torch.__version__
    except ImportError:
        pass
    if not gpu:
        report["gpu_note"] = "no GPU seen by CuPy: GPU figures need a GPU machine"
    try:   # keep what other tools wrote beside the table (records, gpu_selftest, before_after)
        with open(a.out) as f:
            kept = {k: v for k, v in json.load(f).items() if k not in report and k != "gpu_note"}
    except (OSError, ValueError):
        kept = {}
    report.update(kept)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(table(results))
    print()
    for t in report["targets"]:
        print("%-4s %-48s %s" % ("MET" if t["met"] else "MISS", t["target"],
                                 ("%.3f" % t["value"]) if isinstance(t["value"], float) else t["value"]))
    if not gpu:
        print("\nGPU: none seen by CuPy; GPU parts skipped.")
    print("\nJSON: %s (total %.0f s)" % (a.out, report["total_s"]))


if __name__ == "__main__":
    sys.exit(main())

"""``caffe time``: per-layer forward and backward averages (tools/caffe.cpp ``time()``).

    result = time_net(net, iterations=50)       # logs caffe.cpp's lines on "engine.caffe"
    result.layers        # [LayerTime(name, type, forward_ms, backward_ms)] (averages)
    result.summary_lines()   # "Average time per layer: " ... "*** Benchmark ends ***"

As Caffe: one clean Forward (logging "Initial loss") and Backward first, then
``iterations`` times every layer's Forward in order and every layer's Backward
in reverse order (all layers, with the net's bottom_need_backward, as
caffe.cpp calls them), timing each layer (``warmup`` extra untimed passes may
precede them).  On the GPU each layer's time is taken between device
synchronisations, so it is the layer's GPU time plus launch overhead (Caffe
times GPU layers with CUDA events).  Numbers are printed as C++ streams print
a double (``%g``).
"""
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, List, Optional

import numpy as np

from engine.core import backend
from engine.core.errors import CaffeError
from engine.core.log import num

log = logging.getLogger("engine.caffe")


@dataclass
class LayerTime:
    name: str
    type: str
    forward_ms: float
    backward_ms: float


@dataclass
class TimingResult:
    iterations: int
    device: str
    layers: List[LayerTime] = field(default_factory=list)
    forward_ms: float = 0.0          # average forward pass
    backward_ms: float = 0.0         # average backward pass
    forward_backward_ms: float = 0.0  # total time / iterations
    total_ms: float = 0.0
    iteration_ms: List[float] = field(default_factory=list)
    initial_loss: Optional[float] = None

    def summary_lines(self):
        """caffe.cpp's lines from "Average time per layer: " to "*** Benchmark ends ***"."""
        out = ["Average time per layer: "]
        for l in self.layers:
            out.append("%10s\tforward: %s ms." % (l.name, num(l.forward_ms)))
            out.append("%10s\tbackward: %s ms." % (l.name, num(l.backward_ms)))
        out.append("Average Forward pass: %s ms." % num(self.forward_ms))
        out.append("Average Backward pass: %s ms." % num(self.backward_ms))
        out.append("Average Forward-Backward: %s ms." % num(self.forward_backward_ms))
        out.append("Total Time: %s ms." % num(self.total_ms))
        out.append("*** Benchmark ends ***")
        return out

    def to_dict(self):
        return asdict(self)


def time_net(net, iterations=50, warmup=0, progress: Optional[Callable[[int, int], None]] = None,
             logger=None):
    """Benchmark ``net`` as ``caffe time`` does; returns a :class:`TimingResult`."""
    lg = logger or log
    iterations = int(iterations)
    if iterations < 1:
        raise CaffeError("time: --iterations must be at least 1 (got %d)" % iterations)
    sync = backend.synchronize
    layers = net.layers
    bottom_vecs, top_vecs = net.bottom_vecs, net.top_vecs
    need = net.bottom_need_backward
    names = net.layer_names
    lg.info("Performing Forward")
    _, initial_loss = net.Forward()
    lg.info("Initial loss: %s", num(np.float32(initial_loss)))
    lg.info("Performing Backward")
    net.Backward()
    for _ in range(int(warmup)):
        net.Forward()
        net.Backward()
    lg.info("*** Benchmark begins ***")
    lg.info("Testing for %d iterations.", iterations)
    n = len(layers)
    fwd = [0.0] * n
    bwd = [0.0] * n
    forward_time = backward_time = 0.0
    iter_ms = []
    clock = time.perf_counter
    sync()
    total0 = clock()
    for j in range(iterations):
        it0 = clock()
        for i in range(n):
            sync()
            t0 = clock()
            layers[i].Forward(bottom_vecs[i], top_vecs[i])
            sync()
            fwd[i] += (clock() - t0) * 1e6
        f_end = clock()
        forward_time += (f_end - it0) * 1e6
        b0 = clock()
        for i in range(n - 1, -1, -1):
            sync()
            t0 = clock()
            layers[i].Backward(top_vecs[i], need[i], bottom_vecs[i])
            sync()
            bwd[i] += (clock() - t0) * 1e6
        b_end = clock()
        backward_time += (b_end - b0) * 1e6
        ms = (b_end - it0) * 1e3
        iter_ms.append(ms)
        lg.info("Iteration: %d forward-backward time: %s ms.", j + 1, num(ms))
        if progress is not None:
            progress(j + 1, iterations)
    total_ms = (clock() - total0) * 1e3
    res = TimingResult(iterations, backend.mode(), iteration_ms=iter_ms, initial_loss=float(initial_loss))
    for i in range(n):
        res.layers.append(LayerTime(names[i], layers[i].type, fwd[i] / 1000.0 / iterations,
                                    bwd[i] / 1000.0 / iterations))
    res.forward_ms = forward_time / 1000.0 / iterations
    res.backward_ms = backward_time / 1000.0 / iterations
    res.forward_backward_ms = total_ms / iterations
    res.total_ms = total_ms
    for line in res.summary_lines():
        lg.info("%s", line)
    return res

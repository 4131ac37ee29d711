"""Which layers ran since the inputs last changed, and which results are stale.

A :class:`RunLog` keeps a logical clock and, per layer, when it last ran
forward and backward; per blob, which layer last wrote it.  Sessions tell it
what happened (``inputs_changed``, ``params_changed``, ``ran_forward``,
``ran_backward``).  :func:`layer_states` derives, purely, each layer's state:

- forward ``"fresh"``: it ran after the inputs (and its params) last changed,
  and after every layer that produced its bottoms, which are fresh themselves;
- ``"stale"``: it ran, but something upstream changed since;
- ``"not-run"``: never ran since the net was loaded or reset.

Backward states mirror that from the loss down (``"n/a"`` for layers that need
no backward).  Input layers are fresh as soon as inputs are set (their Forward
does nothing).
"""
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

FRESH, STALE, NOT_RUN, NA = "fresh", "stale", "not-run", "n/a"


@dataclass
class RunLog:
    input_layers: Tuple[int, ...] = ()        # layers whose tops are set from outside (Input)
    clock: int = 0
    input_time: Optional[int] = None
    param_time: int = 0
    forward: Dict[int, int] = field(default_factory=dict)
    backward: Dict[int, int] = field(default_factory=dict)
    writer: Dict[int, Tuple[int, int]] = field(default_factory=dict)   # blob id -> (layer, time)
    inputs_label: str = ""

    def _tick(self):
        self.clock += 1
        return self.clock

    def inputs_changed(self, top_ids_by_layer=None, label=""):
        t = self._tick()
        self.input_time = t
        self.inputs_label = label
        for i in self.input_layers:
            self.forward[i] = t
            for b in (top_ids_by_layer or {}).get(i, ()):
                self.writer[b] = (i, t)

    def params_changed(self):
        self.param_time = self._tick()

    def ran_forward(self, i, top_ids=()):
        if i in self.input_layers:
            return
        t = self._tick()
        self.forward[i] = t
        for b in top_ids:
            self.writer[b] = (i, t)

    def ran_backward(self, i):
        self.backward[i] = self._tick()

    def reset(self):
        self.clock = 0
        self.input_time = None
        self.param_time = 0
        self.forward.clear()
        self.backward.clear()
        self.writer.clear()
        self.inputs_label = ""


def layer_states(graph, log):
    """[(forward state, backward state)] per layer of ``graph`` (a NetGraph)."""
    n = len(graph.layers)
    fwd = [NOT_RUN] * n
    in_time = log.input_time if log.input_time is not None else 0
    srcs = [[] for _ in range(n)]
    for e in graph.edges:
        srcs[e.dst].append(e.src)
    inputs = set(log.input_layers)

    def ftime(i):   # Input layers hold whatever was set (zeros at first): never "not run"
        return log.forward.get(i, 0 if i in inputs else None)

    for layer in graph.layers:
        i = layer.index
        t = ftime(i)
        if t is None:
            continue
        ok = (t >= in_time or i in inputs) and (not layer.params or t >= log.param_time)
        if ok:
            for p in srcs[i]:
                if p < 0:
                    continue
                tp = ftime(p)
                if fwd[p] != FRESH or tp is None or tp > t:
                    ok = False
                    break
        fwd[i] = FRESH if ok else STALE
    # backward: from the top down.  A layer's gradient is fresh when it ran
    # backward after its forward, and after every consumer of its tops.
    consumers = [[] for _ in range(n)]
    for e in graph.edges:
        if e.src >= 0:
            consumers[e.src].append(e.dst)
    bwd = [NOT_RUN] * n
    for layer in reversed(graph.layers):
        i = layer.index
        if not layer.need_backward:
            bwd[i] = NA
            continue
        t = log.backward.get(i)
        if t is None:
            continue
        ok = fwd[i] == FRESH and t > log.forward.get(i, -1)
        if ok:
            for c in consumers[i]:
                if bwd[c] == NA:
                    continue
                tc = log.backward.get(c)
                if bwd[c] != FRESH or tc is None or tc > t:
                    ok = False
                    break
        bwd[i] = FRESH if ok else STALE
    return list(zip(fwd, bwd))


def blob_states(graph, log, states=None):
    """{blob id: state of its data}: the state of the layer that last wrote it."""
    states = states if states is not None else layer_states(graph, log)
    out = {}
    for b in graph.blobs:
        w = log.writer.get(b.id)
        if w is None:
            out[b.id] = NOT_RUN
        else:
            out[b.id] = states[w[0]][0]
    return out

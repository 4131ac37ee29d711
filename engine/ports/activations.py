"""Every value a Caffe net computes, one per (layer, top): what a port is checked against.

A blob of Caffe's is a name, not a value: an in-place chain (``conv1`` -> ReLU ``relu1``
writing ``conv1`` again) gives one blob two values in turn.  A port has one tensor per
value.  :func:`trace` lists the values (an :class:`Activation` per layer top, Split tops as
aliases of their bottom) and :func:`run` computes them with the engine's Forward, one layer
at a time, keeping a copy of each top as the layer left it.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from engine.core.errors import NetError


class PortError(NetError):
    """A port or a request about one is wrong (names the layer, blob or file)."""


class MissingDependency(PortError):
    """An optional package (onnx, onnxruntime, torch) is not installed."""


def require(module, extra, what):
    """Import ``module`` or raise :class:`MissingDependency` naming the extra that brings it."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency("%s needs the Python package '%s', which is not installed: "
                                "pip install caffe-inspector[%s] (or pip install -r requirements-%s.txt)"
                                % (what, module, extra, extra)) from None


@dataclass
class Activation:
    """One value of one blob: layer ``layer_index``'s top ``top_index`` as that layer wrote it."""
    id: int
    blob: str
    layer_index: int
    layer: str
    type: str
    top_index: int
    shape: Tuple[int, ...]
    bottoms: List[int] = field(default_factory=list)   # activations the producing layer read
    in_place: bool = False
    alias_of: Optional[int] = None                      # Split tops: the activation they copy
    version: int = 0                                    # 0: the blob's first value, 1: after one in-place layer...

    @property
    def label(self):
        """``blob`` or, for a value an in-place layer later overwrote, ``blob@layer``."""
        return self.blob if not self.in_place else "%s@%s" % (self.blob, self.layer)


@dataclass
class Trace:
    acts: List[Activation]
    layer_tops: List[List[int]]
    layer_bottoms: List[List[int]]
    inputs: Dict[str, int]          # net input blob -> its activation
    final: Dict[str, int]           # blob -> the activation it holds after Forward

    def real(self, a):
        """The activation ``a`` stands for (Split tops: their bottom's)."""
        while self.acts[a].alias_of is not None:
            a = self.acts[a].alias_of
        return a

    def ancestors(self):
        """Per activation, a bitmask (int) of the activations it depends on."""
        anc = [0] * len(self.acts)
        for act in self.acts:
            m = 0
            for b in act.bottoms:
                m |= anc[b] | (1 << b)
            anc[act.id] = m
        return anc


def trace(net):
    """The values ``net`` computes in a Forward, in Caffe's order."""
    acts: List[Activation] = []
    current: Dict[str, int] = {}
    layer_tops, layer_bottoms = [], []
    names = net.blob_names
    for i, layer in enumerate(net.layers):
        bots = []
        for b in net.bottom_id_vecs[i]:
            name = names[b]
            if name not in current:
                raise PortError("layer '%s' reads blob '%s' before any layer wrote it" % (net.layer_names[i], name),
                                layer=net.layer_names[i], blob=name)
            bots.append(current[name])
        tops = []
        for j, t in enumerate(net.top_id_vecs[i]):
            name = names[t]
            in_place = name in (names[b] for b in net.bottom_id_vecs[i])
            version = acts[current[name]].version + 1 if name in current else 0
            act = Activation(id=len(acts), blob=name, layer_index=i, layer=net.layer_names[i], type=layer.type,
                             top_index=j, shape=tuple(int(d) for d in net.top_vecs[i][j].shape), bottoms=list(bots),
                             in_place=in_place, version=version)
            if layer.type == "Split":
                act.alias_of = bots[0]
            acts.append(act)
            tops.append(act.id)
        for a in tops:
            current[acts[a].blob] = a
        layer_tops.append(tops)
        layer_bottoms.append(bots)
    inputs = {name: current_first(acts, name) for name in net.inputs}
    return Trace(acts, layer_tops, layer_bottoms, inputs, dict(current))


def current_first(acts, name):
    for a in acts:
        if a.blob == name:
            return a.id
    raise PortError("net input '%s' is written by no layer" % name, blob=name)


def set_inputs(net, feeds):
    """Copy ``feeds`` ({input blob: array}) into the net's input blobs, reshaping them (and
    the net) when a shape differs."""
    reshape = False
    for name, arr in feeds.items():
        if name not in net.blobs:
            raise PortError("no blob '%s' in the net (its inputs: %s)" % (name, ", ".join(net.inputs)), blob=name)
        arr = np.asarray(arr)
        blob = net.blobs[name]
        if tuple(blob.shape) != tuple(arr.shape):
            if blob.count and arr.size == blob.count and arr.ndim != len(blob.shape):
                arr = arr.reshape(blob.shape)
            else:
                blob.reshape(*arr.shape)
                reshape = True
    if reshape:
        net.reshape()
    for name, arr in feeds.items():
        blob = net.blobs[name]
        blob.data[...] = np.asarray(arr).reshape(blob.shape)


def run(net, tr, feeds=None):
    """The engine's Forward, layer by layer; returns one host array per activation of
    ``tr`` (Split tops share their bottom's array).  ``feeds``: {input blob: array}."""
    if feeds:
        set_inputs(net, feeds)
    values: List[Optional[np.ndarray]] = [None] * len(tr.acts)
    for i in range(len(net.layers)):
        net.ForwardFromTo(i, i)
        for j, a in enumerate(tr.layer_tops[i]):
            act = tr.acts[a]
            if act.alias_of is not None:
                values[a] = values[tr.real(a)]
            else:
                values[a] = np.array(net.top_vecs[i][j].data, copy=True)
    return values


def relative(a, ref):
    """(max |a - ref|, that relative to ref's scale max |ref|) -- NaN-aware; inf when shapes differ."""
    a = np.asarray(a)
    ref = np.asarray(ref)
    if a.dtype == ref.dtype == np.float32 and a.shape == ref.shape and a.size:
        # the common case, without float64 copies: float32's |a - ref| is within an ulp of it
        d = np.abs(a - ref)
        m = float(d.max())
        scale = float(np.abs(ref).max())
        if np.isfinite(m) and np.isfinite(scale):
            if m == 0.0:
                return 0.0, 0.0
            if scale == 0.0:
                scale = float(np.abs(a).max())
            return m, (m / scale if scale > 0 else float("inf"))
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if a.shape != ref.shape:
        if a.size == ref.size:
            a = a.reshape(ref.shape)
        else:
            return float("inf"), float("inf")
    if a.size == 0:
        return 0.0, 0.0
    both_nan = np.isnan(a) & np.isnan(ref)
    d = np.where(both_nan, 0.0, np.abs(a - ref))
    d = np.where(np.isnan(d), np.inf, d)
    max_abs = float(d.max())
    finite = ref[np.isfinite(ref)]
    scale = float(np.abs(finite).max()) if finite.size else 0.0
    if scale == 0.0:
        fa = a[np.isfinite(a)]
        scale = float(np.abs(fa).max()) if fa.size else 0.0
    if max_abs == 0.0:
        return 0.0, 0.0
    return max_abs, (max_abs / scale if scale > 0 else float("inf"))

"""Per-layer debug records: what every step did to every blob it touched.

A :class:`Recorder` attaches to a Net (``Recorder(net)``) and, for each
ForwardFromTo / BackwardFromTo range (and solver Update), keeps one
:class:`StepRecord` with a :class:`LayerRecord` per layer run: wall time
(GPU-synchronised) and, for each bottom, top and param blob, statistics of data
and diff (:class:`BlobStats`).  Statistics are reduced on the device the data
lives on; only the summary (a few numbers and the histogram counts) crosses to
the host.  Caffe's debug_info lines are derived from these records.
"""
import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import numpy as np

from . import backend
from .blob import caffe_asum

HIST_BINS = 32
SCHEMA_VERSION = 1


@dataclass
class BlobStats:
    """Statistics of one array (a blob's data or diff)."""
    shape: tuple
    count: int
    asum_mean: float      # Caffe's debug_info number: mean |x|
    min: float
    max: float
    mean: float
    std: float
    l2: float
    frac_zero: float
    nan: int
    inf: int
    hist: List[int]       # HIST_BINS counts over [hist_lo, hist_hi] of the finite values
    hist_lo: float
    hist_hi: float

    @property
    def finite(self):
        return self.nan == 0 and self.inf == 0

    def to_dict(self):
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def array_stats(a, bins=HIST_BINS):
    """BlobStats of an array (NumPy or CuPy), reduced where it lives."""
    xp = backend.xp_of(a)
    shape = tuple(int(d) for d in a.shape)
    n = int(a.size)
    if n == 0:
        return BlobStats(shape, 0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan"),
                         0.0, 0.0, 0, 0, [0] * bins, 0.0, 0.0)
    x = a.reshape(-1)
    with np.errstate(all="ignore"):
        acc = xp.float64 if x.dtype == np.float64 else xp.float32
        absx = xp.abs(x)
        nan_mask = xp.isnan(x)
        inf_mask = xp.isinf(x)
        summary = xp.stack([
            absx.sum(dtype=acc).astype(xp.float64),
            x.min().astype(xp.float64),
            x.max().astype(xp.float64),
            x.sum(dtype=xp.float64),
            xp.dot(x.astype(xp.float64), x.astype(xp.float64)),
            (x == 0).sum().astype(xp.float64),
            nan_mask.sum().astype(xp.float64),
            inf_mask.sum().astype(xp.float64),
        ])
        s = backend.to_host(summary)
        asum, mn, mx, tot, sq, zeros, nans, infs = (float(v) for v in s)
        if xp is np and x.dtype == np.float32:
            asum = caffe_asum(x)   # Caffe's accumulation order, for its debug_info number
        nans, infs = int(nans), int(infs)
        if nans or infs:
            finite = x[~(nan_mask | inf_mask)]
            if finite.size:
                lo_hi = backend.to_host(xp.stack([finite.min(), finite.max()]).astype(xp.float64))
                lo, hi = float(lo_hi[0]), float(lo_hi[1])
            else:
                lo = hi = 0.0
        else:
            finite = x
            lo, hi = mn, mx
        if hi <= lo:
            hi = lo + 1.0 if lo == hi else lo
        counts = backend.to_host(xp.histogram(finite, bins=bins, range=(lo, hi))[0]) if finite.size else \
            np.zeros(bins, np.int64)
        mean = tot / n
        var = max(sq / n - mean * mean, 0.0)
    # Caffe's number: asum in Dtype, divided by count in Dtype.
    asum_mean = float(np.float32(asum) / np.float32(n)) if x.dtype == np.float32 else asum / n
    return BlobStats(shape, n, asum_mean, mn, mx, mean, math.sqrt(var) if math.isfinite(var) else var,
                     math.sqrt(sq) if math.isfinite(sq) else sq, zeros / n, nans, infs,
                     [int(c) for c in counts], lo, hi)


@dataclass
class BlobRecord:
    name: str            # blob name (params: the display name, e.g. "0" or "conv1_w")
    role: str            # "bottom", "top" or "param"
    index: int           # position among the layer's bottoms/tops/params
    data: Optional[BlobStats] = None
    diff: Optional[BlobStats] = None

    def to_dict(self):
        return {"name": self.name, "role": self.role, "index": self.index,
                "data": self.data.to_dict() if self.data else None,
                "diff": self.diff.to_dict() if self.diff else None}


@dataclass
class LayerRecord:
    layer_index: int
    layer: str
    type: str
    direction: str       # "forward", "backward" or "update"
    time_ms: float
    blobs: List[BlobRecord] = field(default_factory=list)
    loss: Optional[float] = None

    def blob(self, role, index):
        for b in self.blobs:
            if b.role == role and b.index == index:
                return b
        return None

    @property
    def nonfinite(self):
        for b in self.blobs:
            for s in (b.data, b.diff):
                if s is not None and not s.finite:
                    return True
        return False

    def to_dict(self):
        return {"layer_index": self.layer_index, "layer": self.layer, "type": self.type,
                "direction": self.direction, "time_ms": self.time_ms, "loss": self.loss,
                "blobs": [b.to_dict() for b in self.blobs]}


@dataclass
class StepRecord:
    id: int
    kind: str            # "forward", "backward" or "update"
    start: int
    end: int
    device: str
    layers: List[LayerRecord] = field(default_factory=list)
    wall_ms: float = 0.0
    iteration: Optional[int] = None

    def to_dict(self):
        return {"id": self.id, "kind": self.kind, "start": self.start, "end": self.end,
                "device": self.device, "wall_ms": self.wall_ms, "iteration": self.iteration,
                "layers": [l.to_dict() for l in self.layers]}


class NonFiniteError(FloatingPointError):
    """Raised by the sentinel: the first layer whose output or gradient is not finite."""

    def __init__(self, finding):
        self.finding = finding
        super().__init__(finding.message)


@dataclass
class NonFiniteFinding:
    step_id: int
    direction: str
    layer_index: int
    layer: str
    type: str
    blob: str
    role: str
    which: str           # "data" or "diff"
    nan: int
    inf: int
    count: int
    inputs_finite: bool
    params_finite: bool

    @property
    def message(self):
        return ("%s of layer '%s' (%s): %s blob '%s' %s has %d NaN and %d Inf of %d values; "
                "its inputs were %s and its params %s" % (
                    self.direction.capitalize(), self.layer, self.type, self.role, self.blob, self.which,
                    self.nan, self.inf, self.count, "finite" if self.inputs_finite else "NOT finite",
                    "finite" if self.params_finite else "NOT finite"))

    def to_dict(self):
        d = asdict(self)
        d["message"] = self.message
        return d


class Recorder:
    """Observes a Net's ranges and records per-layer statistics.

    ``stats``: compute blob statistics (else only times).  ``sentinel``: raise
    :class:`NonFiniteError` at the first layer producing a non-finite output
    (forward) or gradient (backward).  ``max_steps`` bounds memory (oldest
    steps are dropped).
    """

    _ids = itertools.count(1)

    def __init__(self, net, stats=True, sentinel=False, bins=HIST_BINS, max_steps=200):
        self.net = net
        self.stats, self.sentinel, self.bins = stats, sentinel, bins
        self.max_steps = max_steps
        self.steps: List[StepRecord] = []
        self.first_nonfinite: Optional[NonFiniteFinding] = None
        self._cur = None
        self._t0 = self._tl = 0.0
        self._cache = {}
        self.iteration = None
        net.debug_observers.append(self)

    def detach(self):
        if self in self.net.debug_observers:
            self.net.debug_observers.remove(self)

    def clear(self):
        self.steps.clear()
        self.first_nonfinite = None

    # ---------------------------------------------------------- observer protocol
    def begin(self, kind, start, end):
        self._cur = StepRecord(next(self._ids), kind, start, end, backend.mode(), iteration=self.iteration)
        self._t0 = time.perf_counter()

    def before_layer(self, kind, i):
        backend.synchronize()
        self._tl = time.perf_counter()

    def after_layer(self, kind, i):
        backend.synchronize()
        ms = (time.perf_counter() - self._tl) * 1000.0
        net = self.net
        layer = net.layers[i]
        rec = LayerRecord(i, net._layer_names[i], layer.type, kind, ms)
        self._cache = {}
        if self.stats:
            if kind == "forward":
                self._add(rec, net, i, ("bottom", "top", "param"), ("data",))
            else:
                self._add(rec, net, i, ("bottom", "top", "param"), ("data", "diff"))
        self._cur.layers.append(rec)
        if self.stats:
            self._check_finite(rec, net, i, kind)

    def end(self, kind, start, end):
        if self._cur is None:
            return
        self._cur.wall_ms = (time.perf_counter() - self._t0) * 1000.0
        self.steps.append(self._cur)
        if len(self.steps) > self.max_steps:
            del self.steps[: len(self.steps) - self.max_steps]
        self._cur = None

    # ---------------------------------------------------------- recording
    def _add(self, rec, net, i, roles, whiches):
        for role in roles:
            if role == "bottom":
                blobs = net.bottom_vecs[i]
                names = [net._blob_names[b] for b in net._bottom_id_vecs[i]]
            elif role == "top":
                blobs = net.top_vecs[i]
                names = [net._blob_names[b] for b in net._top_id_vecs[i]]
            else:
                blobs = net.layers[i].blobs
                names = [net._param_display_names[p] for p in net._param_id_vecs[i]]
            for k, (blob, name) in enumerate(zip(blobs, names)):
                br = BlobRecord(name, role, k)
                for which in whiches:
                    st = self._stats(blob, which)
                    setattr(br, which, st)
                rec.blobs.append(br)

    def _stats(self, blob, which):
        key = (id(blob.data_memory if which == "data" else blob.diff_memory), which, blob.shape)
        st = self._cache.get(key)
        if st is None:
            mem = blob.data_memory if which == "data" else blob.diff_memory
            gpu = mem.head == 2  # current copy on the device
            arr = blob.get_data(gpu) if which == "data" else blob.get_diff(gpu)
            st = array_stats(arr, self.bins)
            self._cache[key] = st
        return st

    def asum_mean(self, blob, which):
        """Caffe's debug_info number from the last recorded layer, if recorded."""
        key = (id(blob.data_memory if which == "data" else blob.diff_memory), which, blob.shape)
        st = self._cache.get(key)
        return None if st is None else st.asum_mean

    def _check_finite(self, rec, net, i, kind):
        out_role, which = ("top", "data") if kind == "forward" else ("bottom", "diff")
        for b in rec.blobs:
            s = getattr(b, which)
            if b.role != out_role or s is None or s.finite:
                continue
            if kind == "backward" and not net._bottom_need_backward[i][b.index]:
                continue
            in_role = "bottom" if kind == "forward" else "top"
            in_which = "data" if kind == "forward" else "diff"
            inputs_ok = all(getattr(x, in_which) is None or getattr(x, in_which).finite
                            for x in rec.blobs if x.role == in_role)
            params_ok = all(x.data is None or x.data.finite for x in rec.blobs if x.role == "param")
            f = NonFiniteFinding(self._cur.id, kind, i, rec.layer, rec.type, b.name, b.role, which,
                                 s.nan, s.inf, s.count, inputs_ok, params_ok)
            if self.first_nonfinite is None:
                self.first_nonfinite = f
            if self.sentinel:
                self.end(kind, self._cur.start, self._cur.end)
                raise NonFiniteError(f)
            return

    # ---------------------------------------------------------- queries
    def last(self, kind=None):
        for s in reversed(self.steps):
            if kind is None or s.kind == kind:
                return s
        return None

    def latest_layer_records(self):
        """{(layer_index, direction): LayerRecord} of the most recent run of each."""
        out = {}
        for s in self.steps:
            for l in s.layers:
                out[(l.layer_index, l.direction)] = l
        return out

"""Per-layer debug records: what every step did to every blob it touched.

A :class:`Recorder` attaches to a Net (``Recorder(net)``) and, for each
ForwardFromTo / BackwardFromTo range (and solver update), keeps one
:class:`StepRecord` with a :class:`LayerRecord` per layer run: wall time
(GPU-synchronised) and, for each bottom, top and param blob, statistics of data
and diff (:class:`BlobStats`).  Caffe's debug_info lines are derived from these
records when a Recorder is attached (``net._mean_abs`` asks :meth:`Recorder.asum_mean`).

Statistics (:func:`array_stats`) are reduced on the device the data lives on;
on the GPU one reduction kernel (:mod:`engine.core.kernels.stats`) summarises a
blob and only one vector (ten numbers and the histogram counts) crosses to the
host.  Within a step, a blob's statistics are computed once and reused until a
layer may have written it: forward invalidates the layer's tops (not the data of a
top that only shares its bottom's, as Split's and Flatten's do), backward the diffs
of the bottoms it propagates to, and both the diffs of the params it propagates to
(Caffe's contract: Forward writes tops, Backward writes the diffs of the bottoms and
params it propagates to, never a top's diff unless it is in place; BatchNorm writes
its params in Forward; the conformance checks compare every blob's diff after
backward, so a layer that scribbled on its top diff would show there).  A Python
layer may write anything, so it invalidates everything.  In forward, bottom statistics are
taken after the layer ran (for an in-place layer they are the top's).

Across steps a blob's statistics are kept while its memory is unchanged: the
memory's ``version`` (moved by every writable access: ``mut_data``, ``blob.data``,
``Blob.update``) and a fingerprint of about 32 of its values (for writes through an
array held from an earlier access) must both match.  So a param's data is
summarised once per change (after an update, not in every forward and backward
step), and the backward step reuses the forward step's statistics of the
activations.  Big blobs' histograms come from a fixed-size sample
(``hist_sample``); ``focus`` (a set of layer names) keeps the full level for those
layers and the health level for the others.

Solver updates
--------------
``Recorder.attach_solver(solver)`` records every update the solver applies: it
wraps the solver instance's ``apply_update`` (``detach_solver`` restores it), so
that before the update the params' data and gradients are summarised and the
data copied, and after it one :class:`StepRecord` of kind ``"update"`` holds,
per learnable param, the data after (``data``), the update Caffe left in the
diff (``diff``), the data before (``before``), the gradient (``grad``), the
change ``delta`` = w_after - w_before and ``ratio`` = |Δw|₂ / |w_before|₂.
Without touching the solver, the same record comes from::

    before = recorder.snapshot_params(net)       # gradients ready, update not applied
    solver.apply_update()                        # or anything that changes the params
    recorder.record_update(net, before)

or from the solver's callbacks (``solver.add_callback(UpdateHook(recorder, solver))``;
``hook.flush()`` after the last step; ``diff`` is then not known, because the
next iteration clears it before ``on_start``).
"""
import itertools
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import numpy as np

from engine.core import backend
from engine.core.blob import caffe_asum
from engine.core.errors import CaffeError
from engine.core.layers.base import loss_weight
from engine.instruments import fast_stats

HIST_BINS = 32
HIST_SAMPLE = 1 << 15    # the Recorder's histograms bin about this many values per blob
SCHEMA_VERSION = 2
_N_SUMMARY = 10   # asum, min, max, sum, sumsq, zeros, nan, inf, finite lo, finite hi


# ---------------------------------------------------------------------- statistics
@dataclass
class BlobStats:
    """Statistics of one array (a blob's data or diff).

    ``asum_mean`` is Caffe's debug_info number (sum |x| in the blob's dtype
    divided by the count); ``min``/``max``/``mean``/``std`` follow NumPy (NaN
    when any value is NaN; ``std`` is the population one); ``l2`` = sqrt(sum
    x²) accumulated in float64; ``frac_zero`` = fraction of exact zeros;
    ``hist`` counts the finite values in ``HIST_BINS`` equal bins over
    [``hist_lo``, ``hist_hi``] (the finite range; one unit wide when all finite
    values are equal).  Stats parsed from a Caffe log carry only ``asum_mean``
    (the rest NaN / 0 / empty) and ``partial`` set.  ``hist_sample``: 0 when the
    histogram counts every finite value, else the size of the evenly spread
    sample it was drawn from (the Recorder samples big blobs; every other field
    is exact).
    """
    shape: tuple
    count: int
    asum_mean: float
    min: float
    max: float
    mean: float
    std: float
    l2: float
    frac_zero: float
    nan: int
    inf: int
    hist: List[int]
    hist_lo: float
    hist_hi: float
    partial: bool = False   # True: only asum_mean (and shape/count when given) is known
    hist_sample: int = 0    # 0: the histogram counts all values; else the sample's size

    @property
    def finite(self):
        return self.nan == 0 and self.inf == 0

    @property
    def rms(self):
        return self.l2 / math.sqrt(self.count) if self.count else float("nan")

    def to_dict(self):
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_dict(cls, d):
        if d is None:
            return None
        d = dict(d)
        d["shape"] = tuple(d.get("shape") or ())
        names = cls.__dataclass_fields__
        for k in ("asum_mean", "min", "max", "mean", "std", "l2", "frac_zero", "hist_lo", "hist_hi"):
            d[k] = _num(d.get(k))
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def only_asum(cls, asum_mean, shape=(), count=-1):
        """Stats that know only Caffe's mean |x| (read from a log)."""
        nan = float("nan")
        return cls(tuple(shape), count, float(asum_mean), nan, nan, nan, nan, nan, nan, 0, 0, [], nan, nan,
                   partial=True)


def _num(v):
    """A float from a number or its JSON string form ("nan", "inf", "-inf"); None stays None."""
    if v is None:
        return None
    return float(v)


def _empty_stats(shape, bins):
    nan = float("nan")
    return BlobStats(shape, 0, nan, nan, nan, nan, nan, 0.0, 0.0, 0, 0, [0] * bins, 0.0, 0.0)


def array_stats(a, bins=HIST_BINS, hist_sample=0):
    """BlobStats of an array (NumPy or CuPy), reduced where it lives.

    On the GPU the reductions run there and one vector comes back; on the host
    one compiled pass (:mod:`engine.instruments.fast_stats`, with Numba) or, without
    Numba, NumPy reductions that skip the NaN/Inf masks when the min and max are
    finite.  ``bins=0`` skips the histogram; ``hist_sample=k`` bins k values spread
    over the array instead of all of them when it holds more.
    """
    x = a.reshape(-1)
    shape = tuple(map(int, a.shape))
    n = int(x.size)
    if n == 0:
        return _empty_stats(shape, bins)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    if type(x) is np.ndarray and fast_stats.usable(x, small=True):
        return _compiled_stats(x, shape, n, bins, hist_sample)
    if backend.xp_of(x) is np:
        summary, counts = _host_summary(x, bins, hist_sample)
    else:
        from engine.core.kernels import stats as gpu_stats
        sampled = bool(bins) and 0 < hist_sample < n
        idx = _device_sample(n, hist_sample) if sampled else None
        v = backend.to_host(gpu_stats.summary(x, bins, idx))     # one reduction, one transfer
        summary, counts = [float(t) for t in v[:_N_SUMMARY]], v[_N_SUMMARY:]
        st = _finish(shape, n, x.dtype, summary, counts, bins)
        if sampled:
            st.hist_sample = fast_stats.sample_size(n, hist_sample)
        return st
    return _finish(shape, n, x.dtype, summary, counts, bins)


_DEVICE_SAMPLES: dict = {}    # (n, k, device) -> the histogram sample's indices on that device


def sample_indices(n, k):
    """Host int64 indices of the values a ``k``-value histogram sample of an ``n``-value
    array bins: :func:`fast_stats.sample_starts`' runs, the sample the host path bins."""
    starts, length = fast_stats.sample_starts(n, k)
    return (starts[:, None] + np.arange(length, dtype=np.int64)).reshape(-1)


def _device_sample(n, k):
    """:func:`sample_indices` on the current GPU, cached (a net asks for a few sizes)."""
    key = (n, k, backend.device_id())
    idx = _DEVICE_SAMPLES.get(key)
    if idx is None:
        if len(_DEVICE_SAMPLES) >= 256:
            _DEVICE_SAMPLES.clear()
        idx = _DEVICE_SAMPLES[key] = backend.cupy().asarray(sample_indices(n, k))
    return idx


def _compiled_stats(x, shape, n, bins, hist_sample):
    """:func:`array_stats` of a flat float32 host array on the compiled path
    (``fast_stats.usable(x, small=True)``): one summary pass, then the histogram
    of the finite range (of a sample of ``hist_sample`` values when there are more)
    and :func:`_finish`'s arithmetic, in one call."""
    v, hist, binned = fast_stats.full(x, bins, hist_sample)
    st = BlobStats(shape, n, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], hist, v[9], v[10])
    if bins and 0 < hist_sample < n:
        st.hist_sample = binned
    return st


def health_stats(a):
    """The cheap level: Caffe's mean |x| and the NaN/Inf counts, nothing else.

    One pass over the array (the |x| sum) when every value is finite -- a finite
    sum of |x| proves it; only when the sum is not finite are NaN and Inf counted.
    The other fields are NaN (``partial`` set), as for stats read from a log.
    """
    x = a.reshape(-1)
    shape = tuple(map(int, a.shape))
    n = int(x.size)
    if n == 0:
        return _empty_stats(shape, 0)
    if fast_stats.usable(x, small=True):
        asum, asum_mean = fast_stats.health(x)      # caffe_asum's number and its mean, one call
        if math.isfinite(asum):
            return BlobStats.only_asum(asum_mean, shape, n)
    with np.errstate(all="ignore"):
        if fast_stats.usable(x):
            asum = fast_stats.asum(x)            # caffe_asum's number, one compiled pass
        elif x.dtype == np.float32 and backend.xp_of(x) is np:
            asum = caffe_asum(x)
        elif x.dtype in (np.float32, np.float64) and backend.is_gpu_array(x):
            # one reduction kernel (|x| summed in float64, as near the exact sum as
            # cublasSasum) that also counts NaN and Inf: no |x| temporary, one transfer
            from engine.core.kernels import stats as gpu_stats
            v = backend.to_host(gpu_stats.summary(x, 0))
            asum = float(v[0])
            if not math.isfinite(asum):
                return _health(shape, n, x.dtype, asum, int(v[6]), int(v[7]))
        else:
            xp = backend.xp_of(x)
            asum = float(xp.abs(x).sum())
        nan = inf = 0
        if not math.isfinite(asum):
            xp = backend.xp_of(x)
            counts = backend.to_host(xp.stack([xp.isnan(x).sum(), xp.isinf(x).sum()]))
            nan, inf = int(counts[0]), int(counts[1])
    return _health(shape, n, x.dtype, asum, nan, inf)


def _health(shape, n, dtype, asum, nan, inf):
    """The health-level BlobStats of an array's |x| sum (Caffe's mean in its Dtype) and
    NaN/Inf counts."""
    with np.errstate(all="ignore"):
        if dtype == np.float32:
            asum_mean = float(np.float32(asum) / np.float32(n))
        else:
            asum_mean = asum / n
    st = BlobStats.only_asum(asum_mean, shape, n)
    st.nan, st.inf = nan, inf
    return st


def _host_summary(x, bins, sample=0):
    """(summary list, histogram counts) of a flat float32/float64 NumPy array;
    ``sample``: bin only that many values (compiled path only).  Small arrays (a net's
    BatchNorm and Scale params, biases) take the compiled path too: NumPy's ten
    reductions cost more than the values."""
    if fast_stats.usable(x, small=True):
        s = fast_stats.summary(x)
        lo, hi = s[8], s[9]
        if bins and lo <= hi:
            counts, _ = fast_stats.histogram(x, lo, hi, bins, sample, finite=not (s[6] or s[7]))
        else:
            counts = np.zeros(bins, np.int64)
        return s, counts
    with np.errstate(all="ignore"):
        mn, mx = x.min(), x.max()
        if np.isfinite(mn) and np.isfinite(mx):
            nans = infs = 0
            fin = x
            lo, hi = float(mn), float(mx)
        else:
            nan_mask = np.isnan(x)
            inf_mask = np.isinf(x)
            nans, infs = int(np.count_nonzero(nan_mask)), int(np.count_nonzero(inf_mask))
            fin = x[~(nan_mask | inf_mask)]
            lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (math.inf, -math.inf)
        if x.dtype == np.float32:
            asum = caffe_asum(x)      # Caffe's accumulation order, for its debug_info number
            sq = float(np.einsum("i,i->", x, x, dtype=np.float64, casting="unsafe"))
        else:
            asum = float(np.abs(x).sum())
            sq = float(np.dot(x, x))
        tot = float(x.sum(dtype=np.float64))
        zeros = int(np.count_nonzero(x == 0))
        counts = np.zeros(bins, np.int64)
        if bins and fin.size:
            width = hi - lo
            if not width > 0:
                width = 1.0
            scale = bins / width
            f32 = np.float32
            m = fin.size
            y, idx = _scratch(m)
            if fin.dtype == np.float32 and np.isfinite(f32(scale)) and np.isfinite(f32(hi) - f32(lo)) \
                    and np.isfinite(f32(width) * f32(scale)):
                # (x - lo) * scale' < bins for x <= hi: the scale is shrunk by 2^-20, far more than
                # the two float32 roundings, so no clipping pass is needed.
                y = np.subtract(fin, f32(lo), out=y)      # >= 0: fin >= lo
                np.multiply(y, f32(scale * (1.0 - 2.0 ** -20)), out=y)
                np.copyto(idx, y, casting="unsafe")
            else:
                y = (fin.astype(np.float64) - lo) * scale
                np.copyto(idx, y, casting="unsafe")
                np.minimum(idx, bins - 1, out=idx)
            counts = np.bincount(idx, minlength=bins)
    return [asum, float(mn), float(mx), tot, sq, zeros, nans, infs, lo, hi], counts


_SCRATCH_MAX = 1 << 21       # elements kept between calls (24 MiB, main thread only)
_scratch_local = threading.local()


def _scratch(m):
    """(float32[m], intp[m]) work buffers, reused between calls on the main thread
    when small enough (no page faults for every blob); other threads (a web
    server's) allocate them per call, so that nothing stays behind per thread."""
    if m > _SCRATCH_MAX or threading.current_thread() is not threading.main_thread():
        return np.empty(m, np.float32), np.empty(m, np.intp)
    buf = getattr(_scratch_local, "buf", None)
    if buf is None or buf[0].size < m:
        size = min(max(m, 1 << 16), _SCRATCH_MAX)
        size = max(size, m)
        buf = _scratch_local.buf = (np.empty(size, np.float32), np.empty(size, np.intp))
    return buf[0][:m], buf[1][:m]


def _device_summary(x, xp, bins):
    """One float64 vector: the ten summary numbers then the histogram counts, with
    array operations on ``xp`` (NumPy or CuPy): the reference that the GPU kernel
    (:func:`engine.core.kernels.stats.summary`) is tested against."""
    f64 = xp.float64
    with np.errstate(all="ignore"):
        x64 = x.astype(f64)
        finite = xp.isfinite(x)
        n_nan = xp.isnan(x).sum()
        n_fin = finite.sum()
        big = xp.asarray(xp.inf, dtype=f64)
        flo = xp.where(finite, x64, big).min()
        fhi = xp.where(finite, x64, -big).max()
        parts = [xp.abs(x).sum(dtype=x.dtype), x.min(), x.max(), x64.sum(), xp.dot(x64, x64),
                 (x == 0).sum(), n_nan, x.size - n_fin - n_nan, flo, fhi]
        summary = xp.stack([xp.asarray(p).astype(f64).reshape(()) for p in parts])
        if not bins:
            return summary
        width = fhi - flo
        width = xp.where(width > 0, width, xp.asarray(1.0, dtype=f64))
        y = (x64 - flo) * (bins / width)
        y = xp.where(finite, xp.minimum(xp.maximum(y, 0), bins - 1), bins)
        counts = xp.bincount(y.astype(xp.int64), minlength=bins + 1)[:bins]
        return xp.concatenate([summary, counts.astype(f64)])


def _finish(shape, n, dtype, s, counts, bins):
    asum, mn, mx, tot, sq, zeros, nans, infs, lo, hi = s
    nans, infs, zeros = int(nans), int(infs), int(zeros)
    if not (math.isfinite(lo) and math.isfinite(hi)):     # no finite value
        lo = hi = 0.0
        counts = np.zeros(bins, np.int64)
    elif not hi > lo:
        hi = lo + 1.0
    mean = tot / n
    if math.isfinite(sq) and math.isfinite(mean):
        var = max(sq / n - mean * mean, 0.0)
        std = math.sqrt(var)
    else:
        std = float("nan") if nans or math.isnan(sq) or math.isnan(mean) else float("inf")
    l2 = math.sqrt(sq) if sq >= 0 else float("nan")
    if math.isnan(sq):
        l2 = float("nan")
    # Caffe's number: asum in Dtype, divided by count in Dtype.
    if dtype == np.float32:
        with np.errstate(all="ignore"):
            asum_mean = float(np.float32(asum) / np.float32(n))
    else:
        asum_mean = asum / n
    if isinstance(counts, np.ndarray) and counts.dtype.kind in "iu":
        hist = counts.tolist()         # Python ints already
    else:
        hist = [int(c) for c in (counts.tolist() if hasattr(counts, "tolist") else counts)]
    return BlobStats(shape, n, asum_mean, mn, mx, mean, std, l2, zeros / n, nans, infs, hist, lo, hi)


# ---------------------------------------------------------------------- records
@dataclass
class BlobRecord:
    name: str            # blob name (params: the display name, e.g. "0" or "conv1_w")
    role: str            # "bottom", "top" or "param"
    index: int           # position among the layer's bottoms/tops/params
    data: Optional[BlobStats] = None
    diff: Optional[BlobStats] = None
    propagate: Optional[bool] = None     # backward: bottom_need_backward / param_propagate_down
    # update records only:
    before: Optional[BlobStats] = None   # data before the update
    grad: Optional[BlobStats] = None     # diff before the update (the gradient)
    delta: Optional[BlobStats] = None    # data after - data before
    ratio: Optional[float] = None        # |delta|_2 / |before|_2 (inf when |before| = 0 < |delta|)

    def to_dict(self):
        d = {"name": self.name, "role": self.role, "index": self.index,
             "data": self.data.to_dict() if self.data else None,
             "diff": self.diff.to_dict() if self.diff else None,
             "propagate": self.propagate}
        if self.before is not None or self.delta is not None or self.grad is not None:
            d.update(before=self.before.to_dict() if self.before else None,
                     grad=self.grad.to_dict() if self.grad else None,
                     delta=self.delta.to_dict() if self.delta else None,
                     ratio=self.ratio)
        return d

    @classmethod
    def from_dict(cls, d):
        f = BlobStats.from_dict
        return cls(d["name"], d["role"], int(d["index"]), f(d.get("data")), f(d.get("diff")),
                   d.get("propagate"), f(d.get("before")), f(d.get("grad")), f(d.get("delta")),
                   _num(d.get("ratio")))


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

    def blobs_of(self, role):
        return [b for b in self.blobs if b.role == role]

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

    @classmethod
    def from_dict(cls, d):
        return cls(int(d["layer_index"]), d["layer"], d["type"], d["direction"], _num(d.get("time_ms")),
                   [BlobRecord.from_dict(b) for b in d.get("blobs", [])], _num(d.get("loss")))


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
    meta: dict = field(default_factory=dict)   # e.g. {"lr": ...} (update), {"source": "caffe-log"}

    def layer(self, name):
        for l in self.layers:
            if l.layer == name:
                return l
        return None

    def to_dict(self):
        return {"id": self.id, "kind": self.kind, "start": self.start, "end": self.end,
                "device": self.device, "wall_ms": self.wall_ms, "iteration": self.iteration,
                "meta": dict(self.meta), "layers": [l.to_dict() for l in self.layers]}

    @classmethod
    def from_dict(cls, d):
        return cls(int(d["id"]), d["kind"], int(d["start"]), int(d["end"]), d.get("device", ""),
                   [LayerRecord.from_dict(l) for l in d.get("layers", [])], _num(d.get("wall_ms")) or 0.0,
                   d.get("iteration"), dict(d.get("meta") or {}))


class NonFiniteError(CaffeError, FloatingPointError):
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


@dataclass
class ParamSnapshot:
    """The learnable params before an update: their stats and a copy of their data."""
    net_param_ids: List[int]
    data: list               # copies, where each param's data lived
    data_stats: List[BlobStats]
    grad_stats: List[Optional[BlobStats]]
    iteration: Optional[int] = None
    t0: float = 0.0


def _current(blob, which):
    """The blob's data or diff array where its current copy lives (an empty host array for
    a blob without memory, whose count is 0: looked at, not used, as Caffe's asum_data())."""
    mem = blob.data_memory if which == "data" else blob.diff_memory
    if mem is None:
        return np.zeros(blob.shape, blob.dtype)
    gpu = mem.head == 2  # the device copy is the current one
    return blob.get_data(gpu) if which == "data" else blob.get_diff(gpu)


_F32 = np.dtype(np.float32)
_COMPILED: List[bool] = []      # [True] once fast_stats' compiled functions are known to exist


def _compiled():
    """fast_stats.compiled(), asked until it says True."""
    if not _COMPILED and fast_stats.compiled():
        _COMPILED.append(True)
    return bool(_COMPILED)


def _flat_stats(x, shape, full, bins, hist_sample):
    """array_stats (``full``) or health_stats of ``x``, a flat float32 host array of a
    blob of ``shape`` (not empty; the compiled functions exist), without their checks."""
    if full:
        return _compiled_stats(x, shape, x.size, bins, hist_sample)
    asum, asum_mean = fast_stats.health(x)
    if math.isfinite(asum):
        return BlobStats.only_asum(asum_mean, shape, x.size)
    return health_stats(x.reshape(shape))


def _flat(blob, mem):
    """The current copy of ``mem`` (a blob's data or diff memory), flat, as ``_current``
    reads it (the device copy when it is the newer one)."""
    return (mem.dev() if mem.head == 2 else mem.host())[:blob.count]


class _CacheEntry:
    """Statistics of a memory at one version, with a fingerprint of its values."""

    __slots__ = ("mem", "version", "full", "stats", "step", "fingerprint")

    FINGERPRINT = 32

    def __init__(self, mem, version, full, stats, step, arr):
        self.mem, self.version, self.full, self.stats, self.step = mem, version, full, stats, step
        if type(arr) is np.ndarray and arr.ndim == 1:     # (the Recorder's flat arrays)
            self.fingerprint = arr[:: max(1, arr.size // self.FINGERPRINT)].copy()
        else:
            self.fingerprint = self._take(arr)

    @classmethod
    def _take(cls, arr):
        if not isinstance(arr, np.ndarray):
            return None            # device arrays: no reuse across steps (their statistics are cheap)
        x = arr.reshape(-1)
        return x[:: max(1, x.size // cls.FINGERPRINT)].copy()

    def fingerprint_matches(self, arr):
        fp = self.fingerprint
        if fp is None:
            return False
        if (type(arr) is np.ndarray and arr.dtype == fp.dtype and arr.dtype == _F32 and arr.ndim == 1
                and arr.size and arr.flags.c_contiguous and _compiled()):     # (fast_stats.usable(arr, small=True))
            # the same comparison, compiled: x[::step] == fp value for value (NaN never equal)
            return fast_stats.same_sample(arr, max(1, arr.size // self.FINGERPRINT), fp)
        now = self._take(arr)
        return now is not None and now.shape == fp.shape and bool((now == fp).all())


class _LayerPlan:
    """What recording a run of one layer visits, worked out once per Recorder and layer:
    its name and type, its bottoms, tops and params with their record names (the blob
    lists are the net's own, read at every run), and how its runs may write them."""

    __slots__ = ("name", "type", "layer", "bottoms", "bottom_names", "tops", "top_names", "param_names",
                 "need_backward", "python", "shares_top_data", "writes_param_diffs")

    def __init__(self, net, i):
        layer = self.layer = net._layers[i]
        self.name = net._layer_name_list[i]
        self.type = layer.type
        self.bottoms, self.tops = net.bottom_vecs[i], net.top_vecs[i]
        self.bottom_names = [net._blob_name_list[b] for b in net._bottom_id_vecs[i]]
        self.top_names = [net._blob_name_list[b] for b in net._top_id_vecs[i]]
        self.param_names = [net._param_display_names[p] for p in net._param_id_vecs[i]]
        self.need_backward = net._bottom_need_backward[i]
        self.python = layer.type == "Python"
        # Forward only hands its tops the bottom's data memory (Split, Flatten): no value written
        self.shares_top_data = bool(getattr(layer, "shares_data_on_run", False))
        # Backward may write its params' diffs (not BatchNorm's: Caffe flags them as propagating,
        # but its Backward never touches them, so their statistics stay valid)
        self.writes_param_diffs = bool(getattr(layer, "writes_param_diffs", True))


# ---------------------------------------------------------------------- the recorder
class Recorder:
    """Observes a Net's ranges and records per-layer statistics.

    ``stats``: compute blob statistics (else only times).  ``sentinel``: raise
    :class:`NonFiniteError` at the first layer producing a non-finite output
    (forward) or gradient (backward), or a non-finite param after an update.
    ``bins``: histogram bins (0: none).  ``max_steps`` bounds memory (oldest
    steps are dropped).  ``level``: "full" (every statistic and the histogram)
    or "health" (Caffe's mean |x| and NaN/Inf counts only: one pass per blob,
    cheap enough to leave on; the sentinel and debug_info lines work the same).
    ``hist_sample``: histograms of bigger blobs bin this many values spread over
    the blob (0: all).  ``focus``: None (every layer at ``level``) or a set of
    layer names: at the full level, only their blobs get the full statistics, the
    others the health level (what an inspector shows on screen).
    """

    _ids = itertools.count(1)

    LEVELS = ("full", "health")

    def __init__(self, net, stats=True, sentinel=False, bins=HIST_BINS, max_steps=200, level="full",
                 hist_sample=HIST_SAMPLE, focus=None):
        if level not in self.LEVELS:
            raise ValueError("Recorder level must be one of %s, not %r" % (", ".join(self.LEVELS), level))
        self.net = net
        self.level = level
        self.stats, self.sentinel, self.bins = stats, sentinel, bins
        self.max_steps = max_steps
        self.steps: List[StepRecord] = []
        self.first_nonfinite: Optional[NonFiniteFinding] = None
        self._cur = None
        self._t0 = self._tl = 0.0
        self._cache = {}
        self._plans = {}       # layer index -> _LayerPlan
        self._step_no = 0
        self.hist_sample = int(hist_sample or 0)
        self.focus = set(focus) if focus is not None else None
        self._solvers = []
        self.iteration = None
        net.debug_observers.append(self)

    def detach(self):
        if self in self.net.debug_observers:
            self.net.debug_observers.remove(self)
        for solver, _ in list(self._solvers):
            self.detach_solver(solver)

    def clear(self):
        self.steps.clear()
        self.first_nonfinite = None

    # ---------------------------------------------------------- observer protocol
    def begin(self, kind, start, end):
        self._step_no += 1
        self._cur = StepRecord(next(self._ids), kind, start, end, backend.mode(), iteration=self.iteration)
        self._t0 = time.perf_counter()

    def before_layer(self, kind, i):
        backend.synchronize()
        self._tl = time.perf_counter()

    def after_layer(self, kind, i):
        backend.synchronize()
        ms = (time.perf_counter() - self._tl) * 1000.0
        net = self.net
        plan = self._plans.get(i)
        if plan is None or plan.layer is not net._layers[i]:
            plan = self._plans[i] = _LayerPlan(net, i)
        rec = LayerRecord(i, plan.name, plan.type, kind, ms)
        self._invalidate(kind, i, plan)
        if self.stats:
            self._record_blobs(rec, plan, kind)
        if kind == "forward":
            layer = plan.layer
            for t, top in enumerate(plan.tops):
                w = loss_weight(layer, t)
                if w:
                    rec.loss = (rec.loss or 0.0) + float(w) * _scalar(top)
        self._cur.layers.append(rec)
        if self.stats:
            self._check_finite(rec, net, i, kind)

    def end(self, kind, start, end):
        # Keep what this step touched (still valid while the memory's version and
        # fingerprint hold); forget the rest, so that no stale memory stays referenced.
        self._forget_untouched()
        if self._cur is None:
            return
        self._cur.wall_ms = (time.perf_counter() - self._t0) * 1000.0
        self._append(self._cur)
        self._cur = None

    def _forget_untouched(self):
        """Drop the cache entries this step did not touch (in place: nearly every entry is
        touched, so the loop only looks)."""
        now = self._step_no
        cache = self._cache
        stale = [(key, shape) for key, per in cache.items() for shape, e in per.items() if e.step != now]
        for key, shape in stale:
            per = cache[key]
            del per[shape]
            if not per:
                del cache[key]

    def _append(self, step):
        self.steps.append(step)
        if len(self.steps) > self.max_steps:
            del self.steps[: len(self.steps) - self.max_steps]

    # ---------------------------------------------------------- recording
    def _invalidate(self, kind, i, plan=None):
        """Forget the cached stats of what layer ``i`` may have written: in forward its
        tops (data and diff; not the data of a top that only shares its bottom's, Split's
        and Flatten's, while recorded in this step), in backward the diffs of the
        bottoms it propagates to; in both the diffs of the params it propagates to.  What
        Caffe's contract says a run leaves alone keeps its stats while the memory's version
        (and, across steps, fingerprint) hold.  A Python layer may write anything."""
        plan = plan or _LayerPlan(self.net, i)
        cache = self._cache
        if plan.python:
            cache.clear()
            return
        drop = cache.pop
        layer = plan.layer
        if plan.writes_param_diffs:
            ppd = list(layer.param_propagate_down)
            n = len(ppd)
            for k, p in enumerate(layer.blobs):     # param data: its version and fingerprint tell (BatchNorm writes it)
                if k >= n or ppd[k]:                # (Layer.get_param_propagate_down)
                    drop(id(p._diff), None)
        if kind == "forward":
            now = self._step_no
            for t in plan.tops:
                key = id(t.data_memory)
                per = cache.get(key)
                if per is not None and not (plan.shares_top_data and all(e.step == now for e in per.values())):
                    del cache[key]
                drop(id(t.diff_memory), None)
        else:
            for b, need in zip(plan.bottoms, plan.need_backward):
                if need:
                    drop(id(b.diff_memory), None)

    def _record_blobs(self, rec, plan, kind):
        """The records of the layer's blobs: bottoms, tops, params in their order, each with
        its data statistics and, in backward, its diff's and its propagate flag
        (bottom_need_backward, param_propagate_down)."""
        full = self.level == "full" and (self.focus is None or plan.name in self.focus)
        stats = self._stats
        out = rec.blobs
        if kind == "forward":
            for k, (blob, name) in enumerate(zip(plan.bottoms, plan.bottom_names)):
                out.append(BlobRecord(name, "bottom", k, stats(blob, "data", full)))
            for k, (blob, name) in enumerate(zip(plan.tops, plan.top_names)):
                out.append(BlobRecord(name, "top", k, stats(blob, "data", full)))
            for k, (blob, name) in enumerate(zip(plan.layer.blobs, plan.param_names)):
                out.append(BlobRecord(name, "param", k, stats(blob, "data", full)))
            return
        need = list(plan.need_backward)
        for k, (blob, name) in enumerate(zip(plan.bottoms, plan.bottom_names)):
            out.append(BlobRecord(name, "bottom", k, stats(blob, "data", full), stats(blob, "diff", full),
                                  bool(need[k])))
        for k, (blob, name) in enumerate(zip(plan.tops, plan.top_names)):
            out.append(BlobRecord(name, "top", k, stats(blob, "data", full), stats(blob, "diff", full)))
        layer = plan.layer
        ppd = list(layer.param_propagate_down)      # (Layer.get_param_propagate_down: True past its end)
        for k, (blob, name) in enumerate(zip(layer.blobs, plan.param_names)):
            out.append(BlobRecord(name, "param", k, stats(blob, "data", full), stats(blob, "diff", full),
                                  bool(ppd[k]) if k < len(ppd) else True))

    def _stats(self, blob, which, full=True):
        """The blob's data or diff statistics: cached while valid, else computed
        (``full``: array_stats, else health_stats) and cached."""
        mem = blob.data_memory if which == "data" else blob.diff_memory
        if mem is None:             # no memory (count 0 since it was made): nothing to cache
            arr = _current(blob, which)
            return array_stats(arr, self.bins, self.hist_sample) if full else health_stats(arr)
        per_mem = self._cache.get(id(mem))
        if per_mem is None:
            per_mem = self._cache[id(mem)] = {}
        shape = blob.shape
        e = per_mem.get(shape)
        x = None
        if e is not None and e.mem is mem and e.version == mem.version and (e.full or not full):
            if e.step == self._step_no:
                return e.stats
            x = _flat(blob, mem)
            if e.fingerprint_matches(x):
                e.step = self._step_no
                return e.stats
        if x is None:
            x = _flat(blob, mem)
        if type(x) is np.ndarray and x.dtype == _F32 and x.size and _compiled():
            st = _flat_stats(x, shape, full, self.bins, self.hist_sample)
        else:
            a = x.reshape(shape)
            st = array_stats(a, self.bins, self.hist_sample) if full else health_stats(a)
        per_mem[shape] = _CacheEntry(mem, mem.version, full, st, self._step_no, x)
        return st

    def current_layer(self, i, kind):
        """The LayerRecord of layer ``i`` just recorded in the ``kind`` step under way
        (for observers that come after the Recorder), or None."""
        cur = self._cur
        if cur is None or not cur.layers:
            return None
        rec = cur.layers[-1]
        return rec if rec.layer_index == i and rec.direction == kind else None

    def asum_mean(self, blob, which):
        """Caffe's debug_info number of a blob recorded in the step under way, if any."""
        if self._cur is None:
            return None
        mem = blob.data_memory if which == "data" else blob.diff_memory
        e = self._cache.get(id(mem), {}).get(blob.shape)
        if e is None or e.mem is not mem or e.version != mem.version or e.step != self._step_no:
            return None
        return e.stats.asum_mean

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
            inputs_ok = all(self._input_finite(rec, x, in_which) for x in rec.blobs if x.role == in_role)
            params_ok = all(x.data is None or x.data.finite for x in rec.blobs if x.role == "param")
            f = NonFiniteFinding(self._cur.id, kind, i, rec.layer, rec.type, b.name, b.role, which,
                                 s.nan, s.inf, s.count, inputs_ok, params_ok)
            self._found(f, kind)
            return
        if kind == "backward":   # param gradients
            for b in rec.blobs:
                if b.role != "param" or not b.propagate or b.diff is None or b.diff.finite:
                    continue
                inputs_ok = all(x.diff is None or x.diff.finite for x in rec.blobs if x.role == "top")
                params_ok = all(x.data is None or x.data.finite for x in rec.blobs if x.role == "param")
                f = NonFiniteFinding(self._cur.id, kind, i, rec.layer, rec.type, b.name, "param", "diff",
                                     b.diff.nan, b.diff.inf, b.diff.count, inputs_ok, params_ok)
                self._found(f, kind)
                return

    def _input_finite(self, rec, x, which):
        """Whether input ``x`` of ``rec`` was finite when the layer read it.  An in-place
        input (the same blob as an output) is read after the layer overwrote it: its value
        before is the one the last earlier layer of this step recorded for that blob."""
        s = getattr(x, which)
        if s is None:
            return True
        out_role = "top" if x.role == "bottom" else "bottom"
        if any(o.role == out_role and o.name == x.name for o in rec.blobs):
            for prev in reversed(self._cur.layers[:-1] if self._cur.layers and self._cur.layers[-1] is rec
                                 else self._cur.layers):
                for o in prev.blobs:
                    if o.role == out_role and o.name == x.name and getattr(o, which) is not None:
                        return getattr(o, which).finite
        return s.finite

    def _found(self, f, kind):
        if self.first_nonfinite is None:
            self.first_nonfinite = f
        if self.sentinel:
            self.end(kind, self._cur.start, self._cur.end)
            raise NonFiniteError(f)

    # ---------------------------------------------------------- solver updates
    def snapshot_params(self, net=None, iteration=None):
        """Stats of every learnable param's data and diff, and a copy of its data
        (on the device it lives on): the "before" of :meth:`record_update`."""
        net = net or self.net
        ids, data, dstats, gstats = [], [], [], []
        owners = net.param_owners
        for pid, owner in enumerate(owners):
            if owner >= 0:
                continue
            blob = net.all_params[pid]
            arr = _current(blob, "data")
            ids.append(pid)
            data.append(arr.copy())
            dstats.append(self._stats(blob, "data") if self.stats else None)     # cached while unchanged
            gstats.append(self._stats(blob, "diff") if self.stats else None)
        return ParamSnapshot(ids, data, dstats, gstats, iteration, time.perf_counter())

    def record_update(self, net=None, before=None, iteration=None, lr=None):
        """One StepRecord of kind "update": per learnable param the data after,
        the diff (the update value Caffe leaves there), the data before and the
        gradient (from ``before``), delta = after - before and the update-to-weight
        ratio |Δw|/|w|.  ``before``: a :class:`ParamSnapshot` from
        :meth:`snapshot_params` or a list of arrays (the learnable params' data,
        in ``net.learnable_params`` order)."""
        net = net or self.net
        if before is None:
            raise ValueError("record_update needs the params before the update (snapshot_params)")
        if not isinstance(before, ParamSnapshot):
            arrays = [np.asarray(a) if not backend.is_gpu_array(a) else a for a in before]
            ids = [pid for pid, o in enumerate(net.param_owners) if o < 0]
            if len(arrays) != len(ids):
                raise ValueError("record_update: %d arrays for %d learnable params" % (len(arrays), len(ids)))
            before = ParamSnapshot(ids, arrays, [array_stats(a, self.bins) for a in arrays],
                                   [None] * len(ids), None, 0.0)
        backend.synchronize()
        t_end = time.perf_counter()
        it = iteration if iteration is not None else before.iteration
        step = StepRecord(next(self._ids), "update", 0, max(len(net.layers) - 1, 0), backend.mode(),
                          iteration=it if it is not None else self.iteration)
        if lr is not None:
            step.meta["lr"] = float(lr)
        step.wall_ms = (t_end - before.t0) * 1000.0 if before.t0 else 0.0
        layer_recs = {}
        lr_mults = net.params_lr
        learnable_index = {pid: k for k, pid in enumerate(pid for pid, o in enumerate(net.param_owners)
                                                          if o < 0)}
        for k, pid in enumerate(before.net_param_ids):
            li, pi = net.param_layer_indices[pid]
            rec = layer_recs.get(li)
            if rec is None:
                rec = layer_recs[li] = LayerRecord(li, net.layer_names[li], net.layers[li].type, "update", 0.0)
            blob = net.all_params[pid]
            after = _current(blob, "data")
            old = before.data[k]
            xp = backend.xp_of(after)
            if backend.xp_of(old) is not xp:
                old = backend.to_host(old) if xp is np else backend.to_device(old)
            with np.errstate(all="ignore"):
                delta = after.astype(old.dtype, copy=False) - old
            br = BlobRecord(net.param_display_names[pid], "param", pi)
            br.data = self._stats(blob, "data")      # kept: the next forward step reuses them
            br.diff = self._stats(blob, "diff")
            br.before = before.data_stats[k] or array_stats(old, self.bins)
            br.grad = before.grad_stats[k]
            br.delta = array_stats(delta, self.bins)
            br.ratio = update_ratio(br.delta.l2, br.before.l2)
            lk = learnable_index.get(pid)
            br.propagate = bool(lr_mults[lk] != 0) if lk is not None and lk < len(lr_mults) else None
            rec.blobs.append(br)
        step.layers = [layer_recs[i] for i in sorted(layer_recs)]
        self._append(step)
        for rec in step.layers:
            for b in rec.blobs:
                if not b.data.finite:
                    f = NonFiniteFinding(step.id, "update", rec.layer_index, rec.layer, rec.type, b.name,
                                         "param", "data", b.data.nan, b.data.inf, b.data.count,
                                         b.grad is None or b.grad.finite, b.before.finite)
                    if self.first_nonfinite is None:
                        self.first_nonfinite = f
                    if self.sentinel:
                        raise NonFiniteError(f)
                    break
        return step

    def attach_solver(self, solver):
        """Record every update ``solver`` applies (wraps the instance's
        ``apply_update``; :meth:`detach_solver` restores it).  Also stamps the
        records with the solver's iteration."""
        if any(s is solver for s, _ in self._solvers):
            return
        original = solver.__dict__.get("apply_update")
        bound = solver.apply_update
        rec = self

        def apply_update():
            before = rec.snapshot_params(solver.net, iteration=solver.iter)
            bound()
            rec.record_update(solver.net, before)
            rec.iteration = solver.iter

        solver.apply_update = apply_update
        self._solvers.append((solver, original))
        self.iteration = solver.iter

    def detach_solver(self, solver):
        for k, (s, original) in enumerate(self._solvers):
            if s is solver:
                if original is None:
                    solver.__dict__.pop("apply_update", None)
                else:
                    solver.apply_update = original
                del self._solvers[k]
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

    def to_dict(self):
        return {"schema_version": SCHEMA_VERSION, "steps": [s.to_dict() for s in self.steps],
                "first_nonfinite": self.first_nonfinite.to_dict() if self.first_nonfinite else None}


class UpdateHook:
    """A solver callback (``solver.add_callback(UpdateHook(recorder, solver))``)
    that records updates without wrapping the solver: ``on_gradients_ready``
    snapshots the params, the next ``on_start`` (or :meth:`flush`, after the last
    step) records the update.  The update value (``diff``) is then the cleared
    diff; ``delta`` and ``ratio`` are exact."""

    def __init__(self, recorder, solver):
        self.recorder, self.solver = recorder, solver
        self._before = None

    def on_start(self):
        self.flush()
        self.recorder.iteration = self.solver.iter

    def on_gradients_ready(self):
        self._before = self.recorder.snapshot_params(self.solver.net, iteration=self.solver.iter)

    def flush(self):
        if self._before is not None:
            before, self._before = self._before, None
            return self.recorder.record_update(self.solver.net, before)
        return None


def update_ratio(delta_l2, weight_l2):
    """|Δw| / |w|: None when both are 0, inf when only |w| is 0."""
    if weight_l2 is None or delta_l2 is None:
        return None
    if weight_l2 == 0:
        return None if delta_l2 == 0 else float("inf")
    return delta_l2 / weight_l2


def _scalar(blob):
    """The sum of a loss top's values, as a float (one number crosses to the host)."""
    if blob.count == 0:
        return 0.0
    arr = _current(blob, "data")
    with np.errstate(all="ignore"):
        return float(backend.to_host(arr.reshape(-1).sum(dtype=backend.xp_of(arr).float64)))


def steps_from_dicts(items):
    """StepRecords from their ``to_dict`` form (a report's ``steps``)."""
    return [StepRecord.from_dict(d) for d in items]


def caffe_debug_lines(step):
    """Caffe's debug_info lines (net.cpp ForwardDebugInfo / BackwardDebugInfo) of a
    recorded step, from its records (numbers as Caffe prints them)."""
    from engine.core.log import num
    out = []
    for rec in step.layers:
        if rec.direction == "forward":
            for b in rec.blobs:
                if b.role == "top" and b.data is not None:
                    out.append("    [Forward] Layer %s, top blob %s data: %s"
                               % (rec.layer, b.name, num(np.float32(b.data.asum_mean))))
            for b in rec.blobs:
                if b.role == "param" and b.data is not None:
                    out.append("    [Forward] Layer %s, param blob %s data: %s"
                               % (rec.layer, b.name, num(np.float32(b.data.asum_mean))))
        elif rec.direction == "backward":
            for b in rec.blobs:
                if b.role == "bottom" and b.propagate and b.diff is not None:
                    out.append("    [Backward] Layer %s, bottom blob %s diff: %s"
                               % (rec.layer, b.name, num(np.float32(b.diff.asum_mean))))
            for b in rec.blobs:
                if b.role == "param" and b.propagate and b.diff is not None:
                    out.append("    [Backward] Layer %s, param blob %d diff: %s"
                               % (rec.layer, b.index, num(np.float32(b.diff.asum_mean))))
        else:
            for b in rec.blobs:
                if b.role == "param" and b.data is not None:
                    out.append("    [Update] Layer %s, param %s data: %s; diff: %s"
                               % (rec.layer, b.name, num(np.float32(b.data.asum_mean)),
                                  num(np.float32(b.diff.asum_mean)) if b.diff is not None else "-"))
    return out


def all_params_line(net):
    """Net::Backward's debug line: L1 and L2 norms of every owned param's data and diff."""
    from engine.core.log import num
    asum_data = asum_diff = sumsq_data = sumsq_diff = 0.0
    for p, owner in zip(net.all_params, net.param_owners):
        if owner >= 0:
            continue
        asum_data += p.asum_data()
        asum_diff += p.asum_diff()
        sumsq_data += p.sumsq_data()
        sumsq_diff += p.sumsq_diff()
    return ("    [Backward] All net params (data, diff): L1 norm = (%s, %s); L2 norm = (%s, %s)"
            % (num(np.float32(asum_data)), num(np.float32(asum_diff)),
               num(np.float32(np.sqrt(sumsq_data))), num(np.float32(np.sqrt(sumsq_diff)))))

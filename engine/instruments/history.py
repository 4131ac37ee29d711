"""The timeline: every action on a net is a step in a history.

An action (a forward range, a backward range, forward + backward, one solver
iteration) becomes one :class:`Step` holding the
:class:`engine.instruments.debug.StepRecord`\\ s the Recorder made while it ran
(statistics and histograms of every blob the layers touched).  Full arrays are
kept only for the blobs the user pinned (:meth:`Timeline.pin`), copied to the
host after each step, within a memory budget shared with the records.

    tl = Timeline(net, budget_bytes=256 << 20)
    tl.pin("conv1")                              # keep conv1's data after every step
    before = len(recorder.steps)
    net.Forward()
    tl.record("forward", recorder.steps[before:], label="Forward")
    tl.layer_records(3)          # {(layer index, direction): LayerRecord} as after step 3
    tl.blob_stats(3, "conv1", "data")            # BlobStats as after step 3
    tl.pinned_array(3, "conv1", "data")          # the array as after step 3 (pinned blobs)
    tl.diff(2, 5)                # [BlobDelta]: what changed from step 2 to step 5, most first

Memory: a step costs its records (BlobStats shared between steps are counted
once: the Recorder reuses the statistics of unchanged params and activations)
plus its pinned arrays (an array equal to the same pin's copy at the step before
is shared, not copied).  When the total passes the budget, the oldest steps'
pinned arrays are dropped first, then the oldest steps themselves (never the
newest); :attr:`Timeline.dropped_arrays` and :attr:`Timeline.dropped_steps`
count them and :meth:`Timeline.summary` says so.  Step indices stay as they were
given (the first kept step may be > 0 after drops).
"""
import math
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from engine.core import backend
from engine.instruments.breakpoints import stat_value

ACTIONS = ("forward", "backward", "forward_backward", "solver_iteration")
DEFAULT_BUDGET = 256 << 20
DIFF_STATS = ("mean_abs", "max_abs", "std", "zero_fraction", "l2")


@dataclass
class Step:
    """One action: its records, the pinned arrays after it, the breakpoint hits during it."""
    index: int
    action: str
    label: str
    records: list
    start: Optional[int] = None
    end: Optional[int] = None
    wall_time: Optional[float] = None          # seconds
    iteration: Optional[int] = None
    pinned: Dict[Tuple[str, str], np.ndarray] = field(default_factory=dict)
    hits: list = field(default_factory=list)
    record_bytes: int = 0

    @property
    def pinned_bytes(self):
        return sum(int(a.nbytes) for a in self.pinned.values())

    @property
    def kinds(self):
        return tuple(r.kind for r in self.records)

    def layers_run(self):
        return sum(len(r.layers) for r in self.records)

    def to_dict(self):
        return {"index": self.index, "action": self.action, "label": self.label, "start": self.start,
                "end": self.end, "wall_ms": None if self.wall_time is None else 1000.0 * self.wall_time,
                "iteration": self.iteration, "records": [r.id for r in self.records], "kinds": list(self.kinds),
                "layers_run": self.layers_run(), "pinned": ["%s.%s" % k for k in sorted(self.pinned)],
                "hits": [h.to_dict() if hasattr(h, "to_dict") else dict(h) for h in self.hits]}


@dataclass
class BlobDelta:
    """How a blob's data or diff changed between two steps."""
    blob: str                      # blob name, or LAYER/K for a param
    side: str                      # "data" or "diff"
    stat: str                      # the statistic that moved most ("array": pinned arrays compared)
    before: Optional[float]
    after: Optional[float]
    rel_change: float              # |after - before| / max(|before|, |after|); inf: recorded in one step only
    max_abs_change: Optional[float] = None   # pinned arrays: max |b - a|
    layer: str = ""                # the layer whose record holds the later value

    def to_dict(self):
        return dict(self.__dict__)


class Timeline:
    """The history of a net's actions (see the module doc)."""

    def __init__(self, net=None, budget_bytes=DEFAULT_BUDGET):
        self.net = net
        self.budget_bytes = int(budget_bytes)
        self.steps: List[Step] = []
        self.pins = set()
        self.dropped_steps = 0
        self.dropped_arrays = 0
        self._next = 0
        self._stats_refs = {}       # id(BlobStats) -> [references from kept steps, bytes]
        self._records_bytes = 0

    # ------------------------------------------------------------ access
    def __len__(self):
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)

    def __getitem__(self, index):
        st = self.get(index)
        if st is None:
            raise IndexError("timeline step %r is not kept (steps %s)" % (index, self.span_text()))
        return st

    def get(self, index):
        """The Step with that index, or None (never recorded, or dropped for the budget)."""
        if not self.steps or index is None:
            return None
        k = int(index) - self.steps[0].index
        if 0 <= k < len(self.steps) and self.steps[k].index == int(index):
            return self.steps[k]
        return None

    @property
    def indices(self):
        return [s.index for s in self.steps]

    @property
    def last(self):
        return self.steps[-1] if self.steps else None

    def span_text(self):
        if not self.steps:
            return "none"
        a, b = self.steps[0].index, self.steps[-1].index
        return str(a) if a == b else "%d..%d" % (a, b)

    # ------------------------------------------------------------ pins
    def pin(self, blob, side="data"):
        """Keep ``blob``'s full ``side`` array after every later step."""
        if side not in ("data", "diff"):
            raise ValueError("a pin keeps a blob's data or diff, not %r" % (side,))
        if self.net is not None and self._blob(blob) is None:
            raise KeyError("the net has no blob or param %r to pin" % (blob,))
        self.pins.add((blob, side))

    def unpin(self, blob, side="data"):
        self.pins.discard((blob, side))

    def _blob(self, name):
        net = self.net
        if name in net.blobs:
            return net.blobs[name]
        layer, _, k = name.rpartition("/")
        if layer in net.layer_names and k.isdigit():
            i = net.layer_names.index(layer)
            if int(k) < len(net.layers[i].blobs):
                return net.layers[i].blobs[int(k)]
        return None

    # ------------------------------------------------------------ recording
    def record(self, action, records, label="", iteration=None, hits=()):
        """Add one step made of ``records`` (StepRecords); copies the pinned arrays now."""
        records = list(records)
        start = end = None
        if records:
            if len(records) == 1:
                start, end = records[0].start, records[0].end
            else:
                start = min(min(r.start, r.end) for r in records)
                end = max(max(r.start, r.end) for r in records)
        if iteration is None:
            its = [r.iteration for r in records if r.iteration is not None]
            iteration = its[-1] if its else None
        wall = sum(float(r.wall_ms or 0.0) for r in records) / 1000.0 if records else None
        step = Step(self._next, action, label or action, records, start, end, wall, iteration, hits=list(hits))
        self._next += 1
        step.record_bytes = self._count_records(records, +1)
        step.pinned = self._copy_pins()
        self.steps.append(step)
        self._enforce_budget()
        return step

    def _copy_pins(self):
        if self.net is None or not self.pins:
            return {}
        prev = self.steps[-1].pinned if self.steps else {}
        out = {}
        for key in sorted(self.pins):
            blob = self._blob(key[0])
            if blob is None:
                continue
            if not blob.has_memory:           # count 0 since it was made: an empty array, no CHECK(data_)
                arr = np.zeros(blob.shape, blob.dtype)
            else:
                arr = np.asarray(backend.to_host(blob.diff if key[1] == "diff" else blob.data))
            old = prev.get(key)
            if old is not None and old.shape == arr.shape and np.array_equal(old, arr, equal_nan=True):
                out[key] = old                       # unchanged: share the previous copy
            else:
                out[key] = np.array(arr, copy=True)
        return out

    def add_hits(self, hits):
        """Breakpoint hits of the last step (when they are known only after it was recorded)."""
        if self.steps:
            self.steps[-1].hits.extend(hits)

    # ------------------------------------------------------------ memory
    @property
    def records_bytes(self):
        return self._records_bytes

    @property
    def pinned_bytes(self):
        seen, total = set(), 0
        for s in self.steps:
            for a in s.pinned.values():
                if id(a) not in seen:
                    seen.add(id(a))
                    total += int(a.nbytes)
        return total

    @property
    def memory_bytes(self):
        return self.records_bytes + self.pinned_bytes

    def _count_records(self, records, sign):
        """Add (sign +1) or remove (-1) the records' bytes; returns the bytes of
        what is not shared with other kept steps (when adding)."""
        own = 0
        seen = set()
        for r in records:
            n = _obj_bytes(r) + _obj_bytes(r.layers) + _obj_bytes(r.meta)
            for l in r.layers:
                n += _obj_bytes(l) + _obj_bytes(l.blobs)
                for b in l.blobs:
                    n += _obj_bytes(b)
                    for s in (b.data, b.diff, b.before, b.grad, b.delta):
                        if s is None or id(s) in seen:
                            continue
                        seen.add(id(s))
                        ref = self._stats_refs.get(id(s))
                        if sign > 0:
                            if ref is None:
                                size = _stats_bytes(s)
                                self._stats_refs[id(s)] = [1, size, s]
                                n += size
                            else:
                                ref[0] += 1
                        elif ref is not None:
                            ref[0] -= 1
                            if ref[0] <= 0:
                                del self._stats_refs[id(s)]
                                n += ref[1]
            own += n
        self._records_bytes += sign * own
        return own

    def _enforce_budget(self):
        if self.memory_bytes <= self.budget_bytes:
            return
        for s in self.steps[:-1]:                    # oldest pinned arrays first
            if self.memory_bytes <= self.budget_bytes:
                return
            if s.pinned:
                self.dropped_arrays += len(s.pinned)
                s.pinned = {}
        while len(self.steps) > 1 and self.memory_bytes > self.budget_bytes:
            old = self.steps.pop(0)
            self._count_records(old.records, -1)
            self.dropped_steps += 1

    def summary(self):
        """One line: steps, memory against the budget, pins, what the budget dropped."""
        used, budget = self.memory_bytes, self.budget_bytes
        from engine.core.log import human_bytes
        text = "%d steps (%s) · records %s + pinned arrays %s = %s of the %s budget (%.1f%%)" % (
            len(self.steps), self.span_text(), human_bytes(self.records_bytes), human_bytes(self.pinned_bytes),
            human_bytes(used), human_bytes(budget), 100.0 * used / budget if budget else 0.0)
        if self.pins:
            text += " · pinned: " + ", ".join("%s.%s" % p for p in sorted(self.pins))
        if self.dropped_arrays or self.dropped_steps:
            text += " · over budget: dropped %d pinned arrays and %d oldest steps" % (
                self.dropped_arrays, self.dropped_steps)
        return text

    def to_dict(self):
        return {"budget_bytes": self.budget_bytes, "memory_bytes": self.memory_bytes,
                "records_bytes": self.records_bytes, "pinned_bytes": self.pinned_bytes,
                "pins": ["%s.%s" % p for p in sorted(self.pins)], "dropped_steps": self.dropped_steps,
                "dropped_arrays": self.dropped_arrays, "steps": [s.to_dict() for s in self.steps]}

    # ------------------------------------------------------------ scrubbing back
    def _upto(self, index):
        st = self[index]
        for s in self.steps:
            yield s
            if s is st:
                return

    def layer_records(self, index):
        """{(layer index, direction): LayerRecord} as they were after step ``index``
        (each layer's latest record in the kept steps up to it)."""
        out = {}
        for s in self._upto(index):
            for r in s.records:
                for l in r.layers:
                    out[(l.layer_index, l.direction)] = l
        return out

    def blob_states(self, index):
        """{(blob, side): (BlobStats, layer)} as after step ``index``: every blob's
        latest recorded data and diff (params as LAYER/K)."""
        out = {}
        for s in self._upto(index):
            for r in s.records:
                for l in r.layers:
                    for b in l.blobs:
                        key = "%s/%d" % (l.layer, b.index) if b.role == "param" else b.name
                        for side in ("data", "diff"):
                            st = getattr(b, side)
                            if st is None:
                                continue
                            old = out.get((key, side))
                            # a bottom's data is its producer's (the layer that wrote it)
                            keep = b.role == "bottom" and side == "data" and old is not None
                            out[(key, side)] = (st, old[1] if keep else l.layer)
        return out

    def blob_stats(self, index, name, side="data"):
        got = self.blob_states(index).get((name, side))
        return got[0] if got else None

    def pinned_array(self, index, name, side="data"):
        st = self.get(index)
        return None if st is None else st.pinned.get((name, side))

    # ------------------------------------------------------------ diff
    def diff(self, a, b, stats=DIFF_STATS, changed_only=True):
        """What changed from step ``a`` to step ``b``: one :class:`BlobDelta` per
        blob side (the statistic that moved most, or the pinned arrays themselves
        when both steps kept them), largest change first."""
        sa, sb = self.blob_states(a), self.blob_states(b)
        pa, pb = self[a].pinned, self[b].pinned
        out = []
        for key in sorted(set(sa) | set(sb)):
            name, side = key
            if key in pa and key in pb:
                d = _array_delta(name, side, pa[key], pb[key], (sb.get(key) or sa.get(key))[1])
                if d.rel_change > 0 or not changed_only:
                    out.append(d)
                continue
            if key not in sa or key not in sb:
                st, layer = (sb.get(key) or sa.get(key))
                v = _stat(st, "mean_abs")
                out.append(BlobDelta(name, side, "mean_abs", v if key in sa else None, v if key in sb else None,
                                     math.inf, None, layer))
                continue
            (s1, _l1), (s2, layer) = sa[key], sb[key]
            if s1 is s2:
                if not changed_only:
                    v = _stat(s1, "mean_abs")
                    out.append(BlobDelta(name, side, "mean_abs", v, v, 0.0, None, layer))
                continue
            best = None
            for stat in stats:
                v1, v2 = _stat(s1, stat), _stat(s2, stat)
                if v1 is None or v2 is None:
                    continue
                r = _rel(v1, v2)
                if best is None or r > best.rel_change:
                    best = BlobDelta(name, side, stat, v1, v2, r, None, layer)
            if best is not None and (best.rel_change > 0 or not changed_only):
                out.append(best)
        out.sort(key=lambda d: (-(d.rel_change if d.rel_change == d.rel_change else math.inf), d.blob, d.side))
        return out


# ---------------------------------------------------------------------- helpers
def _stat(st, stat):
    """:func:`breakpoints.stat_value`, and ``l2`` (None for partial stats)."""
    if stat == "l2":
        return None if st is None or st.partial else float(st.l2)
    return stat_value(st, stat)


def _rel(a, b):
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    if a == b:
        return 0.0
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return abs(b - a) / max(abs(a), abs(b))


def _array_delta(name, side, a, b, layer):
    if a is b:
        n = float(np.sqrt(np.sum(np.square(a, dtype=np.float64))))
        return BlobDelta(name, side, "array", n, n, 0.0, 0.0, layer)
    with np.errstate(all="ignore"):
        if a.shape != b.shape:
            na = float(np.sqrt(np.sum(np.square(a, dtype=np.float64))))
            nb = float(np.sqrt(np.sum(np.square(b, dtype=np.float64))))
            return BlobDelta(name, side, "array", na, nb, math.inf, None, layer)
        d = b.astype(np.float64) - a.astype(np.float64)
        na = float(np.sqrt(np.sum(np.square(a, dtype=np.float64))))
        nb = float(np.sqrt(np.sum(np.square(b, dtype=np.float64))))
        nd = float(np.sqrt(np.sum(np.square(d))))
        m = max(na, nb)
        rel = 0.0 if nd == 0 else (nd / m if m > 0 else math.inf)
        mx = float(np.max(np.abs(d))) if d.size else 0.0
    return BlobDelta(name, side, "array", na, nb, rel, mx, layer)


_FLOAT = sys.getsizeof(1.0)


def _obj_bytes(o):
    """The object's own bytes: the instance, its attribute dict, a list's slots."""
    n = sys.getsizeof(o)
    d = getattr(o, "__dict__", None)
    if d is not None:
        n += sys.getsizeof(d)
    return n


def _stats_bytes(s):
    """Bytes a BlobStats holds: the instance and dict, its floats, shape and histogram."""
    n = _obj_bytes(s) + 9 * _FLOAT + sys.getsizeof(s.shape)
    if s.hist:
        n += sys.getsizeof(s.hist) + sum(sys.getsizeof(c) for c in s.hist if c > 256)
    return n

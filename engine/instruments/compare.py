"""Two runs side by side, per layer: where do they part?

    cmp = compare_runs(recorder_cpu, recorder_gpu, rtol=1e-4)
    cmp = compare_runs(recorder, read_caffe_log("train.log"))        # the engine vs Caffe
    cmp = compare_runs("before.json", "after.json")                  # two saved reports
    cmp.first_divergence        # the first LayerComparison out of tolerance, or None
    print(cmp.format())

A run is anything holding :class:`engine.instruments.debug.StepRecord`\\ s: a Recorder, a
:class:`engine.instruments.caffe_log.CaffeLog`, a list of steps, a report dict (``steps``)
or a path (``.log``: a Caffe log; ``.json``: a report or a Recorder dump).

Steps are paired by kind in order (the k-th forward of A with the k-th forward
of B, ...), layers by name within a step, blobs by role and index, and for
each pair the statistics both sides know are compared (by default Caffe's
``asum_mean``, plus ``l2``/``min``/``max``/``mean``/``nan``/``inf`` when both
have them): ``rel = |a - b| / max(|a|, |b|, floor)`` (for the signed ``mean``,
``min`` and ``max``, ``max(|a|, |b|, mean |x|, floor)``; 0 when that is below
``atol``; NaN equals NaN), where ``floor`` is LAYER_FLOOR times the layer's scale
for that statistic (its largest magnitude over the layer's blobs' data, or their
diffs, in either run): a bias of 1.2e-08 against 0 in a layer whose weights and
outputs are near 1 is float noise, not the layer's worst difference.  The first layer, in step
order, with a value over ``rtol`` is where the runs part.
"""
import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from engine.instruments.debug import steps_from_dicts

DEFAULT_STATS = ("asum_mean", "l2", "min", "max", "mean", "std", "nan", "inf")
COUNTS = ("nan", "inf")      # statistics that count values: compared as they are
LAYER_FLOOR = 1e-2           # differences are measured against at least this share of the layer's scale


@dataclass
class BlobDiff:
    role: str
    index: int
    name: str
    which: str           # "data" or "diff"
    stat: str
    a: Optional[float]
    b: Optional[float]
    rel: float
    ok: bool


@dataclass
class LayerComparison:
    step: int            # index of the step pair
    kind: str
    layer: str
    type: str
    layer_index: int
    blobs: List[BlobDiff] = field(default_factory=list)
    max_rel: float = 0.0
    ok: bool = True
    time_a: Optional[float] = None
    time_b: Optional[float] = None
    only_in: Optional[str] = None      # "a" or "b" when the layer ran in one run only
    iteration: Optional[int] = None

    @property
    def worst(self):
        bad = [b for b in self.blobs if not b.ok]
        if not bad:
            return None
        return max(bad, key=lambda b: b.rel if b.rel == b.rel else math.inf)

    def worst_text(self, label_a, label_b, number=None):
        """What differs most, as text: "only in LABEL", "ROLE BLOB WHICH STAT: A vs B" or ""
        (``number`` writes A and B; default ``%.6g``)."""
        if self.only_in:
            return "only in %s" % (label_a if self.only_in == "a" else label_b)
        w = self.worst
        if w is None:
            return ""
        number = number or _g
        return "%s %s %s %s: %s vs %s" % (w.role, w.name, w.which, w.stat, number(w.a), number(w.b))


@dataclass
class Comparison:
    label_a: str
    label_b: str
    rtol: float
    atol: float
    layers: List[LayerComparison] = field(default_factory=list)
    steps_a: int = 0
    steps_b: int = 0
    notes: List[str] = field(default_factory=list)

    @property
    def first_divergence(self):
        for l in self.layers:
            if not l.ok:
                return l
        return None

    @property
    def ok(self):
        return self.first_divergence is None

    def to_dict(self):
        d = asdict(self)
        fd = self.first_divergence
        d["first_divergence"] = asdict(fd) if fd else None
        d["ok"] = self.ok
        return d

    def format(self, only_bad=False, limit=None):
        """A text table: one line per layer pair, then the verdict."""
        lines = ["%-5s %-9s %-24s %-18s %12s %12s  %s" % ("step", "kind", "layer", "type", "max rel", "worst",
                                                              "%s vs %s" % (self.label_a, self.label_b))]
        n = 0
        for l in self.layers:
            if only_bad and l.ok:
                continue
            what = l.worst_text(self.label_a, self.label_b)
            lines.append("%-5d %-9s %-24s %-18s %12s %12s  %s" % (
                l.step, l.kind, l.layer[:24], l.type[:18], _g(l.max_rel), "ok" if l.ok else "DIFFERS", what))
            n += 1
            if limit and n >= limit:
                break
        fd = self.first_divergence
        if fd is None:
            lines.append("runs agree within rtol %g (%d layer records compared)" % (self.rtol, len(self.layers)))
        else:
            w = fd.worst
            lines.append("runs part at step %d (%s), layer '%s' (%s): %s" % (
                fd.step, fd.kind, fd.layer, fd.type,
                ("only in %s" % (self.label_a if fd.only_in == "a" else self.label_b)) if fd.only_in else
                "%s blob '%s' %s %s = %s vs %s (rel %s > %g)" % (w.role, w.name, w.which, w.stat, _g(w.a),
                                                                _g(w.b), _g(w.rel), self.rtol)))
        lines.extend("note: " + n for n in self.notes)
        return "\n".join(lines)


def _g(x):
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return "%.6g" % x


def as_steps(run):
    """StepRecords from a Recorder, a CaffeLog, a list, a report dict or a path."""
    if run is None:
        return []
    if isinstance(run, (str, os.PathLike)):
        path = os.fspath(run)
        if path.endswith(".json"):
            with open(path) as f:
                return as_steps(json.load(f))
        from engine.instruments.caffe_log import read_caffe_log
        return read_caffe_log(path).steps
    if isinstance(run, dict):
        return steps_from_dicts(run.get("steps", []))
    if hasattr(run, "steps"):
        return list(run.steps)
    steps = list(run)
    if steps and isinstance(steps[0], dict):
        return steps_from_dicts(steps)
    return steps


def _label(run, default):
    if isinstance(run, (str, os.PathLike)):
        return os.path.basename(os.fspath(run))
    return default


def rel_diff(a, b, atol=1e-20, scale=0.0):
    """|a - b| / max(|a|, |b|, scale); 0 when that is below ``atol``; NaN equals NaN."""
    if a is None or b is None:
        return math.inf
    if math.isnan(a) or math.isnan(b):
        return 0.0 if (math.isnan(a) and math.isnan(b)) else math.inf
    if math.isinf(a) or math.isinf(b):
        return 0.0 if a == b else math.inf
    m = max(abs(a), abs(b), scale if scale == scale else 0.0)
    if m <= atol:
        return 0.0
    return abs(a - b) / m


def _known(s, stat):
    """The statistic when the stats object really has it (log stats know only asum_mean)."""
    if s is None:
        return None
    if getattr(s, "partial", False) and stat != "asum_mean":
        return None
    v = getattr(s, stat, None)
    return None if v is None else float(v)


def compare_runs(a, b, rtol=1e-3, atol=1e-20, stats=DEFAULT_STATS, kinds=("forward", "backward", "update"),
                 label_a=None, label_b=None):
    """A :class:`Comparison` of runs ``a`` and ``b`` (see the module doc)."""
    sa, sb = as_steps(a), as_steps(b)
    cmp = Comparison(label_a or _label(a, "A"), label_b or _label(b, "B"), rtol, atol,
                     steps_a=len(sa), steps_b=len(sb))
    by_kind_a, by_kind_b = {}, {}
    for s in sa:
        if s.kind in kinds:
            by_kind_a.setdefault(s.kind, []).append(s)
    for s in sb:
        if s.kind in kinds:
            by_kind_b.setdefault(s.kind, []).append(s)
    # Pair in the order steps ran in A.
    pairs = []
    seen = {}
    for s in sa:
        if s.kind not in kinds:
            continue
        k = seen.get(s.kind, 0)
        seen[s.kind] = k + 1
        other = by_kind_b.get(s.kind, [])
        if k < len(other):
            pairs.append((s, other[k]))
    for kind in set(by_kind_a) | set(by_kind_b):
        na, nb = len(by_kind_a.get(kind, [])), len(by_kind_b.get(kind, []))
        if na != nb:
            cmp.notes.append("%d %s steps in %s, %d in %s; compared the first %d"
                             % (na, kind, cmp.label_a, nb, cmp.label_b, min(na, nb)))
    for n, (x, y) in enumerate(pairs):
        _compare_steps(cmp, n, x, y, rtol, atol, stats)
    if not pairs:
        cmp.notes.append("no steps of the same kind to compare")
    return cmp


def _compare_steps(cmp, n, x, y, rtol, atol, stats):
    ly = {}
    for l in y.layers:
        ly.setdefault(l.layer, l)
    names_x = set()
    for lx in x.layers:
        names_x.add(lx.layer)
        lc = LayerComparison(n, x.kind, lx.layer, lx.type, lx.layer_index, time_a=lx.time_ms,
                             iteration=x.iteration)
        other = ly.get(lx.layer)
        if other is None:
            # A log prints only blobs it has lines for; a layer with none is simply absent.
            if _has_values(lx, x.kind):
                lc.only_in, lc.ok, lc.max_rel = "a", False, math.inf
            else:
                continue
            cmp.layers.append(lc)
            continue
        lc.time_b = other.time_ms
        if not lc.type:
            lc.type = other.type
        floor = _layer_scales(lx, other, stats)
        for bx in lx.blobs:
            by = other.blob(bx.role, bx.index)
            if by is None:
                continue
            for which in ("data", "diff"):
                s1, s2 = getattr(bx, which), getattr(by, which)
                if s1 is None or s2 is None:
                    continue
                # Signed statistics are measured against the blob's magnitude (mean |x|): a mean
                # of gradients that cancel out is noise around 0, not a number to match.
                scale = max(_known(s1, "asum_mean") or 0.0, _known(s2, "asum_mean") or 0.0)
                for stat in stats:
                    v1, v2 = _known(s1, stat), _known(s2, stat)
                    if v1 is None or v2 is None:
                        continue
                    if stat in COUNTS:
                        r = rel_diff(v1, v2, atol)
                    else:
                        r = rel_diff(v1, v2, atol, max(scale if stat in ("mean", "min", "max") else 0.0,
                                                       LAYER_FLOOR * floor.get((which, stat), 0.0)))
                    ok = r <= rtol
                    lc.blobs.append(BlobDiff(bx.role, bx.index, bx.name, which, stat, v1, v2, r, ok))
                    if not ok:
                        lc.ok = False
                    if r > lc.max_rel or r != r:
                        lc.max_rel = r
        cmp.layers.append(lc)
    for l in y.layers:
        if l.layer not in names_x and _has_values(l, y.kind):
            cmp.layers.append(LayerComparison(n, y.kind, l.layer, l.type, l.layer_index, ok=False,
                                              max_rel=math.inf, time_b=l.time_ms, only_in="b",
                                              iteration=y.iteration))


def _layer_scales(x, y, stats):
    """{(which, stat): the largest |value| of that statistic over the blobs of a layer's
    two records} ("mean", "min" and "max" share one scale: the largest of the three)."""
    out: dict = {}
    for rec in (x, y):
        for b in rec.blobs:
            for which in ("data", "diff"):
                st = getattr(b, which, None)
                for stat in stats:
                    v = _known(st, stat)
                    if v is None or not math.isfinite(v):
                        continue
                    key = (which, "mean" if stat in ("min", "max") else stat)
                    out[key] = max(out.get(key, 0.0), abs(v))
    for which in ("data", "diff"):
        if (which, "mean") in out:
            out[(which, "min")] = out[(which, "max")] = out[(which, "mean")]
    return out


def _has_values(rec, kind):
    """Whether a layer record holds what a Caffe log would print for it."""
    for b in rec.blobs:
        if kind == "forward" and b.role in ("top", "param") and b.data is not None:
            return True
        if kind == "backward" and b.role in ("bottom", "param") and b.propagate and b.diff is not None:
            return True
        if kind == "update" and b.role == "param":
            return True
    return False

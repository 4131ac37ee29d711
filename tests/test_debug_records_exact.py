"""The Recorder's records are the statistics of what each blob held when its layer had run.

The Recorder reuses statistics (per-layer plans, a cache keyed by memory, version and
fingerprint, one compiled call per statistic): these tests run nets step after step, with
an observer after the Recorder that summarises every recorded blob afresh from its array
(``array_stats`` / ``health_stats``, the reference path) and asserts that each record
field is the same, bit for bit.  And the compiled one-call statistics against the separate
passes (``fast_stats.summary``, ``histogram``, ``caffe_asum``) they replace."""
import math

import numpy as np
import pytest

from engine.core.blob import caffe_asum
from engine.instruments import debug, fast_stats
from engine.instruments.debug import Recorder, array_stats, health_stats

pytestmark = pytest.mark.skipif(not fast_stats.AVAILABLE, reason="numba is not installed")

# A small residual net: in-place BatchNorm/Scale/ReLU chains, Splits, Eltwise, a strided
# convolution, pooling, an InnerProduct and a loss (what the tiny ResNet records).
RESNET = """
name: "small_res"
layer { name: "data" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } shape { dim: 2 } } }
layer { name: "stem" type: "Convolution" bottom: "data" top: "stem"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false weight_filler { type: "msra" } } }
layer { name: "stem_bn" type: "BatchNorm" bottom: "stem" top: "stem" }
layer { name: "stem_scale" type: "Scale" bottom: "stem" top: "stem" scale_param { bias_term: true } }
layer { name: "stem_relu" type: "ReLU" bottom: "stem" top: "stem" }
layer { name: "a" type: "Convolution" bottom: "stem" top: "a"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false weight_filler { type: "msra" } } }
layer { name: "a_bn" type: "BatchNorm" bottom: "a" top: "a" }
layer { name: "a_scale" type: "Scale" bottom: "a" top: "a" scale_param { bias_term: true } }
layer { name: "sum" type: "Eltwise" bottom: "stem" bottom: "a" top: "sum" }
layer { name: "sum_relu" type: "ReLU" bottom: "sum" top: "sum" }
layer { name: "down" type: "Convolution" bottom: "sum" top: "down"
  convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "pool" type: "Pooling" bottom: "down" top: "pool" pooling_param { pool: AVE global_pooling: true } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
  inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""


def _net(tmp_path, text=RESNET):
    import engine
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    net = engine.Net(str(path), engine.TRAIN)
    rng = np.random.default_rng(3)
    net.blobs["data"].data[...] = rng.standard_normal(net.blobs["data"].shape)
    net.blobs["label"].data[...] = rng.integers(0, 3, net.blobs["label"].shape)
    return net


def _blob(net, i, b):
    if b.role == "bottom":
        return net.bottom_vecs[i][b.index]
    if b.role == "top":
        return net.top_vecs[i][b.index]
    return net.layers[i].blobs[b.index]


def _same(a, b):
    return repr(a.to_dict()) == repr(b.to_dict())     # NaN fields compare equal as text


class Reference:
    """An observer after the Recorder: every record of the layer just run, against the
    statistics of the blobs' arrays now (the reference path)."""

    def __init__(self, net, rec):
        self.net, self.rec, self.checked = net, rec, 0
        net.debug_observers.append(self)

    def begin(self, kind, start, end):
        pass

    def end(self, kind, start, end):
        pass

    def before_layer(self, kind, i):
        pass

    def after_layer(self, kind, i):
        net, rec = self.net, self.rec
        got = rec.current_layer(i, kind)
        assert got is not None
        layer = net.layers[i]
        want = ([("bottom", k) for k in range(len(net.bottom_vecs[i]))]
                + [("top", k) for k in range(len(net.top_vecs[i]))]
                + [("param", k) for k in range(len(layer.blobs))])
        assert [(b.role, b.index) for b in got.blobs] == want
        names = dict(zip(net.blobs, range(len(net.blobs))))
        for b in got.blobs:
            if b.role != "param":
                ids = net._bottom_id_vecs[i] if b.role == "bottom" else net._top_id_vecs[i]
                assert b.name == net._blob_name_list[ids[b.index]] and b.name in names
            if kind == "forward":
                assert b.diff is None and b.propagate is None
            elif b.role == "bottom":
                assert b.propagate is bool(net._bottom_need_backward[i][b.index])
            elif b.role == "param":
                assert b.propagate is bool(layer.get_param_propagate_down(b.index))
            full = rec.level == "full" and (rec.focus is None or got.layer in rec.focus)
            for which in ("data", "diff") if kind == "backward" else ("data",):
                arr = debug._current(_blob(net, i, b), which)
                st = getattr(b, which)
                if full:
                    assert _same(st, array_stats(arr, rec.bins, rec.hist_sample)), (got.layer, b.name, which)
                else:   # a blob's full statistics of this step may stand for its health ones
                    assert (_same(st, health_stats(arr)) or _same(st, array_stats(arr, rec.bins, rec.hist_sample))), (
                        got.layer, b.name, which)
                self.checked += 1


def _steps(net, rounds=3):
    """Forward and backward steps with the inputs and params changed between them: through
    the API (the memory's version moves) and through arrays held from before (only the
    fingerprint tells)."""
    held_w = net.params["stem"][0].data
    held_in = net.blobs["data"].data
    rng = np.random.default_rng(11)
    for r in range(rounds):
        net.forward()
        net.backward()
        net.backward()                      # again: nothing written in between
        for name, ps in net.params.items():
            if name == "fc":
                ps[0].data[...] *= np.float32(0.9)
        if r == 0:
            held_w *= np.float32(1.5)         # no version change
            held_in[...] = rng.standard_normal(held_in.shape)
        if r == 1:
            net.blobs["data"].data[...] = rng.standard_normal(held_in.shape)


@pytest.mark.parametrize("level,hist_sample,focus", [("full", debug.HIST_SAMPLE, None), ("full", 100, None),
                                                     ("health", debug.HIST_SAMPLE, None),
                                                     ("full", debug.HIST_SAMPLE, {"a_bn", "fc", "sum"})])
def test_records_are_the_reference_statistics(tmp_path, level, hist_sample, focus):
    net = _net(tmp_path)
    rec = Recorder(net, level=level, hist_sample=hist_sample, focus=focus)
    ref = Reference(net, rec)
    _steps(net)
    assert ref.checked > 200
    kinds = [s.kind for s in rec.steps]
    assert kinds == ["forward", "backward", "backward"] * 3


def test_records_of_a_range_and_a_python_layer(tmp_path):
    """Ranges that start mid-net (a Split's input recorded in an earlier step) and a net
    with a Python layer (which may write anything) record the same numbers."""
    net = _net(tmp_path)
    rec = Recorder(net)
    ref = Reference(net, rec)
    net.forward()
    n = len(net.layers)
    split = next(i for i, l in enumerate(net.layers) if l.type == "Split")
    net.blobs["stem"].data[...] *= np.float32(2)
    net.ForwardFromTo(split, n - 1)
    net.BackwardFromTo(n - 1, split)
    net.BackwardFromTo(split - 1, 0)
    assert ref.checked > 50


def test_split_forward_reuses_its_input_statistics(tmp_path, monkeypatch):
    """Split's forward only shares its input's data: its tops' statistics are the ones
    recorded for that input in the same step (not computed again)."""
    net = _net(tmp_path)
    rec = Recorder(net)
    net.forward()
    calls = []
    real = debug.array_stats
    monkeypatch.setattr(debug, "array_stats", lambda a, *k, **kw: calls.append(a.size) or real(a, *k, **kw))
    real_flat = debug._flat_stats       # the Recorder's own path for flat float32 host arrays
    monkeypatch.setattr(debug, "_flat_stats", lambda x, *k: calls.append(x.size) or real_flat(x, *k))
    net.forward()
    step = rec.steps[-1]
    split = next(l for l in step.layers if l.type == "Split")
    relu = step.layer("stem_relu")
    assert all(b.data is relu.blob("top", 0).data for b in split.blobs)
    tops = sum(len(net.top_vecs[l.layer_index]) for l in step.layers if l.type not in ("Split",))
    assert 0 < len(calls) <= tops + sum(len(net.layers[l.layer_index].blobs) for l in step.layers)


# ---------------------------------------------------------------------- compiled calls
def _arrays():
    rng = np.random.default_rng(7)
    for n in (1, 2, 7, 8, 9, 15, 16, 17, 31, 63, 64, 65, 100, 255, 256, 257, 1000, 4096, 40000, 70001):
        for kind in range(8):
            x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
            if kind == 1:
                x[rng.integers(0, n)] = np.nan
            elif kind == 2:
                x[rng.integers(0, n)] = -np.inf
            elif kind == 3:
                x[:] = np.nan
            elif kind == 4:
                x[rng.integers(0, n, n // 2 + 1)] = 0
            elif kind == 5:
                x[:] = 3.0
            elif kind == 6:
                x[:] = np.float32(3e38)       # |x| sums overflow float32
            yield x


def test_one_call_statistics_are_the_separate_passes():
    """array_stats's one compiled call gives the BlobStats of the separate passes it replaces
    (summary, histogram, then debug._finish's arithmetic in Python), field for field."""
    for x in _arrays():
        n = x.size
        for bins, sample in ((32, 0), (32, 1 << 15), (0, 0), (7, 300)):
            with np.errstate(all="ignore"):
                s = fast_stats.summary(x)
                if bins and s[8] <= s[9]:
                    counts, _ = fast_stats.histogram(x, s[8], s[9], bins, sample, finite=not (s[6] or s[7]))
                else:
                    counts = np.zeros(bins, np.int64)
                want = debug._finish((n,), n, x.dtype, s, counts, bins)
            if bins and 0 < sample < n:
                want.hist_sample = fast_stats.sample_size(n, sample)
            got = array_stats(x, bins, sample)
            assert _same(got, want), (n, bins, sample, got, want)
            assert [type(v) for v in got.hist] == [int] * bins
            assert type(got.nan) is int and type(got.inf) is int
        with np.errstate(all="ignore"):
            want = caffe_asum(x)
        a, m = fast_stats.health(x)
        assert repr(a) == repr(want)
        with np.errstate(all="ignore"):
            assert repr(m) == repr(float(np.float32(want) / np.float32(n)))
        if math.isfinite(want):
            assert _same(health_stats(x), debug.BlobStats.only_asum(m, (n,), n))


def test_abs_sum_is_numpys_float32_sum():
    """The compiled |x| sum of up to 128 values (caffe_asum's lanes, tails and small
    arrays) adds as NumPy's float32 sum does, bit for bit."""
    rng = np.random.default_rng(5)
    for _ in range(3000):
        n = int(rng.integers(1, 129))
        x = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32)
        start = int(rng.integers(0, 3))
        y = np.concatenate([rng.standard_normal(start).astype(np.float32), x])
        assert fast_stats._abs_sum(y, start, n) == np.abs(x).sum(dtype=np.float32)


def test_compiled_fingerprint_is_numpys_comparison():
    rng = np.random.default_rng(2)
    for n in (1, 5, 32, 33, 100, 4096):
        x = rng.standard_normal(n).astype(np.float32)
        step = max(1, n // 32)
        fp = x[::step].copy()
        assert fast_stats.same_sample(x, step, fp)
        y = x.copy()
        y[(len(fp) - 1) * step] += 1
        assert not fast_stats.same_sample(y, step, fp)
        assert not fast_stats.same_sample(x, step, fp[:-1])
        z = x.copy()
        z[0] = np.nan
        assert not fast_stats.same_sample(z, step, z[::step].copy())
        if step > 1:
            w = x.copy()
            w[1] += 1                             # between samples: not seen, as NumPy's
            assert fast_stats.same_sample(w, step, fp)

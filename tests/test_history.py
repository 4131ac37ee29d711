"""engine.instruments.history: the timeline of actions, scrubbing back, pins within a
budget, diffs of two steps (no browser)."""
import math

import numpy as np
import pytest

from engine.instruments.debug import Recorder
from engine.instruments.history import Timeline
from tests.nets import lenet_with_inputs


@pytest.fixture
def lenet():
    net = lenet_with_inputs()
    return net, Recorder(net)


def _act(tl, rec, action, fn, label=""):
    n0 = rec.steps[-1].id if rec.steps else 0
    fn()
    return tl.record(action, [s for s in rec.steps if s.id > n0], label=label)


def test_every_action_is_a_step_with_its_records(lenet):
    net, rec = lenet
    tl = Timeline(net)
    n = len(net.layers)
    a = _act(tl, rec, "forward", lambda: net.ForwardFromTo(0, 3), "ForwardFromTo(0, 3)")
    b = _act(tl, rec, "forward_backward", lambda: (net.Forward(), net.Backward()))
    c = _act(tl, rec, "backward", lambda: net.BackwardFromTo(n - 1, 5))
    assert [s.index for s in tl] == [0, 1, 2] and tl.indices == [0, 1, 2]
    assert (a.action, a.label, a.start, a.end, a.kinds) == ("forward", "ForwardFromTo(0, 3)", 0, 3, ("forward",))
    assert b.kinds == ("forward", "backward") and (b.start, b.end) == (0, n - 1)
    assert c.kinds == ("backward",) and (c.start, c.end) == (n - 1, 5)
    assert a.layers_run() == 4 and b.layers_run() == n + sum(net.layer_need_backward)
    assert a.wall_time > 0 and tl[1] is b and tl.get(7) is None
    with pytest.raises(IndexError, match="not kept"):
        tl[7]


def test_scrub_back_gives_the_records_as_they_were(lenet):
    net, rec = lenet
    tl = Timeline(net)
    _act(tl, rec, "forward", lambda: net.Forward())
    conv1_0 = tl.blob_stats(0, "conv1", "data")
    net.blobs["data"].data[...] *= 3.0                     # new inputs: every activation changes
    _act(tl, rec, "forward", lambda: net.Forward())
    conv1_1 = tl.blob_stats(1, "conv1", "data")
    assert conv1_1.asum_mean != pytest.approx(conv1_0.asum_mean)
    # step 0 as it was, although the live net and records are newer
    assert tl.blob_stats(0, "conv1", "data") is conv1_0
    recs0 = tl.layer_records(0)
    assert recs0[(1, "forward")].blob("top", 0).data is conv1_0
    assert (1, "backward") not in recs0                     # nothing had run backward yet
    _act(tl, rec, "backward", lambda: net.Backward())
    assert (1, "backward") in tl.layer_records(2) and (1, "backward") not in tl.layer_records(1)
    # the layer records after step 1 are step 1's forward records
    assert tl.layer_records(1)[(1, "forward")].blob("top", 0).data is conv1_1
    # params by LAYER/K
    assert tl.blob_stats(2, "conv1/0", "diff") is not None and tl.blob_stats(1, "conv1/0", "diff") is None


def test_pinned_arrays_kept_per_step_shared_while_equal(lenet):
    net, rec = lenet
    tl = Timeline(net)
    with pytest.raises(KeyError, match="no blob or param 'nope'"):
        tl.pin("nope")
    tl.pin("conv1")
    tl.pin("conv1/0", "diff")
    _act(tl, rec, "forward", lambda: net.Forward())
    first = np.array(net.blobs["conv1"].data)
    _act(tl, rec, "backward", lambda: net.Backward())         # conv1's data unchanged: shared copy
    net.blobs["data"].data[...] *= -1
    _act(tl, rec, "forward", lambda: net.Forward())
    a0, a1, a2 = (tl.pinned_array(k, "conv1", "data") for k in range(3))
    assert np.array_equal(a0, first) and a1 is a0 and not np.array_equal(a2, a0)
    assert np.array_equal(a2, net.blobs["conv1"].data)
    net.blobs["conv1"].data[...] = 0                           # later changes do not touch the copies
    assert np.array_equal(tl.pinned_array(0, "conv1", "data"), first)
    assert np.array_equal(tl.pinned_array(1, "conv1/0", "diff"), net.params["conv1"][0].diff)
    assert tl.pinned_bytes == 2 * a0.nbytes + 2 * net.params["conv1"][0].diff.nbytes
    tl.unpin("conv1")
    _act(tl, rec, "forward", lambda: net.Forward())
    assert set(tl[3].pinned) == {("conv1/0", "diff")}


def test_memory_budget_drops_oldest_arrays_then_steps(lenet):
    net, rec = lenet
    nbytes = net.blobs["conv1"].data.nbytes
    tl = Timeline(net, budget_bytes=10 ** 9)
    _act(tl, rec, "forward", lambda: net.Forward())
    per_step_records = tl.records_bytes
    assert 0 < per_step_records < nbytes
    tl = Timeline(net, budget_bytes=int(2.5 * nbytes) + 50 * per_step_records)
    tl.pin("conv1")
    for _ in range(4):
        net.blobs["data"].data[...] += 1.0                   # conv1 changes every step
        _act(tl, rec, "forward", lambda: net.Forward())
    # only two copies fit: the oldest steps lost theirs, kept their records
    assert [bool(s.pinned) for s in tl] == [False, False, True, True]
    assert tl.dropped_arrays == 2 and tl.dropped_steps == 0 and len(tl) == 4
    assert tl.memory_bytes <= tl.budget_bytes and "dropped 2 pinned arrays" in tl.summary()
    assert tl.blob_stats(0, "conv1", "data") is not None   # scrubbing back still shows the statistics
    # records alone over budget: the oldest steps go, indices stay as given
    tl2 = Timeline(net, budget_bytes=int(2.5 * per_step_records))
    for _ in range(5):
        net.blobs["data"].data[...] += 1.0
        _act(tl2, rec, "forward", lambda: net.Forward())
    assert tl2.dropped_steps >= 2 and tl2.indices[-1] == 4 and tl2.indices == list(range(tl2.indices[0], 5))
    assert tl2.get(0) is None and tl2.memory_bytes <= tl2.budget_bytes
    assert tl2.to_dict()["dropped_steps"] == tl2.dropped_steps


def test_records_shared_between_steps_are_counted_once(lenet):
    net, rec = lenet
    tl = Timeline(net)
    _act(tl, rec, "forward", lambda: net.Forward())
    one = tl.records_bytes
    shared = {id(b.data) for l in tl[0].records[0].layers for b in l.blobs if b.role == "param"}
    _act(tl, rec, "forward", lambda: net.Forward())       # params unchanged: the Recorder reuses their stats
    again = {id(b.data) for l in tl[1].records[0].layers for b in l.blobs if b.role == "param"}
    assert again == shared and len(shared) == 8
    assert tl[1].record_bytes < one                        # ... and the timeline counts them once
    assert tl.records_bytes == one + tl[1].record_bytes


def test_diff_names_what_changed_and_by_how_much(lenet):
    net, rec = lenet
    tl = Timeline(net)
    tl.pin("ip2")
    _act(tl, rec, "forward", lambda: net.Forward())
    _act(tl, rec, "forward", lambda: net.Forward())        # nothing changed
    assert tl.diff(0, 1) == []
    net.params["ip2"][0].data[...] *= 2.0                   # only ip2 (and the loss) change
    _act(tl, rec, "forward", lambda: net.Forward())
    deltas = tl.diff(1, 2)
    changed = {(d.blob, d.side) for d in deltas}
    assert ("ip2", "data") in changed and ("ip2/0", "data") in changed and ("loss", "data") in changed
    assert ("conv1", "data") not in changed and ("ip1", "data") not in changed
    d = next(d for d in deltas if d.blob == "ip2")
    assert d.stat == "array" and d.layer == "ip2"          # pinned in both: the arrays themselves
    want = np.linalg.norm(tl.pinned_array(2, "ip2") - tl.pinned_array(1, "ip2")) / \
        max(np.linalg.norm(tl.pinned_array(2, "ip2")), np.linalg.norm(tl.pinned_array(1, "ip2")))
    assert d.rel_change == pytest.approx(want, rel=1e-6) and d.max_abs_change > 0
    w = next(d for d in deltas if d.blob == "ip2/0")
    assert w.after == pytest.approx(2 * w.before, rel=1e-5) and w.rel_change == pytest.approx(0.5, rel=1e-4)
    assert [x.rel_change for x in deltas] == sorted((x.rel_change for x in deltas), reverse=True)
    # a blob recorded in B only
    _act(tl, rec, "backward", lambda: net.Backward())
    new = [d for d in tl.diff(2, 3) if d.side == "diff" and d.blob == "conv1"]
    assert new and new[0].before is None and math.isinf(new[0].rel_change)


def test_two_timeline_steps_compared_part_where_they_differ(lenet):
    """Compare (engine.instruments.compare) on two steps' records: the first layer where
    they part is the one whose weights changed between them."""
    from engine.instruments.compare import compare_runs
    net, rec = lenet
    tl = Timeline(net)
    _act(tl, rec, "forward_backward", lambda: (net.Forward(), net.Backward()))
    net.params["conv2"][0].data[...] *= 1.5
    _act(tl, rec, "forward_backward", lambda: (net.Forward(), net.Backward()))
    cmp = compare_runs(tl[0].records, tl[1].records, rtol=1e-4, label_a="step 0", label_b="step 1")
    fd = cmp.first_divergence
    assert fd.layer == "conv2" and fd.kind == "forward"
    fwd = {l.layer: l for l in cmp.layers if l.kind == "forward"}
    assert fwd["conv1"].ok and fwd["pool1"].ok and not fwd["ip1"].ok
    same = compare_runs(tl[0].records, tl[0].records)
    assert same.ok and same.first_divergence is None

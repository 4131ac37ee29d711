"""Memory limits (issue 21): Caffe's INT_MAX check on every Blob it keeps, the buffers its
layers keep included, and a net's memory known at Init, before any of it is allocated.

- Caffe's ``Blob::Reshape`` checks ``shape[i] <= INT_MAX / count_`` axis by axis for every
  Blob: net blobs, params, and the layers' own (Convolution's ``col_buffer_``: one image's
  columns, kernel_dim x output pixels, far bigger than any top when the kernel is large).
  A mutant of a real net whose column buffer passes INT_MAX while every blob stays below it
  is refused at Init with Caffe's message, before anything big is allocated.
- ``net.memory_required_bytes``: what the blobs declare at Init (data and diff of tops,
  params and the layers' own blobs, the largest column buffer), counted as they are shaped;
  ``engine.memory_budget(n)`` refuses a net past ``n`` at the blob that passes it, before
  its memory is asked for.
"""
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

import engine
from engine import TEST, TRAIN, Net
from engine.core.blob import INT_MAX, Blob, blob_count, memory_budget
from engine.core.errors import MemoryBudgetExceeded, ShapeError
from engine.core.limits import LAYER_OVERHEAD
from engine.proto import caffe_pb2

ROOT = Path(__file__).resolve().parents[1]


def _param(path):
    p = caffe_pb2.NetParameter()
    text_format.Merge(open(path).read(), p)
    return p


def _layer(p, name):
    return next(lp for lp in p.layer if lp.name == name)


# ------------------------------------------------------------------ INT_MAX
@pytest.mark.parametrize("shape, refused", [
    ((INT_MAX,), False), ((INT_MAX + 1,), True), ((46341, 46341), True), ((46340, 46340), False),
    ((0, INT_MAX, INT_MAX), False),         # Caffe stops checking once the count is 0
    ((2, 3, 357913942), True), ((2, 3, 357913941), False),
])
def test_blob_count_is_caffes_check(shape, refused):
    if refused:
        with pytest.raises(ShapeError, match=r"^Check failed: shape\[i\] <= 0x7fffffff / count_ \(\d+ vs\. \d+\) "
                                             r"blob size exceeds INT_MAX"):
            blob_count(shape)
        with pytest.raises(ShapeError):
            Blob(shape)
    else:
        assert blob_count(shape) == int(np.prod(shape, dtype=object))


def test_caffes_numbers_in_the_message():
    # the first axis where count_ * shape[i] passes INT_MAX, with INT_MAX / count_ (integer division)
    with pytest.raises(ShapeError) as ei:
        blob_count((3, 1000, 1000, 1000), "col_buffer_")
    assert str(ei.value) == ("Check failed: shape[i] <= 0x7fffffff / count_ (1000 vs. 715) blob size exceeds "
                             "INT_MAX (col_buffer_ of shape 3 1000 1000 1000)")


@pytest.mark.shared
def test_a_mutant_whose_column_buffer_passes_int_max_is_refused_at_init(shared_dir):
    """CaffeNet with conv1's kernel widened to 121 (pad 60, stride 1): conv1's top is 1 x 96 x
    227 x 227 and no blob of the net comes near INT_MAX, but Caffe's col_buffer_ is 3*121*121 rows
    x 227*227 columns (2.26e9): Caffe stops at Init with Blob::Reshape's check.  So does the
    engine, naming the layer, before any memory is asked for (before: the process was killed
    while allocating)."""
    p = _param(shared_dir / "zoo" / "models" / "bvlc_reference_caffenet" / "deploy.prototxt")
    _layer(p, "data").input_param.shape[0].dim[0] = 1
    cp = _layer(p, "conv1").convolution_param
    cp.kernel_size[0], cp.stride[0] = 121, 1
    cp.pad.append(60)
    assert 3 * 121 * 121 * 227 * 227 > INT_MAX > 96 * 227 * 227
    tracemalloc.start()
    try:
        with memory_budget(4 << 30):        # a guard for this test: never more than 4 GiB declared
            with pytest.raises(ShapeError) as ei:
                Net.from_param(p, TEST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    e = ei.value
    assert e.layer == "conv1"
    assert str(e) == ("Check failed: shape[i] <= 0x7fffffff / count_ (227 vs. 215) blob size exceeds INT_MAX "
                      "(col_buffer_ of shape 43923 227 227) (layer 'conv1', type Convolution)")
    assert peak < 64 << 20, peak              # conv1's weights (17 MiB) and little else were allocated


def test_deconvolution_column_buffer_is_checked_too():
    """Deconvolution's col_buffer_ spans the input's pixels: kernel_dim x input spatial."""
    text = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 64 '
            'dim: 64 } } }\nlayer { name: "up" type: "Deconvolution" bottom: "data" top: "up" '
            'convolution_param { num_output: 256 kernel_size: 63 pad: 31 } }\n')
    p = caffe_pb2.NetParameter()
    text_format.Merge(text, p)
    with pytest.raises(ShapeError, match=r"col_buffer_ of shape 1016064 64 64\) \(layer 'up', type Deconvolution\)"):
        Net.from_param(p, TEST)


# ------------------------------------------------------------------ memory known before allocation
def _blobs_of(layer):
    """Every Blob a layer holds: its params and its own buffers (attributes, lists of them)."""
    out = list(layer.blobs)
    for v in vars(layer).values():
        out += [v] if isinstance(v, Blob) else [x for x in v if isinstance(x, Blob)] if isinstance(v, list) else []
    return out


def test_memory_required_counts_every_blob_of_a_real_net():
    """LeNet (TRAIN): the bytes counted at Init are the data and diff of every blob that exists
    after Init (tops, params, the layers' own blobs), plus the largest column buffer; and Init
    allocated none of the tops' memory (a blob gets it at its first use)."""
    net = Net(str(ROOT / "examples" / "lenet" / "lenet_train_test.prototxt"), TRAIN)
    blobs = {}
    for b in list(net.blobs.values()) + [x for layer in net.layers for x in _blobs_of(layer)]:
        blobs[id(b)] = b
    declared = sum(2 * b.count * b.dtype.itemsize for b in blobs.values())
    convs = [layer for layer in net.layers if layer.type == "Convolution"]
    cols = max(c.kernel_dim * c.group * int(np.prod(c.output_shape)) for c in convs) * 4
    assert net.memory_required_bytes == declared + cols
    assert net.memory_required_bytes > 2 * net.memory_used_bytes        # Caffe's "Memory required for data": tops
    assert all(net.blobs[n].data_memory.head == 0 for n in ("conv1", "pool1", "ip1"))     # not allocated yet


def test_the_budget_refuses_at_the_blob_that_passes_it(shared_dir):
    p = _param(shared_dir / "zoo" / "models" / "bvlc_reference_caffenet" / "deploy.prototxt")
    built = Net.from_param(p, TEST)
    # the blobs' memory, and each layer's own (engine.core.limits.LAYER_OVERHEAD)
    need = built.memory_required_bytes + len(built.layers) * LAYER_OVERHEAD
    with memory_budget(need):
        net = Net.from_param(p, TEST)                           # exactly enough
    assert net.memory_required_bytes == built.memory_required_bytes
    with memory_budget(need - 1):
        with pytest.raises(MemoryBudgetExceeded) as ei:
            Net.from_param(p, TEST)
    e = ei.value
    assert e.budget == need - 1 and e.needed == need and e.layer == "prob"        # the last blob declared
    assert isinstance(e, engine.CaffeError) and engine.MemoryBudgetExceeded is MemoryBudgetExceeded
    assert "more than the budget of" in str(e) and "(layer '%s'" % e.layer in str(e)


def test_a_net_far_past_the_budget_allocates_nothing_of_it():
    """A net that declares 16 GiB (each blob below INT_MAX): refused at its first blob, with a
    few KiB allocated; without the budget its Init takes it too (memory is used lazily)."""
    text = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1024 dim: 1024 '
            'dim: 1024 } } }\nlayer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
            'inner_product_param { num_output: 1024 } }\n')
    p = caffe_pb2.NetParameter()
    text_format.Merge(text, p)
    tracemalloc.start()
    try:
        with memory_budget(64 << 20):
            with pytest.raises(MemoryBudgetExceeded) as ei:
                Net.from_param(p, TEST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ei.value.layer == "data" and ei.value.needed == 2 * 4 * 1024 ** 3 + LAYER_OVERHEAD
    assert str(ei.value).startswith("the net needs at least 8.0 GiB of memory, more than the budget of 64.0 MiB "
                                    "(its blobs' data and diff, its work buffers and 16.0 KiB for its 1 layer "
                                    "themselves, counted at Init up to a blob of shape 1024 1024 1024 (1073741824), "
                                    "which passed the budget): refused before that memory is allocated (layer "
                                    "'data', type Input)")
    assert peak < 8 << 20, peak


def test_budgets_nest_and_count_every_net_inside():
    text = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 256 dim: 1024 } } }\n'
    p = caffe_pb2.NetParameter()
    text_format.Merge(text, p)
    one = 2 * 4 * 256 * 1024
    with memory_budget(3 * one) as outer:
        a = Net.from_param(p, TEST)
        b = Net.from_param(p, TEST)
        assert outer.total == 2 * one and a.memory_required_bytes == b.memory_required_bytes == one
        with pytest.raises(MemoryBudgetExceeded):
            with memory_budget(None):           # an inner ledger without a limit: the outer one still holds
                Net.from_param(p, TEST)
                Net.from_param(p, TEST)
    Net.from_param(p, TEST)                     # no budget outside

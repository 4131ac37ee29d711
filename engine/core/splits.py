"""Caffe's ``InsertSplits`` (``util/insert_splits.cpp``), pure, with records.

Wherever one top blob feeds more than one consumer, a ``Split`` layer is put
right after the layer that produces it (for net-level ``input`` fields, at the
front, named after the pseudo-layer ``"input"``), and each consumer reads its
own copy. A top with a non-zero ``loss_weight`` counts as one more consumer:
the split's first top carries that loss weight (the others 0), and the
producing layer's ``loss_weight`` list is cleared. In-place layers are handled
as in Caffe: a bottom refers to the most recent layer that wrote the blob.

Names are Caffe's: the split layer is ``<blob>_<layer>_<top index>_split`` and
its tops ``<blob>_<layer>_<top index>_split_<k>``.
"""
from dataclasses import dataclass, field
from typing import List, Tuple

from engine.core.errors import NetError, mark_layer
from engine.proto import caffe_pb2

__all__ = ["split_layer_name", "split_blob_name", "SplitConsumer", "InsertedSplit",
           "insert_splits"]

_INPUT = -1  # the layer index Caffe gives net-level inputs


def split_layer_name(layer_name, blob_name, blob_idx):
    """SplitLayerName: ``<blob>_<layer>_<idx>_split``."""
    return "%s_%s_%d_split" % (blob_name, layer_name, blob_idx)


def split_blob_name(layer_name, blob_name, blob_idx, split_idx):
    """SplitBlobName: ``<blob>_<layer>_<idx>_split_<k>``."""
    return "%s_%s_%d_split_%d" % (blob_name, layer_name, blob_idx, split_idx)


@dataclass(frozen=True)
class SplitConsumer:
    """Who reads one top of a split layer."""
    layer: str            # consumer layer name ("" for the loss use of the blob)
    layer_index: int      # its index in the net given to insert_splits (-1 for the loss use)
    bottom_index: int     # which of its bottoms (-1 for the loss use)
    split_top: str        # the split blob it now reads


@dataclass(frozen=True)
class InsertedSplit:
    """One Split layer InsertSplits added."""
    name: str                   # the split layer's name
    blob: str                   # the blob being split
    producer: str               # layer that produced it ("input" for a net input)
    producer_index: int         # its index in the given net (-1 for a net input)
    top_index: int              # which top of the producer (or which net input)
    tops: Tuple[str, ...]       # the split layer's tops, in order
    loss_weight: float          # the producer's loss weight moved onto tops[0] (0: none)
    consumers: Tuple[SplitConsumer, ...] = field(default_factory=tuple)
    position: int = 0           # the split layer's index in the returned net


def _split_layer(layer_name, blob_name, blob_idx, count, loss_weight):
    """ConfigureSplitLayer."""
    split = caffe_pb2.LayerParameter()
    split.bottom.append(blob_name)
    split.name = split_layer_name(layer_name, blob_name, blob_idx)
    split.type = "Split"
    for k in range(count):
        split.top.append(split_blob_name(layer_name, blob_name, blob_idx, k))
        if loss_weight:
            split.loss_weight.append(loss_weight if k == 0 else 0.0)
    return split


def insert_splits(param):
    """InsertSplits: ``(NetParameter with Split layers, [InsertedSplit, ...])``.

    ``param`` is not changed. Raises NetError ("Unknown bottom blob ...") when
    a bottom names a blob no earlier layer (or net input) produces.
    """
    out = type(param)()
    out.CopyFrom(param)
    del out.layer[:]
    last_top = {}          # blob name -> (layer index, top index) that last wrote it
    source_of = {}         # (layer, bottom index) -> (layer, top index) it reads
    use_count = {}         # (layer, top index) -> number of consumers
    loss_weight_of = {}    # (layer, top index) -> loss weight
    next_split = {}        # (layer, top index) -> next split top to hand out
    names = {_INPUT: "input"}
    readers = {}           # (layer, top index) -> [(layer index, bottom index)]

    for i, blob in enumerate(param.input):
        last_top[blob] = (_INPUT, i)
    for i, layer in enumerate(param.layer):
        names[i] = layer.name
        for j, blob in enumerate(layer.bottom):
            if blob not in last_top:
                raise mark_layer(NetError("Unknown bottom blob '%s' (layer '%s', bottom index %d)"
                                          % (blob, layer.name, j), layer=layer.name, blob=blob,
                                          field="bottom", field_index=j), "filtered", i)
            src = last_top[blob]
            source_of[(i, j)] = src
            use_count[src] = use_count.get(src, 0) + 1
            readers.setdefault(src, []).append((i, j))
        for j, blob in enumerate(layer.top):
            last_top[blob] = (i, j)
        # A top used as a loss counts like one more consumer.
        for j in range(min(len(layer.loss_weight), len(layer.top))):
            src = last_top[layer.top[j]]
            loss_weight_of[src] = layer.loss_weight[j]
            if loss_weight_of[src]:
                use_count[src] = use_count.get(src, 0) + 1

    records: List[InsertedSplit] = []

    def add_split(layer_idx, blob, top_idx):
        src = (layer_idx, top_idx)
        count = use_count.get(src, 0)
        weight = loss_weight_of.get(src, 0.0) if layer_idx != _INPUT else 0.0
        split = _split_layer(names[layer_idx], blob, top_idx, count, weight)
        consumers = []
        k = 0
        if weight:
            consumers.append(SplitConsumer("", -1, -1, split.top[0]))
            k = 1
        for (li, bj) in readers.get(src, []):
            consumers.append(SplitConsumer(param.layer[li].name, li, bj, split.top[k]))
            k += 1
        records.append(InsertedSplit(split.name, blob, names[layer_idx], layer_idx, top_idx,
                                     tuple(split.top), float(weight), tuple(consumers),
                                     len(out.layer)))
        out.layer.add().CopyFrom(split)
        return weight

    for i, blob in enumerate(param.input):
        if use_count.get((_INPUT, i), 0) > 1:
            add_split(_INPUT, blob, i)
    for i, layer in enumerate(param.layer):
        new_layer = out.layer.add()
        new_layer.CopyFrom(layer)
        for j in range(len(new_layer.bottom)):
            src = source_of[(i, j)]
            if use_count.get(src, 0) > 1:
                k = next_split.get(src, 0)
                new_layer.bottom[j] = split_blob_name(names[src[0]], new_layer.bottom[j],
                                                      src[1], k)
                next_split[src] = k + 1
        for j, blob in enumerate(new_layer.top):
            src = (i, j)
            if use_count.get(src, 0) > 1:
                if add_split(i, blob, j):
                    new_layer.ClearField("loss_weight")
                    next_split[src] = next_split.get(src, 0) + 1
    return out, records

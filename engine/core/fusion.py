"""Layers run as one pass when nothing watches between them.

A BatchNorm followed by a Scale (and a ReLU) written in place on the blob the BatchNorm
makes -- the ``conv -> bn -> scale -> relu`` of every ResNet and MobileNet prototxt -- writes
that blob three times in three passes over it.  :func:`chains` finds such runs once per
Net; :func:`forward` runs one as Caffe would (each layer's Reshape, the BatchNorm's
statistics) with the last three elementwise passes made one
(``engine.core.kernels.channel.bn_scale_relu``): every value goes through the same float32
steps, and every buffer the layers' Backward reads (BatchNorm's ``x_norm`` and ``std``,
Scale's copy of its input) holds what the separate passes leave in it.  Backward,
:func:`backward_relu_scale` runs the ReLU's Backward inside the Scale's, row by row (the
mask applied to a row just before the Scale reads it), then the BatchNorm's as it is.  Only
the intermediate states of the shared blob (its data after the BatchNorm and after the
Scale, its diff between the ReLU and the Scale) are never written, so the Net uses a chain
only when nobody could look at them: no debug observer, no callback of that direction, no
debug_info, and the layers fused inside the range run.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np

from engine.core.kernels import channel as _channel
from engine.core.layers.base import loss_weight

# ENGINE_FUSION=0 runs every layer on its own (to compare, or to rule the chains out)
ENABLED = os.environ.get("ENGINE_FUSION", "1") != "0"


@dataclass(frozen=True)
class Chain:
    """Layers ``start`` .. ``start + length - 1``: a BatchNorm, a Scale and (length 3) a ReLU."""
    start: int
    length: int
    bn: Any
    scale: Any
    relu: Optional[Any]

    def forward(self, bottom_vecs, top_vecs):
        forward(self, bottom_vecs, top_vecs)

    def backward_relu_scale(self, top_vecs, bottom_need_backward, bottom_vecs):
        backward_relu_scale(self, top_vecs, bottom_need_backward, bottom_vecs)


def _in_place_on(layer_bottoms, layer_tops, blob):
    return len(layer_bottoms) == 1 and len(layer_tops) == 1 and layer_bottoms[0] is blob and layer_tops[0] is blob


def chains(net) -> Dict[int, Chain]:
    """{index of the BatchNorm: Chain} for each BatchNorm whose top a Scale (a learned
    per-channel scale, axis 1, one axis, its bias inside) and then, optionally, a ReLU
    (negative_slope 0) take in place, none of them with a loss weight."""
    layers, bottoms, tops = net._layers, net._bottom_vecs, net._top_vecs
    out = {}
    if not ENABLED:
        return out
    n = len(layers)
    for i, bn in enumerate(layers):
        if bn.type != "BatchNorm" or i + 1 >= n or len(tops[i]) != 1:
            continue
        blob = tops[i][0]
        sc = layers[i + 1]
        if sc.type != "Scale" or not _in_place_on(bottoms[i + 1], tops[i + 1], blob):
            continue
        p = sc.layer_param.scale_param
        if p.axis != 1 or p.num_axes != 1 or len(sc.blobs) < 1:
            continue
        bias = sc.bias_layer
        if bias is not None and (len(sc.bias_bottom) != 1 or bias.blobs[0].count != sc.blobs[0].count):
            continue
        relu = None
        if (i + 2 < n and layers[i + 2].type == "ReLU" and _in_place_on(bottoms[i + 2], tops[i + 2], blob)
                and layers[i + 2].negative_slope == 0):
            relu = layers[i + 2]
        group = [bn, sc] + ([relu] if relu is not None else [])
        if any(loss_weight(layer, 0) for layer in group):
            continue
        out[i] = Chain(i, len(group), bn, sc, relu)
    return out


def forward(chain, bottom_vecs, top_vecs):
    """Run ``chain``'s layers forward (Layer.Forward of each, in order, as far as anything
    outside them can tell); their losses are 0."""
    i = chain.start
    bn, sc, relu = chain.bn, chain.scale, chain.relu
    with np.errstate(all="ignore"):
        b0, t0 = bottom_vecs[i], top_vecs[i]
        in_place = bn._in_place(b0, t0)
        bn.reshape(b0, t0)
        bn._check_in_place(in_place)
        last = bn.forward_but_last_pass(b0, t0)
        rest = [(sc, bottom_vecs[i + 1], top_vecs[i + 1])]
        if relu is not None:
            rest.append((relu, bottom_vecs[i + 2], top_vecs[i + 2]))
        for layer, b, t in rest:
            ip = layer._in_place(b, t)
            layer.reshape(b, t)
            layer._check_in_place(ip)
        if last is not None and _one_pass(last, sc, top_vecs[i + 1][0], relu is not None):
            return
        if last is not None:            # the BatchNorm's last pass, then the others' own
            bn.last_pass(last)
        for layer, b, t in rest:
            layer.forward(b, t)


def backward_relu_scale(chain, top_vecs, bottom_need_backward, bottom_vecs):
    """Run the Backward of ``chain``'s ReLU and then its Scale (layers start + 2 and start + 1)
    as one pass over the shared blob's rows (the ReLU's mask applied to a row just before the
    Scale reads it): the same float32 values as the two Backwards, row by row; where the
    compiled loop does not serve, the two Backwards."""
    r, k = chain.start + 2, chain.start + 1
    sc, relu = chain.scale, chain.relu
    with np.errstate(all="ignore"):
        blob = bottom_vecs[r][0]
        want_bias = sc.bias_layer is not None and sc.get_param_propagate_down(len(sc.param_propagate_down) - 1)
        x = blob.get_data()
        shape3 = (sc.outer, sc.mid, sc.inner)
        if (bottom_need_backward[r][0] and x.size == sc.outer * sc.mid * sc.inner
                and sc._backward_fused(top_vecs[k], list(bottom_need_backward[k]), bottom_vecs[k], want_bias,
                                       relu_x=x.reshape(shape3))):
            return
        relu.Backward(top_vecs[r], bottom_need_backward[r], bottom_vecs[r])
        sc.Backward(top_vecs[k], bottom_need_backward[k], bottom_vecs[k])


def _one_pass(last, sc, blob, relu):
    """The BatchNorm's last pass, the Scale's and the ReLU's as one, where the compiled
    loop serves their arrays; False (nothing done) where it does not."""
    kind, a, mean, std, y = last
    scale = sc.blobs[0].get_data().reshape(-1)
    if sc.outer * sc.mid * sc.inner != blob.count or sc.mid != scale.size or sc.mid != std.size:
        return False
    bias = sc.bias_layer.blobs[0].get_data().reshape(-1) if sc.bias_layer is not None else None
    shape3 = (sc.outer, sc.mid, sc.inner)
    if a.shape != shape3 or y.shape != shape3:
        return False
    temp = sc.temp.mut_data().reshape(shape3)
    arrays = [a, y, std, scale, temp] + ([mean] if mean is not None else []) + ([bias] if bias is not None else [])
    if not _channel.usable(*arrays):
        return False
    # the Scale writes the blob in place: Caffe's Forward asks for its data as mutable once more
    y = blob.mut_data().reshape(shape3)
    _channel.bn_scale_relu(kind, a, mean, std, scale, bias, temp, relu, y)
    return True

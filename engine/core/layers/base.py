"""Layer: the base class of every layer, after Caffe's layer.hpp.

``SetUp`` always runs in the same order: check blob counts, ``layer_setup``,
``reshape``, set loss weights.  ``Forward`` reshapes, runs ``forward`` and
returns the weighted loss of the tops (the loss weight lives in the top's
diff, as in Caffe).  Subclasses declare their blob counts as class attributes
and write one ``forward``/``backward`` body against ``self.xp`` (NumPy on the
CPU, CuPy on the GPU).
"""
from __future__ import annotations

import threading
from typing import Any, Sequence, Type

import numpy as np

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import LayerError, NetError, ShapeError
from engine.core.log import check_failed
from engine.core.types import BlobVec
from engine.core.vectors import BlobVec as ParamVec
from engine.proto import caffe_pb2

_WORK = threading.local()


def workspace(xp, name, shape, dtype):
    """A work array of ``shape``/``dtype`` on ``xp``'s device, kept between calls so a
    step allocates nothing (no page faults for big temporaries on the host).

    One flat buffer per (thread, ``name``, module, dtype), grown on demand and shared
    by every layer: its contents are undefined, and it is valid only until the next
    request for the same ``name`` on this thread (each call site uses its own name,
    so a layer that runs another layer inside it keeps its own buffer).  On the GPU
    the stream orders the reuse."""
    n = 1
    for d in shape:
        n *= int(d)
    arrays = _WORK.__dict__.setdefault("arrays", {})
    key = (name, xp.__name__, np.dtype(dtype).str)
    a = arrays.get(key)
    if a is None or a.size < n:
        arrays[key] = None          # let the old buffer go before the new one is made
        a = arrays[key] = xp.empty(max(n, 1), dtype=dtype)
    return a[:n].reshape(shape)


def fill_param(blob, filler):
    """``engine.core.fillers.fill``, with the constant filler (the default, and what deploy
    nets whose weights come from a caffemodel use) written in place: the same values
    without a float64 temporary of the blob's size; zeros into fresh memory are the
    zeros it was allocated with (no page touched until a value is written)."""
    if filler.type == "constant":
        mem = blob.data_memory
        fresh = mem is not None and mem.head == 0 and mem.size >= blob.count
        data = blob.data                    # the host copy, current (as fill leaves it)
        if not (fresh and filler.value == 0):
            data[...] = np.float64(filler.value)
        return
    from engine.core.fillers import fill
    fill(blob, filler)


def top_count(tops, i=0):
    """Element count of ``tops[i]`` (0 when the layer has no such top)."""
    return int(tops[i].count) if len(tops) > i else 0


def bottom_count(bottoms, i=0):
    """Element count of ``bottoms[i]`` (0 when the layer has no such bottom)."""
    return int(bottoms[i].count) if len(bottoms) > i else 0


def no_flops(layer, bottoms, tops):
    """Data, plumbing and copy layers: no arithmetic."""
    return 0, 0, True, "0"


def elementwise_flops(layer, bottoms, tops):
    """One operation per output element."""
    return 0, top_count(tops), True, "out"


def per_input_flops(layer, bottoms, tops):
    """One operation per input element (Accuracy, ArgMax: a comparison each)."""
    return 0, bottom_count(bottoms), True, "in"


def c_int(value):
    """``value`` as Caffe holds a uint32 field in an ``int`` (``kernel_shape_data[i] =
    conv_param.kernel_size(0)``, ``size_ = lrn_param().local_size()``, ...): wrapped to 32-bit
    two's complement, so 4294967295 is -1 and Caffe's checks see what they see."""
    value = int(value) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def check_eq(layer, a, b, expr, message=""):
    """CHECK_EQ(a, b) inside a layer: raises the layer's error with glog's text."""
    if a != b:
        raise layer.error(check_failed(expr, a, b, message))


class Layer:
    type = None
    # Per-type facts, kept on the class like the blob counts below; registries, the
    # inspector's table and the FLOP/memory analysis are derived from them, and
    # tests/test_layer_facts.py fails for a registered type that lacks one.
    category = None            # a key of engine.core.layers.registry.CATEGORIES
    summary = None             # one line: what the layer computes
    param_fields = ()          # the LayerParameter fields holding its settings
    shares_data_on_run = False  # top data shares the bottom's memory once it runs (Split, Flatten)
    shares_diff_on_run = False  # top diff shares the bottom's (Flatten)
    params_are_statistics = False  # its param blobs are running statistics Backward never writes (BatchNorm)
    # Blob-count declarations (-1: no constraint), as layer.hpp's virtuals.
    exact_num_bottom = -1
    min_bottom = -1
    max_bottom = -1
    exact_num_top = -1
    min_top = -1
    max_top = -1
    equal_num_bottom_top = False
    auto_top_blobs = False

    def flops(self, bottoms: BlobVec, tops: BlobVec) -> tuple[int, int, bool, str]:
        """``(macc, flops, counted, formula)`` of one forward pass over ``bottoms`` -> ``tops``
        (multiply-accumulates, floating-point operations, whether the type is modelled,
        the formula in words).  Every layer type overrides it."""
        return 0, 0, False, "not modelled"

    def __init__(self, param, dtype=np.float32):
        p = caffe_pb2.LayerParameter()
        p.CopyFrom(param)
        self.layer_param = p
        self.phase = p.phase
        self.dtype = np.dtype(dtype)
        self.__blobs = ParamVec._of((), dtype=self.dtype)
        self.param_propagate_down = []
        self.__loss = []          # mangled: a Python layer may have a `_loss` of its own
        if len(p.blobs):
            # Layer(param) constructor: blobs given in the param are copied in.
            for bp in p.blobs:
                b = Blob(dtype=self.dtype)
                b.from_proto(bp)
                self.blobs.append(b)

    # ---------------------------------------------------------------- helpers
    @property
    def blobs(self) -> ParamVec:
        """The layer's param blobs: pycaffe's ``caffe._caffe.BlobVec`` (``layer.blobs``,
        ``net.params[name]``), one object for the layer's life; assigning a sequence
        replaces its contents."""
        vec = self.__dict__.get("_Layer__blobs")
        if vec is None:
            vec = self.__blobs = ParamVec._of((), dtype=getattr(self, "dtype", np.float32))
        return vec

    @blobs.setter
    def blobs(self, value: Sequence[Blob]) -> None:
        self.blobs._items = list(value._items if isinstance(value, ParamVec) else value)

    @property
    def name(self) -> str:
        return self.layer_param.name

    @property
    def xp(self) -> Any:
        return backend.xp()

    @property
    def on_gpu(self) -> bool:
        return backend.mode() == backend.GPU

    def error(self, message: str, cls: Type[NetError] = LayerError, blob: str | None = None) -> NetError:
        """An exception naming this layer (raise the result)."""
        return cls("%s (layer '%s', type %s)" % (message, self.name, self.type),
                   layer=self.name, blob=blob)

    def check(self, cond: Any, message: str, cls: Type[NetError] = LayerError) -> None:
        if not cond:
            raise self.error(message, cls)

    def new_blob(self, shape: Sequence[int]) -> Blob:
        return Blob(shape, dtype=self.dtype)

    # ---------------------------------------------------------------- SetUp
    def SetUp(self, bottom: BlobVec, top: BlobVec) -> None:
        with np.errstate(all="ignore"):
            self.check_blob_counts(bottom, top)
            in_place = self._in_place(bottom, top)
            self.layer_setup(bottom, top)
            self.reshape(bottom, top)
            self._check_in_place(in_place)
            self.set_loss_weights(top)

    @staticmethod
    def _in_place(bottom, top):
        """(index, blob, shape) of each bottom that is also a top."""
        return [(i, b, b.shape) for i, b in enumerate(bottom) if any(t is b for t in top)]

    def _check_in_place(self, in_place):
        """A layer run in place must leave the shared blob's shape as it was: one whose
        Reshape changes it (a Tile, Reduction or InnerProduct written in place) makes Caffe
        read the bottom past its data."""
        for i, b, before in in_place:
            if b.shape != before:
                raise self.error("bottom %d is also a top (in place), and Reshape changed its shape from "
                                 "%s to %s: Caffe then reads the bottom past its data; this layer cannot "
                                 "run in place" % (i, _shape_text(before), _shape_text(b.shape)), ShapeError)

    def check_blob_counts(self, bottom: BlobVec, top: BlobVec) -> None:
        t, nb, nt = self.type, len(bottom), len(top)
        if self.exact_num_bottom >= 0 and nb != self.exact_num_bottom:
            raise self.error("%s Layer takes %d bottom blob(s) as input." % (t, self.exact_num_bottom))
        if self.min_bottom >= 0 and nb < self.min_bottom:
            raise self.error("%s Layer takes at least %d bottom blob(s) as input." % (t, self.min_bottom))
        if self.max_bottom >= 0 and nb > self.max_bottom:
            raise self.error("%s Layer takes at most %d bottom blob(s) as input." % (t, self.max_bottom))
        if self.exact_num_top >= 0 and nt != self.exact_num_top:
            raise self.error("%s Layer produces %d top blob(s) as output." % (t, self.exact_num_top))
        if self.min_top >= 0 and nt < self.min_top:
            raise self.error("%s Layer produces at least %d top blob(s) as output." % (t, self.min_top))
        if self.max_top >= 0 and nt > self.max_top:
            raise self.error("%s Layer produces at most %d top blob(s) as output." % (t, self.max_top))
        if self.equal_num_bottom_top and nb != nt:
            raise self.error("%s Layer produces one top blob as output for each bottom blob input." % t)

    def set_loss_weights(self, top: BlobVec) -> None:
        weights = self.layer_param.loss_weight
        if len(weights):
            if len(weights) != len(top):
                raise self.error("loss_weight must be unspecified or specified once per top blob.")
            for i, w in enumerate(weights):
                if w == 0:
                    continue
                self.set_loss(i, w)
                top[i].mut_diff()[...] = w

    # ---------------------------------------------------------------- to override
    def layer_setup(self, bottom: BlobVec, top: BlobVec) -> None:
        """One-time setup (read params, make param blobs)."""

    def setup(self, bottom: BlobVec, top: BlobVec) -> None:
        """pycaffe's ``layer.setup(bottom, top)``: LayerSetUp (a Python layer's own hook)."""
        self.layer_setup(bottom, top)

    def reshape(self, bottom: BlobVec, top: BlobVec) -> None:
        raise NotImplementedError("%s must implement reshape" % type(self).__name__)

    def forward(self, bottom: BlobVec, top: BlobVec) -> None:
        raise NotImplementedError("%s must implement forward" % type(self).__name__)

    def backward(self, top: BlobVec, propagate_down: Sequence[bool], bottom: BlobVec) -> None:
        """Default: no gradient (Caffe's layers without Backward_cpu)."""
        if any(propagate_down):
            raise self.error("%s Layer cannot backpropagate to its inputs" % self.type)

    # ---------------------------------------------------------------- Forward/Backward
    def Forward(self, bottom: BlobVec, top: BlobVec) -> float:
        # NaN and Inf travel through layers silently, as in Caffe; the debug
        # records and health checks report them.
        with np.errstate(all="ignore"):
            in_place = self._in_place(bottom, top)
            self.reshape(bottom, top)
            self._check_in_place(in_place)
            self.forward(bottom, top)
            return weighted_loss(self, top, self.dtype, self.xp)

    def Backward(self, top: BlobVec, propagate_down: Sequence[bool], bottom: BlobVec) -> None:
        with np.errstate(all="ignore"):
            self.backward(top, list(propagate_down), bottom)

    # ---------------------------------------------------------------- loss
    def loss(self, top_index: int) -> float:
        """Layer::loss(top_index): the top's loss weight (the engine reads it through
        :func:`loss_weight`)."""
        return self.__loss[top_index] if top_index < len(self.__loss) else 0.0

    def set_loss(self, top_index: int, value: float) -> None:
        if len(self.__loss) <= top_index:
            self.__loss.extend([0.0] * (top_index + 1 - len(self.__loss)))
        self.__loss[top_index] = float(value)

    def allow_force_backward(self, bottom_index: int) -> bool:
        return True

    # ---------------------------------------------------------------- params
    def set_param_propagate_down(self, param_id: int, value: bool) -> None:
        if len(self.param_propagate_down) <= param_id:
            self.param_propagate_down.extend([True] * (param_id + 1 - len(self.param_propagate_down)))
        self.param_propagate_down[param_id] = bool(value)

    def get_param_propagate_down(self, param_id: int) -> bool:
        return self.param_propagate_down[param_id] if param_id < len(self.param_propagate_down) else True

    def to_proto(self, write_diff: bool = False) -> caffe_pb2.LayerParameter:
        """Layer::ToProto: the layer's param with its blobs."""
        p = caffe_pb2.LayerParameter()
        p.CopyFrom(self.layer_param)
        del p.blobs[:]
        for b in self.blobs:
            b.to_proto(p.blobs.add(), write_diff)
        return p

    def __repr__(self):
        return "<%s layer '%s'>" % (self.type, self.name)


def weighted_loss(layer: Layer, top: BlobVec, dtype: Any, xp: Any) -> Any:
    """What Forward returns: the sum over the loss tops of data . diff (the loss weight
    lives in the top's diff).  ``dtype``/``xp`` are passed in: a Python layer may use
    those attribute names for its own things."""
    loss = dtype.type(0)
    for i, t in enumerate(top):
        if loss_weight(layer, i):
            d = t.get_data().reshape(-1)
            w = t.get_diff().reshape(-1)
            loss += dtype.type(xp.dot(d, w).item())   # .item(): a CuPy 0-d array has no implicit NumPy form
    return loss


def loss_weight(layer: Layer, top_index: int) -> float:
    """``Layer::loss(top_index)`` read past the instance, so that a Python layer keeping a
    value of its own under ``loss`` (pycaffe's Layer has no such member) cannot hide it."""
    return Layer.loss(layer, top_index)


class NeuronLayer(Layer):
    """One bottom, one top of the same shape (may be in place)."""
    exact_num_bottom = 1
    exact_num_top = 1
    flops = elementwise_flops

    def reshape(self, bottom, top):
        top[0].reshape_like(bottom[0])


class LossLayer(Layer):
    """Two bottoms (prediction, label), one scalar top with loss weight 1 by default."""
    exact_num_bottom = 2
    exact_num_top = 1
    auto_top_blobs = True

    def layer_setup(self, bottom, top):
        if len(self.layer_param.loss_weight) == 0:
            self.layer_param.loss_weight.append(1.0)

    def reshape(self, bottom, top):
        if bottom[0].shape_at(0) != bottom[1].shape_at(0):
            raise self.error("The data and label should have the same first dimension. (%d vs. %d)"
                             % (bottom[0].shape_at(0), bottom[1].shape_at(0)))
        top[0].reshape(())

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1

    def diff_to_prediction(self, propagate_down):
        """The head of a loss layer's Backward: no gradient to the labels (bottom 1: an
        error, Caffe's LOG(FATAL)); whether bottom 0 (the prediction) wants one."""
        if propagate_down[1]:
            raise self.error("%s Layer cannot backpropagate to label inputs." % self.type)
        return bool(propagate_down[0])

    def get_normalizer(self, mode, outer_num, inner_num, valid_count):
        """LossLayer::GetNormalizer (FULL, VALID, BATCH_SIZE, NONE), at least 1."""
        LP = caffe_pb2.LossParameter
        if mode == LP.FULL:
            n = outer_num * inner_num
        elif mode == LP.VALID:
            n = outer_num * inner_num if valid_count == -1 else valid_count
        elif mode == LP.BATCH_SIZE:
            n = outer_num
        elif mode == LP.NONE:
            n = 1
        else:
            raise self.error("Unknown normalization mode: %s" % mode)
        return max(1.0, float(n))


def _shape_text(shape):
    """``2 3 4 (24)``, as Caffe's shape_string()."""
    count = 1
    for d in shape:
        count *= int(d)
    return "".join("%d " % d for d in shape) + "(%d)" % count


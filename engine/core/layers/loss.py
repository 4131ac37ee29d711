"""Loss layers and Accuracy, after Caffe master's *_loss_layer.cpp and accuracy_layer.cpp.

Every layer here writes one body for both devices (``xp = self.xp``).  Labels
are read as Caffe reads them (``static_cast<int>`` of the stored float, i.e.
truncation toward zero).  The backward passes scale by ``top[0].diff[0]`` (the
loss weight Caffe stores in the top's diff) over the layer's normalizer.
"""
import numpy as np

from engine.core.blob import Blob
from engine.core.layers.base import Layer, LossLayer, bottom_count, per_input_flops
from engine.core.layers.base import check_eq as _check_eq
from engine.core.layers.common import softmax_forward
from engine.core.layers.registry import register_layer
from engine.core.log import layer_log
from engine.proto import caffe_pb2

# Caffe's loss_layer.hpp: the floor applied to probabilities before a log.
kLOG_THRESHOLD = 1e-20
# FLT_MIN (the smallest normal float), SoftmaxWithLoss's floor.
FLT_MIN = float(np.finfo(np.float32).tiny)


def _int_labels(xp, a):
    """static_cast<int> of float labels (truncation toward zero)."""
    return a.astype(np.int64)


def _loss_mode(loss_param, default_mode):
    """The normalization mode the way SoftmaxWithLoss/SigmoidCrossEntropyLoss pick it."""
    LP = caffe_pb2.LossParameter
    if loss_param.HasField("normalization"):
        return loss_param.normalization
    if loss_param.HasField("normalize"):
        return LP.VALID if loss_param.normalize else LP.BATCH_SIZE
    return default_mode


def three_per_input_flops(layer, bottoms, tops):
    """The element-wise losses (Euclidean, Hinge, SigmoidCrossEntropy, Contrastive,
    Infogain, MultinomialLogistic): three operations per input element."""
    return 0, bottom_count(bottoms) * 3, True, "in × 3"


def _top_weight(top):
    """top[0]->cpu_diff()[0]: the loss weight, kept on the current device."""
    return top[0].get_diff().reshape(-1)[0]


def _write_normalized_diff(layer, xp, g, valid, top, bottom):
    """The last step of the softmax-based losses' Backward: bottom[0].diff = g, zero
    where the label is ignored, times the loss weight over Caffe's normalizer."""
    dt = layer.dtype.type
    g = xp.where(valid[:, None, :], g, dt(0))
    norm = layer.get_normalizer(layer.normalization, layer.outer_num, layer.inner_num, int(valid.sum()))
    bottom[0].mut_diff()[...] = (g * (_top_weight(top) / dt(norm))).reshape(bottom[0].shape)


class _ClassLossMixin:
    """Shared pieces of the losses over a class axis with integer labels."""

    def _check_label_range(self, xp, labels, valid, num_labels):
        bad = valid & ((labels < 0) | (labels >= num_labels))
        if bool(bad.any()):
            lab = labels[bad]
            raise self.error("label value %d outside [0, %d) (Caffe reads out of bounds here)"
                             % (int(lab.reshape(-1)[0]), num_labels))

    def _valid_mask(self, labels):
        if self.has_ignore_label:
            return labels != self.ignore_label
        return self.xp.ones(labels.shape, dtype=bool)


@register_layer
class SoftmaxWithLossLayer(_ClassLossMixin, LossLayer):
    """Softmax over ``softmax_param.axis`` then the multinomial logistic loss.

    Second top (optional): the softmax probabilities (sharing the internal prob
    blob's data, as Caffe's ShareData does).
    """
    type = "SoftmaxWithLoss"
    category = "loss"
    summary = "Softmax + multinomial logistic loss."
    param_fields = ("softmax_param", "loss_param",)
    def flops(self, bottoms, tops):
        shape = bottoms[0].shape
        axis = self.layer_param.softmax_param.axis
        axis = (axis + len(shape) if axis < 0 else axis) if len(shape) else 0
        outer = int(np.prod(shape[:axis], dtype=np.int64)) * int(np.prod(shape[axis + 1:], dtype=np.int64))
        return 0, bottom_count(bottoms) * 5 + outer, True, "in × 5 + outer"
    exact_num_top = -1
    min_top = 1
    max_top = 2

    def layer_setup(self, bottom, top):
        super().layer_setup(bottom, top)
        # Caffe builds an internal Softmax layer through the registry (which logs it).
        layer_log.info("Creating layer %s", self.name)
        self.prob = Blob(dtype=self.dtype)
        lp = self.layer_param.loss_param
        self.has_ignore_label = lp.HasField("ignore_label")
        self.ignore_label = lp.ignore_label
        self.normalization = _loss_mode(lp, caffe_pb2.LossParameter.VALID)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.prob.reshape_like(bottom[0])
        self.axis = bottom[0].canonical_axis(self.layer_param.softmax_param.axis)
        self.outer_num = bottom[0].count_range(0, self.axis)
        self.inner_num = bottom[0].count_range(self.axis + 1)
        if self.outer_num * self.inner_num != bottom[1].count:
            raise self.error(
                "Check failed: outer_num_ * inner_num_ == bottom[1]->count() (%d vs. %d) "
                "Number of labels must match number of predictions; e.g., if softmax axis == 1 "
                "and prediction shape is (N, C, H, W), label count (number of labels) must be "
                "N*H*W, with integer values in {0, 1, ..., C-1}."
                % (self.outer_num * self.inner_num, bottom[1].count))
        if len(top) >= 2:
            top[1].reshape_like(bottom[0])

    def _labels(self, bottom):
        xp = self.xp
        labels = _int_labels(xp, bottom[1].get_data().reshape(self.outer_num, self.inner_num))
        valid = self._valid_mask(labels)
        num_labels = bottom[0].shape[self.axis]
        self._check_label_range(xp, labels, valid, num_labels)
        return labels, valid, xp.where(valid, labels, 0)

    def forward(self, bottom, top):
        xp = self.xp
        dt = self.dtype.type
        prob = self.prob.mut_data()
        prob[...] = softmax_forward(xp, bottom[0].get_data(), self.axis)
        labels, valid, safe = self._labels(bottom)
        C = bottom[0].shape[self.axis]
        p3 = prob.reshape(self.outer_num, C, self.inner_num)
        picked = p3[xp.arange(self.outer_num)[:, None], safe, xp.arange(self.inner_num)[None, :]]
        logp = xp.log(xp.maximum(picked, dt(FLT_MIN)))
        # + 0: Caffe's loss starts at +0 and subtracts, so a sum of zeros (an empty batch) is 0, not -0
        loss = -xp.sum(xp.where(valid, logp, dt(0)), dtype=self.dtype) + self.dtype.type(0)
        count = int(valid.sum())
        norm = self.get_normalizer(self.normalization, self.outer_num, self.inner_num, count)
        top[0].mut_data()[...] = loss / dt(norm)
        if len(top) == 2:
            top[1].share_data(self.prob)

    def backward(self, top, propagate_down, bottom):
        if not self.diff_to_prediction(propagate_down):
            return
        xp = self.xp
        dt = self.dtype.type
        labels, valid, safe = self._labels(bottom)
        C = bottom[0].shape[self.axis]
        p3 = self.prob.get_data().reshape(self.outer_num, C, self.inner_num)
        onehot = xp.arange(C)[None, :, None] == safe[:, None, :]
        g = xp.where(onehot, p3 - dt(1), p3)
        _write_normalized_diff(self, xp, g, valid, top, bottom)


@register_layer
class SigmoidCrossEntropyLossLayer(LossLayer):
    """Cross-entropy of sigmoid(bottom[0]) against targets in bottom[1] (same count)."""
    type = "SigmoidCrossEntropyLoss"
    category = "loss"
    summary = "Sigmoid + cross-entropy loss."
    param_fields = ("loss_param",)
    flops = three_per_input_flops

    def layer_setup(self, bottom, top):
        super().layer_setup(bottom, top)
        self.sigmoid_output = Blob(dtype=self.dtype)
        lp = self.layer_param.loss_param
        self.has_ignore_label = lp.HasField("ignore_label")
        self.ignore_label = lp.ignore_label
        self.normalization = _loss_mode(lp, caffe_pb2.LossParameter.BATCH_SIZE)
        self.normalizer = 1.0

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.outer_num = bottom[0].shape_at(0)
        self.inner_num = bottom[0].count_range(1)
        if bottom[0].count != bottom[1].count:
            raise self.error("Check failed: bottom[0]->count() == bottom[1]->count() (%d vs. %d) "
                             "SIGMOID_CROSS_ENTROPY_LOSS layer inputs must have the same count."
                             % (bottom[0].count, bottom[1].count))
        self.sigmoid_output.reshape_like(bottom[0])

    def forward(self, bottom, top):
        xp = self.xp
        dt = self.dtype.type
        x = bottom[0].get_data()
        # SigmoidLayer (master): 0.5 * tanh(0.5 * x) + 0.5, evaluated in double.
        self.sigmoid_output.mut_data()[...] = (
            0.5 * xp.tanh(0.5 * x.astype(np.float64)) + 0.5).astype(self.dtype)
        # Same count, not necessarily the same shape: element by element, as Caffe.
        t = bottom[1].get_data().reshape(x.shape)
        pos = (x >= 0).astype(self.dtype)
        terms = x * (t - pos) - xp.log(dt(1) + xp.exp(x - dt(2) * x * pos))
        if self.has_ignore_label:
            valid = _int_labels(xp, t) != self.ignore_label
            terms = xp.where(valid, terms, dt(0))
            count = int(valid.sum())
        else:
            count = bottom[0].count
        # + 0: Caffe's loss starts at +0 and subtracts, so a sum of zeros (an empty batch) is 0, not -0
        loss = -xp.sum(terms, dtype=self.dtype) + self.dtype.type(0)
        self.normalizer = self.get_normalizer(self.normalization, self.outer_num, self.inner_num, count)
        top[0].mut_data()[...] = loss / dt(self.normalizer)

    def backward(self, top, propagate_down, bottom):
        if not self.diff_to_prediction(propagate_down):
            return
        xp = self.xp
        dt = self.dtype.type
        t = bottom[1].get_data().reshape(bottom[0].shape)
        g = self.sigmoid_output.get_data() - t
        if self.has_ignore_label:
            g = xp.where(_int_labels(xp, t) == self.ignore_label, dt(0), g)
        scale = _top_weight(top) / dt(self.normalizer)
        bottom[0].mut_diff()[...] = g * scale


@register_layer
class EuclideanLossLayer(LossLayer):
    """sum((b0 - b1)^2) / (2 N); gradients to both bottoms."""
    type = "EuclideanLoss"
    category = "loss"
    summary = "Sum of squared differences / 2N."
    param_fields = ("loss_param",)
    flops = three_per_input_flops

    def layer_setup(self, bottom, top):
        super().layer_setup(bottom, top)
        # diff_: b0 - b1 of the last forward (zeros before the first, as Caffe's Blob).
        self.diff = Blob(dtype=self.dtype)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        if bottom[0].count_range(1) != bottom[1].count_range(1):
            raise self.error("Check failed: bottom[0]->count(1) == bottom[1]->count(1) (%d vs. %d) "
                             "Inputs must have the same dimension."
                             % (bottom[0].count_range(1), bottom[1].count_range(1)))
        self.diff.reshape_like(bottom[0])

    def allow_force_backward(self, bottom_index):
        return True

    def forward(self, bottom, top):
        xp = self.xp
        dt = self.dtype.type
        d = self.diff.mut_data().reshape(-1)
        xp.subtract(bottom[0].get_data().reshape(-1), bottom[1].get_data().reshape(-1), out=d)
        dot = xp.dot(d, d)
        top[0].mut_data()[...] = dot / dt(bottom[0].num) / dt(2)

    def backward(self, top, propagate_down, bottom):
        dt = self.dtype.type
        d = self.diff.get_data().reshape(-1)
        for i in range(2):
            if propagate_down[i]:
                sign = dt(1) if i == 0 else dt(-1)
                alpha = sign * _top_weight(top) / dt(bottom[i].num)
                bottom[i].mut_diff()[...] = (alpha * d).reshape(bottom[i].shape)


@register_layer
class ContrastiveLossLayer(LossLayer):
    """Hadsell et al.'s contrastive loss on pairs (a, b) with a similarity label."""
    type = "ContrastiveLoss"
    category = "loss"
    summary = "Siamese contrastive loss."
    param_fields = ("contrastive_loss_param", "loss_param",)
    flops = three_per_input_flops
    exact_num_bottom = 3

    def layer_setup(self, bottom, top):
        super().layer_setup(bottom, top)
        self._check_bottoms(bottom)
        # diff_ (a - b) and dist_sq_ (||a - b||^2) of the last forward, shaped here as in
        # Caffe's LayerSetUp (zeros before the first forward).
        self.diff = Blob(dtype=self.dtype)
        self.dist_sq = Blob(dtype=self.dtype)
        self._shape_buffers(bottom)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        # Caffe checks these in LayerSetUp only; bottoms reshaped later would be read out of bounds.
        self._check_bottoms(bottom)
        # Caffe shapes its buffers in LayerSetUp only (a bigger batch later overruns them);
        # here they follow the batch (the same memory while it does not grow).
        self._shape_buffers(bottom)

    def _shape_buffers(self, bottom):
        self.diff.reshape(bottom[0].num, bottom[0].channels, 1, 1)
        self.dist_sq.reshape(bottom[0].num, 1, 1, 1)

    def _check_bottoms(self, bottom):
        b0, b1, b2 = bottom
        _check_eq(self, b0.channels, b1.channels, "bottom[0]->channels() == bottom[1]->channels()")
        _check_eq(self, b0.height, 1, "bottom[0]->height() == 1")
        _check_eq(self, b0.width, 1, "bottom[0]->width() == 1")
        _check_eq(self, b1.height, 1, "bottom[1]->height() == 1")
        _check_eq(self, b1.width, 1, "bottom[1]->width() == 1")
        _check_eq(self, b2.channels, 1, "bottom[2]->channels() == 1")
        _check_eq(self, b2.height, 1, "bottom[2]->height() == 1")
        _check_eq(self, b2.width, 1, "bottom[2]->width() == 1")
        if b2.count < b0.num:   # Caffe reads past the labels
            raise self.error("%d similarity labels for a batch of %d" % (b2.count, b0.num))

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    def _params(self):
        p = self.layer_param.contrastive_loss_param
        return self.dtype.type(p.margin), p.legacy_version

    def forward(self, bottom, top):
        xp = self.xp
        dt = self.dtype.type
        num, channels = bottom[0].num, bottom[0].channels
        margin, legacy = self._params()
        diff = self.diff.mut_data().reshape(num, channels)
        xp.subtract(bottom[0].get_data().reshape(num, channels),
                    bottom[1].get_data().reshape(num, channels), out=diff)
        dist_sq = self.dist_sq.mut_data().reshape(num)
        dist_sq[...] = (diff * diff).sum(axis=1)
        similar = _int_labels(xp, bottom[2].get_data().reshape(-1)[:num]) != 0
        if legacy:
            dissim = xp.maximum(margin - dist_sq, dt(0))
        else:
            dist = xp.maximum(margin - xp.sqrt(dist_sq), dt(0))
            dissim = dist * dist
        loss = xp.sum(xp.where(similar, dist_sq, dissim), dtype=self.dtype)
        top[0].mut_data()[...] = loss / dt(num) / dt(2)

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        dt = self.dtype.type
        margin, legacy = self._params()
        diff = self.diff.get_data()
        dist_sq = self.dist_sq.get_data()
        for i in range(2):
            if not propagate_down[i]:
                continue
            num, channels = bottom[i].num, bottom[i].channels
            diff_i = diff.reshape(-1)[:num * channels].reshape(num, channels)
            dist_sq_i = dist_sq.reshape(-1)[:num]
            sign = dt(1) if i == 0 else dt(-1)
            alpha = sign * _top_weight(top) / dt(num)
            similar = _int_labels(xp, bottom[2].get_data().reshape(-1)[:num]) != 0
            if legacy:
                mdist = margin - dist_sq_i
                beta = -alpha * xp.ones_like(mdist)
            else:
                dist = xp.sqrt(dist_sq_i)
                mdist = margin - dist
                beta = -alpha * mdist / (dist + dt(1e-4))
            coef = xp.where(similar, alpha, xp.where(mdist > dt(0), beta, dt(0)))
            bottom[i].mut_diff()[...] = (coef[:, None] * diff_i).reshape(bottom[i].shape)


@register_layer
class HingeLossLayer(LossLayer):
    """One-vs-all hinge loss, L1 or L2 norm (bottom[0]'s diff is scratch, as in Caffe)."""
    type = "HingeLoss"
    category = "loss"
    summary = "One-vs-all hinge loss (L1 / L2)."
    param_fields = ("hinge_loss_param", "loss_param",)
    flops = three_per_input_flops

    def _norm(self):
        n = self.layer_param.hinge_loss_param.norm
        HP = caffe_pb2.HingeLossParameter
        if n not in (HP.L1, HP.L2):
            raise self.error("Unknown Norm")
        return "L1" if n == HP.L1 else "L2"

    def _flip(self, xp, bottom, a):
        """a[i, label[i]] *= -1 for each row of the (num, dim) view ``a``."""
        num = a.shape[0]
        if bottom[1].count < num:
            raise self.error("%d labels for a batch of %d" % (bottom[1].count, num))
        labels = _int_labels(xp, bottom[1].get_data().reshape(-1)[:num])
        if bool(((labels < 0) | (labels >= a.shape[1])).any()):
            raise self.error("label value outside [0, %d) (Caffe reads out of bounds here)" % a.shape[1])
        rows = xp.arange(num)
        a[rows, labels] = -a[rows, labels]
        return a

    def forward(self, bottom, top):
        xp = self.xp
        dt = self.dtype.type
        norm = self._norm()
        num = bottom[0].num
        count = bottom[0].count
        bottom[0].get_data(), bottom[1].get_data()      # asked for before Caffe divides: CHECK(data_) first
        if num == 0:
            raise self.error("empty batch: HingeLoss divides the count by num (Caffe stops with a "
                             "division by zero)")
        dim = count // num
        a = bottom[0].get_data().reshape(num, dim).copy()
        a = self._flip(xp, bottom, a)
        a = xp.maximum(dt(0), dt(1) + a)
        bottom[0].mut_diff()[...] = a.reshape(bottom[0].shape)
        if norm == "L1":
            loss = xp.sum(xp.abs(a), dtype=self.dtype)
        else:
            loss = xp.dot(a.reshape(-1), a.reshape(-1))
        top[0].mut_data()[...] = loss / dt(num)

    def backward(self, top, propagate_down, bottom):
        if not self.diff_to_prediction(propagate_down):
            return
        xp = self.xp
        dt = self.dtype.type
        norm = self._norm()
        num = bottom[0].num
        dim = bottom[0].count // num
        diff = bottom[0].mut_diff()
        a = self._flip(xp, bottom, diff.reshape(num, dim).copy())
        w = _top_weight(top)
        if norm == "L1":
            g = xp.sign(a) * (w / dt(num))
        else:
            g = a * (w * dt(2) / dt(num))
        diff[...] = g.reshape(diff.shape)


@register_layer
class InfogainLossLayer(_ClassLossMixin, LossLayer):
    """Softmax then the infogain-weighted log loss (Caffe master: axis, ignore_label,
    normalization); H comes from ``infogain_loss_param.source`` or a third bottom."""
    type = "InfogainLoss"
    category = "loss"
    summary = "Loss weighted by an infogain matrix."
    param_fields = ("infogain_loss_param", "loss_param",)
    flops = three_per_input_flops
    exact_num_bottom = -1
    min_bottom = 2
    max_bottom = 3
    exact_num_top = -1
    min_top = 1
    max_top = 2

    def layer_setup(self, bottom, top):
        super().layer_setup(bottom, top)
        layer_log.info("Creating layer %s", self.name)  # the internal Softmax layer
        self.prob = Blob(dtype=self.dtype)
        lp = self.layer_param.loss_param
        self.has_ignore_label = lp.HasField("ignore_label")
        self.ignore_label = lp.ignore_label
        if lp.HasField("normalize"):
            raise self.error('Check failed: !this->layer_param_.loss_param().has_normalize() '
                             'normalize is deprecated. use "normalization"')
        self.normalization = lp.normalization
        self.infogain = None
        if len(bottom) < 3:
            ip = self.layer_param.infogain_loss_param
            if not ip.HasField("source"):
                raise self.error("Check failed: this->layer_param_.infogain_loss_param().has_source() "
                                 "Infogain matrix source must be specified.")
            from engine.core import io
            self.infogain = Blob(dtype=self.dtype)
            self.infogain.from_proto(io.read_blobproto(ip.source))
        self.sum_rows_H = None

    def _H(self, bottom):
        return self.infogain if len(bottom) < 3 else bottom[2]

    def _sum_rows(self, H):
        L = self.num_labels
        return H.get_data().reshape(L, L).sum(axis=1)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.prob.reshape_like(bottom[0])
        self.axis = bottom[0].canonical_axis(self.layer_param.infogain_loss_param.axis)
        self.outer_num = bottom[0].count_range(0, self.axis)
        self.inner_num = bottom[0].count_range(self.axis + 1)
        if self.outer_num * self.inner_num != bottom[1].count:
            raise self.error(
                "Check failed: outer_num_ * inner_num_ == bottom[1]->count() (%d vs. %d) "
                "Number of labels must match number of predictions; e.g., if infogain axis == 1 "
                "and prediction shape is (N, C, H, W), label count (number of labels) must be "
                "N*H*W, with integer values in {0, 1, ..., C-1}."
                % (self.outer_num * self.inner_num, bottom[1].count))
        self.num_labels = bottom[0].shape[self.axis]
        H = self._H(bottom)
        _check_eq(self, H.count, self.num_labels * self.num_labels,
                  "infogain->count() == num_labels_*num_labels_")
        if len(bottom) == 2:
            # H is fixed (read from source): its row sums are taken once here.
            self.sum_rows_H = self._sum_rows(H)
        if len(top) >= 2:
            top[1].reshape_like(bottom[0])

    def _labels(self, bottom):
        xp = self.xp
        labels = _int_labels(xp, bottom[1].get_data().reshape(self.outer_num, self.inner_num))
        valid = self._valid_mask(labels)
        self._check_label_range(xp, labels, valid, self.num_labels)
        return labels, valid, xp.where(valid, labels, 0)

    def forward(self, bottom, top):
        xp = self.xp
        dt = self.dtype.type
        L = self.num_labels
        prob = self.prob.mut_data()
        prob[...] = softmax_forward(xp, bottom[0].get_data(), self.axis)
        labels, valid, safe = self._labels(bottom)
        H = self._H(bottom).get_data().reshape(L, L)
        logp = xp.log(xp.maximum(prob, dt(kLOG_THRESHOLD)))
        logp = logp.reshape(self.outer_num, L, self.inner_num).transpose(0, 2, 1)  # (outer, inner, L)
        rows = H[safe]  # (outer, inner, L)
        per = (rows * logp).sum(axis=2)
        # + 0: Caffe's loss starts at +0 and subtracts, so a sum of zeros (an empty batch) is 0, not -0
        loss = -xp.sum(xp.where(valid, per, dt(0)), dtype=self.dtype) + self.dtype.type(0)
        count = int(valid.sum())
        norm = self.get_normalizer(self.normalization, self.outer_num, self.inner_num, count)
        top[0].mut_data()[...] = loss / dt(norm)
        if len(top) == 2:
            top[1].share_data(self.prob)

    def backward(self, top, propagate_down, bottom):
        to_prediction = self.diff_to_prediction(propagate_down)
        if len(propagate_down) > 2 and propagate_down[2]:
            raise self.error("%s Layer cannot backpropagate to infogain inputs." % self.type)
        if not to_prediction:
            return
        xp = self.xp
        L = self.num_labels
        H = self._H(bottom)
        if len(bottom) >= 3:
            # H is a bottom and may change: sum its rows every time.
            self.sum_rows_H = self._sum_rows(H)
        Hm = H.get_data().reshape(L, L)
        labels, valid, safe = self._labels(bottom)
        p = self.prob.get_data().reshape(self.outer_num, L, self.inner_num)
        srow = self.sum_rows_H[safe]  # (outer, inner)
        hrow = Hm[safe].transpose(0, 2, 1)  # (outer, L, inner)
        g = p * srow[:, None, :] - hrow
        _write_normalized_diff(self, xp, g, valid, top, bottom)


@register_layer
class MultinomialLogisticLossLayer(LossLayer):
    """-log(max(p[label], 1e-20)) averaged over the batch; bottom[0] holds probabilities."""
    type = "MultinomialLogisticLoss"
    category = "loss"
    summary = "-log p(label) of given probabilities."
    param_fields = ("loss_param",)
    flops = three_per_input_flops

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        _check_eq(self, bottom[1].channels, 1, "bottom[1]->channels() == 1")
        _check_eq(self, bottom[1].height, 1, "bottom[1]->height() == 1")
        _check_eq(self, bottom[1].width, 1, "bottom[1]->width() == 1")

    def _picked(self, bottom):
        xp = self.xp
        num = bottom[0].num
        bottom[0].get_data(), bottom[1].get_data()      # asked for before Caffe divides: CHECK(data_) first
        if num == 0:
            raise self.error("empty batch: MultinomialLogisticLoss divides the count by num (Caffe "
                             "stops with a division by zero)")
        dim = bottom[0].count // num
        data = bottom[0].get_data().reshape(num, dim)
        if bottom[1].count < num:
            raise self.error("%d labels for a batch of %d" % (bottom[1].count, num))
        labels = _int_labels(xp, bottom[1].get_data().reshape(-1)[:num])
        if bool(((labels < 0) | (labels >= dim)).any()):
            raise self.error("label value outside [0, %d) (Caffe reads out of bounds here)" % dim)
        rows = xp.arange(num)
        prob = xp.maximum(data[rows, labels], self.dtype.type(kLOG_THRESHOLD))
        return num, dim, rows, labels, prob

    def forward(self, bottom, top):
        xp = self.xp
        num, _, _, _, prob = self._picked(bottom)
        # + 0: Caffe's loss starts at +0 and subtracts, so a sum of zeros (an empty batch) is 0, not -0
        loss = -xp.sum(xp.log(prob), dtype=self.dtype) + self.dtype.type(0)
        top[0].mut_data()[...] = loss / self.dtype.type(num)

    def backward(self, top, propagate_down, bottom):
        if not self.diff_to_prediction(propagate_down):
            return
        xp = self.xp
        num, dim, rows, labels, prob = self._picked(bottom)
        scale = -_top_weight(top) / self.dtype.type(num)
        g = xp.zeros((num, dim), dtype=self.dtype)
        g[rows, labels] = scale / prob
        bottom[0].mut_diff()[...] = g.reshape(bottom[0].shape)


@register_layer
class AccuracyLayer(_ClassLossMixin, Layer):
    """Top-k classification accuracy; optional second top: per-class accuracy."""
    type = "Accuracy"
    category = "output"
    summary = "Top-k accuracy (no gradient)."
    param_fields = ("accuracy_param",)
    flops = per_input_flops
    exact_num_bottom = 2
    min_top = 1
    max_top = 2

    def layer_setup(self, bottom, top):
        ap = self.layer_param.accuracy_param
        self.top_k = ap.top_k
        self.has_ignore_label = ap.HasField("ignore_label")
        self.ignore_label = ap.ignore_label

    def reshape(self, bottom, top):
        per_label = bottom[0].count // bottom[1].count if bottom[1].count else 0
        if not self.top_k <= per_label:
            raise self.error("Check failed: top_k_ <= bottom[0]->count() / bottom[1]->count() "
                             "(%d vs. %d) top_k must be less than or equal to the number of classes."
                             % (self.top_k, per_label))
        self.label_axis = bottom[0].canonical_axis(self.layer_param.accuracy_param.axis)
        self.outer_num = bottom[0].count_range(0, self.label_axis)
        self.inner_num = bottom[0].count_range(self.label_axis + 1)
        if self.outer_num * self.inner_num != bottom[1].count:
            raise self.error(
                "Check failed: outer_num_ * inner_num_ == bottom[1]->count() (%d vs. %d) "
                "Number of labels must match number of predictions; e.g., if label axis == 1 "
                "and prediction shape is (N, C, H, W), label count (number of labels) must be "
                "N*H*W, with integer values in {0, 1, ..., C-1}."
                % (self.outer_num * self.inner_num, bottom[1].count))
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape((bottom[0].shape[self.label_axis],))

    def forward(self, bottom, top):
        xp = self.xp
        dt = self.dtype.type
        C = bottom[0].shape[self.label_axis]
        d3 = bottom[0].get_data().reshape(self.outer_num, C, self.inner_num)
        labels = _int_labels(xp, bottom[1].get_data().reshape(self.outer_num, self.inner_num))
        valid = self._valid_mask(labels)
        self._check_label_range(xp, labels, valid, C)
        safe = xp.where(valid, labels, 0)
        true_p = d3[xp.arange(self.outer_num)[:, None], safe, xp.arange(self.inner_num)[None, :]]
        # Every class scoring >= the true one counts (the true class itself included).
        better = (d3 >= true_p[:, None, :]).sum(axis=1) - 1
        hit = valid & (better < self.top_k)
        count = int(valid.sum())
        correct = hit.sum().astype(self.dtype)
        top[0].mut_data()[...] = dt(0) if count == 0 else correct / dt(count)
        if len(top) > 1:
            onehot = safe[..., None] == xp.arange(C)
            nums = (onehot & valid[..., None]).sum(axis=(0, 1)).astype(self.dtype)
            hits = (onehot & hit[..., None]).sum(axis=(0, 1)).astype(self.dtype)
            top[1].mut_data()[...] = xp.where(nums == 0, dt(0), hits / xp.where(nums == 0, dt(1), nums))

    def backward(self, top, propagate_down, bottom):
        for pd in propagate_down:
            if pd:
                raise self.error("Not Implemented Yet")


__all__ = ["SoftmaxWithLossLayer", "SigmoidCrossEntropyLossLayer", "EuclideanLossLayer",
           "ContrastiveLossLayer", "HingeLossLayer", "InfogainLossLayer",
           "MultinomialLogisticLossLayer", "AccuracyLayer", "kLOG_THRESHOLD"]

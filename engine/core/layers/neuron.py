"""Element-wise ("neuron") layers, after Caffe's *_layer.cpp of the same names.

AbsVal, BNLL, Clip, Dropout, ELU, Exp, Log, Power, PReLU, ReLU, Sigmoid, Swish,
TanH, Threshold.  Each body is written once against ``self.xp`` (NumPy on the
CPU, CuPy on the GPU) with in-place ufuncs (``out=``) where Caffe writes into
its output buffers, so that in-place use (top is bottom) behaves as in Caffe:
a backward pass reads the very arrays Caffe's reads (``bottom_data`` is the
top data when the layer runs in place, and ``bottom_diff`` is the top diff).

Numbers follow Caffe's float arithmetic: parameters are held in the layer's
dtype; ``exp``/``log`` of float data are evaluated in double and rounded once,
which is what glibc's correctly rounded ``expf``/``logf`` (Caffe's CPU build)
return; and where Caffe's C++ silently computes in double (Sigmoid's
``0.5 * tanh(0.5 * x) + 0.5``, BNLL's ``log(1. + exp(x))``), so does this.
"""
import math

import numpy as np

from engine.core import backend, rng
from engine.core.blob import Blob
from engine.core.kernels import channel as _channel
from engine.core.layers.base import NeuronLayer
from engine.core.layers.registry import register_layer
from engine.proto import caffe_pb2


def _fmt(x):
    """A float as glog's ``<<`` prints it (six significant digits)."""
    from engine.core.log import num
    return num(x)


def _libm(xp, name, a, out):
    """out = name(a) (``exp`` or ``log``), rounded once to out's dtype.

    For float32 this equals glibc's correctly rounded expf/logf, which Caffe's
    CPU layers call; NumPy's own float32 loops may be an ulp off.
    """
    fn = getattr(xp, name)
    if out.dtype == np.float64:
        return fn(a, out=out)
    if xp is np:
        return fn(a, out=out, dtype=np.float64)
    out[...] = fn(a.astype(np.float64))
    return out


def _sigmoid_into(xp, x, out):
    """out = 0.5 * tanh(0.5 * x) + 0.5, computed in double as Caffe's C++ does."""
    if out.dtype == np.float64:
        xp.multiply(x, 0.5, out=out)
        xp.tanh(out, out=out)
        out *= 0.5
        out += 0.5
    else:
        t = x.astype(np.float64)
        t *= 0.5
        xp.tanh(t, out=t)
        t *= 0.5
        t += 0.5
        out[...] = t
    return out


class _Neuron(NeuronLayer):
    """NeuronLayer plus small helpers shared by this module."""

    def scalar(self, v):
        """A Python/proto number as a scalar of the layer's dtype (Caffe's Dtype)."""
        return self.dtype.type(v)

    # A 0-d blob (``shape { }``: one value) runs as a 1-element vector: NumPy turns
    # arithmetic on 0-d arrays into scalars, which the layers' ``out=`` cannot take;
    # Caffe computes the one value like any other.
    def Forward(self, bottom, top):
        if bottom and bottom[0].num_axes == 0 and bottom[0].has_memory:
            with _as_vectors(bottom, top):
                return super().Forward(bottom, top)
        return super().Forward(bottom, top)

    def Backward(self, top, propagate_down, bottom):
        if bottom and bottom[0].num_axes == 0 and bottom[0].has_memory:
            with _as_vectors(bottom, top):
                return super().Backward(top, propagate_down, bottom)
        return super().Backward(top, propagate_down, bottom)


class _as_vectors:
    """Blobs of shape () seen as shape (1,) (the same memory) for the duration."""

    def __init__(self, *vecs):
        self.blobs = []                 # a neuron layer's bottom and top (one blob when in place)
        for vec in vecs:
            for b in vec:
                if not any(b is c for c in self.blobs):
                    self.blobs.append(b)

    def __enter__(self):
        # only blobs that hold memory: one never given a shape has none, and its first use
        # must raise Caffe's CHECK(data_) rather than be given memory here
        self.blobs = [b for b in self.blobs if b.num_axes == 0 and b.has_memory]
        for b in self.blobs:
            b.reshape((1,))

    def __exit__(self, *exc):
        for b in self.blobs:
            b.reshape(())
        return False


# --------------------------------------------------------------------- AbsVal
@register_layer
class AbsValLayer(_Neuron):
    type = "AbsVal"
    category = "activation"
    summary = "|x|."
    param_fields = ()

    def layer_setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("%s Layer does not allow in-place computation." % self.type)

    def forward(self, bottom, top):
        xp = self.xp
        xp.abs(bottom[0].get_data(), out=top[0].mut_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        top_diff = top[0].get_diff()
        x = bottom[0].get_data()
        bd = bottom[0].mut_diff()
        xp.sign(x, out=bd)
        bd *= top_diff


# ----------------------------------------------------------------------- BNLL
_BNLL_THRESHOLD = 50.0


@register_layer
class BNLLLayer(_Neuron):
    type = "BNLL"
    category = "activation"
    summary = "log(1 + exp(x))."
    param_fields = ()

    def forward(self, bottom, top):
        # Caffe: x > 0 ? x + log(1. + exp(-x)) : log(1. + exp(x)), i.e.
        # max(x, 0) + log(1. + exp(-|x|)): exp in Dtype, the rest in double
        # (so exp(-|x|) below double's epsilon adds nothing, as in Caffe).
        xp = self.xp
        x = bottom[0].get_data()
        e = xp.abs(x)
        xp.negative(e, out=e)
        _libm(xp, "exp", e, e)
        t = e.astype(np.float64, copy=False)
        t += 1.0
        xp.log(t, out=t)
        t += xp.maximum(x, 0)
        top[0].mut_data()[...] = t

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # top_diff * expval / (expval + 1.), expval = exp(min(x, 50)) in
        # Dtype; the product in Dtype, the division in double.
        xp = self.xp
        x = bottom[0].get_data()
        e = xp.minimum(x, self.scalar(_BNLL_THRESHOLD))
        _libm(xp, "exp", e, e)
        num = xp.multiply(top[0].get_diff(), e).astype(np.float64, copy=False)
        den = e.astype(np.float64, copy=False)
        den += 1.0
        num /= den
        bottom[0].mut_diff()[...] = num


# ----------------------------------------------------------------------- Clip
@register_layer
class ClipLayer(_Neuron):
    type = "Clip"
    category = "activation"
    summary = "Clamps to [min, max]."
    param_fields = ("clip_param",)

    def layer_setup(self, bottom, top):
        cp = self.layer_param.clip_param
        self.min = self.scalar(cp.min)
        self.max = self.scalar(cp.max)

    def forward(self, bottom, top):
        # std::max(min, std::min(x, max)): NaN -> min, and min wins over max.
        xp = self.xp
        x = bottom[0].get_data()
        out = top[0].mut_data()
        xp.minimum(x, self.max, out=out)
        xp.fmax(out, self.min, out=out)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        x = bottom[0].get_data()
        inside = xp.greater_equal(x, self.min)
        inside &= xp.less_equal(x, self.max)
        top_diff = top[0].get_diff()
        xp.multiply(top_diff, inside, out=bottom[0].mut_diff())


# -------------------------------------------------------------------- Dropout
_TRAIN = 0  # caffe_pb2.TRAIN


@register_layer
class DropoutLayer(_Neuron):
    """TRAIN: y = x * mask * scale (mask ~ Bernoulli(1 - ratio)); TEST: y = x.

    With a ``scale_train`` field in DropoutParameter (not in BVLC master's
    proto) set to false, TRAIN does not scale and TEST multiplies by
    (1 - ratio).
    """
    type = "Dropout"
    category = "activation"
    summary = "Zeroes inputs at random while training."
    param_fields = ("dropout_param",)

    def layer_setup(self, bottom, top):
        dp = self.layer_param.dropout_param
        self.threshold = self.scalar(dp.dropout_ratio)
        # Caffe: scale_ = 1. / (1. - threshold_), computed in double, stored as Dtype.
        keep = 1.0 - float(self.threshold)
        self.scale = self.scalar(1.0 / keep if keep else float("inf"))   # C's 1. / 0. is inf
        self.scale_train = True
        if "scale_train" in dp.DESCRIPTOR.fields_by_name:
            self.scale_train = bool(dp.scale_train)
        # rand_vec_: the kept-unit multiplier of the last TRAIN forward.
        self.rand_vec = Blob(dtype=self.dtype)

    def reshape(self, bottom, top):
        top[0].reshape_like(bottom[0])
        self.rand_vec.reshape_like(bottom[0])

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data()
        if self.phase == _TRAIN:
            keep = self._keep(x.shape)
            mask = self.rand_vec.mut_data()
            if self.scale_train:
                xp.multiply(keep, self.scale, out=mask)
            else:
                mask[...] = keep
            xp.multiply(x, mask, out=top[0].mut_data())
        else:
            out = top[0].mut_data()
            if top[0] is not bottom[0]:
                out[...] = x
            if not self.scale_train:
                out *= self.scalar(1.0 - float(self.threshold))

    def _keep(self, shape):
        """Which units a TRAIN forward keeps (P = 1 - ratio).  On the CPU, Caffe's
        ``caffe_rng_bernoulli(count, 1. - threshold_)`` (the probability in double) from
        its stream; on the GPU Caffe draws from cuRAND, which the engine does not reproduce."""
        if backend.mode() == backend.GPU:
            rng.warn_unmatched(("Dropout", self.name), "Dropout layer '%s' on the GPU (Caffe "
                                                       "draws the mask from cuRAND)" % self.name)
            u = backend.random_module().random(shape, dtype=np.float32)
            return u >= np.float32(self.threshold)
        try:
            keep = rng.caffe_rng_bernoulli(math.prod(shape), 1.0 - float(self.threshold), np.float64)
        except ValueError as e:
            raise self.error("%s(dropout_ratio %s)" % (e, _fmt(self.threshold))) from None
        return keep.reshape(shape)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        top_diff = top[0].get_diff()
        bd = bottom[0].mut_diff()
        if self.phase == _TRAIN:
            xp.multiply(top_diff, self.rand_vec.get_data(), out=bd)
        else:
            if top[0] is not bottom[0]:
                bd[...] = top_diff
            if not self.scale_train:
                bd *= self.scalar(1.0 - float(self.threshold))


# ------------------------------------------------------------------------ ELU
@register_layer
class ELULayer(_Neuron):
    type = "ELU"
    category = "activation"
    summary = "Exponential linear unit."
    param_fields = ("elu_param",)

    def layer_setup(self, bottom, top):
        self.alpha = self.scalar(self.layer_param.elu_param.alpha)

    def forward(self, bottom, top):
        # max(x, 0) + alpha * (exp(min(x, 0)) - 1)
        xp = self.xp
        x = bottom[0].get_data()
        t = xp.minimum(x, 0)
        _libm(xp, "exp", t, t)
        t -= 1
        t *= self.alpha
        out = top[0].mut_data()
        xp.maximum(x, 0, out=out)
        out += t

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # top_diff * ((x > 0) + (alpha + y) * (x <= 0))
        xp = self.xp
        x = bottom[0].get_data()
        y = top[0].get_data()
        f = xp.add(y, self.alpha)
        f *= xp.less_equal(x, 0)
        f += xp.greater(x, 0)
        top_diff = top[0].get_diff()
        xp.multiply(top_diff, f, out=bottom[0].mut_diff())


# -------------------------------------------------------------------- Exp/Log
def _log_base(layer, base):
    """Caffe's log_base for Exp/Log: 1 for base -1 (e), else log(base), checked."""
    if base != layer.scalar(-1):
        if not base > 0:
            raise layer.error("base must be strictly positive. (%s vs. 0)" % _fmt(base))
    if base == layer.scalar(-1):
        return layer.scalar(1)
    with np.errstate(all="ignore"):
        log_base = layer.scalar(np.log(base))
    if np.isnan(log_base):
        raise layer.error("NaN result: log(base) = log(%s) = %s" % (_fmt(base), _fmt(log_base)))
    if np.isinf(log_base):
        raise layer.error("Inf result: log(base) = log(%s) = %s" % (_fmt(base), _fmt(log_base)))
    return log_base


@register_layer
class ExpLayer(_Neuron):
    """y = base ^ (shift + scale * x), base -1 meaning e."""
    type = "Exp"
    category = "activation"
    summary = "base ^ (shift + scale * x)."
    param_fields = ("exp_param",)

    def layer_setup(self, bottom, top):
        p = self.layer_param.exp_param
        base = self.scalar(p.base)
        log_base = _log_base(self, base)
        input_scale = self.scalar(p.scale)
        input_shift = self.scalar(p.shift)
        self.inner_scale = self.scalar(log_base * input_scale)
        if input_shift == 0:
            self.outer_scale = self.scalar(1)
        else:
            try:
                outer = (math.pow(float(base), float(input_shift)) if base != self.scalar(-1)
                         else math.exp(float(input_shift)))
            except OverflowError:   # C's pow/exp give inf
                outer = math.inf
            self.outer_scale = self.scalar(outer)

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data()
        out = top[0].mut_data()
        if self.inner_scale == 1:
            _libm(xp, "exp", x, out)
        else:
            xp.multiply(x, self.inner_scale, out=out)
            _libm(xp, "exp", out, out)
        if self.outer_scale != 1:
            out *= self.outer_scale

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        y = top[0].get_data()
        top_diff = top[0].get_diff()
        bd = bottom[0].mut_diff()
        xp.multiply(y, top_diff, out=bd)
        if self.inner_scale != 1:
            bd *= self.inner_scale


@register_layer
class LogLayer(_Neuron):
    """y = log_base(shift + scale * x), base -1 meaning e."""
    type = "Log"
    category = "activation"
    summary = "log_base(shift + scale * x)."
    param_fields = ("log_param",)

    def layer_setup(self, bottom, top):
        p = self.layer_param.log_param
        base = self.scalar(p.base)
        log_base = _log_base(self, base)
        with np.errstate(all="ignore"):
            self.base_scale = self.scalar(1) / log_base
        if np.isnan(self.base_scale):
            raise self.error("NaN result: 1/log(base) = 1/log(%s) = %s"
                             % (_fmt(base), _fmt(self.base_scale)))
        if np.isinf(self.base_scale):
            raise self.error("Inf result: 1/log(base) = 1/log(%s) = %s"
                             % (_fmt(base), _fmt(self.base_scale)))
        self.input_scale = self.scalar(p.scale)
        self.input_shift = self.scalar(p.shift)
        self.backward_num_scale = self.scalar(self.input_scale / log_base)

    def _affine_into(self, x, out):
        """out = shift + scale * x, step by step as Caffe does it."""
        xp = self.xp
        if self.input_scale != 1:
            xp.multiply(x, self.input_scale, out=out)
        elif out is not x:
            out[...] = x
        if self.input_shift != 0:
            out += self.input_shift
        return out

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data()
        out = top[0].mut_data()
        if self.input_scale == 1 and self.input_shift == 0:
            _libm(xp, "log", x, out)
        else:
            self._affine_into(x, out)
            _libm(xp, "log", out, out)
        if self.base_scale != 1:
            out *= self.base_scale

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # bottom_diff = top_diff * backward_num_scale / (shift + scale * x),
        # written into bottom_diff first as Caffe does (in place, that buffer
        # is the top diff too).
        xp = self.xp
        x = bottom[0].get_data()
        bd = bottom[0].mut_diff()
        self._affine_into(x, bd)
        xp.reciprocal(bd, out=bd)
        if self.backward_num_scale != 1:
            bd *= self.backward_num_scale
        top_diff = top[0].get_diff()
        xp.multiply(top_diff, bd, out=bd)


# ---------------------------------------------------------------------- Power
@register_layer
class PowerLayer(_Neuron):
    """y = (shift + scale * x) ^ power."""
    type = "Power"
    category = "activation"
    summary = "(shift + scale * x) ^ power."
    param_fields = ("power_param",)

    def layer_setup(self, bottom, top):
        p = self.layer_param.power_param
        self.power = self.scalar(p.power)
        self.scale_ = self.scalar(p.scale)
        self.shift = self.scalar(p.shift)
        self.diff_scale = self.scalar(self.power * self.scale_)

    def forward(self, bottom, top):
        xp = self.xp
        if self.diff_scale == 0:
            # The input does not matter: scale or power is 0.
            value = self.scalar(1) if self.power == 0 else self.scalar(np.power(self.shift, self.power))
            top[0].mut_data().fill(value)
            return
        x = bottom[0].get_data()
        out = top[0].mut_data()
        if self.scale_ != 1:
            xp.multiply(x, self.scale_, out=out)
        elif out is not x:
            out[...] = x
        if self.shift != 0:
            out += self.shift
        if self.power != 1:
            xp.power(out, self.power, out=out)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        bd = bottom[0].mut_diff()
        if self.diff_scale == 0 or self.power == 1:
            bd.fill(self.diff_scale)
        else:
            x = bottom[0].get_data()
            if self.power == 2:
                # dy/dx = diff_scale * scale * x + diff_scale * shift
                xp.multiply(x, self.scalar(self.diff_scale * self.scale_), out=bd)
                if self.shift != 0:
                    bd += self.scalar(self.diff_scale * self.shift)
            elif self.shift == 0:
                # dy/dx = power * y / x
                xp.divide(top[0].get_data(), x, out=bd)
                bd *= self.power
            else:
                # dy/dx = diff_scale * y / (shift + scale * x)
                if self.scale_ != 1:
                    xp.multiply(x, self.scale_, out=bd)
                else:
                    bd[...] = x
                if self.shift != 0:
                    bd += self.shift
                xp.divide(top[0].get_data(), bd, out=bd)
                if self.diff_scale != 1:
                    bd *= self.diff_scale
        if self.diff_scale != 0:
            xp.multiply(top[0].get_diff(), bd, out=bd)


# ---------------------------------------------------------------------- PReLU
@register_layer
class PReLULayer(_Neuron):
    """y = max(x, 0) + a_c * min(x, 0), one learned slope per channel (or one)."""
    type = "PReLU"
    category = "activation"
    summary = "ReLU with a learned negative slope."
    param_fields = ("prelu_param",)

    def layer_setup(self, bottom, top):
        from engine.core.fillers import fill
        if bottom[0].num_axes < 2:
            raise self.error("Number of axes of bottom blob must be >=2.")
        p = self.layer_param.prelu_param
        channels = bottom[0].channels
        self.channel_shared = bool(p.channel_shared)
        if not self.blobs:
            b = self.new_blob(())
            b.reshape(() if self.channel_shared else (channels,))
            if p.HasField("filler"):
                fp = p.filler
            else:
                fp = caffe_pb2.FillerParameter()
                fp.type = "constant"
                fp.value = 0.25
            fill(b, fp)
            self.blobs.append(b)
        want = 1 if self.channel_shared else channels
        if self.blobs[0].count != want:
            raise self.error("Negative slope size is inconsistent with prototxt config "
                             "(%d vs. %d)" % (self.blobs[0].count, want))
        if len(self.param_propagate_down) < len(self.blobs):
            self.set_param_propagate_down(len(self.blobs) - 1, True)
        self.bottom_memory = Blob(dtype=self.dtype)

    def reshape(self, bottom, top):
        if bottom[0].num_axes < 2:
            raise self.error("Number of axes of bottom blob must be >=2.")
        top[0].reshape_like(bottom[0])
        if bottom[0] is top[0]:
            self.bottom_memory.reshape_like(bottom[0])

    def _geometry(self, blob):
        channels = blob.channels
        dim = blob.count_range(2)
        outer = blob.count // (channels * dim) if channels * dim else 0
        return outer, channels, dim

    def _slope(self, channels):
        s = self.blobs[0].get_data()
        return s.reshape(()) if self.channel_shared else s.reshape(1, channels, 1)

    def forward(self, bottom, top):
        xp = self.xp
        shape3 = self._geometry(bottom[0])
        x = bottom[0].get_data()
        if bottom[0] is top[0]:
            # Keep the input for backward: the top overwrites it.
            self.bottom_memory.mut_data()[...] = x
        xv = x.reshape(shape3)
        neg = xp.minimum(xv, 0)
        neg *= self._slope(shape3[1])
        out = top[0].mut_data().reshape(shape3)
        xp.maximum(xv, 0, out=out)
        out += neg

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        shape3 = self._geometry(bottom[0])
        if top[0] is bottom[0]:
            x = self.bottom_memory.get_data().reshape(shape3)
        else:
            x = bottom[0].get_data().reshape(shape3)
        top_diff = top[0].get_diff().reshape(shape3)
        # The slope gradient first: in place, writing the bottom diff
        # overwrites the top diff.
        if self.get_param_propagate_down(0):
            t = xp.multiply(top_diff, x)
            t *= xp.less_equal(x, 0)
            sd = self.blobs[0].mut_diff()
            if xp is np:
                # Caffe's CPU loop adds term by term (channel c: n = 0, 1, ...
                # over its spatial positions) onto the diff; a cumulative sum
                # in the same order gives the same float result.
                outer, channels, dim = shape3
                rows = 1 if self.channel_shared else channels
                seq = np.empty((rows, 1 + t.size // rows), dtype=t.dtype)
                seq[:, 0] = sd.reshape(rows)
                if self.channel_shared:
                    seq[0, 1:] = t.reshape(-1)
                else:
                    seq[:, 1:] = t.transpose(1, 0, 2).reshape(channels, outer * dim)
                np.cumsum(seq, axis=1, out=seq)
                sd[...] = seq[:, -1].reshape(sd.shape)
            elif self.channel_shared:
                sd += t.sum()
            else:
                sd += t.sum(axis=(0, 2))
        if propagate_down[0]:
            f = xp.multiply(xp.less_equal(x, 0), self._slope(shape3[1]))
            f += xp.greater(x, 0)
            bd = bottom[0].mut_diff().reshape(shape3)
            xp.multiply(top_diff, f, out=bd)


# ----------------------------------------------------------------------- ReLU
@register_layer
class ReLULayer(_Neuron):
    """y = max(x, 0) + negative_slope * min(x, 0)."""
    type = "ReLU"
    category = "activation"
    summary = "max(0, x) (leaky with negative_slope)."
    param_fields = ("relu_param",)

    def layer_setup(self, bottom, top):
        self.negative_slope = self.scalar(self.layer_param.relu_param.negative_slope)

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data()
        if self.negative_slope == 0:
            y = top[0].mut_data()
            if _channel.usable(x, y):
                _channel.relu_forward(x, y)     # NumPy's maximum at vector speed
                return
            xp.maximum(x, 0, out=y)
            return
        neg = xp.minimum(x, 0)
        neg *= self.negative_slope
        out = top[0].mut_data()
        xp.maximum(x, 0, out=out)
        out += neg

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # top_diff * ((x > 0) + negative_slope * (x <= 0)); in place, x is
        # the top data, which is > 0 exactly where the input was.
        xp = self.xp
        x = bottom[0].get_data()
        top_diff = top[0].get_diff()
        bd = bottom[0].mut_diff()
        if self.negative_slope == 0:
            if _channel.usable(x, top_diff, bd):
                _channel.relu_backward(x, top_diff, bd)     # one pass, no mask array
                return
            xp.multiply(top_diff, xp.greater(x, 0), out=bd)
            return
        f = xp.multiply(xp.less_equal(x, 0), self.negative_slope)
        f += xp.greater(x, 0)
        xp.multiply(top_diff, f, out=bd)


# -------------------------------------------------------------------- Sigmoid
@register_layer
class SigmoidLayer(_Neuron):
    """y = 1 / (1 + exp(-x)), computed as Caffe does: 0.5 * tanh(0.5 * x) + 0.5."""
    type = "Sigmoid"
    category = "activation"
    summary = "Logistic sigmoid."
    param_fields = ("sigmoid_param",)

    def forward(self, bottom, top):
        x = bottom[0].get_data()
        _sigmoid_into(self.xp, x, top[0].mut_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # top_diff * y * (1. - y), from the top data: the first product in
        # Dtype, the second (by a double) in double.
        xp = self.xp
        y = top[0].get_data()
        one_minus = y.astype(np.float64)
        xp.subtract(1.0, one_minus, out=one_minus)
        f = xp.multiply(top[0].get_diff(), y).astype(np.float64, copy=False)
        f *= one_minus
        bottom[0].mut_diff()[...] = f


# ---------------------------------------------------------------------- Swish
@register_layer
class SwishLayer(_Neuron):
    """y = x * sigmoid(beta * x), with Caffe's internal sigmoid."""
    type = "Swish"
    category = "activation"
    summary = "x * sigmoid(beta * x)."
    param_fields = ("swish_param",)

    def layer_setup(self, bottom, top):
        self.beta = self.scalar(self.layer_param.swish_param.beta)
        self.sigmoid_input = Blob(dtype=self.dtype)
        self.sigmoid_output = Blob(dtype=self.dtype)

    def reshape(self, bottom, top):
        top[0].reshape_like(bottom[0])
        self.sigmoid_input.reshape_like(bottom[0])
        self.sigmoid_output.reshape_like(bottom[0])

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data()
        s_in = self.sigmoid_input.mut_data()
        xp.multiply(x, self.beta, out=s_in)
        s = _sigmoid_into(xp, s_in, self.sigmoid_output.mut_data())
        xp.multiply(x, s, out=top[0].mut_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # top_diff * (beta * y + s * (1. - beta * y)): beta * y in Dtype,
        # the rest in double (Caffe's "1." promotes it).
        xp = self.xp
        y = top[0].get_data()
        s = self.sigmoid_output.get_data()
        by = xp.multiply(y, self.beta).astype(np.float64, copy=False)
        f = xp.subtract(1.0, by)
        f *= s
        f += by
        f *= top[0].get_diff()
        bottom[0].mut_diff()[...] = f


# ----------------------------------------------------------------------- TanH
@register_layer
class TanHLayer(_Neuron):
    type = "TanH"
    category = "activation"
    summary = "Hyperbolic tangent."
    param_fields = ("tanh_param",)

    def forward(self, bottom, top):
        self.xp.tanh(bottom[0].get_data(), out=top[0].mut_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # top_diff * (1 - y^2), from the top data.
        xp = self.xp
        y = top[0].get_data()
        f = xp.multiply(y, y)
        xp.subtract(1, f, out=f)
        xp.multiply(top[0].get_diff(), f, out=bottom[0].mut_diff())


# ------------------------------------------------------------------ Threshold
@register_layer
class ThresholdLayer(_Neuron):
    """y = 1 where x > threshold, else 0.  No gradient (Caffe: NOT_IMPLEMENTED)."""
    type = "Threshold"
    category = "activation"
    summary = "1 if x > threshold else 0."
    param_fields = ("threshold_param",)

    def layer_setup(self, bottom, top):
        self.threshold = self.scalar(self.layer_param.threshold_param.threshold)

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data()
        above = xp.greater(x, self.threshold)
        top[0].mut_data()[...] = above

    def backward(self, top, propagate_down, bottom):
        # Caffe's Backward_cpu is NOT_IMPLEMENTED, whatever propagate_down says.
        raise self.error("Not Implemented Yet")

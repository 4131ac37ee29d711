"""Normalization layers: BatchNorm, Scale, Bias, MVN (Caffe master's semantics).

One body for both devices (``xp = self.xp``).  Reductions follow Caffe's
order where it matters for float32: per-(n, c) sums over the spatial extent
first, then over the batch, as Caffe's two gemv calls do.
"""

from engine.core.blob import Blob
from engine.core.kernels import channel as _channel
from engine.core.layers.base import Layer, elementwise_flops, fill_param, top_count, workspace
from engine.core.layers.base import check_eq as _check_eq
from engine.core.layers.registry import create_layer, register_layer
from engine.core.log import layer_log
from engine.proto import caffe_pb2


# ---------------------------------------------------------------------------- BatchNorm
@register_layer
class BatchNormLayer(Layer):
    """Normalizes each channel over the batch and spatial axes.

    Param blobs (all zero-initialized, never learned): the running mean sum,
    the running (unbiased) variance sum and the moving-average scale factor.
    Master's LayerSetUp masks them from the solver by adding ``lr_mult: 0``
    ParamSpecs (and rejects a nonzero lr_mult given for them).
    """
    type = "BatchNorm"
    params_are_statistics = True
    # Net flags its params as propagating (as Caffe does), but Backward never writes their
    # diffs: the debug Recorder keeps their statistics across backward runs.
    writes_param_diffs = False
    category = "norm"
    summary = "Normalises by batch (or stored) mean and variance."
    param_fields = ("batch_norm_param",)
    def flops(self, bottoms, tops):
        bn = self.layer_param.batch_norm_param
        use_global = bn.use_global_stats if bn.HasField("use_global_stats") else self.phase == caffe_pb2.TEST
        return 0, top_count(tops) * (2 if use_global else 5), True, "out × 2 (global stats) / × 5"
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.batch_norm_param
        dt = self.dtype.type
        self.moving_average_fraction = dt(p.moving_average_fraction)
        self.use_global_stats = self.phase == caffe_pb2.TEST
        if p.HasField("use_global_stats"):
            self.use_global_stats = p.use_global_stats
        self.channels = 1 if bottom[0].num_axes == 1 else bottom[0].shape_at(1)
        self.eps = dt(p.eps)
        # Caffe's variance_ (after a forward: sqrt(var + eps), which Backward divides by)
        # and x_norm_ (the normalized input, kept for Backward): Blobs shaped in Reshape,
        # zeros until the first forward writes them.
        self.std = Blob(dtype=self.dtype)
        self.x_norm = Blob(dtype=self.dtype)
        if self.blobs:
            layer_log.info("Skipping parameter initialization")
        else:
            C = self.channels
            self.blobs = [self.new_blob((C,)), self.new_blob((C,)), self.new_blob((1,))]
            for b in self.blobs:
                b.mut_data()[...] = 0
        # Mask the statistics from optimization: local learning rate 0.
        for i in range(len(self.blobs)):
            if len(self.layer_param.param) == i:
                self.layer_param.param.add().lr_mult = 0.0
            elif self.layer_param.param[i].lr_mult != 0.0:
                raise self.error("Check failed: this->layer_param_.param(i).lr_mult() == 0.f (%s vs. 0) "
                                 "Cannot configure batch normalization statistics as layer parameters."
                                 % _fmt(self.layer_param.param[i].lr_mult))
        for i in range(len(self.blobs)):
            self.set_param_propagate_down(i, False)

    def reshape(self, bottom, top):
        if bottom[0].num_axes >= 1:
            _check_eq(self, bottom[0].shape_at(1), self.channels, "bottom[0]->shape(1) == channels_")
        if bottom[0].num_axes < 1 or bottom[0].shape_at(0) * self.channels == 0:
            raise self.error("bottom shape %s: BatchNorm divides the count by num * channels, which must "
                             "not be 0 (Caffe stops with a division by zero)" % bottom[0].shape_string())
        top[0].reshape_like(bottom[0])
        self.std.reshape((self.channels,))
        self.x_norm.reshape_like(bottom[0])

    def _view(self, a, bottom):
        num = bottom[0].shape_at(0)
        return a.reshape(num, self.channels, bottom[0].count_range(2))

    def forward(self, bottom, top):
        last = self.forward_but_last_pass(bottom, top)
        if last is not None:
            self.last_pass(last)

    @staticmethod
    def last_pass(last):
        """The last pass :meth:`forward_but_last_pass` left (what it returned, not None)."""
        kind, a, mean, std, y = last
        if kind == "global":
            _channel.bn_global(a, mean, std, y)      # y = (x - mean) / std in one pass
        else:
            _channel.bn_divide(a, std, y)           # x_norm /= std; y = x_norm

    def forward_but_last_pass(self, bottom, top):
        """Forward, but where the compiled loops serve, its last elementwise pass left to the
        caller (engine.core.fusion runs it together with the Scale and ReLU after it):
        ("global", x, mean, std, y) for y = (x - mean[c]) / std[c], or ("train", x_norm, None,
        std, y) for x_norm = x_norm / std[c], y = x_norm (the arrays as (num, C, spatial)
        views); None when Forward is done."""
        xp = self.xp
        dt = self.dtype.type
        num = bottom[0].shape_at(0)
        spatial = bottom[0].count // (num * self.channels)
        x = self._view(bottom[0].get_data(), bottom)
        if self.use_global_stats:
            sf = self.blobs[2].get_data().reshape(-1)[:1]
            scale = xp.where(sf == 0, dt(0), dt(1) / xp.where(sf == 0, dt(1), sf))
            mean = scale * self.blobs[0].get_data()
            var = scale * self.blobs[1].get_data()
        else:
            alpha = dt(1.0 / (num * spatial))
            mean = (x.sum(axis=2) * alpha).sum(axis=0)
        if self.use_global_stats:
            # Backward needs only std: normalise straight into the top (in place too).
            y = self._view(top[0].mut_data(), bottom)
            std = self.std.mut_data()
            xp.sqrt(var + self.eps, out=std)
            if _channel.usable(x, y, mean, std):
                return "global", x, mean, std, y         # the two passes below in one
            xp.subtract(x, mean[None, :, None], out=y)
            xp.divide(y, std[None, :, None], out=y)
            return None
        # x_norm_ (Caffe's): kept for backward, since later in-place layers may
        # clobber the top data.  The layer's own buffer, reused every step.
        xn = self._view(self.x_norm.mut_data(), bottom)
        fused = _channel.usable(x, xn, mean)
        if fused:
            # x - mean and the row sums of its squares in one pass (NumPy's sums)
            var = (_channel.bn_center(x, mean, xn) * alpha).sum(axis=0)
        else:
            xp.subtract(x, mean[None, :, None], out=xn)
            sq = workspace(xp, "bn_sq", x.shape, x.dtype)
            xp.multiply(xn, xn, out=sq)
            var = (sq.sum(axis=2) * alpha).sum(axis=0)
        maf = self.moving_average_fraction
        b0, b1, b2 = (b.mut_data() for b in self.blobs)
        b2[...] = b2 * maf + dt(1)
        b0[...] = maf * b0 + mean
        m = bottom[0].count // self.channels
        bias_correction = dt(m) / dt(m - 1) if m > 1 else dt(1)
        b1[...] = maf * b1 + bias_correction * var
        std = self.std.mut_data()
        xp.sqrt(var + self.eps, out=std)
        if fused:
            return "train", xn, None, std, self._view(top[0].mut_data(), bottom)
        xp.divide(xn, std[None, :, None], out=xn)
        self._view(top[0].mut_data(), bottom)[...] = xn
        return None

    def backward(self, top, propagate_down, bottom):
        # Caffe's BatchNorm writes bottom diff unconditionally.
        xp = self.xp
        dt = self.dtype.type
        num = bottom[0].shape_at(0)
        spatial = bottom[0].count // (num * self.channels)
        # In place, the bottom diff is the top diff: every read of dy below
        # happens before (or, elementwise, as) the bottom diff is written.
        dy = self._view(top[0].get_diff(), bottom)
        std = self.std.get_data()[None, :, None]
        out = self._view(bottom[0].mut_diff(), bottom)
        if self.use_global_stats:
            xp.divide(dy, std, out=out)
            return
        y = self._view(self.x_norm.get_data(), bottom)
        if _channel.usable(y, dy, out, std):
            # The sums of y * dy and dy in one pass, the gradient in a second (the same
            # float32 steps as below, each rounded).
            dyy_rows, dy_rows = _channel.bn_backward_sums(y, dy)
            _channel.bn_backward_out(y, dy, dyy_rows.sum(axis=0), dy_rows.sum(axis=0),
                                     dt(-1.0 / (num * spatial)), self.std.get_data(), out)
            return
        g = workspace(xp, "bn_g", y.shape, y.dtype)
        xp.multiply(y, dy, out=g)
        s_dyy = g.sum(axis=2).sum(axis=0)
        xp.multiply(y, s_dyy[None, :, None], out=g)
        s_dy = dy.sum(axis=2).sum(axis=0)
        g += s_dy[None, :, None]
        g *= dt(-1.0 / (num * spatial))
        xp.add(dy, g, out=out)
        xp.divide(out, std, out=out)


def _fmt(v):
    return "%g" % v


# ---------------------------------------------------------------------------- Bias
def _param_shape(layer, bottom0, axis_param, num_axes, what):
    """The learned blob's shape: bottom[0]'s dims [axis, axis + num_axes)."""
    axis = bottom0.canonical_axis(axis_param)
    if num_axes < -1:
        raise layer.error("Check failed: num_axes >= -1 (%d vs. -1) num_axes must be non-negative, "
                          "or -1 to extend to the end of bottom[0]" % num_axes)
    if num_axes >= 0 and bottom0.num_axes < axis + num_axes:
        raise layer.error("Check failed: bottom[0]->num_axes() >= axis + num_axes (%d vs. %d) "
                          "%s blob's shape extends past bottom[0]'s shape when applied starting "
                          "with bottom[0] axis = %d" % (bottom0.num_axes, axis + num_axes, what, axis))
    shape = bottom0.shape
    return tuple(shape[axis:]) if num_axes == -1 else tuple(shape[axis:axis + num_axes])


def _broadcast_dims(layer, bottom0, operand, axis_param, what, what_axis):
    """(axis, outer, mid, inner) for applying ``operand`` along bottom[0]."""
    axis = 0 if operand.num_axes == 0 else bottom0.canonical_axis(axis_param)
    if bottom0.num_axes < axis + operand.num_axes:
        raise layer.error("Check failed: bottom[0]->num_axes() >= %s + %s->num_axes() (%d vs. %d) "
                          "%s blob's shape extends past bottom[0]'s shape when applied starting "
                          "with bottom[0] axis = %d"
                          % (what_axis, what, bottom0.num_axes, axis + operand.num_axes, what, axis))
    for i in range(operand.num_axes):
        if bottom0.shape[axis + i] != operand.shape[i]:
            raise layer.error("Check failed: bottom[0]->shape(%s + i) == %s->shape(i) (%d vs. %d) "
                              "dimension mismatch between bottom[0]->shape(%d) and %s->shape(%d)"
                              % (what_axis, what, bottom0.shape[axis + i], operand.shape[i],
                                 axis + i, what, i))
    outer = bottom0.count_range(0, axis)
    mid = operand.count
    inner = bottom0.count_range(axis + operand.num_axes)
    return axis, outer, mid, inner


def _blob_of_shape(layer, shape):
    """A param blob of ``shape``; an empty shape is a 1-element scalar, as in Caffe."""
    b = layer.new_blob(shape)
    b.reshape(shape)
    return b


@register_layer
class BiasLayer(Layer):
    """top = bottom[0] + bias, the bias broadcast along bottom[0]'s axes
    [axis, axis + num_axes); the bias is bottom[1] or a learned blob."""
    type = "Bias"
    category = "norm"
    summary = "Per-channel bias."
    param_fields = ("bias_param",)
    flops = elementwise_flops
    min_bottom = 1
    max_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        if len(bottom) == 1 and self.blobs:
            layer_log.info("Skipping parameter initialization")
        elif len(bottom) == 1:
            p = self.layer_param.bias_param
            shape = _param_shape(self, bottom[0], p.axis, p.num_axes, "bias")
            self.blobs = [_blob_of_shape(self, shape)]
            fill_param(self.blobs[0], p.filler)
        for i in range(len(self.blobs)):
            self.set_param_propagate_down(i, True)

    def reshape(self, bottom, top):
        bias = bottom[1] if len(bottom) > 1 else self.blobs[0]
        _, self.outer, self.mid, self.inner = _broadcast_dims(
            self, bottom[0], bias, self.layer_param.bias_param.axis, "bias", "axis")
        if bottom[0] is not top[0]:
            top[0].reshape_like(bottom[0])

    def forward(self, bottom, top):
        bias = (bottom[1] if len(bottom) > 1 else self.blobs[0]).get_data()
        x = bottom[0].get_data().reshape(self.outer, self.mid, self.inner)
        if len(bottom) > 1 and top[0] is bottom[1]:
            y = x + bias.reshape(1, self.mid, 1)
            top[0].mut_data()[...] = y.reshape(top[0].shape)
            return
        # Straight into the top (in place too: elementwise).
        self.xp.add(x, bias.reshape(1, self.mid, 1), out=top[0].mut_data().reshape(x.shape))

    def backward(self, top, propagate_down, bottom):
        top_diff = top[0].get_diff()
        if propagate_down[0] and bottom[0] is not top[0]:
            bottom[0].mut_diff()[...] = top_diff.reshape(bottom[0].shape)
        bias_param = len(bottom) == 1
        if (not bias_param and propagate_down[1]) or (bias_param and self.get_param_propagate_down(0)):
            target = self.blobs[0] if bias_param else bottom[1]
            g = top_diff.reshape(self.outer, self.mid, self.inner).sum(axis=2).sum(axis=0)
            d = target.mut_diff()
            if bias_param:
                d[...] = d + g.reshape(d.shape)  # a learned bias accumulates
            else:
                d[...] = g.reshape(d.shape)


# ---------------------------------------------------------------------------- Scale
@register_layer
class ScaleLayer(Layer):
    """top = bottom[0] * scale (+ bias), the scale broadcast along bottom[0]'s axes
    [axis, axis + num_axes); the scale is bottom[1] or a learned blob (param
    order [scale, bias]).  The bias is an internal Bias layer, as in Caffe."""
    type = "Scale"
    category = "norm"
    summary = "Per-channel scale (and bias)."
    param_fields = ("scale_param",)
    def flops(self, bottoms, tops):
        out, bias = top_count(tops), self.layer_param.scale_param.bias_term
        return (out if bias else 0), out * (2 if bias else 1), True, "out (+ out bias)"
    min_bottom = 1
    max_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.scale_param
        if len(bottom) == 1 and self.blobs:
            layer_log.info("Skipping parameter initialization")
        elif len(bottom) == 1:
            shape = _param_shape(self, bottom[0], p.axis, p.num_axes, "scale")
            self.blobs = [_blob_of_shape(self, shape)]
            fp = caffe_pb2.FillerParameter()
            fp.CopyFrom(p.filler)
            if not p.HasField("filler"):
                # Identity by default: a constant filler of 1.
                fp.type = "constant"
                fp.value = 1
            fill_param(self.blobs[0], fp)
        # temp_: in place, the input kept for the scale gradient (shaped in Reshape).
        self.temp = Blob(dtype=self.dtype)
        self.bias_layer = None
        if p.bias_term:
            lp = caffe_pb2.LayerParameter()
            lp.CopyFrom(self.layer_param)
            lp.type = "Bias"
            bp = lp.bias_param
            bp.axis = p.axis
            bp.num_axes = bottom[1].num_axes if len(bottom) > 1 else p.num_axes
            bp.filler.CopyFrom(p.bias_filler)
            self.bias_layer = create_layer(lp, dtype=self.dtype)
            self.bias_bottom = [bottom[0]]
            self.bias_layer.SetUp(self.bias_bottom, top)
            if len(self.blobs) + len(bottom) < 3:
                # Learned scale and new bias, or scale from bottom[1]: append the bias.
                self.bias_param_id = len(self.blobs)
                self.blobs.append(self.bias_layer.blobs[0])
            else:
                # The bias blob came with the param.
                self.bias_param_id = len(self.blobs) - 1
                self.bias_layer.blobs[0] = self.blobs[self.bias_param_id]
        for i in range(len(self.blobs)):
            self.set_param_propagate_down(i, True)

    def reshape(self, bottom, top):
        scale = bottom[1] if len(bottom) > 1 else self.blobs[0]
        self.axis, self.outer, self.mid, self.inner = _broadcast_dims(
            self, bottom[0], scale, self.layer_param.scale_param.axis, "scale", "axis_")
        if bottom[0] is top[0]:
            # Caffe's in-place Reshape: temp_ like the input (zeros until a forward fills it).
            self.temp.reshape_like(bottom[0])
        else:
            top[0].reshape_like(bottom[0])
        if self.bias_layer is not None:
            self.bias_bottom = [top[0]]
            self.bias_layer.reshape(self.bias_bottom, top)

    def forward(self, bottom, top):
        xp = self.xp
        scale = (bottom[1] if len(bottom) > 1 else self.blobs[0]).get_data()
        x = bottom[0].get_data().reshape(self.outer, self.mid, self.inner)
        if len(bottom) == 1 and (self.bias_layer is None or len(self.bias_bottom) == 1):
            # Learned scale (and bias): the copy aside, the product and the bias in one pass.
            y = top[0].mut_data().reshape(x.shape)
            temp = self.temp.mut_data().reshape(x.shape) if bottom[0] is top[0] else None
            b = self.bias_layer.blobs[0].get_data() if self.bias_layer is not None else None
            arrays = [a for a in (x, y, scale, temp, b) if a is not None]
            if (b is None or b.size == scale.size) and _channel.usable(*arrays):
                _channel.scale_forward(x, scale.reshape(-1), None if b is None else b.reshape(-1), temp, y)
                return
        if bottom[0] is top[0]:
            # In place: keep the input for the scale gradient (Caffe's temp_,
            # the layer's own buffer, reused every step).
            self.temp.mut_data().reshape(x.shape)[...] = x
        if len(bottom) > 1 and top[0] is bottom[1]:
            y = x * scale.reshape(1, self.mid, 1)
            top[0].mut_data()[...] = y.reshape(top[0].shape)
        else:
            # Straight into the top (in place too: elementwise).
            xp.multiply(x, scale.reshape(1, self.mid, 1), out=top[0].mut_data().reshape(x.shape))
        if self.bias_layer is not None:
            self.bias_layer.forward(self.bias_bottom, top)

    def backward(self, top, propagate_down, bottom):
        want_bias = self.bias_layer is not None and self.get_param_propagate_down(len(self.param_propagate_down) - 1)
        if len(bottom) == 1 and self._backward_fused(top, propagate_down, bottom, want_bias):
            return
        if want_bias:
            self.bias_layer.backward(top, [False], self.bias_bottom)
        scale_param = len(bottom) == 1
        scale = self.blobs[0] if scale_param else bottom[1]
        top_diff = top[0].get_diff().reshape(self.outer, self.mid, self.inner)
        if (not scale_param and propagate_down[1]) or (scale_param and self.get_param_propagate_down(0)):
            xp = self.xp
            is_eltwise = bottom[0].count == scale.count
            in_place = bottom[0] is top[0]
            shape3 = (self.outer, self.mid, self.inner)
            x = (self.temp.mut_data() if in_place else bottom[0].get_data()).reshape(shape3)
            # Caffe's scratch space for the product: bottom[0]'s diff (or, in
            # place, temp_), left holding it when bottom[0] gets no gradient.
            if in_place and not is_eltwise:
                product = x                    # temp_ itself: overwritten elementwise
            elif not is_eltwise and not (len(bottom) > 1 and bottom[0].diff_memory is bottom[1].diff_memory):
                product = bottom[0].mut_diff().reshape(x.shape)
            else:
                product = workspace(xp, "scale_product", x.shape, x.dtype)
            xp.multiply(top_diff, x, out=product)
            g = product.sum(axis=2).sum(axis=0)
            d = scale.mut_diff()
            # Caffe overwrites the scale diff when the product is the gradient
            # itself (eltwise) or reduced by one gemv (outer == 1, several
            # scales); otherwise a learned scale accumulates.
            overwrite = (not scale_param) or is_eltwise or (self.outer == 1 and self.mid > 1)
            if overwrite:
                d[...] = g.reshape(d.shape)
            else:
                d[...] = d + g.reshape(d.shape)
        if propagate_down[0]:
            s = scale.get_data().reshape(1, self.mid, 1)
            if not scale_param and bottom[1].diff_memory is bottom[0].diff_memory:
                bottom[0].mut_diff()[...] = (top_diff * s).reshape(bottom[0].shape)
            else:
                self.xp.multiply(top_diff, s, out=bottom[0].mut_diff().reshape(top_diff.shape))

    def _backward_fused(self, top, propagate_down, bottom, want_bias, relu_x=None):
        """A learned scale's backward as the compiled loops (engine.core.kernels.channel):
        the bias sum, the product dy * x with its sum and the bottom diff in one pass, the
        same float32 values as the NumPy passes of :meth:`backward`; False where they do
        not serve (nothing done then).  ``relu_x`` (engine.core.fusion): the data of a ReLU
        in place on the top, whose Backward runs in the same pass, first."""
        scale = self.blobs[0]
        shape3 = (self.outer, self.mid, self.inner)
        if bottom[0].count == scale.count:
            return False          # eltwise: the product goes to a workspace (the NumPy path)
        dy = top[0].get_diff().reshape(shape3)
        if not _channel.usable(dy):
            return False          # (before any mut_ call: the NumPy path makes its own)
        want_scale = self.get_param_propagate_down(0)
        in_place = bottom[0] is top[0]
        s = scale.get_data().reshape(-1)
        x = product = bd = None
        if want_scale:
            # Caffe's scratch for the product: temp_ in place, else bottom[0]'s diff.
            x = (self.temp.mut_data() if in_place else bottom[0].get_data()).reshape(shape3)
            product = x if in_place else bottom[0].mut_diff().reshape(shape3)
        if propagate_down[0]:
            bd = bottom[0].mut_diff().reshape(shape3)
        bias = self.blobs[self.bias_param_id] if want_bias else None
        if bias is not None and bias.count != scale.count:
            return False
        arrays = [a for a in (dy, s, x, product, bd, relu_x) if a is not None]
        if not _channel.usable(*arrays):
            return False
        if relu_x is not None:
            dy = top[0].mut_diff().reshape(shape3)      # the ReLU writes it (its bottom diff, in place)
        bias_rows, scale_rows = _channel.scale_backward(dy, x, product, s, bd, want_bias, want_scale, relu_x)
        if bias is not None:
            d = bias.mut_diff()
            d[...] = d + bias_rows.sum(axis=0).reshape(d.shape)     # a learned bias accumulates
        if want_scale:
            d = scale.mut_diff()
            g = scale_rows.sum(axis=0)
            if self.outer == 1 and self.mid > 1:
                d[...] = g.reshape(d.shape)
            else:
                d[...] = d + g.reshape(d.shape)
        return True


# ---------------------------------------------------------------------------- MVN
def _inv(n):
    """C's ``1. / n`` for an int n: inf for 0 (an empty row), not a ZeroDivisionError."""
    return 1.0 / n if n else float("inf")


@register_layer
class MVNLayer(Layer):
    """Mean-variance normalization per (num, channel), or per num across channels.

    Caffe divides by (sqrt(var) + eps).  Uses the legacy 4-D accessors, so the
    top is (num, channels, height, width)."""
    type = "MVN"
    category = "norm"
    summary = "Mean-variance normalisation."
    param_fields = ("mvn_param",)
    def flops(self, bottoms, tops):
        per = 5 if self.layer_param.mvn_param.normalize_variance else 2
        return 0, top_count(tops) * per, True, "out × 5 (variance) / × 2"
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        # Caffe's variance_: after a forward, sqrt(var) + eps per row (which Backward
        # divides by); a Blob shaped in Reshape, zeros until the first forward.
        self.std = Blob(dtype=self.dtype)

    def reshape(self, bottom, top):
        b = bottom[0]
        top[0].reshape((b.num, b.channels, b.height, b.width))
        # One value per normalized row (Caffe's is num x channels, of which
        # across_channels uses the first num).
        self.std.reshape((self._rows(bottom)[0],))
        self.eps = self.dtype.type(self.layer_param.mvn_param.eps)

    def _rows(self, bottom):
        b = bottom[0]
        num = b.num if self.layer_param.mvn_param.across_channels else b.num * b.channels
        return num, (b.count // num if num else 0)

    def forward(self, bottom, top):
        xp = self.xp
        dt = self.dtype.type
        num, dim = self._rows(bottom)
        x = bottom[0].get_data().reshape(num, dim)
        mean = x.sum(axis=1) * dt(_inv(dim))
        y = x + (-mean)[:, None]
        if self.layer_param.mvn_param.normalize_variance:
            var = (y * y).sum(axis=1) * dt(_inv(dim))
            std = self.std.mut_data()
            std[...] = xp.sqrt(var) + self.eps
            y = y / std[:, None]
        top[0].mut_data()[...] = y.reshape(top[0].shape)

    def backward(self, top, propagate_down, bottom):
        dt = self.dtype.type
        num, dim = self._rows(bottom)
        dy = top[0].get_diff().reshape(num, dim)
        if self.layer_param.mvn_param.normalize_variance:
            y = top[0].get_data().reshape(num, dim)
            g = y * (y * dy).sum(axis=1)[:, None]
            g = g + dy.sum(axis=1)[:, None]
            g = dy + dt(-_inv(dim)) * g
            g = g / self.std.get_data()[:, None]
        else:
            g = dy + (-(dy.sum(axis=1) * dt(_inv(dim))))[:, None]
        bottom[0].mut_diff()[...] = g.reshape(bottom[0].shape)


__all__ = ["BatchNormLayer", "ScaleLayer", "BiasLayer", "MVNLayer"]

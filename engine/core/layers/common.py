"""Caffe's "common" layers: InnerProduct, Concat, Slice, Split, Eltwise, Flatten,
Reshape, Tile, Reduction, Embed, BatchReindex, Filter, ArgMax, Silence,
Parameter and Softmax.

Each layer follows its counterpart in Caffe 1.0 (src/caffe/layers/*_layer.cpp):
the same top shapes, the same CHECKs (their messages are kept, in glog's
``Check failed: <expr> (a vs. b) <message>`` form) and the same order of
arithmetic where it decides the float32 result.  One body serves both devices
through ``self.xp`` (NumPy or CuPy).

``softmax_forward`` / ``softmax_backward`` are the softmax math on plain
arrays; the loss layers reuse them.
"""
import numpy as np

from engine.core.blob import Blob
from engine.core.kernels.blas import gemm_acc, matmul
from engine.core.layers.base import Layer, bottom_count, no_flops, per_input_flops, top_count, workspace
from engine.core.layers.base import fill_param as fill
from engine.core.layers.registry import register_layer
from engine.core.log import check_failed as _check_failed
from engine.core.log import layer_log
from engine.proto import caffe_pb2

# --------------------------------------------------------------------------- helpers


def _weight_and_bias(layer, weight_shape, p):
    """InnerProduct's and Embed's params: the weight (``p.weight_filler``) and, with
    ``layer.bias_term``, a bias of ``layer.N`` (``p.bias_filler``), unless the layer
    came with blobs; every param blob propagates down."""
    if layer.blobs:
        layer_log.info("Skipping parameter initialization")
    else:
        w = layer.new_blob(weight_shape)
        fill(w, p.weight_filler)
        layer.blobs.append(w)
        if layer.bias_term:
            b = layer.new_blob((layer.N,))
            fill(b, p.bias_filler)
            layer.blobs.append(b)
    for i in range(len(layer.blobs)):
        layer.set_param_propagate_down(i, True)


def scatter_add(xp, target, indices, values):
    """target[indices[i]] += values[i], in index order, for NumPy or CuPy."""
    if xp is np:
        np.add.at(target, indices, values)
    else:
        import cupyx
        cupyx.scatter_add(target, indices, values)


def softmax_forward(xp, x, axis):
    """Softmax of ``x`` along ``axis`` as Caffe computes it: subtract the max
    over the axis, exponentiate, divide by the sum of the exponentials.
    Returns a new array of ``x``'s shape and dtype."""
    m = x.max(axis=axis, keepdims=True)
    e = xp.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return e / s


def softmax_backward(xp, prob, top_diff, axis):
    """Gradient of softmax: (top_diff - sum(top_diff * prob, axis)) * prob."""
    dot = (top_diff * prob).sum(axis=axis, keepdims=True)
    return (top_diff - dot) * prob


def _host(blob):
    """Host view of a blob's data without marking the host copy as the newest."""
    return blob.get_data(gpu=False)


# --------------------------------------------------------------------------- InnerProduct
@register_layer
class InnerProductLayer(Layer):
    type = "InnerProduct"
    category = "fc"
    summary = "Fully connected layer (GEMM)."
    param_fields = ("inner_product_param",)
    def flops(self, bottoms, tops):
        ip = self.layer_param.inner_product_param
        shape = bottoms[0].shape
        axis = ip.axis + len(shape) if ip.axis < 0 else ip.axis
        m, k = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))
        macc = m * k * int(ip.num_output)
        bias = m * int(ip.num_output) if ip.bias_term else 0
        return macc, 2 * macc + bias, True, "M × K × N_out"
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.inner_product_param
        self.N = int(p.num_output)
        self.bias_term = bool(p.bias_term)
        self.transpose = bool(p.transpose)
        axis = bottom[0].canonical_axis(p.axis)
        self.K = bottom[0].count_range(axis)
        _weight_and_bias(self, (self.K, self.N) if self.transpose else (self.N, self.K), p)

    def reshape(self, bottom, top):
        p = self.layer_param.inner_product_param
        axis = bottom[0].canonical_axis(p.axis)
        new_k = bottom[0].count_range(axis)
        if self.K != new_k:
            raise self.error(_check_failed("K_ == new_K", self.K, new_k,
                                           "Input size incompatible with inner product parameters."))
        self.M = bottom[0].count_range(0, axis)
        top[0].reshape(tuple(bottom[0].shape[:axis]) + (self.N,))

    def _weight(self):
        w = self.blobs[0].get_data()
        return w if self.transpose else w.T  # (K, N)

    def _separate(self, a, b):
        return a.data_memory is not b.data_memory and a.diff_memory is not b.diff_memory

    def forward(self, bottom, top):
        x = bottom[0].get_data().reshape(self.M, self.K)
        if not self._separate(bottom[0], top[0]):
            y = matmul(x, self._weight())
            if self.bias_term:
                y += self.blobs[1].get_data()
            top[0].mut_data().reshape(self.M, self.N)[...] = y
            return
        y = top[0].mut_data().reshape(self.M, self.N)
        matmul(x, self._weight(), y)
        if self.bias_term:
            y += self.blobs[1].get_data()

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        td = top[0].get_diff().reshape(self.M, self.N)
        if self.get_param_propagate_down(0):
            # Caffe's gemm with beta = 1: the gradient accumulates into the diff.
            x = bottom[0].get_data().reshape(self.M, self.K)
            wd = self.blobs[0].mut_diff()
            work = lambda shape, dtype: workspace(xp, "ip_dw", shape, dtype)  # noqa: E731
            if self.transpose:
                gemm_acc(x.T, td, wd, work)
            else:
                gemm_acc(td.T, x, wd, work)
        if self.bias_term and self.get_param_propagate_down(1):
            bd = self.blobs[1].mut_diff()
            bd += td.sum(axis=0)
        if propagate_down[0]:
            w = self.blobs[0].get_data()
            w = w.T if self.transpose else w
            if self._separate(bottom[0], top[0]):
                matmul(td, w, bottom[0].mut_diff().reshape(self.M, self.K))
            else:
                bottom[0].mut_diff().reshape(self.M, self.K)[...] = matmul(td, w)


# --------------------------------------------------------------------------- Concat
def _check_axis_or_dim(layer, kind):
    """Concat's and Slice's LayerSetUp: ``axis`` or the deprecated ``<kind>_dim``, not both."""
    p = getattr(layer.layer_param, kind + "_param")
    if p.HasField("axis") and p.HasField(kind + "_dim"):
        raise layer.error(_check_failed(
            "!({0}_param.has_axis() && {0}_param.has_{0}_dim())".format(kind),
            message="Either axis or %s_dim should be specified; not both." % kind))


def _parts_into_whole(parts, whole, outer, inner):
    """Concat's Forward, Slice's Backward: each ``(k, array)`` part, in order, into its ``k``
    rows of ``whole`` seen as outer x (Σ k) x inner."""
    whole = whole.reshape(outer, sum(k for k, _ in parts), inner)    # explicit: a batch may be 0
    off = 0
    for k, a in parts:
        whole[:, off:off + k, :] = a.reshape(outer, k, inner)
        off += k


def _whole_into_parts(whole, parts, outer, inner):
    """Concat's Backward, Slice's Forward: the rows of ``whole`` (outer x (Σ k) x inner), in
    order, into each ``(k, array)`` part; a part of None is passed over."""
    whole = whole.reshape(outer, sum(k for k, _ in parts), inner)    # explicit: a batch may be 0
    off = 0
    for k, a in parts:
        if a is not None:
            a.reshape(outer, k, inner)[...] = whole[:, off:off + k, :]
        off += k


def _axis_or_dim(layer, kind, blob):
    """Concat's and Slice's axis: the deprecated ``<kind>_dim`` as given (checked against
    the axis count, not canonicalised), else ``axis`` canonicalised against ``blob``."""
    p = getattr(layer.layer_param, kind + "_param")
    if not p.HasField(kind + "_dim"):
        return blob.canonical_axis(p.axis)
    axis = int(getattr(p, kind + "_dim"))
    if axis >= blob.num_axes:
        raise layer.error(_check_failed("%s_axis_ < num_axes" % kind, axis, blob.num_axes,
                                        "%s_dim out of range." % kind))
    return axis


@register_layer
class ConcatLayer(Layer):
    type = "Concat"
    category = "structure"
    summary = "Concatenates bottoms along an axis."
    param_fields = ("concat_param",)
    flops = no_flops
    min_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        _check_axis_or_dim(self, "concat")

    def reshape(self, bottom, top):
        num_axes = bottom[0].num_axes
        self.axis = axis = _axis_or_dim(self, "concat", bottom[0])
        top_shape = list(bottom[0].shape)
        self.num_concats = bottom[0].count_range(0, axis)
        self.inner = bottom[0].count_range(axis + 1)
        count_sum = bottom[0].count
        for i in range(1, len(bottom)):
            if bottom[i].num_axes != num_axes:
                raise self.error(_check_failed("num_axes == bottom[i]->num_axes()", num_axes,
                                               bottom[i].num_axes,
                                               "All inputs must have the same #axes."))
            for j in range(num_axes):
                if j == axis:
                    continue
                if top_shape[j] != bottom[i].shape[j]:
                    raise self.error(_check_failed(
                        "top_shape[j] == bottom[i]->shape(j)", top_shape[j], bottom[i].shape[j],
                        "All inputs must have the same shape, except at concat_axis."))
            count_sum += bottom[i].count
            top_shape[axis] += bottom[i].shape[axis]
        top[0].reshape(top_shape)
        if count_sum != top[0].count:
            raise self.error(_check_failed("bottom_count_sum == top[0]->count()", count_sum,
                                           top[0].count))
        if len(bottom) == 1:
            top[0].share_data(bottom[0])
            top[0].share_diff(bottom[0])

    def forward(self, bottom, top):
        if len(bottom) == 1:
            return
        y = top[0].mut_data()               # Caffe asks for the top first
        _parts_into_whole([(b.shape[self.axis], b.get_data()) for b in bottom], y, self.num_concats, self.inner)

    def backward(self, top, propagate_down, bottom):
        if len(bottom) == 1:
            return
        parts = [(b.shape[self.axis], b.mut_diff() if pd else None) for b, pd in zip(bottom, propagate_down)]
        _whole_into_parts(top[0].get_diff(), parts, self.num_concats, self.inner)


# --------------------------------------------------------------------------- Slice
@register_layer
class SliceLayer(Layer):
    type = "Slice"
    category = "structure"
    summary = "Slices a bottom along an axis."
    param_fields = ("slice_param",)
    flops = no_flops
    exact_num_bottom = 1
    min_top = 1

    def layer_setup(self, bottom, top):
        _check_axis_or_dim(self, "slice")
        self.slice_points = [int(s) for s in self.layer_param.slice_param.slice_point]

    def reshape(self, bottom, top):
        self.axis = axis = _axis_or_dim(self, "slice", bottom[0])
        top_shape = list(bottom[0].shape)
        n_axis = bottom[0].shape[axis]
        self.num_slices = bottom[0].count_range(0, axis)
        self.inner = bottom[0].count_range(axis + 1)
        count = 0
        if self.slice_points:
            if len(self.slice_points) != len(top) - 1:
                raise self.error(_check_failed("slice_point_.size() == top.size() - 1",
                                               len(self.slice_points), len(top) - 1))
            if len(top) > n_axis:
                raise self.error(_check_failed("top.size() <= bottom_slice_axis", len(top), n_axis))
            prev = 0
            sizes = []
            for sp in self.slice_points:
                if not sp > prev:
                    raise self.error(_check_failed("slice_point_[i] > prev", sp, prev))
                sizes.append(sp - prev)
                prev = sp
            sizes.append(n_axis - prev)
        else:
            if n_axis % len(top) != 0:
                raise self.error(_check_failed(
                    "bottom_slice_axis % top.size() == 0", n_axis % len(top), 0,
                    "Number of top blobs (%d) should evenly divide input slice axis (%d)"
                    % (len(top), n_axis)))
            sizes = [n_axis // len(top)] * len(top)
        for t, k in zip(top, sizes):
            top_shape[axis] = k
            t.reshape(top_shape)
            count += t.count
        self.sizes = sizes
        if count != bottom[0].count:
            raise self.error(_check_failed("count == bottom[0]->count()", count, bottom[0].count))
        if len(top) == 1:
            top[0].share_data(bottom[0])
            top[0].share_diff(bottom[0])

    def forward(self, bottom, top):
        if len(top) == 1:
            return
        _whole_into_parts(bottom[0].get_data(), [(k, t.mut_data()) for t, k in zip(top, self.sizes)],
                          self.num_slices, self.inner)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0] or len(top) == 1:
            return
        _parts_into_whole([(k, t.get_diff()) for t, k in zip(top, self.sizes)], bottom[0].mut_diff(),
                          self.num_slices, self.inner)


# --------------------------------------------------------------------------- Split
@register_layer
class SplitLayer(Layer):
    type = "Split"
    category = "split"
    summary = "Copies a blob to several consumers (inserted by InsertSplits)."
    param_fields = ()
    shares_data_on_run = True
    shares_diff_on_run = False
    flops = no_flops
    exact_num_bottom = 1
    min_top = 1

    def reshape(self, bottom, top):
        self.count = bottom[0].count
        for t in top:
            # Split shares the bottom's data but keeps its own diffs, so a top
            # may not be the bottom itself.
            if t is bottom[0]:
                raise self.error(_check_failed(
                    "top[i] != bottom[0]", "%s" % _ptr(t), "%s" % _ptr(bottom[0]),
                    "%s Layer does not allow in-place computation." % self.type))
            t.reshape_like(bottom[0])
            if t.count != self.count:
                raise self.error(_check_failed("count_ == top[i]->count()", self.count, t.count))

    def forward(self, bottom, top):
        for t in top:
            t.share_data(bottom[0])

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        bd = bottom[0].mut_diff()
        if len(top) == 1:
            bd[...] = top[0].get_diff()
            return
        if any(t.diff_memory is bottom[0].diff_memory for t in top):
            acc = top[0].get_diff() + top[1].get_diff()
            for t in top[2:]:
                acc += t.get_diff()
            bd[...] = acc
            return
        # Summed straight into the bottom diff, in the same order.
        self.xp.add(top[0].get_diff(), top[1].get_diff(), out=bd)
        for t in top[2:]:
            bd += t.get_diff()


def _ptr(blob):
    return "0x%x" % id(blob)


# --------------------------------------------------------------------------- Eltwise
@register_layer
class EltwiseLayer(Layer):
    type = "Eltwise"
    category = "structure"
    summary = "Element-wise sum / product / max."
    param_fields = ("eltwise_param",)
    def flops(self, bottoms, tops):
        ew, out, k = self.layer_param.eltwise_param, top_count(tops), len(bottoms)
        if ew.operation == caffe_pb2.EltwiseParameter.SUM:
            coeff = out * k if any(c != 1 for c in ew.coeff) else 0
            return coeff, out * (k - 1) + coeff, True, "out × (K - 1) (+ out × K coefficients)"
        return 0, out * (k - 1), True, "out × (K - 1)"
    min_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.eltwise_param
        EP = caffe_pb2.EltwiseParameter
        if not (len(p.coeff) == 0 or len(p.coeff) == len(bottom)):
            raise self.error(_check_failed(
                "this->layer_param().eltwise_param().coeff_size() == 0 || "
                "this->layer_param().eltwise_param().coeff_size() == bottom.size()",
                message="Eltwise Layer takes one coefficient per bottom blob."))
        if p.operation == EP.PROD and len(p.coeff):
            raise self.error(_check_failed(
                "!(this->layer_param().eltwise_param().operation() == "
                "EltwiseParameter_EltwiseOp_PROD && "
                "this->layer_param().eltwise_param().coeff_size())",
                message="Eltwise layer only takes coefficients for summation."))
        self.op = p.operation
        self.PROD, self.SUM, self.MAX = EP.PROD, EP.SUM, EP.MAX
        dt = self.dtype.type
        self.coeffs = [dt(c) for c in p.coeff] if len(p.coeff) else [dt(1)] * len(bottom)
        self.stable_prod_grad = bool(p.stable_prod_grad)
        # max_idx_: for MAX, which bottom won each element in the last forward
        # (a Blob<int> shaped in Reshape, zeros before the first forward).
        self.max_idx = Blob(dtype=np.int32)

    def reshape(self, bottom, top):
        for i in range(1, len(bottom)):
            if bottom[i].shape != bottom[0].shape:
                raise self.error(_check_failed(
                    "bottom[0]->shape() == bottom[i]->shape()",
                    message="bottom[0]: %s, bottom[%d]: %s"
                    % (bottom[0].shape_string(), i, bottom[i].shape_string())))
        top[0].reshape_like(bottom[0])
        if self.op == self.MAX:
            self.max_idx.reshape_like(bottom[0])

    def forward(self, bottom, top):
        xp = self.xp
        out = top[0].mut_data()
        if self.op == self.PROD:
            y = bottom[0].get_data() * bottom[1].get_data()
            for b in bottom[2:]:
                y *= b.get_data()
            out[...] = y
        elif self.op == self.SUM:
            if any(b.data_memory is top[0].data_memory for b in bottom):
                y = xp.zeros(out.shape, out.dtype)
                for c, b in zip(self.coeffs, bottom):
                    y += c * b.get_data()
                out[...] = y
                return
            # Caffe: top = 0, then top += coeff * bottom for each bottom (0 + x
            # turns -0.0 into +0.0, so the first term adds a zero too).
            dt = out.dtype.type
            for k, (c, b) in enumerate(zip(self.coeffs, bottom)):
                x = b.get_data()
                if k == 0:
                    if c == 1:
                        xp.add(x, dt(0), out=out)
                    else:
                        xp.multiply(x, c, out=out)
                        out += dt(0)
                elif c == 1:
                    out += x
                else:
                    out += c * x
        elif self.op == self.MAX:
            a, b = bottom[0].get_data(), bottom[1].get_data()
            gt = a > b
            y = xp.where(gt, a, b)
            mask = xp.where(gt, 0, 1).astype(xp.int32)
            for k in range(2, len(bottom)):
                bk = bottom[k].get_data()
                upd = bk > y
                y = xp.where(upd, bk, y)
                mask = xp.where(upd, k, mask).astype(xp.int32)
            self.max_idx.mut_data()[...] = mask
            out[...] = y
        else:
            raise self.error("Unknown elementwise operation.")

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        td = top[0].get_diff()
        for i, b in enumerate(bottom):
            if not propagate_down[i]:
                continue
            if self.op == self.PROD:
                if self.stable_prod_grad:
                    g = None
                    for j, o in enumerate(bottom):
                        if j == i:
                            continue
                        g = o.get_data().copy() if g is None else o.get_data() * g
                else:
                    g = top[0].get_data() / b.get_data()
                b.mut_diff()[...] = g * td
            elif self.op == self.SUM:
                c = self.coeffs[i]
                b.mut_diff()[...] = td if c == 1 else c * td
            elif self.op == self.MAX:
                zero = xp.zeros((), td.dtype)
                b.mut_diff()[...] = xp.where(self.max_idx.get_data() == i, td, zero)
            else:
                raise self.error("Unknown elementwise operation.")


# --------------------------------------------------------------------------- Flatten
@register_layer
class FlattenLayer(Layer):
    type = "Flatten"
    category = "structure"
    summary = "Flattens axes into one."
    param_fields = ("flatten_param",)
    shares_data_on_run = True
    shares_diff_on_run = True
    flops = no_flops
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error(_check_failed(
                "top[0] != bottom[0]", _ptr(top[0]), _ptr(bottom[0]),
                "%s Layer does not allow in-place computation." % self.type))
        p = self.layer_param.flatten_param
        start = bottom[0].canonical_axis(p.axis)
        end = bottom[0].canonical_axis(p.end_axis)
        shape = list(bottom[0].shape[:start])
        shape.append(bottom[0].count_range(start, end + 1))
        shape.extend(bottom[0].shape[end + 1:])
        top[0].reshape(shape)
        if top[0].count != bottom[0].count:
            raise self.error(_check_failed("top[0]->count() == bottom[0]->count()",
                                           top[0].count, bottom[0].count))

    def forward(self, bottom, top):
        top[0].share_data(bottom[0])

    def backward(self, top, propagate_down, bottom):
        bottom[0].share_diff(top[0])


# --------------------------------------------------------------------------- Reshape
@register_layer
class ReshapeLayer(Layer):
    type = "Reshape"
    category = "structure"
    summary = "Changes the shape, keeps the data."
    param_fields = ("reshape_param",)
    flops = no_flops
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error(_check_failed(
                "top[0] != bottom[0]", _ptr(top[0]), _ptr(bottom[0]),
                "%s Layer does not allow in-place computation." % self.type))
        self.inferred_axis = -1
        self.copy_axes = []
        self.constant_count = 1
        for i, d in enumerate(self.layer_param.reshape_param.shape.dim):
            d = int(d)
            if d == 0:
                self.copy_axes.append(i)
            elif d == -1:
                if self.inferred_axis != -1:
                    raise self.error(_check_failed(
                        "inferred_axis_ == -1", self.inferred_axis, -1,
                        "new shape contains multiple -1 dims; at most a single (1) value of -1 "
                        "may be specified"))
                self.inferred_axis = i
            else:
                self.constant_count *= d

    def reshape(self, bottom, top):
        p = self.layer_param.reshape_param
        b = bottom[0]
        nb = b.num_axes
        in_axis = int(p.axis)
        start = in_axis if in_axis >= 0 else nb + in_axis + 1
        if start < 0:
            raise self.error(_check_failed("start_axis >= 0", start, 0,
                                           "axis %d out of range" % in_axis))
        if start > nb:
            raise self.error(_check_failed("start_axis <= bottom[0]->num_axes()", start, nb,
                                           "axis %d out of range for %d-D input blob"
                                           % (in_axis, nb)))
        num_axes = int(p.num_axes)
        if num_axes < -1:
            raise self.error(_check_failed("num_axes >= -1", num_axes, -1,
                                           "num_axes must be >= 0, or -1 for all"))
        end = nb if num_axes == -1 else start + num_axes
        if end > nb:
            raise self.error(_check_failed("end_axis <= bottom[0]->num_axes()", end, nb,
                                           "end_axis = axis + num_axes is out of range"))
        new_dims = [int(d) for d in p.shape.dim]
        shape = list(b.shape[:start]) + new_dims + list(b.shape[end:])
        for ci in self.copy_axes:
            if not nb > start + ci:
                raise self.error(_check_failed(
                    "bottom[0]->num_axes() > start_axis + copy_axis_index", nb, start + ci,
                    "new shape contains a 0, but there was no corresponding bottom axis to copy"))
            shape[start + ci] = b.shape[start + ci]
        if self.inferred_axis >= 0:
            explicit = self.constant_count * b.count_range(0, start) * b.count_range(end)
            for ci in self.copy_axes:
                explicit *= shape[start + ci]
            if explicit == 0 or b.count % explicit != 0:
                rem = b.count % explicit if explicit else "nan"
                raise self.error(_check_failed(
                    "0 == bottom[0]->count() % explicit_count", 0, rem,
                    "bottom count (%d) must be divisible by the product of the specified "
                    "dimensions (%d)" % (b.count, explicit)))
            shape[start + self.inferred_axis] = b.count // explicit
        top[0].reshape(shape)
        if top[0].count != b.count:
            raise self.error(_check_failed("top[0]->count() == bottom[0]->count()",
                                           top[0].count, b.count,
                                           "output count must match input count"))
        top[0].share_data(b)
        top[0].share_diff(b)

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass


# --------------------------------------------------------------------------- Tile
@register_layer
class TileLayer(Layer):
    type = "Tile"
    category = "structure"
    summary = "Repeats a bottom along an axis."
    param_fields = ("tile_param",)
    flops = no_flops
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        p = self.layer_param.tile_param
        self.axis = bottom[0].canonical_axis(p.axis)
        if not p.HasField("tiles"):
            raise self.error(_check_failed("tile_param.has_tiles()",
                                           message="Number of tiles must be specified"))
        self.tiles = int(p.tiles)
        if not self.tiles > 0:
            raise self.error(_check_failed("tiles_ > 0", self.tiles, 0,
                                           "Number of tiles must be positive."))
        shape = list(bottom[0].shape)
        shape[self.axis] = bottom[0].shape[self.axis] * self.tiles
        top[0].reshape(shape)
        self.outer = bottom[0].count_range(0, self.axis)
        self.inner = bottom[0].count_range(self.axis)

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data().reshape(self.outer, 1, self.inner)
        top[0].mut_data().reshape(self.outer, self.tiles, self.inner)[...] = \
            xp.broadcast_to(x, (self.outer, self.tiles, self.inner))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        td = top[0].get_diff().reshape(self.outer, self.tiles, self.inner)
        acc = td[:, 0, :].copy()
        for t in range(1, self.tiles):  # Caffe adds the tiles one after another
            acc += td[:, t, :]
        bottom[0].mut_diff().reshape(self.outer, self.inner)[...] = acc


# --------------------------------------------------------------------------- Reduction
@register_layer
class ReductionLayer(Layer):
    type = "Reduction"
    category = "structure"
    summary = "Sum / mean / asum / sumsq over trailing axes."
    param_fields = ("reduction_param",)
    def flops(self, bottoms, tops):
        op = self.layer_param.reduction_param.operation
        two = op in (caffe_pb2.ReductionParameter.ASUM, caffe_pb2.ReductionParameter.SUMSQ)
        return 0, bottom_count(bottoms) * (2 if two else 1), True, "in (× 2 for ASUM/SUMSQ)"
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        RP = caffe_pb2.ReductionParameter
        self.SUM, self.ASUM, self.SUMSQ, self.MEAN = RP.SUM, RP.ASUM, RP.SUMSQ, RP.MEAN
        self.op = self.layer_param.reduction_param.operation

    def reshape(self, bottom, top):
        p = self.layer_param.reduction_param
        self.axis = bottom[0].canonical_axis(p.axis)
        top[0].reshape(bottom[0].shape[:self.axis])
        self.num = bottom[0].count_range(0, self.axis)
        self.dim = bottom[0].count_range(self.axis)
        if self.num != top[0].count:
            raise self.error(_check_failed("num_ == top[0]->count()", self.num, top[0].count))
        dt = self.dtype.type
        self.coeff = dt(p.coeff)
        if self.op == self.MEAN:
            with np.errstate(all="ignore"):   # an empty axis: coeff / 0 is inf, as in C
                self.coeff = dt(self.coeff / dt(self.dim))

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data().reshape(self.num, self.dim)
        if self.op in (self.SUM, self.MEAN):
            y = x.sum(axis=1)
        elif self.op == self.ASUM:
            y = xp.abs(x).sum(axis=1)
        elif self.op == self.SUMSQ:
            y = (x * x).sum(axis=1)
        else:
            raise self.error("Unknown reduction op: %s" % self.op)
        if self.coeff != 1:
            y = y * self.coeff
        top[0].mut_data().reshape(self.num)[...] = y

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        c = (top[0].get_diff().reshape(self.num, 1) * self.coeff)
        bd = bottom[0].mut_diff().reshape(self.num, self.dim)
        if self.op in (self.SUM, self.MEAN):
            bd[...] = xp.broadcast_to(c, bd.shape)
        elif self.op == self.ASUM:
            x = bottom[0].get_data().reshape(self.num, self.dim)
            bd[...] = xp.sign(x) * c
        elif self.op == self.SUMSQ:
            x = bottom[0].get_data().reshape(self.num, self.dim)
            bd[...] = (2 * c) * x
        else:
            raise self.error("Unknown reduction op: %s" % self.op)


# --------------------------------------------------------------------------- Embed
@register_layer
class EmbedLayer(Layer):
    type = "Embed"
    category = "fc"
    summary = "Lookup table of learned vectors."
    param_fields = ("embed_param",)
    def flops(self, bottoms, tops):
        bias = top_count(tops) if self.layer_param.embed_param.bias_term else 0
        return 0, bias, True, "lookup (+ bias adds)"
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.embed_param
        self.N = int(p.num_output)
        if not self.N > 0:
            raise self.error(_check_failed("N_ > 0", self.N, 0,
                                           "EmbedLayer num_output must be positive."))
        self.K = int(p.input_dim)
        if not self.K > 0:
            raise self.error(_check_failed("K_ > 0", self.K, 0,
                                           "EmbedLayer input_dim must be positive."))
        self.bias_term = bool(p.bias_term)
        _weight_and_bias(self, (self.K, self.N), p)

    def reshape(self, bottom, top):
        self.M = bottom[0].count
        top[0].reshape(tuple(bottom[0].shape) + (self.N,))

    def _indices(self, bottom):
        xp = self.xp
        # static_cast<int> truncates toward zero.
        idx = bottom[0].get_data().reshape(-1).astype(xp.int64)
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0:
                raise self.error(_check_failed("index >= 0", lo, 0, "(Embed index out of range)"))
            if hi >= self.K:
                raise self.error(_check_failed("index < K_", hi, self.K,
                                               "(Embed index out of range)"))
        return idx

    def forward(self, bottom, top):
        if self.M == 0:          # an empty batch: Caffe's kernel and GEMM run over nothing,
            bottom[0].get_data()     # once they have the pointers (CHECK(data_) on a blob that
            top[0].mut_data()        # never held memory)
            return
        idx = self._indices(bottom)
        y = self.blobs[0].get_data()[idx]
        if self.bias_term:
            y += self.blobs[1].get_data()
        top[0].mut_data().reshape(self.M, self.N)[...] = y

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error(_check_failed("!propagate_down[0]",
                                           message="Can't backpropagate to EmbedLayer input."))
        if self.M == 0:          # an empty batch adds nothing to either param's diff
            top[0].get_diff()
            bottom[0].get_data()
            return
        td = top[0].get_diff().reshape(self.M, self.N)
        if self.get_param_propagate_down(0):
            idx = self._indices(bottom)
            scatter_add(self.xp, self.blobs[0].mut_diff(), idx, td)
        if self.bias_term and self.get_param_propagate_down(1):
            bd = self.blobs[1].mut_diff()
            bd += td.sum(axis=0)


# --------------------------------------------------------------------------- BatchReindex
@register_layer
class BatchReindexLayer(Layer):
    type = "BatchReindex"
    category = "structure"
    summary = "Picks batch items by index."
    param_fields = ()
    flops = no_flops
    exact_num_bottom = 2
    exact_num_top = 1

    def reshape(self, bottom, top):
        if bottom[1].num_axes != 1:
            raise self.error(_check_failed("1 == bottom[1]->num_axes()", 1, bottom[1].num_axes))
        top[0].reshape((bottom[1].shape[0],) + tuple(bottom[0].shape[1:]))

    def _indices(self, bottom):
        xp = self.xp
        idx = bottom[1].get_data().reshape(-1).astype(xp.int64)
        n = bottom[0].shape_at(0)
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0:
                raise self.error(_check_failed("ridx_data[i] >= 0", lo, 0,
                                               "Index specified for reindex layer was negative."))
            if hi >= n:
                raise self.error(_check_failed(
                    "ridx_data[i] < initial_num", hi, n,
                    "Index specified for reindex layer was greater than batch size."))
        return idx

    def forward(self, bottom, top):
        idx = self._indices(bottom)
        if top[0].count == 0:
            return
        top[0].mut_data()[...] = bottom[0].get_data()[idx]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error(_check_failed("!propagate_down[1]",
                                           message="Cannot backprop to index."))
        if not propagate_down[0]:
            return
        idx = self._indices(bottom)
        bd = bottom[0].mut_diff()
        bd[...] = 0
        if top[0].count:
            scatter_add(self.xp, bd, idx, top[0].get_diff())


# --------------------------------------------------------------------------- Filter
@register_layer
class FilterLayer(Layer):
    type = "Filter"
    category = "structure"
    summary = "Keeps batch items whose selector is non-zero."
    param_fields = ()
    flops = no_flops
    min_bottom = 2
    min_top = 1

    def layer_setup(self, bottom, top):
        if len(top) != len(bottom) - 1:
            raise self.error(_check_failed("top.size() == bottom.size() - 1", len(top),
                                           len(bottom) - 1))
        self.first_reshape = True

    def reshape(self, bottom, top):
        sel = bottom[-1]
        for i in range(1, sel.num_axes):
            if sel.shape[i] != 1:
                raise self.error(_check_failed(
                    "bottom[selector_index]->shape(i) == 1", sel.shape[i], 1,
                    "Selector blob dimensions must be singletons (1), except the first"))
        for b in bottom[:-1]:
            if sel.shape_at(0) != b.shape_at(0):
                raise self.error(_check_failed(
                    "bottom[selector_index]->shape(0) == bottom[i]->shape(0)", sel.shape[0],
                    b.shape[0],
                    "Each bottom should have the same 0th dimension as the selector blob"))
        s = _host(sel).reshape(-1)[: sel.shape[0]]      # read as Caffe's Reshape reads it (data_ checked)
        self.indices = np.flatnonzero(s != 0)
        n = len(self.indices)
        if self.first_reshape:
            n = bottom[0].shape[0]
            self.first_reshape = False
        for t, b in zip(top, bottom):
            t.reshape((n,) + tuple(b.shape[1:]))

    def _device_indices(self):
        return self.indices if self.xp is np else self.xp.asarray(self.indices)

    def forward(self, bottom, top):
        idx = self._device_indices()
        k = len(self.indices)
        for t, b in zip(top, bottom):
            x, y = b.get_data(), t.mut_data()       # asked for as Caffe does, empty or not
            if k:
                y[:k] = x[idx]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[len(bottom) - 1]:
            raise self.error("%sLayer cannot backpropagate to filter index inputs" % self.type)
        idx = self._device_indices()
        k = len(self.indices)
        for i, t in enumerate(top):
            if not propagate_down[i]:
                continue
            bd = bottom[i].mut_diff()
            bd[...] = 0
            if k:
                bd[idx] = t.get_diff()[:k]


# --------------------------------------------------------------------------- ArgMax
@register_layer
class ArgMaxLayer(Layer):
    type = "ArgMax"
    category = "output"
    summary = "Index (and value) of the top-k maxima."
    param_fields = ("argmax_param",)
    flops = per_input_flops
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.argmax_param
        self.out_max_val = bool(p.out_max_val)
        self.top_k = int(p.top_k)
        self.has_axis = p.HasField("axis")
        if not self.top_k >= 1:
            raise self.error(_check_failed("top_k_ >= 1", self.top_k, 1,
                                           "top k must not be less than 1."))
        if self.has_axis:
            self.axis = bottom[0].canonical_axis(p.axis)
            if self.top_k > bottom[0].shape[self.axis]:
                raise self.error(_check_failed(
                    "top_k_ <= bottom[0]->shape(axis_)", self.top_k, bottom[0].shape[self.axis],
                    "top_k must be less than or equal to the dimension of the axis."))
        else:
            if self.top_k > bottom[0].count_range(1):
                raise self.error(_check_failed(
                    "top_k_ <= bottom[0]->count(1)", self.top_k, bottom[0].count_range(1),
                    "top_k must be less than or equal to the dimension of the flattened "
                    "bottom blob per instance."))

    def reshape(self, bottom, top):
        if self.has_axis:
            shape = list(bottom[0].shape)
            if self.axis >= len(shape):   # Caffe indexes past the shape here (axis_ is set once)
                raise self.error("axis %d out of range for the %d-D bottom %s"
                                 % (self.axis, len(shape), bottom[0].shape_string()))
            shape[self.axis] = self.top_k
        else:
            shape = [1] * max(bottom[0].num_axes, 3)
            shape[0] = bottom[0].shape_at(0)
            shape[2] = self.top_k
            if self.out_max_val:
                shape[1] = 2
        top[0].reshape(shape)

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].get_data()
        if self.has_axis:
            dim = x.shape[self.axis]
            v = xp.moveaxis(x, self.axis, -1)  # (..., dim)
        else:
            dim = bottom[0].count_range(1)
            v = x.reshape(-1, dim)
        k = self.top_k
        # std::partial_sort with std::greater on (value, index) pairs: larger
        # values first, and among equal values the larger index first.  Sorting
        # the reversed axis stably by descending value gives that order.
        rev = v[..., ::-1]
        order = xp.argsort(-rev, axis=-1, kind="stable") if xp is np else \
            xp.argsort(-rev, axis=-1)
        order = order[..., :k]
        idx = (dim - 1) - order
        vals = xp.take_along_axis(v, idx, axis=-1)
        dt = top[0].dtype
        out = top[0].mut_data()
        if self.has_axis:
            res = vals if self.out_max_val else idx.astype(dt)
            out[...] = xp.moveaxis(res.astype(dt), -1, self.axis)
        else:
            o = out.reshape(-1, 2 * k) if self.out_max_val else out.reshape(-1, k)
            o[:, :k] = idx.astype(dt)
            if self.out_max_val:
                o[:, k:] = vals.astype(dt)

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Not Implemented Yet")


# --------------------------------------------------------------------------- Silence
@register_layer
class SilenceLayer(Layer):
    type = "Silence"
    category = "structure"
    summary = "Consumes bottoms, produces nothing."
    param_fields = ()
    flops = no_flops
    min_bottom = 1
    exact_num_top = 0

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        for pd, b in zip(propagate_down, bottom):
            if pd:
                b.mut_diff()[...] = 0


# --------------------------------------------------------------------------- Parameter
@register_layer
class ParameterLayer(Layer):
    type = "Parameter"
    category = "structure"
    summary = "A learned blob as a top."
    param_fields = ("parameter_param",)
    flops = no_flops
    exact_num_bottom = 0
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        shape = tuple(int(d) for d in self.layer_param.parameter_param.shape.dim)
        if self.blobs:
            layer_log.info("Skipping parameter initialization")
        else:
            b = self.new_blob(())
            b.reshape(shape)
            self.blobs.append(b)
        top[0].reshape(self.blobs[0].shape)

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        top[0].share_data(self.blobs[0])
        top[0].share_diff(self.blobs[0])

    def backward(self, top, propagate_down, bottom):
        pass


# --------------------------------------------------------------------------- Softmax
@register_layer
class SoftmaxLayer(Layer):
    type = "Softmax"
    category = "output"
    summary = "Softmax over an axis."
    param_fields = ("softmax_param",)
    def flops(self, bottoms, tops):
        return 0, bottom_count(bottoms) * 5, True, "in × 5"
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        self.axis = bottom[0].canonical_axis(self.layer_param.softmax_param.axis)
        top[0].reshape_like(bottom[0])

    def forward(self, bottom, top):
        top[0].mut_data()[...] = softmax_forward(self.xp, bottom[0].get_data(), self.axis)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        g = softmax_backward(self.xp, top[0].get_data(), top[0].get_diff(), self.axis)
        bottom[0].mut_diff()[...] = g


__all__ = [
    "softmax_forward", "softmax_backward", "scatter_add",
    "InnerProductLayer", "ConcatLayer", "SliceLayer", "SplitLayer", "EltwiseLayer",
    "FlattenLayer", "ReshapeLayer", "TileLayer", "ReductionLayer", "EmbedLayer",
    "BatchReindexLayer", "FilterLayer", "ArgMaxLayer", "SilenceLayer", "ParameterLayer",
    "SoftmaxLayer",
]

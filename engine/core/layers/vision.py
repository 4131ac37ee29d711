"""Vision layers: Convolution, Deconvolution, Pooling, LRN, Im2col, SPP, Crop.

Semantics follow BVLC Caffe's base_conv_layer.cpp, conv_layer.cpp,
deconv_layer.cpp, pooling_layer.cpp/.cu, lrn_layer.cpp/.cu, im2col_layer.cpp,
spp_layer.cpp and crop_layer.cpp, including their CHECK messages.

Convolution runs as im2col + one batched GEMM per group over the whole batch
(the column matrix is ``(C*K, N*P)``), chunked over the batch only when the
column buffer would grow past ``COL_BUFFER_LIMIT`` elements.  Parameter
gradients accumulate into the param diffs, as Caffe's do.
"""
import math

import numpy as np

from engine.core import backend, rng
from engine.core.blob import Blob, blob_count, declare_buffer
from engine.core.kernels import conv2d as _conv2d
from engine.core.kernels import depthwise as _depthwise
from engine.core.kernels import gemm as _gemm
from engine.core.kernels import im2col as _im2col
from engine.core.kernels import lrn as _lrn
from engine.core.kernels import pooling as _pool
from engine.core.kernels.blas import gemm_acc, matmul
from engine.core.layers.base import Layer, bottom_count, c_int, no_flops, top_count, workspace
from engine.core.layers.registry import register_layer
from engine.core.log import check_failed as _check_failed
from engine.core.log import shape_string
from engine.proto import caffe_pb2

COL_BUFFER_LIMIT = 1 << 22  # elements per column-buffer chunk (16 MiB of float32)
# On the CPU, for layers whose bottom and top hold fewer than COL_BUFFER_SMALL elements, a
# chunk's columns also stay within COL_BUFFER_SHARE x those (but never below COL_BUFFER_MIN
# elements): a small net's workspace stays small beside its blobs, big layers keep big GEMMs.
COL_BUFFER_SHARE = 0.5
COL_BUFFER_MIN = 1 << 18
COL_BUFFER_MIN_IMAGES = 4
COL_BUFFER_SMALL = 1 << 22
# CPU column layout: "auto" puts the batch innermost when the column side's last
# dim is at most BATCH_LAST_MAX_WIDTH (short rows copy in tiny pieces otherwise),
# else (n, o...); "batch_last" / "standard" force one (tests cover both).
CPU_COL_LAYOUT = "auto"
BATCH_LAST_MAX_WIDTH = 16


def _cdiv(a, b):
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q



# ====================================================================== geometry
def _conv_geometry(layer, bottom, min_spatial=0, tail=")."):
    """Parse ConvolutionParameter as BaseConvolutionLayer::LayerSetUp does.

    Returns (channel_axis, num_spatial, kernel, stride, pad, dilation).  ``tail``
    ends the "specified ... times" messages (")." for convolution, ");" for
    Im2col, as in Caffe).
    """
    cp = layer.layer_param.convolution_param
    channel_axis = bottom[0].canonical_axis(cp.axis)
    ns = bottom[0].num_axes - (channel_axis + 1)
    if ns < min_spatial:
        raise layer.error(_check_failed("num_spatial_axes_ >= %d" % min_spatial, ns, min_spatial))

    def per_dim(name, values, has_hw, h, w, default, nonzero_msg):
        if has_hw:
            if ns != 2:
                raise layer.error(_check_failed("num_spatial_axes_ == 2", ns, 2,
                                                "%s_h & %s_w can only be used for 2D convolution."
                                                % (name, name)))
            if len(values) != 0:
                raise layer.error(_check_failed("0 == conv_param.%s_size()"
                                                % ("kernel_size" if name == "kernel" else name), 0, len(values),
                                                "Either %s or %s_h/w should be specified; not both."
                                                % ("kernel_size" if name == "kernel" else name, name)))
            out = [h, w]
        else:
            nd = len(values)
            label = "kernel_size" if name == "kernel" else name
            ok = (nd == 1 or nd == ns) if default is None else (nd in (0, 1) or nd == ns)
            if not ok:
                cond = ("num_kernel_dims == 1 || num_kernel_dims == num_spatial_axes_" if default is None
                        else "num_%s_dims == 0 || num_%s_dims == 1 || num_%s_dims == num_spatial_axes_"
                        % (name, name, name))
                raise layer.error("Check failed: %s %s must be specified once, or once per spatial "
                                  "dimension (%s specified %d times; %d spatial dims%s"
                                  % (cond, label, label, nd, ns, tail))
            out = [default if nd == 0 else values[0 if nd == 1 else i] for i in range(ns)]
        out = [c_int(v) for v in out]           # Caffe keeps them in Blob<int>: 4294967295 is -1
        # Caffe checks the kernel either way, a repeated stride only: stride_h/w are not checked (a
        # negative one makes a negative output dim, refused by Blob::Reshape; 0 divides by zero in
        # Caffe, refused here with the stride's message)
        if nonzero_msg and not (has_hw and name == "stride" and all(v != 0 for v in out)):
            for i in range(ns):
                if out[i] <= 0:
                    raise layer.error(_check_failed("%s_data[i] > 0" % ("kernel_shape" if name == "kernel"
                                                                       else name), out[i], 0, nonzero_msg))
        return out

    kernel = per_dim("kernel", list(cp.kernel_size), cp.HasField("kernel_h") or cp.HasField("kernel_w"),
                     cp.kernel_h, cp.kernel_w, None, "Filter dimensions must be nonzero.")
    stride = per_dim("stride", list(cp.stride), cp.HasField("stride_h") or cp.HasField("stride_w"),
                     cp.stride_h, cp.stride_w, 1, "Stride dimensions must be nonzero.")
    pad = per_dim("pad", list(cp.pad), cp.HasField("pad_h") or cp.HasField("pad_w"),
                  cp.pad_h, cp.pad_w, 0, None)
    dilation = per_dim("dilation", list(cp.dilation), False, 0, 0, 1, None)
    # A pad of 2^31 and up is negative in Caffe's int (found by fuzz_caffe.py, seed 4242): its
    # im2col then reads from inside the image, a crop, which engine.core.kernels.im2col does too.
    return channel_axis, ns, kernel, stride, pad, dilation


def _chunks(num, per_image, limit=None):
    """(n0, n1) image ranges whose column matrices hold at most ``limit`` elements
    (COL_BUFFER_LIMIT by default; at least one image)."""
    limit = COL_BUFFER_LIMIT if limit is None else limit
    step = max(1, min(num, limit // max(per_image, 1)))
    for n0 in range(0, num, step):
        yield n0, min(num, n0 + step)


#: above this many groups (depthwise convolutions) one batched ``xp.matmul`` beats a
#: compiled GEMM call per group (MobileNet's 32-1024 groups: 2x slower per group)
MAX_COMPILED_GROUPS = 4


def _compiled(*arrays):
    """True where the compiled GEMM serves a grouped product (leading axis: the groups)."""
    return _gemm.usable(*arrays) and arrays[0].shape[0] <= MAX_COMPILED_GROUPS


def _matmul(xp, a, b, out):
    """out = a @ b over a leading group axis: the compiled GEMM on float32 host arrays
    (engine.core.kernels.gemm) for a few groups, else ``xp.matmul``."""
    if _compiled(a, b, out) and out.ndim == 3:
        for gi in range(a.shape[0]):
            _gemm.matmul(a[gi], b[gi], out[gi])
        return out
    return matmul(a, b, out)


# ====================================================================== convolution
class BaseConvolutionLayer(Layer):
    """BaseConvolutionLayer: geometry, params, and the GEMM helpers."""
    min_bottom = 1
    min_top = 1
    equal_num_bottom_top = True
    reverse_dimensions = False

    def layer_setup(self, bottom, top):
        cp = self.layer_param.convolution_param
        self.force_nd_im2col = cp.force_nd_im2col
        (self.channel_axis, self.num_spatial_axes, self.kernel_shape, self.stride, self.pad,
         self.dilation) = _conv_geometry(self, bottom)
        self.is_1x1 = all(k == 1 and s == 1 and p == 0
                          for k, s, p in zip(self.kernel_shape, self.stride, self.pad))
        self.channels = bottom[0].shape[self.channel_axis]
        self.num_output = int(cp.num_output)
        if not self.num_output > 0:
            raise self.error(_check_failed("num_output_ > 0", self.num_output, 0))
        self.group = int(cp.group)
        if self.group <= 0 or self.channels % self.group != 0:
            raise self.error(_check_failed("channels_ % group_ == 0",
                                           self.channels % self.group if self.group else "nan", 0))
        if self.num_output % self.group != 0:
            raise self.error(_check_failed("num_output_ % group_ == 0", self.num_output % self.group, 0,
                                           "Number of output should be multiples of group."))
        if self.reverse_dimensions:
            self.conv_out_channels, self.conv_in_channels = self.channels, self.num_output
        else:
            self.conv_out_channels, self.conv_in_channels = self.num_output, self.channels
        weight_shape = (self.conv_out_channels, self.conv_in_channels // self.group) + \
            tuple(self.kernel_shape)
        self.bias_term = bool(cp.bias_term)
        bias_shape = (self.num_output,) if self.bias_term else ()
        if self.blobs:
            if len(self.blobs) != 1 + self.bias_term:
                raise self.error(_check_failed("1 + bias_term_ == this->blobs_.size()",
                                               1 + self.bias_term, len(self.blobs),
                                               "Incorrect number of weight blobs."))
            if tuple(self.blobs[0].shape) != weight_shape:
                raise self.error("Incorrect weight shape: expected shape %s; instead, shape was %s"
                                 % (shape_string(weight_shape), self.blobs[0].shape_string()))
            if self.bias_term and tuple(self.blobs[1].shape) != bias_shape:
                raise self.error("Incorrect bias shape: expected shape %s; instead, shape was %s"
                                 % (shape_string(bias_shape), self.blobs[1].shape_string()))
        else:
            from engine.core.layers.base import fill_param as fill
            w = self.new_blob(weight_shape)
            fill(w, cp.weight_filler)
            self.blobs.append(w)
            if self.bias_term:
                b = self.new_blob(bias_shape)
                fill(b, cp.bias_filler)
                self.blobs.append(b)
        self.kernel_dim = self.blobs[0].count_range(1)
        for i in range(len(self.blobs)):
            self.set_param_propagate_down(i, self.get_param_propagate_down(i))

    # ------------------------------------------------------------ shapes
    def compute_output_shape(self):
        raise NotImplementedError

    def reshape(self, bottom, top):
        first_spatial = self.channel_axis + 1
        if bottom[0].num_axes != first_spatial + self.num_spatial_axes:
            raise self.error(_check_failed("bottom[0]->num_axes() == first_spatial_axis + num_spatial_axes_",
                                           bottom[0].num_axes, first_spatial + self.num_spatial_axes,
                                           "bottom num_axes may not change."))
        self.num = bottom[0].count_range(0, self.channel_axis)
        if bottom[0].shape[self.channel_axis] != self.channels:
            raise self.error(_check_failed("bottom[0]->shape(channel_axis_) == channels_",
                                           bottom[0].shape[self.channel_axis], self.channels,
                                           "Input size incompatible with convolution kernel."))
        for b in bottom[1:]:
            if b.shape != bottom[0].shape:
                raise self.error("Check failed: bottom[0]->shape() == bottom[bottom_id]->shape() "
                                 "All inputs must have the same shape.")
        self.bottom_spatial = tuple(bottom[0].shape[first_spatial:])
        self.output_shape = self.compute_output_shape()
        top_shape = tuple(bottom[0].shape[:self.channel_axis]) + (self.num_output,) + \
            tuple(self.output_shape)
        for t in top:
            t.reshape(top_shape)
        # Caffe's col_buffer_ (one image's columns) and bias_multiplier_ are Blobs reshaped
        # here: Blob::Reshape's INT_MAX check holds for them too, before any memory is used.
        col_spatial = self.bottom_spatial if self.reverse_dimensions else tuple(self.output_shape)
        declare_buffer((self.kernel_dim * self.group,) + tuple(col_spatial), "col_buffer_", self.dtype)
        if self.bias_term:
            blob_count((int(np.prod(self.output_shape, dtype=np.int64)),), "bias_multiplier_")

    # ------------------------------------------------------------ GEMM helpers
    def _weights3(self, arr):
        """(G, conv_out/G, kernel_dim) view of a weight array."""
        g = self.group
        return arr.reshape(g, self.conv_out_channels // g, self.kernel_dim)

    def _geom(self):
        """(kernel, pad, stride, dilation, image spatial, column spatial)."""
        if self.reverse_dimensions:
            return (self.kernel_shape, self.pad, self.stride, self.dilation,
                    tuple(self.output_shape), self.bottom_spatial)
        return (self.kernel_shape, self.pad, self.stride, self.dilation,
                self.bottom_spatial, tuple(self.output_shape))

    def _col_limit(self, bottom, top, per_image):
        """Column-matrix elements per chunk for these blobs (see COL_BUFFER_SHARE); the
        small-layer cap applies only where a chunk still holds COL_BUFFER_MIN_IMAGES images
        (smaller GEMMs cost more than the memory saved)."""
        own = bottom.count + top.count
        if self.on_gpu or self.is_1x1 or own >= COL_BUFFER_SMALL:    # 1x1: the columns are the bottom
            return COL_BUFFER_LIMIT
        share = max(COL_BUFFER_MIN, int(COL_BUFFER_SHARE * own))
        if share < COL_BUFFER_MIN_IMAGES * per_image:
            return COL_BUFFER_LIMIT
        return min(COL_BUFFER_LIMIT, share)

    def _work(self, name, count, dtype):
        """A flat scratch array kept across calls (Caffe's col_buffer_), grown on demand.

        The scratch is per thread and shared by every convolution layer (layers run one
        at a time and copy their results out), so it is as big as the largest need."""
        return workspace(self.xp, "conv." + name, (int(count),), dtype)

    def _batch_last(self, nb):
        """Column layout: batch innermost (CPU) when the column side's rows are short,
        where the (n, o...) layout would copy and add in tiny pieces."""
        if self.on_gpu or nb == 1 or self.is_1x1 or not self.num_spatial_axes:
            return False
        if CPU_COL_LAYOUT != "auto":
            return CPU_COL_LAYOUT == "batch_last"
        return self._geom()[5][-1] <= BATCH_LAST_MAX_WIDTH

    def _to_cols(self, img, bl):
        """img (nb, C_img, *S_img) -> columns (C_img*K, nb*P_col)."""
        kernel, pad, stride, dilation, S, O = self._geom()
        nb, c = img.shape[:2]
        if self.is_1x1:
            flat = img.reshape(nb, c, -1)
            if nb == 1:
                return flat[0]
            out = self._work("cols", flat.size, flat.dtype)[:flat.size].reshape(c, nb, -1)
            out[...] = flat.swapaxes(0, 1)
            return out.reshape(c, -1)
        K = int(np.prod(kernel, dtype=np.int64))
        P = int(np.prod(O, dtype=np.int64))
        work = self._work("cols", c * K * nb * P, img.dtype)
        pad_work = None
        if not self.on_gpu and any(pad):
            ext = _im2col._padded_extent(S, kernel, pad, stride, dilation, O)
            pad_work = self._work("pad", c * nb * int(np.prod(ext, dtype=np.int64)), img.dtype)
        return _im2col.im2col(img, kernel, pad, stride, dilation, O, out=work, batch_last=bl, pad_work=pad_work)

    def _from_cols(self, cols, nb, c, bl):
        """columns (C_img*K, nb*P_col) -> img (nb, C_img, *S_img) (summing overlaps)."""
        kernel, pad, stride, dilation, S, O = self._geom()
        if self.is_1x1:
            return cols.reshape((c, nb) + tuple(S)).swapaxes(0, 1)
        work = None
        if not self.on_gpu:
            ext = _im2col._padded_extent(S, kernel, pad, stride, dilation, O)
            work = self._work("col2im", c * nb * int(np.prod(ext, dtype=np.int64)), cols.dtype)
        return _im2col.col2im(cols, nb, c, S, kernel, pad, stride, dilation, O, work=work,
                              batch_last=bl)

    def _batch_to_rows(self, a, bl):
        """(nb, C, P) -> (G, C/G, nb*P) contiguous (columns (p, n) when ``bl``)."""
        nb, c, p = a.shape
        g = self.group
        if nb == 1:
            return a.reshape(g, c // g, p)
        # Shares the forward GEMM's output buffer ("out"): a layer uses one or the other at a time.
        out = self._work("out", a.size, a.dtype)[:a.size]
        if bl:
            out.reshape(c, p, nb)[...] = a.transpose(1, 2, 0)
        else:
            out.reshape(c, nb, p)[...] = a.swapaxes(0, 1)
        return out.reshape(g, c // g, nb * p)

    @staticmethod
    def _rows_to_batch(a, nb, bl):
        """(G, C/G, nb*P) -> (nb, C, P) view."""
        g, cg, np_ = a.shape
        if bl:
            return a.reshape(g * cg, np_ // nb, nb).transpose(2, 0, 1)
        return a.reshape(g * cg, nb, np_ // nb).swapaxes(0, 1)

    def _gemm(self, name, a, b, accumulate_into=None):
        """Batched (over groups) a @ b into a reused buffer (or added to ``accumulate_into``)."""
        xp = self.xp
        shape = a.shape[:-1] + b.shape[-1:]
        out = self._work(name, int(np.prod(shape)), a.dtype)[:int(np.prod(shape))].reshape(shape)
        _matmul(xp, a, b, out)
        if accumulate_into is not None:
            accumulate_into += out
        return out

    def _accumulate_dw(self, rows, cols, dW3):
        """dW3 += rows @ cols^T per group (Caffe's gemm with beta = 1: on the host the
        product is added inside the GEMM, no temporary)."""
        if self.on_gpu:
            self._gemm("dw", rows, cols.swapaxes(1, 2), accumulate_into=dW3)
            return
        if _compiled(rows, cols, dW3):
            # dW^T = cols @ rows^T reads the big column matrix in place (the compiled GEMM
            # packs only the small rows^T); the transposed product is then added to dW.
            kdim, og = cols.shape[1], rows.shape[1]
            wt = self._work("dwt", kdim * og, dW3.dtype)[:kdim * og].reshape(kdim, og)
            for gi in range(self.group):
                _gemm.matmul(cols[gi], rows[gi].T, wt)
                dW3[gi] += wt.T
            return
        for gi in range(self.group):
            gemm_acc(rows[gi], cols[gi].T, dW3[gi],
                     lambda shape, dtype: self._work("dw", int(np.prod(shape)), dtype)[:int(np.prod(shape))]
                     .reshape(shape))

    def _bias_add(self, y):
        """y (nb, num_output, P) += bias."""
        if self.bias_term:
            b = self.blobs[1].get_data()
            y += b.reshape(-1, 1)

    def _bias_backward(self, top):
        if self.bias_term and self.get_param_propagate_down(1):
            db = self.blobs[1].mut_diff()
            for t in top:
                dy = t.get_diff().reshape(self.num, self.num_output, int(np.prod(self.output_shape, dtype=np.int64)))
                db += dy.sum(axis=(0, 2)).astype(db.dtype, copy=False)


@register_layer
class ConvolutionLayer(BaseConvolutionLayer):
    type = "Convolution"
    category = "conv"
    summary = "2-D (N-D) convolution: im2col + GEMM."
    param_fields = ("convolution_param",)
    def flops(self, bottoms, tops):
        out, w = top_count(tops), self.blobs[0]
        macc = out * (w.count // max(w.shape[0], 1))
        bias = out if self.layer_param.convolution_param.bias_term else 0
        return macc, 2 * macc + bias, True, "out × C_in/group × ∏kernel"

    def compute_output_shape(self):
        out = []
        for i in range(self.num_spatial_axes):
            ext = self.dilation[i] * (self.kernel_shape[i] - 1) + 1
            out.append(_cdiv(self.bottom_spatial[i] + 2 * self.pad[i] - ext, self.stride[i]) + 1)
        return out

    # ------------------------------------------------------------ implicit GEMM (host)
    #: the implicit GEMM's break-even output size (benchmarks/README.md: 1x1 convolutions and
    #: 3x3 ones on 7x7 maps run faster as im2col-free / im2col + the compiled GEMM)
    IMPLICIT_MIN_PIXELS = 64
    #: strided 1x1 convolutions take the implicit GEMM up to this many input channels (the
    #: tiny ResNet's projection: faster; ResNet-50's 256-512 channels: slower than im2col's
    #: strided copy + GEMM; benchmarks/README.md, issue 24)
    IMPLICIT_STRIDED_1X1_MAX_CHANNELS = 64
    #: a first convolution (no bottom diff) with a shorter kernel_dim (C x kh x kw) than this
    #: takes im2col + OpenBLAS for its weight gradient: the implicit GEMM's dW^T (kernel_dim x
    #: num_output) tiles are then mostly padding (LeNet's conv1, 1 x 5 x 5: 3.7 -> 2.0 ms of
    #: CPU an iteration; CIFAR-10 quick's conv1, 3 x 5 x 5, is faster implicit: 15.9 vs 18.2;
    #: benchmarks/README.md, issue 36)
    IMPLICIT_WEIGHTS_MIN_KERNEL_DIM = 48

    def _implicit(self, *arrays):
        """True where the implicit GEMM (engine.core.kernels.conv2d: strides 1 and 2) serves:
        a kernel larger than 1x1 (or a strided 1x1 one on few channels) over at least
        IMPLICIT_MIN_PIXELS output pixels."""
        return (not self.on_gpu and self.channel_axis == 1 and self.num_spatial_axes == 2
                and (any(k > 1 for k in self.kernel_shape)
                     or (any(s > 1 for s in self.stride) and self.channels <= self.IMPLICIT_STRIDED_1X1_MAX_CHANNELS))
                and int(np.prod(self.output_shape)) >= self.IMPLICIT_MIN_PIXELS
                and _conv2d.applies(self.kernel_shape, self.stride, self.pad, self.dilation, self.group,
                                    *arrays))

    @staticmethod
    def _work32(name, n):
        """The implicit GEMM's host scratch.  NumPy by name, not ``self.xp``: the kernel asks
        for it from its pool threads, whose mode is not the caller's."""
        return workspace(np, "conv." + name, (int(n),), np.float32)

    def _forward_implicit(self, bottom, top):
        w = self.blobs[0].get_data()
        bias = self.blobs[1].get_data() if self.bias_term else None
        for b, t in zip(bottom, top):
            x = b.get_data().reshape((self.num, self.channels) + self.bottom_spatial)
            y = t.mut_data().reshape((self.num, self.num_output) + tuple(self.output_shape))
            _conv2d.forward(x, w, bias, self.pad, y, self._work32, self.stride)

    def _backward_implicit(self, top, propagate_down, bottom):
        w = self.blobs[0].get_data()
        need_w = self.get_param_propagate_down(0)
        dw = self.blobs[0].mut_diff() if need_w else None
        for i, (b, t) in enumerate(zip(bottom, top)):
            dy = t.get_diff().reshape((self.num, self.num_output) + tuple(self.output_shape))
            if need_w:
                x = b.get_data().reshape((self.num, self.channels) + self.bottom_spatial)
                _conv2d.backward_weights(x, dy, self.pad, dw, self._work32, self.stride)
            if propagate_down[i]:
                dx = b.mut_diff().reshape((self.num, self.channels) + self.bottom_spatial)
                _conv2d.backward_data(dy, w, self.pad, dx, self._work32, self.stride)

    # ------------------------------------------------------------ depthwise (host)
    def _depthwise(self, *arrays):
        """True where the direct depthwise loops (engine.core.kernels.depthwise) serve:
        2-D, group = channels = num_output, on the host."""
        return (not self.on_gpu and self.channel_axis == 1 and min(self.pad) >= 0
                and _depthwise.applies(self.group, self.channels, self.num_output, self.num_spatial_axes,
                                       *arrays))

    def _image_shapes(self):
        return (self.num, self.channels) + self.bottom_spatial, (self.num, self.num_output) + tuple(self.output_shape)

    def _forward_depthwise(self, bottom, top):
        w = self.blobs[0].get_data()
        bias = self.blobs[1].get_data() if self.bias_term else None
        xs, ys = self._image_shapes()
        for b, t in zip(bottom, top):
            _depthwise.forward(b.get_data().reshape(xs), w, bias, self.stride, self.pad, self.dilation,
                               t.mut_data().reshape(ys), self._work32)

    def _backward_depthwise(self, top, propagate_down, bottom):
        w = self.blobs[0].get_data()
        need_w = self.get_param_propagate_down(0)
        dw = self.blobs[0].mut_diff() if need_w else None
        xs, ys = self._image_shapes()
        for i, (b, t) in enumerate(zip(bottom, top)):
            dy = t.get_diff().reshape(ys)
            if need_w:
                _depthwise.backward_weights(b.get_data().reshape(xs), dy, self.stride, self.pad, self.dilation,
                                            dw, self._work32)
            if propagate_down[i]:
                _depthwise.backward_data(dy, w, self.stride, self.pad, self.dilation, b.mut_diff().reshape(xs),
                                         self._work32)

    # ------------------------------------------------------------ 1x1 per image (host)
    #: a 1x1 convolution over at least this many pixels an image runs one GEMM per image
    #: straight between the blobs (Caffe's loop over images), not one over the batch's
    #: columns, which costs a copy of the input and one of the output
    PER_IMAGE_MIN_PIXELS = 256

    def _per_image_1x1(self, nb):
        return (not self.on_gpu and self.is_1x1 and self.group == 1 and nb > 1
                and int(np.prod(self.output_shape, dtype=np.int64)) >= self.PER_IMAGE_MIN_PIXELS)

    def _forward_1x1(self, bottom, top):
        W = self.blobs[0].get_data().reshape(self.num_output, self.channels)
        P = int(np.prod(self.output_shape, dtype=np.int64))
        bias = self.blobs[1].get_data().reshape(-1, 1) if self.bias_term else None
        for b, t in zip(bottom, top):
            x = b.get_data().reshape(self.num, self.channels, P)
            y = t.mut_data().reshape(self.num, self.num_output, P)
            for n in range(self.num):
                matmul(W, x[n], y[n])
                if bias is not None:
                    y[n] += bias

    def _backward_1x1(self, top, propagate_down, bottom):
        W = self.blobs[0].get_data().reshape(self.num_output, self.channels)
        need_w = self.get_param_propagate_down(0)
        dW = self.blobs[0].mut_diff().reshape(self.num_output, self.channels) if need_w else None
        P = int(np.prod(self.output_shape, dtype=np.int64))
        work = self._work("dw", dW.size, dW.dtype)[:dW.size].reshape(dW.shape) if need_w else None
        for i, (b, t) in enumerate(zip(bottom, top)):
            dy = t.get_diff().reshape(self.num, self.num_output, P)
            x = b.get_data().reshape(self.num, self.channels, P)
            dx = b.mut_diff().reshape(self.num, self.channels, P) if propagate_down[i] else None
            for n in range(self.num):
                if need_w:              # Caffe's weight GEMM with beta = 1, image by image
                    matmul(dy[n], x[n].T, work)
                    dW += work
                if dx is not None:
                    matmul(W.T, dy[n], dx[n])

    def forward(self, bottom, top):
        if self._per_image_1x1(self.num):
            self._forward_1x1(bottom, top)
            return
        if self._depthwise(self.blobs[0].get_data(), *(b.get_data() for b in bottom), *(t.mut_data() for t in top)):
            self._forward_depthwise(bottom, top)
            return
        if self._implicit(self.blobs[0].get_data(), *(b.get_data() for b in bottom)):
            self._forward_implicit(bottom, top)
            return
        g = self.group
        W3 = self._weights3(self.blobs[0].get_data())
        C, O = self.channels, self.num_output
        P = int(np.prod(self.output_shape, dtype=np.int64))
        per_image = self.kernel_dim * g * P
        for b, t in zip(bottom, top):
            x = b.get_data().reshape((self.num, C) + self.bottom_spatial)
            y = t.mut_data().reshape(self.num, O, P)
            for n0, n1 in _chunks(self.num, per_image, self._col_limit(b, t, per_image)):
                nb = n1 - n0
                bl = self._batch_last(nb)
                cols = self._to_cols(x[n0:n1], bl).reshape(g, self.kernel_dim, nb * P)
                ys = y[n0:n1]
                if nb == 1:
                    _matmul(self.xp, W3, cols, y[n0].reshape(g, O // g, P))
                    self._bias_add(ys)
                else:
                    rows = self._rows_to_batch(self._gemm("out", W3, cols), nb, bl)
                    if self.bias_term:   # the copy out of the GEMM buffer adds the bias
                        self.xp.add(rows, self.blobs[1].get_data().reshape(-1, 1), out=ys)
                    else:
                        ys[...] = rows

    def backward(self, top, propagate_down, bottom):
        g = self.group
        C, O = self.channels, self.num_output
        P = int(np.prod(self.output_shape, dtype=np.int64))
        per_image = self.kernel_dim * g * P
        self._bias_backward(top)
        if self._per_image_1x1(self.num):
            self._backward_1x1(top, propagate_down, bottom)
            return
        if self._depthwise(self.blobs[0].get_data(), *(b.get_data() for b in bottom),
                           *(t.get_diff() for t in top)):
            self._backward_depthwise(top, propagate_down, bottom)
            return
        if self._implicit(self.blobs[0].get_data(), *(b.get_data() for b in bottom),
                          *(t.get_diff() for t in top)) \
                and (any(propagate_down) or self.kernel_dim >= self.IMPLICIT_WEIGHTS_MIN_KERNEL_DIM):
            self._backward_implicit(top, propagate_down, bottom)
            return
        need_w = self.get_param_propagate_down(0)
        W3 = self._weights3(self.blobs[0].get_data())
        dW3 = self._weights3(self.blobs[0].mut_diff()) if need_w else None
        for i, (b, t) in enumerate(zip(bottom, top)):
            pd = propagate_down[i]
            if not (need_w or pd):
                continue
            x = b.get_data().reshape((self.num, C) + self.bottom_spatial)
            dy = t.get_diff().reshape(self.num, O, P)
            dx = b.mut_diff().reshape((self.num, C) + self.bottom_spatial) if pd else None
            for n0, n1 in _chunks(self.num, per_image, self._col_limit(b, t, per_image)):
                nb = n1 - n0
                bl = self._batch_last(nb)
                dyr = self._batch_to_rows(dy[n0:n1], bl)             # (G, O/G, nb*P)
                if need_w:
                    cols = self._to_cols(x[n0:n1], bl).reshape(g, self.kernel_dim, nb * P)
                    self._accumulate_dw(dyr, cols, dW3)
                if pd:
                    if self.is_1x1 and nb == 1:
                        # The column matrix of a 1x1 convolution is the image itself.
                        _matmul(self.xp, W3.swapaxes(1, 2), dyr, dx[n0].reshape(g, self.kernel_dim, P))
                        continue
                    # The column buffer is free again once dW has used it: dcols go there.
                    dcols = self._gemm("cols", W3.swapaxes(1, 2), dyr)       # (G, kdim, nb*P)
                    dx[n0:n1] = self._from_cols(dcols.reshape(g * self.kernel_dim, nb * P), nb, C, bl)


@register_layer
class DeconvolutionLayer(BaseConvolutionLayer):
    type = "Deconvolution"
    category = "conv"
    summary = "Transposed convolution."
    param_fields = ("convolution_param",)
    def flops(self, bottoms, tops):
        w = self.blobs[0]
        macc = bottom_count(bottoms) * (w.count // max(w.shape[0], 1))
        bias = top_count(tops) if self.layer_param.convolution_param.bias_term else 0
        return macc, 2 * macc + bias, True, "in × C_out/group × ∏kernel"
    reverse_dimensions = True

    def compute_output_shape(self):
        out = []
        for i in range(self.num_spatial_axes):
            ext = self.dilation[i] * (self.kernel_shape[i] - 1) + 1
            out.append(self.stride[i] * (self.bottom_spatial[i] - 1) + ext - 2 * self.pad[i])
        return out

    def forward(self, bottom, top):
        g = self.group
        C, O = self.channels, self.num_output
        W3 = self._weights3(self.blobs[0].get_data())             # (G, C/G, kdim)
        Pin = int(np.prod(self.bottom_spatial, dtype=np.int64))
        per_image = self.kernel_dim * g * Pin
        for b, t in zip(bottom, top):
            x = b.get_data().reshape(self.num, C, Pin)
            y = t.mut_data().reshape((self.num, O) + tuple(self.output_shape))
            for n0, n1 in _chunks(self.num, per_image, self._col_limit(b, t, per_image)):
                nb = n1 - n0
                bl = self._batch_last(nb)
                xr = self._batch_to_rows(x[n0:n1], bl)               # (G, C/G, nb*Pin)
                cols = self._gemm("cols_t", W3.swapaxes(1, 2), xr)  # (G, kdim, nb*Pin)
                ys = y[n0:n1]
                ys[...] = self._from_cols(cols.reshape(g * self.kernel_dim, nb * Pin), nb, O, bl)
                self._bias_add(ys.reshape(nb, O, -1))

    def backward(self, top, propagate_down, bottom):
        g = self.group
        C, O = self.channels, self.num_output
        Pin = int(np.prod(self.bottom_spatial, dtype=np.int64))
        per_image = self.kernel_dim * g * Pin
        self._bias_backward(top)
        need_w = self.get_param_propagate_down(0)
        W3 = self._weights3(self.blobs[0].get_data())
        dW3 = self._weights3(self.blobs[0].mut_diff()) if need_w else None
        for i, (b, t) in enumerate(zip(bottom, top)):
            pd = propagate_down[i]
            if not (need_w or pd):
                continue
            x = b.get_data().reshape(self.num, C, Pin)
            dy = t.get_diff().reshape((self.num, O) + tuple(self.output_shape))
            dx = b.mut_diff().reshape(self.num, C, Pin) if pd else None
            for n0, n1 in _chunks(self.num, per_image, self._col_limit(b, t, per_image)):
                nb = n1 - n0
                bl = self._batch_last(nb)
                cols = self._to_cols(dy[n0:n1], bl).reshape(g, self.kernel_dim, nb * Pin)
                if need_w:
                    xr = self._batch_to_rows(x[n0:n1], bl)
                    self._accumulate_dw(xr, cols, dW3)
                if pd:
                    dxr = self._gemm("dx", W3, cols)                # (G, C/G, nb*Pin)
                    dx[n0:n1] = self._rows_to_batch(dxr, nb, bl)


# ====================================================================== im2col
@register_layer
class Im2colLayer(Layer):
    type = "Im2col"
    category = "conv"
    summary = "Unfolds patches into columns."
    param_fields = ("convolution_param",)
    flops = no_flops
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        cp = self.layer_param.convolution_param
        self.force_nd_im2col = cp.force_nd_im2col
        (self.channel_axis, self.num_spatial_axes, self.kernel_shape, self.stride, self.pad,
         self.dilation) = _conv_geometry(self, bottom, min_spatial=1, tail=");")

    def reshape(self, bottom, top):
        shape = list(bottom[0].shape)
        ca = self.channel_axis
        out = []
        for i in range(self.num_spatial_axes):
            shape[ca] *= self.kernel_shape[i]
            ext = self.dilation[i] * (self.kernel_shape[i] - 1) + 1
            o = _cdiv(bottom[0].shape[ca + i + 1] + 2 * self.pad[i] - ext, self.stride[i]) + 1
            shape[ca + i + 1] = o
            out.append(o)
        top[0].reshape(shape)
        self.num = bottom[0].count_range(0, ca)
        self.channels = bottom[0].shape[ca]
        self.in_spatial = tuple(bottom[0].shape[ca + 1:])
        self.out_spatial = tuple(out)

    def forward(self, bottom, top):
        C, n = self.channels, self.num
        x = bottom[0].get_data().reshape((n, C) + self.in_spatial)
        cols = _im2col.im2col(x, self.kernel_shape, self.pad, self.stride, self.dilation,
                              self.out_spatial)
        rows = cols.shape[0]
        P = int(np.prod(self.out_spatial, dtype=np.int64))     # explicit sizes: n may be 0
        top[0].mut_data().reshape(n, rows, P)[...] = cols.reshape(rows, n, P).swapaxes(0, 1)

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        C, n = self.channels, self.num
        rows = C * int(np.prod(self.kernel_shape, dtype=np.int64))
        P = int(np.prod(self.out_spatial, dtype=np.int64))
        dy = top[0].get_diff().reshape(n, rows, P)
        cols = xp.ascontiguousarray(dy.swapaxes(0, 1)).reshape(rows, n * P)
        dx = _im2col.col2im(cols, n, C, self.in_spatial, self.kernel_shape, self.pad, self.stride,
                            self.dilation, self.out_spatial)
        bottom[0].mut_diff().reshape((n, C) + self.in_spatial)[...] = dx


# ====================================================================== pooling
@register_layer
class PoolingLayer(Layer):
    type = "Pooling"
    category = "pool"
    summary = "Max / average / stochastic pooling."
    param_fields = ("pooling_param",)
    def flops(self, bottoms, tops):
        pp = self.layer_param.pooling_param
        shape = bottoms[0].shape
        if pp.global_pooling:
            kh, kw = (shape[2], shape[3]) if len(shape) >= 4 else (1, 1)
        elif pp.HasField("kernel_h") or pp.HasField("kernel_w"):
            kh, kw = pp.kernel_h, pp.kernel_w
        else:
            kh = kw = pp.kernel_size
        return 0, top_count(tops) * int(kh) * int(kw), True, "out × kh × kw"
    exact_num_bottom = 1
    min_top = 1
    max_top = 2

    def __init__(self, param, dtype=np.float32):
        super().__init__(param, dtype)
        PP = caffe_pb2.PoolingParameter
        # MaxTopBlobs: the mask is a second top only for MAX pooling.
        self.max_top = 2 if self.layer_param.pooling_param.pool == PP.MAX else 1
        self.max_idx = None
        self.rand_idx = None

    def layer_setup(self, bottom, top):
        pp = self.layer_param.pooling_param
        PP = caffe_pb2.PoolingParameter
        has = pp.HasField
        if pp.global_pooling:
            if has("kernel_size") or has("kernel_h") or has("kernel_w"):
                raise self.error("Check failed: !(pool_param.has_kernel_size() || "
                                 "pool_param.has_kernel_h() || pool_param.has_kernel_w()) "
                                 "With Global_pooling: true Filter size cannot specified")
        else:
            if not (has("kernel_size") != (has("kernel_h") and has("kernel_w"))):
                raise self.error("Check failed: !pool_param.has_kernel_size() != "
                                 "!(pool_param.has_kernel_h() && pool_param.has_kernel_w()) "
                                 "Filter size is kernel_size OR kernel_h and kernel_w; not both")
            if not (has("kernel_size") or (has("kernel_h") and has("kernel_w"))):
                raise self.error("Check failed: pool_param.has_kernel_size() || "
                                 "(pool_param.has_kernel_h() && pool_param.has_kernel_w()) "
                                 "For non-square filters both kernel_h and kernel_w are required.")
        if not ((not has("pad") and has("pad_h") and has("pad_w"))
                or (not has("pad_h") and not has("pad_w"))):
            raise self.error("Check failed: (!pool_param.has_pad() && pool_param.has_pad_h() && "
                             "pool_param.has_pad_w()) || (!pool_param.has_pad_h() && "
                             "!pool_param.has_pad_w()) pad is pad OR pad_h and pad_w are required.")
        if not ((not has("stride") and has("stride_h") and has("stride_w"))
                or (not has("stride_h") and not has("stride_w"))):
            raise self.error("Check failed: (!pool_param.has_stride() && pool_param.has_stride_h() && "
                             "pool_param.has_stride_w()) || (!pool_param.has_stride_h() && "
                             "!pool_param.has_stride_w()) Stride is stride OR stride_h and stride_w "
                             "are required.")
        self.global_pooling = pp.global_pooling
        self.round_mode = pp.round_mode
        self.pool = pp.pool
        if self.global_pooling:
            self.kernel_h, self.kernel_w = bottom[0].height, bottom[0].width
        elif has("kernel_size"):
            self.kernel_h = self.kernel_w = c_int(pp.kernel_size)
        else:
            self.kernel_h, self.kernel_w = c_int(pp.kernel_h), c_int(pp.kernel_w)
        if not self.kernel_h > 0:
            raise self.error(_check_failed("kernel_h_ > 0", self.kernel_h, 0,
                                           "Filter dimensions cannot be zero."))
        if not self.kernel_w > 0:
            raise self.error(_check_failed("kernel_w_ > 0", self.kernel_w, 0,
                                           "Filter dimensions cannot be zero."))
        # Caffe holds these uint32 fields in ints: a pad of 2^31 and up is negative there, which
        # its loops (and engine.core.kernels.pooling) take as windows starting inside the image
        if not has("pad_h"):
            self.pad_h = self.pad_w = c_int(pp.pad)
        else:
            self.pad_h, self.pad_w = c_int(pp.pad_h), c_int(pp.pad_w)
        if not has("stride_h"):
            self.stride_h = self.stride_w = c_int(pp.stride)
        else:
            self.stride_h, self.stride_w = c_int(pp.stride_h), c_int(pp.stride_w)
        if self.global_pooling:
            if not (self.pad_h == 0 and self.pad_w == 0 and self.stride_h == 1 and self.stride_w == 1):
                raise self.error("Check failed: pad_h_ == 0 && pad_w_ == 0 && stride_h_ == 1 && "
                                 "stride_w_ == 1 With Global_pooling: true; only pad = 0 and stride = 1")
        if self.pad_h != 0 or self.pad_w != 0:
            if self.pool not in (PP.AVE, PP.MAX):
                raise self.error("Check failed: this->layer_param_.pooling_param().pool() == "
                                 "PoolingParameter_PoolMethod_AVE || this->layer_param_.pooling_param()"
                                 ".pool() == PoolingParameter_PoolMethod_MAX Padding implemented only "
                                 "for average and max pooling.")
            if not self.pad_h < self.kernel_h:
                raise self.error(_check_failed("pad_h_ < kernel_h_", self.pad_h, self.kernel_h))
            if not self.pad_w < self.kernel_w:
                raise self.error(_check_failed("pad_w_ < kernel_w_", self.pad_w, self.kernel_w))
        if self.stride_h <= 0 or self.stride_w <= 0:
            raise self.error("Pooling stride must be positive (stride_h %d, stride_w %d): Caffe "
                             "divides by it" % (self.stride_h, self.stride_w))

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error(_check_failed("4 == bottom[0]->num_axes()", 4, bottom[0].num_axes,
                                           "Input must have 4 axes, corresponding to (num, channels, "
                                           "height, width)"))
        N, C, H, W = bottom[0].shape
        if self.global_pooling:
            self.kernel_h, self.kernel_w = H, W
        PP = caffe_pb2.PoolingParameter
        rnd = np.float32
        if self.round_mode == PP.CEIL:
            ph = int(math.ceil(rnd(H + 2 * self.pad_h - self.kernel_h) / rnd(self.stride_h))) + 1
            pw = int(math.ceil(rnd(W + 2 * self.pad_w - self.kernel_w) / rnd(self.stride_w))) + 1
        elif self.round_mode == PP.FLOOR:
            ph = int(math.floor(rnd(H + 2 * self.pad_h - self.kernel_h) / rnd(self.stride_h))) + 1
            pw = int(math.floor(rnd(W + 2 * self.pad_w - self.kernel_w) / rnd(self.stride_w))) + 1
        else:
            raise self.error("Unknown rounding mode.")
        if self.pad_h or self.pad_w:
            if (ph - 1) * self.stride_h >= H + self.pad_h:
                ph -= 1
            if (pw - 1) * self.stride_w >= W + self.pad_w:
                pw -= 1
            if not (ph - 1) * self.stride_h < H + self.pad_h:
                raise self.error(_check_failed("(pooled_height_ - 1) * stride_h_ < height_ + pad_h_",
                                               (ph - 1) * self.stride_h, H + self.pad_h))
            if not (pw - 1) * self.stride_w < W + self.pad_w:
                raise self.error(_check_failed("(pooled_width_ - 1) * stride_w_ < width_ + pad_w_",
                                               (pw - 1) * self.stride_w, W + self.pad_w))
        self.pooled_height, self.pooled_width = ph, pw
        top[0].reshape(N, C, ph, pw)
        if len(top) > 1:
            top[1].reshape_like(top[0])
        if self.pool == PP.MAX and len(top) == 1:
            if self.max_idx is None:
                self.max_idx = Blob(dtype=np.int32)
            self.max_idx.reshape(N, C, ph, pw)
        if self.pool == PP.STOCHASTIC:
            if self.rand_idx is None:
                self.rand_idx = Blob(dtype=np.int64)
            self.rand_idx.reshape(N, C, ph, pw)
        self.geom = _pool.PoolGeom(N, C, H, W, self.kernel_h, self.kernel_w, self.stride_h,
                                   self.stride_w, self.pad_h, self.pad_w, ph, pw)

    def forward(self, bottom, top):
        PP = caffe_pb2.PoolingParameter
        g = self.geom
        x = bottom[0].get_data()
        y = top[0].mut_data()
        if g.N * g.C * g.PH * g.PW == 0:
            return
        if self.pool == PP.MAX:
            if len(top) > 1:
                mask = self.xp.empty(y.shape, dtype=np.int32)
                _pool.max_forward(x, g, y, mask)
                top[1].mut_data()[...] = mask
            else:
                _pool.max_forward(x, g, y, self.max_idx.mut_data())
        elif self.pool == PP.AVE:
            _pool.ave_forward(x, g, y)
        elif self.pool == PP.STOCHASTIC:
            if self.phase == caffe_pb2.TRAIN:
                rng.warn_unmatched(("Pooling", self.name), "Pooling layer '%s': STOCHASTIC in TRAIN "
                                   "(Caffe has it on the GPU only, drawing from cuRAND)" % self.name)
                u = _uniform(y.shape, self.dtype)
                _pool.sto_forward_train(x, g, u, y, self.rand_idx.mut_data())
            else:
                _pool.sto_forward_test(x, g, y)
        else:
            raise self.error("Unknown pooling method.")

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        PP = caffe_pb2.PoolingParameter
        g = self.geom
        dy = top[0].get_diff()
        dx = bottom[0].mut_diff()
        if g.N * g.C * g.PH * g.PW == 0:
            dx[...] = 0
            return
        if self.pool == PP.MAX:
            if len(top) > 1:
                mask = top[1].get_data().astype(np.int32)
            else:
                mask = self.max_idx.get_data()
            _pool.max_backward(dy, mask, g, dx)
        elif self.pool == PP.AVE:
            _pool.ave_backward(dy, g, dx)
        elif self.pool == PP.STOCHASTIC:
            _pool.sto_backward(dy, self.rand_idx.get_data(), g, dx)
        else:
            raise self.error("Unknown pooling method.")


def _uniform(shape, dtype):
    """Uniform [0, 1) numbers on the device of the current mode."""
    r = backend.random_module()
    if backend.mode() == backend.GPU:
        return r.random_sample(size=shape, dtype=dtype)
    return r.random(shape, dtype=dtype)


# ====================================================================== LRN
@register_layer
class LRNLayer(Layer):
    type = "LRN"
    category = "norm"
    summary = "Local response normalisation."
    param_fields = ("lrn_param",)
    def flops(self, bottoms, tops):
        lr, out = self.layer_param.lrn_param, top_count(tops)
        if lr.norm_region == caffe_pb2.LRNParameter.WITHIN_CHANNEL:
            taps = int(lr.local_size) ** 2
            return out * taps, out * (2 * taps + 3), True, "out × (2 × local_size² + 3)"
        taps = int(lr.local_size)
        return out * taps, out * (2 * taps + 3), True, "out × (2 × local_size + 3)"
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        lp = self.layer_param.lrn_param
        self.size = c_int(lp.local_size)        # Caffe's int size_: 4294967295 is -1
        odd = int(math.fmod(self.size, 2))      # C's %: -1 % 2 is -1
        if odd != 1:
            raise self.error(_check_failed("size_ % 2 == 1", odd, 1, "LRN only supports odd values for local_size"))
        self.pre_pad = (self.size - 1) // 2
        self.alpha, self.beta, self.k = lp.alpha, lp.beta, lp.k
        self.norm_region = lp.norm_region
        self.scale = Blob(dtype=self.dtype)
        # WITHIN_CHANNEL: Caffe's pool_output_ and power_output_ (the inner AVE pool's
        # and Power layer's tops), kept for Backward; shaped in Reshape, zeros until
        # the first forward.
        self.pool_output = Blob(dtype=self.dtype)
        self.power_output = Blob(dtype=self.dtype)

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error(_check_failed("4 == bottom[0]->num_axes()", 4, bottom[0].num_axes,
                                           "Input must have 4 axes, corresponding to (num, channels, "
                                           "height, width)"))
        top[0].reshape(bottom[0].shape)
        LP = caffe_pb2.LRNParameter
        if self.norm_region == LP.ACROSS_CHANNELS:
            self.scale.reshape(bottom[0].shape)
        elif self.norm_region == LP.WITHIN_CHANNEL:
            self.pool_output.reshape(bottom[0].shape)
            self.power_output.reshape(bottom[0].shape)
        N, C, H, W = bottom[0].shape
        s, p = self.size, self.pre_pad
        self.pool_geom = _pool.PoolGeom(N, C, H, W, s, s, 1, 1, p, p, H, W)

    def forward(self, bottom, top):
        LP = caffe_pb2.LRNParameter
        x = bottom[0].get_data()
        if self.norm_region == LP.ACROSS_CHANNELS:
            _lrn.across_forward(x, self.size, self.alpha, self.beta, self.k, top[0].mut_data(),
                                self.scale.mut_data())
        elif self.norm_region == LP.WITHIN_CHANNEL:
            self._within_forward(x, top[0].mut_data())
        else:
            raise self.error("Unknown normalization region.")

    def backward(self, top, propagate_down, bottom):
        LP = caffe_pb2.LRNParameter
        if self.norm_region == LP.ACROSS_CHANNELS:
            # Caffe's CrossChannelBackward ignores propagate_down.
            _lrn.across_backward(bottom[0].get_data(), top[0].get_data(), self.scale.get_data(),
                                 top[0].get_diff(), self.size, self.alpha, self.beta,
                                 bottom[0].mut_diff())
        elif self.norm_region == LP.WITHIN_CHANNEL:
            if propagate_down[0]:
                self._within_backward(top, bottom)
        else:
            raise self.error("Unknown normalization region.")

    # WITHIN_CHANNEL: Caffe's split -> power(2) -> AVE pool (pad (n-1)/2, kernel n,
    # stride 1) -> power(-beta, scale alpha, shift 1) -> eltwise product, computed directly.
    def _within_forward(self, x, y):
        xp = self.xp
        dt = self.dtype.type
        g = self.pool_geom
        sq = x * x
        pooled = self.pool_output.mut_data()
        if x.size:
            _pool.ave_forward(sq, g, pooled)
        base = pooled * dt(self.alpha)
        base += dt(1)
        power = self.power_output.mut_data()
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            xp.power(base, dt(-self.beta), out=power)
        xp.multiply(x, power, out=y)

    def _within_backward(self, top, bottom):
        xp = self.xp
        dt = self.dtype.type
        g = self.pool_geom
        pooled, power = self.pool_output.get_data(), self.power_output.get_data()
        x = bottom[0].get_data()
        dtop = top[0].get_diff()
        d_prod = power * dtop                     # product input (split top 0)
        d_power = x * dtop                        # power output
        denom = pooled * dt(self.alpha)
        denom += dt(1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            d_pooled = power / denom
        d_pooled *= dt(-self.beta) * dt(self.alpha)
        d_pooled *= d_power
        d_sq = xp.empty(x.shape, dtype=x.dtype)
        if x.size:
            _pool.ave_backward(d_pooled, g, d_sq)
        d_sq *= x * dt(2)
        dx = bottom[0].mut_diff()
        xp.add(d_prod, d_sq, out=dx)


# ====================================================================== SPP
@register_layer
class SPPLayer(Layer):
    type = "SPP"
    category = "pool"
    summary = "Spatial pyramid pooling."
    param_fields = ("spp_param",)
    def flops(self, bottoms, tops):
        n, c, h, w = (list(bottoms[0].shape) + [1, 1, 1, 1])[:4]
        total = 0
        for level in range(int(self.layer_param.spp_param.pyramid_height)):
            bins = 2 ** level
            kh, kw = -(-h // bins), -(-w // bins)
            total += n * c * bins * bins * kh * kw
        return 0, total, True, "Σ levels N × C × bins² × kh × kw"
    exact_num_bottom = 1
    exact_num_top = 1

    def _pooling_param(self, level, h, w):
        pb = caffe_pb2
        p = pb.LayerParameter()
        num_bins = 2 ** level
        kh = int(math.ceil(h / float(num_bins)))
        pad_h = (kh * num_bins - h + 1) // 2
        kw = int(math.ceil(w / float(num_bins)))
        pad_w = (kw * num_bins - w + 1) // 2
        pp = p.pooling_param
        pp.pad_h, pp.pad_w = pad_h, pad_w
        pp.kernel_h, pp.kernel_w = kh, kw
        pp.stride_h, pp.stride_w = kh, kw
        SP, PP = pb.SPPParameter, pb.PoolingParameter
        method = self.layer_param.spp_param.pool
        if method == SP.MAX:
            pp.pool = PP.MAX
        elif method == SP.AVE:
            pp.pool = PP.AVE
        elif method == SP.STOCHASTIC:
            pp.pool = PP.STOCHASTIC
        else:
            raise self.error("Unknown pooling method.")
        p.name = "%s_pool%d" % (self.name, level)
        return p

    def layer_setup(self, bottom, top):
        b = bottom[0]
        if not b.height > 0:
            raise self.error(_check_failed("bottom_h_ > 0", b.height, 0,
                                           "Input dimensions cannot be zero."))
        if not b.width > 0:
            raise self.error(_check_failed("bottom_w_ > 0", b.width, 0,
                                           "Input dimensions cannot be zero."))
        height = int(self.layer_param.spp_param.pyramid_height) & 0xFFFFFFFF   # a uint32 read into an int
        self.pyramid_height = height - (1 << 32) if height >= 1 << 31 else height
        if self.pyramid_height < 1:
            # Caffe builds a Concat layer over no bottoms, which rejects it.
            raise self.error("Concat Layer takes at least 1 bottom blob(s) as input. "
                             "(SPP pyramid_height must be at least 1, got %d)" % self.pyramid_height)
        self._shape = None
        self.pool_layers = []
        # made level by level as the pooling layers are set up: a pooling layer's own CHECK
        # (pad < kernel, at the latest once 2^level exceeds the input) stops a pyramid_height
        # of 2^31-1 before it asks for billions of blobs (Caffe allocates them first and dies)
        self.split_blobs, self.pool_outputs = [], []

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error(_check_failed("4 == bottom[0]->num_axes()", 4, bottom[0].num_axes,
                                           "Input must have 4 axes, corresponding to (num, channels, "
                                           "height, width)"))
        N, C, H, W = bottom[0].shape
        if self.pyramid_height == 1:
            if self._shape != bottom[0].shape:
                self.pool_layers = [PoolingLayer(self._pooling_param(0, H, W), dtype=self.dtype)]
                self.pool_layers[0].SetUp(bottom, top)
                self._shape = bottom[0].shape
            self.pool_layers[0].reshape(bottom, top)
            return
        for s in self.split_blobs:
            s.reshape_like(bottom[0])
            s.share_data(bottom[0])
        if self._shape != bottom[0].shape:
            self.pool_layers, self.split_blobs, self.pool_outputs = [], [], []
            for i in range(self.pyramid_height):
                split, out = Blob(dtype=self.dtype), Blob(dtype=self.dtype)
                split.reshape_like(bottom[0])
                split.share_data(bottom[0])
                layer = PoolingLayer(self._pooling_param(i, H, W), dtype=self.dtype)
                layer.SetUp([split], [out])
                self.split_blobs.append(split)
                self.pool_outputs.append(out)
                self.pool_layers.append(layer)
            self._shape = bottom[0].shape
        total = 0
        for i, layer in enumerate(self.pool_layers):
            layer.reshape([self.split_blobs[i]], [self.pool_outputs[i]])
            total += self.pool_outputs[i].count_range(1)
        top[0].reshape(N, total)

    def forward(self, bottom, top):
        if self.pyramid_height == 1:
            self.pool_layers[0].Forward(bottom, top)
            return
        y = top[0].mut_data()
        off = 0
        N = bottom[0].shape[0]
        for i, layer in enumerate(self.pool_layers):
            layer.Forward([self.split_blobs[i]], [self.pool_outputs[i]])
            d = self.pool_outputs[i].get_data().reshape(N, self.pool_outputs[i].count_range(1))
            y[:, off:off + d.shape[1]] = d
            off += d.shape[1]

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.pyramid_height == 1:
            self.pool_layers[0].Backward(top, propagate_down, bottom)
            return
        dy = top[0].get_diff()
        N = bottom[0].shape[0]
        off = 0
        for i, layer in enumerate(self.pool_layers):
            out = self.pool_outputs[i]
            k = out.count_range(1)
            out.mut_diff().reshape(N, k)[...] = dy[:, off:off + k]
            off += k
            layer.Backward([out], [True], [self.split_blobs[i]])
        dx = bottom[0].mut_diff()
        dx[...] = self.split_blobs[0].get_diff()
        for s in self.split_blobs[1:]:
            dx += s.get_diff()


# ====================================================================== crop
@register_layer
class CropLayer(Layer):
    type = "Crop"
    category = "structure"
    summary = "Crops a bottom to another's shape."
    param_fields = ("crop_param",)
    flops = no_flops
    exact_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        cp = self.layer_param.crop_param
        if len(bottom) != 2:
            raise self.error(_check_failed("bottom.size() == 2", len(bottom), 2,
                                           "Wrong number of bottom blobs."))
        input_dim = bottom[0].num_axes
        start_axis = bottom[0].canonical_axis(cp.axis)
        if not start_axis < input_dim:
            raise self.error(_check_failed("start_axis < input_dim", start_axis, input_dim,
                                           "crop axis bigger than input dim"))
        if len(cp.offset) > 1 and start_axis + len(cp.offset) != input_dim:
            raise self.error(_check_failed("start_axis + param.offset_size() == input_dim",
                                           start_axis + len(cp.offset), input_dim,
                                           "number of offset values specified must be equal to "
                                           "the number of dimensions following axis."))

    def reshape(self, bottom, top):
        cp = self.layer_param.crop_param
        input_dim = bottom[0].num_axes
        start_axis = bottom[0].canonical_axis(cp.axis)
        offsets = [0] * input_dim
        new_shape = list(bottom[0].shape)
        for i in range(input_dim):
            off = 0
            size = bottom[0].shape[i]
            if i >= start_axis:
                size = bottom[1].shape_at(i)
                if len(cp.offset) == 1:
                    off = cp.offset[0]
                elif len(cp.offset) > 1:
                    off = cp.offset[i - start_axis]
                if not bottom[0].shape[i] - off >= bottom[1].shape_at(i):
                    raise self.error(_check_failed(
                        "bottom[0]->shape(i) - crop_offset >= bottom[1]->shape(i)",
                        bottom[0].shape[i] - off, bottom[1].shape_at(i),
                        "the crop for dimension %d is out-of-bounds with size %d and offset %d"
                        % (i, bottom[1].shape_at(i), off)))
            new_shape[i] = size
            offsets[i] = int(off)
        self.offsets = offsets
        top[0].reshape(new_shape)
        self._slices = tuple(slice(o, o + s) for o, s in zip(offsets, new_shape))

    def forward(self, bottom, top):
        top[0].mut_data()[...] = bottom[0].get_data()[self._slices]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            dx = bottom[0].mut_diff()
            dx[...] = 0
            dx[self._slices] = top[0].get_diff()

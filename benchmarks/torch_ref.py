"""The peer: the engine's net rebuilt in PyTorch, for speed comparisons.

``TorchNet(net)`` reads an initialised engine ``Net`` (its layers in order,
their bottom/top blob names, params and shapes) and builds the same
computation with ``torch.nn.functional``; the weights are copied from the
engine (shared params stay shared: one ``torch.nn.Parameter`` per engine
data buffer).  ``check(...)`` runs both on the same inputs and compares every
blob, the input diffs and the param diffs before anything is timed.

Supported layer types: Input, Convolution (2-D; group, dilation, pad, stride),
InnerProduct, Pooling (MAX/AVE, Caffe's ceil rounding, global), LRN (across
and within channels), ReLU (leaky too), Dropout (TEST), Concat, Slice, Eltwise
(SUM with coefficients, PROD, MAX), BatchNorm (global or batch statistics),
Scale (with bias, learned or second bottom), Softmax, SoftmaxWithLoss,
ContrastiveLoss (Caffe's gradient), Accuracy, Reduction, Split, Flatten,
Reshape.

fp32, the caller's device; use :func:`configure_torch` to set the thread count
and to turn TF32 off on the GPU.
"""
import numpy as np
import torch
import torch.nn.functional as F

from engine.proto import caffe_pb2

PP = caffe_pb2.PoolingParameter
EP = caffe_pb2.EltwiseParameter
LRNP = caffe_pb2.LRNParameter
RP = caffe_pb2.ReductionParameter


def configure_torch(threads=None, device="cpu"):
    """Same thread count as the engine's BLAS; no TF32 on the GPU."""
    if threads:
        torch.set_num_threads(int(threads))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if device != "cpu":
        torch.backends.cudnn.benchmark = False


class Unsupported(NotImplementedError):
    pass


class _ContrastiveLoss(torch.autograd.Function):
    """Caffe's ContrastiveLoss (non-legacy), with Caffe's gradient (dist + 1e-4)."""

    @staticmethod
    def forward(ctx, a, b, sim, margin):
        diff = a - b
        dist_sq = (diff * diff).sum(dim=1)
        dist = torch.sqrt(dist_sq)
        m = torch.clamp(margin - dist, min=0)
        loss = torch.where(sim, dist_sq, m * m).sum() / a.shape[0] / 2
        ctx.save_for_backward(diff, dist, sim)
        ctx.margin = margin
        return loss

    @staticmethod
    def backward(ctx, g):
        diff, dist, sim = ctx.saved_tensors
        n = diff.shape[0]
        alpha = g / n
        mdist = ctx.margin - dist
        beta = -alpha * mdist / (dist + 1e-4)
        coef = torch.where(sim, alpha.expand_as(dist),
                           torch.where(mdist > 0, beta, torch.zeros_like(beta)))
        ga = coef[:, None] * diff
        return ga, -ga, None, None


class TorchNet:
    """The engine net ``net`` as a sequence of PyTorch ops on ``device``."""

    def __init__(self, net, device="cpu", dtype=torch.float32, engine_relu_masks=False):
        """``engine_relu_masks``: every ReLU (slope 0) passes where the engine's forward
        left its top positive (read from ``net``'s blobs now), not where this net's own input
        is: a float64 reference that takes the engine's side of the ties, where a value within
        float32 rounding of 0 decides a mask (see :func:`compare`)."""
        self.net = net
        self.engine_relu_masks = engine_relu_masks
        self.device = torch.device(device)
        self.dtype = dtype
        self.ops = []
        self.params = []           # unique torch Parameters
        self._param_of = {}        # id(engine SyncedMemory) -> Parameter
        self.layer_params = []     # per layer: list of Parameters (shared ones repeated)
        self.inputs = [net._blob_names[i] for i in net._inputs]
        self.loss_tops = []        # (blob name, loss weight)
        names = net._blob_names
        for i, layer in enumerate(net.layers):
            bottoms = [names[b] for b in net._bottom_id_vecs[i]]
            tops = [names[t] for t in net._top_id_vecs[i]]
            ps = [self._param(blob) for blob in layer.blobs]
            self.layer_params.append(ps)
            fn = self._build(layer, bottoms, tops, ps, i)
            if fn is not None:
                self.ops.append((layer.name, fn))
            for k, t in enumerate(tops):
                w = layer.loss(k)
                if w:
                    self.loss_tops.append((t, float(w)))

    # ------------------------------------------------------------ params
    def _param(self, blob):
        key = id(blob.data_memory)
        p = self._param_of.get(key)
        if p is None:
            p = torch.nn.Parameter(torch.tensor(np.array(blob.data), dtype=self.dtype, device=self.device))
            self._param_of[key] = p
            self.params.append(p)
        return p

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    # ------------------------------------------------------------ layers
    def _build(self, layer, bottoms, tops, ps, index):
        t = layer.type
        lp = layer.layer_param
        net = self.net
        top_shapes = [tuple(net._blobs[b].shape) for b in net._top_id_vecs[index]]
        if t == "Input":
            return None
        if t == "Convolution":
            if layer.num_spatial_axes != 2 or layer.channel_axis != 1:
                raise Unsupported("Convolution: only 2-D, channel axis 1")
            w, b = ps[0], (ps[1] if layer.bias_term else None)
            stride, pad, dil, g = tuple(layer.stride), tuple(layer.pad), tuple(layer.dilation), layer.group

            def conv(env):
                for bn, tn in zip(bottoms, tops):
                    env[tn] = F.conv2d(env[bn], w, b, stride, pad, dil, g)
            return conv
        if t == "InnerProduct":
            p = lp.inner_product_param
            w = ps[0]
            b = ps[1] if p.bias_term else None
            transpose = p.transpose
            M, K = layer.M, layer.K
            shape = top_shapes[0]

            def ip(env):
                x = env[bottoms[0]].reshape(M, K)
                y = x @ w if transpose else F.linear(x, w, b)
                if transpose and b is not None:
                    y = y + b
                env[tops[0]] = y.reshape(shape)
            return ip
        if t == "Pooling":
            return self._pooling(layer, bottoms, tops, top_shapes)
        if t == "LRN":
            p = lp.lrn_param
            size, alpha, beta, k = int(p.local_size), float(p.alpha), float(p.beta), float(p.k)
            if p.norm_region == LRNP.ACROSS_CHANNELS:
                def lrn(env):
                    env[tops[0]] = F.local_response_norm(env[bottoms[0]], size, alpha, beta, k)
                return lrn
            pre = (size - 1) // 2

            def lrn_within(env):
                x = env[bottoms[0]]
                avg = F.avg_pool2d(x * x, size, 1, pre, count_include_pad=True)
                env[tops[0]] = x * (1 + alpha * avg).pow(-beta)
            return lrn_within
        if t == "ReLU":
            slope = float(lp.relu_param.negative_slope)
            inplace = bottoms[0] == tops[0]
            if self.engine_relu_masks and not slope:
                mask = torch.tensor(np.asarray(net._blobs[net._top_id_vecs[index][0]].data) > 0,
                                    device=self.device).to(self.dtype)

                def relu_masked(env):
                    env[tops[0]] = env[bottoms[0]] * mask
                return relu_masked

            def relu(env):
                x = env[bottoms[0]]
                env[tops[0]] = F.leaky_relu(x, slope, inplace) if slope else F.relu(x, inplace)
            return relu
        if t == "Dropout":
            if layer.phase == caffe_pb2.TRAIN:
                raise Unsupported("Dropout in TRAIN (random masks differ)")
            scale_train = getattr(layer, "scale_train", True)
            ratio = float(lp.dropout_param.dropout_ratio)

            def dropout(env):
                x = env[bottoms[0]]
                env[tops[0]] = x if scale_train else x * (1 - ratio)
            return dropout
        if t == "Concat":
            axis = layer.axis

            def concat(env):
                env[tops[0]] = torch.cat([env[b] for b in bottoms], dim=axis)
            return concat
        if t == "Slice":
            axis, sizes = layer.axis, list(layer.sizes)

            def slice_(env):
                for tn, part in zip(tops, torch.split(env[bottoms[0]], sizes, dim=axis)):
                    env[tn] = part
            return slice_
        if t == "Split":
            def split(env):
                x = env[bottoms[0]]
                for tn in tops:
                    env[tn] = x
            return split
        if t in ("Flatten", "Reshape"):
            shape = top_shapes[0]

            def reshape(env):
                env[tops[0]] = env[bottoms[0]].reshape(shape)
            return reshape
        if t == "Eltwise":
            op = layer.op
            coeffs = [float(c) for c in layer.coeffs]

            def eltwise(env):
                xs = [env[b] for b in bottoms]
                if op == EP.SUM:
                    y = xs[0] if coeffs[0] == 1 else coeffs[0] * xs[0]
                    for c, x in zip(coeffs[1:], xs[1:]):
                        y = y + x if c == 1 else y + c * x
                elif op == EP.PROD:
                    y = xs[0]
                    for x in xs[1:]:
                        y = y * x
                else:
                    y = xs[0]
                    for x in xs[1:]:
                        y = torch.maximum(y, x)
                env[tops[0]] = y
            return eltwise
        if t == "BatchNorm":
            eps = float(layer.eps)
            C = layer.channels
            if layer.use_global_stats:
                sf = float(layer.blobs[2].data.reshape(-1)[0])
                s = 0.0 if sf == 0 else 1.0 / sf
                mean = torch.tensor(layer.blobs[0].data * np.float32(s), dtype=self.dtype, device=self.device)
                var = torch.tensor(layer.blobs[1].data * np.float32(s), dtype=self.dtype, device=self.device)

                def bn(env):
                    x = env[bottoms[0]]
                    y = F.batch_norm(x.reshape(x.shape[0], C, -1), mean, var, None, None, False, 0.0, eps)
                    env[tops[0]] = y.reshape(x.shape)
                return bn

            def bn_batch(env):
                x = env[bottoms[0]]
                y = F.batch_norm(x.reshape(x.shape[0], C, -1), None, None, None, None, True, 0.0, eps)
                env[tops[0]] = y.reshape(x.shape)
            return bn_batch
        if t == "Scale":
            axis = layer.axis
            nax = (net._blobs[net._bottom_id_vecs[index][1]].num_axes if len(bottoms) > 1
                   else layer.blobs[0].num_axes)
            bias = None
            if layer.bias_layer is not None:
                bias = ps[layer.bias_param_id]

            def scale(env):
                x = env[bottoms[0]]
                s = env[bottoms[1]] if len(bottoms) > 1 else ps[0]
                shape = (1,) * axis + tuple(x.shape[axis:axis + nax]) + (1,) * (x.dim() - axis - nax)
                y = x * s.reshape(shape)
                if bias is not None:
                    y = y + bias.reshape(shape)
                env[tops[0]] = y
            return scale
        if t == "Softmax":
            axis = layer.axis

            def softmax(env):
                env[tops[0]] = F.softmax(env[bottoms[0]], dim=axis)
            return softmax
        if t == "SoftmaxWithLoss":
            axis = layer.axis
            ignore = int(layer.ignore_label) if layer.has_ignore_label else -100
            if layer.normalization not in (caffe_pb2.LossParameter.VALID, caffe_pb2.LossParameter.FULL,
                                           caffe_pb2.LossParameter.BATCH_SIZE):
                raise Unsupported("SoftmaxWithLoss normalization NONE")
            norm_batch = layer.normalization == caffe_pb2.LossParameter.BATCH_SIZE

            def swl(env):
                x = env[bottoms[0]]
                lab = env[bottoms[1]].long()
                C = x.shape[axis]
                logits = x.movedim(axis, -1).reshape(-1, C)
                if norm_batch:
                    loss = F.cross_entropy(logits, lab.reshape(-1), ignore_index=ignore,
                                           reduction="sum") / layer.outer_num
                else:
                    loss = F.cross_entropy(logits, lab.reshape(-1), ignore_index=ignore)
                env[tops[0]] = loss
                if len(tops) > 1:
                    env[tops[1]] = F.softmax(x, dim=axis)
            return swl
        if t == "ContrastiveLoss":
            p = lp.contrastive_loss_param
            if p.legacy_version:
                raise Unsupported("ContrastiveLoss legacy_version")
            margin = float(p.margin)

            def contrastive(env):
                a, b = env[bottoms[0]], env[bottoms[1]]
                n = a.shape[0]
                sim = env[bottoms[2]].reshape(-1)[:n].long() != 0
                env[tops[0]] = _ContrastiveLoss.apply(a.reshape(n, -1), b.reshape(n, -1), sim, margin)
            return contrastive
        if t == "Accuracy":
            def accuracy(env):
                with torch.no_grad():
                    x = env[bottoms[0]]
                    lab = env[bottoms[1]].reshape(-1).long()
                    pred = x.reshape(lab.shape[0], -1).argmax(dim=1)
                    env[tops[0]] = (pred == lab).float().mean()
            return accuracy
        if t == "Reduction":
            axis, op, coeff = layer.axis, layer.op, float(lp.reduction_param.coeff)

            def reduction(env):
                x = env[bottoms[0]]
                x = x.reshape(tuple(x.shape[:axis]) + (-1,))
                if op == RP.ASUM:
                    y = x.abs().sum(-1)
                elif op == RP.SUMSQ:
                    y = (x * x).sum(-1)
                elif op == RP.MEAN:
                    y = x.mean(-1)
                else:
                    y = x.sum(-1)
                env[tops[0]] = y * coeff
            return reduction
        raise Unsupported("layer type %s" % t)

    def _pooling(self, layer, bottoms, tops, top_shapes):
        g = layer.geom
        pool = layer.pool
        if pool not in (PP.MAX, PP.AVE):
            raise Unsupported("STOCHASTIC pooling")
        k, s, p = (g.kh, g.kw), (g.sh, g.sw), (g.ph, g.pw)
        # Caffe's ceil rounding (clipped when the last window would start in the padding).
        torch_ph = -(-(g.H + 2 * g.ph - g.kh) // g.sh) + 1
        torch_pw = -(-(g.W + 2 * g.pw - g.kw) // g.sw) + 1
        if (torch_ph - 1) * g.sh >= g.H + g.ph:
            torch_ph -= 1
        if (torch_pw - 1) * g.sw >= g.W + g.pw:
            torch_pw -= 1
        native = (torch_ph, torch_pw) == (g.PH, g.PW) and 2 * g.ph <= g.kh and 2 * g.pw <= g.kw
        if pool == PP.MAX:
            if native:
                def maxpool(env):
                    env[tops[0]] = F.max_pool2d(env[bottoms[0]], k, s, p, ceil_mode=True)
            else:
                eh = max(0, (g.PH - 1) * g.sh + g.kh - g.H - 2 * g.ph)
                ew = max(0, (g.PW - 1) * g.sw + g.kw - g.W - 2 * g.pw)

                def maxpool(env):
                    x = F.pad(env[bottoms[0]], (g.pw, g.pw + ew, g.ph, g.ph + eh), value=float("-inf"))
                    env[tops[0]] = F.max_pool2d(x, k, s)[:, :, :g.PH, :g.PW]
            fn = maxpool
        else:
            if not native:
                raise Unsupported("AVE pooling with shapes PyTorch cannot reproduce")

            def avepool(env):
                env[tops[0]] = F.avg_pool2d(env[bottoms[0]], k, s, p, ceil_mode=True,
                                            count_include_pad=True)
            fn = avepool
        if len(tops) > 1:
            raise Unsupported("Pooling mask top")
        return fn

    # ------------------------------------------------------------ running
    def feed(self, arrays):
        """Input tensors from NumPy arrays {blob name: array}."""
        return {n: torch.tensor(np.asarray(a), dtype=self.dtype, device=self.device) for n, a in arrays.items()}

    def forward(self, inputs, requires_grad_inputs=()):
        env = dict(inputs)
        for n in requires_grad_inputs:
            env[n] = env[n].detach().requires_grad_(True)
        self.leaves = {n: env[n] for n in requires_grad_inputs}
        for _, fn in self.ops:
            fn(env)
        return env

    def loss(self, env):
        total = None
        for name, w in self.loss_tops:
            v = env[name] * w if w != 1 else env[name]
            total = v if total is None else total + v
        return total

    def backward(self, env, out_grads=None):
        """Backward from the weighted losses, or from ``out_grads`` {blob: tensor}."""
        if out_grads:
            names = list(out_grads)
            torch.autograd.backward([env[n] for n in names], [out_grads[n] for n in names])
        else:
            self.loss(env).backward()

    def param_grads(self):
        """Per engine layer: list of grads (None where none)."""
        return [[None if p.grad is None else p.grad for p in ps] for ps in self.layer_params]


def _rel_err(a, b):
    """max |a - b| / max |b| (0 for empty arrays, inf for a shape mismatch)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    scale = max(float(np.max(np.abs(b))), 1e-30)
    return float(np.max(np.abs(a - b))) / scale


def _arrays(net, tnet, env, input_diffs):
    """{what: (engine array, torch array)} of every blob's data, the input diffs
    and the learned params' diffs."""
    out = {}
    for name in net.blob_names:
        if name in env and torch.is_tensor(env[name]):
            out["data " + name] = (net.blobs[name].data,
                                   env[name].detach().cpu().double().numpy().reshape(net.blobs[name].shape))
    for n in input_diffs:
        leaf = tnet.leaves.get(n)
        if leaf is not None and leaf.grad is not None:
            out["diff " + n] = (net.blobs[n].diff, leaf.grad.cpu().double().numpy())
    for i, layer in enumerate(net.layers):
        if not net.layer_need_backward[i]:
            continue
        for j, blob in enumerate(layer.blobs):
            p = tnet.layer_params[i][j]
            if layer.get_param_propagate_down(j) and p.grad is not None:
                out["param diff %s/%d" % (layer.name, j)] = (blob.diff, p.grad.cpu().double().numpy())
    return out


def compare(net, tnet, env, input_diffs=(), rtol=1e-4, grad_rtol=1e-3, ref=None, ill=1e-2, ref_masked=None):
    """The engine ``net`` (after a forward and backward) against the torch run
    ``tnet``/``env``: every blob's data, the given input diffs and the learned
    params' diffs.  The error of an array is max |engine - torch| / max |torch|.

    An array passes when its error is within ``rtol`` (data) / ``grad_rtol``
    (diffs), or, when ``ref`` = (tnet64, env64), a float64 PyTorch run of the
    same net, is given: when the engine is no further from the float64 result
    than twice PyTorch's own float32 error (plus 1e-6), or than ``ref_floor``
    (1e-3 for data, 1e-2 for diffs) -- deep nets and gradients that cancel (a
    bias before batch-statistics BatchNorm, a bias gradient summed over
    thousands of terms of both signs) amplify float32 rounding in both, and
    the summation order (BLAS threads) decides how much; a net built wrong is
    off by O(1).  Where PyTorch's own float32 error exceeds
    ``ill`` (1e-2) the array is ill-conditioned in float32 (e.g. the gradients
    of the last stage of a ResNet at batch 1: the global average pool sends a
    spatially constant gradient that batch-statistics BatchNorm cancels) and
    cannot tell the two apart: it is listed in ``ill_conditioned``, not failed.
    ``ref_masked`` = (tnet64, env64) built with ``engine_relu_masks``: an array that fails
    the float64 judge passes when the engine is as close to this reference (the float64
    net on the engine's side of every ReLU tie) -- a value within float32 rounding of 0
    flips a mask, and a gradient summed over few pixels (a bias at 7x7, batch 1) moves by
    percents; it is listed in ``ill_conditioned`` as "<what> (ReLU ties)".

    Returns (failures [(what, error, torch32 error or None)], worst (what, error),
    ill_conditioned [(what, engine error, torch32 error)]).
    """
    cur = _arrays(net, tnet, env, input_diffs)
    r64 = _arrays(net, ref[0], ref[1], input_diffs) if ref is not None else {}
    r64m = _arrays(net, ref_masked[0], ref_masked[1], input_diffs) if ref_masked is not None else {}
    fails, worst, ill_list = [], ("", 0.0), []
    for what, (a, b) in cur.items():
        e = _rel_err(a, b)
        tol = grad_rtol if not what.startswith("data") else rtol
        if e > worst[1]:
            worst = (what, e)
        if e <= tol:
            continue
        if what in r64:
            truth = r64[what][1]
            e_engine = _rel_err(a, truth)
            e_torch = _rel_err(b, truth)
            floor = 1e-2 if not what.startswith("data") else 1e-3
            if e_engine <= max(2 * e_torch + 1e-6, floor):
                continue
            if what in r64m:
                e_masked = _rel_err(a, r64m[what][1])
                if e_masked <= max(2 * e_torch + 1e-6, floor):
                    ill_list.append((what + " (ReLU ties)", e_engine, e_torch))
                    continue
            if e_torch > ill:
                ill_list.append((what, e_engine, e_torch))
                continue
            fails.append((what, e_engine, e_torch))
        else:
            fails.append((what, e, None))
    return fails, worst, ill_list

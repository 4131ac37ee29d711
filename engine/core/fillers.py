"""Caffe's fillers: constant, uniform, gaussian (with sparse), positive_unitball,
xavier, msra, bilinear.  Random numbers come from the engine's generator
(``engine.set_random_seed``); they follow Caffe's distributions, not its
exact stream (Caffe uses boost's mt19937)."""
import math

import numpy as np

from engine.core import backend
from engine.core.errors import LayerError
from engine.proto import caffe_pb2


def _fans(blob):
    count = blob.count
    fan_in = count // blob.shape[0] if blob.num_axes >= 1 and blob.shape[0] else count
    fan_out = count // blob.shape[1] if blob.num_axes > 1 and blob.shape[1] else count
    return fan_in, fan_out


def _norm_n(param, blob):
    fan_in, fan_out = _fans(blob)
    vn = param.variance_norm
    FP = caffe_pb2.FillerParameter
    if vn == FP.AVERAGE:
        return (fan_in + fan_out) / 2.0
    if vn == FP.FAN_OUT:
        return float(fan_out)
    return float(fan_in)


def fill(blob, param):
    """Fill ``blob``'s data as the FillerParameter ``param`` says."""
    rng = backend.rng()
    shape = blob.shape
    n = blob.count
    t = param.type
    if n == 0 and t in ("uniform", "gaussian", "xavier", "msra"):
        raise LayerError("Check failed: blob->count() (the %s filler got a blob of shape %s)"
                         % (t, blob.shape_string()))
    if t == "constant":
        v = np.full(n, param.value)
    elif t == "uniform":
        if not param.min <= param.max:   # caffe_rng_uniform's CHECK_LE(a, b)
            raise LayerError("Check failed: a <= b (%s vs. %s) (uniform filler min and max)"
                             % (_g(param.min), _g(param.max)))
        if not np.isfinite(float(param.max) - float(param.min)):
            raise LayerError("uniform filler: the range [%s, %s] is not finite"
                             % (_g(param.min), _g(param.max)))
        v = rng.uniform(param.min, param.max, n)
    elif t == "gaussian":
        if not param.std > 0:   # caffe_rng_gaussian's CHECK_GT(sigma, 0)
            raise LayerError("Check failed: sigma > 0 (%s vs. 0) (gaussian filler std)" % _g(param.std))
        v = rng.normal(param.mean, param.std, n)
        if param.sparse >= 0:
            if blob.num_axes < 1:
                raise LayerError("gaussian filler with sparse needs a blob with at least one axis")
            num_outputs = shape[0]
            p = param.sparse / float(num_outputs)
            v = v * (rng.random(n) < p)
    elif t == "positive_unitball":
        v = rng.uniform(0.0, 1.0, n)
        num = shape[0] if shape else 1
        dim = n // num if num else 0
        if dim:
            v = v.reshape(num, dim)
            v = (v / v.sum(axis=1, keepdims=True)).reshape(-1)
    elif t == "xavier":
        _no_sparse(param, t)
        scale = math.sqrt(3.0 / _norm_n(param, blob))
        v = rng.uniform(-scale, scale, n)
    elif t == "msra":
        _no_sparse(param, t)
        std = math.sqrt(2.0 / _norm_n(param, blob))
        v = rng.normal(0.0, std, n)
    elif t == "bilinear":
        if blob.num_axes != 4:
            raise LayerError("Blob must be 4 dim.")
        if shape[-1] != shape[-2]:
            raise LayerError("Filter must be square")
        _no_sparse(param, t)
        width = shape[3]
        f = math.ceil(width / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        i = np.arange(n)
        x = i % width
        y = (i // width) % shape[2]
        v = (1 - np.abs(x / f - c)) * (1 - np.abs(y / f - c))
    else:
        raise LayerError("Unknown filler name: %s" % t)
    blob.data[...] = v.reshape(shape).astype(blob.dtype)


def _g(x):
    from engine.core.log import num
    return num(x)


def _no_sparse(param, t):
    if param.sparse != -1:
        raise LayerError("Sparsity not supported by this Filler (%s)." % t)

"""Caffe's fillers: constant, uniform, gaussian (with sparse), positive_unitball,
xavier, msra, bilinear.  Random fillers draw from Caffe's stream
(``engine.core.rng``: boost's mt19937 and distributions, seeded by
``engine.set_random_seed``) in the blob's dtype, value for value as Caffe's
filler.hpp draws them; bilinear and constant draw nothing."""
import math

import numpy as np

from engine.core import rng
from engine.core.errors import LayerError
from engine.proto import caffe_pb2

_RANDOM = ("uniform", "gaussian", "xavier", "msra")


def _fans(blob):
    count = blob.count
    fan_in = count // blob.shape[0] if blob.num_axes >= 1 and blob.shape[0] else count
    fan_out = count // blob.shape[1] if blob.num_axes > 1 and blob.shape[1] else count
    return fan_in, fan_out


def _norm_n(param, blob, t):
    """The ``n`` of Xavier/MSRA in Dtype: fan_in, fan_out or ``(fan_in + fan_out) / Dtype(2)``."""
    fan_in, fan_out = _fans(blob)
    vn = param.variance_norm
    FP = caffe_pb2.FillerParameter
    if vn == FP.AVERAGE:
        return t(fan_in + fan_out) / t(2)
    if vn == FP.FAN_OUT:
        return t(fan_out)
    return t(fan_in)


def _dtype(blob):
    dt = np.dtype(blob.dtype)
    return dt.type if dt in (np.float32, np.float64) else np.float32


def fill(blob, param):
    """Fill ``blob``'s data as the FillerParameter ``param`` says."""
    t = _dtype(blob)
    n = blob.count
    kind = param.type
    if n == 0 and kind in _RANDOM:
        if kind in ("gaussian", "positive_unitball", "bilinear"):
            blob.mut_data(gpu=False)    # Caffe asks for the data before CHECK(count): CHECK(data_) first
        raise LayerError("Check failed: blob->count() (the %s filler got a blob of shape %s)"
                         % (kind, blob.shape_string()))
    # Plain draws go straight into the blob's host memory (no temporary of its size).
    data = blob.data
    out = data.reshape(-1) if data.dtype == t and data.flags.c_contiguous else None
    try:
        v = _values(kind, param, blob, t, out)
    except ValueError as e:      # a CHECK of caffe_rng_* (e.g. sparse > num_output)
        raise LayerError("%s(%s filler of a blob of shape %s)"
                         % (e, kind, blob.shape_string())) from None
    if v is not out:
        data[...] = v.reshape(blob.shape).astype(blob.dtype, copy=False)


def _values(kind, param, blob, t, out=None):
    n = blob.count
    if kind == "constant":
        _no_sparse(param, kind)
        return np.full(n, t(param.value), t)
    if kind == "uniform":
        return _uniform(param, n, t, out)
    if kind == "gaussian":
        return _gaussian(param, blob, t, out)
    if kind == "positive_unitball":
        return _positive_unitball(param, blob, t)
    if kind == "xavier":
        _no_sparse(param, kind)
        scale = np.sqrt(t(3) / _norm_n(param, blob, t))
        return rng.caffe_rng_uniform(n, -scale, scale, t, out)
    if kind == "msra":
        _no_sparse(param, kind)
        std = np.sqrt(t(2) / _norm_n(param, blob, t))
        return rng.caffe_rng_gaussian(n, t(0), std, t, out)
    if kind == "bilinear":
        return _bilinear(param, blob, t)
    raise LayerError("Unknown filler name: %s" % kind)


def _uniform(param, n, t, out=None):
    lo, hi = t(param.min), t(param.max)
    if not lo <= hi:   # caffe_rng_uniform's CHECK_LE(a, b)
        raise LayerError("Check failed: a <= b (%s vs. %s) (uniform filler min and max)"
                         % (_g(param.min), _g(param.max)))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise LayerError("uniform filler: the range [%s, %s] is not finite"
                         % (_g(param.min), _g(param.max)))
    _no_sparse(param, "uniform")
    return rng.caffe_rng_uniform(n, lo, hi, t, out)


def _gaussian(param, blob, t, out=None):
    if not param.std > 0:   # caffe_rng_gaussian's CHECK_GT(sigma, 0)
        raise LayerError("Check failed: sigma > 0 (%s vs. 0) (gaussian filler std)" % _g(param.std))
    v = rng.caffe_rng_gaussian(blob.count, t(param.mean), t(param.std), t, out)
    sparse = int(param.sparse)
    if sparse < -1:
        raise LayerError("Check failed: sparse >= -1 (%d vs. -1) " % sparse)
    if sparse >= 0:
        if blob.num_axes < 1:
            raise LayerError("gaussian filler with sparse needs a blob with at least one axis")
        # Each weight is kept with probability sparse / num_outputs (a Bernoulli in Dtype).
        keep = rng.caffe_rng_bernoulli(blob.count, t(sparse) / t(blob.shape[0]), t)
        v *= keep.astype(t)
    return v


def _positive_unitball(param, blob, t):
    n = blob.count
    v = rng.caffe_rng_uniform(n, 0, 1, t)
    num = blob.shape[0] if blob.num_axes else 1
    dim = n // num if num else 0
    if dim:
        rows = v.reshape(num, dim)
        sums = np.cumsum(rows, axis=1, dtype=t)[:, -1:]   # Caffe adds each row in order
        v = (rows / sums).reshape(-1)
    _no_sparse(param, "positive_unitball")
    return v


def _bilinear(param, blob, t):
    if blob.num_axes != 4:
        raise LayerError("Blob must be 4 dim.")
    shape = blob.shape
    if shape[-1] != shape[-2]:
        raise LayerError("Filter must be square")
    _no_sparse(param, "bilinear")
    width = shape[3]
    f = math.ceil(width / 2.0)
    c = t((width - 1) / (2.0 * f))
    i = np.arange(blob.count)
    x = (i % width).astype(t)
    y = ((i // width) % shape[2]).astype(t)
    one, tf = t(1), t(f)
    return (one - np.abs(x / tf - c)) * (one - np.abs(y / tf - c))


def _g(x):
    from engine.core.log import num
    return num(x)


def _no_sparse(param, t):
    if param.sparse != -1:
        raise LayerError("Sparsity not supported by this Filler (%s)." % t)

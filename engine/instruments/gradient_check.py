"""Caffe's numeric gradient checker (test/test_gradient_check_util.hpp), in Python.

Central differences with ``stepsize`` (1e-2 in Caffe's tests) against the
layer's Backward; a mismatch beyond ``threshold * max(|computed|, |estimated|, 1)``
fails, except at inputs within ``kink_range`` of ``kink`` (non-differentiable
points).  Works in either mode: values are read and written through the host
views, so the layer runs on whatever device the current mode selects.
"""
import numpy as np

from engine.core import backend


class GradientCheckError(AssertionError):
    pass


class GradientChecker:
    def __init__(self, stepsize, threshold, seed=1701, kink=0.0, kink_range=-1.0):
        self.stepsize, self.threshold, self.seed = stepsize, threshold, seed
        self.kink, self.kink_range = kink, kink_range

    # Objective: half the sum of squares of every top (top_id < 0), or
    # twice one top element.
    @staticmethod
    def _objective(top, top_id, top_data_id):
        if top_id < 0:
            loss = 0.0
            for t in top:
                d = t.data
                loss += float(np.dot(d.reshape(-1).astype(np.float64), d.reshape(-1).astype(np.float64)))
                t.diff[...] = d
            return loss / 2.0
        for t in top:
            t.diff[...] = 0
        w = 2.0
        flat = top[top_id].data.reshape(-1)
        loss = float(flat[top_data_id]) * w
        top[top_id].diff.reshape(-1)[top_data_id] = w
        return loss

    def _perturbed(self, layer, bottom, top, blob, k, value, top_id, top_data_id, cache):
        """The objective after a Forward with element ``k`` of ``blob`` set to ``value``.

        With ``cache`` (the exhaustive modes), each perturbed Forward runs once: its tops are
        kept, and every later (top_id, top_data_id) reads its objective from them.  A Forward
        is a function of the bottoms, the params and the seed (reset before each), so the
        numbers are the ones a fresh Forward gives; the checks are Caffe's, in
        params x 2 Forwards instead of params x tops x 2."""
        key = (id(blob), k, value)
        tops = None if cache is None or top_id < 0 else cache.get(key)
        if tops is None:
            blob.data.reshape(-1)[k] = value
            backend.set_random_seed(self.seed)
            layer.Forward(bottom, top)
            if cache is not None and top_id >= 0:
                tops = cache[key] = [t.data.copy() for t in top]
            else:
                return self._objective(top, top_id, top_data_id)
        flat = tops[top_id].reshape(-1)
        if top_data_id >= flat.size:             # a top that shrank (Filter): no cached answer
            del cache[key]
            return self._perturbed(layer, bottom, top, blob, k, value, top_id, top_data_id, None)
        return float(flat[top_data_id]) * 2.0    # _objective's twice one top element

    def check_single(self, layer, bottom, top, check_bottom, top_id, top_data_id, element_wise=False,
                     cache=None):
        blobs, prop = [], [False] * len(bottom)
        if element_wise:
            assert not layer.blobs, "element-wise check on a layer with params"
            assert top_id >= 0 and top_data_id >= 0
            for b in bottom:
                assert b.count == top[top_id].count
        for p in layer.blobs:
            p.diff[...] = 0
            blobs.append(("param", p))
        if check_bottom == -1:
            prop = [True] * len(bottom)
            blobs += [("bottom %d" % i, b) for i, b in enumerate(bottom)]
        elif check_bottom >= 0:
            prop[check_bottom] = True
            blobs.append(("bottom %d" % check_bottom, bottom[check_bottom]))
        assert blobs, "No blobs to check."
        backend.set_random_seed(self.seed)
        layer.Forward(bottom, top)
        self._objective(top, top_id, top_data_id)
        layer.Backward(top, prop, bottom)
        computed = [b.diff.reshape(-1).astype(np.float64).copy() for _, b in blobs]
        failures = []
        for (what, blob), comp in zip(blobs, computed):
            flat = blob.data.reshape(-1)
            for k in range(blob.count):
                est = 0.0
                if not element_wise or k == top_data_id:
                    orig = flat[k]
                    pos = self._perturbed(layer, bottom, top, blob, k, orig + self.stepsize,
                                          top_id, top_data_id, cache)
                    neg = self._perturbed(layer, bottom, top, blob, k, orig - self.stepsize,
                                          top_id, top_data_id, cache)
                    blob.data.reshape(-1)[k] = orig
                    est = (pos - neg) / self.stepsize / 2.0
                    flat = blob.data.reshape(-1)
                c = comp[k]
                feature = abs(float(flat[k]))
                if self.kink - self.kink_range > feature or feature > self.kink + self.kink_range:
                    scale = max(abs(c), abs(est), 1.0)
                    if abs(c - est) > self.threshold * scale:
                        failures.append("%s[%d] (top %d[%d]): computed %.6g, estimated %.6g"
                                        % (what, k, top_id, top_data_id, c, est))
        if failures:
            raise GradientCheckError("%s layer '%s': %d gradient mismatches, e.g.\n  %s"
                                     % (layer.type, layer.name, len(failures), "\n  ".join(failures[:10])))

    def check_gradient(self, layer, bottom, top, check_bottom=-1):
        layer.SetUp(bottom, top)
        self.check_single(layer, bottom, top, check_bottom, -1, -1)

    def check_gradient_exhaustive(self, layer, bottom, top, check_bottom=-1):
        layer.SetUp(bottom, top)
        assert top, "Exhaustive mode requires at least one top blob."
        # Caffe re-reads each top's count every step (a Filter top can shrink).
        cache = {}
        for i in range(len(top)):
            j = 0
            while j < top[i].count:
                self.check_single(layer, bottom, top, check_bottom, i, j, cache=cache)
                j += 1

    def check_gradient_eltwise(self, layer, bottom, top):
        layer.SetUp(bottom, top)
        assert top, "Eltwise mode requires at least one top blob."
        for i in range(len(top)):
            j = 0
            while j < top[i].count:
                self.check_single(layer, bottom, top, -1, i, j, element_wise=True)
                j += 1

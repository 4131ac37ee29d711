"""Caffe's numeric gradient checker itself (engine/instruments/gradient_check.py).

The exhaustive modes keep each perturbed Forward's tops and read every top element's
objective from them (params x 2 Forwards instead of params x tops x 2): the estimates,
and so every verdict, must be the ones the one-element-at-a-time loop gives."""
import re

import numpy as np
import pytest

from engine.instruments.gradient_check import GradientChecker, GradientCheckError
from tests.layers.helpers import empty_blobs, make_layer, uniform_blob

IP = 'name: "ip" type: "InnerProduct" inner_product_param { num_output: 3 ' \
     'weight_filler { type: "gaussian" std: 1 } bias_filler { type: "gaussian" std: 1 } }'
SIGMOID = 'name: "s" type: "Sigmoid"'


def _skewed(layer, factor):
    """The layer with its Backward's bottom and param diffs scaled by ``factor`` (a bug)."""
    backward = layer.Backward

    def wrong(top, propagate_down, bottom):
        backward(top, propagate_down, bottom)
        for b in list(bottom) + list(layer.blobs):
            b.diff[...] *= factor
    layer.Backward = wrong
    return layer


def _each_element(checker, layer, bottom, top):
    """The exhaustive check one (top, element) at a time, with no kept Forwards."""
    layer.SetUp(bottom, top)
    failures = []
    for i in range(len(top)):
        for j in range(top[i].count):
            try:
                checker.check_single(layer, bottom, top, -1, i, j)
            except GradientCheckError as e:
                failures.append(str(e))
    return failures


@pytest.mark.parametrize("text", [IP, SIGMOID], ids=["InnerProduct", "Sigmoid"])
def test_a_right_backward_passes(text):
    layer = make_layer(text)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [uniform_blob((2, 4), -1, 1)], empty_blobs(1))


@pytest.mark.parametrize("text", [IP, SIGMOID], ids=["InnerProduct", "Sigmoid"])
def test_a_wrong_backward_fails_with_the_numbers_of_the_plain_loop(text):
    checker = GradientChecker(1e-2, 1e-3)
    layer = _skewed(make_layer(text), 1.05)
    bottom, top = [uniform_blob((2, 4), -1, 1)], empty_blobs(1)
    with pytest.raises(GradientCheckError) as ei:
        checker.check_gradient_exhaustive(layer, bottom, top)
    first = str(ei.value)
    assert re.search(r"\d+ gradient mismatches", first), first
    plain = _each_element(checker, _skewed(make_layer(text), 1.05), [uniform_blob((2, 4), -1, 1)], empty_blobs(1))
    assert plain, "the plain loop found nothing"
    assert plain[0] == first          # same element, same computed and estimated values


def test_kept_forwards_are_the_fresh_forwards():
    """Every estimate from the kept tops equals a fresh Forward's, element by element."""
    checker = GradientChecker(1e-2, 1e-3)
    layer = make_layer(IP)
    bottom, top = [uniform_blob((2, 4), -1, 1)], empty_blobs(1)
    layer.SetUp(bottom, top)
    cache = {}
    blob = bottom[0]
    for k in range(blob.count):
        orig = blob.data.reshape(-1)[k]
        for j in range(top[0].count):
            kept = checker._perturbed(layer, bottom, top, blob, k, orig + checker.stepsize, 0, j, cache)
            fresh = checker._perturbed(layer, bottom, top, blob, k, orig + checker.stepsize, 0, j, None)
            assert kept == fresh, (k, j)
        blob.data.reshape(-1)[k] = orig
    assert len(cache) == blob.count and all(np.isfinite(v[0]).all() for v in cache.values())

"""A negative pad, as Caffe has it: caffe.proto's pad is a uint32 and Caffe keeps it in an
int, so a pad of 4294967295 is -1 and Caffe's im2col and pooling loops start every window
inside the image (a crop).  Found by benchmarks/fuzz_caffe.py (seed 4242), where the engine
refused such nets.

The numbers are real Caffe's (tests/data/negative_pads: pycaffe on 11 nets, forward and
backward); the engine runs them with each of its kernels (compiled loops or NumPy, the two
CPU column layouts, the GPU where present), and Caffe's gradient checker checks the
gradients."""
import os

import numpy as np
import pytest

import engine
from engine.core import backend
from engine.core.kernels import gemm, jit
from engine.instruments.gradient_check import GradientChecker
from tests.layers.helpers import empty_blobs, gaussian_blob, make_layer

EXPECTED = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "negative_pads", "expected.npz")
CASES = sorted({k.split("/")[0] for k in np.load(EXPECTED).files})


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request, monkeypatch):
    """The compiled loops (Numba, the GEMM micro-kernel) or their NumPy twins."""
    on = request.param == "compiled"
    monkeypatch.setattr(jit, "ENABLED", on)
    monkeypatch.setattr(gemm, "ENABLED", on)
    return request.param


@pytest.fixture(params=["batch_last", "standard"])
def col_layout(request, monkeypatch):
    from engine.core.layers import vision
    monkeypatch.setattr(vision, "CPU_COL_LAYOUT", request.param)
    return request.param


def _run_case(name, tmp_path):
    want = np.load(EXPECTED)
    path = tmp_path / (name + ".prototxt")
    path.write_text(str(want[name + "/net"]))
    net = engine.Net(str(path), engine.TEST)
    params = net.params.get("layer", [])
    for i, p in enumerate(params):
        p.data[...] = want["%s/param%d" % (name, i)]
    net.blobs["data"].data[...] = want[name + "/x"]
    net.forward()
    got = {"top": np.array(net.blobs["out"].data)}
    net.blobs["out"].diff[...] = want[name + "/top_diff"]
    net.backward()
    got["x_diff"] = np.array(net.blobs["data"].diff)
    for i, p in enumerate(params):
        got["param%d_diff" % i] = np.array(p.diff)
    return want, got


@pytest.mark.parametrize("name", CASES)
def test_negative_pad_is_caffe(name, mode, kernels, col_layout, tmp_path):
    want, got = _run_case(name, tmp_path)
    # Caffe's own order of additions: the compiled pooling loops and im2col (the NumPy twin of
    # MAX's backward sums overlapping windows by bincount, in float64)
    exact = ("pool" in name and kernels == "compiled") or "im2col" in name
    for key, value in got.items():
        expected = want["%s/%s" % (name, key)]
        assert value.shape == expected.shape, (key, value.shape, expected.shape)
        if exact:
            np.testing.assert_array_equal(value, expected, err_msg=key)
        elif "pool" in name:
            np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7, err_msg=key)
        else:                               # a GEMM's order of additions: float32 rounding
            np.testing.assert_allclose(value, expected, rtol=2e-5, atol=2e-5, err_msg=key)
    assert np.abs(got["top"]).max() > 0 and np.abs(got["x_diff"]).max() > 0


def test_negative_pad_shapes_and_border():
    """The tops' shapes follow Caffe's formulas with the pad negative, and no window reads the
    border the pad cuts off (its gradient is 0), except MAX pooling's, whose windows end at the
    image's end, not at height + pad: Caffe's last window reads the last row."""
    want = np.load(EXPECTED)
    assert want["conv_pad_m1/top"].shape == (2, 4, 3, 2)               # (7 - 2 - 3) + 1, (6 - 2 - 3) + 1
    assert want["deconv_pad_m1_stride2/top"].shape == (2, 2, 11, 13)    # 2 * 3 + 3 + 2
    assert want["max_pool_pad_m1_ceil/top"].shape == (2, 3, 3, 3)     # ceil((8 - 2 - 3) / 2) + 1
    for name in ("conv_pad_m1", "ave_pool_pad_m1_ceil", "im2col_pad_m1"):
        dx = want[name + "/x_diff"]
        assert not dx[..., 0, :].any() and not dx[..., :, 0].any() and dx.any(), name
    assert want["max_pool_pad_m1_ceil/x_diff"][..., -1, :].any()     # the row AVE leaves out
    assert not want["ave_pool_pad_m1_ceil/x_diff"][..., -1, :].any()


@pytest.mark.parametrize("text,shape", [
    ('type: "Convolution" convolution_param { num_output: 2 kernel_size: 3 pad: 4294967295 stride: 2 '
     'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }', (2, 3, 7, 6)),
    ('type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 2 pad_h: 4294967295 pad_w: 0 '
     'stride: 2 weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }', (1, 2, 3, 3)),
    ('type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 4294967295 }', (1, 2, 8, 7)),
    ('type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 4294967295 }', (1, 2, 8, 7)),
])
def test_negative_pad_gradient(text, shape, kernels):
    """Caffe's GradientChecker (1e-2, 1e-2) over every input and param of the layer."""
    backend.set_random_seed(1701)
    layer = make_layer(text)
    x = gaussian_blob(shape)
    if "MAX" in text:       # MAX's numeric gradient needs distinct values (as Caffe's test fills them)
        x.data[...] = np.random.default_rng(3).permutation(x.count).reshape(shape) / x.count
    GradientChecker(1e-2, 1e-2).check_gradient_exhaustive(layer, [x], empty_blobs(1))


def test_pool_uint_fields_are_caffes_ints():
    """A kernel or stride of 2^32 - 1 is -1 in Caffe: refused as Caffe refuses it, not read as
    a huge positive number."""
    x = gaussian_blob((1, 1, 5, 5))
    layer = make_layer('type: "Pooling" pooling_param { kernel_size: 4294967295 }')
    with pytest.raises(engine.CaffeError, match=r"kernel_h_ > 0 \(-1 vs\. 0\)"):
        layer.SetUp([x], empty_blobs(1))
    layer = make_layer('type: "Pooling" pooling_param { kernel_size: 2 stride: 4294967295 }')
    with pytest.raises(engine.CaffeError):
        layer.SetUp([x], empty_blobs(1))

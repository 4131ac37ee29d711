"""Caffe's own NetTest assertions (src/caffe/test/test_net.cpp), run on the exact
nets those tests build (../shared/caffe_tests/Init*.prototxt; INDEX.md says what each
test asserts).  Skipped, with the reason, when ../shared is absent."""
import numpy as np
import pytest

import engine
from engine.core.io import parse_prototxt
from engine.proto import caffe_pb2

pytestmark = pytest.mark.shared


def load(shared_dir, name, phase=engine.TRAIN, **kw):
    path = shared_dir / "caffe_tests" / ("%s.prototxt" % name)
    param = parse_prototxt(path.read_text(), caffe_pb2.NetParameter, path=str(path))
    engine.set_random_seed(1701)
    return engine.Net.from_param(param, phase=phase, **kw)


def test_has_and_get_blob_and_layer(shared_dir):
    net = load(shared_dir, "InitTinyNet__default")
    for b in ("data", "label", "innerproduct", "top_loss"):
        assert net.has_blob(b)
    assert not net.has_blob("loss")
    assert net.blob_by_name("data") is net._blobs[0]
    assert net.blob_by_name("top_loss") is net._blobs[3]
    for l in ("data", "innerproduct", "loss"):
        assert net.has_layer(l)
    assert not net.has_layer("label")
    assert net.layer_by_name("loss") is net.layers[2]
    with pytest.raises(engine.NetError):
        net.blob_by_name("loss")


@pytest.mark.parametrize("name,expected", [
    ("InitTinyNet__default", [[], [False], [True, False]]),
    ("InitTinyNet__force_backward", [[], [True], [True, False]]),
    ("InitTinyNetEuclidean__force_backward", [[], [True], [True, True]]),
    ("InitTrickyNet__default", [[], [False], [False], [True, True]]),
])
def test_bottom_need_backward(shared_dir, name, expected):
    assert load(shared_dir, name).bottom_need_backward == expected


def test_from_to_ranges_reproduce_full_pass(shared_dir):
    net = load(shared_dir, "InitTinyNet__default")
    outputs, _ = net.Forward()
    net.Backward()
    data_diff = net.blob_by_name("data").diff.copy()
    loss = float(outputs[0].data)
    n = len(net.layers)
    for i in range(1, n):            # layer 0 is skipped to keep the same data
        net.ForwardFromTo(1, 1)
        if i < n - 1:
            net.ForwardFrom(i + 1)
        assert float(outputs[0].data) == loss
    for i in range(1, n):
        net.BackwardTo(i)
        net.BackwardFrom(i - 1)
        np.testing.assert_array_equal(net.blob_by_name("data").diff, data_diff)


def _baseline(shared_dir, name):
    net = load(shared_dir, name)
    _, loss = net.Forward()
    net.Backward()
    blob_diffs = {n: b.diff.copy() for n, b in net.blobs.items()}
    param_diffs = [p.diff.copy() for p in net.all_params]
    return loss, blob_diffs, param_diffs


@pytest.mark.parametrize("weight,suffix", [(2, "2"), (0, "0"), (1, "1"), (-1, "neg1"), (-2.5, "neg2.5"),
                                           (3.7, "3.7")])
def test_loss_weight_scales_loss_and_gradients(shared_dir, weight, suffix):
    base_loss, base_blobs, base_params = _baseline(shared_dir, "InitUnsharedWeightsNet__force_backward")
    assert abs(base_loss) >= 1e-2
    loss, blobs, params = _baseline(shared_dir,
                                    "InitUnsharedWeightsNet__force_backward__loss_weight_%s" % suffix)
    assert loss == pytest.approx(weight * base_loss, abs=1e-4 * abs(weight) + 1e-7)
    for n, d in base_blobs.items():
        np.testing.assert_allclose(blobs[n], weight * d, rtol=1e-4, atol=1e-6)
    for p, d in zip(params, base_params):
        np.testing.assert_allclose(p, weight * d, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("weight,suffix", [(2, "2"), (0, "0"), (-1, "neg1"), (-2.5, "neg2.5"), (3.7, "3.7")])
def test_midnet_loss_weight(shared_dir, weight, suffix):
    prefix = "InitUnsharedWeightsNet__force_backward__loss_weight_0__midnet_loss_weight_"
    base_loss, base_blobs, _ = _baseline(shared_dir, prefix + "1")
    assert abs(base_loss) >= 1e-2
    loss, blobs, _ = _baseline(shared_dir, prefix + suffix)
    assert loss == pytest.approx(weight * base_loss, abs=1e-4 * abs(weight) + 1e-7)
    np.testing.assert_allclose(blobs["data"], weight * base_blobs["data"], rtol=1e-4, atol=1e-6)


def test_combo_loss_weight(shared_dir):
    p = "InitUnsharedWeightsNet__force_backward__loss_weight_%d__midnet_loss_weight_%d"
    ref = _baseline(shared_dir, p % (1, 1))
    l2 = _baseline(shared_dir, p % (2, 1))
    l3 = _baseline(shared_dir, p % (3, 1))
    split = "innerproduct1_innerproduct1_0_split_0"
    assert (l3[0] - ref[0]) == pytest.approx(2 * (l2[0] - ref[0]), rel=1e-4, abs=1e-6)
    for n in ref[1]:
        d2, d3 = l2[1][n] - ref[1][n], l3[1][n] - ref[1][n]
        if n == split:
            assert np.abs(d2).max() < 1e-4
        else:
            np.testing.assert_allclose(d3, 2 * d2, rtol=1e-3, atol=1e-5)
    m2 = _baseline(shared_dir, p % (1, 2))
    m3 = _baseline(shared_dir, p % (1, 3))
    changed = {"innerproduct1", split, "data_data_0_split_0", "data"}
    for n in ref[1]:
        d2, d3 = m2[1][n] - ref[1][n], m3[1][n] - ref[1][n]
        if n in changed:
            np.testing.assert_allclose(d3, 2 * d2, rtol=1e-3, atol=1e-5)
        else:
            assert np.abs(d3).max() < 1e-6


def test_backward_with_accuracy_layer(shared_dir):
    net = load(shared_dir, "InitTinyNet__accuracy_layer")
    assert net.has_blob("accuracy")
    net.ForwardBackward()


def test_unshared_weights_diffs_are_opposite(shared_dir):
    net = load(shared_dir, "InitUnsharedWeightsNet__default")
    _, loss = net.Forward()
    assert loss > 0
    net.Backward()
    w1 = net.layer_by_name("innerproduct1").blobs[0].diff
    w2 = net.layer_by_name("innerproduct2").blobs[0].diff
    assert np.all(w1 != 0)
    np.testing.assert_allclose(w2, -w1, rtol=1e-6)


def test_shared_weights_give_zero_loss_and_diff(shared_dir):
    net = load(shared_dir, "InitSharedWeightsNet__default")
    _, loss = net.Forward()
    assert loss == 0
    net.Backward()
    assert np.all(net.layer_by_name("innerproduct1").blobs[0].diff == 0)
    assert np.all(net.layer_by_name("innerproduct2").blobs[0].diff == 0)


def test_shared_weights_update_and_resume(shared_dir, tmp_path):
    net = load(shared_dir, "InitDiffDataSharedWeightsNet__default")
    assert net.layer_names[1] == "innerproduct1" and net.layer_names[2] == "innerproduct2"
    w1, w2 = net.layers[1].blobs[0], net.layers[2].blobs[0]
    assert w1.shares_data_with(w2) and w1.diff_memory is w2.diff_memory
    net.Forward()
    net.Backward()
    assert np.any(w1.diff != 0)
    expected = w1.data - w1.diff
    net.Update()
    np.testing.assert_array_equal(w1.data, expected)
    assert w1.shares_data_with(w2)
    # Resume: the saved proto restores shared weights into a fresh net.
    saved = net.ToProto()
    fresh = load(shared_dir, "InitDiffDataSharedWeightsNet__default")
    fresh.CopyTrainedLayersFrom(saved)
    a, b = fresh.layers[1].blobs[0], fresh.layers[2].blobs[0]
    assert a is not b and a.shares_data_with(b) and a.diff_memory is b.diff_memory
    np.testing.assert_array_equal(a.data, expected)


def test_unshared_diff_data_net_diffs_add_up_to_shared(shared_dir):
    # As Caffe's test: reseed before each Init, then draw the data in Forward.
    shared = load(shared_dir, "InitDiffDataSharedWeightsNet__default")
    shared.Forward()
    shared.Backward()
    unshared = load(shared_dir, "InitDiffDataUnsharedWeightsNet__default")
    unshared.Forward()
    unshared.Backward()
    a, b = unshared.layers[1].blobs[0], unshared.layers[2].blobs[0]
    assert not a.shares_data_with(b)
    assert np.any(a.diff != b.diff)
    np.testing.assert_allclose(a.diff + b.diff, shared.layers[1].blobs[0].diff, rtol=1e-5, atol=1e-5)
    expected = a.data - a.diff
    unshared.Update()
    np.testing.assert_allclose(a.data, expected)


def test_param_propagate_down(shared_dir):
    def diffs(suffix):
        net = load(shared_dir, "InitUnsharedWeightsNet__bias_term__" + suffix)
        net.Forward()
        net.Backward()
        return [p.asum_diff() for p in net.all_params]
    first = diffs("lr_w1_1_b1_1_w2_2_b2_2")
    assert len(first) == 4 and all(d > 1e-3 for d in first)
    assert diffs("lr_w1_2_b1_2_w2_4_b2_4") == pytest.approx(first)
    d = diffs("lr_w1_1_b1_0_w2_0_b2_1")
    assert d[1] == 0 and d[2] == 0 and d[0] == pytest.approx(first[0]) and d[3] == pytest.approx(first[3])
    d = diffs("lr_w1_0_b1_1_w2_1_b2_0")
    assert d[0] == 0 and d[3] == 0 and d[1] == pytest.approx(first[1]) and d[2] == pytest.approx(first[2])


def test_reshape(shared_dir):
    net = load(shared_dir, "InitReshapableNet__default")
    data = net.blob_by_name("data")
    out_name = net.outputs[0]
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    x2 = rng.standard_normal((4, 3, 9, 11)).astype(np.float32)
    outs = []
    for x in (x1, x2, x1, x2):
        data.reshape(x.shape)
        data.data[...] = x
        net.Reshape()
        net.Forward()
        net.Backward()
        outs.append(net.blob_by_name(out_name).data.copy())
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_array_equal(outs[1], outs[3])
    assert outs[0].shape[0] == 2 and outs[1].shape[0] == 4
    assert outs[0].shape[2:] != outs[1].shape[2:]


@pytest.mark.parametrize("skip,lnb", [
    (False, {"data": False, "silence": False, "innerproduct": True, "ip_fake_labels": True,
             "argmax": True, "loss": True}),
    (True, {"data": False, "silence": False, "innerproduct": True, "ip_fake_labels": False,
            "argmax": False, "loss": True}),
])
def test_skip_propagate_down(shared_dir, skip, lnb):
    net = load(shared_dir, "InitSkipPropNet__skip_%s" % ("true" if skip else "false"))
    got = dict(zip(net.layer_names, net.layer_need_backward))
    for k, v in lnb.items():
        assert got[k] == v, k
    loss_id = net.layer_names.index("loss")
    assert net.bottom_need_backward[loss_id][1] == (not skip)


@pytest.mark.parametrize("force", [False, True])
def test_force_propagate_down(shared_dir, force):
    net = load(shared_dir, "InitForcePropNet__force_%s" % ("true" if force else "false"))
    names = net.layer_names
    assert net.bottom_need_backward[names.index("data")] == []
    assert not net.layer_need_backward[names.index("data")]
    assert net.bottom_need_backward[names.index("innerproduct")] == [force]
    assert net.layer_need_backward[names.index("innerproduct")]
    assert net.bottom_need_backward[names.index("loss")] == [True, False]


@pytest.mark.parametrize("phase,stage,case", [
    (engine.TRAIN, "train", "TestAllInOneNetTrain"),
    (engine.TEST, "val", "TestAllInOneNetVal"),
    (engine.TEST, "deploy", "TestAllInOneNetDeploy"),
])
def test_all_in_one_net(shared_dir, phase, stage, case):
    net = engine.Net(str(shared_dir / "caffe_tests" / "InitAllInOneNet__default.prototxt"), phase,
                     level=0, stages=[stage])
    exp_path = shared_dir / "caffe_tests" / ("%s.expected.prototxt" % case)
    expected = parse_prototxt(exp_path.read_text(), caffe_pb2.NetParameter, path=str(exp_path))
    assert [l.name for l in expected.layer] == [n for n in net.layer_names if not n.endswith("_split")]

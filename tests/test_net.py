"""Net Init rules, ranges, weights I/O and the pycaffe API, on nets written here."""
import logging

import numpy as np
import pytest

import engine
from engine.core.errors import LayerError, NetError, ShapeError


def net_from(tmp_path, text, phase=engine.TRAIN, name="net.prototxt", **kw):
    p = tmp_path / name
    p.write_text(text)
    return engine.Net(str(p), phase, **kw)


def init_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "engine.core.net"]


INPUT = 'layer { name: "data" type: "Input" top: "data" top: "label" ' \
        'input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }\n'


def ip(name, bottom, top, n=2, params=""):
    return ('layer { name: "%s" type: "InnerProduct" bottom: "%s" top: "%s" %s '
            'inner_product_param { num_output: %d weight_filler { type: "gaussian" std: 0.1 } } }\n'
            % (name, bottom, top, params, n))


LOSS = 'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }\n'


# ------------------------------------------------------------------ AppendTop / AppendBottom
def test_in_place_top_and_transcript(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    net = net_from(tmp_path, INPUT + ip("ip", "data", "ip") +
                   'layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }\n' + LOSS)
    lines = init_lines(caplog)
    assert "relu -> ip (in-place)" in lines
    assert "relu <- ip" in lines
    assert net.init_record.in_place == [("relu", 0, "ip")]
    assert net.top_vecs[2][0] is net.bottom_vecs[2][0]
    assert "Top shape: 4 2 (8)" in lines
    assert "Top shape: (1)" in lines and "    with loss weight 1" in lines
    assert lines[-1] == "Network initialization done."
    assert "This network produces output loss" in lines


def test_top_produced_by_multiple_sources(tmp_path):
    with pytest.raises(NetError, match="Top blob 'ip' produced by multiple sources.") as e:
        net_from(tmp_path, INPUT + ip("ip", "data", "ip") + ip("ip2", "data", "ip"))
    assert e.value.blob == "ip"


def test_unknown_bottom_blob_names_layer_and_blob(tmp_path):
    with pytest.raises(NetError, match=r"Unknown bottom blob 'dta' \(layer 'ip', bottom index 0\)") as e:
        net_from(tmp_path, INPUT + ip("ip", "dta", "ip"))
    assert e.value.layer == "ip" and e.value.blob == "dta"


def test_anonymous_auto_top(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    net = net_from(tmp_path, INPUT + ip("ip", "data", "ip") +
                   'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }\n')
    assert "loss -> (automatic)" in init_lines(caplog)
    assert "(automatic)" in net.blobs
    assert net.outputs == []                      # anonymous tops are not outputs
    assert net.blob_loss_weights["(automatic)"] == 1


def test_outputs_are_sorted_by_name(tmp_path):
    net = net_from(tmp_path, INPUT + ip("zz", "data", "zz") +
                   'layer { name: "s" type: "Silence" bottom: "label" }\n' +
                   'layer { name: "sp" type: "Split" bottom: "zz" top: "b" top: "a" }\n')
    assert net.outputs == ["a", "b"]


# ------------------------------------------------------------------ SetUp and loss weights
def test_blob_count_check_message(tmp_path):
    with pytest.raises(LayerError, match=r"SoftmaxWithLoss Layer takes 2 bottom blob\(s\) as input."):
        net_from(tmp_path, INPUT + ip("ip", "data", "ip") +
                 'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" top: "loss" }\n')


def test_loss_weight_on_non_loss_layer_and_memory(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    net = net_from(tmp_path, INPUT + ip("ip", "data", "ip", params="loss_weight: 0.5") +
                   'layer { name: "s" type: "Silence" bottom: "label" }\n')
    assert net.blob_loss_weights["ip"] == 0.5
    assert "    with loss weight 0.5" in init_lines(caplog)
    # data 12 + label 4 + ip 8 elements, float32
    assert net.memory_used == 24 and net.memory_used_bytes == 96
    assert "Memory required for data: 96" in init_lines(caplog)
    net.Forward()
    assert np.all(net.blobs["ip"].diff == 0.5)    # the loss weight lives in the top's diff


def test_loss_weight_count_must_match_tops(tmp_path):
    with pytest.raises(LayerError, match="loss_weight must be unspecified or specified once per top blob."):
        net_from(tmp_path, INPUT + ip("ip", "data", "ip", params="loss_weight: 1 loss_weight: 2"))


def test_propagate_down_size(tmp_path):
    with pytest.raises(NetError, match="propagate_down param must be specified either 0 or bottom_size times"):
        net_from(tmp_path, INPUT + ip("ip", "data", "ip") +
                 'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" '
                 'propagate_down: true }\n')


# ------------------------------------------------------------------ params and sharing
SHARED = INPUT + ip("ip1", "data", "a", params='param { name: "w" } param { name: "b" }') + \
    ip("ip2", "data", "b", params='param { name: "w" lr_mult: 2 } param { name: "b" }') + \
    'layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "ip" }\n' + LOSS


def test_shared_params_owners_and_names(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    net = net_from(tmp_path, SHARED)
    assert net.param_owners == [-1, -1, 0, 1]
    assert net.param_display_names == ["w", "b", "w", "b"]
    assert len(net.learnable_params) == 2
    assert net.params_lr == [2.0, 1.0]          # the sharer set lr_mult the owner left unset
    assert "Sharing parameters 'w' owned by layer 'ip1', param index 0" in init_lines(caplog)
    w1, w2 = net.params["ip1"][0], net.params["ip2"][0]
    assert w1 is not w2 and w1.shares_data_with(w2) and w1.diff_memory is w2.diff_memory
    rec = net.init_record.shared
    assert [(s.layer, s.owner_layer, s.name, s.mode) for s in rec] == \
        [("ip2", "ip1", "w", "STRICT"), ("ip2", "ip1", "b", "STRICT")]


def test_shared_param_gradients_accumulate_and_update(tmp_path):
    net = net_from(tmp_path, SHARED)
    rng = np.random.default_rng(0)
    net.blobs["data"].data[...] = rng.standard_normal((4, 3))
    net.blobs["label"].data[...] = [0, 1, 1, 0]
    net.ForwardBackward()
    w = net.params["ip1"][0]
    # the shared weight's gradient is the sum over both users
    x = net.blobs["data"].data
    g = net.blobs["ip"].diff
    np.testing.assert_allclose(w.diff, 2 * g.T @ x, rtol=1e-5, atol=1e-7)
    before = w.data.copy()
    net.Update()
    np.testing.assert_allclose(w.data, before - w.diff, rtol=1e-6)
    np.testing.assert_array_equal(net.params["ip2"][0].data, w.data)
    net.ClearParamDiffs()
    assert np.all(w.diff == 0)


def test_shared_shape_mismatch_strict(tmp_path):
    text = INPUT + ip("ip1", "data", "a", n=2, params='param { name: "w" }') + \
        ip("ip2", "data", "b", n=3, params='param { name: "w" }')
    with pytest.raises(NetError, match="Cannot share param 'w' owned by layer 'ip1' with layer 'ip2'; "
                                       "shape mismatch.  Owner layer param shape is 2 3 \\(6\\); "
                                       "sharing layer expects shape 3 3 \\(9\\)"):
        net_from(tmp_path, text)


def test_shared_permissive_only_checks_count(tmp_path):
    text = INPUT + \
        'layer { name: "r" type: "Reshape" bottom: "data" top: "r" reshape_param { shape { dim: 4 dim: 3 } } }\n' + \
        ip("ip1", "data", "a", n=6, params='param { name: "w" }') + \
        'layer { name: "c" type: "Convolution" bottom: "r4" top: "c" param { name: "w" share_mode: PERMISSIVE } ' \
        'convolution_param { num_output: 6 kernel_size: 1 bias_term: false } }\n'
    text = text.replace('reshape_param { shape { dim: 4 dim: 3 } }',
                        'reshape_param { shape { dim: 4 dim: 3 dim: 1 dim: 1 } }').replace('top: "r" ', 'top: "r4" ')
    net = net_from(tmp_path, text)
    assert net.params["c"][0].shape == (6, 3, 1, 1) and net.params["ip1"][0].shape == (6, 3)
    bad = text.replace("num_output: 6 kernel_size: 1", "num_output: 5 kernel_size: 1")
    with pytest.raises(NetError, match="Shared parameter blobs must have the same count."):
        net_from(tmp_path, bad)


def test_shared_lr_mult_mismatch(tmp_path):
    text = INPUT + ip("ip1", "data", "a", params='param { name: "w" lr_mult: 1 }') + \
        ip("ip2", "data", "b", params='param { name: "w" lr_mult: 2 }')
    with pytest.raises(NetError, match="Shared param 'w' has mismatched lr_mult."):
        net_from(tmp_path, text)


def test_too_many_param_specs(tmp_path):
    text = INPUT + 'layer { name: "r" type: "ReLU" bottom: "data" top: "r" param { lr_mult: 1 } }\n'
    with pytest.raises(NetError, match="Too many params specified for layer r"):
        net_from(tmp_path, text)


# ------------------------------------------------------------------ backward analysis
def test_need_backward_rules_and_reasons(tmp_path):
    text = INPUT + \
        ip("frozen", "data", "f", params='param { lr_mult: 0 } param { lr_mult: 0 }') + \
        'layer { name: "relu" type: "ReLU" bottom: "f" top: "f" }\n' + \
        ip("ip", "f", "ip") + \
        ip("side", "data", "side") + LOSS
    net = net_from(tmp_path, text)
    need = dict(zip(net.layer_names, net.layer_need_backward))
    why = dict(zip(net.layer_names, net.init_record.backward))
    assert need == {"data": False, "data_data_0_split": False, "frozen": False, "relu": False,
                    "ip": True, "side": False, "loss": True}
    assert why["ip"].rule == "param"
    assert why["loss"].rule == "bottom"
    assert why["frozen"].rule == "none"
    assert why["side"].rule == "not-under-loss"     # learnable, but feeds no loss
    assert net.bottom_need_backward[net.layer_names.index("loss")] == [True, False]
    assert "side" in net.outputs


def test_force_backward_respects_allow_force_backward(tmp_path):
    net = net_from(tmp_path, "force_backward: true\n" + INPUT + ip("ip", "data", "ip") + LOSS)
    loss_id = net.layer_names.index("loss")
    assert net.bottom_need_backward[loss_id] == [True, False]     # never to the labels
    assert net.bottom_need_backward[net.layer_names.index("ip")] == [True]
    assert net.init_record.backward[0].rule == "force"


def test_propagate_down_false_skips(tmp_path):
    text = INPUT + ip("ip", "data", "ip") + \
        'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" ' \
        'propagate_down: false propagate_down: false }\n'
    net = net_from(tmp_path, text)
    # Nothing propagates back from the loss, so the learnable layer skips backward too.
    assert net.layer_need_backward == [False, False, True]
    assert net.bottom_need_backward[2] == [False, False]
    assert net.init_record.backward[1].rule == "skip-propagate"


# ------------------------------------------------------------------ running
def _lenet_like(tmp_path, debug=False):
    text = ("debug_info: true\n" if debug else "") + INPUT + ip("ip", "data", "ip") + LOSS
    net = net_from(tmp_path, text)
    rng = np.random.default_rng(1)
    net.blobs["data"].data[...] = rng.standard_normal((4, 3))
    net.blobs["label"].data[...] = [0, 1, 0, 1]
    return net


def test_forward_ranges_and_loss(tmp_path):
    net = _lenet_like(tmp_path)
    loss = net.ForwardFromTo(0, len(net.layers) - 1)
    assert loss == pytest.approx(float(net.blobs["loss"].data))
    assert net.ForwardTo(1) == 0
    with pytest.raises(NetError):
        net.ForwardFromTo(0, 99)
    with pytest.raises(NetError):
        net.BackwardFromTo(99, 0)


def test_debug_info_lines(tmp_path, caplog):
    net = _lenet_like(tmp_path, debug=True)
    caplog.set_level(logging.INFO)
    net.forward()
    net.Backward()
    msgs = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("    [Forward] Layer ip, top blob ip data: ") for m in msgs)
    assert any(m.startswith("    [Forward] Layer ip, param blob 0 data: ") for m in msgs)
    assert any(m.startswith("    [Backward] Layer loss, bottom blob ip diff: ") for m in msgs)
    assert any(m.startswith("    [Backward] Layer ip, param blob 1 diff: ") for m in msgs)
    l1 = [m for m in msgs if m.startswith("    [Backward] All net params (data, diff): L1 norm = (")]
    assert len(l1) == 1
    asum = sum(p.asum_data() for p in net.learnable_params)
    assert ("%g" % np.float32(asum)) in l1[0]


def test_pycaffe_forward_backward_kwargs(tmp_path):
    net = _lenet_like(tmp_path)
    x = np.ones((4, 3), np.float32)
    out = net.forward(data=x, label=np.zeros(4, np.float32))
    assert set(out) == {"loss"}
    np.testing.assert_array_equal(net.blobs["data"].data, x)
    out = net.forward(blobs=["ip"], end="ip")
    assert set(out) == {"ip"}
    diffs = net.backward(diffs=["ip"])
    assert set(diffs) == {"data", "label", "ip"}
    with pytest.raises(NetError, match="Input blob arguments do not match net inputs."):
        net.forward(data=x)
    with pytest.raises(ShapeError, match="Input is not batch sized"):
        net.forward(data=np.ones((3, 3)), label=np.zeros(3))


def test_callbacks_run_in_order(tmp_path):
    net = _lenet_like(tmp_path)
    seen = []
    net.before_forward(lambda i: seen.append(("bf", i)))
    net.after_forward(lambda i: seen.append(("af", i)))
    net.before_backward(lambda i: seen.append(("bb", i)))
    net.after_backward(lambda i: seen.append(("ab", i)))
    net.ForwardFromTo(1, 2)
    net.BackwardFromTo(2, 1)
    assert seen == [("bf", 1), ("af", 1), ("bf", 2), ("af", 2), ("bb", 2), ("ab", 2), ("bb", 1), ("ab", 1)]


def test_reshape_propagates_new_input_shape(tmp_path):
    net = _lenet_like(tmp_path)
    net.blobs["data"].reshape(7, 3)
    net.blobs["label"].reshape(7)
    net.reshape()
    assert net.blobs["ip"].shape == (7, 2)


# ------------------------------------------------------------------ weights I/O
def test_save_and_copy_from_roundtrip(tmp_path, caplog):
    net = _lenet_like(tmp_path)
    path = tmp_path / "w.caffemodel"
    net.save(str(path))
    other = net_from(tmp_path, INPUT + ip("ip", "data", "ip") + ip("extra", "data", "e") + LOSS, name="o.prototxt")
    caplog.set_level(logging.INFO)
    other.copy_from(str(path))
    np.testing.assert_array_equal(other.params["ip"][0].data, net.params["ip"][0].data)
    third = net_from(tmp_path, INPUT + ip("renamed", "data", "ip") + LOSS, name="t.prototxt")
    third.copy_from(str(path))
    assert "Ignoring source layer ip" in [r.getMessage() for r in caplog.records]


def test_copy_from_shape_mismatch_names_layer_and_shapes(tmp_path):
    net = _lenet_like(tmp_path)
    path = tmp_path / "w.caffemodel"
    net.save(str(path))
    other = net_from(tmp_path, INPUT + ip("ip", "data", "ip", n=5) + LOSS, name="o.prototxt")
    with pytest.raises(ShapeError, match=r"Cannot copy param 0 weights from layer 'ip'; shape mismatch.  "
                                         r"Source param shape is 2 3 \(6\); target param shape is 5 3 \(15\)"):
        other.copy_from(str(path))


def test_hdf5_weights_roundtrip(tmp_path):
    net = _lenet_like(tmp_path)
    path = tmp_path / "w.h5"
    net.save_hdf5(str(path))
    other = net_from(tmp_path, INPUT + ip("ip", "data", "ip") + LOSS, name="o.prototxt")
    other.copy_from(str(path))
    np.testing.assert_array_equal(other.params["ip"][1].data, net.params["ip"][1].data)


def test_share_with_shares_memory(tmp_path):
    a = _lenet_like(tmp_path)
    b = net_from(tmp_path, INPUT + ip("ip", "data", "ip") + LOSS, engine.TEST, name="b.prototxt")
    b.share_with(a)
    assert b.params["ip"][0].shares_data_with(a.params["ip"][0])


def test_to_proto_write_diff(tmp_path):
    net = _lenet_like(tmp_path)
    net.ForwardBackward()
    p = net.ToProto(write_diff=True)
    layer = [l for l in p.layer if l.name == "ip"][0]
    assert list(layer.blobs[0].shape.dim) == [2, 3]
    np.testing.assert_allclose(layer.blobs[0].diff, net.params["ip"][0].diff.ravel())


def test_constructor_forms_and_weights(tmp_path):
    net = _lenet_like(tmp_path)
    path = tmp_path / "w.caffemodel"
    net.save(str(path))
    model = str(tmp_path / "net.prototxt")
    a = engine.Net(model, str(path), engine.TEST)         # deprecated pycaffe form
    b = engine.Net(model, engine.TEST, weights=str(path))
    assert a.phase == b.phase == engine.TEST
    np.testing.assert_array_equal(a.params["ip"][0].data, b.params["ip"][0].data)
    with pytest.raises(TypeError):
        engine.Net(model)


def test_filtered_and_split_records(tmp_path):
    acc = 'layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" include { phase: TEST } }\n'
    text = INPUT + ip("ip", "data", "ip") + acc + LOSS
    train = net_from(tmp_path, text)
    assert [d.name for d in train.init_record.filtered] == ["acc"]
    test = net_from(tmp_path, text, engine.TEST)
    assert test.init_record.filtered == []
    assert {s.blob for s in test.init_record.splits} == {"ip", "label"}
    assert "ip_ip_0_split" in test.layer_names


def test_init_transcript_is_recorded(tmp_path):
    net = _lenet_like(tmp_path)
    msgs = [m for _, m in net.init_record.transcript]
    assert msgs[0].startswith("Initializing net from parameters:")
    assert msgs[-1] == "Network initialization done."


def test_nets_built_at_once_in_threads_each_record_their_own_transcript(tmp_path):
    """Init logs to one logger: a net built in another thread meanwhile (the inspector builds
    spares in threads) neither adds its lines to this net's transcript nor ends the INFO level
    the transcript needs before this Init is done; the user's level comes back after both."""
    import threading

    from engine.core.log import net_log
    relu = 'layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }\n'
    texts = {"a": INPUT + ip("ipa", "data", "ip") + LOSS, "b": INPUT + ip("ipb", "data", "ip") + relu + LOSS}
    paths = {k: _write(tmp_path, k, t) for k, t in texts.items()}
    alone = {k: [m for _, m in engine.Net(str(p), engine.TRAIN).init_record.transcript] for k, p in paths.items()}
    level, propagate = net_log.level, net_log.propagate

    def build(k, got, start):
        start.wait()
        got[k] = [m for _, m in engine.Net(str(paths[k]), engine.TRAIN).init_record.transcript]

    for _ in range(5):
        got, start = {}, threading.Barrier(len(texts))
        threads = [threading.Thread(target=build, args=(k, got, start)) for k in texts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == alone
    assert (net_log.level, net_log.propagate) == (level, propagate)


def _write(tmp_path, name, text):
    path = tmp_path / ("%s.prototxt" % name)
    path.write_text(text)
    return path

"""RNN, LSTM and LSTMUnit, after Caffe's test_rnn_layer.cpp and test_lstm_layer.cpp."""
import numpy as np
import pytest

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import LayerError
from engine.instruments.gradient_check import GradientChecker
from tests.layers.helpers import empty_blobs, gaussian_blob, make_layer, uniform_blob

NUM_OUTPUT = 7


def _recurrent_text(kind, expose_hidden=False):
    return ('type: "%s" recurrent_param { num_output: %d expose_hidden: %s '
            'weight_filler { type: "gaussian" std: 0.2 } bias_filler { type: "gaussian" std: 0.1 } }'
            % (kind, NUM_OUTPUT, "true" if expose_hidden else "false"))


def _bottoms(T, N, seed=1701):
    x = uniform_blob((T, N, 3, 2), -1.0, 1.0, seed=seed)
    cont = Blob((T, N), dtype=np.float64)
    static = uniform_blob((N, 2, 3, 4), -1.0, 1.0, seed=seed + 1)
    return x, cont, static


# --------------------------------------------------------------------------- LSTMUnit
def _unit_bottoms(num=3, cont=(0, 0, 0), seed=1701):
    c_prev = uniform_blob((1, num, NUM_OUTPUT), -1.0, 1.0, seed=seed)
    x = uniform_blob((1, num, 4 * NUM_OUTPUT), -1.0, 1.0, seed=seed + 1)
    c = Blob((1, num), dtype=np.float64)
    c.data[...] = np.asarray(cont, dtype=np.float64).reshape(1, num)
    return [c_prev, x, c]


def _lstm_unit_reference(c_prev, x, cont):
    d = c_prev.shape[-1]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    i = sig(x[..., :d])
    f = sig(x[..., d:2 * d]) * cont[..., None]
    o = sig(x[..., 2 * d:3 * d])
    g = np.tanh(x[..., 3 * d:])
    c = f * c_prev + i * g
    return c, o * np.tanh(c)


def test_lstm_unit_setup():
    layer = make_layer('type: "LSTMUnit"')
    bottom, top = _unit_bottoms(), empty_blobs(2)
    layer.SetUp(bottom, top)
    assert top[0].shape == (1, 3, NUM_OUTPUT)
    assert top[1].shape == (1, 3, NUM_OUTPUT)


def test_lstm_unit_forward(mode):
    layer = make_layer('type: "LSTMUnit"')
    bottom, top = _unit_bottoms(cont=(0, 1, 1)), empty_blobs(2)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    c, h = _lstm_unit_reference(bottom[0].data, bottom[1].data, bottom[2].data)
    np.testing.assert_allclose(top[0].data, c, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(top[1].data, h, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cont", [(0, 0, 0), (1, 0, 1)])
@pytest.mark.parametrize("check_bottom", [0, 1])
def test_lstm_unit_gradient(cont, check_bottom):
    layer = make_layer('type: "LSTMUnit"')
    bottom, top = _unit_bottoms(cont=cont), empty_blobs(2)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottom, top, check_bottom)


def test_lstm_unit_refuses_cont_gradient():
    layer = make_layer('type: "LSTMUnit"')
    bottom, top = _unit_bottoms(), empty_blobs(2)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert not layer.allow_force_backward(2)
    with pytest.raises(LayerError, match="Cannot backpropagate to sequence indicators"):
        layer.Backward(top, [True, True, True], bottom)


def test_lstm_unit_shape_checks():
    layer = make_layer('type: "LSTMUnit"')
    bottom = _unit_bottoms()
    bottom[1] = uniform_blob((1, 3, 3 * NUM_OUTPUT))
    with pytest.raises(LayerError, match=r"4 \* hidden_dim_ == bottom\[1\]->shape\(2\)"):
        layer.SetUp(bottom, empty_blobs(2))


# --------------------------------------------------------------------------- RNN / LSTM
@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
def test_setup_shapes_and_params(kind):
    layer = make_layer(_recurrent_text(kind), phase="TEST")
    x, cont, _ = _bottoms(1, 3)
    top = empty_blobs(1)
    layer.SetUp([x, cont], top)
    assert top[0].shape == (1, 3, NUM_OUTPUT)
    if kind == "RNN":
        shapes = [(7, 6), (7,), (7, 7), (7, 7), (7,)]
    else:
        shapes = [(28, 6), (28,), (28, 7)]
    assert [b.shape for b in layer.blobs] == shapes
    net = layer.unrolled_net
    assert net.layer_names[-1] == ("o_pseudoloss" if kind == "RNN" else "h_pseudoloss")
    assert all(n.startswith("test_") or n.endswith(("pseudoloss", "_split")) for n in net.layer_names)


def test_rnn_unrolled_net_matches_caffe_names():
    layer = make_layer('name: "rnn" ' + _recurrent_text("RNN"), phase="TEST")
    x, cont, _ = _bottoms(2, 2)
    layer.SetUp([x, cont], empty_blobs(1))
    p = layer.unrolled_net_param
    names = [lp.name for lp in p.layer]
    assert names == ["rnn_", "rnn_", "rnn_cont_slice", "rnn_x_transform", "rnn_W_xh_x_slice",
                     "rnn_h_conted_0", "rnn_W_hh_h_0", "rnn_h_input_sum_1", "rnn_h_neuron_1",
                     "rnn_W_ho_h_1", "rnn_o_neuron_1", "rnn_h_conted_1", "rnn_W_hh_h_1",
                     "rnn_h_input_sum_2", "rnn_h_neuron_2", "rnn_W_ho_h_2", "rnn_o_neuron_2",
                     "rnn_o_concat", "o_pseudoloss"]
    xt = p.layer[3]
    assert list(xt.propagate_down) == [True]
    assert [q.name for q in xt.param] == ["W_xh", "b_h"]
    assert xt.inner_product_param.axis == 2
    assert p.layer[5].type == "Scale" and p.layer[5].scale_param.axis == 0
    assert not p.HasField("state")


def test_lstm_unrolled_net_matches_caffe_names():
    layer = make_layer('name: "lstm" ' + _recurrent_text("LSTM"), phase="TEST")
    x, cont, static = _bottoms(2, 2)
    layer.SetUp([x, cont, static], empty_blobs(1))
    names = [lp.name for lp in layer.unrolled_net_param.layer]
    assert names == ["lstm_", "lstm_", "lstm_cont_slice", "lstm_x_transform", "lstm_W_xc_x_static",
                     "lstm_W_xc_x_static_reshape", "lstm_W_xc_x_slice",
                     "lstm_h_conted_0", "lstm_transform_1", "lstm_gate_input_1", "lstm_unit_1",
                     "lstm_h_conted_1", "lstm_transform_2", "lstm_gate_input_2", "lstm_unit_2",
                     "lstm_", "lstm_h_concat", "h_pseudoloss"]
    assert list(layer.unrolled_net_param.layer[1].top) == ["c_0", "h_0"]
    assert [b.shape for b in layer.blobs] == [(28, 6), (28,), (28, 24), (28, 7)]  # W_xc_static 3rd


@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
def test_forward_full_sequence_equals_stepwise(kind, mode):
    """Caffe's TestForward: a T=3 batch equals three T=1 batches carrying the hidden state."""
    T, N = 3, 3
    text = _recurrent_text(kind)
    x_full, cont_full, _ = _bottoms(T, N)
    x_full.data[...] = np.random.default_rng(5).normal(size=x_full.shape)
    cont_full.data[...] = (np.arange(T) > 0)[:, None]
    top = empty_blobs(1)
    backend.set_random_seed(1701)
    layer = make_layer(text, phase="TEST")
    layer.SetUp([x_full, cont_full], top)
    layer.Forward([x_full, cont_full], top)
    full = top[0].data.copy()

    def stepwise(cont):
        """The outputs of T batches of one timestep (same weights), cont(t) for each."""
        x1, cont1, _ = _bottoms(1, N)
        backend.set_random_seed(1701)
        layer = make_layer(text, phase="TEST")
        top = empty_blobs(1)
        layer.SetUp([x1, cont1], top)
        for t in range(T):
            x1.data[...] = x_full.data[t:t + 1]
            cont1.data[...] = cont(t)
            layer.Forward([x1, cont1], top)
            yield t, top[0].data[0]

    for t, out in stepwise(lambda t: float(t > 0)):
        np.testing.assert_allclose(out, full[t], rtol=1e-6, atol=1e-9)

    # All cont 0: every step starts a new sequence, so only step 0 agrees.
    for t, out in stepwise(lambda t: 0):
        if t == 0:
            np.testing.assert_allclose(out, full[t], rtol=1e-6, atol=1e-9)
        else:
            assert not np.any(out == full[t])


@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
def test_reset_zeroes_hidden_state(kind):
    layer = make_layer(_recurrent_text(kind), phase="TEST")
    x, cont, _ = _bottoms(1, 2)
    cont.data[...] = 1
    top = empty_blobs(1)
    layer.SetUp([x, cont], top)
    layer.Forward([x, cont], top)
    first = top[0].data.copy()
    layer.Forward([x, cont], top)
    assert not np.allclose(top[0].data, first)
    layer.reset()
    layer.Forward([x, cont], top)
    np.testing.assert_allclose(top[0].data, first)


@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
def test_gradient_params(kind):
    """TestGradient (params; cont all 0), T=1, N=3."""
    layer = make_layer(_recurrent_text(kind), phase="TEST")
    x, cont, _ = _bottoms(1, 3)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [x, cont], empty_blobs(1), -2)


@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
def test_gradient_nonzero_cont_buffer_size_2(kind):
    """TestGradientNonZeroContBufferSize2: T=2, N=2, cont = i > 2."""
    layer = make_layer(_recurrent_text(kind), phase="TEST")
    x, cont, _ = _bottoms(2, 2)
    cont.data.reshape(-1)[...] = np.arange(4) > 2
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, [x, cont], empty_blobs(1), 0)


@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
def test_gradient_static_input(kind):
    """TestGradientNonZeroContBufferSize2WithStaticInput (all tops at once)."""
    layer = make_layer(_recurrent_text(kind), phase="TEST")
    x, cont, static = _bottoms(2, 2)
    cont.data.reshape(-1)[...] = np.arange(4) > 2
    checker = GradientChecker(1e-2, 1e-3)
    checker.check_gradient(layer, [x, cont, static], empty_blobs(1), 0)
    checker.check_gradient(layer, [x, cont, static], empty_blobs(1), 2)


def test_lstm_gradient_expose_hidden():
    """Gradients reach x through the output h; the exposed h_T/c_T tops carry no gradient
    back (Caffe does not backpropagate across batches), so only top 0 is the objective."""
    layer = make_layer(_recurrent_text("LSTM", expose_hidden=True), phase="TEST")
    x, cont, _ = _bottoms(2, 2)
    cont.data.reshape(-1)[...] = [0, 1, 1, 1]
    h0 = uniform_blob((1, 2, NUM_OUTPUT), -1, 1, seed=3)
    c0 = uniform_blob((1, 2, NUM_OUTPUT), -1, 1, seed=4)
    bottom, top = [x, cont, h0, c0], empty_blobs(3)
    checker = GradientChecker(1e-2, 1e-3)
    layer.SetUp(bottom, top)
    assert top[1].shape == (1, 2, NUM_OUTPUT) and top[2].shape == (1, 2, NUM_OUTPUT)
    for k in (0, 9, 20, 27):
        checker.check_single(layer, bottom, top, 0, 0, k)


def test_expose_hidden_passes_state():
    """With expose_hidden, h_T/c_T tops fed back as h_0/c_0 bottoms equal the carried state."""
    text = _recurrent_text("LSTM", expose_hidden=True)
    x, cont, _ = _bottoms(1, 2)
    cont.data[...] = 1
    h0 = Blob((1, 2, NUM_OUTPUT), dtype=np.float64)
    c0 = Blob((1, 2, NUM_OUTPUT), dtype=np.float64)
    backend.set_random_seed(3)
    exposed = make_layer(text, phase="TEST")
    top = empty_blobs(3)
    exposed.SetUp([x, cont, h0, c0], top)
    backend.set_random_seed(3)
    carried = make_layer(_recurrent_text("LSTM"), phase="TEST")
    ctop = empty_blobs(1)
    carried.SetUp([x, cont], ctop)
    for _ in range(3):
        exposed.Forward([x, cont, h0, c0], top)
        carried.Forward([x, cont], ctop)
        np.testing.assert_allclose(top[0].data, ctop[0].data, rtol=1e-12)
        h0.data[...] = top[1].data
        c0.data[...] = top[2].data


def test_blob_count_rules():
    layer = make_layer(_recurrent_text("RNN", expose_hidden=True), phase="TEST")
    assert (layer.min_bottom, layer.max_bottom, layer.exact_num_top) == (3, 4, 2)
    layer = make_layer(_recurrent_text("LSTM", expose_hidden=True), phase="TEST")
    assert (layer.min_bottom, layer.max_bottom, layer.exact_num_top) == (4, 5, 3)
    layer = make_layer(_recurrent_text("LSTM"), phase="TEST")
    assert not layer.allow_force_backward(1) and layer.allow_force_backward(0)
    with pytest.raises(LayerError, match="at least 2 bottom"):
        layer.SetUp([gaussian_blob((1, 2, 3))], empty_blobs(1))


def test_num_output_must_be_positive():
    layer = make_layer('type: "RNN"', phase="TEST")
    x, cont, _ = _bottoms(1, 2)
    with pytest.raises(LayerError, match="num_output must be positive"):
        layer.SetUp([x, cont], empty_blobs(1))


def test_timesteps_may_not_change():
    layer = make_layer(_recurrent_text("RNN"), phase="TEST")
    x, cont, _ = _bottoms(2, 2)
    top = empty_blobs(1)
    layer.SetUp([x, cont], top)
    x3, cont3, _ = _bottoms(3, 2)
    with pytest.raises(LayerError, match="input number of timesteps changed"):
        layer.Forward([x3, cont3], top)
    # The number of streams may change.
    x2, cont2, _ = _bottoms(2, 4)
    layer.Forward([x2, cont2], top)
    assert top[0].shape == (2, 4, NUM_OUTPUT)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
def test_gpu_matches_cpu(kind):
    x, cont, _ = _bottoms(3, 2)
    cont.data.reshape(-1)[...] = [0, 0, 1, 1, 1, 0]
    results = {}
    for m in (backend.CPU, backend.GPU):
        with backend.using_mode(m):
            backend.set_random_seed(11)
            layer = make_layer(_recurrent_text(kind), phase="TEST")
            top = empty_blobs(1)
            layer.SetUp([x, cont], top)
            layer.Forward([x, cont], top)
            top[0].diff[...] = np.linspace(-1, 1, top[0].count).reshape(top[0].shape)
            for b in layer.blobs:
                b.diff[...] = 0
            layer.Backward(top, [True, False], [x, cont])
            results[m] = (top[0].data.copy(), x.diff.copy(), [b.diff.copy() for b in layer.blobs])
    cpu, gpu = results[backend.CPU], results[backend.GPU]
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-5, atol=1e-10)
    np.testing.assert_allclose(gpu[1], cpu[1], rtol=1e-5, atol=1e-10)
    for a, b in zip(gpu[2], cpu[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-10)

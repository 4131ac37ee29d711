"""Caffe's recurrent layers: RNN and LSTM (recurrent_layer.cpp, rnn_layer.cpp,
lstm_layer.cpp) and LSTMUnit (lstm_unit_layer.cpp).

RNN and LSTM unroll the recurrence over the T timesteps of their input into an
inner :class:`engine.core.net.Net` built from a NetParameter exactly as Caffe's
``FillUnrolledNet`` writes it (same layer names, prefixed with the layer's own
name, and the same blob names), plus one "pseudo-loss" Reduction per output so
that the inner net backpropagates.  The inner net's unshared params become
this layer's blobs; its input x, cont and x_static blobs share the bottoms'
memory and the output shares the top's.  Forward copies the hidden state of
the last timestep into the first (h_T -> h_0, c_T -> c_0) unless
``expose_hidden`` makes them bottoms and tops.  The inner net is
``layer.unrolled_net``.
"""
import numpy as np

from engine.core.errors import LayerError
from engine.core.layers.base import Layer, c_int, top_count
from engine.core.layers.registry import register_layer
from engine.core.log import check_failed as _check_failed
from engine.core.log import layer_log
from engine.proto import caffe_pb2


def _layer(net_param, type_=None, name=None, template=None):
    lp = net_param.layer.add()
    if template is not None:
        lp.CopyFrom(template)
    if type_ is not None:
        lp.type = type_
    if name is not None:
        lp.name = name
    return lp




class RecurrentLayer(Layer):
    """RecurrentLayer: the unrolled-net machinery shared by RNN and LSTM."""

    def flops(self, bottoms, tops):
        inner = getattr(self, "unrolled_net", None)
        if inner is None:
            return 0, 0, False, "unrolled net not built"
        macc = flops = 0
        counted = True
        for i, layer in enumerate(inner.layers):
            m, f, c, _ = layer.flops(inner.bottom_vecs[i], inner.top_vecs[i])
            macc, flops, counted = macc + m, flops + f, counted and c
        return macc, flops, counted, "Σ unrolled net"

    def __init__(self, param, dtype=np.float32, model_dir=None):
        super().__init__(param, dtype)
        self.unrolled_net = None
        self.T = self.N = 0
        self.static_input = False
        self.expose_hidden = bool(self.layer_param.recurrent_param.expose_hidden)

    # blob-count rules depend on expose_hidden (recurrent_layer.hpp)
    @property
    def min_bottom(self):
        n = 2
        if self.layer_param.recurrent_param.expose_hidden:
            n += len(self.recurrent_input_blob_names())
        return n

    @property
    def max_bottom(self):
        return self.min_bottom + 1

    @property
    def exact_num_top(self):
        n = 1
        if self.layer_param.recurrent_param.expose_hidden:
            n += len(self.recurrent_output_blob_names())
        return n

    def allow_force_backward(self, bottom_index):
        # Can't propagate to sequence continuation indicators.
        return bottom_index != 1

    # subclasses --------------------------------------------------------------
    def fill_unrolled_net(self, net_param):
        raise NotImplementedError

    def recurrent_input_blob_names(self):
        raise NotImplementedError

    def recurrent_output_blob_names(self):
        raise NotImplementedError

    def recurrent_input_shapes(self):
        raise NotImplementedError

    def output_blob_names(self):
        raise NotImplementedError

    # setup -------------------------------------------------------------------
    def layer_setup(self, bottom, top):
        from engine.core.net import Net
        self._check_bottom0(bottom)
        self.T = bottom[0].shape[0]
        self.N = bottom[0].shape[1]
        layer_log.info("Initializing recurrent layer: assuming input batch contains %d timesteps "
                       "of %d independent streams.", self.T, self.N)
        self._check_cont(bottom)

        self.expose_hidden = bool(self.layer_param.recurrent_param.expose_hidden)
        output_names = self.output_blob_names()
        recur_input_names = self.recurrent_input_blob_names()
        recur_output_names = self.recurrent_output_blob_names()
        num_recur = len(recur_input_names)
        if num_recur != len(recur_output_names):
            raise self.error(_check_failed("num_recur_blobs == recur_output_names.size()",
                                           num_recur, len(recur_output_names)))
        num_hidden_exposed = num_recur if self.expose_hidden else 0
        self.static_input = len(bottom) > 2 + num_hidden_exposed
        if self.static_input:
            if not bottom[2].num_axes >= 1:
                raise self.error(_check_failed("bottom[2]->num_axes() >= 1", bottom[2].num_axes, 1))
            if bottom[2].shape[0] != self.N:
                raise self.error(_check_failed("N_ == bottom[2]->shape(0)", self.N, bottom[2].shape[0]))

        net_param, pseudo_losses = self._unrolled_param(bottom, output_names)
        self.unrolled_net_param = net_param

        try:
            net = Net.from_param(net_param, dtype=self.dtype)
        except LayerError:
            raise
        except Exception as e:
            raise self.error("building the unrolled net failed: %s" % e) from e
        net.debug_info = bool(self.layer_param.recurrent_param.debug_info)
        self.unrolled_net = net
        self._bind_blobs(net, top, output_names, recur_input_names, recur_output_names, num_hidden_exposed)
        self._adopt_params(net)

        # No backpropagation across batches: the recurrent outputs' diffs stay 0.
        for b in self.recur_output_blobs:
            b.mut_diff()[...] = 0

        layer_names = net.layer_names
        self.last_layer_index = len(layer_names) - 1 - len(pseudo_losses)
        for j, i in enumerate(range(self.last_layer_index + 1, len(layer_names))):
            if layer_names[i] != pseudo_losses[j]:
                raise self.error(_check_failed("layer_names[i] == pseudo_losses[j]",
                                               layer_names[i], pseudo_losses[j]))

    def _unrolled_param(self, bottom, output_names):
        """The unrolled NetParameter: inputs x, cont (and x_static), the type's
        FillUnrolledNet, names prefixed with this layer's, a pseudo-loss per output."""
        net_param = caffe_pb2.NetParameter()
        inp = _layer(net_param, "Input")
        inp.top.append("x")
        inp.input_param.shape.add().dim.extend(bottom[0].shape)
        inp.top.append("cont")
        inp.input_param.shape.add().dim.extend(bottom[1].shape)
        if self.static_input:
            inp.top.append("x_static")
            inp.input_param.shape.add().dim.extend(bottom[2].shape)

        self.fill_unrolled_net(net_param)

        # Prefix the inner layers' names with this layer's name.
        if self.layer_param.name:
            for lp in net_param.layer:
                lp.name = self.layer_param.name + "_" + lp.name

        # Pseudo-losses on every output, so that the inner net backpropagates
        # (force_backward would also reach the cont input).
        pseudo_losses = []
        for name in output_names:
            lp = _layer(net_param, "Reduction", name + "_pseudoloss")
            lp.bottom.append(name)
            lp.top.append(name + "_pseudoloss")
            lp.loss_weight.append(1)
            pseudo_losses.append(lp.name)
        return net_param, pseudo_losses

    def _bind_blobs(self, net, top, output_names, recur_input_names, recur_output_names, num_hidden_exposed):
        """The unrolled net's input, recurrent and output blobs this layer reads and writes."""
        self.x_input_blob = net.blob_by_name("x")
        self.cont_input_blob = net.blob_by_name("cont")
        self.x_static_input_blob = net.blob_by_name("x_static") if self.static_input else None
        self.recur_input_blobs = [net.blob_by_name(n) for n in recur_input_names]
        self.recur_output_blobs = [net.blob_by_name(n) for n in recur_output_names]
        if len(top) - num_hidden_exposed != len(output_names):
            raise self.error(_check_failed("top.size() - num_hidden_exposed == output_names.size()",
                                           len(top) - num_hidden_exposed, len(output_names),
                                           "OutputBlobNames must provide an output blob name for "
                                           "each top."))
        self.output_blobs = [net.blob_by_name(n) for n in output_names]
        n_inputs = len(net.input_blob_indices)
        expected = 2 + len(recur_input_names) + int(self.static_input)
        if n_inputs != expected:
            raise self.error(_check_failed("2 + num_recur_blobs + static_input_ == "
                                           "unrolled_net_->input_blobs().size()", expected, n_inputs))


    def _adopt_params(self, net):
        """This layer's params: the inner net's params that are not shared copies."""
        params = net.all_params
        owners = net.param_owners
        names = net.param_display_names
        self.blobs = []
        for i, p in enumerate(params):
            if owners[i] == -1:
                layer_log.info("Adding parameter %d: %s", i, names[i])
                self.blobs.append(p)
        for li, layer in enumerate(net.layers):
            for j in range(len(layer.blobs)):
                if not layer.get_param_propagate_down(j):
                    raise self.error(_check_failed("unrolled_net_->layers()[i]->param_propagate_down(j)",
                                                   message="param_propagate_down not set for layer "
                                                           "%d, param %d" % (li, j)))
        self.param_propagate_down = [True] * len(self.blobs)

    def _check_bottom0(self, bottom):
        if not bottom[0].num_axes >= 2:
            raise self.error(_check_failed("bottom[0]->num_axes() >= 2", bottom[0].num_axes, 2,
                                           "bottom[0] must have at least 2 axes -- "
                                           "(#timesteps, #streams, ...)"))

    def _check_cont(self, bottom):
        """bottom[1], the sequence continuation indicators: T x N."""
        if bottom[1].num_axes != 2:
            raise self.error(_check_failed("bottom[1]->num_axes() == 2", bottom[1].num_axes, 2,
                                           "bottom[1] must have exactly 2 axes -- (#timesteps, #streams)"))
        if bottom[1].shape[0] != self.T:
            raise self.error(_check_failed("T_ == bottom[1]->shape(0)", self.T, bottom[1].shape[0]))
        if bottom[1].shape[1] != self.N:
            raise self.error(_check_failed("N_ == bottom[1]->shape(1)", self.N, bottom[1].shape[1]))

    def reshape(self, bottom, top):
        self._check_bottom0(bottom)
        if bottom[0].shape[0] != self.T:
            raise self.error(_check_failed("T_ == bottom[0]->shape(0)", self.T, bottom[0].shape[0],
                                           "input number of timesteps changed"))
        self.N = bottom[0].shape[1]
        self._check_cont(bottom)
        self.x_input_blob.reshape_like(bottom[0])
        self.cont_input_blob.reshape(bottom[1].shape)
        if self.static_input:
            self.x_static_input_blob.reshape_like(bottom[2])
        shapes = self.recurrent_input_shapes()
        for b, shape in zip(self.recur_input_blobs, shapes):
            b.reshape(shape)
        self.unrolled_net.Reshape()
        self.x_input_blob.share_data(bottom[0])
        self.x_input_blob.share_diff(bottom[0])
        self.cont_input_blob.share_data(bottom[1])
        if self.static_input:
            self.x_static_input_blob.share_data(bottom[2])
            self.x_static_input_blob.share_diff(bottom[2])
        if self.expose_hidden:
            offset = 2 + int(self.static_input)
            for j, i in enumerate(range(offset, len(bottom))):
                if self.recur_input_blobs[j].shape != bottom[i].shape:
                    raise self.error("bottom[%d] shape must match hidden state input shape: %s"
                                     % (i, self.recur_input_blobs[j].shape_string()))
                self.recur_input_blobs[j].share_data(bottom[i])
        for i, out in enumerate(self.output_blobs):
            top[i].reshape_like(out)
            top[i].share_data(out)
            top[i].share_diff(out)
        if self.expose_hidden:
            offset = len(self.output_blobs)
            for j, i in enumerate(range(offset, len(top))):
                top[i].reshape_like(self.recur_output_blobs[j])

    # unrolling, shared by RNN and LSTM (their FillUnrolledNet prologues) ------------
    def _templates(self, ip_outputs):
        """The layer templates of the unrolled net: ``hidden`` (InnerProduct over axis 2 with
        ``ip_outputs`` outputs, no bias), ``biased`` (the same with the bias), an Eltwise SUM,
        a Scale over axis 0 and a Slice over axis 0."""
        rp = self.layer_param.recurrent_param
        num_output = c_int(rp.num_output)
        if not num_output > 0:
            raise self.error(_check_failed("num_output > 0", num_output, 0, "num_output must be positive"))
        hidden = caffe_pb2.LayerParameter()
        hidden.type = "InnerProduct"
        hidden.inner_product_param.num_output = c_int(ip_outputs) & 0xFFFFFFFF   # set_num_output(int)
        hidden.inner_product_param.bias_term = False
        hidden.inner_product_param.axis = 2
        hidden.inner_product_param.weight_filler.CopyFrom(rp.weight_filler)
        biased = caffe_pb2.LayerParameter()
        biased.CopyFrom(hidden)
        biased.inner_product_param.bias_term = True
        biased.inner_product_param.bias_filler.CopyFrom(rp.bias_filler)
        sum_p = caffe_pb2.LayerParameter()
        sum_p.type = "Eltwise"
        sum_p.eltwise_param.operation = caffe_pb2.EltwiseParameter.SUM
        scale_p = caffe_pb2.LayerParameter()
        scale_p.type = "Scale"
        scale_p.scale_param.axis = 0
        slice_p = caffe_pb2.LayerParameter()
        slice_p.type = "Slice"
        slice_p.slice_param.axis = 0
        return hidden, biased, sum_p, scale_p, slice_p

    def _add_input_transform(self, net_param, hidden, biased, slice_p, weight, bias):
        """cont_slice; ``x_transform``: WEIGHT_x = WEIGHT * x + BIAS; with a static input
        WEIGHT_x_static = WEIGHT_static * x_static (reshaped to 1 x N x D); and the slice of
        WEIGHT_x per timestep.  Returns (cont_slice, x_slice): the loop adds their tops."""
        cont_slice = _layer(net_param, template=slice_p, name="cont_slice")
        cont_slice.bottom.append("cont")
        cont_slice.slice_param.axis = 0

        xt = _layer(net_param, template=biased, name="x_transform")
        xt.param.add().name = weight
        xt.param.add().name = bias
        xt.bottom.append("x")
        xt.top.append(weight + "_x")
        xt.propagate_down.append(True)

        if self.static_input:
            xs = _layer(net_param, template=hidden, name=weight + "_x_static")
            xs.inner_product_param.axis = 1
            xs.param.add().name = weight + "_static"
            xs.bottom.append("x_static")
            xs.top.append(weight + "_x_static_preshape")
            xs.propagate_down.append(True)

            rs = _layer(net_param, "Reshape", weight + "_x_static_reshape")
            rs.reshape_param.shape.dim.extend([1, -1, xs.inner_product_param.num_output])
            rs.bottom.append(weight + "_x_static_preshape")
            rs.top.append(weight + "_x_static")

        x_slice = _layer(net_param, template=slice_p, name=weight + "_x_slice")
        x_slice.bottom.append(weight + "_x")
        return cont_slice, x_slice

    def _add_step_input(self, net_param, step, tm1s, ts, w_h, w_x, transform_name, sum_name,
                        sum_top):
        """The start of timestep t: its tops of the cont and ``w_x``_x slices; h_conted_{t-1}
        := cont_t * h_{t-1} (the hidden state, reset where a sequence starts); ``w_h``_h_{t-1}
        := ``w_h`` * h_conted_{t-1} (layer ``transform_name``); ``sum_top`` := ``w_h``_h_{t-1}
        + ``w_x``_x_t [+ ``w_x``_x_static] (layer ``sum_name``). ``step``: the two slice
        layers and the Scale, hidden InnerProduct and Eltwise SUM templates."""
        cont_slice, x_slice, scale_p, hidden, sum_p = step
        cont_slice.top.append("cont_" + ts)
        x_slice.top.append(w_x + "_x_" + ts)
        ch = _layer(net_param, template=scale_p, name="h_conted_" + tm1s)
        ch.bottom.extend(["h_" + tm1s, "cont_" + ts])
        ch.top.append("h_conted_" + tm1s)

        w = _layer(net_param, template=hidden, name=transform_name)
        w.param.add().name = w_h
        w.bottom.append("h_conted_" + tm1s)
        w.top.append(w_h + "_h_" + tm1s)
        w.inner_product_param.axis = 2

        s = _layer(net_param, template=sum_p, name=sum_name)
        s.bottom.extend([w_h + "_h_" + tm1s, w_x + "_x_" + ts])
        if self.static_input:
            s.bottom.append(w_x + "_x_static")
        s.top.append(sum_top)

    def reset(self):
        """RecurrentLayer::Reset: zero the hidden state carried to the next batch."""
        for b in self.recur_output_blobs:
            b.mut_data()[...] = 0

    Reset = reset

    def _share_inner_weights(self):
        net = self.unrolled_net
        fn = getattr(net, "ShareWeights", None) or getattr(net, "share_weights", None) \
            or net._share_weights
        fn()

    def forward(self, bottom, top):
        if self.phase == caffe_pb2.TEST:
            # Re-share the inner params: ShareTrainedLayersWith may have replaced
            # the owners' memory (Caffe's "hacky fix for test time").
            self._share_inner_weights()
        if not self.expose_hidden:
            for src, dst in zip(self.recur_output_blobs, self.recur_input_blobs):
                if src.count != dst.count:
                    raise self.error(_check_failed("count == recur_output_blobs_[i]->count()",
                                                   dst.count, src.count))
                dst.mut_data().reshape(-1)[...] = src.get_data().reshape(-1)
        self.unrolled_net.ForwardTo(self.last_layer_index)
        if self.expose_hidden:
            offset = len(self.output_blobs)
            for j, i in enumerate(range(offset, len(top))):
                top[i].share_data(self.recur_output_blobs[j])

    def backward(self, top, propagate_down, bottom):
        # As Caffe: the inner net backpropagates to its inputs and params unconditionally.
        self.unrolled_net.BackwardFrom(self.last_layer_index)


def _time_concat(name, top):
    """The Concat of the per-timestep outputs along time (axis 0); the loop adds its
    bottoms and it goes in after the loop's layers."""
    concat = caffe_pb2.LayerParameter()
    concat.name = name
    concat.type = "Concat"
    concat.top.append(top)
    concat.concat_param.axis = 0
    return concat


@register_layer
class RNNLayer(RecurrentLayer):
    """RNN: h_t = tanh(W_hh h_{t-1} + W_xh x_t + b_h), o_t = tanh(W_ho h_t + b_o)."""
    type = "RNN"
    category = "recurrent"
    summary = "Vanilla recurrent layer (unrolled net inside)."
    param_fields = ("recurrent_param",)

    def recurrent_input_blob_names(self):
        return ["h_0"]

    def recurrent_output_blob_names(self):
        return ["h_%d" % self.T]

    def recurrent_input_shapes(self):
        return [(1, self.N, c_int(self.layer_param.recurrent_param.num_output))]

    def output_blob_names(self):
        return ["o"]

    def fill_unrolled_net(self, net_param):
        num_output = c_int(self.layer_param.recurrent_param.num_output)
        hidden, biased, sum_p, scale_p, slice_p = self._templates(num_output)
        tanh_p = caffe_pb2.LayerParameter()
        tanh_p.type = "TanH"

        inp = _layer(net_param, "Input")
        inp.top.append("h_0")
        inp.input_param.shape.add().dim.extend(self.recurrent_input_shapes()[0])
        # W_xh_x = W_xh * x + b_h (and W_xh_x_static = W_xh_static * x_static)
        cont_slice, x_slice = self._add_input_transform(net_param, hidden, biased, slice_p, "W_xh", "b_h")

        concat = _time_concat("o_concat", "o")
        step = (cont_slice, x_slice, scale_p, hidden, sum_p)
        for t in range(1, self.T + 1):
            tm1s, ts = str(t - 1), str(t)
            # h_neuron_input_t := W_hh * h_conted_{t-1} + W_xh_x_t [+ W_xh_x_static]
            self._add_step_input(net_param, step, tm1s, ts, "W_hh", "W_xh",
                                 "W_hh_h_" + tm1s, "h_input_sum_" + ts, "h_neuron_input_" + ts)
            # h_t := tanh(h_neuron_input_t)
            hn = _layer(net_param, template=tanh_p, name="h_neuron_" + ts)
            hn.bottom.append("h_neuron_input_" + ts)
            hn.top.append("h_" + ts)

            # W_ho_h_t := W_ho * h_t + b_o
            wo = _layer(net_param, template=biased, name="W_ho_h_" + ts)
            wo.param.add().name = "W_ho"
            wo.param.add().name = "b_o"
            wo.bottom.append("h_" + ts)
            wo.top.append("W_ho_h_" + ts)
            wo.inner_product_param.axis = 2

            # o_t := tanh(W_ho_h_t)
            on = _layer(net_param, template=tanh_p, name="o_neuron_" + ts)
            on.bottom.append("W_ho_h_" + ts)
            on.top.append("o_" + ts)
            concat.bottom.append("o_" + ts)

        net_param.layer.add().CopyFrom(concat)


@register_layer
class LSTMLayer(RecurrentLayer):
    """LSTM ("Learning to Execute" variant, no peepholes), unrolled over T timesteps."""
    type = "LSTM"
    category = "recurrent"
    summary = "Long short-term memory (unrolled net inside)."
    param_fields = ("recurrent_param",)

    def recurrent_input_blob_names(self):
        return ["h_0", "c_0"]

    def recurrent_output_blob_names(self):
        return ["h_%d" % self.T, "c_T"]

    def recurrent_input_shapes(self):
        d = c_int(self.layer_param.recurrent_param.num_output)
        return [(1, self.N, d), (1, self.N, d)]

    def output_blob_names(self):
        return ["h"]

    def fill_unrolled_net(self, net_param):
        num_output = c_int(self.layer_param.recurrent_param.num_output)
        hidden, biased, sum_p, scale_p, slice_p = self._templates(num_output * 4)
        split_p = caffe_pb2.LayerParameter()
        split_p.type = "Split"

        shapes = self.recurrent_input_shapes()
        inp = _layer(net_param, "Input")
        inp.top.append("c_0")
        inp.input_param.shape.add().dim.extend(shapes[0])
        inp.top.append("h_0")
        inp.input_param.shape.add().dim.extend(shapes[1])
        # W_xc_x = W_xc * x + b_c (and W_xc_x_static = W_xc_static * x_static)
        cont_slice, x_slice = self._add_input_transform(net_param, hidden, biased, slice_p, "W_xc", "b_c")

        concat = _time_concat("h_concat", "h")
        step = (cont_slice, x_slice, scale_p, hidden, sum_p)
        for t in range(1, self.T + 1):
            tm1s, ts = str(t - 1), str(t)
            # gate_input_t := W_hc * h_conted_{t-1} + W_xc_x_t [+ W_xc_x_static]
            self._add_step_input(net_param, step, tm1s, ts, "W_hc", "W_xc",
                                 "transform_" + ts, "gate_input_" + ts, "gate_input_" + ts)

            # c_t, h_t := LSTMUnit(c_{t-1}, gate_input_t, cont_t)
            u = _layer(net_param, "LSTMUnit")
            u.bottom.extend(["c_" + tm1s, "gate_input_" + ts, "cont_" + ts])
            u.top.extend(["c_" + ts, "h_" + ts])
            u.name = "unit_" + ts
            concat.bottom.append("h_" + ts)

        cp = _layer(net_param, template=split_p)
        cp.bottom.append("c_%d" % self.T)
        cp.top.append("c_T")
        net_param.layer.add().CopyFrom(concat)


# =========================================================================== LSTMUnit
def _sigmoid(xp, x):
    return 1.0 / (1.0 + xp.exp(-x))


def _tanh(xp, x):
    # lstm_unit_layer.cpp: tanh(x) = 2 * sigmoid(2x) - 1
    return 2.0 * _sigmoid(xp, 2.0 * x) - 1.0


@register_layer
class LSTMUnitLayer(Layer):
    """LSTMUnit: one LSTM timestep on (c_{t-1}, gate inputs [i f o g], cont_t) -> (c_t, h_t)."""
    type = "LSTMUnit"
    category = "recurrent"
    summary = "One LSTM time step."
    param_fields = ()
    def flops(self, bottoms, tops):
        return 0, top_count(tops) * 9, True, "out × 9"
    exact_num_bottom = 3
    exact_num_top = 2

    def allow_force_backward(self, bottom_index):
        # Can't propagate to sequence continuation indicators.
        return bottom_index != 2

    def reshape(self, bottom, top):
        num_instances = bottom[0].shape[1] if bottom[0].num_axes > 1 else None
        for i, b in enumerate(bottom):
            want = 2 if i == 2 else 3
            if b.num_axes != want:
                raise self.error(_check_failed("%d == bottom[%d]->num_axes()" % (want, i), want, b.num_axes))
            if b.shape[0] != 1:
                raise self.error(_check_failed("1 == bottom[%d]->shape(0)" % i, 1, b.shape[0]))
            if b.shape[1] != num_instances:
                raise self.error(_check_failed("num_instances == bottom[%d]->shape(1)" % i,
                                               num_instances, b.shape[1]))
        self.hidden_dim = bottom[0].shape[2]
        if bottom[1].shape[2] != 4 * self.hidden_dim:
            raise self.error(_check_failed("4 * hidden_dim_ == bottom[1]->shape(2)",
                                           4 * self.hidden_dim, bottom[1].shape[2]))
        top[0].reshape_like(bottom[0])
        top[1].reshape_like(bottom[0])

    def _gates(self, xp, X, cont):
        d = self.hidden_dim
        i = _sigmoid(xp, X[:, :d])
        f = _sigmoid(xp, X[:, d:2 * d])
        f = xp.where(cont == 0, xp.zeros_like(f), cont * f)
        o = _sigmoid(xp, X[:, 2 * d:3 * d])
        g = _tanh(xp, X[:, 3 * d:])
        return i, f, o, g

    def forward(self, bottom, top):
        xp = self.xp
        n, d = bottom[0].shape[1], self.hidden_dim
        c_prev = bottom[0].get_data().reshape(n, d)
        X = bottom[1].get_data().reshape(n, 4 * d)
        cont = bottom[2].get_data().reshape(n, 1)
        i, f, o, g = self._gates(xp, X, cont)
        c = f * c_prev + i * g
        top[0].mut_data()[...] = c.reshape(top[0].shape)
        top[1].mut_data()[...] = (o * _tanh(xp, c)).reshape(top[1].shape)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[2]:
            raise self.error("Cannot backpropagate to sequence indicators.")
        if not propagate_down[0] and not propagate_down[1]:
            return
        xp = self.xp
        n, d = bottom[0].shape[1], self.hidden_dim
        c_prev = bottom[0].get_data().reshape(n, d)
        X = bottom[1].get_data().reshape(n, 4 * d)
        cont = bottom[2].get_data().reshape(n, 1)
        c = top[0].get_data().reshape(n, d)
        c_diff = top[0].get_diff().reshape(n, d)
        h_diff = top[1].get_diff().reshape(n, d)
        i, f, o, g = self._gates(xp, X, cont)
        tanh_c = _tanh(xp, c)
        c_term = c_diff + h_diff * o * (1 - tanh_c * tanh_c)
        # Caffe writes both bottom diffs whenever either is asked for.
        bottom[0].mut_diff()[...] = (c_term * f).reshape(bottom[0].shape)
        x_diff = xp.concatenate([c_term * g * i * (1 - i),
                                 c_term * c_prev * f * (1 - f),
                                 h_diff * tanh_c * o * (1 - o),
                                 c_term * i * (1 - g * g)], axis=1)
        bottom[1].mut_diff()[...] = x_diff.reshape(bottom[1].shape)

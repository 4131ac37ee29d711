"""Every exportable Caffe layer type, the traps included, exported to ONNX (opset 13 and the
newest onnxruntime runs) and verified blob by blob against the engine by onnxruntime."""
import numpy as np
import pytest

from tests.ports.onnx_helpers import OPSETS, assert_verified, export_and_verify, input_layers, make_net

W = 'weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "constant" value: 0.1 }'


def _L(name, type_, bottoms, tops, params=""):
    b = " ".join('bottom: "%s"' % x for x in ([bottoms] if isinstance(bottoms, str) else bottoms))
    t = " ".join('top: "%s"' % x for x in ([tops] if isinstance(tops, str) else tops))
    return 'layer { name: "%s" type: "%s" %s %s %s }' % (name, type_, b, t, params)


def _pool(name, bottom, pool, k, s, p=0, extra=""):
    return _L(name, "Pooling", bottom, name, "pooling_param { pool: %s kernel_size: %d stride: %d pad: %d %s }"
              % (pool, k, s, p, extra))


# (id, {input: shape}, layers text, options)
CASES = [
    # ---------------------------------------------------------------- convolution
    ("conv_group_dilation_pad_stride", {"data": (2, 4, 9, 8)},
     _L("conv", "Convolution", "data", "conv", "convolution_param { num_output: 6 kernel_size: 3 group: 2 "
        "dilation: 2 pad: 1 stride: 2 %s }" % W), {}),
    ("conv_rect_nobias", {"data": (1, 3, 8, 7)},
     _L("conv", "Convolution", "data", "conv", "convolution_param { num_output: 5 kernel_h: 3 kernel_w: 2 "
        "stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 0 bias_term: false %s }" % W), {}),
    ("conv_depthwise_1x1", {"data": (1, 4, 5, 5)},
     _L("dw", "Convolution", "data", "dw", "convolution_param { num_output: 4 group: 4 kernel_size: 3 pad: 1 %s }"
        % W) + _L("pw", "Convolution", "dw", "pw", "convolution_param { num_output: 3 kernel_size: 1 %s }" % W), {}),
    ("conv_3d", {"data": (1, 2, 4, 5, 6)},
     _L("conv", "Convolution", "data", "conv", "convolution_param { num_output: 3 kernel_size: 3 pad: 1 "
        "stride: 1 stride: 2 stride: 1 %s }" % W), {}),
    ("conv_channel_axis_2", {"data": (2, 3, 4, 6, 6)},
     _L("conv", "Convolution", "data", "conv", "convolution_param { num_output: 2 kernel_size: 3 axis: 2 %s }" % W),
     {}),
    # a negative pad (caffe.proto's uint32 of 2^31 and up, -1 in Caffe's int): a crop of the input
    ("conv_negative_pad", {"data": (2, 3, 9, 8)},
     _L("conv", "Convolution", "data", "conv", "convolution_param { num_output: 4 kernel_size: 3 stride: 2 "
        "pad_h: 4294967295 pad_w: 1 %s }" % W), {}),
    ("deconv_negative_pad", {"data": (1, 3, 4, 5)},
     _L("deconv", "Deconvolution", "data", "deconv", "convolution_param { num_output: 2 kernel_size: 3 "
        "stride: 2 pad: 4294967295 %s }" % W), {}),
    ("im2col_negative_pad", {"data": (1, 2, 6, 5)},
     _L("cols", "Im2col", "data", "cols", "convolution_param { kernel_size: 2 stride: 2 pad: 4294967295 }"), {}),
    ("pool_negative_pad", {"data": (2, 3, 9, 10)},
     _L("pmax", "Pooling", "data", "pmax", "pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 4294967295 }")
     + _L("pave", "Pooling", "data", "pave", "pooling_param { pool: AVE kernel_size: 3 stride: 2 "
          "pad_h: 4294967295 pad_w: 1 }"), {}),
    ("conv_two_bottoms", {"a": (1, 2, 5, 5), "b": (1, 2, 5, 5)},
     _L("conv", "Convolution", ["a", "b"], ["ca", "cb"], "convolution_param { num_output: 3 kernel_size: 3 %s }"
        % W), {}),
    ("deconv_groups_stride_pad", {"data": (2, 4, 5, 4)},
     _L("up", "Deconvolution", "data", "up", "convolution_param { num_output: 6 group: 2 kernel_size: 4 stride: 2 "
        "pad: 1 %s }" % W), {}),
    ("deconv_fcn_bilinear_like", {"data": (1, 3, 4, 4)},
     _L("up", "Deconvolution", "data", "up", "convolution_param { num_output: 3 group: 3 kernel_size: 4 stride: 2 "
        "bias_term: false weight_filler { type: \"bilinear\" } }"), {"params": False}),
    ("deconv_dilation_rect", {"data": (1, 2, 3, 4)},
     _L("up", "Deconvolution", "data", "up", "convolution_param { num_output: 3 kernel_h: 3 kernel_w: 2 "
        "stride_h: 2 stride_w: 3 pad_h: 1 dilation: 2 %s }" % W), {}),
    ("im2col", {"data": (2, 3, 6, 5)},
     _L("cols", "Im2col", "data", "cols", "convolution_param { kernel_size: 3 pad: 1 stride: 2 dilation: 1 }"), {}),
    # ---------------------------------------------------------------- pooling (the traps)
    ("max_pool_ceil", {"data": (1, 2, 6, 6)}, _pool("pool", "data", "MAX", 3, 2), {}),
    # pad + ceil: Caffe's pooled size 3, not ceil's 4 (the 4th window would start in the padding)
    ("max_pool_pad_ceil_last_window_in_padding", {"data": (2, 3, 5, 5)}, _pool("pool", "data", "MAX", 2, 2, 1), {}),
    ("ave_pool_pad_ceil_divisor", {"data": (2, 3, 6, 6)}, _pool("pool", "data", "AVE", 3, 2, 1), {}),
    ("ave_pool_pad_ceil_clipped_window", {"data": (1, 2, 5, 5)}, _pool("pool", "data", "AVE", 2, 2, 1), {}),
    ("ave_pool_no_pad_ceil", {"data": (1, 2, 7, 7)}, _pool("pool", "data", "AVE", 3, 2), {}),
    ("ave_pool_rect_pad", {"data": (1, 2, 7, 6)},
     _L("pool", "Pooling", "data", "pool", "pooling_param { pool: AVE kernel_h: 3 kernel_w: 2 stride_h: 2 "
        "stride_w: 1 pad_h: 1 pad_w: 1 }"), {}),
    ("max_pool_floor_round_mode", {"data": (1, 2, 7, 7)},
     _pool("pool", "data", "MAX", 3, 2, 1, "round_mode: FLOOR"), {}),
    ("max_pool_mask_top", {"data": (2, 2, 5, 5)},
     _L("pool", "Pooling", "data", ["pool", "mask"], "pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }"),
     {}),
    ("global_pools", {"data": (2, 3, 5, 4)},
     _L("gave", "Pooling", "data", "gave", "pooling_param { pool: AVE global_pooling: true }")
     + _L("gmax", "Pooling", "data", "gmax", "pooling_param { pool: MAX global_pooling: true }"), {}),
    ("stochastic_pool_test", {"data": (1, 2, 7, 7)},
     _L("pos", "AbsVal", "data", "pos") + _pool("pool", "pos", "STOCHASTIC", 3, 2), {}),
    ("spp", {"data": (2, 2, 7, 6)},
     _L("spp", "SPP", "data", "spp", "spp_param { pyramid_height: 3 pool: MAX }")
     + _L("spp1", "SPP", "data", "spp1", "spp_param { pyramid_height: 1 pool: AVE }"), {}),
    # ---------------------------------------------------------------- normalization
    ("lrn_across", {"data": (2, 7, 3, 3)},
     _L("norm", "LRN", "data", "norm", "lrn_param { local_size: 5 alpha: 0.5 beta: 0.75 k: 2 }"), {}),
    ("lrn_within", {"data": (2, 3, 6, 5)},
     _L("norm", "LRN", "data", "norm", "lrn_param { local_size: 3 alpha: 0.9 beta: 0.75 norm_region: "
        "WITHIN_CHANNEL }"), {}),
    ("batchnorm_scale_factor", {"data": (2, 3, 4, 4)},
     _L("bn", "BatchNorm", "data", "data", "batch_norm_param { use_global_stats: true eps: 0.001 }")
     + _L("sc", "Scale", "data", "data", "scale_param { bias_term: true }"), {"bn_scale_factor": 999.982}),
    ("batchnorm_scale_factor_one", {"data": (2, 3, 4, 4)},
     _L("bn", "BatchNorm", "data", "bn", "batch_norm_param { use_global_stats: true }"), {"bn_scale_factor": 1}),
    ("batchnorm_scale_factor_zero", {"data": (2, 3, 4)},
     _L("bn", "BatchNorm", "data", "bn", "batch_norm_param { use_global_stats: true }"), {"bn_scale_factor": 0}),
    ("batchnorm_batch_stats", {"data": (3, 2, 4, 5)},
     _L("bn", "BatchNorm", "data", "bn", "batch_norm_param { use_global_stats: false eps: 0.01 }"), {}),
    ("batchnorm_2d", {"data": (4, 5)},
     _L("bn", "BatchNorm", "data", "bn", "batch_norm_param { use_global_stats: true }"), {"bn_scale_factor": 0.5}),
    ("scale_second_bottom_axis", {"data": (2, 3, 4, 5), "s": (3, 4)},
     _L("sc", "Scale", ["data", "s"], "sc", "scale_param { axis: 1 bias_term: true bias_filler { type: "
        "\"gaussian\" } }"), {}),
    ("scale_axis0_num_axes2_bias", {"data": (2, 3, 4)},
     _L("sc", "Scale", "data", "sc", "scale_param { axis: 0 num_axes: 2 bias_term: true filler { type: "
        "\"gaussian\" } bias_filler { type: \"gaussian\" } }"), {}),
    ("scale_scalar", {"data": (2, 3)},
     _L("sc", "Scale", "data", "sc", "scale_param { num_axes: 0 }"), {}),
    ("bias_param_and_bottom", {"data": (2, 3, 4, 5), "b": (4, 5)},
     _L("bias", "Bias", "data", "b1", "bias_param { axis: 1 num_axes: 2 filler { type: \"gaussian\" } }")
     + _L("bias2", "Bias", ["b1", "b"], "b2", "bias_param { axis: -2 }"), {}),
    ("mvn", {"data": (2, 3, 4, 5)},
     _L("mvn", "MVN", "data", "mvn", "")
     + _L("mvn_across", "MVN", "data", "mvn_across", "mvn_param { across_channels: true eps: 0.001 }")
     + _L("mvn_mean", "MVN", "data", "mvn_mean", "mvn_param { normalize_variance: false }"), {}),
    # ---------------------------------------------------------------- structure
    ("eltwise_sum_coeff_prod_max", {"a": (2, 3, 4), "b": (2, 3, 4), "c": (2, 3, 4)},
     _L("sum", "Eltwise", ["a", "b", "c"], "sum", "eltwise_param { operation: SUM coeff: 0.5 coeff: -1.5 "
        "coeff: 2 }")
     + _L("prod", "Eltwise", ["a", "b", "c"], "prod", "eltwise_param { operation: PROD }")
     + _L("max", "Eltwise", ["a", "b", "c"], "max", "eltwise_param { operation: MAX }")
     + _L("plain", "Eltwise", ["a", "b"], "plain", ""), {}),
    ("softmax_axes", {"data": (2, 3, 4, 5)},
     _L("sm2", "Softmax", "data", "sm2", "softmax_param { axis: 2 }")
     + _L("sm_last", "Softmax", "data", "sm_last", "softmax_param { axis: -1 }")
     + _L("sm", "Softmax", "data", "sm", ""), {}),
    ("crop_offsets", {"big": (2, 4, 9, 8), "like": (2, 3, 5, 4)},
     _L("crop", "Crop", ["big", "like"], "crop", "crop_param { axis: 1 offset: 1 offset: 3 offset: 2 }")
     + _L("crop2", "Crop", ["big", "like"], "crop2", "crop_param { axis: 2 offset: 3 }")
     + _L("crop0", "Crop", ["big", "like"], "crop0", "crop_param { axis: 0 offset: 0 offset: 0 offset: 1 "
          "offset: 4 }"), {}),
    ("concat_slice_axes", {"a": (2, 3, 4), "b": (2, 2, 4)},
     _L("cat", "Concat", ["a", "b"], "cat", "concat_param { axis: 1 }")
     + _L("cat2", "Concat", ["a", "a"], "cat2", "concat_param { axis: 2 }")
     + _L("cat1", "Concat", "b", "cat1", "")
     + _L("sl", "Slice", "cat", ["s1", "s2", "s3"], "slice_param { axis: 1 slice_point: 1 slice_point: 4 }")
     + _L("sl2", "Slice", "cat2", ["t1", "t2"], "slice_param { axis: -1 }"), {}),
    ("reshape_zero_minus_one", {"data": (2, 3, 4, 5)},
     _L("r1", "Reshape", "data", "r1", "reshape_param { shape { dim: 0 dim: -1 dim: 5 } }")
     + _L("r2", "Reshape", "data", "r2", "reshape_param { shape { dim: 3 dim: 1 } axis: 1 num_axes: 1 }")
     + _L("r3", "Reshape", "data", "r3", "reshape_param { shape { dim: -1 } axis: -2 }")
     + _L("r4", "Reshape", "data", "r4", "reshape_param { shape { dim: 1 } axis: 0 num_axes: 0 }"), {}),
    ("flatten_ranges", {"data": (2, 3, 4, 5)},
     _L("f1", "Flatten", "data", "f1", "")
     + _L("f2", "Flatten", "data", "f2", "flatten_param { axis: 1 end_axis: 2 }")
     + _L("f3", "Flatten", "data", "f3", "flatten_param { axis: -3 end_axis: -1 }")
     + _L("f4", "Flatten", "data", "f4", "flatten_param { axis: 0 end_axis: 0 }"), {}),
    ("inner_product_axis2_transpose", {"data": (2, 3, 4, 5)},
     _L("ip", "InnerProduct", "data", "ip", "inner_product_param { num_output: 6 axis: 2 transpose: true %s }" % W)
     + _L("ip2", "InnerProduct", "data", "ip2", "inner_product_param { num_output: 4 axis: -1 bias_term: false "
          "weight_filler { type: \"xavier\" } }")
     + _L("ip3", "InnerProduct", "data", "ip3", "inner_product_param { num_output: 3 %s }" % W), {}),
    ("tile", {"data": (2, 3, 4)},
     _L("t1", "Tile", "data", "t1", "tile_param { axis: 1 tiles: 3 }")
     + _L("t2", "Tile", "data", "t2", "tile_param { axis: -1 tiles: 2 }"), {}),
    ("reduction_ops", {"data": (2, 3, 4, 5)},
     _L("sum", "Reduction", "data", "sum", "reduction_param { operation: SUM axis: 1 coeff: 2 }")
     + _L("asum", "Reduction", "data", "asum", "reduction_param { operation: ASUM axis: 2 }")
     + _L("sumsq", "Reduction", "data", "sumsq", "reduction_param { operation: SUMSQ axis: -1 coeff: -0.5 }")
     + _L("mean", "Reduction", "data", "mean", "reduction_param { operation: MEAN axis: 0 coeff: 3 }"), {}),
    ("embed", {"idx": (2, 5)},
     _L("embed", "Embed", "idx", "embed", "embed_param { input_dim: 7 num_output: 4 %s }" % W)
     + _L("embed_nobias", "Embed", "idx", "embed_nobias", "embed_param { input_dim: 7 num_output: 3 "
          "bias_term: false %s }" % W), {}),
    ("batch_reindex", {"data": (4, 3), "ix": (5,)},
     _L("re", "BatchReindex", ["data", "ix"], "re", ""), {"inputs": {"ix": [3, 0, 0, 2, 1]}}),
    ("argmax_variants_with_ties", {"data": (2, 3, 4)},
     _L("am", "ArgMax", "data", "am", "argmax_param { top_k: 3 }")
     + _L("amv", "ArgMax", "data", "amv", "argmax_param { top_k: 2 out_max_val: true }")
     + _L("ama", "ArgMax", "data", "ama", "argmax_param { top_k: 2 axis: 1 }")
     + _L("amav", "ArgMax", "data", "amav", "argmax_param { axis: -1 out_max_val: true }"),
     {"ties": True}),
    ("split_silence_parameter_dummy", {"data": (2, 3)},
     _L("relu", "ReLU", "data", "r", "")
     + _L("use1", "Power", "r", "p1", "power_param { scale: 2 }")
     + _L("use2", "Power", "r", "p2", "power_param { shift: 1 }")
     + _L("param", "Parameter", [], "w", "parameter_param { shape { dim: 2 dim: 3 } }")
     + _L("dummy", "DummyData", [], "d", "dummy_data_param { shape { dim: 2 dim: 3 } data_filler { type: "
          "\"constant\" value: 0.5 } }")
     + _L("sum", "Eltwise", ["p1", "w", "d"], "s", "")
     + _L("silence", "Silence", "p2", [], ""), {}),
    # ---------------------------------------------------------------- neurons
    ("neurons", {"data": (2, 3, 4)},
     _L("relu", "ReLU", "data", "relu", "")
     + _L("leaky", "ReLU", "data", "leaky", "relu_param { negative_slope: 0.1 }")
     + _L("elu", "ELU", "data", "elu", "elu_param { alpha: 0.7 }")
     + _L("sig", "Sigmoid", "data", "sig", "")
     + _L("tanh", "TanH", "data", "tanh", "")
     + _L("abs", "AbsVal", "data", "abs", "")
     + _L("bnll", "BNLL", "data", "bnll", "")
     + _L("thr", "Threshold", "data", "thr", "threshold_param { threshold: 0.3 }")
     + _L("clip", "Clip", "data", "clip", "clip_param { min: -0.5 max: 0.7 }")
     + _L("swish", "Swish", "data", "swish", "swish_param { beta: 1.5 }")
     + _L("drop", "Dropout", "data", "drop", "dropout_param { dropout_ratio: 0.3 }"), {}),
    ("bnll_large_values", {"data": (3, 4)},
     _L("bnll", "BNLL", "data", "bnll", ""), {"scale": 40.0}),
    ("prelu", {"data": (2, 3, 4, 2)},
     _L("prelu", "PReLU", "data", "prelu", "")
     + _L("shared", "PReLU", "data", "shared", "prelu_param { channel_shared: true }"), {}),
    ("prelu_2d", {"data": (3, 4)}, _L("prelu", "PReLU", "data", "prelu", ""), {}),
    ("power_exp_log", {"data": (2, 3, 4)},
     _L("abs", "AbsVal", "data", "abs", "")
     + _L("pow", "Power", "abs", "pow", "power_param { power: 1.5 scale: 0.5 shift: 0.25 }")
     + _L("sq", "Power", "data", "sq", "power_param { power: 2 scale: -1.5 }")
     + _L("const", "Power", "data", "const", "power_param { power: 2 scale: 0 shift: 3 }")
     + _L("exp", "Exp", "data", "exp", "exp_param { base: 2 scale: 0.5 shift: 1 }")
     + _L("exp_e", "Exp", "data", "exp_e", "")
     + _L("log", "Log", "abs", "log", "log_param { base: 10 scale: 2 shift: 1 }")
     + _L("ln", "Log", "pow", "ln", ""), {}),
    ("lstm_unit", {"c_prev": (1, 3, 4), "gates": (1, 3, 16), "cont": (1, 3)},
     _L("unit", "LSTMUnit", ["c_prev", "gates", "cont"], ["c", "h"], ""), {"inputs": {"cont": [[0, 1, 1]]}}),
    # ---------------------------------------------------------------- losses and accuracy (TEST nets)
    ("softmax_loss_accuracy", {"data": (4, 5), "label": (4,)},
     _L("loss", "SoftmaxWithLoss", ["data", "label"], ["loss", "prob"], "loss_weight: 1 loss_weight: 0")
     + _L("acc", "Accuracy", ["data", "label"], ["acc", "per_class"], "accuracy_param { top_k: 2 }")
     + _L("acc1", "Accuracy", ["data", "label"], "acc1", ""), {}),
    ("softmax_loss_spatial_ignore", {"data": (2, 4, 3, 3), "label": (2, 1, 3, 3)},
     _L("loss", "SoftmaxWithLoss", ["data", "label"], "loss", "loss_param { ignore_label: 1 }")
     + _L("loss_full", "SoftmaxWithLoss", ["data", "label"], "loss_full", "loss_param { normalization: FULL }")
     + _L("loss_batch", "SoftmaxWithLoss", ["data", "label"], "loss_batch", "loss_param { normalization: "
          "BATCH_SIZE ignore_label: 2 }")
     + _L("acc", "Accuracy", ["data", "label"], "acc", "accuracy_param { ignore_label: 1 }"), {}),
    ("contrastive_hinge_multinomial", {"a": (4, 3, 1, 1), "b": (4, 3), "sim": (4, 1, 1, 1), "p": (4, 5),
                                       "label": (4,)},
     _L("con", "ContrastiveLoss", ["a", "b", "sim"], "con", "contrastive_loss_param { margin: 2 }")
     + _L("con_legacy", "ContrastiveLoss", ["a", "b", "sim"], "con_legacy", "contrastive_loss_param { margin: 3 "
          "legacy_version: true }")
     + _L("hinge", "HingeLoss", ["p", "label"], "hinge", "")
     + _L("hinge2", "HingeLoss", ["p", "label"], "hinge2", "hinge_loss_param { norm: L2 }")
     + _L("sm", "Softmax", "p", "probs", "")
     + _L("mlr", "MultinomialLogisticLoss", ["probs", "label"], "mlr", ""), {}),
    ("infogain_bottom_h", {"data": (2, 4, 3), "label": (2, 3), "H": (1, 1, 4, 4)},
     _L("info", "InfogainLoss", ["data", "label", "H"], ["info", "prob"], "loss_weight: 1 loss_weight: 0 "
        "loss_param { ignore_label: 2 }"), {}),
    ("sigmoid_ce_euclidean", {"x": (3, 4), "t": (3, 4), "y": (3, 2, 2)},
     _L("ce", "SigmoidCrossEntropyLoss", ["x", "t"], "ce", "")
     + _L("eu", "EuclideanLoss", ["x", "y"], "eu", ""), {}),
]


def _tie_inputs(net, seed):
    rng = np.random.default_rng(seed)
    return {n: rng.integers(0, 3, size=net.blobs[n].shape).astype(np.float32) for n in net.inputs}


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_layer_exported_exactly(case, opset, tmp_path):
    name, inputs, layers, opts = case
    net = make_net('name: "%s"\n%s\n%s\n' % (name, input_layers(inputs), layers), tmp_path)
    given = None
    if opts.get("ties"):
        given = _tie_inputs(net, 3)
    elif "inputs" in opts or "scale" in opts:
        from engine import ports
        given = ports.random_inputs(net, 0, scale=opts.get("scale", 1.0))
        for k, v in opts.get("inputs", {}).items():
            given[k] = np.asarray(v, dtype=np.float32).reshape(net.blobs[k].shape)
    # One layer: float32 rounding only (most layers are bit-exact): 1e-6 of the blob's scale.
    res, result = export_and_verify(net, opset=opset, inputs=given, bn_scale_factor=opts.get("bn_scale_factor"),
                                    params=opts.get("params", True), rtol=1e-6)
    assert_verified(result)
    # every blob of the net is compared, and every one is an output of the model
    assert {r.blob for r in result.rows} == set(net.blob_names)

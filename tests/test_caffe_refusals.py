"""What real Caffe refuses, the engine refuses (issue 34): the cases the fuzzer's mutants found
when run through real Caffe beside the engine (benchmarks/fuzz_caffe.py, docs/fuzzing.md):

- a uint32 field Caffe keeps in an ``int`` (a Convolution's kernel and stride, LRN's
  local_size): 4294967295 is -1 there, and Caffe's checks refuse it (LRN's with C's ``%``);
- ``engine: CUDNN`` on the CPU: a CPU-only Caffe's layer factory knows no such engine;
- an empty net: Init takes it, its Forward fails ``end < layers_.size() (-1 vs. 0)``
  (tests/test_limits.py).
"""
import pytest

import engine
from engine.core.errors import CaffeError, NetError

INPUT = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 5 dim: 5 } } }\n'


def build(tmp_path, layer):
    p = tmp_path / "net.prototxt"
    p.write_text(INPUT + layer + "\n")
    return engine.Net(str(p), engine.TEST)


def test_lrn_local_size_is_caffes_int(tmp_path):
    lrn = 'layer { name: "lrn" type: "LRN" bottom: "data" top: "lrn" lrn_param { local_size: %s } }'
    with pytest.raises(CaffeError, match=r"Check failed: size_ % 2 == 1 \(-1 vs\. 1\) LRN only supports odd"):
        build(tmp_path, lrn % "4294967295")
    assert build(tmp_path, lrn % "3")


def test_a_convolutions_kernel_and_stride_are_caffes_int(tmp_path):
    conv = 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param { num_output: 2 %s } }'
    with pytest.raises(CaffeError, match=r"kernel_shape_data\[i\] > 0 \(-1 vs\. 0\) Filter dimensions must be nonzero"):
        build(tmp_path, conv % "kernel_size: 4294967295")
    with pytest.raises(CaffeError, match=r"negative dimension"):         # stride_w -1: a negative output width
        build(tmp_path, conv % "kernel_size: 3 stride_h: 1 stride_w: 4294967295")
    with pytest.raises(CaffeError, match=r"stride_data\[i\] > 0 \(-1 vs\. 0\) Stride dimensions must be nonzero"):
        build(tmp_path, conv % "kernel_size: 3 stride: 4294967295")
    assert build(tmp_path, conv % "kernel_size: 3 stride_h: 1 stride_w: 2").blobs["c"].shape == (2, 2, 3, 2)


def test_a_negative_pad_runs_as_caffe_runs_it_and_too_big_a_crop_is_refused(tmp_path):
    """pad_h 4294967295 is -1 in Caffe's int: its im2col and pooling crop the input, and so
    does the engine (the numbers: tests/layers/test_negative_pads.py).  A crop that leaves a
    negative output is refused at the top's shape, as Caffe's Blob::Reshape refuses it."""
    # a 5 x 5 input, kernel 3 x 2: (5 - 2 - 3) + 1 = 1 rows; a Deconvolution's (5 - 1) + 3 + 2 = 9
    for layer_type, shape in (("Convolution", (2, 2, 1, 4)), ("Deconvolution", (2, 2, 9, 6))):
        conv = ('layer { name: "c" type: "%s" bottom: "data" top: "c" convolution_param { num_output: 2 '
                'kernel_h: 3 kernel_w: 2 %%s } }' % layer_type)
        assert build(tmp_path, conv % "pad_h: 4294967295 pad_w: 0").blobs["c"].shape == shape
        assert build(tmp_path, conv % "pad_h: 1 pad_w: 0").blobs["c"].shape[1] == 2
    with pytest.raises(CaffeError, match=r"negative dimension.*layer 'c', type Convolution"):
        build(tmp_path, 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param { '
                        'num_output: 2 kernel_size: 3 pad: 4294967293 } }')
    pool = 'layer { name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param { kernel_size: 3 pad: %d } }'
    assert build(tmp_path, pool % 4294967295).blobs["p"].shape == (2, 3, 1, 1)
    with pytest.raises(CaffeError, match=r"negative dimension.*layer 'p', type Pooling"):
        build(tmp_path, pool % 4294967293)


@pytest.mark.parametrize("layer", [
    'layer { name: "d" type: "Deconvolution" bottom: "data" top: "d" convolution_param { num_output: 2 kernel_size: 2 '
    'engine: CUDNN } }',
    'layer { name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param { kernel_size: 2 engine: CUDNN } }',
    'layer { name: "r" type: "ReLU" bottom: "data" top: "r" relu_param { engine: CUDNN } }',
])
def test_the_cudnn_engine_is_unknown_on_the_cpu(tmp_path, layer):
    with pytest.raises(NetError, match=r"^.*Layer [dpr] has unknown engine\.") as ei:
        build(tmp_path, layer)
    assert ei.value.field == "engine"
    assert build(tmp_path, layer.replace("CUDNN", "CAFFE"))

"""Every Init error names its line (issue 21): an unknown bottom, a duplicate top, a
wrong shape, a missing or bad parameter point at the prototxt line of the layer, and of
the field where there is one, in the API's exception (``path``/``line``/``column``/
``layer_line``/``field``/``detail``), in the CLI's one error line and (tests/inspector)
in the page.  The layer is followed back through the upgrades, FilterNet and
InsertSplits; a net without a file keeps today's message.
"""
import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from engine import TEST, TRAIN, Net
from engine.core.errors import LayerError, NetError, ShapeError, UnknownLayerTypeError
from engine.core.source_map import locate_fields
from engine.proto import caffe_pb2
from engine.tools.cli import EXIT_ERROR, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INPUT = """\
name: "lines"
layer {
  name: "data"
  type: "Input"
  top: "data"
  input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } }
}
"""          # 7 lines: the next layer starts on line 8

UNKNOWN_BOTTOM = INPUT + """\
layer {
  name: "r"
  type: "ReLU"
  bottom: "dta"
  top: "o"
}
"""

DUPLICATE_TOP = INPUT + """\
layer {
  name: "a"
  type: "ReLU"
  bottom: "data"
  top: "o"
}
layer {
  name: "b"
  type: "TanH"
  bottom: "data"
  top: "o"
}
"""

CONCAT_SHAPES = """\
layer {
  name: "data"
  type: "Input"
  top: "a"
  top: "b"
  input_param { shape { dim: 2 dim: 3 dim: 4 } shape { dim: 2 dim: 3 dim: 5 } }
}
layer {
  name: "cat"
  type: "Concat"
  bottom: "a"
  bottom: "b"
  top: "o"
}
"""

NO_KERNEL = INPUT + """\
layer {
  name: "conv"
  type: "Convolution"
  bottom: "data"
  top: "o"
  convolution_param {
    num_output: 2
  }
}
"""


def write(tmp_path, text, name="net.prototxt"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def raises(path, exc=NetError, phase=TEST, **kw):
    with pytest.raises(exc) as ei:
        Net(path, phase, **kw)
    return ei.value


# ------------------------------------------------------------------ the four kinds, API
def test_unknown_bottom_names_the_bottom_line_and_the_layer_line(tmp_path):
    p = write(tmp_path, UNKNOWN_BOTTOM)
    e = raises(p)
    assert (e.path, e.line, e.column, e.layer_line, e.layer_column) == (p, 11, 3, 8, 1)
    assert (e.layer, e.blob, e.field, e.field_index) == ("r", "dta", "bottom", 0)
    assert e.detail == "Unknown bottom blob 'dta' (layer 'r', bottom index 0)"
    assert str(e) == "%s:11:3: %s [layer 'r' begins at line 8]" % (p, e.detail)


def test_duplicate_top_names_the_top_line(tmp_path):
    p = write(tmp_path, DUPLICATE_TOP)
    e = raises(p)
    assert (e.line, e.column, e.layer_line, e.field) == (18, 3, 14, "top")
    assert str(e).startswith("%s:18:3: Top blob 'o' produced by multiple sources. (layer 'b', top index 0)" % p)


def test_wrong_shapes_name_the_layer_line(tmp_path):
    e = raises(write(tmp_path, CONCAT_SHAPES), LayerError)
    assert (e.line, e.column, e.layer_line) == (8, 1, 8) and e.layer == "cat"
    assert str(e).startswith("%s:8:1: Check failed: top_shape[j] == bottom[i]->shape(j)" % (tmp_path / "net.prototxt"))
    eltwise = INPUT.replace('top: "data"', 'top: "a"\n  top: "b"').replace(
        "shape { dim: 2 dim: 3 dim: 4 dim: 5 } }", "shape { dim: 2 dim: 3 } shape { dim: 2 dim: 4 } }") + \
        'layer {\n  name: "sum"\n  type: "Eltwise"\n  bottom: "a"\n  bottom: "b"\n  top: "o"\n}\n'
    e = raises(write(tmp_path, eltwise, "eltwise.prototxt"), LayerError)
    assert (e.line, e.layer) == (9, "sum") and "bottom[0]->shape() == bottom[i]->shape()" in str(e)
    reshape = INPUT + 'layer {\n  name: "r"\n  type: "Reshape"\n  bottom: "data"\n  top: "o"\n' \
                      '  reshape_param { shape { dim: 7 dim: -1 } }\n}\n'
    e = raises(write(tmp_path, reshape, "reshape.prototxt"), LayerError)
    assert (e.line, e.layer) == (8, "r") and "must be divisible by the product" in str(e)


def test_missing_param_names_the_layer_line(tmp_path):
    p = write(tmp_path, NO_KERNEL)
    e = raises(p, LayerError)
    assert (e.line, e.column, e.layer_line, e.field) == (8, 1, 8, None)
    assert str(e).startswith("%s:8:1: Check failed: num_kernel_dims == 1" % p)
    assert "kernel_size must be specified once" in e.detail and not e.detail.startswith(p)


def test_a_bad_param_value_names_the_parameters_line(tmp_path):
    p = write(tmp_path, INPUT + 'layer {\n  name: "cat"\n  type: "Concat"\n  bottom: "data"\n  top: "o"\n'
                                '  concat_param {\n    axis: 5\n  }\n}\n')
    e = raises(p, ShapeError)
    assert (e.line, e.column, e.layer_line) == (14, 5, 8)
    assert str(e) == "%s:14:5: axis 5 out of range for 4-D Blob with shape 2 3 4 5 (120) (layer 'cat', type " \
                     "Concat) [layer 'cat' begins at line 8]" % p
    # the layer's name is not taken for a field the message names ("pool" is also Pooling's field)
    pool = INPUT + 'layer {\n  name: "pool"\n  type: "Pooling"\n  bottom: "data"\n  top: "o"\n' \
                   '  pooling_param {\n    pool: MAX\n  }\n}\n'
    e = raises(write(tmp_path, pool, "pool.prototxt"), LayerError)
    assert e.line == 8 and "(layer 'pool'" in str(e)


def test_other_init_errors_have_lines_too(tmp_path):
    e = raises(write(tmp_path, INPUT + 'layer {\n  name: "c"\n  type: "Convolutoin"\n}\n'), UnknownLayerTypeError)
    assert (e.line, e.column, e.field) == (10, 3, "type")
    shared = INPUT + """\
layer {
  name: "ip1"
  type: "InnerProduct"
  bottom: "data"
  top: "ip1"
  param { name: "w" }
  inner_product_param { num_output: 10 }
}
layer {
  name: "ip2"
  type: "InnerProduct"
  bottom: "ip1"
  top: "ip2"
  param { name: "w" }
  inner_product_param { num_output: 6 }
}
"""
    e = raises(write(tmp_path, shared, "shared.prototxt"))
    assert (e.line, e.layer_line, e.field) == (21, 16, "param") and "shape mismatch" in str(e)
    both = INPUT + 'layer {\n  name: "r"\n  type: "ReLU"\n  bottom: "data"\n  top: "o"\n' \
                   '  include { phase: TRAIN }\n  exclude { phase: TEST }\n}\n'
    e = raises(write(tmp_path, both, "both.prototxt"))
    assert (e.line, e.layer_line) == (14, 8) and "Specify either include rules or exclude rules" in str(e)


# ------------------------------------------------------------------ through the transforms
def test_the_layer_is_followed_through_filter_splits_and_the_input_upgrade(tmp_path):
    text = textwrap.dedent("""\
        input: "data"
        input_dim: 2
        input_dim: 3
        input_dim: 4
        input_dim: 5
        layer { name: "train_only" type: "ReLU" bottom: "data" top: "t" include { phase: TRAIN } }
        layer { name: "a" type: "ReLU" bottom: "data" top: "x" }
        layer { name: "b" type: "TanH" bottom: "data" top: "y" }
        layer {
          name: "cat"
          type: "Concat"
          bottom: "x"
          bottom: "y"
          bottom: "nope"
          top: "o"
        }
        """)
    p = write(tmp_path, text)
    e = raises(p, phase=TEST)       # input upgraded to a layer, train_only dropped, data split in three
    assert (e.line, e.column, e.layer_line, e.field_index) == (14, 3, 9, 2) and e.blob == "nope"
    e = raises(p, phase=TRAIN)      # kept in TRAIN: splits of four consumers
    assert (e.line, e.layer_line) == (14, 9)
    # an error on the upgraded Input layer points at the `input:` field it came from
    bad_input = text.replace("input_dim: 5\n", "").replace('bottom: "nope"\n', "")
    p = write(tmp_path, bad_input, "bad_input.prototxt")
    e = raises(p)
    assert str(e) == "%s:1:1: input 'data' (index 0) needs 4 input_dim values: 3 input_dim for 1 inputs" % p


def test_a_v1_net_names_the_layers_entry(tmp_path):
    text = textwrap.dedent("""\
        name: "v1"
        input: "data"
        input_dim: 1 input_dim: 2 input_dim: 3 input_dim: 3
        layers {
          name: "relu"
          type: RELU
          bottom: "data"
          top: "r"
        }
        layers {
          name: "conv"
          type: CONVOLUTION
          bottom: "r"
          bottom: "missing"
          top: "c"
          convolution_param { num_output: 1 kernel_size: 1 }
        }
        """)
    p = write(tmp_path, text)
    e = raises(p)
    assert (e.line, e.column, e.layer_line) == (14, 3, 10) and e.blob == "missing"


def test_weights_that_do_not_fit_name_the_layer_in_the_net_prototxt(tmp_path):
    def ip(w):
        return INPUT.replace("dim: 5", "dim: %d" % w) + textwrap.dedent("""\
        layer {
          name: "ip"
          type: "InnerProduct"
          bottom: "data"
          top: "ip"
          inner_product_param { num_output: 4 weight_filler { type: "gaussian" } }
        }
        """)

    src = Net(write(tmp_path, ip(5), "src.prototxt"), TEST)
    model = str(tmp_path / "w.caffemodel")
    src.save(model)
    p = write(tmp_path, ip(6))
    net = Net(p, TEST)
    before = net.params["ip"][0].data.copy()
    with pytest.raises(ShapeError) as ei:
        net.copy_from(model)
    e = ei.value
    assert (e.path, e.line, e.column) == (p, 8, 1)
    assert str(e).startswith("%s:8:1: Cannot copy param 0 weights from layer 'ip'; shape mismatch." % p)
    assert np.array_equal(net.params["ip"][0].data, before)
    with pytest.raises(ShapeError, match="^%s:8:1: Cannot copy" % p):
        Net(p, TEST, weights=model)


def test_a_python_layers_own_exception_gets_a_note_with_the_line(tmp_path):
    name = "pyl_lines_%d" % os.getpid()          # unique: no module of that name cached
    sys.modules.pop(name, None)
    (tmp_path / (name + ".py")).write_text(textwrap.dedent("""\
        import engine
        class Boom(engine.Layer):
            def setup(self, bottom, top):
                raise ValueError("bad param_str")
            def reshape(self, bottom, top):
                pass
        """))
    p = write(tmp_path, INPUT + 'layer {\n  name: "py"\n  type: "Python"\n  bottom: "data"\n  top: "o"\n'
                                '  python_param { module: "%s" layer: "Boom" }\n}\n' % name)
    e = raises(p, ValueError)
    assert "layer 'py' is written at %s:8:1" % p in getattr(e, "__notes__", [])


# ------------------------------------------------------------------ no file, another file
def test_a_net_without_a_file_keeps_the_message(tmp_path):
    from engine.core.io import parse_prototxt
    param = parse_prototxt(UNKNOWN_BOTTOM, caffe_pb2.NetParameter)
    with pytest.raises(NetError) as ei:
        Net.from_param(param, phase=TEST)
    e = ei.value
    assert str(e) == "Unknown bottom blob 'dta' (layer 'r', bottom index 0)"
    assert e.line is None and e.path is None and e.detail == str(e)
    from engine.pycaffe import layers as L
    from engine.pycaffe import net_spec
    n = net_spec.NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 3, 4]))
    n.cat = L.Concat(n.data, L.Input(shape=dict(dim=[2, 3, 5])), axis=1)
    with pytest.raises(LayerError) as ei:
        Net.from_param(n.to_proto(), phase=TEST)
    assert str(ei.value).startswith("Check failed: top_shape[j]") and ei.value.line is None


def test_a_file_that_no_longer_holds_the_net_gives_no_lines(tmp_path):
    from engine.core.io import parse_prototxt
    p = write(tmp_path, UNKNOWN_BOTTOM)
    other = parse_prototxt(UNKNOWN_BOTTOM.replace('name: "r"', 'name: "renamed"'), caffe_pb2.NetParameter)
    with pytest.raises(NetError) as ei:
        Net(p, TEST, param=other)              # the inspector's way: the param read once, the file named
    assert ei.value.line is None and str(ei.value).startswith("Unknown bottom blob")
    same = parse_prototxt(UNKNOWN_BOTTOM, caffe_pb2.NetParameter)
    with pytest.raises(NetError) as ei:
        Net(p, TEST, param=same)
    assert ei.value.line == 11


def test_a_solvers_net_file_has_lines(tmp_path):
    from engine.core.solvers import SGDSolver
    p = write(tmp_path, NO_KERNEL)
    solver = tmp_path / "solver.prototxt"
    solver.write_text('net: "%s"\nbase_lr: 0.1\nlr_policy: "fixed"\n' % p)
    with pytest.raises(LayerError) as ei:
        SGDSolver(str(solver))
    assert (ei.value.path, ei.value.line) == (p, 8)


# ------------------------------------------------------------------ the CLI's one line
@pytest.mark.parametrize("text, where", [
    (UNKNOWN_BOTTOM, ":11:3: Unknown bottom blob 'dta'"),
    (DUPLICATE_TOP, ":18:3: Top blob 'o' produced by multiple sources."),
    (CONCAT_SHAPES, ":8:1: Check failed: top_shape[j] == bottom[i]->shape(j) (4 vs. 5)"),
    (NO_KERNEL, ":8:1: Check failed: num_kernel_dims == 1"),
])
def test_the_cli_prints_file_line_column_on_its_one_line(tmp_path, text, where):
    p = write(tmp_path, text)
    out, err = io.StringIO(), io.StringIO()
    assert main(["info", p], out, err) == EXIT_ERROR
    assert err.getvalue().startswith("error: " + p + where) and err.getvalue().count("\n") == 1


def test_python_m_engine_info_exits_1_with_the_line(tmp_path):
    p = write(tmp_path, UNKNOWN_BOTTOM, "bad.prototxt")
    r = subprocess.run([sys.executable, "-m", "engine", "info", p], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "error: %s:11:3: Unknown bottom blob 'dta' (layer 'r', bottom index 0) " \
                       "[layer 'r' begins at line 8]\n" % p


# ------------------------------------------------------------------ the locator itself
def test_locate_fields_follows_protobufs_text_format():
    nodes = locate_fields('# c\nname: "x"\nlayer <\n  name: "a" "b"; bottom: [ "p", "q" ]\n'
                          '  param: { lr_mult: -1 } [ext.field] { x: 1 }\n>\n')
    assert [(n.name, n.line, n.column) for n in nodes] == [("name", 2, 1), ("layer", 3, 1)]
    inner = nodes[1].children
    assert [(n.name, n.line, n.column) for n in inner] == [
        ("name", 4, 3), ("bottom", 4, 28), ("bottom", 4, 33), ("param", 5, 3), ("[ext.field]", 5, 26)]
    assert nodes[1].find("lr_mult").line == 5 and nodes[1].find("bottom", 1).column == 33
    assert locate_fields("layer { name: ") is None

"""Every net is read under limits no real net reaches (issue 34; engine.core.limits), checked
in one linear scan of its text before protobuf parses it or Init builds anything, and a parse
error names the layer and field it is in (issue 35, item 4):

- a shape of 300,000 ``dim`` entries is refused at once with Caffe's kMaxBlobAxes check,
  naming the layer and the line, and the message does not echo the axes;
- 796,000 in-place ReLUs (a 50 MB upload) are refused at the 50,001st layer, naming the limit
  and the flag that raises it; the text, the tops, a caffemodel's layers likewise;
- each layer's own memory counts against ``--max-net-mb`` (engine.memory_budget);
- ResNet-1001, the largest real prototxt we know of, passes the defaults untouched;
- ``kernel_sise`` in fire2/squeeze1x1 says file:line:column, the field and the layer, in the
  exception (path, line, column, layer, field) and in the CLI's one line;
- the scan is linear: the tree of fields and the field a message names come from one pass.

Hang guards only (``timeout=``); no durations are asserted.
"""
import os
import subprocess
import sys

import pytest

import engine
from engine.core import limits, source_map
from engine.core.errors import LimitExceeded, MemoryBudgetExceeded, NetError, ParseError
from engine.core.upgrade import read_net_params
from engine.proto import caffe_pb2
from engine.tools.cli import EXIT_ERROR, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUARD = 300         # seconds: a hang guard for a busy CI machine, never a target


def dims_net(n):
    return ('name: "dims"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { %s } } }\n'
            % " ".join("dim: 1" for _ in range(n)))


def relu_net(n):
    head = 'name: "relus"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }\n'
    return head + "".join('layer { name: "relu%d" type: "ReLU" bottom: "data" top: "data" }\n' % i
                          for i in range(n))


def write(tmp_path, text, name="net.prototxt"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def cli(*argv):
    r = subprocess.run([sys.executable, "-m", "engine", *argv], capture_output=True, text=True, cwd=ROOT,
                       timeout=GUARD)
    return r.returncode, r.stdout, r.stderr


# ---------------------------------------------------------------- shapes of 300,000 axes
def test_a_shape_of_300000_dims_is_refused_with_caffes_check_before_parsing(tmp_path):
    p = write(tmp_path, dims_net(300_000))
    with pytest.raises(LimitExceeded) as ei:
        read_net_params(p)
    e = ei.value
    assert (e.limit, e.value, e.maximum, e.layer, e.path, e.line) == ("axes", 300_000, 32, "data", p, 2)
    assert e.detail.startswith("Check failed: shape.dim_size() <= kMaxBlobAxes (300000 vs. 32)")
    assert len(str(e)) < 400                         # the axes are counted, not echoed
    code, out, err = cli("info", p)
    assert code == EXIT_ERROR and out == ""
    assert err.startswith("error: %s:2:62: Check failed: shape.dim_size() <= kMaxBlobAxes (300000 vs. 32)" % p)
    assert "[layer data, field shape]" in err and err.count("\n") == 1


def test_a_blob_of_too_many_axes_made_at_init_does_not_echo_them():
    with pytest.raises(engine.CaffeError) as ei:
        engine.Blob([1] * 5000)
    assert "Check failed: shape.size() <= kMaxBlobAxes (5000 vs. 32)" in str(ei.value)
    assert len(str(ei.value)) < 300


# ---------------------------------------------------------------- layers, tops, text
def test_796000_in_place_relus_are_refused_at_the_layer_limit(tmp_path):
    p = write(tmp_path, relu_net(796_000))                  # 53 MB of text
    with pytest.raises(LimitExceeded) as ei:
        engine.Net(p, engine.TEST)
    e = ei.value                                            # its text, first
    assert (e.limit, e.maximum, e.flag, e.path) == ("text", 16 << 20, "--max-text-mb", p)
    assert "more than the limit of 16,777,216 bytes for a net's text" in str(e)
    with limits.using(limits.DEFAULT.with_flags(text_mb=0)):
        with pytest.raises(LimitExceeded) as ei:
            engine.Net(p, engine.TEST)
    e = ei.value                                            # then its layers, at the 50,001st
    assert (e.limit, e.maximum, e.flag, e.layer, e.line) == ("layers", 50_000, "--max-layers", "relu49999", 50_002)
    assert "the net has more than 50,000 layers" in str(e) and "raise it with --max-layers" in str(e)
    code, _out, err = cli("time", p, "--iterations", "1", "--max-text-mb", "64")
    assert code == EXIT_ERROR and "more than 50,000 layers" in err and "--max-layers" in err


def test_the_flags_raise_and_lower_the_limits_on_every_command(tmp_path):
    p = write(tmp_path, relu_net(300))
    out, err = _io()
    assert main(["info", p, "--max-layers", "100"], out, err) == EXIT_ERROR
    assert "the net has more than 100 layers (the 101st is at line 102)" in err.getvalue()
    out, err = _io()
    assert main(["time", "-max-tops=50", p, "--iterations", "1"], out, err) == EXIT_ERROR   # gflags' spelling
    assert "the net has more than 50 tops" in err.getvalue() and "--max-tops" in err.getvalue()
    out, err = _io()
    assert main(["info", p, "--max-text-mb", "0", "--max-layers", "0"], out, err) == 0       # 0: no limit
    big = write(tmp_path, "# padding\n" * 220_000 + relu_net(2), "padded.prototxt")      # 2.2 MB
    out, err = _io()
    assert main(["info", big, "--max-text-mb", "2"], out, err) == EXIT_ERROR
    assert "the text is 2,200," in err.getvalue() and "raise the limit with --max-text-mb" in err.getvalue()
    for bad in (["--max-layers", "-1"], ["--max-net-mb", "lots"], ["--max-tops"]):
        out, err = _io()
        assert main(["info", p] + bad, out, err) == 2 and "usage error" in err.getvalue()
    assert limits.current() == limits.DEFAULT        # the command's limits end with it


def test_bottoms_have_the_limit_of_tops(tmp_path):
    text = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 } } }\n'
            'layer { name: "cat" type: "Concat" %s top: "cat" }\n' % " ".join('bottom: "data"' for _ in range(200)))
    p = write(tmp_path, text)
    with limits.using(limits.NetLimits(max_tops=150)):
        with pytest.raises(LimitExceeded) as ei:
            read_net_params(p)
    assert ei.value.layer == "cat" and ei.value.flag == "--max-tops"
    assert "the net has more than 150 bottoms" in str(ei.value)


def test_a_layer_of_100000_rules_is_refused_at_its_fields(tmp_path):
    text = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 } } }\n'
            'layer { name: "r" type: "ReLU" bottom: "data" top: "r" %s }\n'
            % " ".join('include { stage: "s%d" }' % i for i in range(100_000)))
    p = write(tmp_path, text)
    with pytest.raises(LimitExceeded) as ei:
        read_net_params(p)
    e = ei.value
    assert (e.limit, e.maximum, e.flag, e.layer, e.field) == ("fields", 10_000, "--max-layer-fields", "r", "include")
    assert "a layer has more than 10,000 fields written in it (the 10,001st, include," in str(e)
    out, err = _io()
    assert main(["info", p, "--max-layer-fields", "0", "--phase", "TEST"], out, err) == 0     # 0: no limit


def test_outputs_are_checked_before_any_work(tmp_path):
    p = write(tmp_path, relu_net(3))
    out, err = _io()
    assert main(["report", p, "-o", "/nonexistent/dir/x.html"], out, err) == EXIT_ERROR
    assert err.getvalue() == "error: /nonexistent/dir/x.html: the folder /nonexistent/dir does not exist " \
                             "(nothing was run)\n"
    out, err = _io()
    assert main(["time", str(tmp_path / "missing.prototxt"), "--iterations", "-1"], out, err) == EXIT_ERROR
    assert "time: --iterations must be at least 1 (got -1)" in err.getvalue()      # before the net is read


def test_a_caffemodel_with_too_many_layers_is_refused(tmp_path):
    param = caffe_pb2.NetParameter()
    for i in range(120):
        param.layer.add(name="l%d" % i, type="ReLU")
    p = tmp_path / "many.caffemodel"
    p.write_bytes(param.SerializeToString())
    with limits.using(limits.NetLimits(max_layers=100)):
        with pytest.raises(LimitExceeded, match="the caffemodel has 120 layers, more than the limit of 100"):
            engine.core.io.read_caffemodel(str(p))
    assert len(engine.core.io.read_caffemodel(str(p)).layer) == 120


def test_each_layer_counts_against_the_memory_budget():
    param = caffe_pb2.NetParameter()
    from google.protobuf import text_format
    text_format.Merge(relu_net(200), param)
    with engine.memory_budget(1 << 20):          # 1 MiB: 64 layers of 16 KiB
        with pytest.raises(MemoryBudgetExceeded) as ei:
            engine.Net.from_param(param, engine.TEST)
    e = ei.value
    assert e.layer == "relu62" and "for its 64 layers themselves" in str(e)     # 24 bytes of blobs besides
    net = engine.Net.from_param(param, engine.TEST)
    assert net.memory_required_bytes == 3 * 4 * 2              # the blobs' memory, as Caffe counts it


def test_the_cli_refuses_a_net_past_its_memory_before_allocating(tmp_path):
    p = write(tmp_path, 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1024 dim: 1024 '
                        'dim: 1024 } } }\n' + "".join('layer { name: "r%d" type: "ReLU" bottom: "data" top: "r%d" }\n'
                                                      % (i, i) for i in range(20)))
    code, _out, err = cli("time", p, "--iterations", "1")          # 168 GiB: past half of any CI machine
    assert code == EXIT_ERROR and "MemoryBudgetExceeded" not in err
    assert "more than the budget of" in err and "refused before that memory is allocated" in err
    code, _out, err = cli("time", p, "--iterations", "1", "--max-net-mb", "100")
    assert code == EXIT_ERROR and "more than the budget of 100.0 MiB" in err


def test_resnet_1001_passes_the_default_limits_untouched(tmp_path):
    from benchmarks.netgen import resnet_preact_prototxt
    text = resnet_preact_prototxt(1001)
    p = write(tmp_path, text, "resnet1001_train_val.prototxt")
    source_map.check_limits(text, p)                    # the full scan, no short cut
    scan = source_map._Scan(text, limits=limits.DEFAULT).run()
    assert scan.breach is None and scan.layers == 4342 and scan.ok
    assert len(read_net_params(p).layer) == 4342


# ---------------------------------------------------------------- parse errors name the layer
FIRE = """name: "squeezenet"
layer {
  name: "data"
  type: "Input"
  top: "data"
  input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } }
}
layer {
  name: "fire2/squeeze1x1"
  type: "Convolution"
  bottom: "data"
  top: "fire2/squeeze1x1"
  convolution_param {
    num_output: 16
    kernel_sise: 1
  }
}
"""


def test_a_parse_error_names_its_layer_and_field(tmp_path):
    p = write(tmp_path, FIRE)
    with pytest.raises(ParseError) as ei:
        engine.Net(p, engine.TEST)
    e = ei.value
    assert (e.path, e.line, e.column) == (p, 15, 5)
    assert (e.layer, e.field, e.layer_line) == ("fire2/squeeze1x1", "convolution_param.kernel_sise", 8)
    assert str(e).endswith('has no field named "kernel_sise". [layer fire2/squeeze1x1, field '
                           'convolution_param.kernel_sise; the layer begins at line 8]')
    out, err = _io()
    assert main(["info", p], out, err) == EXIT_ERROR
    line = err.getvalue()
    assert line.startswith("error: %s:15:5: " % p) and line.count("\n") == 1
    assert "layer fire2/squeeze1x1" in line and "field convolution_param.kernel_sise" in line


@pytest.mark.parametrize("text, where", [
    ('layer {\n  name: "a"\n  convolution_param { kernel_size: x }\n}\n', ("a", "convolution_param.kernel_size")),
    ('layer {\n  name: "p"\n  pooling_param { pool: MAXX }\n}\n', ("p", "pooling_param.pool")),
    ('layer {\n  bottom "x"\n  name: "late"\n}\n', ("late", "bottom")),         # the name after the error
    ('layers {\n  layer { name: "v0" type: "conv" bogus: 1 }\n}\n', ("v0", "layer.bogus")),
    ('name: "n"\nlayer { name: "ok" }\nbogus: 3\n', (None, "bogus")),
])
def test_the_context_of_other_parse_errors(tmp_path, text, where):
    p = write(tmp_path, text)
    with pytest.raises(ParseError) as ei:
        read_net_params(p)
    assert (ei.value.layer, ei.value.field) == where


def test_a_megabyte_line_is_not_echoed_in_the_message(tmp_path):
    p = write(tmp_path, 'layer { name: "%s" convolution_param { kernel_size: x } }\n' % ("x" * 1_200_000))
    with pytest.raises(ParseError) as ei:
        read_net_params(p)
    assert len(str(ei.value)) < 1200 and "(1,200,0" in str(ei.value) and "Couldn't parse integer: x" in str(ei.value)


# ---------------------------------------------------------------- one pass
def test_the_field_a_message_names_is_found_in_one_pass():
    node = source_map.FieldNode("layer", 1, 1, [source_map.FieldNode("f%d" % i, 2, 1) for i in range(100_000)])
    message = " ".join("word%d" % i for i in range(100_000)) + " f99999 f5"
    assert source_map.guess_field(node, message) == ("f99999", 0)       # earliest in the message


def test_an_init_error_in_a_layer_of_many_fields_is_located(tmp_path):
    text = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }\n'
            'layer { name: "cat" type: "Concat" %s top: "cat" concat_param { axis: 5 } }\n'
            % " ".join('bottom: "data"' for _ in range(20_000)))
    p = write(tmp_path, text)
    with limits.using(limits.NetLimits(max_layer_fields=None)):
        with pytest.raises(NetError) as ei:
            engine.Net(p, engine.TEST)
    assert ei.value.line == 2 and ei.value.layer == "cat"


# ---------------------------------------------------------------- an empty net
def test_an_empty_net_inits_and_its_forward_fails_as_caffes(tmp_path):
    p = write(tmp_path, 'name: "x"\n')
    net = engine.Net(p, engine.TEST)                  # Init succeeds in Caffe too
    assert net.layer_names == []
    with pytest.raises(NetError, match=r"^Check failed: end < layers_.size\(\) \(-1 vs. 0\)$"):
        net.forward()
    with pytest.raises(NetError, match=r"^Check failed: start < layers_.size\(\) \(-1 vs. 0\)$"):
        net.backward()
    code, _out, err = cli("time", p, "--iterations", "1")
    assert code == EXIT_ERROR and "Check failed: end < layers_.size() (-1 vs. 0)" in err
    code, out, _err = cli("info", p)
    assert code == 0


def _io():
    import io
    return io.StringIO(), io.StringIO()


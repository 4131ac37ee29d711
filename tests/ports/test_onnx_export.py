"""The ONNX exporter's contract: tensor names (in-place chains, shared memory), outputs,
refusals naming the layer and why, opsets, the command line, the inspector's bytes entry
point, and the message when the onnx extra is missing."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import engine
from tests.ports.onnx_helpers import assert_verified, export_and_verify, input_layers, make_net

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from engine import ports  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

CHAIN = input_layers({"data": (2, 3, 6, 6)}) + """
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
layer { name: "bn_conv1" type: "BatchNorm" bottom: "conv1" top: "conv1" batch_norm_param { use_global_stats: true } }
layer { name: "scale_conv1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "conv1_relu" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool1" top: "fc" inner_product_param { num_output: 5 } }
layer { name: "drop" type: "Dropout" bottom: "fc" top: "fc" }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""


def _meta(model):
    return {p.key: p.value for p in model.metadata_props}


def test_in_place_chain_names(tmp_path):
    """conv1 -> bn_conv1 -> scale_conv1 -> conv1_relu, all in place: the states are
    conv1@conv1, conv1@bn_conv1, conv1@scale_conv1 and, last, conv1 (what later layers read
    and what Caffe's net.blobs['conv1'] holds)."""
    net = make_net('name: "chain"\n' + CHAIN, tmp_path)
    res, result = export_and_verify(net, all_blobs=False)
    assert_verified(result)
    g = res.model.graph
    produced = {o: n for n in g.node for o in n.output}
    assert produced["conv1@conv1"].op_type == "Conv"
    assert produced["conv1@bn_conv1"].op_type == "Div"
    assert produced["conv1@scale_conv1"].op_type == "Add"
    assert produced["conv1"].op_type == "Relu" and produced["conv1"].input[0] == "conv1@scale_conv1"
    pool = next(n for n in g.node if n.op_type == "MaxPool")
    assert pool.input[0] == "conv1" and pool.output[0] == "pool1"
    assert produced["fc"].op_type == "Identity" and produced["fc"].input[0] == "fc@fc"   # Dropout at TEST
    assert [i.name for i in g.input] == ["data"] and [o.name for o in g.output] == ["prob"]
    assert json.loads(_meta(res.model)["caffe.blob_tensors"]) == \
        {"data": "data", "conv1": "conv1", "pool1": "pool1", "fc": "fc", "prob": "prob"}
    # nodes say which Caffe layer they compute; node names start with the layer's
    assert "caffe layer 'bn_conv1' (BatchNorm)" in produced["conv1@bn_conv1"].doc_string
    assert produced["conv1@bn_conv1"].name.startswith("bn_conv1")
    # the value_info declares every blob's shape as the engine has it
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in g.value_info}
    assert shapes["conv1"] == [2, 4, 6, 6] and shapes["pool1"] == [2, 4, 3, 3]


def test_all_blobs_outputs_and_splits(tmp_path):
    """--all-blobs: every Caffe blob (Split tops too) is an output, at its last state."""
    text = input_layers({"data": (2, 3)}) + """
layer { name: "relu" type: "ReLU" bottom: "data" top: "r" }
layer { name: "a" type: "Power" bottom: "r" top: "a" power_param { scale: 2 } }
layer { name: "b" type: "Power" bottom: "r" top: "b" power_param { shift: 1 } }
"""
    net = make_net('name: "splits"\n' + text, tmp_path)
    assert "r_relu_0_split_0" in net.blob_names
    res, result = export_and_verify(net, all_blobs=True)
    assert_verified(result)
    outs = [o.name for o in res.model.graph.output]
    assert set(outs) == set(net.blob_names) - {"data"}
    assert outs.count("r_relu_0_split_1") == 1
    res2 = ports.export_onnx(net)
    assert [o.name for o in res2.model.graph.output] == sorted(["a", "b"]) == list(net.outputs)


def test_shared_memory_followed(tmp_path):
    """Caffe's Reshape/Flatten/Split tops share their bottom's memory: a ReLU in place on the
    reshaped top changes the bottom too, so ip2 (reading the bottom through a Split) sees the
    ReLU's output, and ip2's own last state is the in-place Power on its Flatten view.  The
    export reads what Caffe's next reader reads; the input modified in place keeps its name
    as the graph input, its last state is data@relu_data."""
    text = input_layers({"data": (2, 6)}) + """
layer { name: "relu_data" type: "ReLU" bottom: "data" top: "data" }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 6 } }
layer { name: "r" type: "Reshape" bottom: "ip" top: "r" reshape_param { shape { dim: 2 dim: 2 dim: 3 } } }
layer { name: "relu" type: "ReLU" bottom: "r" top: "r" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip" top: "ip2" inner_product_param { num_output: 3 } }
layer { name: "f" type: "Flatten" bottom: "ip2" top: "f" }
layer { name: "scale" type: "Power" bottom: "f" top: "f" power_param { scale: -2 } }
"""
    net = make_net('name: "alias"\n' + text, tmp_path)
    res, result = export_and_verify(net, all_blobs=True)
    assert_verified(result)
    x = np.maximum(net.blobs["data"].data, 0)
    W, b = net.params["ip"][0].data, net.params["ip"][1].data
    W2, b2 = net.params["ip2"][0].data, net.params["ip2"][1].data
    relu_ip = np.maximum(x @ W.T + b, 0)
    np.testing.assert_allclose(net.blobs["ip2"].data, -2 * (relu_ip @ W2.T + b2), rtol=1e-5, atol=1e-6)
    m = json.loads(_meta(res.model)["caffe.blob_tensors"])
    assert m["data"] == "data@relu_data" and m["ip2"] == "f" and m["ip"] == "ip"
    assert [i.name for i in res.model.graph.input] == ["data"]


# ------------------------------------------------------------------ refusals
PY_MODULE = '''
from engine.core.layers.python_layer import PyLayer


class Twice(PyLayer):
    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = 2 * bottom[0].data
'''


def _refusal(net):
    with pytest.raises(ports.ExportError) as e:
        ports.export_onnx(net)
    return e.value


def test_refuses_python_layer(tmp_path):
    (tmp_path / "twice_mod.py").write_text(PY_MODULE)
    text = input_layers({"data": (2, 3)}) + """
layer { name: "twice" type: "Python" bottom: "data" top: "t" python_param { module: "twice_mod" layer: "Twice" } }
"""
    net = make_net('name: "py"\n' + text, tmp_path)
    e = _refusal(net)
    assert e.layer == "twice"
    assert "layer 'twice' (Python)" in str(e) and "Python code" in str(e)


def test_refuses_data_layers_naming_each(tmp_path):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["data"] = np.zeros((4, 3), np.float32)
    (tmp_path / "list.txt").write_text(str(tmp_path / "d.h5") + "\n")
    text = """
layer { name: "mem" type: "MemoryData" top: "m" top: "ml" memory_data_param { batch_size: 2 channels: 3 height: 1
        width: 1 } }
layer { name: "h5" type: "HDF5Data" top: "data" hdf5_data_param { source: "%s" batch_size: 2 } }
layer { name: "relu" type: "ReLU" bottom: "data" top: "r" }
layer { name: "drop" type: "Dropout" bottom: "r" top: "r" }
layer { name: "filter" type: "Filter" bottom: "r" bottom: "ml" top: "kept" }
layer { name: "out" type: "HDF5Output" bottom: "m" bottom: "ml" hdf5_output_param { file_name: "%s" } }
""" % (tmp_path / "list.txt", tmp_path / "out.h5")
    net = make_net('name: "data"\n' + text, tmp_path, phase=engine.TRAIN)
    e = _refusal(net)
    assert e.layer == "mem"
    msg = str(e)
    assert "layer 'mem' (MemoryData)" in msg and "layer 'h5' (HDF5Data)" in msg
    assert "layer 'drop' (Dropout)" in msg and "TRAIN" in msg        # random mask in TRAIN
    assert "layer 'filter' (Filter)" in msg and "depends on the data" in msg
    assert "layer 'out' (HDF5Output)" in msg and "writes" in msg
    assert [r[0] for r in e.refusals] == ["mem", "h5", "drop", "filter", "out"]
    assert "Input layer" in msg


def test_recurrent_layers_unrolled_with_their_state(tmp_path):
    """LSTM and RNN: Caffe's unrolled net itself; the hidden (and cell) state Caffe carries
    inside the layer from one Forward to the next is an input (<layer>/h_0, <layer>/c_0) and
    an output (<layer>/h_T, <layer>/c_T: Caffe's inner blobs h_4, c_4 for 4 timesteps) of the
    model: fed the engine's state, every Forward of a sequence of three agrees, the state
    included."""
    text = input_layers({"x": (4, 2, 3), "cont": (4, 2)}) + """
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h" recurrent_param { num_output: 5 } }
layer { name: "rnn" type: "RNN" bottom: "x" bottom: "cont" top: "h2" recurrent_param { num_output: 5 } }
"""
    net = make_net('name: "rec"\n' + text, tmp_path)
    ports.randomize_params(net, 0)
    res = ports.export_onnx(net, opset="latest")
    assert {i.name for i in res.model.graph.input} == {"x", "cont", "lstm/h_0", "lstm/c_0", "rnn/h_0"}
    state = json.loads(_meta(res.model)["caffe.state"])
    assert state["lstm/c_0"] == {"layer": "lstm", "index": 1, "output": "lstm/c_4"}
    assert not any(n.op_type in ("LSTM", "RNN") for n in res.model.graph.node)
    for step in range(3):
        ports.random_inputs(net, step)
        net.blobs["cont"].data[...] = 1 if step else net.blobs["cont"].data    # sequences go on
        result = ports.verify(net, res.model, rtol=1e-6)
        assert_verified(result)
        assert {"lstm/h_4 (state lstm)", "lstm/c_4 (state lstm)"} <= {r.blob for r in result.rows}
    assert np.abs(net.layer_dict["lstm"].recur_output_blobs[0].data).max() > 0


def test_recurrent_expose_hidden_and_static_input(tmp_path):
    text = input_layers({"x": (3, 2, 4), "cont": (3, 2), "xs": (2, 6), "h0": (1, 2, 5), "c0": (1, 2, 5)}) + """
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" bottom: "xs" bottom: "h0" bottom: "c0"
        top: "h" top: "hT" top: "cT" recurrent_param { num_output: 5 expose_hidden: true } }
layer { name: "rnn" type: "RNN" bottom: "x" bottom: "cont" bottom: "h0" top: "o" top: "oT"
        recurrent_param { num_output: 5 expose_hidden: true } }
"""
    net = make_net('name: "exposed"\n' + text, tmp_path)
    res, result = export_and_verify(net, rtol=1e-6)
    assert_verified(result)
    assert [i.name for i in res.model.graph.input] == ["x", "cont", "xs", "h0", "c0"]
    assert _meta(res.model)["caffe.state"] == "{}"


def test_refuses_random_layers(tmp_path):
    text = input_layers({"data": (1, 2, 5, 5)}) + """
layer { name: "noise" type: "DummyData" top: "n" dummy_data_param { shape { dim: 1 dim: 2 dim: 5 dim: 5 }
        data_filler { type: "gaussian" } } }
layer { name: "sto" type: "Pooling" bottom: "data" top: "sto" pooling_param { pool: STOCHASTIC kernel_size: 2 } }
"""
    net = make_net('name: "rand"\n' + text, tmp_path, phase=engine.TRAIN)
    e = _refusal(net)
    assert "layer 'noise' (DummyData)" in str(e) and "gaussian" in str(e)
    assert "layer 'sto' (Pooling)" in str(e) and "STOCHASTIC" in str(e)


def test_infogain_matrix_from_source(tmp_path):
    """InfogainLoss's H read from its source file becomes a constant of the model."""
    from engine.core import io
    rng = np.random.default_rng(2)
    H = rng.uniform(0, 1, (1, 1, 4, 4)).astype(np.float32)
    io.write_binary(str(tmp_path / "H.binaryproto"), io.array_to_blobproto(H))
    text = input_layers({"data": (3, 4), "label": (3,)}) + """
layer { name: "info" type: "InfogainLoss" bottom: "data" bottom: "label" top: "info"
        infogain_loss_param { source: "%s" } }
""" % (tmp_path / "H.binaryproto")
    net = make_net('name: "info"\n' + text, tmp_path)
    res, result = export_and_verify(net, rtol=1e-6)
    assert_verified(result)
    from onnx import numpy_helper
    inits = {i.name: numpy_helper.to_array(i) for i in res.model.graph.initializer}
    np.testing.assert_array_equal(inits["info/H"], H.reshape(4, 4))


def test_refused_and_exportable_types_cover_the_registry():
    """Every registered layer type is either converted or refused with a reason."""
    types = set(engine.layer_type_list())
    assert types <= set(ports.exportable_types()) | set(ports.refused_types())
    assert all(len(r) > 20 for r in ports.refused_types().values())
    assert not set(ports.exportable_types()) & set(ports.refused_types())


# ------------------------------------------------------------------ opsets, API, extras
def test_opsets():
    assert ports.resolve_opset(None) == 13 == ports.DEFAULT_OPSET
    newest = ports.newest_opset()
    assert newest >= 13 and newest <= onnx.defs.onnx_opset_version()
    assert ports.resolve_opset("latest") == newest
    assert ports.resolve_opset(newest + 50) == newest           # clamped
    with pytest.raises(ports.ExportError, match="opset 11"):
        ports.resolve_opset(11)


def test_export_bytes_and_file(tmp_path):
    net = make_net('name: "chain"\n' + CHAIN, tmp_path, name="chain")
    data = ports.export_onnx_bytes(net, opset="latest", all_blobs=True)
    model = onnx.load_from_string(data)
    assert model.opset_import[0].version == ports.newest_opset()
    assert _meta(model)["caffe.net"] == "chain"
    res = ports.export_onnx(net, tmp_path / "m.onnx")
    assert res.path == str(tmp_path / "m.onnx")
    assert onnx.load(str(tmp_path / "m.onnx")).graph.node[0].op_type == "Conv"
    # from a prototxt path: built in TEST, weights from the fillers
    res = ports.export_onnx(str(tmp_path / "chain.prototxt"), tmp_path / "p.onnx", seed=3)
    assert [o.name for o in res.model.graph.output] == ["prob"]


def test_big_weights_go_to_external_data(tmp_path, monkeypatch):
    """Weights over protobuf's 2 GB limit (here: a lowered threshold) are written beside the
    model; the file is checked and verified from its path."""
    from engine.ports import onnx_export
    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_BYTES", 1000)
    text = input_layers({"data": (2, 64)}) + """
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" inner_product_param { num_output: 64 } }
layer { name: "relu" type: "ReLU" bottom: "fc" top: "fc" }
"""
    net = make_net('name: "big"\n' + text, tmp_path)
    ports.randomize_params(net, 0)
    ports.random_inputs(net, 0)
    res = ports.export_onnx(net, tmp_path / "big.onnx")
    assert (tmp_path / "big.onnx.data").stat().st_size > 100
    assert_verified(ports.verify(net, str(tmp_path / "big.onnx")))
    with pytest.raises(ports.ExportError, match="2 GB"):
        ports.export_onnx_bytes(net)
    assert res.path == str(tmp_path / "big.onnx")


def test_export_bytes_refusal_is_an_engine_error(tmp_path):
    text = input_layers({"data": (2, 3)}) + 'layer { name: "drop" type: "Dropout" bottom: "data" top: "d" }'
    net = make_net('name: "d"\n' + text, tmp_path, phase=engine.TRAIN)
    with pytest.raises(engine.CaffeError, match="layer 'drop' \\(Dropout\\)"):
        ports.export_onnx_bytes(net)


def test_verify_reports_a_difference(tmp_path):
    """verify() finds a port that departs: the model's scale constant edited by 1%."""
    net = make_net('name: "chain"\n' + CHAIN, tmp_path)
    ports.randomize_params(net, 0)
    ports.random_inputs(net, 0)
    res = ports.export_onnx(net)
    from onnx import numpy_helper
    for i, init in enumerate(res.model.graph.initializer):
        if init.name == "bn_conv1/std":
            arr = numpy_helper.to_array(init) * np.float32(1.01)
            res.model.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr, init.name))
    result = ports.verify(net, res.model)
    assert not result.ok
    assert [r.blob for r in result.failures][0] == "conv1"
    assert "DIFFERS" in str(result) and result.worst.blob in ("conv1", "pool1", "fc", "prob")
    d = result.to_dict()
    assert d["ok"] is False and d["rows"][0]["blob"] == "data"


def test_import_engine_needs_no_onnx():
    code = ("import sys, engine, engine.ports; assert 'onnx' not in sys.modules and 'onnxruntime' not in "
            "sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_missing_extra_named(tmp_path):
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from engine.tools.cli import main\n"
            "sys.exit(main(['export-onnx', %r, '-o', %r]))" % (str(tmp_path / "chain.prototxt"),
                                                               str(tmp_path / "m.onnx")))
    (tmp_path / "chain.prototxt").write_text('name: "chain"\n' + CHAIN)
    r = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "pip install .[onnx]" in r.stderr and "onnx" in r.stderr
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------------ the command line
def _cli(*args):
    from io import StringIO

    from engine.tools.cli import main
    out, err = StringIO(), StringIO()
    code = main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_export_onnx(tmp_path):
    proto = tmp_path / "chain.prototxt"
    proto.write_text('name: "chain"\n' + CHAIN)
    out_path = tmp_path / "chain.onnx"
    code, out, err = _cli("export-onnx", str(proto), "-o", str(out_path), "--opset", "latest", "--all-blobs",
                          "--verify")
    assert code == 0, err
    assert "Wrote %s" % out_path in out and "every blob equal" in out
    model = onnx.load(str(out_path))
    assert model.opset_import[0].version == ports.newest_opset()
    assert {o.name for o in model.graph.output} == {"conv1", "pool1", "fc", "prob"}


def test_cli_export_onnx_weights_and_refusal(tmp_path):
    proto = tmp_path / "chain.prototxt"
    proto.write_text('name: "chain"\n' + CHAIN)
    net = engine.Net(str(proto), engine.TEST)
    ports.randomize_params(net, 5)
    net.save(str(tmp_path / "w.caffemodel"))
    code, out, err = _cli("export-onnx", str(proto), "--weights", str(tmp_path / "w.caffemodel"), "-o",
                          str(tmp_path / "w.onnx"))
    assert code == 0, err
    from onnx import numpy_helper
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "w.onnx")).graph.initializer}
    np.testing.assert_array_equal(inits["conv1/weight"], net.params["conv1"][0].data)
    code, out, err = _cli("export-onnx", str(proto), "--phase", "TRAIN", "-o", str(tmp_path / "t.onnx"))
    assert code == 1 and "layer 'drop' (Dropout)" in err and not (tmp_path / "t.onnx").exists()
    code, out, err = _cli("export-onnx", str(proto), "-o", str(tmp_path / "x.onnx"), "--opset", "9")
    assert code == 1 and "opset 9" in err


class _Tty(__import__("io").StringIO):
    def isatty(self):
        return True


def test_cli_export_onnx_progress_and_no_progress(tmp_path, monkeypatch):
    """A progress line over the layers on a terminal; --no-progress (as the other commands
    take it) turns it off."""
    proto = tmp_path / "chain.prototxt"
    proto.write_text('name: "chain"\n' + CHAIN)
    for flag, shown in (([], True), (["--no-progress"], False)):
        tty = _Tty()
        monkeypatch.setattr(sys, "stderr", tty)
        code, out, err = _cli("export-onnx", str(proto), "-o", str(tmp_path / "c.onnx"), *flag)
        assert code == 0, err
        assert ("export-onnx [" in tty.getvalue()) == shown, tty.getvalue()

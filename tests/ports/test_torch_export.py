"""export-torch: the module source is plain (torch only, one attribute per Caffe layer, forward
in Caffe's order) and, run by torch, equals the engine on every blob -- on a net made of
the traps, and on zoo nets."""
import io
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import port_nets as pn  # noqa: E402

from engine.ports.activations import PortError  # noqa: E402
from engine.ports.torch_export import export_torch, torch_source, verify_torch  # noqa: E402
from engine.tools.cli import main  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_traps_net_equals_the_engine_on_every_blob(tmp_path):
    net, _ = pn.make_net(tmp_path, pn.TRAPS, scale_factor=1.5)
    res = export_torch(net, tmp_path / "model.py")
    v = verify_torch(net, res.path, res.state_dict_path)
    assert v.ok, v.format()
    assert len(v.rows) == sum(len(net.top_id_vecs[i]) for i, l in enumerate(net.layers)
                              if l.type not in ("Input", "Split"))
    assert v.max_rel < 1e-5
    # a second input, not the seeded one: the module is not tied to the values it was checked on
    x = np.random.default_rng(7).uniform(-3, 3, net.blobs["data"].shape).astype(np.float32)
    assert verify_torch(net, res.path, res.state_dict_path, inputs={"data": x}).ok
    src = res.source
    # Caffe's pooling where PyTorch's own rules or limits differ
    assert re.search(r"self\.p1 = nn\.MaxPool2d\(.*padding=\(1, 1\), ceil_mode=True\)", src)
    assert re.search(r"self\.p3 = CaffeMaxPool2d\(", src)                 # pad 2 > kernel 3 // 2
    assert re.search(r"self\.p4 = CaffeAvgPool2d\(", src)
    assert re.search(r"self\.p9 = nn\.MaxPool2d\(.*ceil_mode=False\)", src)  # round_mode FLOOR
    assert "CaffeLRNWithinChannel(3, 0.5, 0.75)" in src


def test_negative_pads_equal_the_engine(tmp_path):
    """A negative pad (caffe.proto's uint32 of 2^31 and up, -1 in Caffe's int): a convolution's
    input cropped, a deconvolution's output grown around its bias, pooling windows starting
    inside the image (MAX's ending at the image's end, AVE's at H + pad)."""
    import engine
    W = 'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" }'
    path = tmp_path / "negative_pads.prototxt"
    path.write_text(
        'name: "negative_pads"\n'
        'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 20 dim: 19 } } }\n'
        'layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param { num_output: 4 '
        'kernel_size: 3 pad_h: 4294967295 pad_w: 1 %s } }\n'
        'layer { name: "p" type: "Pooling" bottom: "c" top: "p" pooling_param { pool: MAX kernel_size: 3 '
        'stride: 2 pad: 4294967295 } }\n'
        'layer { name: "a" type: "Pooling" bottom: "p" top: "a" pooling_param { pool: AVE kernel_size: 2 '
        'stride: 1 pad_h: 4294967295 pad_w: 1 } }\n'
        'layer { name: "d" type: "Deconvolution" bottom: "a" top: "d" convolution_param { num_output: 2 '
        'kernel_size: 3 stride: 2 pad: 4294967295 %s } }\n' % (W, W))
    net = engine.Net(str(path), engine.TEST)
    res = export_torch(net, tmp_path / "model.py")
    v = verify_torch(net, res.path, res.state_dict_path)
    assert v.ok and v.max_rel < 1e-5, v.format()
    assert len(v.rows) == 4
    assert "self.c = CaffeNegativePadConv(nn.Conv2d(3, 4, kernel_size=(3, 3), padding=(0, 1)), pad=(-1, 1))" \
        in res.source
    assert re.search(r"self\.p = CaffeMaxPool2d\(.*padding=\(-1, -1\)", res.source)
    assert re.search(r"self\.a = CaffeAvgPool2d\(.*padding=\(-1, 1\)", res.source)


def test_module_is_plain_readable_and_independent_of_the_engine(tmp_path):
    net, _ = pn.make_net(tmp_path, pn.TRAPS)
    res = export_torch(net, tmp_path / "model.py")
    src = res.source
    assert "engine" not in re.sub(r'""".*?"""', "", src, flags=re.S)      # imports torch only
    assert re.findall(r"^import (\S+)", src, flags=re.M) == ["torch", "torch.nn", "torch.nn.functional"]
    assert "class TrapsNet(nn.Module):" in src
    # one attribute per layer, Caffe's names made identifiers, with the mapping
    assert res.attributes["conv/g"] == "conv_g" and res.attributes["3x3/forward"] == "l_3x3_forward"
    assert "    conv/g      -> self.conv_g" in src
    assert "abs_ = self.abs(elt_max)" in src                              # a builtin's name kept free
    # forward in Caffe's order, in-place layers rebinding their blob
    body = src[src.index("    def forward(self, data):"):]
    calls = re.findall(r"self\.(\w+)\(", body)
    assert calls == [res.attributes[n] for n in net.layer_names if n in res.attributes]
    assert "conv_g = self.prelu_c(conv_g)" in body
    assert "s_a, s_b, s_c = self.slice1(concat1)" in body
    # the state_dict has the layers' parameters under the attribute names
    sd = torch.load(res.state_dict_path, weights_only=True)
    assert set(sd) >= {"conv_g.weight", "deconv.weight", "deconv.bias", "bn.running_mean", "sc.weight", "sc.bias",
                       "ip_t.weight", "prelu_s.weight", "bias.bias"}
    assert "conv_g.bias" not in sd
    bn = net.layer_dict["bn"]
    np.testing.assert_allclose(sd["bn.running_var"].numpy(), bn.blobs[1].data / bn.blobs[2].data[0], rtol=1e-6)
    ip_t = net.layer_dict["ip_t"]
    np.testing.assert_array_equal(sd["ip_t.weight"].numpy(), ip_t.blobs[0].data.T)     # transpose: true


def test_layers_without_a_form_are_refused_by_name(tmp_path):
    text = pn.SMALL.replace('layer { name: "prob" type: "Softmax" bottom: "ip1" top: "prob" }', """
layer { name: "label" type: "Input" top: "label" input_param { shape { dim: 2 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
layer { name: "top1" type: "ArgMax" bottom: "ip1" top: "top1" }""")
    net, _ = pn.make_net(tmp_path, text)
    with pytest.raises(PortError) as e:
        torch_source(net)
    msg = str(e.value)
    assert "layer 'loss' (type SoftmaxWithLoss): a loss layer" in msg
    assert "layer 'top1' (type ArgMax)" in msg and "2 layers" in msg


def test_stochastic_pooling_is_refused(tmp_path):
    net, _ = pn.make_net(tmp_path, pn.SMALL.replace("pool: MAX", "pool: STOCHASTIC"))
    with pytest.raises(PortError, match="layer 'pool1' \\(type Pooling\\): STOCHASTIC"):
        torch_source(net)


def test_command_writes_module_and_state_dict_and_verifies(tmp_path):
    net, model = pn.make_net(tmp_path)
    net.save(str(tmp_path / "w.caffemodel"))
    out, err = io.StringIO(), io.StringIO()
    code = main(["export-torch", str(model), "--weights", str(tmp_path / "w.caffemodel"), "-o",
                 str(tmp_path / "m.py"), "--verify"], out, err)
    assert code == 0, err.getvalue()
    assert (tmp_path / "m.py").is_file() and (tmp_path / "m.pth").is_file()
    assert "all within rtol" in out.getvalue() and "8 values" in out.getvalue()
    assert "class Small" in (tmp_path / "m.py").read_text()
    # the weights came from the caffemodel: the module alone reproduces the engine's output
    from engine.ports.torch_export import load_module
    mod = load_module(tmp_path / "m.py")
    m = mod.Small()
    m.load_state_dict(torch.load(tmp_path / "m.pth", weights_only=True))
    m.eval()
    x = np.random.default_rng(1).standard_normal(net.blobs["data"].shape).astype(np.float32)
    net.blobs["data"].data[...] = x
    net.Forward()
    with torch.no_grad():
        y = m(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, net.blobs["prob"].data, rtol=1e-5, atol=1e-7)


@pytest.mark.shared
@pytest.mark.parametrize("model", ["bvlc_reference_caffenet", "bvlc_googlenet"])
def test_zoo_nets_equal_the_engine_on_every_blob(shared_dir, tmp_path, model):
    net = pn.zoo_net(shared_dir / "zoo" / "models" / model / "deploy.prototxt")
    res = export_torch(net, tmp_path / "model.py", model_file=model)
    v = verify_torch(net, res.path, res.state_dict_path)
    assert v.ok, v.format()
    # float32 rounding: convolutions and inner products summed in another order (the softmax of
    # CaffeNet's large random logits magnifies it to ~7e-6)
    assert v.max_rel < 5e-5
    assert len(v.rows) > (140 if model == "bvlc_googlenet" else 20)

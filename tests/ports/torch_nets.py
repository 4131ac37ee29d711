"""A small ResNet-like Caffe net and a PyTorch port of it written as a user would write one
(BatchNorm + Scale folded into nn.BatchNorm2d, ceil-mode pooling, a Flatten + Linear head,
the weights copied from Caffe's by a conversion function), with the classic mistakes
plantable in the module's source or in the conversion; and the other direction: a small
PyTorch model and its Caffe conversion (as PytorchToCaffe would write it)."""
import textwrap

import numpy as np
import port_nets
import pytest

import engine

RESNETISH = """
name: "resnetish"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 16 dim: 16 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1
                            weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn_conv1" type: "BatchNorm" bottom: "conv1" top: "conv1" batch_norm_param { eps: 1e-5 } }
layer { name: "scale_conv1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true
        filler { type: "uniform" min: 0.5 max: 1.5 } bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "conv1_relu" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "res2a_branch2a" type: "Convolution" bottom: "pool1" top: "res2a_branch2a"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "gaussian" std: 0.2 } } }
layer { name: "bn2a_branch2a" type: "BatchNorm" bottom: "res2a_branch2a" top: "res2a_branch2a" }
layer { name: "scale2a_branch2a" type: "Scale" bottom: "res2a_branch2a" top: "res2a_branch2a"
        scale_param { bias_term: true filler { type: "uniform" min: 0.5 max: 1.5 }
                      bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "res2a_branch2a_relu" type: "ReLU" bottom: "res2a_branch2a" top: "res2a_branch2a" }
layer { name: "res2a_branch2b" type: "Convolution" bottom: "res2a_branch2a" top: "res2a_branch2b"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "gaussian" std: 0.2 } } }
layer { name: "bn2a_branch2b" type: "BatchNorm" bottom: "res2a_branch2b" top: "res2a_branch2b" }
layer { name: "scale2a_branch2b" type: "Scale" bottom: "res2a_branch2b" top: "res2a_branch2b"
        scale_param { bias_term: true filler { type: "uniform" min: 0.5 max: 1.5 }
                      bias_filler { type: "gaussian" std: 0.2 } } }
layer { name: "res2a" type: "Eltwise" bottom: "pool1" bottom: "res2a_branch2b" top: "res2a" }
layer { name: "res2a_relu" type: "ReLU" bottom: "res2a" top: "res2a" }
layer { name: "drop" type: "Dropout" bottom: "res2a" top: "res2a" dropout_param { dropout_ratio: 0.5 } }
layer { name: "fc" type: "InnerProduct" bottom: "res2a" top: "fc"
        inner_product_param { num_output: 10 weight_filler { type: "gaussian" std: 0.05 }
                              bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""

# The port as a user writes it: one BatchNorm2d where Caffe has BatchNorm + Scale, functional
# ReLUs and residual add, ceil-mode pooling, Flatten + Linear.  {placeholders}: the mistakes.
MODULE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class CaffeResNet(nn.Module):
    """resnetish, re-implemented by hand to load Caffe's weights."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn_conv1 = nn.BatchNorm2d(8, eps={eps})
        self.pool1 = nn.MaxPool2d(3, stride=2, ceil_mode={ceil})
        self.res2a_branch2a = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2a_branch2a = nn.BatchNorm2d(8, eps={eps})
        self.res2a_branch2b = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2a_branch2b = nn.BatchNorm2d(8, eps={eps})
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
{prologue}        x = F.relu(self.bn_conv1(self.conv1(x)))
        x = self.pool1(x)
        y = F.relu(self.bn2a_branch2a(self.res2a_branch2a(x)))
        y = self.bn2a_branch2b(self.res2a_branch2b(y))
        x = F.relu(x + y)
{dropout}        x = {flatten}
        return torch.softmax(self.fc(x), dim={dim})


def make():
    return CaffeResNet()
'''

# What a user's module may do before its first layer (the input mistakes)
PROLOGUES = {
    "none": "",
    "bgr_rgb": "        x = x.flip(1)\n",                           # reverses the channels it is given
    "scale_255": "        x = x / 255.0\n",                          # expects 0-255, is given 0-1 (or so)
    "mean": "        x = x - torch.tensor([104.0, 117.0, 123.0]).view(1, 3, 1, 1)\n",   # subtracts it once more
    "nhwc": "        x = x.permute(0, 3, 1, 2)\n",                   # takes N x H x W x C
}


# the module's attribute names: Caffe's layer names ("caffe"), or names of the user's own
OWN_NAMES = {"bn_conv1": "bn1", "res2a_branch2a": "block_conv1", "bn2a_branch2a": "block_bn1",
             "res2a_branch2b": "block_conv2", "bn2a_branch2b": "block_bn2"}


def _renamed(text, names):
    if names == "caffe":
        return text
    for caffe, own in OWN_NAMES.items():
        text = text.replace(caffe, own)
    return text


def module_source(eps=1e-5, ceil=True, dim=1, prologue="none", dropout_scale=None, flatten="nchw", names="own"):
    flat = {"nchw": "torch.flatten(x, 1)",
            "nhwc": "x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)"}[flatten]
    drop = "" if dropout_scale is None else "        x = x * %r\n" % dropout_scale
    return _renamed(MODULE, names).format(eps=eps, ceil=ceil, dim=dim, prologue=PROLOGUES[prologue], dropout=drop,
                                          flatten=flat)


def write_port(tmp_path, name="port.py", **kw):
    p = tmp_path / name
    p.write_text(module_source(**kw))
    return p


def _a(blob):
    return np.array(blob.data, dtype=np.float32, copy=True)


def caffe_state_dict(net, kernel="ok", fc="ok", split="ok", bgr=False, names="own"):
    """The state_dict a user's conversion script makes from the Caffe net's weights:
    BatchNorm's statistics divided by its scale factor, the Scale's gamma and beta as the
    BatchNorm2d's weight and bias, the InnerProduct's weight as the Linear's.  Mistakes:
    ``kernel`` "flipped" (H and W reversed: convolution vs correlation) or "transposed"
    (kh <-> kw); ``fc`` "reshaped" (a (in, out) matrix reshaped, not transposed); ``split``
    "no_scale" (the Scale dropped: weight 1, bias 0) or "swapped" (gamma and beta swapped);
    ``bgr``: conv1's input channels reversed."""
    import torch
    L = net.layer_dict
    sd = {}

    def conv(name, key, bias=True, first=False):
        w = _a(L[name].blobs[0])
        if kernel == "flipped" and first:
            w = w[:, :, ::-1, ::-1]
        elif kernel == "transposed" and first:
            w = np.swapaxes(w, 2, 3)
        if bgr and first:
            w = w[:, ::-1]
        sd[key + ".weight"] = w
        if bias:
            sd[key + ".bias"] = _a(L[name].blobs[1])

    def bn(bn_name, scale_name, key, first=False):
        m, v, sf = (_a(b) for b in L[bn_name].blobs)
        f = 0.0 if sf[0] == 0 else 1.0 / sf[0]
        gamma, beta = _a(L[scale_name].blobs[0]), _a(L[scale_name].blobs[1])
        if first and split == "no_scale":
            gamma, beta = np.ones_like(gamma), np.zeros_like(beta)
        elif first and split == "swapped":
            gamma, beta = beta, gamma
        sd[key + ".running_mean"] = m * f
        sd[key + ".running_var"] = v * f
        sd[key + ".weight"] = gamma
        sd[key + ".bias"] = beta
        sd[key + ".num_batches_tracked"] = np.array(0, np.int64)

    conv("conv1", "conv1", first=True)
    bn("bn_conv1", "scale_conv1", "bn_conv1", first=True)
    conv("res2a_branch2a", "res2a_branch2a", bias=False)
    bn("bn2a_branch2a", "scale2a_branch2a", "bn2a_branch2a")
    conv("res2a_branch2b", "res2a_branch2b", bias=False)
    bn("bn2a_branch2b", "scale2a_branch2b", "bn2a_branch2b")
    w = _a(L["fc"].blobs[0])                                 # (out, in): nn.Linear's layout already
    if fc == "reshaped":
        w = w.reshape(w.shape[::-1]).T                       # "(in, out)" by a reshape, then transposed
    sd["fc.weight"] = w
    sd["fc.bias"] = _a(L["fc"].blobs[1])
    return {_renamed(k, names): torch.from_numpy(np.array(v, copy=True)) for k, v in sd.items()}


def save_state_dict(tmp_path, net, name="port.pth", **kw):
    import torch
    p = tmp_path / name
    torch.save(caffe_state_dict(net, **kw), str(p))
    return p


def make_net(tmp_path, text=RESNETISH, seed=5, scale_factor=2.0, name="resnetish.prototxt"):
    """The TEST net with seeded filler weights and BatchNorm statistics that are not trivial."""
    return port_nets.make_net(tmp_path, text, seed=seed, name=name, scale_factor=scale_factor)


def run_cli(argv):
    """(exit code, stdout, stderr) of ``python -m engine ARGV``."""
    import io

    from engine.tools.cli import main
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def one_thread():
    """torch on one thread in a test (a busy 2-core machine), as before it afterwards."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------------------------------------------------------------------- the other direction
# A PyTorch model (the reference) ...
TORCH_MODEL = '''
import torch
import torch.nn as nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6, eps=1e-3)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 4, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
        x = self.relu2(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


def make():
    torch.manual_seed(0)
    m = Small()
    with torch.no_grad():                      # statistics that are not the defaults
        m.bn1.running_mean.uniform_(-0.5, 0.5)
        m.bn1.running_var.uniform_(0.5, 2.0)
        m.bn1.weight.uniform_(0.5, 1.5)
        m.bn1.bias.uniform_(-0.3, 0.3)
    return m.eval()
'''

# ... and its Caffe conversion, as a PyTorch-to-Caffe converter writes it ({eps}, {round}: the
# places such converters get wrong).
CAFFE_OF_TORCH = """
name: "small_from_torch"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 12 dim: 12 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "bn1" batch_norm_param { eps: %(eps)s } }
layer { name: "bn1_scale" type: "Scale" bottom: "bn1" top: "bn1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "bn1" top: "bn1" }
layer { name: "pool1" type: "Pooling" bottom: "bn1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 %(round)s } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: "relu2" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "fc" type: "InnerProduct" bottom: "conv2" top: "fc" inner_product_param { num_output: 5 } }
"""


def write_torch_model(tmp_path, name="small.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(TORCH_MODEL))
    return p


def caffe_of_torch(tmp_path, module, eps="0.001", round_mode="", name="small_from_torch.prototxt"):
    """The Caffe conversion of ``module`` (TORCH_MODEL's Small): the prototxt and the net with
    the module's weights copied in (BatchNorm's statistics with scale factor 1)."""
    p = tmp_path / name
    p.write_text(CAFFE_OF_TORCH % {"eps": eps, "round": round_mode})
    net = engine.Net(str(p), engine.TEST)
    sd = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    L = net.layer_dict
    L["conv1"].blobs[0].data[...] = sd["conv1.weight"]
    L["conv1"].blobs[1].data[...] = sd["conv1.bias"]
    L["bn1"].blobs[0].data[...] = sd["bn1.running_mean"]
    L["bn1"].blobs[1].data[...] = sd["bn1.running_var"]
    L["bn1"].blobs[2].data[...] = 1.0
    L["bn1_scale"].blobs[0].data[...] = sd["bn1.weight"]
    L["bn1_scale"].blobs[1].data[...] = sd["bn1.bias"]
    L["conv2"].blobs[0].data[...] = sd["conv2.weight"]
    L["conv2"].blobs[1].data[...] = sd["conv2.bias"]
    L["fc"].blobs[0].data[...] = sd["fc.weight"]
    L["fc"].blobs[1].data[...] = sd["fc.bias"]
    return net, p

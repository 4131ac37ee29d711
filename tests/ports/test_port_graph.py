"""The port interface (engine.ports.port_graph.PortGraph): compare_port takes any port
object, not only an ONNX model; the ONNX port is one such object."""
import re

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import port_nets as pn  # noqa: E402

from engine.ports.compare import compare_port  # noqa: E402
from engine.ports.onnx_port import OnnxPort  # noqa: E402
from engine.ports.port_graph import PortGraph, PortNode  # noqa: E402


class Wrapped(PortGraph):
    """A port of another kind: ops renamed, run through an ONNX port underneath."""

    def __init__(self, inner):
        nodes = [PortNode("my" + n.op, list(n.inputs), list(n.outputs), n.name) for n in inner.nodes]
        super().__init__("wrapped", inner.inputs, nodes)
        self.inner = inner
        self.parts = 0

    def input_shape(self, name):
        return self.inner.input_shape(name)

    def run_all(self, feeds):
        return self.inner.run_all(feeds)

    def run_part(self, inputs, output, values):
        self.parts += 1
        return self.inner.run_part(inputs, output, values)


def test_onnx_port_is_a_port_graph(tmp_path):
    net, _ = pn.make_net(tmp_path)
    m = pn.build_port(net)
    port = OnnxPort(m, "m")
    assert isinstance(port, PortGraph)
    assert port.op("conv1") == "Conv" and port.op("data") is None
    assert port.depends("prob", "conv1") and not port.depends("conv1", "prob")
    vals = port.run_all({"data": np.ones((2, 3, 16, 16), np.float32)})
    again = port.run_part(["pool1"], "norm1", vals)
    assert np.array_equal(again, vals["norm1"])


def test_compare_port_takes_any_port_graph(tmp_path):
    net, _ = pn.make_net(tmp_path)
    port = Wrapped(OnnxPort(pn.rename_all(pn.build_port(net)), "m"))
    r = compare_port(net, port)
    assert r.faithful, r.format()
    assert r.port == "wrapped" and r.matching["topology"] == 8
    assert port.parts > 0            # own errors came from the port's parts
    m = pn.build_port(net)
    pn.attr(pn.node(m, "bn1"), "epsilon", 1e-3)
    r = compare_port(net, Wrapped(OnnxPort(m, "m")))
    assert r.first_departing == "bn1", r.format()
    assert r.diagnosis[0].kind == "batchnorm_eps"


class Dump(PortGraph):
    """Tensors dumped by another runtime: no part can be re-run."""
    can_rerun = False

    def __init__(self, inner, feeds):
        super().__init__("dump", inner.inputs, inner.nodes)
        self.values = inner.run_all(feeds)

    def run_all(self, feeds):
        return dict(self.values)


def test_a_port_that_cannot_rerun_parts_is_checked_with_caffe_on_its_values(tmp_path):
    """can_rerun = False: each layer's own error is Caffe's layer run on the port's values of
    its inputs; a bug is still found at its layer (not downstream, where the port's values
    differ end to end) and named."""
    from engine.ports import random_inputs
    net, _ = pn.make_net(tmp_path)
    random_inputs(net, 0)
    x = np.array(net.blobs["data"].data, copy=True)
    m = pn.rename_all(pn.build_port(net))
    r = compare_port(net, Dump(OnnxPort(m, "m"), {"t0": x}), {"data": x})
    assert r.faithful, r.format()
    assert r.matching["topology"] == 8
    m = pn.build_port(net)
    pn.attr(pn.node(m, "bn1"), "epsilon", 1e-3)
    r = compare_port(net, Dump(OnnxPort(pn.rename_all(m), "m"), {"t0": x}), {"data": x})
    assert r.first_departing == "bn1", r.format()
    assert r.diagnosis_for("bn1").kind == "batchnorm_eps"
    assert r.row("conv1@relu1").own_rel < 1e-6 < r.row("conv1@relu1").rel      # downstream: its own is exact


def test_a_net_without_weights_proves_nothing(tmp_path):
    """A deploy file without fillers: every weight 0, every value 0; the port agrees, and the
    comparison says it proves nothing."""
    import engine
    p = tmp_path / "zero.prototxt"
    p.write_text(re.sub(r"(weight_|bias_)?filler \{[^}]*\}", "", pn.SMALL))
    net = engine.Net(str(p), engine.TEST)
    assert not np.any(net.params["conv1"][0].data)
    r = compare_port(net, pn.build_port(net))
    assert r.proves_nothing and r.message.startswith("Proves nothing")
    assert any("proves nothing" in n for n in r.notes)
    net2, _ = pn.make_net(tmp_path)
    assert not compare_port(net2, pn.build_port(net2)).proves_nothing

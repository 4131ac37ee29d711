"""The Python layer (python_layer.hpp) and pycaffe's caffe.Layer contract."""
import textwrap

import numpy as np
import pytest
from google.protobuf import text_format

from engine.core.blob import Blob
from engine.core.errors import LayerError, PythonLayerRefused
from engine.core.layers import create_layer
from engine.core.layers.python_layer import PyLayer
from engine.instruments.gradient_check import GradientChecker
from engine.proto import caffe_pb2
from tests.layers.helpers import empty_blobs, uniform_blob

LAYER_MODULE = '''
import numpy as np
from engine.core.layers.python_layer import PyLayer


class ScaleBy(PyLayer):
    """top = bottom * factor, factor from param_str."""

    def setup(self, bottom, top):
        self.factor = float(self.param_str or 1)
        self.seen_phase = self.phase

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data * self.factor

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff * self.factor


class Affine(PyLayer):
    """top = bottom * w + b with learnable w, b (one of each per channel)."""

    def setup(self, bottom, top):
        c = bottom[0].shape[1]
        self.blobs.add_blob(c)
        self.blobs.add_blob(c)
        self.blobs[0].data[...] = np.linspace(0.5, 1.5, c)
        self.blobs[1].data[...] = 0.25

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        w, b = self.blobs[0].data, self.blobs[1].data
        top[0].data[...] = bottom[0].data * w[None, :] + b[None, :]

    def backward(self, top, propagate_down, bottom):
        w = self.blobs[0].data
        self.blobs[0].diff[...] += (top[0].diff * bottom[0].data).sum(axis=0)
        self.blobs[1].diff[...] += top[0].diff.sum(axis=0)
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff * w[None, :]


class Broken(PyLayer):
    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        raise ValueError("boom")


class NotALayer(object):
    pass
'''

MODEL = '''
name: "py"
force_backward: true
layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer {
  name: "scale" type: "Python" bottom: "x" top: "y"
  python_param { module: "%s" layer: "%s" param_str: "%s" }
}
'''


def _model(tmp_path, module="pylayers_%s", cls="ScaleBy", param_str="2.5", source=LAYER_MODULE):
    module = module % tmp_path.name.replace("-", "_")
    (tmp_path / (module + ".py")).write_text(textwrap.dedent(source))
    path = tmp_path / "model.prototxt"
    path.write_text(MODEL % (module, cls, param_str))
    return str(path), module


def _param(text):
    p = caffe_pb2.LayerParameter()
    text_format.Merge(text, p)
    return p


def test_python_layer_beside_the_model(tmp_path):
    from engine.core.net import Net
    path, module = _model(tmp_path)
    net = Net(path, caffe_pb2.TEST)
    layer = net.layers[1]
    assert isinstance(layer, PyLayer) and type(layer).__name__ == "ScaleBy"
    assert layer.type == "Python"
    assert layer.param_str == "2.5" and layer.seen_phase == caffe_pb2.TEST
    net.blobs["x"].data[...] = np.arange(6).reshape(2, 3)
    out = net.forward()
    np.testing.assert_allclose(out["y"], np.arange(6).reshape(2, 3) * 2.5)
    net.backward(y=np.ones((2, 3), np.float32))
    np.testing.assert_allclose(net.blobs["x"].diff, 2.5)


def test_python_layer_refused(tmp_path):
    from engine.core.net import Net
    path, _ = _model(tmp_path)
    with pytest.raises(PythonLayerRefused, match="Layer 'scale' is a Python layer"):
        Net(path, caffe_pb2.TEST, allow_python=False)


def test_missing_module_names_layer_and_module(tmp_path):
    p = _param('name: "scale" type: "Python" python_param { module: "no_such_module_xyz" layer: "X" }')
    with pytest.raises(LayerError, match="Python layer 'scale': cannot import module "
                                         "'no_such_module_xyz'") as e:
        create_layer(p, model_dir=str(tmp_path))
    assert e.value.layer == "scale"
    assert isinstance(e.value, ModuleNotFoundError)      # what pycaffe raises


def test_missing_class_and_wrong_class(tmp_path):
    _, module = _model(tmp_path)
    p = _param('name: "s" type: "Python" python_param { module: "%s" layer: "Nope" }' % module)
    with pytest.raises(LayerError, match="Python layer 's': module '%s' .* has no attribute 'Nope'" % module) as e:
        create_layer(p, model_dir=str(tmp_path))
    assert isinstance(e.value, AttributeError)
    p = _param('name: "s" type: "Python" python_param { module: "%s" layer: "NotALayer" }' % module)
    with pytest.raises(LayerError, match="is not a subclass of caffe.Layer") as e:
        create_layer(p, model_dir=str(tmp_path))
    assert isinstance(e.value, TypeError)


def _notes(e):
    return "\n".join(getattr(e, "__notes__", ()))


def test_exception_in_user_code_keeps_its_type_and_names_layer_and_method(tmp_path):
    """pycaffe lets the layer's own exception through; the engine adds the layer as a note."""
    _, module = _model(tmp_path)
    p = _param('name: "bad" type: "Python" python_param { module: "%s" layer: "Broken" }' % module)
    layer = create_layer(p, model_dir=str(tmp_path))
    bottom, top = [uniform_blob((2, 3))], empty_blobs(1)
    layer.SetUp(bottom, top)
    with pytest.raises(ValueError, match="^boom") as e:
        layer.Forward(bottom, top)
    assert type(e.value) is ValueError
    assert "raised by forward() of Python layer 'bad' (%s.Broken)" % module in _notes(e.value)
    assert e.value.layer == "bad"


def test_exception_in_user_code_through_the_net(tmp_path):
    from engine.core.net import Net
    _, module = _model(tmp_path)
    model = tmp_path / "broken.prototxt"
    model.write_text('layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
                     'layer { name: "bad" type: "Python" bottom: "x" top: "y" '
                     'python_param { module: "%s" layer: "Broken" } }\n' % module)
    net = Net(str(model), caffe_pb2.TEST)
    with pytest.raises(ValueError, match="^boom") as e:
        net.forward()
    assert _notes(e.value).count("Python layer 'bad'") == 1


def test_exception_while_importing_keeps_its_type(tmp_path):
    _, module = _model(tmp_path, source="import no_such_dependency_xyz\n")
    p = _param('name: "s" type: "Python" python_param { module: "%s" layer: "X" }' % module)
    with pytest.raises(ModuleNotFoundError) as e:
        create_layer(p, model_dir=str(tmp_path))
    assert not isinstance(e.value, LayerError)     # the module's own import failed, not the layer's
    assert "importing module '%s' for Python layer 's'" % module in _notes(e.value)


def test_syntax_error_in_module(tmp_path):
    _, module = _model(tmp_path, source="def broken(:\n    pass\n")
    p = _param('name: "s" type: "Python" python_param { module: "%s" layer: "X" }' % module)
    with pytest.raises(SyntaxError) as e:
        create_layer(p, model_dir=str(tmp_path))
    assert "importing module '%s' for Python layer 's'" % module in _notes(e.value)


def test_module_from_sys_path(tmp_path, monkeypatch):
    _, module = _model(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    p = _param('name: "s" type: "Python" python_param { module: "%s" layer: "ScaleBy" param_str: "3" }'
               % module)
    layer = create_layer(p)
    bottom, top = [uniform_blob((2, 3))], empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    np.testing.assert_allclose(top[0].data, bottom[0].data * 3)


def test_same_module_name_in_two_model_dirs(tmp_path):
    src = "from engine.core.layers.python_layer import PyLayer\nclass L(PyLayer):\n    VALUE = %d\n"
    dirs = []
    for i in (1, 2):
        d = tmp_path / ("m%d" % i)
        d.mkdir()
        (d / "shared_name_pylayer.py").write_text(src % i)
        dirs.append(d)
    p = _param('name: "s" type: "Python" python_param { module: "shared_name_pylayer" layer: "L" }')
    a = create_layer(p, model_dir=str(dirs[0]))
    b = create_layer(p, model_dir=str(dirs[1]))
    assert (a.VALUE, b.VALUE) == (1, 2)


def test_learnable_blobs_gradient(tmp_path):
    _, module = _model(tmp_path)
    p = _param('name: "aff" type: "Python" python_param { module: "%s" layer: "Affine" }' % module)
    layer = create_layer(p, dtype=np.float64, model_dir=str(tmp_path))
    bottom, top = [uniform_blob((4, 3), -1, 1)], empty_blobs(1)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottom, top)
    assert [b.shape for b in layer.blobs] == [(3,), (3,)]
    assert all(b.dtype == np.float64 for b in layer.blobs)


def test_python_layer_in_gpu_mode(tmp_path, mode):
    from engine.core import backend
    _, module = _model(tmp_path)
    p = _param('name: "s" type: "Python" python_param { module: "%s" layer: "ScaleBy" param_str: "-2" }'
               % module)
    layer = create_layer(p, model_dir=str(tmp_path))
    bottom, top = [Blob((2, 3))], empty_blobs(1, np.float32)
    bottom[0].data[...] = 1.5
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    np.testing.assert_allclose(backend.to_host(top[0].get_data()), -3.0)

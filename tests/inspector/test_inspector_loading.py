"""loading: the model root, uploads, errors, Python layers."""
import os

import pytest
from inspector_testlib import LENET, data_url

from inspector.state import loading
from inspector.state.sessions import ModelSpec, Session

PY_NET = """
name: "Py"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 } } }
layer { name: "py" type: "Python" bottom: "data" top: "out"
        python_param { module: "os" layer: "system" } }
"""


def test_paths_inside_the_root_are_resolved(tmp_path):
    (tmp_path / "m").mkdir()
    f = tmp_path / "m" / "net.prototxt"
    f.write_text("name: 'x'")
    assert loading.resolve_model_path("m/net.prototxt", str(tmp_path)) == str(f.resolve())
    assert loading.resolve_model_path(str(f), str(tmp_path)) == str(f.resolve())


@pytest.mark.parametrize("path", ["../outside.prototxt", "/etc/passwd", "m/../../outside.prototxt"])
def test_paths_escaping_the_root_are_refused(tmp_path, path):
    root = tmp_path / "root"
    (root / "m").mkdir(parents=True)
    (tmp_path / "outside.prototxt").write_text("name: 'x'")
    with pytest.raises(loading.PathRefused, match="outside the model root"):
        loading.resolve_model_path(path, str(root))


def test_symlinks_out_of_the_root_are_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.prototxt").write_text("name: 'x'")
    os.symlink(tmp_path / "secret.prototxt", root / "link.prototxt")
    with pytest.raises(loading.PathRefused):
        loading.resolve_model_path("link.prototxt", str(root))


def test_missing_and_directories(tmp_path):
    with pytest.raises(loading.PathRefused, match="does not exist"):
        loading.resolve_model_path("nope.prototxt", str(tmp_path))
    (tmp_path / "d").mkdir()
    with pytest.raises(loading.PathRefused, match="not a file"):
        loading.resolve_model_path("d", str(tmp_path))
    with pytest.raises(loading.PathRefused):
        loading.resolve_model_path("  ", str(tmp_path))


def test_uploads_are_size_limited_and_named_safely(tmp_path):
    s = Session(id="u" * 32)
    try:
        p = loading.save_upload(s, "model", "../../evil name.prototxt", data_url("abc"), 100)
        assert os.path.dirname(os.path.dirname(p)) == s.upload_dir
        assert os.path.basename(p) == "evil_name.prototxt" and open(p).read() == "abc"
        assert s.uploads["model"] == p
        with pytest.raises(loading.PathRefused, match="limit"):
            loading.save_upload(s, "model", "big.prototxt", data_url("x" * 1000), 100)
        with pytest.raises(loading.PathRefused):
            loading.decode_upload("not a data url", 100)
    finally:
        s.close()


def test_load_error_from_parse_and_net_errors(broken_net, tmp_path):
    with pytest.raises(Exception) as ei:
        loading.build(ModelSpec(model=str(broken_net)))
    err = loading.load_error(ei.value, str(broken_net))
    assert (err.line, err.column) == (14, 1) and err.where.endswith("broken.prototxt:14:1")
    bad = tmp_path / "bad.prototxt"
    bad.write_text('layer { name: "a" type: "ReLU" bottom: "nothing" top: "a" }')
    with pytest.raises(Exception) as ei:
        loading.build(ModelSpec(model=str(bad)))
    err = loading.load_error(ei.value, str(bad))
    assert err.layer == "a" and err.blob == "nothing" and "Unknown bottom blob" in err.message
    assert err.where == "%s:1:32" % bad and not err.message.startswith(str(bad))   # the place once, apart


INPUT_2345 = """layer {
  name: "data"
  type: "Input"
  top: "data"
  input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } }
}
"""


@pytest.mark.parametrize("kind, text, where, needle", [
    ("unknown bottom", INPUT_2345 + 'layer {\n  name: "r"\n  type: "ReLU"\n  bottom: "dta"\n  top: "o"\n}\n',
     ":10:3", "Unknown bottom blob 'dta'"),
    ("duplicate top", INPUT_2345 + 'layer {\n  name: "a"\n  type: "ReLU"\n  bottom: "data"\n  top: "o"\n}\n'
     'layer {\n  name: "b"\n  type: "ReLU"\n  bottom: "data"\n  top: "o"\n}\n',
     ":17:3", "Top blob 'o' produced by multiple sources"),
    ("wrong shape", INPUT_2345 + 'layer {\n  name: "cat"\n  type: "Concat"\n  bottom: "data"\n  bottom: "data"\n'
     '  top: "o"\n  concat_param {\n    axis: 7\n  }\n}\n', ":14:5", "axis 7 out of range"),
    ("missing param", INPUT_2345 + '\nlayer {\n  name: "c"\n  type: "Convolution"\n  bottom: "data"\n  top: "o"\n'
     '  convolution_param { num_output: 2 }\n}\n', ":8:1", "kernel_size must be specified"),
])
def test_load_errors_name_the_line_of_the_layer_or_field(tmp_path, kind, text, where, needle):
    """Init errors (not only parse errors) are shown with file:line:column: the field at
    fault (bottom, top, the parameter) or else the layer."""
    p = tmp_path / "net.prototxt"
    p.write_text(text)
    with pytest.raises(Exception) as ei:
        loading.build(ModelSpec(model=str(p)))
    err = loading.load_error(ei.value, str(p))
    assert err.where == str(p) + where, (kind, err.where, err.message)
    assert needle in err.message and not err.message.startswith(str(p))
    from inspector.layout.header import load_error_box
    box = str(load_error_box(err))
    assert str(p) + where in box and needle in box


def test_python_layers_refused_unless_allowed(tmp_path):
    p = tmp_path / "py.prototxt"
    p.write_text(PY_NET)
    with pytest.raises(Exception) as ei:
        loading.build(ModelSpec(model=str(p)), allow_python=False)
    assert type(ei.value).__name__ == "PythonLayerRefused"
    assert loading.load_error(ei.value).layer == "py"


def test_build_records_the_init_transcript():
    ld = loading.build(ModelSpec(model=str(LENET)))
    msgs = [m for _l, m in ld.graph.transcript]
    assert any("Network initialization done" in m for m in msgs)
    assert ld.recorder in ld.net.debug_observers


def test_models_from_the_page_may_not_reach_outside_the_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    reader = root / "reader.prototxt"
    reader.write_text('layer { name: "d" type: "Data" top: "data" '
                      'data_param { source: "/etc" backend: LMDB batch_size: 1 } }')
    # a data source outside the root is never opened: the layer is stood in (structure only) and says why
    ld = loading.build(ModelSpec(model=str(reader)), model_root=str(root))
    (si,) = ld.graph.stand_ins
    assert si.layer == "d" and si.source == "/etc" and "outside the model root" in si.reason
    assert ld.graph.layer("d").type == "Data" and ld.graph.layer("d").stand_in
    assert ld.graph.inputs == ("data",) and ld.runlog.input_layers == (0,)
    # any other file outside the root is refused, naming the field
    (root / "lmdb").mkdir()
    mean = root / "mean.prototxt"
    mean.write_text('layer { name: "m" type: "Data" top: "x" top: "y" '
                    'transform_param { mean_file: "../secret.binaryproto" } '
                    'data_param { source: "%s" batch_size: 1 backend: LMDB } }' % (root / "lmdb"))
    with pytest.raises(loading.FileAccessRefused, match="mean_file") as ei:
        loading.build(ModelSpec(model=str(mean)), model_root=str(root))
    assert ei.value.layer == "m" and loading.load_error(ei.value).layer == "m"
    writer = root / "writer.prototxt"
    writer.write_text('layer { name: "d" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 } } }\n'
                      'layer { name: "w" type: "HDF5Output" bottom: "data" hdf5_output_param { file_name: "x.h5" } }')
    with pytest.raises(loading.FileAccessRefused, match="writes files"):
        loading.build(ModelSpec(model=str(writer)), model_root=str(root))
    # trusted models (command line, bundled examples) are not checked
    with pytest.raises(Exception) as ei:
        loading.build(ModelSpec(model=str(reader), trusted=True), model_root=str(root))
    assert not isinstance(ei.value, loading.FileAccessRefused)


def test_a_structure_only_net_that_does_not_build_carries_its_stand_ins(tmp_path):
    """The page asks for the data's shape when no assumed shape builds (the load error keeps
    the stood-in layers); with the shape given, the net builds, and a given shape that does
    not fit fails with the stand-ins too (the page asks again)."""
    from engine import CaffeError
    p = tmp_path / "fixed.prototxt"
    p.write_text('name: "F"\n'
                 'layer { name: "data" type: "Data" top: "data" data_param { source: "nowhere" batch_size: 2 } }\n'
                 'layer { name: "r" type: "Reshape" bottom: "data" top: "r"\n'
                 '        reshape_param { shape { dim: 0 dim: 75 } } }\n')
    with pytest.raises(CaffeError) as ei:
        loading.build(ModelSpec(model=str(p)), model_root=str(tmp_path))
    err = loading.load_error(ei.value, str(p))
    (s,) = err.stand_ins
    assert s.layer == "data" and s.assumed and s.tops[0].shape == (2, 3, 224, 224)
    assert "give the data's shape" in err.message
    ld = loading.build(ModelSpec(model=str(p), data_shapes=(("data", (3, 5, 5)),)), model_root=str(tmp_path))
    assert ld.net.blobs["r"].shape == (2, 75)
    with pytest.raises(CaffeError) as ei:
        loading.build(ModelSpec(model=str(p), data_shapes=(("data", (3, 4, 4)),)), model_root=str(tmp_path))
    err = loading.load_error(ei.value, str(p))
    assert err.stand_ins and err.stand_ins[0].tops[0].given and not err.stand_ins[0].assumed
    assert "structure only" not in err.message       # the given shape's own error, as Caffe says it

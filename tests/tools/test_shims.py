"""The command line's own name (``caffe-engine --help`` names caffe-engine, ``python -m
engine`` names itself) and ``build-shims``: Caffe's build/ layout whose tools run the engine,
each naming itself in its usage."""
import subprocess
import sys

import pytest

from engine.tools import cli, shims
from engine.tools.cli import EXIT_OK, default_prog, main
from tests.tools.conftest import run


@pytest.mark.parametrize("argv0, prog", [
    ("/venv/bin/caffe-engine", "caffe-engine"),
    ("/x/engine/__main__.py", "python -m engine"),
    ("./build/tools/caffe", "caffe"),
    ("build/examples/mnist/convert_mnist_data.bin", "convert_mnist_data.bin"),
    ("", "python -m engine"),
])
def test_the_command_line_is_named_as_it_was_started(argv0, prog):
    assert default_prog(argv0) == prog


def test_a_console_scripts_help_names_it(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/caffe-engine", "--help"])
    assert main() == EXIT_OK
    text = capsys.readouterr().out
    assert text.startswith("caffe-engine: Caffe's command line") and "usage: caffe-engine <command>" in text
    assert "python -m engine" not in text
    monkeypatch.setattr(sys, "argv", ["/venv/bin/caffe-engine", "convert_mnist_data", "--help"])
    assert main() == EXIT_OK
    assert capsys.readouterr().out.startswith("usage: caffe-engine convert_mnist_data ")


def test_python_m_engine_still_names_itself():
    code, out, _ = run("--help")
    assert code == EXIT_OK and out.startswith("python -m engine: Caffe's command line")


def test_a_one_command_tool_names_itself_alone(capsys):
    assert main(["--help"], prog="convert_cifar_data.bin", command="convert_cifar_data") == EXIT_OK
    assert capsys.readouterr().out.startswith("usage: convert_cifar_data.bin ")


def _run_shim(path, *args, cwd=None):
    return subprocess.run([str(path)] + list(args), capture_output=True, text=True, cwd=cwd, timeout=300)


def test_build_shims_writes_caffes_layout_and_each_tool_runs_the_engine(tmp_path):
    code, out, err = run("build-shims", tmp_path)
    assert code == EXIT_OK, err
    for rel in shims.SHIMS:
        path = tmp_path / rel
        assert path.is_file() and path.stat().st_mode & 0o111, rel
        assert ("wrote %s" % path) in out
    res = _run_shim(tmp_path / "build/examples/mnist/convert_mnist_data.bin", "--help")
    assert res.returncode == 0 and res.stdout.startswith("usage: convert_mnist_data.bin "), res.stderr
    res = _run_shim(tmp_path / "build/tools/caffe", cwd="/")
    assert res.returncode == cli.EXIT_USAGE and res.stderr.startswith("caffe: Caffe's command line"), res.stderr
    assert "usage: caffe <command> <args>" in res.stderr
    # written again over its own shims; a real tool there is left alone and named
    real = tmp_path / "build/tools/compute_image_mean"
    real.write_bytes(b"\x7fELF not a shim")
    code, out, err = run("build-shims", tmp_path)
    assert code == EXIT_OK
    assert "kept %s: not an engine shim" % real in err and real.read_bytes() == b"\x7fELF not a shim"
    assert ("wrote %s" % (tmp_path / "build/tools/caffe")) in out

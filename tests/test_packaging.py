"""Packaging: pyproject.toml declares what requirements*.txt declare, names every
package of the tree, and a built wheel carries the generated protobuf module, the
page's assets, the bundled examples and both console scripts."""
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements(name):
    """The requirement lines of a requirements file, without -r includes and comments."""
    out = []
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-r"):
            out.append(re.sub(r"\s+", "", line))
    return sorted(out)


def test_dependencies_match_requirements_files():
    project = _pyproject()["project"]
    assert sorted(re.sub(r"\s+", "", d) for d in project["dependencies"]) == _requirements("requirements.txt")
    extras = project["optional-dependencies"]
    for extra, fname in (("gpu", "requirements-gpu.txt"), ("dev", "requirements-dev.txt"),
                         ("draw", "requirements-draw.txt"), ("bench", "requirements-bench.txt")):
        assert sorted(re.sub(r"\s+", "", d) for d in extras[extra]) == _requirements(fname), extra


def test_every_package_of_the_tree_is_listed():
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = set()
    for top in ("engine", "inspector"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    assert found <= listed, "not in pyproject's packages: %s" % sorted(found - listed)



def test_wheel_carries_what_an_install_needs(tmp_path):
    pytest.importorskip("setuptools")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("caffe_inspector-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("engine/proto/caffe_pb2.py", "engine/core/net.py", "engine/tools/cli.py",
                   "inspector/assets/inspector.css", "inspector/examples/lenet/lenet_train_test.prototxt",
                   "inspector/cli.py"):
        assert needed in names, needed
    assert not any(n.startswith(("tests/", "benchmarks/", "proto/")) for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert "caffe-inspector = inspector.cli:main" in text
    assert "caffe-engine = engine.tools.cli:main" in text

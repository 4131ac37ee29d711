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
    """requirements.txt is the dependencies; each extra X is requirements-X.txt, and each
    requirements-X.txt is an extra."""
    project = _pyproject()["project"]
    assert sorted(re.sub(r"\s+", "", d) for d in project["dependencies"]) == _requirements("requirements.txt")
    extras = project["optional-dependencies"]
    files = {p.name[len("requirements-"):-len(".txt")] for p in ROOT.glob("requirements-*.txt")}
    assert files == set(extras), "extras without a requirements file, or files without an extra"
    for extra in extras:
        fname = "requirements-%s.txt" % extra
        assert sorted(re.sub(r"\s+", "", d) for d in extras[extra]) == _requirements(fname), extra
        assert "-r requirements.txt" in (ROOT / fname).read_text(), fname


# ------------------------------------------------------------------ every import declared
# Import names whose distribution is named otherwise; the rest are their own name.
DISTRIBUTION = {"PIL": "pillow", "sklearn": "scikit-learn", "skimage": "scikit-image", "google": "protobuf",
                "cv2": "opencv-python-headless", "cupy": "cupy-cuda12x", "cupyx": "cupy-cuda12x",
                "cupy_backends": "cupy-cuda12x",
                "grpc_tools": "grpcio-tools", "yaml": "pyyaml", "dash_cytoscape": "dash-cytoscape",
                "importlinter": "import-linter"}
FIRST_PARTY = {"engine", "inspector", "benchmarks", "tests"}
# Imported only if present, as pycaffe imports them, and not installable from PyPI or
# replaced by a declared package: selective_search_ijcv_with_python (pycaffe's Detector,
# a GitHub package driving MATLAB), pydotplus (pycaffe's draw prefers it; pydot is declared).
OPTIONAL_AS_PYCAFFE = {"selective-search-ijcv-with-python", "pydotplus"}
# Real BVLC Caffe's own pycaffe, imported only by the benchmarks that judge the engine against
# it (benchmarks/verdict.py's --side caffe, under the Python of a Caffe built from source: it
# is on no package index).
ORACLE = {"caffe": ("benchmarks/verdict.py",)}
# Code the project ships or runs (tests are covered by the dev extra's own pins).
SCANNED = ("engine", "inspector", "benchmarks", "examples", "proto", "app.py")


def _imported_names(path):
    """Top-level module names ``path`` imports: import statements anywhere, and
    importlib.util.find_spec / importlib.import_module / __import__ of a literal name."""
    import ast
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            fn = node.func
            fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if fname in ("find_spec", "import_module", "__import__"):
                names.add(node.args[0].value.split(".")[0])
    return names


def _project_name(requirement):
    return re.split(r"[<>=!~\[;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_imported_package_is_declared():
    declared = {_project_name(r) for r in _pyproject()["project"]["dependencies"]}
    for reqs in _pyproject()["project"]["optional-dependencies"].values():
        declared.update(_project_name(r) for r in reqs)
    local = {p.stem for top in SCANNED for p in (ROOT / top).rglob("*.py")}   # scripts importing neighbours
    missing = {}
    for top in SCANNED:
        base = ROOT / top
        for path in ([base] if base.is_file() else sorted(base.rglob("*.py"))):
            if path.name == "caffe_pb2.py":
                continue
            for name in _imported_names(path):
                if name in sys.stdlib_module_names or name in FIRST_PARTY or name in local:
                    continue
                dist = DISTRIBUTION.get(name, name).lower().replace("_", "-")
                if str(path.relative_to(ROOT)) in ORACLE.get(dist, ()):
                    continue
                if dist not in declared and dist not in OPTIONAL_AS_PYCAFFE:
                    missing.setdefault(dist, []).append(str(path.relative_to(ROOT)))
    assert not missing, "imported but declared in no requirements file / extra: %s" % missing


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

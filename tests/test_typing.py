"""The public API carries type hints (mypy checks them in CI: see pyproject's [tool.mypy]).
A public method without annotations fails here, so the hints stay complete."""
import inspect

import pytest

from engine.core.blob import Blob
from engine.core.layers.base import Layer
from engine.core.net import Net
from engine.core.solvers.base import Solver

CLASSES = [Blob, Net, Layer, Solver]


def _public_functions(cls):
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            yield name, value.fget
            if value.fset is not None:
                yield name + ".setter", value.fset
        elif isinstance(value, (classmethod, staticmethod)):
            yield name, value.__func__
        elif inspect.isfunction(value) and value.__name__ == name:   # aliases (Reshape = reshape) once
            yield name, value


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_public_methods_are_annotated(cls):
    missing = []
    for name, fn in _public_functions(cls):
        sig = inspect.signature(fn)
        if sig.return_annotation is inspect.Signature.empty:
            missing.append(name + " (return)")
        for p in list(sig.parameters.values()):
            if p.name in ("self", "cls") or p.kind is p.VAR_KEYWORD:
                continue
            if p.annotation is inspect.Parameter.empty:
                missing.append("%s(%s)" % (name, p.name))
    assert not missing, "%s lacks type hints: %s" % (cls.__name__, ", ".join(missing))


def test_mypy_configuration_names_the_annotated_modules():
    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path
    cfg = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    files = cfg["tool"]["mypy"]["files"]
    for cls in CLASSES:
        path = inspect.getsourcefile(cls)
        rel = Path(path).resolve().relative_to(Path(__file__).resolve().parents[1]).as_posix()
        assert rel in files

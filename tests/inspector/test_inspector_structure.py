"""inspector/'s folders mean what inspector/README.md says: the import graph among its
modules (every import, those inside functions too, read with ``ast``) has no cycle,
``views/`` builds what the page shows without session state or Dash callbacks, and
``state/`` never reaches up into the page (``callbacks/``, ``layout/``, ``app``).
pyproject.toml's import-linter contracts say the same for CI's ``lint-imports``."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "inspector"


def _modules():
    """{dotted name: path} of every module of the inspector package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(name, path, modules):
    """The inspector modules ``name`` imports, at any depth of its code.  ``from X import
    y`` counts as importing X.y where that is a module, else X itself."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                sub = base + "." + a.name
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph():
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _within(module, package):
    return module == package or module.startswith(package + ".")


def _crossings(graph, source, forbidden):
    return sorted((m, t) for m, targets in graph.items() if _within(m, source)
                  for t in targets for f in forbidden if _within(t, f))


def test_the_cycle_finder_sees_a_cycle_and_a_function_level_import(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from pkg import b\n")
    modules = {"pkg.a": a, "pkg.b": tmp_path / "b.py"}
    assert _imported("pkg.a", a, modules) == {"pkg.b"}
    assert cycles({"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}, "pkg.d": {"pkg.a"}}) == \
        [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_graph_holds_the_function_level_imports():
    g = import_graph()
    assert "inspector.state.presenter" in g["inspector.state.runner"]      # inside step_over
    assert "inspector.state.netstate" in g["inspector.state.urlstate"]


def test_no_import_cycle_inside_the_inspector():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("source, forbidden", [
    ("inspector.views", ("inspector.state", "inspector.callbacks", "inspector.layout", "inspector.app",
                         "inspector.cli")),
    ("inspector.state", ("inspector.callbacks", "inspector.layout", "inspector.app", "inspector.cli")),
    ("inspector.layout", ("inspector.callbacks", "inspector.state", "inspector.app")),
])
def test_folders_import_only_downwards(source, forbidden):
    assert _crossings(import_graph(), source, forbidden) == []


def test_views_use_no_dash():
    """View building gives figures and plain data: dash (components, callbacks) stays in
    layout/ and callbacks/ (plotly figures are fine)."""
    users = []
    for name, path in _modules().items():
        if not _within(name, "inspector.views"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            users += [(name, m) for m in mods if m == "dash" or m.startswith(("dash.", "dash_"))]
    assert users == []


def test_every_module_sits_in_a_folder_the_readme_names():
    """The top level holds only the app's entry points and the few modules every folder
    shares; everything else is in views/, state/, callbacks/ or layout/ (README.md)."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert top == ["__init__", "adapters", "app", "cli", "config", "ids"]
    readme = (PACKAGE / "README.md").read_text(encoding="utf-8")
    for folder in ("views/", "state/", "callbacks/", "layout/"):
        assert folder in readme
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            assert path.name in readme, "inspector/README.md does not say what %s is" % path.relative_to(ROOT)

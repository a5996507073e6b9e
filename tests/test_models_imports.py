"""The models subpackage has no import cycle: ``spec`` imports nothing of the package, no module
imports the registry back, and the registry reaches the adapters by name only."""
from __future__ import annotations

import ast
from pathlib import Path

import shovir_core.models as models_pkg

PKG = "shovir_core.models"
ROOT = Path(models_pkg.__file__).parent


def _runtime_nodes(node: ast.AST):
    """Every node below ``node`` except the bodies of ``if TYPE_CHECKING:`` blocks (never run)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
            yield from (n for c in child.orelse for n in (c, *_runtime_nodes(c)))
            continue
        yield child
        yield from _runtime_nodes(child)


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Absolute names of the modules a file imports at run time, in functions too (``from . import x``
    counts as ``<pkg>.x``); ``top_level_only``: only the imports run when the module is imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = PKG.split(".")
    nodes = tree.body if top_level_only else list(_runtime_nodes(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


def _modules() -> dict[str, Path]:
    return {f"{PKG}.{p.stem}": p for p in sorted(ROOT.glob("*.py")) if p.stem != "__init__"}


def test_the_ast_walk_sees_relative_and_lazy_imports():
    assert f"{PKG}.spec.ModelSpec" in _imports(ROOT / "registry.py", top_level_only=True)
    assert f"{PKG}.protocol" in _imports(ROOT / "hf.py")
    assert "shovir_core.labels" in _imports(ROOT / "tiny.py")
    assert f"{PKG}.hf" in _imports(ROOT / "tiny.py"), "an import inside a function counts"
    assert f"{PKG}.protocol" not in _imports(ROOT / "prompts.py"), "an `if TYPE_CHECKING:` import does not"


def test_spec_imports_nothing_of_the_package_but_its_errors():
    inside = {m for m in _imports(ROOT / "spec.py") if m == "shovir_core" or m.startswith("shovir_core.")}
    assert {m for m in inside if not m.startswith("shovir_core.errors")} == set(), f"models/spec.py imports {sorted(inside)}"


def test_no_module_imports_the_registry_back():
    offenders = {name: sorted(m for m in _imports(path) if m == f"{PKG}.registry" or m.startswith(f"{PKG}.registry."))
                 for name, path in _modules().items() if name != f"{PKG}.registry"}
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"modules importing the registry: {offenders}"
    # importing the package itself (its __init__ imports the registry) counts as importing it back
    back = {name for name, path in _modules().items()
            if any(m in (PKG, f"{PKG}.get_model", f"{PKG}.REGISTRY") for m in _imports(path))
            and name != f"{PKG}.registry"}
    assert back == set(), f"modules importing shovir_core.models: {sorted(back)}"


def test_registry_reaches_adapters_by_name_only():
    top = {m for m in _imports(ROOT / "registry.py", top_level_only=True) if m.startswith(f"{PKG}.")}
    assert {m.rsplit(".", 1)[0] if m.count(".") > 2 else m for m in top} == {f"{PKG}.spec"}
    from shovir_core.models import registry

    used = {s.adapter for s in registry.REGISTRY.values()}
    # hf-auto and imported serve models declared in catalogue files (shovir_core.protocols.catalog) only
    assert used <= set(registry.ADAPTERS) and set(registry.ADAPTERS) - used <= {"hf-auto", "imported"}
    for module, builder in registry.ADAPTERS.values():
        assert (ROOT / f"{module.rsplit('.', 1)[1]}.py").is_file() and builder.startswith("build_")


def test_the_models_import_graph_is_acyclic():
    """Module-level and function-level imports alike (a lazy import back is still a cycle)."""
    modules = _modules()

    def owner(name: str) -> str | None:
        return next((t for t in modules if name == t or name.startswith(t + ".")), None)

    graph = {name: {owner(m) for m in _imports(path)} - {None, name} for name, path in modules.items()}
    assert f"{PKG}.spec" in graph[f"{PKG}.hf"], "the graph sees the adapters' imports"
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == 1:
            raise AssertionError(f"import cycle: {' -> '.join(trail + [node])}")
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in sorted(graph[node]):
            visit(dep, trail + [node])
        state[node] = 2

    for node in sorted(graph):
        visit(node, [])

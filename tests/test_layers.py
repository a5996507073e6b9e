"""Layers point down: the package's import graph (every module ast-parsed, lazy imports included)
has none of the upward edges or subpackage cycles issue 24 names."""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "shovir_core"

FORBIDDEN = {
    # (importing subpackage, imported subpackage): why the edge points up
    ("perturb", "protocols"): "box-set rules live in perturb/boxes.py; protocols use them, not the reverse",
    ("models", "protocols"): "training scripts live in shovir_core/training/",
    ("models", "cli"): "training scripts live in shovir_core/training/; errors in shovir_core/errors.py",
    ("models", "training"): "training builds models, models never train",
    ("models", "labeling"): "the IU corpus is a data set (data/iu.py); labeling/chexbert imports models",
    ("labeling", "metrics"): "labeller scores are tables (tables/labeller_scores.py); metrics label reports",
    ("tables", "book"): "params reading lives in shovir_core/params.py; the book calls tables",
    ("jobs", "book"): "params reading lives in shovir_core/params.py",
    ("training", "cli"): "run_guarded lives in shovir_core/errors.py",
}
"""Edges that must not exist between subpackages (modules directly under ``shovir_core`` count as
their own names: ``cli``, ``params``, ``errors`` ...)."""

NO_CYCLE = ["models", "labeling", "metrics", "tables", "book", "jobs", "protocols", "perturb", "training", "params"]
"""Subpackages that must not import each other both ways (issue 24's cycles)."""

BOTTOM = {"errors", "paths", "labels", "vocab"}
"""Modules every layer may import; they import nothing of the package but each other."""


def _module_name(path: Path, root: Path) -> tuple[str, list[str]]:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), parts[:-1]
    return ".".join(parts), parts[:-1]


def imports_of(source: str, *, package: list[str], top: str = PACKAGE.name) -> set[str]:
    """The package names one module's ``source`` imports (all imports, including those inside
    functions); relative imports are resolved against ``package`` (the module's package parts)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == top)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == top:
                out.update(f"{target}.{a.name}" for a in node.names)
    return out


def import_edges(root: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: {imported package names}}`` of every module under ``root``."""
    edges: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        name, package = _module_name(path, root)
        edges[name] = imports_of(path.read_text(encoding="utf-8"), package=package, top=root.name)
    return edges


def layer_of(module: str) -> str:
    """``shovir_core.tables.reproduction`` -> ``tables``; ``shovir_core.cli`` -> ``cli``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_edges(edges: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """``{(from layer, to layer): ["module -> imported name", ...]}`` between different layers."""
    out: dict[tuple[str, str], list[str]] = {}
    for mod, targets in edges.items():
        for t in sorted(targets):
            a, b = layer_of(mod), layer_of(t)
            if a and b and a != b:
                out.setdefault((a, b), []).append(f"{mod} -> {t}")
    return out


def violations(edges: dict[str, set[str]]) -> list[str]:
    layers = layer_edges(edges)
    bad = [f"{a} -> {b} ({why}): {'; '.join(layers[(a, b)])}" for (a, b), why in FORBIDDEN.items()
           if (a, b) in layers]
    for a, b in itertools.combinations(NO_CYCLE, 2):
        if (a, b) in layers and (b, a) in layers:
            bad.append(f"cycle {a} <-> {b}: {'; '.join(layers[(a, b)])} || {'; '.join(layers[(b, a)])}")
    for a in BOTTOM:
        ups = [e for (x, y), es in layers.items() if x == a and y not in BOTTOM for e in es]
        if ups:
            bad.append(f"{a} must import nothing above it: {'; '.join(ups)}")
    return bad


def test_no_upward_edges_or_cycles():
    assert violations(import_edges()) == []


def test_the_graph_sees_every_module_and_lazy_imports():
    edges = import_edges()
    assert {"shovir_core.cli", "shovir_core.params", "shovir_core.perturb.boxes", "shovir_core.training.reference",
            "shovir_core.data.iu"} <= set(edges)
    # a function-level import counts (the old models/train_reference -> cli edge was one)
    assert "shovir_core.errors.run_guarded" in edges["shovir_core.training.reference"]
    # a relative import is resolved against its package
    assert "shovir_core.records.load_run" in edges["shovir_core.params"]


@pytest.fixture(scope="module")
def package_edges():
    return import_edges()


@pytest.mark.parametrize("module, source, expected", [
    ("perturb/crosscheck.py", "def f():\n    from ..protocols.shovir import _iou_filter\n", "perturb -> protocols"),
    ("models/train_x.py", "from ..cli import run_guarded\n", "models -> cli"),
    ("labeling/validation.py", "from ..metrics.classification import f1_score\n", "labeling -> metrics"),
    ("tables/reproduction.py", "from shovir_core.book import load_runs\n", "tables -> book"),
    ("jobs/task.py", "from ..book.params import load_params\n", "jobs -> book"),
    ("metrics/report.py", "from ..tables import labeller\n", "cycle metrics <-> tables"),
    ("paths.py", "from .records import load_run\n", "paths must import nothing above it"),
])
def test_an_upward_edge_or_a_cycle_fails(package_edges, module, source, expected):
    edges = {k: set(v) for k, v in package_edges.items()}
    assert violations(edges) == []
    name, package = _module_name(PACKAGE / module, PACKAGE)
    edges.setdefault(name, set()).update(imports_of(source, package=package))
    found = violations(edges)
    assert any(v.startswith(expected) for v in found), found

"""A chapter is one recipe (CONTRIBUTING.md, "Add a chapter"): every chapter of ``_toc.yml`` has a
params file per profile it runs on, a ``shovir_core.tables`` module, a row in
``resources/reproduction.yaml``, paper keys that name published values, and a test that mentions it.
The check reads a repository root, so the tests below also show it failing on a copy that lacks a piece."""
from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import pytest
import yaml

from shovir_core.params import toc_notebooks

REPO = Path(__file__).resolve().parent.parent
MAP_CHAPTER = "reproduction_map"
"""The chapter that renders ``reproduction.yaml`` itself (it has no row of its own)."""
_TABLES_IMPORT = re.compile(r"from shovir_core\.tables import ([\w, ]+)|from shovir_core\.tables\.(\w+) import"
                            r"|import shovir_core\.tables\.(\w+)")


def tables_modules(chapter: str, *, root: Path) -> list[str]:
    """The ``shovir_core.tables`` modules the chapter's notebook imports (that exist under ``root``)."""
    text = (root / "notebooks" / f"{chapter}.py").read_text(encoding="utf-8")
    names = []
    for a, b, c in _TABLES_IMPORT.findall(text):
        names += [n.strip().split(" as ")[0] for n in a.split(",")] if a else [b or c]
    return [n for n in dict.fromkeys(names) if (root / "shovir_core" / "tables" / f"{n}.py").is_file()]


def _rows(root: Path) -> list[dict]:
    return yaml.safe_load((root / "shovir_core" / "resources" / "reproduction.yaml").read_text())["items"]


def _published_ids(root: Path, paper: str) -> set[str]:
    doc = yaml.load((root / "shovir_core" / "papers" / "data" / f"{paper}.yaml").read_text(), Loader=yaml.BaseLoader)
    return {v["id"] for v in doc["values"]}


def recipe_problems(chapter: str, *, root: Path = REPO) -> list[str]:
    """What the chapter lacks of the recipe (empty when it is complete)."""
    problems = []
    rows = [r for r in _rows(root) if r.get("notebook") == chapter]
    if not rows and chapter != MAP_CHAPTER:
        problems.append(f"no row with notebook: {chapter} in shovir_core/resources/reproduction.yaml")
    profiles = {"demo"} | {p for r in rows for p in (r.get("profiles") or [])}
    for p in sorted(profiles):
        if not (root / "params" / chapter / f"{p}.yaml").is_file():
            problems.append(f"no params file params/{chapter}/{p}.yaml")
    modules = tables_modules(chapter, root=root)
    if not modules:
        problems.append(f"notebooks/{chapter}.py imports no shovir_core.tables module")
    papers = {r["paper"] for r in rows}
    for m in modules:
        keys = getattr(importlib.import_module(f"shovir_core.tables.{m}"), "PAPER_KEYS", None)
        if keys is None or not (root / "shovir_core" / "tables" / f"{m}.py").is_file():
            continue
        known = set().union(*(_published_ids(root, p) for p in papers)) if papers else set()
        unknown = sorted(v for v in keys.values() if v not in known)
        if unknown:
            problems.append(f"tables/{m}.py PAPER_KEYS name values that papers/data/{'|'.join(sorted(papers)) or '?'}"
                            f".yaml does not have: {unknown[:5]}")
    mods = "|".join(map(re.escape, modules)) or "(?!)"
    mention = re.compile(rf"\b{re.escape(chapter)}\b|shovir_core\.tables\.({mods})\b"
                         rf"|from shovir_core\.tables import [^\n]*\b({mods})\b")
    tests = [t for t in (root / "tests").glob("test_*.py") if t.name != Path(__file__).name]
    if not any(mention.search(t.read_text(encoding="utf-8")) for t in tests):
        problems.append(f"no tests/test_*.py mentions {chapter} (or its tables module)")
    return problems


CHAPTERS = toc_notebooks()


def test_the_toc_has_chapters():
    assert len(CHAPTERS) > 20 and CHAPTERS[0] == "data" and MAP_CHAPTER in CHAPTERS


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_follows_the_recipe(chapter):
    assert recipe_problems(chapter) == []


@pytest.fixture
def repo_copy(tmp_path):
    """The pieces of the repository the recipe reads, with a new chapter ``modalens_appz`` that has a
    notebook (App L's) and nothing else yet."""
    root = tmp_path / "repo"
    for d in ("notebooks", "params", "tests"):
        shutil.copytree(REPO / d, root / d, ignore=shutil.ignore_patterns("__pycache__", "fixtures"))
    for d in ("shovir_core/resources", "shovir_core/papers/data", "shovir_core/tables"):
        shutil.copytree(REPO / d, root / d, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    shutil.copy(root / "notebooks" / "modalens_appl.py", root / "notebooks" / "modalens_appz.py")
    return root


def test_a_chapter_missing_a_piece_fails(repo_copy):
    root = repo_copy
    assert recipe_problems("modalens_appl", root=root) == []
    found = recipe_problems("modalens_appz", root=root)
    assert any("no row with notebook: modalens_appz" in p for p in found), found
    assert any("params/modalens_appz/demo.yaml" in p for p in found), found
    # each piece added removes its problem: the row (with its profiles), the params files
    reproduction = root / "shovir_core" / "resources" / "reproduction.yaml"
    reproduction.write_text(reproduction.read_text() + '  - {paper: modalens, item: "App. Z", title: "t", '
                            "notebook: modalens_appz, work: score, profiles: [mimic]}\n")
    found = recipe_problems("modalens_appz", root=root)
    assert not any("no row" in p for p in found) and any("params/modalens_appz/mimic.yaml" in p for p in found)
    (root / "params" / "modalens_appz").mkdir()
    for p in ("demo", "mimic"):
        shutil.copy(root / "params" / "modalens_appl" / f"{p}.yaml", root / "params" / "modalens_appz" / f"{p}.yaml")
    # it still imports App L's tables module, which its tests mention: complete
    assert recipe_problems("modalens_appz", root=root) == []


def test_no_tables_module_or_no_test_fails(repo_copy):
    root = repo_copy
    nb = root / "notebooks" / "modalens_appz.py"
    nb.write_text(nb.read_text().replace("from shovir_core.tables import modalens_appl as appl", "appl = None"))
    assert any("imports no shovir_core.tables module" in p for p in recipe_problems("modalens_appz", root=root))
    for t in (root / "tests").glob("test_*.py"):
        if re.search(r"\bmodalens_appl\b", t.read_text()):
            t.unlink()
    assert any("no tests/test_*.py mentions modalens_appl" in p for p in recipe_problems("modalens_appl", root=root))


def test_a_paper_key_that_names_no_published_value_fails(repo_copy, monkeypatch):
    from shovir_core.tables import modalens_appl

    monkeypatch.setattr(modalens_appl, "PAPER_KEYS", {**modalens_appl.PAPER_KEYS, "l.x": "l.no_such_value"})
    assert any("l.no_such_value" in p for p in recipe_problems("modalens_appl", root=repo_copy))

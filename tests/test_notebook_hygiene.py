"""Notebooks stay thin (CONTRIBUTING.md): no ``def``/``class`` in a notebook, and ``book.show`` gets the
``TableResult`` itself, never the formatted text of ``.display()`` ("Showing results")."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.py"))


def offences(source: str) -> list[str]:
    """``line: what`` for each ``.display()`` call, ``def`` or ``class`` in a notebook's source."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "display":
            out.append(f"{node.lineno}: .display() (pass the TableResult to book.show; its index/select/drop/"
                       "pivot/labels shape what is shown)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(f"{node.lineno}: {'class' if isinstance(node, ast.ClassDef) else 'def'} {node.name} "
                       "(logic belongs in shovir_core)")
    return out


def test_the_notebooks_are_found():
    assert len(NOTEBOOKS) > 20 and any(p.name == "modalens_apph.py" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_thin(path):
    assert offences(path.read_text(encoding="utf-8")) == [], path.name


@pytest.mark.parametrize("source, expected", [
    ('book.show(t.display().set_index("arm"), runs=runs)\n', "1: .display()"),
    ("shown = t.display()\nbook.show(shown, runs=runs)\n", "1: .display()"),
    ("def helper(x):\n    return x\n", "1: def helper"),
    ("class Box:\n    pass\n", "1: class Box"),
])
def test_the_check_sees_what_it_forbids(source, expected):
    (found,) = offences(source)
    assert found.startswith(expected)


def test_showing_the_table_itself_passes():
    assert offences('book.show(t.drop(["key"]), runs=runs)\nbook.show(t.select(["a"]), runs=runs)\n') == []

"""The notebooks `make book` just executed (book/<name>.ipynb), checked without executing them again.

`make test` runs after `make book`; re-executing every notebook under nbval doubled its time. These
checks read the executed copies instead: each is the current source's code (a stale copy fails),
ran without an error, was written by the runner for a profile, and every cell tagged
``nbval-check-output`` printed what the page shows. Run `make book` (or `shovir book --only <name>
--no-build`) first; a notebook without an executed copy is skipped and says so -- except in CI (``$CI``
set), where `make test` has just built the book, so a missing copy means these checks would look in the
wrong place (a package imported from another checkout, say) and pass without checking anything: it fails.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from shovir_core import paths

CHECK_TAG = "nbval-check-output"


def _toc_notebooks() -> list[str]:
    toc = yaml.safe_load((paths.repo_root() / "_toc.yml").read_text(encoding="utf-8"))
    files = [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [Path(f).name for f in files if (paths.notebooks_root() / f"{Path(f).name}.py").is_file()]


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


@pytest.fixture(params=_toc_notebooks())
def executed(request):
    path = paths.book_root() / f"{request.param}.ipynb"
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing although CI's `make test` built the book first: is shovir_core "
                        f"imported from another checkout ({paths.repo_root()})?")
        pytest.skip(f"{path.relative_to(paths.repo_root())} not executed yet (make book)")
    return request.param, json.loads(path.read_text(encoding="utf-8"))


def test_executed_copy_is_the_current_source(executed):
    import jupytext

    name, nb = executed
    source = jupytext.read(paths.notebooks_root() / f"{name}.py")
    want = [_source(c) for c in source.cells if c.cell_type == "code"]
    got = [_source(c) for c in nb["cells"] if c["cell_type"] == "code" and "injected-parameters" not in _tags(c)]
    assert got == want, f"book/{name}.ipynb is stale: re-run `shovir book --only {name}`"


def test_executed_without_error_by_the_runner(executed):
    name, nb = executed
    assert nb["metadata"].get("shovir", {}).get("profile"), f"book/{name}.ipynb was not written by the runner"
    assert nb["metadata"].get("papermill", {}).get("exception") in (None, False)
    for k, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"book/{name}.ipynb code cell {k}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
        assert cell.get("execution_count") is not None, f"book/{name}.ipynb code cell {k} never ran"


def test_checked_cells_show_their_numbers(executed):
    name, nb = executed
    checked = [c for c in nb["cells"] if c["cell_type"] == "code" and CHECK_TAG in _tags(c)]
    for cell in checked:
        shown = [o for o in cell.get("outputs", []) if o.get("output_type") in ("stream", "execute_result",
                                                                              "display_data")]
        assert shown, f"book/{name}.ipynb: a cell tagged {CHECK_TAG} shows nothing:\n{_source(cell)[:200]}"

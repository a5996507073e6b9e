"""Execute the book's notebooks with papermill and build it with Jupyter Book 1.x."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

from .. import paths
from ..records import READ_LOG_ENV
from .glue import GLUE_LOG_ENV
from .params import load_params, toc_notebooks
from .render import OUTPUT_DIR_ENV

__all__ = ["make_records", "execute_notebook", "execute_book", "build_book", "BookError", "glue_index",
           "GLUE_INDEX", "RECORDS_DIR"]

GLUE_INDEX = "_glue_index.json"
"""``book/_glue_index.json``: glue key -> the run records (id, spec hash) its value came from."""

RECORDS_DIR = "_records"
"""``book/_records/<run_id>/manifest.json``: a copy of every manifest a notebook read, which the book
links from each glued number and each chapter's "Records read" table (copied into the HTML)."""


class BookError(RuntimeError):
    """A notebook or the book build failed."""


def make_records(notebook: str, *, profile: str = "demo", progress: bool = True) -> dict[str, str]:
    """Make (or resume) every record ``params/<notebook>/<profile>.yaml`` names; returns key -> run id."""
    from ..protocols import run as run_protocol

    spec = load_params(notebook, profile)
    ids = {}
    for key, r in spec["runs"].items():
        run = run_protocol(r["protocol"], r["name"], r["spec"], progress=progress)
        ids[key] = run.run_id
    return ids


def _tag_for_readers(nb) -> None:
    """Collapse code in the rendered book (readers see results; a click shows the code).

    The default ``parameters`` cell is removed from the page; the values the run actually used
    are in the cell papermill injects after it.
    """
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.setdefault("tags", [])
        extra = "remove-cell" if "parameters" in tags else "hide-input"
        if extra not in tags:
            tags.append(extra)


def execute_notebook(notebook: str, *, profile: str = "demo", run_ids: dict[str, str] | None = None,
                     output_dir: Path | None = None) -> Path:
    """Execute ``notebooks/<notebook>.py`` with its params into ``book/<notebook>.ipynb``."""
    import jupytext
    import papermill

    source = paths.notebooks_root() / f"{notebook}.py"
    if not source.is_file():
        raise BookError(f"no notebook source {source}")
    spec = load_params(notebook, profile)
    if run_ids is None:
        run_ids = make_records(notebook, profile=profile)
    output_dir = Path(output_dir or paths.book_root())
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / f"{notebook}.ipynb"
    params = {**spec["parameters"], "profile": profile, "run_ids": run_ids}
    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    _tag_for_readers(nb)
    with tempfile.TemporaryDirectory() as tmp:
        src_nb = Path(tmp) / f"{notebook}.ipynb"
        jupytext.write(nb, src_nb)
        log = Path(tmp) / "reads.jsonl"
        log.touch()
        glue_log = Path(tmp) / "glue.jsonl"
        glue_log.touch()
        env_before = {k: os.environ.get(k) for k in (READ_LOG_ENV, GLUE_LOG_ENV, OUTPUT_DIR_ENV)}
        os.environ[READ_LOG_ENV] = str(log)
        os.environ[GLUE_LOG_ENV] = str(glue_log)
        staging = Path(tmp) / "outputs"  # tables' CSVs and figures' PNGs land in the book only after success
        os.environ[OUTPUT_DIR_ENV] = str(staging)
        try:
            papermill.execute_notebook(
                str(src_nb), str(target), parameters=params, kernel_name="python3",
                cwd=str(output_dir), progress_bar=False, log_output=False,
            )
        except papermill.PapermillExecutionError as exc:
            raise BookError(f"notebook {notebook!r} failed (executed copy kept at {target}):\n"
                            f"{exc.ename}: {exc.evalue}") from None
        finally:
            for k, v in env_before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        read_entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        reads = sorted({e["run_id"] for e in read_entries})
        _copy_manifests(output_dir, read_entries)
        _publish_outputs(staging, output_dir)
        glued = {}
        for line in glue_log.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                glued[entry["key"]] = entry["runs"]
    executed = json.loads(target.read_text(encoding="utf-8"))
    for cell in executed["cells"]:  # the parameters papermill injected: one click away, not on the page
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "injected-parameters" in tags and "hide-cell" not in tags:
            tags.append("hide-cell")
    executed["metadata"]["shovir"] = {"profile": profile, "run_ids": run_ids, "records_read": reads,
                                      "params_file": str(spec["path"].relative_to(paths.repo_root())),
                                      "glue": glued}
    target.write_text(json.dumps(executed, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    _update_glue_index(output_dir, notebook, glued)
    return target


def _publish_outputs(staging: Path, output_dir: Path) -> None:
    """Move the files ``book.show`` wrote while the notebook ran (``_tables/``, ``_figures/``) into the book.

    They are written to a staging folder first, so a notebook that fails (or, with credentialed data,
    whose outputs are refused) leaves nothing behind in ``book/``.
    """
    from .figures import FIGURES_LINK_DIR
    from .render import TABLES_LINK_DIR

    for sub in (TABLES_LINK_DIR, FIGURES_LINK_DIR):
        src = Path(staging) / sub
        if src.is_dir():
            shutil.copytree(src, Path(output_dir) / sub, dirs_exist_ok=True)


def _copy_manifests(output_dir: Path, read_entries: list[dict]) -> None:
    """Copy each read record's ``manifest.json`` to ``<output_dir>/_records/<run_id>/manifest.json``."""
    for entry in read_entries:
        src = Path(entry["path"]) / "manifest.json"
        dst = Path(output_dir) / RECORDS_DIR / entry["run_id"] / "manifest.json"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def _update_glue_index(output_dir: Path, notebook: str, glued: dict) -> None:
    """Replace ``notebook``'s entries of the book's glue index with ``glued``."""
    from ..records import atomic_write_text

    index = glue_index(output_dir)
    index = {k: v for k, v in index.items() if v.get("notebook") != notebook}
    index.update({k: {"notebook": notebook, "runs": runs} for k, runs in glued.items()})
    atomic_write_text(Path(output_dir) / GLUE_INDEX, json.dumps(index, indent=1, sort_keys=True) + "\n")


def glue_index(book_dir: Path | None = None) -> dict:
    """The book's ``glue key -> {"notebook", "runs": [{"run_id", "spec_sha256"}]}`` index (empty if none)."""
    path = Path(book_dir or paths.book_root()) / GLUE_INDEX
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def execute_book(*, profile: str = "demo", only: list[str] | None = None, progress: bool = True) -> list[Path]:
    """Make the records and execute every notebook the toc names (or ``only``)."""
    names = toc_notebooks()
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise BookError(f"not notebooks of the book: {unknown}; the toc names {names}")
        names = [n for n in names if n in only]
    done = []
    bar = tqdm(names, desc="notebooks", unit="nb", disable=not progress)
    for name in bar:
        bar.set_postfix_str(f"{name}: records")
        ids = make_records(name, profile=profile, progress=progress)
        bar.set_postfix_str(f"{name}: executing")
        done.append(execute_notebook(name, profile=profile, run_ids=ids))
    return done


def build_book(*, strict: bool = True) -> Path:
    """Build the HTML book with Jupyter Book 1.x; returns ``book/_build/html/index.html``."""
    exe = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-book")
    if exe is None:
        raise BookError("jupyter-book is not installed in this environment (pip install 'jupyter-book>=1.0.4,<2')")
    cmd = [exe, "build", str(paths.repo_root()), "--path-output", str(paths.book_root()), "--keep-going"]
    if strict:
        cmd.append("-W")
    proc = subprocess.run(cmd, cwd=paths.repo_root())
    if proc.returncode != 0:
        raise BookError(f"jupyter-book build failed (exit {proc.returncode}); see the warnings above")
    return paths.book_root() / "_build" / "html" / "index.html"

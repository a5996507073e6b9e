"""Execute the book's notebooks with papermill and build it with Jupyter Book 1.x."""
from __future__ import annotations

import json
import re
import os
import secrets
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from tqdm import tqdm

from .. import paths
from ..records import READ_LOG_ENV
from ..records.files import HOST, pid_alive
from .glue import GLUE_LOG_ENV
from .kernel import SHUTDOWN, ipc_kernels
from .render import OUTPUT_DIR_ENV
from ..params import load_params, toc_notebooks
from ..errors import ShovirError
from ..kernel_forkserver import forkserver

__all__ = ["make_records", "make_record_group", "execute_notebook", "execute_book", "build_book", "BookError", "glue_index",
           "GLUE_INDEX", "RECORDS_DIR", "PROFILE_TAG", "unglued_references"]

from .publish import GLUE_INDEX, book_lock, glue_index, publish, recover, watch_book
from .schedule import book_plan, execute_parallel, start_workers
RECORDS_DIR = "_records"
"""``book/_records/<run_id>/manifest.json``: a copy of every manifest a notebook read, which the book
links from each glued number and each chapter's "Records read" table (copied into the HTML)."""


class BookError(ShovirError, RuntimeError):
    """A notebook or the book build failed."""


def make_records(notebook: str, *, profile: str = "demo", progress: bool = True) -> dict[str, str]:
    """Make (or resume) every record ``params/<notebook>/<profile>.yaml`` names; returns key -> run id.

    A protocol with a ``prefill_arms`` function first scores the records' arms together (shared
    prompt prefixes; results go to the inference cache), then each record is made as usual. When a
    record fails, the error says which record, that the trials already written are kept, and the
    command that resumes it.
    """
    return make_record_group(notebook, load_params(notebook, profile)["runs"], profile=profile, progress=progress)


def make_record_group(notebook: str, runs: dict[str, dict], *, profile: str = "demo",
                      progress: bool = True) -> dict[str, str]:
    """Make (or resume) ``runs`` (key -> ``{protocol, name, spec}``, some of ``notebook``'s records) as
    :func:`make_records` does: prefill first, then each record; returns key -> run id."""
    from ..protocols import prefill
    from ..protocols import run as run_protocol

    prefill([(r["protocol"], r["name"], r["spec"]) for r in runs.values()], progress=progress)
    ids = {}
    for key, r in runs.items():
        try:
            run = run_protocol(r["protocol"], r["name"], r["spec"], progress=progress)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            raise BookError(f"{notebook}: record {key!r} ({r['protocol']}/{r['name']}) failed: "
                            f"{type(exc).__name__}: {exc}{_resume_hint(r, notebook, profile)}") from exc
        ids[key] = run.run_id
    return ids


def _resume_hint(r: dict, notebook: str, profile: str) -> str:
    """"; N trials already written are kept in <path>; `shovir run ...` resumes" (or "" if none yet)."""
    try:
        from ..protocols import run_id as _run_id
        from ..records import load_run

        protocol, name, h = _run_id(r["protocol"], r["name"], r["spec"]).split("/")
        rec = load_run(protocol, name, h, require_complete=False)
        n = len(rec.trials)
    except Exception:  # noqa: BLE001 - no record yet (the spec itself was refused) or unreadable
        return ""
    profile_arg = "" if profile == "demo" else f" --profile {profile}"
    return (f"; the {n} trial(s) already written are kept in {rec.path}; run `shovir run {notebook}{profile_arg}` "
            "again to resume from there")


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


PROFILE_TAG = "profile:"
"""A cell tagged ``profile:<name>`` (one or more such tags) is kept only when the book runs that
profile: prose that reads the demo's reference models (``profile:demo``) or the paper's own run
(``profile:mimic``) does not stand on the other profiles' pages."""

_GLUE_REF = re.compile(r"\{glue(?::[a-z]*)?\}`([^`]+)`")


def _select_profile_cells(nb, profile: str) -> None:
    """Drop the cells tagged for other profiles (:data:`PROFILE_TAG`)."""
    def keep(cell) -> bool:
        wanted = [t[len(PROFILE_TAG):] for t in cell.metadata.get("tags", []) if t.startswith(PROFILE_TAG)]
        return not wanted or profile in wanted

    nb.cells = [cell for cell in nb.cells if keep(cell)]


def unglued_references(cells: list[dict], glued) -> dict[int, list[str]]:
    """``{cell index: [keys]}`` of the glue references in markdown ``cells`` that nothing glued.

    A ``{glue:text}`key:format``` whose key is not in ``glued`` would render as a build warning
    (an error in the strict build) far from its cause; the runner reports it when the notebook ran.
    References to another notebook's keys (``other.ipynb::key``) are left to the build.
    """
    out: dict[int, list[str]] = {}
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        text = "".join(cell.get("source") or "")
        keys = [m.split(":", 1)[0] for m in _GLUE_REF.findall(text) if "::" not in m]
        missing = sorted({k for k in keys if k not in glued})
        if missing:
            out[i] = missing
    return out


def _read_entries(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def _failed_copy_dir() -> Path:
    """Where the executed copy of a failed notebook that read credentialed data is kept (never book/)."""
    return paths.runs_root() / ".book-failed"


def execute_notebook(notebook: str, *, profile: str = "demo", run_ids: dict[str, str] | None = None,
                     output_dir: Path | None = None, parameters: dict | None = None) -> Path:
    """Execute ``notebooks/<notebook>.py`` with its params into ``book/<notebook>.ipynb``.

    The notebook is executed into a temporary folder under the runs root (``.book-tmp/``; one left by
    a killed run is removed by the next, which says so). When it read a credentialed record or dataset,
    everything it emitted is scanned (:mod:`shovir_core.book.scan`) and on any finding nothing is
    written: :class:`~shovir_core.book.scan.LeakError` (a
    :class:`~shovir_core.book.guard.CredentialedDataError`) names the notebook, the cells and the kinds
    of leak. A value the guard refused inside the notebook (``book.glue``/``book.show``) stops it with
    a :class:`~shovir_core.book.guard.CredentialedDataError` naming the cell. A notebook that fails keeps
    its executed copy in ``book/`` (public data) or under the runs root (credentialed data), never
    credentialed outputs in ``book/``. ``parameters`` override the params file's papermill parameters.

    Other ``shovir book`` processes may run at once: what this notebook publishes (its executed copy,
    staged tables and figures, the manifests it read) enters the book in one all-or-nothing step under
    the book's write lock, with its glue index entry (:mod:`shovir_core.book.publish`); the guard
    removes only files this notebook wrote into the book, never another process's.
    """
    import jupytext
    import papermill

    from .figures import FIGURE_KEY_ENV
    from .guard import CredentialedDataError, index_for_reads
    from .scan import Leak, LeakError, scan_manifests, scan_notebook, scan_staged

    source = paths.notebooks_root() / f"{notebook}.py"
    if not source.is_file():
        raise BookError(f"no notebook source {source}")
    spec = load_params(notebook, profile)
    if run_ids is None:
        run_ids = make_records(notebook, profile=profile)
    output_dir = Path(output_dir or paths.book_root())
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / f"{notebook}.ipynb"
    params = {**spec["parameters"], **(parameters or {}), "profile": profile, "run_ids": run_ids}
    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    _select_profile_cells(nb, profile)
    _tag_for_readers(nb)
    figure_key = secrets.token_hex(32)
    with _work_folder(notebook) as tmp, watch_book(output_dir) as watch:
        src_nb = Path(tmp) / f"{notebook}.ipynb"
        executed_path = Path(tmp) / f"{notebook}.executed.ipynb"
        jupytext.write(nb, src_nb)
        log = Path(tmp) / "reads.jsonl"
        log.touch()
        glue_log = Path(tmp) / "glue.jsonl"
        glue_log.touch()
        env_keys = (READ_LOG_ENV, GLUE_LOG_ENV, FIGURE_KEY_ENV, OUTPUT_DIR_ENV)
        env_before = {k: os.environ.get(k) for k in env_keys}
        os.environ[READ_LOG_ENV] = str(log)
        os.environ[GLUE_LOG_ENV] = str(glue_log)
        os.environ[FIGURE_KEY_ENV] = figure_key
        staging = Path(tmp) / "outputs"  # tables' CSVs and figures' PNGs land in the book only after the scan
        os.environ[OUTPUT_DIR_ENV] = str(staging)
        try:
            work = Path(tmp) / "cwd"  # what a notebook writes to its working folder never reaches book/
            work.mkdir()
            # the executed copy is written once at the end, or when a cell fails (papermill saves it then
            # too); after every cell it cost the demo book 20 s of JSON encoding, and nothing reads it meanwhile
            with ipc_kernels() as kernel_manager:
                papermill.execute_notebook(
                    str(src_nb), str(executed_path), parameters=params, kernel_name="python3",
                    cwd=str(work), progress_bar=False, log_output=False, kernel_manager_class=kernel_manager,
                    iopub_timeout=IOPUB_TIMEOUT_S, request_save_on_cell_execute=False, shutdown_kernel=SHUTDOWN,
                )
        except papermill.PapermillExecutionError as exc:
            credentialed = [e for e in _read_entries(log) if e.get("credentialed")]
            kept = _keep_failed_copy(executed_path, output_dir, notebook, credentialed=bool(credentialed))
            cell = f"code cell [In {exc.exec_count}]" if exc.exec_count is not None else f"cell {exc.cell_index}"
            message = (f"notebook {notebook!r} failed in {cell} (executed copy kept at {kept}, nothing written to "
                       f"book/): {exc.ename}: {_withheld(exc.evalue, credentialed, notebook)}")
            if exc.ename == "CredentialedDataError":  # the guard's first line refused a value in the notebook
                raise CredentialedDataError(message) from None
            raise BookError(message) from None
        finally:
            for k, v in env_before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        entries = _read_entries(log)
        reads = sorted({e["run_id"] for e in entries if "run_id" in e})
        credentialed = [e for e in entries if e.get("credentialed")]
        glued, sources = {}, {}
        for line in glue_log.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                glued[entry["key"]] = entry["runs"]
                extra = {k: entry[k] for k in ("paper", "source") if entry.get(k)}
                if extra:  # a published value (book.glue_paper) or a shipped file's: where it was read
                    sources[entry["key"]] = extra
        executed = json.loads(executed_path.read_text(encoding="utf-8"))
        unglued = unglued_references(executed["cells"], glued)
        if unglued:
            kept = _keep_failed_copy(executed_path, output_dir, notebook, credentialed=bool(credentialed))
            where = "; ".join(f"markdown cell {i}: {', '.join(keys)}" for i, keys in unglued.items())
            raise BookError(f"notebook {notebook!r} (profile {profile!r}) refers to glue keys that no cell glued on "
                            f"this profile -- {where}. Glue them, or tag a cell whose prose holds only on one "
                            f"profile '{PROFILE_TAG}<profile>' (executed copy kept at {kept}).")
        leaks = []
        if credentialed:
            index = index_for_reads(credentialed, what=f"notebook {notebook!r}")
            leaks = scan_notebook(executed, index=index, figure_key=figure_key, notebook=notebook)
            leaks += scan_staged(staging, nb=executed, index=index, figure_key=figure_key, notebook=notebook)
            leaks += scan_manifests(entries, index=index, notebook=notebook)
        for cell in executed["cells"]:  # the parameters papermill injected: one click away, not on the page
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if "injected-parameters" in tags and "hide-cell" not in tags:
                tags.append("hide-cell")
        executed["metadata"]["shovir"] = {"profile": profile, "run_ids": run_ids, "records_read": reads,
                                          "credentialed": bool(credentialed),
                                          "params_file": str(spec["path"].relative_to(paths.repo_root())),
                                          "glue": glued, "glue_sources": sources}
        files = _manifest_files([e for e in entries if "run_id" in e])
        files.update(_staged_files(staging))
        with book_lock(output_dir, holder=f"publishing {notebook}"):
            if credentialed:
                for new in watch.new_files():  # this notebook wrote into book/ behind the runner's back
                    new.unlink()
                    leaks.append(Leak(notebook, None, None, None, f"file {new.relative_to(output_dir)}",
                                      "file written into book/", "removed: a notebook that read credentialed data "
                                                                 "may not write files into the book"))
            if leaks:
                raise LeakError(notebook, leaks)
            publish(output_dir, notebook, notebook_text=json.dumps(executed, indent=1, ensure_ascii=False) + "\n",
                    files=files)
    return target


IOPUB_TIMEOUT_S = 120
"""How long papermill waits for a cell's last output after the kernel says the cell is done (nbclient's
default, 4 s, failed a notebook of a rehearsal on a loaded 2-core machine: "Timeout waiting for IOPub
output"; a busy cluster node is no different)."""

BOOK_TMP = ".book-tmp"
"""``<runs root>/.book-tmp/<notebook>-<host>-<pid>-<random>/``: a notebook's executed copy, staged
outputs and working folder while it runs (beside the records, not in a world-readable /tmp)."""


@contextmanager
def _work_folder(notebook: str):
    """A fresh work folder for ``notebook``; first removes those of killed runs on this host, saying so."""
    root = paths.runs_root() / BOOK_TMP
    root.mkdir(parents=True, exist_ok=True)
    host = HOST.replace("-", "_")
    for old in sorted(p for p in root.iterdir() if p.is_dir()):
        parts = old.name.rsplit("-", 3)
        if len(parts) == 4 and parts[1] == host and parts[2].isdigit() and not pid_alive(int(parts[2])):
            shutil.rmtree(old, ignore_errors=True)
            print(f"shovir book: removed {old}, the work folder (executed copy, staged outputs) of an interrupted "
                  f"run of {parts[0]!r} (pid {parts[2]} is gone)", file=sys.stderr)
    folder = root / f"{notebook}-{host}-{os.getpid()}-{secrets.token_hex(4)}"
    folder.mkdir()
    try:
        yield str(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _withheld(message: str, credentialed: list[dict], notebook: str) -> str:
    """``message``, unless the notebook read credentialed data and the message holds its text."""
    if not credentialed:
        return message
    from .guard import CredentialedDataError, index_for_reads

    try:
        leaks = index_for_reads(credentialed, what=f"notebook {notebook!r}").leaks(message)
    except CredentialedDataError:
        leaks = True
    return "[message withheld: it may hold credentialed text; see the executed copy]" if leaks else message


def _keep_failed_copy(executed: Path, output_dir: Path, notebook: str, *, credentialed: bool) -> Path | None:
    """Keep a failed notebook's executed copy: in book/ for public data (published under the book's
    lock), under runs/ for credentialed data."""
    if not executed.is_file():
        return None
    if credentialed:
        dest = _failed_copy_dir() / f"{notebook}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(executed, dest)
        return dest
    with book_lock(output_dir, holder=f"keeping the failed copy of {notebook}"):
        return publish(output_dir, notebook, notebook_text=executed.read_text(encoding="utf-8"), files={})


def execute_book(*, profile: str = "demo", only: list[str] | None = None, progress: bool = True,
                 jobs: int = 1) -> list[Path]:
    """Make the records and execute every notebook the toc names (or ``only``).

    With ``jobs`` > 1 up to that many tasks run at once, each in its own process, as
    :func:`~shovir_core.book.schedule.book_plan` lays them out: the records of all the notebooks are made
    once each (a record several chapters name, once), a chapter's records spread over the workers, and each
    notebook starts as soon as its own records exist; a notebook whose params say ``requires: records`` (the
    reproduction map reads every chapter's records) starts once all the others' records exist, one that says
    ``requires: all`` after all the other notebooks. When a task fails, the
    ones already running finish, none is started, and the first failure is raised.
    """
    names = toc_notebooks()
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise BookError(f"not notebooks of the book: {unknown}; the toc names {names}")
        names = [n for n in names if n in only]
    # the notebooks' kernels are forked from one process that imported their third-party modules once
    with forkserver():
        if jobs <= 1 or len(names) <= 1:
            done = []
            bar = tqdm(names, desc="notebooks", unit="nb", disable=not progress)
            for name in bar:
                bar.set_postfix_str(f"{name}: records")
                ids = make_records(name, profile=profile, progress=progress)
                bar.set_postfix_str(f"{name}: executing")
                done.append(execute_notebook(name, profile=profile, run_ids=ids))
            return done
        pool = start_workers(jobs)  # they import while this process plans
        try:
            plan = book_plan(names, profile)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        done = execute_parallel(plan.tasks, after=plan.after, jobs=jobs, progress=progress, priority=plan.priority,
                                pool=pool)
    return [done[n] for n in names]


def build_book(*, strict: bool = True, jobs: int | None = None) -> Path:
    """Build the HTML book with Jupyter Book 1.x (Sphinx on ``jobs`` processes: :mod:`.html_build`);
    returns ``book/_build/html/index.html``."""
    import importlib.util

    from .html_build import build_html

    if importlib.util.find_spec("jupyter_book") is None:
        raise BookError("jupyter-book is not installed in this environment (pip install 'jupyter-book>=1.0.4,<2')")
    # under the book's write lock: two builds at once wrote the same files of book/_build (one failed renaming
    # the other's search index), and a notebook another run publishes meanwhile is not read half-replaced
    with book_lock(paths.book_root(), holder="building the book"):
        recover(paths.book_root())  # publishes a killed run left: completed or discarded before the build
        status = build_html(paths.repo_root(), paths.book_root(), strict=strict, jobs=jobs)
    if status != 0:
        raise BookError(f"jupyter-book build failed (exit {status}); see the warnings above")
    return paths.book_root() / "_build" / "html" / "index.html"


def _staged_files(staging: Path) -> dict[str, Path]:
    """The files ``book.show`` wrote while the notebook ran (``_tables/``, ``_figures/``), by their path in the book.

    They are written to a staging folder first, so a notebook that fails (or, with credentialed data,
    whose outputs are refused) leaves nothing behind in ``book/``.
    """
    from .figures import FIGURES_LINK_DIR
    from .render import TABLES_LINK_DIR

    out = {}
    for sub in (TABLES_LINK_DIR, FIGURES_LINK_DIR):
        src = Path(staging) / sub
        if src.is_dir():
            out.update({p.relative_to(staging).as_posix(): p for p in sorted(src.rglob("*")) if p.is_file()})
    return out


def _manifest_files(read_entries: list[dict]) -> dict[str, Path]:
    """Each read record's ``manifest.json``, to be copied to ``_records/<run_id>/manifest.json`` in the book."""
    return {f"{RECORDS_DIR}/{e['run_id']}/manifest.json": Path(e["path"]) / "manifest.json" for e in read_entries}

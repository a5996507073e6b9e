"""Writes into ``book/`` that cannot collide: a book-wide lock, all-or-nothing publishes, the glue index.

Several ``shovir book`` processes may execute notebooks at once; only their *writes* into the book
are serialised:

* every write into ``book/`` happens under an exclusive ``flock`` on ``book/.lock``
  (:func:`book_lock`; released by the kernel when a process dies);
* a notebook's files (its executed ``.ipynb``, the CSVs and PNGs it staged, the manifests it read)
  are first copied into a transaction folder ``book/.publish/<notebook>-<pid>-<random>/``, then a
  journal ``COMMIT`` is written atomically, then each file is renamed into place, the notebook
  last (:func:`publish`). A process killed before ``COMMIT`` leaves nothing in the book (the next
  writer discards the folder); one killed after it leaves a journal the next writer completes
  (:func:`recover`), and says so;
* the glue index ``book/_glue_index.json`` is keyed by (notebook, glue key) and *derived* from the
  executed notebooks' metadata (``metadata.shovir.glue``): each notebook's entry records the
  SHA-256 of the notebook it was read from, and :func:`glue_index` re-reads any notebook whose
  hash differs, so a kill between the notebook's rename and the index's rewrite never leaves a
  stale entry behind;
* a notebook that read credentialed data watches the book while it runs
  (:func:`watch_book`): every publish appends the paths it writes to each live watcher's file, so
  the guard can tell its own notebook's writes into ``book/`` from another process's and never
  deletes the latter.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from ..records.files import HOST, atomic_write_text, file_sha256, fcntl, pid_alive

__all__ = ["book_lock", "publish", "recover", "glue_index", "glue_runs", "refresh_glue_index", "watch_book",
           "book_files", "GLUE_INDEX", "LOCK_FILE", "PUBLISH_DIR", "INDEX_FORMAT"]

GLUE_INDEX = "_glue_index.json"
"""``book/_glue_index.json``: ``{"format": 2, "notebooks": {notebook: {"sha256", "glue": {key: runs}}}}``."""
LOCK_FILE = ".lock"
PUBLISH_DIR = ".publish"
INDEX_FORMAT = 2
_COMMIT = "COMMIT"
_NOTEBOOK_STAGED = "notebook.staged"


def _after_step(step: str) -> None:
    """Called after each write step of :func:`publish` (tests stop a process here to simulate a kill)."""


def _say(message: str) -> None:
    print(f"shovir book: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- the lock
@contextmanager
def book_lock(book_dir: Path, *, holder: str = ""):
    """Hold the book's exclusive write lock (``book/.lock``) for the block.

    When another process holds it, says who (``host pid what``) and waits.
    """
    book_dir = Path(book_dir)
    book_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(book_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = os.pread(fd, 400, 0).decode("utf-8", "replace").strip() or "another process"
                _say(f"waiting for the book's write lock ({other})")
                fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{HOST} {os.getpid()} {holder}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


# --------------------------------------------------------------------------- watchers
def _watch_files(book_dir: Path) -> list[Path]:
    folder = Path(book_dir) / PUBLISH_DIR
    return sorted(folder.glob("watch-*.jsonl")) if folder.is_dir() else []


def _watcher_alive(path: Path) -> bool:
    _, host, pid, _rand = path.stem.split("-", 3) if path.stem.count("-") >= 3 else ("", "", "0", "")
    return host != HOST or (pid.isdigit() and pid_alive(int(pid)))


def _tell_watchers(book_dir: Path, rels: list[str], *, by: str) -> None:
    for path in _watch_files(book_dir):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"by": by, "files": rels}) + "\n")


class _Watch:
    """What other processes published into the book while this one's notebook ran."""

    def __init__(self, book_dir: Path) -> None:
        self.book_dir = Path(book_dir)
        host = HOST.replace("-", "_")
        self.path = self.book_dir / PUBLISH_DIR / f"watch-{host}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
        self.before: set[Path] = set()

    def others(self) -> set[Path]:
        """Paths (absolute) another process published since the watch began."""
        out = set()
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    out.update(self.book_dir / rel for rel in json.loads(line)["files"])
        return out

    def new_files(self) -> list[Path]:
        """Files in the book now that were neither there at the start nor published by another process
        (call under :func:`book_lock`): what this process's notebook wrote behind the runner's back."""
        return sorted(book_files(self.book_dir) - self.before - self.others())


@contextmanager
def watch_book(book_dir: Path):
    """Register this process as a watcher of the book for the block; yields a :class:`_Watch`."""
    watch = _Watch(book_dir)
    with book_lock(book_dir, holder="starting a watch"):
        watch.path.parent.mkdir(parents=True, exist_ok=True)
        watch.path.touch()
        watch.before = book_files(book_dir)
    try:
        yield watch
    finally:
        watch.path.unlink(missing_ok=True)


def book_files(book_dir: Path) -> set[Path]:
    """Files under ``book_dir`` except the HTML build, the lock and the publish folder."""
    book_dir = Path(book_dir)
    out = set()
    for root, dirs, files in os.walk(book_dir):
        dirs[:] = [d for d in dirs if not (Path(root) == book_dir and d in ("_build", PUBLISH_DIR))]
        out.update(Path(root) / f for f in files if not (Path(root) == book_dir and f == LOCK_FILE))
    return out


# --------------------------------------------------------------------------- publish and recover
def publish(book_dir: Path, notebook: str, *, notebook_text: str, files: dict[str, Path]) -> Path:
    """Write ``notebook``'s executed copy and ``files`` (``{path relative to the book: source}``) into
    the book in one all-or-nothing step, then refresh its glue index entry. Call under :func:`book_lock`.
    """
    book_dir = Path(book_dir)
    recover(book_dir)
    txn = book_dir / PUBLISH_DIR / f"{notebook}-{os.getpid()}-{secrets.token_hex(4)}"
    txn.mkdir(parents=True)
    moves = []
    for i, (rel, src) in enumerate(sorted(files.items())):
        staged = f"{i:05d}.staged"
        shutil.copyfile(src, txn / staged)
        moves.append([staged, rel])
    atomic_write_text(txn / _NOTEBOOK_STAGED, notebook_text)
    moves.append([_NOTEBOOK_STAGED, f"{notebook}.ipynb"])
    _after_step("staged")
    atomic_write_text(txn / _COMMIT, json.dumps({"notebook": notebook, "moves": moves}, indent=1) + "\n")
    _after_step("committed")
    _tell_watchers(book_dir, [rel for _, rel in moves] + [GLUE_INDEX], by=f"{notebook} (pid {os.getpid()})")
    _apply(book_dir, txn, moves)
    refresh_glue_index(book_dir)
    _after_step("indexed")
    shutil.rmtree(txn)
    return book_dir / f"{notebook}.ipynb"


def _apply(book_dir: Path, txn: Path, moves: list[list[str]]) -> None:
    for k, (staged, rel) in enumerate(moves):
        src = txn / staged
        if src.is_file():  # not moved yet (an interrupted publish may have moved some)
            dst = book_dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        _after_step(f"moved {k}")


def recover(book_dir: Path) -> list[str]:
    """Finish or discard the publishes a killed process left (call under :func:`book_lock`).

    A transaction with its ``COMMIT`` journal is completed (its remaining files renamed into place),
    one without is discarded; the glue index is refreshed; watch files of dead processes are
    removed. Returns (and prints) one line per transaction.
    """
    book_dir = Path(book_dir)
    folder = book_dir / PUBLISH_DIR
    said = []
    if not folder.is_dir():
        return said
    for path in _watch_files(book_dir):
        if not _watcher_alive(path):
            path.unlink(missing_ok=True)
    for txn in sorted(p for p in folder.iterdir() if p.is_dir()):
        journal = txn / _COMMIT
        if journal.is_file():
            entry = json.loads(journal.read_text(encoding="utf-8"))
            moves = entry["moves"]
            _tell_watchers(book_dir, [rel for _, rel in moves] + [GLUE_INDEX], by=f"recovery of {txn.name}")
            _apply(book_dir, txn, moves)
            said.append(f"completed the publish of {entry['notebook']!r} that an interrupted run left "
                        f"({len(moves)} file(s), {txn})")
        else:
            said.append(f"discarded the unfinished publish {txn.name} of an interrupted run (it had not "
                        "committed; the book keeps the previous version)")
        shutil.rmtree(txn)
    if said:
        refresh_glue_index(book_dir)
        for line in said:
            _say(line)
    return said


# --------------------------------------------------------------------------- the glue index
def _notebook_glue(path: Path) -> dict:
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):
        return {}
    return dict((meta.get("shovir") or {}).get("glue") or {})


def _read_index(book_dir: Path) -> dict:
    path = Path(book_dir) / GLUE_INDEX
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
        return {}  # an index of the old format (keyed by glue key alone): rebuilt from the notebooks
    return data.get("notebooks") or {}


def _reconciled(book_dir: Path) -> tuple[dict, bool]:
    book_dir = Path(book_dir)
    index = _read_index(book_dir)
    notebooks = {p.stem: p for p in book_dir.glob("*.ipynb") if p.is_file()}
    changed = False
    out = {}
    for name, path in sorted(notebooks.items()):
        sha = file_sha256(path)
        entry = index.get(name)
        if not entry or entry.get("sha256") != sha:
            entry = {"sha256": sha, "glue": _notebook_glue(path)}
            changed = True
        out[name] = entry
    changed = changed or set(index) != set(out)
    return out, changed


def refresh_glue_index(book_dir: Path) -> dict:
    """Bring ``book/_glue_index.json`` in step with the notebooks in the book and return it
    (``{notebook: {"sha256", "glue": {key: runs}}}``). Call under :func:`book_lock`."""
    index, changed = _reconciled(book_dir)
    if changed:
        # compact: rewritten after each notebook, and indented JSON goes through the pure-Python encoder (the
        # demo book's index is 11 MB indented; writing it 66 times took 7 s)
        atomic_write_text(Path(book_dir) / GLUE_INDEX,
                          json.dumps({"format": INDEX_FORMAT, "notebooks": index}, sort_keys=True,
                                     separators=(",", ":")) + "\n")
    return index


def glue_index(book_dir: Path | None = None) -> dict:
    """``{notebook: {glue key: [{"run_id", "spec_sha256"}, ...]}}`` of the notebooks in the book.

    Read from ``book/_glue_index.json``, except for notebooks whose hash differs from the one the
    index recorded (a run killed before rewriting it): those are read from the notebook itself.
    Writes nothing.
    """
    from .. import paths

    index, _ = _reconciled(Path(book_dir or paths.book_root()))
    return {name: entry["glue"] for name, entry in index.items()}


def glue_runs(index: dict, notebook: str, key: str) -> list | None:
    """The runs behind glue ``key`` of ``notebook`` in an index from :func:`glue_index` (``None``: not glued)."""
    return (index.get(notebook) or {}).get(key)

"""Refuse to render free text or pixels from credentialed records.

Records derived from MIMIC-CXR or PadChest-GR carry ``credentialed: true``. Their data-use
agreements forbid redistributing report text or images, so the book may show only aggregates of
them. Two lines of defence:

1. **This module** (fast, in the notebook): :func:`assert_aggregate`, called by ``book.glue`` and
   ``book.show``, walks the value about to be shown (strings, bytes, lists, dicts, sets, pandas
   frames with their index and column names, ``Styler``, numpy arrays, tensors, PIL images,
   matplotlib figures) and refuses report text (:mod:`.shingles`: three consecutive words of a
   report of the credentialed dataset) and anything that looks like pixels (:func:`looks_like_pixels`).
   It applies whenever the ``runs`` given are credentialed *or* the notebook has read a credentialed
   record or dataset in this session (the runner's read log), so ``runs=[]`` or a public run do not
   switch it off.
2. **The runner's scan** (:mod:`.scan`, deny by default): after a notebook that read a credentialed
   record has run, every output of every cell is scanned before anything is written to ``book/``.

The report index is built in memory from the datasets named by the credentialed records' specs
(:func:`index_for_reads`) and never written to disk.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from . import shingles
from ..errors import ShovirError

__all__ = [
    "CredentialedDataError", "assert_aggregate", "any_credentialed", "looks_like_pixels", "credentialed_reads",
    "session_credentialed", "index_for_reads", "session_index", "record_texts", "dataset_texts",
    "IMAGE_MAX_SIDE", "IMAGE_MAX_CELLS", "REFUSED", "install_display_guard",
]

REFUSED = "shovir_refused"
"""Output-metadata key of a display the kernel's display guard refused (the runner's scan reports it)."""

IMAGE_MAX_SIDE = 28
"""A numeric array (or image artist) longer than this along any side looks like pixels."""
IMAGE_MAX_CELLS = 196
"""... and so does one with more than this many values (14 x 14: the largest class-by-class matrix)."""

class CredentialedDataError(ShovirError, PermissionError):
    """Free text or pixels from a credentialed record were about to be rendered."""


# --------------------------------------------------------------------------- which runs are credentialed
def runs_list(runs) -> list:
    """``runs`` as a list of records: ``None`` -> ``[]``, a ``{key: Run}`` dict -> its values, one run -> ``[run]``."""
    if runs is None:
        return []
    if isinstance(runs, Mapping):
        return list(runs.values())
    if isinstance(runs, Iterable) and not isinstance(runs, (str, bytes)):
        return list(runs)
    return [runs]


def any_credentialed(runs) -> bool:
    return any(getattr(r, "credentialed", False) for r in runs_list(runs))


def _read_log_path() -> Path | None:
    from ..records import READ_LOG_ENV

    log = os.environ.get(READ_LOG_ENV)
    return Path(log) if log else None


def credentialed_reads() -> list[dict]:
    """Credentialed records and datasets read in this session (entries of the runner's read log)."""
    log = _read_log_path()
    if log is None or not log.is_file():
        return []
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            if entry.get("credentialed"):
                out.append(entry)
    return out


def session_credentialed() -> bool:
    """True when a credentialed record or dataset was read in this session (see :func:`credentialed_reads`)."""
    return bool(credentialed_reads())


# --------------------------------------------------------------------------- credentialed texts
_DATASET_TEXTS: dict[tuple, tuple[str, list[str]]] = {}


def _dataset_sources(spec: Mapping) -> list[tuple[str, dict]]:
    out = []
    for key, value in spec.items():
        if (key == "dataset" or key.endswith("_dataset")) and isinstance(value, str):
            options = spec.get(f"{key}_options") or {}
            out.append((value, dict(options) if isinstance(options, Mapping) else {}))
    return out


def dataset_texts(source: str, options: Mapping | None = None, *, what: str = "") -> tuple[str, list[str]]:
    """``(dataset name, texts)``: every report and finding sentence of a dataset (cached per process).

    Raises :class:`CredentialedDataError` when the dataset cannot be loaded: without its texts the
    guard cannot tell report text from aggregates, so nothing may be rendered.
    """
    key = (source, json.dumps(options or {}, sort_keys=True, default=str))
    if key not in _DATASET_TEXTS:
        from ..data import load_dataset

        expanded = os.path.expandvars(source)
        if "$" in expanded:
            raise CredentialedDataError(
                f"{what or 'credentialed data'}: cannot build the report index: dataset {source!r} names an unset "
                "environment variable; set it to the folder of your credentialed copy (without the reports the "
                "book cannot check what the notebook shows)")
        from ..records import READ_LOG_ENV

        log = os.environ.pop(READ_LOG_ENV, None)  # the guard's own load is not a read of the notebook
        try:
            ds = load_dataset(expanded, **dict(options or {}))
        except Exception as exc:  # noqa: BLE001 - any failure means: cannot check, so refuse
            raise CredentialedDataError(
                f"{what or 'credentialed data'}: cannot build the report index from dataset {source!r} "
                f"({type(exc).__name__}: {exc})") from None
        finally:
            if log is not None:
                os.environ[READ_LOG_ENV] = log
        texts = []
        if ds.reports is not None and "text" in ds.reports.columns:
            texts += [str(t) for t in ds.reports["text"].dropna()]
        sentences = getattr(ds, "sentences", None)
        if sentences is not None and "text" in sentences.columns:
            texts += [str(t) for t in sentences["text"].dropna()]
        _DATASET_TEXTS[key] = (ds.name, texts)
    return _DATASET_TEXTS[key]


def _looks_like_prose(value) -> bool:
    return isinstance(value, str) and not value.lstrip().startswith(("{", "[")) and len(value.split()) >= 3


def record_texts(run_path: str | Path) -> list[str]:
    """Free-text cells of a record's trials (generated reports, prompts, answers): strings of 3+ words."""
    from ..records import Run

    trials = Run(Path(run_path)).trials
    texts: list[str] = []
    for i in range(trials.shape[1]):
        col = trials.iloc[:, i]
        if col.dtype == object or pd.api.types.is_string_dtype(col):
            values = pd.unique(col.dropna().astype(str))
            texts += [v for v in values if _looks_like_prose(v)]
    return texts


_INDEXES: dict[tuple, shingles.ShingleIndex] = {}
_PART_INDEXES: dict[tuple, shingles.ShingleIndex] = {}


def _part_index(key: tuple, texts, label: str) -> shingles.ShingleIndex:
    """The index of one dataset's or one record's texts, built once per process: a notebook's later
    ``book.show`` calls read more records, and each new set of reads merges indexes already built
    (rebuilding all of them per call took most of a full-scale Supp. §B notebook's time)."""
    if key not in _PART_INDEXES:
        _PART_INDEXES[key] = shingles.ShingleIndex(texts(), label=label)
    return _PART_INDEXES[key]


def index_for_reads(entries: Iterable[Mapping], *, what: str = "") -> shingles.ShingleIndex:
    """The report index of the credentialed records and datasets read (entries of the read log).

    For a record: the reports and finding sentences of every dataset its spec names (``dataset``,
    ``*_dataset``, with ``dataset_options``) and the free-text cells of its trials; for a dataset read
    directly: its reports and finding sentences. Cached per process.
    """
    from ..records import Run

    entries = [e for e in entries if e.get("credentialed")]
    key = tuple(sorted({json.dumps(e, sort_keys=True, default=str) for e in entries}))
    if key in _INDEXES:
        return _INDEXES[key]
    parts = []

    def dataset_part(source, options, what_):
        name, texts = dataset_texts(source, options, what=what_)
        key = ("dataset", json.dumps([source, options], sort_keys=True, default=str))
        return _part_index(key, lambda: texts, f"the reports of {name!r}")

    for e in entries:
        if e.get("kind") == "dataset":
            parts.append(dataset_part(e["source"], e.get("options"), what))
            continue
        rid = e.get("run_id", "?")
        path = Path(e["path"]) if e.get("path") else None
        if path is None or not (path / "manifest.json").is_file():
            raise CredentialedDataError(f"{what or 'credentialed data'}: record {rid} is not readable at {path}; "
                                        "cannot build the report index")
        spec = Run(path).manifest.get("spec") or {}
        for source, options in _dataset_sources(spec):
            parts.append(dataset_part(source, options, f"{what or 'record'} {rid}".strip()))
        stat = (path / "manifest.json").stat()  # a record that grew since is indexed again
        parts.append(_part_index(("record", str(path.resolve()), stat.st_mtime_ns, stat.st_size),
                                 lambda: record_texts(path), f"the free text of record {rid}"))
    index = shingles.ShingleIndex.merge(parts)
    _INDEXES[key] = index
    return index


def session_index(runs=None) -> tuple[shingles.ShingleIndex | None, str]:
    """The report index for this session's credentialed reads (plus ``runs``): ``(index, why_not)``."""
    entries = list(credentialed_reads())
    for r in runs_list(runs):
        if getattr(r, "credentialed", False):
            if getattr(r, "path", None) is None:
                return None, f"run {getattr(r, 'run_id', r)!r} has no record folder to read its dataset from"
            entries.append({"run_id": r.run_id, "path": str(r.path), "credentialed": True})
    try:
        return index_for_reads(entries), ""
    except CredentialedDataError as exc:
        return None, str(exc)


# --------------------------------------------------------------------------- what looks like pixels
def looks_like_pixels(arr) -> bool:
    """A numeric array of more than :data:`IMAGE_MAX_CELLS` values or longer than :data:`IMAGE_MAX_SIDE`.

    >>> looks_like_pixels(np.zeros((14, 14))), looks_like_pixels(np.zeros((7, 64))), looks_like_pixels(np.zeros(30))
    (False, True, True)
    """
    a = np.asarray(arr)
    if a.dtype.kind not in "buifc" or a.ndim == 0:
        return False
    return a.size > IMAGE_MAX_CELLS or max(a.shape) > IMAGE_MAX_SIDE


def _as_array(obj):
    """A numpy view of tensors and other array-likes (torch, jax, cupy...), else None."""
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__array__") and hasattr(obj, "shape") and hasattr(obj, "dtype"):
        try:
            if hasattr(obj, "detach"):
                obj = obj.detach().cpu()
            return np.asarray(obj)
        except Exception:  # noqa: BLE001
            return None
    return None


def _is_pil(obj) -> bool:
    try:
        from PIL import Image
    except ImportError:
        return False
    return isinstance(obj, Image.Image)


def _is_figure(obj) -> bool:
    mod = type(obj).__module__ or ""
    return mod.startswith("matplotlib") and hasattr(obj, "axes") and hasattr(obj, "savefig")


# --------------------------------------------------------------------------- walking a value
_MAX_DEPTH = 12


def _walk(obj, where: str, depth: int = 0):
    """Yield ``(where, kind, payload)`` with kind ``"text"``, ``"pixels"`` or ``"figure"``."""
    if depth > _MAX_DEPTH:
        yield where, "text", repr(obj)[:10000]
        return
    if obj is None or isinstance(obj, (bool, int, float, complex, np.bool_, np.number)):
        return
    if isinstance(obj, str):
        yield where, "text", obj
        return
    if isinstance(obj, (bytes, bytearray, memoryview)):
        yield where, "text", bytes(obj).decode("utf-8", errors="replace")
        return
    if _is_pil(obj):
        yield where, "pixels", f"a PIL image of size {obj.size}"
        return
    if _is_figure(obj):
        yield where, "figure", obj
        return
    try:
        from pandas.io.formats.style import Styler
    except ImportError:  # pragma: no cover
        Styler = ()
    if isinstance(obj, Styler):
        yield from _walk(obj.data, f"{where} (Styler data)", depth + 1)
        caption = getattr(obj, "caption", None)
        if caption:
            yield from _walk(caption, f"{where} caption", depth + 1)
        try:
            html = obj.to_html()
        except Exception as exc:  # noqa: BLE001 - a Styler that cannot render cannot be checked
            yield where, "text", f"unrenderable Styler ({exc})"
        else:
            yield where, "text", html
        return
    if isinstance(obj, pd.DataFrame):
        yield from _frame(obj, where, depth)
        return
    if isinstance(obj, pd.Series):
        yield from _walk(obj.index, f"{where} index", depth + 1)
        if obj.name is not None:
            yield from _walk(obj.name, f"{where} name", depth + 1)
        if obj.dtype.kind in "buifc" and isinstance(obj.index, pd.RangeIndex) and looks_like_pixels(obj.to_numpy()):
            yield where, "pixels", f"a series of {len(obj)} numbers with a positional index"
        yield from _column(obj, where, depth)
        return
    if isinstance(obj, pd.MultiIndex):
        for level, values in enumerate(obj.levels):
            yield from _walk(pd.Index(values), f"{where} level {level}", depth + 1)
        for name in obj.names:
            if name is not None:
                yield from _walk(name, f"{where} name", depth + 1)
        return
    if isinstance(obj, pd.Index):
        if obj.name is not None:
            yield from _walk(obj.name, f"{where} name", depth + 1)
        yield from _column(pd.Series(obj, dtype=obj.dtype), where, depth, as_labels=True)
        return
    arr = _as_array(obj)
    if arr is not None:
        if arr.dtype.kind in "buifc":
            if looks_like_pixels(arr):
                yield where, "pixels", f"a numeric array of shape {tuple(arr.shape)}"
            return
        for i, v in enumerate(arr.ravel()[:100000]):
            yield from _walk(v, f"{where}[{i}]", depth + 1)
        return
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _walk(k, f"{where} key", depth + 1)
            yield from _walk(v, f"{where}[{_safe_label(k)}]", depth + 1)
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
        if items and all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in items):
            if looks_like_pixels(np.asarray(items, dtype=float)):
                yield where, "pixels", f"a sequence of {len(items)} numbers"
            return
        for i, v in enumerate(items):
            yield from _walk(v, f"{where}[{i}]", depth + 1)
        return
    # anything else: what IPython would show of it
    for method in ("_repr_html_", "_repr_markdown_", "_repr_latex_"):
        fn = getattr(obj, method, None)
        if callable(fn):
            try:
                text = fn()
            except Exception:  # noqa: BLE001
                text = None
            if isinstance(text, str):
                yield where, "text", text
    for method in ("_repr_png_", "_repr_jpeg_", "_repr_svg_"):
        if callable(getattr(obj, method, None)):
            yield where, "pixels", f"an object rendered as an image ({type(obj).__name__})"
            return
    data = getattr(obj, "data", None)
    if isinstance(data, (str, bytes)):
        yield from _walk(data, where, depth + 1)
    yield where, "text", repr(obj)


def _safe_label(label, position=None) -> str:
    """A label fit for an error message: short one- or two-word labels as written, else a position."""
    if isinstance(label, (int, np.integer)) or (isinstance(label, str) and len(label) <= 40
                                                  and len(shingles.words(label)) <= 2):
        return repr(label)
    return f"#{position}" if position is not None else "(a long label)"


def _column(s: pd.Series, where: str, depth: int, *, as_labels: bool = False):
    if s.dtype.kind in "buifc" or pd.api.types.is_bool_dtype(s):
        return
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    values = s.dropna().tolist()
    try:
        values = list(dict.fromkeys(values))
    except TypeError:  # unhashable cells (lists, dicts): check each
        pass
    for i, v in enumerate(values):
        yield from _walk(v, f"{where}[{i}]" if not as_labels else f"{where} label {i}", depth + 1)


def _frame(df: pd.DataFrame, where: str, depth: int):
    yield from _walk(df.columns, f"{where} column names", depth + 1)
    yield from _walk(df.index, f"{where} index", depth + 1)
    numeric = df.select_dtypes(include=["number", "bool"])
    positional = len(df.columns) > 0 and all(isinstance(c, (int, np.integer)) and not isinstance(c, bool)
                                             for c in df.columns)
    if positional and numeric.shape[1] and looks_like_pixels(numeric.to_numpy()):
        yield where, "pixels", f"a {df.shape[0]} x {df.shape[1]} matrix of numbers with positional columns"
    for i in range(df.shape[1]):  # by position: duplicate column names are fine
        col = df.iloc[:, i]
        label = df.columns[i]
        yield from _column(col, f"{where} column {_safe_label(label, i)}", depth)


# --------------------------------------------------------------------------- the check
def _credentialed_sources(runs) -> list[str]:
    ids = [r.run_id for r in runs_list(runs) if getattr(r, "credentialed", False)]
    ids += [e.get("run_id") or f"dataset {e.get('source')!r}" for e in credentialed_reads()]
    return sorted(set(ids))


def _fallback_free_text(text: str) -> bool:
    tokens = shingles.words(text)
    labels = shingles.label_words()
    return len(text.split()) >= 3 and len(tokens) >= 3 and any(
        t not in labels and not shingles.is_number(t) for t in tokens)


def assert_aggregate(obj, runs=None, *, what: str = "value") -> None:
    """Raise :class:`CredentialedDataError` if ``obj`` holds report text or pixels of credentialed data.

    Applies when ``runs`` (a Run, a list or a ``{key: Run}`` dict) hold a credentialed record or when
    this session read one (see the module docstring); otherwise returns at once.
    """
    sources = _credentialed_sources(runs)
    if not sources:
        return
    ids = ", ".join(sources)
    index = None
    why_not = ""
    for where, kind, payload in _walk(obj, what):
        if kind == "pixels":
            raise CredentialedDataError(f"{where}: refusing to render pixels ({payload}) from credentialed "
                                        f"data ({ids}); show aggregates only")
        if kind == "figure":
            from .figures import image_like_artists

            problems = image_like_artists(payload)
            if problems:
                raise CredentialedDataError(f"{where}: refusing a figure that draws image-like data "
                                            f"({'; '.join(problems)}) in a notebook that read credentialed data "
                                            f"({ids})")
            continue
        if not payload or not payload.strip():
            continue
        if index is None and not why_not:
            index, why_not = session_index(runs)
        if index is not None:
            if index.leaks(payload):
                raise CredentialedDataError(f"{where}: holds 3 or more consecutive words of {index.label} "
                                            f"(credentialed: {ids}); show aggregates only")
        elif _fallback_free_text(payload):
            raise CredentialedDataError(f"{where}: refusing to render free text from credentialed data ({ids}); "
                                        f"the report index is unavailable ({why_not})")


def install_display_guard(shell=None) -> bool:
    """Check every object an IPython kernel displays (``display()``, a cell's last value, glue) with
    :func:`assert_aggregate` once the session has read credentialed data.

    A refused object is not rendered: its output holds a one-line notice and ``{REFUSED: why}`` in
    its metadata, which the runner's scan reports with the cell. Returns False outside IPython.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    formatter = shell.display_formatter
    if getattr(formatter.format, "_shovir_guard", False):
        return True
    original = formatter.format

    def guarded(obj, include=None, exclude=None):
        if session_credentialed():
            try:
                assert_aggregate(obj, None, what=f"displayed {type(obj).__name__}")
            except CredentialedDataError as exc:
                return {"text/plain": f"[not shown: {exc}]"}, {REFUSED: str(exc)}
        return original(obj, include=include, exclude=exclude)

    guarded._shovir_guard = True
    formatter.format = guarded
    return True

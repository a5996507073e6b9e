"""Glue helpers: every number in the book is pasted from a record-derived value."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..errors import ShovirError
from .guard import assert_aggregate, runs_list

__all__ = ["glue", "glue_paper", "glue_values", "show", "runs_table", "GLUE_LOG_ENV", "ProvenanceError",
           "RUN_DERIVED_PAPER_KEYS"]


class ProvenanceError(ShovirError, ValueError):
    """A value glued with provenance it does not have: the paper's number as a run's, or a run's
    (or a setting's) number with no record."""


RUN_DERIVED_PAPER_KEYS = ("verdict", "n_compared", "n_inside", "n_outside", "n_missing", "audit")
"""Segments after ``.paper.`` in keys that a run (not the paper) decides: the verdicts and counts of
a paper-vs-run table (:func:`shovir_core.tables.paper_vs_run.paper_vs_run`)."""

GLUE_LOG_ENV = "SHOVIR_GLUE_LOG"
"""When set, every glued key is appended to this file with the runs it came from (the book runner
collects it into the book's ``glue key -> runs`` index)."""


def _plain(value):
    """A numpy scalar as its Python value; a whole-number float (a count computed in float, ``9.0``)
    as an ``int``, so ``{glue:text}`` prints ``9`` (every float format spec accepts an int)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    return value


def glue(key: str, value, *, runs, source: str | None = None, display: bool = False) -> None:
    """Glue ``value`` under the namespaced ``key`` (checked against credentialed runs).

    ``runs`` are the records the value was derived from (a Run, a list or the
    dict returned by :func:`load_runs`); credentialed runs admit aggregates only. ``source`` names
    the file shipped with the package a value was read from when no record made it (the
    reproduction map's catalogue, ``shovir_core/resources/reproduction.yaml``); the book says so.

    Raises
    ------
    ProvenanceError
        When ``runs`` is empty (a published value goes through :func:`glue_paper`; a setting is
        glued with the records that used it), or when the value is a published one: taken from
        the paper's stored values (a :class:`~shovir_core.papers.PaperNumber`), or a number under
        a ``.paper.`` key equal to a stored published value. Glued with run provenance, it would
        link a paper's number to a demo record.
    """
    from ..papers.published import PaperNumber

    _check_key(key)
    if isinstance(value, PaperNumber):
        if runs_list(runs):
            raise ProvenanceError(f"glue {key!r}: {float(value)!r} is the paper's value {value.paper}:{value.id}, "
                                  "glued with run records; glue it with book.glue_paper (or book.glue_values, which "
                                  "routes published values) so it is marked as the paper's")
        _glue_source(key, float(value), value.source(), display=display)
        return
    value = _plain(value)
    assert_aggregate(value, runs, what=f"glue {key!r}")  # the credentialed-data guard speaks first
    if not runs_list(runs) and not source:
        raise ProvenanceError(f"glue {key!r}: no run record given (runs=[]); a published value is glued with "
                              "book.glue_paper(key, paper_id), a setting with the records that used it, a value "
                              "read from a shipped file with source=<its path>")
    if runs_list(runs):
        _refuse_published(key, value)
    from myst_nb import glue as _glue

    _glue(key, value, display=display)
    _log_glue(key, runs, source=source)


def _check_key(key: str) -> None:
    if "." not in key:
        raise ValueError(f"glue key {key!r} must be namespaced, e.g. 'data.n_images'")


def _refuse_published(key: str, value) -> None:
    """A number glued with run records under a ``.paper.`` key must not be a stored published value."""
    parts = key.split(".")
    if "paper" not in parts[:-1]:
        return
    rest = parts[parts.index("paper") + 1:]
    if rest and (rest[0] in RUN_DERIVED_PAPER_KEYS or rest[-1].startswith("n_")):
        return
    from ..papers.published import equals_published

    hits = equals_published(value)
    if hits:
        raise ProvenanceError(f"glue {key!r}: {value!r} equals the published value(s) {hits[:3]} and is glued with "
                              "run records; glue the paper's value with book.glue_paper")


def glue_paper(key: str, paper_id: str, *, paper: str = "modalens", part: str = "value", scale: float = 1.0,
               display: bool = False) -> None:
    """Glue a published value, marked as the paper's: ``paper``'s stored value ``paper_id``.

    The value is read from the package's published numbers (``shovir_core/papers/data``), never
    passed in, so it cannot be a run's number under the paper's name. ``part`` picks the value or a
    bound of its printed interval (``"lo"``, ``"hi"``); ``scale`` converts the printed unit (``0.01``:
    a printed % or pp as a fraction, for ``{glue:text}`key:.1%```). The book links it to the stored
    value and the section that prints it (:mod:`shovir_core.book.sphinx_ext`).

    A value the paper's numbers imply but it does not print (the patients with two or more studies:
    ``"design.patients - design.single_study_patients"``) is glued the same way: ``paper_id`` is then
    an expression over stored ids (:func:`shovir_core.papers.expression.evaluate`), and the book
    marks it "paper", derived from those values (:func:`shovir_core.papers.published.derived_source`).

    >>> glue_paper("x", "t3.gen.P", part="median")
    Traceback (most recent call last):
    ...
    ValueError: glue_paper 'x': part 'median'; use 'value', 'lo' or 'hi'
    """
    from ..papers.published import derived_source, paper_source
    from ..papers.values import load_values

    if part not in ("value", "lo", "hi"):
        raise ValueError(f"glue_paper {key!r}: part {part!r}; use 'value', 'lo' or 'hi'")
    _check_key(key)
    values = load_values(paper)
    if paper_id not in values:  # a value derived from the paper's numbers
        if part != "value":
            raise ValueError(f"glue_paper {key!r}: {paper_id!r} is not a stored id; a derived value has no interval")
        source = derived_source(paper, paper_id, scale=scale)
        _glue_source(key, source.pop("number"), source, display=display)
        return
    item = values[paper_id]
    if part == "value":
        value = item.value if item.categorical else float(item.value) * scale
    else:
        if item.ci_values is None:
            raise ValueError(f"glue_paper {key!r}: {paper}:{paper_id} prints no interval")
        value = item.ci_values[0 if part == "lo" else 1] * scale
    if isinstance(value, frozenset):
        value = "; ".join(sorted(value))
    _glue_source(key, value, paper_source(paper, paper_id, part=part, scale=scale), display=display)


def _glue_source(key: str, value, source: dict, *, display: bool) -> None:
    from myst_nb import glue as _glue

    _glue(key, _plain(value), display=display)
    log = os.environ.get(GLUE_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"key": key, "runs": [], "paper": source}) + "\n")


def _log_glue(key: str, runs, *, source: str | None = None) -> None:
    log = os.environ.get(GLUE_LOG_ENV)
    if not log:
        return
    entries = sorted({(r.run_id, r.manifest.get("spec_sha256")) for r in runs_list(runs)})
    entry = {"key": key, "runs": [{"run_id": rid, "spec_sha256": h} for rid, h in entries]}
    if source and not entries:
        entry["source"] = source
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")


def glue_values(prefix: str, values: Mapping, *, runs, source: str | None = None) -> None:
    """Glue every ``values[k]`` under ``<prefix>.<k>`` (see :func:`glue`); ``prefix`` is the namespace.

    A published value among them (a :class:`~shovir_core.papers.PaperNumber`, as
    :func:`shovir_core.tables.paper_vs_run.paper_vs_run` returns the paper's side) is glued as the
    paper's, the rest with ``runs``.
    """
    if not prefix or prefix.endswith("."):
        raise ValueError(f"glue prefix {prefix!r} must be a namespace such as 'ml' (no trailing dot)")
    from ..papers.published import PaperNumber

    for k, v in values.items():
        glue(f"{prefix}.{k}", v, runs=[] if isinstance(v, PaperNumber) else runs, source=source)


def show(obj, *, runs, name: str | None = None, caption: str | None = None, alt: str | None = None,
         formats: Mapping[str, str] | None = None, missing: str | Mapping[str, str] | None = None,
         groups: str | None = None, note: str | None = None,
         intervals: Mapping[str, tuple[str, str]] | None = None, collapsed: bool = False,
         what: str | None = None, drop_empty: bool = True) -> None:
    """Display a table or figure for readers, after the credentialed-data check.

    Every caption ends with what ran, in brackets: the data and model(s) that the manifests of
    ``runs`` name (``[demo: NIH 64 px, ref-anchored]``, :func:`shovir_core.book.captions.what_ran`),
    or ``what`` where the table shows something else (the paper's numbers alone:
    :data:`~shovir_core.book.captions.PAPER_ONLY`). ``drop_empty=False`` keeps a column without any
    value (it reads ``missing``, e.g. "unavailable" for a metric that did not run).

    * A :class:`~shovir_core.tables.result.TableResult` (or a DataFrame with a ``caption``) becomes a
      numbered table with its caption, display names, units and one precision per quantity from
      ``resources/metrics.yaml``, no NaN/None/True (``missing`` says why a cell is empty), and a CSV
      of the unformatted frame linked under it (:func:`shovir_core.book.render.table_markdown`).
      ``name`` (``"sv-t1"``) makes it referable as ``{numref}`tbl-sv-t1``` and names the CSV;
      ``groups`` splits the rows into one table per section, ``intervals`` prints ``(lo, hi)``
      columns inside their estimate's cells, ``collapsed`` puts each section in a closed dropdown.
      The formatted text of ``TableResult.display()`` is refused (``TypeError``): pass the table itself.
    * A matplotlib figure becomes a numbered figure with ``caption`` and ``alt`` text
      (:func:`shovir_core.book.figures.show_figure`).
    * Anything else is displayed as it is.

    Returns nothing, so a cell ending in ``book.show(...)`` displays the object once.
    """
    from IPython.display import display

    from ..tables.result import FORMATTED, TableResult
    from .captions import with_what_ran

    if _is_figure(obj):
        from .figures import show_figure

        show_figure(obj, runs=runs, name=name, caption=with_what_ran(caption, runs, what=what) if caption else caption,
                    alt=alt)
        return
    if isinstance(obj, pd.DataFrame):
        if obj.attrs.get(FORMATTED):
            raise TypeError("book.show got the formatted text of TableResult.display(); pass the TableResult itself "
                            "(its `index` gives the row labels; `select`, `drop`, `pivot` and `labels` reshape and "
                            "name it), so the book formats it, captions it and writes the CSV of its numbers "
                            "(CONTRIBUTING.md, 'Showing results')")
        obj = TableResult(obj, caption=caption or obj.attrs.get("caption") or "")
    if isinstance(obj, TableResult):
        from .render import caption_name, table_markdown

        caption = with_what_ran(caption or obj.caption, runs, what=what)
        auto = name is None
        name = name or caption_name(caption, obj.frame.to_csv())
        assert_aggregate(obj.frame, runs, what=f"table {name or caption!r}")
        display(table_markdown(obj, name=name, caption=caption, formats=formats, missing=missing,
                               groups=groups, note=note, intervals=intervals, collapsed=collapsed,
                               label=not auto, drop_empty=drop_empty))
        return
    assert_aggregate(obj, runs, what="table")
    display(obj)


def _is_figure(obj) -> bool:
    try:
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        return False
    return isinstance(obj, Figure)


def runs_table(runs):
    """The records a chapter read, as a TableResult: run id (linked to its manifest in the book),
    status, trials, dataset, git commit and the day it ended; the manifest has the rest (resolved
    spec, dataset hash, package versions, seeds)."""
    from ..tables.result import TableResult

    rows = []
    for r in (runs.values() if isinstance(runs, Mapping) else runs):
        m = r.manifest
        git = (m.get("provenance") or {}).get("git") or {}
        rows.append({
            "run_id": r.run_id, "status": m["status"],
            "trials": (m.get("counts") or {}).get("n_trials"),
            "dataset": (m.get("dataset") or {}).get("name"),
            "git commit": (git.get("commit") or "")[:10] + ("+dirty" if git.get("dirty") else ""),
            "ended": (m.get("ended") or "")[:10],
        })
    frame = pd.DataFrame(rows, columns=["run_id", "status", "trials", "dataset", "git commit", "ended"])
    return TableResult(frame, labels={"run_id": "record (manifest)"},
                       caption="The run records this chapter read; each id links to its manifest (resolved spec, "
                               "provenance, dataset hash, counts).").with_runs(runs)

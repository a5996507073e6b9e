"""Glue helpers: every number in the book is pasted from a record-derived value."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .guard import assert_aggregate

__all__ = ["glue", "glue_values", "show", "runs_table", "GLUE_LOG_ENV"]

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


def glue(key: str, value, *, runs, display: bool = False) -> None:
    """Glue ``value`` under the namespaced ``key`` (checked against credentialed runs).

    ``runs`` are the records the value was derived from (a Run, a list or the
    dict returned by :func:`load_runs`); credentialed runs admit aggregates only.
    """
    from myst_nb import glue as _glue

    if "." not in key:
        raise ValueError(f"glue key {key!r} must be namespaced, e.g. 'data.n_images'")
    value = _plain(value)
    assert_aggregate(value, runs, what=f"glue {key!r}")
    _glue(key, value, display=display)
    _log_glue(key, runs)


def _runs_of(runs) -> list:
    if runs is None:
        return []
    if isinstance(runs, Mapping):
        return list(runs.values())
    if isinstance(runs, (list, tuple, set, frozenset)):
        return list(runs)
    return [runs]


def _log_glue(key: str, runs) -> None:
    log = os.environ.get(GLUE_LOG_ENV)
    if not log:
        return
    entries = sorted({(r.run_id, r.manifest.get("spec_sha256")) for r in _runs_of(runs)})
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"key": key, "runs": [{"run_id": rid, "spec_sha256": h} for rid, h in entries]})
                 + "\n")


def glue_values(prefix: str, values: Mapping, *, runs) -> None:
    """Glue every ``values[k]`` under ``<prefix>.<k>`` (see :func:`glue`); ``prefix`` is the namespace."""
    if not prefix or prefix.endswith("."):
        raise ValueError(f"glue prefix {prefix!r} must be a namespace such as 'ml' (no trailing dot)")
    for k, v in values.items():
        glue(f"{prefix}.{k}", v, runs=runs)


def show(obj, *, runs, name: str | None = None, caption: str | None = None, alt: str | None = None,
         formats: Mapping[str, str] | None = None, missing: str | Mapping[str, str] | None = None,
         groups: str | None = None, note: str | None = None,
         intervals: Mapping[str, tuple[str, str]] | None = None, collapsed: bool = False) -> None:
    """Display a table or figure for readers, after the credentialed-data check.

    * A :class:`~shovir_core.tables.result.TableResult` (or a DataFrame with a ``caption``) becomes a
      numbered table with its caption, display names, units and one precision per quantity from
      ``resources/metrics.yaml``, no NaN/None/True (``missing`` says why a cell is empty), and a CSV
      of the unformatted frame linked under it (:func:`shovir_core.book.render.table_markdown`).
      ``name`` (``"sv-t1"``) makes it referable as ``{numref}`tbl-sv-t1``` and names the CSV;
      ``groups`` splits the rows into one table per section, ``intervals`` prints ``(lo, hi)``
      columns inside their estimate's cells, ``collapsed`` puts each section in a closed dropdown.
    * A matplotlib figure becomes a numbered figure with ``caption`` and ``alt`` text
      (:func:`shovir_core.book.figures.show_figure`).
    * Anything else is displayed as it is.

    Returns nothing, so a cell ending in ``book.show(...)`` displays the object once.
    """
    from IPython.display import display

    from ..tables.result import TableResult

    if _is_figure(obj):
        from .figures import show_figure

        show_figure(obj, runs=runs, name=name, caption=caption, alt=alt)
        return
    if isinstance(obj, pd.DataFrame):
        obj = TableResult(obj, caption=caption or "")
    if isinstance(obj, TableResult):
        from .render import default_name, table_markdown

        auto = name is None
        name = name or default_name(caption or obj.caption, obj.frame.to_csv())
        assert_aggregate(obj.frame, runs, what=f"table {name or caption!r}")
        display(table_markdown(obj, name=name, caption=caption, formats=formats, missing=missing,
                               groups=groups, note=note, intervals=intervals, collapsed=collapsed,
                               label=not auto))
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

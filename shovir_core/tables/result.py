"""The one contract every chapter table returns.

A :class:`TableResult` carries the frame (numbers unformatted), the values to glue (keys without the
chapter namespace), display metadata (each frame column's metric in ``resources/metrics.yaml``, or
an explicit display name) and the ids of the run records it was derived from, so the book can link
every number back to its records.

Run ids: table functions are pure functions of trial frames and leave ``run_ids`` empty; the
notebook attaches the records it read with ``.with_runs(runs)`` (one rule for every chapter). A
function whose input *is* a set of records (``{key: Run}``) fills them itself, and a table derived
from another :class:`TableResult` keeps that table's ``run_ids``.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

__all__ = ["TableResult", "run_ids_of", "frame_of", "FORMATTED"]

FORMATTED = "formatted_table"
"""The ``attrs`` key that marks a frame of reader text made by :meth:`TableResult.display`."""


def run_ids_of(runs) -> tuple[str, ...]:
    """Sorted unique run ids of a Run, a list of runs, a ``{key: Run}`` dict or run-id strings."""
    if runs is None:
        return ()
    if isinstance(runs, TableResult):
        return runs.run_ids
    if isinstance(runs, Mapping):
        runs = list(runs.values())
    elif isinstance(runs, (str, bytes)) or not isinstance(runs, Iterable):
        runs = [runs]
    ids = set()
    for r in runs:
        rid = r if isinstance(r, str) else getattr(r, "run_id", None)
        if rid is None:
            raise TypeError(f"not a run record or run id: {r!r}")
        ids.add(rid)
    return tuple(sorted(ids))


def frame_of(table) -> pd.DataFrame:
    """The frame of a :class:`TableResult`, or ``table`` itself when it is already a DataFrame."""
    if isinstance(table, TableResult):
        return table.frame
    if isinstance(table, pd.DataFrame):
        return table
    raise TypeError(f"expected a TableResult or a DataFrame, got {type(table).__name__}")


@dataclass
class TableResult:
    """A chapter table: frame, glue values, display metadata and the run ids it came from.

    Attributes
    ----------
    frame : DataFrame
        The table with unformatted numbers (what tests and checks read).
    values : dict
        Glue values, keyed without the chapter namespace (``t2.all14.present.flip_rate``).
    metrics : dict
        Frame column -> metric name in ``resources/metrics.yaml`` (display name, unit, format).
        With MultiIndex columns the keys are the column tuples.
    labels : dict
        Display header of a column (overrides the metric's display name, e.g. ``"FR (1)"`` for a
        ``flip_rate`` column), of an index level, or of one level value of MultiIndex columns
        (``"FullNoise"`` -> ``"Full Noise"``).
    run_ids : tuple of str
        The records the table was derived from (``<protocol>/<name>/<hash12>``).
    caption : str
        One sentence saying what the table shows (the notebook may replace it).
    index : tuple of str
        Columns that :meth:`display` shows as row labels (the frame itself stays flat).
    na_rep : str
        How :meth:`display` writes a missing value of a metric column.
    """

    frame: pd.DataFrame
    values: dict = field(default_factory=dict)
    metrics: dict[Hashable, str] = field(default_factory=dict)
    labels: dict[Hashable, str] = field(default_factory=dict)
    run_ids: tuple[str, ...] = ()
    caption: str = ""
    index: tuple[str, ...] = ()
    na_rep: str = "–"

    def __post_init__(self):
        if not isinstance(self.frame, pd.DataFrame):
            raise TypeError(f"TableResult.frame must be a DataFrame, got {type(self.frame).__name__}")
        from ..metrics.schema import SCHEMA_FILE, metric_schema

        missing = [c for c in self.index if c not in self.frame.columns]
        if missing:
            raise ValueError(f"TableResult.index names columns the frame lacks: {missing}")
        missing = [c for c in self.metrics if c not in self.frame.columns]
        if missing:
            raise ValueError(f"TableResult.metrics names columns the frame lacks: {missing}")
        unknown = sorted({m for m in self.metrics.values() if m not in metric_schema()})
        if unknown:
            raise ValueError(f"TableResult.metrics names metrics {unknown} that {SCHEMA_FILE} does not define")
        self.index = tuple(self.index)
        self.run_ids = tuple(self.run_ids)

    def with_runs(self, runs) -> "TableResult":
        """A copy whose ``run_ids`` are those of ``runs`` (added to the ones already there)."""
        return replace(self, run_ids=tuple(sorted(set(self.run_ids) | set(run_ids_of(runs)))))

    def select(self, columns: Sequence[Hashable]) -> "TableResult":
        """A copy with only the :attr:`index` columns and ``columns`` (in that order)."""
        missing = [c for c in columns if c not in self.frame.columns]
        if missing:
            raise ValueError(f"select: the frame has no columns {missing}; it has {list(self.frame.columns)}")
        keep = list(self.index) + [c for c in columns if c not in self.index]
        return replace(self, frame=self.frame[keep].copy(),
                       metrics={c: m for c, m in self.metrics.items() if c in keep})

    def drop(self, columns: Sequence[Hashable]) -> "TableResult":
        """A copy without ``columns`` (e.g. a machine key that the frame keeps for lookups but readers
        need not see); glue values, labels and run ids are kept. An :attr:`index` column cannot be
        dropped."""
        columns = list(columns)
        missing = [c for c in columns if c not in self.frame.columns]
        if missing:
            raise ValueError(f"drop: the frame has no columns {missing}; it has {list(self.frame.columns)}")
        shown = [c for c in columns if c in self.index]
        if shown:
            raise ValueError(f"drop: {shown} are the table's index (row labels); drop other columns")
        return replace(self, frame=self.frame.drop(columns=columns),
                       metrics={c: m for c, m in self.metrics.items() if c not in columns})

    def pivot(self, *, index: str | Sequence[str], columns: str, values: str) -> "TableResult":
        """The table reshaped wide: one row per ``index``, one column per value of ``columns``.

        Every new column gets the metric of ``values`` (for its format) and is headed by its value of
        ``columns``; glue values and run ids are kept.
        """
        idx = [index] if isinstance(index, str) else list(index)
        wide = self.frame.pivot(index=idx, columns=columns, values=values)
        wide.columns = list(wide.columns)
        metric = self.metrics.get(values)
        return replace(self, frame=wide.reset_index(), index=tuple(idx),
                       metrics={c: metric for c in wide.columns} if metric else {},
                       labels={**self.labels, **{c: self.labels.get(c, c) for c in wide.columns}})

    def _header(self, col) -> Hashable:
        from ..metrics.schema import metric_spec

        if col in self.labels:
            return self.labels[col]
        metric = self.metrics.get(col)
        if isinstance(col, tuple):
            # MultiIndex columns: the level naming the metric (else the last level, unless it has a
            # label) shows the metric's display name; other levels their labels
            parts = [self.labels.get(part, part) for part in col]
            if metric is not None:
                at = col.index(metric) if metric in col else (None if col[-1] in self.labels else len(col) - 1)
                if at is not None:
                    parts[at] = metric_spec(metric).display
            return tuple(parts)
        if metric is not None:
            return metric_spec(metric).display
        return col

    def display(self) -> pd.DataFrame:
        """The frame for readers: metric columns formatted, headers renamed, :attr:`index` as row labels.

        This is for reading a table in a console or a test. The book shows the :class:`TableResult`
        itself (``book.show(table)``), which formats it again, captions it and writes the CSV of the
        numbers; :func:`shovir_core.book.show` refuses this frame (its ``attrs`` mark it as
        :data:`FORMATTED`, and every frame pandas derives from it keeps the mark).
        """
        from ..metrics.schema import metric_spec

        out = self.frame.copy()
        for col, name in self.metrics.items():
            if col not in out.columns:
                continue
            spec = metric_spec(name)
            out[col] = [self.na_rep if pd.isna(v) else spec.format_value(v) for v in self.frame[col]]
        if self.index:
            out = out.set_index(list(self.index))
        headers = [self._header(c) for c in out.columns]
        out.columns = (pd.MultiIndex.from_tuples(headers) if isinstance(out.columns, pd.MultiIndex)
                       else pd.Index(headers))
        names = [self.labels.get(n, n) for n in out.index.names]
        out = out.rename_axis(index=names if len(names) > 1 else names[0])
        out.attrs.update({"caption": self.caption, FORMATTED: True})
        return out

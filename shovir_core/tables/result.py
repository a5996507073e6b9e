"""The one contract every chapter table returns.

A :class:`TableResult` carries the frame (numbers unformatted), the values to glue (keys without the
chapter namespace), display metadata (each frame column's metric in ``resources/metrics.yaml``, or
an explicit display name) and the ids of the run records it was derived from, so the book can link
every number back to its records.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import pandas as pd

__all__ = ["TableResult", "run_ids_of"]


def run_ids_of(runs) -> tuple[str, ...]:
    """Sorted unique run ids of a Run, a list of runs, a ``{key: Run}`` dict or run-id strings."""
    if runs is None:
        return ()
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
    labels : dict
        Frame column -> display header for columns that are not metrics (``"n_trials"`` -> ``"trials"``).
    run_ids : tuple of str
        The records the table was derived from (``<protocol>/<name>/<hash12>``).
    caption : str
        One sentence saying what the table shows (the notebook may replace it).
    """

    frame: pd.DataFrame
    values: dict = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    run_ids: tuple[str, ...] = ()
    caption: str = ""

    def with_runs(self, runs) -> "TableResult":
        """A copy whose ``run_ids`` are those of ``runs`` (added to the ones already there)."""
        return replace(self, run_ids=tuple(sorted(set(self.run_ids) | set(run_ids_of(runs)))))

    def display(self) -> pd.DataFrame:
        """The frame formatted for readers: metric columns formatted and renamed, labels applied.

        A metric column is headed by its metric's display name unless ``labels`` names it (so two
        columns of one metric, e.g. the flip rates of two arms, stay distinguishable).
        """
        from ..metrics.schema import display_frame

        metrics = {c: m for c, m in self.metrics.items() if c in self.frame.columns}
        out = display_frame(self.frame, metrics) if metrics else self.frame.copy()
        out.columns = [self.labels.get(c, shown) for c, shown in zip(self.frame.columns, out.columns)]
        return out

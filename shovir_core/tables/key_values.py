"""A check's named results as a two-column table with readable row labels (not a raw key dump)."""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from .result import TableResult

__all__ = ["labelled_values"]


def labelled_values(values: Mapping, labels: Mapping[str, str], *, caption: str, header: str = "quantity") -> TableResult:
    """One row per key of ``labels`` (in that order): its readable label and ``values[key]``.

    Booleans read "yes"/"no"; every key of ``labels`` must be in ``values`` (a missing one is an
    error naming it), and keys without a label are not shown.
    """
    missing = [k for k in labels if k not in values]
    if missing:
        raise ValueError(f"labelled_values: no value for {missing}; have {sorted(values)}")
    shown = [("yes" if values[k] else "no") if isinstance(values[k], bool) else values[k] for k in labels]
    frame = pd.DataFrame({"quantity": list(labels.values()), "value": pd.Series(shown, dtype=object)})
    return TableResult(frame, dict(values), labels={"quantity": header, "value": "value"}, caption=caption,
                       index=("quantity",))

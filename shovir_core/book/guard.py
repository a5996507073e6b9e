"""Refuse to render free text or pixels from credentialed records.

Records derived from MIMIC-CXR or PadChest-GR carry ``credentialed: true``.
Their data-use agreements forbid redistributing report text or images, so the
book may show only aggregates of them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

__all__ = ["CredentialedDataError", "assert_aggregate", "any_credentialed"]

FREE_TEXT_MIN_CHARS = 24
"""Strings at least this long that contain a space are treated as free text."""


class CredentialedDataError(PermissionError):
    """Free text or pixels from a credentialed record were about to be rendered."""


def _runs_list(runs) -> list:
    if runs is None:
        return []
    if isinstance(runs, Mapping):
        return list(runs.values())
    if isinstance(runs, Iterable) and not isinstance(runs, (str, bytes)):
        return list(runs)
    return [runs]


def any_credentialed(runs) -> bool:
    return any(getattr(r, "credentialed", False) for r in _runs_list(runs))


def _is_free_text(v) -> bool:
    return isinstance(v, str) and len(v) >= FREE_TEXT_MIN_CHARS and " " in v.strip()


def assert_aggregate(obj, runs, *, what: str = "value") -> None:
    """Raise :class:`CredentialedDataError` if ``obj`` holds free text or pixels of a credentialed run."""
    if not any_credentialed(runs):
        return
    ids = ", ".join(r.run_id for r in _runs_list(runs) if getattr(r, "credentialed", False))
    if isinstance(obj, np.ndarray) and obj.ndim >= 2 and obj.dtype.kind in "uif" and min(obj.shape[:2]) >= 8:
        raise CredentialedDataError(f"{what}: refusing to render a pixel array from credentialed run(s) {ids}")
    if _is_free_text(obj):
        raise CredentialedDataError(f"{what}: refusing to render free text from credentialed run(s) {ids}")
    if isinstance(obj, pd.Series):
        obj = obj.to_frame()
    if isinstance(obj, pd.DataFrame):
        for col in obj.columns:
            s = obj[col]
            if (s.dtype == object or pd.api.types.is_string_dtype(s)) and s.map(_is_free_text).any():
                raise CredentialedDataError(
                    f"{what}: column {col!r} holds free text from credentialed run(s) {ids}; show aggregates only")

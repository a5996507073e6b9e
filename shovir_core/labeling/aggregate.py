"""From mention statuses to CheXpert codes, and the CheXpert No Finding rule."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..labels import CHEXPERT_CLASSES, NEGATIVE, POSITIVE, UNCERTAIN

__all__ = ["aggregate_mentions", "no_finding", "PATHOLOGIES", "MENTION_STATUSES"]

MENTION_STATUSES = ("positive", "uncertain", "negative")
PATHOLOGIES = tuple(c for c in CHEXPERT_CLASSES if c not in ("No Finding", "Support Devices"))
"""The classes whose positive or uncertain mention rules out No Finding (all but Support Devices)."""

_CODE = {"positive": POSITIVE, "uncertain": UNCERTAIN, "negative": NEGATIVE}
_RANK = {"positive": 3, "uncertain": 2, "negative": 1}


def aggregate_mentions(mentions: Iterable[tuple[str, str]]) -> dict[str, float]:
    """Codes per class from ``(class, status)`` mentions of one report.

    A class is positive if any mention is positive, else uncertain if any is
    uncertain, else negative if mentioned only negatively, else blank (NaN) — the
    CheXpert aggregation. No Finding follows :func:`no_finding`.
    """
    best: dict[str, str] = {}
    for cls, status in mentions:
        if status not in _RANK:
            raise ValueError(f"mention status must be one of {MENTION_STATUSES}, got {status!r}")
        if cls not in CHEXPERT_CLASSES or cls == "No Finding":
            raise ValueError(f"mention class {cls!r} is not one of the 13 CheXpert findings")
        if cls not in best or _RANK[status] > _RANK[best[cls]]:
            best[cls] = status
    codes = {c: (_CODE[best[c]] if c in best else np.nan) for c in CHEXPERT_CLASSES[:-1]}
    codes["No Finding"] = no_finding(codes)
    return codes


def no_finding(codes: dict[str, float]) -> float:
    """CheXpert No Finding: 1 when no pathology (all classes but Support Devices) is positive
    or uncertain, else blank (NaN). It is never 0 or -1.

    >>> no_finding({"Edema": 0.0, "Support Devices": 1.0})
    1.0
    >>> no_finding({"Edema": -1.0})
    nan
    """
    for cls in PATHOLOGIES:
        v = codes.get(cls, np.nan)
        if v == POSITIVE or v == UNCERTAIN:
            return np.nan
    return POSITIVE

"""Overlap of binary indicators (e.g. which trials flip under two conditions)."""
from __future__ import annotations

import numpy as np

__all__ = ["jaccard", "phi"]


def _pair(a, b):
    x, y = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"indicator lengths differ: {x.shape} vs {y.shape}")
    for name, v in (("a", x), ("b", y)):
        if not np.isin(v, (0.0, 1.0)).all():
            raise ValueError(f"{name} must be binary 0/1")
    return x.astype(bool), y.astype(bool)


def jaccard(a, b) -> float:
    """|A ∩ B| / |A ∪ B| of two indicator vectors; NaN when both are empty."""
    x, y = _pair(a, b)
    union = (x | y).sum()
    return float((x & y).sum() / union) if union else float("nan")


def phi(a, b) -> float:
    """φ coefficient (Pearson correlation of two binary vectors); NaN if either is constant."""
    x, y = _pair(a, b)
    n11, n10, n01, n00 = (x & y).sum(), (x & ~y).sum(), (~x & y).sum(), (~x & ~y).sum()
    den = np.sqrt(float((n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)))
    return float((n11 * n00 - n10 * n01) / den) if den else float("nan")

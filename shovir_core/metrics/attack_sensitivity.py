"""ShoViR attack-sensitivity score S_AUC and its RO-corrected Δ, as the authors' postprocessing computes them.

arco-group/ShoViR-Bench ``src/postprocessing/plots/sensitivity_score.py``@07a7a6d defines, per model and
occlusion arm X with F(p) the model's F1 at blending strength p (in percent, 0 … 100)::

    S_AUC(X) = (1/100) ∫_0^100 [F(0) − F(p)] / F(0) dp      (trapezoid rule over the p present)
    S_100(X) = [F(0) − F(100)] / F(0)
    Δ_X      = S_AUC(X) − S_AUC(RO)                          (and Δ_S_100 likewise)

and drops a model whose F(0) is NaN or 0. The script's F(p) is the unweighted mean of the per-class F1
over the classes of the file (``np.nanmean``); the paper's figures weight classes (μ-F1), so the curve is
the caller's choice (:func:`sensitivity_scores` takes any ``value`` column). Every function is vectorised
over models; the arithmetic follows the script's order (p in percent, ``np.trapezoid`` then ``/ 100``), so
the values are bit-identical to it (``tests/test_metrics_sensitivity.py``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["s_auc", "sensitivity_scores", "sensitivity_deltas"]


def _percent(p) -> np.ndarray:
    """Strengths in whole percent: fractions (every p ≤ 1) are scaled by 100, percent kept."""
    p = np.asarray(p, dtype=float)
    scaled = p * 100.0 if p.size and np.nanmax(p) <= 1.0 else p
    pct = np.rint(scaled)
    if not np.allclose(pct, scaled, atol=1e-6):
        raise ValueError(f"s_auc: strengths must be whole percent (0 … 100, or 0 … 1 in steps of 0.01), got {p.tolist()}")
    return pct


def s_auc(f, p) -> tuple[np.ndarray, np.ndarray]:
    """``(S_AUC, S_100)`` of curves ``f`` (last axis: the strengths ``p``, sorted ascending, first p = 0).

    ``p`` in fractions (0 … 1) or percent (0 … 100); ``f`` any shape ``(..., len(p))``. NaN where F(0)
    is NaN or 0 (the script leaves such a model out); S_100 is NaN where the grid has no p = 100.

    >>> s, s100 = s_auc([[0.5, 0.4, 0.25]], [0.0, 0.5, 1.0])
    >>> round(float(s[0]), 4), float(s100[0])
    (0.225, 0.5)
    """
    f = np.asarray(f, dtype=float)
    pct = _percent(p)
    if pct.ndim != 1 or len(pct) != f.shape[-1]:
        raise ValueError(f"s_auc: {len(pct)} strengths for curves of length {f.shape[-1]}")
    if len(pct) == 0 or pct[0] != 0 or np.any(np.diff(pct) <= 0):
        raise ValueError(f"s_auc: strengths must start at 0 and increase, got {pct.tolist()}")
    f0 = f[..., :1]
    ok = np.isfinite(f0[..., 0]) & (f0[..., 0] != 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        drops = (f0 - f) / f0
    auc = np.trapezoid(drops, pct, axis=-1) / 100.0
    s100 = drops[..., -1] if pct[-1] == 100 else np.full(f.shape[:-1], np.nan)
    return np.where(ok, auc, np.nan), np.where(ok, s100, np.nan)


def sensitivity_scores(curves: pd.DataFrame, *, value: str = "f1", by=("model", "condition")) -> pd.DataFrame:
    """S_AUC and S_100 per group of a long frame of curves (columns ``by``, ``p``, ``value``).

    Each group is integrated over the strengths it has rows for (the script integrates over the result
    files present, a NaN value included); groups on the same strengths are scored in one vectorised call.
    Returns ``by``, ``s_auc``, ``s_100``, ``n_p``; groups whose F(0) is NaN or 0 are dropped, as the script
    drops them.
    """
    by = list(by)
    grids: dict[tuple, list] = {}
    for key, g in curves.sort_values("p").groupby(by, sort=True):
        grids.setdefault(tuple(g["p"].astype(float)), []).append((key, g[value].to_numpy(dtype=float)))
    parts = []
    for grid, items in grids.items():
        s, s100 = s_auc(np.vstack([v for _, v in items]), np.asarray(grid))
        keys = pd.DataFrame([k if isinstance(k, tuple) else (k,) for k, _ in items], columns=by)
        parts.append(keys.assign(s_auc=s, s_100=s100, n_p=len(grid)))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*by, "s_auc", "s_100", "n_p"])
    return out[out["s_auc"].notna()].sort_values(by).reset_index(drop=True)


def sensitivity_deltas(scores: pd.DataFrame, *, control: str = "RO", arms=("OCO", "DOCO"),
                       unit: str = "model", arm: str = "condition") -> pd.DataFrame:
    """Δ_X = S_AUC(X) − S_AUC(control) and Δ_S_100 per ``unit`` present under both (the script's
    ``delta_scores``: models shared by the arm and RO). Columns ``unit, arm, delta_s_auc, delta_s_100``."""
    ref = scores[scores[arm] == control].set_index(unit)[["s_auc", "s_100"]]
    out = []
    for x in arms:
        cur = scores[scores[arm] == x].set_index(unit)[["s_auc", "s_100"]]
        shared = cur.index.intersection(ref.index)
        d = cur.loc[shared] - ref.loc[shared]
        out.append(pd.DataFrame({unit: shared, arm: x, "delta_s_auc": d["s_auc"].to_numpy(),
                                 "delta_s_100": d["s_100"].to_numpy()}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=[unit, arm, "delta_s_auc", "delta_s_100"])

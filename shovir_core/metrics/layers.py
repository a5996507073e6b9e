"""Layerwise statistics of logit-lens readouts (ModaLens App. N.1: Figures 3 and 6, Tables 27 and 36).

Input: per trial and image side, the projected ``yes``/``no`` logits at every layer (arrays of shape
``(n_trials, n_layers + 1, 2)``, entry 0 = embeddings, the last = the model's own readout, as
:func:`shovir_core.models.lens.layer_logits` returns them). Intervals: the project bootstrap.

* :func:`margins` -- projected margin ``yes - no`` per layer; the answer is ``yes`` when it is > 0
  (ties read ``no``, as the readout does);
* :func:`disagreement` -- per layer, the share of trials whose two images get different projected
  answers; its last entry **is** the flip rate (Figure 6, Table 36);
* :func:`mean_abs_delta` -- per layer, mean |margin(c) - margin(d)| (Figure 3A);
* :func:`agreement_with_final` -- per layer, the share of projected answers equal to the final
  answer, and the majority floor (the share of the commoner final answer; Figure 3B);
* :func:`balanced_agreement` and :func:`calibration_depth` -- the first layer whose balanced
  agreement with the model's own forced choice clears the best constant predictor (0.5), with a
  patient-clustered bootstrap interval of that layer;
* :func:`settling_layer` -- per trial, the first layer from which the projected answer no longer
  changes;
* :func:`still_apart` -- final-layer total variation between the two sides' yes/no distributions
  above a threshold (0.05; Table 27), to be set against the flips.
"""
from __future__ import annotations

import numpy as np

__all__ = ["margins", "answers", "disagreement", "mean_abs_delta", "agreement_with_final", "balanced_agreement",
           "calibration_depth", "settling_layer", "still_apart", "total_variation"]


def _lens(lens) -> np.ndarray:
    arr = np.asarray(lens, dtype=float)
    if arr.ndim != 3 or arr.shape[2] != 2:
        raise ValueError(f"lens readouts must have shape (n_trials, n_layers + 1, 2), got {arr.shape}")
    return arr


def margins(lens) -> np.ndarray:
    """Projected margin ``yes - no``, shape ``(n_trials, n_layers + 1)``."""
    arr = _lens(lens)
    return arr[..., 0] - arr[..., 1]


def answers(margin) -> np.ndarray:
    """Projected answers (``True`` = yes; ties read no)."""
    return np.asarray(margin, dtype=float) > 0


def disagreement(margin_c, margin_d) -> np.ndarray:
    """Per layer, the share of trials whose two sides' projected answers differ."""
    return (answers(margin_c) != answers(margin_d)).mean(axis=0)


def mean_abs_delta(margin_c, margin_d) -> np.ndarray:
    """Per layer, mean |margin(c) - margin(d)|."""
    return np.abs(np.asarray(margin_c, float) - np.asarray(margin_d, float)).mean(axis=0)


def agreement_with_final(margin) -> tuple[np.ndarray, float]:
    """(per-layer share of projected answers equal to the final answer, majority floor)."""
    a = answers(margin)
    final = a[:, -1]
    return (a == final[:, None]).mean(axis=0), float(max(final.mean(), 1 - final.mean()))


def balanced_agreement(margin) -> np.ndarray:
    """Per layer, balanced accuracy of the projected answer at predicting the final answer.

    A layer that predicts a constant scores 0.5; when every final answer is the same the balanced
    agreement is undefined and the plain agreement is returned.
    """
    a = answers(margin)
    final = a[:, -1]
    if final.all() or not final.any():
        return (a == final[:, None]).mean(axis=0)
    tpr = a[final].mean(axis=0)
    tnr = (~a[~final]).mean(axis=0)
    return (tpr + tnr) / 2


def _first_clearing(bal: np.ndarray, floor: float) -> int:
    hit = np.flatnonzero(bal > floor)
    return int(hit[0]) if hit.size else len(bal)


def calibration_depth(margin, *, clusters=None, n_draws: int = 1000, rng: np.random.Generator,
                      floor: float = 0.5, level: float = 0.95) -> dict:
    """First layer whose balanced agreement with the final answer clears ``floor`` (the best constant).

    Returns ``{"layer", "low", "high", "n_draws"}``; the interval is the project's cluster (patient)
    percentile bootstrap (:func:`shovir_core.stats.cluster_bootstrap`): per layer, the counts of
    projected answers agreeing with a final yes and with a final no are summed per cluster, and each
    draw's depth is the first layer whose balanced agreement clears ``floor``. ``layer == n_layers + 1``
    means no layer clears it.
    """
    import pandas as pd

    from ..stats import cluster_bootstrap

    m = np.asarray(margin, dtype=float)
    observed = _first_clearing(balanced_agreement(m), floor)
    a = answers(m)
    final = a[:, -1]
    n_layers = a.shape[1]
    cols = {"pos": final.astype(float), "neg": (~final).astype(float)}
    for k in range(n_layers):
        cols[f"yes{k}"] = (a[:, k] & final).astype(float)
        cols[f"no{k}"] = (~a[:, k] & ~final).astype(float)
    frame = pd.DataFrame(cols).assign(_cluster=np.arange(len(m)) if clusters is None else np.asarray(clusters))

    def depth(s):
        pos, neg = np.asarray(s["pos"], dtype=float), np.asarray(s["neg"], dtype=float)
        yes = np.stack([np.asarray(s[f"yes{k}"], dtype=float) for k in range(n_layers)])
        no = np.stack([np.asarray(s[f"no{k}"], dtype=float) for k in range(n_layers)])
        with np.errstate(divide="ignore", invalid="ignore"):
            balanced = (yes / pos + no / neg) / 2
            plain = (yes + no) / (pos + neg)  # every final answer the same: plain agreement
        bal = np.where((pos > 0) & (neg > 0), balanced, plain)
        clears = bal > floor
        return {"depth": np.where(clears.any(axis=0), clears.argmax(axis=0), n_layers).astype(float)}

    res = cluster_bootstrap(frame, cluster="_cluster", sums={c: c for c in cols}, statistic=depth,
                            n_draws=n_draws, rng=rng, level=level)
    _, lo, hi = res.interval("depth")
    return {"layer": observed, "low": float(lo), "high": float(hi), "n_draws": int(n_draws)}


def settling_layer(margin) -> np.ndarray:
    """Per trial, the first layer from which the projected answer equals the final answer at every later layer."""
    a = answers(margin)
    same = a == a[:, -1:]
    # the last layer index where the answer differs from the final one, plus one
    differs = ~same
    last_diff = np.where(differs.any(axis=1), a.shape[1] - 1 - np.argmax(differs[:, ::-1], axis=1), -1)
    return last_diff + 1


def total_variation(margin_c, margin_d) -> np.ndarray:
    """Total variation between the two sides' two-way (yes/no) softmax distributions, per trial and layer."""
    pc = 1.0 / (1.0 + np.exp(-np.asarray(margin_c, float)))
    pd_ = 1.0 / (1.0 + np.exp(-np.asarray(margin_d, float)))
    return np.abs(pc - pd_)


def still_apart(margin_c, margin_d, *, threshold: float = 0.05) -> np.ndarray:
    """Per trial, whether the final-layer yes/no distributions differ by total variation > ``threshold``."""
    return total_variation(np.asarray(margin_c)[:, -1], np.asarray(margin_d)[:, -1]) > threshold

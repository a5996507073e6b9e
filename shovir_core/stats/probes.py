"""Frozen-protocol linear probes, a disjoint-cohort sampler, AURC and a clustered two-sided test (ModaLens App. N.3, Table 26).

ModaLens fits a linear probe (Alain and Bengio, 2016) on the residual stream at one layer under a
protocol frozen before the run: a configuration file whose SHA-256 (prefix ``a756e332``) is recorded
in every output and fixes the layer, the probe findings, the split rule (650 patients drawn with
seed 0 from the training pool, disjoint from the evaluation patients), the baseline values and the
test (two-sided, alpha = 0.05, patient-clustered bootstrap, equality rejected when the interval on the
difference excludes zero). Saliency baselines are scored by the area under the risk-coverage curve
(Geifman and El-Yaniv, 2017).

* :func:`config_sha256`, :class:`FrozenConfig`, :func:`frozen` -- the canonical-JSON SHA-256 of a
  configuration, recorded before a run and checked after it (a changed configuration raises
  :class:`FrozenConfigError`);
* :func:`disjoint_patients` -- a seeded sample of patients outside an excluded set;
* :func:`fit_probe` -- a scikit-learn ``LogisticRegression`` (standardised features) with
  patient-grouped out-of-fold scores and the probe refitted on every row (to be applied frozen);
* :func:`risk_coverage`, :func:`aurc` -- selective risk when the rows with the lowest scores are kept
  first (ties averaged), and its area;
* :func:`clustered_difference_test` -- a statistic on resampled patients minus a fixed baseline,
  with its percentile interval and the two-sided decision.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .bootstrap import draw_counts, percentile_interval
from ..errors import ShovirError

__all__ = ["FrozenConfigError", "config_sha256", "FrozenConfig", "frozen", "disjoint_patients", "fit_probe",
           "risk_coverage", "aurc", "auroc", "stratified_auroc", "clustered_difference_test"]


class FrozenConfigError(ShovirError, RuntimeError):
    """A frozen configuration changed between the start and the end of a run."""


def config_sha256(config: Mapping) -> str:
    """SHA-256 of ``config`` as canonical JSON (sorted keys, no whitespace, ASCII).

    >>> config_sha256({"b": 1, "a": [1, 2]}) == config_sha256({"a": [1, 2], "b": 1})
    True
    """
    try:
        text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"config_sha256: the configuration is not plain JSON ({e})") from None
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class FrozenConfig:
    """A configuration and the SHA-256 recorded for it when it was frozen."""

    config: dict
    sha256: str

    @classmethod
    def freeze(cls, config: Mapping) -> "FrozenConfig":
        snapshot = json.loads(json.dumps(config))
        return cls(snapshot, config_sha256(snapshot))

    @property
    def prefix(self) -> str:
        """The first 8 hex digits (the paper quotes its protocol by such a prefix)."""
        return self.sha256[:8]

    def check(self, config: Mapping) -> None:
        """Raise :class:`FrozenConfigError` unless ``config`` hashes to the recorded SHA-256."""
        now = config_sha256(config)
        if now != self.sha256:
            changed = sorted(k for k in set(self.config) | set(config) if self.config.get(k) != config.get(k))
            raise FrozenConfigError(f"frozen configuration {self.prefix} changed during the run (now {now[:8]}); "
                                    f"keys changed: {changed}")


@contextmanager
def frozen(config: dict):
    """Freeze ``config`` (its SHA-256 recorded) for the body, and check after it that it did not change.

    >>> cfg = {"layer": 20}
    >>> with frozen(cfg) as f:
    ...     pass
    >>> f.check(cfg)
    """
    f = FrozenConfig.freeze(config)
    yield f
    f.check(config)


def disjoint_patients(pool: Iterable, *, exclude: Iterable, n: int, seed: int) -> tuple[list[str], dict]:
    """``n`` patients drawn with ``numpy.random.default_rng(seed)`` from ``pool`` minus ``exclude`` (sorted).

    Returns the sorted sample and the counts ``n_pool``, ``n_excluded`` (pool patients excluded) and
    ``n_available``; more patients than available raise ``ValueError``.
    """
    pool_set = sorted({str(p) for p in pool})
    ex = {str(p) for p in exclude}
    available = [p for p in pool_set if p not in ex]
    if not 1 <= int(n) <= len(available):
        raise ValueError(f"disjoint_patients: n = {n} but {len(available)} patients are available "
                         f"({len(pool_set)} in the pool, {len(pool_set) - len(available)} excluded)")
    rng = np.random.default_rng(int(seed))
    pick = sorted(rng.choice(np.array(available, dtype=object), size=int(n), replace=False).tolist())
    return pick, {"n_pool": len(pool_set), "n_excluded": len(pool_set) - len(available), "n_available": len(available)}


def fit_probe(X: np.ndarray, y: np.ndarray, *, groups: np.ndarray, n_folds: int = 5, C: float = 1.0, seed: int = 0):
    """A linear probe: ``(pipeline fitted on every row, out-of-fold positive-class scores)``.

    The pipeline is ``StandardScaler`` + ``LogisticRegression(C=C)`` (lbfgs, deterministic); the
    out-of-fold scores come from ``StratifiedGroupKFold(n_folds, shuffle=True, random_state=seed)``
    over ``groups`` (patients), so no patient is scored by a probe that saw it.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = np.asarray(X, dtype=float)
    y = np.asarray(y).astype(int)
    groups = np.asarray(groups)
    if X.ndim != 2 or len(X) != len(y) or len(y) != len(groups):
        raise ValueError(f"fit_probe: need X (n, d), y (n,), groups (n,); got {X.shape}, {y.shape}, {groups.shape}")
    if set(np.unique(y)) != {0, 1}:
        raise ValueError(f"fit_probe: y must hold both classes 0 and 1, got {sorted(set(np.unique(y)))}")

    def make():
        return make_pipeline(StandardScaler(), LogisticRegression(C=float(C), max_iter=2000))

    oof = np.full(len(y), np.nan)
    folds = StratifiedGroupKFold(n_splits=int(n_folds), shuffle=True, random_state=int(seed))
    for train, test in folds.split(X, y, groups):
        if len(np.unique(y[train])) < 2:
            raise ValueError("fit_probe: a training fold holds one class only; use fewer folds")
        oof[test] = make().fit(X[train], y[train]).predict_proba(X[test])[:, 1]
    return make().fit(X, y), oof


def risk_coverage(scores: np.ndarray, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coverage ``k / n`` and selective risk (mean loss of the ``k`` lowest-score rows), ``k = 1 .. n``.

    Rows with equal scores are kept together: within a tie the loss is the tie's mean (the expected
    risk over the tie's orders).
    """
    s = np.asarray(scores, dtype=float)
    loss = np.asarray(losses, dtype=float)
    if s.shape != loss.shape or s.ndim != 1 or not len(s):
        raise ValueError(f"risk_coverage: need two equal 1-D non-empty arrays, got {s.shape}, {loss.shape}")
    if not np.isfinite(s).all():
        raise ValueError("risk_coverage: scores must be finite")
    order = np.argsort(s, kind="mergesort")
    s, loss = s[order], loss[order]
    _, inverse = np.unique(s, return_inverse=True)
    tie_mean = np.bincount(inverse, weights=loss) / np.bincount(inverse)
    loss = tie_mean[inverse]
    k = np.arange(1, len(s) + 1)
    return k / len(s), np.cumsum(loss) / k


def aurc(scores: np.ndarray, losses: np.ndarray) -> float:
    """Area under the risk-coverage curve (Geifman and El-Yaniv, 2017): mean selective risk over ``k = 1 .. n``.

    A higher score means "more likely a loss" (abstain first); lower AURC is better.

    >>> aurc(np.array([0.1, 0.2, 0.9]), np.array([0, 0, 1]))  # (0/1 + 0/2 + 1/3) / 3
    0.1111111111111111
    """
    return float(risk_coverage(scores, losses)[1].mean())


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve; NaN when ``labels`` hold one class only.

    The Mann–Whitney form: the mean rank of the positives among all scores (ties share their mean
    rank, ``scipy.stats.rankdata``), which equals scikit-learn's ``roc_auc_score`` including ties
    (tests/test_stats_probes.py checks) without its per-call input validation (thousands of calls per
    App. N record). The positive class is the larger label, as in scikit-learn.

    >>> auroc(np.array([0.1, 0.4, 0.4, 0.8]), np.array([0, 0, 1, 1]))  # one tie across the classes
    0.875
    """
    y = np.asarray(labels).astype(int).ravel()
    s = np.asarray(scores, dtype=float).ravel()
    if s.shape != y.shape:
        raise ValueError(f"auroc: {s.size} scores for {y.size} labels")
    if not np.isfinite(s).all():
        raise ValueError("auroc: scores hold NaN or infinity")
    classes = np.unique(y)
    if len(classes) < 2:
        return float("nan")
    if len(classes) > 2:
        raise ValueError(f"auroc: labels hold {len(classes)} classes, not two")
    positive = y == classes[1]
    n_pos = int(positive.sum())
    n_neg = y.size - n_pos
    rank_sum = float(_average_ranks(s)[positive].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """``scipy.stats.rankdata(x)`` (ties share their mean rank) for finite 1-D ``x``: the same algorithm
    without its array-API dispatch, a third of a bootstrap draw of Table 26 (the ranks are half-integers,
    exact in float64, so any sum of them is the same; a test compares with scipy).

    >>> _average_ranks(np.array([0.4, 0.1, 0.4, 0.8]))
    array([2.5, 1. , 2.5, 4. ])
    """
    sorter = np.argsort(x)
    inverse = np.empty(sorter.size, dtype=np.intp)
    inverse[sorter] = np.arange(sorter.size)
    ordered = x[sorter]
    first = np.r_[True, ordered[1:] != ordered[:-1]]
    dense = first.cumsum()[inverse]
    bounds = np.r_[np.nonzero(first)[0], len(first)]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def stratified_auroc(scores: np.ndarray, labels: np.ndarray, strata: np.ndarray) -> float:
    """AUROC within each stratum (e.g. question), averaged with weights = stratum size, over strata with both classes.

    Scores compared only inside a stratum cannot discriminate by the stratum itself (on the
    one-question design, by which question was asked). NaN when no stratum has both classes.
    """
    s, y, g = np.asarray(scores, dtype=float), np.asarray(labels).astype(int), np.asarray(strata)
    total, weight = 0.0, 0
    order = np.argsort(g, kind="stable")  # the strata in sorted order, each stratum's rows in their order
    _, starts = np.unique(g[order], return_index=True)
    for rows in np.split(order, starts[1:]):
        if len(np.unique(y[rows])) == 2:
            total += auroc(s[rows], y[rows]) * len(rows)
            weight += len(rows)
    return total / weight if weight else float("nan")


def clustered_difference_test(clusters: np.ndarray, statistic: Callable[[np.ndarray], float], *, baseline: float,
                              n_draws: int, seed: int, alpha: float = 0.05) -> dict:
    """Two-sided test of ``statistic - baseline`` with a cluster (patient) bootstrap.

    ``statistic(rows)`` evaluates the statistic on the row indices ``rows`` (with repeats); each draw
    resamples clusters with replacement (:func:`shovir_core.stats.bootstrap.draw_counts`) and takes
    every row of a drawn cluster as often as it is drawn. ``baseline`` is a fixed constant (the
    frozen test-split value). Equality is rejected when the ``1 - alpha`` percentile interval of the
    difference excludes zero. Returns ``estimate``, ``lo``, ``hi`` (of the statistic), ``diff``,
    ``diff_lo``, ``diff_hi``, ``rejects``, ``n_draws``, ``seed``, ``n_clusters``.
    """
    clusters = np.asarray(clusters)
    if not len(clusters):
        raise ValueError("clustered_difference_test: no rows")
    if not 0 < alpha < 1:
        raise ValueError(f"clustered_difference_test: alpha must be in (0, 1), got {alpha}")
    codes, inverse = np.unique(clusters, return_inverse=True)
    rng = np.random.default_rng(int(seed))
    counts = draw_counts(len(codes), n_draws=int(n_draws), rng=rng)
    rows = np.arange(len(clusters))
    draws = np.array([statistic(np.repeat(rows, c[inverse])) for c in counts], dtype=float)
    est = float(statistic(rows))
    lo, hi = percentile_interval(draws, level=1 - alpha)
    d_lo, d_hi = lo - float(baseline), hi - float(baseline)
    return {"estimate": est, "lo": lo, "hi": hi, "diff": est - float(baseline), "diff_lo": d_lo, "diff_hi": d_hi,
            "rejects": bool(d_lo > 0 or d_hi < 0), "n_draws": int(n_draws), "seed": int(seed),
            "n_clusters": int(len(codes)), "baseline": float(baseline)}


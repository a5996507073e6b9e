"""Vectorised patient-clustered percentile bootstrap.

A draw resamples clusters (patients) with replacement and keeps every trial of a
sampled cluster, with multiplicity. Every statistic of the two papers is a
function of sums over trials (counts of flips, of correct answers, of trials...),
so a draw is fully described by how many times it takes each cluster:

1. per-cluster sufficient statistics ``S`` (clusters × sums), computed once;
2. a (draws × clusters) count matrix ``C``, each row ~ Multinomial(K, 1/K);
3. the resampled sums of every draw at once, ``T = C @ S`` (draws × sums);
4. statistics — rates, paired differences, ratios — evaluated on ``T`` inside
   each draw, so a difference's interval comes from the differences' draws.

Strata (e.g. the ModaLens chronology strata) are scored on the same ``C``;
joint resampling of clusters × substitute seed splits each cluster's count
across the seeds by a second multinomial draw. Generators are explicit and
their seed is recorded in the result.

References
----------
Efron B., Tibshirani R., "An Introduction to the Bootstrap", 1993 (percentile
interval); Field C. A., Welsh A. H., "Bootstrapping clustered data", JRSS-B 2007.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = [
    "draw_counts", "split_counts", "cluster_sums", "percentile_interval", "BootstrapResult",
    "cluster_bootstrap", "item_bootstrap", "generator_seed",
]

Statistic = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def generator_seed(rng: np.random.Generator):
    """The entropy of ``rng``'s seed sequence (what to record so the run can be replayed)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    seq = getattr(rng.bit_generator, "seed_seq", None)
    entropy = getattr(seq, "entropy", None)
    if isinstance(entropy, (int, np.integer)):
        return int(entropy)
    return None if entropy is None else [int(e) for e in np.atleast_1d(entropy)]


def draw_counts(n_clusters: int, *, n_draws: int, rng: np.random.Generator,
                chunk_cells: int = 4_000_000) -> np.ndarray:
    """(draws × clusters) multiplicities: each row ~ Multinomial(n_clusters, uniform).

    Row ``b`` says how many times draw ``b`` takes each cluster; rows sum to
    ``n_clusters``. The rows are drawn as bincounts of ``n_clusters`` uniform
    cluster indices — exactly the multinomial distribution, and several times
    faster than ``Generator.multinomial`` — in chunks of at most ``chunk_cells``
    indices to bound memory.
    """
    if n_clusters < 1 or n_draws < 1:
        raise ValueError(f"need n_clusters >= 1 and n_draws >= 1, got {n_clusters}, {n_draws}")
    generator_seed(rng)
    counts = np.empty((n_draws, n_clusters), dtype=np.int32)
    step = max(1, chunk_cells // n_clusters)
    for start in range(0, n_draws, step):
        m = min(step, n_draws - start)
        idx = rng.integers(0, n_clusters, size=(m, n_clusters))
        idx += (np.arange(m) * n_clusters)[:, None]
        counts[start:start + m] = np.bincount(idx.ravel(), minlength=m * n_clusters).reshape(m, n_clusters)
    return counts


def split_counts(counts: np.ndarray, n_parts: int, *, rng: np.random.Generator) -> np.ndarray:
    """Split every count uniformly over ``n_parts`` (e.g. substitute seeds): (draws × clusters × parts).

    Each copy of a sampled cluster independently gets one part, so the parts of a
    count are Multinomial(count, 1/n_parts).
    """
    if n_parts < 1:
        raise ValueError(f"n_parts must be >= 1, got {n_parts}")
    out = np.empty(counts.shape + (n_parts,), dtype=np.int64)
    remaining = counts.astype(np.int64)
    for j in range(n_parts - 1):  # sequential binomials: exact multinomial split
        out[..., j] = rng.binomial(remaining, 1.0 / (n_parts - j))
        remaining = remaining - out[..., j]
    out[..., -1] = remaining
    return out


def cluster_sums(values, clusters) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster column sums.

    Parameters
    ----------
    values : (n,) or (n, k) array-like
        Per-trial quantities to sum.
    clusters : (n,) array-like
        Cluster label of each trial.

    Returns
    -------
    labels : ndarray
        The sorted unique cluster labels (K,).
    sums : ndarray
        (K, k) float sums, rows in the order of ``labels``.
    """
    v = np.asarray(values, dtype=float)
    v = v[:, None] if v.ndim == 1 else v
    labels, codes = np.unique(np.asarray(clusters), return_inverse=True)
    if len(codes) != len(v):
        raise ValueError(f"{len(v)} value rows but {len(codes)} cluster labels")
    if np.isnan(v).any():
        raise ValueError("values to sum contain NaN; drop or fill those trials first")
    sums = np.column_stack([np.bincount(codes, weights=v[:, j], minlength=len(labels)) for j in range(v.shape[1])])
    return labels, sums


def percentile_interval(draws: np.ndarray, *, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap draws (NaN draws — undefined ratios — are ignored)."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    d = np.asarray(draws, dtype=float)
    if np.isnan(d).all():
        return float("nan"), float("nan")
    alpha = (1.0 - level) / 2.0
    lo, hi = np.nanquantile(d, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


@dataclass
class BootstrapResult:
    """Point estimates, percentile intervals and the draws of a clustered bootstrap.

    Attributes
    ----------
    table : DataFrame
        One row per (stratum, statistic): ``estimate``, ``lo``, ``hi``,
        ``n_undefined`` (draws where the statistic is NaN), ``n_clusters``.
    draws : dict
        ``(stratum, statistic) -> (n_draws,)`` array; stratum is ``None`` without strata.
    n_draws, level, seed, unit : as requested; ``seed`` is the generator's entropy.
    """

    table: pd.DataFrame
    draws: dict[tuple[Hashable, str], np.ndarray] = field(repr=False)
    estimates: dict[tuple[Hashable, str], float] = field(repr=False)
    n_draws: int = 0
    level: float = 0.95
    seed: object = None
    unit: str = ""

    def interval(self, statistic: str, stratum: Hashable = None) -> tuple[float, float, float]:
        """``(estimate, lo, hi)`` of one statistic."""
        key = (stratum, statistic)
        if key not in self.draws:
            raise KeyError(f"no statistic {statistic!r} for stratum {stratum!r}; have {sorted(map(str, self.draws))}")
        lo, hi = percentile_interval(self.draws[key], level=self.level)
        return self.estimates[key], lo, hi

    def contrast(self, statistic: str, stratum_a: Hashable, stratum_b: Hashable, *,
                 kind: str = "difference") -> tuple[float, float, float]:
        """Difference (a − b) or ratio (a / b) of one statistic between two strata, on the same draws."""
        ea, eb = self.estimates[(stratum_a, statistic)], self.estimates[(stratum_b, statistic)]
        da, db = self.draws[(stratum_a, statistic)], self.draws[(stratum_b, statistic)]
        if kind == "difference":
            est, d = ea - eb, da - db
        elif kind == "ratio":
            with np.errstate(divide="ignore", invalid="ignore"):
                est = ea / eb if eb else float("nan")
                d = np.where(db != 0, da / np.where(db != 0, db, 1.0), np.nan)
        else:
            raise ValueError(f"kind must be 'difference' or 'ratio', got {kind!r}")
        lo, hi = percentile_interval(d, level=self.level)
        return float(est), lo, hi

    def provenance(self) -> dict:
        """What a run record should store about this bootstrap."""
        return {"n_draws": self.n_draws, "level": self.level, "seed": self.seed, "unit": self.unit,
                "method": "clustered percentile bootstrap (multinomial count matrix)"}


def _sum_columns(data: pd.DataFrame, sums: Mapping[str, str | float | int]) -> np.ndarray:
    if not sums:
        raise ValueError("sums is empty: name the per-trial quantities the statistic needs")
    cols = []
    for name, spec in sums.items():
        if isinstance(spec, str):
            if spec not in data.columns:
                raise ValueError(f"sum {name!r}: data has no column {spec!r}")
            col = pd.to_numeric(data[spec], errors="raise").to_numpy(dtype=float)
            if np.isnan(col).any():
                raise ValueError(f"sum {name!r}: column {spec!r} has {int(np.isnan(col).sum())} missing values")
            cols.append(col)
        elif isinstance(spec, (int, float, np.number)):
            cols.append(np.full(len(data), float(spec)))
        else:
            raise TypeError(f"sum {name!r}: give a column name or a constant, got {type(spec).__name__}")
    return np.column_stack(cols)


def _evaluate(statistic: Statistic, names: Sequence[str], totals: np.ndarray) -> dict[str, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = statistic({n: totals[..., j] for j, n in enumerate(names)})
    if not isinstance(out, Mapping) or not out:
        raise TypeError("statistic must return a non-empty mapping name -> array")
    return {k: np.broadcast_to(np.asarray(v, dtype=float), totals.shape[:-1]) for k, v in out.items()}


def cluster_bootstrap(data: pd.DataFrame, *, cluster: str, sums: Mapping[str, str | float],
                      statistic: Statistic, n_draws: int = 10_000, rng: np.random.Generator,
                      level: float = 0.95, strata: str | None = None,
                      substitute: str | None = None) -> BootstrapResult:
    """Patient-clustered percentile bootstrap of statistics built from sums over trials.

    Parameters
    ----------
    data : DataFrame
        One row per trial.
    cluster : str
        Column with the resampling unit (``"patient_id"``).
    sums : mapping
        Name -> column (summed per cluster) or constant (``{"n": 1}`` counts trials).
    statistic : callable
        Maps a dict of summed arrays (keys of ``sums``) to a dict of statistics;
        must be vectorised (it gets the (n_draws,) arrays of all draws at once).
        See :mod:`shovir_core.stats.statistics` for ready-made ones.
    n_draws : int
        Bootstrap draws (10,000 for the papers' headline intervals).
    rng : numpy.random.Generator
        The only source of randomness; its seed is recorded in the result.
    level : float
        Interval level (0.95 -> 2.5th / 97.5th percentiles).
    strata : str, optional
        Column whose levels are scored separately on the same draws.
    substitute : str, optional
        Column with the substitute seed; each sampled cluster copy also draws one
        seed uniformly (joint resampling of clusters × substitute seed). The point
        estimate pools all seeds.

    Returns
    -------
    BootstrapResult

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from shovir_core.stats import paired_rates
    >>> df = pd.DataFrame({"patient": [1, 1, 2, 3, 3, 4], "flip_A": [1, 0, 1, 0, 1, 1],
    ...                    "flip_P": [0, 0, 1, 0, 0, 0]})
    >>> res = cluster_bootstrap(df, cluster="patient", sums={"n": 1, "a": "flip_A", "p": "flip_P"},
    ...                         statistic=paired_rates("a", "p", den="n"), n_draws=500,
    ...                         rng=np.random.default_rng(0))
    >>> round(res.interval("diff")[0], 3)
    0.5
    """
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a DataFrame, got {type(data).__name__}")
    if data.empty:
        raise ValueError("data has no trials")
    for col in (cluster, strata, substitute):
        if col is not None and col not in data.columns:
            raise ValueError(f"data has no column {col!r}")
    if data[cluster].isna().any():
        raise ValueError(f"column {cluster!r} has missing cluster ids")
    seed = generator_seed(rng)
    names = list(sums)
    values = _sum_columns(data, sums)
    ccodes, clusters = pd.factorize(data[cluster], sort=True)
    K = len(clusters)
    if strata is not None:
        if data[strata].isna().any():
            raise ValueError(f"column {strata!r} has missing strata")
        scodes, levels = pd.factorize(data[strata], sort=True)
        stratum_keys = list(levels)
    else:
        stratum_keys, scodes = [None], np.zeros(len(data), dtype=int)
    if substitute is not None:
        if data[substitute].isna().any():
            raise ValueError(f"column {substitute!r} has missing substitute seeds")
        dcodes, seeds = pd.factorize(data[substitute], sort=True)
    else:
        seeds, dcodes = [0], np.zeros(len(data), dtype=int)
    n_s, n_d, k = len(stratum_keys), len(seeds), len(names)
    # per-cluster sufficient statistics: (K, seeds, strata * k)
    flat = (ccodes * n_d + dcodes) * n_s + scodes
    S = np.zeros((K * n_d * n_s, k))
    for j in range(k):
        S[:, j] = np.bincount(flat, weights=values[:, j], minlength=K * n_d * n_s)
    S = S.reshape(K, n_d, n_s * k)
    counts = draw_counts(K, n_draws=n_draws, rng=rng)
    if n_d > 1:
        parts = split_counts(counts, n_d, rng=rng).astype(float)           # (B, K, seeds)
        T = np.einsum("bkd,kdj->bj", parts, S, optimize=True)
    else:
        T = counts.astype(float) @ S[:, 0, :]                               # (B, strata*k)
    T = T.reshape(n_draws, n_s, k)
    total = S.sum(axis=(0, 1)).reshape(n_s, k)
    draws, estimates, rows = {}, {}, []
    for i, key in enumerate(stratum_keys):
        est = _evaluate(statistic, names, total[i][None, :])
        drw = _evaluate(statistic, names, T[:, i, :])
        n_clusters = int(len(np.unique(ccodes[scodes == i])))
        for stat, d in drw.items():
            draws[(key, stat)] = np.asarray(d, dtype=float)
            estimates[(key, stat)] = float(est[stat][0])
            lo, hi = percentile_interval(d, level=level)
            rows.append({"stratum": key, "statistic": stat, "estimate": estimates[(key, stat)],
                         "lo": lo, "hi": hi, "n_undefined": int(np.isnan(d).sum()), "n_clusters": n_clusters})
    table = pd.DataFrame(rows)
    if strata is None:
        table = table.drop(columns="stratum")
    return BootstrapResult(table=table, draws=draws, estimates=estimates, n_draws=n_draws, level=level,
                           seed=seed, unit=cluster + (f" x {substitute}" if substitute else ""))


def item_bootstrap(data: pd.DataFrame, *, sums: Mapping[str, str | float], statistic: Statistic,
                   n_draws: int = 10_000, rng: np.random.Generator, level: float = 0.95,
                   item: str | None = None, strata: str | None = None) -> BootstrapResult:
    """Item-level percentile bootstrap (ShoViR flip-rate intervals).

    Resamples items — the rows of ``data``, or the levels of column ``item`` (e.g.
    ``"image_id"`` when rows are image × class pairs) — with replacement.
    """
    if item is None:
        data = data.assign(_item=np.arange(len(data)))
        item = "_item"
    res = cluster_bootstrap(data, cluster=item, sums=sums, statistic=statistic, n_draws=n_draws,
                            rng=rng, level=level, strata=strata)
    res.unit = "row" if item == "_item" else item
    return res

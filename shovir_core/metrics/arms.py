"""The ModaLens arm statistics: answers of a trials frame under a readout, arms paired on their common
trials, flip indicators, and rates with patient-clustered intervals, their paired differences, ratios
and interactions computed inside each draw (ModaLens §2, "Prompt and readout"; §3, "Statistics"; the
appendix tables D, F, G, H, L, M, N, the text controls and §4.1 read them).

Arms are the ``trials`` frames of ``modalens`` records (one record per dataset, model and arm).
Readouts (App. I): ``lowercase`` (argmax of the lowercase ``yes``/``no`` logits; columns
``readout_c``/``readout_d``), ``family`` (log-sum-exp of the token families; ``family_readout_*``) and
``generated`` (the parsed greedy answer; ``answer_*``). Under ``generated`` a trial counts only when the
answer on both images -- and, for paired arms, in both arms -- opens with Yes or No.

Intervals are patient-clustered percentile bootstraps (:func:`shovir_core.stats.cluster_bootstrap`,
:func:`shovir_core.stats.bootstrap_rates`); every call draws from ``numpy.random.default_rng(seed)``,
so comparisons on the same patients share their resamples. The tables that show these numbers live in
``shovir_core.tables``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import vocab
from ..stats import bootstrap_rates, cluster_bootstrap

__all__ = [
    "READOUT_COLUMNS", "check_trials", "answers", "pair_arms", "paired_trials", "patient_bootstrap",
    "rate_interval", "compare_arms", "flip_frame", "put_interval", "flip_rate_rows", "FlipRates",
]

READOUT_COLUMNS: dict[str, str] = dict(zip(vocab.READOUTS, ("readout", "family_readout", "answer")))
"""Readout name (:data:`shovir_core.vocab.READOUTS`) -> column stem (``<stem>_c`` / ``<stem>_d``)."""

_YES = {"yes", "Yes"}
_SCOREABLE = {"Yes", "No"}


def check_trials(trials: pd.DataFrame, what: str) -> None:
    """Raise unless ``trials`` is a non-empty trials frame of a ``modalens`` record (``what`` names the caller)."""
    if not isinstance(trials, pd.DataFrame) or trials.empty:
        raise ValueError(f"{what}: expected a non-empty trials frame of a modalens record")
    for col in ("trial_id", "patient_id", "case_id", "finding"):
        if col not in trials.columns:
            raise ValueError(f"{what}: trials lack column {col!r} (not a modalens record?)")


def answers(trials: pd.DataFrame, readout: str = "lowercase") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Binary answers on the source (``c``) and substitute (``d``) image and a validity mask.

    Returns ``(yes_c, yes_d, valid)``: 1 = yes, 0 = no; ``valid`` is False where a generated answer
    is unscoreable (or missing) on either side (always True for logit readouts).
    """
    if readout not in READOUT_COLUMNS:
        raise ValueError(f"unknown readout {readout!r}; use one of {sorted(READOUT_COLUMNS)}")
    stem = READOUT_COLUMNS[readout]
    cols = (f"{stem}_c", f"{stem}_d")
    missing = [c for c in cols if c not in trials.columns]
    if missing:
        raise ValueError(f"trials lack readout columns {missing}")
    c, d = trials[cols[0]], trials[cols[1]]
    if readout == "generated":
        valid = (c.isin(_SCOREABLE) & d.isin(_SCOREABLE)).to_numpy()
    else:
        valid = np.ones(len(trials), dtype=bool)
    return c.isin(_YES).to_numpy().astype(float), d.isin(_YES).to_numpy().astype(float), valid


def pair_arms(*arms: pd.DataFrame, names: Sequence[str] | None = None) -> list[pd.DataFrame]:
    """The arms restricted to their common trial ids, in one order (raises when they share none)."""
    if len(arms) < 2:
        raise ValueError("pair_arms needs at least two arms")
    names = list(names or [f"arm {i}" for i in range(len(arms))])
    for a, n in zip(arms, names):
        check_trials(a, f"pair_arms ({n})")
        if a["trial_id"].duplicated().any():
            raise ValueError(f"pair_arms ({n}): duplicate trial ids")
    ids = [pd.Index(a["trial_id"].to_numpy(dtype=object)) for a in arms]
    common = ids[0]
    for other in ids[1:]:
        common = common.intersection(other)
    if common.empty:
        raise ValueError(f"pair_arms: the arms {names} share no trial")
    order = np.sort(common.to_numpy(dtype=object))  # Python's order of the ids, as sorted() gives
    # each arm's rows by position (a label lookup, ``.loc[order]``, took a tenth of the demo's ModaLens tables
    # records and notebooks), ``trial_id`` first as ``set_index(...).reset_index()`` leaves it; an arm already
    # in that order is not copied (pandas' copy-on-write copies it when a caller changes it)
    return [_in_order(a, i.get_indexer(order)) for a, i in zip(arms, ids)]


def _in_order(trials: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    out = trials if np.array_equal(rows, np.arange(len(trials))) else trials.take(rows)
    if out.columns[0] != "trial_id":
        out = out[["trial_id", *(c for c in out.columns if c != "trial_id")]]
    return out.reset_index(drop=True)


def paired_trials(arms: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The arms restricted to their common trial ids, in one order (:func:`pair_arms`)."""
    names = list(arms)
    if len(names) == 1:
        return {names[0]: arms[names[0]].sort_values("trial_id").reset_index(drop=True)}
    return dict(zip(names, pair_arms(*arms.values(), names=names)))


def patient_bootstrap(frame: pd.DataFrame, sums: dict, statistic, *, n_draws: int, seed: int):
    """:func:`shovir_core.stats.cluster_bootstrap` over ``patient_id`` on ``numpy.random.default_rng(seed)``."""
    return cluster_bootstrap(frame, cluster="patient_id", sums=sums, statistic=statistic, n_draws=n_draws,
                             rng=np.random.default_rng(seed))


def rate_interval(trials: pd.DataFrame, indicator: np.ndarray, *, n_draws: int, seed: int,
                  valid: np.ndarray | None = None) -> dict[str, float]:
    """Mean of a per-trial indicator with its patient-clustered interval."""
    valid = np.ones(len(trials), dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    frame = pd.DataFrame({"patient_id": trials["patient_id"].to_numpy()[valid],
                          "x": np.asarray(indicator, dtype=float)[valid]})
    if frame.empty:
        return {"estimate": float("nan"), "lo": float("nan"), "hi": float("nan"), "n": 0, "sum": 0.0}
    res = patient_bootstrap(frame, {"n": 1, "x": "x"}, lambda s: {"rate": s["x"] / s["n"]}, n_draws=n_draws, seed=seed)
    est, lo, hi = res.interval("rate")
    return {"estimate": est, "lo": lo, "hi": hi, "n": int(len(frame)), "sum": float(frame["x"].sum())}


def compare_arms(arm_1: pd.DataFrame, arm_2: pd.DataFrame, *, readout: str = "lowercase",
                 readout_2: str | None = None, n_draws: int, seed: int) -> dict[str, float]:
    """Flip rates of two arms on their common trials, with paired difference and ratio (1 vs 2).

    Returns ``fr_1, fr_2`` (with ``_lo``/``_hi``), ``diff`` = fr_1 − fr_2 and ``ratio`` = fr_1 / fr_2
    (with intervals), ``flips_1``, ``flips_2``, ``n_trials`` (scoreable in both arms), ``n_excluded``,
    ``n_patients``, ``n_draws``, ``seed``. With no scoreable trial every rate is NaN and ``n_trials`` 0.
    """
    a, b = pair_arms(arm_1, arm_2, names=["arm 1", "arm 2"])
    ya_c, ya_d, va = answers(a, readout)
    yb_c, yb_d, vb = answers(b, readout_2 or readout)
    valid = va & vb
    frame = pd.DataFrame({"patient_id": a["patient_id"].to_numpy()[valid],
                          "f1": (ya_c != ya_d)[valid].astype(float), "f2": (yb_c != yb_d)[valid].astype(float)})
    if frame.empty:  # e.g. no generation opens with Yes or No: every rate is undefined
        out = {f"{s}{x}": float("nan") for s in ("fr_1", "fr_2", "diff", "ratio") for x in ("", "_lo", "_hi")}
        out.update({"flips_1": 0, "flips_2": 0, "n_trials": 0, "n_excluded": int((~valid).sum()),
                    "n_patients": 0, "n_draws": int(n_draws), "seed": int(seed)})
        return out
    # the one path for rates of arms and their contrasts (stats.bootstrap_rates, as flip_rate_rows):
    # the same arms and draws print the same interval on every page
    res = bootstrap_rates(frame, rates={"fr_1": "f1", "fr_2": "f2"},
                          contrasts={"diff": ("diff", "fr_1", "fr_2"), "ratio": ("ratio", "fr_1", "fr_2")},
                          n_draws=n_draws, seed=seed)
    out: dict[str, float] = {}
    for stat in ("fr_1", "fr_2", "diff", "ratio"):
        est, lo, hi = res[stat]
        out.update({stat: est, f"{stat}_lo": lo, f"{stat}_hi": hi})
    out.update({"flips_1": int(frame["f1"].sum()), "flips_2": int(frame["f2"].sum()),
                "n_trials": int(len(frame)), "n_excluded": int((~valid).sum()),
                "n_patients": int(frame["patient_id"].nunique()), "n_draws": int(n_draws), "seed": int(seed)})
    return out


def flip_frame(arms: Mapping[str, pd.DataFrame], *, readout: str | Mapping[str, str] = "lowercase") -> pd.DataFrame:
    """One row per common trial scoreable in every arm: ids and ``flip__<arm>`` (1 = the answer moved).

    ``readout`` is one readout for all arms or a mapping arm -> readout. ``frame.attrs`` holds
    ``n_common`` (common trials) and ``n_excluded`` (of those, unscoreable in some arm).
    """
    paired = paired_trials(arms)
    first = next(iter(paired.values()))
    valid = np.ones(len(first), dtype=bool)
    flips = {}
    for name, t in paired.items():
        r = readout if isinstance(readout, str) else readout[name]
        yc, yd, v = answers(t, r)
        flips[name] = (yc != yd).astype(float)
        valid &= v
    keep = ["trial_id", "patient_id", "case_id", "finding"]
    out = first[keep].copy()
    for name, f in flips.items():
        out[f"flip__{name}"] = f
    out = out[valid].reset_index(drop=True)
    out.attrs.update(n_common=int(len(first)), n_excluded=int((~valid).sum()))
    return out


def put_interval(values: dict, key: str, interval: tuple[float, float, float], *, scale: float = 1.0) -> None:
    """``values[key]``, ``values[key_lo]``, ``values[key_hi]`` from ``(estimate, lo, hi)`` times ``scale``."""
    est, lo, hi = interval
    values[key], values[f"{key}_lo"], values[f"{key}_hi"] = scale * est, scale * lo, scale * hi


@dataclass(frozen=True)
class FlipRates:
    """What :func:`flip_rate_rows` returns: one row per arm, the glue values, each rate column's metric."""

    frame: pd.DataFrame
    values: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)


def flip_rate_rows(arms: Mapping[str, pd.DataFrame], *, reference: str | None = None,
                   readout: str | Mapping[str, str] = "lowercase", n_draws: int, seed: int, key: str,
                   pairs: Mapping[str, tuple[str, str]] | None = None,
                   interactions: Mapping[str, tuple[str, str, str, str]] | None = None) -> FlipRates:
    """Flip rate of every arm on their common trials, with paired differences and interactions.

    ``reference`` adds, per arm, the paired difference arm − reference. ``pairs`` maps a name to
    ``(a, b)`` for further differences a − b, ``interactions`` to ``(a, b, c, d)`` for
    (a − b) − (c − d). Values (keys under ``key``): ``<arm>.flip_rate`` (+``_lo``, ``_hi``),
    ``<arm>.flips``, ``<arm>.vs_<reference>.diff_pp`` (+ lo/hi), ``<name>.diff_pp`` and
    ``<name>.interaction_pp`` (+ lo/hi), ``n_trials``, ``n_patients``, ``n_excluded``. The rows (``frame``:
    arm, flip rate with its interval, flips, the difference to ``reference``, trials) and the metric of
    each rate column (``metrics``, for a table) come with them.
    """
    frame = flip_frame(arms, readout=readout)
    if frame.empty:
        raise ValueError(f"flip_rate_rows ({key}): no trial is scoreable in every arm")
    names = list(arms)
    if reference is not None and reference not in names:
        raise ValueError(f"flip_rate_rows ({key}): reference arm {reference!r} not in {names}")
    rates = {n: f"flip__{n}" for n in names}
    contrasts: dict[str, tuple] = {}
    if reference is not None:
        contrasts.update({f"{n}.vs_{reference}": ("diff", n, reference) for n in names if n != reference})
    for name, (a, b) in (pairs or {}).items():
        contrasts[name] = ("diff", a, b)
    for name, (a, b, c, d) in (interactions or {}).items():
        contrasts[f"{name}.interaction"] = ("interaction", a, b, c, d)
    res = bootstrap_rates(frame, rates=rates, contrasts=contrasts, n_draws=n_draws, seed=seed)
    values: dict = {}
    rows = []
    for n in names:
        put_interval(values, f"{key}.{n}.flip_rate", res[n])
        values[f"{key}.{n}.flips"] = int(frame[f"flip__{n}"].sum())
        row = {"arm": n, "flip_rate": res[n][0], "flip_rate_lo": res[n][1], "flip_rate_hi": res[n][2],
               "flips": int(frame[f"flip__{n}"].sum())}
        if reference is not None:
            c = res.get(f"{n}.vs_{reference}", (0.0, 0.0, 0.0))
            row.update({"diff": c[0], "diff_lo": c[1], "diff_hi": c[2]})
            if n != reference:
                put_interval(values, f"{key}.{n}.vs_{reference}.diff_pp", c, scale=100)
        rows.append(row)
    for name in (pairs or {}):
        put_interval(values, f"{key}.{name}.diff_pp", res[name], scale=100)
    for name in (interactions or {}):
        put_interval(values, f"{key}.{name}.interaction_pp", res[f"{name}.interaction"], scale=100)
    values.update({f"{key}.n_trials": int(len(frame)), f"{key}.n_patients": int(frame["patient_id"].nunique()),
                   f"{key}.n_excluded": int(frame.attrs["n_excluded"])})
    out = pd.DataFrame(rows)
    out["n_trials"] = int(len(frame))
    metrics = {"flip_rate": "flip_rate", "flip_rate_lo": "flip_rate_lo", "flip_rate_hi": "flip_rate_hi"}
    if reference is not None:
        metrics.update({"diff": "paired_diff", "diff_lo": "paired_diff_lo", "diff_hi": "paired_diff_hi"})
    return FlipRates(out, values, metrics)

"""ModaLens Appendix B: how far apart the two images are, and whether flips follow the distance.

Inputs are trial frames of ``modalens`` records (one-question trials, report present and absent)
and of a ``modalens-distance`` record of the same cohort (one row per case with both images'
vision embeddings, :mod:`shovir_core.protocols.modalens_distance`). Every function returns a
:class:`shovir_core.tables.result.TableResult`.

* :func:`ssim_summary` -- SSIM quartiles, maximum and the count above the threshold;
* :func:`pair_distances` / :func:`distance_summary` -- cosine distance between the mean-pooled
  vision-tower embeddings after centring on the cohort mean (the mean over the cohort's distinct
  images), its quartiles and its Spearman ρ with the absolute study-time gap;
* :func:`fr_by_quartile` -- the flip rate per distance quartile and arm, Q4 − Q1 with a
  patient-clustered interval;
* :func:`flip_regression` -- logistic regression of flip on z(distance) + label change + report
  presence over the pair-condition rows, patient cluster-robust standard errors (statsmodels),
  odds ratios, and the distance coefficient cross-checked against a patient-clustered bootstrap of
  the whole fit (:func:`shovir_core.stats.logistic.logistic_cluster_bootstrap`);
* :func:`planted_check` -- for ``ref-distance-planted``, the planted odds ratios (the logistic
  projection of its known flip probabilities on the same rows) beside the estimates.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats as _st

from ..metrics.arms import answers
from ..metrics.distance import centred_cosine_distance, cohort_mean, quartile_bins
from ..stats import cluster_bootstrap, logistic_regression_cluster_robust
from ..stats.logistic import design_matrices, fractional_logistic, logistic_cluster_bootstrap, logistic_fit
from .result import TableResult

__all__ = ["FORMULA", "MIN_CLUSTERS", "ssim_summary", "pair_distances", "distance_summary", "regression_rows", "fr_by_quartile",
           "flip_regression", "planted_check", "part_e", "PAPER_KEYS"]

FORMULA = "flip ~ z_distance + label_changed + report_present"
"""The App. B model: flip on standardised distance, label change and report presence."""

MIN_CLUSTERS = 30
"""Fewest patients on which the planted-distance validation judges the regression's patient cluster-robust
intervals: with few clusters they cover less often than stated (Cameron & Miller 2015, "A Practitioner's
Guide to Cluster-Robust Inference", J. Human Resources 50(2), §VI), so a miss would say nothing about the code."""

_TERMS = {"z_distance": "distance (per SD)", "label_changed": "label change", "report_present": "report present",
          "Intercept": "intercept"}


def _div(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)


# --------------------------------------------------------------------------- SSIM
_QUANTITY_LABELS = {
    "q1": "first quartile", "median": "median", "q3": "third quartile", "max": "maximum", "min": "minimum",
    "n_above": "pairs above the threshold", "share_above": "share of pairs above the threshold",
    "threshold": "rejection threshold", "n_pairs": "pairs", "size": "image side compared (px)",
    "raw_median": "median, uncentred", "n_images": "distinct images", "embedding_dim": "embedding dimension",
    "rho_gap": "Spearman ρ with the time gap", "rho_gap_p": "p-value of ρ with the time gap",
    "n_gap": "pairs with a time gap", "gap_unit": "time-gap unit", "rho_ssim": "Spearman ρ with SSIM",
}
"""Summary value key (after the ``ssim.`` / ``dist.`` prefix) -> the row label the table shows."""


def _summary_frame(values: dict) -> pd.DataFrame:
    keys = [k.split(".", 1)[1] for k in values]
    return pd.DataFrame({"quantity": [_QUANTITY_LABELS.get(k, k.replace("_", " ")) for k in keys],
                         "value": pd.Series(list(values.values()), dtype=object)})  # counts stay integers


def ssim_summary(trials: pd.DataFrame, *, threshold: float, size: int | None = None) -> TableResult:
    """SSIM of every pair (one row per case of a ``modalens`` record): quartiles, maximum, count > threshold."""
    if "ssim" not in trials.columns or "case_id" not in trials.columns:
        raise ValueError("ssim_summary: trials lack 'ssim' / 'case_id' (a modalens or modalens-distance record?)")
    s = trials.drop_duplicates("case_id")["ssim"].astype(float)
    if s.isna().any():
        raise ValueError("ssim_summary: some pairs have no SSIM")
    q1, q2, q3 = (float(v) for v in s.quantile([0.25, 0.5, 0.75]))
    values = {"ssim.q1": q1, "ssim.median": q2, "ssim.q3": q3, "ssim.max": float(s.max()), "ssim.min": float(s.min()),
              "ssim.n_above": int((s > threshold).sum()), "ssim.share_above": float((s > threshold).mean()),
              "ssim.threshold": float(threshold), "ssim.n_pairs": int(len(s))}
    if size is not None:
        values["ssim.size"] = int(size)
    frame = _summary_frame(values)
    return TableResult(frame, values, labels={"quantity": "SSIM", "value": "value"},
                       caption="SSIM between source and substitute images (App. B).")


# --------------------------------------------------------------------------- embedding distances
def pair_distances(distance_trials: pd.DataFrame) -> pd.DataFrame:
    """One row per case: centred and raw cosine distance of the pair's embeddings, gap, ids.

    The cohort mean is over the distinct images of the record (sources and substitutes, each once).
    """
    need = ["case_id", "patient_id", "image_id", "sub_image_id", "embedding_c", "embedding_d"]
    missing = [c for c in need if c not in distance_trials.columns]
    if missing:
        raise ValueError(f"pair_distances: trials lack {missing} (not a modalens-distance record?)")
    t = distance_trials.reset_index(drop=True)
    ec = np.stack([np.asarray(v, dtype=float) for v in t["embedding_c"]])
    ed = np.stack([np.asarray(v, dtype=float) for v in t["embedding_d"]])
    images = pd.concat([pd.DataFrame({"image_id": t["image_id"], "i": range(len(t)), "side": "c"}),
                        pd.DataFrame({"image_id": t["sub_image_id"], "i": range(len(t)), "side": "d"})])
    first = images.drop_duplicates("image_id")
    distinct = np.stack([ec[i] if s == "c" else ed[i] for i, s in zip(first["i"], first["side"])])
    mu = cohort_mean(distinct)
    out = pd.DataFrame({"case_id": t["case_id"], "patient_id": t["patient_id"],
                        "distance": centred_cosine_distance(ec, ed, mean=mu),
                        "distance_raw": centred_cosine_distance(ec, ed)})
    for col in ("pair_type", "tier", "ssim", "gap", "gap_unit"):
        if col in t.columns:
            out[col] = t[col].to_numpy()
    out.attrs["n_images"] = int(len(distinct))
    out.attrs["embedding_dim"] = int(ec.shape[1])
    return out


def distance_summary(distances: pd.DataFrame) -> TableResult:
    """Quartiles of the centred distance, its Spearman ρ with the absolute time gap (and with SSIM)."""
    d = distances["distance"].astype(float)
    values = {"dist.q1": float(d.quantile(0.25)), "dist.median": float(d.median()), "dist.q3": float(d.quantile(0.75)),
              "dist.min": float(d.min()), "dist.max": float(d.max()), "dist.n_pairs": int(len(d)),
              "dist.raw_median": float(distances["distance_raw"].median()),
              "dist.n_images": int(distances.attrs.get("n_images", 0)),
              "dist.embedding_dim": int(distances.attrs.get("embedding_dim", 0))}
    gap = distances["gap"].astype(float).abs() if "gap" in distances.columns else pd.Series(np.nan, index=d.index)
    ok = gap.notna()
    if ok.sum() >= 3 and gap[ok].nunique() > 1:
        rho, p = _st.spearmanr(d[ok], gap[ok])
        values.update({"dist.rho_gap": float(rho), "dist.rho_gap_p": float(p)})
    else:
        values.update({"dist.rho_gap": float("nan"), "dist.rho_gap_p": float("nan")})
    values["dist.n_gap"] = int(ok.sum())
    values["dist.gap_unit"] = str(distances["gap_unit"].iloc[0]) if "gap_unit" in distances.columns else "none"
    if "ssim" in distances.columns:
        values["dist.rho_ssim"] = float(_st.spearmanr(d, distances["ssim"].astype(float))[0])
    frame = _summary_frame(values)
    return TableResult(frame, values, labels={"quantity": "embedding distance", "value": "value"},
                       caption="Cosine distance of the two images' vision embeddings, cohort-mean-centred (App. B).")


# --------------------------------------------------------------------------- flips by distance
def regression_rows(arms: Mapping[str, pd.DataFrame], distances: pd.DataFrame, *,
                    readout: str = "lowercase") -> pd.DataFrame:
    """The pair-condition rows: one per (trial, arm) with ``flip``, ``z_distance``, ``label_changed``,
    ``report_present``, ``quartile``, ``patient_id``, ``case_id``.

    ``arms`` maps ``present`` / ``absent`` to one-question trials (one trial per case); both arms
    must hold the same cases, all of which the distance record covers. The distance is
    standardised over the cases (each once), so an odds ratio is per SD of the pair distance.
    """
    for k in ("present", "absent"):
        if k not in arms:
            raise ValueError(f"regression_rows: arm {k!r} missing (have {sorted(arms)})")
    dist = distances.set_index("case_id")
    cases = None
    parts = []
    for arm in ("present", "absent"):
        t = arms[arm]
        if t["case_id"].duplicated().any():
            raise ValueError(f"regression_rows: arm {arm!r} has several trials per case; pass one-question trials")
        if cases is None:
            cases = set(t["case_id"])
        elif set(t["case_id"]) != cases:
            raise ValueError("regression_rows: the two arms hold different cases")
        missing = sorted(set(t["case_id"]) - set(dist.index))
        if missing:
            raise ValueError(f"regression_rows: {len(missing)} case(s) lack a distance (e.g. {missing[0]!r}); "
                             "the distance record must be of the same cohort")
        yc, yd, valid = answers(t, readout)
        parts.append(pd.DataFrame({"case_id": t["case_id"].to_numpy(), "patient_id": t["patient_id"].to_numpy(),
                                   "flip": (yc != yd).astype(float), "valid": valid,
                                   "label_changed": t["label_changed"].to_numpy(dtype=float),
                                   "report_present": 1.0 if arm == "present" else 0.0}))
    rows = pd.concat(parts, ignore_index=True)
    rows = rows[rows["valid"]].drop(columns="valid").reset_index(drop=True)
    d = dist.loc[sorted(cases), "distance"].astype(float)
    z = (d - d.mean()) / d.std(ddof=0)
    q = pd.Series(quartile_bins(d.to_numpy()), index=d.index)
    rows["distance"] = d.reindex(rows["case_id"]).to_numpy()
    rows["z_distance"] = z.reindex(rows["case_id"]).to_numpy()
    rows["quartile"] = q.reindex(rows["case_id"]).to_numpy()
    if rows["label_changed"].isna().any():
        raise ValueError("regression_rows: label_changed has excluded labels (use a policy that labels every trial)")
    return rows


def fr_by_quartile(rows: pd.DataFrame, *, n_draws: int, seed: int) -> TableResult:
    """Flip rate per distance quartile and arm, with Q4 − Q1 (patient-clustered bootstrap per arm).

    ``rows`` from :func:`regression_rows`. Values ``byq.<arm>.q<k>`` (with ``_lo``/``_hi``),
    ``byq.<arm>.flips_q<k>``, ``byq.<arm>.q4_minus_q1_pp`` (with ``_lo_pp``/``_hi_pp``),
    ``byq.<arm>.flips``.
    """
    out, values = [], {}
    for arm, flag in (("present", 1.0), ("absent", 0.0)):
        r = rows[rows["report_present"] == flag]
        data = {"patient_id": r["patient_id"].to_numpy()}
        for k in (1, 2, 3, 4):
            m = (r["quartile"].to_numpy() == k) * 1.0
            data[f"n{k}"], data[f"f{k}"] = m, m * r["flip"].to_numpy()

        def statistic(s):
            res = {f"q{k}": _div(s[f"f{k}"], s[f"n{k}"]) for k in (1, 2, 3, 4)}
            res["q4_minus_q1"] = res["q4"] - res["q1"]
            return res

        res = cluster_bootstrap(pd.DataFrame(data), cluster="patient_id",
                                sums={k: k for k in data if k != "patient_id"}, statistic=statistic,
                                n_draws=n_draws, rng=np.random.default_rng(seed))
        for k in (1, 2, 3, 4):
            est, lo, hi = res.interval(f"q{k}")
            sel = r["quartile"] == k
            out.append({"report": arm, "quartile": k, "flip_rate": est, "lo": lo, "hi": hi,
                        "flips": int(r.loc[sel, "flip"].sum()), "trials": int(sel.sum()),
                        "distance_max": float(r.loc[sel, "distance"].max())})
            values.update({f"byq.{arm}.q{k}": est, f"byq.{arm}.q{k}_lo": lo, f"byq.{arm}.q{k}_hi": hi,
                           f"byq.{arm}.flips_q{k}": int(r.loc[sel, "flip"].sum())})
        est, lo, hi = res.interval("q4_minus_q1")
        values.update({f"byq.{arm}.q4_minus_q1_pp": 100 * est, f"byq.{arm}.q4_minus_q1_lo_pp": 100 * lo,
                       f"byq.{arm}.q4_minus_q1_hi_pp": 100 * hi, f"byq.{arm}.flips": int(r["flip"].sum()),
                       f"byq.{arm}.n_trials": int(len(r))})
    values["byq.n_draws"] = int(n_draws)
    return TableResult(pd.DataFrame(out), values,
                       index=("report", "quartile"), metrics={"flip_rate": "flip_rate", "lo": "flip_rate", "hi": "flip_rate",
                                "distance_max": "cosine_distance"},
                       labels={"report": "report", "quartile": "distance quartile", "flips": "flips",
                               "trials": "trials", "distance_max": "upper edge", "flip_rate": "flip rate", "lo": "lo",
                               "hi": "hi"},
                       caption="One-question flip rate by embedding-distance quartile (App. B).")


def flip_regression(rows: pd.DataFrame, *, n_draws: int, seed: int, formula: str = FORMULA) -> TableResult:
    """Logistic regression of flip with patient cluster-robust SEs, and a clustered-bootstrap cross-check.

    ``frame``: one row per term -- odds ratio with its Wald interval from the cluster-robust
    (sandwich) covariance, and the percentile interval of the odds ratio over ``n_draws``
    patient-clustered bootstrap refits. Values ``reg.<term>.odds_ratio``, ``.lo``, ``.hi``,
    ``.boot_lo``, ``.boot_hi``, ``.p_value``; ``reg.n_rows``, ``reg.n_clusters``,
    ``reg.boot_failed`` (resamples whose fit separated), ``reg.converged``. When the full-data fit
    separates (too few flips in a cell of the design: the 1 % rehearsal's stand-in flips once in 64
    rows) the table says so, every estimate is NaN and ``reg.converged`` is False, rather than failing
    after the records are made.
    """
    for col in ("flip", "z_distance", "label_changed", "report_present", "patient_id"):
        if col not in rows.columns:
            raise ValueError(f"flip_regression: rows lack {col!r} (use regression_rows)")
    if rows["flip"].nunique() < 2:
        raise ValueError("flip_regression: every row has the same flip value; the model is not identified")
    y, X, terms = design_matrices(rows, formula)
    if not logistic_fit(X, y).converged:
        return _separated(rows, terms, n_draws=n_draws, n_flips=int(y.sum()))
    fit = logistic_regression_cluster_robust(rows, formula, cluster="patient_id")
    boot = logistic_cluster_bootstrap(rows, formula, cluster="patient_id", n_draws=n_draws,
                                      rng=np.random.default_rng(seed))
    frame = pd.DataFrame({"term": [_TERMS.get(t, t) for t in fit.index], "key": list(fit.index),
                          "odds_ratio": fit["odds_ratio"].to_numpy(), "lo": fit["lo"].to_numpy(),
                          "hi": fit["hi"].to_numpy(), "boot_lo": boot.loc[fit.index, "lo"].to_numpy(),
                          "boot_hi": boot.loc[fit.index, "hi"].to_numpy(), "p_value": fit["p_value"].to_numpy()})
    values = {"reg.n_rows": int(fit.attrs["n_obs"]), "reg.n_clusters": int(fit.attrs["n_clusters"]),
              "reg.converged": bool(fit.attrs["converged"]), "reg.boot_failed": int(boot["n_failed"].iloc[0]),
              "reg.n_draws": int(n_draws), "reg.coef_agrees": bool(np.allclose(fit["coef"], boot["coef"], atol=1e-6))}
    for _, r in frame.iterrows():
        k = r["key"].lower()
        values.update({f"reg.{k}.odds_ratio": r["odds_ratio"], f"reg.{k}.lo": r["lo"], f"reg.{k}.hi": r["hi"],
                       f"reg.{k}.boot_lo": r["boot_lo"], f"reg.{k}.boot_hi": r["boot_hi"],
                       f"reg.{k}.p_value": r["p_value"]})
    return TableResult(frame, values,
                       index=("term",), metrics={"odds_ratio": "odds_ratio", "lo": "odds_ratio", "hi": "odds_ratio",
                                "boot_lo": "odds_ratio", "boot_hi": "odds_ratio"},
                       labels={"term": "term", "key": "key", "lo": "robust lo", "hi": "robust hi",
                               "boot_lo": "bootstrap lo", "boot_hi": "bootstrap hi", "p_value": "p"},
                       caption="Logistic regression of flip on distance, label change and report presence (App. B).")


def _separated(rows: pd.DataFrame, terms: list[str], *, n_draws: int, n_flips: int) -> TableResult:
    """The regression's table when the full-data fit does not converge (separation: e.g. no flip at all in
    one cell of the design): every estimate NaN, ``reg.converged`` False, and the caption says why."""
    keys = [t.lower() for t in terms]
    frame = pd.DataFrame({"term": [_TERMS.get(t, t) for t in terms], "key": terms,
                          **{c: np.nan for c in ("odds_ratio", "lo", "hi", "boot_lo", "boot_hi", "p_value")}})
    values = {"reg.n_rows": int(len(rows)), "reg.n_clusters": int(rows["patient_id"].nunique()),
              "reg.converged": False, "reg.boot_failed": int(n_draws), "reg.n_draws": int(n_draws),
              "reg.coef_agrees": False, "reg.n_flips": n_flips}
    for k in keys:
        values.update({f"reg.{k}.{q}": float("nan") for q in ("odds_ratio", "lo", "hi", "boot_lo", "boot_hi", "p_value")})
    return TableResult(frame, values,
                       metrics={"odds_ratio": "odds_ratio", "lo": "odds_ratio", "hi": "odds_ratio",
                                "boot_lo": "odds_ratio", "boot_hi": "odds_ratio"},
                       labels={"term": "term", "key": "key", "lo": "robust lo", "hi": "robust hi",
                               "boot_lo": "bootstrap lo", "boot_hi": "bootstrap hi", "p_value": "p"},
                       caption=f"Logistic regression of flip on distance, label change and report presence (App. B): "
                               f"not estimable on these rows, the full-data fit separates ({n_flips} flips of "
                               f"{len(rows)} rows).")


def planted_check(rows: pd.DataFrame, distance_trials: pd.DataFrame, regression: TableResult, *,
                  formula: str = FORMULA) -> TableResult:
    """``ref-distance-planted``: the planted odds ratios beside the regression's estimates.

    The model's flip probability on each pair follows from its codes (the embeddings of the
    distance record; :func:`shovir_core.models.reference.planted_flip_probability`); the planted
    coefficients are the logistic projection of those probabilities on the regression's rows
    (:func:`shovir_core.stats.logistic.fractional_logistic`), the value the estimator targets.
    Values ``planted.<term>.odds_ratio`` and ``planted.<term>.within_ci`` (inside the
    cluster-robust interval).
    """
    from ..models.reference import planted_flip_probability

    t = distance_trials.set_index("case_id")
    codes_c = np.stack([np.asarray(v, dtype=float) for v in t.loc[rows["case_id"], "embedding_c"]])
    codes_d = np.stack([np.asarray(v, dtype=float) for v in t.loc[rows["case_id"], "embedding_d"]])
    if codes_c.shape[1] != 2:
        raise ValueError(f"planted_check: embeddings have {codes_c.shape[1]} dimensions; the planted model's codes have 2 "
                         "(is the distance record of ref-distance-planted?)")
    p = planted_flip_probability(codes_c, codes_d)
    planted = fractional_logistic(rows, formula.split("~", 1)[1], probability=p)
    est = regression.frame.set_index("key")
    out, values = [], {}
    for term, coef in planted.items():
        r = est.loc[term]
        inside = bool(r["lo"] - 1e-9 <= np.exp(coef) <= r["hi"] + 1e-9)  # a degenerate [1, 1] still contains 1
        out.append({"term": _TERMS.get(term, term), "key": term, "planted": float(np.exp(coef)),
                    "odds_ratio": r["odds_ratio"], "lo": r["lo"], "hi": r["hi"], "within_ci": inside})
        values.update({f"planted.{term.lower()}.odds_ratio": float(np.exp(coef)),
                       f"planted.{term.lower()}.within_ci": inside})
    values["planted.mean_flip_probability"] = float(p.mean())
    values["planted.observed_flip_rate"] = float(rows["flip"].mean())
    return TableResult(pd.DataFrame(out), values,
                       index=("term",), metrics={"planted": "odds_ratio", "odds_ratio": "odds_ratio", "lo": "odds_ratio",
                                "hi": "odds_ratio"},
                       labels={"term": "term", "key": "key", "planted": "planted OR", "odds_ratio": "estimated OR",
                               "lo": "robust lo", "hi": "robust hi", "within_ci": "planted inside CI"},
                       caption="ref-distance-planted: planted odds ratios beside the estimates (App. B validation).")


def part_e(values: Mapping[str, float]) -> TableResult:
    """The paper's App. B consistency checks beside the same identities on this run.

    ``values``: merged values of :func:`ssim_summary`, :func:`distance_summary`,
    :func:`fr_by_quartile` and :func:`flip_regression` of one model.
    """
    from .part_e import RunCheck, part_e_beside

    v = values
    checks = {
        "design.pair_condition_rows": RunCheck("regression rows = pairs × 2 report conditions", v["reg.n_rows"],
                                               2 * v["byq.present.n_trials"]),
        "b.ssim_order": RunCheck("SSIM Q3 ≤ max", v["ssim.q3"], v["ssim.max"], op="<="),
        "b.ssim_rule": RunCheck("SSIM max ≤ threshold", v["ssim.max"], v["ssim.threshold"], op="<="),
        "b.A.diff": RunCheck("A: Q4 − Q1 (pp)", v["byq.absent.q4_minus_q1_pp"],
                             100 * (v["byq.absent.q4"] - v["byq.absent.q1"])),
        "b.P.diff": RunCheck("P: Q4 − Q1 (pp)", v["byq.present.q4_minus_q1_pp"],
                             100 * (v["byq.present.q4"] - v["byq.present.q1"])),
        "b.cos_order": RunCheck("distance Q1 ≤ median ≤ Q3", max(v["dist.q1"], v["dist.median"]), v["dist.q3"],
                                op="<="),
    }
    return part_e_beside(checks)


PAPER_KEYS: dict[str, str] = {
    "ssim.q1": "b.ssim_q1", "ssim.median": "b.ssim_q2", "ssim.q3": "b.ssim_q3", "ssim.max": "b.ssim_max",
    "dist.q1": "b.cos_q1", "dist.median": "b.cos_q2", "dist.q3": "b.cos_q3", "dist.rho_gap": "b.rho_time",
    "byq.absent.q1": "b.A.q1", "byq.absent.q4": "b.A.q4", "byq.absent.q4_minus_q1_pp": "b.A.diff",
    "byq.present.q1": "b.P.q1", "byq.present.q4": "b.P.q4", "byq.present.q4_minus_q1_pp": "b.P.diff",
    "byq.absent.flips": "t2.oneq.A_flips", "reg.n_rows": "b.rows",
    "reg.z_distance.odds_ratio": "b.or_distance", "reg.label_changed.odds_ratio": "b.or_label",
    "reg.report_present.odds_ratio": "b.or_report",
}
"""Run value key -> published value id (paper ``modalens``) of Appendix B."""

"""ModaLens Appendix E (Table 12): the analysis repeated against manual report labels.

The manual labels (:func:`shovir_core.data.mimic_manual.load_manual_labels`, or the demo's
simulated second reader) are applied at study level: a trial enters when both its studies (source
and substitute) have manual labels. On those trials the chapter reports

* automated vs manual agreement, Cohen's κ, automated sensitivity and precision (manual = truth),
  over every (trial, image side) -- each study label counted once per trial it enters;
* on trials whose *manual* label of the asked finding changes between the two studies: agreement
  of the answer on the substitute with the substitute's manual label, and the flip rates, for the
  report-present (P) and report-absent (A) arms;
* concordant accuracy and balanced accuracy against the manual label (P and A) and the yes-rate.

Paper values (ModaLens App. E): 291 pairs, 90 patients, 4,074 trials; agreement 0.943
[0.938, 0.947], κ 0.795, sensitivity 0.894, precision 0.773; 800 manual-label-changed trials with
substitute-label agreement 0.378 (P) / 0.519 (A); concordant accuracy 0.627 (BA 0.712) P and 0.485
(BA 0.644) A; A answers yes on 73% of trials.

Intervals are patient-clustered percentile bootstraps with every quantity computed inside the
draw from summed indicators.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..labels import FINDINGS_13
from ..metrics.arms import answers, pair_arms
from ..metrics.label_agreement import agreement_stats, expected_reader_confusion
from ..protocols.modalens import policy_targets
from ..stats import cluster_bootstrap
from ..vocab import COMPOSITE
from .result import TableResult

__all__ = ["manual_targets", "manual_label_table", "planted_agreement", "PAPER_KEYS"]

PAPER_KEYS = {
    "t12.n_pairs": "e.pairs", "t12.n_patients": "e.patients", "t12.n_trials": "e.trials",
    "t12.agreement": "e.agreement", "t12.kappa": "e.kappa", "t12.sensitivity": "e.sensitivity",
    "t12.precision": "e.precision", "t12.n_changed": "s41.manual_n",
    "t12.P.sub_agree_changed": "s41.manual_P", "t12.A.sub_agree_changed": "s41.manual_A",
    "t12.P.acc_manual": "e.acc_P", "t12.P.ba_manual": "e.ba_P", "t12.A.acc_manual": "e.acc_A",
    "t12.A.ba_manual": "e.ba_A", "t12.A.yes_rate": "e.yes_A",
}
"""Table 12 value key -> published value id (paper ``modalens``, Appendix E)."""


def _div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)


def manual_targets(trials: pd.DataFrame, manual: pd.DataFrame, *, policy: str) -> pd.DataFrame:
    """The trials whose two studies both have manual labels, with ``manual_c`` / ``manual_d`` targets.

    Targets follow ``policy`` (the record's primary policy) and the protocol's rule for the
    composite (yes iff any of the 13 findings is yes). Trials whose manual target is excluded by the
    policy are dropped. Adds ``manual_changed`` (1 where the manual label differs between studies).
    """
    for col in ("study_id", "sub_study_id", "finding", "target_c", "target_d", "patient_id"):
        if col not in trials.columns:
            raise ValueError(f"manual_targets: trials lack column {col!r} (not a modalens record?)")
    targets = policy_targets(manual, policy)
    sc, sd = trials["study_id"].astype(str), trials["sub_study_id"].astype(str)
    keep = sc.isin(targets.index).to_numpy() & sd.isin(targets.index).to_numpy()
    t = trials[keep].copy()
    cols = list(targets.columns)
    unknown = sorted(set(t["finding"]) - set(cols))
    if unknown:
        raise ValueError(f"manual_targets: findings {unknown} have no manual label column")
    arr = targets.to_numpy(dtype=float)
    j = np.array([cols.index(f) for f in t["finding"]], dtype=int)
    t["manual_c"] = arr[targets.index.get_indexer(t["study_id"].astype(str)), j]
    t["manual_d"] = arr[targets.index.get_indexer(t["sub_study_id"].astype(str)), j]
    t = t[~(np.isnan(t["manual_c"].to_numpy()) | np.isnan(t["manual_d"].to_numpy()))]
    t["manual_changed"] = (t["manual_c"] != t["manual_d"]).astype(float)
    return t.reset_index(drop=True)


def _positives_of(trials: pd.DataFrame, side: str) -> np.ndarray:
    """Per trial, the number of positive automated findings of one side's study (-1 off the composite)."""
    import json

    col = f"labels_{side}"
    if col not in trials.columns:
        raise ValueError(f"trials lack column {col!r}")
    k = []
    for js, f in zip(trials[col], trials["finding"]):
        if f != COMPOSITE:
            k.append(-1)
            continue
        codes = json.loads(js)
        k.append(sum(1 for c in FINDINGS_13 if codes.get(c) == 1.0))
    return np.array(k, dtype=float)


def planted_agreement(trials: pd.DataFrame, manual: pd.DataFrame, *, policy: str, error_rate: float) -> dict:
    """Agreement and κ a simulated reader with ``error_rate`` is expected to show on these trials.

    Expected confusion counts (:func:`~shovir_core.metrics.label_agreement.expected_reader_confusion`)
    over the same (trial, side) entries the table uses; the composite accounts for a flip of any of
    its 13 findings. Assumes the primary policy maps uncertain and blank to negative (so ``k``
    counts code-1 findings).
    """
    t = manual_targets(trials, manual, policy=policy)
    auto = np.concatenate([t["target_c"].to_numpy(dtype=float), t["target_d"].to_numpy(dtype=float)])
    k = np.concatenate([_positives_of(t, "c"), _positives_of(t, "d")])
    counts = expected_reader_confusion(auto, error_rate=error_rate, composite_of=k)
    stats = agreement_stats(**counts)
    return {"agreement": float(stats["agreement"]), "kappa": float(stats["kappa"]), **counts}


def manual_label_table(present: pd.DataFrame, absent: pd.DataFrame, manual: pd.DataFrame, *, policy: str,
                       n_draws: int, seed: int, readout: str = "lowercase", key: str = "t12") -> TableResult:
    """Table 12: the P and A arms scored against manual report labels (see the module docstring).

    ``present`` / ``absent`` are the trials of the report-present and report-absent arms (same
    cases and substitutes); ``manual`` is study-level manual codes (index ``study_id``).
    """
    p, a = pair_arms(present, absent, names=["present", "absent"])
    p_m = manual_targets(p, manual, policy=policy)
    if p_m.empty:
        raise ValueError("manual_label_table: no trial has manual labels on both studies")
    a = a.set_index("trial_id").loc[p_m["trial_id"]].reset_index()
    p_m = p_m.reset_index(drop=True)
    if np.isnan(p_m[["target_c", "target_d"]].to_numpy(dtype=float)).any():
        raise ValueError("manual_label_table: automated targets contain excluded labels; use a policy without exclusions")
    pc, pd_, pv = answers(p_m, readout)
    ac, ad, av = answers(a, readout)
    valid = pv & av
    t, a = p_m[valid].reset_index(drop=True), a[valid].reset_index(drop=True)
    pc, pd_, ac, ad = pc[valid], pd_[valid], ac[valid], ad[valid]
    auto_c, auto_d = t["target_c"].to_numpy(float), t["target_d"].to_numpy(float)
    man_c, man_d = t["manual_c"].to_numpy(float), t["manual_d"].to_numpy(float)
    ch = t["manual_changed"].to_numpy(float)
    f = {"patient_id": t["patient_id"].to_numpy(), "n": np.ones(len(t)), "ch": ch}
    # automated vs manual over both sides of each trial
    f["tp"] = auto_c * man_c + auto_d * man_d
    f["fp"] = auto_c * (1 - man_c) + auto_d * (1 - man_d)
    f["fn"] = (1 - auto_c) * man_c + (1 - auto_d) * man_d
    f["tn"] = (1 - auto_c) * (1 - man_c) + (1 - auto_d) * (1 - man_d)
    for arm, yc, yd in (("P", pc, pd_), ("A", ac, ad)):
        f[f"{arm}_sub_ok_ch"] = (yd == man_d) * ch
        f[f"{arm}_flip_ch"] = (yc != yd) * ch
        f[f"{arm}_ok_c"] = (yc == man_c).astype(float)
        f[f"{arm}_yes_c"] = yc
        f[f"{arm}_tp"], f[f"{arm}_fn"] = yc * man_c, (1 - yc) * man_c
        f[f"{arm}_tn"], f[f"{arm}_fp"] = (1 - yc) * (1 - man_c), yc * (1 - man_c)
    frame = pd.DataFrame(f)

    def statistic(s):
        out = {k: v for k, v in agreement_stats(s["tp"], s["fp"], s["fn"], s["tn"]).items()}
        for arm in ("P", "A"):
            out[f"{arm}.sub_agree_changed"] = _div(s[f"{arm}_sub_ok_ch"], s["ch"])
            out[f"{arm}.flip_rate_changed"] = _div(s[f"{arm}_flip_ch"], s["ch"])
            out[f"{arm}.acc_manual"] = _div(s[f"{arm}_ok_c"], s["n"])
            out[f"{arm}.yes_rate"] = _div(s[f"{arm}_yes_c"], s["n"])
            sens = _div(s[f"{arm}_tp"], s[f"{arm}_tp"] + s[f"{arm}_fn"])
            spec = _div(s[f"{arm}_tn"], s[f"{arm}_tn"] + s[f"{arm}_fp"])
            out[f"{arm}.ba_manual"] = (sens + spec) / 2
        out["diff_changed"] = out["A.flip_rate_changed"] - out["P.flip_rate_changed"]
        return out

    sums = {c: c for c in frame.columns if c != "patient_id"}
    res = cluster_bootstrap(frame, cluster="patient_id", sums=sums, statistic=statistic, n_draws=n_draws,
                            rng=np.random.default_rng(seed))
    rows_spec = [
        ("automated vs manual", "both", "agreement", "agreement"),
        ("automated vs manual", "both", "kappa", "Cohen's κ"),
        ("automated vs manual", "both", "sensitivity", "automated sensitivity (manual = truth)"),
        ("automated vs manual", "both", "precision", "automated precision"),
        ("automated vs manual", "both", "prevalence_reference", "manual prevalence"),
        ("automated vs manual", "both", "prevalence_automated", "automated prevalence"),
    ]
    for arm in ("P", "A"):
        rows_spec += [
            ("manual label changes", arm, f"{arm}.sub_agree_changed", "agreement with the substitute's manual label"),
            ("manual label changes", arm, f"{arm}.flip_rate_changed", "flip rate"),
        ]
    rows_spec.append(("manual label changes", "A − P", "diff_changed", "flip-rate difference"))
    for arm in ("P", "A"):
        rows_spec += [
            ("concordant image vs manual", arm, f"{arm}.acc_manual", "accuracy"),
            ("concordant image vs manual", arm, f"{arm}.ba_manual", "balanced accuracy"),
            ("concordant image vs manual", arm, f"{arm}.yes_rate", "yes-rate"),
        ]
    n_ch = int(ch.sum())
    rows, values = [], {}
    for block, arm, stat, label in rows_spec:
        est, lo, hi = res.interval(stat)
        n = n_ch if block == "manual label changes" else (2 * len(t) if arm == "both" else len(t))
        rows.append({"block": block, "arm": arm, "quantity": label, "metric": _row_metric(stat),
                     "estimate": est, "lo": lo, "hi": hi, "n": n})
        values.update({f"{key}.{stat}": est, f"{key}.{stat}_lo": lo, f"{key}.{stat}_hi": hi})
    values.update({
        f"{key}.n_trials": int(len(t)), f"{key}.n_pairs": int(t["case_id"].nunique()),
        f"{key}.n_patients": int(t["patient_id"].nunique()), f"{key}.n_changed": n_ch,
        f"{key}.n_excluded_unscoreable": int((~valid).sum()), f"{key}.n_draws": int(n_draws), f"{key}.seed": int(seed),
        f"{key}.n_studies_manual": int(len(manual)),
    })
    caption = (f"Report-present (P) and report-absent (A) arms scored against manual report labels on the "
               f"{len(t)} trials whose two studies both have them; patient-clustered 95% intervals, "
               f"{n_draws} draws.")
    # the "metric" column formats each row by its quantity (flip rates and yes-rates in %, the
    # difference in pp, label agreement, κ and accuracies as fractions, as the paper prints them)
    return TableResult(pd.DataFrame(rows), values, index=("block", "arm", "quantity"),
                       labels={"estimate": "estimate", "lo": "2.5%", "hi": "97.5%", "n": "entries"},
                       caption=caption)


def _row_metric(stat: str) -> str:
    """Metric (resources/metrics.yaml) of a Table 12 quantity."""
    name = stat.split(".")[-1]
    return {"kappa": "cohen_kappa", "sensitivity": "sensitivity", "precision": "precision",
            "flip_rate_changed": "flip_rate", "diff_changed": "paired_diff", "acc_manual": "accuracy",
            "ba_manual": "balanced_accuracy", "yes_rate": "yes_rate"}.get(name, "proportion")

"""ModaLens Appendix G, estimand robustness: weightings, label policies, composite, transitions, margins.

Pure functions of ``modalens`` trial frames (one per arm: report present ``P`` and absent ``A``,
all-14 design, image first). Every function returns a
:class:`shovir_core.tables.result.TableResult`; intervals are patient-clustered percentile
bootstraps (:func:`shovir_core.stats.cluster_bootstrap`, ``numpy.random.default_rng(seed)``) with
rates, differences and shares computed inside each draw.

* :func:`weighting_table` -- the paired report effect under equal study and patient weights and
  on the cross-patient, blank-view and view-matched subsets (App. G §2; paper: 10.6-14.3 pp);
* :func:`policy_table` -- every label policy stored per trial: trials retained, label-changed and
  -unchanged counts, flip rate on each with the clustered difference, concordant balanced
  accuracy, mean target-aligned margin change (App. G "Label policies");
* :func:`composite_excluded` -- the 13-finding headline and accuracy table (Table 15);
* :func:`transitions_table` -- correctness transitions on label-changed trials, with conditional
  shares, and the identity "change of correctness = flip" on label-unchanged trials (Table 16);
* :func:`aligned_by_finding` -- target-aligned margin change per finding, P and A (Table 17, Figure 4).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..labels import POLICIES
from ..metrics import modalens as mm
from ..metrics.arms import answers, compare_arms, pair_arms
from ..stats import cluster_bootstrap, paired_rates
from ..vocab import COMPOSITE
from .modalens import DESIGN_LABELS, design_subset
from .result import TableResult

__all__ = ["image_branch_by_finding", "WEIGHTINGS", "POLICY_LABELS", "PAPER_POLICIES", "weighting_table", "policy_table",
           "composite_excluded", "transitions_table", "aligned_by_finding", "blank_view", "part_e", "PAPER_KEYS",
           "anchoring_gate_check", "second_model_t15"]

WEIGHTINGS: dict[str, str] = {
    "trials": "all trials, equal trial weights (the estimand)",
    "studies": "equal study weights",
    "patients": "equal patient weights",
    "no_cross_patient": "without cross-patient pairs",
    "no_blank_view": "without blank-view pairs",
    "view_matched": "view-matched pairs only",
}
"""The weightings and subsets of App. G §2 (key -> row label)."""

POLICY_LABELS: dict[str, str] = {
    "u-negative": "uncertain → negative (the paper's)",
    "u-positive": "uncertain → positive",
    "u-excluded": "uncertain → excluded",
    "u-negative_b-excluded": "unmentioned → excluded",
    "u-positive_b-excluded": "uncertain → positive, unmentioned → excluded",
    "u-excluded_b-excluded": "uncertain and unmentioned → excluded",
}
"""Readable names of :data:`shovir_core.labels.POLICIES` (blank = unmentioned)."""

PAPER_POLICIES = ("u-negative", "u-positive", "u-excluded", "u-negative_b-excluded")
"""The four policies App. G reports."""

_ARMS = {"present": "P", "absent": "A"}


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _div(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)


def _need(trials: pd.DataFrame, cols, what: str) -> None:
    missing = [c for c in cols if c not in trials.columns]
    if missing:
        raise ValueError(f"{what}: trials lack columns {missing} (a modalens record of this protocol version?)")


def blank_view(trials: pd.DataFrame) -> np.ndarray:
    """Whether either image of a trial has a blank view field (``view_blank_*`` where stored, else an empty view)."""
    out = np.zeros(len(trials), dtype=bool)
    for side in ("c", "d"):
        col = f"view_blank_{side}"
        if col in trials.columns:
            out |= trials[col].fillna(False).astype(bool).to_numpy()
        view = trials[f"view_{side}"]
        out |= (view.isna() | (view.astype(str).str.strip() == "")).to_numpy()
    return out


# --------------------------------------------------------------------------- weighting and subsets
def weighting_table(present: pd.DataFrame, absent: pd.DataFrame, *, n_draws: int, seed: int,
                    readout: str = "lowercase") -> TableResult:
    """The paired report effect FR_A − FR_P under each weighting and subset of :data:`WEIGHTINGS`.

    Weighted rates are Σ w·flip / Σ w: ``studies`` gives each source study weight 1 spread over its
    trials, ``patients`` each patient. Every row is bootstrapped over patients on the same seed.
    """
    p, a = pair_arms(present, absent, names=["present", "absent"])
    _need(p, ["study_id", "pair_type", "view_c", "view_d"], "weighting_table")
    pc, pd_, pv = answers(p, readout)
    ac, ad, av = answers(a, readout)
    valid = pv & av
    p, fp, fa = p[valid].reset_index(drop=True), (pc != pd_)[valid], (ac != ad)[valid]
    study_n = p.groupby("study_id")["trial_id"].transform("size").to_numpy(dtype=float)
    patient_n = p.groupby("patient_id")["trial_id"].transform("size").to_numpy(dtype=float)
    blank = blank_view(p)
    views = (p["view_c"].astype(str).str.upper() == p["view_d"].astype(str).str.upper()).to_numpy() & ~blank
    specs = {
        "trials": (np.ones(len(p)), np.ones(len(p), dtype=bool)),
        "studies": (1.0 / study_n, np.ones(len(p), dtype=bool)),
        "patients": (1.0 / patient_n, np.ones(len(p), dtype=bool)),
        "no_cross_patient": (np.ones(len(p)), (p["pair_type"] == "same-patient").to_numpy()),
        "no_blank_view": (np.ones(len(p)), ~blank),
        "view_matched": (np.ones(len(p)), views),
    }
    rows, values = [], {}
    for key, (w, keep) in specs.items():
        row = {"weighting": WEIGHTINGS[key], "key": key, "n_trials": int(keep.sum()),
               "n_patients": int(p.loc[keep, "patient_id"].nunique())}
        if keep.any():
            frame = pd.DataFrame({"patient_id": p.loc[keep, "patient_id"].to_numpy(), "w": w[keep],
                                  "a": (w * fa)[keep], "p": (w * fp)[keep]})
            res = cluster_bootstrap(frame, cluster="patient_id", sums={"w": "w", "a": "a", "p": "p"},
                                    statistic=paired_rates("a", "p", den="w", names=("fr_absent", "fr_present")),
                                    n_draws=n_draws, rng=_rng(seed))
            for stat in ("fr_present", "fr_absent", "diff"):
                est, lo, hi = res.interval(stat)
                row[stat] = est
                if stat == "diff":
                    row.update(diff_lo=lo, diff_hi=hi)
        else:
            row.update(fr_present=np.nan, fr_absent=np.nan, diff=np.nan, diff_lo=np.nan, diff_hi=np.nan)
        rows.append(row)
        values.update({f"weight.{key}.fr_present": row["fr_present"], f"weight.{key}.fr_absent": row["fr_absent"],
                       f"weight.{key}.diff_pp": 100 * row["diff"], f"weight.{key}.diff_lo_pp": 100 * row["diff_lo"],
                       f"weight.{key}.diff_hi_pp": 100 * row["diff_hi"], f"weight.{key}.n_trials": row["n_trials"],
                       f"weight.{key}.n_patients": row["n_patients"]})
    frame = pd.DataFrame(rows)
    diffs = frame["diff"].dropna()
    values["weight.diff_min_pp"] = 100 * float(diffs.min()) if len(diffs) else float("nan")
    values["weight.diff_max_pp"] = 100 * float(diffs.max()) if len(diffs) else float("nan")
    values.update({"weight.n_draws": int(n_draws), "weight.seed": int(seed)})
    return TableResult(frame, values,
                       index=("weighting",), metrics={"fr_present": "flip_rate", "fr_absent": "flip_rate", "diff": "paired_diff",
                                "diff_lo": "paired_diff", "diff_hi": "paired_diff"},
                       labels={"weighting": "weighting / subset", "n_trials": "trials", "n_patients": "patients",
                               "key": "key", "fr_present": "FR, report present", "fr_absent": "FR, report absent",
                               "diff": "A − P", "diff_lo": "lo", "diff_hi": "hi"},
                       caption="Report effect FR_A − FR_P under other weightings and subsets (App. G).")


# --------------------------------------------------------------------------- label policies
def _policy_row(t: pd.DataFrame, policy: str, *, readout: str, n_draws: int, seed: int) -> dict:
    _need(t, [f"target_c__{policy}", f"target_d__{policy}", f"label_changed__{policy}", "margin_c", "margin_d"],
          "policy_table")
    yc, yd, valid = answers(t, readout)
    tc = t[f"target_c__{policy}"].to_numpy(dtype=float)
    td = t[f"target_d__{policy}"].to_numpy(dtype=float)
    lc = t[f"label_changed__{policy}"].to_numpy(dtype=float)
    retained = ~np.isnan(tc) & ~np.isnan(td) & valid
    changed, unchanged = retained & (lc == 1), retained & (lc == 0)
    flip = (yc != yd).astype(float)
    row = {"n_retained": int(retained.sum()), "n_changed": int(changed.sum()), "n_unchanged": int(unchanged.sum()),
           "n_excluded": int((~retained).sum())}
    if retained.any():
        frame = pd.DataFrame({"patient_id": t["patient_id"].to_numpy()[retained], "ch": changed[retained] * 1.0,
                              "un": unchanged[retained] * 1.0, "f_ch": (flip * changed)[retained],
                              "f_un": (flip * unchanged)[retained]})

        def statistic(s):
            a, b = _div(s["f_ch"], s["ch"]), _div(s["f_un"], s["un"])
            return {"fr_changed": a, "fr_unchanged": b, "diff": a - b}

        res = cluster_bootstrap(frame, cluster="patient_id", sums={c: c for c in frame.columns if c != "patient_id"},
                                statistic=statistic, n_draws=n_draws, rng=_rng(seed))
        for stat in ("fr_changed", "fr_unchanged", "diff"):
            est, lo, hi = res.interval(stat)
            row[stat] = est
            if stat == "diff":
                row.update(diff_lo=lo, diff_hi=hi)
        row["ba_concordant"] = mm.balanced_accuracy(yc[retained], tc[retained])
    else:
        row.update(fr_changed=np.nan, fr_unchanged=np.nan, diff=np.nan, diff_lo=np.nan, diff_hi=np.nan,
                   ba_concordant=np.nan)
    if changed.any():
        tac = mm.target_aligned_change(t["margin_c"].to_numpy()[changed], t["margin_d"].to_numpy()[changed],
                                       td[changed])
        row.update(aligned_change=tac["target_aligned_change"], share_aligned=tac["share_target_aligned"])
    else:
        row.update(aligned_change=np.nan, share_aligned=np.nan)
    return row


def policy_table(present: pd.DataFrame, absent: pd.DataFrame, *, n_draws: int, seed: int,
                 policies=tuple(POLICIES), readout: str = "lowercase") -> TableResult:
    """Label-changed vs -unchanged flip rates under every label policy, report present and absent.

    A trial is retained when the policy labels the asked finding on both images; it is
    label-changed when the two labels differ. Per (policy, arm): counts, flip rates on changed
    and unchanged trials with the clustered difference (changed − unchanged), concordant balanced
    accuracy (source image vs source label, retained trials) and the mean target-aligned margin
    change y_d (m_d − m_c) on changed trials with its share > 0.
    """
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown label policies {unknown}; use {sorted(POLICIES)}")
    arms = dict(zip(_ARMS, pair_arms(present, absent, names=list(_ARMS))))
    rows, values = [], {}
    for policy in policies:
        for arm, t in arms.items():
            r = _policy_row(t, policy, readout=readout, n_draws=n_draws, seed=seed)
            rows.append({"policy": POLICY_LABELS[policy], "policy_key": policy, "report": arm,
                         "paper": policy in PAPER_POLICIES, **r})
            pre = f"policy.{policy.replace('-', '_')}.{arm}"  # glue keys: no hyphens
            for k, v in r.items():
                values[f"{pre}.{k}_pp" if k in ("diff", "diff_lo", "diff_hi") else f"{pre}.{k}"] = \
                    100 * v if k in ("diff", "diff_lo", "diff_hi") else v
    values.update({"policy.n_policies": len(policies), "policy.n_draws": int(n_draws)})
    frame = pd.DataFrame(rows)
    return TableResult(frame, values,
                       index=("policy", "report"), metrics={"fr_changed": "flip_rate", "fr_unchanged": "flip_rate", "diff": "paired_diff",
                                "diff_lo": "paired_diff", "diff_hi": "paired_diff",
                                "ba_concordant": "balanced_accuracy", "aligned_change": "target_aligned_change",
                                "share_aligned": "share_target_aligned"},
                       labels={"policy": "label policy", "report": "report", "n_retained": "trials retained",
                               "n_changed": "label-changed", "n_unchanged": "label-unchanged",
                               "n_excluded": "excluded", "paper": "in the paper", "policy_key": "key",
                               "fr_changed": "FR, label-changed", "fr_unchanged": "FR, label-unchanged",
                               "diff": "changed − unchanged", "diff_lo": "lo", "diff_hi": "hi"},
                       caption="Label policies: flip rate on label-changed vs unchanged trials (App. G).")


# --------------------------------------------------------------------------- composite excluded
def _accuracy(trials: pd.DataFrame, *, readout: str, n_draws: int, seed: int) -> dict:
    """Concordant / discordant accuracy and balanced accuracy, and flip rates by label change: Table 4's
    quantities (:func:`~shovir_core.tables.modalens.accuracy_table`) under App. G's names."""
    from .modalens import accuracy_table

    v = accuracy_table(trials, n_draws=n_draws, seed=seed, readout=readout, key="t4").values
    names = {"acc_concordant": "acc_original", "acc_discordant": "acc_substitute", "ba_concordant": "ba_original",
             "ba_discordant": "ba_substitute", "fr_changed": "fr_changed", "fr_unchanged": "fr_unchanged",
             "fr_changed_minus_unchanged": "fr_changed_minus_unchanged"}
    out = {"n_trials": v["t4.n_trials"], "n_label_changed": v["t4.n_label_changed"],
           "n_correct_concordant": v["t4.n_correct_original"], "n_correct_discordant": v["t4.n_correct_substitute"]}
    for mine, theirs in names.items():
        out.update({mine: v[f"t4.{theirs}"], f"{mine}_lo": v[f"t4.{theirs}_lo"], f"{mine}_hi": v[f"t4.{theirs}_hi"]})
    return out


def second_model_t15(present: pd.DataFrame, absent: pd.DataFrame, *, model: str, n_draws: int, seed: int,
                     readout: str = "lowercase") -> TableResult:
    """Table 15's column of a second model (MedGemma-4B in the paper: 7.46 % vs 21.96 %, 14.51 points;
    concordant accuracy 0.692, BA 0.791, discordant accuracy 0.624): the 13-finding rows of
    :func:`composite_excluded` on that model's all-14 records, values ``t15.second.<quantity>``."""
    t = composite_excluded(present, absent, n_draws=n_draws, seed=seed, readout=readout)
    frame = t.frame[t.frame["design"] == DESIGN_LABELS.get("f13", "f13")].assign(model=model)
    frame = frame[["model", *[c for c in frame.columns if c != "model"]]].reset_index(drop=True)
    values = {k.replace("t15.f13.", "t15.second.", 1): v for k, v in t.values.items() if k.startswith("t15.f13.")}
    return TableResult(frame, values=values, metrics=t.metrics, labels=t.labels,
                       index=("model", *[c for c in t.index if c in frame.columns]),
                       caption=f"Table 15, second model ({model}): the 13 finding-specific questions.")


def composite_excluded(present: pd.DataFrame, absent: pd.DataFrame, *, n_draws: int, seed: int,
                       readout: str = "lowercase", n_draws_primary: int | None = None) -> TableResult:
    """Table 15: the 13 finding-specific questions alone (composite dropped), beside all 14.

    The all-14 rows are Table 2's report effect and Table 4's accuracies: bootstrapped with
    ``n_draws_primary`` draws as those tables are, so each prints the interval it has there; the
    13-finding rows with ``n_draws`` (as §4.1's).

    Rows: report effect (FR_A, FR_P, paired difference and ratio), accuracy and balanced accuracy
    on the original and substitute image with the report, flip rates on label-changed vs unchanged
    trials, and label-changed counts. Values ``t15.<design>.<quantity>`` for ``design`` in
    ``all14``, ``f13``, plus ``t15.composite.n_label_changed``.
    """
    rows, values = [], {}
    for design in ("all14", "f13"):
        p, a = design_subset(present, design), design_subset(absent, design)
        draws = n_draws_primary if design == "all14" and n_draws_primary else n_draws
        eff = compare_arms(a, p, readout=readout, n_draws=draws, seed=seed)
        acc = _accuracy(p, readout=readout, n_draws=draws, seed=seed)
        pre = f"t15.{design}"
        items = [("flip rate, report present", "flip_rate", eff["fr_2"], eff["fr_2_lo"], eff["fr_2_hi"]),
                 ("flip rate, report absent", "flip_rate", eff["fr_1"], eff["fr_1_lo"], eff["fr_1_hi"]),
                 ("paired difference A − P", "paired_diff", eff["diff"], eff["diff_lo"], eff["diff_hi"]),
                 ("ratio A / P", "ratio", eff["ratio"], eff["ratio_lo"], eff["ratio_hi"]),
                 ("concordant accuracy (P)", "concordant_accuracy", acc["acc_concordant"], acc["acc_concordant_lo"],
                  acc["acc_concordant_hi"]),
                 ("concordant balanced accuracy (P)", "balanced_accuracy", acc["ba_concordant"],
                  acc["ba_concordant_lo"], acc["ba_concordant_hi"]),
                 ("discordant accuracy (P)", "discordant_accuracy", acc["acc_discordant"], acc["acc_discordant_lo"],
                  acc["acc_discordant_hi"]),
                 ("flip rate, label-changed (P)", "flip_rate", acc["fr_changed"], acc["fr_changed_lo"],
                  acc["fr_changed_hi"]),
                 ("flip rate, label-unchanged (P)", "flip_rate", acc["fr_unchanged"], acc["fr_unchanged_lo"],
                  acc["fr_unchanged_hi"])]
        for label, metric, est, lo, hi in items:
            rows.append({"design": DESIGN_LABELS.get(design, design), "quantity": label, "metric": metric,
                         "estimate": est, "lo": lo, "hi": hi})
        values.update({f"{pre}.fr_present": eff["fr_2"], f"{pre}.fr_absent": eff["fr_1"],
                       f"{pre}.diff_pp": 100 * eff["diff"], f"{pre}.diff_lo_pp": 100 * eff["diff_lo"],
                       f"{pre}.diff_hi_pp": 100 * eff["diff_hi"], f"{pre}.ratio": eff["ratio"],
                       f"{pre}.n_trials": eff["n_trials"], f"{pre}.flips_present": eff["flips_2"],
                       f"{pre}.flips_absent": eff["flips_1"],
                       **{f"{pre}.{k}": v for k, v in acc.items()}})
    comp = present[present["finding"] == COMPOSITE]
    values["t15.composite.n_label_changed"] = int((comp["label_changed"].to_numpy(dtype=float) == 1).sum())
    values["t15.composite.n_trials"] = int(len(comp))
    frame = pd.DataFrame(rows)
    return TableResult(frame, values, index=("design", "quantity"),
                       labels={"design": "design", "quantity": "quantity", "estimate": "estimate",
                               "lo": "lo", "hi": "hi", "metric": "metric"},
                       caption="Composite question excluded: 13-finding headline and accuracy (Table 15).")


# --------------------------------------------------------------------------- transitions
_CELLS = ("correct->wrong", "wrong->correct", "correct->correct", "wrong->wrong")


def transitions_table(present: pd.DataFrame, absent: pd.DataFrame, *, n_draws: int, seed: int,
                      readout: str = "lowercase") -> TableResult:
    """Table 16: correctness transitions from the original to the substitute image.

    On label-changed trials an unchanged answer changes correctness, so the two flip cells are
    ``correct->correct`` and ``wrong->wrong``; shares are of the label-changed trials, and the
    conditional share is correct→wrong among trials correct on the original. On label-unchanged
    trials a change of correctness is exactly a flip: values ``<arm>.unchanged_identity`` (every
    trial) and ``<arm>.changed_identity`` (flip ⇔ correctness kept, every label-changed trial).
    """
    rows, values = [], {}
    for arm, t in zip(_ARMS, pair_arms(present, absent, names=list(_ARMS))):
        yc, yd, valid = answers(t, readout)
        t = t[valid]
        yc, yd = yc[valid], yd[valid]
        tc, td = t["target_c"].to_numpy(dtype=float), t["target_d"].to_numpy(dtype=float)
        if np.isnan(tc).any() or np.isnan(td).any():
            raise ValueError("transitions_table: targets contain excluded labels (primary policy must label all)")
        ch = t["label_changed"].to_numpy(dtype=float) == 1
        ok_c, ok_d, flip = yc == tc, yd == td, yc != yd
        cells = {"correct->wrong": ok_c & ~ok_d, "wrong->correct": ~ok_c & ok_d,
                 "correct->correct": ok_c & ok_d, "wrong->wrong": ~ok_c & ~ok_d}
        frame = pd.DataFrame({"patient_id": t["patient_id"].to_numpy(), "n_ch": ch * 1.0,
                              "ok_c_ch": (ok_c & ch) * 1.0, **{k: (v & ch) * 1.0 for k, v in cells.items()}})

        def statistic(s):
            out = {k: _div(s[k], s["n_ch"]) for k in _CELLS}
            out["cond_correct_to_wrong"] = _div(s["correct->wrong"], s["ok_c_ch"])
            return out

        pre = f"t16.{arm}"
        if ch.any():
            res = cluster_bootstrap(frame, cluster="patient_id",
                                    sums={c: c for c in frame.columns if c != "patient_id"},
                                    statistic=statistic, n_draws=n_draws, rng=_rng(seed))
            counts = mm.transitions(ok_c[ch], ok_d[ch])["n"]
            for cell in (*_CELLS, "cond_correct_to_wrong"):
                est, lo, hi = res.interval(cell)
                n = int(counts[cell]) if cell in counts.index else int((ok_c & ch).sum())
                rows.append({"report": arm, "transition": cell if cell in _CELLS else "correct->wrong | correct on original",
                             "n": n, "share": est, "lo": lo, "hi": hi})
                key = cell.replace("->", "_to_")
                values.update({f"{pre}.{key}": est, f"{pre}.{key}_lo": lo, f"{pre}.{key}_hi": hi,
                               f"{pre}.{key}.n": n})
        un = ~ch
        changed_flips = int((flip & ch).sum())
        unchanged_flips = int((flip & un).sum())
        values.update({
            f"{pre}.n_changed": int(ch.sum()), f"{pre}.n_unchanged": int(un.sum()),
            f"{pre}.unchanged_correctness_changes": int(((ok_c != ok_d) & un).sum()),
            f"{pre}.unchanged_flips": unchanged_flips, f"{pre}.changed_flips": changed_flips,
            f"{pre}.unchanged_identity": bool(((ok_c != ok_d) == flip)[un].all()),
            f"{pre}.changed_identity": bool(((ok_c == ok_d) == flip)[ch].all()),
            f"{pre}.flips": int(flip.sum()), f"{pre}.flip_cells_sum": int(
                (cells["correct->correct"] & ch).sum() + (cells["wrong->wrong"] & ch).sum() + unchanged_flips),
            f"{pre}.n_correct_original": int(ok_c.sum()), f"{pre}.n_correct_substitute": int(ok_d.sum()),
            f"{pre}.n_trials": int(len(t)),
        })
    frame = pd.DataFrame(rows)
    return TableResult(frame, values, index=("report", "transition"), metrics={"share": "transition_share", "lo": "transition_share",
                                               "hi": "transition_share"},
                       labels={"report": "report", "transition": "transition (label-changed trials)", "n": "trials",
                               "share": "share", "lo": "lo", "hi": "hi"},
                       caption="Correctness transitions on label-changed trials (Table 16).")


# --------------------------------------------------------------------------- margins
def aligned_by_finding(present: pd.DataFrame, absent: pd.DataFrame, *, n_draws: int, seed: int) -> TableResult:
    """Table 17 / Figure 4: target-aligned margin change y_d (m_d − m_c) on label-changed trials.

    ``frame`` has one row per (finding, report): mean aligned change, share > 0 and trials; values
    hold the pooled mean and share per arm with patient-clustered intervals and each finding's means.
    """
    rows, values = [], {}
    for arm, t in zip(_ARMS, pair_arms(present, absent, names=list(_ARMS))):
        ch = t["label_changed"].to_numpy(dtype=float) == 1
        sub = t[ch]
        if sub.empty:
            raise ValueError("aligned_by_finding: no label-changed trial")
        y = np.where(sub["target_d"].to_numpy(dtype=float) == 1, 1.0, -1.0)
        v = y * (sub["margin_d"].to_numpy(dtype=float) - sub["margin_c"].to_numpy(dtype=float))
        frame = pd.DataFrame({"patient_id": sub["patient_id"].to_numpy(), "n": 1.0, "v": v, "pos": (v > 0) * 1.0})
        res = cluster_bootstrap(frame, cluster="patient_id", sums={"n": "n", "v": "v", "pos": "pos"},
                                statistic=lambda s: {"mean": _div(s["v"], s["n"]), "share": _div(s["pos"], s["n"])},
                                n_draws=n_draws, rng=_rng(seed))
        for stat in ("mean", "share"):
            est, lo, hi = res.interval(stat)
            name = "aligned_change" if stat == "mean" else "share_aligned"
            values.update({f"t17.{arm}.{name}": est, f"t17.{arm}.{name}_lo": lo, f"t17.{arm}.{name}_hi": hi})
        values[f"t17.{arm}.n_changed"] = int(len(sub))
        for finding, g in pd.DataFrame({"finding": sub["finding"].to_numpy(), "v": v}).groupby("finding"):
            rows.append({"finding": finding, "report": arm, "aligned_change": float(g["v"].mean()),
                         "share_aligned": float((g["v"] > 0).mean()), "n": int(len(g))})
            values[f"t17.{arm}.by_finding.{finding.lower().replace(' ', '_')}"] = float(g["v"].mean())
    frame = pd.DataFrame(rows)
    return TableResult(frame, values, metrics={"aligned_change": "target_aligned_change",
                                               "share_aligned": "share_target_aligned"},
                       labels={"finding": "finding", "report": "report", "n": "label-changed trials"},
                       caption="Target-aligned margin change per finding (Table 17, Figure 4).")


def image_branch_by_finding(absent: pd.DataFrame, *, n_draws: int, seed: int, level: float = 0.95) -> TableResult:
    """Per finding, whether the report-absent answer follows the shown image (Table 17's absent column, with
    the evidence behind it).

    On the label-changed trials of the report-absent arm: the mean target-aligned change y_d (m_d − m_c)
    and the share of trials whose margin moves towards the substitute's label, that share with a
    patient-clustered percentile interval (0.5 is chance: the margin moves either way as often); and, over
    every trial of the finding and both images, the AUROC of the margin against the shown image's label
    (how well the image-only answer tells positive from negative images at all, across patients). A finding
    is *not aligned* when its mean aligned change is at most 0, and *at chance* when its share's interval
    holds 0.5. Values (``t17.absent_evidence.`` keys): ``<finding>.{n,aligned_change,share,share_lo,share_hi,
    auroc}``, ``n_findings`` (the composite left out of the counts), ``n_not_aligned``, ``n_not_aligned_at_chance``,
    ``n_at_chance`` (findings at chance, aligned or not), ``not_aligned`` (the not-aligned findings' names) and,
    where the trials carry ``pair_type``, ``share_same_patient`` (label-changed trials pairing a patient's own
    studies).
    """
    from sklearn.metrics import roc_auc_score

    if absent["trial_id"].duplicated().any():
        raise ValueError("image_branch_by_finding: duplicate trial ids")
    rows = []
    for finding, t in absent.groupby("finding", sort=True):
        sub = t[t["label_changed"].to_numpy(dtype=float) == 1]
        if sub.empty:
            continue
        y = np.where(sub["target_d"].to_numpy(dtype=float) == 1, 1.0, -1.0)
        v = y * (sub["margin_d"].to_numpy(dtype=float) - sub["margin_c"].to_numpy(dtype=float))
        frame = pd.DataFrame({"patient_id": sub["patient_id"].to_numpy(), "n": 1.0, "pos": (v > 0) * 1.0})
        res = cluster_bootstrap(frame, cluster="patient_id", sums={"n": "n", "pos": "pos"},
                                statistic=lambda s: {"share": _div(s["pos"], s["n"])}, n_draws=n_draws,
                                rng=_rng(seed), level=level)
        share, lo, hi = res.interval("share")
        margin = np.r_[t["margin_c"].to_numpy(dtype=float), t["margin_d"].to_numpy(dtype=float)]
        label = np.r_[t["target_c"].to_numpy(dtype=float), t["target_d"].to_numpy(dtype=float)]
        ok = ~np.isnan(label)
        auroc = float(roc_auc_score(label[ok], margin[ok])) if len(set(label[ok])) == 2 else float("nan")
        rows.append({"finding": finding, "n": int(len(sub)), "aligned_change": float(v.mean()), "share": float(share),
                     "share_lo": float(lo), "share_hi": float(hi), "auroc": auroc})
    frame = pd.DataFrame(rows)
    if frame.empty:
        raise ValueError("image_branch_by_finding: no label-changed trial")
    not_aligned = frame[frame["aligned_change"] <= 0]
    at_chance = not_aligned[(not_aligned["share_lo"] <= 0.5) & (0.5 <= not_aligned["share_hi"])]
    findings = frame[frame["finding"] != COMPOSITE]
    values: dict = {"t17.absent_evidence.n_findings": int(len(findings)),
                    "t17.absent_evidence.n_not_aligned": int((findings["aligned_change"] <= 0).sum()),
                    "t17.absent_evidence.n_not_aligned_at_chance": int((at_chance["finding"] != COMPOSITE).sum()),
                    "t17.absent_evidence.n_at_chance": int(((findings["share_lo"] <= 0.5)
                                                            & (0.5 <= findings["share_hi"])).sum()),
                    "t17.absent_evidence.not_aligned": ", ".join(
                        f for f in not_aligned["finding"] if f != COMPOSITE)}
    changed = absent[absent["label_changed"].to_numpy(dtype=float) == 1]
    if "pair_type" in changed:
        values["t17.absent_evidence.share_same_patient"] = float((changed["pair_type"] == "same-patient").mean())
    for r in frame.to_dict("records"):
        key = r["finding"].lower().replace(" ", "_")
        values.update({f"t17.absent_evidence.{key}.{k}": r[k]
                       for k in ("n", "aligned_change", "share", "share_lo", "share_hi", "auroc")})
    return TableResult(frame, values, index=("finding",),
                       metrics={"aligned_change": "target_aligned_change", "share": "share_target_aligned",
                                "share_lo": "share_target_aligned", "share_hi": "share_target_aligned",
                                "auroc": "auroc", "n": "count"},
                       labels={"finding": "finding", "n": "label-changed trials",
                               "aligned_change": "mean aligned change", "share": "share moving towards y_d",
                               "share_lo": f"share {level:.0%} lo", "share_hi": f"share {level:.0%} hi",
                               "auroc": "AUROC of the margin against the shown image's label (every trial)"},
                       caption="Report absent: per finding, how far the image-only answer follows the shown "
                               "image (Table 17's absent column with its evidence)")


def anchoring_gate_check(present: pd.DataFrame, absent: pd.DataFrame, *, w: float) -> dict:
    """Whether ``ref-anchored@w``'s planted gate holds trial by trial (a reference-model check).

    ``ref-anchored@w`` follows the report on the (report, question) pairs whose gate
    (:meth:`shovir_core.models.reference.Anchored.gate` of the stored ``report_sha256`` and the
    finding) is below ``w``, and the image otherwise. So with the report, the margin change
    Δm = m_d − m_c is 0 on report-branch trials (the same report on both images) and equals the
    report-absent Δm on image-branch trials, exactly, on every question including the composite.
    Returns ``n_report_branch``, ``n_image_branch``, ``share_report_branch`` (≈ w),
    ``max_abs_error`` and ``holds`` (error ≤ 1e-9 on every trial).
    """
    from ..models.reference import Anchored

    p, a = pair_arms(present, absent, names=["present", "absent"])
    follows = np.array([Anchored.gate(h, f) < w for h, f in zip(p["report_sha256"], p["finding"])])
    dp = (p["margin_d"] - p["margin_c"]).to_numpy(float)
    da = (a["margin_d"] - a["margin_c"]).to_numpy(float)
    err = float(np.abs(dp - np.where(follows, 0.0, da)).max()) if len(p) else float("nan")
    return {"n_report_branch": int(follows.sum()), "n_image_branch": int((~follows).sum()),
            "share_report_branch": float(follows.mean()) if len(p) else float("nan"),
            "max_abs_error": err, "holds": bool(len(p) and err <= 1e-9)}


# --------------------------------------------------------------------------- Part E
def part_e(values: Mapping[str, float]) -> TableResult:
    """The paper's App. G / Table 4 consistency checks beside the same identities on this run.

    ``values``: the merged values of :func:`policy_table`, :func:`composite_excluded`,
    :func:`transitions_table` and :func:`aligned_by_finding` (report present ``P``, absent ``A``).
    """
    from .part_e import RunCheck, part_e_beside

    v = values
    pol = "policy.u_negative"
    n = v["t16.present.n_trials"]
    checks = {
        "t4.label_split": RunCheck("label-changed + unchanged = trials retained (P)", v[f"{pol}.present.n_retained"],
                                   v[f"{pol}.present.n_changed"] + v[f"{pol}.present.n_unchanged"]),
        "t4.fr_unchanged": RunCheck("P unchanged FR = unchanged flips / unchanged trials",
                                    v[f"{pol}.present.fr_unchanged"],
                                    v["t16.present.unchanged_flips"] / v["t16.present.n_unchanged"]),
        "t4.fr_changed": RunCheck("P changed FR = (flips − unchanged flips) / changed trials",
                                  v[f"{pol}.present.fr_changed"],
                                  (v["t16.present.flips"] - v["t16.present.unchanged_flips"]) / v["t16.present.n_changed"]),
        "t4.headline_P_from_cells": RunCheck("headline P = the four flip cells / trials", v["t15.all14.fr_present"],
                                             v["t16.present.flip_cells_sum"] / n),
        "t4.A_unchanged": RunCheck("A unchanged FR = unchanged flips / unchanged trials", v[f"{pol}.absent.fr_unchanged"],
                                   v["t16.absent.unchanged_flips"] / v["t16.absent.n_unchanged"]),
        "t4.A_pooled": RunCheck("headline A = (unchanged flips + FR_changed × changed) / trials",
                                v["t15.all14.fr_absent"],
                                (v["t16.absent.unchanged_flips"] + v[f"{pol}.absent.fr_changed"]
                                 * v["t16.absent.n_changed"]) / n, tol=1e-9),
        "t4.transitions_sum": RunCheck("c→w + w→c + FR on changed trials = 1 (P)", 1.0,
                                       v["t16.present.correct_to_wrong"] + v["t16.present.wrong_to_correct"]
                                       + v[f"{pol}.present.fr_changed"]),
        "t4.correct_correct_feasible": RunCheck("correct→correct flips ≤ label-changed flips (P)",
                                                v["t16.present.correct_to_correct.n"], v["t16.present.changed_flips"],
                                                op="<="),
        "t4.ba_orig_policy": RunCheck("concordant BA of the policy table = of the accuracy table (P)",
                                      v[f"{pol}.present.ba_concordant"], v["t15.all14.ba_concordant"]),
        "g.pol.excl.retained": RunCheck("uncertain → excluded retains at most all trials",
                                        v["policy.u_excluded.present.n_retained"], n, op="<="),
        "g.f13.changed": RunCheck("label changes: 13 findings + composite = all 14", v["t15.all14.n_label_changed"],
                                  v["t15.f13.n_label_changed"] + v["t15.composite.n_label_changed"]),
        "g.f13.composite_bound": RunCheck("composite label changes ≤ composite trials",
                                          v["t15.composite.n_label_changed"], v["t15.composite.n_trials"], op="<="),
        "t15.diff": RunCheck("13-finding diff = FR_A − FR_P (pp)", v["t15.f13.diff_pp"],
                             100 * (v["t15.f13.fr_absent"] - v["t15.f13.fr_present"])),
        "g.aligned_P": RunCheck("Figure 4 aligned change P = the policy table's", v["t17.present.aligned_change"],
                                v[f"{pol}.present.aligned_change"]),
    }
    return part_e_beside(checks)


_T17 = {"pleural_effusion": "pe", "support_devices": "sd", "edema": "edema", "pneumothorax": "ptx",
        "consolidation": "consolidation", "cardiomegaly": "cardiomegaly", "composite": "composite"}

PAPER_KEYS: dict[str, str] = {
    "weight.diff_min_pp": "g.weighting_lo", "weight.diff_max_pp": "g.weighting_hi",
    "policy.u_negative.present.n_changed": "g.changed_trials",
    "policy.u_negative.present.n_unchanged": "g.unchanged_trials",
    "policy.u_negative.present.fr_changed": "t4.fr_changed", "policy.u_negative.present.fr_unchanged": "t4.fr_unchanged",
    "policy.u_negative.present.diff_pp": "t4.diff", "policy.u_negative.present.ba_concordant": "g.pol.neg.ba",
    "policy.u_negative.present.aligned_change": "g.pol.neg.aligned",
    "policy.u_positive.present.n_changed": "g.pol.pos.changed",
    "policy.u_positive.present.fr_changed": "g.pol.pos.fr_changed",
    "policy.u_positive.present.fr_unchanged": "g.pol.pos.fr_unchanged", "policy.u_positive.present.diff_pp": "g.pol.pos.diff",
    "policy.u_excluded.present.n_changed": "g.pol.excl.changed", "policy.u_excluded.present.n_retained": "g.pol.excl.retained",
    "policy.u_excluded.present.fr_changed": "g.pol.excl.fr_changed",
    "policy.u_excluded.present.fr_unchanged": "g.pol.excl.fr_unchanged", "policy.u_excluded.present.diff_pp": "g.pol.excl.diff",
    "policy.u_negative_b_excluded.present.n_retained": "g.pol.unmentioned_trials",
    "policy.u_negative_b_excluded.present.diff_pp": "g.pol.unmentioned_diff",
    "policy.u_negative.absent.fr_changed": "g.A.fr_changed", "policy.u_negative.absent.fr_unchanged": "g.A.fr_unchanged",
    "policy.u_negative.absent.diff_pp": "g.A.diff",
    "t15.f13.fr_present": "t15.P", "t15.f13.fr_absent": "t15.A", "t15.f13.diff_pp": "t15.diff",
    "t15.f13.n_label_changed": "g.f13.changed", "t15.composite.n_label_changed": "g.f13.composite_changed",
    "t15.f13.acc_concordant": "g.f13.acc_orig", "t15.f13.ba_concordant": "g.f13.ba_orig",
    "t15.f13.acc_discordant": "g.f13.acc_sub", "t15.f13.fr_changed": "g.f13.fr_changed",
    "t15.f13.fr_unchanged": "g.f13.fr_unchanged",
    "t15.second.fr_present": "t15.b4.P", "t15.second.fr_absent": "t15.b4.A", "t15.second.diff_pp": "t15.b4.diff",
    "t15.second.acc_concordant": "g.f13.b4.acc_orig", "t15.second.ba_concordant": "g.f13.b4.ba_orig",
    "t15.second.acc_discordant": "g.f13.b4.acc_sub", "t15.second.fr_changed": "g.f13.b4.fr_changed",
    "t15.second.fr_unchanged": "g.f13.b4.fr_unchanged",
    "t16.present.correct_to_wrong": "g.cw_share", "t16.present.wrong_to_correct": "g.wc_share",
    "t16.present.cond_correct_to_wrong": "g.cond_cw_P", "t16.absent.cond_correct_to_wrong": "g.cond_cw_A",
    "t16.present.n_correct_original": "g.correct_orig", "t16.present.n_correct_substitute": "g.correct_sub",
    "t16.present.flip_cells_sum": "g.flip_cells", "t16.present.unchanged_flips": "g.unchanged_flips_P",
    "t16.absent.unchanged_flips": "g.unchanged_flips_A",
    "t17.present.aligned_change": "f4.aligned_P", "t17.absent.aligned_change": "f4.aligned_A",
    **{f"t17.{arm}.by_finding.{f}": f"t17.{k}.{a}" for f, k in _T17.items() for arm, a in (("present", "P"), ("absent", "A"))},
}
"""Run value key -> published value id (paper ``modalens``) of App. G, Tables 15-17 and Figure 4."""

"""ModaLens tables and figures as pure functions of ``modalens`` run records (trial frames).

Every table function takes the ``trials`` frames of :mod:`shovir_core.protocols.modalens` records
(one frame per arm) and returns a :class:`~shovir_core.tables.result.TableResult`: the frame (numbers
unformatted), a flat dict of values whose keys are the glue keys without the ``ml.`` prefix (e.g.
``t2.all14.present.flip_rate``) and display metadata; the notebook attaches the records with
``.with_runs(runs)``. The arm statistics they read (answers under a readout, paired arms, rates and
their clustered intervals) are :mod:`shovir_core.metrics.arms`; :func:`design_subset` picks a design's
trials.

Readouts (``lowercase``, ``family``, ``generated``; ModaLens §2, App. I) are read as
:mod:`shovir_core.metrics.arms` describes; format compliance is the share of generations that open
with Yes or No.

Intervals are patient-clustered percentile bootstraps (:func:`shovir_core.stats.cluster_bootstrap`)
with rates, paired differences and ratios computed inside each draw; every call draws from
``numpy.random.default_rng(seed)``, so comparisons on the same patients share their resamples.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .. import vocab
from ..labels import FINDINGS_13
from ..metrics import modalens as mm
from ..metrics.arms import answers, check_trials, compare_arms, pair_arms, patient_bootstrap, rate_interval
from ..protocols.modalens import SIX_RANGE, prespecified_findings, primary_finding
from ..vocab import COMPOSITE, TIERS
from .result import TableResult

__all__ = ["instruction_shift", "design_subset",
    "cohort_table", "primary_comparison", "instruction_table", "accuracy_table", "readout_validation",
    "margin_changes", "margin_summary", "margin_by_finding", "anchoring_sweep", "six_findings", "DESIGN_LABELS",
]


# --------------------------------------------------------------------------- trials
DESIGN_LABELS = {"all14": "all 14 questions", "f13": "13 finding questions (no composite)",
                 "one_q": "one question per case", "six": "prespecified questions"}
"""Question design id (:data:`shovir_core.vocab.DESIGNS`) -> the label a table shows."""


def six_findings(trials: pd.DataFrame, *, lo: float = SIX_RANGE[0], hi: float = SIX_RANGE[1]) -> list[str]:
    """The prespecified findings of a cohort (source yes-rate in ``[lo, hi]``; the window of a dataset
    is :func:`shovir_core.protocols.modalens.six_range`) from its all-14 trials."""
    per_case = trials[trials["finding"] != COMPOSITE].pivot_table(index="case_id", columns="finding",
                                                                  values="target_c", aggfunc="first")
    return prespecified_findings(per_case.reindex(columns=list(FINDINGS_13)), lo=lo, hi=hi)


def design_subset(trials: pd.DataFrame, design: str, *, six: Sequence[str] | None = None) -> pd.DataFrame:
    """The trials of a design taken from an all-14 record (``all14``, ``f13``, ``one_q``, ``six``).

    ``one_q`` keeps, per case, the question on the first positive source finding (CheXbert order,
    primary policy) or the composite question when no finding is positive -- the same rule as the
    protocol's ``one_q`` design, so the trials are identical.
    """
    check_trials(trials, "design_subset")
    if design == "all14":
        return trials
    if design == "f13":
        return trials[trials["finding"] != COMPOSITE]
    if design == "six":
        chosen = list(six) if six is not None else six_findings(trials)
        return trials[trials["finding"].isin(chosen)]
    if design == "one_q":
        per_case = trials[trials["finding"] != COMPOSITE].pivot_table(
            index="case_id", columns="finding", values="target_c", aggfunc="first")
        prim = primary_finding(per_case.reindex(columns=list(FINDINGS_13)))
        keep = trials["finding"].to_numpy() == prim.reindex(trials["case_id"]).to_numpy()
        return trials[keep]
    raise ValueError(f"unknown design {design!r}; use all14, f13, one_q or six")


_STATS = ("fr_1", "fr_2", "diff", "ratio")


def _row(block: str, row: str, r: Mapping) -> dict:
    out = {"block": block, "row": row}
    for stat in _STATS:
        out.update({stat: r[stat], f"{stat}_lo": r[f"{stat}_lo"], f"{stat}_hi": r[f"{stat}_hi"]})
    out.update({"n_trials": r["n_trials"], "n_patients": r["n_patients"]})
    return out


def _comparison_display(label_1: str, label_2: str) -> tuple[dict, dict]:
    """Metrics and headers of the :func:`_row` columns (``label_1``/``label_2`` name the two rates)."""
    metrics, labels = {"n_trials": "count", "n_patients": "count"}, {"n_trials": "trials", "n_patients": "patients"}
    for stat, metric, head in (("fr_1", "flip_rate", label_1), ("fr_2", "flip_rate", label_2),
                               ("diff", "paired_diff", "diff"), ("ratio", "ratio", "ratio")):
        for suffix in ("", "_lo", "_hi"):
            metrics[stat + suffix] = metric
            labels[stat + suffix] = head + suffix.replace("_", " ")
    return metrics, labels


def _put(values: dict, prefix: str, r: Mapping, names: tuple[str, str]) -> None:
    for side, key in zip(names, ("fr_1", "fr_2")):
        values[f"{prefix}.{side}.flip_rate"] = r[key]
        values[f"{prefix}.{side}.flip_rate_lo"] = r[f"{key}_lo"]
        values[f"{prefix}.{side}.flip_rate_hi"] = r[f"{key}_hi"]
        values[f"{prefix}.{side}.flips"] = r["flips_1" if key == "fr_1" else "flips_2"]
    values[f"{prefix}.diff_pp"] = 100 * r["diff"]
    values[f"{prefix}.diff_lo_pp"] = 100 * r["diff_lo"]
    values[f"{prefix}.diff_hi_pp"] = 100 * r["diff_hi"]
    values[f"{prefix}.ratio"] = r["ratio"]
    values[f"{prefix}.ratio_lo"] = r["ratio_lo"]
    values[f"{prefix}.ratio_hi"] = r["ratio_hi"]
    values[f"{prefix}.n_trials"] = r["n_trials"]
    values[f"{prefix}.n_patients"] = r["n_patients"]


# --------------------------------------------------------------------------- Table 1
def cohort_table(trials: pd.DataFrame, counts: Mapping[str, int], *, six: Sequence[str]) -> TableResult:
    """Table 1: cohort accounting and pair composition by tier, from one all-14 record."""
    check_trials(trials, "cohort_table")
    cases = trials.drop_duplicates("case_id")
    n_cases = len(cases)
    one_q = design_subset(trials, "one_q")
    rows = [
        ("dataset", "images", counts["n_images_dataset"]),
        ("dataset", "studies", counts["n_studies_dataset"]),
        ("dataset", "patients", counts["n_patients_dataset"]),
        ("cohort", "source studies (one frontal image each)", counts["n_source_studies"]),
        ("cohort", "studies without any substitute (dropped)", counts["n_no_substitute"]),
        ("cohort", "substitutes rejected for SSIM > threshold", counts["n_ssim_rejected"]),
        ("cohort", "cases in the cohort", counts["n_cases_cohort"]),
        ("cohort", "patients in the cohort", counts["n_patients_cohort"]),
        ("this run", "cases", n_cases),
        ("this run", "patients", int(cases["patient_id"].nunique())),
        ("this run", "patients with >= 2 studies", counts["n_patients_multi_study"]),
    ]
    for tier in (1, 2, 3):
        sub = cases[cases["tier"] == tier]
        name = sub["tier_name"].iloc[0] if len(sub) else TIERS[tier - 1]
        rows.append(("pairs by tier", f"tier {tier}: {name}", int(len(sub))))
    rows += [
        ("pairs", "same-patient pairs", int((cases["pair_type"] == "same-patient").sum())),
        ("pairs", "cross-patient pairs", int((cases["pair_type"] == "cross-patient").sum())),
        ("SSIM", "median", float(cases["ssim"].median())),
        ("SSIM", "quartile 1", float(cases["ssim"].quantile(0.25))),
        ("SSIM", "quartile 3", float(cases["ssim"].quantile(0.75))),
        ("SSIM", "maximum", float(cases["ssim"].max())),
        ("trials", "all-14 design", int(len(trials))),
        ("trials", "13-finding design", int(len(design_subset(trials, "f13")))),
        ("trials", "one-question design", int(len(one_q))),
        ("trials", "one-question: target yes", int((one_q["target_c"] == 1).sum())),
        ("trials", "one-question: target no (composite)", int((one_q["target_c"] == 0).sum())),
        ("trials", f"prespecified design ({len(six)} findings)", int(trials["finding"].isin(list(six)).sum())),
        ("labels", "all-14 trials with the asked label changed", int(trials["label_changed"].sum())),
    ]
    ssim = [r[0] == "SSIM" for r in rows]
    frame = pd.DataFrame({"group": [r[0] for r in rows], "quantity": [r[1] for r in rows],
                          "count": [np.nan if s else r[2] for r, s in zip(rows, ssim)],
                          "ssim": [r[2] if s else np.nan for r, s in zip(rows, ssim)]})
    keys = ["dataset.images", "dataset.studies", "dataset.patients", "source_studies", "no_substitute",
            "ssim_rejected", "cohort.cases", "cohort.patients", "cases", "patients", "patients_multi_study",
            "tier1", "tier2", "tier3", "same_patient", "cross_patient", "ssim.median", "ssim.q1", "ssim.q3",
            "ssim.max", "trials.all14", "trials.f13", "trials.one_q", "trials.one_q_yes", "trials.one_q_no",
            "trials.six", "trials.label_changed"]
    values = {f"t1.{k}": r[2] for k, r in zip(keys, rows)}  # counts stay integers
    values["t1.n_six"] = len(six)
    return TableResult(frame, values, metrics={"count": "count", "ssim": "ssim"}, index=("group", "quantity"),
                       labels={"count": "n", "ssim": "SSIM"},
                       caption="ModaLens Table 1: cohort accounting and pair composition by tier.")


# --------------------------------------------------------------------------- Table 2
def primary_comparison(arms: Mapping[str, pd.DataFrame], *, n_draws_primary: int, n_draws: int,
                       seed: int) -> TableResult:
    """Table 2: report present vs absent (image first), the text-first block and the one-question block.

    ``arms`` maps ``P``, ``A`` (image first) and ``P_tf``, ``A_tf`` (text first) to all-14 trials of
    one model under the plain prompt; the lowercase readout throughout.
    """
    for k in ("P", "A", "P_tf", "A_tf"):
        if k not in arms:
            raise ValueError(f"primary_comparison: arm {k!r} missing (have {sorted(arms)})")
    rows, values = [], {}
    spec = [
        ("all-14, image first", "report effect: A vs P", "t2.all14", ("absent", "present"), "A", "P", n_draws_primary),
        ("all-14, text first", "P: text first vs image first", "t2.text_first.present",
         ("text_first", "image_first"), "P_tf", "P", n_draws_primary),
        ("all-14, text first", "A: text first vs image first", "t2.text_first.absent",
         ("text_first", "image_first"), "A_tf", "A", n_draws_primary),
        ("all-14, text first", "report effect within text first: A vs P", "t2.text_first",
         ("absent", "present"), "A_tf", "P_tf", n_draws_primary),
    ]
    one = {k: design_subset(v, "one_q") for k, v in arms.items()}
    spec_one = [
        ("one question", "report effect: A vs P", "t2.one_q", ("absent", "present"), "A", "P", n_draws),
        ("one question", "P: text first vs image first", "t2.one_q.order_present",
         ("text_first", "image_first"), "P_tf", "P", n_draws),
    ]
    for block, row, prefix, names, k1, k2, draws in spec:
        r = compare_arms(arms[k1], arms[k2], n_draws=draws, seed=seed)
        rows.append(_row(block, row, r))
        _put(values, prefix, r, names)
    for block, row, prefix, names, k1, k2, draws in spec_one:
        r = compare_arms(one[k1], one[k2], n_draws=draws, seed=seed)
        rows.append(_row(block, row, r))
        _put(values, prefix, r, names)
    metrics, labels = _comparison_display("FR (1)", "FR (2)")
    return TableResult(pd.DataFrame(rows), values, metrics=metrics, labels=labels, index=("block", "row"),
                       caption="ModaLens Table 2: flip rates of arm (1) and arm (2) on the same trials, "
                               "their paired difference (1) − (2) and ratio (1) / (2).")


# --------------------------------------------------------------------------- Table 3
def instruction_table(arms: Mapping[str, pd.DataFrame], *, n_draws_primary: int, n_draws: int,
                      seed: int, design: str = "all14") -> TableResult:
    """Table 3 (``design="all14"``) or Table 5 (``"one_q"``): three readouts under the instruction.

    ``arms``: ``P_instr``, ``A_instr`` (instructed) and ``P``, ``A`` (plain prompt). Rows: each
    readout under the instruction, each readout under the plain prompt, with format compliance
    (share of generations opening with Yes or No) and the agreement of the lowercase readout with
    the generated answer. Every all-14 row is bootstrapped with ``n_draws_primary`` draws, as Table 2's
    all-14 rows and §4.1's are (the paper: 10,000 for the all-14 rows), so one estimate prints one
    interval wherever it appears (a reference model that ignores the instruction gives every readout
    the same A − P); the one-question rows (Table 5) with ``n_draws``.
    """
    for k in ("P", "A", "P_instr", "A_instr"):
        if k not in arms:
            raise ValueError(f"instruction_table: arm {k!r} missing (have {sorted(arms)})")
    sel = {k: design_subset(v, design) for k, v in arms.items()}
    tab = "t3" if design == "all14" else "t5"
    rows, values = [], {}
    for prompt, (kp, ka) in (("instructed", ("P_instr", "A_instr")), ("plain", ("P", "A"))):
        for readout in ("generated", "family", "lowercase"):
            draws = n_draws_primary if design == "all14" else n_draws
            r = compare_arms(sel[ka], sel[kp], readout=readout, n_draws=draws, seed=seed)
            prefix = f"{tab}.{prompt}.{readout}"
            _put(values, prefix, r, ("absent", "present"))
            row = _row(prompt, readout, r)
            for arm_key, side in ((kp, "present"), (ka, "absent")):
                yc, yd, valid = answers(sel[arm_key], "generated")
                values[f"{prefix}.{side}.compliance"] = float(valid.mean())
                if readout == "lowercase":
                    lc, ld, _ = answers(sel[arm_key], "lowercase")
                    agree = np.concatenate([(lc == yc)[valid], (ld == yd)[valid]])
                    values[f"{tab}.{prompt}.{side}.agreement_lowercase_generated"] = (
                        float(agree.mean()) if agree.size else float("nan"))
            row["compliance_p"] = values[f"{prefix}.present.compliance"]
            row["compliance_a"] = values[f"{prefix}.absent.compliance"]
            row["n_excluded"] = r["n_excluded"]
            rows.append(row)
    frame = pd.DataFrame(rows).rename(columns={"block": "prompt", "row": "readout"})
    metrics, labels = _comparison_display("FR A", "FR P")
    metrics.update({"compliance_p": "compliance", "compliance_a": "compliance", "n_excluded": "count"})
    labels.update({"compliance_p": "compliance P", "compliance_a": "compliance A",
                   "n_excluded": "excluded (unscoreable)", "diff": "diff A − P", "ratio": "ratio A / P"})
    what = "Table 3 (all-14)" if design == "all14" else "Table 5 (one question)"
    return TableResult(frame, values, metrics=metrics, labels=labels, index=("prompt", "readout"),
                       caption=f"ModaLens {what}: flip rates without (A) and with (P) the report under each "
                               "readout, instructed and plain prompt, with format compliance.")


def instruction_shift(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int, design: str = "one_q",
                      report: str = "absent") -> TableResult:
    """How far the answer instruction moves one arm's flip rate, per readout: FR(instructed) − FR(plain),
    paired by trial, with its patient-clustered interval (ModaLens Table 5: the instruction shifts A by
    +8.0 points under the lowercase readout but +0.3 [−1.4, 2.0] under the token family). ``arms`` as
    :func:`instruction_table`; values ``shift.<readout>.<report>_pp`` (with ``_lo``/``_hi``)."""
    plain, instr = ("P", "P_instr") if report == "present" else ("A", "A_instr")
    for k in (plain, instr):
        if k not in arms:
            raise ValueError(f"instruction_shift: arm {k!r} missing (have {sorted(arms)})")
    a, b = design_subset(arms[instr], design), design_subset(arms[plain], design)
    rows, values = [], {}
    for readout in ("lowercase", "family", "generated"):
        r = compare_arms(a, b, readout=readout, n_draws=n_draws, seed=seed)
        key = f"shift.{readout}.{report}_pp"
        values.update({key: 100 * r["diff"], f"{key}_lo": 100 * r["diff_lo"], f"{key}_hi": 100 * r["diff_hi"],
                       f"shift.{readout}.{report}.n_trials": r["n_trials"]})
        rows.append({"readout": readout, "plain": r["fr_2"], "instructed": r["fr_1"], "shift": r["diff"],
                     "lo": r["diff_lo"], "hi": r["diff_hi"], "n_trials": r["n_trials"]})
    return TableResult(pd.DataFrame(rows), values=values, index=("readout",),
                       metrics={"plain": "flip_rate", "instructed": "flip_rate", "shift": "paired_diff",
                                "lo": "paired_diff", "hi": "paired_diff", "n_trials": "count"},
                       labels={"plain": "flip rate, plain prompt", "instructed": "flip rate, instructed",
                               "shift": "instructed − plain", "n_trials": "trials"},
                       caption=f"The answer instruction's shift of the report-{report} flip rate, per readout.")


def readout_validation(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int) -> TableResult:
    """Table 5: readout validation on the one-question design (see :func:`instruction_table`)."""
    return instruction_table(arms, n_draws_primary=n_draws, n_draws=n_draws, seed=seed, design="one_q")


# --------------------------------------------------------------------------- Table 4
def accuracy_table(trials: pd.DataFrame, *, n_draws: int, seed: int, readout: str = "lowercase",
                   key: str = "t4") -> TableResult:
    """Table 4: report present, image first -- accuracy on the original and the substitute image,
    balanced accuracy, and flip rates on label-changed vs label-unchanged trials."""
    check_trials(trials, "accuracy_table")
    yc, yd, valid = answers(trials, readout)
    t = trials[valid]
    yc, yd = yc[valid], yd[valid]
    tc, td = t["target_c"].to_numpy(dtype=float), t["target_d"].to_numpy(dtype=float)
    if np.isnan(tc).any() or np.isnan(td).any():
        raise ValueError("accuracy_table: targets contain excluded labels; use a policy without exclusions")
    changed = t["label_changed"].to_numpy(dtype=float)
    flip = (yc != yd).astype(float)
    frame = pd.DataFrame({
        "patient_id": t["patient_id"].to_numpy(), "n": 1.0, "flip": flip,
        "ch": changed, "un": 1 - changed, "f_ch": flip * changed, "f_un": flip * (1 - changed),
        "ok_c": (yc == tc).astype(float), "ok_d": (yd == td).astype(float),
        "tp_c": yc * tc, "fn_c": (1 - yc) * tc, "tn_c": (1 - yc) * (1 - tc), "fp_c": yc * (1 - tc),
        "tp_d": yd * td, "fn_d": (1 - yd) * td, "tn_d": (1 - yd) * (1 - td), "fp_d": yd * (1 - td),
    })

    rate, ba = mm.rate_from_counts, mm.balanced_accuracy_from_counts

    def statistic(s):
        fr_ch, fr_un = rate(s["f_ch"], s["ch"]), rate(s["f_un"], s["un"])
        return {"flip_rate": rate(s["flip"], s["n"]), "fr_changed": fr_ch, "fr_unchanged": fr_un,
                "fr_changed_minus_unchanged": mm.paired_difference(fr_ch, fr_un),
                "acc_original": rate(s["ok_c"], s["n"]), "acc_substitute": rate(s["ok_d"], s["n"]),
                **{f"ba_{name}": ba(s[f"tp_{side}"], s[f"fn_{side}"], s[f"tn_{side}"], s[f"fp_{side}"])
                   for side, name in (("c", "original"), ("d", "substitute"))}}

    sums = {c: c for c in frame.columns if c != "patient_id"}
    res = patient_bootstrap(frame, sums, statistic, n_draws=n_draws, seed=seed)
    labels = {"flip_rate": "flip rate (all trials)", "fr_changed": "flip rate, label-changed trials",
              "fr_unchanged": "flip rate, label-unchanged trials",
              "fr_changed_minus_unchanged": "difference, changed − unchanged",
              "acc_original": "accuracy, original image (own label)",
              "acc_substitute": "accuracy, substitute image (its own label)",
              "ba_original": "balanced accuracy, original", "ba_substitute": "balanced accuracy, substitute"}
    row_metric = {"flip_rate": "flip_rate", "fr_changed": "flip_rate", "fr_unchanged": "flip_rate",
                  "fr_changed_minus_unchanged": "paired_diff", "acc_original": "accuracy",
                  "acc_substitute": "accuracy", "ba_original": "balanced_accuracy", "ba_substitute": "balanced_accuracy"}
    rows, values = [], {}
    for stat, label in labels.items():
        est, lo, hi = res.interval(stat)
        rows.append({"quantity": label, "metric": row_metric[stat], "estimate": est, "lo": lo, "hi": hi})
        values.update({f"{key}.{stat}": est, f"{key}.{stat}_lo": lo, f"{key}.{stat}_hi": hi})
    majority = mm.majority_baseline(tc)
    rows.append({"quantity": "majority baseline (original labels)", "metric": "majority_baseline",
                 "estimate": majority, "lo": np.nan, "hi": np.nan})
    values[f"{key}.majority"] = majority
    values.update({f"{key}.n_trials": int(len(t)), f"{key}.n_patients": int(t["patient_id"].nunique()),
                   f"{key}.n_cases": int(t["case_id"].nunique()), f"{key}.n_label_changed": int(changed.sum()),
                   f"{key}.n_correct_original": int(frame["ok_c"].sum()),
                   f"{key}.n_correct_substitute": int(frame["ok_d"].sum()), f"{key}.n_flips": int(flip.sum()),
                   f"{key}.n_flips_changed": int((flip * changed).sum()),
                   f"{key}.n_flips_unchanged": int((flip * (1 - changed)).sum()),
                   f"{key}.n_label_unchanged": int((1 - changed).sum())})
    lc = changed == 1
    if lc.any():
        tr = mm.transitions(yc[lc] == tc[lc], yd[lc] == td[lc])
        for name, r in tr.iterrows():
            rows.append({"quantity": f"label-changed transitions: {name}", "metric": "transition_share",
                         "estimate": r["share"], "lo": np.nan, "hi": np.nan})
            values[f"{key}.transition.{name.replace('->', '_to_')}"] = float(r["share"])
    # each row formats by its own metric (the renderer's "metric" column): flip rates and shares in %,
    # the difference in pp, accuracies as fractions
    return TableResult(pd.DataFrame(rows), values,
                       labels={"estimate": "estimate", "lo": "95% lo", "hi": "95% hi"}, index=("quantity",),
                       caption="ModaLens Table 4: accuracy on the original and the substitute image, and flip "
                               "rates on label-changed vs label-unchanged trials.")


# --------------------------------------------------------------------------- Figure 2
def _dm(trials: pd.DataFrame) -> np.ndarray:
    return (trials["margin_d"].to_numpy(dtype=float) - trials["margin_c"].to_numpy(dtype=float))


def margin_changes(present: pd.DataFrame, absent: pd.DataFrame, *, n_draws: int, seed: int,
                   threshold: float = 0.5) -> TableResult:
    """Figure 2: paired margin changes Δm = m_d − m_c with vs without the report (lowercase margins).

    Values: mean |Δm| per arm (with intervals), share |Δm| > ``threshold`` (all trials and
    label-unchanged trials), shares of trials with |Δm|_A > |Δm|_P (``share_absent_larger``),
    |Δm|_P > |Δm|_A (``share_present_larger``) and tied (``share_tied``; the three sum to 1),
    target-aligned change on
    label-changed trials. ``frame`` holds one row per trial and arm (for the histogram).
    """
    p, a = pair_arms(present, absent, names=["present", "absent"])
    dp, da = np.abs(_dm(p)), np.abs(_dm(a))
    values = {}
    for name, arm, d in (("present", p, dp), ("absent", a, da)):
        r = rate_interval(arm, d, n_draws=n_draws, seed=seed)
        values.update({f"fig2.{name}.mean_abs_dm": r["estimate"], f"fig2.{name}.mean_abs_dm_lo": r["lo"],
                       f"fig2.{name}.mean_abs_dm_hi": r["hi"]})
        values[f"fig2.{name}.share_above"] = float((d > threshold).mean())
        unchanged = arm["label_changed"].to_numpy(dtype=float) == 0
        values[f"fig2.{name}.share_above_unchanged"] = float((d[unchanged] > threshold).mean())
        yc, yd, _ = answers(arm, "lowercase")
        values[f"fig2.{name}.flip_rate"] = float((yc != yd).mean())
        ch = arm["label_changed"].to_numpy(dtype=float) == 1
        if ch.any():
            tac = mm.target_aligned_change(arm["margin_c"].to_numpy()[ch], arm["margin_d"].to_numpy()[ch],
                                           arm["target_d"].to_numpy()[ch])
            values[f"fig2.{name}.target_aligned_change"] = tac["target_aligned_change"]
            values[f"fig2.{name}.share_target_aligned"] = tac["share_target_aligned"]
    cmp = mm.margin_change_comparison(_dm(a), _dm(p))
    values["fig2.share_absent_larger"] = cmp["absent_larger"]
    values["fig2.share_present_larger"] = cmp["present_larger"]
    values["fig2.share_tied"] = cmp["tied"]
    values["fig2.threshold"] = threshold
    values["fig2.n_trials"] = int(len(p))
    frame = pd.concat([pd.DataFrame({"report": "present", "abs_dm": dp, "finding": p["finding"].to_numpy()}),
                       pd.DataFrame({"report": "absent", "abs_dm": da, "finding": a["finding"].to_numpy()})],
                      ignore_index=True)
    return TableResult(frame, values, metrics={"abs_dm": "mean_abs_margin_change"}, labels={"abs_dm": "|Δm|"},
                       caption="Figure 2 A/B: paired margin change |Δm| per trial and arm.")


def margin_summary(changes: TableResult) -> TableResult:
    """Figure 2's summary by arm from :func:`margin_changes`: mean |Δm| with its interval, share
    |Δm| above the threshold and the flip rate (values and run ids of ``changes`` kept)."""
    v = changes.values
    rows = [{"arm": f"report {arm}", "mean_abs_dm": v[f"fig2.{arm}.mean_abs_dm"],
             "mean_abs_dm_lo": v[f"fig2.{arm}.mean_abs_dm_lo"], "mean_abs_dm_hi": v[f"fig2.{arm}.mean_abs_dm_hi"],
             "share_above": v[f"fig2.{arm}.share_above"], "flip_rate": v[f"fig2.{arm}.flip_rate"]}
            for arm in vocab.REPORT_CONDITIONS]
    return TableResult(pd.DataFrame(rows), dict(v),
                       metrics={"mean_abs_dm": "mean_abs_margin_change", "mean_abs_dm_lo": "mean_abs_margin_change",
                                "mean_abs_dm_hi": "mean_abs_margin_change", "share_above": "share_margin_change_above",
                                "flip_rate": "flip_rate"},
                       labels={"mean_abs_dm_lo": "lo", "mean_abs_dm_hi": "hi",
                               "share_above": f"share |Δm| > {v['fig2.threshold']:g}"},
                       run_ids=changes.run_ids, index=("arm",),
                       caption="Figure 2: margin changes under image swap with and without the report.")


def margin_by_finding(present: pd.DataFrame, absent: pd.DataFrame) -> TableResult:
    """Figure 2C: mean |Δm| per finding (frame index ``finding``) with and without the report.

    ``values``: ``fig2.n_findings_absent_larger`` (questions whose mean |Δm| is larger without the
    report) and ``fig2.n_questions``.
    """
    p, a = pair_arms(present, absent, names=["present", "absent"])
    out = pd.DataFrame({"finding": p["finding"], "present": np.abs(_dm(p)), "absent": np.abs(_dm(a))})
    out = out.groupby("finding")[["present", "absent"]].mean()
    values = {"fig2.n_findings_absent_larger": int((out["absent"] > out["present"]).sum()),
              "fig2.n_questions": int(len(out))}
    return TableResult(out, values, metrics={"present": "mean_abs_margin_change", "absent": "mean_abs_margin_change"},
                       labels={"present": "mean |Δm|, report present", "absent": "mean |Δm|, report absent"},
                       caption="Figure 2C: mean |Δm| per question.")


# --------------------------------------------------------------------------- validation
def _gate_range(present: pd.DataFrame, flips_absent: np.ndarray, *, w: float, n_draws: int,
                seed: int, level: float = 0.95) -> tuple[float, float]:
    """Central ``level`` range of the report-present flip rate of ``ref-anchored@w`` over its gate.

    The gate sends a (report, question) pair to the image branch with probability 1 − w, one
    draw per distinct pair (``report_sha256``, finding), shared by every trial of that pair; a
    report-present trial flips exactly when its pair takes the image branch and its report-absent
    trial flips. Given the report-absent flips, the rate is Σ_u B_u k_u / n with B_u ~
    Bernoulli(1 − w) per pair u and k_u its report-absent flips; simulated ``n_draws`` times.
    """
    units = pd.Series(flips_absent.astype(float)).groupby(
        [present["report_sha256"].to_numpy(), present["finding"].to_numpy()]).sum().to_numpy()
    rng = np.random.default_rng(seed)
    image = rng.random((n_draws, len(units))) >= w
    rates = image.astype(float) @ units / len(flips_absent)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(rates, tail)), float(np.quantile(rates, 1.0 - tail))


def anchoring_sweep(pairs: Mapping[float, tuple[pd.DataFrame, pd.DataFrame]], *, key: str = "validation",
                    names: Mapping[float, str] | None = None, gate_draws: int | None = None,
                    gate_level: float = 0.95, seed: int = 0) -> TableResult:
    """Flip rates of ``ref-anchored@w`` (or any model keyed by a number) with and without the report.

    ``pairs`` maps w -> (present trials, absent trials). Frame (index ``w``): ``fr_present``,
    ``fr_absent``, ``present_equals_absent`` (every lowercase readout and margin identical between
    the arms), ``n_trials``. ``values``: ``<key>.<name>.fr_present`` / ``.fr_absent`` per row, where
    ``names`` maps w to its name (default ``w<w>`` with ``.`` -> ``p``: ``w0p25``).

    With ``gate_draws`` (``ref-anchored@w`` records, which store ``report_sha256``) the frame adds
    ``fr_expected`` = (1 − w) · ``fr_absent`` (the planted expectation), ``gate_lo`` / ``gate_hi``
    (the central ``gate_level`` range of the report-present rate over the gate's draws, one per distinct
    (report, question) pair: :func:`_gate_range`; where reports repeat -- a fixed template -- pairs,
    not trials, are the sampling units) and ``within_gate_range``; values ``<key>.<name>.fr_expected``,
    ``gate_lo``, ``gate_hi``, ``within_gate_range`` and ``<key>.n_gate_units`` (distinct pairs).
    """
    rows = []
    n_units = set()
    for w, (present, absent) in sorted(pairs.items()):
        p, a = pair_arms(present, absent, names=["present", "absent"])
        pc, pd_, _ = answers(p, "lowercase")
        ac, ad, _ = answers(a, "lowercase")
        same = (np.array_equal(pc, ac) and np.array_equal(pd_, ad)
                and np.allclose(p[["margin_c", "margin_d"]].to_numpy(float), a[["margin_c", "margin_d"]].to_numpy(float),
                                rtol=0, atol=1e-9))
        row = {"w": w, "fr_present": float((pc != pd_).mean()), "fr_absent": float((ac != ad).mean())}
        if gate_draws is not None:
            lo, hi = _gate_range(p, ac != ad, w=w, n_draws=gate_draws, seed=seed, level=gate_level)
            row.update({"fr_expected": (1.0 - w) * row["fr_absent"], "gate_lo": lo, "gate_hi": hi,
                        "within_gate_range": bool(lo - 1e-12 <= row["fr_present"] <= hi + 1e-12)})
            n_units.add(int(p.groupby(["report_sha256", "finding"]).ngroups))
        rows.append({**row, "present_equals_absent": bool(same), "n_trials": int(len(p))})
    frame = pd.DataFrame(rows).set_index("w")
    values = {}
    for w, row in frame.iterrows():
        name = (names or {}).get(w) or f"w{w:g}".replace(".", "p")  # w0.25 -> w0p25
        values[f"{key}.{name}.fr_present"] = row["fr_present"]
        values[f"{key}.{name}.fr_absent"] = row["fr_absent"]
        if gate_draws is not None:
            values.update({f"{key}.{name}.{k}": row[k] for k in ("fr_expected", "gate_lo", "gate_hi")})
            values[f"{key}.{name}.within_gate_range"] = bool(row["within_gate_range"])
    if gate_draws is not None:
        values[f"{key}.n_gate_units"] = max(n_units) if n_units else 0
        values[f"{key}.gate_draws"] = int(gate_draws)
        values[f"{key}.gate_level"] = float(gate_level)
    metrics = {"fr_present": "flip_rate", "fr_absent": "flip_rate", "n_trials": "count"}
    labels = {"fr_present": "flip rate, report present", "fr_absent": "flip rate, report absent",
              "present_equals_absent": "present = absent", "n_trials": "trials", "w": "anchoring weight w"}
    if gate_draws is not None:
        metrics.update({"fr_expected": "flip_rate", "gate_lo": "flip_rate", "gate_hi": "flip_rate"})
        labels.update({"fr_expected": "expected (1 − w) × report absent", "gate_lo": "gate range low",
                       "gate_hi": "gate range high", "within_gate_range": "within range"})
    return TableResult(frame, values, metrics=metrics, labels=labels,
                       caption="Reference-model validation: swap flip rates against the known report weight w"
                               + (f"; the expected report-present rate (1 − w) × report absent and the central {gate_level:.1%} "
                                  "range of the report-present rate over the gate's draws (one per distinct "
                                  "report–question pair)." if gate_draws is not None else "."))



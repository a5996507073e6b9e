"""ModaLens Appendix F (Tables 13, 14; Table 4's MedGemma-4B row): the audit on other models.

* :func:`lineage_table` (Table 14, "a third lineage and a scale check"): per model, the one-question
  design under "Answer with exactly Yes or No.", report present (P) and absent (A), with the
  token-family and generated readouts side by side -- flip rates, paired difference A − P and ratio
  with patient-clustered intervals, format compliance (share of generations that open with Yes or
  No), agreement of the generated answer with the token family, balanced accuracy of the A arm
  against the substitute's label, and balanced accuracy against the case's own report label, P → A.
* :func:`six_questions_table` (Table 13): the six prespecified questions (source yes-rate in
  [20 %, 80 %], fixed from the labels before any model output), generated answers: the report
  effect per model, image-only (A arm) balanced accuracy, sensitivity and specificity on the
  original and on the substitute image.
* :func:`model_row` (Table 4's MedGemma-4B row): a second model's all-14 flip rate with the
  report, its substitute balanced accuracy and its paired difference against the primary model on
  the same trials.

Paper values (App. F): LLaVA-NeXT 2.59 % vs 15.35 %, 12.75 pp [11.10, 14.44], ratio 5.92;
Qwen3.5-27B 0.88 % vs 20.48 %, 19.60 pp; compliance 1.000 in all eight cells; six questions
19,194 trials per model, report effect 13.1-20.9 pp; MedGemma-4B all-14 P 7.42 %, 2.7 pp more than
MedGemma-27B, substitute BA 0.625.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics.arms import answers, compare_arms, pair_arms
from ..stats import clustered_balanced_accuracy
from ..protocols.modalens import SIX_RANGE
from .modalens import design_subset, six_findings
from .result import TableResult

__all__ = ["compliance", "generated_family_agreement", "balanced_accuracy_interval", "lineage_table",
           "six_questions_table", "model_row", "second_model_table", "uninstructed_table", "PAPER_KEYS"]

PAPER_KEYS = {
    "t14.llava-next-mistral-7b.family.P.flip_rate": "f.llava.P", "t14.llava-next-mistral-7b.family.A.flip_rate": "f.llava.A",
    "t14.llava-next-mistral-7b.family.ratio": "f.llava.ratio",
    "t14.llava-next-mistral-7b.generated.diff_pp": "f.llava.gen_diff",
    "t14.qwen3.5-27b.family.P.flip_rate": "f.qwen27.P", "t14.qwen3.5-27b.family.A.flip_rate": "f.qwen27.A",
    "t14.qwen3.5-27b.family.ratio": "f.qwen27.ratio", "t14.qwen3.5-27b.generated.diff_pp": "f.qwen27.gen_diff",
    "t14.qwen3.5-9b.family.P.flip_rate": "f.qwen9.P", "t14.qwen3.5-9b.family.A.flip_rate": "f.qwen9.A",
    "t14.llava-next-mistral-7b.agree_sub_A": "f.llava.agree_sub", "t14.qwen3.5-27b.agree_sub_A": "f.qwen27.agree_sub",
    "t14.llava-next-mistral-7b.ba_own_P": "f.llava.ba_report_P", "t14.llava-next-mistral-7b.ba_own_A": "f.llava.ba_report_A",
    "t14.qwen3.5-27b.ba_own_P": "f.qwen27.ba_report_P", "t14.qwen3.5-27b.ba_own_A": "f.qwen27.ba_report_A",
    "t14.llava-next-mistral-7b.ba_sub_A": "f.llava.ba_sub",
    "t14.qwen3.5-27b.ba_sub_A": "f.qwen27.ba_sub",
    "t14.qwen3.5-9b.ba_sub_A": "f.qwen9.ba_sub",
    "t13.qwen3.5-9b.ba_orig": "f.six.ba.qwen9",
    "t13.qwen3.5-27b.ba_orig": "f.six.ba.qwen27",
    "t13.llava-next-mistral-7b.ba_orig": "f.six.ba.llava",
    "t4.medgemma-4b.flip_rate": "t4.b4.P",
    "t4.medgemma-4b.more_pp": "t4.b4.more",
    "t4.medgemma-4b.ba_substitute": "t4.b4.ba_sub",
    "f.medgemma-4b.one_q.P.flip_rate": "f.b4.P", "f.medgemma-4b.one_q.A.flip_rate": "f.b4.A",
    "f.medgemma-4b.one_q.diff_pp": "f.b4.diff", "f.medgemma-4b.one_q.ratio": "f.b4.ratio",
    "f.medgemma-4b.one_q.ba_orig_P": "f.b4.ba_P", "f.medgemma-4b.one_q.ba_orig_A": "f.b4.ba_A",
    "f.medgemma-4b.one_q.yes_A": "f.b4.yes_A", "f.medgemma-4b.one_q.specificity_A": "f.b4.spec_A",
    "f.medgemma-4b.one_q.ba_sub_A": "f.b4.ba_sub",
    "f.medgemma-4b.all14.A.flip_rate": "f.b4.all14.A", "f.medgemma-4b.all14.diff_pp": "f.b4.all14.diff",
    "f.medgemma-4b.all14.ratio": "f.b4.all14.ratio",
    "f.qwen3.5-9b.plain.A.yes": "f.qwen9.yes_noinstr",
}
"""App. F value key -> published value id (paper ``modalens``); keys present only for the models run."""


def compliance(trials: pd.DataFrame) -> float:
    """Share of generations (both images) that open with Yes or No (the ``compliant_*`` flags)."""
    cols = [c for c in ("compliant_c", "compliant_d") if c in trials.columns]
    if len(cols) != 2:
        raise ValueError("compliance: trials lack compliant_c / compliant_d (no generated answers recorded)")
    flags = np.concatenate([trials[c].to_numpy() for c in cols])
    return float(np.mean([bool(f) for f in flags]))


def generated_family_agreement(trials: pd.DataFrame) -> float:
    """Agreement of the generated answer with the token-family readout over scoreable generations."""
    gc, gd, valid = answers(trials, "generated")
    fc, fd, _ = answers(trials, "family")
    agree = np.concatenate([(gc == fc)[valid], (gd == fd)[valid]])
    return float(agree.mean()) if agree.size else float("nan")


def balanced_accuracy_interval(trials: pd.DataFrame, *, readout: str, side: str, n_draws: int,
                               seed: int) -> dict:
    """Balanced accuracy of one image side's answer against that side's own label, with interval.

    ``side`` ``"c"`` scores the source image against the source label (the case's own report),
    ``"d"`` the substitute against the substitute's label. Returns ``ba``, ``ba_lo``, ``ba_hi``,
    ``sensitivity``, ``specificity``, ``accuracy``, ``yes_rate`` and ``n``.
    """
    if side not in ("c", "d"):
        raise ValueError(f"side must be 'c' or 'd', got {side!r}")
    yc, yd, valid = answers(trials, readout)
    out = clustered_balanced_accuracy((yc if side == "c" else yd)[valid],
                                      trials[f"target_{side}"].to_numpy(dtype=float)[valid],
                                      clusters=trials["patient_id"].to_numpy()[valid], n_draws=n_draws, seed=seed)
    return {"ba": out["balanced_accuracy"], "ba_lo": out["lo"], "ba_hi": out["hi"],
            **{k: out[k] for k in ("sensitivity", "specificity", "accuracy", "yes_rate", "n")}}


def _cut(trials: pd.DataFrame, design: str, six: list[str] | None = None) -> pd.DataFrame:
    """The trials of ``design``: a record made with that design as it is, an all-14 record cut to it."""
    if "design" in trials.columns and (trials["design"] == design).all():
        return trials
    if "design" in trials.columns and not (trials["design"] == "all14").all():
        raise ValueError(f"cannot cut a {trials['design'].iloc[0]!r} record to the {design!r} design")
    return design_subset(trials, design, six=six)


def _model_arms(arms: Mapping, what: str) -> None:
    if not arms:
        raise ValueError(f"{what}: no model given")
    for model, pair in arms.items():
        if not (isinstance(pair, Mapping) and {"P", "A"} <= set(pair)):
            raise ValueError(f"{what}: model {model!r} needs arms 'P' and 'A' (got {pair!r:.60})")


def lineage_table(arms: Mapping[str, Mapping[str, pd.DataFrame]], *, n_draws: int, seed: int,
                  design: str = "one_q", readouts: tuple[str, ...] = ("family", "generated")) -> TableResult:
    """Table 14: per model and readout, P vs A flip rates under the instruction (see the module docstring).

    ``arms`` maps a model name to ``{"P": trials, "A": trials}`` of instructed records; all-14
    records are cut to ``design`` (:func:`~shovir_core.tables.modalens.design_subset`).
    """
    _model_arms(arms, "lineage_table")
    rows, values = [], {}
    generations = 0
    for model, pair in arms.items():
        p, a = pair_arms(_cut(pair["P"], design), _cut(pair["A"], design), names=["P", "A"])
        for arm_name, arm in (("P", p), ("A", a)):
            if (arm["instruction"] == "none").any():
                raise ValueError(f"lineage_table: {model} arm {arm_name} is not instructed")
        key = f"t14.{model}"
        comp = {"P": compliance(p), "A": compliance(a)}
        agree = {"P": generated_family_agreement(p), "A": generated_family_agreement(a)}
        generations += 2 * (len(p) + len(a))
        for readout in readouts:
            r = compare_arms(a, p, readout=readout, n_draws=n_draws, seed=seed)
            rows.append({"model": model, "readout": readout, "fr_P": r["fr_2"], "fr_A": r["fr_1"],
                         "diff": r["diff"], "diff_lo": r["diff_lo"], "diff_hi": r["diff_hi"],
                         "ratio": r["ratio"], "flips_P": r["flips_2"], "flips_A": r["flips_1"],
                         "trials": r["n_trials"], "patients": r["n_patients"],
                         "compliance_P": comp["P"], "compliance_A": comp["A"]})
            values.update({f"{key}.{readout}.P.flip_rate": r["fr_2"], f"{key}.{readout}.A.flip_rate": r["fr_1"],
                           f"{key}.{readout}.P.flips": r["flips_2"], f"{key}.{readout}.A.flips": r["flips_1"],
                           f"{key}.{readout}.diff_pp": 100 * r["diff"], f"{key}.{readout}.diff_lo_pp": 100 * r["diff_lo"],
                           f"{key}.{readout}.diff_hi_pp": 100 * r["diff_hi"], f"{key}.{readout}.ratio": r["ratio"],
                           f"{key}.{readout}.n_trials": r["n_trials"]})
        sub = balanced_accuracy_interval(a, readout="family", side="d", n_draws=n_draws, seed=seed)
        own = {arm: balanced_accuracy_interval(t, readout="family", side="c", n_draws=n_draws, seed=seed)
               for arm, t in (("P", p), ("A", a))}
        _, ad, _ = answers(a, "family")
        values.update({f"{key}.compliance.P": comp["P"], f"{key}.compliance.A": comp["A"],
                       f"{key}.agree_generated_family.P": agree["P"], f"{key}.agree_generated_family.A": agree["A"],
                       f"{key}.ba_sub_A": sub["ba"], f"{key}.ba_sub_A_lo": sub["ba_lo"], f"{key}.ba_sub_A_hi": sub["ba_hi"],
                       f"{key}.agree_sub_A": float((ad == a["target_d"].to_numpy(dtype=float)).mean()),
                       f"{key}.ba_own_P": own["P"]["ba"], f"{key}.ba_own_A": own["A"]["ba"],
                       f"{key}.n_patients": int(p["patient_id"].nunique()), f"{key}.n_cases": int(p["case_id"].nunique())})
    values["t14.n_generations"] = generations
    values["t14.n_cells"] = 2 * len(arms) * len(readouts)
    values["t14.min_compliance"] = min(values[k] for k in values if ".compliance." in k)
    never = [m for m in arms if values[f"t14.{m}.compliance.P"] == 0 and values[f"t14.{m}.compliance.A"] == 0]
    values["t14.n_never_compliant"] = len(never)
    values["t14.never_compliant"] = ", ".join(never) if never else "none"
    values["t14.min_patients"] = min(values[f"t14.{m}.n_patients"] for m in arms)
    caption = (f"One-question design under the answer instruction, {len(arms)} model(s), token-family and generated "
               f"readouts; patient-clustered 95% intervals, {n_draws} draws, seed {seed}.")
    frame = pd.DataFrame(rows)
    return TableResult(frame, values, index=("model", "readout"), metrics={c: m for c, m in _ARM_METRICS.items() if c in frame.columns},
                       labels=_ARM_LABELS, caption=caption)


_ARM_METRICS = {"fr_P": "flip_rate", "fr_A": "flip_rate", "diff": "paired_diff", "diff_lo": "paired_diff",
                "diff_hi": "paired_diff", "ratio": "ratio", "flips_P": "count", "flips_A": "count",
                "trials": "count", "patients": "count", "compliance_P": "compliance", "compliance_A": "compliance",
                "ba_orig": "balanced_accuracy", "ba_orig_lo": "balanced_accuracy", "ba_orig_hi": "balanced_accuracy",
                "sensitivity": "sensitivity", "specificity": "specificity", "ba_sub": "balanced_accuracy",
                "label_changing": "count"}
"""Columns of the App. F tables -> metric (flip rates in %, differences in pp, BA as fractions)."""

_ARM_LABELS = {"model": "model", "readout": "readout", "fr_P": "FR P", "fr_A": "FR A", "diff": "A − P",
               "diff_lo": "2.5%", "diff_hi": "97.5%", "ratio": "ratio A / P", "flips_P": "flips P",
               "flips_A": "flips A", "trials": "trials", "patients": "patients", "compliance_P": "compliance P",
               "compliance_A": "compliance A", "ba_orig": "BA original (A)", "ba_orig_lo": "BA 2.5%",
               "ba_orig_hi": "BA 97.5%", "ba_sub": "BA substitute (A)", "label_changing": "label-changing"}


def six_questions_table(arms: Mapping[str, Mapping[str, pd.DataFrame]], *, n_draws: int, seed: int,
                        readout: str = "generated", six: list[str] | None = None,
                        lo: float = SIX_RANGE[0], hi: float = SIX_RANGE[1]) -> TableResult:
    """Table 13: the six prespecified questions across models (see the module docstring).

    The question set is chosen from the source labels of the first model's P arm (``six_findings``
    with ``[lo, hi]``) unless given, and must be the same for every model.
    """
    _model_arms(arms, "six_questions_table")
    first = next(iter(arms.values()))["P"]
    chosen = list(six) if six is not None else six_findings(first, lo=lo, hi=hi)
    if not chosen:
        raise ValueError(f"six_questions_table: no finding has a source yes-rate in [{lo}, {hi}]")
    rows, values = [], {"t13.n_questions": len(chosen), "t13.questions": ", ".join(chosen) if chosen else "none"}
    for model, pair in arms.items():
        p, a = pair_arms(_cut(pair["P"], "six", chosen), _cut(pair["A"], "six", chosen), names=["P", "A"])
        r = compare_arms(a, p, readout=readout, n_draws=n_draws, seed=seed)
        orig = balanced_accuracy_interval(a, readout=readout, side="c", n_draws=n_draws, seed=seed)
        subst = balanced_accuracy_interval(a, readout=readout, side="d", n_draws=n_draws, seed=seed)
        key = f"t13.{model}"
        rows.append({"model": model, "trials": int(len(p)), "label_changing": int(p["label_changed"].sum()),
                     "fr_P": r["fr_2"], "fr_A": r["fr_1"], "diff": r["diff"],
                     "diff_lo": r["diff_lo"], "diff_hi": r["diff_hi"],
                     "ba_orig": orig["ba"], "ba_orig_lo": orig["ba_lo"], "ba_orig_hi": orig["ba_hi"],
                     "sensitivity": orig["sensitivity"], "specificity": orig["specificity"],
                     "ba_sub": subst["ba"]})
        values.update({f"{key}.n_trials": int(len(p)), f"{key}.n_label_changed": int(p["label_changed"].sum()),
                       f"{key}.diff_pp": 100 * r["diff"], f"{key}.diff_lo_pp": 100 * r["diff_lo"],
                       f"{key}.diff_hi_pp": 100 * r["diff_hi"], f"{key}.ba_orig": orig["ba"],
                       f"{key}.ba_orig_lo": orig["ba_lo"], f"{key}.ba_orig_hi": orig["ba_hi"],
                       f"{key}.sensitivity": orig["sensitivity"], f"{key}.specificity": orig["specificity"],
                       f"{key}.ba_sub": subst["ba"], f"{key}.ba_sub_lo": subst["ba_lo"], f"{key}.ba_sub_hi": subst["ba_hi"]})
    caption = (f"The {len(chosen)} prespecified question(s) ({', '.join(chosen)}), {readout} readout; report effect "
               f"A − P and image-only (A) balanced accuracy; {n_draws} draws.")
    frame = pd.DataFrame(rows)
    return TableResult(frame, values, index=("model",), metrics={c: m for c, m in _ARM_METRICS.items() if c in frame.columns},
                       labels=_ARM_LABELS, caption=caption)


def model_row(trials: pd.DataFrame, primary: pd.DataFrame, *, model: str, n_draws: int, seed: int,
              readout: str = "lowercase") -> TableResult:
    """Table 4's row of a second model (MedGemma-4B): its all-14 P flip rate, substitute BA and
    the paired difference against the primary model's P arm on the same trials."""
    r = compare_arms(trials, primary, readout=readout, n_draws=n_draws, seed=seed)
    sub = balanced_accuracy_interval(trials, readout=readout, side="d", n_draws=n_draws, seed=seed)
    key = f"t4.{model}"
    values = {f"{key}.flip_rate": r["fr_1"], f"{key}.flip_rate_lo": r["fr_1_lo"], f"{key}.flip_rate_hi": r["fr_1_hi"],
              f"{key}.primary_flip_rate": r["fr_2"], f"{key}.more_pp": 100 * r["diff"],
              f"{key}.more_lo_pp": 100 * r["diff_lo"], f"{key}.more_hi_pp": 100 * r["diff_hi"],
              f"{key}.ba_substitute": sub["ba"], f"{key}.ba_substitute_lo": sub["ba_lo"],
              f"{key}.ba_substitute_hi": sub["ba_hi"], f"{key}.n_trials": r["n_trials"]}
    frame = pd.DataFrame([{"model": model, "fr_P": r["fr_1"], "fr_P_lo": r["fr_1_lo"], "fr_P_hi": r["fr_1_hi"],
                           "primary_fr_P": r["fr_2"], "more": r["diff"], "more_lo": r["diff_lo"],
                           "more_hi": r["diff_hi"], "ba_sub": sub["ba"], "trials": r["n_trials"]}])
    return TableResult(frame, values, index=("model",),
                       metrics={"fr_P": "flip_rate", "fr_P_lo": "flip_rate", "fr_P_hi": "flip_rate",
                                "primary_fr_P": "flip_rate", "more": "paired_diff", "more_lo": "paired_diff",
                                "more_hi": "paired_diff", "ba_sub": "balanced_accuracy", "trials": "count"},
                       labels={"fr_P": "FR P", "fr_P_lo": "FR P 2.5%", "fr_P_hi": "FR P 97.5%",
                               "primary_fr_P": "primary model's FR P", "more": "more than the primary",
                               "more_lo": "2.5%", "more_hi": "97.5%", "ba_sub": "BA substitute", "trials": "trials"},
                       caption=f"Table 4 row of {model}: all-14, report present, {readout} readout.")


def second_model_table(present: pd.DataFrame, absent: pd.DataFrame, *, model: str, n_draws: int, seed: int,
                       readout: str = "lowercase") -> TableResult:
    """App. F's MedGemma-4B paragraph for any second model: one-question and all-14 report effects.

    ``present`` / ``absent`` are the model's all-14 records without instruction. One-question block:
    P and A flip rates, A − P and A / P with intervals, original-image balanced accuracy in P and A,
    the A arm's yes count, specificity and substitute balanced accuracy; all-14 block: P, A, A − P,
    A / P. Keys ``f.<model>.one_q.*`` and ``f.<model>.all14.*``.
    """
    rows, values = [], {}
    for design in ("one_q", "all14"):
        p, a = pair_arms(_cut(present, design), _cut(absent, design), names=["P", "A"])
        r = compare_arms(a, p, readout=readout, n_draws=n_draws, seed=seed)
        key = f"f.{model}.{design}"
        values.update({f"{key}.P.flip_rate": r["fr_2"], f"{key}.P.flip_rate_lo": r["fr_2_lo"],
                       f"{key}.P.flip_rate_hi": r["fr_2_hi"], f"{key}.A.flip_rate": r["fr_1"],
                       f"{key}.A.flip_rate_lo": r["fr_1_lo"], f"{key}.A.flip_rate_hi": r["fr_1_hi"],
                       f"{key}.diff_pp": 100 * r["diff"], f"{key}.diff_lo_pp": 100 * r["diff_lo"],
                       f"{key}.diff_hi_pp": 100 * r["diff_hi"], f"{key}.ratio": r["ratio"],
                       f"{key}.ratio_lo": r["ratio_lo"], f"{key}.ratio_hi": r["ratio_hi"],
                       f"{key}.n_trials": r["n_trials"]})
        row = {"model": model, "design": design, "fr_P": r["fr_2"], "fr_A": r["fr_1"], "diff": r["diff"],
               "diff_lo": r["diff_lo"], "diff_hi": r["diff_hi"], "ratio": r["ratio"],
               "trials": r["n_trials"]}
        if design == "one_q":
            bp = balanced_accuracy_interval(p, readout=readout, side="c", n_draws=n_draws, seed=seed)
            ba = balanced_accuracy_interval(a, readout=readout, side="c", n_draws=n_draws, seed=seed)
            bs = balanced_accuracy_interval(a, readout=readout, side="d", n_draws=n_draws, seed=seed)
            yc, _, _ = answers(a, readout)
            values.update({f"{key}.ba_orig_P": bp["ba"], f"{key}.ba_orig_A": ba["ba"],
                           f"{key}.yes_A": int(yc.sum()), f"{key}.specificity_A": ba["specificity"],
                           f"{key}.ba_sub_A": bs["ba"], f"{key}.ba_sub_A_lo": bs["ba_lo"],
                           f"{key}.ba_sub_A_hi": bs["ba_hi"]})
            row.update({"ba_orig_P": bp["ba"], "ba_orig_A": ba["ba"], "specificity": ba["specificity"],
                        "ba_sub": bs["ba"]})
        rows.append(row)
    frame = pd.DataFrame(rows)
    metrics = {**{c: m for c, m in _ARM_METRICS.items() if c in frame.columns},
               "ba_orig_P": "balanced_accuracy", "ba_orig_A": "balanced_accuracy"}
    return TableResult(frame, values, index=("model", "design"), metrics=metrics,
                       labels={**_ARM_LABELS, "design": "design", "ba_orig_P": "BA original P",
                               "ba_orig_A": "BA original A", "specificity": "specificity A",
                               "ba_sub": "BA substitute A"},
                       caption=f"{model}: report effect on the one-question and all-14 designs, {readout} readout.")


def _bare(tokens: pd.Series) -> np.ndarray:
    return tokens.fillna("").astype(str).str.replace("Ġ", " ").str.replace("▁", " ").str.strip().str.lower() \
        .isin(["yes", "no"]).to_numpy()


def uninstructed_table(present: pd.DataFrame, absent: pd.DataFrame, *, model: str, readout: str = "family",
                       design: str = "one_q") -> TableResult:
    """A model's arms without the answer instruction (App. F, Qwen3.5-9B): per arm the yes count of
    ``readout`` on the source image and the share of first generated tokens (greedy arg-max at the
    answer position, both images) that are a bare yes or no in any case or spacing."""
    rows, values = [], {}
    for arm, t in (("P", _cut(present, design)), ("A", _cut(absent, design))):
        if (t["instruction"] != "none").any():
            raise ValueError(f"uninstructed_table: {model} arm {arm} is instructed")
        yc, _, _ = answers(t, readout)
        bare = np.concatenate([_bare(t["top1_token_c"]), _bare(t["top1_token_d"])])
        key = f"f.{model}.plain.{arm}"
        values.update({f"{key}.yes": int(yc.sum()), f"{key}.n": int(len(t)), f"{key}.yes_rate": float(yc.mean()),
                       f"{key}.bare_first_token": float(bare.mean())})
        rows.append({"model": model, "arm": arm, "cases": int(len(t)), "yes": int(yc.sum()),
                     "yes_rate": float(yc.mean()), "bare": float(bare.mean())})
    return TableResult(pd.DataFrame(rows), values,
                       index=("model", "arm"), metrics={"cases": "count", "yes": "count", "yes_rate": "yes_rate", "bare": "share"},
                       labels={"model": "model", "arm": "arm", "yes": "yes (source image)",
                               "bare": "bare yes/no first token"},
                       caption=f"{model} without the answer instruction ({design}, {readout} readout).")

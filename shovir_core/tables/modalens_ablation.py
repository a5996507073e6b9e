"""ModaLens §4.2-4.3: the modality ablation (Tables 20, 23, 15) and per-finding agreement (Tables 10, 21, 22, 32).

The four cells (ModaLens §4.2, Table 20) are four ``modalens`` records of one model on the same cases:

==========  =================================  ===========================
cell        prompt                             arm (spec)
==========  =================================  ===========================
``full``    image + report + question          ``report: present``
``report+q``  report + question                ``report: present, image: false``
``image+q``   image + question                 ``report: absent``
``q``       question only                      ``report: absent, image: false``
==========  =================================  ===========================

Balanced accuracy is the answer on the original image (``c``; without an image both sides are the
same input) against the source study's label. *Pooled* computes it over all trials, *macro*
averages the per-finding values over the findings whose targets include both classes (balanced
accuracy is undefined for a finding without positives; such a finding is NaN and left out, in the
point estimate and inside each bootstrap draw). Image effect without the report = BA(image+q) − BA(q), with the
report = BA(full) − BA(report+q), interaction = the second minus the first
(:func:`shovir_core.metrics.modalens.interaction_from_cells`). Intervals are patient-clustered
percentile bootstraps with every cell, finding and difference computed inside each draw.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..labels import FINDINGS_13
from ..metrics import modalens as mm
from ..metrics.agreement import agreement_summary
from ..metrics.arms import answers, pair_arms
from ..stats import cluster_bootstrap
from ..vocab import COMPOSITE
from .modalens import design_subset
from .result import TableResult

__all__ = ["CELLS", "CELL_LABELS", "modality_ablation", "one_question_ablation", "per_finding_table",
           "AGREEMENT_COLUMNS", "same_answers", "part_e", "PAPER_KEYS", "validation_row"]

CELLS = mm.MODALITY_CELLS
"""``("full", "report+q", "image+q", "q")``."""

CELL_LABELS = {"full": "image + report + question", "report+q": "report + question",
               "image+q": "image + question", "q": "question only"}

_KEY = {"full": "full", "report+q": "report_q", "image+q": "image_q", "q": "q"}
"""Cell -> glue-key stem (the paper's ids: ``abl.full``, ``abl.report_q`` ...)."""


def _div(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)


def _ba(tp, fn, tn, fp):
    """Balanced accuracy from counts; NaN unless both target classes occur (undefined without
    positives or negatives), so a macro average (:func:`_nanmean2`) leaves such a finding out, in
    the full sample and inside every bootstrap draw alike."""
    return mm.balanced_accuracy_from_counts(tp, fn, tn, fp, both_classes=True)


def _nanmean2(rates: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(rates)
    total = np.where(ok, rates, 0.0).sum(axis=0)
    count = ok.sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _cells(cells: Mapping[str, pd.DataFrame], what: str) -> dict[str, pd.DataFrame]:
    missing = [c for c in CELLS if c not in cells]
    if missing:
        raise ValueError(f"{what}: cells {missing} missing (have {sorted(cells)}); need {list(CELLS)}")
    for c in ("report+q", "q"):
        t = cells[c]
        if "image_included" in t.columns and t["image_included"].astype(bool).any():
            raise ValueError(f"{what}: cell {c!r} must come from an image-absent arm (image: false)")
    for c in ("full", "image+q"):
        t = cells[c]
        if "image_included" in t.columns and not t["image_included"].astype(bool).all():
            raise ValueError(f"{what}: cell {c!r} must come from an arm that shows the image")
    for c, want in (("full", "present"), ("report+q", "present"), ("image+q", "absent"), ("q", "absent")):
        t = cells[c]
        if "report_condition" in t.columns and not (t["report_condition"] == want).all():
            raise ValueError(f"{what}: cell {c!r} must have the report {want}")
    paired = pair_arms(*(cells[c] for c in CELLS), names=list(CELLS))
    return dict(zip(CELLS, paired))


def same_answers(arm_1: pd.DataFrame, arm_2: pd.DataFrame, *, readout: str = "lowercase") -> bool:
    """Whether two arms give the same answer on every common trial, on both images."""
    a, b = pair_arms(arm_1, arm_2, names=["arm 1", "arm 2"])
    ac, ad, _ = answers(a, readout)
    bc, bd, _ = answers(b, readout)
    return bool(np.array_equal(ac, bc) and np.array_equal(ad, bd))


def modality_ablation(cells: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int, design: str = "all14",
                      readout: str = "lowercase", key: str = "t20") -> TableResult:
    """Table 20 (``design="all14"``) or the 13-finding cells of Table 15 (``design="f13"``).

    ``frame``: one row per cell with pooled and macro balanced accuracy and intervals. Values
    ``<key>.pooled.<cell>`` / ``<key>.macro.<cell>`` (cells ``full``, ``report_q``, ``image_q``,
    ``q``), ``<key>.<average>.image_without``, ``image_with``, ``interaction`` (each with
    ``_lo``/``_hi``), ``<key>.report_best_n`` (findings on which report + question is the best
    cell, strictly), ``<key>.n_macro_findings`` (findings in the macro average: those whose targets
    include both classes), ``<key>.ba_undefined`` (the others, ``", "``-joined, or ``"none"``) and
    ``<key>.point_matches_metrics`` (the bootstrap's point estimates equal
    :func:`shovir_core.metrics.modalens.modality_interaction`). Per-finding balanced accuracies
    of the cells are in :func:`per_finding_table`.
    """
    paired = _cells(cells, "modality_ablation")
    paired = {c: design_subset(t, design) for c, t in paired.items()}
    findings = sorted(paired["full"]["finding"].unique(), key=lambda f: (f == COMPOSITE, f))
    target = paired["full"]["target_c"].to_numpy(dtype=float)
    if np.isnan(target).any():
        raise ValueError("modality_ablation: source targets contain excluded labels")
    fcol = paired["full"]["finding"].to_numpy()
    data = {"patient_id": paired["full"]["patient_id"].to_numpy()}
    long = []
    for c in CELLS:
        yc, _, valid = answers(paired[c], readout)
        if not valid.all():
            raise ValueError(f"modality_ablation: cell {c!r} has unscoreable answers under {readout!r}")
        long.append(pd.DataFrame({"cell": c, "pred": yc, "target": target, "finding": fcol}))
        for f in findings:
            m = (fcol == f) * 1.0
            data.update({f"{c}|{f}|tp": m * yc * target, f"{c}|{f}|fn": m * (1 - yc) * target,
                         f"{c}|{f}|tn": m * (1 - yc) * (1 - target), f"{c}|{f}|fp": m * yc * (1 - target)})
    frame = pd.DataFrame(data)

    def statistic(s):
        out = {}
        for c in CELLS:
            per = [_ba(*(s[f"{c}|{f}|{k}"] for k in ("tp", "fn", "tn", "fp"))) for f in findings]
            tot = [sum(s[f"{c}|{f}|{k}"] for f in findings) for k in ("tp", "fn", "tn", "fp")]
            out[f"pooled.{c}"] = _ba(*tot)
            out[f"macro.{c}"] = _nanmean2(np.stack(per)) if len(per) > 1 else per[0]
        for avg in ("pooled", "macro"):
            without = out[f"{avg}.image+q"] - out[f"{avg}.q"]
            with_ = out[f"{avg}.full"] - out[f"{avg}.report+q"]
            out.update({f"{avg}.image_without": without, f"{avg}.image_with": with_,
                        f"{avg}.interaction": with_ - without})
        return out

    res = cluster_bootstrap(frame, cluster="patient_id", sums={k: k for k in data if k != "patient_id"},
                            statistic=statistic, n_draws=n_draws, rng=np.random.default_rng(seed))
    values, rows = {}, []
    for c in CELLS:
        row = {"cell": CELL_LABELS[c], "key": _KEY[c]}
        for avg in ("pooled", "macro"):
            est, lo, hi = res.interval(f"{avg}.{c}")
            row.update({avg: est, f"{avg}_lo": lo, f"{avg}_hi": hi})
            values.update({f"{key}.{avg}.{_KEY[c]}": est, f"{key}.{avg}.{_KEY[c]}_lo": lo,
                           f"{key}.{avg}.{_KEY[c]}_hi": hi})
        rows.append(row)
    for avg in ("pooled", "macro"):
        for stat in ("image_without", "image_with", "interaction"):
            est, lo, hi = res.interval(f"{avg}.{stat}")
            values.update({f"{key}.{avg}.{stat}": est, f"{key}.{avg}.{stat}_lo": lo, f"{key}.{avg}.{stat}_hi": hi})
    cells_long = pd.concat(long, ignore_index=True)
    pooled = mm.modality_interaction(cells_long, average="pooled")
    macro = mm.modality_interaction(cells_long, average="macro")
    values[f"{key}.point_matches_metrics"] = bool(
        all(np.isclose(pooled[f"ba_{c}"], values[f"{key}.pooled.{_KEY[c]}"]) for c in CELLS)
        and all(np.isclose(macro[f"ba_{c}"], values[f"{key}.macro.{_KEY[c]}"]) for c in CELLS)
        and np.isclose(pooled["interaction"], values[f"{key}.pooled.interaction"])
        and np.isclose(macro["interaction"], values[f"{key}.macro.interaction"]))
    per_f = cells_long.groupby(["finding", "cell"]).apply(
        lambda g: mm.balanced_accuracy(g["pred"], g["target"], both_classes=True),
        include_groups=False).unstack("cell")[list(CELLS)]
    best = per_f.drop(columns="report+q").max(axis=1)
    values[f"{key}.report_best_n"] = int((per_f["report+q"] > best + 1e-12).sum())
    values[f"{key}.n_findings"] = int(len(findings))
    both = pd.Series(target).groupby(fcol).agg(lambda t: bool((t == 1).any() and (t == 0).any()))
    undefined = [f for f in findings if not both[f]]
    values[f"{key}.n_macro_findings"] = int(len(findings) - len(undefined))
    values[f"{key}.n_ba_undefined"] = int(len(undefined))
    values[f"{key}.ba_undefined"] = ", ".join(undefined) if undefined else "none"
    values.update({f"{key}.n_trials": int(len(frame)), f"{key}.n_patients": int(frame["patient_id"].nunique()),
                   f"{key}.n_draws": int(n_draws)})
    out = pd.DataFrame(rows)
    metrics = {c: "balanced_accuracy" for c in ("pooled", "pooled_lo", "pooled_hi", "macro", "macro_lo", "macro_hi")}
    return TableResult(out, values, index=("cell",), metrics=metrics,
                       labels={"cell": "cell", "key": "key", "pooled": "BA (pooled)", "pooled_lo": "pooled lo",
                               "pooled_hi": "pooled hi", "macro": "BA (macro)", "macro_lo": "macro lo",
                               "macro_hi": "macro hi"},
                       caption=f"Modality ablation, {design} design: balanced accuracy of the four cells; the macro "
                               f"average is over the {len(findings) - len(undefined)} findings with both target "
                               f"classes (undefined, left out: {values[f'{key}.ba_undefined']}).")


def one_question_ablation(cells: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int,
                          readout: str = "lowercase", key: str = "t23") -> TableResult:
    """Table 23: accuracy of the four cells on the one-question design (from all-14 records).

    Values ``<key>.<cell>`` (accuracy on the original image vs the source label, with intervals),
    ``<key>.image_adds`` (= acc(full) − acc(report+q)), ``<key>.ba.<cell>``, ``<key>.yes.<cell>``
    (yes answers) and ``<key>.specificity.<cell>``.
    """
    paired = _cells(cells, "one_question_ablation")
    paired = {c: design_subset(t, "one_q") for c, t in paired.items()}
    target = paired["full"]["target_c"].to_numpy(dtype=float)
    data = {"patient_id": paired["full"]["patient_id"].to_numpy(), "n": np.ones(len(target))}
    preds = {}
    for c in CELLS:
        yc, _, valid = answers(paired[c], readout)
        if not valid.all():
            raise ValueError(f"one_question_ablation: cell {c!r} has unscoreable answers under {readout!r}")
        preds[c] = yc
        data.update({f"{c}|ok": (yc == target) * 1.0, f"{c}|tp": yc * target, f"{c}|fn": (1 - yc) * target,
                     f"{c}|tn": (1 - yc) * (1 - target), f"{c}|fp": yc * (1 - target)})
    frame = pd.DataFrame(data)

    def statistic(s):
        out = {}
        for c in CELLS:
            out[f"acc.{c}"] = _div(s[f"{c}|ok"], s["n"])
            out[f"ba.{c}"] = _ba(s[f"{c}|tp"], s[f"{c}|fn"], s[f"{c}|tn"], s[f"{c}|fp"])
        out["image_adds"] = out["acc.full"] - out["acc.report+q"]
        out["image_adds_without_report"] = out["acc.image+q"] - out["acc.q"]
        return out

    res = cluster_bootstrap(frame, cluster="patient_id", sums={k: k for k in data if k != "patient_id"},
                            statistic=statistic, n_draws=n_draws, rng=np.random.default_rng(seed))
    rows, values = [], {}
    for c in CELLS:
        est, lo, hi = res.interval(f"acc.{c}")
        ba, ba_lo, ba_hi = res.interval(f"ba.{c}")
        spec = mm.specificity(preds[c], target) if (target == 0).any() else float("nan")
        rows.append({"cell": CELL_LABELS[c], "key": _KEY[c], "accuracy": est, "lo": lo, "hi": hi,
                     "balanced_accuracy": ba, "specificity": spec, "yes": int(preds[c].sum())})
        values.update({f"{key}.{_KEY[c]}": est, f"{key}.{_KEY[c]}_lo": lo, f"{key}.{_KEY[c]}_hi": hi,
                       f"{key}.ba.{_KEY[c]}": ba, f"{key}.ba.{_KEY[c]}_lo": ba_lo, f"{key}.ba.{_KEY[c]}_hi": ba_hi,
                       f"{key}.yes.{_KEY[c]}": int(preds[c].sum()), f"{key}.specificity.{_KEY[c]}": spec})
    for stat in ("image_adds", "image_adds_without_report"):
        est, lo, hi = res.interval(stat)
        values.update({f"{key}.{stat}": est, f"{key}.{stat}_lo": lo, f"{key}.{stat}_hi": hi})
    values.update({f"{key}.n_trials": int(len(frame)), f"{key}.n_target_yes": int(target.sum()),
                   f"{key}.n_target_no": int((target == 0).sum()), f"{key}.n_draws": int(n_draws)})
    return TableResult(pd.DataFrame(rows), values,
                       index=("cell",), metrics={"accuracy": "accuracy", "lo": "accuracy", "hi": "accuracy",
                                "balanced_accuracy": "balanced_accuracy", "specificity": "specificity"},
                       labels={"cell": "cell", "key": "key", "yes": "yes answers", "accuracy": "accuracy",
                               "lo": "lo", "hi": "hi"},
                       caption="One-question modality ablation: accuracy of the four cells (Table 23).")


AGREEMENT_COLUMNS = tuple(f"{stat}_{arm}" for arm in ("P", "A")
                          for stat in ("fr", "agreement", "chance", "floor", "kappa", "yes_rate", "n"))
"""The :func:`per_finding_table` columns on answer agreement (flip rate, κ, chance, floor, yes rate, trials
per report arm), shown as one table beside the accuracy columns (ModaLens App. Table 21)."""


def per_finding_table(cells: Mapping[str, pd.DataFrame], *, instructed: Mapping[str, pd.DataFrame] | None = None,
                      readout: str = "lowercase") -> TableResult:
    """Per finding: flip rates, agreement and κ with the response-bias floor, image-only specificity.

    ``cells`` as for :func:`modality_ablation` (``full`` = report present, ``image+q`` = report
    absent, both images). Per finding and arm (``P`` = full, ``A`` = image+q): flip rate,
    agreement between the answers on the two images (= 1 − flip rate), chance agreement p_e,
    response-bias floor p_yes² + p_no² (answers of both images), Cohen's κ (NaN where p_e = 1:
    constant answers) and yes rate (Tables 10, 32; §4.1). Image-only sensitivity and specificity
    are the image+q cell's answers on the original image against the source label (Table 21); BA
    per cell for the "best cell" count. ``instructed`` (``{"P": ..., "A": ...}``, records with
    ``instruction: yes_no`` and generated answers) adds the flip rate under the generated answer
    (Table 22; trials scoreable on both images).
    """
    paired = _cells(cells, "per_finding_table")
    arms = {"P": paired["full"], "A": paired["image+q"]}
    gen = {}
    if instructed is not None:
        missing = [k for k in ("P", "A") if k not in instructed]
        if missing:
            raise ValueError(f"per_finding_table: instructed arms {missing} missing")
        gen = {k: instructed[k] for k in ("P", "A")}
    order = [f for f in (*FINDINGS_13, COMPOSITE) if f in set(paired["full"]["finding"])]
    rows, values = [], {}
    for f in order:
        row = {"finding": f}
        for arm, t in arms.items():
            sub = t[t["finding"] == f]
            yc, yd, valid = answers(sub, readout)
            s = agreement_summary(yc[valid], yd[valid])
            row.update({f"fr_{arm}": 1.0 - s["agreement"], f"agreement_{arm}": s["agreement"],
                        f"chance_{arm}": s["chance"], f"floor_{arm}": s["floor"], f"kappa_{arm}": s["kappa"],
                        f"yes_rate_{arm}": s["yes_rate"], f"n_{arm}": s["n"]})
        img = paired["image+q"][paired["image+q"]["finding"] == f]
        yc, _, _ = answers(img, readout)
        tc = img["target_c"].to_numpy(dtype=float)
        row["image_only_sensitivity"] = mm.sensitivity(yc, tc) if (tc == 1).any() else float("nan")
        row["image_only_specificity"] = mm.specificity(yc, tc) if (tc == 0).any() else float("nan")
        for c in CELLS:
            sub = paired[c][paired[c]["finding"] == f]
            yc, _, _ = answers(sub, readout)
            row[f"ba_{_KEY[c]}"] = mm.balanced_accuracy(yc, sub["target_c"].to_numpy(dtype=float), both_classes=True)
        for arm, t in gen.items():
            sub = t[t["finding"] == f]
            if sub.empty:
                row[f"fr_generated_{arm}"] = float("nan")
                continue
            yc, yd, valid = answers(sub, "generated")
            row[f"fr_generated_{arm}"] = float((yc != yd)[valid].mean()) if valid.any() else float("nan")
        rows.append(row)
        fk = f.lower().replace(" ", "_")
        values.update({f"pf.{fk}.{k}": v for k, v in row.items() if k != "finding"})
    frame = pd.DataFrame(rows)
    for arm in ("P", "A"):
        values[f"pf.{arm}.floor_min"] = float(frame[f"floor_{arm}"].min())
        values[f"pf.{arm}.floor_max"] = float(frame[f"floor_{arm}"].max())
        values[f"pf.{arm}.agreement_pooled"] = float(
            np.average(frame[f"agreement_{arm}"], weights=frame[f"n_{arm}"]))
        yc, yd, valid = answers(arms[arm], readout)   # the arm's pooled flip rate, from the trials directly
        values[f"pf.{arm}.fr_pooled"] = float((yc != yd)[valid].mean())
    metrics = {}
    for arm in ("P", "A"):
        metrics.update({f"fr_{arm}": "flip_rate", f"agreement_{arm}": "unchanged_rate",
                        f"chance_{arm}": "chance_agreement", f"floor_{arm}": "response_bias_floor",
                        f"kappa_{arm}": "cohen_kappa", f"yes_rate_{arm}": "yes_rate"})
        if gen:
            metrics[f"fr_generated_{arm}"] = "flip_rate"
    metrics.update({"image_only_sensitivity": "sensitivity", "image_only_specificity": "specificity",
                    **{f"ba_{_KEY[c]}": "balanced_accuracy" for c in CELLS}})
    labels = {"finding": "finding"}
    for arm, name in (("P", "report present"), ("A", "report absent")):
        labels.update({f"fr_{arm}": f"FR, {name}", f"agreement_{arm}": f"agreement, {name}",
                       f"chance_{arm}": f"chance p_e, {name}", f"floor_{arm}": f"floor, {name}",
                       f"kappa_{arm}": f"κ, {name}", f"yes_rate_{arm}": f"yes rate, {name}",
                       f"n_{arm}": f"trials, {name}", f"fr_generated_{arm}": f"FR generated, {name}"})
    labels.update({"image_only_sensitivity": "image-only sensitivity", "image_only_specificity": "image-only specificity",
                   **{f"ba_{_KEY[c]}": f"BA, {CELL_LABELS[c]}" for c in CELLS}})
    return TableResult(frame, values, index=("finding",), metrics=metrics, labels=labels,
                       caption="Per finding: flip rates, agreement, κ and the response-bias floor; image-only accuracy.")


def validation_row(cells: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int,
                   readout: str = "lowercase") -> dict:
    """What a reference model of known behaviour must show in the four cells (one row of a table).

    Image effects (pooled and macro, with and without the report) and the interaction; report
    effects BA(report+q) − BA(q) and BA(full) − BA(image+q); the largest flip rate of any cell;
    whether the image-absent cells equal each other's answers (``same_without_image``: report
    ignored when no image), ``same_with_image`` (report ignored with the image), ``same_report``
    (image ignored with the report: full = report+q) and ``same_no_report`` (image+q = q); and the
    agreement statistics per finding (report present): ``n_constant`` findings whose answers never
    vary (agreement = floor = chance = 1, κ undefined), ``chance_equals_floor`` (on every finding),
    ``kappa_one_where_varying`` (κ = 1 wherever answers vary).
    """
    abl = modality_ablation(cells, n_draws=n_draws, seed=seed, readout=readout, key="v").values
    pf = per_finding_table(cells, readout=readout).frame
    paired = _cells(cells, "validation_row")
    frs = []
    for c in CELLS:
        yc, yd, valid = answers(paired[c], readout)
        frs.append(float((yc != yd)[valid].mean()))
    const = pf["floor_P"] >= 1 - 1e-12
    row = {f"{avg}.{k}": abl[f"v.{avg}.{k}"] for avg in ("pooled", "macro")
           for k in ("image_without", "image_with", "interaction")}
    row.update({
        "pooled.report_without_image": abl["v.pooled.report_q"] - abl["v.pooled.q"],
        "pooled.report_with_image": abl["v.pooled.full"] - abl["v.pooled.image_q"],
        "max_flip_rate": max(frs),
        "same_with_image": same_answers(paired["full"], paired["image+q"], readout=readout),
        "same_without_image": same_answers(paired["report+q"], paired["q"], readout=readout),
        "same_report": same_answers(paired["full"], paired["report+q"], readout=readout),
        "same_no_report": same_answers(paired["image+q"], paired["q"], readout=readout),
        "n_findings": int(len(pf)), "n_constant": int(const.sum()),
        "constant_kappa_undefined": bool(pf.loc[const, "kappa_P"].isna().all()
                                         and np.allclose(pf.loc[const, ["agreement_P", "chance_P"]], 1.0)),
        "chance_equals_floor": bool(np.allclose(pf["chance_P"], pf["floor_P"], rtol=0, atol=1e-12)),
        "kappa_one_where_varying": bool(np.allclose(pf.loc[~const, "kappa_P"], 1.0)) if (~const).any() else True,
        "n_trials": int(len(paired["full"])),
    })
    return row


def part_e(values: Mapping[str, float]) -> TableResult:
    """The paper's §4.2 / Table 23 / Table 15 ablation checks beside the same identities on this run.

    ``values``: merged values of :func:`modality_ablation` (keys ``t20`` for all-14 and ``t15``
    for 13 findings), :func:`one_question_ablation` (``t23``) and :func:`per_finding_table`.
    """
    from .part_e import RunCheck, part_e_beside

    v = values

    def interaction(key, avg):
        ba = {c: v[f"{key}.{avg}.{_KEY[c]}"] for c in CELLS}
        return mm.interaction_from_cells(ba)["interaction"]

    checks = {
        "abl.image_without": RunCheck("image effect without the report = BA(image+q) − BA(q)",
                                      v["t20.pooled.image_without"], v["t20.pooled.image_q"] - v["t20.pooled.q"]),
        "abl.image_with": RunCheck("image effect with the report = BA(full) − BA(report+q)",
                                   v["t20.pooled.image_with"], v["t20.pooled.full"] - v["t20.pooled.report_q"]),
        "abl.interaction": RunCheck("pooled interaction from the four cells", v["t20.pooled.interaction"],
                                    interaction("t20", "pooled")),
        "abl.report_best": RunCheck("findings where report + question is best ≤ findings", v["t20.report_best_n"],
                                    v["t20.n_findings"], op="<="),
        "t23.image_adds": RunCheck("one-question: image adds = acc(full) − acc(report+q)", v["t23.image_adds"],
                                   v["t23.full"] - v["t23.report_q"]),
        "t15.abl.interaction": RunCheck("13-finding pooled interaction from the cells", v["t15.pooled.interaction"],
                                        interaction("t15", "pooled")),
        "t15.abl.macro_interaction": RunCheck("13-finding macro interaction from the cells",
                                              v["t15.macro.interaction"], interaction("t15", "macro")),
        "t4.unchanged_14": RunCheck("14-finding agreement (P) = 1 − all-14 flip rate (P)",
                                    v["pf.P.agreement_pooled"], 1 - v["pf.P.fr_pooled"]),
    }
    return part_e_beside(checks)


PAPER_KEYS: dict[str, str] = {
    **{f"t20.pooled.{k}": f"abl.{k}" for k in ("full", "report_q", "image_q", "q")},
    "t20.pooled.image_without": "abl.image_without", "t20.pooled.image_with": "abl.image_with",
    "t20.pooled.interaction": "abl.interaction", "t20.macro.interaction": "abl.macro_interaction",
    "t20.report_best_n": "abl.report_best_n",
    **{f"t15.pooled.{k}": f"t15.abl.{k}" for k in ("full", "report_q", "image_q", "q")},
    **{f"t15.macro.{k}": f"t15.abl.macro_{k}" for k in ("full", "report_q", "image_q", "q")},
    "t15.pooled.interaction": "t15.abl.interaction", "t15.macro.interaction": "t15.abl.macro_interaction",
    **{f"t23.{k}": f"t23.{k}" for k in ("full", "report_q", "image_q", "q", "image_adds")},
    "t23.ba.image_q": "f.m27.ba_A", "t23.yes.image_q": "f.m27.yes_A", "t23.specificity.image_q": "f.m27.spec_A",
    "pf.P.agreement_pooled": "n10.unchanged_14",
    "pf.support_devices.agreement_P": "s43.sd_agreement", "pf.support_devices.kappa_P": "s43.sd_kappa",
    "pf.atelectasis.fr_generated_P": "s41.gen.atelectasis_P", "pf.atelectasis.fr_generated_A": "s41.gen.atelectasis_A",
    "pf.support_devices.fr_generated_P": "s41.gen.sd_P", "pf.support_devices.fr_generated_A": "s41.gen.sd_A",
}
"""Run value key -> published value id (paper ``modalens``) of §4.2-4.3, Tables 10, 15, 20-23."""

"""ModaLens text-content controls (Table 18, Figure 5): report conditions beside present / absent.

Every control arm is a ``modalens`` record with ``text_control`` set
(:mod:`shovir_core.data.text_controls`), one-question design, both images. Each arm is paired
against the plain full report on that arm's own cases (the section arms keep only the cases whose
report has both a FINDINGS and an IMPRESSION section). **Accuracy in this table is agreement with
the source study's label** (the label of the report's own study), on the original and on the
substitute image -- not the shown image's label as everywhere else in the paper (ModaLens
Appendix G, last paragraph).

:func:`reader_checks` states what ``ref-report-reader`` (which answers from the finding sentences
and ignores the image) must do under each control and whether it does.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..data.text_controls import SECTION_CONTROLS, TEXT_CONTROLS
from ..metrics.arms import answers, flip_rate_rows, paired_trials, put_interval
from ..vocab import COMPOSITE
from ..stats import bootstrap_rates
from .result import TableResult

__all__ = ["ARMS", "text_control_table", "reader_checks", "rerun_table", "anchoring_branches", "PAPER_KEYS", "AUDIT_PREFIXES", "ARM_LABELS"]

ARMS = ("full", "absent", *[c for c in TEXT_CONTROLS if c != "none"])
"""Arm keys: ``full`` (text_control none), ``absent`` (no report) and one per control."""

ARM_LABELS = {"full": "full report", "absent": "no report", "neutral_prose": "neutral prose (length-matched)",
              "boilerplate": "clinical boilerplate", "finding_removed": "finding sentences removed",
              "answer_sentence": "answer sentence only", "opposite_label": "opposite-label replacement",
              "findings_only": "findings section only", "impression_only": "impression section only"}
"""Row labels of Table 18."""

AUDIT_PREFIXES = ("t18.", "t2.oneq.P_rerun", "t2.oneq.rerun_one_case", "t2.oneq.A_1dp")
"""Audit checks of this table."""


def text_control_table(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int,
                       readout: str = "lowercase") -> TableResult:
    """Table 18: flip rate of every arm with its paired difference against the full report.

    ``arms`` maps :data:`ARMS` (any subset holding ``full``) to trials. Values (``tc.`` keys):
    ``<arm>.flip_rate`` (+ lo/hi), ``<arm>.flips``, ``<arm>.n_trials``,
    ``<arm>.vs_full.diff_pp`` (+ lo/hi, on the arm's cases), ``<arm>.source_agreement_c`` /
    ``_d`` (agreement with the source label on the original / substitute image, + lo/hi),
    ``removed_vs_absent.diff_pp`` (finding sentences removed − no report), ``n_cases`` and
    ``n_section_cases`` (cases with both sections).
    """
    if "full" not in arms:
        raise ValueError(f"text_control_table: the 'full' arm is required (have {sorted(arms)})")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        raise ValueError(f"text_control_table: unknown arms {unknown}; use {list(ARMS)}")
    values: dict = {"tc.n_cases": int(len(arms["full"]))}
    rows = []
    for name in [a for a in ARMS if a in arms]:
        own = paired_trials({name: arms[name]})[name]
        yc, yd, valid = answers(own, readout)
        src = own["target_c"].to_numpy(dtype=float)
        f = pd.DataFrame({"patient_id": own["patient_id"].to_numpy()[valid],
                          "flip": (yc != yd)[valid].astype(float), "agree_c": (yc == src)[valid].astype(float),
                          "agree_d": (yd == src)[valid].astype(float)})
        res = bootstrap_rates(f, rates={"fr": "flip", "agree_c": "agree_c", "agree_d": "agree_d"},
                              n_draws=n_draws, seed=seed)
        put_interval(values, f"tc.{name}.flip_rate", res["fr"])
        put_interval(values, f"tc.{name}.source_agreement_c", res["agree_c"])
        put_interval(values, f"tc.{name}.source_agreement_d", res["agree_d"])
        values[f"tc.{name}.flips"] = int(f["flip"].sum())
        values[f"tc.{name}.n_trials"] = int(len(f))
        row = {"arm": ARM_LABELS[name], "key": name, "trials": int(len(f)), "flip_rate": res["fr"][0],
               "flip_rate_lo": res["fr"][1], "flip_rate_hi": res["fr"][2], "flips": int(f["flip"].sum()),
               "agree_c": res["agree_c"][0], "agree_d": res["agree_d"][0],
               "diff": np.nan, "diff_lo": np.nan, "diff_hi": np.nan}
        if name != "full":
            r = flip_rate_rows({name: arms[name], "full": arms["full"]}, reference="full", readout=readout,
                               n_draws=n_draws, seed=seed, key="x")
            d = (r.values[f"x.{name}.vs_full.diff_pp"], r.values[f"x.{name}.vs_full.diff_pp_lo"],
                 r.values[f"x.{name}.vs_full.diff_pp_hi"])
            put_interval(values, f"tc.{name}.vs_full.diff_pp", d)
            values[f"tc.{name}.vs_full.full_flip_rate"] = r.values["x.full.flip_rate"]
            values[f"tc.{name}.vs_full.n_trials"] = r.values["x.n_trials"]
            row.update({"diff": d[0] / 100, "diff_lo": d[1] / 100, "diff_hi": d[2] / 100})
        rows.append(row)
    if "finding_removed" in arms and "absent" in arms:
        r = flip_rate_rows({"finding_removed": arms["finding_removed"], "absent": arms["absent"]}, reference="absent",
                           readout=readout, n_draws=n_draws, seed=seed, key="x")
        for end in ("", "_lo", "_hi"):
            values[f"tc.removed_vs_absent.diff_pp{end}"] = r.values[f"x.finding_removed.vs_absent.diff_pp{end}"]
    sections = [a for a in SECTION_CONTROLS if a in arms]
    if sections:
        values["tc.n_section_cases"] = int(min(arms[a]["case_id"].nunique() for a in sections))
        values["tc.n_section_excluded"] = int(values["tc.n_cases"] - values["tc.n_section_cases"])
    frame = pd.DataFrame(rows)
    return TableResult(frame, values,
                       index=("arm",), metrics={"flip_rate": "flip_rate", "flip_rate_lo": "flip_rate_lo", "flip_rate_hi": "flip_rate_hi",
                                "diff": "paired_diff", "diff_lo": "paired_diff_lo", "diff_hi": "paired_diff_hi"},
                       labels={"arm": "report condition", "key": "arm", "trials": "trials", "flips": "flips",
                               "agree_c": "source-label agreement, original", "agree_d": "source-label agreement, substitute"},
                       caption="Text-content controls: flip rate per report condition, paired against the full "
                               "report on each condition's cases; agreement is with the source label")


def reader_checks(arms: Mapping[str, pd.DataFrame]) -> TableResult:
    """What ``ref-report-reader`` must do under each control (the demo validation), and whether it does.

    The reader answers from the sentences naming the finding and ignores the image
    (:class:`shovir_core.models.reference.ReportReader`); a report silent on every finding gets its
    "no" evidence, which on the demo priors gives the same answer as no report. Checks (one row
    each; ``passed`` is the verdict):

    * every arm: flip rate 0 (the reader never looks at the image);
    * ``answer_sentence``: agreement of the answer with the sentence's label (= source label) is 1;
    * ``opposite_label``: source-label agreement is 0 on the finding questions (the sentence
      contradicts the source label and the reader follows it);
    * ``finding_removed``: the answers equal the report-absent answers on every trial, so its flip
      rate moves to the report-absent flip rate;
    * ``neutral_prose``, ``boilerplate``: the answers equal the report-absent answers on every trial.
    """
    need = {"full", "absent", "answer_sentence", "opposite_label", "finding_removed", "neutral_prose", "boilerplate"}
    missing = sorted(need - set(arms))
    if missing:
        raise ValueError(f"reader_checks: arms {missing} missing")
    rows = []

    def add(check: str, value: float, expected: float, passed: bool, n: int):
        rows.append({"check": check, "value": float(value), "expected": float(expected), "passed": bool(passed),
                     "trials": int(n)})

    for name, t in arms.items():
        yc, yd, _ = answers(t, "lowercase")
        fr = float((yc != yd).mean())
        add(f"{name}: flip rate (the reader ignores the image)", fr, 0.0, fr == 0.0, len(t))
    t = arms["answer_sentence"]
    yc, yd, _ = answers(t, "lowercase")
    agree = float(np.mean(np.r_[yc, yd] == np.r_[t["target_c"], t["target_c"]]))
    add("answer sentence: agreement with the sentence (the source label), both images", agree, 1.0, agree == 1.0, len(t))
    t = arms["opposite_label"]
    fq = (t["finding"] != COMPOSITE).to_numpy()
    yc, yd, _ = answers(t, "lowercase")
    acc = float(np.mean(np.r_[yc[fq], yd[fq]] == np.r_[t["target_c"].to_numpy()[fq], t["target_c"].to_numpy()[fq]]))
    add("opposite label: source-label agreement, finding questions, both images", acc, 0.0, acc == 0.0, int(fq.sum()))
    if (~fq).any():
        acc_c = float(np.mean(yc[~fq] == t["target_c"].to_numpy()[~fq]))
        add("opposite label: source-label agreement, composite question, original image", acc_c, 0.0, acc_c == 0.0,
            int((~fq).sum()))
    absent = arms["absent"]
    for name in ("finding_removed", "neutral_prose", "boilerplate"):
        a, b = paired_trials({name: arms[name], "absent": absent}).values()
        same = float(np.mean((a["readout_c"].to_numpy() == b["readout_c"].to_numpy())
                             & (a["readout_d"].to_numpy() == b["readout_d"].to_numpy())))
        add(f"{name.replace('_', ' ')}: answers equal the report-absent answers", same, 1.0, same == 1.0, len(a))
    frame = pd.DataFrame(rows)
    values = {"tc.reader.n_checks": int(len(frame)), "tc.reader.n_passed": int(frame["passed"].sum())}
    return TableResult(frame, values, labels={"check": "check", "value": "value", "expected": "expected",
                                              "passed": "passed", "trials": "trials"},
                       caption="ref-report-reader under the text controls: planted behaviour and verdict")


def anchoring_branches(arms: Mapping[str, pd.DataFrame], absent: pd.DataFrame, *, w: float) -> TableResult:
    """Where ``ref-anchored@w``'s flips come from under each report condition (a reference-model account).

    ``ref-anchored@w`` follows the report on the (text, question) pairs whose gate
    (:meth:`shovir_core.models.reference.Anchored.gate` of the stored ``report_sha256`` and the finding) is
    below ``w`` and the image otherwise, whatever the text says: a text that no longer names the finding
    anchors the answer as much as one that does. So in every report-present arm the flips are exactly the
    report-absent flips of the trials on the image branch, and an arm's flip rate is its realised
    image-branch share times the report-absent flip rate on those trials. Trials sharing a byte-identical
    text share one gate draw, so an arm whose rewrite makes many texts identical (removing the finding's
    sentences from template reports) can land far from the share ``1 - w``.

    ``arms`` maps arm keys (:data:`ARMS` without ``absent``) to report-present trials; ``absent`` is the
    report-absent arm on the same trials. One row per arm: ``n_trials``, ``n_texts`` (distinct texts),
    ``image_share`` (share of trials on the image branch), ``flips``, ``absent_flips_image`` (report-absent
    flips of the image-branch trials), ``absent_rate_image`` (their report-absent flip rate) and
    ``identity`` (flips equal the report-absent flips on the image branch, trial by trial; it fails for a
    model whose answer moves with the image on its report branch). Values (``tc.branch.`` keys):
    ``<arm>.<column>`` and ``all_hold``.
    """
    from ..models.reference import Anchored

    rows, values = [], {}
    for arm, t in arms.items():
        if arm == "absent":
            raise ValueError("anchoring_branches: pass the report-absent arm as absent=, not in arms")
        p, a = paired_trials({arm: t, "absent": absent}).values()
        image = np.array([Anchored.gate(h, f) >= w for h, f in zip(p["report_sha256"], p["finding"])], dtype=bool)
        flip = (p["readout_c"] != p["readout_d"]).to_numpy()
        flip_a = (a["readout_c"] != a["readout_d"]).to_numpy()
        row = {"arm": ARM_LABELS.get(arm, arm), "n_trials": int(len(p)),
               "n_texts": int(p["report_sha256"].nunique()), "image_share": float(image.mean()),
               "flips": int(flip.sum()), "absent_flips_image": int(flip_a[image].sum()),
               "absent_rate_image": float(flip_a[image].mean()) if image.any() else float("nan"),
               "identity": bool(len(p) > 0 and (flip == (image & flip_a)).all())}
        rows.append(row)
        values.update({f"tc.branch.{arm}.{k}": v for k, v in row.items() if k != "arm"})
    frame = pd.DataFrame(rows)
    values["tc.branch.all_hold"] = bool(len(frame) and frame["identity"].all())
    return TableResult(frame, values, index=("arm",),
                       metrics={"image_share": "share", "absent_rate_image": "flip_rate",
                                **{c: "count" for c in ("n_trials", "n_texts", "flips", "absent_flips_image")}},
                       labels={"arm": "report condition", "n_trials": "trials", "n_texts": "distinct texts",
                               "image_share": "share on the image branch", "flips": "flips",
                               "absent_flips_image": "report-absent flips of the image-branch trials",
                               "absent_rate_image": "report-absent flip rate of the image-branch trials",
                               "identity": "flips = report-absent flips on the image branch"},
                       caption=f"ref-anchored@{w:g} under the text controls: the trials its gate sends to the image, "
                               "and the flips they carry")


def rerun_table(original: pd.DataFrame, rerun: pd.DataFrame, *, n_draws: int, seed: int) -> TableResult:
    """The full-report arm and its re-run (a ``replicate`` record of the same spec): flip rate with its
    patient-clustered interval and flips per run, and the cases whose flip differs between the runs.
    ModaLens Table 18's full-report row is such a re-run: 1.38 % (44 flips) against Table 2's 1.41 % (45),
    "a one-case difference between two runs of the same arm"."""
    from ..metrics.arms import rate_interval

    a, b = original.set_index("trial_id"), rerun.set_index("trial_id")
    common = a.index.intersection(b.index)
    if len(common) != len(a) or len(common) != len(b):
        raise ValueError("rerun_table: the re-run must hold exactly the original's trials")
    rows, values, flips = [], {}, {}
    for key, t in (("original", a.loc[common]), ("rerun", b.loc[common])):
        flips[key] = (t["readout_c"] != t["readout_d"]).to_numpy()
        r = rate_interval(t.reset_index(), flips[key], n_draws=n_draws, seed=seed)
        rows.append({"run": "full report" if key == "original" else "full report, re-run", "flip_rate": r["estimate"],
                     "lo": r["lo"], "hi": r["hi"], "flips": int(flips[key].sum()), "n_trials": int(len(common))})
        values.update({f"tc.rerun.{key}.flip_rate": r["estimate"], f"tc.rerun.{key}.flips": int(flips[key].sum())})
    values["tc.rerun.n_cases_differ"] = int((flips["original"] != flips["rerun"]).sum())
    values["tc.rerun.flips_diff"] = values["tc.rerun.rerun.flips"] - values["tc.rerun.original.flips"]
    return TableResult(pd.DataFrame(rows), values=values, index=("run",),
                       metrics={"flip_rate": "flip_rate", "lo": "flip_rate", "hi": "flip_rate", "flips": "count",
                                "n_trials": "count"},
                       labels={"run": "run", "flip_rate": "flip rate", "lo": "95% lo", "hi": "95% hi",
                               "flips": "flips", "n_trials": "trials"},
                       caption="The full-report arm and its re-run on the same trials (Table 18's re-run row).")


PAPER_KEYS: dict[str, str] = {
    "tc.rerun.original.flip_rate": "t2.oneq.P", "tc.rerun.original.flips": "t2.oneq.P_flips",
    "tc.rerun.rerun.flip_rate": "t2.oneq.P_rerun", "tc.rerun.rerun.flips": "t2.oneq.P_rerun_flips",
    "tc.absent.flip_rate": "t2.oneq.A_1dp", "tc.neutral_prose.flip_rate": "t18.neutral",
    "tc.boilerplate.flip_rate": "t18.boilerplate", "tc.finding_removed.flip_rate": "t18.removed",
    "tc.removed_vs_absent.diff_pp": "t18.removed_vs_none", "tc.answer_sentence.flip_rate": "t18.answer_sentence",
    "tc.opposite_label.source_agreement_c": "t18.opposite_acc",
    "tc.findings_only.vs_full.diff_pp": "t18.findings_only", "tc.impression_only.vs_full.diff_pp": "t18.impression_only",
    "tc.n_section_cases": "t18.both_sections",
}
"""Run value key -> published value id (Table 18; the paper's opposite-label accuracy is read here as
source-label agreement on the original image). The full-report arm is Table 2's record; the paper's Table 18
full row is its re-run, compared through :func:`rerun_table`'s values."""

"""ModaLens Appendix M: option order ("Answer with exactly No or Yes.") and abstention
("Answer with exactly Yes, No or Uncertain.").

One-question design, report present and absent, both images, paired case by case with the
default instruction ("Answer with exactly Yes or No."). Option order: flip rates under the three
readouts, the reversed − default difference per report arm, the report difference P − A under
each order and their gap (the order × report interaction), the share of answers the reversal
changes and the shift of the yes rate. Abstention: the share of Uncertain answers per arm and
image, the substitution effect on it (substitute − original), and the flip rate counting a change
to or from Uncertain as a change (:func:`shovir_core.metrics.prompt_variants.uncertain_flips`)
against the forced choice.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics.arms import answers, flip_rate_rows, paired_trials, put_interval
from ..metrics.prompt_variants import abstained, uncertain_flips
from ..stats import bootstrap_rates
from ..vocab import READOUTS
from .result import TableResult

__all__ = ["ORDER_ARMS", "UNCERTAIN_ARMS", "option_order_table", "option_order_shifts", "abstention_table",
           "planted_abstention", "ABSTAIN_BAND",
           "PAPER_KEYS", "AUDIT_PREFIXES"]

ORDER_ARMS = ("P", "A", "P_rev", "A_rev")
"""Instructed default order P / A and reversed order P / A."""
UNCERTAIN_ARMS = ("P", "A", "P_unc", "A_unc")
"""Instructed forced choice P / A and Yes/No/Uncertain P / A."""

AUDIT_PREFIXES = ("m.",)
"""Audit checks of this appendix (the identities the published numbers satisfy)."""


def _need(arms: Mapping, names, what: str) -> None:
    missing = [k for k in names if k not in arms]
    if missing:
        raise ValueError(f"{what}: arms {missing} missing (have {sorted(arms)})")


def option_order_table(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int) -> TableResult:
    """Flip rates under both option orders and three readouts, with the order effects.

    Values (``m.order.<readout>.`` keys): ``<arm>.flip_rate`` (+ lo/hi), ``P.rev_minus_default``,
    ``A.rev_minus_default``, ``default.P_minus_A``, ``rev.P_minus_A`` (``.diff_pp`` + lo/hi) and
    ``order_x_report.interaction_pp`` (+ lo/hi).
    """
    _need(arms, ORDER_ARMS, "option_order_table")
    values: dict = {}
    frames = []
    for readout in READOUTS:
        r = flip_rate_rows({k: arms[k] for k in ORDER_ARMS}, readout=readout, n_draws=n_draws, seed=seed,
                           key=f"m.order.{readout}",
                           pairs={"P.rev_minus_default": ("P_rev", "P"), "A.rev_minus_default": ("A_rev", "A"),
                                  "default.P_minus_A": ("P", "A"), "rev.P_minus_A": ("P_rev", "A_rev")},
                           interactions={"order_x_report": ("P_rev", "A_rev", "P", "A")})
        values.update(r.values)
        frames.append(r.frame.assign(readout=readout, order=["default", "default", "reversed", "reversed"],
                                     report=["present", "absent"] * 2))
    frame = pd.concat(frames, ignore_index=True)
    return TableResult(frame[["readout", "order", "report", "flip_rate", "flip_rate_lo", "flip_rate_hi", "flips",
                              "n_trials"]], values,
                       index=("readout", "order", "report"), metrics={"flip_rate": "flip_rate", "flip_rate_lo": "flip_rate_lo", "flip_rate_hi": "flip_rate_hi"},
                       labels={"readout": "readout", "order": "option order", "report": "report", "flips": "flips",
                               "n_trials": "trials"},
                       caption="Option order: flip rate per arm and readout (instructed, one-question)")


def option_order_shifts(arms: Mapping[str, pd.DataFrame]) -> TableResult:
    """Answers the reversal changes and the shift of the yes rate, per report arm, readout and image.

    A trial side's answer is *changed* when it differs between the two orders (scoreable in both).
    Values ``m.shift.<report>.<readout>.<side>.changed`` and ``.yes_shift`` (reversed − default
    yes rate), and the range over all cells (``m.shift.changed_min`` / ``_max``,
    ``m.shift.<report or readout>.yes_shift_min`` / ``_max``).
    """
    _need(arms, ORDER_ARMS, "option_order_shifts")
    rows, values = [], {}
    for report, (d_key, r_key) in (("present", ("P", "P_rev")), ("absent", ("A", "A_rev"))):
        d, r = paired_trials({"d": arms[d_key], "r": arms[r_key]}).values()
        for readout in READOUTS:
            dc, dd, dv = answers(d, readout)
            rc, rd, rv = answers(r, readout)
            for side, (a, b) in (("c", (dc, rc)), ("d", (dd, rd))):
                ok = dv & rv
                changed = float(np.mean(a[ok] != b[ok])) if ok.any() else float("nan")
                shift = float(np.mean(b[ok]) - np.mean(a[ok])) if ok.any() else float("nan")
                values[f"m.shift.{report}.{readout}.{side}.changed"] = changed
                values[f"m.shift.{report}.{readout}.{side}.yes_shift"] = shift
                rows.append({"report": report, "readout": readout, "image": {"c": "original", "d": "substitute"}[side],
                             "changed": changed, "yes_shift": shift, "trials": int(ok.sum())})
    frame = pd.DataFrame(rows)
    values["m.shift.changed_min"], values["m.shift.changed_max"] = float(frame["changed"].min()), float(frame["changed"].max())
    for col, level in (("report", "present"), ("report", "absent"), *(("readout", r) for r in READOUTS)):
        sub = frame[frame[col] == level]["yes_shift"]
        values[f"m.shift.{level}.yes_shift_min"], values[f"m.shift.{level}.yes_shift_max"] = float(sub.min()), float(sub.max())
    return TableResult(frame, values, index=("report", "readout", "image"), metrics={"changed": "share", "yes_shift": "rate_shift"},
                       labels={"report": "report", "readout": "readout", "image": "image", "trials": "trials"},
                       caption="Option order: share of answers changed by the reversal and yes-rate shift (reversed − default)")


_UNC_LABELS = {"P_unc": "report present, Yes/No/Uncertain", "A_unc": "report absent, Yes/No/Uncertain"}

ABSTAIN_BAND = (0.4, 0.6)
"""The reference models' planted abstention: under the Yes/No/Uncertain instruction they answer
Uncertain exactly where ``0.4 < p(yes) < 0.6``, p(yes) = sigmoid(margin) of the same request
(``shovir_core/models/reference.py``, ``ReferenceModel.score_yes_no``)."""


def planted_abstention(trials: pd.DataFrame) -> dict:
    """Abstentions of one Yes/No/Uncertain arm beside the planted rule :data:`ABSTAIN_BAND`.

    Per side (``c``, ``d``): ``n_abstain_<side>`` (answers Uncertain), ``n_planted_<side>``
    (trials with ``0.4 < sigmoid(margin) < 0.6``) and ``holds_<side>`` (the same trials, not just
    the same count); ``holds`` (both sides); ``abstain_rate_c``; ``in_band_findings`` (the
    questions with a trial in the band on either side, ``", "``-joined, or ``"none"``) and
    ``n_in_band_findings``. For ``ref-blind-prior`` the margin is logit(prior) − logit(0.3), so the
    band selects the findings whose demo prevalence puts p(yes) between 0.4 and 0.6, not those
    whose prior lies there.
    """
    lo, hi = ABSTAIN_BAND
    out: dict = {}
    band_any = np.zeros(len(trials), dtype=bool)
    for side in "cd":
        p_yes = 1.0 / (1.0 + np.exp(-trials[f"margin_{side}"].to_numpy(float)))
        band = (p_yes > lo) & (p_yes < hi)
        unc = np.asarray(abstained(trials[f"answer_{side}"])).astype(bool)
        band_any |= band
        out.update({f"n_abstain_{side}": int(unc.sum()), f"n_planted_{side}": int(band.sum()),
                    f"holds_{side}": bool(np.array_equal(unc, band))})
    out["holds"] = out["holds_c"] and out["holds_d"]
    out["abstain_rate_c"] = out["n_abstain_c"] / len(trials) if len(trials) else float("nan")
    found = [f for f in pd.unique(trials["finding"].to_numpy()[band_any])]
    out["in_band_findings"] = ", ".join(sorted(found)) if found else "none"
    out["n_in_band_findings"] = len(found)
    return out


def abstention_table(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int) -> TableResult:
    """Abstention rates, the substitution effect on abstention, and flips counting Uncertain.

    Values (``m.unc.`` keys): ``<P_unc|A_unc>.abstain_c`` / ``abstain_d`` / ``abstain_case``
    (either image) and ``substitution_effect_pp`` (abstain_d − abstain_c), each with lo/hi;
    ``flip.P`` / ``flip.A`` (three-valued flips of the Uncertain arms) and ``flip.A_minus_P_pp``;
    ``forced.A_minus_P_pp`` (the generated-answer forced-choice difference), each with lo/hi;
    ``n_unscoreable``.
    """
    _need(arms, UNCERTAIN_ARMS, "abstention_table")
    paired = paired_trials({k: arms[k] for k in UNCERTAIN_ARMS})
    values: dict = {}
    rows = []
    for name in ("P_unc", "A_unc"):
        t = paired[name]
        ac, ad = abstained(t["answer_c"]).astype(float), abstained(t["answer_d"]).astype(float)
        f = pd.DataFrame({"patient_id": t["patient_id"].to_numpy(), "c": ac, "d": ad, "any": np.maximum(ac, ad)})
        res = bootstrap_rates(f, rates={"abstain_c": "c", "abstain_d": "d", "abstain_case": "any"},
                              contrasts={"substitution_effect": ("diff", "abstain_d", "abstain_c")},
                              n_draws=n_draws, seed=seed)
        for k in ("abstain_c", "abstain_d", "abstain_case"):
            put_interval(values, f"m.unc.{name}.{k}", res[k])
        put_interval(values, f"m.unc.{name}.substitution_effect_pp", res["substitution_effect"], scale=100)
        values[f"m.unc.{name}.n_abstain_c"] = int(ac.sum())
        values[f"m.unc.{name}.n_abstain_d"] = int(ad.sum())
        rows.append({"arm": _UNC_LABELS[name], "quantity": "abstention, original image", "metric": "abstention_rate",
                     "share": res["abstain_c"][0],
                     "share_lo": res["abstain_c"][1], "share_hi": res["abstain_c"][2]})
        rows.append({"arm": _UNC_LABELS[name], "quantity": "abstention, substitute", "metric": "abstention_rate",
                     "share": res["abstain_d"][0],
                     "share_lo": res["abstain_d"][1], "share_hi": res["abstain_d"][2]})
        rows.append({"arm": _UNC_LABELS[name], "quantity": "substitution effect on abstention (substitute − original)",
                     "metric": "paired_diff", "share": res["substitution_effect"][0], "share_lo": res["substitution_effect"][1],
                     "share_hi": res["substitution_effect"][2]})
    # flips counting a change to or from Uncertain, and the forced choice, on the same draws
    fp, vp = uncertain_flips(paired["P_unc"]["answer_c"], paired["P_unc"]["answer_d"])
    fa, va = uncertain_flips(paired["A_unc"]["answer_c"], paired["A_unc"]["answer_d"])
    gp_c, gp_d, gvp = answers(paired["P"], "generated")
    ga_c, ga_d, gva = answers(paired["A"], "generated")
    ok = vp & va & gvp & gva
    values["m.unc.n_unscoreable"] = int((~ok).sum())
    f = pd.DataFrame({"patient_id": paired["P"]["patient_id"].to_numpy()[ok], "up": fp[ok].astype(float),
                      "ua": fa[ok].astype(float), "fp": (gp_c != gp_d)[ok].astype(float),
                      "fa": (ga_c != ga_d)[ok].astype(float)})
    res = bootstrap_rates(f, rates={"flip.P": "up", "flip.A": "ua", "forced.P": "fp", "forced.A": "fa"},
                          contrasts={"flip.A_minus_P": ("diff", "flip.A", "flip.P"),
                                     "forced.A_minus_P": ("diff", "forced.A", "forced.P")},
                          n_draws=n_draws, seed=seed)
    for k in ("flip.P", "flip.A", "forced.P", "forced.A"):
        put_interval(values, f"m.unc.{k}", res[k])
    for k in ("flip.A_minus_P", "forced.A_minus_P"):
        put_interval(values, f"m.unc.{k}_pp", res[k], scale=100)
    for k, label in (("flip.P", "flip rate counting Uncertain, P"), ("flip.A", "flip rate counting Uncertain, A"),
                     ("forced.P", "flip rate, forced Yes/No (generated), P"),
                     ("forced.A", "flip rate, forced Yes/No (generated), A")):
        rows.append({"arm": {"flip": "Yes/No/Uncertain", "forced": "forced Yes/No"}[k.split(".")[0]],
                     "quantity": label, "metric": "flip_rate", "share": res[k][0], "share_lo": res[k][1],
                     "share_hi": res[k][2]})
    values["m.unc.n_trials"] = int(ok.sum())
    # the "metric" column formats each row: abstention and flip rates in %, the substitution effect in pp
    return TableResult(pd.DataFrame(rows), values, index=("arm", "quantity"),
                       labels={"arm": "arm", "quantity": "quantity", "share": "estimate"},
                       caption="Yes/No/Uncertain: abstention and flips counting Uncertain, beside the forced choice")


PAPER_KEYS: dict[str, str] = {
    "m.order.lowercase.P_rev.flip_rate": "m.rev.P", "m.order.lowercase.A_rev.flip_rate": "m.rev.A",
    "m.order.lowercase.P.rev_minus_default.diff_pp": "m.rev.P_diff",
    "m.order.lowercase.A.rev_minus_default.diff_pp": "m.rev.A_diff",
    "m.order.lowercase.rev.P_minus_A.diff_pp": "m.rev.report_diff",
    "m.order.lowercase.default.P_minus_A.diff_pp": "m.default.report_diff",
    "m.order.lowercase.order_x_report.interaction_pp": "m.order_gap",
    "m.order.generated.A.rev_minus_default.diff_pp": "m.rev.gen_A",
    "m.order.lowercase.P.flip_rate": "t5.instr.lower.P", "m.order.lowercase.A.flip_rate": "t5.instr.lower.A",
    "m.unc.P_unc.abstain_c": "m.unc.abstain_P", "m.unc.P_unc.substitution_effect_pp": "m.unc.abstain_effect",
    "m.unc.flip.P": "m.unc.P", "m.unc.flip.A": "m.unc.A", "m.unc.flip.A_minus_P_pp": "m.unc.diff",
    "m.unc.forced.A_minus_P_pp": "m.forced.diff",
    "m.order.family.A.rev_minus_default.diff_pp": "m.rev.family_A",
    "m.shift.changed_min": "m.rev.changed_lo", "m.shift.changed_max": "m.rev.changed_hi",
    "m.shift.present.yes_shift_max": "m.rev.yes_shift_P_lo", "m.shift.present.yes_shift_min": "m.rev.yes_shift_P_hi",
    "m.shift.generated.yes_shift_min": "m.rev.yes_shift_gen_max",
}
"""Run value key -> published value id (ModaLens App. M; the paper's abstention "on 1.5% of cases"
is read as the original image's abstention rate)."""

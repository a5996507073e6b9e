"""ModaLens Appendix D: chronology (Table 11), the historical framing and the reliability warning.

* :func:`chronology_table` -- same-patient pairs split by the signed study gap (substitute later /
  earlier; ties and undated pairs counted), the pair accounting of the label-differing pairs, and
  agreement of the substitute-image answer with the report's label by chronology, by time gap and
  in the "stale report" cell;
* :func:`framing_table` -- the report-present arm with a framing sentence (historical, warning)
  under the answer instruction: flip rates under three readouts, paired differences against the
  plain framing, against each other and against no report, format compliance, and agreement on
  the substitute with the report's and the shown image's label;
* :func:`framing_strata` -- the historical-framing flip rate where the framing is true (substitute
  later) and where it is not (earlier), both strata scored on the same patient draws;
* :func:`framing_validation` -- the planted framing effect of ``ref-anchored@w`` recovered.

A label *differs* when the substitute study carries a CheXpert value for the asked finding that is
not the source's value (raw codes 1 / 0 / −1; the paper's 2,168 = 3,180 − 171 without a value −
841 with the same value); for the composite question, which has no code, its any-of-13 target is
the value. Agreement with the report's label is the substitute-image answer against the source
target (the label of the report shown).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..metrics.arms import answers, flip_rate_rows, paired_trials, put_interval
from ..metrics.prompt_variants import chronology, gap_bins, signed_gap
from ..vocab import COMPOSITE
from ..stats import bootstrap_rates
from .result import TableResult

__all__ = ["chronology_table", "framing_table", "framing_sides", "framing_strata", "framing_validation", "PAPER_KEYS",
           "FRAMING_ARMS", "AUDIT_PREFIXES"]

FRAMING_ARMS = ("plain", "historical", "warning", "absent")
"""Arms of :func:`framing_table`: the instructed report-present arm under each framing, and the
instructed report-absent arm."""

AUDIT_PREFIXES = ("d.",)
"""Audit checks of this appendix (the identities the published numbers satisfy)."""


def _pair_values(t: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The asked finding's value on the source and the substitute (raw code; composite: target)."""
    comp = (t["finding"] == COMPOSITE).to_numpy()
    vc = np.where(comp, t["target_c"].to_numpy(dtype=float), t["code_c"].to_numpy(dtype=float))
    vd = np.where(comp, t["target_d"].to_numpy(dtype=float), t["code_d"].to_numpy(dtype=float))
    return vc, vd


def chronology_table(present: pd.DataFrame, absent: pd.DataFrame | None = None, *, n_draws: int,
                     seed: int) -> TableResult:
    """Table 11: agreement with the report's label on label-differing same-patient pairs, by chronology.

    ``present`` (and optionally ``absent``) are one-question trials of the plain prompt; the
    lowercase readout. Values: the pair accounting (``chron.*``) and, per row, the agreement
    (``chron.<row>.agree_P`` with interval; ``agree_A`` with ``absent``).
    """
    arms = {"P": present} if absent is None else {"P": present, "A": absent}
    paired = paired_trials(arms)
    p = paired["P"]
    gap, unit = signed_gap(p)
    chron = chronology(gap.to_numpy())
    same = (p["pair_type"] == "same-patient").to_numpy()
    vc, vd = _pair_values(p)
    no_value = same & np.isnan(vd)
    same_value = same & ~np.isnan(vd) & (vc == vd)
    differs = same & ~np.isnan(vd) & ~np.isnan(vc) & (vc != vd)
    values: dict = {
        "chron.unit": unit, "chron.n_pairs": int(len(p)), "chron.n_same_patient": int(same.sum()),
        "chron.n_cross_patient": int((~same).sum()), "chron.n_patients": int(p["patient_id"].nunique()),
        "chron.n_patients_same": int(p.loc[same, "patient_id"].nunique()),
        "chron.n_no_value": int(no_value.sum()), "chron.n_same_value": int(same_value.sum()),
        "chron.n_differs": int(differs.sum()), "chron.n_patients_differs": int(p.loc[differs, "patient_id"].nunique()),
    }
    for c in ("later", "earlier", "tie", "undated"):
        values[f"chron.same.{c}"] = int((same & (chron == c)).sum())
        values[f"chron.differs.{c}"] = int((differs & (chron == c)).sum())
    frame = pd.DataFrame({"patient_id": p["patient_id"].to_numpy()})
    rates: dict = {}
    for name, t in paired.items():
        yc, yd, _ = answers(t, "lowercase")
        frame[f"agree_{name}"] = (yd == t["target_c"].to_numpy(dtype=float)).astype(float)
        frame[f"flip_{name}"] = (yc != yd).astype(float)
        rates[f"agree_{name}"] = f"agree_{name}"
        rates[f"flip_{name}"] = f"flip_{name}"
    bins = gap_bins(gap.to_numpy(), unit) if unit != "none" else np.full(len(p), "undated", dtype=object)
    stale = differs & (chron == "later") & (p["target_c"].to_numpy() == 0) & (p["target_d"].to_numpy() == 1)
    subsets = [("all label-differing pairs", differs), ("substitute later", differs & (chron == "later")),
               ("substitute earlier", differs & (chron == "earlier"))]
    if unit != "none":
        from ..metrics.prompt_variants import GAP_BINS

        subsets += [(f"gap {label}", differs & (bins == label)) for _, label in GAP_BINS[unit]]
    subsets.append(("stale report (later study labels it, the shown report does not)", stale))
    keys = ["all", "later", "earlier"] + ([f"gap{k}" for k in range(1, 4)] if unit != "none" else []) + ["stale"]
    rows = []
    for key, (label, mask) in zip(keys, subsets):
        row = {"row": label, "pairs": int(mask.sum()), "patients": int(p.loc[mask, "patient_id"].nunique())}
        values[f"chron.{key}.n_pairs"] = row["pairs"]
        if row["pairs"]:
            res = bootstrap_rates(frame[mask], rates=rates, n_draws=n_draws, seed=seed)
            for name in arms:
                put_interval(values, f"chron.{key}.agree_{name}", res[f"agree_{name}"])
                put_interval(values, f"chron.{key}.flip_rate_{name}", res[f"flip_{name}"])
                row.update({f"agree_{name}": res[f"agree_{name}"][0], f"agree_{name}_lo": res[f"agree_{name}"][1],
                            f"agree_{name}_hi": res[f"agree_{name}"][2], f"flip_rate_{name}": res[f"flip_{name}"][0]})
        rows.append(row)
    # later vs earlier on the same draws
    both = differs & np.isin(chron, ["later", "earlier"])
    if (differs & (chron == "later")).any() and (differs & (chron == "earlier")).any():
        strat = frame[both].assign(_stratum=chron[both])
        res = bootstrap_rates(strat, rates={"agree_P": "agree_P"}, n_draws=n_draws, seed=seed, strata="_stratum")
        diff = _stratum_contrast(strat, "agree_P", n_draws=n_draws, seed=seed)
        put_interval(values, "chron.later_minus_earlier.agree_P_pp", diff, scale=100)
        values["chron.later_minus_earlier.n_patients"] = int(strat["patient_id"].nunique())
        assert np.isclose(res["later"]["agree_P"][0] - res["earlier"]["agree_P"][0], diff[0])
    out = pd.DataFrame(rows)
    metrics = {"agree_P": "agreement_present", "agree_P_lo": "share_lo", "agree_P_hi": "share_hi",
               "agree_A": "agreement_absent", "agree_A_lo": "share_lo", "agree_A_hi": "share_hi",
               "flip_rate_P": "flip_rate_present", "flip_rate_A": "flip_rate_absent"}
    metrics = {c: m for c, m in metrics.items() if c in out.columns}
    return TableResult(out, values, index=("row",), metrics=metrics,
                       labels={"row": "pairs", "pairs": "pairs (n)", "patients": "patients",
                               "agree_A_lo": "A: 95% low", "agree_A_hi": "A: 95% high"},
                       caption=f"Agreement of the substitute-image answer with the report's label; gap unit: {unit}")


def _stratum_contrast(frame: pd.DataFrame, column: str, *, n_draws: int, seed: int) -> tuple[float, float, float]:
    """later − earlier of the mean of ``column``, both strata on the same patient draws."""
    from ..stats import cluster_bootstrap

    data = frame.assign(_n=1.0)
    res = cluster_bootstrap(data, cluster="patient_id", sums={"n": "_n", "x": column},
                            statistic=lambda s: {"rate": np.where(s["n"] > 0, s["x"] / np.where(s["n"] > 0, s["n"], 1), np.nan)},
                            n_draws=n_draws, rng=np.random.default_rng(seed), strata="_stratum")
    return res.contrast("rate", "later", "earlier")


def framing_table(arms: Mapping[str, pd.DataFrame], *, uninstructed: pd.DataFrame | None = None, n_draws: int,
                  seed: int) -> TableResult:
    """Historical framing and reliability warning (App. D), one-question design, instructed.

    ``arms`` maps :data:`FRAMING_ARMS` to trials (``plain``: instructed report present, no
    framing; ``absent``: instructed report absent). ``uninstructed`` is the plain report-present
    arm without the instruction (the paper's "+0.31 vs the uninstructed P"). Values (keys
    ``framing.<readout>.*``): flip rates, ``<arm>.vs_plain.diff_pp``, ``warning_minus_historical``,
    ``absent_minus_historical`` (the paper's gap), ``warning_minus_absent``, and per arm
    ``compliance_c``/``compliance_d``, ``acc_orig``/``acc_sub`` (against the concordant label),
    ``sub_report_label``, ``sub_shown_label`` and ``sub_shown_label_changed`` (with interval).
    """
    missing = [k for k in FRAMING_ARMS if k not in arms]
    if missing:
        raise ValueError(f"framing_table: arms {missing} missing (have {sorted(arms)})")
    arms = {k: arms[k] for k in FRAMING_ARMS}
    pairs = {"warning_minus_historical": ("warning", "historical"),
             "absent_minus_historical": ("absent", "historical"), "warning_minus_absent": ("warning", "absent")}
    values: dict = {}
    frames = []
    for readout in ("lowercase", "family", "generated"):
        r = flip_rate_rows(arms, reference="plain", readout=readout, pairs=pairs, n_draws=n_draws, seed=seed,
                           key=f"framing.{readout}")
        values.update(r.values)
        frames.append(r.frame.assign(readout=readout))
    if uninstructed is not None:
        r = flip_rate_rows({"historical": arms["historical"], "uninstructed": uninstructed}, reference="uninstructed",
                           readout="lowercase", n_draws=n_draws, seed=seed, key="framing.lowercase.vs_uninstructed")
        for end in ("", "_lo", "_hi"):
            values[f"framing.lowercase.historical_vs_uninstructed.diff_pp{end}"] = r.values[
                f"framing.lowercase.vs_uninstructed.historical.vs_uninstructed.diff_pp{end}"]
            values[f"framing.lowercase.uninstructed.flip_rate{end}"] = r.values[
                f"framing.lowercase.vs_uninstructed.uninstructed.flip_rate{end}"]
    frame = pd.concat(frames, ignore_index=True)[["readout", "arm", "flip_rate", "flip_rate_lo", "flip_rate_hi",
                                                  "flips", "diff", "diff_lo", "diff_hi", "n_trials"]]
    values["framing.n_trials"] = int(frame["n_trials"].iloc[0])
    return TableResult(frame, values,
                       index=("readout", "arm"), metrics={"flip_rate": "flip_rate", "flip_rate_lo": "flip_rate_lo", "flip_rate_hi": "flip_rate_hi",
                                "diff": "paired_diff", "diff_lo": "paired_diff_lo", "diff_hi": "paired_diff_hi"},
                       labels={"readout": "readout", "arm": "arm", "flips": "flips", "n_trials": "trials"},
                       caption="Framings of the report (instructed, one-question): flip rates and paired "
                               "differences against the plain framing")


def framing_sides(arms: Mapping[str, pd.DataFrame], *, n_draws: int, seed: int) -> TableResult:
    """Per framing arm (lowercase readout): accuracy against the concordant label on both images,
    agreement on the substitute with the report's label and with the shown image's label (on all
    pairs and on the label-changing pairs), and format compliance of the generations per side.

    Values ``framing.<arm>.acc_orig``, ``acc_sub`` (= ``sub_report_label``), ``sub_shown_label``,
    ``sub_shown_label_changed`` (each with ``_lo``/``_hi``), ``compliance_c``, ``compliance_d``,
    ``n_label_changed``.
    """
    missing = [k for k in FRAMING_ARMS if k not in arms]
    if missing:
        raise ValueError(f"framing_sides: arms {missing} missing (have {sorted(arms)})")
    values: dict = {}
    paired = paired_trials({k: arms[k] for k in FRAMING_ARMS})
    rows = []
    labels = {"acc_orig": "accuracy on the original image (concordant label)",
              "acc_sub": "substitute: agreement with the report's label (accuracy vs the concordant label)",
              "sub_shown_label": "substitute: agreement with the shown image's label",
              "sub_shown_label_changed": "substitute: shown image's label, label-changing pairs",
              "compliance_c": "format compliance, original image", "compliance_d": "format compliance, substitute"}
    for name, t in paired.items():
        yc, yd, _ = answers(t, "lowercase")
        tc, td = t["target_c"].to_numpy(dtype=float), t["target_d"].to_numpy(dtype=float)
        changed = t["label_changed"].to_numpy(dtype=float) == 1
        f = pd.DataFrame({"patient_id": t["patient_id"].to_numpy(), "acc_orig": (yc == tc).astype(float),
                          "acc_sub": (yd == tc).astype(float), "sub_shown": (yd == td).astype(float),
                          "changed": changed.astype(float), "sub_shown_changed": ((yd == td) & changed).astype(float)})
        rates = {"acc_orig": "acc_orig", "acc_sub": "acc_sub", "sub_shown_label": "sub_shown"}
        if changed.any():
            rates["sub_shown_label_changed"] = ("sub_shown_changed", "changed")
        res = bootstrap_rates(f, rates=rates, n_draws=n_draws, seed=seed)
        if not changed.any():  # no label-changing pair: the share is undefined
            res["sub_shown_label_changed"] = (np.nan, np.nan, np.nan)
        for stat, iv in res.items():
            put_interval(values, f"framing.{name}.{stat}", iv)
            rows.append({"arm": name, "quantity": labels[stat], "share": iv[0], "share_lo": iv[1], "share_hi": iv[2]})
        for suffix in ("", "_lo", "_hi"):
            values[f"framing.{name}.sub_report_label{suffix}"] = values[f"framing.{name}.acc_sub{suffix}"]
        values[f"framing.{name}.n_label_changed"] = int(changed.sum())
        for side in ("c", "d"):
            comp = t[f"compliant_{side}"]
            share = float(comp.astype(float).mean()) if comp.notna().any() else float("nan")
            values[f"framing.{name}.compliance_{side}"] = share
            rows.append({"arm": name, "quantity": labels[f"compliance_{side}"], "share": share,
                         "share_lo": np.nan, "share_hi": np.nan})
    values["framing.sides.n_trials"] = int(len(paired["plain"]))
    return TableResult(pd.DataFrame(rows), values,
                       index=("arm", "quantity"), metrics={"share": "share", "share_lo": "share_lo", "share_hi": "share_hi"},
                       labels={"arm": "arm", "quantity": "quantity"},
                       caption="Framings (lowercase readout): accuracy, agreement on the substitute, format compliance")


def framing_strata(historical: pd.DataFrame, *, n_draws: int, seed: int) -> TableResult:
    """The historical-framing flip rate on same-patient pairs with a later vs an earlier substitute.

    Both strata are scored on the same draws of the patients that have a dated same-patient pair
    (a patient can contribute pairs to both strata). Values: ``strata.n_later`` / ``n_earlier`` /
    ``n_tie`` / ``n_undated`` (pairs), ``strata.n_patients`` (the resampling unit: patients with a
    later or earlier pair), ``n_patients_later`` / ``_earlier`` / ``_both``, and per readout
    (lowercase, generated) ``strata.<readout>.later`` / ``earlier`` flip rates and
    ``later_minus_earlier_pp`` with intervals.
    """
    t = historical
    gap, unit = signed_gap(t)
    chron = chronology(gap.to_numpy())
    same = (t["pair_type"] == "same-patient").to_numpy()
    values: dict = {"strata.unit": unit}
    for c in ("later", "earlier", "tie", "undated"):
        values[f"strata.n_{c}"] = int((same & (chron == c)).sum())
    keep = same & np.isin(chron, ["later", "earlier"])
    pats = {c: set(t.loc[keep & (chron == c), "patient_id"]) for c in ("later", "earlier")}
    values.update({"strata.n_patients": len(pats["later"] | pats["earlier"]),
                   "strata.n_patients_later": len(pats["later"]), "strata.n_patients_earlier": len(pats["earlier"]),
                   "strata.n_patients_both": len(pats["later"] & pats["earlier"]),
                   "strata.n_patients_same_patient_pairs": int(t.loc[same, "patient_id"].nunique())})
    rows = []
    for readout in ("lowercase", "generated"):
        yc, yd, valid = answers(t, readout)
        m = keep & valid
        f = pd.DataFrame({"patient_id": t["patient_id"].to_numpy()[m], "flip": (yc != yd)[m].astype(float),
                          "_stratum": chron[m]})
        if f["_stratum"].nunique() < 2:
            continue
        res = bootstrap_rates(f, rates={"fr": "flip"}, n_draws=n_draws, seed=seed, strata="_stratum")
        diff = _stratum_contrast(f, "flip", n_draws=n_draws, seed=seed)
        for c in ("later", "earlier"):
            put_interval(values, f"strata.{readout}.{c}", res[c]["fr"])
        put_interval(values, f"strata.{readout}.later_minus_earlier_pp", diff, scale=100)
        rows.append({"readout": readout, "later": res["later"]["fr"][0], "earlier": res["earlier"]["fr"][0],
                     "diff": diff[0], "diff_lo": diff[1], "diff_hi": diff[2], "trials": int(m.sum()),
                     "patients": int(f["patient_id"].nunique())})
    frame = pd.DataFrame(rows)
    return TableResult(frame, values, index=("readout",), metrics={"later": "flip_rate_later", "earlier": "flip_rate_earlier", "diff": "paired_diff",
                                               "diff_lo": "paired_diff_lo", "diff_hi": "paired_diff_hi"},
                       labels={"readout": "readout", "trials": "trials", "patients": "patients (unit)"},
                       caption="Historical framing: substitute later (the framing is true) vs earlier")


def framing_validation(*, plain: pd.DataFrame, historical: pd.DataFrame, warning: pd.DataFrame,
                       discounted: pd.DataFrame, discount: float, n_draws: int, seed: int) -> dict:
    """The planted framing effect of ``ref-anchored@w`` recovered by the chapter's estimator.

    ``discounted`` is ``ref-anchored@(w * discount)`` under the plain framing: by construction the
    warning arm answers exactly as it does, and the historical arm exactly as the plain arm. The
    planted effect is FR(discounted) − FR(plain) on the common trials; ``recovered`` is the
    chapter's warning − plain estimate with its interval. Returns the values and the checks
    (``warning_equals_discounted``, ``historical_equals_plain``, ``planted_inside_interval``).
    """
    a = paired_trials({"plain": plain, "historical": historical, "warning": warning, "discounted": discounted})
    cols = ["readout_c", "readout_d", "margin_c", "margin_d"]

    def same(x, y):
        return bool((x["readout_c"].to_numpy() == y["readout_c"].to_numpy()).all()
                    and (x["readout_d"].to_numpy() == y["readout_d"].to_numpy()).all()
                    and np.allclose(x[cols[2:]].to_numpy(float), y[cols[2:]].to_numpy(float), rtol=0, atol=1e-12))

    r = flip_rate_rows(a, reference="plain", readout="lowercase", n_draws=n_draws, seed=seed, key="v")
    planted = r.values["v.discounted.flip_rate"] - r.values["v.plain.flip_rate"]
    lo, hi = r.values["v.warning.vs_plain.diff_pp_lo"] / 100, r.values["v.warning.vs_plain.diff_pp_hi"] / 100
    out = {"discount": float(discount), "planted_pp": 100 * planted,
           "recovered_pp": r.values["v.warning.vs_plain.diff_pp"],
           "recovered_lo_pp": 100 * lo, "recovered_hi_pp": 100 * hi,
           "historical_pp": r.values["v.historical.vs_plain.diff_pp"],
           "warning_equals_discounted": same(a["warning"], a["discounted"]),
           "historical_equals_plain": same(a["historical"], a["plain"]),
           "planted_inside_interval": bool(lo - 1e-12 <= planted <= hi + 1e-12),
           "n_trials": r.values["v.n_trials"]}
    return out


PAPER_KEYS: dict[str, str] = {
    "chron.n_differs": "d.changed_pairs", "chron.n_patients_differs": "d.changed_patients",
    "chron.differs.later": "d.later", "chron.differs.earlier": "d.earlier", "chron.n_no_value": "d.no_value",
    "chron.n_same_value": "d.same_value", "strata.n_later": "d.strata_later", "strata.n_earlier": "d.strata_earlier",
    "strata.n_patients": "d.strata_patients",
    "strata.lowercase.later": "d.hist.later", "strata.lowercase.earlier": "d.hist.earlier",
    "strata.lowercase.later_minus_earlier_pp": "d.hist.strata_diff",
    "strata.generated.later": "d.hist.gen_later", "strata.generated.earlier": "d.hist.gen_earlier",
    "strata.generated.later_minus_earlier_pp": "d.hist.gen_strata_diff",
    "framing.lowercase.historical.flip_rate": "d.hist.fr",
    "framing.lowercase.historical.vs_plain.diff_pp": "d.hist.diff",
    "framing.lowercase.absent_minus_historical.diff_pp": "d.hist.gap",
    "framing.lowercase.historical_vs_uninstructed.diff_pp": "d.hist.vs_uninstructed",
    "framing.lowercase.warning.flip_rate": "d.warn.fr",
    "framing.lowercase.warning.vs_plain.diff_pp": "d.warn.diff",
    "framing.lowercase.warning_minus_historical.diff_pp": "d.warn.vs_hist",
    "framing.family.warning.flip_rate": "d.warn.family",
    "framing.lowercase.warning_minus_absent.diff_pp": "d.warn.vs_none",
    "framing.warning.sub_report_label": "d.warn.report_label",
    "framing.warning.sub_shown_label": "d.warn.shown_label",
    "framing.warning.sub_shown_label_changed": "d.warn.changing",
    "framing.generated.warning.vs_plain.diff_pp": "d.warn.gen_diff",
    "framing.historical.acc_orig": "d.hist.acc_orig", "framing.historical.acc_sub": "d.hist.acc_sub",
    "framing.generated.historical.vs_plain.diff_pp": "d.hist.gen_diff",
    "framing.generated.warning.flip_rate": "d.warn.generated",
    "framing.warning.compliance_c": "d.warn.compliance_P", "framing.warning.compliance_d": "d.warn.compliance_A",
    "framing.historical.compliance_c": "d.hist.compliance_P", "framing.historical.compliance_d": "d.hist.compliance_A",
}
"""Run value key -> published value id (:func:`shovir_core.papers.published`, ModaLens App. D)."""

# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # ModaLens Appendix D: chronology, the historical framing and the reliability warning
#
# The model is never told that the report may be stale. Appendix D asks of the
# report-present arm: whether agreement with the report's label depends on the substitute being a
# later or an earlier study (Table 11, a retrospective stratification); whether a sentence before
# the report, framing it as an earlier study's ("historical") or warning that it may not describe
# the image and may be wrong, restores image sensitivity; and whether the historical framing does
# better on the pairs where it is true. The paper finds neither framing restores it: under the
# warning MedGemma-27B's answer changes with the image on
# {glue:text}`ml.d.paper.framing.lowercase.warning.flip_rate:.2%` of pairs, a paired difference of
# {glue:text}`ml.d.paper.framing.lowercase.warning_minus_absent.diff_pp:+.2f` points from no report
# (published values, `shovir_core.papers`).
#
# **What the demo runs.** The 64-px NIH cohort (one-question design on
# {glue:text}`ml.d.framing.n_trials` cases) has no report text and no study dates: reports are
# **template reports** written from the labels, and chronology is the order of the NIH follow-up
# visits. The model is `ref-anchored@0.5` (a hashed half of the (report, question) pairs answered
# from the report, the rest from the image), whose report weight is halved when a warning precedes the report and unchanged under the historical framing — a
# **planted framing effect** the chapter must recover inside its interval. `ref-blind-prior` must be
# unaffected by every framing. The framing sentences are this package's paraphrases of the paper's
# description (`shovir_core.models.prompts.FRAMINGS`); the verbatim sentences are not published.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
n_draws = None
bootstrap_seed = None
reproduces_paper = None

# %%
import numpy as np
import pandas as pd

from shovir_core import book
from shovir_core.tables.key_values import labelled_values
from shovir_core.book.paper_section import paper_section
from shovir_core.models.prompts import FRAMINGS
from shovir_core.models.reference import FRAMING_DISCOUNT
from shovir_core.tables import modalens_appd as appd

runs = book.load_runs("modalens_appd", profile=profile, run_ids=run_ids)
trials = {key: run.trials for key, run in runs.items()}
has_validation = "P_quarter" in trials  # the reference-model arms (demo profile)
framed = {"plain": trials["P_instr"], "historical": trials["P_hist"], "warning": trials["P_warn"],
          "absent": trials["A_instr"]}
book.glue("ml.d.framing_sentence.historical", FRAMINGS["historical"], runs=runs)
book.glue("ml.d.framing_sentence.warning", FRAMINGS["warning"], runs=runs)
book.glue("ml.d.n_draws", n_draws, runs=runs)
for k, i in (("patients", "design.patients"), ("single_study_patients", "design.single_study_patients"),
             ("strata_patients", "d.strata_patients")):
    book.glue_paper(f"ml.d.paper.{k}", i)
book.glue_paper("ml.d.paper.multi_study_patients", "design.patients - design.single_study_patients")

# %% [markdown]
# The sentences, placed on the line before `Report:`:
#
# * historical — "{glue:text}`ml.d.framing_sentence.historical`"
# * warning — "{glue:text}`ml.d.framing_sentence.warning`"
#
# ## Table 11: chronology of the label-differing same-patient pairs
#
# Of the {glue:text}`ml.d.chron.n_same_patient` same-patient pairs (cross-patient pairs have no
# chronology), {glue:text}`ml.d.chron.n_no_value` carry no value for the asked finding on the
# substitute, {glue:text}`ml.d.chron.n_same_value` the same value, and
# {glue:text}`ml.d.chron.n_differs` a different one ({glue:text}`ml.d.chron.n_patients_differs`
# patients): the substitute is later on {glue:text}`ml.d.chron.differs.later` and earlier on
# {glue:text}`ml.d.chron.differs.earlier` of them (gap unit: {glue:text}`ml.d.chron.unit`). Agreement
# is the substitute-image answer against the report's (source) label; plain prompt, lowercase
# readout, {glue:text}`ml.d.n_draws` patient-clustered draws.

# %% tags=["nbval-check-output"]
t11 = appd.chronology_table(trials["P"], trials["A"], n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(t11, runs=runs)

# %%
v11 = t11.values
assert v11["chron.n_no_value"] + v11["chron.n_same_value"] + v11["chron.n_differs"] == v11["chron.n_same_patient"], \
    "Part E item 11: the same-patient pairs split into no value / same value / differing value"
assert v11["chron.differs.later"] + v11["chron.differs.earlier"] + v11["chron.differs.tie"] \
    + v11["chron.differs.undated"] == v11["chron.n_differs"]
assert v11["chron.n_same_patient"] + v11["chron.n_cross_patient"] == v11["chron.n_pairs"]
assert v11["chron.stale.n_pairs"] <= v11["chron.differs.later"]
book.glue_values("ml.d", v11, runs=runs)

# %% [markdown]
# With the report, the demo model's substitute answer follows the report's label on
# {glue:text}`ml.d.chron.later.agree_P:.1%` of later and {glue:text}`ml.d.chron.earlier.agree_P:.1%`
# of earlier pairs (later − earlier {glue:text}`ml.d.chron.later_minus_earlier.agree_P_pp:+.1f`
# points [{glue:text}`ml.d.chron.later_minus_earlier.agree_P_pp_lo:+.1f`,
# {glue:text}`ml.d.chron.later_minus_earlier.agree_P_pp_hi:+.1f`]); in the stale-report cell
# ({glue:text}`ml.d.chron.stale.n_pairs` pairs: a later study labels the finding, the shown report
# does not) on {glue:text}`ml.d.chron.stale.agree_P:.1%`. The reference model has no notion of time,
# so any difference between the strata here comes from the pairs, not from chronology.
#
# ## The framings: flip rates and paired differences
#
# One-question design, "Answer with exactly Yes or No." appended, report present under each
# framing and report absent; every arm paired against the plain framing on identical trials.

# %% tags=["nbval-check-output"]
tf = appd.framing_table(framed, uninstructed=trials["P"], n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(tf, runs=runs)

# %%
vf = tf.values
for readout in ("lowercase", "family", "generated"):
    k = f"framing.{readout}"
    assert np.isclose(vf[f"{k}.warning.vs_plain.diff_pp"],
                      100 * (vf[f"{k}.warning.flip_rate"] - vf[f"{k}.plain.flip_rate"]))
    assert np.isclose(vf[f"{k}.absent_minus_historical.diff_pp"],
                      100 * (vf[f"{k}.absent.flip_rate"] - vf[f"{k}.historical.flip_rate"]))
    assert vf[f"{k}.warning.vs_plain.diff_pp_lo"] <= vf[f"{k}.warning.vs_plain.diff_pp"] \
        <= vf[f"{k}.warning.vs_plain.diff_pp_hi"]
book.glue_values("ml.d", vf, runs=runs)

# %% [markdown]
# Under the warning the demo model's answer changes with the image on
# {glue:text}`ml.d.framing.lowercase.warning.flip_rate:.2%` of pairs, against
# {glue:text}`ml.d.framing.lowercase.plain.flip_rate:.2%` under the plain framing
# ({glue:text}`ml.d.framing.lowercase.warning.vs_plain.diff_pp:+.2f` points
# [{glue:text}`ml.d.framing.lowercase.warning.vs_plain.diff_pp_lo:+.2f`,
# {glue:text}`ml.d.framing.lowercase.warning.vs_plain.diff_pp_hi:+.2f`]) and
# {glue:text}`ml.d.framing.lowercase.absent.flip_rate:.2%` without the report.
#
# ## Validation: the planted framing effect is recovered
#
# (This section needs the reference-model arms, which the demo profile runs; a profile without
# them skips it, and the numbers in its sentences are not computed (they print as nan).) `ref-anchored@w` weighs a warning-framed report by `w × FRAMING_DISCOUNT["warning"]`
# ({glue:text}`ml.d.validation.discount`), so under the warning `ref-anchored@0.5` must answer
# exactly as `ref-anchored@0.25` does with the plain report, and under the historical framing exactly
# as itself. The planted effect is therefore FR(`ref-anchored@0.25`, plain) − FR(`ref-anchored@0.5`,
# plain), measured on its own record; the chapter's warning − plain estimate must contain it.

# %% tags=["nbval-check-output"]
if has_validation:
    val = appd.framing_validation(plain=trials["P_instr"], historical=trials["P_hist"], warning=trials["P_warn"],
                                  discounted=trials["P_quarter"], discount=FRAMING_DISCOUNT["warning"],
                                  n_draws=n_draws, seed=bootstrap_seed)
    book.show(labelled_values(val, {
        "discount": "warning discount on the report weight", "planted_pp": "planted warning − plain effect (pp)",
        "recovered_pp": "recovered warning − plain effect (pp)", "recovered_lo_pp": "recovered, 95% low (pp)",
        "recovered_hi_pp": "recovered, 95% high (pp)", "historical_pp": "historical − plain effect (pp)",
        "warning_equals_discounted": "warning arm = ref-anchored@0.25 on every trial",
        "historical_equals_plain": "historical arm = plain on every trial",
        "planted_inside_interval": "planted effect inside the recovered interval", "n_trials": "trials"},
        caption="Framing validation: the planted warning effect against the recovered one."), runs=runs)

# %%
if has_validation:
    assert val["warning_equals_discounted"], "the warning arm answers as ref-anchored@(w/2) on every trial"
    assert val["historical_equals_plain"], "the historical framing leaves ref-anchored's answers unchanged"
    assert val["planted_inside_interval"], "the planted framing effect lies inside the recovered interval"
    assert np.isclose(val["planted_pp"], val["recovered_pp"]) and val["historical_pp"] == 0.0
    blind = {"plain": trials["blind_P"], "historical": trials["blind_P_hist"], "warning": trials["blind_P_warn"],
             "absent": trials["blind_A"]}
    tb = appd.framing_table(blind, n_draws=200, seed=bootstrap_seed)
    for arm in blind:
        for readout in ("lowercase", "family", "generated"):
            assert tb.values[f"framing.{readout}.{arm}.flip_rate"] == 0.0, f"ref-blind-prior flips under {arm}"
        assert (blind[arm].sort_values("trial_id")["margin_c"].to_numpy()
                == blind["plain"].sort_values("trial_id")["margin_c"].to_numpy()).all(), \
            f"ref-blind-prior's answers move under the {arm} arm"
    book.glue_values("ml.d.validation", {k: v for k, v in val.items() if not isinstance(v, bool)}, runs=runs)
    book.glue("ml.d.validation.blind_max_fr", max(v for k, v in tb.values.items() if k.endswith(".flip_rate")),
              runs=runs)
else:  # no reference-model arms in this profile: the validation is not run here
    book.glue_values("ml.d.validation", dict.fromkeys(
        ["discount", "planted_pp", "recovered_lo_pp", "recovered_hi_pp", "historical_pp", "blind_max_fr"],
        float("nan")), runs=runs)

# %% [markdown]
# The planted effect, {glue:text}`ml.d.validation.planted_pp:+.2f` points, lies inside the recovered
# interval [{glue:text}`ml.d.validation.recovered_lo_pp:+.2f`,
# {glue:text}`ml.d.validation.recovered_hi_pp:+.2f`]; the historical framing moves the reference
# model by {glue:text}`ml.d.validation.historical_pp:+.2f` points, as planted. `ref-blind-prior` flips
# on {glue:text}`ml.d.validation.blind_max_fr:.2%` of trials under every framing, with identical
# answers in every arm.
#
# ## On the substitute: the report's label or the shown image's
#
# Lowercase readout. Accuracy against the concordant label on the original and the substitute
# image; agreement with the shown (substitute) image's label on all pairs and on the
# label-changing pairs; format compliance of the short greedy generations per image side.

# %% tags=["nbval-check-output"]
ts = appd.framing_sides(framed, n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(ts, runs=runs)

# %%
vs = ts.values
for arm, t in framed.items():
    assert vs[f"framing.{arm}.n_label_changed"] == int((t["label_changed"] == 1).sum())
    for key in ("acc_orig", "acc_sub", "sub_shown_label", "sub_shown_label_changed"):
        assert vs[f"framing.{arm}.{key}_lo"] <= vs[f"framing.{arm}.{key}"] <= vs[f"framing.{arm}.{key}_hi"]
    assert 0.0 <= vs[f"framing.{arm}.compliance_c"] <= 1.0
book.glue_values("ml.d", vs, runs=runs)

# %% [markdown]
# Under the warning, the demo model's substitute answer matches the report's label on
# {glue:text}`ml.d.framing.warning.sub_report_label:.1%` of pairs and the shown image's on
# {glue:text}`ml.d.framing.warning.sub_shown_label:.1%`;
# {glue:text}`ml.d.framing.warning.sub_shown_label_changed:.1%` on the
# {glue:text}`ml.d.framing.warning.n_label_changed` label-changing pairs (paper:
# {glue:text}`ml.d.paper.framing.warning.sub_shown_label_changed:.2%`).
#
# ## Where the historical framing is true: later vs earlier substitutes
#
# The historical sentence is true only where the substitute is a later study than the report's.
# Both strata are scored on the same draws of the patients with a dated same-patient pair (a
# patient can contribute to both). Unit: {glue:text}`ml.d.strata.n_patients` patients
# ({glue:text}`ml.d.strata.n_patients_both` with pairs in both strata); on the paper's cohort this
# unit is the {glue:text}`ml.d.paper.patients` − {glue:text}`ml.d.paper.single_study_patients` =
# {glue:text}`ml.d.paper.multi_study_patients` patients with more than a single study, while the paper states
# {glue:text}`ml.d.paper.strata_patients` — the
# audit flags that discrepancy (check `d.strata_patients` below).

# %% tags=["nbval-check-output"]
tst = appd.framing_strata(trials["P_hist"], n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(tst, runs=runs)

# %%
vst = tst.values
assert vst["strata.n_later"] + vst["strata.n_earlier"] + vst["strata.n_tie"] + vst["strata.n_undated"] \
    == v11["chron.n_same_patient"], "Part E item 12: later + earlier (+ ties, undated) = same-patient pairs"
assert vst["strata.n_patients"] <= vst["strata.n_patients_same_patient_pairs"]
assert vst["strata.n_patients_later"] + vst["strata.n_patients_earlier"] - vst["strata.n_patients_both"] \
    == vst["strata.n_patients"]
book.glue_values("ml.d", vst, runs=runs)

# %% [markdown]
# Under the historical framing the demo model flips on {glue:text}`ml.d.strata.lowercase.later:.2%`
# of later and {glue:text}`ml.d.strata.lowercase.earlier:.2%` of earlier pairs
# ({glue:text}`ml.d.strata.lowercase.later_minus_earlier_pp:+.2f` points
# [{glue:text}`ml.d.strata.lowercase.later_minus_earlier_pp_lo:+.2f`,
# {glue:text}`ml.d.strata.lowercase.later_minus_earlier_pp_hi:+.2f`]).
#
# ## Paper vs this run, and the audit's checks
#
# The paper's Appendix D values (MedGemma-27B, MIMIC-CXR) beside this run's, in the run's units
# (rates as fractions, differences in points). In the demo the model, data and reports differ:
# context, not a replication. The `mimic` profile runs the paper's setting and asserts the framing
# differences fall inside the paper's intervals.

# %% tags=["nbval-check-output"]
vs_paper, audit_table = paper_section("ml.d", {**v11, **vf, **vs, **vst}, appd.PAPER_KEYS, reproduces_paper=reproduces_paper,
                                      runs=runs, name="ml-d-paper-vs-run", audit_prefixes=appd.AUDIT_PREFIXES,
                                      must_hold=("framing.lowercase.historical.vs_plain.diff_pp",
                                                 "framing.lowercase.warning.vs_plain.diff_pp",
                                                 "framing.lowercase.warning_minus_historical.diff_pp"))

# %%
audit = audit_table.frame
assert (audit.loc["d.strata", "status"] == "passed") and (audit.loc["d.changed_pairs_split", "status"] == "passed")

# %% [markdown]
# {glue:text}`ml.d.audit.n_checks` audit checks concern this appendix; {glue:text}`ml.d.audit.n_flagged`
# of them are flagged (see the audit chapter for the rule).
#
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

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
# # ModaLens Appendix M: option order and an explicit abstention option
#
# Checks of the answer instruction. Reversing the options ("Answer with exactly No or Yes.")
# tests whether the report effect is an artefact of listing Yes first; adding an Uncertain option
# ("Answer with exactly Yes, No or Uncertain.") tests whether the model, given a way out, abstains
# instead of following the report. For MedGemma-27B neither explains the effect: the order × report
# interaction is {glue:text}`ml.m.paper.m.order.lowercase.order_x_report.interaction_pp:+.2f` points, and the
# model abstains on {glue:text}`ml.m.paper.m.unc.P_unc.abstain_c:.1%` of report-present cases and
# never without the report (published values).
#
# **What the demo runs.** The 64-px NIH cohort with **template reports**, one-question design on
# {glue:text}`ml.m.order.lowercase.n_trials` cases, {glue:text}`ml.m.answer_tokens` generated tokens. The reference models ignore
# the order of the options, so every order effect of `ref-anchored@0.5` must be exactly 0. Under
# Yes/No/Uncertain they answer Uncertain exactly where {glue:text}`ml.m.abstain_band.lo:g` < p(yes) <
# {glue:text}`ml.m.abstain_band.hi:g` (the planted abstention,
# `shovir_core.models.reference`), which the page checks against the records' margins; the
# generated answers go through the same parser as a real model's (`models.readouts.parse_answer`,
# which accepts Uncertain only when the instruction offers it).

# %% tags=["parameters"]
profile = "demo"
run_ids = None
n_draws = None
bootstrap_seed = None
reproduces_paper = None
reference_validation = None  # the primary model is a reference model and its planted checks apply (demo)

# %%
import numpy as np

from shovir_core import book
from shovir_core.book.paper_section import paper_section
from shovir_core.book.variant_chapter import variant_chapter
from shovir_core.metrics.prompt_variants import variant_changes_by_arm
from shovir_core.models.prompts import INSTRUCTIONS
from shovir_core.models.reference import PRIOR_CALL
from shovir_core.tables import modalens_appm as appm

chapter = variant_chapter("modalens_appm", namespace="ml.m", profile=profile, run_ids=run_ids, n_draws=n_draws,
                          reference_validation=reference_validation)
runs, trials = chapter.runs, chapter.trials
order_arms, unc_arms = chapter.arms(appm.ORDER_ARMS), chapter.arms(appm.UNCERTAIN_ARMS)
for name in ("yes_no", "no_yes", "yes_no_uncertain"):
    book.glue(f"ml.m.instruction.{name}", INSTRUCTIONS[name], runs=runs)
book.glue("ml.m.answer_tokens", runs["P_unc"].manifest["spec"]["answer_tokens"], runs=runs["P_unc"])
book.glue_values("ml", {"m.abstain_band.lo": appm.ABSTAIN_BAND[0], "m.abstain_band.hi": appm.ABSTAIN_BAND[1],
                        "m.blind.prior_call": PRIOR_CALL}, runs=[],  # the reference models' planted settings
                 source="shovir_core/tables/modalens_appm.py (ABSTAIN_BAND), shovir_core/models/reference.py (PRIOR_CALL)")

# %% [markdown]
# Instructions: default "{glue:text}`ml.m.instruction.yes_no`", reversed
# "{glue:text}`ml.m.instruction.no_yes`", abstention "{glue:text}`ml.m.instruction.yes_no_uncertain`".
#
# ## Option order: flip rates per arm and readout
#
# Each arm paired case by case with the default order; {glue:text}`ml.m.n_draws` patient-clustered
# draws, all arms of a readout on the same draws.

# %% tags=["nbval-check-output"]
to = appm.option_order_table(order_arms, n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(to, runs=runs)

# %%
v = to.values
for readout in ("lowercase", "family", "generated"):
    k = f"m.order.{readout}"
    assert np.isclose(v[f"{k}.order_x_report.interaction_pp"],
                      v[f"{k}.rev.P_minus_A.diff_pp"] - v[f"{k}.default.P_minus_A.diff_pp"])
    assert np.isclose(v[f"{k}.P.rev_minus_default.diff_pp"], 100 * (v[f"{k}.P_rev.flip_rate"] - v[f"{k}.P.flip_rate"]))
book.glue_values("ml", v, runs=runs)

# %% tags=["nbval-check-output"]
tsh = appm.option_order_shifts(order_arms).with_runs(runs)
book.show(tsh, runs=runs)

# %%
vsh = tsh.values
assert 0.0 <= vsh["m.shift.changed_min"] <= vsh["m.shift.changed_max"] <= 1.0
book.glue_values("ml", vsh, runs=runs)

# %% [markdown]
# For the demo model the reversal changes {glue:text}`ml.m.shift.changed_min:.2%` to
# {glue:text}`ml.m.shift.changed_max:.2%` of answers and the order × report interaction is
# {glue:text}`ml.m.order.lowercase.order_x_report.interaction_pp:+.2f` points
# [{glue:text}`ml.m.order.lowercase.order_x_report.interaction_pp_lo:+.2f`,
# {glue:text}`ml.m.order.lowercase.order_x_report.interaction_pp_hi:+.2f`].
#
# ## The Uncertain option: abstention and flips counting Uncertain
#
# Abstention per image side with the substitution effect (substitute − original); flip rates that
# count a change to or from Uncertain as a change, beside the forced-choice generated answers of
# the default instruction, on the same draws.

# %% tags=["nbval-check-output"]
tu = appm.abstention_table(unc_arms, n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(tu, runs=runs)

# %%
vu = tu.values
for arm in ("P_unc", "A_unc"):
    t = trials[arm]
    assert vu[f"m.unc.{arm}.n_abstain_c"] == int((t["answer_c"] == "Uncertain").sum())
    if reference_validation:  # the reference models' planted abstention rule
        planted = appm.planted_abstention(t)
        assert planted["holds"], f"{arm}: abstentions must be exactly the sides with 0.4 < p(yes) < 0.6 (planted)"
        assert vu[f"m.unc.{arm}.n_abstain_c"] == planted["n_planted_c"]
        assert set(t["answer_c"]) | set(t["answer_d"]) <= {"Yes", "No", "Uncertain"}
    assert np.isclose(vu[f"m.unc.{arm}.substitution_effect_pp"],
                      100 * (vu[f"m.unc.{arm}.abstain_d"] - vu[f"m.unc.{arm}.abstain_c"]))
assert vu["m.unc.flip.A_minus_P_pp_lo"] <= vu["m.unc.flip.A_minus_P_pp"] <= vu["m.unc.flip.A_minus_P_pp_hi"]
book.glue_values("ml", vu, runs=runs)

# %% [markdown]
# The demo model abstains on {glue:text}`ml.m.unc.P_unc.abstain_c:.2%` of report-present and
# {glue:text}`ml.m.unc.A_unc.abstain_c:.2%` of report-absent original images (substitution effect with
# the report {glue:text}`ml.m.unc.P_unc.substitution_effect_pp:+.2f` points
# [{glue:text}`ml.m.unc.P_unc.substitution_effect_pp_lo:+.2f`,
# {glue:text}`ml.m.unc.P_unc.substitution_effect_pp_hi:+.2f`]). Counting Uncertain as an answer, the
# report effect A − P is {glue:text}`ml.m.unc.flip.A_minus_P_pp:+.2f` points against
# {glue:text}`ml.m.unc.forced.A_minus_P_pp:+.2f` under the forced choice.
#
# ## Validation: the reference models ignore the option order
#
# (This section checks behaviour planted in the reference models, so it runs only where the
# primary model is a reference model, as in the demo profile; in a profile with a real model, such as `mimic`,
# it is skipped and the numbers in its sentences are not computed (they print as nan).)

# %%
if reference_validation:
    blind_order, blind_unc = chapter.blind(appm.ORDER_ARMS), chapter.blind(appm.UNCERTAIN_ARMS)
    moved = variant_changes_by_arm({"ref-anchored@0.5": order_arms, "ref-blind-prior": blind_order}, variant="rev",
                                   margins=(), columns=("readout_c", "readout_d", "answer_c", "answer_d"))
    assert not moved, f"the reversed order moves {moved}"
    assert v["m.order.lowercase.order_x_report.interaction_pp"] == 0.0
    assert vsh["m.shift.changed_max"] == 0.0, "the reversal changes no reference-model answer"
    tb = appm.option_order_table(blind_order, n_draws=200, seed=bootstrap_seed)
    tbu = appm.abstention_table(blind_unc, n_draws=200, seed=bootstrap_seed)
    assert all(val == 0.0 for key, val in tb.values.items() if key.endswith(".flip_rate")), "ref-blind-prior flips"
    assert tbu.values["m.unc.flip.P"] == tbu.values["m.unc.flip.A"] == 0.0
    book.glue("ml.m.blind.max_flip_rate", max(val for key, val in tb.values.items() if key.endswith(".flip_rate")),
              runs=runs)
    blind_planted = appm.planted_abstention(blind_unc["P_unc"])
    assert blind_planted["holds"], "ref-blind-prior abstains exactly where 0.4 < p(yes) < 0.6"
    assert np.isclose(blind_planted["abstain_rate_c"], tbu.values["m.unc.P_unc.abstain_c"])
    book.glue("ml.m.blind.abstain", tbu.values["m.unc.P_unc.abstain_c"], runs=runs)
    book.glue("ml.m.blind.in_band_findings", blind_planted["in_band_findings"], runs=runs)
    book.glue("ml.m.blind.n_in_band_findings", blind_planted["n_in_band_findings"], runs=runs)
else:  # the primary model is not a reference model: its planted checks do not apply
    book.glue_values("ml", dict.fromkeys(["m.blind.max_flip_rate", "m.blind.abstain"], float("nan")), runs=runs)
    book.glue_values("ml", {"m.blind.in_band_findings": "not checked", "m.blind.n_in_band_findings": 0}, runs=runs)

# %% [markdown]
# Under both orders the reference models give identical answers (changed answers
# {glue:text}`ml.m.shift.changed_max:.2%`); `ref-blind-prior` flips on
# {glue:text}`ml.m.blind.max_flip_rate:.2%` of trials and, with Uncertain offered, abstains on
# {glue:text}`ml.m.blind.abstain:.2%` of report-present original images: exactly the trials whose
# p(yes) = sigmoid(margin) lies between {glue:text}`ml.m.abstain_band.lo:g` and
# {glue:text}`ml.m.abstain_band.hi:g` (checked trial by trial). Its margin is logit(prevalence) −
# logit({glue:text}`ml.m.blind.prior_call:g`), so it is not the prevalence that falls in that band but the odds
# relative to the {glue:text}`ml.m.blind.prior_call:g` calling threshold; the band holds the
# {glue:text}`ml.m.blind.n_in_band_findings` question(s) {glue:text}`ml.m.blind.in_band_findings`.
#
# ## Paper vs this run, and the audit's checks

# %% tags=["nbval-check-output"]
vs_paper, audit_table = paper_section("ml.m", {**v, **vsh, **vu}, appm.PAPER_KEYS, reproduces_paper=reproduces_paper,
                                      runs=runs, name="ml-m-paper-vs-run", audit_prefixes=appm.AUDIT_PREFIXES,
                                      must_hold=("m.order.lowercase.order_x_report.interaction_pp",
                                                 "m.unc.flip.A_minus_P_pp",
                                                 "m.unc.P_unc.substitution_effect_pp"))

# %%
audit = audit_table.frame
assert audit.loc["m.order_gap", "status"] == "passed", "Part E item 22"

# %% [markdown]
# {glue:text}`ml.m.audit.n_checks` audit checks concern Appendix M; {glue:text}`ml.m.audit.n_flagged`
# are flagged.
#
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

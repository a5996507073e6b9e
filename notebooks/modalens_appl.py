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
# # ModaLens Appendix L: a second question template
#
# Is the report effect a property of a single wording? Appendix L reruns the one-question design with
# `Is {finding} present on this chest X-ray?` (`Is any acute cardiopulmonary finding present on
# this chest X-ray?` for the composite) in place of `Does this chest X-ray show {finding}?`, report
# present and absent, no answer instruction. For MedGemma-27B the report-presence difference
# P − A is {glue:text}`ml.l.paper.l.alt.P_minus_A.diff_pp:+.1f` points under the second template against
# {glue:text}`ml.l.paper.l.default.P_minus_A.diff_pp:+.1f` under the default, an interaction of
# {glue:text}`ml.l.paper.l.template_x_report.interaction_pp:+.1f` points (published values): the
# wording moves the rates, not the effect's direction.
#
# **What the demo runs.** The 64-px NIH cohort with **template reports** (no radiologist prose),
# one-question design on {glue:text}`ml.l.n_trials` cases. The reference models read the asked
# finding, never the question's wording, so for `ref-anchored@0.5` and `ref-blind-prior` the
# second template must change nothing: identical answers, a template × report interaction of 0
# inside its interval. That is the check this page can fail; the numbers themselves are the demo
# model's, not MedGemma's.

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
from shovir_core.protocols import modalens as ml
from shovir_core.tables import modalens_appl as appl

chapter = variant_chapter("modalens_appl", namespace="ml.l", profile=profile, run_ids=run_ids, n_draws=n_draws,
                          reference_validation=reference_validation)
runs, trials = chapter.runs, chapter.trials
arms, blind = chapter.arms(appl.ARMS), chapter.blind(appl.ARMS)
book.glue("ml.l.template.default", ml.TEMPLATES["default"]["finding"], runs=runs)
book.glue("ml.l.template.alt", ml.TEMPLATES["alt"]["finding"], runs=runs)

# %% [markdown]
# ## Flip rates per template and report arm
#
# Lowercase first-token readout, both images, {glue:text}`ml.l.n_draws` patient-clustered draws with
# all arms on the same draws.

# %% tags=["nbval-check-output"]
tl = appl.template_table(arms, n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(tl, runs=runs)

# %%
v = tl.values
assert (trials["P_alt"]["question"].str.startswith("Is ")).all() and (trials["P"]["question"].str.startswith("Does ")).all()
assert np.isclose(v["l.template_x_report.interaction_pp"],
                  v["l.alt.P_minus_A.diff_pp"] - v["l.default.P_minus_A.diff_pp"])
assert np.isclose(v["l.default.P_minus_A.diff_pp"], 100 * (v["l.P.flip_rate"] - v["l.A.flip_rate"]))
assert v["l.template_x_report.interaction_pp_lo"] <= v["l.template_x_report.interaction_pp"] \
    <= v["l.template_x_report.interaction_pp_hi"]
book.glue_values("ml", v, runs=runs)

# %% [markdown]
# The demo model's report difference P − A is {glue:text}`ml.l.default.P_minus_A.diff_pp:+.2f` points
# under the default template and {glue:text}`ml.l.alt.P_minus_A.diff_pp:+.2f` under the second; the
# interaction is {glue:text}`ml.l.template_x_report.interaction_pp:+.2f` points
# [{glue:text}`ml.l.template_x_report.interaction_pp_lo:+.2f`,
# {glue:text}`ml.l.template_x_report.interaction_pp_hi:+.2f`].
#
# ## Balanced accuracy on the original image, per template
#
# The answer on the original image against that image's own label. The paper: without the report
# the second template raises MedGemma-27B's balanced accuracy from
# {glue:text}`ml.l.paper.l.A.balanced_accuracy:.3f` (specificity {glue:text}`ml.l.paper.l.A.specificity:.2f`)
# and leaves the report-present value unchanged.

# %% tags=["nbval-check-output"]
ta = appl.template_accuracy(arms, n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(ta, runs=runs)

# %%
va = ta.values
for arm in appl.ARMS:
    assert va[f"l.{arm}.balanced_accuracy_lo"] <= va[f"l.{arm}.balanced_accuracy"] <= va[f"l.{arm}.balanced_accuracy_hi"]
    assert np.isclose(va[f"l.{arm}.balanced_accuracy"], (va[f"l.{arm}.sensitivity"] + va[f"l.{arm}.specificity"]) / 2)
book.glue_values("ml", va, runs=runs)

# %% [markdown]
# ## Validation: the reference models ignore the wording
#
# (This section checks behaviour planted in the reference models, so it runs only where the
# primary model is a reference model, as in the demo profile; in a profile with a real model, such as `mimic`,
# it is skipped and the numbers in its sentences are not computed (they print as nan).)
#
# `ref-anchored@0.5` and `ref-blind-prior` must give identical answers and margins under both
# templates, so the interaction is exactly 0 and lies inside its interval; the blind prior never
# flips.

# %%
if reference_validation:
    moved = variant_changes_by_arm({"ref-anchored@0.5": arms, "ref-blind-prior": blind}, variant="alt", same_trials=True)
    assert not moved, f"the second template moves {moved}"
    assert v["l.template_x_report.interaction_pp"] == 0.0
    assert v["l.template_x_report.interaction_pp_lo"] <= 0.0 <= v["l.template_x_report.interaction_pp_hi"]
    tb = appl.template_table(blind, n_draws=200, seed=bootstrap_seed)
    assert all(tb.values[f"l.{arm}.flip_rate"] == 0.0 for arm in appl.ARMS), "ref-blind-prior flips"
    book.glue("ml.l.blind.max_flip_rate", max(tb.values[f"l.{arm}.flip_rate"] for arm in appl.ARMS), runs=runs)
else:  # the primary model is not a reference model: its planted checks do not apply
    book.glue_values("ml", dict.fromkeys(["l.blind.max_flip_rate"], float("nan")), runs=runs)

# %% [markdown]
# Both reference models answer identically under both templates (interaction
# {glue:text}`ml.l.template_x_report.interaction_pp:+.2f` points); `ref-blind-prior` flips on
# {glue:text}`ml.l.blind.max_flip_rate:.2%` of trials.
#
# ## Paper vs this run, and the audit's checks

# %% tags=["nbval-check-output"]
vs_paper, audit_table = paper_section("ml.l", {**v, **va}, appl.PAPER_KEYS, reproduces_paper=reproduces_paper,
                                      runs=runs, name="ml-l-paper-vs-run", audit_prefixes=appl.AUDIT_PREFIXES,
                                      must_hold=("l.alt.P_minus_A.diff_pp",
                                                 "l.default.P_minus_A.diff_pp",
                                                 "l.template_x_report.interaction_pp"))

# %%
audit = audit_table.frame
assert audit.loc["l.interaction", "status"] == "passed", "Part E item 23"

# %% [markdown]
# {glue:text}`ml.l.audit.n_checks` audit checks concern Appendix L; {glue:text}`ml.l.audit.n_flagged`
# are flagged.
#
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

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
# # ModaLens Appendix H: text-block order
#
# The headline prompt puts the image block before the text block. With the text first,
# MedGemma-27B's one-question report-present flip rate goes from
# {glue:text}`ml.h.paper.h.oneq.P.flip_rate:.2%` to {glue:text}`ml.h.paper.h.oneq.P_tf.flip_rate:.2%`,
# and on all-14 the report effect shrinks from the image-first value to
# {glue:text}`ml.h.paper.h.all14.tf.A_minus_P.diff_pp:+.1f` points while keeping its direction; per
# finding the report-absent rate moves by {glue:text}`ml.h.paper.h.pf.min_pp:+.1f` to
# {glue:text}`ml.h.paper.h.pf.max_pp:+.1f` points ({glue:text}`ml.h.paper.h.pf.n_down` findings down,
# {glue:text}`ml.h.paper.h.pf.n_up` up; published values). Table 27 counts, per arm, the flips and the
# pairs "still apart": the two images' yes/no distributions at the answer position differ by more
# than {glue:text}`ml.h.oneq.tv_threshold` in total variation, whichever answer wins.
#
# **What the demo runs.** The 64-px NIH cohort with **template reports**: the one-question design
# on {glue:text}`ml.h.oneq.n_trials` cases and the all-14 records of the Tables chapter, with
# `ref-anchored@0.5`; and the tiny random-weight Gemma-3 model on a few patients. The reference
# models never see the block order, so all their order effects are 0 by construction (the
# validation below); the tiny transformer reads its own chat template, where the order changes the
# input, and shows that the counts register real order effects (its answers are noise).

# %% tags=["parameters"]
profile = "demo"
run_ids = None
n_draws = None
n_draws_primary = None
bootstrap_seed = None
reproduces_paper = None
reference_validation = None  # the primary model is a reference model and its planted checks apply (demo)

# %%
import numpy as np

from shovir_core import book
from shovir_core.book.paper_section import paper_section
from shovir_core.book.variant_chapter import variant_chapter
from shovir_core.metrics.prompt_variants import variant_changes_by_arm
from shovir_core.tables import modalens_apph as apph

chapter = variant_chapter("modalens_apph", namespace="ml.h", profile=profile, run_ids=run_ids, n_draws=n_draws,
                          reference_validation=reference_validation)
runs, trials = chapter.runs, chapter.trials
oneq, all14, blind = chapter.arms(apph.ARMS), chapter.arms(apph.ARMS, prefix="all14_"), chapter.blind(apph.ARMS)
tiny = chapter.arms(apph.ARMS, prefix="tiny_", optional=True)
book.glue("ml.h.n_draws_primary", n_draws_primary, runs=runs)
for k, i in (("still_apart_if", "n1.still_apart_if"), ("flips_if", "n1.still_apart_flips_if"),
             ("still_apart_tf", "n1.still_apart_tf"), ("flips_tf", "n1.still_apart_flips_tf"),
             ("knockout_cases", "n2.cases")):
    book.glue_paper(f"ml.h.paper.{k}", i)

# %% [markdown]
# ## Table 27 counts and the order effects, one-question design
#
# Lowercase readout; {glue:text}`ml.h.n_draws` patient-clustered draws with every arm on the same
# draws.

# %% tags=["nbval-check-output"]
h1 = apph.order_counts(oneq, n_draws=n_draws, seed=bootstrap_seed, key="h.oneq").with_runs(runs)
book.show(h1, runs=runs)

# %%
v1 = h1.values
for arm in apph.ARMS:
    assert v1[f"h.oneq.{arm}.flips"] + v1[f"h.oneq.{arm}.still_apart_not_flipped"] \
        == v1[f"h.oneq.{arm}.still_apart"] + v1[f"h.oneq.{arm}.flipped_not_apart"]
assert np.isclose(v1["h.oneq.P.tf_minus_if.diff_pp"], 100 * (v1["h.oneq.P_tf.flip_rate"] - v1["h.oneq.P.flip_rate"]))
book.glue_values("ml", v1, runs=runs)

# %% [markdown]
# ## All-14 design
#
# {glue:text}`ml.h.n_draws_primary` draws, as every all-14 estimate of the book, so an estimate shown on
# several pages has a single interval; per finding {glue:text}`ml.h.n_draws`.

# %% tags=["nbval-check-output"]
h14 = apph.order_counts(all14, n_draws=n_draws_primary, seed=bootstrap_seed, key="h.all14").with_runs(runs)
book.show(h14, runs=runs)
pf = apph.per_finding_order_effects(all14["A"], all14["A_tf"], n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(pf, runs=runs)

# %%
v14, vpf = h14.values, pf.values
assert v14["h.all14.n_trials"] == 14 * all14["P"]["case_id"].nunique()
assert vpf["h.pf.n_down"] + vpf["h.pf.n_up"] + vpf["h.pf.n_zero"] == vpf["h.pf.n_findings"] == 14
book.glue_values("ml", {**v14, **vpf}, runs=runs)

# %% [markdown]
# For the demo model the text-first order moves the report-present one-question flip rate by
# {glue:text}`ml.h.oneq.P.tf_minus_if.diff_pp:+.2f` points and the all-14 report effect is
# {glue:text}`ml.h.all14.if.A_minus_P.diff_pp:+.2f` points image first and
# {glue:text}`ml.h.all14.tf.A_minus_P.diff_pp:+.2f` text first; per finding the report-absent rate
# moves by {glue:text}`ml.h.pf.min_pp:+.2f` to {glue:text}`ml.h.pf.max_pp:+.2f` points.
#
# ## Validation: the reference models never see the order
#
# (This section checks behaviour planted in the reference models, so it runs only where the
# primary model is a reference model, as in the demo profile; in a profile with a real model, such as `mimic`,
# it is skipped and the numbers in its sentences are not computed (they print as nan).)

# %%
if reference_validation:
    moved = variant_changes_by_arm({"ref-anchored@0.5 one-question": oneq, "ref-anchored@0.5 all-14": all14,
                                    "ref-blind-prior": blind}, variant="tf")
    assert not moved, f"text first moves {moved}"
    for v, key in ((v1, "h.oneq"), (v14, "h.all14")):
        assert v[f"{key}.P.tf_minus_if.diff_pp"] == v[f"{key}.A.tf_minus_if.diff_pp"] == 0.0
        assert v[f"{key}.order_x_report.interaction_pp"] == 0.0
    hb = apph.order_counts(blind, n_draws=200, seed=bootstrap_seed, key="h.blind")
    assert all(hb.values[f"h.blind.{arm}.flips"] == 0 and hb.values[f"h.blind.{arm}.still_apart"] == 0 for arm in apph.ARMS)
    book.glue("ml.h.blind.flips", int(sum(hb.values[f"h.blind.{arm}.flips"] for arm in apph.ARMS)), runs=runs)
else:  # the primary model is not a reference model: its planted checks do not apply
    book.glue_values("ml", dict.fromkeys(["h.blind.flips"], float("nan")), runs=runs)

# %% [markdown]
# The reference models give identical answers and margins under both orders; `ref-blind-prior`
# has {glue:text}`ml.h.blind.flips` flips and no pair still apart.
#
# ## The tiny transformer: order changes the input

# %% tags=["nbval-check-output"]
if len(tiny) == 4:
    ht = apph.order_counts(tiny, n_draws=200, seed=bootstrap_seed, key="h.tiny").with_runs(runs)
    book.show(ht, runs=runs)
    changed = (tiny["P"].set_index("trial_id")["input_hash_c"]
               != tiny["P_tf"].set_index("trial_id").loc[tiny["P"]["trial_id"], "input_hash_c"]).mean()
    assert changed == 1.0, "text first is a different model input for every trial"
    book.glue_values("ml", ht.values, runs=runs)
    book.glue("ml.h.tiny.changed_inputs", float(changed), runs=runs)

# %% [markdown]
# ## Paper vs this run, and the audit's checks
#
# Table 27's still-apart counts in the paper ({glue:text}`ml.h.paper.still_apart_if` against
# {glue:text}`ml.h.paper.flips_if` flips image first, {glue:text}`ml.h.paper.still_apart_tf` against
# {glue:text}`ml.h.paper.flips_tf` text first) are on the {glue:text}`ml.h.paper.knockout_cases`-case
# knockout set of Appendix N.2, not the full cohort; they appear in the
# audit rows without a run counterpart.

# %% tags=["nbval-check-output"]
vs_paper, audit_table = paper_section("ml.h", {**v1, **v14, **vpf}, apph.PAPER_KEYS, reproduces_paper=reproduces_paper,
                                      runs=runs, name="ml-h-paper-vs-run", audit_prefixes=apph.AUDIT_PREFIXES,
                                      must_hold=("h.oneq.P.tf_minus_if.diff_pp",
                                                 "h.all14.P.tf_minus_if.diff_pp",
                                                 "h.all14.tf.A_minus_P.diff_pp"))

# %%
audit = audit_table.frame
assert audit.loc["t2.oneq.tf_P_count", "status"] == "passed", "Part E item 17"

# %% [markdown]
# {glue:text}`ml.h.audit.n_checks` audit checks concern the order analysis;
# {glue:text}`ml.h.audit.n_flagged` are flagged.
#
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

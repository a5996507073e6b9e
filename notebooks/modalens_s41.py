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
# # ModaLens §4.1 companions: the design without the composite question and the substitute redraws
#
# Robustness checks of the headline that §4.1 reports in a sentence each. The composite
# "any acute cardiopulmonary finding" question is derived from the {glue:text}`ml.s41.f13.n_questions` others, so the paper's
# analysis of record drops it: on the design without it MedGemma-27B flips on
# {glue:text}`ml.s41.paper.s41.f13.lowercase.P.flip_rate:.2%` of trials with the report and
# {glue:text}`ml.s41.paper.s41.f13.lowercase.A.flip_rate:.2%` without. And each case's substitute is
# a single random draw: redrawing it under further seeds changes the one-question report effect by
# at most {glue:text}`ml.s41.paper.s41.seed.max_change_pp:.2f` points, inside an interval that
# resamples patients and the draw jointly (published values).
#
# **What the demo runs.** The 64-px NIH cohort with **template reports** and `ref-anchored@0.5`:
# the all-14 records of the Tables chapter (the design without the composite is their subset) and
# the one-question design on {glue:text}`ml.s41.seed.n_cases` cases under substitute
# seeds {glue:text}`ml.s41.seed.seeds`. `ref-blind-prior` must flip under no seed.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
n_draws = None
n_draws_primary = None
bootstrap_seed = None
reproduces_paper = None
reference_validation = None  # the records include the reference models' arms (demo profile)

# %%
import numpy as np

from shovir_core import book
from shovir_core.book.paper_section import paper_section
from shovir_core.tables import modalens_s41 as s41

runs = book.load_runs("modalens_s41", profile=profile, run_ids=run_ids)
trials = {key: run.trials for key, run in runs.items()}
book.glue("ml.s41.n_draws", n_draws, runs=runs)
book.glue("ml.s41.n_draws_primary", n_draws_primary, runs=runs)
seed_runs = [runs[f"P_seed{s}"] for s in (0, 1, 2)]
book.glue("ml.s41.seed.seeds", ", ".join(str(r.manifest["spec"]["substitute_seed"]) for r in seed_runs), runs=seed_runs)

# %% [markdown]
# ## All-14 beside the design without the composite
#
# Lowercase readout on the plain prompt; the generated answer under "Answer with exactly Yes or
# No."; A − P on identical trials, patient-clustered draws: {glue:text}`ml.s41.n_draws_primary` for the
# all-14 rows (as in the Tables chapter, so each estimate has a single interval) and
# {glue:text}`ml.s41.n_draws` for the rows without the composite.

# %% tags=["nbval-check-output"]
td = s41.design_comparison({k: trials[k] for k in ("P", "A", "P_instr", "A_instr")}, n_draws=n_draws,
                           n_draws_primary=n_draws_primary, seed=bootstrap_seed).with_runs(runs)
book.show(td, runs=runs)

# %%
vd = td.values
assert vd["s41.f13.n_trials"] == 13 * vd["s41.all14.n_trials"] // 14, "Part E item 1: 13 of 14 questions per case"
for design in ("all14", "f13"):
    k = f"s41.{design}.lowercase"
    assert np.isclose(vd[f"{k}.A_minus_P.diff_pp"], 100 * (vd[f"{k}.A.flip_rate"] - vd[f"{k}.P.flip_rate"]))
book.glue_values("ml", vd, runs=runs)

# %% [markdown]
# Without the composite the demo model's report effect is
# {glue:text}`ml.s41.f13.lowercase.A_minus_P.diff_pp:+.2f` points
# [{glue:text}`ml.s41.f13.lowercase.A_minus_P.diff_pp_lo:+.2f`,
# {glue:text}`ml.s41.f13.lowercase.A_minus_P.diff_pp_hi:+.2f`] against
# {glue:text}`ml.s41.all14.lowercase.A_minus_P.diff_pp:+.2f` on all {glue:text}`ml.s41.all14.n_questions` questions.
#
# ## Substitute redraws
#
# Same cases, reports, questions and source images; only the substitute is redrawn. The joint
# interval resamples patients and, for every sampled patient copy, one of the draws.

# %% tags=["nbval-check-output"]
seeds = {s: (trials[f"P_seed{s}"], trials[f"A_seed{s}"]) for s in (0, 1, 2)}
tsd = s41.seed_table(seeds, n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(tsd, runs=runs)

# %%
vs = tsd.values
assert vs["s41.seed.n_changed_substitutes"] > 0, "the redraws change some substitutes"
for s in (0, 1, 2):
    assert np.isclose(vs[f"s41.seed.{s}.effect_pp"], 100 * (vs[f"s41.seed.{s}.A"] - vs[f"s41.seed.{s}.P"]))
    assert vs[f"s41.seed.{s}.P_flips"] <= vs["s41.seed.any_P"] and vs["s41.seed.all_P"] <= vs[f"s41.seed.{s}.P_flips"]
    assert vs[f"s41.seed.{s}.A_flips"] <= vs["s41.seed.any_A"] and vs["s41.seed.all_A"] <= vs[f"s41.seed.{s}.A_flips"]
effects = [vs[f"s41.seed.{s}.effect_pp"] for s in (0, 1, 2)]
assert vs["s41.seed.joint.effect_pp_lo"] <= min(effects) and max(effects) <= vs["s41.seed.joint.effect_pp_hi"], \
    "the joint patient x seed interval contains every seed's effect (the paper's check g.seed.ci_lo/hi)"
assert np.isclose(vs["s41.seed.effect_spread_pp"], max(effects) - min(effects))
book.glue_values("ml", vs, runs=runs)
if reference_validation:
    blind = {s: (trials[f"blind_P_seed{s}"], trials[f"blind_A_seed{s}"]) for s in (0, 1, 2)}
    tb = s41.seed_table(blind, n_draws=200, seed=bootstrap_seed)
    assert tb.values["s41.seed.any_P"] == tb.values["s41.seed.any_A"] == 0, "ref-blind-prior flips under some seed"
    book.glue("ml.s41.blind.any_flips", int(tb.values["s41.seed.any_P"] + tb.values["s41.seed.any_A"]), runs=runs)
else:  # the primary model is not a reference model: its planted checks do not apply
    book.glue_values("ml", dict.fromkeys(["s41.blind.any_flips"], float("nan")), runs=runs)

# %% [markdown]
# Over the draws the demo model's report effect ranges over
# {glue:text}`ml.s41.seed.effect_spread_pp:.2f` points; the joint interval is
# [{glue:text}`ml.s41.seed.joint.effect_pp_lo:+.2f`, {glue:text}`ml.s41.seed.joint.effect_pp_hi:+.2f`].
# With the report {glue:text}`ml.s41.seed.any_P` cases flip under at least one seed and
# {glue:text}`ml.s41.seed.all_P` under every seed; without it {glue:text}`ml.s41.seed.any_A` and
# {glue:text}`ml.s41.seed.all_A`. `ref-blind-prior` flips on {glue:text}`ml.s41.blind.any_flips`
# cases under any seed.
#
# ## Paper vs this run, and the audit's checks

# %% tags=["nbval-check-output"]
vs_paper, audit_table = paper_section("ml.s41", {**vd, **vs}, s41.PAPER_KEYS, reproduces_paper=reproduces_paper,
                                      runs=runs, name="ml-s41-paper-vs-run", audit_prefixes=s41.AUDIT_PREFIXES,
                                      must_hold=("s41.f13.lowercase.A_minus_P.diff_pp",
                                                 "s41.f13.generated.A_minus_P.diff_pp"))

# %%
audit = audit_table.frame
assert audit.loc["g.seed.max_change", "status"] == "passed" and audit.loc["t15.diff", "status"] == "passed", \
    "Part E items 16 and 19"

# %% [markdown]
# {glue:text}`ml.s41.audit.n_checks` audit checks concern these companions;
# {glue:text}`ml.s41.audit.n_flagged` are flagged.
#
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

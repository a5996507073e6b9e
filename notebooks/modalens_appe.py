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
# # ModaLens Appendix E: manual report labels (Table 12)
#
# The ModaLens labels are extracted from the reports automatically. Appendix E repeats the analysis
# against the labels a radiologist gave to the test-set reports of MIMIC-CXR-JPG: a check of the
# label extraction, not of the images (the annotator read the report). The paper finds automated and
# manual labels agreeing on {glue:text}`mle.paper.t12.agreement:.3f` of trials (κ
# {glue:text}`mle.paper.t12.kappa:.3f`), and the report effect keeping its direction on the trials
# whose manual label changes.
#
# **What the demo profile runs.** The demo cohort has no radiologist labels. It uses a **simulated
# second reader**: a seeded {glue:text}`mle.reader_coverage:.0%` of the cohort's studies are
# "annotated", and each of their finding labels is flipped with the planted probability
# {glue:text}`mle.reader_error_rate:.0%` (seed {glue:text}`mle.reader_seed`). The chapter then runs
# the same code as on the real file and checks that it recovers the planted agreement and κ inside
# the bootstrap interval. The `mimic` profile reads `mimic-cxr-2.1.0-test-set-labeled.csv`.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
manual_labels = None
reader_error_rate = None
reader_seed = None
reader_coverage = None
n_draws = None
bootstrap_seed = None
reproduces_paper = None
reference_validation = None  # the model is a reference model and its planted behaviour is checked (demo)

# %%
import numpy as np

from shovir_core import book
from shovir_core.book.paper_section import paper_section
from shovir_core.data.mimic_manual import load_manual_labels
from shovir_core.labeling.second_reader import simulate_second_reader, study_codes
from shovir_core.tables import modalens_appe as te
from shovir_core.tables.appendix_checks import appendix_checks

runs = book.load_runs("modalens_appe", profile=profile, run_ids=run_ids)
present, absent = runs["P"].trials, runs["A"].trials
policy = runs["P"].manifest["spec"]["primary_policy"]
simulated = manual_labels is None
if simulated:
    manual = simulate_second_reader(study_codes(present), error_rate=reader_error_rate, seed=reader_seed,
                                    coverage=reader_coverage, policy=policy)
else:
    manual = load_manual_labels(manual_labels)
book.glue_values("mle", {"reader_error_rate": reader_error_rate if simulated else float("nan"),
                         "reader_seed": reader_seed, "reader_coverage": reader_coverage,
                         "n_draws": n_draws, "manual_source": manual.attrs["source"]}, runs=runs)

# %% [markdown]
# ## Table 12: the readout against manual labels
#
# Manual labels apply at study level: a trial enters when both its studies (source and substitute)
# have them, {glue:text}`mle.t12.n_trials:,d` trials of {glue:text}`mle.t12.n_pairs:,d` pairs and
# {glue:text}`mle.t12.n_patients:,d` patients here. Agreement, κ, sensitivity and precision compare
# the automated with the manual label on both studies of each trial (manual = truth). Intervals are
# patient-clustered percentile bootstraps ({glue:text}`mle.n_draws:,d` draws).

# %% tags=["nbval-check-output"]
t12 = te.manual_label_table(present, absent, manual, policy=policy, n_draws=n_draws,
                            seed=bootstrap_seed).with_runs(runs)
book.show(t12, runs=runs)

# %%
v12 = t12.values
assert v12["t12.n_trials"] == 14 * v12["t12.n_pairs"], "all-14: every pair contributes 14 trials"
assert v12["t12.n_changed"] <= v12["t12.n_trials"]
for k in ("agreement", "kappa", "P.acc_manual", "A.acc_manual", "A.sub_agree_changed"):
    assert v12[f"t12.{k}_lo"] <= v12[f"t12.{k}"] <= v12[f"t12.{k}_hi"], k
if reference_validation:  # planted in the reference model; a real model's (or a stand-in's) answers are results
    assert v12["t12.P.flip_rate_changed"] < v12["t12.A.flip_rate_changed"], \
        "the report effect keeps its direction on manual-label-changed trials (planted by ref-anchored@0.5)"
book.glue_values("mle", v12, runs=runs)

# %% [markdown]
# With the report the answer flips on {glue:text}`mle.t12.P.flip_rate_changed:.2%` of the
# {glue:text}`mle.t12.n_changed:,d` manual-label-changed trials and matches the substitute's manual
# label on {glue:text}`mle.t12.P.sub_agree_changed:.3f`; without it the flip rate is
# {glue:text}`mle.t12.A.flip_rate_changed:.2%` and the agreement
# {glue:text}`mle.t12.A.sub_agree_changed:.3f`. Without the report the readout says yes on
# {glue:text}`mle.t12.A.yes_rate:.1%` of the concordant images, so balanced accuracy
# ({glue:text}`mle.t12.P.ba_manual:.3f` with, {glue:text}`mle.t12.A.ba_manual:.3f` without) is the
# fair comparison.
#
# ## Demo validation: the planted second reader is recovered
#
# The planted agreement and κ are the values the simulated reader is expected to show on these
# trials given its error rate (expected confusion counts, the composite question accounting for a
# flip of any of the findings it covers; `shovir_core.metrics.label_agreement.expected_reader_confusion`).

# %% tags=["nbval-check-output"]
if simulated:
    planted = te.planted_agreement(present, manual, policy=policy, error_rate=reader_error_rate)
    assert v12["t12.agreement_lo"] <= planted["agreement"] <= v12["t12.agreement_hi"]
    assert v12["t12.kappa_lo"] <= planted["kappa"] <= v12["t12.kappa_hi"]
else:
    planted = {"agreement": float("nan"), "kappa": float("nan")}
book.glue_values("mle.planted", {"agreement": planted["agreement"], "kappa": planted["kappa"]}, runs=runs)

# %% [markdown]
# On the demo the planted agreement {glue:text}`mle.planted.agreement:.3f` and κ
# {glue:text}`mle.planted.kappa:.3f` lie inside the recovered intervals
# [{glue:text}`mle.t12.agreement_lo:.3f`, {glue:text}`mle.t12.agreement_hi:.3f`] and
# [{glue:text}`mle.t12.kappa_lo:.3f`, {glue:text}`mle.t12.kappa_hi:.3f`].
#
# ## The paper's numbers and their checks
#
# The consistency checks of the appendix's published numbers (Part E of the audit): the trial count
# is the pair count times the questions asked, and κ follows from the agreement, sensitivity and precision
# (through the manual and automated prevalences they imply). Then the paper's values beside this run's.

# %% tags=["nbval-check-output"]
checks = appendix_checks("Appendix E")
book.show(checks, runs=runs)
vs_paper, _ = paper_section("mle", v12, te.PAPER_KEYS, reproduces_paper=reproduces_paper, runs=runs,
                            name="ml-e-paper-vs-run", must_hold=("t12.agreement",))

# %%
assert (checks["status"] == "passed").all()

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

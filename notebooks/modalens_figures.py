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
# # ModaLens: answer margins and the reference-model validation (Figure 2)
#
# A swap that leaves the yes/no answer unchanged can still move the model's confidence. The paper's
# Figure 2 shows the paired margin change |Δm| = |m_d − m_c| (margin m = logit(yes) − logit(no) of
# the lowercase tokens) with and without the report: MedGemma-27B's mean |Δm| is
# {glue:text}`ml.paper.fig2.present.mean_abs_dm:.3f` with the report against
# {glue:text}`ml.paper.fig2.absent.mean_abs_dm:.3f` without, and the swap moves the margin more without
# the report on {glue:text}`ml.paper.fig2.share_absent_larger:.1%` of trials (published values, from
# `shovir_core.papers`). This chapter draws the same figure from the demo records, then checks the benchmark
# itself: reference models whose anchoring on the report is known by construction must produce
# the flip rates that anchoring implies. As in the tables chapter, every report here is a
# **template report** written from the 64-px NIH study's labels.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
primary_model = None
primary_w = None
n_draws = None
bootstrap_seed = None
margin_threshold = None
reproduces_paper = None

# %%
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from shovir_core import book
from shovir_core.book import figures
from shovir_core.tables import modalens as mt
from shovir_core.tables import modalens_appg as appg
from shovir_core.tables import paper_vs_run as pvr

runs = book.load_runs("modalens_figures", profile=profile, run_ids=run_ids)
trials = {key: run.trials for key, run in runs.items()}

# %% [markdown]
# ## Figure 2: margin changes with and without the report
#
# All-14 design, report present vs absent, image first, no instruction; {glue:text}`ml.fig2.n_trials`
# trials of the primary demo model. Intervals: patient-clustered percentile bootstrap,
# {glue:text}`ml.fig2.n_draws` draws (the paper:
# {glue:text}`ml.fig2.paper_draws:,d`). {numref}`fig-ml-fig2` draws the paper's
# Figure 2 from these trials; {numref}`tbl-ml-fig2-paper-vs-run` sets the paper's Figure 2
# values beside this run's.

# %% tags=["nbval-check-output"]
fig2 = mt.margin_changes(trials["P"], trials["A"], n_draws=n_draws, seed=bootstrap_seed,
                         threshold=margin_threshold).with_runs(runs)
v = fig2.values
book.show(mt.margin_summary(fig2), runs=runs, name="ml-fig2-summary")

# %%
assert v["fig2.present.mean_abs_dm_lo"] <= v["fig2.present.mean_abs_dm"] <= v["fig2.present.mean_abs_dm_hi"]
assert v["fig2.present.share_above"] >= 0 and 0 <= v["fig2.share_absent_larger"] <= 1
assert np.isclose(v["fig2.share_absent_larger"] + v["fig2.share_present_larger"] + v["fig2.share_tied"], 1.0)
if primary_w is not None and 0 < primary_w < 1:
    assert v["fig2.present.mean_abs_dm"] < v["fig2.absent.mean_abs_dm"], \
        "report evidence weighted by w damps the image's effect on the margin"
book.glue("ml.fig2.n_draws", n_draws, runs=runs)
book.glue_paper("ml.fig2.paper_draws", "setup.draws_other")
book.glue_values("ml", v, runs=runs)
fig2_rows = tuple(r for r in pvr.MODALENS_ROWS if r.key.startswith("fig2."))
vs_paper = pvr.paper_vs_run(v, paper="modalens", rows=fig2_rows, same_setting=reproduces_paper,
                            setting="MedGemma-27B on MIMIC-CXR", runs=runs)
assert (vs_paper.frame["verdict"] != pvr.NOT_RUN).all(), "the four published Figure 2 values have run values"
book.glue_values("ml.paper", vs_paper.values, runs=runs)  # the paper's values are glued as the paper's

# %% tags=["nbval-check-output"]
book.show(vs_paper, runs=runs, name="ml-fig2-paper-vs-run",
          intervals={"paper": ("paper_lo", "paper_hi")}, missing={"run": "not run"})

# %%
fig, axes = plt.subplots(1, 2, figsize=figures.column_figsize(4.4))
sns.histplot(fig2.frame, x="abs_dm", hue="report", bins=40, element="step", stat="percent",
             common_norm=False, ax=axes[0])
axes[0].axvline(margin_threshold, color="grey", ls="--", lw=1)
axes[0].set_title("A/B: paired margin change per trial")
axes[0].set_xlabel("|Δm| = |m_d − m_c| (logit units)")
axes[0].set_ylabel("trials (%)")
by_finding_table = mt.margin_by_finding(trials["P"], trials["A"]).with_runs(runs)
by_finding = by_finding_table.frame
plot_df = by_finding.reset_index().melt(id_vars="finding", var_name="report", value_name="mean |Δm|")
sns.barplot(plot_df, y="finding", x="mean |Δm|", hue="report", ax=axes[1])
axes[1].set_title("C: mean |Δm| per question")
axes[1].set_xlabel("mean |Δm| (logit units)")
axes[1].set_ylabel("")
axes[1].legend(title="report", loc="lower center", bbox_to_anchor=(0.5, 1.08), ncols=2)
fig.tight_layout()
book.show(fig, runs=runs, name="ml-fig2",
          caption=f"ModaLens Figure 2 ({primary_model}" + (", template reports" if profile == "demo" else "") + "): A/B, the distribution of "
                  "the paired margin change |Δm| under image swap with and without the report (dashed: the "
                  "threshold); C, the mean |Δm| per question.",
          alt="Left: step histograms of the absolute margin change for report present and absent. Right: "
              "horizontal bars of the mean margin change per question for both arms.")

# %%
book.glue_values("ml", by_finding_table.values, runs=runs)

# %% [markdown]
# With the report the swap moves the margin by {glue:text}`ml.fig2.present.mean_abs_dm:.3f` on
# average [{glue:text}`ml.fig2.present.mean_abs_dm_lo:.3f`, {glue:text}`ml.fig2.present.mean_abs_dm_hi:.3f`],
# without it by {glue:text}`ml.fig2.absent.mean_abs_dm:.3f`. Trial by trial, the margin moves more
# without the report on {glue:text}`ml.fig2.share_absent_larger:.1%` of trials, more with it on
# {glue:text}`ml.fig2.share_present_larger:.1%`, and equally on {glue:text}`ml.fig2.share_tied:.1%`
# (ties: the same |Δm| with and without the report, within 10⁻⁹); per question it moves more
# without the report on {glue:text}`ml.fig2.n_findings_absent_larger` of
# {glue:text}`ml.fig2.n_questions` questions.
#
# ## Validation: the measured report effect follows the known anchoring
#
# `ref-anchored@w` answers, with the report present, from the report on a share w of the
# (report, question) pairs -- chosen by a hash of the report and the question, the same on both
# images -- and from its image CNN on the rest; without the report, from the image alone. Its
# behaviour is known by construction: with w = 1 no swap flips an answer; with w = 0 present and
# absent are identical; in between, a report-present trial flips exactly when it takes the image
# branch and the report-absent trial flips, so the report-present flip rate is (1 − w) times the
# report-absent rate in expectation and falls monotonically along the sweep (the gate is nested in
# w), while the report-absent rate does not depend on w. The page checks the branch identity trial
# by trial at every w, and the expectation with its sampling spread: the gate is one draw per
# distinct (report, question) pair, shared by all trials of that pair
# ({glue:text}`ml.validation.n_gate_units:,` distinct pairs), so the table gives, beside the expected
# (1 − w) × report-absent rate, the central {glue:text}`ml.validation.gate_level:.1%` range of the
# report-present rate over {glue:text}`ml.validation.gate_draws:,` redraws of the gate, and each
# realised rate must lie in it. The range is that wide because the rates with 0 < w < 1 are checked
# at once: at 95 % each, a model exactly as planted could fail one of them on up to
# {glue:text}`ml.validation.fail_bound_at_95:.0%` of cohorts (the union bound over those rates).
# `ref-blind-prior`
# ignores both image and report, so no swap flips it. The run must reproduce all of that; the sweep
# uses a smaller subset of the same cohort ({glue:text}`ml.validation.n_patients` patients,
# {glue:text}`ml.validation.n_trials:,` all-14 trials per arm); {numref}`fig-ml-validation` plots it.

# %% tags=["nbval-check-output"]
pairs = {float(k[1:-2]): (trials[k], trials[k[:-2] + "_A"]) for k in trials if k.startswith("w") and k.endswith("_P")}
sweep_table = mt.anchoring_sweep(pairs, gate_draws=10_000, gate_level=0.999, seed=bootstrap_seed).with_runs(runs)
blind_table = mt.anchoring_sweep({0.0: (trials["blind_P"], trials["blind_A"])}, names={0.0: "blind"}).with_runs(runs)
sweep, blind = sweep_table.frame, blind_table.frame.iloc[0]
book.show(sweep_table, runs=runs, name="ml-validation-sweep")

# %%
assert sweep.loc[1.0, "fr_present"] == 0.0, "w = 1: no report-present flips"
assert sweep.loc[0.0, "present_equals_absent"], "w = 0: report present == report absent"
assert sweep.loc[0.0, "fr_present"] == sweep.loc[0.0, "fr_absent"]
assert sweep["fr_present"].is_monotonic_decreasing, "report-present flip rate non-increasing in w"
assert sweep["fr_absent"].nunique() == 1, "report-absent flip rate does not depend on w"
assert np.allclose(sweep["fr_expected"], (1 - sweep.index.to_numpy()) * sweep["fr_absent"])
assert sweep["within_gate_range"].all(), \
    "each report-present flip rate lies in the 99.9 % range of its gate draws around (1 − w) × report absent"
for w, (present_w, absent_w) in pairs.items():  # the planted gate, trial by trial
    gate = appg.anchoring_gate_check(present_w, absent_w, w=w)
    assert gate["holds"], f"w = {w}: {gate}"
assert blind["fr_present"] == 0.0 and blind["fr_absent"] == 0.0, "blind prior: swap flip rate 0"
assert sweep["n_trials"].nunique() == 1 and blind["n_trials"] == sweep["n_trials"].iloc[0], "one sweep cohort"
book.glue("ml.validation.n_trials", int(sweep["n_trials"].iloc[0]), runs=runs)
book.glue("ml.validation.n_patients", int(trials["w0_P"]["patient_id"].nunique()), runs=runs)
book.glue("ml.validation.fail_bound_at_95", min(1.0, 0.05 * int(((sweep.index > 0) & (sweep.index < 1)).sum())),
          runs=runs)
book.glue_values("ml", sweep_table.values, runs=runs)
book.glue_values("ml", blind_table.values, runs=runs)

# %%
fig, ax = plt.subplots(figsize=figures.column_figsize(3.8, fraction=0.75))
ax.plot(sweep.index, 100 * sweep["fr_present"], marker="o", label="report present")  # % as in the table
ax.plot(sweep.index, 100 * sweep["fr_absent"], marker="s", ls="--", label="report absent")
ax.set_xlabel("anchoring weight w of ref-anchored@w")
ax.set_ylabel("swap flip rate (%, lowercase readout)")
ax.set_title("Flip rate against the known report weight")
ax.legend()
fig.tight_layout()
book.show(fig, runs=runs, name="ml-validation",
          caption="Reference-model validation: the swap flip rate of ref-anchored@w with and without the report, "
                  "against the model's known report weight w.",
          alt="Two lines of swap flip rate against the anchoring weight w from 0 to 1, one with the report in "
              "the prompt and one without.")

# %% [markdown]
# The report-present flip rate falls from {glue:text}`ml.validation.w0.fr_present:.2%` at w = 0 to
# {glue:text}`ml.validation.w1.fr_present:.2%` at w = 1, and the blind prior flips on
# {glue:text}`ml.validation.blind.fr_present:.2%` of trials, as constructed.
#
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

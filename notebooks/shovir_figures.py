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
# # ShoViR Figures 2 and 3: occluding the evidence of a finding
#
# The disease-level test blends matched noise into boxes at strength p ∈ {0, .2, …, 1}: into the
# boxes of the target finding c (OCO), into the boxes of the *other* findings of the image that do
# not overlap c's boxes (DOCO), or into random control boxes placed away from every annotated box
# (RO). A model that grounds c in c's own region should keep its call of c under RO and drop it
# under OCO; a model that infers c from co-occurring findings drops it under DOCO. The paper's
# Figure 2 ({numref}`fig-sv-fig2` here) shows the class-weighted μ-F1 against p, its Figure 3(a)
# ({numref}`fig-sv-fig3a`) the drop against RO (Δ_X) and the flip rate FR at p = 1 with bootstrap
# intervals, its Figure 3(b) ({numref}`fig-sv-fig3b`) per-class F1 averaged across models. A validation
# section asserts that the reference models land where their construction says.
#
# Choices where the paper is silent (see `shovir_core.tables.shovir`): F1_c is computed on
# class c's subset against the reference label of c; μ-F1 weights classes by their number of items
# in each condition's subset; Δ_DOCO compares DOCO with RO on the DOCO items; FR micro-pools
# (image, class) pairs; intervals are percentile bootstraps that resample images (the paper shows
# intervals without naming their method; images, not patients, are the unit here, as the paper's
# evaluation counts images). On the demo the
# reference labels are the NIH labels, so every evaluated item is positive and F1_c reflects missed
# findings only.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
n_draws = None
bootstrap_seed = None
paper_dataset = None
paper_models = None
pipeline_only = []

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from shovir_core import book
from shovir_core.book import figures
from shovir_core.tables import paper_vs_run as pvr
from shovir_core.tables import shovir as sv
from shovir_core.tables import shovir_paper as sp

runs = book.load_runs("shovir_figures", profile=profile, run_ids=run_ids)
trials = sv.trials_of(runs)
per_class = sv.per_class(trials).with_runs(runs)
fig2 = sv.mu_f1_curves(per_class)
curves = fig2.frame
fig3a = sv.shortcut_metrics(trials, p=1.0, n_draws=n_draws, rng=np.random.default_rng(bootstrap_seed)).with_runs(runs)
shortcut = fig3a.frame

# %% [markdown]
# ## Items per class and the DOCO drop rule
#
# An item is an (image, target class) pair. DOCO needs at least one co-finding box whose IoU with
# every target box is below {glue:text}`sv.fig.iou_threshold`; items without one are dropped from DOCO only.

# %% tags=["nbval-check-output"]
doco = sv.doco_counts(runs)
book.show(doco, runs=runs, name="sv-doco")

# %%
book.glue_values("sv.fig", doco.values, runs=runs)
book.glue("sv.fig.iou_threshold", float(next(iter(runs.values())).manifest["spec"]["iou_threshold"]), runs=runs)

# %% [markdown]
# Of the evaluated items, {glue:text}`sv.fig.n_doco_dropped` have no co-finding box and are
# dropped from DOCO, which keeps {glue:text}`sv.fig.n_doco_items` (per full-set model).

# %% [markdown] tags=["profile:demo"]
# ### DOCO is not validated on the demo
#
# DOCO occludes co-finding boxes, so only an item whose image carries, besides the target's boxes, a box
# of at least one other evaluated class can enter it. Of the {glue:text}`sv.doco.n_images` demo images
# (the demo cohort holds every boxed demo image; it is not subsampled),
# {glue:text}`sv.doco.n_multi_images` carry boxes of more than a single evaluated class; their
# {glue:text}`sv.doco.n_multi_items` items are all the items with a co-finding box, and the paper's IoU
# rule keeps {glue:text}`sv.doco.n_doco_items` of them, on {glue:text}`sv.doco.n_doco_images` images. That
# is the ceiling for any model and any cohort drawn from the demo data: a cohort that selects the
# multi-box images holds the same {glue:text}`sv.doco.n_doco_items` DOCO items, fewer than the
# {glue:text}`sv.doco.min_items` eligible items this book asks of a DOCO validation. For
# `ref-context-shortcut`, the model whose planted behaviour is to infer the target from the co-finding
# boxes, {glue:text}`sv.doco.n_eligible` DOCO items are eligible (target positive and called under RO):
# its thresholds are calibrated over all demo images, most of which have no co-finding box and read the
# whole image outside the target's boxes, so it seldom calls a finding from a small co-finding box.
# **DOCO, ShoViR's arm for the co-occurrence shortcut, is therefore unvalidated on the demo**: the DOCO
# curves, bars and flip rates on this page rest on too few items to show that such a model loses its calls
# under DOCO, and the validation section below checks the context-shortcut behaviour under RO instead.
# The cell below asserts these counts; on records with enough eligible items it asserts the planted
# behaviour, FR(DOCO) > FR(OCO), instead (a model without it fails that check:
# `tests/test_tables_shovir.py`).

# %% tags=["nbval-check-output"]
context_runs = {k: r for k, r in runs.items() if r.manifest["spec"]["model"] == "ref-context-shortcut"}
if context_runs:
    doco_check = sv.doco_status(trials).with_runs(context_runs)
    book.show(doco_check, runs=context_runs, name="sv-doco-status")
    dv = doco_check.values
    if dv["doco.validated"]:
        assert dv["doco.holds"], "ref-context-shortcut: FR(DOCO) > FR(OCO) on enough eligible items"
    else:
        assert dv["doco.n_eligible"] < dv["doco.min_items"]
    if profile == "demo":  # the paragraph above: the demo data cannot give a DOCO validation
        assert not dv["doco.validated"] and dv["doco.n_doco_items"] < dv["doco.min_items"], \
            "the demo now has enough DOCO items: validate DOCO and rewrite the paragraph above"
        assert dv["doco.n_images"] == next(iter(context_runs.values())).manifest["counts"]["n_images"], "every demo image"
        assert dv["doco.n_doco_items"] == doco.values["n_doco_items"] and dv["doco.n_multi_items"] >= dv["doco.n_doco_items"]
    book.glue_values("sv", {k: x for k, x in dv.items() if not isinstance(x, bool) and x is not None}, runs=context_runs)

# %% [markdown]
# ## Figure 2: μ-F1 against occlusion strength

# %%
n_panels = curves["model"].nunique()
n_cols = min(2, n_panels)
grid = sns.relplot(curves, x="p", y="mu_f1", hue="condition", style="condition",
                   col="model", col_wrap=n_cols, kind="line", markers=True,
                   height=figures.COLUMN_WIDTH_IN / n_cols / 1.35 - 0.15, aspect=1.35,
                   hue_order=["RO", "OCO", "DOCO"], style_order=["RO", "OCO", "DOCO"],
                   facet_kws={"legend_out": True})
grid.set_axis_labels("occlusion strength p", "μ-F1 (class-weighted)")
grid.set_titles("{col_name}")
grid.set(ylim=(-0.02, 1.02), xticks=[0, 0.2, 0.4, 0.6, 0.8, 1.0])
book.show(grid.figure, runs=runs, name="sv-fig2",
          caption="ShoViR Figure 2: μ-F1 against the occlusion strength p (0 = clean image, 1 = the "
                  "boxes fully replaced by matched noise) for random (RO), own-finding (OCO) and co-finding (DOCO) "
                  "occlusion, one panel per model.",
          alt="Line charts, one per model, of μ-F1 from 0 to 1 against p from 0 to 1 for the RO, OCO and DOCO "
              "conditions.")

# %% tags=["nbval-check-output"]
book.show(fig2.pivot(index=["model", "condition"], columns="p", values="mu_f1"), runs=runs, name="sv-fig2-values")

# %%
# structural check: at p = 0 RO and OCO show the clean image on the same items, so they agree
p0 = curves[np.isclose(curves["p"], 0.0)].pivot(index="model", columns="condition", values="mu_f1")
assert np.allclose(p0["RO"], p0["OCO"]), "p = 0 must equal the clean image under RO and OCO"
clean = trials[(trials["level"] == "disease") & np.isclose(trials["p"], 0.0)]
baseline_hash = trials[trials["condition"] == "Baseline"].drop_duplicates("image_id").set_index("image_id")["input_sha256"]
assert (clean["input_sha256"].to_numpy() == baseline_hash.reindex(clean["image_id"]).to_numpy()).all(), \
    "p = 0 inputs are byte-identical to the Baseline image"
book.glue_values("sv", fig2.values, runs=runs)

# %% [markdown]
# ## Figure 3(a): Δ_X and flip rate at p = 1
#
# Δ_X = μ-F1(RO) − μ-F1(X) and FR = share of (image, c) pairs with c positive and called under RO
# that X no longer calls. *RO-control* is random occlusion against the clean image: how many calls
# random noise alone removes. Bars show the estimate, whiskers the 95% percentile bootstrap interval
# (images resampled); each FR bar is labelled with its n, the eligible items (c positive and called
# under the reference arm) it is over. A flip rate over fewer than {glue:text}`sv.checks.min_items`
# eligible items is shown with its n but neither headlined nor used by a check below.

# %%
plot3a = shortcut[shortcut["arm"].isin(["OCO", "DOCO", "RO-control"])]
fig, axes = plt.subplots(1, 2, figsize=figures.column_figsize(3.6), sharey=True)
models = list(dict.fromkeys(plot3a["model"]))
arms = ["OCO", "DOCO", "RO-control"]
width = 0.8 / len(arms)
# Δ_X on the 0-1 μ-F1 scale, FR in % as in the table (the metric schema's units)
for ax, (stat, label, scale) in zip(axes, [("delta", "Δ_X = μ-F1(RO) − μ-F1(X)", 1), ("fr", "flip rate FR (%)", 100)]):
    for k, arm in enumerate(arms):
        sub = plot3a[plot3a["arm"] == arm].set_index("model").reindex(models)
        y = np.arange(len(models)) + (k - (len(arms) - 1) / 2) * width
        err = scale * np.vstack([sub[stat] - sub[f"{stat}_lo"], sub[f"{stat}_hi"] - sub[stat]])
        bars = ax.barh(y, scale * sub[stat], height=width, xerr=np.nan_to_num(err), label=arm, capsize=2,
                       color=sns.color_palette()[k])
        if stat == "fr":
            # a model without items in this arm (reindexed: NaN) has n = 0 eligible items
            for bar, yy, n, hi in zip(bars, y, sub["n_eligible"].fillna(0), np.nan_to_num(scale * sub["fr_hi"])):
                ax.text(hi + 1, yy, f"n={int(n)}", va="center", fontsize=9)
                if n < sv.MIN_FR_ITEMS:  # too few eligible items for a rate: hatched and pale
                    bar.set_hatch("//")
                    bar.set_alpha(0.35)
            ax.set_xlim(0, 122)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel(label)
    ax.set_yticks(np.arange(len(models)), models)
axes[0].set_title("Δ_X at p = 1")
axes[1].set_title("FR at p = 1 (share of calls lost)")
fig.legend(*axes[1].get_legend_handles_labels(), title="arm", loc="lower center", ncols=len(arms),
           bbox_to_anchor=(0.5, -0.02))
fig.tight_layout(rect=(0, 0.12, 1, 1))
book.show(fig, runs=runs, name="sv-fig3a",
          caption="ShoViR Figure 3(a) at p = 1: Δ_X = μ-F1(RO) − μ-F1(X) (higher: the arm costs more "
                  "F1 than random occlusion) and the flip rate FR (share of the calls made under RO that X no "
                  f"longer makes), with 95% percentile bootstrap intervals over images ({n_draws:,} draws); each "
                  f"FR bar is labelled with its n (eligible items); hatched pale bars rest on fewer than "
                  f"{sv.MIN_FR_ITEMS} items.",
          alt="Two horizontal bar charts per model: Δ_X and flip rate for OCO, DOCO and RO-control, with "
              "error bars.")

# %% tags=["nbval-check-output"]
book.show(fig3a.select(["n_items", "delta", "delta_lo", "delta_hi"]), runs=runs, name="sv-fig3a-values",
          caption="Figure 3(a) values: Δ_X with its 95% interval and the items it is over.")
book.show(fig3a.select(["n_eligible", "n_flipped", "fr", "fr_lo", "fr_hi"]), runs=runs, name="sv-fig3a-fr",
          caption="Figure 3(a) values: each flip rate with its n (eligible items: c positive and called under the "
                  "reference arm) and the flips it counts.")
assert (shortcut["bootstrap"] == f"{n_draws} draws over image_id, 95% percentile").all(), \
    "the intervals resample images, as the caption says"

# %%
book.glue_values("sv", fig3a.values, runs=runs)

# %% [markdown]
# ## Figure 3(b): per-class F1 averaged across models
#
# Baseline is OCO at p = 0 (the clean image on the OCO items); RO, OCO and DOCO at p = 1.

# %%
fig3b = sv.per_class_across_models(per_class, p=1.0, exclude_models=pipeline_only)
by_class = fig3b.frame
no_doco = [c for c in doco.frame.loc[doco.frame["doco_items"] == 0, "class"]]
with_doco = set(by_class.loc[(by_class["condition"] == "DOCO") & by_class["f1_mean"].notna(), "class"].astype(str))
assert not (set(no_doco) & with_doco) and set(no_doco) | with_doco == set(by_class["class"].astype(str)), \
    "a class lacks its DOCO bar exactly when it has no DOCO item"
fig, ax = plt.subplots(figsize=figures.column_figsize(4))
sns.barplot(by_class, x="class", y="f1_mean", hue="condition", ax=ax)
ax.set_xlabel("")
ax.set_ylabel("F1 (mean across models)")
ax.set_ylim(0, 1)
ax.tick_params(axis="x", rotation=30)
ax.legend(title="condition", loc="upper left", bbox_to_anchor=(1.01, 1))
fig.tight_layout()
book.show(fig, runs=runs, name="sv-fig3b",
          caption=f"ShoViR Figure 3(b): per-class F1 at p = 1, the mean over "
                  f"{by_class['n_models'].max()} models (without the pipeline check "
                  f"{', '.join(pipeline_only) or '-'}); Baseline is OCO at p = 0."
                  + sv.no_doco_note(no_doco),
          alt="Grouped bar chart of mean F1 per finding class for Baseline, RO, OCO and DOCO, on a 0 to 1 axis.")

# %% tags=["nbval-check-output"]
book.show(fig3b.pivot(index="class", columns="condition", values="f1_mean"), runs=runs, name="sv-fig3b-values")

# %%
book.glue_values("sv", fig3b.values, runs=runs)

# %% [markdown]
# ## The authors' postprocessing: attack sensitivity and per-class intervals
#
# The authors' scripts add summaries the paper does not print. The attack-sensitivity score S_AUC is
# the area under the relative drop [F(0) − F(p)] / F(0) over the p grid (trapezoid rule, p in percent,
# divided by the grid's range), and Δ = S_AUC(X) − S_AUC(RO) corrects it for random noise
# (`src/postprocessing/plots/sensitivity_score.py`, which takes F as the unweighted class mean; here F is
# μ-F1, as in Figure 2). The per-target-class F1 comes with the authors' bootstrap: each class's items
# resampled {glue:text}`sv.target.n_resamples` times with seed {glue:text}`sv.target.seed`, the median and
# the central 95 % interval of the resampled F1 (`evaluations/run_eval_chexbert_class.py`), shown for
# Baseline (OCO at p = 0) and each arm at p = 1. Both are computed by `shovir_core.metrics` and equal the
# authors' scripts number for number
# (`tests/test_metrics_shovir_parity.py`).

# %% tags=["nbval-check-output"]
sens = sv.attack_sensitivity(per_class, exclude_models=pipeline_only).with_runs(runs)
book.show(sens, runs=runs, name="sv-fig-sensitivity")
book.glue_values("sv", sens.values, runs=runs)

# %% tags=["nbval-check-output"]
target = sv.target_class_intervals(trials, ps=(0.0, 1.0), exclude_models=pipeline_only).with_runs(runs)
book.show(target, runs=runs, name="sv-fig-target-class", groups="model", collapsed=True,
          intervals={"median": ("ci_l", "ci_h")},
          caption="Per-target-class F1 with the authors' bootstrap interval (2.5 and 97.5 percentiles of "
                  "the resampled F1, the median between them); Baseline is OCO at p = 0.")
book.glue_values("sv.target", target.values, runs=runs)
assert (target.frame["ci_l"] <= target.frame["median"]).all() and (target.frame["median"] <= target.frame["ci_h"]).all()

# %% [markdown]
# ### What RO controls for, and why it can remove more than OCO
#
# RO places k ~ U{1, …, |B_c ∪ B_c̄|} random boxes whose sizes are drawn from the dataset-wide box-size
# distribution, away from every annotated box (ShoViR §3.3; `shovir_core.perturb.boxes.random_boxes`):
# it controls for *adding noise patches of a typical size somewhere in the image*, not for the area of
# the target's own boxes. Where a class's boxes are smaller than the dataset's typical box, RO covers more
# of the image than OCO: Lung Lesion boxes cover {glue:text}`sv.area.OCO.Lung_Lesion:.1%` of the image on
# average and its RO boxes {glue:text}`sv.area.RO.Lung_Lesion:.1%` (Atelectasis
# {glue:text}`sv.area.OCO.Atelectasis:.1%` against {glue:text}`sv.area.RO.Atelectasis:.1%`; over all items
# OCO {glue:text}`sv.area.OCO.all:.1%`, RO {glue:text}`sv.area.RO.all:.1%`). A drawn RO box that touches
# an annotated box is drawn again, size and position, up to `max_retries` times (the placement rule the
# paper leaves open), so where the annotated boxes are large RO ends up with smaller boxes: Cardiomegaly's
# RO boxes cover {glue:text}`sv.area.RO.Cardiomegaly:.1%` of the image, its own boxes
# {glue:text}`sv.area.OCO.Cardiomegaly:.1%`. Area is not the whole story:
# for Pleural Effusion OCO covers more ({glue:text}`sv.area.OCO.Pleural_Effusion:.1%` against
# {glue:text}`sv.area.RO.Pleural_Effusion:.1%`), yet RO lowers its mean F1
# ({glue:text}`sv.fig3b.Pleural_Effusion.RO:.3f`) and OCO leaves it at the Baseline's
# ({glue:text}`sv.fig3b.Pleural_Effusion.OCO:.3f`).

# %% [markdown] tags=["profile:demo"]
# On the demo the cross-model mean mixes
# the reference models: the context model never reacts to OCO by construction, but on images without a
# co-finding box its context region is the whole image outside the target's boxes, where the RO boxes land
# (it loses {glue:text}`sv.checks.context.fr_ro_no_cofinding:.1%` of its calls there under RO, n =
# {glue:text}`sv.checks.context.n_ro_no_cofinding`).

# %% tags=["nbval-check-output"]
area = sv.occluded_area(trials, p=1.0).with_runs(runs)
book.show(area.pivot(index="class", columns="condition", values="area_mean"), runs=runs, name="sv-fig-area",
          caption="Mean share of the image occluded at p = 1 per class and arm (from the boxes recorded with each "
                  "trial); RO box sizes follow the dataset-wide box-size distribution.")
book.glue_values("sv", area.values, runs=runs)
if profile == "demo":  # the sentences above
    av, f3 = area.values, fig3b.values
    assert av["area.RO.Lung_Lesion"] > av["area.OCO.Lung_Lesion"] and av["area.RO.Atelectasis"] > av["area.OCO.Atelectasis"]
    assert av["area.OCO.Pleural_Effusion"] > av["area.RO.Pleural_Effusion"]
    assert av["area.RO.Cardiomegaly"] < av["area.RO.all"] < av["area.OCO.Cardiomegaly"]
    assert f3["fig3b.Pleural_Effusion.RO"] < f3["fig3b.Pleural_Effusion.OCO"] == f3["fig3b.Pleural_Effusion.Baseline"]

# %% [markdown]
# ## Published values
#
# The values the paper's text states for Figures 2 and 3(a) (its models on MIMIC-CXR and
# PadChest-GR, labels from CheXbert), as published; the figures above are this run's, for scale.

# %% tags=["nbval-check-output"]
book.show(sp.published_figures(), runs=runs, name="sv-fig-published", what=book.PAPER_ONLY,
          formats={"paper value": ".3f"})

# %% [markdown] tags=["profile:mimic", "profile:padchest"]
# Where this profile runs the paper's models on the paper's dataset, each value the paper states
# for Figures 2, 3(a) and 3(b) stands beside the run's value, in the same unit, with a verdict (matches
# the printed value within its rounding, or differs from it). Figure 3(b)'s values are means over the
# paper's models, so they meet the run's mean over the models of the profile.

# %%
if paper_dataset:
    side = pvr.paper_vs_run({**fig2.values, **fig3a.values, **fig3b.values}, paper="shovir",
                            rows=pvr.shovir_figure_rows(paper_dataset, paper_models), same_setting=True,
                            setting=f"the paper's models on {paper_dataset}", runs=runs)
    book.show(side, runs=runs, name="sv-fig-paper", groups="section", intervals={"paper": ("paper_lo", "paper_hi")},
              missing={"run": "not run"})

# %% [markdown] tags=["profile:demo"]
# ## Validation: the reference models land where their construction says
#
# * `ref-blind-prior` writes its report from label priors and never looks at the image: Δ_FN = 0
#   and no call flips under any occlusion.
# * `ref-image-classifier` reads the pixels: occluding the target's own boxes (OCO) removes more
#   calls than random occlusion of the same kind removes from the clean image (RO-control).
# * `ref-context-shortcut` predicts a finding from the pixels outside its own boxes: occluding its own
#   boxes (OCO) never changes its call against the clean image, and noise in its context region turns
#   calls off. The paper's arm for the latter is DOCO (FR(DOCO) > FR(OCO)); where DOCO has fewer than
#   {glue:text}`sv.checks.min_items` eligible items (on the demo {glue:text}`sv.checks.context.n_doco`:
#   most demo images carry a single box) the check runs on the items it is defined on with enough of
#   them instead: the items without a co-finding box, whose context region is the whole image outside
#   the target's boxes, where the RO boxes land (FR(RO-control) on them > FR_OCO against the clean image).
#   Where that is so (the demo), this page does **not** validate DOCO itself: the stand-in check
#   validates the context-shortcut behaviour, not the DOCO arm.
#
# Every check that rests on a flip rate needs at least {glue:text}`sv.checks.min_items` eligible items
# (column *n*); with fewer it does not hold. These cells assert it, so a broken perturbation, labeller
# or metric fails the build.

# %% tags=["nbval-check-output"]
validation = sv.reference_checks(trials, p=1.0).with_runs(runs)
book.show(validation, runs=runs, name="sv-fig-checks")
book.glue_values("sv", validation.values, runs=runs)
validation = validation.frame

# %%
failed = validation[~validation["holds"]]
assert failed.empty, "reference models off their stated behaviour:\n" + failed.to_string()

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

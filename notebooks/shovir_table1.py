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
# # ShoViR Table 1: clean image vs Full Noise Image
#
# ShoViR asks whether a report-generation model's findings come from the image. The image-level test
# replaces the whole chest X-ray by matched Gaussian noise (the *Full Noise Image*) and compares the
# generated reports with the reference before and after: a model that reads the image should lose
# most of its label agreement, so Δ_FN = F1(Baseline) − F1(Full Noise) should be large. A model
# whose F1 survives the noise writes its findings from priors. This page computes Table 1 from the
# `shovir` run records named at the end, one per model.
#
# **Demo profile.** The embedded NIH ChestX-ray14 box subset has labels but no reports. The
# reference *labels* are the dataset's NIH labels mapped to CheXpert, and the reference *text* for
# BLEU-1/4 and ROUGE-L is a template report written from those labels
# (`shovir_core.data.template_reports`), so on the demo BLEU/ROUGE measure overlap with template
# sentences, not with a radiologist's report. The models are the reference models with known
# behaviour and a random-weight transformer (`tiny-gemma3`, on 3 images per class); none of them
# is in the paper, so no published value stands beside them. F1-RadGraph and GREEN need model
# weights that are not shipped; their cells read "unavailable" with the reason below.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
paper_dataset = None
paper_models = {}

# %%
import numpy as np
import pandas as pd

from shovir_core import book
from shovir_core.metrics import format_metric, metric_spec
from shovir_core.tables import shovir as sv

runs = book.load_runs("shovir_table1", profile=profile, run_ids=run_ids)
trials = sv.trials_of(runs)

# %% [markdown]
# ## Evaluation sets
#
# Image-level conditions run over every image of the record's image set; the disease-level
# conditions (next chapter) over the per-class evaluation subsets, whose sizes are below.

# %% tags=["nbval-check-output"]
counts = sv.run_counts(runs)
book.show(counts.pivot(index="class", columns="model", values="items"), runs=runs)

# %%
n_images = trials[trials["level"] == "image"].groupby("model")["image_id"].nunique()
book.glue("sv.t1.n_images_max", int(n_images.max()), runs=runs)
book.glue("sv.t1.n_models", int(len(runs)), runs=runs)
book.glue("sv.t1.n_classes", int(counts["class"].nunique()), runs=runs)

# %% [markdown]
# ## Table 1
#
# F1_14 and F1_5 are micro-averaged F1 of the generated report's CheXpert labels against the
# reference labels (uncertain and blank count as negative); BLEU is corpus-level (sacrebleu) and
# ROUGE-L the mean per-report F-measure, all on the 0–1 scale of the paper.

# %% tags=["nbval-check-output"]
table = sv.table1(trials)
names = {m: metric_spec(m).display for m in sv.TABLE1_METRICS}
shown = table.rename(columns=names, level=1)
book.show(shown.map(lambda v: "unavailable" if pd.isna(v) else f"{v:.3f}"), runs=runs)

# %%
unavailable = sv.external_metric_status()
for name, reason in unavailable.items():
    print(f"{metric_spec(name).display}: unavailable ({reason})")

# %% [markdown]
# ## What this page asserts
#
# The chapter does not build unless, for every model, Baseline and Full Noise cover the same images;
# every F1, BLEU and ROUGE value lies in [0, 1]; every model saw byte-identical Full Noise images
# (same input hash per image); Δ_FN equals Baseline − Full Noise; and the blind-prior reference
# model, which never reads the image, has Δ_FN = 0 exactly.

# %%
image_trials = trials[trials["level"] == "image"]
per_arm = image_trials.groupby(["model", "condition"])["image_id"].nunique().unstack()
assert (per_arm["Baseline"] == per_arm["FullNoise"]).all(), "Baseline and Full Noise cover the same images"
for metric in ("f1_14_micro", "f1_5_micro", "bleu1", "bleu4", "rouge_l"):
    values = table.xs(metric, axis=1, level=1)[["Baseline", "FullNoise"]].to_numpy()
    assert np.all((values >= 0) & (values <= 1)), f"{metric} outside [0, 1]"
full_noise_inputs = image_trials[image_trials["condition"] == "FullNoise"]
assert full_noise_inputs.groupby("image_id")["input_sha256"].nunique().eq(1).all(), \
    "every model saw the same Full Noise image"
assert np.allclose(table[("Δ_FN", "f1_14_micro")],
                   table[("Baseline", "f1_14_micro")] - table[("FullNoise", "f1_14_micro")])
if "ref-blind-prior" in table.index:
    assert table.loc["ref-blind-prior", ("Δ_FN", "f1_14_micro")] == 0.0, "blind prior: Δ_FN = 0"
    assert table.loc["ref-blind-prior", ("Δ_FN", "f1_5_micro")] == 0.0, "blind prior: Δ_FN = 0"

# %% [markdown]
# ## Published values
#
# Where this profile runs the paper's models on the paper's dataset (`mimic`, `padchest`), the
# paper's Table 1 value stands beside the run's value and the difference is shown.

# %% tags=["nbval-check-output"]
if paper_dataset:
    paper = sv.paper_table1(paper_dataset, paper_models)
    common = [c for c in table.columns if c in paper.columns]
    side = pd.concat({"run": table[common], "paper": paper.reindex(table.index)[common]}, axis=1)
    side = side.reorder_levels([1, 2, 0], axis=1).sort_index(axis=1, level=[0, 1], sort_remaining=False)
    book.show(side.round(3), runs=runs)
else:
    print(f"profile {profile!r}: no model of this profile is in the paper; no published value to compare")

# %% [markdown]
# ## Largest and smallest image dependence

# %%
for model, row in table.iterrows():
    for (arm, metric), value in row.items():
        if pd.notna(value):
            book.glue(f"sv.t1.{sv.key_part(model)}.{sv.key_part(arm)}.{metric}", float(value), runs=runs)
delta = table[("Δ_FN", "f1_14_micro")]
book.glue("sv.t1.max_delta_fn_f1_14", float(delta.max()), runs=runs)
book.glue("sv.t1.max_delta_fn_model", str(delta.idxmax()), runs=runs)
book.glue("sv.t1.min_delta_fn_f1_14", float(delta.min()), runs=runs)
book.glue("sv.t1.min_delta_fn_model", str(delta.idxmin()), runs=runs)
print(f"largest Δ_FN (F1_14): {delta.idxmax()} {format_metric('f1_14_micro', delta.max())}; "
      f"smallest: {delta.idxmin()} {format_metric('f1_14_micro', delta.min())}")

# %% [markdown]
# Across the {glue:text}`sv.t1.n_models` models of this profile the largest Δ_FN (F1_14) is
# {glue:text}`sv.t1.max_delta_fn_f1_14:.3f` ({glue:text}`sv.t1.max_delta_fn_model`) and the smallest
# {glue:text}`sv.t1.min_delta_fn_f1_14:.3f` ({glue:text}`sv.t1.min_delta_fn_model`), over at most
# {glue:text}`sv.t1.n_images_max` images and {glue:text}`sv.t1.n_classes` evaluated classes.

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

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
# # Supplementary §A: how the cohort is counted
#
# ShoViR's numbers rest on a cohort built by filters: MIMIC-CXR test images with Chest ImaGenome
# boxes, minus images whose only positive label is No Finding, minus images whose positive classes
# are not all confirmed by a box (the true-positive filter); PadChest-GR boxes mapped to CheXpert,
# validated against their sentences, classes with at least 40 images. This page counts that funnel
# the way this package's dataset adapters apply it (Tables S1–S4's role), the agreement of the image
# labels with the classes of the boxes (the paper's cross-source consistency F1, 0.935 on MIMIC-CXR),
# the label lookups as data, and the radiologist-validation sample (5 images per class, drawn by a
# seeded hash order). On the demo the same funnel runs on the NIH ChestX-ray14 box subset.
#
# Counted from the files the adapters read: the MIMIC-CXR test split before ImaGenome (3,858 images
# in the paper) and the PadChest-GR boxes before sentence validation need files the adapters do not
# load, so those steps are the paper's and are not recomputed here. The ImaGenome → CheXpert rule
# mapping (Table S1) is not in the authors' repository either.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
paper_dataset = None

# %%
import pandas as pd

from shovir_core import book, papers
from shovir_core.tables import shovir_suppl as sup

runs = book.load_runs("shovir_suppl_a", profile=profile, run_ids=run_ids)
run = runs["accounting"]
funnel = sup.funnel(run)
classes = sup.class_counts(run)
consistency = sup.consistency(run)
validation = sup.validation_sample(run)
maps = sup.label_maps(run)

# %% [markdown]
# ## The funnel

# %% tags=["nbval-check-output"]
book.show(funnel.display(), runs=runs)

# %% [markdown]
# ## Per-class evaluation subsets
#
# A class's subset holds the images with a positive label for the class and at least one box of it;
# classes below the profile's `min_count` are dropped.

# %% tags=["nbval-check-output"]
book.show(classes.display().set_index("class"), runs=runs)

# %% [markdown]
# ## Image labels against box classes
#
# Per class: images whose label is positive and that carry a box of the class (tp), a positive label
# without such a box (fn) and a box without a positive label (fp); F1 = 2tp / (2tp + fp + fn), pooled
# over classes for the headline value. On MIMIC-CXR this is computed on the candidates before the
# true-positive filter, as the paper's check.

# %% tags=["nbval-check-output"]
book.show(consistency.display().set_index("class"), runs=runs)

# %% [markdown]
# ## Radiologist-validation sample and label lookups
#
# The sample's image ids stay in the record (`validation.ids`); the page shows counts only.

# %% tags=["nbval-check-output"]
book.show(validation.display().set_index("class"), runs=runs)
book.show(maps.frame.groupby("source").agg(labels=("source_label", "size"),
                                           mapped=("chexpert", lambda s: int((s.astype(str) != "").sum()))),
          runs=runs)

# %% [markdown]
# ## Checks

# %%
f = funnel.frame
assert (f["images"].diff().fillna(0) <= 0).all(), "every funnel step keeps at most the images of the step before"
kept = set(classes.frame.loc[classes.frame["kept"], "class"])
assert set(validation.ids["class"]) <= kept, "validation cases come from kept classes only"
assert validation.ids["image_id"].nunique() <= funnel.values["final_images"]
assert (validation.frame["images"] <= validation.values["per_class"]).all()
assert int(classes.frame["kept"].sum()) == funnel.values["n_classes_kept"]
assert 0.0 <= consistency.values["f1"] <= 1.0
if paper_dataset == "MIMIC":
    print("paper: candidates", papers.published_value("shovir", id="a1.mimic.candidates"),
          "final", papers.published_value("shovir", id="a1.mimic.final_images"),
          "consistency F1", papers.published_value("shovir", id="a1.mimic.consistency_f1"))
elif paper_dataset == "PadChest":
    print("paper: final images", papers.published_value("shovir", id="a1.padchest.final_images"),
          "categories", papers.published_value("shovir", id="a1.padchest.categories"))
else:
    print(f"profile {profile!r}: not a dataset of the paper; no published value to compare")

# %% [markdown]
# ## Glued values

# %%
book.glue_values("sa.funnel", funnel.values, runs=runs)
book.glue_values("sa.consistency", {k: v for k, v in consistency.values.items()}, runs=runs)
book.glue_values("sa.validation", validation.values, runs=runs)
book.glue_values("sa.maps", maps.values, runs=runs)

# %% [markdown]
# The funnel keeps {glue:text}`sa.funnel.final_images` of {glue:text}`sa.funnel.first_images` images in
# {glue:text}`sa.funnel.n_classes_kept` classes; image labels and box classes agree with F1
# {glue:text}`sa.consistency.f1:.3f`; the validation sample holds {glue:text}`sa.validation.n_cases`
# images ({glue:text}`sa.validation.per_class` per class at most).

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

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
# validated against their sentences, classes with at least {glue:text}`sa.paper.min_class_images` images.
# This page counts that funnel from the raw metadata beside the adapters' input (the MIMIC-CXR split file,
# the PadChest-GR grounded-reports release) and the way this package's dataset adapters apply it (Tables
# S1–S4's role), the agreement of the image labels with the classes of the boxes (the paper's cross-source
# consistency F1, {glue:text}`sa.paper.consistency_f1:.3f` on MIMIC-CXR), the label lookups as data, and
# the radiologist-validation sample ({glue:text}`sa.paper.cases_per_class` images per class, drawn by a
# seeded hash order). On the demo the same funnel runs on the NIH ChestX-ray14 box subset.
#
# Where the raw files are missing the funnel starts at the adapter's input. The share of PadChest-GR boxes
# the CheXbert sentence validation removes is counted against the boxes of abnormal, non-negated findings
# that the static lookup maps (the authors' pipeline also adds classes CheXbert reads in the label's name,
# which needs the CheXbert weights). The ImaGenome → CheXpert rule mapping (Table S1) is not in the
# authors' repository.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
paper_dataset = None

# %%
import pandas as pd

from shovir_core import book, papers
from shovir_core.tables import paper_vs_run as pvr
from shovir_core.tables import shovir_suppl as sup

runs = book.load_runs("shovir_suppl_a", profile=profile, run_ids=run_ids)
for key, pid in {"min_class_images": "a1.padchest.min_class_images", "consistency_f1": "a1.mimic.consistency_f1",
                 "cases_per_class": "a1.radiologist.cases_per_class"}.items():
    book.glue_paper(f"sa.paper.{key}", pid, paper="shovir")
run = runs["accounting"]
funnel = sup.funnel(run)
classes = sup.class_counts(run)
consistency = sup.consistency(run)
validation = sup.validation_sample(run)
maps = sup.label_maps(run)

# %% [markdown]
# ## The funnel

# %% tags=["nbval-check-output"]
book.show(funnel, runs=runs)

# %% [markdown]
# ## Per-class evaluation subsets
#
# A class's subset holds the images with a positive label for the class and at least one box of it;
# classes below the profile's `min_count` are dropped.

# %% tags=["nbval-check-output"]
book.show(classes, runs=runs)

# %% [markdown]
# ## Image labels against box classes
#
# Per class: images whose label is positive and that carry a box of the class (tp), a positive label
# without such a box (fn) and a box without a positive label (fp); F1 = 2tp / (2tp + fp + fn), pooled
# over classes for the headline value. On MIMIC-CXR this is computed on the candidates before the
# true-positive filter, as the paper's check. A class without a single box in the dataset can only
# count fn; the F1 is therefore given over every class and over the classes that have boxes.

# %% tags=["nbval-check-output"]
book.show(consistency, runs=runs)

# %% [markdown]
# Pooled over every class the labels and the box classes agree with F1 {glue:text}`sa.consistency.f1:.3f`;
# pooled over the {glue:text}`sa.consistency.n_classes_boxed` classes that have boxes, the F1 is
# {glue:text}`sa.consistency.f1_boxed:.3f`. The other {glue:text}`sa.consistency.n_classes_without_boxes`
# classes with positive labels ({glue:text}`sa.consistency.classes_without_boxes`) have no box at all in
# this dataset and add {glue:text}`sa.consistency.fn_without_boxes` fn.

# %% [markdown]
# ## Radiologist-validation sample and label lookups
#
# The sample's image ids stay in the record (`validation.ids`); the page shows counts only.

# %% tags=["nbval-check-output"]
book.show(validation, runs=runs)
lookup = pd.DataFrame({
    "source": ["NIH ChestX-ray14", "PadChest"],
    "labels in the lookup": [maps.values["nih.labels"], maps.values["padchest.labels"]],
    "mapped to a CheXpert class": [maps.values["nih.mapped"], maps.values["padchest.mapped"]],
    "labels of the dataset (paper)": pd.array([pd.NA, papers.published_value("shovir", id="a1.padchest.finding_labels")],
                                              dtype="Int64"),
    "mapped (paper)": pd.array([pd.NA, papers.published_value("shovir", id="a1.padchest.mapped_labels")], dtype="Int64"),
}).set_index("source")
book.show(lookup, runs=runs, name="sa-lookups", missing="not in the paper",
          caption="The label lookups the adapters use, against the paper's PadChest-GR counts (§3.1).")
assert maps.values["padchest.labels"] == maps.values["padchest.mapped"] == \
    papers.published_value("shovir", id="a1.padchest.mapped_labels"), "the lookup holds the paper's mapped labels"
book.glue_paper("sa.maps.padchest.paper_labels", "a1.padchest.finding_labels", paper="shovir")

# %% [markdown]
# The PadChest lookup lists only the labels that map: its {glue:text}`sa.maps.padchest.labels` entries are the
# paper's {glue:text}`sa.maps.padchest.mapped` mapped labels of {glue:text}`sa.maps.padchest.paper_labels`
# PadChest-GR finding labels (the other labels are not in the lookup, and their boxes are dropped). The NIH
# lookup holds {glue:text}`sa.maps.nih.labels` labels: the dataset's {glue:text}`sa.maps.nih.distinct` (its
# findings and No Finding) and {glue:text}`sa.maps.nih.aliases` spelling of the box list (`Infiltrate` for
# `Infiltration`); {glue:text}`sa.maps.nih.mapped` map to a CheXpert class, and
# {glue:text}`sa.maps.nih.unmapped` have none.

# %% [markdown]
# ## Checks
#
# What the chapter asserts of the counts above (the build fails when one does not hold).

# %% tags=["nbval-check-output"]
f = funnel.frame
kept = set(classes.frame.loc[classes.frame["kept"], "class"])
checks = pd.DataFrame([
    ("every funnel step keeps at most the images of the step before", bool((f["images"].diff().fillna(0) <= 0).all())),
    ("validation cases come from kept classes only", set(validation.ids["class"]) <= kept),
    ("the validation sample has at most the funnel's final images",
     validation.ids["image_id"].nunique() <= funnel.values["final_images"]),
    ("at most per_class validation cases per class", bool((validation.frame["images"] <= validation.values["per_class"]).all())),
    ("classes kept by the subsets = classes kept by the funnel",
     int(classes.frame["kept"].sum()) == funnel.values["n_classes_kept"]),
], columns=["check", "holds"])
book.show(checks, runs=runs, name="sa-checks")
assert checks["holds"].all(), checks[~checks["holds"]].to_string()

# %% [markdown]
# ## The paper's counts
#
# Where the profile reads the paper's dataset, each count the paper states for the funnel (§3.1) stands
# beside the recomputed one; steps whose raw file is absent are shown as not run.

# %%
if paper_dataset:
    dataset_ids = {k: v for k, v in sup.FUNNEL_PAPER_IDS.items() if f".{paper_dataset.lower()}." in v}
    dataset_ids.update({"consistency_f1": "a1.mimic.consistency_f1"} if paper_dataset == "MIMIC" else
                       {"final_images": "a1.padchest.final_images", "n_classes_kept": "a1.padchest.categories"})
    side = pvr.beside({**funnel.values, "consistency_f1": consistency.values["f1"]}, dataset_ids, paper="shovir",
                      same_setting=True, setting=f"the paper's {paper_dataset} cohort", optional=tuple(dataset_ids),
                      show_missing=True, runs=runs)
    book.show(side, runs=runs, name="sa-paper", intervals={"paper": ("paper_lo", "paper_hi")},
              missing={"run": "not run"})

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

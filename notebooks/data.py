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
# # Data
#
# Both papers ask whether a model's answer comes from the image. The demo profile answers it on
# real, public chest X-rays: NIH ChestX-ray14 images with expert bounding boxes (for ShoViR's
# occlusions) and a downscaled NIH set whose patients have several studies (for ModaLens's
# same-patient image swaps). Every number on this page is computed from the `cohort` run
# records listed at the end, which carry the SHA-256 of the data they describe.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
gallery_seed = None

# %%
import matplotlib.pyplot as plt
import seaborn as sns

from shovir_core import book
from shovir_core.book import figures
from shovir_core.data import summary
from shovir_core.tables import data as tables

runs = book.load_runs("data", profile=profile, run_ids=run_ids)
boxes_trials = runs["boxes"].trials
multi_trials = runs["multi"].trials

# %% [markdown]
# ## Cohorts

# %% tags=["nbval-check-output"]
cohorts = tables.cohort_table({"boxes": boxes_trials, "multi": multi_trials},
                              names={"boxes": "box set (256 px)", "multi": "multi-study set (64 px)"}).with_runs(runs)
book.show(cohorts, runs=runs, name="data-cohorts")

# %%
counts = cohorts.values
assert counts["boxes.n_images"] == counts["boxes.n_studies"], "NIH: one image per study"
assert counts["boxes.n_images_with_boxes"] == counts["boxes.n_images"], "every box-set image has a box"
assert counts["multi.n_boxes"] == 0
assert counts["multi.n_pa"] + counts["multi.n_ap"] == counts["multi.n_images"]
book.glue_values("data", cohorts.values, runs=runs)

# %% [markdown]
# ## Label prevalence per CheXpert class
#
# NIH labels were text-mined from reports and are mapped to CheXpert classes
# (`shovir_core.labels.NIH_TO_CHEXPERT`); classes with no NIH counterpart are blank.

# %% tags=["nbval-check-output"]
prevalence = {key: tables.prevalence_table(t, key=key).with_runs(runs)
              for key, t in (("boxes", boxes_trials), ("multi", multi_trials))}
prev = {key: table.frame for key, table in prevalence.items()}
book.show(prevalence["multi"], runs=runs, name="data-prevalence-multi",
          caption=f"Label counts and prevalence per CheXpert class in the multi-study set (64 px): "
                  f"{counts['multi.n_images']:,} images of {counts['multi.n_patients']:,} patients.")

# %%
fig, ax = plt.subplots(figsize=figures.column_figsize(4.5))
plot_df = (prev["multi"]["positive"].rename("64-px multi-study set").to_frame()
           .join(prev["boxes"]["positive"].rename("box set")).reset_index()
           .melt(id_vars="class", var_name="cohort", value_name="positive images"))
sns.barplot(plot_df, y="class", x="positive images", hue="cohort", ax=ax)
ax.set_title("Positive images per CheXpert class")
ax.set_xlabel("images with the class positive")
ax.set_ylabel("")
fig.tight_layout()
book.show(fig, runs=runs, name="data-prevalence",
          caption="Positive images per CheXpert class in the two demo cohorts (NIH labels mapped to CheXpert).",
          alt="Horizontal bar chart: for each CheXpert class, the number of positive images in the 64-px "
              "multi-study set and in the box set.")
book.glue_values("data", prevalence["multi"].values, runs=runs)

# %% [markdown]
# ## Studies per patient (the multi-study set)
#
# ModaLens swaps a study's image for another study of the same patient; patients with
# several studies make such swaps possible.

# %% tags=["nbval-check-output"]
spp = tables.studies_per_patient(multi_trials).with_runs(runs)
book.show(spp, runs=runs, name="data-studies-per-patient")

# %%
patients = spp.frame.set_index("studies")["patients"]
assert int(patients.sum()) == counts["multi.n_patients"]
assert int(patients[patients.index >= 2].sum()) == counts["multi.n_patients_multi_study"]

# %% [markdown]
# ## Boxes per class and box sizes (box set)

# %% tags=["nbval-check-output"]
boxes = tables.box_table(boxes_trials, key="boxes").with_runs(runs)
book.show(boxes, runs=runs, name="data-boxes")

# %%
assert int(boxes.frame["boxes"].sum()) == counts["boxes.n_boxes"]
book.glue_values("data", boxes.values, runs=runs)
bf = summary.boxes_frame(boxes_trials)
fig, ax = plt.subplots(figsize=figures.column_figsize(4))
sns.boxplot(bf, y="finding", x="rel_area", ax=ax, log_scale=True)
ax.set_title("Box area as a fraction of the image, per finding")
ax.set_xlabel("box area / image area (log scale)")
ax.set_ylabel("")
fig.tight_layout()
book.show(fig, runs=runs, name="data-box-area",
          caption="Expert box area as a fraction of the image, per finding (box set; log scale).",
          alt="Box plots of box area over image area for each finding, on a logarithmic axis.")

# %% [markdown]
# ## Gallery
#
# {numref}`fig-data-gallery` shows one image per box class, with every expert box of the image
# outlined; {numref}`fig-data-prevalence` and {numref}`fig-data-box-area` above summarise the
# classes and the box sizes.

# %%
fig = figures.box_gallery(boxes_trials, per_class=1, ncols=4, seed=gallery_seed)
book.show(fig, runs=runs, name="data-gallery",
          caption="One demo image per box class with its expert boxes: solid, the titled finding; dashed, the "
                  "image's other findings.",
          alt="A grid of chest X-rays, one per finding class, each with coloured rectangles around the annotated "
              "regions.")

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

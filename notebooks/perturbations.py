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
# # Perturbations
#
# Both papers remove or replace the image and watch the answer. ShoViR replaces the whole image with
# noise matched to its intensity statistics (Full Noise Image), or blends that noise into boxes: the
# boxes of the target finding (OCO), of the other findings that do not overlap it (DOCO), or random
# control boxes that overlap no annotated box (RO), at strengths p from 0 to 1. ModaLens swaps the
# image for another study's, preferring the same patient. This chapter shows what those inputs look
# like on the demo data, how many items each condition keeps, and how the substitutes were drawn.
# Every image here was written by the `perturbations` protocol and is checked against the SHA-256
# stored in its run record; the noise stream of an image depends only on (seed, image, class,
# condition), so every model sees the same bytes.

# %% tags=["parameters"]
profile = "demo"
run_ids = None

# %%
import matplotlib.pyplot as plt
import seaborn as sns

from shovir_core import book
from shovir_core.book import figures
from shovir_core.perturb import report
from shovir_core.tables import perturbations as tables

runs = book.load_runs("perturbations", profile=profile, run_ids=run_ids)
run = runs["perturbations"]
spec = run.manifest["spec"]
trials = run.trials

# %% [markdown]
# ## A single image under every condition and strength
#
# The gallery item is chosen by rule (the image with the most distinct box findings that still has
# a DOCO box): {glue:text}`pt.gallery.image_id` with target {glue:text}`pt.gallery.target`
# ({numref}`fig-pt-gallery-paper`; {numref}`fig-pt-gallery-reference-code` repeats it under the
# authors' code).
# Solid outlines are the boxes blended with noise (yellow: the target's boxes B_c; cyan: the other
# findings' boxes B_c̄ that pass the IoU rule; red: random control boxes); dashed white outlines are
# the target's boxes. With the paper's preset the noise is i.i.d. Gaussian with the trimmed mean and
# standard deviation of the whole image, blended with hard edges.

# %%
gallery = report.gallery_frame(run)
n_verified = report.verify_gallery(gallery)
assert n_verified == len(gallery), "every gallery PNG matches the hashes in the record"
image_id, target = spec["gallery"][0]
fig = report.plot_gallery(gallery, preset="paper", image_id=image_id, target=target)
book.show(fig, runs=runs, name="pt-gallery-paper",
          caption="One demo image under every condition and strength p (preset \"paper\"): Baseline and Full "
                  "Noise, then RO, OCO and DOCO by p. Solid outlines: occluded boxes (yellow B_c, cyan the "
                  "co-finding boxes, red random boxes); dashed white: the target's annotated boxes.",
          alt="A grid of one chest X-ray: clean, full noise, and three rows of occlusion conditions with noise "
              "blended into boxes at increasing strength from left to right.")

# %% [markdown]
# The authors' code differs from the paper's description (preset `reference-code`): the centre is
# the trimmed median of the pixels outside the occluded boxes, the noise is drawn per RGB channel
# and blurred (radius {glue:text}`pt.ref.smooth_radius:g`), the blending mask is feathered (radius
# {glue:text}`pt.ref.feather_radius:g`), DOCO keeps IoU ≤ {glue:text}`pt.boxes.iou_threshold`, and RO
# uses untrimmed whole-image statistics with box sizes from fixed PadChest-GR constants.

# %%
fig = report.plot_gallery(gallery, preset="reference-code", image_id=image_id, target=target)
book.show(fig, runs=runs, name="pt-gallery-reference-code",
          caption="The same image under the authors' code (preset \"reference-code\"): trimmed-median centre, "
                  "per-channel blurred noise, feathered masks.",
          alt="The same grid of occlusion conditions as the previous figure, with softer noise edges.")

# %% tags=["nbval-check-output"]
noise = tables.noise_table(gallery).with_runs(runs)
book.show(noise, runs=runs, name="pt-noise")

# %%
paper = gallery[gallery["preset"] == "paper"]
baseline_sha = paper.loc[paper["condition"] == "Baseline", "sha256"].iloc[0]
assert (paper.loc[paper["p"] == 0, "sha256"] == baseline_sha).all(), "p = 0 returns the input unchanged"
assert (paper.loc[(paper["p"] > 0) & (paper["condition"] != "Baseline"), "sha256"] != baseline_sha).all()
assert set(gallery["preset"]) == {p["name"] for p in spec["presets"]}
book.glue_values("pt", noise.values, runs=runs)
book.glue_values("pt", {"gallery.image_id": image_id, "gallery.target": target, "gallery.n_images": len(gallery),
                        "seed": int(spec["seed"])}, runs=runs)

# %% [markdown]
# ## Box sets per class
#
# For each image and each class c with a box, B_c holds the boxes of c and B_c̄ the boxes of other
# findings whose IoU with every box of c is below {glue:text}`pt.boxes.iou_threshold`. DOCO can only
# be run on items with a non-empty B_c̄: on the demo box set it keeps
# {glue:text}`pt.boxes.n_doco_items:d` of {glue:text}`pt.boxes.n_items:d` (image, class) items,
# because most NIH images carry a single box.

# %% tags=["nbval-check-output"]
box_sets = tables.box_set_counts(trials).with_runs(runs)
book.show(box_sets, runs=runs, name="pt-box-sets")

# %%
counts = box_sets.frame
body = counts.drop("total")
assert (body["DOCO items"] + body["DOCO dropped"] == body["images"]).all()
assert (counts.loc["total"] == body.sum()).all()
assert box_sets.values["boxes.n_doco_dropped"] == run.manifest["counts"]["n_doco_dropped"]
book.glue_values("pt", box_sets.values, runs=runs)
book.glue("pt.boxes.iou_threshold", float(spec["iou_threshold"]), runs=runs)
from shovir_core.perturb import resolve_preset
book.glue_values("pt.ref", {k: float(getattr(resolve_preset("reference-code"), k))
                            for k in ("smooth_radius", "feather_radius")}, runs=runs)

# %% [markdown]
# ## Image-swap substitutes
#
# Each frontal image of the multi-study set is a source case. Its substitute is drawn
# uniformly from (1) the same patient's other frontal studies with a different positive label set,
# else (2) any other study of the patient, else (3) another patient's frontal image with a different
# positive set; a substitute whose SSIM with the source (greyscale, {glue:text}`pt.swap.ssim_size:d`
# × {glue:text}`pt.swap.ssim_size:d`) exceeds {glue:text}`pt.swap.ssim_threshold` is rejected.
# Of {glue:text}`pt.swap.n_cases:d` cases, {glue:text}`pt.swap.tier1:d` were paired in tier 1,
# {glue:text}`pt.swap.tier2:d` in tier 2 and {glue:text}`pt.swap.tier3:d` across patients;
# {glue:text}`pt.swap.n_rejected:d` candidates were rejected by the SSIM rule.

# %% tags=["nbval-check-output"]
tiers = tables.tier_counts(trials).with_runs(runs)
cohort = run.manifest["dataset"]["cohort"]
book.show(tiers, runs=runs, name="pt-tiers",
          caption=f"Image-swap substitutes by tier, with the SSIM quartiles of each tier's pairs, on the cohort "
                  f"{cohort['name']} (the 64-px multi-study set): {tiers.values['swap.n_cases']:,} source cases from "
                  f"{cohort['n_images']:,} images of {cohort['n_patients']:,} patients.")

# %%
subs = trials[trials["kind"] == "substitute"]
assert int(tiers.frame["cases"].sum()) == len(subs) == run.manifest["counts"]["n_cases"] == tiers.values["swap.n_cases"]
assert (subs["ssim"].dropna() <= spec["ssim_threshold"]).all()
tier1 = subs[subs["tier"] == 1]
assert (tier1["sub_patient_id"] == tier1["patient_id"]).all() and (tier1["sub_positive"] != tier1["positive"]).all()
book.glue_values("pt", tiers.values, runs=runs)
book.glue_paper("pt.paper.image_px", "setup.image_px")
book.glue_values("pt", {"swap.ssim_size": int(spec["ssim_size"]), "swap.ssim_threshold": float(spec["ssim_threshold"])},
                 runs=runs)

# %% [markdown]
# {numref}`fig-pt-ssim` shows the SSIM of every pair by tier.
# SSIM quartiles of the pairs: {glue:text}`pt.swap.ssim.q1:.3f`, {glue:text}`pt.swap.ssim.median:.3f`,
# {glue:text}`pt.swap.ssim.q3:.3f` (maximum {glue:text}`pt.swap.ssim.max:.3f`). The demo profile computes
# SSIM at the demo images' native size instead of upsampling to the paper's
# {glue:text}`pt.paper.image_px:d` pixels a side (which only smooths the images and raises SSIM); the rule,
# not the level, is what this chapter checks. The `mimic` profile uses the paper's size.

# %%
fig, ax = plt.subplots(figsize=figures.column_figsize(3.8))
plot_df = subs.assign(tier=subs["tier"].astype(int).map({1: "1: same patient, labels differ",
                                                          2: "2: same patient, any study",
                                                          3: "3: other patient"}))
sns.histplot(plot_df, x="ssim", hue="tier", hue_order=sorted(plot_df["tier"].unique()), bins=30, multiple="stack",
             ax=ax)
ax.axvline(spec["ssim_threshold"], color="black", ls="--", lw=1, label="rejection threshold")
ax.set_title(f"SSIM between source and substitute ({spec['ssim_size']}² greyscale)")
ax.set_xlabel("SSIM")
ax.set_ylabel("cases")
ax.set_xlim(0, 1)
fig.tight_layout()
book.show(fig, runs=runs, name="pt-ssim",
          caption="SSIM between each source image and its substitute, stacked by substitute tier; the dashed "
                  "line is the rejection threshold.",
          alt="Stacked histogram of SSIM values between 0 and 1 for three substitute tiers, with a vertical "
              "dashed threshold line.")

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

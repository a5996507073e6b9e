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
# # Rehearsal of the papers' settings
#
# Before anyone spends GPU-days on `shovir book --profile mimic`, every chapter of the credentialed
# profiles can run end to end at the papers' scale on a CPU: `shovir rehearse --profile mimic|padchest`
# writes a synthetic tree in the exact layouts the MIMIC-CXR-JPG, Chest ImaGenome and PadChest-GR
# adapters read, points the profile at it, replaces every real model by a CPU stand-in of the same
# interface (reference models; tiny transformers where a chapter reads layers; a tiny random CheXbert),
# and runs each chapter -- records, notebook and the credentialed-data guard -- in its own process,
# measuring its wall time and peak memory. **The cohort sizes are planted**: the generator draws labels
# and boxes so that the papers' funnels come out at their stated sizes at full scale
# ({glue:text}`rh.planted.ml_cases:,` ModaLens cases from {glue:}`rh.planted.ml_patients` patients;
# {glue:text}`rh.planted.sv_mimic_images:,` MIMIC and {glue:text}`rh.planted.sv_padchest_images:,`
# PadChest-GR ShoViR images). A rehearsal proves the pipeline and the
# designs, not the funnels and not any model's behaviour; every page it executes carries a banner, its
# records name their stand-ins, and its paper-vs-run verdicts read "rehearsal".

# %% tags=["parameters"]
profile = "demo"
run_ids = None

# %%
from shovir_core import book
from shovir_core.tables import rehearsal

runs = book.load_runs("rehearsal", profile=profile, run_ids=run_ids)
chapters = rehearsal.rehearsal_chapters(runs)
records = rehearsal.rehearsal_records(runs)

# %%
frame = chapters.frame
assert frame["chapter"].notna().all() and len(frame)
assert (frame.loc[frame["status"] == "ran to the end", "trials"] > 0).all(), "a chapter that ran made trials"
assert (frame["paper_trials"].dropna() > 0).all()
book.glue_values("rh", {**chapters.values, **records.values}, runs=runs)

# %% [markdown]
# {glue:}`rh.n_ok` of {glue:}`rh.n_chapters` rehearsed chapters ran to the end (failed:
# {glue:text}`rh.failed_chapters`), in {glue:text}`rh.seconds_total:,.0f` s of wall time in all; the largest
# peak memory of a single chapter was {glue:text}`rh.max_peak_mb:,.0f` MB. The rehearsals made
# {glue:}`rh.n_records` records (below). A chapter's trials stand beside the paper's count for the same
# item scaled by the rehearsal's scale: a ratio of 1 means the chapter's design makes as many trials
# per case as the paper states; another ratio names a difference to explain (a design that differs, or
# records that count trials per image and condition where the catalogue counts per model).

# %% [markdown] tags=["profile:demo"]
# On the demo this page shows a *reduced* rehearsal (scale {glue:}`rh.padchest.scale` of PadChest-GR and
# {glue:}`rh.mimic.scale` of MIMIC-CXR, a chapter each), the same code path that `make test` runs;
# the full-scale rehearsals are this chapter's `mimic` and `padchest` profiles.
# At this scale the ratios are not 1, and they do not measure a design difference: the reduced
# PadChest-GR tree keeps every class at the papers' class minimum (so it holds more images than its
# scale), and a chapter's trials are the sum over all its records (every model, arm and condition),
# set beside a single catalogue item. Per-record denominators are not derived yet.

# %%
what = "data: synthetic trees in the credentialed layouts (planted sizes); models: CPU stand-ins of the paper's models"
book.show(chapters, runs=runs, name="rh-chapters", what=what)

# %%
book.show(records, runs=runs, name="rh-records", what=what)

# %% [markdown]
# To rehearse a profile yourself, and then run it for real:
#
# ```bash
# shovir rehearse --profile mimic              # every chapter at the papers' scale, CPU stand-ins
# shovir rehearse --profile padchest --only shovir_table1 shovir_figures
# shovir book --profile mimic                  # the real run: your data, real weights, a GPU
# ```

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs, what=what)

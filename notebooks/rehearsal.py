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
# PadChest-GR ShoViR images), and App. F's prespecified findings at the paper's published source
# yes-rates, every other finding below its selection rule, so that the rule selects the paper's questions at
# every scale (`shovir_core.rehearsal.synthetic.planted_yes_rates`). A rehearsal proves the pipeline and the
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
assert records.frame["verdict"].notna().all() and (records.frame["paper_trials"].dropna() > 0).all()
book.glue_values("rh", {**chapters.values, **records.values}, runs=runs)

# %% [markdown]
# {glue:}`rh.n_ok` of {glue:}`rh.n_chapters` rehearsed chapters ran to the end (failed:
# {glue:text}`rh.failed_chapters`), in {glue:text}`rh.seconds_total:,.0f` s of wall time in all; the largest
# peak memory of a single chapter was {glue:text}`rh.max_peak_mb:,.0f` MB. Their records asked the stand-ins
# {glue:text}`rh.model_calls_total:,` distinct model requests (the records' inference-cache entries, which the
# real models would answer the same way; {glue:}`rh.n_chapters_without_calls` chapters made records that keep
# no request cache). GPU time: {glue:text}`rh.gpu_note`.
#
# The rehearsals made {glue:}`rh.n_records` records (second table). Each record's trials stand beside the
# paper's stated denominator for such a record -- an expression over the papers' published values (the
# registry `shovir_core/resources/denominators.yaml`), evaluated at the rehearsal's planted sizes, so that a
# reduced rehearsal is held to the same design: {glue:}`rh.n_equal` records are equal to it,
# {glue:}`rh.n_differs` differ for the reason the table names (a record that keeps more rows than the
# paper counts, or a size the rehearsal does not plant), {glue:}`rh.n_no_count` have no stated count in
# the papers (the reason says why), and {glue:}`rh.n_unexplained` differ without an explanation
# ({glue:text}`rh.unexplained`): a design that does not run the paper's count.

# %% [markdown] tags=["profile:demo"]
# On the demo this page shows a *reduced* rehearsal (scale {glue:}`rh.padchest.scale` of PadChest-GR and
# {glue:}`rh.mimic.scale` of MIMIC-CXR, a chapter each), the same code path that `make test` runs;
# the full-scale rehearsals are this chapter's `mimic` and `padchest` profiles. The denominators are
# evaluated at the reduced tree's planted sizes (the reduced PadChest-GR tree keeps every class at the
# papers' class minimum, so it holds more images than its scale), so equal still means the paper's design.

# %%
what = rehearsal.rehearsal_what(runs)
book.show(chapters, runs=runs, name="rh-chapters", what=what,
          missing={"model_calls": "not cached", "new_calls": "not cached"})

# %%
book.show(records, runs=runs, name="rh-records", what=what, groups="chapter", formats={"difference": "+,.0f"},
          missing={"paper_trials_scaled": "none stated", "paper_trials": "none stated", "difference": "none",
                   "compared_trials": "none", "model_calls": "not cached"})

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

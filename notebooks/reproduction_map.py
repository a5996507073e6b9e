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
# # Reproduction map
#
# What it takes to reproduce each table, figure and appendix of both papers at the papers' scale.
# Each row names the chapter and params files that reproduce the item, the demo records this book
# read for it, the number of trials at the paper's scale (from the papers' published counts times
# the design's arms, sides and conditions), the time per trial measured on this machine for the
# tiny and reference models (each record's writer time over its trials), the projected GPU-hours on
# a single GPU, and the command that runs it as a SLURM job array. The projection multiplies the trials
# by the GPU time per trial of a benchmark output (`benchmarks/generation.py` for ShoViR's reports,
# `benchmarks/inference.py` for ModaLens' yes/no readouts, run on a GPU with `--json` into
# `benchmarks/results/`), scaled linearly from the benchmark model's parameter count to the paper
# model's. Where no such output exists the cell is empty and the page says so: nothing here is typed.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
shards = None

# %%
from shovir_core import book
from shovir_core.tables import reproduction

runs = reproduction.chapter_runs(profile=profile)
result = reproduction.reproduction_table(runs, shards=shards)
table = result.frame

# %%
assert table[["paper", "item"]].apply(tuple, axis=1).is_unique
assert set(table["paper"]) == {"shovir", "modalens"}
assert {"Table 1", "Figure 2"} <= set(table.loc[table["paper"] == "shovir", "item"])
assert {f"Table {k}" for k in range(1, 6)} <= set(table.loc[table["paper"] == "modalens", "item"])
model_items = table[table["work"] != "none"]
assert (model_items["paper_trials"].dropna() > 0).all()
assert (table.loc[table["work"] == "none", "gpu_hours"] == 0).all()
assert (table.loc[table["command"] != "", "command"].str.contains("--executor slurm")).all()
book.glue_values("repro", result.values, runs=runs, source="shovir_core/resources/reproduction.yaml")

# %% [markdown]
# ## What this build shows, item by item
#
# Of the {glue:}`repro.status.n_items` tables, figures and sections of both papers in the catalogue,
# {glue:}`repro.status.n_built` have a chapter in this book: {glue:}`repro.status.n_built_demo` run on
# the demo and need nothing more, {glue:}`repro.status.n_needs_credentialed_gpu` need the credentialed
# data and a GPU at the paper's scale, {glue:}`repro.status.n_needs_credentialed_data` need the
# credentialed data but no model, and {glue:}`repro.status.n_rehearsed` have been rehearsed at the
# paper's scale; {glue:}`repro.status.n_not_built` are not built.

# %%
status = reproduction.status_table()
book.glue_values("repro.status", status.values, runs=runs, source="shovir_core/resources/reproduction.yaml")
book.show(status, runs=runs, name="repro-status", what="data: the catalogue shovir_core/resources/reproduction.yaml, no model")

# %% [markdown]
# ## What reproducing each item takes
#
# The map lists {glue:}`repro.n_items` items ({glue:}`repro.n_items_shovir` of ShoViR,
# {glue:}`repro.n_items_modalens` of ModaLens); {glue:}`repro.n_with_notebook` have a chapter in this
# book and {glue:}`repro.n_with_command` a paper-scale command. The {glue:}`repro.n_model_items` items
# that call a model need {glue:text}`repro.paper_trials_total:,` trials at the papers' scale (lower bounds
# where the paper does not give the grid, as the notes say). On this machine a ShoViR trial of the
# tiny transformer took {glue:}`repro.shovir.s_per_trial_tiny_cpu` s and a ModaLens trial
# {glue:}`repro.modalens.s_per_trial_tiny_cpu` s (median over chapters; "not measured" where no record
# of a tiny model carries its writer time). GPU benchmark outputs found: {glue:}`repro.n_gpu_benchmarks`;
# without one the GPU-hours column stays empty. Make them on a GPU with a single script (a random-initialised
# Gemma3 of MedGemma-4B's dimensions, no weights needed):
#
# ```bash
# bash benchmarks/gpu.sh    # generation.py and inference.py (with and without generated answers) -> benchmarks/results/
# ```
#
# and rebuild this page. Every command below splits each record into
# {glue:}`repro.shards` shards (all questions of a case, and all conditions and p of an image, stay in
# the same shard); the last shard to finish completes the record, and `shovir jobs status NOTEBOOK
# --profile PROFILE` shows each shard's progress.

# %%
book.show(result, runs=runs)

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

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
# # Claims index and glossary
#
# Each claim of both papers' abstracts and of each results section's summary, the chapter of this
# book that covers it, and how strong the check behind it is:
#
# - **paper arithmetic recomputed**: the paper's own numbers recomputed from their stated components
#   (the audit chapters); a flagged check is a finding about the paper;
# - **planted behaviour recovered**: a demo reference model has the behaviour by construction, and the
#   chapter asserts that the benchmark's metric recovers it -- a test of the benchmark, not of the
#   paper's models;
# - **shown for scale only**: the paper's value is printed beside a demo run of another model on other
#   data; nothing is judged;
# - **not checked in this build**: the chapter says why (credentialed data, no image labels).
#
# What this build shows of every table and figure is the first table of the {doc}`reproduction_map`.

# %% tags=["parameters"]
profile = "demo"
run_ids = None

# %%
from shovir_core import book
from shovir_core.tables import claims

SOURCE = "shovir_core/resources/claims.yaml"
index = claims.claims_table()
assert index.values["n_claims"] == sum(v for k, v in index.values.items() if k != "n_claims")
book.glue_values("claims", index.values, runs=[], source=SOURCE)

# %% [markdown]
# Of the {glue:}`claims.n_claims` claims, {glue:}`claims.n_arithmetic` rest on recomputed paper
# arithmetic, {glue:}`claims.n_planted` on planted behaviour the demo recovers,
# {glue:}`claims.n_scale` are shown for scale only and {glue:}`claims.n_none` are not checked here.

# %%
book.show(index, runs=[], name="claims-index", what="data: " + SOURCE + ", no run")

# %% [markdown]
# ## Glossary
#
# The models this repository registers: the papers' models (run by the `mimic` and `padchest`
# profiles), the demo's reference models and the tiny random-weight transformers.

# %%
models = claims.models_table()
book.show(models, runs=[], name="glossary-models", what="data: the model registry shovir_core.models.registry, no run")

# %%
book.show(claims.abbreviations_table(), runs=[], name="glossary-abbreviations", what="data: " + SOURCE + ", no run")

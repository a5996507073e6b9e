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
# # Audit: ShoViR's published numbers
#
# Before reproducing a paper, check that its numbers agree with each other. Every number of
# ShoViR that can be derived from other printed numbers is recomputed here: the cohort counts
# of §3.1, the {glue:}`audit.shovir.kind.delta_column.checks` Δ_FN cells of Table 1 (Baseline − Full Noise Image), the ranges and orderings
# stated for Figure 3(a), and the claims of §4.1 and §4.3 against the paper's own Table 1 and
# figure values. A recomputation from rounded inputs is a range; a check passes when the printed
# value is within ±1 in its last digit of that range (half a digit for bounds and for rates that
# must be a rounded k/n). A flagged check is a discrepancy of the paper, documented in its note,
# not an error of the audit. The published values are data shipped with the package
# (`shovir_core/papers/data`); the audit ran as a protocol and this page reads its record.

# %% tags=["parameters"]
profile = "demo"
run_ids = None

# %%
from shovir_core import book
from shovir_core.book import figures
from shovir_core.tables import audit as tables

runs = book.load_runs("audit_shovir", profile=profile, run_ids=run_ids)
audit = tables.audit_chapter(runs, paper="shovir")

# %% [markdown]
# ## Summary

# %% tags=["nbval-check-output"]
book.show(audit.summary, runs=runs, name="audit-sv-summary",
          caption="ShoViR: consistency checks of the published numbers, passed and flagged, by kind.")

# %%
assert not audit.problems, audit.problems
book.glue_values("audit", audit.summary.values, runs=runs)

# %% [markdown]
# Of {glue:}`audit.shovir.n_checks` checks over {glue:}`audit.shovir.n_values` published values,
# {glue:}`audit.shovir.n_passed` pass and {glue:}`audit.shovir.n_flagged` are flagged. The Δ_FN
# cells of Table 1 were recomputed as Baseline − Full Noise Image
# ({glue:}`audit.shovir.kind.delta_column.checks` checks,
# {glue:}`audit.shovir.kind.delta_column.flagged` flagged), and the claims of the text against
# the table and figure values they describe ({glue:}`audit.shovir.kind.text_claim.checks` checks,
# {glue:}`audit.shovir.kind.text_claim.flagged` flagged); {numref}`fig-audit-sv-status` counts
# the checks by kind. The flagged checks are listed next, each with the paper's value, the
# recomputation and why it disagrees; {numref}`tbl-audit-sv-every` then holds every check.

# %%
fig = figures.audit_status_bars(audit.summary.frame, title="ShoViR: consistency checks by kind")
book.show(fig, runs=runs, name="audit-sv-status",
          caption="ShoViR's consistency checks by kind: passed and flagged.",
          alt="Stacked horizontal bars of passed and flagged checks for each kind of check.")

# %% [markdown]
# ## Flagged checks

# %% tags=["nbval-check-output"]
book.show(audit.flagged, runs=runs, name="audit-sv-flagged",
          caption="ShoViR: the flagged checks, each with the stated value, its recomputation, the tolerance and "
                  "why it disagrees.")

# %% [markdown]
# ## Every check
#
# Status, location in the paper, the stated value, the recomputation (at the printed inputs)
# and the tolerance applied; the formula behind each check is in the record (`formula`,
# `inputs`) and in `shovir_core/papers/data/shovir_checks.yaml`.

# %%
book.show(audit.every, runs=runs, name="audit-sv-every",
          caption="Every consistency check of ShoViR's published numbers, one table per kind of check (kinds "
                  "with flagged checks first; open a kind to read its checks).",
          groups="kind", collapsed=True)

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

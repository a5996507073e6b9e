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
# # Audit: ModaLens's published numbers
#
# Before reproducing a paper, check that its numbers agree with each other. Every number of
# ModaLens that can be derived from other printed numbers is recomputed here: rates from their
# counts (Table 4's accuracies, the transition counts of Appendix G), paired differences and
# ratios (Tables 2, 3, 14, 15), the 2×2 modality interactions (§4.2, Table 15), sums of
# denominators (designs, label policies, the surrogate's split), Cohen's κ from agreement,
# sensitivity and precision (Appendix E), balanced accuracy from answer counts (Appendix F),
# rates that must be a rounded k/n over a known denominator, values the paper prints twice,
# claims of the text against the paper's own numbers, and every 95% interval against its
# estimate. A recomputation from rounded inputs is a range; a check passes when the printed
# value is within ±1 in its last digit of that range (half a digit for bounds and for k/n
# rates). A flagged check is a discrepancy of the paper, documented in its note, not an error
# of the audit. The published values are data shipped with the package
# (`shovir_core/papers/data`); the audit ran as a protocol and this page reads its record.

# %% tags=["parameters"]
profile = "demo"
run_ids = None

# %%
from shovir_core import book
from shovir_core.book import figures
from shovir_core.tables import audit as tables

runs = book.load_runs("audit_modalens", profile=profile, run_ids=run_ids)
audit = tables.audit_chapter(runs, paper="modalens")

# %% [markdown]
# ## Summary

# %% tags=["nbval-check-output"]
book.show(audit.summary, runs=runs, name="audit-ml-summary",
          caption="ModaLens: consistency checks of the published numbers, passed and flagged, by kind.")

# %%
assert not audit.problems, audit.problems
book.glue_values("audit", audit.summary.values, runs=runs)

# %% [markdown]
# Of {glue:}`audit.modalens.n_checks` checks over {glue:}`audit.modalens.n_values` published
# values, {glue:}`audit.modalens.n_passed` pass and {glue:}`audit.modalens.n_flagged` are flagged.
# Rates printed over a known denominator were tested for being a rounded whole count k/n
# ({glue:}`audit.modalens.kind.implied_count.checks` checks,
# {glue:}`audit.modalens.kind.implied_count.flagged` flagged), and printed intervals for
# containing their estimates ({glue:}`audit.modalens.kind.ci_contains.checks` checks,
# {glue:}`audit.modalens.kind.ci_contains.flagged` flagged); {numref}`fig-audit-ml-status` counts
# the checks by kind. The flagged checks are listed next, each with the paper's value, the
# recomputation and why it disagrees; {numref}`tbl-audit-ml-every` then holds every check.

# %%
fig = figures.audit_status_bars(audit.summary.frame, title="ModaLens: consistency checks by kind")
book.show(fig, runs=runs, name="audit-ml-status",
          caption="ModaLens's consistency checks by kind: passed and flagged.",
          alt="Stacked horizontal bars of passed and flagged checks for each kind of check.")

# %% [markdown]
# ## Flagged checks

# %% tags=["nbval-check-output"]
book.show(audit.flagged, runs=runs, name="audit-ml-flagged",
          caption="ModaLens: the flagged checks, each with the stated value, its recomputation, the tolerance and "
                  "why it disagrees.")

# %% [markdown]
# ## Every check
#
# Status, location in the paper, the stated value, the recomputation (at the printed inputs)
# and the tolerance applied; the formula behind each check is in the record (`formula`,
# `inputs`) and in `shovir_core/papers/data/modalens_checks.yaml`.

# %%
book.show(audit.every, runs=runs, name="audit-ml-every",
          caption="Every consistency check of ModaLens's published numbers, one table per kind of check (kinds "
                  "with flagged checks first; open a kind to read its checks).",
          groups="kind", collapsed=True)

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

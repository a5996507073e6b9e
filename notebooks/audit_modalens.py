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
import pandas as pd

from shovir_core import book, papers
from shovir_core.book import figures

runs = book.load_runs("audit_modalens", profile=profile, run_ids=run_ids)
checks = runs["audit"].trials
counts = runs["audit"].manifest["counts"]

# %% [markdown]
# ## Summary

# %% tags=["nbval-check-output"]
summary = papers.audit_summary(checks)
book.show(summary, runs=runs)

# %%
assert set(checks["status"]) <= {"passed", "flagged"}
assert summary.loc["total", "checks"] == counts["n_checks"] == len(checks)
assert summary.loc["total", "flagged"] == counts["n_flagged"]
assert checks["check_id"].is_unique
assert (checks.loc[checks["status"] == "flagged", "note"].str.len() > 0).all(), "every flagged check is documented"
for key, value in papers.audit_glue_values(checks, counts, paper="modalens").items():
    book.glue(key, value, runs=runs)

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
fig = figures.audit_status_bars(summary, title="ModaLens: consistency checks by kind")
book.show(fig, runs=runs, name="audit-ml-status",
          caption="ModaLens's consistency checks by kind: passed and flagged.",
          alt="Stacked horizontal bars of passed and flagged checks for each kind of check.")

# %% [markdown]
# ## Flagged checks

# %% tags=["nbval-check-output"]
flagged = papers.audit_table(checks, status="flagged")
book.show(flagged, runs=runs)

# %% [markdown]
# ## Every check
#
# Status, location in the paper, the stated value, the recomputation (at the printed inputs)
# and the tolerance applied; the formula behind each check is in the record (`formula`,
# `inputs`) and in `shovir_core/papers/data/modalens_checks.yaml`.

# %%
book.show(papers.audit_table(checks).sort_values("kind", kind="stable"), runs=runs, name="audit-ml-every",
          caption="Every consistency check of ModaLens's published numbers, one table per kind of check (open a "
                  "kind to read its checks; flagged checks first within each).",
          groups="kind", collapsed=True)

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)

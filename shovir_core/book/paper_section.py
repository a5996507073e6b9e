"""A chapter's "paper vs this run" section: the published values beside the run's, and the audit's checks.

Every ModaLens appendix chapter ends the same way: the paper's values (MedGemma-27B on MIMIC-CXR)
beside the run's with a verdict that says what the comparison can mean
(:func:`shovir_core.tables.paper_vs_run.paper_vs_run`), the audit's consistency checks of that
appendix's published numbers, and, in a profile that runs the paper's setting, the assertion that
the appendix's headline values fall inside the paper's intervals. :func:`paper_section` is that
section as one call, so the chapters cannot drift apart.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..tables.result import TableResult
from .captions import PAPER_ONLY
from .glue import glue, glue_values, show

__all__ = ["paper_section", "empty_comparison_sentence"]


def empty_comparison_sentence(keys: Mapping[str, str]) -> str:
    """The sentence a chapter shows instead of an empty paper-vs-run table."""
    if not keys:
        return "This section maps no value of the run to a value printed in the paper, so there is no comparison table."
    return (f"None of the {len(keys)} quantities this section could set beside the paper's printed values has a "
            "value in this run (the profile does not run the arms they come from), so there is no comparison table.")


def paper_section(namespace: str, values: Mapping, keys: Mapping[str, str], *, reproduces_paper: bool, runs,
                  name: str, audit_prefixes: Iterable[str] = (), must_hold: Iterable[str] = (),
                  optional: Iterable[str] = (), show_missing: bool = False) -> tuple[TableResult, TableResult | None]:
    """Show the paper-vs-run table (and the audit rows), glue their values, assert the paper's setting.

    Parameters
    ----------
    namespace : str
        The chapter's glue namespace (``"ml.d"``): the paper's values are glued as
        ``<namespace>.paper.<key>`` (with ``_lo`` / ``_hi`` and ``verdict.<key>``), the audit counts
        as ``<namespace>.audit.n_checks`` / ``.n_flagged``.
    values : mapping
        The run values the chapter computed (union of its tables' ``values``).
    keys : mapping
        Run value key -> published value id (the chapter module's ``PAPER_KEYS``).
    reproduces_paper : bool
        Whether the profile runs the paper's model on the paper's data; only then are verdicts
        judged and ``must_hold`` asserted.
    name : str
        Table name (``tbl-<name>`` for ``{numref}``; its CSV).
    audit_prefixes : iterable of str
        ModaLens audit check ids of this appendix (:func:`shovir_core.tables.audit.audit_rows`);
        none: no audit table.
    must_hold : iterable of str
        Run keys that must lie inside the paper's interval when ``reproduces_paper``.
    optional, show_missing
        Key prefixes that may lack a run value, and whether such rows are shown as "not run"
        rather than left out (:func:`shovir_core.tables.paper_vs_run.beside`).

    Returns
    -------
    (TableResult, TableResult or None)
        The paper-vs-run table and the audit table.
    """
    from ..tables import paper_vs_run as pvr

    side = pvr.beside(values, keys, same_setting=reproduces_paper, runs=runs, optional=tuple(optional),
                      show_missing=show_missing)
    if side.frame.empty:  # a header without rows says nothing: say why there is no table instead
        from IPython.display import Markdown, display

        display(Markdown(empty_comparison_sentence(keys)))
    else:
        show(side, runs=runs, name=name, groups="section", intervals={"paper": ("paper_lo", "paper_hi")},
             missing={"run": "not run"})
    glue_values(f"{namespace}.paper", side.values, runs=runs)
    if reproduces_paper:
        failed = pvr.not_held(side, must_hold)
        if failed:
            raise AssertionError(f"{namespace}: in the paper's setting these values fall outside the paper's "
                                 f"intervals: {failed}")
    audit = None
    prefixes = tuple(audit_prefixes)
    if prefixes:
        from ..tables.audit import audit_rows

        audit = audit_rows(prefixes).with_runs(runs)
        show(audit, runs=runs, name=f"{name}-audit", what=PAPER_ONLY)
        status = audit.frame["status"]
        glue(f"{namespace}.audit.n_checks", int(len(status)), runs=runs)
        glue(f"{namespace}.audit.n_flagged", int((status == "flagged").sum()), runs=runs)
    return side, audit

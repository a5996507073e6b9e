"""The audit chapters' tables, from the rows of an ``audit`` record (one row per check).

The checks themselves -- recomputing each derivable published number and comparing within
rounding tolerance -- are :func:`shovir_core.papers.audit`. Every function returns a
:class:`~shovir_core.tables.result.TableResult` whose ``values`` are glue keys without the
``audit.`` namespace (``shovir.n_checks``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from .result import TableResult

__all__ = ["DISPLAY_COLUMNS", "TRIVIAL_KINDS", "CONSISTENCY", "CONTAINMENT", "audit_summary", "audit_table",
           "AuditChapter", "audit_chapter", "audit_rows"]

TRIVIAL_KINDS = ("ci_contains", "implied_count")
"""Kinds of check that can only catch a typo: a printed interval contains its estimate, a printed rate
is a rounded whole count over its denominator. They are counted apart from the consistency checks
(a number recomputed from other published numbers), which can catch an error of analysis (issue 30)."""
CONSISTENCY = "consistency"
CONTAINMENT = "containment / rounding"

DISPLAY_COLUMNS = ["status", "location", "kind", "description", "stated", "recomputed", "tolerance", "note"]
"""Columns of :func:`audit_table`."""


def _ids(checks: pd.DataFrame) -> pd.DataFrame:
    return checks.rename(columns={"check_id": "id"}) if "check_id" in checks.columns else checks


def audit_summary(checks: pd.DataFrame, *, paper: str | None = None, counts: Mapping | None = None) -> TableResult:
    """Checks passed and flagged per kind (rows, index ``kind``) plus a ``total`` row.

    ``checks``: rows of :func:`shovir_core.papers.audit` (or an audit record's trials). With
    ``paper`` the ``values`` hold the chapter's glue keys ``<paper>.*``: totals (``n_checks``,
    ``n_passed``, ``n_flagged`` and, from the record's ``counts``, ``n_values``), the consistency
    and the containment / rounding checks apart (``n_consistency``, ``n_trivial`` and their
    ``_flagged``; :data:`TRIVIAL_KINDS`), counts per kind
    (``kind.<kind>.{checks,passed,flagged}``) and, per flagged check, the stated and recomputed
    values (``flagged.<id>.{stated,recomputed}``).
    """
    missing = {"kind", "status"} - set(checks.columns)
    if missing:
        raise ValueError(f"audit_summary: columns {sorted(missing)} missing")
    table = (pd.crosstab(checks["kind"], checks["status"])
             .reindex(columns=["passed", "flagged"], fill_value=0))
    weak = [k for k in table.index if k in TRIVIAL_KINDS]
    table = table.loc[[k for k in table.index if k not in TRIVIAL_KINDS] + weak]  # consistency checks first
    table.loc["total"] = table.sum()
    table["checks"] = table["passed"] + table["flagged"]
    table.columns.name = None
    table = table.astype(int)
    table.insert(0, "check", [CONTAINMENT if k in TRIVIAL_KINDS else "" if k == "total" else CONSISTENCY
                              for k in table.index])
    values = {}
    if paper is not None:
        values = {f"{paper}.n_checks": int(table.loc["total", "checks"]),
                  f"{paper}.n_passed": int(table.loc["total", "passed"]),
                  f"{paper}.n_flagged": int(table.loc["total", "flagged"])}
        if counts is not None:
            values[f"{paper}.n_values"] = int(counts["n_values"])
        trivial = checks["kind"].isin(TRIVIAL_KINDS).to_numpy()
        flagged = (checks["status"] == "flagged").to_numpy()
        values.update({f"{paper}.n_consistency": int((~trivial).sum()),
                       f"{paper}.n_consistency_flagged": int((~trivial & flagged).sum()),
                       f"{paper}.n_trivial": int(trivial.sum()),
                       f"{paper}.n_trivial_flagged": int((trivial & flagged).sum())})
        for kind, row in table.drop(index="total").iterrows():
            for column in ("checks", "passed", "flagged"):
                values[f"{paper}.kind.{kind}.{column}"] = int(row[column])
        for _, row in _ids(checks)[checks["status"].to_numpy() == "flagged"].iterrows():
            key = str(row["id"]).removeprefix(f"{paper}.")
            values[f"{paper}.flagged.{key}.stated"] = row["stated"]
            values[f"{paper}.flagged.{key}.recomputed"] = row["recomputed"]
    return TableResult(table, values, metrics={c: "count" for c in ("passed", "flagged", "checks")},
                       labels={c: c for c in ("passed", "flagged", "checks")},
                       caption="Checks passed and flagged, by kind: consistency checks (a published number "
                               "recomputed from others) first, then containment and rounding checks (an interval "
                               "contains its estimate; a rate is a rounded k/n), counted apart: they catch only typos.")


def audit_table(checks: pd.DataFrame, *, status: str | None = None) -> TableResult:
    """The audit for reading: flagged checks first, then by location; indexed by check id.

    Parameters
    ----------
    checks : DataFrame
        Rows of :func:`shovir_core.papers.audit` (or a record's trials, whose ``check_id`` column is used).
    status : {"passed", "flagged"}, optional
        Keep only these checks.
    """
    df = _ids(checks)
    missing = set(DISPLAY_COLUMNS) - set(df.columns)
    if missing:
        raise ValueError(f"audit_table: columns {sorted(missing)} missing")
    if status is not None:
        if status not in ("passed", "flagged"):
            raise ValueError(f"audit_table: status must be 'passed' or 'flagged', got {status!r}")
        df = df[df["status"] == status]
    order = df.assign(_flag=df["status"].ne("flagged")).sort_values(["_flag", "location", "id"], kind="stable")
    frame = order.set_index("id")[DISPLAY_COLUMNS]
    return TableResult(frame, metrics={"tolerance": "value"}, labels={"id": "check", "tolerance": "tolerance"},
                       caption=("Flagged checks" if status == "flagged" else "Consistency checks")
                       + ": the stated value, its recomputation and the tolerance applied.")


@dataclass(frozen=True)
class AuditChapter:
    """What an audit chapter shows (``audit_shovir``, ``audit_modalens``: one shape for both papers)."""

    summary: TableResult
    """:func:`audit_summary` with the chapter's glue values."""
    flagged: TableResult
    """:func:`audit_table` of the flagged checks."""
    every: TableResult
    """:func:`audit_table` of every check."""
    problems: tuple[str, ...]
    """The record's invariants that fail (empty on a sound record): statuses other than passed and
    flagged, counts that disagree with the manifest, duplicate check ids, a flagged check without a note."""


def audit_chapter(runs: Mapping, *, paper: str, key: str = "audit") -> AuditChapter:
    """The tables and checks of one paper's audit chapter from its ``audit`` record ``runs[key]``."""
    run = runs[key]
    checks, counts = run.trials, run.manifest["counts"]
    summary = audit_summary(checks, paper=paper, counts=counts).with_runs(runs)
    total = summary.frame.loc["total"]
    problems = []
    if not set(checks["status"]) <= {"passed", "flagged"}:
        problems.append(f"statuses other than passed and flagged: {sorted(set(checks['status']) - {'passed', 'flagged'})}")
    if not total["checks"] == counts["n_checks"] == len(checks):
        problems.append(f"{total['checks']} checks in the summary, {counts['n_checks']} in the manifest, {len(checks)} rows")
    if total["flagged"] != counts["n_flagged"]:
        problems.append(f"{total['flagged']} flagged in the summary, {counts['n_flagged']} in the manifest")
    if not checks["check_id"].is_unique:
        problems.append("duplicate check ids")
    undocumented = checks.loc[(checks["status"] == "flagged") & ~(checks["note"].str.len() > 0), "check_id"]
    if len(undocumented):
        problems.append(f"flagged checks without a note: {undocumented.tolist()[:5]}")
    return AuditChapter(summary=summary, flagged=audit_table(checks, status="flagged").with_runs(runs),
                        every=audit_table(checks).with_runs(runs), problems=tuple(problems))


def audit_rows(prefixes: Iterable[str], *, ids: Sequence[str] = ()) -> TableResult:
    """The audit's checks of ModaLens (:func:`shovir_core.papers.audit`) whose id starts with a prefix
    or is listed in ``ids``: location, description, stated, recomputed, status, indexed by the check id
    without the ``modalens.`` prefix (``d.strata``; interval checks ``ci.<value id>``)."""
    from ..papers import audit

    prefixes = tuple(prefixes)
    checks = audit("modalens")
    checks = checks.assign(id=checks["id"].str.removeprefix("modalens."))  # "d.strata", "ci.d.hist.fr"
    keep = checks["id"].map(lambda i: i.startswith(prefixes) or i in set(ids)
                            or i.removeprefix("ci.").startswith(prefixes))
    if not keep.any():
        raise ValueError(f"audit_rows: no ModaLens check matches {prefixes} / {list(ids)}")
    return audit_table(checks[keep])

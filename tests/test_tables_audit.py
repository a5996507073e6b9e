"""The audit chapters' tables and glue values, from the audit's rows."""
from __future__ import annotations

import pytest

from shovir_core import papers
from shovir_core.tables import audit as at


def test_summary_and_table(check_table):
    df = papers.audit("modalens")
    summary = at.audit_summary(df).frame
    assert summary.loc["total", "checks"] == len(df)
    assert summary.loc["total", "flagged"] == (df["status"] == "flagged").sum()
    assert (summary["checks"] == summary["passed"] + summary["flagged"]).all()
    table = at.audit_table(df.rename(columns={"id": "check_id"}))
    assert list(table.frame.columns) == at.DISPLAY_COLUMNS
    assert (table.frame["status"].iloc[:3] == "flagged").all() and len(table.frame) == len(df)
    assert len(at.audit_table(df, status="flagged").frame) == (df["status"] == "flagged").sum()
    assert check_table(table).index.name == "check"
    check_table(at.audit_summary(df))
    with pytest.raises(ValueError, match="status"):
        at.audit_table(df, status="bogus")
    with pytest.raises(ValueError, match="missing"):
        at.audit_summary(df.drop(columns="kind"))


def test_summary_values_cover_totals_kinds_and_flags():
    checks = papers.audit("shovir")
    values = at.audit_summary(checks, paper="shovir", counts={"n_values": 123}).values
    flagged = checks[checks["status"] == "flagged"]
    assert values["shovir.n_checks"] == len(checks)
    assert values["shovir.n_flagged"] == len(flagged) > 0
    assert values["shovir.n_passed"] + values["shovir.n_flagged"] == len(checks)
    assert values["shovir.n_values"] == 123
    kinds = checks["kind"].unique()
    assert sum(values[f"shovir.kind.{k}.checks"] for k in kinds) == len(checks)
    for cid, stated in zip(flagged["id"], flagged["stated"]):
        assert values[f"shovir.flagged.{cid.removeprefix('shovir.')}.stated"] == stated
    assert all(k.startswith("shovir.") for k in values)
    assert at.audit_summary(checks).values == {}, "values only for a named paper"


def test_audit_chapter_is_one_shape_for_both_papers_and_reports_broken_invariants():
    from types import SimpleNamespace

    for paper in ("shovir", "modalens"):
        checks = papers.audit(paper).rename(columns={"id": "check_id"})
        counts = {"n_checks": len(checks), "n_flagged": int((checks["status"] == "flagged").sum()), "n_values": 1}
        runs = {"audit": SimpleNamespace(trials=checks, manifest={"counts": counts}, run_id=f"audit/{paper}/0")}
        chapter = at.audit_chapter(runs, paper=paper)
        assert chapter.problems == ()
        assert len(chapter.every.frame) == len(checks) and len(chapter.flagged.frame) == counts["n_flagged"]
        assert chapter.summary.values[f"{paper}.n_checks"] == len(checks)
        broken = checks.copy()
        broken.loc[broken.index[0], "status"] = "skipped"
        broken.loc[broken["status"] == "flagged", "note"] = ""
        runs = {"audit": SimpleNamespace(trials=broken, manifest={"counts": {**counts, "n_checks": 1}}, run_id="x")}
        problems = at.audit_chapter(runs, paper=paper).problems
        assert any("skipped" in p for p in problems) and any("in the manifest" in p for p in problems)
        if counts["n_flagged"]:
            assert any("without a note" in p for p in problems)

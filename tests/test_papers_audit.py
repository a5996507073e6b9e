"""The audit of the papers' published numbers.

Every check (hand-written, the generated Table 1 Δ_FN cells and the generated interval checks) is
run once per paper; a flagged check is an expected result (a documented discrepancy of the paper).
``test_every_check_has_its_expected_status`` compares the set of flagged checks with
:data:`EXPECTED_FLAGGED` and names every row that differs, with its stated and recomputed numbers,
so a change of the data files or of the arithmetic shows up here -- one test, not one per row.
"""
from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from shovir_core import papers
from shovir_core.papers.audit import run_check

EXPECTED_FLAGGED = {
    # 45 radiologist cases = 9 classes × 5, but PadChest-GR keeps 8 categories.
    "shovir.a1.radiologist_padchest",
    # CheXagent-2 keeps GREEN 0.159 under Full Noise Image on MIMIC-CXR ("approaching zero").
    "shovir.t1.claim.fn_green_mimic",
    # RaDialog (0.240), not LLaVA-Rad (0.266), has the smallest PadChest-GR Δ_FN.
    "shovir.t1.claim.smallest_dfn_padchest",
    # CXRMate (0.321), not LLaVA-Rad (0.320), has the highest MIMIC-CXR F1_14 under Full Noise Image.
    "shovir.t1.claim.highest_fn_f1_14_mimic",
    # Support devices is named as the exception to the rise, yet 1.57 (A) > 1.54 (P).
    "modalens.s41.sd_exception",
    # 276 patients resampled, but the same-patient pairs come from at most 293 − 19 = 274.
    "modalens.d.strata_patients",
    # OmniMedVQA original-image accuracy printed as 0.576 and as 0.579.
    "modalens.o.omni.acc_twice",
}

AUDITS = {paper: papers.audit(paper) for paper in papers.PAPERS}


def _describe(row) -> str:
    return (f"{row['id']} ({row['location']}, {row['kind']}): {row['status']}; stated {row['stated']} vs "
            f"recomputed {row['recomputed']} [{row['recomputed_low']}, {row['recomputed_high']}] ± {row['tolerance']}")


def test_every_check_has_its_expected_status():
    rows = pd.concat(AUDITS.values(), ignore_index=True).set_index("id", drop=False)
    flagged = set(rows.index[rows["status"] == "flagged"])
    unexpected = sorted(flagged - EXPECTED_FLAGGED)
    missing = sorted(EXPECTED_FLAGGED - flagged)
    assert not unexpected and not missing, "\n".join(
        [f"flagged, expected passed: {_describe(rows.loc[i])}" for i in unexpected]
        + [f"expected flagged: {_describe(rows.loc[i]) if i in rows.index else i + ' (no such check)'}"
           for i in missing])
    assert set(rows["status"]) == {"passed", "flagged"}
    silent = sorted(i for i in EXPECTED_FLAGGED if not str(rows.loc[i, "note"]).strip())
    assert not silent, f"a flagged check must say why in its note: {silent}"


def test_the_audit_runs_every_check():
    """The audit frame holds one row per check of :func:`papers.checks_of` plus the interval rows,
    and each row equals running its check alone."""
    for paper, df in AUDITS.items():
        checks = papers.checks_of(paper)
        assert [c.id for c in checks] == list(df.loc[df["kind"] != "ci_contains", "id"])
        by_id = df.set_index("id")
        differ = [c.id for c in checks if run_check(c)["status"] != by_id.loc[c.id, "status"]]
        assert not differ, f"{paper}: run_check and audit disagree on {differ}"
        ci = df[df["kind"] == "ci_contains"]
        assert len(ci) == sum(v.ci is not None for v in papers.load_values(paper).values())
        inverted = ci.loc[~(ci["recomputed_low"] <= ci["recomputed_high"]), "id"].tolist()
        assert not inverted, f"{paper}: intervals with low > high: {inverted}"
    assert len(AUDITS["modalens"].query("kind == 'ci_contains'")) > 100, "ModaLens prints its intervals"


def test_audit_frame_shape():
    for paper, df in AUDITS.items():
        assert list(df.columns) == papers.AUDIT_COLUMNS
        assert df["id"].is_unique
        assert set(df["status"]) == {"passed", "flagged"}
        assert set(df["kind"]) <= set(papers.KINDS)
        assert df["id"].str.startswith(f"{paper}.").all()
        assert (df["location"].str.len() > 0).all()


def test_table1_delta_cells_are_within_rounding():
    """All 32 Δ_FN cells of ShoViR Table 1 pass; 9 differ by exactly 0.001 from Baseline − Full Noise Image of
    the rounded components (the rounding of three-decimal inputs)."""
    df = AUDITS["shovir"]
    delta = df[df["kind"] == "delta_column"]
    assert len(delta) == 32 and (delta["status"] == "passed").all()
    off_by_one = delta[(delta["difference"].abs() - 0.001).abs() < 1e-9]
    assert len(off_by_one) == 9
    assert {"shovir.t1.delta.MIMIC.MAIRA_2.F1_14", "shovir.t1.delta.PadChest.CXRMate.F1_5"} <= set(off_by_one["id"])
    assert (delta["difference"].abs() <= 0.001 + 1e-9).all()


def test_changed_value_is_flagged():
    """The checks can fail: corrupt one published value and the check that uses it flags."""
    values = dict(papers.load_values("shovir"))
    vid = "t1.MIMIC.RaDialog.delta_fn.F1_14"
    values[vid] = dataclasses.replace(values[vid], value=0.360, text="0.360")
    check = next(c for c in papers.checks_of("shovir") if c.id == "shovir.t1.delta.MIMIC.RaDialog.F1_14")
    assert run_check(check, values)["status"] == "flagged"
    assert run_check(check)["status"] == "passed"

    values = dict(papers.load_values("modalens"))
    values["g.correct_orig"] = dataclasses.replace(values["g.correct_orig"], value=29200.0, text="29200")
    check = next(c for c in papers.checks_of("modalens") if c.id == "modalens.t4.acc_orig")
    row = run_check(check, values)
    assert row["status"] == "flagged" and math.isclose(row["recomputed_value"], 29200 / 44786)


def test_label_claim_reachable_within_rounding():
    """A tie inside the rounding intervals makes both labels reachable (no false flag)."""
    values = dict(papers.load_values("shovir"))
    vid = "t1.MIMIC.CXRMate.full_noise.F1_14"
    values[vid] = dataclasses.replace(values[vid], value=0.320, text="0.320")  # ties LLaVA-Rad
    check = next(c for c in papers.checks_of("shovir") if c.id == "shovir.t1.claim.highest_fn_f1_14_mimic")
    assert run_check(check, values)["status"] == "passed"


"""Each estimate prints one interval book-wide (issue 30: the demo's A − P effect read [3.69, 4.68] on
two pages and [3.70, 4.68] on three).

The unit tests show :func:`shovir_core.book.intervals.interval_conflicts` failing on two notebooks
that glue one estimate of the same records with different intervals; the book test runs it on the
notebooks ``shovir book`` executed into ``book/`` (skipped, saying so, before the book is executed).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shovir_core import paths
from shovir_core.book.intervals import CONTRASTS, glued_intervals, interval_conflicts


def _notebook(values: dict, runs: list[str]) -> dict:
    outputs = [{"output_type": "display_data", "data": {"application/papermill.record/text/plain": repr(v)},
                "metadata": {"scrapbook": {"name": k, "mime_prefix": "application/papermill.record/"}}}
               for k, v in values.items()]
    glue = {k: [{"run_id": r, "spec_sha256": "0" * 64} for r in runs] for k in values}
    return {"cells": [{"cell_type": "code", "source": "", "outputs": outputs}],
            "metadata": {"shovir": {"glue": glue}}}


def _write(tmp_path, name, values, runs):
    (tmp_path / f"{name}.ipynb").write_text(json.dumps(_notebook(values, runs)), encoding="utf-8")


def test_one_estimate_with_two_intervals_is_found(tmp_path):
    _write(tmp_path, "modalens_tables", {"ml.t2.all14.diff_pp": 4.18, "ml.t2.all14.diff_lo_pp": 3.6949,
                                         "ml.t2.all14.diff_hi_pp": 4.68}, ["modalens/P/1", "modalens/A/2"])
    _write(tmp_path, "modalens_s41", {"ml.s41.all14.A_minus_P.diff_pp": 4.18, "ml.s41.all14.A_minus_P.diff_pp_lo": 3.7012,
                                      "ml.s41.all14.A_minus_P.diff_pp_hi": 4.68}, ["modalens/P/1", "modalens/A/2"])
    (problem,) = interval_conflicts(tmp_path)
    assert "modalens_tables: ml.t2.all14.diff_pp" in problem and "modalens_s41" in problem
    assert interval_conflicts(tmp_path, only=CONTRASTS) == [problem]
    assert interval_conflicts(tmp_path, only=r"\.flip_rate$") == []
    _write(tmp_path, "modalens_s41", {"ml.s41.all14.A_minus_P.diff_pp": 4.18, "ml.s41.all14.A_minus_P.diff_pp_lo": 3.6949,
                                      "ml.s41.all14.A_minus_P.diff_pp_hi": 4.68}, ["modalens/P/1", "modalens/A/2"])
    assert interval_conflicts(tmp_path) == []


def test_equal_estimates_of_other_records_or_zero_effects_are_not_one_estimate(tmp_path):
    _write(tmp_path, "a", {"x.diff_pp": 4.18, "x.diff_lo_pp": 3.0, "x.diff_hi_pp": 5.0,
                           "z.effect": 0.0, "z.effect_lo": -1.0, "z.effect_hi": 1.0}, ["m/P/1"])
    _write(tmp_path, "b", {"y.diff_pp": 4.18, "y.diff_lo_pp": 3.5, "y.diff_hi_pp": 4.5,
                           "w.effect": 0.0, "w.effect_lo": -2.0, "w.effect_hi": 2.0}, ["m/P/9"])
    assert interval_conflicts(tmp_path) == []
    assert {g.key for g in glued_intervals(_notebook({"q.rate": 0.1, "q.rate_lo": 0.05, "q.rate_hi": 0.2,
                                                      "r.lo": 1.0}, ["m/P/1"]), "c")} == {"q.rate"}


def test_the_primary_comparison_and_the_arm_rows_give_one_interval():
    """The two code paths that bootstrapped A − P (Table 2's ``compare_arms`` and the appendices'
    ``flip_rate_rows``) are one: the same arms and draws give the same interval to the last bit."""
    from shovir_core.metrics.arms import compare_arms, flip_rate_rows

    rng = np.random.default_rng(3)
    n = 300
    base = pd.DataFrame({"trial_id": [f"t{i}" for i in range(n)], "patient_id": [f"p{i // 3}" for i in range(n)],
                         "case_id": [f"c{i}" for i in range(n)], "finding": "Edema",
                         "readout_c": np.where(rng.random(n) < 0.5, "yes", "no")})
    arms = {}
    for arm, p in (("P", 0.05), ("A", 0.2)):
        t = base.copy()
        flip = rng.random(n) < p
        t["readout_d"] = np.where(flip, np.where(t["readout_c"] == "yes", "no", "yes"), t["readout_c"])
        arms[arm] = t
    try:
        r = compare_arms(arms["A"], arms["P"], n_draws=500, seed=0)
    except (KeyError, ValueError) as exc:  # pragma: no cover - the trial schema changed under the test
        pytest.fail(f"the invented trials no longer fit the readout: {exc}")
    rows = flip_rate_rows(arms, n_draws=500, seed=0, key="k", pairs={"A_minus_P": ("A", "P")}).values
    assert (100 * r["diff"], 100 * r["diff_lo"], 100 * r["diff_hi"]) == (
        rows["k.A_minus_P.diff_pp"], rows["k.A_minus_P.diff_pp_lo"], rows["k.A_minus_P.diff_pp_hi"])


def test_the_executed_book_prints_one_interval_per_contrast():
    """Every contrast (A − P and the like) glued on several pages has one interval. (Rates are not
    held to it yet: some appendices bootstrap a reference or tiny model's rates with other draws.)"""
    book = paths.book_root()
    if not list(book.glob("*.ipynb")):
        pytest.skip(f"no executed notebook in {book.relative_to(paths.repo_root())} (make book)")
    problems = interval_conflicts(book, only=CONTRASTS)
    assert not problems, "one estimate, two intervals:\n  " + "\n  ".join(problems)

"""The Labeller chapter's tables on a hand-built labeller-validation record."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shovir_core.tables.labeller_scores import micro_f1_difference
from shovir_core.tables import labeller as lt


def _trials(n: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    out = {"report_id": np.arange(n), "split": np.where(np.arange(n) < n // 2, "dev", "test")}
    for c in ("Edema", "Pleural Effusion"):
        ref = rng.integers(0, 2, n).astype(float)
        out[f"ref.{c}"] = ref
        out[f"good.{c}"] = np.where(rng.random(n) < 0.9, ref, -1.0)
        out[f"bad.{c}"] = np.where(rng.random(n) < 0.7, ref, 1 - ref)
    return pd.DataFrame(out)


def test_scores_values_and_display_tables(check_table):
    t = _trials()
    scores = lt.validation_scores(t, labellers=["good", "bad"])
    v = scores.values
    micro = scores.frame[scores.frame["class"] == "micro"].set_index(["split", "labeller", "uncertain"])["f1"]
    assert v["test.good.u_negative.micro_f1"] == micro[("test", "good", "negative")]
    assert v["dev_minus_test.good.micro_f1"] == pytest.approx(micro[("dev", "good", "negative")]
                                                              - micro[("test", "good", "negative")])
    assert (v["n_reports.dev"], v["n_reports.test"], v["n_reports.all"], v["n_classes"]) == (100, 100, 200, 2)
    assert "test.bad.pleural_effusion.recall" in v and not any(".u_positive." in k and "micro" not in k for k in v)
    pos = lt.reference_positives(scores)
    assert list(pos.frame.columns) == ["dev", "test", "all"]
    assert (pos.frame["all"] == pos.frame["dev"] + pos.frame["test"]).all() and pos.frame.index[-1] == "micro"
    wide = lt.side_by_side(scores, split="test")
    assert ("good", "f1") in wide.frame.columns
    assert wide.display().columns[0] == ("reference", "positives") and ("good", "F1") in wide.display().columns
    over = lt.micro_f1_overview(scores)
    for table in (scores, pos, wide, over):
        check_table(table)
    assert over.frame.loc["test", ("good", "negative")] == micro[("test", "good", "negative")]
    assert over.display().loc["test", ("good", "uncertain → negative")].startswith("0.")


def test_difference_table_matches_the_core_function(check_table):
    t = _trials()
    table = lt.labeller_difference(t, a="good", b="bad", n_draws=500, rng=np.random.default_rng(3))
    core = micro_f1_difference(t, a="good", b="bad", n_draws=500, rng=np.random.default_rng(3))
    assert table.values == {"test.good_minus_bad.diff": core["diff"], "test.good_minus_bad.lo": core["lo"],
                            "test.good_minus_bad.hi": core["hi"], "bootstrap.n_draws": 500}
    check_table(table)
    assert table.display().iloc[0]["micro-F1 good − bad"].startswith("+")

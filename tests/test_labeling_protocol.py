"""The labeller-validation protocol writes reference and labeller codes per report."""
import numpy as np
import pytest

from shovir_core import protocols
from shovir_core.tables import labeller_scores as validation
from shovir_core.labels import CHEXPERT_CLASSES
from shovir_core.tables import labeller as labeller_tables


def test_resolve_spec_validates_and_pins_hashes():
    spec = protocols.resolve("labeller-validation", {})
    assert spec["labellers"] == ["rules", "keyword"] and spec["sections"] == ["findings", "impression"]
    assert len(spec["reports_sha256"]) == 64 and len(spec["lexicon_sha256"]) == 64
    with pytest.raises(ValueError, match="unknown labellers"):
        protocols.resolve("labeller-validation", {"labellers": ["nope"]})
    with pytest.raises(ValueError, match=r"unknown key\(s\)"):
        protocols.resolve("labeller-validation", {"sample": 3})
    with pytest.raises(ValueError, match="sections"):
        protocols.resolve("labeller-validation", {"sections": ["abstract"]})


def test_record_and_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path))
    run = protocols.run("labeller-validation", "test", {"labellers": ["keyword"]}, progress=False)
    t = run.trials
    assert run.status == "complete" and t["trial_id"].is_unique
    assert {f"keyword.{c}" for c in CHEXPERT_CLASSES} <= set(t.columns)
    ref_cols = [c for c in t.columns if c.startswith("ref.")]
    assert len(ref_cols) == 9 and set(np.unique(t[ref_cols].to_numpy()[~np.isnan(t[ref_cols].to_numpy())])) == {0, 1}
    assert run.manifest["counts"]["n_dev"] + run.manifest["counts"]["n_test"] == len(t)
    table = labeller_tables.validation_scores(t, labellers=["keyword"], uncertain=["negative"])
    scores = table.frame
    assert table.values["n_reports.all"] == len(t)
    all_micro = scores[(scores.split == "all") & (scores["class"] == "micro")].iloc[0]
    parts = scores[(scores.split != "all") & (scores["class"] == "micro")]
    assert all_micro.tp == parts.tp.sum() and all_micro.fn == parts.fn.sum()
    wide = labeller_tables.side_by_side(table, split="test").frame
    assert wide.index[-1] == "micro" and ("keyword", "f1") in wide.columns
    # a second run reuses the complete record
    again = protocols.run("labeller-validation", "test", {"labellers": ["keyword"]}, progress=False)
    assert again.run_id == run.run_id


def test_micro_f1_difference_is_paired():
    import pandas as pd
    rng = np.random.default_rng(0)
    n = 300
    ref = rng.integers(0, 2, n).astype(float)
    good = np.where(rng.random(n) < 0.95, ref, 1 - ref)
    bad = np.where(rng.random(n) < 0.75, ref, 1 - ref)
    trials = pd.DataFrame({"report_id": np.arange(n), "split": "test", "ref.Edema": ref,
                           "a.Edema": good, "b.Edema": bad})
    out = validation.micro_f1_difference(trials, a="a", b="b", n_draws=2000, rng=np.random.default_rng(1))
    f1 = lambda p: 2 * (p * ref).sum() / (2 * (p * ref).sum() + (p * (1 - ref)).sum() + ((1 - p) * ref).sum())  # noqa: E731
    assert out["diff"] == pytest.approx(f1(good) - f1(bad))
    assert out["lo"] < out["diff"] < out["hi"] and out["lo"] > 0
    assert out["seed"] == 1

"""ShoViR's published Table 1 and figure values as tables, and the metric columns that name their
implementation here and in the paper (issue 30)."""
from __future__ import annotations

from shovir_core.papers import load_values
from shovir_core.tables import shovir_paper as sp


def test_published_table1_holds_every_value_of_the_papers_table1():
    t = sp.published_table1()
    n_values = sum(1 for v in load_values("shovir").values() if v.keys.get("table") == "1")
    numbers = t.frame.drop(columns=["dataset", "model"])
    assert numbers.notna().sum().sum() == n_values
    assert set(t.frame["dataset"]) == {"MIMIC-CXR", "PadChest-GR"}
    assert numbers.columns[0] == "Baseline F1_14" and t.labels["Baseline F1_14"] == "Baseline F1-14"
    row = t.frame[(t.frame["dataset"] == "MIMIC-CXR") & (t.frame["model"] == "RaDialog")].iloc[0]
    delta = row["Baseline F1_14"] - row["Full Noise F1_14"]
    assert abs(delta - row["Δ_FN F1_14"]) < 0.0015, "Δ_FN = Baseline − Full Noise within rounding"


def test_published_figures_are_the_stated_values():
    f = sp.published_figures().frame
    assert set(f["figure"]) == {"Figure 2", "Figure 3(a)"} and f["paper value"].between(0, 1).all()


def test_metric_columns_name_the_labeller_and_what_did_not_run():
    cols = sp.metric_columns("rules", {"f1_radgraph": "no weights", "green": "no weights"})
    assert cols["f1_14_micro"] == "F1-14 (rule labeller; paper: CheXbert)"
    assert cols["f1_radgraph"].startswith("F1-RadGraph (unavailable here")
    assert sp.metric_columns("chexbert", {})["f1_5_micro"] == "F1-5 (CheXbert)"

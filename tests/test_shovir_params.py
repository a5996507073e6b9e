"""The ShoViR params files: the two chapters read the same records; credentialed profiles resolve."""
from __future__ import annotations

from pathlib import Path

import pytest

from shovir_core import protocols
from shovir_core.book import load_params

FIXTURES = Path(__file__).parent / "fixtures"
NOTEBOOKS = ("shovir_table1", "shovir_figures")


@pytest.mark.parametrize("profile", ["demo", "mimic", "padchest"])
def test_chapters_name_the_same_records(profile):
    table1, figures = (load_params(nb, profile)["runs"] for nb in NOTEBOOKS)
    assert table1 == figures
    assert all(r["protocol"] == "shovir" for r in table1.values())
    models = [r["spec"]["model"] for r in table1.values()]
    assert len(set(models)) == len(models), "one record per (dataset, model)"


def test_demo_profile_resolves_to_distinct_records():
    runs = load_params("shovir_table1", "demo")["runs"]
    ids = {protocols.run_id(r["protocol"], r["name"], r["spec"]) for r in runs.values()}
    assert len(ids) == len(runs)
    assert {"ref-blind-prior", "ref-image-classifier", "ref-context-shortcut"} <= set(runs)
    assert any(r["spec"]["model"].startswith("tiny-") for r in runs.values())


@pytest.mark.parametrize("profile, env, fixture, paper", [
    ("mimic", "SHOVIR_MIMIC", "mimic_imagenome", "MIMIC"),
    ("padchest", "SHOVIR_PADCHEST", "padchest_gr", "PadChest"),
])
def test_credentialed_profiles(profile, env, fixture, paper, monkeypatch):
    params = load_params("shovir_table1", profile)
    assert params["parameters"]["paper_dataset"] == paper
    assert set(params["parameters"]["paper_models"]) == set(params["runs"])
    spec = next(iter(params["runs"].values()))["spec"]
    monkeypatch.delenv(env, raising=False)
    with pytest.raises(ValueError, match="unset environment variable"):
        protocols.resolve("shovir", spec)
    monkeypatch.setenv(env, str(FIXTURES / fixture))
    resolved = protocols.resolve("shovir", spec)
    assert resolved["dataset"] == spec["dataset"], "the spec keeps the unexpanded, machine-independent name"
    assert resolved["reference_labels"] == "report" and resolved["reference_text"] == "report"

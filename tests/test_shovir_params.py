"""The ShoViR params files: the two chapters read the same records; credentialed profiles resolve."""
from __future__ import annotations

from pathlib import Path

import pytest

from shovir_core import protocols
from shovir_core.params import load_params

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


_COHORT_KEYS = ("dataset", "min_count", "max_per_class", "reference_labels", "reference_text", "labeller", "seed")


@pytest.mark.parametrize("profile", ["demo", "mimic", "padchest"])
def test_occluder_ablation_runs_on_the_table1_cohort(profile):
    """Supplementary §B's records select the images and items of Table 1 / Figure 3 (the matched Gaussian row
    must repeat them; a per-class cap of 8 once made it disagree)."""
    table1 = {r["spec"]["model"]: r for r in load_params("shovir_table1", profile)["runs"].values()}
    for key, r in load_params("shovir_suppl_b", profile)["runs"].items():
        t1 = table1[r["spec"]["model"]]
        for k in _COHORT_KEYS:
            assert r["spec"].get(k) == t1["spec"].get(k), (profile, key, k)


def test_demo_matched_occluder_rows_are_the_table1_records():
    table1 = {r["spec"]["model"]: r for r in load_params("shovir_table1", "demo")["runs"].values()}
    matched = {k: r for k, r in load_params("shovir_suppl_b", "demo")["runs"].items() if k.endswith(".matched")}
    assert len(matched) == 2
    for r in matched.values():
        t1 = table1[r["spec"]["model"]]
        assert protocols.run_id(r["protocol"], r["name"], r["spec"]) == \
            protocols.run_id(t1["protocol"], t1["name"], t1["spec"])


def test_demo_prompt_sensitivity_covers_every_table1_model():
    """§C.3 runs every model of Table 1 under both prompts (ref-context-shortcut was once missing)."""
    table1 = {r["spec"]["model"] for r in load_params("shovir_table1", "demo")["runs"].values()}
    prompt = {}
    for key, r in load_params("shovir_suppl_c", "demo")["runs"].items():
        if key.startswith("prompt."):
            prompt.setdefault(r["spec"]["model"], set()).add("shared" if r["spec"].get("prompt") else "default")
    assert set(prompt) == table1
    assert all(v == {"default", "shared"} for v in prompt.values())

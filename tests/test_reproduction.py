"""The reproduction map: every paper item, trials from published values, times from records and benchmarks."""
from __future__ import annotations

import json

import numpy as np
import pytest

from shovir_core import protocols
from shovir_core.papers import load_values
from shovir_core.tables import reproduction


def test_catalog_covers_both_papers():
    items = reproduction.load_catalog()
    keys = {(i["paper"], i["item"]) for i in items}
    for item in ("Table 1", "Figure 2", "Figure 3(a)", "Figure 3(b)", "Supp. §B", "Supp. §C.3"):
        assert ("shovir", item) in keys
    for k in range(1, 6):
        assert ("modalens", f"Table {k}") in keys
    for app in "BDEFGHIKLM":
        assert any(p == "modalens" and i.startswith(f"Appendix {app}") for p, i in keys), app
    assert sum(1 for p, i in keys if p == "modalens" and i.startswith("Appendix N.")) == 4  # N chapters + N.4 other data


def test_catalog_names_every_chapter_and_only_real_params():
    """A chapter added to the book must appear in the map, and a catalog entry must not go stale."""
    from shovir_core.params import toc_notebooks
    from shovir_core.params import profiles_of

    items = reproduction.load_catalog()
    named = {i["notebook"] for i in items if i.get("notebook")}
    chapters = set(toc_notebooks()) - {"reproduction_map"}
    assert chapters - named == set(), "chapters missing from resources/reproduction.yaml"
    assert named - chapters == set(), "catalog names notebooks that are not chapters"
    for it in items:
        missing = set(it.get("profiles") or []) - set(profiles_of(it["notebook"]) if it.get("notebook") else [])
        assert not missing, f"{it['paper']} {it['item']}: no params/{it.get('notebook')}/<profile>.yaml for {missing}"
        if it["work"] != "none" and it.get("notebook"):
            assert it.get("trials"), f"{it['paper']} {it['item']}: model work without a trial count"


def test_paper_trials_come_from_published_values(runs_root):
    table = reproduction.reproduction_table({}, shards=4, benchmarks=runs_root / "none").frame.set_index(["paper", "item"])
    v = load_values("shovir")
    images = v["a1.mimic.final_images"].value + v["a1.padchest.final_images"].value
    models = reproduction.design_factors()["n_shovir_models"]
    assert models == 8  # Table 1 lists 8 models per dataset
    assert table.loc[("shovir", "Table 1"), "paper_trials"] == 2 * images * models
    assert table.loc[("shovir", "Figure 2"), "paper_trials"] == 3 * 6 * images * models
    m = load_values("modalens")
    assert table.loc[("modalens", "Table 3"), "paper_trials"] == 2 * m["design.all14_trials"].value
    assert np.isnan(table.loc[("modalens", "Table 2"), "gpu_hours"])  # no GPU benchmark output: not projected
    assert table.loc[("modalens", "Table 4"), "gpu_hours"] == 0  # reuses the Table 2 records
    cmd = table.loc[("shovir", "Table 1"), "command"]
    assert "shovir run shovir_table1 --profile mimic --shards 4 --executor slurm" in cmd and "--profile padchest" in cmd
    assert table.loc[("modalens", "Figure 1"), "notebook"] == "not built yet"  # a diagram: no chapter


def test_projection_from_a_gpu_benchmark_output(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "generation.json").write_text(json.dumps({
        "benchmark": "generation", "device": "cuda", "gpu": "NVIDIA H200", "parameters": 4_000_000_000,
        "batched": {"seconds_per_report": 0.5}}))
    (results / "inference.json").write_text(json.dumps({
        "device": "cuda", "trials": 224, "answer_tokens": 0, "text_params_excl_embeddings": 3_000_000_000,
        "reuse": {"trials_per_s": 40.0}}))
    (results / "cpu.json").write_text(json.dumps({"benchmark": "generation", "device": "cpu", "parameters": 1,
                                                  "batched": {"seconds_per_report": 99.0}}))
    gpu = reproduction.gpu_seconds_per_trial(results)
    assert gpu["generate"]["seconds"] == 0.5 and gpu["score"]["seconds"] == 2 / 40.0 and "score+generate" not in gpu
    t = reproduction.reproduction_table({}, benchmarks=results).frame.set_index(["paper", "item"])
    row = t.loc[("shovir", "Table 1")]
    assert row["gpu_hours"] == pytest.approx(row["paper_trials"] * 0.5 / 3600)  # at the benchmark model's size
    row = t.loc[("modalens", "Table 2")]
    assert row["s_per_trial_gpu"] == pytest.approx(2 / 40.0 * 27e9 / 3e9)  # scaled to MedGemma-27B
    assert np.isnan(t.loc[("modalens", "Table 3"), "gpu_hours"])  # no benchmark with generated answers


def test_time_per_trial_is_measured_from_records(runs_root):
    spec = {"dataset": "demo", "model": "tiny-gemma3", "min_count": 20, "max_per_class": 1, "ps": [1.0],
            "conditions": ["Baseline"], "reference_labels": "dataset", "reference_text": "template"}
    run = protocols.run("shovir", "tiny-time", spec, progress=False)
    assert run.info.seconds > 0
    t = reproduction.reproduction_table({"shovir_table1.tiny": run}).frame.set_index(["paper", "item"])
    assert t.loc[("shovir", "Table 1"), "s_per_trial_tiny_cpu"] == pytest.approx(run.info.seconds / run.info.n_trials)
    assert t.loc[("shovir", "Table 1"), "demo_records"] == 1

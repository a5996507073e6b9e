"""Supplementary tables: data accounting on the fixtures (hand counts), the occluder checks (and that they can
fail), prompt sensitivity and the compute table on small demo records."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shovir_core import papers, protocols
from shovir_core.models.prompts import SHARED_MINIMAL_PROMPT
from shovir_core.tables import shovir_suppl as sup
from shovir_core.tables.result import TableResult

FIXTURES = Path(__file__).parent / "fixtures"
SMALL = {"dataset": "demo", "min_count": 20, "max_per_class": 2, "reference_labels": "dataset",
         "reference_text": "template"}


def test_accounting_on_the_mimic_fixture(runs_root):
    run = protocols.run("accounting", "mimic", {"dataset": f"mimic:{FIXTURES / 'mimic_imagenome'}", "min_count": 1},
                        progress=False)
    f = sup.funnel(run)
    assert isinstance(f, TableResult) and run.run_id in f.run_ids
    # README of the fixture: 7 frontal test images (zzzz0008 is LATERAL, zzzz0009 train), 5 annotated; zzzz0003
    # is No Finding only; zzzz0004 fails the TP filter. The first two steps come from the split file.
    assert f.frame["images"].tolist()[:5] == [7, 5, 5, 4, 3]
    assert f.frame["dropped"].tolist()[:5] == [0, 2, 0, 1, 1]
    assert f.frame["step"].iloc[0] == "frontal images of the official test split"
    assert (f.values["step.test_split.images"], f.values["dropped.imagenome"], f.values["dropped.no_finding"],
            f.values["step.true_positive.images"], f.values["annotated_outside_test"]) == (7, 2, 1, 3, 0)
    assert set(sup.FUNNEL_PAPER_IDS) >= {"step.test_split.images", "dropped.imagenome", "step.no_finding.images"}
    c = sup.consistency(run)
    # candidates before the TP filter (4 images): aaaa0004's Edema label has no box -> one fn for Edema
    edema = c.frame.set_index("class").loc["Edema"]
    assert (edema["tp"], edema["fn"], edema["fp"]) == (0, 1, 0)
    tp, fp, fn = c.values["tp"], c.values["fp"], c.values["fn"]
    assert c.values["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    v = sup.validation_sample(run)
    assert (v.frame["images"] <= 5).all() and v.values["n_cases"] == len(v.ids)
    again = protocols.run("accounting", "mimic2", {"dataset": f"mimic:{FIXTURES / 'mimic_imagenome'}", "min_count": 1},
                          progress=False)
    assert sup.validation_sample(again).ids.equals(v.ids)  # reproducible draw
    maps = sup.label_maps(run)
    assert maps.values["padchest.mapped"] == papers.published_value("shovir", id="a1.padchest.mapped_labels")


def test_accounting_funnels_start_at_the_adapter_input_without_the_raw_files(runs_root, tmp_path):
    import shutil

    for kind, name, drop in (("mimic", "mimic_imagenome", "mimic-cxr-2.0.0-split.csv"),
                             ("padchest", "padchest_gr", "grounded_reports_20240819.json")):
        root = tmp_path / name
        shutil.copytree(FIXTURES / name, root)
        (root / drop).unlink()
        run = protocols.run("accounting", f"{kind}-plain", {"dataset": f"{kind}:{root}", "min_count": 1}, progress=False)
        f = sup.funnel(run)
        assert f.frame["step"].iloc[0] in (sup.FUNNEL_STEPS["annotated"], sup.FUNNEL_STEPS["verified"])
        assert "boxes_removed_share" not in f.values and "step.test_split.images" not in f.values


def test_accounting_padchest_and_demo(runs_root):
    pc = protocols.run("accounting", "pgr", {"dataset": f"padchest:{FIXTURES / 'padchest_gr'}", "min_count": 1},
                       progress=False)
    # README of the fixture: 7 studies, 6 with a box, 9 mapped candidate boxes (5 studies), 8 after the negated
    # sentence, 6 verified boxes in 3 studies: the sentence validation removed 2 of 8 boxes
    pf = sup.funnel(pc)
    assert pf.frame["step"].iloc[0] == "studies of the release (grounded reports)"
    assert pf.frame["images"].tolist()[:5] == [7, 6, 5, 4, 3] and pf.frame["boxes"].tolist()[:5] == [10, 10, 9, 8, 6]
    assert pf.values["boxes_removed_share"] == pytest.approx(0.25)
    assert pf.values["with_boxes_share"] == pytest.approx(6 / 7)
    demo = protocols.run("accounting", "demo", {"dataset": "demo", "min_count": 20}, progress=False)
    f = sup.funnel(demo).frame
    assert (f["images"].diff().fillna(0) <= 0).all()
    kept = sup.class_counts(demo).frame
    assert ((kept["images"] >= 20) == kept["kept"]).all()
    # NIH boxes exist for a few classes only: classes with labels but no box count fn alone
    c = sup.consistency(demo).values
    assert c["n_classes_without_boxes"] > 0 and c["fn_without_boxes"] > 0
    assert c["f1_boxed"] > c["f1"] and c["fn"] == c["fn_boxed"] + c["fn_without_boxes"]
    maps = sup.label_maps(demo).values
    assert maps["nih.aliases"] == 1 and maps["nih.distinct"] == maps["nih.labels"] - 1
    assert maps["nih.unmapped"] == "Emphysema, Fibrosis, Hernia"
    assert maps["padchest.labels"] == maps["padchest.mapped"] < papers.published_value(
        "shovir", id="a1.padchest.finding_labels")


@pytest.fixture(scope="module")
def ablation_runs(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("SHOVIR_RUNS", str(tmp_path_factory.mktemp("runs")))
    runs = {}
    for name, preset in sup.OCCLUDERS.items():
        key = sup.glue_key(name)
        runs[f"ctx.{key}"] = protocols.run(
            "shovir", f"abl-{key}", {**SMALL, "model": "ref-context-shortcut", "preset": preset, "ps": [0.0, 1.0],
                                     "conditions": ["Baseline", "FullNoise", "RO", "OCO"]}, progress=False)
    yield runs
    mp.undo()


def test_occluder_checks_hold_for_the_context_model_and_can_fail(ablation_runs):
    table = sup.occluder_ablation(ablation_runs, n_draws=20)
    assert set(table.frame["occluder"]) == set(sup.OCCLUDERS)
    checks = sup.occluder_checks(table, ablation_runs)
    assert set(checks) == {"context_oco_unchanged", "context_flat_fills_equal", "context_texture_turns_calls_off"}
    assert all(checks.values()), checks
    f = table.frame
    assert (f["fr_oco_clean"] == 0.0).all(), "OCO never moves the context model's call against the clean image"
    moved = ~np.isclose(f["fr_oco"], f["fr_oco_clean"], equal_nan=True)
    assert (f.loc[moved, "ro_changed"] > 0).all(), "FR against RO differs only where RO changed a call"
    assert f["n_images"].nunique() == 1 and table.values["n_items"] == f["n_items"].iloc[0]
    doctored = TableResult(table.frame.assign(oco_unchanged=0.5, fn_positive_calls=1))
    bad = sup.occluder_checks(doctored, ablation_runs)
    assert not bad["context_oco_unchanged"] and not bad["context_texture_turns_calls_off"]


def test_prompt_sensitivity_and_compute_cost(runs_root):
    base = {**SMALL, "model": "ref-blind-prior", "conditions": ["Baseline"]}
    runs = {"a": protocols.run("shovir", "p-default", base, progress=False),
            "b": protocols.run("shovir", "p-shared", {**base, "prompt": SHARED_MINIMAL_PROMPT}, progress=False)}
    t = sup.prompt_sensitivity(runs, n_draws=200)
    assert set(t.frame["prompt"]) == {"default", "shared"}
    assert (t.frame["f1_lo"] <= t.frame["f1"]).all() and (t.frame["f1"] <= t.frame["f1_hi"]).all()
    assert t.values["ref_blind_prior.identical_reports"] == 1.0 and t.values["ref_blind_prior.delta_f1"] == 0.0
    cost = sup.compute_cost({"a": runs["a"]})
    row = cost.frame.iloc[0]
    timed = runs["a"].trials["gen_seconds"].dropna()
    assert row["reports_timed"] == len(timed) > 0
    assert row["seconds_per_report"] == pytest.approx(timed.mean())
    assert np.isnan(row["grid_inputs"]), "a Baseline-only record alone cannot count DOCO's eligible items"
    assert np.isfinite(row["reports_per_hour"])
    assert cost.metrics["seconds_per_report"] == "seconds_per_report" and cost.metrics["projected_hours"] == "hours"
    assert row["model_calls"] > 0 and cost.values["n_untimed"] == 0
    # the same record again under another name: every report comes from the inference cache, nothing is timed
    again = protocols.run("shovir", "p-default-again", base, progress=False)
    warm = sup.compute_cost({"a": runs["a"], "again": again}).frame.set_index("record")
    assert warm.loc["again", "model_calls"] == 0 and warm.loc["again", "reports_timed"] == 0
    assert np.isnan(warm.loc["again", "seconds_per_report"])


@pytest.mark.parametrize("notebook", ["shovir_suppl_a", "shovir_suppl_b", "shovir_suppl_c"])
@pytest.mark.parametrize("profile", ["demo", "mimic", "padchest"])
def test_params_of_the_supplementary(notebook, profile):
    from shovir_core.params import load_params

    runs = load_params(notebook, profile)["runs"]
    assert runs
    for r in runs.values():
        spec = r["spec"]
        if "prompt" in spec:
            assert spec["prompt"] == SHARED_MINIMAL_PROMPT
        if notebook == "shovir_suppl_b":
            assert sup.resolve_preset_name(spec.get("preset", "paper")) in sup.OCCLUDERS


def test_full_grid_counts_doco_on_its_eligible_items_only(runs_root):
    """The paper grid counts DOCO where the protocol runs it (items with a co-finding box), not on every item."""
    full = protocols.run("shovir", "grid-full", {k: v for k, v in SMALL.items() if k != "max_per_class"}
                         | {"model": "ref-blind-prior", "ps": [0.0, 1.0]}, progress=False)
    counts = full.manifest["counts"]
    items = sum(counts["class_counts"][c] for c in counts["classes"])
    dropped = sum(counts["doco_dropped"].get(c, 0) for c in counts["classes"])
    assert dropped > 0
    n_images = full.manifest["dataset"]["n_images"]
    grid = sup.paper_grid_inputs(full)
    assert grid == 2 * n_images + 5 * (2 * items + items - dropped) < 2 * n_images + 15 * items
    base = protocols.run("shovir", "grid-base", {**SMALL, "model": "ref-blind-prior", "conditions": ["Baseline"]},
                         progress=False)
    with pytest.raises(ValueError, match="DOCO"):
        sup.paper_grid_inputs(base)
    assert sup.paper_grid_inputs(base, full=full) == grid
    cost = sup.compute_cost({"full": full, "base": base}).frame.set_index("record")
    assert cost.loc["base", "grid_inputs"] == cost.loc["full", "grid_inputs"] == grid
    # the record's own cells (one strength p > 0 here) and the cells whose input another cell already showed
    assert cost.loc["full", "grid_cells"] == 2 * n_images + (2 * items + items - dropped)
    assert cost.loc["full", "coinciding_inputs"] == cost.loc["full", "grid_cells"] - counts["n_unique_inputs"] >= 0
    assert np.isnan(cost.loc["base", "grid_cells"]), "a record that is not a full grid has no full-grid cells"


def test_target_called_reads_each_rows_own_target_column():
    """Per row ``pred.<target> == 1``, one column per target class (the row loop it replaced, duplicate
    index labels included)."""
    import pandas as pd

    from shovir_core.tables.shovir_suppl import _target_called

    rng = np.random.default_rng(0)
    classes = ["Edema", "Cardiomegaly", "Pleural Effusion"]
    frame = pd.DataFrame({"target": rng.choice(classes, 40),
                          **{f"pred.{c}": rng.choice([1.0, 0.0, -1.0, np.nan], 40) for c in classes}},
                         index=np.repeat(np.arange(20), 2))
    want = [r[f"pred.{r['target']}"] == 1.0 for _, r in frame.iterrows()]
    got = _target_called(frame)
    assert got.tolist() == want and got.index.equals(frame.index) and 0 < sum(want) < 40

"""The ``shovir`` protocol on a handful of demo images with reference models, resume, and the tables."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core import protocols
from shovir_core.perturb.boxes import class_subsets
from shovir_core.protocols import shovir
from shovir_core.tables import shovir as shovir_tables
from shovir_core.records import Run, RunWriter

SMALL = {"dataset": "demo", "min_count": 20, "max_per_class": 2, "ps": [0.0, 0.6, 1.0],
         "reference_labels": "dataset", "reference_text": "template", "chunk_size": 16}
FIXTURES = Path(__file__).parent / "fixtures"


def _run(model: str, runs_root, **extra) -> Run:
    return protocols.run("shovir", f"t-{model}", {**SMALL, "model": model, **extra}, progress=False)


def test_resolve_spec_validates():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['datasett'\]"):
        shovir.resolve_spec({"datasett": "demo"})
    with pytest.raises(ValueError, match="no reports"):
        shovir.resolve_spec({"dataset": "demo"})  # NIH has no reports: reference must come from labels
    with pytest.raises(ValueError, match="unset environment variable"):
        shovir.resolve_spec({**SMALL, "dataset": "mimic:${SHOVIR_TEST_UNSET_VARIABLE}"})
    spec = shovir.resolve_spec(SMALL)
    assert spec["conditions"] == list(shovir.CONDITIONS) and spec["ps"] == [0.0, 0.6, 1.0]
    assert len(spec["dataset_sha256"]) == 64
    assert shovir.resolve_spec(dict(spec)) == spec, "a resolved spec resolves to itself"


@pytest.mark.parametrize(("bad", "match"), [
    ({"conditions": ["Baseline", "XYZ"]}, r"'conditions' = \['Baseline', 'XYZ'\] is not allowed; use items of"),
    ({"conditions": "OCO"}, "'conditions' = 'OCO' must be a list of strings"),
    ({"conditions": []}, "'conditions' = \\[\\] needs at least 1 item"),
    ({"ps": 0.5}, "'ps' = 0.5 must be a list of numbers"),
    ({"ps": [0.2, "0.4"]}, "item '0.4' must be a number"),
    ({"ps": [0.2, 1.2]}, r"item 1.2 is outside \[0.0, 1.0\]"),
    ({"ps": [0.2, 0.2]}, "item 0.2 is repeated"),
    ({"ps": [True]}, "item True must be a number"),
    ({"classes": "Atelectasis"}, "'classes' = 'Atelectasis' must be a list of strings or null"),
    ({"classes": ["No Finding"]}, "localisable"),
    ({"min_count": True}, "'min_count' = True must be an integer"),
    ({"min_count": 0}, r"'min_count' = 0 is outside \[1, inf\]"),
    ({"max_per_class": 2.5}, "'max_per_class' = 2.5 must be an integer or null"),
    ({"seed": -1}, "'seed' = -1 is outside"),
    ({"iou_threshold": 1.5}, "'iou_threshold' = 1.5 is outside"),
    ({"preset": "nope"}, "unknown noise preset 'nope'"),
    ({"reference_text": "radiologist"}, "'reference_text' = 'radiologist' is not allowed"),
    ({"batch_size": 0}, r"'batch_size' = 0 is outside \[1, inf\]"),  # execution-only, still validated
    ({"chunk_size": "16"}, "'chunk_size' = '16' must be an integer"),
    ({"dataset_sha256": "0" * 64}, "the spec pins"),
    ({"model_fingerprint": {"name": "ref-blind-prior"}}, "model .* changed: it is fingerprint"),
])
def test_resolve_spec_refuses(bad, match):
    with pytest.raises(ValueError, match=match):
        shovir.resolve_spec({**SMALL, **bad})


def test_execution_keys_leave_the_identity():
    spec = shovir.resolve_spec(SMALL)
    assert "chunk_size" not in spec and "batch_size" not in spec
    assert shovir.resolve_spec({**SMALL, "chunk_size": 3, "batch_size": 1}) == spec
    assert protocols.run_id("shovir", "x", {**SMALL, "batch_size": 1}) == protocols.run_id("shovir", "x", SMALL)
    assert shovir.SPEC.execution(SMALL) == {"batch_size": 8, "chunk_size": 16, "batch_check": 0}
    assert shovir.resolve_spec({**SMALL, "batch_check": 5}) == spec


def test_class_subsets_min_count_and_truncation():
    from shovir_core.data import load_dataset

    ds = load_dataset("demo")
    subsets, counts = class_subsets(ds, min_count=20)
    assert set(subsets) == {c for c, n in counts.items() if n >= 20}
    for c, ids in subsets.items():
        assert len(ids) == counts[c]
        assert (ds.labels.loc[ids, c] == 1).all()
        assert set(ids) <= set(ds.boxes.loc[ds.boxes["finding"] == c, "image_id"])
    small, _ = class_subsets(ds, min_count=20, max_per_class=2)
    assert all(small[c] == subsets[c][:2] for c in small), "truncation keeps the stable hash order"
    assert class_subsets(ds, min_count=1000)[0] == {}


def test_blind_prior_grid_records_and_invariants(runs_root):
    run = _run("ref-blind-prior", runs_root)
    t = run.trials
    m = run.manifest
    assert m["status"] == "complete" and not m["credentialed"]
    assert t["trial_id"].is_unique
    classes = m["counts"]["classes"]
    n_img = m["counts"]["n_images"]
    assert n_img == t.loc[t["condition"] == "Baseline", "image_id"].nunique()
    # two items per class, three strengths, RO and OCO on every item
    for cond in ("RO", "OCO"):
        assert len(t[t["condition"] == cond]) == 2 * len(classes) * 3
    # DOCO items + drops = items
    doco = t[t["condition"] == "DOCO"].groupby("target")["image_id"].nunique()
    for c in classes:
        assert int(doco.get(c, 0)) + m["counts"]["doco_dropped"][c] == 2
    # p = 0 is the clean image: same input hash as the Baseline trial of the image
    base = t[t["condition"] == "Baseline"].set_index("image_id")["input_sha256"]
    p0 = t[(t["level"] == "disease") & (t["p"] == 0.0)]
    assert (p0["input_sha256"].to_numpy() == base.loc[p0["image_id"]].to_numpy()).all()
    p1 = t[(t["level"] == "disease") & (t["p"] == 1.0)]
    assert (p1["input_sha256"].to_numpy() != base.loc[p1["image_id"]].to_numpy()).all()
    # the blind prior writes one report whatever the input
    assert t["generated"].nunique() == 1
    # reference labels are the dataset labels on the demo
    assert np.array_equal(t[shovir.label_columns("ref")].to_numpy(), t[shovir.label_columns("gt")].to_numpy(),
                          equal_nan=True)
    assert t["reference_text"].str.startswith("FINDINGS:").all()
    # a second call returns the complete record without recomputing
    again = _run("ref-blind-prior", runs_root)
    assert again.path == run.path and again.manifest["ended"] == m["ended"]


def test_trial_ids_are_stable_across_runs(runs_root, tmp_path, monkeypatch):
    a = _run("ref-context-shortcut", runs_root).trials.set_index("trial_id")
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "other"))
    b = _run("ref-context-shortcut", runs_root).trials.set_index("trial_id")
    assert set(a.index) == set(b.index)
    assert (a["input_sha256"] == b.loc[a.index, "input_sha256"]).all(), "identical perturbed inputs"
    assert (a["generated"] == b.loc[a.index, "generated"]).all()


def test_resume_after_interruption(runs_root, monkeypatch):
    from shovir_core.models import reference

    seen = {"n": 0}
    original = reference.ContextShortcut.generate_reports

    def flaky(self, images, **kw):
        seen["n"] += len(images)
        if seen["n"] > 24:  # after the first part file (16 trials) was written
            raise RuntimeError("simulated crash")
        return original(self, images, **kw)

    monkeypatch.setattr(reference.ContextShortcut, "generate_reports", flaky)
    spec = {**SMALL, "model": "ref-context-shortcut", "batch_size": 4}
    with pytest.raises(RuntimeError, match="simulated crash"):
        protocols.run("shovir", "resume", spec, progress=False)
    monkeypatch.setattr(reference.ContextShortcut, "generate_reports", original)
    resolved = shovir.resolve_spec(spec)
    partial = Run(RunWriter("shovir", "resume", resolved).path)
    assert partial.status == "failed" and 0 < len(partial.trials)
    n_partial = len(partial.trials)
    done = protocols.run("shovir", "resume", spec, progress=False)
    assert done.status == "complete" and done.manifest["resumed"] == 1
    assert done.manifest["counts"]["n_model_calls_this_session"] < done.manifest["counts"]["n_unique_inputs"]
    fresh = protocols.run("shovir", "fresh", spec, progress=False).trials.set_index("trial_id")
    resumed = done.trials.set_index("trial_id")
    assert len(resumed) == len(fresh) > n_partial
    assert (resumed.loc[fresh.index, "generated"] == fresh["generated"]).all()


def test_tables_on_reference_models(runs_root, check_table):
    runs = {m: _run(m, runs_root) for m in ("ref-blind-prior", "ref-context-shortcut")}
    trials = shovir_tables.trials_of(runs)
    table1 = shovir_tables.table1(trials)
    shown = check_table(table1)
    assert ("Full Noise Image", "F1-14 (micro)") in shown.columns
    assert table1.values["t1.ref_blind_prior.Δ_FN.f1_14_micro"] == 0.0 and table1.values["t1.n_models"] == 2
    t1 = table1.frame
    assert t1.loc["ref-blind-prior", ("Δ_FN", "f1_14_micro")] == 0.0
    assert t1.loc["ref-blind-prior", ("Δ_FN", "f1_5_micro")] == 0.0
    if "f1_radgraph" in shovir_tables.external_metric_status():
        assert t1[("Baseline", "f1_radgraph")].isna().all(), "unavailable metrics are NaN, never 0"
    pc_table = shovir_tables.per_class(trials)
    pc = pc_table.frame
    curves = shovir_tables.mu_f1_curves(pc_table).frame
    p0 = curves[curves["p"] == 0.0].pivot(index="model", columns="condition", values="mu_f1")
    assert np.allclose(p0["RO"], p0["OCO"])
    # μ-F1 by hand for one cell
    cell = pc[(pc["model"] == "ref-context-shortcut") & (pc["condition"] == "RO") & (pc["p"] == 1.0)]
    expect = float((cell["f1"] * cell["n"]).sum() / cell["n"].sum())
    got = curves[(curves["model"] == "ref-context-shortcut") & (curves["condition"] == "RO")
                 & (curves["p"] == 1.0)]["mu_f1"].item()
    assert got == pytest.approx(expect)
    sm = shovir_tables.shortcut_metrics(trials, n_draws=200, rng=np.random.default_rng(0)).frame
    blind = sm[sm["model"] == "ref-blind-prior"]
    assert (blind["n_flipped"] == 0).all() and (blind["delta"] == 0).all()
    ctx = sm[sm["model"] == "ref-context-shortcut"].set_index("arm")
    for arm, row in ctx.iterrows():
        assert row["n_flipped"] <= row["n_eligible"] <= row["n_items"]
        if row["n_eligible"]:
            assert row["fr"] == pytest.approx(row["n_flipped"] / row["n_eligible"])
            assert row["fr_lo"] <= row["fr"] <= row["fr_hi"]
    fig3b = shovir_tables.per_class_across_models(pc).frame
    assert set(fig3b["condition"]) <= {"Baseline", "RO", "OCO", "DOCO"}
    assert (fig3b["n_models"] <= 2).all()
    counts = shovir_tables.run_counts(runs)
    doco = shovir_tables.doco_counts(runs)
    check_table(counts), check_table(doco), check_table(counts.pivot(index="class", columns="model", values="items"))
    assert (counts.frame["items"] == 2).all()
    # every evaluated item (max_per_class = 2 per class) is either kept or dropped by DOCO
    assert doco.values["n_doco_items"] + doco.values["n_doco_dropped"] == int(doco.frame["images_in_class"].clip(upper=2).sum())
    assert counts.run_ids == tuple(sorted(r.run_id for r in runs.values()))


def test_flip_rate_counts_by_hand():
    rows = []
    # image a: RO calls c, OCO drops it (flip); image b: RO calls, OCO keeps; image c: RO misses (not eligible)
    for image, ro, oco in (("a", 1.0, 0.0), ("b", 1.0, 1.0), ("c", 0.0, 0.0)):
        for cond, pred in (("RO", ro), ("OCO", oco)):
            row = {"model": "m", "level": "disease", "condition": cond, "p": 1.0, "image_id": image,
                   "target": "Edema"}
            for prefix in ("pred", "ref", "gt"):
                row.update({col: np.nan for col in shovir.label_columns(prefix)})
            row.update({"pred.Edema": pred, "ref.Edema": 1.0, "gt.Edema": 1.0})
            rows.append(row)
    trials = pd.DataFrame(rows)
    sm = shovir_tables.shortcut_metrics(trials, n_draws=100, rng=np.random.default_rng(1)).frame.set_index("arm")
    assert sm.loc["OCO", "n_eligible"] == 2 and sm.loc["OCO", "n_flipped"] == 1
    assert sm.loc["OCO", "fr"] == pytest.approx(0.5)
    # F1 with all references positive: RO tp=2 fn=1 -> 0.8; OCO tp=1 fn=2 -> 0.5
    assert sm.loc["OCO", "delta"] == pytest.approx(0.8 - 0.5)


def test_protocol_on_mimic_fixture_is_credentialed(runs_root):
    spec = {"dataset": f"mimic:{FIXTURES / 'mimic_imagenome'}", "model": "ref-blind-prior", "min_count": 1,
            "ps": [0.0, 1.0]}
    run = protocols.run("shovir", "mimic-fixture", spec, progress=False)
    assert run.credentialed and run.manifest["dataset"]["credentialed"]
    t = run.trials
    assert set(t["condition"]) <= set(shovir.CONDITIONS)
    # reference text is the study report; reference labels come from labelling it
    assert t["reference_text"].str.startswith("FINDINGS:").all()
    assert set(run.manifest["counts"]["classes"]) == {"Atelectasis", "Lung Opacity", "Cardiomegaly",
                                                      "Support Devices", "Pleural Effusion"}
    from shovir_core.book import CredentialedDataError, assert_aggregate

    with pytest.raises(CredentialedDataError):
        assert_aggregate(t[["reference_text"]], run)


def test_batch_check_counts_reports_that_padding_changes(runs_root, monkeypatch):
    """``batch_check``: reports generated in a batch are generated again alone and compared; the record
    counts them. On tiny-gemma3 batched greedy reports equal one-at-a-time ones (0 differ); a model
    whose output depends on its batch is caught."""
    run = _run("tiny-gemma3", runs_root, max_per_class=1, ps=[0.0, 1.0], conditions=["Baseline", "OCO"],
               batch_size=4, batch_check=3)
    counts = run.manifest["counts"]
    assert counts["batch_check_n_this_session"] == 3 and counts["batch_check_differing_this_session"] == 0
    from shovir_core.models.hf import HFVLM

    real = HFVLM.generate_reports

    def padded_differently(self, images, **kw):
        out = real(self, images, **kw)
        return [t + " (batched)" for t in out] if len(images) > 1 else out

    monkeypatch.setattr(HFVLM, "generate_reports", padded_differently)
    other = protocols.run("shovir", "t-batch-differs", {**SMALL, "model": "tiny-gemma3", "max_per_class": 1,
                                                        "ps": [0.0, 1.0], "conditions": ["Baseline", "OCO"],
                                                        "subset_seed": 5, "batch_size": 4, "batch_check": 2},
                          progress=False)
    c = other.manifest["counts"]
    # only batches generated afresh are checked (this record shares some inputs with the first one)
    assert 1 <= c["batch_check_n_this_session"] <= 2
    assert c["batch_check_differing_this_session"] == c["batch_check_n_this_session"]

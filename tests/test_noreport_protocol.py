"""The modalens-noreport protocol, its tables and the planted checks (ModaLens Table 6, §4.1, Table 9, App. N.4)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from shovir_core import paths
from shovir_core.data import load_dataset
from shovir_core.protocols import noreport as nr
from shovir_core.tables import modalens_no_report as T


@pytest.fixture()
def runs_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOVIR_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


def test_the_vqa_rad_pool_and_leakage_rule_counts_on_the_shipped_release():
    ds = load_dataset("vqa-rad:data/vqa-rad")
    pool = nr.case_pool(ds, seed=0, heldout_split="test")
    c = nr.pool_counts(pool)
    # the pool is the paper's label-audit population (266 rows, 92 questions); the rule here is ours
    assert (c["pool_rows"], c["pool_questions"]) == (266, 92)
    assert (c["admissible"], c["ceiling"]) == (28, 63)
    adm = pool[pool["admissible"]]
    assert adm["heldout"].all() and adm["sub_heldout"].all()
    assert (pool["image_id"] != pool["sub_image_id"]).all()
    assert (pool["group"] == pool["question"].map(lambda q: q.strip().lower().rstrip("?").strip()).str.replace(r"\s+", " ", regex=True)).all()
    assert nr.pool_counts(nr.case_pool(ds, seed=0, heldout_split="test", leakage_rule="source_heldout"))["admissible"] == 63
    assert nr.pool_counts(nr.case_pool(ds, seed=0, heldout_split="test", leakage_rule="none"))["admissible"] == 266
    tiers = pool.assign(same=pool["source"] == pool["sub_source"])
    assert ((tiers["tier"] == "hard") == tiers["same"]).all()
    again = nr.case_pool(ds, seed=0, heldout_split="test")
    assert again["sub_question_id"].tolist() == pool["sub_question_id"].tolist()
    assert nr.case_pool(ds, seed=1, heldout_split="test")["sub_question_id"].tolist() != pool["sub_question_id"].tolist()


def _run(model, dataset, arms, **extra):
    from shovir_core import protocols

    spec = {"dataset": dataset, "model": model, "arms": arms, "image_size": 32, **extra}
    return protocols.run("modalens-noreport", f"t.{model}", spec, progress=False)


def _values(run, role, dataset):
    return T.dataset_values(run.trials, dataset=dataset, role=role, counts=run.manifest["counts"], n_draws=50, seed=0)


def test_reference_models_keep_their_stated_behaviour_and_the_checks_catch_a_broken_one(runs_dir):
    arms = ["image_swap", "question_swap", "option_swap", "knockout", "knockout_random"]
    ds = "omnimedvqa:data/fixtures/omnimedvqa"
    q = _run("ref-question-only", ds, arms, heldout_split="all", answer_tokens=2)
    r = _run("ref-image-reader", ds, arms, heldout_split="all")
    vq, vr = _values(q, "qonly", "OmniMedVQA"), _values(r, "reader", "OmniMedVQA")
    assert T.planted_failures(vq, dataset="OmniMedVQA", role="qonly", model="ref-question-only") == []
    assert T.planted_failures(vr, dataset="OmniMedVQA", role="reader", model="ref-image-reader") == []
    assert vq["nr.omni.qonly.flip_rate"] == 0.0 and vr["nr.omni.reader.flip_rate"] > 0.5
    assert set(q.trials["readout_c"]) <= set("ABCD")
    assert vq["nr.omni.qonly.open.mapped"] == vq["nr.omni.qonly.open.n"]  # the letter it generates maps
    # break the planted behaviour: a question-only model whose answer moves with the image
    broken = q.trials.copy()
    i = broken.index[(broken["arm"] == "image_swap") & broken["admissible"]][0]
    other = next(x for x in "ABCD" if x != broken.at[i, "readout_c"])
    broken.loc[i, ["readout_d", "choice_d"]] = [other, "something else"]
    vb = T.dataset_values(broken, dataset="OmniMedVQA", role="qonly", counts=q.manifest["counts"], n_draws=50, seed=0)
    assert any("flip_rate" in f for f in T.planted_failures(vb, dataset="OmniMedVQA", role="qonly", model="ref-question-only"))
    # an image reader whose random-token control moves it, or whose knockout does nothing
    broken = r.trials.copy()
    ctl = broken.index[(broken["arm"] == "knockout_random") & broken["admissible"]][0]
    broken.loc[ctl, "choice_d"] = "moved"
    broken.loc[broken["arm"] == "knockout", "choice_d"] = broken.loc[broken["arm"] == "knockout", "choice_c"]
    vb = T.dataset_values(broken, dataset="OmniMedVQA", role="reader", counts=r.manifest["counts"], n_draws=50, seed=0)
    fails = T.planted_failures(vb, dataset="OmniMedVQA", role="reader", model="ref-image-reader")
    assert any("knockout_random" in f for f in fails) and any("is not its flip rate" in f for f in fails)


def test_slake_table9_and_symmetry_on_the_fixture(runs_dir):
    run = _run("ref-image-reader", "slake:data/fixtures/slake", ["image_swap", "question_swap"])
    t9 = T.table9(run.trials, prefix="nr.slake.main", n_draws=50, seed=0)
    assert t9.frame["category"].tolist() == ["organ", "modality", "abnormality", "knowledge graph"]
    adm = run.trials[(run.trials["arm"] == "image_swap") & run.trials["admissible"]]
    assert t9.frame["pairs"].sum() == len(adm) and (adm["split"] == "test").all()
    v = _values(run, "main", "SLAKE")
    assert 0.0 <= v["nr.slake.main.sym.option_reroll"] <= 1.0 and v["nr.slake.main.sym.option_reroll_expected"] == 0.5
    assert "nr.slake.main.knockout.flip_rate" not in v  # an arm the record did not run has no value


def test_label_audit_and_key_audit_counts():
    ds = load_dataset("vqa-rad:data/vqa-rad")
    pool = nr.case_pool(ds, seed=0, heldout_split="test").assign(arm="image_swap")
    v = T.label_audit(pool, prefix="p")
    assert (v["p.audit.rows"], v["p.audit.questions"]) == (266, 92)
    assert np.isclose(v["p.audit.agreement"], v["p.audit.agree_n"] / 266) and -1 <= v["p.audit.kappa"] <= 1
    t = pool.assign(options_c=json.dumps(["Liver", "Lung", "Heart", "Kidney"]), key_c="B",
                    question="Which organ, lung or liver?", readout_c="B", admissible=True)
    k = T.omni_key_audit(t, prefix="o")
    assert k["o.keyaudit.flagged"] == 266 and k["o.keyaudit.bound_lo"] == 0.0 and k["o.keyaudit.bound_hi"] == 1.0


def test_ref_vlm_vqarad_loads_the_shipped_weights_and_runs_the_knockout(runs_dir):
    from shovir_core.models import get_model
    from shovir_core.models.ref_vlm_vqarad import META_FILE, WEIGHTS_FILE

    res = paths.repo_root() / "shovir_core" / "resources"
    meta = json.loads((res / META_FILE).read_text())
    import hashlib

    assert hashlib.sha256((res / WEIGHTS_FILE).read_bytes()).hexdigest() == meta["weights_sha256"]
    assert (res / WEIGHTS_FILE).stat().st_size < 3e6
    assert meta["metrics"]["test"]["n"] == 251 and meta["data"]["n_train_questions"] == 942
    vlm = get_model("ref-vlm-vqarad")
    assert vlm.name == "ref-vlm-vqarad"
    run = _run("ref-vlm-vqarad", "vqa-rad:data/vqa-rad", ["image_swap", "knockout", "knockout_random"],
               image_size=64, max_sources=6)
    t = run.trials
    assert len(t) == 18 and set(t["readout_c"]) <= {"yes", "no"}
    # side c is the same input in every arm: the plain readout agrees across arms
    c = t.pivot(index="question_id", columns="arm", values="margin_c")
    assert np.allclose(c["image_swap"], c["knockout"], atol=1e-4) and np.allclose(c["knockout"], c["knockout_random"], atol=1e-4)
    assert not np.allclose(t.loc[t["arm"] == "knockout", "margin_d"], t.loc[t["arm"] == "knockout", "margin_c"])


@pytest.mark.parametrize("profile", ["demo", "other"])
def test_chapter_params_resolve(profile, monkeypatch, tmp_path):
    from shovir_core.params import load_params, toc_notebooks
    from shovir_core.data.vqa_fixtures import write_all

    fixtures = write_all(tmp_path)
    for var, kind in (("SHOVIR_SLAKE", "slake"), ("SHOVIR_OMNIMEDVQA", "omnimedvqa"), ("SHOVIR_PROBMED", "probmed")):
        monkeypatch.setenv(var, str(fixtures[kind]))
    params = load_params("modalens_no_report", profile)
    assert set(params["runs"]) == {"vqarad_main", "vqarad_reader", "vqarad_qonly", "slake_main", "slake_qonly",
                                   "omni_main", "omni_qonly", "probmed_main"}
    for key, r in params["runs"].items():
        assert r["protocol"] == nr.PROTOCOL
        spec = nr.resolve_spec(dict(r["spec"]))
        assert spec["dataset"] == r["spec"]["dataset"], "the unexpanded dataset string is hashed"
    assert "modalens_no_report" in toc_notebooks()


@pytest.mark.parametrize("spec, match", [
    ({"arms": ["image_swap", "option_swap"]}, "four-option"),
    ({"arms": ["swap_everything"]}, "swap_everything"),
    ({"dataset": "demo"}, "no question table"),
    ({"leakage_rule": "trust_me"}, "trust_me"),
])
def test_bad_specs_are_refused_naming_the_problem(spec, match):
    from shovir_core.protocols.spec import SpecError

    with pytest.raises(SpecError, match=match):
        nr.resolve_spec({"dataset": "probmed:data/fixtures/probmed", "heldout_split": "all", **spec})


def test_the_vqa_rad_trainer_is_deterministic_and_uses_the_official_training_questions():
    import torch

    from shovir_core.training.ref_vlm_vqarad import train, training_questions

    ds = load_dataset("vqa-rad:data/vqa-rad")
    q = training_questions(ds)
    assert len(q) == 942 and (q["split"] == "train").all() and q["official"].all() and q["yes_no"].all()
    a, info_a = train(steps=2)
    b, info_b = train(steps=2)
    assert info_a["metrics"]["final_loss"] == info_b["metrics"]["final_loss"]
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert info_a["data"]["n_train_questions"] == 942

"""The ``mimic`` params of the Appendix N chapters run the paper's designs: resolved on a seeded synthetic
MIMIC-CXR-JPG copy large enough for them, each design reaches the denominators ModaLens states --
knockout 400 cases / 282 patients / 300 decisive / 21 layers (App. N.2), steering 12 findings x 150 cases
(App. N.3, Table 25), the probe's 650 patients from the training pool (App. N.3, Table 26) -- and the
tuned lens trains on a WikiText-103 copy in its released format (App. N.1, Table 34).

Substitutes are paired at SSIM size 16 instead of the profile's 896 (the synthetic images are 16 px; the
pairing rule, not the SSIM size, decides the denominators)."""
from __future__ import annotations

from pathlib import Path

import pytest

from mimic_synth import write_mimic_jpg
from shovir_core.params import load_params
from shovir_core.labels import FINDINGS_13
from shovir_core.protocols import modalens as ml
from shovir_core.protocols import modalens_interventions as mi
from shovir_core.protocols import modalens_layers as mll
from shovir_core.protocols import modalens_probes as mp

WIKITEXT = Path(__file__).parent / "fixtures" / "wikitext103"
FAST_SSIM = {"ssim_size": 16}


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """300 test-split patients with three frontal studies each, 700 training-split patients with one."""
    return write_mimic_jpg(tmp_path_factory.mktemp("mimic") / "mimic-cxr-jpg", n_test_patients=300,
                           n_train_patients=700, studies_per_patient=3, train_studies_per_patient=1, seed=0)


@pytest.fixture
def mimic_env(synth, monkeypatch):
    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(synth))
    monkeypatch.setenv("SHOVIR_WIKITEXT103", str(WIKITEXT))
    return synth


def _trials(spec: dict):
    cases, _ = ml.build_cases(spec)
    return ml._trial_frame(spec, cases, ml._reports(spec, cases))


def test_knockout_arms_run_400_cases_of_282_patients_300_decisive_at_21_layers(mimic_env):
    params = load_params("modalens_appn", "mimic")
    ko = {k: r for k, r in params["runs"].items() if k.startswith("ko_")}
    assert {"ko_report", "ko_report_all", "ko_report_single", "ko_question", "ko_image", "ko_report_matched"} <= set(ko)
    sample = None
    for key, r in ko.items():
        spec = mll.resolve_spec(dict(r["spec"]))
        assert spec["design"] == "one_q" and spec["instruction"] == "yes_no", f"{key}: the question+instruction prompt"
        if spec["knockout_span"] in ("image", "random_matched"):
            continue  # N.4's check of the image knockout: start layer 0 only
        assert len(spec["knockout_layers"]) == 21 and max(spec["knockout_layers"]) < 62, key
        trials = mll.knockout_cases(_trials({**spec, **FAST_SSIM}), n_patients=spec["knockout_n_patients"],
                                    n_cases=spec["knockout_n_cases"], n_decisive=spec["knockout_n_decisive"],
                                    seed=spec["knockout_case_seed"])
        assert trials["case_id"].nunique() == 400 == len(trials)
        assert trials["patient_id"].nunique() == 282
        assert int((trials["label_changed"] == 1).sum()) == 300
        ids = sorted(trials["trial_id"])
        assert sample in (None, ids), f"{key}: every knockout arm runs the same cases"
        sample = ids
    assert {mll.resolve_spec(dict(r["spec"]))["knockout_variant"] for r in ko.values()} == {"cumulative", "single"}
    for key in ("lens_P_1q", "lens_A_1q", "lens_P_1q_tf", "lens_A_1q_tf"):  # Table 27 counts on the same 400
        spec = mll.resolve_spec(dict(params["runs"][key]["spec"]))
        assert spec["knockout_n_cases"] == 400 and spec["analysis"] == "lens"
    orders = {(s["design"], s["report"], s["order"]) for s in
              (mll.resolve_spec(dict(r["spec"])) for k, r in params["runs"].items() if k.startswith("lens_"))}
    assert len(orders) == 8, "the paper's eight lens arms (App. N.1)"


def test_steering_runs_12_findings_of_150_cases(mimic_env):
    spec = mi.resolve_spec(dict(load_params("modalens_appn_interventions", "mimic")["runs"]["steer"]["spec"]))
    assert len(spec["steer_findings"]) == 12 and set(spec["steer_findings"]) < set(FINDINGS_13)
    assert spec["steer_cases_per_finding"] == 150 and spec["steer_layers"] == [20] and max(spec["steer_scales"]) == 6000
    fit, test = mi.steering_trials(spec, _trials({**spec, **FAST_SSIM}))
    counts = test.groupby("finding")["case_id"].nunique()
    assert len(counts) == 12 and (counts == 150).all() and len(test) == 1800
    assert not set(test["patient_id"]) & set(_trials({**spec, **FAST_SSIM})[fit]["patient_id"])


def test_probe_draws_650_patients_from_the_training_pool(mimic_env):
    spec = mp.resolve_spec(dict(load_params("modalens_appn_probes", "mimic")["runs"]["probe"]["spec"]))
    assert spec["probe_pool"].startswith("mimic-jpg-train:") and spec["probe_pool_sha256"]
    assert spec["probe_n_patients"] == 650 and spec["probe_seed"] == 0 and spec["probe_layer"] == 20
    test, disjoint, counts = mp.cohorts({**spec, **FAST_SSIM})
    assert counts["n_disjoint_patients"] == 650 == disjoint["patient_id"].nunique()
    assert counts["n_pool_patients"] == 700 and counts["n_available_patients"] == 700
    train = {f"9{p:07d}" for p in range(300, 1000)}
    assert set(disjoint["patient_id"]) <= train and set(disjoint["sub_patient_id"]) <= train
    assert not (set(test["patient_id"]) | set(test["sub_patient_id"])) & train


def test_tuned_lens_trains_on_wikitext_103(mimic_env, monkeypatch):
    from shovir_core.models.tuned_lens import corpus_texts

    params = load_params("modalens_appn_probes", "mimic")
    spec = mp.resolve_spec(dict(params["runs"]["lens_P"]["spec"]))
    assert spec["lens_corpus"] == "wikitext-103" and spec["lens_steps"] == 2000
    assert spec["lens_corpus_path"] == "${SHOVIR_WIKITEXT103}", "the unexpanded path is hashed"
    texts = corpus_texts("wikitext-103", path=WIKITEXT)
    assert len(texts) == 32 and not any(t.startswith("=") or "@" in t for t in texts)
    monkeypatch.delenv("SHOVIR_WIKITEXT103")
    with pytest.raises(ValueError, match="SHOVIR_WIKITEXT103"):
        mp.resolve_spec(dict(params["runs"]["lens_P"]["spec"]))


def test_a_changed_corpus_is_refused(tmp_path):
    corpus = tmp_path / "wikitext-103"
    corpus.mkdir()
    (corpus / "wiki.train.tokens").write_text((WIKITEXT / "wiki.train.tokens").read_text())
    base = {"dataset": "demo-64px", "ssim_size": 64, "model": "tiny-gemma3", "n_patients": 8, "design": "one_q",
            "analysis": "tuned-lens", "lens_corpus": "wikitext-103", "lens_corpus_path": str(corpus)}
    spec = mp.resolve_spec(dict(base))
    (corpus / "wiki.train.tokens").write_text(" = Other = \n Changed text . \n")
    with pytest.raises(ValueError, match="changed"):
        mp.resolve_spec(spec)
    with pytest.raises(ValueError, match="lens_corpus_path"):
        mp.resolve_spec({**base, "lens_corpus": "iu-reports"})


def test_the_probe_runs_with_its_cohort_from_a_training_split(tmp_path, runs_root):
    """The probe record is made on a MIMIC-JPG copy with a training split (tiny-gemma3, a few patients)."""
    from shovir_core.protocols import run

    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    root = write_mimic_jpg(tmp_path / "mimic-small", n_test_patients=10, n_train_patients=8, studies_per_patient=3,
                           train_studies_per_patient=2, seed=1)
    spec = {"dataset": f"mimic-jpg:{root}", "probe_pool": f"mimic-jpg-train:{root}", "model": "tiny-gemma3",
            "ssim_size": 16, "design": "one_q", "analysis": "probe", "probe_layer": 1, "probe_n_patients": 4,
            "probe_folds": 2, "probe_n_draws": 50}
    rec = run("modalens-probes", "t.probe.train-pool", spec, progress=False)
    t, counts = rec.trials, rec.manifest["counts"]
    disjoint = t[t["split"] == "disjoint"]
    assert counts["n_disjoint_patients"] == 4 == disjoint["patient_id"].nunique()
    assert set(disjoint["patient_id"]) <= {f"9{p:07d}" for p in range(10, 18)}, "drawn from the training split"
    assert disjoint["probe_flip_score"].between(0, 1).all()
    assert rec.manifest["spec"]["probe_pool_sha256"] and rec.manifest["status"] == "complete"

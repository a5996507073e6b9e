"""The rehearsal's synthetic trees load through the credentialed adapters with the planted sizes,
and its stand-ins replace real models without ever passing for them."""
import json

import pytest

from shovir_core.errors import UsageError

from shovir_core.data.mimic import load_mimic_imagenome
from shovir_core.data.mimic_jpg import load_mimic_jpg
from shovir_core.data.padchest import load_padchest_gr
from shovir_core.models.registry import STAND_INS_ENV, get_model, model_fingerprint, stand_in_for
from shovir_core.perturb.swap import cohort_from_dataset
from shovir_core.rehearsal.run import stand_ins
from shovir_core.rehearsal.synthetic import PLANTED, planted, write_tree

SCALE = 0.02


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("rehearsal-tree")
    return root, write_tree(root, scale=SCALE, seed=0)


def test_planted_counts_at_full_scale_are_the_papers():
    p = planted(1.0)
    assert (p["ml_cases"], p["ml_patients"], p["ml_cross_patient"], p["ml_same_patient"]) == (3199, 293, 19, 3180)
    assert (p["sv_test_images"], p["sv_without_imagenome"], p["sv_no_finding_only"], p["sv_mimic_images"]) == \
        (3858, 1397, 232, 2160)
    assert p["sv_annotated"] - p["sv_no_finding_only"] == 2229  # ShoViR §3.1: 2,229 candidates
    assert (p["sv_padchest_images"], p["sv_padchest_boxes"], p["sv_padchest_classes"]) == (1390, 1997, 8)
    assert p["ml_train_patients"] >= 1811


def test_modalens_cohort_has_the_planted_shape(tree):
    root, _ = tree
    p = planted(SCALE)
    test = load_mimic_jpg(root / "mimic")
    assert test.credentialed
    assert len(test.images) == p["ml_cases"]
    per_patient = test.images.groupby("patient_id")["study_id"].nunique()
    assert len(per_patient) == p["ml_patients"]
    assert int((per_patient == 1).sum()) == p["ml_cross_patient"]
    cohort = cohort_from_dataset(test)
    assert int((cohort["positive"].map(len) == 0).sum()) == p["ml_no_positive"]
    train = load_mimic_jpg(root / "mimic", split="train")
    assert train.images["patient_id"].nunique() == p["ml_train_patients"]
    assert not set(train.images["patient_id"]) & set(test.images["patient_id"])
    assert test.reports is not None and test.reports["text"].str.len().min() > 0
    everything = load_mimic_jpg(root / "mimic", split="test", frontal_only=False)
    assert len(everything.images) == p["sv_test_images"]


def test_app_f_rule_selects_the_papers_six_findings(tree):
    """ModaLens App. F's rule (source yes-rate in [20 %, 80 %], u-negative targets) picks the paper's
    six findings on the tree, the others fall below the band (a full-scale tree once had none inside)."""
    from shovir_core.labels import FINDINGS_13, apply_policy
    from shovir_core.protocols.modalens import prespecified_findings, six_range
    from shovir_core.rehearsal.synthetic import planted_yes_rates

    root, _ = tree
    test = load_mimic_jpg(root / "mimic")
    targets = apply_policy(test.labels.reindex(test.images["image_id"])[list(FINDINGS_13)], "u-negative")
    lo, hi = six_range("mimic")
    six = prespecified_findings(targets, lo=lo, hi=hi)
    assert six == [f for f, r in planted_yes_rates().items() if lo <= r <= hi]
    assert sorted(six) == ["Atelectasis", "Cardiomegaly", "Edema", "Lung Opacity", "Pleural Effusion",
                           "Support Devices"]
    n = len(targets)
    for f, r in planted_yes_rates().items():
        assert abs(targets[f].mean() - r) <= 1.5 / n + (0.05 if f not in six else 0.0), f


def test_shovir_funnels_come_out_at_the_planted_sizes(tree):
    root, _ = tree
    p = planted(SCALE)
    raw = json.loads((root / "mimic" / "imagenome_annotations.json").read_text())
    assert len(raw) == p["sv_annotated"] == p["sv_test_images"] - p["sv_without_imagenome"]
    assert len(load_mimic_imagenome(root / "mimic", drop_no_finding_only=True, true_positive_filter=False).images) \
        == p["sv_annotated"] - p["sv_no_finding_only"]
    sv = load_mimic_imagenome(root / "mimic", metadata_csv="mimic-cxr-2.0.0-metadata.csv")
    assert len(sv.images) == p["sv_mimic_images"]
    assert set(sv.boxes["finding"]) and sv.credentialed
    pc = load_padchest_gr(root / "padchest-gr", metadata_csv="metadata.csv")
    assert (len(pc.images), len(pc.boxes), pc.boxes["finding"].nunique()) == \
        (p["sv_padchest_images"], p["sv_padchest_boxes"], p["sv_padchest_classes"])


def test_the_tree_is_deterministic_and_cached(tree, tmp_path):
    root, first = tree
    again = write_tree(tmp_path, scale=SCALE, seed=0)
    assert again["sha256"] == first["sha256"]
    a = (root / "mimic" / "mimic-cxr-2.0.0-metadata.csv").read_bytes()
    assert a == (tmp_path / "mimic" / "mimic-cxr-2.0.0-metadata.csv").read_bytes()
    assert write_tree(tmp_path, scale=SCALE, seed=0) == again  # the stamp: nothing rewritten
    assert write_tree(tmp_path / "other", scale=SCALE, seed=1)["sha256"] != first["sha256"]


def test_ids_are_invented(tree):
    root, _ = tree
    import pandas as pd

    meta = pd.read_csv(root / "mimic" / "mimic-cxr-2.0.0-metadata.csv", dtype=str)
    assert meta["subject_id"].str.match(r"^9[0-9]{7}$").all()   # real MIMIC subject ids start with 1
    assert meta["study_id"].str.match(r"^9[0-9]{7}$").all()     # real study ids start with 5
    assert meta["dicom_id"].str.count("-").eq(1).all()          # real DICOM ids have five groups
    assert meta["StudyDate"].str[:3].isin(["224", "225"]).all()        # dates in the 2240s-2250s
    pc = pd.read_csv(root / "padchest-gr" / "metadata.csv", dtype=str)
    assert pc["ImageID"].str.startswith("999").all()


def test_planted_rejects_a_bad_scale():
    with pytest.raises(UsageError, match="scale"):
        planted(0)
    with pytest.raises(UsageError, match="scale"):
        planted(1.5)
    assert PLANTED["ml_cases"] == 3199


def test_stand_ins_replace_real_models_and_say_so(monkeypatch):
    assert stand_in_for("medgemma-27b") is None
    real = model_fingerprint("medgemma-27b")
    monkeypatch.setenv(STAND_INS_ENV, json.dumps(stand_ins(layers=False)))
    assert get_model("medgemma-27b").name == "ref-anchored@0.5"
    assert get_model("maira-2").name == "ref-context-shortcut"
    fp = model_fingerprint("medgemma-27b")
    assert fp["stand_in"]["name"] == "ref-anchored@0.5" and fp != real  # a rehearsal record is never the real one
    assert get_model("ref-blind-prior").name == "ref-blind-prior"       # reference models stay themselves
    monkeypatch.setenv(STAND_INS_ENV, json.dumps({"medgemma-27b": "maira-2"}))
    with pytest.raises(UsageError, match="not a reference or tiny model"):
        get_model("medgemma-27b")
    monkeypatch.setenv(STAND_INS_ENV, "not json")
    with pytest.raises(UsageError, match="JSON"):
        stand_in_for("medgemma-27b")


def test_layer_chapters_get_tiny_transformers():
    table = stand_ins(layers=True)
    assert table["medgemma-27b"] == "tiny-gemma3@62" and table["llava-1.5-7b"] == "tiny-llava-1.5@32"
    override = stand_ins(layers=False, override="ref-blind-prior")
    assert set(override.values()) == {"ref-blind-prior", "tiny-xrv-densenet"}
    assert override["torchxrayvision"] == "tiny-xrv-densenet"


def test_padchest_release_and_wikitext_have_the_planted_funnel(tree):
    """The grounded-reports release the PadChest-GR funnel starts from (ShoViR §3.1) and the tuned lens's
    WikiText-103 corpus (ModaLens App. N.1) are written in their released formats."""
    from shovir_core.data.padchest import grounded_report_counts
    from shovir_core.models.tuned_lens import wikitext_texts
    from shovir_core.rehearsal.synthetic import PADCHEST_REMOVED_SHARE

    root, _ = tree
    p = planted(SCALE)
    ds = load_padchest_gr(root / "padchest-gr", metadata_csv="metadata.csv")
    counts = grounded_report_counts(root / "padchest-gr", ds)
    assert (counts["studies"], counts["with_boxes"]) == (p["sv_padchest_studies"], p["sv_padchest_with_boxes"])
    assert counts["kept_boxes"] == p["sv_padchest_kept_boxes"]
    assert abs(counts["boxes_removed_share"] - PADCHEST_REMOVED_SHARE) < 0.01
    raw = json.loads((root / "padchest-gr" / "grounded_reports_20240819.json").read_text())
    assert all(s["ImageID"].startswith("999") for s in raw)  # invented ids only
    full = planted(1.0)
    assert (full["sv_padchest_studies"], full["sv_padchest_with_boxes"]) == (4555, 3008)
    texts = wikitext_texts(root / "wikitext-103")
    assert len(texts) >= 200 and not any(t.startswith("=") for t in texts)


def test_layer_stand_ins_have_the_real_models_layer_count(monkeypatch):
    """App. N's designs name layers up to 61 of MedGemma-27B's 62: the stand-in has them all."""
    from shovir_core.models.registry import REGISTRY, tiny_dims

    assert REGISTRY["medgemma-27b"].text_layers == 62
    monkeypatch.setenv(STAND_INS_ENV, json.dumps(stand_ins(layers=True)))
    model = get_model("medgemma-27b")
    text = model.model.config.get_text_config()
    assert text.num_hidden_layers == 62
    assert text.hidden_size == 16 < 64, "the deep stand-in is narrower than the tiny default (its cost is width)"
    assert text.head_dim == 16  # the tiny default's head size
    from shovir_core.models.registry import DEEP_TWIN_BATCH

    # a deep twin scores in batches of 32 (its cost is per call, not per row); the demo's tiny models keep 8
    assert model.batch_size == DEEP_TWIN_BATCH == 32 and get_model("tiny-gemma3").batch_size == 8
    fingerprint = model_fingerprint("medgemma-27b")["stand_in"]
    assert fingerprint["name"] == "tiny-gemma3@62" and fingerprint["dims"]["hidden"] == 16
    assert "dims" not in model_fingerprint("tiny-gemma3")  # the demo's tiny models keep their identity
    assert tiny_dims("tiny-gemma3") is None
    with pytest.raises(UsageError, match="decoder-layer count"):
        tiny_dims("tiny-gemma3@x")


def test_the_surrogate_stand_in_has_the_classifiers_interface(monkeypatch):
    """App. K's TorchXRayVision classifier: a CPU stand-in with its 18 slots, named in the record's spec."""
    import numpy as np

    from shovir_core.protocols import modalens_surrogate as ms

    with pytest.raises(Exception, match="not found locally|torchxrayvision"):
        ms._classifier({"surrogate": "torchxrayvision", "xrv_weights": None})
    real_id = ms._surrogate_id("torchxrayvision")
    monkeypatch.setenv(STAND_INS_ENV, json.dumps(stand_ins(layers=False)))
    surrogate, extra = ms._classifier({"surrogate": "torchxrayvision", "xrv_weights": None})
    assert extra == {"stand_in": "tiny-xrv-densenet"} and "stand-in" in surrogate.name
    scores = surrogate.scores([np.full((64, 64), 128, dtype=np.uint8), np.zeros((64, 64), dtype=np.uint8)])
    assert set(scores) == {"raw", "normalised"} and len(scores["raw"]) == 12
    stand_in_id = ms._surrogate_id("torchxrayvision")
    assert stand_in_id != real_id and stand_in_id["stand_in"]["name"] == "tiny-xrv-densenet"
    monkeypatch.setenv(STAND_INS_ENV, json.dumps({"medgemma-27b": "tiny-xrv-densenet"}))
    with pytest.raises(UsageError, match="stands in for 'torchxrayvision'"):
        get_model("medgemma-27b")


def test_a_reduced_rehearsal_scales_the_designs_sample_sizes(monkeypatch):
    """Fixed sample sizes (App. N.2's 400 cases / 282 patients / 300 decisive, §4.2's 40 patients, N.3's 650
    probe patients and 150 steering cases) shrink with a reduced tree, and only in a reduced rehearsal."""
    from shovir_core.params import load_params
    from shovir_core.rehearsal.scaling import REHEARSAL_SCALE_ENV, scale_design

    def spec(chapter, key):
        return load_params(chapter, "mimic")["runs"][key]["spec"]

    monkeypatch.delenv(REHEARSAL_SCALE_ENV, raising=False)
    assert spec("modalens_appn", "ko_report")["knockout_n_cases"] == 400
    assert spec("modalens_ablation", "blind_full")["n_patients"] == 40
    monkeypatch.setenv(REHEARSAL_SCALE_ENV, "1")
    assert spec("modalens_appn", "ko_report")["knockout_n_patients"] == 282  # a full rehearsal: the paper's
    monkeypatch.setenv(REHEARSAL_SCALE_ENV, "0.01")
    p = planted(0.01)
    assert p["ml_patients"] >= 5, "App. N.3's five patient-grouped probe folds need five patients"
    ko = spec("modalens_appn", "ko_report")
    assert ko["knockout_n_patients"] <= p["ml_patients"] and ko["knockout_n_cases"] <= p["ml_cases"]
    assert ko["knockout_n_patients"] <= ko["knockout_n_cases"] and ko["knockout_n_decisive"] <= ko["knockout_n_cases"]
    assert spec("modalens_ablation", "blind_full")["n_patients"] <= p["ml_patients"]
    assert spec("modalens_appn_probes", "probe")["probe_n_patients"] <= p["ml_train_patients"]
    assert 1 <= spec("modalens_appn_interventions", "steer")["steer_cases_per_finding"] < 150
    assert spec("modalens_appn", "ko_report")["knockout_layers"][-1] == 60  # layers are not sizes
    assert scale_design("cohort", {"n": 5}, 0.01) == {"n": 5}
    monkeypatch.setenv(REHEARSAL_SCALE_ENV, "2")
    with pytest.raises(UsageError, match="SHOVIR_REHEARSAL_SCALE"):
        spec("modalens_appn", "ko_report")


def test_a_reduced_rehearsal_scales_the_tuned_lens(monkeypatch):
    """App. N.1's tuned lens trains 2,000 steps on 50,000 paragraphs in the paper's design; a reduced rehearsal
    trains ``scale`` of both (at least 100 steps, 200 texts), and the report names what it scaled."""
    from shovir_core.params import load_params
    from shovir_core.rehearsal.run import _scaled
    from shovir_core.rehearsal.scaling import REHEARSAL_SCALE_ENV

    def lens(key):
        return load_params("modalens_appn_probes", "mimic")["runs"][key]["spec"]

    monkeypatch.delenv(REHEARSAL_SCALE_ENV, raising=False)
    assert (lens("lens_P")["lens_steps"], lens("lens_P")["lens_max_texts"]) == (2000, 50000)  # the paper's
    monkeypatch.setenv(REHEARSAL_SCALE_ENV, "0.01")
    for key in ("lens_P", "lens_A"):
        assert (lens(key)["lens_steps"], lens(key)["lens_max_texts"]) == (100, 500)
    assert lens("lens_P")["lens_seed"] == 0 and lens("lens_P")["lens_heldout"] == 0.02  # not sizes
    monkeypatch.setenv(REHEARSAL_SCALE_ENV, "0.5")
    assert (lens("lens_P")["lens_steps"], lens("lens_P")["lens_max_texts"]) == (1000, 25000)
    monkeypatch.setenv(REHEARSAL_SCALE_ENV, "1")
    assert lens("lens_A")["lens_steps"] == 2000
    scaled = _scaled("modalens_appn_probes", "mimic", 0.01)
    assert scaled["lens_P"]["lens_steps"] == [2000, 100] and scaled["lens_A"]["lens_max_texts"] == [50000, 500]
    assert scaled["probe"]["probe_n_patients"][0] == 650 and "lens_steps" not in scaled["probe"]
    assert _scaled("modalens_appn_probes", "mimic", 1.0) == {}


def test_planted_checks_of_reference_models_sit_under_reference_validation():
    """App. E and F assert what the reference models plant only when the profile validates reference models;
    a real model's (or a rehearsal stand-in's) answers are results, not checks."""
    import ast
    from pathlib import Path

    for name in ("modalens_appe", "modalens_appf", "modalens_appk"):
        tree = ast.parse((Path(__file__).parents[1] / "notebooks" / f"{name}.py").read_text())
        guarded = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "reference_validation":
                guarded |= {id(n) for n in ast.walk(node)}
        planted_asserts = [n for n in ast.walk(tree) if isinstance(n, ast.Assert) and n.msg is not None
                           and "planted" in ast.unparse(n.msg) and "second reader" not in ast.unparse(n.msg)]
        assert planted_asserts, name
        assert all(id(n) in guarded for n in planted_asserts), name


def test_a_rehearsal_does_not_rehearse_its_own_page():
    """The Rehearsal chapter's record on mimic/padchest is the full rehearsal itself: rehearsing that chapter
    would start the rehearsal again inside itself."""
    from shovir_core.params import profiles_of
    from shovir_core.rehearsal.run import _chapters

    for profile in ("mimic", "padchest"):
        assert profile in profiles_of("rehearsal")
        chapters = _chapters(profile, None)
        assert "rehearsal" not in chapters and "shovir_table1" in chapters

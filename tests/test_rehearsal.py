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

"""The credentialed-data fixtures carry invented identifiers that cannot collide with real ones."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

FIXTURES = Path(__file__).parent / "fixtures"
REAL_DICOM = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{8}){4}")


def test_mimic_jpg_ids_and_dates_are_invented():
    root = FIXTURES / "mimic_jpg"
    meta = pd.read_csv(root / "mimic-cxr-2.0.0-metadata.csv", dtype=str)
    split = pd.read_csv(root / "mimic-cxr-2.0.0-split.csv", dtype=str)
    chex = pd.read_csv(root / "mimic-cxr-2.0.0-chexpert.csv", dtype=str)
    for df in (meta, split, chex):
        assert df["subject_id"].str.fullmatch(r"9\d{7}").all(), "real subject ids start with 1"
        assert df["study_id"].str.fullmatch(r"9\d{7}").all(), "real study ids start with 5"
    for df in (meta, split):
        assert not df["dicom_id"].str.fullmatch(REAL_DICOM.pattern).any()
    assert meta["StudyDate"].str.fullmatch(r"22[45]\d{5}").all()
    assert not meta["StudyTime"].isin(["213014.531"]).any()
    for p in (root / "files").rglob("*"):
        if p.is_dir() and p.parent.name == "files":
            assert p.name == "p90"
    for p in (root / "mimic-cxr-reports" / "files").rglob("*.txt"):
        assert re.fullmatch(r"s9\d{7}\.txt", p.name) and p.parent.name.startswith("p9")


def test_mimic_imagenome_ids_are_invented():
    root = FIXTURES / "mimic_imagenome"
    ann = json.loads((root / "imagenome_annotations.json").read_text())
    for dicom, entry in ann.items():
        assert not REAL_DICOM.fullmatch(dicom)
        assert re.fullmatch(rf"p90/p9\d{{7}}/s9\d{{7}}/{re.escape(dicom)}\.jpg", entry["img_path"])
    meta = pd.read_csv(root / "mimic-cxr-2.0.0-metadata.csv", dtype=str)
    assert meta["subject_id"].str.startswith("9").all() and meta["study_id"].str.startswith("9").all()


def test_padchest_ids_are_invented():
    root = FIXTURES / "padchest_gr"
    samples = json.loads((root / "verified_samples.json").read_text())
    assert all(k.startswith("999") and not k.startswith("216840111366964") for k in samples)
    assert all(p.name.startswith("999") for p in (root / "images").iterdir())
    meta = pd.read_csv(root / "metadata.csv", dtype=str)
    assert meta["ImageID"].str.startswith("999").all()

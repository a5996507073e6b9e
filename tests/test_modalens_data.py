"""Template reports and the MIMIC-CXR-JPG adapter (on a synthetic schema fixture)."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shovir_core.data import DatasetError, load_dataset
from shovir_core.data.mimic_jpg import image_relpath, load_mimic_jpg, report_relpath
from shovir_core.data.template_reports import (NO_ACUTE, ROUTINE_NEGATIVES, template_fingerprint,
                                               template_report, template_reports)
from shovir_core.labels import CHEXPERT_CLASSES, FINDINGS_13
from shovir_core.models.report_text import read_report

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_jpg"


# --------------------------------------------------------------------------- template reports
def test_template_report_sentences_follow_codes():
    text = template_report({"Edema": 1.0, "Atelectasis": -1.0, "Pneumothorax": 0.0, "Fracture": 0.0})
    assert text == ("FINDINGS: There is pulmonary edema. Possible atelectasis. No pneumothorax.\n"
                    "IMPRESSION: Pulmonary edema.")


def test_template_report_negative_modes():
    labels = {f: 0.0 for f in FINDINGS_13}
    assert template_report(labels, negatives="none") == f"FINDINGS: The lungs are clear.\nIMPRESSION: {NO_ACUTE}"
    findings_line = template_report(labels).splitlines()[0]
    assert findings_line.count("No ") == len(ROUTINE_NEGATIVES)
    assert template_report(labels, negatives="all").splitlines()[0].count("No ") == len(FINDINGS_13)


def test_template_report_rejects_bad_input():
    with pytest.raises(ValueError, match="Edema"):
        template_report({"Edema": 2.0})
    with pytest.raises(ValueError, match="unknown classes"):
        template_report({"Emphysema": 1.0})
    with pytest.raises(ValueError, match="negatives"):
        template_report({}, negatives="some")


@pytest.mark.parametrize("seed", range(5))
def test_template_reports_read_back_by_the_reference_reader(seed):
    """The report-reading reference models recover every stated code from a template report."""
    rng = np.random.default_rng(seed)
    codes = rng.choice([1.0, 0.0, -1.0, np.nan], size=len(FINDINGS_13))
    labels = dict(zip(FINDINGS_13, codes))
    read = read_report(template_report(labels, negatives="all"))
    for finding, code in labels.items():
        expected = 0.0 if np.isnan(code) else (-1.0 if code == 0 else 1.0)  # uncertain reads as a mention
        assert read[finding] == expected, (finding, code)


@pytest.mark.parametrize("seed", range(5))
def test_varied_template_reports_state_the_same_codes(seed):
    """Every varied phrasing is read back to the study's codes by the reference reader, the rules
    labeller and the text controls' mention lexicon; the wording depends on the key only."""
    from shovir_core.data.text_controls import mentions, split_sentences
    from shovir_core.labeling import label_reports

    rng = np.random.default_rng(seed)
    labels = dict(zip(FINDINGS_13, rng.choice([1.0, 0.0, np.nan], size=len(FINDINGS_13))))
    texts = [template_report(labels, negatives="all", wording="varied", key=f"s{seed}-{k}") for k in range(12)]
    assert texts[0] == template_report(labels, negatives="all", wording="varied", key=f"s{seed}-0")
    assert len(set(texts)) >= 10  # the phrasing varies from study to study
    coded = label_reports(texts, labeller="rules")
    for text, (_, codes) in zip(texts, coded.iterrows()):
        read = read_report(text)
        named = set().union(*(mentions(s) for s in split_sentences(text)))
        for finding, code in labels.items():
            if np.isnan(code):
                assert read[finding] == 0.0 and finding not in named, (text, finding)
            else:
                assert read[finding] == (1.0 if code == 1 else -1.0), (text, finding)
                assert codes[finding] == code, (text, finding)
                assert finding in named, (text, finding)


def test_varied_wording_options():
    labels = {"Edema": 1.0, "Pneumothorax": 0.0}
    assert template_report(labels) == template_report(labels, wording="fixed", key="ignored")
    with pytest.raises(ValueError, match="needs the study key"):
        template_report(labels, wording="varied")
    with pytest.raises(ValueError, match="wording"):
        template_report(labels, wording="free")
    frame = pd.DataFrame([[1.0] + [0.0] * 13] * 3, columns=list(CHEXPERT_CLASSES), index=["a", "b", "c"])
    by_index = template_reports(frame, negatives="all", wording="varied")["text"]
    by_keys = template_reports(frame, negatives="all", wording="varied", keys=["a", "b", "c"])["text"]
    assert by_index.tolist() == by_keys.tolist() and by_index.nunique() == 3
    assert template_fingerprint(negatives="all") != template_fingerprint(negatives="all", wording="varied")


def test_template_reports_frame_and_fingerprint():
    labels = pd.DataFrame([[1.0] + [np.nan] * 13, [np.nan] * 13 + [1.0]], columns=list(CHEXPERT_CLASSES),
                          index=pd.Index(["s1", "s2"], name="study_id"))
    out = template_reports(labels)
    assert list(out.index) == ["s1", "s2"]
    assert "enlarged cardiomediastinum" in out.loc["s1", "text"]
    assert out.loc["s2", "text"].endswith(NO_ACUTE)
    assert template_fingerprint() != template_fingerprint(negatives="all")


# --------------------------------------------------------------------------- MIMIC-CXR-JPG
def test_mimic_jpg_fixture_test_split_frontal():
    ds = load_mimic_jpg(FIXTURE)
    assert ds.credentialed and ds.manifest()["credentialed"]
    img = ds.images.set_index("image_id")
    # lateral (…02), train-split (…08) and blank view without a frontal code (…09) are dropped
    assert sorted(img.index) == [f"0a1b2c3d-0000000{i}" for i in (1, 3, 4, 5, 6, 7)]
    assert img.loc["0a1b2c3d-00000004", "view"] == "" and bool(img.loc["0a1b2c3d-00000004", "view_blank"])
    assert img.loc["0a1b2c3d-00000001", "study_datetime"] == "2251-05-06T11:11:11.111000"
    assert (img.loc["0a1b2c3d-00000003", ["width", "height"]] == [34, 44]).all()
    assert img["patient_id"].nunique() == 3 and set(img["split"]) == {"test"}


def test_mimic_jpg_labels_are_study_level_codes():
    ds = load_mimic_jpg(FIXTURE)
    lab = ds.labels
    assert list(lab.columns) == list(CHEXPERT_CLASSES)
    assert lab.loc["0a1b2c3d-00000001", "Cardiomegaly"] == 1.0
    assert lab.loc["0a1b2c3d-00000001", "Pleural Effusion"] == -1.0
    assert lab.loc["0a1b2c3d-00000001", "Pneumothorax"] == 0.0
    assert np.isnan(lab.loc["0a1b2c3d-00000001", "Edema"])
    assert lab.loc["0a1b2c3d-00000007"].isna().all(), "a study absent from the label file is blank"


def test_mimic_jpg_reports_and_paths():
    ds = load_mimic_jpg(FIXTURE)
    assert ds.reports is not None and set(ds.reports.index) == set(ds.images["study_id"])
    assert ds.reports.loc["90414267", "text"].startswith("FINAL REPORT EXAMINATION")
    assert "\n" not in ds.reports.loc["90414267", "text"]
    assert image_relpath("90000032", "90414267", "x").as_posix() == "files/p90/p90000032/s90414267/x.jpg"
    assert report_relpath("90000032", "90414267").as_posix() == "files/p90/p90000032/s90414267.txt"
    with pytest.raises(DatasetError, match="report file not found"):
        load_mimic_jpg(FIXTURE, reports_root=FIXTURE / "nowhere-else")


def test_mimic_jpg_options_and_registry(tmp_path):
    everything = load_mimic_jpg(FIXTURE, split=None, frontal_only=False)
    assert len(everything.images) == 9
    assert set(everything.images["split"]) == {"test", "train"}
    via_registry = load_dataset(f"mimic-jpg:{FIXTURE}")
    assert via_registry.manifest_hash == load_mimic_jpg(FIXTURE).manifest_hash
    # gzipped metadata files, no reports folder
    root = tmp_path / "jpg"
    shutil.copytree(FIXTURE / "files", root / "files")
    for name in ("metadata", "split", "chexpert"):
        src = FIXTURE / f"mimic-cxr-2.0.0-{name}.csv"
        with open(src, "rb") as fin, gzip.open(root / f"{src.name}.gz", "wb") as fout:
            fout.write(fin.read())
    ds = load_mimic_jpg(root)
    assert ds.reports is None and len(ds.images) == 6


def test_mimic_jpg_errors_name_the_item(tmp_path):
    root = tmp_path / "jpg"
    shutil.copytree(FIXTURE, root)
    with pytest.raises(DatasetError, match="split 'dev'"):
        load_mimic_jpg(root, split="dev")
    chex = root / "mimic-cxr-2.0.0-chexpert.csv"
    chex.write_text(chex.read_text().replace("-1.0", "0.5", 1))
    with pytest.raises(DatasetError, match="study '90414267', class 'Pleural Effusion'"):
        load_mimic_jpg(root)
    shutil.copy(FIXTURE / chex.name, chex)
    (root / "mimic-cxr-reports/files/p90/p90000764/s97375968.txt").unlink()
    with pytest.raises(DatasetError, match="study '97375968': report file not found"):
        load_mimic_jpg(root)
    (root / "mimic-cxr-2.0.0-split.csv").unlink()
    with pytest.raises(DatasetError, match="split.csv"):
        load_mimic_jpg(root)


@pytest.mark.parametrize("adapter", ["vqa-rad", "slake", "omnimedvqa", "probmed"])
def test_the_other_vqa_datasets_of_appendix_n4_refuse_an_empty_folder_naming_it(adapter, tmp_path):
    from shovir_core.data import DatasetError, load_dataset

    with pytest.raises(DatasetError, match=str(tmp_path.name)):
        load_dataset(f"{adapter}:{tmp_path}")

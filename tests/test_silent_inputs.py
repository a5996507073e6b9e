"""Issue 29: four inputs the credentialed adapters and the perturbation API accepted without a word now get
one clear error each (fixtures with invented ids only)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from shovir_core.data import DatasetError
from shovir_core.data.mimic import load_mimic_imagenome
from shovir_core.data.mimic_jpg import load_mimic_jpg

FIXTURES = Path(__file__).parent / "fixtures"


def test_mimic_null_report_is_refused(tmp_path):
    root = tmp_path / "mimic"
    shutil.copytree(FIXTURES / "mimic_imagenome", root)
    ann = root / "imagenome_annotations.json"
    data = json.loads(ann.read_text())
    dicom = sorted(data)[1]
    data[dicom]["report"] = None
    ann.write_text(json.dumps(data))
    with pytest.raises(DatasetError, match=rf"{dicom}.*'report'.*the report is null"):
        load_mimic_imagenome(root)
    data[dicom]["report"] = "FINDINGS: invented text."
    ann.write_text(json.dumps(data))
    assert len(load_mimic_imagenome(root).reports) >= 1


def test_mimic_jpg_empty_report_file_is_refused(tmp_path):
    root = tmp_path / "jpg"
    shutil.copytree(FIXTURES / "mimic_jpg", root)
    report = sorted((root / "mimic-cxr-reports").rglob("*.txt"))[0]
    load_mimic_jpg(root)  # the fixture as shipped loads
    report.write_text(" \n\t\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=rf"study '{report.stem[1:]}': report .* is empty"):
        load_mimic_jpg(root)


def test_mimic_jpg_metadata_size_must_match_the_image_file(tmp_path):
    root = tmp_path / "jpg"
    shutil.copytree(FIXTURES / "mimic_jpg", root)
    ds = load_mimic_jpg(root)
    row = ds.images.iloc[0]
    path = Path(row["path"].replace(str((FIXTURES / "mimic_jpg").resolve()), str(root.resolve())))
    with Image.open(path) as im:
        w, h = im.size
    Image.new("L", (w + 3, h)).save(path, format="JPEG")  # the file no longer has the metadata's size
    with pytest.raises(DatasetError, match=rf"{row['image_id']}.*Rows/Columns.*says {w}x{h} .* is {w + 3}x{h}"):
        load_mimic_jpg(root)

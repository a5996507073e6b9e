"""The MIMIC/ImaGenome and PadChest-GR adapters on synthetic fixtures that mimic their schemas."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from shovir_core.data import DatasetError, load_dataset
from shovir_core.data.mimic import decode_chexbert_codes, load_mimic_imagenome
from shovir_core.data.padchest import PADCHEST_TO_CHEXPERT, load_padchest_gr, padchest_to_chexpert
from shovir_core.labels import CHEXPERT_CLASSES

FIXTURES = Path(__file__).parent / "fixtures"
MIMIC = FIXTURES / "mimic_imagenome"
PADCHEST = FIXTURES / "padchest_gr"


def test_mimic_cohort_filters_and_schema():
    ds = load_mimic_imagenome(MIMIC, metadata_csv="mimic-cxr-2.0.0-metadata.csv")
    ids = sorted(ds.images["image_id"])
    # zzzz0003: No Finding only; zzzz0004: Edema positive without a confirming region
    assert [i[:8] for i in ids] == ["zzzz0001", "zzzz0002", "zzzz0005"]
    assert ds.credentialed and ds.manifest()["credentialed"]
    row = ds.images.set_index("image_id").loc[ids[0]]
    assert (row["patient_id"], row["study_id"], row["width"], row["height"]) == ("p90000001", "s90000001", 64, 64)
    assert row["view"] == "PA"
    # a region carrying two findings becomes two box rows with the same coordinates
    two = ds.boxes[ds.boxes["box_id"] == f"{ids[0]}#0"]
    assert sorted(two["finding"]) == ["Atelectasis", "Lung Opacity"]
    assert two[["x1", "y1", "x2", "y2"]].drop_duplicates().shape[0] == 1
    # a region with no findings yields no box
    assert f"{ids[0]}#1" not in set(ds.boxes["box_id"])
    lab = ds.labels.loc[ids[0]]
    assert (lab["Atelectasis"], lab["Cardiomegaly"], lab["Pleural Effusion"]) == (1.0, 0.0, -1.0)
    assert np.isnan(lab["Edema"])
    assert ds.reports.loc["s90000002", "text"].startswith("FINDINGS: The heart is enlarged")


def test_mimic_filters_can_be_switched_off():
    ds = load_mimic_imagenome(MIMIC, drop_no_finding_only=False, true_positive_filter=False)
    assert len(ds.images) == 5
    assert set(ds.images["view"]) == {"frontal"}


def test_mimic_through_registry_and_errors(tmp_path):
    ds = load_dataset(f"mimic:{MIMIC}")
    assert ds.name == "mimic-imagenome" and len(ds.images) == 3
    root = tmp_path / "m"
    shutil.copytree(MIMIC, root)
    ann = json.loads((root / "imagenome_annotations.json").read_text())
    first = next(iter(ann))
    ann[first]["labels"][0] = 7
    (root / "imagenome_annotations.json").write_text(json.dumps(ann))
    with pytest.raises(DatasetError, match=rf"{first}.*code 7"):
        load_mimic_imagenome(root)
    ann[first]["labels"][0] = 0
    ann[first]["img_path"] = "p10/p1/s2/other.jpg"
    (root / "imagenome_annotations.json").write_text(json.dumps(ann))
    with pytest.raises(DatasetError, match="img_path"):
        load_mimic_imagenome(root)


def test_decode_codes():
    assert decode_chexbert_codes([1, 2, 3] + [0] * 11, where="x")[:3] == [1.0, 0.0, -1.0]
    with pytest.raises(DatasetError, match="14 ints"):
        decode_chexbert_codes([1, 2], where="x")


def test_padchest_normalised_box_lists_and_static_map():
    ds = load_padchest_gr(PADCHEST, metadata_csv="metadata.csv")
    assert ds.credentialed and len(ds.images) == 3
    meta = ds.images.set_index("image_id")
    assert meta["patient_id"].value_counts().to_dict() == {"pat2": 2, "pat1": 1}
    assert (meta["width"].unique().tolist(), meta["height"].unique().tolist()) == ([72], [80])
    assert ds.load_image(meta.index[0]).dtype == np.uint16
    b = ds.boxes.set_index("box_id")
    eff = b.loc[[i for i in b.index if i.startswith("999000000000000000000000000000000000000000003")
                 and b.loc[i, "finding"] == "Pleural Effusion"]].iloc[0]
    assert eff[["x1", "y1", "x2", "y2"]].tolist() == pytest.approx([0.6 * 72, 0.7 * 80, 0.95 * 72, 0.95 * 80])
    atel = ds.boxes[(ds.boxes["finding"] == "Atelectasis")]
    assert len(atel) == 2, "a region with two normalised boxes gives two rows"
    # the nodule region has no chexpert_categories: mapped by the static lookup
    assert (ds.boxes["finding"] == "Lung Lesion").sum() == 1
    assert ds.labels.shape[1] == len(CHEXPERT_CLASSES)


def test_padchest_map_and_errors(tmp_path):
    assert len(PADCHEST_TO_CHEXPERT) == 69
    assert padchest_to_chexpert("NSG tube") == "Support Devices"
    assert "Pneumonia" not in set(PADCHEST_TO_CHEXPERT.values())
    root = tmp_path / "p"
    shutil.copytree(PADCHEST, root)
    data = json.loads((root / "verified_samples.json").read_text())
    first = next(iter(data))
    data[first]["regions"][0]["bbox"] = [[10, 20, 30, 40]]
    (root / "verified_samples.json").write_text(json.dumps(data))
    with pytest.raises(DatasetError, match=rf"{first}.*not normalised"):
        load_padchest_gr(root)
    assert load_dataset(f"padchest:{PADCHEST}").name == "padchest-gr"

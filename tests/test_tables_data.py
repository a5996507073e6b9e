"""The Data and Perturbations chapters' tables on hand-built cohort and perturbation rows."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shovir_core.labels import CHEXPERT_CLASSES
from shovir_core.perturb.report import rows_of_kind
from shovir_core.tables import data as dt
from shovir_core.tables import perturbations as pt


def _cohort() -> pd.DataFrame:
    boxes = {"i1": [("Edema", 0, 0, 10, 20), ("Atelectasis", 5, 5, 15, 15)], "i2": [("Edema", 0, 0, 50, 50)],
             "i3": []}
    rows = []
    for image, patient, study, view in (("i1", "p1", "s1", "PA"), ("i2", "p1", "s2", "AP"), ("i3", "p2", "s3", "PA")):
        row = {"image_id": image, "patient_id": patient, "study_id": study, "view": view, "width": 100,
               "height": 100, "boxes": json.dumps([{"box_id": f"{image}.{k}", "finding": f, "x1": x1, "y1": y1,
                                                    "x2": x2, "y2": y2, "source_label": f}
                                                   for k, (f, x1, y1, x2, y2) in enumerate(boxes[image])])}
        row.update({c: np.nan for c in CHEXPERT_CLASSES})
        rows.append(row)
    df = pd.DataFrame(rows)
    df.loc[0, "Edema"], df.loc[1, "Edema"], df.loc[2, "Edema"] = 1.0, -1.0, 0.0
    df.loc[2, "No Finding"] = 1.0
    return df


def test_data_tables(check_table):
    t = _cohort()
    cohorts = dt.cohort_table({"a": t, "b": t.iloc[:1]}, names={"a": "all", "b": "first"})
    assert cohorts.values["a.n_images"] == 3 and cohorts.values["a.n_patients_multi_study"] == 1
    assert cohorts.values["b.n_boxes"] == 2 and cohorts.values["a.n_box_classes"] == 2
    assert list(cohorts.display().columns) == ["all", "first"]
    prev = dt.prevalence_table(t, key="a")
    assert prev.frame.loc["Edema", ["positive", "uncertain", "negative"]].tolist() == [1, 1, 1]
    assert prev.frame.loc["Edema", "prevalence"] == pytest.approx(1 / 3)
    assert prev.values == {"a.n_no_finding": 1}
    assert prev.display().loc["Edema", "Prevalence"] == "33.3%"
    for table in (cohorts, dt.prevalence_table(t), dt.studies_per_patient(t), dt.box_table(t)):
        check_table(table)
    spp = dt.studies_per_patient(t).frame
    assert spp.set_index("studies")["patients"].to_dict() == {1: 1, 2: 1}
    boxes = dt.box_table(t, key="a")
    assert boxes.frame.loc["Edema", "boxes"] == 2 and boxes.frame.loc["Edema", "images"] == 2
    assert boxes.values["a.min_boxes_per_class"] == 1
    assert boxes.values["a.median_rel_area"] == pytest.approx(np.median([0.02, 0.01, 0.25]))
    assert boxes.display().loc["Edema", "median area / image area"] == "13.50%"


def _perturbation_rows() -> pd.DataFrame:
    rows = [{"kind": "box_sets", "image_id": "i1", "target": "Edema", "n_target_boxes": 1, "n_other_boxes": 1,
             "n_dropped_iou": 0, "doco_dropped": False},
            {"kind": "box_sets", "image_id": "i2", "target": "Edema", "n_target_boxes": 2, "n_other_boxes": 0,
             "n_dropped_iou": 1, "doco_dropped": True}]
    for case, tier, pair, ssim in (("c1", 1, "same-patient", 0.4), ("c2", 1, "same-patient", 0.6),
                                   ("c3", 3, "cross-patient", 0.2), ("c4", 0, None, np.nan)):
        rows.append({"kind": "substitute", "case_id": case, "tier": tier, "pair_type": pair, "ssim": ssim,
                     "n_rejected_ssim": 1 if case == "c4" else 0})
    return pd.DataFrame(rows)


def test_perturbation_tables(check_table):
    t = _perturbation_rows()
    counts = pt.box_set_counts(t)
    assert counts.frame.loc["total"].tolist() == [2, 3, 1, 1, 1, 1]
    assert counts.values == {"boxes.n_items": 2, "boxes.n_doco_items": 1, "boxes.n_doco_dropped": 1,
                             "boxes.n_dropped_iou": 1}
    assert "B_c̄ boxes" in counts.display().columns
    tiers = pt.tier_counts(t)
    check_table(counts), check_table(tiers)
    assert tiers.frame["cases"].to_dict() == {1: 2, 2: 0, 3: 1, 0: 1}
    v = tiers.values
    counted = (v["swap.n_cases"], v["swap.tier1"], v["swap.tier3"], v["swap.n_none"], v["swap.n_rejected"])
    assert counted == (4, 2, 1, 1, 1)
    assert v["swap.ssim.median"] == pytest.approx(0.4) and v["swap.ssim.max"] == pytest.approx(0.6)
    assert tiers.display().loc[1, "share of cases"] == "50.0%"
    with pytest.raises(ValueError, match="no 'gallery' rows"):
        rows_of_kind(t, "gallery")


def test_noise_table(check_table):
    noise = {"region": "image", "n_pixels": 4096, "p_low": [1.0], "p_high": [250.0], "mean": [120.5],
             "median": [118.0], "std": [40.25], "center": [120.5], "scale": [40.25]}
    gallery = pd.DataFrame([{"preset": "paper", "condition": c, "p": p, "info": json.dumps({"noise": noise}),
                             "sha256": "ab" * 32} for c, p in (("FullNoise", 1.0), ("OCO", 1.0), ("OCO", 0.4))])
    table = pt.noise_table(gallery)
    check_table(table)
    assert list(table.frame.index) == [("paper", "FullNoise"), ("paper", "OCO")]
    assert table.values == {"gallery.paper.noise_mean": 120.5, "gallery.paper.noise_std": 40.25}
    assert table.display().loc[("paper", "FullNoise"), "SHA-256 (first 12)"] == "ab" * 6

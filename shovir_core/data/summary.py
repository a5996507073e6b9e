"""Cohort summaries computed from ``cohort`` run records (the Data chapter's tables)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES

__all__ = ["cohort_counts", "COUNT_LABELS", "prevalence_table", "box_table", "studies_per_patient", "boxes_frame"]

COUNT_LABELS = {
    "n_images": "images", "n_studies": "studies", "n_patients": "patients",
    "n_patients_multi_study": "patients with 2+ studies", "max_studies_per_patient": "most studies of one patient",
    "n_pa": "PA views", "n_ap": "AP views", "n_boxes": "expert boxes",
    "n_images_with_boxes": "images with a box", "n_box_classes": "CheXpert classes with a box",
}
"""Display names of the :func:`cohort_counts` keys."""


def cohort_counts(trials: pd.DataFrame) -> dict:
    """Images, studies, patients, views, multi-study patients and boxes of a cohort record."""
    per_patient = trials.groupby("patient_id")["study_id"].nunique()
    boxes = boxes_frame(trials)
    views = trials["view"].value_counts()
    return {
        "n_images": int(len(trials)),
        "n_studies": int(trials["study_id"].nunique()),
        "n_patients": int(trials["patient_id"].nunique()),
        "n_patients_multi_study": int((per_patient >= 2).sum()),
        "max_studies_per_patient": int(per_patient.max()) if len(per_patient) else 0,
        "n_pa": int(views.get("PA", 0)),
        "n_ap": int(views.get("AP", 0)),
        "n_boxes": int(len(boxes)),
        "n_images_with_boxes": int(boxes["image_id"].nunique()) if len(boxes) else 0,
        "n_box_classes": int(boxes["finding"].nunique()) if len(boxes) else 0,
    }


def prevalence_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Per CheXpert class: positives, negatives, blanks and prevalence among labelled images."""
    rows = []
    for c in CHEXPERT_CLASSES:
        v = trials[c].astype(float)
        pos, neg, unc, blank = int((v == 1).sum()), int((v == 0).sum()), int((v == -1).sum()), int(v.isna().sum())
        labelled = pos + neg + unc
        rows.append({"class": c, "positive": pos, "negative": neg, "uncertain": unc, "blank": blank,
                     "prevalence": pos / labelled if labelled else np.nan})
    return pd.DataFrame(rows).set_index("class")


def boxes_frame(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per box (from the JSON ``boxes`` column), with width, height and relative area."""
    rows = []
    for t in trials.itertuples():
        for b in json.loads(t.boxes):
            rows.append({**b, "image_id": t.image_id, "img_w": t.width, "img_h": t.height})
    df = pd.DataFrame(rows, columns=["box_id", "finding", "x1", "y1", "x2", "y2", "source_label",
                                     "image_id", "img_w", "img_h"])
    df["w"] = df["x2"] - df["x1"]
    df["h"] = df["y2"] - df["y1"]
    df["rel_area"] = df["w"] * df["h"] / (df["img_w"] * df["img_h"])
    return df


def box_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Per box class: boxes, images, and the median box width/height and relative area."""
    b = boxes_frame(trials)
    if b.empty:
        return pd.DataFrame(columns=["boxes", "images", "median_w", "median_h", "median_rel_area"])
    g = b.groupby("finding")
    return pd.DataFrame({
        "boxes": g.size(), "images": g["image_id"].nunique(),
        "median_w": g["w"].median(), "median_h": g["h"].median(), "median_rel_area": g["rel_area"].median(),
    }).sort_values("boxes", ascending=False)


def studies_per_patient(trials: pd.DataFrame) -> pd.Series:
    """Number of patients by number of studies."""
    return trials.groupby("patient_id")["study_id"].nunique().value_counts().sort_index().rename("patients")

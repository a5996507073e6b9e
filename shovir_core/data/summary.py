"""Cohort summaries computed from ``cohort`` run records: the counts and the box list of a cohort.

The Data chapter's tables are built from these by :mod:`shovir_core.tables.data`.
"""
from __future__ import annotations

import json

import pandas as pd

__all__ = ["cohort_counts", "boxes_frame"]


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

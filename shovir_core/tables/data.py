"""The Data chapter's tables, from the trials of ``cohort`` run records (one row per image).

Counts come from :func:`shovir_core.data.summary.cohort_counts` and the box list from
:func:`shovir_core.data.summary.boxes_frame`; every function returns a
:class:`~shovir_core.tables.result.TableResult` whose ``values`` are glue keys without the ``data.``
namespace.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..data.summary import boxes_frame, cohort_counts
from ..labels import CHEXPERT_CLASSES
from .result import TableResult

__all__ = ["COUNT_LABELS", "cohort_table", "prevalence_table", "studies_per_patient", "box_table"]

COUNT_LABELS = {
    "n_images": "images", "n_studies": "studies", "n_patients": "patients",
    "n_patients_multi_study": "patients with 2+ studies", "max_studies_per_patient": "most studies of one patient",
    "n_pa": "PA views", "n_ap": "AP views", "n_boxes": "expert boxes",
    "n_images_with_boxes": "images with a box", "n_box_classes": "CheXpert classes with a box",
}
"""Display names of the :func:`~shovir_core.data.summary.cohort_counts` keys (the rows of :func:`cohort_table`)."""


def cohort_table(cohorts: Mapping[str, pd.DataFrame], *, names: Mapping[str, str] | None = None) -> TableResult:
    """Images, studies, patients, views and boxes of each cohort (one column per cohort).

    ``cohorts`` maps a cohort key to the trials of its record; ``names`` gives the column headers.
    Frame: ``quantity`` (readable) and one count column per cohort key, in the order of
    :data:`COUNT_LABELS`. ``values``: ``<cohort>.<count key>`` (``boxes.n_images``).
    """
    if not cohorts:
        raise ValueError("cohort_table: no cohorts given")
    counts = {key: cohort_counts(t) for key, t in cohorts.items()}
    frame = pd.DataFrame({"quantity": [COUNT_LABELS[k] for k in COUNT_LABELS],
                          **{key: [c[k] for k in COUNT_LABELS] for key, c in counts.items()}})
    values = {f"{key}.{k}": v for key, c in counts.items() for k, v in c.items()}
    return TableResult(frame, values, metrics={key: "count" for key in counts},
                       labels={key: (names or {}).get(key, key) for key in counts},
                       index=("quantity",), caption="The demo cohorts: images, studies, patients, views and boxes.")


def prevalence_table(trials: pd.DataFrame, *, key: str | None = None) -> TableResult:
    """Per CheXpert class (index ``class``): positives, negatives, uncertain, blanks and prevalence.

    Prevalence = positives / labelled images (positive, negative or uncertain). ``values``:
    ``<key>.n_no_finding`` (images whose No Finding label is positive); ``key`` names the cohort.
    """
    rows = []
    for c in CHEXPERT_CLASSES:
        v = trials[c].astype(float)
        pos, neg, unc, blank = int((v == 1).sum()), int((v == 0).sum()), int((v == -1).sum()), int(v.isna().sum())
        labelled = pos + neg + unc
        rows.append({"class": c, "positive": pos, "negative": neg, "uncertain": unc, "blank": blank,
                     "prevalence": pos / labelled if labelled else np.nan})
    frame = pd.DataFrame(rows).set_index("class")
    stem = f"{key}." if key else ""
    return TableResult(frame, {f"{stem}n_no_finding": int(frame.loc["No Finding", "positive"])},
                       metrics={**{c: "count" for c in ("positive", "negative", "uncertain", "blank")},
                                "prevalence": "prevalence"},
                       labels={"positive": "positive", "negative": "negative", "uncertain": "uncertain",
                               "blank": "blank (not mentioned)"},
                       caption="Label counts and prevalence per CheXpert class.")


def studies_per_patient(trials: pd.DataFrame) -> TableResult:
    """Number of patients by number of studies (columns ``studies``, ``patients``)."""
    spp = trials.groupby("patient_id")["study_id"].nunique().value_counts().sort_index()
    frame = pd.DataFrame({"studies": spp.index.astype(int), "patients": spp.to_numpy(dtype=int)})
    return TableResult(frame, metrics={"patients": "count"},
                       labels={"studies": "studies per patient", "patients": "patients"},
                       index=("studies",), caption="Patients by their number of studies.")


def box_table(trials: pd.DataFrame, *, key: str | None = None) -> TableResult:
    """Per box class (index ``finding``, most boxes first): boxes, images, median box width, height
    (pixels) and relative area.

    ``values``: ``<key>.min_boxes_per_class`` and ``<key>.median_rel_area`` (over all boxes).
    """
    b = boxes_frame(trials)
    cols = ["boxes", "images", "median_w", "median_h", "median_rel_area"]
    if b.empty:
        frame = pd.DataFrame(columns=cols)
        values = {}
    else:
        g = b.groupby("finding")
        frame = pd.DataFrame({
            "boxes": g.size(), "images": g["image_id"].nunique(),
            "median_w": g["w"].median(), "median_h": g["h"].median(), "median_rel_area": g["rel_area"].median(),
        }).sort_values("boxes", ascending=False)
        values = {"min_boxes_per_class": int(frame["boxes"].min()), "median_rel_area": float(b["rel_area"].median())}
    stem = f"{key}." if key else ""
    return TableResult(frame, {stem + k: v for k, v in values.items()},
                       metrics={"boxes": "count", "images": "count", "median_w": "pixels", "median_h": "pixels",
                                "median_rel_area": "relative_area"},
                       labels={"boxes": "boxes", "images": "images", "median_w": "median width (px)",
                               "median_h": "median height (px)",
                               "median_rel_area": "median area / image area"},
                       caption="Expert boxes per class and their sizes.")

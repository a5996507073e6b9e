"""The ``cohort`` protocol: one trial row per image of a dataset.

The Data chapter reads this record instead of the dataset, so its numbers are
traceable to a record carrying the dataset's content hash. Rows hold the image
identity, view, size, the 14 CheXpert codes and the image's boxes (JSON).
"""
from __future__ import annotations

import json

from ..data import load_dataset
from ..labels import CHEXPERT_CLASSES
from ..records import Run, RunWriter, load_run, spec_hash

__all__ = ["resolve_spec", "execute"]

PROTOCOL = "cohort"


def resolve_spec(spec: dict) -> dict:
    unknown = set(spec) - {"dataset"}
    if unknown:
        raise ValueError(f"cohort: unknown spec keys {sorted(unknown)} (allowed: dataset)")
    ds = load_dataset(spec.get("dataset", "demo"))
    return {"dataset": spec.get("dataset", "demo"), "dataset_sha256": ds.manifest_hash}


def execute(name: str, spec: dict, *, progress: bool = True) -> Run:
    ds = load_dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise RuntimeError(f"cohort: dataset {spec['dataset']!r} changed while resolving the spec")
    boxes = ds.boxes.groupby("image_id")
    rows = []
    for img in ds.images.itertuples():
        b = boxes.get_group(img.image_id) if img.image_id in boxes.groups else None
        row = {
            "trial_id": img.image_id,
            "image_id": img.image_id, "study_id": img.study_id, "patient_id": img.patient_id,
            "view": img.view, "width": int(img.width), "height": int(img.height),
            "age": getattr(img, "age", None), "sex": getattr(img, "sex", None),
            "follow_up": getattr(img, "follow_up", None),
            "path": None if ds.credentialed else str(img.path),
            "boxes": json.dumps([] if b is None else
                                b[["box_id", "finding", "x1", "y1", "x2", "y2", "source_label"]].to_dict("records")),
        }
        row.update({c: float(ds.labels.loc[img.image_id, c]) for c in CHEXPERT_CLASSES})
        rows.append(row)
    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), credentialed=ds.credentialed) as writer:
        writer.append(rows)
        writer.complete(n_images=len(ds.images), n_boxes=len(ds.boxes))
    return load_run(PROTOCOL, name, spec_hash(spec))

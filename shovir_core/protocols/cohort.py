"""The ``cohort`` protocol: one trial row per image of a dataset.

The Data chapter reads this record instead of the dataset, so its numbers are
traceable to a record carrying the dataset's content hash. Rows hold the image
identity, view, size, the 14 CheXpert codes and the image's boxes (JSON).
"""
from __future__ import annotations

import json

from ..labels import CHEXPERT_CLASSES
from ..records import Run, RunWriter, load_run, spec_hash
from .datasets import load_dataset
from .spec import Field, SpecSchema, StaleSpecError

__all__ = ["SPEC", "resolve_spec", "execute"]

PROTOCOL = "cohort"

SPEC = SpecSchema(PROTOCOL, [
    Field("dataset", str, "demo", doc="dataset name or adapter:path"),
    Field("dataset_sha256", (str, type(None)), None, pin=True, doc="pinned dataset content hash (resolve_spec fills it)"),
])
"""The declared spec (:class:`shovir_core.protocols.spec.SpecSchema`)."""


def resolve_spec(spec: dict) -> dict:
    """Validate (:data:`SPEC`) and pin the dataset's content hash (a pinned hash that no longer
    matches is an error)."""
    out = SPEC.resolve(spec)
    ds = load_dataset(out["dataset"])
    SPEC.pin(out, "dataset_sha256", ds.manifest_hash, what=f"dataset {out['dataset']!r}")
    return out


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """One row per image of the dataset of ``spec`` (resolved); the protocol has no execution-only settings."""
    SPEC.execution(execution)
    ds = load_dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"cohort: dataset {spec['dataset']!r} changed since the spec was resolved")
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

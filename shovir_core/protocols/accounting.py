"""The ``accounting`` protocol: how a ShoViR cohort is counted (the Supplementary's data accounting, §A).

One record per dataset. Its rows (``kind`` column):

``funnel``       one row per step of the cohort funnel (``key``, ``step``, images and boxes left after each
                 filter), recomputed from the raw metadata beside the adapter's input where it is present.
                 MIMIC-CXR (ImaGenome): images of the official test split (``mimic-cxr-2.0.0-split.csv``;
                 frontal when ``mimic-cxr-2.0.0-metadata.csv`` is there too) -> with ImaGenome annotations
                 (:func:`shovir_core.data.mimic.test_split_counts`) -> annotated images -> not only No
                 Finding (``drop_no_finding_only``) -> true-positive filter (``true_positive_filter``)
                 -> in a class subset; PadChest-GR: studies of the release (``grounded_reports_20240819.json``)
                 -> with a box -> mapped abnormal finding boxes -> sentence not negated
                 (:func:`shovir_core.data.padchest.grounded_report_counts`) -> verified samples (the
                 CheXbert sentence validation; the share of boxes it removes is ``counts.boxes_removed_share``)
                 -> with a box -> in a class subset; NIH (demo): images -> with an expert box -> in a class
                 subset. Every dataset ends with the classes that keep at least ``min_count`` images.
``class``        per localisable class: images with a positive label and a box of the class (the
                 per-class evaluation subset), and whether it passes ``min_count``.
``consistency``  per class, the image-level agreement of the dataset labels with the classes of the
                 image's boxes (MIMIC: the paper's cross-source consistency check of original CheXpert
                 labels vs ImaGenome-mapped labels, on the candidates before the true-positive filter):
                 ``tp`` (both), ``fn`` (label only), ``fp`` (box only).
``validation``   the radiologist-validation sample: ``per_class`` images per kept class, drawn by a
                 seeded hash order (reproducible, independent of file order).
``mapping``      the static label lookups the adapters use (NIH -> CheXpert, PadChest -> CheXpert).

Without the raw files (split file, grounded-reports release) the funnel starts at the adapter's input.
"""
from __future__ import annotations

import hashlib
import os

from ..data import Dataset
from ..labels import FINDINGS_13, NIH_TO_CHEXPERT
from ..records import Run, RunWriter, load_run, spec_hash
from .datasets import load_dataset
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = ["resolve_spec", "execute", "SPEC", "DEFAULTS", "PROTOCOL", "funnel_rows", "validation_sample"]

PROTOCOL = "accounting"
SPEC = SpecSchema(PROTOCOL, [
    Field("dataset", str, "demo", doc="demo name or adapter:path (mimic:$SHOVIR_MIMIC, padchest:$SHOVIR_PADCHEST)"),
    Field("min_count", int, 40, range=(1, None), doc="classes with fewer images in their subset are dropped"),
    Field("per_class", int, 5, range=(1, None), doc="radiologist-validation images per kept class"),
    Field("sample_seed", int, 0, range=(0, None)),
    Field("dataset_sha256", (str, type(None)), None, pin=True, doc="pinned dataset content hash"),
])
"""The declared spec (:class:`shovir_core.protocols.spec.SpecSchema`)."""
DEFAULTS = {k: v for k, v in SPEC.defaults.items() if k != "dataset_sha256"}


def _kind(source: str) -> str:
    text = str(source)
    return text.split(":", 1)[0] if ":" in text and text.split(":", 1)[0] in ("mimic", "padchest") else "nih"


def _load(source: str, **kwargs) -> Dataset:
    from ..data import mimic, padchest  # noqa: F401  (register the adapters)

    expanded = os.path.expandvars(source)
    if "$" in expanded:
        raise SpecError(f"accounting: dataset {source!r} names an unset environment variable")
    return load_dataset(expanded, **kwargs)


def resolve_spec(spec: dict) -> dict:
    """Validate (:data:`SPEC`), fill the defaults and pin the dataset's content hash."""
    out = SPEC.resolve(spec)
    ds = _load(out["dataset"])
    SPEC.pin(out, "dataset_sha256", ds.manifest_hash, what=f"dataset {out['dataset']!r}")
    return out


def _subsets(ds: Dataset) -> dict[str, list[str]]:
    boxed = ds.boxes.groupby("finding")["image_id"].apply(set)
    out = {}
    for c in FINDINGS_13:
        if c in ds.labels.columns:
            positive = set(ds.labels.index[ds.labels[c] == 1.0])
            out[c] = sorted(positive & boxed.get(c, set()))
        else:
            out[c] = []
    return out


def _raw_rows(source: str, ds: Dataset) -> tuple[list[dict], dict]:
    """Funnel steps counted from the raw metadata beside the adapter's input, and derived values."""
    from ..data.mimic import test_split_counts
    from ..data.padchest import grounded_report_counts

    kind = _kind(source)
    if kind == "mimic":
        meta = ds.root / "mimic-cxr-2.0.0-metadata.csv"
        c = test_split_counts(ds.root, annotations=ds.extra_files[0],
                              metadata_csv=meta if meta.is_file() else None)
        if c is None:
            return [], {}
        view = "frontal " if c["frontal_only"] else ""
        return ([{"key": "test_split", "step": f"{view}images of the official test split", "images": c["test_images"],
                  "boxes": 0},
                 {"key": "imagenome", "step": "with ImaGenome annotations", "images": c["with_annotations"], "boxes": 0}],
                {"annotated_outside_test": c["annotated_outside_test"]})
    if kind == "padchest":
        c = grounded_report_counts(ds.root, ds)
        if c is None:
            return [], {}
        return ([{"key": "studies", "step": "studies of the release (grounded reports)", "images": c["studies"],
                  "boxes": c["boxes"]},
                 {"key": "with_boxes", "step": "with at least one box", "images": c["with_boxes"], "boxes": c["boxes"]},
                 {"key": "mapped", "step": "abnormal finding boxes mapped to CheXpert (static lookup)",
                  "images": c["candidate_images"], "boxes": c["candidate_boxes"]},
                 {"key": "not_negated", "step": "sentence not negated", "images": c["kept_images"],
                  "boxes": c["kept_boxes"]}],
                {"boxes_removed_share": c["boxes_removed_share"]})
    return [], {}


def funnel_rows(source: str, ds: Dataset, *, min_count: int) -> list[dict]:
    """The funnel of ``ds`` (loaded from ``source``), as rows ``key, step, images, boxes``: the raw-metadata
    steps (:func:`_raw_rows`, where the files are present) and the adapter's own."""
    kind = _kind(source)
    rows = list(_raw_rows(source, ds)[0])
    if kind == "mimic":
        for key, step, kw in (("annotated", "annotated images (ImaGenome)",
                               dict(drop_no_finding_only=False, true_positive_filter=False)),
                              ("no_finding", "not only No Finding",
                               dict(drop_no_finding_only=True, true_positive_filter=False))):
            d = _load(source, **kw)
            rows.append({"key": key, "step": step, "images": int(len(d.images)),
                         "boxes": int(d.boxes["box_id"].nunique())})
        rows.append({"key": "true_positive", "step": "true-positive filter", "images": int(len(ds.images)),
                     "boxes": int(ds.boxes["box_id"].nunique())})
    else:
        first = "verified samples (CheXbert sentence validation)" if kind == "padchest" else "images"
        rows.append({"key": "verified" if kind == "padchest" else "images", "step": first,
                     "images": int(len(ds.images)), "boxes": int(ds.boxes["box_id"].nunique())})
        rows.append({"key": "with_box", "step": "with a box", "images": int(ds.boxes["image_id"].nunique()),
                     "boxes": int(ds.boxes["box_id"].nunique())})
    subsets = _subsets(ds)
    in_any = set().union(*subsets.values())
    kept = {c: ids for c, ids in subsets.items() if len(ids) >= min_count}
    in_kept = set().union(*kept.values()) if kept else set()

    def boxes_of(images, classes):
        b = ds.boxes[ds.boxes["image_id"].isin(images) & ds.boxes["finding"].isin(classes)]
        return int(b["box_id"].nunique())

    rows.append({"key": "in_subset", "step": "in a class subset (positive label and a box of the class)",
                 "images": len(in_any), "boxes": boxes_of(in_any, list(subsets))})
    rows.append({"key": "min_count", "step": f"classes with at least {min_count} images", "images": len(in_kept),
                 "boxes": boxes_of(in_kept, list(kept))})
    return [{"kind": "funnel", "order": k, **r} for k, r in enumerate(rows)]


def _consistency(source: str, ds: Dataset) -> list[dict]:
    cand = _load(source, drop_no_finding_only=True, true_positive_filter=False) if _kind(source) == "mimic" else ds
    boxed = cand.boxes.groupby("image_id")["finding"].apply(set)
    rows = []
    for c in FINDINGS_13:
        label = cand.labels[c] == 1.0
        has_box = cand.labels.index.to_series().map(lambda i: c in boxed.get(i, set()))
        rows.append({"kind": "consistency", "class": c, "tp": int((label & has_box).sum()),
                     "fn": int((label & ~has_box).sum()), "fp": int((~label & has_box).sum()),
                     "images": int(len(cand.labels))})
    return rows


def validation_sample(subsets: dict[str, list[str]], *, per_class: int, seed: int) -> dict[str, list[str]]:
    """``per_class`` images per class in a seeded SHA-256 order (reproducible, file-order independent).

    >>> validation_sample({"Edema": ["a", "b", "c"]}, per_class=2, seed=0) == validation_sample(
    ...     {"Edema": ["c", "b", "a"]}, per_class=2, seed=0)
    True
    """
    def rank(c, i):
        return hashlib.sha256(f"{seed}\x1f{c}\x1f{i}".encode()).hexdigest()

    return {c: sorted(ids, key=lambda i: rank(c, i))[:per_class] for c, ids in subsets.items()}


def _mapping_rows() -> list[dict]:
    from ..data.padchest import PADCHEST_TO_CHEXPERT

    rows = [{"kind": "mapping", "source": "NIH ChestX-ray14", "source_label": k, "chexpert": v or ""}
            for k, v in sorted(NIH_TO_CHEXPERT.items())]
    rows += [{"kind": "mapping", "source": "PadChest", "source_label": k, "chexpert": v}
             for k, v in sorted(PADCHEST_TO_CHEXPERT.items())]
    return rows


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Count the cohort of ``spec`` (resolved) into one record (``execution``: none are declared)."""
    ds = _load(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"accounting: dataset {spec['dataset']!r} changed while resolving the spec")
    subsets = _subsets(ds)
    kept = {c: ids for c, ids in subsets.items() if len(ids) >= spec["min_count"]}
    rows = funnel_rows(spec["dataset"], ds, min_count=spec["min_count"])
    rows += [{"kind": "class", "class": c, "images": len(ids), "kept": len(ids) >= spec["min_count"]}
             for c, ids in subsets.items()]
    rows += _consistency(spec["dataset"], ds)
    sample = validation_sample(kept, per_class=spec["per_class"], seed=spec["sample_seed"])
    rows += [{"kind": "validation", "class": c, "image_id": i, "rank": k}
             for c, ids in sample.items() for k, i in enumerate(ids)]
    rows += _mapping_rows()
    for k, r in enumerate(rows):
        r["trial_id"] = f"{r['kind']}|{k:05d}"
    columns = ["trial_id", "kind", "order", "key", "step", "images", "boxes", "class", "kept", "tp", "fn", "fp",
               "image_id", "rank", "source", "source_label", "chexpert"]
    rows = [{c: r.get(c) for c in columns} for r in rows]
    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), seeds={"sample": spec["sample_seed"]},
                   credentialed=ds.credentialed) as writer:
        if not writer.is_complete:
            writer.append(rows)
            writer.complete(n_images=int(len(ds.images)), n_classes_kept=len(kept), **_raw_rows(spec["dataset"], ds)[1])
    return load_run(PROTOCOL, name, spec_hash(spec))

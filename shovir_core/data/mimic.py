"""Adapter for MIMIC-CXR-JPG test images with Chest ImaGenome-derived boxes (ShoViR).

Input: the ShoViR reference repository's ImaGenome metadata file
(arco-group/ShoViR-Bench ``imagenome_annotations.json``@76cceca, at the repository root), a dict
keyed by DICOM id whose values are::

    {"img_path": "pXX/p<subject>/s<study>/<dicom>.jpg",   # relative to MIMIC-CXR-JPG files/
     "report":   "<raw report text>",
     "labels":   [14 ints in CheXbert order; 0 blank, 1 positive, 2 negative, 3 uncertain],
     "regions":  [{"anatomy": "right lung", "bbox": [x1, y1, x2, y2],   # native pixels
                   "findings": ["Atelectasis", "Lung Opacity"]}, ...]}

and the MIMIC-CXR-JPG ``files/`` folder. One ImaGenome anatomical box can
carry several CheXpert classes; it becomes one box row per class (same
coordinates), so :func:`shovir_core.perturb.box_sets` drops the sibling rows of
a target box from ``B_c̄`` by the IoU rule.

The paper's cohort filters (ShoViR §3.1) are options:
``drop_no_finding_only`` removes images whose only positive class is No
Finding, and ``true_positive_filter`` keeps an image only when every positive
CheXpert finding is confirmed by at least one region carrying it.

Records made from this dataset are credentialed (``credentialed=True``): the
book renders aggregates only and the data never enters the repository.

Citation: Johnson AEW et al., "MIMIC-CXR-JPG, a large publicly available
database of labeled chest radiographs", arXiv:1901.07042 (PhysioNet, v2.1.0);
Wu JT et al., "Chest ImaGenome Dataset for clinical reasoning", NeurIPS
Datasets and Benchmarks 2021 (PhysioNet, v1.0.0).
Licence: PhysioNet Credentialed Health Data License 1.5.0 (credentialed access,
signed data-use agreement).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, FINDINGS_13
from .checks import at, bbox4, check_image_file, need_list, read_csv, read_json, unknown_name
from .schema import BOX_COLUMNS, Dataset, DatasetError

__all__ = [
    "load_mimic_imagenome", "CHEXBERT_CODES", "decode_chexbert_codes", "MIMIC_SPLIT_CSV", "test_split_counts",
    "MIMIC_CITATION", "MIMIC_LICENCE",
]

MIMIC_CITATION = (
    "Johnson AEW, Pollard TJ, Greenbaum NR, et al. MIMIC-CXR-JPG, a large publicly available database of "
    "labeled chest radiographs. arXiv:1901.07042 (PhysioNet, v2.1.0). Wu JT, Agu NN, Lourentzou I, et al. "
    "Chest ImaGenome Dataset for Clinical Reasoning. NeurIPS Datasets and Benchmarks 2021 (PhysioNet)."
)
MIMIC_LICENCE = "PhysioNet Credentialed Health Data License 1.5.0 (credentialed access; data-use agreement)"

CHEXBERT_CODES: dict[int, float] = {0: np.nan, 1: 1.0, 2: 0.0, 3: -1.0}
"""The reference metadata's label codes -> CheXpert codes (blank, positive, negative, uncertain)."""

MIMIC_SPLIT_CSV = "mimic-cxr-2.0.0-split.csv"
"""MIMIC-CXR-JPG's split file (``dicom_id, study_id, subject_id, split``; ``.gz`` also read), optional beside
the annotations: with it the cohort funnel starts at the official test split (ShoViR §3.1)."""

_PATH = re.compile(r"(?:^|/)p[0-9]{2}/p(?P<patient>[0-9]+)/s(?P<study>[0-9]+)/(?P<dicom>[^/]+)\.jpg$")


def decode_chexbert_codes(codes, *, where: str) -> list[float]:
    """14 CheXbert-order ints (0 blank, 1 pos, 2 neg, 3 uncertain) -> CheXpert codes (NaN, 1, 0, -1).

    >>> decode_chexbert_codes([1, 2, 3, 0] + [0] * 10, where="x")[:4]
    [1.0, 0.0, -1.0, nan]
    """
    if not isinstance(codes, list) or len(codes) != len(CHEXPERT_CLASSES):
        raise DatasetError(f"{where}: 'labels' must be a list of {len(CHEXPERT_CLASSES)} ints in CheXbert order, "
                           f"got {codes!r}")
    out = []
    for i, c in enumerate(codes):
        if isinstance(c, bool) or not isinstance(c, int) or c not in CHEXBERT_CODES:
            raise DatasetError(f"{where}: label {CHEXPERT_CLASSES[i]!r} has code {c!r}; expected 0, 1, 2 or 3")
        out.append(CHEXBERT_CODES[c])
    return out


def _view_table(metadata_csv: Path | None, name: str = "mimic") -> dict[str, str]:
    if metadata_csv is None:
        return {}
    meta = read_csv(metadata_csv, name=name, usecols=lambda c: c in ("dicom_id", "ViewPosition"), dtype=str)
    if not {"dicom_id", "ViewPosition"} <= set(meta.columns):
        raise DatasetError(f"mimic: {metadata_csv} needs columns dicom_id and ViewPosition "
                           "(mimic-cxr-2.0.0-metadata.csv)")
    return dict(zip(meta["dicom_id"].astype(str), meta["ViewPosition"].fillna("unknown").astype(str)))


def _split_file(root: Path, split_csv: str | Path | None) -> Path | None:
    if split_csv is None:
        return None
    for candidate in (root / split_csv, root / f"{split_csv}.gz"):
        if candidate.is_file():
            return candidate
    return None


def test_split_counts(root: str | Path, *, annotations: str | Path = "imagenome_annotations.json",
                      split_csv: str | Path = MIMIC_SPLIT_CSV, metadata_csv: str | Path | None = None,
                      name: str = "mimic-imagenome") -> dict | None:
    """The first steps of ShoViR's MIMIC-CXR funnel (§3.1), counted from the split file and the annotations.

    ``test_images``: images of the official test split (``split == "test"``; with ``metadata_csv`` only
    frontal ones, ``ViewPosition`` PA or AP); ``with_annotations``: those with an entry in the ImaGenome
    annotations file; ``annotated_outside_test``: annotation entries that are not such test images.
    ``None`` when the split file is absent (the funnel then starts at the annotations).

    Raises
    ------
    DatasetError
        When the split file lacks ``dicom_id`` or ``split``.
    """
    root = Path(root)
    path = _split_file(root, split_csv)
    if path is None:
        return None
    split = read_csv(path, name=name, dtype=str, keep_default_na=False)
    missing = [c for c in ("dicom_id", "split") if c not in split.columns]
    if missing:
        raise DatasetError(f"{name}: {path} lacks columns {missing} ({MIMIC_SPLIT_CSV})")
    test = set(split.loc[split["split"].str.strip() == "test", "dicom_id"].str.strip())
    frontal_only = False
    if metadata_csv is not None:
        views = _view_table(root / metadata_csv, name)
        test = {d for d in test if views.get(d, "").strip().upper() in ("PA", "AP")}
        frontal_only = True
    raw = read_json(root / annotations, name=name)
    annotated = set(raw) if isinstance(raw, dict) else set()
    return {"test_images": len(test), "with_annotations": len(test & annotated),
            "annotated_outside_test": len(annotated - test), "frontal_only": frontal_only,
            "split_file": str(path)}


def load_mimic_imagenome(root: str | Path, *, annotations: str | Path = "imagenome_annotations.json",
                         files_dir: str | Path = "files", metadata_csv: str | Path | None = None,
                         drop_no_finding_only: bool = True, true_positive_filter: bool = True,
                         clip_boxes: bool = False, name: str = "mimic-imagenome") -> Dataset:
    """Load MIMIC-CXR-JPG images with ImaGenome-derived boxes.

    Parameters
    ----------
    root : path
        Folder holding the annotations file and the MIMIC-CXR-JPG ``files/``
        folder (both may be given elsewhere as absolute paths).
    annotations : path
        The ImaGenome metadata JSON (relative to ``root`` unless absolute).
    files_dir : path
        MIMIC-CXR-JPG ``files/`` (relative to ``root`` unless absolute);
        ``img_path`` values are resolved against it.
    metadata_csv : path, optional
        ``mimic-cxr-2.0.0-metadata.csv`` for the view position; without it the
        view is ``"frontal"`` (the reference cohort holds frontal images only).
    drop_no_finding_only, true_positive_filter : bool
        The paper's cohort filters (see the module docstring).
    clip_boxes : bool
        Clip boxes that extend beyond the image to its edges (default: refuse them).
    name : str
        Dataset name recorded in run manifests.

    Returns
    -------
    Dataset
        ``credentialed=True``; ``reports`` indexed by study id; ``images`` has the
        extra column ``dicom_id``.

    Raises
    ------
    DatasetError
        Naming the file, the image (row) and the field of any bad value: a missing field or a null
        where a list is expected, a null report, labels that are not 14 codes, an unknown finding name, a bbox that
        is not four finite numbers, inverted, empty or (without ``clip_boxes``) outside the image, an
        image file that is missing or does not decode.
    """
    root = Path(root)  # relative file arguments live under root; absolute ones stand alone (pathlib)
    ann_path = root / annotations
    files = root / files_dir
    if not ann_path.is_file():
        raise DatasetError(f"{name}: annotations file not found: {ann_path}")
    if not files.is_dir():
        raise DatasetError(f"{name}: MIMIC-CXR-JPG files/ folder not found: {files}")
    raw = read_json(ann_path, name=name)
    if not isinstance(raw, dict):
        raise DatasetError(f"{name}: {ann_path} must hold a dict keyed by DICOM id")
    meta_path = None
    if metadata_csv is not None:
        meta_path = root / metadata_csv
    views = _view_table(meta_path, name)

    images, boxes, labels, reports = [], [], {}, {}
    for dicom, entry in raw.items():
        where = at(name, ann_path, dicom)
        if not isinstance(entry, dict):
            raise DatasetError(f"{where}: the entry must be a dict with img_path, labels and regions, got {entry!r}")
        for key in ("img_path", "labels", "regions"):
            if key not in entry:
                raise DatasetError(f"{where}: entry lacks {key!r}")
        if not isinstance(entry["img_path"], str):
            raise DatasetError(f"{at(name, ann_path, dicom, 'img_path')}: expected a path string, "
                               f"got {entry['img_path']!r}")
        m = _PATH.search(entry["img_path"])
        if m is None or m.group("dicom") != dicom:
            raise DatasetError(f"{at(name, ann_path, dicom, 'img_path')}: {entry['img_path']!r} is not "
                               f"pXX/p<patient>/s<study>/{dicom}.jpg")
        codes = decode_chexbert_codes(entry["labels"], where=at(name, ann_path, dicom, "labels"))
        regions = need_list(entry["regions"], where=at(name, ann_path, dicom, "regions"),
                            what="a list of regions ([] for none)")
        region_findings = set()
        for k, region in enumerate(regions):
            rwhere = at(name, ann_path, dicom, f"regions[{k}]")
            if not isinstance(region, dict):
                raise DatasetError(f"{rwhere}: expected a dict with anatomy, bbox and findings, got {region!r}")
            found = need_list(region.get("findings", []), where=at(name, ann_path, dicom, f"regions[{k}].findings"),
                              what="a list of CheXpert classes ([] for none)")
            for finding in found:
                if finding not in FINDINGS_13:
                    raise unknown_name(finding, FINDINGS_13, where=at(name, ann_path, dicom, f"regions[{k}].findings"),
                                       what="localisable CheXpert class")
            region_findings.update(found)
        if "report" in entry and entry["report"] is None:
            raise DatasetError(f"{at(name, ann_path, dicom, 'report')}: the report is null; every image of the "
                               "cohort needs its report text (the reference for the report metrics)")
        if entry.get("report") is not None and not isinstance(entry["report"], str):
            raise DatasetError(f"{at(name, ann_path, dicom, 'report')}: expected text, got {entry['report']!r}")
        positives = {c for c, v in zip(CHEXPERT_CLASSES, codes) if v == 1.0}
        if drop_no_finding_only and positives <= {"No Finding"}:
            continue
        if true_positive_filter and not (positives & set(FINDINGS_13)) <= region_findings:
            continue
        path = files / entry["img_path"]
        width, height = check_image_file(path, where=f"{name}: image {dicom!r}")
        study = f"s{m.group('study')}"
        images.append({
            "image_id": dicom, "study_id": study, "patient_id": f"p{m.group('patient')}",
            "view": views.get(dicom, "frontal"), "path": str(path.resolve()),
            "width": int(width), "height": int(height), "dicom_id": dicom,
        })
        labels[dicom] = codes
        if entry.get("report") is not None:
            reports[study] = str(entry["report"])
        for k, region in enumerate(regions):
            found = region.get("findings") or []
            if not found:
                continue
            x1, y1, x2, y2 = bbox4(region.get("bbox"), where=at(name, ann_path, dicom, f"regions[{k}].bbox"),
                                   width=width, height=height, clip=clip_boxes)
            for finding in found:
                boxes.append({"image_id": dicom, "box_id": f"{dicom}#{k}", "finding": finding,
                              "x1": x1, "y1": y1, "x2": x2, "y2": y2,
                              "source_label": str(region.get("anatomy", "unspecified"))})
    if not images:
        raise DatasetError(f"{name}: no image of {ann_path} passes the cohort filters")
    image_df = pd.DataFrame(images)
    box_df = pd.DataFrame(boxes, columns=list(BOX_COLUMNS))
    label_df = pd.DataFrame.from_dict(labels, orient="index", columns=list(CHEXPERT_CLASSES))
    label_df.index.name = "image_id"
    report_df = pd.DataFrame({"text": pd.Series(reports, dtype=object)})
    report_df.index.name = "study_id"
    split_path = _split_file(root, MIMIC_SPLIT_CSV)  # the funnel's first step reads it: part of the identity
    extra = (ann_path,) + ((meta_path,) if meta_path is not None else ()) + ((split_path,) if split_path else ())
    return Dataset(name=name, root=root, images=image_df, boxes=box_df, labels=label_df,
                   reports=report_df, credentialed=True, citation=MIMIC_CITATION,
                   licence=MIMIC_LICENCE, extra_files=extra)


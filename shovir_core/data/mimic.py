"""Adapter for MIMIC-CXR-JPG test images with Chest ImaGenome-derived boxes (ShoViR).

Input: the ShoViR reference repository's ImaGenome metadata file
(arco-group/ShoViR-Bench ``imagenome_annotations.json``@76cceca, at the repository root), a dict
keyed by DICOM id whose values are::

    {"img_path": "p10/p10000032/s50414267/<dicom>.jpg",   # relative to MIMIC-CXR-JPG files/
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

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from ..labels import CHEXPERT_CLASSES, FINDINGS_13
from .schema import BOX_COLUMNS, Dataset, DatasetError

__all__ = [
    "load_mimic_imagenome", "CHEXBERT_CODES", "decode_chexbert_codes",
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

_PATH = re.compile(r"(?:^|/)p\d{2}/p(?P<patient>\d+)/s(?P<study>\d+)/(?P<dicom>[^/]+)\.jpg$")


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
        if c not in CHEXBERT_CODES:
            raise DatasetError(f"{where}: label {CHEXPERT_CLASSES[i]!r} has code {c!r}; expected 0, 1, 2 or 3")
        out.append(CHEXBERT_CODES[c])
    return out


def _view_table(metadata_csv: Path | None) -> dict[str, str]:
    if metadata_csv is None:
        return {}
    meta = pd.read_csv(metadata_csv, usecols=lambda c: c in ("dicom_id", "ViewPosition"))
    if not {"dicom_id", "ViewPosition"} <= set(meta.columns):
        raise DatasetError(f"mimic: {metadata_csv} needs columns dicom_id and ViewPosition "
                           "(mimic-cxr-2.0.0-metadata.csv)")
    return dict(zip(meta["dicom_id"].astype(str), meta["ViewPosition"].fillna("unknown").astype(str)))


def load_mimic_imagenome(root: str | Path, *, annotations: str | Path = "imagenome_annotations.json",
                         files_dir: str | Path = "files", metadata_csv: str | Path | None = None,
                         drop_no_finding_only: bool = True, true_positive_filter: bool = True,
                         name: str = "mimic-imagenome") -> Dataset:
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
    name : str
        Dataset name recorded in run manifests.

    Returns
    -------
    Dataset
        ``credentialed=True``; ``reports`` indexed by study id; ``images`` has the
        extra column ``dicom_id``.
    """
    root = Path(root)  # relative file arguments live under root; absolute ones stand alone (pathlib)
    ann_path = root / annotations
    files = root / files_dir
    if not ann_path.is_file():
        raise DatasetError(f"{name}: annotations file not found: {ann_path}")
    if not files.is_dir():
        raise DatasetError(f"{name}: MIMIC-CXR-JPG files/ folder not found: {files}")
    raw = json.loads(ann_path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise DatasetError(f"{name}: {ann_path} must hold a dict keyed by DICOM id")
    meta_path = None
    if metadata_csv is not None:
        meta_path = root / metadata_csv
    views = _view_table(meta_path)

    images, boxes, labels, reports = [], [], {}, {}
    for dicom, entry in raw.items():
        where = f"{name}: image {dicom!r}"
        for key in ("img_path", "labels", "regions"):
            if key not in entry:
                raise DatasetError(f"{where}: entry lacks {key!r}")
        m = _PATH.search(str(entry["img_path"]))
        if m is None or m.group("dicom") != dicom:
            raise DatasetError(f"{where}: img_path {entry['img_path']!r} is not pXX/p<patient>/s<study>/{dicom}.jpg")
        codes = decode_chexbert_codes(entry["labels"], where=where)
        positives = {c for c, v in zip(CHEXPERT_CLASSES, codes) if v == 1.0}
        region_findings = set()
        for region in entry["regions"]:
            region_findings.update(region.get("findings") or [])
        if drop_no_finding_only and positives <= {"No Finding"}:
            continue
        if true_positive_filter and not (positives & set(FINDINGS_13)) <= region_findings:
            continue
        path = files / entry["img_path"]
        if not path.is_file():
            raise DatasetError(f"{where}: file not found: {path}")
        with Image.open(path) as im:
            width, height = im.size
        study = f"s{m.group('study')}"
        images.append({
            "image_id": dicom, "study_id": study, "patient_id": f"p{m.group('patient')}",
            "view": views.get(dicom, "frontal"), "path": str(path.resolve()),
            "width": int(width), "height": int(height), "dicom_id": dicom,
        })
        labels[dicom] = codes
        if entry.get("report") is not None:
            reports[study] = str(entry["report"])
        for k, region in enumerate(entry["regions"]):
            bbox = region.get("bbox")
            if not isinstance(bbox, list) or len(bbox) != 4:
                raise DatasetError(f"{where}: region {k} ({region.get('anatomy')!r}) has bbox {bbox!r}; "
                                   "expected [x1, y1, x2, y2] in pixels")
            x1, y1, x2, y2 = (float(v) for v in bbox)
            x1, x2 = sorted((max(0.0, x1), min(float(width), x2)))
            y1, y2 = sorted((max(0.0, y1), min(float(height), y2)))
            for finding in region.get("findings") or []:
                if finding not in FINDINGS_13:
                    raise DatasetError(f"{where}: region {k} has finding {finding!r}, not a localisable "
                                       f"CheXpert class")
                boxes.append({"image_id": dicom, "box_id": f"{dicom}#{k}", "finding": finding,
                              "x1": x1, "y1": y1, "x2": x2, "y2": y2,
                              "source_label": str(region.get("anatomy", "unspecified"))})
    if not images:
        raise DatasetError(f"{name}: no image of {ann_path} passes the cohort filters")
    image_df = pd.DataFrame(images)
    box_df = pd.DataFrame(boxes, columns=list(BOX_COLUMNS))
    box_df = box_df[(box_df["x2"] > box_df["x1"]) & (box_df["y2"] > box_df["y1"])].reset_index(drop=True)
    label_df = pd.DataFrame.from_dict(labels, orient="index", columns=list(CHEXPERT_CLASSES))
    label_df.index.name = "image_id"
    report_df = pd.DataFrame({"text": pd.Series(reports, dtype=object)})
    report_df.index.name = "study_id"
    extra = (ann_path,) + ((meta_path,) if meta_path is not None else ())
    return Dataset(name=name, root=root, images=image_df, boxes=box_df, labels=label_df,
                   reports=report_df, credentialed=True, citation=MIMIC_CITATION,
                   licence=MIMIC_LICENCE, extra_files=extra)


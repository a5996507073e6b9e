"""Adapter for PadChest-GR verified samples (ShoViR).

Input: the ShoViR reference repository's ``verified_samples.json`` (written by arco-group/ShoViR-Bench
``src/analysis/organize_by_chexpert_label.py``@0b64367 to ``data/padchest-gr/chexpert-by-label/``),
a dict keyed by ImageID whose values are::

    {"img_path": "<ImageID>.png",                 # relative to the PadChest-GR image folder
     "report":   "<English sentences of the abnormal findings>",
     "labels":   [14 ints in CheXbert order; 0 blank, 1 positive, 2 negative, 3 uncertain],
     "chexbert_labels": [...],                    # CheXbert on the report (not used here)
     "regions":  [{"anatomy": "...", "bbox": [[x1, y1, x2, y2], ...],   # normalised to [0, 1]
                   "findings": ["pleural effusion"],                    # PadChest labels
                   "chexpert_categories": ["Pleural Effusion"],         # verified classes
                   "sentence": "...", "labels": [...]}, ...]}

A region stores a *list* of normalised boxes; each box becomes one box row per
verified CheXpert category, in pixels of the stored image. When a region lacks
``chexpert_categories`` its PadChest ``findings`` are mapped through
:data:`PADCHEST_TO_CHEXPERT` (the static lookup of the reference code,
``padchest_to_chexpert_mapping.py``@d331cef; 69 PadChest labels), without the CheXbert
sentence validation the verified file already carries.

Patient and study ids come from an optional PadChest-GR metadata CSV
(``ImageID, PatientID, StudyID`` and optionally ``Projection``); without it
each image is its own study and patient.

Records made from this dataset are credentialed (``credentialed=True``).

Citation: Castro DC et al., "PadChest-GR: a bilingual chest X-ray dataset for
grounded radiology report generation", NEJM AI 2025; Bustos A et al.,
"PadChest: a large chest x-ray image dataset with multi-label annotated
reports", Medical Image Analysis 2020.
Licence: PadChest-GR research data-use agreement (BIMCV; credentialed access).
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..labels import CHEXPERT_CLASSES, FINDINGS_13
from .checks import at, check_image_file, need_list, number, read_csv, read_json, unknown_name
from .mimic import decode_chexbert_codes
from .schema import BOX_COLUMNS, Dataset, DatasetError

__all__ = ["load_padchest_gr", "PADCHEST_TO_CHEXPERT", "padchest_to_chexpert", "PADCHEST_CITATION",
           "PADCHEST_LICENCE", "GROUNDED_REPORTS", "grounded_report_counts", "NEGATION"]

PADCHEST_CITATION = (
    "Castro DC, Bustos A, Bannur S, et al. PadChest-GR: a bilingual chest X-ray dataset for grounded "
    "radiology report generation. NEJM AI 2025. Bustos A, Pertusa A, Salinas JM, de la Iglesia-Vaya M. "
    "PadChest: a large chest x-ray image dataset with multi-label annotated reports. Med Image Anal 2020."
)
PADCHEST_LICENCE = "PadChest-GR research data-use agreement (BIMCV; credentialed access)"

_MAP = {
    "Atelectasis": ["atelectasis", "atelectasis basal", "laminar atelectasis", "lobar atelectasis",
                    "segmental atelectasis", "total atelectasis"],
    "Cardiomegaly": ["cardiomegaly"],
    "Consolidation": ["consolidation", "alveolar pattern"],
    "Edema": ["hilar congestion", "kerley lines", "ground glass pattern"],
    "Enlarged Cardiomediastinum": ["mediastinal enlargement", "superior mediastinal enlargement",
                                   "mediastinic lipomatosis", "aortic button enlargement"],
    "Fracture": ["fracture", "callus rib fracture", "rib fracture", "clavicle fracture", "humeral fracture",
                 "vertebral fracture", "vertebral compression", "vertebral anterior compression"],
    "Lung Lesion": ["nodule", "multiple nodules", "mass", "pulmonary mass", "calcified granuloma",
                    "granuloma", "cavitation", "cyst", "abscess"],
    "Lung Opacity": ["increased density", "infiltrates", "interstitial pattern", "reticular interstitial pattern",
                     "reticulonodular interstitial pattern", "miliary opacities", "air bronchogram"],
    "Pleural Effusion": ["pleural effusion", "loculated pleural effusion", "loculated fissural effusion",
                         "hydropneumothorax"],
    "Pleural Other": ["pleural thickening", "apical pleural thickening", "calcified pleural thickening",
                      "calcified pleural plaques", "fissure thickening", "major fissure thickening",
                      "minor fissure thickening", "costophrenic angle blunting", "pleural mass"],
    "Pneumothorax": ["pneumothorax"],
    "Support Devices": ["pacemaker", "dual chamber device", "single chamber device", "nsg tube",
                        "endotracheal tube", "tracheostomy tube", "chest drain tube", "central venous catheter",
                        "central venous catheter via jugular vein", "central venous catheter via subclavian vein",
                        "reservoir central venous catheter", "catheter", "electrical device",
                        "ventriculoperitoneal drain tube", "gastrostomy tube"],
}
PADCHEST_TO_CHEXPERT: dict[str, str] = {label: cls for cls, labels in _MAP.items() for label in labels}
"""PadChest finding label (lower case) -> CheXpert class: the reference code's static lookup
(arco-group/ShoViR-Bench ``src/pre-analysis/padchest/preprocessing/padchest_to_chexpert_mapping.py``@d331cef;
69 of 154 labels, ShoViR §3.1). Pneumonia has no PadChest counterpart."""


def padchest_to_chexpert(label: str) -> str | None:
    """The CheXpert class of a PadChest label (case-insensitive), ``None`` when unmapped.

    >>> padchest_to_chexpert("Loculated pleural effusion")
    'Pleural Effusion'
    >>> padchest_to_chexpert("scoliosis") is None
    True
    """
    return PADCHEST_TO_CHEXPERT.get(str(label).strip().lower())


GROUNDED_REPORTS = "grounded_reports_20240819.json"
"""PadChest-GR's grounded reports (the release file the authors' pipeline reads,
arco-group/ShoViR-Bench ``src/analysis/organize_by_chexpert_label.py``@0b64367): a list of studies
``{"ImageID": ..., "findings": [{"abnormal", "sentence_en", "boxes": [[x1, y1, x2, y2], ...], "labels",
"locations"}, ...]}``. Optional beside ``verified_samples.json``: with it the funnel starts at the
release (ShoViR §3.1: 4,555 studies, 3,008 with boxes, the CheXbert sentence validation's removals)."""

NEGATION = re.compile(r"\bno\b|\bnot\b|\bwithout\b|\babsent\b")
"""The authors' negation rule for a finding sentence (``organize_by_chexpert_label.py``@0b64367, described
in its ``NegationDetector``): a sentence matching it is dropped before the sentence validation."""


def grounded_report_counts(root: str | Path, ds: "Dataset | None" = None, *,
                           grounded_reports: str | Path = GROUNDED_REPORTS, name: str = "padchest-gr") -> dict | None:
    """The first steps of ShoViR's PadChest-GR funnel (§3.1), counted from the grounded-reports release.

    ``studies`` (entries of the release) and ``boxes`` (every box); ``with_boxes`` (studies with at least one
    box); ``candidate_*``: abnormal findings with boxes whose PadChest labels map to a CheXpert class through
    :data:`PADCHEST_TO_CHEXPERT` (the authors' pipeline also adds classes CheXbert reads in the text "The
    patient has <label>.", which needs the CheXbert weights and is not counted here); ``kept_*``: those whose
    English sentence is not negated (:data:`NEGATION`). With ``ds`` (the loaded verified samples):
    ``verified_images`` / ``verified_boxes`` (boxes of ``ds``) and ``boxes_removed_share`` = 1 − verified
    boxes / kept candidate boxes, the share the CheXbert sentence validation removes (the paper's 35.3 %).
    ``None`` when the release file is absent.
    """
    path = Path(root) / grounded_reports
    if not path.is_file():
        return None
    raw = read_json(path, name=name, what="grounded reports")
    if not isinstance(raw, list):
        raise DatasetError(f"{name}: {path} must hold a list of studies (ImageID, findings)")
    out = {"studies": len(raw), "boxes": 0, "with_boxes": 0, "candidate_images": 0, "candidate_boxes": 0,
           "kept_images": 0, "kept_boxes": 0}
    for k, study in enumerate(raw):
        where = at(name, path, study.get("ImageID", k) if isinstance(study, dict) else k)
        findings = need_list(study.get("findings", []) if isinstance(study, dict) else None,
                             where=f"{where}, field 'findings'", what="a list of findings")
        n_boxes = cand = kept = 0
        for f in findings:
            boxes = f.get("boxes") or [] if isinstance(f, dict) else []
            n_boxes += len(boxes)
            if not boxes or not f.get("abnormal", False):
                continue
            if not any(padchest_to_chexpert(label) for label in f.get("labels") or []):
                continue
            cand += len(boxes)
            if not NEGATION.search(str(f.get("sentence_en") or "").lower()):
                kept += len(boxes)
        out["boxes"] += n_boxes
        out["with_boxes"] += int(n_boxes > 0)
        out["candidate_boxes"] += cand
        out["candidate_images"] += int(cand > 0)
        out["kept_boxes"] += kept
        out["kept_images"] += int(kept > 0)
    if ds is not None:
        out["verified_images"] = int(len(ds.images))
        out["verified_boxes"] = int(ds.boxes["box_id"].nunique())
        out["boxes_removed_share"] = (1.0 - out["verified_boxes"] / out["kept_boxes"]) if out["kept_boxes"] else float("nan")
    return out


def _meta_table(metadata_csv: Path | None, name: str) -> pd.DataFrame | None:
    if metadata_csv is None:
        return None
    meta = read_csv(metadata_csv, name=name, dtype=str, keep_default_na=False)
    need = {"ImageID", "PatientID", "StudyID"}
    if not need <= set(meta.columns):
        raise DatasetError(f"{name}: {metadata_csv} lacks columns {sorted(need - set(meta.columns))}")
    for col in sorted(need):
        blank = meta.index[meta[col].str.strip() == ""]
        if len(blank):
            raise DatasetError(f"{at(name, metadata_csv, int(blank[0]) + 2, col)}: empty value "
                               "(rows counted from the header line, 1)")
    return meta.drop_duplicates("ImageID").set_index("ImageID")


def _region_classes(region: dict, where) -> list[str]:
    """``where(field)`` names the file, the image and the field (``regions[k].<field>``)."""
    if "chexpert_categories" in region:
        classes = need_list(region["chexpert_categories"], where=where("chexpert_categories"),
                            what="a list of CheXpert classes ([] for none)")
    else:
        findings = need_list(region.get("findings", []), where=where("findings"),
                             what="a list of PadChest labels ([] for none)")
        bad = [f for f in findings if not isinstance(f, str)]
        if bad:
            raise DatasetError(f"{where('findings')}: {bad[0]!r} is not a PadChest label")
        classes = sorted({c for c in map(padchest_to_chexpert, findings) if c})
    for c in classes:
        if c not in FINDINGS_13:
            raise unknown_name(c, FINDINGS_13, where=where("chexpert_categories"), what="localisable CheXpert class")
    return list(classes)


def load_padchest_gr(root: str | Path, *, samples: str | Path = "verified_samples.json",
                     images_dir: str | Path = "images", metadata_csv: str | Path | None = None,
                     name: str = "padchest-gr") -> Dataset:
    """Load PadChest-GR verified samples.

    Parameters
    ----------
    root : path
        Folder holding the samples file and the image folder.
    samples : path
        ``verified_samples.json`` (relative to ``root`` unless absolute).
    images_dir : path
        Folder the ``img_path`` values are relative to.
    metadata_csv : path, optional
        PadChest-GR metadata with ``ImageID, PatientID, StudyID`` (and
        ``Projection`` for the view).
    name : str
        Dataset name recorded in run manifests.

    Returns
    -------
    Dataset
        ``credentialed=True``; boxes in pixels of the stored PNG; ``reports``
        indexed by study id.
    """
    root = Path(root)  # relative file arguments live under root; absolute ones stand alone (pathlib)
    samples_path = root / samples
    img_root = root / images_dir
    if not samples_path.is_file():
        raise DatasetError(f"{name}: samples file not found: {samples_path}")
    raw = read_json(samples_path, name=name, what="samples file")
    if not isinstance(raw, dict):
        raise DatasetError(f"{name}: {samples_path} must hold a dict keyed by ImageID")
    meta_path = None
    if metadata_csv is not None:
        meta_path = root / metadata_csv
    meta = _meta_table(meta_path, name)

    images, boxes, labels, reports, sentences = [], [], {}, {}, []
    for image_id, entry in raw.items():
        where = at(name, samples_path, image_id)
        if not isinstance(entry, dict):
            raise DatasetError(f"{where}: the entry must be a dict with img_path, labels and regions, got {entry!r}")
        for key in ("img_path", "labels", "regions"):
            if key not in entry:
                raise DatasetError(f"{where}: entry lacks {key!r}")
        if not isinstance(entry["img_path"], str) or not entry["img_path"].strip():
            raise DatasetError(f"{at(name, samples_path, image_id, 'img_path')}: expected a file name, "
                               f"got {entry['img_path']!r}")
        if entry.get("report") is not None and not isinstance(entry["report"], str):
            raise DatasetError(f"{at(name, samples_path, image_id, 'report')}: expected text, got {entry['report']!r}")
        regions = need_list(entry["regions"], where=at(name, samples_path, image_id, "regions"),
                            what="a list of regions ([] for none)")
        path = img_root / entry["img_path"]
        width, height = check_image_file(path, where=f"{name}: image {image_id!r}")
        if meta is not None:
            if image_id not in meta.index:
                raise DatasetError(f"{where}: not in the metadata CSV {meta_path}")
            row = meta.loc[image_id]
            patient, study = str(row["PatientID"]), str(row["StudyID"])
            view = (str(row["Projection"]).strip() or "unknown") if "Projection" in meta.columns else "frontal"
        else:
            patient = study = str(image_id)
            view = "frontal"
        images.append({"image_id": str(image_id), "study_id": study, "patient_id": patient, "view": view,
                       "path": str(path.resolve()), "width": int(width), "height": int(height)})
        labels[str(image_id)] = decode_chexbert_codes(entry["labels"], where=at(name, samples_path, image_id, "labels"))
        if entry.get("report") is not None:
            reports[study] = str(entry["report"])
        for k, region in enumerate(regions):
            rfield = f"regions[{k}]"
            if not isinstance(region, dict):
                raise DatasetError(f"{at(name, samples_path, image_id, rfield)}: expected a dict, got {region!r}")
            if isinstance(region.get("sentence"), str) and region["sentence"].strip():
                sentences.append({"image_id": str(image_id), "region": k, "text": region["sentence"]})
            bbs = region.get("bbox")
            if isinstance(bbs, list) and len(bbs) == 4 and not any(isinstance(v, list) for v in bbs):
                bbs = [bbs]
            if not isinstance(bbs, list) or not bbs:
                raise DatasetError(f"{at(name, samples_path, image_id, rfield + '.bbox')}: expected a list of "
                                   f"normalised [x1, y1, x2, y2], got {'null' if bbs is None else repr(bbs)}")
            classes = _region_classes(region, lambda f, _k=rfield: at(name, samples_path, image_id, f"{_k}.{f}"))
            for j, bb in enumerate(bbs):
                bwhere = at(name, samples_path, image_id, f"{rfield}.bbox[{j}]")
                if not isinstance(bb, list) or len(bb) != 4:
                    raise DatasetError(f"{bwhere}: {bb!r} is not [x1, y1, x2, y2]")
                v = [number(x, where=bwhere, what=c) for c, x in zip(("x1", "y1", "x2", "y2"), bb)]
                if not all(0.0 <= x <= 1.0 for x in v):
                    raise DatasetError(f"{bwhere}: {bb!r} is not normalised to [0, 1]")
                if v[2] < v[0] or v[3] < v[1]:
                    raise DatasetError(f"{bwhere}: inverted box {bb!r} (need x1 < x2, y1 < y2)")
                x1, x2 = v[0] * width, v[2] * width
                y1, y2 = v[1] * height, v[3] * height
                if x2 <= x1 or y2 <= y1:
                    raise DatasetError(f"{bwhere}: empty box {bb!r}")
                for c in classes:
                    boxes.append({"image_id": str(image_id), "box_id": f"{image_id}#{k}.{j}", "finding": c,
                                  "x1": x1, "y1": y1, "x2": x2, "y2": y2,
                                  "source_label": "|".join(str(f) for f in (region.get("findings") or []))})
    if not images:
        raise DatasetError(f"{name}: {samples_path} holds no samples")
    label_df = pd.DataFrame.from_dict(labels, orient="index", columns=list(CHEXPERT_CLASSES))
    label_df.index.name = "image_id"
    report_df = pd.DataFrame({"text": pd.Series(reports, dtype=object)})
    report_df.index.name = "study_id"
    release = root / GROUNDED_REPORTS  # the funnel's first steps read it: part of the identity when present
    extra = (samples_path,) + ((meta_path,) if meta_path is not None else ()) + ((release,) if release.is_file() else ())
    return Dataset(name=name, root=root, images=pd.DataFrame(images),
                   boxes=pd.DataFrame(boxes, columns=list(BOX_COLUMNS)), labels=label_df,
                   reports=report_df, credentialed=True, citation=PADCHEST_CITATION,
                   licence=PADCHEST_LICENCE, extra_files=extra,
                   sentences=pd.DataFrame(sentences, columns=["image_id", "region", "text"]))


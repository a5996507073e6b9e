"""Synthetic credentialed-shaped trees at the papers' scale, for rehearsals (no real data).

The generator writes, outside the repository, folders in the exact layouts the credentialed adapters
read, with **invented ids only** and small images by default:

- MIMIC-CXR-JPG (:func:`shovir_core.data.mimic_jpg.load_mimic_jpg`): the metadata, split and
  CheXpert CSVs, ``files/pXX/p<subject>/s<study>/<dicom>.jpg``, the MIMIC-CXR reports
  (``mimic-cxr-reports/files/pXX/p<subject>/s<study>.txt``) and the radiologist test-set labels
  (``mimic-cxr-2.1.0-test-set-labeled.csv``, :mod:`shovir_core.data.mimic_manual`);
- the ImaGenome metadata of the ShoViR MIMIC adapter (``imagenome_annotations.json`` beside
  ``files/``, :func:`shovir_core.data.mimic.load_mimic_imagenome`);
- PadChest-GR (``verified_samples.json``, ``metadata.csv``, ``images/``,
  :func:`shovir_core.data.padchest.load_padchest_gr`, and the grounded-reports release
  ``grounded_reports_20240819.json`` the funnel starts from,
  :func:`shovir_core.data.padchest.grounded_report_counts`);
- a WikiText-103 folder (``wikitext-103/wiki.train.tokens``, the released format) of invented
  paragraphs, the tuned lens's corpus on the ``mimic`` profile (ModaLens App. N.1).

Labels and boxes are drawn so that the papers' funnels and cohort shapes come out at the stated
sizes (:data:`PLANTED`): ModaLens §3 (3,199 cases from 293 test patients, 3,180 same-patient and 19
cross-patient, 492 cases without a positive finding, a training pool of 1,811 available patients,
687 studies with radiologist labels, App. E), ShoViR §3.1 (3,858 MIMIC test images, 1,397 without
ImaGenome annotations, 232 No-Finding-only, 2,160 after the true-positive filter; PadChest-GR 1,390
images, 1,997 boxes, 8 classes). The cohort's source yes-rates are planted too
(:func:`planted_yes_rates`): ModaLens App. F's six prespecified findings at the paper's published
rates (20.8-32.7 %, inside its [20 %, 80 %] rule), the other seven below 20 %, so the rule selects the
paper's six questions at every scale. **These counts are planted**: a rehearsal proves the pipeline and
the designs at the papers' scale, not the papers' funnels.

Ids follow the invented-id rules of the repository's fixtures (``tests/test_fixture_ids.py``):
MIMIC subject and study ids start with 9 (real ones start with 1 and 5), DICOM ids have two groups
(``5e5e<4 hex>-<8 digits>``; real ones have five), dates lie in the 2240s–2250s; PadChest ImageIDs
start with ``999`` (real ones with the DICOM UID root ``216840111366964``).

Everything is drawn from one seeded :class:`numpy.random.Generator`: the same ``(scale, seed,
pixels)`` writes the same tree byte for byte.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from ..errors import UsageError
from ..data.mimic_jpg import MIMIC_JPG_FILES, image_relpath, report_relpath
from ..data.padchest import GROUNDED_REPORTS
from ..data.template_reports import template_report
from ..labels import CHEXPERT_CLASSES, FINDINGS_13

__all__ = ["PLANTED", "MIN_PATIENTS", "planted_yes_rates", "PADCHEST_REMOVED_SHARE", "GENERATOR_VERSION", "Planted", "planted", "write_mimic",
           "write_padchest", "write_wikitext",
           "write_tree", "PIXELS"]

GENERATOR_VERSION = 5
"""Bumped whenever the generator's output changes (part of the rehearsal cache key)."""

PIXELS = {"small": 64, "full": 2048}
"""Image side in pixels: ``small`` (default, fast) or ``full`` (the papers' resolution, for timing)."""

PLANTED: dict[str, int] = {
    # ModaLens §3 (Table 1, Table 7) and App. N.3 / App. E
    "ml_cases": 3199, "ml_patients": 293, "ml_cross_patient": 19, "ml_no_positive": 492,
    "ml_train_patients": 1811, "ml_manual_studies": 687,
    # ShoViR §3.1 (MIMIC-CXR + Chest ImaGenome)
    "sv_test_images": 3858, "sv_without_imagenome": 1397, "sv_no_finding_only": 232, "sv_mimic_images": 2160,
    # ShoViR §3.1 (PadChest-GR)
    "sv_padchest_images": 1390, "sv_padchest_boxes": 1997, "sv_padchest_classes": 8,
    "sv_padchest_studies": 4555, "sv_padchest_with_boxes": 3008,
}
"""The papers' stated sizes at scale 1 (ModaLens §3, App. E, App. N.3; ShoViR §3.1)."""

MIN_PATIENTS = 10
"""Fewest ModaLens test patients of a reduced tree (a 1 % tree would have 3: fewer than App. N.3's 5
patient-grouped probe folds). The planted cases are spread over them, so a reduced tree is no larger."""

PADCHEST_REMOVED_SHARE = 0.353
"""The share of candidate boxes ShoViR's CheXbert sentence validation removes on PadChest-GR (§3.1)."""

_PADCHEST_CLASSES = ("Atelectasis", "Cardiomegaly", "Consolidation", "Lung Lesion", "Lung Opacity",
                     "Pleural Effusion", "Pneumonia", "Support Devices")
_PADCHEST_LABEL = {"Atelectasis": "atelectasis", "Cardiomegaly": "cardiomegaly", "Consolidation": "consolidation",
                   "Lung Lesion": "nodule", "Lung Opacity": "infiltrates", "Pleural Effusion": "pleural effusion",
                   "Pneumonia": "pneumonia", "Support Devices": "pacemaker"}
_MANUAL_COLUMNS = [("Airspace Opacity" if c == "Lung Opacity" else c) for c in CHEXPERT_CLASSES]


@dataclass(frozen=True)
class Planted:
    """The planted sizes at one scale (every count of :data:`PLANTED`, scaled and made consistent)."""

    scale: float
    counts: dict

    def __getitem__(self, key: str) -> int:
        return self.counts[key]


def planted(scale: float = 1.0) -> Planted:
    """The planted counts at ``scale`` (0 < scale <= 1), kept consistent with each other.

    >>> planted(1.0)["ml_cases"], planted(1.0)["ml_same_patient"]
    (3199, 3180)
    >>> p = planted(0.02); p["ml_patients"], p["ml_cases"], p["ml_cases"] >= 2 * (p["ml_patients"] - p["ml_cross_patient"])
    (10, 64, True)
    """
    if not (isinstance(scale, (int, float)) and 0 < scale <= 1):
        raise UsageError(f"scale must be in (0, 1], got {scale!r}")

    def s(key, low=1):
        return max(low, round(PLANTED[key] * scale))

    c = {k: s(k) for k in PLANTED}
    c["sv_padchest_classes"] = PLANTED["sv_padchest_classes"]
    c["ml_cross_patient"] = s("ml_cross_patient")
    # at least MIN_PATIENTS test patients: patient-grouped folds (App. N.3's 5-fold probe) and
    # patient-clustered bootstraps need patients to group by; the cases are spread over them, not added
    c["ml_patients"] = max(c["ml_cross_patient"] + 2, c["ml_patients"], min(MIN_PATIENTS, PLANTED["ml_patients"]))
    multi = c["ml_patients"] - c["ml_cross_patient"]
    c["ml_cases"] = max(c["ml_cases"], c["ml_cross_patient"] + 2 * multi)
    c["ml_same_patient"] = c["ml_cases"] - c["ml_cross_patient"]
    c["ml_no_positive"] = min(c["ml_no_positive"], c["ml_cases"] // 4)
    c["sv_test_images"] = max(c["sv_test_images"], c["ml_cases"])
    c["sv_annotated"] = c["sv_test_images"] - c["sv_without_imagenome"]
    c["sv_annotated"] = min(max(c["sv_annotated"], c["sv_mimic_images"] + c["sv_no_finding_only"] + 1), c["ml_cases"])
    c["sv_no_finding_only"] = min(c["sv_no_finding_only"], c["ml_no_positive"])
    c["sv_mimic_images"] = min(c["sv_mimic_images"], c["sv_annotated"] - c["sv_no_finding_only"] - 1,
                               c["ml_cases"] - c["ml_no_positive"] - 1)
    c["sv_without_imagenome"] = c["sv_test_images"] - c["sv_annotated"]
    c["sv_true_positive_dropped"] = c["sv_annotated"] - c["sv_no_finding_only"] - c["sv_mimic_images"]
    per_class = 40  # ShoViR §3.1: classes with fewer than 40 annotated images are dropped
    c["sv_padchest_images"] = max(c["sv_padchest_images"], per_class * c["sv_padchest_classes"])
    c["sv_padchest_boxes"] = max(c["sv_padchest_boxes"], c["sv_padchest_images"])
    c["ml_manual_studies"] = min(c["ml_manual_studies"], c["ml_cases"])
    # the grounded-reports release (ShoViR §3.1: 4,555 studies, 3,008 with boxes) holds the verified images
    c["sv_padchest_with_boxes"] = max(c["sv_padchest_with_boxes"], c["sv_padchest_images"] + 1)
    c["sv_padchest_studies"] = max(c["sv_padchest_studies"], c["sv_padchest_with_boxes"] + 1)
    # boxes kept by the negation rule: the CheXbert sentence validation removes 35.3 % of them (§3.1)
    c["sv_padchest_kept_boxes"] = round(c["sv_padchest_boxes"] / (1 - PADCHEST_REMOVED_SHARE))
    return Planted(scale=float(scale), counts=c)


def _image(rng: np.random.Generator, side: tuple[int, int], boxes=()) -> Image.Image:
    """A smooth random greyscale image with brighter rectangles where the findings' boxes are."""
    w, h = side
    coarse = rng.random((8, 8)).astype(np.float32)
    img = np.asarray(Image.fromarray((coarse * 160 + 40).astype(np.uint8)).resize((w, h), Image.BILINEAR),
                     dtype=np.float32)
    for x1, y1, x2, y2 in boxes:
        img[int(y1):int(y2), int(x1):int(x2)] += 50
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), mode="L")


def _random_box(rng: np.random.Generator, w: int, h: int) -> list[float]:
    bw, bh = rng.uniform(0.15, 0.45) * w, rng.uniform(0.15, 0.45) * h
    x1, y1 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
    return [round(float(x1), 1), round(float(y1), 1), round(float(x1 + bw), 1), round(float(y1 + bh), 1)]


_TRAIN_POSITIVE_SHARE = 0.85
"""Share of training-pool studies with a positive finding (about the cohort's 2,707 / 3,199)."""


_RARER = ("Consolidation", "Pneumonia", "Enlarged Cardiomediastinum", "Lung Lesion", "Pneumothorax", "Fracture",
          "Pleural Other")
"""The seven findings outside App. F's six, most to least frequent (12 % down to 3 %): Pleural Other the rarest,
as the mimic profile's steering chapter assumes when it leaves it out (ModaLens App. N.3)."""


@lru_cache(maxsize=1)
def _yes_rates() -> tuple[tuple[str, float], ...]:
    from ..papers import published

    six = published("modalens", group="six_yes_rate")
    by_name = {c.lower(): c for c in FINDINGS_13}
    rates = {by_name[f]: float(v) / 100 for f, v in zip(six["finding"], six["value"])}
    if sorted(rates) != sorted(set(FINDINGS_13) - set(_RARER)):
        raise ValueError(f"the paper's six findings {sorted(rates)} and the rarer seven {_RARER} do not split FINDINGS_13")
    rates.update(zip(_RARER, np.linspace(0.12, 0.03, len(_RARER)).tolist()))
    return tuple((c, rates[c]) for c in FINDINGS_13)


def planted_yes_rates() -> dict[str, float]:
    """The source yes-rate planted per finding (CheXbert order) on the ModaLens cohort.

    The six prespecified findings of ModaLens App. F at the paper's published source yes-rates
    (``f.six.yes.*``: atelectasis 22.3 %, cardiomegaly 27.1 %, edema 20.8 %, lung opacity 32.0 %,
    pleural effusion 32.4 %, support devices 32.7 %), the other seven spread over 12 % to 3 % in the
    order of :data:`_RARER`.

    >>> r = planted_yes_rates(); sorted(f for f, v in r.items() if 0.2 <= v <= 0.8)
    ['Atelectasis', 'Cardiomegaly', 'Edema', 'Lung Opacity', 'Pleural Effusion', 'Support Devices']
    """
    return dict(_yes_rates())


def _other_codes(rng: np.random.Generator, codes: dict[str, float]) -> dict[str, float]:
    """Fill the findings not positive with uncertain (5 %), negative (30 %) or blank codes."""
    for cls in FINDINGS_13:
        if cls not in codes:
            u = rng.random()
            if u < 0.05:
                codes[cls] = -1.0
            elif u < 0.35:
                codes[cls] = 0.0
    return codes


def _study_labels(rng: np.random.Generator, *, positive: bool) -> dict[str, float]:
    """CheXpert codes of one training-pool study: positives drawn at the planted rates, or none positive."""
    codes: dict[str, float] = {}
    if positive:
        for cls, rate in planted_yes_rates().items():
            if rng.random() < rate / _TRAIN_POSITIVE_SHARE:
                codes[cls] = 1.0
        if not codes:
            codes[FINDINGS_13[int(rng.integers(len(FINDINGS_13)))]] = 1.0
    codes = _other_codes(rng, codes)
    if not positive:
        codes["No Finding"] = 1.0
    return codes


def _case_labels(rng: np.random.Generator, n_cases: int, no_pos: set[int]) -> list[dict[str, float]]:
    """CheXpert codes of the cohort's cases: each finding positive on exactly ``round(rate * n)`` of
    the cases with a positive finding (:func:`planted_yes_rates`), the count held inside
    App. F's rule (:data:`shovir_core.protocols.modalens.SIX_RANGE`) for the six and below it for the others
    at every scale; a case of ``no_pos``
    has none (No Finding), every other case at least one (the least-planted finding below the band)."""
    from ..protocols.modalens import SIX_RANGE

    lo, hi = SIX_RANGE
    lo_n, hi_n = math.ceil(lo * n_cases), math.floor(hi * n_cases)
    pos = np.array([k for k in range(n_cases) if k not in no_pos])
    cases: list[dict[str, float]] = [{} for _ in range(n_cases)]
    counts: dict[str, int] = {}
    for cls, rate in planted_yes_rates().items():
        k = round(rate * n_cases)
        k = min(max(k, lo_n), hi_n) if lo <= rate <= hi else min(k, lo_n - 1)
        k = min(k, len(pos))
        for i in rng.choice(pos, size=k, replace=False):
            cases[int(i)][cls] = 1.0
        counts[cls] = k
    below = [c for c in FINDINGS_13 if counts[c] < lo_n]
    for i in pos:
        if not cases[int(i)]:
            room = [c for c in below if counts[c] < lo_n - 1]
            if not room:
                raise RuntimeError(f"_case_labels: {n_cases} cases leave no finding below the band to make "
                                   "every positive case positive")
            cls = min(room, key=counts.get)
            cases[int(i)][cls] = 1.0
            counts[cls] += 1
    out = [_other_codes(rng, c) for c in cases]
    for i in no_pos:
        out[i]["No Finding"] = 1.0
    return out


def _chexbert_codes(codes: dict[str, float]) -> list[int]:
    enc = {1.0: 1, 0.0: 2, -1.0: 3}
    return [enc.get(codes.get(c, np.nan), 0) for c in CHEXPERT_CLASSES]


def _csv_code(v) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def write_mimic(root: str | Path, *, scale: float = 1.0, seed: int = 0, pixels: str = "small") -> dict:
    """Write a MIMIC-CXR-JPG + reports + ImaGenome + radiologist-labels tree; returns its summary.

    The ModaLens cohort is the test split's frontal images (one per study); the ShoViR MIMIC cohort
    is the annotated subset that survives the No-Finding-only and true-positive filters.
    """
    if pixels not in PIXELS:
        raise UsageError(f"pixels must be one of {sorted(PIXELS)}, got {pixels!r}")
    p = planted(scale)
    rng = np.random.default_rng([seed, 1])
    root = Path(root)
    side = PIXELS[pixels]
    n_multi = p["ml_patients"] - p["ml_cross_patient"]
    # studies per multi-study patient: at least two each, the rest spread at random
    extra = rng.multinomial(p["ml_same_patient"] - 2 * n_multi, np.full(n_multi, 1 / n_multi))
    per_patient = [2 + int(e) for e in extra] + [1] * p["ml_cross_patient"]
    no_pos = set(rng.choice(p["ml_cases"], size=p["ml_no_positive"], replace=False).tolist())
    case_codes = _case_labels(rng, p["ml_cases"], no_pos)
    meta, split, chexpert, studies = [], [], [], []
    k = 0
    for i, n_studies in enumerate(per_patient):
        subject = f"9{1000000 + i:07d}"
        day = pd.Timestamp("2241-01-01") + pd.Timedelta(days=int(rng.integers(0, 3000)))
        for j in range(n_studies):
            study = f"9{2000000 + k:07d}"
            codes = case_codes[k]
            day += pd.Timedelta(days=int(rng.integers(1, 120)))
            studies.append({"subject": subject, "study": study, "codes": codes, "date": day, "case": k, "split": "test"})
            k += 1
    for i in range(p["ml_train_patients"]):
        subject = f"9{5000000 + i:07d}"
        study = f"9{6000000 + i:07d}"
        day = pd.Timestamp("2241-01-01") + pd.Timedelta(days=int(rng.integers(0, 3000)))
        studies.append({"subject": subject, "study": study, "codes": _study_labels(rng, positive=rng.random() > 0.15),
                        "date": day, "case": None, "split": "train"})
    test_studies = [s for s in studies if s["split"] == "test"]
    n_lateral = p["sv_test_images"] - p["ml_cases"]
    lateral_of = rng.choice(len(test_studies), size=n_lateral, replace=True) if n_lateral > 0 else []
    laterals = pd.Series(lateral_of).value_counts().to_dict() if n_lateral > 0 else {}

    # ImaGenome: annotated frontal test images = NF-only + kept + true-positive failures
    pos_cases = [s for s in test_studies if s["case"] not in no_pos]
    neg_cases = [s for s in test_studies if s["case"] in no_pos]
    order_pos = rng.permutation(len(pos_cases))
    kept = {pos_cases[i]["study"] for i in order_pos[:p["sv_mimic_images"]]}
    tp_fail = {pos_cases[i]["study"] for i in order_pos[p["sv_mimic_images"]:p["sv_mimic_images"]
                                                         + p["sv_true_positive_dropped"]]}
    nf_only = {neg_cases[i]["study"] for i in rng.permutation(len(neg_cases))[:p["sv_no_finding_only"]]}
    annotations, dicom_n = {}, 0
    (root / "files").mkdir(parents=True, exist_ok=True)
    for idx, s in enumerate(studies):
        images = [("PA" if rng.random() < 0.6 else "AP", "postero-anterior")]
        images += [("LATERAL", "lateral")] * int(laterals.get(idx, 0)) if s["split"] == "test" else []
        for v, (view, code) in enumerate(images):
            dicom_n += 1
            dicom = f"5e5e{dicom_n % 65536:04x}-{dicom_n:08d}"
            w, h = side, side + (side // 8 if v else 0)
            boxes, regions = [], []
            if v == 0 and (s["study"] in kept or s["study"] in tp_fail):
                positives = [c for c in FINDINGS_13 if s["codes"].get(c) == 1.0]
                drop = positives[int(rng.integers(len(positives)))] if s["study"] in tp_fail else None
                for cls in positives:
                    if cls == drop:
                        continue
                    box = _random_box(rng, w, h)
                    boxes.append(box)
                    regions.append({"anatomy": "synthetic region", "bbox": box, "findings": [cls]})
                regions.append({"anatomy": "synthetic region", "bbox": _random_box(rng, w, h), "findings": []})
            if v == 0 and s["study"] in nf_only:
                regions.append({"anatomy": "synthetic region", "bbox": _random_box(rng, w, h), "findings": []})
            path = root / image_relpath(s["subject"], s["study"], dicom)
            path.parent.mkdir(parents=True, exist_ok=True)
            _image(rng, (w, h), boxes).save(path, quality=90)
            stamp = s["date"] + pd.Timedelta(seconds=int(rng.integers(0, 86400)))
            meta.append({"dicom_id": dicom, "subject_id": s["subject"], "study_id": s["study"],
                         "PerformedProcedureStepDescription": "CHEST (PA AND LAT)", "ViewPosition": view,
                         "Rows": h, "Columns": w, "StudyDate": stamp.strftime("%Y%m%d"),
                         "StudyTime": stamp.strftime("%H%M%S") + ".000",
                         "ProcedureCodeSequence_CodeMeaning": "CHEST (PA AND LAT)",
                         "ViewCodeSequence_CodeMeaning": code, "PatientOrientationCodeSequence_CodeMeaning": "Erect"})
            split.append({"dicom_id": dicom, "study_id": s["study"], "subject_id": s["subject"], "split": s["split"]})
            if regions:
                report = template_report(s["codes"], negatives="all", wording="varied", key=s["study"])
                annotations[dicom] = {"img_path": image_relpath(s["subject"], s["study"], dicom).as_posix()[len("files/"):],
                                      "report": report, "labels": _chexbert_codes(s["codes"]), "regions": regions}
        chexpert.append({"subject_id": s["subject"], "study_id": s["study"],
                         **{c: _csv_code(s["codes"].get(c)) for c in CHEXPERT_CLASSES}})
        rpath = root / "mimic-cxr-reports" / report_relpath(s["subject"], s["study"])
        rpath.parent.mkdir(parents=True, exist_ok=True)
        rpath.write_text(template_report(s["codes"], negatives="all", wording="varied", key=s["study"]) + "\n",
                         encoding="utf-8")
    pd.DataFrame(meta).to_csv(root / MIMIC_JPG_FILES["metadata"], index=False)
    pd.DataFrame(split).to_csv(root / MIMIC_JPG_FILES["split"], index=False)
    pd.DataFrame(chexpert).to_csv(root / MIMIC_JPG_FILES["chexpert"], index=False)
    (root / "imagenome_annotations.json").write_text(json.dumps(annotations), encoding="utf-8")
    # radiologist labels (App. E): whole patients in random order until the planted number of studies
    manual, by_patient = [], {}
    for s in test_studies:
        by_patient.setdefault(s["subject"], []).append(s)
    for subject in rng.permutation(sorted(by_patient)):
        for s in by_patient[subject]:
            if len(manual) < p["ml_manual_studies"]:
                flip = {c: (1.0 - v if v in (0.0, 1.0) and rng.random() < 0.05 else v) for c, v in s["codes"].items()}
                manual.append({"study_id": s["study"], **{m: _csv_code(flip.get(c))
                                                          for c, m in zip(CHEXPERT_CLASSES, _MANUAL_COLUMNS)}})
    pd.DataFrame(manual).to_csv(root / "mimic-cxr-2.1.0-test-set-labeled.csv", index=False)
    return {"root": str(root), "images": len(meta), "test_images": sum(r["split"] == "test" for r in split),
            "annotated": len(annotations), "studies": len(studies), "planted": p.counts}


def write_padchest(root: str | Path, *, scale: float = 1.0, seed: int = 0, pixels: str = "small") -> dict:
    """Write a PadChest-GR tree (``verified_samples.json``, ``metadata.csv``, ``images/``)."""
    if pixels not in PIXELS:
        raise UsageError(f"pixels must be one of {sorted(PIXELS)}, got {pixels!r}")
    p = planted(scale)
    rng = np.random.default_rng([seed, 2])
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    side = PIXELS[pixels]
    n_img, n_box = p["sv_padchest_images"], p["sv_padchest_boxes"]
    classes = list(_PADCHEST_CLASSES[:p["sv_padchest_classes"]])
    # every image one box of a class cycling through the classes (each >= 40 images at scale 1), then
    # the remaining boxes at random images
    first = [classes[i % len(classes)] for i in range(n_img)]
    extra = rng.integers(0, n_img, size=n_box - n_img)
    samples, meta = {}, []
    boxes_of: dict[int, list[str]] = {i: [first[i]] for i in range(n_img)}
    for i in extra:
        boxes_of[int(i)].append(classes[int(rng.integers(len(classes)))])
    for i in range(n_img):
        image_id = f"999{i:042d}_00-000-{i % 1000:03d}"
        regions, codes, pix = [], {}, []
        for cls in boxes_of[i]:
            x1, y1 = rng.uniform(0.05, 0.5, size=2)
            box = [round(float(x1), 4), round(float(y1), 4), round(float(x1 + rng.uniform(0.1, 0.4)), 4),
                   round(float(y1 + rng.uniform(0.1, 0.4)), 4)]
            codes[cls] = 1.0
            pix.append([b * side for b in box])
            regions.append({"anatomy": "synthetic region", "bbox": [box], "findings": [_PADCHEST_LABEL[cls]],
                            "chexpert_categories": [cls], "sentence": f"{_PADCHEST_LABEL[cls].capitalize()}.",
                            "labels": []})
        report = " ".join(r["sentence"] for r in regions)
        samples[image_id] = {"img_path": f"{image_id}.png", "report": report, "labels": _chexbert_codes(codes),
                             "chexbert_labels": _chexbert_codes(codes), "regions": regions}
        _image(rng, (side, side), pix).save(root / "images" / f"{image_id}.png")
        meta.append({"ImageID": image_id, "PatientID": f"pat{i // 2 + 1}", "StudyID": f"st{i + 1}",
                     "Projection": "PA"})
    (root / "verified_samples.json").write_text(json.dumps(samples), encoding="utf-8")
    pd.DataFrame(meta).to_csv(root / "metadata.csv", index=False)
    (root / GROUNDED_REPORTS).write_text(json.dumps(_grounded_reports(rng, samples, p)), encoding="utf-8")
    return {"root": str(root), "images": n_img, "boxes": n_box, "classes": len(classes), "planted": p.counts}


def _grounded_reports(rng: np.random.Generator, samples: dict, p: Planted) -> list[dict]:
    """PadChest-GR's grounded-reports release (:data:`shovir_core.data.padchest.GROUNDED_REPORTS`) around the
    verified samples: every verified image with its boxes, further studies with boxes whose (not negated)
    findings the CheXbert sentence validation removed, so that it removes the planted share, studies whose
    boxed findings are negated, and studies without boxes (ShoViR §3.1's funnel, planted)."""
    def finding(label: str, *, boxes: list, negated: bool = False) -> dict:
        sentence = f"No {label}." if negated else f"{label.capitalize()} is seen."
        return {"abnormal": True, "sentence_en": sentence, "boxes": boxes, "labels": [label], "locations": []}

    from ..data.padchest import padchest_to_chexpert

    labels = [label for label in _PADCHEST_LABEL.values() if padchest_to_chexpert(label)]
    out, kept = [], 0
    for image_id, s in samples.items():
        findings = [finding(r["findings"][0], boxes=r["bbox"]) for r in s["regions"]]
        kept += sum(len(f["boxes"]) for f in findings if padchest_to_chexpert(f["labels"][0]))
        if not any(padchest_to_chexpert(f["labels"][0]) for f in findings):
            # a verified image whose labels map to no CheXpert class (the authors' pipeline reads its class
            # from the text through CheXbert) also holds a mapped finding, so every funnel step keeps at most
            # the images of the step before
            findings.append(finding(labels[int(rng.integers(len(labels)))], boxes=[[0.1, 0.1, 0.4, 0.4]]))
            kept += 1
        out.append({"ImageID": image_id, "findings": findings})
    # the boxes the CheXbert sentence validation removes make up the planted share of the kept boxes
    extra_boxes = p["sv_padchest_kept_boxes"] - kept
    others = p["sv_padchest_with_boxes"] - len(samples)
    removed_in = rng.integers(0, others, size=max(extra_boxes, 0))
    per_study = np.bincount(removed_in, minlength=others)
    for k in range(p["sv_padchest_studies"] - len(samples)):
        image_id = f"999{500000 + k:042d}_00-000-{k % 1000:03d}"  # invented, after the verified ids
        label = labels[int(rng.integers(len(labels)))]
        if k < others:
            n = int(per_study[k])
            box = [[0.1, 0.1, 0.4, 0.4]]
            findings = [finding(label, boxes=box) for _ in range(n)] or [finding(label, boxes=box, negated=True)]
        else:
            findings = [finding(label, boxes=[])]
        out.append({"ImageID": image_id, "findings": findings})
    return out


_WIKI_WORDS = ("the", "river", "station", "album", "season", "company", "church", "village", "battle", "song",
               "was", "is", "built", "released", "named", "after", "in", "of", "and", "a", "first", "new", "large")


def write_wikitext(root: str | Path, *, scale: float = 1.0, seed: int = 0) -> dict:
    """Write ``wiki.train.tokens`` of invented paragraphs in WikiText-103's released format (`` = Title = ``
    headings, one paragraph a line, blank lines between, ``@-@`` joins): the tuned lens's corpus on the
    ``mimic`` profile (ModaLens App. N.1) reads it. ``max(200, 50,000 x scale)`` paragraphs."""
    rng = np.random.default_rng([seed, 3])
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    n = max(200, round(50000 * scale))
    lines = []
    for k in range(n):
        if k % 20 == 0:
            lines += ["", f" = Article {k // 20} = ", ""]
        words = rng.choice(_WIKI_WORDS, size=int(rng.integers(8, 40)))
        lines.append(" " + " ".join(words) + f" {int(rng.integers(1000, 2300))} @-@ year . ")
    (root / "wiki.train.tokens").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"root": str(root), "paragraphs": n}


def _tree_sha256(root: Path, key: dict) -> str:
    """SHA-256 over the generator key and every file's relative path and bytes (not where the tree lies)."""
    h = hashlib.sha256(json.dumps(key, sort_keys=True).encode())
    for path in sorted(p for sub in _SUBTREES for p in (root / sub).rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


_SUBTREES = ("mimic", "padchest-gr", "wikitext-103")


def write_tree(root: str | Path, *, scale: float = 1.0, seed: int = 0, pixels: str = "small") -> dict:
    """Write the trees under ``root`` (``mimic/``, ``padchest-gr/``, ``wikitext-103/``) unless already complete.

    A tree is complete when its ``rehearsal-tree.json`` stamp (generator version, scale, seed,
    pixels) is present and matches; a partial or stale tree is rewritten from scratch.
    """
    import fcntl

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:  # concurrent rehearsals write the tree once
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _write_tree_locked(root, scale=scale, seed=seed, pixels=pixels)


def _write_tree_locked(root: Path, *, scale: float, seed: int, pixels: str) -> dict:
    key = {"generator": GENERATOR_VERSION, "scale": float(scale), "seed": int(seed), "pixels": pixels}
    stamp = root / "rehearsal-tree.json"
    if stamp.is_file():
        try:
            done = json.loads(stamp.read_text(encoding="utf-8"))
        except ValueError:
            done = {}
        if done.get("key") == key:
            return done
    import shutil

    for sub in _SUBTREES:
        if (root / sub).exists():
            shutil.rmtree(root / sub)
    out = {"key": key, "mimic": write_mimic(root / "mimic", scale=scale, seed=seed, pixels=pixels),
           "padchest": write_padchest(root / "padchest-gr", scale=scale, seed=seed, pixels=pixels),
           "wikitext": write_wikitext(root / "wikitext-103", scale=scale, seed=seed)}
    out["sha256"] = _tree_sha256(root, key)
    tmp = stamp.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    tmp.replace(stamp)
    return out

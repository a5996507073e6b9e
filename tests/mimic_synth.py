"""A seeded synthetic MIMIC-CXR-JPG copy in the release's layout, large enough for the paper's denominators.

**Not real data**: every id, date, label, report sentence and pixel is drawn here from
``numpy.random.default_rng(seed)``. Identifiers follow the rules of ``tests/fixtures/mimic_jpg``
(``tests/test_fixture_ids.py``): subject and study ids start with 9 (``90...``), DICOM ids have two
groups (``0a1b2c3d-000NNNNN``), dates lie in the 2240s. Test patients are in the ``test`` split,
training patients in ``train``, so App. N.3's training-pool probe cohort has a pool to draw from.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from shovir_core.data.mimic_jpg import MIMIC_JPG_FILES, image_relpath, report_relpath
from shovir_core.labels import CHEXPERT_CLASSES

__all__ = ["write_mimic_jpg"]

_WORDS = ("lungs", "clear", "heart", "size", "stable", "no", "effusion", "opacity", "tube", "line", "basilar",
          "mild", "unchanged", "interval", "small", "right", "left", "lower", "lobe", "since", "prior")


def write_mimic_jpg(root: Path, *, n_test_patients: int, n_train_patients: int, studies_per_patient: int = 3,
                    train_studies_per_patient: int | None = None, seed: int = 0, size: int = 16) -> Path:
    """Write the three metadata CSVs, one frontal JPEG per study and one report per study under ``root``
    (``train_studies_per_patient`` studies per training patient; None: ``studies_per_patient``)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    root = Path(root)
    meta, split, chex = [], [], []
    n_img = 0
    per_train = studies_per_patient if train_studies_per_patient is None else train_studies_per_patient
    for p in range(n_test_patients + n_train_patients):
        subject = f"9{p:07d}"
        which = "test" if p < n_test_patients else "train"
        for s in range(studies_per_patient if which == "test" else per_train):
            study = f"9{n_img:07d}"
            n_img += 1
            dicom = f"0a1b2c3d-{n_img:08d}"
            view = "PA" if rng.random() < 0.5 else "AP"
            date = f"224{rng.integers(0, 10)}{rng.integers(1, 13):02d}{rng.integers(1, 29):02d}"
            meta.append({"dicom_id": dicom, "subject_id": subject, "study_id": study, "ViewPosition": view,
                         "Rows": size, "Columns": size, "StudyDate": date, "StudyTime": f"{s + 10:02d}1111.111",
                         "ViewCodeSequence_CodeMeaning": "postero-anterior" if view == "PA" else "antero-posterior"})
            split.append({"dicom_id": dicom, "study_id": study, "subject_id": subject, "split": which})
            codes = rng.choice(np.array(["1.0", "0.0", "-1.0", ""], dtype=object), p=[0.3, 0.2, 0.05, 0.45],
                               size=len(CHEXPERT_CLASSES))
            chex.append({"subject_id": subject, "study_id": study, **dict(zip(CHEXPERT_CLASSES, codes))})
            img = root / image_relpath(subject, study, dicom)
            img.parent.mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 256, size=(size, size), dtype=np.uint8)
            Image.fromarray(pixels, mode="L").save(img, quality=90)
            rep = root / "mimic-cxr-reports" / report_relpath(subject, study)
            rep.parent.mkdir(parents=True, exist_ok=True)
            words = " ".join(rng.choice(np.array(_WORDS, dtype=object), size=12))
            rep.write_text(f"FINAL REPORT\n FINDINGS: {words}.\n", encoding="utf-8")
    for key, rows in (("metadata", meta), ("split", split), ("chexpert", chex)):
        pd.DataFrame(rows).to_csv(root / MIMIC_JPG_FILES[key], index=False)
    return root

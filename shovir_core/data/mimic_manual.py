"""Adapter for the radiologist labels of the MIMIC-CXR-JPG test set (ModaLens Appendix E).

MIMIC-CXR-JPG (v2.1.0) ships ``mimic-cxr-2.1.0-test-set-labeled.csv``: the reports of the test set
annotated by a single radiologist with the 14 CheXpert classes, written to evaluate the automated
labellers (Johnson et al., 2019, arXiv:1901.07042). Layout (one row per study)::

    study_id, Atelectasis, Cardiomegaly, Consolidation, Edema, Enlarged Cardiomediastinum, Fracture,
    Lung Lesion, Lung Opacity, No Finding, Pleural Effusion, Pleural Other, Pneumonia, Pneumothorax,
    Support Devices                                 (codes 1.0, 0.0, -1.0 or blank)

``Airspace Opacity`` is accepted as the name of the ``Lung Opacity`` column (the name used in the
CheXpert labeller's own output). A ``subject_id`` column, when present, is ignored: the labels are
joined to trials by study id. The annotator read the report, not the image (ModaLens App. E), so
these are report labels, not image labels.

The file is credentialed (PhysioNet Credentialed Health Data License 1.5.0): nothing of it is
committed; the tests use a fixture with invented ids (``tests/fixtures/mimic_manual``).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, CODES
from .schema import DatasetError

__all__ = ["MANUAL_LABELS_FILE", "COLUMN_ALIASES", "load_manual_labels"]

MANUAL_LABELS_FILE = "mimic-cxr-2.1.0-test-set-labeled.csv"
"""The file's name in the MIMIC-CXR-JPG release (may also be gzipped, ``.csv.gz``)."""

COLUMN_ALIASES = {"Airspace Opacity": "Lung Opacity"}
"""Other names of a CheXpert column -> the package's name (:data:`shovir_core.labels.CHEXPERT_CLASSES`)."""


def _locate(path: str | Path) -> Path:
    text = str(path)
    expanded = os.path.expandvars(text)
    if "$" in expanded:
        raise DatasetError(f"manual labels: {text!r} names an unset environment variable")
    p = Path(expanded)
    if p.is_dir():
        for candidate in (p / MANUAL_LABELS_FILE, p / f"{MANUAL_LABELS_FILE}.gz"):
            if candidate.is_file():
                return candidate
        raise DatasetError(f"manual labels: {p} has neither {MANUAL_LABELS_FILE} nor {MANUAL_LABELS_FILE}.gz")
    if not p.is_file():
        raise DatasetError(f"manual labels: no file {p} (expected {MANUAL_LABELS_FILE} or its folder)")
    return p


def load_manual_labels(path: str | Path) -> pd.DataFrame:
    """The radiologist labels, one row per study: index ``study_id`` (str), the 14 CheXpert columns.

    Parameters
    ----------
    path
        The CSV file, or the MIMIC-CXR-JPG folder holding it; environment variables are expanded
        (``"${SHOVIR_MIMIC_JPG}"``) and an unset one is an error.

    Returns
    -------
    DataFrame
        Codes as floats (1, 0, -1, NaN for blank) in :data:`~shovir_core.labels.CHEXPERT_CLASSES`
        order; ``attrs["source"]`` is the file name.

    Raises
    ------
    DatasetError
        Missing file or columns, a non-numeric or duplicated study id, or a code other than
        1, 0, -1 or blank (the message names the study and the class).
    """
    file = _locate(path)
    raw = pd.read_csv(file, dtype=str, keep_default_na=False).rename(columns=COLUMN_ALIASES)
    missing = [c for c in ("study_id", *CHEXPERT_CLASSES) if c not in raw.columns]
    if missing:
        raise DatasetError(f"manual labels: {file.name} lacks columns {missing}")
    ids = raw["study_id"].str.strip()
    ids = ids.str.replace(r"^s", "", regex=True)  # tolerate the 's12345678' folder spelling
    bad = ids[~ids.str.fullmatch(r"\d+")]
    if not bad.empty:
        raise DatasetError(f"manual labels: {file.name}: study_id {bad.iloc[0]!r} is not a numeric id")
    ids = ids.str.lstrip("0").where(ids.str.lstrip("0") != "", "0")
    if ids.duplicated().any():
        raise DatasetError(f"manual labels: {file.name}: duplicate study_id {ids[ids.duplicated()].iloc[0]!r}")
    out = pd.DataFrame(index=pd.Index(ids.to_numpy(), name="study_id"))
    for cls in CHEXPERT_CLASSES:
        text = raw[cls].str.strip()
        values = pd.to_numeric(text.where(text != "", None), errors="coerce").to_numpy(dtype=float)
        invalid = (np.isnan(values) & (text.to_numpy() != "")) | ~(np.isnan(values) | np.isin(values, CODES))
        if invalid.any():
            i = int(np.argmax(invalid))
            raise DatasetError(f"manual labels: {file.name}: study {ids.iloc[i]!r}, class {cls!r}: "
                               f"label {text.iloc[i]!r} is not 1, 0, -1 or blank")
        out[cls] = values
    out.attrs["source"] = file.name
    return out

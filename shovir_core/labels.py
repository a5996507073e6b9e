"""The CheXpert label space shared by both papers.

Fourteen classes in CheXbert order, the five-class subset used for F1_5, label
codes and label policies.

Codes follow CheXpert: ``1`` positive, ``0`` negative, ``-1`` uncertain and
blank (not mentioned), stored as ``NaN`` in float columns.

References
----------
Irvin J. et al., "CheXpert: a large chest radiograph dataset with uncertainty
labels and expert comparison", AAAI 2019.
Smit A. et al., "CheXbert: combining automatic labelers and expert annotations
for accurate radiology report labeling using BERT", EMNLP 2020.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

__all__ = [
    "CHEXPERT_CLASSES", "FINDINGS_13", "CHEXPERT_5", "POSITIVE", "NEGATIVE",
    "UNCERTAIN", "BLANK", "LabelPolicy", "POLICIES", "apply_policy",
    "validate_class", "NIH_TO_CHEXPERT", "nih_to_chexpert",
]

CHEXPERT_CLASSES: tuple[str, ...] = (
    "Enlarged Cardiomediastinum",
    "Cardiomegaly",
    "Lung Opacity",
    "Lung Lesion",
    "Edema",
    "Consolidation",
    "Pneumonia",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
    "Pleural Other",
    "Fracture",
    "Support Devices",
    "No Finding",
)
"""The 14 CheXpert classes in CheXbert output order."""

FINDINGS_13: tuple[str, ...] = CHEXPERT_CLASSES[:-1]
"""The 13 localisable findings (the 14 minus No Finding)."""

CHEXPERT_5: tuple[str, ...] = (
    "Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion",
)
"""The five-class subset of F1_5 (the 'five most clinically prevalent')."""

POSITIVE, NEGATIVE, UNCERTAIN = 1.0, 0.0, -1.0
BLANK = np.nan
CODES = (POSITIVE, NEGATIVE, UNCERTAIN)


@dataclass(frozen=True)
class LabelPolicy:
    """How uncertain (-1) and blank (NaN) codes map to binary labels.

    Each field is ``"negative"``, ``"positive"`` or ``"excluded"`` (excluded
    becomes NaN and is dropped by the metric that consumes it).
    """

    uncertain: Literal["negative", "positive", "excluded"] = "negative"
    blank: Literal["negative", "excluded"] = "negative"

    @property
    def name(self) -> str:
        return f"u-{self.uncertain}_b-{self.blank}"


POLICIES: dict[str, LabelPolicy] = {
    "u-negative": LabelPolicy("negative", "negative"),
    "u-positive": LabelPolicy("positive", "negative"),
    "u-excluded": LabelPolicy("excluded", "negative"),
    "u-negative_b-excluded": LabelPolicy("negative", "excluded"),
    "u-positive_b-excluded": LabelPolicy("positive", "excluded"),
    "u-excluded_b-excluded": LabelPolicy("excluded", "excluded"),
}
"""Named policies; ``u-negative`` (uncertain and blank -> negative) is the default."""

_TARGET = {"negative": 0.0, "positive": 1.0, "excluded": np.nan}


def apply_policy(codes, policy: LabelPolicy | str = "u-negative"):
    """Map CheXpert codes to binary 0/1 labels (NaN where the policy excludes).

    Works on scalars, numpy arrays, Series and DataFrames; returns the same kind.

    >>> apply_policy(np.array([1, 0, -1, np.nan]), "u-positive").tolist()
    [1.0, 0.0, 1.0, 0.0]
    """
    if isinstance(policy, str):
        try:
            policy = POLICIES[policy]
        except KeyError:
            raise ValueError(f"unknown label policy {policy!r}; choose one of {sorted(POLICIES)}") from None
    if isinstance(codes, pd.DataFrame):  # the whole table at once (column by column was 13 pandas calls per table)
        return pd.DataFrame(apply_policy(codes.to_numpy(dtype=float), policy), index=codes.index,
                            columns=codes.columns)
    if isinstance(codes, pd.Series):
        return pd.Series(apply_policy(codes.to_numpy(dtype=float), policy), index=codes.index, name=codes.name)
    arr = np.asarray(codes, dtype=float)
    bad = ~(np.isnan(arr) | np.isin(arr, CODES))
    if bad.any():
        raise ValueError(f"label codes must be 1, 0, -1 or blank (NaN); got {np.unique(arr[bad]).tolist()}")
    out = np.where(arr == UNCERTAIN, _TARGET[policy.uncertain], arr)
    out = np.where(np.isnan(arr), _TARGET[policy.blank], out)
    return out if out.ndim else float(out)


def validate_class(name: str) -> str:
    """Return ``name`` if it is a CheXpert class, else raise a ValueError naming the choices."""
    if name not in CHEXPERT_CLASSES:
        raise ValueError(f"unknown finding {name!r}: not a CheXpert class ({', '.join(CHEXPERT_CLASSES)})")
    return name


NIH_TO_CHEXPERT: dict[str, str | None] = {
    "Atelectasis": "Atelectasis",
    "Cardiomegaly": "Cardiomegaly",
    "Effusion": "Pleural Effusion",
    "Infiltrate": "Lung Opacity",
    "Infiltration": "Lung Opacity",
    "Mass": "Lung Lesion",
    "Nodule": "Lung Lesion",
    "Pneumonia": "Pneumonia",
    "Pneumothorax": "Pneumothorax",
    "Consolidation": "Consolidation",
    "Edema": "Edema",
    "Pleural_Thickening": "Pleural Other",
    "No Finding": "No Finding",
    "Emphysema": None,
    "Fibrosis": None,
    "Hernia": None,
}
"""NIH ChestX-ray14 finding -> CheXpert class (None: no CheXpert class)."""


def nih_to_chexpert(finding: str) -> str | None:
    """Map an NIH finding name to its CheXpert class; unknown names raise ValueError."""
    try:
        return NIH_TO_CHEXPERT[finding]
    except KeyError:
        raise ValueError(f"unknown NIH finding {finding!r}; known: {sorted(NIH_TO_CHEXPERT)}") from None

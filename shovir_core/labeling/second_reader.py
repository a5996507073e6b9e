"""A simulated second reader with a planted, seeded error rate (ModaLens Appendix E on the demo).

The demo cohort has no radiologist labels, so Appendix E's machinery is validated against a second
reader simulated from the automated study labels: each study of a seeded sample (``coverage``) is
"annotated", and each of its 13 finding labels (binary under the label policy) is flipped
independently with probability ``error_rate``. The output has the layout of
:func:`shovir_core.data.mimic_manual.load_manual_labels` (codes 1.0 / 0.0; ``No Finding`` 1.0 when
no finding is positive, else blank), so the chapter runs the same code on it as on the real file.

The planted agreement and κ that the chapter must recover follow from the error rate and the
automated labels (:func:`shovir_core.metrics.label_agreement.expected_reader_confusion`).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, FINDINGS_13, apply_policy

__all__ = ["study_codes", "simulate_second_reader"]


def study_codes(trials: pd.DataFrame) -> pd.DataFrame:
    """Automated CheXpert codes of every study in a modalens trials frame (source and substitute).

    Reads the ``labels_c`` / ``labels_d`` JSON columns of the record; index ``study_id`` (str).
    """
    for col in ("study_id", "sub_study_id", "labels_c", "labels_d"):
        if col not in trials.columns:
            raise ValueError(f"study_codes: trials lack column {col!r} (not a modalens record?)")
    rows = {}
    for sid, js in zip(trials["study_id"].astype(str), trials["labels_c"]):
        rows.setdefault(sid, js)
    for sid, js in zip(trials["sub_study_id"].astype(str), trials["labels_d"]):
        rows.setdefault(sid, js)
    out = pd.DataFrame([{c: (np.nan if json.loads(js).get(c) is None else json.loads(js)[c])
                         for c in CHEXPERT_CLASSES} for js in rows.values()],
                       index=pd.Index(list(rows), name="study_id"))
    return out.sort_index()


def simulate_second_reader(codes: pd.DataFrame, *, error_rate: float, seed: int, coverage: float = 1.0,
                           policy: str = "u-negative") -> pd.DataFrame:
    """Second-reader labels: a seeded ``coverage`` share of studies, each finding flipped w.p. ``error_rate``.

    >>> codes = pd.DataFrame({c: [1.0, np.nan] for c in CHEXPERT_CLASSES}, index=["91", "92"])
    >>> simulate_second_reader(codes, error_rate=0.0, seed=0).loc["92", "Edema"]
    np.float64(0.0)
    """
    if not 0.0 <= error_rate <= 1.0:
        raise ValueError(f"error_rate must lie in [0, 1], got {error_rate}")
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
    missing = [c for c in FINDINGS_13 if c not in codes.columns]
    if missing:
        raise ValueError(f"simulate_second_reader: codes lack columns {missing}")
    rng = np.random.default_rng(seed)
    ids = codes.index.to_numpy()
    n_keep = max(1, int(round(coverage * len(ids))))
    keep = np.sort(rng.choice(len(ids), size=n_keep, replace=False))
    binary = apply_policy(codes[list(FINDINGS_13)].astype(float), policy).to_numpy(dtype=float)[keep]
    if np.isnan(binary).any():
        raise ValueError(f"simulate_second_reader: policy {policy!r} excludes labels; use one without exclusions")
    flip = rng.random(binary.shape) < error_rate
    read = np.where(flip, 1.0 - binary, binary)
    out = pd.DataFrame(read, columns=list(FINDINGS_13), index=pd.Index(ids[keep].astype(str), name="study_id"))
    out["No Finding"] = np.where(read.any(axis=1), np.nan, 1.0)
    out = out[list(CHEXPERT_CLASSES)]
    out.attrs["source"] = f"simulated second reader (error rate {error_rate}, seed {seed}, coverage {coverage})"
    return out

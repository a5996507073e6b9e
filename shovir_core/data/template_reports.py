"""Template reports written from a study's CheXpert labels (for datasets without report text).

ModaLens puts the source study's radiology report into the prompt. The 64-px NIH demo set has
labels but no report text, so the demo builds each study's report from its labels with one fixed,
fully predictable template. These are **template reports**, not radiologists' prose: every book page
that uses them says so.

The template (one sentence per mentioned class, classes in CheXbert order)::

    FINDINGS: <sentences>
    IMPRESSION: <impression>

=================  =============================================  ========================
label code         sentence                                        mentioned
=================  =============================================  ========================
1 (positive)       ``There is <phrase>.``                          always
-1 (uncertain)     ``Possible <phrase>.``                          always
0 (negative)       ``No <phrase>.``                                classes in ``negatives``
blank (NaN)        --                                              never
=================  =============================================  ========================

The impression lists the positive findings (``<Phrase>.``, joined) or reads
``No acute cardiopulmonary process.`` when no finding is positive or uncertain. ``No Finding`` is
never written as a sentence: it is implied by the impression. ``negatives="routine"`` mentions the
negatives radiologists routinely state (pneumothorax, pleural effusion, consolidation, edema);
``"all"`` states every negative code; ``"none"`` states none. Unmentioned negatives read as blank to
a report labeller, which the default label policy (blank -> negative) maps back to negative.

Wording. ``wording="fixed"`` writes every sentence as in the table above, so studies with the same
codes get byte-identical reports. ``wording="varied"`` (the ModaLens demo's reports) draws, per study
and class, one of the equivalent phrasings :data:`POSITIVE_FORMS` / :data:`NEGATIVE_FORMS` (and the
no-acute impression from :data:`NO_ACUTE_FORMS`) from a SHA-256 of the study key and the class: the
text depends on the codes and the key only, carries nothing else about the study, and two studies'
reports differ as real reports do (with ``negatives="all"`` the 13 sentences give 4^13 wordings). A
model that keys a decision on the report text -- ``ref-anchored@w``'s gate -- then draws it
independently per study instead of once per label set. Every phrasing is read back to the same code
by the rules labeller, the mention lexicon and the reference models' reader (a test holds this).

Examples
--------
>>> template_report({"Cardiomegaly": 1.0, "Pleural Effusion": -1.0, "Pneumothorax": 0.0})
'FINDINGS: There is cardiomegaly. No pneumothorax. Possible pleural effusion.\\nIMPRESSION: Cardiomegaly.'
>>> template_report({"No Finding": 1.0, "Edema": 0.0})
'FINDINGS: No pulmonary edema.\\nIMPRESSION: No acute cardiopulmonary process.'
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Literal

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, FINDINGS_13, NEGATIVE, POSITIVE, UNCERTAIN

__all__ = [
    "PHRASES", "ROUTINE_NEGATIVES", "NO_ACUTE", "TEMPLATE_VERSION", "template_report",
    "template_reports", "template_fingerprint", "WORDINGS", "POSITIVE_FORMS", "NEGATIVE_FORMS", "NO_ACUTE_FORMS",
]

TEMPLATE_VERSION = "template-reports-v1"
"""Identity of the template; recorded in every run that uses template reports."""

PHRASES: dict[str, str] = {
    "Enlarged Cardiomediastinum": "enlarged cardiomediastinum",
    "Cardiomegaly": "cardiomegaly",
    "Lung Opacity": "lung opacity",
    "Lung Lesion": "lung lesion",
    "Edema": "pulmonary edema",
    "Consolidation": "consolidation",
    "Pneumonia": "pneumonia",
    "Atelectasis": "atelectasis",
    "Pneumothorax": "pneumothorax",
    "Pleural Effusion": "pleural effusion",
    "Pleural Other": "pleural thickening",
    "Fracture": "fracture",
    "Support Devices": "support devices",
}
"""The phrase each finding is written with (lowercase; the CheXpert mention phrases)."""

ROUTINE_NEGATIVES: tuple[str, ...] = ("Pneumothorax", "Pleural Effusion", "Consolidation", "Edema")
"""Negatives stated under ``negatives="routine"``."""

NO_ACUTE = "No acute cardiopulmonary process."

WORDINGS = ("fixed", "varied")
"""``fixed``: one phrasing per sentence kind; ``varied``: a phrasing drawn per study and class."""
POSITIVE_FORMS: tuple[str, ...] = ("There is {phrase}.", "{Phrase} is present.", "{Phrase} is seen.",
                                   "{Phrase} is noted.")
"""Phrasings of a positive code under ``wording="varied"`` (the first is the fixed wording)."""
NEGATIVE_FORMS: tuple[str, ...] = ("No {phrase}.", "No evidence of {phrase}.", "There is no {phrase}.",
                                   "Negative for {phrase}.")
"""Phrasings of a stated negative code under ``wording="varied"`` (the first is the fixed wording)."""
NO_ACUTE_FORMS: tuple[str, ...] = (NO_ACUTE, "No acute cardiopulmonary abnormality.",
                                   "No acute cardiopulmonary disease.")
"""Impressions of a study without positive or uncertain codes under ``wording="varied"``."""


def _pick(forms: tuple[str, ...], key: str | None, slot: str) -> str:
    """``forms[0]`` without a key; else the form a SHA-256 of (key, slot) selects."""
    if key is None:
        return forms[0]
    digest = hashlib.sha256(f"{TEMPLATE_VERSION}|wording|{key}|{slot}".encode()).digest()
    return forms[int.from_bytes(digest[:8], "big") % len(forms)]


def _fill(form: str, phrase: str) -> str:
    return form.format(phrase=phrase, Phrase=phrase[0].upper() + phrase[1:])


def _code(labels: Mapping, cls: str) -> float:
    value = labels.get(cls, np.nan)
    value = np.nan if value is None else float(value)
    if not (np.isnan(value) or value in (POSITIVE, NEGATIVE, UNCERTAIN)):
        raise ValueError(f"template_report: class {cls!r} has label code {value!r} (expected 1, 0, -1 or blank)")
    return value


def template_report(labels: Mapping[str, float], *,
                    negatives: Literal["routine", "all", "none"] = "routine",
                    wording: Literal["fixed", "varied"] = "fixed", key: str | None = None) -> str:
    """The template report of one study from its CheXpert codes.

    Parameters
    ----------
    labels
        Class name -> code (1, 0, -1, NaN/None for blank). Missing classes are blank; names
        outside the 14 CheXpert classes raise.
    negatives
        Which negative codes are stated: ``"routine"`` (default), ``"all"`` or ``"none"``.
    wording, key
        ``"fixed"`` (default) or ``"varied"``: the phrasings drawn from a hash of ``key`` (the
        study's id; required for ``"varied"``). See the module docstring.

    Returns
    -------
    str
        ``"FINDINGS: ...\\nIMPRESSION: ..."``.
    """
    unknown = sorted(set(labels) - set(CHEXPERT_CLASSES))
    if unknown:
        raise ValueError(f"template_report: unknown classes {unknown}")
    if negatives not in ("routine", "all", "none"):
        raise ValueError(f"template_report: negatives={negatives!r}; use 'routine', 'all' or 'none'")
    if wording not in WORDINGS:
        raise ValueError(f"template_report: wording={wording!r}; use one of {WORDINGS}")
    if wording == "varied" and key is None:
        raise ValueError("template_report: wording='varied' needs the study key (key=...)")
    key = str(key) if wording == "varied" else None
    stated_negatives = {"routine": set(ROUTINE_NEGATIVES), "all": set(FINDINGS_13), "none": set()}[negatives]
    sentences, positives = [], []
    for cls in FINDINGS_13:
        code, phrase = _code(labels, cls), PHRASES[cls]
        if code == POSITIVE:
            sentences.append(_fill(_pick(POSITIVE_FORMS, key, cls), phrase))
            positives.append(phrase)
        elif code == UNCERTAIN:
            sentences.append(f"Possible {phrase}.")
        elif code == NEGATIVE and cls in stated_negatives:
            sentences.append(_fill(_pick(NEGATIVE_FORMS, key, cls), phrase))
    _code(labels, "No Finding")  # validated, never written
    any_uncertain = any(_code(labels, c) == UNCERTAIN for c in FINDINGS_13)
    if positives:
        impression = " ".join(p[0].upper() + p[1:] + "." for p in positives)
    elif any_uncertain:
        impression = "Findings as above; no definite acute process."
    else:
        impression = _pick(NO_ACUTE_FORMS, key, "impression")
    findings = " ".join(sentences) if sentences else "The lungs are clear."
    return f"FINDINGS: {findings}\nIMPRESSION: {impression}"


def template_reports(labels: pd.DataFrame, *, negatives: Literal["routine", "all", "none"] = "routine",
                     wording: Literal["fixed", "varied"] = "fixed", keys=None) -> pd.DataFrame:
    """Template reports of every row of a labels table (index kept, column ``text``).

    Parameters
    ----------
    labels
        One row per study (or image), one float column per CheXpert class (the
        :class:`~shovir_core.data.Dataset` ``labels`` layout).
    negatives, wording
        See :func:`template_report`.
    keys
        The study key of each row (``wording="varied"``; default: the index).
    """
    if not isinstance(labels, pd.DataFrame):
        raise TypeError(f"template_reports: labels must be a DataFrame, got {type(labels).__name__}")
    keys = list(labels.index if keys is None else keys)
    if len(keys) != len(labels):
        raise ValueError(f"template_reports: {len(keys)} keys for {len(labels)} rows")
    # plain dicts of the rows, blanks dropped (a pandas Series per row and its dropna was 80 % of this call)
    texts = [template_report({c: v for c, v in row.items() if not pd.isna(v)}, negatives=negatives,
                             wording=wording, key=k if wording == "varied" else None)
             for k, row in zip(keys, labels.to_dict("records"))]
    return pd.DataFrame({"text": texts}, index=labels.index)


def template_fingerprint(*, negatives: str = "routine", wording: str = "fixed") -> str:
    """A short hash of the template and its options (changes whenever the wording changes)."""
    payload = (TEMPLATE_VERSION, negatives, sorted(PHRASES.items()), ROUTINE_NEGATIVES, NO_ACUTE)
    if wording != "fixed":  # the fixed template's fingerprint is the one it always had
        payload += (wording, POSITIVE_FORMS, NEGATIVE_FORMS, NO_ACUTE_FORMS)
    payload = repr(payload)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]

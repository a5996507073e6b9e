"""Template reports and a small report reader used by the reference models.

The reference models write reports from a set of positive findings with one fixed template, and the
report-reading reference models read a report back with a sentence-level mention/negation rule.
This is deliberately simple and fully predictable; it is not the labeller of
:mod:`shovir_core.labeling` (which the metrics use).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable

from ..labels import FINDINGS_13
from ..vocab import COMPOSITE

__all__ = ["COMPOSITE", "SYNONYMS", "template_report", "read_report", "finding_of_question"]


SYNONYMS: dict[str, tuple[str, ...]] = {
    "Enlarged Cardiomediastinum": ("enlarged cardiomediastinum", "mediastinal widening", "widened mediastinum"),
    "Cardiomegaly": ("cardiomegaly", "enlarged heart", "cardiac enlargement"),
    "Lung Opacity": ("lung opacity", "opacity", "opacities", "infiltrate", "infiltration"),
    "Lung Lesion": ("lung lesion", "nodule", "mass", "lesion"),
    "Edema": ("edema", "oedema"),
    "Consolidation": ("consolidation",),
    "Pneumonia": ("pneumonia",),
    "Atelectasis": ("atelectasis", "atelectatic"),
    "Pneumothorax": ("pneumothorax",),
    "Pleural Effusion": ("pleural effusion", "effusion"),
    "Pleural Other": ("pleural other", "pleural thickening"),
    "Fracture": ("fracture",),
    "Support Devices": ("support device", "support devices", "tube", "catheter", "pacemaker"),
}
"""Mention phrases per finding (lowercase) for :func:`read_report`."""

_NEGATION = re.compile(r"\b(no|not|without|negative for|free of|resolved|absence of|clear of)\b")
_SENTENCE = re.compile(r"[^.;\n]+")


def template_report(positive: Iterable[str]) -> str:
    """The reference models' report for a set of positive findings (CheXpert names).

    >>> template_report(["Cardiomegaly", "Pleural Effusion"])
    'Findings: There is cardiomegaly. There is pleural effusion.'
    >>> template_report([])
    'Findings: No acute cardiopulmonary abnormality.'
    """
    found = [f for f in FINDINGS_13 if f in set(positive)]
    if not found:
        return "Findings: No acute cardiopulmonary abnormality."
    return "Findings: " + " ".join(f"There is {f.lower()}." for f in found)


_PHRASES = tuple((finding, tuple(re.compile(rf"\b{re.escape(p)}\b") for p in phrases))
                 for finding, phrases in SYNONYMS.items())
""":data:`SYNONYMS` as compiled whole-word patterns."""


def read_report(text: str) -> dict[str, float]:
    """Per finding, +1 (mentioned, not negated), -1 (only negated mentions) or 0 (not mentioned).

    A mention is negated when a negation cue precedes it in the same sentence. A report is read once per
    process (the reference models read the same report for every question and arm of a case).

    >>> r = read_report("There is cardiomegaly. No pleural effusion.")
    >>> r["Cardiomegaly"], r["Pleural Effusion"], r["Edema"]
    (1.0, -1.0, 0.0)
    """
    return dict(_read(text))


@lru_cache(maxsize=65536)
def _read(text: str) -> tuple[tuple[str, float], ...]:
    out = {f: 0.0 for f in FINDINGS_13}
    for sentence in _SENTENCE.findall(text.lower()):
        for finding, patterns in _PHRASES:
            for pattern in patterns:
                for m in pattern.finditer(sentence):
                    negated = _NEGATION.search(sentence[: m.start()]) is not None
                    if not negated:
                        out[finding] = 1.0
                    elif out[finding] == 0.0:
                        out[finding] = -1.0
    return tuple(out.items())


def finding_of_question(question: str) -> str:
    """The CheXpert finding (or :data:`COMPOSITE`) a ModaLens question asks about.

    >>> finding_of_question("Does this chest X-ray show Pleural Effusion?")
    'Pleural Effusion'
    >>> finding_of_question("Is any acute cardiopulmonary finding present on this chest X-ray?")
    'composite'
    """
    q = question.lower()
    if "any acute cardiopulmonary finding" in q:
        return COMPOSITE
    hits = [f for f in sorted(FINDINGS_13, key=len, reverse=True) if f.lower() in q]
    if not hits:
        raise ValueError(f"question {question!r} names no CheXpert finding; pass ScoreRequest(finding=...)")
    return hits[0]

"""Report -> 14 CheXpert labels, offline by default.

``label_reports(texts)`` returns one row per text and one column per CheXpert
class (:data:`shovir_core.labels.CHEXPERT_CLASSES`, CheXbert order) holding
1 (positive), 0 (negative), -1 (uncertain) or NaN (not mentioned).

Labellers (a registry, :data:`LABELLERS`):

``rules`` (default)
    mention phrases + negspacy negation and uncertainty on a blank spaCy 3.8
    pipeline + the CheXpert No Finding rule (:mod:`.rules`). medspacy's ConText
    was not used: medspacy 1.3.1 pins spaCy 3.7 / thinc 8.2, which need
    numpy < 2 and conflict with the project's numpy 2 / pandas 3.
``keyword``
    keyword matching with sentence-level negation cues (baseline, :mod:`.keyword`).
``chexbert``
    CheXbert, when its checkpoint and a BERT directory are on local disk
    (:mod:`.chexbert`); otherwise :class:`LabellerUnavailable` says why.

Validated against the IU X-ray indexers' MeSH terms (:mod:`shovir_core.data.iu`, :mod:`shovir_core.tables.labeller_scores`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES
from .aggregate import PATHOLOGIES, aggregate_mentions, no_finding
from .chexbert import CheXbertLabeller, LabellerUnavailable, chexbert_availability
from .keyword import KeywordLabeller, split_sentences
from .lexicon import Lexicon, load_lexicon
from .rules import RuleLabeller

__all__ = [
    "label_reports", "get_labeller", "register_labeller", "labeller_availability", "LABELLERS",
    "LabellerUnavailable", "RuleLabeller", "KeywordLabeller", "CheXbertLabeller", "aggregate_mentions",
    "no_finding", "PATHOLOGIES", "Lexicon", "load_lexicon", "split_sentences",
]

LABELLERS: dict[str, Callable[..., object]] = {
    "rules": RuleLabeller,
    "keyword": KeywordLabeller,
    "chexbert": CheXbertLabeller,
}
"""Labeller name -> factory (keyword options). A labeller has ``name`` and ``label(texts)``."""

_AVAILABILITY: dict[str, Callable[[], tuple[bool, str]]] = {"chexbert": chexbert_availability}
_CACHE: dict[tuple, object] = {}


def register_labeller(name: str, factory: Callable[..., object], *,
                      availability: Callable[[], tuple[bool, str]] | None = None, replace: bool = False) -> None:
    """Add a labeller factory (e.g. a RadGraph-based labeller) to the registry."""
    if name in LABELLERS and not replace:
        raise ValueError(f"labeller {name!r} is already registered (pass replace=True)")
    LABELLERS[name] = factory
    for key in [k for k in _CACHE if k[0] == name]:
        _CACHE.pop(key)
    if availability is not None:
        _AVAILABILITY[name] = availability


def labeller_availability(name: str) -> tuple[bool, str]:
    """``(available, reason)`` for labeller ``name`` with its default options."""
    if name not in LABELLERS:
        raise KeyError(f"unknown labeller {name!r}; registered: {sorted(LABELLERS)}")
    check = _AVAILABILITY.get(name)
    return check() if check else (True, "")


def get_labeller(name: str = "rules", **options):
    """An instance of labeller ``name``; default-option instances are built once and reused.

    The reuse is keyed by the ``SHOVIR_*`` environment the defaults read (e.g. the CheXbert weights
    path), so pointing them elsewhere, or unsetting them, builds (or fails to build) a new one.
    """
    import os

    if name not in LABELLERS:
        raise KeyError(f"unknown labeller {name!r}; registered: {sorted(LABELLERS)}")
    if options:
        return LABELLERS[name](**options)
    key = (name, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("SHOVIR_CHEXBERT"))))
    if key not in _CACHE:
        _CACHE[key] = LABELLERS[name]()
    return _CACHE[key]


def label_reports(texts: Iterable[str] | pd.Series, *, labeller: str = "rules", **options) -> pd.DataFrame:
    """Label radiology reports with the 14 CheXpert classes.

    Parameters
    ----------
    texts : iterable of str or Series
        Report texts; a Series keeps its index in the result.
    labeller : str
        Registry name (``"rules"``, ``"keyword"``, ``"chexbert"``...).
    **options
        Passed to the labeller factory (e.g. ``weights=`` for CheXbert).

    Returns
    -------
    DataFrame
        One row per text, columns :data:`~shovir_core.labels.CHEXPERT_CLASSES`,
        float codes 1 / 0 / -1 / NaN.

    Raises
    ------
    LabellerUnavailable
        When the labeller needs weights that are not on local disk.

    Examples
    --------
    >>> df = label_reports(["Mild cardiomegaly. No pleural effusion.", "Lungs are clear."])
    >>> df.loc[0, ["Cardiomegaly", "Pleural Effusion", "No Finding"]].tolist()
    [1.0, 0.0, nan]
    >>> df.loc[1, "No Finding"]
    np.float64(1.0)
    """
    index = texts.index if isinstance(texts, pd.Series) else None
    items = list(texts)
    bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"report {bad[0]} is {type(items[bad[0]]).__name__}, not str")
    rows = get_labeller(labeller, **options).label(items) if items else []
    out = pd.DataFrame(rows, columns=list(CHEXPERT_CLASSES), dtype=float)
    if index is not None:
        out.index = index
    return out.astype(float).where(out.notna(), np.nan)

"""The labeller's mention lexicon and context cues (``resources/chexpert_mentions.yaml``)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .. import yaml_text

from .. import paths
from ..labels import CHEXPERT_CLASSES

__all__ = ["Lexicon", "load_lexicon", "LEXICON_FILE", "TERMSET_KEYS"]

LEXICON_FILE = "chexpert_mentions.yaml"
TERMSET_KEYS = ("pseudo", "preceding", "following", "termination")


@dataclass(frozen=True)
class Lexicon:
    """Mentions per class and the negation / uncertainty termsets.

    Attributes
    ----------
    phrases : dict
        Class -> tuple of case-insensitive phrases.
    patterns : dict
        Class -> tuple of spaCy token patterns (lists of token dicts).
    negation, uncertainty : dict
        negspacy termsets, keys ``pseudo_negations``, ``preceding_negations``,
        ``following_negations``, ``termination`` (negspacy's names).
    keyword_negation_cues : tuple
        Words that negate a whole sentence in the keyword baseline.
    exclusions : tuple
        Phrases that contain a mention word but mention no CheXpert finding
        ("pericardial effusion"); they shadow the mention inside them.
    """

    phrases: dict[str, tuple[str, ...]]
    patterns: dict[str, tuple[list[dict], ...]]
    negation: dict[str, list[str]]
    uncertainty: dict[str, list[str]]
    keyword_negation_cues: tuple[str, ...]
    exclusions: tuple[str, ...] = ()


def _termset(raw: dict, name: str) -> dict[str, list[str]]:
    missing = [k for k in TERMSET_KEYS if k not in raw]
    if missing:
        raise ValueError(f"{LEXICON_FILE}: termset {name!r} lacks {missing}")
    for key in TERMSET_KEYS:
        bad = [t for t in raw[key] if not isinstance(t, str)]
        if bad:  # e.g. an unquoted `no` that YAML read as False
            raise ValueError(f"{LEXICON_FILE}: termset {name!r}.{key} has non-string terms {bad}; quote them")
    names = {"pseudo": "pseudo_negations", "preceding": "preceding_negations",
             "following": "following_negations", "termination": "termination"}
    return {names[k]: [str(t) for t in raw[k]] for k in TERMSET_KEYS}


@lru_cache(maxsize=1)
def load_lexicon() -> Lexicon:
    """Parse and validate the lexicon file shipped with the package."""
    raw = yaml_text.safe_load((paths.resources_root() / LEXICON_FILE).read_text(encoding="utf-8"))
    mentions = raw.get("mentions", {})
    unknown = [c for c in mentions if c not in CHEXPERT_CLASSES]
    if unknown:
        raise ValueError(f"{LEXICON_FILE}: unknown classes {unknown}")
    phrases, patterns = {}, {}
    for cls in CHEXPERT_CLASSES[:-1]:
        entry = mentions.get(cls)
        if not entry or not entry.get("phrases"):
            raise ValueError(f"{LEXICON_FILE}: class {cls!r} has no mention phrases")
        bad = [p for p in entry["phrases"] if not isinstance(p, str)]
        if bad:
            raise ValueError(f"{LEXICON_FILE}: class {cls!r} has non-string phrases {bad}; quote them")
        phrases[cls] = tuple(p.lower() for p in entry["phrases"])
        patterns[cls] = tuple(entry.get("patterns", []) or [])
    return Lexicon(phrases=phrases, patterns=patterns, negation=_termset(raw["negation"], "negation"),
                   uncertainty=_termset(raw["uncertainty"], "uncertainty"),
                   keyword_negation_cues=tuple(_strings(raw["keyword_negation_cues"], "keyword_negation_cues")),
                   exclusions=tuple(_strings(raw.get("exclusions", []), "exclusions")))


def _strings(items, name: str) -> list[str]:
    bad = [t for t in items if not isinstance(t, str)]
    if bad:
        raise ValueError(f"{LEXICON_FILE}: {name} has non-string entries {bad}; quote them")
    return [t.lower() for t in items]

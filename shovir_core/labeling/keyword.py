"""Baseline: keyword matching with sentence-level negation cues.

A class is mentioned in a sentence when one of its lexicon phrases occurs there
(whole words, case-insensitive); the mention is negative when the sentence holds
any negation cue word ("no", "not", "without", ...), positive otherwise. There is
no uncertainty and no negation scope — the point of comparison for the default
labeller, which shares the same phrases.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from ..labels import CHEXPERT_CLASSES
from .aggregate import aggregate_mentions
from .lexicon import Lexicon, load_lexicon

__all__ = ["KeywordLabeller", "split_sentences"]

_SENT = re.compile(r"(?<=[.!?;])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Split on sentence punctuation followed by whitespace, and on newlines."""
    return [s for s in _SENT.split(text) if s.strip()]


class KeywordLabeller:
    """Keyword matcher with sentence-level negation cues (baseline)."""

    name = "keyword"

    def __init__(self, *, lexicon: Lexicon | None = None) -> None:
        self.lexicon = lexicon or load_lexicon()
        self._class_re = {
            cls: re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(p) for p in sorted(ph, key=len, reverse=True))
                            + r")(?![\w-])", re.IGNORECASE)
            for cls, ph in self.lexicon.phrases.items()
        }
        self._neg_re = re.compile(r"\b(?:" + "|".join(re.escape(c) for c in self.lexicon.keyword_negation_cues)
                                  + r")\b", re.IGNORECASE)

    def label(self, texts: Iterable[str]) -> list[dict[str, float]]:
        """CheXpert codes per text (list of dicts class -> code)."""
        out = []
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"report text must be str, got {type(text).__name__}")
            mentions = []
            for sentence in split_sentences(text):
                negated = bool(self._neg_re.search(sentence))
                for cls in CHEXPERT_CLASSES[:-1]:
                    if self._class_re[cls].search(sentence):
                        mentions.append((cls, "negative" if negated else "positive"))
            out.append(aggregate_mentions(mentions))
        return out

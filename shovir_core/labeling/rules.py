"""The default report labeller: mention phrases, negspacy negation and uncertainty, No Finding.

Pipeline (spaCy 3.8, blank English — no statistical model, nothing downloaded):

1. ``sentencizer`` splits the report into sentences;
2. an ``entity_ruler`` marks mentions of the 13 findings from the phrases and
   token patterns of ``resources/chexpert_mentions.yaml`` (case-insensitive);
3. two negspacy ``negex`` components mark each mention as negated and as
   uncertain, each with its own termset (NegEx scoping: a cue governs the
   mentions after it — or before it, for following cues — up to a termination
   phrase or the sentence end);
4. mentions aggregate to CheXpert codes (positive > uncertain > negative >
   blank) and No Finding follows the CheXpert rule.

Why negspacy and not medspacy's ConText: medspacy 1.3.1 runs offline but pins
spaCy 3.7 / thinc 8.2, which need numpy < 2 and so conflict with the project's
numpy 2 / pandas 3 stack; negspacy 1.1 runs on spaCy 3.8 with numpy 2. NegEx
scoping (negspacy) is what ConText's default rules do for these two modifiers.

References
----------
Chapman W. W. et al., "A simple algorithm for identifying negated findings and
diseases in discharge summaries", J Biomed Inform 2001 (NegEx).
Irvin J. et al., "CheXpert", AAAI 2019 (mention / uncertainty / aggregation stages).
"""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ..labels import CHEXPERT_CLASSES
from .aggregate import aggregate_mentions
from .lexicon import Lexicon, load_lexicon

__all__ = ["RuleLabeller"]

_EXCLUDED = "EXCLUDED"  # entity label of lexicon exclusions (not a finding)


class RuleLabeller:
    """Rule-based CheXpert labeller (spaCy + negspacy); see the module docstring.

    Parameters
    ----------
    lexicon : Lexicon, optional
        Mentions and cues; defaults to the packaged lexicon.
    batch_size : int
        Reports per ``nlp.pipe`` batch.
    """

    name = "rules"

    def __init__(self, *, lexicon: Lexicon | None = None, batch_size: int = 64) -> None:
        self.lexicon = lexicon or load_lexicon()
        self.batch_size = batch_size
        self.nlp = self._build(self.lexicon)

    @staticmethod
    def _build(lex: Lexicon):
        # spaCy (and thinc, which imports torch when installed) load here, on first use,
        # so importing shovir_core.labeling stays light
        import negspacy.negation  # noqa: F401  (registers the "negex" factory)
        import spacy

        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"})
        patterns = []
        for cls in CHEXPERT_CLASSES[:-1]:
            patterns += [{"label": cls, "pattern": p} for p in lex.phrases[cls]]
            patterns += [{"label": cls, "pattern": p} for p in lex.patterns[cls]]
        patterns += [{"label": _EXCLUDED, "pattern": p} for p in lex.exclusions]
        ruler.add_patterns(patterns)
        nlp.add_pipe("negex", name="negation", config={"neg_termset": lex.negation, "extension_name": "negex"})
        nlp.add_pipe("negex", name="uncertainty",
                     config={"neg_termset": lex.uncertainty, "extension_name": "uncertain"})
        return nlp

    @staticmethod
    def _status(ent) -> str:
        if ent._.negex or any(t.lower_ in ("not", "no") for t in ent):
            return "negative"
        if ent._.uncertain:
            return "uncertain"
        return "positive"

    def mentions(self, text: str) -> pd.DataFrame:
        """Every mention of ``text`` with its class, status, span and sentence (for inspection)."""
        doc = self.nlp(_clean(text))
        return pd.DataFrame([{"class": e.label_, "status": self._status(e), "text": e.text,
                              "start": e.start_char, "end": e.end_char, "sentence": e.sent.text}
                             for e in doc.ents if e.label_ != _EXCLUDED], columns=["class", "status", "text", "start", "end", "sentence"])

    def label(self, texts: Iterable[str]) -> list[dict[str, float]]:
        """CheXpert codes per text (list of dicts class -> code)."""
        out = []
        for doc in self.nlp.pipe((_clean(t) for t in texts), batch_size=self.batch_size):
            out.append(aggregate_mentions((e.label_, self._status(e)) for e in doc.ents if e.label_ != _EXCLUDED))
        return out


def _clean(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"report text must be str, got {type(text).__name__}")
    return " ".join(text.split())

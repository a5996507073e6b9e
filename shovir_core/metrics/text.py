"""Natural-language report metrics: BLEU-1/4 (sacrebleu) and ROUGE-L (rouge-score).

Both are reported on the 0-1 scale of ShoViR Table 1. BLEU is corpus-level (one
score over all hypothesis/reference pairs), ROUGE-L the mean per-pair F-measure.

References
----------
Papineni K. et al., "BLEU", ACL 2002; Post M., "A call for clarity in reporting
BLEU scores", WMT 2018 (sacrebleu); Lin C.-Y., "ROUGE", 2004.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# rouge-score imports nltk (seconds): both scorers load on first use, so importing the
# metrics package stays light.

__all__ = ["bleu", "rouge_l", "nlg_metrics"]


def _pairs(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[list[str], list[str]]:
    hyps, refs = list(hypotheses), list(references)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("no hypothesis/reference pairs")
    for kind, items in (("hypothesis", hyps), ("reference", refs)):
        bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
        if bad:
            raise TypeError(f"{kind} {bad[0]} is {type(items[bad[0]]).__name__}, not str")
    return hyps, refs


def bleu(hypotheses: Sequence[str], references: Sequence[str], *, max_order: int = 4,
         lowercase: bool = True, tokenize: str = "13a") -> float:
    """Corpus-level BLEU-n on the 0-1 scale (sacrebleu, one reference per hypothesis).

    Parameters
    ----------
    hypotheses, references : sequence of str
        Generated and reference reports, paired by position.
    max_order : int
        Highest n-gram order (1 for BLEU-1, 4 for BLEU-4); uniform weights and the
        brevity penalty as in sacrebleu.
    lowercase : bool
        Lower-case before tokenising (report-generation convention).
    tokenize : str
        sacrebleu tokenizer name.

    >>> round(bleu(["the heart is normal"], ["the heart is normal"], max_order=1), 6)
    1.0
    """
    hyps, refs = _pairs(hypotheses, references)
    if max_order < 1:
        raise ValueError(f"max_order must be >= 1, got {max_order}")
    from sacrebleu.metrics import BLEU

    metric = BLEU(max_ngram_order=max_order, lowercase=lowercase, tokenize=tokenize,
                  effective_order=False)
    return float(metric.corpus_score(hyps, [refs]).score / 100.0)


def rouge_l(hypotheses: Sequence[str], references: Sequence[str], *, use_stemmer: bool = True,
            per_sample: bool = False):
    """Mean ROUGE-L F-measure over pairs (rouge-score); ``per_sample=True`` returns the array too."""
    hyps, refs = _pairs(hypotheses, references)
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    scores = np.array([scorer.score(r, h)["rougeL"].fmeasure for h, r in zip(hyps, refs)])
    return (float(scores.mean()), scores) if per_sample else float(scores.mean())


def nlg_metrics(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """``bleu1``, ``bleu4`` and ``rouge_l`` of the pairs (schema names of ``metrics.yaml``)."""
    return {"bleu1": bleu(hypotheses, references, max_order=1),
            "bleu4": bleu(hypotheses, references, max_order=4),
            "rouge_l": rouge_l(hypotheses, references)}

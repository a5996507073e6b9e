"""Natural-language report metrics: BLEU-1/4 (sacrebleu) and ROUGE-L (rouge-score).

Both are reported on the 0-1 scale of ShoViR Table 1. BLEU is corpus-level (one
score over all hypothesis/reference pairs), ROUGE-L the mean per-pair F-measure.

Two conventions (:data:`TEXT_CONVENTIONS`, chosen by the noise preset's ``text_metrics``):

``"project"``         lower-cased 13a BLEU with sacrebleu's default exponential smoothing; ROUGE-L with
                      the Porter stemmer (the report-generation convention).
``"reference-code"``  the ShoViR authors' ``evaluations/run_eval.py`` @07a7a6d (HF ``evaluate``): BLEU
                      case-sensitive, 13a-tokenised, corpus-level, unsmoothed (``evaluate``'s
                      ``compute_bleu(smooth=False)``: a zero n-gram precision gives 0); ROUGE-L without
                      stemming, the mean per-pair F (``evaluate``'s default aggregator reports a
                      bootstrap median of that mean, which differs from it by resampling noise only).

References
----------
Papineni K. et al., "BLEU", ACL 2002; Post M., "A call for clarity in reporting
BLEU scores", WMT 2018 (sacrebleu); Lin C.-Y., "ROUGE", 2004.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache

import numpy as np

# rouge-score imports nltk (seconds): both scorers load on first use, so importing the
# metrics package stays light.

__all__ = ["bleu", "bleu_parts", "rouge_l", "nlg_metrics", "TEXT_CONVENTIONS"]

TEXT_CONVENTIONS: dict[str, dict] = {
    "project": {"lowercase": True, "smooth": "exp", "use_stemmer": True},
    "reference-code": {"lowercase": False, "smooth": "none", "use_stemmer": False},
}
"""BLEU / ROUGE-L options of each convention (see the module docstring)."""


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
         lowercase: bool = True, tokenize: str = "13a", smooth: str = "exp") -> float:
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
    smooth : str
        sacrebleu smoothing method (``"exp"``, its default; ``"none"`` as HF ``evaluate``).

    >>> round(bleu(["the heart is normal"], ["the heart is normal"], max_order=1), 6)
    1.0
    >>> round(bleu(["The heart"], ["the heart"], max_order=1, lowercase=False), 6)
    0.5
    """
    hyps, refs = _pairs(hypotheses, references)
    if max_order < 1:
        raise ValueError(f"max_order must be >= 1, got {max_order}")
    return float(_corpus_bleu(hyps, refs, max_order, lowercase, tokenize, smooth).score / 100.0)


def _corpus_bleu(hyps: list[str], refs: list[str], max_order: int, lowercase: bool, tokenize: str, smooth: str):
    """sacrebleu's corpus ``BLEUScore`` of checked pairs (one reference each)."""
    from sacrebleu.metrics import BLEU

    return BLEU(max_ngram_order=max_order, lowercase=lowercase, tokenize=tokenize, effective_order=False,
                smooth_method=smooth).corpus_score(hyps, [refs])


def bleu_parts(hypotheses: Sequence[str], references: Sequence[str], *, max_order: int = 1,
               lowercase: bool = True, tokenize: str = "13a", smooth: str = "exp") -> dict[str, float]:
    """What a corpus-level BLEU-n is made of: ``bleu``, ``brevity_penalty``, ``precision_1`` (unigram
    precision, 0-1), ``hyp_tokens``, ``ref_tokens`` and ``length_ratio`` (hypothesis / reference tokens).

    BLEU = BP · exp(mean log p_n) with BP = exp(1 − r/h) when the hypotheses are shorter than the
    references (Papineni et al. 2002, §2.2.2): short reports lose score to the brevity penalty even when
    every word they write is in the reference.

    >>> parts = bleu_parts(["there is x"], ["there is x and y"])
    >>> round(parts["precision_1"], 3), round(parts["brevity_penalty"], 3), parts["length_ratio"]
    (1.0, 0.513, 0.6)
    """
    hyps, refs = _pairs(hypotheses, references)
    score = _corpus_bleu(hyps, refs, max_order, lowercase, tokenize, smooth)
    return {"bleu": float(score.score / 100.0), "brevity_penalty": float(score.bp),
            "precision_1": float(score.precisions[0] / 100.0), "hyp_tokens": int(score.sys_len),
            "ref_tokens": int(score.ref_len),
            "length_ratio": float(score.sys_len / score.ref_len) if score.ref_len else float("nan")}


def rouge_l(hypotheses: Sequence[str], references: Sequence[str], *, use_stemmer: bool = True,
            per_sample: bool = False):
    """Mean ROUGE-L F-measure over pairs (rouge-score); ``per_sample=True`` returns the array too.

    rouge-score's own scorer and tokenizer; each distinct text is tokenised once per process
    (:func:`_rouge_tokenizer`: a table's records score the same reference reports under every model and
    condition, and the Porter stemmer was 45 % of a ShoViR Supplementary B notebook). The scores are the same."""
    hyps, refs = _pairs(hypotheses, references)
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_rouge_tokenizer(use_stemmer))
    scores = np.array([scorer.score(r, h)["rougeL"].fmeasure for h, r in zip(hyps, refs)])
    return (float(scores.mean()), scores) if per_sample else float(scores.mean())


@cache
def _rouge_tokenizer(use_stemmer: bool):
    """rouge-score's ``DefaultTokenizer`` whose ``tokenize`` remembers the last 65,536 distinct texts (the
    scorer only reads the tokens), one per stemming setting and process."""
    from rouge_score import tokenizers

    tokenizer = tokenizers.DefaultTokenizer(use_stemmer)
    tokenizer.tokenize = lru_cache(maxsize=1 << 16)(tokenizer.tokenize)
    return tokenizer


def nlg_metrics(hypotheses: Sequence[str], references: Sequence[str], *,
                convention: str = "project") -> dict[str, float]:
    """``bleu1``, ``bleu4`` and ``rouge_l`` of the pairs (schema names of ``metrics.yaml``) under a convention."""
    if convention not in TEXT_CONVENTIONS:
        raise ValueError(f"text-metric convention {convention!r} not in {sorted(TEXT_CONVENTIONS)}")
    c = TEXT_CONVENTIONS[convention]
    hyps, refs = _pairs(hypotheses, references)
    from sacrebleu.metrics import BLEU

    # BLEU-1 from BLEU-4's statistics: its unigram counts and lengths are the same, and sacrebleu's
    # compute_bleu is what its corpus_score runs on them (the same value; the corpus tokenised once)
    four = _corpus_bleu(hyps, refs, 4, c["lowercase"], "13a", c["smooth"])
    one = BLEU.compute_bleu(four.counts[:1], four.totals[:1], four.sys_len, four.ref_len, smooth_method=c["smooth"],
                            max_ngram_order=1)
    return {"bleu1": float(one.score / 100.0), "bleu4": float(four.score / 100.0),
            "rouge_l": rouge_l(hyps, refs, use_stemmer=c["use_stemmer"])}

"""Readout arithmetic at the first generated position (numpy only).

ModaLens readouts (ModaLens §2, "Prompt and readout"; §4.1; App. I): (i) lowercase first-token:
argmax over the logits of ``yes`` and ``no``; (ii) token family: log-sum-exp of each family's logits
(case and leading-space variants), then argmax; full-vocabulary log-probabilities; (iii) the generated answer parsed to
Yes / No / Uncertain or unscoreable, with a format-compliance flag.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = ["TokenFamilies", "logsumexp", "yes_no_readout", "parse_answer", "family_variants"]


def logsumexp(values: np.ndarray) -> float:
    """Numerically stable ``log(sum(exp(values)))`` of a 1-D array."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("logsumexp of an empty array")
    m = float(v.max())
    if not np.isfinite(m):
        return m
    return m + float(np.log(np.exp(v - m).sum()))


def family_variants(word: str) -> tuple[str, ...]:
    """The case and leading-space variants of an answer word: ``yes, Yes, ' yes', ' Yes'``."""
    low, cap = word.lower(), word.capitalize()
    return (low, cap, " " + low, " " + cap)


@dataclass(frozen=True)
class TokenFamilies:
    """Token ids of the lowercase answer tokens and of the two families.

    ``yes_id``/``no_id`` are the lowercase tokens (the headline readout); ``yes_family`` and
    ``no_family`` include them plus their case and leading-space variants; ``names`` maps each id
    to its token string.
    """

    yes_id: int
    no_id: int
    yes_family: tuple[int, ...]
    no_family: tuple[int, ...]
    names: dict

    def __post_init__(self) -> None:
        if self.yes_id not in self.yes_family or self.no_id not in self.no_family:
            raise ValueError(f"lowercase ids must belong to their families: {self}")
        if set(self.yes_family) & set(self.no_family):
            raise ValueError(f"yes and no families share token ids: {self}")

    @classmethod
    def from_tokenizer(cls, encode: Callable[[str], list[int]], decode: Callable[[int], str], *,
                       yes: str = "yes", no: str = "no", model: str = "model") -> "TokenFamilies":
        """Build the families from a tokenizer: each variant must encode to exactly one token.

        Parameters
        ----------
        encode
            Text -> token ids without special tokens.
        decode
            One token id -> its string.
        """
        ids = {}
        for word in (yes, no):
            fam = []
            for variant in family_variants(word):
                toks = encode(variant)
                if len(toks) != 1:
                    raise ValueError(f"{model}: answer variant {variant!r} is not one token ({toks}); "
                                     f"give the token families explicitly in the registry")
                if toks[0] not in fam:
                    fam.append(int(toks[0]))
            ids[word] = tuple(fam)
        names = {i: decode(i) for i in ids[yes] + ids[no]}
        return cls(ids[yes][0], ids[no][0], ids[yes], ids[no], names)

    def check(self, expected: dict, *, model: str) -> None:
        """Raise when the ids differ from ones the paper states (e.g. MedGemma ``yes`` = 4443)."""
        got = {"yes_id": self.yes_id, "no_id": self.no_id,
               "yes_family": tuple(sorted(self.yes_family)), "no_family": tuple(sorted(self.no_family))}
        for key, value in expected.items():
            want = tuple(sorted(value)) if isinstance(value, (list, tuple)) else value
            if got[key] != want:
                raise ValueError(f"{model}: tokenizer gives {key} = {got[key]}, the paper states {want}")


def yes_no_readout(logits: np.ndarray, families: TokenFamilies, *, top1_token: str | None = None) -> dict:
    """All first-position readouts from one row of next-token logits.

    Parameters
    ----------
    logits
        1-D float array over the vocabulary (raw logits, not log-probabilities).
    families
        The answer token ids.
    top1_token
        The string of the arg-max token (filled by the caller, which owns the tokenizer).

    Returns
    -------
    dict
        ``logit_yes, logit_no, margin, readout, family_logit_yes, family_logit_no, family_margin,
        family_readout, logp_yes, logp_no, family_logp_yes, family_logp_no, top1_id, top1_token,
        top1_prob, token_logits``. Ties read ``"no"``.

    Examples
    --------
    >>> fam = TokenFamilies(0, 1, (0, 2), (1, 3), {0: "yes", 1: "no", 2: "Yes", 3: "No"})
    >>> r = yes_no_readout(np.log(np.array([0.1, 0.2, 0.6, 0.1])), fam)
    >>> r["readout"], r["family_readout"], round(r["margin"], 4), round(float(np.exp(r["family_logp_yes"])), 4)
    ('no', 'yes', -0.6931, 0.7)
    """
    row = np.asarray(logits, dtype=np.float64)
    if row.ndim != 1:
        raise ValueError(f"logits must be 1-D over the vocabulary, got shape {row.shape}")
    norm = logsumexp(row)
    ly, ln = float(row[families.yes_id]), float(row[families.no_id])
    fy = logsumexp(row[list(families.yes_family)])
    fn = logsumexp(row[list(families.no_family)])
    top = int(np.argmax(row))
    return {
        "logit_yes": ly, "logit_no": ln, "margin": ly - ln, "readout": "yes" if ly > ln else "no",
        "family_logit_yes": fy, "family_logit_no": fn, "family_margin": fy - fn,
        "family_readout": "yes" if fy > fn else "no",
        "logp_yes": ly - norm, "logp_no": ln - norm, "family_logp_yes": fy - norm, "family_logp_no": fn - norm,
        "top1_id": top, "top1_token": top1_token, "top1_prob": float(np.exp(row[top] - norm)),
        "token_logits": {families.names[i]: float(row[i]) for i in families.yes_family + families.no_family},
    }


_WORD = re.compile(r"[A-Za-z]+")


def parse_answer(text: str | None, *, options: Sequence[str] = ("Yes", "No")) -> tuple[str | None, bool | None]:
    """Parse a generated answer and flag format compliance.

    ``answer`` is the option the generation's first word names (case-insensitive, after leading
    whitespace, quotes or markdown emphasis), else ``"unscoreable"``. ``compliant`` follows the
    paper ("the share of generations that open with Yes or No"): the text, after leading whitespace,
    opens with an option exactly as written, followed by a non-letter or the end. ``text=None``
    (nothing generated) gives ``(None, None)``.

    >>> parse_answer("Yes.")
    ('Yes', True)
    >>> parse_answer("No, there is no effusion")
    ('No', True)
    >>> parse_answer("**yes**")
    ('Yes', False)
    >>> parse_answer("Based on the provided report")
    ('unscoreable', False)
    >>> parse_answer("Uncertain", options=("Yes", "No", "Uncertain"))
    ('Uncertain', True)
    """
    if text is None:
        return None, None
    lookup = {o.lower(): o for o in options}
    match = _WORD.search(text)
    answer = "unscoreable"
    if match is not None and text[: match.start()].strip(" \t\n*_\"'`") == "":
        answer = lookup.get(match.group(0).lower(), "unscoreable")
    head = text.lstrip()
    compliant = any(re.match(rf"{re.escape(o)}(?![A-Za-z])", head) for o in options)
    return answer, compliant

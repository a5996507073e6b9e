"""Reference models with stated behaviour on the datasets without a report (ModaLens Table 6, §4.1, App. N.4).

Two deterministic models make every number of the chapter "Datasets without a report" able to fail:

``ref-question-only``
    reads the question (and its options) and never the image: its margin is a fixed function of
    the SHA-256 of the question text. Its image-swap flip rate is **exactly 0**, and so are its
    image-token knockout and random-token control rates; the question swap moves it.
``ref-image-reader``
    reads the image: its margin is a fixed function of the SHA-256 of (image pixels, question).
    Swapping the image redraws its answer (flip rate near 1/2 for yes/no, 3/4 for four options);
    knocking the image tokens out leaves it with "no image" (``image=None``), which redraws the
    answer in the same way, so its knockout rate equals its flip rate up to sampling noise; the
    count-matched random-token control (a random subset of all positions) leaves the image
    readable and changes **nothing** (rate exactly 0).

Both answer the final-token yes/no readout (:meth:`score_yes_no`, the keys of
:data:`~shovir_core.models.protocol.SCORE_KEYS`) and the four-option letter readout
(:meth:`read_vqa`), and "generate" their readout word (``yes`` / ``no`` or the letter) with a
first-token probability ``sigmoid(|margin|)``.
"""
from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np

from .protocol import VLM, ScoreRequest, image_fingerprint
from .spec import ModelSpec

__all__ = ["REFERENCE_VQA_SPECS", "QuestionOnly", "ImageReader", "build_reference_vqa", "KNOCKOUT_SPANS"]

REFERENCE_VQA_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("ref-question-only", "reference-vqa", paper="reference",
              notes="answers from the question text alone (SHA-256 of the question): image-swap flip rate 0"),
    ModelSpec("ref-image-reader", "reference-vqa", paper="reference",
              notes="answers from (image pixels, question): image swap and image-token knockout redraw the answer"),
)
"""The registry entries (:data:`shovir_core.models.REGISTRY` includes them)."""

KNOCKOUT_SPANS = ("image", "random_matched")


def _unit(*parts: str) -> float:
    """A number in [-1, 1) from the SHA-256 of the parts."""
    h = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(h[:8], "little") / 2**63 - 1.0


def _letters_of(question: str) -> tuple[str, ...]:
    return tuple(x for x in "ABCD" if f"\n{x}. " in question)


class _ReferenceVQA(VLM):
    """Shared readout arithmetic; subclasses define :meth:`_evidence` (the image part of the key)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _evidence(self, request: ScoreRequest, knockout: str | None) -> str:
        raise NotImplementedError

    def _logits(self, request: ScoreRequest, tokens: Sequence[str], knockout: str | None) -> np.ndarray:
        ev = self._evidence(request, knockout)
        return np.array([3.0 * _unit(self.name, ev, request.question, t) for t in tokens])

    def read_vqa(self, requests: Sequence[ScoreRequest], *, letters: Sequence[str] | None = None,
                 knockout: str | None = None) -> list[dict]:
        """Per request: ``readout`` (``yes``/``no`` or a letter), ``margin``, ``logits`` (per token)."""
        if knockout is not None and knockout not in KNOCKOUT_SPANS:
            raise ValueError(f"{self.name}: knockout span {knockout!r} not in {KNOCKOUT_SPANS}")
        tokens = tuple(letters) if letters else ("yes", "no")
        out = []
        for r in requests:
            z = self._logits(r, tokens, knockout)
            logits = {t: float(v) for t, v in zip(tokens, z)}
            if not letters:  # ModaLens' yes/no readout: margin logit(yes) - logit(no), ties read no
                out.append({"readout": "yes" if z[0] > z[1] else "no", "margin": float(z[0] - z[1]), "logits": logits})
                continue
            order = np.argsort(-z, kind="stable")
            out.append({"readout": tokens[int(order[0])], "margin": float(z[order[0]] - z[order[1]]), "logits": logits})
        return out

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        out = []
        for r in requests:
            letters = _letters_of(r.question)
            res = self.read_vqa([r], letters=letters or None)[0]
            z = res["logits"]
            ly, ln = z.get("yes", float("nan")), z.get("no", float("nan"))
            p = 1.0 / (1.0 + math.exp(-abs(res["margin"])))
            word = res["readout"]
            out.append({"logit_yes": ly, "logit_no": ln, "margin": res["margin"],
                        "readout": word if not letters else ("yes" if ly > ln else "no"),
                        "family_logit_yes": ly, "family_logit_no": ln, "family_margin": ly - ln,
                        "family_readout": "yes" if ly > ln else "no", "logp_yes": float("nan"), "logp_no": float("nan"),
                        "family_logp_yes": float("nan"), "family_logp_no": float("nan"), "top1_id": -1,
                        "top1_token": word, "top1_prob": p, "token_logits": z,
                        "generated": word if answer_tokens else None,
                        "answer": (word.capitalize() if not letters else word) if answer_tokens else None,
                        "compliant": bool(answer_tokens) or None, "n_input_tokens": 0})
        return out

    def identity(self) -> dict:
        return {"name": self.name, "kind": "reference-vqa"}


class QuestionOnly(_ReferenceVQA):
    """``ref-question-only``: the image never enters the answer."""

    def _evidence(self, request, knockout):
        return "question-only"


class ImageReader(_ReferenceVQA):
    """``ref-image-reader``: the answer is a function of the pixels and the question."""

    def _evidence(self, request, knockout):
        if knockout == "image":
            return "none"
        return image_fingerprint(request.image)


def build_reference_vqa(spec: ModelSpec, *, local_path=None, device=None, dtype=None) -> _ReferenceVQA:
    """Build ``ref-question-only`` or ``ref-image-reader``."""
    kinds = {"ref-question-only": QuestionOnly, "ref-image-reader": ImageReader}
    if spec.name not in kinds:
        raise KeyError(f"unknown reference-vqa model {spec.name!r}; known: {sorted(kinds)}")
    return kinds[spec.name](spec.name)

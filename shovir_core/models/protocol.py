"""The one interface every model answers: report generation and yes/no scoring.

A model adapter subclasses :class:`VLM` and implements

``generate_reports(images, *, prompt=None, max_new_tokens=None, boxes=None) -> list[str]``
    ShoViR: one report per image (greedy decoding unless the model's spec says otherwise).
``score_yes_no(requests, *, answer_tokens=0) -> list[dict]``
    ModaLens: one readout dict per :class:`ScoreRequest` (keys in :data:`SCORE_KEYS`).

Requests are plain data (numpy pixels, strings) so the protocols never import torch.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from ..vocab import ORDERS

__all__ = [
    "ScoreRequest", "VLM", "Box", "ORDERS", "SCORE_KEYS", "ANSWERS",
    "image_fingerprint", "to_rgb_uint8", "to_gray_float",
]

Box = tuple[str, float, float, float, float]
"""A box as ``(finding, x1, y1, x2, y2)`` in pixels of the image it belongs to."""

ANSWERS = ("Yes", "No", "Uncertain", "unscoreable")

SCORE_KEYS = (
    "logit_yes", "logit_no", "margin", "readout",
    "family_logit_yes", "family_logit_no", "family_margin", "family_readout",
    "logp_yes", "logp_no", "family_logp_yes", "family_logp_no",
    "top1_id", "top1_token", "top1_prob", "token_logits",
    "generated", "answer", "compliant", "n_input_tokens",
)
"""Keys of every dict returned by :meth:`VLM.score_yes_no`.

``logit_yes``/``logit_no``  logits of the lowercase ``yes``/``no`` tokens at the first generated
                            position (the ModaLens headline readout); ``margin`` their difference;
                            ``readout`` ``"yes"`` or ``"no"`` (argmax; ties read ``"no"``).
``family_*``                log-sum-exp of the logits of each token family (case and leading-space
                            variants), their margin and argmax readout.
``logp_*``                  full-vocabulary log-probabilities of the lowercase tokens;
                            ``family_logp_*`` of the families (log of the summed probabilities).
``top1_*``                  the arg-max token of the whole vocabulary, its string and probability.
``token_logits``            ``{token string: logit}`` for every family token (the raw store).
``generated``               greedy continuation of ``answer_tokens`` tokens (``None`` when 0);
``answer``                  its parse (``Yes``/``No``/``Uncertain``/``unscoreable``, ``None`` when
                            nothing was generated); ``compliant`` whether it is a bare option.
``n_input_tokens``          length of the model input (prompt tokens incl. image tokens).
"""


@dataclass(frozen=True)
class ScoreRequest:
    """One yes/no question put to a model.

    Parameters
    ----------
    image
        Pixels (2-D grayscale or H x W x 3; uint8, uint16 or float in [0, 1]); ``None`` builds no
        image block (the "image absent" arm).
    question
        The question text, e.g. ``"Does this chest X-ray show Pleural Effusion?"``.
    report
        Report text; ``None`` removes the ``Report:`` line (report absent).
    order
        ``"image_first"`` (default) or ``"text_first"``.
    instruction
        Name in :data:`shovir_core.models.prompts.INSTRUCTIONS` (``"none"``, ``"yes_no"``,
        ``"no_yes"``, ``"yes_no_uncertain"``).
    framing
        Name in :data:`shovir_core.models.prompts.FRAMINGS` (``"historical"``, ``"warning"``) or
        ``None``; a framing sentence is placed before the report and needs one.
    finding
        The CheXpert class asked about (or ``"composite"``); used by the reference models, inferred
        from the question when ``None``. Never shown to a real model.
    boxes
        Boxes of the shown image as ``(finding, x1, y1, x2, y2)``; only models that declare
        ``uses_boxes`` read them (the context-shortcut reference model). Never shown to a real model.
    """

    image: np.ndarray | None
    question: str
    report: str | None = None
    order: Literal["image_first", "text_first"] = "image_first"
    instruction: str = "none"
    framing: str | None = None
    finding: str | None = None
    boxes: tuple[Box, ...] | None = None

    def __post_init__(self) -> None:
        from .prompts import FRAMINGS, INSTRUCTIONS

        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"ScoreRequest: question must be a non-empty string, got {self.question!r}")
        if self.order not in ORDERS:
            raise ValueError(f"ScoreRequest({self.question!r}): order {self.order!r} not in {ORDERS}")
        if self.instruction not in INSTRUCTIONS:
            raise ValueError(
                f"ScoreRequest({self.question!r}): instruction {self.instruction!r} not in {sorted(INSTRUCTIONS)}"
            )
        if self.framing is not None:
            if self.framing not in FRAMINGS:
                raise ValueError(
                    f"ScoreRequest({self.question!r}): framing {self.framing!r} not in {sorted(FRAMINGS)}"
                )
            if self.report is None:
                raise ValueError(f"ScoreRequest({self.question!r}): framing {self.framing!r} needs a report")
        if self.image is not None:
            arr = np.asarray(self.image)
            if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3)):
                raise ValueError(
                    f"ScoreRequest({self.question!r}): image must be H x W or H x W x 3, got shape {arr.shape}"
                )
        if self.boxes is not None:
            object.__setattr__(self, "boxes", tuple(tuple(b) for b in self.boxes))

    def text_fingerprint(self) -> dict:
        """The request's non-pixel fields as a JSON-able dict (for cache keys)."""
        return {
            "question": self.question, "report": self.report, "order": self.order,
            "instruction": self.instruction, "framing": self.framing, "finding": self.finding,
            "boxes": None if self.boxes is None else [list(b) for b in self.boxes],
        }


def image_fingerprint(image: np.ndarray | None) -> str:
    """SHA-256 of an image's shape, dtype and bytes (``"none"`` for no image)."""
    if image is None:
        return "none"
    arr = np.ascontiguousarray(image)
    h = hashlib.sha256()
    h.update(json.dumps([list(arr.shape), str(arr.dtype)]).encode())
    h.update(arr.tobytes())
    return h.hexdigest()


def to_gray_float(image: np.ndarray) -> np.ndarray:
    """Pixels as a 2-D float32 array in [0, 1] (uint8 / 255, uint16 / 65535, floats clipped)."""
    arr = np.asarray(image)
    if arr.ndim == 3:
        arr = arr[..., :3].mean(axis=2) if arr.shape[2] >= 3 else arr[..., 0]
    if arr.dtype == np.uint8:
        out = arr.astype(np.float32) / 255.0
    elif arr.dtype == np.uint16:
        out = arr.astype(np.float32) / 65535.0
    elif np.issubdtype(arr.dtype, np.floating):
        out = np.clip(arr.astype(np.float32), 0.0, 1.0)
    else:
        raise ValueError(f"unsupported pixel dtype {arr.dtype} (use uint8, uint16 or float in [0, 1])")
    return out


def to_rgb_uint8(image: np.ndarray) -> np.ndarray:
    """Pixels as H x W x 3 uint8 (the form processors receive as a PIL image)."""
    arr = np.asarray(image)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[..., 0]
    if arr.dtype == np.uint8:
        out = arr
    elif arr.dtype == np.uint16:
        out = ((arr.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    elif np.issubdtype(arr.dtype, np.floating):
        out = np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)
    else:
        raise ValueError(f"unsupported pixel dtype {arr.dtype} (use uint8, uint16 or float in [0, 1])")
    if out.ndim == 2:
        out = np.repeat(out[:, :, None], 3, axis=2)
    return np.ascontiguousarray(out)


class VLM:
    """Base class of every model adapter.

    Subclasses set :attr:`name` and implement :meth:`generate_reports` and :meth:`score_yes_no`.
    :meth:`identity` (model id + revision + settings) and :meth:`input_key` (the exact model
    input of one request) feed the inference cache (:mod:`shovir_core.models.cache`).
    """

    name: str = "vlm"
    uses_boxes: bool = False
    """Whether the model reads ``ScoreRequest.boxes`` / ``generate_reports(boxes=...)``."""

    def generate_reports(
        self,
        images: Sequence[np.ndarray],
        *,
        prompt: str | None = None,
        max_new_tokens: int | None = None,
        boxes: Sequence[Sequence[Box]] | None = None,
    ) -> list[str]:
        """One report per image.

        Parameters
        ----------
        images
            Pixel arrays (see :class:`ScoreRequest` for accepted forms).
        prompt
            Overrides the model's report prompt (the registry's paper prompt by default).
        max_new_tokens
            Overrides the model's generation length.
        boxes
            Per image, its boxes (only read by models with ``uses_boxes``).
        """
        raise NotImplementedError(f"{type(self).__name__} does not generate reports")

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        """Readouts at the first generated position, one dict per request (keys :data:`SCORE_KEYS`).

        Parameters
        ----------
        requests
            The questions.
        answer_tokens
            When > 0, also generate this many greedy tokens and parse the answer.
        """
        raise NotImplementedError(f"{type(self).__name__} does not score yes/no questions")

    def vision_embedding(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One vector per image: the mean-pooled output of the model's vision tower.

        ModaLens App. B measures how far apart the two images of a pair are for the model under
        test by the cosine distance of these vectors (after centring on the cohort mean;
        :func:`shovir_core.metrics.distance.centred_cosine_distance`). Adapters with a vision
        tower override this; each image's vector depends on that image only.
        """
        raise NotImplementedError(f"{type(self).__name__} ({self.name}) has no vision tower to embed images with")

    def identity(self) -> dict:
        """Model id, revision and every setting that changes outputs (hashed into cache keys)."""
        return {"name": self.name}

    def provenance(self) -> dict:
        """What a run manifest records about this model (defaults to :meth:`identity`)."""
        return dict(self.identity())

    def input_key(self, request: ScoreRequest | None = None, *, image: np.ndarray | None = None,
                  prompt: str | None = None) -> str:
        """A string that identifies the exact model input of one score request or report request.

        The default hashes the request fields and the pixels; transformer adapters override it with
        the rendered token ids.
        """
        if request is not None:
            payload = {"request": request.text_fingerprint(), "image": image_fingerprint(request.image)}
        else:
            payload = {"prompt": prompt, "image": image_fingerprint(image)}
        return json.dumps(payload, sort_keys=True)

    def input_keys(self, requests: Sequence[ScoreRequest]) -> list[str]:
        """:meth:`input_key` of each score request (adapters may compute them together; the same strings).

        With the default :meth:`input_key`, each distinct image object is fingerprinted once (a case's
        questions share one array; hashing it again per question was half of this call).
        """
        if type(self).input_key is not VLM.input_key:
            return [self.input_key(r) for r in requests]
        prints: dict[int, str] = {}  # id() of an image the requests hold (alive for the whole call)
        out = []
        for r in requests:
            if id(r.image) not in prints:
                prints[id(r.image)] = image_fingerprint(r.image)
            out.append(json.dumps({"request": r.text_fingerprint(), "image": prints[id(r.image)]}, sort_keys=True))
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

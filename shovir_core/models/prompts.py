"""Prompt construction for the ModaLens yes/no questions and the ShoViR report prompts.

ModaLens prompt (ModaLens §2, "Prompt and readout"; App. D framings, App. I and M instructions):
the model's own chat template, one user turn, no system prompt. The content is an image block and a text block (text first swaps
them). The text block reads::

    [<framing sentence>\\n]Report: <report>
    <blank line>
    Question: <question>[ <instruction>]

With the report absent the ``Report:`` line and the blank line are removed; with the image absent
no image block is built. The framing sentences of Appendix D are paraphrased from the paper's
description (the verbatim sentences are not published).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only (protocol imports this module to validate requests)
    from .protocol import ScoreRequest

__all__ = ["INSTRUCTIONS", "FRAMINGS", "ANSWER_OPTIONS", "text_block", "score_layout", "chat_messages",
           "score_messages", "report_messages",
           "SHARED_MINIMAL_PROMPT"]

SHARED_MINIMAL_PROMPT = "Describe the radiographic findings in this chest X-ray."
"""The ShoViR Supplementary's shared prompt (§C.3): the authors' ``radiology_minimal`` prompt key
(``arco-group/ShoViR-Bench`` ``src/benchmark/prompts.py`` @7dd01b7), used for every model by
``--single-prompt-baseline``."""

INSTRUCTIONS: dict[str, str] = {
    "none": "",
    "yes_no": "Answer with exactly Yes or No.",
    "no_yes": "Answer with exactly No or Yes.",
    "yes_no_uncertain": "Answer with exactly Yes, No or Uncertain.",
}
"""Answer instructions appended to the question (Appendix I; reversed order and abstention: App. M)."""

ANSWER_OPTIONS: dict[str, tuple[str, ...]] = {
    "none": ("Yes", "No"),
    "yes_no": ("Yes", "No"),
    "no_yes": ("Yes", "No"),
    "yes_no_uncertain": ("Yes", "No", "Uncertain"),
}
"""Answers the generated-answer parser accepts under each instruction."""

FRAMINGS: dict[str, str] = {
    "historical": (
        "The report below describes an earlier study of the same patient; answer the question from "
        "the current image and use the report as context only."
    ),
    "warning": (
        "The report below may not describe this image and may be wrong; answer the question from the "
        "image and treat the report as unverified context."
    ),
}
"""One sentence placed before the report (Appendix D), paraphrased from the paper's description."""


def text_block(request: ScoreRequest) -> str:
    """The text block of a ModaLens prompt.

    >>> from shovir_core.models.protocol import ScoreRequest
    >>> text_block(ScoreRequest(None, "Does this chest X-ray show Edema?", report="No edema."))
    'Report: No edema.\\n\\nQuestion: Does this chest X-ray show Edema?'
    >>> text_block(ScoreRequest(None, "Does this chest X-ray show Edema?", instruction="yes_no"))
    'Question: Does this chest X-ray show Edema? Answer with exactly Yes or No.'
    """
    question = f"Question: {request.question}"
    instruction = INSTRUCTIONS[request.instruction]
    if instruction:
        question = f"{question} {instruction}"
    if request.report is None:
        return question
    head = f"Report: {request.report}"
    if request.framing is not None:
        head = f"{FRAMINGS[request.framing]}\n{head}"
    return f"{head}\n\n{question}"


def score_layout(request: ScoreRequest) -> str:
    """Where a score request's image block goes: ``"none"`` (no image), ``"image_first"`` or ``"text_first"``."""
    return "none" if request.image is None else request.order


def chat_messages(layout: str, text: str) -> list[dict]:
    """Chat messages (one user turn) of a text block and an image block placed by ``layout``
    (:func:`score_layout`), in the transformers content-block format."""
    block = {"type": "text", "text": text}
    if layout == "none":
        content = [block]
    elif layout == "image_first":
        content = [{"type": "image"}, block]
    else:
        content = [block, {"type": "image"}]
    return [{"role": "user", "content": content}]


def score_messages(request: ScoreRequest) -> list[dict]:
    """Chat messages (one user turn) for a score request, in the transformers content-block format: all that
    a prompt holds is :func:`score_layout` and :func:`text_block`."""
    return chat_messages(score_layout(request), text_block(request))


def report_messages(*, user_text: str, system_text: str | None = None,
                    order: str = "image_first") -> list[dict]:
    """Chat messages for report generation: an optional system turn and a user turn with one image.

    The ShoViR reference code (arco-group/ShoViR-Bench ``build_chat_messages`` in
    ``src/benchmark/models/chat_template.py``@4023775, called from ``src/benchmark/models/base.py``@f68059b)
    uses system = the model prompt and user = ["Analyze this image.", image] (text first); NV-Reason-CXR
    uses one user turn [image, text].
    """
    if order not in ("image_first", "text_first"):
        raise ValueError(f"report prompt order {order!r} must be 'image_first' or 'text_first'")
    text = {"type": "text", "text": user_text}
    content = [{"type": "image"}, text] if order == "image_first" else [text, {"type": "image"}]
    messages = []
    if system_text:
        messages.append({"role": "system", "content": [{"type": "text", "text": system_text}]})
    messages.append({"role": "user", "content": content})
    return messages

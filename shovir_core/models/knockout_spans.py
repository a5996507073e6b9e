"""The spans and query scopes an attention knockout names (ModaLens App. N.2), without torch.

Protocol specs validate their ``knockout_span``/``knockout_scope`` against these; the knockout itself
is :mod:`shovir_core.models.lens` (which needs torch), so a chapter that only reads knockout records
imports no torch.
"""
from __future__ import annotations

__all__ = ["SPANS", "SCOPES"]

SPANS = ("report", "question", "image", "image_matched", "report_matched", "random_matched", "none")
"""Key spans a knockout can block: the ``Report: ...`` line, the ``Question: ...`` line (with the
instruction), all image tokens, image tokens matched in number to the report span (evenly spaced),
the first report tokens matched in number to the question span (the shorter non-report text), as
many positions as the image span drawn at random from every position but the answer (ModaLens
App. N.4's random-token control of the image knockout; seeded by the prompt's token ids, so both
images of a pair lose the same positions), nothing."""

SCOPES = ("answer", "non_image")
"""Query positions whose attention to the span is blocked."""

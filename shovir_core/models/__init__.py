"""Models behind one protocol: report generation and yes/no scoring.

This is the only subpackage that imports torch and transformers, and it does so lazily: importing
``shovir_core.models`` loads neither; building a transformer or the CNN reference model does.

>>> from shovir_core.models import get_model, ScoreRequest
>>> model = get_model("ref-report-reader")
>>> out = model.score_yes_no([ScoreRequest(None, "Does this chest X-ray show Edema?", report="Mild edema.")])
>>> out[0]["readout"]
'yes'

Public API
----------
``get_model(name, *, local_path=None, device=None, dtype=None)``  an adapter from :data:`REGISTRY`
``VLM``             the protocol (``generate_reports``, ``score_yes_no``, ``identity``, ``provenance``)
``ScoreRequest``    one yes/no question (image or None, question, report or None, order, instruction,
                    framing, finding, boxes)
``cached(model, *, directory=None)``  the same model behind the on-disk inference cache
``register_remote_adapter(name, cls)``  plug in an adapter for a GitHub-code model (LLaVA-Rad, Libra, RaDialog)
"""
from __future__ import annotations

from .cache import CachedVLM, InferenceCache, cached
from .prompts import ANSWER_OPTIONS, FRAMINGS, INSTRUCTIONS, report_messages, score_messages, text_block
from .protocol import ORDERS, SCORE_KEYS, VLM, Box, ScoreRequest, image_fingerprint
from .readouts import TokenFamilies, logsumexp, parse_answer, yes_no_readout
from .registry import (ALIASES, MODEL_DIR_ENV, REGISTRY, ModelNotAvailableError, ModelSpec, get_model, list_models,
                       model_fingerprint)
from .remote import register_remote_adapter
from .report_text import COMPOSITE, finding_of_question, read_report, template_report

__all__ = [
    "get_model", "list_models", "model_fingerprint", "REGISTRY", "ALIASES", "ModelSpec", "ModelNotAvailableError", "MODEL_DIR_ENV",
    "VLM", "ScoreRequest", "Box", "ORDERS", "SCORE_KEYS", "image_fingerprint",
    "INSTRUCTIONS", "FRAMINGS", "ANSWER_OPTIONS", "text_block", "score_messages", "report_messages",
    "TokenFamilies", "logsumexp", "yes_no_readout", "parse_answer",
    "COMPOSITE", "template_report", "read_report", "finding_of_question",
    "InferenceCache", "CachedVLM", "cached", "register_remote_adapter",
]

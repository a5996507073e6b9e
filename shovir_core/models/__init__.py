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
``ModelSpec``, ``ModelNotAvailableError``, ``resolve_weights``  a registry entry, the missing-weights
                    error and the local checkpoint lookup (:mod:`~shovir_core.models.spec`)

Layering: :mod:`~shovir_core.models.spec` imports nothing else of the package; the adapters import
it, never the registry; :mod:`~shovir_core.models.registry` reaches each adapter by name
(``registry.ADAPTERS``) on first use.
"""
from __future__ import annotations

from .cache import CachedVLM, InferenceCache, cached
from .prompts import ANSWER_OPTIONS, FRAMINGS, INSTRUCTIONS, report_messages, score_messages, text_block
from .protocol import ORDERS, SCORE_KEYS, VLM, Box, ScoreRequest, image_fingerprint
from .readouts import TokenFamilies, logsumexp, parse_answer, yes_no_readout
from .registry import ALIASES, REGISTRY, get_model, list_models, model_fingerprint, register_remote_adapter
from .report_text import COMPOSITE, finding_of_question, read_report, template_report
from .spec import MODEL_DIR_ENV, ModelNotAvailableError, ModelSpec, resolve_weights

__all__ = [
    "get_model", "list_models", "model_fingerprint", "REGISTRY", "ALIASES", "ModelSpec", "ModelNotAvailableError", "MODEL_DIR_ENV",
    "resolve_weights",
    "VLM", "ScoreRequest", "Box", "ORDERS", "SCORE_KEYS", "image_fingerprint",
    "INSTRUCTIONS", "FRAMINGS", "ANSWER_OPTIONS", "text_block", "score_messages", "report_messages",
    "TokenFamilies", "logsumexp", "yes_no_readout", "parse_answer",
    "COMPOSITE", "template_report", "read_report", "finding_of_question",
    "InferenceCache", "CachedVLM", "cached", "register_remote_adapter",
]

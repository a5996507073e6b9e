"""``imported``: a model whose answers were made elsewhere and read back by ``shovir import``.

The answers live in a folder written by :func:`shovir_core.audit.imports.import_answers`:
``reports.jsonl`` (one generated report per distinct input image) and ``yes_no.jsonl`` (one readout per
distinct score request), each line keyed by the exact model input (:func:`report_key`,
:func:`request_key`). The protocols call this adapter like any other model; an input that has no
answer is an error naming it, so a record can only be made from answers to its own inputs.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Sequence

from ..errors import ShovirError
from .protocol import SCORE_KEYS, VLM, ScoreRequest, image_fingerprint

__all__ = ["ImportedVLM", "ImportedAnswersError", "build_imported", "report_key", "request_key", "answers_sha256", "ANSWER_FILES",
           "readout_from_answer"]

ANSWER_FILES = {"report": "reports.jsonl", "yes_no": "yes_no.jsonl"}
"""Answer kind -> file name in an imported model's folder."""


class ImportedAnswersError(ShovirError, LookupError):
    """An imported model has no answer for an input a protocol asks it about."""


def report_key(image) -> str:
    """The key of a report input: the pixels' fingerprint (:func:`image_fingerprint`)."""
    return image_fingerprint(image)


def request_key(request: ScoreRequest) -> str:
    """The key of a score request: SHA-256 of the pixels' fingerprint and every text field a model reads
    (question, report, order, instruction, framing); the finding and boxes are never shown to a model."""
    payload = {"image": image_fingerprint(request.image), "question": request.question, "report": request.report,
               "order": request.order, "instruction": request.instruction, "framing": request.framing}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def answers_sha256(folder: str | Path | None) -> dict[str, str]:
    """SHA-256 of each answer file of an imported model's folder (kind -> hash)."""
    out = {}
    for kind, name in ANSWER_FILES.items():
        f = Path(folder or "") / name
        if folder and f.is_file():
            out[kind] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def _nan(value) -> float:
    return float("nan") if value is None else float(value)


def readout_from_answer(stored: dict, *, options: tuple[str, ...] = ("Yes", "No"), answer_tokens: int = 0) -> dict:
    """A :data:`~shovir_core.models.protocol.SCORE_KEYS` dict from an imported yes/no answer.

    ``stored``: ``readout`` (``yes``/``no``), optional ``logit_yes``/``logit_no`` (their margin is
    kept), optional ``family_logit_yes``/``family_logit_no`` and ``generated`` (a free-text answer,
    parsed as the protocol parses one). What the answer does not carry is NaN or ``None``.

    >>> r = readout_from_answer({"readout": "yes", "logit_yes": 1.5, "logit_no": 0.5})
    >>> r["readout"], r["margin"], r["family_readout"]
    ('yes', 1.0, 'yes')
    """
    from .readouts import parse_answer

    ly, ln = _nan(stored.get("logit_yes")), _nan(stored.get("logit_no"))
    fy, fn = stored.get("family_logit_yes"), stored.get("family_logit_no")
    fy, fn = (ly, ln) if fy is None and fn is None else (_nan(fy), _nan(fn))
    res = {k: None for k in SCORE_KEYS}
    res.update(logit_yes=ly, logit_no=ln, margin=ly - ln, readout=stored["readout"],
               family_logit_yes=fy, family_logit_no=fn, family_margin=fy - fn,
               family_readout=stored.get("family_readout", stored["readout"]),
               logp_yes=math.nan, logp_no=math.nan, family_logp_yes=math.nan, family_logp_no=math.nan,
               top1_prob=math.nan, token_logits={})
    generated = stored.get("generated")
    if answer_tokens > 0 and generated is not None:
        res["generated"] = generated
        res["answer"], res["compliant"] = parse_answer(generated, options=options)
    return res


class ImportedVLM(VLM):
    """Answers read from an imported model's folder, served through the model protocol."""

    def __init__(self, spec) -> None:
        self.spec, self.name = spec, spec.name
        self.folder = Path(spec.answers).expanduser()
        self.answers: dict[str, dict[str, dict]] = {}
        for kind, file in ANSWER_FILES.items():
            path = self.folder / file
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
            self.answers[kind] = {r["input"]: r for r in rows}
        if not any(self.answers.values()):
            raise ImportedAnswersError(f"imported model {self.name!r}: no answers in {self.folder} "
                             f"(expected {' or '.join(ANSWER_FILES.values())}, written by shovir import)")

    def _get(self, kind: str, key: str, what: str) -> dict:
        try:
            return self.answers[kind][key]
        except KeyError:
            have = "none" if not self.answers[kind] else f"{len(self.answers[kind])} other inputs"
            raise ImportedAnswersError(f"imported model {self.name!r}: no {kind} answer for {what} (input {key[:12]}; the "
                           f"import has {have}); export the inputs of this profile and import their answers") from None

    def generate_reports(self, images: Sequence, *, prompt=None, max_new_tokens=None, boxes=None) -> list[str]:
        return [self._get("report", report_key(im), f"image {i}")["generated"] for i, im in enumerate(images)]

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        from .prompts import ANSWER_OPTIONS

        out = []
        for r in requests:
            stored = self._get("yes_no", request_key(r), f"question {r.question!r}")
            out.append(readout_from_answer(stored, options=ANSWER_OPTIONS[r.instruction], answer_tokens=answer_tokens))
        return out

    def identity(self) -> dict:
        return {"name": self.name, "kind": "imported", "answers_sha256": answers_sha256(self.folder)}

    def provenance(self) -> dict:
        meta = self.folder / "import.json"
        info = json.loads(meta.read_text()) if meta.is_file() else {}
        return {**self.identity(), "adapter": "imported", "import": info, "declared": dict(self.spec.declared),
                "declared_sha256": self.spec.declared_sha256}


def build_imported(spec, *, local_path=None, device=None, dtype=None) -> ImportedVLM:
    """The adapter of a declared ``imported`` entry (``answers``: the folder ``shovir import`` wrote)."""
    return ImportedVLM(spec)

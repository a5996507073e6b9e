"""Visual-question-answering datasets without a report (ModaLens Table 6): one question table per dataset.

ModaLens runs the image swap on four public VQA datasets besides the chest X-ray cohorts (Table 6:
VQA-RAD, SLAKE, OmniMedVQA, ProbMed). Their adapters (:mod:`.vqa_rad`, :mod:`.slake`,
:mod:`.omnimedvqa`, :mod:`.probmed`) read each release's own layout and field names and return a
:class:`VQADataset`: the common :class:`~shovir_core.data.schema.Dataset` (one row per image; no
boxes, no CheXpert labels, no reports) plus a ``questions`` table with the columns
:data:`QUESTION_COLUMNS`:

``question_id``  the release's own id (as a string)       ``image_id``     the image it asks about
``question``     the text as released                      ``question_norm`` lower case, one space, no final ``?``
``answer``       the answer as released                    ``answer_norm``  lower case, one space, stripped
``answer_type``  ``closed`` / ``open``                     ``question_type`` the release's question type
``category``     the release's category (SLAKE ``content_type``, ProbMed ``qa_type``, OmniMedVQA ``question_type``)
``organ``        the organ / body region                   ``source``       the sub-dataset (OmniMedVQA) or the organ
``phrase_type``  VQA-RAD ``freeform`` / ``para`` / ``frame`` (``""`` elsewhere)
``split``        the release's split (``train`` / ``validate`` / ``test``; ``all`` when it has none)
``options``      JSON list of option texts (OmniMedVQA; ``"[]"`` elsewhere)
``key``          the correct option letter (OmniMedVQA) or ``yes`` / ``no`` (closed yes/no questions), else ``""``
``yes_no``       a closed question answered ``yes`` or ``no``
``official``     part of the release's official question set (VQA-RAD: not a templated ``frame`` question)
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES
from .checks import read_json
from .schema import BOX_COLUMNS, Dataset, DatasetError

__all__ = ["VQADataset", "QUESTION_COLUMNS", "normalise_answer", "normalise_question", "vqa_dataset",
           "verify_sha256sums", "LETTERS", "options_json", "resolve_root", "question_rows", "check_question"]

QUESTION_COLUMNS = ("question_id", "image_id", "question", "question_norm", "answer", "answer_norm", "answer_type",
                    "question_type", "category", "organ", "source", "phrase_type", "split", "options", "key",
                    "yes_no", "official")

LETTERS = ("A", "B", "C", "D")
"""Option letters of the four-option readout (OmniMedVQA)."""

_SPACE = re.compile(r"\s+")


def normalise_answer(text) -> str:
    """Case and whitespace normalised answer: ``" Yes "`` -> ``"yes"``; numbers as their text.

    >>> normalise_answer("  Yes "), normalise_answer("Right  Lung"), normalise_answer(3)
    ('yes', 'right lung', '3')
    """
    return _SPACE.sub(" ", str(text)).strip().lower()


def normalise_question(text: str) -> str:
    """The question as a pool key: lower case, single spaces, no trailing ``?`` or ``.``.

    >>> normalise_question("Is there  a pneumothorax? ")
    'is there a pneumothorax'
    """
    return _SPACE.sub(" ", str(text)).strip().lower().rstrip("?. ").strip()


def question_rows(path: Path, *, name: str, allowed: Sequence[str], need: Sequence[str],
                  id_field: str = "qid") -> Iterator[tuple[int, str, dict]]:
    """The rows of a release's JSON list of questions, each an object with every field of ``need`` and
    none outside ``allowed``: ``(row number, where, row)``, ``where`` naming the dataset, the file, the
    row and its id (``"SLAKE: test.json, row 2 (qid 17)"``) for the adapter's own checks."""
    data = read_json(path, name=name, what="question file")
    if not isinstance(data, list):
        raise DatasetError(f"{name}: {path.name}: expected a JSON list of questions, got {type(data).__name__}")
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise DatasetError(f"{name}: {path.name}, row {i}: expected an object, got {type(row).__name__}")
        where = f"{name}: {path.name}, row {i} ({id_field} {row.get(id_field)!r})"
        unknown = sorted(set(row) - set(allowed))
        if unknown:
            raise DatasetError(f"{where}: unknown field(s) {unknown}; known: {list(allowed)}")
        missing = [f for f in need if f not in row]
        if missing:
            raise DatasetError(f"{where}: missing field(s) {missing}")
        yield i, where, row


def check_question(row: dict, *, where: str, strings: Sequence[str]) -> str:
    """Check one question row of SLAKE or VQA-RAD: the fields ``strings`` are non-empty strings, the
    ``answer`` is a non-empty scalar and the ``answer_type`` reads ``CLOSED`` or ``OPEN`` (case and
    spaces aside: VQA-RAD has ``"CLOSED "``); returns the answer type in upper case."""
    for f in strings:
        if not isinstance(row[f], str) or not row[f].strip():
            raise DatasetError(f"{where}, field {f!r}: expected a non-empty string, got {row[f]!r}")
    answer = row["answer"]
    if answer is None or isinstance(answer, (list, dict, bool)) or str(answer).strip() == "":
        raise DatasetError(f"{where}, field 'answer': expected a non-empty answer, got {answer!r}")
    atype = row["answer_type"].strip().upper()
    if atype not in ("CLOSED", "OPEN"):
        raise DatasetError(f"{where}, field 'answer_type': {row['answer_type']!r} is not CLOSED or OPEN")
    return atype


@dataclass
class VQADataset(Dataset):
    """A :class:`~shovir_core.data.schema.Dataset` with a ``questions`` table (:data:`QUESTION_COLUMNS`)."""

    questions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(QUESTION_COLUMNS)))

    def __post_init__(self) -> None:
        super().__post_init__()
        missing = [c for c in QUESTION_COLUMNS if c not in self.questions.columns]
        if missing:
            raise DatasetError(f"{self.name}: questions table lacks columns {missing}")
        unknown = sorted(set(self.questions["image_id"]) - set(self.images["image_id"]))
        if unknown:
            raise DatasetError(f"{self.name}: questions refer to images not in the images table, e.g. {unknown[0]!r}")

    def manifest(self) -> dict:
        """The dataset manifest, with the question counts."""
        q = self.questions
        return {**super().manifest(), "n_questions": int(len(q)), "n_official": int(q["official"].sum()),
                "n_yes_no": int(q["yes_no"].sum())}

    def closed_yes_no(self, *, official: bool = True) -> pd.DataFrame:
        """The closed yes/no questions (of the official set by default), with their image paths."""
        q = self.questions[self.questions["yes_no"] & (self.questions["official"] | (not official))]
        return q.merge(self.images[["image_id", "path"]], on="image_id", how="left")


def resolve_root(path) -> Path:
    """``path`` as given, or under the repository root when it is relative and not found (``data/...``)."""
    root = Path(path)
    if not root.is_absolute() and not root.exists():
        from .. import paths

        return paths.repo_root() / root
    return root


def verify_sha256sums(sums: Path, folder: Path, *, name: str) -> int:
    """Check every ``<sha256>  <file>`` line of ``sums`` against the files in ``folder``; the number checked.

    A missing file or a different hash is a :class:`DatasetError` naming the file and the line.
    """
    lines = [ln for ln in Path(sums).read_text(encoding="utf-8").splitlines() if ln.strip()]
    for i, line in enumerate(lines, start=1):
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            raise DatasetError(f"{name}: {Path(sums).name}, line {i}: not '<sha256>  <file>': {line!r}")
        digest, fname = parts[0], parts[1].lstrip("*").strip()
        path = Path(folder) / fname
        if not path.is_file():
            raise DatasetError(f"{name}: {Path(sums).name}, line {i}: image {fname} is missing from {folder}")
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if got != digest:
            raise DatasetError(f"{name}: {Path(sums).name}, line {i}: {fname} has SHA-256 {got[:12]}..., "
                               f"the release states {digest[:12]}... (altered copy?)")
    return len(lines)


def _image_table(paths: dict[str, Path], *, source: dict[str, str] | None = None) -> pd.DataFrame:
    from PIL import Image

    rows = []
    for image_id, path in sorted(paths.items()):
        with Image.open(path) as im:
            w, h = im.size
        src = (source or {}).get(image_id, "")
        # no patients in these releases: each image is its own cluster (bootstrap by source image)
        rows.append({"image_id": image_id, "study_id": image_id, "patient_id": image_id, "view": src,
                     "path": str(Path(path).resolve()), "width": int(w), "height": int(h)})
    return pd.DataFrame(rows, columns=["image_id", "study_id", "patient_id", "view", "path", "width", "height"])


def vqa_dataset(name: str, root: Path, *, image_paths: dict[str, Path], questions: pd.DataFrame,
                extra_files: tuple[Path, ...], citation: str, licence: str,
                image_source: dict[str, str] | None = None) -> VQADataset:
    """Assemble a :class:`VQADataset` (images table from the files, empty boxes and labels)."""
    images = _image_table(image_paths, source=image_source)
    q = questions.copy()
    for col in ("question_norm",):
        q[col] = q["question"].map(normalise_question)
    q["answer_norm"] = q["answer"].map(normalise_answer)
    q = q[list(QUESTION_COLUMNS)].reset_index(drop=True)
    q["yes_no"] = q["yes_no"].astype(bool)
    q["official"] = q["official"].astype(bool)
    labels = pd.DataFrame(np.nan, index=pd.Index(images["image_id"], name="image_id"), columns=list(CHEXPERT_CLASSES))
    return VQADataset(name=name, root=Path(root), images=images, boxes=pd.DataFrame(columns=list(BOX_COLUMNS)),
                      labels=labels, citation=citation, licence=licence, extra_files=tuple(extra_files), questions=q)


def options_json(options) -> str:
    """Option texts as the ``options`` column stores them."""
    return json.dumps([str(o) for o in options], ensure_ascii=False)

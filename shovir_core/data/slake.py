"""``slake:<folder>``: SLAKE (Liu et al., ISBI 2021), English questions only, as ModaLens uses it (§4.3, Table 9, App. N.4).

The release's layout (``Slake1.0/``): ``train.json``, ``validate.json``, ``test.json`` (one list of
questions each, fields :data:`FIELDS`: ``img_id, img_name, question, answer, q_lang, location,
modality, answer_type, base_type, content_type, triple, qid``) and the images under
``imgs/<img_name>`` (``img_name`` reads ``xmlab<N>/source.jpg``). ``<folder>`` may be
``Slake1.0/`` or the folder holding it. Only ``q_lang == "en"`` rows are kept (the paper asks the
English questions); the Chinese half is dropped before any check of its rows' content.

Table 9's categories come from ``content_type`` (``Organ``, ``Modality``, ``Abnormal``, ``KG``)
(:data:`TABLE9_CATEGORIES`).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .checks import read_json
from .schema import DatasetError
from .vqa import VQADataset, normalise_answer, vqa_dataset, resolve_root

__all__ = ["load_slake", "FIELDS", "SPLITS", "SLAKE_CITATION", "SLAKE_LICENCE", "TABLE9_CATEGORIES"]

FIELDS = ("img_id", "img_name", "question", "answer", "q_lang", "location", "modality", "answer_type", "base_type",
          "content_type", "triple", "qid")
SPLITS = {"train": "train.json", "validate": "validate.json", "test": "test.json"}
SLAKE_CITATION = ("Liu B, Zhan L-M, Xu L, Ma L, Yang Y, Wu X-M. SLAKE: A semantically-labeled knowledge-enhanced "
                  "dataset for medical visual question answering. ISBI 2021.")
SLAKE_LICENCE = "CC BY-SA 4.0 (the release's statement; not shipped here)"
TABLE9_CATEGORIES = {"Organ": "organ", "Modality": "modality", "Abnormal": "abnormality", "KG": "knowledge graph"}
"""SLAKE ``content_type`` -> the ModaLens Table 9 category."""
_NAME = "SLAKE"


def load_slake(path: Path) -> VQADataset:
    """Load the English questions of a SLAKE release folder (``Slake1.0/`` or its parent)."""
    root = resolve_root(path)
    if (root / "Slake1.0").is_dir():
        root = root / "Slake1.0"
    if not root.is_dir():
        raise DatasetError(f"{_NAME}: folder not found: {root}")
    present = {s: root / f for s, f in SPLITS.items() if (root / f).is_file()}
    if not present:
        raise DatasetError(f"{_NAME}: {root} has none of {list(SPLITS.values())}")
    rows, paths = [], {}
    for split, file in present.items():
        data = read_json(file, name=_NAME, what="question file")
        if not isinstance(data, list):
            raise DatasetError(f"{_NAME}: {file.name}: expected a JSON list of questions")
        for i, row in enumerate(data):
            where = f"{_NAME}: {file.name}, row {i}"
            if not isinstance(row, dict):
                raise DatasetError(f"{where}: expected an object, got {type(row).__name__}")
            unknown = sorted(set(row) - set(FIELDS))
            if unknown:
                raise DatasetError(f"{where} (qid {row.get('qid')!r}): unknown field(s) {unknown}; known: {list(FIELDS)}")
            missing = [f for f in FIELDS if f not in row]
            if missing:
                raise DatasetError(f"{where} (qid {row.get('qid')!r}): missing field(s) {missing}")
            if row["q_lang"] != "en":
                continue
            for f in ("img_name", "question", "answer_type", "content_type", "location", "modality"):
                if not isinstance(row[f], str) or not row[f].strip():
                    raise DatasetError(f"{where} (qid {row['qid']!r}), field {f!r}: expected a non-empty string, "
                                       f"got {row[f]!r}")
            if str(row["answer"]).strip() == "":
                raise DatasetError(f"{where} (qid {row['qid']!r}), field 'answer': empty")
            atype = row["answer_type"].strip().upper()
            if atype not in ("CLOSED", "OPEN"):
                raise DatasetError(f"{where} (qid {row['qid']!r}), field 'answer_type': {row['answer_type']!r}")
            image = root / "imgs" / row["img_name"]
            if not image.is_file():
                raise DatasetError(f"{where} (qid {row['qid']!r}): image {row['img_name']} is not in {root / 'imgs'}")
            image_id = Path(row["img_name"]).parent.name or Path(row["img_name"]).stem
            paths[image_id] = image
            norm = normalise_answer(row["answer"])
            yn = atype == "CLOSED" and norm in ("yes", "no")
            rows.append({"question_id": f"{split}:{row['qid']}", "image_id": image_id, "question": row["question"],
                         "answer": str(row["answer"]), "answer_type": atype.lower(),
                         "question_type": row["content_type"], "category": row["content_type"],
                         "organ": row["location"], "source": row["modality"], "phrase_type": "", "split": split,
                         "options": "[]", "key": norm if yn else "", "yes_no": yn, "official": True})
    q = pd.DataFrame(rows)
    if q.empty:
        raise DatasetError(f"{_NAME}: {root}: no English questions (q_lang 'en')")
    return vqa_dataset(_NAME, root, image_paths=paths, questions=q, extra_files=tuple(present.values()),
                       citation=SLAKE_CITATION, licence=SLAKE_LICENCE,
                       image_source=q.groupby("image_id")["organ"].first().to_dict())

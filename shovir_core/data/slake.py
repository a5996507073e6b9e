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

from .schema import DatasetError
from .vqa import VQADataset, check_question, normalise_answer, question_rows, resolve_root, vqa_dataset

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
        for _, where, row in question_rows(file, name=_NAME, allowed=FIELDS, need=FIELDS):
            if row["q_lang"] != "en":
                continue
            atype = check_question(row, where=where, strings=("img_name", "question", "answer_type", "content_type",
                                                              "location", "modality"))
            image = root / "imgs" / row["img_name"]
            if not image.is_file():
                raise DatasetError(f"{where}: image {row['img_name']} is not in {root / 'imgs'}")
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

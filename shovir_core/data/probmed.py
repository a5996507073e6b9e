"""``probmed:<folder>``: ProbMed (Yan et al., 2024), yes/no probing questions (ModaLens Table 6).

The release (Hugging Face ``rippleripple/ProbMed``; evaluation code eric-ai-lab/ProbMed
``eval/calculate_score.py``@cb06421): one question file ``probmed.json`` (or ``test.json``), a
list of questions with the fields ``id`` (the image's id), ``image`` (path under the image folder),
``image_type`` (modality and organ, e.g. ``ct_abdomen``), ``qa_type`` (``modality``, ``body_part``,
``abnormality``, ``entity_*``, ``grounding_*``, each ``_gt`` or ``_hallu``), ``question`` and
``answer`` (``yes`` / ``no``; the evaluation files call it ``gt_ans``, also read). Images are read
from ``<folder>/<image>``, else ``<folder>/images/<image>``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .schema import DatasetError
from .vqa import VQADataset, normalise_answer, question_rows, resolve_root, vqa_dataset

__all__ = ["load_probmed", "REQUIRED", "PROBMED_CITATION", "PROBMED_LICENCE", "QUESTION_FILES"]

REQUIRED = ("id", "image", "image_type", "qa_type", "question")
QUESTION_FILES = ("probmed.json", "test.json")
PROBMED_CITATION = ("Yan Q, He X, Yue X, Wang XE. Worse than random? An embarrassingly simple probing evaluation of "
                    "large multimodal models in medical VQA. arXiv:2405.20421 (2024).")
PROBMED_LICENCE = "per source (MedICaT, ChestX-ray14); not shipped here"
_NAME = "ProbMed"


def load_probmed(path: Path) -> VQADataset:
    """Load a ProbMed question file and its images."""
    root = resolve_root(path)
    file = next((root / f for f in QUESTION_FILES if (root / f).is_file()), None)
    if file is None:
        raise DatasetError(f"{_NAME}: {root} has none of {list(QUESTION_FILES)}")
    rows, paths = [], {}
    for i, where, row in question_rows(file, name=_NAME, allowed=(*REQUIRED, "answer", "gt_ans"), need=REQUIRED,
                                       id_field="id"):
        if not {"answer", "gt_ans"} & set(row):
            raise DatasetError(f"{where}: missing field(s) ['answer']")
        answer = normalise_answer(row.get("answer", row.get("gt_ans")))
        if answer not in ("yes", "no"):
            raise DatasetError(f"{where}, field 'answer': {answer!r} is not yes or no")
        image = next((p for p in (root / row["image"], root / "images" / row["image"]) if p.is_file()), None)
        if image is None:
            raise DatasetError(f"{where}: image {row['image']} not found under {root}")
        image_id = str(Path(row["image"]).with_suffix("")).replace("/", "__")
        paths[image_id] = image
        kind = str(row["image_type"])
        modality, _, organ = kind.partition("_")
        qa_type = str(row["qa_type"])
        rows.append({"question_id": f"{row['id']}:{i}", "image_id": image_id, "question": row["question"],
                     "answer": answer, "answer_type": "closed", "question_type": qa_type,
                     "category": qa_type.split("_")[0] if not qa_type.startswith("body_part") else "body_part",
                     "organ": organ or kind, "source": kind, "phrase_type": "", "split": "all", "options": "[]",
                     "key": answer, "yes_no": True, "official": True})
    q = pd.DataFrame(rows)
    return vqa_dataset(_NAME, root, image_paths=paths, questions=q, extra_files=(file,), citation=PROBMED_CITATION,
                       licence=PROBMED_LICENCE, image_source=q.groupby("image_id")["source"].first().to_dict())

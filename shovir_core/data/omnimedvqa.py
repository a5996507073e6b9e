"""``omnimedvqa:<folder>``: OmniMedVQA (Hu et al., CVPR 2024), four-option questions (ModaLens Table 6, App. N.4).

The release's layout: ``QA_information/Open-access/<source dataset>.json`` (and, where a user has
them, ``QA_information/Restricted-access/``), each a list of questions with the fields
``dataset, question_id, question_type, question, gt_answer, image_path, option_A, option_B``
(``option_C`` / ``option_D`` when the question has them) and ``modality_type`` (one file of the
release spells it ``modality``; both are read), and the images at ``<folder>/<image_path>``
(``Images/<source>/...``). The key is the letter whose option text equals ``gt_answer``
(after case and whitespace normalisation); a row whose answer is none of its options is refused.
The swap tiers use the ``dataset`` field: same source = hard, another source = easy.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .schema import DatasetError
from .vqa import LETTERS, VQADataset, normalise_answer, options_json, question_rows, resolve_root, vqa_dataset

__all__ = ["load_omnimedvqa", "REQUIRED", "OPTIONAL", "OMNIMEDVQA_CITATION", "OMNIMEDVQA_LICENCE"]

REQUIRED = ("dataset", "question_id", "question_type", "question", "gt_answer", "image_path", "option_A", "option_B")
OPTIONAL = ("option_C", "option_D", "modality_type", "modality")
OMNIMEDVQA_CITATION = ("Hu Y, Li T, Lu Q, Shao W, He J, Qiao Y, Luo P. OmniMedVQA: A new large-scale comprehensive "
                       "evaluation benchmark for medical LVLM. CVPR 2024.")
OMNIMEDVQA_LICENCE = "per source dataset (the release's Open-access part; not shipped here)"
_NAME = "OmniMedVQA"


def load_omnimedvqa(path: Path) -> VQADataset:
    """Load every question file under ``<path>/QA_information/*/`` of an OmniMedVQA release."""
    root = resolve_root(path)
    if (root / "OmniMedVQA" / "QA_information").is_dir():
        root = root / "OmniMedVQA"
    qa = root / "QA_information"
    files = sorted(qa.glob("*/*.json")) if qa.is_dir() else []
    if not files:
        raise DatasetError(f"{_NAME}: no question files under {qa} (expected QA_information/Open-access/*.json)")
    rows, paths = [], {}
    for file in files:
        for _, where, row in question_rows(file, name=_NAME, allowed=(*REQUIRED, *OPTIONAL), need=REQUIRED,
                                           id_field="question_id"):
            options = [row[f"option_{x}"] for x in LETTERS if row.get(f"option_{x}") not in (None, "")]
            if len(options) < 2 or any(not isinstance(o, (str, int, float)) for o in options):
                raise DatasetError(f"{where}: options {options!r} malformed")
            norm = [normalise_answer(o) for o in options]
            gt = normalise_answer(row["gt_answer"])
            if gt not in norm:
                raise DatasetError(f"{where}, field 'gt_answer': {row['gt_answer']!r} is none of the options {options!r}")
            image = root / row["image_path"]
            if not image.is_file():
                raise DatasetError(f"{where}: image {row['image_path']} not found under {root}")
            image_id = str(Path(row["image_path"]).with_suffix("")).replace("/", "__")
            paths[image_id] = image
            rows.append({"question_id": str(row["question_id"]), "image_id": image_id, "question": row["question"],
                         "answer": str(row["gt_answer"]), "answer_type": "closed",
                         "question_type": row["question_type"], "category": row["question_type"],
                         "organ": str(row.get("modality_type", row.get("modality", ""))), "source": row["dataset"],
                         "phrase_type": "", "split": "all", "options": options_json(options),
                         "key": LETTERS[norm.index(gt)], "yes_no": False, "official": True})
    q = pd.DataFrame(rows)
    dup = q[q["question_id"].duplicated()]
    if not dup.empty:
        raise DatasetError(f"{_NAME}: question_id {dup.iloc[0]['question_id']!r} appears twice")
    return vqa_dataset(_NAME, root, image_paths=paths, questions=q, extra_files=tuple(files),
                       citation=OMNIMEDVQA_CITATION, licence=OMNIMEDVQA_LICENCE,
                       image_source=q.groupby("image_id")["source"].first().to_dict())

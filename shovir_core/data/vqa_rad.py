"""``vqa-rad:<folder>``: VQA-RAD (Lau et al., Scientific Data 2018), as ModaLens uses it (Table 6, §4.1, App. N.4).

Two layouts are read:

* the project's copy (``data/vqa-rad/``; the MICCAI-2019 MedVQA preprocessing of the release):
  ``trainset.json`` and ``testset.json`` (fields ``qid, image_name, image_organ, answer,
  answer_type, question_type, question, phrase_type``), the images in ``images/``, and
  ``SHA256SUMS`` (every image's SHA-256, checked on load);
* the official OSF release: ``VQA_RAD Dataset Public.json`` (the same fields without
  ``phrase_type``, plus the release's bookkeeping fields :data:`OFFICIAL_EXTRA`) with the images in
  ``VQA_RAD Image Folder/`` (or ``images/``); every row is an official question, split ``all``.

Answers are normalised (case, whitespace: ``"Yes"`` and ``"yes"`` are one answer); the answer type
is stripped (two rows read ``"CLOSED "``). Official questions are ``freeform`` + ``para`` (2,248 in
the release); the 1,267 ``frame`` rows are templated rephrasings and are kept with ``official=False``.
A missing image, an unknown field, a missing field or a malformed value is refused naming the file
and the row.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .schema import DatasetError
from .vqa import VQADataset, check_question, question_rows, resolve_root, verify_sha256sums, vqa_dataset

__all__ = ["load_vqa_rad", "VQA_RAD_CITATION", "VQA_RAD_LICENCE", "FIELDS", "OFFICIAL_FILE", "OFFICIAL_EXTRA",
           "ORGANS", "PHRASE_TYPES"]

VQA_RAD_CITATION = ("Lau JJ, Gayen S, Ben Abacha A, Demner-Fushman D. A dataset of clinically generated visual "
                    "questions and answers about radiology images. Scientific Data 5, 180251 (2018). "
                    "doi:10.1038/sdata.2018.251")
VQA_RAD_LICENCE = "CC0 1.0 (public-domain dedication; released on OSF, osf.io/89kps)"

FIELDS = ("qid", "image_name", "image_organ", "answer", "answer_type", "question_type", "question", "phrase_type")
"""Fields of every row of ``trainset.json`` / ``testset.json``."""
OFFICIAL_FILE = "VQA_RAD Dataset Public.json"
OFFICIAL_EXTRA = ("qid_linked_id", "image_case_url", "evaluation", "question_rephrase", "question_relation",
                  "question_frame")
"""Bookkeeping fields the official release file may carry besides :data:`FIELDS` (kept out of the table)."""
ORGANS = ("CHEST", "HEAD", "ABD")
PHRASE_TYPES = ("freeform", "para", "frame", "test_freeform", "test_para")
_NAME = "VQA-RAD"


def _rows(path: Path, *, split: str, need: tuple[str, ...], allowed: tuple[str, ...]) -> list[dict]:
    out = []
    for i, where, row in question_rows(path, name=_NAME, allowed=allowed, need=need):
        if isinstance(row["qid"], bool) or not isinstance(row["qid"], (int, str)) or str(row["qid"]).strip() == "":
            raise DatasetError(f"{where}, field 'qid': expected an integer or string id, got {row['qid']!r}")
        atype = check_question(row, where=where, strings=("image_name", "question", "answer_type", "image_organ",
                                                          "question_type"))
        organ = row["image_organ"].strip().upper()
        if organ not in ORGANS:
            raise DatasetError(f"{where}, field 'image_organ': {row['image_organ']!r} not in {list(ORGANS)}")
        phrase = str(row.get("phrase_type", "")).strip()
        if "phrase_type" in row and phrase not in PHRASE_TYPES:
            raise DatasetError(f"{where}, field 'phrase_type': {phrase!r} not in {list(PHRASE_TYPES)}")
        out.append({"file": path.name, "row": i, "qid": str(row["qid"]), "image_name": row["image_name"].strip(),
                    "organ": organ, "answer": row["answer"], "answer_type": atype.lower(),
                    "question_type": row["question_type"].strip().upper(), "question": row["question"],
                    "phrase_type": phrase.replace("test_", ""), "split": split})
    return out


def load_vqa_rad(path: Path) -> VQADataset:
    """Load VQA-RAD from ``path`` (either layout of the module docstring), image hashes verified."""
    root = resolve_root(path)  # "data/vqa-rad" from any working directory
    if not root.is_dir():
        raise DatasetError(f"{_NAME}: folder not found: {root}")
    official = root / OFFICIAL_FILE
    if (root / "trainset.json").is_file() or (root / "testset.json").is_file():
        files = [root / "trainset.json", root / "testset.json"]
        rows = [*_rows(files[0], split="train", need=FIELDS, allowed=FIELDS),
                *_rows(files[1], split="test", need=FIELDS, allowed=FIELDS)]
    elif official.is_file():
        files = [official]
        need = tuple(f for f in FIELDS if f != "phrase_type")
        rows = _rows(official, split="all", need=need, allowed=(*FIELDS, *OFFICIAL_EXTRA))
    else:
        raise DatasetError(f"{_NAME}: {root} has neither trainset.json/testset.json nor {OFFICIAL_FILE!r}")
    image_dir = next((d for d in (root / "images", root / "VQA_RAD Image Folder") if d.is_dir()), None)
    if image_dir is None:
        raise DatasetError(f"{_NAME}: no image folder in {root} (expected 'images/' or 'VQA_RAD Image Folder/')")
    sums = root / "SHA256SUMS"
    if sums.is_file():
        verify_sha256sums(sums, image_dir, name=_NAME)
    paths = {p.stem: p for p in sorted(image_dir.iterdir()) if p.suffix.lower() in (".jpg", ".jpeg", ".png")}
    frame = pd.DataFrame(rows)
    for r in frame.itertuples():
        if Path(r.image_name).stem not in paths:
            raise DatasetError(f"{_NAME}: {r.file}, row {r.row} (qid {r.qid}): image {r.image_name} is not in {image_dir}")
    dup = frame[frame.duplicated(["split", "qid"], keep=False)]
    if not dup.empty:
        d = dup.iloc[0]
        raise DatasetError(f"{_NAME}: {d.file}, row {d.row}: qid {d.qid} appears twice in the {d.split} split")
    from .vqa import normalise_answer

    norm = frame["answer"].map(normalise_answer)
    yes_no = (frame["answer_type"] == "closed") & norm.isin(["yes", "no"])
    q = pd.DataFrame({
        "question_id": frame["split"] + ":" + frame["qid"], "image_id": frame["image_name"].map(lambda s: Path(s).stem),
        "question": frame["question"], "answer": frame["answer"].map(str), "answer_type": frame["answer_type"],
        "question_type": frame["question_type"], "category": frame["question_type"], "organ": frame["organ"],
        "source": frame["organ"], "phrase_type": frame["phrase_type"], "split": frame["split"], "options": "[]",
        "key": norm.where(yes_no, ""), "yes_no": yes_no, "official": frame["phrase_type"] != "frame",
    })
    organ_of = frame.assign(image_id=q["image_id"]).groupby("image_id")["organ"].first().to_dict()
    extra = tuple(p for p in (*files, sums) if p.is_file())
    return vqa_dataset(_NAME, root, image_paths=paths, questions=q, extra_files=extra, citation=VQA_RAD_CITATION,
                       licence=VQA_RAD_LICENCE, image_source=organ_of)

"""Small fixtures in the exact layouts of SLAKE, OmniMedVQA and ProbMed, with invented images.

The three releases are not shipped (their licences and sizes do not allow it); their adapters
(:mod:`.slake`, :mod:`.omnimedvqa`, :mod:`.probmed`) are tested, and the chapter "Datasets without a
report" is run in the demo profile, on these fixtures: the releases' real file names and field
names, invented questions about invented images (seeded noise, 32 x 32 px). ``data/fixtures/``
holds the written copies (:func:`write_all`; ``tests/test_vqa_adapters.py`` checks they match).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["write_slake", "write_omnimedvqa", "write_probmed", "write_all", "FIXTURE_KINDS"]

FIXTURE_KINDS = ("slake", "omnimedvqa", "probmed")


def _image(path: Path, rng: np.random.Generator, *, fmt: str) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = rng.integers(0, 256, size=(32, 32), dtype=np.uint8)
    Image.fromarray(pixels, mode="L").save(path, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))


def _dump(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


_SLAKE_Q = (("Organ", "Does the picture contain the liver?", "Abdomen", "vqa"),
            ("Organ", "Does the picture contain the heart?", "Chest", "vqa"),
            ("Modality", "Is this an MRI image?", "Brain", "vqa"),
            ("Modality", "Is this a CT image?", "Abdomen", "vqa"),
            ("Abnormal", "Is the lung healthy?", "Chest", "vqa"),
            ("Abnormal", "Does this image look abnormal?", "Brain", "vqa"),
            ("KG", "Can the organ in this image be used for breathing?", "Chest", "kg"),
            ("KG", "Does the organ in the image help digest food?", "Abdomen", "kg"))


def write_slake(root: Path, *, seed: int = 0, n_images: int = 12) -> Path:
    """``<root>/Slake1.0/{train,validate,test}.json`` and ``imgs/xmlab<N>/source.jpg``."""
    rng = np.random.default_rng(seed)
    base = Path(root) / "Slake1.0"
    splits = {"train": [], "validate": [], "test": []}
    qid = 0
    for n in range(n_images):
        _image(base / "imgs" / f"xmlab{n}" / "source.jpg", rng, fmt="JPEG")
        split = "test" if n % 2 == 0 else ("train" if n % 4 == 1 else "validate")
        for cat, question, loc, base_type in _SLAKE_Q:
            answer = "Yes" if rng.random() < 0.5 else "No"
            common = {"img_id": n, "img_name": f"xmlab{n}/source.jpg", "location": loc, "modality": "CT",
                      "answer_type": "CLOSED", "base_type": base_type, "content_type": cat,
                      "triple": ["vhead", "_", "_"]}
            splits[split].append({**common, "question": question, "answer": answer, "q_lang": "en", "qid": qid})
            splits[split].append({**common, "question": "这张图片里有肝脏吗？", "answer": "是" if answer == "Yes" else "否",
                                  "q_lang": "zh", "qid": qid + 1})
            qid += 2
        splits[split].append({"img_id": n, "img_name": f"xmlab{n}/source.jpg", "question": "Where is the liver?",
                              "answer": "Left", "q_lang": "en", "location": "Abdomen", "modality": "CT",
                              "answer_type": "OPEN", "base_type": "vqa", "content_type": "Position",
                              "triple": ["vhead", "_", "_"], "qid": qid})
        qid += 1
    for split, rows in splits.items():
        _dump(base / f"{split}.json", rows)
    return base


_OMNI_Q = {
    "Fixture Chest CT": ("CT(Computed Tomography)", [
        ("Anatomy Identification", "Which organ is shown in this chest CT image?", ["Lung", "Liver", "Kidney", "Brain"]),
        ("Disease Diagnosis", "What abnormality does this image show?", ["Nodule", "Normal", "Effusion", "Fracture"]),
        ("Disease Diagnosis", "Does this lung CT show a lung nodule or is it normal?", ["lung nodule", "normal", "edema", "mass"]),
    ]),
    "Fixture Fundus": ("Fundus Photography", [
        ("Disease Diagnosis", "What diagnosis fits this fundus photograph?", ["Glaucoma", "Normal", "Cataract", "Myopia"]),
        ("Modality Recognition", "Which imaging modality is this?", ["Fundus photography", "CT", "MRI", "X-ray"]),
    ]),
}


def write_omnimedvqa(root: Path, *, seed: int = 0, per_source: int = 8) -> Path:
    """``<root>/QA_information/Open-access/<source>.json`` and ``Images/<source>/<n>.png``."""
    rng = np.random.default_rng(seed)
    base = Path(root)
    qid = 0
    for source, (modality, questions) in _OMNI_Q.items():
        rows = []
        for n in range(per_source):
            rel = f"Images/{source}/{n:03d}.png"
            _image(base / rel, rng, fmt="PNG")
            for qtype, question, options in questions:
                opts = list(options)
                answer = opts[int(rng.integers(len(opts)))]
                row = {"dataset": source, "question_id": f"{source.replace(' ', '_')}_{qid:04d}", "question_type": qtype,
                       "question": question, "gt_answer": answer, "image_path": rel, "modality_type": modality}
                row.update({f"option_{x}": o for x, o in zip("ABCD", opts)})
                rows.append(row)
                qid += 1
        _dump(base / "QA_information" / "Open-access" / f"{source}.json", rows)
    return base


_PROBMED_Q = (("modality", "Is this image taken via CT?"), ("body_part", "Does this image show the abdomen?"),
              ("abnormality", "Is there evidence of any abnormalities?"),
              ("entity_gt_1", "Is there evidence of a liver lesion?"),
              ("entity_hallu_1", "Is there evidence of a spleen cyst?"))


def write_probmed(root: Path, *, seed: int = 0, n_images: int = 10) -> Path:
    """``<root>/probmed.json`` and ``images/<image_type>/<n>.png``."""
    rng = np.random.default_rng(seed)
    base = Path(root)
    rows = []
    for n in range(n_images):
        kind = "ct_abdomen" if n % 2 == 0 else "mri_brain"
        rel = f"{kind}/{n:04d}.png"
        _image(base / "images" / rel, rng, fmt="PNG")
        for qa_type, question in _PROBMED_Q:
            rows.append({"id": f"img{n:04d}", "image": rel, "image_type": kind, "qa_type": qa_type,
                         "question": question, "answer": "yes" if rng.random() < 0.5 else "no"})
    _dump(base / "probmed.json", rows)
    return base


def write_all(root: Path) -> dict[str, Path]:
    """Write the three fixtures under ``root`` (``slake/``, ``omnimedvqa/``, ``probmed/``)."""
    root = Path(root)
    return {"slake": write_slake(root / "slake"), "omnimedvqa": write_omnimedvqa(root / "omnimedvqa"),
            "probmed": write_probmed(root / "probmed")}

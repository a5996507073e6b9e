"""Adapter for NIH ChestX-ray14-format folders (the embedded demo and user data).

Two layouts are accepted, the ones of the NIH subsets shipped in ``data/demo``:

* ``images/`` + ``boxes.csv``: one row per expert box with ``image, finding,
  x, y, w, h`` in pixels of the stored image (or ``x1, y1, x2, y2``), plus the
  image-level ``labels_nih`` (``|``-separated), ``patient_id``, ``view``.
* ``images/`` + ``index.csv``: one row per image with ``image, patient_id,
  follow_up, view, labels_nih`` (the NIH Data_Entry_2017 columns).

NIH labels are mapped to CheXpert with :data:`shovir_core.labels.NIH_TO_CHEXPERT`.
The NIH labels are exhaustive over the NIH classes, so a CheXpert class that an
NIH class maps to is ``1`` when listed and ``0`` otherwise; classes without an
NIH counterpart (Enlarged Cardiomediastinum, Fracture, Support Devices) are blank.

Citation: Wang X, Peng Y, Lu L, Lu Z, Bagheri M, Summers RM. "ChestX-ray8:
Hospital-scale chest X-ray database and benchmarks on weakly-supervised
classification and localization of common thorax diseases." CVPR 2017.
Data: NIH Clinical Center, https://nihcc.app.box.com/v/ChestXray-NIHCC
(usable without restriction; attribution requested).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from ..labels import CHEXPERT_CLASSES, NIH_TO_CHEXPERT
from .checks import at, read_csv
from .schema import Dataset, DatasetError

__all__ = ["load_nih_folder", "NIH_CITATION", "NIH_LICENCE"]

NIH_CITATION = (
    "Wang X, Peng Y, Lu L, Lu Z, Bagheri M, Summers RM. ChestX-ray8: Hospital-scale chest X-ray "
    "database and benchmarks on weakly-supervised classification and localization of common thorax "
    "diseases. CVPR 2017. Data: NIH Clinical Center, https://nihcc.app.box.com/v/ChestXray-NIHCC"
)
NIH_LICENCE = "NIH Clinical Center: usable without restriction; attribution requested"

_COVERED = sorted({c for c in NIH_TO_CHEXPERT.values() if c})


def _labels_from_nih(image_ids, label_strings, name: str) -> pd.DataFrame:
    out = pd.DataFrame(np.nan, index=pd.Index(image_ids, name="image_id"), columns=list(CHEXPERT_CLASSES))
    out[_COVERED] = 0.0
    for image_id, s in zip(image_ids, label_strings):
        if not isinstance(s, str) or not s.strip() or s == "nan":
            raise DatasetError(f"{name}: image {image_id!r}, field 'labels_nih': empty (write 'No Finding' for none)")
        for finding in str(s).split("|"):
            finding = finding.strip()
            if finding not in NIH_TO_CHEXPERT:
                raise DatasetError(f"{name}: image {image_id!r}: unknown NIH finding {finding!r}")
            cls = NIH_TO_CHEXPERT[finding]
            if cls:
                out.loc[image_id, cls] = 1.0
    return out


def _image_table(df: pd.DataFrame, images_dir: Path, name: str) -> pd.DataFrame:
    rows = []
    for r in df.itertuples():
        if not isinstance(r.image, str) or not r.image.strip():
            raise DatasetError(f"{name}: row {r.Index + 2}, field 'image': {r.image!r} is not a file name")
        path = images_dir / r.image
        if not path.is_file():
            raise DatasetError(f"{name}: image {r.image!r}: file not found: {path}")
        with Image.open(path) as im:
            width, height = im.size
        stem = Path(r.image).stem
        rows.append({
            "image_id": stem,
            # NIH: one image per study; <patient>_<follow-up>.png
            "study_id": stem,
            "patient_id": str(r.patient_id),
            "view": str(r.view),
            "path": str(path.resolve()),
            "width": int(width),
            "height": int(height),
            "follow_up": int(getattr(r, "follow_up", int(stem.rsplit("_", 1)[-1]) if "_" in stem else 0)),
            "age": getattr(r, "age", np.nan),
            "sex": getattr(r, "sex", None),
            "labels_nih": str(r.labels_nih),
        })
    return pd.DataFrame(rows)


def _coords(raw: pd.DataFrame, col: str, file: Path, name: str) -> pd.Series:
    """A coordinate column as floats; a non-numeric, empty or infinite cell names its row (file line)."""
    values = pd.to_numeric(raw[col], errors="coerce").astype(float)
    bad = raw.index[~np.isfinite(values.to_numpy())]
    if len(bad):
        i = int(bad[0])
        raise DatasetError(f"{at(name, file, i + 2, col)}: {raw[col][i]!r} is not a finite number "
                           "(rows counted as lines of the file, the header is line 1)")
    return values


def load_nih_folder(root: str | Path, *, name: str | None = None) -> Dataset:
    """Load an NIH-format folder (``images/`` + ``boxes.csv`` or ``index.csv``)."""
    root = Path(root)
    name = name or root.name
    images_dir = root / "images"
    if not images_dir.is_dir():
        raise DatasetError(f"{name}: no images/ folder in {root}")
    if (root / "boxes.csv").is_file():
        meta_file = root / "boxes.csv"
        raw = read_csv(meta_file, name=name, what="boxes.csv")
        need = {"image", "finding", "labels_nih", "patient_id", "view"}
        if not need <= set(raw.columns):
            raise DatasetError(f"{name}: boxes.csv lacks columns {sorted(need - set(raw.columns))}")
        per_image = raw.drop_duplicates("image").reset_index(drop=True)
        images = _image_table(per_image, images_dir, name)
        if {"x1", "y1", "x2", "y2"} <= set(raw.columns):
            x1, y1, x2, y2 = (_coords(raw, c, meta_file, name) for c in ("x1", "y1", "x2", "y2"))
        elif {"x", "y", "w", "h"} <= set(raw.columns):
            x1, y1 = _coords(raw, "x", meta_file, name), _coords(raw, "y", meta_file, name)
            x2 = x1 + _coords(raw, "w", meta_file, name)
            y2 = y1 + _coords(raw, "h", meta_file, name)
        else:
            raise DatasetError(f"{name}: boxes.csv needs x, y, w, h or x1, y1, x2, y2 columns")
        findings = []
        for i, f in enumerate(raw["finding"]):
            if f not in NIH_TO_CHEXPERT or NIH_TO_CHEXPERT[f] is None:
                raise DatasetError(
                    f"{name}: box {i} of image {Path(raw['image'][i]).stem!r}: "
                    f"unknown finding {f!r} (no CheXpert class)"
                )
            findings.append(NIH_TO_CHEXPERT[f])
        stems = raw["image"].map(lambda s: Path(s).stem)
        boxes = pd.DataFrame({
            "image_id": stems,
            "box_id": [f"{s}#{k}" for s, k in zip(stems, stems.groupby(stems).cumcount())],
            "finding": findings,
            "x1": x1, "y1": y1, "x2": x2, "y2": y2,
            "source_label": raw["finding"].astype(str),
        })
    elif (root / "index.csv").is_file():
        meta_file = root / "index.csv"
        raw = read_csv(meta_file, name=name, what="index.csv")
        need = {"image", "patient_id", "view", "labels_nih"}
        if not need <= set(raw.columns):
            raise DatasetError(f"{name}: index.csv lacks columns {sorted(need - set(raw.columns))}")
        images = _image_table(raw, images_dir, name)
        boxes = pd.DataFrame({c: pd.Series(dtype=float if c[0] in "xy" else object)
                              for c in ("image_id", "box_id", "finding", "x1", "y1", "x2", "y2", "source_label")})
    else:
        raise DatasetError(f"{name}: {root} has neither boxes.csv nor index.csv")
    labels = _labels_from_nih(images["image_id"].tolist(), images["labels_nih"].tolist(), name)
    return Dataset(
        name=name, root=root, images=images, boxes=boxes, labels=labels,
        citation=NIH_CITATION, licence=NIH_LICENCE, extra_files=(meta_file,),
    )

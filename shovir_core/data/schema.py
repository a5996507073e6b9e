"""One schema for every dataset adapter.

A :class:`Dataset` holds four pandas tables:

``images``  one row per image: ``image_id, study_id, patient_id, view, path,
            width, height`` (+ adapter extras such as ``age``, ``sex``,
            ``follow_up``). ``path`` is absolute.
``boxes``   one row per box: ``image_id, box_id, finding`` (a CheXpert class),
            ``x1, y1, x2, y2`` in pixels of the stored image, ``source_label``
            (the dataset's own finding name).
``labels``  indexed by ``image_id``, one float column per CheXpert class holding
            codes 1 / 0 / -1 / NaN (blank).
``reports`` optional, indexed by ``study_id``, column ``text``.

``sentences`` (optional) holds the dataset's finding sentences (``image_id, text``; PadChest-GR's
region sentences), read by the book's credentialed-data guard together with the reports.

Validation (:func:`validate`) also opens every image file: a missing, undecodable or truncated file
is refused when the dataset is loaded, naming the image.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..labels import CHEXPERT_CLASSES, CODES
from ..errors import ShovirError

__all__ = ["Dataset", "DatasetError", "IMAGE_COLUMNS", "BOX_COLUMNS", "validate"]

IMAGE_COLUMNS = ("image_id", "study_id", "patient_id", "view", "path", "width", "height")
BOX_COLUMNS = ("image_id", "box_id", "finding", "x1", "y1", "x2", "y2", "source_label")


class DatasetError(ShovirError, ValueError):
    """A dataset failed validation; the message names the offending item."""


@dataclass
class Dataset:
    name: str
    root: Path
    images: pd.DataFrame
    boxes: pd.DataFrame
    labels: pd.DataFrame
    reports: pd.DataFrame | None = None
    credentialed: bool = False
    citation: str = ""
    licence: str = ""
    extra_files: tuple[Path, ...] = field(default_factory=tuple)
    sentences: pd.DataFrame | None = None
    _hash: str | None = field(default=None, repr=False)
    _box_index: tuple | None = field(default=None, repr=False, compare=False)
    _path_index: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def manifest_hash(self) -> str:
        """SHA-256 over every image file's bytes, the metadata files and the tables."""
        if self._hash is None:
            self._hash = _manifest_hash(self)
        return self._hash

    def manifest(self) -> dict:
        """The dataset manifest written into every run record."""
        return {
            "name": self.name,
            "sha256": self.manifest_hash,
            "n_images": int(len(self.images)),
            "n_studies": int(self.images["study_id"].nunique()),
            "n_patients": int(self.images["patient_id"].nunique()),
            "n_boxes": int(len(self.boxes)),
            "has_reports": self.reports is not None,
            "credentialed": self.credentialed,
        }

    def boxes_of(self, image_id: str) -> list[tuple[str, float, float, float, float]]:
        """Boxes of one image as ``(finding, x1, y1, x2, y2)`` tuples (the perturb API's format)."""
        return [b[:5] for b in self.boxes_by_image().get(image_id, ())]

    def boxes_by_image(self) -> dict[str, list[tuple[str, float, float, float, float, str]]]:
        """Every image's boxes as ``(finding, x1, y1, x2, y2, box_id)`` in table order, indexed once.

        Built on first use from :attr:`boxes` (and rebuilt when the attribute is replaced), so looking
        up an image no longer scans the whole box table.
        """
        if self._box_index is None or self._box_index[0] is not self.boxes:
            index: dict[str, list] = {}
            for r in self.boxes.itertuples():
                index.setdefault(r.image_id, []).append(
                    (r.finding, float(r.x1), float(r.y1), float(r.x2), float(r.y2), str(r.box_id)))
            self._box_index = (self.boxes, index)
        return self._box_index[1]

    def load_image(self, image_id: str) -> np.ndarray:
        """Pixels of one image as a numpy array (uint8 or uint16, 2-D for grayscale)."""
        from .pixels import read_pixels

        path = self.image_paths().get(image_id)
        if path is None:
            raise KeyError(f"{self.name}: no image {image_id!r}")
        try:
            return read_pixels(path)
        except (OSError, SyntaxError, ValueError) as exc:
            raise DatasetError(f"{self.name}: image {image_id!r}: {path} does not decode ({exc})") from None

    def image_paths(self) -> dict[str, str]:
        """Each image id's file path (the first row of an id), indexed once like :meth:`boxes_by_image`:
        loading an image scanned the whole image table (quadratic over a full-scale record)."""
        if self._path_index is None or self._path_index[0] is not self.images:
            index: dict[str, str] = {}
            for image_id, path in zip(self.images["image_id"].tolist(), self.images["path"].tolist()):
                index.setdefault(image_id, path)
            self._path_index = (self.images, index)
        return self._path_index[1]


def _manifest_hash(ds: Dataset) -> str:
    h = hashlib.sha256()
    for path in sorted(ds.images["path"]):
        p = Path(path)
        h.update(p.name.encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    for p in sorted(ds.extra_files):
        h.update(Path(p).name.encode())
        h.update(Path(p).read_bytes())
    for table in (ds.images.drop(columns="path"), ds.boxes, ds.labels, ds.reports):
        if table is not None:
            h.update(pd.util.hash_pandas_object(table, index=True).to_numpy().tobytes())
    return h.hexdigest()


def validate(ds: Dataset) -> None:
    """Check the schema; every error names the dataset and the offending item."""
    name = ds.name
    missing = [c for c in IMAGE_COLUMNS if c not in ds.images.columns]
    if missing:
        raise DatasetError(f"{name}: images table lacks columns {missing}")
    dup = ds.images["image_id"][ds.images["image_id"].duplicated()]
    if not dup.empty:
        raise DatasetError(f"{name}: duplicate image_id {dup.iloc[0]!r}")
    from .checks import check_image_file

    for row in ds.images.itertuples():  # decoded enough to refuse a missing, foreign or truncated file now
        check_image_file(row.path, where=f"{name}: image {row.image_id!r}")
    missing = [c for c in BOX_COLUMNS if c not in ds.boxes.columns]
    if missing:
        raise DatasetError(f"{name}: boxes table lacks columns {missing}")
    sizes = ds.images.set_index("image_id")[["width", "height"]]
    for row in ds.boxes.itertuples():
        where = f"{name}: box {row.box_id!r} of image {row.image_id!r}"
        if row.image_id not in sizes.index:
            raise DatasetError(f"{where}: image not in the images table")
        if row.finding not in CHEXPERT_CLASSES:
            raise DatasetError(f"{where}: unknown finding {row.finding!r} (source label {row.source_label!r})")
        coords = np.array([row.x1, row.y1, row.x2, row.y2], dtype=float)
        if not np.isfinite(coords).all():
            raise DatasetError(f"{where}: non-finite coordinates {coords.tolist()}")
        if row.x2 < row.x1 or row.y2 < row.y1:
            raise DatasetError(f"{where}: inverted box (x1, y1, x2, y2) = {coords.tolist()}")
        if row.x2 == row.x1 or row.y2 == row.y1:
            raise DatasetError(f"{where}: zero-area box (x1, y1, x2, y2) = {coords.tolist()}")
        w, h = sizes.loc[row.image_id]
        if row.x1 < 0 or row.y1 < 0 or row.x2 > w or row.y2 > h:
            raise DatasetError(
                f"{where}: box (x1, y1, x2, y2) = {coords.tolist()} lies outside the {w}x{h} image"
            )
    bad_cols = [c for c in ds.labels.columns if c not in CHEXPERT_CLASSES]
    if bad_cols:
        raise DatasetError(f"{name}: labels table has unknown classes {bad_cols}")
    values = ds.labels.to_numpy(dtype=float)
    bad = ~(np.isnan(values) | np.isin(values, CODES))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DatasetError(
            f"{name}: image {ds.labels.index[r]!r}, class {ds.labels.columns[c]!r}: "
            f"label code {values[r, c]!r} is not 1, 0, -1 or blank"
        )

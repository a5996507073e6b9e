"""Boxes: validation, IoU, the ShoViR box sets and random control boxes.

Boxes are ``(finding, x1, y1, x2, y2)`` in pixels of the image, ``x`` along
columns, with ``0 <= x1 < x2 <= width`` and ``0 <= y1 < y2 <= height``, optionally
followed by a region key: ``(finding, x1, y1, x2, y2, key)``. Rows sharing a key are
one annotated box carrying several findings (the paper's label set ``D_b``). Unkeyed
rows are one box each.

A box's *footprint* (the pixels it covers) is, with ``mode="cover"``, every pixel it
touches: columns ``floor(x1) .. ceil(x2) - 1``; with ``mode="truncate"`` (the reference
code's ``_clip_bbox``: ``int()`` of each edge, clamped to the image) columns
``int(x1) .. int(x2) - 1``, which may be empty.

Box sets (ShoViR §3, for an image with boxes B and target class c):

* ``B_c`` = boxes whose label set contains c (class names compared by
  :func:`~shovir_core.perturb.validation.class_key`, so a DOCO target box never lands in ``B_c̄``);
* ``B_c̄`` = boxes whose label set does not contain c and whose IoU with every box
  of ``B_c`` is ``< 0.15`` (ShoViR §3.2; ``<= 0.15`` in the reference code, arco-group/ShoViR-Bench
  ``filter_bbox_doco.py``@1c658f3; no filter at all with ``iou_filter=False``, which is what the
  reference code does for PadChest-GR).
"""
from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
import pandas as pd

from ..labels import FINDINGS_13
from ..errors import ShovirError

__all__ = [
    "Box", "BoxError", "BoxSets", "validate_boxes", "iou", "box_sets", "footprint", "FOOTPRINTS",
    "union_mask", "random_boxes", "box_size_pool", "REFERENCE_SIZE_STATS", "keyed_boxes", "applies_iou_filter",
    "class_subsets",
]

REFERENCE_SIZE_STATS = {"width": (0.226, 0.137), "height": (0.250, 0.169), "clip": (0.026, 0.984)}
"""Reference-code box sizes: (mean, sd) of truncated normals as fractions of the image
width and height, clipped to ``clip`` ("empirical bbox size stats from PadChest-GR,
2518 bboxes", ``preprocess.py`` @2a15203)."""


class BoxError(ShovirError, ValueError):
    """A malformed box; the message names the item and the box."""


class Box(NamedTuple):
    finding: str
    x1: float
    y1: float
    x2: float
    y2: float
    key: str | None = None

    def as_list(self) -> list:
        return [self.finding, float(self.x1), float(self.y1), float(self.x2), float(self.y2)]


def _coords(box) -> tuple[float, float, float, float]:
    """``(x1, y1, x2, y2)`` of a :class:`Box`, a ``(finding, x1, y1, x2, y2[, key])`` tuple or a 4-tuple."""
    if isinstance(box, Box):
        return float(box.x1), float(box.y1), float(box.x2), float(box.y2)
    vals = list(box)
    coords = vals if len(vals) == 4 else vals[1:5]
    return tuple(float(v) for v in coords)  # type: ignore[return-value]


@dataclass(frozen=True)
class BoxSets:
    """The box sets of one (image, target class).

    Attributes
    ----------
    target : tuple of Box
        ``B_c``, the boxes labelled with the target class.
    others : tuple of Box
        ``B_c̄``, co-finding boxes that pass the IoU rule.
    dropped : tuple of (Box, float)
        Co-finding boxes removed by the IoU rule, with their largest IoU.
    iou_threshold : float
    inclusive : bool
        Whether a co-finding box with IoU equal to the threshold is kept.
    """

    target: tuple[Box, ...]
    others: tuple[Box, ...]
    dropped: tuple[tuple[Box, float], ...]
    iou_threshold: float
    inclusive: bool

    @property
    def annotated(self) -> tuple[Box, ...]:
        """``B_c ∪ B_c̄`` (the set whose size bounds the number of random boxes)."""
        return self.target + self.others

    @property
    def doco_empty(self) -> bool:
        """True when DOCO has nothing to occlude (the item is dropped from DOCO)."""
        return not self.others


def _where(item_id) -> str:
    return f"item {item_id!r}" if item_id is not None else "boxes"


def validate_boxes(boxes: Sequence, *, shape: tuple[int, ...] | None = None, item_id=None) -> list[Box]:
    """Check boxes and return them as :class:`Box` tuples.

    Raises
    ------
    BoxError
        Naming the item and the box index: wrong length, non-string finding,
        non-finite, inverted or zero-area coordinates, or a box outside the image.
    """
    if isinstance(boxes, (str, bytes)) or not isinstance(boxes, Sequence | np.ndarray | pd.Series):
        raise BoxError(f"{_where(item_id)}: boxes must be a sequence of (finding, x1, y1, x2, y2), "
                       f"got {type(boxes).__name__}")
    out = []
    for i, b in enumerate(boxes):
        where = f"{_where(item_id)}, box {i}"
        try:
            finding, *coords = b
        except TypeError:
            raise BoxError(f"{where}: expected (finding, x1, y1, x2, y2), got {b!r}") from None
        key = None
        if len(coords) == 5:
            *coords, key = coords
            key = None if key is None else str(key)
        if len(coords) != 4:
            raise BoxError(f"{where}: expected (finding, x1, y1, x2, y2), got {b!r}")
        if not isinstance(finding, str) or not finding:
            raise BoxError(f"{where}: finding must be a non-empty string, got {finding!r}")
        if any(isinstance(c, (bool, np.bool_, str, bytes)) or not isinstance(c, numbers.Real) for c in coords):
            raise BoxError(f"{where}: coordinates must be numbers (not bools or strings), got {coords!r}")
        x1, y1, x2, y2 = (float(c) for c in coords)
        if not all(math.isfinite(c) for c in (x1, y1, x2, y2)):
            raise BoxError(f"{where}: non-finite coordinates {[x1, y1, x2, y2]}")
        if not (x1 < x2 and y1 < y2):
            raise BoxError(f"{where}: need x1 < x2 and y1 < y2, got (x1, y1, x2, y2) = {(x1, y1, x2, y2)}")
        if shape is not None:
            h, w = shape[:2]
            if x1 < 0 or y1 < 0 or x2 > w or y2 > h:
                raise BoxError(f"{where}: (x1, y1, x2, y2) = {(x1, y1, x2, y2)} lies outside the "
                               f"{w}x{h} image")
        out.append(Box(finding, x1, y1, x2, y2, key))
    return out


def iou(a: Box | Sequence, b: Box | Sequence) -> float:
    """Intersection over union of two boxes (``(finding, x1, y1, x2, y2)`` or ``(x1, y1, x2, y2)``).

    >>> iou(("a", 0, 0, 2, 2), ("b", 1, 0, 3, 2))
    0.3333333333333333
    """
    ax1, ay1, ax2, ay2 = _coords(a)
    bx1, by1, bx2, by2 = _coords(b)
    iw = max(0.0, min(ax2, bx2) - max(ax1, bx1))
    ih = max(0.0, min(ay2, by2) - max(ay1, by1))
    inter = iw * ih
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    return inter / union if union > 0 else 0.0


def _regions(boxes: list[Box]) -> list[tuple[frozenset, Box]]:
    """``(label set, box)`` per annotated box: keyed rows merge, unkeyed rows stand alone (input order)."""
    order: dict = {}
    for i, b in enumerate(boxes):
        k = ("key", b.key) if b.key is not None else ("row", i)
        order.setdefault(k, []).append(b)
    return [(frozenset(r.finding for r in rows), rows[0]) for rows in order.values()]


def box_sets(boxes: Sequence, target: str, *, iou_threshold: float = 0.15, inclusive: bool = False,
             iou_filter: bool = True, item_id=None) -> BoxSets:
    """``B_c`` and ``B_c̄`` of one image for target class ``target``.

    Parameters
    ----------
    boxes : sequence of (finding, x1, y1, x2, y2[, key])
        Every annotated box of the image. A box carrying several findings
        appears once per finding with the same key (unkeyed rows are separate boxes).
    target : str
        The target class c.
    iou_threshold : float
        A co-finding box is kept when its IoU with every target box is below
        the threshold (``inclusive=True``: at most the threshold).
    inclusive : bool
        ``False`` is the paper's ``<``; ``True`` the reference code's ``<=``.
    iou_filter : bool
        ``False`` keeps every co-finding box (the reference code on PadChest-GR).
    item_id : optional
        Named in error messages.

    ``target`` holds one :class:`Box` (finding = c) per box whose label set has c;
    ``others`` one per box without c (its first finding).

    Examples
    --------
    >>> s = box_sets([("A", 0, 0, 10, 10), ("B", 5, 0, 15, 10), ("B", 50, 50, 60, 60)], "A")
    >>> len(s.target), len(s.others), len(s.dropped)
    (1, 1, 1)
    >>> s = box_sets([("A", 0, 0, 10, 10, "r1"), ("B", 0, 0, 10, 10, "r1"), ("B", 50, 50, 60, 60, "r2")], "A")
    >>> len(s.target), len(s.others), len(s.dropped)
    (1, 1, 0)
    """
    from .validation import PerturbInputError, check_real, class_key

    if not isinstance(target, str) or not target.strip():
        raise PerturbInputError(f"{_where(item_id)}: target must be a class name, got {target!r}")
    iou_threshold = check_real(iou_threshold, "iou_threshold", lo=0.0, hi=1.0, item_id=item_id)
    checked = validate_boxes(boxes, item_id=item_id)
    key = class_key(target)  # class names compared by class_key, so a DOCO target box never lands in B_c̄
    regions = [(labels, b, next((l for l in labels if class_key(l) == key), None)) for labels, b in _regions(checked)]
    target_boxes = tuple(b._replace(finding=match) for labels, b, match in regions if match is not None)
    others, dropped = [], []
    for labels, b, match in regions:
        if match is not None:
            continue
        worst = max((iou(b, t) for t in target_boxes), default=0.0)
        keep = (not iou_filter) or (worst <= iou_threshold if inclusive else worst < iou_threshold)
        if keep:
            others.append(b)
        else:
            dropped.append((b, worst))
    return BoxSets(target_boxes, tuple(others), tuple(dropped), float(iou_threshold), bool(inclusive))


FOOTPRINTS = ("cover", "truncate")


def footprint(box: Box | Sequence, shape: tuple[int, ...], mode: str = "cover") -> tuple[int, int, int, int]:
    """Pixel rows and columns a box covers: ``(r0, r1, c0, c1)``, end-exclusive, clipped to the image.

    ``mode="cover"``: every pixel the box touches (floor / ceil). ``mode="truncate"``: ``int()`` of
    each edge clamped to ``[0, W]`` / ``[0, H]`` (the reference code); ``r1 <= r0`` or ``c1 <= c0``
    then means an empty footprint.

    >>> footprint(("A", 1.5, 2.5, 4.5, 6.5), (10, 10))
    (2, 7, 1, 5)
    >>> footprint(("A", 1.5, 2.5, 4.5, 6.5), (10, 10), mode="truncate")
    (2, 6, 1, 4)
    """
    h, w = shape[:2]
    x1, y1, x2, y2 = _coords(box)
    if mode == "cover":
        r0, r1 = max(0, math.floor(y1)), min(h, math.ceil(y2))
        c0, c1 = max(0, math.floor(x1)), min(w, math.ceil(x2))
    elif mode == "truncate":
        r0, r1 = max(0, min(int(y1), h)), max(0, min(int(y2), h))
        c0, c1 = max(0, min(int(x1), w)), max(0, min(int(x2), w))
    else:
        raise ValueError(f"footprint mode {mode!r} not in {FOOTPRINTS}")
    return r0, r1, c0, c1


def union_mask(boxes: Sequence, shape: tuple[int, ...], mode: str = "cover") -> np.ndarray:
    """Boolean ``(H, W)`` mask of the union of the boxes' footprints."""
    mask = np.zeros(shape[:2], dtype=bool)
    for b in boxes:
        r0, r1, c0, c1 = footprint(b, shape, mode)
        mask[r0:r1, c0:c1] = True
    return mask


def _overlaps(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _draw_size(rng: np.random.Generator, shape, size_pool, sizes: str, rounding: str = "round") -> tuple[int, int]:
    h, w = shape[:2]
    if sizes == "dataset":
        wf, hf = size_pool[rng.integers(len(size_pool))]
    else:
        lo, hi = REFERENCE_SIZE_STATS["clip"]
        wf = float(np.clip(rng.normal(*REFERENCE_SIZE_STATS["width"]), lo, hi))
        hf = float(np.clip(rng.normal(*REFERENCE_SIZE_STATS["height"]), lo, hi))
    cast = (lambda v: int(round(v))) if rounding == "round" else int
    bw = min(max(1, cast(w * float(wf))), w)
    bh = min(max(1, cast(h * float(hf))), h)
    return bw, bh


def random_boxes(shape: tuple[int, ...], avoid: Sequence, *, k: int, rng: np.random.Generator,
                 size_pool: np.ndarray | None = None, sizes: str = "dataset",
                 max_retries: int = 100, rounding: str = "round", footprint_mode: str = "cover") -> list[Box]:
    """Place up to ``k`` random control boxes that overlap none of ``avoid``.

    Each box draws a size (from ``size_pool`` rows ``(width_fraction,
    height_fraction)`` when ``sizes="dataset"``, else the reference constants
    :data:`REFERENCE_SIZE_STATS`) and a uniform position, and is rejected when
    its footprint shares a pixel with the footprint of any box in ``avoid``;
    after ``max_retries`` failed draws it is skipped. Random boxes may overlap
    each other (as in the reference code). Sizes are ``round``-ed to pixels, or
    truncated (``rounding="truncate"``, the reference code). Returns the boxes
    actually placed, labelled ``"random"``.
    """
    if sizes not in ("dataset", "reference"):
        raise ValueError(f"sizes must be 'dataset' or 'reference', got {sizes!r}")
    if sizes == "dataset":
        pool = np.asarray(size_pool, dtype=float) if size_pool is not None else None
        if pool is None or pool.ndim != 2 or pool.shape[1] != 2 or len(pool) == 0:
            raise ValueError("sizes='dataset' needs size_pool: an (n, 2) array of (width, height) fractions "
                             "(see box_size_pool)")
        if not (np.isfinite(pool).all() and (pool > 0).all() and (pool <= 1).all()):
            raise ValueError("size_pool fractions must lie in (0, 1]")
        size_pool = pool
    if k < 0 or max_retries < 1:
        raise ValueError(f"need k >= 0 and max_retries >= 1, got k={k}, max_retries={max_retries}")
    h, w = shape[:2]
    blocked = [fp for fp in (footprint(b, shape, footprint_mode) for b in avoid) if fp[1] > fp[0] and fp[3] > fp[2]]
    placed = []
    for _ in range(k):
        for _ in range(max_retries):
            bw, bh = _draw_size(rng, shape, size_pool, sizes, rounding)
            x1 = int(rng.integers(0, w - bw + 1))
            y1 = int(rng.integers(0, h - bh + 1))
            cand = (y1, y1 + bh, x1, x1 + bw)
            if not any(_overlaps(cand, b) for b in blocked):
                placed.append(Box("random", float(x1), float(y1), float(x1 + bw), float(y1 + bh)))
                break
    return placed


def box_size_pool(boxes: pd.DataFrame, images: pd.DataFrame) -> np.ndarray:
    """The dataset's box-size distribution: ``(n, 2)`` width and height fractions.

    ``boxes`` and ``images`` are a :class:`shovir_core.data.Dataset`'s tables;
    a region labelled with several findings (several rows with the same
    coordinates) counts once.
    """
    need_b, need_i = {"image_id", "x1", "y1", "x2", "y2"}, {"image_id", "width", "height"}
    if not need_b <= set(boxes.columns) or not need_i <= set(images.columns):
        raise ValueError(f"box_size_pool needs boxes columns {sorted(need_b)} and images columns {sorted(need_i)}")
    b = boxes.drop_duplicates(["image_id", "x1", "y1", "x2", "y2"])
    b = b.merge(images[["image_id", "width", "height"]], on="image_id", how="left", validate="many_to_one")
    if b["width"].isna().any():
        missing = b.loc[b["width"].isna(), "image_id"].iloc[0]
        raise ValueError(f"box of image {missing!r} has no row in the images table")
    pool = np.column_stack([(b["x2"] - b["x1"]) / b["width"], (b["y2"] - b["y1"]) / b["height"]])
    return np.clip(pool.astype(float), 1e-9, 1.0)


# -- a dataset's boxes as the box-set rules see them (ShoViR §3) -------------------------------
def keyed_boxes(ds, image_id: str) -> list[tuple]:
    """The image's boxes of the :class:`shovir_core.data.Dataset` ``ds`` as
    ``(finding, x1, y1, x2, y2, box_id)``: rows sharing a box id are one box. A dataset that indexes
    its boxes (``Dataset.boxes_by_image``) is looked up, not scanned."""
    if hasattr(ds, "boxes_by_image"):
        return list(ds.boxes_by_image().get(image_id, ()))
    sub = ds.boxes[ds.boxes["image_id"] == image_id]
    return [(r.finding, float(r.x1), float(r.y1), float(r.x2), float(r.y2), str(r.box_id)) for r in sub.itertuples()]


def applies_iou_filter(ds, preset) -> bool:
    """Whether DOCO applies the IoU rule on the dataset ``ds`` under ``preset`` (the reference code,
    arco-group/ShoViR-Bench ``filter_bbox_doco.py``@1c658f3, does not on PadChest-GR)."""
    return not (preset.doco_iou_filter == "except-padchest" and ds.name.lower().startswith("padchest"))


def _hash_order(seed: int, image_id: str) -> str:
    return hashlib.sha256(f"{seed}\x1f{image_id}".encode()).hexdigest()


def class_subsets(ds, *, classes=None, min_count: int = 40, max_per_class: int | None = None,
                  subset_seed: int = 0) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Per-class evaluation subsets of the :class:`shovir_core.data.Dataset` ``ds`` (ShoViR §3).

    Returns
    -------
    subsets : dict
        class -> image ids (positive label and at least one box of the class),
        in a stable hash order, truncated to ``max_per_class``; only classes with
        at least ``min_count`` images.
    counts : dict
        class -> the full subset size (before ``min_count`` and truncation), for
        every class considered.
    """
    boxed = ds.boxes.groupby("finding")["image_id"].apply(lambda s: set(s))
    wanted = list(classes) if classes is not None else list(FINDINGS_13)
    subsets, counts = {}, {}
    for c in wanted:
        if c not in ds.labels.columns:
            counts[c] = 0
            continue
        positive = set(ds.labels.index[ds.labels[c] == 1.0])
        ids = sorted(positive & boxed.get(c, set()), key=lambda i: _hash_order(subset_seed, i))
        counts[c] = len(ids)
        if len(ids) >= min_count:
            subsets[c] = ids[:max_per_class] if max_per_class is not None else ids
    return subsets, counts

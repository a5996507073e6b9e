"""Input checks shared by the dataset adapters: every refusal names the file, the row and the field.

A bad value in a metadata file is refused when the dataset is loaded, before any run starts:
non-numeric, NaN or infinite coordinates, inverted, empty or out-of-image boxes, unknown finding
names, unparseable dates and times, null fields, missing files and columns, and image files that do
not decode (:func:`check_image_file`: a truncated JPEG or PNG is caught without decoding the pixels).
"""
from __future__ import annotations

import difflib
import json
import math
import numbers
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from .schema import DatasetError

__all__ = ["at", "read_csv", "read_json", "number", "bbox4", "check_image_file", "unknown_name", "need_list"]


def at(name: str, file: str | Path | None = None, row=None, field: str | None = None) -> str:
    """``"<dataset>: <file>, row <row>, field '<field>'"`` (the parts that are known)."""
    parts = [str(Path(file).name) if file is not None else None,
             f"row {row!r}" if row is not None else None,
             f"field {field!r}" if field is not None else None]
    return f"{name}: " + ", ".join(p for p in parts if p)


def read_csv(path: Path, *, name: str, what: str = "metadata CSV", **kwargs) -> pd.DataFrame:
    """``pandas.read_csv`` with a :class:`DatasetError` naming the file for a missing or unreadable file."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{name}: {what} not found: {path}")
    try:
        return pd.read_csv(path, **kwargs)
    except pd.errors.EmptyDataError:
        raise DatasetError(f"{name}: {what} {path} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetError(f"{name}: {what} {path} cannot be read: {' '.join(str(exc).split())}") from None


def read_json(path: Path, *, name: str, what: str = "annotations file"):
    """The parsed JSON of ``path``; a syntax error names the file, line and column."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{name}: {what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{name}: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                           f"{exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{name}: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def number(value, *, where: str, what: str = "value") -> float:
    """A finite real number; bools, strings, None, NaN and infinities are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise DatasetError(f"{where}: {what} = {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise DatasetError(f"{where}: {what} = {value!r} is not a finite number")
    return x


def need_list(value, *, where: str, what: str = "a list") -> list:
    """``value`` when it is a list; ``null`` and other types are refused."""
    if not isinstance(value, list):
        raise DatasetError(f"{where}: expected {what}, got {'null' if value is None else repr(value)}")
    return value


def bbox4(value, *, where: str, width: float | None = None, height: float | None = None,
          clip: bool = False) -> tuple[float, float, float, float]:
    """``[x1, y1, x2, y2]`` as floats with ``x1 < x2``, ``y1 < y2`` inside the image.

    Out-of-image boxes are refused, or clipped to the image with ``clip=True`` (a box that is empty
    after clipping is still refused).
    """
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        raise DatasetError(f"{where}: expected [x1, y1, x2, y2], got {'null' if value is None else repr(value)}")
    x1, y1, x2, y2 = (number(v, where=where, what=c) for c, v in zip(("x1", "y1", "x2", "y2"), value))
    if x2 < x1 or y2 < y1:
        raise DatasetError(f"{where}: inverted box [x1, y1, x2, y2] = {[x1, y1, x2, y2]} (need x1 < x2, y1 < y2)")
    if width is not None and height is not None and (x1 < 0 or y1 < 0 or x2 > width or y2 > height):
        if not clip:
            raise DatasetError(f"{where}: box {[x1, y1, x2, y2]} lies outside the {width:g}x{height:g} image "
                               "(the adapter option clip_boxes=True clips boxes to the image instead)")
        x1, x2 = max(0.0, x1), min(float(width), x2)
        y1, y2 = max(0.0, y1), min(float(height), y2)
    if not (x1 < x2 and y1 < y2):
        raise DatasetError(f"{where}: empty box [x1, y1, x2, y2] = {[x1, y1, x2, y2]}")
    return x1, y1, x2, y2


def unknown_name(value, allowed: Iterable[str], *, where: str, what: str = "finding") -> DatasetError:
    """The error for a name that is not one of ``allowed`` (with the closest allowed name, if any)."""
    allowed = list(allowed)
    close = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return DatasetError(f"{where}: unknown {what} {value!r}{hint} (allowed: {', '.join(allowed)})")


_TAIL = 64


def check_image_file(path: str | Path, *, where: str) -> tuple[int, int]:
    """``(width, height)`` of an image file, refusing files that are missing, not images, or truncated.

    JPEG and PNG are checked for their end marker (EOI / IEND) without decoding the pixels; other
    formats are decoded in full.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{where}: image file not found: {path}")
    try:
        with Image.open(path) as im:
            fmt, size = im.format, im.size
            if fmt not in ("JPEG", "PNG"):
                im.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DatasetError(f"{where}: {path} does not decode as an image ({exc})") from None
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        n = fh.tell()
        fh.seek(max(0, n - _TAIL))
        tail = fh.read()
    if fmt == "JPEG" and b"\xff\xd9" not in tail:
        raise DatasetError(f"{where}: {path} is a truncated JPEG (no end-of-image marker)")
    if fmt == "PNG" and b"IEND" not in tail:
        raise DatasetError(f"{where}: {path} is a truncated PNG (no IEND chunk)")
    return int(size[0]), int(size[1])

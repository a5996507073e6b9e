"""The gallery of the Perturbations chapter, from a ``perturbations`` record: its rows, a check of
its image files against the record's hashes, and the figure.

The chapter's tables are in :mod:`shovir_core.tables.perturbations`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..vocab import SHOVIR_CONDITIONS

__all__ = ["rows_of_kind", "gallery_frame", "plot_gallery", "verify_gallery"]

_CONDITION_ROWS = SHOVIR_CONDITIONS[2:]  # RO, OCO, DOCO


def rows_of_kind(trials: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The rows of one ``kind`` of a perturbations record (``box_sets``, ``substitute``, ``gallery``),
    without the columns that only other kinds fill."""
    out = trials[trials["kind"] == kind]
    if out.empty:
        raise ValueError(f"the record has no {kind!r} rows")
    return out.dropna(axis=1, how="all")


def gallery_frame(run) -> pd.DataFrame:
    """The gallery rows of a record with ``path`` (absolute PNG path) and parsed boxes."""
    g = rows_of_kind(run.trials, "gallery").copy()
    g["path"] = [str(Path(run.path) / a) for a in g["artifact"]]
    g["boxes_used"] = g["boxes_used"].map(json.loads)
    g["boxes_annotated"] = g["boxes_annotated"].map(json.loads)
    return g.reset_index(drop=True)


def verify_gallery(gallery: pd.DataFrame) -> int:
    """Re-read every gallery PNG and check its pixel SHA-256 against the record; returns the count."""
    import hashlib

    from PIL import Image

    for row in gallery.itertuples():
        data = Path(row.path).read_bytes()
        if hashlib.sha256(data).hexdigest() != row.png_sha256:
            raise ValueError(f"{row.path}: file hash differs from the record")
        with Image.open(row.path) as im:
            pixels = np.ascontiguousarray(np.asarray(im))
        if hashlib.sha256(pixels.tobytes()).hexdigest() != row.sha256:
            raise ValueError(f"{row.path}: pixel hash differs from the record")
    return len(gallery)


def plot_gallery(gallery: pd.DataFrame, *, preset: str, image_id: str | None = None, target: str | None = None):
    """Grid of one gallery item: Baseline and Full Noise, then RO / OCO / DOCO (rows) by p (columns).

    Occluded boxes are outlined in solid lines (red: random boxes, yellow:
    ``B_c``, cyan: ``B_c̄``); the target's annotated boxes are dashed white.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    from PIL import Image

    g = gallery[gallery["preset"] == preset]
    if image_id is not None:
        g = g[g["image_id"] == image_id]
    if target is not None:
        g = g[g["target"] == target]
    if g.empty:
        raise ValueError(f"no gallery rows for preset={preset!r}, image_id={image_id!r}, target={target!r}")
    image_id, target = g["image_id"].iloc[0], g["target"].iloc[0]
    g = g[(g["image_id"] == image_id) & (g["target"] == target)]
    ps = sorted(g.loc[g["condition"].isin(_CONDITION_ROWS), "p"].unique())
    colours = {"random": "red", "B_c": "yellow", "B_cbar": "cyan"}
    ncols = max(len(ps), 2)
    width = 8.0  # the book's text column (shovir_core.book.figures.COLUMN_WIDTH_IN)
    nrows = 1 + len(_CONDITION_ROWS)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, width / ncols * 1.12 * nrows + 0.3), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    cells = [(0, 0, "Baseline", None), (0, 1, "FullNoise", None)]
    cells += [(1 + r, c, cond, p) for r, cond in enumerate(_CONDITION_ROWS) for c, p in enumerate(ps)]
    for r, c, cond, p in cells:
        rows = g[g["condition"] == cond] if p is None else g[(g["condition"] == cond) & np.isclose(g["p"], p)]
        if rows.empty:
            continue
        row = rows.iloc[0]
        ax = axes[r, c]
        with Image.open(row["path"]) as im:
            arr = np.asarray(im)
        ax.imshow(arr, cmap="gray", vmin=0, vmax=np.iinfo(arr.dtype).max)
        for b in row["boxes_annotated"]:
            if b["finding"] == target and cond not in ("FullNoise",):
                ax.add_patch(Rectangle((b["x1"], b["y1"]), b["x2"] - b["x1"], b["y2"] - b["y1"], fill=False,
                                       ec="white", ls="--", lw=0.8))
        for b in row["boxes_used"]:
            ax.add_patch(Rectangle((b["x1"], b["y1"]), b["x2"] - b["x1"], b["y2"] - b["y1"], fill=False,
                                   ec=colours.get(b.get("set"), "magenta"), lw=1.2))
        # conditions label the rows, strengths the columns (9 pt: legible at the column width)
        if p is None:
            ax.set_title("Full Noise" if cond == "FullNoise" else cond, fontsize=9)
        elif r == 1:
            ax.set_title(f"p = {p:.1f}", fontsize=9)
        if p is not None and c == 0:
            ax.text(-0.08, 0.5, cond, transform=ax.transAxes, rotation=90, ha="right", va="center", fontsize=9)
    fig.suptitle(f"{image_id}, target {target!r}, preset {preset!r}", fontsize=10)
    fig.tight_layout()
    return fig

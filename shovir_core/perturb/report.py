"""Tables and figures of the Perturbations chapter, derived from a ``perturbations`` record."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .swap import TIERS

__all__ = ["box_set_counts", "tier_counts", "gallery_frame", "plot_gallery", "verify_gallery", "noise_table"]

_CONDITION_ROWS = ("RO", "OCO", "DOCO")


def _kind(trials: pd.DataFrame, kind: str) -> pd.DataFrame:
    out = trials[trials["kind"] == kind]
    if out.empty:
        raise ValueError(f"the record has no {kind!r} rows")
    return out.dropna(axis=1, how="all")


def box_set_counts(trials: pd.DataFrame) -> pd.DataFrame:
    """Per target class: images, ``|B_c|``, ``|B_c̄|`` after the IoU rule, boxes dropped, DOCO items.

    Columns: ``images`` (images with a box of the class), ``B_c boxes``,
    ``B_cbar boxes`` (kept by the IoU rule), ``dropped by IoU`` (co-finding
    boxes removed), ``DOCO items`` (images with a non-empty ``B_c̄``) and
    ``DOCO dropped`` (images without); a ``total`` row sums them.
    """
    b = _kind(trials, "box_sets").assign(doco_dropped=lambda d: d["doco_dropped"].astype(bool))
    table = b.groupby("target").agg(
        images=("image_id", "size"),
        **{"B_c boxes": ("n_target_boxes", "sum"), "B_cbar boxes": ("n_other_boxes", "sum"),
           "dropped by IoU": ("n_dropped_iou", "sum")},
        **{"DOCO dropped": ("doco_dropped", "sum")},
    )
    table["DOCO items"] = table["images"] - table["DOCO dropped"]
    table = table[["images", "B_c boxes", "B_cbar boxes", "dropped by IoU", "DOCO items", "DOCO dropped"]]
    table = table.astype(int)
    table.loc["total"] = table.sum()
    table.index.name = "class"
    return table


def tier_counts(trials: pd.DataFrame) -> pd.DataFrame:
    """Substitute accounting per tier: cases, share, same/cross patient, SSIM rejections, SSIM quartiles."""
    s = _kind(trials, "substitute")
    s = s.assign(tier=s["tier"].astype(int))
    rows = []
    for t, name in enumerate(TIERS, start=1):
        sub = s[s["tier"] == t]
        q = sub["ssim"].quantile([0.25, 0.5, 0.75]) if len(sub) else pd.Series([np.nan] * 3)
        rows.append({
            "tier": t, "rule": name, "cases": len(sub), "share": len(sub) / len(s),
            "same-patient": int((sub["pair_type"] == "same-patient").sum()),
            "cross-patient": int((sub["pair_type"] == "cross-patient").sum()),
            "rejected (SSIM)": int(sub["n_rejected_ssim"].sum()),
            "SSIM q1": q.iloc[0], "SSIM median": q.iloc[1], "SSIM q3": q.iloc[2],
        })
    none = s[s["tier"] == 0]
    rows.append({"tier": 0, "rule": "no substitute", "cases": len(none), "share": len(none) / len(s),
                 "same-patient": 0, "cross-patient": 0, "rejected (SSIM)": int(none["n_rejected_ssim"].sum()),
                 "SSIM q1": np.nan, "SSIM median": np.nan, "SSIM q3": np.nan})
    return pd.DataFrame(rows).set_index("tier")


def gallery_frame(run) -> pd.DataFrame:
    """The gallery rows of a record with ``path`` (absolute PNG path) and parsed boxes."""
    g = _kind(run.trials, "gallery").copy()
    g["path"] = [str(Path(run.path) / a) for a in g["artifact"]]
    g["boxes_used"] = g["boxes_used"].map(json.loads)
    g["boxes_annotated"] = g["boxes_annotated"].map(json.loads)
    return g.reset_index(drop=True)


def noise_table(gallery: pd.DataFrame) -> pd.DataFrame:
    """Noise statistics of the gallery's Full Noise and OCO (p = 1) outputs, per preset.

    Columns: the statistics region, pixels used, trimming percentiles, the
    trimmed mean / median / SD, the centre and scale of the Gaussian, and
    the first 12 hex digits of the output's SHA-256.
    """
    g = gallery[gallery["condition"].isin(["FullNoise", "OCO"]) & (gallery["p"] == 1.0)]
    rows = []
    for r in g.itertuples():
        n = json.loads(r.info)["noise"]
        rows.append({"preset": r.preset, "condition": r.condition, "region": n["region"],
                     "pixels": n["n_pixels"], "P_low": n["p_low"][0], "P_high": n["p_high"][0],
                     "trimmed mean": n["mean"][0], "trimmed median": n["median"][0], "trimmed SD": n["std"][0],
                     "centre": n["center"][0], "scale": n["scale"][0], "sha256": r.sha256[:12]})
    return pd.DataFrame(rows).set_index(["preset", "condition"]).round(3)


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

"""Figures shared by chapters (matplotlib/seaborn; one function per figure kind)."""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

__all__ = ["box_gallery", "audit_status_bars", "FINDING_COLOURS"]

FINDING_COLOURS = dict(zip(
    ["Atelectasis", "Cardiomegaly", "Pleural Effusion", "Lung Opacity", "Lung Lesion", "Pneumonia",
     "Pneumothorax", "Consolidation", "Edema", "Pleural Other", "Fracture", "Support Devices",
     "Enlarged Cardiomediastinum"],
    plt.get_cmap("tab20").colors))


def box_gallery(trials: pd.DataFrame, *, per_class: int = 1, ncols: int = 4, seed: int = 0):
    """Grid of images with their boxes outlined, ``per_class`` images per box class.

    Images are chosen with ``numpy.random.default_rng(seed)`` among the images
    holding a box of each class, so the gallery is reproducible.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    with_boxes = trials[trials["boxes"] != "[]"]
    findings = sorted({b["finding"] for s in with_boxes["boxes"] for b in json.loads(s)})
    chosen: list[tuple[str, pd.Series]] = []
    for f in findings:
        pool = with_boxes[with_boxes["boxes"].map(lambda s: any(b["finding"] == f for b in json.loads(s)))]
        for i in rng.choice(len(pool), size=min(per_class, len(pool)), replace=False):
            chosen.append((f, pool.iloc[int(i)]))
    nrows = int(np.ceil(len(chosen) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(3 * ncols, 3.5 * nrows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (f, row) in zip(axes.flat, chosen):
        with Image.open(row["path"]) as im:
            ax.imshow(np.asarray(im), cmap="gray")
        for b in json.loads(row["boxes"]):
            ax.add_patch(Rectangle((b["x1"], b["y1"]), b["x2"] - b["x1"], b["y2"] - b["y1"], fill=False,
                                   lw=2 if b["finding"] == f else 1, ls="-" if b["finding"] == f else "--",
                                   ec=FINDING_COLOURS.get(b["finding"], "red")))
        ax.set_title(f"{f}\n{row['image_id']} ({row['view']})", fontsize=9)
    fig.suptitle("Demo images with expert boxes (solid: the titled finding; dashed: other findings)")
    fig.tight_layout()
    return fig


def audit_status_bars(summary: pd.DataFrame, *, title: str):
    """Stacked bars of passed and flagged checks per kind (rows of ``papers.audit_summary``)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    summary.drop(index="total")[["passed", "flagged"]].plot.barh(stacked=True, ax=ax, color=["#4c9f70", "#d1495b"])
    ax.set_title(title)
    ax.set_xlabel("checks")
    ax.set_ylabel("")
    ax.legend(title="status")
    fig.tight_layout()
    return fig

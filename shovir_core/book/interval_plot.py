"""Dot-and-interval plots of estimates with their 95% intervals (ModaLens Figure 5 and the appendix
chapters on the prompt and the report)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

__all__ = ["dot_interval"]


def dot_interval(frame: pd.DataFrame, *, label: str, estimate: str, lo: str, hi: str, title: str, xlabel: str,
                 scale: float = 100.0, group: str | None = None, reference: float | None = None,
                 reference_label: str = "reference"):
    """One row per estimate: a dot at ``estimate`` and a bar from ``lo`` to ``hi`` (times ``scale``).

    ``group`` colours the rows by a column (e.g. the model); ``reference`` draws a vertical line
    (e.g. the full-report flip rate). Rows keep the frame's order from top to bottom.
    """
    for col in (label, estimate, lo, hi) + ((group,) if group else ()):
        if col not in frame.columns:
            raise ValueError(f"dot_interval: frame has no column {col!r}")
    df = frame.reset_index(drop=True)
    groups = list(dict.fromkeys(df[group])) if group else [None]
    labels = list(dict.fromkeys(df[label]))
    from .figures import COLUMN_WIDTH_IN

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 0.45 * len(labels) * max(1, len(groups)) ** 0.5 + 1.5))
    offsets = np.linspace(-0.2, 0.2, len(groups)) if len(groups) > 1 else [0.0]
    colours = plt.get_cmap("tab10").colors
    for k, (g, off) in enumerate(zip(groups, offsets)):
        sub = df if g is None else df[df[group] == g]
        y = np.array([labels.index(v) for v in sub[label]], dtype=float) + off
        x = scale * sub[estimate].to_numpy(dtype=float)
        err = np.vstack([x - scale * sub[lo].to_numpy(dtype=float), scale * sub[hi].to_numpy(dtype=float) - x])
        ax.errorbar(x, y, xerr=np.nan_to_num(err), fmt="o", color=colours[k % len(colours)], capsize=3,
                    label=None if g is None else str(g))
    if reference is not None:
        ax.axvline(scale * reference, color="grey", ls="--", lw=1, label=reference_label)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if group or reference is not None:
        ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    return fig

"""Figures shared by chapters (matplotlib/seaborn; one function per figure kind)."""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

__all__ = ["box_gallery", "audit_status_bars", "FINDING_COLOURS", "FIGURE_KEY_ENV", "TAG", "image_like_artists",
           "figure_tag", "tag_is_valid", "aggregate_png", "install_figure_tagging", "show"]

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


# --------------------------------------------------------------------------- aggregate-figure tagging
# The book's credentialed-data scan (shovir_core.book.scan) refuses every image output of a notebook that
# read credentialed data unless it carries the tag written here: matplotlib figures are rendered by
# :func:`aggregate_png`, which the kernel uses for every Figure (:func:`install_figure_tagging`) and
# which refuses figures drawing image-like arrays when the session read credentialed data.

FIGURE_KEY_ENV = "SHOVIR_FIGURE_KEY"
"""A per-execution secret set by the book runner; figure tags are HMAC-SHA256 of the PNG under it."""

TAG = "shovir_figure"
"""Output-metadata key of the tag (under the ``image/png`` metadata of the output)."""


def image_like_artists(fig) -> list[str]:
    """Artists of ``fig`` that draw image-like arrays (see :func:`shovir_core.book.guard.looks_like_pixels`).

    Images (``imshow``, ``matshow``, ``figimage``, ...) and meshes (``pcolormesh``, seaborn heatmaps)
    whose data is longer than 28 cells along a side or holds more than 196 cells.
    """
    import matplotlib.collections as mcoll
    import matplotlib.image as mimage

    from .guard import looks_like_pixels

    image_types = tuple(t for t in (getattr(mimage, "_ImageBase", None), mimage.AxesImage, mimage.FigureImage,
                                    mimage.BboxImage) if t is not None)
    mesh_types = tuple(t for t in (mcoll.QuadMesh, getattr(mcoll, "PolyQuadMesh", None)) if t is not None)
    found = []
    for artist in fig.findobj(lambda a: isinstance(a, image_types + mesh_types)):
        if isinstance(artist, image_types):
            data = artist.get_array()
            shape = tuple(np.shape(data)) if data is not None else ()
            cells = shape[:2]
        else:
            coords = artist.get_coordinates() if hasattr(artist, "get_coordinates") else None
            cells = (coords.shape[0] - 1, coords.shape[1] - 1) if coords is not None else np.shape(artist.get_array())
            shape = tuple(cells)
        if cells and looks_like_pixels(np.zeros(cells, dtype=np.uint8)):
            found.append(f"{type(artist).__name__} of shape {shape}")
    return found


def figure_tag(data: bytes, *, key: str | None = None) -> dict:
    """The tag of one rendered figure: SHA-256 of the bytes and, under the runner's key, their HMAC."""
    import hashlib
    import hmac
    import os

    key = os.environ.get(FIGURE_KEY_ENV, "") if key is None else key
    tag = {"sha256": hashlib.sha256(data).hexdigest()}
    if key:
        tag["hmac"] = hmac.new(key.encode(), data, hashlib.sha256).hexdigest()
    return tag


def tag_is_valid(data: bytes, tag, *, key: str) -> bool:
    """Whether ``tag`` (an output's metadata entry) is this execution's tag of ``data``."""
    import hmac

    if not isinstance(tag, dict) or tag.get("refused") or not key:
        return False
    expected = figure_tag(data, key=key)
    return hmac.compare_digest(str(tag.get("hmac", "")), expected["hmac"])


def _png_bytes(fig) -> bytes | None:
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, fmt="png", bbox_inches="tight", base64=False)


def aggregate_png(fig):
    """IPython PNG formatter for matplotlib figures: ``(base64 PNG, {TAG: tag})``.

    When the session read credentialed data, a figure that draws image-like arrays is not rendered:
    the output carries ``{TAG: {"refused": why}}`` and an empty image, which the runner's scan reports.
    """
    import base64

    from .guard import session_credentialed

    if session_credentialed():
        problems = image_like_artists(fig)
        if problems:
            return "", {TAG: {"refused": "; ".join(problems)}}
    data = _png_bytes(fig)
    if data is None:
        return None
    return base64.b64encode(data).decode("ascii"), {TAG: figure_tag(data)}


def install_figure_tagging(shell=None) -> bool:
    """Render every matplotlib Figure of this IPython kernel through :func:`aggregate_png`.

    Other figure formats (SVG, JPEG, PDF) are switched off, so a figure reaches the notebook only as a
    tagged PNG. Re-installed before and after every cell in case ``%matplotlib inline`` reset it.
    Returns False outside IPython.
    """
    from matplotlib.figure import Figure

    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False

    def _install(*_args, **_kwargs) -> None:
        formatters = shell.display_formatter.formatters
        for mime in ("image/svg+xml", "image/jpeg", "application/pdf"):
            if mime in formatters:
                formatters[mime].pop(Figure, None)
        png = formatters["image/png"]
        if png.type_printers.get(Figure) is not aggregate_png:
            png.for_type(Figure, aggregate_png)

    _install()
    if not getattr(shell, "_shovir_figure_tagging", False):
        shell.events.register("pre_execute", _install)
        shell.events.register("post_execute", _install)
        shell._shovir_figure_tagging = True
    return True


def show(fig, *, runs=None) -> None:
    """Display ``fig`` as a tagged aggregate figure (refused if it draws image-like credentialed data)."""
    from IPython.display import display

    from .guard import CredentialedDataError, any_credentialed, session_credentialed

    if any_credentialed(runs) or session_credentialed():
        problems = image_like_artists(fig)
        if problems:
            plt.close(fig)
            raise CredentialedDataError(f"refusing a figure that draws image-like data ({'; '.join(problems)}) "
                                        "in a notebook that read credentialed data; plot aggregates only")
    data = _png_bytes(fig)
    plt.close(fig)
    if data is not None:
        import base64

        display({"image/png": base64.b64encode(data).decode("ascii"), "text/plain": repr(fig)}, raw=True,
                metadata={"image/png": {TAG: figure_tag(data)}})


def _auto_install() -> None:
    import os

    if os.environ.get(FIGURE_KEY_ENV):
        install_figure_tagging()


_auto_install()

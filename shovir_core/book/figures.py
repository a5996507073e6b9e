"""Figures shared by chapters (matplotlib/seaborn; one function per figure kind), and how the book shows them.

:func:`show_figure` (what ``book.show(fig, ...)`` calls) saves a figure beside the executed notebook
and outputs a MyST ``figure`` directive: a numbered figure with caption and alt text that the text
cross-references as ``{numref}`fig-<name>```. Figures are drawn for the book's text column:
:data:`COLUMN_WIDTH_IN` inches at :data:`CSS_PX_PER_IN` CSS px per inch, so text of
:data:`MIN_FONT_PT` points or more is at least that size on the page (``show_figure`` refuses a
figure whose smallest text would render smaller). The PNG carries its smallest font size and its
CSS width as text chunks (``shovir:min_font_pt``, ``shovir:css_width_px``), which the browser test
reads to check the rendered size.
"""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

__all__ = ["box_gallery", "audit_status_bars", "FINDING_COLOURS", "FIGURE_KEY_ENV", "TAG", "image_like_artists",
           "figure_tag", "tag_is_valid", "aggregate_png", "install_figure_tagging", "show", "show_figure",
           "column_figsize", "COLUMN_WIDTH_IN", "CSS_PX_PER_IN", "MIN_FONT_PT", "SAVE_DPI", "FIGURES_LINK_DIR",
           "FIGURE_TAGS_FILE", "min_font_pt"]

COLUMN_WIDTH_IN = 8.0
"""Width of a full-column figure in inches (800 CSS px: the book's text column is wider at 1400 px)."""
CSS_PX_PER_IN = 100
"""CSS pixels per figure inch on the page (the ``width`` the figure directive sets)."""
MIN_FONT_PT = 9.0
"""Smallest text a figure may carry, in points at page width (9 pt = 12.5 CSS px here)."""
SAVE_DPI = 200
"""PNG resolution: two image pixels per CSS pixel, sharp on high-density screens."""
FIGURES_LINK_DIR = "_figures"
"""The PNGs' folder relative to the executed notebook."""
FIGURE_TAGS_FILE = "tags.jsonl"
"""``_figures/tags.jsonl``: one line per PNG :func:`show_figure` wrote, with its tag (:func:`figure_tag`);
the runner's scan admits a PNG from a notebook that read credentialed data only with a valid tag."""


def column_figsize(height: float, *, fraction: float = 1.0) -> tuple[float, float]:
    """``(width, height)`` in inches of a figure ``fraction`` of the text column wide."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    return (COLUMN_WIDTH_IN * fraction, float(height))


def _visible_texts(fig):
    from matplotlib.text import Text

    fig.canvas.draw()
    box = fig.bbox
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        ext = t.get_window_extent()
        if ext.x1 < box.x0 or ext.x0 > box.x1 or ext.y1 < box.y0 or ext.y0 > box.y1:
            continue
        out.append(t)
    return out


def min_font_pt(fig) -> float:
    """The smallest font size (points) of the visible, non-empty texts of ``fig``."""
    sizes = [t.get_fontsize() for t in _visible_texts(fig)]
    return float(min(sizes)) if sizes else float("inf")


def show_figure(fig, *, runs, name: str | None, caption: str | None, alt: str | None) -> None:
    """Show ``fig`` in the book as a numbered figure with ``caption`` and ``alt`` text.

    The figure is saved as ``_figures/<name>.png`` beside the executed notebook and displayed as a
    MyST ``figure`` directive labelled ``fig-<name>``; the matplotlib figure is closed, so the
    notebook shows it once. Raises ValueError when the caption or alt text is missing, or when the
    smallest text would render below :data:`MIN_FONT_PT` at the figure's page width (the page
    shows a figure at most one column wide). In a notebook that read credentialed data (or given
    credentialed ``runs``), a figure that draws image-like arrays (:func:`image_like_artists`) is
    refused with :class:`~shovir_core.book.guard.CredentialedDataError`; every PNG written is tagged
    in :data:`FIGURE_TAGS_FILE` for the runner's scan.
    """
    import json

    from IPython.display import display

    from .guard import CredentialedDataError, any_credentialed, session_credentialed
    from .render import BookTable, check_name, default_name, output_dir

    if not caption or not alt:
        raise ValueError(f"figure {name!r}: pass caption=... (what it shows) and alt=... (what a reader who cannot "
                         "see it needs to know)")
    name = check_name(name) if name else default_name(caption, alt, kind="figure")
    if any_credentialed(runs) or session_credentialed():
        problems = image_like_artists(fig)
        if problems:
            plt.close(fig)
            raise CredentialedDataError(f"figure {name!r}: refusing a figure that draws image-like data "
                                        f"({'; '.join(problems)}) in a notebook that read credentialed data; "
                                        "plot aggregates only")
    width_in = fig.get_size_inches()[0]
    shrink = min(1.0, COLUMN_WIDTH_IN / width_in)
    smallest = min_font_pt(fig)
    if smallest * shrink < MIN_FONT_PT - 1e-9:
        raise ValueError(f"figure {name!r}: its smallest text ({smallest:g} pt on a {width_in:g} in wide figure) "
                         f"renders at {smallest * shrink:.1f} pt in the {COLUMN_WIDTH_IN:g} in text column; "
                         f"use at least {MIN_FONT_PT:g} pt and figsize=figures.column_figsize(...)")
    from PIL import Image

    path = output_dir() / FIGURES_LINK_DIR / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=SAVE_DPI, bbox_inches="tight", pad_inches=0.05,
                metadata={"Software": None, "shovir:min_font_pt": f"{smallest:g}"})
    with Image.open(path) as im:
        width_px = im.size[0]
    css_width = int(round(min(width_px * CSS_PX_PER_IN / SAVE_DPI, COLUMN_WIDTH_IN * CSS_PX_PER_IN)))
    _set_png_text(path, {"shovir:min_font_pt": f"{smallest:g}", "shovir:css_width_px": str(css_width)})
    with open(path.parent / FIGURE_TAGS_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"file": path.name, "tag": figure_tag(path.read_bytes())}) + "\n")
    import matplotlib.pyplot as _plt

    _plt.close(fig)
    alt_text = " ".join(str(alt).split())
    caption_text = " ".join(str(caption).split())
    markdown = "\n".join([
        f":::{{figure}} {FIGURES_LINK_DIR}/{name}.png", f":name: fig-{name}", f":alt: {alt_text}",
        f":width: {css_width}px", ":figclass: shovir-figure", "", caption_text, ":::"])
    display(BookTable(markdown=markdown, plain=f"Figure {name}: {caption_text}", csv_path=None))


def _set_png_text(path, chunks: dict) -> None:
    """Rewrite ``path`` with ``chunks`` as PNG text chunks (after the size is known)."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    for k, v in chunks.items():
        info.add_text(k, v)
    with Image.open(path) as im:
        im.load()
        im.save(path, pnginfo=info)

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
    panel = COLUMN_WIDTH_IN / ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(COLUMN_WIDTH_IN, panel * 1.25 * nrows + 0.4), squeeze=False)
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
    fig.tight_layout()
    return fig


def audit_status_bars(summary: pd.DataFrame, *, title: str):
    """Stacked bars of passed and flagged checks per kind (rows of ``papers.audit_summary``)."""
    fig, ax = plt.subplots(figsize=column_figsize(3.4))
    summary.drop(index="total")[["passed", "flagged"]].plot.barh(stacked=True, ax=ax, color=["#4c9f70", "#d1495b"])
    ax.set_title(title)
    ax.set_xlabel("checks")
    ax.set_ylabel("")
    ax.legend(title="status", loc="upper left", bbox_to_anchor=(1.01, 1))
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

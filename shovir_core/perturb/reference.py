"""The reference-code engine: ShoViR's perturbations computed as the authors' ``preprocess.py`` computes them.

Written from the description of ``arco-group/ShoViR-Bench`` ``src/benchmark/preprocess.py`` @2a15203
(none of its code is copied), in its order of operations and dtypes, so that for the same input and
the same random stream the output is byte-identical:

* the input is the 8-bit RGB image of ``_to_uint8_rgb`` (min-max, truncated, replicated channels);
* boxes: each edge ``int()``-truncated and clamped (``_clip_bbox``); empty boxes are dropped;
* matched fill (``_matched_correlated_noise_fill``): pixels outside the occluded union (all pixels when
  fewer than 32 remain), as float32 ``(N, 3)``; per-channel 1st/99th percentiles; a pixel is kept when all
  three channels lie inside (all pixels when fewer than 32 survive); centre = per-channel median, scale
  = per-channel std, at least 1; ``standard_normal((H, W, 3))`` as float32 times scale plus centre,
  clipped to [0, 255], cast to uint8, then Pillow ``GaussianBlur(radius=2)``;
* blend (``_blend_region``): ``alpha = uint8(mask * p * 255)``, Pillow ``GaussianBlur(radius=6)`` (0 for
  the Full Noise Image), ``/ 255``; ``img * (1 - alpha) + fill * alpha`` in float32, clipped, cast to uint8;
* OCO / DOCO (``object_class_occlusion``): the union of the boxes, one full-frame fill, one blend;
  p = 0 or no box returns the 8-bit image and draws nothing;
* RO (``random_occlusion``): p = 0 returns at once; ``N = randint(1, max(|B|, 1) + 1)`` with B the
  clipped target and co-finding boxes; each of the N boxes is drawn up to 100 times as
  ``w = clip(normal(0.226, 0.137), 0.026, 0.984)``, ``h = clip(normal(0.250, 0.169), 0.026, 0.984)``,
  ``bw = min(max(1, int(W w)), W)``, ``bh`` likewise, ``x1 = randint(0, W - bw + 1)``,
  ``y1 = randint(0, H - bh + 1)`` until it overlaps no box of B (strict rectangle intersection); all
  boxes are placed first, then filled one after another with ``standard_normal((bh, bw, 3))`` noise
  at the untrimmed float32 mean and std (at least 1) of the whole image, hard-edged
  (``orig (1 - p) + noise p``, or the noise itself at p = 1);
* Full Noise Image (``all_noise_mean``) and uniform noise (``all_noise``: ``randint(0, 256, (H, W, 3),
  dtype=uint8)`` over the loaded image's size).

``rng`` is a :class:`numpy.random.RandomState` (the legacy stream the reference code draws from through
``np.random``; its ``standard_normal``, ``normal`` and ``randint`` are the calls ``np.random.randn``,
``np.random.normal`` and ``np.random.randint`` make) or a :class:`numpy.random.Generator` (the
project's per-item streams; same draws in the same order, Generator algorithms).
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageFilter

from .boxes import REFERENCE_SIZE_STATS

__all__ = ["clip_box", "matched_fill", "blend_region", "object_class_occlusion", "random_occlusion",
           "all_noise_mean", "all_noise", "robust_center_scale", "plain_stats", "advance"]

Rng = np.random.RandomState | np.random.Generator
_MIN_PIXELS = 32


def _randint(rng: Rng, low: int, high: int, **kw):
    return rng.randint(low, high, **kw) if isinstance(rng, np.random.RandomState) else rng.integers(low, high, **kw)


def clip_box(box, w: int, h: int) -> tuple[int, int, int, int] | None:
    """``(x1, y1, x2, y2)`` pixel ints of a box in pixels (``int()`` of each edge, clamped), or ``None`` if empty."""
    x1, y1, x2, y2 = (float(v) for v in box)
    x1, x2 = max(0, min(int(x1), w)), max(0, min(int(x2), w))
    y1, y2 = max(0, min(int(y1), h)), max(0, min(int(y2), h))
    if x2 <= x1 or y2 <= y1:
        return None
    return x1, y1, x2, y2


def robust_center_scale(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """Per-channel trimmed median and std (float32) of ``(N, 3)`` pixels, and what they came from."""
    px = pixels.astype(np.float32)
    lo = np.percentile(px, 1.0, axis=0)
    hi = np.percentile(px, 99.0, axis=0)
    keep = np.ones((px.shape[0],), dtype=bool)
    for c in range(3):
        keep &= (px[:, c] >= lo[c]) & (px[:, c] <= hi[c])
    trimmed = px[keep]
    if trimmed.shape[0] < _MIN_PIXELS:
        trimmed = px
    center = np.median(trimmed, axis=0).astype(np.float32)
    std = trimmed.std(axis=0).astype(np.float32)
    scale = np.maximum(std, np.float32(1.0))
    return center, scale, {"p_low": lo.tolist(), "p_high": hi.tolist(), "n_pixels": int(px.shape[0]),
                           "n_trimmed": int(trimmed.shape[0]), "std": std.tolist(), "median": center.tolist(),
                           "mean": trimmed.mean(axis=0).tolist()}


def _gaussian_blur(arr: np.ndarray, radius: float) -> np.ndarray:
    return np.array(Image.fromarray(arr).filter(ImageFilter.GaussianBlur(radius=float(radius))), dtype=np.uint8)


def matched_fill(img: np.ndarray, mask: np.ndarray, rng: Rng, *, blur_radius: float = 2.0) -> tuple[np.ndarray, dict]:
    """The blurred matched-noise fill of a ``(H, W, 3)`` uint8 image, statistics from outside ``mask``."""
    h, w, c = img.shape
    if c != 3:
        raise ValueError(f"matched_fill needs an (H, W, 3) image, got {img.shape}")
    outside = ~mask
    region = "outside"
    if outside.sum() < _MIN_PIXELS:
        outside = np.ones((h, w), dtype=bool)
        region = "image" if not mask.any() else "image (fallback)"
    elif not mask.any():
        region = "image"
    center, scale, extra = robust_center_scale(img[outside])
    noise = rng.standard_normal((h, w, 3)).astype(np.float32) * scale + center
    noise = np.clip(noise, 0.0, 255.0).astype(np.uint8)
    stats = {"center": center.tolist(), "scale": scale.tolist(), "region": region, **extra}
    return _gaussian_blur(noise, blur_radius), stats


def blend_region(img: np.ndarray, fill: np.ndarray, mask: np.ndarray, p: float, *, feather_radius: float = 6) -> np.ndarray:
    """``img (1 - a) + fill a`` with ``a`` the 8-bit, Gaussian-feathered ``mask * p``."""
    p = float(np.clip(p, 0.0, 1.0))
    if p <= 0.0:
        return img
    alpha_u8 = (mask.astype(np.float32) * p * 255.0).astype(np.uint8)
    alpha = _gaussian_blur(alpha_u8, feather_radius).astype(np.float32) / 255.0
    out = img.astype(np.float32) * (1.0 - alpha[..., None]) + fill.astype(np.float32) * alpha[..., None]
    return np.clip(out, 0.0, 255.0).astype(np.uint8)


def object_class_occlusion(img: np.ndarray, boxes, p: float, rng: Rng) -> tuple[np.ndarray, list, dict | None]:
    """OCO / DOCO of an 8-bit RGB image over ``boxes`` (pixel ``(x1, y1, x2, y2)``).

    Returns ``(image, clipped boxes, fill statistics or None)``; the input itself when nothing is drawn.
    """
    h, w, _ = img.shape
    if p <= 0.0:
        return img, [], None
    clipped = [b for b in (clip_box(b, w, h) for b in boxes) if b is not None]
    if not clipped:
        return img, [], None
    union = np.zeros((h, w), dtype=bool)
    for x1, y1, x2, y2 in clipped:
        union[y1:y2, x1:x2] = True
    fill, stats = matched_fill(img, union, rng, blur_radius=2.0)
    return blend_region(img, fill, union, p, feather_radius=6), clipped, stats


def plain_stats(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Untrimmed float32 mean and std (at least 1) of all pixels, per channel (RO's fast path)."""
    flat = img.reshape(-1, 3).astype(np.float32)
    return flat.mean(axis=0), np.maximum(flat.std(axis=0), 1.0)


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and a[2] > b[0] and a[1] < b[3] and a[3] > b[1]


def _random_box(w: int, h: int, rng: Rng, sizes: dict) -> tuple[int, int, int, int]:
    lo, hi = sizes["clip"]
    w_frac = float(np.clip(rng.normal(*sizes["width"]), lo, hi))
    h_frac = float(np.clip(rng.normal(*sizes["height"]), lo, hi))
    bw = min(max(1, int(w * w_frac)), w)
    bh = min(max(1, int(h * h_frac)), h)
    x1 = int(_randint(rng, 0, w - bw + 1))
    y1 = int(_randint(rng, 0, h - bh + 1))
    return x1, y1, x1 + bw, y1 + bh


def _place(w: int, h: int, annotated, rng: Rng, max_retries: int, sizes: dict) -> tuple[int, list, list]:
    avoid = [b for b in (clip_box(b, w, h) for b in annotated) if b is not None]
    k = int(_randint(rng, 1, max(len(avoid), 1) + 1))
    placed = []
    for _ in range(k):
        for _ in range(max_retries):
            cand = _random_box(w, h, rng, sizes)
            if not any(_overlaps(cand, b) for b in avoid):
                placed.append(cand)
                break
    return k, placed, avoid


def random_occlusion(img: np.ndarray, annotated, p: float, rng: Rng, *, max_retries: int = 100,
                     sizes: dict = REFERENCE_SIZE_STATS) -> tuple[np.ndarray, dict]:
    """RO of an 8-bit RGB image: random boxes off the ``annotated`` boxes (pixel ``(x1, y1, x2, y2)``).

    Returns ``(image, description)`` with ``k_requested``, the placed boxes and the fill statistics.
    """
    h, w, _ = img.shape
    if p <= 0.0:
        return img, {"k_requested": 0, "placed": [], "avoided": []}
    k, placed, avoid = _place(w, h, annotated, rng, max_retries, sizes)
    info = {"k_requested": k, "placed": placed, "avoided": avoid}
    if not placed:
        return img, info
    center, scale = plain_stats(img)
    flat = img.reshape(-1, 3)
    info["noise"] = {"center": center.tolist(), "scale": scale.tolist(), "region": "image", "trimmed": False,
                     "mean": center.tolist(), "std": scale.tolist(), "median": np.median(flat, axis=0).tolist(),
                     "p_low": flat.min(axis=0).tolist(), "p_high": flat.max(axis=0).tolist(),
                     "n_pixels": int(flat.shape[0]), "n_trimmed": int(flat.shape[0])}
    out = img.copy()
    for x1, y1, x2, y2 in placed:
        noise = rng.standard_normal((y2 - y1, x2 - x1, 3)).astype(np.float32) * scale + center
        noise = np.clip(noise, 0.0, 255.0)
        if p >= 1.0:
            out[y1:y2, x1:x2] = noise.astype(np.uint8)
        else:
            orig = out[y1:y2, x1:x2].astype(np.float32)
            out[y1:y2, x1:x2] = np.clip(orig * (1.0 - p) + noise * p, 0.0, 255.0).astype(np.uint8)
    return out, info


def all_noise_mean(img: np.ndarray, rng: Rng) -> tuple[np.ndarray, dict]:
    """The Full Noise Image: the blurred matched fill of the whole image, blended at p = 1 without feathering."""
    h, w, _ = img.shape
    fill, stats = matched_fill(img, np.zeros((h, w), dtype=bool), rng, blur_radius=2.0)
    return blend_region(img, fill, np.ones((h, w), dtype=bool), 1.0, feather_radius=0), stats


def all_noise(shape: tuple[int, int], rng: Rng) -> np.ndarray:
    """Uniform ``U{0..255}`` RGB noise of an ``(H, W)`` image size (the reference code's ``all_noise``)."""
    h, w = shape
    return np.ascontiguousarray(_randint(rng, 0, 256, size=(h, w, 3), dtype=np.uint8))


def advance(rng: Rng, condition: str, shape: tuple[int, int], boxes, p: float, *, max_retries: int = 100,
            sizes: dict = REFERENCE_SIZE_STATS) -> None:
    """Consume ``rng`` exactly as the reference function of ``condition`` would for an item of ``shape``.

    The draws depend only on the image size, the boxes (pixel ``(x1, y1, x2, y2)``: OCO/DOCO the
    occluded boxes, RO the avoided ones) and p, never on pixel values, so an item of a legacy stream
    that this run does not evaluate is skipped without loading its image. ``condition`` is one of
    ``"Baseline"`` (no draws), ``"FullNoise"``, ``"UniformNoise"``, ``"OCO"``, ``"DOCO"``, ``"RO"``.
    """
    h, w = shape
    if condition == "Baseline":
        return
    if condition == "FullNoise":
        rng.standard_normal((h, w, 3))
    elif condition == "UniformNoise":
        _randint(rng, 0, 256, size=(h, w, 3), dtype=np.uint8)
    elif condition in ("OCO", "DOCO"):
        if p > 0.0 and any(clip_box(b, w, h) is not None for b in boxes):
            rng.standard_normal((h, w, 3))
    elif condition == "RO":
        if p > 0.0:
            _, placed, _ = _place(w, h, boxes, rng, max_retries, sizes)
            for x1, y1, x2, y2 in placed:
                rng.standard_normal((y2 - y1, x2 - x1, 3))
    else:
        raise ValueError(f"advance: unknown condition {condition!r}")

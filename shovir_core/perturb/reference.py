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

import functools

import numpy as np
from PIL import Image, ImageFilter

from .boxes import REFERENCE_SIZE_STATS

__all__ = ["clip_box", "matched_fill", "blend_region", "object_class_occlusion", "random_occlusion",
           "all_noise_mean", "all_noise", "robust_center_scale", "plain_stats", "advance",
           "robust_center_scale_u8", "occlusion_plan", "blend_plan", "random_occlusion_plan", "random_occlusion_apply",
           "feather_alpha", "BLUR_REACH", "blur_reach"]

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


def _order_stats(counts: np.ndarray, ranks) -> list[int]:
    """Values at 0-based ``ranks`` of sorted data whose value histogram is ``counts``."""
    cum = np.cumsum(counts)
    return [int(np.searchsorted(cum, r, side="right")) for r in ranks]


def _same_as_percentile(counts: np.ndarray, n: int, q: float, dtype) -> np.ndarray | None:
    """``np.percentile`` (linear) of integer data given by its histogram, computed by numpy itself on the two
    order statistics it interpolates; ``None`` when the interpolation weight cannot be reproduced exactly."""
    v = (n - 1) * np.true_divide(q, 100)
    prev = int(np.floor(v))
    gamma = v - np.floor(v)
    if prev >= n - 1:
        prev, gamma = n - 1, 0.0
    q2 = gamma * 100.0
    for _ in range(4):
        if np.true_divide(q2, 100) == gamma:
            a, b = _order_stats(counts, (prev, min(prev + 1, n - 1)))
            return np.percentile(np.array([a, b], dtype=dtype), float(q2))  # a Python float, as the caller passes
        q2 = np.nextafter(q2, np.inf if np.true_divide(q2, 100) < gamma else -np.inf)
    return None


def _sequential_mean_std(col: np.ndarray) -> tuple[np.float32, np.float32]:
    """float32 mean and std of one column as ``x.mean(axis=0)`` / ``x.std(axis=0)`` of an ``(M, 3)`` float32
    array compute them: numpy reduces axis 0 of a C-ordered array row by row (a sequential float32 sum, not
    the pairwise sum of a contiguous vector), which ``np.cumsum`` reproduces on the column alone."""
    m = col.shape[0]
    mean = np.true_divide(np.cumsum(col, dtype=np.float32)[-1:], m)
    x = col - mean
    x = x * x
    std = np.sqrt(np.true_divide(np.cumsum(x, dtype=np.float32)[-1:], m))
    return mean[0], std[0]


@functools.lru_cache(maxsize=1)
def _sequential_reduction_holds() -> bool:
    """Whether this numpy reduces axis 0 of an ``(M, 3)`` float32 array as :func:`_sequential_mean_std` assumes
    (checked once per process on data of the size where rounding shows)."""
    rng = np.random.default_rng(0)
    arr = np.clip(rng.normal(128, 40, (70_000, 3)), 0, 255).astype(np.uint8).astype(np.float32)
    means, stds = zip(*(_sequential_mean_std(np.ascontiguousarray(arr[:, c])) for c in range(3)))
    return bool(np.array_equal(np.array(means, np.float32), arr.mean(axis=0))
                and np.array_equal(np.array(stds, np.float32), arr.std(axis=0).astype(np.float32)))


def robust_center_scale_u8(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """:func:`robust_center_scale` of ``(N, 3)`` uint8 pixels, equal to it bit for bit, faster: the percentiles
    and the median come from the per-channel histograms (numpy interpolating the same two order statistics),
    the mean and standard deviation from each channel's sequential float32 sums (numpy's order for axis 0;
    checked once per process, :func:`_sequential_reduction_holds`). Falls back to :func:`robust_center_scale`
    for fewer than 1,000 pixels or where an interpolation weight cannot be reproduced."""
    if pixels.dtype != np.uint8 or pixels.ndim != 2 or pixels.shape[0] < 1000 or not _sequential_reduction_holds():
        return robust_center_scale(pixels)
    n = pixels.shape[0]
    cols = [np.ascontiguousarray(pixels[:, c]) for c in range(3)]
    counts = [np.bincount(col, minlength=256) for col in cols]
    lo = [_same_as_percentile(counts[c], n, 1.0, np.float32) for c in range(3)]
    hi = [_same_as_percentile(counts[c], n, 99.0, np.float32) for c in range(3)]
    if any(v is None for v in lo + hi):
        return robust_center_scale(pixels)
    lo, hi = np.array(lo), np.array(hi)
    keep = np.ones((n,), dtype=bool)
    for c in range(3):
        keep &= (cols[c] >= lo[c]) & (cols[c] <= hi[c])
    m = int(keep.sum())
    if m < _MIN_PIXELS:
        return robust_center_scale(pixels)
    center, mean, std = (np.empty(3, dtype=np.float32) for _ in range(3))
    for c in range(3):
        kept = cols[c][keep] if m < n else cols[c]
        tc = np.bincount(kept, minlength=256)
        mid = _order_stats(tc, (m // 2 - 1, m // 2) if m % 2 == 0 else (m // 2,))
        center[c] = np.median(np.array(mid, dtype=np.float32))
        mean[c], std[c] = _sequential_mean_std(kept.astype(np.float32))
    scale = np.maximum(std, np.float32(1.0))
    return center, scale, {"p_low": lo.tolist(), "p_high": hi.tolist(), "n_pixels": int(n),
                           "n_trimmed": int(m), "std": std.tolist(), "median": center.tolist(),
                           "mean": mean.tolist()}


BLUR_REACH = {2.0: 16, 6.0: 32}
"""Pixels beyond which Pillow's ``GaussianBlur`` of the reference code's radii (2: the noise, 6: the feather)
cannot change a value (its three box passes reach about 6 and 18 pixels; the margins leave room)."""


def blur_reach(radius: float) -> int:
    """Margin (pixels) beyond which Pillow's ``GaussianBlur(radius)`` cannot change a value (:data:`BLUR_REACH`)."""
    return BLUR_REACH.get(float(radius), int(np.ceil(4 * radius)) + 8)


def feather_alpha(mask: np.ndarray, p: float, radius: float) -> np.ndarray:
    """The reference code's blending weight: ``uint8(mask * p * 255)`` blurred by Pillow (``radius``), ``/ 255``
    (float32), as :func:`blend_region` computes it."""
    alpha_u8 = (mask.astype(np.float32) * p * 255.0).astype(np.uint8)
    return _gaussian_blur(alpha_u8, radius).astype(np.float32) / 255.0 if radius > 0 else \
        alpha_u8.astype(np.float32) / 255.0


def occlusion_plan(img: np.ndarray, boxes, rng: Rng) -> dict | None:
    """What :func:`object_class_occlusion` draws once for every p > 0: the union, the statistics and the
    blurred fill, the latter only over the window its feathered mask reaches (``None`` without a box).

    With a fresh stream for each p (the reference code reseeds per experiment) the fill is the same at every
    p; :func:`blend_plan` then blends it, so a grid of p equals the reference function called per p byte for
    byte while computing the fill once. The noise is drawn in C order up to the window's last row (the
    values the reference draws there), converted and blurred over the window plus the blur's reach only;
    ``rng`` is left where that draw ends (not where the reference's full-frame draw would), so a plan needs a
    stream of its own.
    """
    h, w, _ = img.shape
    clipped = [b for b in (clip_box(b, w, h) for b in boxes) if b is not None]
    if not clipped:
        return None
    union = np.zeros((h, w), dtype=bool)
    for x1, y1, x2, y2 in clipped:
        union[y1:y2, x1:x2] = True
    outside = ~union
    region = "outside"
    if outside.sum() < _MIN_PIXELS:
        outside = np.ones((h, w), dtype=bool)
        region = "image (fallback)"
    center, scale, extra = robust_center_scale_u8(img[outside])
    m = blur_reach(6.0)
    r0, r1 = max(0, min(b[1] for b in clipped) - m), min(h, max(b[3] for b in clipped) + m)
    c0, c1 = max(0, min(b[0] for b in clipped) - m), min(w, max(b[2] for b in clipped) + m)
    g = blur_reach(2.0)
    n0, n1, k0, k1 = max(0, r0 - g), min(h, r1 + g), max(0, c0 - g), min(w, c1 + g)
    z = rng.standard_normal((n1, w, 3))[n0:, k0:k1]  # the full frame's values on rows n0..n1 (C order)
    noise = np.clip(z.astype(np.float32) * scale + center, 0.0, 255.0).astype(np.uint8)
    fill = _gaussian_blur(noise, 2.0)[r0 - n0:r1 - n0, c0 - k0:c1 - k0]
    stats = {"center": center.tolist(), "scale": scale.tolist(), "region": region, **extra}
    return {"union": union, "window": (r0, r1, c0, c1), "fill": fill, "clipped": clipped, "stats": stats}


def blend_plan(img: np.ndarray, plan: dict, p: float) -> np.ndarray:
    """:func:`blend_region` of a plan's fill at ``p``, computed where the weight is not 0 (elsewhere the
    reference's arithmetic returns the input itself): byte-identical to the full-frame blend."""
    r0, r1, c0, c1 = plan["window"]
    alpha = feather_alpha(plan["union"][r0:r1, c0:c1], p, 6.0)
    on = alpha > 0
    out = img.copy()
    win = out[r0:r1, c0:c1]
    a = alpha[on][:, None]
    x = img[r0:r1, c0:c1][on].astype(np.float32)
    win[on] = np.clip(x * (1.0 - a) + plan["fill"][on].astype(np.float32) * a, 0.0, 255.0).astype(np.uint8)
    return out


def random_occlusion_plan(img: np.ndarray, annotated, rng: Rng, *, max_retries: int = 100,
                          sizes: dict = REFERENCE_SIZE_STATS) -> dict:
    """What :func:`random_occlusion` draws for every p > 0 (placement and each box's noise), drawn once."""
    h, w, _ = img.shape
    k, placed, avoid = _place(w, h, annotated, rng, max_retries, sizes)
    info = {"k_requested": k, "placed": placed, "avoided": avoid}
    noises = []
    if placed:
        center, scale = plain_stats(img)
        flat = img.reshape(-1, 3)
        info["noise"] = {"center": center.tolist(), "scale": scale.tolist(), "region": "image", "trimmed": False,
                         "mean": center.tolist(), "std": scale.tolist(), "median": np.median(flat, axis=0).tolist(),
                         "p_low": flat.min(axis=0).tolist(), "p_high": flat.max(axis=0).tolist(),
                         "n_pixels": int(flat.shape[0]), "n_trimmed": int(flat.shape[0])}
        for x1, y1, x2, y2 in placed:
            noise = rng.standard_normal((y2 - y1, x2 - x1, 3)).astype(np.float32) * scale + center
            noises.append(np.clip(noise, 0.0, 255.0))
    return {"info": info, "noises": noises}


def random_occlusion_apply(img: np.ndarray, plan: dict, p: float) -> tuple[np.ndarray, dict]:
    """:func:`random_occlusion`'s output at ``p`` from a plan (boxes filled one after another, hard-edged)."""
    info = plan["info"]
    if p <= 0.0:
        return img, {"k_requested": 0, "placed": [], "avoided": []}
    if not info["placed"]:
        return img, info
    out = img.copy()
    for (x1, y1, x2, y2), noise in zip(info["placed"], plan["noises"]):
        if p >= 1.0:
            out[y1:y2, x1:x2] = noise.astype(np.uint8)
        else:
            orig = out[y1:y2, x1:x2].astype(np.float32)
            out[y1:y2, x1:x2] = np.clip(orig * (1.0 - p) + noise * p, 0.0, 255.0).astype(np.uint8)
    return out, info


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

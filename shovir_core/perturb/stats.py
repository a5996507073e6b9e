"""Matched-noise statistics: trimmed centre and scale of an image's intensities.

For integer images whose channels are equal (grayscale, or grayscale stored as
RGB) the statistics come from an intensity histogram: percentiles are exact
(the same values as :func:`numpy.percentile` with its default linear
interpolation), and the trimmed mean, standard deviation and median are
computed from bin counts. Excluding the occluded union subtracts the histogram
of the union's pixels, so nothing is sorted. Images with distinct channels use
the direct path (per-channel percentiles, and a pixel is kept only when every
channel lies inside its range, as the reference code does).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .presets import Preset

__all__ = ["NoiseStats", "matched_stats", "hist_percentile", "SUPPORTED_DTYPES"]

SUPPORTED_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16))


@dataclass(frozen=True)
class NoiseStats:
    """Statistics the noise is matched to (one value per noise channel).

    ``center`` and ``scale`` parametrise the Gaussian; ``mean``, ``std`` and
    ``median`` are the trimmed statistics they were chosen from; ``p_low`` and
    ``p_high`` the trimming percentiles; ``n_pixels`` the pixels the statistics
    came from before trimming and ``n_trimmed`` after; ``region`` says which
    pixels (``"image"``, ``"outside"``, or ``"image (fallback)"`` when too
    few pixels lie outside the union).
    """

    center: tuple[float, ...]
    scale: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    median: tuple[float, ...]
    p_low: tuple[float, ...]
    p_high: tuple[float, ...]
    n_pixels: int
    n_trimmed: int
    region: str
    max_value: int

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def hist_percentile(hist: np.ndarray, q: float) -> float:
    """Percentile ``q`` (0-100) of the values counted in ``hist`` (bin ``v`` counts value ``v``).

    Equals ``np.percentile(values, q)`` (linear interpolation).

    >>> hist_percentile(np.bincount([1, 2, 2, 9]), 50)
    2.0
    """
    cum = np.cumsum(hist)
    n = int(cum[-1])
    if n == 0:
        raise ValueError("percentile of an empty histogram")
    virtual = np.true_divide(q, 100) * (n - 1)
    lo = int(np.floor(virtual))
    frac = float(virtual - lo)
    v_lo = float(np.searchsorted(cum, lo, side="right"))
    v_hi = float(np.searchsorted(cum, min(lo + 1, n - 1), side="right"))
    if frac == 0.0 or v_lo == v_hi:
        return v_lo
    # numpy's _lerp, including its symmetric form for t >= 0.5
    diff = v_hi - v_lo
    return v_hi - diff * (1 - frac) if frac >= 0.5 else v_lo + diff * frac


def _hist_median(hist: np.ndarray) -> float:
    cum = np.cumsum(hist)
    n = int(cum[-1])
    a = float(np.searchsorted(cum, (n - 1) // 2, side="right"))
    b = float(np.searchsorted(cum, n // 2, side="right"))
    return (a + b) / 2


def _from_hist(hist: np.ndarray, preset: Preset) -> tuple[float, float, float, float, float, int]:
    n_all = int(hist.sum())
    values = np.arange(len(hist), dtype=np.float64)
    if preset.trim is not None:
        lo = hist_percentile(hist, preset.trim[0])
        hi = hist_percentile(hist, preset.trim[1])
        kept = np.where((values >= lo) & (values <= hi), hist, 0)
        if kept.sum() < preset.min_pixels:
            kept = hist
    else:
        lo, hi = float(np.flatnonzero(hist)[0]), float(np.flatnonzero(hist)[-1])
        kept = hist
    n = int(kept.sum())
    w = kept.astype(np.float64)
    mean = float(w @ values / n)
    std = float(np.sqrt(w @ (values - mean) ** 2 / n))
    return mean, std, _hist_median(kept), lo, hi, n


def _from_pixels(px: np.ndarray, preset: Preset) -> tuple[np.ndarray, ...]:
    """``px``: (N, C) array. Returns per-channel mean, std, median, p_low, p_high, n_kept."""
    px = px.astype(np.float64, copy=False)
    if preset.trim is not None:
        lo = np.percentile(px, preset.trim[0], axis=0)
        hi = np.percentile(px, preset.trim[1], axis=0)
        keep = ((px >= lo) & (px <= hi)).all(axis=1)
        kept = px[keep] if keep.sum() >= preset.min_pixels else px
    else:
        lo, hi = px.min(axis=0), px.max(axis=0)
        kept = px
    return kept.mean(axis=0), kept.std(axis=0), np.median(kept, axis=0), lo, hi, len(kept)


def _channels_equal(image: np.ndarray) -> bool:
    if image.ndim == 2 or image.shape[2] == 1:
        return True
    first = image[..., 0]
    return all(np.array_equal(first, image[..., k]) for k in range(1, image.shape[2]))


def matched_stats(image: np.ndarray, *, preset: Preset, exclude: np.ndarray | None = None,
                  n_channels: int = 1) -> NoiseStats:
    """Statistics of ``image`` that matched noise reproduces.

    Parameters
    ----------
    image : ndarray, uint8 or uint16, (H, W) or (H, W, C)
    preset : Preset
        ``trim``, ``center``, ``min_std`` and ``min_pixels`` apply.
    exclude : ndarray of bool, (H, W), optional
        Pixels to leave out (the occluded union) when ``preset.stats_region``
        is ``"outside"``; ignored otherwise.
    n_channels : int
        Number of noise channels the statistics are reported for (a
        single-channel result is repeated).
    """
    if image.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"matched_stats: dtype {image.dtype} not supported (uint8 or uint16)")
    max_value = int(np.iinfo(image.dtype).max)
    use_exclude = preset.stats_region == "outside" and exclude is not None and exclude.any()
    region = "outside" if use_exclude else "image"
    n_total = image.shape[0] * image.shape[1]
    if use_exclude and n_total - int(exclude.sum()) < preset.min_pixels:
        use_exclude, region = False, "image (fallback)"
    if _channels_equal(image):
        plane = image if image.ndim == 2 else image[..., 0]
        hist = np.bincount(plane.ravel(), minlength=max_value + 1)
        if use_exclude:
            rows, cols = np.flatnonzero(exclude.any(axis=1)), np.flatnonzero(exclude.any(axis=0))
            sl = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
            hist = hist - np.bincount(plane[sl][exclude[sl]], minlength=max_value + 1)
        mean, std, median, lo, hi, n_kept = _from_hist(hist, preset)
        per = [np.full(n_channels, v, dtype=np.float64) for v in (mean, std, median, lo, hi)]
        n_pixels = int(hist.sum())
    else:
        px = image.reshape(-1, image.shape[2])
        if use_exclude:
            px = px[~exclude.ravel()]
        *per, n_kept = _from_pixels(px, preset)
        n_pixels = len(px)
        if n_channels != image.shape[2]:
            raise ValueError(f"matched_stats: image has {image.shape[2]} distinct channels, "
                             f"{n_channels} noise channels requested")
    mean, std, median, lo, hi = per
    center = mean if preset.center == "mean" else median
    scale = np.maximum(std, preset.min_std * max_value / 255.0)
    as_t = lambda a: tuple(float(v) for v in a)  # noqa: E731
    return NoiseStats(center=as_t(center), scale=as_t(scale), mean=as_t(mean), std=as_t(std),
                      median=as_t(median), p_low=as_t(lo), p_high=as_t(hi), n_pixels=int(n_pixels),
                      n_trimmed=int(n_kept), region=region, max_value=max_value)

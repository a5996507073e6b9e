"""Matched Gaussian noise fields and blending.

A noise field is drawn once per (item, class, condition) over a *window* (the
part of the image the blending mask can reach) and blended for every strength
``p``: ``x' = (1 - a) x + a n`` with ``a = p * mask`` (the mask feathered when
the preset asks for it), so curves over ``p`` share one field.
"""
from __future__ import annotations

import hashlib

import numpy as np
from scipy import ndimage

from .presets import Preset
from .stats import NoiseStats

__all__ = ["draw_noise", "feathered_mask", "blend", "cast", "kernel_margin", "array_sha256"]

_TRUNCATE = 4.0


def kernel_margin(radius: float) -> int:
    """Half-width (pixels) of the Gaussian kernel of ``radius`` (:func:`scipy.ndimage.gaussian_filter`)."""
    return int(_TRUNCATE * float(radius) + 0.5) if radius > 0 else 0


def draw_noise(shape: tuple[int, int], stats: NoiseStats, preset: Preset, rng: np.random.Generator) -> np.ndarray:
    """A float32 noise field of ``shape`` (plus a channel axis when ``len(stats.center) > 1``).

    With ``preset.fill`` other than ``"matched"`` the field is uniform noise, the trimmed mean or zeros.

    Standard normal draws (float32) are scaled by ``stats.scale`` and shifted by
    ``stats.center``, clipped to ``[0, max_value]``; with ``rounding="truncate"``
    they are cast (floored) to integers as the reference code does; then
    smoothed with a Gaussian of ``preset.smooth_radius`` (the field is drawn
    with a margin, so the smoothing has no border effect).
    """
    n_ch = len(stats.center)
    if preset.fill != "matched":
        return _plain_fill(shape, n_ch, stats, preset, rng)
    m = kernel_margin(preset.smooth_radius)
    h, w = shape[0] + 2 * m, shape[1] + 2 * m
    z = rng.standard_normal((h, w, n_ch) if n_ch > 1 else (h, w), dtype=np.float32)
    center = np.asarray(stats.center, dtype=np.float32)
    scale = np.asarray(stats.scale, dtype=np.float32)
    if n_ch == 1:
        center, scale = center[0], scale[0]
    z *= scale
    z += center
    np.clip(z, 0, stats.max_value, out=z)
    if preset.rounding == "truncate":
        np.floor(z, out=z)
    if m:
        sigma = (preset.smooth_radius, preset.smooth_radius) + ((0.0,) if n_ch > 1 else ())
        z = ndimage.gaussian_filter(z, sigma=sigma, truncate=_TRUNCATE, mode="nearest")
        z = z[m:m + shape[0], m:m + shape[1]]
        if preset.rounding == "truncate":  # Pillow's blur returns integers
            np.rint(z, out=z)
    return np.ascontiguousarray(z)


def _plain_fill(shape, n_ch: int, stats: NoiseStats, preset: Preset, rng: np.random.Generator) -> np.ndarray:
    """The occluders of the occluder-type ablation: uniform noise over ``[0, max]``, the trimmed mean, or black."""
    full = (shape[0], shape[1], n_ch) if n_ch > 1 else (shape[0], shape[1])
    if preset.fill == "uniform":
        return rng.integers(0, stats.max_value + 1, full).astype(np.float32)
    if preset.fill == "mean":
        center = np.asarray(stats.mean, dtype=np.float32)
        return np.broadcast_to(center if n_ch > 1 else center[0], full).astype(np.float32)
    return np.zeros(full, dtype=np.float32)


def feathered_mask(mask: np.ndarray, radius: float) -> np.ndarray:
    """The blending mask as float32 in [0, 1], Gaussian-feathered when ``radius > 0``.

    The feather is exactly zero beyond :func:`kernel_margin` pixels of the mask.
    """
    alpha = mask.astype(np.float32)
    if radius > 0:
        alpha = ndimage.gaussian_filter(alpha, sigma=radius, truncate=_TRUNCATE, mode="nearest")
        np.clip(alpha, 0.0, 1.0, out=alpha)
    return alpha


def cast(values: np.ndarray, dtype: np.dtype, rounding: str) -> np.ndarray:
    """Round (or truncate) float values into ``dtype``'s range."""
    out = np.rint(values) if rounding == "round" else np.floor(values)
    np.clip(out, 0, np.iinfo(dtype).max, out=out)
    return out.astype(dtype)


def blend(image: np.ndarray, noise: np.ndarray, alpha: np.ndarray, p: float, *, rounding: str,
          image_f32: np.ndarray | None = None) -> np.ndarray:
    """``(1 - a) x + a n`` with ``a = p * alpha``, cast back to ``image.dtype``.

    Exact at the ends: where ``a == 0`` the input is returned, where ``a == 1``
    the (cast) noise. ``image_f32`` (``image`` as float32) may be passed to
    save a conversion when blending one window for several p.
    """
    a = alpha * np.float32(p)
    if image.ndim == 3:
        a = a[..., None]
    x = image.astype(np.float32) if image_f32 is None else image_f32
    out = np.multiply(x, np.float32(1) - a)
    out += noise * a
    if rounding == "round":
        np.rint(out, out=out)
    else:
        np.floor(out, out=out)
    np.clip(out, 0, np.iinfo(image.dtype).max, out=out)
    return out.astype(image.dtype)


def array_sha256(array: np.ndarray) -> str:
    """SHA-256 of an array's bytes (C order)."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()

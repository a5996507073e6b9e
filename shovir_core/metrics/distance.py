"""Image distances of ModaLens Appendix B: centred cosine distance of embeddings, quartile bins.

The embedding distance of a pair is the cosine distance between the two images' vision-tower
embeddings (mean-pooled) after subtracting the cohort mean (ModaLens App. B: "cosine distance
between MedGemma's vision-tower (SigLIP, mean-pooled) embeddings, cohort-mean-centred"). Without
centring, embeddings share a large common component and every pair looks close.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["cohort_mean", "centred_cosine_distance", "quartile_bins"]


def _matrix(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (n, dim) array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def cohort_mean(embeddings) -> np.ndarray:
    """Mean embedding of a cohort: one row per distinct image (shape (n, dim) -> (dim,))."""
    return _matrix(embeddings, "embeddings").mean(axis=0)


def centred_cosine_distance(emb_c, emb_d, *, mean=None) -> np.ndarray:
    """1 − cos(e_c − μ, e_d − μ) per pair, in [0, 2].

    Parameters
    ----------
    emb_c, emb_d : (n, dim) array-like
        Embeddings of the source and substitute image of each pair.
    mean : (dim,) array-like, optional
        The cohort mean μ (:func:`cohort_mean` over the cohort's distinct images); ``None`` uses
        no centring (μ = 0).

    >>> centred_cosine_distance([[1.0, 0.0]], [[0.0, 2.0]]).round(6).tolist()
    [1.0]
    >>> centred_cosine_distance([[2.0, 1.0]], [[1.0, 2.0]], mean=[1.0, 1.0]).round(6).tolist()
    [1.0]
    """
    a, b = _matrix(emb_c, "emb_c"), _matrix(emb_d, "emb_d")
    if a.shape != b.shape:
        raise ValueError(f"emb_c and emb_d differ in shape: {a.shape} vs {b.shape}")
    if mean is not None:
        mu = np.asarray(mean, dtype=float).ravel()
        if mu.shape != (a.shape[1],):
            raise ValueError(f"mean has shape {mu.shape}, expected ({a.shape[1]},)")
        a, b = a - mu, b - mu
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    zero = (na == 0) | (nb == 0)
    if zero.any():
        raise ValueError(f"{int(zero.sum())} pair(s) have a zero (centred) embedding; cosine distance is undefined")
    cos = np.einsum("ij,ij->i", a, b) / (na * nb)
    return 1.0 - np.clip(cos, -1.0, 1.0)


def quartile_bins(x) -> np.ndarray:
    """Quartile (1-4) of each value; ties are split by order of appearance so the bins stay equal-sized.

    >>> quartile_bins([0.4, 0.1, 0.3, 0.2]).tolist()
    [4, 1, 3, 2]
    """
    s = pd.Series(np.asarray(x, dtype=float))
    if s.isna().any():
        raise ValueError("quartile_bins: values contain NaN")
    if len(s) < 4:
        raise ValueError(f"quartile_bins needs at least 4 values, got {len(s)}")
    return pd.qcut(s.rank(method="first"), 4, labels=[1, 2, 3, 4]).astype(int).to_numpy()

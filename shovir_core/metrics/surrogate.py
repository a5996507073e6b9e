"""The classifier surrogate of ModaLens Appendix K: preprocessing, operating-point normalisation, calls.

The paper labels each shown image with TorchXRayVision 1.5.4 ``densenet121-res224-chex`` (App. K):

* preprocessing: 8-bit greyscale -> linear to [-1024, 1024] -> centre-crop to a square -> 224 x 224
  with anti-aliasing (:func:`xrv_preprocess`; the package's ``datasets.normalize``,
  ``XRayCenterCrop`` and ``XRayResizer`` in that order);
* operating-point normalisation: each head's sigmoid output ``p`` is mapped piecewise linearly so
  that its operating point ``op`` lands on 0.5 (:func:`op_norm`; the package's ``models.op_norm``):
  ``p / (2 op)`` below ``op``, ``1 − (1 − p) / (2 (1 − op))`` above;
* 11 heads map to findings (``Effusion`` -> pleural effusion); the composite question takes the max
  of the 11; pleural other and support devices have no head (their trials lie outside the
  surrogate's denominator);
* the primary rule calls a finding present iff the normalised score is ≥ 0.5 and excludes a trial
  when either image lies within ±0.1 of 0.5; the raw-probability rule uses the sigmoid output with
  the same threshold and band.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..vocab import COMPOSITE

__all__ = [
    "XRV_PATHOLOGIES", "XRV_OP_THRESHS", "HEAD_TO_FINDING", "SURROGATE_FINDINGS", "xrv_normalize", "center_crop", "resize",
    "xrv_preprocess", "op_norm", "finding_scores", "surrogate_call",
]

XRV_PATHOLOGIES: tuple[str, ...] = (
    "Atelectasis", "Consolidation", "", "Pneumothorax", "Edema", "", "", "Effusion", "Pneumonia", "",
    "Cardiomegaly", "", "", "", "Lung Lesion", "Fracture", "Lung Opacity", "Enlarged Cardiomediastinum",
)
"""The 18 output slots of TorchXRayVision's DenseNet (``xrv.datasets.default_pathologies`` order);
the CheXpert-trained ``densenet121-res224-chex`` leaves the slots it was not trained on blank
(torchxrayvision 1.5.4 ``models.py``, ``model_urls['chex']['labels']``)."""

XRV_OP_THRESHS: tuple[float, ...] = (
    0.1988969, 0.05710573, np.nan, 0.0531293, 0.1435217, np.nan, np.nan, 0.27212676, 0.07749717, np.nan,
    0.19712369, np.nan, np.nan, np.nan, 0.09932402, 0.09273402, 0.3270967, 0.10888247,
)
"""Operating points of ``densenet121-res224-chex`` per slot (torchxrayvision 1.5.4 ``models.py``,
``model_urls['chex']['op_threshs']``): 0.053 for pneumothorax to 0.327 for lung opacity (App. K)."""

HEAD_TO_FINDING: dict[str, str] = {
    "Atelectasis": "Atelectasis", "Consolidation": "Consolidation", "Pneumothorax": "Pneumothorax",
    "Edema": "Edema", "Effusion": "Pleural Effusion", "Pneumonia": "Pneumonia", "Cardiomegaly": "Cardiomegaly",
    "Lung Lesion": "Lung Lesion", "Fracture": "Fracture", "Lung Opacity": "Lung Opacity",
    "Enlarged Cardiomediastinum": "Enlarged Cardiomediastinum",
}
"""The 11 heads and the CheXpert finding each answers (App. K)."""

SURROGATE_FINDINGS: tuple[str, ...] = tuple(HEAD_TO_FINDING.values()) + (COMPOSITE,)
"""The 12 questions the surrogate labels (11 findings + the composite)."""


def xrv_normalize(image: np.ndarray, *, maxval: float = 255.0) -> np.ndarray:
    """8-bit greyscale -> [-1024, 1024]: ``(2 x / maxval − 1) · 1024`` (float32).

    >>> xrv_normalize(np.array([0, 255], dtype=np.uint8)).tolist()
    [-1024.0, 1024.0]
    """
    x = np.asarray(image, dtype=np.float32)
    if x.ndim == 3:  # RGB -> grey as the package does (mean over channels)
        x = x.mean(axis=2)
    return ((2.0 * (x / maxval) - 1.0) * 1024.0).astype(np.float32)


def center_crop(image: np.ndarray) -> np.ndarray:
    """The centred square of side min(height, width), offsets as ``XRayCenterCrop`` computes them
    (``x // 2 − side // 2``; torchxrayvision 1.5.4 ``datasets.py``)."""
    h, w = image.shape[-2:]
    side = min(h, w)
    top, left = h // 2 - side // 2, w // 2 - side // 2
    return image[..., top:top + side, left:left + side]


def resize(image: np.ndarray, size: int = 224) -> np.ndarray:
    """``size`` x ``size`` as ``XRayResizer`` does it: scikit-image ``resize`` of the (1, H, W) array,
    ``mode="constant"``, range preserved, scikit-image's default anti-aliasing (on when downsampling)."""
    from skimage.transform import resize as _resize

    return _resize(image[None], (1, size, size), mode="constant", preserve_range=True).astype(np.float32)[0]


def xrv_preprocess(image: np.ndarray, *, size: int = 224) -> np.ndarray:
    """The paper's preprocessing of one 8-bit image: normalise, centre-crop, resize -> (1, size, size)."""
    return resize(center_crop(xrv_normalize(image)), size)[None]


def op_norm(probs, op_threshs) -> np.ndarray:
    """Operating-point normalisation: piecewise linear, ``op`` -> 0.5, 0 -> 0, 1 -> 1.

    A slot without an operating point (NaN) reads 0.5, as in torchxrayvision 1.5.4 ``models.op_norm``.

    >>> op_norm(np.array([[0.05, 0.1, 0.55]]), np.array([0.1, 0.1, 0.1])).round(4).tolist()
    [[0.25, 0.5, 0.75]]
    """
    p = np.asarray(probs, dtype=float)
    op = np.broadcast_to(np.asarray(op_threshs, dtype=float), p.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = p / (op * 2.0)
        high = 1.0 - (1.0 - p) / ((1.0 - op) * 2.0)
    out = np.where(p < op, low, high)
    return np.where(np.isnan(op), 0.5, out)


def finding_scores(scores: np.ndarray, heads=XRV_PATHOLOGIES, *,
                   mapping: Mapping[str, str] = HEAD_TO_FINDING) -> dict[str, np.ndarray]:
    """Per question, the score of each image: the mapped heads and the composite (max of the heads).

    ``scores`` has shape (n_images, len(heads)).
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2 or s.shape[1] != len(heads):
        raise ValueError(f"scores must have shape (n_images, {len(heads)}), got {s.shape}")
    out = {}
    for j, head in enumerate(heads):
        if head in mapping:
            out[mapping[head]] = s[:, j]
    missing = sorted(set(mapping.values()) - set(out))
    if missing:
        raise ValueError(f"the classifier has no head for {missing}")
    out[COMPOSITE] = np.max(np.stack([out[f] for f in mapping.values()], axis=1), axis=1)
    return out


def surrogate_call(score, *, threshold: float = 0.5, band: float = 0.1) -> np.ndarray:
    """1 present (score ≥ threshold), 0 absent, NaN within ``band`` of the threshold (excluded).

    >>> surrogate_call(np.array([0.2, 0.45, 0.55, 0.61])).tolist()
    [0.0, nan, nan, 1.0]
    """
    s = np.asarray(score, dtype=float)
    call = (s >= threshold).astype(float)
    return np.where(np.abs(s - threshold) < band, np.nan, call)

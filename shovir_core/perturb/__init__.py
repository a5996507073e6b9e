"""Perturbations: ShoViR's matched noise and occlusions, ModaLens' image-swap pairing.

ShoViR (occlusion):

* :func:`full_noise` - the Full Noise Image;
* :func:`occlude` / :func:`occlude_grid` - RO, OCO and DOCO at blending strength p
  (a grid draws the noise once and blends it for every p);
* :func:`box_sets` - ``B_c`` and ``B_c̄`` with the IoU rule;
* presets ``"paper"`` (default) and ``"reference-code"`` (:mod:`.presets`).

ModaLens (image swap): :func:`sample_substitutes` and :func:`cohort_from_dataset`.

Randomness is derived from ``(seed, item id, target class, condition)``
(:mod:`.rng`), so outputs are byte-identical across runs, processes and item orders.
"""
from .boxes import REFERENCE_SIZE_STATS, Box, BoxError, BoxSets, box_sets, box_size_pool, iou, validate_boxes
from .conditions import (
    CONDITIONS, DEFAULT_PS, OCCLUSIONS, EmptyBoxSetError, full_noise, occlude, occlude_grid, prepare_image,
)
from .presets import PRESETS, Preset, resolve_preset
from .stats import NoiseStats, matched_stats
from .swap import TIERS, cohort_from_dataset, pair_ssim, sample_substitutes
from .validation import PerturbInputError, UnknownTargetError, class_key, resolve_target

__all__ = [
    "occlude", "occlude_grid", "full_noise", "prepare_image", "box_sets", "box_size_pool", "iou", "validate_boxes",
    "Box", "BoxSets", "BoxError", "EmptyBoxSetError", "REFERENCE_SIZE_STATS",
    "CONDITIONS", "OCCLUSIONS", "DEFAULT_PS", "Preset", "PRESETS", "resolve_preset",
    "NoiseStats", "matched_stats", "sample_substitutes", "cohort_from_dataset", "pair_ssim", "TIERS",
    "PerturbInputError", "UnknownTargetError", "class_key", "resolve_target",
]

"""ShoViR conditions: Full Noise Image, RO, OCO and DOCO at blending strength p.

Every function returns the perturbed image and a description (``info``) of how
it was made: condition, class, p, seed, the random stream's key, the preset and
all its options, the boxes used (and, for DOCO, those the IoU rule dropped), the
noise statistics and the SHA-256 of the output's bytes.

The random stream of an output depends on ``(seed, item_id, target,
condition)`` only (:mod:`shovir_core.perturb.rng`); ``p`` is not part of it, so
:func:`occlude` at any p and :func:`occlude_grid` over a grid of p blend the
same noise field.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .boxes import Box, box_sets, random_boxes, union_mask, validate_boxes
from .noise import array_sha256, blend, cast, draw_noise, feathered_mask, kernel_margin
from .reference import blur_reach as reference_reach
from .reference import feather_alpha
from .presets import Preset, resolve_preset
from .rng import item_rng, stream_key
from ..vocab import P_GRID, SHOVIR_CONDITIONS
from .stats import SUPPORTED_DTYPES, matched_stats
from .validation import (PerturbInputError, check_int, check_item_id, check_p_grid, check_real,
                         resolve_target)
from ..errors import ShovirError

__all__ = [
    "CONDITIONS", "OCCLUSIONS", "DEFAULT_PS", "EmptyBoxSetError", "occlude", "occlude_grid",
    "full_noise", "uniform_noise", "prepare_image",
]

OCCLUSIONS = SHOVIR_CONDITIONS[2:]
"""The box occlusions RO, OCO, DOCO."""
CONDITIONS = SHOVIR_CONDITIONS[1:]
"""The perturbations: Full Noise Image and the box occlusions (Baseline is the unperturbed image)."""
DEFAULT_PS = P_GRID
"""The paper's grid of blending strengths."""


class EmptyBoxSetError(ShovirError, ValueError):
    """The condition has no box to occlude for this item (OCO without B_c, DOCO without B_c̄)."""


def _validated(image, item_id) -> np.ndarray:
    where = f"item {item_id!r}"
    if not isinstance(image, np.ndarray):
        raise TypeError(f"{where}: image must be a numpy array, got {type(image).__name__}")
    if image.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{where}: image dtype {image.dtype} not supported (uint8 or uint16)")
    if not (image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 3)):
        raise ValueError(f"{where}: image shape {image.shape} is neither (H, W) nor (H, W, 3)")
    if min(image.shape[:2]) < 1:
        raise ValueError(f"{where}: empty image of shape {image.shape}")
    return image


def _scaled(image: np.ndarray, preset: Preset) -> np.ndarray:
    if preset.input_scaling == "none":
        return image
    x = image.astype(np.float32)
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        return np.zeros(image.shape, dtype=np.uint8)
    x = (x - np.float32(lo)) / np.float32(hi - lo)  # the reference's order of operations
    x *= np.float32(255)
    return x.astype(np.uint8)


def _layout(image: np.ndarray, preset: Preset) -> np.ndarray:
    if preset.channels == "rgb" and image.ndim == 2:
        return np.repeat(image[..., None], 3, axis=2)
    return image


def prepare_image(image, preset: str | Preset | dict = "paper", *, item_id=None) -> np.ndarray:
    """The preset's baseline of ``image`` (what p = 0 returns).

    Validates the input (uint8 or uint16, ``(H, W)`` or ``(H, W, 3)``), applies
    the preset's ``input_scaling`` (``"minmax-uint8"``: the reference code's 8-bit
    conversion) and channel layout (``"rgb"``: a grayscale image is replicated
    into three identical channels, as PIL's ``convert("RGB")``). With the paper
    preset this is the input itself.
    """
    preset = resolve_preset(preset)
    return _layout(_scaled(_validated(image, item_id), preset), preset)


def _check_p(p, item_id) -> float:
    return check_real(p, "p", lo=0.0, hi=1.0, item_id=item_id)


def _box_records(boxes: Sequence[Box], label: str) -> list[dict]:
    return [{"finding": b.finding, "x1": b.x1, "y1": b.y1, "x2": b.x2, "y2": b.y2, "set": label} for b in boxes]


def _noise_channels(source: np.ndarray, preset: Preset) -> int:
    return 3 if (preset.channels == "rgb" or source.ndim == 3) else 1


def _select_boxes(shape, checked, *, condition, target, preset, iou_threshold, size_pool, placement_rng,
                  max_retries, item_id, iou_filter: bool = True) -> tuple[list[Box], dict]:
    sets = box_sets(checked, target, iou_threshold=iou_threshold, inclusive=preset.iou_inclusive,
                    iou_filter=iou_filter, item_id=item_id)
    extra: dict = {"n_target_boxes": len(sets.target), "n_other_boxes": len(sets.others),
                   "iou_threshold": float(iou_threshold), "iou_inclusive": bool(preset.iou_inclusive),
                   "iou_filter": bool(iou_filter)}
    if condition == "OCO":
        if not sets.target:
            raise EmptyBoxSetError(f"item {item_id!r}: OCO has no box of target class {target!r}")
        return list(sets.target), {**extra, "boxes": _box_records(sets.target, "B_c")}
    if condition == "DOCO":
        extra["dropped_by_iou"] = [{**_box_records([b], "B_cbar")[0], "max_iou": m} for b, m in sets.dropped]
        if not sets.others:
            rule = "<=" if preset.iou_inclusive else "<"
            raise EmptyBoxSetError(
                f"item {item_id!r}: DOCO has no co-finding box with IoU {rule} {iou_threshold} against "
                f"the {target!r} boxes (item dropped from DOCO)")
        return list(sets.others), {**extra, "boxes": _box_records(sets.others, "B_cbar")}
    # RO: k ~ U{1..|B_c ∪ B_c̄|}, placed away from every annotated box (ro_avoid="all") or B_c ∪ B_c̄ ("sets")
    k = int(placement_rng.integers(1, max(len(sets.annotated), 1) + 1))
    avoid = checked if preset.ro_avoid == "all" else list(sets.annotated)
    placed = random_boxes(shape, avoid, k=k, rng=placement_rng, size_pool=size_pool,
                          sizes=preset.ro_sizes, max_retries=max_retries, rounding=preset.rounding,
                          footprint_mode=preset.footprint)
    return placed, {**extra, "k_requested": k, "n_placed": len(placed), "max_retries": int(max_retries),
                    "size_source": preset.ro_sizes, "boxes": _box_records(placed, "random")}


def occlude_grid(image: np.ndarray, boxes: Sequence, *, condition: str, target: str,
                 ps: Sequence[float] = DEFAULT_PS, seed: int, item_id, preset: str | Preset | dict = "paper",
                 size_pool: np.ndarray | None = None, iou_threshold: float = 0.15,
                 max_retries: int = 100, iou_filter: bool = True,
                 rng: np.random.Generator | np.random.RandomState | None = None) -> list[tuple[np.ndarray, dict]]:
    """Occlude one item under one condition for every strength in ``ps``.

    The boxes, the statistics and the noise field are computed once and
    blended for each p (a grid costs one noise draw plus one blend per p).

    Parameters
    ----------
    image : ndarray, uint8 or uint16, (H, W) or (H, W, 3)
    boxes : sequence of (finding, x1, y1, x2, y2)
        Every annotated box of the image, in pixels.
    condition : {"RO", "OCO", "DOCO"}
    target : str
        The target class c: one of the classes of ``boxes``, spelled exactly as they spell it (a wrong
        case is refused: :func:`~shovir_core.perturb.validation.resolve_target`).
    ps : sequence of float
        Blending strengths in [0, 1]; p = 0 returns the input unchanged (the
        preset's baseline, :func:`prepare_image`: the input itself with the
        paper preset).
    seed : int
        Non-negative.
    item_id : str or int
        Required: the item's stable id (e.g. the image id); part of the random stream.
    preset : str, Preset or dict
        ``"paper"`` (default), ``"reference-code"``, or options (see
        :func:`~shovir_core.perturb.presets.resolve_preset`).
    size_pool : ndarray (n, 2), optional
        RO box sizes as (width, height) fractions of the image, usually
        :func:`~shovir_core.perturb.boxes.box_size_pool` of the dataset. Needed
        when the preset draws RO sizes from the dataset (``ro_sizes="dataset"``).
    iou_threshold : float
        The DOCO IoU rule's threshold.
    max_retries : int
        RO placement attempts per box before it is skipped.
    iou_filter : bool
        ``False`` keeps every co-finding box for DOCO (and RO's avoided set), as the reference code
        does on PadChest-GR.
    rng : numpy.random.Generator or numpy.random.RandomState, optional
        A random stream to draw from instead of the item's own stream (``seed`` is then only
        recorded). With the ``"reference-code"`` engine a ``RandomState`` is consumed exactly as
        the reference function consumes ``np.random`` for one p; a grid consumes it once per p,
        in the order of ``ps`` (p = 0 draws nothing), like successive calls. The vectorised engine
        takes a ``Generator`` only.

    Returns
    -------
    list of (ndarray, dict)
        One (image, info) per p, in the order of ``ps``.

    Raises
    ------
    EmptyBoxSetError
        OCO without a target box, DOCO without a surviving co-finding box.
    UnknownTargetError
        ``target`` is not a class of the image's boxes.
    BoxError, PerturbInputError, TypeError
        Malformed inputs, naming the item and the value (:mod:`shovir_core.perturb.validation`).
    """
    item_id = check_item_id(item_id)
    preset = resolve_preset(preset)
    if not isinstance(condition, str) or condition not in OCCLUSIONS:
        raise PerturbInputError(f"item {item_id!r}: condition must be one of {OCCLUSIONS}, got {condition!r}")
    ps = check_p_grid(ps, "ps", item_id=item_id)
    seed = check_int(seed, "seed", lo=0, item_id=item_id)
    iou_threshold = check_real(iou_threshold, "iou_threshold", lo=0.0, hi=1.0, item_id=item_id)
    max_retries = check_int(max_retries, "max_retries", lo=1, item_id=item_id)
    source = _scaled(_validated(image, item_id), preset)
    work = _layout(source, preset)
    checked = validate_boxes(boxes, shape=work.shape, item_id=item_id)
    target = resolve_target(target, [b.finding for b in checked], item_id=item_id, condition=condition)
    effective = preset.for_random_occlusion() if condition == "RO" else preset
    if condition == "RO" and preset.ro_sizes == "dataset" and size_pool is None:
        raise ValueError(f"item {item_id!r}: RO with ro_sizes='dataset' needs size_pool (the dataset's "
                         "box-size distribution, see box_size_pool); or use ro_sizes='reference'")
    if preset.engine == "reference-code":
        return _reference_grid(work, checked, condition=condition, target=target, ps=ps, seed=seed,
                               item_id=item_id, preset=preset, effective=effective, iou_threshold=iou_threshold,
                               iou_filter=iou_filter, max_retries=max_retries, rng=rng)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"item {item_id!r}: the vectorised engine draws from a numpy.random.Generator; a "
                        f"{type(rng).__name__} replays the reference code: use preset 'reference-code'")
    placement_rng, noise_rng = item_rng(seed, item_id, target, condition, n=2) if rng is None else (rng, rng)
    used, extra = _select_boxes(work.shape, checked, condition=condition, target=target, preset=preset,
                                iou_threshold=iou_threshold, size_pool=size_pool,
                                placement_rng=placement_rng, max_retries=max_retries, item_id=item_id,
                                iou_filter=iou_filter)
    h, w = work.shape[:2]
    mask = union_mask(used, work.shape, preset.footprint)
    stats = matched_stats(source, preset=effective, exclude=mask, n_channels=_noise_channels(source, preset))
    base_info = {
        "item_id": item_id, "condition": condition, "target": target, "seed": int(seed),
        "stream": stream_key(seed, item_id, target, condition) if rng is None else "caller", "preset": preset.name,
        "options": effective.to_dict(), **extra, "noise": stats.to_dict(),
        "shape": list(work.shape), "dtype": str(work.dtype),
    }
    outputs = []
    pillow = effective.feather_kernel == "pillow" and effective.feather_radius > 0
    if used and max(ps) > 0:
        m = kernel_margin(effective.feather_radius) if not pillow else reference_reach(effective.feather_radius)
        rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
        r0, r1 = max(0, rows[0] - m), min(h, rows[-1] + 1 + m)
        c0, c1 = max(0, cols[0] - m), min(w, cols[-1] + 1 + m)
        alpha = feathered_mask(mask[r0:r1, c0:c1], effective.feather_radius)
        noise = draw_noise((r1 - r0, c1 - c0), stats, effective, noise_rng)
        base_info["window"] = [int(r0), int(r1), int(c0), int(c1)]
        window_f32 = work[r0:r1, c0:c1].astype(np.float32)
    for p in ps:
        if p == 0 or not used:
            out = work.copy()
        else:
            out = work.copy()
            if pillow:  # the authors' weight at this p: uint8(mask p 255), Pillow-blurred, / 255
                out[r0:r1, c0:c1] = blend(work[r0:r1, c0:c1], noise, feather_alpha(mask[r0:r1, c0:c1], p,
                                          effective.feather_radius), 1.0, rounding=effective.rounding,
                                          image_f32=window_f32)
            else:
                out[r0:r1, c0:c1] = blend(work[r0:r1, c0:c1], noise, alpha, p, rounding=effective.rounding,
                                          image_f32=window_f32)
        outputs.append((out, {**base_info, "p": p, "sha256": array_sha256(out)}))
    return outputs


def occlude(image: np.ndarray, boxes: Sequence, *, condition: str, target: str, p: float, seed: int, item_id,
            preset: str | Preset | dict = "paper", size_pool: np.ndarray | None = None,
            iou_threshold: float = 0.15, max_retries: int = 100, iou_filter: bool = True,
            rng: np.random.Generator | np.random.RandomState | None = None) -> tuple[np.ndarray, dict]:
    """Occlude one item under ``condition`` ("RO", "OCO", "DOCO") at strength ``p``.

    Same parameters as :func:`occlude_grid` with a single ``p``; the output is
    byte-identical to that p's entry of a grid.

    Examples
    --------
    >>> img = np.full((32, 32), 100, dtype=np.uint8)
    >>> out, info = occlude(img, [("Atelectasis", 4, 4, 12, 12)], condition="OCO",
    ...                     target="Atelectasis", p=0.0, seed=0, item_id="x")
    >>> bool((out == img).all()), info["condition"], info["boxes"][0]["set"]
    (True, 'OCO', 'B_c')
    """
    p = check_real(p, "p", lo=0.0, hi=1.0, item_id=item_id)
    return occlude_grid(image, boxes, condition=condition, target=target, ps=(p,), seed=seed, item_id=item_id,
                        preset=preset, size_pool=size_pool, iou_threshold=iou_threshold,
                        max_retries=max_retries, iou_filter=iou_filter, rng=rng)[0]


def full_noise(image: np.ndarray, *, seed: int, item_id, preset: str | Preset | dict = "paper",
               rng: np.random.Generator | np.random.RandomState | None = None) -> tuple[np.ndarray, dict]:
    """The Full Noise Image: the whole image replaced by matched noise (or the preset's ``fill``).

    ``rng`` as in :func:`occlude_grid` (the reference-code engine consumes a ``RandomState`` as
    ``all_noise_mean`` consumes ``np.random``).

    Examples
    --------
    >>> img = (np.arange(64 * 64) % 200).astype(np.uint8).reshape(64, 64)
    >>> a, info = full_noise(img, seed=3, item_id="x")
    >>> b, _ = full_noise(img, seed=3, item_id="x")
    >>> a.dtype.name, bool((a == b).all()), info["condition"]
    ('uint8', True, 'FullNoise')
    """
    item_id = check_item_id(item_id)
    seed = check_int(seed, "seed", lo=0, item_id=item_id)
    preset = resolve_preset(preset)
    source = _scaled(_validated(image, item_id), preset)
    work = _layout(source, preset)
    info = {"item_id": item_id, "condition": "FullNoise", "target": None, "p": 1.0, "seed": int(seed),
            "stream": stream_key(seed, item_id, None, "FullNoise") if rng is None else "caller",
            "preset": preset.name, "options": preset.to_dict(), "boxes": [], "shape": list(work.shape),
            "dtype": str(work.dtype)}
    if preset.engine == "reference-code":
        from . import reference

        (stream,) = item_rng(seed, item_id, None, "FullNoise", n=1) if rng is None else (rng,)
        out, stats = reference.all_noise_mean(work, stream)
        return out, {**info, "engine": "reference-code", "noise": stats, "sha256": array_sha256(out)}
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"item {item_id!r}: the vectorised engine draws from a numpy.random.Generator; a "
                        f"{type(rng).__name__} replays the reference code: use preset 'reference-code'")
    stats = matched_stats(source, preset=preset, n_channels=_noise_channels(source, preset))
    (noise_rng,) = item_rng(seed, item_id, None, "FullNoise", n=1) if rng is None else (rng,)
    noise = draw_noise(work.shape[:2], stats, preset, noise_rng)
    out = cast(noise, work.dtype, preset.rounding)
    return out, {**info, "noise": stats.to_dict(), "sha256": array_sha256(out)}


def uniform_noise(image: np.ndarray, *, seed: int, item_id,
                  rng: np.random.Generator | np.random.RandomState | None = None) -> tuple[np.ndarray, dict]:
    """Uniform ``U{0..255}`` RGB noise of the image's size (the reference code's ``all_noise``).

    The input's pixels are not used, only its height and width; the output is uint8 ``(H, W, 3)``.
    """
    from . import reference

    image = _validated(image, item_id)
    (stream,) = item_rng(seed, item_id, None, "UniformNoise", n=1) if rng is None else (rng,)
    out = reference.all_noise(image.shape[:2], stream)
    return out, {"item_id": item_id, "condition": "UniformNoise", "target": None, "p": 1.0, "seed": int(seed),
                 "stream": stream_key(seed, item_id, None, "UniformNoise") if rng is None else "caller",
                 "preset": "reference-code", "boxes": [], "shape": list(out.shape), "dtype": "uint8",
                 "sha256": array_sha256(out)}


def _pixel_box(b: Box) -> tuple[float, float, float, float]:
    return float(b.x1), float(b.y1), float(b.x2), float(b.y2)


def _reference_boxes(sets, condition: str, shape) -> list[tuple[float, float, float, float]]:
    """Pixel boxes the reference-code engine uses for ``condition``: OCO ``B_c``, DOCO ``B_c̄``, RO (avoided)
    ``B_c ∪ B_c̄``, without those whose truncated footprint is empty (the reference code drops them)."""
    from . import reference

    used = {"OCO": sets.target, "DOCO": sets.others, "RO": sets.annotated}.get(condition, ())
    h, w = shape[:2]
    return [_pixel_box(b) for b in used if reference.clip_box(_pixel_box(b), w, h) is not None]


def _reference_grid(work, checked, *, condition, target, ps, seed, item_id, preset, effective, iou_threshold,
                    iou_filter, max_retries, rng) -> list[tuple[np.ndarray, dict]]:
    """The reference-code engine's RO / OCO / DOCO over a grid of p (see :mod:`.reference`)."""
    from . import reference

    sets = box_sets(checked, target, iou_threshold=iou_threshold, inclusive=preset.iou_inclusive,
                    iou_filter=iou_filter, item_id=item_id)
    h, w = work.shape[:2]
    extra: dict = {"n_target_boxes": len(sets.target), "n_other_boxes": len(sets.others),
                   "iou_threshold": float(iou_threshold), "iou_inclusive": bool(preset.iou_inclusive),
                   "iou_filter": bool(iou_filter), "engine": "reference-code"}
    if condition == "OCO":
        used, label = list(sets.target), "B_c"
    elif condition == "DOCO":
        extra["dropped_by_iou"] = [{**_box_records([b], "B_cbar")[0], "max_iou": m} for b, m in sets.dropped]
        used, label = list(sets.others), "B_cbar"
    else:
        used, label = list(sets.annotated), "avoided"
    clipped = [b for b in used if reference.clip_box(_pixel_box(b), w, h) is not None]
    if condition == "OCO" and not clipped:
        raise EmptyBoxSetError(f"item {item_id!r}: OCO has no box of target class {target!r}")
    if condition == "DOCO" and not clipped:
        rule = "<=" if preset.iou_inclusive else "<"
        raise EmptyBoxSetError(
            f"item {item_id!r}: DOCO has no co-finding box{f' with IoU {rule} {iou_threshold}' if iou_filter else ''} "
            f"against the {target!r} boxes (item dropped from DOCO)")
    base = {"item_id": item_id, "condition": condition, "target": target, "seed": int(seed),
            "stream": stream_key(seed, item_id, target, condition) if rng is None else "caller",
            "preset": preset.name, "options": {**effective.to_dict(), "engine": "reference-code"}, **extra,
            "shape": list(work.shape), "dtype": str(work.dtype)}
    if condition == "RO":
        base.update(size_source="reference", max_retries=int(max_retries))
    outputs = []
    plan = None
    pixel_boxes = [_pixel_box(b) for b in clipped]
    for p in ps:
        if rng is None and p > 0:  # a fresh item stream for every p: the draws are the same at every p, made once
            if plan is None:
                (stream,) = item_rng(seed, item_id, target, condition, n=1)
                plan = (reference.random_occlusion_plan(work, pixel_boxes, stream, max_retries=max_retries)
                        if condition == "RO" else reference.occlusion_plan(work, pixel_boxes, stream))
            if condition == "RO":
                out, ro = reference.random_occlusion_apply(work, plan, p)
                boxes = [{"finding": "random", "x1": x1, "y1": y1, "x2": x2, "y2": y2, "set": "random"}
                         for x1, y1, x2, y2 in ro["placed"]]
                info = {**base, "k_requested": ro["k_requested"], "n_placed": len(ro["placed"]), "boxes": boxes,
                        "noise": ro.get("noise")}
            else:
                out = reference.blend_plan(work, plan, p)
                info = {**base, "boxes": _box_records(clipped, label), "noise": plan["stats"]}
            outputs.append((out, {**info, "p": p, "sha256": array_sha256(out)}))
            continue
        (stream,) = item_rng(seed, item_id, target, condition, n=1) if rng is None else (rng,)
        if condition == "RO":
            out, ro = reference.random_occlusion(work, [_pixel_box(b) for b in clipped], p, stream,
                                                 max_retries=max_retries)
            boxes = [{"finding": "random", "x1": x1, "y1": y1, "x2": x2, "y2": y2, "set": "random"}
                     for x1, y1, x2, y2 in ro["placed"]]
            info = {**base, "k_requested": ro["k_requested"], "n_placed": len(ro["placed"]), "boxes": boxes,
                    "noise": ro.get("noise")}
        else:
            out, _, stats = reference.object_class_occlusion(work, [_pixel_box(b) for b in clipped], p, stream)
            info = {**base, "boxes": _box_records(clipped, label), "noise": stats}
        out = out.copy() if out is work else out
        outputs.append((out, {**info, "p": p, "sha256": array_sha256(out)}))
    return outputs

"""Export the perturbed image set of a dataset (PNG files + a CSV manifest).

For models the project does not wrap: every (image, class with a box) gets RO,
OCO and DOCO at each p, and every image one Full Noise Image. Files go to
``<out>/<preset>/<condition>/<class>/p<pp>/<image_id>.png`` (Full Noise:
``<out>/<preset>/FullNoise/<image_id>.png``); ``<out>/manifest.csv`` holds one
row per output (or per DOCO drop) with the description of how it was made.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import pandas as pd
from PIL import Image
from tqdm import tqdm

from .boxes import box_size_pool
from .conditions import CONDITIONS, DEFAULT_PS, EmptyBoxSetError, full_noise, occlude_grid
from .presets import resolve_preset

__all__ = ["export_perturbed", "MANIFEST_COLUMNS"]

MANIFEST_COLUMNS = (
    "image_id", "patient_id", "condition", "target", "p", "preset", "seed", "status", "file", "sha256",
    "png_sha256", "n_boxes", "boxes", "noise_center", "noise_scale", "info",
)


def _save(array, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, format="PNG")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _row(ds_row, info: dict, *, out_dir: Path, file: Path | None, status: str, png_sha: str | None) -> dict:
    noise = info.get("noise") or {}
    return {
        "image_id": ds_row.image_id, "patient_id": ds_row.patient_id, "condition": info["condition"],
        "target": info.get("target"), "p": info.get("p"), "preset": info.get("preset"), "seed": info.get("seed"),
        "status": status, "file": None if file is None else file.relative_to(out_dir).as_posix(),
        "sha256": info.get("sha256"), "png_sha256": png_sha, "n_boxes": len(info.get("boxes", [])),
        "boxes": json.dumps(info.get("boxes", [])), "noise_center": json.dumps(noise.get("center")),
        "noise_scale": json.dumps(noise.get("scale")), "info": json.dumps(info, default=str),
    }


def export_perturbed(dataset, out_dir: str | Path, *, conditions: Sequence[str] = CONDITIONS,
                     ps: Sequence[float] = DEFAULT_PS, seed: int = 0, preset="paper",
                     classes: Sequence[str] | None = None, iou_threshold: float = 0.15,
                     limit: int | None = None, progress: bool = True, force: bool = False) -> pd.DataFrame:
    """Write the perturbed images of ``dataset`` and return the manifest (also ``<out>/manifest.csv``).

    Parameters
    ----------
    dataset : shovir_core.data.Dataset
    out_dir : path
    conditions : sequence of {"FullNoise", "RO", "OCO", "DOCO"}
    ps : sequence of float
        Strengths for RO / OCO / DOCO.
    seed : int
    preset : str, Preset or dict
    classes : sequence of str, optional
        Target classes (default: every class with a box).
    iou_threshold : float
    limit : int, optional
        Only the first ``limit`` images (sorted by image id).
    force : bool
        Allow ``out_dir`` inside the repository's tracked tree (refused by default:
        :func:`shovir_core.output_dirs.check_output_dir`).
    """
    from ..output_dirs import check_output_dir
    from .validation import check_int, check_names, check_p_grid, check_real

    conditions = check_names(conditions, "conditions", allowed=CONDITIONS)
    ps = check_p_grid(ps, "ps")
    if classes is not None:
        classes = check_names(classes, "classes")
    check_real(iou_threshold, "iou_threshold", lo=0.0, hi=1.0)
    check_int(seed, "seed", lo=0)
    if limit is not None:
        check_int(limit, "limit", lo=1)
    preset = resolve_preset(preset)
    out_dir = check_output_dir(out_dir, force=force, what="export_perturbed")
    out_dir.mkdir(parents=True, exist_ok=True)
    images = dataset.images.sort_values("image_id")
    if classes is not None:
        known = sorted(set(dataset.boxes["finding"]))
        unknown = [c for c in classes if c not in known]
        if unknown:
            raise ValueError(f"classes {unknown} have no box in dataset {dataset.name!r}; its box classes are {known}")
    if limit is not None:
        images = images.head(int(limit))
    pool = box_size_pool(dataset.boxes, dataset.images) if len(dataset.boxes) else None
    rows = []
    for r in tqdm(list(images.itertuples()), desc="perturb", unit="image", disable=not progress):
        image, boxes = dataset.load_image(r.image_id), dataset.boxes_of(r.image_id)
        base = out_dir / preset.name
        if "FullNoise" in conditions:
            out, info = full_noise(image, seed=seed, item_id=r.image_id, preset=preset)
            f = base / "FullNoise" / f"{r.image_id}.png"
            rows.append(_row(r, info, out_dir=out_dir, file=f, status="ok", png_sha=_save(out, f)))
        targets = sorted({b[0] for b in boxes})
        if classes is not None:
            targets = [t for t in targets if t in set(classes)]
        for target in targets:
            for condition in (c for c in conditions if c != "FullNoise"):
                try:
                    grid = occlude_grid(image, boxes, condition=condition, target=target, ps=ps, seed=seed,
                                        item_id=r.image_id, preset=preset, size_pool=pool,
                                        iou_threshold=iou_threshold)
                except EmptyBoxSetError as exc:
                    info = {"condition": condition, "target": target, "p": None, "preset": preset.name,
                            "seed": seed, "boxes": [], "reason": str(exc)}
                    rows.append(_row(r, info, out_dir=out_dir, file=None, status="dropped", png_sha=None))
                    continue
                for p, (out, info) in zip(ps, grid):
                    f = (base / condition / target.replace(" ", "_") / f"p{int(round(100 * p)):03d}"
                         / f"{r.image_id}.png")
                    rows.append(_row(r, info, out_dir=out_dir, file=f, status="ok", png_sha=_save(out, f)))
    manifest = pd.DataFrame(rows, columns=list(MANIFEST_COLUMNS))
    manifest.to_csv(out_dir / "manifest.csv", index=False)
    return manifest

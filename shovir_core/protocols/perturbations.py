"""The ``perturbations`` protocol: the record behind the Perturbations chapter.

One record holds three kinds of trial rows (column ``kind``):

``box_sets``    one row per (image, class with a box) of the box dataset: the
                sizes of ``B_c`` and ``B_c̄`` after the IoU rule, the co-finding
                boxes the rule dropped, and whether DOCO drops the item;
``gallery``     the gallery item(s) under Baseline (the preset's input, see
                :func:`~shovir_core.perturb.conditions.prepare_image`), Full
                Noise and RO / OCO / DOCO at every p, for every preset: the PNG written to the
                record's ``artifacts/`` folder, the SHA-256 of its pixels and of
                the file, the boxes used and the full description (``info``);
``substitute``  one row per source case of the pairing cohort: the ModaLens
                substitute, its tier and the SSIM of the pair.

Trial ids are built from item ids (``boxes/<image>/<class>``,
``gallery/<preset>/<image>/<class>/<condition>/p<pp>``, ``swap/<image>``).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from tqdm import tqdm

from ..perturb import (
    DEFAULT_PS, box_sets, box_size_pool, cohort_from_dataset, full_noise, occlude_grid, resolve_preset,
    sample_substitutes,
)
from ..perturb.conditions import prepare_image
from ..perturb.noise import array_sha256
from ..records import Run, RunWriter, load_run, spec_hash
from ..records.files import make_temp_file
from .datasets import load_dataset
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = ["SPEC", "resolve_spec", "execute", "choose_gallery", "PROTOCOL", "DEFAULTS"]

PROTOCOL = "perturbations"


def _preset_check(value) -> str | None:
    try:
        resolve_preset(value)
    except (KeyError, TypeError, ValueError) as exc:
        return str(exc)
    return None


def _presets_check(value: list) -> str | None:
    return next((msg for msg in map(_preset_check, value) if msg), None)


def _gallery_check(value: list) -> str | None:
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            return f"item {item!r} must be [image_id, target], two strings"
    return None


SPEC = SpecSchema(PROTOCOL, [
    Field("dataset", str, "demo", doc="the box dataset: box sets and the gallery"),
    Field("cohort_dataset", str, "demo-64px", doc="the multi-study dataset of the substitute pairing"),
    Field("seed", int, 0, range=(0, None), doc="perturbation seed"),
    Field("presets", list, ["paper", "reference-code"], items=(str, dict), min_items=1, check=_presets_check,
          doc="noise preset names or options (shovir_core.perturb.resolve_preset)"),
    Field("ps", list, list(DEFAULT_PS), items=float, range=(0.0, 1.0), min_items=1, unique=True,
          doc="blending strengths of the gallery"),
    Field("iou_threshold", float, 0.15, range=(0.0, 1.0), doc="the DOCO IoU rule's threshold"),
    Field("iou_inclusive", bool, False, doc="an IoU equal to the threshold drops the box"),
    Field("gallery", (list, type(None)), None, items=list, min_items=1, check=_gallery_check,
          doc="[[image_id, target], ...]; null: chosen by rule (choose_gallery)"),
    Field("substitute_seed", int, 0, range=(0, None)),
    Field("ssim_size", int, 896, range=(8, None), doc="side of the greyscale images SSIM compares"),
    Field("ssim_threshold", float, 0.9, range=(0.0, 1.0)),
    Field("n_cases", (int, type(None)), None, range=(1, None), doc="first n source cases (null: all)"),
    # pinned by resolve_spec (a spec may carry them; a mismatch is an error)
    Field("dataset_sha256", (str, type(None)), None, pin=True, doc="pinned content hash of dataset"),
    Field("cohort_sha256", (str, type(None)), None, pin=True, doc="pinned content hash of cohort_dataset"),
    # execution-only: never part of the record's identity
    Field("chunk_size", int, 100, range=(1, None), execution=True, doc="source cases per record part"),
])
"""The declared spec (:class:`shovir_core.protocols.spec.SpecSchema`); ``chunk_size`` is execution-only."""
DEFAULTS: dict = {k: v for k, v in SPEC.defaults.items() if k not in ("dataset_sha256", "cohort_sha256")}
"""Every user-facing identity key and its default."""


def choose_gallery(dataset, *, iou_threshold: float, inclusive: bool) -> list[list[str]]:
    """One ``[image_id, target]`` for the gallery, chosen by rule (not by hand).

    Among the (image, class) pairs whose DOCO set is non-empty, the image with
    the most distinct box findings, then the most boxes, then the smallest
    image id; its target is the class with the largest ``B_c`` area.
    """
    best = None
    for image_id, group in dataset.boxes.groupby("image_id", sort=True):
        boxes = dataset.boxes_of(image_id)
        for target in sorted(group["finding"].unique()):
            sets = box_sets(boxes, target, iou_threshold=iou_threshold, inclusive=inclusive, item_id=image_id)
            if sets.doco_empty:
                continue
            area = sum((b.x2 - b.x1) * (b.y2 - b.y1) for b in sets.target)
            key = (-group["finding"].nunique(), -len(group), image_id, -area, target)
            if best is None or key < best[0]:
                best = (key, [image_id, target])
    if best is None:
        raise SpecError(f"{dataset.name}: no image has a co-finding box passing the IoU rule; give 'gallery'")
    return [best[1]]


def resolve_spec(spec: dict) -> dict:
    """Fill every default, validate (:data:`SPEC`), resolve every preset to its full options (they
    all enter the hash, not only the names), choose the gallery by rule when none is given, and pin
    both datasets' content hashes. Execution-only keys are dropped."""
    out = SPEC.resolve(spec)
    out["presets"] = [resolve_preset(p).to_dict() for p in out["presets"]]
    names = [p["name"] for p in out["presets"]]
    if len(set(names)) != len(names):
        raise SpecError(f"{PROTOCOL}: duplicate presets {names}")
    ds = load_dataset(out["dataset"])
    cohort = load_dataset(out["cohort_dataset"])
    if out["gallery"] is None:
        out["gallery"] = choose_gallery(ds, iou_threshold=out["iou_threshold"], inclusive=out["iou_inclusive"])
    out["gallery"] = [[str(i), str(t)] for i, t in out["gallery"]]
    known = set(ds.images["image_id"])
    for image_id, target in out["gallery"]:
        if image_id not in known:
            raise SpecError(f"{PROTOCOL}: gallery image {image_id!r} is not in dataset {out['dataset']!r}")
        found = sorted(set(ds.boxes.loc[ds.boxes["image_id"] == image_id, "finding"]))
        if target not in found:
            raise SpecError(f"{PROTOCOL}: gallery target {target!r} of image {image_id!r} is not a class of its "
                            f"boxes {found} (spelled exactly)")
    for key, d, source in (("dataset_sha256", ds, out["dataset"]), ("cohort_sha256", cohort, out["cohort_dataset"])):
        SPEC.pin(out, key, d.manifest_hash, what=f"dataset {source!r} ({key})")
    return out


def _box_rows(ds, spec) -> list[dict]:
    rows = []
    patients = dict(zip(ds.images["image_id"], ds.images["patient_id"]))
    for image_id, group in ds.boxes.groupby("image_id", sort=True):
        boxes = ds.boxes_of(image_id)
        for target in sorted(group["finding"].unique()):
            s = box_sets(boxes, target, iou_threshold=spec["iou_threshold"], inclusive=spec["iou_inclusive"],
                         item_id=image_id)
            rows.append({
                "trial_id": f"boxes/{image_id}/{target}", "kind": "box_sets", "image_id": image_id,
                "patient_id": str(patients[image_id]), "target": target, "n_boxes": len(boxes),
                "n_target_boxes": len(s.target), "n_other_boxes": len(s.others),
                "n_dropped_iou": len(s.dropped), "doco_dropped": s.doco_empty,
                "dropped_max_iou": json.dumps([round(m, 6) for _, m in s.dropped]),
            })
    return rows


def _write_png(array: np.ndarray, path: Path) -> str:
    """Write ``array`` as PNG atomically; return the SHA-256 of the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp_file(path)
    os.close(fd)
    try:
        Image.fromarray(array).save(tmp, format="PNG")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _gallery_rows(ds, spec, preset_spec, record_path: Path) -> list[dict]:
    preset = resolve_preset(preset_spec)
    pool = box_size_pool(ds.boxes, ds.images)
    rows = []
    for image_id, target in spec["gallery"]:
        image, boxes = ds.load_image(image_id), ds.boxes_of(image_id)
        annotated = [{"finding": f, "x1": x1, "y1": y1, "x2": x2, "y2": y2} for f, x1, y1, x2, y2 in boxes]
        baseline = prepare_image(image, preset, item_id=image_id)
        outputs = [("Baseline", 0.0, baseline, {"item_id": image_id, "condition": "Baseline", "p": 0.0, "boxes": [],
                                                "preset": preset.name, "options": preset.to_dict(),
                                                "shape": list(baseline.shape), "dtype": str(baseline.dtype)})]
        out, info = full_noise(image, seed=spec["seed"], item_id=image_id, preset=preset)
        outputs.append(("FullNoise", 1.0, out, info))
        for condition in ("RO", "OCO", "DOCO"):
            grid = occlude_grid(image, boxes, condition=condition, target=target, ps=spec["ps"], seed=spec["seed"],
                                item_id=image_id, preset=preset, size_pool=pool,
                                iou_threshold=spec["iou_threshold"])
            outputs += [(condition, p, o, i) for p, (o, i) in zip(spec["ps"], grid)]
        for condition, p, array, info in outputs:
            pp = int(round(100 * p))
            rel = Path("artifacts") / preset.name / image_id / target.replace(" ", "_") / f"{condition}_p{pp:03d}.png"
            png_sha = _write_png(array, record_path / rel)
            rows.append({
                "trial_id": f"gallery/{preset.name}/{image_id}/{target}/{condition}/p{pp:03d}", "kind": "gallery",
                "image_id": image_id, "target": target, "condition": condition, "p": float(p),
                "preset": preset.name, "artifact": rel.as_posix(), "sha256": array_sha256(array),
                "png_sha256": png_sha, "boxes_used": json.dumps(info.get("boxes", [])),
                "boxes_annotated": json.dumps(annotated), "info": json.dumps(info, default=str),
            })
    return rows


def _substitute_rows(cohort_ds, spec, done: frozenset[str], progress: bool, *,
                     chunk_size: int) -> Iterator[pd.DataFrame]:
    cohort = cohort_from_dataset(cohort_ds)
    frontal = cohort[cohort["view"].str.upper().isin(["PA", "AP"])]
    sources = sorted(frontal["image_id"])
    if spec["n_cases"] is not None:
        sources = sources[: int(spec["n_cases"])]
    todo = [s for s in sources if f"swap/{s}" not in done]
    size = int(chunk_size)
    chunks = [todo[i:i + size] for i in range(0, len(todo), size)]
    for chunk in tqdm(chunks, desc="substitutes", unit="chunk", disable=not progress):
        pairs = sample_substitutes(cohort, seed=spec["substitute_seed"], sources=chunk, ssim_size=spec["ssim_size"],
                                   ssim_threshold=spec["ssim_threshold"])
        pairs.insert(0, "kind", "substitute")
        pairs.insert(0, "trial_id", "swap/" + pairs["image_id"])
        yield pairs


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Make the record of ``spec`` (resolved); ``execution`` holds the execution-only settings of
    :data:`SPEC` (``chunk_size``)."""
    chunk_size = SPEC.execution(execution)["chunk_size"]
    ds = load_dataset(spec["dataset"])
    cohort_ds = load_dataset(spec["cohort_dataset"])
    for key, d in (("dataset_sha256", ds), ("cohort_sha256", cohort_ds)):
        if d.manifest_hash != spec[key]:
            raise StaleSpecError(f"{PROTOCOL}: dataset {d.name!r} changed since the spec was resolved")
    manifest = {**ds.manifest(), "cohort": cohort_ds.manifest()}
    seeds = {"perturbation": spec["seed"], "substitute": spec["substitute_seed"]}
    with RunWriter(PROTOCOL, name, spec, dataset=manifest, seeds=seeds,
                   credentialed=ds.credentialed or cohort_ds.credentialed) as writer:
        if not writer.is_complete:
            box_rows = _box_rows(ds, spec)
            writer.append([r for r in box_rows if r["trial_id"] not in writer.done_ids])
            for preset in tqdm(spec["presets"], desc="gallery", unit="preset", disable=not progress):
                rows = _gallery_rows(ds, spec, preset, writer.path)
                writer.append([r for r in rows if r["trial_id"] not in writer.done_ids])
            for chunk in _substitute_rows(cohort_ds, spec, writer.done_ids, progress, chunk_size=chunk_size):
                writer.append(chunk)
            trials = Run(writer.path).trials
            subs = trials[trials["kind"] == "substitute"]
            writer.complete(
                n_box_items=int((trials["kind"] == "box_sets").sum()),
                n_doco_dropped=int(trials.loc[trials["kind"] == "box_sets", "doco_dropped"].astype(bool).sum()),
                n_gallery_images=int((trials["kind"] == "gallery").sum()),
                n_cases=int(len(subs)),
            )
    return load_run(PROTOCOL, name, spec_hash(spec))

"""The ``shovir`` protocol: image- and disease-level occlusion experiments (ShoViR §3).

One record per (dataset, model). Its trials are

* **image level**, every image of the (sub)set: ``Baseline`` (clean image, p = 0)
  and ``FullNoise`` (the whole image replaced by matched noise, p = 1);
* **disease level**, every (image, target class c) of the per-class evaluation
  subsets: ``RO``, ``OCO`` and ``DOCO`` at each blending strength p.

Per-class evaluation subsets (as in the reference code's
``classes_jsons/{Category}_samples*.json``): class c's subset holds every image
whose dataset label for c is positive and that has at least one box of c, so
an image appears once per positive class. Classes with fewer than
``min_count`` images are dropped (the paper's PadChest-GR rule is 40; the
count is taken over the whole dataset, before any ``max_per_class``
subsetting). The **DOCO drop rule**: an item whose co-finding box set ``B_c̄``
is empty after the IoU rule has nothing to occlude and is dropped from DOCO
only (the reference code's ``_sample_has_bboxes``); the drops per class are
stored in the record's counts.

Each trial's perturbed image comes from :mod:`shovir_core.perturb` (the noise
stream is a function of ``(seed, image id, class, condition)``, so every model
sees byte-identical inputs; a p grid shares one noise field), its SHA-256 is
stored, and the model is called once per distinct input (p = 0 under RO, OCO
and DOCO equals the Baseline image and reuses its report). Reports are
labelled with :func:`shovir_core.labeling.label_reports` (14 CheXpert codes);
the reference labels come from the labeller on the reference report
(``reference_labels="report"``, the reference code's choice) or from the
dataset's own labels (``"dataset"``, the only choice for the NIH demo, which has
no reports). The reference text for BLEU/ROUGE is the dataset's report
(``reference_text="report"``) or a template report written from the dataset
labels (``"template"``, :mod:`shovir_core.data.template_reports`) — the demo's
BLEU/ROUGE then measure overlap with template sentences, not with a
radiologist's report, and the book says so.

Trial columns: ids (``trial_id, level, condition, target, p, image_id,
study_id, patient_id``), the perturbation (``input_sha256``, ``n_boxes``,
``perturbation`` JSON: boxes used with their set, noise statistics, stream key),
the raw output (``generated``), labels (``pred.<class>`` of the generated
report, ``ref.<class>`` reference labels, ``gt.<class>`` dataset labels; codes
1 / 0 / -1 / NaN) and ``reference_text``.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Iterator

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..data import Dataset, load_dataset
from ..labels import CHEXPERT_CLASSES, FINDINGS_13
from ..records import Run, RunWriter, load_run, spec_hash
from ..vocab import SHOVIR_CONDITIONS

__all__ = [
    "resolve_spec", "execute", "CONDITIONS", "IMAGE_CONDITIONS", "DISEASE_CONDITIONS", "DEFAULTS",
    "trial_id", "class_subsets", "plan_trials", "open_dataset", "label_columns",
]

PROTOCOL = "shovir"
CONDITIONS = SHOVIR_CONDITIONS
IMAGE_CONDITIONS = CONDITIONS[:2]  # Baseline, FullNoise
DISEASE_CONDITIONS = CONDITIONS[2:]  # RO, OCO, DOCO

DEFAULTS: dict = {
    "dataset": "demo",
    "dataset_options": {},
    "model": "ref-blind-prior",
    "conditions": list(CONDITIONS),
    "ps": [0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
    "classes": None,
    "min_count": 40,
    "max_per_class": None,
    "subset_seed": 0,
    "seed": 3,
    "preset": "paper",
    "iou_threshold": 0.15,
    "max_retries": 100,
    "prompt": None,
    "max_new_tokens": None,
    "batch_size": 8,
    "reference_labels": "report",
    "reference_text": "report",
    "chunk_size": 512,
}
"""Every spec key with its default.

``dataset``            demo name or ``adapter:path`` (``mimic:``/``padchest:``; ``$VARS`` are expanded
                       when loading, so the spec stays machine-independent)
``dataset_options``    keyword options of the adapter (e.g. ``{"metadata_csv": ...}``)
``model``              registry name of :func:`shovir_core.models.get_model`
``conditions``         subset of Baseline, FullNoise, RO, OCO, DOCO
``ps``                 blending strengths of RO/OCO/DOCO (the paper's 0, .2, ..., 1)
``classes``            target classes (``None``: every localisable class with >= ``min_count`` images)
``min_count``          classes with fewer images in their subset are dropped
``max_per_class``      keep at most this many images per class subset (hash order of ``subset_seed``);
                       image-level trials then cover the union of the kept images
``seed``               perturbation seed (the reference code's default is 3)
``preset``             noise preset name or options (:func:`shovir_core.perturb.resolve_preset`)
``iou_threshold``      the DOCO IoU rule's threshold
``max_retries``        RO placement attempts per random box
``prompt``, ``max_new_tokens``  generation overrides (``None``: the model's paper settings)
``batch_size``         images per model call
``reference_labels``   ``"report"`` (label the reference report) or ``"dataset"`` (dataset labels)
``reference_text``     ``"report"`` (the dataset's report) or ``"template"`` (template from labels)
``chunk_size``         trials per record part (resume granularity)
"""

_LABEL_PREFIXES = ("pred", "ref", "gt")


def label_columns(prefix: str) -> list[str]:
    """The 14 label columns of one kind: ``pred`` (generated report), ``ref`` (reference) or ``gt`` (dataset).

    >>> label_columns("pred")[:2]
    ['pred.Enlarged Cardiomediastinum', 'pred.Cardiomegaly']
    """
    if prefix not in _LABEL_PREFIXES:
        raise ValueError(f"label prefix {prefix!r} not in {_LABEL_PREFIXES}")
    return [f"{prefix}.{c}" for c in CHEXPERT_CLASSES]


def trial_id(condition: str, image_id: str, target: str | None = None, p: float | None = None) -> str:
    """The stable id of one trial, built from its ids only.

    >>> trial_id("OCO", "00012_000", "Atelectasis", 0.4)
    'OCO|00012_000|Atelectasis|p040'
    >>> trial_id("Baseline", "00012_000")
    'Baseline|00012_000|-|-'
    """
    ptxt = "-" if p is None else f"p{int(round(float(p) * 100)):03d}"
    return f"{condition}|{image_id}|{target or '-'}|{ptxt}"


# -- spec --------------------------------------------------------------------------------------
def _check_choice(key: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"shovir: {key}={value!r} not in {list(allowed)}")


def open_dataset(spec: dict) -> Dataset:
    """Load the spec's dataset (expanding ``$VARS`` in ``adapter:path`` names)."""
    from ..data import mimic, padchest  # noqa: F401  (register the mimic: and padchest: adapters)

    source = spec.get("dataset", DEFAULTS["dataset"])
    expanded = os.path.expandvars(source)
    if "$" in expanded:
        raise ValueError(f"shovir: dataset {source!r} names an unset environment variable "
                         f"(expanded to {expanded!r}); set it to the folder of your credentialed copy")
    return load_dataset(expanded, **(spec.get("dataset_options") or {}))


def resolve_spec(spec: dict) -> dict:
    """Fill every default, validate, and pin the dataset's content hash."""
    unknown = set(spec) - set(DEFAULTS) - {"dataset_sha256", "model_fingerprint"}
    if unknown:
        raise ValueError(f"shovir: unknown spec keys {sorted(unknown)} (allowed: {sorted(DEFAULTS)})")
    out = {**{k: (list(v) if isinstance(v, list) else (dict(v) if isinstance(v, dict) else v))
              for k, v in DEFAULTS.items()}, **spec}
    for c in out["conditions"]:
        _check_choice("condition", c, CONDITIONS)
    out["conditions"] = [c for c in CONDITIONS if c in out["conditions"]]
    ps = [float(p) for p in out["ps"]]
    if not ps or any(not 0.0 <= p <= 1.0 for p in ps) or len(set(ps)) != len(ps):
        raise ValueError(f"shovir: ps={out['ps']!r} must be distinct values in [0, 1]")
    out["ps"] = sorted(ps)
    if out["classes"] is not None:
        bad = [c for c in out["classes"] if c not in FINDINGS_13]
        if bad:
            raise ValueError(f"shovir: classes {bad} are not localisable CheXpert classes ({list(FINDINGS_13)})")
        out["classes"] = [c for c in FINDINGS_13 if c in out["classes"]]
    for key in ("min_count", "batch_size", "chunk_size", "max_retries"):
        if not isinstance(out[key], int) or out[key] < 1:
            raise ValueError(f"shovir: {key}={out[key]!r} must be a positive integer")
    if out["max_per_class"] is not None and (not isinstance(out["max_per_class"], int) or out["max_per_class"] < 1):
        raise ValueError(f"shovir: max_per_class={out['max_per_class']!r} must be a positive integer or null")
    for key in ("seed", "subset_seed"):
        if not isinstance(out[key], int) or out[key] < 0:
            raise ValueError(f"shovir: {key}={out[key]!r} must be a non-negative integer")
    _check_choice("reference_labels", out["reference_labels"], ("report", "dataset"))
    _check_choice("reference_text", out["reference_text"], ("report", "template"))
    if not 0.0 <= float(out["iou_threshold"]) <= 1.0:
        raise ValueError(f"shovir: iou_threshold={out['iou_threshold']!r} must lie in [0, 1]")
    from ..perturb import resolve_preset

    resolve_preset(out["preset"])  # raises on an unknown preset
    ds = open_dataset(out)
    if ds.reports is None and "report" in (out["reference_labels"], out["reference_text"]):
        raise ValueError(
            f"shovir: dataset {out['dataset']!r} has no reports; set reference_labels: dataset and "
            "reference_text: template (the demo's choice)")
    if spec.get("dataset_sha256") not in (None, ds.manifest_hash):
        raise ValueError(f"shovir: dataset {out['dataset']!r} changed (hash {ds.manifest_hash[:12]} != "
                         f"{str(spec['dataset_sha256'])[:12]})")
    out["dataset_sha256"] = ds.manifest_hash
    from ..models import model_fingerprint

    # the model's identity (weights/parameters and the code that builds them) is part of the
    # record's identity: a retrained reference model makes a new record instead of reusing one
    out["model_fingerprint"] = model_fingerprint(out["model"])
    return out


# -- per-class subsets and the trial plan -----------------------------------------------------
def _hash_order(seed: int, image_id: str) -> str:
    return hashlib.sha256(f"{seed}\x1f{image_id}".encode()).hexdigest()


def class_subsets(ds: Dataset, *, classes=None, min_count: int = 40, max_per_class: int | None = None,
                  subset_seed: int = 0) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Per-class evaluation subsets.

    Returns
    -------
    subsets : dict
        class -> image ids (positive label and at least one box of the class),
        in a stable hash order, truncated to ``max_per_class``; only classes with
        at least ``min_count`` images.
    counts : dict
        class -> the full subset size (before ``min_count`` and truncation), for
        every class considered.
    """
    boxed = ds.boxes.groupby("finding")["image_id"].apply(lambda s: set(s))
    wanted = list(classes) if classes is not None else list(FINDINGS_13)
    subsets, counts = {}, {}
    for c in wanted:
        if c not in ds.labels.columns:
            counts[c] = 0
            continue
        positive = set(ds.labels.index[ds.labels[c] == 1.0])
        ids = sorted(positive & boxed.get(c, set()), key=lambda i: _hash_order(subset_seed, i))
        counts[c] = len(ids)
        if len(ids) >= min_count:
            subsets[c] = ids[:max_per_class] if max_per_class is not None else ids
    return subsets, counts


def plan_trials(spec: dict, ds: Dataset) -> tuple[list[dict], dict]:
    """Trial groups to run: one per (condition, image, target) with the ps it needs.

    Returns the groups (dicts with ``condition, image_id, target, ps``) and the
    plan counts (subset sizes, dropped classes).
    """
    subsets, full = class_subsets(ds, classes=spec["classes"], min_count=spec["min_count"],
                                  max_per_class=spec["max_per_class"], subset_seed=spec["subset_seed"])
    if spec["max_per_class"] is None:
        image_ids = sorted(ds.images["image_id"])
    else:
        image_ids = sorted({i for ids in subsets.values() for i in ids})
    groups = []
    for cond in spec["conditions"]:
        if cond in IMAGE_CONDITIONS:
            groups += [{"condition": cond, "image_id": i, "target": None,
                        "ps": [0.0 if cond == "Baseline" else 1.0]} for i in image_ids]
        else:
            groups += [{"condition": cond, "image_id": i, "target": c, "ps": list(spec["ps"])}
                       for c, ids in subsets.items() for i in ids]
    counts = {"class_counts": full, "classes": sorted(subsets, key=FINDINGS_13.index),
              "classes_dropped_min_count": sorted(set(full) - set(subsets), key=FINDINGS_13.index),
              "n_images": len(image_ids), "n_items": int(sum(len(v) for v in subsets.values()))}
    return groups, counts


# -- execution ---------------------------------------------------------------------------------
def _codes(frame: pd.DataFrame, prefix: str) -> dict[str, list]:
    return {f"{prefix}.{c}": frame[c].to_numpy(dtype=float).tolist() if c in frame else [np.nan] * len(frame)
            for c in CHEXPERT_CLASSES}


class _Labeller:
    """Label texts once each (reports repeat a lot across conditions)."""

    def __init__(self) -> None:
        from ..labeling import label_reports

        self._label = label_reports
        self._memo: dict[str, np.ndarray] = {}

    def __call__(self, texts: list[str]) -> pd.DataFrame:
        new = sorted({t for t in texts if t not in self._memo})
        if new:
            frame = self._label(new)
            arr = frame.reindex(columns=list(CHEXPERT_CLASSES)).to_numpy(dtype=float)
            self._memo.update(zip(new, arr))
        return pd.DataFrame([self._memo[t] for t in texts], columns=list(CHEXPERT_CLASSES))


def _reference(spec: dict, ds: Dataset, labeller: _Labeller) -> tuple[dict[str, str | None], pd.DataFrame]:
    """Reference text per image and the reference label frame (index image_id)."""
    ids = ds.images["image_id"].tolist()
    study = dict(zip(ds.images["image_id"], ds.images["study_id"]))
    gt = ds.labels.reindex(index=ids, columns=list(CHEXPERT_CLASSES))
    if spec["reference_text"] == "template":
        from ..data.template_reports import template_reports

        texts = template_reports(gt)["text"].to_dict()
    else:
        reports = ds.reports["text"]
        missing = [i for i in ids if study[i] not in reports.index]
        if missing:
            raise ValueError(f"shovir: image {missing[0]!r} (study {study[missing[0]]!r}) has no report")
        texts = {i: str(reports[study[i]]) for i in ids}
    if spec["reference_labels"] == "dataset":
        ref = gt
    else:
        ref = labeller([texts[i] for i in ids])
        ref.index = pd.Index(ids, name="image_id")
    return texts, ref


def _perturb(ds: Dataset, group: dict, spec: dict, cache: dict, size_pool) -> list[tuple[np.ndarray, dict]]:
    from ..perturb import full_noise, occlude_grid, resolve_preset

    image_id = group["image_id"]
    if image_id not in cache:
        cache.clear()  # groups are ordered by image: keep one decoded image
        cache[image_id] = ds.load_image(image_id)
    image = cache[image_id]
    cond = group["condition"]
    if cond == "Baseline":
        from ..perturb.conditions import prepare_image
        from ..perturb.noise import array_sha256

        work = prepare_image(image, resolve_preset(spec["preset"]), item_id=image_id)
        return [(work, {"condition": "Baseline", "p": 0.0, "boxes": [], "sha256": array_sha256(work)})]
    if cond == "FullNoise":
        return [full_noise(image, seed=spec["seed"], item_id=image_id, preset=spec["preset"])]
    return occlude_grid(image, ds.boxes_of(image_id), condition=cond, target=group["target"], ps=group["ps"],
                        seed=spec["seed"], item_id=image_id, preset=spec["preset"], size_pool=size_pool,
                        iou_threshold=float(spec["iou_threshold"]), max_retries=spec["max_retries"])


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _info_json(info: dict) -> str:
    keep = {k: v for k, v in info.items() if k not in ("options", "item_id", "shape", "dtype", "sha256")}
    return json.dumps(keep, sort_keys=True, default=float)


def execute(name: str, spec: dict, *, progress: bool = True) -> Run:
    """Run (or resume) the grid of ``spec`` for one (dataset, model); returns the complete record."""
    from ..models import cached, get_model
    from ..perturb import EmptyBoxSetError, box_size_pool, resolve_preset

    ds = open_dataset(spec)
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise RuntimeError(f"shovir: dataset {spec['dataset']!r} changed while resolving the spec")
    model = cached(get_model(spec["model"]), chunk_size=spec["batch_size"], progress=False)
    preset = resolve_preset(spec["preset"])
    groups, plan = plan_trials(spec, ds)
    meta = ds.images.set_index("image_id")
    size_pool = box_size_pool(ds.boxes, ds.images) if len(ds.boxes) else None
    labeller = _Labeller()
    ref_text, ref_labels = _reference(spec, ds, labeller)
    gt = ds.labels.reindex(columns=list(CHEXPERT_CLASSES))
    seeds = {"perturbation": spec["seed"], "subset": spec["subset_seed"]}
    model_info = {"id": spec["model"], **model.provenance()}

    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model=model_info, seeds=seeds,
                   credentialed=ds.credentialed) as writer:
        if writer.is_complete:
            return load_run(PROTOCOL, name, spec_hash(spec))
        done = writer.done_ids
        # a resumed run reuses the reports it already generated (same input hash -> same report)
        memo: dict[str, str] = {}
        if done:
            stored = Run(writer.path).trials
            memo.update(zip(stored["input_sha256"], stored["generated"]))
        pending = []
        for g in groups:
            todo = [p for p in g["ps"] if trial_id(g["condition"], g["image_id"], g["target"],
                                                     None if g["condition"] in IMAGE_CONDITIONS else p) not in done]
            if todo:
                pending.append({**g, "ps": todo})
        pending.sort(key=lambda g: (g["image_id"], CONDITIONS.index(g["condition"]), g["target"] or ""))
        gen_seconds = 0.0
        total = sum(len(g["ps"]) for g in pending)
        bar = tqdm(total=total, desc=f"shovir {ds.name} x {spec['model']}", unit="trial", disable=not progress)
        image_cache: dict = {}
        buffer: list[dict] = []

        def flush(rows: list[dict]) -> None:
            nonlocal gen_seconds
            need = []
            seen = set()
            for r in rows:
                if r["input_sha256"] not in memo and r["input_sha256"] not in seen:
                    seen.add(r["input_sha256"])
                    need.append(r)
            for batch in _chunks(need, spec["batch_size"]):
                t0 = time.perf_counter()
                texts = model.generate_reports(
                    [r.pop("_pixels") for r in batch], prompt=spec["prompt"],
                    max_new_tokens=spec["max_new_tokens"],
                    boxes=[ds.boxes_of(r["image_id"]) for r in batch] if getattr(model, "uses_boxes", False)
                    else None)
                gen_seconds += time.perf_counter() - t0
                if len(texts) != len(batch):
                    raise RuntimeError(f"{spec['model']}: {len(texts)} reports for {len(batch)} images")
                memo.update((r["input_sha256"], str(t)) for r, t in zip(batch, texts))
            for r in rows:
                r.pop("_pixels", None)
                r["generated"] = memo[r["input_sha256"]]
            labels = labeller([r["generated"] for r in rows])
            pred = _codes(labels, "pred")
            for k, r in enumerate(rows):
                r.update({col: vals[k] for col, vals in pred.items()})
            writer.append(rows)
            bar.update(len(rows))

        for g in pending:
            try:
                outputs = _perturb(ds, g, spec, image_cache, size_pool)
            except EmptyBoxSetError:
                if g["condition"] != "DOCO":
                    raise
                bar.update(len(g["ps"]))
                continue
            image_id = g["image_id"]
            m = meta.loc[image_id]
            for (pixels, info), p in zip(outputs, g["ps"]):
                image_level = g["condition"] in IMAGE_CONDITIONS
                row = {
                    "trial_id": trial_id(g["condition"], image_id, g["target"], None if image_level else p),
                    "level": "image" if image_level else "disease",
                    "condition": g["condition"], "target": g["target"], "p": float(info.get("p", p)),
                    "image_id": image_id, "study_id": str(m["study_id"]), "patient_id": str(m["patient_id"]),
                    "input_sha256": info["sha256"], "n_boxes": len(info.get("boxes") or []),
                    "perturbation": _info_json(info), "_pixels": pixels,
                    "reference_text": ref_text[image_id],
                    **{f"ref.{c}": float(ref_labels.loc[image_id, c]) for c in CHEXPERT_CLASSES},
                    **{f"gt.{c}": float(gt.loc[image_id, c]) for c in CHEXPERT_CLASSES},
                }
                buffer.append(row)
            if len(buffer) >= spec["chunk_size"]:
                flush(buffer)
                buffer = []
        if buffer:
            flush(buffer)
        bar.close()
        # doco drops of earlier sessions: recount from the plan (a dropped item never has a trial)
        stored = Run(writer.path).trials
        cells = (stored.fillna({"target": "-"}).groupby(["condition", "target"]).size()
                 .rename("n").reset_index())
        doco_items = stored.loc[stored["condition"] == "DOCO"].groupby("target")["image_id"].nunique()
        drops = {c: int(len(ids) - int(doco_items.get(c, 0)))
                 for c, ids in class_subsets(ds, classes=spec["classes"], min_count=spec["min_count"],
                                             max_per_class=spec["max_per_class"],
                                             subset_seed=spec["subset_seed"])[0].items()} \
            if "DOCO" in spec["conditions"] else {}
        writer.complete(
            cells={f"{r.condition}|{r.target}": int(r.n) for r in cells.itertuples()},
            doco_dropped=drops, class_counts=plan["class_counts"], classes=plan["classes"],
            classes_dropped_min_count=plan["classes_dropped_min_count"], n_images=plan["n_images"],
            n_items=plan["n_items"], n_model_calls_this_session=model.computed,
            generation_seconds_this_session=round(gen_seconds, 3), preset=preset.to_dict(),
            n_unique_inputs=int(stored["input_sha256"].nunique()),
        )
    return load_run(PROTOCOL, name, spec_hash(spec))

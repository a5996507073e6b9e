"""The ``shovir`` protocol: image- and disease-level occlusion experiments (ShoViR §3).

One record per (dataset, model). Its trials are

* **image level**, every image of the (sub)set: ``Baseline`` (clean image, p = 0)
  and ``FullNoise`` (the whole image replaced by matched noise, p = 1);
* **disease level**, every (image, target class c) of the per-class evaluation
  subsets: ``RO``, ``OCO`` and ``DOCO`` at each blending strength p.

Per-class evaluation subsets (as in the reference code's
``classes_jsons/{Category}_samples*.json``, read by arco-group/ShoViR-Bench ``src/benchmark/cli.py``@06324c9): class c's subset holds every image
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
the raw output (``generated``), ``gen_seconds`` (wall-clock seconds spent generating
that report: its batch's time over the batch size; NaN when the report was reused from another
trial, the inference cache or an earlier session), labels (``pred.<class>`` of the generated
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

from ..data import Dataset
from ..labels import CHEXPERT_CLASSES, FINDINGS_13
from ..records import Run, RunWriter, load_run, spec_hash
from ..vocab import P_GRID
from ..perturb.boxes import applies_iou_filter, class_subsets, keyed_boxes
from ..perturb.legacy import RNG_MODES
from .datasets import load_dataset
from .spec import Field, SpecError, SpecSchema, StaleSpecError
from ..vocab import SHOVIR_CONDITIONS
from . import shards

__all__ = [
    "SPEC", "resolve_spec", "execute", "CONDITIONS", "IMAGE_CONDITIONS", "DISEASE_CONDITIONS", "DEFAULTS",
    "trial_id", "plan_trials", "open_dataset", "label_columns",
]

PROTOCOL = "shovir"
CONDITIONS = SHOVIR_CONDITIONS
IMAGE_CONDITIONS = CONDITIONS[:2]  # Baseline, FullNoise
DISEASE_CONDITIONS = CONDITIONS[2:]  # RO, OCO, DOCO

MEASURED_COLUMNS = ("gen_seconds",)
"""Trial columns that are wall-clock measurements of this session, not model outputs: they differ
between two runs of the same record (sharded or not) and are left out of record-equality checks."""

LABELLER_CHOICES = ("rules", "chexbert")
"""Report labellers the protocol takes (``labeller`` spec key; part of the record's identity)."""


def _preset_check(value) -> str | None:
    from ..perturb import resolve_preset

    try:
        resolve_preset(value)
    except (KeyError, TypeError, ValueError) as exc:
        return str(exc)
    return None


SPEC = SpecSchema(PROTOCOL, [
    Field("dataset", str, "demo", doc="demo name or adapter:path (mimic:$SHOVIR_MIMIC, padchest:$SHOVIR_PADCHEST); "
                                      "$VARS are expanded when loading, so the spec stays machine-independent"),
    Field("dataset_options", dict, {}, doc="keyword options of the dataset adapter"),
    Field("model", str, "ref-blind-prior", doc="registry name (shovir_core.models.list_models())"),
    Field("conditions", list, list(CONDITIONS), items=str, choices=CONDITIONS, min_items=1, unique=True),
    Field("ps", list, list(P_GRID), items=float, range=(0.0, 1.0), min_items=1, unique=True,
          doc="blending strengths of RO/OCO/DOCO"),
    Field("classes", (list, type(None)), None, items=str, choices=FINDINGS_13, min_items=1, unique=True,
          doc="localisable target classes; null: every class with >= min_count images"),
    Field("min_count", int, 40, range=(1, None), doc="classes with fewer images in their subset are dropped"),
    Field("max_per_class", (int, type(None)), None, range=(1, None),
          doc="at most this many images per class subset (hash order of subset_seed); null: all"),
    Field("subset_seed", int, 0, range=(0, None)),
    Field("seed", int, 3, range=(0, None), doc="perturbation seed (the reference code's default is 3)"),
    Field("preset", (str, dict), "paper", check=_preset_check,
          doc="noise preset name or options (shovir_core.perturb.resolve_preset)"),
    Field("iou_threshold", float, 0.15, range=(0.0, 1.0), doc="the DOCO IoU rule's threshold"),
    Field("max_retries", int, 100, range=(1, None), doc="RO placement attempts per random box"),
    Field("prompt", (str, type(None)), None, doc="report prompt override (null: the model's paper prompt)"),
    Field("max_new_tokens", (int, type(None)), None, range=(1, None),
          doc="report length override (null: the model's paper setting)"),
    Field("reference_labels", str, "report", choices=("report", "dataset"),
          doc="label the reference report, or use the dataset labels"),
    Field("reference_text", str, "report", choices=("report", "template"),
          doc="the dataset's report, or a template report from the labels"),
    Field("labeller", str, "rules", choices=LABELLER_CHOICES,
          doc="report labeller: rules (offline default) or chexbert (the paper's; local weights)"),
    Field("rng", str, "per-item", choices=RNG_MODES,
          doc="per-item streams, or a replay of the authors' legacy streams (needs the reference-code preset)"),
    # pinned by resolve_spec (a spec may carry them; a mismatch is an error)
    Field("dataset_sha256", (str, type(None)), None, pin=True, doc="pinned dataset content hash"),
    Field("model_fingerprint", (dict, type(None)), None, pin=True, doc="pinned model identity"),
    # execution-only: never part of the record's identity
    Field("batch_size", int, 8, range=(1, None), execution=True, doc="images per model call"),
    Field("chunk_size", int, 512, range=(1, None), execution=True,
          doc="trials per record part (resume granularity)"),
    Field("batch_check", int, 0, range=(0, None), execution=True,
          doc="reports generated in a batch that are generated again one at a time and compared "
              "(counted in the record: batch_check_n_this_session, batch_check_differing_this_session)"),
])
"""The declared spec (:class:`shovir_core.protocols.spec.SpecSchema`): every key, its type, range and
default. ``batch_size`` and ``chunk_size`` are execution-only: they never enter the record's identity.

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
``reference_labels``   ``"report"`` (label the reference report) or ``"dataset"`` (dataset labels)
``reference_text``     ``"report"`` (the dataset's report) or ``"template"`` (template from labels)
``labeller``           report labeller of generated and reference reports: ``"rules"`` (offline default) or
                       ``"chexbert"`` (the paper's; local weights, :mod:`shovir_core.labeling.chexbert`)
``rng``                ``"per-item"`` (streams from ids, order-independent) or a replay of the authors'
                       legacy streams, ``"legacy-stream"`` / ``"legacy-per-sample"``
                       (:mod:`shovir_core.perturb.legacy`; needs the ``reference-code`` preset)
``batch_size``         images per model call (execution-only)
``chunk_size``         trials per record part, the resume granularity (execution-only)
``batch_check``        up to this many reports generated in a batch of two or more are generated
                       again alone, bypassing the inference cache, and compared; the record's counts
                       ``batch_check_n_this_session`` / ``batch_check_differing_this_session`` say how many the
                       session that completed the record checked and how many differ (left padding can
                       change a model's greedy output; execution-only)
"""
DEFAULTS: dict = {k: v for k, v in SPEC.defaults.items() if k not in ("dataset_sha256", "model_fingerprint")}
"""Every user-facing identity key and its default (the execution-only keys are in :data:`SPEC`)."""

_LABEL_PREFIXES = ("pred", "ref", "gt")


def label_columns(prefix: str) -> list[str]:
    """The 14 label columns of one kind: ``pred`` (generated report), ``ref`` (reference) or ``gt`` (dataset).

    >>> label_columns("pred")[:2]
    ['pred.Enlarged Cardiomediastinum', 'pred.Cardiomegaly']
    """
    if prefix not in _LABEL_PREFIXES:
        raise SpecError(f"label prefix {prefix!r} not in {_LABEL_PREFIXES}")
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
def open_dataset(spec: dict) -> Dataset:
    """Load the spec's dataset (expanding ``$VARS`` in ``adapter:path`` names); reused in-process
    while none of its files changed (:func:`shovir_core.protocols.datasets.load_dataset`)."""
    from ..data import mimic, padchest  # noqa: F401  (register the mimic: and padchest: adapters)

    source = spec.get("dataset", DEFAULTS["dataset"])
    expanded = os.path.expandvars(source)
    if "$" in expanded:
        raise SpecError(f"shovir: dataset {source!r} names an unset environment variable "
                         f"(expanded to {expanded!r}); set it to the folder of your credentialed copy")
    return load_dataset(expanded, **(spec.get("dataset_options") or {}))


def resolve_spec(spec: dict) -> dict:
    """Fill every default, validate (:data:`SPEC`), and pin the dataset's content hash and the model's
    fingerprint (a pinned value that no longer matches is an error). Execution-only keys are dropped."""
    out = SPEC.resolve(spec)
    out["conditions"] = [c for c in CONDITIONS if c in out["conditions"]]
    out["ps"] = sorted(out["ps"])
    if out["classes"] is not None:
        out["classes"] = [c for c in FINDINGS_13 if c in out["classes"]]
    from ..perturb import resolve_preset

    preset = resolve_preset(out["preset"])
    if out["rng"] != "per-item" and preset.engine != "reference-code":
        raise SpecError(f"shovir: rng={out['rng']!r} replays the authors' code and needs a preset with "
                         f"engine 'reference-code' (preset {preset.name!r} has {preset.engine!r})")
    ds = open_dataset(out)
    if ds.reports is None and "report" in (out["reference_labels"], out["reference_text"]):
        raise SpecError(
            f"shovir: dataset {out['dataset']!r} has no reports; set reference_labels: dataset and "
            "reference_text: template (the demo's choice)")
    SPEC.pin(out, "dataset_sha256", ds.manifest_hash, what=f"dataset {out['dataset']!r}")
    from ..models import model_fingerprint

    # the model's identity (weights/parameters and the code that builds them) is part of the
    # record's identity: a retrained reference model makes a new record instead of reusing one
    SPEC.pin(out, "model_fingerprint", model_fingerprint(out["model"]), what=f"model {out['model']!r}")
    return out


# -- per-class subsets and the trial plan -----------------------------------------------------
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
    """Label texts once each (reports repeat a lot across conditions) with the spec's labeller.

    Built before any model call, so a labeller that cannot run here (CheXbert without its local
    weights) fails with its reason before anything is generated.
    """

    def __init__(self, name: str = "rules") -> None:
        from ..labeling import get_labeller, label_reports

        self.name = name
        self._impl = get_labeller(name)  # raises LabellerUnavailable (naming what is missing)
        self._label = lambda texts: label_reports(texts, labeller=name)
        self._memo: dict[str, np.ndarray] = {}

    def provenance(self) -> dict:
        """What the record's manifest says about the labeller (CheXbert: its local files)."""
        info = getattr(self._impl, "provenance", None)
        return {"name": self.name, **(info() if callable(info) else {})}

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
            raise SpecError(f"shovir: image {missing[0]!r} (study {study[missing[0]]!r}) has no report")
        texts = {i: str(reports[study[i]]) for i in ids}
    if spec["reference_labels"] == "dataset":
        ref = gt
    else:
        ref = labeller([texts[i] for i in ids])
        ref.index = pd.Index(ids, name="image_id")
    return texts, ref


def _legacy_streams(spec: dict, ds: Dataset, preset):
    """The authors' experiments of this record as :class:`~shovir_core.perturb.legacy.LegacyStreams`."""
    from ..perturb import box_sets
    from ..perturb.conditions import _reference_boxes
    from ..perturb.legacy import LegacyStreams, authors_class_order
    from ..perturb.reference import advance

    full, _ = class_subsets(ds, classes=spec["classes"], min_count=spec["min_count"], max_per_class=None,
                            subset_seed=spec["subset_seed"])
    order = ds.images["image_id"].tolist()
    rank = {i: k for k, i in enumerate(order)}
    shape = {r.image_id: (int(r.height), int(r.width)) for r in ds.images.itertuples()}
    iou_filter = applies_iou_filter(ds, preset)
    disease = [(i, c) for c in authors_class_order(full) for i in sorted(full[c], key=rank.__getitem__)]

    def kept_by_doco(item) -> bool:
        i, c = item
        sets = box_sets(keyed_boxes(ds, i), c, iou_threshold=float(spec["iou_threshold"]),
                        inclusive=preset.iou_inclusive, iou_filter=iou_filter)
        return bool(_reference_boxes(sets, "DOCO", shape[i]))

    orders = {"Baseline": [(i, None) for i in order], "FullNoise": [(i, None) for i in order],
              "RO": disease, "OCO": disease, "DOCO": [it for it in disease if kept_by_doco(it)]}

    def skip(condition, p, key, rng):
        i, c = key
        boxes = []
        if c is not None:
            sets = box_sets(keyed_boxes(ds, i), c, iou_threshold=float(spec["iou_threshold"]),
                            inclusive=preset.iou_inclusive, iou_filter=iou_filter)
            boxes = _reference_boxes(sets, condition, shape[i])
        advance(rng, condition, shape[i], boxes, p, max_retries=spec["max_retries"])

    return LegacyStreams(spec["rng"], spec["seed"], orders, skip)


def _perturb(ds: Dataset, group: dict, spec: dict, cache: dict, size_pool, streams=None) -> list[tuple[np.ndarray, dict]]:
    from ..perturb import EmptyBoxSetError, full_noise, occlude, occlude_grid, resolve_preset

    image_id = group["image_id"]
    if image_id not in cache:
        cache.clear()  # groups are ordered by image: keep one decoded image
        cache[image_id] = ds.load_image(image_id)
    image = cache[image_id]
    cond = group["condition"]
    preset = resolve_preset(spec["preset"])
    if cond == "Baseline":
        from ..perturb.conditions import prepare_image
        from ..perturb.noise import array_sha256

        work = prepare_image(image, preset, item_id=image_id)
        return [(work, {"condition": "Baseline", "p": 0.0, "boxes": [], "sha256": array_sha256(work)})]
    key = (image_id, group["target"])
    if streams is not None and (cond, key) not in streams:
        raise EmptyBoxSetError(f"item {image_id!r}: not in the authors' {cond} dataset (dropped)")
    if cond == "FullNoise":
        rng = streams.rng_for(cond, 1.0, key) if streams is not None else None
        return [full_noise(image, seed=spec["seed"], item_id=image_id, preset=preset, rng=rng)]
    kwargs = dict(condition=cond, target=group["target"], seed=spec["seed"], item_id=image_id, preset=preset,
                  size_pool=size_pool, iou_threshold=float(spec["iou_threshold"]), max_retries=spec["max_retries"],
                  iou_filter=applies_iou_filter(ds, preset))
    boxes = keyed_boxes(ds, image_id)
    if streams is None:
        return occlude_grid(image, boxes, ps=group["ps"], **kwargs)
    return [occlude(image, boxes, p=p, rng=streams.rng_for(cond, p, key), **kwargs) for p in group["ps"]]


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _info_json(info: dict) -> str:
    keep = {k: v for k, v in info.items() if k not in ("options", "item_id", "shape", "dtype", "sha256")}
    return json.dumps(keep, sort_keys=True, default=float)


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Run (or resume) the grid of ``spec`` (resolved) for one (dataset, model); returns the complete record.

    ``execution`` holds the execution-only settings of :data:`SPEC` (``batch_size``, ``chunk_size``)."""
    from ..models import cached, get_model
    from ..perturb import EmptyBoxSetError, box_size_pool, resolve_preset

    settings = SPEC.execution(execution)
    batch_size, chunk_size = settings["batch_size"], settings["chunk_size"]
    ds = open_dataset(spec)
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"shovir: dataset {spec['dataset']!r} changed since the spec was resolved")
    model = cached(get_model(spec["model"]), chunk_size=batch_size, progress=False)
    preset = resolve_preset(spec["preset"])
    groups, plan = plan_trials(spec, ds)
    # each image's study and patient, looked up per group (a .loc per group was ~5 % of a ShoViR record)
    meta = {i: (str(st), str(pt)) for i, st, pt in zip(ds.images["image_id"].tolist(), ds.images["study_id"].tolist(),
                                                        ds.images["patient_id"].tolist())}
    size_pool = box_size_pool(ds.boxes, ds.images) if len(ds.boxes) else None
    labeller = _Labeller(spec.get("labeller", "rules"))
    ref_text, ref_labels = _reference(spec, ds, labeller)
    gt = ds.labels.reindex(columns=list(CHEXPERT_CLASSES))
    seeds = {"perturbation": spec["seed"], "subset": spec["subset_seed"]}
    model_info = {"id": spec["model"], **model.provenance(), "labeller": labeller.provenance()}

    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model=model_info, seeds=seeds,
                   credentialed=ds.credentialed) as writer:
        if writer.is_complete:
            return load_run(PROTOCOL, name, spec_hash(spec))
        model.record_into(writer)  # the record lists the cache entries its trials came from
        groups = shards.select(groups, writer, key="image_id", size=lambda g: len(g["ps"]))  # this process's shard
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
        streams = _legacy_streams(spec, ds, preset) if spec.get("rng", "per-item") != "per-item" else None
        if streams is None:
            pending.sort(key=lambda g: (g["image_id"], CONDITIONS.index(g["condition"]), g["target"] or ""))
        else:  # each experiment's stream is walked in the authors' order
            pending.sort(key=lambda g: (CONDITIONS.index(g["condition"]),
                                        streams.rank(g["condition"], (g["image_id"], g["target"]))
                                        if (g["condition"], (g["image_id"], g["target"])) in streams else -1))
        gen_seconds = 0.0
        audit = {"n": 0, "differing": 0, "left": int(settings["batch_check"])}
        total = sum(len(g["ps"]) for g in pending)
        bar = tqdm(total=total, desc=f"shovir {ds.name} x {spec['model']}", unit="trial", disable=not progress)
        image_cache: dict = {}
        buffer: list[dict] = []
        label_cache: dict[str, dict] = {}

        def image_labels(image_id: str) -> dict:
            """The image's reference and ground-truth label columns, looked up once per image."""
            if image_id not in label_cache:
                ref_row, gt_row = ref_labels.loc[image_id], gt.loc[image_id]
                label_cache[image_id] = {**{f"ref.{c}": float(ref_row[c]) for c in CHEXPERT_CLASSES},
                                         **{f"gt.{c}": float(gt_row[c]) for c in CHEXPERT_CLASSES}}
            return label_cache[image_id]

        def flush(rows: list[dict]) -> None:
            nonlocal gen_seconds
            need = []
            seen = set()
            for r in rows:
                if r["input_sha256"] not in memo and r["input_sha256"] not in seen:
                    seen.add(r["input_sha256"])
                    need.append(r)
            timing: dict[str, float] = {}
            for batch in _chunks(need, batch_size):
                computed_before = model.computed
                t0 = time.perf_counter()
                pixels = [r.pop("_pixels") for r in batch]
                boxes = [ds.boxes_of(r["image_id"]) for r in batch] if getattr(model, "uses_boxes", False) else None
                texts = model.generate_reports(pixels, prompt=spec["prompt"], max_new_tokens=spec["max_new_tokens"],
                                               boxes=boxes)
                elapsed = time.perf_counter() - t0
                if audit["left"] > 0 and len(batch) > 1 and model.computed - computed_before == len(batch):
                    # the batch's first report again, alone and past the cache: does padding change it?
                    alone = model.model.generate_reports(pixels[:1], prompt=spec["prompt"],
                                                         max_new_tokens=spec["max_new_tokens"],
                                                         boxes=boxes[:1] if boxes else None)[0]
                    audit["n"] += 1
                    audit["left"] -= 1
                    audit["differing"] += int(str(alone) != str(texts[0]))
                gen_seconds += elapsed
                if model.computed - computed_before == len(batch):  # all generated now, none from the cache
                    timing.update((r["input_sha256"], elapsed / len(batch)) for r in batch)
                if len(texts) != len(batch):
                    raise RuntimeError(f"{spec['model']}: {len(texts)} reports for {len(batch)} images")
                memo.update((r["input_sha256"], str(t)) for r, t in zip(batch, texts))
            for r in rows:
                r.pop("_pixels", None)
                r["generated"] = memo[r["input_sha256"]]
                # seconds of generation of this trial's report (batch time / batch size); NaN when the
                # report was reused (another trial's input, the inference cache, a resumed session)
                r["gen_seconds"] = timing.pop(r["input_sha256"], float("nan"))
            labels = labeller([r["generated"] for r in rows])
            pred = _codes(labels, "pred")
            for k, r in enumerate(rows):
                r.update({col: vals[k] for col, vals in pred.items()})
            writer.append(rows)
            bar.update(len(rows))

        for g in pending:
            try:
                outputs = _perturb(ds, g, spec, image_cache, size_pool, streams)
            except EmptyBoxSetError:
                if g["condition"] != "DOCO":
                    raise
                writer.unplan(len(g["ps"]))  # never a trial: the shard's planned count says so
                bar.update(len(g["ps"]))
                continue
            image_id = g["image_id"]
            study_id, patient_id = meta[image_id]
            for (pixels, info), p in zip(outputs, g["ps"]):
                image_level = g["condition"] in IMAGE_CONDITIONS
                row = {
                    "trial_id": trial_id(g["condition"], image_id, g["target"], None if image_level else p),
                    "level": "image" if image_level else "disease",
                    "condition": g["condition"], "target": g["target"], "p": float(info.get("p", p)),
                    "image_id": image_id, "study_id": study_id, "patient_id": patient_id,
                    "input_sha256": info["sha256"], "n_boxes": len(info.get("boxes") or []),
                    "perturbation": _info_json(info), "_pixels": pixels,
                    "reference_text": ref_text[image_id],
                    **image_labels(image_id),
                }
                buffer.append(row)
            if len(buffer) >= chunk_size:
                flush(buffer)
                buffer = []
        if buffer:
            flush(buffer)
        bar.close()
        if not writer.shard_done():  # other shards still running: the last one to finish completes the record
            return shards.result(writer)
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
            batch_check_n_this_session=audit["n"], batch_check_differing_this_session=audit["differing"],
        )
    return shards.result(writer)

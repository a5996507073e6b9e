"""Export the exact model inputs of an audit, for a model that runs elsewhere (an API, another framework).

``export_inputs(out_dir, *, profile, only)`` writes, for the records of :func:`~shovir_core.audit.audit_runs`:

``images/<fingerprint>.png``  every distinct input image once (lossless; ``.npy`` for float pixels)
``trials.jsonl``              one line per exported trial: ``trial_id``, ``kind`` (``report`` or ``yes_no``),
                              ``image`` (path relative to the folder), and for ``yes_no`` the ``question``
                              (with the answer instruction appended when the arm has one), ``report`` (null:
                              report absent), ``order`` and ``prompt`` (the text block as the protocol builds it)
``export.json``               the profile, the records' specs and the answer formats ``shovir import`` reads

Trial ids: ``shovir/<trial id of the shovir record>`` and ``modalens/<arm>/<case>:<question>/<side>`` (side
``c``: the case's own image, ``d``: its substitute). Answer files key their lines by these ids.

The images are the pixels the protocols give a model -- the same perturbation code, seeds and cohort
-- so answers to them, imported, make the same records a model run inside would make.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .plan import AuditError, audit_runs

__all__ = ["export_inputs", "read_export", "PLACEHOLDER_MODEL", "EXPORT_VERSION"]

PLACEHOLDER_MODEL = "ref-blind-prior"
"""A registered model used only to resolve the specs (the inputs do not depend on the model)."""

EXPORT_VERSION = 1


def _save_image(pixels: np.ndarray, folder: Path, fingerprint: str) -> str:
    from PIL import Image

    arr = np.ascontiguousarray(pixels)
    if arr.dtype in (np.uint8, np.uint16) and (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] in (3, 4))) \
            and not (arr.dtype == np.uint16 and arr.ndim == 3):
        rel = f"images/{fingerprint[:24]}.png"
        if not (folder / rel).is_file():
            Image.fromarray(arr).save(folder / rel, format="PNG")
    else:
        rel = f"images/{fingerprint[:24]}.npy"
        if not (folder / rel).is_file():
            np.save(folder / rel, arr)
    return rel


def _shovir_rows(spec: dict, folder: Path) -> list[dict]:
    from ..models.protocol import image_fingerprint
    from ..perturb import EmptyBoxSetError, box_size_pool
    from ..protocols import shovir as sv

    resolved = sv.resolve_spec(dict(spec))
    if resolved.get("rng", "per-item") != "per-item":
        raise AuditError("audit export: the legacy rng replays are not exported; use rng: per-item")
    ds = sv.open_dataset(resolved)
    groups, _ = sv.plan_trials(resolved, ds)
    groups.sort(key=lambda g: (g["image_id"], sv.CONDITIONS.index(g["condition"]), g["target"] or ""))
    size_pool = box_size_pool(ds.boxes, ds.images) if len(ds.boxes) else None
    cache: dict = {}
    rows = []
    for g in groups:
        try:
            outputs = sv._perturb(ds, g, resolved, cache, size_pool, None)
        except EmptyBoxSetError:
            if g["condition"] != "DOCO":
                raise
            continue  # a DOCO drop has no trial (as in the record)
        image_level = g["condition"] in sv.IMAGE_CONDITIONS
        for (pixels, _info), p in zip(outputs, g["ps"]):
            fp = image_fingerprint(pixels)
            tid = sv.trial_id(g["condition"], g["image_id"], g["target"], None if image_level else p)
            rows.append({"trial_id": f"shovir/{tid}", "kind": "report", "image": _save_image(pixels, folder, fp),
                         "input": fp, "prompt": resolved["prompt"]})
    return rows


def _modalens_rows(arm: str, spec: dict, folder: Path) -> list[dict]:
    from ..models.imported import request_key
    from ..models.protocol import image_fingerprint
    from ..models.prompts import text_block
    from ..protocols import modalens as ml

    resolved = ml.resolve_spec(dict(spec))
    ds = ml._dataset(resolved["dataset"])
    cases, _ = ml.build_cases(resolved)
    reports = ml._reports(resolved, cases)
    trials = ml._trial_frame(resolved, cases, reports)
    texts = ml.trial_reports(resolved, trials, reports)
    paths = dict(zip(ds.images["image_id"], ds.images["path"]))
    images = {}
    if resolved["image"]:
        for image_id in set(trials["image_id"]) | set(trials["sub_image_id"]):
            images[image_id] = ml._load_pixels(paths[image_id])
    requests, where = ml._chunk_requests(resolved, trials, texts, images)
    saved: dict[int, str] = {}
    rows = []
    for req, (tid, side) in zip(requests, where):
        image = None
        if req.image is not None:
            key = id(req.image)
            if key not in saved:
                saved[key] = _save_image(req.image, folder, image_fingerprint(req.image))
            image = saved[key]
        rows.append({"trial_id": f"modalens/{arm}/{tid}/{side}", "kind": "yes_no", "image": image,
                     "input": request_key(req), "question": req.question, "report": req.report, "order": req.order,
                     "instruction": req.instruction, "framing": req.framing, "prompt": text_block(req),
                     "finding": req.finding})
    return rows


def export_inputs(out_dir: str | Path, *, profile: str = "demo", only: str | None = None, force: bool = False,
                  progress: bool = True) -> dict:
    """Write the audit's model inputs to ``out_dir`` (see the module docstring); returns ``export.json``'s content."""
    from tqdm import tqdm

    from ..output_dirs import check_output_dir

    folder = check_output_dir(out_dir, force=force, what="shovir audit --export")
    if (folder / "trials.jsonl").exists() and not force:
        raise AuditError(f"audit export: {folder} already holds an export; choose another folder or pass --force")
    targets = audit_runs(PLACEHOLDER_MODEL, profile=profile, only=only)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for key, (protocol, _name, spec) in tqdm(list(targets.items()), desc="export", unit="record", disable=not progress):
        spec = {k: v for k, v in spec.items() if k != "model"}
        rows += _shovir_rows(spec, folder) if protocol == "shovir" else _modalens_rows(key.split(".", 1)[1], spec, folder)
    with open(folder / "trials.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    info = {"version": EXPORT_VERSION, "profile": profile, "only": only,
            "records": {k: {"protocol": p, "spec": {kk: vv for kk, vv in s.items() if kk != "model"}}
                        for k, (p, _n, s) in targets.items()},
            "n_trials": {"report": sum(r["kind"] == "report" for r in rows),
                         "yes_no": sum(r["kind"] == "yes_no" for r in rows)},
            "answers": {"report": "JSONL {trial_id, report}; or the ShoViR-Bench output JSON "
                                  "[{image_path, prediction}] with image_path = this export's image path",
                        "yes_no": "JSONL or CSV {trial_id, answer (yes/no), [logit_yes, logit_no], [generated]}"}}
    (folder / "export.json").write_text(json.dumps(info, indent=2))
    return info


def read_export(folder: str | Path) -> tuple[dict, list[dict]]:
    """``(export.json, trials)`` of an export folder (a missing or foreign folder is an error naming it)."""
    folder = Path(folder).expanduser()
    meta, trials = folder / "export.json", folder / "trials.jsonl"
    if not meta.is_file() or not trials.is_file():
        raise AuditError(f"import: {folder} is not an audit export (export.json and trials.jsonl are missing); "
                         "make one with `shovir audit --export DIR`")
    info = json.loads(meta.read_text())
    if info.get("version") != EXPORT_VERSION:
        raise AuditError(f"import: {folder} is an export of version {info.get('version')}, this package reads "
                         f"version {EXPORT_VERSION}; export again")
    return info, [json.loads(line) for line in trials.read_text().splitlines() if line.strip()]

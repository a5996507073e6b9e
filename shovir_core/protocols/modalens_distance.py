"""The ``modalens-distance`` protocol: the vision embeddings of every ModaLens pair (App. B).

One record per (dataset, model, cohort). The cohort is rebuilt exactly as the ``modalens``
protocol builds it (:func:`shovir_core.protocols.modalens.build_cases`, same dataset, substitute
seed, SSIM settings and patient subset), so a record's rows join a ``modalens`` record of the same
cohort by ``case_id``. Each row (``trial_id`` = ``case_id``) holds the pair's ids, SSIM, view,
study-time gap and the model's vision embedding of both images
(:meth:`shovir_core.models.protocol.VLM.vision_embedding`: mean-pooled vision-tower outputs;
through the inference cache, so an image is embedded once). Distances are derived in the tables
(:mod:`shovir_core.tables.modalens_appb`): centring needs the whole cohort's mean.

Columns
    ``case_id, patient_id, study_id, image_id, sub_patient_id, sub_study_id, sub_image_id,
    pair_type, tier, ssim, view_c, view_d``; ``gap`` (substitute minus source study time, in
    ``gap_unit``: days from ``study_datetime`` where the dataset has it, else the NIH follow-up
    number; NaN across patients); ``embedding_c``, ``embedding_d`` (lists of floats),
    ``embedding_dim``; ``image_sha256_c``, ``image_sha256_d`` (pixel fingerprints).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..records import Run, RunWriter, load_run, spec_hash
from . import modalens as _ml
from .spec import Field, SpecSchema, StaleSpecError

__all__ = ["PROTOCOL", "SPEC", "resolve_spec", "execute", "pair_gaps"]

PROTOCOL = "modalens-distance"

SPEC = SpecSchema(PROTOCOL, [
    Field("dataset", str, "demo-64px", doc="dataset name or adapter:path, as in the modalens protocol"),
    Field("model", str, "ref-anchored@0.5", doc="registry name of the model whose vision tower embeds the images"),
    Field("substitute_seed", int, 0, range=(0, None)),
    Field("ssim_size", int, 896, range=(8, None), doc="side of the greyscale images SSIM compares"),
    Field("ssim_threshold", float, 0.9, range=(0.0, 1.0)),
    Field("n_patients", (int, type(None)), None, range=(1, None), doc="patient subset (null: all)"),
    Field("subset_seed", int, 0, range=(0, None)),
    Field("dataset_sha256", (str, type(None)), None, pin=True, doc="pinned dataset content hash"),
    Field("model_fingerprint", (dict, type(None)), None, pin=True, doc="pinned model identity"),
    Field("batch_cases", int, 256, range=(1, None), execution=True, doc="cases per record part"),
])
"""The declared spec: the cohort keys of :data:`shovir_core.protocols.modalens.SPEC` plus the model."""


def resolve_spec(spec: dict) -> dict:
    """Fill defaults, validate, and pin the dataset hash and the model fingerprint."""
    from ..models import model_fingerprint

    out = SPEC.resolve(spec)
    ds = _ml._dataset(out["dataset"])
    SPEC.pin(out, "dataset_sha256", ds.manifest_hash, what=f"dataset {out['dataset']!r}")
    SPEC.pin(out, "model_fingerprint", model_fingerprint(out["model"]), what=f"model {out['model']!r}")
    return out


def pair_gaps(cases: pd.DataFrame, images: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Substitute-minus-source study time of each same-patient pair, and its unit.

    Days from ``study_datetime`` when the dataset has it, else the difference of NIH follow-up
    numbers (``follow_up``); NaN for cross-patient pairs and where the dataset has neither.
    """
    img = images.set_index("image_id")
    same = (cases["patient_id"].astype(str) == cases["sub_patient_id"].astype(str)).to_numpy()
    if "study_datetime" in img.columns:
        t = pd.to_datetime(img["study_datetime"], format="ISO8601")
        gap = (t.reindex(cases["sub_image_id"]).to_numpy() - t.reindex(cases["image_id"]).to_numpy())
        gap = pd.to_timedelta(gap).total_seconds().to_numpy() / 86400.0
        unit = "days"
    elif "follow_up" in img.columns:
        f = img["follow_up"].astype(float)
        gap, unit = f.reindex(cases["sub_image_id"]).to_numpy() - f.reindex(cases["image_id"]).to_numpy(), "follow-up visits"
    else:
        return np.full(len(cases), np.nan), "none"
    return np.where(same, gap, np.nan), unit


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Embed both images of every case of ``spec``'s cohort (resolved spec); resumable by case chunks."""
    from tqdm import tqdm

    from ..models import cached, get_model
    from ..models.protocol import image_fingerprint

    ds = _ml._dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"{PROTOCOL}: dataset {spec['dataset']!r} changed since the spec was resolved")
    cases, counts = _ml.build_cases(spec)
    gaps, unit = pair_gaps(cases, ds.images)
    cases = cases.assign(gap=gaps, gap_unit=unit)
    model = cached(get_model(spec["model"]), progress=False)
    seeds = {"substitute": int(spec["substitute_seed"]), "subset": int(spec["subset_seed"])}
    paths = dict(zip(ds.images["image_id"], ds.images["path"]))
    keep = ["case_id", "patient_id", "study_id", "image_id", "sub_patient_id", "sub_study_id", "sub_image_id",
            "pair_type", "tier", "ssim", "gap", "gap_unit"]
    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model={"id": spec["model"], **model.provenance()},
                   seeds=seeds, credentialed=ds.credentialed) as writer:
        model.record_into(writer)  # the record lists the cache entries its trials came from
        todo = cases[~cases["case_id"].isin(writer.done_ids)]
        batch = SPEC.execution(execution)["batch_cases"]
        bar = tqdm(total=len(todo), desc=f"{PROTOCOL} {spec['model']}", unit="case", disable=not progress)
        dim = None
        for start in range(0, len(todo), batch):
            part = todo.iloc[start:start + batch]
            ids = list(pd.unique(pd.concat([part["image_id"], part["sub_image_id"]])))
            pixels = [_ml._load_pixels(paths[i]) for i in ids]
            emb = dict(zip(ids, model.vision_embedding(pixels)))
            sha = dict(zip(ids, (image_fingerprint(p) for p in pixels)))
            rows = part[keep].copy()
            rows.insert(0, "trial_id", rows["case_id"])
            rows["view_c"], rows["view_d"] = part["view"].to_numpy(), part["sub_view"].to_numpy()
            for side, col in (("c", "image_id"), ("d", "sub_image_id")):
                rows[f"embedding_{side}"] = [emb[i].tolist() for i in part[col]]
                rows[f"image_sha256_{side}"] = [sha[i] for i in part[col]]
            dim = len(next(iter(emb.values())))
            rows["embedding_dim"] = dim
            writer.append(rows)
            bar.update(len(part))
        bar.close()
        writer.complete(**counts, gap_unit=unit, **({"embedding_dim": int(dim)} if dim is not None else {}))
    return load_run(PROTOCOL, name, spec_hash(spec))

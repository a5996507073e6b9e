"""The ``modalens-surrogate`` protocol: an image classifier's scores of every shown image (ModaLens App. K, Table 24).

One record per (dataset, cohort, surrogate). The cohort is rebuilt exactly as the ``modalens``
protocol builds it (:func:`shovir_core.protocols.modalens.build_cases`: same dataset, substitute
seed, SSIM settings and patient subset), and every image a trial shows -- the sources and their
substitutes -- is scored once by the surrogate:

``surrogate: torchxrayvision``
    the paper's TorchXRayVision ``densenet121-res224-chex`` from a local weight file
    (:func:`shovir_core.models.xrv.load_xrv`; ``xrv_weights`` or ``$SHOVIR_XRV_WEIGHTS``; never
    downloaded); the file's SHA-256 is written into the manifest counts. Under ``$SHOVIR_STAND_INS``
    (``shovir rehearse``) a ``torchxrayvision`` entry replaces it by a CPU stand-in of the same interface
    (``tiny-xrv-densenet``, :data:`shovir_core.models.registry.SURROGATE_STAND_INS`), named in the pinned
    ``surrogate_id``;
``surrogate: reference``
    the demo's reference CNN with its own operating points (:class:`shovir_core.models.xrv.ReferenceSurrogate`).

Rows (``trial_id`` = ``<image_id>:<kind>``): ``image_id``, ``kind`` (``normalised``: operating-point
normalised, the paper's primary rule; ``raw``: probabilities) and ``scores`` (JSON ``{question: score}``
over the questions with a head). :func:`shovir_core.tables.modalens_appk.record_scores` turns a record
back into the ``{image_id: {question: score}}`` mappings Table 24 reads, so the chapter computes no
score at render time.
"""
from __future__ import annotations

import hashlib
import json
import os

import pandas as pd

from ..records import Run, RunWriter, load_run, spec_hash
from . import modalens as _ml
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = ["PROTOCOL", "SPEC", "SURROGATES", "resolve_spec", "execute"]

PROTOCOL = "modalens-surrogate"
SURROGATES = ("reference", "torchxrayvision")
STAND_IN_HEAD_SCALE = 30.0
"""Head-weight scale of the rehearsal's TorchXRayVision stand-in (:func:`shovir_core.models.xrv.tiny_xrv_densenet`):
its probabilities spread over (0, 1) on the synthetic images, so Table 24's calls are not all inside the
abstention band (with the default scale every raw probability is 0.5 +- 0.01 and every trial is excluded)."""

SPEC = SpecSchema(PROTOCOL, [
    Field("dataset", str, "demo-64px", doc="dataset name or adapter:path, as in the modalens protocol"),
    Field("surrogate", str, "reference", choices=SURROGATES,
          doc="the image classifier: the demo's reference CNN or the paper's TorchXRayVision DenseNet"),
    Field("xrv_weights", (str, type(None)), None,
          doc="torchxrayvision: the local weight file (environment variables expanded; null: $SHOVIR_XRV_WEIGHTS)"),
    Field("substitute_seed", int, 0, range=(0, None)),
    Field("ssim_size", int, 896, range=(8, None), doc="side of the greyscale images SSIM compares"),
    Field("ssim_threshold", float, 0.9, range=(0.0, 1.0)),
    Field("n_patients", (int, type(None)), None, range=(1, None), doc="patient subset (null: all)"),
    Field("subset_seed", int, 0, range=(0, None)),
    Field("dataset_sha256", (str, type(None)), None, pin=True, doc="pinned dataset content hash"),
    Field("surrogate_id", (str, dict, type(None)), None, pin=True,
          doc="pinned surrogate identity (the reference CNN's fingerprint, or TorchXRayVision's weight name)"),
    Field("batch_images", int, 512, range=(1, None), execution=True, doc="images per record part"),
])
"""The cohort keys of :data:`shovir_core.protocols.modalens.SPEC` plus the surrogate."""


def _surrogate_id(surrogate: str):
    if surrogate == "reference":
        from ..models import model_fingerprint

        return model_fingerprint("ref-image-classifier")
    from ..models.registry import stand_in_for
    from ..models.spec import code_sha256
    from ..models.xrv import XRV_WEIGHTS

    stand_in = stand_in_for("torchxrayvision")
    if stand_in is not None:  # a rehearsal: the record names its stand-in and is never the real surrogate's
        return {"name": f"torchxrayvision:{XRV_WEIGHTS}",
                "stand_in": {"name": stand_in, "sha256": code_sha256("xrv-stand-in"), "seed": 0,
                             "head_scale": STAND_IN_HEAD_SCALE}}
    return f"torchxrayvision:{XRV_WEIGHTS}"


def resolve_spec(spec: dict) -> dict:
    """Fill defaults, validate, and pin the dataset hash and the surrogate's identity."""
    out = SPEC.resolve(spec)
    ds = _ml._dataset(out["dataset"])
    SPEC.pin(out, "dataset_sha256", ds.manifest_hash, what=f"dataset {out['dataset']!r}")
    SPEC.pin(out, "surrogate_id", _surrogate_id(out["surrogate"]), what=f"surrogate {out['surrogate']!r}")
    if out["surrogate"] == "reference" and out["xrv_weights"] is not None:
        raise SpecError(f"{PROTOCOL}: xrv_weights is for surrogate: torchxrayvision")
    return out


def _classifier(spec: dict):
    from ..models.xrv import ReferenceSurrogate, load_xrv, xrv_weights_path

    if spec["surrogate"] == "reference":
        return ReferenceSurrogate(), {}
    from ..models.registry import stand_in_for

    stand_in = stand_in_for("torchxrayvision")
    if stand_in is not None:  # $SHOVIR_STAND_INS (a rehearsal): the same interface, random weights, no file
        from ..models.xrv import XRV_WEIGHTS, XRVSurrogate, tiny_xrv_densenet

        net, ops = tiny_xrv_densenet(seed=0, head_scale=STAND_IN_HEAD_SCALE)
        return XRVSurrogate(net, ops, name=f"{XRV_WEIGHTS} (stand-in: {stand_in})"), {"stand_in": stand_in}
    path = None if spec["xrv_weights"] is None else os.path.expandvars(spec["xrv_weights"])
    file = xrv_weights_path(path)
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    return load_xrv(weights_path=file), {"xrv_weights_sha256": digest}


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Score every image of ``spec``'s cohort (resolved spec); resumable by image chunks."""
    from tqdm import tqdm

    from ..models.xrv import score_images

    ds = _ml._dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"{PROTOCOL}: dataset {spec['dataset']!r} changed since the spec was resolved")
    cases, counts = _ml.build_cases(spec)
    ids = sorted(set(cases["image_id"]) | set(cases["sub_image_id"]))
    classifier, extra = _classifier(spec)
    seeds = {"substitute": int(spec["substitute_seed"]), "subset": int(spec["subset_seed"])}
    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model={"id": classifier.name},
                   seeds=seeds, credentialed=ds.credentialed) as writer:
        todo = [i for i in ids if f"{i}:normalised" not in writer.done_ids]
        batch = SPEC.execution(execution)["batch_images"]
        bar = tqdm(total=len(todo), desc=f"{PROTOCOL} {spec['surrogate']}", unit="image", disable=not progress)
        for start in range(0, len(todo), batch):
            part = todo[start:start + batch]
            rows = []
            for kind in ("normalised", "raw"):
                scores = score_images(classifier, ds.load_image, part, kind=kind)
                rows += [{"trial_id": f"{i}:{kind}", "image_id": i, "kind": kind,
                          "scores": json.dumps(scores[i], sort_keys=True)} for i in part]
            writer.append(pd.DataFrame(rows))
            bar.update(len(part))
        bar.close()
        writer.complete(**counts, n_images=len(ids), surrogate=classifier.name, **extra)
    return load_run(PROTOCOL, name, spec_hash(spec))

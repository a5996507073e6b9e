"""The ``modalens-layers`` protocol: layerwise readouts and attention knockout (ModaLens App. N.1-N.2).

The trials, cohort, questions, reports and labels are those of the ``modalens`` protocol with the
same spec keys (:mod:`shovir_core.protocols.modalens`); a transformers-backend model
(:class:`~shovir_core.models.hf.HFVLM`: MedGemma, the tiny models, ``ref-vlm``) is run on both
images of every trial with

``analysis: lens``
    the logit lens (:func:`shovir_core.models.lens.layer_logits`): per side the projected
    lowercase ``yes``/``no`` logits after the embeddings and every decoder layer, stored compactly
    as JSON (``lens_c``, ``lens_d``: ``[[yes, no], ...]``, one pair per layer, no hidden states);
``analysis: knockout``
    attention knockout (:class:`shovir_core.models.lens.Knockout`) of ``knockout_span`` for
    ``knockout_scope`` queries, ``knockout_variant`` ``cumulative`` (start layer ... last) or
    ``single`` (that layer only), for every layer of ``knockout_layers`` (null: all); per side the
    final ``yes``/``no`` logits under each start layer (``ko_c``, ``ko_d``: ``[[yes, no], ...]``
    in the order of ``ko_layers``).

Both also carry the unperturbed readout (``logit_yes_*``, ``logit_no_*``, ``margin_*``,
``readout_*``), so a record's flip rate is computed from itself. An intervention record names its
arm, span, scope, variant and layers in the spec (and so in its identity).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..records import Run, RunWriter, load_run, spec_hash
from . import modalens as ml
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = ["PROTOCOL", "SPEC", "ANALYSES", "VARIANTS", "resolve_spec", "execute", "lens_array"]

PROTOCOL = "modalens-layers"
ANALYSES = ("lens", "knockout")
VARIANTS = ("cumulative", "single")


def _schema() -> SpecSchema:
    from ..models.knockout_spans import SCOPES, SPANS  # no torch: reading a record needs none

    extra = [
        Field("analysis", str, "lens", choices=ANALYSES),
        Field("knockout_span", str, "report", choices=SPANS),
        Field("knockout_scope", str, "answer", choices=SCOPES),
        Field("knockout_variant", str, "cumulative", choices=VARIANTS),
        Field("knockout_layers", (list, type(None)), None, items=int, range=(0, None), unique=True,
              doc="start layers (null: every layer)"),
    ]
    return SpecSchema(PROTOCOL, [*ml.SPEC.fields.values(), *extra])


SPEC = _schema()
_EXTRA = ("analysis", "knockout_span", "knockout_scope", "knockout_variant", "knockout_layers")


def resolve_spec(spec: dict) -> dict:
    """The ``modalens`` resolution of the shared keys plus the analysis keys (knockout keys are
    dropped from a lens spec, so they never split its identity)."""
    full = SPEC.resolve(spec)
    base = ml.resolve_spec({k: v for k, v in spec.items() if k not in _EXTRA})
    out = {**base, **{k: full[k] for k in _EXTRA}}
    if out["analysis"] == "lens":
        for k in _EXTRA[1:]:
            out.pop(k)
    return out


def lens_array(column: pd.Series) -> np.ndarray:
    """A record's JSON column of per-layer ``[yes, no]`` pairs as an array ``(n_trials, n_layers + 1, 2)``."""
    return np.asarray([json.loads(v) for v in column], dtype=float)


def _requests(spec: dict, trials: pd.DataFrame, reports: pd.Series, images: dict):
    from ..models.protocol import ScoreRequest

    report_on = spec["report"] == "present"
    reqs = []
    for t in trials.itertuples(index=False):
        for side in ("c", "d"):
            image = images[t.image_id if side == "c" else t.sub_image_id] if spec["image"] else None
            reqs.append(ScoreRequest(image=image, question=t.question,
                                     report=reports[t.case_id] if report_on else None,
                                     order=spec["order"], instruction=spec["instruction"], finding=t.finding))
    return reqs


def _layers(spec: dict, n_layers: int) -> list[int]:
    layers = spec.get("knockout_layers")
    layers = list(range(n_layers)) if layers is None else sorted(int(x) for x in layers)
    bad = [x for x in layers if x >= n_layers]
    if bad:
        raise SpecError(f"{PROTOCOL}: knockout_layers {bad} outside 0..{n_layers - 1}")
    return layers


def _score(model, spec: dict, trials: pd.DataFrame, reports: pd.Series, images: dict) -> pd.DataFrame:
    from ..models.lens import Knockout, decoder_parts, layer_logits, token_spans

    reqs = _requests(spec, trials, reports, images)
    lens = layer_logits(model, reqs)
    out = trials.copy()
    final = lens[:, -1]
    for k, side in enumerate(("c", "d")):
        f = final[k::2]
        out[f"logit_yes_{side}"], out[f"logit_no_{side}"] = f[:, 0], f[:, 1]
        out[f"margin_{side}"] = f[:, 0] - f[:, 1]
        out[f"readout_{side}"] = np.where(f[:, 0] > f[:, 1], "yes", "no")
    if spec["analysis"] == "lens":
        for k, side in enumerate(("c", "d")):
            out[f"lens_{side}"] = [json.dumps(np.round(x, 5).tolist()) for x in lens[k::2]]
        return out
    n_layers = len(decoder_parts(model.model)["layers"])
    layers = _layers(spec, n_layers)
    spans = [token_spans(model, r) for r in reqs]
    per_layer = []
    for start in layers:
        ko = (Knockout.cumulative(spec["knockout_span"], start, n_layers, scope=spec["knockout_scope"])
              if spec["knockout_variant"] == "cumulative"
              else Knockout.single(spec["knockout_span"], start, scope=spec["knockout_scope"]))
        per_layer.append(layer_logits(model, reqs, knockout=ko, spans=spans)[:, -1])
    stacked = np.stack(per_layer, axis=1)  # (2 n, n_start, 2)
    for k, side in enumerate(("c", "d")):
        out[f"ko_{side}"] = [json.dumps(np.round(x, 5).tolist()) for x in stacked[k::2]]
    out["ko_layers"] = json.dumps(layers)
    return out


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Run the analysis of ``spec`` (resolved) on every trial; resumable by case chunks."""
    from tqdm import tqdm

    from ..models import get_model

    ds = ml._dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"{PROTOCOL}: dataset {spec['dataset']!r} changed since the spec was resolved")
    if not spec["image"]:
        raise SpecError(f"{PROTOCOL}: the layerwise analyses compare two images; image: false is not supported")
    cases, counts = ml.build_cases(spec)
    reports = ml._reports(spec, cases)
    trials = ml._trial_frame(spec, cases, reports)
    model = get_model(spec["model"])
    if not hasattr(model, "model") or not hasattr(model, "processor"):
        raise SpecError(f"{PROTOCOL}: model {spec['model']!r} is not a transformers-backend model")
    seeds = {"substitute": int(spec["substitute_seed"]), "subset": int(spec["subset_seed"])}
    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model={"id": spec["model"], **model.provenance()},
                   seeds=seeds, credentialed=ds.credentialed) as writer:
        todo = trials[~trials["trial_id"].isin(writer.done_ids)]
        paths = dict(zip(ds.images["image_id"], ds.images["path"]))
        case_ids = list(dict.fromkeys(todo["case_id"]))
        batch = SPEC.execution(execution)["batch_cases"]
        bar = tqdm(total=len(todo), desc=f"{PROTOCOL} {spec['model']} {ml.arm_label(spec)} {spec['analysis']}",
                   unit="trial", disable=not progress)
        for start in range(0, len(case_ids), batch):
            part = todo[todo["case_id"].isin(case_ids[start:start + batch])]
            images = {i: ml._load_pixels(paths[i]) for i in pd.unique(pd.concat([part["image_id"], part["sub_image_id"]]))}
            writer.append(_score(model, spec, part, reports, images))
            bar.update(len(part))
        bar.close()
        writer.complete(**counts, n_questions=int(trials["question_id"].nunique()), arm=ml.arm_label(spec),
                        analysis=spec["analysis"])
    return load_run(PROTOCOL, name, spec_hash(spec))

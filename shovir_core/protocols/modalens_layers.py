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
    in the order of ``ko_layers``). A knockout spec may run a seeded case sample
    (:func:`knockout_cases`: ``knockout_n_patients`` patients, ``knockout_n_cases`` cases among them,
    ``knockout_n_decisive`` of them decisive, drawn with ``knockout_case_seed``): the paper's knockout
    covers "400 cases and 282 patients, 300 of them decisive, at 21 of 62 layers" (App. N.2). A lens
    spec may run the same sample: Table 27's counts (6 flips = 6/400, App. N.1) are on it.

A record can be made by several processes (``shovir run --shards N``): cases are dealt to shards
(:mod:`~shovir_core.protocols.shards`, a case's questions and both its images together), after the
knockout's case sample is drawn from the whole grid.

Both also carry the unperturbed readout (``logit_yes_*``, ``logit_no_*``, ``margin_*``,
``readout_*``), so a record's flip rate is computed from itself. An intervention record names its
arm, span, scope, variant and layers in the spec (and so in its identity).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..records import Run, RunWriter
from . import modalens as ml
from . import shards
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = ["PROTOCOL", "SPEC", "ANALYSES", "VARIANTS", "resolve_spec", "execute", "lens_array", "knockout_cases",
           "SAMPLE_KEYS", "sample_fields", "sample_keys", "sample_trials"]

PROTOCOL = "modalens-layers"
ANALYSES = ("lens", "knockout")
VARIANTS = ("cumulative", "single")


def sample_fields() -> list[Field]:
    """The spec fields of the knockout's seeded case sample (:func:`knockout_cases`), shared with the
    ``modalens-interventions`` protocol's patching (App. N.2 patches on the same 400 cases)."""
    return [
        Field("knockout_n_patients", (int, type(None)), None, range=(1, None),
              doc="patients of the knockout's case sample (null: every patient); each gives at least one case"),
        Field("knockout_n_cases", (int, type(None)), None, range=(1, None),
              doc="cases of the knockout's case sample (null: every case of the sampled patients)"),
        Field("knockout_n_decisive", (int, type(None)), None, range=(0, None),
              doc="decisive cases among them (the asked finding's label differs between the two images)"),
        Field("knockout_case_seed", int, 0, range=(0, None), doc="seed of the knockout's case sample"),
    ]


def _schema() -> SpecSchema:
    from ..models.knockout_spans import SCOPES, SPANS  # no torch: reading a record needs none

    extra = [
        Field("analysis", str, "lens", choices=ANALYSES),
        Field("knockout_span", str, "report", choices=SPANS),
        Field("knockout_scope", str, "answer", choices=SCOPES),
        Field("knockout_variant", str, "cumulative", choices=VARIANTS),
        Field("knockout_layers", (list, type(None)), None, items=int, range=(0, None), unique=True,
              doc="start layers (null: every layer)"),
        *sample_fields(),
    ]
    return SpecSchema(PROTOCOL, [*ml.SPEC.fields.values(), *extra])


SPEC = _schema()
_EXTRA = ("analysis", "knockout_span", "knockout_scope", "knockout_variant", "knockout_layers")
SAMPLE_KEYS = ("knockout_n_patients", "knockout_n_cases", "knockout_n_decisive", "knockout_case_seed")


def resolve_spec(spec: dict) -> dict:
    """The ``modalens`` resolution of the shared keys plus the analysis keys (knockout keys are
    dropped from a lens spec, so they never split its identity)."""
    full = SPEC.resolve(spec)
    base = ml.resolve_spec({k: v for k, v in spec.items() if k not in (*_EXTRA, *SAMPLE_KEYS)})
    out = {**base, **{k: full[k] for k in _EXTRA}}
    if out["analysis"] == "lens":
        for k in _EXTRA[1:]:
            out.pop(k)
    out.update(sample_keys(full, PROTOCOL))
    return out


def sample_keys(full: dict, protocol: str) -> dict:
    """The case-sample keys of a resolved spec (``full``: every field filled), validated; empty when no
    sample is asked, so a spec without one keeps its identity."""
    if all(full[k] is None for k in SAMPLE_KEYS[:3]):
        return {}
    if full["knockout_n_decisive"] is not None and full["knockout_n_cases"] is None:
        raise SpecError(f"{protocol}: knockout_n_decisive needs knockout_n_cases")
    if (full["knockout_n_decisive"] or 0) > (full["knockout_n_cases"] or 0) > 0:
        raise SpecError(f"{protocol}: knockout_n_decisive = {full['knockout_n_decisive']} exceeds "
                         f"knockout_n_cases = {full['knockout_n_cases']}")
    return {k: full[k] for k in SAMPLE_KEYS}


def sample_trials(spec: dict, trials: pd.DataFrame, counts: dict) -> tuple[pd.DataFrame, dict]:
    """The trials of the spec's case sample (all of them without one) and the counts with the sample's
    cases, patients and decisive cases added."""
    if spec.get("knockout_case_seed") is None:
        return trials, counts
    trials = knockout_cases(trials, n_patients=spec["knockout_n_patients"], n_cases=spec["knockout_n_cases"],
                            n_decisive=spec["knockout_n_decisive"], seed=spec["knockout_case_seed"])
    return trials, {**counts, "n_cases_run": int(trials["case_id"].nunique()),
                    "n_patients_run": int(trials["patient_id"].nunique()),
                    "n_decisive_run": int((trials.groupby("case_id")["label_changed"].max() > 0).sum())}


def knockout_cases(trials: pd.DataFrame, *, n_patients: int | None = None, n_cases: int | None = None,
                   n_decisive: int | None = None, seed: int = 0) -> pd.DataFrame:
    """The trials of a seeded case sample (ModaLens App. N.2: "400 cases and 282 patients, 300 of them decisive").

    ``n_patients`` patients are drawn (sorted ids, ``numpy.random.default_rng(seed)``); every drawn
    patient gives one case (a decisive one when it has any), and the remaining ``n_cases`` are filled
    in a seeded random order, ``n_decisive`` decisive cases in all. A case is **decisive** when the
    asked finding's primary-policy label differs between the source and the substituted image
    (``label_changed``: the swap changes the right answer). The paper states the three counts but not
    the draw; this rule is the repository's choice and reaches all three exactly when the cohort
    allows. Too few patients or cases raise ``SpecError``.

    >>> t = pd.DataFrame({"trial_id": [f"c{i}:q" for i in range(6)], "case_id": [f"c{i}" for i in range(6)],
    ...                   "patient_id": ["p1", "p1", "p2", "p2", "p3", "p3"],
    ...                   "label_changed": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]})
    >>> s = knockout_cases(t, n_patients=3, n_cases=4, n_decisive=3, seed=0)
    >>> len(s), s["patient_id"].nunique(), int(s["label_changed"].sum())
    (4, 3, 3)
    """
    what = f"{PROTOCOL}: knockout case sample"
    cases = (trials.assign(_dec=trials["label_changed"].fillna(0).astype(float) > 0)
             .groupby("case_id", sort=True).agg(patient_id=("patient_id", "first"), decisive=("_dec", "any")))
    rng = np.random.default_rng(int(seed))
    patients = np.array(sorted(cases["patient_id"].astype(str).unique()), dtype=object)
    if n_patients is not None:
        if n_patients > len(patients):
            raise SpecError(f"{what}: {n_patients} patients asked, the cohort has {len(patients)}")
        keep = set(rng.choice(patients, size=int(n_patients), replace=False).tolist())
        cases = cases[cases["patient_id"].astype(str).isin(keep)]
    cases = cases.assign(_key=rng.permutation(len(cases)))
    if n_cases is None:
        chosen = cases.index
    else:
        ordered = cases.sort_values(["decisive", "_key"], ascending=[False, True])
        first = ordered.groupby("patient_id", sort=False).head(1) if n_patients is not None else ordered.iloc[:0]
        rest = cases.drop(first.index).sort_values("_key")
        if len(first) > n_cases:
            raise SpecError(f"{what}: {len(first)} patients need at least one case each, n_cases = {n_cases}")
        if n_decisive is None:
            extra = rest.head(n_cases - len(first))
        else:
            need = {True: n_decisive - int(first["decisive"].sum()),
                    False: n_cases - n_decisive - int((~first["decisive"]).sum())}
            parts = []
            for flag, k in need.items():
                pool = rest[rest["decisive"] == flag]
                if k < 0 or len(pool) < k:
                    raise SpecError(f"{what}: cannot reach {n_decisive} decisive of {n_cases} cases over "
                                     f"{len(first)} patients ({int(cases['decisive'].sum())} decisive of "
                                     f"{len(cases)} cases available)")
                parts.append(pool.head(k))
            extra = pd.concat(parts)
        if len(first) + len(extra) < n_cases:
            raise SpecError(f"{what}: {n_cases} cases asked, {len(cases)} available")
        chosen = first.index.append(extra.index)
    return trials[trials["case_id"].isin(set(chosen))].sort_values("trial_id").reset_index(drop=True)


def lens_array(column: pd.Series) -> np.ndarray:
    """A record's JSON column of per-layer ``[yes, no]`` pairs as an array ``(n_trials, n_layers + 1, 2)``.

    Rows of one shape (the first row's) are read as one text of numbers by NumPy's C parser, which rounds
    as Python's ``float`` and ``json`` do (the same array; ``NaN``/``Infinity`` included; a test compares):
    a million rows of 63 pairs took 37 s through ``json.loads``. Any other column is read row by row."""
    values = [str(v) for v in column]
    if not values:
        return np.zeros((0,), dtype=float)
    shape = np.shape(json.loads(values[0]))
    size = int(np.prod(shape))
    out = np.empty((len(values), *shape), dtype=float)
    step = max(1, (1 << 22) // max(size, 1))  # about 4 M numbers per parse
    for start in range(0, len(values), step):
        part = values[start:start + step]
        text = ",".join(part).replace("[", "").replace("]", "")
        flat = np.fromstring(text, dtype=float, sep=",") if size else np.zeros(0)
        if flat.size != len(part) * size or text.count(",") + 1 != flat.size:  # ragged or unparsed: row by row
            return np.asarray([json.loads(v) for v in values], dtype=float)
        out[start:start + len(part)] = flat.reshape(len(part), *shape)
    return out


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


def _spans(model, reqs: list) -> list[dict]:
    """:func:`~shovir_core.models.lens.token_spans` of each request, located once per rendered prompt and image
    size: the two sides of a trial differ only in the image's pixels, which change no token id (the processor
    expands the image placeholder to a number of tokens set by the image's size)."""
    from ..models.lens import token_spans

    found: dict[tuple, dict] = {}
    out = []
    for r in reqs:
        key = (model.render(r), None if r.image is None else tuple(np.shape(r.image)))
        if key not in found:
            found[key] = token_spans(model, r)
        out.append(found[key])
    return out


def _score(model, spec: dict, trials: pd.DataFrame, reports: pd.Series, images: dict) -> pd.DataFrame:
    from ..models.lens import Knockout, decoder_parts, layer_logits, layer_logits_each

    reqs = _requests(spec, trials, reports, images)
    if spec["analysis"] == "lens":
        lens = layer_logits(model, reqs)
    else:  # the plain readout and every knockout on one encoding of the requests
        n_layers = len(decoder_parts(model.model)["layers"])
        layers = _layers(spec, n_layers)
        kos = [Knockout.cumulative(spec["knockout_span"], start, n_layers, scope=spec["knockout_scope"])
               if spec["knockout_variant"] == "cumulative"
               else Knockout.single(spec["knockout_span"], start, scope=spec["knockout_scope"]) for start in layers]
        lens, *per_layer = layer_logits_each(model, reqs, [None, *kos], spans=_spans(model, reqs))
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
    stacked = np.stack([x[:, -1] for x in per_layer], axis=1)  # (2 n, n_start, 2)
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
    trials, counts = sample_trials(spec, trials, counts)
    model = get_model(spec["model"])
    if not hasattr(model, "model") or not hasattr(model, "processor"):
        raise SpecError(f"{PROTOCOL}: model {spec['model']!r} is not a transformers-backend model")
    seeds = {"substitute": int(spec["substitute_seed"]), "subset": int(spec["subset_seed"])}
    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model={"id": spec["model"], **model.provenance()},
                   seeds=seeds, credentialed=ds.credentialed) as writer:
        mine = shards.select(trials, writer, key="case_id")  # this shard's cases (all of them unsharded)
        todo = mine[~mine["trial_id"].isin(writer.done_ids)]
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
    return shards.result(writer)  # complete once every shard has finished

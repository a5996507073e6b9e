"""The ``modalens-interventions`` protocol: residual patching and steering (ModaLens App. N.2-N.3, Table 25).

The trials, cohort, questions, reports and labels are those of the ``modalens`` protocol with the
same spec keys (:mod:`shovir_core.protocols.modalens`), report present; a transformers-backend
model (:class:`~shovir_core.models.hf.HFVLM`) is run on both images of every trial with the
hooks of :mod:`shovir_core.models.interventions`. Each record holds one row per trial and
intervention cell, and every row names its ``arm`` (``patching`` / ``steering``), ``variant``,
``scope``, ``layer``, ``donor`` and ``scale``, with the intervened readout per side (``margin_c``,
``margin_d`` = logit(yes) - logit(no), and ``readout_*``) beside the unperturbed report-present
readout (``base_margin_*``), so a record's effects are computed from itself.

``analysis: patching`` (App. N.2, cross-condition residual patching)
    the recipient is the report-present prompt of each side; the donor the report-absent prompt of
    the same image and question (``donor: correct``) or, as the control, the report-absent prompt
    of the same question on another patient's images (``donor: wrong``: the source image of a case
    of a patient other than the trial's two, drawn with ``donor_seed`` once per case, its
    substitute image on side ``d``). The output of decoder layer ``L`` (each of ``patch_layers``;
    null: every layer) is replaced at the answer position (``scope: answer``) or over the two
    prompts' longest common token suffix (``scope: suffix``; its length per side is stored as
    ``n_patched_*``). Rows also carry the trial's own report-absent readout (``absent_margin_*``)
    and the donor's (``donor_margin_*``). A patching spec may run the knockout's seeded case sample
    (``knockout_n_patients``, ``knockout_n_cases``, ``knockout_n_decisive``, ``knockout_case_seed``:
    :func:`~shovir_core.protocols.modalens_layers.knockout_cases`): the paper's patching rates are
    on about 400 cases (the wrong donor's 14.07 % [10.78, 17.65] has a binomial interval's width at
    n = 400, the correct donor's maximum 12.25 % is 49/400), the knockout's 400 cases of App. N.2.
``analysis: steering`` (App. N.3, Table 25)
    the cohort's patients are split with ``steer_seed`` into a fit share (``fit_share``) and a
    test share. At each layer of ``steer_layers`` the direction is the difference of means of the
    answer-position residuals after that layer between the report-present runs answered ``yes``
    and those answered ``no`` on the fit patients (both sides; ``steer_classes: key``: between the
    sides whose image's answer key is yes and those whose key is no); the controls are a Gaussian random
    direction of the same norm (``variant: random``) and the same direction injected after every
    decoder layer (``variant: every_layer``). On the test trials the vector ``scale * s * v`` is
    added at the answer position of each side, ``v`` the direction (``steer_norm: unit``: divided
    by its norm) and ``s = +1`` when that side's image's answer key is yes, ``-1`` when no (``0``
    when it has none): the steer pushes each side toward its own image's key, so the
    tracks-substitute rate measures how far the direction can move the answer to the substituted
    image, and degradation how often it breaks an answer that was already right. The paper does
    not print its sign rule; this is the repository's reading (ModaLens App. N.3 scores the
    steered answer on the substitute against its key). Rows carry ``direction_norm`` and
    ``same_answer`` (the unsteered answers agree on the two images: the paper's trial set). The test
    trials may be limited to ``steer_findings`` and capped at ``steer_cases_per_finding`` cases per
    finding (a seeded draw with ``steer_seed``; :func:`cap_per_finding`): the paper scored "12 findings,
    150 cases each", 1,721 of the 1,800 trials answered the same on both images (App. N.3, Table 25).

The spec must say ``report: present`` (the runs patched or steered) and ``image: true``.
"""
from __future__ import annotations

import hashlib
import json
import time
from functools import partial

import numpy as np
import pandas as pd

from ..records import Run, RunWriter
from . import modalens as ml
from . import shards
from .modalens_layers import SAMPLE_KEYS, sample_fields, sample_keys, sample_trials
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = ["PROTOCOL", "SPEC", "ANALYSES", "SCOPES", "DONORS", "STEER_VARIANTS", "resolve_spec", "execute", "sharded",
           "wrong_donors", "split_fit_test", "cap_per_finding", "steering_trials"]

PROTOCOL = "modalens-interventions"
ANALYSES = ("patching", "steering")
SCOPES = ("answer", "suffix")
DONORS = ("correct", "wrong")
STEER_VARIANTS = ("dom", "random", "every_layer")

_PATCH_KEYS = ("patch_layers", "patch_scopes", "donors", "donor_seed")
_STEER_KEYS = ("steer_layers", "steer_variants", "steer_scales", "steer_classes", "steer_norm", "steer_seed",
               "fit_share")
_CAP_KEYS = ("steer_findings", "steer_cases_per_finding")


def _threads(value) -> str | None:
    return None if value is None or (isinstance(value, int) and value >= 1) else "use null or an integer >= 1"


def _schema() -> SpecSchema:
    extra = [
        Field("analysis", str, "patching", choices=ANALYSES),
        Field("max_patients", (int, type(None)), None, range=(1, None),
              doc="a seeded subset (subset_seed) of the cohort's patients whose trials are run (null: all)"),
        Field("patch_layers", (list, type(None)), None, items=int, range=(0, None), unique=True,
              doc="decoder layers whose output is patched (null: every layer)"),
        Field("patch_scopes", list, list(SCOPES), items=str, choices=SCOPES, min_items=1, unique=True),
        Field("donors", list, list(DONORS), items=str, choices=DONORS, min_items=1, unique=True),
        Field("donor_seed", int, 0, range=(0, None), doc="seed of the wrong-donor draw"),
        Field("steer_layers", (list, type(None)), None, items=int, range=(0, None), unique=True,
              doc="decoder layers of the steering direction (null: every layer)"),
        Field("steer_variants", list, list(STEER_VARIANTS), items=str, choices=STEER_VARIANTS, min_items=1,
              unique=True),
        Field("steer_scales", list, [0.0, 1.0, 2.0, 4.0], items=float, range=(0.0, None), min_items=1, unique=True),
        Field("steer_classes", str, "answer", choices=("answer", "key"),
              doc="classes of the difference of means: the fit runs' own answers, or each side's answer key"),
        Field("steer_norm", str, "raw", choices=("raw", "unit"),
              doc="raw: scale x the difference of means; unit: scale x its unit vector"),
        Field("steer_seed", int, 0, range=(0, None), doc="seed of the fit/test patient split and the random direction"),
        Field("fit_share", float, 0.5, range=(0.05, 0.95), doc="share of patients that fit the direction"),
        Field("steer_findings", (list, type(None)), None, items=str, choices=(*ml.FINDINGS_13, ml.COMPOSITE),
              unique=True, min_items=1, doc="findings whose test trials are steered (null: every question asked)"),
        Field("steer_cases_per_finding", (int, type(None)), None, range=(1, None),
              doc="test cases drawn per finding with steer_seed (null: all)"),
        Field("threads", (int, type(None)), None, execution=True, check=_threads,
              doc="torch intra-op threads while the record is made, restored after (null: unchanged)"),
        *sample_fields(),
    ]
    return SpecSchema(PROTOCOL, [*ml.SPEC.fields.values(), *extra])


SPEC = _schema()
_EXTRA = ("analysis", "max_patients", *_PATCH_KEYS, *_STEER_KEYS)


def resolve_spec(spec: dict) -> dict:
    """The ``modalens`` resolution of the shared keys plus the analysis keys (the other analysis's
    keys are dropped, so they never split a record's identity)."""
    full = SPEC.resolve(spec)
    base = ml.resolve_spec({k: v for k, v in spec.items()
                            if k not in (*_EXTRA, *_CAP_KEYS, *SAMPLE_KEYS) and k != "threads"})
    if base["report"] != "present" or not base["image"]:
        raise SpecError(f"{PROTOCOL}: the interventions act on the report-present runs with the image; got "
                         f"report: {base['report']!r}, image: {base['image']!r}")
    for key in ("framing", "text_control"):
        if base.get(key, "none") != "none":
            raise SpecError(f"{PROTOCOL}: {key} = {base[key]!r} is not supported (the plain report only)")
    out = {**base, **{k: full[k] for k in _EXTRA}}
    for k in (_STEER_KEYS if out["analysis"] == "patching" else _PATCH_KEYS):
        out.pop(k)
    sample = sample_keys(full, PROTOCOL)
    if sample and out["analysis"] != "patching":
        raise SpecError(f"{PROTOCOL}: the knockout's case sample (knockout_n_*) applies to patching; steering "
                         "draws its test cases with steer_cases_per_finding")
    out.update(sample)
    if out["analysis"] == "steering":
        out["steer_scales"] = sorted(float(s) for s in out["steer_scales"])
        if full["steer_findings"] is not None or full["steer_cases_per_finding"] is not None:
            out.update({k: full[k] for k in _CAP_KEYS})  # absent when null: identity unchanged
            if out["steer_findings"] is not None:
                out["steer_findings"] = [f for f in (*ml.FINDINGS_13, ml.COMPOSITE) if f in out["steer_findings"]]
    return out


def sharded(spec: dict) -> bool:
    """Both analyses are split by case over shards (``shovir run --shards N``). A steering record's shards
    also split the fit of its direction: each stages chunks of the fit's residuals in the open record and
    reads all of them (:func:`_directions`), so every shard steers along the same direction."""
    return spec["analysis"] in ANALYSES


def steering_trials(spec: dict, trials: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """``(fit mask over trials, the test trials steered)`` of a resolved steering spec: the patient
    split (:func:`split_fit_test`), then the finding list and per-finding cap (:func:`cap_per_finding`)."""
    fit = split_fit_test(trials, seed=spec["steer_seed"], share=spec["fit_share"])
    test = trials[~fit]
    if spec.get("steer_cases_per_finding") is not None or spec.get("steer_findings") is not None:
        test = cap_per_finding(test, findings=spec.get("steer_findings"), n=spec.get("steer_cases_per_finding"),
                               seed=spec["steer_seed"])
    return fit, test


def cap_per_finding(trials: pd.DataFrame, *, findings=None, n: int | None, seed: int) -> pd.DataFrame:
    """The trials of ``findings`` (None: all), at most ``n`` cases per finding drawn with ``seed``
    (ModaLens App. N.3: "12 findings, 150 cases each"); fewer cases than ``n`` keep them all.

    >>> t = pd.DataFrame({"trial_id": [f"c{i}:{f}" for i in range(4) for f in "ab"],
    ...                   "case_id": [f"c{i}" for i in range(4) for f in "ab"], "finding": list("ab") * 4})
    >>> cap_per_finding(t, findings=["a"], n=3, seed=0)["finding"].value_counts().to_dict()
    {'a': 3}
    """
    out = trials if findings is None else trials[trials["finding"].isin(list(findings))]
    missing = sorted(set(findings or ()) - set(out["finding"]))
    if missing:
        raise SpecError(f"{PROTOCOL}: steer_findings {missing} are not asked on the steering test trials")
    if n is None:
        return out.reset_index(drop=True)
    rng = np.random.default_rng(int(seed))
    keep = []
    for _, g in out.sort_values("trial_id").groupby("finding", sort=True):
        cases = np.array(sorted(g["case_id"].unique()), dtype=object)
        pick = set(rng.choice(cases, size=min(int(n), len(cases)), replace=False).tolist())
        keep.append(g[g["case_id"].isin(pick)])
    return pd.concat(keep).sort_values("trial_id").reset_index(drop=True)


def _patients_subset(spec: dict, trials: pd.DataFrame) -> pd.DataFrame:
    k = spec.get("max_patients")
    patients = np.array(sorted(trials["patient_id"].astype(str).unique()))
    if k is None or k >= len(patients):
        return trials
    keep = set(np.random.default_rng(int(spec["subset_seed"])).choice(patients, size=int(k), replace=False).tolist())
    return trials[trials["patient_id"].astype(str).isin(keep)].reset_index(drop=True)


def wrong_donors(cases: pd.DataFrame, *, seed: int) -> pd.DataFrame:
    """Per case (index ``case_id``) a donor case of a patient other than the case's source and
    substitute patients: columns ``donor_case_id``, ``donor_patient_id``, ``donor_image_c``,
    ``donor_image_d``. Drawn once over the sorted cases with ``seed``, so a chunked run draws the same.

    >>> c = pd.DataFrame({"case_id": ["a", "b", "c"], "patient_id": ["p1", "p2", "p3"],
    ...                   "sub_patient_id": ["p2", "p1", "p1"], "image_id": ["ia", "ib", "ic"],
    ...                   "sub_image_id": ["ib", "ia", "ia"]})
    >>> wrong_donors(c, seed=0)["donor_case_id"].tolist()
    ['c', 'c', 'b']
    """
    c = cases.drop_duplicates("case_id").sort_values("case_id").reset_index(drop=True)
    rng = np.random.default_rng(int(seed))
    pat, sub = c["patient_id"].astype(str).to_numpy(), c["sub_patient_id"].astype(str).to_numpy()
    rows = []
    for i in range(len(c)):
        ok = np.flatnonzero((pat != pat[i]) & (pat != sub[i]))
        if not ok.size:
            raise SpecError(f"{PROTOCOL}: case {c['case_id'][i]!r} has no case of another patient to donate")
        j = int(rng.choice(ok))
        rows.append({"case_id": c["case_id"][i], "donor_case_id": c["case_id"][j], "donor_patient_id": pat[j],
                     "donor_image_c": c["image_id"][j], "donor_image_d": c["sub_image_id"][j]})
    return pd.DataFrame(rows).set_index("case_id")


def split_fit_test(trials: pd.DataFrame, *, seed: int, share: float) -> np.ndarray:
    """Boolean per trial: its patient is in the fit share (a seeded draw of ``round(share * n)``
    of the sorted patients, at least one and at most all but one)."""
    patients = np.array(sorted(trials["patient_id"].astype(str).unique()))
    if len(patients) < 2:
        raise SpecError(f"{PROTOCOL}: steering needs at least two patients (fit and test), got {len(patients)}")
    k = min(max(int(round(share * len(patients))), 1), len(patients) - 1)
    fit = set(np.random.default_rng(int(seed)).choice(patients, size=k, replace=False).tolist())
    return trials["patient_id"].astype(str).isin(fit).to_numpy()


def _request(spec: dict, image, t, report: str | None):
    from ..models.protocol import ScoreRequest

    return ScoreRequest(image=image, question=t.question, report=report, order=spec["order"],
                        instruction=spec["instruction"], finding=t.finding)


def _layers(requested, n_layers: int, key: str) -> list[int]:
    layers = list(range(n_layers)) if requested is None else sorted(int(x) for x in requested)
    bad = [x for x in layers if x >= n_layers]
    if bad:
        raise SpecError(f"{PROTOCOL}: {key} {bad} outside 0..{n_layers - 1}")
    return layers


def _margin(logits: np.ndarray) -> np.ndarray:
    return (logits[:, 0] - logits[:, 1]).astype(float)


def _ids_cache(model):
    from ..models.interventions import token_ids

    cache: dict = {}

    def ids(req) -> list[int]:
        key = (model.render(req), req.image is None)
        if key not in cache:
            cache[key] = token_ids(model, req)
        return cache[key]
    return ids


def _suffix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(reversed(a), reversed(b)):
        if x != y:
            break
        n += 1
    return n


def _base_columns(part: pd.DataFrame) -> pd.DataFrame:
    keep = ["trial_id", "case_id", "patient_id", "sub_patient_id", "study_id", "image_id", "sub_image_id",
            "question_id", "finding", "is_composite", "target_c", "target_d", "label_changed", "pair_type", "tier"]
    out = part[[k for k in keep if k in part.columns]].rename(columns={"trial_id": "base_trial_id"})
    return out.reset_index(drop=True)


def _patch_rows(model, spec: dict, part: pd.DataFrame, reports: pd.Series, images: dict, donors: pd.DataFrame,
                n_layers: int) -> pd.DataFrame:
    from ..models import interventions as iv

    layers = _layers(spec["patch_layers"], n_layers, "patch_layers")
    ids = _ids_cache(model)
    rec, correct, wrong = [], [], []
    for t in part.itertuples(index=False):
        dn = donors.loc[t.case_id]
        for side, img, wimg in (("c", t.image_id, dn["donor_image_c"]), ("d", t.sub_image_id, dn["donor_image_d"])):
            rec.append(_request(spec, images[img], t, reports[t.case_id]))
            correct.append(_request(spec, images[img], t, None))
            wrong.append(_request(spec, images[wimg], t, None))
    base = iv.readout_logits(model, rec)
    donor_reqs = {"correct": correct, "wrong": wrong}
    frames = []
    head = _base_columns(part)
    for donor in spec["donors"]:
        dreqs = donor_reqs[donor]
        suffix = np.array([_suffix(ids(r), ids(d)) for r, d in zip(rec, dreqs)])
        k = int(suffix.max()) if "suffix" in spec["patch_scopes"] else 1
        resid, dlogits = iv.residuals(model, dreqs, layers=layers, last=k, with_logits=True, store="cpu")
        for scope in spec["patch_scopes"]:
            n_pos = np.ones(len(rec), dtype=int) if scope == "answer" else suffix
            each = iv.patched_logits_each(model, rec, layers=layers, donor=resid, n_positions=n_pos)
            for j, layer in enumerate(layers):
                out = each[:, j]
                f = head.copy()
                f["arm"], f["variant"], f["scope"], f["layer"], f["donor"] = "patching", "residual", scope, layer, donor
                f["scale"] = np.nan
                f["donor_case_id"] = (part["case_id"].map(donors["donor_case_id"]).to_numpy() if donor == "wrong"
                                      else part["case_id"].to_numpy())
                for s, side in enumerate(("c", "d")):
                    m = _margin(out[s::2])
                    f[f"margin_{side}"] = m
                    f[f"readout_{side}"] = np.where(m > 0, "yes", "no")
                    f[f"base_margin_{side}"] = _margin(base[s::2])
                    f[f"donor_margin_{side}"] = _margin(dlogits[s::2])
                    f[f"n_patched_{side}"] = n_pos[s::2]
                frames.append(f)
        if donor == "correct":
            absent = _margin(dlogits[0::2]), _margin(dlogits[1::2])
    out = pd.concat(frames, ignore_index=True)
    if "correct" not in spec["donors"]:
        a = iv.readout_logits(model, correct)
        absent = _margin(a[0::2]), _margin(a[1::2])
    n_cells = len(out) // len(part)
    out["absent_margin_c"] = np.tile(absent[0], n_cells)
    out["absent_margin_d"] = np.tile(absent[1], n_cells)
    out.insert(0, "trial_id", out["base_trial_id"] + ":" + out["donor"] + ":" + out["scope"] + ":L"
               + out["layer"].astype(str))
    return out


def _model_tag(model) -> str:
    """A short hash of the model's identity (weights, dtype, processor, template -- not its host path or device
    index, which differ between a record's shards): staged fit chunks of another model are never read."""
    return hashlib.sha256(json.dumps(model.identity(), sort_keys=True, default=str).encode()).hexdigest()[:12]


def _directions(model, spec: dict, fit: pd.DataFrame, reports: pd.Series, paths: dict, n_layers: int,
                writer: RunWriter, batch_cases: int) -> dict:
    """Per steering layer the difference-of-means direction and its random control (float64).

    The fit's answer-position residuals and readouts are computed in chunks of ``batch_cases`` fit cases (in
    the fit's order), each staged in the open record (:meth:`~shovir_core.records.RunWriter.stage`) under a
    claim: a shard computes its own chunks, then any chunk no process has staged or claimed, then waits for
    the chunks its partners are computing (a dead process's claim goes with it, and its chunk is taken here).
    Every shard -- and a single process, which computes every chunk itself -- then reads all the chunks in
    the fit's order, so all of them fit the same direction. A killed run resumes from the staged chunks.
    """
    from ..models import interventions as iv
    from ..records.stage import Stage

    layers = _layers(spec["steer_layers"], n_layers, "steer_layers")
    stage = writer.stage(f"steer-fit-{_model_tag(model)}")
    case_ids = list(dict.fromkeys(fit["case_id"]))
    chunks = []
    for start in range(0, len(case_ids), batch_cases):
        part = fit[fit["case_id"].isin(case_ids[start:start + batch_cases])]
        ids = [f"{t}:{side}" for t in part["trial_id"] for side in ("c", "d")]  # one request per side
        chunks.append((part, ids, Stage.key(ids)))

    def compute(part: pd.DataFrame, ids: list[str]) -> None:
        need = pd.unique(pd.concat([part["image_id"], part["sub_image_id"]]))
        images = {i: ml._load_pixels(paths[i]) for i in need}
        reqs, keys = [], []
        for t in part.itertuples(index=False):
            for img, key in ((t.image_id, t.target_c), (t.sub_image_id, t.target_d)):
                reqs.append(_request(spec, images[img], t, reports[t.case_id]))
                keys.append(key)
        # each side's questions share one prefill of its image and report
        resid, logits = iv.answer_residuals_at(model, reqs, layers=layers)
        stage.save(pd.DataFrame({"trial_id": ids, "key": np.asarray(keys, dtype=float)}),
                   {"resid": resid.numpy(), "logits": logits})

    mine = set(shards.mine([key for _, _, key in chunks], writer.shard))
    order = [c for c in chunks if c[2] in mine] + [c for c in reversed(chunks) if c[2] not in mine]
    while True:
        for part, ids, key in order:
            stage.run_claimed(key, partial(compute, part, ids))
        if all(stage.has(key) for _, _, key in chunks):
            break
        time.sleep(1.0)  # the last chunks are being computed by other processes
    resid, logits, keys = [], [], []
    for part, ids, _ in chunks:
        got = stage.load(ids)
        if got is None:  # unreadable: computed again
            compute(part, ids)
            got = stage.load(ids)
        rows, arrays = got
        resid.append(arrays["resid"])
        logits.append(arrays["logits"])
        keys.append(rows["key"].to_numpy(dtype=float))
    resid, logits, keys = np.concatenate(resid), np.concatenate(logits), np.concatenate(keys)
    if spec["steer_classes"] == "answer":
        yes, ok = logits[:, 0] > logits[:, 1], np.ones(len(keys), dtype=bool)
    else:
        yes, ok = keys == 1, ~np.isnan(keys)
    resid, yes = resid[ok], yes[ok]
    out = {}
    for j, layer in enumerate(layers):
        dom = iv.mean_difference(resid[:, j], yes)
        rnd = iv.random_direction(dom, rng=np.random.default_rng([int(spec["steer_seed"]), layer]))
        out[layer] = {"dom": dom, "random": rnd}
    return out


def _steer_rows(model, spec: dict, part: pd.DataFrame, reports: pd.Series, images: dict, directions: dict,
                n_layers: int) -> pd.DataFrame:
    from ..models import interventions as iv

    reqs, signs = [], []
    for t in part.itertuples(index=False):
        for img, target in ((t.image_id, t.target_c), (t.sub_image_id, t.target_d)):
            reqs.append(_request(spec, images[img], t, reports[t.case_id]))
            signs.append(0.0 if pd.isna(target) else (1.0 if target == 1 else -1.0))
    sign = np.asarray(signs)[:, None]
    head = _base_columns(part)
    cells, jobs = [], []  # every (layer, variant, scale) cell; the steered ones run together on one encoding
    for layer, dirs in directions.items():
        for variant in spec["steer_variants"]:
            v = dirs["random" if variant == "random" else "dom"]
            norm = float(np.linalg.norm(v))
            unit = v / norm if spec["steer_norm"] == "unit" else v
            at = list(range(n_layers)) if variant == "every_layer" else [layer]
            for scale in spec["steer_scales"]:
                cells.append((layer, variant, norm, scale, None if scale == 0.0 else len(jobs)))
                if scale != 0.0:
                    jobs.append(((scale * sign * unit[None, :]).astype(np.float32), at))
    # the steered readouts and the unsteered one (``base``) from one clean pass per batch
    steered, base = iv.steered_logits_each(model, reqs, jobs)
    same = (base[0::2, 0] > base[0::2, 1]) == (base[1::2, 0] > base[1::2, 1])
    frames = []
    for layer, variant, norm, scale, job in cells:
        out = base if job is None else steered[job]
        f = head.copy()
        f["arm"], f["variant"], f["scope"], f["layer"], f["donor"] = "steering", variant, "answer", layer, "none"
        f["scale"] = float(scale)
        f["direction_norm"] = norm
        f["same_answer"] = same
        for s, side in enumerate(("c", "d")):
            m = _margin(out[s::2])
            f[f"margin_{side}"] = m
            f[f"readout_{side}"] = np.where(m > 0, "yes", "no")
            f[f"base_margin_{side}"] = _margin(base[s::2])
            f[f"sign_{side}"] = sign[s::2, 0]
        frames.append(f)
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "trial_id", out["base_trial_id"] + ":" + out["variant"] + ":L" + out["layer"].astype(str)
               + ":s" + out["scale"].map(lambda s: f"{s:g}"))
    return out


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Run the analysis of ``spec`` (resolved) on every trial; resumable by case chunks."""
    import torch
    from tqdm import tqdm

    from ..models import get_model
    from ..models.lens import decoder_parts

    ds = ml._dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"{PROTOCOL}: dataset {spec['dataset']!r} changed since the spec was resolved")
    cases, counts = ml.build_cases(spec)
    reports = ml._reports(spec, cases)
    trials = _patients_subset(spec, ml._trial_frame(spec, cases, reports))
    trials, counts = sample_trials(spec, trials, counts)  # patching on the knockout's case sample (App. N.2)
    model = get_model(spec["model"])
    if not hasattr(model, "model") or not hasattr(model, "processor"):
        raise SpecError(f"{PROTOCOL}: model {spec['model']!r} is not a transformers-backend model")
    n_layers = len(decoder_parts(model.model)["layers"])
    exe = SPEC.execution(execution)
    seeds = {"substitute": int(spec["substitute_seed"]), "subset": int(spec["subset_seed"])}
    paths = dict(zip(ds.images["image_id"], ds.images["path"]))
    old_threads = torch.get_num_threads()
    if exe.get("threads"):
        torch.set_num_threads(int(exe["threads"]))
    try:
        if spec["analysis"] == "patching":
            seeds["donor"] = int(spec["donor_seed"])
            donors = wrong_donors(cases, seed=spec["donor_seed"])  # drawn over the whole cohort
            run_trials = trials
            first = (lambda t: f"{t}:{spec['donors'][0]}:{spec['patch_scopes'][0]}:L"
                     f"{_layers(spec['patch_layers'], n_layers, 'patch_layers')[0]}")
        else:
            seeds["steer"] = int(spec["steer_seed"])
            fit, run_trials = steering_trials(spec, trials)
            l0 = _layers(spec["steer_layers"], n_layers, "steer_layers")[0]
            first = lambda t: f"{t}:{spec['steer_variants'][0]}:L{l0}:s{spec['steer_scales'][0]:g}"  # noqa: E731
        with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model={"id": spec["model"], **model.provenance()},
                       seeds=seeds, credentialed=ds.credentialed) as writer:
            if spec["analysis"] == "steering":  # fitted together by the record's shards
                directions = _directions(model, spec, trials[fit], reports, paths, n_layers, writer,
                                         int(exe["batch_cases"]))
            grid = run_trials  # the whole grid, not this shard's part
            run_trials = shards.select(run_trials, writer, key="case_id")  # this shard's cases (all unsharded)
            done = writer.done_ids
            todo = run_trials[~run_trials["trial_id"].map(first).isin(done)]
            case_ids = list(dict.fromkeys(todo["case_id"]))
            bar = tqdm(total=len(todo), desc=f"{PROTOCOL} {spec['model']} {spec['analysis']}", unit="trial",
                       disable=not progress)
            for start in range(0, len(case_ids), exe["batch_cases"]):
                part = todo[todo["case_id"].isin(case_ids[start:start + exe["batch_cases"]])].reset_index(drop=True)
                ims = ["image_id", "sub_image_id"]
                if spec["analysis"] == "patching":
                    dn = donors.loc[part["case_id"]]
                    need = pd.unique(pd.concat([part[c] for c in ims] + [dn["donor_image_c"], dn["donor_image_d"]]))
                else:
                    need = pd.unique(pd.concat([part[c] for c in ims]))
                images = {i: ml._load_pixels(paths[i]) for i in need}
                rows = (_patch_rows(model, spec, part, reports, images, donors, n_layers)
                        if spec["analysis"] == "patching"
                        else _steer_rows(model, spec, part, reports, images, directions, n_layers))
                writer.append(rows)
                bar.update(len(part))
            bar.close()
            extra = {"n_layers": n_layers, "n_trials_run": int(len(grid)),  # patching: every trial; steering: the test's
                     "n_patients_run": int(grid["patient_id"].nunique())}
            if spec["analysis"] == "steering":
                extra["n_findings_run"] = int(grid["finding"].nunique())
                extra["n_fit_trials"] = int(fit.sum())
                extra["n_fit_patients"] = int(trials[fit]["patient_id"].nunique())
                extra["direction_norms"] = json.dumps({str(k): float(np.linalg.norm(v["dom"]))
                                                       for k, v in directions.items()})
            writer.complete(**{**counts, **extra}, n_questions=int(trials["question_id"].nunique()),
                            arm=ml.arm_label(spec), analysis=spec["analysis"])
    finally:
        torch.set_num_threads(old_threads)
    return shards.result(writer)  # complete once every shard has finished

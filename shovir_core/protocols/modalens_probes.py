"""The ``modalens-probes`` protocol: frozen-protocol probes and the tuned lens (ModaLens App. N.1, N.3; Tables 26, 34).

Cases, questions, reports and labels are those of the ``modalens`` protocol with the same spec keys
(:mod:`shovir_core.protocols.modalens`: the **evaluation cohort**, "test split"); the model must be a
transformers-backend model (:class:`~shovir_core.models.hf.HFVLM`). Two analyses:

``analysis: probe`` (Table 26)
    A frozen probe configuration (:func:`probe_config`: layers, findings, split rule, probe and test
    settings, model and dataset identity) is hashed (:func:`shovir_core.stats.probes.config_sha256`)
    **before** any model call; its SHA-256 is written into every row (``protocol_sha256``) and the
    manifest (``counts.protocol_sha256`` beside ``counts.protocol``, the configuration as JSON), and
    checked again after the last row (a changed configuration raises
    :class:`~shovir_core.stats.probes.FrozenConfigError`; a resumed record whose rows carry another
    hash is refused). Then

    1. the test split: per trial both images are scored; the residuals at the answer position of the
       source-image run (side ``c``) at ``probe_layer`` and of the substitute-image run (side ``d``) at
       ``label_probe_layer`` are kept (staged in the partial record, removed when it completes: never
       in its rows); the saliency baselines of side ``c`` are computed
       (:func:`~shovir_core.models.residuals.image_attention_mass`,
       :func:`~shovir_core.models.residuals.image_input_gradient`);
    2. two linear probes (:func:`~shovir_core.stats.probes.fit_probe`, patient-grouped folds): the
       paper's probe of **swap-induced answer change** (target: the readouts of the two images differ)
       at ``probe_layer`` (side ``c``), and a probe of the **substitute image's label** (``target_d``,
       side ``d``) at ``label_probe_layer`` -- the substitute, because on the one-question design the
       source's label is fixed by the question asked (a primary positive finding, or the composite with
       target no), while the substitute's label for the same question varies with the image; the test
       split's rows carry their out-of-fold scores;
    3. the **disjoint cohort**: ``probe_n_patients`` patients drawn with ``probe_seed``
       (:func:`~shovir_core.stats.probes.disjoint_patients`) outside the evaluation patients and the
       patients of their substitutes, either from the evaluation dataset's case pool
       (``probe_pool: null``; a disjoint case's substitute must be outside them too) or from another
       dataset, the paper's **training pool** (``probe_pool: "mimic-jpg-train:$SHOVIR_MIMIC_JPG"``:
       "650 patients drawn with seed 0 from the training pool", App. N.3; its content hash is pinned
       as ``probe_pool_sha256``). From a pool the patients are drawn among those with a frontal image
       first, and only the drawn patients are paired (substitutes among their own studies, the
       cross-patient tier among the drawn patients), so a training split of 200,000 studies is never
       compared image by image; its trials are scored by the probes fitted on the whole test split, frozen.

    Row outputs: ``split`` (``test`` / ``disjoint``), the readouts and margins of both sides, the logit
    lens of both sides (``lens_c``, ``lens_d``: JSON ``[[yes, no], ...]`` per layer, for the settling
    layer), ``attention_mass``, ``input_gradient``, ``probe_flip_score``, ``probe_label_score`` (NaN
    where the target is excluded) -- never a hidden state.

``analysis: tuned-lens`` (Table 34)
    A :class:`~shovir_core.models.tuned_lens.TunedLens` is trained (deterministic for ``lens_seed``) on
    the text corpus ``lens_corpus`` minus a held-out share ``lens_heldout``; rows of ``kind: corpus``
    hold, per held-out text, the per-layer KL to the final distribution of the logit and the tuned lens
    (``kl_logit``, ``kl_tuned``); rows of ``kind: trial`` hold per side the per-layer projected
    ``[yes, no]`` logits of both lenses (``lens_c``, ``tuned_c``, ...) and their KL to the final
    distribution at the answer position (``kl_logit_c``, ``kl_tuned_c``, ...). The translators' SHA-256
    and training loss are in the manifest counts. A resumed record retrains the same translators.

Both are resumable by chunks of cases (``batch_cases``). The probe record writes no row before its
probes are fitted on the whole test split, so the chunks of both splits (rows and the two feature arrays)
are staged in the record (:class:`~shovir_core.records.stage.Stage`, keyed by the frozen protocol's hash):
a run killed anywhere -- in the test split, which at the paper's scale is most of the record's model
time, or in the disjoint cohort -- computes no staged chunk again, and shards of the record split every
chunk's model work (:func:`sharded`), the fit and the writing of the rows being left to one of them.
"""
from __future__ import annotations

import json
import os
from functools import partial

import numpy as np
import pandas as pd

from ..records import Run, RunWriter
from . import modalens as ml
from . import shards
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = ["PROTOCOL", "SPEC", "ANALYSES", "resolve_spec", "execute", "probe_config", "cohorts", "sharded"]

PROTOCOL = "modalens-probes"
ANALYSES = ("probe", "tuned-lens")
_PROBE = ("probe_layer", "label_probe_layer", "probe_n_patients", "probe_seed", "probe_folds", "probe_C",
          "probe_n_draws", "probe_alpha")
_POOL = ("probe_pool", "probe_pool_sha256")
_CORPUS = ("lens_corpus_path", "lens_corpus_sha256", "lens_max_texts")


def _corpus_keys(full: dict) -> dict:
    """The corpus keys of a resolved tuned-lens spec: the local corpus's path and pinned file hash
    (WikiText-103), the text cap; absent when unset, so a spec without them keeps its identity."""
    import hashlib

    out = {} if full["lens_max_texts"] is None else {"lens_max_texts": full["lens_max_texts"]}
    if full["lens_corpus"] != "wikitext-103":
        if full["lens_corpus_path"] is not None:
            raise SpecError(f"{PROTOCOL}: lens_corpus_path is for lens_corpus: wikitext-103, "
                             f"not {full['lens_corpus']!r}")
        return out
    if full["lens_corpus_path"] is None or "$" in os.path.expandvars(full["lens_corpus_path"]):
        raise SpecError(f"{PROTOCOL}: lens_corpus: wikitext-103 needs lens_corpus_path, a local WikiText-103 copy "
                         f"(got {full['lens_corpus_path']!r}; set SHOVIR_WIKITEXT103)")
    from ..models.tuned_lens import wikitext_file

    h = hashlib.sha256()
    with open(wikitext_file(os.path.expandvars(full["lens_corpus_path"])), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    pinned = {"lens_corpus_sha256": full["lens_corpus_sha256"]}
    SPEC.pin(pinned, "lens_corpus_sha256", h.hexdigest(), what=f"the corpus at {full['lens_corpus_path']!r}")
    return {**out, "lens_corpus_path": full["lens_corpus_path"], **pinned}
_LENS = ("lens_corpus", "lens_steps", "lens_lr", "lens_batch_texts", "lens_max_tokens", "lens_seed", "lens_heldout",
         "lens_kl")


def _schema() -> SpecSchema:
    extra = [
        Field("analysis", str, "probe", choices=ANALYSES),
        Field("probe_layer", int, 20, range=(0, None), doc="lens entry of the swap-change probe (0 = embeddings)"),
        Field("label_probe_layer", (int, type(None)), None, range=(0, None),
              doc="lens entry of the image-label probe (null: the last layer)"),
        Field("probe_n_patients", int, 650, range=(1, None), doc="patients of the disjoint cohort"),
        Field("probe_pool", (str, type(None)), None,
              doc="dataset of the disjoint cohort's pool (null: the evaluation dataset; the paper's: the "
                  "training split, mimic-jpg-train:$SHOVIR_MIMIC_JPG)"),
        Field("probe_pool_sha256", (str, type(None)), None, pin=True, doc="pinned content hash of probe_pool"),
        Field("probe_seed", int, 0, range=(0, None), doc="seed of the disjoint-cohort draw and the probe folds"),
        Field("probe_folds", int, 5, range=(2, None)),
        Field("probe_C", float, 1.0, range=(0.0, None), doc="inverse L2 strength of the logistic probe"),
        Field("probe_n_draws", int, 10000, range=(1, None), doc="patient-clustered bootstrap draws of the test"),
        Field("probe_alpha", float, 0.05, range=(0.0, 1.0), doc="two-sided level of the test"),
        Field("lens_corpus", str, "iu-reports", choices=("iu-reports", "wikitext-103"),
              doc="text corpus of the tuned lens (the paper's: wikitext-103, a local copy at lens_corpus_path)"),
        Field("lens_corpus_path", (str, type(None)), None,
              doc="folder (or file) of a local WikiText-103 copy in its released format (wiki.train.tokens); "
                  "environment variables are expanded ($SHOVIR_WIKITEXT103)"),
        Field("lens_corpus_sha256", (str, type(None)), None, pin=True, doc="pinned SHA-256 of the corpus file"),
        Field("lens_max_texts", (int, type(None)), None, range=(2, None),
              doc="texts drawn with lens_seed from the corpus before the held-out split (null: all)"),
        Field("lens_steps", int, 200, range=(0, None)),
        Field("lens_lr", float, 1e-3, range=(0.0, None)),
        Field("lens_batch_texts", int, 16, range=(1, None)),
        Field("lens_max_tokens", int, 64, range=(2, None)),
        Field("lens_seed", int, 0, range=(0, None)),
        Field("lens_heldout", float, 0.1, range=(0.0, 1.0), doc="share of the corpus held out of training"),
        Field("lens_kl", str, "full", choices=("full", "readout"),
              doc="vocabulary of the KL: the full vocabulary or the yes/no readout rows"),
        Field("threads", (int, type(None)), 1, range=(1, None), execution=True,
              doc="torch intra-op threads during the run (restored after; null: leave as is); one thread is "
                  "many times faster than two for a model as small as ref-vlm on a shared CPU"),
    ]
    return SpecSchema(PROTOCOL, [*ml.SPEC.fields.values(), *extra])


SPEC = _schema()


def sharded(spec: dict) -> bool:
    """Probe records are split over shards (``shovir run --shards N``) by chunks of both splits' cases,
    staged until one process fits the probes (:func:`_execute_probe`); a tuned-lens record is made whole by
    one shard (:func:`~shovir_core.protocols.whole_record_shards`), since every shard would train the lens."""
    return spec["analysis"] == "probe"


def resolve_spec(spec: dict) -> dict:
    """The ``modalens`` resolution of the shared keys plus the analysis keys (the other analysis's keys dropped)."""
    full = SPEC.resolve(spec)
    base = ml.resolve_spec({k: v for k, v in spec.items()
                            if k not in ("analysis", "threads", *_PROBE, *_LENS, *_POOL, *_CORPUS)})
    keep = _PROBE if full["analysis"] == "probe" else _LENS
    out = {**base, "analysis": full["analysis"], **{k: full[k] for k in keep}}
    if full["analysis"] == "tuned-lens":
        out.update(_corpus_keys(full))
    if full["analysis"] == "probe" and full["probe_pool"] is not None:  # absent when null: identity unchanged
        pool = ml._dataset(full["probe_pool"])
        pinned = {"probe_pool_sha256": full["probe_pool_sha256"]}
        SPEC.pin(pinned, "probe_pool_sha256", pool.manifest_hash, what=f"probe_pool {full['probe_pool']!r}")
        out.update(probe_pool=full["probe_pool"], **pinned)
    return out


# --------------------------------------------------------------------------- cohorts
def cohorts(spec: dict) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(evaluation cases, disjoint-cohort cases, counts) of a resolved probe spec."""
    from ..stats.probes import disjoint_patients

    test, _ = ml.build_cases(spec)
    exclude = set(test["patient_id"].astype(str)) | set(test["sub_patient_id"].astype(str))
    if spec.get("probe_pool") is not None:
        pool_spec = pool_dataset_spec(spec)
        ds = ml._dataset(pool_spec["dataset"])
        if ds.manifest_hash != pool_spec["dataset_sha256"]:
            raise StaleSpecError(f"{PROTOCOL}: probe_pool {spec['probe_pool']!r} changed since the spec was resolved")
        of = dict(zip(ds.images["image_id"], ds.images["patient_id"].astype(str)))
        chosen, counts = disjoint_patients([of[i] for i in ml._source_pool(ds)], exclude=exclude,
                                           n=int(spec["probe_n_patients"]), seed=int(spec["probe_seed"]))
        disjoint, _ = ml.build_cases({**pool_spec, "n_patients": None}, patients=chosen)
        disjoint = disjoint[~disjoint["sub_patient_id"].astype(str).isin(exclude)].reset_index(drop=True)
    else:
        pool, _ = ml.build_cases({**spec, "n_patients": None})
        eligible = pool[~pool["patient_id"].astype(str).isin(exclude)
                        & ~pool["sub_patient_id"].astype(str).isin(exclude)]
        chosen, counts = disjoint_patients(eligible["patient_id"].astype(str), exclude=exclude,
                                           n=int(spec["probe_n_patients"]), seed=int(spec["probe_seed"]))
        disjoint = eligible[eligible["patient_id"].astype(str).isin(set(chosen))].reset_index(drop=True)
    counts = {"n_test_cases": int(len(test)), "n_test_patients": int(test["patient_id"].nunique()),
              "n_excluded_patients": len(exclude), "n_available_patients": counts["n_available"],
              "n_pool_patients": counts["n_pool"], "n_disjoint_patients": len(chosen),
              "n_disjoint_cases": int(len(disjoint))}
    return test, disjoint, counts


def pool_dataset_spec(spec: dict) -> dict:
    """The spec whose ``dataset`` is the disjoint cohort's (the evaluation dataset, or ``probe_pool``)."""
    if spec.get("probe_pool") is None:
        return spec
    return {**spec, "dataset": spec["probe_pool"], "dataset_sha256": spec["probe_pool_sha256"]}


def probe_config(spec: dict, n_layers: int) -> dict:
    """The frozen configuration of a probe run (plain JSON; hashed before the run, checked after it)."""
    label_layer = n_layers if spec["label_probe_layer"] is None else int(spec["label_probe_layer"])
    for key, layer in (("probe_layer", int(spec["probe_layer"])), ("label_probe_layer", label_layer)):
        if layer > n_layers:
            raise SpecError(f"{PROTOCOL}: {key} = {layer} outside 0..{n_layers} (lens entries of {spec['model']})")
    return {
        "protocol": PROTOCOL, "model": spec["model"], "model_fingerprint": spec["model_fingerprint"],
        "dataset_sha256": spec["dataset_sha256"],
        "probe": {"flip_layer": int(spec["probe_layer"]), "label_layer": label_layer, "position": "answer",
                  "flip_side": "source image", "label_side": "substitute image", "label_auroc": "within question",
                  "estimator": "StandardScaler + LogisticRegression (lbfgs)",
                  "C": float(spec["probe_C"]), "folds": int(spec["probe_folds"]), "fold_seed": int(spec["probe_seed"])},
        "questions": {"design": spec["design"], "report": spec["report"], "order": spec["order"],
                      "instruction": spec["instruction"], "policy": spec["primary_policy"]},
        "split": {"test": {"n_patients": spec["n_patients"], "subset_seed": int(spec["subset_seed"])},
                  "disjoint": {"n_patients": int(spec["probe_n_patients"]), "seed": int(spec["probe_seed"]),
                               "excluded": "test patients and the patients of their substitutes",
                               **({"pool": spec["probe_pool"], "pool_sha256": spec["probe_pool_sha256"]}
                                  if spec.get("probe_pool") is not None else {})}},
        "baselines": ["unchanged_rate", "probe_auroc", "probe_aurc", "attention_mass_aurc", "input_gradient_aurc",
                      "settling_layer_median"],
        "test": {"sides": 2, "alpha": float(spec["probe_alpha"]), "cluster": "patient_id",
                 "n_draws": int(spec["probe_n_draws"]), "seed": int(spec["probe_seed"]),
                 "rule": "reject equality when the interval on the difference excludes zero"},
        "runs": 1,
    }


# --------------------------------------------------------------------------- scoring
def _requests(spec: dict, trials: pd.DataFrame, reports: pd.Series, images: dict) -> list:
    from .modalens_layers import _requests as layer_requests

    return layer_requests(spec, trials, reports, images)


def _images(ds, trials: pd.DataFrame) -> dict:
    paths = dict(zip(ds.images["image_id"], ds.images["path"]))
    ids = pd.unique(pd.concat([trials["image_id"], trials["sub_image_id"]]))
    return {i: ml._load_pixels(paths[i]) for i in ids}


def _lens_json(arr: np.ndarray) -> list[str]:
    return [json.dumps(np.round(x, 5).tolist()) for x in arr]


def _readouts(out: pd.DataFrame, final: np.ndarray) -> None:
    for k, side in enumerate(("c", "d")):
        f = final[k::2]
        out[f"logit_yes_{side}"], out[f"logit_no_{side}"] = f[:, 0], f[:, 1]
        out[f"margin_{side}"] = f[:, 0] - f[:, 1]
        out[f"readout_{side}"] = np.where(f[:, 0] > f[:, 1], "yes", "no")


def _probe_chunk(model, spec: dict, trials: pd.DataFrame, reports: pd.Series, images: dict, layers: tuple[int, int]):
    """Rows (without probe scores) and the residual features ``(side c at flip_layer, side d at label_layer)``."""
    import torch

    from ..models.lens import _project, decoder_parts
    from ..models.residuals import answer_residuals, image_attention_mass, image_input_gradient

    reqs = _requests(spec, trials, reports, images)
    src = reqs[0::2]
    # side c: the gradient's whole-prompt passes also read its streams; side d: shared prefixes, packed
    gradient, resid_c = image_input_gradient(model, src, streams=True)
    resid_d = answer_residuals(model, reqs[1::2])
    resid = torch.stack([resid_c, resid_d], dim=1).reshape(len(reqs), *resid_c.shape[1:])
    parts = decoder_parts(model.model)
    ids = torch.tensor([model.families.yes_id, model.families.no_id], device=parts["weight"].device)
    with torch.no_grad():
        lens = _project(resid.to(device=parts["weight"].device, dtype=parts["weight"].dtype), parts, ids)
    lens = lens.float().cpu().numpy()
    out = trials.copy()
    _readouts(out, lens[:, -1])
    out["lens_c"], out["lens_d"] = _lens_json(lens[0::2]), _lens_json(lens[1::2])
    out["attention_mass"] = image_attention_mass(model, src)
    out["input_gradient"] = gradient
    feats = (resid[0::2, layers[0]].numpy(), resid[1::2, layers[1]].numpy())  # as computed; float64 to fit
    return out, feats


def _fit(rows: pd.DataFrame, feats: tuple[np.ndarray, np.ndarray], cfg: dict):
    """The two probes fitted on the test split: (flip probe, label probe, oof flip scores, oof label scores)."""
    from ..stats.probes import fit_probe

    p = cfg["probe"]
    flip = (rows["readout_c"] != rows["readout_d"]).to_numpy().astype(int)
    groups = rows["patient_id"].astype(str).to_numpy()
    if len(np.unique(flip)) < 2:
        raise SpecError(f"{PROTOCOL}: the test split has {'no' if not flip.any() else 'only'} swap-induced "
                         "answer changes; the flip probe needs both classes")
    flip_probe, flip_oof = fit_probe(feats[0], flip, groups=groups, n_folds=p["folds"], C=p["C"], seed=p["fold_seed"])
    target = rows["target_d"].to_numpy(dtype=float)
    ok = ~np.isnan(target)
    label_probe, oof = fit_probe(feats[1][ok], target[ok].astype(int), groups=groups[ok], n_folds=p["folds"],
                                 C=p["C"], seed=p["fold_seed"])
    label_oof = np.full(len(rows), np.nan)
    label_oof[ok] = oof
    return flip_probe, label_probe, flip_oof, label_oof


def _apply(probe, X: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    s = probe.predict_proba(X)[:, 1]
    if mask is not None:
        s = np.where(mask, s, np.nan)
    return s


def _split_trials(spec: dict, cases: pd.DataFrame, split: str) -> tuple[pd.DataFrame, pd.Series]:
    reports = ml._reports(spec, cases)
    trials = ml._trial_frame(spec, cases, reports)
    trials.insert(1, "split", split)
    return trials, reports


def _chunks(trials: pd.DataFrame, batch: int):
    case_ids = list(dict.fromkeys(trials["case_id"]))
    for start in range(0, len(case_ids), batch):
        yield trials[trials["case_id"].isin(case_ids[start:start + batch])]


def _execute_probe(spec, model, ds, writer, batch, bar):
    """The probe record, or this shard's part of it.

    The probes need the whole test split's features before any test row can be written, and a disjoint
    trial's scores need the fitted probes, so every chunk of both splits (rows and the two feature arrays)
    is staged in the record until it completes (:meth:`~shovir_core.records.RunWriter.stage`): a run
    killed in the test split or in the disjoint cohort computes no staged chunk again. Shards split the
    chunks of both splits (:func:`shovir_core.protocols.shards.mine`), and a shard done with its own
    computes the chunks no process has staged or claimed yet; the process that then finds every chunk
    staged and takes the phase's lock -- the one that staged the last chunk, or a resumed one -- fits the
    probes on the whole test split in its order, writes its rows and scores the staged disjoint chunks
    (the same rows and scores as one process, which makes the chunks in the same order). Every other shard
    ends when no chunk is left to compute. A disjoint chunk whose rows are all written is not needed again.
    """
    from ..models.lens import decoder_parts
    from ..stats.probes import FrozenConfig

    n_layers = len(decoder_parts(model.model)["layers"])
    frozen = FrozenConfig.freeze(probe_config(spec, n_layers))  # before any model call
    counts_out = {"protocol_sha256": frozen.sha256, "protocol": json.dumps(frozen.config, sort_keys=True),
                  "n_layers": n_layers}
    _check_stored_hash(writer, frozen, writer.done_ids)  # a resumed record of another protocol: before any model call
    test_cases, disjoint_cases, counts = cohorts(spec)
    pool_ds = ds if spec.get("probe_pool") is None else ml._dataset(spec["probe_pool"])
    splits = {"test": (*_split_trials(spec, test_cases, "test"), ds),  # split -> (trials, reports, dataset)
              "disjoint": (*_split_trials(pool_dataset_spec(spec), disjoint_cases, "disjoint"), pool_ds)}
    layers = (frozen.config["probe"]["flip_layer"], frozen.config["probe"]["label_layer"])
    stage = writer.stage(stage_phase(frozen))
    done = writer.done_ids
    chunks = [(split, part, stage.key(part["trial_id"])) for split, (trials, _, _) in splits.items()
              for part in _chunks(trials, batch)]
    needed = [c for c in chunks if c[0] == "test" or not set(c[1]["trial_id"]) <= done]  # the fit needs every test chunk
    mine = set(shards.mine([key for _, _, key in chunks], writer.shard))
    writer.plan_shard(sum(len(part) for _, part, key in chunks if key in mine))

    def compute(split, part):
        _, reports, split_ds = splits[split]
        r, f = _probe_chunk(model, spec, part, reports, _images(split_ds, part), layers)
        stage.save(r, {"c": f[0], "d": f[1]})
        return r, f

    # this shard's chunks, then any other chunk no process has staged or claimed (taken from the end, where
    # its shard comes last): a shard that finishes early -- its partner busy with a whole record, or slower --
    # computes the rest instead of waiting; a chunk's lock keeps two processes from computing it
    order = [c for c in needed if c[2] in mine] + [c for c in reversed(needed) if c[2] not in mine]
    n_staged = 0
    for split, part, key in order:
        if stage.run_claimed(key, partial(compute, split, part)):
            n_staged += len(part)
            writer.note_staged(n_staged)
            bar.update(len(part))
    if not all(stage.has(key) for _, _, key in needed):
        return {**counts, **counts_out}  # the process computing the last chunks goes on
    lock = stage.lock("fit")
    if lock.acquire() is not None:
        return {**counts, **counts_out}  # another process is fitting and writing

    def staged(split, ids=None):  # a split's chunks (those holding any of ``ids``) in its order, whoever made them
        for s, part, _ in chunks:
            if s == split and (ids is None or part["trial_id"].isin(ids).any()):
                got = stage.load(part["trial_id"])
                yield compute(s, part) if got is None else (got[0], (got[1]["c"], got[1]["d"]))  # None: unreadable

    try:
        _fit_and_write(writer, batch, bar, frozen, splits, staged)
    finally:
        lock.release()
    frozen.check(probe_config(spec, n_layers))  # after the last row: the protocol did not change
    return {**counts, **counts_out}


def stage_phase(frozen) -> str:
    """The staged phase of a probe record's chunks (both splits; the name is the one the test split's chunks
    had alone, so a record staged by earlier code resumes from them): named by its frozen protocol's hash,
    so a changed configuration never reads another's chunks."""
    return f"test-features-{frozen.sha256[:12]}"


def _fit_and_write(writer, batch, bar, frozen, splits, staged):
    """Fit both probes on the whole staged test split (``staged("test")``: its chunks' rows and features in
    its order), write its rows, then score and write the staged disjoint chunks' rows not yet written."""
    done = writer.stored_ids()  # also rows another process wrote since this one opened the record
    _check_stored_hash(writer, frozen, done)
    if all(set(trials["trial_id"]) <= done for trials, _, _ in splits.values()):
        return  # another process fitted and wrote every row
    rows, feats = [], ([], [])
    for r, f in staged("test"):
        rows.append(r)
        feats[0].append(f[0])
        feats[1].append(f[1])
    rows_t = pd.concat(rows, ignore_index=True)
    feats_t = (np.concatenate(feats[0]).astype(np.float64), np.concatenate(feats[1]).astype(np.float64))
    flip_probe, label_probe, flip_oof, label_oof = _fit(rows_t, feats_t, frozen.config)
    rows_t["probe_flip_score"], rows_t["probe_label_score"] = flip_oof, label_oof
    rows_t["protocol_sha256"] = frozen.sha256
    todo = rows_t[~rows_t["trial_id"].isin(done)]
    for start in range(0, len(todo), max(batch, 1) * 16):
        writer.append(todo.iloc[start:start + max(batch, 1) * 16])
    disjoint = splits["disjoint"][0]
    left = set(disjoint["trial_id"]) - done
    for r, f in staged("disjoint", left) if left else ():
        keep = r["trial_id"].isin(left).to_numpy()
        if not keep.any():
            continue
        r = r[keep].reset_index(drop=True)
        r["probe_flip_score"] = _apply(flip_probe, f[0][keep].astype(np.float64))
        r["probe_label_score"] = _apply(label_probe, f[1][keep].astype(np.float64),
                                        ~np.isnan(r["target_d"].to_numpy(dtype=float)))
        r["protocol_sha256"] = frozen.sha256
        writer.append(r)


def _check_stored_hash(writer, frozen, done) -> None:
    """Refuse to go on writing rows stored under another frozen protocol."""
    if done:
        stored = load_stored_hash(writer)
        if stored is not None and stored != frozen.sha256:
            raise RuntimeError(f"{PROTOCOL}: the stored rows were made under protocol {stored[:8]}, "
                               f"this run's frozen protocol is {frozen.prefix}")


def load_stored_hash(writer) -> str | None:
    """The ``protocol_sha256`` of the rows a partial record already holds (None when they hold none)."""
    import pyarrow.parquet as pq

    from ..records.files import part_files

    values: set[str] = set()
    for part in part_files(writer.parts_dir):
        col = pq.read_table(part, columns=["protocol_sha256"]).column(0).to_pylist()
        values.update(v for v in col if v is not None)
    if len(values) > 1:
        raise RuntimeError(f"{PROTOCOL}: the stored rows carry several protocol hashes {sorted(v[:8] for v in values)}")
    return values.pop() if values else None


def group_key(spec: dict, *, resolved: bool = False) -> str | None:
    """Tuned-lens records of one model and lens settings share one trained lens in a process
    (:func:`_trained_lens`): the book's scheduler makes them in one task (:func:`shovir_core.protocols.record_groups`).
    Probe records: ``None`` (a task of their own). ``resolved``: ``spec`` is resolved already."""
    r = dict(spec) if resolved else resolve_spec(dict(spec))
    if r["analysis"] != "tuned-lens":
        return None
    return json.dumps({"model": r["model_fingerprint"], **{k: v for k, v in r.items() if k.startswith("lens_")}},
                      sort_keys=True, default=str)


_TRAINED: dict[str, tuple] = {}
"""The last tuned lens trained in this process, by :func:`_lens_key` (one entry)."""


def _lens_key(spec: dict, model, texts: list[str], kl_ids) -> str:
    """What decides a trained lens: the model's identity, device and dtype, the training settings, the
    ``kl_ids`` and the training texts themselves (their SHA-256) -- not the arm (the report is not read)."""
    import hashlib

    from ..models.lens import decoder_parts

    weight = decoder_parts(model.model)["weight"]
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return json.dumps({"model": spec["model_fingerprint"], "device": str(weight.device), "dtype": str(weight.dtype),
                       **{k: spec[k] for k in ("lens_steps", "lens_lr", "lens_batch_texts", "lens_max_tokens",
                                               "lens_seed")},
                       "kl_ids": kl_ids, "texts": h.hexdigest()}, sort_keys=True, default=str)


def _trained_lens(spec: dict, model, texts: list[str], kl_ids):
    """``(lens, info)`` of :func:`~shovir_core.models.tuned_lens.train_tuned_lens` on ``texts``.

    The tuned lens reads the corpus, never a trial: the report-present and report-absent records of one
    model (Table 34's two arms) train the same translators from the same seed. Training is deterministic
    for a seed, so the second record of a process reuses the first one's lens (same translators, same
    SHA-256 and loss log) instead of training it again; the paper's 2,000 steps are then paid once.
    """
    from ..models import tuned_lens as tl

    key = _lens_key(spec, model, texts, kl_ids)
    if key not in _TRAINED:
        _TRAINED.clear()  # one lens at a time: MedGemma-27B's translators hold 62 x 5376^2 floats
        _TRAINED[key] = tl.train_tuned_lens(model.model, model.tokenizer, texts, steps=int(spec["lens_steps"]),
                                            seed=int(spec["lens_seed"]), batch_texts=int(spec["lens_batch_texts"]),
                                            max_tokens=int(spec["lens_max_tokens"]), lr=float(spec["lens_lr"]),
                                            kl_ids=kl_ids)
    return _TRAINED[key]


def _execute_lens(spec, model, ds, writer, batch, bar):
    from ..models import tuned_lens as tl

    path = spec.get("lens_corpus_path")
    texts = tl.corpus_texts(spec["lens_corpus"], path=None if path is None else os.path.expandvars(path))
    rng = np.random.default_rng(int(spec["lens_seed"]))
    order = rng.permutation(len(texts))
    if spec.get("lens_max_texts") is not None:  # a seeded draw of the corpus (WikiText-103 has ~1.2 M paragraphs)
        order = order[:int(spec["lens_max_texts"])]
    n_held = int(round(float(spec["lens_heldout"]) * len(order)))
    held_idx, train_idx = np.sort(order[:n_held]), np.sort(order[n_held:])
    kl_ids = None if spec["lens_kl"] == "full" else [model.families.yes_id, model.families.no_id]
    lens, info = _trained_lens(spec, model, [texts[i] for i in train_idx], kl_ids)
    done = writer.done_ids
    corpus_ids = [f"corpus:{i}" for i in held_idx]
    if n_held and not set(corpus_ids) <= done:
        held = [texts[i] for i in held_idx]
        kept = [int(i) for i in held_idx]
        seqs = tl.encode_corpus(model.tokenizer, held, max_tokens=int(spec["lens_max_tokens"]))
        if len(seqs) != len(held):
            raise SpecError(f"{PROTOCOL}: held-out corpus texts shorter than 2 tokens; cannot key their rows")
        kl = tl.corpus_kl(model.model, model.tokenizer, held, lens, max_tokens=int(spec["lens_max_tokens"]),
                          batch_texts=int(spec["lens_batch_texts"]), kl_ids=kl_ids)
        rows = pd.DataFrame({"trial_id": [f"corpus:{i}" for i in kept], "kind": "corpus", "corpus_index": kept,
                             "kl_logit": _lens_json(kl["logit"]), "kl_tuned": _lens_json(kl["tuned"])})
        writer.append(rows[~rows["trial_id"].isin(done)])
    cases, counts = ml.build_cases(spec)
    trials, reports = _split_trials(spec, cases, "test")
    trials.insert(1, "kind", "trial")
    todo = trials[~trials["trial_id"].isin(done)]
    for part in _chunks(todo, batch):
        reqs = _requests(spec, part, reports, _images(ds, part))
        res = tl.answer_readouts(model, reqs, lens, kl_ids=kl_ids)
        out = part.copy()
        _readouts(out, res["logit"][:, -1])
        for k, side in enumerate(("c", "d")):
            out[f"lens_{side}"] = _lens_json(res["logit"][k::2])
            out[f"tuned_{side}"] = _lens_json(res["tuned"][k::2])
            out[f"kl_logit_{side}"] = _lens_json(res["kl_logit"][k::2])
            out[f"kl_tuned_{side}"] = _lens_json(res["kl_tuned"][k::2])
        writer.append(out)
        bar.update(len(part))
    return {**counts, "lens_sha256": info["sha256"], "lens_training": tl.info_json(info),
            "n_corpus_train": int(len(train_idx)), "n_corpus_heldout": int(n_held)}


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Run the analysis of ``spec`` (resolved); resumable by case chunks."""
    from ..models import get_model

    ds = ml._dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"{PROTOCOL}: dataset {spec['dataset']!r} changed since the spec was resolved")
    if not spec["image"]:
        raise SpecError(f"{PROTOCOL}: the probes and lenses compare two images; image: false is not supported")
    model = get_model(spec["model"])
    if not hasattr(model, "model") or not hasattr(model, "processor"):
        raise SpecError(f"{PROTOCOL}: model {spec['model']!r} is not a transformers-backend model")
    seeds = {"substitute": int(spec["substitute_seed"]), "subset": int(spec["subset_seed"])}
    seeds.update({"probe": int(spec["probe_seed"])} if spec["analysis"] == "probe" else {"lens": int(spec["lens_seed"])})
    settings = SPEC.execution(execution)
    batch = settings["batch_cases"]
    import torch

    old_threads = torch.get_num_threads()
    if settings["threads"]:
        torch.set_num_threads(int(settings["threads"]))
    try:
        return _write(name, spec, model, ds, seeds, batch, progress)
    finally:
        torch.set_num_threads(old_threads)


def _write(name, spec, model, ds, seeds, batch, progress) -> Run:
    from tqdm import tqdm

    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model={"id": spec["model"], **model.provenance()},
                   seeds=seeds, credentialed=ds.credentialed) as writer:
        bar = tqdm(desc=f"{PROTOCOL} {spec['model']} {ml.arm_label(spec)} {spec['analysis']}", unit="trial",
                   disable=not progress)
        run = _execute_probe if spec["analysis"] == "probe" else _execute_lens
        counts = run(spec, model, ds, writer, batch, bar)
        bar.close()
        writer.complete(**counts, arm=ml.arm_label(spec), analysis=spec["analysis"])
    return shards.result(writer)  # complete once every shard has finished

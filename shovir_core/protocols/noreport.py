"""The ``modalens-noreport`` protocol: the image swap on datasets without a report (ModaLens Table 6, §4.1, App. N.4).

One protocol for VQA-RAD, SLAKE, OmniMedVQA and ProbMed (the adapters of
:mod:`shovir_core.data.vqa`). There is no report: the prompt is ModaLens' user turn
``[image, "Question: ..."]`` (:func:`shovir_core.models.prompts.score_messages` with ``report=None``).

**Case pool and leakage rule** (:func:`case_pool`). The pool is every question with a key
(closed yes/no; OmniMedVQA: four options) whose normalised text (and option set) is asked of at
least two different images, the official questions only (VQA-RAD: ``freeform`` + ``para``). Each
pool row is a *source* ``(question, image c)``; its *substitute* is another pool row of the same
question on a different image ``d``, drawn uniformly with the spec's seed from the held-out
candidates when there are any, else from all. The leakage rule ``both_heldout`` (default) admits a
pair when both rows are in the held-out split (``heldout_split``, VQA-RAD's official ``test``): a
model trained on the official training questions (``ref-vlm-vqarad``) has then seen neither row.
The *ceiling* is the number of held-out sources with any substitute (the rule ``source_heldout``).
Every pool row is run (the key audit uses them all); estimates use the admissible pairs.

**Arms** (one trial per source and arm; side ``c`` is the original, side ``d`` the perturbed input):
``original`` (every keyed official question, pool or not, read once: the accuracy of a model on a
split and the majority-answer baseline; side ``d`` repeats side ``c``), ``image_swap`` (image ``d``, question fixed), ``question_swap`` (image ``c``, the question of another
pool question drawn with the seed), ``option_swap`` (four-option datasets: the options in reverse
order, compared by option text), ``knockout`` and ``knockout_random`` (App. N.4: the image tokens, or
as many random positions, blocked from every query at every layer, :class:`shovir_core.models.lens.Knockout`
on the transformers backend; the reference models of :mod:`shovir_core.models.reference_vqa` state
their own behaviour).

**Readouts**: the final-token ``yes``/``no`` readout (the lowercase tokens' logits) and, for
four-option questions, the argmax over the option letters' logits. With ``answer_tokens > 0`` the
``image_swap`` arm also generates greedily on the original image; the chapter maps the text to an
option by the frozen rule of :func:`shovir_core.tables.modalens_no_report.map_generated`.

Images reach every model as RGB resized to ``image_size`` (0: as stored), :func:`prepare_image`.
"""
from __future__ import annotations

import hashlib
import json
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from ..records import Run, RunWriter, load_run, spec_hash
from .spec import Field, SpecError, SpecSchema, StaleSpecError

__all__ = ["PROTOCOL", "SPEC", "ARMS", "LEAKAGE_RULES", "resolve_spec", "execute", "prepare_image", "case_pool",
           "mcq_text", "pool_counts", "keyed_rows"]

PROTOCOL = "modalens-noreport"
ARMS = ("original", "image_swap", "question_swap", "option_swap", "knockout", "knockout_random")
LEAKAGE_RULES = ("both_heldout", "source_heldout", "none")
MCQ_INSTRUCTION = "Answer with the option's letter."

SPEC = SpecSchema(PROTOCOL, [
    Field("dataset", str, "vqa-rad:data/vqa-rad", doc="a no-report VQA dataset (vqa-rad:, slake:, omnimedvqa:, probmed:)"),
    Field("model", str, "ref-question-only", doc="registry name"),
    Field("arms", list, ["image_swap", "question_swap"], items=str, choices=ARMS, min_items=1, unique=True),
    Field("heldout_split", str, "test", doc="the split whose questions no model trained on ('all': every row)"),
    Field("leakage_rule", str, "both_heldout", choices=LEAKAGE_RULES),
    Field("seed", int, 0, range=(0, None), doc="substitute and question-swap draws"),
    Field("image_size", int, 64, range=(0, 4096), doc="square side the images are resized to (0: as stored)"),
    Field("answer_tokens", int, 0, range=(0, 64), doc="greedy tokens generated on the original image (image_swap)"),
    Field("max_sources", (int, type(None)), None, range=(1, None), doc="keep this many sources (seeded order)"),
    Field("categories", (list, type(None)), None, items=str, doc="keep sources of these categories (SLAKE Table 9)"),
    Field("dataset_sha256", (str, type(None)), None, pin=True, doc="pinned dataset content hash"),
    Field("model_fingerprint", (dict, type(None)), None, pin=True, doc="pinned model identity"),
    Field("batch_sources", int, 64, range=(1, None), execution=True, doc="sources per record part"),
])


def prepare_image(path, *, size: int) -> np.ndarray:
    """The pixels every model of the protocol sees: RGB uint8, resized to ``size`` x ``size`` (bilinear) when ``size > 0``.

    Prepared once per process while the file is unchanged (:func:`shovir_core.data.pixels.kept_pixels`: the
    demo's three VQA-RAD records each decoded its 315 full-size images again, 13 s); each call gets its own copy.
    """
    from ..data.pixels import kept_pixels

    return kept_pixels(Path(path), ("rgb", int(size)), partial(_prepared, size=int(size))).copy()


def _prepared(path: Path, *, size: int) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        if size > 0:
            im = im.resize((size, size), Image.Resampling.BILINEAR)
        return np.asarray(im)


def _dataset(source: str):
    """The dataset of ``source`` (environment variables expanded; the unexpanded string is what a spec hashes)."""
    import os

    from ..data.vqa import VQADataset
    from .datasets import load_dataset

    ds = load_dataset(os.path.expandvars(source))
    if not isinstance(ds, VQADataset):
        raise SpecError(f"{PROTOCOL}: dataset {source!r} has no question table (use vqa-rad:, slake:, omnimedvqa: "
                         "or probmed:)")
    return ds


def resolve_spec(spec: dict) -> dict:
    """Validate (:data:`SPEC`) and pin the dataset hash and the model fingerprint."""
    from ..models import model_fingerprint

    out = SPEC.resolve(spec)
    ds = _dataset(out["dataset"])
    SPEC.pin(out, "dataset_sha256", ds.manifest_hash, what=f"dataset {out['dataset']!r}")
    SPEC.pin(out, "model_fingerprint", model_fingerprint(out["model"]), what=f"model {out['model']!r}")
    if "option_swap" in out["arms"] and not _is_mcq(ds):
        raise SpecError(f"{PROTOCOL}: arm 'option_swap' needs four-option questions; {ds.name} has yes/no questions")
    return out


def _is_mcq(ds) -> bool:
    return bool((ds.questions["options"] != "[]").any())


def _draw(seed: int, key: str, n: int) -> int:
    h = int.from_bytes(hashlib.sha256(f"{seed}\x1f{key}".encode()).digest()[:8], "little")
    return int(np.random.default_rng([seed, h]).integers(n))


def case_pool(ds, *, seed: int, heldout_split: str, leakage_rule: str = "both_heldout") -> pd.DataFrame:
    """One row per source question with its substitute, tier, keys and admissibility (module docstring)."""
    q = ds.questions
    mcq = _is_mcq(ds)
    rows = q[q["official"] & ((q["options"] != "[]") if mcq else q["yes_no"])].copy()
    if mcq:
        rows["group"] = rows["question_norm"] + "\x1f" + rows["options"].map(
            lambda s: json.dumps(sorted(o.strip().lower() for o in json.loads(s))))
    else:
        rows["group"] = rows["question_norm"]
    n_img = rows.groupby("group")["image_id"].nunique()
    pool = rows[rows["group"].isin(n_img[n_img >= 2].index)].sort_values("question_id").reset_index(drop=True)
    held = (pool["split"] == heldout_split) | (heldout_split == "all")
    pool["heldout"] = held
    by_group = {g: sub for g, sub in pool.groupby("group", sort=True)}
    subs = []
    for r in pool.itertuples():
        cand = by_group[r.group]
        cand = cand[cand["image_id"] != r.image_id]
        pref = cand[cand["heldout"]]
        pick = pref if len(pref) else cand
        subs.append(pick.iloc[_draw(seed, f"sub:{r.question_id}", len(pick))])
    sub = pd.DataFrame(subs).reset_index(drop=True)
    out = pd.DataFrame({
        "question_id": pool["question_id"], "image_id": pool["image_id"], "question": pool["question"],
        "group": pool["group"], "category": pool["category"], "organ": pool["organ"], "source": pool["source"],
        "split": pool["split"], "options": pool["options"], "key_c": pool["key"], "heldout": held,
        "sub_question_id": sub["question_id"], "sub_image_id": sub["image_id"], "sub_source": sub["source"],
        "sub_heldout": sub["heldout"].to_numpy(bool),
    })
    out["key_d"] = [_key_in(o, sq, ds) if mcq else k for o, sq, k in zip(out["options"], sub["question_id"], sub["key"])]
    out["tier"] = np.where(out["source"] == out["sub_source"], "hard", "easy")
    rule = {"both_heldout": out["heldout"] & out["sub_heldout"], "source_heldout": out["heldout"],
            "none": pd.Series(True, index=out.index)}[leakage_rule]
    out["admissible"] = rule.to_numpy(bool)
    out["key_changed"] = out["key_c"] != out["key_d"]
    others = out["group"].to_numpy()
    qswap = []
    for i, r in enumerate(out.itertuples()):
        cand = np.flatnonzero(others != r.group)
        qswap.append(int(cand[_draw(seed, f"q:{r.question_id}", len(cand))]) if len(cand) else i)
    out["swap_question"] = out["question"].to_numpy()[qswap]
    return out


def _key_in(options_json: str, sub_question_id: str, ds) -> str:
    """The substitute's correct option text, as a letter of the source's options ('' when absent)."""
    from ..data.vqa import LETTERS, normalise_answer

    sub = ds.questions.set_index("question_id").loc[sub_question_id]
    opts = [normalise_answer(o) for o in json.loads(options_json)]
    ans = normalise_answer(sub["answer"])
    return LETTERS[opts.index(ans)] if ans in opts else ""


def pool_counts(pool: pd.DataFrame) -> dict:
    """Pool rows, questions, admissible pairs, the ceiling (held-out sources) and swap-changed pairs."""
    adm = pool[pool["admissible"]]
    return {"pool_rows": int(len(pool)), "pool_questions": int(pool["group"].nunique()),
            "pool_images": int(pool["image_id"].nunique()), "admissible": int(len(adm)),
            "ceiling": int(pool["heldout"].sum()), "swap_changed": int(adm["key_changed"].sum())}


def mcq_text(question: str, options: list[str]) -> str:
    """The four-option prompt text: the question, one ``<letter>. <option>`` line each, the instruction."""
    from ..data.vqa import LETTERS

    lines = [question, *(f"{LETTERS[i]}. {o}" for i, o in enumerate(options)), MCQ_INSTRUCTION]
    return "\n".join(lines)


def keyed_rows(ds, *, heldout_split: str) -> pd.DataFrame:
    """Every keyed official question as a source of the ``original`` arm (no substitute: side d = side c)."""
    q = ds.questions
    rows = q[q["official"] & ((q["options"] != "[]") if _is_mcq(ds) else q["yes_no"])].sort_values("question_id")
    held = ((rows["split"] == heldout_split) | (heldout_split == "all")).to_numpy(bool)
    return pd.DataFrame({
        "question_id": rows["question_id"], "image_id": rows["image_id"], "question": rows["question"],
        "group": rows["question_norm"], "category": rows["category"], "organ": rows["organ"], "source": rows["source"],
        "split": rows["split"], "options": rows["options"], "key_c": rows["key"], "heldout": held,
        "sub_question_id": rows["question_id"], "sub_image_id": rows["image_id"], "sub_source": rows["source"],
        "sub_heldout": held, "key_d": rows["key"], "tier": "", "admissible": held, "key_changed": False,
        "swap_question": rows["question"]}).reset_index(drop=True)


def _trials(spec: dict, pool: pd.DataFrame, keyed: pd.DataFrame | None = None) -> pd.DataFrame:
    frames = []
    if "original" in spec["arms"]:
        frames.append(_select(spec, keyed).assign(arm="original"))
    for arm in spec["arms"]:
        if arm != "original":
            frames.append(_select(spec, pool).assign(arm=arm))
    out = pd.concat(frames, ignore_index=True)
    out["trial_id"] = out["arm"] + ":" + out["question_id"]
    return out


def _select(spec: dict, pool: pd.DataFrame) -> pd.DataFrame:
    p = pool
    if spec["categories"] is not None:
        p = p[p["category"].isin(spec["categories"])]
    if spec["max_sources"] is not None and len(p) > spec["max_sources"]:
        order = sorted(p["question_id"], key=lambda s: hashlib.sha256(f"{spec['seed']}:{s}".encode()).hexdigest())
        p = p[p["question_id"].isin(order[: spec["max_sources"]])]
    return p


def _requests(t: pd.DataFrame, pixels: dict, *, mcq: bool):
    """(side c, side d) ScoreRequests and per-row option lists (side d's options for option_swap)."""
    from ..models.protocol import ScoreRequest

    req_c, req_d, opts_c, opts_d = [], [], [], []
    for r in t.itertuples():
        oc = json.loads(r.options) if mcq else []
        od = list(reversed(oc)) if r.arm == "option_swap" else oc
        qc = mcq_text(r.question, oc) if mcq else r.question
        qd_text = r.swap_question if r.arm == "question_swap" else r.question
        qd = mcq_text(qd_text, od) if mcq else qd_text
        img_d = pixels[r.sub_image_id] if r.arm == "image_swap" else pixels[r.image_id]
        req_c.append(ScoreRequest(pixels[r.image_id], qc))
        req_d.append(ScoreRequest(img_d, qd))
        opts_c.append(oc)
        opts_d.append(od)
    return req_c, req_d, opts_c, opts_d


def _letter_ids(model, letters) -> list[int]:
    tok = model.tokenizer
    ids = [tok.convert_tokens_to_ids(x) for x in letters]
    if any(i is None or i == tok.unk_token_id for i in ids):
        raise SpecError(f"{PROTOCOL}: {model.name}'s tokenizer has no single token for each of {letters}")
    return ids


def _read(model, requests, *, mcq: bool, knockout: str | None = None, answer_tokens: int = 0) -> list[dict]:
    """Readout per request: ``readout``, ``margin`` and the logits of the answer tokens (+ ``generated``,
    ``top1_prob`` when the model's own scoring generated them).

    Yes/no: ``margin`` is ``logit(yes) - logit(no)`` and ties read ``no`` (ModaLens' readout,
    :func:`shovir_core.models.readouts.yes_no_readout`); options: the top letter and its lead over the
    runner-up. A transformers model's plain yes/no readout goes through its own
    :meth:`~shovir_core.models.hf.HFVLM.score_yes_no` (prefix-shared batches, the same readout as every
    ModaLens record); letters and knockouts read the logits at the answer position
    (:func:`shovir_core.models.interventions.readout_logits`, :func:`shovir_core.models.lens.layer_logits`).
    """
    from ..data.vqa import LETTERS

    if hasattr(model, "read_vqa"):
        return model.read_vqa(requests, letters=LETTERS if mcq else None, knockout=knockout)
    if not hasattr(model, "model"):
        raise SpecError(f"{PROTOCOL}: model {model.name!r} is neither a reference model nor a transformers model")
    if not mcq and knockout is None:
        res = model.score_yes_no(list(requests), answer_tokens=answer_tokens)
        return [{"readout": r["readout"], "margin": float(r["margin"]),
                 "logits": {"yes": float(r["logit_yes"]), "no": float(r["logit_no"])},
                 "generated": r.get("generated"), "top1_prob": r.get("top1_prob")} for r in res]
    tokens = LETTERS if mcq else ("yes", "no")
    ids = _letter_ids(model, LETTERS) if mcq else [model.families.yes_id, model.families.no_id]
    if knockout is None:
        from ..models.interventions import readout_logits

        z = readout_logits(model, requests, token_ids=ids)
    else:
        from ..models.lens import Knockout, decoder_parts, layer_logits

        n_layers = len(decoder_parts(model.model)["layers"])
        z = layer_logits(model, requests, token_ids=ids, knockout=Knockout.cumulative(knockout, 0, n_layers))[:, -1]
    return [_letters_or_yes_no(row, tokens, mcq=mcq) for row in np.asarray(z, dtype=float)]


def _letters_or_yes_no(row: np.ndarray, tokens, *, mcq: bool) -> dict:
    logits = {t: float(v) for t, v in zip(tokens, row)}
    if not mcq:
        return {"readout": "yes" if row[0] > row[1] else "no", "margin": float(row[0] - row[1]), "logits": logits}
    order = np.argsort(-row, kind="stable")
    return {"readout": tokens[int(order[0])], "margin": float(row[order[0]] - row[order[1]]), "logits": logits}


def _score(model, spec: dict, part: pd.DataFrame, pixels: dict, *, mcq: bool) -> pd.DataFrame:
    rows = []
    for arm, t in part.groupby("arm", sort=False):
        req_c, req_d, opts_c, opts_d = _requests(t, pixels, mcq=mcq)
        n_gen = int(spec["answer_tokens"]) if arm == "image_swap" else 0
        c = _read(model, req_c, mcq=mcq, answer_tokens=n_gen)
        ko = {"knockout": "image", "knockout_random": "random_matched"}.get(arm)
        d = c if arm == "original" else _read(model, req_c if ko else req_d, mcq=mcq, knockout=ko)
        gen = [None] * len(t)
        if n_gen and c[0].get("generated") is not None:
            gen = c
        elif n_gen:
            gen = model.score_yes_no(req_c, answer_tokens=n_gen)
        for i, r in enumerate(t.itertuples()):
            rc, rd = c[i], d[i]
            choice = (lambda res, opts: opts["ABCD".index(res["readout"])] if mcq and res["readout"] in "ABCD"
                      and len(res["readout"]) == 1 and "ABCD".index(res["readout"]) < len(opts) else res["readout"])
            g = gen[i]
            rows.append({
                "trial_id": r.trial_id, "arm": arm, "question_id": r.question_id, "image_id": r.image_id,
                "sub_question_id": r.sub_question_id, "sub_image_id": r.sub_image_id, "question": r.question,
                "question_d": r.swap_question if arm == "question_swap" else r.question,
                "group": r.group, "category": r.category, "organ": r.organ, "source": r.source,
                "sub_source": r.sub_source, "split": r.split, "tier": r.tier, "heldout": bool(r.heldout),
                "admissible": bool(r.admissible), "key_c": r.key_c, "key_d": r.key_d,
                "key_changed": bool(r.key_changed), "options_c": json.dumps(opts_c[i]), "options_d": json.dumps(opts_d[i]),
                "readout_c": rc["readout"], "readout_d": rd["readout"], "margin_c": rc["margin"], "margin_d": rd["margin"],
                "choice_c": str(choice(rc, opts_c[i])), "choice_d": str(choice(rd, opts_d[i])),
                "logits_c": json.dumps(rc["logits"]), "logits_d": json.dumps(rd["logits"]),
                "generated_c": None if g is None else g.get("generated"),
                "top1_prob_c": float("nan") if g is None else float(g.get("top1_prob", float("nan"))),
                "readout": "option_letter" if mcq else "final_token_yes_no",
            })
    return pd.DataFrame(rows)


def execute(name: str, spec: dict, *, progress: bool = True, execution: dict | None = None) -> Run:
    """Run every source x arm of ``spec`` (resolved); resumable by source chunks."""
    from tqdm import tqdm

    from ..models import get_model

    ds = _dataset(spec["dataset"])
    if ds.manifest_hash != spec["dataset_sha256"]:
        raise StaleSpecError(f"{PROTOCOL}: dataset {spec['dataset']!r} changed since the spec was resolved")
    mcq = _is_mcq(ds)
    pool = case_pool(ds, seed=int(spec["seed"]), heldout_split=spec["heldout_split"], leakage_rule=spec["leakage_rule"])
    keyed = keyed_rows(ds, heldout_split=spec["heldout_split"]) if "original" in spec["arms"] else None
    trials = _trials(spec, pool, keyed)
    model = get_model(spec["model"])
    counts = pool_counts(pool)
    with RunWriter(PROTOCOL, name, spec, dataset=ds.manifest(), model={"id": spec["model"], **model.provenance()},
                   seeds={"seed": int(spec["seed"])}, credentialed=ds.credentialed) as writer:
        todo = trials[~trials["trial_id"].isin(writer.done_ids)]
        paths = dict(zip(ds.images["image_id"], ds.images["path"]))
        sources = list(dict.fromkeys(todo["question_id"]))
        batch = SPEC.execution(execution)["batch_sources"]
        bar = tqdm(total=len(todo), desc=f"{PROTOCOL} {ds.name} {spec['model']}", unit="trial", disable=not progress)
        for start in range(0, len(sources), batch):
            part = todo[todo["question_id"].isin(sources[start:start + batch])]
            ids = pd.unique(pd.concat([part["image_id"], part["sub_image_id"]]))
            pixels = {i: prepare_image(paths[i], size=int(spec["image_size"])) for i in ids}
            writer.append(_score(model, spec, part, pixels, mcq=mcq))
            bar.update(len(part))
        bar.close()
        writer.complete(**counts, n_trials=int(len(trials)), dataset_name=ds.name)
    return load_run(PROTOCOL, name, spec_hash(spec))

"""Train ``ref-vlm`` (:mod:`shovir_core.models.ref_vlm`) on the demo data's training patients.

``python -m shovir_core.training.ref_vlm [--steps N] [--out DIR]`` writes ``ref_vlm.safetensors``
and ``ref_vlm.json`` into ``shovir_core/resources/`` (or ``DIR``). The curriculum, the patient split
and the planted facts are described in :mod:`shovir_core.models.ref_vlm`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from ..models.ref_vlm import (EVAL_COHORT, META_FILE, TRAIN_CONFIG, WEIGHTS_FILE, architecture, fingerprint,
                      resources_dir, wrap_model)

__all__ = ["split_patients", "training_examples", "train", "main"]


def split_patients(ds) -> tuple[list[str], list[str]]:
    """(training patients, evaluation patients) of the demo dataset.

    The evaluation patients are those of the ``modalens`` demo cohort :data:`EVAL_COHORT` (the
    cases :func:`shovir_core.protocols.modalens.build_cases` draws); every other patient trains.
    """
    from ..protocols import modalens as ml

    spec = ml.resolve_spec({**EVAL_COHORT, "model": "ref-blind-prior"})
    cases, _ = ml.build_cases(spec)
    held = set(cases["patient_id"].astype(str)) | set(cases["sub_patient_id"].astype(str))
    patients = sorted(ds.images["patient_id"].astype(str).unique())
    return [p for p in patients if p not in held], sorted(held)


def training_examples(ds, patients: list[str], *, policy: str, negatives: str) -> dict:
    """The training studies: one frontal image each, its template report and its 14 targets."""
    from ..data.template_reports import template_reports
    from ..labels import CHEXPERT_CLASSES
    from ..protocols.modalens import policy_targets

    img = ds.images[ds.images["patient_id"].astype(str).isin(patients)]
    img = img.sort_values("image_id").groupby("study_id", sort=True).first().reset_index()
    labels = ds.labels.reindex(img["image_id"])[list(CHEXPERT_CLASSES)].astype(float)
    reports = template_reports(labels, negatives=negatives)["text"].tolist()
    targets = policy_targets(labels, policy).fillna(0.0).to_numpy(dtype=float)
    return {"image_id": img["image_id"].tolist(), "path": img["path"].tolist(), "reports": reports,
            "targets": targets, "patients": sorted(set(img["patient_id"].astype(str)))}


def _questions() -> list[tuple[str, str]]:
    from ..labels import FINDINGS_13
    from ..protocols.modalens import question_text
    from ..vocab import COMPOSITE

    return [(f, question_text(f)) for f in (*FINDINGS_13, COMPOSITE)]


def _synthetic_report(rng: np.random.Generator, q: int, want: int, cfg: dict) -> tuple[str, int]:
    """A template report of a random label set in which question ``q``'s target is ``want``."""
    from ..data.template_reports import template_report
    from ..labels import FINDINGS_13

    codes = {}
    for i, f in enumerate(FINDINGS_13):
        u = rng.random()
        codes[f] = 1.0 if u < float(cfg["p_synthetic_positive"]) else (-1.0 if u < 0.25 else 0.0)
    n13 = len(FINDINGS_13)
    if q < n13:
        codes[FINDINGS_13[q]] = 1.0 if want else float(rng.choice([0.0, -1.0]))
    elif want and not any(v == 1.0 for v in codes.values()):
        codes[FINDINGS_13[int(rng.integers(n13))]] = 1.0
    elif not want:
        codes = {f: (0.0 if v == 1.0 else v) for f, v in codes.items()}
    target = int(codes[FINDINGS_13[q]] == 1.0) if q < n13 else int(any(v == 1.0 for v in codes.values()))
    return template_report(codes, negatives=cfg["template_negatives"]), target


def _draw_batch(rng: np.random.Generator, ex: dict, cfg: dict, n_q: int) -> list[tuple[int, int, str | None, int]]:
    """(image row, question, report text or None, target) per example, positives/negatives balanced.

    Report-present examples carry a training study's own report (share ``1 - p_synthetic``) or the
    template report of a random label set (every finding can be positive, which the demo studies
    alone do not give), shown with a random training image; report-absent examples a study's image.
    """
    t = ex["targets"]
    n = len(ex["image_id"])
    out = []
    for _ in range(int(cfg["batch_size"])):
        q = int(rng.integers(n_q))
        want = int(rng.integers(2))
        if rng.random() < float(cfg["p_report"]):
            image = int(rng.integers(n))
            if rng.random() < float(cfg["p_synthetic"]):
                text, target = _synthetic_report(rng, q, want, cfg)
            else:
                pool = np.flatnonzero(t[:, q] == want)
                row = int(rng.choice(pool if pool.size else np.arange(n)))
                text, target = ex["reports"][row], int(t[row, q])
                if rng.random() >= float(cfg["p_mismatch"]):
                    image = row
            out.append((image, q, text, target))
        else:
            pool = np.flatnonzero(t[:, q] == want)
            row = int(rng.choice(pool if pool.size else np.arange(n)))
            out.append((row, q, None, int(t[row, q])))
    return out


def train(config: dict | None = None, *, steps: int | None = None, progress: bool = False, log_every: int = 50,
          threads: int | None = 1):
    """Train ``ref-vlm``; returns ``(model, processor, info)`` (``info``: config, data hash, metrics).

    Deterministic for a config: weights from ``torch.Generator(seed)``, batches from
    ``numpy.random.default_rng(seed)``, AdamW with a linear warm-up, float32 on the CPU.
    ``steps`` overrides the config's number of steps (the test runs a few). ``threads`` sets torch's
    intra-op threads for the duration of the call (restored after): one thread is several times
    faster than two on a shared 2-core machine for a model this small.
    """
    import torch
    from PIL import Image

    from ..protocols.datasets import load_dataset

    cfg = json.loads(json.dumps({**TRAIN_CONFIG, **(config or {})}))
    n_steps = int(cfg["steps"] if steps is None else steps)
    ds = load_dataset(cfg["dataset"])
    train_p, eval_p = split_patients(ds)
    ex = training_examples(ds, train_p, policy=cfg["policy"], negatives=cfg["template_negatives"])
    pixels = []
    for path in ex["path"]:
        with Image.open(path) as im:
            pixels.append(np.asarray(im))
    questions = _questions()
    model, processor, _ = architecture(cfg, seed=int(cfg["seed"]))
    vlm = wrap_model(model, processor, {"kind": "training"})
    tok = vlm.tokenizer
    answer_ids = {1: tok.convert_tokens_to_ids("yes"), 0: tok.convert_tokens_to_ids("no")}
    eos = tok.eos_token_id
    rng = np.random.default_rng(int(cfg["seed"]))
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"]))
    warm = max(int(cfg["warmup"]), 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 1.0 - s / max(n_steps, 1)))
    history = []
    model.train()
    t0 = time.perf_counter()
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        _loop(model, vlm, opt, sched, rng, ex, cfg, pixels, questions, answer_ids, eos, n_steps, history,
              progress=progress, log_every=log_every, t0=t0)
    finally:
        torch.set_num_threads(old_threads)
    model.eval()
    tail = history[-min(50, len(history)):] if history else [(float("nan"), float("nan"))]
    info = {
        "config": cfg,
        "data": {"dataset_sha256": ds.manifest_hash, "n_train_patients": len(ex["patients"]),
                 "n_train_studies": len(ex["image_id"]), "n_eval_patients": len(eval_p),
                 "train_patients_sha256": hashlib.sha256("\n".join(ex["patients"]).encode()).hexdigest(),
                 "eval_cohort": EVAL_COHORT},
        "metrics": {"steps": n_steps, "final_loss": float(np.mean([h[0] for h in tail])),
                    "final_train_acc": float(np.mean([h[1] for h in tail])),
                    "train_seconds": round(time.perf_counter() - t0, 1)},
    }
    return model, processor, info


def _loop(model, vlm, opt, sched, rng, ex, cfg, pixels, questions, answer_ids, eos, n_steps, history, *,
          progress, log_every, t0) -> None:
    """The optimisation steps of :func:`train` (appends (loss, first-token accuracy) per step)."""
    import torch

    from ..models.protocol import ScoreRequest

    for step in range(n_steps):
        batch = _draw_batch(rng, ex, cfg, len(questions))
        texts, images, targets = [], [], []
        for image, q, rep, target in batch:
            req = ScoreRequest(pixels[image], questions[q][1], report=rep, finding=questions[q][0])
            texts.append(vlm.render(req))
            images.append(pixels[image])
            targets.append(answer_ids[target])
        enc = vlm._encode(texts, images)
        b = len(batch)
        extra = torch.tensor([[t, eos] for t in targets])
        ids = torch.cat([enc["input_ids"], extra], dim=1)
        mask = torch.cat([enc["attention_mask"], torch.ones(b, 2, dtype=enc["attention_mask"].dtype)], dim=1)
        inputs = {"input_ids": ids, "attention_mask": mask, "pixel_values": enc["pixel_values"]}
        for key in ("token_type_ids", "mm_token_type_ids"):
            if key in enc:
                inputs[key] = torch.cat([enc[key], torch.zeros(b, 2, dtype=enc[key].dtype)], dim=1)
        logits = model(**inputs, use_cache=False, logits_to_keep=3).logits  # positions -3, -2 predict -2, -1
        loss = torch.nn.functional.cross_entropy(logits[:, :2].reshape(-1, logits.shape[-1]), extra.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        with torch.no_grad():
            acc = float((logits[:, 0].argmax(-1) == extra[:, 0]).float().mean())
        history.append((loss.item(), acc))
        if progress and (step % log_every == 0 or step == n_steps - 1):
            print(f"step {step:4d}  loss {np.mean([h[0] for h in history[-log_every:]]):.3f}  "
                  f"first-token acc {np.mean([h[1] for h in history[-log_every:]]):.3f}  "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)


def _state(model) -> dict:
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def main(argv: list[str] | None = None) -> int:
    """Train ``ref-vlm`` and write ``resources/ref_vlm.safetensors`` and ``resources/ref_vlm.json``."""
    from safetensors.torch import save_file

    parser = argparse.ArgumentParser(prog="python -m shovir_core.training.ref_vlm", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help=f"training steps (default {TRAIN_CONFIG['steps']})")
    parser.add_argument("--out", type=Path, default=resources_dir(), help="output folder (default: the package resources)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="override a TRAIN_CONFIG entry (recorded in the metadata), e.g. --set lr=0.001")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in TRAIN_CONFIG:
            raise SystemExit(f"--set {item!r}: unknown key {key!r}; known: {sorted(TRAIN_CONFIG)}")
        overrides[key] = json.loads(value)
    model, _, info = train(overrides, steps=args.steps, progress=True)
    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / WEIGHTS_FILE
    state = {k: v for k, v in _state(model).items() if not k.endswith("lm_head.weight")}
    save_file(state, str(weights), metadata={"config": json.dumps(info["config"], sort_keys=True),
                                             "data": json.dumps(info["data"], sort_keys=True)})
    info["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    info["fingerprint"] = fingerprint(info)
    (args.out / META_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    print(f"wrote {weights} ({weights.stat().st_size / 1e6:.2f} MB), fingerprint {info['fingerprint'][:12]}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

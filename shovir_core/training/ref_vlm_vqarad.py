"""Train ``ref-vlm-vqarad`` (:mod:`shovir_core.models.ref_vlm_vqarad`) on VQA-RAD's official training questions.

``python -m shovir_core.training.ref_vlm_vqarad [--steps N] [--out DIR]`` writes
``ref_vlm_vqarad.safetensors`` and ``ref_vlm_vqarad.json`` into ``shovir_core/resources/`` (or ``DIR``),
with the accuracy on the official test questions beside the training split's majority answer.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from ..models.ref_vlm import resources_dir
from ..models.ref_vlm_vqarad import META_FILE, TRAIN_CONFIG, WEIGHTS_FILE, architecture as _architecture

__all__ = ["training_questions", "evaluate", "train", "main"]


def training_questions(ds, *, split: str = "train"):
    """The official closed yes/no questions of one split (``freeform`` + ``para``)."""
    q = ds.closed_yes_no(official=True)
    return q[q["split"] == split].sort_values("question_id").reset_index(drop=True)


def _pixels(paths, size: int) -> dict:
    from ..protocols.noreport import prepare_image

    return {p: prepare_image(p, size=size) for p in sorted(set(paths))}


def evaluate(vlm, ds, *, split: str, size: int) -> dict:
    """Accuracy of ``vlm`` (lowercase first-token readout) and of the training majority answer on a split."""
    from ..models.protocol import ScoreRequest

    q = training_questions(ds, split=split)
    pix = _pixels(q["path"], size)
    res = vlm.score_yes_no([ScoreRequest(pix[p], text) for p, text in zip(q["path"], q["question"])])
    pred = np.array([r["readout"] for r in res])
    majority = training_questions(ds, split="train")["key"].value_counts().idxmax()
    return {"n": int(len(q)), "accuracy": float((pred == q["key"].to_numpy()).mean()),
            "majority_answer": str(majority), "majority_accuracy": float((q["key"] == majority).mean()),
            "yes_rate": float((pred == "yes").mean())}


def train(config: dict | None = None, *, steps: int | None = None, progress: bool = False, threads: int | None = 1):
    """Train ``ref-vlm-vqarad``; returns ``(vlm, info)``. Deterministic for a config (CPU, float32)."""
    import torch

    from ..protocols.datasets import load_dataset
    from ..models.protocol import ScoreRequest
    from ..models.ref_vlm import wrap_model

    cfg = {**TRAIN_CONFIG, **(config or {})}
    n_steps = int(cfg["steps"] if steps is None else steps)
    ds = load_dataset(cfg["dataset"])
    q = training_questions(ds)
    pix = _pixels(q["path"], int(cfg["image_size"]))
    model, processor, _ = _architecture(int(cfg["seed"]))
    vlm = wrap_model(model, processor, {"kind": "training"})
    tok = vlm.tokenizer
    answer = {"yes": tok.convert_tokens_to_ids("yes"), "no": tok.convert_tokens_to_ids("no")}
    eos = tok.eos_token_id
    rng = np.random.default_rng(int(cfg["seed"]))
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"]))
    warm = max(int(cfg["warmup"]), 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 1.0 - s / max(n_steps, 1)))
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    t0, history = time.perf_counter(), []
    model.train()
    try:
        for step in range(n_steps):
            rows = q.iloc[rng.integers(len(q), size=int(cfg["batch_size"]))]
            reqs = [ScoreRequest(pix[p], text) for p, text in zip(rows["path"], rows["question"])]
            enc = vlm._encode([vlm.render(r) for r in reqs], [r.image for r in reqs])
            b = len(reqs)
            extra = torch.tensor([[answer[k], eos] for k in rows["key"]])
            inputs = {"input_ids": torch.cat([enc["input_ids"], extra], dim=1),
                      "attention_mask": torch.cat([enc["attention_mask"], torch.ones(b, 2, dtype=enc["attention_mask"].dtype)], dim=1),
                      "pixel_values": enc["pixel_values"]}
            for key in ("token_type_ids", "mm_token_type_ids"):
                if key in enc:
                    inputs[key] = torch.cat([enc[key], torch.zeros(b, 2, dtype=enc[key].dtype)], dim=1)
            logits = model(**inputs, use_cache=False, logits_to_keep=3).logits
            loss = torch.nn.functional.cross_entropy(logits[:, :2].reshape(-1, logits.shape[-1]), extra.reshape(-1))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            history.append(float(loss.item()))
            if progress and (step % 25 == 0 or step == n_steps - 1):
                print(f"step {step:4d}  loss {np.mean(history[-25:]):.3f}  {time.perf_counter() - t0:.0f}s", flush=True)
    finally:
        torch.set_num_threads(old)
    model.eval()
    info = {"config": cfg,
            "data": {"dataset_sha256": ds.manifest_hash, "n_train_questions": int(len(q)),
                     "train_questions_sha256": hashlib.sha256("\n".join(q["question_id"]).encode()).hexdigest()},
            "metrics": {"steps": n_steps, "final_loss": float(np.mean(history[-25:])) if history else float("nan"),
                        "train_seconds": round(time.perf_counter() - t0, 1)}}
    return vlm, info


def main(argv: list[str] | None = None) -> int:
    """Train and write ``resources/ref_vlm_vqarad.safetensors`` and ``.json`` (test accuracy included)."""
    from safetensors.torch import save_file

    from ..protocols.datasets import load_dataset

    parser = argparse.ArgumentParser(prog="python -m shovir_core.training.ref_vlm_vqarad", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--out", type=Path, default=resources_dir())
    args = parser.parse_args(argv)
    vlm, info = train(steps=args.steps, progress=True)
    ds = load_dataset(info["config"]["dataset"])
    info["metrics"]["test"] = evaluate(vlm, ds, split="test", size=int(info["config"]["image_size"]))
    info["metrics"]["train"] = evaluate(vlm, ds, split="train", size=int(info["config"]["image_size"]))
    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / WEIGHTS_FILE
    state = {k: v.detach().clone().contiguous() for k, v in vlm.model.state_dict().items() if not k.endswith("lm_head.weight")}
    save_file(state, str(weights), metadata={"config": json.dumps(info["config"], sort_keys=True),
                                             "data": json.dumps(info["data"], sort_keys=True)})
    info["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    (args.out / META_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    print(json.dumps(info["metrics"], indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

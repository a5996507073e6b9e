"""``ref-vlm-vqarad``: the ``ref-vlm`` architecture trained here on VQA-RAD's official training questions.

The same transformers class and toy width as ``ref-vlm`` (:mod:`shovir_core.models.ref_vlm`:
``Gemma3ForConditionalGeneration``, 6 decoder layers of width 64, 16 image tokens, 64 x 64 inputs,
the Gemma turn template, ModaLens' prompt without a report: one user turn ``[image, "Question: ..."]``,
the answer at the first generated position). It learns something real and nothing planted: the
**closed yes/no questions of VQA-RAD's official training split** (``freeform`` + ``para`` rows of
``trainset.json``; 942 questions on the shipped release) with a next-token loss on the lowercase
answer ``yes`` / ``no`` followed by ``<eos>``, batches drawn uniformly with a fixed seed, AdamW,
float32 on one CPU thread (:func:`train`; ``python -m shovir_core.models.ref_vlm_vqarad`` writes the
weights). Images are resized to 64 x 64 RGB (:func:`shovir_core.protocols.noreport.prepare_image`,
the protocol's own resizing, so training and evaluation see the same pixels).

It is evaluated on the official **test** questions (the chapter "Datasets without a report" shows
its accuracy beside the majority-answer baseline, whatever they are); ``resources/ref_vlm_vqarad.json``
carries the training config, the data hash and the training metrics, including that test accuracy.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from .spec import ModelSpec

__all__ = ["SPECS", "TRAIN_CONFIG", "WEIGHTS_FILE", "META_FILE", "build_ref_vlm_vqarad", "train", "main",
           "training_questions"]

SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("ref-vlm-vqarad", "ref-vlm-vqarad", paper="reference", dtype="float32", max_new_tokens=8,
              notes="Gemma3ForConditionalGeneration at ref-vlm's size, trained on VQA-RAD's official training "
                    "closed yes/no questions (seeded, CPU); evaluated on the official test questions"),
)
"""The registry entry (:data:`shovir_core.models.REGISTRY` includes it)."""

TRAIN_CONFIG: dict = {
    "seed": 0,
    "steps": 300,
    "batch_size": 32,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "warmup": 20,
    "image_size": 64,
    "dataset": "vqa-rad:data/vqa-rad",
}
"""Training settings (hashed into the shipped weights' metadata); the architecture is ``ref-vlm``'s."""

WEIGHTS_FILE = "ref_vlm_vqarad.safetensors"
META_FILE = "ref_vlm_vqarad.json"


def _architecture(seed: int):
    from .ref_vlm import TRAIN_CONFIG as ARCH
    from .ref_vlm import _architecture as arch

    return arch(ARCH, seed=seed)


def training_questions(ds, *, split: str = "train"):
    """The official closed yes/no questions of one split (``freeform`` + ``para``)."""
    q = ds.closed_yes_no(official=True)
    return q[q["split"] == split].sort_values("question_id").reset_index(drop=True)


def _pixels(paths, size: int) -> dict:
    from ..protocols.noreport import prepare_image

    return {p: prepare_image(p, size=size) for p in sorted(set(paths))}


def evaluate(vlm, ds, *, split: str, size: int) -> dict:
    """Accuracy of ``vlm`` (lowercase first-token readout) and of the training majority answer on a split."""
    from .protocol import ScoreRequest

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
    from .protocol import ScoreRequest
    from .ref_vlm import _wrap

    cfg = {**TRAIN_CONFIG, **(config or {})}
    n_steps = int(cfg["steps"] if steps is None else steps)
    ds = load_dataset(cfg["dataset"])
    q = training_questions(ds)
    pix = _pixels(q["path"], int(cfg["image_size"]))
    model, processor, _ = _architecture(int(cfg["seed"]))
    vlm = _wrap(model, processor, {"kind": "training"})
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


def build_ref_vlm_vqarad(spec: ModelSpec | None = None, *, local_path=None, device: str | None = None,
                         dtype: str | None = None, weights: str | Path | None = None):
    """The trained model as an :class:`~shovir_core.models.hf.HFVLM` (weights from ``resources/``)."""
    import torch
    from safetensors.torch import load_file

    from .ref_vlm import resources_dir
    from .spec import ModelNotAvailableError

    path = Path(weights) if weights is not None else resources_dir() / WEIGHTS_FILE
    meta_path = path.with_suffix(".json")
    if not path.is_file() or not meta_path.is_file():
        raise ModelNotAvailableError(f"ref-vlm-vqarad: weights {path} or metadata {meta_path} missing; train them with "
                                     "`python -m shovir_core.models.ref_vlm_vqarad`")
    meta = json.loads(meta_path.read_text())
    model, processor, digest = _architecture(int(meta["config"]["seed"]))
    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if real_missing or unexpected:
        raise RuntimeError(f"ref-vlm-vqarad: weights do not fit the architecture ({real_missing[:3]}, {unexpected[:3]})")
    model.tie_weights()
    model.to(device=torch.device(device or "cpu"), dtype=getattr(torch, dtype) if dtype else torch.float32).eval()
    from .hf import HFVLM

    return HFVLM(SPECS[0], model, processor, batch_size=16,
                 source={"kind": "ref-vlm-vqarad", "config_sha256": digest, "weights_sha256": meta["weights_sha256"]})


def main(argv: list[str] | None = None) -> int:
    """Train and write ``resources/ref_vlm_vqarad.safetensors`` and ``.json`` (test accuracy included)."""
    from safetensors.torch import save_file

    from ..protocols.datasets import load_dataset
    from .ref_vlm import resources_dir

    parser = argparse.ArgumentParser(prog="python -m shovir_core.models.ref_vlm_vqarad", description=__doc__.splitlines()[0])
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

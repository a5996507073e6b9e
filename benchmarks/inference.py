"""Benchmark: prefix reuse vs the naive one-request-at-a-time path on the all-14 design, in one process.

The all-14 design asks 14 questions (13 findings + the composite) after the same image and report.
The naive path runs each full prompt on its own; the reuse path (``HFVLM.score_yes_no``) prefills the
shared (image, report) prefix once and runs the 14 question suffixes as one batch. Both paths score
the same requests; the script reports prefill tokens, wall time, trials per second, the ratios and
the largest logit difference between the paths. ``--answer-tokens 8`` adds the generated-answer
readout (8 greedy tokens; the naive path then runs ``generate`` per request).

Targets: >= 5x fewer prefill tokens and >= 3x faster with reuse.

Default: ``tiny-gemma3`` with 256 image tokens per image (MedGemma's prompt structure, tiny widths)
on the CPU. ``--medgemma-4b-dims`` builds a random-initialised Gemma3 with MedGemma-4B's published
dimensions (no weights needed to measure speed); use it on a GPU with ``--device cuda --dtype
bfloat16`` and give ``--peak-tflops`` (the accelerator's dense bf16 peak) to get the prefill
throughput as a fraction of peak.

    python benchmarks/inference.py [--cases 4] [--answer-tokens 8] [--json out.json]
    python benchmarks/inference.py --medgemma-4b-dims --device cuda --dtype bfloat16 --cases 16 \\
        --batch-size 14 --peak-tflops 989
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from shovir_core.labels import FINDINGS_13
from shovir_core.models import ScoreRequest
from shovir_core.models.tiny import build_tiny

from limits import verdict

QUESTIONS = [f"Does this chest X-ray show {f}?" for f in FINDINGS_13] + [
    "Is any acute cardiopulmonary finding present on this chest X-ray?"]

REPORT = (
    "FINDINGS: Frontal and lateral views of the chest were obtained. There is a small left pleural effusion with "
    "adjacent atelectasis. The cardiac silhouette is mildly enlarged. There is no pneumothorax. Mild pulmonary "
    "vascular congestion is noted without frank edema. No focal consolidation. A right internal jugular catheter "
    "terminates in the mid SVC. IMPRESSION: Small left pleural effusion and basilar atelectasis; mild cardiomegaly."
)
"""A synthetic report of typical MIMIC-CXR length (benchmark input only)."""

MEDGEMMA_4B_DIMS = {
    "hidden": 2560, "layers": 34, "heads": 8, "kv_heads": 4, "head_dim": 256, "intermediate": 10240,
    "vocab": 262208, "sliding_window": 1024,
    "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(34)],
    "vision_hidden": 1152, "vision_intermediate": 4304, "vision_layers": 27, "vision_heads": 16,
    "image_size": 896, "patch_size": 14,
}
"""MedGemma-4B-it (Gemma 3 4B) text and SigLIP vision dimensions from its published config."""


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _timed(fn, device: str):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-gemma3", choices=["tiny-gemma3", "tiny-llava", "tiny-qwen2vl"])
    ap.add_argument("--cases", type=int, default=4, help="(image, report) cases; 14 questions each")
    ap.add_argument("--image-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=14)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--medgemma-4b-dims", action="store_true", help="random Gemma3 of MedGemma-4B dimensions")
    ap.add_argument("--peak-tflops", type=float, default=None, help="dense peak of the accelerator in --dtype")
    ap.add_argument("--answer-tokens", type=int, default=0, help="also generate this many greedy answer tokens")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    if args.medgemma_4b_dims and args.model != "tiny-gemma3":
        ap.error("--medgemma-4b-dims builds a Gemma3 model; use --model tiny-gemma3")

    dims = MEDGEMMA_4B_DIMS if args.medgemma_4b_dims else None
    model = build_tiny(args.model, seed=args.seed, device=args.device, dtype=args.dtype,
                       image_tokens=args.image_tokens, dims=dims, std=0.02 if dims else 0.1,
                       batch_size=args.batch_size)
    rng = np.random.default_rng(args.seed)
    images = [rng.integers(0, 256, (512, 512), dtype=np.uint8) for _ in range(args.cases + 1)]
    requests = [ScoreRequest(im, q, report=REPORT) for im in images[1:] for q in QUESTIONS]
    warm = [ScoreRequest(images[0], q, report=REPORT) for q in QUESTIONS[:2]]
    model.score_yes_no(warm)
    model._score_naive(warm[:1], 0)

    model.stats.update(prefill_tokens=0, forward_passes=0, requests=0)
    naive, t_naive = _timed(lambda: [model._score_naive([r], args.answer_tokens)[0] for r in requests], args.device)
    tok_naive = model.stats["prefill_tokens"]
    model.stats.update(prefill_tokens=0, forward_passes=0, requests=0)
    reuse, t_reuse = _timed(lambda: model.score_yes_no(requests, answer_tokens=args.answer_tokens), args.device)
    tok_reuse, passes = model.stats["prefill_tokens"], model.stats["forward_passes"]
    diff = max(abs(a[k] - b[k]) for a, b in zip(naive, reuse) for k in ("logit_yes", "logit_no", "family_logit_yes"))

    n_text = sum(p.numel() for n, p in model.model.named_parameters() if "vision" not in n and "embed_tokens" not in n)
    gpu = None
    if args.device.startswith("cuda"):
        import torch

        gpu = torch.cuda.get_device_name(0)
    result = {
        "benchmark": "inference", "gpu": gpu, "model": args.model, "dims": "medgemma-4b" if dims else "tiny", "device": args.device, "dtype": args.dtype,
        "cases": args.cases, "trials": len(requests), "image_tokens": args.image_tokens,
        "answer_tokens": args.answer_tokens,
        "same_generated_answers": all(a["generated"] == b["generated"] for a, b in zip(naive, reuse)),
        "prompt_tokens_per_trial": naive[0]["n_input_tokens"],
        "naive": {"prefill_tokens": tok_naive, "seconds": t_naive, "trials_per_s": len(requests) / t_naive},
        "reuse": {"prefill_tokens": tok_reuse, "seconds": t_reuse, "trials_per_s": len(requests) / t_reuse,
                  "forward_passes": passes},
        "prefill_token_ratio": tok_naive / tok_reuse, "speedup": t_naive / t_reuse,
        "max_abs_logit_diff": diff, "text_params_excl_embeddings": n_text,
    }
    for key in ("naive", "reuse"):  # decoder prefill FLOPs ~ 2 x non-embedding text params x tokens
        tflops = 2.0 * n_text * result[key]["prefill_tokens"] / result[key]["seconds"] / 1e12
        result[key]["approx_prefill_tflops"] = tflops
        if args.peak_tflops:
            result[key]["fraction_of_peak"] = tflops / args.peak_tflops
    print(f"{args.model} ({result['dims']} dims, {args.device}, {args.dtype}): {len(requests)} trials = "
          f"{args.cases} cases x 14 questions, {result['prompt_tokens_per_trial']} prompt tokens per trial")
    for key in ("naive", "reuse"):
        r = result[key]
        extra = f", {r['fraction_of_peak']:.1%} of peak" if "fraction_of_peak" in r else ""
        print(f"  {key:6s} prefill tokens {r['prefill_tokens']:8d}  {r['seconds']:8.2f} s  "
              f"{r['trials_per_s']:8.2f} trials/s  ~{r['approx_prefill_tflops']:.3f} TFLOP/s{extra}")
    print("  " + verdict("prefill tokens naive/reuse", result["prefill_token_ratio"], at_least=5) + "; "
          + verdict("speed-up", result["speedup"], at_least=3) + f"; max |logit diff| = {diff:.2e}"
          + (f"; same generated answers: {result['same_generated_answers']}" if args.answer_tokens else ""))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()

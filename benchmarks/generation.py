"""Benchmark: ShoViR report generation in batches vs one report at a time, in one process.

Both paths generate greedy reports for the same images with the same model: the batched path runs
``--batch-size`` images per ``generate`` call (left padding, per-row stopping; ``HFVLM.generate_reports``
with ``report_batch_size``), the baseline one image per call. The script reports reports per second
and generated tokens per second of each path, their ratio (target >= 3x on ``tiny-gemma3`` on the
CPU) and how many reports differ between the paths (greedy outputs must be equal).

Default: ``tiny-gemma3`` with 256 image tokens per image (MedGemma's prompt structure, tiny widths) on
the CPU. ``--medgemma-4b-dims`` builds a random-initialised Gemma3 with MedGemma-4B's published
dimensions (speed only; no weights needed); run it on a GPU with ``--device cuda --dtype bfloat16``.
The seconds per report at a batch size are what the reproduction map projects GPU-hours from
(``--json`` writes them).

    python benchmarks/generation.py [--images 16] [--batch-size 16] [--max-new-tokens 32] [--json out.json]
    python benchmarks/generation.py --medgemma-4b-dims --device cuda --dtype bfloat16 --images 32 \\
        --batch-size 32 --max-new-tokens 128 --json generation-medgemma4b.json
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from inference import MEDGEMMA_4B_DIMS, _sync  # the sibling benchmark (this folder is on sys.path)
from limits import verdict
from shovir_core.models.tiny import build_tiny


def _timed(fn, device: str):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-gemma3", choices=["tiny-gemma3", "tiny-llava", "tiny-qwen2vl"])
    ap.add_argument("--images", type=int, default=16, help="reports to generate on each path")
    ap.add_argument("--batch-size", type=int, default=16, help="images per generate call on the batched path")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--image-tokens", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=256, help="side of the random test images")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--medgemma-4b-dims", action="store_true", help="random Gemma3 of MedGemma-4B dimensions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    if args.medgemma_4b_dims and args.model != "tiny-gemma3":
        ap.error("--medgemma-4b-dims builds a Gemma3 model; use --model tiny-gemma3")

    dims = MEDGEMMA_4B_DIMS if args.medgemma_4b_dims else None
    model = build_tiny(args.model, seed=args.seed, device=args.device, dtype=args.dtype,
                       image_tokens=args.image_tokens, dims=dims, std=0.02 if dims else 0.1)
    rng = np.random.default_rng(args.seed)
    images = [rng.integers(0, 256, (args.image_size, args.image_size), dtype=np.uint8) for _ in range(args.images + 2)]
    warm, images = images[:2], images[2:]
    model.report_batch_size = 2
    model.generate_reports(warm, max_new_tokens=4)

    results = {}
    for key, size in (("one_at_a_time", 1), ("batched", args.batch_size)):
        model.report_batch_size = size
        model.stats.update(reports=0, generated_tokens=0, prefill_tokens=0, forward_passes=0)
        reports, seconds = _timed(lambda: model.generate_reports(images, max_new_tokens=args.max_new_tokens),
                                  args.device)
        results[key] = {"batch_size": size, "seconds": seconds, "reports": len(reports),
                        "reports_per_s": len(reports) / seconds, "generated_tokens": model.stats["generated_tokens"],
                        "generated_tokens_per_s": model.stats["generated_tokens"] / seconds,
                        "seconds_per_report": seconds / len(reports), "generate_calls": model.stats["forward_passes"],
                        "prompt_tokens_per_report": model.stats["prefill_tokens"] // max(1, len(reports)),
                        "texts": reports}
    differing = sum(a != b for a, b in zip(results["one_at_a_time"].pop("texts"), results["batched"].pop("texts")))
    n_params = sum(p.numel() for p in model.model.parameters())
    gpu = None
    if args.device.startswith("cuda"):
        import torch

        gpu = torch.cuda.get_device_name(0)
    result = {
        "benchmark": "generation", "model": args.model, "dims": "medgemma-4b" if dims else "tiny",
        "device": args.device, "gpu": gpu, "cpu": platform.processor() or platform.machine(), "dtype": args.dtype,
        "images": args.images, "max_new_tokens": args.max_new_tokens, "image_tokens": args.image_tokens,
        "parameters": n_params, **results,
        "speedup": results["batched"]["reports_per_s"] / results["one_at_a_time"]["reports_per_s"],
        "differing_reports": differing,
    }
    print(f"{args.model} ({result['dims']} dims, {args.device}{' ' + gpu if gpu else ''}, {args.dtype}): "
          f"{args.images} reports of <= {args.max_new_tokens} tokens, "
          f"{results['batched']['prompt_tokens_per_report']} prompt tokens each")
    for key in ("one_at_a_time", "batched"):
        r = results[key]
        print(f"  {key:13s} batch {r['batch_size']:3d}  {r['seconds']:8.2f} s  {r['reports_per_s']:8.2f} reports/s  "
              f"{r['generated_tokens_per_s']:9.1f} generated tokens/s")
    print("  " + verdict("speed-up batched / one at a time", result["speedup"], at_least=3)
          + f"; differing reports: {differing} of {args.images}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()

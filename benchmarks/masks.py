"""Benchmark: Gemma-3's attention masks built once (``attention_masks.forward_inputs``) vs by the model, in one process.

The same encoded ModaLens prompts (image first, a template report) go through ``ref-vlm`` (the demo's
trained Gemma-3) twice per round: with the masks the model builds itself (its sliding-window mask through
``torch.vmap``) and with :func:`shovir_core.models.attention_masks.forward_inputs`. ``--batch 1`` is a
prefill (one image's shared prefix, what every ModaLens group and App. N lens group runs first); a larger
batch is a chunk of whole prompts (App. N's knockouts, the gradient and attention-mass baselines). The
logits must be identical; the speed-up is printed (the issue sets no limit for it). Best of ``--repeat``
rounds, the two paths alternating, torch on the demo's one thread.

    python benchmarks/masks.py [--batch 1] [--passes 40] [--repeat 3] [--model ref-vlm] [--sentences 0] [--gradient]

``--gradient`` times App. N.3's image-gradient baseline
(:func:`~shovir_core.models.residuals.image_input_gradient`, a forward and a backward pass per chunk) on the
same prompts, the model's own masks against the masks built once; the gradient norms must be identical.

Measured 2026-12-06 on the idle 2-core development machine (best of 3, logits identical): ref-vlm prefills
(40 x 1 prompt of 99 tokens) 2.59x; whole-prompt chunks (10 x 16) 1.24x; ``tiny-gemma3@62``, the rehearsal's
62-layer stand-in (5 x 16) 1.04x -- the mask is built once per pass, whatever the depth. Later the same day,
with the mask handed in additive on the CPU (``attention_masks.additive``: sdpa no longer converts a boolean
mask in each layer): ref-vlm prefills 2.51x, chunks 1.30x; ``tiny-gemma3@62`` chunks 1.22x (99 tokens) and
1.14x (``--sentences 6``, 255 tokens), its image-gradient baseline (``--gradient --sentences 6``, 4 x 16) 1.18x,
every output identical.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from shovir_core.models import ScoreRequest
from shovir_core.models.hf import _pil
from shovir_core.models.registry import get_model
from shovir_core.models.threads import use_demo_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ref-vlm", help="a Gemma-3 model of the registry (ref-vlm, tiny-gemma3@62)")
    parser.add_argument("--batch", type=int, default=1, help="prompts per forward pass (1: a prefill)")
    parser.add_argument("--passes", type=int, default=40, help="forward passes per round")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=0,
                        help="sentences added to the two-line report (a MIMIC-length report: about 6)")
    parser.add_argument("--gradient", action="store_true",
                        help="time App. N.3's image-gradient baseline (forward and backward) instead of forward passes")
    args = parser.parse_args()
    vlm = get_model(args.model)
    use_demo_threads(vlm.device)
    rng = np.random.default_rng(0)
    report = "FINDINGS: The heart is normal in size. No pleural effusion. No pneumothorax.\nIMPRESSION: No acute process."
    report += " The lungs are clear without focal consolidation, effusion or pneumothorax." * args.sentences
    batches = []
    for _ in range(args.passes):
        reqs = [ScoreRequest(rng.integers(0, 256, (64, 64), dtype=np.uint8), "Is there edema?", report=report)
                for _ in range(args.batch)]
        batches.append(vlm._encode([vlm.render(r) for r in reqs], [_pil(r.image) for r in reqs]))

    if args.gradient:
        from shovir_core.models.residuals import image_input_gradient

        requests = [ScoreRequest(rng.integers(0, 256, (64, 64), dtype=np.uint8), "Is there edema?", report=report)
                    for _ in range(args.passes * args.batch)]
        vlm.batch_size = args.batch

        def run(prepare):
            vlm._forward_inputs = prepare  # the path image_input_gradient takes to the model, for this timing only
            try:
                return [torch.from_numpy(image_input_gradient(vlm, requests))]
            finally:
                del vlm._forward_inputs
    else:
        @torch.inference_mode()
        def run(prepare):
            return [vlm.model(**prepare(b), use_cache=False, logits_to_keep=1).logits for b in batches]

    own, once = run(vlm._to_model), run(vlm._forward_inputs)
    same = all(torch.equal(a, b) for a, b in zip(own, once))
    what = "image-gradient baseline over" if args.gradient else "passes of"
    print(f"{args.model}: {what} {args.passes} x {args.batch} prompt(s), {batches[0]['input_ids'].shape[1]} tokens; "
          f"outputs identical: {same}")
    best = {"model": float("inf"), "once": float("inf")}
    for _ in range(args.repeat):
        for key, prepare in (("model", vlm._to_model), ("once", vlm._forward_inputs)):
            t = time.perf_counter()
            run(prepare)
            best[key] = min(best[key], time.perf_counter() - t)
    print(f"model's own masks: {best['model']:.3f} s   masks built once: {best['once']:.3f} s   "
          f"speed-up {best['model'] / best['once']:.2f}x")
    if not same:
        raise SystemExit("the outputs differ: the masks are not the model's own")


if __name__ == "__main__":
    main()

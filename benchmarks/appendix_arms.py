"""Benchmark: the ModaLens appendix arms (D, H, L, M, text controls) scored together vs one arm at a time.

Every arm of these appendices asks the one-question design's question about the same images; the
arms differ in what follows the image (report present or absent, a framing sentence, a rewritten
report, the question template, the answer instruction) or in the block order. Scored one arm at a
time, each image carries one request per call, so every prompt is prefilled in full. Scored
together (one ``HFVLM.score_yes_no`` call with every arm's requests), the model prefills each
image's prefix once and then every stretch of text that two or more arms share once (a token trie:
the report and framing, then the question before the instructions differ;
:meth:`shovir_core.models.hf.HFVLM._score_prefix_group`); text-first arms share nothing and run in
full either way. Both paths score the same requests; the script reports prefill tokens, wall
time, their ratios, and the largest logit difference and whether the generated answers agree.

Target: >= 3x fewer prefill tokens together. The text-first arms (App. H) put the text before the
image, so no image prefix is shared and they cost the same either way; the script also reports the
ratio over the image-first arms alone. Substitute redraws (other images) are not arms of one image
and are left out.

Measured (2-core CPU, defaults, ``trie_min_saved_tokens`` 16): 35,736 vs 11,776 prefill tokens, 3.03x
(3.78x over the image-first arms; every shared stretch a node, ``--trie-min-saved 1``: 3.06x); the
same logits (max difference ~1e-6) and generated answers. Wall time on the tiny model is about even:
its forwards are so small that each trie node's extra pass and cache copy costs about what its
tokens save, which is why a stretch must save 16 tokens to become a node; on a full-size model
prefill time follows tokens.

Measured again with one torch thread (2-core CPU under load from other processes, defaults): one arm
at a time 15.47 s, together 17.50 s (0.88x; with torch's two threads 0.72x, and with the trie off,
``--trie-min-saved 1000000000``, 0.58x at 2.16x fewer tokens). Since a trie branch with no node of
its own below it runs in its parent's suffix batch (``HFVLM._trie_extends``; 2026-12-02, two
low-priority processes on the machine): with the trie 2.31 s vs 2.75 s (0.84x), without text nodes
0.97x, so the CPU then ran without text nodes. Since the trie runs packed (``HFVLM._score_packed``: the
nodes of one depth in one pass, the suffixes of all nodes in shared batches; 2026-12-06, idle): one arm
at a time 1.62 s, together 1.36 s (1.19x) at 3.03x fewer tokens, and without text nodes 0.85x -- so
the 16-token trie is the default on every device (``shovir_core.models.hf.TRIE_MIN_SAVED_TOKENS``).
The paths agree to ~1e-6 in the logits, with the same generated answers.

Default: ``tiny-gemma3`` with 256 image tokens per image (MedGemma's prompt structure, tiny widths),
CPU, 8 generated answer tokens (the protocol's default).

    python benchmarks/appendix_arms.py [--cases 2] [--answer-tokens 8] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from shovir_core.data.text_controls import TEXT_CONTROLS, apply_text_control
from shovir_core.models import ScoreRequest
from shovir_core.models.threads import use_demo_threads
from shovir_core.models.tiny import build_tiny
from shovir_core.protocols.modalens import question_text

from limits import verdict

REPORT = (
    "FINDINGS: Frontal and lateral views of the chest were obtained. There is a small left pleural effusion with "
    "adjacent atelectasis. The cardiac silhouette is mildly enlarged. There is no pneumothorax. Mild pulmonary "
    "vascular congestion is noted without frank edema. No focal consolidation. A right internal jugular catheter "
    "terminates in the mid SVC.\nIMPRESSION: Small left pleural effusion and basilar atelectasis; mild cardiomegaly."
)
"""A synthetic report of typical MIMIC-CXR length (benchmark input only)."""

FINDING = "Pleural Effusion"


def arms(image: np.ndarray, *, case_id: str) -> dict[str, ScoreRequest]:
    """The requests of one image under every arm of the appendices (one-question design)."""
    q, alt = question_text(FINDING), question_text(FINDING, template="alt")
    out = {
        "P": ScoreRequest(image, q, report=REPORT), "A": ScoreRequest(image, q),
        "P_instr": ScoreRequest(image, q, report=REPORT, instruction="yes_no"),
        "A_instr": ScoreRequest(image, q, instruction="yes_no"),
        "P_hist": ScoreRequest(image, q, report=REPORT, instruction="yes_no", framing="historical"),
        "P_warn": ScoreRequest(image, q, report=REPORT, instruction="yes_no", framing="warning"),
        "P_alt": ScoreRequest(image, alt, report=REPORT), "A_alt": ScoreRequest(image, alt),
        "P_rev": ScoreRequest(image, q, report=REPORT, instruction="no_yes"),
        "A_rev": ScoreRequest(image, q, instruction="no_yes"),
        "P_unc": ScoreRequest(image, q, report=REPORT, instruction="yes_no_uncertain"),
        "A_unc": ScoreRequest(image, q, instruction="yes_no_uncertain"),
        "P_tf": ScoreRequest(image, q, report=REPORT, order="text_first"),
        "A_tf": ScoreRequest(image, q, order="text_first"),
    }
    for control in TEXT_CONTROLS[1:]:
        text = apply_text_control(control, REPORT, finding=FINDING, label=1, case_id=case_id)
        out[f"P_tc_{control}"] = ScoreRequest(image, q, report=text)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-gemma3", choices=["tiny-gemma3", "tiny-llava", "tiny-qwen2vl"])
    ap.add_argument("--cases", type=int, default=2, help="cases; each has a source and a substitute image")
    ap.add_argument("--image-tokens", type=int, default=256)
    ap.add_argument("--answer-tokens", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trie-min-saved", type=int, default=None,
                    help="HFVLM.trie_min_saved_tokens (default: the model's): smallest saving that makes a trie node")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    model = build_tiny(args.model, seed=args.seed, device=args.device, dtype=args.dtype,
                       image_tokens=args.image_tokens, batch_size=args.batch_size)
    use_demo_threads(model.device)  # as get_model does for the demo models on the CPU
    if args.trie_min_saved is not None:
        model.trie_min_saved_tokens = args.trie_min_saved
    rng = np.random.default_rng(args.seed)
    images = [rng.integers(0, 256, (512, 512), dtype=np.uint8) for _ in range(2 * args.cases + 1)]
    per_image = [arms(im, case_id=f"case{k // 2}") for k, im in enumerate(images[1:])]
    names = list(per_image[0])
    by_arm = {a: [p[a] for p in per_image] for a in names}
    model.score_yes_no([r for r in arms(images[0], case_id="warm").values()][:3], answer_tokens=args.answer_tokens)

    model.stats.update(prefill_tokens=0, forward_passes=0, requests=0)
    start = time.perf_counter()
    single = {a: model.score_yes_no(reqs, answer_tokens=args.answer_tokens) for a, reqs in by_arm.items()}
    t_single, tok_single = time.perf_counter() - start, model.stats["prefill_tokens"]
    model.stats.update(prefill_tokens=0, forward_passes=0, requests=0)
    pooled_requests = [p[a] for p in per_image for a in names]
    start = time.perf_counter()
    pooled = model.score_yes_no(pooled_requests, answer_tokens=args.answer_tokens)
    t_pooled, tok_pooled = time.perf_counter() - start, model.stats["prefill_tokens"]
    single_flat = [single[a][k] for k in range(len(per_image)) for a in names]
    diff = max(abs(x[key] - y[key]) for x, y in zip(single_flat, pooled)
               for key in ("logit_yes", "logit_no", "family_logit_yes", "family_logit_no"))
    text_first = sum(r["n_input_tokens"] for r, req in zip(pooled, pooled_requests) if req.order == "text_first")
    result = {
        "model": args.model, "image_tokens": args.image_tokens, "trie_min_saved_tokens": model.trie_min_saved_tokens, "cases": args.cases, "images": len(per_image),
        "arms": len(names), "requests": len(pooled_requests), "answer_tokens": args.answer_tokens,
        "one_arm_at_a_time": {"prefill_tokens": tok_single, "seconds": t_single},
        "all_arms_together": {"prefill_tokens": tok_pooled, "seconds": t_pooled},
        "prefill_token_ratio": tok_single / tok_pooled, "speedup": t_single / t_pooled,
        "text_first_prefill_tokens": text_first,
        "prefill_token_ratio_image_first_arms": (tok_single - text_first) / (tok_pooled - text_first),
        "max_abs_logit_diff": diff,
        "same_generated_answers": all(x["generated"] == y["generated"] for x, y in zip(single_flat, pooled)),
    }
    print(f"{args.model}: {len(names)} arms x {len(per_image)} images = {len(pooled_requests)} requests, "
          f"{args.image_tokens} image tokens, {args.answer_tokens} answer tokens")
    for key in ("one_arm_at_a_time", "all_arms_together"):
        r = result[key]
        print(f"  {key:18s} prefill tokens {r['prefill_tokens']:8d}  {r['seconds']:8.2f} s")
    print("  " + verdict("prefill tokens one-at-a-time / together", result["prefill_token_ratio"], at_least=3))
    print("  " + verdict(f"wall time one-at-a-time / together ({args.device})", result["speedup"], at_least=1.0))
    print(f"  max |logit diff| = {diff:.2e}; same generated answers: {result['same_generated_answers']}")
    print(f"  the {sum(a.endswith('_tf') for a in names)} text-first arms share no prefix ({text_first} tokens either way); "
          f"image-first arms alone: {result['prefill_token_ratio_image_first_arms']:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()

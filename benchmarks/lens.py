"""Benchmark: logit-lens readout vs the plain forward pass on tiny-gemma3, in one process.

The same left-padded batches of ModaLens prompts go once through a plain forward pass with
``logits_to_keep=1`` (the readout) and once through :func:`shovir_core.models.lens.layer_logits`
(hooks on every decoder layer, final norm + the two readout rows per layer). Target (ModaLens
App. N.1 in this repository's issue): the lens adds at most 20 % to the plain time. Each timing is
the best of ``--repeat`` runs, the two paths alternating within each repeat so that load from other
processes falls on both, with torch on the demo models' one thread (``models/threads.py``): with
torch's default two threads on a loaded 2-core machine the ratio measured thread contention
(1.06x idle, 3.5x under load), not the lens.

    python benchmarks/lens.py [--requests 64] [--repeat 3] [--layers 6]
    python benchmarks/lens.py --case all14 [--layers 62] [--sentences 6]
    python benchmarks/lens.py --case knockout [--layers 62] [--requests 13]

``--case all14`` times what the App. N.1 all-14 lens arms do: each image's 14 questions after one
report, read with the shared image+report prefix prefilled once (the default) against every prompt
run whole (``prefix_reuse`` off) -- then the same for App. N.3's attention-mass baseline
(:func:`~shovir_core.models.residuals.image_attention_mass`, eager attention) -- on ``--layers``
decoder layers at the width of the rehearsal's 62-layer MedGemma-27B stand-in
(:data:`~shovir_core.models.registry.DEEP_TWIN_WIDTH`) and a report of ``--sentences`` sentences. No limit
is set for it in the issue; the ratio is printed. Measured 2026-12-02 (at hidden 32, the stand-in's width
then) on the 2-core machine with a rehearsal running beside it (112 requests, best of 2): 2.58x at 62 layers and 6 sentences (2.25 s -> 0.87 s),
0.98x without a report (the shared prefix is the image alone: no gain).
The attention-mass baseline, the same day with a rehearsal and a CI run beside it (56 requests, best of
2): 2.65x at 62 layers and 6 sentences (7.67 s -> 2.89 s; equal to whole prompts within 3e-8).

``--case knockout`` times App. N.2's knockout sweep (:func:`~shovir_core.models.lens.layer_logits_each`: the
clean pass and cumulative report knockouts from the paper's 21 start layers) resumed from the clean pass
against whole passes, on the 62-layer stand-in. No limit is set for it in the issue; the arrays must be
identical. Measured 2026-12-06 on the idle 2-core machine (13 requests, 6 sentences, the paper's start
layers, best of 2): 1.69x (3.78 s -> 2.24 s), arrays identical.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from shovir_core.models import ScoreRequest
from shovir_core.models.lens import layer_logits
from shovir_core.models.residuals import image_attention_mass
from shovir_core.models.threads import use_demo_threads
from shovir_core.models.tiny import build_tiny

from limits import verdict


def _best_alternating(fns: dict, repeat: int) -> dict[str, float]:
    """Best wall time of each function over ``repeat`` rounds, the functions alternating within a round."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for key, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[key] = min(best[key], time.perf_counter() - t)
    return best


def all14(args) -> None:
    """A case's 14 questions per image: the shared prefix against whole prompts (same readouts)."""
    from shovir_core.labels import FINDINGS_13
    from shovir_core.models.registry import tiny_dims

    dims = {**tiny_dims(f"tiny-gemma3@{args.layers}"), "layers": args.layers}
    shared = build_tiny("tiny-gemma3", dims=dims, batch_size=16)
    whole = build_tiny("tiny-gemma3", dims=dims, batch_size=16)
    whole.prefix_reuse = False
    use_demo_threads(shared.device)
    rng = np.random.default_rng(0)
    report = " ".join(["The lungs are clear without focal consolidation, effusion or pneumothorax."] * args.sentences)
    questions = [f"Does this chest X-ray show {f.lower()}?" for f in FINDINGS_13]
    questions.append("Does this chest X-ray show any acute cardiopulmonary finding?")
    reqs = [ScoreRequest(img, q, report=report or None)
            for img in (rng.integers(0, 256, (64, 64), dtype=np.uint8) for _ in range(max(1, args.requests // 14)))
            for q in questions]
    a, b = layer_logits(shared, reqs), layer_logits(whole, reqs)
    print(f"{len(reqs)} requests, {args.layers} layers, {args.sentences}-sentence report; "
          f"max |shared - whole| = {float(np.abs(a - b).max()):.2e}")
    best = _best_alternating({"whole": lambda: layer_logits(whole, reqs), "shared": lambda: layer_logits(shared, reqs)},
                             args.repeat)
    print(f"whole prompts: {best['whole']:.3f} s   shared prefix: {best['shared']:.3f} s   "
          f"speed-up {best['whole'] / best['shared']:.2f}x")
    # the probes' attention-mass baseline (App. N.3) on the same requests: eager attention, same sharing
    a, b = image_attention_mass(shared, reqs), image_attention_mass(whole, reqs)
    print(f"attention mass: max |shared - whole| = {float(np.abs(a - b).max()):.2e}")
    best = _best_alternating({"whole": lambda: image_attention_mass(whole, reqs),
                              "shared": lambda: image_attention_mass(shared, reqs)}, args.repeat)
    print(f"attention mass, whole prompts: {best['whole']:.3f} s   shared prefix: {best['shared']:.3f} s   "
          f"speed-up {best['whole'] / best['shared']:.2f}x")


def knockout(args) -> None:
    """App. N.2's knockout sweep: the clean pass and cumulative knockouts from each start layer, resumed from the
    clean pass (the default) against whole passes (``resume=False``); the arrays must be identical."""
    from shovir_core.labels import FINDINGS_13
    from shovir_core.models.lens import Knockout, layer_logits_each, token_spans
    from shovir_core.models.registry import tiny_dims

    dims = {**tiny_dims(f"tiny-gemma3@{args.layers}"), "layers": args.layers}
    vlm = build_tiny("tiny-gemma3", dims=dims, batch_size=16)
    use_demo_threads(vlm.device)
    rng = np.random.default_rng(0)
    report = " ".join(["The lungs are clear without focal consolidation, effusion or pneumothorax."] * args.sentences)
    reqs = [ScoreRequest(rng.integers(0, 256, (64, 64), dtype=np.uint8), f"Does this chest X-ray show {f.lower()}?",
                         report=report) for f in FINDINGS_13[: max(1, min(13, args.requests))]]
    starts = sorted({x if args.layers > 60 else round(x * (args.layers - 1) / 60) for x in _PAPER_STARTS})
    kos = [None, *(Knockout.cumulative("report", s, args.layers, scope="non_image") for s in starts)]
    spans = [token_spans(vlm, r) for r in reqs]
    a = layer_logits_each(vlm, reqs, kos, spans=spans)
    b = layer_logits_each(vlm, reqs, kos, spans=spans, resume=False)
    same = all(np.array_equal(x, y) for x, y in zip(a, b))
    print(f"{len(reqs)} requests, {args.layers} layers, {len(starts)} start layers {starts}: arrays identical: {same}")
    best = _best_alternating({"whole": lambda: layer_logits_each(vlm, reqs, kos, spans=spans, resume=False),
                              "resumed": lambda: layer_logits_each(vlm, reqs, kos, spans=spans)}, args.repeat)
    print(f"whole passes: {best['whole']:.3f} s   resumed from the clean pass: {best['resumed']:.3f} s   "
          f"speed-up {best['whole'] / best['resumed']:.2f}x")
    if not same:
        raise SystemExit("resumed knockouts differ from whole passes")


_PAPER_STARTS = (0, 4, 8, 12, 16, 20, 22, 23, 24, 25, 26, 27, 28, 32, 36, 40, 44, 48, 52, 56, 60)
"""App. N.2's 21 start layers of MedGemma-27B (the mimic profile's ``knockout_layers``), scaled to ``--layers``."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("readout", "all14", "knockout"), default="readout",
                        help="readout: the lens against the plain readout; all14: shared prefix against whole prompts; "
                             "knockout: knockouts resumed from the clean pass against whole passes")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default 6; 62 for all14)")
    parser.add_argument("--sentences", type=int, default=6, help="report sentences (all14)")
    args = parser.parse_args()
    if args.case == "all14":
        args.layers = args.layers or 62
        return all14(args)
    if args.case == "knockout":
        args.layers = args.layers or 62
        return knockout(args)
    args.layers = args.layers or 6
    vlm = build_tiny("tiny-gemma3", dims={"layers": args.layers}, batch_size=16)
    use_demo_threads(vlm.device)
    rng = np.random.default_rng(0)
    reqs = [ScoreRequest(rng.integers(0, 256, (64, 64), dtype=np.uint8), "Does this chest X-ray show edema?",
                         report="FINDINGS: No pulmonary edema. No pneumothorax.\nIMPRESSION: No acute process.")
            for _ in range(args.requests)]
    batches = [vlm._encode([vlm.render(r) for r in reqs[i:i + 16]], [r.image for r in reqs[i:i + 16]])
               for i in range(0, len(reqs), 16)]

    @torch.inference_mode()
    def plain():
        for b in batches:
            vlm.model(**b, use_cache=False, logits_to_keep=1)

    def plain_with_encode():
        for i in range(0, len(reqs), 16):
            b = vlm._encode([vlm.render(r) for r in reqs[i:i + 16]], [r.image for r in reqs[i:i + 16]])
            with torch.inference_mode():
                vlm.model(**b, use_cache=False, logits_to_keep=1)

    best = _best_alternating({"plain": plain_with_encode, "lens": lambda: layer_logits(vlm, reqs), "forward": plain},
                             args.repeat)
    t_plain, t_lens, t_fwd = best["plain"], best["lens"], best["forward"]
    print(f"plain readout (encode + forward): {t_plain:.3f} s   forward only: {t_fwd:.3f} s")
    print(f"logit lens (encode + forward + {args.layers + 1} projections): {t_lens:.3f} s")
    print(verdict("lens / plain", t_lens / t_plain, at_most=1.2))


if __name__ == "__main__":
    main()

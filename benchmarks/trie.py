"""Benchmark: how much text the prefix trie shares, on a real trained model, and what it costs in wall time.

``HFVLM.score_yes_no`` prefills each image's prompt prefix once and, past it, every stretch of text
that several requests share and that saves at least ``trie_min_saved_tokens`` tokens
(:meth:`shovir_core.models.hf.HFVLM._score_trie`). On a tiny model each trie node's extra forward
pass and cache copy can cost about what its tokens save; this script measures that trade on
``ref-vlm`` (the Gemma-3 reference model trained in this repository) with the requests of the
ModaLens main chapter's four ref-vlm arms (report present / absent, with and without the yes/no
instruction) on the first ``--cases`` demo cases, three ways in the same process:

* ``image prefix only`` (``trie_min_saved_tokens`` = 10**9: the two-level scheme, no text nodes);
* ``trie, 16-token minimum`` (the default, ``shovir_core.models.hf.TRIE_MIN_SAVED_TOKENS``);
* ``trie, every shared stretch`` (minimum 1).

It prints prefill tokens, forward passes and the best of ``--repeats`` wall times per setting (the
settings alternate, so machine load spreads over all three) and the ratios against the image-prefix
baseline. All three score the same requests; the largest logit difference between them is printed.

History (2-core CPU, 12 cases = 1,344 requests). With each trie node run on its own -- its prefill a
pass, its suffixes a batch and a decoding loop of their own -- the trie lost on this small model:
67,878 / 19,409 / 17,387 prefill tokens in 110 / 374 / 1,504 passes took 2.95 s / 3.51 s / 10.00 s
(2026-12-06, best of 2; the 16-token trie 0.84x the image prefix alone), so the CPU ran without text
nodes. Packed (``HFVLM._score_packed``: a depth's nodes in one pass, the suffixes of all nodes in
shared batches, each row after its own node's cache), the same tokens take 110 / 136 / 196 passes and
3.03 s / 2.18 s / 2.60 s (2026-12-06, best of 3, 16 requests per pass): the 16-token trie is 1.39x
faster than the image prefix alone and is the default on every device. With ref-vlm's 64 requests per
pass (``shovir_core.models.ref_vlm.SCORE_BATCH``, what this script now runs): 42 / 66 / 102 passes,
3.00 s / 1.64 s / 1.88 s, the trie 1.83x faster (the same day, best of 3). Logits agree to 3.3e-6 across
the settings.

    python benchmarks/trie.py [--cases 12] [--repeats 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time

import pandas as pd
import yaml

from shovir_core import paths
from shovir_core.models import get_model
from shovir_core.protocols import modalens as ml

from limits import verdict

SETTINGS = {"image prefix only": 10 ** 9, "trie, 16-token minimum": 16, "trie, every shared stretch": 1}
ARMS = ("vlm_P", "vlm_A", "vlm_P_instr", "vlm_A_instr")


def requests_of_arms(cases: int) -> tuple[list, int]:
    """The score requests of the four ref-vlm arms of ``params/modalens_tables/demo.yaml`` on the first cases."""
    runs = yaml.safe_load((paths.repo_root() / "params" / "modalens_tables" / "demo.yaml").read_text("utf-8"))["runs"]
    specs = [ml.resolve_spec(dict(runs[k]["spec"])) for k in ARMS]
    first = specs[0]
    ds = ml._dataset(first["dataset"])
    frame, _ = ml.build_cases(first)
    reports = ml._reports(first, frame)
    image_paths = dict(zip(ds.images["image_id"], ds.images["path"]))
    chosen = set(frame["case_id"].iloc[:cases])
    out = []
    for spec in specs:
        trials = ml._trial_frame(spec, frame, reports)
        texts = ml.trial_reports(spec, trials, reports)
        part = trials[trials["case_id"].isin(chosen)]
        ids = pd.unique(pd.concat([part["image_id"], part["sub_image_id"]]))
        images = {i: ml._load_pixels(image_paths[i]) for i in ids}
        out += ml._chunk_requests(spec, part, texts, images)[0]
    return out, first["answer_tokens"]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=12, help="demo cases (each: 14 questions x 2 images x 4 arms)")
    ap.add_argument("--repeats", type=int, default=2, help="timed passes per setting (best is reported)")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args(argv)

    requests, answer_tokens = requests_of_arms(args.cases)
    model = get_model("ref-vlm")
    model.score_yes_no(requests[:16], answer_tokens=answer_tokens)  # warm-up
    results = {k: {"seconds": []} for k in SETTINGS}
    outputs = {}
    for _ in range(args.repeats):
        for key, minimum in SETTINGS.items():
            model.trie_min_saved_tokens = minimum
            model.stats.update(prefill_tokens=0, forward_passes=0)
            start = time.perf_counter()
            outputs[key] = model.score_yes_no(requests, answer_tokens=answer_tokens)
            results[key]["seconds"].append(time.perf_counter() - start)
            results[key].update(prefill_tokens=model.stats["prefill_tokens"], forward_passes=model.stats["forward_passes"])
    base = next(iter(SETTINGS))
    diff = max(abs(a[k] - b[k]) for key in SETTINGS for a, b in zip(outputs[base], outputs[key])
               for k in ("logit_yes", "logit_no"))
    print(f"ref-vlm, {len(requests)} requests ({args.cases} cases x 14 questions x 2 images x {len(ARMS)} arms), "
          f"best of {args.repeats}")
    for key, r in results.items():
        r["best_seconds"] = min(r["seconds"])
        r["speedup_vs_image_prefix"] = results[base]["best_seconds"] / r["best_seconds"] if "best_seconds" in results[base] else 1.0
        print(f"  {key:28s} prefill tokens {r['prefill_tokens']:7d}  passes {r['forward_passes']:5d}  "
              f"{r['best_seconds']:6.2f} s  ({r['speedup_vs_image_prefix']:.2f}x vs image prefix only)")
    print(f"  max |logit difference| between settings: {diff:.1e}")
    print("  " + verdict("trie (16-token minimum, the default) vs image prefix only, wall time",
                         results["trie, 16-token minimum"]["speedup_vs_image_prefix"], at_least=1.0))
    result = {"benchmark": "trie", "model": "ref-vlm", "requests": len(requests), "cases": args.cases,
              "settings": {k: {"trie_min_saved_tokens": SETTINGS[k], **v} for k, v in results.items()},
              "max_abs_logit_diff": diff}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()

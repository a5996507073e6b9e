#!/usr/bin/env bash
# The GPU benchmarks the reproduction map projects GPU-hours from, in one script.
#
# Runs, on one CUDA device, a random-initialised Gemma3 of MedGemma-4B's dimensions (no weights are
# downloaded) through
#   benchmarks/generation.py   ShoViR reports, batched vs one at a time   -> generation-<tag>.json
#   benchmarks/inference.py    ModaLens yes/no readouts (two per trial)   -> inference-<tag>.json
#   benchmarks/inference.py --answer-tokens 8 (readouts + generated answer) -> inference-answer-<tag>.json
# and writes the JSON outputs into benchmarks/results/ (or $RESULTS). Rebuild the book afterwards
# (`shovir book --only reproduction_map`) and the map's GPU columns fill in.
#
#   bash benchmarks/gpu.sh                 # defaults: cuda, bfloat16, MedGemma-4B dims, tag "medgemma-4b"
#   DEVICE=cpu DTYPE=float32 DIMS= TAG=tiny bash benchmarks/gpu.sh   # dry run on the tiny model (CPU)
#
# Environment: DEVICE (cuda), DTYPE (bfloat16), DIMS (--medgemma-4b-dims; empty for the tiny model),
# TAG (medgemma-4b), RESULTS (benchmarks/results), PYTHON (python), IMAGES (32), CASES (16).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEVICE="${DEVICE:-cuda}"
DTYPE="${DTYPE:-bfloat16}"
DIMS="${DIMS---medgemma-4b-dims}"
TAG="${TAG:-medgemma-4b}"
RESULTS="${RESULTS:-$here/results}"
PYTHON="${PYTHON:-python}"
IMAGES="${IMAGES:-32}"
CASES="${CASES:-16}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$RESULTS"
common=(--device "$DEVICE" --dtype "$DTYPE" $DIMS)

echo "== generation: $IMAGES reports, batched vs one at a time"
"$PYTHON" "$here/generation.py" "${common[@]}" --images "$IMAGES" --batch-size "$IMAGES" \
    --max-new-tokens 128 --json "$RESULTS/generation-$TAG.json"
echo "== inference: $CASES cases x 14 questions, prefix reuse vs one request at a time"
"$PYTHON" "$here/inference.py" "${common[@]}" --cases "$CASES" --batch-size 14 \
    --json "$RESULTS/inference-$TAG.json"
echo "== inference with 8 generated answer tokens"
"$PYTHON" "$here/inference.py" "${common[@]}" --cases "$CASES" --batch-size 14 --answer-tokens 8 \
    --json "$RESULTS/inference-answer-$TAG.json"
echo "wrote: $(ls "$RESULTS"/*-"$TAG".json | tr '\n' ' ')"

"""``ref-vlm``: a small Gemma-3 vision-language model trained here, with planted ModaLens behaviour.

The same transformers class as MedGemma (``Gemma3ForConditionalGeneration``: a SigLIP vision tower,
the Gemma-3 multimodal projector, a Gemma-3 text decoder), at toy width (:data:`TRAIN_CONFIG`
``dims``: 6 decoder layers of width 64, 16 image tokens, 64 x 64 inputs), with the Gemma turn
template of ``tiny-gemma3`` and MedGemma's ModaLens prompt (:mod:`~shovir_core.models.prompts`: one
user turn ``[image, "Report: ...\\n\\nQuestion: ..."]``, the answer at the first generated position).

Training (``python -m shovir_core.training.ref_vlm``, :func:`~shovir_core.training.ref_vlm.train`; deterministic, seeded, CPU):
the demo NIH 64-px images of the **training patients** -- every patient of the dataset outside the
ModaLens demo evaluation cohort (:func:`~shovir_core.training.ref_vlm.split_patients`: the patients of the ``modalens`` demo spec
``n_patients: 120, subset_seed: 0, ssim_size: 64``) -- with the template reports of their studies
(:func:`~shovir_core.data.template_reports.template_reports`, routine negatives). The 14 ModaLens
questions (13 findings + composite, default template) are asked with a next-token loss on the
lowercase answer ``yes``/``no`` followed by ``<eos>``. The curriculum:

* **report present** (70 % of the examples): a random training image with either the report of a
  training study (the image being that study's own half of the time) or the template report of a
  random label set (every finding can then be positive, which the few demo studies do not give);
  the target is the **report's** label (u-negative policy; composite = any of the 13);
* **report absent**: a study's own image; the target is **that image's** label.

Positives and negatives are sampled in equal shares for every question.

Planted facts (asserted in the Appendix N chapter on the demo's held-out evaluation patients):

1. with the report in the prompt the answer follows the report, so the image-swap flip rate with
   the report (P) is far below the flip rate without it (A): ``flip_P < flip_A / 3``;
2. without the report the answer comes from the image: the report-absent balanced accuracy on the
   held-out patients is above chance (``> 0.5``; the NIH 64-px labels are weak, so it is modest);
3. with the report present the answer agrees with the report's label on most trials (``> 0.7``; the
   model at this size reads the report's finding imperfectly and over-answers yes when a finding is
   named as absent, so it is not near 1).

``resources/ref_vlm.safetensors`` holds the weights; its metadata carries the training config, the
data hash (the demo dataset manifest SHA-256 and the training-patient list hash) and the training
metrics; ``resources/ref_vlm.json`` repeats them with the weight file's SHA-256 (:func:`fingerprint`).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .spec import ModelSpec

__all__ = ["REF_VLM_SPECS", "TRAIN_CONFIG", "EVAL_COHORT", "WEIGHTS_FILE", "META_FILE", "build_ref_vlm",
           "fingerprint", "resources_dir", "architecture", "wrap_model", "PLANTED_FACTS", "SCORE_BATCH"]

PLANTED_FACTS = {"flip_ratio": 1 / 3, "balanced_accuracy": 0.5, "label_agreement": 0.7}
"""The planted facts of the module docstring as numbers: ``flip_P < flip_A * flip_ratio``, report-absent
balanced accuracy ``> balanced_accuracy``, report-present agreement with the report's label ``> label_agreement``."""

REF_VLM_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("ref-vlm", "ref-vlm", paper="reference", dtype="float32", max_new_tokens=16,
              notes="Gemma3ForConditionalGeneration trained on the demo data (training patients only); "
                    "answers follow the report when it is present, the image when it is absent"),
)
"""The registry entry (:data:`shovir_core.models.REGISTRY` includes it)."""

TRAIN_CONFIG: dict = {
    "seed": 0,
    "steps": 800,
    "batch_size": 32,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "warmup": 20,
    "p_report": 0.7,
    "p_mismatch": 0.5,
    "p_synthetic": 0.6,
    "p_synthetic_positive": 0.15,
    "image_tokens": 16,
    "init_std": 0.02,
    "dims": {"hidden": 64, "layers": 6, "heads": 4, "kv_heads": 2, "intermediate": 128, "image_size": 64,
             "patch_size": 8, "vision_hidden": 48, "vision_intermediate": 96, "vision_layers": 2,
             "vision_heads": 2, "layer_types": ["sliding_attention", "full_attention"] * 3},
    "template_negatives": "routine",
    "policy": "u-negative",
    "dataset": "demo-64px",
}
"""Training settings (hashed into the shipped weights' metadata)."""

EVAL_COHORT: dict = {"dataset": "demo-64px", "ssim_size": 64, "n_patients": 120, "subset_seed": 0}
"""The ModaLens demo evaluation spec whose patients are held out of training."""

SCORE_BATCH = 64
"""The loaded model's ``answer_batch_size``: requests per scoring pass of ``score_yes_no`` (suffix rows after
the packed prefix trie; whole-prompt batches elsewhere, e.g. App. N's lens, keep ``batch_size`` 16). At this width a
pass costs a few milliseconds beyond its tokens, so bigger batches pay: the tables chapter's ref-vlm records
took 104 s at 16, 90 s at 32 and 76-81 s at 64 on the 2-core CPU (2026-12-06, one run each, the same hour)."""

WEIGHTS_FILE = "ref_vlm.safetensors"
META_FILE = "ref_vlm.json"


def resources_dir() -> Path:
    """The package resources folder (where the shipped weights live)."""
    return Path(__file__).resolve().parent.parent / "resources"


def architecture(cfg: dict, *, seed: int):
    """The untrained ``ref-vlm`` (a seeded tiny Gemma-3) of a training config: ``(model, processor, digest)``."""
    from .tiny import tiny_model_and_processor

    return tiny_model_and_processor("tiny-gemma3", seed=seed, image_tokens=int(cfg["image_tokens"]),
                                    dims=dict(cfg["dims"]), std=float(cfg["init_std"]))


def wrap_model(model, processor, source: dict, *, batch_size: int = 16):
    """``model`` and ``processor`` as the ``ref-vlm`` :class:`~shovir_core.models.hf.HFVLM`."""
    from .hf import HFVLM

    return HFVLM(REF_VLM_SPECS[0], model, processor, source=source, batch_size=batch_size)


def fingerprint(meta: dict) -> str:
    """SHA-256 of the shipped weights' identity: training config, data hash and weight-file hash."""
    payload = {"config": meta["config"], "data": meta["data"], "weights_sha256": meta["weights_sha256"]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def build_ref_vlm(spec: ModelSpec | None = None, *, local_path=None, device: str | None = None,
                  dtype: str | None = None, weights: str | Path | None = None):
    """The trained ``ref-vlm`` as an :class:`~shovir_core.models.hf.HFVLM` (weights from ``resources/``)."""
    import torch
    from safetensors.torch import load_file

    from .spec import ModelNotAvailableError

    path = Path(weights) if weights is not None else resources_dir() / WEIGHTS_FILE
    meta_path = resources_dir() / META_FILE if weights is None else Path(weights).with_suffix(".json")
    if not path.is_file() or not meta_path.is_file():
        raise ModelNotAvailableError(f"ref-vlm: weights {path} or metadata {meta_path} missing; train them with "
                                     "`python -m shovir_core.training.ref_vlm`")
    meta = json.loads(meta_path.read_text())
    model, processor, digest = architecture(meta["config"], seed=int(meta["config"]["seed"]))
    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
    if real_missing or unexpected:
        raise RuntimeError(f"ref-vlm: weights do not fit the architecture (missing {real_missing[:3]}, "
                           f"unexpected {unexpected[:3]})")
    model.tie_weights()
    torch_dtype = getattr(torch, dtype) if dtype else torch.float32
    model.to(device=torch.device(device or "cpu"), dtype=torch_dtype).eval()
    source = {"kind": "ref-vlm", "fingerprint": meta["fingerprint"], "config_sha256": digest,
              "weights_sha256": meta["weights_sha256"]}
    vlm = wrap_model(model, processor, source)
    vlm.answer_batch_size = SCORE_BATCH
    return vlm
